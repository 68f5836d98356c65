/*
 * alloc.h — the one allocation choke point: a tm_mem wraps the caller's
 * tm_alloc (or libc), a tm_arena hands out never-freed blocks for one trace,
 * and tm_vec_reserve grows plain arrays; the u64 map and the idxset index
 * live here too. No other file calls malloc/free.
 *
 * A tm_mem may carry a budget: the bytes it has live may not pass a cap
 * (tm_limits.max_work_bytes / max_result_bytes), and an allocation that
 * would is refused like an out-of-memory one, with the budget marked so the
 * caller reports TM_ERR_LIMIT instead. Budgets count atomically, because
 * exporters allocate through a finished trace's tm_mem from any thread.
 *
 * Hash tables are seeded per tm_mem from getrandom(), so that keys chosen to
 * collide (iids, tids, names: all attacker-controlled) cannot turn a decode
 * quadratic.
 */
#ifndef TM_ALLOC_H
#define TM_ALLOC_H

#include "common/base.h" /* tm_bytes */

typedef struct tm_budget {
    _Atomic uint64_t live; /* bytes allocated and not yet freed */
    uint64_t max;          /* 0: unlimited */
    _Atomic int exceeded;  /* an allocation was refused for the budget */
} tm_budget;

typedef struct tm_mem {
    tm_alloc a;
    tm_budget *budget; /* NULL: not counted */
    uint64_t seed;     /* hash seed of the tables built through it */
} tm_mem;

void tm_mem_init(tm_mem *m, const tm_alloc *a); /* a NULL: libc; no budget */
/* Starts counting m's allocations against b, capped at max (0: unlimited). */
void tm_mem_set_budget(tm_mem *m, tm_budget *b, uint64_t max);
/* Whether b refused an allocation (b may be NULL). */
bool tm_budget_exceeded(const tm_budget *b);
void *tm_mem_alloc(tm_mem *m, size_t size);
void *tm_mem_realloc(tm_mem *m, void *p, size_t old_size, size_t new_size);
void tm_mem_free(tm_mem *m, void *p, size_t size);
/* Frees what a third-party library handed over allocated with the C
 * library's allocator (libdw's dwarf_getscopes). */
void tm_free_foreign(void *p);

/* Grows *ptr (an array of elem-sized items, capacity *cap) to hold at least
 * need items. Returns TM_ERR_NOMEM on failure, leaving *ptr untouched. */
tm_status tm_vec_grow(tm_mem *m, void **ptr, size_t *cap, size_t elem, size_t need);

#define TM_VEC_RESERVE(m, ptr, cap, need) \
    (((need) <= (cap)) ? TM_OK : tm_vec_grow((m), (void **)&(ptr), &(cap), sizeof *(ptr), (need)))

typedef struct tm_arena_block tm_arena_block;
typedef struct tm_arena {
    tm_mem *mem;
    tm_arena_block *head;
    uint8_t *cur, *end;
} tm_arena;

void tm_arena_init(tm_arena *ar, tm_mem *mem);
void *tm_arena_alloc(tm_arena *ar, size_t size); /* 8-byte aligned; NULL on OOM */
void tm_arena_release(tm_arena *ar);

/* Open-addressing map from uint64 keys to uint32 values (UINT32_MAX is the
 * "absent" marker and cannot be stored). Used for iids, tids and caches. */
typedef struct tm_u64map {
    uint64_t *keys;
    uint32_t *vals;
    size_t cap; /* power of two or 0 */
    size_t len;
    uint64_t seed; /* the tm_mem's, taken when the table is first allocated */
} tm_u64map;

#define TM_ABSENT UINT32_MAX

static inline uint32_t tm_u64map_get(const tm_u64map *m, uint64_t key) {
    if (m->len == 0) return TM_ABSENT;
    size_t mask = m->cap - 1, i = (size_t)tm_hash_u64(key ^ m->seed) & mask;
    for (;;) {
        uint32_t v = m->vals[i];
        if (v == TM_ABSENT) return TM_ABSENT;
        if (m->keys[i] == key) return v;
        i = (i + 1) & mask;
    }
}
/* Inserts or overwrites. */
tm_status tm_u64map_put(tm_mem *mem, tm_u64map *m, uint64_t key, uint32_t val);
/* Empties the map in time proportional to its entries, not its capacity
 * (a table much larger than what it holds is freed), so that a trace of
 * many incremental-state resets stays linear. */
void tm_u64map_clear(tm_mem *mem, tm_u64map *m);
void tm_u64map_free(tm_mem *mem, tm_u64map *m);

/* Content-addressed index over a caller-owned record array: maps a record
 * (by its 32-bit hash and an equality callback) to its index. The records
 * stay where the caller keeps them, so interning tables of any kind (frames,
 * strings, functions, labels) share this one probe loop. */
typedef struct tm_idxset {
    uint64_t *slots; /* (hash32 << 32) | (index + 1); 0 = empty */
    size_t cap, len;
    uint64_t seed;   /* mixed into the slot index: equal low hash bits do not cluster */
} tm_idxset;

/* eq(ctx, idx, key): is record idx equal to key? */
typedef int (*tm_idxset_eq)(const void *ctx, uint32_t idx, const void *key);

/* The index of the record equal to key, or TM_ABSENT. */
uint32_t tm_idxset_find(const tm_idxset *s, uint32_t hash, tm_idxset_eq eq, const void *ctx, const void *key);
/* Records index idx under hash (the caller checked it is absent). */
tm_status tm_idxset_add(tm_mem *mem, tm_idxset *s, uint32_t hash, uint32_t idx);
/* Where the probe for hash starts (before masking): the seed mixed in. */
static inline size_t tm_idxset_slot(const tm_idxset *s, uint32_t hash) {
    return (size_t)tm_hash_u64(hash ^ s->seed);
}
/* tm_idxset_find, which when key is absent also gives the slot where
 * tm_idxset_add_at records it, if the set did not change in between:
 * interning a new record probes once. Inline: the interning of frames,
 * stacks and mappings calls it for each new one, and eq inlines too. */
static inline uint32_t tm_idxset_find_slot(const tm_idxset *s, uint32_t hash, tm_idxset_eq eq, const void *ctx,
                                           const void *key, size_t *slot) {
    *slot = 0;
    if (!s->cap) return TM_ABSENT;
    size_t mask = s->cap - 1;
    for (size_t i = tm_idxset_slot(s, hash) & mask;; i = (i + 1) & mask) {
        uint64_t v = s->slots[i];
        if (!v) {
            *slot = i;
            return TM_ABSENT;
        }
        if ((uint32_t)(v >> 32) == hash && eq(ctx, (uint32_t)v - 1, key)) return (uint32_t)v - 1;
    }
}
/* Inline for a set that need not regrow (tm_idxset_add does that). */
static inline tm_status tm_idxset_add_at(tm_mem *mem, tm_idxset *s, size_t slot, uint32_t hash, uint32_t idx) {
    if (!s->cap || (s->len + 1) * 4 > s->cap * 3) return tm_idxset_add(mem, s, hash, idx); /* regrows: slots move */
    s->slots[slot] = ((uint64_t)hash << 32) | ((uint64_t)idx + 1);
    s->len++;
    return TM_OK;
}
/* Makes room for n records without regrowing (none is added). */
tm_status tm_idxset_reserve(tm_mem *mem, tm_idxset *s, size_t n);
void tm_idxset_free(tm_mem *mem, tm_idxset *s);

/* Map for interning ids: Perfetto writers number iids 1, 2, 3, ... so small
 * keys go to a directly indexed array (one load per lookup) and only sparse
 * large ones to the hash map. */
/* Whether an array indexed directly by iid may grow to hold key: while it
 * stays within 4x the entries (plus slack), so that a writer's sparse iids
 * cannot make it large. tm_iidmap's dense part and the profile model's
 * by-iid caches share this bound. */
static inline bool tm_iid_dense_may_hold(uint64_t key, size_t n_entries) {
    return key < 4 * (uint64_t)n_entries + 1024 && key < (1u << 26);
}

typedef struct tm_iidmap {
    uint32_t *dense; /* dense[key] for key < n_dense; TM_ABSENT if unset */
    size_t n_dense;
    tm_u64map sparse;
} tm_iidmap;

static inline uint32_t tm_iidmap_get(const tm_iidmap *m, uint64_t key) {
    if (TM_LIKELY(key < m->n_dense)) return m->dense[key];
    return tm_u64map_get(&m->sparse, key);
}
/* Inserts or overwrites; n_entries bounds how far the dense part may grow.
 * A key the dense part holds is one store, inline. */
tm_status tm_iidmap_put_slow(tm_mem *mem, tm_iidmap *m, uint64_t key, uint32_t val, size_t n_entries);
static inline tm_status tm_iidmap_put(tm_mem *mem, tm_iidmap *m, uint64_t key, uint32_t val, size_t n_entries) {
    if (TM_LIKELY(key < m->n_dense)) {
        m->dense[key] = val;
        return TM_OK;
    }
    return tm_iidmap_put_slow(mem, m, key, val, n_entries);
}
/* Grows the dense part at once to hold keys up to max_key, as far as puts
 * with n_entries could grow it (a run of puts then makes no reallocations). */
tm_status tm_iidmap_reserve(tm_mem *mem, tm_iidmap *m, uint64_t max_key, size_t n_entries);
/* Like tm_u64map_clear: linear in what the map holds. */
void tm_iidmap_clear(tm_mem *mem, tm_iidmap *m);
void tm_iidmap_free(tm_mem *mem, tm_iidmap *m);

#endif
