/*
 * in_sample_v2.c — STUB (issue 3 in progress): reading Sample v2 chunks.
 */
#include "trace.h"

tm_status tm_sample_v2_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err) {
    (void)t, (void)buf, (void)len;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "Sample v2 input: not yet");
}
