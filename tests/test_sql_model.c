/*
 * test_sql_model.c — values of the SQL model (src/tp) that Trace Processor
 * v58.2 was seen to give on the same input and that tracemill once gave
 * differently: each test builds a small trace (trace_builder.h), opens it
 * with tm_db_new and asserts Trace Processor's value.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "trace_builder.h"
#include "tracemill.h"
#include "tracemill_sql.h"

#define CLK_MONOTONIC 3
#define CLK_BOOTTIME 6

/* The rows of sql on the trace in b: columns joined by '|', rows by ';',
 * NULL as "NULL" (a static buffer: one use per call). */
static const char *rows(const tb_buf *b, const char *sql) {
    static char out[4096];
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(b->data, b->len, NULL, &db, &err), TM_OK, "%s", err.message);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db), sql, -1, &st, NULL), SQLITE_OK, "%s", sql);
    size_t n = 0;
    out[0] = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(st); c++) {
            const unsigned char *v = sqlite3_column_text(st, c);
            n += (size_t)snprintf(out + n, sizeof out - n, "%s%s", c ? "|" : (n ? ";" : ""),
                                  v ? (const char *)v : "NULL");
            cr_assert_lt(n, sizeof out);
        }
    }
    cr_assert_eq(rc, SQLITE_DONE, "%s", sql);
    sqlite3_finalize(st);
    tm_db_free(db);
    return out;
}

/* A packet on seq that clears its state and interns function "f" in frame
 * 1 (no mapping) and callstack 1 = [frame 1]. */
static void clear_and_intern(tb_buf *b, uint32_t seq, uint64_t ts) {
    size_t p = tb_packet_open(b, seq, ts, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(b, TM_PF_INTERNED_FUNCTION_NAMES, 1, "f", 1);
    tb_frame(b, 1, 1, 0, 0x10);
    const uint64_t frames[] = {1};
    tb_callstack(b, 1, frames, 1, 0);
    tb_close(b, i);
    tb_close(b, p);
}

/* A PerfSample of pid 7 / tid 8 on callstack 1, with cpu unless cpu < 0. */
static void perf_sample(tb_buf *b, uint64_t ts, int cpu) {
    size_t p = tb_packet_open(b, 1, ts, TB_SEQ_NEEDS);
    size_t s = tb_open(b, TM_PF_PACKET_PERF_SAMPLE);
    if (cpu >= 0) tb_uint(b, TM_PF_PERF_SAMPLE_CPU, (uint64_t)cpu);
    tb_uint(b, TM_PF_PERF_SAMPLE_PID, 7);
    tb_uint(b, TM_PF_PERF_SAMPLE_TID, 8);
    tb_uint(b, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
    tb_close(b, s);
    tb_close(b, p);
}

Test(sql_model, perf_sample_without_cpu_has_null_cpu) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100);
    perf_sample(&b, 1000, -1);
    perf_sample(&b, 2000, 0);
    perf_sample(&b, 3000, 3);
    cr_expect_str_eq(rows(&b, "SELECT ts, cpu FROM perf_sample ORDER BY ts"), "1000|NULL;2000|0;3000|3");
    tb_free(&b);
}

/* A ProcessTree.processes entry with a one-element cmdline. */
static void pt_process(tb_buf *b, uint32_t pid, uint32_t ppid, const char *cmdline, int is_comm) {
    size_t p = tb_open(b, TM_PF_PROCESS_TREE_PROCESSES);
    tb_uint(b, TM_PF_PROCESS_PID, pid);
    tb_uint(b, TM_PF_PROCESS_PPID, ppid);
    tb_str(b, TM_PF_PROCESS_CMDLINE, cmdline);
    if (is_comm) tb_uint(b, TM_PF_PROCESS_CMDLINE_IS_COMM, 1);
    tb_close(b, p);
}

static const char *const process_tree_query =
    "SELECT p.pid, p.name, p.cmdline, t.name FROM process p JOIN thread t ON t.upid = p.upid AND t.tid = p.pid "
    "WHERE p.pid >= 50 ORDER BY p.pid";

/* A callstack's frame ids are read from past its iid when the iid comes
 * first, as writers send it, else from its start: both orders make the
 * same callsites, of one- and two-byte frame ids. */
Test(sql_model, a_callstack_reads_alike_with_its_iid_first_or_last) {
    static char got[2][4096];
    for (int iid_last = 0; iid_last < 2; iid_last++) {
        tb_buf b = {0};
        size_t p = tb_packet_open(&b, 1, 1000, TB_SEQ_CLEARED);
        size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
        tb_interned_string(&b, TM_PF_INTERNED_FUNCTION_NAMES, 1, "f", 1);
        for (uint64_t f = 1; f <= 300; f++) tb_frame(&b, f, 1, 0, 0x10 * f);
        size_t m = tb_open(&b, TM_PF_INTERNED_CALLSTACKS);
        if (!iid_last) tb_uint(&b, TM_PF_INTERNED_IID, 1);
        for (uint64_t f = 1; f <= 300; f += 11) tb_uint(&b, TM_PF_CALLSTACK_FRAME_IDS, f);
        if (iid_last) tb_uint(&b, TM_PF_INTERNED_IID, 1);
        tb_close(&b, m);
        tb_close(&b, i);
        tb_close(&b, p);
        perf_sample(&b, 2000, 0);
        snprintf(got[iid_last], sizeof got[iid_last], "%s",
                 rows(&b, "SELECT c.id, c.depth, c.parent_id, f.rel_pc FROM stack_profile_callsite c "
                          "JOIN stack_profile_frame f ON f.id = c.frame_id ORDER BY c.id"));
        tb_free(&b);
    }
    cr_assert(strstr(got[0], "27|27|26|4768"), "%s", got[0]); /* 28 callsites, the last of frame 298 */
    cr_assert_str_eq(got[0], got[1]);
}

Test(sql_model, cmdline_is_comm_names_the_main_thread) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 100, 0);
    size_t t = tb_open(&b, TM_PF_PACKET_PROCESS_TREE);
    pt_process(&b, 60, 1, "system_server", 1);
    pt_process(&b, 61, 1, "app --flag", 1); /* the name is cut at the space, the thread's is not */
    pt_process(&b, 70, 1, "/system/bin/app", 0);
    tb_close(&b, t);
    tb_close(&b, p);
    cr_expect_str_eq(rows(&b, process_tree_query),
                     "60|system_server|system_server|system_server;61|app|app --flag|app --flag;"
                     "70|/system/bin/app|/system/bin/app|NULL");
    tb_free(&b);
}

Test(sql_model, kworker_names_cut_to_the_worker) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 1, 100, 0);
    size_t t = tb_open(&b, TM_PF_PACKET_PROCESS_TREE);
    pt_process(&b, 50, 2, "kworker/R-rcu_g", 1);
    pt_process(&b, 51, 2, "kworker/3:1+events", 0);
    pt_process(&b, 52, 2, "kworker/u8:0", 1);  /* no queue: kept */
    pt_process(&b, 53, 1, "kworker/0:0-mm", 1); /* not kthreadd's child: kept */
    tb_close(&b, t);
    tb_close(&b, p);
    cr_expect_str_eq(rows(&b, process_tree_query),
                     "50|kworker/R|kworker/R|kworker/R;51|kworker/3:1|kworker/3:1|NULL;"
                     "52|kworker/u8:0|kworker/u8:0|kworker/u8:0;53|kworker/0:0-mm|kworker/0:0-mm|kworker/0:0-mm");
    tb_free(&b);
}

Test(sql_model, frames_without_a_mapping_have_symbol_set_0) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100); /* frame 1: no mapping, rel_pc 0x10 */
    size_t p = tb_packet_open(&b, 1, 200, TB_SEQ_NEEDS);
    size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
    tb_mapping(&b, 1, 0, 0x1000, 0x2000, NULL, 0);
    tb_frame(&b, 2, 1, 1, 0x20); /* in mapping 1 */
    const uint64_t frames[] = {1, 2};
    tb_callstack(&b, 2, frames, 2, 0);
    tb_close(&b, i);
    tb_close(&b, p);
    perf_sample(&b, 1000, 0);
    size_t q = tb_packet_open(&b, 1, 2000, TB_SEQ_NEEDS);
    size_t s = tb_open(&b, TM_PF_PACKET_PERF_SAMPLE);
    tb_uint(&b, TM_PF_PERF_SAMPLE_PID, 7);
    tb_uint(&b, TM_PF_PERF_SAMPLE_TID, 8);
    tb_uint(&b, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 2);
    tb_close(&b, s);
    tb_close(&b, q);
    cr_expect_str_eq(rows(&b, "SELECT rel_pc, symbol_set_id FROM stack_profile_frame ORDER BY rel_pc"), "16|0;32|NULL");
    cr_expect_str_eq(rows(&b, "SELECT count(*) FROM stack_profile_symbol"), "0");
    tb_free(&b);
}

/* A PerfSample like perf_sample's whose timestamp is in clock. */
static void perf_sample_in(tb_buf *b, uint64_t ts, uint32_t clock) {
    size_t p = tb_packet_open(b, 1, ts, TB_SEQ_NEEDS);
    tb_uint(b, TM_PF_PACKET_TIMESTAMP_CLOCK_ID, clock);
    size_t s = tb_open(b, TM_PF_PACKET_PERF_SAMPLE);
    tb_uint(b, TM_PF_PERF_SAMPLE_PID, 7);
    tb_uint(b, TM_PF_PERF_SAMPLE_TID, 8);
    tb_uint(b, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
    tb_close(b, s);
    tb_close(b, p);
}

static const char *const clock_rows = "SELECT snapshot_id, clock_id, ts, clock_value FROM clock_snapshot ORDER BY id";
static const char *const cache_misses = "SELECT value FROM stats WHERE name = 'clock_sync_cache_miss'";
static const char *const trace_clock = "SELECT count(*) FROM metadata WHERE name = 'trace_time_clock_id'";

Test(sql_model, no_synthetic_snapshot_without_a_conversion) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100);
    perf_sample(&b, 1000, 0);
    perf_sample_in(&b, 2000, CLK_BOOTTIME); /* already trace time */
    cr_expect_str_eq(rows(&b, clock_rows), "");
    cr_expect_str_eq(rows(&b, cache_misses), "0");
    cr_expect_str_eq(rows(&b, trace_clock), "0");
    tb_free(&b);
}

Test(sql_model, synthetic_snapshot_when_a_conversion_needs_one) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100);
    perf_sample(&b, 1000, 0);
    perf_sample_in(&b, 2000, CLK_MONOTONIC); /* dropped: no path to trace time */
    cr_expect_str_eq(rows(&b, clock_rows), "0|6|0|0;0|11|0|0");
    cr_expect_str_eq(rows(&b, "SELECT ts FROM perf_sample"), "1000");
    cr_expect_str_eq(rows(&b, trace_clock), "0");
    tb_free(&b);
}

/* Every reading of a snapshot other than the trace clock's is converted for
 * its row, each a miss after the snapshot emptied the cache. */
Test(sql_model, snapshot_rows_cost_cache_misses) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t at0[] = {10000, 1000}, at1[] = {25000, 5000};
    tb_clock_snapshot(&b, 0, ids, at0, 2);
    tb_clock_snapshot(&b, 0, ids, at1, 2);
    clear_and_intern(&b, 1, 100);
    perf_sample(&b, 30000, 0);
    cr_expect_str_eq(rows(&b, cache_misses), "2");
    cr_expect_str_eq(rows(&b, clock_rows), "0|6|10000|10000;0|3|10000|1000;1|6|25000|25000;1|3|25000|5000");
    tb_free(&b);
}

/* A conversion cached before a snapshot is not used after it. */
Test(sql_model, a_snapshot_empties_the_conversion_cache) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t at0[] = {1000, 500}, at1[] = {5000, 4400};
    tb_clock_snapshot(&b, 0, ids, at0, 2); /* row: miss 1, caches MONOTONIC from the first snapshot */
    clear_and_intern(&b, 1, 100);
    perf_sample_in(&b, 600, CLK_MONOTONIC); /* hit */
    tb_clock_snapshot(&b, 0, ids, at1, 2); /* row: miss 2, caches MONOTONIC from 4400 on */
    perf_sample_in(&b, 700, CLK_MONOTONIC); /* miss 3, caches MONOTONIC before 4400 */
    perf_sample_in(&b, 800, CLK_MONOTONIC); /* hit */
    cr_expect_str_eq(rows(&b, cache_misses), "3");
    cr_expect_str_eq(rows(&b, "SELECT ts FROM perf_sample ORDER BY ts"), "1100;1200;1300");
    tb_free(&b);
}

/* A packet carrying only a message of field `field` with two int64s. */
static void uuid_packet(tb_buf *b, uint32_t field, uint32_t msb_field, uint64_t msb, uint32_t lsb_field, uint64_t lsb) {
    size_t p = tb_open(b, 1);
    size_t m = tb_open(b, field);
    tb_uint(b, msb_field, msb);
    tb_uint(b, lsb_field, lsb);
    tb_close(b, m);
    tb_close(b, p);
}

static const char *const trace_uuid = "SELECT str_value FROM metadata WHERE name = 'trace_uuid'";

/* The trace's TraceUuid packet names it, whatever its config says. */
Test(sql_model, trace_uuid_from_its_packet) {
    tb_buf b = {0};
    uuid_packet(&b, TM_PF_PACKET_TRACE_CONFIG, TM_PF_CONFIG_TRACE_UUID_MSB, 1, TM_PF_CONFIG_TRACE_UUID_LSB, 2);
    uuid_packet(&b, TM_PF_PACKET_TRACE_UUID, TM_PF_TRACE_UUID_MSB, 0x0123456789abcdefull, TM_PF_TRACE_UUID_LSB,
                (uint64_t)-2);
    clear_and_intern(&b, 1, 100);
    perf_sample(&b, 1000, 0);
    cr_expect_str_eq(rows(&b, trace_uuid), "01234567-89ab-cdef-ffff-fffffffffffe");
    tb_free(&b);
}

/* Without one, the config's trace_uuid_msb/lsb. */
Test(sql_model, trace_uuid_from_its_config) {
    tb_buf b = {0};
    uuid_packet(&b, TM_PF_PACKET_TRACE_CONFIG, TM_PF_CONFIG_TRACE_UUID_MSB, 0xfedcba9876543210ull,
                TM_PF_CONFIG_TRACE_UUID_LSB, 0x1122334455667788ull);
    clear_and_intern(&b, 1, 100);
    perf_sample(&b, 1000, 0);
    cr_expect_str_eq(rows(&b, trace_uuid), "fedcba98-7654-3210-1122-334455667788");
    tb_free(&b);
}

/* Without either (or with zeros), the hash of the first bytes. */
Test(sql_model, trace_uuid_from_a_hash) {
    tb_buf b = {0};
    uuid_packet(&b, TM_PF_PACKET_TRACE_UUID, TM_PF_TRACE_UUID_MSB, 0, TM_PF_TRACE_UUID_LSB, 0);
    clear_and_intern(&b, 1, 100);
    perf_sample(&b, 1000, 0);
    const char *u = rows(&b, trace_uuid);
    cr_expect(strncmp(u, "00000000-0000-0000-", 19) == 0 && strlen(u) == 36, "%s", u);
    cr_expect(strcmp(u, "00000000-0000-0000-0000-000000000000") != 0);
    tb_free(&b);
}

/* Epoch e of sequence 1: a clear, then function "e<e>" in frame iid and
 * callstack iid = [frame iid], padded with `extra` unused strings, then a
 * sample on that callstack. */
static void epoch_with_sample(tb_buf *b, int e, uint64_t iid, int extra) {
    char name[8];
    snprintf(name, sizeof name, "e%d", e);
    uint64_t ts = 1000 * (uint64_t)(e + 1);
    size_t p = tb_packet_open(b, 1, ts, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(b, TM_PF_INTERNED_FUNCTION_NAMES, iid, name, strlen(name));
    for (int k = 0; k < extra; k++) tb_interned_string(b, TM_PF_INTERNED_MAPPING_PATHS, 2 + (uint64_t)k, "pad", 3);
    tb_frame(b, iid, iid, 0, 0x10);
    tb_callstack(b, iid, &iid, 1, 0);
    tb_close(b, i);
    tb_close(b, p);
    tb_perf_sample(b, 1, ts + 500, 7, 8, iid, TB_SEQ_NEEDS);
}

/* Samples are resolved after the whole trace is read, so every epoch but
 * the last is looked up after later clears: a small one from the shared
 * (epoch, kind, iid) map, a large one (or one whose iids do not pack into
 * that key) from the index it keeps. */
Test(sql_model, samples_resolve_in_their_epoch_however_it_is_indexed) {
    tb_buf b = {0};
    epoch_with_sample(&b, 0, 1, 0);               /* small */
    epoch_with_sample(&b, 1, 1, 100);             /* keeps its index */
    epoch_with_sample(&b, 2, (uint64_t)1 << 40, 0); /* small, iid past the key */
    epoch_with_sample(&b, 3, 1, 2);               /* small again */
    epoch_with_sample(&b, 4, 1, 0);               /* the current epoch */
    cr_expect_str_eq(rows(&b, "SELECT f.name FROM perf_sample s JOIN stack_profile_callsite c ON s.callsite_id = c.id "
                              "JOIN stack_profile_frame f ON c.frame_id = f.id ORDER BY s.ts"),
                     "e0;e1;e2;e3;e4");
    tb_free(&b);
}

/* Clear + frame 1 in mapping 1 + callstack 1 = [frame 1] on sequence 1. */
static void clear_and_intern_mapped(tb_buf *b, uint64_t ts) {
    size_t p = tb_packet_open(b, 1, ts, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(b, TM_PF_INTERNED_FUNCTION_NAMES, 1, "f", 1);
    tb_mapping(b, 1, 0, 0x1000, 0x2000, NULL, 0);
    tb_frame(b, 1, 1, 1, 0x10);
    const uint64_t frames[] = {1};
    tb_callstack(b, 1, frames, 1, 0);
    tb_close(b, i);
    tb_close(b, p);
}

/* A generation's callsites stay findable until its last sample in time,
 * however its samples interleave with a later generation's: the sample at
 * 300 reuses the callsite of the one at 100 (one row per generation). */
Test(sql_model, a_generation_keeps_its_callsites_until_its_last_sample) {
    tb_buf b = {0};
    clear_and_intern_mapped(&b, 50);
    tb_perf_sample(&b, 1, 100, 7, 8, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 300, 7, 8, 1, TB_SEQ_NEEDS);
    clear_and_intern_mapped(&b, 150);
    tb_perf_sample(&b, 1, 200, 7, 8, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 400, 7, 8, 1, TB_SEQ_NEEDS);
    cr_expect_str_eq(rows(&b, "SELECT ts, callsite_id FROM perf_sample ORDER BY ts"), "100|0;200|1;300|0;400|1");
    cr_expect_str_eq(rows(&b, "SELECT count(*) FROM stack_profile_callsite"), "2");
    tb_free(&b);
}

/* A generation interning shared root S (a mapping with start == end is
 * shared), process frames P0..P12 and shared leaf T, and callstacks
 * [S, P0, P(1+k), T] twice, as iids 1+k and 101+k for k < 12. */
static void intern_fan(tb_buf *b, uint64_t ts) {
    size_t p = tb_packet_open(b, 1, ts, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(b, TM_PF_INTERNED_FUNCTION_NAMES, 1, "f", 1);
    tb_mapping(b, 1, 0, 0x1000, 0x2000, NULL, 0);
    tb_mapping(b, 2, 0, 0x5000, 0x5000, NULL, 0);
    tb_frame(b, 1, 1, 2, 0x10);
    for (uint64_t k = 0; k < 13; k++) tb_frame(b, 2 + k, 1, 1, 0x100 + k * 0x10);
    tb_frame(b, 20, 1, 2, 0x20);
    for (uint64_t k = 0; k < 12; k++) {
        const uint64_t frames[] = {1, 2, 3 + k, 20};
        tb_callstack(b, 1 + k, frames, 4, 0);
        tb_callstack(b, 101 + k, frames, 4, 0);
    }
    tb_close(b, i);
    tb_close(b, p);
}

/* Callsites are found again however they are indexed: twelve children of
 * P0 (more than a short list holds), callsites of a process's frames under
 * a shared one and shared ones under those; the iids 101+k find the rows
 * iids 1+k made. A second generation makes its own rows but for S, which
 * is shared. Rows are numbered in the order samples first reach them. */
Test(sql_model, callsites_are_found_again_under_many_children_and_shared_frames) {
    tb_buf b = {0};
    for (uint64_t g = 0; g < 2; g++) {
        intern_fan(&b, 1000 * g + 10);
        for (uint64_t k = 0; k < 12; k++) {
            tb_perf_sample(&b, 1, 1000 * g + 100 + k, 7, 8, 1 + k, TB_SEQ_NEEDS);
            tb_perf_sample(&b, 1, 1000 * g + 200 + k, 7, 8, 101 + k, TB_SEQ_NEEDS);
        }
    }
    cr_expect_str_eq(rows(&b, "SELECT count(*) FROM stack_profile_callsite"), "51");
    cr_expect_str_eq(rows(&b, "SELECT depth, count(*) FROM stack_profile_callsite GROUP BY depth"),
                     "0|1;1|2;2|24;3|24");
    cr_expect_str_eq(rows(&b, "SELECT count(*) FROM perf_sample a JOIN perf_sample b ON b.ts = a.ts + 100 "
                              "WHERE a.callsite_id = b.callsite_id"), "24");
    cr_expect_str_eq(rows(&b, "SELECT count(DISTINCT callsite_id) FROM perf_sample"), "24");
    cr_expect_str_eq(rows(&b, "SELECT id, parent_id, depth FROM stack_profile_callsite WHERE id < 6 OR id > 47"),
                     "0|NULL|0;1|0|1;2|1|2;3|2|3;4|1|2;5|4|3;48|47|3;49|26|2;50|49|3");
    tb_free(&b);
}

/* Samples are numbered in time order, ties in file order, whichever
 * sequence they come from and however a sequence orders its own. */
Test(sql_model, samples_in_time_order_ties_in_file_order) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 50);
    clear_and_intern(&b, 2, 50);
    tb_perf_sample(&b, 1, 300, 7, 8, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 100, 7, 9, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 100, 7, 8, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 200, 7, 8, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 300, 7, 9, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 50, 7, 9, 1, TB_SEQ_NEEDS);
    cr_expect_str_eq(rows(&b, "SELECT s.ts, t.tid FROM perf_sample AS s JOIN thread AS t USING (utid) ORDER BY s.id"),
                     "50|9;100|9;100|8;200|8;300|8;300|9");
    tb_free(&b);
}

/* The same with many runs: n samples of two sequences at times that go
 * down every few samples, with ties (k * 37 mod m), merged through a heap
 * of the runs' heads (40 samples: fewer than 64 runs) or pass by pass (202:
 * more); the expected order is a stable sort of the file. */
static void expect_many_runs_in_order(size_t n, size_t m) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 50);
    clear_and_intern(&b, 2, 50);
    struct { uint64_t ts; int tid; } want[202], t;
    cr_assert_leq(n, sizeof want / sizeof *want);
    for (size_t k = 0; k < n; k++) {
        want[k].ts = 1000 + (k * 37) % m, want[k].tid = k % 2 ? 9 : 8;
        tb_perf_sample(&b, 1 + (uint32_t)(k % 2), want[k].ts, 7, (uint32_t)want[k].tid, 1, TB_SEQ_NEEDS);
    }
    for (size_t k = 1; k < n; k++) /* insertion sort: stable */
        for (size_t m = k; m > 0 && want[m - 1].ts > want[m].ts; m--)
            t = want[m], want[m] = want[m - 1], want[m - 1] = t;
    char expect[4096];
    size_t at = 0;
    for (size_t k = 0; k < n; k++)
        at += (size_t)snprintf(expect + at, sizeof expect - at, "%s%llu|%d", k ? ";" : "",
                               (unsigned long long)want[k].ts, want[k].tid);
    cr_expect_str_eq(rows(&b, "SELECT s.ts, t.tid FROM perf_sample AS s JOIN thread AS t USING (utid) ORDER BY s.id"),
                     expect, "%zu samples", n);
    tb_free(&b);
}

Test(sql_model, samples_of_many_runs_in_time_order_ties_in_file_order) {
    expect_many_runs_in_order(40, 13);
    expect_many_runs_in_order(202, 101);
}
