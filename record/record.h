/*
 * record.h — internal interfaces of the recorder (libtracemill_record), the
 * sampling profiler that writes Perfetto traces. Its pieces:
 *
 *   symbols.c   a process's mappings (/proc/self/maps, or MMAP2 records of
 *               another process), ELF build ids and symbol tables, dladdr:
 *               turns a pc into (mapping, rel_pc, function name)
 *   writer.c    the Perfetto encoder: per-sequence interning, ClockSnapshot,
 *               ProcessTree, TrackDescriptors, PerfSample, TraceStats...
 *   sampler.c   per-thread CPU-time (or wall-clock) timers, the signal handler,
 *               per-thread sample rings, unwinding
 *   recorder.c  the collector thread, the central buffer (ring or discard),
 *               file writing, chunks, the public tm_recorder_* API
 *   upload.c    continuous-profiling chunks as Sentry envelopes over HTTP
 *   preload.c   LD_PRELOAD entry: configuration from the environment
 *   perf_unwind.c  the perf backend's DWARF unwinder (elfutils libdw) over a
 *               sample's copied user stack and registers
 *   perf_record.c  the perf backend: the tracemill-record-perf program that
 *               runs a command under perf_event_open and writes its trace
 *   heap.c      native heap profiling (libtracemill_record.so only): malloc,
 *               free and C++ new/delete interposed, Poisson-sampled
 *               allocations unwound and counted per callstack, sampled live
 *               allocations tracked by address to attribute their frees
 *
 * The recorder sits beside cli/ and server/: it uses include/tracemill.h
 * and, for protobuf encoding, the library's wire writer (src/pb_write.h).
 */
#ifndef TM_RECORD_H
#define TM_RECORD_H

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>  /* FILE */
#include <stdlib.h> /* realloc */
#include <string.h> /* strlen */
#include <sys/stat.h>
#include <sys/syscall.h> /* SYS_close_range */
#include <unistd.h>

#include "tracemill.h"
#include "tracemill_record.h"

/* A descriptor the recorder opens inside the program. The program may
 * close every descriptor it did not open (closefrom, as daemons start) and
 * open its own files on their numbers while the recorder holds one: the
 * descriptor is the recorder's only while its file is the one it opened
 * (device and inode), and only then is it written or closed. */
typedef struct tmr_own_fd {
    int fd; /* -1: none */
    dev_t dev;
    ino_t ino;
} tmr_own_fd;

/* Gives the calling thread, one the recorder started (the collector, the
 * uploader), a descriptor table of its own, empty: open(2) takes the lowest
 * free number, and in the program's table the recorder's opens (of
 * /proc/self/task and each thread's stat, at every scan) took, for
 * microseconds, a number the program's own open was to get (0, with stdin
 * closed). Empty, so that the copy keeps none of the program's files open
 * (a pipe the program closes must end for its reader). Everything the
 * thread opens afterwards is its own; what program threads open in the
 * recorder's name (a flush they ask for, the write before an exec) still
 * goes through tmr_own_open. Without close_range's CLOSE_RANGE_UNSHARE
 * (Linux 5.9), or refused (a seccomp filter), the thread keeps the
 * program's table, as before. */
static inline void tmr_own_descriptor_table(void) {
#ifdef SYS_close_range
    enum { CLOSE_RANGE_UNSHARE_FLAG = 1 << 1 }; /* CLOSE_RANGE_UNSHARE, which older headers lack */
    (void)syscall(SYS_close_range, 0u, ~0u, (unsigned)CLOSE_RANGE_UNSHARE_FLAG);
#endif
}

/* open(2) of path; 0, or -1 with errno (o->fd -1). */
static inline int tmr_own_open(tmr_own_fd *o, const char *path, int flags, mode_t mode) {
    struct stat st;
    o->fd = open(path, flags | O_CLOEXEC, mode);
    if (o->fd >= 0 && fstat(o->fd, &st) == 0) {
        o->dev = st.st_dev, o->ino = st.st_ino;
        return 0;
    }
    if (o->fd >= 0) close(o->fd); /* cannot fail on a descriptor just opened: it is ours */
    o->fd = -1;
    return -1;
}

/* Whether o->fd is still the file it opened. */
static inline int tmr_own_still(const tmr_own_fd *o) {
    struct stat st;
    return o->fd >= 0 && fstat(o->fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino;
}

/* Closes o->fd if it is still ours (else the number is the program's now:
 * left alone); close's result, 0 for one left alone. */
static inline int tmr_own_close(tmr_own_fd *o) {
    int rc = tmr_own_still(o) ? close(o->fd) : 0;
    o->fd = -1;
    return rc;
}

/* path's whole contents, NUL-terminated (malloc'd; *len without the NUL),
 * read through a descriptor of its own; NULL when it cannot be read (or
 * its descriptor was not its own to the end). */
char *tmr_read_own(const char *path, size_t *len);
/* The same as a stream to parse (fmemopen): fclose it, then free *text.
 * NULL when it cannot be read or is empty. */
FILE *tmr_fopen_own(const char *path, char **text);

/* Grows *p (an array of elem-sized items, capacity *cap) to hold need
 * items, doubling; 0, or -1 when memory runs out (*p unchanged). The
 * recorder's tables live outside any tm_trace, so they use realloc. */
static inline int tmr_grow(void **p, size_t *cap, size_t elem, size_t need) {
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need) n *= 2;
    if (n > SIZE_MAX / elem) return -1;
    void *q = realloc(*p, n * elem);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* Length of path without its ".pftrace": chunk files and the upload queue
 * are named after it (x.pftrace -> x.N.pftrace, x.queue). */
static inline size_t tmr_trace_stem(const char *path) {
    static const char ext[] = ".pftrace";
    size_t len = strlen(path), n = sizeof ext - 1;
    return len >= n && strcmp(path + len - n, ext) == 0 ? len - n : len;
}

/* ==== Symbolization (symbols.c) ======================================== */

/* One executable mapping of the process, from /proc/self/maps. */
typedef struct tmr_mapping {
    uint64_t start, end, offset; /* [start, end) and file offset */
    uint64_t load_bias;          /* ELF load bias as Perfetto's unwinder defines it: p_vaddr - p_offset
                                    of the first executable PT_LOAD (usually 0 for PIEs and libraries,
                                    0x400000 for x86-64 non-PIE executables); see symbols.c */
    const char *path;            /* "" for anonymous */
    const char *open_path;       /* the file to read: path, or /proc/PID/map_files/... for a deleted one */
    uint8_t build_id[32];        /* NT_GNU_BUILD_ID bytes */
    size_t build_id_len;         /* 0: none */
} tmr_mapping;

typedef struct tmr_symbols tmr_symbols;

/* What a tmr_symbols names (flags, or-ed). */
enum {
    TMR_SYMBOLS_DEMANGLE = 1, /* C++ names through __cxa_demangle when the process has it (dlsym) */
    TMR_SYMBOLS_NAME_ALL = 2  /* name every frame from the ELF symbol tables; without it, a frame in a
                                 file on disk with a build id gets no name (tm_symbolize names it after
                                 the run), and only the others are named: JIT code, the kernel, the
                                 vDSO, deleted files, files without a build id */
};

/* An empty table for process pid (0: this process), filled by
 * tmr_symbols_add or tmr_symbols_refresh (/proc/PID/maps). For another
 * process, pcs in no mapping never re-read its maps, and there is no dladdr
 * or dl_iterate_phdr fallback. flags: TMR_SYMBOLS_*. */
tmr_symbols *tmr_symbols_new_for(int32_t pid, int flags, tm_error *err);
/* Reads /proc/self/maps (executable mappings only) and each file's build
 * id. Returns NULL on failure (err says why). flags: TMR_SYMBOLS_*. */
tmr_symbols *tmr_symbols_new(int flags, tm_error *err);
void tmr_symbols_free(tmr_symbols *s);
/* Re-reads the maps (after dlopen, or when a pc falls in no known mapping). */
tm_status tmr_symbols_refresh(tmr_symbols *s, tm_error *err);
/* A new executable mapping [start, end) of path at file offset offset; it
 * replaces the live mappings it overlaps. */
tm_status tmr_symbols_add(tmr_symbols *s, uint64_t start, uint64_t end, uint64_t offset, const char *path,
                          tm_error *err);
/* 1 while mappings gone from the maps are kept (code a dlclose unmapped):
 * code loaded later may take their place unseen, as its pcs fall in them. */
int tmr_symbols_keeps_gone(const tmr_symbols *s);
/* No mapping is live any more (the process called exec); indices stay valid. */
void tmr_symbols_forget_live(tmr_symbols *s);
/* Adds every live mapping of src to dst (a forked child starts with its
 * parent's mappings). */
tm_status tmr_symbols_copy_live(tmr_symbols *dst, const tmr_symbols *src, tm_error *err);
/* The indices of the live mappings, sorted by address, into out[0..cap);
 * returns how many are live (may exceed cap). */
size_t tmr_symbols_live(const tmr_symbols *s, int *out, size_t cap);

/* Resolves pc (cached per pc; a pc in no mapping re-reads the maps, at
 * most every 100 ms). *mapping is an index usable with tmr_symbols_mapping, or -1
 * when pc is in no mapping; *rel_pc is the pc relative to the ELF file's
 * load address as Perfetto defines rel_pc; *name is the function name
 * (demangled if asked) or NULL when unknown or left to tm_symbolize
 * (without TMR_SYMBOLS_NAME_ALL). Names stay valid until
 * tmr_symbols_free. Not async-signal-safe: the collector calls it. */
void tmr_symbols_lookup(tmr_symbols *s, uint64_t pc, int *mapping, uint64_t *rel_pc, const char **name);
const tmr_mapping *tmr_symbols_mapping(const tmr_symbols *s, int i);

/* The kernel's half of the x86-64 address space: a pc there is a kernel frame. */
#define TMR_KERNEL_START 0xffff800000000000ull
/* The mapping kernel frames are given, as perf names it. */
#define TMR_KERNEL_MAPPING "[kernel.kallsyms]"

/* The kernel's function symbols, from /proc/kallsyms. */
typedef struct tmr_kallsyms tmr_kallsyms;
/* Reads /proc/kallsyms; NULL when it cannot be read (err says why). With
 * kptr_restrict hiding the addresses it holds no symbol. */
tmr_kallsyms *tmr_kallsyms_load(tm_error *err);
size_t tmr_kallsyms_count(const tmr_kallsyms *k);
void tmr_kallsyms_free(tmr_kallsyms *k);
/* Kernel pcs (>= TMR_KERNEL_START) of s resolve to the mapping
 * TMR_KERNEL_MAPPING (rel_pc = pc) and the names of k, which must outlive s. */
tm_status tmr_symbols_set_kernel(tmr_symbols *s, const tmr_kallsyms *k, tm_error *err);

/* ==== Perfetto encoding (writer.c) ===================================== */

/* Receives each encoded TracePacket already framed as a Trace record
 * (0x0A, varint length, packet bytes), in order. Returns 0, or non-zero to
 * fail the write (the writer then returns TM_ERR_IO). */
typedef int (*tmr_emit_fn)(void *ctx, const uint8_t *rec, size_t len);

typedef struct tmr_writer_opts {
    int32_t pid;
    const char *process_name;      /* NULL: from /proc/self/cmdline */
    uint32_t sampling_hz;          /* for TraceConfig / SystemInfo description */
    int wall_clock;                /* sampling timer kind, described in TraceConfig */
    uint32_t buffer_kb;            /* described in TraceConfig */
    int fill_discard;              /* described in TraceConfig */
    int perf_cpu_clock;            /* perf's cpu-clock event on each thread (the perf backend), described in
                                      TraceConfig; its samples' timebase is task-clock as the signal backend's */
    int32_t ppid;                  /* 0: getppid() */
    const char *cmdline;           /* cmdline_len bytes, NUL-separated arguments; NULL: /proc/self/cmdline */
    size_t cmdline_len;
    uint32_t own_seq;              /* sequence of this writer's own packets; 0: TMR_WRITER_SEQ */
    int process_only;              /* another process of a trace begun by another writer: tmr_writer_begin
                                      writes only this process's descriptors */
} tmr_writer_opts;

typedef struct tmr_writer tmr_writer;

/* The writer's own trusted_packet_sequence_id (descriptors, clock
 * snapshots, stats). Sample sequences must be >= 1 and differ from it (and
 * from every own_seq of the trace's other writers: one per process). */
#define TMR_WRITER_SEQ 0x7fffffffu

tmr_writer *tmr_writer_new(const tmr_writer_opts *o, tmr_symbols *syms, tmr_emit_fn emit, void *ctx,
                           tm_error *err);
void tmr_writer_free(tmr_writer *w);

/* Start of a trace or of a self-contained chunk: TraceConfig, SystemInfo,
 * a ClockSnapshot (BOOTTIME, MONOTONIC, REALTIME; BOOTTIME is the trace
 * clock), ProcessTree and the process TrackDescriptor, a thread
 * TrackDescriptor for every thread named so far, and every sequence's
 * interning forgotten so that its next packet carries
 * SEQ_INCREMENTAL_STATE_CLEARED and re-interns what it uses. */
tm_status tmr_writer_begin(tmr_writer *w, tm_error *err);

/* The index (ProfilePacket.index) of the next heap packet; set it to go on
 * from where the trace's earlier part left off (tmr_recorder_continue). */
uint64_t tmr_writer_heap_index(const tmr_writer *w);
void tmr_writer_set_heap_index(tmr_writer *w, uint64_t next);

/* A periodic ClockSnapshot. */
tm_status tmr_writer_clock_snapshot(tmr_writer *w, tm_error *err);

/* ProcessTree, the process TrackDescriptor and every thread's again: the
 * end of a chunk that lost packets, whose first ones may have been them. */
tm_status tmr_writer_descriptors(tmr_writer *w, tm_error *err);

/* A thread (new or renamed): ProcessTree thread entry + TrackDescriptor. */
tm_status tmr_writer_thread(tmr_writer *w, int32_t tid, const char *name, tm_error *err);

/* What tmr_writer_sample is told about a sample besides its stack. */
enum {
    TMR_SAMPLE_PREV_DROPPED = 1, /* samples of this sequence were lost before this one (sets
                                    previous_packet_dropped and re-emits the sequence's interned state) */
    TMR_SAMPLE_KERNEL = 2,       /* taken in kernel mode (PerfSample.cpu_mode) */
    TMR_SAMPLE_OFF_CPU = 8,      /* an off-CPU sample: the stack where the thread was switched out; seq
                                    must hold only off-CPU samples; count is the sequence's blocked time
                                    so far in ns (its defaults name the timebase TMR_OFF_CPU_TIMEBASE) */
    TMR_SAMPLE_TRUNCATED = 4,    /* the stack had more than depth frames: a "[truncated]" frame (mapping
                                    "[truncated]") is added at its root end, and unwind_error is
                                    MAX_FRAMES_EXCEEDED, as Perfetto's unwinder reports it */
    TMR_SAMPLE_PREEMPTED = 16    /* with TMR_SAMPLE_OFF_CPU: the thread was preempted, still runnable
                                    (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT). An off-CPU stack ends (leaf
                                    end) with a TMR_PREEMPTED_FRAME frame then, else TMR_BLOCKED_FRAME */
};
/* The name of an off-CPU sequence's timebase (PerfEvents.Timebase.name), as
 * src/perfetto recognises it: TM_PF_OFF_CPU_TIMEBASE. */
#define TMR_OFF_CPU_TIMEBASE "off-cpu"
/* The function name, and mapping name, of the frame TMR_SAMPLE_TRUNCATED adds. */
#define TMR_TRUNCATED_FRAME "[truncated]"
/* The same of an off-CPU stack's leaf: why the thread left the CPU, as
 * src/perfetto names them: TM_PF_PREEMPTED_FRAME, TM_PF_BLOCKED_FRAME. */
#define TMR_PREEMPTED_FRAME "[preempted]"
#define TMR_BLOCKED_FRAME "[blocked]"

/* One sample on writer sequence seq (one sequence per sampled thread; seq
 * >= 1). pcs[0] is the interrupted pc (the leaf), pcs[1..depth) return
 * addresses, outermost last (the writer symbolizes return addresses at pc-1,
 * so pass them unadjusted). ts_ns is CLOCK_BOOTTIME. depth 0 writes a
 * PerfSample without a callstack. count: the timebase counter's running
 * value at the sample (PerfSample.timebase_count, cumulative as Perfetto
 * reads it; 0: not written). flags: TMR_SAMPLE_*. */
tm_status tmr_writer_sample(tmr_writer *w, uint32_t seq, int32_t tid, uint32_t cpu, uint64_t ts_ns,
                            const uint64_t *pcs, uint32_t depth, uint64_t count, unsigned flags, tm_error *err);

/* lost records the kernel could not write into cpu's ring buffer (the perf
 * backend's PERF_RECORD_LOST): a PerfSample carrying only
 * kernel_records_lost, on the writer's own sequence. */
tm_status tmr_writer_records_lost(tmr_writer *w, uint32_t cpu, uint64_t ts_ns, uint64_t lost, tm_error *err);

/* Forgets the interning of every sequence (periodic incremental-state clear
 * and chunk starts). */
void tmr_writer_clear_incremental(tmr_writer *w);

/* Losses, written as a TraceStats packet at the end of a trace or chunk. */
typedef struct tmr_losses {
    uint64_t chunks_overwritten;  /* central buffer, RING_BUFFER policy */
    uint64_t chunks_discarded;    /* central buffer, DISCARD policy */
    uint64_t bytes_overwritten, bytes_discarded;
    uint32_t n_writers;
    const uint32_t *writer_seq;        /* per writer (sampled thread): its sequence id */
    const uint64_t *writer_samples_lost; /* samples its ring could not hold */
} tmr_losses;
tm_status tmr_writer_stats(tmr_writer *w, const tmr_losses *l, tm_error *err);

/* The sequence of the heap profile's ProfilePackets: one for the whole
 * recording, as heapprofd writes one per data source, since readers turn
 * its cumulative dumps into allocations per sequence. */
#define TMR_HEAP_SEQ 0x7ffffffeu

/* One allocation callstack of a heap profile with its totals since the
 * profile began (bytes are the sampler's unbiased estimates). */
typedef struct tmr_heap_callsite {
    const uint64_t *pcs; /* return addresses, innermost first */
    uint32_t depth;
    uint64_t alloc_bytes, free_bytes, alloc_count, free_count;
} tmr_heap_callsite;

/* The last pc of a heap callsite whose stack had more frames than the
 * depth kept: the writer draws it as the "[truncated]" root marker, as for
 * CPU samples (never a return address: page 0 is never mapped). */
#define TMR_HEAP_TRUNCATED_PC 1u

/* What a heap profile sampled and lost so far. */
typedef struct tmr_heap_stats {
    uint64_t interval;      /* mean sampling interval in bytes */
    uint64_t sampled;       /* allocations sampled and recorded */
    uint64_t unwind_errors; /* sampled allocations whose stack has only the caller */
    uint64_t reentrant;     /* would have been sampled, but came from inside the profiler
                               (the unwinder allocating, or a signal handler): not recorded */
    uint64_t table_full;    /* sampled, but no room to track the allocation or its stack:
                               not recorded */
} tmr_heap_stats;

/* One heap dump (a ProfilePacket, split into several with continued = true
 * when it exceeds max_packet bytes) on sequence TMR_HEAP_SEQ, timestamped
 * ts_ns (CLOCK_BOOTTIME). Function names, mappings, frames and callstacks
 * go into the packets' InternedData, as heapprofd writes them since Android
 * R, once per generation of the sequence (the first packet of each sets
 * SEQ_INCREMENTAL_STATE_CLEARED): readers forget a ProfilePacket's own
 * tables when its dump ends. Each dump repeats every callsite with its
 * totals. prev_dropped: a packet of the sequence was lost (the
 * dump starts a new generation, marked previous_packet_dropped). */
tm_status tmr_writer_heap_dump(tmr_writer *w, uint64_t ts_ns, const tmr_heap_callsite *sites, size_t n,
                               const tmr_heap_stats *st, size_t max_packet, int prev_dropped, tm_error *err);

/* The process's memory from /proc/self/status as a ProcessStats packet
 * (VmSize, VmRSS, RssAnon, RssFile, RssShmem, VmSwap, VmLck, VmHWM). */
tm_status tmr_writer_process_stats(tmr_writer *w, tm_error *err);

/* ==== Sampling (sampler.c) ============================================= */

/* The signal-driven half of the recorder. Each sampled thread has a slot:
 * a POSIX timer that sends it SIGPROF and a single-producer (the signal
 * handler on that thread) single-consumer (the collector) ring of raw
 * samples, allocated when the thread is registered. Everything but the
 * handler runs on the collector thread, one call at a time. */

typedef struct tmr_sampler_opts {
    uint32_t hz;          /* timer frequency per thread */
    int wall_clock;       /* 0: CLOCK of the thread's CPU time; 1: CLOCK_MONOTONIC */
    int unwind_fp;        /* 0: libunwind (DWARF CFI); 1: frame-pointer walk */
    uint32_t max_depth;   /* frames captured per sample */
    uint32_t ring_samples; /* capacity of each thread's ring (a power of two) */
} tmr_sampler_opts;

/* One raw sample handed to the collector; depth 0 reports only losses (a
 * thread that ended, or the final drain). */
typedef struct tmr_raw_sample {
    uint32_t seq;          /* writer sequence of the thread (>= 1, never reused) */
    int32_t tid;
    uint32_t cpu;
    uint64_t ts_ns;        /* CLOCK_BOOTTIME */
    const uint64_t *pcs;   /* pcs[0] the interrupted pc, then return addresses */
    uint32_t depth;
    uint64_t lost;         /* samples of this thread its full ring dropped since the last report */
    uint64_t overruns;     /* timer expirations merged into this signal */
    uint64_t thread_cpu_ns; /* the thread's CPU time at the sample (CLOCK_THREAD_CPUTIME_ID) */
} tmr_raw_sample;

typedef void (*tmr_sample_fn)(void *ctx, const tmr_raw_sample *s);
/* A thread seen for the first time (seq is its new sequence) or renamed. */
typedef void (*tmr_thread_fn)(void *ctx, uint32_t seq, int32_t tid, const char *name);

typedef struct tmr_sampler tmr_sampler;

/* Readies libunwind outside any signal handler (its per-thread caching, a
 * first unwind), keeping the pipe it opens off fds 0-2 should the program
 * have closed them. */
void tmr_unwind_init(void);
/* Installs the SIGPROF handler. Fails with TM_ERR_UNSUPPORTED when the
 * process already handles SIGPROF, or when another sampler is active. */
tmr_sampler *tmr_sampler_new(const tmr_sampler_opts *o, tm_error *err);
/* Scans /proc/self/task: arms a timer for every new thread (except
 * skip_tid, the collector), reports new or renamed threads, and retires
 * threads that ended (draining their rings first). */
tm_status tmr_sampler_scan(tmr_sampler *s, int32_t skip_tid, tmr_thread_fn on_thread, tmr_sample_fn on_sample,
                           void *ctx, tm_error *err);
/* Hands every queued sample to on_sample; returns how many. */
size_t tmr_sampler_drain(tmr_sampler *s, tmr_sample_fn on_sample, void *ctx);
/* Deletes every timer (sampling stops; queued samples stay drainable). */
void tmr_sampler_disarm(tmr_sampler *s);
/* In a fork child: the parent's timers are not inherited; forget them and
 * stop accepting signals without touching locks or the collector. */
void tmr_sampler_forget_after_fork(tmr_sampler *s);
/* Set by a thread while it unwinds outside the signal handler (heap.c): the
 * SIGPROF handler then defers its sample, since libunwind's per-thread
 * cache is not reentrant. After clearing it, call tmr_sampler_take_deferred,
 * which takes a deferred sample from there. */
extern __thread volatile int tmr_unwind_busy __attribute__((tls_model("initial-exec")));
void tmr_sampler_take_deferred(void);
/* Disarms, waits for handlers still running, restores SIGPROF's previous
 * disposition and frees. NULL is a no-op. */
void tmr_sampler_free(tmr_sampler *s);

/* ==== Ending with the program (recorder.c) ============================== */

/* The program is ending without exit() (it called _exit, or a fatal signal
 * came): asks the collector to stop sampling, drain every thread's ring and
 * write the end of the trace, and waits for it at most timeout_ms. Returns
 * 1 when the trace is complete, 0 otherwise (timed out; called on the
 * collector thread; not running). Async-signal-safe: it only stores, and
 * wakes and waits on futexes; the work is done by the collector, a thread
 * of its own, so a lock the interrupted code holds does not block it unless
 * the collector needs that very lock (then the timeout ends the wait). */
int tmr_recorder_end_now(tm_recorder *r, uint32_t timeout_ms);

/* The signals whose default action ends the process (all but SIGKILL, which
 * no handler sees, and the real-time ones): preload.c ends the trace before
 * a program left at that default dies of one, and the collector blocks them,
 * so that a signal meant for the process never lands on the thread whose
 * work the handler waits for. */
#define TMR_ENDING_SIGNALS                                                                                            \
    SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS, SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGALRM,    \
        SIGUSR1, SIGUSR2, SIGVTALRM, SIGXCPU, SIGXFSZ, SIGIO, SIGPWR, SIGSTKFLT

/* Code is about to be unmapped (the program's dlclose): asks the collector to
 * read the mappings again and drain what the threads sampled, and waits for
 * it at most timeout_ms, so that samples and heap stacks in that code keep
 * their names (the symbolizer keeps a mapping that is gone until another
 * takes its place). Returns 1 when done, 0 otherwise (timed out; called on
 * the collector thread; not running). */
int tmr_recorder_sync_before_unmap(tm_recorder *r, uint32_t timeout_ms);
/* Code was unmapped (after the program's dlclose): the collector reads the
 * mappings again in its next round, and in every round while it keeps gone
 * mappings, so that a library loaded where the closed one was is seen.
 * Does not wait. */
void tmr_recorder_maps_changed(tm_recorder *r);

/* The program takes SIGPROF for itself (a handler, SIG_IGN or SIG_DFL of its
 * own): asks the collector to delete every timer and arm no more, and waits
 * for it at most timeout_ms, so that no signal of the recorder's reaches
 * what the program installs. Returns 1 when sampling has stopped (or the
 * trace has ended), 0 otherwise. Async-signal-safe, as end_now. */
int tmr_recorder_release_sigprof(tm_recorder *r, uint32_t timeout_ms);

/* An exec keeps the pid: the new image records in its place, continuing
 * the trace. Where r's trace would go on (the index of its next chunk, and
 * of its next heap packet); and, before a recorder starts, that it
 * continues a trace from there: its single trace file is added to (not
 * replaced) with heap packets numbered on, its chunks numbered from the
 * next chunk's index. */
typedef struct tmr_continuation {
    uint32_t chunk;
    uint64_t heap_index;
    uint64_t exec_cpu_ns; /* the CPU time of the thread that execs (where_next runs on it) */
} tmr_continuation;
tmr_continuation tmr_recorder_where_next(const tm_recorder *r);
/* Writes out what r holds now (the threads' rings, a heap dump), as an
 * image that is about to be replaced must: the trace on disk is then
 * whole up to here. */
tm_status tmr_recorder_write_now(tm_recorder *r, tm_error *err);
void tmr_recorder_continue(tm_recorder *r, tmr_continuation from);

/* ==== Heap profiling (heap.c) ========================================== */

/* The heap profiler as the recorder sees it: heap.c lives only in the
 * preload library (interposing malloc in every program that links the
 * static recorder would be wrong), so preload.c hands it to the recorder. */
typedef struct tmr_heap_source {
    /* Every callsite sampled so far with its totals, into *out (valid until
     * the next call), and the statistics; returns how many. Collector only. */
    size_t (*snapshot)(const tmr_heap_callsite **out, tmr_heap_stats *st);
} tmr_heap_source;

/* Marks the calling thread's allocations as the recorder's own, never
 * sampled: called first thing by every thread the recorder or the uploader
 * starts, so that a heap profile started after them cannot sample them
 * before anything else could say so, and by the thread that ends sampling.
 * Weak: NULL outside the preload library (the static recorder has no heap
 * profiler). */
void tmr_heap_ignore_this_thread(void) __attribute__((weak));

/* Starts sampling allocations of mean interval bytes (0: 4096), stacks of at
 * most max_depth frames; the source for tmr_recorder_set_heap. NULL when
 * heap profiling cannot start (err says why). */
const tmr_heap_source *tmr_heap_start(uint64_t interval, uint32_t max_depth, tm_error *err);

/* Gives a recorder (new or running) a heap profile to dump: at every file
 * write (every second without them), at the end of every chunk and at stop. */
void tmr_recorder_set_heap(tm_recorder *r, const tmr_heap_source *heap);

/* ==== DWARF unwinding of perf samples (perf_unwind.c) ================== */

/* perf's x86-64 user registers, as sampled with TMR_PERF_REGS_MASK: in the
 * sample they come in bit order, AX..IP then R8..R15. */
enum {
    TMR_PERF_REG_AX, TMR_PERF_REG_BX, TMR_PERF_REG_CX, TMR_PERF_REG_DX, TMR_PERF_REG_SI, TMR_PERF_REG_DI,
    TMR_PERF_REG_BP, TMR_PERF_REG_SP, TMR_PERF_REG_IP, TMR_PERF_REG_R8, /* .. R15 = R8 + 7 */
    TMR_PERF_NREGS = TMR_PERF_REG_R8 + 8
};
/* perf_event_attr.sample_regs_user: AX..IP (bits 0-8) and R8..R15 (bits 16-23). */
#define TMR_PERF_REGS_MASK 0xff01ffull

typedef struct tmr_unwind_input {
    int32_t tid;
    const uint64_t *regs;  /* TMR_PERF_NREGS registers, TMR_PERF_REG_* order */
    const uint8_t *stack;  /* the user stack from regs[SP] upwards */
    size_t stack_len;
} tmr_unwind_input;

typedef struct tmr_unwinder tmr_unwinder;

/* An unwinder for process pid (libdw's Dwfl). */
tmr_unwinder *tmr_unwind_new(int32_t pid, tm_error *err);
void tmr_unwind_free(tmr_unwinder *u);
/* Its modules: the ELF files of syms' live mappings (call again whenever
 * they change). */
void tmr_unwind_set_mappings(tmr_unwinder *u, const tmr_symbols *syms);
/* How an unwind ended. */
enum { TMR_UNWIND_PARTIAL, TMR_UNWIND_COMPLETE, TMR_UNWIND_TRUNCATED };
/* Unwinds one sample into pcs[0..max): pcs[0] the sampled pc, then return
 * addresses. Returns the depth (>= 1 when max >= 1: at least the pc);
 * *end is TMR_UNWIND_COMPLETE when the outermost frame was reached,
 * TMR_UNWIND_TRUNCATED when there were more than max frames, else
 * TMR_UNWIND_PARTIAL (a frame could not be unwound). */
uint32_t tmr_unwind(tmr_unwinder *u, const tmr_unwind_input *in, uint64_t *pcs, uint32_t max, int *end);

/* ==== Continuous upload (upload.c) ===================================== */

/* A DSN http(s)://KEY[:SECRET]@HOST[:PORT][/PREFIX]/PROJECT. */
typedef struct tmr_dsn {
    char *key;           /* the public key */
    char *envelope_url;  /* http(s)://HOST[:PORT][/PREFIX]/api/PROJECT/envelope/ */
    uint64_t project_id;
} tmr_dsn;
tm_status tmr_dsn_parse(const char *dsn, tmr_dsn *out, tm_error *err);
void tmr_dsn_free(tmr_dsn *d);

/* One chunk as a Sentry envelope (header with event_id = chunk_id, one
 * compound profile_chunk item: [metadata JSON][trace], meta_length,
 * content_type application/x-perfetto-trace, platform native). release and
 * environment may be NULL; timestamp is Unix seconds. *out is malloc'd.
 * Returns 0 when out of memory. */
int tmr_upload_envelope(const char *profiler_id, const char *chunk_id, const char *release, const char *environment,
                        uint32_t index, double timestamp, const void *trace, size_t len, uint8_t **out,
                        size_t *out_len);

typedef struct tmr_upload_opts {
    const char *dsn;
    const char *release, *environment; /* NULL: not sent */
    const char *queue_dir;             /* created if missing; envelopes wait here */
    uint32_t queue_max;                /* files kept; 0: 100 (the oldest beyond are dropped) */
    uint32_t flush_timeout_ms;         /* how long close keeps sending; 0: 5000 */
} tmr_upload_opts;

typedef struct tmr_upload_stats {
    uint64_t queued;          /* chunks written to the queue by this run */
    uint64_t sent;            /* envelopes accepted (2xx), this run's or earlier runs' */
    uint64_t rejected;        /* refused with a 4xx other than 429: deleted, never retried */
    uint64_t failed_attempts; /* network errors, 5xx and 429 (each retried later) */
    uint64_t dropped;         /* deleted unsent because the queue was over its bound */
    uint64_t left;            /* still queued at close, for the next run */
    /* what the last rejection said ("HTTP 403: {"detail":...}"), and the
     * last failed attempt's reason (an HTTP status or libcurl's error) */
    char last_rejection[160], last_failure[160];
} tmr_upload_stats;

typedef struct tmr_uploader tmr_uploader;

/* Parses the DSN, creates the queue directory, draws the run's profiler_id
 * and starts the uploader thread (SIGPROF blocked), which first sends what
 * earlier runs left in the queue. */
tmr_uploader *tmr_upload_new(const tmr_upload_opts *o, tm_error *err);
/* A tm_record_chunk_fn (ctx: the uploader): queues the chunk as an
 * envelope file with a fresh chunk_id and wakes the uploader. */
int tmr_upload_chunk(void *ctx, uint32_t index, const void *data, size_t len);
const char *tmr_upload_profiler_id(const tmr_uploader *u);
/* Keeps sending for at most flush_timeout_ms, stops the thread, reports
 * and frees. What is left stays queued. NULL is a no-op. */
void tmr_upload_close(tmr_uploader *u, tmr_upload_stats *out);

#endif
