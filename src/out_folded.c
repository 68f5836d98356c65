/*
 * out_folded.c — STUB (issue 3 in progress): folded stacks and their diff.
 */
#include "aggregate.h"

tm_status tm_write_folded(const tm_trace *t, const tm_folded_options *opts, const tm_sink *out, tm_error *err) {
    (void)t, (void)opts, (void)out;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "folded: not yet");
}

tm_status tm_write_folded_diff(const tm_trace *base, const tm_trace *now, const tm_folded_options *opts,
                               const tm_sink *out, tm_error *err) {
    (void)base, (void)now, (void)opts, (void)out;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "folded diff: not yet");
}
