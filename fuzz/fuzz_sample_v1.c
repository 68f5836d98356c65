/*
 * fuzz_sample_v1.c — fuzz target for Sentry Sample v1 transaction profiles:
 * the input read as Sample v1 (and as whatever detection makes of it),
 * checked as v1 metadata, and written back as Sample v1 (with the input as
 * its metadata, truncating or not), which must read back as Sample v1.
 */
#include "fuzz_common.h"

static int collect(void *ctx, const void *data, size_t len) {
    struct {
        uint8_t *p;
        size_t len, cap;
    } *b = ctx;
    if (b->len + len > b->cap) {
        size_t cap = (b->len + len) * 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return 1;
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
    return 0;
}

/* What the writer produced must be a profile the reader takes. */
static void check_reads_back(const tm_trace *t, const tm_sample_v1_options *o) {
    struct {
        uint8_t *p;
        size_t len, cap;
    } out = {0};
    tm_sink sink = {.write = collect, .ctx = &out};
    tm_error err;
    tm_status st = tm_write_sample_v1(t, o, &sink, &err);
    fuzz_check_error(st, &err);
    if (st == TM_OK) {
        tm_options v1 = {.input = TM_INPUT_SAMPLE_V1};
        tm_trace *back = NULL;
        if (tm_trace_parse(out.p, out.len, &v1, &back, &err) != TM_OK) abort();
        tm_trace_free(back);
    }
    free(out.p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_error err;
    fuzz_check_error(tm_sample_v1_check_meta((const char *)data, size, &err), &err);
    tm_options auto_opts = {0};
    tm_trace_free(fuzz_parse(data, size, &auto_opts));
    tm_options opts = {.input = TM_INPUT_SAMPLE_V1};
    tm_trace *t = fuzz_parse(data, size, &opts);
    if (t) {
        tm_sample_v1_options plain = {0}, meta = {.meta_json = (const char *)data, .meta_len = size,
                                                   .truncate = (int)(size & 1)};
        check_reads_back(t, &plain);
        check_reads_back(t, &meta);
        size_t written = 0;
        tm_sink sink = {.write = fuzz_discard, .ctx = &written};
        fuzz_check_error(tm_write_folded(t, NULL, &sink, &err), &err);
    }
    tm_trace_free(t);
    return 0;
}
