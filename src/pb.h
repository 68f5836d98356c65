/*
 * pb.h — protobuf wire-format pull reader (https://protobuf.dev/programming-guides/encoding/).
 *
 * A tm_pb_reader walks one message's bytes [p, end) and yields one field at a
 * time: tag, wire type, and either the scalar value or a view of the
 * length-delimited payload. It never allocates and never recurses: to read
 * a nested message the caller opens a new reader over the field's bytes.
 * Every varint and length is bounds-checked. Groups (wire types 3/4) are
 * rejected as malformed, as Perfetto never writes them.
 *
 * Packed repeated scalars are read with tm_pb_packed_next over the
 * field's bytes; unpacked ones arrive as separate fields, so callers accept
 * both shapes for every repeated scalar.
 *
 * Errors leave r->err (a static message) and r->p at the offending byte.
 */
#ifndef TM_PB_H
#define TM_PB_H

#include "base.h" /* tm_bytes */

enum { TM_PB_VARINT = 0, TM_PB_I64 = 1, TM_PB_LEN = 2, TM_PB_I32 = 5 };
enum { TM_PB_OK = 0, TM_PB_DONE = 1, TM_PB_ERROR = 2 };

typedef struct tm_pb_reader {
    const uint8_t *p, *end;
    const char *err;      /* set on TM_PB_ERROR */
    tm_status err_code;   /* TM_ERR_TRUNCATED or TM_ERR_MALFORMED */
} tm_pb_reader;

typedef struct tm_pb_field {
    uint32_t num;
    uint32_t wire;
    uint64_t val;        /* VARINT, I64, I32 */
    tm_bytes bytes;      /* LEN */
    const uint8_t *start;/* first byte of the tag */
} tm_pb_field;

static inline tm_pb_reader tm_pb_reader_of(tm_bytes b) {
    tm_pb_reader r = {b.data, b.data + b.len, NULL, TM_OK};
    return r;
}

/* Decodes a varint at *pp (< end). Returns 0 on success, else an error
 * (1 truncated, 2 overlong). */
static inline int tm_pb_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    if (TM_LIKELY(p < end && *p < 0x80)) {
        *out = *p;
        *pp = p + 1;
        return 0;
    }
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        if (p >= end) return 1;
        uint8_t b = *p++;
        if (shift == 63 && b > 1) return 2;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *out = v;
            *pp = p;
            return 0;
        }
    }
    return 2;
}

static inline int tm_pb_fail(tm_pb_reader *r, const uint8_t *at, tm_status code, const char *msg) {
    r->p = at;
    r->err = msg;
    r->err_code = code;
    return TM_PB_ERROR;
}

/* The general field decoder (pb.c); tm_pb_next inlines the common case. */
int tm_pb_next_slow(tm_pb_reader *r, tm_pb_field *f);

/* Reads the next field. Returns TM_PB_OK, TM_PB_DONE at the end, or
 * TM_PB_ERROR. Fields with a one-byte tag and a one-byte value or length,
 * most of a profile trace, never leave this function. */
static inline int tm_pb_next(tm_pb_reader *r, tm_pb_field *f) {
    const uint8_t *p = r->p;
    if (p >= r->end) return TM_PB_DONE;
    if (TM_LIKELY(p[0] >= 8 && p[0] < 0x80 && r->end - p >= 2 && p[1] < 0x80)) {
        uint8_t wire = p[0] & 7;
        if (wire == TM_PB_VARINT) {
            f->start = p;
            f->num = p[0] >> 3;
            f->wire = wire;
            f->val = p[1];
            r->p = p + 2;
            return TM_PB_OK;
        }
        if (wire == TM_PB_LEN && (size_t)(r->end - p - 2) >= p[1]) {
            f->start = p;
            f->num = p[0] >> 3;
            f->wire = wire;
            f->val = 0;
            f->bytes.data = p + 2;
            f->bytes.len = p[1];
            r->p = p + 2 + p[1];
            return TM_PB_OK;
        }
    }
    return tm_pb_next_slow(r, f);
}

/* Iterates the varints of a packed field. Returns TM_PB_OK with *out set,
 * TM_PB_DONE, or TM_PB_ERROR (truncated/overlong element). */
static inline int tm_pb_packed_next(tm_pb_reader *r, uint64_t *out) {
    if (r->p >= r->end) return TM_PB_DONE;
    int e = tm_pb_varint(&r->p, r->end, out);
    if (e) return tm_pb_fail(r, r->p, e == 1 ? TM_ERR_TRUNCATED : TM_ERR_MALFORMED,
                             e == 1 ? "truncated packed varint" : "overlong packed varint");
    return TM_PB_OK;
}

/* Counts the elements of a packed varint field (no validation beyond what
 * is needed to count). */
static inline size_t tm_pb_packed_count(tm_bytes b) {
    size_t n = 0;
    for (size_t i = 0; i < b.len; i++) n += b.data[i] < 0x80;
    return n;
}

#endif
