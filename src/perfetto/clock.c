/*
 * clock.c — clock snapshot storage and path conversion (see clock.h).
 * Paths are built once per (from, to) pair and then applied to many
 * samples; each hop keeps its snapshots sorted by source value so a
 * conversion is one binary search per hop.
 */
#include "perfetto/clock.h" /* tm_clocks, tm_clock_path */
#include "common/limits.h"

void tm_clocks_init(tm_clocks *c, tm_mem *mem) {
    memset(c, 0, sizeof *c);
    c->mem = mem;
    c->trace_clock = TM_CLOCK_BOOTTIME;
}

void tm_clocks_release(tm_clocks *c) {
    tm_mem_free(c->mem, c->points, c->cap_points * sizeof *c->points);
    tm_mem_free(c->mem, c->snap_end, c->cap_snaps * sizeof *c->snap_end);
}

tm_status tm_clocks_add(tm_clocks *c, const tm_clock_point *pts, size_t n, uint32_t primary) {
    if (c->n_snaps >= TM_MAX_CLOCK_SNAPSHOTS) return TM_ERR_LIMIT;
    TM_TRY(TM_VEC_RESERVE(c->mem, c->points, c->cap_points, c->n_points + n));
    TM_TRY(TM_VEC_RESERVE(c->mem, c->snap_end, c->cap_snaps, c->n_snaps + 1));
    if (n) memcpy(c->points + c->n_points, pts, n * sizeof *pts); /* points is NULL until the first */
    c->n_points += n;
    c->snap_end[c->n_snaps++] = (uint32_t)c->n_points;
    if (!c->trace_clock_fixed) {
        c->trace_clock_fixed = 1;
        if (primary) c->trace_clock = primary;
    }
    return TM_OK;
}

static size_t snap_begin(const tm_clocks *c, size_t i) { return i ? c->snap_end[i - 1] : 0; }

static int snap_value(const tm_clocks *c, size_t i, uint64_t clock, int64_t *v) {
    for (size_t k = snap_begin(c, i); k < c->snap_end[i]; k++)
        if (c->points[k].clock == clock) {
            *v = c->points[k].value;
            return 1;
        }
    return 0;
}

/* Breadth-first search over clocks; neighbours are the clocks sharing a
 * snapshot. Clock counts are small (< TM_MAX_CLOCKS), so the search scans
 * the snapshots directly. */
static size_t find_path(const tm_clocks *c, uint64_t from, uint64_t to, uint64_t *path) {
    uint64_t queue[TM_MAX_CLOCKS];
    int32_t parent[TM_MAX_CLOCKS];
    size_t head = 0, tail = 0;
    queue[tail] = from;
    parent[tail++] = -1;
    while (head < tail) {
        size_t cur = head++;
        if (queue[cur] == to) {
            size_t n = 0;
            uint64_t rev[TM_MAX_CLOCKS];
            for (int32_t k = (int32_t)cur; k >= 0; k = parent[k]) rev[n++] = queue[k];
            if (n > TM_CLOCK_MAX_HOPS + 1) return 0;
            for (size_t i = 0; i < n; i++) path[i] = rev[n - 1 - i];
            return n;
        }
        for (size_t s = 0; s < c->n_snaps; s++) {
            int64_t v;
            if (!snap_value(c, s, queue[cur], &v)) continue;
            for (size_t k = snap_begin(c, s); k < c->snap_end[s]; k++) {
                uint64_t nb = c->points[k].clock;
                int seen = 0;
                for (size_t q = 0; q < tail && !seen; q++) seen = queue[q] == nb;
                if (seen || tail >= TM_MAX_CLOCKS) continue;
                queue[tail] = nb;
                parent[tail++] = (int32_t)cur;
            }
        }
    }
    return 0;
}

tm_status tm_clock_path_build(const tm_clocks *c, uint64_t from, uint64_t to, tm_clock_path *out) {
    memset(out, 0, sizeof *out);
    if (from == to) {
        out->ok = 1;
        return TM_OK;
    }
    uint64_t path[TM_CLOCK_MAX_HOPS + 1];
    size_t n = find_path(c, from, to, path);
    if (n < 2) return TM_OK;
    for (size_t h = 0; h + 1 < n; h++) {
        tm_clock_hop *hop = &out->hops[out->n_hops++];
        hop->from_vals = tm_mem_alloc(c->mem, c->n_snaps * sizeof(int64_t));
        hop->to_vals = tm_mem_alloc(c->mem, c->n_snaps * sizeof(int64_t));
        if (!hop->from_vals || !hop->to_vals) {
            tm_clock_path_release(c, out);
            return TM_ERR_NOMEM;
        }
        for (size_t s = 0; s < c->n_snaps; s++) {
            int64_t a, b;
            if (!snap_value(c, s, path[h], &a) || !snap_value(c, s, path[h + 1], &b)) continue;
            /* Insertion keeps from_vals sorted; ties keep file order. */
            size_t k = hop->n++;
            while (k > 0 && hop->from_vals[k - 1] > a) {
                hop->from_vals[k] = hop->from_vals[k - 1];
                hop->to_vals[k] = hop->to_vals[k - 1];
                k--;
            }
            hop->from_vals[k] = a;
            hop->to_vals[k] = b;
        }
    }
    out->ok = 1;
    return TM_OK;
}

void tm_clock_path_release(const tm_clocks *c, tm_clock_path *p) {
    for (size_t h = 0; h < p->n_hops; h++) {
        tm_mem_free(c->mem, p->hops[h].from_vals, c->n_snaps * sizeof(int64_t));
        tm_mem_free(c->mem, p->hops[h].to_vals, c->n_snaps * sizeof(int64_t));
    }
    p->n_hops = 0;
    p->ok = 0;
}

int tm_clock_path_convert(const tm_clock_path *p, int64_t ts, int64_t *out) {
    if (!p->ok) return 0;
    for (size_t h = 0; h < p->n_hops; h++) {
        const tm_clock_hop *hop = &p->hops[h];
        size_t lo = 0, hi = hop->n; /* last from_val <= ts, else the first */
        while (hi - lo > 1) {
            size_t mid = (lo + hi) / 2;
            if (hop->from_vals[mid] <= ts) lo = mid;
            else hi = mid;
        }
        int64_t r;
        if (__builtin_sub_overflow(ts, hop->from_vals[lo], &r) ||
            __builtin_add_overflow(r, hop->to_vals[lo], &ts))
            return 0;
    }
    *out = ts;
    return 1;
}
