/*
 * pb_write.h — protobuf wire-format encoding (the writer side of pb.h;
 * https://protobuf.dev/programming-guides/encoding/), used by out_pprof.c.
 *
 * Two layers. Raw encoders write a varint, a tag or a length prefix at a
 * pointer the caller has room behind and return the new end; messages are
 * built by first computing their size (tm_pbw_varint_len) or by encoding a
 * small sub-message into a scratch array and copying it behind its prefix.
 * A tm_pbw stream is a caller-owned buffer that hands its bytes to a flush
 * callback whenever it fills, so a message of any size is written in
 * bounded memory: the callback sees consecutive slices of one byte stream
 * (not message-aligned), in order.
 *
 * No allocation, no recursion. Not thread-safe; one stream per output.
 */
#ifndef TM_PB_WRITE_H
#define TM_PB_WRITE_H

#include "common/base.h" /* tm_status */
#include "wire/pb.h"   /* TM_PB_VARINT, TM_PB_LEN */

enum { TM_PBW_VARINT_MAX = 10 };

static inline size_t tm_pbw_varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

static inline uint8_t *tm_pbw_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static inline uint8_t *tm_pbw_tag(uint8_t *p, uint32_t field, uint32_t wire) {
    return tm_pbw_varint(p, (uint64_t)field << 3 | wire);
}

/* A varint field. Negative int64 values go in as (uint64_t) (10 bytes), as
 * protobuf encodes int64. */
static inline uint8_t *tm_pbw_uint(uint8_t *p, uint32_t field, uint64_t v) {
    return tm_pbw_varint(tm_pbw_tag(p, field, TM_PB_VARINT), v);
}

/* Size of a varint field on the wire, tag included. */
static inline size_t tm_pbw_uint_len(uint32_t field, uint64_t v) {
    return tm_pbw_varint_len((uint64_t)field << 3) + tm_pbw_varint_len(v);
}

/* Tag and length prefix of a length-delimited field; its len payload bytes
 * follow. */
static inline uint8_t *tm_pbw_len(uint8_t *p, uint32_t field, size_t len) {
    return tm_pbw_varint(tm_pbw_tag(p, field, TM_PB_LEN), len);
}

/* ---- stream ---- */

/* Receives the next len bytes of the stream; returns TM_OK or an error,
 * after which the stream drops everything. */
typedef tm_status (*tm_pbw_flush_fn)(void *ctx, const uint8_t *data, size_t len);

typedef struct tm_pbw {
    uint8_t *buf;
    size_t len, cap;
    tm_pbw_flush_fn flush;
    void *ctx;
    tm_status st; /* the first flush error */
} tm_pbw;

static inline void tm_pbw_init(tm_pbw *w, uint8_t *buf, size_t cap, tm_pbw_flush_fn flush, void *ctx) {
    w->buf = buf;
    w->len = 0;
    w->cap = cap;
    w->flush = flush;
    w->ctx = ctx;
    w->st = TM_OK;
}

/* Hands the buffered bytes to the callback (nothing if empty). */
void tm_pbw_flush(tm_pbw *w);

/* Room for n contiguous bytes (n <= cap): returns where to write them;
 * finish with tm_pbw_commit. Flushes first when they do not fit. */
static inline uint8_t *tm_pbw_reserve(tm_pbw *w, size_t n) {
    if (TM_UNLIKELY(w->cap - w->len < n)) tm_pbw_flush(w);
    return w->buf + w->len;
}
static inline void tm_pbw_commit(tm_pbw *w, const uint8_t *end) { w->len = (size_t)(end - w->buf); }

/* Appends n bytes of any size, flushing as the buffer fills. */
void tm_pbw_append(tm_pbw *w, const void *data, size_t n);

/* A length-delimited field whose payload (a string or an encoded message)
 * may be of any size. */
void tm_pbw_bytes_field(tm_pbw *w, uint32_t field, const void *data, size_t n);

/* Flushes the rest; returns TM_OK or the first flush error. */
tm_status tm_pbw_finish(tm_pbw *w);

#endif
