/*
 * bench_record.c — overhead of the recorder: a CPU-bound workload (this
 * program re-run with --child) timed plain and under LD_PRELOAD of
 * libtracemill_record.so at 101 Hz and 250 Hz, several runs each; prints
 * the median CPU times (user + system of every thread of the child, the
 * collector's and the signal handlers' included: on a shared machine they
 * vary far less than wall time), the overhead as the ratio of medians, and
 * the CPU cost and trace bytes per sample. Targets (issue 7): < 1 % at
 * 101 Hz, < 3 % at 250 Hz.
 *
 *   bench_record --preload PATH/libtracemill_record.so [--runs N] [--work M]
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
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

/* CPU time of one run of the child, with env (NULL-terminated) added. */
static double timed_run(const char *self, long work, char *const env[]) {
    char work_text[32];
    snprintf(work_text, sizeof work_text, "%ld", work);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        for (size_t i = 0; env && env[i]; i++) putenv(env[i]);
        execl(self, self, "--child", work_text, (char *)NULL);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec * 1e-6;
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

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--child") == 0) {
        volatile uint64_t sink = workload(atol(argv[2]));
        (void)sink;
        return 0;
    }
    const char *preload = NULL;
    int runs = 5;
    long work = 1500;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--preload") == 0) preload = argv[i + 1];
        else if (strcmp(argv[i], "--runs") == 0) runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--work") == 0) work = atol(argv[i + 1]);
    }
    if (!preload || runs < 1 || runs > 100 || work < 1) {
        fprintf(stderr, "usage: bench_record --preload LIB.so [--runs N (5)] [--work MILLIONS (1500)]\n");
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

    const char *labels[] = {"plain", "101 Hz", "250 Hz"};
    char *envs[3][4] = {{NULL},
                        {preload_env, out_env, "TRACEMILL_RECORD_HZ=101", NULL},
                        {preload_env, out_env, "TRACEMILL_RECORD_HZ=250", NULL}};
    double times[3][100], med[3];
    trace_size size[3] = {{0, 0}, {0, 0}, {0, 0}};
    /* Interleaved, so that a change in machine load hits every setting. */
    for (int r = 0; r < runs; r++)
        for (int k = 0; k < 3; k++) {
            times[k][r] = timed_run(self, work, envs[k]);
            if (times[k][r] < 0) {
                fprintf(stderr, "bench_record: a %s run failed\n", labels[k]);
                return 1;
            }
            if (k > 0 && r == runs - 1) size[k] = trace_size_of(out);
        }
    for (int k = 0; k < 3; k++) med[k] = median(times[k], runs);
    printf("bench_record: %d runs of %ld M iterations, median CPU time (user + system)\n", runs, work);
    printf("  plain   %.3f s\n", med[0]);
    /* The cost per sample charges the fixed costs (start, symbols, the
     * final write) and the collector's wake-ups to the samples too. */
    for (int k = 1; k < 3; k++) {
        double samples = size[k].samples > 0 ? size[k].samples : 1;
        printf("  %-7s %.3f s  overhead %+.2f %%  (target < %d %%)  %.0f samples, %.1f us each, trace %.1f bytes/sample\n",
               labels[k], med[k], 100.0 * (med[k] / med[0] - 1.0), k == 1 ? 1 : 3, size[k].samples,
               (med[k] - med[0]) * 1e6 / samples, size[k].bytes / samples);
    }
    unlink(out);
    return 0;
}
