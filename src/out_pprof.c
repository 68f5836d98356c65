/*
 * out_pprof.c — STUB (issue 3 in progress): the pprof exporter.
 */
#include "aggregate.h"

tm_status tm_write_pprof(const tm_trace *t, const tm_pprof_options *opts, const tm_sink *out, tm_error *err) {
    (void)t, (void)opts, (void)out;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "pprof: not yet");
}
