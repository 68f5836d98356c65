/*
 * tutil.c — the shared test plumbing declared in tutil.h: the tu_membuf
 * sink, the failing allocator, whole-file reading, the recorder suites'
 * temporary directory and perf probe, pprof value sums, the recorded
 * child's ASan settings, waiting for a child with a deadline and programs
 * run on a pseudo-terminal. No Criterion and no libtracemill here (see tutil.h):
 * callers assert on the return values.
 */
#ifndef _XOPEN_SOURCE
#define _XOPEN_SOURCE 700 /* setenv, posix_openpt */
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* syscall */
#endif
#include "tutil.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int tu_membuf_write(void *ctx, const void *data, size_t len) {
    tu_membuf *m = ctx;
    if (m->cap - m->len < len + 1) { /* room for the data and the NUL */
        size_t cap = m->cap ? m->cap : 4096;
        while (cap - m->len < len + 1) cap *= 2;
        char *p = realloc(m->data, cap);
        if (!p) return 1;
        m->data = p;
        m->cap = cap;
    }
    if (len) memcpy(m->data + m->len, data, len);
    m->len += len;
    m->data[m->len] = 0;
    return 0;
}

void tu_membuf_free(tu_membuf *m) {
    free(m->data);
    memset(m, 0, sizeof *m);
}

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) abort();
    for (;;) {
        if (n == cap) {
            buf = realloc(buf, (cap *= 2) + 1);
            if (!buf) abort();
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

void *tu_fa_malloc(void *ctx, size_t size) {
    tu_fail_alloc *a = ctx;
    if (a->count++ == a->fail_at) return NULL;
    a->live += (long)size;
    return malloc(size);
}

void *tu_fa_realloc(void *ctx, void *p, size_t old_size, size_t new_size) {
    tu_fail_alloc *a = ctx;
    if (a->count++ == a->fail_at) return NULL;
    void *np = realloc(p, new_size);
    if (np) a->live += (long)new_size - (long)old_size;
    return np;
}

void tu_fa_free(void *ctx, void *p, size_t size) {
    tu_fail_alloc *a = ctx;
    if (p) a->live -= (long)size;
    free(p);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_CLANG_ASAN 1
#endif
#endif

void tu_asan_recorded_child_env(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(TU_CLANG_ASAN)
    setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
#endif
}

int tu_wait_child(int pid, int timeout_s, int *status) {
    for (int waited_ms = 0;; waited_ms += 20) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got == pid) return 0;
        if (got < 0 || waited_ms > timeout_s * 1000) {
            kill(-pid, SIGKILL);
            waitpid(pid, status, 0);
            return -1;
        }
        struct timespec pause = {0, 20000000};
        nanosleep(&pause, NULL);
    }
}

int tu_spawn_on_pty(char *const argv[], int *master) {
    int m = posix_openpt(O_RDWR | O_NOCTTY);
    if (m < 0 || grantpt(m) != 0 || unlockpt(m) != 0) return -1;
    const char *name = ptsname(m);
    if (!name) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* A new session whose first terminal opened becomes its own. */
        setsid();
        int s = open(name, O_RDWR);
        if (s < 0) _exit(126);
        close(m);
        dup2(s, 0), dup2(s, 1), dup2(s, 2);
        if (s > 2) close(s);
        execv(argv[0], argv);
        _exit(127);
    }
    *master = m;
    return pid;
}

int tu_pty_wait_for(int master, tu_membuf *seen, const char *want, int timeout_ms) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        if (seen->data && strstr(seen->data, want)) return 1;
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = timeout_ms - ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000);
        struct pollfd p = {master, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0) return 0;
        char buf[4096];
        ssize_t n = read(master, buf, sizeof buf);
        if (n <= 0 || tu_membuf_write(seen, buf, (size_t)n) != 0) return 0; /* the program is gone */
    }
}

/* ---- pprof ---- */

/* A varint at *p (below end) into *v; -1 when cut off or too long. */
static int pb_varint(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    *v = 0;
    for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
        uint8_t c = *(*p)++;
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) return 0;
    }
    return -1;
}

/* Skips the value of a field of wire type wire; -1 when it does not fit. */
static int pb_skip(const uint8_t **p, const uint8_t *end, unsigned wire) {
    uint64_t n = 0;
    if (wire == 0) return pb_varint(p, end, &n);
    if (wire == 1) n = 8;
    else if (wire == 5) n = 4;
    else if (wire != 2 || pb_varint(p, end, &n)) return -1;
    if (n > (uint64_t)(end - *p)) return -1;
    *p += n;
    return 0;
}

int tu_pprof_value_sum(const void *profile, size_t len, unsigned index, uint64_t *sum) {
    const uint8_t *p = profile, *end = p + len;
    enum { PROFILE_SAMPLE = 2, SAMPLE_VALUE = 2, WIRE_LEN = 2 };
    *sum = 0;
    while (p < end) {
        uint64_t tag, n;
        if (pb_varint(&p, end, &tag)) return -1;
        if (tag != (PROFILE_SAMPLE << 3 | WIRE_LEN)) {
            if (pb_skip(&p, end, (unsigned)(tag & 7))) return -1;
            continue;
        }
        if (pb_varint(&p, end, &n) || n > (uint64_t)(end - p)) return -1;
        const uint8_t *s = p, *s_end = p + n;
        p = s_end;
        unsigned at = 0; /* Sample.value entries seen, packed or not */
        while (s < s_end) {
            uint64_t t, v;
            if (pb_varint(&s, s_end, &t)) return -1;
            if (t == (SAMPLE_VALUE << 3 | WIRE_LEN)) {
                if (pb_varint(&s, s_end, &n) || n > (uint64_t)(s_end - s)) return -1;
                const uint8_t *v_at = s, *v_end = s + n;
                s = v_end;
                for (; v_at < v_end; at++) {
                    if (pb_varint(&v_at, v_end, &v)) return -1;
                    if (at == index) *sum += v;
                }
            } else if (t == (SAMPLE_VALUE << 3)) {
                if (pb_varint(&s, s_end, &v)) return -1;
                if (at++ == index) *sum += v;
            } else if (pb_skip(&s, s_end, (unsigned)(t & 7))) {
                return -1;
            }
        }
    }
    return 0;
}

/* ---- the recorder suites' directory, perf ---- */

static char g_test_dir[256];

const char *tu_test_dir_make(const char *prefix) {
    if (snprintf(g_test_dir, sizeof g_test_dir, "/tmp/%s_XXXXXX", prefix) >= (int)sizeof g_test_dir) return NULL;
    return mkdtemp(g_test_dir);
}

int tu_test_dir_remove(void) {
    char cmd[sizeof g_test_dir + 16];
    if (!g_test_dir[0]) return -1;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_test_dir);
    int st = system(cmd);
    g_test_dir[0] = 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

const char *tu_test_dir(void) { return g_test_dir; }

char *tu_test_path(const char *name) {
    size_t n = strlen(g_test_dir) + 1 + strlen(name) + 1;
    char *p = malloc(n);
    if (!p) abort();
    snprintf(p, n, "%s/%s", g_test_dir, name);
    return p;
}

int tu_perf_available(char *why, size_t why_len) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0) {
        snprintf(why, why_len, "perf_event_open refused here (%s): the perf backend cannot run", strerror(errno));
        return 0;
    }
    close(fd);
    return 1;
}
