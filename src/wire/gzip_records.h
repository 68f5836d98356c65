/*
 * gzip_records.h — a gzip writer for streams of records that mostly repeat
 * the record before them (RFC 1951 deflate, RFC 1952 gzip members).
 *
 * Each record is matched byte for byte against the previous one, at the
 * distance of the previous record's length: runs of at least three equal
 * bytes become back-references, the rest literals, all in fixed-Huffman
 * blocks. There is no match search, so it runs at memory speed; on pprof
 * samples written in (thread, stack) order, where consecutive samples differ
 * only in their timestamp, it compresses to about a tenth in a fraction of
 * the time of zlib's or libdeflate's fastest level. Records unlike their
 * predecessor cost up to 9/8 of their size, so other data should go to a
 * real compressor.
 *
 * Records are copied into a staging buffer, so that each record's
 * predecessor sits right before it and the CRC-32 runs over large spans.
 * Output is a sequence of independent gzip members of about out_cap bytes
 * (a multi-member gzip file reads as one stream with gzip -d, zlib's
 * inflate in a loop, Go's compress/gzip). No allocation: the caller owns
 * both buffers. Not thread-safe.
 */
#ifndef TM_GZIP_RECORDS_H
#define TM_GZIP_RECORDS_H

#include "common/base.h" /* tm_status */

/* Records up to this size are matched against their successor (deflate's
 * window is 32 KiB); longer ones go out as literals. */
#define TM_GZREC_WINDOW 32768
/* Sizes the buffers given to tm_gzrec_init must have at least. */
#define TM_GZREC_MIN_STAGING (4 * TM_GZREC_WINDOW)
#define TM_GZREC_MIN_OUT 4096

typedef struct tm_gzrec {
    const tm_sink *sink;
    uint8_t *in;          /* staging: the previous record, then the current one */
    size_t in_len, in_cap;
    size_t crc_done;      /* in[0..crc_done) is in crc */
    size_t prev_len;      /* the record ending at in_len; 0: none to match */
    size_t dist;          /* the distance last encoded, */
    uint32_t dist_code;   /* its code and extra bits, */
    unsigned dist_bits;   /* and their length */
    uint8_t *out;         /* the member being written */
    size_t out_len, out_cap;
    uint64_t bits;        /* pending output bits, LSB first */
    unsigned n_bits;
    uint32_t crc, member_in; /* CRC-32 and size of the member's input */
    int open;             /* a member has been started */
    tm_status st;         /* the first sink error */
    /* fixed-Huffman codes, bit reversed, with their lengths */
    uint16_t literal_code[256];
    uint8_t literal_bits[256];
    uint32_t length_code[259]; /* code and extra bits of each match length */
    uint8_t length_bits[259];
} tm_gzrec;

/* in_cap >= TM_GZREC_MIN_STAGING, out_cap >= TM_GZREC_MIN_OUT; members are
 * written to the sink as they fill. */
void tm_gzrec_init(tm_gzrec *g, const tm_sink *sink, uint8_t *in, size_t in_cap, uint8_t *out, size_t out_cap);

/* Appends one record of any length. */
void tm_gzrec_put(tm_gzrec *g, const uint8_t *rec, size_t len);

/* Ends the current member (if any) and writes it; returns TM_OK, or
 * TM_ERR_IO if any sink write failed. The writer may be used again. */
tm_status tm_gzrec_finish(tm_gzrec *g);

#endif
