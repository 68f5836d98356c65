/*
 * gen_trace.c — writes a synthetic but realistic Android-style Perfetto
 * trace for the demo and the benchmark: one process, N threads, half of
 * them sampled by PerfSample (traced_perf style) and half by
 * StreamingProfilePacket (Chrome/SDK style, timed by a ThreadDescriptor),
 * ~20-frame stacks drawn from a pool of a few thousand frames in native
 * and Java (.oat) mappings, a BOOTTIME/MONOTONIC/REALTIME clock snapshot,
 * thread names from a ProcessTree.
 *
 * --resets R makes every sequence clear its incremental state R times,
 * evenly over its samples, and emit its interned names, mappings, frames
 * and callstacks again after each clear, as a traced_perf producer with a
 * short clear_period_ms does: the heavy shape of `make bench`.
 *
 * usage: gen_trace OUT [--samples N] [--threads T] [--callstacks C]
 *                      [--frames F] [--depth D] [--resets R] [--seed S]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_util.h"
#include "trace_builder.h"


#define PID 4200u
#define MONO0 500000000ull
#define REAL0 1771278043000000000ull
#define N_MAPPINGS 4

static const char *const mapping_paths[N_MAPPINGS][3] = {
    {"apex", "com.android.runtime/lib64/bionic", "libc.so"},
    {"apex", "com.android.art/lib64", "libart.so"},
    {"system", "framework/arm64", "boot-framework.oat"},
    {"data", "app/com.example.app/lib/arm64", "libgame.so"},
};

/* The stack pool every sequence interns. */
typedef struct pool {
    uint32_t n_frames, n_stacks, stride;
    const uint64_t *stacks; /* n_stacks rows of stride frame iids, root first */
    const uint32_t *stack_len;
} pool;

/* Everything a sequence interns: function names, mapping paths, build ids,
 * mappings, frames and callstacks. */
static void write_interned(tb_buf *t, const pool *pl) {
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    for (uint32_t f = 1; f <= pl->n_frames; f++) {
        char name[64];
        int m = (int)(f % N_MAPPINGS);
        int len = m == 2 ? snprintf(name, sizeof name, "com.example.app.Module%u.method%u", f % 97, f)
                         : snprintf(name, sizeof name, "native_function_%u", f);
        tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, f, name, (size_t)len);
    }
    for (int m = 0; m < N_MAPPINGS; m++) {
        for (int s = 0; s < 3; s++) {
            const char *seg = mapping_paths[m][s];
            tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, (uint64_t)(m * 3 + s + 1), seg, strlen(seg));
        }
        uint8_t build_id[20];
        for (int b = 0; b < 20; b++) build_id[b] = (uint8_t)(m * 31 + b * 7);
        if (m != 2) tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, (uint64_t)m + 1, build_id, sizeof build_id);
        uint64_t path[3] = {(uint64_t)m * 3 + 1, (uint64_t)m * 3 + 2, (uint64_t)m * 3 + 3};
        uint64_t start = 0x7000000000ull + (uint64_t)m * 0x10000000ull;
        tb_mapping(t, (uint64_t)m + 1, m != 2 ? (uint64_t)m + 1 : 0, start, start + 0x8000000ull, path, 3);
    }
    for (uint32_t f = 1; f <= pl->n_frames; f++) tb_frame(t, f, f, f % N_MAPPINGS + 1, 0x1000 + f * 16);
    for (uint32_t s = 0; s < pl->n_stacks; s++)
        tb_callstack(t, s + 1, &pl->stacks[(size_t)s * pl->stride], pl->stack_len[s], 0);
    tb_close(t, in);
}

/* A packet that clears sequence seq's incremental state and interns the
 * pool again (the legacy ThreadDescriptor's time base carries over). */
static void write_reset(tb_buf *t, uint32_t seq, uint64_t ts, const pool *pl) {
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_uint(t, TM_PF_PACKET_TIMESTAMP, ts);
    tb_uint(t, TM_PF_PACKET_SEQUENCE_ID, seq);
    tb_uint(t, TM_PF_PACKET_SEQUENCE_FLAGS, TB_SEQ_CLEARED);
    write_interned(t, pl);
    tb_close(t, p);
}

int main(int argc, char **argv) {
    static const char *const options[] = {"--samples", "--threads", "--callstacks", "--frames", "--depth", "--resets", "--seed", NULL};
    if (!args_valid(argc, argv, options)) {
        fprintf(stderr, "usage: gen_trace OUT [--samples N] [--threads T] [--callstacks C] [--frames F] "
                        "[--depth D] [--resets R] [--seed S]\n");
        return 2;
    }
    uint64_t n_samples = arg_u64(argc, argv, "--samples", 2000000);
    uint32_t n_threads = (uint32_t)arg_u64(argc, argv, "--threads", 8);
    uint32_t n_stacks = (uint32_t)arg_u64(argc, argv, "--callstacks", 2000);
    uint32_t n_frames = (uint32_t)arg_u64(argc, argv, "--frames", 4000);
    uint32_t depth = (uint32_t)arg_u64(argc, argv, "--depth", 20);
    uint64_t resets = arg_u64(argc, argv, "--resets", 0);
    rng_state ^= arg_u64(argc, argv, "--seed", 1);
    if (!n_threads || !n_stacks || !n_frames || !depth) return 2;

    tb_buf t = {0};
    uint32_t ids[3] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_MONOTONIC, TM_PF_BUILTIN_CLOCK_REALTIME};
    uint64_t vals[3] = {TB_BOOT0, MONO0, REAL0};
    tb_clock_snapshot(&t, 1, ids, vals, 3);

    /* Process and thread names. */
    size_t p = tb_open(&t, TM_PF_TRACE_PACKET);
    tb_uint(&t, TM_PF_PACKET_TIMESTAMP, TB_BOOT0);
    tb_uint(&t, TM_PF_PACKET_SEQUENCE_ID, 1);
    size_t pt = tb_open(&t, TM_PF_PACKET_PROCESS_TREE);
    size_t pr = tb_open(&t, TM_PF_PROCESS_TREE_PROCESSES);
    tb_uint(&t, TM_PF_PROCESS_PID, PID);
    tb_str(&t, TM_PF_PROCESS_CMDLINE, "com.example.app");
    tb_close(&t, pr);
    for (uint32_t i = 0; i < n_threads; i++) {
        char name[32];
        snprintf(name, sizeof name, i == 0 ? "main" : (i % 2 ? "RenderThread-%u" : "worker-%u"), i);
        size_t th = tb_open(&t, TM_PF_PROCESS_TREE_THREADS);
        tb_uint(&t, TM_PF_THREAD_TID, PID + i);
        tb_str(&t, TM_PF_THREAD_NAME, name);
        tb_uint(&t, TM_PF_THREAD_TGID, PID);
        tb_close(&t, th);
    }
    tb_close(&t, pt);
    tb_close(&t, p);

    /* Callstacks: a shared root, then random frames; frame f lives in mapping f % 4. */
    uint64_t *stacks = malloc((size_t)n_stacks * (depth + 8) * sizeof *stacks);
    uint32_t *stack_len = malloc(n_stacks * sizeof *stack_len);
    if (!stacks || !stack_len) return 1;
    for (uint32_t s = 0; s < n_stacks; s++) {
        uint32_t len = depth - 4 + (uint32_t)(rnd() % 9);
        stack_len[s] = len;
        for (uint32_t k = 0; k < len; k++)
            stacks[(size_t)s * (depth + 8) + k] = k < 3 ? k + 1 : 1 + rnd() % n_frames;
    }

    const pool pl = {n_frames, n_stacks, depth + 8, stacks, stack_len};
    for (uint32_t i = 0; i < n_threads; i++) {
        int streaming = i % 2 == 1;
        p = tb_open(&t, TM_PF_TRACE_PACKET);
        tb_uint(&t, TM_PF_PACKET_TIMESTAMP, TB_BOOT0);
        tb_uint(&t, TM_PF_PACKET_SEQUENCE_ID, 10 + i);
        tb_uint(&t, TM_PF_PACKET_SEQUENCE_FLAGS, TB_SEQ_CLEARED);
        if (streaming) {
            size_t td = tb_open(&t, TM_PF_PACKET_THREAD_DESCRIPTOR);
            tb_uint(&t, TM_PF_THREAD_DESC_PID, PID);
            tb_uint(&t, TM_PF_THREAD_DESC_TID, PID + i);
            tb_uint(&t, TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US, MONO0 / 1000);
            tb_close(&t, td);
        }
        write_interned(&t, &pl);
        tb_close(&t, p);
    }

    /* Samples: each thread every 1 ms, in chunks of 32. */
    uint64_t per_thread = (n_samples + n_threads - 1) / n_threads, written = 0;
    uint64_t reset_every = resets ? (per_thread / (resets + 1) + 31) / 32 * 32 : 0;
    for (uint64_t base = 0; base < per_thread && written < n_samples; base += 32) {
        for (uint32_t i = 0; i < n_threads && written < n_samples; i++) {
            if (reset_every && base && base % reset_every == 0)
                write_reset(&t, 10 + i, TB_BOOT0 + base * 1000000ull + i * 1000, &pl);
            uint64_t n = per_thread - base < 32 ? per_thread - base : 32;
            if (n > n_samples - written) n = n_samples - written;
            if (i % 2 == 0) {
                for (uint64_t k = 0; k < n; k++)
                    tb_perf_sample(&t, 10 + i, TB_BOOT0 + (base + k) * 1000000ull + i * 1000, PID, PID + i,
                                   1 + rnd() % n_stacks, TB_SEQ_NEEDS);
            } else {
                uint64_t cs[32], dt[32];
                for (uint64_t k = 0; k < n; k++) {
                    cs[k] = 1 + rnd() % n_stacks;
                    dt[k] = base == 0 && k == 0 ? 0 : 1000;
                }
                p = tb_open(&t, TM_PF_TRACE_PACKET);
                tb_uint(&t, TM_PF_PACKET_SEQUENCE_ID, 10 + i);
                tb_uint(&t, TM_PF_PACKET_SEQUENCE_FLAGS, TB_SEQ_NEEDS);
                size_t sp = tb_open(&t, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
                tb_repeated(&t, TM_PF_STREAMING_CALLSTACK_IID, cs, (size_t)n);
                tb_repeated(&t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt, (size_t)n);
                tb_close(&t, sp);
                tb_close(&t, p);
            }
            written += n;
        }
    }

    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(t.data, 1, t.len, f) != t.len || fclose(f) != 0) {
        fprintf(stderr, "gen_trace: cannot write %s\n", argv[1]);
        return 3;
    }
    fprintf(stderr, "gen_trace: %s: %" PRIu64 " samples, %u threads, %zu bytes\n", argv[1], written, n_threads,
            t.len);
    tb_free(&t);
    free(stacks);
    free(stack_len);
    return 0;
}
