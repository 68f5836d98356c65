/*
 * test_hostile.c — the hostile-input corpus, driven by tests/hostile/EXPECTED.
 *
 * Every line of the manifest names an input, how it is fed (TARGET) and what
 * must come back (EXPECT); see the manifest's header for the grammar. Inputs
 * are files committed in tests/hostile/, or, for the ones too large to
 * commit (a million empty packets, 10 GB compression bombs, sequence
 * floods), "gen:" names that this suite builds in memory. Every committed
 * file has a builder here too, and the suite checks the file is byte for
 * byte what its builder writes (TM_HOSTILE_REGENERATE=1 rewrites them), so
 * the builders document what each file is.
 *
 * Tests: every entry in-process (status, Relay reason, stats counters, the
 * message, an offset inside the input, and every exporter on what parses,
 * JSON outputs checked to be valid JSON); every entry again in a child
 * process under a hard RLIMIT_AS (a clean error, never an abort); the
 * trace entries that fail to parse through the CLI (non-zero exit, stderr
 * naming the byte offset the library reports).
 */
#define _GNU_SOURCE /* mkstemp, fork, setrlimit */
#include <brotli/encode.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "server.h"
#include "wire/pb.h" /* wire types of the hand-made fields */
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

/* AddressSanitizer reserves terabytes of shadow memory: RLIMIT_AS cannot apply. */
#if defined(__SANITIZE_ADDRESS__)
#define TM_HOSTILE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TM_HOSTILE_ASAN 1
#endif
#endif

#define HOSTILE_DIR TM_SOURCE_DIR "/tests/hostile"
#define N_OF(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_COMMITTED_BYTES (64u * 1024u)
/* Decoded-size cap of request bodies; the server's default max_envelope_size
 * is 200 MiB, smaller here so that bombs stay cheap under RLIMIT_AS. */
#define REQUEST_CAP (16u << 20)
/* "10 GB" of decompressed output, for the bombs. */
#define BOMB_BYTES 10000000000ull

/* ==== Building blocks for Perfetto traces ============================== */

static void put(tb_buf *t, const char *bytes, size_t n) { tb_raw(t, bytes, n); }
#define PUT(t, lit) put((t), (lit), sizeof(lit) - 1)

/* BOOTTIME 1 s = REALTIME 1.7e9 s on sequence 1. */

/* interned_data on `seq` with the cleared flag: functions main, work, leaf,
 * a frame for each, callstack 1 = main > work > leaf. */
static void interned_packet(tb_buf *t, uint32_t seq) {
    size_t p = tb_packet_open(t, seq, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "work", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "leaf", 4);
    for (uint64_t k = 1; k <= 3; k++) tb_frame(t, k, k, 0, 0x100 * k);
    static const uint64_t cs[] = {1, 2, 3};
    tb_callstack(t, 1, cs, 3, 1);
    tb_close(t, i);
    tb_close(t, p);
}

/* n perf samples of callstack cs on sequence 1, 10 ms apart. */
static void samples(tb_buf *t, uint64_t cs, int n) {
    for (int k = 0; k < n; k++)
        tb_perf_sample(t, 1, 2000000000ull + 10000000ull * (uint64_t)k, 100, 100, cs, TB_SEQ_NEEDS);
}

/* A trace that converts in every mode: clock, interned data, n samples. */
static void valid_trace(tb_buf *t, int n) {
    tb_standard_clocks(t, 1);
    interned_packet(t, 1);
    samples(t, 1, n);
}

/* Opens a packet on sequence 1 holding interned_data (close both with close2). */
typedef struct open2 {
    size_t outer, inner;
} open2;
static open2 interned_open(tb_buf *t, uint32_t flags) {
    open2 o;
    o.outer = tb_packet_open(t, 1, TB_NO_TS, flags);
    o.inner = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    return o;
}
static void close2(tb_buf *t, open2 o) {
    tb_close(t, o.inner);
    tb_close(t, o.outer);
}

static void ff_bytes(tb_buf *t, size_t n) {
    for (size_t i = 0; i < n; i++) PUT(t, "\xff");
}

/* A packet holding compressed_packets = the given bytes. */
static void compressed_field(tb_buf *t, const void *z, size_t n) {
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_bytes(t, TM_PF_PACKET_COMPRESSED_PACKETS, z, n);
    tb_close(t, p);
}

/* ==== Compression bombs, written by hand ================================ */

/* An LSB-first bit writer, as deflate packs its bits. */
typedef struct bitw {
    tb_buf *b;
    uint32_t acc;
    int n;
} bitw;

static void bits(bitw *w, uint32_t v, int n) {
    w->acc |= v << w->n;
    w->n += n;
    while (w->n >= 8) {
        uint8_t c = (uint8_t)w->acc;
        tb_raw(w->b, &c, 1);
        w->acc >>= 8;
        w->n -= 8;
    }
}

/* Huffman codes go most significant bit first. */
static void code(bitw *w, uint32_t c, int len) {
    for (int i = len - 1; i >= 0; i--) bits(w, (c >> i) & 1, 1);
}

/* count zero bits, in bulk: pending bits are below 8, so one byte carries
 * them and the rest are zero bytes. */
static void zero_bits(bitw *w, uint64_t count) {
    uint64_t total = (uint64_t)w->n + count;
    if (total >= 8) {
        uint8_t c = (uint8_t)w->acc;
        tb_raw(w->b, &c, 1);
        static const uint8_t zeros[1 << 16];
        for (uint64_t left = total / 8 - 1; left;) {
            size_t n = left < sizeof zeros ? (size_t)left : sizeof zeros;
            tb_raw(w->b, zeros, n);
            left -= n;
        }
        w->acc = 0;
    }
    w->n = (int)(total % 8);
}

/* One final dynamic-Huffman deflate block inflating to 1 + 258 * matches
 * zero bytes: a literal 0, then `matches` copies of (length 258, distance 1)
 * at two bits each (the 1032:1 limit of deflate). Literal/length codes:
 * 285 -> "0", 0 -> "10", 256 -> "11"; one distance code of length 1. */
static void deflate_zeros(tb_buf *out, uint64_t matches) {
    bitw w = {out, 0, 0};
    bits(&w, 1, 1);  /* BFINAL */
    bits(&w, 2, 2);  /* dynamic Huffman */
    bits(&w, 29, 5); /* HLIT: 286 codes */
    bits(&w, 0, 5);  /* HDIST: 1 code */
    bits(&w, 14, 4); /* HCLEN: 18 code length codes */
    /* code length code lengths in the order 16 17 18 0 8 7 9 6 10 5 11 4 12 3 13 2 14 1:
     * 18 -> 1 bit ("0"), 1 and 2 -> 2 bits ("10", "11") */
    static const uint8_t cl[18] = {0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2};
    for (size_t i = 0; i < 18; i++) bits(&w, cl[i], 3);
    code(&w, 3, 2);                     /* literal 0: length 2 */
    code(&w, 0, 1), bits(&w, 127, 7);   /* 138 zeros */
    code(&w, 0, 1), bits(&w, 106, 7);   /* 117 zeros: literals 1..255 unused */
    code(&w, 3, 2);                     /* 256: length 2 */
    code(&w, 0, 1), bits(&w, 17, 7);    /* 28 zeros: 257..284 */
    code(&w, 2, 2);                     /* 285: length 1 */
    code(&w, 2, 2);                     /* distance 0: length 1 */
    code(&w, 2, 2);                     /* the literal 0 */
    zero_bits(&w, 2 * matches);         /* the matches */
    code(&w, 3, 2);                     /* end of block */
    if (w.n) bits(&w, 0, 8 - w.n);
}

static uint64_t bomb_matches(uint64_t bytes) { return (bytes - 1 + 257) / 258; }

static void be32(tb_buf *t, uint32_t v) {
    uint8_t b[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    tb_raw(t, b, 4);
}
static void le32(tb_buf *t, uint32_t v) {
    uint8_t b[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    tb_raw(t, b, 4);
}

/* A zlib stream of at least `bytes` zero bytes (with its true Adler-32). */
static void zlib_bomb(tb_buf *out, uint64_t bytes) {
    uint64_t m = bomb_matches(bytes), n = 1 + 258 * m;
    PUT(out, "\x78\x01");
    deflate_zeros(out, m);
    be32(out, (uint32_t)((n % 65521) << 16 | 1)); /* Adler-32 of n zeros: a = 1, b = n */
}

/* CRC-32 of n zero bytes by doubling with crc32_combine. */
static uint32_t crc32_of_zeros(uint64_t n) {
    uLong one = crc32(0, (const Bytef *)"", 1), acc = 0, pow = one;
    uint64_t len = 1;
    for (uint64_t rest = n; rest; rest >>= 1) {
        if (rest & 1) acc = crc32_combine(acc, pow, (z_off_t)len);
        pow = crc32_combine(pow, pow, (z_off_t)len);
        len <<= 1;
    }
    return (uint32_t)acc;
}

static void gzip_bomb(tb_buf *out, uint64_t bytes) {
    uint64_t m = bomb_matches(bytes), n = 1 + 258 * m;
    PUT(out, "\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff");
    deflate_zeros(out, m);
    le32(out, crc32_of_zeros(n));
    le32(out, (uint32_t)n);
}

/* A zstd frame declaring `content_size` and holding `blocks` RLE blocks of
 * 128 KiB zeros (4 bytes each). */
static void zstd_rle(tb_buf *out, uint64_t content_size, uint64_t blocks) {
    PUT(out, "\x28\xb5\x2f\xfd");
    PUT(out, "\xc0"); /* 8-byte Frame_Content_Size, window descriptor follows */
    PUT(out, "\x38"); /* window 128 KiB */
    for (int i = 0; i < 8; i++) {
        uint8_t c = (uint8_t)(content_size >> (8 * i));
        tb_raw(out, &c, 1);
    }
    for (uint64_t k = 0; k < blocks; k++) {
        uint32_t h = (k + 1 == blocks) | 1u << 1 | (131072u << 3);
        uint8_t b[4] = {(uint8_t)h, (uint8_t)(h >> 8), (uint8_t)(h >> 16), 0};
        tb_raw(out, b, 4);
    }
}

/* ==== Envelopes ========================================================= */

#define ENV_HEADER "{\"event_id\":\"9ec79c33ec9942ab8353589fcb2e04dc\"}\n"
static const char chunk_meta[] =
    "{\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","
    "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"android\","
    "\"content_type\":\"perfetto\",\"client_sdk\":{\"name\":\"sentry-android\",\"version\":\"1.0\"}}";

/* An envelope with one compound profile_chunk item: meta then trace. */
static void perfetto_envelope(tb_buf *out, const char *meta, const tb_buf *trace) {
    char hdr[256];
    size_t ml = strlen(meta);
    snprintf(hdr, sizeof hdr,
             "{\"type\":\"profile_chunk\",\"content_type\":\"application/x-perfetto-trace\","
             "\"platform\":\"android\",\"meta_length\":%zu,\"length\":%zu}\n",
             ml, ml + trace->len);
    PUT(out, ENV_HEADER);
    put(out, hdr, strlen(hdr));
    put(out, meta, ml);
    tb_raw(out, trace->data, trace->len);
    PUT(out, "\n");
}

/* ==== The builders ====================================================== */

typedef void (*build_fn)(tb_buf *t);
#define BUILDER(fn) static void fn(tb_buf *t)

/* -- truncation -- */
BUILDER(truncated_tag_at_end) { valid_trace(t, 2); PUT(t, "\x80"); }
BUILDER(truncated_length_at_end) { valid_trace(t, 2); PUT(t, "\x0a\x80"); }
BUILDER(truncated_inside_perf_sample) {
    valid_trace(t, 2);
    tb_buf s = {0};
    tb_perf_sample(&s, 1, 3000000000ull, 100, 100, 1, TB_SEQ_NEEDS);
    tb_raw(t, s.data, s.len - 3);
    tb_free(&s);
}
BUILDER(truncated_inside_interned_data) {
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    tb_tag(t, TM_PF_PACKET_INTERNED_DATA, TM_PB_LEN);
    tb_varint(t, 40); /* 3 bytes follow inside the packet */
    PUT(t, "\x2a\x01\x00");
    tb_close(t, p);
    samples(t, 1, 1);
}
BUILDER(truncated_interned_string) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    size_t f = tb_open(t, TM_PF_INTERNED_FUNCTION_NAMES);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_tag(t, TM_PF_INTERNED_STRING_STR, TM_PB_LEN);
    tb_varint(t, 50);
    PUT(t, "main");
    tb_close(t, f);
    close2(t, o);
}
BUILDER(truncated_packed_frame_ids) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    size_t c = tb_open(t, TM_PF_INTERNED_CALLSTACKS);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_tag(t, TM_PF_CALLSTACK_FRAME_IDS, TM_PB_LEN);
    tb_varint(t, 3);
    PUT(t, "\x01\x02\x83"); /* the last varint continues past the field */
    tb_close(t, c);
    close2(t, o);
}
BUILDER(truncated_clock_value) {
    size_t p = tb_packet_open(t, 1, TB_NO_TS, 0);
    size_t s = tb_open(t, TM_PF_PACKET_CLOCK_SNAPSHOT);
    size_t c = tb_open(t, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(t, TM_PF_CLOCK_ID, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    tb_tag(t, TM_PF_CLOCK_TIMESTAMP, TM_PB_VARINT);
    PUT(t, "\xff\xff");
    tb_close(t, c);
    tb_close(t, s);
    tb_close(t, p);
}
BUILDER(truncated_streaming_deltas) {
    valid_trace(t, 1);
    size_t p = tb_packet_open(t, 1, 3000000000ull, TB_SEQ_NEEDS);
    size_t s = tb_open(t, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    static const uint64_t cs[] = {1, 1};
    tb_packed(t, TM_PF_STREAMING_CALLSTACK_IID, cs, 2);
    tb_tag(t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, TM_PB_LEN);
    tb_varint(t, 2);
    PUT(t, "\x01\xff");
    tb_close(t, s);
    tb_close(t, p);
}
BUILDER(truncated_inside_compressed_payload) {
    tb_buf inner = {0};
    tb_perf_sample(&inner, 1, 3000000000ull, 100, 100, 1, TB_SEQ_NEEDS);
    PUT(&inner, "\x0a\x05\x08"); /* a packet running past the inflated end */
    valid_trace(t, 1);
    tb_compressed_packet(t, &inner);
    tb_free(&inner);
}
BUILDER(truncated_zlib_stream) {
    tb_buf inner = {0};
    samples(&inner, 1, 20);
    uLongf zn = compressBound(inner.len);
    uint8_t *z = malloc(zn);
    if (!z || compress2(z, &zn, inner.data, inner.len, 6) != Z_OK) abort();
    valid_trace(t, 1);
    compressed_field(t, z, zn / 2);
    free(z);
    tb_free(&inner);
}
BUILDER(empty_trace) { (void)t; }

/* -- varints -- */
BUILDER(varint_11_bytes_packet_length) { valid_trace(t, 1); PUT(t, "\x0a"); ff_bytes(t, 10); PUT(t, "\x01"); }
BUILDER(varint_11_bytes_tag) { valid_trace(t, 1); ff_bytes(t, 10); PUT(t, "\x01"); }
BUILDER(varint_11_bytes_timestamp) {
    valid_trace(t, 1);
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_tag(t, TM_PF_PACKET_TIMESTAMP, TM_PB_VARINT);
    ff_bytes(t, 10);
    PUT(t, "\x01");
    tb_close(t, p);
}
BUILDER(varint_10_bytes_overflowing_64_bits) {
    valid_trace(t, 1);
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_tag(t, TM_PF_PACKET_TIMESTAMP, TM_PB_VARINT);
    ff_bytes(t, 9);
    PUT(t, "\x7f"); /* bits 64..69 set */
    tb_close(t, p);
}
BUILDER(varint_11_bytes_frame_id) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    size_t c = tb_open(t, TM_PF_INTERNED_CALLSTACKS);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_tag(t, TM_PF_CALLSTACK_FRAME_IDS, TM_PB_VARINT);
    ff_bytes(t, 10);
    PUT(t, "\x01");
    tb_close(t, c);
    close2(t, o);
}

/* -- lengths -- */
BUILDER(length_past_end_top_level) { valid_trace(t, 2); PUT(t, "\x0a\x10\x08\x01"); }
BUILDER(length_2pow64_minus_1_top_level) {
    valid_trace(t, 1);
    PUT(t, "\x0a");
    tb_varint(t, UINT64_MAX);
    PUT(t, "\x08\x01");
}
BUILDER(length_2pow64_minus_1_interned_data) {
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    tb_tag(t, TM_PF_PACKET_INTERNED_DATA, TM_PB_LEN);
    tb_varint(t, UINT64_MAX);
    PUT(t, "\x2a\x00");
    tb_close(t, p);
    samples(t, 1, 1);
}
BUILDER(length_2pow63_function_name) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    size_t f = tb_open(t, TM_PF_INTERNED_FUNCTION_NAMES);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_tag(t, TM_PF_INTERNED_STRING_STR, TM_PB_LEN);
    tb_varint(t, 1ull << 63);
    PUT(t, "main");
    tb_close(t, f);
    close2(t, o);
}
BUILDER(length_2pow64_minus_2_frame_ids) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    size_t c = tb_open(t, TM_PF_INTERNED_CALLSTACKS);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_tag(t, TM_PF_CALLSTACK_FRAME_IDS, TM_PB_LEN);
    tb_varint(t, UINT64_MAX - 1);
    PUT(t, "\x01");
    tb_close(t, c);
    close2(t, o);
}
BUILDER(length_2pow64_minus_1_compressed) {
    valid_trace(t, 1);
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_tag(t, TM_PF_PACKET_COMPRESSED_PACKETS, TM_PB_LEN);
    tb_varint(t, UINT64_MAX);
    PUT(t, "\x78\x9c");
    tb_close(t, p);
}
static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

/* One packet of exactly `bytes` payload bytes (an unknown bytes field). */
static void packet_of(tb_buf *t, size_t bytes) {
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    size_t fill = bytes - 2 - 4; /* field 1000's tag takes 2 bytes, its length 4 */
    if (varint_size(fill) != 4) abort();
    tb_tag(t, 1000, TM_PB_LEN);
    tb_varint(t, fill);
    uint8_t *zeros = calloc(1, fill);
    if (!zeros) abort();
    tb_raw(t, zeros, fill);
    free(zeros);
    tb_close(t, p);
}
BUILDER(gen_packet_of_max_packet_bytes) { valid_trace(t, 2); packet_of(t, 4u << 20); }
BUILDER(gen_packet_over_max_packet_bytes) { valid_trace(t, 2); packet_of(t, (4u << 20) + 1); }

/* -- wire types -- */
BUILDER(wire_packet_as_varint) { valid_trace(t, 1); tb_uint(t, TM_PF_TRACE_PACKET, 5); valid_trace(t, 1); }
BUILDER(wire_packet_as_fixed64) { valid_trace(t, 1); tb_fixed64(t, TM_PF_TRACE_PACKET, 5); }
BUILDER(wire_timestamp_as_bytes) {
    valid_trace(t, 1);
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_bytes(t, TM_PF_PACKET_TIMESTAMP, "\x01", 1);
    tb_uint(t, TM_PF_PACKET_SEQUENCE_ID, 1);
    tb_close(t, p);
}
BUILDER(wire_sequence_id_as_fixed32) {
    valid_trace(t, 1);
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_fixed32(t, TM_PF_PACKET_SEQUENCE_ID, 1);
    tb_close(t, p);
}
BUILDER(wire_interned_data_as_varint) {
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    tb_uint(t, TM_PF_PACKET_INTERNED_DATA, 1);
    tb_close(t, p);
}
BUILDER(wire_perf_sample_as_fixed32) {
    valid_trace(t, 1);
    size_t p = tb_packet_open(t, 1, 3000000000ull, TB_SEQ_NEEDS);
    tb_fixed32(t, TM_PF_PACKET_PERF_SAMPLE, 1);
    tb_close(t, p);
}
BUILDER(wire_callstack_iid_as_bytes) {
    valid_trace(t, 1);
    size_t p = tb_packet_open(t, 1, 3000000000ull, TB_SEQ_NEEDS);
    size_t s = tb_open(t, TM_PF_PACKET_PERF_SAMPLE);
    tb_uint(t, TM_PF_PERF_SAMPLE_PID, 100);
    tb_uint(t, TM_PF_PERF_SAMPLE_TID, 100);
    tb_bytes(t, TM_PF_PERF_SAMPLE_CALLSTACK_IID, "\x01", 1);
    tb_close(t, s);
    tb_close(t, p);
}
BUILDER(wire_frame_ids_as_fixed64) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    size_t c = tb_open(t, TM_PF_INTERNED_CALLSTACKS);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_fixed64(t, TM_PF_CALLSTACK_FRAME_IDS, 1);
    tb_close(t, c);
    close2(t, o);
}
BUILDER(wire_clock_timestamp_as_bytes) {
    size_t p = tb_packet_open(t, 1, TB_NO_TS, 0);
    size_t s = tb_open(t, TM_PF_PACKET_CLOCK_SNAPSHOT);
    size_t c = tb_open(t, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(t, TM_PF_CLOCK_ID, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    tb_bytes(t, TM_PF_CLOCK_TIMESTAMP, "\x01", 1);
    tb_close(t, c);
    tb_close(t, s);
    tb_close(t, p);
}
BUILDER(wire_type_7_in_packet) {
    valid_trace(t, 1);
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    PUT(t, "\x47\x00"); /* field 8, wire type 7 */
    tb_close(t, p);
}
BUILDER(wire_start_group_top_level) { valid_trace(t, 1); PUT(t, "\x0b\x08\x01\x0c"); }

/* -- nesting -- */
static void nest(tb_buf *t, uint32_t field, int depth) {
    size_t marks[5000];
    if (depth > (int)N_OF(marks)) abort();
    for (int d = 0; d < depth; d++) marks[d] = tb_open(t, field);
    for (int d = depth - 1; d >= 0; d--) tb_close(t, marks[d]);
}
BUILDER(deep_nesting_unknown_packet_field) {
    valid_trace(t, 2);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, 0);
    nest(t, 1000, 5000);
    tb_close(t, p);
    samples(t, 1, 2);
}
BUILDER(deep_nesting_inside_interned_data) {
    tb_standard_clocks(t, 1);
    interned_packet(t, 1);
    open2 o = interned_open(t, 0);
    nest(t, 999, 4000);
    close2(t, o);
    samples(t, 1, 2);
}
BUILDER(compressed_nested_100_deep) {
    tb_buf cur = {0};
    samples(&cur, 1, 2);
    for (int d = 0; d < 100; d++) {
        tb_buf wrap = {0};
        tb_compressed_packet(&wrap, &cur);
        tb_free(&cur);
        cur = wrap;
    }
    valid_trace(t, 2);
    tb_raw(t, cur.data, cur.len);
    tb_free(&cur);
}
BUILDER(gen_million_empty_packets) {
    for (int k = 0; k < 1000000; k++) PUT(t, "\x0a\x00");
}

/* -- interning -- */
BUILDER(interned_iids_2pow64_minus_1) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, UINT64_MAX, "main", 4);
    tb_frame(t, UINT64_MAX, UINT64_MAX, 0, 0x10);
    static const uint64_t cs[] = {UINT64_MAX};
    tb_callstack(t, UINT64_MAX, cs, 1, 1);
    close2(t, o);
    samples(t, UINT64_MAX, 2);
}
/* A valid trace, then interned_data on sequence 1 written by `more`, then
 * two samples of callstack cs. */
static void with_interned(tb_buf *t, void (*more)(tb_buf *), uint64_t cs) {
    valid_trace(t, 2);
    open2 o = interned_open(t, 0);
    more(t);
    close2(t, o);
    for (int k = 0; k < 2; k++) tb_perf_sample(t, 1, 2100000000ull + 10000000ull * (uint64_t)k, 100, 100, cs, TB_SEQ_NEEDS);
}
static void self_ref(tb_buf *t) {
    static const uint64_t f[] = {5, 5};
    tb_callstack(t, 5, f, 2, 1); /* no frame 5: only the callstack has iid 5 */
}
static void missing_frame(tb_buf *t) {
    static const uint64_t f[] = {1, 99, 3};
    tb_callstack(t, 6, f, 3, 1);
}
static void missing_mapping(tb_buf *t) {
    tb_frame(t, 10, 1, 77, 0x10);
    static const uint64_t f[] = {1, 10};
    tb_callstack(t, 7, f, 2, 1);
}
static void missing_function(tb_buf *t) {
    tb_frame(t, 11, 88, 0, 0x10);
    static const uint64_t f[] = {1, 11};
    tb_callstack(t, 8, f, 2, 1);
}
static void missing_path_and_build_id(tb_buf *t) {
    static const uint64_t paths[] = {66, 67};
    tb_mapping(t, 1, 55, 0x1000, 0x2000, paths, 2);
    tb_frame(t, 12, 1, 1, 0x10);
    static const uint64_t f[] = {12};
    tb_callstack(t, 9, f, 1, 1);
}
BUILDER(callstack_self_reference) { with_interned(t, self_ref, 5); }
/* heapprofd ProfilePackets: a dump of pid 7 at MONOTONIC_COARSE ts; its
 * own tables hold callstack 1 = one frame "f". */
static void heap_packet(tb_buf *t, uint64_t index, int continued, uint64_t ts, const tb_heap_sample *s, size_t n) {
    size_t pkt = tb_packet_open(t, 5, ts, index == 0 ? TB_SEQ_CLEARED : 0);
    size_t pp = tb_open(t, TM_PF_PACKET_PROFILE_PACKET);
    tb_interned_string(t, TM_PF_PROFILE_STRINGS, 1, "f", 1);
    size_t m = tb_open(t, TM_PF_PROFILE_MAPPINGS);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_close(t, m);
    size_t f = tb_open(t, TM_PF_PROFILE_FRAMES);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_uint(t, TM_PF_FRAME_FUNCTION_NAME_ID, 1);
    tb_uint(t, TM_PF_FRAME_MAPPING_ID, 1);
    tb_close(t, f);
    const uint64_t one[1] = {1};
    size_t c = tb_open(t, TM_PF_PROFILE_CALLSTACKS);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_repeated(t, TM_PF_CALLSTACK_FRAME_IDS, one, 1);
    tb_close(t, c);
    tb_heap_dump(t, 7, ts, NULL, 0, s, n);
    if (continued) tb_uint(t, TM_PF_PROFILE_CONTINUED, 1);
    tb_uint(t, TM_PF_PROFILE_INDEX, index);
    tb_close(t, pp);
    tb_close(t, pkt);
}
BUILDER(heap_callstack_missing) {
    tb_heap_clocks(t, 1);
    const tb_heap_sample s[1] = {{42, 100, 0, 1, 0}};
    heap_packet(t, 0, 0, 10, s, 1);
}
BUILDER(heap_totals_shrink) {
    tb_heap_clocks(t, 1);
    const tb_heap_sample a[1] = {{1, 1000, 0, 10, 0}}, b[1] = {{1, 500, 0, 5, 0}};
    heap_packet(t, 0, 0, 10, a, 1);
    heap_packet(t, 1, 0, 20, b, 1);
}
BUILDER(heap_frees_exceed_allocations) {
    tb_heap_clocks(t, 1);
    const tb_heap_sample s[1] = {{1, 100, 5000, 1, 50}};
    heap_packet(t, 0, 0, 10, s, 1);
}
BUILDER(heap_sizes_2pow64_minus_1) {
    tb_heap_clocks(t, 1);
    const tb_heap_sample s[1] = {{1, UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX}};
    heap_packet(t, 0, 0, 10, s, 1);
}
BUILDER(heap_continued_never_ends) {
    tb_heap_clocks(t, 1);
    const tb_heap_sample s[1] = {{1, 100, 0, 1, 0}};
    for (uint64_t i = 0; i < 50; i++) heap_packet(t, i, 1, 10, s, 1);
}
BUILDER(heap_dumps_out_of_order) {
    tb_heap_clocks(t, 1);
    const tb_heap_sample a[1] = {{1, 100, 0, 1, 0}}, b[1] = {{1, 200, 0, 2, 0}};
    heap_packet(t, 1, 0, 20, b, 1);
    heap_packet(t, 0, 0, 10, a, 1);
}
BUILDER(heap_sample_size_as_bytes) {
    tb_heap_clocks(t, 1);
    size_t pkt = tb_packet_open(t, 5, 10, TB_SEQ_CLEARED);
    size_t pp = tb_open(t, TM_PF_PACKET_PROFILE_PACKET);
    size_t d = tb_open(t, TM_PF_PROFILE_PROCESS_DUMPS);
    size_t h = tb_open(t, TM_PF_HEAP_DUMP_SAMPLES);
    tb_str(t, TM_PF_HEAP_SAMPLE_SELF_ALLOCATED, "lots");
    tb_close(t, h);
    tb_close(t, d);
    tb_close(t, pp);
    tb_close(t, pkt);
}
/* heapprofd's streaming mode: entries without callstacks, counted only. */
static void streaming_alloc_packet(tb_buf *t, size_t addresses, size_t sizes, uint64_t size) {
    size_t pkt = tb_packet_open(t, 5, 10, 0);
    size_t sa = tb_open(t, TM_PF_PACKET_STREAMING_ALLOCATION);
    for (size_t i = 0; i < addresses; i++) tb_uint(t, TM_PF_STREAMING_ALLOC_ADDRESS, 0x1000 + i);
    for (size_t i = 0; i < sizes; i++) tb_uint(t, TM_PF_STREAMING_ALLOC_SAMPLE_SIZE, size);
    tb_close(t, sa);
    tb_close(t, pkt);
}
BUILDER(heap_streaming_fields_disagree) {
    tb_heap_clocks(t, 1);
    streaming_alloc_packet(t, 3, 1, 4096);
}
BUILDER(heap_streaming_sizes_2pow64_minus_1) {
    tb_heap_clocks(t, 1);
    for (int i = 0; i < 3; i++) streaming_alloc_packet(t, 2, 2, UINT64_MAX);
}
BUILDER(heap_streaming_free_address_as_fixed64) {
    tb_heap_clocks(t, 1);
    size_t pkt = tb_packet_open(t, 5, 10, 0);
    size_t sf = tb_open(t, TM_PF_PACKET_STREAMING_FREE);
    tb_fixed64(t, TM_PF_STREAMING_FREE_ADDRESS, 0x1000); /* declared uint64: a varint */
    tb_close(t, sf);
    tb_close(t, pkt);
}
BUILDER(callstack_missing_frame) { with_interned(t, missing_frame, 6); }
BUILDER(callstack_missing) { valid_trace(t, 2); tb_perf_sample(t, 1, 2100000000ull, 100, 100, 42, TB_SEQ_NEEDS); }
BUILDER(frame_missing_mapping) { with_interned(t, missing_mapping, 7); }
BUILDER(frame_missing_function_name) { with_interned(t, missing_function, 8); }
BUILDER(mapping_missing_paths_and_build_id) { with_interned(t, missing_path_and_build_id, 9); }

/* A recursive callstack of n frames (all frame 1). */
static void deep_stack(tb_buf *t, size_t n) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "recurse", 7);
    tb_frame(t, 1, 1, 0, 0x40);
    uint64_t *f = malloc(n * sizeof *f);
    if (!f) abort();
    for (size_t i = 0; i < n; i++) f[i] = 1;
    tb_callstack(t, 1, f, n, 1);
    free(f);
    close2(t, o);
    samples(t, 1, 2);
}
BUILDER(callstack_1000_frames) { deep_stack(t, 1000); }
BUILDER(callstack_1001_frames) { deep_stack(t, 1001); }

/* -- sequences -- */
/* A valid trace on sequence 1, then one empty packet on each of 2..n. */
static void sequences(tb_buf *t, uint32_t n) {
    valid_trace(t, 2);
    for (uint32_t s = 2; s <= n; s++) tb_close(t, tb_packet_open(t, s, TB_NO_TS, 0));
}
BUILDER(sequences_4) { sequences(t, 4); }
BUILDER(sequences_64) { sequences(t, 64); }
BUILDER(sequences_65) { sequences(t, 65); }
BUILDER(gen_sequences_1000001) { sequences(t, 1000001); }

/* -- path segments -- */
static void path_segments(tb_buf *t, size_t n) {
    valid_trace(t, 0);
    open2 o = interned_open(t, 0);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "seg", 3);
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 1, "\x01\x02\x03\x04", 4);
    uint64_t *p = malloc(n * sizeof *p);
    if (!p) abort();
    for (size_t i = 0; i < n; i++) p[i] = 1;
    tb_mapping(t, 1, 1, 0x1000, 0x2000, p, n);
    free(p);
    tb_frame(t, 20, 1, 1, 0x10);
    static const uint64_t f[] = {20};
    tb_callstack(t, 10, f, 1, 1);
    close2(t, o);
    samples(t, 10, 2);
}
BUILDER(path_segments_100) { path_segments(t, 100); }
BUILDER(path_segments_101) { path_segments(t, 101); }
BUILDER(path_segments_10001) { path_segments(t, 10001); }

/* -- timestamps -- */
static void streaming(tb_buf *t, const uint64_t *cs, size_t n_cs, const int64_t *deltas, size_t n_d) {
    valid_trace(t, 2);
    size_t p = tb_packet_open(t, 1, 3000000000ull, TB_SEQ_NEEDS);
    size_t s = tb_open(t, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    tb_packed(t, TM_PF_STREAMING_CALLSTACK_IID, cs, n_cs);
    uint64_t d[8];
    for (size_t i = 0; i < n_d; i++) d[i] = (uint64_t)deltas[i];
    tb_packed(t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, d, n_d);
    tb_close(t, s);
    tb_close(t, p);
}
static const uint64_t three_cs[] = {1, 1, 1};
BUILDER(streaming_deltas_negative) {
    static const int64_t d[] = {0, -3000000000000ll, 1};
    streaming(t, three_cs, 3, d, 3);
}
BUILDER(streaming_deltas_overflow) {
    static const int64_t d[] = {0, INT64_MAX, INT64_MAX};
    streaming(t, three_cs, 3, d, 3);
}
BUILDER(streaming_fewer_deltas_than_callstacks) {
    static const int64_t d[] = {0};
    streaming(t, three_cs, 3, d, 1);
}
BUILDER(perf_sample_timestamp_2pow64_minus_1) {
    valid_trace(t, 2);
    tb_perf_sample(t, 1, UINT64_MAX, 100, 100, 1, TB_SEQ_NEEDS);
}
BUILDER(thread_reference_time_negative) {
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 2, TB_NO_TS, TB_SEQ_CLEARED);
    size_t d = tb_open(t, TM_PF_PACKET_THREAD_DESCRIPTOR);
    tb_uint(t, TM_PF_THREAD_DESC_PID, 100);
    tb_uint(t, TM_PF_THREAD_DESC_TID, 101);
    tb_uint(t, TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US, (uint64_t)-5000); /* -5 ms */
    tb_close(t, d);
    tb_close(t, p);
    interned_packet(t, 2);
    p = tb_packet_open(t, 2, TB_NO_TS, TB_SEQ_NEEDS);
    size_t s = tb_open(t, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    tb_packed(t, TM_PF_STREAMING_CALLSTACK_IID, three_cs, 3);
    static const uint64_t deltas[] = {0, 1000, 1000};
    tb_packed(t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, deltas, 3);
    tb_close(t, s);
    tb_close(t, p);
    samples(t, 1, 0);
}

/* -- clocks -- */
static void clocks_then_samples(tb_buf *t, uint64_t boot, uint64_t real) {
    const uint32_t ids[] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[] = {boot, real};
    tb_clock_snapshot(t, 1, ids, vals, 2);
    interned_packet(t, 1);
    samples(t, 1, 3);
}
BUILDER(clock_realtime_2pow64_minus_1) { clocks_then_samples(t, 1000000000ull, UINT64_MAX); }
BUILDER(clock_boottime_2pow64_minus_1) { clocks_then_samples(t, UINT64_MAX, 1700000000000000000ull); }
BUILDER(clock_multiplier_2pow64_minus_1) {
    /* a sequence-scoped clock 64 counting in units of 2^64-1 ns */
    size_t p = tb_packet_open(t, 1, TB_NO_TS, 0);
    size_t s = tb_open(t, TM_PF_PACKET_CLOCK_SNAPSHOT);
    size_t c = tb_open(t, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(t, TM_PF_CLOCK_ID, TM_PF_FIRST_SEQUENCE_CLOCK);
    tb_uint(t, TM_PF_CLOCK_TIMESTAMP, 5);
    tb_uint(t, TM_PF_CLOCK_UNIT_MULTIPLIER_NS, UINT64_MAX);
    tb_close(t, c);
    c = tb_open(t, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(t, TM_PF_CLOCK_ID, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    tb_uint(t, TM_PF_CLOCK_TIMESTAMP, 1000000000ull);
    tb_close(t, c);
    tb_close(t, s);
    tb_close(t, p);
    interned_packet(t, 1);
    for (uint64_t k = 0; k < 3; k++) {
        p = tb_packet_open(t, 1, 6 + k, TB_SEQ_NEEDS);
        tb_uint(t, TM_PF_PACKET_TIMESTAMP_CLOCK_ID, TM_PF_FIRST_SEQUENCE_CLOCK);
        size_t ps = tb_open(t, TM_PF_PACKET_PERF_SAMPLE);
        tb_uint(t, TM_PF_PERF_SAMPLE_PID, 100);
        tb_uint(t, TM_PF_PERF_SAMPLE_TID, 100);
        tb_uint(t, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
        tb_close(t, ps);
        tb_close(t, p);
    }
}
BUILDER(clock_snapshot_300_clocks) {
    /* 300 global clocks (ids >= 128), then BOOTTIME and REALTIME */
    uint32_t ids[302];
    uint64_t vals[302];
    for (uint32_t i = 0; i < 300; i++) ids[i] = 1000 + i, vals[i] = UINT64_MAX - i;
    ids[300] = 6, vals[300] = 1000000000ull;
    ids[301] = 1, vals[301] = 1700000000000000000ull;
    tb_clock_snapshot(t, 1, ids, vals, 302);
    interned_packet(t, 1);
    samples(t, 1, 2);
}
BUILDER(gen_clock_snapshots_1000001) {
    static const uint32_t ids[] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    for (uint64_t k = 0; k <= 1000000; k++) {
        const uint64_t vals[] = {1000000000ull + k, 1700000000000000000ull + k};
        tb_clock_snapshot(t, 1, ids, vals, 2);
    }
}

/* -- compression -- */
BUILDER(zlib_bomb_1KB) {
    tb_buf z = {0};
    zlib_bomb(&z, 1u << 20);
    valid_trace(t, 1);
    compressed_field(t, z.data, z.len);
    tb_free(&z);
}
BUILDER(gen_zlib_bomb_10GB) {
    tb_buf z = {0};
    zlib_bomb(&z, BOMB_BYTES);
    valid_trace(t, 1);
    compressed_field(t, z.data, z.len);
    tb_free(&z);
}
BUILDER(zstd_compressed_packets) {
    tb_buf z = {0};
    zstd_rle(&z, 131072, 1);
    valid_trace(t, 2);
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_bytes(t, TM_PF_PACKET_ZSTD_COMPRESSED_PACKETS, z.data, z.len);
    tb_close(t, p);
    tb_free(&z);
}
BUILDER(compressed_garbage) { valid_trace(t, 1); compressed_field(t, "this is not zlib", 16); }

/* -- names -- */
static void names_trace(tb_buf *t, const char *a, size_t an, const char *b, size_t bn) {
    tb_standard_clocks(t, 1);
    open2 o = interned_open(t, TB_SEQ_CLEARED);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, a, an);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, b, bn);
    tb_frame(t, 1, 1, 0, 0x10);
    tb_frame(t, 2, 2, 0, 0x20);
    static const uint64_t f[] = {1, 2};
    tb_callstack(t, 1, f, 2, 1);
    close2(t, o);
    samples(t, 1, 3);
}
BUILDER(function_name_invalid_utf8) { names_trace(t, "ma\xc3\x28in", 6, "\xff\xfe\xed\xa0\x80", 5); }
BUILDER(function_name_with_nul) { names_trace(t, "ma\0in", 5, "\0", 1); }
BUILDER(thread_name_invalid_utf8_and_nul) {
    valid_trace(t, 2);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    size_t th = tb_open(t, TM_PF_PROCESS_TREE_THREADS);
    tb_uint(t, TM_PF_THREAD_TID, 100);
    tb_bytes(t, TM_PF_THREAD_NAME, "\xc0\xaf\0x", 4);
    tb_uint(t, TM_PF_THREAD_TGID, 100);
    tb_close(t, th);
    tb_close(t, pt);
    tb_close(t, p);
}
static void bad_path(tb_buf *t) {
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "/lib\xff", 5);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 2, "x\0.so", 5);
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 1, "\0\xff", 2);
    static const uint64_t paths[] = {1, 2};
    tb_mapping(t, 1, 1, 0x1000, 0x2000, paths, 2);
    tb_frame(t, 12, 1, 1, 0x10);
    static const uint64_t f[] = {1, 12};
    tb_callstack(t, 9, f, 2, 1);
}
BUILDER(mapping_path_invalid_utf8_and_nul) { with_interned(t, bad_path, 9); }

/* -- request bodies -- */
BUILDER(gen_gzip_bomb_10GB) { gzip_bomb(t, BOMB_BYTES); }
BUILDER(gen_deflate_bomb_10GB) { zlib_bomb(t, BOMB_BYTES); }
BUILDER(gen_zstd_bomb_10GB) { zstd_rle(t, BOMB_BYTES / 131072 * 131072, BOMB_BYTES / 131072); }
/* 2^64-1 and 2^64-2 are zstd's "unknown" and "error" sentinels: the largest real size */
BUILDER(zstd_content_size_2pow64_minus_3) { zstd_rle(t, UINT64_MAX - 2, 1); }
BUILDER(gen_brotli_bomb) {
    /* brotli's encoder on 1 GiB of zeros, fed in 1 MiB pieces */
    static const uint8_t zeros[1 << 20];
    BrotliEncoderState *s = BrotliEncoderCreateInstance(NULL, NULL, NULL);
    if (!s) abort();
    BrotliEncoderSetParameter(s, BROTLI_PARAM_QUALITY, 1);
    uint8_t out[1 << 16];
    for (int k = 0; k <= 1024; k++) {
        size_t in_left = k < 1024 ? sizeof zeros : 0;
        const uint8_t *in = zeros;
        BrotliEncoderOperation op = k < 1024 ? BROTLI_OPERATION_PROCESS : BROTLI_OPERATION_FINISH;
        do {
            size_t out_left = sizeof out;
            uint8_t *o = out;
            if (!BrotliEncoderCompressStream(s, op, &in_left, &in, &out_left, &o, NULL)) abort();
            tb_raw(t, out, sizeof out - out_left);
        } while (in_left || BrotliEncoderHasMoreOutput(s) ||
                 (op == BROTLI_OPERATION_FINISH && !BrotliEncoderIsFinished(s)));
    }
    BrotliEncoderDestroyInstance(s);
}
BUILDER(gzip_1MB_of_zeros) { gzip_bomb(t, 1u << 20); }
BUILDER(gzip_truncated) {
    tb_buf trace = {0}, env = {0};
    valid_trace(&trace, 3);
    perfetto_envelope(&env, chunk_meta, &trace);
    uLongf zn = compressBound(env.len) + 32;
    uint8_t *z = malloc(zn);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (!z || deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    zs.next_in = env.data;
    zs.avail_in = (uInt)env.len;
    zs.next_out = z;
    zs.avail_out = (uInt)zn;
    if (deflate(&zs, Z_FINISH) != Z_STREAM_END) abort();
    tb_raw(t, z, zs.total_out / 2);
    deflateEnd(&zs);
    free(z);
    tb_free(&trace);
    tb_free(&env);
}
BUILDER(br_garbage) { PUT(t, "\xff\xff\xff\xff this is not brotli"); }

/* envelopes carrying a Perfetto chunk */
BUILDER(request_perfetto_sequence_flood) {
    tb_buf trace = {0};
    sequences(&trace, 65);
    perfetto_envelope(t, chunk_meta, &trace);
    tb_free(&trace);
}
BUILDER(request_perfetto_truncated_trace) {
    tb_buf trace = {0};
    truncated_inside_perf_sample(&trace);
    perfetto_envelope(t, chunk_meta, &trace);
    tb_free(&trace);
}
BUILDER(request_perfetto_zlib_bomb_1KB) {
    tb_buf trace = {0};
    zlib_bomb_1KB(&trace);
    samples(&trace, 1, 2);
    perfetto_envelope(t, chunk_meta, &trace);
    tb_free(&trace);
}
BUILDER(gen_request_perfetto_zlib_bomb_100MB) {
    tb_buf z = {0}, trace = {0};
    zlib_bomb(&z, 100000000ull);
    valid_trace(&trace, 2);
    compressed_field(&trace, z.data, z.len);
    perfetto_envelope(t, chunk_meta, &trace);
    tb_free(&z);
    tb_free(&trace);
}
BUILDER(request_perfetto_nul_in_names) {
    tb_buf trace = {0};
    function_name_with_nul(&trace);
    perfetto_envelope(t, chunk_meta, &trace);
    tb_free(&trace);
}
BUILDER(request_perfetto_meta_wrong_types) {
    tb_buf trace = {0};
    valid_trace(&trace, 3);
    perfetto_envelope(t,
                      "{\"version\":2,\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","
                      "\"profiler_id\":[],\"platform\":\"android\",\"content_type\":\"perfetto\","
                      "\"client_sdk\":{\"name\":\"x\",\"version\":\"1\"}}",
                      &trace);
    tb_free(&trace);
}
BUILDER(request_json_chunk_deep_nesting) {
    PUT(t, ENV_HEADER "{\"type\":\"profile_chunk\",\"platform\":\"python\"}\n{\"version\":\"2\",\"x\":");
    for (int i = 0; i < 20000; i++) PUT(t, "[");
    for (int i = 0; i < 20000; i++) PUT(t, "]");
    PUT(t, "}\n");
}

/* envelopes */
BUILDER(gen_envelope_header_64KiB_plus_1) {
    PUT(t, "{\"event_id\":\"9ec79c33ec9942ab8353589fcb2e04dc\",\"x\":\"");
    while (t->len < 64 * 1024 - 1) PUT(t, "a");
    PUT(t, "\"}\n{\"type\":\"attachment\",\"length\":0}\n\n");
}
BUILDER(gen_envelope_item_header_64KiB_plus_1) {
    PUT(t, ENV_HEADER "{\"type\":\"attachment\",\"length\":0,\"x\":\"");
    while (t->len < sizeof ENV_HEADER - 1 + 64 * 1024 - 1) PUT(t, "a");
    PUT(t, "\"}\n\n");
}
static void items(tb_buf *t, int n) {
    PUT(t, ENV_HEADER);
    for (int i = 0; i < n; i++) PUT(t, "{\"type\":\"attachment\",\"length\":0}\n\n");
}
BUILDER(envelope_1000_items) { items(t, 1000); }
BUILDER(envelope_1001_items) { items(t, 1001); }

/* ==== Text inputs (JSON, envelopes, folded stacks) ====================== */

typedef struct text_input {
    const char *name, *text;
    size_t len;
} text_input;
#define TEXT(name, lit) {name, lit, sizeof(lit) - 1}

#define META_REQUIRED                                                                                  \
    "\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","                             \
    "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"android\","                   \
    "\"client_sdk\":{\"name\":\"sentry-android\",\"version\":\"1.0\"}"
#define V2_HEAD                                                                                        \
    "{\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","                            \
    "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"python\","                    \
    "\"client_sdk\":{\"name\":\"sentry.python\",\"version\":\"2.0\"},"
#define V2_SAMPLES(ts0, ts1, sid)                                                                      \
    "\"samples\":[{\"stack_id\":" sid ",\"thread_id\":\"1\",\"timestamp\":" ts0 "},"                    \
    "{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":" ts1 "}]"

static const text_input texts[] = {
    /* envelopes */
    TEXT("envelope_length_past_end.envelope", ENV_HEADER "{\"type\":\"attachment\",\"length\":100}\nshort\n"),
    TEXT("envelope_length_2pow64_minus_1.envelope",
         ENV_HEADER "{\"type\":\"attachment\",\"length\":18446744073709551615}\nshort\n"),
    TEXT("envelope_length_negative.envelope", ENV_HEADER "{\"type\":\"attachment\",\"length\":-5}\nshort\n"),
    TEXT("envelope_length_is_a_string.envelope", ENV_HEADER "{\"type\":\"attachment\",\"length\":\"5\"}\nshort\n"),
    TEXT("envelope_duplicate_length.envelope",
         ENV_HEADER "{\"type\":\"attachment\",\"length\":2,\"length\":9000}\nab\n"),
    TEXT("envelope_meta_length_past_payload.envelope",
         ENV_HEADER "{\"type\":\"profile_chunk\",\"platform\":\"android\",\"meta_length\":1000,\"length\":5}\n"
                    "{}abc\n"),
    TEXT("envelope_meta_length_2pow64_minus_1.envelope",
         ENV_HEADER "{\"type\":\"profile_chunk\",\"platform\":\"android\","
                    "\"meta_length\":18446744073709551615,\"length\":5}\n{}abc\n"),
    TEXT("envelope_meta_length_negative.envelope",
         ENV_HEADER "{\"type\":\"profile_chunk\",\"platform\":\"android\",\"meta_length\":-1,\"length\":5}\n"
                    "{}abc\n"),
    TEXT("envelope_item_header_without_newline.envelope", ENV_HEADER "{\"type\":\"attachment\",\"length\":4}"),
    TEXT("envelope_header_only_without_newline.envelope", "{\"event_id\":\"9ec79c33ec9942ab8353589fcb2e04dc\"}"),
    TEXT("envelope_header_not_json.envelope", "{\"event_id\":\n{\"type\":\"attachment\"}\nx\n"),
    TEXT("envelope_header_is_array.envelope", "[1,2]\n{\"type\":\"attachment\"}\nx\n"),
    TEXT("envelope_item_without_type.envelope", ENV_HEADER "{\"length\":2}\nab\n"),
    TEXT("envelope_item_type_is_a_number.envelope", ENV_HEADER "{\"type\":5,\"length\":2}\nab\n"),
    TEXT("envelope_nul_in_item_header.envelope", ENV_HEADER "{\"type\":\"attach\0ment\",\"length\":2}\nab\n"),
    /* chunk metadata */
    TEXT("meta_release_is_a_number.json", "{" META_REQUIRED ",\"release\":5}"),
    TEXT("meta_version_is_a_number.json",
         "{\"version\":2,\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","
         "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"android\","
         "\"client_sdk\":{\"name\":\"sentry-android\",\"version\":\"1.0\"}}"),
    TEXT("meta_huge_real.json",
         "{" META_REQUIRED ",\"measurements\":{\"m\":{\"unit\":\"hz\",\"values\":[{\"timestamp\":1,\"value\":1e400}]}}}"),
    TEXT("meta_huge_integer.json",
         "{" META_REQUIRED ",\"unknown_key\":123456789012345678901234567890}"),
    TEXT("meta_duplicate_keys.json", "{" META_REQUIRED ",\"platform\":\"cocoa\"}"),
    TEXT("meta_invalid_utf8.json", "{" META_REQUIRED ",\"release\":\"\xff\xfe\"}"),
    TEXT("meta_nul_escape_in_release.json", "{" META_REQUIRED ",\"release\":\"a\\u0000b\"}"),
    TEXT("meta_not_an_object.json", "[]"),
    TEXT("meta_empty.json", ""),
    /* Sample v2 chunks */
    TEXT("sample_v2_stack_id_out_of_range.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("1700000000.0", "1700000000.01", "5")
                 ",\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}],\"thread_metadata\":{}}}"),
    TEXT("sample_v2_frame_index_out_of_range.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("1700000000.0", "1700000000.01", "0")
                 ",\"stacks\":[[7]],\"frames\":[{\"function\":\"f\"}],\"thread_metadata\":{}}}"),
    TEXT("sample_v2_samples_is_an_object.json",
         V2_HEAD "\"profile\":{\"samples\":{},\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}]}}"),
    TEXT("sample_v2_duration_1e308.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("0.0", "1e308", "0")
                 ",\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}],\"thread_metadata\":{}}}"),
    TEXT("sample_v2_timestamp_1e400.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("1e400", "1.0", "0")
                 ",\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}],\"thread_metadata\":{}}}"),
    TEXT("sample_v2_stack_id_2pow64.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("1700000000.0", "1700000000.01", "18446744073709551616")
                 ",\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}],\"thread_metadata\":{}}}"),
    TEXT("sample_v2_duplicate_keys.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("1700000000.0", "1700000000.01", "0")
                 ",\"stacks\":[[0]],\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}]}}"),
    TEXT("sample_v2_invalid_utf8_function.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("1700000000.0", "1700000000.01", "0")
                 ",\"stacks\":[[0]],\"frames\":[{\"function\":\"f\xff\"}],\"thread_metadata\":{}}}"),
    TEXT("sample_v2_nul_escape_in_function.json",
         V2_HEAD "\"profile\":{" V2_SAMPLES("1700000000.0", "1700000000.01", "0")
                 ",\"stacks\":[[0]],\"frames\":[{\"function\":\"a\\u0000b\"}],\"thread_metadata\":{}}}"),
    /* folded stacks */
    TEXT("folded_count_overflow.folded", "main;work 99999999999999999999999999\n"),
    TEXT("folded_negative_count.folded", "main;work -5\n"),
    TEXT("folded_nul_in_frame.folded", "ma\0in;work 3\nmain;leaf 2\n"),
    TEXT("folded_empty_frames.folded", ";;; 5\nmain 1\n"),
};

/* Text inputs too large to write out here: deep nesting. */
static void nested_json(tb_buf *t, const char *head, int depth, const char *tail) {
    put(t, head, strlen(head));
    for (int i = 0; i < depth; i++) PUT(t, "[");
    for (int i = 0; i < depth; i++) PUT(t, "]");
    put(t, tail, strlen(tail));
}
BUILDER(meta_deep_nesting) { nested_json(t, "{" META_REQUIRED ",\"extra\":", 20000, "}"); }
BUILDER(sample_v2_deep_nesting) {
    nested_json(t, V2_HEAD "\"profile\":{" V2_SAMPLES("1700000000.0", "1700000000.01", "0") ",\"x\":", 20000,
                ",\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}],\"thread_metadata\":{}}}");
}

static const struct builder {
    const char *name;
    build_fn fn;
} builders[] = {
    {"truncated_tag_at_end.pftrace", truncated_tag_at_end},
    {"truncated_length_at_end.pftrace", truncated_length_at_end},
    {"truncated_inside_perf_sample.pftrace", truncated_inside_perf_sample},
    {"truncated_inside_interned_data.pftrace", truncated_inside_interned_data},
    {"truncated_interned_string.pftrace", truncated_interned_string},
    {"truncated_packed_frame_ids.pftrace", truncated_packed_frame_ids},
    {"truncated_clock_value.pftrace", truncated_clock_value},
    {"truncated_streaming_deltas.pftrace", truncated_streaming_deltas},
    {"truncated_inside_compressed_payload.pftrace", truncated_inside_compressed_payload},
    {"truncated_zlib_stream.pftrace", truncated_zlib_stream},
    {"empty.pftrace", empty_trace},
    {"varint_11_bytes_packet_length.pftrace", varint_11_bytes_packet_length},
    {"varint_11_bytes_tag.pftrace", varint_11_bytes_tag},
    {"varint_11_bytes_timestamp.pftrace", varint_11_bytes_timestamp},
    {"varint_10_bytes_overflowing_64_bits.pftrace", varint_10_bytes_overflowing_64_bits},
    {"varint_11_bytes_frame_id.pftrace", varint_11_bytes_frame_id},
    {"length_past_end_top_level.pftrace", length_past_end_top_level},
    {"length_2pow64_minus_1_top_level.pftrace", length_2pow64_minus_1_top_level},
    {"length_2pow64_minus_1_interned_data.pftrace", length_2pow64_minus_1_interned_data},
    {"length_2pow63_function_name.pftrace", length_2pow63_function_name},
    {"length_2pow64_minus_2_frame_ids.pftrace", length_2pow64_minus_2_frame_ids},
    {"length_2pow64_minus_1_compressed.pftrace", length_2pow64_minus_1_compressed},
    {"gen:packet_of_max_packet_bytes.pftrace", gen_packet_of_max_packet_bytes},
    {"gen:packet_over_max_packet_bytes.pftrace", gen_packet_over_max_packet_bytes},
    {"wire_packet_as_varint.pftrace", wire_packet_as_varint},
    {"wire_packet_as_fixed64.pftrace", wire_packet_as_fixed64},
    {"wire_timestamp_as_bytes.pftrace", wire_timestamp_as_bytes},
    {"wire_sequence_id_as_fixed32.pftrace", wire_sequence_id_as_fixed32},
    {"wire_interned_data_as_varint.pftrace", wire_interned_data_as_varint},
    {"wire_perf_sample_as_fixed32.pftrace", wire_perf_sample_as_fixed32},
    {"wire_callstack_iid_as_bytes.pftrace", wire_callstack_iid_as_bytes},
    {"wire_frame_ids_as_fixed64.pftrace", wire_frame_ids_as_fixed64},
    {"wire_clock_timestamp_as_bytes.pftrace", wire_clock_timestamp_as_bytes},
    {"wire_type_7_in_packet.pftrace", wire_type_7_in_packet},
    {"wire_start_group_top_level.pftrace", wire_start_group_top_level},
    {"deep_nesting_unknown_packet_field.pftrace", deep_nesting_unknown_packet_field},
    {"deep_nesting_inside_interned_data.pftrace", deep_nesting_inside_interned_data},
    {"compressed_nested_100_deep.pftrace", compressed_nested_100_deep},
    {"gen:million_empty_packets.pftrace", gen_million_empty_packets},
    {"interned_iids_2pow64_minus_1.pftrace", interned_iids_2pow64_minus_1},
    {"callstack_self_reference.pftrace", callstack_self_reference},
    {"callstack_missing_frame.pftrace", callstack_missing_frame},
    {"heap_callstack_missing.pftrace", heap_callstack_missing},
    {"heap_totals_shrink.pftrace", heap_totals_shrink},
    {"heap_frees_exceed_allocations.pftrace", heap_frees_exceed_allocations},
    {"heap_sizes_2pow64_minus_1.pftrace", heap_sizes_2pow64_minus_1},
    {"heap_continued_never_ends.pftrace", heap_continued_never_ends},
    {"heap_dumps_out_of_order.pftrace", heap_dumps_out_of_order},
    {"heap_sample_size_as_bytes.pftrace", heap_sample_size_as_bytes},
    {"heap_streaming_fields_disagree.pftrace", heap_streaming_fields_disagree},
    {"heap_streaming_sizes_2pow64_minus_1.pftrace", heap_streaming_sizes_2pow64_minus_1},
    {"heap_streaming_free_address_as_fixed64.pftrace", heap_streaming_free_address_as_fixed64},
    {"callstack_missing.pftrace", callstack_missing},
    {"frame_missing_mapping.pftrace", frame_missing_mapping},
    {"frame_missing_function_name.pftrace", frame_missing_function_name},
    {"mapping_missing_paths_and_build_id.pftrace", mapping_missing_paths_and_build_id},
    {"callstack_1000_frames.pftrace", callstack_1000_frames},
    {"callstack_1001_frames.pftrace", callstack_1001_frames},
    {"sequences_4.pftrace", sequences_4},
    {"sequences_64.pftrace", sequences_64},
    {"sequences_65.pftrace", sequences_65},
    {"gen:sequences_1000001.pftrace", gen_sequences_1000001},
    {"path_segments_100.pftrace", path_segments_100},
    {"path_segments_101.pftrace", path_segments_101},
    {"path_segments_10001.pftrace", path_segments_10001},
    {"streaming_deltas_negative.pftrace", streaming_deltas_negative},
    {"streaming_deltas_overflow.pftrace", streaming_deltas_overflow},
    {"streaming_fewer_deltas_than_callstacks.pftrace", streaming_fewer_deltas_than_callstacks},
    {"perf_sample_timestamp_2pow64_minus_1.pftrace", perf_sample_timestamp_2pow64_minus_1},
    {"thread_reference_time_negative.pftrace", thread_reference_time_negative},
    {"clock_realtime_2pow64_minus_1.pftrace", clock_realtime_2pow64_minus_1},
    {"clock_boottime_2pow64_minus_1.pftrace", clock_boottime_2pow64_minus_1},
    {"clock_multiplier_2pow64_minus_1.pftrace", clock_multiplier_2pow64_minus_1},
    {"clock_snapshot_300_clocks.pftrace", clock_snapshot_300_clocks},
    {"gen:clock_snapshots_1000001.pftrace", gen_clock_snapshots_1000001},
    {"zlib_bomb_1KB.pftrace", zlib_bomb_1KB},
    {"gen:zlib_bomb_10GB.pftrace", gen_zlib_bomb_10GB},
    {"zstd_compressed_packets.pftrace", zstd_compressed_packets},
    {"compressed_garbage.pftrace", compressed_garbage},
    {"function_name_invalid_utf8.pftrace", function_name_invalid_utf8},
    {"function_name_with_nul.pftrace", function_name_with_nul},
    {"thread_name_invalid_utf8_and_nul.pftrace", thread_name_invalid_utf8_and_nul},
    {"mapping_path_invalid_utf8_and_nul.pftrace", mapping_path_invalid_utf8_and_nul},
    {"gen:gzip_bomb_10GB.gz", gen_gzip_bomb_10GB},
    {"gen:deflate_bomb_10GB.zz", gen_deflate_bomb_10GB},
    {"gen:zstd_bomb_10GB.zst", gen_zstd_bomb_10GB},
    {"zstd_content_size_2pow64_minus_3.zst", zstd_content_size_2pow64_minus_3},
    {"gen:brotli_bomb_1GB.br", gen_brotli_bomb},
    {"gzip_1MB_of_zeros.gz", gzip_1MB_of_zeros},
    {"gzip_truncated.gz", gzip_truncated},
    {"br_garbage.br", br_garbage},
    {"request_perfetto_sequence_flood.envelope", request_perfetto_sequence_flood},
    {"request_perfetto_truncated_trace.envelope", request_perfetto_truncated_trace},
    {"request_perfetto_zlib_bomb_1KB.envelope", request_perfetto_zlib_bomb_1KB},
    {"gen:request_perfetto_zlib_bomb_100MB.envelope", gen_request_perfetto_zlib_bomb_100MB},
    {"request_perfetto_nul_in_names.envelope", request_perfetto_nul_in_names},
    {"request_perfetto_meta_wrong_types.envelope", request_perfetto_meta_wrong_types},
    {"request_json_chunk_deep_nesting.envelope", request_json_chunk_deep_nesting},
    {"gen:envelope_header_64KiB_plus_1.envelope", gen_envelope_header_64KiB_plus_1},
    {"gen:envelope_item_header_64KiB_plus_1.envelope", gen_envelope_item_header_64KiB_plus_1},
    {"envelope_1000_items.envelope", envelope_1000_items},
    {"envelope_1001_items.envelope", envelope_1001_items},
    {"meta_deep_nesting.json", meta_deep_nesting},
    {"sample_v2_deep_nesting.json", sample_v2_deep_nesting},
};

/* Builds the named input into *out; 0 when no builder or text knows it. */
static int build_input(const char *name, tb_buf *out) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < N_OF(builders); i++)
        if (strcmp(builders[i].name, name) == 0) {
            builders[i].fn(out);
            return 1;
        }
    for (size_t i = 0; i < N_OF(texts); i++)
        if (strcmp(texts[i].name, name) == 0) {
            tb_raw(out, texts[i].text, texts[i].len);
            return 1;
        }
    return 0;
}

/* ==== The manifest ====================================================== */

typedef struct entry {
    int line;
    char name[128], target[128], expect[128], message[200];
} entry;

/* Reads tests/hostile/EXPECTED: NAME TARGET EXPECT [MESSAGE...]. */
static entry *read_manifest(size_t *n) {
    FILE *f = fopen(HOSTILE_DIR "/EXPECTED", "r");
    cr_assert_not_null(f, "cannot open %s/EXPECTED", HOSTILE_DIR);
    entry *list = NULL;
    size_t cap = 0;
    *n = 0;
    char line[1024];
    for (int no = 1; fgets(line, sizeof line, f); no++) {
        line[strcspn(line, "\r\n")] = 0;
        char *p = line + strspn(line, " \t");
        if (!*p || *p == '#') continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            list = realloc(list, cap * sizeof *list);
            cr_assert_not_null(list);
        }
        entry *e = &list[(*n)++];
        memset(e, 0, sizeof *e);
        e->line = no;
        int used = 0;
        cr_assert_eq(sscanf(p, "%127s %127s %127s %n", e->name, e->target, e->expect, &used), 3,
                     "EXPECTED line %d: want NAME TARGET EXPECT [MESSAGE]", no);
        snprintf(e->message, sizeof e->message, "%s", p + used);
    }
    fclose(f);
    return list;
}

/* The input bytes of an entry (malloc'd, exact size so ASan sees over-reads). */
static uint8_t *load_input(const entry *e, size_t *len) {
    if (strncmp(e->name, "gen:", 4) == 0) {
        tb_buf b;
        if (!build_input(e->name, &b)) return NULL;
        uint8_t *copy = malloc(b.len ? b.len : 1);
        if (copy && b.len) memcpy(copy, b.data, b.len);
        *len = b.len;
        tb_free(&b);
        return copy;
    }
    char path[512];
    snprintf(path, sizeof path, "%s/%s", HOSTILE_DIR, e->name);
    char *data = tu_read_file(path, len);
    if (!data) return NULL;
    uint8_t *copy = malloc(*len ? *len : 1);
    if (copy && *len) memcpy(copy, data, *len);
    free(data);
    return copy;
}

/* ==== Running one entry ================================================= */

static const struct {
    const char *name;
    size_t offset;
} limit_fields[] = {
    {"max_samples", offsetof(tm_limits, max_samples)},
    {"max_stack_depth", offsetof(tm_limits, max_stack_depth)},
    {"max_sequences", offsetof(tm_limits, max_sequences)},
    {"max_packet_bytes", offsetof(tm_limits, max_packet_bytes)},
    {"max_unique_frames", offsetof(tm_limits, max_unique_frames)},
    {"max_path_segments", offsetof(tm_limits, max_path_segments)},
    {"max_inflated_bytes", offsetof(tm_limits, max_inflated_bytes)},
    {"max_interned_entries", offsetof(tm_limits, max_interned_entries)},
    {"max_chunk_duration_ns", offsetof(tm_limits, max_chunk_duration_ns)},
    {"max_work_bytes", offsetof(tm_limits, max_work_bytes)},
    {"max_result_bytes", offsetof(tm_limits, max_result_bytes)},
};

#define STAT(name) {#name, offsetof(tm_trace_stats, name)}
static const struct {
    const char *name;
    size_t offset;
} stat_fields[] = {
    STAT(packets), STAT(compressed_packets), STAT(packets_unsupported), STAT(sequences),
    STAT(clock_snapshots), STAT(perf_samples), STAT(streaming_samples), STAT(samples_kept),
    STAT(dropped_unresolved), STAT(dropped_missing_clock), STAT(dropped_bad_timestamp),
    STAT(dropped_malformed_streaming), STAT(samples_without_thread), STAT(threads), STAT(frames),
    STAT(mappings), STAT(mappings_without_build_id), STAT(clock_readings_ignored), STAT(truncated_at),
    STAT(heap_dumps), STAT(heap_samples_unresolved), STAT(heap_malformed), STAT(heap_unfinished_dumps),
    STAT(heap_missing_packets), STAT(heap_inuse_bytes), STAT(heap_streaming_allocations),
    STAT(heap_streaming_alloc_bytes), STAT(heap_streaming_malformed),
};

/* What an entry expects, parsed from its EXPECT column. */
typedef struct expectation {
    int is_status;       /* else a server outcome */
    tm_status status;
    char reason[64];     /* Relay ProfileError name after '/', or "" */
    char counters[128];  /* comma-separated tm_trace_stats fields after ':' */
    char outcome[64];    /* "outcome:REASON" -> REASON; "accepted" -> "" */
} expectation;

static int parse_expect(const char *s, expectation *x, char *why, size_t cap) {
    memset(x, 0, sizeof *x);
    if (strncmp(s, "outcome:", 8) == 0) {
        snprintf(x->outcome, sizeof x->outcome, "%s", s + 8);
        return 1;
    }
    if (strcmp(s, "accepted") == 0) return 1;
    x->is_status = 1;
    char head[128];
    snprintf(head, sizeof head, "%s", s);
    char *colon = strchr(head, ':');
    if (colon) *colon = 0, snprintf(x->counters, sizeof x->counters, "%s", colon + 1);
    char *slash = strchr(head, '/');
    if (slash) *slash = 0, snprintf(x->reason, sizeof x->reason, "%s", slash + 1);
    for (int st = TM_OK; st <= TM_ERR_EMPTY; st++)
        if (strcmp(head, st == TM_OK ? "OK" : tm_status_str((tm_status)st)) == 0) {
            x->status = (tm_status)st;
            return 1;
        }
    snprintf(why, cap, "unknown EXPECT %s", s);
    return 0;
}

/* A failing call must report itself: err.code is the status, a message. */
static int clean_error(tm_status st, const tm_error *err, const char *what, char *why, size_t cap) {
    if (st == TM_OK) return 1;
    if (st > TM_ERR_EMPTY || err->code != st || !memchr(err->message, 0, sizeof err->message) ||
        !err->message[0]) {
        snprintf(why, cap, "%s: status %d with err.code %d and message \"%.60s\"", what, (int)st, (int)err->code,
                 err->message);
        return 0;
    }
    return 1;
}

static int valid_json(const tu_membuf *m) {
    json_t *j = json_loadb(m->data ? m->data : "", m->len, JSON_ALLOW_NUL, NULL);
    json_decref(j);
    return j != NULL;
}

/* Runs every exporter on a parsed trace: each returns TM_OK or a clean
 * error, and the JSON ones write valid JSON (UTF-8, escaped NULs). */
static int run_exporters(const tm_trace *t, char *why, size_t cap) {
    tm_error err;
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_status st;
#define EXPORT(what, call, json)                                                        \
    memset(&err, 0, sizeof err);                                                        \
    st = call;                                                                          \
    if (!clean_error(st, &err, what, why, cap)) goto fail;                              \
    if (st == TM_OK && (json) && !valid_json(&out)) {                                   \
        snprintf(why, cap, "%s wrote invalid JSON (%zu bytes)", what, out.len);         \
        goto fail;                                                                      \
    }                                                                                   \
    tu_membuf_free(&out);
    EXPORT("tm_write_sample_v2", tm_write_sample_v2(t, NULL, &sink, &err), 1)
    EXPORT("tm_write_speedscope", tm_write_speedscope(t, NULL, &sink, &err), 1)
    EXPORT("tm_write_report", tm_write_report(t, &sink, &err), 1)
    EXPORT("tm_write_pprof", tm_write_pprof(t, NULL, &sink, &err), 0)
    EXPORT("tm_write_folded", tm_write_folded(t, NULL, &sink, &err), 0)
    EXPORT("tm_write_flamegraph", tm_write_flamegraph(t, NULL, &sink, &err), 0)
    EXPORT("tm_write_folded_diff", tm_write_folded_diff(t, t, NULL, &sink, &err), 0)
    EXPORT("tm_write_flamegraph_diff", tm_write_flamegraph_diff(t, t, NULL, &sink, &err), 0)
#undef EXPORT
    return 1;
fail:
    tu_membuf_free(&out);
    return 0;
}

static int check_counters(const tm_trace *t, const char *list, char *why, size_t cap) {
    if (!*list) return 1;
    if (!t) {
        snprintf(why, cap, "counters %s asked for, but no trace was parsed", list);
        return 0;
    }
    const tm_trace_stats *s = tm_trace_get_stats(t);
    char copy[128];
    snprintf(copy, sizeof copy, "%s", list);
    for (char *name = strtok(copy, ","); name; name = strtok(NULL, ",")) {
        size_t k = 0;
        while (k < N_OF(stat_fields) && strcmp(stat_fields[k].name, name) != 0) k++;
        if (k == N_OF(stat_fields)) {
            snprintf(why, cap, "unknown counter %s", name);
            return 0;
        }
        uint64_t v;
        memcpy(&v, (const char *)s + stat_fields[k].offset, sizeof v);
        if (v == 0) {
            snprintf(why, cap, "counter %s is 0", name);
            return 0;
        }
    }
    return 1;
}

/* The Perfetto trace the "meta" target writes with each metadata input. */
static tm_trace *meta_base_trace(tb_buf *keep) {
    memset(keep, 0, sizeof *keep);
    valid_trace(keep, 3);
    tm_options o = {.mode = TM_MODE_RELAY};
    tm_trace *t = NULL;
    tm_error err;
    return tm_trace_parse(keep->data, keep->len, &o, &t, &err) == TM_OK ? t : NULL;
}

/* Compares the status of the failing step (or TM_OK) with the expectation. */
static int check_status(const expectation *x, tm_status st, const tm_error *err, uint64_t len, const char *message,
                        char *why, size_t cap) {
    if (st != x->status) {
        snprintf(why, cap, "got %s (%s%s%.120s), want %s", tm_status_str(st), err->reason ? err->reason : "",
                 err->reason ? ": " : "", st == TM_OK ? "" : err->message, tm_status_str(x->status));
        return 0;
    }
    if (st == TM_OK) return 1;
    if (x->reason[0] && (!err->reason || strcmp(err->reason, x->reason) != 0)) {
        snprintf(why, cap, "reason %s, want %s", err->reason ? err->reason : "(none)", x->reason);
        return 0;
    }
    if (err->offset > len) {
        snprintf(why, cap, "error offset %llu is past the input's %llu bytes", (unsigned long long)err->offset,
                 (unsigned long long)len);
        return 0;
    }
    if (message[0] && !strstr(err->message, message)) {
        snprintf(why, cap, "message \"%s\" lacks \"%s\"", err->message, message);
        return 0;
    }
    return 1;
}

/* Options of a trace target: "trace", "trace-strict" (tm_options.strict),
 * "trace-relay", "sample-v2", "folded", each optionally followed by
 * ",LIMIT=VALUE" overrides. */
static int trace_options(const char *target, tm_options *o, char *why, size_t cap) {
    memset(o, 0, sizeof *o);
    char copy[128];
    snprintf(copy, sizeof copy, "%s", target);
    char *rest = strchr(copy, ',');
    if (rest) *rest++ = 0;
    if (strcmp(copy, "trace") == 0) o->input = TM_INPUT_PERFETTO;
    else if (strcmp(copy, "trace-strict") == 0) o->input = TM_INPUT_PERFETTO, o->strict = 1;
    else if (strcmp(copy, "trace-relay") == 0) o->input = TM_INPUT_PERFETTO, o->mode = TM_MODE_RELAY;
    else if (strcmp(copy, "sample-v2") == 0) o->input = TM_INPUT_SAMPLE_V2;
    else if (strcmp(copy, "folded") == 0) o->input = TM_INPUT_FOLDED;
    else return 0;
    for (char *kv = rest ? strtok(rest, ",") : NULL; kv; kv = strtok(NULL, ",")) {
        char *eq = strchr(kv, '=');
        size_t k = 0;
        if (eq) *eq = 0;
        while (k < N_OF(limit_fields) && strcmp(limit_fields[k].name, kv) != 0) k++;
        if (!eq || k == N_OF(limit_fields)) {
            snprintf(why, cap, "bad limit override %s", kv);
            return -1;
        }
        uint64_t v = strtoull(eq + 1, NULL, 10);
        memcpy((char *)&o->limits + limit_fields[k].offset, &v, sizeof v);
    }
    return 1;
}

static int run_trace(const entry *e, const expectation *x, const tm_options *o, const uint8_t *data, size_t len,
                     char *why, size_t cap) {
    tm_trace *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_trace_parse(data, len, o, &t, &err);
    int ok = clean_error(st, &err, "tm_trace_parse", why, cap);
    if (ok && (st == TM_OK) != (t != NULL)) {
        snprintf(why, cap, "tm_trace_parse returned %s with trace %p", tm_status_str(st), (void *)t);
        ok = 0;
    }
    if (ok && st == TM_OK) {
        /* the conversion the CLI and the server do: Sample v2 */
        tu_membuf out = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
        memset(&err, 0, sizeof err);
        st = tm_write_sample_v2(t, NULL, &sink, &err);
        tu_membuf_free(&out);
        ok = clean_error(st, &err, "tm_write_sample_v2", why, cap);
    }
    if (ok) ok = check_status(x, st, &err, len, e->message, why, cap);
    if (ok) ok = check_counters(t, x->counters, why, cap);
    if (ok && t) ok = run_exporters(t, why, cap);
    tm_trace_free(t);
    return ok;
}

static int run_meta(const entry *e, const expectation *x, const uint8_t *data, size_t len, char *why, size_t cap) {
    tb_buf keep;
    tm_trace *t = meta_base_trace(&keep);
    if (!t) {
        snprintf(why, cap, "the base trace of the meta target does not parse");
        tb_free(&keep);
        return 0;
    }
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_sample_v2_options v2 = {.meta_json = (const char *)data, .meta_len = len};
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_write_sample_v2(t, &v2, &sink, &err);
    int ok = clean_error(st, &err, "tm_write_sample_v2", why, cap) &&
             check_status(x, st, &err, len, e->message, why, cap);
    if (ok && st == TM_OK && !valid_json(&out)) {
        snprintf(why, cap, "tm_write_sample_v2 wrote invalid JSON");
        ok = 0;
    }
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&keep);
    return ok;
}

static int run_envelope(const entry *e, const expectation *x, const uint8_t *data, size_t len, char *why,
                        size_t cap) {
    tm_srv_envelope env;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_srv_envelope_parse(data, len, &env, &err);
    if (st == TM_OK) tm_srv_envelope_release(&env);
    return clean_error(st, &err, "tm_srv_envelope_parse", why, cap) &&
           check_status(x, st, &err, len, e->message, why, cap);
}

static char server_key[] = "e12d836b15bb49d7bbf99e64295d995b";
static char *server_keys[] = {server_key};

/* What tm_srv_process made of a body: accepted chunks, outcome reasons. */
static int check_processed(const expectation *x, const tm_srv_processed *p, char *why, size_t cap) {
    size_t chunks = 0;
    char reasons[256] = "";
    for (size_t i = 0; i < p->n_records; i++) {
        const tm_srv_record *r = &p->records[i];
        if (r->kind == TM_SRV_RECORD_CHUNK) {
            chunks++;
            continue;
        }
        json_t *o = json_loadb((const char *)r->value, r->value_len, 0, NULL);
        const char *reason = json_string_value(json_object_get(o, "reason"));
        size_t used = strlen(reasons);
        snprintf(reasons + used, sizeof reasons - used, "%s%s", used ? "," : "", reason ? reason : "(none)");
        json_decref(o);
    }
    int want_accepted = !x->outcome[0];
    if (want_accepted ? (chunks == 0 || reasons[0]) : strcmp(reasons, x->outcome) != 0) {
        snprintf(why, cap, "%zu chunk(s) and outcomes [%s], want %s%s", chunks, reasons,
                 want_accepted ? "an accepted chunk" : "outcome ", x->outcome);
        return 0;
    }
    return 1;
}

static int run_request(const entry *e, const expectation *x, tm_srv_encoding enc, const uint8_t *data, size_t len,
                       char *why, size_t cap) {
    tm_srv_decoder *d = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_srv_decoder_new(enc, REQUEST_CAP, &d, &err);
    if (!clean_error(st, &err, "tm_srv_decoder_new", why, cap)) return 0;
    tm_srv_buf body = {0};
    /* fed in pieces of 4 KiB, as the HTTP layer hands them over */
    for (size_t at = 0; st == TM_OK && at < len; at += 4096)
        st = tm_srv_decoder_feed(d, data + at, len - at < 4096 ? len - at : 4096, &body, &err);
    if (st == TM_OK) st = tm_srv_decoder_finish(d, &body, &err);
    tm_srv_decoder_free(d);
    int ok = clean_error(st, &err, "request decoding", why, cap);
    if (ok && body.len > REQUEST_CAP) {
        snprintf(why, cap, "decoded %zu bytes past the cap", body.len);
        ok = 0;
    }
    if (ok && st != TM_OK) {
        ok = x->is_status && check_status(x, st, &err, len, e->message, why, cap);
        if (!x->is_status) snprintf(why, cap, "decoding failed with %s: %s", tm_status_str(st), err.message);
        tm_srv_buf_release(&body);
        return ok;
    }
    if (!ok) {
        tm_srv_buf_release(&body);
        return 0;
    }
    tm_srv_config cfg;
    if (tm_srv_config_init(&cfg, &err) != TM_OK) abort();
    tm_srv_project project = {.id = 1, .organization_id = 1, .public_keys = server_keys, .n_public_keys = 1,
                              .retention_days = 90, .continuous_profiling = 1,
                              .continuous_profiling_perfetto = 1};
    tm_srv_context ctx = {.cfg = &cfg, .project = &project, .now_unix = 1771278043};
    tm_srv_processed out;
    memset(&err, 0, sizeof err);
    st = tm_srv_process(&ctx, body.data, body.len, &out, &err);
    ok = clean_error(st, &err, "tm_srv_process", why, cap);
    if (ok && x->is_status) ok = check_status(x, st, &err, body.len, e->message, why, cap);
    else if (ok && st != TM_OK) {
        snprintf(why, cap, "tm_srv_process failed with %s: %s", tm_status_str(st), err.message);
        ok = 0;
    } else if (ok) ok = check_processed(x, &out, why, cap);
    if (st == TM_OK) tm_srv_processed_release(&out);
    tm_srv_config_release(&cfg);
    tm_srv_buf_release(&body);
    return ok;
}

static const struct {
    const char *target;
    tm_srv_encoding enc;
} request_targets[] = {
    {"request-identity", TM_SRV_ENC_IDENTITY}, {"request-gzip", TM_SRV_ENC_GZIP},
    {"request-deflate", TM_SRV_ENC_DEFLATE},   {"request-zstd", TM_SRV_ENC_ZSTD},
    {"request-br", TM_SRV_ENC_BR},
};

/* Runs one entry; 1 when it behaved as the manifest says, else 0 with why. */
static int run_entry(const entry *e, char *why, size_t cap) {
    expectation x;
    if (!parse_expect(e->expect, &x, why, cap)) return 0;
    size_t len = 0;
    uint8_t *data = load_input(e, &len);
    if (!data) {
        snprintf(why, cap, "cannot load the input");
        return 0;
    }
    int ok = -1;
    tm_options o;
    int is_trace = trace_options(e->target, &o, why, cap);
    if (is_trace < 0) ok = 0;
    else if (is_trace) {
        ok = x.is_status ? run_trace(e, &x, &o, data, len, why, cap) : 0;
    } else if (strcmp(e->target, "meta") == 0) {
        ok = x.is_status ? run_meta(e, &x, data, len, why, cap) : 0;
    } else if (strcmp(e->target, "envelope") == 0) {
        ok = x.is_status ? run_envelope(e, &x, data, len, why, cap) : 0;
    } else {
        for (size_t k = 0; k < N_OF(request_targets); k++)
            if (strcmp(e->target, request_targets[k].target) == 0)
                ok = run_request(e, &x, request_targets[k].enc, data, len, why, cap);
        if (ok < 0) snprintf(why, cap, "unknown TARGET %s", e->target);
    }
    if (ok == 0 && !why[0]) snprintf(why, cap, "EXPECT %s does not fit TARGET %s", e->expect, e->target);
    free(data);
    return ok == 1;
}

/* ==== Tests ============================================================== */

Test(hostile, committed_files_are_what_their_builders_write) {
    int regenerate = getenv("TM_HOSTILE_REGENERATE") != NULL;
    size_t n;
    entry *list = read_manifest(&n);
    for (size_t i = 0; i < n; i++) {
        const entry *e = &list[i];
        tb_buf want;
        cr_assert(build_input(e->name, &want), "EXPECTED line %d: no builder for %s", e->line, e->name);
        if (strncmp(e->name, "gen:", 4) != 0) {
            cr_assert_leq(want.len, MAX_COMMITTED_BYTES, "%s: %zu bytes is too large to commit; make it gen:",
                          e->name, want.len);
            char path[512];
            snprintf(path, sizeof path, "%s/%s", HOSTILE_DIR, e->name);
            if (regenerate) {
                FILE *f = fopen(path, "wb");
                cr_assert_not_null(f, "cannot write %s", path);
                cr_assert_eq(fwrite(want.data ? (void *)want.data : (void *)"", 1, want.len, f), want.len);
                cr_assert_eq(fclose(f), 0);
            }
            size_t len;
            char *have = tu_read_file(path, &len);
            cr_assert_not_null(have, "%s is missing (TM_HOSTILE_REGENERATE=1 writes it)", path);
            cr_assert(len == want.len && (len == 0 || memcmp(have, want.data, len) == 0),
                      "%s differs from what its builder writes", e->name);
            free(have);
        } else {
            cr_assert_gt(want.len, MAX_COMMITTED_BYTES / 64, "%s is small: commit it instead", e->name);
        }
        tb_free(&want);
    }
    free(list);
}

Test(hostile, every_entry_gets_its_expected_result, .timeout = 120) {
    size_t n;
    entry *list = read_manifest(&n);
    cr_assert_geq(n, 50, "the corpus must hold at least 50 entries, has %zu", n);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        char why[512] = "";
        if (!run_entry(&list[i], why, sizeof why)) {
            failed++;
            cr_log_error("EXPECTED line %d: %s %s: %s", list[i].line, list[i].name, list[i].target, why);
        }
    }
    cr_expect_eq(failed, 0, "%zu of %zu entries failed (see above)", failed, n);
    free(list);
}

/* The address-space cap of each child. The largest legitimate need is
 * gen:sequences_1000001 under the generous preset, whose cap of a million
 * sequences costs about 820 MiB of per-sequence state before the
 * million-and-first fails (it gets TM_ERR_NOMEM below ~880 MiB); 1 GiB
 * leaves room for the C library, Criterion and the generated input, and
 * is still a tenth of what an uncapped 10 GB bomb, or a length trusted
 * near 2^64, would take. Everything else runs in under 100 MiB. */
#define CHILD_AS_LIMIT (1024ull << 20)

Test(hostile, every_entry_survives_a_hard_address_space_limit, .timeout = 240) {
#ifdef TM_HOSTILE_ASAN
    cr_skip_test("RLIMIT_AS cannot work under AddressSanitizer: its shadow memory reserves terabytes");
#else
    size_t n;
    entry *list = read_manifest(&n);
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        int fds[2];
        cr_assert_eq(pipe(fds), 0);
        fflush(NULL);
        pid_t pid = fork();
        cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
        if (pid == 0) {
            close(fds[0]);
            struct rlimit rl = {CHILD_AS_LIMIT, CHILD_AS_LIMIT};
            char why[512] = "";
            int ok = setrlimit(RLIMIT_AS, &rl) == 0 && run_entry(&list[i], why, sizeof why);
            if (!ok && !why[0]) snprintf(why, sizeof why, "setrlimit: %s", strerror(errno));
            if (write(fds[1], why, strlen(why)) < 0) _exit(3);
            _exit(ok ? 0 : 1);
        }
        close(fds[1]);
        char why[512] = "";
        ssize_t got = read(fds[0], why, sizeof why - 1);
        why[got > 0 ? got : 0] = 0;
        close(fds[0]);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        if (WIFSIGNALED(status)) {
            failed++;
            cr_log_error("EXPECTED line %d: %s %s: killed by signal %d under RLIMIT_AS", list[i].line, list[i].name,
                         list[i].target, WTERMSIG(status));
        } else if (WEXITSTATUS(status) != 0) {
            failed++;
            cr_log_error("EXPECTED line %d: %s %s: under RLIMIT_AS: %s", list[i].line, list[i].name, list[i].target,
                         why);
        }
    }
    cr_expect_eq(failed, 0, "%zu of %zu entries failed under RLIMIT_AS (see above)", failed, n);
    free(list);
#endif
}

/* `tracemill convert` on every committed trace entry that fails to parse:
 * a non-zero exit and stderr naming the byte offset the library reports. */
Test(hostile, the_cli_names_the_offset_of_each_parse_error, .timeout = 120) {
    size_t n;
    entry *list = read_manifest(&n);
    size_t ran = 0;
    for (size_t i = 0; i < n; i++) {
        const entry *e = &list[i];
        expectation x;
        char why[512] = "";
        tm_options o;
        if (strncmp(e->name, "gen:", 4) == 0 || trace_options(e->target, &o, why, sizeof why) != 1 ||
            !parse_expect(e->expect, &x, why, sizeof why) || !x.is_status || x.status == TM_OK ||
            x.status == TM_ERR_REJECTED)
            continue;
        size_t len;
        uint8_t *data = load_input(e, &len);
        cr_assert_not_null(data, "%s", e->name);
        tm_trace *t = NULL;
        tm_error err;
        tm_status st = tm_trace_parse(data, len, &o, &t, &err);
        tm_trace_free(t);
        free(data);
        if (st == TM_OK) continue; /* the failure comes from a writer: no input offset */
        /* the same options as command-line flags */
        char flags[512] = "";
        const char *comma = strchr(e->target, ',');
        if (o.mode == TM_MODE_RELAY) strcat(flags, " --compat relay");
        if (o.strict) strcat(flags, " --strict");
        if (o.input == TM_INPUT_SAMPLE_V2) strcat(flags, " --input-format sample-v2");
        if (o.input == TM_INPUT_FOLDED) strcat(flags, " --input-format folded");
        for (size_t k = 0; comma && k < N_OF(limit_fields); k++) {
            uint64_t v;
            memcpy(&v, (const char *)&o.limits + limit_fields[k].offset, sizeof v);
            if (!v) continue;
            char flag[96];
            snprintf(flag, sizeof flag, " --%s %llu", limit_fields[k].name, (unsigned long long)v);
            for (char *c = flag + 3; *c; c++)
                if (*c == '_') *c = '-';
            strcat(flags, flag);
        }
        char err_path[] = "/tmp/tm_hostile_err_XXXXXX";
        int fd = mkstemp(err_path);
        cr_assert_geq(fd, 0);
        close(fd);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "%s convert%s -o /dev/null %s/%s 2>%s", TM_CLI, flags, HOSTILE_DIR, e->name,
                 err_path);
        int rc = system(cmd);
        size_t err_len;
        char *stderr_text = tu_read_file(err_path, &err_len);
        remove(err_path);
        cr_assert_not_null(stderr_text);
        cr_assert(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) != 0, "%s: `%s` exited with %d", e->name, cmd, rc);
        char at[64];
        snprintf(at, sizeof at, "at byte %llu:", (unsigned long long)err.offset);
        cr_assert(strstr(stderr_text, at), "%s: stderr \"%s\" lacks \"%s\"", e->name, stderr_text, at);
        free(stderr_text);
        ran++;
    }
    cr_assert_geq(ran, 20, "only %zu CLI runs", ran);
    free(list);
}
