/*
 * alloc.c — the only file that calls malloc/realloc/free: the default
 * allocator, the per-trace arena, array growth, the uint64 hash map and
 * the content-addressed idxset index (which need no allocation beyond their
 * own arrays).
 */
#define _DEFAULT_SOURCE /* madvise, getrandom */
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>

#include "common/alloc.h" /* tm_mem, tm_arena, tm_u64map, tm_idxset */

/* Sample arrays run to hundreds of MB: asking for transparent huge pages
 * (where the kernel leaves that to madvise) turns ~500 page faults per
 * 2 MiB into one. The whole span of the block's pages is advised: the C
 * library maps a large block by itself, and advising only part of that
 * mapping would split it in two, which makes the next realloc's mremap fail
 * and copy the block into fresh pages. */
#define HUGE_ALIGN ((uintptr_t)2 << 20)
#define PAGE_ALIGN ((uintptr_t)4096)
#define HUGE_MIN (2 * HUGE_ALIGN)

static void *advise_huge(void *p, size_t size) {
#ifdef MADV_HUGEPAGE
    if (p && size >= HUGE_MIN) {
        uintptr_t lo = (uintptr_t)p & ~(PAGE_ALIGN - 1), hi = ((uintptr_t)p + size + PAGE_ALIGN - 1) & ~(PAGE_ALIGN - 1);
        madvise((void *)lo, hi - lo, MADV_HUGEPAGE);
    }
#else
    (void)size;
#endif
    return p;
}

static void *libc_malloc(void *ctx, size_t size) {
    (void)ctx;
    return advise_huge(malloc(size), size);
}
static void *libc_realloc(void *ctx, void *p, size_t old_size, size_t new_size) {
    (void)ctx;
    (void)old_size;
    return advise_huge(realloc(p, new_size), new_size);
}
static void libc_free(void *ctx, void *p, size_t size) {
    (void)ctx;
    (void)size;
    free(p);
}

/* A seed an attacker cannot predict; without getrandom, the address-space
 * layout and the clock are the next best thing. */
static uint64_t hash_seed(const void *where) {
    uint64_t seed;
    if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) == (ssize_t)sizeof seed) return seed;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return tm_hash_u64((uint64_t)(uintptr_t)where ^ (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 32);
}

void tm_mem_init(tm_mem *m, const tm_alloc *a) {
    m->budget = NULL;
    m->seed = hash_seed(m);
    if (a && a->malloc_fn && a->realloc_fn && a->free_fn) {
        m->a = *a;
    } else {
        m->a.malloc_fn = libc_malloc;
        m->a.realloc_fn = libc_realloc;
        m->a.free_fn = libc_free;
        m->a.ctx = NULL;
    }
}

void tm_mem_set_budget(tm_mem *m, tm_budget *b, uint64_t max) {
    atomic_init(&b->live, 0);
    atomic_init(&b->exceeded, 0);
    b->max = max;
    m->budget = b;
}

bool tm_budget_exceeded(const tm_budget *b) { return b && atomic_load_explicit(&b->exceeded, memory_order_relaxed); }

/* Claims size bytes of the budget; false (and the budget marked) when that
 * would pass its cap. */
static bool budget_take(tm_budget *b, size_t size) {
    if (!b) return true;
    uint64_t was = atomic_fetch_add_explicit(&b->live, size, memory_order_relaxed);
    if (b->max && (was + size > b->max || was + size < was)) {
        atomic_fetch_sub_explicit(&b->live, size, memory_order_relaxed);
        atomic_store_explicit(&b->exceeded, 1, memory_order_relaxed);
        return false;
    }
    return true;
}

static void budget_give(tm_budget *b, size_t size) {
    if (b) atomic_fetch_sub_explicit(&b->live, size, memory_order_relaxed);
}

void *tm_mem_alloc(tm_mem *m, size_t size) {
    if (!size) size = 1;
    if (!budget_take(m->budget, size)) return NULL;
    void *p = m->a.malloc_fn(m->a.ctx, size);
    if (!p) budget_give(m->budget, size);
    return p;
}

void *tm_mem_realloc(tm_mem *m, void *p, size_t old_size, size_t new_size) {
    if (!p) return tm_mem_alloc(m, new_size);
    if (!new_size) new_size = 1;
    if (new_size > old_size && !budget_take(m->budget, new_size - old_size)) return NULL;
    void *np = m->a.realloc_fn(m->a.ctx, p, old_size, new_size);
    if (!np && new_size > old_size) budget_give(m->budget, new_size - old_size);
    if (np && new_size < old_size) budget_give(m->budget, old_size - new_size);
    return np;
}

void tm_free_foreign(void *p) { free(p); }

void tm_mem_free(tm_mem *m, void *p, size_t size) {
    if (!p) return;
    m->a.free_fn(m->a.ctx, p, size);
    budget_give(m->budget, size ? size : 1);
}

tm_status tm_vec_grow(tm_mem *m, void **ptr, size_t *cap, size_t elem, size_t need) {
    if (need <= *cap) return TM_OK;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return TM_ERR_NOMEM;
        ncap *= 2;
    }
    if (ncap > SIZE_MAX / elem) return TM_ERR_NOMEM;
    void *np = tm_mem_realloc(m, *ptr, *cap * elem, ncap * elem);
    if (!np) return TM_ERR_NOMEM;
    *ptr = np;
    *cap = ncap;
    return TM_OK;
}

/* ---- arena ---- */

struct tm_arena_block {
    tm_arena_block *next;
    size_t size; /* whole allocation, header included */
};

#define ARENA_BLOCK 65536u

void tm_arena_init(tm_arena *ar, tm_mem *mem) {
    ar->mem = mem;
    ar->head = NULL;
    ar->cur = ar->end = NULL;
}

void *tm_arena_alloc(tm_arena *ar, size_t size) {
    size = (size + 7u) & ~(size_t)7u;
    if ((size_t)(ar->end - ar->cur) < size) {
        size_t hdr = (sizeof(tm_arena_block) + 7u) & ~(size_t)7u;
        size_t bsize = size + hdr > ARENA_BLOCK ? size + hdr : ARENA_BLOCK;
        if (size > SIZE_MAX - hdr) return NULL;
        tm_arena_block *b = tm_mem_alloc(ar->mem, bsize);
        if (!b) return NULL;
        b->next = ar->head;
        b->size = bsize;
        ar->head = b;
        ar->cur = (uint8_t *)b + hdr;
        ar->end = (uint8_t *)b + bsize;
    }
    void *p = ar->cur;
    ar->cur += size;
    return p;
}

void tm_arena_release(tm_arena *ar) {
    tm_arena_block *b = ar->head;
    while (b) {
        tm_arena_block *next = b->next;
        tm_mem_free(ar->mem, b, b->size);
        b = next;
    }
    ar->head = NULL;
    ar->cur = ar->end = NULL;
}

/* ---- uint64 -> uint32 map ---- */

static tm_status u64map_rehash(tm_mem *mem, tm_u64map *m, size_t ncap) {
    uint64_t *keys = tm_mem_alloc(mem, ncap * sizeof *keys);
    uint32_t *vals = tm_mem_alloc(mem, ncap * sizeof *vals);
    if (!keys || !vals) {
        tm_mem_free(mem, keys, ncap * sizeof *keys);
        tm_mem_free(mem, vals, ncap * sizeof *vals);
        return TM_ERR_NOMEM;
    }
    memset(vals, 0xff, ncap * sizeof *vals);
    size_t mask = ncap - 1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->vals[i] == TM_ABSENT) continue;
        size_t j = (size_t)tm_hash_u64(m->keys[i] ^ m->seed) & mask;
        while (vals[j] != TM_ABSENT) j = (j + 1) & mask;
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    tm_mem_free(mem, m->keys, m->cap * sizeof *m->keys);
    tm_mem_free(mem, m->vals, m->cap * sizeof *m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = ncap;
    return TM_OK;
}

tm_status tm_u64map_put(tm_mem *mem, tm_u64map *m, uint64_t key, uint32_t val) {
    if (!m->cap) m->seed = mem->seed;
    if ((m->len + 1) * 4 > m->cap * 3) TM_TRY(u64map_rehash(mem, m, m->cap ? m->cap * 2 : 16));
    size_t mask = m->cap - 1, i = (size_t)tm_hash_u64(key ^ m->seed) & mask;
    while (m->vals[i] != TM_ABSENT) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return TM_OK;
        }
        i = (i + 1) & mask;
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
    return TM_OK;
}

void tm_u64map_clear(tm_mem *mem, tm_u64map *m) {
    if (!m->len) return;
    if (m->len * 4 < m->cap) {
        tm_u64map_free(mem, m); /* mostly empty: refilling it later costs what is put back */
        return;
    }
    memset(m->vals, 0xff, m->cap * sizeof *m->vals);
    m->len = 0;
}

void tm_u64map_free(tm_mem *mem, tm_u64map *m) {
    tm_mem_free(mem, m->keys, m->cap * sizeof *m->keys);
    tm_mem_free(mem, m->vals, m->cap * sizeof *m->vals);
    memset(m, 0, sizeof *m);
}

/* ---- iid map ---- */

/* Grows the dense part past key (which it does not hold yet). */
static tm_status grow_dense(tm_mem *mem, tm_iidmap *m, uint64_t key) {
    size_t n = m->n_dense ? m->n_dense : 64;
    while (n <= key) n *= 2;
    uint32_t *d = tm_mem_realloc(mem, m->dense, m->n_dense * sizeof *d, n * sizeof *d);
    if (!d) return TM_ERR_NOMEM;
    memset(d + m->n_dense, 0xff, (n - m->n_dense) * sizeof *d);
    /* Keys that went to the sparse part while the dense one was
     * smaller: lookups of them now read the dense part. */
    for (size_t i = 0; m->sparse.len && i < m->sparse.cap; i++)
        if (m->sparse.vals[i] != TM_ABSENT && m->sparse.keys[i] < n) d[m->sparse.keys[i]] = m->sparse.vals[i];
    m->dense = d;
    m->n_dense = n;
    return TM_OK;
}

tm_status tm_iidmap_put_slow(tm_mem *mem, tm_iidmap *m, uint64_t key, uint32_t val, size_t n_entries) {
    if (key < m->n_dense) {
        m->dense[key] = val;
        return TM_OK;
    }
    if (tm_iid_dense_may_hold(key, n_entries)) {
        TM_TRY(grow_dense(mem, m, key));
        m->dense[key] = val;
        return TM_OK;
    }
    return tm_u64map_put(mem, &m->sparse, key, val);
}

tm_status tm_iidmap_reserve(tm_mem *mem, tm_iidmap *m, uint64_t max_key, size_t n_entries) {
    if (max_key < m->n_dense || !tm_iid_dense_may_hold(max_key, n_entries)) return TM_OK;
    return grow_dense(mem, m, max_key);
}

/* The dense part does not count its entries, so a large one is dropped
 * rather than wiped: it grows back only as far as new keys need. */
#define DENSE_KEEP 1024u

void tm_iidmap_clear(tm_mem *mem, tm_iidmap *m) {
    if (m->n_dense > DENSE_KEEP) {
        tm_mem_free(mem, m->dense, m->n_dense * sizeof *m->dense);
        m->dense = NULL;
        m->n_dense = 0;
    } else if (m->n_dense) {
        memset(m->dense, 0xff, m->n_dense * sizeof *m->dense);
    }
    tm_u64map_clear(mem, &m->sparse);
}

void tm_iidmap_free(tm_mem *mem, tm_iidmap *m) {
    tm_mem_free(mem, m->dense, m->n_dense * sizeof *m->dense);
    tm_u64map_free(mem, &m->sparse);
    memset(m, 0, sizeof *m);
}

/* ---- content-addressed index ---- */

uint32_t tm_idxset_find(const tm_idxset *s, uint32_t hash, tm_idxset_eq eq, const void *ctx, const void *key) {
    size_t slot;
    return tm_idxset_find_slot(s, hash, eq, ctx, key, &slot);
}

/* Moves the slots into a table of ncap (a power of two, > s->len). */
static tm_status idxset_rehash(tm_mem *mem, tm_idxset *s, size_t ncap) {
    uint64_t *ns = tm_mem_alloc(mem, ncap * sizeof *ns);
    if (!ns) return TM_ERR_NOMEM;
    memset(ns, 0, ncap * sizeof *ns);
    for (size_t i = 0; i < s->cap; i++) {
        uint64_t v = s->slots[i];
        if (!v) continue;
        size_t j = tm_idxset_slot(s, (uint32_t)(v >> 32)) & (ncap - 1);
        while (ns[j]) j = (j + 1) & (ncap - 1);
        ns[j] = v;
    }
    tm_mem_free(mem, s->slots, s->cap * sizeof *s->slots);
    s->slots = ns;
    s->cap = ncap;
    return TM_OK;
}

tm_status tm_idxset_add(tm_mem *mem, tm_idxset *s, uint32_t hash, uint32_t idx) {
    if (!s->cap) s->seed = mem->seed;
    if ((s->len + 1) * 4 > s->cap * 3) TM_TRY(idxset_rehash(mem, s, s->cap ? s->cap * 2 : 64));
    size_t mask = s->cap - 1, i = tm_idxset_slot(s, hash) & mask;
    while (s->slots[i]) i = (i + 1) & mask;
    s->slots[i] = ((uint64_t)hash << 32) | ((uint64_t)idx + 1);
    s->len++;
    return TM_OK;
}

tm_status tm_idxset_reserve(tm_mem *mem, tm_idxset *s, size_t n) {
    if (!s->cap) s->seed = mem->seed;
    size_t ncap = s->cap ? s->cap : 64;
    while (n * 4 > ncap * 3) {
        if (ncap > SIZE_MAX / 16) return TM_ERR_NOMEM;
        ncap *= 2;
    }
    return ncap == s->cap ? TM_OK : idxset_rehash(mem, s, ncap);
}

void tm_idxset_free(tm_mem *mem, tm_idxset *s) {
    tm_mem_free(mem, s->slots, s->cap * sizeof *s->slots);
    memset(s, 0, sizeof *s);
}
