/*
 * input.h — what every input goes through before a decoder reads it,
 * shared by tm_trace_parse and tm_db_new: the size limit
 * (max_input_bytes), gzip or zstd compression around the whole input
 * (decompressed within max_inflated_bytes), and empty input (TM_ERR_EMPTY).
 */
#ifndef TM_INPUT_H
#define TM_INPUT_H

#include "common/alloc.h" /* tm_mem, tm_bytes */

typedef struct tm_input {
    tm_bytes bytes;     /* what the decoder reads: the caller's buffer or its decompressed copy */
    uint8_t *copy;      /* the decompressed copy, NULL for an uncompressed input */
    size_t copy_cap;    /* its allocated size */
    const char *framing;/* "gzip" or "zstd" for a compressed input, else NULL */
} tm_input;

/* Checks and unwraps buf[0..len). relay: Relay's semantics (its converter
 * reads the bytes as they are, so compressed input is refused, and errors
 * carry its ProfileError names). The copy, if any, is allocated from mem and
 * must outlive everything decoded from it: free it with tm_input_close. */
tm_status tm_input_open(tm_mem *mem, const void *buf, size_t len, const tm_limits *lim, bool relay,
                        tm_input *in, tm_error *err);
void tm_input_close(tm_mem *mem, tm_input *in);

#endif
