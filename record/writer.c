/*
 * writer.c — the recorder's Perfetto encoder: turns samples and process
 * facts into TracePackets (framed as Trace records) handed to an emit
 * callback. It owns per-sequence interning (function names, mapping paths,
 * build ids, mappings, frames, callstacks), the sequence flags that make a
 * reader trust that interning, heapprofd-shaped heap dumps (ProfilePacket,
 * interning into InternedData as heapprofd does since Android R), and the
 * descriptive packets: TraceConfig, SystemInfo, ClockSnapshot, ProcessTree,
 * TrackDescriptors, ProcessStats, TraceStats.
 *
 * Sequences: every sampled thread writes on the sequence the caller gives
 * (seq >= 1, != TMR_WRITER_SEQ); descriptors, clock snapshots and stats go
 * on the writer's own sequence (TMR_WRITER_SEQ unless told), which interns
 * nothing. A writer describes one process; a trace of several (the perf
 * backend) has one writer per process, each with its own sequence, the
 * first one writing the trace-wide packets.
 *
 * Packets are built in one growable scratch buffer: a nested message is
 * written body first and its tag and length are inserted in front when it
 * closes (a short memmove), so no size pass is needed. In steady state a
 * sample allocates nothing; only the interning tables grow, amortised.
 *
 * Not thread-safe: the collector thread owns a tmr_writer.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct tm's tm_gmtoff */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "common/base.h" /* tm_fail, tm_hash_u64 */
#include "perfetto/fields.h"
#include "wire/pb_write.h"
#include "record.h"

/* uuids of the process and thread tracks: fixed tags so they never collide. */
#define PROCESS_TRACK_UUID(pid) (0x7472616365000000ull ^ (uint64_t)(uint32_t)(pid))
#define THREAD_TRACK_UUID(tid) (0x7468726561000000ull ^ (uint64_t)(uint32_t)(tid) << 1 ^ 1)

/* ---- scratch buffer with back-patched nesting ---- */

typedef struct wbuf {
    uint8_t *p;
    size_t len, cap;
    int oom; /* sticky: a failed growth makes the whole packet fail */
} wbuf;

static uint8_t *room(wbuf *b, size_t n) {
    if (b->oom) return NULL;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 512;
        while (cap - b->len < n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return NULL;
        }
        b->p = q, b->cap = cap;
    }
    return b->p + b->len;
}

static void put_uint(wbuf *b, uint32_t field, uint64_t v) {
    uint8_t *p = room(b, 2 * TM_PBW_VARINT_MAX);
    if (p) b->len = (size_t)(tm_pbw_uint(p, field, v) - b->p);
}

static void put_bytes(wbuf *b, uint32_t field, const void *data, size_t n) {
    uint8_t *p = room(b, 2 * TM_PBW_VARINT_MAX + n);
    if (!p) return;
    p = tm_pbw_len(p, field, n);
    if (n) memcpy(p, data, n);
    b->len = (size_t)(p + n - b->p);
}

static void put_str(wbuf *b, uint32_t field, const char *s) { put_bytes(b, field, s, strlen(s)); }

/* Opens a sub-message: its body follows; close it with msg_close. */
static size_t msg_open(const wbuf *b) { return b->len; }

/* Puts field's tag and the body length in front of the body begun at mark. */
static void msg_close(wbuf *b, uint32_t field, size_t mark) {
    if (b->oom) return;
    size_t body = b->len - mark;
    uint8_t head[2 * TM_PBW_VARINT_MAX];
    size_t h = (size_t)(tm_pbw_len(head, field, body) - head);
    if (!room(b, h)) return;
    memmove(b->p + mark + h, b->p + mark, body);
    memcpy(b->p + mark, head, h);
    b->len += h;
}

/* ---- interning tables ---- */

/* Open addressing map (a, b) -> iid; iid 0 marks an empty slot. */
typedef struct imap {
    uint64_t *a, *b, *v;
    size_t cap, n;
} imap;

static size_t imap_hash(uint64_t a, uint64_t b) { return (size_t)tm_hash_u64(a * 0x9e3779b97f4a7c15ull ^ b); }

/* The iid slot of (a, b): existing (non-zero) or empty, to be filled by the
 * caller (it is already counted). NULL if memory runs out. */
static uint64_t *imap_slot(imap *m, uint64_t a, uint64_t b) {
    if ((m->n + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        uint64_t *na = calloc(cap, sizeof *na), *nb = calloc(cap, sizeof *nb), *nv = calloc(cap, sizeof *nv);
        if (!na || !nb || !nv) {
            free(na), free(nb), free(nv);
            return NULL;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->v[i]) continue;
            size_t k = imap_hash(m->a[i], m->b[i]) & (cap - 1);
            while (nv[k]) k = (k + 1) & (cap - 1);
            na[k] = m->a[i], nb[k] = m->b[i], nv[k] = m->v[i];
        }
        free(m->a), free(m->b), free(m->v);
        m->a = na, m->b = nb, m->v = nv, m->cap = cap;
    }
    size_t k = imap_hash(a, b) & (m->cap - 1);
    while (m->v[k] && (m->a[k] != a || m->b[k] != b)) k = (k + 1) & (m->cap - 1);
    if (!m->v[k]) {
        m->a[k] = a, m->b[k] = b;
        m->n++;
    }
    return &m->v[k];
}

static void imap_clear(imap *m) {
    if (m->cap) memset(m->v, 0, m->cap * sizeof *m->v);
    m->n = 0;
}

static void imap_free(imap *m) { free(m->a), free(m->b), free(m->v); }

/* Kinds of string-like entries keyed by pointer in one map (key b). */
enum { KEY_NAME = 0, KEY_PATH = 1, KEY_BUILD_ID = 2, KEY_MAPPING = 3, KEY_TRUNCATED = 4, KEY_PREEMPTED = 5,
       KEY_BLOCKED = 6 };

/* Callstacks: a table of (hash, frame iids in a pool) -> iid. */
typedef struct cs_slot {
    uint64_t hash, iid; /* iid 0: empty */
    size_t off;
    uint32_t len;
} cs_slot;

typedef struct seq_state {
    uint32_t seq;
    int off_cpu;       /* its samples are off-CPU ones (TMR_SAMPLE_OFF_CPU): its defaults say so */
    int need_clear;    /* the next packet starts a new generation */
    uint64_t next_iid; /* one counter for every kind: unique within each */
    imap strs;         /* names, paths, build ids, mappings (by symbols' pointers / indices) */
    imap frames;       /* (mapping + 1, rel_pc) */
    cs_slot *cs;
    size_t cs_cap, cs_n;
    uint64_t *pool; /* frame iids of interned callstacks */
    size_t pool_len, pool_cap;
} seq_state;

static void seq_clear(seq_state *s) {
    s->need_clear = 1;
    s->next_iid = 0;
    imap_clear(&s->strs);
    imap_clear(&s->frames);
    if (s->cs_cap) memset(s->cs, 0, s->cs_cap * sizeof *s->cs);
    s->cs_n = 0;
    s->pool_len = 0;
}

static void seq_free(seq_state *s) {
    imap_free(&s->strs);
    imap_free(&s->frames);
    free(s->cs);
    free(s->pool);
}

typedef struct thread_entry {
    int32_t tid;
    char *name;
} thread_entry;

struct tmr_writer {
    tmr_writer_opts o;
    tmr_symbols *syms;
    tmr_emit_fn emit;
    void *ctx;
    char *cmdline;          /* NUL-separated arguments (a copy of the given ones, or /proc/self/cmdline) */
    size_t cmdline_len;
    const char *process_name;
    seq_state *seqs;
    size_t n_seqs, cap_seqs;
    imap seq_index;         /* seq -> index + 1 into seqs */
    thread_entry *threads;
    size_t n_threads, cap_threads;
    wbuf pkt;               /* the packet being built */
    wbuf interned;          /* a packet's new InternedData entries */
    wbuf heap_samples;      /* a heap dump packet's HeapSamples */
    uint64_t heap_index;    /* ProfilePacket.index of the next heap packet */
    uint64_t *frame_iids;   /* a sample's frames, leaf first */
    size_t frame_cap;
};

static uint64_t now_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Frames the packet in w->pkt as a Trace record and hands it on. */
static tm_status emit_packet(tmr_writer *w, tm_error *err) {
    msg_close(&w->pkt, TM_PF_TRACE_PACKET, 0);
    if (w->pkt.oom) {
        w->pkt.oom = 0;
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory encoding a trace packet");
    }
    if (w->emit(w->ctx, w->pkt.p, w->pkt.len))
        return tm_fail(err, TM_ERR_IO, 0, NULL, "writing a trace packet failed");
    return TM_OK;
}

/* Starts a packet on the writer's own sequence. */
static void own_packet(tmr_writer *w, uint64_t ts) {
    w->pkt.len = 0;
    put_uint(&w->pkt, TM_PF_PACKET_TIMESTAMP, ts);
    put_uint(&w->pkt, TM_PF_PACKET_SEQUENCE_ID, w->o.own_seq);
}

static void read_cmdline(tmr_writer *w) {
    w->cmdline = tmr_read_own("/proc/self/cmdline", &w->cmdline_len); /* NUL-terminated: so is the last argument */
    if (!w->cmdline) w->cmdline_len = 0;
    while (w->cmdline_len && w->cmdline[w->cmdline_len - 1] == 0) w->cmdline_len--;
}

/* Each argument of the command line as a repeated string field. */
static void put_cmdline(tmr_writer *w, wbuf *b, uint32_t field) {
    if (!w->cmdline_len) {
        put_str(b, field, w->process_name);
        return;
    }
    for (size_t at = 0; at <= w->cmdline_len;) {
        size_t n = strlen(w->cmdline + at);
        put_bytes(b, field, w->cmdline + at, n);
        at += n + 1;
    }
}

tmr_writer *tmr_writer_new(const tmr_writer_opts *o, tmr_symbols *syms, tmr_emit_fn emit, void *ctx,
                           tm_error *err) {
    if (!o || !syms || !emit) {
        tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tmr_writer_new needs options, symbols and an emit callback");
        return NULL;
    }
    tmr_writer *w = calloc(1, sizeof *w);
    if (!w) {
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        return NULL;
    }
    w->o = *o;
    if (w->o.pid == 0) w->o.pid = (int32_t)getpid();
    if (w->o.ppid == 0) w->o.ppid = (int32_t)getppid();
    if (w->o.own_seq == 0) w->o.own_seq = TMR_WRITER_SEQ;
    w->syms = syms, w->emit = emit, w->ctx = ctx;
    if (o->cmdline) {
        w->cmdline = malloc(o->cmdline_len + 1);
        if (!w->cmdline) {
            free(w);
            tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
            return NULL;
        }
        memcpy(w->cmdline, o->cmdline, o->cmdline_len);
        w->cmdline[o->cmdline_len] = 0;
        w->cmdline_len = o->cmdline_len;
        while (w->cmdline_len && w->cmdline[w->cmdline_len - 1] == 0) w->cmdline_len--;
    } else {
        read_cmdline(w);
    }
    w->o.cmdline = NULL;
    w->process_name = o->process_name ? o->process_name : w->cmdline_len ? w->cmdline : "unknown";
    return w;
}

void tmr_writer_free(tmr_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_seqs; i++) seq_free(&w->seqs[i]);
    for (size_t i = 0; i < w->n_threads; i++) free(w->threads[i].name);
    free(w->seqs);
    imap_free(&w->seq_index);
    free(w->threads);
    free(w->cmdline);
    free(w->pkt.p);
    free(w->interned.p);
    free(w->heap_samples.p);
    free(w->frame_iids);
    free(w);
}

void tmr_writer_clear_incremental(tmr_writer *w) {
    for (size_t i = 0; i < w->n_seqs; i++) seq_clear(&w->seqs[i]);
}

/* ---- descriptive packets (writer's own sequence) ---- */

static tm_status trace_config(tmr_writer *w, uint64_t ts, tm_error *err) {
    wbuf *b = &w->pkt;
    own_packet(w, ts);
    size_t tc = msg_open(b);
    size_t buf = msg_open(b);
    put_uint(b, TM_PF_BUFFER_CONFIG_SIZE_KB, w->o.buffer_kb);
    put_uint(b, TM_PF_BUFFER_CONFIG_FILL_POLICY,
             w->o.fill_discard ? TM_PF_FILL_POLICY_DISCARD : TM_PF_FILL_POLICY_RING_BUFFER);
    msg_close(b, TM_PF_CONFIG_BUFFERS, buf);
    size_t ds = msg_open(b);
    size_t dsc = msg_open(b);
    put_str(b, TM_PF_DATA_SOURCE_CONFIG_NAME, "linux.perf");
    put_uint(b, TM_PF_DATA_SOURCE_CONFIG_TARGET_BUFFER, 0);
    /* The sampling setup in words; the same facts are machine-readable in
     * every sample sequence's PerfSampleDefaults timebase. */
    char desc[96];
    snprintf(desc, sizeof desc, "tracemill.record frequency_hz=%u timer=%s", (unsigned)w->o.sampling_hz,
             w->o.perf_cpu_clock ? "perf-cpu-clock" : w->o.wall_clock ? "wall-clock" : "thread-cpu-time");
    put_str(b, TM_PF_DATA_SOURCE_CONFIG_LEGACY_CONFIG, desc);
    msg_close(b, TM_PF_DATA_SOURCE_CONFIG, dsc);
    msg_close(b, TM_PF_CONFIG_DATA_SOURCES, ds);
    size_t bi = msg_open(b);
    put_uint(b, TM_PF_BUILTIN_DATA_SOURCES_PRIMARY_TRACE_CLOCK, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    msg_close(b, TM_PF_CONFIG_BUILTIN_DATA_SOURCES, bi);
    msg_close(b, TM_PF_PACKET_TRACE_CONFIG, tc);
    return emit_packet(w, err);
}

static tm_status system_info(tmr_writer *w, uint64_t ts, tm_error *err) {
    wbuf *b = &w->pkt;
    own_packet(w, ts);
    size_t si = msg_open(b);
    struct utsname u;
    if (uname(&u) == 0) {
        size_t un = msg_open(b);
        put_str(b, TM_PF_UTSNAME_SYSNAME, u.sysname);
        put_str(b, TM_PF_UTSNAME_VERSION, u.version);
        put_str(b, TM_PF_UTSNAME_RELEASE, u.release);
        put_str(b, TM_PF_UTSNAME_MACHINE, u.machine);
        msg_close(b, TM_PF_SYSTEM_INFO_UTSNAME, un);
    }
    long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE), cpus = sysconf(_SC_NPROCESSORS_CONF),
         pages = sysconf(_SC_PHYS_PAGES);
    if (hz > 0) put_uint(b, TM_PF_SYSTEM_INFO_HZ, (uint64_t)hz);
    put_str(b, TM_PF_SYSTEM_INFO_TRACING_SERVICE_VERSION, "tracemill-record " TM_VERSION_STRING);
    if (page > 0) put_uint(b, TM_PF_SYSTEM_INFO_PAGE_SIZE, (uint64_t)page);
    time_t t = time(NULL);
    struct tm local;
    if (localtime_r(&t, &local))
        put_uint(b, TM_PF_SYSTEM_INFO_TIMEZONE_OFF_MINS, (uint64_t)(int64_t)(local.tm_gmtoff / 60));
    if (cpus > 0) put_uint(b, TM_PF_SYSTEM_INFO_NUM_CPUS, (uint64_t)cpus);
    if (pages > 0 && page > 0) put_uint(b, TM_PF_SYSTEM_INFO_SYSTEM_RAM_BYTES, (uint64_t)pages * (uint64_t)page);
    msg_close(b, TM_PF_PACKET_SYSTEM_INFO, si);
    return emit_packet(w, err);
}

tm_status tmr_writer_clock_snapshot(tmr_writer *w, tm_error *err) {
    /* Read back to back so that the snapshot pairs nearly simultaneous
     * values. MONOTONIC_COARSE times heap dumps, as heapprofd's do. */
    uint64_t boot = now_ns(CLOCK_BOOTTIME), mono = now_ns(CLOCK_MONOTONIC), real = now_ns(CLOCK_REALTIME),
             coarse = now_ns(CLOCK_MONOTONIC_COARSE);
    wbuf *b = &w->pkt;
    own_packet(w, boot);
    size_t cs = msg_open(b);
    static const uint32_t ids[4] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_MONOTONIC,
                                    TM_PF_BUILTIN_CLOCK_REALTIME, TM_PF_BUILTIN_CLOCK_MONOTONIC_COARSE};
    const uint64_t vals[4] = {boot, mono, real, coarse};
    for (int i = 0; i < 4; i++) {
        size_t c = msg_open(b);
        put_uint(b, TM_PF_CLOCK_ID, ids[i]);
        put_uint(b, TM_PF_CLOCK_TIMESTAMP, vals[i]);
        msg_close(b, TM_PF_CLOCK_SNAPSHOT_CLOCKS, c);
    }
    put_uint(b, TM_PF_CLOCK_SNAPSHOT_PRIMARY_TRACE_CLOCK, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    msg_close(b, TM_PF_PACKET_CLOCK_SNAPSHOT, cs);
    return emit_packet(w, err);
}

static void put_thread_entry(tmr_writer *w, wbuf *b, int32_t tid, const char *name) {
    size_t t = msg_open(b);
    put_uint(b, TM_PF_THREAD_TID, (uint64_t)(int64_t)tid);
    if (name) put_str(b, TM_PF_THREAD_NAME, name);
    put_uint(b, TM_PF_THREAD_TGID, (uint64_t)(int64_t)w->o.pid);
    msg_close(b, TM_PF_PROCESS_TREE_THREADS, t);
}

static tm_status process_tree(tmr_writer *w, uint64_t ts, tm_error *err) {
    wbuf *b = &w->pkt;
    own_packet(w, ts);
    size_t pt = msg_open(b);
    size_t p = msg_open(b);
    put_uint(b, TM_PF_PROCESS_PID, (uint64_t)(int64_t)w->o.pid);
    put_uint(b, TM_PF_PROCESS_PPID, (uint64_t)(int64_t)w->o.ppid);
    put_cmdline(w, b, TM_PF_PROCESS_CMDLINE);
    put_uint(b, TM_PF_PROCESS_UID, (uint64_t)getuid());
    msg_close(b, TM_PF_PROCESS_TREE_PROCESSES, p);
    for (size_t i = 0; i < w->n_threads; i++) put_thread_entry(w, b, w->threads[i].tid, w->threads[i].name);
    put_uint(b, TM_PF_PROCESS_TREE_COLLECTION_END, ts);
    msg_close(b, TM_PF_PACKET_PROCESS_TREE, pt);
    return emit_packet(w, err);
}

static tm_status process_track(tmr_writer *w, uint64_t ts, tm_error *err) {
    wbuf *b = &w->pkt;
    own_packet(w, ts);
    size_t td = msg_open(b);
    put_uint(b, TM_PF_TRACK_DESC_UUID, PROCESS_TRACK_UUID(w->o.pid));
    size_t pd = msg_open(b);
    put_uint(b, TM_PF_PROCESS_DESC_PID, (uint64_t)(int64_t)w->o.pid);
    put_cmdline(w, b, TM_PF_PROCESS_DESC_CMDLINE);
    put_str(b, TM_PF_PROCESS_DESC_PROCESS_NAME, w->process_name);
    msg_close(b, TM_PF_TRACK_DESC_PROCESS, pd);
    msg_close(b, TM_PF_PACKET_TRACK_DESCRIPTOR, td);
    return emit_packet(w, err);
}

static tm_status thread_track(tmr_writer *w, uint64_t ts, int32_t tid, const char *name, tm_error *err) {
    wbuf *b = &w->pkt;
    own_packet(w, ts);
    size_t td = msg_open(b);
    put_uint(b, TM_PF_TRACK_DESC_UUID, THREAD_TRACK_UUID(tid));
    put_uint(b, TM_PF_TRACK_DESC_PARENT_UUID, PROCESS_TRACK_UUID(w->o.pid));
    size_t d = msg_open(b);
    put_uint(b, TM_PF_THREAD_DESC_PID, (uint64_t)(int64_t)w->o.pid);
    put_uint(b, TM_PF_THREAD_DESC_TID, (uint64_t)(int64_t)tid);
    if (name) put_str(b, TM_PF_THREAD_DESC_THREAD_NAME, name);
    msg_close(b, TM_PF_TRACK_DESC_THREAD, d);
    msg_close(b, TM_PF_PACKET_TRACK_DESCRIPTOR, td);
    return emit_packet(w, err);
}

static tm_status descriptors(tmr_writer *w, uint64_t ts, tm_error *err) {
    TM_TRY(process_tree(w, ts, err));
    TM_TRY(process_track(w, ts, err));
    for (size_t i = 0; i < w->n_threads; i++)
        TM_TRY(thread_track(w, ts, w->threads[i].tid, w->threads[i].name, err));
    return TM_OK;
}

tm_status tmr_writer_begin(tmr_writer *w, tm_error *err) {
    uint64_t ts = now_ns(CLOCK_BOOTTIME);
    w->heap_index = 0; /* a chunk's heap packets count from 0, or readers see the earlier chunks as lost */
    if (w->o.process_only) {
        TM_TRY(descriptors(w, ts, err));
        tmr_writer_clear_incremental(w);
        return TM_OK;
    }
    TM_TRY(trace_config(w, ts, err));
    TM_TRY(system_info(w, ts, err));
    TM_TRY(tmr_writer_clock_snapshot(w, err));
    TM_TRY(descriptors(w, ts, err));
    tmr_writer_clear_incremental(w);
    return TM_OK;
}

uint64_t tmr_writer_heap_index(const tmr_writer *w) { return w->heap_index; }
void tmr_writer_set_heap_index(tmr_writer *w, uint64_t next) { w->heap_index = next; }

tm_status tmr_writer_descriptors(tmr_writer *w, tm_error *err) {
    return descriptors(w, now_ns(CLOCK_BOOTTIME), err);
}

tm_status tmr_writer_thread(tmr_writer *w, int32_t tid, const char *name, tm_error *err) {
    thread_entry *t = NULL;
    for (size_t i = 0; i < w->n_threads && !t; i++)
        if (w->threads[i].tid == tid) t = &w->threads[i];
    if (!t) {
        if (tmr_grow((void **)&w->threads, &w->cap_threads, sizeof *w->threads, w->n_threads + 1))
            return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        t = &w->threads[w->n_threads++];
        *t = (thread_entry){tid, NULL};
    }
    if (name && (!t->name || strcmp(t->name, name) != 0)) {
        char *copy = malloc(strlen(name) + 1);
        if (!copy) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        memcpy(copy, name, strlen(name) + 1);
        free(t->name);
        t->name = copy;
    }
    uint64_t ts = now_ns(CLOCK_BOOTTIME);
    wbuf *b = &w->pkt;
    own_packet(w, ts);
    size_t pt = msg_open(b);
    put_thread_entry(w, b, tid, t->name);
    put_uint(b, TM_PF_PROCESS_TREE_COLLECTION_END, ts);
    msg_close(b, TM_PF_PACKET_PROCESS_TREE, pt);
    TM_TRY(emit_packet(w, err));
    return thread_track(w, ts, tid, t->name, err);
}

/* ---- samples ---- */

static seq_state *seq_get(tmr_writer *w, uint32_t seq) {
    uint64_t *slot = imap_slot(&w->seq_index, seq, 0);
    if (!slot) return NULL;
    if (*slot) return &w->seqs[*slot - 1];
    if (tmr_grow((void **)&w->seqs, &w->cap_seqs, sizeof *w->seqs, w->n_seqs + 1)) return NULL; /* slot stays empty */
    seq_state *s = &w->seqs[w->n_seqs];
    memset(s, 0, sizeof *s);
    s->seq = seq;
    s->need_clear = 1;
    *slot = ++w->n_seqs;
    return s;
}

/* The iid of a string-like entry; a new one is appended to w->interned. */
static uint64_t intern_bytes(tmr_writer *w, seq_state *s, uint32_t field, int kind, const void *key,
                             const void *data, size_t n) {
    uint64_t *slot = imap_slot(&s->strs, (uint64_t)(uintptr_t)key, (uint64_t)kind);
    if (!slot) {
        w->interned.oom = 1;
        return 0;
    }
    if (!*slot) {
        *slot = ++s->next_iid;
        size_t e = msg_open(&w->interned);
        put_uint(&w->interned, TM_PF_INTERNED_IID, *slot);
        put_bytes(&w->interned, TM_PF_INTERNED_STRING_STR, data, n);
        msg_close(&w->interned, field, e);
    }
    return *slot;
}

static uint64_t intern_mapping(tmr_writer *w, seq_state *s, int mapping) {
    const tmr_mapping *m = tmr_symbols_mapping(w->syms, mapping);
    if (!m) return 0;
    uint64_t *slot = imap_slot(&s->strs, (uint64_t)mapping, KEY_MAPPING);
    if (!slot) {
        w->interned.oom = 1;
        return 0;
    }
    if (*slot) return *slot;
    uint64_t iid = *slot = ++s->next_iid;
    /* Paths and build ids belong to the file: keyed by the path string the
     * symbolizer shares between a file's mappings. One full path per
     * mapping (readers join segments with '/', and a leading '//' is one). */
    uint64_t path_iid =
        m->path[0] ? intern_bytes(w, s, TM_PF_INTERNED_MAPPING_PATHS, KEY_PATH, m->path, m->path, strlen(m->path)) : 0;
    uint64_t build_iid =
        m->build_id_len
            ? intern_bytes(w, s, TM_PF_INTERNED_BUILD_IDS, KEY_BUILD_ID, m->path, m->build_id, m->build_id_len)
            : 0;
    wbuf *b = &w->interned;
    size_t e = msg_open(b);
    put_uint(b, TM_PF_INTERNED_IID, iid);
    if (build_iid) put_uint(b, TM_PF_MAPPING_BUILD_ID, build_iid);
    /* As Perfetto's unwinder fills them: start_offset is where the ELF
     * starts in the file (0: files are whole ELF images), exact_offset the
     * mapping's file offset. */
    put_uint(b, TM_PF_MAPPING_START_OFFSET, 0);
    put_uint(b, TM_PF_MAPPING_START, m->start);
    put_uint(b, TM_PF_MAPPING_END, m->end);
    put_uint(b, TM_PF_MAPPING_LOAD_BIAS, m->load_bias);
    if (path_iid) put_uint(b, TM_PF_MAPPING_PATH_STRING_IDS, path_iid);
    put_uint(b, TM_PF_MAPPING_EXACT_OFFSET, m->offset);
    msg_close(b, TM_PF_INTERNED_MAPPINGS, e);
    return iid;
}

/* The iid of the frame of pc; return addresses (not the leaf) are looked up
 * at pc - 1, inside the call instruction, as Perfetto's unwinder reports
 * them: a call that ends a function must not be named after the next one. */
static uint64_t intern_frame(tmr_writer *w, seq_state *s, uint64_t pc, int is_return_address) {
    int mapping;
    uint64_t rel_pc;
    const char *name;
    tmr_symbols_lookup(w->syms, is_return_address && pc ? pc - 1 : pc, &mapping, &rel_pc, &name);
    uint64_t *slot = imap_slot(&s->frames, (uint64_t)(mapping + 1), rel_pc);
    if (!slot) {
        w->interned.oom = 1;
        return 0;
    }
    if (*slot) return *slot;
    uint64_t iid = *slot = ++s->next_iid;
    uint64_t name_iid =
        name ? intern_bytes(w, s, TM_PF_INTERNED_FUNCTION_NAMES, KEY_NAME, name, name, strlen(name)) : 0;
    uint64_t mapping_iid = mapping >= 0 ? intern_mapping(w, s, mapping) : 0;
    wbuf *b = &w->interned;
    size_t e = msg_open(b);
    put_uint(b, TM_PF_INTERNED_IID, iid);
    if (name_iid) put_uint(b, TM_PF_FRAME_FUNCTION_NAME_ID, name_iid);
    if (mapping_iid) put_uint(b, TM_PF_FRAME_MAPPING_ID, mapping_iid);
    put_uint(b, TM_PF_FRAME_REL_PC, rel_pc);
    msg_close(b, TM_PF_INTERNED_FRAMES, e);
    return iid;
}

/* The iid of the callstack whose frame iids, root first, are f[0..n). */
static uint64_t intern_callstack(tmr_writer *w, seq_state *s, const uint64_t *f, uint32_t n) {
    uint64_t h = 0x6a09e667f3bcc908ull ^ n;
    for (uint32_t i = 0; i < n; i++) h = tm_hash_u64(h ^ f[i]);
    if ((s->cs_n + 1) * 2 > s->cs_cap) {
        size_t cap = s->cs_cap ? s->cs_cap * 2 : 64;
        cs_slot *fresh = calloc(cap, sizeof *fresh);
        if (!fresh) {
            w->interned.oom = 1;
            return 0;
        }
        for (size_t i = 0; i < s->cs_cap; i++) {
            if (!s->cs[i].iid) continue;
            size_t k = (size_t)s->cs[i].hash & (cap - 1);
            while (fresh[k].iid) k = (k + 1) & (cap - 1);
            fresh[k] = s->cs[i];
        }
        free(s->cs);
        s->cs = fresh, s->cs_cap = cap;
    }
    size_t k = (size_t)h & (s->cs_cap - 1);
    for (; s->cs[k].iid; k = (k + 1) & (s->cs_cap - 1)) {
        const cs_slot *c = &s->cs[k];
        if (c->hash == h && c->len == n && memcmp(s->pool + c->off, f, n * sizeof *f) == 0) return c->iid;
    }
    if (tmr_grow((void **)&s->pool, &s->pool_cap, sizeof *s->pool, s->pool_len + n)) {
        w->interned.oom = 1;
        return 0;
    }
    memcpy(s->pool + s->pool_len, f, n * sizeof *f);
    s->cs[k] = (cs_slot){h, ++s->next_iid, s->pool_len, n};
    s->pool_len += n;
    s->cs_n++;
    wbuf *b = &w->interned;
    size_t e = msg_open(b);
    put_uint(b, TM_PF_INTERNED_IID, s->cs[k].iid);
    /* Unpacked, as the proto declares it: Perfetto's decoder reads
     * frame_ids only that way, and packed ids left Trace Processor without
     * stacks. */
    for (uint32_t i = 0; i < n; i++) put_uint(b, TM_PF_CALLSTACK_FRAME_IDS, f[i]);
    msg_close(b, TM_PF_INTERNED_CALLSTACKS, e);
    return s->cs[k].iid;
}

/* Machine-readable sampling setup of a sequence (new with each generation).
 * An off-CPU sequence's timebase is the context-switches counter, sampled
 * at every switch (period 1) and named TMR_OFF_CPU_TIMEBASE: its samples'
 * timebase_count is the sequence's blocked time so far, in ns. */
static void put_defaults(tmr_writer *w, wbuf *b, int off_cpu) {
    size_t d = msg_open(b);
    put_uint(b, TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    size_t psd = msg_open(b);
    size_t tb = msg_open(b);
    if (off_cpu) {
        put_uint(b, TM_PF_TIMEBASE_PERIOD, 1);
        put_uint(b, TM_PF_TIMEBASE_COUNTER, TM_PF_COUNTER_SW_CONTEXT_SWITCHES);
        put_str(b, TM_PF_TIMEBASE_NAME, TMR_OFF_CPU_TIMEBASE);
    } else {
        if (w->o.sampling_hz) put_uint(b, TM_PF_TIMEBASE_FREQUENCY, w->o.sampling_hz);
        /* The perf backend's cpu-clock event, opened on each thread, counts
         * that thread's CPU time: on a thread's sequence, as the signal
         * backend's timer, it is a task-clock. */
        put_uint(b, TM_PF_TIMEBASE_COUNTER, w->o.wall_clock ? TM_PF_COUNTER_SW_CPU_CLOCK : TM_PF_COUNTER_SW_TASK_CLOCK);
        put_str(b, TM_PF_TIMEBASE_NAME, w->o.wall_clock ? "wall-clock" : "task-clock");
    }
    msg_close(b, TM_PF_PERF_DEFAULTS_TIMEBASE, tb);
    msg_close(b, TM_PF_DEFAULTS_PERF_SAMPLE, psd);
    msg_close(b, TM_PF_PACKET_DEFAULTS, d);
}

/* The iid of a marker frame (TMR_TRUNCATED_FRAME, TMR_PREEMPTED_FRAME,
 * TMR_BLOCKED_FRAME, interned under key), in a mapping of that name of its
 * own (Perfetto's readers drop a frame without a mapping). name is a string
 * literal: its address is its interning key. */
static uint64_t intern_marker(tmr_writer *w, seq_state *s, unsigned key, const char *name) {
    uint64_t *slot = imap_slot(&s->strs, 0, key);
    if (!slot) {
        w->interned.oom = 1;
        return 0;
    }
    if (*slot) return *slot + 1; /* the slot holds the mapping's iid; the frame's is the next */
    uint64_t mapping_iid = *slot = ++s->next_iid, frame_iid = ++s->next_iid;
    uint64_t path_iid = intern_bytes(w, s, TM_PF_INTERNED_MAPPING_PATHS, KEY_PATH, name, name, strlen(name));
    uint64_t name_iid = intern_bytes(w, s, TM_PF_INTERNED_FUNCTION_NAMES, KEY_NAME, name, name, strlen(name));
    wbuf *b = &w->interned;
    size_t e = msg_open(b);
    put_uint(b, TM_PF_INTERNED_IID, mapping_iid);
    if (path_iid) put_uint(b, TM_PF_MAPPING_PATH_STRING_IDS, path_iid);
    msg_close(b, TM_PF_INTERNED_MAPPINGS, e);
    e = msg_open(b);
    put_uint(b, TM_PF_INTERNED_IID, frame_iid);
    if (name_iid) put_uint(b, TM_PF_FRAME_FUNCTION_NAME_ID, name_iid);
    put_uint(b, TM_PF_FRAME_MAPPING_ID, mapping_iid);
    put_uint(b, TM_PF_FRAME_REL_PC, 0);
    msg_close(b, TM_PF_INTERNED_FRAMES, e);
    return frame_iid;
}

tm_status tmr_writer_sample(tmr_writer *w, uint32_t seq, int32_t tid, uint32_t cpu, uint64_t ts_ns,
                            const uint64_t *pcs, uint32_t depth, uint64_t count, unsigned flags, tm_error *err) {
    if (seq == 0 || seq == TMR_WRITER_SEQ || seq == w->o.own_seq || (depth && !pcs))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "bad sample: sequence %u, depth %u", (unsigned)seq,
                       (unsigned)depth);
    int prev_dropped = (flags & TMR_SAMPLE_PREV_DROPPED) != 0, truncated = depth && (flags & TMR_SAMPLE_TRUNCATED);
    int off_cpu = (flags & TMR_SAMPLE_OFF_CPU) != 0;
    seq_state *s = seq_get(w, seq);
    if (!s || tmr_grow((void **)&w->frame_iids, &w->frame_cap, sizeof *w->frame_iids, (size_t)depth + 2))
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    /* After a loss the reader distrusts this sequence's interning until the
     * next CLEARED packet: start a new generation with this sample. */
    if (prev_dropped) seq_clear(s);
    s->off_cpu = off_cpu;
    int cleared = s->need_clear;
    w->interned.len = 0;
    w->interned.oom = 0;
    /* pcs run leaf to root; Callstack.frame_ids run root to leaf: the
     * truncation mark first, an off-CPU sample's reason last. */
    uint64_t *f = w->frame_iids + truncated;
    if (truncated) w->frame_iids[0] = intern_marker(w, s, KEY_TRUNCATED, TMR_TRUNCATED_FRAME);
    for (uint32_t i = 0; i < depth; i++) f[depth - 1 - i] = intern_frame(w, s, pcs[i], i > 0);
    uint32_t n_frames = depth + (uint32_t)truncated;
    if (off_cpu)
        w->frame_iids[n_frames++] = flags & TMR_SAMPLE_PREEMPTED
                                        ? intern_marker(w, s, KEY_PREEMPTED, TMR_PREEMPTED_FRAME)
                                        : intern_marker(w, s, KEY_BLOCKED, TMR_BLOCKED_FRAME);
    uint64_t cs_iid = n_frames ? intern_callstack(w, s, w->frame_iids, n_frames) : 0;

    wbuf *b = &w->pkt;
    if (prev_dropped) {
        /* The loss gets a packet of its own: readers (Trace Processor's
         * loss state, tracemill's data_losses) act on previous_packet_dropped
         * only when the same packet does not also clear the state. It needs
         * no incremental state, so nothing is skipped because of it. */
        b->len = 0;
        put_uint(b, TM_PF_PACKET_TIMESTAMP, ts_ns);
        put_uint(b, TM_PF_PACKET_SEQUENCE_ID, seq);
        put_uint(b, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, TM_PF_DATA_LOSS_PRESENT);
        tm_status st = emit_packet(w, err);
        if (st != TM_OK) return st; /* the sequence is already marked for clearing */
    }
    b->len = 0;
    put_uint(b, TM_PF_PACKET_TIMESTAMP, ts_ns);
    put_uint(b, TM_PF_PACKET_SEQUENCE_ID, seq);
    put_uint(b, TM_PF_PACKET_SEQUENCE_FLAGS,
             TM_PF_SEQ_NEEDS_INCREMENTAL_STATE | (cleared ? TM_PF_SEQ_INCREMENTAL_STATE_CLEARED : 0));
    if (cleared) put_defaults(w, b, s->off_cpu);
    if (w->interned.len) put_bytes(b, TM_PF_PACKET_INTERNED_DATA, w->interned.p, w->interned.len);
    size_t ps = msg_open(b);
    put_uint(b, TM_PF_PERF_SAMPLE_CPU, cpu);
    put_uint(b, TM_PF_PERF_SAMPLE_PID, (uint64_t)(uint32_t)w->o.pid);
    put_uint(b, TM_PF_PERF_SAMPLE_TID, (uint64_t)(uint32_t)tid);
    if (cs_iid) put_uint(b, TM_PF_PERF_SAMPLE_CALLSTACK_IID, cs_iid);
    put_uint(b, TM_PF_PERF_SAMPLE_CPU_MODE, flags & TMR_SAMPLE_KERNEL ? TM_PF_CPU_MODE_KERNEL : TM_PF_CPU_MODE_USER);
    if (count) put_uint(b, TM_PF_PERF_SAMPLE_TIMEBASE_COUNT, count);
    if (truncated) put_uint(b, TM_PF_PERF_SAMPLE_UNWIND_ERROR, TM_PF_UNWIND_ERROR_MAX_FRAMES_EXCEEDED);
    msg_close(b, TM_PF_PACKET_PERF_SAMPLE, ps);
    if (w->interned.oom) b->oom = 1;
    tm_status st = emit_packet(w, err);
    /* A packet that never reached the reader took its interned entries with
     * it: forget them so that the next packet re-interns from scratch. */
    if (st == TM_OK) s->need_clear = 0;
    else seq_clear(s);
    return st;
}

/* ---- losses ---- */

tm_status tmr_writer_records_lost(tmr_writer *w, uint32_t cpu, uint64_t ts_ns, uint64_t lost, tm_error *err) {
    wbuf *b = &w->pkt;
    own_packet(w, ts_ns);
    size_t ps = msg_open(b);
    put_uint(b, TM_PF_PERF_SAMPLE_CPU, cpu);
    put_uint(b, TM_PF_PERF_SAMPLE_PID, (uint64_t)(uint32_t)w->o.pid);
    put_uint(b, TM_PF_PERF_SAMPLE_KERNEL_RECORDS_LOST, lost);
    msg_close(b, TM_PF_PACKET_PERF_SAMPLE, ps);
    return emit_packet(w, err);
}

tm_status tmr_writer_stats(tmr_writer *w, const tmr_losses *l, tm_error *err) {
    static const tmr_losses none;
    if (!l) l = &none;
    wbuf *b = &w->pkt;
    own_packet(w, now_ns(CLOCK_BOOTTIME));
    size_t ts = msg_open(b);
    uint64_t packet_loss = 0;
    for (uint32_t i = 0; i < l->n_writers; i++) packet_loss += l->writer_samples_lost ? l->writer_samples_lost[i] : 0;
    /* BufferStats has no bytes_discarded field: the discarded chunks say it. */
    size_t bs = msg_open(b);
    put_uint(b, TM_PF_BUFFER_STATS_CHUNKS_OVERWRITTEN, l->chunks_overwritten);
    put_uint(b, TM_PF_BUFFER_STATS_BUFFER_SIZE, (uint64_t)w->o.buffer_kb * 1024);
    put_uint(b, TM_PF_BUFFER_STATS_BYTES_OVERWRITTEN, l->bytes_overwritten);
    put_uint(b, TM_PF_BUFFER_STATS_CHUNKS_DISCARDED, l->chunks_discarded);
    put_uint(b, TM_PF_BUFFER_STATS_TRACE_WRITER_PACKET_LOSS, packet_loss);
    msg_close(b, TM_PF_TRACE_STATS_BUFFER_STATS, bs);
    /* Every sequence writes into buffer 0: readers map sequence losses
     * (previous_packet_dropped) to a buffer through these. */
    for (size_t i = 0; i < w->n_seqs; i++) {
        size_t ws = msg_open(b);
        put_uint(b, TM_PF_WRITER_STATS_SEQUENCE_ID, w->seqs[i].seq);
        put_uint(b, TM_PF_WRITER_STATS_BUFFER, 0);
        msg_close(b, TM_PF_TRACE_STATS_WRITER_STATS, ws);
    }
    for (uint32_t i = 0; i < l->n_writers; i++) {
        int known = 0;
        for (size_t k = 0; k < w->n_seqs && !known; k++) known = l->writer_seq && w->seqs[k].seq == l->writer_seq[i];
        if (known || !l->writer_seq) continue;
        size_t ws = msg_open(b);
        put_uint(b, TM_PF_WRITER_STATS_SEQUENCE_ID, l->writer_seq[i]);
        put_uint(b, TM_PF_WRITER_STATS_BUFFER, 0);
        msg_close(b, TM_PF_TRACE_STATS_WRITER_STATS, ws);
    }
    msg_close(b, TM_PF_PACKET_TRACE_STATS, ts);
    return emit_packet(w, err);
}

/* ---- heap profiles ---- */

static void put_raw(wbuf *b, const wbuf *from) {
    uint8_t *p = room(b, from->len);
    if (!p) return;
    if (from->len) memcpy(p, from->p, from->len);
    b->len += from->len;
}

/* One ProfilePacket holding one ProcessHeapSamples with the HeapSamples
 * gathered in w->heap_samples, and in the same TracePacket the new
 * InternedData entries they use, gathered in w->interned; both buffers are
 * emptied. */
static tm_status heap_packet(tmr_writer *w, seq_state *s, uint64_t ts, const tmr_heap_stats *st, int continued,
                             tm_error *err) {
    wbuf *b = &w->pkt;
    b->len = 0;
    put_uint(b, TM_PF_PACKET_TIMESTAMP, ts);
    put_uint(b, TM_PF_PACKET_SEQUENCE_ID, TMR_HEAP_SEQ);
    put_uint(b, TM_PF_PACKET_SEQUENCE_FLAGS,
             TM_PF_SEQ_NEEDS_INCREMENTAL_STATE | (s->need_clear ? TM_PF_SEQ_INCREMENTAL_STATE_CLEARED : 0));
    if (w->interned.len) put_bytes(b, TM_PF_PACKET_INTERNED_DATA, w->interned.p, w->interned.len);
    size_t pp = msg_open(b);
    size_t d = msg_open(b);
    put_uint(b, TM_PF_HEAP_DUMP_PID, (uint64_t)(uint32_t)w->o.pid);
    /* The preload library starts sampling in its constructor, before main. */
    put_uint(b, TM_PF_HEAP_DUMP_FROM_STARTUP, 1);
    put_uint(b, TM_PF_HEAP_DUMP_TIMESTAMP, now_ns(CLOCK_MONOTONIC_COARSE)); /* heapprofd's clock for it */
    size_t hs = msg_open(b);
    put_uint(b, TM_PF_HEAP_STATS_UNWINDING_ERRORS, st->unwind_errors);
    put_uint(b, TM_PF_HEAP_STATS_HEAP_SAMPLES, st->sampled);
    msg_close(b, TM_PF_HEAP_DUMP_STATS, hs);
    put_str(b, TM_PF_HEAP_DUMP_HEAP_NAME, "libc.malloc");
    /* Samples lost for want of room (too many live ones): the dump's
     * totals are short, and readers count it as a dump with loss. */
    if (st->table_full) put_uint(b, TM_PF_HEAP_DUMP_BUFFER_OVERRAN, 1);
    put_uint(b, TM_PF_HEAP_DUMP_SAMPLING_INTERVAL_BYTES, st->interval);
    put_uint(b, TM_PF_HEAP_DUMP_ORIG_SAMPLING_INTERVAL_BYTES, st->interval);
    put_raw(b, &w->heap_samples);
    msg_close(b, TM_PF_PROFILE_PROCESS_DUMPS, d);
    if (continued) put_uint(b, TM_PF_PROFILE_CONTINUED, 1);
    put_uint(b, TM_PF_PROFILE_INDEX, w->heap_index);
    msg_close(b, TM_PF_PACKET_PROFILE_PACKET, pp);
    if (w->interned.oom || w->heap_samples.oom) b->oom = 1;
    w->interned.len = w->heap_samples.len = 0;
    w->interned.oom = w->heap_samples.oom = 0;
    tm_status rc = emit_packet(w, err);
    /* The index counts packets, as heapprofd's does, so that a reader sees
     * a lost one as a gap. */
    w->heap_index++;
    if (rc == TM_OK) s->need_clear = 0;
    else seq_clear(s);
    return rc;
}

tm_status tmr_writer_heap_dump(tmr_writer *w, uint64_t ts_ns, const tmr_heap_callsite *sites, size_t n,
                               const tmr_heap_stats *st, size_t max_packet, int prev_dropped, tm_error *err) {
    seq_state *s = seq_get(w, TMR_HEAP_SEQ);
    if (!s) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    wbuf *b = &w->pkt;
    if (prev_dropped) {
        /* As for samples: the loss in a packet of its own, then a new generation. */
        seq_clear(s);
        b->len = 0;
        put_uint(b, TM_PF_PACKET_TIMESTAMP, ts_ns);
        put_uint(b, TM_PF_PACKET_SEQUENCE_ID, TMR_HEAP_SEQ);
        put_uint(b, TM_PF_PACKET_PREVIOUS_PACKET_DROPPED, TM_PF_DATA_LOSS_PRESENT);
        TM_TRY(emit_packet(w, err));
    }
    w->interned.len = w->heap_samples.len = 0;
    w->interned.oom = w->heap_samples.oom = 0;
    tm_status rc = TM_OK;
    for (size_t i = 0; i < n && rc == TM_OK; i++) {
        const tmr_heap_callsite *c = &sites[i];
        if (tmr_grow((void **)&w->frame_iids, &w->frame_cap, sizeof *w->frame_iids, c->depth)) {
            rc = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
            break;
        }
        /* Every pc of an allocation's stack is a return address, the
         * innermost one included (the call into malloc). */
        for (uint32_t j = 0; j < c->depth; j++)
            w->frame_iids[c->depth - 1 - j] = c->pcs[j] == TMR_HEAP_TRUNCATED_PC
                                                  ? intern_marker(w, s, KEY_TRUNCATED, TMR_TRUNCATED_FRAME)
                                                  : intern_frame(w, s, c->pcs[j], 1);
        uint64_t cs = c->depth ? intern_callstack(w, s, w->frame_iids, c->depth) : 0;
        wbuf *h = &w->heap_samples;
        size_t e = msg_open(h);
        put_uint(h, TM_PF_HEAP_SAMPLE_CALLSTACK_ID, cs);
        put_uint(h, TM_PF_HEAP_SAMPLE_SELF_ALLOCATED, c->alloc_bytes);
        put_uint(h, TM_PF_HEAP_SAMPLE_SELF_FREED, c->free_bytes);
        put_uint(h, TM_PF_HEAP_SAMPLE_ALLOC_COUNT, c->alloc_count);
        put_uint(h, TM_PF_HEAP_SAMPLE_FREE_COUNT, c->free_count);
        msg_close(h, TM_PF_HEAP_DUMP_SAMPLES, e);
        if (i + 1 < n && w->interned.len + w->heap_samples.len >= max_packet) rc = heap_packet(w, s, ts_ns, st, 1, err);
    }
    if (rc == TM_OK) rc = heap_packet(w, s, ts_ns, st, 0, err);
    return rc;
}

/* ---- memory telemetry ---- */

tm_status tmr_writer_process_stats(tmr_writer *w, tm_error *err) {
    static const struct {
        const char *key;
        uint32_t field;
    } rows[] = {{"VmSize:", TM_PF_PROC_STATS_VM_SIZE_KB},     {"VmRSS:", TM_PF_PROC_STATS_VM_RSS_KB},
                {"RssAnon:", TM_PF_PROC_STATS_RSS_ANON_KB},   {"RssFile:", TM_PF_PROC_STATS_RSS_FILE_KB},
                {"RssShmem:", TM_PF_PROC_STATS_RSS_SHMEM_KB}, {"VmSwap:", TM_PF_PROC_STATS_VM_SWAP_KB},
                {"VmLck:", TM_PF_PROC_STATS_VM_LOCKED_KB},    {"VmHWM:", TM_PF_PROC_STATS_VM_HWM_KB}};
    uint64_t start = now_ns(CLOCK_BOOTTIME);
    wbuf *b = &w->pkt;
    own_packet(w, start);
    size_t ps = msg_open(b);
    size_t p = msg_open(b);
    put_uint(b, TM_PF_PROC_STATS_PID, (uint64_t)(uint32_t)w->o.pid);
    char *text;
    FILE *f = tmr_fopen_own("/proc/self/status", &text);
    if (!f) return tm_fail(err, TM_ERR_IO, 0, NULL, "cannot read /proc/self/status");
    char line[256];
    while (fgets(line, sizeof line, f))
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            size_t n = strlen(rows[i].key);
            if (strncmp(line, rows[i].key, n) == 0) put_uint(b, rows[i].field, strtoull(line + n, NULL, 10));
        }
    fclose(f);
    free(text);
    msg_close(b, TM_PF_PROCESS_STATS_PROCESSES, p);
    put_uint(b, TM_PF_PROCESS_STATS_COLLECTION_END_TIMESTAMP, now_ns(CLOCK_BOOTTIME));
    msg_close(b, TM_PF_PACKET_PROCESS_STATS, ps);
    return emit_packet(w, err);
}
