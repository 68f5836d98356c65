/*
 * test_heap.c — memory profiles: heapprofd ProfilePackets read through
 * perfetto/heap.c into the profile model (tm_profile_add_heap, the value
 * views the exporters read, pprof's memory profile, the report's counters)
 * and into SQL (heap_profile_allocation, heap_profile).
 *
 * Every trace is built here with a known truth: two allocation sites, one
 * that keeps most of what it allocates and one that frees everything, over
 * dumps whose totals grow, one dump split over two `continued` packets, one
 * dump whose totals shrink (malformed), a gap in the packet index and a
 * trace that ends inside a dump.
 */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h" /* tm_mem, for the schema check's reader */
#include "perfetto/fields.h"
#include "perfetto/schema.h" /* tm_pf_check_payload and its general form */
#include "wire/pb.h" /* TM_PB_VARINT */
#include "profile/profile.h" /* tm_trace_profile: heap samples per process */
#include "trace_builder.h"
#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

enum { S_MAIN = 1, S_KEEP, S_FREE, S_LIB, CS_KEEP = 1, CS_FREE = 2, PID = 42 };

static void interned_string(tb_buf *t, uint64_t iid, const char *s) {
    tb_interned_string(t, TM_PF_PROFILE_STRINGS, iid, s, strlen(s));
}

/* The ProfilePacket's own tables: main;keep and main;free in liblib.so. */
static void tables(tb_buf *t) {
    interned_string(t, S_MAIN, "main");
    interned_string(t, S_KEEP, "keep");
    interned_string(t, S_FREE, "free_all");
    interned_string(t, S_LIB, "liblib.so");
    size_t m = tb_open(t, TM_PF_PROFILE_MAPPINGS);
    tb_uint(t, TM_PF_INTERNED_IID, 1);
    tb_uint(t, TM_PF_MAPPING_START, 0x1000);
    tb_uint(t, TM_PF_MAPPING_END, 0x9000);
    tb_uint(t, TM_PF_MAPPING_PATH_STRING_IDS, S_LIB);
    tb_close(t, m);
    const uint64_t fn[3] = {S_MAIN, S_KEEP, S_FREE};
    for (uint64_t i = 0; i < 3; i++) {
        size_t f = tb_open(t, TM_PF_PROFILE_FRAMES);
        tb_uint(t, TM_PF_INTERNED_IID, i + 1);
        tb_uint(t, TM_PF_FRAME_FUNCTION_NAME_ID, fn[i]);
        tb_uint(t, TM_PF_FRAME_MAPPING_ID, 1);
        tb_uint(t, TM_PF_FRAME_REL_PC, 0x100 * (i + 1));
        tb_close(t, f);
    }
    const uint64_t keep[2] = {1, 2}, freeing[2] = {1, 3}; /* root first */
    size_t c = tb_open(t, TM_PF_PROFILE_CALLSTACKS);
    tb_uint(t, TM_PF_INTERNED_IID, CS_KEEP);
    tb_repeated(t, TM_PF_CALLSTACK_FRAME_IDS, keep, 2);
    tb_close(t, c);
    c = tb_open(t, TM_PF_PROFILE_CALLSTACKS);
    tb_uint(t, TM_PF_INTERNED_IID, CS_FREE);
    tb_repeated(t, TM_PF_CALLSTACK_FRAME_IDS, freeing, 2);
    tb_close(t, c);
}

/* A ProfilePacket holding one dump of PID at MONOTONIC_COARSE ts. */
static void profile_packet(tb_buf *t, uint64_t index, int continued, int with_tables, uint64_t ts,
                           const tb_heap_sample *s, size_t n) {
    size_t pkt = tb_packet_open(t, 7, ts, index == 0 ? TB_SEQ_CLEARED : 0);
    size_t pp = tb_open(t, TM_PF_PACKET_PROFILE_PACKET);
    if (with_tables) tables(t);
    tb_heap_dump(t, PID, ts, "libc.malloc", 4096, s, n);
    if (continued) tb_uint(t, TM_PF_PROFILE_CONTINUED, 1);
    tb_uint(t, TM_PF_PROFILE_INDEX, index);
    tb_close(t, pp);
    tb_close(t, pkt);
}

/* The truth: keep allocated 9000 bytes (9 objects) and freed 1000 (1);
 * free_all allocated 3000 (3) and freed it all. The third dump shrinks
 * keep's totals (malformed: dropped) and comes after a gap in the index. */
static tb_buf heap_trace(int cut_inside_last_dump) {
    tb_buf t = {0};
    tb_heap_clocks(&t, 1);
    const tb_heap_sample d1[2] = {{CS_KEEP, 6000, 0, 6, 0}, {CS_FREE, 3000, 3000, 3, 3}};
    profile_packet(&t, 0, 0, 1, 10, d1, 2);
    const tb_heap_sample d2a[1] = {{CS_KEEP, 9000, 1000, 9, 1}}, d2b[1] = {{CS_FREE, 3000, 3000, 3, 3}};
    profile_packet(&t, 1, 1, 1, 20, d2a, 1); /* one dump over two packets */
    profile_packet(&t, 2, 0, 0, 20, d2b, 1);
    const tb_heap_sample d3[1] = {{CS_KEEP, 5000, 1000, 5, 1}};
    profile_packet(&t, 4, cut_inside_last_dump, 1, 30, d3, 1);
    return t;
}

static tm_trace *parse(const tb_buf *b) {
    tm_trace *t = NULL;
    tm_error err = {0};
    cr_assert_eq(tm_trace_parse(b->data, b->len, NULL, &t, &err), TM_OK, "%s at %llu", err.message,
                 (unsigned long long)err.offset);
    return t;
}

static char *folded(const tm_trace *t, tm_value v, tm_status *st) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_folded_options o = {.value = v};
    tm_error err = {0};
    *st = tm_write_folded(t, &o, &sink, &err);
    tu_membuf_write(&m, "", 1);
    return (char *)m.data;
}

Test(heap, values_sum_the_changes_of_every_dump) {
    tb_buf b = heap_trace(0);
    tm_trace *t = parse(&b);
    const struct {
        tm_value v;
        const char *want;
    } cases[] = {
        {TM_VALUE_ALLOC_SPACE, "main;free_all 3000\nmain;keep 9000\n"},
        {TM_VALUE_ALLOC_OBJECTS, "main;free_all 3\nmain;keep 9\n"},
        {TM_VALUE_INUSE_SPACE, "main;keep 8000\n"},
        {TM_VALUE_INUSE_OBJECTS, "main;keep 8\n"},
        {TM_VALUE_DEFAULT, "main;keep 8000\n"}, /* no CPU samples: inuse_space */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tm_status st;
        char *out = folded(t, cases[i].v, &st);
        cr_expect_eq(st, TM_OK, "%s", tm_value_name(cases[i].v));
        cr_expect_str_eq(out, cases[i].want, "%s", tm_value_name(cases[i].v));
        free(out);
    }
    const tm_trace_stats *s = tm_trace_get_stats(t);
    cr_expect_eq(s->heap_profile_packets, 4);
    cr_expect_eq(s->heap_dumps, 3, "the continued packets repeat one dump");
    cr_expect_eq(s->heap_malformed, 1, "keep's totals shrank in the third dump");
    cr_expect_eq(s->heap_missing_packets, 1, "index 3 is missing");
    cr_expect_eq(s->heap_unfinished_dumps, 0);
    cr_expect_eq(s->heap_alloc_bytes, 12000);
    cr_expect_eq(s->heap_inuse_bytes, 8000);
    tm_trace_free(t);
    tb_free(&b);
}

Test(heap, a_trace_cut_inside_a_dump_drops_that_dump_and_says_so) {
    tb_buf b = heap_trace(1);
    tm_trace *t = parse(&b);
    const tm_trace_stats *s = tm_trace_get_stats(t);
    cr_expect_eq(s->heap_unfinished_dumps, 1);
    cr_expect_eq(s->heap_malformed, 0, "the shrinking dump never ended, so it was never committed");
    tm_status st;
    char *out = folded(t, TM_VALUE_INUSE_SPACE, &st);
    cr_expect_str_eq(out, "main;keep 8000\n");
    free(out);
    tm_trace_free(t);
    tb_free(&b);
}

/* More processes than the profile model indexes by stack directly (it
 * falls back to one map past 16): every process keeps its own values, over
 * two dumps each. */
Test(heap, many_processes_keep_their_own_values) {
    enum { N = 24 };
    tb_buf t = {0};
    tb_heap_clocks(&t, 1);
    for (uint64_t dump = 0; dump < 2; dump++) {
        size_t pkt = tb_packet_open(&t, 7, 10 + dump, dump == 0 ? TB_SEQ_CLEARED : 0);
        size_t pp = tb_open(&t, TM_PF_PACKET_PROFILE_PACKET);
        tables(&t);
        for (uint32_t k = 0; k < N; k++) {
            uint64_t bytes = 1000 * (k + 1) * (dump + 1); /* cumulative: doubles at the second dump */
            const tb_heap_sample rows[2] = {{CS_KEEP, bytes, 0, k + 1, 0}, {CS_FREE, 64, 64, 1, 1}};
            tb_heap_dump(&t, 100 + k, 10 + dump, "libc.malloc", 4096, rows, 2);
        }
        tb_uint(&t, TM_PF_PROFILE_INDEX, dump);
        tb_close(&t, pp);
        tb_close(&t, pkt);
    }
    tm_trace *tr = parse(&t);
    const tm_profile *p = tm_trace_profile(tr);
    cr_assert_eq(p->n_heap_samples, 2 * N);
    size_t keeps = 0;
    for (size_t i = 0; i < p->n_heap_samples; i++) {
        const tm_prof_heap_sample *h = &p->heap_samples[i];
        int64_t pid = p->threads[h->thread].pid;
        cr_assert(pid >= 100 && pid < 100 + N, "pid %lld", (long long)pid);
        if (h->inuse_space == 64 || h->inuse_space == 0) continue; /* the freeing callsite */
        keeps++;
        cr_assert_eq(h->inuse_space, 2000 * (pid - 99), "pid %lld: %lld", (long long)pid, (long long)h->inuse_space);
    }
    cr_assert_eq(keeps, N);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(heap, a_value_the_trace_lacks_is_an_error) {
    tb_buf b = heap_trace(0);
    tm_trace *t = parse(&b);
    tm_status st;
    char *out = folded(t, TM_VALUE_SAMPLES, &st);
    cr_expect_eq(st, TM_ERR_INVALID_ARG, "a memory profile has no CPU samples");
    free(out);
    tm_trace_free(t);
    tb_free(&b);

    tb_buf cpu = {0}; /* a CPU trace without heap dumps */
    tb_standard_clocks(&cpu, 1);
    t = parse(&cpu);
    out = folded(t, TM_VALUE_ALLOC_SPACE, &st);
    cr_expect_eq(st, TM_ERR_INVALID_ARG);
    free(out);
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_pprof_options po = {.uncompressed = 1, .value = TM_VALUE_INUSE_SPACE};
    tm_error err = {0};
    cr_expect_eq(tm_write_pprof(t, &po, &sink, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "no memory profile"), "%s", err.message);
    tu_membuf_free(&m);
    tm_trace_free(t);
    tb_free(&cpu);

    tm_value v;
    cr_expect_eq(tm_value_parse("inuse_space", &v, NULL), TM_OK);
    cr_expect_eq(v, TM_VALUE_INUSE_SPACE);
    cr_expect_eq(tm_value_parse("bytes", &v, &err), TM_ERR_INVALID_ARG);
    cr_expect_str_eq(tm_value_name(TM_VALUE_ALLOC_OBJECTS), "alloc_objects");
}

/* A NULL out is the caller's mistake, reported like every other call's. */
Test(heap, value_parse_null_out_is_invalid_arg) {
    tm_error err = {0};
    cr_expect_eq(tm_value_parse("samples", NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "NULL"), "%s", err.message);
}

/* The uncompressed pprof holds the four memory sample types, the default
 * one asked for, the heap label and the sampling interval as its period. */
Test(heap, pprof_writes_the_memory_profile) {
    tb_buf b = heap_trace(0);
    tm_trace *t = parse(&b);
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_pprof_options o = {.uncompressed = 1, .value = TM_VALUE_ALLOC_SPACE};
    tm_error err = {0};
    cr_assert_eq(tm_write_pprof(t, &o, &sink, &err), TM_OK, "%s", err.message);
    const char *want[] = {"alloc_objects", "alloc_space", "inuse_objects", "inuse_space", "bytes", "space",
                          "libc.malloc", "heap", "keep", "free_all"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        cr_expect(memmem(m.data, m.len, want[i], strlen(want[i])), "no string %s", want[i]);
    /* period (field 12) = 4096: varint 0x80 0x20 after tag 0x60 */
    const uint8_t period[3] = {12 << 3, 0x80, 0x20};
    cr_expect(memmem(m.data, m.len, period, 3), "no period 4096");
    tu_membuf_free(&m);
    tm_trace_free(t);
    tb_free(&b);
}

static int64_t sql_int(sqlite3 *db, const char *sql) {
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "%s", sql);
    int64_t v = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return v;
}

Test(heap, sql_rows_agree_with_the_profile_model) {
    tb_buf b = heap_trace(0);
    tm_db *db = NULL;
    tm_error err = {0};
    cr_assert_eq(tm_db_new(b.data, b.len, NULL, &db, &err), TM_OK, "%s", err.message);
    sqlite3 *s = tm_db_sqlite(db);
    cr_expect_eq(sql_int(s, "select sum(size) from heap_profile_allocation where size > 0"), 12000);
    cr_expect_eq(sql_int(s, "select sum(size) from heap_profile_allocation"), 8000);
    cr_expect_eq(sql_int(s, "select count(*) from heap_profile"), 3);
    cr_expect_eq(sql_int(s, "select value from stats where name = 'heapprofd_malformed_packet'"), 1);
    cr_expect_eq(sql_int(s, "select value from stats where name = 'heapprofd_missing_packet'"), 1);
    cr_expect_eq(sql_int(s, "select count(distinct callsite_id) from heap_profile_allocation"), 2);
    /* the module view exists only once included */
    const char *tail = NULL;
    cr_expect_eq(tm_db_include(s, "select 1", &tail, &err), 0);
    cr_expect_eq(tm_db_include(s, " include perfetto module android.memory.heap_profile.intervals; select 1", &tail,
                               &err), 1);
    cr_expect_str_eq(tail, " select 1");
    cr_expect_eq(sql_int(s, "select sum(allocated) from _android_heap_profile_intervals"), 12000);
    cr_expect_eq(tm_db_include(s, "INCLUDE PERFETTO MODULE android.nothing;", &tail, &err), -1);
    cr_expect(strstr(err.message, "android.nothing"), "%s", err.message);
    cr_expect_eq(err.offset, strlen("INCLUDE PERFETTO MODULE "), "offset %llu", (unsigned long long)err.offset);
    /* tail is optional, as sqlite3_prepare_v2's pzTail (it was written through NULL) */
    cr_expect_eq(tm_db_include(s, "include perfetto module android.memory.heap_profile.intervals;", NULL, &err), 1);
    cr_expect_eq(tm_db_include(s, "include perfetto module android.nothing;", NULL, &err), -1);
    cr_expect_eq(tm_db_include(s, "select 1", NULL, NULL), 0);
    tm_db_free(db);
    tb_free(&b);
}

/* A process dumps two heaps at one time, as heapprofd does: each heap's
 * interval counts its own allocations once. The view joined a dump window
 * by process and time only, so every heap counted twice. */
Test(heap, intervals_of_two_heaps_dumped_at_once) {
    tb_buf t = {0};
    tb_heap_clocks(&t, 1);
    const tb_heap_sample malloc_heap[1] = {{CS_KEEP, 6000, 0, 6, 0}}, custom_heap[1] = {{CS_FREE, 3000, 1000, 3, 1}};
    size_t pkt = tb_packet_open(&t, 7, 10, TB_SEQ_CLEARED);
    size_t pp = tb_open(&t, TM_PF_PACKET_PROFILE_PACKET);
    tables(&t);
    tb_heap_dump(&t, PID, 10, "libc.malloc", 4096, malloc_heap, 1);
    tb_heap_dump(&t, PID, 10, "custom", 4096, custom_heap, 1);
    tb_uint(&t, TM_PF_PROFILE_INDEX, 0);
    tb_close(&t, pp);
    tb_close(&t, pkt);
    tm_db *db = NULL;
    tm_error err = {0};
    cr_assert_eq(tm_db_new(t.data, t.len, NULL, &db, &err), TM_OK, "%s", err.message);
    sqlite3 *s = tm_db_sqlite(db);
    const char *tail = NULL;
    cr_assert_eq(tm_db_include(s, "include perfetto module android.memory.heap_profile.intervals;", &tail, &err), 1);
    cr_expect_eq(sql_int(s, "select count(*) from _android_heap_profile_intervals"), 2);
    cr_expect_eq(sql_int(s, "select allocated from _android_heap_profile_intervals where heap_name = 'libc.malloc'"),
                 6000);
    cr_expect_eq(sql_int(s, "select retained from _android_heap_profile_intervals where heap_name = 'libc.malloc'"),
                 6000);
    cr_expect_eq(sql_int(s, "select allocated from _android_heap_profile_intervals where heap_name = 'custom'"), 3000);
    cr_expect_eq(sql_int(s, "select delta from _android_heap_profile_intervals where heap_name = 'custom'"), 2000);
    tm_db_free(db);
    tb_free(&t);
}

/* ---- memory telemetry: ProcessStats ---- */

#define DEMO_PID 4200 /* bench/gen_trace.c's process */

/* examples/demo.pftrace (CPU samples of pid 4200 from trace time 1.0 s,
 * realtime known) with two ProcessStats packets appended: a trace may be
 * concatenated packet by packet. RSS 1000 then 2000 KiB, high-water mark
 * 3000 KiB. */
static tb_buf demo_with_process_stats(void) {
    size_t len;
    char *demo = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert(demo);
    tb_buf t = {0};
    tb_raw(&t, demo, len);
    free(demo);
    const uint64_t rss_kb[2] = {1000, 2000}, at[2] = {1100000000ull, 1500000000ull};
    for (int i = 0; i < 2; i++) {
        size_t pkt = tb_packet_open(&t, 99, at[i], 0);
        size_t ps = tb_open(&t, TM_PF_PACKET_PROCESS_STATS);
        size_t pr = tb_open(&t, TM_PF_PROCESS_STATS_PROCESSES);
        tb_uint(&t, TM_PF_PROC_STATS_PID, DEMO_PID);
        tb_uint(&t, TM_PF_PROC_STATS_VM_RSS_KB, rss_kb[i]);
        tb_uint(&t, TM_PF_PROC_STATS_RSS_ANON_KB, rss_kb[i] / 2);
        tb_uint(&t, TM_PF_PROC_STATS_VM_HWM_KB, 3000);
        tb_close(&t, pr);
        tb_close(&t, ps);
        tb_close(&t, pkt);
    }
    return t;
}

static char *export(const tm_trace *t, int svg) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err = {0};
    tm_sample_v2_options v2 = {0};
    tm_flamegraph_options fo = {0};
    tm_status st = svg ? tm_write_flamegraph(t, &fo, &sink, &err) : tm_write_sample_v2(t, &v2, &sink, &err);
    cr_assert_eq(st, TM_OK, "%s", err.message);
    tu_membuf_write(&m, "", 1);
    return (char *)m.data;
}

Test(memory_telemetry, process_stats_give_the_footprint_counters_and_peak) {
    tb_buf b = demo_with_process_stats();
    tm_trace *t = parse(&b);
    char *v2 = export(t, 0);
    const char *fp = strstr(v2, "\"measurements\":{\"memory_footprint\":{\"unit\":\"byte\",\"values\":[");
    cr_assert(fp, "no memory_footprint: %.300s", v2);
    cr_expect(strstr(fp, "\"value\":1024000}") && strstr(fp, "\"value\":2048000}]"), "%.300s", fp);
    free(v2);
    char *svg = export(t, 1);
    cr_expect(strstr(svg, "peak RSS 2.9 MB"), "the subtitle names no peak RSS");
    free(svg);
    tm_trace_free(t);

    tm_options relay = {0};
    relay.mode = TM_MODE_RELAY;
    tm_error err = {0};
    cr_assert_eq(tm_trace_parse(b.data, b.len, &relay, &t, &err), TM_OK, "%s", err.message);
    v2 = export(t, 0);
    cr_expect(!strstr(v2, "memory_footprint"), "Relay's converter writes no measurements of its own");
    free(v2);
    tm_trace_free(t);

    tm_db *db = NULL;
    cr_assert_eq(tm_db_new(b.data, b.len, NULL, &db, &err), TM_OK, "%s", err.message);
    sqlite3 *s = tm_db_sqlite(db);
    cr_expect_eq(sql_int(s, "select count(*) from process_counter_track t join process p using (upid) "
                            "where p.pid = 4200 and t.name in ('mem.rss', 'mem.rss.anon', 'mem.rss.watermark')"),
                 3);
    cr_expect_eq(sql_int(s, "select max(value) from counter c join process_counter_track t on c.track_id = t.id "
                            "where t.name = 'mem.rss'"),
                 2048000);
    cr_expect_eq(sql_int(s, "select count(*) from counter c join process_counter_track t on c.track_id = t.id"), 6);
    /* counter_track, their parent table, lists them too */
    cr_expect_eq(sql_int(s, "select count(*) from counter_track ct join process_counter_track t using (id, name, type)"),
                 sql_int(s, "select count(*) from process_counter_track"));
    cr_expect_eq(sql_int(s, "select count(*) from counter_track"), sql_int(s, "select count(*) from track"));
    tm_db_free(db);
    tb_free(&b);
}

/* A dump over two continued packets, both flagged disconnected and
 * overran: one lossy dump in the profile's count, each flag per packet in
 * Trace Processor's stats. */
Test(heap, a_lossy_dump_counts_once) {
    tb_buf t = {0};
    tb_heap_clocks(&t, 1);
    for (uint64_t index = 0; index < 2; index++) {
        size_t pkt = tb_packet_open(&t, 7, 10, index == 0 ? TB_SEQ_CLEARED : 0);
        size_t pp = tb_open(&t, TM_PF_PACKET_PROFILE_PACKET);
        if (index == 0) tables(&t);
        size_t d = tb_open(&t, TM_PF_PROFILE_PROCESS_DUMPS);
        tb_uint(&t, TM_PF_HEAP_DUMP_PID, PID);
        tb_uint(&t, TM_PF_HEAP_DUMP_TIMESTAMP, 10);
        tb_uint(&t, TM_PF_HEAP_DUMP_DISCONNECTED, 1);
        tb_uint(&t, TM_PF_HEAP_DUMP_BUFFER_OVERRAN, 1);
        const tb_heap_sample s = {CS_KEEP, 100, 0, 1, 0};
        tb_heap_sample_msg(&t, &s, 0);
        tb_close(&t, d);
        if (index == 0) tb_uint(&t, TM_PF_PROFILE_CONTINUED, 1);
        tb_uint(&t, TM_PF_PROFILE_INDEX, index);
        tb_close(&t, pp);
        tb_close(&t, pkt);
    }
    tm_trace *tr = parse(&t);
    cr_expect_eq(tm_trace_get_stats(tr)->heap_dumps, 1);
    cr_expect_eq(tm_trace_get_stats(tr)->heap_dumps_with_loss, 1);
    tm_trace_free(tr);
    tm_db *db = NULL;
    tm_error err = {0};
    cr_assert_eq(tm_db_new(t.data, t.len, NULL, &db, &err), TM_OK, "%s", err.message);
    cr_expect_eq(sql_int(tm_db_sqlite(db), "select value from stats where name = 'heapprofd_client_disconnected'"), 2);
    cr_expect_eq(sql_int(tm_db_sqlite(db), "select value from stats where name = 'heapprofd_buffer_overran'"), 2);
    tm_db_free(db);
    tb_free(&t);
}

/* ---- heapprofd's streaming mode: StreamingAllocation and StreamingFree ---- */

/* One StreamingAllocation packet of n entries at addresses 0x1000, 0x2000,
 * ..., each of `size` bytes standing for `sample_size`; heapprofd writes one
 * entry per packet, a packet of several is as valid. */
static void streaming_allocation(tb_buf *t, size_t n, uint64_t size, uint64_t sample_size) {
    size_t pkt = tb_packet_open(t, 8, 25, 0);
    size_t sa = tb_open(t, TM_PF_PACKET_STREAMING_ALLOCATION);
    for (size_t i = 0; i < n; i++) {
        tb_uint(t, TM_PF_STREAMING_ALLOC_ADDRESS, 0x1000 * (i + 1));
        tb_uint(t, TM_PF_STREAMING_ALLOC_SIZE, size);
        tb_uint(t, TM_PF_STREAMING_ALLOC_SAMPLE_SIZE, sample_size);
        tb_uint(t, TM_PF_STREAMING_ALLOC_TIMESTAMP, 25);
        tb_uint(t, TM_PF_STREAMING_ALLOC_HEAP_ID, 0);
        tb_uint(t, TM_PF_STREAMING_ALLOC_SEQUENCE_NUMBER, i + 1);
    }
    tb_close(t, sa);
    tb_close(t, pkt);
}

static void streaming_free(tb_buf *t, uint64_t address) {
    size_t pkt = tb_packet_open(t, 8, 26, 0);
    size_t sf = tb_open(t, TM_PF_PACKET_STREAMING_FREE);
    tb_uint(t, TM_PF_STREAMING_FREE_ADDRESS, address);
    tb_uint(t, TM_PF_STREAMING_FREE_HEAP_ID, 0);
    tb_uint(t, TM_PF_STREAMING_FREE_SEQUENCE_NUMBER, 9);
    tb_close(t, sf);
    tb_close(t, pkt);
}

Test(heap, streaming_entries_are_counted_beside_the_dumps_and_make_no_rows) {
    tb_buf b = heap_trace(0);
    streaming_allocation(&b, 3, 100, 4096);
    streaming_allocation(&b, 1, 50, 4096);
    streaming_free(&b, 0x1000);
    streaming_free(&b, 0x2000);
    tm_trace *t = parse(&b);
    const tm_trace_stats *s = tm_trace_get_stats(t);
    cr_expect_eq(s->heap_streaming_allocations, 4);
    cr_expect_eq(s->heap_streaming_alloc_bytes, 4 * 4096);
    cr_expect_eq(s->heap_streaming_frees, 2);
    cr_expect_eq(s->heap_streaming_malformed, 0);
    /* no callstack: the profile is the dumps' alone */
    cr_expect_eq(s->heap_inuse_bytes, 8000);
    cr_expect_eq(s->heap_alloc_bytes, 12000);
    tm_status st;
    char *out = folded(t, TM_VALUE_ALLOC_SPACE, &st);
    cr_expect_str_eq(out, "main;free_all 3000\nmain;keep 9000\n");
    free(out);
    /* the report says what was seen and not used */
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err = {0};
    cr_assert_eq(tm_write_report(t, &sink, &err), TM_OK, "%s", err.message);
    tu_membuf_write(&m, "", 1);
    cr_expect(strstr((char *)m.data, "\"streaming_allocations\":4"), "%s", (char *)m.data);
    cr_expect(strstr((char *)m.data, "\"streaming_frees\":2"), "%s", (char *)m.data);
    free(m.data);
    tm_trace_free(t);
    /* SQL as Trace Processor: streaming packets import nothing */
    tb_buf dumps_only = heap_trace(0);
    tm_db *db = NULL, *db_dumps = NULL;
    cr_assert_eq(tm_db_new(b.data, b.len, NULL, &db, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_db_new(dumps_only.data, dumps_only.len, NULL, &db_dumps, &err), TM_OK, "%s", err.message);
    sqlite3 *q = tm_db_sqlite(db), *q_dumps = tm_db_sqlite(db_dumps);
    cr_expect_eq(sql_int(q, "select count(*) from heap_profile_allocation"),
                 sql_int(q_dumps, "select count(*) from heap_profile_allocation"));
    cr_expect_eq(sql_int(q, "select sum(size) from heap_profile_allocation"), 8000);
    cr_expect_eq(sql_int(q, "select count(*) from stats where name like 'heapprofd%' and value > 0"),
                 sql_int(q_dumps, "select count(*) from stats where name like 'heapprofd%' and value > 0"));
    tm_db_free(db_dumps);
    tb_free(&dumps_only);
    tm_db_free(db);
    tb_free(&b);
}

Test(heap, streaming_packets_whose_fields_disagree_are_counted_malformed) {
    tb_buf b = heap_trace(0);
    streaming_allocation(&b, 2, 100, 4096);
    size_t pkt = tb_packet_open(&b, 8, 27, 0);
    size_t sa = tb_open(&b, TM_PF_PACKET_STREAMING_ALLOCATION);
    const uint64_t addresses[2] = {0x5000, 0x6000};
    tb_packed(&b, TM_PF_STREAMING_ALLOC_ADDRESS, addresses, 2); /* packed: read as well */
    tb_uint(&b, TM_PF_STREAMING_ALLOC_SAMPLE_SIZE, 4096);    /* one size for two addresses */
    tb_close(&b, sa);
    tb_close(&b, pkt);
    tm_trace *t = parse(&b);
    const tm_trace_stats *s = tm_trace_get_stats(t);
    cr_expect_eq(s->heap_streaming_allocations, 2);
    cr_expect_eq(s->heap_streaming_alloc_bytes, 2 * 4096);
    cr_expect_eq(s->heap_streaming_malformed, 1);
    tm_trace_free(t);
    tb_free(&b);
}

/* Parses b with the profile model and with SQL: both fail with code at
 * byte `at` with a message naming `what`. */
static void expect_error_at(const tb_buf *b, tm_status code, uint64_t at, const char *what) {
    tm_trace *t = NULL;
    tm_error err = {0};
    cr_expect_eq(tm_trace_parse(b->data, b->len, NULL, &t, &err), code, "%s", err.message);
    cr_expect_eq(err.offset, at, "offset %llu, want %llu: %s", (unsigned long long)err.offset,
                 (unsigned long long)at, err.message);
    cr_expect(strstr(err.message, what), "%s", err.message);
    tm_trace_free(t);
    tm_db *db = NULL;
    tm_error sql_err = {0};
    cr_expect_eq(tm_db_new(b->data, b->len, NULL, &db, &sql_err), code, "%s", sql_err.message);
    cr_expect_eq(sql_err.offset, at, "SQL: offset %llu: %s", (unsigned long long)sql_err.offset, sql_err.message);
    tm_db_free(db);
}

Test(heap, a_streaming_field_of_the_wrong_wire_type_is_an_error_at_its_byte) {
    tb_buf b = heap_trace(0);
    size_t pkt = tb_packet_open(&b, 8, 25, 0);
    size_t sf = tb_open(&b, TM_PF_PACKET_STREAMING_FREE);
    tb_uint(&b, TM_PF_STREAMING_FREE_ADDRESS, 0x1000);
    size_t at = b.len;
    tb_fixed64(&b, TM_PF_STREAMING_FREE_HEAP_ID, 1); /* declared uint32 */
    size_t from_end = b.len - at; /* closing inserts lengths before it */
    tb_close(&b, sf);
    tb_close(&b, pkt);
    expect_error_at(&b, TM_ERR_MALFORMED, b.len - from_end, "StreamingFree.heap_id field 2 has wire type 1");
    tb_free(&b);
}

Test(heap, a_streaming_value_cut_off_is_an_error_at_its_byte) {
    tb_buf b = heap_trace(0);
    size_t pkt = tb_packet_open(&b, 8, 25, 0);
    size_t sa = tb_open(&b, TM_PF_PACKET_STREAMING_ALLOCATION);
    tb_uint(&b, TM_PF_STREAMING_ALLOC_ADDRESS, 0x1000);
    tb_tag(&b, TM_PF_STREAMING_ALLOC_SIZE, TM_PB_VARINT);
    const uint8_t unfinished = 0x80; /* a varint that goes on past the message's end */
    tb_raw(&b, &unfinished, 1);
    tb_close(&b, sa);
    tb_close(&b, pkt);
    expect_error_at(&b, TM_ERR_TRUNCATED, b.len - 1, "StreamingAllocation: truncated varint");
    tb_free(&b);
}

/* ---- the fast paths: heapprofd's plain HeapSamples, read and checked in
 * one pass, against the general decoder and the general schema check ---- */

/* Two dumps of keep and free_all whose values take varints of 1 to 9 bytes,
 * every sample plain (pad 0) or padded. */
static tb_buf varied_heap_trace(size_t pad) {
    static const tb_heap_sample dumps[2][2] = {
        {{CS_KEEP, 300, 1, 1, 0}, {CS_FREE, 1ull << 20, 1ull << 14, 1ull << 7, 1ull << 6}},
        {{CS_KEEP, 1ull << 62, 1ull << 49, 1ull << 35, 1ull << 28},
         {CS_FREE, 1ull << 21, 1ull << 21, 1ull << 42, 1ull << 42}},
    };
    tb_buf t = {0};
    tb_heap_clocks(&t, 1);
    for (uint64_t d = 0; d < 2; d++) {
        size_t pkt = tb_packet_open(&t, 7, 10 * (d + 1), d == 0 ? TB_SEQ_CLEARED : 0);
        size_t pp = tb_open(&t, TM_PF_PACKET_PROFILE_PACKET);
        tables(&t);
        size_t dump = tb_open(&t, TM_PF_PROFILE_PROCESS_DUMPS);
        tb_uint(&t, TM_PF_HEAP_DUMP_PID, PID);
        tb_uint(&t, TM_PF_HEAP_DUMP_TIMESTAMP, 10 * (d + 1));
        for (size_t i = 0; i < 2; i++) tb_heap_sample_msg(&t, &dumps[d][i], i ? pad : pad / 2);
        tb_str(&t, TM_PF_HEAP_DUMP_HEAP_NAME, "libc.malloc");
        tb_close(&t, dump);
        tb_uint(&t, TM_PF_PROFILE_INDEX, d);
        tb_close(&t, pp);
        tb_close(&t, pkt);
    }
    return t;
}

static void pprof_of(const tb_buf *b, tu_membuf *m) {
    tm_trace *t = parse(b);
    tm_sink sink = {.write = tu_membuf_write, .ctx = m};
    tm_pprof_options o = {.uncompressed = 1, .value = TM_VALUE_ALLOC_SPACE};
    tm_error err = {0};
    cr_assert_eq(tm_write_pprof(t, &o, &sink, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_trace_get_stats(t)->heap_malformed, 0);
    tm_trace_free(t);
}

Test(heap, plain_samples_read_as_the_general_decoder_reads_them) {
    tb_buf plain = varied_heap_trace(0);
    tu_membuf want = {0};
    pprof_of(&plain, &want);
    for (size_t pad = 1; pad <= 260; pad += 129) { /* lengths of one byte and of two */
        tb_buf padded = varied_heap_trace(pad);
        tu_membuf got = {0};
        pprof_of(&padded, &got);
        cr_expect(got.len == want.len && !memcmp(got.data, want.data, want.len), "pad %zu: another profile", pad);
        tu_membuf_free(&got);
        tb_free(&padded);
    }
    tm_status st;
    tm_trace *t = parse(&plain);
    char *out = folded(t, TM_VALUE_ALLOC_SPACE, &st);
    cr_expect_str_eq(out, "main;free_all 2097152\nmain;keep 4611686018427387904\n");
    free(out);
    tm_trace_free(t);
    tu_membuf_free(&want);
    tb_free(&plain);
}

/* The schema check's verdict on a ProfilePacket payload, through its one-pass
 * check of plain messages or without it (tm_pf_check_payload_general). */
static tm_error check_profile_packet(const uint8_t *data, size_t len, bool general) {
    tm_mem mem;
    tm_mem_init(&mem, NULL);
    tm_error err = {0};
    tm_pf_reader r;
    tm_pf_reader_init(&r, data, len, &mem, NULL, NULL, 0, &err);
    tm_pf_packet pk = {.data_field = TM_PF_PACKET_PROFILE_PACKET, .data = {data, len}};
    tm_status st = general ? tm_pf_check_payload_general(&r, &pk) : tm_pf_check_payload(&r, &pk);
    cr_assert_eq(st, err.code);
    tm_pf_reader_release(&r);
    return err;
}

/* A ProfilePacket payload: its tables, a packed callstack, a dump of plain
 * HeapSamples (varints of up to 9 bytes) and its stats; with_long, a
 * second dump whose sample has a varint of 10 bytes (not plain: checked
 * by the general check, the first dump still by the one-pass check). */
static tb_buf checked_profile_packet(bool with_long) {
    tb_buf t = {0};
    tables(&t);
    const uint64_t frames[3] = {1, 2, 300};
    size_t c = tb_open(&t, TM_PF_PROFILE_CALLSTACKS);
    tb_uint(&t, TM_PF_INTERNED_IID, 3);
    tb_packed(&t, TM_PF_CALLSTACK_FRAME_IDS, frames, 3);
    tb_close(&t, c);
    size_t dump = tb_open(&t, TM_PF_PROFILE_PROCESS_DUMPS);
    tb_uint(&t, TM_PF_HEAP_DUMP_PID, PID);
    for (uint64_t i = 0; i < 3; i++) {
        const tb_heap_sample s = {CS_KEEP, 1ull << (30 * i + 2), 1ull << (9 * i), i, 200 * i};
        tb_heap_sample_msg(&t, &s, 0);
    }
    size_t stats = tb_open(&t, TM_PF_HEAP_DUMP_STATS);
    tb_uint(&t, TM_PF_HEAP_STATS_HEAP_SAMPLES, 3);
    tb_close(&t, stats);
    tb_close(&t, dump);
    if (with_long) {
        const tb_heap_sample s = {CS_FREE, 1ull << 63, 0, 1, 0};
        tb_heap_dump(&t, PID, 10, NULL, 0, &s, 1);
    }
    tb_uint(&t, TM_PF_PROFILE_INDEX, 0);
    return t;
}

/* Every byte of a ProfilePacket set to values that break or change its
 * framing, and every cut of it: the one-pass check accepts exactly what
 * the general check accepts and fails at the same byte with the same
 * message. */
Test(heap, the_schema_checks_plain_messages_as_the_general_check_does) {
    static const int sets[] = {0x00, 0x02, 0x08, 0x0a, 0x10, 0x12, 0x7f, 0x80, 0x81, 0xff, -1, -2, -3};
    for (int with_long = 0; with_long < 2; with_long++) {
        tb_buf t = checked_profile_packet(with_long);
        uint8_t *buf = malloc(t.len);
        size_t accepted = 0, rejected = 0;
        for (size_t cut = 0; cut <= t.len; cut++) {
            for (size_t at = 0; at <= t.len; at++) {
                if (at < t.len && cut < t.len) continue; /* a byte changed, or a cut: one at a time */
                for (size_t k = 0; k < sizeof sets / sizeof *sets; k++) {
                    if (at == t.len && k) break;
                    memcpy(buf, t.data, t.len);
                    if (at < t.len) /* -1, -2, -3: the high bit flipped, the byte one more, one less */
                        buf[at] = (uint8_t)(sets[k] >= 0 ? sets[k]
                                            : sets[k] == -1 ? buf[at] ^ 0x80
                                            : sets[k] == -2 ? buf[at] + 1 : buf[at] - 1);
                    tm_error fast = check_profile_packet(buf, cut, false);
                    tm_error general = check_profile_packet(buf, cut, true);
                    cr_assert_eq(fast.code, general.code, "byte %zu set %d, cut at %zu", at, sets[k], cut);
                    cr_assert_eq(fast.offset, general.offset, "byte %zu set %d, cut at %zu", at, sets[k], cut);
                    cr_assert_str_eq(fast.message, general.message, "byte %zu set %d, cut at %zu", at, sets[k], cut);
                    if (fast.code == TM_OK) accepted++;
                    else rejected++;
                }
            }
        }
        cr_expect_gt(accepted, 100);
        cr_expect_gt(rejected, 100);
        free(buf);
        tb_free(&t);
    }
}
