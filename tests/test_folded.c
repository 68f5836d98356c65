/*
 * test_folded.c — folded stacks out and in: tm_write_folded and
 * tm_write_folded_diff (src/out_folded.c) and the folded-stack reader
 * tm_folded_read (src/in_folded.c, reached through tm_trace_parse).
 *
 * Traces are built with trace_builder.h; every expected line is written
 * from the frames, threads and samples the test itself put in the trace.
 * Covered: line text (root first, ';'-joined, counts summed), merging of
 * stacks whose labels coincide, label sanitising, byte-wise sorting, the
 * empty-stack line, thread prefix and filter, the diff's two columns
 * (stacks on one side only, filters matching one side), folded input
 * (CRLF, comments, blanks, spaces in frames, "[no frames]", errors with
 * byte offsets and line numbers, limits), the write -> read -> write round
 * trip, every allocation failure of reader and writers, and the public
 * accessors the folded lines are made of (tm_trace_sample, tm_trace_stack,
 * tm_trace_frame_label: what the Python package reads).
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"


/* Function name iids. */
enum { FN_MAIN = 1, FN_WORK, FN_DUP, FN_ODD, FN_LEAF };
static const char ODD[] = "semi;colon\nnew\rline";

/* Callstack iids (frames root first, as Perfetto writes them). */
enum {
    CS_MAIN_WORK = 1, /* main;work */
    CS_DUP_A,         /* main;dup (dup at rel_pc 0x30) */
    CS_DUP_B,         /* main;dup (dup at rel_pc 0x40: another frame, same name) */
    CS_DEEP,          /* main;work;leaf */
    CS_EMPTY,         /* no frames */
    CS_ODD,           /* main;<ODD> */
    CS_ADDR           /* main;<no function, rel_pc 0x70 in libx.so> */
};

typedef struct smp {
    uint64_t ts;
    uint32_t tid;
    uint64_t cs;
} smp;

static void add_interned(tb_buf *t) {
    size_t pkt = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_MAIN, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_WORK, "work", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_DUP, "dup", 3);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_ODD, ODD, sizeof ODD - 1);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, FN_LEAF, "leaf", 4);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "libx.so", 7);
    const uint64_t path[1] = {1};
    tb_mapping(t, 1, 0, 0x10000, 0x20000, path, 1);
    tb_frame(t, 1, FN_MAIN, 1, 0x10);
    tb_frame(t, 2, FN_WORK, 1, 0x20);
    tb_frame(t, 3, FN_DUP, 1, 0x30);
    tb_frame(t, 4, FN_DUP, 1, 0x40);
    tb_frame(t, 5, FN_ODD, 1, 0x50);
    tb_frame(t, 6, FN_LEAF, 1, 0x60);
    tb_frame(t, 7, 0, 1, 0x70);
    const uint64_t mw[] = {1, 2}, da[] = {1, 3}, db[] = {1, 4}, deep[] = {1, 2, 6}, odd[] = {1, 5}, addr[] = {1, 7};
    tb_callstack(t, CS_MAIN_WORK, mw, 2, 0);
    tb_callstack(t, CS_DUP_A, da, 2, 0);
    tb_callstack(t, CS_DUP_B, db, 2, 1);
    tb_callstack(t, CS_DEEP, deep, 3, 0);
    tb_callstack(t, CS_EMPTY, NULL, 0, 0);
    tb_callstack(t, CS_ODD, odd, 2, 0);
    tb_callstack(t, CS_ADDR, addr, 2, 0);
    tb_close(t, in);
    tb_close(t, pkt);
}

/* Threads of pid 10: tid 10 named "ui;thread", tid 11 unnamed, tid 12 "bg". */
static void add_threads(tb_buf *t) {
    size_t p = tb_packet_open(t, 2, 1, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(t, 10, 10, "ui;thread");
    tb_pt_thread(t, 12, 10, "bg");
    tb_close(t, pt);
    tb_close(t, p);
}

static void build(tb_buf *t, const smp *s, size_t n) {
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[2] = {TB_BOOT0, 1700000000000000000ull};
    tb_clock_snapshot(t, 0, ids, vals, 2);
    add_threads(t);
    add_interned(t);
    for (size_t i = 0; i < n; i++) tb_perf_sample(t, 1, s[i].ts, 10, s[i].tid, s[i].cs, 0);
}

static tm_trace *parse_with(const void *data, size_t len, const tm_options *o) {
    tm_trace *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_trace_parse(data, len, o, &t, &err);
    cr_assert_eq(st, TM_OK, "parse: %s at %llu: %s", tm_status_str(st), (unsigned long long)err.offset,
                 err.message);
    return t;
}

static tm_trace *parse(const void *data, size_t len) { return parse_with(data, len, NULL); }

static tm_trace *parse_folded(const char *text) {
    tm_options o;
    memset(&o, 0, sizeof o);
    o.input = TM_INPUT_FOLDED;
    return parse_with(text, strlen(text), &o);
}

/* tm_write_folded into a NUL-terminated string (free it). */
static char *folded(const tm_trace *t, const tm_folded_options *o) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    tm_status st = tm_write_folded(t, o, &sink, &err);
    cr_assert_eq(st, TM_OK, "tm_write_folded: %s: %s", tm_status_str(st), err.message);
    return m.data ? m.data : strdup("");
}

static char *folded_diff(const tm_trace *a, const tm_trace *b, const tm_folded_options *o) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    tm_status st = tm_write_folded_diff(a, b, o, &sink, &err);
    cr_assert_eq(st, TM_OK, "tm_write_folded_diff: %s: %s", tm_status_str(st), err.message);
    return m.data ? m.data : strdup("");
}

/* The trace most tests use: what each stack holds is in the comments. */
static const smp MIXED[] = {
    {TB_BOOT0 + 1000, 10, CS_MAIN_WORK}, {TB_BOOT0 + 2000, 10, CS_MAIN_WORK}, {TB_BOOT0 + 3000, 11, CS_MAIN_WORK},
    {TB_BOOT0 + 4000, 10, CS_DUP_A},     {TB_BOOT0 + 5000, 11, CS_DUP_A},     {TB_BOOT0 + 6000, 12, CS_DUP_B},
    {TB_BOOT0 + 7000, 11, CS_DEEP},      {TB_BOOT0 + 8000, 10, CS_EMPTY},     {TB_BOOT0 + 9000, 12, CS_EMPTY},
};

/* The trace's names are views into b: free b after the trace. */
static tm_trace *mixed_trace(tb_buf *b) {
    build(b, MIXED, sizeof MIXED / sizeof *MIXED);
    return parse(b->data, b->len);
}

/* ==== tm_write_folded ================================================== */

Test(folded_out, lines_root_first_summed_and_sorted) {
    tb_buf mb = {0};
    tm_trace *t = mixed_trace(&mb);
    char *out = folded(t, NULL);
    /* main;work: 3 samples; main;dup: 2 (frame at 0x30) + 1 (0x40);
     * main;work;leaf: 1; empty: 2. '[' < 'm'; "main;work " < "main;work;". */
    cr_assert_str_eq(out, "[no frames] 2\n"
                          "main;dup 3\n"
                          "main;work 3\n"
                          "main;work;leaf 1\n");
    free(out);
    tm_trace_free(t);
    tb_free(&mb);
}

Test(folded_out, same_named_frames_are_merged_into_one_line) {
    tb_buf mb = {0};
    tm_trace *t = mixed_trace(&mb);
    const tm_profile *p = tm_trace_profile(t);
    /* The model keeps the two dup frames (and their stacks) apart ... */
    size_t dups = 0;
    for (size_t i = 0; i < p->n_frames; i++)
        dups += p->frames[i].function.len == 3 && memcmp(p->frames[i].function.data, "dup", 3) == 0;
    cr_assert_eq(dups, 2, "the trace should hold two frames named dup");
    /* ... and the folded text has one line for them. */
    char *out = folded(t, NULL);
    cr_assert_not_null(strstr(out, "\nmain;dup 3\n"), "%s", out);
    cr_assert_eq(strstr(out, "main;dup 3") - out, (long)strlen("[no frames] 2\n"));
    free(out);
    tm_trace_free(t);
    tb_free(&mb);
}

Test(folded_out, thread_prefix_names_the_root) {
    tb_buf mb = {0};
    tm_trace *t = mixed_trace(&mb);
    tm_folded_options o;
    memset(&o, 0, sizeof o);
    o.thread_prefix = 1;
    char *out = folded(t, &o);
    /* tid 10 "ui;thread" (';' made ':'), tid 11 unnamed -> "tid-11",
     * tid 12 "bg"; an empty stack is the thread and the [no frames] marker
     * (the thread alone would read as a frame named like it). */
    cr_assert_str_eq(out, "bg;[no frames] 1\n"
                          "bg;main;dup 1\n"
                          "tid-11;main;dup 1\n"
                          "tid-11;main;work 1\n"
                          "tid-11;main;work;leaf 1\n"
                          "ui:thread;[no frames] 1\n"
                          "ui:thread;main;dup 1\n"
                          "ui:thread;main;work 2\n");
    free(out);
    tm_trace_free(t);
    tb_free(&mb);
}

Test(folded_out, thread_filter_by_tid_and_name) {
    tb_buf mb = {0};
    tm_trace *t = mixed_trace(&mb);
    tm_folded_options o;
    memset(&o, 0, sizeof o);
    o.threads.by_tid = 1;
    o.threads.tid = 11;
    char *out = folded(t, &o);
    cr_assert_str_eq(out, "main;dup 1\nmain;work 1\nmain;work;leaf 1\n");
    free(out);
    memset(&o, 0, sizeof o);
    o.threads.name = "bg";
    out = folded(t, &o);
    cr_assert_str_eq(out, "[no frames] 1\nmain;dup 1\n");
    free(out);

    o.threads.name = "nope";
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    cr_assert_eq(tm_write_folded(t, &o, &sink, &err), TM_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(err.message, "nope"), "%s", err.message);
    cr_assert_eq(m.len, 0, "nothing is written on a filter error");
    tu_membuf_free(&m);
    tm_trace_free(t);
    tb_free(&mb);
}

Test(folded_out, labels_cannot_break_the_format) {
    const smp s[] = {{TB_BOOT0 + 1000, 10, CS_ODD}, {TB_BOOT0 + 2000, 10, CS_ADDR}};
    tb_buf b = {0};
    build(&b, s, 2);
    tm_trace *t = parse(b.data, b.len);
    char *out = folded(t, NULL);
    /* ';' -> ':', '\n' and '\r' -> ' '; a frame without a function is
     * "0xREL_PC (library)". */
    cr_assert_str_eq(out, "main;0x70 (libx.so) 1\n"
                          "main;semi:colon new line 1\n");
    free(out);
    tm_trace_free(t);
    tb_free(&b);
}

/* Byte-wise order of whole lines, including the count: "a 5" and "a 1x 3"
 * sort by '5' vs '1'. Built from folded input so names are free text. */
Test(folded_out, sorted_by_the_bytes_of_the_whole_line) {
    tm_trace *t = parse_folded("a 5\n"
                               "a 1x 3\n"
                               "a\tb 2\n"
                               "B 1\n"
                               "\xc3\xa9 4\n");
    char *out = folded(t, NULL);
    cr_assert_str_eq(out, "B 1\n"
                          "a\tb 2\n"
                          "a 1x 3\n"
                          "a 5\n"
                          "\xc3\xa9 4\n");
    free(out);
    tm_trace_free(t);
}

Test(folded_out, empty_trace_writes_nothing) {
    tb_buf b = {0};
    build(&b, NULL, 0);
    tm_trace *t = parse(b.data, b.len);
    char *out = folded(t, NULL);
    cr_assert_str_eq(out, "");
    free(out);
    tm_trace_free(t);
    tb_free(&b);
}

static int fail_write(void *ctx, const void *data, size_t len) {
    (void)ctx, (void)data, (void)len;
    return 1;
}

Test(folded_out, sink_failure_is_io_error) {
    tb_buf mb = {0};
    tm_trace *t = mixed_trace(&mb);
    tm_sink sink = {.write = fail_write, .ctx = NULL};
    tm_error err;
    cr_assert_eq(tm_write_folded(t, NULL, &sink, &err), TM_ERR_IO);
    cr_assert_eq(tm_write_folded_diff(t, t, NULL, &sink, &err), TM_ERR_IO);
    cr_assert_eq(tm_write_folded(NULL, NULL, &sink, &err), TM_ERR_INVALID_ARG);
    tm_trace_free(t);
    tb_free(&mb);
}

/* ==== tm_write_folded_diff ============================================= */

Test(folded_diff, two_columns_with_stacks_of_either_side) {
    tb_buf mb = {0};
    tm_trace *base = mixed_trace(&mb);
    const smp s[] = {{TB_BOOT0 + 1000, 10, CS_MAIN_WORK}, {TB_BOOT0 + 2000, 10, CS_ODD}, {TB_BOOT0 + 3000, 12, CS_DUP_B},
                     {TB_BOOT0 + 4000, 12, CS_DUP_A},     {TB_BOOT0 + 5000, 11, CS_ODD}};
    tb_buf b = {0};
    build(&b, s, 5);
    tm_trace *now = parse(b.data, b.len);
    char *out = folded_diff(base, now, NULL);
    /* base: [no frames] 2, main;dup 3, main;work 3, main;work;leaf 1
     * now:  main;dup 2, main;semi:colon new line 2, main;work 1 */
    cr_assert_str_eq(out, "[no frames] 2 0\n"
                          "main;dup 3 2\n"
                          "main;semi:colon new line 0 2\n"
                          "main;work 3 1\n"
                          "main;work;leaf 1 0\n");
    free(out);
    /* Swapped sides swap the columns. */
    out = folded_diff(now, base, NULL);
    cr_assert_str_eq(out, "[no frames] 0 2\n"
                          "main;dup 2 3\n"
                          "main;semi:colon new line 2 0\n"
                          "main;work 1 3\n"
                          "main;work;leaf 0 1\n");
    free(out);
    tm_trace_free(now);
    tm_trace_free(base);
    tb_free(&mb);
    tb_free(&b);
}

Test(folded_diff, thread_filter_may_match_one_side_only) {
    tb_buf mb = {0};
    tm_trace *base = mixed_trace(&mb);
    tm_trace *now = parse_folded("x;y 7\n"); /* one thread, named "folded" */
    tm_folded_options o;
    memset(&o, 0, sizeof o);
    o.threads.name = "bg";
    char *out = folded_diff(base, now, &o);
    cr_assert_str_eq(out, "[no frames] 1 0\nmain;dup 1 0\n");
    free(out);
    o.threads.name = "folded";
    o.thread_prefix = 1;
    out = folded_diff(base, now, &o);
    cr_assert_str_eq(out, "folded;x;y 0 7\n");
    free(out);

    o.threads.name = "neither";
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    cr_assert_eq(tm_write_folded_diff(base, now, &o, &sink, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(m.len, 0);
    tm_trace_free(now);
    tm_trace_free(base);
    tb_free(&mb);
}

/* ==== folded input ===================================================== */

static int str_is(tm_str s, const char *c) { return s.len == strlen(c) && memcmp(s.data, c, s.len) == 0; }

/* Frame names of sample i, leaf first, joined by '|'. */
static void stack_names(const tm_profile *p, size_t i, char *buf, size_t cap) {
    const tm_prof_stack *s = &p->stacks[p->samples[i].stack];
    size_t n = 0;
    buf[0] = 0;
    for (uint32_t j = 0; j < s->len; j++) {
        const tm_prof_frame *f = &p->frames[p->frame_ids[s->off + j]];
        cr_assert_eq(f->flags, TM_FRAME_HAS_FUNCTION);
        n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", j ? "|" : "", TM_STR_ARGS(f->function));
        cr_assert_lt(n, cap);
    }
}

Test(folded_in, builds_the_model) {
    const char *text = "# a comment line\r\n"
                       "\r\n"
                       "main;do work;leaf 3\r\n"
                       "   \n"
                       "main;do work 10  \n"
                       "main;do work;leaf 4\n"
                       "[no frames] 2\n"
                       " 5"; /* one frame with an empty name; no final newline */
    tm_trace *t = parse_folded(text);
    const tm_profile *p = tm_trace_profile(t);
    cr_assert_eq(p->n_samples, 5);
    cr_assert(p->untimed);
    cr_assert_not_null(p->weights);
    cr_assert_eq(p->cap_samples, 5, "samples are reserved exactly");
    const uint64_t want_w[] = {3, 10, 4, 2, 5};
    const char *want_stack[] = {"leaf|do work|main", "do work|main", "leaf|do work|main", "", ""};
    const uint32_t want_len[] = {3, 2, 3, 0, 1};
    char buf[256];
    for (size_t i = 0; i < 5; i++) {
        cr_assert_eq(p->weights[i], want_w[i], "sample %zu weight %llu", i, (unsigned long long)p->weights[i]);
        cr_assert_eq(p->samples[i].ts, 0);
        cr_assert_eq(p->samples[i].thread, 0);
        cr_assert_eq(p->stacks[p->samples[i].stack].len, want_len[i], "sample %zu", i);
        stack_names(p, i, buf, sizeof buf);
        cr_assert_str_eq(buf, want_stack[i], "sample %zu", i);
    }
    cr_assert_eq(p->samples[0].stack, p->samples[2].stack, "equal stacks are interned once");
    cr_assert_eq(p->n_threads, 1);
    cr_assert_eq(p->threads[0].tid, 0);
    cr_assert_eq(p->threads[0].pid, 0);
    cr_assert_eq(p->threads[0].weight, 24);
    cr_assert_eq(p->n_frames, 4); /* main, do work, leaf, "" */
    cr_assert(str_is(p->frames[0].function, "main"));
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(st->samples_kept, 5);
    cr_assert_eq(st->frames, 4);
    cr_assert_eq(st->stacks, 4);
    cr_assert_eq(st->threads, 1);
    cr_assert_eq(st->bytes, strlen(text));
    /* Names are views into the input. */
    const char *main_at = strstr(text, "main");
    cr_assert_eq((const char *)p->frames[0].function.data, main_at);
    tm_trace_free(t);
}

Test(folded_in, detected_automatically) {
    const char *text = "a;b 1\n";
    cr_assert_eq(tm_input_detect(text, strlen(text)), TM_INPUT_FOLDED);
    tm_trace *t = parse(text, strlen(text));
    cr_assert_eq(tm_trace_profile(t)->n_samples, 1);
    tm_trace_free(t);
}

Test(folded_in, no_lines_is_an_empty_profile) {
    tm_trace *t = parse_folded("# only a comment\n\n");
    const tm_profile *p = tm_trace_profile(t);
    cr_assert_eq(p->n_samples, 0);
    cr_assert_eq(p->n_threads, 0);
    char *out = folded(t, NULL);
    cr_assert_str_eq(out, "");
    free(out);
    tm_trace_free(t);
}

static void expect_error(const char *text, const tm_limits *lim, tm_status code, size_t offset, const char *in_msg) {
    tm_options o;
    memset(&o, 0, sizeof o);
    o.input = TM_INPUT_FOLDED;
    if (lim) o.limits = *lim;
    tm_trace *t = (tm_trace *)1;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_trace_parse(text, strlen(text), &o, &t, &err);
    cr_assert_eq(st, code, "%s: got %s (%s)", text, tm_status_str(st), err.message);
    cr_assert_null(t);
    cr_assert_eq(err.code, code);
    cr_assert_eq(err.offset, offset, "%s: offset %llu, expected %zu (%s)", text, (unsigned long long)err.offset,
                 offset, err.message);
    cr_assert_not_null(strstr(err.message, in_msg), "message \"%s\" should contain \"%s\"", err.message, in_msg);
}

Test(folded_in, malformed_lines_name_offset_and_line) {
    const char *ok = "a;b 1\n# c\n";
    char text[128];
    static const char *bad[] = {
        "a;b\n",          /* no count */
        "a;b x1\n",       /* not a number */
        "a;b 1.5\n",      /* not an integer */
        "a;b -1\n",       /* not unsigned */
        "123\n",          /* no stack */
        "a 18446744073709551616\n", /* 2^64 */
        "a;b 12\t\n" "x",          /* the line after: "x" */
    };
    static const size_t extra[] = {0, 0, 0, 0, 0, 0, 8}; /* offset of the bad line within bad[i] */
    static const int line_no[] = {3, 3, 3, 3, 3, 3, 4};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        snprintf(text, sizeof text, "%s%s", ok, bad[i]);
        char want[32];
        snprintf(want, sizeof want, "line %d", line_no[i]);
        expect_error(text, NULL, TM_ERR_MALFORMED, strlen(ok) + extra[i], want);
    }
    /* 2^63 - 1 still fits: pprof and speedscope write counts as int64. */
    tm_trace *t = parse_folded("a 9223372036854775807\n");
    cr_assert_eq(tm_trace_profile(t)->weights[0], (uint64_t)INT64_MAX);
    tm_trace_free(t);
    expect_error("a 9223372036854775808\n", NULL, TM_ERR_MALFORMED, 0, "count past 2^63 - 1");
    expect_error("a 9223372036854775807\nb 1\n", NULL, TM_ERR_MALFORMED, 22, "line 2: the counts add up");
}

/* Text that is folded stacks with a malformed count is detected as folded
 * (it used to reach the Perfetto decoder: "unsupported wire type") and the
 * error names the folded problem and its line. */
Test(folded_in, malformed_counts_are_detected_as_folded) {
    static const struct {
        const char *text;
        size_t offset;
        const char *message;
    } cases[] = {
        {"main;foo 3.5\n", 0, "folded line 1: the count is not a whole number"},
        {"main;foo\t3\n", 0, "folded line 1: a tab before the count"},
        {"# profile\nmain;foo -3\n", 10, "folded line 2: negative count"},
        {"main;foo 99999999999999999999\n", 0, "folded line 1: count past 2^63 - 1"},
        {"main;foo 9223372036854775808\n", 0, "folded line 1: count past 2^63 - 1"},
        {"main;foo 3\nmain;bar 1e3\n", 11, "folded line 2: the count is not a decimal number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        size_t len = strlen(cases[i].text);
        cr_expect_eq(tm_input_detect(cases[i].text, len), TM_INPUT_FOLDED, "%s", cases[i].text);
        tm_trace *t = NULL;
        tm_error err;
        cr_expect_eq(tm_trace_parse(cases[i].text, len, NULL, &t, &err), TM_ERR_MALFORMED, "%s", cases[i].text);
        cr_expect_eq(err.offset, cases[i].offset, "%s: offset %llu", cases[i].text, (unsigned long long)err.offset);
        cr_expect(strstr(err.message, cases[i].message), "%s: %s", cases[i].text, err.message);
    }
}

Test(folded_in, byte_order_mark_is_skipped) {
    const char text[] = "\xef\xbb\xbfmain;foo 3\nmain 1\n";
    cr_assert_eq(tm_input_detect(text, sizeof text - 1), TM_INPUT_FOLDED);
    tm_trace *t = parse(text, sizeof text - 1);
    char *out = folded(t, NULL);
    cr_expect_str_eq(out, "main 1\nmain;foo 3\n");
    free(out);
    tm_trace_free(t);
    /* offsets still count the mark */
    expect_error("\xef\xbb\xbfmain;foo x\n", NULL, TM_ERR_MALFORMED, 3, "line 1");
}

Test(folded_in, limits_are_enforced) {
    tm_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.max_samples = 2;
    const char *three = "a 1\n#\nb 1\nc 1\n";
    expect_error(three, &lim, TM_ERR_LIMIT, strlen("a 1\n#\nb 1\n"), "max_samples");
    lim.max_samples = 3;
    tm_options o;
    memset(&o, 0, sizeof o);
    o.limits = lim;
    tm_trace *t = parse_with(three, strlen(three), &o);
    tm_trace_free(t);

    memset(&lim, 0, sizeof lim);
    lim.max_stack_depth = 3;
    expect_error("a;b;c 1\na;b;c;d 1\n", &lim, TM_ERR_LIMIT, 8, "max_stack_depth");
    memset(&lim, 0, sizeof lim);
    lim.max_unique_frames = 3;
    expect_error("a;b 1\nb;c 1\nd 1\n", &lim, TM_ERR_LIMIT, 12, "max_unique_frames");
}

/* ==== sample, stack and frame accessors ================================= */

/* The label of frame i (it fits in 64 bytes). */
static const char *label(const tm_trace *t, size_t i, char buf[64]) {
    size_t len;
    cr_assert_eq(tm_trace_frame_label(t, i, buf, 64, &len), TM_OK);
    cr_assert_eq(strlen(buf), len);
    return buf;
}

Test(accessors, samples_stacks_and_labels) {
    const smp s[] = {{TB_BOOT0 + 1000, 10, CS_ODD}, {TB_BOOT0 + 2000, 11, CS_ADDR}, {TB_BOOT0 + 3000, 12, CS_EMPTY},
                     {TB_BOOT0 + 4000, 12, CS_DEEP}};
    tb_buf b = {0};
    build(&b, s, 4);
    tm_trace *t = parse(b.data, b.len);
    cr_assert_eq(tm_trace_sample_count(t), 4);
    /* Each stack's labels leaf first, unsanitised (the folded writer turns ';' into ':'). */
    const char *want[4][3] = {{ODD, "main", NULL}, {"0x70 (libx.so)", "main", NULL}, {NULL}, {"leaf", "work", "main"}};
    for (size_t i = 0; i < 4; i++) {
        tm_sample_info si;
        cr_assert_eq(tm_trace_sample(t, i, &si), TM_OK);
        cr_assert_eq(si.ts, (int64_t)s[i].ts);
        cr_assert_eq(si.weight, 1);
        tm_thread_info ti;
        cr_assert_eq(tm_trace_thread(t, si.thread, &ti), TM_OK);
        cr_assert_eq(ti.tid, s[i].tid);
        const uint32_t *frames;
        size_t n, depth = 0;
        cr_assert_eq(tm_trace_stack(t, si.stack, &frames, &n), TM_OK);
        while (depth < 3 && want[i][depth]) depth++;
        cr_assert_eq(n, depth, "sample %zu", i);
        cr_assert_eq(frames == NULL, depth == 0);
        for (size_t d = 0; d < n; d++) {
            char buf[64];
            cr_assert_str_eq(label(t, frames[d], buf), want[i][d]);
        }
    }
    cr_assert_leq(tm_trace_stack_count(t), 4);
    cr_assert_geq(tm_trace_frame_count(t), 5);
    tm_sample_info si;
    const uint32_t *frames;
    size_t n;
    char buf[8];
    cr_assert_eq(tm_trace_sample(t, 4, &si), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_trace_stack(t, tm_trace_stack_count(t), &frames, &n), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_trace_frame_label(t, tm_trace_frame_count(t), buf, sizeof buf, &n), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_trace_sample_count(NULL), 0);
    cr_assert_null(tm_trace_get_stats(NULL)); /* was a pointer computed from NULL */
    cr_assert_eq(tm_trace_input_format(t), TM_INPUT_PERFETTO);
    cr_assert_eq(tm_trace_input_format(NULL), TM_INPUT_AUTO);
    tm_trace_free(t);
    tb_free(&b);
}

Test(accessors, labels_are_cut_to_the_buffer_and_folded_weights_kept) {
    tm_trace *t = parse_folded("main;a_long_function_name 3\n");
    cr_assert_eq(tm_trace_input_format(t), TM_INPUT_FOLDED);
    cr_assert_eq(tm_trace_sample_count(t), 1);
    tm_sample_info si;
    cr_assert_eq(tm_trace_sample(t, 0, &si), TM_OK);
    cr_assert_eq(si.weight, 3);
    cr_assert_eq(si.ts, 0);
    const uint32_t *frames;
    size_t n, len;
    cr_assert_eq(tm_trace_stack(t, si.stack, &frames, &n), TM_OK);
    cr_assert_eq(n, 2);
    char buf[8];
    cr_assert_eq(tm_trace_frame_label(t, frames[0], buf, sizeof buf, &len), TM_OK);
    cr_assert_eq(len, strlen("a_long_function_name"));
    cr_assert_str_eq(buf, "a_long_");
    cr_assert_eq(tm_trace_frame_label(t, frames[0], NULL, 0, &len), TM_OK);
    cr_assert_eq(len, strlen("a_long_function_name"));
    cr_assert_eq(tm_trace_frame_label(t, frames[0], NULL, 1, &len), TM_ERR_INVALID_ARG);
    tm_trace_free(t);
}

/* ==== round trip ======================================================= */

static void round_trip(const void *data, size_t len, const tm_folded_options *o) {
    tm_trace *t = parse(data, len);
    char *first = folded(t, o);
    tm_trace *back = parse_folded(first);
    char *second = folded(back, NULL);
    cr_assert_str_eq(second, first);
    /* The total weight survives. */
    uint64_t total = 0;
    for (size_t i = 0; i < tm_trace_thread_count(t); i++) {
        tm_thread_info ti;
        tm_trace_thread(t, i, &ti);
        total += ti.samples;
    }
    tm_thread_info ti;
    if (tm_trace_thread_count(back)) {
        tm_trace_thread(back, 0, &ti);
        cr_assert_eq(ti.samples, total);
    } else {
        cr_assert_eq(total, 0);
    }
    free(second);
    free(first);
    tm_trace_free(back);
    tm_trace_free(t);
}

Test(folded_round_trip, built_trace_with_odd_names_and_prefix) {
    const smp s[] = {{TB_BOOT0 + 1000, 10, CS_ODD}, {TB_BOOT0 + 2000, 10, CS_ADDR}, {TB_BOOT0 + 3000, 11, CS_EMPTY},
                     {TB_BOOT0 + 4000, 12, CS_DEEP}, {TB_BOOT0 + 5000, 12, CS_DUP_A}, {TB_BOOT0 + 6000, 12, CS_DUP_B}};
    tb_buf b = {0};
    build(&b, s, 6);
    round_trip(b.data, b.len, NULL);
    tm_folded_options o;
    memset(&o, 0, sizeof o);
    o.thread_prefix = 1;
    round_trip(b.data, b.len, &o);
    tb_free(&b);
}

static void round_trip_file(const char *path) {
    size_t len;
    char *data = tu_read_file(path, &len);
    cr_assert_not_null(data, "cannot read %s", path);
    round_trip(data, len, NULL);
    free(data);
}

Test(folded_round_trip, demo_trace) { round_trip_file(TM_SOURCE_DIR "/examples/demo.pftrace"); }

Test(folded_round_trip, relay_fixtures) {
    round_trip_file(TM_FIXTURES "/relay-compat/java_frame_splitting.pftrace");
    round_trip_file(TM_FIXTURES "/relay-compat/empty_callstack.pftrace");
    round_trip_file(TM_FIXTURES "/relay-compat/multi_sequence.pftrace");
}

/* ==== allocation failures ============================================== */

typedef tm_status (*write_fn)(const tm_trace *t, tu_membuf *out, tm_error *err);

static tm_status write_folded_prefixed(const tm_trace *t, tu_membuf *out, tm_error *err) {
    tm_folded_options o;
    memset(&o, 0, sizeof o);
    o.thread_prefix = 1;
    tm_sink sink = {.write = tu_membuf_write, .ctx = out};
    return tm_write_folded(t, &o, &sink, err);
}

static tm_status write_diff_self(const tm_trace *t, tu_membuf *out, tm_error *err) {
    tm_sink sink = {.write = tu_membuf_write, .ctx = out};
    return tm_write_folded_diff(t, t, NULL, &sink, err);
}

/* Every allocation of the writer fails in turn: TM_ERR_NOMEM, no leak. */
static void writer_fails_cleanly(const void *data, size_t len, const tm_options *base_opts, write_fn fn) {
    tu_fail_alloc fa = {.fail_at = -1};
    tm_alloc alloc = {.malloc_fn = tu_fa_malloc, .realloc_fn = tu_fa_realloc, .free_fn = tu_fa_free, .ctx = &fa};
    tm_options o = *base_opts;
    o.alloc = &alloc;
    tm_trace *t = parse_with(data, len, &o);
    long live = fa.live, before = fa.count;
    tu_membuf out = {0};
    tm_error err;
    cr_assert_eq(fn(t, &out, &err), TM_OK, "%s", err.message);
    long n = fa.count - before;
    cr_assert_gt(n, 0);
    cr_assert_eq(fa.live, live, "the writer frees its scratch memory");
    for (long k = 0; k < n; k++) {
        fa.fail_at = fa.count + k;
        out.len = 0;
        tm_status st = fn(t, &out, &err);
        cr_assert_eq(st, TM_ERR_NOMEM, "allocation %ld of %ld: %s", k, n, tm_status_str(st));
        cr_assert_eq(fa.live, live, "allocation %ld of %ld: leaked %ld bytes", k, n, fa.live - live);
    }
    tu_membuf_free(&out);
    tm_trace_free(t);
    cr_assert_eq(fa.live, 0);
}

Test(folded_alloc, writers_fail_cleanly) {
    tb_buf b = {0};
    build(&b, MIXED, sizeof MIXED / sizeof *MIXED);
    tm_options o;
    memset(&o, 0, sizeof o);
    writer_fails_cleanly(b.data, b.len, &o, write_folded_prefixed);
    writer_fails_cleanly(b.data, b.len, &o, write_diff_self);
    tb_free(&b);
}

Test(folded_alloc, reader_fails_cleanly) {
    const char *text = "a;b;c 1\na;b 2\nd;e;f;g;h;i;j;k;l;m;n;o;p;q;r;s;t;u;v 3\n[no frames] 1\n";
    tu_fail_alloc fa = {.fail_at = -1};
    tm_alloc alloc = {.malloc_fn = tu_fa_malloc, .realloc_fn = tu_fa_realloc, .free_fn = tu_fa_free, .ctx = &fa};
    tm_options o;
    memset(&o, 0, sizeof o);
    o.input = TM_INPUT_FOLDED;
    o.alloc = &alloc;
    tm_trace *t = parse_with(text, strlen(text), &o);
    long n = fa.count;
    tm_trace_free(t);
    cr_assert_eq(fa.live, 0);
    for (long k = 0; k < n; k++) {
        fa.fail_at = k;
        fa.count = 0;
        tm_error err;
        t = NULL;
        tm_status st = tm_trace_parse(text, strlen(text), &o, &t, &err);
        cr_assert_eq(st, TM_ERR_NOMEM, "allocation %ld of %ld: %s (%s)", k, n, tm_status_str(st), err.message);
        cr_assert_null(t);
        cr_assert_eq(fa.live, 0, "allocation %ld of %ld: leaked %ld bytes", k, n, fa.live);
    }
}
