/*
 * test_speedscope.c — the speedscope writer (src/out_speedscope.c).
 *
 * Traces are built with trace_builder.h with known threads, timestamps
 * and frames; the output is parsed with jansson and checked against what
 * the test put in: the file's fixed fields, shared frames deduplicated by
 * (name, file), one sampled profile per thread named "LABEL (tid N)",
 * samples as shared indices root first, weights from the inferred or given
 * period with idle gaps as empty samples, weights adding up to endValue -
 * startValue, folded (untimed) input with unit "none", thread filters,
 * the fallback period, sink and allocation failures.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

#define MS 1000000ull

enum { FN_MAIN = 1, FN_WORK, FN_DUP };

/* Callstacks, root first. */
enum {
    CS_A = 1, /* main;work          (libx.so) */
    CS_B,     /* main;dup  @0x30    (libx.so) */
    CS_C,     /* main;dup  @0x40    (libx.so): same name and file as B's dup */
    CS_D,     /* main;work          (work in liby.so: another shared frame) */
    CS_EMPTY
};

typedef struct smp {
    uint64_t ts_ms;
    uint32_t tid;
    uint64_t cs;
} smp;

static void build(tb_buf *t, const smp *s, size_t n) {
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[2] = {TB_BOOT0, 1700000000000000000ull};
    tb_clock_snapshot(t, 0, ids, vals, 2);
    size_t p = tb_packet_open(t, 2, 1, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(t, 10, 10, "ui;thread");
    tb_pt_thread(t, 12, 10, "bg");
    tb_close(t, pt);
    tb_close(t, p);

    size_t pkt = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_MAIN, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_WORK, "work", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_DUP, "dup", 3);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "libx.so", 7);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 2, "liby.so", 7);
    const uint64_t px[1] = {1}, py[1] = {2};
    tb_mapping(t, 1, 0, 0x10000, 0x20000, px, 1);
    tb_mapping(t, 2, 0, 0x30000, 0x40000, py, 1);
    tb_frame(t, 1, FN_MAIN, 1, 0x10);
    tb_frame(t, 2, FN_WORK, 1, 0x20);
    tb_frame(t, 3, FN_DUP, 1, 0x30);
    tb_frame(t, 4, FN_DUP, 1, 0x40);
    tb_frame(t, 5, FN_WORK, 2, 0x50);
    const uint64_t a[] = {1, 2}, b[] = {1, 3}, c[] = {1, 4}, d[] = {1, 5};
    tb_callstack(t, CS_A, a, 2, 0);
    tb_callstack(t, CS_B, b, 2, 0);
    tb_callstack(t, CS_C, c, 2, 0);
    tb_callstack(t, CS_D, d, 2, 0);
    tb_callstack(t, CS_EMPTY, NULL, 0, 0);
    tb_close(t, in);
    tb_close(t, pkt);
    for (size_t i = 0; i < n; i++) tb_perf_sample(t, 1, TB_BOOT0 + s[i].ts_ms * MS, 10, s[i].tid, s[i].cs, 0);
}

/* tid 10: gaps 1, 1, 8, 1 ms (period 1 ms, one idle gap of 7 ms);
 * tid 11: two samples at the same time, then 1 ms later;
 * tid 12: one empty-stack sample (period: the median over all threads). */
static const smp SAMPLES[] = {
    {0, 10, CS_A}, {1, 10, CS_A}, {2, 10, CS_B}, {3, 11, CS_B},  {3, 11, CS_B},
    {4, 11, CS_A}, {5, 12, CS_EMPTY}, {10, 10, CS_C}, {11, 10, CS_D},
};
#define N_SAMPLES (sizeof SAMPLES / sizeof *SAMPLES)

static tm_trace *parse_with(const void *data, size_t len, const tm_options *o) {
    tm_trace *t = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(data, len, o, &t, &err);
    cr_assert_eq(st, TM_OK, "parse: %s: %s", tm_status_str(st), err.message);
    return t;
}

static json_t *speedscope(const tm_trace *t, const tm_speedscope_options *o) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    tm_status st = tm_write_speedscope(t, o, &sink, &err);
    cr_assert_eq(st, TM_OK, "tm_write_speedscope: %s: %s", tm_status_str(st), err.message);
    json_error_t je;
    json_t *root = json_loadb(m.data, m.len, 0, &je);
    cr_assert_not_null(root, "not JSON (%s at %d): %s", je.text, je.position, m.data);
    tu_membuf_free(&m);
    return root;
}

static json_t *profile_named(json_t *root, const char *name) {
    json_t *profiles = json_object_get(root, "profiles"), *p;
    size_t i;
    json_array_foreach(profiles, i, p) {
        if (strcmp(json_string_value(json_object_get(p, "name")), name) == 0) return p;
    }
    cr_assert_fail("no profile named %s", name);
    return NULL;
}

/* Sample k of a profile as "name@file;name@file" (root first). */
static void sample_text(json_t *root, json_t *profile, size_t k, char *buf, size_t cap) {
    json_t *frames = json_object_get(json_object_get(root, "shared"), "frames");
    json_t *s = json_array_get(json_object_get(profile, "samples"), k), *idx;
    cr_assert(json_is_array(s), "sample %zu is not an array", k);
    size_t i, n = 0;
    buf[0] = 0;
    json_array_foreach(s, i, idx) {
        cr_assert(json_is_integer(idx));
        json_t *f = json_array_get(frames, (size_t)json_integer_value(idx));
        cr_assert_not_null(f, "frame index %lld out of range", json_integer_value(idx));
        const char *file = json_string_value(json_object_get(f, "file"));
        n += (size_t)snprintf(buf + n, cap - n, "%s%s@%s", i ? ";" : "", json_string_value(json_object_get(f, "name")),
                              file ? file : "-");
        cr_assert_lt(n, cap);
    }
}

static void expect_profile(json_t *root, const char *name, const char *unit, long long start, long long end,
                           const char *const *samples, const long long *weights, size_t n) {
    json_t *p = profile_named(root, name);
    cr_assert_str_eq(json_string_value(json_object_get(p, "type")), "sampled");
    cr_assert_str_eq(json_string_value(json_object_get(p, "unit")), unit);
    cr_assert_eq(json_integer_value(json_object_get(p, "startValue")), start, "%s startValue %lld", name,
                 json_integer_value(json_object_get(p, "startValue")));
    cr_assert_eq(json_integer_value(json_object_get(p, "endValue")), end, "%s endValue %lld", name,
                 json_integer_value(json_object_get(p, "endValue")));
    json_t *ws = json_object_get(p, "weights");
    cr_assert_eq(json_array_size(json_object_get(p, "samples")), n, "%s: %zu samples", name,
                 json_array_size(json_object_get(p, "samples")));
    cr_assert_eq(json_array_size(ws), n);
    long long sum = 0;
    char buf[256];
    for (size_t k = 0; k < n; k++) {
        sample_text(root, p, k, buf, sizeof buf);
        cr_assert_str_eq(buf, samples[k], "%s sample %zu", name, k);
        cr_assert_eq(json_integer_value(json_array_get(ws, k)), weights[k], "%s weight %zu: %lld", name, k,
                     json_integer_value(json_array_get(ws, k)));
        sum += weights[k];
    }
    cr_assert_eq(sum, end - start, "weights add up to the profile's span");
}

#define MAIN "main@libx.so"
#define WORK MAIN ";work@libx.so"
#define DUP MAIN ";dup@libx.so"
#define WORK_Y MAIN ";work@liby.so"
#define T(ms) ((long long)(TB_BOOT0 + (ms) * MS))

Test(speedscope, file_fields_frames_and_profiles) {
    tb_buf b = {0};
    build(&b, SAMPLES, N_SAMPLES);
    tm_trace *t = parse_with(b.data, b.len, NULL);
    json_t *root = speedscope(t, NULL);
    cr_assert_str_eq(json_string_value(json_object_get(root, "$schema")),
                     "https://www.speedscope.app/file-format-schema.json");
    cr_assert_str_eq(json_string_value(json_object_get(root, "exporter")), "tracemill");
    cr_assert_str_eq(json_string_value(json_object_get(root, "name")), "tracemill");
    cr_assert_eq(json_integer_value(json_object_get(root, "activeProfileIndex")), 0);
    cr_assert_eq(json_array_size(json_object_get(root, "profiles")), 3);

    /* Shared frames: main, work, dup (both dup frames) in libx.so, work in
     * liby.so — each (name, file) once. */
    json_t *frames = json_object_get(json_object_get(root, "shared"), "frames"), *f;
    cr_assert_eq(json_array_size(frames), 4);
    size_t i;
    json_array_foreach(frames, i, f) {
        for (size_t j = 0; j < i; j++) {
            json_t *g = json_array_get(frames, j);
            cr_assert(!json_equal(f, g), "frames %zu and %zu are equal", j, i);
        }
    }

    /* tid 10 at 0, 1, 2, 10, 11 ms: period 1 ms; the 8 ms gap after 2 ms is
     * 1 ms of sample and a 7 ms idle sample. */
    const char *s10[] = {WORK, WORK, DUP, "", DUP, WORK_Y};
    const long long w10[] = {1 * MS, 1 * MS, 1 * MS, 7 * MS, 1 * MS, 1 * MS};
    expect_profile(root, "ui;thread (tid 10)", "nanoseconds", T(0), T(12), s10, w10, 6);
    /* tid 11 at 3, 3, 4 ms: the first weighs 0 (same time as the next). */
    const char *s11[] = {DUP, DUP, WORK};
    const long long w11[] = {0, 1 * MS, 1 * MS};
    expect_profile(root, "tid-11 (tid 11)", "nanoseconds", T(3), T(5), s11, w11, 3);
    /* tid 12: one empty sample, the overall period (1 ms). */
    const char *s12[] = {""};
    const long long w12[] = {1 * MS};
    expect_profile(root, "bg (tid 12)", "nanoseconds", T(5), T(6), s12, w12, 1);
    json_decref(root);
    tm_trace_free(t);
    tb_free(&b);
}

Test(speedscope, given_period_and_name) {
    tb_buf b = {0};
    build(&b, SAMPLES, N_SAMPLES);
    tm_trace *t = parse_with(b.data, b.len, NULL);
    tm_speedscope_options o;
    memset(&o, 0, sizeof o);
    o.period_ns = 500000;
    o.name = "my \"profile\"";
    o.threads.by_tid = 1;
    o.threads.tid = 10;
    json_t *root = speedscope(t, &o);
    cr_assert_str_eq(json_string_value(json_object_get(root, "name")), "my \"profile\"");
    cr_assert_eq(json_array_size(json_object_get(root, "profiles")), 1);
    /* Every 1 ms gap is 0.5 ms of sample and 0.5 ms idle. */
    const char *s10[] = {WORK, "", WORK, "", DUP, "", DUP, "", WORK_Y};
    const long long h = 500000;
    const long long w10[] = {h, h, h, h, h, 15 * h, h, h, h};
    expect_profile(root, "ui;thread (tid 10)", "nanoseconds", T(0), T(11) + h, s10, w10, 9);
    json_decref(root);
    tm_trace_free(t);
    tb_free(&b);
}

Test(speedscope, filter_keeps_only_used_frames) {
    tb_buf b = {0};
    build(&b, SAMPLES, N_SAMPLES);
    tm_trace *t = parse_with(b.data, b.len, NULL);
    tm_speedscope_options o;
    memset(&o, 0, sizeof o);
    o.threads.name = "tid-11";
    json_t *root = speedscope(t, &o);
    cr_assert_eq(json_array_size(json_object_get(root, "profiles")), 1);
    /* main, dup, work of libx.so; not work of liby.so. */
    cr_assert_eq(json_array_size(json_object_get(json_object_get(root, "shared"), "frames")), 3);
    json_decref(root);

    o.threads.name = "bg";
    root = speedscope(t, &o);
    cr_assert_eq(json_array_size(json_object_get(json_object_get(root, "shared"), "frames")), 0);
    json_decref(root);

    o.threads.name = "nobody";
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    cr_assert_eq(tm_write_speedscope(t, &o, &sink, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(m.len, 0);
    tm_trace_free(t);
    tb_free(&b);
}

Test(speedscope, single_sample_uses_the_fallback_period) {
    const smp one[] = {{7, 11, CS_A}};
    tb_buf b = {0};
    build(&b, one, 1);
    tm_trace *t = parse_with(b.data, b.len, NULL);
    json_t *root = speedscope(t, NULL);
    const char *s[] = {WORK};
    const long long w[] = {1 * MS};
    expect_profile(root, "tid-11 (tid 11)", "nanoseconds", T(7), T(8), s, w, 1);
    json_decref(root);
    tm_trace_free(t);
    tb_free(&b);
}

Test(speedscope, folded_input_is_untimed) {
    const char *text = "a;b 3\na 2\na;b 4\n[no frames] 1\n";
    tm_options o;
    memset(&o, 0, sizeof o);
    o.input = TM_INPUT_FOLDED;
    tm_trace *t = parse_with(text, strlen(text), &o);
    json_t *root = speedscope(t, NULL);
    const char *s[] = {"a@-;b@-", "a@-", "a@-;b@-", ""};
    const long long w[] = {3, 2, 4, 1};
    expect_profile(root, "folded (tid 0)", "none", 0, 10, s, w, 4);
    json_t *f = json_array_get(json_object_get(json_object_get(root, "shared"), "frames"), 0);
    cr_assert_null(json_object_get(f, "file"), "no file is written when none is known");
    json_decref(root);
    tm_trace_free(t);
}

Test(speedscope, weights_match_span_on_the_demo_trace) {
    size_t len;
    char *data = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert_not_null(data);
    tm_trace *t = parse_with(data, len, NULL);
    json_t *root = speedscope(t, NULL);
    json_t *profiles = json_object_get(root, "profiles"), *p;
    size_t i, non_idle = 0;
    json_array_foreach(profiles, i, p) {
        json_t *ws = json_object_get(p, "weights"), *ss = json_object_get(p, "samples"), *w;
        cr_assert_eq(json_array_size(ws), json_array_size(ss));
        long long sum = 0;
        size_t k;
        json_array_foreach(ws, k, w) sum += json_integer_value(w);
        cr_assert_eq(sum, json_integer_value(json_object_get(p, "endValue")) -
                              json_integer_value(json_object_get(p, "startValue")));
        json_array_foreach(ss, k, w) non_idle += json_array_size(w) > 0;
    }
    /* The demo has no empty stacks: every non-empty sample is a trace sample. */
    cr_assert_eq(non_idle, tm_trace_get_stats(t)->samples_kept);
    json_decref(root);
    tm_trace_free(t);
    free(data);
}

static int fail_write(void *ctx, const void *data, size_t len) {
    (void)ctx, (void)data, (void)len;
    return 1;
}

Test(speedscope, sink_failure_is_io_error) {
    tb_buf b = {0};
    build(&b, SAMPLES, N_SAMPLES);
    tm_trace *t = parse_with(b.data, b.len, NULL);
    tm_sink sink = {.write = fail_write, .ctx = NULL};
    tm_error err;
    cr_assert_eq(tm_write_speedscope(t, NULL, &sink, &err), TM_ERR_IO);
    cr_assert_eq(tm_write_speedscope(NULL, NULL, &sink, &err), TM_ERR_INVALID_ARG);
    tm_trace_free(t);
    tb_free(&b);
}

Test(speedscope, every_allocation_failure_is_clean) {
    tb_buf b = {0};
    build(&b, SAMPLES, N_SAMPLES);
    tu_fail_alloc fa = {.fail_at = -1};
    tm_alloc alloc = {.malloc_fn = tu_fa_malloc, .realloc_fn = tu_fa_realloc, .free_fn = tu_fa_free, .ctx = &fa};
    tm_options o;
    memset(&o, 0, sizeof o);
    o.alloc = &alloc;
    tm_trace *t = parse_with(b.data, b.len, &o);
    long live = fa.live, before = fa.count;
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    cr_assert_eq(tm_write_speedscope(t, NULL, &sink, &err), TM_OK);
    long n = fa.count - before;
    cr_assert_gt(n, 5);
    cr_assert_eq(fa.live, live, "the writer frees its scratch memory");
    for (long k = 0; k < n; k++) {
        fa.fail_at = fa.count + k;
        out.len = 0;
        tm_status st = tm_write_speedscope(t, NULL, &sink, &err);
        cr_assert_eq(st, TM_ERR_NOMEM, "allocation %ld of %ld: %s", k, n, tm_status_str(st));
        cr_assert_eq(fa.live, live, "allocation %ld of %ld: leaked %ld bytes", k, n, fa.live - live);
    }
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&b);
}
