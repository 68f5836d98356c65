/*
 * inflate.h — zlib/gzip inflation of TracePacket.compressed_packets with a
 * hard cap on the inflated size (zip bombs fail with TM_ERR_LIMIT).
 */
#ifndef TM_INFLATE_H
#define TM_INFLATE_H

#include "common/alloc.h" /* tm_arena */

/* Inflates src into a buffer from the arena. Accepts a zlib or gzip header,
 * as Trace Processor does; raw deflate is rejected. */
tm_status tm_inflate(tm_arena *ar, tm_mem *mem, tm_bytes src, uint64_t cap, tm_bytes *out,
                     const char **why);

#endif
