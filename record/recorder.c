/*
 * recorder.c — the public tm_recorder_* API and the collector: one thread
 * that scans for threads, drains their sample rings (sampler.c), symbolizes
 * and encodes through the writer (writer.c) into a central buffer of encoded
 * packets, and writes that buffer out (at stop, every file_write_period_ms,
 * and at the end of each continuous chunk), with the heap profile's dumps
 * and ProcessStats snapshots when asked for. Perfetto's dataflow in small:
 * many writers, one reader, bounded buffers, every loss counted where it
 * happened and written into the trace (previous_packet_dropped on the
 * sequence, TraceStats at the end).
 *
 * The central buffer is a byte ring of records [u32 length][u32 sequence]
 * [framed TracePacket]; one record counts as one "chunk" in the loss
 * statistics. Everything that touches the writer, the buffer or the output
 * holds r->lock; the signal handler never does.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/base.h" /* tm_fail */
#include "record.h"

enum {
    /* Ring drains and /proc/self/task scans (new, renamed and ended
     * threads), in one wake-up: each wake-up costs the process tens of
     * microseconds of CPU, so 10 per second keep the collector under 0.1 %
     * of a core (traced_perf also reads its buffers every 100 ms). */
    COLLECT_PERIOD_MS = 100,
    SNAPSHOT_PERIOD_MS = 5000, /* ClockSnapshots */
    RING_MS = 320,             /* each thread's ring holds this long of samples: 3 drains */
    RING_MIN_SAMPLES = 32,
    RING_MAX_SAMPLES = 4096,   /* 4 MiB at depth 128; beyond, losses are counted */
    RECORD_HEADER = 8,
    HEAP_DUMP_PERIOD_MS = 1000 /* heap dumps without periodic file writes */
};

typedef enum { R_NEW, R_RUNNING, R_STOPPED, R_FORKED } rec_state;

struct tm_recorder {
    tm_recorder_options o;
    char *output;
    pthread_mutex_t lock;
    /* The collector sleeps on wake_word (a futex, so that a signal handler
     * can wake it too) and is woken by changing it. */
    _Atomic uint32_t wake_word;
    _Atomic int end_requested; /* tmr_recorder_end_now: end the trace as the program ends */
    _Atomic uint32_t ended;    /* the trace is complete and closed (a futex word) */
    /* tmr_recorder_sync_before_unmap: requests taken, and served (a futex
     * word: the request count the last round with fresh mappings saw) */
    _Atomic uint32_t maps_requested, maps_served;
    /* tmr_recorder_release_sigprof: the program takes SIGPROF; the timers
     * are deleted in the next round, and no thread gets one after that */
    _Atomic int sigprof_release;
    int sigprof_released;
    pthread_t collector;
    int collector_started, stop_requested, sampling_done;
    int32_t collector_tid;
    rec_state state;

    tmr_symbols *syms;
    size_t heap_sites_named; /* heap callsites at the last dump */
    tmr_writer *writer;
    tmr_sampler *sampler;
    const tmr_heap_source *heap; /* NULL: no heap profile */
    int heap_dropped;            /* a heap packet was lost: the next dump starts over */

    /* central buffer: records between tail and head (absolute offsets) */
    uint8_t *buf;
    size_t cap;
    uint64_t head, tail;
    uint32_t emit_seq;      /* sequence of the packets the writer is emitting now */
    int emit_is_sample;
    uint8_t *scratch;       /* one record copied out of the ring */
    size_t scratch_cap;

    /* per sequence (index seq): */
    uint8_t *seq_gap;       /* records evicted: mark the next written record's sequence */
    uint8_t *seq_dropped;   /* the next sample carries prev_dropped */
    uint64_t *seq_lost;     /* ring losses in this chunk */
    uint64_t *seq_cpu_last; /* the thread's CPU time at its latest sample */
    uint64_t *seq_cpu_base; /* ... at the start of this trace or chunk: timebase counts start there */
    size_t n_seq;

    /* output of the current trace or chunk: a file (out_path, absolute,
     * opened as fd only while a flush writes: the program may close every
     * descriptor it did not open, and then open its own files on their
     * numbers) or, for the chunk callback, memory */
    char *out_path;
    tmr_own_fd out;
    int spill; /* the end of a trace or chunk is being written: a full buffer goes out, nothing is lost */
    int append; /* tmr_recorder_continue: the single trace file is added to, not replaced */
    uint64_t first_heap_index; /* with append: where its heap packets' numbering goes on */
    uint64_t exec_cpu_ns;      /* with append: the CPU time of the thread that exec'd, at the exec */
    uint8_t *mem;
    size_t mem_len, mem_cap;
    uint32_t chunk_index;
    tmr_losses chunk_losses;

    uint64_t next_snapshot, next_clear, next_write, next_chunk, next_heap_dump, next_mem, deadline;
    tm_recorder_stats stats;
    tm_status bg_status;
    tm_error bg_err;
};

static tm_recorder *g_active; /* the recorder sampling this process */
static pthread_mutex_t g_active_lock = PTHREAD_MUTEX_INITIALIZER;

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout) {
    return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

/* Wakes the collector; async-signal-safe. */
static void wake_collector(tm_recorder *r) {
    atomic_fetch_add(&r->wake_word, 1);
    futex(&r->wake_word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- per-sequence bookkeeping ------------------------------------------- */

static int seq_reserve(tm_recorder *r, uint32_t seq) {
    if (seq < r->n_seq) return 1;
    size_t n = r->n_seq ? r->n_seq : 64;
    while (n <= seq) n *= 2;
    uint8_t *gap = realloc(r->seq_gap, n);
    if (gap) r->seq_gap = gap;
    uint8_t *dropped = realloc(r->seq_dropped, n);
    if (dropped) r->seq_dropped = dropped;
    uint64_t *lost = realloc(r->seq_lost, n * sizeof *lost);
    if (lost) r->seq_lost = lost;
    uint64_t *cpu_last = realloc(r->seq_cpu_last, n * sizeof *cpu_last);
    if (cpu_last) r->seq_cpu_last = cpu_last;
    uint64_t *cpu_base = realloc(r->seq_cpu_base, n * sizeof *cpu_base);
    if (cpu_base) r->seq_cpu_base = cpu_base;
    if (!gap || !dropped || !lost || !cpu_last || !cpu_base) return 0;
    memset(r->seq_gap + r->n_seq, 0, n - r->n_seq);
    memset(r->seq_dropped + r->n_seq, 0, n - r->n_seq);
    memset(r->seq_lost + r->n_seq, 0, (n - r->n_seq) * sizeof *lost);
    memset(r->seq_cpu_last + r->n_seq, 0, (n - r->n_seq) * sizeof *cpu_last);
    memset(r->seq_cpu_base + r->n_seq, 0, (n - r->n_seq) * sizeof *cpu_base);
    r->n_seq = n;
    return 1;
}

/* ---- the central buffer --------------------------------------------------- */

static void ring_copy_in(tm_recorder *r, uint64_t at, const void *src, size_t n) {
    size_t off = (size_t)(at % r->cap), first = n < r->cap - off ? n : r->cap - off;
    memcpy(r->buf + off, src, first);
    memcpy(r->buf, (const uint8_t *)src + first, n - first);
}

static void ring_copy_out(const tm_recorder *r, uint64_t at, void *dst, size_t n) {
    size_t off = (size_t)(at % r->cap), first = n < r->cap - off ? n : r->cap - off;
    memcpy(dst, r->buf + off, first);
    memcpy((uint8_t *)dst + first, r->buf, n - first);
}

static void record_header(const tm_recorder *r, uint64_t at, uint32_t *len, uint32_t *seq) {
    uint32_t h[2];
    ring_copy_out(r, at, h, sizeof h);
    *len = h[0];
    *seq = h[1] & 0x7fffffffu;
}

/* A lost packet: counted, and its sequence (if it has interned state) marked
 * so that readers and the writer restart that state. */
static void lose_packet(tm_recorder *r, uint32_t seq, int is_sample, size_t bytes, int overwritten) {
    if (overwritten) {
        r->chunk_losses.chunks_overwritten++;
        r->chunk_losses.bytes_overwritten += bytes;
        r->stats.packets_overwritten++;
        r->stats.bytes_overwritten += bytes;
    } else {
        r->chunk_losses.chunks_discarded++;
        r->chunk_losses.bytes_discarded += bytes;
        r->stats.packets_discarded++;
        r->stats.bytes_discarded += bytes;
    }
    if (is_sample) r->stats.sample_packets_lost++;
    if (seq == TMR_HEAP_SEQ) r->heap_dropped = 1;
    if (seq != 0 && seq < r->n_seq) {
        r->seq_dropped[seq] = 1;
        if (overwritten) r->seq_gap[seq] = 1;
    }
}

static int read_varint(const uint8_t *p, size_t len, size_t *at, uint64_t *v) {
    *v = 0;
    for (unsigned shift = 0; *at < len && shift < 64; shift += 7) {
        uint8_t c = p[(*at)++];
        *v |= (uint64_t)(c & 0x7f) << shift;
        if (c < 0x80) return 1;
    }
    return 0;
}

/* Whether a framed TracePacket holds a PerfSample (field 66): the writer
 * may put a loss mark of its own before a sample, which is no sample. */
static int record_is_sample(const uint8_t *rec, size_t len) {
    size_t at = 1;
    uint64_t v, tag;
    if (len < 2 || !read_varint(rec, len, &at, &v)) return 0;
    while (at < len && read_varint(rec, len, &at, &tag)) {
        if (tag >> 3 == 66) return 1;
        switch (tag & 7) {
        case 0: if (!read_varint(rec, len, &at, &v)) return 0; break;
        case 1: at += 8; break;
        case 2: if (!read_varint(rec, len, &at, &v) || v > len - at) return 0; at += v; break;
        case 5: at += 4; break;
        default: return 0;
        }
    }
    return 0;
}

static tm_status drain_buffer(tm_recorder *r, tm_error *err);

static int on_emit(void *ctx, const uint8_t *rec, size_t len) {
    tm_recorder *r = ctx;
    size_t need = RECORD_HEADER + len;
    tm_error spill_err;
    /* At the end, what comes last (the last heap dump, its tables re-sent
     * in a new generation) must not overwrite its own first packets:
     * what the buffer holds is written out first. */
    if (r->spill && r->head - r->tail + need > r->cap && need <= r->cap) drain_buffer(r, &spill_err);
    if (need > r->cap || (r->o.fill == TM_RECORD_FILL_DISCARD && r->head - r->tail + need > r->cap)) {
        lose_packet(r, r->emit_seq, r->emit_is_sample && record_is_sample(rec, len), len, 0);
        return 0;
    }
    while (r->head - r->tail + need > r->cap) {
        uint32_t old_len, old_seq, h[2];
        record_header(r, r->tail, &old_len, &old_seq);
        ring_copy_out(r, r->tail, h, sizeof h);
        lose_packet(r, old_seq, (h[1] & 0x80000000u) != 0, old_len, 1);
        r->tail += RECORD_HEADER + old_len;
    }
    int is_sample = r->emit_is_sample && record_is_sample(rec, len);
    uint32_t h[2] = {(uint32_t)len, r->emit_seq | (is_sample ? 0x80000000u : 0)};
    ring_copy_in(r, r->head, h, sizeof h);
    ring_copy_in(r, r->head + RECORD_HEADER, rec, len);
    r->head += need;
    return 0;
}

/* ---- output ---------------------------------------------------------------- */

static tm_status out_write(tm_recorder *r, const void *data, size_t len, tm_error *err) {
    r->stats.bytes_written += len;
    if (!r->out_path) {
        if (r->mem_len + len > r->mem_cap) {
            size_t cap = r->mem_cap ? r->mem_cap : 65536;
            while (cap < r->mem_len + len) cap *= 2;
            uint8_t *grown = realloc(r->mem, cap);
            if (!grown) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "recorder: out of memory for a chunk");
            r->mem = grown;
            r->mem_cap = cap;
        }
        memcpy(r->mem + r->mem_len, data, len);
        r->mem_len += len;
        return TM_OK;
    }
    if (r->out.fd >= 0 && !tmr_own_still(&r->out)) r->out.fd = -1; /* the program's now */
    if (r->out.fd < 0 && tmr_own_open(&r->out, r->out_path, O_WRONLY | O_APPEND, 0) != 0)
        return tm_fail(err, TM_ERR_IO, 0, NULL, "recorder: cannot open %s: %s", r->out_path, strerror(errno));
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = write(r->out.fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return tm_fail(err, TM_ERR_IO, 0, NULL, "recorder: cannot write the trace: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
    return TM_OK;
}

/* A packet on seq that only says "packets of this sequence were lost here":
 * written before the first surviving record of a sequence whose older
 * records the ring overwrote, so no reader resolves them against the
 * interned state that went with the lost ones. */
static tm_status write_loss_marker(tm_recorder *r, uint32_t seq, tm_error *err) {
    uint8_t pkt[16], rec[20];
    size_t n = 0;
    pkt[n++] = 0x50; /* trusted_packet_sequence_id = 10, varint */
    for (uint32_t v = seq; ; v >>= 7) {
        pkt[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        if (v <= 0x7f) break;
    }
    pkt[n++] = 0xd0; /* previous_packet_dropped = 42, varint */
    pkt[n++] = 0x02;
    pkt[n++] = 0x01;
    rec[0] = 0x0a;
    rec[1] = (uint8_t)n;
    memcpy(rec + 2, pkt, n);
    return out_write(r, rec, n + 2, err);
}

static tm_status drain_buffer(tm_recorder *r, tm_error *err) {
    while (r->tail != r->head) {
        uint32_t len, seq;
        record_header(r, r->tail, &len, &seq);
        if (len > r->scratch_cap) {
            uint8_t *grown = realloc(r->scratch, len);
            if (!grown) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "recorder: out of memory");
            r->scratch = grown;
            r->scratch_cap = len;
        }
        ring_copy_out(r, r->tail + RECORD_HEADER, r->scratch, len);
        r->tail += RECORD_HEADER + len;
        if (seq < r->n_seq && r->seq_gap[seq]) {
            r->seq_gap[seq] = 0;
            tm_status st = write_loss_marker(r, seq, err);
            if (st != TM_OK) return st;
        }
        tm_status st = out_write(r, r->scratch, len, err);
        if (st != TM_OK) return st;
    }
    return TM_OK;
}

/* Moves every buffered record to the output, and closes the file until
 * the next flush. */
static tm_status write_buffer(tm_recorder *r, tm_error *err) {
    tm_status st = drain_buffer(r, err);
    if (r->out.fd >= 0 && tmr_own_close(&r->out) != 0 && st == TM_OK)
        st = tm_fail(err, TM_ERR_IO, 0, NULL, "recorder: cannot close %s: %s", r->out_path, strerror(errno));
    return st;
}

/* OUT.N.pftrace for chunk N ("x.pftrace" -> "x.N.pftrace"). */
static char *chunk_path(const char *out, uint32_t index) {
    size_t len = strlen(out);
    char *p = malloc(len + 32);
    if (p) snprintf(p, len + 32, "%.*s.%u.pftrace", (int)tmr_trace_stem(out), out, index);
    return p;
}

/* Creates the file of a trace or chunk (empty), to be written by flushes. */
static tm_status open_output(tm_recorder *r, tm_error *err) {
    r->mem_len = 0;
    free(r->out_path);
    r->out_path = NULL;
    if (r->o.chunk_seconds && r->o.on_chunk) return TM_OK;
    char *path = r->o.chunk_seconds ? chunk_path(r->output, r->chunk_index) : strdup(r->output);
    if (!path) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "recorder: out of memory");
    tmr_own_fd created;
    if (tmr_own_open(&created, path, O_WRONLY | O_CREAT | (r->append && !r->o.chunk_seconds ? 0 : O_TRUNC), 0644)) {
        tm_status st = tm_fail(err, TM_ERR_IO, 0, NULL, "recorder: cannot create %s", path);
        free(path);
        return st;
    }
    tmr_own_close(&created);
    r->out_path = path;
    return TM_OK;
}

/* Starts a trace or a chunk: fresh output, fresh loss counters, the
 * writer's preamble (which also clears every sequence's interning). */
static tm_status begin_output(tm_recorder *r, tm_error *err) {
    tm_status st = open_output(r, err);
    if (st != TM_OK) return st;
    memset(&r->chunk_losses, 0, sizeof r->chunk_losses);
    if (r->n_seq) {
        memset(r->seq_gap, 0, r->n_seq);
        memset(r->seq_dropped, 0, r->n_seq);
        memset(r->seq_lost, 0, r->n_seq * sizeof *r->seq_lost);
        /* Each chunk stands alone: its counts start from the threads'
         * latest samples, so its first sample of a thread weighs the CPU
         * time since that thread's last sample in the chunk before. */
        memcpy(r->seq_cpu_base, r->seq_cpu_last, r->n_seq * sizeof *r->seq_cpu_base);
    }
    r->emit_seq = 0;
    r->emit_is_sample = 0;
    st = tmr_writer_begin(r->writer, err);
    if (r->append && !r->o.chunk_seconds) tmr_writer_set_heap_index(r->writer, r->first_heap_index);
    return st;
}

/* The heap profile so far, into the buffer: its packets may take up to a
 * quarter of it each. */
static tm_status heap_dump(tm_recorder *r, tm_error *err) {
    if (!r->heap) return TM_OK;
    const tmr_heap_callsite *sites;
    tmr_heap_stats hs;
    size_t n = r->heap->snapshot(&sites, &hs);
    /* New stacks may run through a library loaded since the maps were last
     * read (dlopen in a program that ends within the refresh throttle):
     * read them again before the stacks' frames are named. */
    if (n > r->heap_sites_named && r->syms) tmr_symbols_refresh(r->syms, NULL);
    r->heap_sites_named = n;
    r->stats.heap_samples = hs.sampled;
    r->stats.heap_samples_lost = hs.reentrant + hs.table_full;
    r->stats.heap_unwind_errors = hs.unwind_errors;
    int dropped = r->heap_dropped;
    r->heap_dropped = 0;
    r->emit_seq = TMR_HEAP_SEQ;
    r->emit_is_sample = 0;
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    tm_status st = tmr_writer_heap_dump(r->writer, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec, sites, n,
                                        &hs, r->cap / 4, dropped, err);
    r->emit_seq = 0;
    return st;
}

/* Ends a trace or chunk: the last heap dump and memory snapshot, buffer
 * out, TraceStats, file closed or chunk handed to the callback. */
static tm_status finish_output(tm_recorder *r, tm_error *err) {
    tm_status st = write_buffer(r, err);
    r->spill = 1;
    /* The buffer is empty now: what is written here reaches the file. A
     * chunk that lost packets may have lost its first ones: the clock
     * snapshot (without which the heap dumps' MONOTONIC_COARSE times mean
     * nothing) and the descriptors are written again. */
    const tmr_losses *cl = &r->chunk_losses;
    if (st == TM_OK && (cl->chunks_overwritten || cl->chunks_discarded)) {
        r->emit_seq = 0;
        r->emit_is_sample = 0;
        st = tmr_writer_clock_snapshot(r->writer, err);
        if (st == TM_OK) st = tmr_writer_descriptors(r->writer, err);
    }
    if (st == TM_OK) st = heap_dump(r, err);
    if (st == TM_OK && r->o.mem_period_ms) st = tmr_writer_process_stats(r->writer, err);
    if (st == TM_OK) st = write_buffer(r, err);
    uint32_t n = 0;
    uint32_t *seqs = calloc(r->n_seq ? r->n_seq : 1, sizeof *seqs);
    uint64_t *lost = calloc(r->n_seq ? r->n_seq : 1, sizeof *lost);
    if (st == TM_OK && (!seqs || !lost)) st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "recorder: out of memory");
    if (st == TM_OK) {
        for (uint32_t s = 1; s < r->n_seq; s++)
            if (r->seq_lost[s]) {
                seqs[n] = s;
                lost[n++] = r->seq_lost[s];
            }
        tmr_losses l = r->chunk_losses;
        l.n_writers = n;
        l.writer_seq = seqs;
        l.writer_samples_lost = lost;
        r->emit_seq = 0;
        r->emit_is_sample = 0;
        st = tmr_writer_stats(r->writer, &l, err);
    }
    free(seqs);
    free(lost);
    if (st == TM_OK) st = write_buffer(r, err);
    r->spill = 0;
    if (!r->out_path && r->o.on_chunk && st == TM_OK) {
        if (r->o.on_chunk(r->o.chunk_ctx, r->chunk_index, r->mem, r->mem_len) != 0)
            st = tm_fail(err, TM_ERR_IO, 0, NULL, "recorder: the chunk callback failed");
    }
    r->stats.chunks++;
    return st;
}

/* ---- the collector -------------------------------------------------------- */

static void on_thread(void *ctx, uint32_t seq, int32_t tid, const char *name) {
    tm_recorder *r = ctx;
    if (!seq_reserve(r, seq)) return;
    if (seq > r->stats.threads) r->stats.threads = seq; /* sequences are numbered from 1, never reused */
    /* The thread that exec'd (now the main one) was sampled by the old
     * image up to the exec: its time here starts there, and so do the
     * counts of a chunk (which stands alone; one trace goes on counting). */
    if (r->append && tid == getpid() && !r->seq_cpu_last[seq]) {
        r->seq_cpu_last[seq] = r->exec_cpu_ns;
        if (r->o.chunk_seconds) r->seq_cpu_base[seq] = r->exec_cpu_ns;
    }
    r->emit_seq = 0;
    r->emit_is_sample = 0;
    tm_error err;
    if (tmr_writer_thread(r->writer, tid, name, &err) != TM_OK && r->bg_status == TM_OK) {
        r->bg_status = err.code;
        r->bg_err = err;
    }
}

static void on_sample(void *ctx, const tmr_raw_sample *s) {
    tm_recorder *r = ctx;
    if (!seq_reserve(r, s->seq)) return;
    r->stats.samples_lost += s->lost;
    r->seq_lost[s->seq] += s->lost;
    if (s->lost) r->seq_dropped[s->seq] = 1;
    if (s->depth == 0) return;
    r->stats.samples++;
    r->stats.timer_overruns += s->overruns;
    /* PerfSample.timebase_count: the thread's task clock (its CPU time in
     * ns) since the trace or chunk began, cumulative as Perfetto reads a
     * counter; a reader takes the difference to the thread's previous
     * sample as this sample's weight. A thread's first sample carries the
     * CPU time it used before it was first sampled. Wall-clock samples
     * stand for wall time, which no counter here measures. */
    uint64_t count = 0;
    if (r->o.clock == TM_RECORD_CLOCK_CPU && s->thread_cpu_ns > r->seq_cpu_base[s->seq]) {
        count = s->thread_cpu_ns - r->seq_cpu_base[s->seq];
        if (s->thread_cpu_ns > r->seq_cpu_last[s->seq])
            r->stats.cpu_time_ns += s->thread_cpu_ns - r->seq_cpu_last[s->seq];
        r->seq_cpu_last[s->seq] = s->thread_cpu_ns;
    }
    int prev_dropped = r->seq_dropped[s->seq];
    r->seq_dropped[s->seq] = 0;
    r->emit_seq = s->seq;
    r->emit_is_sample = 1;
    unsigned flags = prev_dropped ? TMR_SAMPLE_PREV_DROPPED : 0;
    uint32_t depth = s->depth;
    if (depth > r->o.max_depth) { /* the sampler unwinds one frame more than kept */
        depth = r->o.max_depth;
        flags |= TMR_SAMPLE_TRUNCATED;
        r->stats.stacks_truncated++;
    }
    tm_error err;
    tm_status st = tmr_writer_sample(r->writer, s->seq, s->tid, s->cpu, s->ts_ns, s->pcs, depth, count, flags, &err);
    if (st != TM_OK && r->bg_status == TM_OK) {
        r->bg_status = st;
        r->bg_err = err;
    }
    r->emit_seq = 0;
    r->emit_is_sample = 0;
}

static void record_failure(tm_recorder *r, tm_status st, const tm_error *err) {
    if (st != TM_OK && r->bg_status == TM_OK) {
        r->bg_status = st;
        r->bg_err = *err;
    }
}

/* Stops the timers and writes the end of the trace; called with the lock. */
static void end_sampling(tm_recorder *r) {
    if (r->sampling_done) return;
    r->sampling_done = 1;
    /* What the last output allocates is the recorder's, on whichever
     * thread ends it (the collector, or the program's at exit): the heap
     * profile, attached maybe after the collector's last round, must not
     * sample it. The recording is over for this thread either way. */
    if (tmr_heap_ignore_this_thread) tmr_heap_ignore_this_thread();
    tmr_sampler_disarm(r->sampler);
    tmr_sampler_drain(r->sampler, on_sample, r);
    tm_error err;
    record_failure(r, finish_output(r, &err), &err);
}

/* One round of collector work; called with the lock. */
static void collect(tm_recorder *r, uint64_t now) {
    tm_error err;
    if (atomic_load(&r->sigprof_release) && !r->sigprof_released) {
        tmr_sampler_disarm(r->sampler);
        r->sigprof_released = 1;
    }
    if (!r->sigprof_released)
        record_failure(r, tmr_sampler_scan(r->sampler, r->collector_tid, on_thread, on_sample, r, &err), &err);
    tmr_sampler_drain(r->sampler, on_sample, r);
    if (r->o.chunk_seconds && now >= r->next_chunk) {
        record_failure(r, finish_output(r, &err), &err);
        r->chunk_index++;
        record_failure(r, begin_output(r, &err), &err);
        r->next_chunk += (uint64_t)r->o.chunk_seconds * 1000u;
        r->next_snapshot = now + SNAPSHOT_PERIOD_MS;
        r->next_clear = now + r->o.clear_period_ms;
    }
    if (now >= r->next_snapshot) {
        record_failure(r, tmr_writer_clock_snapshot(r->writer, &err), &err);
        r->next_snapshot = now + SNAPSHOT_PERIOD_MS;
    }
    if (now >= r->next_clear) {
        tmr_writer_clear_incremental(r->writer);
        r->next_clear = now + r->o.clear_period_ms;
    }
    if (r->heap && now >= r->next_heap_dump) {
        record_failure(r, heap_dump(r, &err), &err);
        r->next_heap_dump = now + (r->o.file_write_period_ms ? r->o.file_write_period_ms : HEAP_DUMP_PERIOD_MS);
    }
    if (r->o.mem_period_ms && now >= r->next_mem) {
        record_failure(r, tmr_writer_process_stats(r->writer, &err), &err);
        r->next_mem = now + r->o.mem_period_ms;
    }
    if (r->o.file_write_period_ms && now >= r->next_write) {
        record_failure(r, write_buffer(r, &err), &err);
        r->next_write = now + r->o.file_write_period_ms;
    }
}

/* 1 when thread tid of this process is a zombie, dead or gone. */
static int thread_ended(long tid) {
    char path[64], text[512];
    snprintf(path, sizeof path, "/proc/self/task/%ld/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0) close(fd);
    if (n <= 0) return 1; /* gone */
    text[n] = 0;
    const char *state = strrchr(text, ')'); /* "tid (comm) S ...": comm may hold anything */
    return state && state[1] == ' ' && (state[2] == 'Z' || state[2] == 'X');
}

/* 1 when every thread of the process but the collector has ended (a zombie
 * main thread that called pthread_exit included): the program is over, but
 * glibc ends a process when its last thread ends, and the collector is one. */
static int program_threads_ended(pid_t collector) {
    if (!thread_ended(getpid())) return 0; /* the main thread runs: one read a round, whatever the threads */
    DIR *tasks = opendir("/proc/self/task");
    if (!tasks) return 0;
    int ended = 1;
    struct dirent *e;
    while (ended && (e = readdir(tasks))) {
        long tid = strtol(e->d_name, NULL, 10);
        if (tid > 0 && tid != collector) ended = thread_ended(tid);
    }
    closedir(tasks);
    return ended;
}

static void *collector_main(void *arg) {
    tm_recorder *r = arg;
    tmr_own_descriptor_table();
    if (tmr_heap_ignore_this_thread) tmr_heap_ignore_this_thread();
    r->collector_tid = gettid();
    int orphaned = 0;
    pthread_mutex_lock(&r->lock);
    while (!r->stop_requested && !r->sampling_done && !atomic_load(&r->end_requested)) {
        uint64_t now = now_ms();
        if (r->deadline && now >= r->deadline) break;
        if (program_threads_ended(r->collector_tid)) {
            orphaned = 1;
            break;
        }
        /* Taken before this round looks at the requests: a wake-up while it
         * works (a dlclose's request) changes the word, so the wait below
         * returns at once instead of leaving the request for a period. */
        uint32_t seen = atomic_load(&r->wake_word);
        /* Code about to be unmapped: its mappings are read before the
         * samples taken in it are drained, and are kept once it is gone. */
        uint32_t requested = atomic_load(&r->maps_requested);
        int unmapping = requested != atomic_load(&r->maps_served);
        if (r->syms && (unmapping || tmr_symbols_keeps_gone(r->syms))) tmr_symbols_refresh(r->syms, NULL);
        collect(r, now);
        if (unmapping) {
            atomic_store(&r->maps_served, requested);
            futex(&r->maps_served, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
        }
        pthread_mutex_unlock(&r->lock);
        /* A wake-up since the load changes the word: the wait then returns
         * at once. */
        struct timespec period = {0, COLLECT_PERIOD_MS * 1000000L};
        if (!atomic_load(&r->end_requested)) futex(&r->wake_word, FUTEX_WAIT_PRIVATE, seen, &period);
        pthread_mutex_lock(&r->lock);
    }
    end_sampling(r);
    pthread_mutex_unlock(&r->lock);
    atomic_store(&r->ended, 1);
    futex(&r->ended, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
    /* The program's threads all ended (its main thread by pthread_exit): the
     * trace is complete; end the process as glibc would have, exit(0). */
    if (orphaned) exit(0);
    return NULL;
}

/* What is left of timeout_ms since start (CLOCK_MONOTONIC), into *left; 0
 * when nothing is. Async-signal-safe. */
static int time_left(const struct timespec *start, uint32_t timeout_ms, struct timespec *left) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t left_ns = (int64_t)timeout_ms * 1000000 -
                      ((int64_t)(now.tv_sec - start->tv_sec) * 1000000000 + (now.tv_nsec - start->tv_nsec));
    if (left_ns <= 0) return 0;
    *left = (struct timespec){(time_t)(left_ns / 1000000000), (long)(left_ns % 1000000000)};
    return 1;
}

int tmr_recorder_end_now(tm_recorder *r, uint32_t timeout_ms) {
    if (!r || r->state != R_RUNNING) return 0;
    if (gettid() == r->collector_tid) return 0; /* it cannot wait for itself */
    atomic_store(&r->end_requested, 1);
    wake_collector(r);
    struct timespec start, left;
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!atomic_load(&r->ended)) {
        if (!time_left(&start, timeout_ms, &left)) return 0;
        futex(&r->ended, FUTEX_WAIT_PRIVATE, 0, &left);
    }
    return 1;
}

int tmr_recorder_sync_before_unmap(tm_recorder *r, uint32_t timeout_ms) {
    if (!r || r->state != R_RUNNING || atomic_load(&r->ended)) return 0;
    if (gettid() == r->collector_tid) return 0; /* it cannot wait for itself */
    uint32_t ticket = atomic_fetch_add(&r->maps_requested, 1) + 1;
    wake_collector(r);
    struct timespec start, left;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        uint32_t served = atomic_load(&r->maps_served);
        if ((int32_t)(served - ticket) >= 0) return 1;
        if (atomic_load(&r->ended) || !time_left(&start, timeout_ms, &left)) return 0;
        futex(&r->maps_served, FUTEX_WAIT_PRIVATE, served, &left);
    }
}

void tmr_recorder_maps_changed(tm_recorder *r) {
    if (!r || r->state != R_RUNNING || atomic_load(&r->ended)) return;
    atomic_fetch_add(&r->maps_requested, 1);
    wake_collector(r);
}

int tmr_recorder_release_sigprof(tm_recorder *r, uint32_t timeout_ms) {
    if (!r || r->state != R_RUNNING) return 0;
    atomic_store(&r->sigprof_release, 1);
    return tmr_recorder_sync_before_unmap(r, timeout_ms) || atomic_load(&r->ended);
}

tmr_continuation tmr_recorder_where_next(const tm_recorder *r) {
    struct timespec used;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used);
    tmr_continuation c = {r->chunk_index + 1, tmr_writer_heap_index(r->writer),
                          (uint64_t)used.tv_sec * 1000000000u + (uint64_t)used.tv_nsec};
    return c;
}

/* What the threads sampled, and with with_heap a heap dump written whole
 * (as at an end), into the output; called without the lock. */
static tm_status flush(tm_recorder *r, int with_heap, tm_error *err) {
    pthread_mutex_lock(&r->lock);
    tm_status st = TM_OK;
    if (!r->sampling_done) {
        tmr_sampler_drain(r->sampler, on_sample, r);
        st = write_buffer(r, err);
        if (st == TM_OK && with_heap) {
            r->spill = 1;
            st = heap_dump(r, err);
            if (st == TM_OK) st = write_buffer(r, err);
            r->spill = 0;
        }
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}

tm_status tmr_recorder_write_now(tm_recorder *r, tm_error *err) {
    return r->state == R_RUNNING ? flush(r, 1, err) : TM_OK;
}

void tmr_recorder_continue(tm_recorder *r, tmr_continuation from) {
    r->append = 1;
    r->chunk_index = from.chunk;
    r->first_heap_index = from.heap_index;
    r->exec_cpu_ns = from.exec_cpu_ns;
}

/* ---- fork and exit -------------------------------------------------------- */

/* Around fork(): the child must not inherit a lock held by the collector.
 * In the child the collector does not exist and POSIX timers are not
 * inherited, so the child's copy of the recorder goes inert (it never
 * writes the parent's trace). */
static void atfork_prepare(void) {
    pthread_mutex_lock(&g_active_lock);
    if (g_active) pthread_mutex_lock(&g_active->lock);
}

static void atfork_parent(void) {
    if (g_active) pthread_mutex_unlock(&g_active->lock);
    pthread_mutex_unlock(&g_active_lock);
}

static void atfork_child(void) {
    tm_recorder *r = g_active;
    if (r) {
        tmr_sampler_forget_after_fork(r->sampler);
        pthread_mutex_init(&r->lock, NULL);
        r->state = R_FORKED;
        tmr_own_close(&r->out);
        g_active = NULL;
    }
    pthread_mutex_init(&g_active_lock, NULL);
}

static void stop_at_exit(void) {
    pthread_mutex_lock(&g_active_lock);
    tm_recorder *r = g_active;
    pthread_mutex_unlock(&g_active_lock);
    if (r) tm_recorder_stop(r, NULL);
}

static pthread_once_t g_hooks_once = PTHREAD_ONCE_INIT;
static void install_hooks(void) {
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    atexit(stop_at_exit);
}

/* ---- public API ---------------------------------------------------------- */

/* path, from the root: the program may change its directory while it is
 * recorded. NULL when out of memory. */
static char *absolute_path(const char *path) {
    char cwd[PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) return strdup(path);
    char *abs = NULL;
    return asprintf(&abs, "%s/%s", cwd, path) < 0 ? NULL : abs;
}

tm_status tm_recorder_new(const tm_recorder_options *opts, tm_recorder **out, tm_error *err) {
    if (!out) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_recorder_new: out is NULL");
    *out = NULL;
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_recorder_options", err));
    tm_recorder_options o;
    if (opts) o = *opts;
    else memset(&o, 0, sizeof o);
    if (!o.output && !(o.chunk_seconds && o.on_chunk))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "recorder: no output path");
    if (o.hz == 0) o.hz = 101;
    if (o.hz > 100000) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "recorder: sampling frequency above 100 kHz");
    if (o.max_depth == 0) o.max_depth = 128;
    if (o.max_depth > 4096) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "recorder: max_depth above 4096");
    if (o.buffer_kb == 0) o.buffer_kb = 4096;
    if (o.clear_period_ms == 0) o.clear_period_ms = 10000;
    if ((unsigned)o.clock > TM_RECORD_CLOCK_WALL || (unsigned)o.fill > TM_RECORD_FILL_DISCARD ||
        (unsigned)o.unwind > TM_RECORD_UNWIND_FP)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "recorder: unknown clock, fill or unwind value");
    tm_recorder *r = calloc(1, sizeof *r);
    if (!r) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "recorder: out of memory");
    r->o = o;
    r->out.fd = -1;
    r->cap = (size_t)o.buffer_kb * 1024u;
    r->buf = malloc(r->cap);
    r->output = o.output ? absolute_path(o.output) : NULL;
    if (!r->buf || (o.output && !r->output)) {
        tm_recorder_free(r);
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "recorder: out of memory");
    }
    pthread_mutex_init(&r->lock, NULL);
    *out = r;
    return TM_OK;
}

/* A power of two holding RING_MS of samples at hz. */
static uint32_t ring_samples(uint32_t hz) {
    uint64_t want = (uint64_t)hz * RING_MS / 1000u;
    uint32_t n = RING_MIN_SAMPLES;
    while (n < want && n < RING_MAX_SAMPLES) n *= 2;
    return n;
}

tm_status tm_recorder_start(tm_recorder *r, tm_error *err) {
    if (!r) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_recorder_start: recorder is NULL");
    if (r->state != R_NEW) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
        "tm_recorder_start: recorder already started");
    pthread_once(&g_hooks_once, install_hooks);
    pthread_mutex_lock(&g_active_lock);
    if (g_active) {
        pthread_mutex_unlock(&g_active_lock);
        return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "another recorder is already sampling this process");
    }
    tm_status st = TM_OK;
    tmr_sampler_opts so = {r->o.hz, r->o.clock == TM_RECORD_CLOCK_WALL, r->o.unwind == TM_RECORD_UNWIND_FP,
                           r->o.max_depth + 1 /* one more: a stack cut at max_depth is seen */,
                           ring_samples(r->o.hz)};
    r->sampler = tmr_sampler_new(&so, err);
    if (!r->sampler) st = err ? err->code : TM_ERR_UNSUPPORTED;
    if (st == TM_OK) {
        r->syms = tmr_symbols_new(
            (r->o.demangle ? TMR_SYMBOLS_DEMANGLE : 0) | (r->o.name_frames ? TMR_SYMBOLS_NAME_ALL : 0), err);
        if (!r->syms) st = err ? err->code : TM_ERR_IO;
    }
    if (st == TM_OK) {
        tmr_writer_opts wo = {.pid = (int32_t)getpid(),
                              .sampling_hz = r->o.hz,
                              .wall_clock = r->o.clock == TM_RECORD_CLOCK_WALL,
                              .buffer_kb = r->o.buffer_kb,
                              .fill_discard = r->o.fill == TM_RECORD_FILL_DISCARD};
        r->writer = tmr_writer_new(&wo, r->syms, on_emit, r, err);
        if (!r->writer) st = err ? err->code : TM_ERR_NOMEM;
    }
    if (st == TM_OK) st = begin_output(r, err);
    if (st == TM_OK) {
        uint64_t now = now_ms();
        r->next_snapshot = now + SNAPSHOT_PERIOD_MS;
        r->next_clear = now + r->o.clear_period_ms;
        r->next_write = now + r->o.file_write_period_ms;
        r->next_chunk = now + (uint64_t)r->o.chunk_seconds * 1000u;
        r->next_heap_dump = now + (r->o.file_write_period_ms ? r->o.file_write_period_ms : HEAP_DUMP_PERIOD_MS);
        r->next_mem = now; /* the first snapshot at once */
        r->deadline = r->o.duration_ms ? now + r->o.duration_ms : 0;
        /* The collector is never sampled: it starts with SIGPROF blocked;
         * and it never takes a signal meant for the process (SIGTERM...),
         * whose handler (preload.c) waits for the collector to end the trace. */
        static const int ending[] = {TMR_ENDING_SIGNALS};
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGPROF);
        for (size_t i = 0; i < sizeof ending / sizeof *ending; i++) sigaddset(&block, ending[i]);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        if (pthread_create(&r->collector, NULL, collector_main, r) != 0)
            st = tm_fail(err, TM_ERR_IO, 0, NULL, "recorder: cannot start the collector thread");
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    if (st != TM_OK) { /* back to R_NEW as it was: a later start makes them again */
        tmr_own_close(&r->out);
        tmr_sampler_free(r->sampler);
        r->sampler = NULL;
        tmr_writer_free(r->writer);
        r->writer = NULL;
        tmr_symbols_free(r->syms);
        r->syms = NULL;
        r->head = r->tail = 0; /* the preamble begin_output may have put there */
        pthread_mutex_unlock(&g_active_lock);
        return st;
    }
    r->collector_started = 1;
    r->state = R_RUNNING;
    g_active = r;
    pthread_mutex_unlock(&g_active_lock);
    return TM_OK;
}

void tmr_recorder_set_heap(tm_recorder *r, const tmr_heap_source *heap) {
    if (!r || r->state == R_STOPPED || r->state == R_FORKED) return;
    if (r->state == R_RUNNING) pthread_mutex_lock(&r->lock);
    r->heap = heap;
    if (r->state == R_RUNNING) pthread_mutex_unlock(&r->lock);
}

tm_status tm_recorder_flush(tm_recorder *r, tm_error *err) {
    if (!r) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_recorder_flush: recorder is NULL");
    if (r->state != R_RUNNING) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
        "tm_recorder_flush: not recording");
    return flush(r, 0, err);
}

tm_status tm_recorder_stop(tm_recorder *r, tm_error *err) {
    if (!r) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_recorder_stop: recorder is NULL");
    if (r->state == R_FORKED || r->state == R_NEW) return TM_OK;
    if (r->state == R_RUNNING) {
        pthread_mutex_lock(&r->lock);
        r->stop_requested = 1;
        pthread_mutex_unlock(&r->lock);
        wake_collector(r);
        pthread_join(r->collector, NULL);
        pthread_mutex_lock(&g_active_lock);
        if (g_active == r) g_active = NULL;
        pthread_mutex_unlock(&g_active_lock);
        r->state = R_STOPPED;
    }
    if (r->bg_status != TM_OK) {
        if (err) *err = r->bg_err;
        return r->bg_status;
    }
    return TM_OK;
}

void tm_recorder_get_stats(tm_recorder *r, tm_recorder_stats *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!r) return;
    if (r->state == R_RUNNING) pthread_mutex_lock(&r->lock);
    *out = r->stats;
    if (r->state == R_RUNNING) pthread_mutex_unlock(&r->lock);
}

void tm_recorder_free(tm_recorder *r) {
    if (!r) return;
    tm_recorder_stop(r, NULL);
    tmr_sampler_free(r->sampler);
    tmr_writer_free(r->writer);
    tmr_symbols_free(r->syms);
    tmr_own_close(&r->out);
    pthread_mutex_destroy(&r->lock);
    free(r->buf);
    free(r->scratch);
    free(r->seq_gap);
    free(r->seq_dropped);
    free(r->seq_lost);
    free(r->seq_cpu_last);
    free(r->seq_cpu_base);
    free(r->mem);
    free(r->output);
    free(r->out_path);
    free(r);
}
