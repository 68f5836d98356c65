/*
 * test_alloc_failure.c — the systematic allocation-failure sweep: for inputs
 * that together reach every decode path (Perfetto in both modes, the
 * fixture traces, a Sample v2 chunk, folded stacks) and for every exporter
 * and the SQL loader, fail allocation N for every N a successful run makes
 * and check that the call returns a clean TM_ERR_NOMEM (err.code agreeing,
 * *out NULL), frees everything it took, and, for exporters, leaves the trace
 * as usable as before (a later export gives the reference bytes).
 */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace_builder.h"
#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

#define N_OF(a) (sizeof(a) / sizeof *(a))

#define CLK_REALTIME TM_PF_BUILTIN_CLOCK_REALTIME
#define CLK_MONOTONIC TM_PF_BUILTIN_CLOCK_MONOTONIC
#define CLK_BOOTTIME TM_PF_BUILTIN_CLOCK_BOOTTIME

/* An iid above the decoder's dense-array bound (2^26): it lands in the
 * sparse hash map, whose growth must fail cleanly too. */
#define SPARSE_IID (1ull << 40)

/* ---- a failing allocator that also counts live blocks ---- */

/* tu_fail_alloc counts live bytes; a block count on top catches a leak
 * that a wrong size passed to free would otherwise cancel out. fa must stay
 * the first member: the tu_fa_* callbacks receive this struct as theirs. */
typedef struct sweep_alloc {
    tu_fail_alloc fa;
    long blocks;
} sweep_alloc;

static void *sw_malloc(void *ctx, size_t size) {
    sweep_alloc *a = ctx;
    void *p = tu_fa_malloc(&a->fa, size);
    if (p) a->blocks++;
    return p;
}

static void *sw_realloc(void *ctx, void *p, size_t old_size, size_t new_size) {
    sweep_alloc *a = ctx;
    void *np = tu_fa_realloc(&a->fa, p, old_size, new_size);
    if (np && !p) a->blocks++;
    return np;
}

static void sw_free(void *ctx, void *p, size_t size) {
    sweep_alloc *a = ctx;
    if (p) a->blocks--;
    tu_fa_free(&a->fa, p, size);
}

static void sw_reset(sweep_alloc *a, long fail_at) {
    a->fa.fail_at = fail_at;
    a->fa.count = 0;
}

/* ---- inputs ---- */

typedef struct input {
    const char *name;
    tm_mode mode;
    tm_input_format format;
    char *data;
    size_t len;
} input;

static void clock_packet(tb_buf *t, uint32_t seq) {
    static const uint32_t ids[] = {CLK_BOOTTIME, CLK_REALTIME, CLK_MONOTONIC};
    static const uint64_t vals[] = {TB_BOOT0, TB_UNIX0, 500000000ull};
    tb_clock_snapshot(t, seq, ids, vals, N_OF(ids));
}

static void process_packets(tb_buf *t) {
    size_t p = tb_packet_open(t, 0, TB_BOOT0 + 1, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    size_t pr = tb_open(t, TM_PF_PROCESS_TREE_PROCESSES);
    tb_uint(t, TM_PF_PROCESS_PID, 100);
    tb_str(t, TM_PF_PROCESS_CMDLINE, "com.example.app");
    tb_close(t, pr);
    tb_pt_thread(t, 101, 100, "worker");
    tb_pt_thread(t, 103, 100, "render");
    tb_close(t, pt);
    tb_close(t, p);

    p = tb_packet_open(t, 4, TB_BOOT0 + 2, 0);
    size_t pd = tb_open(t, TM_PF_PACKET_PROCESS_DESCRIPTOR);
    tb_uint(t, TM_PF_PROCESS_DESC_PID, 100);
    tb_str(t, TM_PF_PROCESS_DESC_PROCESS_NAME, "app");
    tb_close(t, pd);
    tb_close(t, p);

    p = tb_packet_open(t, 4, TB_BOOT0 + 3, 0);
    size_t td = tb_open(t, TM_PF_PACKET_TRACK_DESCRIPTOR);
    tb_uint(t, TM_PF_TRACK_DESC_UUID, 77);
    size_t th = tb_open(t, TM_PF_TRACK_DESC_THREAD);
    tb_uint(t, TM_PF_THREAD_DESC_PID, 100);
    tb_uint(t, TM_PF_THREAD_DESC_TID, 104);
    tb_str(t, TM_PF_THREAD_DESC_THREAD_NAME, "io");
    tb_close(t, th);
    tb_close(t, td);
    tb_close(t, p);
}

/* Sequence seq interns native and Java frames (mappings with and without a
 * build id, several path segments), callstacks packed and unpacked, one of
 * them under a sparse iid; names are offset by `gen` so that a reset
 * visibly replaces them. */
static void interned_packet(tb_buf *t, uint32_t seq, int gen) {
    size_t p = tb_packet_open(t, seq, TB_NO_TS, TB_SEQ_CLEARED);
    size_t d = tb_open(t, TM_PF_PACKET_DEFAULTS);
    tb_uint(t, TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID, CLK_BOOTTIME);
    tb_close(t, d);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    char name[32];
    static const char *const fns[] = {"main", "run_loop", "android.view.View.draw", "memcpy"};
    for (size_t k = 0; k < N_OF(fns); k++) {
        int n = snprintf(name, sizeof name, "%s%s", fns[k], gen ? "_v2" : "");
        tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, k + 1, name, (size_t)n);
    }
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "system", 6);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 2, "lib64", 5);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 3, "libc.so", 7);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 4, "framework.oat", 13);
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 1, "\x01\x02\xab\xcd\xef", 5);
    static const uint64_t native_path[] = {1, 2, 3}, java_path[] = {1, 4};
    tb_mapping(t, 1, 1, 0x7000000000ull, 0x7000100000ull, native_path, N_OF(native_path));
    tb_mapping(t, 2, 0, 0x6000000000ull, 0x6000100000ull, java_path, N_OF(java_path));
    tb_frame(t, 1, 1, 1, 0x1234);
    tb_frame(t, 2, 2, 1, 0x5678);
    tb_frame(t, 3, 3, 2, 0x9abc);
    tb_frame(t, 4, 0, 1, 0x42); /* address only */
    tb_frame(t, 5, 4, 0, 0x99); /* no mapping */
    static const uint64_t cs1[] = {1, 2}, cs2[] = {1, 3, 4}, cs3[] = {1, 2, 3, 4, 5};
    tb_callstack(t, 1, cs1, N_OF(cs1), 1);
    tb_callstack(t, 2, cs2, N_OF(cs2), 0);
    tb_callstack(t, SPARSE_IID, cs3, N_OF(cs3), 1);
    tb_close(t, i);
    tb_close(t, p);
}

static void streaming_sequence(tb_buf *t, uint32_t seq) {
    size_t p = tb_packet_open(t, seq, TB_NO_TS, TB_SEQ_CLEARED);
    size_t td = tb_open(t, TM_PF_PACKET_THREAD_DESCRIPTOR);
    tb_uint(t, TM_PF_THREAD_DESC_PID, 100);
    tb_uint(t, TM_PF_THREAD_DESC_TID, 102);
    tb_str(t, TM_PF_THREAD_DESC_THREAD_NAME, "sampler");
    tb_uint(t, TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US, 1000500);
    tb_close(t, td);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "chrome_main", 11);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "task_runner", 11);
    tb_frame(t, 1, 1, 0, 0x10);
    tb_frame(t, 2, 2, 0, 0x20);
    static const uint64_t a[] = {1}, b[] = {1, 2};
    tb_callstack(t, 7, a, N_OF(a), 0);
    tb_callstack(t, 8, b, N_OF(b), 1);
    tb_close(t, i);
    tb_close(t, p);
    p = tb_packet_open(t, seq, TB_NO_TS, TB_SEQ_NEEDS);
    size_t sp = tb_open(t, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    static const uint64_t cs[] = {7, 8, 7, 8}, dt[] = {10, 20, 30, 40};
    tb_packed(t, TM_PF_STREAMING_CALLSTACK_IID, cs, N_OF(cs));
    tb_packed(t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt, N_OF(dt));
    tb_close(t, sp);
    tb_close(t, p);
}

static void stack_samples(tb_buf *t, uint32_t seq) {
    size_t p = tb_packet_open(t, seq, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "py_main", 7);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "py_work", 7);
    tb_frame(t, 1, 1, 0, 0);
    tb_frame(t, 2, 2, 0, 0);
    static const uint64_t cs[] = {1, 2};
    tb_callstack(t, 9, cs, N_OF(cs), 1);
    tb_task_context(t, 5, 100, 105);
    tb_close(t, i);
    tb_close(t, p);
    static const char *const inline_frames[] = {"py_main", "py_idle"};
    static const uint64_t followers[] = {250};
    tb_stack_sample s;
    memset(&s, 0, sizeof s);
    s.seq = seq;
    s.ts = TB_BOOT0 + 4000000ull;
    s.task = 1;
    s.pid = 100;
    s.tid = 105;
    s.inline_cs = 1;
    s.frames = inline_frames;
    s.n_frames = N_OF(inline_frames);
    s.source = "/src/app.py";
    s.cpu = 1;
    s.weight = 1000;
    s.followers = followers;
    s.n_followers = N_OF(followers);
    tb_stack_sample_packet(t, &s);
    memset(&s, 0, sizeof s);
    s.seq = seq;
    s.ts = TB_BOOT0 + 5000000ull;
    s.flags = TB_SEQ_NEEDS;
    s.task_iid = 5;
    s.cs_iid = 9;
    tb_stack_sample_packet(t, &s);
}

/* Every decode path of the default decoder in one small trace. */
static void rich_trace(tb_buf *t) {
    clock_packet(t, 1);
    process_packets(t);
    interned_packet(t, 1, 0);
    for (int k = 0; k < 6; k++)
        tb_perf_sample(t, 1, TB_BOOT0 + 1000000ull * (uint64_t)k, 100, k % 2 ? 101 : 100,
                       k % 3 == 2 ? SPARSE_IID : (uint64_t)(k % 3) + 1, TB_SEQ_NEEDS);
    streaming_sequence(t, 2);
    stack_samples(t, 3);
    /* A data loss then an incremental reset that re-interns new names. */
    size_t p = tb_packet_open(t, 1, TB_BOOT0 + 6500000ull, 0);
    tb_uint(t, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    tb_close(t, p);
    tb_perf_sample(t, 1, TB_BOOT0 + 6600000ull, 100, 100, 1, TB_SEQ_NEEDS); /* stale: dropped */
    interned_packet(t, 1, 1);
    tb_perf_sample(t, 1, TB_BOOT0 + 7000000ull, 100, 103, 2, TB_SEQ_NEEDS);
    /* More samples of sequence 1, compressed; an unresolvable callstack too. */
    tb_buf inner = {0};
    tb_perf_sample(&inner, 1, TB_BOOT0 + 8000000ull, 100, 100, SPARSE_IID, TB_SEQ_NEEDS);
    tb_perf_sample(&inner, 1, TB_BOOT0 + 9000000ull, 100, 101, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&inner, 1, TB_BOOT0 + 9500000ull, 100, 101, 99, TB_SEQ_NEEDS);
    tb_compressed_packet(t, &inner);
    tb_free(&inner);
}

/* Sequence 1's first packet after a clock snapshot: it clears the
 * state, times the sequence on BOOTTIME and opens its interned data (the
 * caller closes both); the packet's start in *packet. */
static size_t open_first_interned(tb_buf *t, size_t *packet) {
    clock_packet(t, 1);
    *packet = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t d = tb_open(t, TM_PF_PACKET_DEFAULTS);
    tb_uint(t, TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID, CLK_BOOTTIME);
    tb_close(t, d);
    return tb_open(t, TM_PF_PACKET_INTERNED_DATA);
}

/* Enough distinct entries that every table, hash map and arena grows past
 * its first capacity: 300 functions and frames on one sequence, 120
 * callstacks 3-10 deep, n_samples samples over 24 threads, out of timestamp
 * order in places. */
static void grown_trace(tb_buf *t, uint64_t n_samples) {
    size_t p, i = open_first_interned(t, &p);
    char name[32];
    for (uint64_t k = 1; k <= 300; k++) {
        int n = snprintf(name, sizeof name, "fn_%llu", (unsigned long long)k);
        tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, k, name, (size_t)n);
    }
    for (uint64_t k = 1; k <= 8; k++) {
        int n = snprintf(name, sizeof name, "lib%llu.so", (unsigned long long)k);
        tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, k, name, (size_t)n);
        tb_mapping(t, k, 0, k << 32, (k << 32) + 0x100000, &k, 1);
    }
    for (uint64_t k = 1; k <= 300; k++) tb_frame(t, k, k, k % 8 + 1, 0x100 * k);
    uint64_t frames[10];
    for (uint64_t c = 1; c <= 120; c++) {
        size_t depth = 3 + c % 8;
        for (size_t f = 0; f < depth; f++) frames[f] = (c * 7 + f * 13) % 300 + 1;
        tb_callstack(t, c, frames, depth, (int)(c % 2));
    }
    tb_close(t, i);
    tb_close(t, p);
    for (uint64_t k = 0; k < n_samples; k++) {
        uint64_t jitter = k % 5 == 4 ? 3000000ull : 0; /* every fifth sample is later than the next */
        tb_perf_sample(t, 1, TB_BOOT0 + 1000000ull * k + jitter, 100, 100 + (uint32_t)(k % 24), k % 120 + 1,
                       TB_SEQ_NEEDS);
    }
}

static input from_tb(const char *name, tm_mode mode, tb_buf *b) {
    input in = {name, mode, TM_INPUT_PERFETTO, (char *)b->data, b->len};
    return in;
}

static tm_options options_of(const input *in, const tm_alloc *alloc) {
    tm_options o;
    memset(&o, 0, sizeof o);
    o.mode = in->mode;
    o.input = in->format;
    o.alloc = alloc;
    return o;
}

static tm_trace *parse_plain(const input *in) {
    tm_options o = options_of(in, NULL);
    tm_trace *t = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(in->data, in->len, &o, &t, &err);
    cr_assert_eq(st, TM_OK, "%s: %s (%s)", in->name, tm_status_str(st), err.message);
    return t;
}

/* A Sample v2 chunk of the rich trace, as the input of the JSON reader. */
static char *sample_v2_of(const input *perfetto, size_t *len) {
    tm_trace *t = parse_plain(perfetto);
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    cr_assert_eq(tm_write_sample_v2(t, NULL, &sink, &err), TM_OK, "%s", err.message);
    tm_trace_free(t);
    *len = out.len;
    return out.data;
}

static const char folded_text[] =
    "main;run;parse 7\n"
    "main;run;parse;memcpy 3\n"
    "main;idle 12\n"
    "worker;loop;poll 5\n"
    "main;run 1\n";

/* ---- the parse sweep ---- */

/* Parses in with allocation N failing for every N of a successful parse.
 * Returns the number of allocations swept. */
static long sweep_parse(const input *in) {
    sweep_alloc a = {{.fail_at = -1}, 0};
    tm_alloc alloc = {.malloc_fn = sw_malloc, .realloc_fn = sw_realloc, .free_fn = sw_free, .ctx = &a};
    tm_options o = options_of(in, &alloc);
    tm_trace *t = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(in->data, in->len, &o, &t, &err);
    cr_assert_eq(st, TM_OK, "%s: %s (%s)", in->name, tm_status_str(st), err.message);
    long total = a.fa.count;
    cr_assert_gt(a.blocks, 0, "%s: the trace's memory must come from the caller's allocator", in->name);
    tm_trace_free(t);
    cr_assert_eq(a.fa.live, 0, "%s: %ld bytes leaked by a successful parse", in->name, a.fa.live);
    cr_assert_eq(a.blocks, 0, "%s: %ld blocks leaked by a successful parse", in->name, a.blocks);

    for (long n = 0; n < total; n++) {
        sw_reset(&a, n);
        t = (tm_trace *)&a; /* must be overwritten with NULL */
        memset(&err, 0, sizeof err);
        st = tm_trace_parse(in->data, in->len, &o, &t, &err);
        cr_assert_eq(st, TM_ERR_NOMEM, "%s: failing allocation %ld of %ld gave %s (%s)", in->name, n, total,
                     tm_status_str(st), err.message);
        cr_assert_eq(err.code, TM_ERR_NOMEM, "%s: allocation %ld: err.code %s", in->name, n,
                     tm_status_str(err.code));
        cr_assert_gt(strlen(err.message), 0, "%s: allocation %ld: empty message", in->name, n);
        cr_assert_null(err.reason, "%s: out of memory is not a Relay rejection", in->name);
        cr_assert_null(t, "%s: allocation %ld: *out not NULL on failure", in->name, n);
        cr_assert_eq(a.fa.live, 0, "%s: failing allocation %ld leaks %ld bytes", in->name, n, a.fa.live);
        cr_assert_eq(a.blocks, 0, "%s: failing allocation %ld leaks %ld blocks", in->name, n, a.blocks);
    }
    /* One more allocation than the count: the sweep covered all of them. */
    sw_reset(&a, total);
    cr_assert_eq(tm_trace_parse(in->data, in->len, &o, &t, &err), TM_OK, "%s", in->name);
    cr_assert_eq(a.fa.count, total, "%s: allocation count is not deterministic", in->name);
    tm_trace_free(t);
    cr_log_info("parse %s (%s): %ld allocations swept", in->name, in->mode == TM_MODE_RELAY ? "relay" : "default",
                total);
    return total;
}

Test(parse_sweep, rich_trace_default_mode) {
    tb_buf b = {0};
    rich_trace(&b);
    input in = from_tb("rich trace", TM_MODE_DEFAULT, &b);
    /* The trace must really take every path, or the sweep proves little. */
    tm_trace *t = parse_plain(&in);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(st->compressed_packets, 1);
    cr_assert_geq(st->incremental_resets, 4);
    cr_assert_eq(st->data_losses, 1);
    cr_assert_eq(st->dropped_stale_interning, 1);
    cr_assert_eq(st->dropped_unresolved, 1);
    cr_assert_eq(st->perf_samples, 10);
    cr_assert_eq(st->streaming_samples, 4);
    cr_assert_eq(st->stack_samples, 2);
    cr_assert_eq(st->samples_kept, 6 + 1 + 2 + 4 + 2);
    cr_assert_eq(st->clock_snapshots, 1);
    cr_assert_geq(st->mappings, 2);
    cr_assert_eq(st->mappings_without_build_id, 1);
    cr_assert_geq(st->threads, 5);
    tm_trace_free(t);
    cr_assert_gt(sweep_parse(&in), 50);
    tb_free(&b);
}

Test(parse_sweep, grown_trace) {
    tb_buf b = {0};
    grown_trace(&b, 400);
    static const tm_mode modes[] = {TM_MODE_DEFAULT, TM_MODE_RELAY};
    for (size_t m = 0; m < N_OF(modes); m++) {
        input in = from_tb("grown trace", modes[m], &b);
        tm_trace *t = parse_plain(&in);
        cr_assert_eq(tm_trace_get_stats(t)->samples_kept, 400);
        cr_assert_eq(tm_trace_thread_count(t), 24);
        tm_trace_free(t);
        cr_assert_gt(sweep_parse(&in), 50);
    }
    tb_free(&b);
}

Test(parse_sweep, rich_trace_relay_mode) {
    tb_buf b = {0};
    rich_trace(&b);
    input in = from_tb("rich trace (relay)", TM_MODE_RELAY, &b);
    cr_assert_gt(sweep_parse(&in), 20);
    tb_free(&b);
}

Test(parse_sweep, sample_v2_chunk) {
    tb_buf b = {0};
    rich_trace(&b);
    input perfetto = from_tb("rich trace", TM_MODE_DEFAULT, &b);
    input in = {"sample v2 chunk", TM_MODE_DEFAULT, TM_INPUT_SAMPLE_V2, NULL, 0};
    in.data = sample_v2_of(&perfetto, &in.len);
    tm_trace *t = parse_plain(&in);
    cr_assert_eq(tm_trace_get_stats(t)->samples_kept, 15, "the chunk holds the rich trace's samples");
    tm_trace_free(t);
    cr_assert_gt(sweep_parse(&in), 20);
    free(in.data);
    tb_free(&b);
}

Test(parse_sweep, folded_stacks) {
    input in = {"folded", TM_MODE_DEFAULT, TM_INPUT_FOLDED, (char *)folded_text, sizeof folded_text - 1};
    cr_assert_gt(sweep_parse(&in), 5);
    in.format = TM_INPUT_AUTO; /* detection allocates nothing of its own, but check */
    cr_assert_gt(sweep_parse(&in), 5);
}

/* Every Perfetto fixture under a few KB, in both modes (Relay mode only
 * where the fixture parses there: some exist to be rejected). */
static void sweep_fixture_dir(const char *dir, const char *const *names, size_t n_names, size_t *swept) {
    for (size_t k = 0; k < n_names; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, names[k]);
        size_t len;
        char *data = tu_read_file(path, &len);
        cr_assert_not_null(data, "cannot read %s", path);
        if (len > 8192) {
            free(data);
            continue;
        }
        static const tm_mode modes[] = {TM_MODE_DEFAULT, TM_MODE_RELAY};
        for (size_t m = 0; m < N_OF(modes); m++) {
            input in = {path, modes[m], TM_INPUT_PERFETTO, data, len};
            tm_options o = options_of(&in, NULL);
            tm_trace *t = NULL;
            if (tm_trace_parse(data, len, &o, &t, NULL) != TM_OK) continue;
            tm_trace_free(t);
            sweep_parse(&in);
            ++*swept;
        }
        free(data);
    }
}

Test(parse_sweep, fixtures) {
    static const char *const probes[] = {
        "p1_streaming_profile/trace.pftrace", "p2_perf_sample/trace.pftrace",
        "p3_incremental_loss/trace.pftrace",  "p4_compressed_packets/trace.pftrace",
        "p5_clocks/trace.pftrace",            "p6_no_clock_snapshot/trace.pftrace",
        "p7_sort_order/trace.pftrace",        "p8_cpu_profile_unittest_port/trace.pftrace",
    };
    static const char *const relay[] = {
        "empty_callstack.pftrace",        "frame_deduplication.pftrace",
        "incremental_state_reset.pftrace", "incremental_state_reset_before_after.pftrace",
        "java_frame_splitting.pftrace",   "main_thread_inferred_from_pid.pftrace",
        "mapping_resolution.pftrace",     "mapping_with_build_id.pftrace",
        "minimal.pftrace",                "multi_sequence.pftrace",
        "native_frame.pftrace",           "separate_namespaces.pftrace",
    };
    size_t swept = 0;
    sweep_fixture_dir(TM_FIXTURES "/perfetto-probes", probes, N_OF(probes), &swept);
    sweep_fixture_dir(TM_FIXTURES "/relay-compat", relay, N_OF(relay), &swept);
    cr_assert_geq(swept, N_OF(probes) + N_OF(relay), "most fixtures should parse in at least one mode");
}

/* ---- the exporter sweep ---- */

/* One exporter call on a parsed trace (base is the second trace of the
 * differential writers, parsed with the same allocator). */
typedef tm_status (*export_fn)(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err);

static tm_status ex_sample_v2(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    return tm_write_sample_v2(t, NULL, out, err);
}

static tm_status ex_sample_v2_meta(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    static const char meta[] = "{\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","
                               "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"android\","
                               "\"release\":\"app@1.0\",\"environment\":\"prod\",\"content_type\":\"perfetto\","
                               "\"client_sdk\":{\"name\":\"sentry.native\",\"version\":\"0.7.0\"},"
                               "\"measurements\":{\"cpu_usage\":{\"unit\":\"percent\",\"values\":"
                               "[{\"timestamp\":1700000000.5,\"value\":42.5}]}}}";
    tm_sample_v2_options o;
    memset(&o, 0, sizeof o);
    o.meta_json = meta;
    o.meta_len = sizeof meta - 1;
    o.remove_single_samples = 1;
    return tm_write_sample_v2(t, &o, out, err);
}

static tm_status ex_pprof(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    return tm_write_pprof(t, NULL, out, err);
}

static tm_status ex_pprof_raw(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    tm_pprof_options o;
    memset(&o, 0, sizeof o);
    o.uncompressed = 1;
    o.period_ns = 1000000;
    return tm_write_pprof(t, &o, out, err);
}

static tm_status ex_folded(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    tm_folded_options o;
    memset(&o, 0, sizeof o);
    o.thread_prefix = 1;
    return tm_write_folded(t, &o, out, err);
}

static tm_status ex_folded_diff(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    return tm_write_folded_diff(base, t, NULL, out, err);
}

static tm_status ex_speedscope(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    return tm_write_speedscope(t, NULL, out, err);
}

static tm_status ex_flamegraph(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    return tm_write_flamegraph(t, NULL, out, err);
}

static tm_status ex_icicle(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    tm_flamegraph_options o;
    memset(&o, 0, sizeof o);
    o.reverse = 1;
    o.title = "icicle <&>";
    o.min_width_px = 0.01;
    return tm_write_flamegraph(t, &o, out, err);
}

static tm_status ex_flamegraph_diff(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    return tm_write_flamegraph_diff(base, t, NULL, out, err);
}

static tm_status ex_report(const tm_trace *t, const tm_trace *base, const tm_sink *out, tm_error *err) {
    (void)base;
    return tm_write_report(t, out, err);
}

typedef struct exporter {
    const char *name;
    export_fn fn;
    int needs_time; /* refuses folded input, which has no timestamps */
} exporter;

static const exporter exporters[] = {
    {"sample-v2", ex_sample_v2, 1},     {"sample-v2 meta", ex_sample_v2_meta, 1},
    {"pprof", ex_pprof, 0},             {"pprof raw", ex_pprof_raw, 0},
    {"folded", ex_folded, 0},           {"folded diff", ex_folded_diff, 0},
    {"speedscope", ex_speedscope, 0},   {"flamegraph", ex_flamegraph, 0},
    {"icicle", ex_icicle, 0},           {"flamegraph diff", ex_flamegraph_diff, 0},
    {"report", ex_report, 0},
};

/* Parses in (and a base trace for the differential writers) through one
 * allocator, then fails each allocation ex makes in turn. Returns the
 * number swept. */
static long sweep_export(const input *in, const input *base_in, const exporter *ex) {
    sweep_alloc a = {{.fail_at = -1}, 0};
    tm_alloc alloc = {.malloc_fn = sw_malloc, .realloc_fn = sw_realloc, .free_fn = sw_free, .ctx = &a};
    tm_options o = options_of(in, &alloc), ob = options_of(base_in, &alloc);
    tm_trace *t = NULL, *base = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(in->data, in->len, &o, &t, &err), TM_OK, "%s: %s", in->name, err.message);
    cr_assert_eq(tm_trace_parse(base_in->data, base_in->len, &ob, &base, &err), TM_OK, "%s: %s", base_in->name,
                 err.message);
    long live = a.fa.live, blocks = a.blocks;

    tu_membuf ref = {0}, out = {0};
    tm_sink ref_sink = {.write = tu_membuf_write, .ctx = &ref}, sink = {.write = tu_membuf_write, .ctx = &out};
    long before = a.fa.count;
    tm_status st = ex->fn(t, base, &ref_sink, &err);
    cr_assert_eq(st, TM_OK, "%s on %s: %s (%s)", ex->name, in->name, tm_status_str(st), err.message);
    long total = a.fa.count - before;
    cr_assert_gt(ref.len, 0, "%s on %s: no output", ex->name, in->name);
    cr_assert_eq(a.fa.live, live, "%s on %s: the exporter keeps %ld bytes", ex->name, in->name, a.fa.live - live);
    cr_assert_eq(a.blocks, blocks, "%s on %s: the exporter keeps %ld blocks", ex->name, in->name,
                 a.blocks - blocks);

    for (long n = 0; n < total; n++) {
        a.fa.fail_at = a.fa.count + n;
        out.len = 0;
        memset(&err, 0, sizeof err);
        st = ex->fn(t, base, &sink, &err);
        cr_assert_eq(st, TM_ERR_NOMEM, "%s on %s: failing allocation %ld of %ld gave %s (%s)", ex->name, in->name,
                     n, total, tm_status_str(st), err.message);
        cr_assert_eq(err.code, TM_ERR_NOMEM, "%s on %s: allocation %ld: err.code %s", ex->name, in->name, n,
                     tm_status_str(err.code));
        cr_assert_eq(a.fa.live, live, "%s on %s: failing allocation %ld leaks %ld bytes", ex->name, in->name, n,
                     a.fa.live - live);
        cr_assert_eq(a.blocks, blocks, "%s on %s: failing allocation %ld leaks %ld blocks", ex->name, in->name, n,
                     a.blocks - blocks);
        /* The trace is untouched: the next export is the reference. */
        a.fa.fail_at = -1;
        out.len = 0;
        st = ex->fn(t, base, &sink, &err);
        cr_assert_eq(st, TM_OK, "%s on %s: export after failing allocation %ld: %s", ex->name, in->name, n,
                     err.message);
        cr_assert(out.len == ref.len && memcmp(out.data, ref.data, ref.len) == 0,
                  "%s on %s: output after failing allocation %ld differs from the reference", ex->name, in->name,
                  n);
    }
    tm_trace_free(t);
    tm_trace_free(base);
    cr_assert_eq(a.fa.live, 0, "%s on %s: %ld bytes leaked", ex->name, in->name, a.fa.live);
    cr_assert_eq(a.blocks, 0, "%s on %s: %ld blocks leaked", ex->name, in->name, a.blocks);
    tu_membuf_free(&ref);
    tu_membuf_free(&out);
    cr_log_info("%s on %s: %ld allocations swept", ex->name, in->name, total);
    return total;
}

/* A second, different profile for the differential writers. */
static void base_trace(tb_buf *t) {
    clock_packet(t, 1);
    interned_packet(t, 1, 0);
    for (int k = 0; k < 4; k++) tb_perf_sample(t, 1, TB_BOOT0 + 2000000ull * (uint64_t)k, 100, 100, 2, TB_SEQ_NEEDS);
}

static void sweep_all_exporters(const input *in, const input *base_in) {
    for (size_t e = 0; e < N_OF(exporters); e++) {
        if (exporters[e].needs_time && in->format == TM_INPUT_FOLDED) continue;
        long n = sweep_export(in, base_in, &exporters[e]);
        cr_assert_gt(n, 0, "%s on %s makes no allocation through the trace's allocator", exporters[e].name,
                     in->name);
    }
}

Test(export_sweep, rich_trace, .timeout = 120) {
    tb_buf b = {0}, bb = {0};
    rich_trace(&b);
    base_trace(&bb);
    input in = from_tb("rich trace", TM_MODE_DEFAULT, &b), base = from_tb("base trace", TM_MODE_DEFAULT, &bb);
    sweep_all_exporters(&in, &base);
    tb_free(&b);
    tb_free(&bb);
}

Test(export_sweep, grown_trace, .timeout = 120) {
    tb_buf b = {0}, bb = {0};
    grown_trace(&b, 400);
    rich_trace(&bb);
    input in = from_tb("grown trace", TM_MODE_DEFAULT, &b), base = from_tb("rich trace", TM_MODE_DEFAULT, &bb);
    sweep_all_exporters(&in, &base);
    sweep_all_exporters(&base, &in);
    tb_free(&b);
    tb_free(&bb);
}

Test(export_sweep, rich_trace_relay_mode) {
    tb_buf b = {0};
    rich_trace(&b);
    input in = from_tb("rich trace (relay)", TM_MODE_RELAY, &b);
    static const exporter relay_writers[] = {{"sample-v2 relay", ex_sample_v2, 1},
                                             {"sample-v2 relay meta", ex_sample_v2_meta, 1}};
    for (size_t e = 0; e < N_OF(relay_writers); e++) cr_assert_gt(sweep_export(&in, &in, &relay_writers[e]), 0);
    tb_free(&b);
}

Test(export_sweep, folded_and_sample_v2_inputs, .timeout = 120) {
    tb_buf b = {0};
    rich_trace(&b);
    input perfetto = from_tb("rich trace", TM_MODE_DEFAULT, &b);
    input chunk = {"sample v2 chunk", TM_MODE_DEFAULT, TM_INPUT_SAMPLE_V2, NULL, 0};
    chunk.data = sample_v2_of(&perfetto, &chunk.len);
    input folded = {"folded", TM_MODE_DEFAULT, TM_INPUT_FOLDED, (char *)folded_text, sizeof folded_text - 1};
    sweep_all_exporters(&chunk, &folded);
    sweep_all_exporters(&folded, &chunk);
    free(chunk.data);
    tb_free(&b);
}

/* ---- the SQL loader ---- */

static long count_rows(tm_db *db, const char *table) {
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", table);
    sqlite3_stmt *stmt = NULL;
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db), sql, -1, &stmt, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(tm_db_sqlite(db)));
    cr_assert_eq(sqlite3_step(stmt), SQLITE_ROW);
    long n = (long)sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    return n;
}

/* Fails each allocation of tm_db_new on trace b in turn. */
static void sweep_loader(const char *name, const tb_buf *b) {
    sweep_alloc a = {{.fail_at = -1}, 0};
    tm_alloc alloc = {.malloc_fn = sw_malloc, .realloc_fn = sw_realloc, .free_fn = sw_free, .ctx = &a};
    tm_options o;
    memset(&o, 0, sizeof o);
    o.alloc = &alloc;
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(b->data, b->len, &o, &db, &err), TM_OK, "%s: %s", name, err.message);
    long total = a.fa.count;
    cr_assert_gt(a.blocks, 0, "%s: the loader's memory must come from the caller's allocator", name);
    long samples = count_rows(db, "perf_sample"), frames = count_rows(db, "stack_profile_frame");
    cr_assert_gt(samples, 0, "%s", name);
    cr_assert_gt(frames, 0, "%s", name);
    tm_db_free(db);
    cr_assert_eq(a.fa.live, 0, "%s: %ld bytes leaked by a successful load", name, a.fa.live);
    cr_assert_eq(a.blocks, 0, "%s: %ld blocks leaked by a successful load", name, a.blocks);

    for (long n = 0; n < total; n++) {
        sw_reset(&a, n);
        db = (tm_db *)&a;
        memset(&err, 0, sizeof err);
        tm_status st = tm_db_new(b->data, b->len, &o, &db, &err);
        cr_assert_eq(st, TM_ERR_NOMEM, "%s: failing loader allocation %ld of %ld gave %s (%s)", name, n, total,
                     tm_status_str(st), err.message);
        cr_assert_eq(err.code, TM_ERR_NOMEM, "%s", name);
        cr_assert_null(db, "%s: allocation %ld: *out not NULL on failure", name, n);
        cr_assert_eq(a.fa.live, 0, "%s: failing loader allocation %ld leaks %ld bytes", name, n, a.fa.live);
        cr_assert_eq(a.blocks, 0, "%s: failing loader allocation %ld leaks %ld blocks", name, n, a.blocks);
    }
    /* Loading after all that failure still gives the same tables. */
    sw_reset(&a, -1);
    cr_assert_eq(tm_db_new(b->data, b->len, &o, &db, &err), TM_OK, "%s: %s", name, err.message);
    cr_assert_eq(a.fa.count, total, "%s: the loader's allocation count is not deterministic", name);
    cr_assert_eq(count_rows(db, "perf_sample"), samples, "%s", name);
    cr_assert_eq(count_rows(db, "stack_profile_frame"), frames, "%s", name);
    tm_db_free(db);
    cr_assert_eq(a.fa.live, 0, "%s", name);
    cr_log_info("loader on %s: %ld allocations swept", name, total);
}

Test(sql_sweep, every_loader_allocation) {
    tb_buf b = {0};
    rich_trace(&b);
    sweep_loader("rich trace", &b);
    tb_free(&b);
    /* Past 1024 samples the loader grows its sample columns: 1100 samples
     * (22 KB) reach that growth and the reordering sort. */
    grown_trace(&b, 1100);
    sweep_loader("grown trace", &b);
    tb_free(&b);
    /* 60 samples make 12 runs, merged in one pass, and a PerfSample of lost
     * records, sorted with the samples and then dropped: the sort's order
     * is freed with the count it was made for, not the rows kept. */
    grown_trace(&b, 60);
    size_t p = tb_packet_open(&b, 1, TB_BOOT0 + 1500000ull, TB_SEQ_NEEDS);
    size_t s = tb_open(&b, TM_PF_PACKET_PERF_SAMPLE);
    tb_uint(&b, TM_PF_PERF_SAMPLE_CPU, 1);
    tb_uint(&b, TM_PF_PERF_SAMPLE_KERNEL_RECORDS_LOST, 3);
    tb_close(&b, s);
    tb_close(&b, p);
    sweep_loader("reordered trace dropping a sample", &b);
    tb_free(&b);
}

/* 60 000 samples, each of a callstack interned just before it: 3 000
 * roots, each callstack a new (root, frame) pair and a new leaf under it, so
 * that 123 000 callsite rows come evenly over the trace. */
static void wide_trace(tb_buf *t) {
    size_t p, i = open_first_interned(t, &p);
    uint64_t lib = 1;
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "lib.so", 6);
    tb_mapping(t, 1, 0, 1ull << 32, (1ull << 32) + 0x100000, &lib, 1);
    for (uint64_t k = 1; k <= 3000; k++) tb_frame(t, k, 0, 1, 0x10 * k);
    tb_close(t, i);
    tb_close(t, p);
    for (uint64_t c = 0; c < 60000; c++) {
        uint64_t frames[3] = {c % 3000 + 1, c / 3000 + 1, c % 7 + 1};
        p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_NEEDS);
        i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
        tb_callstack(t, c + 1, frames, 3, 1);
        tb_close(t, i);
        tb_close(t, p);
        tb_perf_sample(t, 1, TB_BOOT0 + 1000ull * c, 100, 100, c + 1, TB_SEQ_NEEDS);
    }
}

/* An allocator that refuses any block larger than `largest` (as a process
 * with little address space left would) and, with doubling_only, a block
 * of 64 KiB or more grown more than twice, counting the blocks it grew. */
typedef struct capped_alloc {
    size_t largest;
    bool doubling_only;
    long refused, grown;
} capped_alloc;

static void *cap_malloc(void *ctx, size_t size) {
    capped_alloc *a = ctx;
    if (size > a->largest) return a->refused++, NULL;
    return malloc(size);
}
static void *cap_realloc(void *ctx, void *p, size_t old_size, size_t new_size) {
    capped_alloc *a = ctx;
    (void)old_size;
    if (new_size > a->largest || (a->doubling_only && old_size >= 64u << 10 && new_size > 2 * old_size))
        return a->refused++, NULL;
    a->grown++;
    return realloc(p, new_size);
}
static void cap_free(void *ctx, void *p, size_t size) {
    (void)ctx, (void)size;
    free(p);
}

/* The rows of table in trace b loaded through allocator a. */
static long rows_loaded(const tb_buf *b, capped_alloc *a, const char *table) {
    tm_alloc alloc = {.malloc_fn = cap_malloc, .realloc_fn = cap_realloc, .free_fn = cap_free, .ctx = a};
    tm_options o;
    memset(&o, 0, sizeof o);
    o.alloc = &alloc;
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(b->data, b->len, &o, &db, &err), TM_OK, "largest block %zu: %s", a->largest, err.message);
    long rows = count_rows(db, table);
    tm_db_free(db);
    return rows;
}

/* Past 64 Ki samples the loader grows its sample columns at once to what
 * the rest of the trace promises; where that much memory is refused it
 * grows them as much as the next sample needs, and loads the same rows. */
Test(sql_sweep, columns_grown_for_the_promised_samples) {
    tb_buf b = {0};
    /* 500 000 promise 562 500 (an eighth more), which a column doubling
     * from 64 Ki makes 1 Mi rows: 8 MiB of times, refused by tight */
    grown_trace(&b, 500000);
    capped_alloc roomy = {.largest = SIZE_MAX}, tight = {.largest = 4u << 20};
    cr_expect_eq(rows_loaded(&b, &roomy, "perf_sample"), 500000);
    cr_expect_eq(rows_loaded(&b, &tight, "perf_sample"), 500000);
    cr_expect_eq(roomy.refused, 0);
    cr_expect_gt(tight.refused, 0, "no allocation over 4 MiB was asked for");
    /* with room, 5 columns grow once from 64 Ki rows; without, they double 3 times */
    cr_expect_leq(roomy.grown + 10, tight.grown, "reallocations: %ld with room, %ld without", roomy.grown,
                  tight.grown);
    tb_free(&b);
}

/* So do the callsite rows: past 64 Ki they grow at once to what the trace
 * promises, or as much as they need where that is refused. */
Test(sql_sweep, callsites_grown_for_the_promised_rows) {
    tb_buf b = {0};
    wide_trace(&b);
    /* At 64 Ki rows the trace promises about 138 000: the frame column
     * grows to 256 Ki rows at once, which tight refuses */
    capped_alloc roomy = {.largest = SIZE_MAX}, tight = {.largest = SIZE_MAX, .doubling_only = true};
    cr_expect_eq(rows_loaded(&b, &roomy, "stack_profile_callsite"), 123000);
    cr_expect_eq(rows_loaded(&b, &tight, "stack_profile_callsite"), 123000);
    cr_expect_gt(tight.refused, 0, "no block was grown more than twice");
    tb_free(&b);
}
