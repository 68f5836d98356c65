/*
 * test_trace.c — the Perfetto trace model in default mode (TM_MODE_DEFAULT):
 * tm_trace_parse turns traces built with trace_builder.h, and the Trace
 * Processor probe traces in tests/fixtures/perfetto-probes, into the
 * profile model (tm_trace_profile), and every expected value comes from
 * what Trace Processor does and from the README's "Default mode and
 * `--compat relay`".
 *
 * Covered: packed vs unpacked repeated fields; incremental state (clears,
 * iid reuse, first entry wins); data loss (previous_packet_dropped, skipped
 * SEQ_NEEDS_INCREMENTAL_STATE packets, probe p3); PerfSample and
 * StreamingProfilePacket timing and threads (probes p1, p8); clocks (probes
 * p5, p6, per-packet clock ids, primary_trace_clock, Unix time);
 * compressed_packets (probe p4 vs p2); thread names; frame resolution
 * (address-only, Java, deep stacks, paths, dedup, unresolvable iids);
 * runs of usual PerfSample packets (tm_pf_next_run) against the same
 * packets read one by one.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

#define CLK_REALTIME TM_PF_BUILTIN_CLOCK_REALTIME
#define CLK_MONOTONIC TM_PF_BUILTIN_CLOCK_MONOTONIC
#define CLK_BOOTTIME TM_PF_BUILTIN_CLOCK_BOOTTIME

/* ---- text buffer ---- */

static void mb_printf(tu_membuf *m, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    cr_assert(n >= 0 && (size_t)n < sizeof tmp, "mb_printf overflow");
    cr_assert_eq(tu_membuf_write(m, tmp, (size_t)n), 0);
}

/* ---- parsing helpers ---- */

static tm_trace *parse_bytes(const void *data, size_t len) {
    tm_trace *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_options opts;
    memset(&opts, 0, sizeof opts);
    opts.mode = TM_MODE_DEFAULT;
    tm_status st = tm_trace_parse(data, len, &opts, &t, &err);
    cr_assert_eq(st, TM_OK, "tm_trace_parse: %s at byte %llu: %s", tm_status_str(st),
                 (unsigned long long)err.offset, err.message);
    cr_assert_not_null(t);
    return t;
}

static tm_trace *parse(const tb_buf *b) { return parse_bytes(b->data, b->len); }

typedef struct file_buf {
    char *data;
    size_t len;
} file_buf;

static file_buf load_probe(const char *probe) {
    char path[512];
    snprintf(path, sizeof path, "%s/perfetto-probes/%s/trace.pftrace", TM_FIXTURES, probe);
    file_buf fb = {NULL, 0};
    fb.data = tu_read_file(path, &fb.len);
    cr_assert_not_null(fb.data, "cannot read %s", path);
    cr_assert_gt(fb.len, 0, "%s is empty", path);
    return fb;
}

static int str_is(tm_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

static const tm_prof_stack *stack_of(const tm_profile *p, size_t sample) {
    cr_assert_lt(sample, p->n_samples);
    cr_assert_lt(p->samples[sample].stack, p->n_stacks);
    return &p->stacks[p->samples[sample].stack];
}

/* Frame `depth` of a sample's stack, counted from the leaf. */
static const tm_prof_frame *frame_at(const tm_profile *p, size_t sample, uint32_t depth) {
    const tm_prof_stack *s = stack_of(p, sample);
    cr_assert_lt(depth, s->len, "sample %zu has %u frames, wanted depth %u", sample, s->len, depth);
    return &p->frames[p->frame_ids[s->off + depth]];
}

static const tm_prof_frame *leaf(const tm_profile *p, size_t sample) { return frame_at(p, sample, 0); }

static const tm_prof_thread *thread_of_sample(const tm_profile *p, size_t sample) {
    cr_assert_lt(p->samples[sample].thread, p->n_threads);
    return &p->threads[p->samples[sample].thread];
}

static const tm_prof_thread *find_thread(const tm_profile *p, int64_t tid) {
    for (size_t i = 0; i < p->n_threads; i++)
        if (p->threads[i].tid == tid) return &p->threads[i];
    cr_assert_fail("no thread with tid %lld", (long long)tid);
    return NULL;
}

static void assert_sample(const tm_profile *p, size_t i, int64_t ts, int64_t tid, const char *leaf_fn) {
    cr_assert_lt(i, p->n_samples, "only %zu samples", p->n_samples);
    cr_assert_eq(p->samples[i].ts, ts, "sample %zu: ts %lld, expected %lld", i,
                 (long long)p->samples[i].ts, (long long)ts);
    cr_assert_eq(thread_of_sample(p, i)->tid, tid, "sample %zu: tid %lld, expected %lld", i,
                 (long long)thread_of_sample(p, i)->tid, (long long)tid);
    if (leaf_fn) {
        const tm_prof_frame *f = leaf(p, i);
        cr_assert(f->flags & TM_FRAME_HAS_FUNCTION, "sample %zu: leaf has no function", i);
        cr_assert(str_is(f->function, leaf_fn), "sample %zu: leaf %.*s, expected %s", i,
                  TM_STR_ARGS(f->function), leaf_fn);
    }
}

/* A canonical text form of the whole model, for "identical profile" checks. */
static void dump_frame(tu_membuf *m, const tm_profile *p, const tm_prof_frame *f) {
    mb_printf(m, "  frame fn=" TM_STR_FMT " mod=" TM_STR_FMT " pkg=" TM_STR_FMT " addr=%llx rel=%llx fl=%u",
              TM_STR_ARGS(f->function), TM_STR_ARGS(f->module), TM_STR_ARGS(f->package),
              (unsigned long long)f->addr, (unsigned long long)f->rel_pc, f->flags);
    if (f->mapping) {
        const tm_prof_mapping *mp = &p->mappings[f->mapping - 1];
        mb_printf(m, " map=" TM_STR_FMT " %llx-%llx bias=%llx fl=%u build=", TM_STR_ARGS(mp->path),
                  (unsigned long long)mp->start, (unsigned long long)mp->end,
                  (unsigned long long)mp->load_bias, mp->flags);
        for (size_t i = 0; i < mp->build_id.len; i++) mb_printf(m, "%02x", mp->build_id.data[i]);
    }
    mb_printf(m, "\n");
}

static void dump_profile(const tm_profile *p, tu_membuf *m) {
    mb_printf(m, "frames=%zu stacks=%zu mappings=%zu threads=%zu samples=%zu\n", p->n_frames, p->n_stacks,
              p->n_mappings, p->n_threads, p->n_samples);
    for (size_t i = 0; i < p->n_samples; i++) {
        const tm_prof_thread *th = thread_of_sample(p, i);
        const tm_prof_stack *s = stack_of(p, i);
        mb_printf(m, "sample ts=%lld tid=%lld pid=%lld name=" TM_STR_FMT " prio=%u stack=%u len=%u\n",
                  (long long)p->samples[i].ts, (long long)th->tid, (long long)th->pid, TM_STR_ARGS(th->name),
                  th->name_prio, p->samples[i].stack, s->len);
        for (uint32_t j = 0; j < s->len; j++) dump_frame(m, p, &p->frames[p->frame_ids[s->off + j]]);
    }
    for (size_t i = 0; i < p->n_threads; i++)
        mb_printf(m, "thread tid=%lld pid=%lld name=" TM_STR_FMT "\n", (long long)p->threads[i].tid,
                  (long long)p->threads[i].pid, TM_STR_ARGS(p->threads[i].name));
}

static void assert_same_profile(const tm_trace *a, const tm_trace *b) {
    tu_membuf da = {0}, db = {0};
    dump_profile(tm_trace_profile(a), &da);
    dump_profile(tm_trace_profile(b), &db);
    cr_assert(da.len == db.len && memcmp(da.data, db.data, da.len) == 0,
              "profiles differ:\n--- first\n%s--- second\n%s", da.data, db.data);
    tu_membuf_free(&da);
    tu_membuf_free(&db);
}

/* ---- trace-building helpers (on top of trace_builder.h) ---- */

static void fn_name(tb_buf *t, uint64_t iid, const char *s) {
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, iid, s, strlen(s));
}

static void path_str(tb_buf *t, uint64_t iid, const char *s) {
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, iid, s, strlen(s));
}

static void callstack1(tb_buf *t, uint64_t iid, uint64_t frame) { tb_callstack(t, iid, &frame, 1, 0); }

/* Mapping whose path_string_ids are written packed or one by one. */
static void mapping_paths(tb_buf *t, uint64_t iid, uint64_t start, uint64_t end, const uint64_t *paths,
                          size_t n, int packed) {
    size_t m = tb_open(t, TM_PF_INTERNED_MAPPINGS);
    tb_uint(t, TM_PF_INTERNED_IID, iid);
    tb_uint(t, TM_PF_MAPPING_START, start);
    tb_uint(t, TM_PF_MAPPING_END, end);
    if (packed) tb_packed(t, TM_PF_MAPPING_PATH_STRING_IDS, paths, n);
    else
        for (size_t i = 0; i < n; i++) tb_uint(t, TM_PF_MAPPING_PATH_STRING_IDS, paths[i]);
    tb_close(t, m);
}

static void perf_body(tb_buf *t, uint32_t pid, uint32_t tid, uint64_t cs) {
    size_t s = tb_open(t, TM_PF_PACKET_PERF_SAMPLE);
    tb_uint(t, TM_PF_PERF_SAMPLE_PID, pid);
    tb_uint(t, TM_PF_PERF_SAMPLE_TID, tid);
    tb_uint(t, TM_PF_PERF_SAMPLE_CALLSTACK_IID, cs);
    tb_close(t, s);
}

/* StreamingProfilePacket; unpacked fields are interleaved (cs, delta, cs, ...). */
static void streaming_body(tb_buf *t, const uint64_t *cs, size_t n_cs, const uint64_t *dt, size_t n_dt,
                           int packed) {
    size_t s = tb_open(t, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    if (packed) {
        tb_packed(t, TM_PF_STREAMING_CALLSTACK_IID, cs, n_cs);
        tb_packed(t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt, n_dt);
    } else {
        for (size_t i = 0; i < n_cs || i < n_dt; i++) {
            if (i < n_cs) tb_uint(t, TM_PF_STREAMING_CALLSTACK_IID, cs[i]);
            if (i < n_dt) tb_uint(t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt[i]);
        }
    }
    tb_close(t, s);
}

/* A whole StreamingProfilePacket packet (no timestamp unless ts != TB_NO_TS). */
static void streaming_packet(tb_buf *t, uint32_t seq, uint64_t ts, uint32_t flags, const uint64_t *cs,
                             size_t n_cs, const uint64_t *dt, size_t n_dt) {
    size_t p = tb_packet_open(t, seq, ts, flags);
    streaming_body(t, cs, n_cs, dt, n_dt, 1);
    tb_close(t, p);
}

/* ThreadDescriptor body; ref_us < 0 leaves reference_timestamp_us out. */
static void thread_desc_body(tb_buf *t, int64_t pid, int64_t tid, int64_t ref_us, const char *name) {
    size_t d = tb_open(t, TM_PF_PACKET_THREAD_DESCRIPTOR);
    tb_uint(t, TM_PF_THREAD_DESC_PID, (uint64_t)pid);
    tb_uint(t, TM_PF_THREAD_DESC_TID, (uint64_t)tid);
    if (name) tb_str(t, TM_PF_THREAD_DESC_THREAD_NAME, name);
    if (ref_us >= 0) tb_uint(t, TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US, (uint64_t)ref_us);
    tb_close(t, d);
}

/* A packet on seq that clears the state and interns function iid 1 = fn,
 * frame 1 (no mapping, rel_pc 1) and callstack 1 = [frame 1]. */
static void clear_with_one_frame(tb_buf *t, uint32_t seq, uint64_t ts, const char *fn) {
    size_t p = tb_packet_open(t, seq, ts, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    fn_name(t, 1, fn);
    tb_frame(t, 1, 1, 0, 1);
    callstack1(t, 1, 1);
    tb_close(t, i);
    tb_close(t, p);
}

/* ==================================================================== */
/* Packed vs unpacked repeated fields (proto2 parsers accept both).      */
/* ==================================================================== */

static void build_packing_trace(tb_buf *t, int packed) {
    static const uint64_t segs[] = {1, 2, 3};
    for (uint32_t seq = 1; seq <= 2; seq++) {
        size_t p = tb_packet_open(t, seq, 100, TB_SEQ_CLEARED);
        if (seq == 2) thread_desc_body(t, 10, 12, 1, NULL); /* reference time 1 µs */
        size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
        fn_name(t, 1, "main");
        fn_name(t, 2, "work");
        path_str(t, 1, "system");
        path_str(t, 2, "lib64");
        path_str(t, 3, "libfoo.so");
        mapping_paths(t, 1, 0x1000, 0x9000, segs, 3, packed);
        tb_frame(t, 1, 1, 1, 0x10);
        tb_frame(t, 2, 2, 1, 0x20);
        const uint64_t cs1[] = {1, 2}; /* root first: main -> work */
        tb_callstack(t, 1, cs1, 2, packed);
        tb_callstack(t, 2, cs1, 1, packed);
        tb_close(t, i);
        tb_close(t, p);
    }
    size_t p = tb_packet_open(t, 1, 5000, TB_SEQ_NEEDS);
    perf_body(t, 10, 11, 1);
    tb_close(t, p);
    const uint64_t cs[] = {1, 2, 1}, dt[] = {1, 2, 3};
    p = tb_packet_open(t, 2, 200, TB_SEQ_NEEDS);
    streaming_body(t, cs, 3, dt, 3, packed);
    tb_close(t, p);
}

Test(trace_wire, packed_and_unpacked_repeated_fields_give_identical_profiles) {
    tb_buf a = {0}, b = {0};
    build_packing_trace(&a, 1);
    build_packing_trace(&b, 0);
    cr_assert(a.len != b.len || memcmp(a.data, b.data, a.len) != 0, "the encodings must differ");
    tm_trace *ta = parse(&a), *tb = parse(&b);
    const tm_profile *p = tm_trace_profile(ta);
    /* Streaming: ref 1 µs + cumulative deltas 1, 2, 3 µs; perf at 5000. */
    cr_assert_eq(p->n_samples, 4);
    assert_sample(p, 0, 2000, 12, "work");
    assert_sample(p, 1, 4000, 12, "main");
    assert_sample(p, 2, 5000, 11, "work");
    assert_sample(p, 3, 7000, 12, "work");
    cr_assert_eq(stack_of(p, 0)->len, 2);
    cr_assert(str_is(frame_at(p, 0, 1)->function, "main"));
    const tm_prof_frame *f = leaf(p, 0);
    cr_assert(str_is(f->package, "system/lib64/libfoo.so"), "package %.*s", TM_STR_ARGS(f->package));
    cr_assert_eq(f->addr, 0x1020);
    assert_same_profile(ta, tb);
    tm_trace_free(ta);
    tm_trace_free(tb);
    tb_free(&a);
    tb_free(&b);
}

/* ==================================================================== */
/* Incremental state.                                                   */
/* ==================================================================== */

/* Three generations on sequence 1; legacy = use TracePacket field 41
 * (incremental_state_cleared) instead of SEQ_INCREMENTAL_STATE_CLEARED. */
static void build_reset_trace(tb_buf *t, int legacy) {
    const char *names[] = {"alpha", "beta"};
    for (int g = 0; g < 3; g++) {
        size_t p = tb_packet_open(t, 1, 100 + 200 * (uint64_t)g, legacy ? 0 : TB_SEQ_CLEARED);
        if (legacy) tb_uint(t, TM_PF_PACKET_INCREMENTAL_STATE_CLEARED, 1);
        if (g < 2) { /* the third clear interns nothing */
            size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
            fn_name(t, 1, names[g]);
            tb_frame(t, 1, 1, 0, 1 + (uint64_t)g);
            callstack1(t, 1, 1);
            tb_close(t, i);
        }
        perf_body(t, 7, 7, 1);
        tb_close(t, p);
        if (g < 2) { /* a sample between this clear and the next */
            p = tb_packet_open(t, 1, 200 + 200 * (uint64_t)g, TB_SEQ_NEEDS);
            perf_body(t, 7, 7, 1);
            tb_close(t, p);
        }
    }
}

static void check_reset_trace(int legacy) {
    tb_buf b = {0};
    build_reset_trace(&b, legacy);
    tm_trace *t = parse(&b);
    const tm_profile *p = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(st->incremental_resets, 3);
    cr_assert_eq(p->n_samples, 4);
    assert_sample(p, 0, 100, 7, "alpha");
    assert_sample(p, 1, 200, 7, "alpha"); /* resolved against generation 1 */
    assert_sample(p, 2, 300, 7, "beta");  /* iid 1 reused after the reset */
    assert_sample(p, 3, 400, 7, "beta");
    cr_assert_neq(p->samples[1].stack, p->samples[2].stack);
    cr_assert_eq(leaf(p, 1)->addr, 1);
    cr_assert_eq(leaf(p, 2)->addr, 2);
    /* The third clear emptied the tables: callstack iid 1 no longer resolves. */
    cr_assert_eq(st->dropped_unresolved, 1);
    cr_assert_eq(st->perf_samples, 5);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_incremental, seq_incremental_state_cleared_resets_tables) { check_reset_trace(0); }

Test(trace_incremental, legacy_incremental_state_cleared_field_41_resets_tables) { check_reset_trace(1); }

/* A stack the producer cut at its depth limit (unwind_error
 * MAX_FRAMES_EXCEEDED, as `record --max-depth` writes it) is kept and
 * counted. */
Test(trace_wire, perf_samples_with_cut_stacks_are_counted) {
    tb_buf b = {0};
    clear_with_one_frame(&b, 1, 100, "deep");
    for (uint64_t k = 0; k < 3; k++) {
        size_t p = tb_packet_open(&b, 1, 200 + k, TB_SEQ_NEEDS);
        size_t s = tb_open(&b, TM_PF_PACKET_PERF_SAMPLE);
        tb_uint(&b, TM_PF_PERF_SAMPLE_PID, 7);
        tb_uint(&b, TM_PF_PERF_SAMPLE_TID, 7);
        tb_uint(&b, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
        if (k < 2) tb_uint(&b, TM_PF_PERF_SAMPLE_UNWIND_ERROR, k == 0 ? TM_PF_UNWIND_ERROR_MAX_FRAMES_EXCEEDED : 1);
        tb_close(&b, s);
        tb_close(&b, p);
    }
    tm_trace *t = parse(&b);
    cr_assert_eq(tm_trace_profile(t)->n_samples, 3);
    cr_assert_eq(tm_trace_get_stats(t)->perf_samples_truncated, 1);
    tm_trace_free(t);
    tb_free(&b);
}

/* A frame iid far past the others is kept apart until enough entries come
 * to make the table direct-indexed that far; it must still be found. */
Test(trace_incremental, an_iid_far_past_the_others_is_found_after_the_table_grows) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 100, TB_SEQ_CLEARED);
    size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "far");
    fn_name(&b, 2, "near");
    tb_frame(&b, 5000, 1, 0, 0x10);
    for (uint64_t f = 1; f <= 1100; f++) tb_frame(&b, f, 2, 0, 0x20);
    tb_frame(&b, 4200, 2, 0, 0x30); /* grows the direct part past 5000 */
    callstack1(&b, 1, 5000);
    tb_close(&b, i);
    perf_body(&b, 7, 7, 1);
    tb_close(&b, p);
    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(tm_trace_get_stats(t)->dropped_unresolved, 0);
    cr_assert_eq(pr->n_samples, 1);
    assert_sample(pr, 0, 100, 7, "far");
    tm_trace_free(t);
    tb_free(&b);
}

/* Interned data for the carry-over trace: function 1 "alpha" and 2 fn2,
 * mapping 1 at path lib, frame 1 (alpha in mapping 1) and frame 2 (fn2)
 * when `frames` has bit 1 and 2, callstack 1 = [frame 1, frame 2] (root
 * first) and callstack 2 = [frame 2] when `rest`. */
static void carry_interned(tb_buf *t, uint64_t ts, uint32_t flags, const char *fn2, const char *lib, int frames,
                           int rest) {
    size_t p = tb_packet_open(t, 1, ts, flags);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    if (rest) {
        static const uint64_t seg = 1, cs1[] = {1, 2};
        fn_name(t, 1, "alpha");
        fn_name(t, 2, fn2);
        path_str(t, 1, lib);
        mapping_paths(t, 1, 0x1000, 0x9000, &seg, 1, 0);
        tb_callstack(t, 1, cs1, 2, 0);
        callstack1(t, 2, 2);
    }
    if (frames & 1) tb_frame(t, 1, 1, 1, 0x10);
    if (frames & 2) tb_frame(t, 2, 2, 0, 0x20);
    tb_close(t, i);
    tb_close(t, p);
}

static void carry_sample(tb_buf *t, uint64_t ts, uint64_t cs) {
    size_t p = tb_packet_open(t, 1, ts, TB_SEQ_NEEDS);
    perf_body(t, 7, 7, cs);
    tb_close(t, p);
}

/* A writer that clears often re-sends its entries: what was resolved
 * carries over to the next epochs only while the entries it used, and those
 * they refer to, come back with the same bytes. */
Test(trace_incremental, resolutions_carry_over_clears_only_while_their_entries_are_unchanged) {
    tb_buf b = {0};
    carry_interned(&b, 1000, TB_SEQ_CLEARED, "beta", "libx.so", 3, 1);
    carry_sample(&b, 1000, 1);
    carry_sample(&b, 1001, 2);
    carry_interned(&b, 2000, TB_SEQ_CLEARED, "beta", "libx.so", 3, 1); /* the same bytes */
    carry_sample(&b, 2000, 1);
    carry_interned(&b, 3000, TB_SEQ_CLEARED, "gamma", "liby.so", 3, 1); /* strings changed, frames not */
    carry_sample(&b, 3000, 1);
    carry_interned(&b, 4000, TB_SEQ_CLEARED, "gamma", "liby.so", 2, 1); /* frame 1 not re-sent */
    carry_sample(&b, 4000, 1);                                          /* dropped */
    carry_sample(&b, 4001, 2); /* callstack 2 last resolved two epochs ago, its frame since renamed */
    carry_interned(&b, 5000, TB_SEQ_CLEARED, "beta", "libx.so", 3, 1); /* back to the first bytes */
    carry_sample(&b, 5000, 1);
    carry_interned(&b, 6000, TB_SEQ_CLEARED, "beta", "libx.so", 0, 1); /* frames come later */
    carry_sample(&b, 6000, 2);                                         /* dropped */
    carry_interned(&b, 6001, TB_SEQ_NEEDS, "beta", "libx.so", 3, 0);
    carry_sample(&b, 6002, 2);
    carry_sample(&b, 6003, 1);
    tm_trace *t = parse(&b);
    const tm_profile *p = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(p->n_samples, 8);
    cr_assert_eq(st->dropped_unresolved, 2);
    static const int64_t ts[] = {1000, 1001, 2000, 3000, 4001, 5000, 6002, 6003};
    static const char *const leaves[] = {"beta", "beta", "beta", "gamma", "gamma", "beta", "beta", "beta"};
    for (size_t i = 0; i < 8; i++) assert_sample(p, i, ts[i], 7, leaves[i]);
    static const size_t with_root[] = {0, 2, 3, 5, 7};
    static const char *const libs[] = {"libx.so", "libx.so", "liby.so", "libx.so", "libx.so"};
    for (size_t k = 0; k < 5; k++) {
        const tm_prof_frame *root = frame_at(p, with_root[k], 1);
        cr_assert(str_is(root->function, "alpha"));
        cr_assert(str_is(root->package, libs[k]), "sample %zu: package %.*s, expected %s", with_root[k],
                  TM_STR_ARGS(root->package), libs[k]);
    }
    cr_assert_eq(stack_of(p, 0), stack_of(p, 2));
    cr_assert_eq(stack_of(p, 0), stack_of(p, 5));
    cr_assert_eq(stack_of(p, 0), stack_of(p, 7));
    cr_assert_neq(stack_of(p, 0), stack_of(p, 3));
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_incremental, first_interned_entry_of_an_iid_wins_within_a_generation) {
    tb_buf b = {0};
    static const uint64_t a_path[] = {1}, b_path[] = {2};
    /* Generation 1, packet 1: the first definitions, no sample. */
    size_t p = tb_packet_open(&b, 1, 10, TB_SEQ_CLEARED);
    size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "first");
    fn_name(&b, 2, "other");
    path_str(&b, 1, "a.so");
    path_str(&b, 2, "b.so");
    mapping_paths(&b, 1, 0x1000, 0x2000, a_path, 1, 0);
    tb_frame(&b, 1, 1, 1, 0x10);
    callstack1(&b, 1, 1);
    tb_close(&b, i);
    tb_close(&b, p);
    /* Packet 2 redefines every iid, then samples callstack 1. */
    p = tb_packet_open(&b, 1, 20, TB_SEQ_NEEDS);
    i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "second");
    path_str(&b, 1, "c.so");
    mapping_paths(&b, 1, 0x5000, 0x6000, b_path, 1, 0);
    tb_frame(&b, 1, 2, 1, 0x20);
    const uint64_t two[] = {1, 1};
    tb_callstack(&b, 1, two, 2, 0);
    tb_close(&b, i);
    perf_body(&b, 3, 3, 1);
    tb_close(&b, p);
    /* A new generation: now the new entries count. */
    clear_with_one_frame(&b, 1, 30, "third");
    p = tb_packet_open(&b, 1, 40, TB_SEQ_NEEDS);
    perf_body(&b, 3, 3, 1);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(pr->n_samples, 2);
    assert_sample(pr, 0, 20, 3, "first");
    cr_assert_eq(stack_of(pr, 0)->len, 1);
    const tm_prof_frame *f = leaf(pr, 0);
    cr_assert_eq(f->addr, 0x1010);
    cr_assert(str_is(f->package, "a.so"), "package %.*s", TM_STR_ARGS(f->package));
    assert_sample(pr, 1, 40, 3, "third");
    tm_trace_free(t);
    tb_free(&b);
}

/* ==================================================================== */
/* Data loss (probe p3).                                                */
/* ==================================================================== */

Test(trace_loss, probe_p3_incremental_loss) {
    file_buf fb = load_probe("p3_incremental_loss");
    tm_trace *t = parse_bytes(fb.data, fb.len);
    const tm_profile *p = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    /* observed.out: ts 10, 20, 50, 60 with leaves f1, f1, f1, g1. */
    cr_assert_eq(p->n_samples, 4);
    assert_sample(p, 0, 10, 400, "f1");
    assert_sample(p, 1, 20, 400, "f1");
    assert_sample(p, 2, 50, 400, "f1");
    assert_sample(p, 3, 60, 400, "g1");
    cr_assert_eq(p->samples[0].stack, p->samples[2].stack);
    /* packet_skipped_seq_needs_incremental_state_invalid = 3,
     * interned_data_skipped_incremental_state_invalid = 2. */
    cr_assert_eq(st->packets_skipped_incremental, 3);
    cr_assert_eq(st->interned_data_skipped, 2);
    cr_assert_eq(st->dropped_stale_interning, 2); /* ts 30 and 40 on sequence 5 */
    cr_assert_eq(st->dropped_never_cleared, 1);   /* ts 70 on sequence 6 */
    cr_assert_eq(st->data_losses, 1);
    cr_assert_eq(st->sequences_with_data_loss, 1);
    cr_assert_eq(st->incremental_resets, 2);
    cr_assert_eq(st->samples_kept, 4);
    cr_assert_eq(st->sequences, 3);
    tm_trace_free(t);
    free(fb.data);
}

Test(trace_loss, needs_incremental_packets_skipped_after_loss_until_clear) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 10, TB_SEQ_CLEARED);
    size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "a");
    fn_name(&b, 2, "b");
    tb_frame(&b, 1, 1, 0, 1);
    tb_frame(&b, 2, 2, 0, 2);
    callstack1(&b, 1, 1);
    callstack1(&b, 2, 2);
    tb_close(&b, i);
    perf_body(&b, 5, 5, 1);
    tb_close(&b, p);
    /* Loss: this and the next SEQ_NEEDS packets are skipped. */
    p = tb_packet_open(&b, 1, 20, TB_SEQ_NEEDS);
    tb_uint(&b, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    perf_body(&b, 5, 5, 1);
    tb_close(&b, p);
    tb_perf_sample(&b, 1, 30, 5, 5, 2, TB_SEQ_NEEDS);
    /* No NEEDS flag: parsed, resolving against the pre-loss tables. */
    tb_perf_sample(&b, 1, 40, 5, 5, 2, 0);
    /* Interned data on a SEQ_NEEDS packet while invalid: both skipped. */
    p = tb_packet_open(&b, 1, 50, TB_SEQ_NEEDS);
    i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 3, "c");
    tb_close(&b, i);
    perf_body(&b, 5, 5, 1);
    tb_close(&b, p);
    /* The clear makes the state valid again. */
    clear_with_one_frame(&b, 1, 55, "a2");
    tb_perf_sample(&b, 1, 60, 5, 5, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 70, 5, 5, 1, TB_SEQ_NEEDS);

    /* Sequence 2: a skipped StreamingProfilePacket counts each callstack. */
    p = tb_packet_open(&b, 2, 5, TB_SEQ_CLEARED);
    thread_desc_body(&b, 8, 9, 1000, NULL);
    i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "s");
    tb_frame(&b, 1, 1, 0, 1);
    callstack1(&b, 1, 1);
    tb_close(&b, i);
    tb_close(&b, p);
    const uint64_t one[] = {1}, d1[] = {1}, three[] = {1, 1, 1}, d3[] = {1, 1, 1};
    streaming_packet(&b, 2, TB_NO_TS, TB_SEQ_NEEDS, one, 1, d1, 1);
    p = tb_packet_open(&b, 2, TB_NO_TS, TB_SEQ_NEEDS);
    tb_uint(&b, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    streaming_body(&b, three, 3, d3, 3, 1);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(pr->n_samples, 5);
    assert_sample(pr, 0, 10, 5, "a");
    assert_sample(pr, 1, 40, 5, "b");
    assert_sample(pr, 2, 60, 5, "a2");
    assert_sample(pr, 3, 70, 5, "a2");
    assert_sample(pr, 4, 1001000, 9, "s");
    cr_assert_eq(st->packets_skipped_incremental, 4);
    cr_assert_eq(st->dropped_stale_interning, 3 + 3);
    cr_assert_eq(st->interned_data_skipped, 1);
    cr_assert_eq(st->data_losses, 2);
    cr_assert_eq(st->sequences_with_data_loss, 2);
    cr_assert_eq(st->dropped_never_cleared, 0);
    cr_assert_eq(st->dropped_unresolved, 0);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_loss, sequence_that_never_clears_counts_dropped_never_cleared) {
    tb_buf b = {0};
    clear_with_one_frame(&b, 1, 5, "ok");
    tb_perf_sample(&b, 1, 6, 1, 1, 1, TB_SEQ_NEEDS);
    /* Sequence 9 never clears. previous_packet_dropped on its first packet
     * is not a loss: the sequence had not been seen. */
    size_t p = tb_packet_open(&b, 9, 10, TB_SEQ_NEEDS);
    tb_uint(&b, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "x");
    tb_frame(&b, 1, 1, 0, 1);
    callstack1(&b, 1, 1);
    tb_close(&b, i);
    perf_body(&b, 2, 2, 1);
    tb_close(&b, p);
    tb_perf_sample(&b, 9, 20, 2, 2, 1, TB_SEQ_NEEDS);
    const uint64_t cs[] = {1, 1}, dt[] = {1, 1};
    streaming_packet(&b, 9, 30, TB_SEQ_NEEDS, cs, 2, dt, 2);
    /* Sequence 10 never clears either; without the NEEDS flag its packet
     * is parsed, but its interned data was dropped: unresolved. */
    p = tb_packet_open(&b, 10, 40, 0);
    i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "y");
    tb_frame(&b, 1, 1, 0, 1);
    callstack1(&b, 1, 1);
    tb_close(&b, i);
    perf_body(&b, 3, 3, 1);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(pr->n_samples, 1);
    assert_sample(pr, 0, 6, 1, "ok");
    cr_assert_eq(st->packets_skipped_incremental, 3);
    cr_assert_eq(st->dropped_never_cleared, 1 + 1 + 2);
    cr_assert_eq(st->dropped_stale_interning, 0);
    cr_assert_eq(st->interned_data_skipped, 2);
    cr_assert_eq(st->dropped_unresolved, 1);
    cr_assert_eq(st->data_losses, 0);
    cr_assert_eq(st->sequences_with_data_loss, 0);
    tm_trace_free(t);
    tb_free(&b);
}

/* ==================================================================== */
/* PerfSample + StreamingProfilePacket.                                 */
/* ==================================================================== */

/* Interns a = fn 1, b = fn 2 (or swapped), frames 1 -> fn 1, 2 -> fn 2,
 * callstack 1 = [1], callstack 2 = [1, 2]. */
static void intern_ab(tb_buf *t, const char *f1, const char *f2) {
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    fn_name(t, 1, f1);
    fn_name(t, 2, f2);
    tb_frame(t, 1, 1, 0, 1);
    tb_frame(t, 2, 2, 0, 2);
    callstack1(t, 1, 1);
    const uint64_t cs2[] = {1, 2};
    tb_callstack(t, 2, cs2, 2, 1);
    tb_close(t, i);
}

Test(trace_samples, perf_and_streaming_on_several_sequences_and_threads) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 50, TB_SEQ_CLEARED);
    thread_desc_body(&b, 100, 101, 1000, NULL);
    intern_ab(&b, "a", "b");
    tb_close(&b, p);
    p = tb_packet_open(&b, 2, 50, TB_SEQ_CLEARED);
    thread_desc_body(&b, 100, 102, 1005, NULL);
    intern_ab(&b, "b", "a"); /* the same iids mean other names on sequence 2 */
    tb_close(&b, p);
    p = tb_packet_open(&b, 3, 50, TB_SEQ_CLEARED);
    intern_ab(&b, "p", "q");
    tb_close(&b, p);
    tb_perf_sample(&b, 3, 1020000, 200, 201, 2, TB_SEQ_NEEDS);
    const uint64_t cs12[] = {1, 2}, d12[] = {10, 20}, cs1[] = {1}, d0[] = {0}, d30[] = {30}, d7[] = {7};
    streaming_packet(&b, 1, 999, TB_SEQ_NEEDS, cs12, 2, d12, 2);
    streaming_packet(&b, 2, 999, TB_SEQ_NEEDS, cs1, 1, d0, 1);
    tb_perf_sample(&b, 3, 1000000, 200, 202, 1, TB_SEQ_NEEDS);
    streaming_packet(&b, 1, 999, TB_SEQ_NEEDS, cs1, 1, d7, 1);
    streaming_packet(&b, 2, 999, TB_SEQ_NEEDS, cs12, 1, d30, 1);
    tb_perf_sample(&b, 3, 1040000, 200, 201, 1, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(pr->n_samples, 8);
    assert_sample(pr, 0, 1000000, 202, "p");
    assert_sample(pr, 1, 1005000, 102, "b");
    assert_sample(pr, 2, 1010000, 101, "a");
    assert_sample(pr, 3, 1020000, 201, "q");
    assert_sample(pr, 4, 1030000, 101, "b");
    assert_sample(pr, 5, 1035000, 102, "b");
    assert_sample(pr, 6, 1037000, 101, "a"); /* continues: 1000 + 10 + 20 + 7 µs */
    assert_sample(pr, 7, 1040000, 201, "p");
    for (size_t i = 0; i < pr->n_samples; i++) {
        int64_t tid = thread_of_sample(pr, i)->tid;
        int64_t pid = thread_of_sample(pr, i)->pid;
        cr_assert_eq(pid, tid > 200 ? 200 : 100, "tid %lld has pid %lld", (long long)tid, (long long)pid);
    }
    cr_assert_eq(stack_of(pr, 3)->len, 2);
    cr_assert(str_is(frame_at(pr, 3, 1)->function, "p"));
    cr_assert_eq(st->perf_samples, 3);
    cr_assert_eq(st->streaming_samples, 5);
    cr_assert_eq(st->sequences, 3);
    cr_assert_eq(st->samples_kept, 8);
    cr_assert_eq(st->streaming_without_reference_time, 0);
    tm_trace_free(t);
    tb_free(&b);
}

/* The reader takes a sample packet's sequence id and flags of one byte
 * each in one load; ids and flags of two bytes take the general reading,
 * with the same result, runs of packets alternating between the two. */
Test(trace_samples, perf_samples_with_sequence_ids_and_flags_of_one_and_two_bytes) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 127, 50, TB_SEQ_CLEARED);
    intern_ab(&b, "a", "b");
    tb_close(&b, p);
    p = tb_packet_open(&b, 300, 50, TB_SEQ_CLEARED);
    intern_ab(&b, "p", "q");
    tb_close(&b, p);
    tb_perf_sample(&b, 127, 1000000, 200, 201, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 300, 1010000, 200, 202, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 300, 1020000, 200, 202, 2, TB_SEQ_NEEDS | 0x80); /* unknown flag bit 7: two bytes */
    tb_perf_sample(&b, 127, 1030000, 200, 201, 2, TB_SEQ_NEEDS | 0x80);
    tb_perf_sample(&b, 127, 1040000, 200, 201, 1, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(pr->n_samples, 5);
    assert_sample(pr, 0, 1000000, 201, "a");
    assert_sample(pr, 1, 1010000, 202, "p");
    assert_sample(pr, 2, 1020000, 202, "q");
    assert_sample(pr, 3, 1030000, 201, "b");
    assert_sample(pr, 4, 1040000, 201, "a");
    cr_assert_eq(tm_trace_get_stats(t)->sequences, 2);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_samples, probe_p1_streaming_profile) {
    file_buf fb = load_probe("p1_streaming_profile");
    tm_trace *t = parse_bytes(fb.data, fb.len);
    const tm_profile *p = tm_trace_profile(t);
    /* observed.out: 1000020000, 1000040000, 1000070000, 1000075000 on utid 3 (tid 101). */
    cr_assert_eq(p->n_samples, 4);
    assert_sample(p, 0, 1000020000, 101, "foo");
    assert_sample(p, 1, 1000040000, 101, "bar");
    assert_sample(p, 2, 1000070000, 101, "bar");
    assert_sample(p, 3, 1000075000, 101, "bar");
    cr_assert_eq(thread_of_sample(p, 0)->pid, 100);
    cr_assert(str_is(thread_of_sample(p, 0)->name, "worker"));
    cr_assert_eq(p->samples[1].stack, p->samples[3].stack);
    cr_assert_neq(p->samples[1].stack, p->samples[2].stack);
    cr_assert_eq(tm_trace_get_stats(t)->streaming_without_reference_time, 0);
    tm_trace_free(t);
    free(fb.data);
}

Test(trace_samples, probe_p8_cpu_profile_unittest_port) {
    file_buf fb = load_probe("p8_cpu_profile_unittest_port");
    tm_trace *t = parse_bytes(fb.data, fb.len);
    const tm_profile *p = tm_trace_profile(t);
    /* observed.out: ts 11000, 26000, 68000 on utid 2 (tid 16, pid 15). */
    cr_assert_eq(p->n_samples, 3);
    static const int64_t ts[] = {11000, 26000, 68000};
    static const uint64_t rel[] = {16962, 66, 16962};
    for (size_t i = 0; i < 3; i++) {
        assert_sample(p, i, ts[i], 16, NULL);
        cr_assert_eq(thread_of_sample(p, i)->pid, 15);
        const tm_prof_frame *f = leaf(p, i);
        cr_assert_not(f->flags & TM_FRAME_HAS_FUNCTION);
        cr_assert(f->flags & TM_FRAME_HAS_ADDR);
        cr_assert_eq(f->addr, rel[i]); /* the mapping starts at 0 */
        cr_assert_neq(f->mapping, 0);
        const tm_prof_mapping *m = &p->mappings[f->mapping - 1];
        static const char id[] = "3BBCFBD372448A727265C3E7C4D954F91";
        cr_assert(m->build_id.len == 33 && memcmp(m->build_id.data, id, 33) == 0);
    }
    cr_assert_eq(p->samples[0].stack, p->samples[2].stack);
    tm_trace_free(t);
    free(fb.data);
}

Test(trace_samples, streaming_thread_from_track_descriptor_and_packet_time_fallback) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 4, 9000, TB_SEQ_CLEARED);
    size_t td = tb_open(&b, TM_PF_PACKET_TRACK_DESCRIPTOR);
    tb_uint(&b, TM_PF_TRACK_DESC_UUID, 77);
    size_t th = tb_open(&b, TM_PF_TRACK_DESC_THREAD);
    tb_uint(&b, TM_PF_THREAD_DESC_PID, 300);
    tb_uint(&b, TM_PF_THREAD_DESC_TID, 301);
    tb_str(&b, TM_PF_THREAD_DESC_THREAD_NAME, "trk");
    tb_close(&b, th);
    tb_close(&b, td);
    intern_ab(&b, "a", "b");
    tb_close(&b, p);
    const uint64_t cs[] = {1, 2}, dt[] = {10, 20};
    streaming_packet(&b, 4, 2000000, TB_SEQ_NEEDS, cs, 2, dt, 2);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(pr->n_samples, 2);
    /* No reference time: packet timestamp + cumulative deltas. */
    assert_sample(pr, 0, 2010000, 301, "a");
    assert_sample(pr, 1, 2030000, 301, "b");
    cr_assert_eq(thread_of_sample(pr, 0)->pid, 300);
    cr_assert(str_is(thread_of_sample(pr, 0)->name, "trk"));
    cr_assert_eq(st->streaming_without_reference_time, 2);
    cr_assert_eq(st->samples_without_thread, 0);
    tm_trace_free(t);
    tb_free(&b);
}

/* Trace Processor: base = sequence time converted MONOTONIC -> trace time once per
 * packet; the deltas are added to the converted base. */
Test(trace_samples, streaming_deltas_are_added_to_the_converted_base) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t s1[] = {10000000, 1000000}, s2[] = {25000000, 5000000};
    tb_clock_snapshot(&b, 1, ids, s1, 2);
    tb_clock_snapshot(&b, 1, ids, s2, 2);
    size_t p = tb_packet_open(&b, 2, TB_NO_TS, TB_SEQ_CLEARED);
    thread_desc_body(&b, 1, 2, 4000, NULL); /* MONOTONIC 4 ms */
    intern_ab(&b, "a", "b");
    tb_close(&b, p);
    const uint64_t cs[] = {1, 2}, dt[] = {1000, 1000}, cs1[] = {1}, d500[] = {500};
    streaming_packet(&b, 2, TB_NO_TS, TB_SEQ_NEEDS, cs, 2, dt, 2);
    streaming_packet(&b, 2, TB_NO_TS, TB_SEQ_NEEDS, cs1, 1, d500, 1);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(pr->n_samples, 3);
    /* Packet 1: base MONO 4 ms -> 13 ms (first snapshot), + 1 ms, + 2 ms. */
    assert_sample(pr, 0, 14000000, 2, "a");
    assert_sample(pr, 1, 15000000, 2, "b");
    /* Packet 2: base MONO 6 ms -> 26 ms (second snapshot), + 0.5 ms. */
    assert_sample(pr, 2, 26500000, 2, "a");
    tm_trace_free(t);
    tb_free(&b);
}

/* Streaming packets on a sequence with a reference time, packed (read by
 * the general collector) or unpacked (one pass over plain varints, whose
 * samples take no overflow checks while the deltas stay under 2^32 us):
 * trailing deltas advance the time, callstacks past the deltas and
 * unresolvable ones are dropped, and a delta of 2^32 us takes the checked
 * loop. */
static void build_streaming_shapes(tb_buf *t, int packed) {
    size_t p = tb_packet_open(t, 2, TB_NO_TS, TB_SEQ_CLEARED);
    thread_desc_body(t, 1, 2, 1, NULL); /* reference time 1 us */
    intern_ab(t, "a", "b");
    tb_close(t, p);
    const uint64_t cs1[] = {1, 2}, dt1[] = {1, 2, 3}, cs2[] = {1, 2, 1}, dt2[] = {10}, cs3[] = {1, 99, 2},
                   dt3[] = {1, 1, 1}, cs4[] = {1}, dt4[] = {(uint64_t)1 << 32};
    const uint64_t *cs[] = {cs1, cs2, cs3, cs4}, *dt[] = {dt1, dt2, dt3, dt4};
    const size_t n_cs[] = {2, 3, 3, 1}, n_dt[] = {3, 1, 3, 1};
    for (size_t i = 0; i < 4; i++) {
        p = tb_packet_open(t, 2, TB_NO_TS, TB_SEQ_NEEDS);
        streaming_body(t, cs[i], n_cs[i], dt[i], n_dt[i], packed);
        tb_close(t, p);
    }
}

Test(trace_samples, streaming_packets_plain_or_packed_give_the_same_samples) {
    tb_buf a = {0}, b = {0};
    build_streaming_shapes(&a, 1);
    build_streaming_shapes(&b, 0);
    tm_trace *ta = parse(&a), *tb = parse(&b);
    for (int k = 0; k < 2; k++) {
        const tm_profile *p = tm_trace_profile(k ? tb : ta);
        const tm_trace_stats *st = tm_trace_get_stats(k ? tb : ta);
        cr_assert_eq(p->n_samples, 6);
        assert_sample(p, 0, 2000, 2, "a");
        assert_sample(p, 1, 4000, 2, "b");
        assert_sample(p, 2, 17000, 2, "a"); /* 1 + 1 + 2 + 3 + 10 us */
        assert_sample(p, 3, 18000, 2, "a");
        assert_sample(p, 4, 20000, 2, "b");
        assert_sample(p, 5, 20000 + ((int64_t)1 << 32) * 1000, 2, "a");
        cr_assert_eq(st->dropped_malformed_streaming, 2);
        cr_assert_eq(st->dropped_unresolved, 1);
        cr_assert_eq(st->streaming_samples, 9);
    }
    assert_same_profile(ta, tb);
    tm_trace_free(ta);
    tm_trace_free(tb);
    tb_free(&a);
    tb_free(&b);
}

/* ==================================================================== */
/* Clocks (probes p5, p6).                                              */
/* ==================================================================== */

Test(trace_clocks, probe_p5_defaults_clock_and_two_snapshots) {
    file_buf fb = load_probe("p5_clocks");
    tm_trace *t = parse_bytes(fb.data, fb.len);
    const tm_profile *p = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    static const int64_t ts[] = {7000, 9500, 11000, 26000};
    cr_assert_eq(p->n_samples, 4);
    for (size_t i = 0; i < 4; i++) assert_sample(p, i, ts[i], 10, "f");
    cr_assert_eq(st->trace_clock_id, CLK_BOOTTIME);
    cr_assert_eq(st->clock_snapshots, 2);
    cr_assert_eq(st->dropped_missing_clock, 0);
    /* No REALTIME in any snapshot: Unix time is unknown. */
    int64_t unix_ns = 0;
    cr_assert_eq(tm_profile_realtime(p, 7000, &unix_ns), 0);
    cr_assert_eq(st->has_realtime, 0);
    tm_trace_free(t);
    free(fb.data);
}

Test(trace_clocks, probe_p6_monotonic_without_snapshot_is_dropped) {
    file_buf fb = load_probe("p6_no_clock_snapshot");
    tm_trace *t = parse_bytes(fb.data, fb.len);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(tm_trace_profile(t)->n_samples, 0);
    cr_assert_eq(st->samples_kept, 0);
    cr_assert_eq(st->dropped_missing_clock, 2);
    cr_assert_eq(st->perf_samples, 2);
    tm_trace_free(t);
    free(fb.data);
}

static void perf_with_clock(tb_buf *t, uint32_t seq, uint64_t ts, uint32_t clock_id) {
    size_t p = tb_packet_open(t, seq, ts, TB_SEQ_NEEDS);
    if (clock_id) tb_uint(t, TM_PF_PACKET_TIMESTAMP_CLOCK_ID, clock_id);
    perf_body(t, 4, 4, 1);
    tb_close(t, p);
}

Test(trace_clocks, per_packet_timestamp_clock_id_and_defaults) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t vals[] = {10000, 1000};
    tb_clock_snapshot(&b, 1, ids, vals, 2);
    clear_with_one_frame(&b, 2, 0, "f");
    perf_with_clock(&b, 2, 1500, CLK_MONOTONIC); /* field 58 -> 10500 */
    perf_with_clock(&b, 2, 20000, 0);            /* trace default: as-is */
    perf_with_clock(&b, 2, 30000, CLK_BOOTTIME); /* as-is */
    /* Sequence 3: TracePacketDefaults.timestamp_clock_id = MONOTONIC. */
    clear_with_one_frame(&b, 3, 0, "f");
    size_t p = tb_packet_open(&b, 3, TB_NO_TS, 0);
    size_t d = tb_open(&b, TM_PF_PACKET_DEFAULTS);
    tb_uint(&b, TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID, CLK_MONOTONIC);
    tb_close(&b, d);
    tb_close(&b, p);
    perf_with_clock(&b, 3, 2000, 0);             /* default MONOTONIC -> 11000 */
    perf_with_clock(&b, 3, 40000, CLK_BOOTTIME); /* the packet's clock wins */
    /* A clear resets TracePacketDefaults: untagged is trace time again. */
    clear_with_one_frame(&b, 3, TB_NO_TS, "f");
    perf_with_clock(&b, 3, 50000, 0);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    static const int64_t ts[] = {10500, 11000, 20000, 30000, 40000, 50000};
    cr_assert_eq(pr->n_samples, 6);
    for (size_t i = 0; i < 6; i++) assert_sample(pr, i, ts[i], 4, "f");
    cr_assert_eq(tm_trace_get_stats(t)->dropped_missing_clock, 0);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_clocks, primary_trace_clock_sets_trace_time) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t vals[] = {10000, 1000};
    tb_clock_snapshot_primary(&b, 1, ids, vals, 2, CLK_MONOTONIC);
    clear_with_one_frame(&b, 2, 0, "f");
    perf_with_clock(&b, 2, 12000, CLK_BOOTTIME); /* BOOT 12000 -> MONO 3000 */
    perf_with_clock(&b, 2, 2000, 0);             /* untagged: already MONOTONIC */

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(tm_trace_get_stats(t)->trace_clock_id, CLK_MONOTONIC);
    cr_assert_eq(pr->n_samples, 2);
    assert_sample(pr, 0, 2000, 4, "f");
    assert_sample(pr, 1, 3000, 4, "f");
    tm_trace_free(t);
    tb_free(&b);
}

/* ClockSnapshot clocks: ids 64-127 are valid only on the sequence that
 * emitted the snapshot; unit_multiplier_ns scales the clock's values. */
Test(trace_clocks, sequence_scoped_clock_with_unit_multiplier) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 2, TB_NO_TS, 0);
    size_t cs = tb_open(&b, TM_PF_PACKET_CLOCK_SNAPSHOT);
    size_t c = tb_open(&b, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(&b, TM_PF_CLOCK_ID, CLK_BOOTTIME);
    tb_uint(&b, TM_PF_CLOCK_TIMESTAMP, 100000);
    tb_close(&b, c);
    c = tb_open(&b, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(&b, TM_PF_CLOCK_ID, TM_PF_FIRST_SEQUENCE_CLOCK);
    tb_uint(&b, TM_PF_CLOCK_TIMESTAMP, 5); /* 5 µs */
    tb_uint(&b, TM_PF_CLOCK_UNIT_MULTIPLIER_NS, 1000);
    tb_close(&b, c);
    tb_close(&b, cs);
    tb_close(&b, p);
    clear_with_one_frame(&b, 2, 0, "f");
    perf_with_clock(&b, 2, 7, 64); /* 7 µs on clock 64 -> BOOT 100000 + 2000 */
    clear_with_one_frame(&b, 3, 0, "f");
    perf_with_clock(&b, 3, 7, 64); /* clock 64 of sequence 3 has no snapshot */

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(pr->n_samples, 1);
    assert_sample(pr, 0, 102000, 4, "f");
    cr_assert_eq(tm_trace_get_stats(t)->dropped_missing_clock, 1);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_clocks, unix_time_from_boottime_realtime_snapshots_exact_ns) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_REALTIME};
    const uint64_t s1[] = {1000000000ull, 1700000000123456789ull};
    const uint64_t s2[] = {2000000000ull, 1700000001123456999ull};
    tb_clock_snapshot(&b, 1, ids, s1, 2);
    tb_clock_snapshot(&b, 1, ids, s2, 2);
    clear_with_one_frame(&b, 2, 0, "f");
    tb_perf_sample(&b, 2, 500000000ull, 4, 4, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 1000000001ull, 4, 4, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 2000000500ull, 4, 4, 1, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(tm_trace_get_stats(t)->has_realtime, 1);
    cr_assert_eq(pr->n_samples, 3);
    /* Before the first snapshot: extrapolated from the first one. */
    static const int64_t ts[] = {500000000, 1000000001, 2000000500};
    static const int64_t unix_ns[] = {1699999999623456789ll, 1700000000123456790ll,
                                      1700000001123457499ll};
    for (size_t i = 0; i < 3; i++) {
        assert_sample(pr, i, ts[i], 4, "f");
        int64_t u = 0;
        cr_assert_eq(tm_profile_realtime(pr, pr->samples[i].ts, &u), 1);
        cr_assert_eq(u, unix_ns[i], "sample %zu: unix %lld, expected %lld", i, (long long)u,
                     (long long)unix_ns[i]);
    }
    tm_trace_free(t);
    tb_free(&b);
}

/* ==================================================================== */
/* compressed_packets (probes p2, p4).                                  */
/* ==================================================================== */

static void build_compress_parts(tb_buf *a, tb_buf *b) {
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t vals[] = {1000000, 0};
    tb_clock_snapshot(a, 1, ids, vals, 2);
    size_t p = tb_packet_open(a, 2, 10, 0);
    size_t pt = tb_open(a, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(a, 21, 20, "perf-thread");
    tb_close(a, pt);
    tb_close(a, p);
    p = tb_packet_open(a, 3, 10, TB_SEQ_CLEARED);
    thread_desc_body(a, 20, 22, 5, "sampler");
    intern_ab(a, "a", "b");
    tb_close(a, p);
    const uint64_t cs[] = {1, 2}, dt[] = {10, 20}, cs1[] = {2}, d1[] = {5};
    streaming_packet(a, 3, TB_NO_TS, TB_SEQ_NEEDS, cs, 2, dt, 2);
    p = tb_packet_open(a, 4, 1000, TB_SEQ_CLEARED);
    intern_ab(a, "c", "d");
    perf_body(a, 20, 21, 2);
    tb_close(a, p);
    /* Part b relies on the interning and sequence time of part a. */
    streaming_packet(b, 3, TB_NO_TS, TB_SEQ_NEEDS, cs1, 1, d1, 1);
    tb_perf_sample(b, 4, 1060000, 20, 21, 1, TB_SEQ_NEEDS);
}

Test(trace_compressed, compressed_packets_give_the_uncompressed_profile) {
    tb_buf a = {0}, b = {0}, plain = {0}, whole = {0}, halves = {0}, mixed = {0};
    build_compress_parts(&a, &b);
    tb_raw(&plain, a.data, a.len);
    tb_raw(&plain, b.data, b.len);
    tb_compressed_packet(&whole, &plain);
    tb_compressed_packet(&halves, &a);
    tb_compressed_packet(&halves, &b);
    tb_compressed_packet(&mixed, &a);
    tb_raw(&mixed, b.data, b.len);

    tm_trace *tp = parse(&plain), *tw = parse(&whole), *th = parse(&halves), *tx = parse(&mixed);
    const tm_profile *p = tm_trace_profile(tp);
    cr_assert_eq(p->n_samples, 5);
    assert_sample(p, 0, 1000, 21, "d");
    assert_sample(p, 1, 1015000, 22, "a"); /* BOOT = MONO + 1 ms; 5 + 10 µs */
    assert_sample(p, 2, 1035000, 22, "b");
    assert_sample(p, 3, 1040000, 22, "b");
    assert_sample(p, 4, 1060000, 21, "c");
    cr_assert(str_is(thread_of_sample(p, 0)->name, "perf-thread"));
    cr_assert(str_is(thread_of_sample(p, 1)->name, "sampler"));
    assert_same_profile(tp, tw);
    assert_same_profile(tp, th);
    assert_same_profile(tp, tx);
    cr_assert_eq(tm_trace_get_stats(tp)->compressed_packets, 0);
    cr_assert_eq(tm_trace_get_stats(tw)->compressed_packets, 1);
    cr_assert_eq(tm_trace_get_stats(th)->compressed_packets, 2);
    cr_assert_eq(tm_trace_get_stats(tx)->compressed_packets, 1);
    cr_assert_eq(tm_trace_get_stats(tw)->samples_kept, 5);
    tm_trace_free(tp);
    tm_trace_free(tw);
    tm_trace_free(th);
    tm_trace_free(tx);
    tb_free(&a);
    tb_free(&b);
    tb_free(&plain);
    tb_free(&whole);
    tb_free(&halves);
    tb_free(&mixed);
}

Test(trace_compressed, probe_p4_equals_probe_p2) {
    file_buf f2 = load_probe("p2_perf_sample"), f4 = load_probe("p4_compressed_packets");
    tm_trace *t2 = parse_bytes(f2.data, f2.len), *t4 = parse_bytes(f4.data, f4.len);
    const tm_profile *p = tm_trace_profile(t2);
    /* observed.out: rows with a callsite at ts 1000 (tid 201), 2000 (tid 300),
     * 3000 (tid 202); 3500 lost 7 records; 3600 was skipped (no callsite). */
    cr_assert_eq(p->n_samples, 3);
    assert_sample(p, 0, 1000, 201, "foo");
    assert_sample(p, 1, 2000, 300, "foo");
    assert_sample(p, 2, 3000, 202, NULL);
    cr_assert(str_is(thread_of_sample(p, 2)->name, "t202"));
    cr_assert_eq(thread_of_sample(p, 0)->pid, 200);
    cr_assert_eq(thread_of_sample(p, 1)->pid, 300);
    /* Leaf of callstack 2: function_name_id 0 -> no name, rel_pc 1024. */
    const tm_prof_frame *f = leaf(p, 2);
    cr_assert_not(f->flags & TM_FRAME_HAS_FUNCTION);
    cr_assert_eq(f->addr, 4096 + 1024);
    cr_assert(str_is(f->package, "usr/lib/libx.so"), "package %.*s", TM_STR_ARGS(f->package));
    cr_assert_eq(stack_of(p, 2)->len, 4);
    cr_assert(str_is(frame_at(p, 2, 1)->function, "_ZN3Foo3barEv"));
    cr_assert(str_is(frame_at(p, 2, 3)->function, "main"));
    const tm_trace_stats *s2 = tm_trace_get_stats(t2), *s4 = tm_trace_get_stats(t4);
    cr_assert_eq(s2->perf_records_lost, 7);
    cr_assert_eq(s2->perf_samples_skipped, 1);
    cr_assert_eq(s2->compressed_packets, 0);
    cr_assert_eq(s4->compressed_packets, 1);
    cr_assert_eq(s4->perf_records_lost, 7);
    cr_assert_eq(s4->perf_samples_skipped, 1);
    assert_same_profile(t2, t4);
    tm_trace_free(t2);
    tm_trace_free(t4);
    free(f2.data);
    free(f4.data);
}

/* ==================================================================== */
/* Names.                                                               */
/* ==================================================================== */

static void process_tree_thread(tb_buf *t, uint32_t seq, int64_t tid, int64_t tgid, const char *name) {
    size_t p = tb_packet_open(t, seq, 1, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(t, (uint64_t)tid, (uint64_t)tgid, name);
    tb_close(t, pt);
    tb_close(t, p);
}

Test(trace_names, thread_names_from_process_tree) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 1, 0);
    size_t pt = tb_open(&b, TM_PF_PACKET_PROCESS_TREE);
    size_t pr = tb_open(&b, TM_PF_PROCESS_TREE_PROCESSES);
    tb_uint(&b, TM_PF_PROCESS_PID, 10);
    tb_str(&b, TM_PF_PROCESS_CMDLINE, "com.example.app");
    tb_close(&b, pr);
    const int64_t tids[] = {11, 12};
    const char *names[] = {"RenderThread", "Worker"};
    for (int i = 0; i < 2; i++) tb_pt_thread(&b, (uint64_t)tids[i], 10, names[i]);
    tb_close(&b, pt);
    tb_close(&b, p);
    clear_with_one_frame(&b, 2, 5, "f");
    tb_perf_sample(&b, 2, 10, 10, 11, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 20, 10, 12, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 30, 10, 10, 1, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 3);
    assert_sample(m, 0, 10, 11, "f");
    cr_assert(str_is(thread_of_sample(m, 0)->name, "RenderThread"));
    cr_assert(str_is(thread_of_sample(m, 1)->name, "Worker"));
    cr_assert_eq(thread_of_sample(m, 0)->pid, 10);
    cr_assert_eq(thread_of_sample(m, 1)->pid, 10);
    cr_assert_eq(thread_of_sample(m, 2)->tid, 10);
    cr_assert_eq(tm_trace_get_stats(t)->threads_without_name, 0); /* 10 is the main thread */
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_names, descriptor_thread_names_beat_process_tree) {
    tb_buf b = {0};
    /* Thread 11: ThreadDescriptor first, ProcessTree later. */
    size_t p = tb_packet_open(&b, 1, 1, TB_SEQ_CLEARED);
    thread_desc_body(&b, 10, 11, -1, "td-name");
    tb_close(&b, p);
    process_tree_thread(&b, 5, 11, 10, "pt-11");
    /* Thread 12: ProcessTree first, TrackDescriptor.thread later. */
    process_tree_thread(&b, 5, 12, 10, "pt-12");
    p = tb_packet_open(&b, 2, 2, TB_SEQ_CLEARED);
    size_t td = tb_open(&b, TM_PF_PACKET_TRACK_DESCRIPTOR);
    tb_uint(&b, TM_PF_TRACK_DESC_UUID, 5);
    size_t th = tb_open(&b, TM_PF_TRACK_DESC_THREAD);
    tb_uint(&b, TM_PF_THREAD_DESC_PID, 10);
    tb_uint(&b, TM_PF_THREAD_DESC_TID, 12);
    tb_str(&b, TM_PF_THREAD_DESC_THREAD_NAME, "track-name");
    tb_close(&b, th);
    tb_close(&b, td);
    tb_close(&b, p);
    /* Thread 13: only ProcessTree. */
    process_tree_thread(&b, 5, 13, 10, "pt-13");
    clear_with_one_frame(&b, 3, 5, "f");
    tb_perf_sample(&b, 3, 10, 10, 11, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 3, 20, 10, 12, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 3, 30, 10, 13, 1, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 3);
    const tm_prof_thread *t11 = find_thread(m, 11), *t12 = find_thread(m, 12), *t13 = find_thread(m, 13);
    cr_assert(str_is(t11->name, "td-name"), "thread 11: %.*s", TM_STR_ARGS(t11->name));
    cr_assert(str_is(t12->name, "track-name"), "thread 12: %.*s", TM_STR_ARGS(t12->name));
    cr_assert(str_is(t13->name, "pt-13"), "thread 13: %.*s", TM_STR_ARGS(t13->name));
    cr_assert_gt(t11->name_prio, t13->name_prio);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_names, unicode_names_kept_byte_exact) {
    static const char thread_name[] =
        "\xce\xa9mega-\xe3\x82\xb9\xe3\x83\xac\xe3\x83\x83\xe3\x83\x89-\xf0\x9f\xa7\xb5";
    static const char fn[] = "\xe6\x95\xb0\xe6\x8d\xae::\xe5\xa4\x84\xe7\x90\x86<T>";
    tb_buf b = {0};
    process_tree_thread(&b, 5, 31, 30, thread_name);
    clear_with_one_frame(&b, 1, 5, fn);
    tb_perf_sample(&b, 1, 10, 30, 31, 1, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 1);
    assert_sample(m, 0, 10, 31, fn);
    cr_assert(str_is(thread_of_sample(m, 0)->name, thread_name));
    tm_trace_free(t);
    tb_free(&b);
}

/* Strict UTF-8 check (RFC 3629), independent of the library's own. */
static int utf8_ok(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k;
        unsigned cp, min;
        if (c < 0x80) { i++; continue; }
        if (c >= 0xc2 && c <= 0xdf) k = 1, cp = c & 0x1f, min = 0x80;
        else if (c >= 0xe0 && c <= 0xef) k = 2, cp = c & 0x0f, min = 0x800;
        else if (c >= 0xf0 && c <= 0xf4) k = 3, cp = c & 0x07, min = 0x10000;
        else return 0;
        if (n - i <= k) return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += k + 1;
    }
    return 1;
}

Test(trace_names, invalid_utf8_names_kept_in_model_and_repaired_in_json) {
    static const char bad_thread[] = "bad\xff\xfe";
    static const char bad_fn[] = "fn\xc3(x";
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_REALTIME};
    const uint64_t vals[] = {0, 1700000000000000000ull};
    tb_clock_snapshot(&b, 1, ids, vals, 2);
    size_t p = tb_packet_open(&b, 2, 1, TB_SEQ_CLEARED);
    thread_desc_body(&b, 10, 11, -1, bad_thread);
    tb_close(&b, p);
    clear_with_one_frame(&b, 3, 5, bad_fn);
    tb_perf_sample(&b, 3, 1000, 10, 11, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 3, 2000, 10, 11, 1, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 2);
    assert_sample(m, 0, 1000, 11, bad_fn); /* byte-exact in the model */
    cr_assert(str_is(thread_of_sample(m, 0)->name, bad_thread));

    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_write_sample_v2(t, NULL, &sink, &err);
    cr_assert_eq(st, TM_OK, "tm_write_sample_v2: %s: %s", tm_status_str(st), err.message);
    cr_assert_not_null(out.data);
    cr_assert_not_null(strstr(out.data, "\xef\xbf\xbd"), "no U+FFFD in %s", out.data);
    cr_assert(utf8_ok((const unsigned char *)out.data, out.len), "output is not valid UTF-8");
    json_error_t jerr;
    json_t *root = json_loadb(out.data, out.len, 0, &jerr);
    cr_assert_not_null(root, "output is not JSON: %s", jerr.text);
    const char *tn = json_string_value(
        json_object_get(json_object_get(json_object_get(json_object_get(root, "profile"),
                                                        "thread_metadata"), "11"), "name"));
    cr_assert_not_null(tn);
    cr_assert_str_eq(tn, "bad\xef\xbf\xbd\xef\xbf\xbd");
    const char *fname = json_string_value(
        json_object_get(json_array_get(json_object_get(json_object_get(root, "profile"), "frames"), 0),
                        "function"));
    cr_assert_not_null(fname);
    cr_assert_str_eq(fname, "fn\xef\xbf\xbd(x");
    json_decref(root);
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&b);
}

/* ==================================================================== */
/* Frames (Trace Processor's and Relay's frame rules).                  */
/* ==================================================================== */

Test(trace_frames, address_only_frames) {
    tb_buf b = {0};
    static const uint64_t path[] = {1};
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    path_str(&b, 1, "libnative.so");
    mapping_paths(&b, 1, 0x7000, 0x9000, path, 1, 1);
    tb_frame(&b, 1, 0, 1, 0x123); /* no function_name_id */
    tb_frame(&b, 2, 0, 0, 0x42);  /* no function, no mapping */
    const uint64_t cs[] = {2, 1};
    tb_callstack(&b, 1, cs, 2, 1);
    tb_close(&b, i);
    perf_body(&b, 1, 1, 1);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 1);
    cr_assert_eq(stack_of(m, 0)->len, 2);
    const tm_prof_frame *f = leaf(m, 0);
    cr_assert_not(f->flags & TM_FRAME_HAS_FUNCTION);
    cr_assert(f->flags & TM_FRAME_HAS_ADDR);
    cr_assert_eq(f->addr, 0x7000 + 0x123);
    cr_assert_eq(f->rel_pc, 0x123);
    cr_assert(str_is(f->package, "libnative.so"));
    cr_assert_not(f->flags & TM_FRAME_JAVA);
    const tm_prof_frame *root = frame_at(m, 0, 1);
    cr_assert_not(root->flags & TM_FRAME_HAS_FUNCTION);
    cr_assert(root->flags & TM_FRAME_HAS_ADDR);
    cr_assert_eq(root->addr, 0x42);
    cr_assert_eq(root->mapping, 0);
    cr_assert_not(root->flags & TM_FRAME_HAS_PACKAGE);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_frames, java_mappings_split_module_and_function) {
    static const char *paths[] = {
        "/system/framework/arm64/boot-framework.oat", "/data/dalvik-cache/arm64/classes.dex",
        "/system/framework/framework.jar", "/data/app/com.example/oat/arm64/base.odex",
        "/data/app/com.example/oat/arm64/base.vdex", "/memfd:dalvik-jit-code-cache (deleted)",
        "/system/lib64/libc.so"};
    enum { N = 7, NATIVE = 6 };
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "android.os.Looper.loop");
    fn_name(&b, 2, "nodots");
    for (uint64_t k = 1; k <= N; k++) {
        path_str(&b, k, paths[k - 1]);
        mapping_paths(&b, k, 0x10000 * k, 0x10000 * k + 0x1000, &k, 1, 0);
        tb_frame(&b, k, 1, k, 0x10);
        callstack1(&b, k, k);
    }
    tb_frame(&b, 100, 2, 1, 0x20);
    callstack1(&b, 100, 100);
    tb_close(&b, in);
    tb_close(&b, p);
    for (uint64_t k = 1; k <= N; k++) tb_perf_sample(&b, 1, 100 + k, 1, 1, k, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 200, 1, 1, 100, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, N + 1);
    for (size_t k = 0; k < N; k++) {
        const tm_prof_frame *f = leaf(m, k);
        cr_assert(str_is(f->package, paths[k]), "frame %zu package %.*s", k, TM_STR_ARGS(f->package));
        cr_assert_neq(f->mapping, 0);
        if (k == NATIVE) {
            cr_assert_not(f->flags & TM_FRAME_JAVA);
            cr_assert(str_is(f->function, "android.os.Looper.loop"));
            cr_assert_not(f->flags & TM_FRAME_HAS_MODULE);
            cr_assert(f->flags & TM_FRAME_HAS_ADDR);
            cr_assert_eq(f->addr, 0x70010);
            continue;
        }
        cr_assert(f->flags & TM_FRAME_JAVA, "%s is a Java mapping", paths[k]);
        cr_assert(m->mappings[f->mapping - 1].flags & TM_MAPPING_JAVA);
        cr_assert(f->flags & TM_FRAME_HAS_FUNCTION);
        cr_assert(f->flags & TM_FRAME_HAS_MODULE);
        cr_assert(str_is(f->function, "loop"), "%s: function %.*s", paths[k], TM_STR_ARGS(f->function));
        cr_assert(str_is(f->module, "android.os.Looper"), "%s: module %.*s", paths[k],
                  TM_STR_ARGS(f->module));
        cr_assert_not(f->flags & TM_FRAME_HAS_ADDR, "%s: Java frames have no address", paths[k]);
    }
    const tm_prof_frame *f = leaf(m, N);
    cr_assert(f->flags & TM_FRAME_JAVA);
    cr_assert(str_is(f->function, "nodots"));
    cr_assert_not(f->flags & TM_FRAME_HAS_MODULE);
    cr_assert_not(f->flags & TM_FRAME_HAS_ADDR);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_frames, deep_stack_of_5000_frames_with_default_limits) {
    enum { DEPTH = 5000 };
    tb_buf b = {0};
    uint64_t *ids = malloc(DEPTH * sizeof *ids);
    cr_assert_not_null(ids);
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    for (uint64_t k = 0; k < DEPTH; k++) {
        char name[16];
        snprintf(name, sizeof name, "f%llu", (unsigned long long)k);
        fn_name(&b, k + 1, name);
        tb_frame(&b, k + 1, k + 1, 0, k);
        ids[k] = k + 1; /* root (f0) first */
    }
    tb_callstack(&b, 1, ids, DEPTH, 1);
    tb_close(&b, in);
    perf_body(&b, 1, 1, 1);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 1);
    cr_assert_eq(stack_of(m, 0)->len, DEPTH);
    cr_assert_eq(m->n_frames, DEPTH);
    for (uint32_t d = 0; d < DEPTH; d++) {
        char name[16];
        snprintf(name, sizeof name, "f%u", (unsigned)(DEPTH - 1 - d));
        const tm_prof_frame *f = frame_at(m, 0, d);
        if (!str_is(f->function, name))
            cr_assert_fail("depth %u: %.*s, expected %s", d, TM_STR_ARGS(f->function), name);
    }
    free(ids);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_frames, multi_segment_mapping_path_joined_with_slash) {
    tb_buf b = {0};
    static const uint64_t segs[] = {1, 2, 3, 4};
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    path_str(&b, 1, "apex");
    path_str(&b, 2, "com.android.runtime");
    path_str(&b, 3, "lib64");
    path_str(&b, 4, "libc.so");
    fn_name(&b, 1, "malloc");
    mapping_paths(&b, 1, 0x1000, 0x2000, segs, 4, 0);
    tb_frame(&b, 1, 1, 1, 0x10);
    callstack1(&b, 1, 1);
    tb_close(&b, in);
    perf_body(&b, 1, 1, 1);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 1);
    const tm_prof_frame *f = leaf(m, 0);
    static const char want[] = "apex/com.android.runtime/lib64/libc.so";
    cr_assert(str_is(f->package, want), "package %.*s", TM_STR_ARGS(f->package));
    cr_assert_eq(m->n_mappings, 1);
    cr_assert(str_is(m->mappings[0].path, want));
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_frames, mapping_path_stops_at_unresolvable_segment) {
    tb_buf b = {0};
    static const uint64_t segs[] = {1, 99, 3};
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    path_str(&b, 1, "system");
    path_str(&b, 3, "libc.so");
    fn_name(&b, 1, "malloc");
    mapping_paths(&b, 1, 0x1000, 0x2000, segs, 3, 1);
    tb_frame(&b, 1, 1, 1, 0x10);
    callstack1(&b, 1, 1);
    tb_close(&b, in);
    perf_body(&b, 1, 1, 1);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 1); /* a bad path iid does not drop the sample */
    cr_assert(str_is(leaf(m, 0)->package, "system"), "package %.*s", TM_STR_ARGS(leaf(m, 0)->package));
    tm_trace_free(t);
    tb_free(&b);
}

/* An epoch's first InternedData whose mapping 1 has path segments 1 and 2,
 * segment 2 not interned (the path stops at "system") unless `full`, with
 * frame 1 in it at rel_pc and callstack 1 = {frame 1}. */
static void clear_with_path(tb_buf *b, uint32_t seq, uint64_t ts, uint64_t rel_pc, bool full) {
    static const uint64_t segs[] = {1, 2};
    size_t p = tb_packet_open(b, seq, ts, TB_SEQ_CLEARED);
    size_t in = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    path_str(b, 1, "system");
    if (full) path_str(b, 2, "libc.so");
    fn_name(b, 1, "malloc");
    mapping_paths(b, 1, 0x1000, 0x2000, segs, 2, 1);
    tb_frame(b, 1, 1, 1, rel_pc);
    callstack1(b, 1, 1);
    tb_close(b, in);
    tb_close(b, p);
}

static void clear_with_half_path(tb_buf *b, uint32_t seq, uint64_t ts, uint64_t rel_pc) {
    clear_with_path(b, seq, ts, rel_pc, false);
}

static void intern_segment_2(tb_buf *b, uint32_t seq, uint64_t ts) {
    size_t p = tb_packet_open(b, seq, ts, TB_SEQ_NEEDS);
    size_t in = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    path_str(b, 2, "libc.so");
    tb_close(b, in);
    tb_close(b, p);
}

static void perf_sample_at(tb_buf *b, uint32_t seq, uint64_t ts, uint32_t tid) {
    size_t p = tb_packet_open(b, seq, ts, TB_SEQ_NEEDS);
    perf_body(b, 1, tid, 1);
    tb_close(b, p);
}

/* Parses b and checks that its samples' leaf frames have these packages, in order. */
static void expect_packages(tb_buf *b, const char *const *want, size_t n) {
    tm_trace *t = parse(b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, n);
    for (size_t k = 0; k < n; k++)
        cr_assert(str_is(leaf(m, k)->package, want[k]), "sample %zu: package %.*s, expected %s", k,
                  TM_STR_ARGS(leaf(m, k)->package), want[k]);
    tm_trace_free(t);
    tb_free(b);
}

/* Sequences that began their epochs with the same message share
 * resolutions only while neither added to it: a mapping one resolved while
 * a path segment was missing resolves in full in the other once that one
 * interns the segment, whether it asks its twin or its copy. */
Test(trace_frames, twin_resolved_without_an_entry_the_other_interned) {
    tb_buf b = {0};
    clear_with_half_path(&b, 1, 5, 0x10);
    clear_with_half_path(&b, 2, 6, 0x10);  /* seq 1's twin */
    perf_sample_at(&b, 1, 10, 11);         /* system */
    intern_segment_2(&b, 2, 20);
    perf_sample_at(&b, 2, 30, 12);         /* system/libc.so */
    /* other bytes than seq 1's: seq 4 resolves on its own, not through tables of seq 1's class */
    clear_with_half_path(&b, 3, 40, 0x20);
    clear_with_half_path(&b, 4, 41, 0x20); /* seq 3 is its twin, seq 4 seq 3's copy */
    perf_sample_at(&b, 4, 50, 14);         /* system */
    intern_segment_2(&b, 3, 60);
    perf_sample_at(&b, 3, 70, 13);         /* system/libc.so */

    static const char *const want[] = {"system", "system/libc.so", "system", "system/libc.so"};
    expect_packages(&b, want, 4);
}

/* A sequence that re-sends its tables at a clear and then interns a path
 * segment they lacked resolves the mapping in full in the new epoch: what
 * it resolved without the segment is not carried over. */
Test(trace_frames, resolution_without_an_entry_not_carried_to_an_epoch_with_it) {
    tb_buf b = {0};
    clear_with_half_path(&b, 1, 5, 0x10);
    perf_sample_at(&b, 1, 10, 11);        /* system */
    clear_with_half_path(&b, 1, 20, 0x10); /* the same bytes again */
    intern_segment_2(&b, 1, 25);
    perf_sample_at(&b, 1, 30, 12);        /* system/libc.so */

    static const char *const want[] = {"system", "system/libc.so"};
    expect_packages(&b, want, 2);
}

/* Nor through a twin: seq 1 resolved the mapping without segment 2, then
 * interned it, and began its next epoch with all it had in one message,
 * which seq 2 copies: seq 2 has the segment from the start. */
Test(trace_frames, resolution_without_an_entry_not_carried_to_a_twin_with_it) {
    tb_buf b = {0};
    clear_with_half_path(&b, 1, 5, 0x10);
    perf_sample_at(&b, 1, 10, 11);            /* system */
    intern_segment_2(&b, 1, 15);
    clear_with_path(&b, 1, 20, 0x10, true);   /* everything seq 1 had, the same bytes each */
    clear_with_path(&b, 2, 25, 0x10, true);   /* seq 1's twin */
    perf_sample_at(&b, 2, 30, 12);            /* system/libc.so */

    static const char *const want[] = {"system", "system/libc.so"};
    expect_packages(&b, want, 2);
}

Test(trace_frames, frames_deduplicated_across_sequences) {
    tb_buf b = {0};
    static const uint64_t path1[] = {1}, path3[] = {3};
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "main");
    fn_name(&b, 2, "work");
    path_str(&b, 1, "libapp.so");
    mapping_paths(&b, 1, 0x1000, 0x2000, path1, 1, 0);
    tb_frame(&b, 1, 1, 1, 0x10);
    tb_frame(&b, 2, 2, 1, 0x20);
    const uint64_t cs1[] = {1, 2};
    tb_callstack(&b, 1, cs1, 2, 0);
    tb_close(&b, in);
    perf_body(&b, 10, 11, 1);
    tb_close(&b, p);
    /* Sequence 2: the same content under other iids. */
    p = tb_packet_open(&b, 2, 6, TB_SEQ_CLEARED);
    in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 5, "work");
    fn_name(&b, 6, "main");
    path_str(&b, 3, "libapp.so");
    mapping_paths(&b, 4, 0x1000, 0x2000, path3, 1, 0);
    tb_frame(&b, 8, 6, 4, 0x10);
    tb_frame(&b, 9, 5, 4, 0x20);
    const uint64_t cs3[] = {8, 9};
    tb_callstack(&b, 3, cs3, 2, 1);
    tb_close(&b, in);
    perf_body(&b, 10, 12, 3);
    tb_close(&b, p);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 2);
    assert_sample(m, 0, 5, 11, "work");
    assert_sample(m, 1, 6, 12, "work");
    cr_assert_eq(m->n_frames, 2);
    cr_assert_eq(m->n_mappings, 1);
    cr_assert_eq(m->n_stacks, 1);
    cr_assert_eq(m->samples[0].stack, m->samples[1].stack);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_frames, missing_function_name_iid_drops_the_sample) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "good");
    tb_frame(&b, 1, 7, 0, 0x10); /* function_name_id 7 was never interned */
    tb_frame(&b, 2, 1, 0, 0x20);
    callstack1(&b, 1, 1);
    const uint64_t mixed[] = {2, 1};
    tb_callstack(&b, 2, mixed, 2, 0);
    callstack1(&b, 3, 2);
    tb_close(&b, in);
    tb_close(&b, p);
    tb_perf_sample(&b, 1, 10, 1, 1, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 20, 1, 1, 2, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 30, 1, 1, 3, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(m->n_samples, 1);
    assert_sample(m, 0, 30, 1, "good");
    cr_assert_eq(stack_of(m, 0)->len, 1);
    cr_assert_eq(st->dropped_unresolved, 2);
    cr_assert_eq(st->perf_samples, 3);
    tm_trace_free(t);
    tb_free(&b);
}

Test(trace_frames, missing_callstack_frame_or_mapping_iid_drops_the_sample) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 5, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&b, 1, "good");
    tb_frame(&b, 1, 1, 0, 0x10);
    tb_frame(&b, 2, 1, 30, 0x20); /* mapping 30 was never interned */
    const uint64_t no_frame[] = {1, 50};
    tb_callstack(&b, 1, no_frame, 2, 0); /* frame 50 was never interned */
    callstack1(&b, 2, 2);
    callstack1(&b, 3, 1);
    tb_close(&b, in);
    tb_close(&b, p);
    tb_perf_sample(&b, 1, 10, 1, 1, 99, TB_SEQ_NEEDS); /* callstack 99: never interned */
    tb_perf_sample(&b, 1, 20, 1, 1, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 30, 1, 1, 2, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 40, 1, 1, 3, TB_SEQ_NEEDS);

    tm_trace *t = parse(&b);
    const tm_profile *m = tm_trace_profile(t);
    cr_assert_eq(m->n_samples, 1);
    assert_sample(m, 0, 40, 1, "good");
    cr_assert_eq(tm_trace_get_stats(t)->dropped_unresolved, 3);
    tm_trace_free(t);
    tb_free(&b);
}

/* ==================================================================== */
/* The producer's loss accounting: TraceStats, and previous_packet_dropped */
/* on a packet that also clears the state (how a recorder restarts).      */
/* ==================================================================== */

/* A TraceStats packet with one BufferStats per entry of overwritten[]. */
static void trace_stats_packet(tb_buf *t, const uint64_t *overwritten, const uint64_t *discarded,
                               const uint64_t *writer_loss, size_t n_buffers) {
    size_t p = tb_packet_open(t, 0, TB_NO_TS, 0);
    size_t s = tb_open(t, TM_PF_PACKET_TRACE_STATS);
    for (size_t b = 0; b < n_buffers; b++) {
        size_t bs = tb_open(t, TM_PF_TRACE_STATS_BUFFER_STATS);
        tb_uint(t, TM_PF_BUFFER_STATS_CHUNKS_OVERWRITTEN, overwritten[b]);
        tb_uint(t, TM_PF_BUFFER_STATS_BYTES_OVERWRITTEN, overwritten[b] * 4096);
        tb_uint(t, TM_PF_BUFFER_STATS_CHUNKS_DISCARDED, discarded[b]);
        tb_uint(t, TM_PF_BUFFER_STATS_TRACE_WRITER_PACKET_LOSS, writer_loss[b]);
        tb_close(t, bs);
    }
    tb_close(t, s);
    tb_close(t, p);
}

/* The service-wide TraceStats.chunks_discarded (all producers, all
 * sessions) is not this trace's loss: kept apart, in the model and the
 * report. */
Test(trace_losses, service_chunks_discarded_kept_apart) {
    tb_buf t = {0};
    clear_with_one_frame(&t, 1, 1000, "f");
    tb_perf_sample(&t, 1, 2000, 1, 1, 1, TB_SEQ_NEEDS);
    size_t p = tb_packet_open(&t, 0, TB_NO_TS, 0);
    size_t s = tb_open(&t, TM_PF_PACKET_TRACE_STATS);
    size_t bs = tb_open(&t, TM_PF_TRACE_STATS_BUFFER_STATS);
    tb_uint(&t, TM_PF_BUFFER_STATS_CHUNKS_DISCARDED, 2);
    tb_close(&t, bs);
    tb_uint(&t, TM_PF_TRACE_STATS_CHUNKS_DISCARDED, 9);
    tb_close(&t, s);
    tb_close(&t, p);
    tm_trace *tr = parse(&t);
    const tm_trace_stats *st = tm_trace_get_stats(tr);
    cr_assert_eq(st->buffer_chunks_discarded, 2);
    cr_assert_eq(st->service_chunks_discarded, 9);
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    memset(&err, 0, sizeof err);
    cr_assert_eq(tm_write_report(tr, &sink, &err), TM_OK, "%s", err.message);
    cr_assert_not_null(strstr(out.data, "\"chunks_discarded\":2,"), "%s", out.data);
    cr_assert_not_null(strstr(out.data, "\"tracing_service_all_sessions\":{\"chunks_discarded\":9}"), "%s", out.data);
    tu_membuf_free(&out);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(trace_losses, last_trace_stats_summed_over_buffers) {
    tb_buf t = {0};
    clear_with_one_frame(&t, 1, 1000, "f");
    tb_perf_sample(&t, 1, 2000, 1, 1, 1, TB_SEQ_NEEDS);
    const uint64_t early[] = {1, 0}, none[] = {0, 0};
    trace_stats_packet(&t, early, none, none, 2);
    const uint64_t over[] = {3, 4}, disc[] = {0, 5}, lost[] = {7, 0};
    trace_stats_packet(&t, over, disc, lost, 2); /* the final snapshot supersedes the first */
    tm_trace *tr = parse(&t);
    const tm_trace_stats *s = tm_trace_get_stats(tr);
    cr_assert_eq(s->trace_stats_packets, 2);
    cr_assert_eq(s->buffer_chunks_overwritten, 7);
    cr_assert_eq(s->buffer_bytes_overwritten, 7 * 4096);
    cr_assert_eq(s->buffer_chunks_discarded, 5);
    cr_assert_eq(s->writer_packet_loss, 7);
    cr_assert_eq(s->samples_kept, 1);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(trace_losses, dropped_packet_with_a_clear_counts_the_loss_and_resolves_after) {
    tb_buf t = {0};
    clear_with_one_frame(&t, 1, 1000, "before");
    tb_perf_sample(&t, 1, 2000, 1, 1, 1, TB_SEQ_NEEDS);
    /* the writer lost packets, then restarted its interning in one packet */
    size_t p = tb_packet_open(&t, 1, 3000, TB_SEQ_CLEARED | TB_SEQ_NEEDS);
    tb_uint(&t, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    fn_name(&t, 1, "after");
    tb_frame(&t, 1, 1, 0, 1);
    callstack1(&t, 1, 1);
    tb_close(&t, i);
    tb_close(&t, p);
    tb_perf_sample(&t, 1, 4000, 1, 1, 1, TB_SEQ_NEEDS);
    tm_trace *tr = parse(&t);
    const tm_trace_stats *s = tm_trace_get_stats(tr);
    cr_assert_eq(s->data_losses, 1);
    cr_assert_eq(s->sequences_with_data_loss, 1);
    cr_assert_eq(s->samples_kept, 2, "the state was cleared in the same packet: nothing is stale");
    cr_assert_eq(s->dropped_stale_interning, 0);
    assert_sample(tm_trace_profile(tr), 1, 4000, 1, "after");
    tm_trace_free(tr);
    tb_free(&t);
}

/* ---- runs of usual PerfSample packets ---- */

/* A PerfSample packet, in the form writers write (timestamp, sequence id,
 * flags, payload: the reader takes runs of these in one call) or, with
 * reordered, the same fields with the sequence id first (read one by one
 * by the general path): both forms must give the same model. payload:
 * the PerfSample's bytes. */
static void perf_packet(tb_buf *t, bool reordered, uint32_t seq, uint64_t ts, uint32_t flags, const tb_buf *payload) {
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    if (reordered) tb_uint(t, TM_PF_PACKET_SEQUENCE_ID, seq);
    tb_uint(t, TM_PF_PACKET_TIMESTAMP, ts);
    if (!reordered) tb_uint(t, TM_PF_PACKET_SEQUENCE_ID, seq);
    tb_uint(t, TM_PF_PACKET_SEQUENCE_FLAGS, flags);
    tb_bytes(t, TM_PF_PACKET_PERF_SAMPLE, payload->data, payload->len);
    tb_close(t, p);
}

/* PerfSample fields in any order; a field of 0 is left out. */
static void perf_fields3(tb_buf *b, uint32_t f1, uint64_t v1, uint32_t f2, uint64_t v2, uint32_t f3, uint64_t v3) {
    b->len = 0;
    if (f1) tb_uint(b, f1, v1);
    if (f2) tb_uint(b, f2, v2);
    if (f3) tb_uint(b, f3, v3);
}

static void usual_perf(tb_buf *t, bool reordered, uint32_t seq, uint64_t ts, uint32_t tid, uint64_t cs) {
    tb_buf pl = {0};
    perf_fields3(&pl, TM_PF_PERF_SAMPLE_PID, 200, TM_PF_PERF_SAMPLE_TID, tid, TM_PF_PERF_SAMPLE_CALLSTACK_IID, cs);
    perf_packet(t, reordered, seq, ts, TB_SEQ_NEEDS, &pl);
    tb_free(&pl);
}

/* Runs of usual PerfSample packets (longer than one call takes) broken by
 * everything the run must stop at: another sequence, a lost packet, stale
 * samples, a clear, a timestamp in another clock, payloads of other forms,
 * and a last packet cut off. */
static void build_sample_runs(tb_buf *t, bool reordered) {
    for (uint32_t seq = 1; seq <= 2; seq++) {
        size_t p = tb_packet_open(t, seq, 50, TB_SEQ_CLEARED);
        intern_ab(t, seq == 1 ? "a" : "p", seq == 1 ? "b" : "q");
        tb_close(t, p);
    }
    uint64_t ts = 1000000;
    for (int i = 0; i < 80; i++) /* 9: no such callstack, dropped */
        usual_perf(t, reordered, 1, ts += 1000, 201 + (uint32_t)(i / 7 % 3), i % 13 == 12 ? 9 : 1 + (uint64_t)(i % 2));
    for (int i = 0; i < 5; i++) usual_perf(t, reordered, 2, ts += 1000, 301, 2);
    tb_buf pl = {0};
    perf_fields3(&pl, TM_PF_PERF_SAMPLE_CPU, 3, TM_PF_PERF_SAMPLE_PID, 200, TM_PF_PERF_SAMPLE_TID, 202);
    perf_packet(t, reordered, 2, ts += 1000, TB_SEQ_NEEDS, &pl); /* no callstack */
    perf_fields3(&pl, TM_PF_PERF_SAMPLE_TID, 203, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1, TM_PF_PERF_SAMPLE_PID, 200);
    perf_packet(t, reordered, 2, ts += 1000, TB_SEQ_NEEDS, &pl); /* fields in another order */
    perf_fields3(&pl, TM_PF_PERF_SAMPLE_TID, 203, TM_PF_PERF_SAMPLE_TIMEBASE_COUNT, 5, TM_PF_PERF_SAMPLE_CALLSTACK_IID,
                 2);
    perf_packet(t, reordered, 2, ts += 1000, TB_SEQ_NEEDS, &pl); /* a timebase count, no pid */
    perf_with_clock(t, 2, ts += 1000, CLK_MONOTONIC);
    usual_perf(t, reordered, 2, ts += 1000, 301, 1);
    usual_perf(t, reordered, 1, ts += 1000, 201, 2);
    size_t p = tb_packet_open(t, 1, ts += 1000, TB_SEQ_NEEDS); /* a lost packet: the state goes */
    tb_uint(t, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    perf_body(t, 200, 201, 1);
    tb_close(t, p);
    for (int i = 0; i < 3; i++) usual_perf(t, reordered, 1, ts += 1000, 201, 1); /* stale */
    p = tb_packet_open(t, 1, ts += 1000, TB_SEQ_CLEARED);
    intern_ab(t, "c", "d");
    tb_close(t, p);
    for (int i = 0; i < 40; i++) usual_perf(t, reordered, 1, ts += 1000, 204, 1 + (uint64_t)(i % 2));
    perf_fields3(&pl, TM_PF_PERF_SAMPLE_PID, 200, TM_PF_PERF_SAMPLE_TID, 205, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
    tb_tag(t, TM_PF_TRACE_PACKET, 2); /* length-delimited, cut off: 40 bytes announced */
    tb_varint(t, 40);
    tb_uint(t, TM_PF_PACKET_TIMESTAMP, ts + 1000);
    tb_free(&pl);
}

static tm_status parse_runs(bool reordered, uint64_t max_samples, int strict, tm_trace **t, tm_error *err) {
    tb_buf b = {0};
    build_sample_runs(&b, reordered);
    tm_options opts;
    memset(&opts, 0, sizeof opts);
    opts.limits.max_samples = max_samples;
    opts.strict = strict;
    memset(err, 0, sizeof *err);
    tm_status st = tm_trace_parse(b.data, b.len, &opts, t, err);
    tb_free(&b);
    return st;
}

Test(trace_samples, runs_of_usual_perf_samples_read_as_one_by_one) {
    tm_trace *a = NULL, *b = NULL;
    tm_error ea, eb;
    cr_assert_eq(parse_runs(false, 0, 0, &a, &ea), TM_OK, "%s", ea.message);
    cr_assert_eq(parse_runs(true, 0, 0, &b, &eb), TM_OK, "%s", eb.message);
    assert_same_profile(a, b);
    const tm_trace_stats *sa = tm_trace_get_stats(a), *sb = tm_trace_get_stats(b);
    cr_assert(memcmp(sa, sb, sizeof *sa) == 0, "the stats differ");
    cr_assert_eq(sa->perf_samples, 80 + 5 + 2 + 1 + 1 + 1 + 40); /* the one without a callstack and stale ones not */
    cr_assert_eq(sa->dropped_unresolved, 6);
    cr_assert_eq(sa->perf_samples_without_callstack, 1);
    cr_assert_eq(sa->data_losses, 1);
    cr_assert_eq(sa->packets_skipped_incremental, 1 + 3);
    cr_assert(sa->truncated);
    tm_trace_free(a);
    tm_trace_free(b);
    /* Errors name the same packet: the sample limit passed inside a run,
     * and the cut-off packet in strict mode. */
    for (uint64_t max = 30; max <= 120; max += 45) {
        cr_assert_eq(parse_runs(false, max, 0, &a, &ea), TM_ERR_LIMIT);
        cr_assert_eq(parse_runs(true, max, 0, &b, &eb), TM_ERR_LIMIT);
        cr_assert_eq(ea.offset, eb.offset, "max_samples %llu: at %llu and %llu", (unsigned long long)max,
                     (unsigned long long)ea.offset, (unsigned long long)eb.offset);
        cr_assert_str_eq(ea.message, eb.message);
    }
    cr_assert_eq(parse_runs(false, 0, 1, &a, &ea), TM_ERR_TRUNCATED);
    cr_assert_eq(parse_runs(true, 0, 1, &b, &eb), TM_ERR_TRUNCATED);
    cr_assert_eq(ea.offset, eb.offset);
}

/* A usual PerfSample packet with its cpu (UINT32_MAX: none) and pid. */
static void usual_perf_cpu(tb_buf *t, bool reordered, uint32_t seq, uint64_t ts, uint32_t cpu, uint32_t pid,
                           uint32_t tid, uint64_t cs) {
    tb_buf pl = {0};
    if (cpu != UINT32_MAX) tb_uint(&pl, TM_PF_PERF_SAMPLE_CPU, cpu);
    tb_uint(&pl, TM_PF_PERF_SAMPLE_PID, pid);
    tb_uint(&pl, TM_PF_PERF_SAMPLE_TID, tid);
    tb_uint(&pl, TM_PF_PERF_SAMPLE_CALLSTACK_IID, cs);
    perf_packet(t, reordered, seq, ts, TB_SEQ_NEEDS, &pl);
    tb_free(&pl);
}

/* Within a run, packets mostly repeat the one before's shape, which the
 * reader then reads by its offsets: packets whose varints change length
 * (timestamps crossing 2^35 and 2^56, pids and tids of one to four bytes,
 * callstack iids past 127 and unknown), with and without a cpu, and a
 * generation whose default clock is not the trace's, read through runs and
 * one by one, give the same profile and stats. */
Test(trace_samples, runs_of_samples_that_change_shape) {
    tm_trace *t[2];
    tb_buf bufs[2] = {{0}, {0}}; /* the traces keep views into them */
    for (int reordered = 0; reordered < 2; reordered++) {
        tb_buf b = {0};
        const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
        const uint64_t vals[] = {10000, 1000};
        tb_clock_snapshot(&b, 1, ids, vals, 2);
        for (uint32_t seq = 2; seq <= 3; seq++) {
            size_t p = tb_packet_open(&b, seq, 50, TB_SEQ_CLEARED);
            if (seq == 3) { /* its samples' time is MONOTONIC */
                size_t d = tb_open(&b, TM_PF_PACKET_DEFAULTS);
                tb_uint(&b, TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID, CLK_MONOTONIC);
                tb_close(&b, d);
            }
            intern_ab(&b, "a", "b");
            tb_close(&b, p);
        }
        static const uint32_t ptids[] = {7, 200, 70000, 3000000, 200, 200};
        static const uint64_t starts[] = {(1ull << 35) - 40 * 1000, (1ull << 56) - 40 * 1000, 1000000};
        for (uint32_t seq = 2; seq <= 3; seq++) {
            for (int k = 0; k < 3; k++) {
                uint64_t ts = starts[k];
                for (int i = 0; i < 90; i++) {
                    uint32_t cpu = i % 17 == 16 ? UINT32_MAX : i / 30 == 1 ? 300 : 2;
                    uint64_t cs = i % 11 == 10 ? 200 : i % 23 == 22 ? 3 : 1 + (uint64_t)(i % 2);
                    usual_perf_cpu(&b, reordered, seq, ts += 1000, cpu, ptids[i / 9 % 6], ptids[(i / 5 + k) % 6],
                                   cs);
                }
            }
        }
        tm_options opts;
        memset(&opts, 0, sizeof opts);
        tm_error err;
        cr_assert_eq(tm_trace_parse(b.data, b.len, &opts, &t[reordered], &err), TM_OK, "%s", err.message);
        bufs[reordered] = b;
    }
    assert_same_profile(t[0], t[1]);
    const tm_trace_stats *sa = tm_trace_get_stats(t[0]), *sb = tm_trace_get_stats(t[1]);
    cr_assert(memcmp(sa, sb, sizeof *sa) == 0, "the stats differ");
    cr_assert_eq(sa->perf_samples, 2 * 3 * 90);
    cr_assert_gt(sa->dropped_unresolved, 0);
    tm_trace_free(t[0]);
    tm_trace_free(t[1]);
    tb_free(&bufs[0]);
    tb_free(&bufs[1]);
}
