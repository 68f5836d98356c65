/*
 * test_threads.c — the threading rule of tracemill.h: one parsed tm_trace
 * written by several threads at once, every writer at the same time, gives
 * the bytes a lone writer gives; their allocations all go through the
 * caller's (thread-safe) allocator and are all returned to it.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "tracemill.h"
#include "tutil.h"

enum { N_THREADS = 4, ROUNDS = 3, N_WRITERS = 7 };

/* A thread-safe allocator that counts the bytes it has live. */
static atomic_long g_live, g_calls;
static void *count_malloc(void *ctx, size_t size) {
    (void)ctx;
    atomic_fetch_add(&g_live, (long)size);
    atomic_fetch_add(&g_calls, 1);
    return malloc(size);
}
static void *count_realloc(void *ctx, void *p, size_t old_size, size_t new_size) {
    (void)ctx;
    void *np = realloc(p, new_size);
    if (np) atomic_fetch_add(&g_live, (long)new_size - (long)old_size);
    atomic_fetch_add(&g_calls, 1);
    return np;
}
static void count_free(void *ctx, void *p, size_t size) {
    (void)ctx;
    atomic_fetch_sub(&g_live, (long)size);
    free(p);
}

static tm_status write_one(const tm_trace *t, int which, tu_membuf *out) {
    tm_sink sink = {.write = tu_membuf_write, .ctx = out};
    tm_error err;
    switch (which) {
    case 0: return tm_write_sample_v2(t, NULL, &sink, &err);
    case 1: return tm_write_pprof(t, NULL, &sink, &err);
    case 2: return tm_write_folded(t, NULL, &sink, &err);
    case 3: return tm_write_speedscope(t, NULL, &sink, &err);
    case 4: return tm_write_flamegraph(t, NULL, &sink, &err);
    case 5: return tm_write_flamegraph_diff(t, t, NULL, &sink, &err);
    default: return tm_write_report(t, &sink, &err);
    }
}

typedef struct job {
    const tm_trace *t;
    const tu_membuf *want; /* [N_WRITERS] */
    int mismatches;
} job;

static void *run(void *arg) {
    job *j = arg;
    for (int r = 0; r < ROUNDS; r++)
        for (int w = 0; w < N_WRITERS; w++) {
            int which = (w + r) % N_WRITERS; /* threads write different formats at the same moment */
            tu_membuf got = {0};
            if (write_one(j->t, which, &got) != TM_OK || got.len != j->want[which].len ||
                memcmp(got.data, j->want[which].data, got.len) != 0)
                j->mismatches++;
            tu_membuf_free(&got);
        }
    return NULL;
}

Test(threads, writers_on_one_trace_at_once) {
    size_t len;
    char *buf = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert_not_null(buf);
    tm_alloc alloc = {.malloc_fn = count_malloc, .realloc_fn = count_realloc, .free_fn = count_free, .ctx = NULL};
    tm_options opts = {0};
    opts.alloc = &alloc;
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(buf, len, &opts, &t, NULL), TM_OK);
    long parsed = atomic_load(&g_live);

    tu_membuf want[N_WRITERS] = {{0}};
    for (int w = 0; w < N_WRITERS; w++) {
        cr_assert_eq(write_one(t, w, &want[w]), TM_OK, "writer %d alone", w);
        cr_assert_gt(want[w].len, 0);
    }
    cr_assert_eq(atomic_load(&g_live), parsed, "a lone writer kept memory");

    long calls = atomic_load(&g_calls);
    pthread_t th[N_THREADS];
    job jobs[N_THREADS];
    for (int i = 0; i < N_THREADS; i++) {
        jobs[i] = (job){t, want, 0};
        cr_assert_eq(pthread_create(&th[i], NULL, run, &jobs[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
        cr_expect_eq(jobs[i].mismatches, 0, "thread %d: %d outputs differ from a lone writer's", i,
                     jobs[i].mismatches);
    }
    cr_expect_gt(atomic_load(&g_calls), calls, "the writers did not allocate through tm_options.alloc");
    cr_expect_eq(atomic_load(&g_live), parsed, "the writers running at once kept memory");

    tm_trace_free(t);
    cr_expect_eq(atomic_load(&g_live), 0, "tm_trace_free left %ld bytes", atomic_load(&g_live));
    for (int w = 0; w < N_WRITERS; w++) tu_membuf_free(&want[w]);
    free(buf);
}
