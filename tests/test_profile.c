/*
 * test_profile.c — the profile model's own algorithms (src/profile.c),
 * tested directly: the stable sort of samples by time, whose radix passes
 * take different paths for small and large inputs (an MSD split into
 * cache-sized buckets above 16 K samples), narrow and wide time spans,
 * negative times, and heavy duplicates (and the threads' weights the merge
 * of a small input counts on its way); and the deduplication of stacks.
 * Stability is checked by numbering samples in input order (the stack
 * field carries that number).
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "profile/profile.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint64_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A bare profile model with the library's default allocator. It must not
 * move once opened: the arena and the profile point into it. */
typedef struct model {
    tm_mem mem;
    tm_arena arena;
    tm_profile p;
} model;

static void model_open(model *m) {
    tm_mem_init(&m->mem, NULL);
    tm_arena_init(&m->arena, &m->mem);
    tm_profile_init(&m->p, &m->mem, &m->arena);
}

static void model_close(model *m) {
    tm_profile_release(&m->p);
    tm_arena_release(&m->arena);
}

typedef int64_t (*ts_gen)(size_t i);

/* Fills a profile with n samples from gen, sorts, checks order and
 * stability. With n_threads, sample i belongs to thread (i / block) %
 * n_threads (a small input whose threads are each in time order is merged
 * by thread, unless they take turns more often than every other sample);
 * without, to thread 7, which the model does not have. */
static void check_sort_blocks(size_t n, ts_gen gen, uint32_t n_threads, size_t block) {
    model m;
    model_open(&m);
    tm_profile *const p = &m.p;
    for (uint32_t t = 0; t < n_threads; t++) {
        uint32_t idx;
        cr_assert_eq(tm_profile_thread(p, 100 + t, &idx), TM_OK);
        cr_assert_eq(idx, t);
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t thread = n_threads ? (uint32_t)(i / block % n_threads) : 7;
        cr_assert_eq(tm_profile_add_sample(p, gen(i), (uint32_t)i, thread), TM_OK);
    }
    cr_assert_eq(tm_profile_sort_samples(p), TM_OK);
    cr_assert_eq(p->n_samples, n);
    /* the merge counts the threads' weights on its way: what count_threads keeps */
    if (n_threads) tm_profile_count_threads(p);
    for (uint32_t t = 0; t < n_threads; t++) {
        uint64_t mine = 0;
        for (size_t i = 0; i < n; i++) mine += i / block % n_threads == t;
        cr_assert_eq(p->threads[t].weight, mine, "thread %u weighs %llu", t, (unsigned long long)p->threads[t].weight);
    }
    uint8_t *seen = calloc(n, 1);
    cr_assert(seen);
    for (size_t i = 0; i < n; i++) {
        const tm_prof_sample *s = &p->samples[i];
        cr_assert_lt(s->stack, n);
        cr_assert_eq(seen[s->stack], 0, "sample %u twice", s->stack);
        seen[s->stack] = 1;
        cr_assert_eq(s->ts, gen(s->stack), "sample %u lost its timestamp", s->stack);
        cr_assert_eq(s->thread, n_threads ? (uint32_t)(s->stack / block % n_threads) : 7);
        if (i) {
            const tm_prof_sample *prev = &p->samples[i - 1];
            cr_assert_leq(prev->ts, s->ts, "not sorted at %zu", i);
            if (prev->ts == s->ts) cr_assert_lt(prev->stack, s->stack, "not stable at %zu", i);
        }
    }
    free(seen);
    model_close(&m);
}
static void check_sort_threads(size_t n, ts_gen gen, uint32_t n_threads) { check_sort_blocks(n, gen, n_threads, 32); }

/* Eight sorted streams interleaved in chunks of 32, 1 ms apart: the shape of a real trace. */
static int64_t interleaved(size_t i) {
    size_t chunk = i / 32, stream = chunk % 8, k = (chunk / 8) * 32 + i % 32;
    return 1000000000 + (int64_t)k * 1000000 + (int64_t)stream * 1000;
}
static void check_sort(size_t n, ts_gen gen) { check_sort_threads(n, gen, 0); }

/* The same streams with equal times across them: ties between threads. */
static int64_t tied_streams(size_t i) {
    size_t chunk = i / 32, k = (chunk / 8) * 32 + i % 32;
    return 1000000000 + (int64_t)(k / 3) * 1000000;
}
/* Chunks of 32 spread round-robin over T threads, each thread's in time
 * order, the threads' overlapping. */
static int64_t round_robin(size_t i, size_t threads) {
    size_t chunk = i / 32;
    return (int64_t)(chunk / threads) * 40000 + (int64_t)(i % 32) * 1000 + (int64_t)(chunk % threads) * 7;
}
static int64_t round_robin_3(size_t i) { return round_robin(i, 3); }
static int64_t round_robin_5(size_t i) { return round_robin(i, 5); }
static int64_t few_values(size_t i) { return (int64_t)((i * 2654435761u) % 5) * 1000; }
static int64_t wide_random(size_t i) {
    static int64_t v[300000];
    static int filled;
    if (!filled) {
        for (size_t k = 0; k < sizeof v / sizeof *v; k++) v[k] = (int64_t)(next_rand() >> 2) - ((int64_t)1 << 60);
        filled = 1;
    }
    return v[i];
}
static int64_t reversed(size_t i) { return 5000000 - (int64_t)i * 3; }

Test(profile_sort, interleaved_streams_large) { check_sort(200000, interleaved); }
Test(profile_sort, interleaved_streams_small) { check_sort(1000, interleaved); }
Test(profile_sort, heavy_duplicates_are_stable) { check_sort(100000, few_values); }
Test(profile_sort, full_64_bit_span_with_negative_times) { check_sort(300000, wide_random); }
Test(profile_sort, reversed_input) { check_sort(50000, reversed); }
Test(profile_sort, small_input_merged_by_thread) { check_sort_threads(3000, interleaved, 8); }
Test(profile_sort, small_input_merged_by_thread_keeps_ties_in_input_order) { check_sort_threads(3000, tied_streams, 8); }
Test(profile_sort, small_input_merged_by_an_odd_number_of_threads) {
    check_sort_threads(3000, round_robin_3, 3);
    check_sort_threads(2999, round_robin_5, 5);
    check_sort_threads(40, round_robin_3, 1);
}
Test(profile_sort, small_input_with_a_thread_out_of_order) { check_sort_threads(3000, reversed, 4); }
/* Three threads taking turns every 1, 2 or 3 samples, each in time order,
 * the input not. */
static int64_t turns(size_t i) { return (int64_t)(i / 3) * 1000 + (int64_t)(2 - i % 3) * 7; }
static int64_t turns_of_two(size_t i) { return (int64_t)(i / 6) * 2000 + (int64_t)(i % 2) * 1000 + (int64_t)(5 - i % 6) * 7; }
static int64_t turns_of_three(size_t i) {
    return (int64_t)(i / 9) * 3000 + (int64_t)(i % 3) * 1000 + (int64_t)(8 - i % 9) * 7;
}
Test(profile_sort, small_input_whose_threads_take_turns_every_sample_or_two) {
    check_sort_blocks(3000, turns, 3, 1); /* more blocks than the merge keeps (n / 2): the radix sort */
    check_sort_blocks(3000, turns_of_two, 3, 2);
    check_sort_blocks(3001, turns_of_two, 3, 2);
    check_sort_blocks(3000, turns_of_three, 3, 3); /* n / 3 blocks: merged */
}
Test(profile_sort, small_input_with_more_threads_than_merged) { check_sort_threads(3000, interleaved, 16); }

Test(profile_dedup, equal_stacks_share_an_id_in_first_seen_order) {
    model m;
    model_open(&m);
    tm_profile *const p = &m.p;
    const uint32_t a[] = {3, 2, 1}, b[] = {3, 2}, c[] = {3, 2, 1};
    uint32_t ia, ib, ic, ie, ie2;
    cr_assert_eq(tm_profile_intern_stack(p, a, 3, &ia), TM_OK);
    cr_assert_eq(tm_profile_intern_stack(p, b, 2, &ib), TM_OK);
    cr_assert_eq(tm_profile_intern_stack(p, c, 3, &ic), TM_OK);
    cr_assert_eq(tm_profile_intern_stack(p, NULL, 0, &ie), TM_OK);
    cr_assert_eq(tm_profile_intern_stack(p, NULL, 0, &ie2), TM_OK);
    cr_assert_eq(ia, 0);
    cr_assert_eq(ib, 1);
    cr_assert_eq(ic, ia);
    cr_assert_eq(ie, 2);
    cr_assert_eq(ie2, ie);
    cr_assert_eq(p->n_stacks, 3);
    model_close(&m);
}
