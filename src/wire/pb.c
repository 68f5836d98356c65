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
