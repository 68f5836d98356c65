/*
 * trace_builder.h — writes Perfetto traces in memory for tests, the demo
 * and the benchmark: a protobuf writer (varints, length-delimited fields
 * opened and closed like brackets, packed repeated fields) plus named
 * field numbers for the messages tracemill reads. Not part of the library.
 * Out-of-memory aborts: this is test tooling.
 */
#ifndef TM_TRACE_BUILDER_H
#define TM_TRACE_BUILDER_H

#include <stddef.h>
#include <stdint.h>

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
/* Opens a length-delimited sub-message; tb_close patches its length. */
size_t tb_open(tb_buf *b, uint32_t field);
void tb_close(tb_buf *b, size_t mark);
/* Appends a TracePacket holding compressed_packets = zlib(inner trace). */
void tb_compressed_packet(tb_buf *trace, const tb_buf *inner);

/* Field numbers (perfetto-wire.md §1). */
enum {
    TB_TRACE_PACKET = 1,
    /* TracePacket */
    TB_P_PROCESS_TREE = 2, TB_P_CLOCK_SNAPSHOT = 6, TB_P_TIMESTAMP = 8, TB_P_SEQ_ID = 10,
    TB_P_INTERNED_DATA = 12, TB_P_SEQ_FLAGS = 13, TB_P_INCREMENTAL_CLEARED = 41,
    TB_P_PREV_DROPPED = 42, TB_P_PROCESS_DESCRIPTOR = 43, TB_P_THREAD_DESCRIPTOR = 44,
    TB_P_COMPRESSED = 50, TB_P_STREAMING_PROFILE = 54, TB_P_CLOCK_ID = 58, TB_P_DEFAULTS = 59,
    TB_P_TRACK_DESCRIPTOR = 60, TB_P_PERF_SAMPLE = 66,
    /* InternedData */
    TB_I_FUNCTION_NAMES = 5, TB_I_FRAMES = 6, TB_I_CALLSTACKS = 7, TB_I_BUILD_IDS = 16,
    TB_I_MAPPING_PATHS = 17, TB_I_MAPPINGS = 19,
    /* ClockSnapshot / Clock */
    TB_CS_CLOCKS = 1, TB_CS_PRIMARY = 2, TB_CLK_ID = 1, TB_CLK_TS = 2, TB_CLK_INCREMENTAL = 3,
    TB_CLK_MULT = 4,
    /* PerfSample */
    TB_PS_CPU = 1, TB_PS_PID = 2, TB_PS_TID = 3, TB_PS_CALLSTACK = 4, TB_PS_LOST = 17,
    TB_PS_SKIPPED = 18,
    /* StreamingProfilePacket */
    TB_SP_CALLSTACK = 1, TB_SP_DELTA = 2,
    /* ThreadDescriptor / ProcessDescriptor / TrackDescriptor */
    TB_TD_PID = 1, TB_TD_TID = 2, TB_TD_NAME = 5, TB_TD_REF_US = 6, TB_PD_PID = 1,
    TB_PD_NAME = 6, TB_TRACK_UUID = 1, TB_TRACK_PROCESS = 3, TB_TRACK_THREAD = 4,
    /* ProcessTree */
    TB_PT_PROCESSES = 1, TB_PT_THREADS = 2, TB_PROC_PID = 1, TB_PROC_PPID = 2, TB_PROC_CMDLINE = 3,
    TB_PROC_CMDLINE_IS_COMM = 9,
    TB_THR_TID = 1, TB_THR_NAME = 2, TB_THR_TGID = 3,
    /* TracePacketDefaults */
    TB_DEF_CLOCK_ID = 58, TB_DEF_STACK_SAMPLE = 100,
    /* StackSample (TracePacket 135, v58) and its interned tables */
    TB_P_STACK_SAMPLE = 135, TB_I_SS_TASK_CONTEXTS = 48, TB_I_SS_EXEC_CONTEXTS = 49,
    TB_SS_TASK_CONTEXT = 1, TB_SS_TASK_CONTEXT_IID = 2, TB_SS_EXEC_CONTEXT = 3, TB_SS_EXEC_CONTEXT_IID = 4,
    TB_SS_CALLSTACK = 5, TB_SS_CALLSTACK_IID = 6, TB_SS_UNWIND_ERROR = 7, TB_SS_PRIMARY_WEIGHT = 11,
    TB_SS_FOLLOWER_WEIGHTS = 14,
    TB_TC_IID = 1, TB_TC_PID = 2, TB_TC_TID = 3, TB_TC_ASYNC_ID = 4,
    TB_EC_CPU = 2, TB_EC_MODE = 3,
    TB_SSC_FRAMES = 1, TB_SSF_FUNCTION = 1, TB_SSF_SOURCE_FILE = 2, TB_SSF_LINE = 3
};

enum { TB_SEQ_CLEARED = 1, TB_SEQ_NEEDS = 2 };

/* Convenience writers for whole messages. */
void tb_interned_string(tb_buf *b, uint32_t field, uint64_t iid, const void *s, size_t n);
void tb_frame(tb_buf *b, uint64_t iid, uint64_t fn_iid, uint64_t mapping_iid, uint64_t rel_pc);
void tb_callstack(tb_buf *b, uint64_t iid, const uint64_t *frames, size_t n, int packed);
void tb_mapping(tb_buf *b, uint64_t iid, uint64_t build_iid, uint64_t start, uint64_t end,
                const uint64_t *path_iids, size_t n_paths);
/* A packet with a ClockSnapshot of (clock id, value) pairs. */
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
/* One ProcessTree.threads entry (tid, name, tgid), written inside an open TB_P_PROCESS_TREE. */
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

#endif
