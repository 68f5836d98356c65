/*
 * test_differential.c — the profile model (convert/info) and the SQL model
 * (query) must agree on every Perfetto trace: tm_diff_check
 * (differential.h) over the repository's traces (examples, tests/hostile,
 * fuzz/corpus/trace, the relay-compat and perfetto-probes fixtures that
 * the golden files and other suites read) and over traces built here in
 * several shapes.
 *
 * Suite `divergence` holds one regression test per disagreement the two
 * readings had before both read through the one Perfetto reader
 * (perfetto/reader.h), each asserting the behaviour both now share.
 */
#define _POSIX_C_SOURCE 200809L /* scandir */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "differential.h"
#include "profile/profile.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

#define CLK_REALTIME 1
#define CLK_MONOTONIC 3
#define CLK_BOOTTIME 6

/* ---- checking ---- */

/* Checks one input; a disagreement is appended to fails as "name: why". */
static int check_one(const char *name, const void *data, size_t len, tu_membuf *fails) {
    tm_diff_report r;
    if (tm_diff_check(data, len, &r)) return 1;
    char line[1400];
    int n = snprintf(line, sizeof line, "%s: %s\n", name, r.message);
    cr_assert(n > 0);
    cr_assert_eq(tu_membuf_write(fails, line, strlen(line)), 0);
    return 0;
}

static int has_suffix(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Checks every DIR/NAME[/SUB] ending in .pftrace (SUB: a file inside each
 * subdirectory, for the probe layout).
 * Returns how many were checked; fails collects the disagreements. */
static size_t check_dir(const char *dir, const char *sub, tu_membuf *fails) {
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, alphasort);
    cr_assert_geq(n, 0, "cannot list %s", dir);
    size_t checked = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        char path[1024];
        if (sub) snprintf(path, sizeof path, "%s/%s/%s", dir, name, sub);
        else snprintf(path, sizeof path, "%s/%s", dir, name);
        int wanted = name[0] != '.' && (sub || has_suffix(name, ".pftrace"));
        size_t len;
        char *data = wanted ? tu_read_file(path, &len) : NULL;
        if (data) {
            check_one(path + strlen(dir) + 1, data, len, fails);
            checked++;
            free(data);
        }
        free(ents[i]);
    }
    free(ents);
    return checked;
}

static void assert_dir_agrees(const char *dir, const char *sub) {
    tu_membuf fails = {0};
    size_t n = check_dir(dir, sub, &fails);
    cr_assert_gt(n, 0, "no traces in %s", dir);
    cr_assert_eq(fails.len, 0, "%s: the readers disagree on:\n%s", dir, fails.data);
    tu_membuf_free(&fails);
}

/* A built trace must agree and both readers must keep `kept` samples. */
static void assert_agrees(const tb_buf *b, const tm_options *opts, size_t kept) {
    tm_diff_report r;
    int ok = tm_diff_check_with(b->data, b->len, opts, &r);
    cr_assert(ok, "the readers disagree: %s", r.message);
    cr_assert_eq(r.profile_err.code, TM_OK, "the profile model rejects: %s", r.profile_err.message);
    cr_assert_eq(r.profile_samples, kept, "the profile model keeps %zu samples, expected %zu", r.profile_samples, kept);
    cr_assert_geq(r.sql_samples, kept);
}

/* ---- building traces ---- */

/* Inside an open InternedData: function names, frames and one callstack
 * per entry of fns (callstack iid k + 1 = the frames of fns[0..k], root
 * first), all iids numbered from base. */
static void intern_chain(tb_buf *b, uint64_t base, const char *const *fns, size_t n) {
    for (size_t i = 0; i < n; i++) tb_interned_string(b, TM_PF_INTERNED_FUNCTION_NAMES, base + i, fns[i], strlen(fns[i]));
    for (size_t i = 0; i < n; i++) tb_frame(b, base + i, base + i, 0, 0x100 * (i + 1));
    uint64_t frames[16];
    for (size_t i = 0; i < n && i < 16; i++) {
        frames[i] = base + i;
        tb_callstack(b, base + i, frames, i + 1, 1);
    }
}

/* A packet on seq that clears its state and interns the chain fns. */
static void clear_and_intern(tb_buf *b, uint32_t seq, uint64_t ts, const char *const *fns, size_t n) {
    size_t p = tb_packet_open(b, seq, ts, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    intern_chain(b, 1, fns, n);
    tb_close(b, i);
    tb_close(b, p);
}

static void thread_desc(tb_buf *b, uint32_t pid, uint32_t tid, uint64_t ref_us) {
    size_t d = tb_open(b, TM_PF_PACKET_THREAD_DESCRIPTOR);
    tb_uint(b, TM_PF_THREAD_DESC_PID, pid);
    tb_uint(b, TM_PF_THREAD_DESC_TID, tid);
    tb_uint(b, TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US, ref_us);
    tb_close(b, d);
}

static void streaming(tb_buf *b, const uint64_t *cs, const uint64_t *dt, size_t n) {
    size_t s = tb_open(b, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    tb_packed(b, TM_PF_STREAMING_CALLSTACK_IID, cs, n);
    tb_packed(b, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt, n);
    tb_close(b, s);
}

/* A sequence with a thread (pid, tid, reference time) and interned chain. */
static void streaming_sequence(tb_buf *b, uint32_t seq, uint32_t pid, uint32_t tid, uint64_t ref_us,
                               const char *const *fns, size_t n) {
    size_t p = tb_packet_open(b, seq, TB_NO_TS, TB_SEQ_CLEARED);
    thread_desc(b, pid, tid, ref_us);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    intern_chain(b, 1, fns, n);
    tb_close(b, i);
    tb_close(b, p);
}

static void streaming_packet(tb_buf *b, uint32_t seq, const uint64_t *cs, const uint64_t *dt, size_t n) {
    size_t p = tb_packet_open(b, seq, TB_NO_TS, TB_SEQ_NEEDS);
    streaming(b, cs, dt, n);
    tb_close(b, p);
}

/* One ClockSnapshot.Clock, with is_incremental and unit_multiplier_ns when non-zero. */
static void clock_entry(tb_buf *b, uint32_t id, uint64_t value, int incremental, uint64_t mult) {
    size_t c = tb_open(b, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(b, TM_PF_CLOCK_ID, id);
    tb_uint(b, TM_PF_CLOCK_TIMESTAMP, value);
    if (incremental) tb_uint(b, TM_PF_CLOCK_IS_INCREMENTAL, 1);
    if (mult) tb_uint(b, TM_PF_CLOCK_UNIT_MULTIPLIER_NS, mult);
    tb_close(b, c);
}

/* A PerfSample of pid 7 / tid 8 timed in MONOTONIC. */
static void mono_sample(tb_buf *b, uint64_t ts, uint64_t iid) {
    size_t p = tb_packet_open(b, 1, ts, TB_SEQ_NEEDS);
    tb_uint(b, TM_PF_PACKET_TIMESTAMP_CLOCK_ID, CLK_MONOTONIC);
    size_t s = tb_open(b, TM_PF_PACKET_PERF_SAMPLE);
    tb_uint(b, TM_PF_PERF_SAMPLE_PID, 7);
    tb_uint(b, TM_PF_PERF_SAMPLE_TID, 8);
    tb_uint(b, TM_PF_PERF_SAMPLE_CALLSTACK_IID, iid);
    tb_close(b, s);
    tb_close(b, p);
}

static const char *const abc[] = {"main", "run", "work"};
static const char *const xyz[] = {"start", "loop", "poll"};

/* ---- the repository's traces ---- */

Test(differential, examples) { assert_dir_agrees(TM_SOURCE_DIR "/examples", NULL); }

Test(differential, hostile_traces) { assert_dir_agrees(TM_SOURCE_DIR "/tests/hostile", NULL); }

Test(differential, fuzz_corpus_traces) { assert_dir_agrees(TM_SOURCE_DIR "/fuzz/corpus/trace", NULL); }

Test(differential, relay_compat_fixtures) { assert_dir_agrees(TM_FIXTURES "/relay-compat", NULL); }

Test(differential, perfetto_probe_fixtures) { assert_dir_agrees(TM_FIXTURES "/perfetto-probes", "trace.pftrace"); }

/* ---- built traces ---- */

Test(differential, perf_samples_on_two_threads) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    size_t n = 0;
    for (uint64_t k = 0; k < 6; k++, n++) tb_perf_sample(&b, 1, 1000 + k * 10, 7, 7 + (uint32_t)(k % 2), 1 + k % 3, TB_SEQ_NEEDS);
    assert_agrees(&b, NULL, n);
    tb_free(&b);
}

Test(differential, streaming_profile_packets) {
    tb_buf b = {0};
    streaming_sequence(&b, 1, 20, 21, 5000, abc, 3);
    const uint64_t cs[] = {3, 2, 3, 1}, dt[] = {0, 10, 10, 250};
    streaming_packet(&b, 1, cs, dt, 4);
    streaming_packet(&b, 1, cs, dt, 2);
    assert_agrees(&b, NULL, 6);
    tb_free(&b);
}

/* StreamingProfilePackets as an unpacked writer sends them (the profile
 * model reads both lists in one pass then), with deltas of up to four
 * bytes, an unknown field between them and a trailing delta; and one with
 * an element packed, which takes the general way. */
Test(differential, streaming_lists_unpacked_and_mixed) {
    tb_buf b = {0};
    streaming_sequence(&b, 1, 20, 21, 5000, abc, 3);
    static const uint64_t cs[] = {3, 2, 3}, dt[] = {0, 200, 20000, 3000000};
    size_t p = tb_packet_open(&b, 1, TB_NO_TS, TB_SEQ_NEEDS);
    size_t s = tb_open(&b, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    for (size_t i = 0; i < 4; i++) {
        if (i < 3) tb_uint(&b, TM_PF_STREAMING_CALLSTACK_IID, cs[i]);
        tb_uint(&b, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt[i]);
        if (i == 1) tb_uint(&b, 9, 77);
    }
    tb_close(&b, s);
    tb_close(&b, p);
    p = tb_packet_open(&b, 1, TB_NO_TS, TB_SEQ_NEEDS);
    s = tb_open(&b, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    tb_uint(&b, TM_PF_STREAMING_CALLSTACK_IID, 1);
    tb_packed(&b, TM_PF_STREAMING_CALLSTACK_IID, cs, 2);
    tb_repeated(&b, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt, 3);
    tb_close(&b, s);
    tb_close(&b, p);
    assert_agrees(&b, NULL, 6);
    tb_free(&b);
}

Test(differential, both_sample_kinds_on_several_sequences) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    streaming_sequence(&b, 2, 30, 31, 2, xyz, 3);
    clear_and_intern(&b, 3, 100, xyz, 2); /* the same iids, other names */
    const uint64_t cs[] = {1, 3}, dt[] = {5, 5};
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    streaming_packet(&b, 2, cs, dt, 2);
    tb_perf_sample(&b, 3, 1500, 7, 9, 2, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 2000, 7, 9, 1, TB_SEQ_NEEDS);
    assert_agrees(&b, NULL, 5);
    tb_free(&b);
}

Test(differential, incremental_state_cleared_twice) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    clear_and_intern(&b, 1, 1100, xyz, 3); /* iid 3 now names another stack */
    tb_perf_sample(&b, 1, 1200, 7, 8, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 1300, 7, 8, 2, TB_SEQ_NEEDS);
    assert_agrees(&b, NULL, 3);
    tb_free(&b);
}

Test(differential, entries_re_sent_at_each_clear_same_or_changed) {
    static const char *const abz[] = {"main", "run", "zap"};
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    clear_and_intern(&b, 1, 1100, abc, 3); /* the same bytes again */
    tb_perf_sample(&b, 1, 1200, 7, 8, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 1250, 7, 8, 2, TB_SEQ_NEEDS);
    clear_and_intern(&b, 1, 1300, abz, 3); /* one name changed */
    tb_perf_sample(&b, 1, 1400, 7, 8, 3, TB_SEQ_NEEDS);
    clear_and_intern(&b, 1, 1500, abc, 3);
    tb_perf_sample(&b, 1, 1600, 7, 8, 3, TB_SEQ_NEEDS);
    assert_agrees(&b, NULL, 5);
    tb_free(&b);
}

/* Sequences that begin epochs with the same interned bytes (the profile
 * model's reader copies a twin's entries; the SQL model reads each): both
 * agree, across clears that change what each sequence had before. */
Test(differential, sequences_interning_the_same_tables) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    clear_and_intern(&b, 2, 110, abc, 3); /* seq 1's twin */
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 1010, 7, 9, 2, TB_SEQ_NEEDS);
    clear_and_intern(&b, 1, 1100, xyz, 3);
    clear_and_intern(&b, 3, 1110, abc, 3); /* seq 2's twin */
    tb_perf_sample(&b, 3, 1200, 7, 10, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 1210, 7, 8, 3, TB_SEQ_NEEDS);
    clear_and_intern(&b, 2, 1300, xyz, 3); /* seq 1's new twin; seq 2 had abc before */
    tb_perf_sample(&b, 2, 1400, 7, 9, 3, TB_SEQ_NEEDS);
    clear_and_intern(&b, 2, 1500, abc, 2); /* fewer entries than seq 3's abc: no twin */
    tb_perf_sample(&b, 2, 1600, 7, 9, 2, TB_SEQ_NEEDS);
    clear_and_intern(&b, 2, 1700, abc, 3); /* seq 3's twin again, after xyz and a shorter abc */
    tb_perf_sample(&b, 2, 1800, 7, 9, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 3, 1900, 7, 10, 1, TB_SEQ_NEEDS);
    assert_agrees(&b, NULL, 8);
    tb_free(&b);
}

/* An epoch whose first InternedData has callstack 1 = {frame 1}, frame 1
 * naming function 9, which a later message of the sequence interns. */
static void clear_with_unnamed_frame(tb_buf *b, uint32_t seq, uint64_t ts) {
    size_t p = tb_packet_open(b, seq, ts, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    tb_frame(b, 1, 9, 0, 0x100);
    static const uint64_t frames[] = {1};
    tb_callstack(b, 1, frames, 1, 1);
    tb_close(b, i);
    tb_close(b, p);
}

static void intern_function_9(tb_buf *b, uint32_t seq, uint64_t ts, const char *name) {
    size_t p = tb_packet_open(b, seq, ts, TB_SEQ_NEEDS);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(b, TM_PF_INTERNED_FUNCTION_NAMES, 9, name, strlen(name));
    tb_close(b, i);
    tb_close(b, p);
}

/* A twin's resolutions are shared only while its epoch holds just the
 * message both began with: a later message (here the name a frame refers
 * to) is each sequence's own, so a stack one twin resolves may not resolve,
 * or resolve otherwise, in the other. */
Test(differential, twins_part_when_either_interns_more) {
    tb_buf b = {0};
    clear_with_unnamed_frame(&b, 1, 100);
    clear_with_unnamed_frame(&b, 2, 110);   /* seq 1's twin */
    tb_perf_sample(&b, 1, 1000, 7, 8, 1, TB_SEQ_NEEDS); /* function 9 unknown: dropped */
    intern_function_9(&b, 1, 1050, "foo");
    tb_perf_sample(&b, 1, 1100, 7, 8, 1, TB_SEQ_NEEDS); /* foo */
    tb_perf_sample(&b, 2, 1200, 7, 9, 1, TB_SEQ_NEEDS); /* still unknown on seq 2: dropped */
    intern_function_9(&b, 2, 1250, "bar");
    tb_perf_sample(&b, 2, 1300, 7, 9, 1, TB_SEQ_NEEDS); /* bar */
    clear_with_unnamed_frame(&b, 3, 1400);  /* seq 2's twin, which interned more */
    tb_perf_sample(&b, 3, 1500, 7, 10, 1, TB_SEQ_NEEDS); /* dropped */
    assert_agrees(&b, NULL, 2);
    tb_free(&b);
}

/* A twin's twin holds the same entries too: a sequence takes what one two
 * links away resolved, through a twin that never resolved it, but not
 * through a link that broke (the middle sequence cleared again, or
 * interned more). */
Test(differential, resolutions_along_a_chain_of_twins) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    clear_and_intern(&b, 2, 110, abc, 3); /* seq 1's twin */
    clear_and_intern(&b, 3, 120, abc, 3); /* seq 2's twin */
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 3, 1010, 7, 10, 3, TB_SEQ_NEEDS); /* seq 1's, through seq 2 */
    clear_and_intern(&b, 2, 1100, xyz, 3);               /* seq 3's link to seq 2 breaks */
    tb_perf_sample(&b, 1, 1200, 7, 8, 2, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 3, 1210, 7, 10, 2, TB_SEQ_NEEDS); /* seq 3's own */
    tb_perf_sample(&b, 2, 1220, 7, 9, 2, TB_SEQ_NEEDS);  /* xyz */
    clear_with_unnamed_frame(&b, 1, 1300);
    clear_with_unnamed_frame(&b, 2, 1310);               /* seq 1's twin */
    clear_with_unnamed_frame(&b, 3, 1320);               /* seq 2's twin */
    intern_function_9(&b, 1, 1330, "foo");
    tb_perf_sample(&b, 1, 1400, 7, 8, 1, TB_SEQ_NEEDS);  /* foo */
    intern_function_9(&b, 2, 1410, "bar");               /* seq 2 interned more: the chain breaks there */
    tb_perf_sample(&b, 3, 1500, 7, 10, 1, TB_SEQ_NEEDS); /* function 9 unknown on seq 3: dropped */
    tb_perf_sample(&b, 2, 1510, 7, 9, 1, TB_SEQ_NEEDS);  /* bar */
    assert_agrees(&b, NULL, 7);
    tb_free(&b);
}

/* Sequences that re-send the same tables at every clear (the epoch before's
 * message again, replayed) are twins in every epoch, not only in their
 * first; not once either one's tables differ or grow. */
Test(differential, twins_again_after_each_clear) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    clear_and_intern(&b, 2, 110, abc, 3); /* seq 1's twin */
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    clear_and_intern(&b, 1, 1100, abc, 3); /* replayed */
    clear_and_intern(&b, 2, 1110, abc, 3); /* replayed, and seq 1's twin again */
    tb_perf_sample(&b, 1, 1200, 7, 8, 2, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 2, 1210, 7, 9, 2, TB_SEQ_NEEDS);  /* seq 1's */
    clear_with_unnamed_frame(&b, 1, 1300);
    clear_with_unnamed_frame(&b, 2, 1310);               /* seq 1's twin */
    tb_perf_sample(&b, 1, 1320, 7, 8, 1, TB_SEQ_NEEDS);  /* function 9 unknown: dropped */
    clear_with_unnamed_frame(&b, 1, 1400);               /* replayed */
    intern_function_9(&b, 1, 1410, "foo");
    tb_perf_sample(&b, 1, 1420, 7, 8, 1, TB_SEQ_NEEDS);  /* foo */
    clear_with_unnamed_frame(&b, 2, 1500);               /* replayed; seq 1 interned more: no twin */
    tb_perf_sample(&b, 2, 1510, 7, 9, 1, TB_SEQ_NEEDS);  /* dropped */
    clear_with_unnamed_frame(&b, 1, 1550);               /* replayed: seq 1 began last with these bytes */
    clear_and_intern(&b, 1, 1600, xyz, 3);
    tb_perf_sample(&b, 1, 1605, 7, 8, 1, TB_SEQ_NEEDS);  /* xyz */
    clear_with_unnamed_frame(&b, 2, 1610);               /* replayed again; seq 1 differs now: no twin */
    intern_function_9(&b, 2, 1620, "bar");
    tb_perf_sample(&b, 2, 1630, 7, 9, 1, TB_SEQ_NEEDS);  /* bar */
    assert_agrees(&b, NULL, 6);
    tb_free(&b);
}

Test(differential, lost_packets_until_the_next_clear) {
    tb_buf b = {0};
    clear_and_intern(&b, 1, 100, abc, 3);
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    size_t p = tb_packet_open(&b, 1, 1100, TB_SEQ_NEEDS); /* after a loss: skipped by both */
    tb_uint(&b, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, 1);
    tb_close(&b, p);
    tb_perf_sample(&b, 1, 1200, 7, 8, 2, TB_SEQ_NEEDS);
    clear_and_intern(&b, 1, 1300, xyz, 3);
    tb_perf_sample(&b, 1, 1400, 7, 8, 1, TB_SEQ_NEEDS);
    assert_agrees(&b, NULL, 2);
    tb_free(&b);
}

Test(differential, compressed_packets) {
    tb_buf inner = {0}, b = {0};
    clear_and_intern(&inner, 1, 100, abc, 3);
    tb_perf_sample(&inner, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&inner, 1, 1100, 7, 8, 2, TB_SEQ_NEEDS);
    tb_compressed_packet(&b, &inner);
    tb_perf_sample(&b, 1, 1200, 7, 8, 1, TB_SEQ_NEEDS); /* the interning of the payload stays */
    assert_agrees(&b, NULL, 3);
    tb_free(&inner);
    tb_free(&b);
}

Test(differential, samples_in_a_non_boottime_clock) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC, CLK_REALTIME};
    const uint64_t at0[] = {1000000, 500000, 1700000000000000000ull}, at1[] = {3000000, 2600000, 1700000000002000000ull};
    tb_clock_snapshot(&b, 0, ids, at0, 3);
    tb_clock_snapshot(&b, 0, ids, at1, 3); /* MONOTONIC ran 100 µs slower in between */
    clear_and_intern(&b, 1, 1000000, abc, 3);
    for (uint64_t ts = 600000; ts <= 3600000; ts += 500000) mono_sample(&b, ts, 1 + ts / 500000 % 3);
    assert_agrees(&b, NULL, 7);
    tb_free(&b);
}

/* Sequence 1 cleared with callstacks 1..3 over abc and task context 5
 * (pid 40, tid 41): what the StackSample tests refer to. */
static void stack_sample_interning(tb_buf *b) {
    size_t p = tb_packet_open(b, 1, 100, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    intern_chain(b, 1, abc, 3);
    tb_task_context(b, 5, 40, 41);
    tb_close(b, i);
    tb_close(b, p);
}

Test(differential, stack_samples) {
    tb_buf b = {0};
    stack_sample_interning(&b);
    const char *const frames[] = {"root", "mid", "leaf"};
    tb_stack_sample s1 = {.ts = 1000, .seq = 1, .task = 1, .pid = 40, .tid = 42, .frames = frames, .n_frames = 3,
                          .inline_cs = 1};
    tb_stack_sample s2 = {.ts = 1100, .seq = 1, .flags = TB_SEQ_NEEDS, .task_iid = 5, .cs_iid = 3};
    tb_stack_sample s3 = {.ts = 1200, .seq = 1, .task = 1, .pid = 40, .tid = TB_SS_NONE, .frames = frames,
                          .n_frames = 2, .inline_cs = 1}; /* no tid: the process's main thread */
    tb_stack_sample_packet(&b, &s1);
    tb_stack_sample_packet(&b, &s2);
    tb_stack_sample_packet(&b, &s3);
    assert_agrees(&b, NULL, 3);
    tb_free(&b);
}

/* The check itself must see a difference that is there: the profile model
 * of one trace against the SQL model of another. */
static void assert_compare_differs(const tb_buf *profile_in, const tb_buf *sql_in, const char *needle) {
    tm_trace *t = NULL;
    tm_db *db = NULL;
    cr_assert_eq(tm_trace_parse(profile_in->data, profile_in->len, NULL, &t, NULL), TM_OK);
    cr_assert_eq(tm_db_new(sql_in->data, sql_in->len, NULL, &db, NULL), TM_OK);
    tm_diff_report r;
    cr_assert_not(tm_diff_compare(t, db, &r), "a difference went unseen");
    cr_assert_eq(r.verdict, TM_DIFF_SAMPLES);
    cr_assert(strstr(r.message, needle), "the message does not show %s: %s", needle, r.message);
    cr_assert(tm_diff_compare(t, db, &r) == 0 && strstr(r.message, needle), "a second compare differs: %s", r.message);
    tm_trace_free(t);
    tm_db_free(db);
}

Test(differential, sees_other_samples) {
    tb_buf a = {0}, b = {0}, c = {0}, d = {0};
    const char *const other[] = {"main", "run", "idle"};
    clear_and_intern(&a, 1, 100, abc, 3);
    clear_and_intern(&b, 1, 100, abc, 3);
    clear_and_intern(&c, 1, 100, other, 3);
    clear_and_intern(&d, 1, 100, abc, 3);
    tb_perf_sample(&a, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&b, 1, 1000, 7, 9, 3, TB_SEQ_NEEDS); /* another thread */
    tb_perf_sample(&c, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS); /* another leaf */
    tb_perf_sample(&d, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&d, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS); /* the same sample twice */
    assert_compare_differs(&a, &b, "tid=9");
    assert_compare_differs(&a, &c, "idle <- run <- main");
    assert_compare_differs(&a, &d, "keeps 1, SQL perf_sample has 2");
    tb_free(&a);
    tb_free(&b);
    tb_free(&c);
    tb_free(&d);
}

/* ---- the disagreements of the two readings before the one reader ---- */

Test(divergence, nested_compressed_packets) {
    tb_buf inner = {0}, middle = {0}, b = {0};
    tb_perf_sample(&inner, 1, 1100, 7, 8, 2, TB_SEQ_NEEDS);
    tb_compressed_packet(&middle, &inner);
    clear_and_intern(&b, 1, 100, abc, 3);
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    tb_compressed_packet(&b, &middle);
    tm_diff_report r;
    int ok = tm_diff_check(b.data, b.len, &r);
    cr_assert(ok, "the readers disagree: %s", r.message);
    cr_assert_eq(r.profile_err.code, TM_OK, "%s", r.profile_err.message);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(b.data, b.len, NULL, &t, NULL), TM_OK);
    cr_assert_geq(tm_trace_get_stats(t)->packets_unsupported, 1);
    tm_trace_free(t);
    tb_free(&inner);
    tb_free(&middle);
    tb_free(&b);
}

/* (b) ClockSnapshot.Clock.unit_multiplier_ns (a uint64) written
 * length-delimited: both reject, with the same status and offset. */
Test(divergence, clock_multiplier_with_a_wrong_wire_type) {
    tb_buf b = {0};
    size_t p = tb_packet_open(&b, 0, TB_NO_TS, 0);
    size_t cs = tb_open(&b, TM_PF_PACKET_CLOCK_SNAPSHOT);
    size_t c = tb_open(&b, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
    tb_uint(&b, TM_PF_CLOCK_ID, CLK_BOOTTIME);
    tb_uint(&b, TM_PF_CLOCK_TIMESTAMP, 1000);
    tb_bytes(&b, TM_PF_CLOCK_UNIT_MULTIPLIER_NS, "\x01", 1);
    tb_close(&b, c);
    tb_close(&b, cs);
    tb_close(&b, p);
    clear_and_intern(&b, 1, 100, abc, 3);
    tb_perf_sample(&b, 1, 1000, 7, 8, 3, TB_SEQ_NEEDS);
    tm_diff_report r;
    int ok = tm_diff_check(b.data, b.len, &r);
    cr_assert(ok, "the readers disagree: %s", r.message);
    cr_assert_neq(r.profile_err.code, TM_OK, "a wire type the field does not allow must be rejected");
    tb_free(&b);
}

/* (c) max_interned_entries counts per sequence (tm_limits documents
 * "interned entries on one sequence"): 3 allows two sequences of two. */
Test(divergence, interned_entries_limit_is_per_sequence) {
    tb_buf b = {0};
    for (uint32_t seq = 1; seq <= 2; seq++) {
        size_t p = tb_packet_open(&b, seq, 100, TB_SEQ_CLEARED);
        size_t i = tb_open(&b, TM_PF_PACKET_INTERNED_DATA);
        tb_interned_string(&b, TM_PF_INTERNED_FUNCTION_NAMES, 1, "f", 1);
        tb_interned_string(&b, TM_PF_INTERNED_FUNCTION_NAMES, 2, "g", 1);
        tb_close(&b, i);
        tb_close(&b, p);
    }
    tm_options o;
    memset(&o, 0, sizeof o);
    o.limits.max_interned_entries = 3;
    tm_diff_report r;
    int ok = tm_diff_check_with(b.data, b.len, &o, &r);
    cr_assert(ok, "the readers disagree: %s", r.message);
    cr_assert_eq(r.profile_err.code, TM_OK, "%s", r.profile_err.message);
    tb_free(&b);
}

/* (d) An incremental sequence-scoped clock (64) in units of 1000 ns: each
 * timestamp delta of 1000 units is 1 ms, from the snapshot's BOOTTIME. */
Test(divergence, incremental_clock_with_a_unit_multiplier) {
    enum { CLK_SEQ = 64, MULT = 1000, DELTA = 1000, N = 3 };
    const uint64_t boot = 1000000000;
    tb_buf b = {0};
    clear_and_intern(&b, 1, TB_NO_TS, abc, 3);
    size_t p = tb_packet_open(&b, 1, TB_NO_TS, 0);
    size_t cs = tb_open(&b, TM_PF_PACKET_CLOCK_SNAPSHOT);
    clock_entry(&b, CLK_BOOTTIME, boot, 0, 0);
    clock_entry(&b, CLK_SEQ, 0, 1, MULT);
    tb_close(&b, cs);
    tb_close(&b, p);
    for (int k = 0; k < N; k++) {
        p = tb_packet_open(&b, 1, DELTA, TB_SEQ_NEEDS);
        tb_uint(&b, TM_PF_PACKET_TIMESTAMP_CLOCK_ID, CLK_SEQ);
        size_t s = tb_open(&b, TM_PF_PACKET_PERF_SAMPLE);
        tb_uint(&b, TM_PF_PERF_SAMPLE_PID, 7);
        tb_uint(&b, TM_PF_PERF_SAMPLE_TID, 8);
        tb_uint(&b, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 3);
        tb_close(&b, s);
        tb_close(&b, p);
    }
    tm_diff_report r;
    int ok = tm_diff_check(b.data, b.len, &r);
    cr_assert(ok, "the readers disagree: %s", r.message);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(b.data, b.len, NULL, &t, NULL), TM_OK);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(pr->n_samples, N);
    for (int k = 0; k < N; k++)
        cr_assert_eq(pr->samples[k].ts, (int64_t)(boot + (uint64_t)(k + 1) * DELTA * MULT), "sample %d at %lld", k,
                     (long long)pr->samples[k].ts);
    tm_trace_free(t);
    tb_free(&b);
}

/* (e) thread_descriptor and streaming_profile_packet in one packet: both
 * are members of TracePacket's oneof data, so the last on the wire (the
 * samples) wins and the descriptor is ignored: the samples stay on the
 * sequence's earlier thread and time base. */
Test(divergence, two_members_of_the_packet_oneof) {
    tb_buf b = {0};
    streaming_sequence(&b, 1, 20, 21, 1000, abc, 3);
    size_t p = tb_packet_open(&b, 1, TB_NO_TS, TB_SEQ_NEEDS);
    thread_desc(&b, 20, 22, 5000);
    const uint64_t cs[] = {3, 1}, dt[] = {10, 10};
    streaming(&b, cs, dt, 2);
    tb_close(&b, p);
    tm_diff_report r;
    int ok = tm_diff_check(b.data, b.len, &r);
    cr_assert(ok, "the readers disagree: %s", r.message);
    cr_assert_eq(r.profile_samples, 2);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(b.data, b.len, NULL, &t, NULL), TM_OK);
    const tm_profile *pr = tm_trace_profile(t);
    for (size_t k = 0; k < pr->n_samples; k++)
        cr_assert_eq(pr->threads[pr->samples[k].thread].tid, 21, "sample %zu is on tid %lld", k,
                     (long long)pr->threads[pr->samples[k].thread].tid);
    cr_assert_eq(tm_trace_get_stats(t)->oneof_members_ignored, 1, "the ignored descriptor is counted");
    tm_trace_free(t);
    tb_free(&b);
}

/* ---- clocks: one tracker (perfetto/clock.c) for both readers ---- */


/* Both readers agree, and the profile model keeps samples at want[]. */
static void assert_times(const tb_buf *b, const int64_t *want, size_t n) {
    tm_diff_report r;
    int ok = tm_diff_check(b->data, b->len, &r);
    cr_assert(ok, "the readers disagree: %s", r.message);
    cr_assert_eq(r.sql_samples, n, "SQL has %zu samples, want %zu", r.sql_samples, n);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(b->data, b->len, NULL, &t, NULL), TM_OK);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(pr->n_samples, n, "the profile model keeps %zu samples, want %zu", pr->n_samples, n);
    for (size_t k = 0; k < n; k++)
        cr_assert_eq(pr->samples[k].ts, want[k], "sample %zu at %lld, want %lld", k, (long long)pr->samples[k].ts,
                     (long long)want[k]);
    tm_trace_free(t);
}

/* (f) MONOTONIC goes backwards between two snapshots: it is non-monotonic,
 * so no timestamp converts from it (Trace Processor erases its edges); the
 * samples in it are dropped by both readers (found by fuzz_differential:
 * each used to pick a different snapshot). */
Test(divergence, non_monotonic_source_clock) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t at0[] = {10000, 12648}, at1[] = {25000, 5000};
    tb_clock_snapshot(&b, 0, ids, at0, 2);
    tb_clock_snapshot(&b, 0, ids, at1, 2);
    clear_and_intern(&b, 1, TB_NO_TS, abc, 3);
    mono_sample(&b, 500, 3);
    mono_sample(&b, 2000, 3);
    assert_times(&b, NULL, 0);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(b.data, b.len, NULL, &t, NULL), TM_OK);
    cr_assert_eq(tm_trace_get_stats(t)->dropped_missing_clock, 2);
    tm_trace_free(t);
    tb_free(&b);
}

/* (g) A timestamp converts with the snapshots read before it, as Trace
 * Processor converts when it reads the packet: the same MONOTONIC value
 * maps differently before and after the second snapshot. */
Test(divergence, conversion_uses_the_snapshots_read_so_far) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t at0[] = {1000000, 0}, at1[] = {2000000, 2000};
    tb_clock_snapshot(&b, 0, ids, at0, 2);
    clear_and_intern(&b, 1, TB_NO_TS, abc, 3);
    mono_sample(&b, 3000, 3);
    tb_clock_snapshot(&b, 0, ids, at1, 2);
    mono_sample(&b, 3000, 3);
    const int64_t want[] = {1003000, 2001000};
    assert_times(&b, want, 2);
    tb_free(&b);
}

/* (h) The trace clock going backwards rejects the snapshot: the earlier
 * one keeps converting. */
Test(divergence, trace_clock_going_backwards_rejects_the_snapshot) {
    tb_buf b = {0};
    const uint32_t ids[] = {CLK_BOOTTIME, CLK_MONOTONIC};
    const uint64_t at0[] = {5000, 5000}, at1[] = {4000, 9000};
    tb_clock_snapshot(&b, 0, ids, at0, 2);
    tb_clock_snapshot(&b, 0, ids, at1, 2);
    clear_and_intern(&b, 1, TB_NO_TS, abc, 3);
    mono_sample(&b, 9500, 3);
    const int64_t want[] = {9500};
    assert_times(&b, want, 1);
    tb_free(&b);
}

/* (i) A StackSample with both an inline callstack and a callstack_iid, and
 * both task contexts: wherever they are on the wire, the interned callstack
 * wins and the inline task context wins, as Trace Processor reads them
 * (found by fuzz_differential: the profile model took the last one, the
 * SQL model the inline callstack). */
Test(divergence, stack_sample_interned_callstack_and_inline_task_win) {
    tb_buf b = {0};
    stack_sample_interning(&b);
    const char *const frames[] = {"root", "leaf"};
    tb_stack_sample s = {.ts = 1000, .seq = 1, .flags = TB_SEQ_NEEDS, .task = 1, .pid = 40, .tid = 42,
                         .task_iid = 5, .frames = frames, .n_frames = 2, .inline_cs = 1, .cs_iid = 3};
    /* the builder writes the inline task before its iid, the inline callstack before its iid */
    tb_stack_sample_packet(&b, &s);
    assert_agrees(&b, NULL, 1);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(b.data, b.len, NULL, &t, NULL), TM_OK);
    const tm_profile *pr = tm_trace_profile(t);
    cr_assert_eq(pr->n_samples, 1);
    cr_assert_eq(pr->threads[pr->samples[0].thread].tid, 42, "the inline task context's thread");
    cr_assert_eq(pr->stacks[pr->samples[0].stack].len, 3, "the interned callstack 3 (3 frames), not the inline one");
    tm_trace_free(t);
    tb_free(&b);
}

/* A symbol payload the walkers find malformed (fuzz_differential's finds,
 * kept under fuzz/regressions) is rejected by both models at the same byte,
 * inside the payload: the walkers say where they stopped, not byte 0. */
Test(divergence, malformed_symbol_payloads_name_their_byte) {
    static const char *const names[] = {"symbols_with_a_malformed_nested_message", "symbols_malformed_without_frames"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/fuzz/regressions/differential/%s", TM_SOURCE_DIR, names[i]);
        size_t len;
        char *data = tu_read_file(path, &len);
        cr_assert_not_null(data, "%s", path);
        tm_trace *t = NULL;
        tm_error perr, serr;
        cr_assert_eq(tm_trace_parse(data, len, NULL, &t, &perr), TM_ERR_MALFORMED, "%s: %s", names[i], perr.message);
        tm_db *db = NULL;
        cr_assert_eq(tm_db_new(data, len, NULL, &db, &serr), TM_ERR_MALFORMED, "%s: %s", names[i], serr.message);
        cr_assert_eq(perr.offset, serr.offset, "%s: byte %llu vs %llu", names[i], (unsigned long long)perr.offset,
                     (unsigned long long)serr.offset);
        cr_assert(perr.offset > 0 && perr.offset < len, "%s: byte %llu of %zu (%s)", names[i],
                  (unsigned long long)perr.offset, len, perr.message);
        cr_assert_str_eq(perr.message, serr.message);
        free(data);
    }
}

/* The harness reads every input as Perfetto in both readers; tm_db_new took
 * input that looks like JSON or folded stacks for those formats whatever
 * tm_options said, and refused "{\x0e" as Sample v2 where tm_trace_parse
 * rejected it as Perfetto (found by fuzz_differential). */
Test(divergence, a_named_perfetto_format_is_read_as_perfetto_by_both) {
    static const char *const inputs[] = {"{\x0e", "main;work 3\n", "{\"version\":\"2\"}"};
    for (size_t i = 0; i < sizeof inputs / sizeof *inputs; i++) {
        tm_diff_report r;
        cr_expect(tm_diff_check(inputs[i], strlen(inputs[i]), &r), "input %zu: %s", i, r.message);
        cr_expect_eq(r.profile_err.code, TM_ERR_MALFORMED, "input %zu", i);
    }
}

/* A StackSample task context with pid 100 and tid 0: the SQL model takes
 * tid 0 for no thread (the process's main thread), the profile model took
 * thread 0 of process 100 (found by fuzz_differential). */
Test(divergence, a_task_context_tid_of_zero_is_no_thread) {
    char path[512];
    snprintf(path, sizeof path, "%s/fuzz/regressions/differential/stack_sample_task_context_tid_zero", TM_SOURCE_DIR);
    size_t len;
    char *data = tu_read_file(path, &len);
    cr_assert_not_null(data, "%s", path);
    tm_diff_report r;
    cr_expect(tm_diff_check(data, len, &r), "%s", r.message);
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(data, len, NULL, &t, &err), TM_OK, "%s", err.message);
    int main_thread = 0;
    for (size_t i = 0; i < tm_trace_thread_count(t); i++) {
        tm_thread_info ti;
        cr_assert_eq(tm_trace_thread(t, i, &ti), TM_OK);
        main_thread |= ti.tid == 100 && ti.samples > 0;
    }
    cr_expect(main_thread, "no sample on process 100's main thread");
    tm_trace_free(t);
    free(data);
}
