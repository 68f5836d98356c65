/*
 * test_record_perf.c — `tracemill record --backend perf` end to end: the
 * test program record_perf_target is recorded without anything injected,
 * and every trace is read back with tm_trace_parse and tm_write_folded:
 * sample counts near CPU time x frequency per thread, the hot function
 * first, a thread that blocks every signal sampled, a child process
 * started by `sh -c` sampled, a program with its own SIGPROF handler
 * unchanged, valid traces after _exit, abort and SIGTERM (passed on to the
 * program), and the program's exit status as record's. Attaching (-p): the
 * threads that ran, and the threads and children started later, sampled
 * at the rate of the CPU time they used; the ends (--duration, SIGINT, the
 * process's exit) with the process untouched; failures (125, OUT kept).
 * Kernel frames (--kernel) and their refusal, stacks cut at --max-depth
 * marked and counted (both backends), JIT code named from its perf map,
 * system-wide recording (-a) and its refusal. CPU time that went unsampled
 * is said (both backends). Real programs: coreutils' sort --parallel=2 and
 * xz -T2 (output unchanged, every thread sampled; the signal backend says
 * it cannot), make -j2 of a generated C project (every compiler followed),
 * python3 (the interpreter's loop named), 150 short-lived threads.
 *
 * Skipped, with the reason, when this kernel refuses perf_event_open.
 * Paths come from the build: TM_CLI, TM_RECORD_PERF_TARGET.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <sqlite3.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "conformance.h"
#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

#define HZ 101
/* Off-CPU time under a waiting function against what the program measured
 * around its waits: an ASan build spends part of that on the CPU (its poll
 * interceptor), and its slower recorder loses switch records on a busy
 * machine. */
#if defined(__SANITIZE_ADDRESS__)
#define WAIT_LOW 0.8
#else
#define WAIT_LOW 0.95
#endif

/* Skips the test unless the perf backend can run here. */
static void need_perf(void) {
    char why[128];
    if (!tu_perf_available(why, sizeof why)) cr_skip_test("%s", why);
}

/* Frames named by their function alone, as the assertions name them. */
static const tm_options g_by_function = {.no_source_lines = 1};

static void setup(void) {
    cr_assert_not_null(tu_test_dir_make("tm_record_perf"));
}

static void teardown(void) { cr_assert_eq(tu_test_dir_remove(), 0); }

TestSuite(record_perf, .init = setup, .fini = teardown, .timeout = 90);

static char *path_in_dir(const char *name) { return tu_test_path(name); }

/* The bytes of the recorded trace, DIR/t.pftrace (malloc'd), into *len. */
static char *trace_bytes(size_t *len) {
    char *path = path_in_dir("t.pftrace");
    char *bytes = tu_read_file(path, len);
    cr_assert_not_null(bytes, "no trace at %s", path);
    free(path);
    return bytes;
}

/* DIR/t.pftrace decoded with options o; *bytes holds the trace's bytes,
 * which it points into (free after tm_trace_free). */
static tm_trace *parse_recorded(const tm_options *o, char **bytes) {
    size_t len = 0;
    *bytes = trace_bytes(&len);
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(*bytes, len, o, &t, &err), TM_OK, "the trace does not decode: %s", err.message);
    return t;
}

/* Runs `tracemill record --backend perf -F hz -o DIR/t.pftrace OPTS -- ARGS`
 * (shell words); *code gets record's exit status; returns its stderr.
 * Symbolized, as by default (the recorder names only JIT, kernel and vDSO
 * frames itself); the trace is read with frames named by function alone
 * (no_source_lines, --no-lines), as the assertions name them. */
static char *record_on(const char *backend, int hz, const char *opts, const char *args, int *code) {
    if (strcmp(backend, "signal") == 0) tu_asan_recorded_child_env(); /* the preload library under ASan */
    char *err = path_in_dir("stderr"), *out = path_in_dir("stdout"), *trace = path_in_dir("t.pftrace"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s record --backend %s -F %d -o %s %s -- %s 2>%s >%s", TM_CLI, backend, hz, trace,
                          opts, args, err, out),
                 0);
    int st = system(cmd);
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *text = tu_read_file(err, NULL);
    cr_assert_not_null(text);
    free(cmd), free(err), free(out), free(trace);
    return text;
}

static char *record_with(int hz, const char *opts, const char *args, int *code) {
    return record_on("perf", hz, opts, args, code);
}
static char *record_at(int hz, const char *args, int *code) { return record_with(hz, "", args, code); }
static char *record(const char *args, int *code) { return record_at(HZ, args, code); }

typedef struct counts {
    uint64_t total, hot, cold, blocked, child;
    uint64_t known, rooted; /* samples in the target's own functions; those of them that reach the outermost frame */
    uint64_t records_lost;
    int spinner, blocker;
} counts;

/* The folded stacks' one parser: the sum of the counts of the lines that
 * contain every one of the n frames in order, root to leaf (each a whole
 * frame); n = 0: of every line. */
static uint64_t folded_with(const char *folded, const char *const *frames, size_t n) {
    uint64_t samples = 0;
    for (const char *line = folded; line && *line;) {
        const char *nl = strchr(line, '\n'), *space = NULL;
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        for (size_t i = len; i-- > 0 && !space;)
            if (line[i] == ' ') space = line + i;
        cr_assert_not_null(space);
        const char *at = line;
        size_t k = 0;
        for (; k < n; k++) {
            size_t fl = strlen(frames[k]);
            const char *found = NULL;
            for (const char *c = at; c + fl <= space && !found; c++)
                if ((c == line || c[-1] == ';') && memcmp(c, frames[k], fl) == 0 && (c[fl] == ';' || c + fl == space))
                    found = c;
            if (!found) break;
            at = found + fl;
        }
        if (k == n) samples += strtoull(space + 1, NULL, 10);
        line = nl ? nl + 1 : NULL;
    }
    return samples;
}

/* Trace t's folded stacks of value v (malloc'd). */
static char *folded_of_trace(const tm_trace *t, tm_value v) {
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_folded_options o = {.value = v};
    tm_error err;
    cr_assert_eq(tm_write_folded(t, &o, &sink, &err), TM_OK, "%s", err.message);
    return out.data ? out.data : strdup("");
}

/* The recorded trace's folded stacks of value v (malloc'd). */
static char *folded_of(tm_value v) {
    char *bytes;
    tm_trace *t = parse_recorded(&g_by_function, &bytes);
    char *text = folded_of_trace(t, v);
    tm_trace_free(t);
    free(bytes);
    return text;
}

/* The recorded trace's folded CPU samples (malloc'd). */
static char *folded_text(void) { return folded_of(TM_VALUE_DEFAULT); }

static int has_thread(const tm_trace *t, const char *name) {
    for (size_t i = 0; i < tm_trace_thread_count(t); i++) {
        tm_thread_info ti;
        cr_assert_eq(tm_trace_thread(t, i, &ti), TM_OK);
        if (ti.name && ti.name_len == strlen(name) && memcmp(ti.name, name, ti.name_len) == 0) return 1;
    }
    return 0;
}

/* Reads DIR/t.pftrace back: samples per known function (from the folded
 * stacks), how many stacks reach the outermost frame, the thread names. */
static counts read_trace(void) {
    char *bytes;
    tm_trace *t = parse_recorded(&g_by_function, &bytes);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(st->dropped_unresolved + st->dropped_stale_interning + st->dropped_never_cleared +
                     st->dropped_missing_clock + st->dropped_bad_timestamp,
                 0, "samples were dropped on reading");
    counts c = {.records_lost = st->perf_records_lost,
                .spinner = has_thread(t, "spinner"),
                .blocker = has_thread(t, "blocker")};
    char *folded = folded_of_trace(t, TM_VALUE_DEFAULT);
    static const char *const known[] = {"spin_hot", "spin_cold", "blocked_spin", "child_spin"};
    uint64_t *in[] = {&c.hot, &c.cold, &c.blocked, &c.child};
    c.total = folded_with(folded, NULL, 0);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const char *from_start[] = {"_start", known[i]}, *from_thread[] = {"start_thread", known[i]};
        *in[i] = folded_with(folded, &known[i], 1);
        /* Other samples (the dynamic loader, a sanitizer's runtime) may have other roots. */
        c.known += *in[i];
        c.rooted += folded_with(folded, from_start, 2) + folded_with(folded, from_thread, 2);
    }
    cr_assert_eq(c.total, st->samples_kept);
    free(folded);
    tm_trace_free(t);
    free(bytes);
    return c;
}

/* n samples stand for seconds of CPU time at HZ: within -30 %/+15 % (the
 * machine is shared: a thread's first and last period are partial, and
 * time in the kernel, which samples exclude, is charged to its CPU clock). */
static void expect_rate(uint64_t n, double seconds, const char *what) {
    double want = seconds * HZ;
    cr_expect(n >= want * 0.7 && n <= want * 1.15, "%s: %llu samples for %.1f CPU-seconds at %d Hz (want ~%.0f)",
              what, (unsigned long long)n, seconds, HZ, want);
}

/* Both threads sampled at the rate of their CPU time, the one that blocks
 * every signal too; the hot function first; stacks complete. */
Test(record_perf, threads_and_blocked_signals) {
    need_perf();
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " threads 1.0", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "backend perf"), "%s", err);
    counts c = read_trace();
    cr_expect(c.spinner && c.blocker, "thread names missing: %s", err);
    expect_rate(c.hot + c.cold, 1.0, "spinner");
    expect_rate(c.blocked, 1.0, "blocker (all signals blocked)");
    cr_expect_gt(c.hot, 2 * c.cold, "spin_hot (80 %%) does not dominate spin_cold: %llu vs %llu",
                 (unsigned long long)c.hot, (unsigned long long)c.cold);
    cr_expect_geq(c.rooted * 100, c.known * 95, "%llu of %llu stacks reach _start or start_thread",
                  (unsigned long long)c.rooted, (unsigned long long)c.known);
    cr_expect_eq(c.records_lost, 0);
    free(err);
}

/* A program that gains privileges as it starts (set-user-ID, here to root)
 * is sampled by neither backend for a recorder without them: record ran it
 * and said it "ended before its first sample" after 0.2 s of CPU time
 * (perf backend), or pointed to the perf backend (signal backend). Found
 * recording a set-user-ID copy of a program as nobody. Needs root, to make
 * such a program, and setpriv, to drop to nobody. */
Test(record_perf, a_program_gaining_privileges_is_said_unsampled) {
    need_perf();
    if (geteuid() != 0 || system("command -v setpriv >/dev/null") != 0) cr_skip_test("needs root and setpriv");
    char *copy = path_in_dir("suid_target"), *cmd = NULL;
    cr_assert_eq(chmod(tu_test_dir(), 0777), 0);
    cr_assert_gt(asprintf(&cmd, "cp %s %s && chmod 4755 %s", TM_RECORD_PERF_TARGET, copy, copy), 0);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    static const char *const backends[2] = {"perf", "signal"};
    for (int k = 0; k < 2; k++) {
        char *err = path_in_dir("stderr"), *trace = path_in_dir("t.pftrace");
        cr_assert_gt(asprintf(&cmd,
                              "setpriv --reuid 65534 --regid 65534 --clear-groups %s record --backend %s -o %s -- %s "
                              "cxx 0.3 2>%s >/dev/null",
                              TM_CLI, backends[k], trace, copy, err),
                     0);
        int st = system(cmd), code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
        char *text = tu_read_file(err, NULL);
        cr_assert_not_null(text, "%s: no stderr (exit %d)", backends[k], code);
        cr_expect_neq(code, 0, "%s: nothing recorded, yet exit 0: %s", backends[k], text);
        cr_expect(strstr(text, "is set-user-ID (uid 0)") && strstr(text, "record it as root") &&
                      !strstr(text, "ended before its first sample") && !strstr(text, "short threads") &&
                      !strstr(text, "--backend perf records it"),
                  "%s: why nothing was sampled: %s", backends[k], text);
        free(text), free(cmd), free(err), free(trace);
    }
    free(copy);
}

/* A program mostly in the kernel (dd from /dev/zero to /dev/null) gets
 * few samples, all in user mode, each weighing the kernel time before it
 * too: record said "the CPU-time timer delivered 25 %", of a timer the perf
 * backend does not have. It must say why instead. */
Test(record_perf, few_samples_of_kernel_time_are_not_blamed_on_a_timer) {
    need_perf();
    int code;
    char *err = record("dd if=/dev/zero of=/dev/null bs=4k count=1500000", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect_null(strstr(err, "timer"), "the perf backend has no timer: %s", err);
    if (strstr(err, "asked for"))
        cr_expect(strstr(err, "user mode"), "a rate below -F must say that user mode alone is sampled: %s", err);
    free(err);
    /* nor does `tracemill info`, from the trace alone */
    char *trace = path_in_dir("t.pftrace"), *info_path = path_in_dir("info"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s info %s >%s 2>&1", TM_CLI, trace, info_path), 0);
    int st = system(cmd);
    char *info = tu_read_file(info_path, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0 && info, "info: status %#x", st);
    cr_expect(info && strstr(info, "CPU time counted"), "%s", info ? info : "");
    cr_expect(!info || !strstr(info, "(overruns)"), "a perf trace's missing periods blamed on a timer: %s", info);
    if (info && strstr(info, "% delivered"))
        cr_expect(strstr(info, "ended in the kernel"), "%s", info);
    free(info), free(cmd), free(info_path), free(trace);
}

/* Neither backend lets CPU time go unsampled in silence. The signal
 * backend cannot sample a thread that blocks signals nor a program that
 * takes SIGPROF for itself: record says how much CPU time went unsampled
 * and names the perf backend; a program it samples whole gets no such
 * word. (No perf_event_open needed.) */
Test(record_perf, signal_backend_says_what_it_could_not_sample) {
    int code;
    char *err = record_on("signal", HZ, "", TM_RECORD_PERF_TARGET " threads 0.5", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "samples were taken") && strstr(err, "threads that block signals") &&
                  strstr(err, "--backend perf"),
              "the blocker thread's CPU time went unsampled without a word: %s", err);
    free(err);

    err = record_on("signal", HZ, "", TM_RECORD_PERF_TARGET " sigprof 0.5", &code);
    char *out_path = path_in_dir("stdout"), *out = tu_read_file(out_path, NULL);
    int n = 0;
    cr_expect(out && sscanf(out, "sigprof %d", &n) == 1 && n > 10, "the program's own handler: %s",
              out ? out : "(none)");
    /* its ITIMER_PROF ticks 100 times a CPU-second: ~50; the recorder's
     * timers, which went on after it took SIGPROF, doubled that */
    cr_expect_lt(n, 75, "the program's handler got the recorder's signals too: %d calls in 0.5 s of CPU", n);
    cr_expect_neq(code, 0, "no samples, yet exit 0: %s", err);
    cr_expect(strstr(err, "only 0 samples were taken") && strstr(err, "handles SIGPROF itself"), "%s", err);
    free(out), free(out_path), free(err);

    err = record_on("signal", HZ, "", TM_RECORD_PERF_TARGET " cxx 0.5", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect_null(strstr(err, "samples were taken"), "a program sampled whole was said to be unsampled: %s", err);
    free(err);

    /* --duration stops sampling while the program runs on: the CPU time it
     * uses after that was not due a sample */
    err = record_on("signal", HZ, "--duration 1", TM_RECORD_PERF_TARGET " cxx 2.5", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect_null(strstr(err, "samples were taken"), "sampling stopped by --duration was said unsampled: %s", err);
    free(err);
}

/* The perf backend samples a thread once it has run a whole period on one
 * CPU, as perf does: a loop of processes each far shorter than that uses CPU
 * time that no sample shows, and record says so with the time used. */
Test(record_perf, short_processes_unsampled_are_said) {
    need_perf();
    int code;
    char *err = record("sh -c 'i=0; while [ $i -lt 400 ]; do echo $i | md5sum >/dev/null; i=$((i+1)); done'", &code);
    cr_expect(strstr(err, "of CPU time in user mode") && strstr(err, "goes mostly unsampled"),
              "exit %d: %s", code, err);
    free(err);
}

/* -F 1000 delivers its rate (the signal backend's CPU timers cannot pass
 * the kernel tick), and stacks stay complete when the first samples land
 * while the dynamic loader is still mapping libraries (whose modules the
 * unwinder then has to take in). The kernel takes every sample; a recorder
 * slowed down (by a sanitizer, on a loaded machine) may not drain its rings
 * in time, and the records the kernel then drops are counted, not hidden:
 * without such losses each thread has its rate, with them the samples kept
 * and the records counted lost make it up between them. */
Test(record_perf, a_thousand_hertz) {
    need_perf();
    int code;
    char *err = record_at(1000, TM_RECORD_PERF_TARGET " threads 0.3", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    counts c = read_trace();
    const double per_thread = 0.3 * 900 * 0.85;
    if (c.records_lost == 0)
        cr_expect(c.hot + c.cold >= per_thread && c.blocked >= per_thread,
                  "%llu + %llu samples of 0.3 CPU-s each at 1000 Hz: %s", (unsigned long long)(c.hot + c.cold),
                  (unsigned long long)c.blocked, err);
    else
        cr_expect(c.hot + c.cold + c.blocked + c.records_lost >= 2 * per_thread,
                  "%llu + %llu samples of 0.3 CPU-s each at 1000 Hz, %llu records lost: %s",
                  (unsigned long long)(c.hot + c.cold), (unsigned long long)c.blocked,
                  (unsigned long long)c.records_lost, err);
    cr_expect_geq(c.rooted * 100, c.known * 95, "%llu of %llu stacks reach _start or start_thread: %s",
                  (unsigned long long)c.rooted, (unsigned long long)c.known, err);
    free(err);
}

/* A process that sh forks is followed; sh's exit status is record's. */
Test(record_perf, child_of_sh_and_exit_status) {
    need_perf();
    int code;
    char *err = record("sh -c '" TM_RECORD_PERF_TARGET " child 0.5; exit 3'", &code);
    cr_assert_eq(code, 3, "exit %d: %s", code, err);
    counts c = read_trace();
    expect_rate(c.child, 0.5, "the child of sh");
    free(err);
}

/* The program's own SIGPROF timer and handler work as without record. */
Test(record_perf, own_sigprof_handler_unchanged) {
    need_perf();
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " sigprof 0.5", &code);
    cr_assert_eq(code, 0, "exit %d (the program's handler never ran?): %s", code, err);
    char *out_path = path_in_dir("stdout");
    char *out = tu_read_file(out_path, NULL);
    int n = 0;
    cr_expect(out && sscanf(out, "sigprof %d", &n) == 1 && n > 10, "stdout: %s", out ? out : "(none)");
    counts c = read_trace();
    expect_rate(c.hot, 0.5, "spin_hot");
    free(out), free(out_path), free(err);
}

/* _exit and abort leave a complete, valid trace; the status passes through. */
Test(record_perf, exit_and_abort_keep_the_trace) {
    need_perf();
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " exit 0.5", &code);
    cr_assert_eq(code, 5, "exit %d: %s", code, err);
    expect_rate(read_trace().hot, 0.5, "before _exit");
    free(err);
    err = record(TM_RECORD_PERF_TARGET " abort 0.5", &code);
    cr_assert_eq(code, 128 + SIGABRT, "exit %d: %s", code, err);
    expect_rate(read_trace().hot, 0.5, "before abort");
    free(err);
}

/* A reader of record's stderr that goes away (record ... 2>&1 | head -c 10)
 * does not cost the trace: record's status lines after it fail quietly,
 * and the trace is in place, no temporary file left (before, SIGPIPE ended
 * record at its first line after the recording: no trace). The program
 * keeps SIGPIPE as inherited: its own writes to the gone reader end it. */
Test(record_perf, a_reader_of_stderr_that_goes_away_costs_no_trace) {
    static const char *const backends[2] = {"perf", "signal"};
    for (int k = 0; k < 2; k++) {
        char why[128];
        if (k == 0 && !tu_perf_available(why, sizeof why)) continue;
        if (k == 1) tu_asan_recorded_child_env();
        char *trace = path_in_dir("t.pftrace"), *code_path = path_in_dir("code"), *cmd = NULL;
        /* the program burns, then writes to the gone reader until SIGPIPE
         * ends it (141); with SIGPIPE ignored it would exit 7 */
        cr_assert_gt(asprintf(&cmd,
                              "(%s record --backend %s -F %d -o %s -- %s write 0.4; echo $? >%s) "
                              "2>&1 | head -c 10 >/dev/null",
                              TM_CLI, backends[k], HZ, trace, TM_RECORD_PERF_TARGET, code_path),
                     0);
        int st = system(cmd);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: the shell: %d", backends[k], st);
        char *code_text = tu_read_file(code_path, NULL);
        cr_assert_not_null(code_text, "%s: record's exit code was not written", backends[k]);
        cr_expect_eq(atoi(code_text), 128 + SIGPIPE, "%s: record exited %s", backends[k], code_text);
        counts c = read_trace();
        cr_expect_gt(c.hot, 0, "%s: no samples in spin_hot", backends[k]);
        char *dir = path_in_dir(""), *ls = NULL;
        cr_assert_gt(asprintf(&ls, "ls -a %s | grep -q 'tmp-'", dir), 0);
        cr_expect_neq(system(ls), 0, "%s: a temporary file is left in %s", backends[k], dir);
        unlink(trace), unlink(code_path);
        free(ls), free(dir), free(code_text), free(cmd), free(code_path), free(trace);
    }
}

/* SIGTERM to record reaches the program; record waits for it, writes the
 * trace and exits 128 + SIGTERM, as the program did. */
Test(record_perf, sigterm_is_passed_on) {
    need_perf();
    char *trace = path_in_dir("t.pftrace"), *err = path_in_dir("stderr");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (!freopen(err, "w", stderr)) _exit(126);
        execl(TM_CLI, TM_CLI, "record", "--backend", "perf", "-o", trace, "--", TM_RECORD_PERF_TARGET,
              "exit", "60",
              (char *)NULL);
        _exit(126);
    }
    struct timespec pause = {1, 500000000};
    nanosleep(&pause, NULL);
    cr_assert_eq(kill(pid, SIGTERM), 0);
    int status = 0;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    char *text = tu_read_file(err, NULL);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM, "status %#x: %s", status,
              text ? text : "");
    cr_expect_gt(read_trace().hot, 0);
    free(text), free(trace), free(err);
}

/* Options only the signal backend has are refused with --backend perf, and
 * make auto choose signal, saying why. */
Test(record_perf, signal_only_options) {
    char *cmd = NULL, *err = path_in_dir("stderr");
    cr_assert_gt(asprintf(&cmd, "%s record --backend perf --clock wall -- true 2>%s", TM_CLI, err), 0);
    int st = system(cmd);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %#x", st);
    char *text = tu_read_file(err, NULL);
    cr_expect(text && strstr(text, "--clock needs --backend signal"), "%s", text ? text : "");
    free(text), free(cmd), free(err);
}

/* C++ names are demangled by default; --no-demangle keeps the symbol. */
Test(record_perf, cxx_names_demangled_unless_asked_not_to) {
    need_perf();
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " cxx 0.3", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    char *folded = folded_text();
    cr_expect(folded && strstr(folded, "tmtest::spin()"), "no demangled name in:\n%s", folded ? folded : "");
    free(folded);
    free(err);
    err = record_with(HZ, "--no-demangle", TM_RECORD_PERF_TARGET " cxx 0.3", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    folded = folded_text();
    cr_expect(folded && strstr(folded, "_ZN6tmtest4spinEv") && !strstr(folded, "tmtest::spin()"),
              "--no-demangle still demangled:\n%s", folded ? folded : "");
    free(folded);
    free(err);
}

/* The program's vdso is named from a copy of the recorder's own (one image
 * per kernel): a clock-reading loop shows __vdso_clock_gettime, where only
 * an address in [vdso] was (its internal helpers have no symbol, as for
 * perf). */
Test(record_perf, vdso_functions_are_named) {
    need_perf();
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " vdso 0.6", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    char *folded = folded_text();
    cr_expect(folded && strstr(folded, "vdso_spin;") && strstr(folded, "clock_gettime;__vdso_clock_gettime"), "no named vdso frame in:\n%s",
              folded ? folded : "");
    free(folded);
    free(err);
}

/* PerfSample.timebase_count is a counter's running value, as Perfetto
 * reads it: each thread's CPU time so far on its sequence, so in the SQL
 * model's counter table every (sequence, CPU) track only grows, and one
 * ends near a thread's CPU time. */
Test(record_perf, timebase_count_is_cumulative_per_thread) {
    need_perf();
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " threads 0.4", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    free(err);
    size_t len = 0;
    char *bytes = trace_bytes(&len);
    tm_db *db = NULL;
    tm_error e;
    cr_assert_eq(tm_db_new(bytes, len, NULL, &db, &e), TM_OK, "%s", e.message);
    sqlite3_stmt *q;
    const char *sql = "SELECT count(*), sum(dec), max(v) FROM (SELECT value AS v, value < lag(value) OVER "
                      "(PARTITION BY track_id ORDER BY ts) AS dec FROM counter)";
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db), sql, -1, &q, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(tm_db_sqlite(db)));
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    int64_t rows = sqlite3_column_int64(q, 0), decreasing = sqlite3_column_int64(q, 1);
    double top = sqlite3_column_double(q, 2);
    sqlite3_finalize(q);
    cr_expect_gt(rows, 20, "%lld counter rows", (long long)rows);
    cr_expect_eq(decreasing, 0, "%lld counter values went down", (long long)decreasing);
    /* two threads of 0.4 s of CPU each: a thread's count ends near 0.4 s */
    cr_expect_gt(top, 0.3e9, "the largest running count is %.0f ns", top);
    cr_expect_lt(top, 0.5e9, "the largest running count is %.0f ns", top);
    tm_db_free(db);
    free(bytes);
}

/* pprof's cpu/nanoseconds is the CPU time the program measured (from main
 * on, all threads) within 2 % (3 % above): every sample weighs the CPU time it stands
 * for (the growth of its event's count, or its period), counted on the
 * thread's sequence, none inferred. What is not in any sample: a thread's
 * time after its last sample on each CPU it ran on (under a period each). */
static void expect_exact_weights(int hz, const char *seconds, const char *threads) {
    int code;
    char *cmd = NULL;
    /* In the ASan build, LeakSanitizer's check at the program's exit (a
     * task of its own, sampled) would add CPU time after it measured. */
    cr_assert_gt(asprintf(&cmd, "env ASAN_OPTIONS=detect_leaks=0 %s weights %s %s", TM_RECORD_PERF_TARGET, seconds,
                          threads),
                 0);
    char *err = record_at(hz, cmd, &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    char *out_path = path_in_dir("stdout"), *out = tu_read_file(out_path, NULL);
    long long cpu_ns = 0;
    cr_assert(out && sscanf(out, "cpu %lld", &cpu_ns) == 1 && cpu_ns > 0, "stdout: %s", out ? out : "(none)");
    char *bytes;
    tm_trace *t = parse_recorded(NULL, &bytes);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_expect_gt(st->samples_kept, 0);
    cr_expect_eq(st->perf_samples_counted, st->samples_kept, "%llu of %llu samples carry their CPU time",
                 (unsigned long long)st->perf_samples_counted, (unsigned long long)st->samples_kept);
    tu_membuf pprof = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &pprof};
    tm_pprof_options po = {.uncompressed = 1};
    tm_error e;
    cr_assert_eq(tm_write_pprof(t, &po, &sink, &e), TM_OK, "%s", e.message);
    uint64_t pprof_ns = 0;
    cr_assert_eq(tu_pprof_value_sum(pprof.data, pprof.len, 1, &pprof_ns), 0, "the pprof profile is malformed");
    double off = ((double)pprof_ns - (double)cpu_ns) / (double)cpu_ns;
    cr_log_info("weights %s s x %s threads at %d Hz: the program measured %.4f s, pprof %.4f s (%+.2f %%), %llu "
                "samples",
                seconds, threads, hz, (double)cpu_ns * 1e-9, (double)pprof_ns * 1e-9, 100 * off,
                (unsigned long long)st->samples_kept);
    /* above by up to 3 %: the samples also weigh the time before main and
     * after the program's last reading (seen at +2.0 % on a loaded machine) */
    cr_expect(off > -0.02 && off < 0.03, "pprof says %.4f s of CPU, the program measured %.4f s (%+.2f %%): %s",
              (double)pprof_ns * 1e-9, (double)cpu_ns * 1e-9, 100 * off, err);
    tu_membuf_free(&pprof);
    tm_trace_free(t);
    free(bytes), free(out), free(out_path), free(err), free(cmd);
}

Test(record_perf, weights_are_the_cpu_time_of_one_thread) {
    need_perf();
    expect_exact_weights(HZ, "1.5", "1");
}

Test(record_perf, weights_are_the_cpu_time_of_three_threads) {
    need_perf();
    expect_exact_weights(HZ, "1.5", "3");
}

/* ---- attaching: record -p ---- */

/* Starts `record_perf_target MODE SECONDS` (or `sh -c SCRIPT` when mode is
 * NULL) in the background, stdout to /dev/null; its pid. */
static pid_t start_target(const char *mode, const char *seconds) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        if (mode) execl(TM_RECORD_PERF_TARGET, TM_RECORD_PERF_TARGET, mode, seconds, (char *)NULL);
        else execl("/bin/sh", "sh", "-c", seconds, (char *)NULL);
        _exit(126);
    }
    return pid;
}

/* The CPU time process pid spent in user mode so far, all its threads (/proc/PID/stat utime). */
static double user_cpu(pid_t pid) {
    char path[48], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    unsigned long long utime = 0;
    /* after "pid (comm)": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime */
    cr_assert_eq(sscanf(strrchr(buf, ')') + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu", &utime), 1);
    return (double)utime / (double)sysconf(_SC_CLK_TCK);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

/* Runs `tracemill record OPTS -o DIR/t.pftrace` (no program, unsymbolized
 * as record_with); *code gets record's exit status; returns its stderr. */
static char *record_opts(const char *opts, int *code) {
    char *err = path_in_dir("stderr"), *trace = path_in_dir("t.pftrace"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s record -F %d -o %s %s 2>%s", TM_CLI, HZ, trace, opts, err), 0);
    int st = system(cmd);
    *code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    char *text = tu_read_file(err, NULL);
    cr_assert_not_null(text);
    free(cmd), free(err), free(trace);
    return text;
}

/* Starts `tracemill record -p PIDS -o DIR/t.pftrace` (unsymbolized) in the
 * background, stderr to DIR/stderr; its pid. */
static pid_t start_attach(const char *pids) {
    char *trace = path_in_dir("t.pftrace"), *errp = path_in_dir("stderr");
    pid_t rec = fork();
    cr_assert_geq(rec, 0);
    if (rec == 0) {
        if (!freopen(errp, "w", stderr)) _exit(126);
        execl(TM_CLI, TM_CLI, "record", "-F", "101", "-p", pids, "-o", trace, (char *)NULL);
        _exit(126);
    }
    free(trace), free(errp);
    return rec;
}

/* The perf events the process pid holds open. */
static int perf_fds(int pid) {
    char dir[64], target[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", pid);
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        ssize_t len = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
        if (len > 0 && (target[len] = 0, strcmp(target, "anon_inode:[perf_event]") == 0)) n++;
    }
    if (d) closedir(d);
    return n;
}

/* Waits until record (pid rec) has attached to the first process it was
 * given: its recorder, a child of rec, holds an event on every CPU. An
 * attach test then lets its target go on, as a fixed sleep would race with
 * a slow start (a loaded machine, ASan). */
static void wait_attached(pid_t rec) {
    long cpus = sysconf(_SC_NPROCESSORS_CONF);
    for (int waited_ms = 0;; waited_ms += 20) {
        DIR *proc = opendir("/proc");
        cr_assert_not_null(proc);
        int attached = 0;
        for (struct dirent *e; !attached && (e = readdir(proc));) {
            if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
            char path[64], buf[512];
            int pid = atoi(e->d_name);
            snprintf(path, sizeof path, "/proc/%d/stat", pid);
            FILE *f = fopen(path, "r");
            size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
            if (f) fclose(f);
            buf[n] = 0;
            const char *paren = strrchr(buf, ')');
            int ppid = 0;
            if (paren && sscanf(paren + 1, " %*c %d", &ppid) == 1 && ppid == (int)rec)
                attached = perf_fds(pid) >= cpus;
        }
        closedir(proc);
        if (attached) return;
        int status;
        cr_assert_eq(waitpid(rec, &status, WNOHANG), 0, "record ended before attaching");
        cr_assert_lt(waited_ms, 60000, "record did not attach in 60 s");
        sleep_s(0.02);
    }
}

/* Waits for record (pid rec, started by start_attach); *code gets its exit
 * status; returns its stderr. */
static char *finish_attach(pid_t rec, int *code) {
    int status = 0;
    cr_assert_eq(tu_wait_child(rec, 60, &status), 0, "record did not end");
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    char *errp = path_in_dir("stderr"), *text = tu_read_file(errp, NULL);
    cr_assert_not_null(text);
    free(errp);
    return text;
}

/* Creates DIR/go: a waiting target goes on. */
static void let_go(void) {
    char *go = path_in_dir("go");
    FILE *f = fopen(go, "w");
    cr_assert_not_null(f);
    fclose(f);
    free(go);
}

/* Waits for the target; its exit status (-1: killed or not over in 60 s). */
static int target_status(pid_t pid) {
    int status = 0;
    cr_assert_eq(tu_wait_child(pid, 60, &status), 0, "the target did not end");
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* -p on a process whose two threads already run: both are sampled at the
 * rate of the CPU time they used while attached, named as in /proc; after
 * --duration record ends and the process runs on to its normal end. */
Test(record_perf, attach_to_running_threads) {
    need_perf();
    pid_t pid = start_target("threads", "3");
    sleep_s(0.3); /* the threads exist and are named */
    char opts[64];
    snprintf(opts, sizeof opts, "-p %d --duration 1", (int)pid);
    double before = user_cpu(pid);
    int code;
    char *err = record_opts(opts, &code);
    double used = user_cpu(pid) - before;
    cr_assert_eq(kill(pid, 0), 0, "the target did not survive the recording: %s", err);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "backend perf"), "%s", err);
    counts c = read_trace();
    cr_expect(c.spinner && c.blocker, "thread names missing: %s", err);
    cr_expect_gt(c.hot, c.cold, "%s", err);
    cr_expect_gt(c.blocked, 0, "%s", err);
    /* used also spans record's start and end around the second sampled
     * (a large part of it on a loaded machine or under ASan: the exact rate
     * is attach_follows_new_threads_until_exit's); utime ticks at 100 Hz */
    double want = used * HZ;
    cr_expect(c.total >= want * 0.35 - 2 && c.total <= want * 1.15 + 2,
              "%llu samples for %.2f CPU-seconds used while attached (want ~%.0f): %s",
              (unsigned long long)c.total, used, want, err);
    cr_expect_geq(c.rooted * 100, c.known * 95, "%llu of %llu stacks reach start_thread", (unsigned long long)c.rooted,
                  (unsigned long long)c.known);
    cr_expect_eq(target_status(pid), 0, "the target's own end changed");
    free(err);
}

/* Threads a process starts after record attached are sampled (inherit),
 * with the names they give themselves; record ends when the process does.
 * The target starts its threads once record has attached. */
Test(record_perf, attach_follows_new_threads_until_exit) {
    need_perf();
    char *go = path_in_dir("go");
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(126);
        execl(TM_RECORD_PERF_TARGET, TM_RECORD_PERF_TARGET, "late", "0.5", go, (char *)NULL);
        _exit(126);
    }
    free(go);
    char pid_text[16];
    snprintf(pid_text, sizeof pid_text, "%d", (int)pid);
    pid_t rec = start_attach(pid_text);
    wait_attached(rec);
    let_go();
    int code;
    char *err = finish_attach(rec, &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    counts c = read_trace();
    cr_expect(c.spinner && c.blocker, "thread names missing: %s", err);
    expect_rate(c.hot + c.cold, 0.5, "spinner, started after attaching");
    expect_rate(c.blocked, 0.5, "blocker, started after attaching");
    cr_expect_eq(target_status(pid), 0);
    free(err);
}

/* A child process started after attaching is followed; -p takes a list.
 * sh starts it once record has attached (to sh, the first listed). */
Test(record_perf, attach_follows_new_children) {
    need_perf();
    char *go = path_in_dir("go"), *script = NULL;
    cr_assert_gt(asprintf(&script, "while [ ! -e %s ]; do sleep 0.02; done; " TM_RECORD_PERF_TARGET " child 0.5", go),
                 0);
    pid_t sh = start_target(NULL, script);
    pid_t idle = start_target(NULL, "exec sleep 60");
    free(go), free(script);
    char pids[64];
    snprintf(pids, sizeof pids, "%d,%d", (int)sh, (int)idle);
    pid_t rec = start_attach(pids);
    wait_attached(rec);
    let_go();
    /* record ends when both have: idle, once sh's child has run */
    cr_expect_eq(target_status(sh), 0);
    kill(idle, SIGTERM);
    int code;
    char *err = finish_attach(rec, &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    expect_rate(read_trace().child, 0.5, "the child of sh");
    /* both listed, and what sh started after (how many: the shell's choice) */
    const char *in = strstr(err, " processes;");
    while (in && in > err && in[-1] >= '0' && in[-1] <= '9') in--;
    cr_expect(in && atoi(in) >= 2, "%s", err);
    target_status(idle);
    free(err);
}

/* SIGINT (Ctrl-C or kill) to record ends the recording; the process
 * attached to is not signalled. */
Test(record_perf, attach_ends_on_sigint) {
    need_perf();
    pid_t pid = start_target("child", "30");
    char *trace = path_in_dir("t.pftrace"), *errp = path_in_dir("stderr"), pid_text[16];
    snprintf(pid_text, sizeof pid_text, "%d", (int)pid);
    pid_t rec = fork();
    cr_assert_geq(rec, 0);
    if (rec == 0) {
        if (!freopen(errp, "w", stderr)) _exit(126);
        execl(TM_CLI, TM_CLI, "record", "-p", pid_text, "-o", trace, (char *)NULL);
        _exit(126);
    }
    wait_attached(rec);
    sleep_s(0.5); /* a few samples */
    cr_assert_eq(kill(rec, SIGINT), 0);
    int status = 0;
    cr_assert_eq(tu_wait_child(rec, 30, &status), 0, "record did not end on SIGINT");
    char *text = tu_read_file(errp, NULL);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x: %s", status, text ? text : "");
    cr_expect_gt(read_trace().child, 0);
    cr_expect_eq(kill(pid, 0), 0, "the target was signalled");
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    free(text), free(trace), free(errp);
}

/* A process that does not exist, or may not be attached to: 125, a message
 * naming it and the reason, and OUT left as it was. */
Test(record_perf, attach_failures_leave_out_alone) {
    need_perf();
    char *trace = path_in_dir("t.pftrace");
    FILE *f = fopen(trace, "w");
    cr_assert_not_null(f);
    fputs("mine", f);
    fclose(f);
    pid_t gone = start_target(NULL, "exit 0");
    cr_assert_eq(target_status(gone), 0);
    char opts[32];
    snprintf(opts, sizeof opts, "-p %d", (int)gone);
    int code;
    char *err = record_opts(opts, &code);
    char want[64];
    snprintf(want, sizeof want, "process %d: No such process", (int)gone);
    cr_expect_eq(code, 125, "exit %d: %s", code, err);
    cr_expect(strstr(err, want), "%s", err);
    free(err);
    /* Without the capabilities that let root attach anywhere, pid 1 (not
     * ours to ptrace then) is refused. */
    if (getuid() == 0 && access("/usr/bin/setpriv", X_OK) == 0) {
        char *errp = path_in_dir("stderr"), *cmd = NULL;
        cr_assert_gt(asprintf(&cmd, "setpriv --bounding-set -perfmon,-sys_admin,-sys_ptrace %s record -p 1 -o %s 2>%s",
                              TM_CLI, trace, errp),
                     0);
        int st = system(cmd);
        err = tu_read_file(errp, NULL);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 125, "status %#x: %s", st, err);
        cr_expect(err && strstr(err, "process 1 ") && strstr(err, "Permission denied") &&
                      strstr(err, "perf_event_paranoid"),
                  "%s", err ? err : "");
        free(err), free(cmd), free(errp);
    }
    char *kept = tu_read_file(trace, NULL);
    cr_expect(kept && strcmp(kept, "mine") == 0, "OUT was replaced");
    free(kept), free(trace);
}

/* -p with a program, or with the signal backend, is a usage error. */
Test(record_perf, attach_usage) {
    int code;
    char *err = record_opts("-p 1 -- true", &code);
    cr_expect_eq(code, 2, "%s", err);
    cr_expect(strstr(err, "give no program"), "%s", err);
    free(err);
    err = record_opts("--backend signal -p 1", &code);
    cr_expect_eq(code, 2, "%s", err);
    cr_expect(strstr(err, "-p needs --backend perf"), "%s", err);
    free(err);
    err = record_opts("-p 12x", &code);
    cr_expect_eq(code, 2, "%s", err);
    free(err);
    err = record_opts("-a -p 1", &code);
    cr_expect_eq(code, 2, "%s", err);
    free(err);
    err = record_opts("-a -- true", &code);
    cr_expect_eq(code, 2, "%s", err);
    cr_expect(strstr(err, "-a records running processes"), "%s", err);
    free(err);
}

/* --duration with a program: sampling stops after S seconds, the program
 * runs on to its end, and record exits with its status once it has. The
 * CPU time it used after sampling stopped is not taken for undersampling. */
Test(record_perf, duration_with_a_command) {
    need_perf();
    int code;
    char *err = record_with(HZ, "--duration 1", "sh -c '" TM_RECORD_PERF_TARGET " child 5.0; exit 4'", &code);
    cr_assert_eq(code, 4, "exit %d: %s", code, err);
    cr_expect(strstr(err, "sampling stopped after 1 s"), "%s", err);
    cr_expect(!strstr(err, "samples' worth"), "%s", err);
    cr_expect(strstr(err, "sampled for its first 1 s"), "%s", err);
    uint64_t n = read_trace().child;
    /* at most one second of CPU time: a single CPU for the program */
    cr_expect(n > 0 && n <= HZ * 1.1, "%llu samples in a 1 s recording: %s", (unsigned long long)n, err);
    free(err);
}

/* ---- kernel frames, truncated stacks ---- */

/* The single integer SQL gives for DIR/t.pftrace (tracemill's Trace
 * Processor model); also checks the trace is encoded as Perfetto reads it. */
static int64_t sql_int(const char *sql) {
    size_t len = 0;
    char *bytes = trace_bytes(&len);
    char why[256] = "";
    cr_expect_eq(tc_check_trace((const uint8_t *)bytes, len, why, sizeof why), 0, "%s", why);
    tm_db *db = NULL;
    tm_error e;
    cr_assert_eq(tm_db_new(bytes, len, NULL, &db, &e), TM_OK, "%s", e.message);
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db), sql, -1, &q, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(tm_db_sqlite(db)));
    cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
    int64_t v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    tm_db_free(db);
    free(bytes);
    return v;
}

/* --kernel: a program reading /dev/zero spends its time in the kernel;
 * its samples are in kernel mode, and their stacks go from _start through
 * kernel_spin and read into the kernel's vfs_read, named from kallsyms, in
 * the [kernel.kallsyms] mapping. */
Test(record_perf, kernel_frames) {
    need_perf();
    int code;
    /* without LeakSanitizer's exit-time check in the ASan build: a task of
     * its own, sampled (in user mode, outside vfs_read) */
    char *err = record_with(HZ, "--kernel", "env ASAN_OPTIONS=detect_leaks=0 " TM_RECORD_PERF_TARGET " kernel 0.5", &code);
    if (code == 125 && strstr(err, "--kernel"))
        cr_skip_test("this kernel refuses kernel samples here: %s", err); /* the refusal is tested below */
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    char *folded = folded_text();
    static const char *const path[] = {"_start", "main", "kernel_spin", "vfs_read"};
    counts c = read_trace();
    uint64_t through = folded_with(folded, path, 4);
    cr_expect_geq(through * 2, c.total, "%llu of %llu stacks go from _start to vfs_read:\n%s",
                  (unsigned long long)through, (unsigned long long)c.total, folded);
    int64_t kernel_mode = sql_int("SELECT count(*) FROM perf_sample WHERE cpu_mode = 'kernel'");
    cr_expect_geq(kernel_mode * 2, (int64_t)c.total, "%lld of %llu samples in kernel mode", (long long)kernel_mode,
                  (unsigned long long)c.total);
    /* one per process the trace has (an ASan build's runtime may start one more) */
    cr_expect_geq(sql_int("SELECT count(*) FROM stack_profile_mapping WHERE name LIKE '%[kernel.kallsyms]'"), 1);
    free(folded);
    free(err);
    /* Without --kernel nothing of the kernel is there (the second program
     * is there to be sampled in user mode: the first hardly ever is). */
    err = record("sh -c '" TM_RECORD_PERF_TARGET " kernel 0.3; " TM_RECORD_PERF_TARGET " child 0.2'", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect_eq(sql_int("SELECT count(*) FROM perf_sample WHERE cpu_mode = 'kernel'"), 0);
    cr_expect_eq(sql_int("SELECT count(*) FROM stack_profile_mapping WHERE name LIKE '%kallsyms%'"), 0);
    free(err);
}

/* Where the kernel refuses kernel samples (here: without CAP_PERFMON and
 * CAP_SYS_ADMIN, with perf_event_paranoid >= 2), --kernel fails with 125
 * and says which setting it needs. */
Test(record_perf, kernel_frames_refused) {
    need_perf();
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int paranoid = 0;
    cr_assert(f && fscanf(f, "%d", &paranoid) == 1);
    fclose(f);
    if (paranoid < 2 || getuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0)
        cr_skip_test("kernel samples are refused only with perf_event_paranoid >= 2 (here %d) and without "
                     "capabilities (setpriv as root drops them)", paranoid);
    char *errp = path_in_dir("stderr"), *trace = path_in_dir("t.pftrace"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "setpriv --bounding-set -perfmon,-sys_admin %s record --kernel -o %s -- true 2>%s",
                          TM_CLI, trace, errp),
                 0);
    int st = system(cmd);
    char *err = tu_read_file(errp, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 125, "status %#x: %s", st, err);
    cr_expect(err && strstr(err, "--kernel") && strstr(err, "kernel.perf_event_paranoid <= 1"), "%s", err ? err : "");
    cr_expect_neq(access(trace, F_OK), 0, "a trace was written");
    free(err), free(cmd), free(errp), free(trace);
}

/* A stack deeper than --max-depth: cut there, a [truncated] frame at its
 * root end, unwind_error max_frames_exceeded on every such sample, and
 * the count in record's report, with either backend. */
static void expect_truncated(const char *backend) {
    if (strcmp(backend, "signal") == 0) tu_asan_recorded_child_env();
    char opts[512];
    snprintf(opts, sizeof opts, "--backend %s --max-depth 40 -- " TM_RECORD_PERF_TARGET " deep 0.3", backend);
    int code;
    char *err = record_opts(opts, &code);
    cr_assert_eq(code, 0, "%s: exit %d: %s", backend, code, err);
    counts c = read_trace();
    cr_assert_gt(c.hot, 0, "%s", err);
    char *folded = folded_text();
    static const char *const path[] = {"[truncated]", "deep_recurse", "spin_hot"};
    uint64_t marked = folded_with(folded, path, 3), short_stacks = 0;
    /* The mark is the root: a line through spin_hot without it is a stack
     * whose unwinding stopped early (on a loaded machine the kernel's copy
     * of the stack may come short), so it has fewer frames than the cut. */
    for (const char *line = folded; line && *line;) {
        const char *nl = strchr(line, '\n'), *space = memrchr(line, ' ', nl ? (size_t)(nl - line) : strlen(line));
        cr_assert_not_null(space);
        size_t len = (size_t)(space - line), frames = 1;
        for (size_t i = 0; i < len; i++) frames += line[i] == ';';
        int hot = memmem(line, len, "spin_hot", 8) != NULL;
        if ((hot || memmem(line, len, "deep_recurse", 12)) && strncmp(line, "[truncated];deep_recurse;", 25) != 0) {
            cr_expect_lt(frames, 40, "%s: %zu frames not marked at the root: %.200s", backend, frames, line);
            if (hot) short_stacks += strtoull(space + 1, NULL, 10);
        }
        line = nl ? nl + 1 : NULL;
    }
    cr_expect_eq(marked + short_stacks, c.hot, "%s: %llu + %llu of %llu samples of spin_hot", backend,
                 (unsigned long long)marked, (unsigned long long)short_stacks, (unsigned long long)c.hot);
    cr_expect_leq(short_stacks * 4, c.hot, "%s: %llu of %llu samples of spin_hot are not marked [truncated]",
                  backend, (unsigned long long)short_stacks, (unsigned long long)c.hot);
    if (strcmp(backend, "perf") == 0) { /* record's report counts them */
        const char *at = strstr(err, " partial,");
        cr_assert(at, "%s", err);
        while (at > err && at[-1] >= '0' && at[-1] <= '9') at--;
        unsigned long long partial = strtoull(at, NULL, 10);
        cr_expect_leq(short_stacks, partial, "perf: %llu short stacks, %llu partial in the report",
                      (unsigned long long)short_stacks, partial);
    }
    /* every sample cut is flagged, and only those (an ASan build's start-up has short stacks) */
    int64_t flagged = sql_int("SELECT count(*) FROM perf_sample WHERE unwind_error = 'max_frames_exceeded'");
    cr_expect_eq(flagged, (int64_t)folded_with(folded, path, 1), "%s: %lld samples flagged", backend,
                 (long long)flagged);
    char want[64];
    if (strcmp(backend, "perf") == 0) snprintf(want, sizeof want, " %lld cut at 40 frames", (long long)flagged);
    else snprintf(want, sizeof want, ": %lld of %llu stacks cut at --max-depth", (long long)flagged,
                  (unsigned long long)c.total);
    cr_expect(strstr(err, want), "%s: no \"%s\" in:\n%s", backend, want, err);
    free(folded);
    free(err);
}

Test(record_perf, truncated_stacks_marked_and_counted) {
    need_perf();
    expect_truncated("perf");
    expect_truncated("signal");
    /* Stacks that fit are not marked. */
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " deep 0.2", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect_eq(sql_int("SELECT count(*) FROM perf_sample WHERE unwind_error IS NOT NULL"), 0);
    cr_expect(strstr(err, " 0 cut at"), "%s", err);
    free(err);
}

/* ---- JIT frames: /tmp/perf-PID.map ---- */

/* Samples whose leaf frame is name, in the folded stacks. */
static uint64_t leaf_is(const char *folded, const char *name) {
    uint64_t n = 0;
    size_t len = strlen(name);
    for (const char *line = folded; line && *line;) {
        const char *nl = strchr(line, '\n'), *space = strrchr(line, ' ');
        if (nl) space = memrchr(line, ' ', (size_t)(nl - line));
        cr_assert_not_null(space);
        if ((size_t)(space - line) >= len && memcmp(space - len, name, len) == 0 &&
            (space - len == line || space[-(long)len - 1] == ';'))
            n += strtoull(space + 1, NULL, 10);
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

/* Code a program generates at run time (in memory it makes executable with
 * mprotect, which no MMAP record reports) and names in /tmp/perf-PID.map
 * while it runs is named so in the trace, with either backend. */
static void expect_jit_named(const char *backend) {
    if (strcmp(backend, "signal") == 0) tu_asan_recorded_child_env();
    char opts[512];
    snprintf(opts, sizeof opts, "--backend %s -- " TM_RECORD_PERF_TARGET " jit 0.5 >%s/stdout", backend, tu_test_dir());
    int code;
    char *err = record_opts(opts, &code);
    char *out_path = path_in_dir("stdout"), *out = tu_read_file(out_path, NULL);
    int pid = 0;
    if (out && sscanf(out, "jit %d", &pid) == 1) {
        char map[64];
        snprintf(map, sizeof map, "/tmp/perf-%d.map", pid);
        unlink(map);
    }
    cr_assert_eq(code, 0, "%s: exit %d: %s", backend, code, err);
    cr_assert_gt(pid, 0, "%s: no pid printed", backend);
    char *folded = folded_text();
    /* the samples after the dynamic loader's start-up (where an ASan build's runtime spends some) */
    static const char *const init[] = {"_dl_init"}, *const start[] = {"_dl_start"};
    uint64_t total = read_trace().total - folded_with(folded, init, 1) - folded_with(folded, start, 1);
    uint64_t named = leaf_is(folded, "tmtest_jitted_loop");
    cr_expect_gt(total, 20, "%s", err);
    cr_expect_geq(named * 10, total * 9, "%s: %llu of %llu samples have tmtest_jitted_loop on top:\n%s", backend,
                  (unsigned long long)named, (unsigned long long)total, folded);
    free(folded), free(out), free(out_path), free(err);
}

Test(record_perf, jit_frames_from_perf_map) {
    need_perf();
    expect_jit_named("perf");
    expect_jit_named("signal");
}

/* ---- system-wide: -a ---- */

/* -a records every process (here, where root has CAP_PERFMON): a program
 * the recorder knows nothing of is there, named, with its own process and
 * at the rate of the CPU time it used; --duration ends it. */
Test(record_perf, system_wide) {
    need_perf();
    pid_t pid = start_target("child", "30");
    sleep_s(0.2);
    double before = user_cpu(pid);
    int code;
    char *err = record_opts("-a --duration 1", &code);
    double used = user_cpu(pid) - before;
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    if (code == 125 && strstr(err, "perf_event_paranoid <= 0"))
        cr_skip_test("system-wide recording is refused here (the refusal is tested below): %s", err);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    uint64_t n = read_trace().child;
    /* used spans record's whole run, longer than the second sampled: no
     * more samples than it stands for, and on a shared machine at least a
     * tenth of a second's worth */
    double want = used * HZ;
    cr_expect(n >= 10 && n <= want * 1.15 + 2, "%llu samples of child_spin for %.2f CPU-seconds: %s",
              (unsigned long long)n, used, err);
    cr_expect_geq(sql_int("SELECT count(*) FROM perf_sample s JOIN thread USING (utid) JOIN process p "
                          "USING (upid) WHERE p.name LIKE '%record_perf_target%'"),
                  (int64_t)n);
    /* one second, not the time the recorder took to catch up */
    cr_expect_lt(sql_int("SELECT max(ts) - min(ts) FROM perf_sample"), 1100000000);
    free(err);
}

/* Where the kernel does not allow it (perf_event_paranoid > 0 and no
 * CAP_PERFMON / CAP_SYS_ADMIN), -a exits 125 naming the setting it needs. */
Test(record_perf, system_wide_refused) {
    need_perf();
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int paranoid = 0;
    cr_assert(f && fscanf(f, "%d", &paranoid) == 1);
    fclose(f);
    if (paranoid < 1 || getuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0)
        cr_skip_test("-a is refused only with perf_event_paranoid >= 1 (here %d) and without capabilities "
                     "(setpriv as root drops them)", paranoid);
    char *errp = path_in_dir("stderr"), *trace = path_in_dir("t.pftrace"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "setpriv --bounding-set -perfmon,-sys_admin %s record -a --duration 1 -o %s 2>%s",
                          TM_CLI, trace, errp),
                 0);
    int st = system(cmd);
    char *err = tu_read_file(errp, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 125, "status %#x: %s", st, err);
    cr_expect(err && strstr(err, "system-wide") && strstr(err, "kernel.perf_event_paranoid <= 0"), "%s",
              err ? err : "");
    cr_expect_neq(access(trace, F_OK), 0, "a trace was written");
    free(err), free(cmd), free(errp), free(trace);
}

/* Sums the folded lines (of value v) of the trace DIR/t.pftrace whose
 * stack holds frame (NULL: every line); *total gets every line's sum. */
static uint64_t folded_sum(tm_value v, const char *frame, uint64_t *total) {
    char *folded = folded_of(v);
    *total = folded_with(folded, NULL, 0);
    uint64_t sum = folded_with(folded, &frame, frame ? 1 : 0);
    free(folded);
    return sum;
}

/* The value of "NAME N" in the target's output (DIR/stdout). */
static int64_t target_said(const char *name) {
    char *path = path_in_dir("stdout"), *text = tu_read_file(path, NULL), *at = text ? strstr(text, name) : NULL;
    cr_assert_not_null(at, "the target did not print %s", name);
    int64_t v = strtoll(at + strlen(name), NULL, 10);
    free(text);
    free(path);
    return v;
}

/* --off-cpu: the target blocks 30 ms in wait_here and spins 20 ms of CPU
 * time in spin_here, by turns, for 1.5 s. The off-CPU samples' time under
 * wait_here is what the program itself measured around its waits (within
 * 5 %), and nearly all the time main spent off the CPU but spin_here's
 * (preempted, on a busy machine); the CPU samples, the default, are as without --off-cpu:
 * spin_here at the rate of its CPU time, hardly any in wait_here. Trace
 * Processor's perf_sample holds both kinds; convert --samples picks them. */
Test(record_perf, off_cpu_time_and_stacks) {
    need_perf();
    int code;
    char *err = record_with(HZ, "--off-cpu", TM_RECORD_PERF_TARGET " offcpu 1.5", &code);
    if (code == 125 && strstr(err, "--off-cpu"))
        cr_skip_test("this kernel refuses off-CPU samples here: %s", err); /* the refusal is tested below */
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "off-CPU: "), "%s", err);
    int64_t blocked = target_said("blocked "), spun = target_said("spun ");
    cr_assert_gt(blocked, 0);
    uint64_t off_total, on_total;
    uint64_t off_wait = folded_sum(TM_VALUE_OFF_CPU, "wait_here", &off_total);
    cr_expect(off_wait >= (uint64_t)(blocked * 0.95) && off_wait <= (uint64_t)(blocked * 1.05),
              "off-CPU under wait_here: %llu ns, the program measured %lld ns", (unsigned long long)off_wait,
              (long long)blocked);
    /* the rest of main's is spin_here preempted (a busy machine: often as
     * long as it spun); outside main, the loader and a sanitizer's runtime
     * (LeakSanitizer stopping the world at exit) */
    uint64_t off_spin = folded_sum(TM_VALUE_OFF_CPU, "spin_here", &off_total),
             off_main = folded_sum(TM_VALUE_OFF_CPU, "main", &off_total);
    cr_expect_geq(off_wait * 10, (off_main - off_spin) * 9, "wait_here: %llu of %llu ns off the CPU in main (%llu in "
                  "spin_here, %llu in all)", (unsigned long long)off_wait, (unsigned long long)off_main,
                  (unsigned long long)off_spin, (unsigned long long)off_total);
    uint64_t on_spin = folded_sum(TM_VALUE_SAMPLES, "spin_here", &on_total);
    uint64_t on_wait = folded_sum(TM_VALUE_SAMPLES, "wait_here", &on_total);
    expect_rate(on_spin, (double)spun / 1e9, "spin_here");
    cr_expect_leq(on_wait * 20, on_total, "%llu of %llu CPU samples in wait_here", (unsigned long long)on_wait,
                  (unsigned long long)on_total);
    /* wall: both, a CPU sample weighing its period */
    uint64_t wall_total, wall_wait = folded_sum(TM_VALUE_WALL, "wait_here", &wall_total);
    cr_expect_eq(wall_total, off_total + on_total * (1000000000 / HZ));
    cr_expect_geq(wall_wait, off_wait);
    /* the stats, and Trace Processor's view: every sample of both kinds */
    int64_t rows = sql_int("SELECT count(*) FROM perf_sample WHERE callsite_id IS NOT NULL");
    cr_expect_eq(rows, sql_int("SELECT count(*) FROM perf_sample WHERE cpu_mode = 'kernel'") + (int64_t)on_total,
                 "off-CPU samples are taken in kernel mode, the CPU ones in user mode");
    free(err);
    /* the CLI's choice of samples */
    char *trace = path_in_dir("t.pftrace"), *out = path_in_dir("off.folded"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s convert -f folded --no-lines --samples off-cpu %s -o %s", TM_CLI, trace, out), 0);
    cr_expect_eq(system(cmd), 0, "%s", cmd);
    char *text = tu_read_file(out, NULL);
    cr_expect(text && strstr(text, "wait_here"), "%s", text ? text : "");
    free(text), free(cmd);
    cr_assert_gt(asprintf(&cmd, "%s convert -f folded --no-lines --samples sideways %s 2>/dev/null", TM_CLI, trace), 0);
    int st = system(cmd);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) != 0, "a bad --samples was accepted");
    free(cmd), free(out), free(trace);
}

/* Where the kernel refuses sampling context switches (kernel mode: here
 * without CAP_PERFMON and CAP_SYS_ADMIN, with perf_event_paranoid >= 2),
 * --off-cpu fails with 125 and says which setting it needs; with the
 * signal backend it is a usage error. */
Test(record_perf, off_cpu_refused) {
    need_perf();
    int code;
    char *err = record_with(HZ, "--backend signal --off-cpu", "true", &code);
    cr_expect_eq(code, 2, "%s", err);
    cr_expect(strstr(err, "--off-cpu needs --backend perf"), "%s", err);
    free(err);
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
    int paranoid = 0;
    cr_assert(f && fscanf(f, "%d", &paranoid) == 1);
    fclose(f);
    if (paranoid < 2 || getuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0)
        cr_skip_test("off-CPU samples are refused only with perf_event_paranoid >= 2 (here %d) and without "
                     "capabilities (setpriv as root drops them)", paranoid);
    char *errp = path_in_dir("stderr"), *trace = path_in_dir("t.pftrace"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "setpriv --bounding-set -perfmon,-sys_admin %s record --off-cpu -o %s -- true 2>%s",
                          TM_CLI, trace, errp),
                 0);
    int st = system(cmd);
    err = tu_read_file(errp, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 125, "status %#x: %s", st, err);
    cr_expect(err && strstr(err, "--off-cpu") && strstr(err, "kernel.perf_event_paranoid <= 1"), "%s", err ? err : "");
    cr_expect_neq(access(trace, F_OK), 0, "a trace was written");
    free(err), free(cmd), free(errp), free(trace);
}

/* Off-CPU time split by why the thread left the CPU: two threads spinning
 * on one CPU preempt each other (their off-CPU stacks end in "[preempted]"),
 * a thread waiting in poll blocks ("[blocked]", as long as the program
 * measured around its waits); info, the report and tm_trace_stats count
 * both, and SQL shows the marker frames. */
Test(record_perf, off_cpu_preempted_or_blocked) {
    need_perf();
    int code;
    char *err = record_with(HZ, "--off-cpu", TM_RECORD_PERF_TARGET " preempt 0.5", &code);
    if (code == 125 && strstr(err, "--off-cpu"))
        cr_skip_test("this kernel refuses off-CPU samples here: %s", err);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    cr_expect(strstr(err, "preempted ("), "%s", err);
    int64_t blocked = target_said("blocked ");
    cr_assert_gt(blocked, 0);
    char *off = folded_of(TM_VALUE_OFF_CPU);
    static const char *const spin_preempted[] = {"spin_for", "[preempted]"}, *const spin_blocked[] = {"spin_for", "[blocked]"},
                             *const wait_blocked[] = {"wait_here", "[blocked]"}, *const wait_any[] = {"wait_here"},
                             *const preempted[] = {"[preempted]"}, *const all[] = {"[blocked]"};
    uint64_t spun_off = folded_with(off, spin_preempted, 2), spun_blocked = folded_with(off, spin_blocked, 2);
    uint64_t waited = folded_with(off, wait_blocked, 2), waited_any = folded_with(off, wait_any, 1);
    cr_log_info("preempt 0.5: spinners preempted %.3f s, blocked %.3f s; wait_here blocked %.3f s of %.3f s, "
                "the program measured %.3f s",
                (double)spun_off * 1e-9, (double)spun_blocked * 1e-9, (double)waited * 1e-9, (double)waited_any * 1e-9,
                (double)blocked * 1e-9);
    /* each spinner waits while the other runs: about 0.5 s each */
    cr_expect_gt(spun_off, 500000000, "the spinners were preempted for %llu ns", (unsigned long long)spun_off);
    cr_expect_lt(spun_blocked * 20, spun_off, "spinners 'blocked' %llu ns, preempted %llu ns",
                 (unsigned long long)spun_blocked, (unsigned long long)spun_off);
    /* wait_here's time off the CPU is what the program measured around its
     * waits; most of it blocked in poll, the rest preempted around it (its
     * CPU is the spinners' too) */
    cr_expect(waited_any >= (uint64_t)(blocked * WAIT_LOW) && waited_any <= (uint64_t)(blocked * 1.05),
              "off the CPU under wait_here: %llu ns, the program measured %lld ns", (unsigned long long)waited_any,
              (long long)blocked);
    cr_expect_geq(waited * 100, waited_any * 60, "wait_here: %llu of %llu ns blocked", (unsigned long long)waited,
                  (unsigned long long)waited_any);
    /* the counts: tm_trace_stats, info, SQL */
    char *bytes;
    tm_trace *t = parse_recorded(NULL, &bytes);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_expect_eq(st->off_cpu_preempted_ns, folded_with(off, preempted, 1));
    cr_expect_eq(st->off_cpu_ns - st->off_cpu_preempted_ns, folded_with(off, all, 1));
    cr_expect_gt(st->off_cpu_preempted_samples, 0);
    cr_expect_lt(st->off_cpu_preempted_samples, st->off_cpu_samples);
    tm_trace_free(t);
    char *cmd = NULL, *info = path_in_dir("info"), *path = path_in_dir("t.pftrace");
    cr_assert_gt(asprintf(&cmd, "%s info %s >%s", TM_CLI, path, info), 0);
    cr_expect_eq(system(cmd), 0);
    char *text = tu_read_file(info, NULL);
    cr_expect(text && strstr(text, "preempted while runnable"), "%s", text ? text : "");
    cr_expect_gt(sql_int("SELECT count(*) FROM stack_profile_frame WHERE name = '[preempted]'"), 0);
    cr_expect_gt(sql_int("SELECT count(*) FROM perf_sample s JOIN stack_profile_callsite c ON s.callsite_id = c.id "
                         "JOIN stack_profile_frame f ON c.frame_id = f.id WHERE f.name = '[preempted]'"),
                 0);
    free(text), free(cmd), free(info), free(path), free(bytes), free(off), free(err);
}

/* ---- real programs ---- */

/* The program's output alone and under record: the same bytes. */
static void expect_same_output(const char *alone, const char *under, const char *program) {
    size_t n_alone = 0, n_under = 0;
    char *a = tu_read_file(alone, &n_alone), *b = tu_read_file(under, &n_under);
    cr_assert(a && b);
    cr_expect(n_alone == n_under && memcmp(a, b, n_alone) == 0, "%s's output differs under record", program);
    free(a), free(b);
}

/* coreutils' `sort --parallel=2` (on every machine the suite runs on): under
 * record it writes the same bytes and exits as it does alone, and both of
 * its sorting threads are sampled, though nothing is injected into it. */
Test(record_perf, sort_parallel_unchanged_and_sampled) {
    need_perf();
    char *in = path_in_dir("numbers"), *alone = path_in_dir("alone"), *under = path_in_dir("under"), *cmd = NULL,
         *args = NULL;
    cr_assert_gt(asprintf(&cmd, "seq 1 1500000 | shuf > %s && sort --parallel=2 -n %s -o %s", in, in, alone), 0);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_assert_gt(asprintf(&args, "sort --parallel=2 -n %s -o %s", in, under), 0);
    int code;
    char *err = record(args, &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    expect_same_output(alone, under, "sort");
    cr_expect_gt(sql_int("select count(*) from perf_sample"), 10, "%s", err);
    cr_expect_geq(sql_int("select count(distinct utid) from perf_sample"), 2, "one thread sampled: %s", err);
    free(err), free(cmd), free(args), free(in), free(alone), free(under);
}

/* The CPU time record says the command used in user mode ("used X s of
 * CPU time in user mode"), or a negative value. */
static double said_user_cpu(const char *err) {
    const char *at = strstr(err, " s of CPU time in user mode");
    if (!at) return -1;
    while (at > err && at[-1] != ' ') at--;
    return strtod(at, NULL);
}

/* 150 threads of 20 ms of CPU time each, two at a time: each is sampled
 * from its first instruction (inherited events), so the samples in
 * short_spin stand for their CPU time; perf record gives 215 here. */
Test(record_perf, short_lived_threads_sampled) {
    need_perf();
    int code;
    char *err = record(TM_RECORD_PERF_TARGET " short 3", &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    char *folded = folded_of(TM_VALUE_DEFAULT);
    static const char *const in_short[] = {"short_thread", "short_spin"};
    uint64_t n = folded_with(folded, in_short, 2);
    expect_rate(n, 3.0, "150 short threads");
    cr_expect_gt(sql_int("select count(distinct utid) from perf_sample"), 100, "threads sampled: %s", err);
    free(folded), free(err);
}

/* xz -T2 compresses on two threads that block every signal: the perf
 * backend samples both at the rate of the CPU time record says xz used, and
 * xz writes the same bytes; the signal backend, which cannot sample them,
 * says so and names the perf backend. */
Test(record_perf, xz_threads_sampled) {
    need_perf();
    if (system("command -v xz >/dev/null 2>&1") != 0) cr_skip_test("xz is not installed");
    char *in = path_in_dir("input"), *alone = path_in_dir("alone.xz"), *under = path_in_dir("under.xz"),
         *cmd = NULL, *args = NULL;
    /* 2.7 MB of numbers in random order, in 1 MiB blocks: one per thread */
    cr_assert_gt(asprintf(&cmd,
                          "seq 1 400000 | shuf --random-source=/dev/zero > %s && "
                          "xz -T2 -6 --block-size=1MiB -c %s > %s",
                          in, in, alone),
                 0);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_assert_gt(asprintf(&args, "sh -c 'xz -T2 -6 --block-size=1MiB -c %s > %s'", in, under), 0);
    int code;
    char *err = record(args, &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    expect_same_output(alone, under, "xz");
    double cpu = said_user_cpu(err);
    cr_assert_gt(cpu, 0.1, "record did not say xz's CPU time: %s", err);
    int64_t samples = sql_int("select count(*) from perf_sample");
    expect_rate((uint64_t)samples, cpu, "xz -T2");
    cr_expect_geq(sql_int("select count(distinct utid) from perf_sample s join thread using (utid) "
                          "where thread.name = 'xz'"),
                  2, "xz's threads: %s", err);
    free(err);

    err = record_on("signal", HZ, "", args, &code);
    cr_expect(strstr(err, "samples were taken") && strstr(err, "--backend perf"),
              "the signal backend left xz unsampled without a word: %s", err);
    free(err), free(cmd), free(args), free(in), free(alone), free(under);
}

/* make -j2 of a small C project: every compiler process make starts is
 * followed, most samples are in cc1 (the compiler proper), and the objects
 * are built as without record. */
Test(record_perf, make_children_followed) {
    need_perf();
    if (system("command -v make >/dev/null 2>&1 && command -v cc >/dev/null 2>&1") != 0)
        cr_skip_test("make or cc is not installed");
    char *dir = path_in_dir("proj"), *cmd = NULL;
    /* four files of 150 generated functions each: a few seconds of -O2 */
    cr_assert_gt(asprintf(&cmd,
                          "mkdir -p %s && cd %s && for f in a b c d; do i=0; while [ $i -lt 150 ]; do "
                          "echo \"int ${f}_$i(int x) { int s = 0; for (int k = 0; k < x; k++) s += k * $i ^ (s >> 3); "
                          "return s; }\"; i=$((i+1)); done > $f.c; done && "
                          "printf 'all: a.o b.o c.o d.o\\n%%%%.o: %%%%.c\\n\\tcc -O2 -c $< -o $@\\n' > Makefile",
                          dir, dir),
                 0);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    free(cmd);
    cr_assert_gt(asprintf(&cmd, "make -s -j2 -C %s", dir), 0);
    int code;
    char *err = record(cmd, &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    static const char *const objects[] = {"a.o", "b.o", "c.o", "d.o"};
    for (size_t i = 0; i < 4; i++) {
        char *o = NULL;
        cr_assert_gt(asprintf(&o, "%s/%s", dir, objects[i]), 0);
        cr_expect_eq(access(o, F_OK), 0, "%s was not built", o);
        free(o);
    }
    int64_t all = sql_int("select count(*) from perf_sample");
    int64_t cc1 = sql_int("select count(*) from perf_sample s join thread t using (utid) join process p "
                          "using (upid) where p.name like '%cc1%' or t.name = 'cc1'");
    cr_expect_geq(sql_int("select count(distinct upid) from perf_sample s join thread using (utid)"), 4,
                  "processes sampled: %s", err);
    cr_expect_gt(cc1 * 100, all * 50, "%lld of %lld samples in cc1: %s", (long long)cc1, (long long)all, err);
    double cpu = said_user_cpu(err);
    cr_assert_gt(cpu, 0.1, "record did not say make's CPU time: %s", err);
    expect_rate((uint64_t)all, cpu, "make -j2");
    free(err), free(cmd), free(dir);
}

/* python3: the interpreter's own loop is sampled and named
 * (_PyEval_EvalFrameDefault, from its symbol table) at the rate of its CPU
 * time, and the program's output is unchanged. */
Test(record_perf, python_interpreter_named) {
    need_perf();
    const char *py = access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    char *args = NULL;
    cr_assert_gt(asprintf(&args, "%s -c 'print(sum(len(str(i * i)) for i in range(3000000)))'", py), 0);
    int code;
    char *err = record(args, &code);
    if (code == 125 || code == 127) cr_skip_test("python3 did not run: %s", err);
    cr_assert_eq(code, 0, "exit %d: %s", code, err);
    char *out_path = path_in_dir("stdout"), *out = tu_read_file(out_path, NULL);
    cr_expect(out && strcmp(out, "37537523\n") == 0, "python's output: %s", out ? out : "(none)");
    char *folded = folded_of(TM_VALUE_DEFAULT);
    static const char *const eval[] = {"_PyEval_EvalFrameDefault"};
    uint64_t in_eval = folded_with(folded, eval, 1), all = folded_with(folded, NULL, 0);
    cr_expect_gt(in_eval * 100, all * 50, "%llu of %llu samples under _PyEval_EvalFrameDefault",
                 (unsigned long long)in_eval, (unsigned long long)all);
    double cpu = said_user_cpu(err);
    cr_assert_gt(cpu, 0.1, "record did not say python's CPU time: %s", err);
    expect_rate(all, cpu, "python3");
    free(folded), free(out), free(out_path), free(err), free(args);
}
