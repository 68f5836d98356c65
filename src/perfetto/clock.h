/*
 * clock.h — the one clock tracker: Perfetto clock snapshots and the
 * conversion of a timestamp from its clock domain to trace time, with
 * Trace Processor's rules, so that every consumer of the reader sees the
 * same time for the same packet:
 *  - snapshots with the same set of clocks form a group; each hop of a
 *    conversion stays inside one group and uses the snapshot with the
 *    largest source value <= ts (the group's first for earlier values);
 *  - a path of at most four hops is found by breadth-first search;
 *  - a clock whose value goes backwards between two snapshots of a group is
 *    non-monotonic: it may still be a hop's target, never its source; if it
 *    is the trace clock, the snapshot is rejected (invalid_snapshots);
 *  - the trace clock is the first snapshot's primary_trace_clock, else
 *    BOOTTIME; a conversion needed before any snapshot adds Trace
 *    Processor's stand-in {BOOTTIME 0, TRACE_FILE 0};
 *  - an 8-entry cache of single-hop conversions, emptied by each snapshot,
 *    whose misses are counted as Trace Processor counts them;
 *  - int64 arithmetic wraps as Trace Processor's does; `wrapped` says so.
 * Clock keys are builtin ids (1..63) or, for sequence-scoped ids 64..127,
 * tm_pf_clock_key (sequence << 8 | id).
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
    int64_t value;    /* ns */
    int64_t trace_ns; /* the value in trace time when the snapshot came (its trace-clock value if none) */
} tm_clock_point;

typedef struct tm_clock_snap {
    uint32_t id;     /* snapshot ids count rejected snapshots too, as Trace Processor's */
    uint32_t group;  /* snapshots with the same set of clocks */
    uint32_t first, n; /* points[first .. first + n) */
} tm_clock_snap;

typedef struct tm_clock_group {
    uint32_t *snaps; size_t n, cap; /* indexes into tm_clocks.snaps, in file order */
} tm_clock_group;

typedef struct tm_clock_cache {
    uint64_t src;
    int64_t min, max, shift; /* src values in [min, max) convert by + shift */
    bool used;
} tm_clock_cache;

typedef struct tm_clocks {
    tm_mem *mem;
    tm_clock_point *points; size_t n_points, cap_points;
    tm_clock_snap *snaps; size_t n_snaps, cap_snaps;
    tm_clock_group *groups; size_t n_groups, cap_groups;
    uint32_t next_id;
    uint64_t *non_monotonic; size_t n_non_monotonic, cap_non_monotonic;
    uint64_t trace_clock;     /* BOOTTIME unless the first snapshot names a primary clock */
    bool trace_clock_fixed;   /* by the first snapshot */
    bool synthetic;           /* snapshot 0 is Trace Processor's stand-in */
    bool out_of_memory;       /* adding the stand-in failed: the conversion that needed it failed too */
    tm_clock_cache cache[8];
    uint64_t rnd;             /* the cache slot, as std::minstd_rand picks it */
    /* what Trace Processor counts */
    uint64_t cache_misses, invalid_snapshots, failed_no_path, failed_unknown_source;
} tm_clocks;

void tm_clocks_init(tm_clocks *c, tm_mem *mem);
void tm_clocks_release(tm_clocks *c);

/* Adds one snapshot (values already scaled to ns; n > 0). primary: 0 if
 * absent. TM_ERR_LIMIT past TM_MAX_CLOCK_SNAPSHOTS. A rejected snapshot
 * (duplicate clock, the trace clock going backwards) is counted in
 * invalid_snapshots and left out. */
tm_status tm_clocks_add(tm_clocks *c, const tm_clock_point *pts, size_t n, uint32_t primary);

/* Converts ns of clock src to trace time. Returns false when there is no
 * path; `record` counts that failure (Trace Processor tries quietly first).
 * *wrapped: the int64 arithmetic overflowed (the value wraps). */
bool tm_clocks_to_trace(tm_clocks *c, uint64_t src, int64_t ns, bool record, int64_t *out, bool *wrapped);

/* Converts ns of clock src to clock dst, without the cache or counters. */
bool tm_clocks_convert(const tm_clocks *c, uint64_t src, uint64_t dst, int64_t ns, int64_t *out, bool *wrapped);

/* Snapshots that were not the stand-in. */
static inline size_t tm_clocks_real_snapshots(const tm_clocks *c) { return c->n_snaps - (c->synthetic ? 1 : 0); }

#endif
