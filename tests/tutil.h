/*
 * tutil.h — plumbing shared by the Criterion suites (tests/test_*.c): a
 * growing in-memory buffer that serves as a tm_sink write callback, an
 * allocator that fails on demand, reading a whole file into memory, the
 * recorder suites' temporary directory and perf_event_open probe, summing a
 * pprof profile's values, the sanitizer settings of recorded child
 * programs, and running a program on a pseudo-terminal. Trace-building
 * helpers live in trace_builder.h, assertions in the test files.
 *
 * tutil.c is compiled into the tm_trace_builder library, which gen_trace
 * links as well, so it uses neither Criterion nor libtracemill: failures are
 * return values for the tests to assert on, and running out of memory
 * abort()s. Not named test_*.c, so CMake does not make it a suite.
 */
#ifndef TM_TUTIL_H
#define TM_TUTIL_H

#include <stddef.h>
#include <stdint.h>

/* A malloc'd byte buffer; zero-initialise it ({0}) before use. */
typedef struct tu_membuf {
    char *data; /* NULL until the first write; then always NUL-terminated */
    size_t len; /* bytes written, excluding the terminating NUL */
    size_t cap;
} tu_membuf;

/* A tm_sink write callback with ctx = tu_membuf *: appends data[0..len) and
 * keeps the buffer NUL-terminated (so it can be used as a C string).
 * Returns 0, or 1 if memory runs out. Usage:
 *     tu_membuf out = {0};
 *     tm_sink sink = {.write = tu_membuf_write, .ctx = &out};                 */
int tu_membuf_write(void *ctx, const void *data, size_t len);

/* Frees the buffer and zeroes *m, ready for reuse. */
void tu_membuf_free(tu_membuf *m);

/* An allocator (tm_alloc callbacks, ctx = tu_fail_alloc *) that fails
 * allocation number fail_at (counting from 0; -1: never) and tracks the
 * bytes still live, for allocation-failure and leak tests:
 *     tu_fail_alloc fa = {.fail_at = -1};
 *     tm_alloc alloc = {.malloc_fn = tu_fa_malloc, .realloc_fn = tu_fa_realloc,
 *                       .free_fn = tu_fa_free, .ctx = &fa};                */
typedef struct tu_fail_alloc {
    long fail_at, count, live;
} tu_fail_alloc;

void *tu_fa_malloc(void *ctx, size_t size);
void *tu_fa_realloc(void *ctx, void *p, size_t old_size, size_t new_size);
void tu_fa_free(void *ctx, void *p, size_t size);

/* Reads the whole file at path into a malloc'd buffer with a NUL appended
 * (not counted in *len; len may be NULL). Returns NULL if the file cannot be
 * opened or read. */
char *tu_read_file(const char *path, size_t *len);

/* In a child about to exec a recorded program, in the ASan build: the
 * program loads an ASan-built preload library, so the runtime is not the
 * first library (verify_asan_link_order=0), and LeakSanitizer stays off (a
 * child forked while another thread holds ASan's allocator lock deadlocks
 * in its exit-time leak check: an ASan limitation, not the recorder's). A
 * no-op in other builds. */
void tu_asan_recorded_child_env(void);

/* The recorder suites' temporary directory, one per test (Criterion runs
 * each test in a process of its own): tu_test_dir_make creates
 * /tmp/PREFIX_XXXXXX and returns its path (NULL on failure);
 * tu_test_dir_remove deletes it with all it holds (0, or -1);
 * tu_test_dir is its path; tu_test_path(name) is a malloc'd "DIR/name". */
const char *tu_test_dir_make(const char *prefix);
int tu_test_dir_remove(void);
const char *tu_test_dir(void);
char *tu_test_path(const char *name);

/* Whether this kernel lets us open a user-only cpu-clock event, as the
 * perf backend of `tracemill record` needs; 0 with the reason in why. */
int tu_perf_available(char *why, size_t why_len);

/* The sum over every Sample of an uncompressed pprof Profile of its
 * value[index] (for `tracemill convert -f pprof`'s CPU profiles, index 1
 * is cpu/nanoseconds). 0, or -1 when the profile is malformed. */
int tu_pprof_value_sum(const void *profile, size_t len, unsigned index, uint64_t *sum);

/* Runs argv (argv[0] a path) with a new pseudo-terminal as its controlling
 * terminal, stdin, stdout and stderr, as in an interactive session. Returns
 * the child's pid with the terminal's other side in *master, or -1. */
int tu_spawn_on_pty(char *const argv[], int *master);
/* Waits for child pid (its own process group) up to timeout_s; past it
 * kills the group and returns -1. Else 0 with *status set. */
int tu_wait_child(int pid, int timeout_s, int *status);

/* Appends what the terminal shows to *seen until it holds want (returns 1)
 * or timeout_ms pass or the program closes the terminal (returns 0). */
int tu_pty_wait_for(int master, tu_membuf *seen, const char *want, int timeout_ms);

#endif
