/*
 * encoding.c — HTTP Content-Encoding for request bodies (the
 * "Content-Encoding" section of server.h): parsing the header value and
 * streaming decoders for gzip and deflate (zlib), zstd (libzstd) and br
 * (libbrotlidec), plus identity.
 *
 * Bomb safety: decoded bytes are written straight into the caller's buffer
 * in steps of at most STEP bytes, never more than one byte past what
 * max_decoded still allows, and the buffer is grown only up to that, so a
 * decompression bomb costs at most max_decoded (+1) bytes of output before
 * it fails with TM_ERR_LIMIT. A decoder may also charge that growth to a
 * budget shared by all requests (tm_srv_decoder_share), so N concurrent
 * bombs cost at most the shared limit, not N times max_decoded. zstd
 * frames asking for a window above 2^ZSTD_WINDOW_LOG_MAX (8 MiB, RFC 9659's
 * bound for HTTP) fail with TM_ERR_LIMIT rather than making libzstd
 * allocate it.
 *
 * Stream rules: gzip accepts several concatenated members (RFC 1952 §2.2)
 * and zstd several frames; deflate and br end at their end marker, and any
 * byte after it is TM_ERR_MALFORMED. deflate is zlib-wrapped (RFC 1950) when
 * its first two bytes form a valid zlib header, else raw (RFC 1951), as
 * some clients send. Offsets in errors count encoded bytes the library took
 * before it failed (zlib, brotli), or all bytes fed so far (libzstd, which
 * does not say). A decoder belongs to one request (one thread at a time).
 */
#include <brotli/decode.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "server.h"

#define STEP (64u * 1024u)   /* decoded bytes per library call */
/* A declared length is trusted this far before bytes arrive: the output is
 * sized for it at once, not grown (and copied) step by step, but a client
 * that declares much and sends little holds no more than this. */
#define EXPECT_MAX (1024u * 1024u)
#define ZSTD_WINDOW_LOG_MAX 23

/* One coding name (case-insensitive), value[a, b) without surrounding whitespace. */
static int coding_name(const char *value, size_t a, size_t b, tm_srv_encoding *out) {
    static const struct {
        const char *name;
        tm_srv_encoding enc;
    } names[] = {{"identity", TM_SRV_ENC_IDENTITY}, {"gzip", TM_SRV_ENC_GZIP}, {"x-gzip", TM_SRV_ENC_GZIP},
                 {"deflate", TM_SRV_ENC_DEFLATE},   {"zstd", TM_SRV_ENC_ZSTD}, {"br", TM_SRV_ENC_BR}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *n = names[i].name;
        if (strlen(n) != b - a) continue;
        size_t k = 0;
        while (k < b - a) {
            char c = value[a + k];
            if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
            if (c != n[k]) break;
            k++;
        }
        if (k == b - a) {
            *out = names[i].enc;
            return 0;
        }
    }
    return -1;
}

/* The value is a comma-separated list of the codings applied, in order
 * (RFC 9110 §8.4): empty elements and "identity" change nothing, and one
 * other coding is decoded; two stacked codings are not supported. */
int tm_srv_encoding_parse(const char *value, tm_srv_encoding *out) {
    tm_srv_encoding enc = TM_SRV_ENC_IDENTITY;
    size_t n = value ? strlen(value) : 0, applied = 0;
    for (size_t start = 0; start <= n;) {
        size_t end = start;
        while (end < n && value[end] != ',') end++;
        size_t a = start, b = end;
        while (a < b && (value[a] == ' ' || value[a] == '\t')) a++;
        while (b > a && (value[b - 1] == ' ' || value[b - 1] == '\t')) b--;
        tm_srv_encoding e;
        if (a < b) {
            if (coding_name(value, a, b, &e) != 0) return -1;
            if (e != TM_SRV_ENC_IDENTITY) {
                if (applied++) return -1;
                enc = e;
            }
        }
        start = end + 1;
    }
    *out = enc;
    return 0;
}

/* What one library call left to do. */
typedef enum step_result { NEED_INPUT, NEED_OUTPUT, STREAM_END, STEP_ERROR } step_result;

struct tm_srv_decoder {
    tm_srv_encoding enc;
    uint64_t max_decoded;
    uint64_t decoded;     /* bytes written to out so far */
    uint64_t consumed;    /* encoded bytes taken by the library so far */
    int ended;            /* the current member/frame/stream is complete */
    tm_status failed;     /* sticky: after an error every call repeats it */
    z_stream z;           /* gzip, deflate (once z_ready) */
    int z_ready;
    uint8_t head[2];      /* deflate: bytes held until the wrapper is known */
    size_t n_head;
    ZSTD_DCtx *zstd;
    BrotliDecoderState *br;
    tm_srv_budget *shared; /* NULL: only max_decoded applies */
    uint64_t charged;     /* bytes taken from shared */
    size_t expect;        /* identity: the body's declared length, at most EXPECT_MAX */
    const char *msg;      /* the library's message for STEP_ERROR */
    tm_status step_code;  /* code for STEP_ERROR: MALFORMED, LIMIT or NOMEM */
};

tm_status tm_srv_decoder_new(tm_srv_encoding enc, uint64_t max_decoded, tm_srv_decoder **out,
                             tm_error *err) {
    *out = NULL;
    if (enc > TM_SRV_ENC_BR) return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "unknown encoding %d", (int)enc);
    tm_srv_decoder *d = calloc(1, sizeof *d);
    if (!d) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory for a decoder");
    d->enc = enc;
    d->max_decoded = max_decoded;
    int ok = 1;
    if (enc == TM_SRV_ENC_GZIP) {
        ok = inflateInit2(&d->z, 16 + MAX_WBITS) == Z_OK;
        d->z_ready = ok;
    } else if (enc == TM_SRV_ENC_ZSTD) {
        d->zstd = ZSTD_createDCtx();
        ok = d->zstd && !ZSTD_isError(ZSTD_DCtx_setParameter(d->zstd, ZSTD_d_windowLogMax, ZSTD_WINDOW_LOG_MAX));
    } else if (enc == TM_SRV_ENC_BR) {
        ok = (d->br = BrotliDecoderCreateInstance(NULL, NULL, NULL)) != NULL;
    }
    if (!ok) {
        tm_srv_decoder_free(d);
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory for a decoder");
    }
    *out = d;
    return TM_OK;
}

int tm_srv_budget_take(tm_srv_budget *b, uint64_t n) {
    uint64_t used = atomic_load(&b->used);
    do {
        if (n > b->limit - used) return -1;
    } while (!atomic_compare_exchange_weak(&b->used, &used, used + n));
    return 0;
}

void tm_srv_budget_give(tm_srv_budget *b, uint64_t n) { atomic_fetch_sub(&b->used, n); }

void tm_srv_decoder_share(tm_srv_decoder *d, tm_srv_budget *shared) { d->shared = shared; }

void tm_srv_decoder_free(tm_srv_decoder *d) {
    if (!d) return;
    if (d->shared) tm_srv_budget_give(d->shared, d->charged);
    if (d->z_ready) inflateEnd(&d->z);
    ZSTD_freeDCtx(d->zstd);
    if (d->br) BrotliDecoderDestroyInstance(d->br);
    free(d);
}

static step_result step_zlib(tm_srv_decoder *d, const uint8_t *in, size_t in_len, size_t *in_used,
                             uint8_t *o, size_t o_len, size_t *o_used) {
    uInt n_in = in_len > UINT_MAX ? UINT_MAX : (uInt)in_len;
    d->z.next_in = (Bytef *)in; /* zlib's API is not const-correct; it never writes input */
    d->z.avail_in = n_in;
    d->z.next_out = o;
    d->z.avail_out = (uInt)o_len;
    int r = inflate(&d->z, Z_NO_FLUSH);
    *in_used = n_in - d->z.avail_in;
    *o_used = o_len - d->z.avail_out;
    if (r == Z_STREAM_END) return STREAM_END;
    if (r == Z_OK || r == Z_BUF_ERROR) return *in_used == in_len && d->z.avail_out ? NEED_INPUT : NEED_OUTPUT;
    d->step_code = r == Z_MEM_ERROR ? TM_ERR_NOMEM : TM_ERR_MALFORMED;
    d->msg = d->z.msg ? d->z.msg : "corrupt deflate data";
    return STEP_ERROR;
}

static step_result step_zstd(tm_srv_decoder *d, const uint8_t *in, size_t in_len, size_t *in_used,
                             uint8_t *o, size_t o_len, size_t *o_used) {
    ZSTD_inBuffer ib = {in, in_len, 0};
    ZSTD_outBuffer ob = {o, o_len, 0};
    size_t r = ZSTD_decompressStream(d->zstd, &ob, &ib);
    *in_used = ib.pos;
    *o_used = ob.pos;
    if (ZSTD_isError(r)) {
        /* libzstd does not say where in the input it failed: report the
         * count of bytes fed so far */
        *in_used = in_len;
        ZSTD_ErrorCode code = ZSTD_getErrorCode(r);
        d->step_code = code == ZSTD_error_frameParameter_windowTooLarge ? TM_ERR_LIMIT
                       : code == ZSTD_error_memory_allocation         ? TM_ERR_NOMEM
                                                                      : TM_ERR_MALFORMED;
        d->msg = ZSTD_getErrorName(r);
        return STEP_ERROR;
    }
    if (r == 0) return STREAM_END; /* a frame is decoded and flushed */
    return ib.pos == ib.size && ob.pos < ob.size ? NEED_INPUT : NEED_OUTPUT;
}

static step_result step_br(tm_srv_decoder *d, const uint8_t *in, size_t in_len, size_t *in_used,
                           uint8_t *o, size_t o_len, size_t *o_used) {
    size_t avail_in = in_len, avail_out = o_len;
    const uint8_t *next_in = in;
    uint8_t *next_out = o;
    BrotliDecoderResult r = BrotliDecoderDecompressStream(d->br, &avail_in, &next_in, &avail_out, &next_out, NULL);
    *in_used = in_len - avail_in;
    *o_used = o_len - avail_out;
    switch (r) {
    case BROTLI_DECODER_RESULT_SUCCESS: return STREAM_END;
    case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT: return NEED_INPUT;
    case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT: return NEED_OUTPUT;
    default: break;
    }
    BrotliDecoderErrorCode code = BrotliDecoderGetErrorCode(d->br);
    int alloc = code <= BROTLI_DECODER_ERROR_ALLOC_CONTEXT_MODES && code >= BROTLI_DECODER_ERROR_ALLOC_BLOCK_TYPE_TREES;
    d->step_code = alloc ? TM_ERR_NOMEM : TM_ERR_MALFORMED;
    d->msg = BrotliDecoderErrorString(code);
    return STEP_ERROR;
}

static step_result step_identity(const uint8_t *in, size_t in_len, size_t *in_used, uint8_t *o, size_t o_len,
                                 size_t *o_used) {
    size_t n = in_len < o_len ? in_len : o_len;
    if (n) memcpy(o, in, n);
    *in_used = *o_used = n;
    return n == in_len ? NEED_INPUT : NEED_OUTPUT;
}

/* Makes room for need more bytes, growing geometrically but never past
 * allowance bytes beyond the current length (need <= allowance). -1 when
 * memory or the shared budget runs out (*over set for the budget). */
static int reserve(tm_srv_decoder *d, tm_srv_buf *b, size_t need, uint64_t allowance, int *over) {
    if (b->cap - b->len >= need) return 0;
    size_t lim = allowance > SIZE_MAX - b->len ? SIZE_MAX : b->len + (size_t)allowance;
    size_t cap = b->cap < 4096 ? 4096 : b->cap > SIZE_MAX / 2 ? SIZE_MAX : b->cap * 2;
    if (cap < d->expect) cap = d->expect;
    if (cap > lim) cap = lim;
    if (cap < b->len + need) cap = b->len + need;
    if (d->shared && tm_srv_budget_take(d->shared, cap - b->cap)) return *over = 1, -1;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        if (d->shared) tm_srv_budget_give(d->shared, cap - b->cap);
        return -1;
    }
    if (d->shared) d->charged += cap - b->cap;
    b->data = p;
    b->cap = cap;
    return 0;
}

static tm_status fail(tm_srv_decoder *d, tm_error *err, tm_status code, const char *what) {
    d->failed = code;
    return tm_srv_fail(err, code, d->consumed, "%s", what);
}

/* Makes room in out for the next step of at most `most` decoded bytes (one
 * byte more than the cap allows, so that an overflow is seen), charged to
 * the budget; the step's size in *step. */
static tm_status make_step_room(tm_srv_decoder *d, tm_srv_buf *out, size_t most, size_t *step, tm_error *err) {
    uint64_t remaining = d->max_decoded - d->decoded;
    *step = remaining >= STEP ? STEP : (size_t)remaining + 1;
    if (*step > most) *step = most;
    uint64_t allowance = remaining == UINT64_MAX ? UINT64_MAX : remaining + 1;
    int over = 0;
    if (reserve(d, out, *step, allowance, &over))
        return fail(d, err, TM_ERR_NOMEM,
                    over ? "the decoded bodies of all requests in flight reach the server's budget"
                         : "out of memory for the decoded body");
    return TM_OK;
}

/* Counts a step's bytes in and out; past the cap, the output is cut there
 * and the decoder fails for good. */
static tm_status count_step(tm_srv_decoder *d, tm_srv_buf *out, size_t in_used, size_t out_used, tm_error *err) {
    d->consumed += in_used;
    d->decoded += out_used;
    out->len += out_used;
    if (d->decoded > d->max_decoded) {
        out->len -= (size_t)(d->decoded - d->max_decoded);
        d->failed = TM_ERR_LIMIT;
        return tm_srv_fail(err, TM_ERR_LIMIT, d->consumed, "decoded body exceeds %llu bytes",
                           (unsigned long long)d->max_decoded);
    }
    return TM_OK;
}

/* Decodes in[0..len) into out until all of it is taken and flushed, or
 * until out grew by quota bytes while input is left (*left says how much). */
static tm_status run(tm_srv_decoder *d, const uint8_t *in, size_t len, size_t quota, tm_srv_buf *out,
                     size_t *left, tm_error *err) {
    size_t start = out->len;
    for (;;) {
        *left = len;
        if (len && out->len - start >= quota) return TM_OK;
        if (d->ended) {
            if (len == 0) return TM_OK;
            if (d->enc == TM_SRV_ENC_GZIP) {
                inflateReset(&d->z); /* the next member */
            } else if (d->enc != TM_SRV_ENC_ZSTD) { /* libzstd starts the next frame itself */
                d->failed = TM_ERR_MALFORMED;
                return tm_srv_fail(err, TM_ERR_MALFORMED, d->consumed,
                                   "%zu bytes of data after the end of the %s stream", len,
                                   d->enc == TM_SRV_ENC_BR ? "br" : "deflate");
            }
            d->ended = 0;
        }
        /* an identity step is copied as it is: no more room needed than its input */
        size_t step;
        tm_status st = make_step_room(d, out, d->enc == TM_SRV_ENC_IDENTITY ? len : SIZE_MAX, &step, err);
        if (st) return st;
        size_t in_used, o_used;
        uint8_t *o = out->data + out->len;
        step_result r;
        switch (d->enc) {
        case TM_SRV_ENC_GZIP:
        case TM_SRV_ENC_DEFLATE: r = step_zlib(d, in, len, &in_used, o, step, &o_used); break;
        case TM_SRV_ENC_ZSTD: r = step_zstd(d, in, len, &in_used, o, step, &o_used); break;
        case TM_SRV_ENC_BR: r = step_br(d, in, len, &in_used, o, step, &o_used); break;
        default: r = step_identity(in, len, &in_used, o, step, &o_used); break;
        }
        in += in_used;
        len -= in_used;
        st = count_step(d, out, in_used, o_used, err);
        if (st) return st;
        *left = len;
        if (r == STEP_ERROR) return fail(d, err, d->step_code, d->msg);
        if (r == STREAM_END) d->ended = 1;
        else if (r == NEED_INPUT) return TM_OK;
        else if (in_used == 0 && o_used == 0) /* a library bug must not spin forever */
            return fail(d, err, TM_ERR_MALFORMED, "decoder made no progress");
    }
}

/* deflate: the first two bytes decide between the zlib wrapper and raw. */
static tm_status start_deflate(tm_srv_decoder *d, tm_error *err) {
    int zlib = (d->head[0] & 0x0f) == Z_DEFLATED && (d->head[0] >> 4) <= 7 &&
               ((unsigned)d->head[0] << 8 | d->head[1]) % 31 == 0;
    if (inflateInit2(&d->z, zlib ? MAX_WBITS : -MAX_WBITS) != Z_OK)
        return fail(d, err, TM_ERR_NOMEM, "out of memory for a decoder");
    d->z_ready = 1;
    return TM_OK;
}

tm_status tm_srv_decoder_feed_part(tm_srv_decoder *d, const void *data, size_t len, size_t quota, size_t *used,
                                   tm_srv_buf *out, tm_error *err) {
    *used = 0;
    if (d->failed) return tm_srv_fail(err, d->failed, d->consumed, "the decoder failed earlier");
    if (len == 0) return TM_OK; /* every feed already drains the libraries' output */
    const uint8_t *in = data;
    size_t taken = 0, left;
    if (d->enc == TM_SRV_ENC_DEFLATE && !d->z_ready) {
        while (d->n_head < 2 && taken < len) d->head[d->n_head++] = in[taken++];
        *used = taken;
        if (d->n_head < 2) return TM_OK;
        tm_status st = start_deflate(d, err);
        if (!st) st = run(d, d->head, 2, SIZE_MAX, out, &left, err);
        if (st) return st;
    }
    tm_status st = run(d, in + taken, len - taken, quota, out, &left, err);
    *used = len - left;
    return st;
}

int tm_srv_decoder_is_identity(const tm_srv_decoder *d) { return d->enc == TM_SRV_ENC_IDENTITY; }

tm_status tm_srv_decoder_window(tm_srv_decoder *d, tm_srv_buf *out, size_t want, uint8_t **room, size_t *room_len,
                                tm_error *err) {
    if (d->failed) return tm_srv_fail(err, d->failed, d->consumed, "the decoder failed earlier");
    /* sized and charged as run() sizes an identity step of want bytes */
    size_t step;
    tm_status st = make_step_room(d, out, want, &step, err);
    if (st) return st;
    /* and the room the output has anyway (the declared length's, mostly):
     * one receive for the whole body; never past the cap's extra byte */
    uint64_t remaining = d->max_decoded - d->decoded;
    uint64_t allowance = remaining == UINT64_MAX ? UINT64_MAX : remaining + 1;
    size_t room_left = out->cap - out->len;
    if (room_left > want) room_left = want;
    if (room_left > allowance) room_left = (size_t)allowance;
    *room = out->data + out->len;
    *room_len = room_left;
    return TM_OK;
}

tm_status tm_srv_decoder_commit(tm_srv_decoder *d, tm_srv_buf *out, size_t n, tm_error *err) {
    return count_step(d, out, n, n, err);
}

void tm_srv_decoder_expect(tm_srv_decoder *d, uint64_t length) {
    if (d->enc != TM_SRV_ENC_IDENTITY) return;
    /* one byte more: a body that ends where it said ends with room to spare, and the end is checked */
    d->expect = length < EXPECT_MAX ? (size_t)length + 1 : EXPECT_MAX;
}

tm_status tm_srv_decoder_feed(tm_srv_decoder *d, const void *data, size_t len, tm_srv_buf *out,
                              tm_error *err) {
    size_t used;
    return tm_srv_decoder_feed_part(d, data, len, SIZE_MAX, &used, out, err);
}

tm_status tm_srv_decoder_finish(tm_srv_decoder *d, tm_srv_buf *out, tm_error *err) {
    (void)out; /* feed leaves nothing buffered inside the libraries */
    if (d->failed) return tm_srv_fail(err, d->failed, d->consumed, "the decoder failed earlier");
    if (d->enc != TM_SRV_ENC_IDENTITY && !d->ended) {
        d->failed = TM_ERR_TRUNCATED;
        /* deflate bytes still held in head were not handed to zlib yet */
        uint64_t at = d->z_ready || d->enc != TM_SRV_ENC_DEFLATE ? d->consumed : d->n_head;
        return tm_srv_fail(err, TM_ERR_TRUNCATED, at, "encoded body ends before the end of the compressed stream");
    }
    return TM_OK;
}
