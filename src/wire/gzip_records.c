/*
 * gzip_records.c — the record-matching gzip writer (see gzip_records.h).
 * Fixed Huffman codes are those of RFC 1951 §3.2.6; codes go out bit
 * reversed because deflate packs Huffman codes from their most significant
 * bit into an LSB-first bit stream. The CRC-32 is libdeflate's.
 */
#include <assert.h>
#include <libdeflate.h>

#include "wire/gzip_records.h" /* tm_gzrec */

enum { MIN_MATCH = 3, MAX_MATCH = 258, END_OF_BLOCK = 256 };

/* Records are encoded in pieces so that one capacity check covers a piece:
 * a literal costs at most 9 bits, a match at most 31 for 3+ bytes. */
#define PIECE 1024
#define PIECE_ROOM (PIECE * 9 / 8 + 64)

static const uint16_t length_base[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                         31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
static const uint8_t length_extra[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                         2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
static const uint16_t dist_base[30] = {1,    2,    3,    4,    5,    7,     9,     13,    17,  25,
                                       33,   49,   65,   97,   129,  193,   257,   385,   513, 769,
                                       1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
static const uint8_t dist_extra[30] = {0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6,
                                       6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};

static uint32_t reverse_bits(uint32_t code, unsigned n) {
    uint32_t r = 0;
    for (unsigned i = 0; i < n; i++) r |= ((code >> i) & 1) << (n - 1 - i);
    return r;
}

/* The fixed literal/length code of a symbol, ready to write; *n its bits. */
static uint32_t fixed_code(unsigned sym, unsigned *n) {
    if (sym < 144) return *n = 8, reverse_bits(0x30 + sym, 8);
    if (sym < 256) return *n = 9, reverse_bits(0x190 + sym - 144, 9);
    if (sym < 280) return *n = 7, reverse_bits(sym - 256, 7);
    return *n = 8, reverse_bits(0xc0 + sym - 280, 8);
}

#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define TM_GZREC_LE 1
#else
#define TM_GZREC_LE 0
#endif

/* Adds up to 32 bits; drain() must follow before 64 accumulate. */
static inline void put_bits(tm_gzrec *g, uint64_t v, unsigned n) {
    g->bits |= v << g->n_bits;
    g->n_bits += n;
}

/* Moves whole pending bytes to the output (which has 8 bytes of slack). */
static inline void drain(tm_gzrec *g) {
    uint8_t *o = g->out + g->out_len;
    unsigned whole = g->n_bits >> 3;
#if TM_GZREC_LE
    memcpy(o, &g->bits, 8);
#else
    for (unsigned i = 0; i < 8; i++) o[i] = (uint8_t)(g->bits >> (8 * i));
#endif
    g->out_len += whole;
    g->bits = whole == 8 ? 0 : g->bits >> (8 * whole);
    g->n_bits &= 7;
}

static inline void put_literal(tm_gzrec *g, uint8_t byte) {
    put_bits(g, g->literal_code[byte], g->literal_bits[byte]);
    drain(g);
}

static inline void put_match(tm_gzrec *g, size_t len, uint32_t dist_code, unsigned dist_bits) {
    put_bits(g, g->length_code[len], g->length_bits[len]);
    put_bits(g, dist_code, dist_bits);
    drain(g);
}

static void put_u32le(uint8_t *o, uint32_t v) {
    o[0] = (uint8_t)v, o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)(v >> 16), o[3] = (uint8_t)(v >> 24);
}

void tm_gzrec_init(tm_gzrec *g, const tm_sink *sink, uint8_t *in, size_t in_cap, uint8_t *out, size_t out_cap) {
    assert(in_cap >= TM_GZREC_MIN_STAGING && out_cap >= TM_GZREC_MIN_OUT);
    memset(g, 0, sizeof *g);
    g->sink = sink;
    g->in = in;
    g->in_cap = in_cap;
    g->out = out;
    g->out_cap = out_cap;
    g->st = TM_OK;
    for (unsigned b = 0; b < 256; b++) {
        unsigned n;
        g->literal_code[b] = (uint16_t)fixed_code(b, &n);
        g->literal_bits[b] = (uint8_t)n;
    }
    for (unsigned len = MIN_MATCH, k = 0; len <= MAX_MATCH; len++) {
        while (k + 1 < 29 && length_base[k + 1] <= len) k++;
        unsigned n;
        uint32_t code = fixed_code(257 + k, &n);
        g->length_code[len] = code | (uint32_t)(len - length_base[k]) << n;
        g->length_bits[len] = (uint8_t)(n + length_extra[k]);
    }
}

/* Folds staged bytes up to pos into the member's CRC. */
static void crc_upto(tm_gzrec *g, size_t pos) {
    if (pos > g->crc_done) g->crc = libdeflate_crc32(g->crc, g->in + g->crc_done, pos - g->crc_done);
    g->crc_done = pos;
}

static void member_begin(tm_gzrec *g) {
    static const uint8_t header[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}; /* deflate, no name, OS unknown */
    memcpy(g->out, header, sizeof header);
    g->out_len = sizeof header;
    g->bits = 0;
    g->n_bits = 0;
    g->crc = 0;
    g->member_in = 0;
    g->open = 1;
    put_bits(g, 1 | 1 << 1, 3); /* BFINAL, BTYPE 01: one fixed-Huffman block */
}

/* The caller has folded the member's input into crc. */
static void member_end(tm_gzrec *g) {
    unsigned n;
    uint32_t eob = fixed_code(END_OF_BLOCK, &n);
    put_bits(g, eob, n);
    drain(g);
    if (g->n_bits) g->out[g->out_len++] = (uint8_t)g->bits; /* the last partial byte, zero padded */
    g->bits = 0;
    g->n_bits = 0;
    put_u32le(g->out + g->out_len, g->crc);
    put_u32le(g->out + g->out_len + 4, g->member_in);
    g->out_len += 8;
    if (g->st == TM_OK && g->sink->write(g->sink->ctx, g->out, g->out_len)) g->st = TM_ERR_IO;
    g->out_len = 0;
    g->open = 0;
}

/* Length of the run of bytes at rec[i..end) equal to those dist bytes
 * earlier, at most MAX_MATCH. */
static inline size_t run_length(const uint8_t *rec, size_t i, size_t end, size_t dist) {
    const uint8_t *a = rec + i, *b = rec + i - dist;
    size_t limit = end - i < MAX_MATCH ? end - i : MAX_MATCH, run = 0;
#if TM_GZREC_LE && defined(__GNUC__)
    for (; run + 8 <= limit; run += 8) {
        uint64_t x, y;
        memcpy(&x, a + run, 8);
        memcpy(&y, b + run, 8);
        if (x != y) return run + (size_t)__builtin_ctzll(x ^ y) / 8; /* the first differing byte */
    }
#endif
    while (run < limit && a[run] == b[run]) run++;
    return run;
}

/* Encodes a record: staged (in g->in, CRC folded in lazily) or not (CRC'd
 * here, never matched). dist: how far back its predecessor starts, 0 for
 * none. Returns 0 when a member boundary fell inside the record. */
static int encode(tm_gzrec *g, const uint8_t *rec, size_t len, size_t dist, int staged) {
    if (dist && dist != g->dist) { /* records of one length follow each other */
        unsigned k = 29;
        while (dist_base[k] > dist) k--;
        g->dist = dist;
        g->dist_code = reverse_bits(k, 5) | (uint32_t)(dist - dist_base[k]) << 5;
        g->dist_bits = 5u + dist_extra[k];
    }
    const uint32_t dist_code = g->dist_code;
    const unsigned dist_bits = g->dist_bits;
    int whole = 1;
    for (size_t at = 0; at < len;) {
        size_t end = len - at > PIECE ? at + PIECE : len;
        if (!g->open || g->out_cap - g->out_len < PIECE_ROOM) {
            if (g->open) {
                if (staged) crc_upto(g, (size_t)(rec - g->in) + at);
                member_end(g);
            }
            member_begin(g);
            if (at) whole = 0;
            dist = 0; /* back-references cannot cross members */
        }
        if (!staged) g->crc = libdeflate_crc32(g->crc, rec + at, end - at);
        g->member_in += (uint32_t)(end - at);
        while (at < end) {
            size_t run = dist ? run_length(rec, at, end, dist) : 0;
            if (run >= MIN_MATCH) {
                put_match(g, run, dist_code, dist_bits);
                at += run;
            } else {
                put_literal(g, rec[at++]);
            }
        }
    }
    return whole;
}

void tm_gzrec_put(tm_gzrec *g, const uint8_t *rec, size_t len) {
    if (len > TM_GZREC_WINDOW) {
        crc_upto(g, g->in_len);
        encode(g, rec, len, 0, 0);
        g->prev_len = 0;
        return;
    }
    if (g->in_cap - g->in_len < len) { /* keep only the previous record */
        crc_upto(g, g->in_len);
        memmove(g->in, g->in + g->in_len - g->prev_len, g->prev_len);
        g->in_len = g->crc_done = g->prev_len;
    }
    uint8_t *staged = g->in + g->in_len;
    memcpy(staged, rec, len);
    int whole = encode(g, staged, len, g->prev_len, 1);
    g->in_len += len;
    g->prev_len = whole ? len : 0;
}

tm_status tm_gzrec_finish(tm_gzrec *g) {
    if (g->open) {
        crc_upto(g, g->in_len);
        member_end(g);
    }
    return g->st;
}
