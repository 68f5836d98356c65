/*
 * record_heap_target.c — the program the heap profiling tests record
 * (`tracemill record --heap`), plain gcc -O2 without frame pointers. Each
 * mode prints on stdout what it really did, for the test to compare with
 * the profile:
 *
 *   sites    site_a, site_b and site_c allocate 60 / 30 / 10 % of 240 MB in
 *            blocks of 16 to 1024 bytes, each freed after 256 more; site_freed
 *            allocates (malloc, calloc, a realloc chain, posix_memalign,
 *            aligned_alloc) and frees all of it; site_leak keeps 16 MiB.
 *            Prints "truth a=.. b=.. c=.. leak=..".
 *   threads  four threads, each thread_site churning 32 MB and keeping 2 MiB
 *            (thread_leak); prints "truth leak=..".
 *   fork     allocates, forks children that allocate, free and exit (one of
 *            them execs /bin/true), waits; prints "children ok N".
 *   steady   for 2.4 s, steady_leak keeps 100 kB every 10 ms (24 MB in all).
 *   paths    one allocating function, shared_site, reached from the same
 *            stack depth through path_a, path_b and path_c (60 / 30 / 10 %
 *            of 120 MB; same code, so shared_site runs at the same stack
 *            address with the same return address each time: only the
 *            stack words above tell the paths apart), then through fp_path_a
 *            and fp_path_b (2 : 1 of 60 MB), which keep frame pointers and a
 *            variable-length array of random size. Prints
 *            "truth a=.. b=.. c=.. fa=.. fb=..".
 *   large    200 times: 50 blocks of 1000 bytes allocated and freed at
 *            small_churn, then one of 100 000 bytes kept by large_leak (20 MB
 *            in all); prints "truth large=..". Recorded with an interval
 *            between the two sizes, every large block must be sampled.
 *   correct  every interposed function, checked (contents, alignment, errno),
 *            with a checksum of the results; prints "checksum X" and "ok"
 *            (the same with and without the profiler).
 *   deep     deep_site allocates 4 MB at the bottom of a recursion 200 frames
 *            deep, shallow_site 4 MB from main.
 *   depths   deep_site allocates 16 blocks of 4000 bytes (19.2 MB in all) at
 *            the bottom of recursions 1 to 300 frames deep: 300 stacks whose
 *            interned tables run to tens of kilobytes.
 *   many     keeps 1.2 million blocks of 16 bytes alive at once (more
 *            than the profiler can track when every byte is sampled).
 *   sigprof  takes SIGPROF for a handler that restores the default and
 *            raises it again (GNU sort's cleanup), allocates, then burns CPU
 *            for 1 s: the first timer signal kills it.
 *   exec     exec_leak keeps 8 MB, an exec of a missing file fails,
 *            after_failed_exec keeps 4 MB, then the program execs itself in
 *            mode steady (the same pid: recorded in the same trace).
 *   exec-shell  the same as a shell execs: with a setenv of its own that
 *            leaves environ alone (bash's works on its variable table) and
 *            execve given environ.
 *   closefrom  as daemons start: closes every descriptor from 3 up, opens
 *            eight files in a new directory, changes to "/", keeps
 *            allocating for 0.3 s, then writes "user data" into each file;
 *            prints "dir=PATH".
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline, noipa))
#define WINDOW 256

static uint64_t g_rng = 88172645463325252ull;
static volatile uint64_t g_sink;

static uint64_t next_random(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}

/* A block of 16..1024 bytes, written so that the allocation is used. */
static size_t block_size(void) { return 16 + (size_t)(next_random() % 1009); }

static void touch(char *p, size_t n) {
    p[0] = (char)n, p[n - 1] = (char)(n >> 3);
    g_sink += (uint64_t)(unsigned char)p[0];
}

/* A ring of live blocks: each new one frees the one WINDOW allocations older. */
typedef struct ring {
    void *slot[WINDOW];
    size_t at;
} ring;

NOINLINE static void release(ring *r, void *p) {
    free(r->slot[r->at]);
    r->slot[r->at] = p;
    r->at = (r->at + 1) % WINDOW;
}

NOINLINE static void drain(ring *r) {
    for (size_t i = 0; i < WINDOW; i++) free(r->slot[i]), r->slot[i] = NULL;
}

NOINLINE uint64_t site_a(ring *r) {
    size_t n = block_size();
    char *p = malloc(n);
    touch(p, n);
    release(r, p);
    return n;
}

NOINLINE uint64_t site_b(ring *r) {
    size_t n = block_size();
    char *p = malloc(n);
    touch(p, n);
    release(r, p);
    return n;
}

NOINLINE uint64_t site_c(ring *r) {
    size_t n = block_size();
    char *p = malloc(n);
    touch(p, n);
    release(r, p);
    return n;
}

/* Allocates through every kind of call and frees all of it. */
NOINLINE void site_freed(void) {
    char *grow = NULL;
    for (size_t n = 64; n <= 64 * 1024; n *= 2) {
        grow = realloc(grow, n);
        touch(grow, n);
    }
    free(grow);
    void *aligned = NULL;
    if (posix_memalign(&aligned, 64, 4000) == 0) touch(aligned, 4000);
    free(aligned);
    char *a = aligned_alloc(256, 8192), *z = calloc(100, 50), *m = malloc(block_size());
    touch(a, 8192), touch(z, 5000), touch(m, 16);
    free(a), free(z), free(m);
}

NOINLINE uint64_t site_leak(void) {
    size_t n = block_size();
    char *p = malloc(n);
    touch(p, n);
    return n;
}

static int mode_sites(void) {
    const uint64_t total = 240000000ull;
    uint64_t a = 0, b = 0, c = 0, leak = 0;
    ring ra = {0}, rb = {0}, rc = {0};
    /* Interleaved in proportion, so that each site sees the same sampler
     * state on average. */
    for (uint64_t round = 1; a + b + c < total; round++) {
        uint64_t pick = next_random() % 10;
        if (pick < 6) a += site_a(&ra);
        else if (pick < 9) b += site_b(&rb);
        else c += site_c(&rc);
        if (round % 2000 == 0) site_freed();
    }
    for (int i = 0; i < 200; i++) site_freed();
    while (leak < 16u << 20) leak += site_leak();
    drain(&ra), drain(&rb), drain(&rc);
    printf("truth a=%llu b=%llu c=%llu leak=%llu\n", (unsigned long long)a, (unsigned long long)b,
           (unsigned long long)c, (unsigned long long)leak);
    return 0;
}

static _Atomic uint64_t g_thread_leak;

NOINLINE uint64_t thread_site(ring *r) {
    size_t n = block_size();
    char *p = malloc(n);
    touch(p, n);
    release(r, p);
    return n;
}

NOINLINE uint64_t thread_leak(void) {
    size_t n = block_size();
    char *p = malloc(n);
    touch(p, n);
    return n;
}

static void *thread_main(void *arg) {
    (void)arg;
    ring *r = calloc(1, sizeof *r);
    uint64_t churn = 0, leak = 0;
    while (churn < 32000000u) churn += thread_site(r);
    while (leak < 2u << 20) leak += thread_leak();
    drain(r);
    free(r);
    g_thread_leak += leak;
    return NULL;
}

static int mode_threads(void) {
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, thread_main, NULL) != 0) return 1;
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("truth leak=%llu\n", (unsigned long long)g_thread_leak);
    return 0;
}

static int mode_fork(void) {
    ring r = {0};
    int ok = 0;
    for (int i = 0; i < 8; i++) {
        for (int k = 0; k < 20000; k++) site_a(&r);
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            ring child = {0};
            for (int k = 0; k < 20000; k++) site_b(&child);
            drain(&child);
            if (i == 0) execl("/bin/true", "true", (char *)NULL);
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0) ok++;
    }
    drain(&r);
    printf("children ok %d\n", ok);
    return ok == 8 ? 0 : 1;
}

NOINLINE void steady_leak(size_t bytes) {
    for (size_t kept = 0; kept < bytes; kept += 1000) touch(malloc(1000), 1000);
}

static int mode_steady(void) {
    for (int i = 0; i < 240; i++) {
        steady_leak(100000);
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    return 0;
}

NOINLINE void small_churn(void) {
    for (int i = 0; i < 50; i++) {
        char *p = malloc(1000);
        touch(p, 1000);
        free(p);
    }
}

NOINLINE uint64_t large_leak(void) {
    touch(malloc(100000), 100000);
    return 100000;
}

static int mode_large(void) {
    uint64_t large = 0;
    for (int i = 0; i < 200; i++) {
        small_churn();
        large += large_leak();
    }
    printf("truth large=%llu\n", (unsigned long long)large);
    return 0;
}

static volatile uint64_t g_zero;

NOINLINE uint64_t shared_site(ring *r) {
    size_t n = block_size();
    char *p = malloc(n);
    touch(p, n);
    release(r, p);
    return n;
}

/* Not tail calls: each path keeps its frame under shared_site's. */
NOINLINE uint64_t path_a(ring *r) { return shared_site(r) + g_zero; }
NOINLINE uint64_t path_b(ring *r) { return shared_site(r) + g_zero; }
NOINLINE uint64_t path_c(ring *r) { return shared_site(r) + g_zero; }

#define FRAME_POINTER __attribute__((optimize("no-omit-frame-pointer")))

FRAME_POINTER NOINLINE uint64_t fp_path_a(ring *r, size_t pad) {
    volatile char vla[pad];
    vla[0] = 0;
    return shared_site(r) + (uint64_t)vla[0];
}

FRAME_POINTER NOINLINE uint64_t fp_path_b(ring *r, size_t pad) {
    volatile char vla[pad];
    vla[0] = 0;
    return shared_site(r) + (uint64_t)vla[0];
}

static int mode_paths(void) {
    uint64_t a = 0, b = 0, c = 0, fa = 0, fb = 0;
    ring r = {0};
    while (a + b + c < 120000000ull) {
        uint64_t pick = next_random() % 10;
        if (pick < 6) a += path_a(&r);
        else if (pick < 9) b += path_b(&r);
        else c += path_c(&r);
    }
    while (fa + fb < 60000000ull) {
        uint64_t pick = next_random();
        size_t pad = 1 + (size_t)(pick >> 8) % 200;
        if (pick % 3 < 2) fa += fp_path_a(&r, pad);
        else fb += fp_path_b(&r, pad);
    }
    drain(&r);
    printf("truth a=%llu b=%llu c=%llu fa=%llu fb=%llu\n", (unsigned long long)a, (unsigned long long)b,
           (unsigned long long)c, (unsigned long long)fa, (unsigned long long)fb);
    return 0;
}

/* Folds n bytes into the checksum. */
static uint64_t fold(uint64_t sum, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) sum = (sum ^ b[i]) * 1099511628211ull;
    return sum;
}

#define CHECK(cond)                                                                                                   \
    do {                                                                                                              \
        if (!(cond)) {                                                                                                \
            printf("failed: %s (line %d, errno %d)\n", #cond, __LINE__, errno);                                    \
            return 1;                                                                                                 \
        }                                                                                                             \
    } while (0)

NOINLINE void exec_leak(size_t bytes) {
    for (size_t kept = 0; kept < bytes; kept += 1000) touch(malloc(1000), 1000);
}

NOINLINE void after_failed_exec(size_t bytes) {
    for (size_t kept = 0; kept < bytes; kept += 1000) touch(malloc(1000), 1000);
}

/* A shell keeps its variables in a table of its own and defines setenv over
 * it (bash does), so that a library's setenv leaves environ as it was. */
static int g_setenv_of_shell;

int setenv(const char *name, const char *value, int overwrite) {
    static int (*libc_setenv)(const char *, const char *, int);
    if (g_setenv_of_shell) return 0;
    void *sym = libc_setenv ? NULL : dlsym(RTLD_NEXT, "setenv");
    if (sym) memcpy(&libc_setenv, &sym, sizeof sym);
    if (!libc_setenv) return errno = ENOSYS, -1;
    return libc_setenv(name, value, overwrite);
}

static int mode_exec(const char *self, int as_shell) {
    g_setenv_of_shell = as_shell;
    exec_leak(8000000);
    char *missing[] = {"tm-no-such-program", NULL}, *steady[] = {(char *)self, "steady", NULL};
    if (as_shell) execve("/nonexistent/tm-no-such-program", missing, environ);
    else execl("/nonexistent/tm-no-such-program", "tm-no-such-program", (char *)NULL);
    CHECK(errno == ENOENT);
    after_failed_exec(4000000);
    if (as_shell) execve("/proc/self/exe", steady, environ);
    else execl("/proc/self/exe", self, "steady", (char *)NULL);
    printf("failed: exec of itself: %s\n", strerror(errno));
    return 1;
}

static int mode_closefrom(void) {
    char dir[] = "/tmp/tm-closefrom-XXXXXX";
    CHECK(mkdtemp(dir));
    steady_leak(100000);
    for (int fd = 3; fd < 1024; fd++) close(fd);
    int files[8];
    for (int i = 0; i < 8; i++) {
        char path[64];
        snprintf(path, sizeof path, "%s/user%d.txt", dir, i);
        CHECK((files[i] = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644)) >= 0);
    }
    CHECK(chdir("/") == 0);
    for (int i = 0; i < 30; i++) {
        steady_leak(100000);
        struct timespec pause = {0, 10000000};
        nanosleep(&pause, NULL);
    }
    for (int i = 0; i < 8; i++) CHECK(write(files[i], "user data\n", 10) == 10 && close(files[i]) == 0);
    printf("dir=%s\n", dir);
    return 0;
}

static int mode_correct(void) {
    uint64_t sum = 14695981039346656037ull;
    for (int round = 0; round < 2000; round++) {
        size_t n = block_size();
        unsigned char *z = calloc(n, 3);
        CHECK(z);
        for (size_t i = 0; i < n * 3; i++) CHECK(z[i] == 0);
        for (size_t i = 0; i < n * 3; i++) z[i] = (unsigned char)(i * 7 + round);
        unsigned char *g = realloc(z, n * 7); /* grows: the old contents stay */
        CHECK(g);
        for (size_t i = 0; i < n * 3; i++) CHECK(g[i] == (unsigned char)(i * 7 + round));
        unsigned char *s = realloc(g, n); /* shrinks */
        CHECK(s);
        sum = fold(sum, s, n);
        unsigned char *ra = reallocarray(s, n, 2);
        CHECK(ra);
        sum = fold(sum, ra, n);
        free(ra);
        void *pm = NULL;
        CHECK(posix_memalign(&pm, 128, n) == 0 && ((uintptr_t)pm & 127) == 0);
        memset(pm, round, n);
        sum = fold(sum, pm, n);
        free(pm);
        void *al = aligned_alloc(64, 64 * (n / 64 + 1));
        CHECK(al && ((uintptr_t)al & 63) == 0);
        free(al);
        void *ma = memalign(256, n);
        CHECK(ma && ((uintptr_t)ma & 255) == 0);
        free(ma);
        void *va = valloc(n);
        CHECK(va && ((uintptr_t)va & 4095) == 0);
        free(va);
        void *pv = pvalloc(n);
        CHECK(pv && ((uintptr_t)pv & 4095) == 0);
        free(pv);
    }
#ifndef __SANITIZE_ADDRESS__ /* AddressSanitizer's allocator stops the program at these */
    volatile size_t huge = SIZE_MAX / 2; /* volatile: the compiler would reject the overflow itself */
    errno = 0;
    CHECK(reallocarray(NULL, huge, 3) == NULL && errno == ENOMEM);
    errno = 0;
    CHECK(calloc(huge, 3) == NULL && errno == ENOMEM);
    CHECK(posix_memalign(&(void *){NULL}, 3, 16) == EINVAL);
#endif
    void *grown = realloc(NULL, 100); /* realloc(NULL) is malloc */
    CHECK(grown);
    free(grown);
    free(NULL);
    void *zero = malloc(0);
    free(zero);
    printf("checksum %016llx\nok\n", (unsigned long long)sum);
    return 0;
}

static void die_again(int sig) {
    signal(sig, SIG_DFL);
    raise(sig);
}

static int mode_sigprof(void) {
    signal(SIGPROF, die_again);
    volatile char *p = malloc(100000);
    CHECK(p);
    p[0] = 1;
    struct timespec t0, t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    do clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 1000000000L);
    puts("not killed");
    return 0;
}

NOINLINE void *deep_site(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" : "+r"(p)); /* no tail call: the site keeps its frame */
    return p;
}

NOINLINE void *shallow_site(size_t n) {
    void *p = malloc(n);
    __asm__ volatile("" : "+r"(p));
    return p;
}

/* 1000 blocks of 4000 bytes from site, each written and freed. */
NOINLINE uint64_t churn_at(void *(*site)(size_t)) {
    uint64_t sum = 0;
    for (int i = 0; i < 1000; i++) {
        char *p = site(4000);
        CHECK(p);
        touch(p, 4000);
        sum += (uint64_t)p[1];
        free(p);
    }
    return sum;
}

NOINLINE uint64_t recurse(int left) {
    if (left == 0) return churn_at(deep_site);
    uint64_t r = recurse(left - 1);
    __asm__ volatile("" : "+r"(r)); /* no tail call: every level keeps its frame */
    return r + (uint64_t)left;
}

NOINLINE uint64_t climb(int left) {
    if (left == 0) {
        uint64_t sum = 0;
        for (int i = 0; i < 16; i++) {
            char *p = deep_site(4000);
            touch(p, 4000);
            sum += (uint64_t)p[1];
            free(p);
        }
        return sum;
    }
    uint64_t r = climb(left - 1);
    __asm__ volatile("" : "+r"(r)); /* no tail call: every level keeps its frame */
    return r + (uint64_t)left;
}

static int mode_depths(void) {
    uint64_t sum = 0;
    for (int depth = 1; depth <= 300; depth++) sum += climb(depth);
    printf("sum %llu\n", (unsigned long long)sum);
    return 0;
}

static int mode_deep(void) {
    uint64_t sum = recurse(200) + churn_at(shallow_site);
    printf("sum %llu\n", (unsigned long long)sum);
    return 0;
}

static int mode_many(void) {
    enum { N = 1200000 };
    void **kept = malloc(N * sizeof *kept);
    CHECK(kept);
    for (size_t i = 0; i < N; i++) CHECK(kept[i] = malloc(16));
    printf("truth many=%d\n", N);
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "sites";
    if (strcmp(mode, "many") == 0) return mode_many();
    if (strcmp(mode, "deep") == 0) return mode_deep();
    if (strcmp(mode, "depths") == 0) return mode_depths();
    if (strcmp(mode, "sigprof") == 0) return mode_sigprof();
    if (strcmp(mode, "sites") == 0) return mode_sites();
    if (strcmp(mode, "threads") == 0) return mode_threads();
    if (strcmp(mode, "fork") == 0) return mode_fork();
    if (strcmp(mode, "correct") == 0) return mode_correct();
    if (strcmp(mode, "steady") == 0) return mode_steady();
    if (strcmp(mode, "paths") == 0) return mode_paths();
    if (strcmp(mode, "large") == 0) return mode_large();
    if (strcmp(mode, "closefrom") == 0) return mode_closefrom();
    if (strcmp(mode, "exec") == 0) return mode_exec(argv[0], 0);
    if (strcmp(mode, "exec-shell") == 0) return mode_exec(argv[0], 1);
    fprintf(stderr, "usage: record_heap_target sites|threads|fork|steady|paths|large|correct|many|deep|sigprof\n");
    return 2;
}
