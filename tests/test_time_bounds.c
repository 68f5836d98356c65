/*
 * test_time_bounds.c — no input makes conversion super-linear. Worst-case
 * traces (many incremental-state resets over a large interned table, many
 * sequences, interned ids and sequence/thread ids that collide in the
 * decoder's unseeded hash, deep callstacks with long shared prefixes and
 * mappings with many path segments) are written at sizes n and K*n, and
 * the tracemill CLI converts them (folded, Sample v2) and loads them for
 * SQL under valgrind's callgrind. Work is the instruction count (Ir), which
 * is deterministic, minus the count for a one-sample trace (start-up). Two
 * checks per case and command:
 *  - growth: Ir(K*n) / Ir(n) <= 1.5 K (linear, with slack for the
 *    doubling of tables and buffers: a quadratic cost would give K^2);
 *  - cost per byte: Ir(worst case, K*n) / Ir(ordinary trace of the same
 *    size) <= MAX_PER_BYTE_FACTOR (see its definition).
 * Valgrind cannot run an ASan build, so the suite skips itself there.
 */
#define _GNU_SOURCE /* mkdtemp, posix_spawn helpers */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "trace_builder.h"

#ifndef TM_CLI
#error "TM_CLI (the tracemill binary) must be defined"
#endif

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

#define N_OF(a) (sizeof(a) / sizeof *(a))
#define K 4
#define MAX_GROWTH (1.5 * K)
/* An ordinary trace costs a roughly fixed number of instructions per byte;
 * a worst case may cost more per byte for honest reasons (an interned
 * entry or a new sequence does more than a sample of the same size: hash
 * inserts, per-sequence tables). Measured with linear code, the worst cases
 * here stayed within about 4x the ordinary trace's per-byte cost at K*n (see
 * the figures this suite logs with --verbose), and each quadratic variant
 * exceeded 10x. Since the ordinary trace's sample packets are read in runs
 * (tm_pf_next_run), it costs a third less while the worst cases cost the
 * same, so every ratio reads ~1.5x what it did: the linear ones now reach
 * 8.8x (deep shared callstacks), the quadratic ones would read ~15x. A
 * cost that grows with the input passes any constant once n is large;
 * growth catches it. */
#define MAX_PER_BYTE_FACTOR 12.0

#define CLK_REALTIME TM_PF_BUILTIN_CLOCK_REALTIME
#define CLK_BOOTTIME TM_PF_BUILTIN_CLOCK_BOOTTIME
/* Samples are 1 ms apart at every size, so that timestamps need as many
 * digits in the small trace as in the large one: the Sample v2 writer's
 * cost per timestamp grows with its digits. */
#define STEP 1000000ull

/* ---- the decoder's former hash, inverted ---- */

/* splitmix64's finaliser, the unseeded hash of tm_u64map (src/base.h)
 * whose collisions these inputs are built from. */
static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

static uint64_t unxorshift(uint64_t y, unsigned s) {
    uint64_t x = y;
    for (unsigned i = 0; i < 64 / s + 1; i++) x = y ^ (x >> s);
    return x;
}

/* The inverse of an odd multiplier modulo 2^64 (Newton's iteration). */
static uint64_t mul_inverse(uint64_t c) {
    uint64_t inv = c;
    for (int i = 0; i < 6; i++) inv *= 2 - c * inv;
    return inv;
}

static uint64_t unmix(uint64_t h) {
    uint64_t x = unxorshift(h, 31);
    x *= mul_inverse(0x94d049bb133111ebull);
    x = unxorshift(x, 27);
    x *= mul_inverse(0xbf58476d1ce4e5b9ull);
    return unxorshift(x, 30);
}

/* n keys above 2^26 (so the decoder keeps them in its sparse hash map, not
 * the dense array) whose hashes agree in their low 24 bits: they all land
 * on one slot of any table of up to 2^24 entries. */
static void colliding_iids(uint64_t *keys, size_t n) {
    size_t got = 0;
    for (uint64_t i = 1; got < n; i++) {
        uint64_t k = unmix(i << 24);
        cr_assert_eq(mix(k), i << 24, "unmix does not invert mix");
        if (k >= (1ull << 26)) keys[got++] = k;
    }
}

/* n 32-bit keys (sequence ids, pids, tids are 32-bit on the wire) whose
 * hashes have `bits` low zero bits: found by search, as a 32-bit range
 * cannot be reached by inverting. */
static void colliding_u32(uint64_t *keys, size_t n, unsigned bits) {
    uint64_t mask = (1ull << bits) - 1;
    size_t got = 0;
    for (uint64_t x = 2; got < n; x++) {
        cr_assert_lt(x, 1ull << 32, "not enough colliding 32-bit keys");
        if ((mix(x) & mask) == 0) keys[got++] = x;
    }
}

/* Bits a u64map of n entries indexes by (power-of-two capacity, load at
 * most 3/4): colliding in these collides in every table up to that size. */
static unsigned table_bits(size_t n) {
    unsigned b = 4;
    while (((size_t)1 << b) * 3 < n * 4) b++;
    return b;
}

/* ---- trace generators ---- */

/* Sample v2 needs Unix time: BOOTTIME TB_BOOT0 is REALTIME TB_UNIX0. */

static void interned_name(tb_buf *t, uint64_t iid, const char *prefix, uint64_t k) {
    char s[48];
    int n = snprintf(s, sizeof s, "%s_%llu", prefix, (unsigned long long)k);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, iid, s, (size_t)n);
}

/* The linear control: one sequence with a small table, then samples until
 * the trace reaches `bytes`. */
static void gen_ordinary(tb_buf *t, size_t bytes) {
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    for (uint64_t k = 1; k <= 64; k++) {
        interned_name(t, k, "function", k);
        tb_frame(t, k, k, 0, 0x10 * k);
    }
    uint64_t fr[8];
    for (uint64_t c = 1; c <= 16; c++) {
        for (size_t f = 0; f < 8; f++) fr[f] = (c * 5 + f * 3) % 64 + 1;
        tb_callstack(t, c, fr, 8, 1);
    }
    tb_close(t, i);
    tb_close(t, p);
    for (uint64_t k = 0; k < 2 || t->len < bytes; k++) /* two samples at least: Relay's minimum */
        tb_perf_sample(t, 1, TB_BOOT0 + STEP * k, 100, 100 + (uint32_t)(k % 8), k % 16 + 1, TB_SEQ_NEEDS);
}

/* 1. One sequence interns 8n names and frames once, then n packets each
 * clear the incremental state, intern one entry and sample it. A clear that
 * costs the capacity the tables once reached is quadratic here. */
static void gen_resets(tb_buf *t, size_t n) {
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    for (uint64_t k = 1; k <= 8 * n; k++) {
        interned_name(t, k, "big_table_function", k);
        tb_frame(t, k, k, 0, k);
    }
    tb_callstack(t, 1, (const uint64_t[]){1, 2}, 2, 1);
    tb_close(t, i);
    tb_close(t, p);
    tb_perf_sample(t, 1, TB_BOOT0, 100, 100, 1, TB_SEQ_NEEDS);
    for (uint64_t r = 0; r < n; r++) {
        p = tb_packet_open(t, 1, TB_BOOT0 + STEP * (r + 1), TB_SEQ_CLEARED | TB_SEQ_NEEDS);
        i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
        interned_name(t, 1, "after_reset", r);
        tb_frame(t, 1, 1, 0, r);
        tb_callstack(t, 1, (const uint64_t[]){1}, 1, 1);
        tb_close(t, i);
        size_t s = tb_open(t, TM_PF_PACKET_PERF_SAMPLE);
        tb_uint(t, TM_PF_PERF_SAMPLE_PID, 100);
        tb_uint(t, TM_PF_PERF_SAMPLE_TID, 100);
        tb_uint(t, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
        tb_close(t, s);
        tb_close(t, p);
    }
}

/* 2. n sequences, each interning a few entries, their samples interleaved
 * round-robin. */
static void gen_sequences(tb_buf *t, size_t n) {
    tb_standard_clocks(t, 1);
    for (uint32_t q = 1; q <= n; q++) {
        size_t p = tb_packet_open(t, q, TB_NO_TS, TB_SEQ_CLEARED);
        size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
        interned_name(t, 1, "seq_main", q);
        interned_name(t, 2, "seq_work", q);
        tb_frame(t, 1, 1, 0, 0x10);
        tb_frame(t, 2, 2, 0, 0x20);
        tb_callstack(t, 1, (const uint64_t[]){1, 2}, 2, 1);
        tb_close(t, i);
        tb_close(t, p);
    }
    for (uint64_t round = 0; round < 3; round++)
        for (uint32_t q = 1; q <= n; q++)
            tb_perf_sample(t, q, TB_BOOT0 + STEP * (round * n + q), 100, 1000 + q % 64, 1, TB_SEQ_NEEDS);
}

/* 3a. n names, frames and callstacks on one sequence under interned ids
 * that collide in the unseeded hash, and 2n samples over them. */
static void gen_colliding_iids(tb_buf *t, size_t n) {
    uint64_t *iid = malloc(n * sizeof *iid);
    cr_assert_not_null(iid);
    colliding_iids(iid, n);
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    for (size_t k = 0; k < n; k++) {
        interned_name(t, iid[k], "colliding", k);
        tb_frame(t, iid[k], iid[k], 0, k);
        tb_callstack(t, iid[k], &iid[k], 1, 1);
    }
    tb_close(t, i);
    tb_close(t, p);
    for (size_t k = 0; k < 2 * n; k++)
        tb_perf_sample(t, 1, TB_BOOT0 + STEP * k, 100, 100, iid[(k * 7) % n], TB_SEQ_NEEDS);
    free(iid);
}

/* 3b. n sequences whose ids collide, each sampling its own thread and
 * process, with tids and pids from the same colliding set. */
static void gen_colliding_ids(tb_buf *t, size_t n) {
    uint64_t *id = malloc(n * sizeof *id);
    cr_assert_not_null(id);
    colliding_u32(id, n, table_bits(n));
    tb_standard_clocks(t, 1);
    for (size_t q = 0; q < n; q++) {
        size_t p = tb_packet_open(t, (uint32_t)id[q], TB_NO_TS, TB_SEQ_CLEARED);
        size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
        interned_name(t, 1, "id_main", q);
        tb_frame(t, 1, 1, 0, 0x10);
        tb_callstack(t, 1, (const uint64_t[]){1}, 1, 1);
        tb_close(t, i);
        tb_close(t, p);
    }
    for (uint64_t round = 0; round < 2; round++)
        for (size_t q = 0; q < n; q++)
            tb_perf_sample(t, (uint32_t)id[q], TB_BOOT0 + STEP * (round * n + q), (uint32_t)id[q], (uint32_t)id[q], 1,
                           TB_SEQ_NEEDS);
    free(id);
}

/* 4. Callstacks DEEP frames deep sharing all but their leaf, one per
 * sample, and n/4 mappings of PATH_SEGMENTS path segments each. */
#define DEEP 400
#define PATH_SEGMENTS 64
static void gen_deep(tb_buf *t, size_t n) {
    size_t n_maps = n / 4 + 1;
    tb_standard_clocks(t, 1);
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    char seg[32];
    uint64_t path[PATH_SEGMENTS];
    for (uint64_t k = 1; k <= PATH_SEGMENTS; k++) {
        int len = snprintf(seg, sizeof seg, "dir%llu", (unsigned long long)k);
        tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, k, seg, (size_t)len);
        path[k - 1] = k;
    }
    for (uint64_t m = 1; m <= n_maps; m++) tb_mapping(t, m, 0, m << 32, (m << 32) + 0x10000, path, PATH_SEGMENTS);
    for (uint64_t k = 1; k <= DEEP + n; k++) {
        interned_name(t, k, k <= DEEP ? "shared_prefix" : "leaf", k);
        tb_frame(t, k, k, (k % n_maps) + 1, 0x40 * k);
    }
    uint64_t *frames = malloc((DEEP + 1) * sizeof *frames);
    cr_assert_not_null(frames);
    for (size_t f = 0; f < DEEP; f++) frames[f] = f + 1;
    for (uint64_t c = 1; c <= n; c++) {
        frames[DEEP] = DEEP + c;
        tb_callstack(t, c, frames, DEEP + 1, 1);
    }
    free(frames);
    tb_close(t, i);
    tb_close(t, p);
    for (uint64_t c = 1; c <= n; c++)
        tb_perf_sample(t, 1, TB_BOOT0 + STEP * c, 100, 100 + (uint32_t)(c % 4), c, TB_SEQ_NEEDS);
}

/* ---- running the CLI under callgrind ---- */

static char work_dir[] = "/tmp/tm_time_bounds_XXXXXX";

static void write_trace(const char *path, const tb_buf *t) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot write %s: %s", path, strerror(errno));
    cr_assert_eq(fwrite(t->data, 1, t->len, f), t->len);
    cr_assert_eq(fclose(f), 0);
}

typedef enum command { CMD_FOLDED, CMD_SAMPLE_V2, CMD_RELAY, CMD_QUERY } command;
/* The CLI arguments before the trace's path, and after it. */
static const char *const command_args[][2] = {
    [CMD_FOLDED] = {"convert -f folded", "-o /dev/null"},
    [CMD_SAMPLE_V2] = {"convert -f sample-v2", "-o /dev/null"},
    [CMD_RELAY] = {"convert -f sample-v2 --compat relay", "-o /dev/null"},
    [CMD_QUERY] = {"query", "'SELECT count(*) FROM stack_profile_frame'"},
};

/* Instructions the CLI executes for cmd on the trace at path. */
static uint64_t instructions(command cmd, const char *path) {
    char out[300], log[300], shell[2048];
    snprintf(out, sizeof out, "%s/callgrind.out", work_dir);
    snprintf(log, sizeof log, "%s/valgrind.log", work_dir);
    snprintf(shell, sizeof shell,
             "valgrind --tool=callgrind --callgrind-out-file='%s' '%s' %s '%s' %s >/dev/null 2>'%s'", out, TM_CLI,
             command_args[cmd][0], path, command_args[cmd][1], log);
    int rc = system(shell);
    cr_assert(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "%s on %s failed (exit %d); see %s",
              command_args[cmd][0], path, WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, log);
    FILE *f = fopen(out, "r");
    cr_assert_not_null(f, "no callgrind output for %s", path);
    char line[512];
    uint64_t ir = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "summary:", 8) || !strncmp(line, "totals:", 7)) {
            ir = strtoull(strchr(line, ':') + 1, NULL, 10);
            break;
        }
    fclose(f);
    cr_assert_gt(ir, 0, "no instruction total in %s", out);
    return ir;
}

static void skip_unless_runnable(void) {
    if (UNDER_ASAN) cr_skip_test("valgrind cannot run an AddressSanitizer build");
    if (system("valgrind --version >/dev/null 2>&1") != 0) cr_skip_test("valgrind is not installed");
    cr_assert_not_null(mkdtemp(work_dir), "mkdtemp: %s", strerror(errno));
}

static void remove_work_dir(void) {
    static const char *const files[] = {"callgrind.out", "valgrind.log", "base.pftrace",    "small.pftrace",
                                        "large.pftrace", "ordinary.pftrace"};
    char path[300];
    for (size_t i = 0; i < N_OF(files); i++) {
        snprintf(path, sizeof path, "%s/%s", work_dir, files[i]);
        unlink(path);
    }
    rmdir(work_dir);
}

typedef void (*gen_fn)(tb_buf *t, size_t n);

/* Writes gen's traces at n and K*n, an ordinary trace of the larger one's
 * size and a one-sample trace, and checks both bounds for every command in
 * cmds. */
static void check_linear(const char *name, gen_fn gen, size_t n, const command *cmds, size_t n_cmds) {
    skip_unless_runnable();
    char base_path[300], small_path[300], large_path[300], ordinary_path[300];
    snprintf(base_path, sizeof base_path, "%s/base.pftrace", work_dir);
    snprintf(small_path, sizeof small_path, "%s/small.pftrace", work_dir);
    snprintf(large_path, sizeof large_path, "%s/large.pftrace", work_dir);
    snprintf(ordinary_path, sizeof ordinary_path, "%s/ordinary.pftrace", work_dir);
    tb_buf base = {0}, small = {0}, large = {0}, ordinary = {0};
    gen_ordinary(&base, 0); /* the table and two samples */
    gen(&small, n);
    gen(&large, K * n);
    gen_ordinary(&ordinary, large.len);
    write_trace(base_path, &base);
    write_trace(small_path, &small);
    write_trace(large_path, &large);
    write_trace(ordinary_path, &ordinary);

    char failures[2048] = "";
    for (size_t c = 0; c < n_cmds; c++) {
        command cmd = cmds[c];
        uint64_t ir_base = instructions(cmd, base_path);
        uint64_t ir_small = instructions(cmd, small_path), ir_large = instructions(cmd, large_path);
        cr_assert_gt(ir_small, ir_base, "%s: the small trace does no work", name);
        double growth = (double)(ir_large - ir_base) / (double)(ir_small - ir_base);
        cr_log_info("%s, %s: %zu -> %zu bytes, Ir above start-up %llu -> %llu (x%.2f)", name, command_args[cmd][0],
                    small.len, large.len, (unsigned long long)(ir_small - ir_base),
                    (unsigned long long)(ir_large - ir_base), growth);
        /* Relay mode spends most of its time formatting each sample's
         * timestamp (tm_format_f64's shortest round-trip search, tens of
         * thousands of instructions a sample), so an ordinary trace of the
         * same size, nearly all samples, costs minutes of callgrind and
         * measures that formatter, not the decoder: growth only there. */
        double per_byte = 0;
        uint64_t ir_ordinary = 0;
        if (cmd != CMD_RELAY) {
            ir_ordinary = instructions(cmd, ordinary_path);
            cr_assert_gt(ir_ordinary, ir_base);
            per_byte = (double)(ir_large - ir_base) / (double)(ir_ordinary - ir_base);
            cr_log_info("%s, %s: ordinary trace of %zu bytes: Ir above start-up %llu (worst/ordinary %.2f)", name,
                        command_args[cmd][0], ordinary.len, (unsigned long long)(ir_ordinary - ir_base), per_byte);
        }
        size_t used = strlen(failures);
        if (growth > MAX_GROWTH)
            snprintf(failures + used, sizeof failures - used,
                     "\n  %s: work grows x%.2f for x%d input (Ir %llu -> %llu above start-up)", command_args[cmd][0],
                     growth, K, (unsigned long long)(ir_small - ir_base), (unsigned long long)(ir_large - ir_base));
        used = strlen(failures);
        if (per_byte > MAX_PER_BYTE_FACTOR)
            snprintf(failures + used, sizeof failures - used,
                     "\n  %s: %.1fx the work of an ordinary trace of the same size (Ir %llu vs %llu)",
                     command_args[cmd][0], per_byte, (unsigned long long)(ir_large - ir_base),
                     (unsigned long long)(ir_ordinary - ir_base));
    }
    tb_free(&base);
    tb_free(&small);
    tb_free(&large);
    tb_free(&ordinary);
    /* On failure the traces stay, for callgrind_annotate. */
    cr_assert_eq(failures[0], 0, "%s is super-linear (traces kept in %s):%s", name, work_dir, failures);
    remove_work_dir();
}

static const command all_commands[] = {CMD_FOLDED, CMD_SAMPLE_V2, CMD_QUERY};
/* Relay mode decodes with its own code path but allows 64 sequences only. */
static const command one_sequence_commands[] = {CMD_FOLDED, CMD_SAMPLE_V2, CMD_RELAY, CMD_QUERY};

Test(time_bounds, many_incremental_resets, .timeout = 300) {
    check_linear("many resets", gen_resets, 1000, one_sequence_commands, N_OF(one_sequence_commands));
}

Test(time_bounds, many_sequences, .timeout = 300) {
    check_linear("many sequences", gen_sequences, 1000, all_commands, N_OF(all_commands));
}

Test(time_bounds, colliding_interned_ids, .timeout = 300) {
    check_linear("colliding iids", gen_colliding_iids, 1000, one_sequence_commands, N_OF(one_sequence_commands));
}

Test(time_bounds, colliding_sequence_and_thread_ids, .timeout = 300) {
    check_linear("colliding sequence ids, pids and tids", gen_colliding_ids, 1000, all_commands,
                 N_OF(all_commands));
}

Test(time_bounds, deep_shared_callstacks_and_long_paths, .timeout = 300) {
    check_linear("deep callstacks", gen_deep, 100, all_commands, N_OF(all_commands));
}

Test(time_bounds, inverse_hash_is_exact) {
    /* The colliding inputs rest on unmix; check it on its own. */
    uint64_t x = 0x0123456789abcdefull;
    for (int i = 0; i < 1000; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
        cr_assert_eq(unmix(mix(x)), x);
    uint64_t keys[64];
    colliding_iids(keys, N_OF(keys));
    for (size_t i = 0; i < N_OF(keys); i++) {
        cr_assert_geq(keys[i], 1ull << 26);
        cr_assert_eq(mix(keys[i]) & 0xffffff, 0);
    }
    colliding_u32(keys, 16, 10);
    for (size_t i = 0; i < 16; i++) cr_assert_eq(mix(keys[i]) & 0x3ff, 0);
}
