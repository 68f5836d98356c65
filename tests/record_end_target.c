/*
 * record_end_target.c — the program the recorder's ending tests profile:
 * it burns a given CPU time in one named function (burn_cpu, measured with
 * its own thread CPU clock) and then ends in the way its first argument
 * says, so that a test can check the trace holds everything sampled up to
 * that end:
 *
 *   record_end_target exit|_exit|_Exit|segv|abort|term|pipe|usr1|alarm|own-segv CPU_SECONDS
 *
 * exit: exit(0); _exit/_Exit: _exit(0)/_Exit(0) (no atexit, no
 * destructors); segv: a store to a page mapped PROT_NONE; abort: abort();
 * term: raise(SIGTERM); pipe: a write into a pipe nobody reads (SIGPIPE,
 * as `record -- prog | head` ends prog); usr1: raise(SIGUSR1); alarm:
 * SIGALRM from a timer 0.1 s later (setitimer), waited for; own-segv: installs a SIGSEGV handler of its own
 * first, which prints "own handler" and _exits with 42, then faults.
 * Before it ends it prints "thread-cpu S": its CPU time so far.
 *
 *   record_end_target restore-sigprof CPU_SECONDS
 *
 * saves SIGPROF's disposition and puts it back (as code that sets handlers
 * for a while does), then burns and exits.
 *
 *   record_end_target exec CPU_SECONDS
 *
 * burns, then execs itself as `record_end_target exit CPU_SECONDS` (the
 * same thread, whose CPU clock runs on: its "thread-cpu" is both images').
 *
 *   record_end_target closed-stdio CPU_SECONDS
 *
 * run with stdin and stdout closed: burns, then checks that they still are
 * (a write to fd 1 fails with EBADF, the next open gets fd 0); exits 0, or
 * 4 saying on stderr what it found open.
 *
 *   record_end_target reopen-stdin SECONDS
 *
 * run with stdin closed: starts 32 idle threads (each of which the
 * recorder looks up at its every scan) and one that calls dlclose in a loop
 * (each call has the recorder's collector read the mappings and scan the
 * threads at once: many more of its opens than its 10 scans a second), then
 * for SECONDS of wall-clock time opens /dev/null and closes it again, as fast
 * as it can; every open must get fd 0 (the recorder's own opens must never
 * take the program's lowest free number); exits 0, or 4 naming the fd it
 * got; then (the race needs two CPUs at once) it checks with kcmp that no
 * thread it did not start shares its descriptor table, else exits 4.
 *
 *   record_end_target close-stdout SECONDS
 *
 * run with stdout a pipe: writes "closing" into it, closes it, and burns
 * SECONDS of CPU before it exits 0: a reader of the pipe gets its end of
 * file at the close, not at the exit (nothing else may hold the pipe).
 *
 *   record_end_target pthread-exit CPU_SECONDS
 *
 * main starts a thread that burns CPU_SECONDS and returns, and ends itself
 * with pthread_exit: the process ends (status 0) when that thread does.
 *
 *   record_end_target dlclose-pairs N
 *
 * starts 32 idle threads (a longer round for the recorder's collector),
 * then N times: dlopens itself twice and dlcloses both in a row (as a
 * program closing two libraries does; nothing is unmapped), timing each
 * pair; prints
 * "dlclose-pairs N slow S max M": S pairs took 90 ms or more (the
 * recorder's collector period is 100 ms), the slowest M ms; exits 0.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/kcmp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
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

static volatile uint64_t g_sink;

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

NOINLINE static void burn_cpu(double seconds) {
    double until = thread_cpu_seconds() + seconds;
    uint64_t x = 1;
    while (thread_cpu_seconds() < until)
        for (int i = 0; i < 20000; i++) x = x * 6364136223846793005u + 1442695040888963407u;
    g_sink = x;
}

static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { IDLE_THREADS = 32, OWN_THREADS = IDLE_THREADS + 2 }; /* with the dlclose thread and main */
static _Atomic pid_t g_own_tids[OWN_THREADS];
static _Atomic int g_own_started;

static void note_own_thread(void) { g_own_tids[atomic_fetch_add(&g_own_started, 1)] = gettid(); }

static void *idle_thread(void *arg) {
    (void)arg;
    note_own_thread();
    for (;;) pause();
    return NULL;
}

static void *dlclose_thread(void *arg) {
    (void)arg;
    note_own_thread();
    for (;;) {
        void *self = dlopen(NULL, RTLD_NOW); /* the program itself: nothing is unmapped */
        if (self) dlclose(self);
    }
    return NULL;
}

/* The threads of this process that it did not start (the recorder's) and
 * that share its descriptor table (kcmp KCMP_FILES): their opens take the
 * program's numbers. How many; 0 also when kcmp cannot tell. */
static int foreign_threads_sharing_fds(void) {
    DIR *tasks = opendir("/proc/self/task");
    if (!tasks) return 0;
    int sharing = 0;
    for (struct dirent *e; (e = readdir(tasks));) {
        pid_t tid = (pid_t)atoi(e->d_name);
        int own = tid <= 0;
        for (int i = 0; i < OWN_THREADS && !own; i++) own = g_own_tids[i] == tid;
        if (!own && syscall(SYS_kcmp, getpid(), tid, KCMP_FILES, 0, 0) == 0) {
            fprintf(stderr, "record_end_target: thread %d, not the program's, shares its descriptor table\n", tid);
            sharing++;
        }
    }
    closedir(tasks);
    return sharing;
}

/* reopen-stdin: 0 when every open of /dev/null got fd 0, else 4. */
static int reopen_stdin(double seconds) {
    note_own_thread();
    pthread_t t;
    for (int i = 0; i < IDLE_THREADS; i++)
        if (pthread_create(&t, NULL, idle_thread, NULL) != 0) return 2;
    if (pthread_create(&t, NULL, dlclose_thread, NULL) != 0) return 2;
    while (atomic_load(&g_own_started) < OWN_THREADS) sched_yield();
    double until = monotonic_seconds() + seconds;
    unsigned long opens = 0;
    while (monotonic_seconds() < until)
        for (int i = 0; i < 100; i++, opens++) {
            int fd = open("/dev/null", O_RDONLY);
            if (fd != 0) {
                fprintf(stderr, "record_end_target: open %lu of /dev/null gave fd %d (errno %d), not 0\n", opens, fd,
                        errno);
                return 4;
            }
            close(fd);
        }
    /* The race above needs the recorder's thread and this one on two CPUs
     * at once; what makes it possible is checked whatever the load. */
    return foreign_threads_sharing_fds() ? 4 : 0;
}

/* dlclose-pairs: how many pairs of dlcloses took >= 90 ms. */
static int dlclose_pairs(int n) {
    pthread_t t;
    for (int i = 0; i < IDLE_THREADS; i++) /* a longer round for the collector */
        if (pthread_create(&t, NULL, idle_thread, NULL) != 0) return 2;
    while (atomic_load(&g_own_started) < IDLE_THREADS) sched_yield();
    int slow = 0;
    double max = 0;
    for (int i = 0; i < n; i++) {
        double start = monotonic_seconds();
        void *one = dlopen(NULL, RTLD_NOW), *two = dlopen(NULL, RTLD_NOW);
        if (!one || !two || dlclose(two) != 0 || dlclose(one) != 0) return 2;
        double took = monotonic_seconds() - start;
        if (took >= 0.09) slow++;
        if (took > max) max = took;
    }
    printf("dlclose-pairs %d slow %d max %.1f\n", n, slow, max * 1e3);
    return 0;
}

static void *burning_thread(void *arg) {
    burn_cpu(*(double *)arg);
    return NULL;
}

static void own_handler(int sig) {
    (void)sig;
    static const char msg[] = "own handler\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(43);
    _exit(42);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: record_end_target exit|_exit|_Exit|segv|abort|term|pipe|usr1|alarm|own-segv "
                        "CPU_SECONDS\n");
        return 2;
    }
    const char *how = argv[1];
    if (strcmp(how, "reopen-stdin") == 0) return reopen_stdin(atof(argv[2]));
    if (strcmp(how, "dlclose-pairs") == 0) return dlclose_pairs(atoi(argv[2]));
    if (strcmp(how, "pthread-exit") == 0) {
        static double seconds;
        seconds = atof(argv[2]);
        pthread_t t;
        if (pthread_create(&t, NULL, burning_thread, &seconds) != 0) return 2;
        pthread_exit(NULL);
    }
    if (strcmp(how, "close-stdout") == 0) {
        static const char msg[] = "closing\n";
        if (write(1, msg, sizeof msg - 1) != (ssize_t)(sizeof msg - 1) || close(1) != 0) return 3;
        burn_cpu(atof(argv[2]));
        return 0;
    }
    if (strcmp(how, "own-segv") == 0) signal(SIGSEGV, own_handler);
    if (strcmp(how, "restore-sigprof") == 0) {
        struct sigaction saved;
        if (sigaction(SIGPROF, NULL, &saved) != 0 || sigaction(SIGPROF, &saved, NULL) != 0) return 2;
    }
    burn_cpu(atof(argv[2]));
    if (strcmp(how, "exec") == 0) {
        execl("/proc/self/exe", argv[0], "exit", argv[2], (char *)NULL);
        perror("record_end_target: exec of itself");
        return 2;
    }
    if (strcmp(how, "closed-stdio") == 0) {
        ssize_t wrote = write(1, "x", 1);
        int write_errno = errno, opened = open("/dev/null", O_RDONLY);
        if (wrote < 0 && write_errno == EBADF && opened == 0) return 0;
        fprintf(stderr, "record_end_target: stdout took %zd bytes (errno %d), open gave fd %d\n", wrote,
                write_errno, opened);
        return 4;
    }
    /* The thread's CPU time at its end, for the test to compare. */
    char line[64];
    int n = snprintf(line, sizeof line, "thread-cpu %.6f\n", thread_cpu_seconds());
    if (write(1, line, (size_t)n) != n) return 3;
    if (strcmp(how, "exit") == 0 || strcmp(how, "restore-sigprof") == 0) exit(0);
    if (strcmp(how, "_exit") == 0) _exit(0);
    if (strcmp(how, "_Exit") == 0) _Exit(0);
    if (strcmp(how, "abort") == 0) abort();
    if (strcmp(how, "term") == 0) raise(SIGTERM);
    if (strcmp(how, "usr1") == 0) raise(SIGUSR1);
    if (strcmp(how, "alarm") == 0) {
        struct itimerval soon = {{0, 0}, {0, 100000}};
        setitimer(ITIMER_REAL, &soon, NULL);
        for (;;) pause();
    }
    int unread[2];
    if (strcmp(how, "pipe") == 0 && pipe(unread) == 0 && close(unread[0]) == 0) {
        if (write(unread[1], "x", 1) < 0) perror("record_end_target: write into a pipe nobody reads");
        return 4;
    }
    if (strcmp(how, "segv") == 0 || strcmp(how, "own-segv") == 0) {
        /* A page nobody may touch: a real fault, which the sanitizers of a
         * sanitized build let through (a null pointer they would report). */
        volatile int *nowhere = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (nowhere != MAP_FAILED) *nowhere = 1;
    }
    fprintf(stderr, "record_end_target: unknown ending %s\n", how);
    return 2;
}
