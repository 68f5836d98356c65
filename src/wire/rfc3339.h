/*
 * rfc3339.h — RFC 3339 timestamps ("2024-05-01T12:00:00.123456789Z") to
 * and from Unix nanoseconds, in the proleptic Gregorian calendar with no
 * leap seconds: Sentry's transaction profiles (Sample v1) carry their start
 * time this way.
 */
#ifndef TM_RFC3339_H
#define TM_RFC3339_H

#include "common/base.h" /* tm_bytes */

/* Longest text tm_rfc3339_format writes: "-292277-01-01T00:00:00.000000000Z". */
#define TM_RFC3339_MAX 40

/* Writes unix_ns as UTC with nine fraction digits ("...T12:00:00.000000000Z")
 * into out (room for TM_RFC3339_MAX bytes, not NUL-terminated); returns the
 * length. Years before 0 or after 9999 are written with a sign or more
 * digits and are not read back. */
size_t tm_rfc3339_format(int64_t unix_ns, char *out);

/* Reads "YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|-HH:MM)" ('t', 'z' and a
 * blank for 'T' accepted; fraction digits past nanoseconds dropped) into
 * Unix nanoseconds. Returns 1, or 0 when s is not such a timestamp or its
 * time does not fit an int64_t. */
int tm_rfc3339_parse(tm_bytes s, int64_t *unix_ns);

#endif
