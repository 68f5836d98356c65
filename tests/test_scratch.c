/*
 * test_scratch.c — tests of server/scratch.c, the conversion's working
 * memory: the allocator's contract (alignment, the last allocation grown and
 * freed in place, contents kept when a block moves, what does not fit going
 * to the C library), the pool's reuse and its cap, and that converting
 * envelopes through a scratch, one after another with the same one, makes
 * the very messages the C library's malloc makes.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "tutil.h"

static void *s_malloc(const tm_alloc *a, size_t n) { return a->malloc_fn(a->ctx, n); }
static void *s_realloc(const tm_alloc *a, void *p, size_t old, size_t n) { return a->realloc_fn(a->ctx, p, old, n); }
static void s_free(const tm_alloc *a, void *p, size_t n) { a->free_fn(a->ctx, p, n); }

/* The allocator tests' scratch, from a pool of one. */
static tm_srv_scratch_pool pool;
static tm_srv_scratch *scratch;
static const tm_alloc *a;

static void take_one(void) {
    tm_srv_scratch_pool_init(&pool, 1);
    scratch = tm_srv_scratch_take(&pool);
    cr_assert_not_null(scratch);
    a = tm_srv_scratch_alloc(scratch);
}

static void give_back(void) {
    tm_srv_scratch_give(&pool, scratch);
    tm_srv_scratch_pool_release(&pool);
}

Test(scratch, allocations_are_aligned_and_the_last_one_grows_in_place, .init = take_one, .fini = give_back) {
    uint8_t *first = s_malloc(a, 3);
    uint8_t *second = s_malloc(a, 40);
    cr_assert_eq((uintptr_t)first % 16, 0);
    cr_assert_eq((uintptr_t)second % 16, 0);
    cr_assert_eq(second, first + 16, "bump allocation: the next aligned place");
    memset(second, 0xab, 40);
    uint8_t *grown = s_realloc(a, second, 40, 4000);
    cr_assert_eq(grown, second, "the last allocation grows where it is");
    memset(grown + 40, 0xcd, 4000 - 40);
    /* a block that is not the last one moves, its bytes with it */
    memset(first, 0x5a, 3);
    uint8_t *moved = s_realloc(a, first, 3, 100);
    cr_assert_neq(moved, first);
    cr_assert_eq((uintptr_t)moved % 16, 0);
    cr_assert(moved[0] == 0x5a && moved[1] == 0x5a && moved[2] == 0x5a);
    cr_assert_eq(grown[0], 0xab, "moving another block leaves this one alone");
    /* freeing the last allocation gives its room back */
    s_free(a, moved, 100);
    uint8_t *again = s_malloc(a, 100);
    cr_assert_eq(again, moved);
    s_free(a, again, 100);
    /* empty allocations are distinct: freeing one leaves the next alone */
    uint8_t *empty = s_malloc(a, 0), *after = s_malloc(a, 16);
    cr_assert_neq(empty, after);
    s_free(a, empty, 0);
    cr_assert_neq(s_malloc(a, 16), after, "the room of a live allocation is not handed out again");
    s_free(a, grown, 4000);
    s_free(a, first, 3);
}

Test(scratch, what_does_not_fit_goes_to_the_c_library_with_its_bytes, .init = take_one, .fini = give_back) {
    /* grown one page at a time well past any block: the bytes follow */
    size_t n = 4096;
    uint8_t *p = s_malloc(a, n);
    uint8_t *other = s_malloc(a, 64); /* p is not the last: every growth moves it */
    for (size_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 7);
    while (n < ((size_t)8 << 20)) {
        uint8_t *q = s_realloc(a, p, n, 2 * n);
        cr_assert_not_null(q);
        for (size_t i = n; i < 2 * n; i++) q[i] = (uint8_t)(i * 7);
        p = q;
        n *= 2;
    }
    for (size_t i = 0; i < n; i += 4093) cr_assert_eq(p[i], (uint8_t)(i * 7), "byte %zu", i);
    uint8_t *big = s_malloc(a, (size_t)4 << 20); /* too big for the block from the start */
    cr_assert_not_null(big);
    memset(big, 1, (size_t)4 << 20);
    /* a C library block shrunk and grown stays the C library's (ASan/valgrind check the frees) */
    big = s_realloc(a, big, (size_t)4 << 20, 10);
    cr_assert_eq(big[9], 1);
    s_free(a, big, 10);
    s_free(a, p, n);
    s_free(a, other, 64);
}

Test(scratch, the_pool_reuses_reset_blocks_and_keeps_at_most_its_cap) {
    tm_srv_scratch_pool own;
    tm_srv_scratch_pool_init(&own, 1);
    tm_srv_scratch *s = tm_srv_scratch_take(&own);
    void *start = s_malloc(tm_srv_scratch_alloc(s), 10);
    s_malloc(tm_srv_scratch_alloc(s), 1000);
    tm_srv_scratch_give(&own, s);
    tm_srv_scratch *t = tm_srv_scratch_take(&own);
    cr_assert_eq(t, s, "a scratch given back is taken again");
    cr_assert_eq(s_malloc(tm_srv_scratch_alloc(t), 10), start, "and starts from its block's beginning");
    tm_srv_scratch *u = tm_srv_scratch_take(&own); /* the pool is empty: a new one */
    cr_assert(u && u != t);
    tm_srv_scratch_give(&own, t);
    tm_srv_scratch_give(&own, u); /* over the cap of 1: freed (LeakSanitizer would see it otherwise) */
    cr_assert_eq(own.n_free, 1);
    tm_srv_scratch_give(&own, NULL);
    cr_assert_null(tm_srv_scratch_alloc(NULL));
    tm_srv_scratch_pool_release(&own);
}

/* The messages tm_srv_process makes of an envelope, concatenated. */
static size_t process(tm_srv_context *ctx, const tm_srv_buf *body, uint8_t **out) {
    tm_srv_processed p;
    tm_error err;
    cr_assert_eq(tm_srv_process(ctx, body->data, body->len, &p, &err), TM_OK, "%s", err.message);
    tm_srv_buf all = {0};
    for (size_t i = 0; i < p.n_records; i++)
        cr_assert_eq(tm_srv_buf_append(&all, p.records[i].value, p.records[i].value_len), 0);
    tm_srv_processed_release(&p);
    *out = all.data;
    return all.len;
}

/* An envelope of one Perfetto profile_chunk: meta (a file) then trace. */
static void make_envelope(const char *meta_path, const char *trace_path, tm_srv_buf *body) {
    size_t meta_len, trace_len;
    char *meta = tu_read_file(meta_path, &meta_len), *trace = tu_read_file(trace_path, &trace_len);
    cr_assert(meta && trace, "%s, %s", meta_path, trace_path);
    while (meta_len && (meta[meta_len - 1] == '\n' || meta[meta_len - 1] == ' ')) meta_len--;
    char head[512];
    int n = snprintf(head, sizeof head,
                     "{\"event_id\":\"c3b09c0608844f558eaf6e65df6b9cdf\"}\n{\"type\":\"profile_chunk\","
                     "\"content_type\":\"application/x-perfetto-trace\",\"platform\":\"android\","
                     "\"meta_length\":%zu,\"length\":%zu}\n",
                     meta_len, meta_len + trace_len);
    cr_assert(tm_srv_buf_append(body, head, (size_t)n) == 0 && tm_srv_buf_append(body, meta, meta_len) == 0 &&
              tm_srv_buf_append(body, trace, trace_len) == 0);
    free(meta);
    free(trace);
}

Test(scratch, conversions_through_one_scratch_make_the_c_librarys_messages) {
    /* the demo chunk fits in a block; the 1.7 MB trace's conversion does not */
    static const char *const inputs[][2] = {
        {"/examples/demo.meta.json", "/examples/demo.pftrace"},
        {"/tests/fixtures/relay-compat/meta.json", "/tests/fixtures/relay-compat/exactly_max_samples.pftrace"},
    };
    tm_srv_config cfg;
    tm_error err;
    cr_assert_eq(tm_srv_config_init(&cfg, &err), TM_OK);
    char key[] = "e12d836b15bb49d7bbf99e64295d995b";
    char *keys[] = {key};
    tm_srv_project project = {.id = 1, .organization_id = 1, .public_keys = keys, .n_public_keys = 1,
                              .retention_days = 90, .continuous_profiling = 1, .continuous_profiling_perfetto = 1};
    tm_srv_context ctx = {.cfg = &cfg, .project = &project, .now_unix = 1771278043};
    tm_srv_scratch_pool own;
    tm_srv_scratch_pool_init(&own, 1);
    for (int round = 0; round < 3; round++)
        for (size_t e = 0; e < sizeof inputs / sizeof inputs[0]; e++) {
            char meta[4096], trace[4096];
            snprintf(meta, sizeof meta, "%s%s", TM_SOURCE_DIR, inputs[e][0]);
            snprintf(trace, sizeof trace, "%s%s", TM_SOURCE_DIR, inputs[e][1]);
            tm_srv_buf body = {0};
            make_envelope(meta, trace, &body);
            ctx.scratch = NULL;
            uint8_t *plain, *scratched;
            size_t plain_len = process(&ctx, &body, &plain);
            ctx.scratch = tm_srv_scratch_take(&own);
            cr_assert_not_null(ctx.scratch);
            size_t scratched_len = process(&ctx, &body, &scratched);
            tm_srv_scratch_give(&own, ctx.scratch);
            cr_assert_gt(plain_len, body.len, "%s makes a chunk message (payload and raw trace)", trace);
            cr_assert_eq(scratched_len, plain_len, "%s, round %d", trace, round);
            cr_assert_eq(memcmp(scratched, plain, plain_len), 0, "%s, round %d", trace, round);
            free(plain);
            free(scratched);
            tm_srv_buf_release(&body);
        }
    tm_srv_scratch_pool_release(&own);
    tm_srv_config_release(&cfg);
}
