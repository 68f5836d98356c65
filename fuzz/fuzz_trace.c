/*
 * fuzz_trace.c — fuzz target for the whole Perfetto decode: tm_trace_parse
 * in the default mode and in Relay mode (Relay's limits), then every
 * exporter on each result (Sample v2, report, pprof, folded, speedscope,
 * flame graph). Failures must be clean errors; successes must export.
 */
#include "fuzz_common.h"

static void export_all(const tm_trace *t) {
    size_t written = 0;
    tm_sink sink = {.write = fuzz_discard, .ctx = &written};
    tm_error err;
    tm_status st = tm_write_sample_v2(t, NULL, &sink, &err);
    fuzz_check_error(st, &err);
    fuzz_check_error(tm_write_report(t, &sink, &err), &err);
    tm_pprof_options pprof = {.uncompressed = 1};
    fuzz_check_error(tm_write_pprof(t, &pprof, &sink, &err), &err);
    fuzz_check_error(tm_write_folded(t, NULL, &sink, &err), &err);
    fuzz_check_error(tm_write_speedscope(t, NULL, &sink, &err), &err);
    fuzz_check_error(tm_write_flamegraph(t, NULL, &sink, &err), &err);
    fuzz_check_error(tm_write_folded_diff(t, t, NULL, &sink, &err), &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const tm_options modes[] = {
        {.input = TM_INPUT_PERFETTO},
        {.mode = TM_MODE_RELAY, .input = TM_INPUT_PERFETTO},
    };
    for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
        tm_options opts = modes[m];
        /* small ceilings keep each run fast while still reaching every limit */
        opts.limits.max_samples = 100000;
        opts.limits.max_inflated_bytes = 16u << 20;
        tm_trace *t = fuzz_parse(data, size, &opts);
        if (t) {
            const tm_trace_stats *s = tm_trace_get_stats(t);
            if (s->bytes != size) abort();
            export_all(t);
        }
        tm_trace_free(t);
    }
    return 0;
}
