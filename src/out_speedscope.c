/*
 * out_speedscope.c — STUB (issue 3 in progress): speedscope JSON.
 */
#include "aggregate.h"

tm_status tm_write_speedscope(const tm_trace *t, const tm_speedscope_options *opts, const tm_sink *out,
                              tm_error *err) {
    (void)t, (void)opts, (void)out;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "speedscope: not yet");
}
