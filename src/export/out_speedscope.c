/*
 * out_speedscope.c — profile model -> speedscope's file format
 * (https://www.speedscope.app/file-format-schema.json, the JSON schema
 * shipped in the speedscope npm package as
 * dist/release/file-format-schema.json).
 *
 * Layout: "shared.frames" holds one entry per distinct (label, file) pair
 * of the frames the selected samples use: name is the frame label
 * (aggregate.h), file the path of the frame's library (mapping) when
 * known. "profiles" holds one "sampled" profile per selected thread that
 * has samples, in thread order, named "LABEL (tid N)"; each sample is an
 * array of shared frame indices, root first.
 *
 * Timing: unit "nanoseconds" on the trace's clock. startValue is the
 * thread's first sample time and endValue its last plus the thread's
 * period P (tm_thread_periods, or the caller's period_ns). A sample weighs
 * the time to the next sample, at most P; when the gap is longer, an empty
 * sample [] weighs the rest, so idle time shows as a hole and the weights
 * add up to endValue - startValue exactly (samples closer than P weigh
 * less than P). The last sample weighs P. With no period to infer (no
 * thread has two distinct sample times) P is FALLBACK_PERIOD_NS.
 *
 * Folded input (p->untimed) has no time: unit "none", each sample weighs
 * its count, startValue 0, endValue the total count. Memory values, and
 * off-CPU and wall-clock time (tm_profile_value_view), are weighed the same
 * way, in bytes, objects or nanoseconds.
 *
 * Each distinct stack is rendered to JSON once; samples copy it.
 */
#include "profile/aggregate.h"  /* tm_thread_select, tm_thread_periods, tm_frame_labels */
#include "wire/json_write.h" /* tm_jw */

#define FALLBACK_PERIOD_NS 1000000 /* 1 ms */

typedef struct shared_frame {
    tm_str name, file;
    uint32_t line; /* 0: none */
} shared_frame;

typedef struct writer {
    const tm_profile *p;
    tm_value value;        /* what the samples weigh (TM_VALUE_SAMPLES: CPU) */
    tm_mem *mem;
    tm_arena ar;           /* stack JSON, thread names */
    uint8_t *sel;          /* selected threads */
    int64_t *period;       /* per thread */
    size_t *order;         /* sample indices grouped by thread, in time order */
    size_t *thread_start;  /* order[thread_start[t] .. thread_start[t + 1]) */
    uint32_t *shared_of;   /* frame -> shared index; TM_ABSENT: unused */
    shared_frame *shared;  size_t n_shared;
    uint32_t *slots;       size_t cap_slots; /* shared index + 1 by (name, file) hash */
    tm_str *stack_json;    /* "[i,j,k]" of each used stack */
    tm_frame_labels labels;
    int have_labels;
} writer;

static tm_str frame_file(const tm_profile *p, const tm_prof_frame *f) {
    if (f->flags & TM_FRAME_HAS_FILE) return f->file;
    if (f->flags & TM_FRAME_HAS_PACKAGE) return f->package;
    if (f->mapping) return p->mappings[f->mapping - 1].path;
    tm_str none = {0};
    return none;
}

static void writer_release(writer *w) {
    const tm_profile *p = w->p;
    tm_thread_selection_free(p, w->sel);
    tm_thread_periods_free(p, w->period);
    tm_mem_free(w->mem, w->order, (p->n_samples + 1) * sizeof *w->order);
    tm_mem_free(w->mem, w->thread_start, (p->n_threads + 2) * sizeof *w->thread_start);
    tm_mem_free(w->mem, w->shared_of, (p->n_frames + 1) * sizeof *w->shared_of);
    tm_mem_free(w->mem, w->shared, (p->n_frames + 1) * sizeof *w->shared);
    tm_mem_free(w->mem, w->slots, w->cap_slots * sizeof *w->slots);
    tm_mem_free(w->mem, w->stack_json, (p->n_stacks + 1) * sizeof *w->stack_json);
    if (w->have_labels) tm_frame_labels_release(p, &w->labels);
    tm_arena_release(&w->ar);
}

/* Groups the selected samples by thread (a stable counting sort, so each
 * thread's samples stay in time order) and marks the stacks they use
 * (stack_json[s].len = 1 as a flag until the stacks are rendered). */
static tm_status group_samples(writer *w) {
    const tm_profile *p = w->p;
    size_t nt = p->n_threads;
    w->order = tm_mem_alloc(w->mem, (p->n_samples + 1) * sizeof *w->order);
    w->thread_start = tm_mem_alloc(w->mem, (nt + 2) * sizeof *w->thread_start);
    w->stack_json = tm_mem_alloc(w->mem, (p->n_stacks + 1) * sizeof *w->stack_json);
    if (!w->order || !w->thread_start || !w->stack_json) return TM_ERR_NOMEM;
    memset(w->thread_start, 0, (nt + 2) * sizeof *w->thread_start);
    memset(w->stack_json, 0, (p->n_stacks + 1) * sizeof *w->stack_json);
    for (size_t i = 0; i < p->n_samples; i++) {
        const tm_prof_sample *s = &p->samples[i];
        if (!w->sel[s->thread]) continue;
        w->thread_start[s->thread + 2]++;
        w->stack_json[s->stack].len = 1;
    }
    /* thread_start[t + 2] counts become the starts of t + 1 after the sums,
     * and the fill below advances thread_start[t + 1] to the end of t. */
    for (size_t t = 2; t < nt + 2; t++) w->thread_start[t] += w->thread_start[t - 1];
    for (size_t i = 0; i < p->n_samples; i++) {
        const tm_prof_sample *s = &p->samples[i];
        if (w->sel[s->thread]) w->order[w->thread_start[s->thread + 1]++] = i;
    }
    return TM_OK;
}

static uint64_t shared_hash(tm_str name, tm_str file) { return tm_hash_bytes(tm_hash_bytes(1, name), file); }

/* Numbers the distinct (label, file) pairs of the frames used, in frame
 * order. */
static tm_status number_frames(writer *w) {
    const tm_profile *p = w->p;
    size_t nf = p->n_frames;
    TM_TRY(tm_frame_labels_build(p, false, &w->labels));
    w->have_labels = 1;
    w->shared_of = tm_mem_alloc(w->mem, (nf + 1) * sizeof *w->shared_of);
    w->shared = tm_mem_alloc(w->mem, (nf + 1) * sizeof *w->shared);
    w->cap_slots = 64;
    while (w->cap_slots < 2 * nf) w->cap_slots *= 2;
    w->slots = tm_mem_alloc(w->mem, w->cap_slots * sizeof *w->slots);
    if (!w->shared_of || !w->shared || !w->slots) return TM_ERR_NOMEM;
    memset(w->slots, 0, w->cap_slots * sizeof *w->slots);
    for (size_t f = 0; f < nf; f++) w->shared_of[f] = TM_ABSENT;
    for (size_t s = 0; s < p->n_stacks; s++) {
        if (!w->stack_json[s].len) continue;
        const tm_prof_stack *sk = &p->stacks[s];
        for (uint32_t j = 0; j < sk->len; j++) w->shared_of[p->frame_ids[sk->off + j]] = 0;
    }
    for (size_t f = 0; f < nf; f++) {
        if (w->shared_of[f] == TM_ABSENT) continue;
        const tm_prof_frame *pf = &p->frames[f];
        shared_frame key = {w->labels.of[f], frame_file(p, pf), pf->flags & TM_FRAME_HAS_LINE ? pf->line : 0};
        size_t mask = w->cap_slots - 1, i = (size_t)(shared_hash(key.name, key.file) ^ key.line) & mask;
        while (w->slots[i]) {
            const shared_frame *e = &w->shared[w->slots[i] - 1];
            if (tm_bytes_eq(e->name, key.name) && tm_bytes_eq(e->file, key.file) && e->line == key.line) break;
            i = (i + 1) & mask;
        }
        if (!w->slots[i]) {
            w->shared[w->n_shared] = key;
            w->slots[i] = (uint32_t)++w->n_shared;
        }
        w->shared_of[f] = w->slots[i] - 1;
    }
    return TM_OK;
}

/* Renders each used stack as "[root,...,leaf]" of shared indices. */
static tm_status render_stacks(writer *w) {
    const tm_profile *p = w->p;
    for (size_t s = 0; s < p->n_stacks; s++) {
        if (!w->stack_json[s].len) continue;
        const tm_prof_stack *sk = &p->stacks[s];
        char *d = tm_arena_alloc(&w->ar, 2 + (size_t)sk->len * 11);
        if (!d) return TM_ERR_NOMEM;
        w->stack_json[s].data = (const uint8_t *)d;
        *d++ = '[';
        for (uint32_t j = sk->len; j-- > 0;) {
            d = tm_put_u64(d, w->shared_of[p->frame_ids[sk->off + j]]);
            if (j) *d++ = ',';
        }
        *d++ = ']';
        w->stack_json[s].len = (size_t)(d - (const char *)w->stack_json[s].data);
    }
    return TM_OK;
}

static void write_frames(writer *w, tm_jw *jw) {
    tm_jw_lit(jw, "\"shared\":{\"frames\":[");
    for (size_t i = 0; i < w->n_shared; i++) {
        if (i) tm_jw_char(jw, ',');
        tm_jw_lit(jw, "{\"name\":");
        tm_jw_str(jw, w->shared[i].name);
        if (w->shared[i].file.len) {
            tm_jw_lit(jw, ",\"file\":");
            tm_jw_str(jw, w->shared[i].file);
        }
        if (w->shared[i].line) {
            tm_jw_lit(jw, ",\"line\":");
            tm_jw_u64(jw, w->shared[i].line);
        }
        tm_jw_char(jw, '}');
    }
    tm_jw_lit(jw, "]}");
}

static void write_u64_item(tm_jw *jw, uint64_t v, int first) {
    char *d = tm_jw_reserve(jw, 24);
    if (!first) *d++ = ',';
    tm_jw_commit(jw, tm_put_u64(d, v));
}

/* One sampled profile: the samples of thread t, order[lo..hi). */
static tm_status write_profile(writer *w, tm_jw *jw, uint32_t t, size_t lo, size_t hi) {
    const tm_profile *p = w->p;
    char buf[32];
    tm_str label = tm_thread_label(p, t, buf);
    char *name = tm_arena_alloc(&w->ar, label.len + 32);
    if (!name) return TM_ERR_NOMEM;
    memcpy(name, label.data, label.len);
    int n = snprintf(name + label.len, 32, " (tid %lld)", (long long)p->threads[t].tid);
    tm_str full = {(const uint8_t *)name, label.len + (size_t)n};
    tm_jw_lit(jw, "{\"type\":\"sampled\",\"name\":");
    tm_jw_str(jw, full);
    const int64_t period = w->period[t] > 0 ? w->period[t] : FALLBACK_PERIOD_NS;
    int64_t start = 0, end = 0;
    if (p->untimed) {
        for (size_t k = lo; k < hi; k++) end += (int64_t)tm_profile_weight(p, w->order[k]);
        if (w->value == TM_VALUE_ALLOC_SPACE || w->value == TM_VALUE_INUSE_SPACE) tm_jw_lit(jw, ",\"unit\":\"bytes\"");
        else if (w->value == TM_VALUE_OFF_CPU || w->value == TM_VALUE_WALL) tm_jw_lit(jw, ",\"unit\":\"nanoseconds\"");
        else tm_jw_lit(jw, ",\"unit\":\"none\"");
    } else {
        start = p->samples[w->order[lo]].ts;
        end = p->samples[w->order[hi - 1]].ts + period;
        tm_jw_lit(jw, ",\"unit\":\"nanoseconds\"");
    }
    tm_jw_lit(jw, ",\"startValue\":");
    tm_jw_i64(jw, start);
    tm_jw_lit(jw, ",\"endValue\":");
    tm_jw_i64(jw, end);
    tm_jw_lit(jw, ",\"samples\":[");
    for (size_t k = lo; k < hi; k++) {
        const tm_prof_sample *s = &p->samples[w->order[k]];
        if (k > lo) tm_jw_char(jw, ',');
        tm_jw_raw(jw, w->stack_json[s->stack].data, w->stack_json[s->stack].len);
        if (!p->untimed && k + 1 < hi && p->samples[w->order[k + 1]].ts - s->ts > period) tm_jw_lit(jw, ",[]");
    }
    tm_jw_lit(jw, "],\"weights\":[");
    for (size_t k = lo; k < hi; k++) {
        if (p->untimed) {
            write_u64_item(jw, tm_profile_weight(p, w->order[k]), k == lo);
            continue;
        }
        int64_t gap = k + 1 < hi ? p->samples[w->order[k + 1]].ts - p->samples[w->order[k]].ts : period;
        write_u64_item(jw, (uint64_t)(gap < period ? gap : period), k == lo);
        if (gap > period) write_u64_item(jw, (uint64_t)(gap - period), 0);
    }
    tm_jw_lit(jw, "]}");
    return TM_OK;
}

tm_status tm_write_speedscope(const tm_trace *t, const tm_speedscope_options *opts, const tm_sink *out,
                              tm_error *err) {
    if (!t || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_speedscope: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_speedscope_options", err));
    TM_TRY(TM_CHECK_RESERVED(opts ? &opts->threads : NULL, "tm_thread_filter", err));
    TM_TRY(tm_check_period(opts ? opts->period_ns : 0, "speedscope", err));
    tm_profile view;
    tm_value value;
    TM_TRY(tm_profile_value_view(tm_trace_profile(t), opts ? opts->value : TM_VALUE_DEFAULT, &view, &value, err));
    const tm_profile *p = &view;
    writer w;
    memset(&w, 0, sizeof w);
    w.value = value;
    w.p = p;
    w.mem = p->mem;
    tm_arena_init(&w.ar, p->mem);
    tm_status st = tm_thread_select(p, opts ? &opts->threads : NULL, &w.sel, err);
    if (st != TM_OK) {
        tm_arena_release(&w.ar);
        tm_profile_value_view_release(tm_trace_profile(t), &view);
        return st;
    }
    int64_t overall;
    st = tm_thread_periods(p, w.sel, opts ? opts->period_ns : 0, false, &w.period, &overall, NULL);
    if (st == TM_OK) st = group_samples(&w);
    if (st == TM_OK) st = number_frames(&w);
    if (st == TM_OK) st = render_stacks(&w);
    tm_jw *jw = st == TM_OK ? tm_mem_alloc(w.mem, sizeof *jw) : NULL;
    if (!jw) st = TM_ERR_NOMEM;
    if (st == TM_OK) {
        tm_jw_init(jw, out);
        tm_jw_lit(jw, "{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",\"exporter\":\"tracemill\",\"name\":");
        char name[64]; /* the default name carries the peak RSS the trace's memory readings show */
        uint64_t peak = tm_profile_peak_rss(p);
        snprintf(name, sizeof name, peak ? "tracemill (peak RSS %.1f MB)" : "tracemill", (double)peak / 1048576.0);
        tm_jw_cstr(jw, opts && opts->name ? opts->name : name);
        tm_jw_lit(jw, ",\"activeProfileIndex\":0,");
        write_frames(&w, jw);
        tm_jw_lit(jw, ",\"profiles\":[");
        int first = 1;
        for (uint32_t th = 0; th < p->n_threads && st == TM_OK; th++) {
            size_t lo = w.thread_start[th], hi = w.thread_start[th + 1];
            if (lo == hi) continue;
            if (!first) tm_jw_char(jw, ',');
            first = 0;
            st = write_profile(&w, jw, th, lo, hi);
        }
        tm_jw_lit(jw, "]}\n");
        tm_status wst = tm_jw_finish(jw);
        if (st == TM_OK && wst != TM_OK) st = tm_fail(err, wst, 0, NULL, "writing speedscope JSON failed");
        else if (st != TM_OK) st = tm_fail(err, st, 0, NULL, "out of memory");
    } else {
        st = tm_fail(err, st, 0, NULL, "out of memory");
    }
    tm_mem_free(w.mem, jw, sizeof *jw);
    writer_release(&w);
    tm_profile_value_view_release(tm_trace_profile(t), &view);
    return tm_trace_budget_status(t, st, err);
}
