/*
 * conformance.h — a strict check of the traces our writers produce (the
 * recorder, bench/gen_trace, the test trace builder's defaults, the bundled
 * examples): every repeated scalar field is encoded as its proto declares
 * it. Perfetto's protos declare none of the fields below [packed=true], and
 * Perfetto's own decoder then reads only the unpacked form, so a packed
 * list is silently lost there (our reader accepts both, as protobuf
 * requires of a reader).
 */
#ifndef TM_TEST_CONFORMANCE_H
#define TM_TEST_CONFORMANCE_H

#include <stddef.h>
#include <stdint.h>

/* The number of deviations in the trace buf[0, len) (-1: not a readable
 * trace); the first is described in msg. */
long tc_check_trace(const uint8_t *buf, size_t len, char *msg, size_t msg_size);

#endif
