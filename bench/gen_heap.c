/*
 * gen_heap.c — writes a synthetic heapprofd trace for the benchmark: P
 * processes, each with C callstacks (~D frames from a pool of F functions
 * in two libraries) interned on its own sequence as newer heapprofd does
 * (InternedData), then N dumps per process whose samples give every
 * callstack's totals so far (allocated bytes and objects grow, frees follow
 * at about a third), each dump split over packets of at most 500 samples
 * with `continued`, timed on MONOTONIC_COARSE.
 *
 * usage: gen_heap OUT [--processes P] [--callstacks C] [--dumps N]
 *                     [--frames F] [--depth D]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_util.h"
#include "trace_builder.h"


#define SAMPLES_PER_PACKET 500
#define DUMP_PERIOD_NS 1000000000ull

/* The interned names, mappings, frames and callstacks of one process. */
static void intern(tb_buf *t, uint32_t seq, uint32_t n_frames, uint32_t n_stacks, uint32_t depth) {
    size_t pkt = tb_packet_open(t, seq, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    char name[64];
    for (uint32_t f = 0; f < n_frames; f++) {
        int n = snprintf(name, sizeof name, "heap_fn_%u(Allocator&, unsigned long)", f);
        tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, f + 1, name, (size_t)n);
    }
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "libapp.so", 9);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 2, "libc.so", 7);
    const uint64_t path1[1] = {1}, path2[1] = {2};
    tb_mapping(t, 1, 0, 0x10000000, 0x10800000, path1, 1);
    tb_mapping(t, 2, 0, 0x20000000, 0x20100000, path2, 1);
    for (uint32_t f = 0; f < n_frames; f++) tb_frame(t, f + 1, f + 1, f % 8 ? 1 : 2, 0x1000 + 16ull * f);
    uint64_t *frames = malloc(depth * sizeof *frames);
    for (uint32_t c = 0; c < n_stacks; c++) {
        uint32_t d = depth / 2 + (uint32_t)(rnd() % (depth / 2 + 1));
        for (uint32_t i = 0; i < d; i++) frames[i] = 1 + rnd() % n_frames;
        tb_callstack(t, c + 1, frames, d, 0);
    }
    free(frames);
    tb_close(t, in);
    tb_close(t, pkt);
}

int main(int argc, char **argv) {
    static const char *const options[] = {"--processes", "--callstacks", "--dumps", "--frames", "--depth", NULL};
    if (!args_valid(argc, argv, options)) {
        fprintf(stderr, "usage: gen_heap OUT [--processes P] [--callstacks C] [--dumps N] [--frames F] [--depth D]\n");
        return 2;
    }
    uint32_t n_procs = (uint32_t)arg_u64(argc, argv, "--processes", 4);
    uint32_t n_stacks = (uint32_t)arg_u64(argc, argv, "--callstacks", 20000);
    uint32_t n_dumps = (uint32_t)arg_u64(argc, argv, "--dumps", 60);
    uint32_t n_frames = (uint32_t)arg_u64(argc, argv, "--frames", 5000);
    uint32_t depth = (uint32_t)arg_u64(argc, argv, "--depth", 20);
    tb_buf t = {0};
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_MONOTONIC_COARSE};
    const uint64_t values[2] = {TB_BOOT0, TB_BOOT0};
    tb_clock_snapshot(&t, 1, ids, values, 2);
    uint64_t (*totals)[4] = calloc((size_t)n_procs * n_stacks, sizeof *totals);
    uint64_t *index = calloc(n_procs, sizeof *index);
    for (uint32_t p = 0; p < n_procs; p++) intern(&t, 10 + p, n_frames, n_stacks, depth);
    for (uint32_t d = 0; d < n_dumps; d++) {
        uint64_t ts = TB_BOOT0 + (d + 1) * DUMP_PERIOD_NS;
        for (uint32_t p = 0; p < n_procs; p++) {
            for (uint32_t c = 0; c < n_stacks; c += SAMPLES_PER_PACKET) {
                uint32_t end = c + SAMPLES_PER_PACKET < n_stacks ? c + SAMPLES_PER_PACKET : n_stacks;
                size_t pkt = tb_packet_open(&t, 10 + p, ts, TB_SEQ_NEEDS);
                size_t pp = tb_open(&t, TM_PF_PACKET_PROFILE_PACKET);
                size_t dump = tb_open(&t, TM_PF_PROFILE_PROCESS_DUMPS);
                tb_uint(&t, TM_PF_HEAP_DUMP_PID, 1000 + p);
                tb_uint(&t, TM_PF_HEAP_DUMP_TIMESTAMP, ts);
                tb_uint(&t, TM_PF_HEAP_DUMP_START_TIMESTAMP, ts - DUMP_PERIOD_NS);
                tb_str(&t, TM_PF_HEAP_DUMP_HEAP_NAME, "libc.malloc");
                tb_uint(&t, TM_PF_HEAP_DUMP_SAMPLING_INTERVAL_BYTES, 4096);
                tb_uint(&t, TM_PF_HEAP_DUMP_ORIG_SAMPLING_INTERVAL_BYTES, 4096);
                for (uint32_t k = c; k < end; k++) {
                    uint64_t *tot = totals[(size_t)p * n_stacks + k];
                    uint64_t n = rnd() % 4;
                    tot[0] += n * 4096, tot[2] += n;                    /* allocated */
                    uint64_t f = (tot[2] - tot[3]) / 3;                 /* about a third freed */
                    tot[1] += f * 4096, tot[3] += f;
                    const tb_heap_sample hs = {k + 1, tot[0], tot[1], tot[2], tot[3]};
                    tb_heap_sample_msg(&t, &hs, 0);
                }
                tb_close(&t, dump);
                if (end < n_stacks) tb_uint(&t, TM_PF_PROFILE_CONTINUED, 1);
                tb_uint(&t, TM_PF_PROFILE_INDEX, index[p]++);
                tb_close(&t, pp);
                tb_close(&t, pkt);
            }
        }
    }
    FILE *f = fopen(argv[1], "wb");
    if (!f || fwrite(t.data, 1, t.len, f) != t.len || fclose(f) != 0) {
        fprintf(stderr, "gen_heap: cannot write %s\n", argv[1]);
        return 1;
    }
    fprintf(stderr, "gen_heap: %s: %u processes x %u callstacks x %u dumps, %zu bytes\n", argv[1], n_procs, n_stacks,
            n_dumps, t.len);
    free(totals);
    free(index);
    tb_free(&t);
    return 0;
}
