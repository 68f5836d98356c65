/*
 * record_perf_target.c — the program the perf backend's tests record: the
 * cases the signal backend cannot see or changes. Every mode burns CPU in
 * user mode only (no system call in its loops but a rare clock read), in
 * functions with known names, built with plain gcc -O2 (no frame pointers):
 *
 *   threads S   a thread "spinner" in spin_hot (~80 %) / spin_cold (~20 %),
 *               and a thread "blocker" that blocks every signal, in
 *               blocked_spin; S CPU-seconds each
 *   late S GO   waits until the file GO exists (a recorder attaches
 *               meanwhile; at most 60 s), then as threads
 *   weights S N  N threads (1..16), each S CPU-seconds in spin_hot; prints
 *               "cpu NS", the CPU time of all its threads from main to the end
 *   child S     child_spin for S CPU-seconds (started by `sh -c` in the tests)
 *   sigprof S   installs its own SIGPROF handler and ITIMER_PROF, spins in
 *               spin_hot; prints "sigprof N" (the handler's count)
 *   exit S      spins in spin_hot, then _exit(5)
 *   write S     spins in spin_hot, then writes 2000 lines to stdout whatever
 *               comes of it, and exits 7 (if SIGPIPE did not end it)
 *   abort S     spins in spin_hot, then abort()
 *   cxx S       spins in a function with a C++ mangled name, tmtest::spin()
 *   kernel S    reads /dev/zero in 1 MiB blocks from kernel_spin (time in the kernel;
 *               the system call directly, past any sanitizer's interceptor)
 *   deep S      spin_hot at the bottom of 200 frames of deep_recurse
 *   jit S       copies a counting loop into a page it makes executable with
 *               mprotect (as JITs do), names it "tmtest_jitted_loop" in
 *               /tmp/perf-PID.map as perf's JIT interface says, runs it;
 *               prints "jit PID" (the test removes the map file)
 *   offcpu S    S seconds of rounds: 30 ms blocked in wait_here (a read on a
 *               pipe that nothing writes to, timed out by poll), then 20 ms
 *               of CPU time in spin_here; prints "blocked NS" (the ns it
 *               measured inside wait_here, around the system call) and
 *               "spun NS" (the CPU time of spin_here)
 *   preempt S   pinned to one CPU: two threads in spin_hot for S CPU-seconds
 *               each (each preempted by the other), and main blocking in
 *               wait_here meanwhile; prints "blocked NS" (as offcpu)
 *   short S     150 threads, two at a time, each S/150 CPU-seconds in
 *               short_spin (20 ms each at S = 3)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#if defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noipa))
#endif

static double g_seconds = 1.0;
static volatile uint64_t g_sink;
static volatile sig_atomic_t g_sigprof;

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A few hundred microseconds of arithmetic. */
static NOINLINE uint64_t burn(uint64_t x) {
    for (int i = 0; i < 200000; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

static NOINLINE void spin_hot(void) { g_sink = burn(g_sink); }
static NOINLINE void spin_cold(void) { g_sink = burn(g_sink + 1); }
static NOINLINE void blocked_spin(void) { g_sink = burn(g_sink + 2); }
static NOINLINE void child_spin(void) { g_sink = burn(g_sink + 3); }
static NOINLINE void cxx_spin(void) __asm__("_ZN6tmtest4spinEv"); /* tmtest::spin() */
static NOINLINE void cxx_spin(void) { g_sink = burn(g_sink + 4); }
/* Clock reads only: most of the time in the vdso's clock_gettime. */
static NOINLINE void vdso_spin(void) {
    struct timespec ts;
    for (int i = 0; i < 1000; i++) clock_gettime(CLOCK_MONOTONIC, &ts), g_sink += (uint64_t)ts.tv_nsec;
}

#if defined(__x86_64__)
/* mov rcx, 2000000; 1: dec rcx; jnz 1b; ret (a millisecond or two) */
static const unsigned char jit_loop[] = {0x48, 0xb9, 0x80, 0x84, 0x1e, 0, 0, 0, 0, 0, /* mov rcx, imm64 */
                                         0x48, 0xff, 0xc9,                             /* dec rcx */
                                         0x75, 0xfb,                                   /* jnz -5 */
                                         0xc3};                                        /* ret */
#endif
static void (*g_jitted)(void);
static NOINLINE void jit_call(void) { g_jitted(); }

static int g_zero = -1;
static char g_block[1 << 20];
/* The system call itself, not read(): a sanitizer's read interceptor would
 * spend user time checking the 1 MiB buffer. */
static NOINLINE void kernel_spin(void) {
    if (syscall(SYS_read, g_zero, g_block, sizeof g_block) > 0) g_sink += (uint64_t)g_block[4096];
}

static int64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Blocks 30 ms waiting on a pipe nothing writes to; returns the ns it took. */
static NOINLINE int64_t wait_here(int fd) {
    int64_t start = now_ns(CLOCK_MONOTONIC);
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, 30) > 0) g_sink++;
    return now_ns(CLOCK_MONOTONIC) - start;
}

/* 20 ms of this thread's CPU time; returns it. */
static NOINLINE int64_t spin_here(void) {
    int64_t start = now_ns(CLOCK_THREAD_CPUTIME_ID), t;
    while ((t = now_ns(CLOCK_THREAD_CPUTIME_ID)) - start < 20000000) g_sink = burn(g_sink + 5) / 8;
    return t - start;
}

/* Runs fn until the thread has used g_seconds of CPU time. */
static void spin_for(void (*fn)(void)) {
    double end = thread_cpu_seconds() + g_seconds;
    while (thread_cpu_seconds() < end)
        for (int i = 0; i < 20; i++) fn();
}

/* n frames of itself above spin_for(spin_hot); the addition after the call
 * keeps each frame (no tail call). */
static NOINLINE int deep_recurse(int n) {
    if (n == 0) {
        spin_for(spin_hot);
        return 0;
    }
    return deep_recurse(n - 1) + (int)(g_sink & 1);
}

static void *spinner(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "spinner");
    double end = thread_cpu_seconds() + g_seconds;
    for (unsigned n = 0; thread_cpu_seconds() < end; n++)
        for (int i = 0; i < 10; i++) n % 5 == 4 ? spin_cold() : spin_hot();
    return NULL;
}

static void *blocker(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "blocker");
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    spin_for(blocked_spin);
    return NULL;
}

static NOINLINE void short_spin(void) { g_sink = burn(g_sink + 5); }

/* One of the short threads: SECONDS/150 of CPU time in short_spin. */
static void *short_thread(void *arg) {
    (void)arg;
    double end = thread_cpu_seconds() + g_seconds / 150;
    while (thread_cpu_seconds() < end) short_spin();
    return NULL;
}

/* 150 threads that each live a few tens of milliseconds of CPU time, two
 * at a time: each is sampled from its first instruction or not at all. */
static int short_threads_mode(void) {
    for (int i = 0; i < 150; i += 2) {
        pthread_t a, b;
        if (pthread_create(&a, NULL, short_thread, NULL) || pthread_create(&b, NULL, short_thread, NULL)) return 1;
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }
    return 0;
}

static void *weights_thread(void *arg) {
    (void)arg;
    spin_for(spin_hot);
    return NULL;
}

/* Two CPU-bound threads on one CPU (preempting each other), main blocking. */
static int preempt_mode(void) {
    cpu_set_t one;
    if (sched_getaffinity(0, sizeof one, &one)) return 1;
    int cpu = 0;
    while (cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &one)) cpu++;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one)) return 1; /* the threads inherit it */
    int fds[2];
    pthread_t t[2];
    if (pipe(fds) || pthread_create(&t[0], NULL, weights_thread, NULL) ||
        pthread_create(&t[1], NULL, weights_thread, NULL))
        return 1;
    int64_t blocked = 0;
    for (int i = 0; i < 2; i++) {
        while (pthread_tryjoin_np(t[i], NULL) != 0) blocked += wait_here(fds[0]);
    }
    printf("blocked %lld\n", (long long)blocked);
    return 0;
}

static void on_sigprof(int sig) {
    (void)sig;
    g_sigprof++;
}

int main(int argc, char **argv) {
    if (argc < 3 || (argc != 3 && strcmp(argv[1], "weights") != 0 && strcmp(argv[1], "late") != 0)) {
        fprintf(stderr, "usage: record_perf_target threads|late|child|sigprof|exit|abort|cxx|vdso|kernel|deep|jit|offcpu|"
                        "preempt|short SECONDS\n       record_perf_target weights SECONDS THREADS\n       record_perf_target late SECONDS GO\n");
        return 2;
    }
    const char *mode = argv[1];
    g_seconds = atof(argv[2]);
    if (strcmp(mode, "weights") == 0) {
        /* The process's CPU time includes what the recorder's fork child
         * spent before exec: measured from here. */
        int64_t start = now_ns(CLOCK_PROCESS_CPUTIME_ID);
        int n = argc > 3 ? atoi(argv[3]) : 1;
        pthread_t t[16];
        if (n < 1 || n > 16) return 2;
        for (int i = 0; i < n; i++)
            if (pthread_create(&t[i], NULL, weights_thread, NULL)) return 1;
        for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
        printf("cpu %lld\n", (long long)(now_ns(CLOCK_PROCESS_CPUTIME_ID) - start));
        return 0;
    }
    if (strcmp(mode, "late") == 0) {
        struct timespec pause = {0, 10000000};
        for (int i = 0; i < 6000 && argc > 3 && access(argv[3], F_OK) != 0; i++) nanosleep(&pause, NULL);
        mode = "threads";
    }
    if (strcmp(mode, "threads") == 0) {
        pthread_t a, b;
        if (pthread_create(&a, NULL, spinner, NULL) || pthread_create(&b, NULL, blocker, NULL)) return 1;
        pthread_join(a, NULL);
        pthread_join(b, NULL);
        return 0;
    }
    if (strcmp(mode, "child") == 0) {
        spin_for(child_spin);
        return 0;
    }
    if (strcmp(mode, "kernel") == 0) {
        if ((g_zero = open("/dev/zero", O_RDONLY)) < 0) return 1;
        spin_for(kernel_spin);
        return 0;
    }
    if (strcmp(mode, "deep") == 0) return deep_recurse(200);
    if (strcmp(mode, "short") == 0) return short_threads_mode();
    if (strcmp(mode, "preempt") == 0) return preempt_mode();
    if (strcmp(mode, "offcpu") == 0) {
        int fds[2];
        if (pipe(fds)) return 1;
        int64_t blocked = 0, spun = 0, end = now_ns(CLOCK_MONOTONIC) + (int64_t)(g_seconds * 1e9);
        while (now_ns(CLOCK_MONOTONIC) < end) {
            blocked += wait_here(fds[0]);
            spun += spin_here();
        }
        printf("blocked %lld\nspun %lld\n", (long long)blocked, (long long)spun);
        return 0;
    }
#if defined(__x86_64__)
    if (strcmp(mode, "jit") == 0) {
        void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) return 1;
        memcpy(page, jit_loop, sizeof jit_loop);
        if (mprotect(page, 4096, PROT_READ | PROT_EXEC)) return 1;
        char path[64];
        snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
        FILE *map = fopen(path, "a");
        if (!map) return 1;
        fprintf(map, "%llx %zx tmtest_jitted_loop\n", (unsigned long long)(uintptr_t)page, sizeof jit_loop);
        fclose(map);
        printf("jit %d\n", (int)getpid());
        memcpy(&g_jitted, &page, sizeof page); /* object to function pointer, as POSIX allows */
        spin_for(jit_call);
        return 0;
    }
#endif
    if (strcmp(mode, "vdso") == 0) {
        spin_for(vdso_spin);
        return 0;
    }
    if (strcmp(mode, "cxx") == 0) {
        spin_for(cxx_spin);
        return 0;
    }
    if (strcmp(mode, "sigprof") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigprof;
        sigaction(SIGPROF, &sa, NULL);
        struct itimerval it = {{0, 10000}, {0, 10000}};
        setitimer(ITIMER_PROF, &it, NULL);
        spin_for(spin_hot);
        printf("sigprof %d\n", (int)g_sigprof);
        return g_sigprof > 0 ? 0 : 1;
    }
    if (strcmp(mode, "exit") == 0) {
        spin_for(spin_hot);
        _exit(5);
    }
    if (strcmp(mode, "write") == 0) { /* SIGPIPE ends it when stdout's reader is gone, unless ignored */
        spin_for(spin_hot);
        for (int i = 0; i < 2000; i++) {
            ssize_t w = write(1, "x\n", 2);
            (void)w;
        }
        return 7;
    }
    if (strcmp(mode, "abort") == 0) {
        spin_for(spin_hot);
        abort();
    }
    fprintf(stderr, "record_perf_target: unknown mode %s\n", mode);
    return 2;
}
