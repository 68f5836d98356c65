/*
 * obuf.c — the growing protobuf buffer of symbolize.h: what the symbolizer
 * encodes ModuleSymbols and DeobfuscationMapping packets into.
 */
#include <string.h>

#include "symbolize/symbolize.h"
#include "wire/pb_write.h"

void tm_obuf_init(tm_obuf *b, tm_mem *mem) {
    memset(b, 0, sizeof *b);
    b->mem = mem;
}

void tm_obuf_free(tm_obuf *b) {
    tm_mem_free(b->mem, b->data, b->cap);
    b->data = NULL;
    b->len = b->cap = 0;
}

static uint8_t *room(tm_obuf *b, size_t n) {
    if (b->st != TM_OK) return NULL;
    if (b->cap - b->len < n && tm_vec_grow(b->mem, (void **)&b->data, &b->cap, 1, b->len + n) != TM_OK) {
        b->st = TM_ERR_NOMEM;
        return NULL;
    }
    return b->data + b->len;
}

void tm_obuf_uint(tm_obuf *b, uint32_t field, uint64_t v) {
    uint8_t *p = room(b, 2 * TM_PBW_VARINT_MAX);
    if (p) b->len = (size_t)(tm_pbw_uint(p, field, v) - b->data);
}

void tm_obuf_bytes(tm_obuf *b, uint32_t field, const void *data, size_t len) {
    uint8_t *p = room(b, 2 * TM_PBW_VARINT_MAX + len);
    if (!p) return;
    p = tm_pbw_len(p, field, len);
    if (len) memcpy(p, data, len);
    b->len = (size_t)(p + len - b->data);
}

void tm_obuf_raw(tm_obuf *b, const void *data, size_t len) {
    uint8_t *p = room(b, len);
    if (p && len) memcpy(p, data, len);
    if (p) b->len += len;
}

/* The tag, then a one-byte length placeholder that close widens. */
size_t tm_obuf_open(tm_obuf *b, uint32_t field) {
    uint8_t *p = room(b, TM_PBW_VARINT_MAX + 1);
    if (!p) return 0;
    p = tm_pbw_tag(p, field, TM_PB_LEN);
    *p++ = 0;
    b->len = (size_t)(p - b->data);
    return b->len;
}

void tm_obuf_close(tm_obuf *b, size_t start) {
    if (b->st != TM_OK) return;
    size_t body = b->len - start, extra = tm_pbw_varint_len(body) - 1;
    if (extra && !room(b, extra)) return;
    memmove(b->data + start + extra, b->data + start, body);
    tm_pbw_varint(b->data + start - 1, body);
    b->len += extra;
}
