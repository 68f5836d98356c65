/*
 * test_stack_sample.c — Perfetto v58's generic StackSample packet
 * (TracePacket 135) in the default decoder: inline and
 * interned callstacks, threads from inline and interned task contexts (and
 * the rule for samples without a tid), packet timestamps through the clock
 * graph, the incremental-state and drop counters PerfSample uses, limits,
 * malformed fields (clean errors at the offending byte), allocation
 * failure, and TM_MODE_RELAY, which must ignore StackSample entirely.
 * Expected values come from the traces as built here and from the
 * textproto of the Trace Processor diff test Profiling:stack_sample.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/pb.h" /* tm_pb_varint: to find a packet's payload */
#include "profile/profile.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

#define CLK_REALTIME TM_PF_BUILTIN_CLOCK_REALTIME
#define CLK_MONOTONIC TM_PF_BUILTIN_CLOCK_MONOTONIC
#define CLK_MONOTONIC_RAW TM_PF_BUILTIN_CLOCK_MONOTONIC_RAW
#define CLK_BOOTTIME TM_PF_BUILTIN_CLOCK_BOOTTIME

/* BOOTTIME 1 s is Unix 1700000000 s. */

/* ---- helpers ---- */

static tm_options options_for(tm_mode mode) {
    tm_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    return o;
}

static tm_status try_parse(const tb_buf *b, const tm_options *o, tm_trace **t, tm_error *err) {
    memset(err, 0, sizeof *err);
    *t = NULL;
    return tm_trace_parse(b->data, b->len, o, t, err);
}

static tm_trace *parse_mode(const tb_buf *b, tm_mode mode) {
    tm_options o = options_for(mode);
    tm_trace *t;
    tm_error err;
    tm_status st = try_parse(b, &o, &t, &err);
    cr_assert_eq(st, TM_OK, "tm_trace_parse: %s at byte %llu: %s", tm_status_str(st),
                 (unsigned long long)err.offset, err.message);
    return t;
}

static tm_trace *parse(const tb_buf *b) { return parse_mode(b, TM_MODE_DEFAULT); }

/* Asserts a clean error of `code` at byte `at` in default mode, and that
 * Relay mode (which does not read StackSample) accepts the same bytes. */
static void expect_error_at(const tb_buf *b, tm_status code, uint64_t at, const char *what) {
    tm_options o = options_for(TM_MODE_DEFAULT);
    tm_trace *t;
    tm_error err;
    tm_status st = try_parse(b, &o, &t, &err);
    cr_assert_eq(st, code, "%s: status %s, want %s (%s)", what, tm_status_str(st), tm_status_str(code),
                 err.message);
    cr_assert_null(t);
    cr_assert_eq(err.code, code);
    cr_assert_gt(strlen(err.message), 0);
    cr_assert_eq(err.offset, at, "%s: offset %llu, want %llu (%s)", what, (unsigned long long)err.offset,
                 (unsigned long long)at, err.message);
    tm_trace_free(parse_mode(b, TM_MODE_RELAY));
}

/* Closes a sub-message opened at mark; returns where pos (recorded while it
 * was open) ends up once the length prefix is inserted. */
static size_t close_at(tb_buf *t, size_t mark, size_t pos) {
    size_t before = t->len;
    tb_close(t, mark);
    return pos >= mark ? pos + (t->len - before) : pos;
}


static void process_tree(tb_buf *t) {
    size_t p = tb_packet_open(t, 0, TB_NO_TS, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    size_t pr = tb_open(t, TM_PF_PROCESS_TREE_PROCESSES);
    tb_uint(t, TM_PF_PROCESS_PID, 100);
    tb_str(t, TM_PF_PROCESS_CMDLINE, "app");
    tb_close(t, pr);
    tb_pt_thread(t, 101, 100, "worker");
    tb_close(t, pt);
    tb_close(t, p);
}

/* Clears seq's state and interns: functions 1 main, 2 run, 3 bar; frames
 * 1-3 (no mapping); callstack 7 = main -> run -> bar (root first); task
 * context 5 = pid 100, tid 102; execution context 3 = cpu 1 (not used). */
static void interned_packet(tb_buf *t, uint32_t seq) {
    size_t p = tb_packet_open(t, seq, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "run", 3);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "bar", 3);
    for (uint64_t k = 1; k <= 3; k++) tb_frame(t, k, k, 0, 0x10 * k);
    static const uint64_t cs[] = {1, 2, 3};
    tb_callstack(t, 7, cs, 3, 1);
    tb_task_context(t, 5, 100, 102);
    size_t ec = tb_open(t, TM_PF_INTERNED_EXECUTION_CONTEXTS);
    tb_uint(t, TM_PF_INTERNED_IID, 3);
    tb_uint(t, TM_PF_EXECUTION_CONTEXT_CPU, 1);
    tb_close(t, ec);
    tb_close(t, i);
    tb_close(t, p);
}

static const char *const main_foo[] = {"main", "foo"};
static const char *const main_baz[] = {"main", "baz"};

/* An inline-callstack sample of pid/tid at TB_BOOT0 + ms milliseconds. */
static tb_stack_sample inline_sample(uint32_t seq, uint64_t ms, uint32_t pid, uint32_t tid,
                                     const char *const *frames, size_t n) {
    tb_stack_sample s;
    memset(&s, 0, sizeof s);
    s.seq = seq;
    s.ts = TB_BOOT0 + ms * 1000000ull;
    s.task = 1;
    s.pid = pid;
    s.tid = tid;
    s.inline_cs = 1;
    s.frames = frames;
    s.n_frames = n;
    return s;
}

/* The trace of the output tests: four samples on seq 1, 250 ms apart. */
static void mixed_trace(tb_buf *t) {
    tb_standard_clocks(t, 1);
    process_tree(t);
    interned_packet(t, 1);
    static const uint64_t followers[] = {500};
    tb_stack_sample a = inline_sample(1, 250, 100, 101, main_foo, 2);
    a.source = "/src/a.py"; /* source positions are not part of the model */
    a.cpu = 2;
    a.mode = 1;
    a.weight = 1000;
    a.followers = followers;
    a.n_followers = 1;
    tb_stack_sample_packet(t, &a);
    tb_stack_sample b = inline_sample(1, 500, 100, 101, NULL, 0);
    b.inline_cs = 0;
    b.cs_iid = 7;
    b.flags = TB_SEQ_NEEDS;
    b.exec_iid = 3;
    b.unwind_error = "partial"; /* the stack is kept as it came */
    tb_stack_sample_packet(t, &b);
    tb_stack_sample c = inline_sample(1, 750, 0, 0, main_baz, 2);
    c.task = 0;
    c.task_iid = 5;
    tb_stack_sample_packet(t, &c);
    tb_stack_sample d = inline_sample(1, 1000, 100, TB_SS_NONE, main_foo, 2);
    tb_stack_sample_packet(t, &d);
}

static int str_is(tm_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.data, c, n) == 0);
}

/* Asserts sample i: ts, tid, and its frames' function names leaf first. */
static void assert_sample(const tm_profile *p, size_t i, int64_t ts, int64_t tid, const char *const *leaf_first,
                          size_t n) {
    cr_assert_lt(i, p->n_samples, "only %zu samples", p->n_samples);
    const tm_prof_sample *s = &p->samples[i];
    cr_assert_eq(s->ts, ts, "sample %zu: ts %lld, want %lld", i, (long long)s->ts, (long long)ts);
    cr_assert_eq(p->threads[s->thread].tid, tid, "sample %zu: tid %lld, want %lld", i,
                 (long long)p->threads[s->thread].tid, (long long)tid);
    const tm_prof_stack *st = &p->stacks[s->stack];
    cr_assert_eq(st->len, n, "sample %zu: %u frames, want %zu", i, st->len, n);
    for (size_t k = 0; k < n; k++) {
        const tm_prof_frame *f = &p->frames[p->frame_ids[st->off + k]];
        cr_assert(f->flags & TM_FRAME_HAS_FUNCTION, "sample %zu frame %zu has no function", i, k);
        cr_assert(str_is(f->function, leaf_first[k]), "sample %zu frame %zu: %.*s, want %s", i, k,
                  TM_STR_ARGS(f->function), leaf_first[k]);
    }
}

static char *folded_of(const tm_trace *t, int thread_prefix) {
    tm_folded_options fo;
    memset(&fo, 0, sizeof fo);
    fo.thread_prefix = thread_prefix;
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    tm_status st = tm_write_folded(t, &fo, &sink, &err);
    cr_assert_eq(st, TM_OK, "tm_write_folded: %s", err.message);
    if (!out.data) tu_membuf_write(&out, "", 0); /* an empty document is "" */
    return out.data;
}

static json_t *sample_v2_of(const tm_trace *t) {
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    tm_status st = tm_write_sample_v2(t, NULL, &sink, &err);
    cr_assert_eq(st, TM_OK, "tm_write_sample_v2: %s", err.message);
    json_error_t je;
    json_t *root = json_loads(out.data, 0, &je);
    cr_assert_not_null(root, "invalid JSON: %s", je.text);
    tu_membuf_free(&out);
    return root;
}

/* Sample i of a Sample v2 document: its Unix time, thread id and the
 * function names of its stack (leaf first), checked against the arguments. */
static void assert_v2_sample(json_t *root, size_t i, double unix_s, const char *tid, const char *const *leaf_first,
                             size_t n, int inline_frames) {
    json_t *prof = json_object_get(root, "profile");
    json_t *smp = json_array_get(json_object_get(prof, "samples"), i);
    cr_assert_not_null(smp, "no sample %zu", i);
    cr_assert_eq(json_real_value(json_object_get(smp, "timestamp")), unix_s, "sample %zu: timestamp %.9f, want %.9f",
                 i, json_real_value(json_object_get(smp, "timestamp")), unix_s);
    cr_assert_str_eq(json_string_value(json_object_get(smp, "thread_id")), tid, "sample %zu", i);
    json_t *stack = json_array_get(json_object_get(prof, "stacks"),
                                   (size_t)json_integer_value(json_object_get(smp, "stack_id")));
    cr_assert_eq(json_array_size(stack), n, "sample %zu: stack of %zu frames", i, json_array_size(stack));
    for (size_t k = 0; k < n; k++) {
        json_t *fr = json_array_get(json_object_get(prof, "frames"),
                                    (size_t)json_integer_value(json_array_get(stack, k)));
        cr_assert_str_eq(json_string_value(json_object_get(fr, "function")), leaf_first[k], "sample %zu frame %zu",
                         i, k);
        if (inline_frames) cr_assert_null(json_object_get(fr, "instruction_addr"), "inline frames have no address");
        else cr_assert_not_null(json_object_get(fr, "instruction_addr"), "interned frames have their address");
    }
}

/* ---- outputs ---- */

Test(stack_sample, inline_and_interned_callstacks_in_the_model) {
    tb_buf b = {0};
    mixed_trace(&b);
    tm_trace *t = parse(&b);
    const tm_profile *p = tm_trace_profile(t);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(p->n_samples, 4);
    static const char *const foo_main[] = {"foo", "main"}, *const bar[] = {"bar", "run", "main"},
                             *const baz[] = {"baz", "main"};
    assert_sample(p, 0, (int64_t)(TB_BOOT0 + 250000000ull), 101, foo_main, 2);
    assert_sample(p, 1, (int64_t)(TB_BOOT0 + 500000000ull), 101, bar, 3);
    assert_sample(p, 2, (int64_t)(TB_BOOT0 + 750000000ull), 102, baz, 2); /* interned task context */
    assert_sample(p, 3, (int64_t)(TB_BOOT0 + 1000000000ull), 100, foo_main, 2); /* no tid: main thread */
    /* Inline frames carry the name only: no mapping, address or source file. */
    const tm_prof_frame *leaf = &p->frames[p->frame_ids[p->stacks[p->samples[0].stack].off]];
    cr_assert_eq(leaf->flags, TM_FRAME_HAS_FUNCTION);
    cr_assert_eq(leaf->mapping, 0);
    cr_assert_eq(leaf->package.len, 0);
    /* The same inline stack twice is one stack. */
    cr_assert_eq(p->samples[0].stack, p->samples[3].stack);
    cr_assert_eq(st->samples_kept, 4);
    cr_assert_eq(st->dropped_unresolved, 0);
    cr_assert_eq(st->samples_without_thread, 0);
    cr_assert_eq(st->perf_samples + st->streaming_samples, 0, "StackSample is neither kind");
    tm_trace_free(t);
    tb_free(&b);
}

Test(stack_sample, folded_output) {
    tb_buf b = {0};
    mixed_trace(&b);
    tm_trace *t = parse(&b);
    char *plain = folded_of(t, 0);
    cr_assert_str_eq(plain, "main;baz 1\nmain;foo 2\nmain;run;bar 1\n");
    char *prefixed = folded_of(t, 1);
    /* tid 100, pid 100's main thread without a name of its own: its process's */
    cr_assert_str_eq(prefixed, "app;main;foo 1\ntid-102;main;baz 1\nworker;main;foo 1\nworker;main;run;bar 1\n");
    free(plain);
    free(prefixed);
    tm_trace_free(t);
    tb_free(&b);
}

Test(stack_sample, sample_v2_output) {
    tb_buf b = {0};
    mixed_trace(&b);
    tm_trace *t = parse(&b);
    json_t *root = sample_v2_of(t);
    json_t *samples = json_object_get(json_object_get(root, "profile"), "samples");
    cr_assert_eq(json_array_size(samples), 4);
    static const char *const foo_main[] = {"foo", "main"}, *const bar[] = {"bar", "run", "main"},
                             *const baz[] = {"baz", "main"};
    assert_v2_sample(root, 0, 1700000000.25, "101", foo_main, 2, 1);
    assert_v2_sample(root, 1, 1700000000.5, "101", bar, 3, 0);
    assert_v2_sample(root, 2, 1700000000.75, "102", baz, 2, 1);
    assert_v2_sample(root, 3, 1700000001.0, "100", foo_main, 2, 1);
    json_t *meta = json_object_get(json_object_get(root, "profile"), "thread_metadata");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(meta, "100"), "name")), "app");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(meta, "101"), "name")), "worker");
    cr_assert_null(json_object_get(meta, "102"), "tid 102 has no name");
    json_decref(root);
    tm_trace_free(t);
    tb_free(&b);
}

/* The Trace Processor diff test Profiling:stack_sample: samples at 1000
 * (pid 100 tid 101, inline main -> foo), 2000 (tid 101, callstack_iid 1 =
 * foo at rel_pc 0x100 in an unnamed mapping), 6000 (pid 100 and an async
 * id, no tid) and 7000 (no task context). */
Test(stack_sample, perfetto_difftest_fixture) {
    char path[512];
    snprintf(path, sizeof path, "%s/perfetto-difftests/Profiling__stack_sample/trace.pftrace", TM_FIXTURES);
    size_t len = 0;
    char *data = tu_read_file(path, &len);
    cr_assert_not_null(data, "cannot read %s", path);
    tm_trace *t = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(data, len, NULL, &t, &err);
    cr_assert_eq(st, TM_OK, "%s at %llu: %s", tm_status_str(st), (unsigned long long)err.offset, err.message);
    const tm_profile *p = tm_trace_profile(t);
    static const char *const foo_main[] = {"foo", "main"}, *const foo[] = {"foo"};
    cr_assert_eq(p->n_samples, 4);
    assert_sample(p, 0, 1000, 101, foo_main, 2);
    assert_sample(p, 1, 2000, 101, foo, 1);
    assert_sample(p, 2, 6000, 100, foo, 1);
    assert_sample(p, 3, 7000, 0, foo, 1);
    const tm_prof_frame *interned = &p->frames[p->frame_ids[p->stacks[p->samples[1].stack].off]];
    cr_assert(interned->flags & TM_FRAME_HAS_ADDR);
    cr_assert_eq(interned->addr, 0x100);
    cr_assert_neq(p->samples[1].stack, p->samples[2].stack, "interned and inline foo are different frames");
    cr_assert_eq(p->threads[p->samples[0].thread].pid, 100);
    cr_assert_eq(p->threads[p->samples[2].thread].pid, 100);
    const tm_trace_stats *s = tm_trace_get_stats(t);
    cr_assert_eq(s->samples_kept, 4);
    cr_assert_eq(s->samples_without_thread, 1);
    cr_assert_eq(s->dropped_unresolved, 0);
    /* tid-101 and tid 0 have no name; tid 100, pid 100's main thread, its process's. */
    cr_assert_eq(s->threads_without_name, 2);
    char *folded = folded_of(t, 0);
    cr_assert_str_eq(folded, "foo 3\nmain;foo 1\n"); /* the frames merge by name */
    free(folded);
    char *prefixed = folded_of(t, 1);
    cr_assert_str_eq(prefixed, "myproc;foo 1\ntid-0;foo 1\ntid-101;foo 1\ntid-101;main;foo 1\n");
    free(prefixed);
    tm_trace_free(t);
    free(data);
}

/* ---- threads ---- */

/* The rule for a sample without a tid: the main thread of its pid (tid =
 * pid) when the pid is known, else tid 0, counted in samples_without_thread. */
Test(stack_sample, samples_without_tid) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    interned_packet(&b, 1);
    tb_stack_sample s = inline_sample(1, 100, 300, TB_SS_NONE, main_foo, 2); /* pid only */
    tb_stack_sample_packet(&b, &s);
    s = inline_sample(1, 200, 300, TB_SS_NONE, main_foo, 2);
    s.async_id = 7; /* an async task of pid 300 */
    tb_stack_sample_packet(&b, &s);
    s = inline_sample(1, 300, TB_SS_NONE, TB_SS_NONE, main_foo, 2); /* empty task context */
    tb_stack_sample_packet(&b, &s);
    s = inline_sample(1, 400, 0, 0, main_foo, 2);
    s.task = 0; /* no task context at all */
    tb_stack_sample_packet(&b, &s);
    s = inline_sample(1, 500, TB_SS_NONE, 301, main_foo, 2); /* tid without pid */
    tb_stack_sample_packet(&b, &s);
    tm_trace *t = parse(&b);
    const tm_profile *p = tm_trace_profile(t);
    static const char *const foo_main[] = {"foo", "main"};
    cr_assert_eq(p->n_samples, 5);
    for (size_t i = 0; i < 2; i++) {
        assert_sample(p, i, (int64_t)(TB_BOOT0 + 100000000ull * (i + 1)), 300, foo_main, 2);
        cr_assert_eq(p->threads[p->samples[i].thread].pid, 300);
    }
    assert_sample(p, 2, (int64_t)(TB_BOOT0 + 300000000ull), 0, foo_main, 2);
    assert_sample(p, 3, (int64_t)(TB_BOOT0 + 400000000ull), 0, foo_main, 2);
    assert_sample(p, 4, (int64_t)(TB_BOOT0 + 500000000ull), 301, foo_main, 2);
    cr_assert_eq(p->threads[p->samples[4].thread].pid, 0, "pid unknown");
    cr_assert_eq(tm_trace_get_stats(t)->samples_without_thread, 2);
    json_t *root = sample_v2_of(t);
    json_t *meta = json_object_get(json_object_get(root, "profile"), "thread_metadata");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(meta, "300"), "name")), "main");
    cr_assert_null(json_object_get(meta, "0"));
    json_decref(root);
    tm_trace_free(t);
    tb_free(&b);
}

/* ---- clocks ---- */

Test(stack_sample, packet_timestamps_go_through_the_clock_graph) {
    tb_buf b = {0};
    static const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC, CLK_REALTIME};
    static const uint64_t vals[] = {5 * TB_BOOT0, TB_BOOT0, TB_UNIX0};
    tb_clock_snapshot(&b, 1, ids, vals, 3);
    /* seq 2: MONOTONIC by default */
    size_t p = tb_packet_open(&b, 2, TB_NO_TS, TB_SEQ_CLEARED);
    size_t d = tb_open(&b, TM_PF_PACKET_DEFAULTS);
    tb_uint(&b, TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID, CLK_MONOTONIC);
    size_t sd = tb_open(&b, TM_PF_DEFAULTS_STACK_SAMPLE);
    tb_str(&b, TM_PF_STACK_DEFAULTS_SOURCE, "python.wall");
    tb_close(&b, sd);
    tb_close(&b, d);
    tb_close(&b, p);
    tb_stack_sample s = inline_sample(2, 500, 100, 100, main_foo, 2); /* MONOTONIC 1.5 s -> BOOTTIME 5.5 s */
    tb_stack_sample_packet(&b, &s);
    s = inline_sample(2, 0, 100, 100, main_foo, 2);
    s.ts = 6 * TB_BOOT0;
    s.clock_id = CLK_BOOTTIME; /* the packet's own clock wins */
    tb_stack_sample_packet(&b, &s);
    s = inline_sample(3, 0, 100, 100, main_foo, 2);
    s.clock_id = CLK_MONOTONIC_RAW; /* no snapshot relates it */
    tb_stack_sample_packet(&b, &s);
    tm_trace *t = parse(&b);
    const tm_profile *pr = tm_trace_profile(t);
    static const char *const foo_main[] = {"foo", "main"};
    cr_assert_eq(pr->n_samples, 2);
    assert_sample(pr, 0, (int64_t)(5 * TB_BOOT0 + 500000000ull), 100, foo_main, 2);
    assert_sample(pr, 1, (int64_t)(6 * TB_BOOT0), 100, foo_main, 2);
    cr_assert_eq(tm_trace_get_stats(t)->dropped_missing_clock, 1);
    tm_trace_free(t);
    tb_free(&b);
}

/* ---- incremental state and drops ---- */

Test(stack_sample, incremental_state_and_drop_counters) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    tb_stack_sample s;
    /* seq 3 never clears: a sample that needs the state is skipped */
    memset(&s, 0, sizeof s);
    s.seq = 3;
    s.ts = TB_BOOT0;
    s.cs_iid = 7;
    s.flags = TB_SEQ_NEEDS;
    tb_stack_sample_packet(&b, &s);
    /* seq 4: cleared, one good sample, then data loss */
    interned_packet(&b, 4);
    s.seq = 4;
    s.ts = TB_BOOT0 + 1;
    tb_stack_sample_packet(&b, &s); /* kept */
    size_t p = tb_packet_open(&b, 4, TB_NO_TS, 0);
    tb_uint(&b, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    tb_close(&b, p);
    s.ts = TB_BOOT0 + 2;
    tb_stack_sample_packet(&b, &s); /* stale interning */
    tb_stack_sample in = inline_sample(4, 0, 100, 100, main_foo, 2);
    in.ts = TB_BOOT0 + 3;
    in.flags = TB_SEQ_NEEDS; /* the rule holds even though nothing here is interned */
    tb_stack_sample_packet(&b, &in);
    /* a clear without tables: iids no longer resolve */
    p = tb_packet_open(&b, 4, TB_NO_TS, TB_SEQ_CLEARED);
    tb_close(&b, p);
    s.ts = TB_BOOT0 + 4;
    tb_stack_sample_packet(&b, &s); /* callstack 7 unresolved */
    in.ts = TB_BOOT0 + 5;
    in.task = 0;
    in.task_iid = 5; /* task context 5 unresolved */
    tb_stack_sample_packet(&b, &in);
    tb_stack_sample none = inline_sample(4, 0, 100, 100, NULL, 0);
    none.ts = TB_BOOT0 + 6;
    none.inline_cs = 0; /* no callstack at all: not a sample */
    tb_stack_sample_packet(&b, &none);
    none.ts = TB_BOOT0 + 7;
    none.inline_cs = 1; /* an empty inline callstack: a sample without frames */
    tb_stack_sample_packet(&b, &none);
    tm_trace *t = parse(&b);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(st->dropped_never_cleared, 1);
    cr_assert_eq(st->dropped_stale_interning, 2);
    cr_assert_eq(st->packets_skipped_incremental, 3);
    cr_assert_eq(st->dropped_unresolved, 2);
    cr_assert_eq(st->samples_kept, 2);
    static const char *const bar[] = {"bar", "run", "main"};
    assert_sample(pr, 0, (int64_t)TB_BOOT0 + 1, 0, bar, 3); /* no task context: tid 0 */
    assert_sample(pr, 1, (int64_t)TB_BOOT0 + 7, 100, NULL, 0);
    char *folded = folded_of(t, 0);
    cr_assert_str_eq(folded, "[no frames] 1\nmain;run;bar 1\n");
    free(folded);
    tm_trace_free(t);
    tb_free(&b);
}

/* Interleaved oneof members: the last one on the wire wins. */
Test(stack_sample, last_callstack_and_task_context_on_the_wire_win) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    interned_packet(&b, 1);
    size_t p = tb_packet_open(&b, 1, TB_BOOT0, 0);
    size_t ss = tb_open(&b, TM_PF_PACKET_STACK_SAMPLE);
    tb_uint(&b, TM_PF_STACK_SAMPLE_TASK_CONTEXT_IID, 5);
    size_t tc = tb_open(&b, TM_PF_STACK_SAMPLE_TASK_CONTEXT);
    tb_uint(&b, TM_PF_TASK_CONTEXT_PID, 100);
    tb_uint(&b, TM_PF_TASK_CONTEXT_TID, 101);
    tb_close(&b, tc);
    size_t cs = tb_open(&b, TM_PF_STACK_SAMPLE_CALLSTACK);
    size_t f = tb_open(&b, TM_PF_INLINE_CALLSTACK_FRAMES);
    tb_str(&b, TM_PF_INLINE_FRAME_FUNCTION_NAME, "inline");
    tb_close(&b, f);
    tb_close(&b, cs);
    tb_uint(&b, TM_PF_STACK_SAMPLE_CALLSTACK_IID, 7);
    tb_close(&b, ss);
    tb_close(&b, p);
    tm_trace *t = parse(&b);
    static const char *const bar[] = {"bar", "run", "main"};
    assert_sample(tm_trace_profile(t), 0, (int64_t)TB_BOOT0, 101, bar, 3);
    tm_trace_free(t);
    tb_free(&b);
}

/* ---- limits ---- */

static void expect_limit(const tb_buf *b, size_t field, uint64_t ok, uint64_t at) {
    tm_options o = options_for(TM_MODE_DEFAULT);
    uint64_t *value = (uint64_t *)(void *)((char *)&o.limits + field);
    *value = ok;
    tm_trace *t;
    tm_error err;
    tm_status st = try_parse(b, &o, &t, &err);
    cr_assert_eq(st, TM_OK, "at the limit: %s", err.message);
    tm_trace_free(t);
    *value = ok - 1;
    st = try_parse(b, &o, &t, &err);
    cr_assert_eq(st, TM_ERR_LIMIT, "past the limit: %s (%s)", tm_status_str(st), err.message);
    cr_assert_eq(err.offset, at, "offset %llu, want %llu (%s)", (unsigned long long)err.offset,
                 (unsigned long long)at, err.message);
}

Test(stack_sample, max_samples_counts_stack_samples) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    interned_packet(&b, 1);
    tb_perf_sample(&b, 1, TB_BOOT0, 100, 100, 7, 0);
    tb_stack_sample s = inline_sample(1, 1, 100, 100, main_foo, 2);
    tb_stack_sample_packet(&b, &s);
    size_t at = b.len;
    s.ts++;
    tb_stack_sample_packet(&b, &s);
    /* the error points at the packet's first byte, past its tag and length */
    const uint8_t *q = b.data + at + 1, *end = b.data + b.len;
    uint64_t len;
    cr_assert_eq(tm_pb_varint(&q, end, &len), 0);
    expect_limit(&b, offsetof(tm_limits, max_samples), 3, (uint64_t)(q - b.data));
    tb_free(&b);
}

Test(stack_sample, max_stack_depth_for_inline_callstacks) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    size_t p = tb_packet_open(&b, 1, TB_BOOT0, 0);
    size_t ss = tb_open(&b, TM_PF_PACKET_STACK_SAMPLE);
    size_t at = b.len;
    size_t cs = tb_open(&b, TM_PF_STACK_SAMPLE_CALLSTACK);
    for (int i = 0; i < 3; i++) {
        size_t f = tb_open(&b, TM_PF_INLINE_CALLSTACK_FRAMES);
        tb_str(&b, TM_PF_INLINE_FRAME_FUNCTION_NAME, i == 0 ? "a" : i == 1 ? "b" : "c");
        tb_close(&b, f);
    }
    at = close_at(&b, cs, at);
    at = close_at(&b, ss, at);
    at = close_at(&b, p, at);
    expect_limit(&b, offsetof(tm_limits, max_stack_depth), 3, at);
    tb_free(&b);
}

Test(stack_sample, max_unique_frames_for_inline_frames) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    tb_stack_sample s = inline_sample(1, 1, 100, 100, main_foo, 2);
    tb_stack_sample_packet(&b, &s);
    size_t p = tb_packet_open(&b, 1, TB_BOOT0 + 2, 0);
    size_t ss = tb_open(&b, TM_PF_PACKET_STACK_SAMPLE);
    size_t at = b.len;
    size_t cs = tb_open(&b, TM_PF_STACK_SAMPLE_CALLSTACK);
    for (int i = 0; i < 2; i++) {
        size_t f = tb_open(&b, TM_PF_INLINE_CALLSTACK_FRAMES);
        tb_str(&b, TM_PF_INLINE_FRAME_FUNCTION_NAME, main_baz[i]);
        tb_close(&b, f);
    }
    at = close_at(&b, cs, at);
    at = close_at(&b, ss, at);
    at = close_at(&b, p, at);
    expect_limit(&b, offsetof(tm_limits, max_unique_frames), 3, at); /* main, foo, then baz */
    tb_free(&b);
}

/* ---- malformed input ---- */

/* A StackSample packet on seq 1 whose body is written by `body`; returns
 * (through *at) where the byte recorded by body ends up. */
typedef size_t (*body_fn)(tb_buf *b);

static void damaged(tb_buf *b, body_fn body, size_t *at) {
    tb_standard_clocks(b, 1);
    interned_packet(b, 1);
    size_t p = tb_packet_open(b, 1, TB_BOOT0, 0);
    size_t ss = tb_open(b, TM_PF_PACKET_STACK_SAMPLE);
    size_t pos = body(b);
    pos = close_at(b, ss, pos);
    *at = close_at(b, p, pos);
}

static size_t tid_as_len(tb_buf *b) {
    size_t tc = tb_open(b, TM_PF_STACK_SAMPLE_TASK_CONTEXT);
    tb_uint(b, TM_PF_TASK_CONTEXT_PID, 100);
    size_t at = b->len;
    tb_str(b, TM_PF_TASK_CONTEXT_TID, "x");
    at = close_at(b, tc, at);
    tb_uint(b, TM_PF_STACK_SAMPLE_CALLSTACK_IID, 7);
    return at;
}

static size_t function_name_as_varint(tb_buf *b) {
    size_t cs = tb_open(b, TM_PF_STACK_SAMPLE_CALLSTACK);
    size_t f = tb_open(b, TM_PF_INLINE_CALLSTACK_FRAMES);
    size_t at = b->len;
    tb_uint(b, TM_PF_INLINE_FRAME_FUNCTION_NAME, 3);
    at = close_at(b, f, at);
    return close_at(b, cs, at);
}

static size_t line_as_len(tb_buf *b) {
    size_t cs = tb_open(b, TM_PF_STACK_SAMPLE_CALLSTACK);
    size_t f = tb_open(b, TM_PF_INLINE_CALLSTACK_FRAMES);
    tb_str(b, TM_PF_INLINE_FRAME_FUNCTION_NAME, "main");
    size_t at = b->len;
    tb_str(b, TM_PF_INLINE_FRAME_LINE_NUMBER, "12");
    at = close_at(b, f, at);
    return close_at(b, cs, at);
}

static size_t callstack_iid_as_len(tb_buf *b) {
    size_t at = b->len;
    tb_str(b, TM_PF_STACK_SAMPLE_CALLSTACK_IID, "7");
    return at;
}

static size_t callstack_as_varint(tb_buf *b) {
    size_t at = b->len;
    tb_uint(b, TM_PF_STACK_SAMPLE_CALLSTACK, 1);
    return at;
}

/* An inline callstack whose frame claims 40 bytes where 2 are left. */
static size_t frame_length_past_end(tb_buf *b) {
    size_t cs = tb_open(b, TM_PF_STACK_SAMPLE_CALLSTACK);
    size_t at = b->len;
    tb_tag(b, TM_PF_INLINE_CALLSTACK_FRAMES, 2);
    tb_varint(b, 40);
    tb_raw(b, "\x0a\x00", 2);
    return close_at(b, cs, at);
}

/* follower_weights whose last packed varint is cut. */
static size_t packed_follower_cut(tb_buf *b) {
    tb_uint(b, TM_PF_STACK_SAMPLE_CALLSTACK_IID, 7);
    tb_tag(b, TM_PF_STACK_SAMPLE_FOLLOWER_WEIGHTS, 2);
    tb_varint(b, 3);
    tb_raw(b, "\x05", 1);
    size_t at = b->len; /* the cut varint starts here */
    tb_raw(b, "\x90\x80", 2);
    return at;
}

static size_t weight_as_fixed64(tb_buf *b) {
    tb_uint(b, TM_PF_STACK_SAMPLE_CALLSTACK_IID, 7);
    size_t at = b->len;
    tb_fixed64(b, TM_PF_STACK_SAMPLE_PRIMARY_WEIGHT, 5);
    return at;
}

Test(stack_sample, malformed_fields_give_errors_at_the_offending_byte) {
    static const struct {
        const char *what;
        body_fn body;
        tm_status code;
    } cases[] = {
        {"TaskContext.tid as a string", tid_as_len, TM_ERR_MALFORMED},
        {"Frame.function_name as a varint", function_name_as_varint, TM_ERR_MALFORMED},
        {"Frame.line_number as a string", line_as_len, TM_ERR_MALFORMED},
        {"callstack_iid as a string", callstack_iid_as_len, TM_ERR_MALFORMED},
        {"callstack as a varint", callstack_as_varint, TM_ERR_MALFORMED},
        {"inline frame longer than its callstack", frame_length_past_end, TM_ERR_TRUNCATED},
        {"follower_weights cut inside a varint", packed_follower_cut, TM_ERR_TRUNCATED},
        {"primary_weight as fixed64", weight_as_fixed64, TM_ERR_MALFORMED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tb_buf b = {0};
        size_t at;
        damaged(&b, cases[i].body, &at);
        expect_error_at(&b, cases[i].code, at, cases[i].what);
        tb_free(&b);
    }
}

Test(stack_sample, malformed_interned_task_context) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    size_t p = tb_packet_open(&b, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    size_t tc = tb_open(&b, TM_PF_INTERNED_TASK_CONTEXTS);
    tb_uint(&b, TM_PF_INTERNED_IID, 5);
    size_t at = b.len;
    tb_str(&b, TM_PF_TASK_CONTEXT_PID, "100");
    at = close_at(&b, tc, at);
    at = close_at(&b, in, at);
    at = close_at(&b, p, at);
    expect_error_at(&b, TM_ERR_MALFORMED, at, "interned TaskContext.pid as a string");
    tb_free(&b);
}

Test(stack_sample, stack_sample_sent_as_varint) {
    tb_buf b = {0};
    tb_standard_clocks(&b, 1);
    size_t p = tb_packet_open(&b, 1, TB_BOOT0, 0);
    size_t at = b.len;
    tb_uint(&b, TM_PF_PACKET_STACK_SAMPLE, 1);
    at = close_at(&b, p, at);
    expect_error_at(&b, TM_ERR_MALFORMED, at, "TracePacket.stack_sample as a varint");
    tb_free(&b);
}

/* ---- Relay mode ---- */

/* Relay's converter reads PerfSample only: StackSample packets and
 * stack_sample_task_contexts change nothing in its output. */
Test(stack_sample, relay_mode_ignores_stack_samples) {
    tb_buf perf = {0}, mixed = {0};
    for (int with_stack = 0; with_stack < 2; with_stack++) {
        tb_buf *b = with_stack ? &mixed : &perf;
        tb_standard_clocks(b, 1);
        interned_packet(b, 1);
        tb_perf_sample(b, 1, TB_BOOT0 + 1000000, 100, 101, 7, TB_SEQ_NEEDS);
        if (with_stack) {
            tb_stack_sample s = inline_sample(1, 2, 100, 102, main_foo, 2);
            tb_stack_sample_packet(b, &s);
            s.inline_cs = 0;
            s.cs_iid = 7;
            s.ts += 1000000;
            tb_stack_sample_packet(b, &s);
        }
        tb_perf_sample(b, 1, TB_BOOT0 + 4000000, 100, 101, 7, TB_SEQ_NEEDS);
    }
    tm_trace *tp = parse_mode(&perf, TM_MODE_RELAY), *tm = parse_mode(&mixed, TM_MODE_RELAY);
    cr_assert_eq(tm_trace_profile(tm)->n_samples, 2);
    tu_membuf a = {0}, c = {0};
    tm_sink sa = {.write = tu_membuf_write, .ctx = &a}, sc = {.write = tu_membuf_write, .ctx = &c};
    tm_error err;
    cr_assert_eq(tm_write_sample_v2(tp, NULL, &sa, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_write_sample_v2(tm, NULL, &sc, &err), TM_OK, "%s", err.message);
    cr_assert_str_eq(c.data, a.data, "Relay output changed by StackSample packets");
    tm_trace *td = parse(&mixed); /* the default mode reads all four */
    cr_assert_eq(tm_trace_profile(td)->n_samples, 4);
    tm_trace_free(td);
    tu_membuf_free(&a);
    tu_membuf_free(&c);
    tm_trace_free(tp);
    tm_trace_free(tm);
    tb_free(&perf);
    tb_free(&mixed);
}

/* ---- allocation failure ---- */

Test(stack_sample, every_allocation_failure_is_clean) {
    tb_buf b = {0};
    mixed_trace(&b);
    tu_fail_alloc fa = {.fail_at = -1};
    tm_options o = options_for(TM_MODE_DEFAULT);
    tm_alloc alloc = {.malloc_fn = tu_fa_malloc, .realloc_fn = tu_fa_realloc, .free_fn = tu_fa_free, .ctx = &fa};
    o.alloc = &alloc;
    tm_trace *t;
    tm_error err;
    cr_assert_eq(try_parse(&b, &o, &t, &err), TM_OK, "%s", err.message);
    long total = fa.count;
    tm_trace_free(t);
    cr_assert_eq(fa.live, 0, "leak after a successful parse");
    for (long n = 0; n < total; n++) {
        fa.fail_at = n;
        fa.count = 0;
        tm_status st = try_parse(&b, &o, &t, &err);
        cr_assert_eq(st, TM_ERR_NOMEM, "failing allocation %ld of %ld: %s (%s)", n, total, tm_status_str(st),
                     err.message);
        cr_assert_null(t);
        cr_assert_eq(fa.live, 0, "failing allocation %ld leaks %ld bytes", n, fa.live);
    }
    tb_free(&b);
}
