/*
 * clock.h — Perfetto clock snapshots and conversion between clock domains,
 * as Trace Processor does: snapshots link clocks;
 * a path of hops is found by breadth-first search; each hop uses the
 * snapshot with the largest source value <= ts, or the first one for
 * earlier timestamps. Clock keys are builtin ids (1..63) or, for
 * sequence-scoped ids 64..127, (sequence << 8 | id).
 *
 * Not thread-safe while being filled; read-only afterwards.
 */
#ifndef TM_CLOCK_H
#define TM_CLOCK_H

#include "common/alloc.h"     /* tm_mem */
#include "perfetto/fields.h" /* builtin clock ids */

enum {
    TM_CLOCK_REALTIME = TM_PF_BUILTIN_CLOCK_REALTIME,
    TM_CLOCK_MONOTONIC = TM_PF_BUILTIN_CLOCK_MONOTONIC,
    TM_CLOCK_BOOTTIME = TM_PF_BUILTIN_CLOCK_BOOTTIME
};

typedef struct tm_clock_point {
    uint64_t clock;
    int64_t value; /* ns */
} tm_clock_point;

typedef struct tm_clocks {
    tm_mem *mem;
    tm_clock_point *points; size_t n_points, cap_points;
    uint32_t *snap_end; size_t n_snaps, cap_snaps; /* snapshot i = points[end(i-1) .. end(i)) */
    uint64_t trace_clock;  /* BOOTTIME unless a snapshot names a primary clock */
    int trace_clock_fixed; /* set by the first snapshot */
} tm_clocks;

void tm_clocks_init(tm_clocks *c, tm_mem *mem);
void tm_clocks_release(tm_clocks *c);

/* Adds one snapshot (points already scaled to ns). primary: 0 if absent. */
tm_status tm_clocks_add(tm_clocks *c, const tm_clock_point *pts, size_t n, uint32_t primary);

/* A precomputed conversion path from one clock to another. */
typedef struct tm_clock_hop {
    int64_t *from_vals; /* sorted */
    int64_t *to_vals;
    size_t n;
} tm_clock_hop;

#define TM_CLOCK_MAX_HOPS 8

typedef struct tm_clock_path {
    tm_clock_hop hops[TM_CLOCK_MAX_HOPS];
    size_t n_hops;
    int ok; /* a path exists (n_hops may be 0 for from == to) */
} tm_clock_path;

tm_status tm_clock_path_build(const tm_clocks *c, uint64_t from, uint64_t to, tm_clock_path *out);
void tm_clock_path_release(const tm_clocks *c, tm_clock_path *p);
/* Converts ts along the path; returns 0 on overflow or when no path. */
int tm_clock_path_convert(const tm_clock_path *p, int64_t ts, int64_t *out);

#endif
