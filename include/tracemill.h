/*
 * tracemill.h — the public header of libtracemill: version, status and
 * errors, allocator, options and limits, tm_trace, sinks and every writer.
 *
 * tracemill decodes CPU profiles recorded as Perfetto traces (.pftrace) into
 * a deduplicated profile model and writes them out as Sentry Sample v2
 * profile-chunk JSON, Sentry Sample v1 transaction profiles, pprof, folded
 * stacks, speedscope JSON, flame graph SVGs (plain and differential) and a
 * data-quality report. Sample v2 chunks, Sample v1 profiles and folded
 * stacks are read too, so every exporter also works on profiles that are
 * already in those formats.
 *
 * Two more headers sit beside this one: tracemill_sql.h (tm_db_*: SQL over
 * a trace, defined in libtracemill, it hands out a sqlite3 connection) and
 * tracemill_record.h (tm_recorder_*: the sampling profiler, defined only in
 * libtracemill_record). Everything declared here is defined in libtracemill.
 *
 * Introduction: the three-call happy path
 *
 *     tm_trace *t = NULL;
 *     tm_error err;
 *     if (tm_trace_parse(buf, len, NULL, &t, &err) != TM_OK) {
 *         fprintf(stderr, "%s at byte %llu: %s\n", tm_status_str(err.code),
 *                 (unsigned long long)err.offset, err.message);
 *     } else {
 *         tm_sink out = tm_sink_file(stdout);
 *         tm_write_sample_v2(t, NULL, &out, &err);
 *     }
 *     tm_trace_free(t);          // NULL is a no-op
 *
 * Conventions:
 *  - Every fallible call returns a tm_status; TM_OK is 0. An optional
 *    tm_error out-param (always last) carries the code, the byte offset in
 *    the input where the problem was found, Relay's name for the rejection
 *    where one applies, and a message.
 *  - Option structs are zero-initialisable: a zero field means "default".
 *  - A handle is made by tm_<object>_new (tm_db_new, tm_recorder_new,
 *    tm_chunk_meta_new) or, decoded from bytes, by tm_trace_parse, and
 *    released by tm_<object>_free, for which NULL is a no-op.
 *  - Strings handed out by the library are views into the caller's input
 *    buffer (or into memory the tm_trace owns): the input buffer must
 *    outlive the tm_trace.
 *
 * ABI (how the structs grow; docs/library.md has the detail):
 *  - Every struct a caller allocates (options, limits, tm_alloc, tm_sink,
 *    tm_error, the stats and info structs, tracemill_record.h's too) ends in
 *    uint64_t reserved_[N]. Within a major version (libtracemill.so.0) a
 *    struct never changes size and its fields never move: a new field takes
 *    the front of reserved_, which shrinks by as much, and an input field
 *    means "as before" when zero.
 *  - Structs passed in: reserved_ must be zero. Initialise them with = {0},
 *    designated initialisers ({.write = f, .ctx = c}, which -Wextra accepts
 *    where a positional {f, c} now warns) or memset, never field by field
 *    on an uninitialised struct. A library that finds reserved_ not zero
 *    fails the call with TM_ERR_INVALID_ARG and a message naming the struct:
 *    the program was built against a newer header and set a field this
 *    library does not have, which is never silently ignored.
 *  - Structs the library fills (tm_error, tm_thread_info, tm_sample_info,
 *    tm_limits_preset's, tm_symbolize_stats, tm_recorder_stats, and the
 *    tm_trace_stats it holds) are zeroed whole first, so a field a newer
 *    header declares reads 0 from an older library.
 *
 * Threading (the whole rule; tracemill_sql.h and tracemill_record.h give
 * theirs):
 *  - There is no global state: any function may run on several threads at
 *    once on different objects.
 *  - A tm_trace is immutable after tm_trace_parse. Any number of threads may
 *    call the tm_trace_* readers and the writers (tm_write_*) on the same
 *    trace at once, each with its own sink and tm_error. Writers allocate
 *    their working memory from the trace's allocator and count it against
 *    the trace's max_result_bytes: writers running at once share that
 *    budget (it is counted atomically), so one of them may fail with
 *    TM_ERR_LIMIT where it alone would fit. Once a writer has been refused
 *    by the budget, a later out-of-memory of any writer on that trace is
 *    reported as TM_ERR_LIMIT too.
 *  - tm_trace_free must not run beside any other call on that trace.
 *  - The tm_alloc functions are called from every thread that parses or
 *    writes with them: an allocator shared by threads must be thread-safe.
 *
 * Memory (the allocator promise, exactly): tm_options.alloc (NULL: the C
 * library's malloc) receives every allocation of the decode, of the tm_trace
 * and of the writers' working memory, zlib's inflation included. Four
 * libraries allocate with the C library's malloc instead, whatever
 * tm_options.alloc says: libzstd (the decompression context of a zstd
 * input), libdeflate (the gzip compressor of tm_write_pprof), jansson (the
 * metadata JSON of tm_write_sample_v2/v1, their check_meta functions and
 * tm_chunk_meta) and SQLite (tm_db, see tracemill_sql.h). All of them are
 * freed before the call returns, except SQLite's, which a tm_db holds until
 * tm_db_free, and a tm_chunk_meta's, held until tm_chunk_meta_free.
 */
#ifndef TRACEMILL_H
#define TRACEMILL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define TM_API __attribute__((visibility("default")))
#else
#define TM_API
#endif

/* ==== Version ========================================================== */

/* The version of this header; tm_version_number() is the library's, which a
 * program linked against libtracemill.so.0 may find newer than the header it
 * was built with (same major version: the ABI is the same). The CMake
 * project version is read from these three lines. */
#define TM_VERSION_MAJOR 0
#define TM_VERSION_MINOR 1
#define TM_VERSION_PATCH 0
#define TM_VERSION_NUMBER (TM_VERSION_MAJOR * 10000 + TM_VERSION_MINOR * 100 + TM_VERSION_PATCH)
#define TM_VERSION_STR_(x) #x
#define TM_VERSION_STR(x) TM_VERSION_STR_(x)
#define TM_VERSION_STRING \
    TM_VERSION_STR(TM_VERSION_MAJOR) "." TM_VERSION_STR(TM_VERSION_MINOR) "." TM_VERSION_STR(TM_VERSION_PATCH)

/* The library's TM_VERSION_NUMBER and TM_VERSION_STRING (a static string). */
TM_API unsigned tm_version_number(void);
TM_API const char *tm_version_string(void);

/* ==== Status and errors ================================================ */

/* Values are pinned: never renumber. */
typedef enum tm_status {
    TM_OK = 0,
    TM_ERR_NOMEM = 1,       /* an allocation failed */
    TM_ERR_TRUNCATED = 2,   /* input ends inside a field or message */
    TM_ERR_MALFORMED = 3,   /* input is not what the format allows */
    TM_ERR_LIMIT = 4,       /* a configured limit (tm_limits) was exceeded */
    TM_ERR_UNSUPPORTED = 5, /* valid input that tracemill does not handle */
    TM_ERR_IO = 6,          /* reading or writing failed */
    TM_ERR_INVALID_ARG = 7, /* the caller passed something unusable */
    TM_ERR_REJECTED = 8,    /* the profile fails Sample v2 validation */
    TM_ERR_EMPTY = 9        /* the input holds no bytes: nothing to decode */
} tm_status;

typedef struct tm_error {
    tm_status code;
    uint64_t offset;     /* byte offset in the input the error refers to */
    const char *reason;  /* Relay's ProfileError name (e.g. "NotEnoughSamples"),
                            or NULL; a static string */
    char message[200];   /* human-readable, NUL-terminated */
    uint64_t reserved_[4]; /* must be zero; future fields take this space (see "ABI") */
} tm_error;

/* Static name of a status, e.g. "TM_ERR_TRUNCATED". Never NULL. */
TM_API const char *tm_status_str(tm_status st);

/* ==== Memory =========================================================== */

/* Pluggable allocator (tm_options.alloc): what goes through it and what
 * does not is the "Memory" paragraph at the top. realloc receives the old
 * size so that arena-style allocators can implement it; all three functions
 * must be set, or the C library's allocator is used. */
typedef struct tm_alloc {
    void *(*malloc_fn)(void *ctx, size_t size);
    void *(*realloc_fn)(void *ctx, void *ptr, size_t old_size, size_t new_size);
    void (*free_fn)(void *ctx, void *ptr, size_t size);
    void *ctx;
    uint64_t reserved_[4]; /* must be zero; future fields take this space (see "ABI") */
} tm_alloc;

/* ==== Options and limits =============================================== */

/* Every ceiling the decoder enforces. A zero field takes the preset's value.
 * Breaching one fails the parse (max_result_bytes: or a writer) with
 * TM_ERR_LIMIT naming the limit; max_chunk_duration_ns alone is not the
 * decoder's but tm_write_sample_v2's, as Relay checks it on a chunk. */
typedef struct tm_limits {
    uint64_t max_samples;         /* samples in one trace */
    uint64_t max_stack_depth;     /* frames in one callstack */
    uint64_t max_sequences;       /* distinct trusted_packet_sequence_ids */
    uint64_t max_packet_bytes;    /* size of one TracePacket */
    uint64_t max_unique_frames;   /* distinct frames in the profile */
    uint64_t max_path_segments;   /* path_string_ids in one mapping */
    uint64_t max_inflated_bytes;  /* one compressed_packets payload, inflated */
    uint64_t max_interned_entries;/* interned entries on one sequence */
    uint64_t max_chunk_duration_ns; /* last - first sample written by tm_write_sample_v2, which rejects
                                       more (TM_ERR_REJECTED, "DurationIsTooLong"); UINT64_MAX = none */
    uint64_t max_work_bytes;      /* memory of the decode's working tables (per-sequence
                                     interning, caches, scratch), freed when it ends */
    uint64_t max_result_bytes;    /* memory a tm_trace holds (the profile model, inflated
                                     payloads), plus what exporters allocate from it */
    uint64_t max_input_bytes;     /* size of the input as given (compressed or not); the
                                     CLI stops reading a file, pipe or device past it */
    uint64_t reserved_[20]; /* must be zero; future fields take this space (see "ABI") */
} tm_limits;

typedef enum tm_limit_preset {
    TM_LIMITS_GENEROUS = 0, /* the CLI's: a 10 GB trace with 1e8 samples converts */
    TM_LIMITS_RELAY = 1     /* Relay's hardened converter (server, --compat relay) */
} tm_limit_preset;

/* Fills *out with the values of a preset (an unknown one: the generous
 * preset's). out NULL: nothing. */
TM_API void tm_limits_preset(tm_limit_preset preset, tm_limits *out);

typedef enum tm_mode {
    TM_MODE_DEFAULT = 0, /* Trace Processor semantics, exact timestamps */
    TM_MODE_RELAY = 1    /* byte-compatible with Sentry Relay's converter */
} tm_mode;

/* What tm_trace_parse reads. */
typedef enum tm_input_format {
    TM_INPUT_AUTO = 0,      /* detected from the first bytes (tm_input_detect) */
    TM_INPUT_PERFETTO = 1,  /* Perfetto protobuf trace (.pftrace) */
    TM_INPUT_SAMPLE_V2 = 2, /* Sentry Sample v2 profile chunk JSON */
    TM_INPUT_FOLDED = 3,    /* folded stacks: "root;...;leaf COUNT" lines */
    TM_INPUT_SAMPLE_V1 = 4  /* Sentry Sample v1 transaction profile JSON (sentry-python) */
} tm_input_format;

/* The format of buf by its first bytes (after a UTF-8 byte order mark):
 * '{' (after blanks) is Sentry JSON: Sample v1 when its top-level "version"
 * is "1" or, before any version, the first of profile.samples has an
 * elapsed_since_start_ns; Sample v2 otherwise. A first line of text ending in a
 * blank and something meant as a count ("3", but also "3.5" or "-3", which
 * the folded reader then rejects by line) is folded stacks, anything else is
 * Perfetto (whose first byte, 0x0A, is also '\n'). Never TM_INPUT_AUTO.
 * Call it on decompressed bytes: tm_trace_parse does. */
TM_API tm_input_format tm_input_detect(const void *buf, size_t len);

/* "perfetto", "sample-v2", "folded", "sample-v1" (NULL for an unknown value). */
TM_API const char *tm_input_format_name(tm_input_format f);

typedef struct tm_options {
    tm_mode mode;
    tm_limit_preset preset; /* TM_MODE_RELAY forces TM_LIMITS_RELAY */
    tm_limits limits;       /* non-zero fields override the preset */
    const tm_alloc *alloc;  /* NULL: the C library's malloc */
    tm_input_format input;  /* TM_INPUT_AUTO: detect; TM_MODE_RELAY needs Perfetto */
    int strict;             /* a Perfetto trace cut off inside a packet is rejected (TM_ERR_TRUNCATED)
                               instead of read up to that packet (always in TM_MODE_RELAY) */
    int no_source_lines;    /* 0: a frame with a source file or line (from symbols) is named
                               "function (file:line)" in folded stacks, flame graphs and
                               tm_trace_frame_label; 1: by its function alone, so that its lines
                               merge (pprof and speedscope carry lines in fields of their own) */
    uint64_t reserved_[28]; /* must be zero; future fields take this space (see "ABI") */
} tm_options;

/* ==== Traces =========================================================== */

/* A decoded trace: the profile model plus data-quality counters.
 * Immutable after tm_trace_parse; may be read from any thread. */
typedef struct tm_trace tm_trace;

/* Decodes a Perfetto trace (or a Sample v2 chunk, a Sample v1 profile or
 * folded stacks, see tm_options.input) held in buf[0..len), which may be
 * compressed whole with gzip or zstd (not in TM_MODE_RELAY). opts may be NULL.
 * On success *out owns the result (free it with tm_trace_free); on failure
 * *out is NULL and err (if not NULL) says why and where. An empty buffer
 * fails with TM_ERR_EMPTY, one longer than max_input_bytes with
 * TM_ERR_LIMIT. The buffer must outlive the trace. */
TM_API tm_status tm_trace_parse(const void *buf, size_t len, const tm_options *opts,
                                tm_trace **out, tm_error *err);

/* Releases everything the trace owns. NULL is a no-op. */
TM_API void tm_trace_free(tm_trace *t);

/* Data-quality counters of one decode. Nothing is dropped without a count. */
typedef struct tm_trace_stats {
    uint64_t bytes;                   /* input size */
    uint64_t packets;                 /* TracePackets read, inner ones included */
    uint64_t compressed_packets;      /* compressed_packets wrappers inflated */
    uint64_t packets_unsupported;     /* e.g. zstd_compressed_packets, nested compression */
    uint64_t packets_skipped_incremental; /* SEQ_NEEDS_INCREMENTAL_STATE while state invalid */
    uint64_t interned_data_skipped;   /* interned_data while state invalid */
    uint64_t sequences;
    uint64_t incremental_resets;      /* SEQ_INCREMENTAL_STATE_CLEARED seen */
    uint64_t data_losses;             /* previous_packet_dropped on a seen sequence */
    uint64_t sequences_with_data_loss;
    uint64_t clock_snapshots;
    uint64_t perf_samples;            /* PerfSample packets with a callstack */
    uint64_t streaming_samples;       /* StreamingProfilePacket entries */
    uint64_t stack_samples;           /* StackSample packets with a callstack */
    uint64_t stack_samples_without_callstack; /* StackSample with no callstack (dropped) */
    uint64_t samples_kept;
    uint64_t dropped_unresolved;      /* callstack/frame/mapping/name iid missing */
    uint64_t dropped_stale_interning; /* skipped: incremental state invalid after loss */
    uint64_t dropped_never_cleared;   /* skipped: sequence never cleared its state */
    uint64_t dropped_missing_clock;   /* no clock path to trace time */
    uint64_t dropped_bad_timestamp;   /* negative / overflowing sample time */
    uint64_t dropped_malformed_streaming; /* fewer deltas than callstacks */
    uint64_t perf_samples_skipped;    /* PerfSample.sample_skipped_reason set */
    uint64_t perf_samples_without_callstack;
    uint64_t perf_records_lost;       /* sum of PerfSample.kernel_records_lost */
    uint64_t streaming_without_reference_time; /* timed from packet timestamps */
    uint64_t samples_without_thread;  /* samples with no thread: a StreamingProfilePacket
                                         on a sequence without one, a StackSample with
                                         neither tid nor pid */
    uint64_t threads;
    uint64_t threads_without_name;
    uint64_t frames;
    uint64_t stacks;
    uint64_t mappings;
    uint64_t mappings_without_build_id;
    int64_t first_sample_ns;          /* trace clock; 0 when no samples */
    int64_t last_sample_ns;
    uint32_t trace_clock_id;          /* Perfetto builtin clock of trace time */
    int has_realtime;                 /* a clock path to REALTIME exists */
    /* The producer's own loss accounting: the last TraceStats packet, summed
     * over its buffers (Perfetto's tracing service and tracemill record
     * write one at the end). Not read in TM_MODE_RELAY. */
    uint64_t trace_stats_packets;
    uint64_t buffer_chunks_overwritten; /* RING_BUFFER: the oldest data gave way */
    uint64_t buffer_chunks_discarded;   /* DISCARD: the newest data was refused */
    uint64_t buffer_bytes_overwritten;
    uint64_t writer_packet_loss;        /* packets writers could not hand over */
    uint64_t clock_readings_ignored;    /* snapshot clocks not used: reserved ids (>= 128),
                                           past TM_MAX_CLOCKS, or value * multiplier past int64 */
    uint64_t oneof_members_ignored;     /* a packet set two members of TracePacket's `oneof data`:
                                           the last one counts, each earlier one is counted here */
    uint64_t dropped_without_sequence;  /* samples in packets without trusted_packet_sequence_id:
                                           nothing interned can be resolved for them */
    uint64_t bytes_decompressed;      /* a gzip or zstd input: its size decompressed (the
                                         offsets of decode errors count these bytes); else 0 */
    uint64_t service_chunks_discarded; /* TraceStats.chunks_discarded of the last TraceStats: the
                                          tracing service's, across all its producers and
                                          sessions; not this trace's loss */
    int truncated;                      /* the trace is cut off: its last packet runs past the end
                                           (not with tm_options.strict); what came before was read */
    uint64_t truncated_at;              /* where that packet starts */
    /* Memory profiles (heapprofd's ProfilePacket). */
    uint64_t heap_profile_packets;
    uint64_t heap_dumps;                /* process heap dumps (continued packets counted once) */
    uint64_t heap_dumps_with_loss;      /* dumps the producer flagged: disconnected, buffer overran
                                           or corrupted, rejected, guardrail hit, client error */
    uint64_t heap_missing_packets;      /* gaps in a sequence's ProfilePacket.index */
    uint64_t heap_malformed;            /* totals that shrank between dumps: dropped */
    uint64_t heap_unfinished_dumps;     /* the trace ended inside a dump (its samples were dropped) */
    uint64_t heap_samples_unresolved;   /* dump samples whose callstack could not be resolved */
    uint64_t heap_alloc_bytes;          /* allocated over the dumps (alloc_space), all processes */
    uint64_t heap_inuse_bytes;          /* still in use at the last dumps (inuse_space) */
    uint64_t perf_samples_truncated;    /* PerfSamples kept whose stack the producer cut at its depth limit
                                           (unwind_error MAX_FRAMES_EXCEEDED) */
    /* heapprofd's streaming mode (StreamingAllocation, StreamingFree): entries
     * without a callstack, so no profile sample or SQL row comes of them
     * (Trace Processor does not import them either); counted here. */
    uint64_t heap_streaming_allocations;
    uint64_t heap_streaming_alloc_bytes; /* the bytes they stand for (sample_size) */
    uint64_t heap_streaming_frees;
    uint64_t heap_streaming_malformed;  /* packets whose repeated fields disagree in length */
    uint64_t off_cpu_samples;           /* off-CPU samples kept (PerfSamples of an off-CPU timebase, apart
                                           from perf_samples and samples_kept) */
    uint64_t off_cpu_ns;                /* the time off the CPU they weigh, ns */
    uint64_t perf_samples_counted;      /* PerfSamples kept whose CPU time their timebase counts (task-clock
                                           timebase_count: the difference to the thread's previous sample) */
    uint64_t perf_counted_cpu_ns;       /* that CPU time, summed */
    uint64_t perf_timebase_hz;          /* the sampling frequency a PerfSample producer asked for (its
                                           timebase's frequency; the highest given); 0: none given */
    uint64_t off_cpu_preempted_samples; /* off-CPU samples of a thread preempted while runnable (their stack's
                                           leaf frame is "[preempted]"; the others', "[blocked]") */
    uint64_t off_cpu_preempted_ns;      /* the part of off_cpu_ns they weigh */
    uint64_t reserved_[59]; /* must be zero; future fields take this space (see "ABI") */
} tm_trace_stats;

/* Counters of the decode. Never NULL for a non-NULL trace; NULL for NULL. */
TM_API const tm_trace_stats *tm_trace_get_stats(const tm_trace *t);

/* The format t was read as (detected, or named in tm_options.input); the
 * packet, sequence and clock counters of tm_trace_stats are Perfetto's and
 * stay 0 for the others. TM_INPUT_AUTO for NULL. */
TM_API tm_input_format tm_trace_input_format(const tm_trace *t);

/* One thread of the profile. name is a view (not NUL-terminated). */
typedef struct tm_thread_info {
    int64_t tid;
    int64_t pid;          /* 0: unknown */
    const char *name;     /* NULL when the trace names no thread */
    size_t name_len;
    uint64_t samples;     /* samples of this thread (folded input: their weight) */
    uint64_t reserved_[3]; /* must be zero; future fields take this space (see "ABI") */
} tm_thread_info;

/* Threads in first-seen order; i < tm_trace_thread_count(t). */
TM_API size_t tm_trace_thread_count(const tm_trace *t);
TM_API tm_status tm_trace_thread(const tm_trace *t, size_t i, tm_thread_info *out);

/* One sample of the profile. Samples are in time order (folded input: in
 * line order, every ts 0). */
typedef struct tm_sample_info {
    int64_t ts;       /* trace time, ns */
    uint64_t weight;  /* 1; folded input: the line's count */
    size_t thread;    /* index for tm_trace_thread */
    size_t stack;     /* index for tm_trace_stack */
    uint64_t reserved_[4]; /* must be zero; future fields take this space (see "ABI") */
} tm_sample_info;

/* Samples; i < tm_trace_sample_count(t). */
TM_API size_t tm_trace_sample_count(const tm_trace *t);
TM_API tm_status tm_trace_sample(const tm_trace *t, size_t i, tm_sample_info *out);

/* Distinct stacks; i < tm_trace_stack_count(t). *frames (owned by the
 * trace; NULL for an empty stack) holds *n frame indexes, leaf first. */
TM_API size_t tm_trace_stack_count(const tm_trace *t);
TM_API tm_status tm_trace_stack(const tm_trace *t, size_t i, const uint32_t **frames, size_t *n);

/* Distinct frames; i < tm_trace_frame_count(t). tm_trace_frame_label
 * writes the frame's name as the text formats do (see "How frames are
 * named" below) into buf[0..cap), NUL-terminated and cut short when it does
 * not fit (cap 0 writes nothing), and its full length to *len. */
TM_API size_t tm_trace_frame_count(const tm_trace *t);
TM_API tm_status tm_trace_frame_label(const tm_trace *t, size_t i, char *buf, size_t cap, size_t *len);
/* Whether frame i is the app's code by Sentry's in_app rule, as the Sample
 * v2 and v1 writers decide it without prefixes (see tm_sample_v2_options):
 * 1 or 0, or -1 when nothing says (no mapping path and no Java class, or i
 * out of range). */
TM_API int tm_trace_frame_in_app(const tm_trace *t, size_t i);

/* ==== Output =========================================================== */

/* Where writers put bytes. write returns 0 on success, non-zero on failure
 * (the writer then fails with TM_ERR_IO). */
typedef struct tm_sink {
    int (*write)(void *ctx, const void *data, size_t len);
    void *ctx;
    /* Optional (NULL: write only). A sink that keeps the output in its own
     * memory can lend that memory, so that the text writers (every one but
     * pprof) format in place instead of buffering and copying through
     * write. lend first takes the `used` bytes the writer put at the start
     * of the last window it returned as the next output; then, when
     * min > 0, it sets *window and *cap to room at the output's end of at
     * least min bytes (a window of tens of KiB or more saves calls; min 0
     * leaves them: the writer holds no window). Returns 0, or non-zero on
     * failure (the writer then fails with TM_ERR_IO). Writers that do not
     * use it, and writes between windows, still go through write. */
    union {
        int (*lend)(void *ctx, size_t used, size_t min, void **window, size_t *cap);
        uint64_t lend_slot_; /* the slot's 8 bytes where a pointer has 4 */
    };
    uint64_t reserved_[5]; /* must be zero; future fields take this space (see "ABI") */
} tm_sink;

/* A sink over a stdio stream (not closed by the library). Its write is
 * fwrite's: what the stream buffers is not written yet, so a writer may
 * return TM_OK and the last bytes fail later (a full disk): check the
 * caller's fflush or fclose too. */
TM_API tm_sink tm_sink_file(FILE *f);

/* Chunk metadata read once, for a program that reads its fields and also
 * writes the chunk with it (tm_sample_v2_options.meta), as tracemill serve
 * does: the JSON is parsed once instead of twice. Immutable after
 * tm_chunk_meta_new: any number of threads may read it and write with it. */
typedef struct tm_chunk_meta tm_chunk_meta;

/* Reads the chunk metadata JSON in json[0..len) (the buffer may go once it
 * returns). *out owns it (free it with tm_chunk_meta_free). Only a NULL out
 * (TM_ERR_INVALID_ARG) and memory (TM_ERR_NOMEM) fail the call, *out is
 * NULL then: metadata that is not JSON (a NULL json included), not an
 * object, not valid or larger than tm_write_sample_v2 takes is still read,
 * its fields as far as they are there, and tm_chunk_meta_check says what is
 * wrong with it. */
TM_API tm_status tm_chunk_meta_new(const char *json, size_t len, tm_chunk_meta **out, tm_error *err);

/* The string member key of the metadata's top-level object, NUL-terminated
 * and owned by m, with its length in *len (if len is not NULL): a string
 * may hold "\u0000", so compare that many bytes where it matters. NULL, and
 * *len 0, when m is NULL, the metadata is not a JSON object or key is
 * missing or not a string. */
TM_API const char *tm_chunk_meta_string(const tm_chunk_meta *m, const char *key, size_t *len);

/* Validates the metadata as tm_sample_v2_check_meta does the same bytes:
 * the same status, reason, offset and message (m NULL: TM_ERR_INVALID_ARG). */
TM_API tm_status tm_chunk_meta_check(const tm_chunk_meta *m, tm_error *err);

/* Releases the metadata. NULL is a no-op. */
TM_API void tm_chunk_meta_free(tm_chunk_meta *m);

/* Options of the Sample v2 writer. Zero-initialisable. */
typedef struct tm_sample_v2_options {
    /* Chunk metadata JSON (the [JSON] part of a profile_chunk item), merged
     * as Relay does; NULL/0 writes version, platform, profile, debug_meta. */
    const char *meta_json;
    size_t meta_len;
    /* Sample v2's "drop threads with at most one non-empty sample" step. */
    int remove_single_samples;
    /* Frames' in_app (TM_MODE_DEFAULT only: Relay's converter never writes
     * it). A frame whose mapping path or Java class starts with one of
     * in_app_prefixes is in_app, with one of not_in_app_prefixes it is not:
     * the longest prefix wins, in_app on a tie; a leading '/' is ignored on
     * both sides. Other frames by the default rule: not in_app for kernel
     * frames, Java platform classes (java., android., androidx., kotlin.,
     * com.android., com.google.android., dalvik., ...) and, for frames
     * without a class, pseudo mappings ("[vdso]") and system libraries
     * (/lib, /lib64, /usr/lib, /usr/libexec, /system, /apex, /vendor,
     * /product, ...); in_app for other classes and mappings (the program,
     * the app's /data/app files); no in_app without a mapping path or class. */
    const char *const *in_app_prefixes;
    size_t n_in_app_prefixes;
    const char *const *not_in_app_prefixes;
    size_t n_not_in_app_prefixes;
    /* Optional: the metadata read by tm_chunk_meta_new, in place of
     * meta_json and meta_len (setting both is TM_ERR_INVALID_ARG), with the
     * same result. The writer only reads it. */
    union {
        const tm_chunk_meta *meta;
        uint64_t meta_slot_; /* the slot's 8 bytes where a pointer has 4 */
    };
    uint64_t reserved_[24]; /* must be zero; future fields take this space (see "ABI") */
} tm_sample_v2_options;

/* Writes the trace as one Sample v2 profile chunk. In TM_MODE_RELAY the
 * bytes are those Relay's converter produces; failures carry Relay's
 * ProfileError name in err->reason. opts may be NULL. */
TM_API tm_status tm_write_sample_v2(const tm_trace *t, const tm_sample_v2_options *opts,
                                    const tm_sink *out, tm_error *err);

/* Validates chunk metadata as tm_write_sample_v2 would (Relay reads it
 * before the trace, so its errors come first): TM_OK, or TM_ERR_REJECTED
 * with reason "InvalidJson". */
TM_API tm_status tm_sample_v2_check_meta(const char *json, size_t len, tm_error *err);

/* Options of the Sample v1 writer. Zero-initialisable. */
typedef struct tm_sample_v1_options {
    /* Profile metadata JSON: an object whose event_id, platform, release,
     * environment, dist, device, os, runtime and transaction (an object
     * {name, id, trace_id, active_thread_id}, or "transactions": [one])
     * replace the defaults; other keys are ignored. Bad metadata is
     * TM_ERR_REJECTED with reason "InvalidJson" (or
     * "InvalidTransactionMetadata"). NULL/0: defaults only. */
    const char *meta_json;
    size_t meta_len;
    /* 1: keep only the samples of the first 30 s (sentry-python stops its
     * profiler there) instead of failing with DurationIsTooLong. */
    int truncate;
    /* Frames' in_app, as tm_sample_v2_options decides it (TM_MODE_DEFAULT
     * only): prefixes of mapping paths and Java classes first, then the
     * default rule. */
    const char *const *in_app_prefixes;
    size_t n_in_app_prefixes;
    const char *const *not_in_app_prefixes;
    size_t n_not_in_app_prefixes;
    uint64_t reserved_[25]; /* must be zero; future fields take this space (see "ABI") */
} tm_sample_v1_options;

/* Writes the trace as one Sentry Sample v1 (transaction) profile, what
 * sentry-python's profiler sends: timestamp and event_id, one transaction,
 * samples with elapsed_since_start_ns, stacks leaf first, frames and
 * thread_metadata. Relay's v1 normalisation is applied first: idle samples
 * at the edges of each thread and single-sample threads are dropped; no
 * sample left is NotEnoughSamples, more than 30 s is DurationIsTooLong
 * (err->reason). Ids not given in the metadata are derived from the
 * samples, so equal input gives equal bytes. opts may be NULL. */
TM_API tm_status tm_write_sample_v1(const tm_trace *t, const tm_sample_v1_options *opts,
                                    const tm_sink *out, tm_error *err);

/* Validates Sample v1 metadata as tm_write_sample_v1 would: TM_OK, or
 * TM_ERR_REJECTED with the reason it would give. */
TM_API tm_status tm_sample_v1_check_meta(const char *json, size_t len, tm_error *err);

/* Writes the data-quality report (JSON object, one line) of a trace. */
TM_API tm_status tm_write_report(const tm_trace *t, const tm_sink *out, tm_error *err);

/* ==== Other formats ===================================================== */

/* What a sample weighs. A CPU profile counts samples; a memory profile
 * (heapprofd's ProfilePacket dumps) has four values per stack, summed over
 * its dumps: objects and bytes allocated, and those still in use at the
 * last dump. Off-CPU samples (tracemill record --off-cpu) are the stacks
 * where threads left the CPU, each weighing the ns until it ran again;
 * "wall" draws both kinds in ns, a CPU sample weighing its sampling period.
 * Without them the CPU samples are the profile: tm_trace_sample and the
 * Sentry formats see only those. */
typedef enum tm_value {
    TM_VALUE_DEFAULT = 0,       /* CPU samples when the trace has any, else off_cpu, else inuse_space */
    TM_VALUE_SAMPLES = 1,       /* on-CPU samples */
    TM_VALUE_ALLOC_OBJECTS = 2,
    TM_VALUE_ALLOC_SPACE = 3,   /* bytes */
    TM_VALUE_INUSE_OBJECTS = 4,
    TM_VALUE_INUSE_SPACE = 5,   /* bytes */
    TM_VALUE_OFF_CPU = 6,       /* off-CPU samples: ns blocked (or waiting to run) */
    TM_VALUE_WALL = 7           /* on-CPU samples (ns of their period) and off-CPU ones (ns blocked) */
} tm_value;

/* "samples", "alloc_objects", ... ("default" for TM_VALUE_DEFAULT, "unknown"
 * for a value past the last). */
TM_API const char *tm_value_name(tm_value v);
/* The value a name gives; TM_ERR_INVALID_ARG for an unknown one. */
TM_API tm_status tm_value_parse(const char *name, tm_value *out, tm_error *err);

/* Which threads an exporter reads. Zero: all of them. A filter that matches
 * no thread, or only threads without samples of the value written (a
 * memory profile's are on each process's main thread, tid == pid), fails
 * with TM_ERR_INVALID_ARG. */
typedef struct tm_thread_filter {
    const char *name;  /* non-NULL: threads with exactly this name */
    int64_t tid;       /* with by_tid: only this thread id */
    int by_tid;
    uint64_t reserved_[5]; /* must be zero; future fields take this space (see "ABI") */
} tm_thread_filter;

/* How frames are named in text formats: the function (Java: Class.method);
 * without one, "0xADDR (libname)" with ADDR relative to the library when
 * its mapping is known. In folded stacks and flame graphs a frame whose
 * symbols give a source file or line is "function (file:line)" ("function
 * (file)", "function (line N)"), unless tm_options.no_source_lines; pprof
 * and speedscope name it by function and write file and line apart. */

/* The longest sampling period the writers take (an hour): past it a period
 * is a mistake, and times plus periods must stay within int64. */
#define TM_PERIOD_NS_MAX 3600000000000LL

typedef struct tm_pprof_options {
    tm_thread_filter threads;
    int64_t period_ns;  /* 0: inferred per thread from the sample timestamps; at most
                           TM_PERIOD_NS_MAX, else TM_ERR_INVALID_ARG (so is a negative one) */
    int uncompressed;   /* 1: raw profile.proto; 0: gzip (.pb.gz) */
    tm_value value;     /* a memory value writes the memory profile (all four sample
                           types, that one the default); TM_VALUE_DEFAULT: the CPU
                           profile, or the memory one (inuse_space) without CPU samples */
    uint64_t reserved_[22]; /* must be zero; future fields take this space (see "ABI") */
} tm_pprof_options;

/* Writes a pprof profile: sample types samples/count and cpu/nanoseconds,
 * one sample per profile sample with labels thread_id, thread_name, pid and
 * timestamp_ns (Unix time when known, else trace time). */
TM_API tm_status tm_write_pprof(const tm_trace *t, const tm_pprof_options *opts, const tm_sink *out,
                                tm_error *err);

typedef struct tm_folded_options {
    tm_thread_filter threads;
    int thread_prefix;  /* 1: the thread name (else "tid-N") as the root frame */
    tm_value value;     /* memory profiles: the value counted (bytes or objects) */
    uint64_t reserved_[23]; /* must be zero; future fields take this space (see "ABI") */
} tm_folded_options;

/* Writes folded stacks: "root;...;leaf COUNT" lines, aggregated, sorted. */
TM_API tm_status tm_write_folded(const tm_trace *t, const tm_folded_options *opts, const tm_sink *out,
                                 tm_error *err);

/* Writes "stack BASE_COUNT NEW_COUNT" lines (the difffolded convention) for
 * every stack of either profile. */
TM_API tm_status tm_write_folded_diff(const tm_trace *base, const tm_trace *now,
                                      const tm_folded_options *opts, const tm_sink *out, tm_error *err);

typedef struct tm_speedscope_options {
    tm_thread_filter threads;
    int64_t period_ns;  /* 0: inferred per thread, as for pprof (the same range) */
    const char *name;   /* shown by speedscope; NULL: "tracemill" */
    tm_value value;     /* memory profiles: the value weighed (bytes or objects) */
    uint64_t reserved_[21]; /* must be zero; future fields take this space (see "ABI") */
} tm_speedscope_options;

/* Writes a speedscope file: shared frames, one sampled profile per thread
 * in nanoseconds on the trace's timeline. */
TM_API tm_status tm_write_speedscope(const tm_trace *t, const tm_speedscope_options *opts,
                                     const tm_sink *out, tm_error *err);

#define TM_FLAMEGRAPH_WIDTH_MIN 100u
#define TM_FLAMEGRAPH_WIDTH_MAX 100000u

typedef struct tm_flamegraph_options {
    tm_thread_filter threads;
    const char *title;  /* NULL: "Flame Graph" (diff: "Differential Flame Graph") */
    int reverse;        /* 1: icicle graph, root at the top */
    unsigned width_px;  /* 0: 1200; else TM_FLAMEGRAPH_WIDTH_MIN..MAX (TM_ERR_INVALID_ARG otherwise) */
    double min_width_px;/* narrower frames are left out (counted in their parent); 0: 0.1 */
    tm_value value;     /* memory profiles: the value drawn (bytes or objects) */
    uint64_t reserved_[20]; /* must be zero; future fields take this space (see "ABI") */
} tm_flamegraph_options;

/* Writes a self-contained interactive SVG flame graph. */
TM_API tm_status tm_write_flamegraph(const tm_trace *t, const tm_flamegraph_options *opts,
                                     const tm_sink *out, tm_error *err);

/* Writes a differential flame graph of now against base: the shape of now,
 * each frame coloured by the change of its share of samples. */
TM_API tm_status tm_write_flamegraph_diff(const tm_trace *base, const tm_trace *now,
                                          const tm_flamegraph_options *opts, const tm_sink *out,
                                          tm_error *err);

/* ==== Symbols ========================================================== */

/* A ProGuard/R8 mapping file (the text `mapping.txt`), for the Java frames
 * of one app (package, e.g. "com.example.app") or, package NULL, of every
 * app. */
typedef struct tm_proguard_map {
    const char *package;
    const char *data;
    size_t len;
    uint64_t reserved_[5]; /* must be zero; future fields take this space (see "ABI") */
} tm_proguard_map;

/* Where tm_symbolize looks for ELF files. Zero-initialisable. */
typedef struct tm_symbolize_options {
    /* Directories searched first, in order, for each mapping's ELF file: by
     * build id (DIR/.build-id/ab/cdef....debug, then without .debug), by the
     * mapping's file name (DIR/libfoo.so) and by its whole path
     * (DIR/usr/lib/libfoo.so). */
    const char *const *symbol_dirs;
    size_t n_symbol_dirs;
    /* 1: only symbol_dirs (and debuginfod_cache when set); 0: also the
     * mapping's path on this machine, then /usr/lib/debug/.build-id
     * (Debian's -dbgsym packages). */
    int no_system_paths;
    const tm_proguard_map *proguard_maps; /* each becomes a DeobfuscationMapping packet */
    size_t n_proguard_maps;
    /* A debuginfod client's cache, searched after symbol_dirs and before the
     * system paths: DIR/<build id in hex>/debuginfo, then .../executable, as
     * debuginfod-find leaves them (nothing is ever fetched). NULL: unless
     * no_system_paths, $DEBUGINFOD_CACHE_PATH, else
     * $HOME/.cache/debuginfod_client, when it is a directory. */
    const char *debuginfod_cache;
    /* 1: function names as the ELF file spells them; 0: C++ names demangled
     * (__cxa_demangle of the C++ runtime, when the process has or can load
     * libstdc++), a PLT stub's too (_ZN3foo3barEv@plt: foo::bar()@plt). */
    int no_demangle;
    uint64_t reserved_[25]; /* must be zero; future fields take this space (see "ABI") */
} tm_symbolize_options;

/* What tm_symbolize found. A file it cannot find is counted, never an error. */
typedef struct tm_symbolize_stats {
    uint64_t mappings;               /* mappings with frames (distinct build ids, plus those without) */
    uint64_t mappings_symbolized;    /* their ELF file found, its build id matching */
    uint64_t mappings_no_build_id;   /* the trace gives them no build id */
    uint64_t mappings_not_found;     /* no file with their build id or name anywhere searched */
    uint64_t mappings_build_id_mismatch; /* files found by name, none with their build id */
    uint64_t frames;                 /* distinct (build id, rel_pc) of native frames looked up */
    uint64_t frames_symbolized;      /* given a function name */
    uint64_t frames_with_lines;      /* given a source file and line too */
    uint64_t inlined_frames;         /* inlined functions found inside them */
    uint64_t java_classes;           /* classes renamed by the ProGuard maps */
    uint64_t java_methods;           /* methods renamed by the ProGuard maps */
    uint64_t java_map_lines_skipped; /* lines of the maps that are neither a class, a member nor a comment */
    uint64_t mappings_dwarf_unreadable; /* symbolized whose DWARF libdw cannot read (debug sections compressed
                                           other than with zlib, e.g. zstd before elfutils 0.189): no files,
                                           lines or inlined frames there, the symbol table's names alone */
    uint64_t reserved_[19]; /* must be zero; future fields take this space (see "ABI") */
} tm_symbolize_stats;

/* Symbolizes a Perfetto trace held in buf[0..len) (compressed whole with
 * gzip or zstd, or not): for every mapping with a build id, finds its ELF
 * file (see tm_symbolize_options), reads its symbols and DWARF (elfutils
 * libdw) and resolves each frame's rel_pc to function, source file, line and
 * inlined functions; turns each ProGuard map into a DeobfuscationMapping.
 * Writes to out a new trace: the input (decompressed) followed by one
 * Perfetto ModuleSymbols packet per symbolized mapping and the
 * DeobfuscationMapping packets, as `traceconv symbolize` appends them, so
 * that this library and Perfetto's own tools read it symbolized. opts and
 * sopts may be NULL; stats (may be NULL) says what was found. Other input
 * formats get TM_ERR_UNSUPPORTED naming theirs, as for tm_db_new. */
TM_API tm_status tm_symbolize(const void *buf, size_t len, const tm_options *opts, const tm_symbolize_options *sopts,
                              const tm_sink *out, tm_symbolize_stats *stats, tm_error *err);

#ifdef __cplusplus
}
#endif
#endif /* TRACEMILL_H */
