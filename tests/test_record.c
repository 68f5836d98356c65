/*
 * test_record.c — the recorder (libtracemill_record) end to end: the test
 * program record_target is recorded through the tm_recorder_* API (its
 * RECORD_TARGET_API build) and through LD_PRELOAD on the plain binary, and
 * every trace is read back with tm_trace_parse: thread names, stacks rooted
 * in the program, CPU shares of hot/warm/cold, exact loss accounting under
 * buffer pressure in both fill policies, self-contained continuous chunks,
 * and no crash or hang across fork, thread churn and exit(); and what
 * `tracemill record` does with its output file (kept when nothing was
 * recorded, /dev/null written in place, the old file's mode kept).
 *
 * Paths of the binaries come from the build: TM_RECORD_TARGET (plain),
 * TM_RECORD_TARGET_API, TM_RECORD_PRELOAD (libtracemill_record.so), TM_CLI.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

#define RUN_TIMEOUT_S 30

/* CPU time each worker thread burns: ~2 x 6 x 125 samples at 166 Hz. A
 * share p measured from n samples varies by sqrt(p(1-p)/n): 2.2 points for
 * the hot 60 % at n = 500, which failed the 5-point check about once in 20
 * runs; at n = 1500 it is 1.3 points, and 5 points are 4 of them. */
#define WORK_CPU_SECONDS "6"

static void setup(void) {
    cr_assert_not_null(tu_test_dir_make("tm_record_test"));
}

static void teardown(void) { cr_assert_eq(tu_test_dir_remove(), 0); }

TestSuite(record, .init = setup, .fini = teardown, .timeout = 60);

static char *path_in_dir(const char *name) { return tu_test_path(name); }

/* Runs argv with extra environment entries (NULL-terminated, may be NULL),
 * stdout into OUT_FILE; kills it after RUN_TIMEOUT_S (a hang fails the
 * test). Returns the wait status. */
static int run(char *const argv[], char *const env[], const char *out_file) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setpgid(0, 0); /* its own group, so that a hang kills what it forked too */
        tu_asan_recorded_child_env();
        for (size_t i = 0; env && env[i]; i++) putenv(env[i]);
        if (out_file && !freopen(out_file, "w", stdout)) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (tu_wait_child(pid, RUN_TIMEOUT_S, &status) != 0)
        cr_assert_fail("%s hung (killed after %d s)", argv[0], RUN_TIMEOUT_S);
    return status;
}

static void assert_exited_ok(int status, const char *what) {
    cr_assert(WIFEXITED(status), "%s did not exit normally (signal %d)", what,
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    cr_assert_eq(WEXITSTATUS(status), 0, "%s exited with %d", what, WEXITSTATUS(status));
}

typedef struct loaded {
    char *bytes;
    size_t len;
    tm_trace *trace;
    const tm_trace_stats *st;
} loaded;

/* The trace at path, symbolized as `tracemill record` symbolizes what it
 * writes (the recorder names only frames no file can name later), read
 * with frames named by function alone. */
static loaded load(const char *path) {
    loaded l = {0};
    size_t raw_len;
    char *raw = tu_read_file(path, &raw_len);
    cr_assert_not_null(raw, "no trace at %s", path);
    tu_membuf sym = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &sym};
    tm_error err;
    cr_assert_eq(tm_symbolize(raw, raw_len, NULL, NULL, &sink, NULL, &err), TM_OK, "%s: %s", path, err.message);
    free(raw);
    l.bytes = sym.data;
    l.len = sym.len;
    tm_options opts = {.no_source_lines = 1};
    tm_status st = tm_trace_parse(l.bytes, l.len, &opts, &l.trace, &err);
    cr_assert_eq(st, TM_OK, "%s does not decode: %s", path, err.message);
    l.st = tm_trace_get_stats(l.trace);
    return l;
}

static void unload(loaded *l) {
    tm_trace_free(l->trace);
    free(l->bytes);
}

static int has_thread(const tm_trace *t, const char *name) {
    for (size_t i = 0; i < tm_trace_thread_count(t); i++) {
        tm_thread_info ti;
        cr_assert_eq(tm_trace_thread(t, i, &ti), TM_OK);
        if (ti.name && ti.name_len == strlen(name) && memcmp(ti.name, name, ti.name_len) == 0) return 1;
    }
    return 0;
}

/* Whether frame (a whole ';'-separated element) is in the folded stack. */
static int stack_has(const char *stack, size_t len, const char *frame) {
    size_t n = strlen(frame);
    for (size_t i = 0; i + n <= len; i++)
        if ((i == 0 || stack[i - 1] == ';') && memcmp(stack + i, frame, n) == 0 &&
            (i + n == len || stack[i + n] == ';'))
            return 1;
    return 0;
}

static int stack_starts(const char *stack, size_t len, const char *prefix) {
    size_t n = strlen(prefix);
    return len >= n && memcmp(stack, prefix, n) == 0;
}

/* Whether the unwind reached the bottom of the stack: _start for the main
 * thread; clone and start_thread for the others, where start_thread runs
 * worker_main and then the thread's teardown (the destructors of its
 * thread-specific data, where a sample may land too). */
static int stack_rooted(const char *stack, size_t len) {
    return stack_starts(stack, len, "_start;") || stack_starts(stack, len, "clone3;start_thread;") ||
           stack_starts(stack, len, "clone;start_thread;");
}

typedef struct shares {
    uint64_t total, rooted, hot, warm, cold;
} shares;

/* Sample counts from the folded stacks: how many stacks are rooted (see
 * stack_rooted), and how many hold each phase. */
static shares folded_shares(const tm_trace *t) {
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    cr_assert_eq(tm_write_folded(t, NULL, &sink, &err), TM_OK, "%s", err.message);
    shares s = {0};
    for (char *line = out.data; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        char *space = strrchr(line, ' ');
        cr_assert_not_null(space, "not a folded line: %s", line);
        size_t len = (size_t)(space - line);
        uint64_t n = strtoull(space + 1, NULL, 10);
        s.total += n;
        if (stack_rooted(line, len)) s.rooted += n;
        else cr_log_warn("stack not rooted: %.*s", (int)len, line);
        if (stack_has(line, len, "hot")) s.hot += n;
        if (stack_has(line, len, "warm")) s.warm += n;
        if (stack_has(line, len, "cold")) s.cold += n;
        line = nl ? nl + 1 : NULL;
    }
    tu_membuf_free(&out);
    return s;
}

/* The checks of a recording of `--mode work`: no loss, both names, every
 * stack rooted, each phase's sample share within 5 points of the CPU share
 * the program measured (cpu-share line in stdout_path), itself near 60/30/10. */
static void check_work_trace(const char *path, const char *stdout_path) {
    char *text = tu_read_file(stdout_path, NULL);
    cr_assert_not_null(text);
    double cpu_hot, cpu_warm, cpu_cold;
    const char *line = strstr(text, "cpu-share ");
    cr_assert(line && sscanf(line, "cpu-share hot=%lf warm=%lf cold=%lf", &cpu_hot, &cpu_warm, &cpu_cold) == 3,
              "no cpu-share line: %s", text);
    free(text);
    cr_assert(fabs(cpu_hot - 60) < 3 && fabs(cpu_warm - 30) < 3 && fabs(cpu_cold - 10) < 3,
              "the workload itself is off: %.1f/%.1f/%.1f", cpu_hot, cpu_warm, cpu_cold);
    loaded l = load(path);
    cr_assert_gt(l.st->samples_kept, 150, "too few samples (%llu) to measure shares",
                 (unsigned long long)l.st->samples_kept);
    cr_assert_eq(l.st->data_losses, 0);
    cr_assert_eq(l.st->dropped_unresolved + l.st->dropped_stale_interning + l.st->dropped_never_cleared +
                     l.st->dropped_missing_clock + l.st->dropped_bad_timestamp,
                 0);
    cr_assert_eq(l.st->samples_kept, l.st->perf_samples);
    cr_assert(has_thread(l.trace, "worker-a"));
    cr_assert(has_thread(l.trace, "worker-b"));
    shares s = folded_shares(l.trace);
    cr_assert_eq(s.total, l.st->samples_kept);
    cr_assert_eq(s.rooted, s.total, "%llu of %llu stacks do not reach _start or clone;start_thread",
                 (unsigned long long)(s.total - s.rooted), (unsigned long long)s.total);
    uint64_t phases = s.hot + s.warm + s.cold;
    cr_assert_gt(phases, s.total * 9 / 10);
    double hot = 100.0 * (double)s.hot / (double)phases, warm = 100.0 * (double)s.warm / (double)phases,
           cold = 100.0 * (double)s.cold / (double)phases;
    cr_log_info("%s: %llu samples: hot %.1f%% warm %.1f%% cold %.1f%% (CPU: %.1f/%.1f/%.1f)", path,
                (unsigned long long)s.total, hot, warm, cold, cpu_hot, cpu_warm, cpu_cold);
    cr_expect(fabs(hot - cpu_hot) < 5, "hot has %.1f%% of the samples and %.1f%% of the CPU", hot, cpu_hot);
    cr_expect(fabs(warm - cpu_warm) < 5, "warm has %.1f%% of the samples and %.1f%% of the CPU", warm, cpu_warm);
    cr_expect(fabs(cold - cpu_cold) < 5, "cold has %.1f%% of the samples and %.1f%% of the CPU", cold, cpu_cold);
    unload(&l);
}

Test(record, api_work_trace) {
    char *out = path_in_dir("api.pftrace"), *stdout_path = path_in_dir("api.txt");
    char *argv[] = {TM_RECORD_TARGET_API, "--cpu-seconds", WORK_CPU_SECONDS, "--hz", "166", "-o", out, NULL};
    assert_exited_ok(run(argv, NULL, stdout_path), "record_target_api");
    check_work_trace(out, stdout_path);
    free(stdout_path);
    free(out);
}

Test(record, preload_work_trace) {
    char *out = path_in_dir("preload.pftrace"), *stdout_path = path_in_dir("preload.txt");
    char *env_out = NULL;
    cr_assert_gt(asprintf(&env_out, "TRACEMILL_RECORD_OUT=%s", out), 0);
    char *env[] = {"LD_PRELOAD=" TM_RECORD_PRELOAD, env_out, "TRACEMILL_RECORD_HZ=166", NULL};
    char *argv[] = {TM_RECORD_TARGET, "--cpu-seconds", WORK_CPU_SECONDS, NULL};
    assert_exited_ok(run(argv, env, stdout_path), "record_target under LD_PRELOAD");
    check_work_trace(out, stdout_path);
    free(stdout_path);
    free(env_out);
    free(out);
}

/* Parses "recorder-stats k=v ..." printed by the API build. */
static uint64_t stat_of(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, " %s=", key);
    const char *p = strstr(text, pat);
    cr_assert_not_null(p, "no %s in: %s", key, text);
    return strtoull(p + strlen(pat), NULL, 10);
}

/* A TraceStats value as tracemill's SQL tables hold it (0 when absent). */
static uint64_t trace_stat(const loaded *l, const char *name) {
    tm_db *db;
    tm_error err;
    cr_assert_eq(tm_db_new(l->bytes, l->len, NULL, &db, &err), TM_OK, "%s", err.message);
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db), "select coalesce(sum(value), 0) from stats where name = ?",
                                    -1, &q, NULL),
                 SQLITE_OK);
    sqlite3_bind_text(q, 1, name, -1, SQLITE_STATIC);
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    uint64_t v = (uint64_t)sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    tm_db_free(db);
    return v;
}

static void check_pressure(const char *fill) {
    char *out = path_in_dir("pressure.pftrace"), *stats = path_in_dir("stats.txt");
    int ring = strcmp(fill, "ring") == 0;
    /* Periodic file writes make room again, so that (in both policies)
     * packets after a loss reach the file and carry its mark; a 1 KB buffer
     * loses packets in every 500 ms window (each sample thread's first
     * window only makes its sequence known to the reader). */
    char *argv[] = {TM_RECORD_TARGET_API, "--cpu-seconds", "1.5", "--hz", "166", "--buffer-kb", "1", "--fill",
                    (char *)fill, "--file-write-period-ms", "500", "-o", out, NULL};
    assert_exited_ok(run(argv, NULL, stats), "record_target_api");
    char *text = tu_read_file(stats, NULL);
    cr_assert_not_null(text);
    uint64_t lost_packets = stat_of(text, ring ? "packets_overwritten" : "packets_discarded");
    uint64_t lost_bytes = stat_of(text, ring ? "bytes_overwritten" : "bytes_discarded");
    uint64_t samples = stat_of(text, "samples"), sample_packets_lost = stat_of(text, "sample_packets_lost");
    cr_assert_gt(lost_packets, 0, "a tiny buffer must lose packets");
    cr_assert_eq(stat_of(text, ring ? "packets_discarded" : "packets_overwritten"), 0);

    loaded l = load(out);
    /* The trace says exactly what was lost, in its TraceStats as both the
     * decoder and the SQL tables read them... */
    cr_assert_eq(l.st->trace_stats_packets, 1);
    cr_assert_eq(ring ? l.st->buffer_chunks_overwritten : l.st->buffer_chunks_discarded, lost_packets);
    cr_assert_eq(ring ? l.st->buffer_chunks_discarded : l.st->buffer_chunks_overwritten, 0);
    cr_assert_eq(trace_stat(&l, ring ? "traced_buf_chunks_overwritten" : "traced_buf_chunks_discarded"), lost_packets);
    if (ring) {
        cr_assert_eq(l.st->buffer_bytes_overwritten, lost_bytes);
        cr_assert_eq(trace_stat(&l, "traced_buf_bytes_overwritten"), lost_bytes);
    }
    /* ...and what survived adds up: every sample taken is in the trace
     * (read, or skipped by the reader behind a loss mark) or in the loss
     * count (a sample is one PerfSample packet, its interned data inline). */
    cr_assert_eq(l.st->perf_samples + l.st->packets_skipped_incremental + sample_packets_lost, samples,
                 "%llu read + %llu skipped + %llu lost != %llu taken", (unsigned long long)l.st->perf_samples,
                 (unsigned long long)l.st->packets_skipped_incremental, (unsigned long long)sample_packets_lost,
                 (unsigned long long)samples);
    /* The affected sequences are marked, so nothing resolves against lost
     * interning: samples behind a gap are skipped and counted, never wrong. */
    cr_assert_gt(l.st->data_losses, 0, "no loss mark in the trace");
    cr_assert_gt(l.st->sequences_with_data_loss, 0);
    cr_assert_eq(l.st->dropped_unresolved, 0);
    cr_assert_leq(l.st->samples_kept, l.st->perf_samples);
    cr_assert_gt(l.st->samples_kept, 0);
    /* The descriptors written at the start may be lost: the trace ends with
     * them again, so the threads keep their names. */
    cr_assert(has_thread(l.trace, "worker-a") && has_thread(l.trace, "worker-b"), "thread names lost with the packets");
    /* tracemill's data-quality report counts the loss too. */
    tu_membuf report = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &report};
    tm_error err;
    cr_assert_eq(tm_write_report(l.trace, &sink, &err), TM_OK);
    char expect[96];
    snprintf(expect, sizeof expect, "\"%s\":%llu", ring ? "chunks_overwritten" : "chunks_discarded",
             (unsigned long long)lost_packets);
    cr_assert_not_null(strstr(report.data, expect), "report lacks %s: %s", expect, report.data);
    cr_assert_not_null(strstr(report.data, "\"data_losses\":"), "report: %s", report.data);
    cr_assert_null(strstr(report.data, "\"data_losses\":0"), "report: %s", report.data);
    tu_membuf_free(&report);
    unload(&l);
    free(text);
    free(stats);
    free(out);
}

Test(record, ring_buffer_pressure_is_counted) {
    check_pressure("ring");
}

Test(record, discard_pressure_is_counted) {
    check_pressure("discard");
}

Test(record, chunks_are_self_contained) {
    char *out = path_in_dir("cont.pftrace");
    char *argv[] = {TM_RECORD_TARGET_API, "--seconds", "3.5", "--chunk-seconds", "1", "--duration", "3", "-o", out, NULL};
    assert_exited_ok(run(argv, NULL, NULL), "record_target_api");
    for (int i = 0; i < 4; i++) {
        char name[32];
        snprintf(name, sizeof name, "cont.%d.pftrace", i);
        char *chunk = path_in_dir(name);
        if (i == 3) {
            cr_assert_neq(access(chunk, F_OK), 0, "a 4th chunk exists for 3 s of 1 s chunks");
            free(chunk);
            break;
        }
        loaded l = load(chunk);
        cr_assert_gt(l.st->samples_kept, 20, "chunk %d has %llu samples", i, (unsigned long long)l.st->samples_kept);
        cr_assert_eq(l.st->samples_kept, l.st->perf_samples, "chunk %d drops samples", i);
        cr_assert_eq(l.st->clock_snapshots > 0, 1);
        cr_assert(has_thread(l.trace, "worker-a") && has_thread(l.trace, "worker-b"), "chunk %d lacks names", i);
        int64_t span = l.st->last_sample_ns - l.st->first_sample_ns;
        cr_assert_lt(span, 1100000000, "chunk %d spans %lld ns", i, (long long)span);
        tu_membuf v2 = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &v2};
        tm_error err;
        cr_assert_eq(tm_write_sample_v2(l.trace, NULL, &sink, &err), TM_OK, "chunk %d: %s", i, err.message);
        cr_assert_not_null(strstr(v2.data, "\"samples\""));
        tu_membuf_free(&v2);
        unload(&l);
        free(chunk);
    }
    free(out);
}

/* Runs record_target --mode MODE under LD_PRELOAD and the API build; both
 * must exit cleanly and leave a decodable trace with samples. */
static void check_mode(const char *mode, const char *expect_line) {
    for (int api = 0; api < 2; api++) {
        char *out = path_in_dir(api ? "mode_api.pftrace" : "mode_preload.pftrace");
        char *stdout_path = path_in_dir("mode_stdout.txt");
        char *env_out = NULL;
        cr_assert_gt(asprintf(&env_out, "TRACEMILL_RECORD_OUT=%s", out), 0);
        char *env[] = {"LD_PRELOAD=" TM_RECORD_PRELOAD, env_out, "TRACEMILL_RECORD_HZ=250", NULL};
        char *argv_api[] = {TM_RECORD_TARGET_API, "--mode", (char *)mode, "--seconds", "1", "--hz", "250", "-o", out, NULL};
        char *argv_plain[] = {TM_RECORD_TARGET, "--mode", (char *)mode, "--seconds", "1", NULL};
        int status = api ? run(argv_api, NULL, stdout_path) : run(argv_plain, env, stdout_path);
        assert_exited_ok(status, mode);
        if (expect_line) {
            char *text = tu_read_file(stdout_path, NULL);
            cr_assert_not_null(text);
            cr_assert_not_null(strstr(text, expect_line), "%s: stdout lacks \"%s\": %s", mode, expect_line, text);
            free(text);
        }
        loaded l = load(out);
        cr_assert_gt(l.st->samples_kept, 0, "%s (%s): no samples", mode, api ? "api" : "preload");
        cr_assert_eq(l.st->dropped_unresolved, 0);
        unload(&l);
        free(env_out);
        free(stdout_path);
        free(out);
    }
}

Test(record, fork_while_sampling) {
    check_mode("fork", "fork-failures 0");
}

Test(record, thread_churn) {
    check_mode("churn", "threads-created");
}

Test(record, exit_while_sampling) {
    check_mode("exit", NULL);
}

/* ---- `tracemill record` and its output file ---- */

/* Runs `tracemill record -o OUT -- ARGS` (shell words) with stderr into the
 * returned text; *code gets the exit status. The signal backend's preload
 * library is the build's (the perf backend takes none). */
static char *record_cli_with(const char *out, const char *opts, const char *args, int *code) {
    char *err = path_in_dir("stderr"), *cmd = NULL;
    int perf = strstr(opts, "--backend perf") != NULL;
    cr_assert_gt(asprintf(&cmd, "%s record %s%s -o %s %s -- %s 2>%s >/dev/null", TM_CLI, perf ? "" : "--preload ",
                          perf ? "" : TM_RECORD_PRELOAD, out, opts, args, err),
                 0);
    tu_asan_recorded_child_env(); /* inherited by the shell and the program */
    int st = system(cmd);
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *text = tu_read_file(err, NULL);
    cr_assert_not_null(text);
    free(cmd);
    free(err);
    return text;
}

static char *record_cli(const char *out, const char *args, int *code) { return record_cli_with(out, "", args, code); }

/* A statically linked program (Debian's ldconfig) never loads the preload
 * library: record says so and names the perf backend, exits 125 (its own
 * failure), and leaves OUT as it was, with --heap too. */
Test(record, a_static_program_is_said_never_to_load_the_recorder) {
    if (system("ldd /sbin/ldconfig 2>&1 | grep -q -e 'statically linked' -e 'not a dynamic executable'") != 0)
        cr_skip_test("/sbin/ldconfig is not a static program here");
    char *out = path_in_dir("precious.pftrace");
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    fputs("precious\n", f);
    fclose(f);
    static const char *const opts[] = {"", "--heap"};
    for (size_t i = 0; i < 2; i++) {
        int code;
        char *err = record_cli_with(out, opts[i], "/sbin/ldconfig -p", &code);
        cr_expect_eq(code, 125, "%s: exit %d: %s", opts[i], code, err);
        cr_expect(strstr(err, "never loaded the recorder") && strstr(err, "--backend perf"), "%s: %s", opts[i], err);
        free(err);
        char *kept = tu_read_file(out, NULL);
        cr_expect(kept && strcmp(kept, "precious\n") == 0, "%s: OUT was replaced", opts[i]);
        free(kept);
    }
    free(out);
}

/* A run that records nothing (the program cannot start, or ends before its
 * first sample) leaves an existing OUT as it was and says so. */
Test(record, a_run_without_samples_keeps_the_old_trace) {
    char *out = path_in_dir("precious.pftrace");
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    fputs("precious\n", f);
    fclose(f);
    int code;
    char *err = record_cli(out, "/nonexistent/program", &code);
    cr_expect_eq(code, 127, "exit %d (a program that cannot run gives 127, as env does): %s", code, err);
    cr_expect(!strstr(err, "symbolized"), "a symbolization of nothing is reported: %s", err);
    free(err);
    char why[128];
    if (tu_perf_available(why, sizeof why)) {
        err = record_cli_with(out, "--backend perf", "/nonexistent/program", &code);
        cr_expect_eq(code, 127, "perf backend: exit %d: %s", code, err);
        cr_expect(!strstr(err, "symbolized"), "perf backend: a symbolization of nothing is reported: %s", err);
        free(err);
    }
    /* Found but not executable: 126, as a shell says it (127 is "not found"). */
    char *plain_file = path_in_dir("not-a-program");
    f = fopen(plain_file, "w");
    cr_assert_not_null(f);
    fputs("data\n", f);
    fclose(f);
    err = record_cli(out, plain_file, &code);
    cr_expect_eq(code, 126, "a file without execute permission: exit %d: %s", code, err);
    cr_expect(strstr(err, "Permission denied") != NULL, "the reason is not said: %s", err);
    free(err);
    if (tu_perf_available(why, sizeof why)) {
        err = record_cli_with(out, "--backend perf", plain_file, &code);
        cr_expect_eq(code, 126, "perf backend, a file without execute permission: exit %d: %s", code, err);
        free(err);
    }
    free(plain_file);
    char *kept = tu_read_file(out, NULL);
    cr_expect(kept && strcmp(kept, "precious\n") == 0, "OUT was replaced: %s", kept ? kept : "(gone)");
    free(kept);

    err = record_cli(out, TM_RECORD_TARGET " --seconds 0", &code);
    cr_expect_neq(code, 0, "a run without samples exits 0: %s", err);
    cr_expect(strstr(err, "no samples were recorded"), "%s", err);
    cr_expect(!strstr(err, "flame graph"), "a flame graph of nothing is suggested: %s", err);
    free(err);
    kept = tu_read_file(out, NULL);
    cr_expect(kept && strcmp(kept, "precious\n") == 0, "OUT was replaced: %s", kept ? kept : "(gone)");
    free(kept);
    free(out);
}

/* An OUT that cannot be written (a read-only file, a directory) is
 * refused before the program runs, with exit 3 as by every command that
 * writes a file, whichever backend records; the file stays as it was. */
Test(record, an_unwritable_out_is_refused_with_3_by_every_backend) {
    char *ro = path_in_dir("ro.pftrace"), *ran = path_in_dir("ran"), *dir_out = path_in_dir("adir"), *args = NULL;
    FILE *f = fopen(ro, "w");
    cr_assert_not_null(f);
    fputs("precious\n", f);
    fclose(f);
    cr_assert_eq(chmod(ro, 0444), 0);
    cr_assert_eq(mkdir(dir_out, 0755), 0);
    cr_assert_gt(asprintf(&args, "touch %s", ran), 0);
    char why[128];
    const char *opts[] = {"--backend signal", "--heap", tu_perf_available(why, sizeof why) ? "--backend perf" : NULL};
    const char *outs[] = {ro, dir_out}, *reasons[] = {"read-only", "Is a directory"};
    for (size_t i = 0; i < sizeof opts / sizeof *opts && opts[i]; i++)
        for (size_t k = 0; k < 2; k++) {
            int code;
            char *err = record_cli_with(outs[k], opts[i], args, &code);
            cr_expect_eq(code, 3, "%s onto %s: exit %d: %s", opts[i], outs[k], code, err);
            cr_expect(strstr(err, reasons[k]), "%s onto %s: %s", opts[i], outs[k], err);
            cr_expect(access(ran, F_OK) != 0, "%s onto %s: the program ran", opts[i], outs[k]);
            free(err);
        }
    char *kept = tu_read_file(ro, NULL);
    cr_expect(kept && strcmp(kept, "precious\n") == 0, "the read-only OUT was changed");
    free(kept), free(args), free(ro), free(ran), free(dir_out);
}

/* -o /dev/null records and reports the trace (it used to fail reading the
 * trace back from the device) and leaves the device a device. */
Test(record, dev_null_is_an_output) {
    int code;
    char *err = record_cli("/dev/null", TM_RECORD_TARGET " --seconds 0.5", &code);
    cr_expect_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "/dev/null:") && strstr(err, "samples from"), "%s", err);
    cr_expect(!strstr(err, "at byte") && !strstr(err, "flame graph"), "%s", err);
    free(err);
    struct stat st;
    cr_expect(stat("/dev/null", &st) == 0 && S_ISCHR(st.st_mode), "/dev/null is no longer a device");
}

/* The trace replaces OUT with OUT's mode, as convert's outputs do. */
Test(record, the_trace_keeps_the_mode_of_the_file_it_replaces) {
    char *out = path_in_dir("t.pftrace");
    FILE *f = fopen(out, "w");
    cr_assert_not_null(f);
    fclose(f);
    cr_assert_eq(chmod(out, 0600), 0);
    int code;
    char *err = record_cli(out, TM_RECORD_TARGET " --seconds 0.5", &code);
    cr_expect_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "flame graph"), "%s", err);
    free(err);
    struct stat st;
    cr_assert_eq(stat(out, &st), 0);
    cr_expect_eq(st.st_mode & 07777, 0600, "mode %o", st.st_mode & 07777);
    cr_expect_gt(st.st_size, 0);
    free(out);
}
