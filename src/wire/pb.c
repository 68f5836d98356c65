/*
 * pb.c — the general case of the protobuf field decoder (multi-byte tags,
 * varints and lengths, fixed32/64, every error). pb.h inlines the fast path
 * and falls back here; see pb.h for the reader's contract.
 */
#include "wire/pb.h" /* tm_pb_reader, tm_pb_field */

int tm_pb_next_slow(tm_pb_reader *r, tm_pb_field *f) {
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
                                 e == 1 ? "truncated varint" : "varint longer than 10 bytes or beyond 64 bits");
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

int tm_pb_repeated_next_slow(tm_pb_repeated *it, uint64_t *out) {
    for (;;) {
        if (it->packed.p < it->packed.end) {
            if (tm_pb_packed_next(&it->packed, out) == TM_PB_OK) return TM_PB_OK;
            return tm_pb_fail(&it->msg, it->packed.p, it->packed.err_code, it->packed.err);
        }
        tm_pb_field f;
        int rc = tm_pb_next(&it->msg, &f);
        if (rc != TM_PB_OK) return rc;
        if (f.num != it->num) continue;
        if (f.wire == TM_PB_VARINT) {
            *out = f.val;
            return TM_PB_OK;
        }
        if (f.wire != TM_PB_LEN)
            return tm_pb_fail(&it->msg, f.start, TM_ERR_MALFORMED, "repeated varint field with a wrong wire type");
        it->packed = tm_pb_reader_of(f.bytes);
    }
}

/* The loops take one- and two-byte values (a callstack's frame ids) without
 * a call, each to a bound that keeps both cap and the bytes a value may
 * read (a value takes at least one byte packed, two unpacked, so a
 * position before the bound leaves room in out); anything else is one
 * tm_pb_repeated_next. */
static const uint8_t *fill_bound(const uint8_t *p, const uint8_t *end, ptrdiff_t ahead, size_t room, size_t step) {
    ptrdiff_t avail = end - p - ahead;
    if (avail <= 0) return p;
    return (size_t)avail / step < room ? end - ahead : p + room * step;
}

int tm_pb_repeated_fill(tm_pb_repeated *it, uint64_t *out, size_t cap, size_t *n) {
    size_t k = 0;
    while (k < cap) {
        const uint8_t *q = it->packed.p;
        for (const uint8_t *lim = fill_bound(q, it->packed.end, 1, cap - k, 1); q < lim;) {
            if (q[0] < 0x80) {
                out[k++] = q[0], q++;
            } else if (q[1] < 0x80) {
                out[k++] = (uint64_t)(q[0] & 0x7f) | (uint64_t)q[1] << 7, q += 2;
            } else {
                break;
            }
        }
        it->packed.p = q;
        if (q >= it->packed.end && it->tag) {
            const uint8_t *p = it->msg.p, tag = (uint8_t)it->tag;
            for (const uint8_t *lim = fill_bound(p, it->msg.end, 2, cap - k, 2); p < lim && p[0] == tag;) {
                if (p[1] < 0x80) {
                    out[k++] = p[1], p += 2;
                } else if (p[2] < 0x80) {
                    out[k++] = (uint64_t)(p[1] & 0x7f) | (uint64_t)p[2] << 7, p += 3;
                } else {
                    break;
                }
            }
            it->msg.p = p;
        }
        if (k == cap) break;
        int rc = tm_pb_repeated_next(it, &out[k]);
        if (rc != TM_PB_OK) {
            *n = k;
            return rc;
        }
        k++;
    }
    *n = k;
    return TM_PB_OK;
}
