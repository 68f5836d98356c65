/*
 * out_flamegraph.c — STUB (issue 3 in progress): SVG flame graphs.
 */
#include "aggregate.h"

tm_status tm_write_flamegraph(const tm_trace *t, const tm_flamegraph_options *opts, const tm_sink *out,
                              tm_error *err) {
    (void)t, (void)opts, (void)out;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "svg: not yet");
}

tm_status tm_write_flamegraph_diff(const tm_trace *base, const tm_trace *now, const tm_flamegraph_options *opts,
                                   const tm_sink *out, tm_error *err) {
    (void)base, (void)now, (void)opts, (void)out;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "svg diff: not yet");
}
