/*
 * pb_write.c — the out-of-line part of the protobuf stream writer (see
 * pb_write.h): flushing and appends larger than the free space.
 */
#include "wire/pb_write.h" /* tm_pbw */

void tm_pbw_flush(tm_pbw *w) {
    if (w->len && w->st == TM_OK) w->st = w->flush(w->ctx, w->buf, w->len);
    w->len = 0;
}

void tm_pbw_append(tm_pbw *w, const void *data, size_t n) {
    const uint8_t *s = data;
    while (n) {
        if (w->len == w->cap) tm_pbw_flush(w);
        size_t k = w->cap - w->len < n ? w->cap - w->len : n;
        memcpy(w->buf + w->len, s, k);
        w->len += k;
        s += k;
        n -= k;
    }
}

void tm_pbw_bytes_field(tm_pbw *w, uint32_t field, const void *data, size_t n) {
    uint8_t *p = tm_pbw_reserve(w, 2 * TM_PBW_VARINT_MAX);
    tm_pbw_commit(w, tm_pbw_len(p, field, n));
    tm_pbw_append(w, data, n);
}

tm_status tm_pbw_finish(tm_pbw *w) {
    tm_pbw_flush(w);
    return w->st;
}
