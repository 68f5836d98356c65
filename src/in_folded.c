/*
 * in_folded.c — STUB (issue 3 in progress): reading folded stacks.
 */
#include "trace.h"

tm_status tm_folded_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err) {
    (void)t, (void)buf, (void)len;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "folded input: not yet");
}
