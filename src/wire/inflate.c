/*
 * inflate.c — bounded decompression (the only file that includes zlib or
 * libzstd): zlib inflation of compressed_packets, whose output grows in a
 * scratch buffer up to the cap and is then copied into the trace's arena,
 * because decoded string views point into it for the trace's lifetime; and
 * whole gzip or zstd inputs (trace.pftrace.gz), decompressed into one
 * buffer that grows up to the cap.
 */
#include <limits.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "wire/inflate.h" /* tm_inflate, tm_decompress */

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

/* ---- whole inputs ---- */

tm_framing tm_framing_of(tm_bytes b) {
    if (b.len >= 2 && b.data[0] == 0x1f && b.data[1] == 0x8b) return TM_FRAMING_GZIP;
    if (b.len >= 4 && b.data[0] == 0x28 && b.data[1] == 0xb5 && b.data[2] == 0x2f && b.data[3] == 0xfd)
        return TM_FRAMING_ZSTD;
    return TM_FRAMING_NONE;
}

const char *tm_framing_name(tm_framing f) {
    return f == TM_FRAMING_GZIP ? "gzip" : f == TM_FRAMING_ZSTD ? "zstd" : "uncompressed";
}

/* Decompressed output: it may hold one byte more than the cap, so that
 * output past the cap shows without decompressing further. */
typedef struct out_buf {
    uint8_t *data;
    size_t len, cap;
    size_t most; /* cap + 1 */
} out_buf;

static const char too_large[] = "decompressed, it is larger than max_inflated_bytes";

/* Room for at least one more byte: the first call allocates about hint
 * bytes, later ones double. TM_ERR_LIMIT once the buffer holds cap + 1. */
static tm_status out_grow(tm_mem *mem, out_buf *o, uint64_t hint, const char **why) {
    if (o->cap >= o->most) {
        *why = too_large;
        return TM_ERR_LIMIT;
    }
    size_t want = o->data ? o->cap * 2 : hint < 4096 ? 4096 : hint < o->most ? (size_t)hint : o->most;
    if (want > o->most || want < o->cap) want = o->most;
    uint8_t *nb = o->data ? tm_mem_realloc(mem, o->data, o->cap, want) : tm_mem_alloc(mem, want);
    if (!nb) {
        *why = "out of memory";
        return TM_ERR_NOMEM;
    }
    o->data = nb;
    o->cap = want;
    return TM_OK;
}

/* gzip's ISIZE trailer (the size mod 2^32 of the last member) as a first
 * guess, unless no deflate stream of this size could expand to it. */
static uint64_t gzip_size_hint(tm_bytes src) {
    if (src.len < 18) return 0;
    const uint8_t *t = src.data + src.len - 4;
    uint64_t isize = (uint64_t)t[0] | (uint64_t)t[1] << 8 | (uint64_t)t[2] << 16 | (uint64_t)t[3] << 24;
    return isize <= (uint64_t)src.len * 1032 ? isize + 1 : 0;
}

static tm_status gunzip(tm_mem *mem, tm_bytes src, out_buf *o, size_t *at, const char **why) {
    z_stream z;
    memset(&z, 0, sizeof z);
    z.zalloc = z_alloc;
    z.zfree = z_free;
    z.opaque = mem;
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
        *why = "zlib initialisation failed";
        return TM_ERR_NOMEM;
    }
    uint64_t hint = gzip_size_hint(src);
    tm_status st = TM_OK;
    for (;;) {
        if (o->len == o->cap && (st = out_grow(mem, o, hint, why)) != TM_OK) break;
        /* zlib counts in uInt: inputs and outputs past 4 GiB go in pieces */
        uInt in_n = src.len - *at < UINT_MAX ? (uInt)(src.len - *at) : UINT_MAX;
        uInt out_n = o->cap - o->len < UINT_MAX ? (uInt)(o->cap - o->len) : UINT_MAX;
        z.next_in = (Bytef *)(uintptr_t)(src.data + *at);
        z.avail_in = in_n;
        z.next_out = o->data + o->len;
        z.avail_out = out_n;
        int zr = inflate(&z, Z_NO_FLUSH);
        *at += in_n - z.avail_in;
        o->len += out_n - z.avail_out;
        if (zr == Z_STREAM_END) {
            if (*at == src.len) break;
            /* another member, as `cat a.gz b.gz` or pigz make */
            if (tm_framing_of((tm_bytes){src.data + *at, src.len - *at}) == TM_FRAMING_GZIP) {
                inflateReset(&z);
                continue;
            }
            st = TM_ERR_MALFORMED;
            *why = "bytes follow the end of the gzip stream";
            break;
        }
        if (zr == Z_OK || (zr == Z_BUF_ERROR && z.avail_out == 0)) continue;
        if (zr == Z_BUF_ERROR && *at == src.len) {
            st = TM_ERR_TRUNCATED;
            *why = "the gzip stream ends early";
        } else {
            st = zr == Z_MEM_ERROR ? TM_ERR_NOMEM : TM_ERR_MALFORMED;
            *why = z.msg ? z.msg : "not a gzip stream";
        }
        break;
    }
    inflateEnd(&z);
    return st;
}

/* libzstd's own default ceiling on the window (128 MiB), which every
 * compression level fits; only `zstd --long=28` and above need more. */
enum { ZSTD_WINDOW_LOG_MAX = 27 };

static tm_status unzstd(tm_mem *mem, tm_bytes src, uint64_t cap, out_buf *o, size_t *at, const char **why) {
    ZSTD_DCtx *dc = ZSTD_createDCtx();
    if (!dc || ZSTD_isError(ZSTD_DCtx_setParameter(dc, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX))) {
        ZSTD_freeDCtx(dc);
        *why = "libzstd initialisation failed";
        return TM_ERR_NOMEM;
    }
    unsigned long long declared = ZSTD_getFrameContentSize(src.data, src.len);
    if (declared != ZSTD_CONTENTSIZE_UNKNOWN && declared != ZSTD_CONTENTSIZE_ERROR && declared > cap) {
        ZSTD_freeDCtx(dc);
        *why = too_large; /* known from the frame header, before decoding */
        return TM_ERR_LIMIT;
    }
    uint64_t hint = declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == ZSTD_CONTENTSIZE_ERROR ? src.len * 4
                    : declared < (uint64_t)src.len * 1024 ? declared + 1 : (uint64_t)src.len * 1024;
    ZSTD_inBuffer in = {src.data, src.len, 0};
    size_t frame_left = 1; /* 0 right after a frame ended */
    tm_status st = TM_OK;
    while (in.pos < in.size || frame_left) {
        if (o->len == o->cap && (st = out_grow(mem, o, hint, why)) != TM_OK) break;
        ZSTD_outBuffer out = {o->data, o->cap, o->len};
        frame_left = ZSTD_decompressStream(dc, &out, &in);
        o->len = out.pos;
        *at = in.pos;
        if (ZSTD_isError(frame_left)) {
            int too_wide = ZSTD_getErrorCode(frame_left) == ZSTD_error_frameParameter_windowTooLarge;
            st = too_wide ? TM_ERR_UNSUPPORTED : TM_ERR_MALFORMED;
            *why = too_wide ? "the zstd frame's window is larger than 128 MiB (written with zstd --long=28 or more?)"
                            : ZSTD_getErrorName(frame_left);
            break;
        }
        if (frame_left && in.pos == in.size && out.pos < out.size) {
            st = TM_ERR_TRUNCATED;
            *why = "the zstd stream ends early";
            break;
        }
    }
    ZSTD_freeDCtx(dc);
    return st;
}

tm_status tm_decompress(tm_mem *mem, tm_framing f, tm_bytes src, uint64_t cap, tm_bytes *out, size_t *out_cap,
                        uint64_t *at, const char **why) {
    out_buf o = {NULL, 0, 0, cap < SIZE_MAX - 1 ? (size_t)cap + 1 : SIZE_MAX - 1};
    size_t pos = 0;
    tm_status st = f == TM_FRAMING_GZIP ? gunzip(mem, src, &o, &pos, why) : unzstd(mem, src, cap, &o, &pos, why);
    if (st == TM_OK && o.len > cap) {
        st = TM_ERR_LIMIT;
        *why = too_large;
    }
    /* give back what the doubling reserved beyond the output */
    if (st == TM_OK && o.len && o.len < o.cap) {
        uint8_t *fit = tm_mem_realloc(mem, o.data, o.cap, o.len);
        if (fit) o.data = fit, o.cap = o.len;
    }
    if (st != TM_OK) {
        if (o.data) tm_mem_free(mem, o.data, o.cap);
        *at = pos;
        return st;
    }
    out->data = o.data;
    out->len = o.len;
    *out_cap = o.cap;
    return TM_OK;
}
