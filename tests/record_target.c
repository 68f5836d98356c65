/*
 * record_target.c — the program the recorder tests profile: a known call
 * structure main -> work -> two named threads (worker-a, worker-b) running
 * worker_main -> {hot 60 %, warm 30 %, cold 10 % of their CPU time}, built
 * with plain gcc -O2 (no frame pointers). Other modes exercise the safety
 * cases: fork while sampling, thread churn, exit() from a thread while
 * sampling. `--mode work` prints the CPU share each phase really had
 * ("cpu-share hot=.. warm=.. cold=..", measured with the thread CPU clock).
 *
 * Built twice: plain (recorded through LD_PRELOAD, an unmodified binary)
 * and with -DRECORD_TARGET_API, where `-o OUT` and the recorder options make
 * it record itself through the tm_recorder_* API and print the recorder's
 * statistics as one line "recorder-stats k=v ...".
 *
 *   record_target [--mode work|fork|churn|exit] [--seconds S | --cpu-seconds S]
 *                 [-o OUT --hz N --buffer-kb N --fill ring|discard --file-write-period-ms N
 *                  --chunk-seconds N --duration S --unwind dwarf|fp]   (API build)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef RECORD_TARGET_API
#include "tracemill.h"
#include "tracemill_record.h"
#endif

/* noipa (gcc) also stops identical-code folding and interprocedural
 * shortcuts, so each function keeps its own frame; the target is built with
 * gcc as the issue asks, clang gets plain noinline. */
#if defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noipa))
#endif

static double g_seconds = 3.0;
static double g_cpu_seconds; /* > 0: workers stop after this much CPU time, not g_seconds of wall time */
static volatile uint64_t g_sink;
static _Atomic uint64_t g_phase_ns[3]; /* CPU time spent in hot, warm, cold */

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Each phase spins on its own loop (distinct code, so the compiler cannot
 * fold the three functions into one) until the thread has used its share of
 * a CPU-time cycle of 0.5 to 1.5 ms, short against the sampling period. The
 * cycle length is random because samples land on kernel ticks (4 ms here):
 * a fixed 1 ms cycle would put every sample at the same point of it and
 * bias the shares. Reading the clock every 1024 iterations keeps the clock
 * reads a small part of each function's time. */
NOINLINE static void hot(double cpu_until) {
    uint64_t x = 1;
    while (thread_cpu_seconds() < cpu_until)
        for (int i = 0; i < 1024; i++) x = x * 6364136223846793005u + 1442695040888963407u;
    g_sink += x;
}

NOINLINE static void warm(double cpu_until) {
    uint64_t x = 3;
    while (thread_cpu_seconds() < cpu_until)
        for (int i = 0; i < 1024; i++) x ^= (x << 13) ^ (x >> 7) ^ (uint64_t)i;
    g_sink += x;
}

NOINLINE static void cold(double cpu_until) {
    uint64_t x = 5;
    while (thread_cpu_seconds() < cpu_until)
        for (int i = 0; i < 1024; i++) x = (x >> 3) + x * 33u + (uint64_t)i;
    g_sink += x;
}

NOINLINE static void *worker_main(void *name) {
    pthread_setname_np(pthread_self(), name);
    double end = wall_seconds() + g_seconds;
    double spent[3] = {0, 0, 0};
    uint64_t rng = (uint64_t)(uintptr_t)name | 1;
    while (g_cpu_seconds > 0 ? thread_cpu_seconds() < g_cpu_seconds : wall_seconds() < end) {
        rng = rng * 6364136223846793005u + 1442695040888963407u;
        double cycle = 0.0005 + 0.001 * (double)(rng >> 11) / 9007199254740992.0; /* [0.5, 1.5) ms */
        double t0 = thread_cpu_seconds();
        hot(t0 + 0.6 * cycle);
        double t1 = thread_cpu_seconds();
        warm(t1 + 0.3 * cycle);
        double t2 = thread_cpu_seconds();
        cold(t2 + 0.1 * cycle);
        double t3 = thread_cpu_seconds();
        spent[0] += t1 - t0;
        spent[1] += t2 - t1;
        spent[2] += t3 - t2;
    }
    for (int i = 0; i < 3; i++) atomic_fetch_add(&g_phase_ns[i], (uint64_t)(spent[i] * 1e9));
    return NULL;
}

NOINLINE static int work(void) {
    pthread_t a, b;
    if (pthread_create(&a, NULL, worker_main, "worker-a") != 0) return 1;
    if (pthread_create(&b, NULL, worker_main, "worker-b") != 0) return 1;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    double total = (double)(g_phase_ns[0] + g_phase_ns[1] + g_phase_ns[2]);
    printf("cpu-share hot=%.2f warm=%.2f cold=%.2f\n", 100.0 * (double)g_phase_ns[0] / total,
           100.0 * (double)g_phase_ns[1] / total, 100.0 * (double)g_phase_ns[2] / total);
    return 0;
}

NOINLINE static void *short_lived(void *arg) {
    double t = thread_cpu_seconds();
    hot(t + 0.0005);
    return arg;
}

/* Hundreds of threads that live a fraction of a millisecond each. */
NOINLINE static int churn(void) {
    double end = wall_seconds() + g_seconds;
    int created = 0;
    while (wall_seconds() < end || created < 300) {
        pthread_t t[8];
        for (int i = 0; i < 8; i++)
            if (pthread_create(&t[i], NULL, short_lived, NULL) != 0) return 1;
        for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
        created += 8;
    }
    printf("threads-created %d\n", created);
    return 0;
}

/* Forks while the workers are sampled; the child works, forks again and
 * exits normally, which must neither hang nor write the parent's trace. */
NOINLINE static int fork_while_sampling(void) {
    pthread_t a;
    if (pthread_create(&a, NULL, worker_main, "worker-a") != 0) return 1;
    int failures = 0;
    for (int i = 0; i < 5; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            double t = thread_cpu_seconds();
            hot(t + 0.05);
            exit(0);
        }
        int status = 0;
        if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            failures++;
    }
    pthread_join(a, NULL);
    printf("fork-failures %d\n", failures);
    return failures != 0;
}

static void *exit_from_thread(void *arg) {
    double t = thread_cpu_seconds();
    hot(t + g_seconds / 2);
    exit(*(int *)arg);
}

/* A thread calls exit() while the others are still running and sampled. */
NOINLINE static int exit_while_sampling(void) {
    static int code = 0;
    pthread_t a, b;
    if (pthread_create(&a, NULL, worker_main, "worker-a") != 0) return 1;
    if (pthread_create(&b, NULL, exit_from_thread, &code) != 0) return 1;
    pthread_join(b, NULL);
    pthread_join(a, NULL);
    return 1; /* not reached: exit_from_thread ends the process first */
}

int main(int argc, char **argv) {
    const char *mode = "work";
#ifdef RECORD_TARGET_API
    tm_recorder_options o;
    memset(&o, 0, sizeof o);
#endif
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--mode") == 0 && v) mode = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && v) g_seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--cpu-seconds") == 0 && v) g_cpu_seconds = atof(argv[++i]);
#ifdef RECORD_TARGET_API
        else if (strcmp(argv[i], "-o") == 0 && v) o.output = argv[++i];
        else if (strcmp(argv[i], "--hz") == 0 && v) o.hz = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--buffer-kb") == 0 && v) o.buffer_kb = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--fill") == 0 && v)
            o.fill = strcmp(argv[++i], "discard") == 0 ? TM_RECORD_FILL_DISCARD : TM_RECORD_FILL_RING;
        else if (strcmp(argv[i], "--chunk-seconds") == 0 && v) o.chunk_seconds = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--file-write-period-ms") == 0 && v)
            o.file_write_period_ms = (uint32_t)atoi(argv[++i]);
        else if (strcmp(argv[i], "--duration") == 0 && v) o.duration_ms = (uint32_t)(atof(argv[++i]) * 1000);
        else if (strcmp(argv[i], "--unwind") == 0 && v)
            o.unwind = strcmp(argv[++i], "fp") == 0 ? TM_RECORD_UNWIND_FP : TM_RECORD_UNWIND_DWARF;
#endif
        else {
            fprintf(stderr, "record_target: bad argument %s\n", argv[i]);
            return 2;
        }
    }
#ifdef RECORD_TARGET_API
    tm_recorder *r = NULL;
    tm_error err;
    if (o.output && (tm_recorder_new(&o, &r, &err) != TM_OK || tm_recorder_start(r, &err) != TM_OK)) {
        fprintf(stderr, "record_target: %s\n", err.message);
        return 3;
    }
#endif
    int rc;
    if (strcmp(mode, "work") == 0) rc = work();
    else if (strcmp(mode, "fork") == 0) rc = fork_while_sampling();
    else if (strcmp(mode, "churn") == 0) rc = churn();
    else if (strcmp(mode, "exit") == 0) rc = exit_while_sampling();
    else {
        fprintf(stderr, "record_target: unknown mode %s\n", mode);
        return 2;
    }
#ifdef RECORD_TARGET_API
    if (r) {
        if (tm_recorder_stop(r, &err) != TM_OK) {
            fprintf(stderr, "record_target: %s\n", err.message);
            rc = 3;
        }
        tm_recorder_stats s;
        tm_recorder_get_stats(r, &s);
        printf("recorder-stats samples=%llu samples_lost=%llu packets_overwritten=%llu bytes_overwritten=%llu "
               "packets_discarded=%llu bytes_discarded=%llu sample_packets_lost=%llu chunks=%u threads=%u "
               "timer_overruns=%llu bytes_written=%llu\n",
               (unsigned long long)s.samples, (unsigned long long)s.samples_lost,
               (unsigned long long)s.packets_overwritten, (unsigned long long)s.bytes_overwritten,
               (unsigned long long)s.packets_discarded, (unsigned long long)s.bytes_discarded,
               (unsigned long long)s.sample_packets_lost, s.chunks, s.threads,
               (unsigned long long)s.timer_overruns, (unsigned long long)s.bytes_written);
        tm_recorder_free(r);
    }
#endif
    return rc;
}
