/*
 * clock.c — the clock tracker (see clock.h). Snapshots are kept in file
 * order with their group; each group lists its snapshots, whose values of
 * any monotonic clock are then sorted, so a hop is a binary search.
 */
#include "perfetto/clock.h" /* tm_clocks */
#include "common/limits.h"

void tm_clocks_init(tm_clocks *c, tm_mem *mem) {
    memset(c, 0, sizeof *c);
    c->mem = mem;
    c->trace_clock = TM_CLOCK_BOOTTIME;
    c->rnd = 1;
}

void tm_clocks_release(tm_clocks *c) {
    tm_clock_group *g = c->groups;
    for (size_t i = 0; i < c->n_groups; i++) tm_mem_free(c->mem, g[i].snaps, g[i].cap * sizeof *g[i].snaps);
    tm_mem_free(c->mem, c->points, c->cap_points * sizeof *c->points);
    tm_mem_free(c->mem, c->snaps, c->cap_snaps * sizeof *c->snaps);
    tm_mem_free(c->mem, c->non_monotonic, c->cap_non_monotonic * sizeof *c->non_monotonic);
    tm_mem_free(c->mem, c->groups, c->cap_groups * sizeof *c->groups);
}

static bool snap_value(const tm_clocks *c, const tm_clock_snap *s, uint64_t clock, int64_t *v) {
    for (uint32_t i = 0; i < s->n; i++)
        if (c->points[s->first + i].clock == clock) {
            *v = c->points[s->first + i].value;
            return true;
        }
    return false;
}

static bool is_non_monotonic(const tm_clocks *c, uint64_t clock) {
    for (size_t i = 0; i < c->n_non_monotonic; i++)
        if (c->non_monotonic[i] == clock) return true;
    return false;
}

static bool is_known(const tm_clocks *c, uint64_t clock) {
    for (size_t i = 0; i < c->n_points; i++)
        if (c->points[i].clock == clock) return true;
    return false;
}

/* Trace Processor's clock arithmetic is int64 that wraps on absurd values;
 * done here in unsigned arithmetic, where wrapping is defined. */
static int64_t wrap_add(int64_t a, int64_t b, bool *wrapped) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) *wrapped = true;
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
static int64_t wrap_sub(int64_t a, int64_t b, bool *wrapped) {
    int64_t r;
    if (__builtin_sub_overflow(a, b, &r)) *wrapped = true;
    return (int64_t)((uint64_t)a - (uint64_t)b);
}

/* One hop inside group g: the snapshot with the largest src value <= ns
 * (the group's first for earlier values). Sets the src range it covers. */
static bool hop(const tm_clocks *c, uint32_t g, uint64_t src, uint64_t dst, int64_t ns, int64_t *out, int64_t *lo,
                int64_t *hi, bool *wrapped) {
    const tm_clock_group *grp = &c->groups[g];
    /* src is monotonic within the group: its values are sorted. */
    size_t a = 0, b = grp->n; /* the first snapshot whose value > ns */
    while (a < b) {
        size_t mid = (a + b) / 2;
        int64_t v = 0;
        snap_value(c, &c->snaps[grp->snaps[mid]], src, &v);
        if (v <= ns) a = mid + 1;
        else b = mid;
    }
    size_t best = a ? a - 1 : 0;
    const tm_clock_snap *s = &c->snaps[grp->snaps[best]];
    int64_t from, to;
    if (!snap_value(c, s, src, &from) || !snap_value(c, s, dst, &to)) return false;
    *out = wrap_add(ns, wrap_sub(to, from, wrapped), wrapped);
    *lo = best == 0 ? INT64_MIN : from; /* the first snapshot also extrapolates backwards */
    *hi = INT64_MAX;
    if (best + 1 < grp->n) snap_value(c, &c->snaps[grp->snaps[best + 1]], src, hi);
    return true;
}

/* Breadth-first search over clocks linked by snapshot groups, at most four
 * hops; a non-monotonic clock is never left from. */
static bool find_and_convert(const tm_clocks *c, uint64_t src, uint64_t dst, int64_t ns, int64_t *out, int *hops,
                             int64_t *lo, int64_t *hi, bool *wrapped) {
    enum { MAXQ = 256 };
    struct node { uint64_t clock; int64_t ns; int depth; int64_t lo, hi; bool wrapped; } q[MAXQ];
    size_t head = 0, tail = 0;
    q[tail++] = (struct node){src, ns, 0, INT64_MIN, INT64_MAX, false};
    const tm_clock_group *groups = c->groups;
    while (head < tail) {
        struct node cur = q[head++];
        if (cur.depth >= 4 || is_non_monotonic(c, cur.clock)) continue;
        for (uint32_t g = 0; g < (uint32_t)c->n_groups; g++) {
            const tm_clock_snap *s = &c->snaps[groups[g].snaps[0]];
            int64_t unused;
            if (!snap_value(c, s, cur.clock, &unused)) continue;
            for (uint32_t k = 0; k < s->n; k++) {
                uint64_t next = c->points[s->first + k].clock;
                if (next == cur.clock) continue;
                int64_t v, l, h;
                bool w = cur.wrapped;
                if (!hop(c, g, cur.clock, next, cur.ns, &v, &l, &h, &w)) continue;
                struct node n = {next, v, cur.depth + 1, l > cur.lo ? l : cur.lo, h < cur.hi ? h : cur.hi, w};
                if (next == dst) {
                    *out = v;
                    *hops = n.depth;
                    *lo = n.lo;
                    *hi = n.hi;
                    *wrapped = w;
                    return true;
                }
                if (tail < MAXQ) q[tail++] = n;
            }
        }
    }
    return false;
}

bool tm_clocks_convert(const tm_clocks *c, uint64_t src, uint64_t dst, int64_t ns, int64_t *out, bool *wrapped) {
    *wrapped = false;
    if (src == dst) {
        *out = ns;
        return true;
    }
    int hops;
    int64_t lo, hi;
    return find_and_convert(c, src, dst, ns, out, &hops, &lo, &hi, wrapped);
}

static tm_status add_points(tm_clocks *c, const tm_clock_point *pts, size_t n, uint32_t primary);

/* Trace Processor's stand-in for a missing snapshot, {BOOTTIME 0,
 * TRACE_FILE 0}, added when a conversion first needs one. */
static tm_status add_synthetic(tm_clocks *c) {
    const tm_clock_point pts[2] = {{TM_PF_BUILTIN_CLOCK_BOOTTIME, 0, 0}, {TM_PF_BUILTIN_CLOCK_TRACE_FILE, 0, 0}};
    c->synthetic = true;
    TM_TRY(add_points(c, pts, 2, 0));
    c->cache_misses++; /* observed: one miss more than its points' conversions explain */
    return TM_OK;
}

bool tm_clocks_to_trace(tm_clocks *c, uint64_t src, int64_t ns, bool record, int64_t *out, bool *wrapped) {
    *wrapped = false;
    if (src == c->trace_clock) {
        *out = ns;
        return true;
    }
    if (!c->n_snaps && add_synthetic(c) != TM_OK) {
        c->out_of_memory = true;
        return false;
    }
    for (int i = 0; i < 8; i++) {
        const tm_clock_cache *e = &c->cache[i];
        if (e->used && e->src == src && ns >= e->min && ns < e->max) {
            *out = wrap_add(ns, e->shift, wrapped);
            return true;
        }
    }
    c->cache_misses++;
    int hops;
    int64_t lo, hi;
    if (!find_and_convert(c, src, c->trace_clock, ns, out, &hops, &lo, &hi, wrapped)) {
        if (record) {
            if (is_known(c, src)) c->failed_no_path++;
            else c->failed_unknown_source++;
        }
        return false;
    }
    if (hops == 1) {
        c->rnd = c->rnd * 48271 % 2147483647;
        bool w = false;
        c->cache[c->rnd % 8] = (tm_clock_cache){src, lo, hi, wrap_sub(*out, ns, &w), true};
    }
    return true;
}

/* Checks a snapshot against its group's last one: a clock going backwards
 * is marked non-monotonic, unless it is the trace clock, which rejects the
 * snapshot (Trace Processor marks the clocks before it first). */
static bool check_monotonic(tm_clocks *c, uint32_t group, const tm_clock_point *pts, size_t n) {
    if (group >= c->n_groups) return true;
    const tm_clock_group *grp = &c->groups[group];
    const tm_clock_snap *last = &c->snaps[grp->snaps[grp->n - 1]];
    for (size_t k = 0; k < n; k++) {
        int64_t prev;
        if (!snap_value(c, last, pts[k].clock, &prev) || pts[k].value >= prev) continue;
        if (pts[k].clock == c->trace_clock) return false;
        if (is_non_monotonic(c, pts[k].clock)) continue;
        if (TM_VEC_RESERVE(c->mem, c->non_monotonic, c->cap_non_monotonic, c->n_non_monotonic + 1) != TM_OK)
            return true; /* out of memory: treated as monotonic, the conversion uses its sorted neighbour */
        c->non_monotonic[c->n_non_monotonic++] = pts[k].clock;
    }
    return true;
}

/* The group of a set of clocks: an earlier snapshot's with the same set. */
static uint32_t group_of(const tm_clocks *c, const tm_clock_point *pts, size_t n) {
    const tm_clock_group *groups = c->groups;
    for (uint32_t g = 0; g < (uint32_t)c->n_groups; g++) {
        const tm_clock_snap *o = &c->snaps[groups[g].snaps[0]];
        if (o->n != n) continue;
        bool same = true;
        int64_t unused;
        for (size_t k = 0; k < n && same; k++) same = snap_value(c, o, pts[k].clock, &unused);
        if (same) return g;
    }
    return (uint32_t)c->n_groups;
}

static tm_status add_points(tm_clocks *c, const tm_clock_point *pts, size_t n, uint32_t primary) {
    if (c->n_snaps >= TM_MAX_CLOCK_SNAPSHOTS) return TM_ERR_LIMIT;
    uint32_t id = c->next_id++;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < i; k++)
            if (pts[i].clock == pts[k].clock) {
                c->invalid_snapshots++;
                return TM_OK;
            }
    if (!c->trace_clock_fixed) {
        c->trace_clock_fixed = true;
        bool has_boot = false;
        for (size_t k = 0; k < n; k++) has_boot |= pts[k].clock == TM_CLOCK_BOOTTIME;
        if (primary) c->trace_clock = primary;
        else if (has_boot) c->trace_clock = TM_CLOCK_BOOTTIME;
    }
    uint32_t group = group_of(c, pts, n);
    if (!check_monotonic(c, group, pts, n)) {
        c->invalid_snapshots++;
        return TM_OK;
    }
    TM_TRY(TM_VEC_RESERVE(c->mem, c->points, c->cap_points, c->n_points + n));
    TM_TRY(TM_VEC_RESERVE(c->mem, c->snaps, c->cap_snaps, c->n_snaps + 1));
    if (group == c->n_groups) {
        TM_TRY(TM_VEC_RESERVE(c->mem, c->groups, c->cap_groups, c->n_groups + 1));
        memset(&c->groups[group], 0, sizeof *c->groups);
    }
    tm_clock_group *grp = &c->groups[group];
    TM_TRY(TM_VEC_RESERVE(c->mem, grp->snaps, grp->cap, grp->n + 1));
    if (group == c->n_groups) c->n_groups++; /* only now: a group always has a snapshot */
    grp->snaps[grp->n++] = (uint32_t)c->n_snaps;
    tm_clock_snap *s = &c->snaps[c->n_snaps++];
    *s = (tm_clock_snap){id, group, (uint32_t)c->n_points, (uint32_t)n};
    memcpy(c->points + c->n_points, pts, n * sizeof *pts);
    c->n_points += n;
    memset(c->cache, 0, sizeof c->cache);
    /* Each reading in trace time, through the cache as Trace Processor
     * converts it for its clock_snapshot row; one it cannot convert takes
     * the snapshot's trace-clock value. */
    for (size_t k = 0; k < n; k++) {
        tm_clock_point *pt = &c->points[s->first + k];
        bool wrapped;
        if (!tm_clocks_to_trace(c, pt->clock, pt->value, false, &pt->trace_ns, &wrapped) &&
            !snap_value(c, s, c->trace_clock, &pt->trace_ns))
            pt->trace_ns = 0;
    }
    return TM_OK;
}

tm_status tm_clocks_add(tm_clocks *c, const tm_clock_point *pts, size_t n, uint32_t primary) {
    return n ? add_points(c, pts, n, primary) : TM_OK;
}
