/*
 * aggregate.c — shared pieces of the pprof, folded, speedscope and flame
 * graph exporters: thread filters, frame and thread labels, frame kinds,
 * per-thread sampling periods and per-stack sample counts.
 */
#include <stdio.h>
#include <stdlib.h>

#include "profile/aggregate.h" /* tm_frame_labels, tm_stack_counts */

/* ---- threads ---- */

static int name_is(tm_str name, const char *want) {
    size_t n = strlen(want);
    return name.len == n && memcmp(name.data, want, n) == 0;
}

tm_status tm_thread_select(const tm_profile *p, const tm_thread_filter *f, uint8_t **sel, tm_error *err) {
    *sel = tm_mem_alloc(p->mem, p->n_threads + 1);
    if (!*sel) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    int all = !f || (!f->name && !f->by_tid);
    size_t matched = 0;
    for (size_t i = 0; i < p->n_threads; i++) {
        char buf[32];
        int ok = all || ((!f->by_tid || p->threads[i].tid == f->tid) &&
                         (!f->name || name_is(tm_thread_label(p, (uint32_t)i, buf), f->name)));
        (*sel)[i] = (uint8_t)ok;
        matched += ok;
    }
    /* threads that exist but hold none of p's samples (of the value a view
     * weighs) would give an empty profile without a word */
    int on_selected = 0;
    for (size_t i = 0; !all && matched && i < p->n_samples && !on_selected; i++)
        on_selected = (*sel)[p->samples[i].thread];
    if (all || on_selected || (matched && !p->n_samples)) return TM_OK;
    tm_thread_selection_free(p, *sel);
    *sel = NULL;
    if (matched)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "%s selected hold%s none of the samples%s",
                       matched > 1 ? "the threads" : "the thread", matched > 1 ? "" : "s",
                       p->n_heap_samples ? " (a memory profile's samples are its process's, on its main thread: "
                                           "tid = pid)"
                                         : "");
    if (f->name && f->by_tid)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "no thread %lld named \"%s\"", (long long)f->tid, f->name);
    if (f->name) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "no thread named \"%s\"", f->name);
    return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "no thread with tid %lld", (long long)f->tid);
}

void tm_thread_selection_free(const tm_profile *p, uint8_t *sel) {
    if (sel) tm_mem_free(p->mem, sel, p->n_threads + 1);
}

tm_str tm_thread_label(const tm_profile *p, uint32_t thread, char *buf) {
    const tm_prof_thread *t = &p->threads[thread];
    if (t->name.len) return t->name;
    /* Relay names every main thread "main"; the default mode tells them
     * apart by their process's name when it is known. */
    tm_str proc = p->relay_compat ? (tm_str){NULL, 0} : tm_profile_main_thread_process_name(p, t);
    if (proc.len) return proc;
    int n = t->tid == t->pid && t->pid ? snprintf(buf, 32, "main") : snprintf(buf, 32, "tid-%lld", (long long)t->tid);
    tm_str s = {(const uint8_t *)buf, (size_t)n};
    return s;
}

/* ---- frames ---- */

static tm_str frame_library(const tm_profile *p, const tm_prof_frame *f) {
    tm_str path = f->package;
    if (!(f->flags & TM_FRAME_HAS_PACKAGE) && f->mapping) path = p->mappings[f->mapping - 1].path;
    size_t i = path.len;
    while (i && path.data[i - 1] != '/') i--;
    tm_str base = {path.data ? path.data + i : NULL, path.len - i}; /* no NULL + 0 */
    return base;
}

tm_frame_kind tm_frame_kind_of(const tm_profile *p, uint32_t frame) {
    const tm_prof_frame *f = &p->frames[frame];
    if (f->flags & TM_FRAME_JAVA) return TM_KIND_JAVA;
    tm_str lib = frame_library(p, f);
    static const char kernel[] = "[kernel";
    if ((lib.len >= sizeof kernel - 1 && memcmp(lib.data, kernel, sizeof kernel - 1) == 0) ||
        ((f->flags & TM_FRAME_HAS_ADDR) && f->addr >= TM_KERNEL_ADDR_MIN))
        return TM_KIND_KERNEL;
    if (!(f->flags & TM_FRAME_HAS_FUNCTION)) return TM_KIND_UNKNOWN;
    return TM_KIND_NATIVE;
}

/* A frame of a function without a name (JavaScript's anonymous
 * functions): an empty name, or neither name nor address. Its label says
 * so, and its source tells such frames apart. */
static int is_anonymous(const tm_prof_frame *f) {
    if (f->flags & TM_FRAME_HAS_FUNCTION) return f->function.len == 0;
    return !(f->flags & TM_FRAME_HAS_ADDR) && !f->mapping;
}

/* Whether the label names the frame's source file and line: only symbols
 * and SDKs' frames (Sample v2 input) have either, so labels of other traces
 * never change. */
static int has_source(bool lines, const tm_prof_frame *f) {
    return lines && ((f->flags & TM_FRAME_HAS_FUNCTION) || is_anonymous(f)) &&
           (f->flags & (TM_FRAME_HAS_FILE | TM_FRAME_HAS_LINE));
}

/* A function name is its own label; other labels are composed. */
static int label_is_function(const tm_prof_frame *f) {
    return (f->flags & TM_FRAME_HAS_FUNCTION) && f->function.len && !(f->flags & TM_FRAME_JAVA && f->module.len);
}

/* Copies src to buf at `at` as far as cap allows; returns the new length. */
static size_t put(char *buf, size_t cap, size_t at, const void *src, size_t n) {
    if (n && at < cap) memcpy(buf + at, src, n < cap - at ? n : cap - at);
    return at + n;
}

static size_t label_format(const tm_profile *p, uint32_t frame, bool lines, char *buf, size_t cap) {
    const tm_prof_frame *f = &p->frames[frame];
    size_t n = 0;
    int anonymous = is_anonymous(f);
    if ((f->flags & TM_FRAME_HAS_FUNCTION) || anonymous) {
        if (anonymous) {
            n = put(buf, cap, n, "(anonymous)", 11);
        } else if (!label_is_function(f)) { /* Java: Class.method */
            n = put(buf, cap, n, f->module.data, f->module.len);
            n = put(buf, cap, n, ".", 1);
        }
        if (!anonymous) n = put(buf, cap, n, f->function.data, f->function.len);
        if (has_source(lines, f)) { /* " (file:line)", " (file)" or " (line N)" */
            n = put(buf, cap, n, " (", 2);
            if (f->flags & TM_FRAME_HAS_FILE) n = put(buf, cap, n, f->file.data, f->file.len);
            if (f->flags & TM_FRAME_HAS_LINE) {
                char line[24];
                int l = snprintf(line, sizeof line, "%s%u", f->flags & TM_FRAME_HAS_FILE ? ":" : "line ",
                                 (unsigned)f->line);
                n = put(buf, cap, n, line, (size_t)l);
            }
            n = put(buf, cap, n, ")", 1);
        }
    } else {
        tm_str lib = frame_library(p, f);
        char addr[24];
        int a = snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)(f->mapping ? f->rel_pc : f->addr));
        n = put(buf, cap, n, addr, (size_t)a);
        if (lib.len) {
            n = put(buf, cap, n, " (", 2);
            n = put(buf, cap, n, lib.data, lib.len);
            n = put(buf, cap, n, ")", 1);
        }
    }
    if (cap) buf[n < cap ? n : cap - 1] = 0;
    return n;
}

size_t tm_frame_label_format(const tm_profile *p, uint32_t frame, char *buf, size_t cap) {
    return label_format(p, frame, p->label_lines, buf, cap);
}

static tm_status label_of(const tm_profile *p, uint32_t frame, bool lines, tm_arena *ar, tm_str *out) {
    const tm_prof_frame *f = &p->frames[frame];
    if (label_is_function(f) && !has_source(lines, f)) {
        *out = f->function;
        return TM_OK;
    }
    size_t len = label_format(p, frame, lines, NULL, 0);
    char *s = tm_arena_alloc(ar, len + 1);
    if (!s) return TM_ERR_NOMEM;
    label_format(p, frame, lines, s, len + 1);
    out->data = (const uint8_t *)s;
    out->len = len;
    return TM_OK;
}

tm_status tm_frame_labels_build(const tm_profile *p, bool lines, tm_frame_labels *out) {
    memset(out, 0, sizeof *out);
    tm_arena_init(&out->arena, p->mem);
    out->of = tm_mem_alloc(p->mem, (p->n_frames + 1) * sizeof *out->of);
    if (!out->of) return TM_ERR_NOMEM;
    out->n = p->n_frames;
    for (size_t i = 0; i < p->n_frames; i++) {
        tm_status st = label_of(p, (uint32_t)i, lines, &out->arena, &out->of[i]);
        if (st != TM_OK) {
            tm_frame_labels_release(p, out);
            return st;
        }
    }
    return TM_OK;
}

void tm_frame_labels_release(const tm_profile *p, tm_frame_labels *l) {
    if (l->of) tm_mem_free(p->mem, l->of, (l->n + 1) * sizeof *l->of);
    tm_arena_release(&l->arena);
    memset(l, 0, sizeof *l);
}

/* ---- periods ---- */

#define GAPS_KEPT 64

typedef struct gap_state {
    int64_t first_ts, last_ts;
    uint64_t seen;   /* samples seen so far */
    uint64_t total;  /* samples of the thread */
    uint32_t kept;
} gap_state;

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t median(int64_t *v, size_t n) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_i64);
    return v[n / 2];
}

tm_status tm_thread_periods(const tm_profile *p, const uint8_t *sel, int64_t fixed_ns, bool within_span,
                            int64_t **per_thread, int64_t *overall, tm_period_sources *how) {
    size_t nt = p->n_threads;
    tm_period_sources ignored;
    if (!how) how = &ignored;
    memset(how, 0, sizeof *how);
    *per_thread = tm_mem_alloc(p->mem, (nt + 1) * sizeof **per_thread);
    if (!*per_thread) return TM_ERR_NOMEM;
    if (fixed_ns > 0 || p->untimed) {
        int64_t v = fixed_ns > 0 ? fixed_ns : 0;
        for (size_t i = 0; i < nt; i++) (*per_thread)[i] = v;
        *overall = v;
        return TM_OK;
    }
    gap_state *gs = tm_mem_alloc(p->mem, (nt + 1) * sizeof *gs);
    int64_t *gaps = tm_mem_alloc(p->mem, (nt + 1) * GAPS_KEPT * sizeof *gaps);
    if (!gs || !gaps) {
        tm_mem_free(p->mem, gs, (nt + 1) * sizeof *gs);
        tm_mem_free(p->mem, gaps, (nt + 1) * GAPS_KEPT * sizeof *gaps);
        tm_thread_periods_free(p, *per_thread);
        *per_thread = NULL;
        return TM_ERR_NOMEM;
    }
    memset(gs, 0, (nt + 1) * sizeof *gs);
    for (size_t i = 0; i < p->n_samples; i++) gs[p->samples[i].thread].total++;
    for (size_t i = 0; i < p->n_samples; i++) {
        const tm_prof_sample *s = &p->samples[i];
        if (sel && !sel[s->thread]) continue;
        gap_state *g = &gs[s->thread];
        if (g->seen) {
            uint64_t gap_no = g->seen - 1, n_gaps = g->total - 1;
            uint64_t stride = (n_gaps + GAPS_KEPT - 1) / GAPS_KEPT;
            if (gap_no % stride == 0 && g->kept < GAPS_KEPT && s->ts > g->last_ts)
                gaps[(size_t)s->thread * GAPS_KEPT + g->kept++] = s->ts - g->last_ts;
        }
        if (!g->seen) g->first_ts = s->ts;
        g->last_ts = s->ts;
        g->seen++;
    }
    /* Overall: the median of every kept gap, gathered at the front. */
    size_t n_all = 0;
    for (size_t t = 0; t < nt; t++) {
        (*per_thread)[t] = median(&gaps[t * GAPS_KEPT], gs[t].kept);
        for (uint32_t k = 0; k < gs[t].kept; k++) gaps[n_all++] = gaps[t * GAPS_KEPT + k];
    }
    *overall = median(gaps, n_all);
    for (size_t t = 0; t < nt; t++) {
        const gap_state *g = &gs[t];
        int64_t *period = &(*per_thread)[t];
        const tm_prof_thread *th = &p->threads[t];
        if (g->seen && th->counted_samples == g->total) { /* measured: no inference, no cap */
            *period = (int64_t)((th->counted_ns + th->counted_samples / 2) / th->counted_samples);
            how->counted++;
            continue;
        }
        if (g->kept < TM_OWN_PERIOD_MIN_GAPS) *period = *overall;
        if (g->seen) ++*(g->kept < TM_OWN_PERIOD_MIN_GAPS ? &how->overall : &how->own);
        if (!within_span || g->seen < 2) continue;
        int64_t mean_gap = (g->last_ts - g->first_ts) / (int64_t)(g->seen - 1);
        if (*period > mean_gap) {
            *period = mean_gap;
            how->capped++;
        }
    }
    /* Every thread measured: the overall period is the mean CPU time of a sample. */
    uint64_t counted_ns = 0, counted_samples = 0;
    size_t with_samples = 0;
    for (size_t t = 0; t < nt; t++) {
        if (!gs[t].seen) continue;
        with_samples++;
        counted_ns += p->threads[t].counted_ns;
        counted_samples += p->threads[t].counted_samples;
    }
    if (with_samples && how->counted == with_samples)
        *overall = (int64_t)((counted_ns + counted_samples / 2) / counted_samples);
    tm_mem_free(p->mem, gs, (nt + 1) * sizeof *gs);
    tm_mem_free(p->mem, gaps, (nt + 1) * GAPS_KEPT * sizeof *gaps);
    return TM_OK;
}

void tm_thread_periods_free(const tm_profile *p, int64_t *per_thread) {
    if (per_thread) tm_mem_free(p->mem, per_thread, (p->n_threads + 1) * sizeof *per_thread);
}

/* ---- stack counts ---- */

static tm_status push_count(const tm_profile *p, tm_stack_counts *c, uint32_t thread, uint32_t stack) {
    TM_TRY(TM_VEC_RESERVE(p->mem, c->v, c->cap, c->n + 1));
    tm_stack_count *e = &c->v[c->n++];
    e->thread = thread;
    e->stack = stack;
    e->count = 0;
    return TM_OK;
}

tm_status tm_stack_counts_build(const tm_profile *p, const uint8_t *sel, int by_thread, tm_stack_counts *out) {
    memset(out, 0, sizeof *out);
    tm_status st = TM_OK;
    if (!by_thread) {
        /* entry[stack] = index + 1 into out->v; 0: not seen yet */
        uint32_t *entry = tm_mem_alloc(p->mem, (p->n_stacks + 1) * sizeof *entry);
        if (!entry) return TM_ERR_NOMEM;
        memset(entry, 0, (p->n_stacks + 1) * sizeof *entry);
        for (size_t i = 0; i < p->n_samples && st == TM_OK; i++) {
            const tm_prof_sample *s = &p->samples[i];
            if (sel && !sel[s->thread]) continue;
            if (!entry[s->stack]) {
                st = push_count(p, out, TM_ABSENT, s->stack);
                entry[s->stack] = (uint32_t)out->n;
            }
            if (st == TM_OK) out->v[entry[s->stack] - 1].count += tm_profile_weight(p, i);
        }
        tm_mem_free(p->mem, entry, (p->n_stacks + 1) * sizeof *entry);
    } else {
        tm_u64map entry = {0};
        for (size_t i = 0; i < p->n_samples && st == TM_OK; i++) {
            const tm_prof_sample *s = &p->samples[i];
            if (sel && !sel[s->thread]) continue;
            uint64_t key = (uint64_t)s->thread << 32 | s->stack;
            uint32_t e = tm_u64map_get(&entry, key);
            if (e == TM_ABSENT) {
                e = (uint32_t)out->n;
                st = push_count(p, out, s->thread, s->stack);
                if (st == TM_OK) st = tm_u64map_put(p->mem, &entry, key, e);
            }
            if (st == TM_OK) out->v[e].count += tm_profile_weight(p, i);
        }
        tm_u64map_free(p->mem, &entry);
    }
    if (st != TM_OK) tm_stack_counts_release(p, out);
    return st;
}

void tm_stack_counts_release(const tm_profile *p, tm_stack_counts *c) {
    tm_mem_free(p->mem, c->v, c->cap * sizeof *c->v);
    memset(c, 0, sizeof *c);
}
