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

/* Reads the next field. Returns TM_PB_OK, TM_PB_DONE at the end, or
 * TM_PB_ERROR. */
static inline int tm_pb_next(tm_pb_reader *r, tm_pb_field *f) {
    const uint8_t *p = r->p;
    if (p >= r->end) return TM_PB_DONE;
    f->start = p;
    f->val = 0; /* LEN fields carry no value; keeps readers simple */
    uint64_t tag;
    int e = tm_pb_varint(&p, r->end, &tag);
    if (e) return tm_pb_fail(r, f->start, e == 1 ? TM_ERR_TRUNCATED : TM_ERR_MALFORMED,
                             e == 1 ? "truncated field tag" : "overlong field tag");
    f->num = (uint32_t)(tag >> 3);
    f->wire = (uint32_t)(tag & 7);
    if (tag >> 32 || f->num == 0) return tm_pb_fail(r, f->start, TM_ERR_MALFORMED, "invalid field number");
    switch (f->wire) {
    case TM_PB_VARINT:
        e = tm_pb_varint(&p, r->end, &f->val);
        if (e) return tm_pb_fail(r, p, e == 1 ? TM_ERR_TRUNCATED : TM_ERR_MALFORMED,
                                 e == 1 ? "truncated varint" : "varint longer than 10 bytes");
        break;
    case TM_PB_I64:
        if (r->end - p < 8) return tm_pb_fail(r, p, TM_ERR_TRUNCATED, "truncated fixed64");
        f->val = 0;
        for (int i = 7; i >= 0; i--) f->val = (f->val << 8) | p[i];
        p += 8;
        break;
    case TM_PB_I32:
        if (r->end - p < 4) return tm_pb_fail(r, p, TM_ERR_TRUNCATED, "truncated fixed32");
        f->val = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        p += 4;
        break;
    case TM_PB_LEN: {
        uint64_t len;
        e = tm_pb_varint(&p, r->end, &len);
        if (e) return tm_pb_fail(r, p, e == 1 ? TM_ERR_TRUNCATED : TM_ERR_MALFORMED,
                                 e == 1 ? "truncated length" : "overlong length");
        if (len > (uint64_t)(r->end - p))
            return tm_pb_fail(r, f->start, TM_ERR_TRUNCATED, "length runs past the end of its message");
        f->bytes.data = p;
        f->bytes.len = (size_t)len;
        p += len;
        break;
    }
    default:
        return tm_pb_fail(r, f->start, TM_ERR_MALFORMED, "unsupported wire type (group or invalid)");
    }
    r->p = p;
    return TM_PB_OK;
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
