/*
 * fuzz_sample_v2.c — fuzz target for JSON inputs: Sample v2 chunks
 * (tm_trace_parse with TM_INPUT_SAMPLE_V2, then re-exported as Sample v2
 * with the input as its own metadata) and chunk metadata
 * (tm_sample_v2_check_meta).
 */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_error err;
    fuzz_check_error(tm_sample_v2_check_meta((const char *)data, size, &err), &err);
    tm_options opts = {.input = TM_INPUT_SAMPLE_V2};
    tm_trace *t = fuzz_parse(data, size, &opts);
    if (t) {
        size_t written = 0;
        tm_sink sink = {.write = fuzz_discard, .ctx = &written};
        tm_sample_v2_options v2 = {.meta_json = (const char *)data, .meta_len = size};
        fuzz_check_error(tm_write_sample_v2(t, &v2, &sink, &err), &err);
        fuzz_check_error(tm_write_folded(t, NULL, &sink, &err), &err);
    }
    tm_trace_free(t);
    return 0;
}
