/*
 * heap.c — native heap profiling inside libtracemill_record.so: the
 * interposed allocation functions (malloc, calloc, realloc, reallocarray,
 * free, posix_memalign, aligned_alloc, memalign, valloc, pvalloc and every
 * C++ operator new and delete), heapprofd's Poisson sampler, the unwinding
 * of sampled allocations, the table of callstacks with their totals and the
 * table of sampled live allocations that attributes frees.
 *
 * Sampling as heapprofd does it: each thread counts down the bytes it
 * allocates to a threshold drawn from an exponential distribution of mean
 * `interval`; an allocation that crosses k thresholds is sampled and stands
 * for k * interval bytes, and one of interval bytes or more is always
 * sampled at its own size (it never touches the counter). The estimates are
 * unbiased.
 *
 * The unsampled path: malloc decides before allocating (a subtraction from
 * a thread-local countdown, whose flags are the compare) and jumps to the
 * real malloc; free compares one byte of a static filter indexed by the
 * address's low 32 bits and jumps to the real free (4 and 6 instructions
 * on x86-64).
 * Neither makes a stack frame, an atomic operation or a table lookup: only
 * a block whose filter byte is set (a sampled block starts in its 64 bytes
 * of a 4 GiB window; a block of the bootstrap arena below sets its byte for
 * good) is looked at further. A thread's counter starts at 0, so its first
 * calls go the slow way, which finds the real functions; while no profile
 * runs the slow way gives the thread a long stride, so that a program
 * preloaded without --heap pays the same.
 *
 * Safety: the real functions are found with dlsym(RTLD_NEXT), and what
 * dlsym allocates meanwhile comes from a static bump arena (never freed).
 * A per-thread guard makes every allocation the profiler causes (the
 * unwinder's, a signal handler's during a sample) go straight to the real
 * allocator, counted when it would have been sampled. No lock is held
 * while calling out: the live table is lock-free (a compare-and-swap to
 * take a slot, a plain store to give it back), and the callstack table
 * takes a spin lock only to add a new stack, inside the guard. A fork child
 * stops sampling (the recorder does not run there). The collector and the
 * writer run on a thread whose allocations are never sampled. The first
 * threads to sample each keep their own copy (shard) of every callstack's
 * totals, which they add to without a locked instruction and without
 * passing cache lines between cores; later threads share one more shard
 * with atomic adds; a snapshot adds the shards up.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define UNW_LOCAL_ONLY
#include <dlfcn.h>
#include <errno.h>
#include <libunwind.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "common/base.h" /* tm_fail */
#include "record.h"

#define EXPORT __attribute__((visibility("default")))
#define NOINLINE __attribute__((noinline))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

enum {
    DEFAULT_INTERVAL = 4096,
    ARENA_BYTES = 64 * 1024,   /* what dlsym may allocate before the real functions are known */
    LIVE_BUCKETS = 1 << 18,    /* x 4 slots: sampled allocations alive at once (~4 GiB of heap at
                                  the default interval; 16 MiB of zero pages, touched where the
                                  heap's buckets are); past that a sample is lost, and the dumps
                                  say so (buffer_overran) */
    LIVE_SLOTS = 4,            /* one cache line per bucket: 4 addresses with their values */
    LIVE_SPAN_MIN_SHIFT = 6,   /* a bucket covers a quarter of the interval of address space, */
    LIVE_SPAN_MAX_SHIFT = 16,  /* from 64 bytes to 64 KiB: on average a quarter of a sample live */
    FILTER_COUNTERS = 1 << 26, /* sampled live allocations per 64-byte granule of a 4 GiB
                                  window (64 MiB of zero pages, touched where blocks are
                                  sampled): most frees look at one byte, near the bytes of
                                  their neighbours' frees (cached), not at two random buckets */
    FILTER_STUCK = 128,        /* added for good to the counter of a bootstrap arena block: it
                                  only sends frees to the buckets (a count of samples stays
                                  below it: a granule holds few blocks in each 4 GiB window) */
    IDLE_STRIDE = 64 * 1024,   /* bytes a thread allocates the fast way between looks at
                                  whether a profile has started */
    OWN_SHARDS = 15,           /* the first threads to sample keep their own copy of every
                                  callstack's totals, which only they write: a plain add */
    SHARDS = OWN_SHARDS + 1,   /* the last copy is shared by all later threads: atomic adds */
    STACKS_MAX = 1 << 16,      /* distinct allocation callstacks */
    STACK_INDEX = STACKS_MAX * 2,
    POOL_WORDS = 1 << 22,      /* pcs of all callstacks: 32 MiB of address space, touched as used */
    OWN_FRAMES_MAX = 8,        /* the sampler's own frames above the interposed function */
    DEPTH_MAX = 128,           /* frames per stack: the unwind buffer is on the allocating thread's stack */
    WEIGHT_BITS = 40,          /* a live slot's value: stack id << 40 | bytes it stands for */
    MEMO_SLOTS = 32,           /* stacks a thread remembers (a power of 2) */
    MEMO_DEPTH = 24,           /* frames of a remembered stack */
    MEMO_WORDS = 2 * MEMO_DEPTH /* stack words its unwind read: a return address and a saved
                                  frame register per frame */
};

/* ---- the real allocator ---------------------------------------------------- */

static struct {
    void *(*malloc)(size_t);
    void (*free)(void *);
    void *(*calloc)(size_t, size_t);
    void *(*realloc)(void *, size_t);
    void *(*memalign)(size_t, size_t);
    int (*posix_memalign)(void **, size_t, size_t);
    void *(*aligned_alloc)(size_t, size_t);
    void *(*valloc)(size_t);
    void *(*pvalloc)(size_t);
} real;
static atomic_int g_resolved;

static void free_before_resolved(void *p);
/* What free jumps to: the real free once it is known. */
static _Atomic(void (*)(void *)) g_free_fn = free_before_resolved;

/* Per-thread state; initial-exec so that reaching it never allocates. */
typedef struct heap_thread {
    uint64_t bytes_left; /* the fast path's share of the countdown to the next sample
                            (at most the interval while a profile runs); 0 before the
                            first draw */
    int64_t reserve;     /* the rest of the countdown */
    uint64_t rng;       /* xorshift state; 0: not seeded */
    int guard;          /* inside the profiler (or resolving): allocations pass through */
    int ignored;        /* a recorder thread: never sampled */
    int own_shard;      /* its shard is this thread's alone */
    size_t shard_at;    /* its shard's first totals in g_totals + 1; 0 before its first sample */
    struct memo_table *memos; /* the stacks it unwound (allocated at its first sample) */
} heap_thread;
static __thread heap_thread t_heap __attribute__((tls_model("initial-exec")));

static _Alignas(64) unsigned char g_arena[ARENA_BYTES];
static atomic_size_t g_arena_used;

/* Sampled live allocations per 64-byte granule, counted modulo a 4 GiB
 * window: free reads one byte here, and looks further only where it is not
 * 0. Static, so that free can read it before any profile. A granule of 64
 * bytes (not 16, glibc's alignment) keeps the bytes a thread's frees read
 * on a quarter of the lines, which stay in L1 beside the heap it works on;
 * a neighbour's free that finds the byte set costs a look at the table.
 * The window is the address's low 32 bits, so that the index is two
 * instructions (a 32-bit move and a shift; a smaller window needs a mask),
 * and it is one to one over the heaps a program works in (glibc gives each
 * thread's arena a 64 MiB-aligned heap: a window smaller than the arenas'
 * spread put every thread's blocks on the same filter lines, which each
 * sample then took from the other cores). Its pages are the kernel's zero
 * page until a block in their 256 KiB of heap is sampled, and never huge
 * pages (resolve), which would take 2 MiB for a counter. */
static _Alignas(4096) _Atomic uint8_t g_filter[FILTER_COUNTERS];

/* The live table's first bucket is moved by the 64 MiB region p is in:
 * without it the blocks every thread works on (each in its arena's 64
 * MiB-aligned heap) would share the same bucket lines. It adds an odd
 * multiple of the region number (an xor of its bits would leave two
 * threads' ranges overlapping). */
static inline size_t region_offset(uintptr_t p) { return (size_t)(p >> 26) * 0x2f1b; }

static inline size_t filter_of(uintptr_t p) { return (uint32_t)p >> 6; }

/* Bump allocation with a 16-byte header holding the size (realloc copies it).
 * The block's filter counter is stuck, so that free takes it off the fast
 * path, where the arena is told apart. */
static void *arena_alloc(size_t size, size_t align) {
    if (align < 16) align = 16;
    for (;;) {
        size_t used = atomic_load(&g_arena_used);
        size_t start = (used + 16 + align - 1) & ~(align - 1);
        if (start + size > ARENA_BYTES || start + size < start) return NULL;
        if (atomic_compare_exchange_weak(&g_arena_used, &used, start + size)) {
            memcpy(g_arena + start - sizeof size, &size, sizeof size);
            atomic_fetch_or(&g_filter[filter_of((uintptr_t)(g_arena + start))], FILTER_STUCK);
            return g_arena + start;
        }
    }
}

static int in_arena(const void *p) {
    return (uintptr_t)p - (uintptr_t)g_arena < ARENA_BYTES;
}

static size_t arena_size(const void *p) {
    size_t n;
    memcpy(&n, (const unsigned char *)p - sizeof n, sizeof n);
    return n;
}

/* *fn = the next definition of name (object to function pointer through
 * memcpy, as POSIX allows). */
static void next_symbol(void *fn, const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    memcpy(fn, &p, sizeof p);
}

/* Finds the next allocator's functions. dlsym may allocate: those calls
 * see resolved == 0 with the guard held and use the arena. */
static NOINLINE int resolve(void) {
    heap_thread *t = &t_heap;
    if (t->guard) return 0;
    t->guard++;
    madvise(g_filter, sizeof g_filter, MADV_NOHUGEPAGE); /* before the arena's blocks set their bytes */
    next_symbol(&real.malloc, "malloc");
    next_symbol(&real.free, "free");
    next_symbol(&real.calloc, "calloc");
    next_symbol(&real.realloc, "realloc");
    next_symbol(&real.memalign, "memalign");
    next_symbol(&real.posix_memalign, "posix_memalign");
    next_symbol(&real.aligned_alloc, "aligned_alloc");
    next_symbol(&real.valloc, "valloc");
    next_symbol(&real.pvalloc, "pvalloc");
    t->guard--;
    int ok = real.malloc && real.free && real.calloc && real.realloc && real.memalign && real.posix_memalign &&
             real.aligned_alloc && real.valloc && real.pvalloc;
    if (ok) {
        atomic_store_explicit(&g_free_fn, real.free, memory_order_relaxed);
        atomic_store_explicit(&g_resolved, 1, memory_order_release);
    }
    return ok;
}

static inline int ready(void) {
    return LIKELY(atomic_load_explicit(&g_resolved, memory_order_acquire)) || resolve();
}

/* ---- profile state ----------------------------------------------------------- */

typedef struct stack {
    uint64_t hash;
    uint32_t off, depth; /* pcs in g_pool[off .. off + depth) */
} stack;

/* A callstack's totals in one shard; g_totals[shard * STACKS_MAX + id]. */
typedef struct totals {
    _Atomic uint64_t alloc_bytes, alloc_count, free_bytes, free_count;
} totals;

static atomic_int g_on;          /* sampling allocations */
static atomic_int g_tables;      /* the tables below exist */
static uint64_t g_interval;
static _Atomic int g_next_shard;
static totals *g_totals;
static uint32_t g_max_depth;
static stack *g_stacks;
static _Atomic uint32_t *g_stack_index; /* id + 1, 0 empty */
static _Atomic uint32_t g_n_stacks;
static uint64_t *g_pool;
static uint32_t g_pool_used;
static atomic_flag g_stacks_lock = ATOMIC_FLAG_INIT;
/* A sampled live allocation: its address (0: empty) and its stack id << 40
 * | the bytes it stands for, side by side so that a sample and its free
 * touch one line of the table. */
typedef struct live_slot {
    _Atomic uintptr_t addr;
    _Atomic uint64_t val;
} live_slot;
static live_slot *g_live;          /* LIVE_BUCKETS * LIVE_SLOTS, a bucket per cache line */
static unsigned g_live_span_shift; /* log2 of the bytes of address space a bucket covers */
static _Atomic uint64_t g_unwind_errors, g_reentrant, g_table_full;

/* ---- sampling decision ------------------------------------------------------- */

static uint64_t next_random(heap_thread *t) {
    uint64_t x = t->rng;
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    return t->rng = x;
}

/* The exponential draw without libm's log (~95 instructions a sample): a
 * 64-bit uniform x is 2^64 u, u = 2^-(e+1) m with e x's leading zeros and m
 * in [1, 2), so -ln u = (e + 1) ln 2 - ln m; ln m is interpolated on the
 * chord of its cell (m's first 8 fraction bits), raised by the chord's mean
 * error over the cell, so that the draw's mean is the interval's (the
 * renewal rate, which makes the estimates unbiased; a draw is off by at most
 * 2e-6 of the interval). The tables are in bytes of the interval, filled by
 * tmr_heap_start. */
enum { LN_CELLS = 256, LN_CELL_BITS = 8 };
static double g_draw_octave[64]; /* (e + 1) ln 2 * interval, + 0.5: the draw is rounded to
                                    whole bytes, the countdown's gaps keep its mean */
/* A cell: side by side so that a draw reads one line of the table. */
static struct draw_cell {
    double at;    /* (ln m at the cell's start + the chord's mean error) * interval */
    double slope; /* the chord's rise * interval per unit of the 53 bits below */
} g_draw_cell[LN_CELLS];

/* The integral of ln over [a, b]. */
static double ln_integral(double a, double b) { return b * log(b) - b - (a * log(a) - a); }

static void fill_draw_tables(double interval) {
    if (interval > 1e15) interval = 1e15; /* so that a draw (at most 45 intervals) fits an int64_t */
    for (int e = 0; e < 64; e++) g_draw_octave[e] = (e + 1) * 0.69314718055994530942 * interval + 0.5;
    for (int j = 0; j < LN_CELLS; j++) {
        double a = 1 + (double)j / LN_CELLS, b = 1 + (double)(j + 1) / LN_CELLS;
        double chord_error = ln_integral(a, b) / (b - a) - (log(a) + log(b)) / 2;
        g_draw_cell[j].at = (log(a) + chord_error) * interval;
        g_draw_cell[j].slope = (log(b) - log(a)) * interval * (1.0 / 9007199254740992.0);
    }
}

/* A thread's generator starts from its address, the time and its id. */
static NOINLINE void seed_random(heap_thread *t) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    t->rng = ((uint64_t)(uintptr_t)t * 0x9e3779b97f4a7c15ull) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)gettid() << 32);
    if (!t->rng) t->rng = 1;
}

/* The bits of x (not 0) after its leading one, and the cell they fall in. */
static inline uint64_t fraction_of(uint64_t x) { return x << __builtin_clzll(x) << 1; }
static inline const struct draw_cell *draw_cell_of(uint64_t fraction) {
    return &g_draw_cell[fraction >> (64 - LN_CELL_BITS)];
}

/* An exponentially distributed distance to the next sample, mean
 * g_interval, from a uniform x of the thread's generator (xorshift never
 * yields 0). */
static inline int64_t draw_from(uint64_t x) {
    uint64_t fraction = fraction_of(x);
    const struct draw_cell *cell = draw_cell_of(fraction);
    double below = (double)(fraction << LN_CELL_BITS >> 11); /* the cell's next 53 bits */
    int64_t d = (int64_t)(g_draw_octave[__builtin_clzll(x)] - cell->at - below * cell->slope);
    return d > 0 ? d : 1;
}

static inline int64_t draw_interval(heap_thread *t) { return draw_from(next_random(t)); }

/* Splits the countdown (left > 0) between the fast path's share, at most
 * the interval, and the reserve: a size malloc's fast path lets through is
 * then below the interval, and it needs no other compare. */
static void set_countdown(heap_thread *t, int64_t left) {
    t->bytes_left = (uint64_t)left < g_interval ? (uint64_t)left : g_interval;
    t->reserve = left - (int64_t)t->bytes_left;
}

/* The bytes a sampled allocation stands for once the countdown is crossed
 * (left <= 0, the generator seeded), x the next uniform. */
static inline __attribute__((always_inline)) uint64_t crossed_from(heap_thread *t, int64_t left, uint64_t x) {
    uint64_t samples = 1;
    for (left += draw_from(x); left <= 0; left += draw_interval(t)) samples++;
    set_countdown(t, left);
    return samples * g_interval;
}

/* The slow half of weight_of: the countdown, left, is crossed, or the
 * thread's first allocation draws its first threshold. */
static NOINLINE uint64_t crossed(heap_thread *t, int64_t left) {
    if (UNLIKELY(t->rng == 0)) {
        seed_random(t);
        left += draw_interval(t);
        if (left > 0) {
            set_countdown(t, left);
            return 0;
        }
    }
    return crossed_from(t, left, next_random(t));
}

/* The bytes an allocation of size stands for, 0 when it is not sampled. */
static inline uint64_t weight_of(size_t size) {
    heap_thread *t = &t_heap;
    if (size >= g_interval) {
        /* A share below 0 (as signed) is a signal handler's malloc between
         * malloc's subtraction and its undoing: the others below count it
         * back in; here it would stay, and pass every later size. */
        if (UNLIKELY((int64_t)t->bytes_left < 0)) t->bytes_left = 0;
        return size;
    }
    int64_t left = (int64_t)t->bytes_left + t->reserve - (int64_t)size;
    if (LIKELY(left > 0)) {
        set_countdown(t, left);
        return 0;
    }
    return crossed(t, left);
}

/* This thread's shard of stack id's totals. */
static NOINLINE void take_shard(heap_thread *t) {
    int k = atomic_fetch_add_explicit(&g_next_shard, 1, memory_order_relaxed);
    t->own_shard = k < OWN_SHARDS;
    t->shard_at = 1 + (size_t)(t->own_shard ? k : OWN_SHARDS) * STACKS_MAX;
}

static inline totals *totals_of(heap_thread *t, uint32_t id) {
    if (UNLIKELY(!t->shard_at)) take_shard(t);
    return &g_totals[t->shard_at - 1 + id];
}

/* Adds bytes and count to a pair of totals in this thread's shard: a load
 * and a store when only this thread writes it (no locked instruction), an
 * atomic add in the shared one. Release: the snapshot that sees a free sees
 * its allocation. */
static inline void add_totals(const heap_thread *t, _Atomic uint64_t *bytes, _Atomic uint64_t *count,
                              uint64_t add_bytes) {
    if (LIKELY(t->own_shard)) {
        atomic_store_explicit(bytes, atomic_load_explicit(bytes, memory_order_relaxed) + add_bytes,
                              memory_order_release);
        atomic_store_explicit(count, atomic_load_explicit(count, memory_order_relaxed) + 1, memory_order_release);
    } else {
        atomic_fetch_add_explicit(bytes, add_bytes, memory_order_release);
        atomic_fetch_add_explicit(count, 1, memory_order_release);
    }
}

/* ---- the live table ------------------------------------------------------------ */

/* Where p may be: its filter counter and its first bucket by address (no
 * hash: a bucket per quarter interval of address space, so that the heap a
 * program works in maps to few lines of the table, which stay cached, and a
 * bucket holds a quarter of a sample on average; offset by the region). The
 * second bucket, by hash, is only looked at when the first is full
 * (second_bucket). */
typedef struct live_place {
    size_t counter, bucket;
} live_place;

static live_place place_of(uintptr_t p) {
    live_place at = {filter_of(p),
                     (((size_t)(p >> g_live_span_shift) + region_offset(p)) & (LIVE_BUCKETS - 1)) * LIVE_SLOTS};
    return at;
}

static size_t second_bucket(uintptr_t p) {
    return (size_t)((tm_hash_u64((uint64_t)p) >> 20) & (LIVE_BUCKETS - 1)) * LIVE_SLOTS;
}

/* Tracks p at its place (any free slot of its first bucket, else of its
 * second); 0 when both are full. The counter is a locked add: no load and
 * compare before it, no retry. */
static int live_insert(live_place at, uintptr_t p, uint32_t id, uint64_t weight) {
    if (weight >> WEIGHT_BITS) weight = (1ull << WEIGHT_BITS) - 1;
    size_t bucket = at.bucket;
    for (int k = 0; k < 2; k++, bucket = second_bucket(p))
        for (live_slot *x = &g_live[bucket]; x < &g_live[bucket + LIVE_SLOTS]; x++) {
            uintptr_t empty = 0;
            if (atomic_load_explicit(&x->addr, memory_order_relaxed) == 0 &&
                atomic_compare_exchange_strong(&x->addr, &empty, p)) {
                atomic_store_explicit(&x->val, (uint64_t)id << WEIGHT_BITS | weight, memory_order_relaxed);
                atomic_fetch_add_explicit(&g_filter[at.counter], 1, memory_order_relaxed);
                return 1;
            }
        }
    return 0;
}

/* Forgets p and charges its stack with the free; nothing if p was not
 * sampled. Called only when p's filter counter is not 0: p was sampled, or
 * shares its granule (modulo 4 GiB) with one that was or with a bootstrap
 * arena block, which sets its counter before any table exists. */
static inline __attribute__((always_inline)) void live_remove(uintptr_t p) {
    /* free(NULL) reads counter 0 like any block there; acquire: the tables
     * were made before g_tables was set */
    if (!p || !atomic_load_explicit(&g_tables, memory_order_acquire)) return;
    live_place at = place_of(p);
    size_t bucket = at.bucket;
    for (int k = 0; k < 2; k++, bucket = second_bucket(p))
        for (live_slot *x = &g_live[bucket]; x < &g_live[bucket + LIVE_SLOTS]; x++) {
            if (atomic_load_explicit(&x->addr, memory_order_relaxed) != p) continue;
            uint64_t v = atomic_load_explicit(&x->val, memory_order_relaxed);
            /* A plain store frees the slot: only a free of p writes it now,
             * and two frees of one block at once are the program's bug (the
             * allocator's to catch). */
            atomic_store_explicit(&x->addr, 0, memory_order_release);
            atomic_fetch_sub_explicit(&g_filter[at.counter], 1, memory_order_relaxed);
            heap_thread *t = &t_heap;
            totals *s = totals_of(t, (uint32_t)(v >> WEIGHT_BITS));
            add_totals(t, &s->free_bytes, &s->free_count, v & ((1ull << WEIGHT_BITS) - 1));
            return;
        }
}

static NOINLINE void forget(uintptr_t p) { live_remove(p); }

/* Called before the real free or realloc: p must leave the table before the
 * allocator can hand the address out again. A fork child still looks (its
 * copy of the tables is its own, and nobody reads it). */
static inline void on_free(void *p) {
    if (UNLIKELY(atomic_load_explicit(&g_filter[filter_of((uintptr_t)p)], memory_order_relaxed))) forget((uintptr_t)p);
}

/* ---- the callstack table ---------------------------------------------------------- */

static uint64_t hash_pcs(const uint64_t *pcs, uint32_t n) {
    uint64_t h = 0x243f6a8885a308d3ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = tm_hash_u64(h ^ pcs[i]);
    return h;
}

static int same_stack(const stack *s, uint64_t h, const uint64_t *pcs, uint32_t n) {
    return s->hash == h && s->depth == n && memcmp(g_pool + s->off, pcs, n * sizeof *pcs) == 0;
}

/* The id of the stack pcs[0..n), added if new; -1 when the table is full.
 * Readers probe without the lock: a stack is complete before its index slot
 * is published. */
static int64_t stack_id(const uint64_t *pcs, uint32_t n) {
    uint64_t h = hash_pcs(pcs, n);
    size_t k = (size_t)h & (STACK_INDEX - 1);
    for (;; k = (k + 1) & (STACK_INDEX - 1)) {
        uint32_t v = atomic_load_explicit(&g_stack_index[k], memory_order_acquire);
        if (v == 0) break;
        if (same_stack(&g_stacks[v - 1], h, pcs, n)) return v - 1;
    }
    while (atomic_flag_test_and_set_explicit(&g_stacks_lock, memory_order_acquire)) {
    }
    int64_t id = -1;
    for (;; k = (k + 1) & (STACK_INDEX - 1)) { /* the probe goes on where it stopped */
        uint32_t v = atomic_load_explicit(&g_stack_index[k], memory_order_acquire);
        if (v != 0) {
            if (same_stack(&g_stacks[v - 1], h, pcs, n)) {
                id = v - 1;
                break;
            }
            continue;
        }
        uint32_t count = atomic_load_explicit(&g_n_stacks, memory_order_relaxed);
        if (count >= STACKS_MAX || g_pool_used + n > POOL_WORDS) break;
        stack *s = &g_stacks[count];
        memcpy(g_pool + g_pool_used, pcs, n * sizeof *pcs);
        s->hash = h, s->off = g_pool_used, s->depth = n;
        g_pool_used += n;
        atomic_store_explicit(&g_n_stacks, count + 1, memory_order_release);
        atomic_store_explicit(&g_stack_index[k], count + 1, memory_order_release);
        id = count;
        break;
    }
    atomic_flag_clear_explicit(&g_stacks_lock, memory_order_release);
    return id;
}

/* ---- the unwind memo ---------------------------------------------------------------------
 * A program allocates from few call sites, each from few stacks: a thread
 * keeps the stacks it unwound, so that the next allocation from the same
 * stack finds its id without unwinding. What an unwind finds is decided by
 * where it starts (the caller's return address, stack pointer and frame
 * register) and by the stack words it reads: each frame's return address
 * and its saved frame register. A memo is keyed by the first and keeps the
 * addresses and values of the second; it is used only while every one of
 * those words still holds its value, read in the order the unwinder read
 * them (so a word is read only when the unwinder would read it too).
 *
 * The addresses come from a slower unwind with libunwind's cursor
 * (unw_step and unw_get_save_loc), made the second time in a row a memo
 * slot misses the same start, so that a stack seen once costs no more than
 * before. Stacks with a signal frame, deeper than MEMO_DEPTH or whose words
 * are not all on the stack are never kept.
 *
 * The frame register is rbp on x86-64. heap.c is compiled with it reserved
 * (-ffixed-rbp, TMR_HEAP_RBP_RESERVED), so that every function here still
 * holds the caller's value; elsewhere the memo is off. */

#if defined(__x86_64__) && defined(TMR_HEAP_RBP_RESERVED)
#define HEAP_MEMO 1
#endif

/* A call into the profiler: where it returns to and the caller's stack
 * pointer there (the interposed function's canonical frame address). */
typedef struct call_site {
    const void *ret;
    uintptr_t sp;
} call_site;

#define CALLER ((call_site){.ret = __builtin_return_address(0), .sp = (uintptr_t)__builtin_dwarf_cfa()})

/* The caller as malloc's fast path passes it on: on x86-64 its stack
 * pointer alone, since the return address is the word just below it (read
 * on the slow path only: one load less on every malloc); elsewhere both. */
#if defined(__x86_64__)
typedef uintptr_t caller_ref;
#define CALLER_REF ((uintptr_t)__builtin_dwarf_cfa())
static inline call_site caller_of(caller_ref sp) {
    return (call_site){.ret = *(const void *const *)(sp - sizeof(void *)), .sp = sp};
}
#else
typedef call_site caller_ref;
#define CALLER_REF CALLER
static inline call_site caller_of(caller_ref at) { return at; }
#endif

/* What memo_find found instead of a stack id. */
enum { MEMO_MISS = -1, MEMO_NEVER = -2 };

#ifdef HEAP_MEMO
typedef struct memo_word {
    uintptr_t at;
    uint64_t value;
} memo_word;

typedef struct memo {
    uintptr_t ret, sp, fp; /* where the unwind starts; ret 0: empty */
    uint32_t generation;   /* the profile whose stack id it holds */
    uint32_t id;           /* the stack's id */
    uint32_t n_words;      /* the words the unwind read */
    int uses_fp;           /* the unwind depended on the caller's frame register */
    memo_word words[MEMO_WORDS];
} memo;

typedef struct memo_table {
    uint64_t missed[MEMO_SLOTS]; /* the start that last missed in each slot */
    memo slot[MEMO_SLOTS];
} memo_table;

static pthread_key_t g_memo_key;
static int g_memo_key_made;
static _Atomic uint32_t g_generation; /* tmr_heap_start's count: stack ids of an older profile are stale */

/* The thread's memo table goes with it (a pthread key destructor). */
static void memo_table_free(void *table) {
    t_heap.memos = NULL;
    real.free(table);
}

static uintptr_t frame_register(void) {
    uintptr_t fp;
    __asm__ volatile("mov %%rbp, %0" : "=r"(fp));
    return fp;
}

/* Two multiplies: a start's slot (its top bits) and the identity the
 * slot's last miss is compared with; a rare collision only decides when a
 * stack is learned, as memo_find compares the start itself. */
static uint64_t memo_start_hash(uintptr_t ret, uintptr_t sp) {
    return ((uint64_t)ret ^ (uint64_t)sp * 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull;
}

static size_t memo_slot(uint64_t start) { return (size_t)(start >> 32) & (MEMO_SLOTS - 1); }

/* The stack id a memo of this start holds if every word it read is
 * unchanged; MEMO_MISS otherwise, MEMO_NEVER for a start whose stack cannot
 * be kept. */
static int64_t memo_find(const memo *m, uintptr_t ret, uintptr_t sp, uintptr_t fp) {
    if (m->ret != ret || m->sp != sp || (m->uses_fp && m->fp != fp) ||
        m->generation != atomic_load_explicit(&g_generation, memory_order_relaxed))
        return MEMO_MISS;
    if (m->id == UINT32_MAX) return MEMO_NEVER;
    for (uint32_t i = 0; i < m->n_words; i++)
        if (*(const volatile uint64_t *)m->words[i].at != m->words[i].value) return MEMO_MISS;
    return m->id;
}

/* Unwinds from the caller with libunwind's cursor into pcs (at most max)
 * and records in m the stack words read; 0 when the stack cannot be kept
 * (the pcs are then not complete either). */
static NOINLINE uint32_t memo_unwind(memo *m, call_site at, uintptr_t fp, uint64_t *pcs, uint32_t max) {
    unw_context_t ctx;
    unw_cursor_t cursor;
    unw_word_t ip, sp, reg;
    unw_save_loc_t loc;
    if (unw_getcontext(&ctx) != 0 || unw_init_local(&cursor, &ctx) != 0) return 0;
    for (int i = 0;; i++) { /* past the profiler's own frames, to the caller's */
        if (i > OWN_FRAMES_MAX || unw_step(&cursor) <= 0) return 0;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) == 0 && unw_get_reg(&cursor, UNW_REG_SP, &sp) == 0 &&
            ip == (unw_word_t)(uintptr_t)at.ret && sp == at.sp)
            break;
    }
    if (unw_get_reg(&cursor, UNW_X86_64_RBP, &reg) != 0 || reg != fp) return 0;
    uint32_t n = 0, words = 0;
    pcs[n++] = ip;
    /* The caller's frame register decides the unwind unless the caller
     * saved it (so that the next frames' comes from the stack) and does not
     * address its frame with it (its CFA is not fp + 16). */
    m->uses_fp = 1;
    while (n < max) {
        int r = unw_step(&cursor);
        if (r == 0) break;
        if (r < 0 || unw_is_signal_frame(&cursor) > 0 || unw_get_reg(&cursor, UNW_REG_IP, &ip) != 0 ||
            unw_get_reg(&cursor, UNW_REG_SP, &sp) != 0)
            return 0;
        /* the return address, then the frame register it restored, if from
         * the program's stack (below the caller's stack pointer, it was
         * saved by the profiler's own frames: it is fp) */
        if (unw_get_save_loc(&cursor, UNW_REG_IP, &loc) != 0 || loc.type != UNW_SLT_MEMORY ||
            loc.u.addr < at.sp || words + 2 > MEMO_WORDS)
            return 0;
        m->words[words++] = (memo_word){.at = (uintptr_t)loc.u.addr, .value = ip};
        if (unw_get_save_loc(&cursor, UNW_X86_64_RBP, &loc) != 0 ||
            (loc.type != UNW_SLT_MEMORY && loc.type != UNW_SLT_NONE))
            return 0;
        int saved_on_stack = loc.type == UNW_SLT_MEMORY && loc.u.addr >= at.sp;
        if (saved_on_stack)
            m->words[words++] =
                (memo_word){.at = (uintptr_t)loc.u.addr, .value = *(const uint64_t *)(uintptr_t)loc.u.addr};
        if (n == 1) m->uses_fp = !saved_on_stack || sp == fp + 16;
        pcs[n++] = ip;
    }
    /* deeper than max: unwound the usual way, which marks it truncated */
    if (n == max && unw_step(&cursor) > 0) return 0;
    m->n_words = words;
    return n;
}
#endif

/* Unwinds from the caller into pcs (room for OWN_FRAMES_MAX + DEPTH_MAX)
 * with unw_backtrace; the number of frames, the caller's first. A stack
 * deeper than g_max_depth (or than the buffer) keeps its innermost
 * g_max_depth - 1 frames and ends with TMR_HEAP_TRUNCATED_PC. */
static uint32_t unwind(call_site at, uint64_t *frames, uint64_t **pcs) {
    uint32_t max = g_max_depth + OWN_FRAMES_MAX;
    int n = unw_backtrace((void **)frames, (int)max);
    for (int i = 0; i < n && i <= OWN_FRAMES_MAX; i++)
        if (frames[i] == (uint64_t)(uintptr_t)at.ret) {
            *pcs = frames + i;
            uint32_t depth = (uint32_t)(n - i);
            if (depth < g_max_depth || (depth == g_max_depth && (uint32_t)n < max)) return depth;
            (*pcs)[g_max_depth - 1] = TMR_HEAP_TRUNCATED_PC;
            return g_max_depth;
        }
    return 0;
}

/* The id of the stack that called at, unwound: the thread's memo did not
 * hold it (found: memo_find's answer, MEMO_MISS without a memo table); -1
 * when the stack table is full. Its own function, with the unwind buffer
 * in its frame: a memo hit makes no frame. */
static NOINLINE int64_t stack_unwound(heap_thread *t, call_site at, int64_t found) {
    uint64_t frames[OWN_FRAMES_MAX + DEPTH_MAX], *pcs = frames;
    uint32_t depth = 0;
#ifdef HEAP_MEMO
    uintptr_t fp = frame_register(), ret = (uintptr_t)at.ret;
    uint64_t start = memo_start_hash(ret, at.sp);
    memo_table *table = t->memos;
    memo *m = NULL;
    uint32_t learned = 0;
    if (table) {
        m = &table->slot[memo_slot(start)];
        if (found == MEMO_NEVER || table->missed[memo_slot(start)] != start) {
            table->missed[memo_slot(start)] = start;
            m = NULL; /* seen once, or not to be kept: unwound the usual way */
        }
    } else if (g_memo_key_made && (table = real.malloc(sizeof *table)) != NULL) {
        memset(table, 0, sizeof *table);
        if (pthread_setspecific(g_memo_key, table) != 0) {
            real.free(table);
            table = NULL;
        }
        t->memos = table;
    }
#else
    (void)t, (void)found;
#endif
    /* The CPU sampler's signal handler unwinds with the same per-thread
     * libunwind cache: meanwhile it only leaves a note (sampler.c). */
    tmr_unwind_busy = 1;
#ifdef HEAP_MEMO
    if (m) {
        m->ret = 0;
        depth = learned = memo_unwind(m, at, fp, frames, g_max_depth);
    }
#endif
    if (depth == 0) depth = unwind(at, frames, &pcs);
    tmr_unwind_busy = 0;
    tmr_sampler_take_deferred();
    if (depth == 0) { /* the caller is all we know */
        atomic_fetch_add_explicit(&g_unwind_errors, 1, memory_order_relaxed);
        frames[0] = (uint64_t)(uintptr_t)at.ret;
        pcs = frames;
        depth = 1;
    }
    int64_t id = stack_id(pcs, depth);
#ifdef HEAP_MEMO
    if (m && id >= 0) { /* kept, or marked as a stack to unwind the usual way */
        m->id = learned ? (uint32_t)id : UINT32_MAX;
        if (!learned) m->n_words = 0, m->uses_fp = 0; /* the mark holds for any fp */
        m->generation = atomic_load_explicit(&g_generation, memory_order_relaxed);
        m->ret = ret, m->sp = at.sp, m->fp = fp;
    }
#endif
    return id;
}

/* The id of the stack that called at: the thread's memo of it, else unwound. */
static inline int64_t stack_of(heap_thread *t, call_site at) {
#ifdef HEAP_MEMO
    memo_table *table = t->memos;
    if (LIKELY(table != NULL)) {
        uintptr_t ret = (uintptr_t)at.ret;
        int64_t id = memo_find(&table->slot[memo_slot(memo_start_hash(ret, at.sp))], ret, at.sp, frame_register());
        if (LIKELY(id >= 0)) return id;
        return stack_unwound(t, at, id);
    }
#endif
    return stack_unwound(t, at, MEMO_MISS);
}

/* ---- a sampled allocation ------------------------------------------------------------- */

/* Records p (weight bytes) allocated from the call at. Inline in malloc's
 * slow path: a sample makes one frame. */
static inline __attribute__((always_inline)) void record_sample(void *p, uint64_t weight, call_site at) {
    heap_thread *t = &t_heap;
    if (t->ignored) return;
    if (t->guard) {
        atomic_fetch_add_explicit(&g_reentrant, 1, memory_order_relaxed);
        return;
    }
    t->guard++;
    /* The lines p goes to are rarely cached: they load while the stack is found. */
    live_place place = place_of((uintptr_t)p);
    __builtin_prefetch(&g_live[place.bucket], 1);
    __builtin_prefetch(&g_filter[place.counter], 1);
    int64_t id = stack_of(t, at);
    if (id < 0 || !live_insert(place, (uintptr_t)p, (uint32_t)id, weight)) {
        atomic_fetch_add_explicit(&g_table_full, 1, memory_order_relaxed);
    } else {
        /* Counted after the insert: a free can only come after we return. */
        totals *s = totals_of(t, (uint32_t)id);
        add_totals(t, &s->alloc_bytes, &s->alloc_count, weight);
    }
    t->guard--;
}

static NOINLINE void sample(void *p, uint64_t weight, call_site at) { record_sample(p, weight, at); }

/* Every allocation but malloc passes here once it succeeded. */
static inline void *on_alloc(void *p, size_t size, call_site caller) {
    /* acquire: g_interval and the tables were set before sampling began */
    if (p && atomic_load_explicit(&g_on, memory_order_acquire)) {
        uint64_t weight = weight_of(size);
        if (UNLIKELY(weight)) sample(p, weight, caller);
    } else if (p) {
        t_heap.bytes_left = IDLE_STRIDE; /* no profile: look again after a while */
    }
    return p;
}

/* ---- the interposed C functions ------------------------------------------------------ */

/* malloc when the fast path does not apply: the thread's first calls, a
 * size always sampled, the fast path's share of the countdown used up (a
 * threshold crossed, or only its share), no profile running. */
static NOINLINE void *malloc_slow(size_t size, caller_ref caller) {
    if (UNLIKELY(!ready())) return arena_alloc(size, 16);
    /* acquire: as in on_alloc */
    if (UNLIKELY(!atomic_load_explicit(&g_on, memory_order_acquire))) {
        t_heap.bytes_left = IDLE_STRIDE;
        return real.malloc(size);
    }
    /* Decided before allocating, as on the fast path (a failed allocation
     * used its bytes of the countdown): a refill jumps to the real malloc.
     * A threshold crossed (mostly why this is reached) takes the next
     * uniform first: its line of the draw's table loads while the real
     * malloc runs, and the draw follows, from the uniform read back from
     * the generator (nothing of the draw is kept across the call). */
    heap_thread *t = &t_heap;
    uint64_t weight = 0;
    int crossing = 0;
    int64_t left = (int64_t)t->bytes_left + t->reserve - (int64_t)size;
    if (LIKELY(size < g_interval && t->rng != 0)) {
        if (LIKELY(left > 0)) {
            set_countdown(t, left);
            return real.malloc(size);
        }
        crossing = 1;
        __builtin_prefetch(draw_cell_of(fraction_of(next_random(t))));
    } else if (!(weight = weight_of(size))) {
        return real.malloc(size);
    }
    void *p = real.malloc(size);
    if (crossing) weight = crossed_from(t, left, t->rng);
    if (p) record_sample(p, weight, caller_of(caller));
    return p;
}

/* An unsampled malloc counts the bytes down and jumps to the real one
 * (bytes_left > 0 means the thread found it already). A size below
 * bytes_left is below the interval too, and leaves some countdown. */
static inline void *do_malloc(size_t size, caller_ref caller) {
    heap_thread *t = &t_heap;
#if defined(__x86_64__) && defined(__GNUC__)
    /* One subtraction in memory, its flags the compare (a borrow or 0:
     * size >= bytes_left), four instructions in all; the slow way takes the
     * size back first (a signal handler's malloc in between leaves the
     * share below 0 as signed: see weight_of). The countdown is an input
     * with a memory clobber: as a "+m" output GCC 12 dropped the slow way. */
    __asm__ goto("subq %1, %0\n\tjbe %l[slow]" : : "m"(t->bytes_left), "r"(size) : "cc", "memory" : slow);
    return real.malloc(size);
slow:
    t->bytes_left += size;
#else
    if (LIKELY(size < t->bytes_left)) {
        t->bytes_left -= size;
        return real.malloc(size);
    }
#endif
    /* A refill of the fast share from the reserve (about one a sample)
     * needs no frame: a reserve is only drawn while a profile runs. */
    int64_t left = (int64_t)t->bytes_left + t->reserve - (int64_t)size;
    if (LIKELY(t->reserve > 0 && left > 0 && size < g_interval)) {
        set_countdown(t, left);
        return real.malloc(size);
    }
    return malloc_slow(size, caller);
}

/* Before the real free is known a block not from the arena has nowhere to
 * go: it stays allocated. */
static void free_before_resolved(void *p) {
    if (ready()) real.free(p);
}

/* A block whose filter counter is set: sampled, the arena's (never freed),
 * or a neighbour's in the filter. */
static NOINLINE void free_sampled(void *p) {
    if (in_arena(p)) return;
    live_remove((uintptr_t)p);
    atomic_load_explicit(&g_free_fn, memory_order_relaxed)(p);
}

static inline void do_free(void *p) {
#if defined(__x86_64__) && defined(__GNUC__)
    /* The filter byte compared in memory (a relaxed load is a load and a
     * test): one instruction fewer on every free. */
    __asm__ goto("cmpb $0, %0\n\tjne %l[sampled]" : : "m"(g_filter[filter_of((uintptr_t)p)]) : "cc" : sampled);
#else
    if (UNLIKELY(atomic_load_explicit(&g_filter[filter_of((uintptr_t)p)], memory_order_relaxed))) goto sampled;
#endif
    atomic_load_explicit(&g_free_fn, memory_order_relaxed)(p);
    return;
sampled:
    free_sampled(p);
}

static inline void *do_memalign(size_t align, size_t size, call_site caller) {
    if (UNLIKELY(!ready())) return arena_alloc(size, align);
    return on_alloc(real.memalign(align, size), size, caller);
}

static void *do_realloc(void *p, size_t size, call_site caller) {
    /* Before the real functions are known every block is the arena's. */
    int bootstrap = !ready();
    if (UNLIKELY(bootstrap || in_arena(p))) {
        void *q = bootstrap ? arena_alloc(size, 16) : real.malloc(size);
        if (q && in_arena(p)) memcpy(q, p, arena_size(p) < size ? arena_size(p) : size);
        return bootstrap ? q : on_alloc(q, size, caller);
    }
    /* realloc is a free of the old block and an allocation of the new one,
     * as heapprofd counts it. On failure the old block stays, untracked. */
    on_free(p);
    return on_alloc(real.realloc(p, size), size, caller);
}

EXPORT void *malloc(size_t size) { return do_malloc(size, CALLER_REF); }

EXPORT void free(void *p) { do_free(p); }

EXPORT void *calloc(size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    if (UNLIKELY(!ready())) return arena_alloc(total, 16); /* the arena is static: zeroed */
    return on_alloc(real.calloc(n, size), total, CALLER);
}

EXPORT void *realloc(void *p, size_t size) { return do_realloc(p, size, CALLER); }

EXPORT void *reallocarray(void *p, size_t n, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(n, size, &total)) {
        errno = ENOMEM;
        return NULL;
    }
    return do_realloc(p, total, CALLER);
}

EXPORT int posix_memalign(void **out, size_t align, size_t size) {
    if (UNLIKELY(!ready())) {
        *out = arena_alloc(size, align);
        return *out ? 0 : ENOMEM;
    }
    int rc = real.posix_memalign(out, align, size);
    if (rc == 0) on_alloc(*out, size, CALLER);
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t size) {
    if (UNLIKELY(!ready())) return arena_alloc(size, align);
    return on_alloc(real.aligned_alloc(align, size), size, CALLER);
}

EXPORT void *memalign(size_t align, size_t size) { return do_memalign(align, size, CALLER); }

EXPORT void *valloc(size_t size) {
    if (UNLIKELY(!ready())) return arena_alloc(size, 4096);
    return on_alloc(real.valloc(size), size, CALLER);
}

EXPORT void *pvalloc(size_t size) {
    if (UNLIKELY(!ready())) return arena_alloc(size, 4096);
    size_t page = 4096, rounded = (size + page - 1) & ~(page - 1);
    return on_alloc(real.pvalloc(size), rounded ? rounded : page, CALLER);
}

/* ---- C++ operator new and delete ------------------------------------------------------
 * Mangled names (Itanium ABI, 64-bit size_t); std::align_val_t is a size_t
 * and std::nothrow_t a reference. A failed allocation goes to the next
 * definition of the same operator (libstdc++'s), which runs the new-handler
 * and throws std::bad_alloc or returns NULL as the variant requires: C code
 * cannot throw. */

typedef void *(*new_fn)(size_t);
typedef void *(*new_aligned_fn)(size_t, size_t);
typedef void *(*new_nothrow_fn)(size_t, const void *);
typedef void *(*new_aligned_nothrow_fn)(size_t, size_t, const void *);

/* *fn = the next operator called name; a program whose allocation failed
 * and that has no libstdc++ operators is out of memory with nowhere to throw. */
static void next_operator(void *fn, const char *name) {
    void *p;
    next_symbol(fn, name);
    memcpy(&p, fn, sizeof p);
    if (!p) abort();
}

EXPORT void *_Znwm(size_t size) {
    void *p = do_malloc(size, CALLER_REF);
    if (p) return p;
    new_fn next;
    next_operator(&next, "_Znwm");
    return next(size);
}

EXPORT void *_Znam(size_t size) {
    void *p = do_malloc(size, CALLER_REF);
    if (p) return p;
    new_fn next;
    next_operator(&next, "_Znam");
    return next(size);
}

EXPORT void *_ZnwmRKSt9nothrow_t(size_t size, const void *tag) {
    void *p = do_malloc(size, CALLER_REF);
    if (p) return p;
    new_nothrow_fn next;
    next_operator(&next, "_ZnwmRKSt9nothrow_t");
    return next(size, tag);
}

EXPORT void *_ZnamRKSt9nothrow_t(size_t size, const void *tag) {
    void *p = do_malloc(size, CALLER_REF);
    if (p) return p;
    new_nothrow_fn next;
    next_operator(&next, "_ZnamRKSt9nothrow_t");
    return next(size, tag);
}

EXPORT void *_ZnwmSt11align_val_t(size_t size, size_t align) {
    void *p = do_memalign(align, size, CALLER);
    if (p) return p;
    new_aligned_fn next;
    next_operator(&next, "_ZnwmSt11align_val_t");
    return next(size, align);
}

EXPORT void *_ZnamSt11align_val_t(size_t size, size_t align) {
    void *p = do_memalign(align, size, CALLER);
    if (p) return p;
    new_aligned_fn next;
    next_operator(&next, "_ZnamSt11align_val_t");
    return next(size, align);
}

EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *tag) {
    void *p = do_memalign(align, size, CALLER);
    if (p) return p;
    new_aligned_nothrow_fn next;
    next_operator(&next, "_ZnwmSt11align_val_tRKSt9nothrow_t");
    return next(size, align, tag);
}

EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t size, size_t align, const void *tag) {
    void *p = do_memalign(align, size, CALLER);
    if (p) return p;
    new_aligned_nothrow_fn next;
    next_operator(&next, "_ZnamSt11align_val_tRKSt9nothrow_t");
    return next(size, align, tag);
}

EXPORT void _ZdlPv(void *p) { do_free(p); }
EXPORT void _ZdaPv(void *p) { do_free(p); }
EXPORT void _ZdlPvm(void *p, size_t size) { (void)size, do_free(p); }
EXPORT void _ZdaPvm(void *p, size_t size) { (void)size, do_free(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const void *tag) { (void)tag, do_free(p); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const void *tag) { (void)tag, do_free(p); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t align) { (void)align, do_free(p); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t align) { (void)align, do_free(p); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t size, size_t align) { (void)size, (void)align, do_free(p); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t size, size_t align) { (void)size, (void)align, do_free(p); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *tag) {
    (void)align, (void)tag, do_free(p);
}
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t align, const void *tag) {
    (void)align, (void)tag, do_free(p);
}

/* ---- the recorder's view ----------------------------------------------------------------- */

static tmr_heap_callsite *g_snapshot;
static size_t g_snapshot_cap;

static size_t heap_snapshot(const tmr_heap_callsite **out, tmr_heap_stats *st) {
    uint32_t n = atomic_load_explicit(&g_n_stacks, memory_order_acquire);
    /* The shards handed out so far (the shared one last); the others are 0. */
    int handed = atomic_load_explicit(&g_next_shard, memory_order_relaxed);
    size_t shards = handed < OWN_SHARDS ? (size_t)handed : OWN_SHARDS, shared = OWN_SHARDS;
    size_t kept = 0;
    st->sampled = 0;
    if (tmr_grow((void **)&g_snapshot, &g_snapshot_cap, sizeof *g_snapshot, n ? n : 1) == 0)
        for (uint32_t i = 0; i < n; i++) {
            stack *s = &g_stacks[i];
            tmr_heap_callsite *c = &g_snapshot[kept];
            /* Frees first, from every shard: a free is counted after its
             * allocation, so the totals read never show more freed than
             * allocated. */
            c->free_bytes = c->free_count = c->alloc_bytes = c->alloc_count = 0;
            for (size_t k = 0; k <= shards; k++) {
                totals *x = &g_totals[(k < shards ? k : shared) * STACKS_MAX + i];
                c->free_bytes += atomic_load_explicit(&x->free_bytes, memory_order_relaxed);
                c->free_count += atomic_load_explicit(&x->free_count, memory_order_relaxed);
            }
            atomic_thread_fence(memory_order_acquire);
            for (size_t k = 0; k <= shards; k++) {
                totals *x = &g_totals[(k < shards ? k : shared) * STACKS_MAX + i];
                c->alloc_bytes += atomic_load_explicit(&x->alloc_bytes, memory_order_relaxed);
                c->alloc_count += atomic_load_explicit(&x->alloc_count, memory_order_relaxed);
            }
            if (!c->alloc_count) continue; /* its only sample found no room */
            st->sampled += c->alloc_count;
            c->pcs = g_pool + s->off;
            c->depth = s->depth;
            kept++;
        }
    st->interval = g_interval;
    st->unwind_errors = atomic_load(&g_unwind_errors);
    st->reentrant = atomic_load(&g_reentrant);
    st->table_full = atomic_load(&g_table_full);
    *out = g_snapshot;
    return kept;
}

void tmr_heap_ignore_this_thread(void) { t_heap.ignored = 1; }

static const tmr_heap_source g_source = {heap_snapshot};

/* The recorder does not run in a fork child: neither does sampling. */
static void heap_atfork_child(void) { atomic_store(&g_on, 0); }

static void *map_zeroed(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

const tmr_heap_source *tmr_heap_start(uint64_t interval, uint32_t max_depth, tm_error *err) {
    if (atomic_load(&g_on)) {
        tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "heap profiling is already running");
        return NULL;
    }
    if (!ready()) {
        tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "heap profiling: the next malloc and free cannot be found");
        return NULL;
    }
    g_interval = interval ? interval : DEFAULT_INTERVAL;
    fill_draw_tables((double)g_interval);
    int span = 63 - __builtin_clzll(g_interval) - 2; /* a quarter of the interval, rounded down */
    g_live_span_shift = span < LIVE_SPAN_MIN_SHIFT   ? LIVE_SPAN_MIN_SHIFT
                        : span > LIVE_SPAN_MAX_SHIFT ? LIVE_SPAN_MAX_SHIFT
                                                     : (unsigned)span;
    g_max_depth = max_depth ? max_depth : DEPTH_MAX;
    if (g_max_depth > DEPTH_MAX) g_max_depth = DEPTH_MAX;
    g_stacks = map_zeroed(STACKS_MAX * sizeof *g_stacks);
    g_stack_index = map_zeroed(STACK_INDEX * sizeof *g_stack_index);
    g_pool = map_zeroed(POOL_WORDS * sizeof *g_pool);
    g_live = map_zeroed(LIVE_BUCKETS * LIVE_SLOTS * sizeof *g_live);
    g_totals = map_zeroed((size_t)SHARDS * STACKS_MAX * sizeof *g_totals);
    if (!g_stacks || !g_stack_index || !g_pool || !g_live || !g_totals) {
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "heap profiling: cannot map its tables");
        return NULL;
    }
    pthread_atfork(NULL, NULL, heap_atfork_child);
    /* here, not at a program thread's first sample (where libunwind's pipe
     * could take a closed stdout's number); unw_step's per-thread cache: no
     * lock and no signal mask per frame */
    tmr_unwind_init();
#ifdef HEAP_MEMO
    atomic_fetch_add(&g_generation, 1);
    if (!g_memo_key_made) g_memo_key_made = pthread_key_create(&g_memo_key, memo_table_free) == 0;
#endif
    atomic_store(&g_tables, 1);
    atomic_store(&g_on, 1);
    t_heap.bytes_left = 0, t_heap.reserve = 0; /* this thread draws its first threshold now, not after its
                                                  idle stride */
    return &g_source;
}
