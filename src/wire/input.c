/*
 * input.c — the input front end (see input.h). It runs before any format is
 * detected, so every reader sees the same rules for what it is given, and a
 * .pftrace.gz opens as Trace Processor opens it.
 */
#include "wire/inflate.h" /* tm_decompress */
#include "wire/input.h"   /* tm_input_open */

/* Zero bytes is a valid empty protobuf message, but no recorder writes one
 * on purpose: it is a failed capture or copy, so say so rather than print an
 * empty profile. Relay answers it with NotEnoughSamples. */
static tm_status fail_empty(tm_error *err, bool relay, const char *what) {
    return tm_fail(err, TM_ERR_EMPTY, 0, relay ? "NotEnoughSamples" : NULL, "empty input: %s", what);
}

tm_status tm_input_open(tm_mem *mem, const void *buf, size_t len, const tm_limits *lim, bool relay,
                        tm_input *in, tm_error *err) {
    memset(in, 0, sizeof *in);
    in->bytes = (tm_bytes){buf, len};
    if (len > lim->max_input_bytes)
        return tm_fail(err, TM_ERR_LIMIT, lim->max_input_bytes, relay ? "ExceedSizeLimit" : NULL,
                       "input is %zu bytes, more than max_input_bytes (%llu)", len,
                       (unsigned long long)lim->max_input_bytes);
    if (len == 0) return fail_empty(err, relay, "0 bytes");
    tm_framing f = tm_framing_of(in->bytes);
    if (f == TM_FRAMING_NONE) return TM_OK;
    if (relay)
        return tm_fail(err, TM_ERR_UNSUPPORTED, 0, "InvalidSampledProfile",
                       "%s-compressed input: Relay's converter reads uncompressed traces (decompress it, or "
                       "leave Relay mode)",
                       tm_framing_name(f));
    uint64_t at = 0;
    const char *why = NULL;
    tm_status st = tm_decompress(mem, f, in->bytes, lim->max_inflated_bytes, &in->bytes, &in->copy_cap, &at, &why);
    if (st != TM_OK) {
        in->bytes = (tm_bytes){NULL, 0};
        if (st == TM_ERR_LIMIT)
            return tm_fail(err, st, at, NULL, "%s-compressed input: %s (%llu bytes)", tm_framing_name(f), why,
                           (unsigned long long)lim->max_inflated_bytes);
        return tm_fail(err, st, at, NULL, "%s-compressed input: %s", tm_framing_name(f), why);
    }
    in->copy = (uint8_t *)(uintptr_t)in->bytes.data;
    in->framing = tm_framing_name(f);
    if (in->bytes.len == 0) return fail_empty(err, relay, f == TM_FRAMING_GZIP ? "the gzip stream holds 0 bytes"
                                                                               : "the zstd stream holds 0 bytes");
    return TM_OK;
}

void tm_input_close(tm_mem *mem, tm_input *in) {
    if (in->copy) tm_mem_free(mem, in->copy, in->copy_cap);
    memset(in, 0, sizeof *in);
}
