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

#include "common/base.h" /* tm_bytes */

/* The field decoder is the inner loop of every reader: inlined whatever
 * the compiler's size heuristics say of its callers. */
#if defined(__GNUC__)
#define TM_PB_INLINE static inline __attribute__((always_inline))
#else
#define TM_PB_INLINE static inline
#endif

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
    /* an absent field is {NULL, 0}: NULL + 0 is undefined in C */
    tm_pb_reader r = {b.data, b.data ? b.data + b.len : NULL, NULL, TM_OK};
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
    if (TM_LIKELY(end - p >= 2 && p[1] < 0x80)) { /* two bytes: frame ids of a packed callstack */
        *out = (uint64_t)(p[0] & 0x7f) | (uint64_t)p[1] << 7;
        *pp = p + 2;
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

#if defined(__GNUC__)
/* Eight bytes at q, in one unaligned load; callers check that they are
 * there. GCC's -Warray-bounds, seeing the load inlined into a caller with
 * a buffer shorter than eight bytes, cannot follow that check. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
static inline uint64_t tm_pb_load8(const uint8_t *q) {
    uint64_t w;
    memcpy(&w, q, 8);
    return w;
}
#pragma GCC diagnostic pop
#endif

/* The mask keeping the seven value bits of each of a varint's len bytes
 * (1 to 8), loaded little-endian into a word. */
static inline uint64_t tm_pb_varint_keep(unsigned len) {
    return (~0ull >> (64 - 8 * len)) & 0x7f7f7f7f7f7f7f7full;
}

/* The value of up to eight 7-bit groups, a varint's bytes loaded
 * little-endian and masked by tm_pb_varint_keep: the groups packed
 * together, pairs, then fours, then the two halves. */
TM_PB_INLINE uint64_t tm_pb_varint_groups(uint64_t w) {
    w = (w & 0x007f007f007f007full) | (w & 0x7f007f007f007f00ull) >> 1;
    w = (w & 0x00003fff00003fffull) | (w & 0x3fff00003fff0000ull) >> 2;
    return (w & 0x000000000fffffffull) | (w & 0x0fffffff00000000ull) >> 4;
}

/* Decodes a varint of at most eight bytes at q, when eight bytes are
 * there (end - q >= 8), without a branch a byte: the first byte without
 * its high bit ends the varint; the 7-bit groups are then packed together
 * in three steps. Returns the end, or NULL when it is longer or the bytes
 * are not there (or on a big-endian machine). */
TM_PB_INLINE const uint8_t *tm_pb_varint_eight(const uint8_t *q, const uint8_t *end, uint64_t *out) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (TM_LIKELY(end - q >= 8)) {
        uint64_t w = tm_pb_load8(q);
        uint64_t stops = ~w & 0x8080808080808080ull;
        if (TM_LIKELY(stops)) {
            unsigned last = (unsigned)__builtin_ctzll(stops); /* 8k + 7 for a varint of k + 1 bytes */
            *out = tm_pb_varint_groups(w & (~0ull >> (63 - last)) & 0x7f7f7f7f7f7f7f7full);
            return q + (last + 1) / 8;
        }
    }
#else
    (void)q, (void)end, (void)out;
#endif
    return NULL;
}

/* The value of a varint whose length len (1 to 8 bytes) is known, its
 * bytes already checked (each but the last has its high bit set), with
 * eight bytes readable at q. keep: tm_pb_varint_keep(len), which callers
 * that read many varints of one length compute once. */
TM_PB_INLINE uint64_t tm_pb_varint_of_len(const uint8_t *q, unsigned len, uint64_t keep) {
    if (len == 1) return q[0];
    if (len == 2) return (uint64_t)(q[0] & 0x7f) | (uint64_t)q[1] << 7;
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    return tm_pb_varint_groups(tm_pb_load8(q) & keep);
#else
    (void)keep;
    uint64_t v = 0;
    for (unsigned i = 0; i < len; i++) v |= (uint64_t)(q[i] & 0x7f) << (7 * i);
    return v;
#endif
}

/* Decodes the varint at q < end. Returns the end, or NULL when it runs
 * past end or reaches 10 bytes (left to the checked decoder, which also
 * rejects overlong ones and reports the error). */
TM_PB_INLINE const uint8_t *tm_pb_varint_fast(const uint8_t *q, const uint8_t *end, uint64_t *out) {
    uint64_t v = q[0];
    if (TM_LIKELY(v < 0x80)) {
        *out = v;
        return q + 1;
    }
    if (TM_LIKELY(end - q >= 2 && q[1] < 0x80)) { /* two bytes: iids, frame ids */
        *out = (v & 0x7f) | (uint64_t)q[1] << 7;
        return q + 2;
    }
    /* three to eight bytes: timestamps, callstack iids */
    const uint8_t *e = tm_pb_varint_eight(q, end, out);
    if (TM_LIKELY(e != NULL)) return e;
    v &= 0x7f;
    for (unsigned i = 1; i < 9 && q + i < end; i++) {
        v |= (uint64_t)(q[i] & 0x7f) << (7 * i);
        if (q[i] < 0x80) {
            *out = v;
            return q + i + 1;
        }
    }
    return NULL;
}

/* Reads the next field. Returns TM_PB_OK, TM_PB_DONE at the end, or
 * TM_PB_ERROR. Varint and length-delimited fields with tags of one or two
 * bytes (field numbers below 2048) never leave this inline function unless
 * they are malformed. */
TM_PB_INLINE int tm_pb_next(tm_pb_reader *r, tm_pb_field *f) {
    const uint8_t *p = r->p, *end = r->end;
    if (p >= end) return TM_PB_DONE;
    uint32_t tag = p[0];
    const uint8_t *q = p + 1;
    if (tag >= 0x80) {
        if (end - p < 2 || p[1] >= 0x80) return tm_pb_next_slow(r, f);
        tag = (tag & 0x7f) | (uint32_t)p[1] << 7;
        q = p + 2;
    }
    uint32_t wire = tag & 7;
    if (TM_LIKELY(tag >= 8 && (wire == TM_PB_VARINT || wire == TM_PB_LEN) && q < end)) {
        uint64_t v;
        const uint8_t *e = tm_pb_varint_fast(q, end, &v);
        if (TM_LIKELY(e != NULL)) {
            f->start = p;
            f->num = tag >> 3;
            f->wire = wire;
            if (wire == TM_PB_VARINT) {
                f->val = v;
                r->p = e;
                return TM_PB_OK;
            }
            if (TM_LIKELY(v <= (uint64_t)(end - e))) {
                f->val = 0;
                f->bytes.data = e;
                f->bytes.len = (size_t)v;
                r->p = e + v;
                return TM_PB_OK;
            }
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

/* Iterates the values of one repeated varint field of a message, packed
 * or not (writers use either, even mixed). tm_pb_repeated_next returns
 * TM_PB_OK with *out set, TM_PB_DONE, or TM_PB_ERROR with the error in
 * it->msg (a bad packed element, or a wrong wire type for the field). */
typedef struct tm_pb_repeated {
    tm_pb_reader msg;    /* the rest of the message */
    tm_pb_reader packed; /* the packed run being read */
    uint32_t num;
    uint32_t tag;        /* the field's one-byte varint tag; 0: none (num >= 16) */
} tm_pb_repeated;

static inline tm_pb_repeated tm_pb_repeated_of(tm_bytes msg, uint32_t num) {
    tm_pb_repeated it = {tm_pb_reader_of(msg), {NULL, NULL, NULL, TM_OK}, num, num < 16 ? num << 3 : 0};
    return it;
}

/* The general case (pb.c): packed runs, other tags, longer varints. */
int tm_pb_repeated_next_slow(tm_pb_repeated *it, uint64_t *out);

static inline int tm_pb_repeated_next(tm_pb_repeated *it, uint64_t *out) {
    /* A one- or two-byte element of a packed run, an unpacked element of
     * one or two bytes straight from its tag (a callstack's frame ids, either
     * way), or the end of the message; anything else takes the general way. */
    const uint8_t *p = it->msg.p, *q = it->packed.p;
    if (q < it->packed.end) {
        if (q[0] < 0x80) {
            *out = q[0];
            it->packed.p = q + 1;
            return TM_PB_OK;
        }
        if (it->packed.end - q >= 2 && q[1] < 0x80) {
            *out = (uint64_t)(q[0] & 0x7f) | (uint64_t)q[1] << 7;
            it->packed.p = q + 2;
            return TM_PB_OK;
        }
    } else if (it->tag && it->msg.end - p >= 2 && p[0] == it->tag) {
        if (p[1] < 0x80) {
            *out = p[1];
            it->msg.p = p + 2;
            return TM_PB_OK;
        }
        if (it->msg.end - p >= 3 && p[2] < 0x80) {
            *out = (uint64_t)(p[1] & 0x7f) | (uint64_t)p[2] << 7;
            it->msg.p = p + 3;
            return TM_PB_OK;
        }
    } else if (p >= it->msg.end) {
        return TM_PB_DONE;
    }
    return tm_pb_repeated_next_slow(it, out);
}

/* Reads up to cap values of it into out, as that many tm_pb_repeated_next
 * calls would, in one loop: *n the values read; TM_PB_OK when cap were read
 * (more may follow), TM_PB_DONE at the message's end, TM_PB_ERROR as
 * tm_pb_repeated_next (out[0..*n) are then the values before the error). */
int tm_pb_repeated_fill(tm_pb_repeated *it, uint64_t *out, size_t cap, size_t *n);

/* Counts the elements of a packed varint field (no validation beyond what
 * is needed to count). */
static inline size_t tm_pb_packed_count(tm_bytes b) {
    size_t n = 0;
    for (size_t i = 0; i < b.len; i++) n += b.data[i] < 0x80;
    return n;
}

#endif
