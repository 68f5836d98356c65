/*
 * sentry_json.h — what the two Sentry writers (Sample v1 transaction
 * profiles, out_sample_v1.c, and Sample v2 chunks, out_sample_v2.c) share:
 * reading ids and strings from metadata parsed with jansson, writing
 * jansson values with the JSON writer, and the debug images made from the
 * profile's native mappings.
 */
#ifndef TM_SENTRY_JSON_H
#define TM_SENTRY_JSON_H

#include <jansson.h>

#include "profile/profile.h" /* tm_profile */
#include "wire/json_write.h" /* tm_jw */

/* Whether v is the string lit exactly (strings may hold NULs). */
int tm_sentry_str_is(const json_t *v, const char *lit);

/* Relay's EventId: a UUID, simple or hyphenated, as 32 lowercase hex
 * digits into out. Returns 0 when v is not one. */
int tm_sentry_event_id(const json_t *v, char out[33]);

/* Writes a jansson value (strings, numbers, literals, containers). */
void tm_sentry_write_value(tm_jw *w, const json_t *v);

/* Debug images for native mappings with a build id, first encounter first,
 * deduplicated on (code_file, start), each preceded by ',' when comma or
 * after the first. Returns how many were written. */
size_t tm_sentry_write_images(tm_jw *w, const tm_profile *p, int comma);

/* Whether the profile has a mapping tm_sentry_write_images would write. */
int tm_sentry_has_images(const tm_profile *p);

#endif
