/*
 * scratch.c — the conversion's working memory: a tm_alloc that bumps a
 * pointer through one block, reset after each chunk, and a pool of such
 * blocks shared by the connection threads.
 *
 * A chunk's conversion makes a hundred-odd allocations and frees them all
 * at tm_trace_free. Under load the C library's malloc spent ~6 % of the
 * server's CPU on them: with eight connection threads on two cores, its
 * free lists and chunk headers are cold after every context switch. Here
 * an allocation is an add, a free is nothing (or a step back for the last
 * allocation), and the memory a chunk used is contiguous and warm for the
 * next chunk on any thread.
 *
 * What does not fit in the block (a large trace's arrays) goes to the C
 * library, so the block's size bounds what the pool keeps, not what a
 * conversion may use; budgets are counted by the library as before. A
 * pointer is the block's if it lies inside it: that is how realloc and free
 * tell the two apart.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* Large enough for a ~100 KB chunk's conversion (the demo chunk's conversion peaks at
 * 640 KB, reallocations' leftovers included), small enough that the pool's
 * blocks cost little. */
#define SCRATCH_BLOCK_BYTES ((size_t)1 << 20)
#define SCRATCH_ALIGN ((size_t)16)

struct tm_srv_scratch {
    tm_alloc alloc; /* ctx is this scratch */
    uint8_t *block;
    size_t used;             /* bytes handed out, from the block's start */
    size_t last;             /* offset of the last allocation, for realloc and free in place */
    tm_srv_scratch *next;    /* in the pool's free list */
};

static int owns(const tm_srv_scratch *s, const void *p) {
    return (const uint8_t *)p >= s->block && (const uint8_t *)p < s->block + SCRATCH_BLOCK_BYTES;
}

static void *scratch_malloc(void *ctx, size_t size) {
    tm_srv_scratch *s = ctx;
    /* an empty allocation takes a byte, as malloc's: its pointer is its own
     * (a free of it must not give back the next one's room) and inside the
     * block even when the block is full */
    if (!size) size = 1;
    size_t at = (s->used + SCRATCH_ALIGN - 1) & ~(SCRATCH_ALIGN - 1);
    if (size > SCRATCH_BLOCK_BYTES || at > SCRATCH_BLOCK_BYTES - size) return malloc(size);
    s->last = at;
    s->used = at + size;
    return s->block + at;
}

static void *scratch_realloc(void *ctx, void *p, size_t old_size, size_t new_size) {
    tm_srv_scratch *s = ctx;
    if (!p) return scratch_malloc(s, new_size);
    if (!owns(s, p)) return realloc(p, new_size ? new_size : 1);
    size_t at = (size_t)((uint8_t *)p - s->block);
    if (at == s->last && new_size <= SCRATCH_BLOCK_BYTES - at) { /* the last allocation grows or shrinks in place */
        s->used = at + (new_size ? new_size : 1); /* as scratch_malloc's: its own byte */
        return p;
    }
    if (new_size <= old_size) return p;
    void *q = scratch_malloc(s, new_size);
    if (q) memcpy(q, p, old_size);
    return q;
}

static void scratch_free(void *ctx, void *p, size_t size) {
    tm_srv_scratch *s = ctx;
    (void)size;
    if (!p) return;
    if (!owns(s, p)) {
        free(p);
        return;
    }
    if ((size_t)((uint8_t *)p - s->block) == s->last) s->used = s->last;
}

const tm_alloc *tm_srv_scratch_alloc(tm_srv_scratch *s) { return s ? &s->alloc : NULL; }

void tm_srv_scratch_pool_init(tm_srv_scratch_pool *pool, size_t keep) {
    pthread_mutex_init(&pool->mu, NULL);
    pool->free_list = NULL;
    pool->n_free = 0;
    pool->keep = keep;
}

tm_srv_scratch *tm_srv_scratch_take(tm_srv_scratch_pool *pool) {
    pthread_mutex_lock(&pool->mu);
    tm_srv_scratch *s = pool->free_list;
    if (s) {
        pool->free_list = s->next;
        pool->n_free--;
    }
    pthread_mutex_unlock(&pool->mu);
    if (s) return s;
    s = malloc(sizeof *s);
    if (s && !(s->block = malloc(SCRATCH_BLOCK_BYTES))) {
        free(s);
        s = NULL;
    }
    if (!s) return NULL; /* the conversion uses the C library's malloc */
    s->alloc = (tm_alloc){.malloc_fn = scratch_malloc, .realloc_fn = scratch_realloc, .free_fn = scratch_free,
                          .ctx = s};
    s->used = s->last = 0;
    s->next = NULL;
    return s;
}

static void scratch_destroy(tm_srv_scratch *s) {
    free(s->block);
    free(s);
}

void tm_srv_scratch_give(tm_srv_scratch_pool *pool, tm_srv_scratch *s) {
    if (!s) return;
    s->used = s->last = 0;
    pthread_mutex_lock(&pool->mu);
    int kept = pool->n_free < pool->keep;
    if (kept) {
        s->next = pool->free_list;
        pool->free_list = s;
        pool->n_free++;
    }
    pthread_mutex_unlock(&pool->mu);
    if (!kept) scratch_destroy(s);
}

void tm_srv_scratch_pool_release(tm_srv_scratch_pool *pool) {
    for (tm_srv_scratch *s = pool->free_list, *next; s; s = next) {
        next = s->next;
        scratch_destroy(s);
    }
    pool->free_list = NULL;
    pool->n_free = 0;
    pthread_mutex_destroy(&pool->mu);
}
