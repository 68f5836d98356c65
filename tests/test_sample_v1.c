/*
 * test_sample_v1.c — Sentry Sample v1 transaction profiles: the writer
 * (src/export/out_sample_v1.c), the reader (src/profile/in_sample_v2.c in
 * v1 mode), detection, RFC 3339 times (src/wire/rfc3339.c) and the CLI.
 *
 * - Round trip: Perfetto -> v1 -> parse (detected) gives the same samples
 *   (Unix ns exactly), threads, names and stacks; writing it again gives
 *   the same bytes.
 * - Field-level checks of the JSON, with and without metadata.
 * - Relay's v1 rules: idle edges and single-sample threads dropped,
 *   NotEnoughSamples, the 30 s DurationIsTooLong and --truncate.
 * - Malformed inputs: wrong types, missing keys, stack and frame indexes
 *   out of range, huge numbers, every truncated prefix: the right status,
 *   a message naming the field, an offset inside the input.
 * - A profile made by sentry-python's profiler (tests/fixtures/sentry-python).
 * - in_app on frames: the default rule and prefixes, as Sample v2.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile/trace.h" /* tm_trace internals */
#include "trace_builder.h"
#include "tutil.h"
#include "wire/rfc3339.h"

/* ---- helpers ---- */

static tm_trace *parse_ok(const void *buf, size_t len, const tm_options *opts) {
    tm_trace *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_trace_parse(buf, len, opts, &t, &err);
    cr_assert_eq(st, TM_OK, "%s at byte %llu: %s", tm_status_str(st), (unsigned long long)err.offset, err.message);
    return t;
}

static tm_status write_v1(const tm_trace *t, const tm_sample_v1_options *o, tu_membuf *out, tm_error *err) {
    memset(out, 0, sizeof *out);
    tm_sink sink = {.write = tu_membuf_write, .ctx = out};
    memset(err, 0, sizeof *err);
    return tm_write_sample_v1(t, o, &sink, err);
}

static tu_membuf write_v1_ok(const tm_trace *t, const tm_sample_v1_options *o) {
    tu_membuf out;
    tm_error err;
    tm_status st = write_v1(t, o, &out, &err);
    cr_assert_eq(st, TM_OK, "%s: %s", tm_status_str(st), err.message);
    return out;
}

static json_t *load_json(const tu_membuf *m) {
    json_error_t je;
    json_t *j = json_loadb(m->data, m->len, 0, &je);
    cr_assert_not_null(j, "%s: %.200s", je.text, m->data);
    return j;
}

static const char *sget(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    cr_assert(json_is_string(v), "%s is not a string", key);
    return json_string_value(v);
}

/* Two threads of process 42 (42 named by the process tree, 43 by its
 * thread name), a Java frame, a native one in a mapping with a build id,
 * samples out of order with ties, REALTIME = BOOTTIME + 1.7e18. */
static void build_trace(tb_buf *t, const uint64_t *offs, size_t n) {
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[2] = {1000000000ull, 1700000001000000000ull};
    tb_clock_snapshot(t, 0, ids, vals, 2);
    size_t pkt = tb_packet_open(t, 2, 1, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(t, 42, 42, "app");
    tb_pt_thread(t, 43, 42, "worker \"1\"");
    tb_close(t, pt);
    tb_close(t, pkt);
    pkt = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "leaf", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "com.example.Foo.bar", 19);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 10, "libexample.so", 13);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 11, "base.odex", 9);
    static const uint8_t build_id[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 20, build_id, sizeof build_id);
    const uint64_t lib_path[] = {10}, odex_path[] = {11};
    tb_mapping(t, 1, 20, 0x70000000, 0x70010000, lib_path, 1);
    tb_mapping(t, 2, 0, 0x1000, 0x2000, odex_path, 1);
    tb_frame(t, 1, 1, 1, 0x200);
    tb_frame(t, 2, 2, 1, 0x400);
    tb_frame(t, 3, 3, 2, 0x100);
    tb_frame(t, 4, 0, 1, 0x300); /* no function: an address in libexample.so */
    const uint64_t cs1[] = {1, 2}, cs2[] = {1, 3, 4}; /* root first, as Perfetto */
    tb_callstack(t, 1, cs1, 2, 0);
    tb_callstack(t, 2, cs2, 3, 1);
    tb_close(t, in);
    tb_close(t, pkt);
    for (size_t i = 0; i < n; i++) tb_perf_sample(t, 1, 1000000000ull + offs[i], 42, i % 2 ? 43 : 42, 1 + i % 2, 0);
}

static const uint64_t OFFS[] = {7, 1000000001, 3, 999999999, 1000000001, 5000000123, 0, 42};
#define N_OFFS (sizeof OFFS / sizeof *OFFS)

static tm_trace *built(const uint64_t *offs, size_t n, tb_buf *keep) {
    memset(keep, 0, sizeof *keep);
    build_trace(keep, offs, n);
    return parse_ok(keep->data, keep->len, NULL);
}

/* The function names of a stack, leaf first, joined with ';'. */
static void stack_text(const tm_profile *p, uint32_t stack, char *out, size_t cap) {
    const tm_prof_stack *s = &p->stacks[stack];
    size_t n = 0;
    out[0] = 0;
    for (uint32_t k = 0; k < s->len; k++) {
        const tm_prof_frame *f = &p->frames[p->frame_ids[s->off + k]];
        n += (size_t)snprintf(out + n, n < cap ? cap - n : 0, "%s%.*s@%llx", k ? ";" : "", (int)f->function.len,
                              (const char *)f->function.data, (unsigned long long)f->addr);
    }
}

/* ---- round trip ---- */

Test(sample_v1, round_trip) {
    tb_buf tb;
    tm_trace *a = built(OFFS, N_OFFS, &tb);
    tu_membuf v1 = write_v1_ok(a, NULL);
    cr_assert_eq(tm_input_detect(v1.data, v1.len), TM_INPUT_SAMPLE_V1);
    tm_trace *b = parse_ok(v1.data, v1.len, NULL);
    cr_assert_eq(b->input, TM_INPUT_SAMPLE_V1);
    const tm_profile *pa = tm_trace_profile(a), *pb = tm_trace_profile(b);
    cr_assert_eq(pb->n_samples, pa->n_samples);
    for (size_t i = 0; i < pa->n_samples; i++) {
        int64_t unix_a;
        cr_assert(tm_profile_realtime(pa, pa->samples[i].ts, &unix_a));
        cr_expect_eq(pb->samples[i].ts, unix_a, "sample %zu: %lld vs %lld", i, (long long)pb->samples[i].ts,
                     (long long)unix_a);
        cr_expect_eq(pb->threads[pb->samples[i].thread].tid, pa->threads[pa->samples[i].thread].tid);
        char sa[256], sb[256];
        stack_text(pa, pa->samples[i].stack, sa, sizeof sa);
        stack_text(pb, pb->samples[i].stack, sb, sizeof sb);
        cr_expect_str_eq(sb, sa, "sample %zu", i);
    }
    for (size_t i = 0; i < pb->n_threads; i++) {
        tm_thread_info th;
        cr_assert_eq(tm_trace_thread(b, i, &th), TM_OK);
        const char *want = th.tid == 42 ? "app" : "worker \"1\"";
        cr_expect(th.name_len == strlen(want) && memcmp(th.name, want, th.name_len) == 0, "tid %lld: %.*s",
                  (long long)th.tid, (int)th.name_len, th.name);
    }
    /* Native frames keep their image: the mapping comes back from debug_meta. */
    int linked = 0;
    for (size_t i = 0; i < pb->n_frames; i++)
        linked += pb->frames[i].mapping && pb->frames[i].rel_pc == 0x300;
    cr_expect_eq(linked, 1);
    tu_membuf again = write_v1_ok(b, NULL);
    cr_expect(again.len == v1.len && memcmp(again.data, v1.data, v1.len) == 0, "second pass differs:\n%.*s\n%.*s",
              (int)v1.len, v1.data, (int)again.len, again.data);
    tu_membuf_free(&again);
    tu_membuf_free(&v1);
    tm_trace_free(b);
    tm_trace_free(a);
    tb_free(&tb);
}

/* ---- the JSON ---- */

Test(sample_v1, fields) {
    tb_buf tb;
    tm_trace *t = built(OFFS, N_OFFS, &tb);
    tu_membuf out = write_v1_ok(t, NULL);
    json_t *j = load_json(&out);
    cr_expect_str_eq(sget(j, "version"), "1");
    cr_expect_str_eq(sget(j, "platform"), "java"); /* it has a Java frame */
    const char *id = sget(j, "event_id");
    cr_expect_eq(strlen(id), 32);
    cr_expect_eq(id[12], '4', "UUID v4 layout: %s", id);
    /* The first sample is BOOTTIME 1e9 + 0 -> Unix 1700000001 s. */
    cr_expect_str_eq(sget(j, "timestamp"), "2023-11-14T22:13:21.000000000Z");
    cr_expect_str_eq(sget(json_object_get(j, "device"), "architecture"), "unknown");
    cr_expect_str_eq(sget(json_object_get(j, "os"), "name"), "unknown");
    cr_expect_null(json_object_get(j, "release"));
    json_t *images = json_object_get(json_object_get(j, "debug_meta"), "images");
    cr_expect_eq(json_array_size(images), 1);
    cr_expect_str_eq(sget(json_array_get(images, 0), "code_file"), "libexample.so");

    json_t *txs = json_object_get(j, "transactions");
    cr_assert_eq(json_array_size(txs), 1);
    json_t *tx = json_array_get(txs, 0);
    cr_expect_str_eq(sget(tx, "name"), "tracemill");
    cr_expect_eq(strlen(sget(tx, "id")), 32);
    cr_expect_eq(strlen(sget(tx, "trace_id")), 32);
    cr_expect_str_eq(sget(tx, "relative_start_ns"), "0");
    cr_expect_str_eq(sget(tx, "relative_end_ns"), "5000000123");
    cr_expect_str_eq(sget(tx, "active_thread_id"), "42"); /* 4 samples each: the lower tid */

    json_t *prof = json_object_get(j, "profile");
    json_t *samples = json_object_get(prof, "samples");
    cr_assert_eq(json_array_size(samples), N_OFFS);
    static const char *const elapsed[] = {"0", "3", "7", "42", "999999999", "1000000001", "1000000001", "5000000123"};
    for (size_t i = 0; i < N_OFFS; i++) {
        json_t *s = json_array_get(samples, i);
        cr_expect_str_eq(sget(s, "elapsed_since_start_ns"), elapsed[i]);
        const char *tid = sget(s, "thread_id");
        cr_expect(strcmp(tid, "42") == 0 || strcmp(tid, "43") == 0, "%s", tid);
        cr_expect(json_is_integer(json_object_get(s, "stack_id")));
    }
    /* Stacks leaf first: [leaf, main] and [0x300, Foo.bar, main]. */
    json_t *stacks = json_object_get(prof, "stacks"), *frames = json_object_get(prof, "frames");
    cr_assert_eq(json_array_size(stacks), 2);
    json_t *f0 = json_array_get(frames, json_integer_value(json_array_get(json_array_get(stacks, 0), 0)));
    json_t *f1 = json_array_get(frames, json_integer_value(json_array_get(json_array_get(stacks, 0), 1)));
    cr_expect_str_eq(sget(f0, "function"), "leaf");
    cr_expect_str_eq(sget(f1, "function"), "main");
    cr_expect_str_eq(sget(f1, "instruction_addr"), "0x70000200");
    json_t *java = json_array_get(frames, json_integer_value(json_array_get(json_array_get(stacks, 1), 1)));
    cr_expect_str_eq(sget(java, "function"), "bar");
    cr_expect_str_eq(sget(java, "module"), "com.example.Foo");
    cr_expect_str_eq(sget(java, "platform"), "java");
    json_t *tm = json_object_get(prof, "thread_metadata");
    cr_expect_str_eq(sget(json_object_get(tm, "42"), "name"), "app");
    cr_expect_str_eq(sget(json_object_get(tm, "43"), "name"), "worker \"1\"");
    json_decref(j);
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&tb);
}

Test(sample_v1, metadata) {
    static const char meta[] =
        "{\"event_id\":\"A2669CD2-C7E0-47ED-8298-4AAF9666A6B6\",\"platform\":\"python\",\"release\":\"r@1\","
        "\"environment\":\"prod\",\"device\":{\"architecture\":\"x86_64\"},\"os\":{\"name\":\"Linux\",\"version\":\"6.1\"},"
        "\"runtime\":{\"name\":\"CPython\",\"version\":\"3.11.2\"},\"unknown\":[1],"
        "\"transactions\":[{\"name\":\"GET /\",\"id\":\"0123456789abcdef0123456789abcdef\","
        "\"trace_id\":\"fedcba98765432100123456789abcdef\",\"active_thread_id\":\"43\"}]}";
    tb_buf tb;
    tm_trace *t = built(OFFS, N_OFFS, &tb);
    tm_sample_v1_options o = {.meta_json = meta, .meta_len = sizeof meta - 1, .truncate = 0};
    tu_membuf out = write_v1_ok(t, &o);
    json_t *j = load_json(&out);
    cr_expect_str_eq(sget(j, "event_id"), "a2669cd2c7e047ed82984aaf9666a6b6");
    cr_expect_str_eq(sget(j, "platform"), "python");
    cr_expect_str_eq(sget(j, "release"), "r@1");
    cr_expect_str_eq(sget(j, "environment"), "prod");
    cr_expect_str_eq(sget(json_object_get(j, "device"), "architecture"), "x86_64");
    cr_expect_str_eq(sget(json_object_get(j, "os"), "version"), "6.1");
    cr_expect_str_eq(sget(json_object_get(j, "runtime"), "name"), "CPython");
    cr_expect_null(json_object_get(j, "unknown"));
    json_t *tx = json_array_get(json_object_get(j, "transactions"), 0);
    cr_expect_str_eq(sget(tx, "name"), "GET /");
    cr_expect_str_eq(sget(tx, "id"), "0123456789abcdef0123456789abcdef");
    cr_expect_str_eq(sget(tx, "trace_id"), "fedcba98765432100123456789abcdef");
    cr_expect_str_eq(sget(tx, "active_thread_id"), "43");
    json_decref(j);
    tu_membuf_free(&out);

    static const struct {
        const char *meta, *reason, *message;
    } bad[] = {
        {"[1]", "InvalidJson", "not a JSON object"},
        {"{\"event_id\":", "InvalidJson", "not JSON"},
        {"{\"version\":\"2\"}", "InvalidJson", "version must be \"1\""},
        {"{\"event_id\":\"xyz\"}", "InvalidJson", "event_id is not a non-nil UUID"},
        {"{\"event_id\":\"00000000000000000000000000000000\"}", "InvalidJson", "event_id"},
        {"{\"release\":7}", "InvalidJson", "release is not a string"},
        {"{\"device\":{}}", "InvalidJson", "device.architecture is missing"},
        {"{\"device\":{\"architecture\":\"x\",\"is_emulator\":1}}", "InvalidJson", "device.is_emulator"},
        {"{\"os\":{\"name\":\"Linux\"}}", "InvalidJson", "os.version is missing"},
        {"{\"runtime\":[]}", "InvalidJson", "runtime is not an object"},
        {"{\"transactions\":{}}", "InvalidJson", "transactions is not an array"},
        {"{\"transaction\":{\"name\":\"\"}}", "InvalidTransactionMetadata", "transaction.name"},
        {"{\"transaction\":{\"id\":\"nope\"}}", "InvalidTransactionMetadata", "transaction.id"},
        {"{\"transaction\":{\"active_thread_id\":\"12a\"}}", "InvalidJson", "active_thread_id"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tm_sample_v1_options b = {.meta_json = bad[i].meta, .meta_len = strlen(bad[i].meta), .truncate = 0};
        tm_error err;
        tm_status st = write_v1(t, &b, &out, &err);
        cr_expect_eq(st, TM_ERR_REJECTED, "%s: %s", bad[i].meta, tm_status_str(st));
        cr_expect(err.reason && strcmp(err.reason, bad[i].reason) == 0, "%s: reason %s", bad[i].meta,
                  err.reason ? err.reason : "NULL");
        cr_expect(strstr(err.message, bad[i].message) != NULL, "%s: %s", bad[i].meta, err.message);
        cr_expect_eq(out.len, 0, "%s: wrote output", bad[i].meta);
        cr_expect_eq(tm_sample_v1_check_meta(bad[i].meta, strlen(bad[i].meta), &err), TM_ERR_REJECTED);
        tu_membuf_free(&out);
    }
    tm_trace_free(t);
    tb_free(&tb);
}

/* ---- Relay's v1 rules ---- */

/* A Sample v1 document (for the reader) from samples "elapsed:tid:stack". */
static char *v1_doc(const char *samples) {
    static const char head[] = "{\"version\":\"1\",\"timestamp\":\"2024-01-01T00:00:00Z\",\"profile\":{"
                               "\"frames\":[{\"function\":\"a\"},{\"function\":\"b\"}],"
                               "\"stacks\":[[0,1],[]],\"samples\":[";
    size_t cap = strlen(samples) * 16 + 256;
    char *doc = malloc(cap);
    cr_assert_not_null(doc);
    size_t n = (size_t)snprintf(doc, cap, "%s", head);
    const char *p = samples;
    while (*p) {
        unsigned long long e;
        long long tid;
        unsigned stack;
        int used = 0;
        cr_assert_eq(sscanf(p, "%llu:%lld:%u%n", &e, &tid, &stack, &used), 3, "%s", p);
        n += (size_t)snprintf(doc + n, cap - n, "%s{\"elapsed_since_start_ns\":\"%llu\",\"thread_id\":\"%lld\","
                              "\"stack_id\":%u}", p == samples ? "" : ",", e, tid, stack);
        p += used;
        while (*p == ' ') p++;
    }
    snprintf(doc + n, cap - n, "]}}");
    return doc;
}

/* The elapsed times of the samples written for a v1 input, as text. */
static tm_status normalised(const char *samples, const tm_sample_v1_options *o, char *out, size_t cap,
                            tm_error *err) {
    char *doc = v1_doc(samples);
    tm_trace *t = parse_ok(doc, strlen(doc), NULL);
    tu_membuf m;
    tm_status st = write_v1(t, o, &m, err);
    out[0] = 0;
    if (st == TM_OK) {
        json_t *j = load_json(&m);
        json_t *s = json_object_get(json_object_get(j, "profile"), "samples");
        size_t n = 0;
        for (size_t i = 0; i < json_array_size(s); i++)
            n += (size_t)snprintf(out + n, cap - n, "%s%s:%s", i ? " " : "",
                                  sget(json_array_get(s, i), "elapsed_since_start_ns"),
                                  sget(json_array_get(s, i), "thread_id"));
        json_decref(j);
    }
    tu_membuf_free(&m);
    tm_trace_free(t);
    free(doc);
    return st;
}

Test(sample_v1, relay_normalisation) {
    char got[512];
    tm_error err;
    /* Thread 1: idle (stack 1 is empty) at both edges; thread 2: one sample;
     * thread 3: only idle samples. Times restart at the first kept sample. */
    cr_assert_eq(normalised("0:1:1 10:1:0 20:1:1 30:1:0 40:1:1 15:2:0 5:3:1 25:3:1", NULL, got, sizeof got, &err),
                 TM_OK, "%s", err.message);
    cr_expect_str_eq(got, "0:1 10:1 20:1");
    /* Nothing left. */
    cr_expect_eq(normalised("0:1:0 10:2:0 20:3:1 30:3:1", NULL, got, sizeof got, &err), TM_ERR_REJECTED);
    cr_expect_str_eq(err.reason, "NotEnoughSamples");
    /* 30 s exactly is allowed, one nanosecond more is not. */
    cr_expect_eq(normalised("5:1:0 30000000005:1:0", NULL, got, sizeof got, &err), TM_OK, "%s", err.message);
    cr_expect_str_eq(got, "0:1 30000000000:1");
    cr_expect_eq(normalised("5:1:0 30000000006:1:0", NULL, got, sizeof got, &err), TM_ERR_REJECTED);
    cr_expect_str_eq(err.reason, "DurationIsTooLong");
    cr_expect(strstr(err.message, "30 s") != NULL, "%s", err.message);
    /* truncate: keep the first 30 s of the trace, then normalise. */
    tm_sample_v1_options o = {.meta_json = NULL, .meta_len = 0, .truncate = 1};
    cr_expect_eq(normalised("5:1:0 7:2:0 20000000000:1:0 30000000006:1:0 30000000007:2:0", &o, got, sizeof got, &err),
                 TM_OK, "%s", err.message);
    cr_expect_str_eq(got, "0:1 19999999995:1");
}

/* Two PerfSamples of one frame, and no clock snapshot at all. */
static void two_samples_without_clocks(tb_buf *tb) {
    size_t pkt = tb_packet_open(tb, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(tb, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(tb, TM_PF_INTERNED_FUNCTION_NAMES, 1, "f", 1);
    tb_frame(tb, 1, 1, 0, 0);
    const uint64_t cs[] = {1};
    tb_callstack(tb, 1, cs, 1, 0);
    tb_close(tb, in);
    tb_close(tb, pkt);
    tb_perf_sample(tb, 1, 100, 1, 1, 1, 0);
    tb_perf_sample(tb, 1, 200, 1, 1, 1, 0);
}

Test(sample_v1, unsupported_traces) {
    tm_error err;
    tu_membuf out;
    /* Folded stacks have no time. */
    static const char folded[] = "main;a 3\n";
    tm_trace *t = parse_ok(folded, sizeof folded - 1, NULL);
    cr_expect_eq(write_v1(t, NULL, &out, &err), TM_ERR_UNSUPPORTED);
    cr_expect(strstr(err.message, "timestamps") != NULL, "%s", err.message);
    tu_membuf_free(&out);
    tm_trace_free(t);
    /* A Perfetto trace with no REALTIME clock: no start time. */
    tb_buf tb = {0};
    two_samples_without_clocks(&tb);
    t = parse_ok(tb.data, tb.len, NULL);
    cr_expect_eq(write_v1(t, NULL, &out, &err), TM_ERR_UNSUPPORTED);
    cr_expect(strstr(err.message, "REALTIME") != NULL, "%s", err.message);
    cr_expect_eq(tm_write_sample_v1(NULL, NULL, NULL, &err), TM_ERR_INVALID_ARG);
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&tb);
}

/* --compat relay: the docs give its Sample v1 output (no in_app, Relay's
 * addresses); its time comes from Relay's clock, the first snapshot with
 * BOOTTIME and REALTIME, as Sample v2's does. */
Test(sample_v1, relay_mode_has_a_timestamp) {
    tb_buf tb = {0};
    build_trace(&tb, OFFS, N_OFFS);
    const tm_options relay = {.mode = TM_MODE_RELAY};
    tm_trace *t = parse_ok(tb.data, tb.len, &relay);
    tm_error err;
    tu_membuf out;
    tm_status st = write_v1(t, NULL, &out, &err);
    cr_assert_eq(st, TM_OK, "%s: %s", tm_status_str(st), err.message);
    json_t *j = load_json(&out);
    cr_expect_str_eq(sget(j, "timestamp"), "2023-11-14T22:13:21.000000000Z");
    json_t *frames = json_object_get(json_object_get(j, "profile"), "frames");
    cr_assert(json_array_size(frames) > 0);
    for (size_t i = 0; i < json_array_size(frames); i++)
        cr_expect_null(json_object_get(json_array_get(frames, i), "in_app"), "frame %zu has in_app", i);
    json_decref(j);
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&tb);
    /* Without such a snapshot the timestamp is unknown, and the message says which clocks. */
    memset(&tb, 0, sizeof tb);
    two_samples_without_clocks(&tb);
    t = parse_ok(tb.data, tb.len, &relay);
    cr_expect_eq(write_v1(t, NULL, &out, &err), TM_ERR_UNSUPPORTED);
    cr_expect(strstr(err.message, "BOOTTIME") != NULL, "%s", err.message);
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&tb);
}

/* ---- the reader ---- */

Test(sample_v1, reader_fields) {
    /* Keys in any order, timestamp after the profile with an offset and
     * microseconds, numbers where sentry-python writes strings, older frame
     * key names, unknown keys, an escaped thread name. */
    static const char doc[] =
        "{\"profile\":{\"samples\":[{\"stack_id\":0,\"thread_id\":7,\"elapsed_since_start_ns\":1500,\"x\":{}},"
        "{\"thread_id\":\"7\",\"elapsed_since_start_ns\":\"500\",\"stack_id\":1}],"
        "\"stacks\":[[0,1],[1]],\"frames\":[{\"name\":\"leaf\",\"file\":\"a.py\",\"line\":3},"
        "{\"function\":\"main\",\"module\":\"app\",\"abs_path\":\"/a.py\",\"lineno\":1,\"in_app\":true}],"
        "\"thread_metadata\":{\"7\":{\"name\":\"w\\u00e9\"}}},"
        "\"transactions\":[{\"name\":\"t\"}],\"platform\":\"python\",\"version\":\"1\","
        "\"timestamp\":\"2024-02-29T01:00:00.000001+01:00\"}";
    cr_assert_eq(tm_input_detect(doc, sizeof doc - 1), TM_INPUT_SAMPLE_V1);
    tm_trace *t = parse_ok(doc, sizeof doc - 1, NULL);
    const tm_profile *p = tm_trace_profile(t);
    cr_assert_eq(p->n_samples, 2);
    int64_t start = 1709164800000001000ll; /* 2024-02-29T00:00:00.000001Z */
    cr_expect_eq(p->samples[0].ts, start + 500);
    cr_expect_eq(p->samples[1].ts, start + 1500);
    char s[256];
    stack_text(p, p->samples[1].stack, s, sizeof s);
    cr_expect_str_eq(s, "leaf@0;main@0");
    cr_assert_eq(p->n_threads, 1);
    cr_expect(p->threads[0].name.len == 3 && memcmp(p->threads[0].name.data, "w\xc3\xa9", 3) == 0);
    cr_expect_eq(p->stats.first_sample_ns, start + 500);
    tm_trace_free(t);
}

Test(sample_v1, detection) {
    static const struct {
        const char *doc;
        tm_input_format want;
    } cases[] = {
        {"{\"version\":\"1\"}", TM_INPUT_SAMPLE_V1},
        {"\xef\xbb\xbf {\"version\":\"1\",\"profile\":{}}", TM_INPUT_SAMPLE_V1},
        {"{\"version\":\"2\"}", TM_INPUT_SAMPLE_V2},
        {"{\"version\":1}", TM_INPUT_SAMPLE_V2},
        {"{\"profile\":{\"samples\":[{\"elapsed_since_start_ns\":\"0\"}]},\"version\":\"2\"}", TM_INPUT_SAMPLE_V1},
        {"{\"profile\":{\"frames\":[],\"samples\":[{\"timestamp\":1.5}]}}", TM_INPUT_SAMPLE_V2},
        {"{\"profile\":{\"samples\":[]},\"version\":\"1\"}", TM_INPUT_SAMPLE_V1},
        {"{\"profile\":{\"samples\":[]}}", TM_INPUT_SAMPLE_V2},
        {"{\"version\":", TM_INPUT_SAMPLE_V2},
        {"{", TM_INPUT_SAMPLE_V2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_expect_eq(tm_input_detect(cases[i].doc, strlen(cases[i].doc)), cases[i].want, "%s", cases[i].doc);
    cr_expect_str_eq(tm_input_format_name(TM_INPUT_SAMPLE_V1), "sample-v1");
}

static size_t offset_of(const char *doc, const char *needle) {
    const char *p = strstr(doc, needle);
    cr_assert_not_null(p, "test input lacks %s", needle);
    return (size_t)(p - doc);
}

Test(sample_v1, malformed) {
#define TS "\"timestamp\":\"2024-01-01T00:00:00Z\""
#define OK_FRAMES "\"frames\":[{\"function\":\"a\"}],\"stacks\":[[0]]"
    static const struct {
        const char *doc;
        tm_status code;
        const char *message, *at; /* at: where the offset points (NULL: not checked) */
    } cases[] = {
        {"[]", TM_ERR_MALFORMED, "a profile chunk is a JSON object", NULL},
        {"{\"version\":\"2\"," TS ",\"profile\":{}}", TM_ERR_UNSUPPORTED, "takes version \"1\"", "\"2\""},
        {"{\"version\":\"1\",\"profile\":{}}", TM_ERR_MALFORMED, "no \"timestamp\"", NULL},
        {"{\"version\":\"1\"," TS "}", TM_ERR_MALFORMED, "no \"profile\" object", NULL},
        {"{\"timestamp\":true,\"profile\":{}}", TM_ERR_MALFORMED, "timestamp is not an RFC 3339", "true"},
        {"{\"timestamp\":\"2023-02-29T00:00:00Z\",\"profile\":{}}", TM_ERR_MALFORMED, "timestamp is not", "\"2023"},
        {"{\"timestamp\":1e300,\"profile\":{}}", TM_ERR_MALFORMED, "timestamp 1e300 is out of range", "1e300"},
        {"{" TS ",\"timestamp\":\"2024-01-01T00:00:00Z\",\"profile\":{}}", TM_ERR_MALFORMED, "duplicate key", NULL},
        {"{" TS ",\"profile\":{\"samples\":{}}}", TM_ERR_MALFORMED, "profile.samples is not an array", "{}}}"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":true,\"thread_id\":\"1\","
         "\"stack_id\":0}]}}", TM_ERR_MALFORMED, "profile.samples[0].elapsed_since_start_ns is not a decimal", "true"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"-5\",\"thread_id\":\"1\","
         "\"stack_id\":0}]}}", TM_ERR_MALFORMED, "elapsed_since_start_ns is not a decimal", "\"-5\""},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"1.5\",\"thread_id\":\"1\","
         "\"stack_id\":0}]}}", TM_ERR_MALFORMED, "elapsed_since_start_ns is not a decimal", "\"1.5\""},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"99999999999999999999\","
         "\"thread_id\":\"1\",\"stack_id\":0}]}}", TM_ERR_MALFORMED, "is not a decimal", "\"9999"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"9223372036854775808\","
         "\"thread_id\":\"1\",\"stack_id\":0}]}}", TM_ERR_MALFORMED, "out of range", "\"9223"},
        {"{\"timestamp\":\"2262-04-11T23:47:16Z\",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":"
         "\"9000000000000000000\",\"thread_id\":\"1\",\"stack_id\":0}]}}", TM_ERR_MALFORMED, "past the year 2262",
         "{\"elapsed"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"thread_id\":\"1\",\"stack_id\":0}]}}", TM_ERR_MALFORMED,
         "profile.samples[0] has no elapsed_since_start_ns", "{\"thread_id"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"1\",\"stack_id\":0}]}}",
         TM_ERR_MALFORMED, "has no thread_id", "{\"elapsed"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"1\",\"thread_id\":[],"
         "\"stack_id\":0}]}}", TM_ERR_MALFORMED, "thread_id is not a decimal thread id", "[]"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"1\",\"thread_id\":\"1\","
         "\"stack_id\":\"0\"}]}}", TM_ERR_MALFORMED, "stack_id is not an index", "\"0\"}"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"1\",\"thread_id\":\"1\","
         "\"stack_id\":1e99}]}}", TM_ERR_MALFORMED, "stack_id is not an index", "1e99"},
        {"{" TS ",\"profile\":{" OK_FRAMES ",\"samples\":[{\"elapsed_since_start_ns\":\"1\",\"thread_id\":\"1\","
         "\"stack_id\":5}]}}", TM_ERR_MALFORMED, "stack_id 5, but there are 1 stacks", "{\"elapsed"},
        {"{" TS ",\"profile\":{\"frames\":[{\"function\":\"a\"}],\"stacks\":[[0,3]],\"samples\":[]}}", TM_ERR_MALFORMED,
         "profile.stacks[0] refers to frame 3, but there are 1 frames", "[0,3]"},
        {"{" TS ",\"profile\":{\"frames\":[],\"stacks\":[[18446744073709551615]],\"samples\":[]}}", TM_ERR_MALFORMED,
         "no such frame", "18446"},
        {"{" TS ",\"profile\":{\"frames\":[],\"stacks\":[[-1]],\"samples\":[]}}", TM_ERR_MALFORMED,
         "profile.stacks[0][] is not a frame index", "-1"},
        {"{" TS ",\"profile\":{\"frames\":[{\"function\":7}],\"stacks\":[],\"samples\":[]}}", TM_ERR_MALFORMED,
         "profile.frames[0].function is not a string", "7"},
        {"{" TS ",\"profile\":{\"frames\":[{\"name\":[]}],\"stacks\":[],\"samples\":[]}}", TM_ERR_MALFORMED,
         "profile.frames[0].function is not a string", "[]"},
        {"{" TS ",\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[],\"thread_metadata\":{\"x\":{}}}}",
         TM_ERR_MALFORMED, "thread_metadata key \"x\"", "\"x\""},
        {"{" TS ",\"profile\":{\"samples\":[", TM_ERR_TRUNCATED, "Sample v1 JSON", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *doc = cases[i].doc;
        tm_options o = {.input = TM_INPUT_SAMPLE_V1};
        tm_trace *t = NULL;
        tm_error err;
        memset(&err, 0, sizeof err);
        tm_status st = tm_trace_parse(doc, strlen(doc), &o, &t, &err);
        cr_expect_null(t);
        tm_trace_free(t);
        cr_expect_eq(st, cases[i].code, "%s: %s (%s)", doc, tm_status_str(st), err.message);
        cr_expect(strstr(err.message, cases[i].message) != NULL, "%s: message %s", doc, err.message);
        cr_expect(strncmp(err.message, "Sample v1", 9) == 0, "%s: %s", doc, err.message);
        cr_expect_leq(err.offset, strlen(doc));
        if (cases[i].at) cr_expect_eq(err.offset, offset_of(doc, cases[i].at), "%s: offset %llu", doc,
                                      (unsigned long long)err.offset);
    }
#undef TS
#undef OK_FRAMES
}

/* Every prefix and every single-byte corruption of a real output: an error
 * or a profile, never a crash, offsets inside the input. */
Test(sample_v1, prefixes_and_corruptions) {
    tb_buf tb;
    tm_trace *a = built(OFFS, N_OFFS, &tb);
    tu_membuf v1 = write_v1_ok(a, NULL);
    tm_options o = {.input = TM_INPUT_SAMPLE_V1};
    char *copy = malloc(v1.len);
    cr_assert_not_null(copy);
    for (size_t n = 1; n < v1.len; n++) {
        tm_trace *t = NULL;
        tm_error err;
        tm_status st = tm_trace_parse(v1.data, n, &o, &t, &err);
        cr_assert_neq(st, TM_OK, "prefix %zu parsed", n);
        cr_assert_leq(err.offset, n);
    }
    static const char junk[] = {'"', '}', ']', '9', '-', ',', 0, 'x'};
    for (size_t i = 0; i < v1.len; i++) {
        memcpy(copy, v1.data, v1.len);
        copy[i] = junk[i % sizeof junk];
        tm_trace *t = NULL;
        tm_error err;
        tm_status st = tm_trace_parse(copy, v1.len, &o, &t, &err);
        if (st == TM_OK) {
            tu_membuf again;
            tm_status wst = write_v1(t, NULL, &again, &err);
            cr_expect(wst == TM_OK || wst == TM_ERR_REJECTED || wst == TM_ERR_UNSUPPORTED, "%s", err.message);
            tu_membuf_free(&again);
        } else {
            cr_assert_leq(err.offset, v1.len);
        }
        tm_trace_free(t);
    }
    free(copy);
    tu_membuf_free(&v1);
    tm_trace_free(a);
    tb_free(&tb);
}

Test(sample_v1, reader_limits) {
    char *doc = v1_doc("0:1:0 1:1:0 2:1:0");
    tm_options o = {.limits = {.max_samples = 2}};
    tm_trace *t = NULL;
    tm_error err;
    cr_expect_eq(tm_trace_parse(doc, strlen(doc), &o, &t, &err), TM_ERR_LIMIT);
    cr_expect(strstr(err.message, "max_samples") != NULL, "%s", err.message);
    o.limits.max_samples = 0;
    o.limits.max_stack_depth = 1;
    cr_expect_eq(tm_trace_parse(doc, strlen(doc), &o, &t, &err), TM_ERR_LIMIT);
    cr_expect(strstr(err.message, "max_stack_depth") != NULL, "%s", err.message);
    free(doc);
}

/* ---- RFC 3339 ---- */

Test(sample_v1, rfc3339) {
    static const struct {
        int64_t ns;
        const char *text;
    } cases[] = {
        {0, "1970-01-01T00:00:00.000000000Z"},
        {1700000001000000000ll, "2023-11-14T22:13:21.000000000Z"},
        {951782400123456789ll, "2000-02-29T00:00:00.123456789Z"},
        {-1, "1969-12-31T23:59:59.999999999Z"},
        {INT64_MAX, "2262-04-11T23:47:16.854775807Z"},
        {INT64_MIN, "1677-09-21T00:12:43.145224192Z"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char buf[TM_RFC3339_MAX];
        size_t n = tm_rfc3339_format(cases[i].ns, buf);
        cr_expect(n == strlen(cases[i].text) && memcmp(buf, cases[i].text, n) == 0, "%.*s", (int)n, buf);
        int64_t back = 0;
        cr_expect(tm_rfc3339_parse((tm_bytes){(const uint8_t *)buf, n}, &back));
        cr_expect_eq(back, cases[i].ns, "%.*s", (int)n, buf);
    }
    static const struct {
        const char *text;
        int ok;
        int64_t ns;
    } parse[] = {
        {"2024-05-01T12:00:00Z", 1, 1714564800000000000ll},
        {"2024-05-01t12:00:00.5z", 1, 1714564800500000000ll},
        {"2024-05-01 14:30:00.1234567891+02:30", 1, 1714564800123456789ll},
        {"2024-05-01T12:00:00-00:01", 1, 1714564860000000000ll},
        {"2024-05-01T12:00:00", 0, 0},
        {"2024-05-01T12:00:00.Z", 0, 0},
        {"2024-13-01T12:00:00Z", 0, 0},
        {"2100-02-29T12:00:00Z", 0, 0},
        {"2024-05-01T24:00:00Z", 0, 0},
        {"2024-05-01T12:00:00Zjunk", 0, 0},
        {"2262-04-11T23:47:17Z", 0, 0},
        {"24-05-01T12:00:00Z", 0, 0},
    };
    for (size_t i = 0; i < sizeof parse / sizeof *parse; i++) {
        int64_t v = 0;
        int ok = tm_rfc3339_parse((tm_bytes){(const uint8_t *)parse[i].text, strlen(parse[i].text)}, &v);
        cr_expect_eq(ok, parse[i].ok, "%s", parse[i].text);
        if (ok) cr_expect_eq(v, parse[i].ns, "%s: %lld", parse[i].text, (long long)v);
    }
}

/* ---- sentry-python ---- */

#define PY_PROFILE TM_FIXTURES "/sentry-python/profile_v1.json"

Test(sample_v1, sentry_python_profile) {
    size_t len;
    char *buf = tu_read_file(PY_PROFILE, &len);
    cr_assert_not_null(buf);
    cr_assert_eq(tm_input_detect(buf, len), TM_INPUT_SAMPLE_V1);
    tm_trace *t = parse_ok(buf, len, NULL);
    const tm_profile *p = tm_trace_profile(t);
    json_error_t je;
    json_t *j = json_loadb(buf, len, 0, &je);
    cr_assert_not_null(j, "%s", je.text);
    json_t *samples = json_object_get(json_object_get(j, "profile"), "samples");
    cr_assert_eq(p->n_samples, json_array_size(samples));
    int64_t start;
    const char *ts = sget(j, "timestamp");
    cr_assert(tm_rfc3339_parse((tm_bytes){(const uint8_t *)ts, strlen(ts)}, &start));
    /* Each sample at timestamp + elapsed (the JSON's order is by time). */
    for (size_t i = 0; i < p->n_samples; i++) {
        int64_t want = start + strtoll(sget(json_array_get(samples, i), "elapsed_since_start_ns"), NULL, 10);
        cr_expect_eq(p->samples[i].ts, want, "sample %zu", i);
    }
    /* Leaf first: the main thread's stacks end (root) in <module>, main. */
    int64_t main_tid = strtoll(sget(json_array_get(json_object_get(j, "transactions"), 0), "active_thread_id"),
                               NULL, 10);
    size_t main_samples = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        if (p->threads[p->samples[i].thread].tid != main_tid) continue;
        const tm_prof_stack *s = &p->stacks[p->samples[i].stack];
        cr_assert_geq(s->len, 3);
        const tm_prof_frame *root = &p->frames[p->frame_ids[s->off + s->len - 1]];
        const tm_prof_frame *leaf = &p->frames[p->frame_ids[s->off]];
        cr_expect(root->function.len == 8 && memcmp(root->function.data, "<module>", 8) == 0);
        cr_expect(leaf->function.len == 3 && memcmp(leaf->function.data, "fib", 3) == 0);
        main_samples++;
    }
    cr_expect_gt(main_samples, 0);
    cr_expect_eq(p->n_threads, 3);
    /* Written as v1 and read back: the same samples. */
    tu_membuf v1 = write_v1_ok(t, NULL);
    tm_trace *b = parse_ok(v1.data, v1.len, NULL);
    const tm_profile *pb = tm_trace_profile(b);
    size_t kept = pb->n_samples;
    cr_expect_gt(kept, 0);
    cr_expect_leq(kept, p->n_samples);
    tm_trace_free(b);
    tu_membuf_free(&v1);
    json_decref(j);
    tm_trace_free(t);
    free(buf);
}

/* Frames keep their source and mapping, as Relay's profiling Frame (shared
 * by v1 and v2) has them: two frames of one function at one address that
 * differ in line (an inlined function called from two lines) stay two
 * frames, and the mapping's path (package) decides in_app again when the
 * profile is read back; a v1 -> v1 round trip gives the same bytes. */
Test(sample_v1, frames_keep_file_line_and_package) {
    const char *doc =
        "{\"version\":\"2\",\"platform\":\"native\",\"profile\":{\"samples\":["
        "{\"timestamp\":1700000000.0,\"stack_id\":0,\"thread_id\":\"1\"},"
        "{\"timestamp\":1700000000.01,\"stack_id\":1,\"thread_id\":\"1\"},"
        "{\"timestamp\":1700000000.02,\"stack_id\":0,\"thread_id\":\"1\"}],\"stacks\":[[0],[1]],\"frames\":["
        "{\"abs_path\":\"/src/a.c\",\"filename\":\"/src/a.c\",\"function\":\"inl\",\"instruction_addr\":\"0x1234\","
        "\"lineno\":7,\"package\":\"/opt/app/bin/prog\",\"platform\":\"native\"},"
        "{\"abs_path\":\"/src/a.c\",\"filename\":\"/src/a.c\",\"function\":\"inl\",\"instruction_addr\":\"0x1234\","
        "\"lineno\":9,\"package\":\"/opt/app/bin/prog\",\"platform\":\"native\"}]}}";
    tm_trace *t = parse_ok(doc, strlen(doc), NULL);
    tu_membuf v1 = write_v1_ok(t, NULL);
    json_t *j = load_json(&v1);
    json_t *frames = json_object_get(json_object_get(j, "profile"), "frames");
    cr_assert_eq(json_array_size(frames), 2, "%s", v1.data);
    for (size_t i = 0; i < 2; i++) {
        json_t *f = json_array_get(frames, i);
        cr_expect_str_eq(sget(f, "filename"), "/src/a.c", "%s", v1.data);
        cr_expect_str_eq(sget(f, "package"), "/opt/app/bin/prog", "%s", v1.data);
        cr_expect_eq(json_integer_value(json_object_get(f, "lineno")), i ? 9 : 7, "%s", v1.data);
    }
    tm_trace *b = parse_ok(v1.data, v1.len, NULL);
    tu_membuf again = write_v1_ok(b, NULL);
    cr_expect(again.len == v1.len && memcmp(again.data, v1.data, v1.len) == 0, "%s\n%s", v1.data, again.data);
    tu_membuf_free(&again);
    tm_trace_free(b);
    json_decref(j);
    tu_membuf_free(&v1);
    tm_trace_free(t);
}

/* ---- the CLI ---- */

static int run_cli(const char *args, char **out, size_t *out_len) {
    char out_path[] = "/tmp/tm_v1_out_XXXXXX";
    int fd = mkstemp(out_path);
    cr_assert(fd >= 0);
    close(fd);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", TM_CLI, args, out_path);
    int st = system(cmd);
    *out = tu_read_file(out_path, out_len);
    remove(out_path);
    cr_assert_not_null(*out);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(sample_v1, cli) {
    char v1_path[] = "/tmp/tm_v1_in_XXXXXX";
    int fd = mkstemp(v1_path);
    cr_assert(fd >= 0);
    close(fd);
    char args[1024], *out;
    size_t len;
    snprintf(args, sizeof args, "convert -f sample-v1 -o %s %s/examples/demo.pftrace", v1_path, TM_SOURCE_DIR);
    int rc = run_cli(args, &out, &len);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    static const char *const formats[] = {"pprof", "folded", "svg", "sample-v2", "sample-v1", "report"};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        snprintf(args, sizeof args, "convert -f %s %s", formats[i], v1_path);
        cr_expect_eq(run_cli(args, &out, &len), 0, "%s: %s", formats[i], out);
        cr_expect_gt(len, 0, "%s", formats[i]);
        free(out);
        snprintf(args, sizeof args, "convert --input-format sample-v1 -f %s %s", formats[i], PY_PROFILE);
        cr_expect_eq(run_cli(args, &out, &len), 0, "%s: %s", formats[i], out);
        free(out);
    }
    /* Forced as v1, a Perfetto trace is not JSON: a clear error, exit 1. */
    snprintf(args, sizeof args, "convert --input-format sample-v1 -f folded %s/examples/demo.pftrace", TM_SOURCE_DIR);
    rc = run_cli(args, &out, &len);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, "Sample v1 JSON") != NULL, "%s", out);
    free(out);
    /* Metadata: checked first, named in the error. */
    char meta_path[] = "/tmp/tm_v1_meta_XXXXXX";
    fd = mkstemp(meta_path);
    cr_assert(fd >= 0);
    static const char bad_meta[] = "{\"transaction\":{\"name\":\"\"}}";
    cr_assert_eq(write(fd, bad_meta, sizeof bad_meta - 1), (ssize_t)(sizeof bad_meta - 1));
    close(fd);
    snprintf(args, sizeof args, "convert -f sample-v1 --meta %s %s", meta_path, v1_path);
    rc = run_cli(args, &out, &len);
    cr_expect_neq(rc, 0);
    cr_expect(strstr(out, meta_path) && strstr(out, "InvalidTransactionMetadata"), "%s", out);
    free(out);
    snprintf(args, sizeof args, "convert -f folded --truncate %s", v1_path);
    cr_expect_eq(run_cli(args, &out, &len), 2, "%s", out);
    free(out);
    remove(meta_path);
    remove(v1_path);
}

/* ---- in_app ---- */

/* The in_app of each written frame, in order: 't', 'f' or '-' (none). */
static void in_app_of(const tm_trace *t, const tm_sample_v1_options *o, char *got, size_t cap) {
    tu_membuf out = write_v1_ok(t, o);
    json_t *j = load_json(&out);
    json_t *frames = json_object_get(json_object_get(j, "profile"), "frames");
    size_t n = json_array_size(frames);
    cr_assert_lt(n, cap);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(json_array_get(frames, i), "in_app");
        got[i] = !v ? '-' : json_is_true(v) ? 't' : json_is_false(v) ? 'f' : '?';
    }
    got[n] = 0;
    json_decref(j);
    tu_membuf_free(&out);
}

/* Frames say whether they are the app's as Sample v2's do: the default rule
 * (libexample.so and com.example.Foo are the app's), prefixes first. */
Test(sample_v1, in_app) {
    tb_buf tb;
    tm_trace *t = built(OFFS, N_OFFS, &tb);
    const tm_profile *p = tm_trace_profile(t);
    char want[16], got[16];
    /* frames: main, leaf (libexample.so), Foo.bar (Java), 0x300 (libexample.so) */
    cr_assert_eq(p->n_frames, 4);
    for (size_t i = 0; i < p->n_frames; i++) want[i] = 't';
    want[p->n_frames] = 0;
    in_app_of(t, NULL, got, sizeof got);
    cr_expect_str_eq(got, want, "default rule");

    const char *lib[] = {"libexample"}, *cls[] = {"com.example."};
    tm_sample_v1_options o = {.not_in_app_prefixes = lib, .n_not_in_app_prefixes = 1};
    in_app_of(t, &o, got, sizeof got);
    for (size_t i = 0; i < p->n_frames; i++) want[i] = p->frames[i].flags & TM_FRAME_JAVA ? 't' : 'f';
    cr_expect_str_eq(got, want, "native frames not in_app by their mapping");
    o = (tm_sample_v1_options){.not_in_app_prefixes = cls, .n_not_in_app_prefixes = 1};
    in_app_of(t, &o, got, sizeof got);
    for (size_t i = 0; i < p->n_frames; i++) want[i] = p->frames[i].flags & TM_FRAME_JAVA ? 'f' : 't';
    cr_expect_str_eq(got, want, "the Java class not in_app");
    o = (tm_sample_v1_options){.in_app_prefixes = cls, .n_in_app_prefixes = 1, .not_in_app_prefixes = cls,
                               .n_not_in_app_prefixes = 1};
    in_app_of(t, &o, got, sizeof got);
    for (size_t i = 0; i < p->n_frames; i++) want[i] = 't'; /* a tie is in_app */
    cr_expect_str_eq(got, want, "a tie");
    tm_error err;
    tu_membuf out;
    o = (tm_sample_v1_options){.n_in_app_prefixes = 1};
    cr_expect_eq(write_v1(t, &o, &out, &err), TM_ERR_INVALID_ARG);
    tu_membuf_free(&out);
    tm_trace_free(t);
    tb_free(&tb);
}
