/*
 * test_aggregate.c — the helpers every non-Sample-v2 exporter shares
 * (src/aggregate.c): thread filters and labels, frame display names and
 * kinds, per-thread sampling periods, per-stack counts; and input format
 * detection (tm_input_detect), which decides how convert reads its input.
 * The profile model is filled directly, so each expectation follows from
 * the records built here.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "profile/aggregate.h"

typedef struct model {
    tm_mem mem;
    tm_arena arena;
    tm_profile p;
} model;

static model m;

static void model_open(void) {
    tm_mem_init(&m.mem, NULL);
    tm_arena_init(&m.arena, &m.mem);
    tm_profile_init(&m.p, &m.mem, &m.arena);
}

static void model_close(void) {
    tm_profile_release(&m.p);
    tm_arena_release(&m.arena);
}

TestSuite(aggregate, .init = model_open, .fini = model_close);

static tm_str S(const char *s) {
    tm_str r = {(const uint8_t *)s, strlen(s)};
    return r;
}

static uint32_t thread(int64_t tid, int64_t pid, const char *name) {
    uint32_t t;
    cr_assert_eq(tm_profile_thread(&m.p, tid, &t), TM_OK);
    m.p.threads[t].pid = pid;
    if (name) tm_profile_name_thread(&m.p, t, S(name), 1);
    return t;
}

static uint32_t frame(const tm_prof_frame *f) {
    uint32_t id;
    cr_assert_eq(tm_profile_intern_frame(&m.p, f, &id), TM_OK);
    return id;
}

static uint32_t named_frame(const char *fn) {
    tm_prof_frame f = {.function = S(fn), .flags = TM_FRAME_HAS_FUNCTION};
    return frame(&f);
}

static uint32_t stack2(uint32_t leaf, uint32_t root) {
    uint32_t ids[2] = {leaf, root}, s;
    cr_assert_eq(tm_profile_intern_stack(&m.p, ids, 2, &s), TM_OK);
    return s;
}

static int str_is(tm_str s, const char *want) { return s.len == strlen(want) && memcmp(s.data, want, s.len) == 0; }

Test(aggregate, thread_labels_and_filters) {
    uint32_t main_t = thread(100, 100, NULL), worker = thread(101, 100, "worker"), anon = thread(102, 100, NULL);
    char buf[32];
    cr_assert(str_is(tm_thread_label(&m.p, main_t, buf), "main"));
    cr_assert(str_is(tm_thread_label(&m.p, worker, buf), "worker"));
    cr_assert(str_is(tm_thread_label(&m.p, anon, buf), "tid-102"));

    uint8_t *sel;
    tm_error err;
    tm_thread_filter by_name = {.name = "worker"};
    cr_assert_eq(tm_thread_select(&m.p, &by_name, &sel, &err), TM_OK);
    cr_assert(!sel[main_t] && sel[worker] && !sel[anon]);
    tm_thread_selection_free(&m.p, sel);

    tm_thread_filter by_label = {.name = "main"}; /* the unnamed main thread's label matches */
    cr_assert_eq(tm_thread_select(&m.p, &by_label, &sel, &err), TM_OK);
    cr_assert(sel[main_t] && !sel[worker]);
    tm_thread_selection_free(&m.p, sel);

    tm_thread_filter by_tid = {.tid = 102, .by_tid = 1};
    cr_assert_eq(tm_thread_select(&m.p, &by_tid, &sel, &err), TM_OK);
    cr_assert(!sel[main_t] && !sel[worker] && sel[anon]);
    tm_thread_selection_free(&m.p, sel);

    cr_assert_eq(tm_thread_select(&m.p, NULL, &sel, &err), TM_OK);
    cr_assert(sel[main_t] && sel[worker] && sel[anon]);
    tm_thread_selection_free(&m.p, sel);

    tm_thread_filter missing = {.name = "nope"};
    cr_assert_eq(tm_thread_select(&m.p, &missing, &sel, &err), TM_ERR_INVALID_ARG);
    cr_assert_null(sel);
    cr_assert(strstr(err.message, "nope"), "message names the thread: %s", err.message);
    tm_thread_filter both = {.name = "worker", .tid = 100, .by_tid = 1};
    cr_assert_eq(tm_thread_select(&m.p, &both, &sel, &err), TM_ERR_INVALID_ARG);
}

Test(aggregate, frame_labels_and_kinds) {
    tm_prof_mapping lib = {.path = S("/system/lib64/libc.so"), .start = 0x7000, .end = 0x9000};
    tm_prof_mapping kernel = {.path = S("[kernel.kallsyms]")};
    uint32_t lib_id, kernel_id;
    cr_assert_eq(tm_profile_intern_mapping(&m.p, &lib, &lib_id), TM_OK);
    cr_assert_eq(tm_profile_intern_mapping(&m.p, &kernel, &kernel_id), TM_OK);

    tm_prof_frame native = {.function = S("memcpy"), .mapping = lib_id + 1, .addr = 0x7100, .rel_pc = 0x100,
                        .flags = TM_FRAME_HAS_FUNCTION | TM_FRAME_HAS_ADDR};
    tm_prof_frame java = {.function = S("onDraw"), .module = S("io.app.View"),
                      .flags = TM_FRAME_HAS_FUNCTION | TM_FRAME_HAS_MODULE | TM_FRAME_JAVA};
    tm_prof_frame unnamed = {.mapping = lib_id + 1, .addr = 0x7abc, .rel_pc = 0xabc, .flags = TM_FRAME_HAS_ADDR};
    tm_prof_frame bare = {.addr = 0x1234, .flags = TM_FRAME_HAS_ADDR};
    tm_prof_frame in_kernel = {.function = S("schedule"), .mapping = kernel_id + 1, .flags = TM_FRAME_HAS_FUNCTION};
    tm_prof_frame high = {.function = S("irq"), .addr = 0xffffffff81000000ull,
                      .flags = TM_FRAME_HAS_FUNCTION | TM_FRAME_HAS_ADDR};
    uint32_t ids[6] = {frame(&native), frame(&java), frame(&unnamed), frame(&bare), frame(&in_kernel), frame(&high)};

    tm_frame_labels l;
    cr_assert_eq(tm_frame_labels_build(&m.p, true, &l), TM_OK);
    cr_assert_eq(l.n, 6);
    cr_assert(str_is(l.of[ids[0]], "memcpy"));
    cr_assert(str_is(l.of[ids[1]], "io.app.View.onDraw"));
    cr_assert(str_is(l.of[ids[2]], "0xabc (libc.so)"), "got %.*s", TM_STR_ARGS(l.of[ids[2]]));
    cr_assert(str_is(l.of[ids[3]], "0x1234"));
    cr_assert(str_is(l.of[ids[4]], "schedule"));
    tm_frame_labels_release(&m.p, &l);

    cr_assert_eq(tm_frame_kind_of(&m.p, ids[0]), TM_KIND_NATIVE);
    cr_assert_eq(tm_frame_kind_of(&m.p, ids[1]), TM_KIND_JAVA);
    cr_assert_eq(tm_frame_kind_of(&m.p, ids[2]), TM_KIND_UNKNOWN);
    cr_assert_eq(tm_frame_kind_of(&m.p, ids[4]), TM_KIND_KERNEL);
    cr_assert_eq(tm_frame_kind_of(&m.p, ids[5]), TM_KIND_KERNEL);
}

Test(aggregate, periods_are_median_gaps_per_thread) {
    uint32_t a = thread(1, 1, "a"), b = thread(2, 1, "b"), lone = thread(3, 1, "lone");
    uint32_t s = stack2(named_frame("leaf"), named_frame("root"));
    /* a: every 10 ms with one 500 ms pause; b: every 4 ms; lone: one sample. */
    int64_t t = 0;
    for (int i = 0; i < 20; i++) {
        t += i == 10 ? 500000000 : 10000000;
        cr_assert_eq(tm_profile_add_sample(&m.p, t, s, a), TM_OK);
    }
    for (int i = 0; i < 30; i++) cr_assert_eq(tm_profile_add_sample(&m.p, 1000 + i * 4000000ll, s, b), TM_OK);
    cr_assert_eq(tm_profile_add_sample(&m.p, 7, s, lone), TM_OK);
    cr_assert_eq(tm_profile_sort_samples(&m.p), TM_OK);

    int64_t *per, overall;
    cr_assert_eq(tm_thread_periods(&m.p, NULL, 0, true, &per, &overall, NULL), TM_OK);
    cr_assert_eq(per[a], 10000000, "a: %lld", (long long)per[a]);
    cr_assert_eq(per[b], 4000000, "b: %lld", (long long)per[b]);
    /* 19 + 29 gaps: 18 of 10 ms, 1 of 500 ms, 29 of 4 ms -> median 4 ms */
    cr_assert_eq(overall, 4000000);
    cr_assert_eq(per[lone], overall);
    tm_thread_periods_free(&m.p, per);

    cr_assert_eq(tm_thread_periods(&m.p, NULL, 2500, true, &per, &overall, NULL), TM_OK);
    cr_assert(per[a] == 2500 && per[b] == 2500 && overall == 2500);
    tm_thread_periods_free(&m.p, per);
}

Test(aggregate, periods_sample_long_threads_sparsely) {
    uint32_t a = thread(1, 1, NULL);
    uint32_t s = stack2(named_frame("leaf"), named_frame("root"));
    /* 100 000 samples, 1 ms apart except every 7th gap of 3 ms: the median
     * over 64 evenly spread gaps is still 1 ms. */
    int64_t t = 0;
    for (int i = 0; i < 100000; i++) {
        t += i % 7 == 6 ? 3000000 : 1000000;
        cr_assert_eq(tm_profile_add_sample(&m.p, t, s, a), TM_OK);
    }
    int64_t *per, overall;
    cr_assert_eq(tm_thread_periods(&m.p, NULL, 0, true, &per, &overall, NULL), TM_OK);
    cr_assert_eq(per[a], 1000000);
    tm_thread_periods_free(&m.p, per);
}

Test(aggregate, stack_counts_in_first_seen_order) {
    uint32_t a = thread(1, 1, NULL), b = thread(2, 1, NULL);
    uint32_t root = named_frame("root");
    uint32_t s1 = stack2(named_frame("x"), root), s2 = stack2(named_frame("y"), root);
    uint32_t order[][2] = {{s2, a}, {s1, a}, {s2, b}, {s2, a}, {s1, b}};
    for (size_t i = 0; i < 5; i++)
        cr_assert_eq(tm_profile_add_sample(&m.p, (int64_t)i, order[i][0], order[i][1]), TM_OK);

    tm_stack_counts c;
    cr_assert_eq(tm_stack_counts_build(&m.p, NULL, 0, &c), TM_OK);
    cr_assert_eq(c.n, 2);
    cr_assert(c.v[0].stack == s2 && c.v[0].count == 3 && c.v[0].thread == TM_ABSENT);
    cr_assert(c.v[1].stack == s1 && c.v[1].count == 2);
    tm_stack_counts_release(&m.p, &c);

    cr_assert_eq(tm_stack_counts_build(&m.p, NULL, 1, &c), TM_OK);
    cr_assert_eq(c.n, 4);
    cr_assert(c.v[0].stack == s2 && c.v[0].thread == a && c.v[0].count == 2);
    cr_assert(c.v[1].stack == s1 && c.v[1].thread == a && c.v[1].count == 1);
    cr_assert(c.v[2].stack == s2 && c.v[2].thread == b && c.v[2].count == 1);
    cr_assert(c.v[3].stack == s1 && c.v[3].thread == b && c.v[3].count == 1);
    tm_stack_counts_release(&m.p, &c);

    uint8_t only_b[3] = {0, 1, 0};
    cr_assert_eq(tm_stack_counts_build(&m.p, only_b, 0, &c), TM_OK);
    cr_assert_eq(c.n, 2);
    cr_assert(c.v[0].stack == s2 && c.v[0].count == 1 && c.v[1].stack == s1 && c.v[1].count == 1);
    tm_stack_counts_release(&m.p, &c);
}

Test(aggregate, detects_input_formats) {
    static const uint8_t perfetto[] = {0x0a, 0x02, 0x08, 0x01};
    cr_assert_eq(tm_input_detect(perfetto, sizeof perfetto), TM_INPUT_PERFETTO);
    cr_assert_eq(tm_input_detect("", 0), TM_INPUT_PERFETTO);
    cr_assert_eq(tm_input_detect("{\"version\":\"2\"}", 15), TM_INPUT_SAMPLE_V2);
    cr_assert_eq(tm_input_detect("\n {}", 4), TM_INPUT_PERFETTO); /* a leading '\n' is a Perfetto tag */
    cr_assert_eq(tm_input_detect(" \t{}", 4), TM_INPUT_SAMPLE_V2);
    const char *folded = "main;run;draw 42\nmain 1\n";
    cr_assert_eq(tm_input_detect(folded, strlen(folded)), TM_INPUT_FOLDED);
    const char *spaces = "main;draw text 7\r\n";
    cr_assert_eq(tm_input_detect(spaces, strlen(spaces)), TM_INPUT_FOLDED);
    cr_assert_eq(tm_input_detect("main;run;draw\n", 14), TM_INPUT_PERFETTO);
    cr_assert_eq(tm_input_detect("main 12x\n", 9), TM_INPUT_FOLDED); /* meant as folded: the reader says why not */
    cr_assert_eq(tm_input_detect(" 12\n", 4), TM_INPUT_PERFETTO);
    const char *commented = "# from perf script\r\n\r\n \nmain;x 3\n";
    cr_assert_eq(tm_input_detect(commented, strlen(commented)), TM_INPUT_FOLDED);
    cr_assert_eq(tm_input_detect("# only a comment\n", 17), TM_INPUT_PERFETTO);
    cr_assert_str_eq(tm_input_format_name(TM_INPUT_FOLDED), "folded");
    cr_assert_null(tm_input_format_name(TM_INPUT_AUTO));
}
