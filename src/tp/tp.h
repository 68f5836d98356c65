/*
 * tp.h — the Trace Processor model: a Perfetto trace decoded with Perfetto
 * Trace Processor's semantics into the rows of its
 * tables. tp.c fills it; sql.c exposes it to SQLite as virtual tables.
 *
 * It reads packets from the one Perfetto reader (perfetto/reader.h) and
 * heapprofd dumps through perfetto/heap.h, as the profile model does, but
 * keeps rows of its own: Trace Processor numbers rows in timestamp order,
 * keeps one mapping per process and sequence generation and raises its own
 * stats, while the converters' profile model deduplicates by content.
 *
 * Row ids are array indexes. Nullable ids hold TP_NULL; nullable strings
 * have data == NULL (an empty string has non-NULL data). Strings are views
 * into the input or into the model's arena. Samples are stored as columns
 * (20 bytes a sample) because they are the bulk of every trace.
 */
#ifndef TM_TP_H
#define TM_TP_H

#include "common/alloc.h"
#include "common/base.h"
#include "tp/tp_stats.h"

#define TP_NULL UINT32_MAX
#define TP_NO_INT INT64_MIN /* a NULL integer column value */

typedef struct tp_process {
    int64_t pid;
    tm_str name, cmdline;
    int64_t uid;          /* TP_NO_INT: unknown */
    uint32_t parent_upid; /* TP_NULL: none */
    uint32_t name_prio;
} tp_process;

typedef struct tp_thread {
    int64_t tid;
    tm_str name;
    uint32_t upid;       /* TP_NULL: unknown */
    uint32_t name_prio;
    int8_t is_main;      /* -1: NULL */
    uint8_t is_idle;
} tp_thread;

typedef struct tp_mapping {
    tm_str build_id, name;
    uint64_t exact_offset, start_offset, start, end, load_bias;
} tp_mapping;

typedef struct tp_frame {
    tm_str name, type;
    uint64_t rel_pc;
    uint32_t mapping;
    uint32_t symbol_set; /* TP_NULL: none */
    bool has_symbol;     /* symbol_set names this frame's own stack_profile_symbol rows */
    tm_str deobfuscated_name; /* data NULL: none (a DeobfuscationMapping renames Java frames) */
} tp_frame;

/* stack_profile_callsite, compactly. A callstack resolved for the first
 * time makes its new callsites one after another, each the child of the
 * row before, so such a row keeps its frame alone; a row whose parent is
 * not the row before starts a run: a bit says so and `heads` keeps its
 * parent and depth, found by counting the bits before it. A row's depth is
 * its run start's plus its distance from it. 4-5 bytes a row when runs are
 * long (the heavy shape's), 12 when every row starts one; tm_tp_cs_* read
 * a row. */
typedef struct tp_cs_head {
    uint32_t parent, depth;
} tp_cs_head;

/* 64 rows, from row 64 * its index. */
typedef struct tp_cs_word {
    uint64_t head_bits;       /* bit i: row 64 * index + i starts a run */
    uint32_t heads_before;    /* runs that start before its first row */
} tp_cs_word;

typedef struct tp_callsites {
    uint32_t *frame;          /* by row */
    tp_cs_word *words;
    tp_cs_head *heads;        /* by run, in row order */
    size_t n, cap, cap_words, n_heads, cap_heads;
    uint32_t last_depth;      /* the last row's, while rows are added */
} tp_callsites;

typedef struct tp_symbol {
    uint32_t symbol_set;
    tm_str name, source_file;
    uint32_t line;
    bool no_line;        /* line_number is NULL (ModuleSymbols without one) */
    bool inlined;        /* inlined into the next row of its set (ModuleSymbols) */
} tp_symbol;

typedef enum { TP_SRC_PERF = 1, TP_SRC_CHROME = 2, TP_SRC_STACK = 3 } tp_sample_kind;

/* What a sample shares with many others, deduplicated: kind, execution
 * context, session, unwind error, Chrome's process priority. */
typedef struct tp_sample_attr {
    uint8_t kind;          /* tp_sample_kind */
    uint8_t unwind_error;  /* PerfSample StackUnwindError + 1; 0: NULL */
    uint32_t exec;         /* execution context id or TP_NULL */
    uint32_t session;      /* session id or TP_NULL */
    int32_t priority;      /* StreamingProfilePacket.process_priority */
} tp_sample_attr;

typedef struct tp_task_ctx {
    uint32_t upid, utid, async; /* each TP_NULL when unknown */
} tp_task_ctx;

typedef struct tp_exec_ctx {
    uint32_t cpu;          /* TP_NULL: unknown */
    const char *mode;      /* static; NULL: unknown */
} tp_exec_ctx;

typedef struct tp_async_ctx {
    tm_str name, kind;
    uint32_t parent;       /* TP_NULL: none */
} tp_async_ctx;

typedef struct tp_session {
    tm_str source, timebase_unit, cmdline;
    uint8_t is_perf;
} tp_session;

typedef enum { TP_TRACK_PERF_COUNTER = 1, TP_TRACK_STACK_SAMPLE_COUNTER = 2, TP_TRACK_PROCESS_COUNTER = 3 } tp_track_kind;

typedef struct tp_track {
    tm_str name, unit;
    uint8_t kind;          /* tp_track_kind */
    uint8_t is_timebase;
    uint32_t session, cpu; /* cpu: TP_NULL for stack-sample counters */
    uint32_t upid;         /* process counters (ProcessStats): the process */
} tp_track;

typedef struct tp_counter {
    int64_t ts;
    double value;
    uint32_t track;
    uint32_t sample;       /* the stack_sample it measures, or TP_NULL */
} tp_counter;

typedef struct tp_stat {
    uint32_t key;          /* tp_stat_key */
    uint32_t machine;      /* machine row id */
    int64_t idx;           /* TP_NO_INT for single stats */
    int64_t value;
} tp_stat;

typedef struct tp_meta {
    const char *name;      /* static */
    int64_t int_value;     /* TP_NO_INT: NULL */
    tm_str str_value;
} tp_meta;

typedef struct tp_clock_row {
    int64_t ts, value;
    uint32_t clock_id, snapshot;
} tp_clock_row;

/* heap_profile_allocation: a change of a callsite's heap totals. */
typedef struct tp_heap_alloc {
    int64_t ts, count, size;
    uint32_t upid, callsite;
    tm_str heap_name;
} tp_heap_alloc;

/* heap_profile: one heapprofd dump of a process's heap. */
typedef struct tp_heap_dump {
    int64_t ts, ts_end;
    uint32_t upid;
    tm_str heap_name;      /* data NULL: not named */
} tp_heap_dump;

/* package_list: an app installed on the device (PackagesList), one row per
 * package name, the first seen. */
typedef struct tp_package {
    tm_str name;
    int64_t uid, version_code;
    uint8_t debuggable, profileable_from_shell;
} tp_package;

#define TP_VEC(T, name) T *name; size_t n_##name, cap_##name

typedef struct tm_tp {
    tm_mem *mem;
    tm_arena arena;
    TP_VEC(tp_process, processes);
    TP_VEC(tp_thread, threads);
    TP_VEC(tp_mapping, mappings);
    TP_VEC(tp_frame, frames);
    tp_callsites callsites;
    TP_VEC(tp_symbol, symbols);
    TP_VEC(tp_sample_attr, attrs);
    TP_VEC(tp_task_ctx, tasks);
    TP_VEC(tp_exec_ctx, execs);
    TP_VEC(tp_async_ctx, asyncs);
    TP_VEC(tp_session, sessions);
    TP_VEC(tp_track, tracks);
    TP_VEC(tp_counter, counters);
    TP_VEC(tp_stat, stats);
    TP_VEC(tp_meta, meta);
    TP_VEC(tp_clock_row, clocks);
    TP_VEC(tp_heap_alloc, heap_allocs);
    TP_VEC(tp_heap_dump, heap_dumps);
    int64_t trace_start;     /* the earliest sample, allocation or counter (0: none) */
    uint32_t n_machines;     /* machine rows: 0 is the host */
    bool cut_off;            /* the last packet runs past the end (not when strict): the rest was read */
    uint64_t cut_off_at;     /* where that packet starts */
    /* Samples, one entry per row in each column. */
    size_t n_samples, cap_samples; /* cap_samples: the least of the columns' capacities */
    size_t cap_ts, cap_callsite, cap_task, cap_attr;
    int64_t *s_ts;
    uint32_t *s_callsite;    /* TP_NULL: none */
    uint32_t *s_task;        /* task context id or TP_NULL */
    uint32_t *s_attr;        /* tp_sample_attr id */
    /* The rows of PerfSamples and of StreamingProfilePackets, bit r % 64 of
     * word r / 64 for row r: perf_sample and cpu_profile_stack_sample step
     * from one to the next instead of testing each row's kind. */
    uint64_t *perf_rows, *chrome_rows;
    size_t n_kind_words;
    TP_VEC(tp_package, packages);
    tm_idxset package_names; /* packages by name */
} tm_tp;

/* Decodes buf (which must outlive the model) into *tp; strict: a trace cut
 * off inside a packet is an error instead of read up to that packet. */
tm_status tm_tp_build(tm_tp *tp, tm_mem *mem, const uint8_t *buf, size_t len, const tm_limits *limits, bool strict,
                      tm_error *err);
void tm_tp_release(tm_tp *tp);

/* Before tm_tp_build on buf (decompressed): TM_ERR_UNSUPPORTED, naming who
 * needs Perfetto and the format, for input that is to be read as another
 * format: the one named (opts->input), or with TM_INPUT_AUTO the one
 * tm_input_detect finds, which would otherwise fail as malformed Perfetto. */
tm_status tm_tp_require_perfetto(const tm_options *opts, const uint8_t *buf, size_t len, const char *who,
                                 tm_error *err);

/* Callsite row r's frame, parent (TP_NULL: a root) and depth; r < callsites.n. */
static inline uint32_t tm_tp_cs_frame(const tm_tp *tp, uint32_t r) { return tp->callsites.frame[r]; }
static inline bool tm_tp_cs_is_head(const tp_callsites *cs, uint32_t r) { return cs->words[r / 64].head_bits >> (r % 64) & 1; }
/* The run of row r: its index in heads, and *start its first row. */
static inline uint32_t tm_tp_cs_run(const tp_callsites *cs, uint32_t r, uint32_t *start) {
    size_t w = r / 64;
    uint64_t bits = cs->words[w].head_bits & ((2ull << (r % 64)) - 1); /* its word's rows up to r */
    while (!bits) bits = cs->words[--w].head_bits; /* row 0 starts a run */
    *start = (uint32_t)(w * 64 + 63 - (unsigned)__builtin_clzll(bits));
    return cs->words[w].heads_before + (uint32_t)__builtin_popcountll(bits) - 1;
}
static inline uint32_t tm_tp_cs_parent(const tm_tp *tp, uint32_t r) {
    uint32_t start;
    return tm_tp_cs_is_head(&tp->callsites, r) ? tp->callsites.heads[tm_tp_cs_run(&tp->callsites, r, &start)].parent
                                               : r - 1;
}
static inline uint32_t tm_tp_cs_depth(const tm_tp *tp, uint32_t r) {
    uint32_t start, k = tm_tp_cs_run(&tp->callsites, r, &start);
    return tp->callsites.heads[k].depth + (r - start);
}

/* Static names of enum values as Trace Processor writes them. */
const char *tm_tp_unwind_error_name(unsigned unwind_error_plus_one);
const char *tm_tp_clock_name(uint32_t clock_id); /* NULL beyond the builtins 1-6 */
const tp_stat_def *tm_tp_stat_def(uint32_t key); /* key < TPS_COUNT */
const char *tm_tp_stat_description(uint32_t key); /* "" for stats tracemill never raises */

#endif
