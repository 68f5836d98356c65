/*
 * tracemill_record.h — the recorder's API (tm_recorder_*): a sampling
 * profiler for the calling process that writes Perfetto traces.
 *
 * Defined only in libtracemill_record, never in libtracemill: link its
 * static archive, which needs nothing of libtracemill (pkg-config
 * --cflags --libs tracemill_record, or CMake's
 * tracemill::tracemill_record_static: libtracemill_record.a, libunwind,
 * libpthread, libdl, librt). libtracemill_record.so is the LD_PRELOAD
 * library of `tracemill record` (it interposes malloc), not for linking.
 *
 * Threading: one recorder samples a process at a time. tm_recorder_flush
 * and tm_recorder_get_stats may be called from any thread while it runs;
 * tm_recorder_new, _start, _stop and _free from one thread at a time, never
 * beside another call on the same recorder.
 *
 * Memory: the recorder allocates with the C library's malloc (tm_alloc is
 * not used); nothing is allocated in its signal handler.
 */
#ifndef TRACEMILL_RECORD_H
#define TRACEMILL_RECORD_H

#include "tracemill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Recording ======================================================= */

/* A sampling profiler for the calling process that writes a Perfetto trace
 * (PerfSample callstacks, interned frames and mappings, thread names, clock
 * snapshots, TraceStats). Link libtracemill_record, or LD_PRELOAD
 * libtracemill_record.so into an unmodified program (configured by the
 * TRACEMILL_RECORD_* environment variables, see `tracemill record`).
 * One recorder samples at a time: it owns SIGPROF, and refuses to start when
 * the program already has a SIGPROF handler. */

typedef enum tm_record_clock {
    TM_RECORD_CLOCK_CPU = 0, /* per-thread CPU time: a thread is sampled while it runs; each sample
                                carries the thread's CPU time (PerfSample.timebase_count, task-clock) */
    TM_RECORD_CLOCK_WALL = 1 /* wall clock: every thread, running or not (blocked system
                                calls see EINTR, and select/poll/nanosleep are not restarted,
                                so `tracemill record` refuses it); samples carry no CPU weight */
} tm_record_clock;

typedef enum tm_record_fill {
    TM_RECORD_FILL_RING = 0,   /* a full buffer overwrites its oldest packets */
    TM_RECORD_FILL_DISCARD = 1 /* a full buffer drops new packets */
} tm_record_fill;

typedef enum tm_record_unwind {
    TM_RECORD_UNWIND_DWARF = 0, /* .eh_frame call-frame information (libunwind) */
    TM_RECORD_UNWIND_FP = 1     /* frame-pointer chain, checked against the stack bounds */
} tm_record_unwind;

/* Receives each finished chunk of a continuous recording (index from 0);
 * returns 0, or non-zero to count the chunk as failed. Called on the
 * recorder's collector thread. */
typedef int (*tm_record_chunk_fn)(void *ctx, uint32_t index, const void *data, size_t len);

/* Zero-initialisable: every zero field takes its default. */
typedef struct tm_recorder_options {
    const char *output;          /* trace path; with chunk_seconds, OUT.N.pftrace
                                    ("x.pftrace" gives x.0.pftrace, x.1.pftrace, ...) */
    uint32_t hz;                 /* samples per second per thread; 0: 101 */
    tm_record_clock clock;
    tm_record_unwind unwind;
    uint32_t max_depth;          /* frames per stack; 0: 128 */
    uint32_t buffer_kb;          /* central buffer of encoded packets; 0: 4096 */
    tm_record_fill fill;
    uint32_t file_write_period_ms; /* drain the buffer into the file this often; 0: at stop */
    uint32_t clear_period_ms;    /* incremental-state clears; 0: 10000 */
    uint32_t duration_ms;        /* stop sampling (and write) after this; 0: at stop */
    uint32_t chunk_seconds;      /* cut the recording into self-contained chunks; 0: one trace */
    tm_record_chunk_fn on_chunk; /* with chunk_seconds: chunks go here instead of files */
    void *chunk_ctx;
    int demangle;                /* C++ names demangled */
    uint32_t mem_period_ms;      /* ProcessStats from /proc/self/status this often (and at the end
                                    of every trace or chunk); 0: none */
    int name_frames;             /* 1: every frame named from its file's symbol table while recording;
                                    0: frames in files on disk with a build id are written as mapping
                                    (path, build id) and rel_pc alone, for tm_symbolize (`tracemill
                                    symbolize`, which `tracemill record` runs) to name with files and
                                    lines; JIT, kernel, vDSO and deleted-file frames are named either way */
    uint64_t reserved_[22]; /* must be zero; future fields take this space (see "ABI") */
} tm_recorder_options;

/* What a recording lost and produced so far. */
typedef struct tm_recorder_stats {
    uint64_t samples;            /* samples taken and encoded */
    uint64_t samples_lost;       /* dropped by full per-thread rings */
    uint64_t timer_overruns;     /* timer expirations merged into one signal (rate above
                                    what the kernel tick can deliver) */
    uint64_t packets_overwritten, bytes_overwritten; /* central buffer, ring policy */
    uint64_t packets_discarded, bytes_discarded;     /* central buffer, discard policy */
    uint64_t sample_packets_lost; /* of the lost packets, those holding a sample */
    uint64_t bytes_written;      /* trace bytes written (all chunks) */
    uint32_t threads;            /* threads sampled */
    uint32_t chunks;             /* chunks finished */
    uint64_t heap_samples;       /* allocations sampled (preloaded with a heap profile) */
    uint64_t heap_samples_lost;  /* sampled but not recorded: made inside the profiler, or no
                                    room in its tables */
    uint64_t heap_unwind_errors; /* recorded with only the allocating caller as their stack */
    uint64_t stacks_truncated;   /* CPU samples whose stack had more than max_depth frames: cut, and
                                    marked with a "[truncated]" root frame and unwind_error
                                    MAX_FRAMES_EXCEEDED in the trace */
    uint64_t cpu_time_ns;        /* CPU time the samples stand for (clock cpu): the sampled threads' CPU
                                    clocks from their start to their latest sample, summed */
    uint64_t reserved_[17]; /* must be zero; future fields take this space (see "ABI") */
} tm_recorder_stats;

typedef struct tm_recorder tm_recorder;

/* Checks opts and creates a recorder (nothing runs yet). */
TM_API tm_status tm_recorder_new(const tm_recorder_options *opts, tm_recorder **out, tm_error *err);
/* Starts sampling every thread of the process, present and future. */
TM_API tm_status tm_recorder_start(tm_recorder *r, tm_error *err);
/* Writes what the buffer holds to the output now. */
TM_API tm_status tm_recorder_flush(tm_recorder *r, tm_error *err);
/* Stops sampling and finishes the trace (or the last chunk). Idempotent. */
TM_API tm_status tm_recorder_stop(tm_recorder *r, tm_error *err);
TM_API void tm_recorder_get_stats(tm_recorder *r, tm_recorder_stats *out);
/* Stops if running, then releases everything. NULL is a no-op. */
TM_API void tm_recorder_free(tm_recorder *r);

#ifdef __cplusplus
}
#endif
#endif /* TRACEMILL_RECORD_H */
