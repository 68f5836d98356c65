/*
 * inflate.c — bounded zlib inflation for compressed_packets (the only file
 * that includes zlib). Output grows in a scratch buffer up to the cap and
 * is then copied into the trace's arena, because decoded string views
 * point into it for the trace's lifetime.
 */
#include <zlib.h>

#include "wire/inflate.h" /* tm_inflate */

static voidpf z_alloc(voidpf opaque, uInt items, uInt size) {
    tm_mem *m = opaque;
    size_t n = (size_t)items * size;
    size_t *p = tm_mem_alloc(m, n + sizeof(size_t));
    if (!p) return Z_NULL;
    *p = n + sizeof(size_t);
    return p + 1;
}

static void z_free(voidpf opaque, voidpf ptr) {
    if (!ptr) return;
    size_t *p = (size_t *)ptr - 1;
    tm_mem_free(opaque, p, *p);
}

tm_status tm_inflate(tm_arena *ar, tm_mem *mem, tm_bytes src, uint64_t cap, tm_bytes *out,
                     const char **why) {
    z_stream z;
    memset(&z, 0, sizeof z);
    z.zalloc = z_alloc;
    z.zfree = z_free;
    z.opaque = mem;
    if (inflateInit2(&z, 32 + MAX_WBITS) != Z_OK) {
        *why = "zlib initialisation failed";
        return TM_ERR_NOMEM;
    }
    size_t bcap = src.len * 4 + 4096, blen = 0;
    if (bcap > cap + 1) bcap = (size_t)cap + 1;
    uint8_t *buf = tm_mem_alloc(mem, bcap);
    tm_status st = buf ? TM_OK : TM_ERR_NOMEM;
    z.next_in = (Bytef *)(uintptr_t)src.data;
    z.avail_in = (uInt)src.len;
    while (st == TM_OK) {
        if (blen == bcap) {
            if (blen > cap) {
                st = TM_ERR_LIMIT;
                *why = "inflated compressed_packets exceed max_inflated_bytes";
                break;
            }
            size_t ncap = bcap * 2 > cap + 1 ? (size_t)cap + 1 : bcap * 2;
            uint8_t *nb = tm_mem_realloc(mem, buf, bcap, ncap);
            if (!nb) {
                st = TM_ERR_NOMEM;
                break;
            }
            buf = nb;
            bcap = ncap;
        }
        z.next_out = buf + blen;
        z.avail_out = (uInt)(bcap - blen);
        int zr = inflate(&z, Z_NO_FLUSH);
        blen = bcap - z.avail_out;
        if (zr == Z_STREAM_END) break;
        if (zr == Z_OK) continue;
        if (zr == Z_BUF_ERROR && z.avail_out == 0) continue;
        st = zr == Z_MEM_ERROR ? TM_ERR_NOMEM : TM_ERR_MALFORMED;
        *why = zr == Z_BUF_ERROR ? "compressed_packets stream is truncated"
                                 : "compressed_packets is not a zlib or gzip stream";
    }
    if (st == TM_OK && blen > cap) {
        st = TM_ERR_LIMIT;
        *why = "inflated compressed_packets exceed max_inflated_bytes";
    }
    inflateEnd(&z);
    if (st == TM_OK) {
        uint8_t *dst = tm_arena_alloc(ar, blen);
        if (!dst) st = TM_ERR_NOMEM;
        else {
            if (blen) memcpy(dst, buf, blen);
            out->data = dst;
            out->len = blen;
        }
    }
    if (buf) tm_mem_free(mem, buf, bcap);
    return st;
}
