/*
 * profile.h — the normalised profile model every exporter reads: threads,
 * samples, stacks, frames and mappings, deduplicated and numbered in
 * first-seen (trace) order. It knows nothing of protobuf or Perfetto; the
 * trace decoder (trace.c) fills it through the tm_profile_* functions below.
 *
 * Strings are views (tm_str) into the input or into the trace's arena.
 * Stacks are stored leaf first. Sample timestamps are in trace time (ns);
 * realtime_segments map trace time to Unix time. A finished profile is
 * immutable and may be read from any thread.
 */
#ifndef TM_PROFILE_H
#define TM_PROFILE_H

#include "common/alloc.h" /* tm_mem, tm_arena, tm_u64map */
#include "common/base.h"

enum {
    TM_FRAME_HAS_FUNCTION = 1,
    TM_FRAME_HAS_MODULE = 2,
    TM_FRAME_HAS_ADDR = 4,
    TM_FRAME_JAVA = 8,
    TM_FRAME_HAS_PACKAGE = 16,
    TM_FRAME_HAS_FILE = 32,   /* file: the source file (from symbols) */
    TM_FRAME_HAS_LINE = 64,   /* line: the source line (from symbols) */
    TM_FRAME_INLINED = 128    /* inlined into the next frame of its stack (same addr) */
};

typedef struct tm_prof_frame {
    tm_str function;
    tm_str module;   /* Java class (the name before the last '.') */
    tm_str package;  /* mapping path */
    uint64_t addr;   /* absolute instruction address */
    uint64_t rel_pc;
    uint32_t mapping;/* index + 1 into mappings; 0: none */
    uint32_t flags;  /* TM_FRAME_* */
    tm_str file;     /* TM_FRAME_HAS_FILE */
    uint32_t line;   /* TM_FRAME_HAS_LINE */
} tm_prof_frame;

/* TM_MAPPING_ELF_REL_PC: its frames' rel_pc is a virtual address of the ELF
 * file (Perfetto's unwinders), so the process address is start + rel_pc -
 * load_bias - (exact_offset - start_offset); without it (Sentry images)
 * rel_pc is the frame's distance from start. */
enum { TM_MAPPING_HAS_LOAD_BIAS = 1, TM_MAPPING_JAVA = 2, TM_MAPPING_ELF_REL_PC = 4 };

typedef struct tm_prof_mapping {
    tm_str path;     /* path segments joined with '/' */
    tm_bytes build_id; /* raw bytes */
    uint64_t start, end, load_bias, start_offset, exact_offset;
    uint32_t flags;  /* TM_MAPPING_* */
    uint64_t path_hash; /* set when interned: the hash of path that its frames' package hashes to */
    uint64_t elf_start; /* set when interned: where its ELF file begins in the process (start less the
                           mapping's offset into the ELF; start for Sentry images and when the offsets
                           do not fit) */
} tm_prof_mapping;

typedef struct tm_prof_stack {
    uint32_t off, len; /* into frame_ids, leaf first */
} tm_prof_stack;

typedef struct tm_prof_thread {
    int64_t tid, pid; /* pid 0: unknown */
    tm_str name;
    uint32_t name_prio; /* 0: no name; higher wins, equal overwrites */
    uint64_t weight;    /* its samples' total weight (tm_profile_count_threads) */
    /* Its samples whose CPU time the producer counted (PerfSample
     * timebase_count of a task-clock timebase), and that time in ns. */
    uint64_t counted_samples, counted_ns;
} tm_prof_thread;

typedef struct tm_prof_process {
    int64_t pid;
    tm_str name;
    uint32_t name_prio;
    bool has_uid;    /* ProcessTree gave its uid (Android: its app's, by PackagesList) */
    int64_t uid;
} tm_prof_process;

typedef struct tm_prof_sample {
    int64_t ts;     /* trace time, ns (Relay mode: the raw packet timestamp) */
    uint32_t stack;
    uint32_t thread;
} tm_prof_sample;

/* An off-CPU sample: the stack where a thread left the CPU at ts, and how
 * long it stayed off it. Apart from the (on-CPU) samples: exporters read
 * them through tm_profile_value_view (TM_VALUE_OFF_CPU, TM_VALUE_WALL). */
typedef struct tm_prof_off_sample {
    int64_t ts;
    uint32_t stack, thread;
    uint64_t ns;
} tm_prof_off_sample;

/* A memory profile's sample: what one process allocated at one stack in
 * one heap, and still holds, over the whole trace (the sum of its dumps'
 * changes, perfetto/heap.h). Apart from the CPU samples: exporters read it
 * through tm_profile_value_view. */
typedef struct tm_prof_heap_sample {
    int64_t ts;              /* its last dump */
    uint32_t stack, thread;  /* thread: the process's main thread (tid = pid) */
    uint32_t heap;           /* into heap_names */
    int64_t alloc_objects, alloc_space, inuse_objects, inuse_space;
} tm_prof_heap_sample;

/* A process's memory at a point in time (ProcessStats), in bytes. */
typedef struct tm_prof_memory {
    int64_t ts, pid;
    uint64_t rss, rss_anon, rss_file, rss_shmem, swap, rss_peak; /* rss_peak: the high-water mark */
} tm_prof_memory;

/* Trace time at or after from_ns maps to Unix time by adding offset_ns
 * (the first segment also covers earlier times). */
typedef struct tm_time_segment {
    int64_t from_ns;
    int64_t offset_ns;
} tm_time_segment;

enum { TM_HEAP_GROUPS = 16 };

typedef struct tm_profile {
    tm_mem *mem;
    tm_arena *arena;
    int relay_compat;      /* written by TM_MODE_RELAY */
    int label_lines;       /* !tm_options.no_source_lines: folded and SVG labels name file and line */
    uint64_t max_unique_frames;
    uint64_t max_chunk_duration_ns; /* Sample v2 DurationIsTooLong */

    tm_prof_frame *frames;     size_t n_frames, cap_frames;     tm_idxset frame_set;
    tm_prof_mapping *mappings; size_t n_mappings, cap_mappings; tm_idxset mapping_set;
    tm_prof_stack *stacks;     size_t n_stacks, cap_stacks;     tm_idxset stack_set;
    uint32_t *frame_ids;   size_t n_frame_ids, cap_frame_ids;
    tm_prof_thread *threads;   size_t n_threads, cap_threads;   tm_u64map thread_by_tid;
    tm_prof_process *processes;size_t n_processes, cap_processes; tm_u64map process_by_pid;
    tm_prof_sample *samples;   size_t n_samples, cap_samples;
    /* Folded input only: weight of each sample, cap_samples entries (NULL:
     * every sample weighs 1)
     * and no timestamps (every ts is 0). */
    uint64_t *weights;     int untimed;
    bool threads_counted;  /* the sort set every thread's weight as it merged them (tm_profile_count_threads) */

    tm_prof_off_sample *off_samples; size_t n_off_samples, cap_off_samples; /* in time order once read */
    uint64_t on_cpu_period_ns; /* the (on-CPU) samples' period from their timebase, the first one given;
                                  0: unknown */

    tm_prof_heap_sample *heap_samples; size_t n_heap_samples, cap_heap_samples;
    /* Heap samples of the first TM_HEAP_GROUPS (thread, heap) pairs by
     * stack (an array load per dump row: dumps repeat every callsite);
     * those of further pairs by (stack, thread, heap). */
    struct { uint64_t key; tm_iidmap by_stack; size_t n; } heap_groups[TM_HEAP_GROUPS];
    size_t n_heap_groups, last_heap_group;
    tm_u64map heap_sample_by_key;
    tm_str *heap_names; size_t n_heap_names, cap_heap_names;
    uint64_t heap_interval;       /* sampling_interval_bytes of the last dump; 0: not given */
    tm_prof_memory *memory; size_t n_memory, cap_memory; /* in trace order */

    tm_time_segment *realtime; size_t n_realtime; /* empty: no Unix time known */
    tm_i128 relay_offset_ns; int has_relay_offset; /* Relay: REALTIME - BOOTTIME, exact */
    int64_t relay_observed_pid; int has_relay_pid;

    tm_trace_stats stats;
} tm_profile;

void tm_profile_init(tm_profile *p, tm_mem *mem, tm_arena *arena);
void tm_profile_release(tm_profile *p);

/* Each returns the index of the equal existing record or of a new copy. */
tm_status tm_profile_intern_mapping(tm_profile *p, const tm_prof_mapping *m, uint32_t *out);
/* The process address of a frame: what pprof and Sentry's symbolicator map
 * back to the ELF through the mapping or image (its elf_start). Frames
 * without a mapping, or whose rel_pc is outside the mapping's part of the
 * ELF, keep their address. Inline: writers ask it for every frame. */
static inline uint64_t tm_frame_process_address(const tm_profile *p, const tm_prof_frame *f) {
    if (!f->mapping) return f->addr;
    const tm_prof_mapping *m = &p->mappings[f->mapping - 1];
    uint64_t pc;
    if (!(m->flags & TM_MAPPING_ELF_REL_PC) || f->rel_pc < m->load_bias ||
        __builtin_add_overflow(m->elf_start, f->rel_pc - m->load_bias, &pc))
        return f->addr;
    /* a rel_pc that is no address of the mapping's part of the ELF keeps start + rel_pc */
    if (m->end > m->start && (pc < m->start || pc >= m->end)) return f->addr;
    return pc;
}
tm_status tm_profile_intern_frame(tm_profile *p, const tm_prof_frame *f, uint32_t *out);
tm_status tm_profile_intern_stack(tm_profile *p, const uint32_t *frames_leaf_first, size_t n,
                                  uint32_t *out);

/* Keeps only the frames keep[i] != 0, in order, renumbering them in every
 * stack; the frame index is rebuilt. */
tm_status tm_profile_compact_frames(tm_profile *p, const uint8_t *keep);

/* Thread/process by id, created on first use. */
tm_status tm_profile_thread(tm_profile *p, int64_t tid, uint32_t *out);
tm_status tm_profile_process(tm_profile *p, int64_t pid, uint32_t *out);
void tm_profile_name_thread(tm_profile *p, uint32_t thread, tm_str name, uint32_t prio);
void tm_profile_name_process(tm_profile *p, uint32_t process, tm_str name, uint32_t prio);
/* The name a process's main thread (tid == pid) without a name of its own
 * takes from its process (kernel threads and single-threaded processes are
 * often described only as processes); empty otherwise. */
tm_str tm_profile_main_thread_process_name(const tm_profile *p, const tm_prof_thread *t);

static inline tm_status tm_profile_add_sample(tm_profile *p, int64_t ts, uint32_t stack,
                                              uint32_t thread) {
    if (TM_UNLIKELY(p->n_samples == p->cap_samples))
        TM_TRY(tm_vec_grow(p->mem, (void **)&p->samples, &p->cap_samples, sizeof *p->samples,
                           p->n_samples + 1));
    tm_prof_sample *s = &p->samples[p->n_samples++];
    s->ts = ts;
    s->stack = stack;
    s->thread = thread;
    return TM_OK;
}

static inline uint64_t tm_profile_weight(const tm_profile *p, size_t sample) {
    return p->weights ? p->weights[sample] : 1;
}

/* Adds a change of a (process thread, stack, heap) to its heap sample:
 * allocations (count, size: both >= 0) and frees (both <= 0), either of
 * them zeros; heaps are numbered 0, 1, ... in order of appearance
 * (heap_index names a new one). */
tm_status tm_profile_add_heap(tm_profile *p, int64_t ts, uint32_t stack, uint32_t thread, uint32_t heap_index,
                              tm_str heap, const int64_t alloc[2], const int64_t freed[2]);

/* The profile an exporter reads for value v (TM_VALUE_DEFAULT resolved:
 * CPU samples when there are any, else off-CPU ones, else inuse_space):
 * *view is p itself for CPU samples, else a copy of p whose samples are,
 * untimed and weighted: the heap samples by that value (negative totals
 * count 0); the off-CPU samples by their blocked ns (TM_VALUE_OFF_CPU); or
 * both, the CPU samples weighing on_cpu_period_ns each (TM_VALUE_WALL).
 * Release with tm_profile_value_view_release. TM_ERR_INVALID_ARG when the
 * profile has no samples of that kind (or, for wall, no known period). */
tm_status tm_profile_value_view(const tm_profile *p, tm_value v, tm_profile *view, tm_value *resolved,
                                tm_error *err);
void tm_profile_value_view_release(const tm_profile *p, tm_profile *view);
/* For a diff of base against now by value v: TM_ERR_INVALID_ARG when v is
 * TM_VALUE_DEFAULT and the two resolve it differently (a heap profile's
 * bytes against a CPU profile's samples), which no diff can compare. */
tm_status tm_profile_diff_value(const tm_profile *base, const tm_profile *now, tm_value v, tm_error *err);
/* The highest resident set size the memory readings show (the high-water
 * mark where given); 0: none. */
uint64_t tm_profile_peak_rss(const tm_profile *p);

/* The heap value v of a heap sample. */
int64_t tm_heap_value(const tm_prof_heap_sample *h, tm_value v);

/* Sets every thread's weight from the samples (the decoders' last step). */
void tm_profile_count_threads(tm_profile *p);

/* Stable sort of samples by ts (a no-op when already sorted). When it reads
 * every sample's thread on the way (a chunk's threads merged), it also sets
 * the threads' weights, which tm_profile_count_threads then keeps: call it
 * once the samples are final. */
tm_status tm_profile_sort_samples(tm_profile *p);

/* Unix time in ns of a trace time; returns 0 when unknown. */
int tm_profile_realtime(const tm_profile *p, int64_t ts, int64_t *out);

/* Java mapping test shared with Relay: dalvik-jit-code-cache, .oat, .odex,
 * .vdex, .jar, .dex. */
int tm_path_is_java(tm_str path);

/* The model of a parsed trace (defined by trace.c). */
const tm_profile *tm_trace_profile(const tm_trace *t);
/* What an exporter returns: st, except that an out-of-memory failure caused
 * by the trace's result budget (max_result_bytes) becomes the TM_ERR_LIMIT
 * it really is. In trace.c. */
tm_status tm_trace_budget_status(const tm_trace *t, tm_status st, tm_error *err);

/* The frames of a stack, leaf first (NULL for an empty stack: a profile
 * whose stacks are all empty has no frame_ids array to point into). */
static inline const uint32_t *tm_profile_stack_frames(const tm_profile *p, const tm_prof_stack *s) {
    return s->len ? p->frame_ids + s->off : NULL;
}

#endif
