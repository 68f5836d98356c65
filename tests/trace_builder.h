/*
 * trace_builder.h — writes Perfetto traces in memory for tests, the demo
 * and the benchmark: a protobuf writer (varints, length-delimited fields
 * opened and closed like brackets, packed repeated fields); field numbers
 * are perfetto/fields.h's names. Not part of the library.
 * Out-of-memory aborts: this is test tooling.
 */
#ifndef TM_TRACE_BUILDER_H
#define TM_TRACE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

#include "perfetto/fields.h" /* field numbers: TM_PF_<MESSAGE>_<FIELD> */

typedef struct tb_buf {
    uint8_t *data;
    size_t len, cap;
} tb_buf;

void tb_free(tb_buf *b);
void tb_raw(tb_buf *b, const void *p, size_t n);
void tb_varint(tb_buf *b, uint64_t v);
void tb_tag(tb_buf *b, uint32_t field, uint32_t wire);
void tb_uint(tb_buf *b, uint32_t field, uint64_t v);          /* varint field; negative int64 as (uint64_t) */
void tb_fixed64(tb_buf *b, uint32_t field, uint64_t v);
void tb_fixed32(tb_buf *b, uint32_t field, uint32_t v);
void tb_bytes(tb_buf *b, uint32_t field, const void *p, size_t n);
void tb_str(tb_buf *b, uint32_t field, const char *s);
void tb_packed(tb_buf *b, uint32_t field, const uint64_t *v, size_t n);
/* The same list unpacked (one record per value), as Perfetto's protos
 * declare their repeated scalars: what writers of real traces must use. */
void tb_repeated(tb_buf *b, uint32_t field, const uint64_t *v, size_t n);
/* Opens a length-delimited sub-message; tb_close patches its length. */
size_t tb_open(tb_buf *b, uint32_t field);
void tb_close(tb_buf *b, size_t mark);
/* Appends a TracePacket holding compressed_packets = zlib(inner trace). */
void tb_compressed_packet(tb_buf *trace, const tb_buf *inner);

/* Short names for the sequence flags most packets set. */
enum { TB_SEQ_CLEARED = TM_PF_SEQ_INCREMENTAL_STATE_CLEARED, TB_SEQ_NEEDS = TM_PF_SEQ_NEEDS_INCREMENTAL_STATE };

/* Convenience writers for whole messages. */
void tb_interned_string(tb_buf *b, uint32_t field, uint64_t iid, const void *s, size_t n);
void tb_frame(tb_buf *b, uint64_t iid, uint64_t fn_iid, uint64_t mapping_iid, uint64_t rel_pc);
void tb_callstack(tb_buf *b, uint64_t iid, const uint64_t *frames, size_t n, int packed);
void tb_mapping(tb_buf *b, uint64_t iid, uint64_t build_iid, uint64_t start, uint64_t end,
                const uint64_t *path_iids, size_t n_paths);
/* A packet with a ClockSnapshot of (clock id, value) pairs. */
/* The clocks most test traces share: BOOTTIME TB_BOOT0 is Unix time
 * TB_UNIX0 (2023-11-14). */
#define TB_BOOT0 1000000000ull
#define TB_UNIX0 1700000000000000000ull
/* A ClockSnapshot on seq linking BOOTTIME TB_BOOT0 to REALTIME TB_UNIX0. */
void tb_standard_clocks(tb_buf *t, uint32_t seq);
void tb_clock_snapshot(tb_buf *t, uint32_t seq, const uint32_t *ids, const uint64_t *values, size_t n);
/* A PerfSample packet. */
void tb_perf_sample(tb_buf *t, uint32_t seq, uint64_t ts, uint32_t pid, uint32_t tid, uint64_t cs_iid,
                    uint32_t flags);


/* Opens a TracePacket (close it with tb_close) and writes its header fields in
 * this order: timestamp unless ts == TB_NO_TS, trusted_packet_sequence_id
 * unless seq == 0, sequence_flags unless flags == 0. */
#define TB_NO_TS UINT64_MAX
size_t tb_packet_open(tb_buf *t, uint32_t seq, uint64_t ts, uint32_t flags);
/* tb_clock_snapshot plus ClockSnapshot.primary_trace_clock (left out if 0). */
void tb_clock_snapshot_primary(tb_buf *t, uint32_t seq, const uint32_t *ids, const uint64_t *values, size_t n,
                               uint32_t primary);
/* One ProcessTree.threads entry (tid, name, tgid), written inside an open TM_PF_PACKET_PROCESS_TREE. */
void tb_pt_thread(tb_buf *t, uint64_t tid, uint64_t tgid, const char *name);

/* A StackSample packet (TracePacket 135). Zero-initialise, then set what the
 * sample has; fields left at 0 / NULL are not written. */
#define TB_SS_NONE UINT32_MAX /* pid / tid: leave the field out */
typedef struct tb_stack_sample {
    uint64_t ts;        /* packet timestamp (TB_NO_TS: left out) */
    uint32_t seq, flags, clock_id; /* trusted_packet_sequence_id, sequence_flags, timestamp_clock_id */
    int task;           /* write an inline task_context with pid and tid (each unless TB_SS_NONE) */
    uint32_t pid, tid;
    uint64_t async_id;
    uint64_t task_iid;  /* task_context_iid */
    int cpu;            /* execution_context {cpu, mode} when cpu > 0 */
    uint32_t mode;
    uint64_t exec_iid;  /* execution_context_iid */
    const char *unwind_error;
    const char *const *frames; /* inline callstack, root first, function names (NULL entry: no name) */
    size_t n_frames;
    int inline_cs;      /* write the inline callstack (also when n_frames is 0) */
    const char *source; /* each inline frame's source_file (line = index + 1) */
    uint64_t cs_iid;    /* callstack_iid, written after any inline callstack */
    uint64_t weight;    /* primary_weight */
    const uint64_t *followers; /* follower_weights, packed */
    size_t n_followers;
} tb_stack_sample;
void tb_stack_sample_packet(tb_buf *t, const tb_stack_sample *s);
/* An InternedData.stack_sample_task_contexts entry. */
void tb_task_context(tb_buf *b, uint64_t iid, uint32_t pid, uint32_t tid);

/* heapprofd: a HeapSample's totals since profiling started. */
typedef struct tb_heap_sample {
    uint64_t callstack, allocated, freed, alloc_count, free_count;
} tb_heap_sample;
/* A ProcessHeapSamples.samples entry; pad > 0 puts an unknown
 * length-delimited field 20 of pad zero bytes (at most 300) first: a
 * two-byte tag, which no reader's fast path takes. */
void tb_heap_sample_msg(tb_buf *b, const tb_heap_sample *s, size_t pad);
/* A ProfilePacket.ProcessHeapSamples of pid at MONOTONIC_COARSE ts, inside
 * an open ProfilePacket; heap_name NULL and interval 0 leave them out. */
void tb_heap_dump(tb_buf *b, uint32_t pid, uint64_t ts, const char *heap_name, uint64_t interval,
                  const tb_heap_sample *s, size_t n);
/* A snapshot with BOOTTIME and MONOTONIC_COARSE both 0: dump times are trace times. */
void tb_heap_clocks(tb_buf *t, uint32_t seq);

#endif
