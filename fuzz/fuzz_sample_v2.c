/*
 * fuzz_sample_v2.c — fuzz target for JSON inputs: Sample v2 chunks
 * (tm_trace_parse with TM_INPUT_SAMPLE_V2, then re-exported as Sample v2
 * with the input as its own metadata) and chunk metadata
 * (tm_sample_v2_check_meta, and read once as a tm_chunk_meta, which must
 * give the same errors and output as the JSON given again).
 */
#include "fuzz_common.h"

static int same_error(tm_status a, const tm_error *ea, tm_status b, const tm_error *eb) {
    return a == b && (a == TM_OK || (ea->offset == eb->offset && !ea->reason == !eb->reason &&
                                     (!ea->reason || strcmp(ea->reason, eb->reason) == 0) &&
                                     strcmp(ea->message, eb->message) == 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_error err, err2;
    tm_status st = tm_sample_v2_check_meta((const char *)data, size, &err);
    fuzz_check_error(st, &err);
    tm_chunk_meta *meta = NULL;
    if (tm_chunk_meta_new((const char *)data, size, &meta, &err2) != TM_OK) abort();
    if (!same_error(tm_chunk_meta_check(meta, &err2), &err2, st, &err)) abort();
    size_t len;
    const char *platform = tm_chunk_meta_string(meta, "platform", &len);
    if (platform ? strlen(platform) > len || platform[len] : len) abort();
    tm_options opts = {.input = TM_INPUT_SAMPLE_V2};
    tm_trace *t = fuzz_parse(data, size, &opts);
    if (t) {
        size_t written = 0, written2 = 0;
        tm_sink sink = {.write = fuzz_discard, .ctx = &written}, sink2 = {.write = fuzz_discard, .ctx = &written2};
        tm_sample_v2_options v2 = {.meta_json = (const char *)data, .meta_len = size}, v2_read = {.meta = meta};
        st = tm_write_sample_v2(t, &v2, &sink, &err);
        fuzz_check_error(st, &err);
        if (!same_error(tm_write_sample_v2(t, &v2_read, &sink2, &err2), &err2, st, &err) || written2 != written)
            abort();
        fuzz_check_error(tm_write_folded(t, NULL, &sink, &err), &err);
    }
    tm_trace_free(t);
    tm_chunk_meta_free(meta);
    return 0;
}
