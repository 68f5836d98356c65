/*
 * fuzz_folded.c — fuzz target for folded-stack input ("a;b;c COUNT"
 * lines): parse, then write folded and pprof from the result.
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_options opts = {.input = TM_INPUT_FOLDED};
    tm_trace *t = fuzz_parse(data, size, &opts);
    tm_error err;
    if (t) {
        size_t written = 0;
        tm_sink sink = {.write = fuzz_discard, .ctx = &written};
        fuzz_check_error(tm_write_folded(t, NULL, &sink, &err), &err);
        tm_pprof_options pprof = {.uncompressed = 1};
        fuzz_check_error(tm_write_pprof(t, &pprof, &sink, &err), &err);
    }
    tm_trace_free(t);
    return 0;
}
