/*
 * fuzz_common.h — what the fuzz targets share: the libFuzzer entry point's
 * declaration, a sink that discards output (counting it, so writers run in
 * full), a check that a failure was reported properly, and a parse that
 * applies that check.
 */
#ifndef TM_FUZZ_COMMON_H
#define TM_FUZZ_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tracemill.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static inline int fuzz_discard(void *ctx, const void *data, size_t len) {
    (void)data;
    *(size_t *)ctx += len;
    return 0;
}

/* A failing call must say what went wrong: a known code and a message. */
static inline void fuzz_check_error(tm_status st, const tm_error *err) {
    if (st == TM_OK) return;
    if (err->code != st || st > TM_ERR_EMPTY || !memchr(err->message, 0, sizeof err->message) ||
        !err->message[0])
        abort();
}

/* tm_trace_parse with its contract checked: an error is reported properly,
 * and a trace comes back exactly when the status is TM_OK. */
static inline tm_trace *fuzz_parse(const uint8_t *data, size_t size, const tm_options *opts) {
    tm_trace *t = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(data, size, opts, &t, &err);
    fuzz_check_error(st, &err);
    if ((st == TM_OK) != (t != NULL)) abort();
    return t;
}

#endif
