/*
 * test_record_end.c — the signal backend's weights and endings, end to end:
 * record_end_target burns a known CPU time and then ends by exit, _exit,
 * a crash, abort or SIGTERM, recorded through LD_PRELOAD (its CPU time
 * measured with wait4) and through `tracemill record --backend signal`
 * (its exit status). Every trace must decode, hold the samples of burn_cpu,
 * and say in pprof's cpu/nanoseconds the CPU time the program used; the
 * program's own SIGSEGV handler must still run; `sh -c` (dash ends with
 * _exit) must leave a trace; --clock wall is refused before the program
 * runs.
 *
 * Paths come from the build: TM_RECORD_END_TARGET, TM_RECORD_PRELOAD, TM_CLI.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h> /* SYS_close_range */
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tracemill.h"
#include "tutil.h"

#define RUN_TIMEOUT_S 30
/* pprof's CPU total against the CPU time wait4 measured for the whole
 * process, which also holds its start-up, the recorder's collector thread
 * and the CPU time after each thread's last sample. */
#if defined(__SANITIZE_ADDRESS__)
#define CPU_TOLERANCE 0.15 /* a sanitized recorder's own start-up and collector cost more */
#else
#define CPU_TOLERANCE 0.05
#endif
/* ... and against the CPU time of the one thread sampled. */
#define THREAD_CPU_TOLERANCE 0.02

static void setup(void) {
    cr_assert_not_null(tu_test_dir_make("tm_record_end"));
}

static void teardown(void) { cr_assert_eq(tu_test_dir_remove(), 0); }

TestSuite(record_end, .init = setup, .fini = teardown, .timeout = 90);

static char *path_in_dir(const char *name) { return tu_test_path(name); }

/* The recorded program's environment under ASan: its own SIGSEGV and abort
 * handling off, so that the recorder's is what a crash meets. */
static void child_env(void) {
    tu_asan_recorded_child_env();
    const char *asan = getenv("ASAN_OPTIONS");
    if (asan) {
        char *more = NULL;
        if (asprintf(&more, "%s:handle_segv=0:handle_abort=0", asan) > 0) setenv("ASAN_OPTIONS", more, 1);
        free(more);
    }
}

/* Runs argv, stdout and stderr into files of the test directory; with
 * preload_out, through LD_PRELOAD as `tracemill record` sets it up. Returns
 * the wait status, the CPU time the process used in *cpu_s (may be NULL). */
static int run(char *const argv[], const char *preload_out, double *cpu_s) {
    char *out = path_in_dir("stdout"), *err = path_in_dir("stderr");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setpgid(0, 0);
        child_env();
        signal(SIGPIPE, SIG_DFL); /* as a shell starts a program */
        if (preload_out) {
            setenv("LD_PRELOAD", TM_RECORD_PRELOAD, 1);
            setenv("TRACEMILL_RECORD_OUT", preload_out, 1);
            setenv("TRACEMILL_RECORD_FILE_WRITE_PERIOD_MS", "1000", 1);
        }
        if (!freopen(out, "w", stdout) || !freopen(err, "w", stderr)) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    struct rusage ru;
    for (int waited_ms = 0;; waited_ms += 20) {
        pid_t got = wait4(pid, &status, WNOHANG, &ru);
        if (got == pid) break;
        if (got < 0 || waited_ms > RUN_TIMEOUT_S * 1000) {
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            cr_assert_fail("%s hung (killed after %d s)", argv[0], RUN_TIMEOUT_S);
        }
        struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL);
    }
    if (cpu_s)
        *cpu_s = (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                 (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
    free(out), free(err);
    return status;
}

static char *read_in_dir(const char *name) {
    char *p = path_in_dir(name), *text = tu_read_file(p, NULL);
    free(p);
    return text ? text : strdup("");
}

/* ---- what a trace holds ---- */

typedef struct summary {
    uint64_t samples, counted, burn_samples;
    double pprof_cpu_s, counted_cpu_s;
} summary;

/* Decodes the trace at path (it must decode), and sums what it says. */
static summary summarize(const char *path) {
    summary out = {0};
    size_t len = 0;
    char *bytes = tu_read_file(path, &len);
    cr_assert_not_null(bytes, "no trace at %s", path);
    cr_assert_gt(len, 0, "%s is empty", path);
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(bytes, len, NULL, &t, &err), TM_OK, "%s does not decode: %s", path, err.message);
    cr_assert_eq(tm_trace_get_stats(t)->truncated, 0, "%s is cut off at byte %llu", path,
                 (unsigned long long)tm_trace_get_stats(t)->truncated_at);
    tm_trace_free(t);
    /* symbolized, as `tracemill record` leaves it, and named by function */
    tu_membuf sym = {0};
    tm_sink to_sym = {.write = tu_membuf_write, .ctx = &sym};
    cr_assert_eq(tm_symbolize(bytes, len, NULL, NULL, &to_sym, NULL, &err), TM_OK, "%s: %s", path, err.message);
    free(bytes);
    bytes = sym.data;
    len = sym.len;
    tm_options by_function = {.no_source_lines = 1};
    cr_assert_eq(tm_trace_parse(bytes, len, &by_function, &t, &err), TM_OK, "%s does not decode: %s", path,
                 err.message);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    out.samples = st->samples_kept;
    out.counted = st->perf_samples_counted;
    out.counted_cpu_s = (double)st->perf_counted_cpu_ns * 1e-9;
    tu_membuf folded = {0}, pprof = {0};
    tm_sink fs = {.write = tu_membuf_write, .ctx = &folded}, ps = {.write = tu_membuf_write, .ctx = &pprof};
    cr_assert_eq(tm_write_folded(t, NULL, &fs, &err), TM_OK, "%s", err.message);
    tm_pprof_options po = {.uncompressed = 1};
    cr_assert_eq(tm_write_pprof(t, &po, &ps, &err), TM_OK, "%s", err.message);
    uint64_t cpu_ns = 0;
    cr_assert_eq(tu_pprof_value_sum(pprof.data, pprof.len, 1, &cpu_ns), 0, "the pprof profile is malformed");
    out.pprof_cpu_s = (double)cpu_ns * 1e-9;
    /* folded lines "a;b;c N": the samples whose stack holds burn_cpu */
    char *text = strndup(folded.data ? folded.data : "", folded.len);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *space = strrchr(line, ' ');
        if (space && strstr(line, "burn_cpu") && strstr(line, "burn_cpu") < space)
            out.burn_samples += strtoull(space + 1, NULL, 10);
    }
    free(text);
    tu_membuf_free(&folded);
    tu_membuf_free(&pprof);
    tm_trace_free(t);
    free(bytes);
    return out;
}

/* Records `record_end_target HOW CPU_S` through LD_PRELOAD; checks the
 * trace against the CPU time the process used, and returns its status. */
static int record_ending(const char *how, const char *cpu_s) {
    char *trace = path_in_dir("end.pftrace");
    char *argv[] = {TM_RECORD_END_TARGET, (char *)how, (char *)cpu_s, NULL};
    double used = 0;
    int status = run(argv, trace, &used);
    summary s = summarize(trace);
    char *err = read_in_dir("stderr");
    double burn = atof(cpu_s);
    cr_log_info("%s %s s: measured %.4f s CPU (wait4), pprof cpu %.4f s (%+.2f %%), counted %.4f s, %llu samples "
                "(%llu in burn_cpu, %llu counted)",
                how, cpu_s, used, s.pprof_cpu_s, 100.0 * (s.pprof_cpu_s - used) / used, s.counted_cpu_s,
                (unsigned long long)s.samples, (unsigned long long)s.burn_samples, (unsigned long long)s.counted);
    /* 101 Hz of CPU time: ~100 samples per CPU-second, nearly all in burn_cpu. */
    cr_expect_geq((double)s.burn_samples, 0.8 * 101 * burn, "%s: %llu samples in burn_cpu over %s s; stderr: %s", how,
                  (unsigned long long)s.burn_samples, cpu_s, err);
    cr_expect_eq(s.counted, s.samples, "%s: %llu of %llu samples carry their CPU time", how,
                 (unsigned long long)s.counted, (unsigned long long)s.samples);
    cr_expect(fabs(s.pprof_cpu_s - used) <= CPU_TOLERANCE * used,
              "%s: pprof says %.4f s of CPU, the process used %.4f s", how, s.pprof_cpu_s, used);
    /* The sampled thread's own CPU time, as it measured it before its end:
     * what the weights add up to, but for the time after its last sample
     * (half a period on average). */
    char *out = read_in_dir("stdout"), *at = strstr(out, "thread-cpu ");
    cr_assert_not_null(at, "%s printed no thread-cpu: %s", how, out);
    double thread_cpu = atof(at + strlen("thread-cpu "));
    cr_log_info("%s: the thread measured %.4f s, pprof %+.2f %%", how, thread_cpu,
                100.0 * (s.pprof_cpu_s - thread_cpu) / thread_cpu);
    cr_expect(fabs(s.pprof_cpu_s - thread_cpu) <= THREAD_CPU_TOLERANCE * thread_cpu,
              "%s: pprof says %.4f s of CPU, the thread measured %.4f s", how, s.pprof_cpu_s, thread_cpu);
    free(out);
    free(err);
    free(trace);
    return status;
}

/* ---- weights ---- */

/* A normal exit: the reference case for the weights. */
Test(record_end, exit_weights_equal_the_cpu_time) {
    int status = record_ending("exit", "2");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

/* -F 1000 gets ~250 signals per CPU-second (the kernel tick): the samples
 * still add up to the CPU time, and info says what was delivered. */
Test(record_end, an_undeliverable_rate_keeps_exact_weights) {
    char *trace = path_in_dir("fast.pftrace");
    char *argv[] = {TM_RECORD_END_TARGET, "exit", "1.5", NULL};
    setenv("TRACEMILL_RECORD_HZ", "1000", 1);
    double used = 0;
    int status = run(argv, trace, &used);
    unsetenv("TRACEMILL_RECORD_HZ");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
    summary s = summarize(trace);
    double rate = (double)s.counted / s.counted_cpu_s;
    cr_log_info("-F 1000: %llu samples, %.0f per CPU-second; pprof cpu %.4f s, measured %.4f s (%+.2f %%)",
                (unsigned long long)s.samples, rate, s.pprof_cpu_s, used, 100.0 * (s.pprof_cpu_s - used) / used);
    cr_expect(fabs(s.pprof_cpu_s - used) <= CPU_TOLERANCE * used, "pprof says %.4f s of CPU, the process used %.4f s",
              s.pprof_cpu_s, used);
    char *cmd = NULL, *info = path_in_dir("info");
    cr_assert_gt(asprintf(&cmd, "%s info %s >%s", TM_CLI, trace, info), 0);
    cr_assert_eq(system(cmd), 0);
    char *text = tu_read_file(info, NULL);
    cr_assert_not_null(text);
    if (rate < 900) /* the timer could not keep up: info must say so */
        cr_expect(strstr(text, "at 1000 Hz asked for") && strstr(text, "delivered"), "%s", text);
    free(text), free(cmd), free(info), free(trace);
}

/* ---- endings ---- */

Test(record_end, _exit_keeps_the_trace) {
    int status = record_ending("_exit", "1");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

/* The program of mode ended by signal sig, its trace kept. */
static void expect_killed_by(const char *mode, const char *seconds, int sig) {
    int status = record_ending(mode, seconds);
    cr_expect(WIFSIGNALED(status) && WTERMSIG(status) == sig, "%s: status %#x", mode, status);
}

Test(record_end, _Exit_keeps_the_trace) {
    int status = record_ending("_Exit", "1");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

/* A crash: the trace is complete and the program still dies of SIGSEGV. */
Test(record_end, a_segfault_keeps_the_trace_and_the_signal) {
    expect_killed_by("segv", "1", SIGSEGV);
}

Test(record_end, abort_keeps_the_trace_and_the_signal) {
    expect_killed_by("abort", "1", SIGABRT);
}

Test(record_end, sigterm_keeps_the_trace_and_the_signal) {
    expect_killed_by("term", "1", SIGTERM);
}

/* The other signals whose default action ends a program ended it with the
 * trace as written a second before, or empty: found recording a program
 * whose output went into `| head` (SIGPIPE). Less than a second of CPU, so
 * that no periodic write hides the loss; 0.8 s, so that the one period
 * after the last sample stays within THREAD_CPU_TOLERANCE (at 0.5 s it is
 * 2 % by itself). */
Test(record_end, sigpipe_keeps_the_trace_and_the_signal) {
    expect_killed_by("pipe", "0.8", SIGPIPE);
}

Test(record_end, sigusr1_keeps_the_trace_and_the_signal) {
    expect_killed_by("usr1", "0.8", SIGUSR1);
}

Test(record_end, sigalrm_keeps_the_trace_and_the_signal) {
    expect_killed_by("alarm", "0.8", SIGALRM);
}

/* Putting back the SIGPROF disposition that is there (the recorder's) takes
 * nothing from the recorder: sampling goes on (the preload library stops
 * its timers before a program sets SIGPROF for itself). */
Test(record_end, restoring_sigprof_keeps_sampling) {
    int status = record_ending("restore-sigprof", "0.8");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
}

/* The program's own SIGSEGV handler runs (and decides the exit status);
 * its _exit still ends the trace. */
Test(record_end, the_programs_own_handler_still_runs) {
    int status = record_ending("own-segv", "1");
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 42, "status %#x", status);
    char *out = read_in_dir("stdout");
    cr_expect(strstr(out, "own handler"), "the program's handler did not run: %s", out);
    free(out);
}

/* --chunk-seconds across an exec: each chunk's counts start from the
 * thread's latest sample, but the new image's first chunk started from the
 * thread's start, so its first sample weighed the old image's CPU time again
 * (found recording `bash -c '...; exec prog'` in chunks: 0.84 s counted in
 * the second chunk of a run of 0.84 s). The chunks' pprof totals add up to
 * the thread's CPU time. */
Test(record_end, chunks_across_an_exec_count_each_cpu_second_once) {
    char *trace = path_in_dir("chunk.pftrace");
    char *argv[] = {TM_RECORD_END_TARGET, "exec", "0.6", NULL};
    setenv("TRACEMILL_RECORD_CHUNK_SECONDS", "1", 1);
    int status = run(argv, trace, NULL);
    unsetenv("TRACEMILL_RECORD_CHUNK_SECONDS");
    char *err = read_in_dir("stderr"), *out = read_in_dir("stdout"), *at = strstr(out, "thread-cpu ");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x: %s", status, err);
    cr_assert_not_null(at, "no thread-cpu: %s", out);
    double thread_cpu = atof(at + strlen("thread-cpu ")), counted = 0;
    int chunks = 0;
    for (;; chunks++) {
        char name[48];
        snprintf(name, sizeof name, "chunk.%d.pftrace", chunks);
        char *path = path_in_dir(name);
        if (access(path, R_OK) != 0) {
            free(path);
            break;
        }
        counted += summarize(path).pprof_cpu_s;
        free(path);
    }
    cr_log_info("%d chunks: pprof %.4f s, the thread measured %.4f s", chunks, counted, thread_cpu);
    cr_expect_geq(chunks, 2, "%d chunks: %s", chunks, err);
    cr_expect(fabs(counted - thread_cpu) <= 0.05 * thread_cpu, "%d chunks say %.4f s of CPU, the thread used %.4f s",
              chunks, counted, thread_cpu);
    free(err), free(out), free(trace);
}

/* ---- through `tracemill record` ---- */

/* `tracemill record --backend signal -o OUT ARGS -- CMD` (shell words);
 * its exit status, stderr in *err_text. */
static int record_cli(const char *out, const char *args, const char *cmd, char **err_text) {
    char *err = path_in_dir("record.stderr"), *line = NULL;
    cr_assert_gt(asprintf(&line, "%s record --backend signal --preload %s -o %s %s -- %s 2>%s >/dev/null", TM_CLI,
                          TM_RECORD_PRELOAD, out, args, cmd, err),
                 0);
    child_env(); /* inherited by the shell and the program */
    int st = system(line);
    *err_text = tu_read_file(err, NULL);
    if (!*err_text) *err_text = strdup("");
    free(line), free(err);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* record exits as the program did: 128 + 11 for a segfault, with the trace. */
Test(record_end, record_exits_with_the_programs_status) {
    char *trace = path_in_dir("cli.pftrace"), *err;
    int code = record_cli(trace, "", TM_RECORD_END_TARGET " segv 0.5", &err);
    cr_expect_eq(code, 128 + SIGSEGV, "exit %d: %s", code, err);
    summary s = summarize(trace);
    cr_expect_gt(s.burn_samples, 20, "%llu samples in burn_cpu", (unsigned long long)s.burn_samples);
    free(err);
    code = record_cli(trace, "", TM_RECORD_END_TARGET " own-segv 0.3", &err);
    cr_expect_eq(code, 42, "exit %d: %s", code, err);
    free(err);
    code = record_cli(trace, "", "/nonexistent/program", &err);
    cr_expect_eq(code, 127, "a program that cannot run: exit %d: %s", code, err);
    free(err), free(trace);
}

/* SIGTERM or SIGHUP sent to record reaches the program, which ends its
 * trace and dies of it; record waits and exits 128 + N. (SIGINT is not
 * tried: a shell's background job ignores it, and so does its program.) */
Test(record_end, a_signal_to_record_reaches_the_program) {
    static const int sigs[2] = {SIGTERM, SIGHUP};
    for (int k = 0; k < 2; k++) {
        char *trace = path_in_dir("killed.pftrace"), *code_file = path_in_dir("code"), *err = path_in_dir("err");
        char *line = NULL;
        cr_assert_gt(asprintf(&line,
                              "%s record --backend signal --preload %s -o %s -- %s exit 20 2>%s >/dev/null & "
                              "sleep 2; kill -%d $!; wait $!; echo $? >%s",
                              TM_CLI, TM_RECORD_PRELOAD, trace, TM_RECORD_END_TARGET, err, sigs[k], code_file),
                     0);
        child_env();
        cr_assert_eq(system(line), 0);
        char *code = tu_read_file(code_file, NULL), *text = tu_read_file(err, NULL);
        cr_assert_not_null(code);
        cr_expect_eq(atoi(code), 128 + sigs[k], "signal %d: exit %s: %s", sigs[k], code, text ? text : "");
        summary s = summarize(trace);
        cr_expect_gt(s.burn_samples, 0, "signal %d: no sample in burn_cpu", sigs[k]);
        cr_expect_eq(s.counted, s.samples);
        free(code), free(text), free(line), free(err), free(code_file), free(trace);
    }
}

/* SIGKILL, which no handler sees, loses what was sampled since the last
 * file write: record says so, not that threads blocked signals or that
 * child processes went unsampled (what it said before). */
Test(record_end, a_sigkill_is_named_for_the_lost_samples) {
    char *trace = path_in_dir("killed9.pftrace"), *err;
    int code = record_cli(trace, "", "sh -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; kill -KILL $$'", &err);
    cr_expect_eq(code, 128 + SIGKILL, "exit %d: %s", code, err);
    cr_expect(strstr(err, "SIGKILL ended it") && !strstr(err, "block signals"), "%s", err);
    free(err), free(trace);
}

/* The flame graph line can be pasted: a path with a space is quoted (it
 * was printed bare), and chunks name the first one, not OUT.N.pftrace. */
Test(record_end, the_flame_graph_line_can_be_pasted) {
    char *trace = path_in_dir("a b.pftrace"), *quoted = NULL, *want = NULL, *err;
    cr_assert_gt(asprintf(&quoted, "'%s'", trace), 0);
    int code = record_cli(quoted, "", TM_RECORD_END_TARGET " exit 0.3", &err);
    cr_expect_eq(code, 0, "exit %d: %s", code, err);
    cr_assert_gt(asprintf(&want, "flame graph: tracemill convert -f svg '%s' -o flame.svg\n", trace), 0);
    cr_expect(strstr(err, want), "%s", err);
    free(err), free(want), free(quoted), free(trace);
    trace = path_in_dir("chunks.pftrace");
    code = record_cli(trace, "--chunk-seconds 1", TM_RECORD_END_TARGET " exit 0.3", &err);
    cr_expect_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "chunks.0.pftrace -o flame.svg\n"), "%s", err);
    free(err), free(trace);
}

/* dash runs `sh -c '...; exit 3'` and ends with _exit: a short run still
 * leaves a whole trace, and its status. */
Test(record_end, a_short_sh_c_run_leaves_a_trace) {
    char *trace = path_in_dir("sh.pftrace"), *err;
    int code = record_cli(trace, "", "sh -c '" TM_RECORD_END_TARGET " exit 0.3; exit 3'", &err);
    cr_expect_eq(code, 3, "exit %d: %s", code, err);
    free(err);
    /* the shell's child (exec'd by the shell: its own process) is not
     * recorded; the shell itself was, and wrote a valid trace */
    code = record_cli(trace, "", "sh -c 'exec " TM_RECORD_END_TARGET " _exit 0.3'", &err);
    cr_expect_eq(code, 0, "exit %d: %s", code, err);
    summary s = summarize(trace);
    cr_expect_gt(s.burn_samples, 10, "%llu samples in burn_cpu: %s", (unsigned long long)s.burn_samples, err);
    free(err), free(trace);
}

/* A program started with stdin and stdout closed finds them closed: the
 * pipe libunwind opens at the recorder's start (kept for good) took fds 0
 * and 1, so that the program's writes to stdout went into it and its next
 * open got fd 3 (found recording a program run with <&- >&-); later, about
 * one run in six got fd 1: the collector's scan held fd 0 at that moment
 * (see program_opens_never_meet_the_collectors). */
Test(record_end, closed_stdin_and_stdout_stay_closed) {
    char *trace = path_in_dir("closed.pftrace"), *err = path_in_dir("record.stderr"), *line = NULL;
    static const char *const unwinds[2] = {"dwarf", "fp"};
    for (int k = 0; k < 2; k++) {
        cr_assert_gt(asprintf(&line,
                              "%s record --backend signal --preload %s --unwind %s --heap -o %s -- %s closed-stdio 0.3 "
                              "2>%s <&- >&-",
                              TM_CLI, TM_RECORD_PRELOAD, unwinds[k], trace, TM_RECORD_END_TARGET, err),
                     0);
        child_env();
        int st = system(line);
        char *text = tu_read_file(err, NULL);
        /* (record's own exit is 3 with its stdout closed: cli_close_stdout's
         * fclose fails with EBADF, a defect outside the recorder) */
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 4 && text && !strstr(text, "stdout took"),
                  "--unwind %s: exit %d: %s", unwinds[k], WIFEXITED(st) ? WEXITSTATUS(st) : -1, text ? text : "");
        struct stat sb;
        cr_expect_eq(stat(trace, &sb), 0, "--unwind %s: no trace: %s", unwinds[k], text ? text : "");
        unlink(trace);
        free(text), free(line);
    }
    free(err), free(trace);
}

/* The program opens and closes /dev/null for 0.5 s with stdin closed: every
 * open must get fd 0. The collector's scans open /proc/self/task and each
 * thread's stat (32 idle threads: 33 opens a scan); in the program's table
 * they took fd 0 for microseconds, and the program's open got another fd
 * (found as a flaky closed_stdin_and_stdout_stay_closed). */
/* Whether this kernel gives a thread a descriptor table of its own
 * (close_range's CLOSE_RANGE_UNSHARE, Linux 5.9): without it the recorder
 * keeps sharing the program's, as it says. Asked in a child, which exits. */
static int kernel_unshares_descriptor_tables(void) {
#ifdef SYS_close_range
    pid_t pid = fork();
    if (pid == 0) _exit(syscall(SYS_close_range, ~0u, ~0u, 1u << 1) == 0 ? 0 : 1);
    int st;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
#else
    return 0;
#endif
}

Test(record_end, program_opens_never_meet_the_collectors) {
    if (!kernel_unshares_descriptor_tables()) cr_skip_test("no CLOSE_RANGE_UNSHARE here: the recorder shares the table");
    char *trace = path_in_dir("reopen.pftrace"), *err = path_in_dir("record.stderr"), *line = NULL;
    cr_assert_gt(asprintf(&line, "%s record --backend signal --preload %s -o %s -- %s reopen-stdin 0.5 2>%s "
                                 "<&- >/dev/null",
                          TM_CLI, TM_RECORD_PRELOAD, trace, TM_RECORD_END_TARGET, err), 0);
    child_env();
    int st = system(line);
    char *text = tu_read_file(err, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "exit %d: %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
              text ? text : "");
    struct stat sb;
    cr_expect_eq(stat(trace, &sb), 0, "no trace: %s", text ? text : "");
    free(text), free(line), free(err), free(trace);
}

/* A program whose main thread calls pthread_exit ends when its last thread
 * does: glibc then calls exit(0), unless another thread lives on, as the
 * recorder's collector did: the process, and record waiting for it, hung
 * forever (even SIGTERM found every live thread blocking it). Bounded here
 * by timeout -s KILL. */
Test(record_end, a_main_thread_that_calls_pthread_exit_ends) {
    char *trace = path_in_dir("pthread_exit.pftrace"), *err = path_in_dir("record.stderr"), *line = NULL;
    cr_assert_gt(asprintf(&line, "timeout -s KILL 60 %s record --backend signal --preload %s -o %s -- %s pthread-exit "
                                 "0.5 2>%s >/dev/null",
                          TM_CLI, TM_RECORD_PRELOAD, trace, TM_RECORD_END_TARGET, err), 0);
    child_env();
    int st = system(line);
    char *text = tu_read_file(err, NULL);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    cr_expect_eq(code, 0, "exit %d (137: killed by timeout, hung): %s", code, text ? text : "");
    if (code == 0) {
        summary s = summarize(trace);
        cr_expect_gt(s.burn_samples, 20, "%llu samples in burn_cpu", (unsigned long long)s.burn_samples);
    }
    free(text), free(line), free(err), free(trace);
}

/* A dlclose waits for the collector to read the mappings; a request made
 * while the collector was busy with its round used to wait for its next
 * 100 ms period (a wake-up taken before the round looked, lost after it):
 * two dlcloses in a row took ~170 ms, a loop of them 140 times as long as
 * now. Counted, not timed: how many of 40 pairs took 90 ms or more. */
Test(record_end, a_dlclose_is_served_without_waiting_a_period) {
    char *trace = path_in_dir("dlclose.pftrace"), *err = path_in_dir("record.stderr"),
         *out = path_in_dir("record.stdout"), *line = NULL;
    cr_assert_gt(asprintf(&line, "%s record --backend signal --preload %s -o %s -- %s dlclose-pairs 40 2>%s >%s",
                          TM_CLI, TM_RECORD_PRELOAD, trace, TM_RECORD_END_TARGET, err, out), 0);
    child_env();
    int st = system(line);
    char *text = tu_read_file(err, NULL), *said = tu_read_file(out, NULL);
    int n = 0, slow = -1;
    double max = 0;
    cr_assert(said && sscanf(said, "dlclose-pairs %d slow %d max %lf", &n, &slow, &max) == 3,
              "exit %d, stdout %s, stderr %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1, said ? said : "",
              text ? text : "");
    cr_expect_eq(n, 40);
    cr_expect_lt(slow, 10, "%d of 40 pairs of dlcloses took >= 90 ms (slowest %.1f ms)", slow, max);
    free(said), free(text), free(line), free(out), free(err), free(trace);
}

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A program recorded through LD_PRELOAD closes its stdout, a pipe, and
 * burns 1 s more: the reader gets its end of file at the close, while the
 * program still runs; nothing of the recorder's keeps the pipe open. */
Test(record_end, a_pipe_the_program_closes_ends_for_its_reader) {
    char *trace = path_in_dir("pipe.pftrace");
    int p[2];
    cr_assert_eq(pipe(p), 0);
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        child_env();
        setenv("LD_PRELOAD", TM_RECORD_PRELOAD, 1);
        setenv("TRACEMILL_RECORD_OUT", trace, 1);
        if (dup2(p[1], STDOUT_FILENO) < 0) _exit(126);
        close(p[0]), close(p[1]);
        execl(TM_RECORD_END_TARGET, TM_RECORD_END_TARGET, "close-stdout", "1", (char *)NULL);
        _exit(127);
    }
    close(p[1]);
    /* The time from "closing" to the end of file: the program burns 1 s of
     * CPU after its close, so an end of file that waited for its exit comes
     * a second after. */
    char got[64];
    size_t n = 0;
    double closing_at = 0;
    for (ssize_t r; n < sizeof got - 1 && (r = read(p[0], got + n, sizeof got - 1 - n)) != 0;) {
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) break;
        n += (size_t)r;
        if (!closing_at) closing_at = monotonic_seconds();
    }
    double eof_after = monotonic_seconds() - closing_at;
    got[n] = 0;
    cr_expect_str_eq(got, "closing\n");
    cr_expect_lt(eof_after, 0.5, "the end of file came %.2f s after the close: at the program's exit", eof_after);
    int status = 0;
    waitpid(pid, &status, 0);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x", status);
    close(p[0]);
    free(trace);
}

/* --clock wall would interrupt the program's system calls: refused, 125,
 * and the program never runs. */
Test(record_end, clock_wall_is_refused) {
    char *trace = path_in_dir("wall.pftrace"), *marker = path_in_dir("ran"), *cmd = NULL, *err;
    cr_assert_gt(asprintf(&cmd, "touch %s", marker), 0);
    int code = record_cli(trace, "--clock wall", cmd, &err);
    cr_expect_eq(code, 125, "exit %d: %s", code, err);
    cr_expect(strstr(err, "--clock wall") && strstr(err, "perf backend"), "%s", err);
    struct stat sb;
    cr_expect_neq(stat(marker, &sb), 0, "the program ran");
    cr_expect_neq(stat(trace, &sb), 0, "a trace was written");
    free(err), free(cmd), free(marker), free(trace);
}
