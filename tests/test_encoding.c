/*
 * test_encoding.c — tests of server/encoding.c: Content-Encoding header
 * parsing and the streaming decoders (identity, gzip, deflate with and
 * without the zlib wrapper, zstd, br). Streams are compressed here with
 * zlib, libzstd and libbrotlienc, then decoded whole, one byte at a time
 * and in random-sized pieces. Covers multi-member gzip and multi-frame zstd,
 * data after the end of a stream, corrupt and truncated streams with their
 * offsets, the decoded-size cap at its exact boundary, and decompression
 * bombs (1 GiB of zeros for zstd and br, 64 MiB for gzip and deflate,
 * compressed by streaming) whose output buffer must never grow past the cap;
 * and the window a body is received into, which must grow, charge and cap
 * the output as a feed does.
 */
#include <brotli/encode.h>
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "server.h"
#include "tutil.h"

#define MIB (1024u * 1024u)

/* How a test stream is compressed. */
typedef enum kind { K_IDENTITY, K_GZIP, K_ZLIB, K_RAW_DEFLATE, K_ZSTD, K_BR } kind;

static tm_srv_encoding enc_of(kind k) {
    static const tm_srv_encoding e[] = {TM_SRV_ENC_IDENTITY, TM_SRV_ENC_GZIP, TM_SRV_ENC_DEFLATE,
                                        TM_SRV_ENC_DEFLATE,  TM_SRV_ENC_ZSTD, TM_SRV_ENC_BR};
    return e[k];
}

static const char *name_of(kind k) {
    static const char *const n[] = {"identity", "gzip", "zlib", "raw deflate", "zstd", "br"};
    return n[k];
}

static void put(tm_srv_buf *b, const void *p, size_t n) {
    cr_assert_eq(tm_srv_buf_append(b, p, n), 0);
}

/* Appends piece repeated `repeat` times, compressed as k, to out, streaming
 * (nothing but piece and a 64 KiB window is held). zstd_window_log 0 is
 * libzstd's default; zstd frames carry a checksum. */
static void compress_repeat(kind k, const uint8_t *piece, size_t len, size_t repeat, int zstd_window_log,
                            tm_srv_buf *out) {
    uint8_t tmp[64 * 1024];
    if (k == K_IDENTITY) {
        for (size_t i = 0; i < repeat; i++) put(out, piece, len);
    } else if (k == K_GZIP || k == K_ZLIB || k == K_RAW_DEFLATE) {
        z_stream z;
        memset(&z, 0, sizeof z);
        int bits = k == K_GZIP ? 16 + 15 : k == K_ZLIB ? 15 : -15;
        cr_assert_eq(deflateInit2(&z, 9, Z_DEFLATED, bits, 9, Z_DEFAULT_STRATEGY), Z_OK);
        for (size_t i = 0; i < repeat; i++) {
            z.next_in = (Bytef *)piece;
            z.avail_in = (uInt)len;
            int flush = i + 1 == repeat ? Z_FINISH : Z_NO_FLUSH;
            int r;
            do {
                z.next_out = tmp;
                z.avail_out = sizeof tmp;
                r = deflate(&z, flush);
                cr_assert(r == Z_OK || r == Z_STREAM_END || r == Z_BUF_ERROR);
                put(out, tmp, sizeof tmp - z.avail_out);
            } while (z.avail_out == 0 || (flush == Z_FINISH && r != Z_STREAM_END));
        }
        deflateEnd(&z);
    } else if (k == K_ZSTD) {
        ZSTD_CCtx *c = ZSTD_createCCtx();
        cr_assert_not_null(c);
        cr_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)));
        if (zstd_window_log) cr_assert(!ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, zstd_window_log)));
        for (size_t i = 0; i < repeat; i++) {
            ZSTD_inBuffer in = {piece, len, 0};
            ZSTD_EndDirective e = i + 1 == repeat ? ZSTD_e_end : ZSTD_e_continue;
            size_t r;
            do {
                ZSTD_outBuffer o = {tmp, sizeof tmp, 0};
                r = ZSTD_compressStream2(c, &o, &in, e);
                cr_assert(!ZSTD_isError(r), "%s", ZSTD_getErrorName(r));
                put(out, tmp, o.pos);
            } while (e == ZSTD_e_end ? r != 0 : in.pos < in.size);
        }
        ZSTD_freeCCtx(c);
    } else {
        BrotliEncoderState *b = BrotliEncoderCreateInstance(NULL, NULL, NULL);
        cr_assert_not_null(b);
        cr_assert(BrotliEncoderSetParameter(b, BROTLI_PARAM_QUALITY, 5));
        for (size_t i = 0; i < repeat; i++) {
            size_t avail_in = len;
            const uint8_t *next_in = piece;
            BrotliEncoderOperation op = i + 1 == repeat ? BROTLI_OPERATION_FINISH : BROTLI_OPERATION_PROCESS;
            for (;;) {
                size_t avail_out = sizeof tmp;
                uint8_t *next_out = tmp;
                cr_assert(BrotliEncoderCompressStream(b, op, &avail_in, &next_in, &avail_out, &next_out, NULL));
                put(out, tmp, sizeof tmp - avail_out);
                if (op == BROTLI_OPERATION_FINISH ? BrotliEncoderIsFinished(b)
                                                  : avail_in == 0 && !BrotliEncoderHasMoreOutput(b))
                    break;
            }
        }
        BrotliEncoderDestroyInstance(b);
    }
}

static void compress_one(kind k, const uint8_t *data, size_t len, tm_srv_buf *out) {
    compress_repeat(k, data, len, 1, 0, out);
}

static uint64_t rng_next(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* How decode() hands the input over. */
typedef enum feed_mode { WHOLE, BYTES, RANDOM, PIECES_64K } feed_mode;

typedef struct decoded {
    tm_status st;       /* of the first failing call, else TM_OK */
    int in_finish;      /* the failure came from finish */
    tm_error err;
    tm_srv_buf out;
    size_t max_cap;     /* out.cap after every call */
} decoded;

/* Decodes in[0..len) (from an exact-size heap copy) as enc with the cap max. */
static decoded decode(tm_srv_encoding enc, const uint8_t *in, size_t len, uint64_t max, feed_mode mode) {
    decoded r;
    memset(&r, 0, sizeof r);
    uint8_t *copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    if (len) memcpy(copy, in, len);
    tm_srv_decoder *d = NULL;
    cr_assert_eq(tm_srv_decoder_new(enc, max, &d, &r.err), TM_OK);
    uint64_t seed = 0x9e3779b97f4a7c15u ^ len;
    size_t pos = 0;
    while (pos < len) {
        size_t n = mode == WHOLE ? len : mode == BYTES ? 1 : mode == PIECES_64K ? 65536 : 1 + rng_next(&seed) % 5000;
        if (n > len - pos) n = len - pos;
        r.st = tm_srv_decoder_feed(d, copy + pos, n, &r.out, &r.err);
        if (r.out.cap > r.max_cap) r.max_cap = r.out.cap;
        if (r.st) break;
        pos += n;
    }
    if (!r.st) {
        r.st = tm_srv_decoder_finish(d, &r.out, &r.err);
        r.in_finish = r.st != TM_OK;
    }
    if (r.st) {
        cr_assert_eq(r.err.code, r.st);
        /* Sticky: the decoder keeps refusing. */
        tm_error again;
        cr_assert_eq(tm_srv_decoder_feed(d, "x", 1, &r.out, &again), r.st);
        cr_assert_eq(tm_srv_decoder_finish(d, &r.out, &again), r.st);
    }
    tm_srv_decoder_free(d);
    free(copy);
    return r;
}

static void assert_decodes_to(const decoded *r, const uint8_t *want, size_t len, const char *what) {
    cr_assert_eq(r->st, TM_OK, "%s: %s at %llu: %s", what, tm_status_str(r->st), (unsigned long long)r->err.offset,
                 r->err.message);
    cr_assert_eq(r->out.len, len, "%s: %zu bytes, want %zu", what, r->out.len, len);
    cr_assert(len == 0 || memcmp(r->out.data, want, len) == 0, "%s: content differs", what);
}

/* ~600 KB: the demo trace, repetitive text and incompressible bytes. */
static tm_srv_buf sample_data(void) {
    tm_srv_buf b = {0};
    size_t n;
    char *trace = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &n);
    cr_assert_not_null(trace);
    put(&b, trace, n);
    free(trace);
    char line[96];
    for (int i = 0; i < 6000; i++) {
        int k = snprintf(line, sizeof line, "io.sentry.android.core.Frame%d;main;thread %d\n", i % 97, i);
        put(&b, line, (size_t)k);
    }
    uint64_t s = 42;
    for (int i = 0; i < 200000 / 8; i++) {
        uint64_t v = rng_next(&s);
        put(&b, &v, sizeof v);
    }
    return b;
}

static const kind ALL[] = {K_IDENTITY, K_GZIP, K_ZLIB, K_RAW_DEFLATE, K_ZSTD, K_BR};
#define N_ALL (sizeof ALL / sizeof ALL[0])

/* ---- Content-Encoding values ------------------------------------------- */

Test(encoding, parse_values) {
    static const struct {
        const char *v;
        int ok;
        tm_srv_encoding e;
    } cases[] = {
        {NULL, 1, TM_SRV_ENC_IDENTITY},    {"", 1, TM_SRV_ENC_IDENTITY},      {"  \t", 1, TM_SRV_ENC_IDENTITY},
        {"identity", 1, TM_SRV_ENC_IDENTITY}, {"gzip", 1, TM_SRV_ENC_GZIP},   {"GZip", 1, TM_SRV_ENC_GZIP},
        {"x-gzip", 1, TM_SRV_ENC_GZIP},    {" X-GZIP ", 1, TM_SRV_ENC_GZIP},  {"deflate", 1, TM_SRV_ENC_DEFLATE},
        {"\tDeflate", 1, TM_SRV_ENC_DEFLATE}, {"zstd", 1, TM_SRV_ENC_ZSTD},   {"ZSTD ", 1, TM_SRV_ENC_ZSTD},
        {"br", 1, TM_SRV_ENC_BR},          {"Br", 1, TM_SRV_ENC_BR},          {"gzip, br", 0, 0},
        {"gzip,br", 0, 0},                 {"compress", 0, 0},                {"x-compress", 0, 0},
        {"gzi", 0, 0},                     {"gzipp", 0, 0},                   {"brotli", 0, 0},
        {"g zip", 0, 0},                   {"identity;q=1", 0, 0},            {"*", 0, 0},
        /* a list: identity and empty elements count for nothing, one real coding is decoded */
        {"GZIP, identity", 1, TM_SRV_ENC_GZIP}, {"identity,zstd", 1, TM_SRV_ENC_ZSTD}, {" ,br, ", 1, TM_SRV_ENC_BR},
        {"identity, identity", 1, TM_SRV_ENC_IDENTITY}, {",", 1, TM_SRV_ENC_IDENTITY},
        {"gzip, gzip", 0, 0},              {"gzip, identity, br", 0, 0},      {"gzip, bogus", 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tm_srv_encoding e = (tm_srv_encoding)99;
        int r = tm_srv_encoding_parse(cases[i].v, &e);
        cr_assert_eq(r, cases[i].ok ? 0 : -1, "'%s'", cases[i].v ? cases[i].v : "(null)");
        if (cases[i].ok) cr_assert_eq(e, cases[i].e, "'%s'", cases[i].v ? cases[i].v : "(null)");
    }
}

Test(encoding, new_and_free) {
    tm_srv_decoder_free(NULL);
    tm_srv_decoder *d = (tm_srv_decoder *)&d;
    tm_error err;
    cr_assert_eq(tm_srv_decoder_new((tm_srv_encoding)17, 100, &d, &err), TM_ERR_INVALID_ARG);
    cr_assert_null(d);
    for (size_t i = 0; i < N_ALL; i++) {
        cr_assert_eq(tm_srv_decoder_new(enc_of(ALL[i]), 100, &d, &err), TM_OK);
        cr_assert_not_null(d);
        tm_srv_decoder_free(d); /* never fed: nothing leaks */
    }
}

/* ---- round trips -------------------------------------------------------- */

Test(encoding, round_trips_in_every_feed_size) {
    tm_srv_buf data = sample_data();
    static const feed_mode modes[] = {WHOLE, BYTES, RANDOM, PIECES_64K};
    for (size_t i = 0; i < N_ALL; i++) {
        tm_srv_buf z = {0};
        compress_one(ALL[i], data.data, data.len, &z);
        if (ALL[i] != K_IDENTITY) cr_assert_lt(z.len, data.len, "%s compresses", name_of(ALL[i]));
        for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
            decoded r = decode(enc_of(ALL[i]), z.data, z.len, UINT64_MAX, modes[m]);
            char what[64];
            snprintf(what, sizeof what, "%s, mode %d", name_of(ALL[i]), (int)modes[m]);
            assert_decodes_to(&r, data.data, data.len, what);
            tm_srv_buf_release(&r.out);
        }
        tm_srv_buf_release(&z);
    }
    tm_srv_buf_release(&data);
}

Test(encoding, empty_bodies) {
    /* A compressed empty body decodes to nothing... */
    for (size_t i = 0; i < N_ALL; i++) {
        tm_srv_buf z = {0};
        compress_one(ALL[i], (const uint8_t *)"", 0, &z);
        decoded r = decode(enc_of(ALL[i]), z.data, z.len, 0, BYTES);
        assert_decodes_to(&r, NULL, 0, name_of(ALL[i]));
        tm_srv_buf_release(&r.out);
        tm_srv_buf_release(&z);
    }
    /* Empty feeds (even with NULL) change nothing. */
    const uint8_t text[] = "some text";
    for (size_t i = 0; i < N_ALL; i++) {
        tm_srv_buf z = {0}, out = {0};
        compress_one(ALL[i], text, sizeof text, &z);
        tm_srv_decoder *d;
        tm_error err;
        cr_assert_eq(tm_srv_decoder_new(enc_of(ALL[i]), 100, &d, &err), TM_OK);
        cr_assert_eq(tm_srv_decoder_feed(d, NULL, 0, &out, &err), TM_OK);
        cr_assert_eq(tm_srv_decoder_feed(d, z.data, 1, &out, &err), TM_OK);
        cr_assert_eq(tm_srv_decoder_feed(d, z.data + 1, 0, &out, &err), TM_OK);
        cr_assert_eq(tm_srv_decoder_feed(d, z.data + 1, z.len - 1, &out, &err), TM_OK, "%s", err.message);
        cr_assert_eq(tm_srv_decoder_feed(d, NULL, 0, &out, &err), TM_OK);
        cr_assert_eq(tm_srv_decoder_finish(d, &out, &err), TM_OK, "%s: %s", name_of(ALL[i]), err.message);
        cr_assert_eq(out.len, sizeof text);
        cr_assert(memcmp(out.data, text, sizeof text) == 0);
        tm_srv_decoder_free(d);
        tm_srv_buf_release(&out);
        tm_srv_buf_release(&z);
    }
    /* ... but no bytes at all is not a compressed stream. */
    for (size_t i = 0; i < N_ALL; i++) {
        decoded r = decode(enc_of(ALL[i]), NULL, 0, 100, WHOLE);
        if (ALL[i] == K_IDENTITY) {
            assert_decodes_to(&r, NULL, 0, "identity");
        } else {
            cr_assert_eq(r.st, TM_ERR_TRUNCATED, "%s", name_of(ALL[i]));
            cr_assert_eq(r.err.offset, 0);
        }
        tm_srv_buf_release(&r.out);
    }
}

Test(encoding, out_buffer_may_hold_data_already) {
    const uint8_t text[] = "hello, hello, hello";
    tm_srv_buf z = {0};
    compress_one(K_ZSTD, text, sizeof text, &z);
    tm_srv_buf out = {0};
    put(&out, "prefix:", 7);
    tm_srv_decoder *d;
    tm_error err;
    cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_ZSTD, sizeof text, &d, &err), TM_OK);
    cr_assert_eq(tm_srv_decoder_feed(d, z.data, z.len, &out, &err), TM_OK);
    cr_assert_eq(tm_srv_decoder_finish(d, &out, &err), TM_OK);
    cr_assert_eq(out.len, 7 + sizeof text);
    cr_assert(memcmp(out.data, "prefix:hello, hello, hello", 7 + sizeof text) == 0);
    tm_srv_decoder_free(d);
    tm_srv_buf_release(&out);
    tm_srv_buf_release(&z);
}

/* ---- stream boundaries -------------------------------------------------- */

Test(encoding, gzip_members_and_zstd_frames_concatenate) {
    const uint8_t a[] = "first member\n", b[] = "second member\n";
    const kind ks[] = {K_GZIP, K_ZSTD};
    for (size_t i = 0; i < 2; i++) {
        tm_srv_buf z = {0};
        compress_one(ks[i], a, sizeof a - 1, &z);
        compress_one(ks[i], b, sizeof b - 1, &z);
        for (int m = 0; m < 3; m++) {
            decoded r = decode(enc_of(ks[i]), z.data, z.len, UINT64_MAX, (feed_mode)m);
            assert_decodes_to(&r, (const uint8_t *)"first member\nsecond member\n", 27, name_of(ks[i]));
            tm_srv_buf_release(&r.out);
        }
        tm_srv_buf_release(&z);
    }
}

Test(encoding, data_after_the_end) {
    tm_srv_buf data = sample_data();
    /* deflate and br end at their end marker: the offset is the first extra byte. */
    const kind ends[] = {K_ZLIB, K_RAW_DEFLATE, K_BR};
    for (size_t i = 0; i < 3; i++) {
        tm_srv_buf z = {0};
        compress_one(ends[i], data.data, 1000, &z);
        size_t clen = z.len;
        put(&z, "\n", 1);
        for (int m = 0; m < 3; m++) {
            decoded r = decode(enc_of(ends[i]), z.data, z.len, UINT64_MAX, (feed_mode)m);
            cr_assert_eq(r.st, TM_ERR_MALFORMED, "%s mode %d: %s", name_of(ends[i]), m, tm_status_str(r.st));
            cr_assert_eq(r.err.offset, clen, "%s mode %d", name_of(ends[i]), m);
            cr_assert_eq(r.out.len, 1000, "everything before is decoded");
            tm_srv_buf_release(&r.out);
        }
        tm_srv_buf_release(&z);
    }
    /* gzip and zstd read what follows as the next member/frame, which it is not. */
    const kind multi[] = {K_GZIP, K_ZSTD};
    for (size_t i = 0; i < 2; i++) {
        tm_srv_buf z = {0};
        compress_one(multi[i], data.data, 1000, &z);
        size_t clen = z.len;
        put(&z, "garbage!", 8);
        decoded r = decode(enc_of(multi[i]), z.data, z.len, UINT64_MAX, WHOLE);
        cr_assert_eq(r.st, TM_ERR_MALFORMED, "%s: %s", name_of(multi[i]), tm_status_str(r.st));
        cr_assert(r.err.offset >= clen && r.err.offset <= z.len, "%s: offset %llu, stream %zu", name_of(multi[i]),
                  (unsigned long long)r.err.offset, clen);
        tm_srv_buf_release(&r.out);
        tm_srv_buf_release(&z);
    }
    tm_srv_buf_release(&data);
}

Test(encoding, truncated_streams) {
    tm_srv_buf data = sample_data();
    for (size_t i = 1; i < N_ALL; i++) {
        tm_srv_buf z = {0};
        compress_one(ALL[i], data.data, data.len, &z);
        const size_t cuts[] = {1, z.len / 2, z.len - 1};
        for (size_t c = 0; c < 3; c++) {
            decoded r = decode(enc_of(ALL[i]), z.data, cuts[c], UINT64_MAX, RANDOM);
            cr_assert_eq(r.st, TM_ERR_TRUNCATED, "%s cut at %zu: %s (%s)", name_of(ALL[i]), cuts[c],
                         tm_status_str(r.st), r.err.message);
            cr_assert(r.in_finish, "only finish can tell");
            cr_assert_eq(r.err.offset, cuts[c], "%s: every byte was consumed", name_of(ALL[i]));
            cr_assert_leq(r.out.len, data.len); /* a cut checksum leaves all the data decoded */
            cr_assert(memcmp(r.out.data ? r.out.data : (uint8_t *)"", data.data, r.out.len) == 0,
                      "a prefix of the data");
            tm_srv_buf_release(&r.out);
        }
        tm_srv_buf_release(&z);
    }
    tm_srv_buf_release(&data);
}

/* ---- corrupt streams ---------------------------------------------------- */

Test(encoding, corrupt_streams) {
    tm_srv_buf data = sample_data();
    for (size_t i = 1; i < N_ALL; i++) {
        if (ALL[i] == K_BR || ALL[i] == K_RAW_DEFLATE) continue; /* no checksum: a flip may decode; see below */
        tm_srv_buf z = {0};
        compress_one(ALL[i], data.data, data.len, &z);
        /* A flipped byte in the middle and one in the checksum at the end. */
        const size_t at[] = {z.len / 2, z.len - 2};
        for (size_t a = 0; a < 2; a++) {
            z.data[at[a]] ^= 0x55;
            decoded r = decode(enc_of(ALL[i]), z.data, z.len, UINT64_MAX, RANDOM);
            cr_assert_eq(r.st, TM_ERR_MALFORMED, "%s flipped at %zu: %s", name_of(ALL[i]), at[a],
                         tm_status_str(r.st));
            cr_assert(!r.in_finish);
            cr_assert_leq(r.err.offset, z.len, "%s", name_of(ALL[i]));
            if (a == 1)
                cr_assert_geq(r.err.offset, at[a], "%s: the checksum fails at the end (%llu of %zu: %s)",
                              name_of(ALL[i]), (unsigned long long)r.err.offset, z.len, r.err.message);
            z.data[at[a]] ^= 0x55;
            tm_srv_buf_release(&r.out);
        }
        tm_srv_buf_release(&z);
    }
    tm_srv_buf_release(&data);

    /* Headers that are not the format at all, each at its offset. */
    static const struct {
        tm_srv_encoding enc;
        const char *bytes;
        size_t len;
        uint64_t lo, hi; /* the offset the library reports lies in [lo, hi] */
    } bad[] = {
        {TM_SRV_ENC_GZIP, "\x1f\x8c\x08\x00", 4, 1, 2},         /* wrong magic */
        {TM_SRV_ENC_GZIP, "PK\x03\x04 not gzip", 14, 1, 2},
        {TM_SRV_ENC_ZSTD, "\x28\xb5\x2f\xfe\x00\x00\x00\x00", 8, 4, 8}, /* wrong magic */
        {TM_SRV_ENC_DEFLATE, "\x78\x9c\xff\xff\xff", 5, 2, 3},   /* zlib header, then block type 3 */
        {TM_SRV_ENC_DEFLATE, "\xff\xff\xff", 3, 0, 1},          /* raw: block type 3 */
        {TM_SRV_ENC_BR, "\xff\xff\xff\xff\xff\xff\xff\xff", 8, 0, 8},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        decoded r = decode(bad[i].enc, (const uint8_t *)bad[i].bytes, bad[i].len, UINT64_MAX, WHOLE);
        cr_assert_eq(r.st, TM_ERR_MALFORMED, "case %zu: %s", i, tm_status_str(r.st));
        cr_assert(r.err.offset >= bad[i].lo && r.err.offset <= bad[i].hi, "case %zu: offset %llu (%s)", i,
                  (unsigned long long)r.err.offset, r.err.message);
        cr_assert_neq(r.err.message[0], '\0');
        tm_srv_buf_release(&r.out);
    }
}

/* ---- the decoded-size cap ---------------------------------------------- */

Test(encoding, cap_is_exact) {
    tm_srv_buf data = sample_data();
    for (size_t i = 0; i < N_ALL; i++) {
        tm_srv_buf z = {0};
        compress_one(ALL[i], data.data, data.len, &z);
        decoded r = decode(enc_of(ALL[i]), z.data, z.len, data.len, RANDOM);
        assert_decodes_to(&r, data.data, data.len, name_of(ALL[i]));
        cr_assert_leq(r.max_cap, data.len + 1, "%s: cap %zu", name_of(ALL[i]), r.max_cap);
        tm_srv_buf_release(&r.out);

        r = decode(enc_of(ALL[i]), z.data, z.len, data.len - 1, RANDOM);
        cr_assert_eq(r.st, TM_ERR_LIMIT, "%s: %s", name_of(ALL[i]), tm_status_str(r.st));
        cr_assert_eq(r.out.len, data.len - 1, "%s: out stops at the cap", name_of(ALL[i]));
        cr_assert(memcmp(r.out.data, data.data, r.out.len) == 0);
        cr_assert_leq(r.err.offset, z.len);
        cr_assert(strstr(r.err.message, "exceeds"), "%s", r.err.message);
        tm_srv_buf_release(&r.out);
        tm_srv_buf_release(&z);
    }
    tm_srv_buf_release(&data);
}

/* A declared length sizes an identity body's buffer once: no growth (and
 * copy) as it arrives, and a length that lies costs at most 1 MiB. */
Test(encoding, identity_body_sized_from_its_declared_length) {
    tm_srv_buf data = sample_data();
    tm_srv_decoder *d;
    tm_error err;
    cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_IDENTITY, UINT64_MAX, &d, &err), TM_OK);
    tm_srv_decoder_expect(d, data.len);
    tm_srv_buf out = {0};
    const uint8_t *first = NULL;
    for (size_t at = 0; at < data.len; at += 16384) {
        size_t n = data.len - at < 16384 ? data.len - at : 16384;
        cr_assert_eq(tm_srv_decoder_feed(d, data.data + at, n, &out, &err), TM_OK);
        if (!first) first = out.data;
        cr_assert_eq(out.data, first, "the buffer moved at byte %zu", at);
    }
    cr_assert_eq(tm_srv_decoder_finish(d, &out, &err), TM_OK);
    cr_assert_eq(out.cap, data.len + 1);
    cr_assert(out.len == data.len && memcmp(out.data, data.data, data.len) == 0, "identity: content differs");
    tm_srv_decoder_free(d);
    tm_srv_buf_release(&out);

    cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_IDENTITY, UINT64_MAX, &d, &err), TM_OK);
    tm_srv_decoder_expect(d, 1ull << 40);
    cr_assert_eq(tm_srv_decoder_feed(d, "abc", 3, &out, &err), TM_OK);
    cr_assert_eq(out.cap, 1024 * 1024, "a declared terabyte reserves %zu bytes", out.cap);
    tm_srv_decoder_free(d);
    tm_srv_buf_release(&out);

    /* a body longer than declared still arrives whole */
    cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_IDENTITY, UINT64_MAX, &d, &err), TM_OK);
    tm_srv_decoder_expect(d, 100);
    cr_assert_eq(tm_srv_decoder_feed(d, data.data, data.len, &out, &err), TM_OK);
    cr_assert(out.len == data.len && memcmp(out.data, data.data, data.len) == 0, "longer than declared");
    tm_srv_decoder_free(d);
    tm_srv_buf_release(&out);
    tm_srv_buf_release(&data);
}

/* Bytes put into a window (as the server receives a body) grow, charge and
 * cap the output exactly as feeding them does. */
Test(encoding, window_and_commit_are_a_feed) {
    tm_srv_buf data = sample_data();
    for (int limited = 0; limited < 2; limited++) {
        uint64_t max = limited ? data.len - 1 : UINT64_MAX;
        tm_srv_budget fed_budget = {.limit = UINT64_MAX}, put_budget = {.limit = UINT64_MAX};
        tm_srv_decoder *fed, *put_in;
        tm_error fed_err, put_err;
        cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_IDENTITY, max, &fed, &fed_err), TM_OK);
        cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_IDENTITY, max, &put_in, &put_err), TM_OK);
        cr_assert(tm_srv_decoder_is_identity(put_in));
        tm_srv_decoder_share(fed, &fed_budget);
        tm_srv_decoder_share(put_in, &put_budget);
        tm_srv_decoder_expect(fed, 3000);
        tm_srv_decoder_expect(put_in, 3000);
        tm_srv_buf fed_out = {0}, put_out = {0};
        tm_status fed_st = TM_OK, put_st = TM_OK;
        for (size_t at = 0, n; at < data.len && put_st == TM_OK; at += n) {
            n = data.len - at < 5000 ? data.len - at : 5000;
            fed_st = tm_srv_decoder_feed(fed, data.data + at, n, &fed_out, &fed_err);
            uint8_t *room;
            size_t room_len;
            put_st = tm_srv_decoder_window(put_in, &put_out, n, &room, &room_len, &put_err);
            cr_assert_eq(put_st, TM_OK);
            cr_assert_eq(room_len, n);
            memcpy(room, data.data + at, n);
            put_st = tm_srv_decoder_commit(put_in, &put_out, n, &put_err);
            cr_assert_eq(put_st, fed_st, "at %zu", at);
            cr_assert_eq(put_out.len, fed_out.len);
            cr_assert_eq(put_out.cap, fed_out.cap);
            cr_assert_eq(put_budget.used, fed_budget.used);
        }
        cr_assert_eq(put_st, limited ? TM_ERR_LIMIT : TM_OK);
        if (limited) {
            cr_assert_str_eq(put_err.message, fed_err.message);
            cr_assert_eq(put_err.offset, fed_err.offset);
        }
        cr_assert(memcmp(put_out.data, data.data, put_out.len) == 0);
        tm_srv_decoder_free(fed);
        tm_srv_decoder_free(put_in);
        cr_assert_eq(put_budget.used, 0, "the budget is given back");
        tm_srv_buf_release(&fed_out);
        tm_srv_buf_release(&put_out);
    }
    tm_srv_buf_release(&data);
}

/* A window takes a declared length's room in one piece (one receive for a
 * whole body), but never more than the cap's extra byte. */
Test(encoding, window_spans_the_declared_room_up_to_the_cap) {
    tm_srv_decoder *d;
    tm_error err;
    tm_srv_buf out = {0};
    uint8_t *room;
    size_t room_len;
    cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_IDENTITY, UINT64_MAX, &d, &err), TM_OK);
    tm_srv_decoder_expect(d, 200000);
    cr_assert_eq(tm_srv_decoder_window(d, &out, 150000, &room, &room_len, &err), TM_OK);
    cr_assert_eq(room_len, 150000);
    cr_assert_eq(out.cap, 200001, "sized once for the declared length");
    tm_srv_decoder_free(d);
    tm_srv_buf_release(&out);

    cr_assert_eq(tm_srv_decoder_new(TM_SRV_ENC_IDENTITY, 100, &d, &err), TM_OK);
    tm_srv_decoder_expect(d, 1000);
    cr_assert_eq(tm_srv_decoder_window(d, &out, 500, &room, &room_len, &err), TM_OK);
    cr_assert_eq(room_len, 101, "one byte past the cap, to see it passed");
    memset(room, 'x', room_len);
    cr_assert_eq(tm_srv_decoder_commit(d, &out, room_len, &err), TM_ERR_LIMIT);
    cr_assert_eq(out.len, 100);
    cr_assert(strstr(err.message, "exceeds"), "%s", err.message);
    cr_assert_eq(tm_srv_decoder_window(d, &out, 1, &room, &room_len, &err), TM_ERR_LIMIT, "the failure sticks");
    tm_srv_decoder_free(d);
    tm_srv_buf_release(&out);
}

Test(encoding, decompression_bombs) {
    uint8_t *zeros = calloc(1, MIB);
    cr_assert_not_null(zeros);
    const struct {
        kind k;
        size_t mib;
    } bombs[] = {{K_ZSTD, 1024}, {K_BR, 1024}, {K_GZIP, 64}, {K_ZLIB, 64}, {K_RAW_DEFLATE, 64}};
    const uint64_t cap = 3 * MIB + 17;
    for (size_t i = 0; i < sizeof bombs / sizeof bombs[0]; i++) {
        tm_srv_buf z = {0};
        compress_repeat(bombs[i].k, zeros, MIB, bombs[i].mib, 0, &z);
        cr_assert_lt(z.len, bombs[i].mib * MIB / 200, "%s: a bomb is small (%zu bytes)", name_of(bombs[i].k), z.len);
        for (int m = 0; m < 4; m += 2) { /* WHOLE and RANDOM */
            decoded r = decode(enc_of(bombs[i].k), z.data, z.len, cap, (feed_mode)m);
            cr_assert_eq(r.st, TM_ERR_LIMIT, "%s: %s", name_of(bombs[i].k), tm_status_str(r.st));
            cr_assert(!r.in_finish);
            cr_assert_eq(r.out.len, cap);
            cr_assert_leq(r.max_cap, cap + 1, "%s: the buffer grew to %zu", name_of(bombs[i].k), r.max_cap);
            cr_assert_gt(r.err.offset, 0);
            cr_assert_lt(r.err.offset, z.len, "%s: stopped early in the encoded stream", name_of(bombs[i].k));
            tm_srv_buf_release(&r.out);
        }
        tm_srv_buf_release(&z);
    }
    /* identity too */
    decoded r = decode(TM_SRV_ENC_IDENTITY, zeros, MIB, 1000, WHOLE);
    cr_assert_eq(r.st, TM_ERR_LIMIT);
    cr_assert_eq(r.err.offset, 1001, "identity fails at the first byte over");
    cr_assert_eq(r.out.len, 1000);
    cr_assert_leq(r.out.cap, 1001);
    tm_srv_buf_release(&r.out);
    free(zeros);
}

Test(encoding, zstd_window_above_8_mib_is_refused) {
    tm_srv_buf data = sample_data();
    tm_srv_buf z = {0};
    compress_repeat(K_ZSTD, data.data, data.len, 2, 27, &z);
    /* RFC 8878 §3.1.1.1: magic, Frame_Header_Descriptor, Window_Descriptor. */
    cr_assert_gt(z.len, 6);
    cr_assert_eq(z.data[4] & 0x20, 0, "not a single-segment frame: it has a window descriptor");
    uint64_t base = (uint64_t)1 << (10 + (z.data[5] >> 3));
    uint64_t window = base + base / 8 * (z.data[5] & 7);
    cr_assert_gt(window, 8u * MIB, "the frame asks for a %llu-byte window", (unsigned long long)window);
    decoded r = decode(TM_SRV_ENC_ZSTD, z.data, z.len, UINT64_MAX, WHOLE);
    cr_assert_eq(r.st, TM_ERR_LIMIT, "%s: %s", tm_status_str(r.st), r.err.message);
    cr_assert_eq(r.out.len, 0);
    tm_srv_buf_release(&r.out);
    tm_srv_buf_release(&z);

    /* An 8 MiB window is fine. */
    compress_repeat(K_ZSTD, data.data, data.len, 2, 23, &z);
    r = decode(TM_SRV_ENC_ZSTD, z.data, z.len, UINT64_MAX, WHOLE);
    cr_assert_eq(r.st, TM_OK, "%s", r.err.message);
    cr_assert_eq(r.out.len, 2 * data.len);
    tm_srv_buf_release(&r.out);
    tm_srv_buf_release(&z);
    tm_srv_buf_release(&data);
}
