/*
 * bench_record.c — overhead of the recorder: a CPU-bound workload (this
 * program re-run with --child) timed plain and under LD_PRELOAD of
 * libtracemill_record.so at 101 Hz and 250 Hz; prints the CPU times (user +
 * system of every thread of the child: the collector's and the signal
 * handlers' included), the overhead as the ratio of medians and as the
 * median of paired ratios, and the CPU cost and trace bytes per sample.
 * Targets (issue 7): < 1 % at 101 Hz, < 3 % at 250 Hz.
 *
 * With --perf PATH/tracemill-record-perf, also the perf backend's
 * --off-cpu against the perf backend without it, on the same workload and
 * on one that blocks 50 us after every million iterations (~1000 context
 * switches a second): the program's own CPU time (it reports its rusage)
 * and the recorder's (the rest of what wait4 gives for the pair's
 * recorder), paired as above, with a perf-beside-perf A/A line. And the
 * signal backend's clock read per sample (CLOCK_THREAD_CPUTIME_ID, which
 * gives each sample its weight): a bare-signal handler that reads it
 * beside one that does not, paired, and the read's own cost timed in a loop.
 *
 * On a virtual machine the speed of a CPU drifts by a few percent from one
 * second to the next, more than the effect measured. So each run of a
 * recorded child is paired with a plain child running at the same time on
 * the other CPU (the two swap CPUs from one pair to the next), and an A/A
 * line (plain beside plain) shows the noise that remains. A "bare signals"
 * line at each rate (a CPU-time timer sending SIGPROF to an empty handler)
 * shows the kernel's share, which any signal-driven profiler pays.
 *
 * --naming compares instead what naming frames at record time costs: the
 * recorder at 250 Hz naming every frame from its file's symbol tables
 * (TRACEMILL_RECORD_NAME_FRAMES=1, the recorder's old default) and writing
 * build ids and pcs only (the default; `tracemill record` names them after
 * the run), each beside a plain run, with their trace sizes.
 *
 *   bench_record --preload PATH/libtracemill_record.so [--perf PATH/tracemill-record-perf] [--runs N]
 *                [--work M] [--naming]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tracemill.h"

/* A fixed amount of work (not a fixed time), through a few call levels so
 * that stacks have some depth. */
__attribute__((noinline)) static uint64_t mix(uint64_t x, long n) {
    for (long i = 0; i < n; i++) x = (x ^ (x >> 29)) * 0xbf58476d1ce4e5b9u + (uint64_t)i;
    return x;
}

__attribute__((noinline)) static uint64_t workload(long millions) {
    uint64_t x = 1;
    for (long m = 0; m < millions; m++) x = mix(x, 1000000);
    return x;
}

/* The same work, blocking 50 us after each million iterations. */
__attribute__((noinline)) static uint64_t switching_workload(long millions) {
    uint64_t x = 1;
    struct timespec pause = {0, 50000};
    for (long m = 0; m < millions; m++) {
        x = mix(x, 1000000);
        nanosleep(&pause, NULL);
    }
    return x;
}

static volatile sig_atomic_t g_bare_signals;
static int g_bare_clock; /* the handler reads the thread's CPU clock, as the signal backend's does */
static volatile int64_t g_bare_clock_sink;

static void on_bare_signal(int signo) {
    (void)signo;
    g_bare_signals++;
    if (g_bare_clock) {
        struct timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        g_bare_clock_sink += ts.tv_nsec;
    }
}

/* The floor under any signal-driven profiler: the child's CPU-time timer at
 * hz sends SIGPROF to a handler that does nothing. */
static int arm_bare_signal(int hz) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_bare_signal;
    sa.sa_flags = SA_RESTART;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = gettid();
    timer_t timer;
    long period_ns = 1000000000L / hz;
    struct itimerspec its = {{period_ns / 1000000000L, period_ns % 1000000000L},
                             {period_ns / 1000000000L, period_ns % 1000000000L}};
    if (sigaction(SIGPROF, &sa, NULL) != 0 || timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &timer) != 0 ||
        timer_settime(timer, 0, &its, NULL) != 0)
        return -1;
    return 0;
}

/* Starts the child with env (NULL-terminated) added, on CPU cpu (-1: any):
 * `self MODE WORK`, after wrapper's words (NULL-terminated; NULL: none). */
static pid_t start_wrapped(const char *self, const char *mode, long work, char *const env[], int cpu,
                           char *const wrapper[]) {
    char work_text[32];
    snprintf(work_text, sizeof work_text, "%ld", work);
    pid_t pid = fork();
    if (pid != 0) return pid;
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    for (size_t i = 0; env && env[i]; i++) putenv(env[i]);
    char *argv[16];
    size_t n = 0;
    for (; wrapper && wrapper[n] && n < 12; n++) argv[n] = wrapper[n];
    argv[n++] = (char *)self;
    argv[n++] = (char *)mode;
    argv[n++] = work_text;
    argv[n] = NULL;
    execv(argv[0], argv);
    _exit(127);
}

static pid_t start_child(const char *self, long work, char *const env[], int cpu) {
    return start_wrapped(self, "--child", work, env, cpu, NULL);
}

/* Waits for one child; its CPU time in seconds, or -1 if it failed. */
static double wait_child(pid_t *pid) {
    int status;
    struct rusage ru;
    *pid = wait4(-1, &status, 0, &ru);
    if (*pid < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
}

/* One pair: a plain child and one with env, at the same time on two CPUs
 * (cpus[0..1]; both -1: one after the other). 0 on success. */
static int timed_pair(const char *self, long work, char *const env[], const int cpus[2], double *plain,
                      double *other) {
    pid_t a = start_child(self, work, NULL, cpus[0]);
    if (a < 0) return -1;
    if (cpus[0] < 0) {
        pid_t got;
        *plain = wait_child(&got);
        if (*plain < 0) return -1;
    }
    pid_t b = start_child(self, work, env, cpus[1]);
    if (b < 0) return -1;
    for (int left = cpus[0] < 0 ? 1 : 2; left > 0; left--) {
        pid_t got;
        double t = wait_child(&got);
        if (t < 0) return -1;
        if (got == a) *plain = t;
        else *other = t;
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct trace_size {
    double bytes, samples;
} trace_size;

/* Size and samples of the trace at path; zeros if it cannot be read. */
static trace_size trace_size_of(const char *path) {
    trace_size r = {0, 0};
    FILE *f = fopen(path, "rb");
    if (!f) return r;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)len);
    tm_trace *t = NULL;
    if (buf && fread(buf, 1, (size_t)len, f) == (size_t)len && tm_trace_parse(buf, (size_t)len, NULL, &t, NULL) == TM_OK) {
        r.bytes = (double)len;
        r.samples = (double)tm_trace_get_stats(t)->samples_kept;
    }
    tm_trace_free(t);
    free(buf);
    fclose(f);
    return r;
}

static double quartile(const double *sorted, int n, int q) {
    return sorted[(n - 1) * q / 4];
}

/* The CPU time a child reported in path (BENCH_RECORD_SELF_CPU); -1 if none. */
static double reported_cpu(const char *path) {
    FILE *f = fopen(path, "r");
    double v = -1;
    if (!f || fscanf(f, "%lf", &v) != 1) v = -1;
    if (f) fclose(f);
    unlink(path);
    return v;
}

/* One pair of wrapped runs at the same time on two CPUs (or one after the
 * other): side k runs `wrapper[k]... self mode work` and reports its own
 * CPU time; *program gets it, *recorder the rest of the run's rusage. */
static int wrapped_pair(const char *self, const char *mode, long work, char *const *const wrapper[2],
                        const int cpus[2], double program[2], double recorder[2]) {
    char report[2][64], env_text[2][160];
    pid_t pid[2];
    for (int k = 0; k < 2; k++) {
        snprintf(report[k], sizeof report[k], "/tmp/bench_record_cpu_%d_%d", (int)getpid(), k);
        snprintf(env_text[k], sizeof env_text[k], "BENCH_RECORD_SELF_CPU=%s", report[k]);
    }
    for (int k = 0; k < 2; k++) {
        char *env[] = {env_text[k], NULL};
        pid[k] = start_wrapped(self, mode, work, env, cpus[k], wrapper[k]);
        if (pid[k] < 0) return -1;
        if (cpus[k] < 0) { /* one after the other */
            pid_t got;
            recorder[k] = wait_child(&got);
            if (recorder[k] < 0) return -1;
        }
    }
    for (int left = cpus[0] < 0 ? 0 : 2; left > 0; left--) {
        pid_t got;
        double t = wait_child(&got);
        if (t < 0) return -1;
        recorder[got == pid[0] ? 0 : 1] = t;
    }
    for (int k = 0; k < 2; k++) {
        program[k] = reported_cpu(report[k]);
        if (program[k] < 0) return -1;
        recorder[k] -= program[k];
    }
    return 0;
}

static void pair_cpus(int r, const int cpu_ids[2], int n_cpus, int cpus[2]) {
    cpus[0] = cpus[1] = -1;
    if (n_cpus == 2) {
        cpus[0] = cpu_ids[r % 2];
        cpus[1] = cpu_ids[1 - r % 2];
    }
}

/* The perf backend beside a plain run (what recording costs the program,
 * with plain beside plain as its noise), and with --off-cpu beside
 * without, on a CPU-bound and a switching workload (perf beside perf as
 * the noise). */
static int bench_off_cpu(const char *self, const char *perf, long work, int runs, const int cpu_ids[2],
                         int n_cpus) {
    char out[2][64];
    for (int k = 0; k < 2; k++) snprintf(out[k], sizeof out[k], "/tmp/bench_record_perf_%d_%d.pftrace", (int)getpid(), k);
    char *plain_perf[2][10], *off_perf[10];
    for (int k = 0; k < 2; k++) {
        char *w[] = {(char *)perf, "-F", "101", "-o", out[k], "--", NULL};
        memcpy(plain_perf[k], w, sizeof w);
    }
    char *w_off[] = {(char *)perf, "-F", "101", "--off-cpu", "-o", out[1], "--", NULL};
    memcpy(off_perf, w_off, sizeof w_off);
    enum { CASES = 5 };
    const char *labels[CASES] = {"plain A/A", "perf beside plain", "perf A/A (switching)", "--off-cpu CPU-bound",
                                 "--off-cpu switching"};
    const char *modes[CASES] = {"--child", "--child", "--child-switching", "--child", "--child-switching"};
    char *const *const wrappers[CASES][2] = {{NULL, NULL},
                                             {NULL, plain_perf[1]},
                                             {plain_perf[0], plain_perf[1]},
                                             {plain_perf[0], off_perf},
                                             {plain_perf[0], off_perf}};
    static double prog[CASES][2][100], rec[CASES][2][100], ratio[CASES][100];
    for (int r = 0; r < runs; r++)
        for (int c = 0; c < CASES; c++) {
            int cpus[2];
            pair_cpus(r, cpu_ids, n_cpus, cpus);
            double p[2], q[2];
            if (wrapped_pair(self, modes[c], work, wrappers[c], cpus, p, q) != 0) {
                fprintf(stderr, "bench_record: a perf %s run failed (perf_event_open refused? --off-cpu needs "
                                "kernel.perf_event_paranoid <= 1 or CAP_PERFMON)\n", labels[c]);
                for (int k = 0; k < 2; k++) unlink(out[k]);
                return 1;
            }
            for (int k = 0; k < 2; k++) prog[c][k][r] = p[k], rec[c][k][r] = q[k];
            ratio[c][r] = p[1] / p[0] - 1.0;
        }
    for (int k = 0; k < 2; k++) unlink(out[k]);
    printf("bench_record: perf backend at 101 Hz, %d pairs, right beside left: the backend beside a plain run, and "
           "with --off-cpu beside without; the program's own CPU time and the recorder's\n", runs);
    for (int c = 0; c < CASES; c++) {
        double p0 = median(prog[c][0], runs), p1 = median(prog[c][1], runs);
        double r0 = median(rec[c][0], runs), r1 = median(rec[c][1], runs), paired = median(ratio[c], runs);
        printf("  %-22s program %.3f s beside %.3f s: ratio of medians %+.2f %%, median of paired ratios %+.2f %% "
               "(quartiles %+.2f / %+.2f); recorder %.3f s beside %.3f s%s\n",
               labels[c], p1, p0, 100.0 * (p1 / p0 - 1.0), 100.0 * paired, 100.0 * quartile(ratio[c], runs, 1),
               100.0 * quartile(ratio[c], runs, 3), r1, r0, c == 0 || c == 2 ? "  <- the noise" : "");
    }
    return 0;
}

/* The signal backend's clock read per sample: bare signals that read the
 * thread's CPU clock beside bare signals that do not (250 Hz), and the
 * read timed alone. */
static int bench_clock_read(const char *self, long work, int runs, const int cpu_ids[2], int n_cpus) {
    enum { READS = 1000000 };
    struct timespec a, b, ts;
    int64_t sink = 0;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < READS; i++) clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts), sink += ts.tv_nsec;
    clock_gettime(CLOCK_MONOTONIC, &b);
    g_bare_clock_sink = sink;
    double read_ns = ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / READS;
    char *plain_env[] = {"BENCH_RECORD_BARE_SIGNAL_HZ=250", NULL};
    char *clock_env[] = {"BENCH_RECORD_BARE_SIGNAL_HZ=250", "BENCH_RECORD_BARE_CLOCK=1", NULL};
    static double plain[100], with[100], ratio[100];
    for (int r = 0; r < runs; r++) {
        int cpus[2];
        pair_cpus(r, cpu_ids, n_cpus, cpus);
        pid_t pa = start_child(self, work, plain_env, cpus[0]), pb, got;
        if (pa < 0) return 1;
        if (cpus[0] < 0 && (plain[r] = wait_child(&got)) < 0) return 1;
        if ((pb = start_child(self, work, clock_env, cpus[1])) < 0) return 1;
        for (int left = cpus[0] < 0 ? 1 : 2; left > 0; left--) {
            double t = wait_child(&got);
            if (t < 0) {
                fprintf(stderr, "bench_record: a clock-read run failed\n");
                return 1;
            }
            if (got == pa) plain[r] = t;
            else with[r] = t;
        }
        ratio[r] = with[r] / plain[r] - 1.0;
    }
    double mp = median(plain, runs), mw = median(with, runs), paired = median(ratio, runs);
    printf("bench_record: the signal backend's clock read per sample: bare signals at 250 Hz reading "
           "CLOCK_THREAD_CPUTIME_ID %.3f s beside without %.3f s: ratio of medians %+.2f %%, median of paired "
           "ratios %+.2f %% (quartiles %+.2f / %+.2f); the read alone %.0f ns, %.4f %% of CPU at 101 Hz, %.4f %% "
           "at 250 Hz\n",
           mw, mp, 100.0 * (mw / mp - 1.0), 100.0 * paired, 100.0 * quartile(ratio, runs, 1),
           100.0 * quartile(ratio, runs, 3), read_ns, read_ns * 101 * 1e-7, read_ns * 250 * 1e-7);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && (strcmp(argv[1], "--child") == 0 || strcmp(argv[1], "--child-switching") == 0)) {
        const char *bare = getenv("BENCH_RECORD_BARE_SIGNAL_HZ"), *report = getenv("BENCH_RECORD_SELF_CPU");
        g_bare_clock = getenv("BENCH_RECORD_BARE_CLOCK") != NULL;
        if (bare && arm_bare_signal(atoi(bare)) != 0) return 1;
        volatile uint64_t sink = strcmp(argv[1], "--child") == 0 ? workload(atol(argv[2]))
                                                                   : switching_workload(atol(argv[2]));
        (void)sink;
        if (report) { /* its own CPU time, for a run whose wait4 also holds a recorder's */
            struct rusage ru;
            FILE *f = fopen(report, "w");
            if (!f || getrusage(RUSAGE_SELF, &ru) != 0) return 1;
            fprintf(f, "%.6f\n", (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
                                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6);
            if (fclose(f) != 0) return 1;
        }
        /* A bare-signal control that took no signal would measure nothing. */
        return bare && g_bare_signals == 0 ? 3 : 0;
    }
    const char *preload = NULL, *perf = NULL;
    int runs = 15, naming = 0;
    long work = 1000;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--naming") == 0) {
            naming = 1;
            memmove(argv + i, argv + i + 1, (size_t)(argc - i) * sizeof *argv);
            argc--;
            break;
        }
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--preload") == 0) preload = argv[i + 1];
        else if (strcmp(argv[i], "--perf") == 0) perf = argv[i + 1];
        else if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--work") == 0) work = atol(argv[i + 1]);
    }
    if (!preload || runs < 1 || runs > 100 || work < 1) {
        fprintf(stderr, "usage: bench_record --preload LIB.so [--perf tracemill-record-perf] [--runs N (15)] "
                        "[--work MILLIONS (1000)] [--naming]\n");
        return 2;
    }
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return 1;
    self[n] = 0;
    char out[] = "/tmp/bench_record_XXXXXX";
    int fd = mkstemp(out);
    if (fd < 0) return 1;
    close(fd);
    char preload_env[4200], out_env[64];
    snprintf(preload_env, sizeof preload_env, "LD_PRELOAD=%s", preload);
    snprintf(out_env, sizeof out_env, "TRACEMILL_RECORD_OUT=%s", out);
    /* Two CPUs this process may use, for the pairs; otherwise sequential. */
    int cpu_ids[2], n_cpus = 0;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) == 0)
        for (int c = 0; c < CPU_SETSIZE && n_cpus < 2; c++)
            if (CPU_ISSET(c, &allowed)) cpu_ids[n_cpus++] = c;

    enum { SETTINGS = 5 };
    const char *labels[SETTINGS] = {"A/A", "bare signals 101 Hz", "recorder 101 Hz", "bare signals 250 Hz",
                                    "recorder 250 Hz"};
    int target[SETTINGS] = {0, 0, 1, 0, 3};
    char *envs[SETTINGS][5] = {{"BENCH_RECORD_CONTROL=1", NULL},
                               {"BENCH_RECORD_BARE_SIGNAL_HZ=101", NULL},
                               {preload_env, out_env, "TRACEMILL_RECORD_HZ=101", NULL},
                               {"BENCH_RECORD_BARE_SIGNAL_HZ=250", NULL},
                               {preload_env, out_env, "TRACEMILL_RECORD_HZ=250", NULL}};
    int settings = SETTINGS;
    if (naming) { /* A/A, bare signals, named at record time, build ids and pcs only */
        static const char *const naming_labels[4] = {"A/A", "bare signals 250 Hz", "named 250 Hz",
                                                      "ids+pcs 250 Hz"};
        settings = 4;
        for (int k = 0; k < settings; k++) labels[k] = naming_labels[k], target[k] = k >= 2 ? 3 : 0;
        envs[1][0] = "BENCH_RECORD_BARE_SIGNAL_HZ=250";
        char *named[5] = {preload_env, out_env, "TRACEMILL_RECORD_HZ=250", "TRACEMILL_RECORD_NAME_FRAMES=1", NULL};
        char *plain_ids[5] = {preload_env, out_env, "TRACEMILL_RECORD_HZ=250", NULL, NULL};
        memcpy(envs[2], named, sizeof named);
        memcpy(envs[3], plain_ids, sizeof plain_ids);
    }
    static double plain[SETTINGS][100], other[SETTINGS][100], ratio[SETTINGS][100];
    trace_size size[SETTINGS] = {{0, 0}, {0, 0}, {0, 0}, {0, 0}, {0, 0}};
    /* Settings interleaved, so that a change in machine load hits each. */
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < settings; k++) {
            int cpus[2] = {-1, -1};
            if (n_cpus == 2) {
                cpus[0] = cpu_ids[r % 2];
                cpus[1] = cpu_ids[1 - r % 2];
            }
            if (timed_pair(self, work, envs[k], cpus, &plain[k][r], &other[k][r]) != 0) {
                fprintf(stderr, "bench_record: a %s run failed\n", labels[k]);
                return 1;
            }
            ratio[k][r] = other[k][r] / plain[k][r] - 1.0;
            if (target[k] && r == runs - 1) size[k] = trace_size_of(out);
        }
    printf("bench_record: %d pairs of runs of %ld M iterations, %s; CPU time (user + system)\n", runs, work,
           n_cpus == 2 ? "each pair at the same time on two CPUs" : "one after the other");
    double paired[SETTINGS];
    for (int k = 0; k < settings; k++) {
        double mp = median(plain[k], runs), mo = median(other[k], runs);
        paired[k] = median(ratio[k], runs);
        printf("  %-20s %.3f s beside plain %.3f s: ratio of medians %+.2f %%, median of paired ratios %+.2f %% "
               "(quartiles %+.2f / %+.2f)%s\n",
               labels[k], mo, mp, 100.0 * (mo / mp - 1.0), 100.0 * paired[k], 100.0 * quartile(ratio[k], runs, 1),
               100.0 * quartile(ratio[k], runs, 3), k == 0 ? "  <- the noise" : "");
        if (!target[k]) continue;
        /* Per sample: the recorder's whole cost (the fixed costs of start,
         * symbols and the final write and the collector's wake-ups charged
         * to the samples too), and what it adds to the bare signal's. */
        double samples = size[k].samples > 0 ? size[k].samples : 1;
        printf("  %-20s target < %d %%; %.0f samples, %.1f us of CPU each (%.1f us beyond the bare signal), "
               "trace %.1f bytes/sample\n",
               "", target[k], size[k].samples, paired[k] * mp * 1e6 / samples,
               (paired[k] - paired[naming ? 1 : k - 1]) * mp * 1e6 / samples, size[k].bytes / samples);
    }
    if (naming)
        printf("  naming at record time: %+.2f %% of the program's CPU time (difference of the paired medians), "
               "trace %.0f bytes named vs %.0f bytes with build ids and pcs only (%.1f vs %.1f bytes/sample)\n",
               100.0 * (paired[2] - paired[3]), size[2].bytes, size[3].bytes,
               size[2].bytes / (size[2].samples > 0 ? size[2].samples : 1),
               size[3].bytes / (size[3].samples > 0 ? size[3].samples : 1));
    unlink(out);
    if (naming) return 0;
    int rc = bench_clock_read(self, work, runs, cpu_ids, n_cpus);
    if (rc == 0 && perf) rc = bench_off_cpu(self, perf, work, runs, cpu_ids, n_cpus);
    return rc;
}
