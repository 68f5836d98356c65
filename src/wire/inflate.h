/*
 * inflate.h — bounded decompression: zlib/gzip inflation of
 * TracePacket.compressed_packets, and whole inputs compressed with gzip or
 * zstd. Output has a hard cap (zip bombs fail with TM_ERR_LIMIT).
 */
#ifndef TM_INFLATE_H
#define TM_INFLATE_H

#include "common/alloc.h" /* tm_arena */

/* Inflates src into a buffer from the arena. Accepts a zlib or gzip header,
 * as Trace Processor does; raw deflate is rejected. */
tm_status tm_inflate(tm_arena *ar, tm_mem *mem, tm_bytes src, uint64_t cap, tm_bytes *out,
                     const char **why);

/* Compression around a whole input, known by its magic bytes. */
typedef enum tm_framing { TM_FRAMING_NONE, TM_FRAMING_GZIP, TM_FRAMING_ZSTD } tm_framing;

tm_framing tm_framing_of(tm_bytes b);
const char *tm_framing_name(tm_framing f); /* "gzip", "zstd" */

/* Decompresses a whole gzip input (one member or several in a row) or zstd
 * input (one frame or several) into a buffer from mem of at most cap bytes.
 * On success *out views it and *out_cap is its size for tm_mem_free; on
 * failure *at is the offset in src where decoding stopped and *why says
 * what went wrong (a static string). */
tm_status tm_decompress(tm_mem *mem, tm_framing f, tm_bytes src, uint64_t cap, tm_bytes *out, size_t *out_cap,
                        uint64_t *at, const char **why);

#endif
