/*
 * tp.c — decodes a Perfetto trace into the Trace Processor model (tp.h)
 * with Trace Processor's semantics.
 *
 * Two passes, as Trace Processor's tokenizer and parser:
 *  1. Tokenize, in file order: sequences, incremental state, packet
 *     defaults, interned data, clock snapshots, trace stats and config;
 *     every packet's timestamp converted to trace time. Samples go straight
 *     into the sample columns with a reference to their bytes and their
 *     sequence generation; other payloads that make rows (process trees,
 *     descriptors) into a small list of events.
 *  2. Parse, in timestamp order (a stable sort; file order breaks ties):
 *     processes and threads, per-process mappings, frames, callsites,
 *     sessions, counters, contexts — so row ids come out as Trace
 *     Processor numbers them.
 *
 * Packets, sequences, generations and interned data come from the one
 * Perfetto reader (perfetto/reader.h): interned data stays where it is in
 * the input (or in inflated buffers in the arena), and a lookup from a
 * packet sees the first entry of its epoch that was added no later than the
 * packet's generation — the view Trace Processor's per-generation state
 * gives, without copying it. The row caches here are keyed by generation.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/limits.h"
#include "perfetto/fields.h"
#include "perfetto/heap.h"   /* heapprofd dumps */
#include "perfetto/reader.h" /* tm_pf_reader: packets, sequences, interning */
#include "wire/pb.h"
#define TM_TP_STATS_TABLE /* the catalogue itself lives here */
#include "tp/tp.h"
#include "tp/tp_symbols.h" /* ModuleSymbols, DeobfuscationMapping */
#include "tp/tp_packages.h" /* PackagesList */

/* ---- small vectors ----------------------------------------------------- */

#define PUSH(tp, vec, out)                                                                   \
    (((tp)->n_##vec == (tp)->cap_##vec &&                                                  \
      tm_vec_grow((tp)->mem, (void **)&(tp)->vec, &(tp)->cap_##vec, sizeof *(tp)->vec,      \
                  (tp)->n_##vec + 1) != TM_OK)                                              \
         ? TM_ERR_NOMEM                                                                     \
         : ((out) = &(tp)->vec[(tp)->n_##vec++], memset((out), 0, sizeof *(out)), TM_OK))

static const tm_str no_str = {NULL, 0};
static const tm_str empty_str = {(const uint8_t *)"", 0};

/* ---- decoder state ------------------------------------------------------ */

/* The rows a sequence generation's mapping, frame and callstack iids
 * resolved to for one process (upid): Trace Processor resolves afresh in
 * each generation (a mapping of a process gets a new row each time, and so
 * its frames and callsites). A lookup is an array load by iid; the set goes
 * when its generation's last sample is parsed, as its callsite trie. */
typedef struct row_set {
    uint32_t gen, upid;
    uint32_t next;        /* its generation's set of another upid; TM_ABSENT: none */
    tm_iidmap rows[3];    /* CK_MAPPING, CK_FRAME, CK_CALLSTACK: iid -> row */
} row_set;

/* What the model keeps per sequence, beside the reader's tm_pf_seq (same
 * index). */
typedef struct seq_state {
    uint32_t id;
    uint32_t session;     /* TP_NULL until its first perf or stack sample */
    uint32_t buffer;      /* TP_NULL unless trace_stats.writer_stats names it */
    bool needs_accepted;  /* a SEQ_NEEDS packet was parsed */
    bool needs_skipped;   /* a SEQ_NEEDS packet was skipped */
    uint32_t packet_losses;
    uint32_t loss_reasons[9]; /* per DataLossReason bit */
    /* Legacy ThreadDescriptor time base of StreamingProfilePacket. */
    int64_t pid, tid;
    bool has_thread;
    int64_t track_time_ns;
    bool has_track_time;
} seq_state;

/* Row caches of a generation: (kind, gen, upid, iid) -> row; a sequence's
 * mappings, frames and callstacks are in row sets, everything else (and
 * what a ProfilePacket's own tables resolve to) here. */
enum { CK_MAPPING = 1, CK_FRAME = 2, CK_CALLSTACK = 3, CK_TASK = 4, CK_EXEC = 5, CK_ASYNC = 6 };
typedef struct cache_ent {
    uint32_t kind, gen, upid;
    uint64_t iid;
    uint32_t row;
} cache_ent;

typedef struct stat_ent {
    uint32_t key, machine;
    int64_t idx, value;
} stat_ent;

/* The callsites of one generation (see dec.cs_tries): node i is the i-th
 * it made. A node's children are a list (first_child, next_sibling) until
 * it has CS_WIDE_AT of them, then in `wide` (a callstack's first frames
 * fan out to thousands). */
typedef struct cs_node {
    uint32_t row, frame;
    uint32_t first_child;  /* CS_NO_NODE, or CS_WIDE: the children are in wide */
    uint32_t next_sibling; /* CS_NO_NODE: the last */
} cs_node;

typedef struct cs_trie {
    cs_node *nodes; size_t n, cap;
    tm_u64map entry; /* (shared parent row, or TP_NULL, << 32 | frame) -> node: where callstacks enter */
    tm_u64map wide;  /* (node << 32 | frame) -> child node, under parents of many children */
} cs_trie;

/* Where a callstack walk is: its callsite row and, when a generation owns
 * that callsite, the generation's trie and its node there (trie TP_NULL: a
 * shared callsite, or the root, row TP_NULL). */
typedef struct cs_at {
    uint32_t row, trie, node;
} cs_at;

/* What a PerfSample's (pid, tid, cpu, mode, unwind error, session) made
 * last: its thread, process, task, execution context and attributes. Those
 * rows are deduplicated and never change, but which thread a (tid, pid)
 * names changes when a thread or process is made: the memo holds while the
 * count of both is what it was (`version`, + 1; 0: empty). */
typedef struct ctx_memo {
    uint64_t tid, pid;
    const char *mode;
    uint32_t cpu, session, unwind;
    size_t version;
    uint32_t utid, upid, task, exec, attr;
} ctx_memo;

/* Events that make rows other than samples. */
enum { EV_PROCESS_TREE = 2, EV_PROCESS_STATS = 9, EV_PROFILE_PACKET = 37, EV_PROCESS_DESC = 43, EV_THREAD_DESC = 44, EV_TRACK_DESC = 60 };
typedef struct event {
    int64_t ts;
    size_t order;         /* samples pushed before it (file order) */
    uint32_t kind;
    uint32_t gen;         /* EV_PROFILE_PACKET: the generation it saw */
    tm_bytes msg;
} event;

/* What a sample row refers to until it is parsed: the payload's length
 * prefix (PerfSample, StackSample), or the callstack iid (Chrome). */
typedef union sample_ref {
    const uint8_t *payload;
    uint64_t iid;
} sample_ref;

#define GEN_PINNED UINT32_MAX
#define GEN_DONE (UINT32_MAX - 1)

typedef struct dec {
    tm_tp *tp;
    tm_mem *mem;
    const tm_limits *lim;
    tm_error *err;
    tm_pf_reader rd;

    seq_state *seqs; size_t n_seqs, cap_seqs; /* by the reader's sequence index */
    cache_ent *cache; size_t n_cache, cap_cache; tm_idxset cache_set;
    row_set *sets; size_t n_sets, cap_sets;
    tm_u64map set_by_key;  /* gen << 32 | upid -> row set */
    tm_iidmap set_by_gen;  /* gen -> its newest row set (the others chained by next) */
    uint32_t set_memo[TM_TP_SET_MEMO]; /* sets looked up lately, by a hash of (gen, upid); TM_ABSENT: none */
    stat_ent *stats; size_t n_stats, cap_stats;
    int64_t single[TPS_COUNT];
    event *events; size_t n_events, cap_events;

    /* Sample columns while tokenizing: s_ref says what to parse (it stays
     * in file order: parsing reads it through s_order); the callsite column
     * holds the generation until parsing turns it into the callsite; the
     * task column the pending thread key of Chrome samples. */
    sample_ref *s_ref;
    size_t cap_ref;
    uint32_t *s_order;     /* file order, only after a reordering sort */
    size_t n_order;        /* its rows: the samples before parsing dropped any */

    /* Pending threads of Chrome samples: (pid, tid). */
    int64_t (*pend)[2]; size_t n_pend, cap_pend; tm_u64map pend_by_key;

    /* Samples parsed into rows so far (the measure of rows_promised for callsites). */
    size_t samples_parsed;

    uint32_t trace_buffers_fill[64]; uint32_t n_buffers;
    uint64_t machine_raw[16];
    bool write_into_file; uint64_t file_write_period_ms;
    /* The trace's own UUID: a TraceUuid packet's wins over TraceConfig's. */
    uint64_t uuid_msb, uuid_lsb;
    bool uuid_from_packet, uuid_from_config;

    /* Parse-time row indexes. */
    tm_u64map proc_by_pid, thread_by_tid;
    ctx_memo perf_memo[TM_TP_CONTEXT_MEMO];
    /* Per pending Chrome thread: its (thread, process, task) and the
     * version it was made at, as perf_memo. */
    ctx_memo *chrome_memo; size_t n_chrome_memo;
    uint32_t kind_attr[2]; /* the placeholder attributes of StackSample, PerfSample; TM_ABSENT: not made */
    tm_idxset frame_set, global_map_set, exec_set, attr_set, task_set;
    uint32_t dummy_mapping;
    /* Callsite dedup by (parent, frame). A process's mapping is a new row
     * in every generation, so a callsite of its frames, and every callsite
     * below one, can only be reached from that generation: the generation's
     * cs_trie holds them, each under its parent. A callstack is walked from
     * its root, so a lookup reads the parent's node, which the step before
     * has just read, instead of probing a table of every callsite (each
     * probe a memory miss). Callsites of shared mappings' frames under
     * shared callsites (or at the root) go to cs_shared. */
    uint32_t *mapping_owner; size_t cap_mapping_owner; /* generation, or TP_NULL: shared */
    uint32_t *frame_owner; size_t cap_frame_owner;
    tm_u64map cs_shared; /* (parent << 32 | frame) -> row */
    cs_trie *cs_tries; size_t n_cs_tries, cap_cs_tries;
    tm_iidmap cs_trie_by_gen;  /* CS_TRIE_FREED once the generation's last sample is parsed */
    /* Per (sequence, epoch): its generations with samples left (GEN_PINNED:
     * one is pinned); at 0 the reader lets the epoch's entries go. */
    tm_u64map epoch_slot; uint32_t *epoch_gens_left; size_t n_epoch_slots, cap_epoch_slots;
    cs_trie spare_trie;        /* the largest trie done with, emptied: the next one starts in its memory */
    size_t trie_hint;          /* the most nodes a trie done with had: a trie made without a spare starts with room
                                  for as many (not regrown, and copied, a dozen times) */
    uint32_t *gen_samples_left; /* per generation; GEN_PINNED: something else resolves in it too;
                                   GEN_DONE: its last sample was parsed */
    size_t n_gen_samples_left;
    uint64_t *cs_ids; size_t cap_cs_ids; /* the frame ids of the callstack being resolved */
    /* Which of the last 64 callstack resolutions were not in the caches
     * (a bit each, newest lowest) and how many: parse_all asks for the
     * callstacks of samples ahead only while some are not. */
    uint64_t cs_recent; uint32_t cs_misses;
    uint32_t art_mapping; /* "art_process_metadata", made with its first frame */
    tm_pf_symbols syms;   /* applied once every frame exists */

    /* heapprofd dumps; while a dump's callstack is resolved in its
     * ProfilePacket's own tables, `local` is set and generations carry
     * LOCAL_GEN (caches then key by the tables' serial). */
    tm_pf_heap heap;
    const tm_pf_heap_tables *local;
    tm_u64map proc_track; /* (upid, ProcessStats.Process field) -> process counter track */
} dec;

#define LOCAL_GEN 0x80000000u

static uint64_t off_of(const dec *d, const uint8_t *at) { return tm_pf_offset(&d->rd, at); }
static tm_status nomem(dec *d) { return tm_fail(d->err, TM_ERR_NOMEM, 0, NULL, "out of memory"); }
static tm_status pb_fail(dec *d, const tm_pb_reader *r, const char *where) { return tm_pf_pb_fail(&d->rd, r, where); }

/* A symbol walker's status as an error: a malformed payload names its byte. */
static tm_status symbols_status(dec *d, tm_status st, const tm_pf_walk_error *bad) {
    if (st == TM_ERR_MALFORMED) return tm_pf_fail(&d->rd, st, bad->at.p, "malformed %s: %s", bad->where, bad->at.err);
    return st == TM_OK ? TM_OK : nomem(d);
}

static void stat_add(dec *d, uint32_t key, int64_t v) { d->single[key] += v; }

static tm_status stat_set_idx(dec *d, uint32_t key, uint32_t machine, int64_t idx, int64_t v, bool add) {
    for (size_t i = 0; i < d->n_stats; i++) {
        stat_ent *s = &d->stats[i];
        if (s->key == key && s->machine == machine && s->idx == idx) {
            s->value = add ? s->value + v : v;
            return TM_OK;
        }
    }
    if (d->n_stats == d->cap_stats &&
        tm_vec_grow(d->mem, (void **)&d->stats, &d->cap_stats, sizeof *d->stats, d->n_stats + 1) != TM_OK)
        return nomem(d);
    d->stats[d->n_stats++] = (stat_ent){key, machine, idx, v};
    return TM_OK;
}

/* ---- interning ------------------------------------------------------------ */

/* The interned message of a kind and iid a packet of generation gen sees. */
static bool lookup(const dec *d, uint32_t gen, uint32_t kind, uint64_t iid, tm_bytes *out) {
    if (gen & LOCAL_GEN) return tm_pf_heap_lookup(d->local, kind, iid, out);
    return tm_pf_lookup(&d->rd, gen, kind, iid, out);
}

static const tm_pf_gen *gen_of(const dec *d, uint32_t gen) { return tm_pf_gen_of(&d->rd, gen); }

/* The string of an InternedString entry (field 2). */
static bool interned_str(const dec *d, uint32_t gen, uint32_t kind, uint64_t iid, tm_str *out) {
    if (gen & LOCAL_GEN ? !tm_pf_heap_lookup_str(d->local, kind, iid, out) : !tm_pf_lookup_str(&d->rd, gen, kind, iid, out))
        return false;
    if (!out->len) *out = empty_str;
    return true;
}

/* ---- caches and rows ------------------------------------------------------ */

static int cache_eq(const void *ctx, uint32_t idx, const void *key) {
    const cache_ent *a = &((const dec *)ctx)->cache[idx], *b = key;
    return a->kind == b->kind && a->gen == b->gen && a->upid == b->upid && a->iid == b->iid;
}
static uint32_t cache_hash(const cache_ent *k) {
    return (uint32_t)tm_hash_u64(k->iid ^ ((uint64_t)k->gen << 24) ^ ((uint64_t)k->upid << 44) ^ k->kind);
}
/* Where (gen, upid) is in set_memo: samples of a few threads interleave. */
static uint32_t set_slot(uint32_t gen, uint32_t upid) {
    return (uint32_t)(((uint64_t)gen << 20 ^ upid) * 0x9e3779b97f4a7c15ull >> 32) & (TM_TP_SET_MEMO - 1);
}

/* The row set of (gen, upid), or NULL; only for what row sets hold. */
static row_set *set_of(dec *d, uint32_t gen, uint32_t upid) {
    uint32_t *memo = &d->set_memo[set_slot(gen, upid)];
    if (*memo != TM_ABSENT && d->sets[*memo].gen == gen && d->sets[*memo].upid == upid) return &d->sets[*memo];
    uint32_t i = tm_u64map_get(&d->set_by_key, (uint64_t)gen << 32 | upid);
    if (i == TM_ABSENT) return NULL;
    *memo = i;
    return &d->sets[i];
}

static bool in_sets(uint32_t kind, uint32_t gen) { return !(gen & LOCAL_GEN) && kind <= CK_CALLSTACK; }

static uint32_t cache_get(dec *d, uint32_t kind, uint32_t gen, uint32_t upid, uint64_t iid) {
    if (in_sets(kind, gen)) {
        const row_set *rs = set_of(d, gen, upid);
        return rs ? tm_iidmap_get(&rs->rows[kind - CK_MAPPING], iid) : TM_ABSENT;
    }
    cache_ent k = {kind, gen, upid, iid, 0};
    uint32_t i = tm_idxset_find(&d->cache_set, cache_hash(&k), cache_eq, d, &k);
    return i == TM_ABSENT ? TM_ABSENT : d->cache[i].row;
}

/* The row set of (gen, upid), made if absent. */
static tm_status new_set(dec *d, uint32_t gen, uint32_t upid, row_set **out) {
    if (d->n_sets >= TM_ABSENT - 1 || TM_VEC_RESERVE(d->mem, d->sets, d->cap_sets, d->n_sets + 1) != TM_OK)
        return nomem(d);
    uint32_t i = (uint32_t)d->n_sets;
    row_set *rs = &d->sets[i];
    memset(rs, 0, sizeof *rs);
    rs->gen = gen, rs->upid = upid;
    rs->next = tm_iidmap_get(&d->set_by_gen, gen);
    if (tm_u64map_put(d->mem, &d->set_by_key, (uint64_t)gen << 32 | upid, i) != TM_OK ||
        tm_iidmap_put(d->mem, &d->set_by_gen, gen, i, (size_t)d->rd.n_gens + 1) != TM_OK)
        return nomem(d);
    d->n_sets++;
    d->set_memo[set_slot(gen, upid)] = i;
    *out = rs;
    return TM_OK;
}

static tm_status cache_put(dec *d, uint32_t kind, uint32_t gen, uint32_t upid, uint64_t iid, uint32_t row) {
    if (in_sets(kind, gen)) {
        row_set *rs = set_of(d, gen, upid);
        if (!rs) TM_TRY(new_set(d, gen, upid, &rs));
        size_t bound = (size_t)d->rd.seqs[gen_of(d, gen)->seq].n_interned + 1;
        return tm_iidmap_put(d->mem, &rs->rows[kind - CK_MAPPING], iid, row, bound) == TM_OK ? TM_OK : nomem(d);
    }
    if (d->n_cache == d->cap_cache &&
        tm_vec_grow(d->mem, (void **)&d->cache, &d->cap_cache, sizeof *d->cache, d->n_cache + 1) != TM_OK)
        return nomem(d);
    cache_ent k = {kind, gen, upid, iid, row};
    d->cache[d->n_cache] = k;
    if (tm_idxset_add(d->mem, &d->cache_set, cache_hash(&k), (uint32_t)d->n_cache) != TM_OK) return nomem(d);
    d->n_cache++;
    return TM_OK;
}

/* A NUL-terminated copy of s[0..n) in the trace's arena. */
static tm_status arena_str(dec *d, const char *s, size_t n, tm_str *out) {
    char *p = tm_arena_alloc(&d->tp->arena, n + 1);
    if (!p) return nomem(d);
    memcpy(p, s, n);
    p[n] = 0;
    *out = (tm_str){(const uint8_t *)p, n};
    return TM_OK;
}

/* Processes and threads (Trace Processor's ProcessTracker). */
static tm_status new_thread(dec *d, int64_t tid, uint32_t upid, int is_main, uint32_t *out) {
    tp_thread *t;
    if (PUSH(d->tp, threads, t) != TM_OK) return nomem(d);
    t->tid = tid;
    t->upid = upid;
    t->is_main = (int8_t)is_main;
    *out = (uint32_t)(d->tp->n_threads - 1);
    if (tm_u64map_put(d->mem, &d->thread_by_tid, (uint64_t)tid, *out) != TM_OK) return nomem(d);
    return TM_OK;
}

static tm_status process_of(dec *d, int64_t pid, uint32_t *out) {
    uint32_t p = tm_u64map_get(&d->proc_by_pid, (uint64_t)pid);
    if (p != TM_ABSENT) {
        *out = p;
        return TM_OK;
    }
    tp_process *pr;
    if (PUSH(d->tp, processes, pr) != TM_OK) return nomem(d);
    pr->pid = pid;
    pr->uid = TP_NO_INT;
    pr->parent_upid = TP_NULL;
    p = (uint32_t)(d->tp->n_processes - 1);
    if (tm_u64map_put(d->mem, &d->proc_by_pid, (uint64_t)pid, p) != TM_OK) return nomem(d);
    uint32_t main_thread;
    TM_TRY(new_thread(d, pid, p, 1, &main_thread));
    *out = p;
    return TM_OK;
}

/* UpdateThread(tid, pid): the thread of tid in process pid. */
static tm_status thread_of(dec *d, int64_t tid, int64_t pid, uint32_t *utid, uint32_t *upid) {
    uint32_t p;
    TM_TRY(process_of(d, pid, &p));
    uint32_t t = tm_u64map_get(&d->thread_by_tid, (uint64_t)tid);
    if (t != TM_ABSENT) {
        tp_thread *th = &d->tp->threads[t];
        if (th->upid == TP_NULL) th->upid = p;
        if (th->upid == p) {
            *utid = t;
            *upid = p;
            return TM_OK;
        }
    }
    TM_TRY(new_thread(d, tid, p, tid == pid, &t));
    *utid = t;
    *upid = p;
    return TM_OK;
}

/* What a memo of thread_of's answer holds while it is unchanged (+ 1). */
static size_t threads_version(const dec *d) { return d->tp->n_threads + d->tp->n_processes + 1; }

static void name_thread(dec *d, uint32_t utid, tm_str name, uint32_t prio) {
    tp_thread *t = &d->tp->threads[utid];
    if (!name.len || (t->name.data && prio < t->name_prio)) return;
    t->name = name;
    t->name_prio = prio;
}
static void name_process(dec *d, uint32_t upid, tm_str name, uint32_t prio) {
    tp_process *p = &d->tp->processes[upid];
    if (!name.len || (p->name.data && prio < p->name_prio)) return;
    p->name = name;
    p->name_prio = prio;
}

/* ---- clocks ---------------------------------------------------------------- */

/* ---- tokenizer ------------------------------------------------------------- */

/* The model's state of the packet's sequence, made on its first packet. */
static tm_status seq_of(dec *d, const tm_pf_seq *ps, seq_state **out) {
    while (d->n_seqs <= ps->index) {
        if (d->n_seqs == d->cap_seqs &&
            tm_vec_grow(d->mem, (void **)&d->seqs, &d->cap_seqs, sizeof *d->seqs, d->n_seqs + 1) != TM_OK)
            return nomem(d);
        seq_state *s = &d->seqs[d->n_seqs++];
        memset(s, 0, sizeof *s);
        s->session = TP_NULL;
        s->buffer = TP_NULL;
    }
    *out = &d->seqs[ps->index];
    (*out)->id = ps->id;
    return TM_OK;
}

/* The payload's length prefix, which sample rows keep. */
static const uint8_t *payload_prefix(const tm_pf_packet *k) {
    return k->data_tag + (k->data_field < 16 ? 1 : 2);
}

static tm_status push_event(dec *d, int64_t ts, uint32_t kind, uint32_t gen, tm_bytes msg) {
    if (d->n_events == d->cap_events &&
        tm_vec_grow(d->mem, (void **)&d->events, &d->cap_events, sizeof *d->events, d->n_events + 1) != TM_OK)
        return nomem(d);
    d->events[d->n_events++] = (event){ts, d->tp->n_samples, kind, gen, msg};
    return TM_OK;
}

enum { ROWS_BEFORE_ESTIMATE = 1 << 16 };

/* Past the first 64 Ki rows of a table the rest of the work is taken to be
 * like what is done (done of total: bytes of the file read, samples
 * parsed): the rows it promises (and an eighth), at most 16 times those
 * there and at most limit; 0 before that. */
static size_t rows_promised(size_t n, uint64_t done, uint64_t total, uint64_t limit) {
    if (n < ROWS_BEFORE_ESTIMATE || done == 0 || done > total) return 0;
    double promised = (double)n * (double)total / (double)done * 1.125;
    if (promised > 16.0 * (double)n) promised = 16.0 * (double)n;
    return promised < (double)limit ? (size_t)promised : (size_t)limit;
}

/* Each column to room for `need` rows. It grows in place where it can (a
 * large block is remapped, not copied into fresh pages) and keeps its own
 * capacity, so that a failure halfway leaves every column freed with its
 * own size. */
static tm_status grow_columns(dec *d, size_t need) {
    tm_tp *tp = d->tp;
    if (tm_vec_grow(d->mem, (void **)&tp->s_ts, &tp->cap_ts, sizeof *tp->s_ts, need) != TM_OK ||
        tm_vec_grow(d->mem, (void **)&d->s_ref, &d->cap_ref, sizeof *d->s_ref, need) != TM_OK ||
        tm_vec_grow(d->mem, (void **)&tp->s_callsite, &tp->cap_callsite, sizeof *tp->s_callsite, need) != TM_OK ||
        tm_vec_grow(d->mem, (void **)&tp->s_task, &tp->cap_task, sizeof *tp->s_task, need) != TM_OK ||
        tm_vec_grow(d->mem, (void **)&tp->s_attr, &tp->cap_attr, sizeof *tp->s_attr, need) != TM_OK)
        return TM_ERR_NOMEM;
    return TM_OK;
}

/* Room for one more sample row (at: the packet, for the error offset): at
 * once for the samples the trace promises, instead of doubling several
 * times, each time into pages faulted in one by one; else one more. */
static tm_status grow_samples(dec *d, const uint8_t *at) {
    tm_tp *tp = d->tp;
    if (tp->n_samples >= d->lim->max_samples)
        return tm_fail(d->err, TM_ERR_LIMIT, off_of(d, at), NULL, "more than %llu samples",
                       (unsigned long long)d->lim->max_samples);
    /* the file read so far ends after the packet in hand, or after the compressed one it was inflated from */
    const uint8_t *read = d->rd.outer.p;
    size_t need = tp->n_samples + 1,
           promised = read ? rows_promised(tp->n_samples, (uint64_t)(read - d->rd.base), d->rd.len, d->lim->max_samples)
                           : 0;
    if ((promised <= need || grow_columns(d, promised) != TM_OK) && grow_columns(d, need) != TM_OK) return nomem(d);
    size_t cap = d->cap_ref;
    const size_t caps[] = {tp->cap_ts, tp->cap_callsite, tp->cap_task, tp->cap_attr};
    for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) cap = caps[c] < cap ? caps[c] : cap;
    tp->cap_samples = cap;
    return TM_OK;
}

static inline tm_status push_sample(dec *d, int64_t ts, sample_ref ref, const uint8_t *at, uint32_t gen, uint32_t task,
                                    uint32_t attr) {
    tm_tp *tp = d->tp;
    if (TM_UNLIKELY(tp->n_samples >= d->lim->max_samples || tp->n_samples == tp->cap_samples))
        TM_TRY(grow_samples(d, at));
    size_t i = tp->n_samples++;
    tp->s_ts[i] = ts;
    d->s_ref[i] = ref;
    tp->s_callsite[i] = gen;
    tp->s_task[i] = task;
    tp->s_attr[i] = attr;
    return TM_OK;
}

/* Sample attributes are deduplicated; kind-only placeholders are filled in
 * when the sample is parsed. */
static int attr_eq(const void *ctx, uint32_t idx, const void *key) {
    return memcmp(&((const tm_tp *)ctx)->attrs[idx], key, sizeof(tp_sample_attr)) == 0;
}
static tm_status attr_of(dec *d, uint8_t kind, uint8_t unwind, uint32_t exec, uint32_t session, int32_t prio,
                         uint32_t *out) {
    tp_sample_attr key;
    memset(&key, 0, sizeof key);
    key.kind = kind, key.unwind_error = unwind, key.exec = exec, key.session = session, key.priority = prio;
    uint32_t h = (uint32_t)tm_hash_u64(((uint64_t)exec << 32 | session) ^ ((uint64_t)kind << 56) ^
                                       ((uint64_t)unwind << 48) ^ (uint64_t)(uint32_t)prio * 31);
    uint32_t i = tm_idxset_find(&d->attr_set, h, attr_eq, d->tp, &key);
    if (i == TM_ABSENT) {
        tp_sample_attr *a;
        if (PUSH(d->tp, attrs, a) != TM_OK) return nomem(d);
        *a = key;
        i = (uint32_t)(d->tp->n_attrs - 1);
        if (tm_idxset_add(d->mem, &d->attr_set, h, i) != TM_OK) return nomem(d);
    }
    *out = i;
    return TM_OK;
}

static tm_status pending_thread(dec *d, int64_t pid, int64_t tid, uint32_t *out) {
    uint64_t key = (uint64_t)(uint32_t)pid << 32 | (uint32_t)tid;
    uint32_t i = tm_u64map_get(&d->pend_by_key, key);
    if (i == TM_ABSENT) {
        if (d->n_pend == d->cap_pend &&
            tm_vec_grow(d->mem, (void **)&d->pend, &d->cap_pend, sizeof *d->pend, d->n_pend + 1) != TM_OK)
            return nomem(d);
        d->pend[d->n_pend][0] = pid;
        d->pend[d->n_pend][1] = tid;
        i = (uint32_t)d->n_pend++;
        if (tm_u64map_put(d->mem, &d->pend_by_key, key, i) != TM_OK) return nomem(d);
    }
    *out = i;
    return TM_OK;
}

/* The bytes of a message from one field's first occurrence to the end of
 * its last (both NULL: none), for a repeated field's iterator. */
typedef struct field_span {
    const uint8_t *start, *end;
} field_span;

static void span_add(field_span *sp, const tm_pb_field *f, const uint8_t *after) {
    if (!sp->start) sp->start = f->start;
    sp->end = after;
}
static tm_bytes span_bytes(field_span sp) { return (tm_bytes){sp.start, sp.start ? (size_t)(sp.end - sp.start) : 0}; }

static tm_status on_streaming(dec *d, seq_state *s, const tm_pf_packet *k) {
    if (!s->has_thread || !s->has_track_time) return TM_OK;
    int64_t prio = 0;
    tm_pb_reader r = tm_pb_reader_of(k->data);
    tm_pb_field f;
    int rc;
    /* Where the callstack iids and the deltas are, from each one's first
     * field to the end of its last: writers put each field's values
     * together (unpacked), and an iterator over the whole message would step
     * over all of the other's fields. */
    field_span iid_span = {NULL, NULL}, delta_span = {NULL, NULL};
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_STREAMING_PROCESS_PRIORITY && f.wire == TM_PB_VARINT) prio = (int32_t)f.val;
        if (f.num == TM_PF_STREAMING_CALLSTACK_IID) span_add(&iid_span, &f, r.p);
        if (f.num == TM_PF_STREAMING_TIMESTAMP_DELTA_US) span_add(&delta_span, &f, r.p);
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "streaming_profile_packet");
    uint32_t attr, task = TP_NULL;
    TM_TRY(attr_of(d, TP_SRC_CHROME, 0, TP_NULL, TP_NULL, (int32_t)prio, &attr));
    TM_TRY(pending_thread(d, s->pid, s->tid, &task));
    int64_t base;
    bool ok, wrapped;
    TM_TRY(tm_pf_to_trace_time(&d->rd, tm_pf_clock_key(s->id, TM_PF_BUILTIN_CLOCK_MONOTONIC), s->track_time_ns, true,
                               &base, &ok, &wrapped));
    if (!ok) base = s->track_time_ns;
    /* The callstack iids and the deltas, side by side. */
    tm_pb_repeated iids = tm_pb_repeated_of(span_bytes(iid_span), TM_PF_STREAMING_CALLSTACK_IID),
                   deltas = tm_pb_repeated_of(span_bytes(delta_span), TM_PF_STREAMING_TIMESTAMP_DELTA_US);
    int64_t acc = 0;
    for (;;) {
        uint64_t iid = 0, delta = 0;
        int has_iid = tm_pb_repeated_next(&iids, &iid);
        if (has_iid == TM_PB_ERROR) return pb_fail(d, &iids.msg, "streaming_profile_packet.callstack_iid");
        int has_delta = tm_pb_repeated_next(&deltas, &delta);
        if (has_delta == TM_PB_ERROR) return pb_fail(d, &deltas.msg, "streaming_profile_packet.timestamp_delta_us");
        if (has_delta == TM_PB_DONE) {
            if (has_iid == TM_PB_OK) stat_add(d, TPS_stackprofile_parser_error, 1);
            break;
        }
        /* Trace Processor's int64 arithmetic wraps on absurd deltas; the
         * same in unsigned arithmetic, which C defines */
        acc = (int64_t)((uint64_t)acc + delta * 1000u);
        s->track_time_ns = (int64_t)((uint64_t)s->track_time_ns + delta * 1000u);
        if (has_iid == TM_PB_DONE) continue; /* trailing deltas still advance the time */
        int64_t ts = (int64_t)((uint64_t)base + (uint64_t)acc);
        if (ts < 0) {
            stat_add(d, TPS_streaming_profile_invalid_timestamp, 1);
            continue;
        }
        TM_TRY(push_sample(d, ts, (sample_ref){.iid = iid}, k->start, k->gen, task, attr));
    }
    return TM_OK;
}

static tm_status on_trace_config(dec *d, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    uint64_t msb = 0, lsb = 0;
    d->n_buffers = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_CONFIG_BUFFERS && f.wire == TM_PB_LEN) {
            uint32_t fill = 0;
            tm_pb_reader c = tm_pb_reader_of(f.bytes);
            tm_pb_field g;
            while (tm_pb_next(&c, &g) == TM_PB_OK)
                if (g.num == TM_PF_BUFFER_CONFIG_FILL_POLICY && g.wire == TM_PB_VARINT) fill = (uint32_t)g.val;
            if (d->n_buffers < 64) d->trace_buffers_fill[d->n_buffers++] = fill;
        }
        if (f.num == TM_PF_CONFIG_WRITE_INTO_FILE && f.wire == TM_PB_VARINT) d->write_into_file = f.val != 0;
        if (f.num == TM_PF_CONFIG_FILE_WRITE_PERIOD_MS && f.wire == TM_PB_VARINT) d->file_write_period_ms = f.val;
        if (f.num == TM_PF_CONFIG_TRACE_UUID_MSB && f.wire == TM_PB_VARINT) msb = f.val;
        if (f.num == TM_PF_CONFIG_TRACE_UUID_LSB && f.wire == TM_PB_VARINT) lsb = f.val;
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "trace_config");
    /* Trace Processor takes a config's UUID only when the trace has no
     * TraceUuid packet, and a zero one never. */
    if ((msb || lsb) && !d->uuid_from_packet) {
        d->uuid_msb = msb, d->uuid_lsb = lsb;
        d->uuid_from_config = true;
    }
    return TM_OK;
}

static void on_trace_uuid(dec *d, tm_bytes b) {
    uint64_t msb = 0, lsb = 0;
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) { /* checked against its schema by the reader */
        if (f.num == TM_PF_TRACE_UUID_MSB) msb = f.val;
        if (f.num == TM_PF_TRACE_UUID_LSB) lsb = f.val;
    }
    if (!msb && !lsb) return;
    d->uuid_msb = msb, d->uuid_lsb = lsb;
    d->uuid_from_packet = true;
}

/* TraceStats.BufferStats field -> traced_buf_<name> key. */
static const struct { uint32_t field; uint32_t key; } buffer_stat_keys[] = {
    {1, TPS_traced_buf_bytes_written}, {2, TPS_traced_buf_chunks_written},
    {3, TPS_traced_buf_chunks_overwritten}, {4, TPS_traced_buf_write_wrap_count},
    {5, TPS_traced_buf_patches_succeeded}, {6, TPS_traced_buf_patches_failed},
    {7, TPS_traced_buf_readaheads_succeeded}, {8, TPS_traced_buf_readaheads_failed},
    {9, TPS_traced_buf_abi_violations}, {10, TPS_traced_buf_chunks_rewritten},
    {11, TPS_traced_buf_chunks_committed_out_of_order}, {12, TPS_traced_buf_buffer_size},
    {13, TPS_traced_buf_bytes_overwritten}, {14, TPS_traced_buf_bytes_read},
    {15, TPS_traced_buf_padding_bytes_written}, {16, TPS_traced_buf_padding_bytes_cleared},
    {17, TPS_traced_buf_chunks_read}, {18, TPS_traced_buf_chunks_discarded},
    {19, TPS_traced_buf_trace_writer_packet_loss}, {20, TPS_traced_buf_chunks_relocated},
};
static const struct { uint32_t field; uint32_t key; } trace_stat_keys[] = {
    {2, TPS_traced_producers_connected}, {3, TPS_traced_producers_seen},
    {4, TPS_traced_data_sources_registered}, {5, TPS_traced_data_sources_seen},
    {6, TPS_traced_tracing_sessions}, {7, TPS_traced_total_buffers},
    {8, TPS_traced_chunks_discarded}, {9, TPS_traced_patches_discarded},
    {12, TPS_traced_flushes_requested}, {13, TPS_traced_flushes_succeeded},
    {14, TPS_traced_flushes_failed},
};
static const struct { uint32_t field; uint32_t key; } filter_stat_keys[] = {
    {1, TPS_filter_input_packets}, {2, TPS_filter_input_bytes}, {3, TPS_filter_output_bytes},
    {4, TPS_filter_errors}, {5, TPS_filter_time_taken_ns},
};

static tm_status on_trace_stats(dec *d, tm_bytes b, uint32_t machine) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    int64_t buf_idx = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_TRACE_STATS_BUFFER_STATS && f.wire == TM_PB_LEN) { /* one per buffer */
            tm_pb_reader c = tm_pb_reader_of(f.bytes);
            tm_pb_field g;
            uint64_t overwritten = 0;
            while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
                if (g.wire != TM_PB_VARINT) continue;
                for (size_t i = 0; i < sizeof buffer_stat_keys / sizeof *buffer_stat_keys; i++)
                    if (buffer_stat_keys[i].field == g.num)
                        TM_TRY(stat_set_idx(d, buffer_stat_keys[i].key, machine, buf_idx, (int64_t)g.val, false));
                if (g.num == TM_PF_BUFFER_STATS_BYTES_OVERWRITTEN) overwritten = g.val;
            }
            if (rc == TM_PB_ERROR) return pb_fail(d, &c, "trace_stats.buffer_stats");
            /* Streaming into a file with a period shorter than a week is
             * meant to lose nothing: what the buffer overwrote is lost. */
            bool ring_intent = d->file_write_period_ms >= 604800000ull;
            bool explicit_ring = (size_t)buf_idx < d->n_buffers && d->trace_buffers_fill[buf_idx] == TM_PF_FILL_POLICY_RING_BUFFER;
            if (d->write_into_file && !ring_intent && !explicit_ring && overwritten)
                TM_TRY(stat_set_idx(d, TPS_long_trace_mode_bytes_overwritten, machine, buf_idx, (int64_t)overwritten,
                                    false));
            buf_idx++;
        } else if (f.num == TM_PF_TRACE_STATS_FILTER_STATS && f.wire == TM_PB_LEN) {
            tm_pb_reader c = tm_pb_reader_of(f.bytes);
            tm_pb_field g;
            while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
                for (size_t i = 0; i < sizeof filter_stat_keys / sizeof *filter_stat_keys; i++)
                    if (filter_stat_keys[i].field == g.num && g.wire == TM_PB_VARINT)
                        d->single[filter_stat_keys[i].key] = (int64_t)g.val;
            }
            if (rc == TM_PB_ERROR) return pb_fail(d, &c, "trace_stats.filter_stats");
            tm_pb_repeated per_buffer = tm_pb_repeated_of(f.bytes, TM_PF_FILTER_STATS_BYTES_DISCARDED_PER_BUFFER);
            uint64_t v;
            for (int64_t buf = 0; (rc = tm_pb_repeated_next(&per_buffer, &v)) == TM_PB_OK; buf++)
                TM_TRY(stat_set_idx(d, TPS_traced_buf_bytes_filtered_out, machine, buf, (int64_t)v, false));
            if (rc == TM_PB_ERROR) return pb_fail(d, &per_buffer.msg, "trace_stats.filter_stats");
        } else if (f.num == TM_PF_TRACE_STATS_WRITER_STATS && f.wire == TM_PB_LEN) { /* sequence -> buffer */
            uint64_t seq = 0, buf = 0;
            tm_pb_reader c = tm_pb_reader_of(f.bytes);
            tm_pb_field g;
            while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
                if (g.num == TM_PF_WRITER_STATS_SEQUENCE_ID && g.wire == TM_PB_VARINT) seq = g.val;
                if (g.num == TM_PF_WRITER_STATS_BUFFER && g.wire == TM_PB_VARINT) buf = g.val;
            }
            if (rc == TM_PB_ERROR) return pb_fail(d, &c, "trace_stats.writer_stats");
            uint32_t i = tm_u64map_get(&d->rd.seq_by_id, seq);
            if (i != TM_ABSENT && i < d->n_seqs) d->seqs[i].buffer = (uint32_t)buf;
        } else if (f.num == TM_PF_TRACE_STATS_FINAL_FLUSH_OUTCOME && f.wire == TM_PB_VARINT) {
            if (f.val == TM_PF_FINAL_FLUSH_FAILED) d->single[TPS_traced_final_flush_failed] = 1;
            else if (f.val == TM_PF_FINAL_FLUSH_SUCCEEDED) d->single[TPS_traced_final_flush_succeeded] = 1;
        } else if (f.wire == TM_PB_VARINT) {
            for (size_t i = 0; i < sizeof trace_stat_keys / sizeof *trace_stat_keys; i++)
                if (trace_stat_keys[i].field == f.num) d->single[trace_stat_keys[i].key] = (int64_t)f.val;
        }
    }
    return rc == TM_PB_ERROR ? pb_fail(d, &r, "trace_stats") : TM_OK;
}

static tm_status on_ftrace_stats(dec *d, tm_bytes b, uint32_t machine) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    uint64_t phase = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK)
        if (f.num == TM_PF_FTRACE_STATS_PHASE && f.wire == TM_PB_VARINT) phase = f.val;
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "ftrace_stats");
    r = tm_pb_reader_of(b);
    while (tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.num != TM_PF_FTRACE_STATS_CPU_STATS || f.wire != TM_PB_LEN) continue;
        uint64_t cpu = 0, entries = 0;
        tm_pb_reader c = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
            if (g.num == TM_PF_FTRACE_CPU_STATS_CPU && g.wire == TM_PB_VARINT) cpu = g.val;
            if (g.num == TM_PF_FTRACE_CPU_STATS_ENTRIES && g.wire == TM_PB_VARINT) entries = g.val;
        }
        if (rc == TM_PB_ERROR) return pb_fail(d, &c, "ftrace_stats.cpu_stats");
        uint32_t key = phase == TM_PF_FTRACE_PHASE_START_OF_TRACE ? TPS_ftrace_cpu_entries_begin : TPS_ftrace_cpu_entries_end;
        TM_TRY(stat_set_idx(d, key, machine, (int64_t)cpu, (int64_t)entries, false));
    }
    return TM_OK;
}

/* Machine row of a raw TracePacket.machine_id (0: the host). */
static uint32_t machine_of(dec *d, uint64_t raw) {
    if (!raw) return 0;
    for (uint32_t i = 0; i < d->tp->n_machines; i++)
        if (d->machine_raw[i] == raw) return i + 1;
    if (d->tp->n_machines < 16) d->machine_raw[d->tp->n_machines++] = raw;
    return d->tp->n_machines;
}

static tm_status parse_thread_desc(tm_bytes b, int64_t *pid, int64_t *tid, int64_t *ref_us, bool *has_ref,
                                   tm_str *name) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_THREAD_DESC_PID && f.wire == TM_PB_VARINT) *pid = (int32_t)f.val;
        if (f.num == TM_PF_THREAD_DESC_TID && f.wire == TM_PB_VARINT) *tid = (int64_t)f.val;
        if (f.num == TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US && f.wire == TM_PB_VARINT)
            *ref_us = (int64_t)f.val, *has_ref = true;
        if (f.num == TM_PF_THREAD_DESC_THREAD_NAME && f.wire == TM_PB_LEN && name) *name = f.bytes;
    }
    return rc == TM_PB_ERROR ? TM_ERR_MALFORMED : TM_OK;
}

static tm_status art_process_metadata(dec *d, tm_bytes b);

static tm_status decode_packet(dec *d, const tm_pf_packet *k) {
    uint32_t machine = machine_of(d, k->machine_id);
    seq_state *s = NULL;
    if (k->seq) {
        TM_TRY(seq_of(d, k->seq, &s));
        if (k->loss) {
            s->packet_losses++;
            for (int bit = 1; bit < 9; bit++)
                if (k->lost & (1u << bit)) s->loss_reasons[bit]++;
        }
        if (k->interned_skipped) stat_add(d, TPS_interned_data_skipped_incremental_state_invalid, 1);
    } else {
        if (k->flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED)
            stat_add(d, TPS_incremental_state_cleared_missing_sequence_id, 1);
        if (k->lost) stat_add(d, TPS_previous_packet_dropped_missing_sequence_id, 1);
        if (k->defaults.data) stat_add(d, TPS_trace_packet_defaults_missing_sequence_id, 1);
        if (k->interned.data) stat_add(d, TPS_interned_data_missing_sequence_id, 1);
    }
    /* Clock snapshots and stats are consumed here, stale or not. */
    switch (k->data_field) {
    case TM_PF_PACKET_CLOCK_SNAPSHOT: return TM_OK; /* the reader's clock tracker took it; rows at the end */
    case TM_PF_PACKET_TRACE_STATS: return on_trace_stats(d, k->data, machine);
    case TM_PF_PACKET_TRACE_CONFIG: return on_trace_config(d, k->data);
    case TM_PF_PACKET_TRACE_UUID: on_trace_uuid(d, k->data); return TM_OK;
    case TM_PF_PACKET_FTRACE_STATS: return on_ftrace_stats(d, k->data, machine);
    case TM_PF_PACKET_MODULE_SYMBOLS: case TM_PF_PACKET_DEOBFUSCATION_MAPPING:
        return tm_pf_symbols_add(d->mem, &d->syms, k->data_field, k->data) == TM_OK ? TM_OK : nomem(d);
    case TM_PF_PACKET_PACKAGES_LIST: {
        tm_pf_walk_error bad;
        return symbols_status(d, tm_tp_packages_list(d->tp, k->data, d->single, &bad), &bad);
    }
    case TM_PF_PACKET_ART_PROCESS_METADATA: return art_process_metadata(d, k->data);
    default: break;
    }
    /* Packets that need a state they cannot have. */
    if (s && (k->flags & TM_PF_SEQ_NEEDS_INCREMENTAL_STATE)) {
        if (k->stale) {
            s->needs_skipped = true;
            stat_add(d, TPS_packet_skipped_seq_needs_incremental_state_invalid, 1);
            return TM_OK;
        }
        s->needs_accepted = true;
    }
    /* The timestamp in trace time, as the reader converted it (a value
     * past int64 wraps, as Trace Processor's arithmetic does); a packet
     * whose time has no conversion is dropped. */
    if (k->has_time && !k->trace_ok) return TM_OK;
    int64_t ts = k->has_time ? k->trace_ns : d->rd.latest_ns;
    switch (k->data_field) {
    case TM_PF_PACKET_THREAD_DESCRIPTOR: { /* legacy: the sequence's thread and time base */
        if (!s) {
            stat_add(d, TPS_thread_descriptor_missing_sequence_id, 1);
            return TM_OK;
        }
        int64_t pid = 0, tid = 0, ref = 0;
        bool has_ref = false;
        if (parse_thread_desc(k->data, &pid, &tid, &ref, &has_ref, NULL) != TM_OK)
            return tm_fail(d->err, TM_ERR_MALFORMED, off_of(d, k->data.data), NULL, "thread_descriptor is malformed");
        if (k->seq->valid) {
            s->pid = pid, s->tid = tid, s->has_thread = true;
            if (has_ref) s->track_time_ns = (int64_t)((uint64_t)ref * 1000u), s->has_track_time = true; /* wraps as TP does */
        }
        return push_event(d, ts, EV_THREAD_DESC, 0, k->data);
    }
    case TM_PF_PACKET_PROCESS_TREE: case TM_PF_PACKET_PROCESS_DESCRIPTOR: case TM_PF_PACKET_TRACK_DESCRIPTOR:
    case TM_PF_PACKET_PROCESS_STATS:
        return push_event(d, ts, k->data_field, 0, k->data);
    case TM_PF_PACKET_PROFILE_PACKET: /* its tables and dumps belong to its sequence */
        return s ? push_event(d, ts, EV_PROFILE_PACKET, k->gen, k->data) : TM_OK;
    case TM_PF_PACKET_STREAMING_PROFILE_PACKET:
        return s ? on_streaming(d, s, k) : TM_OK;
    case TM_PF_PACKET_PERF_SAMPLE: case TM_PF_PACKET_STACK_SAMPLE: {
        if (!s) return TM_OK;
        bool perf = k->data_field == TM_PF_PACKET_PERF_SAMPLE;
        uint32_t *attr = &d->kind_attr[perf];
        if (*attr == TM_ABSENT) TM_TRY(attr_of(d, perf ? TP_SRC_PERF : TP_SRC_STACK, 0, TP_NULL, TP_NULL, 0, attr));
        return push_sample(d, ts, (sample_ref){.payload = payload_prefix(k)}, k->start, k->gen, TP_NULL, *attr);
    }
    default:
        return TM_OK;
    }
}

/* The clock_snapshot rows, from the reader's clock tracker (Trace
 * Processor's stand-in snapshot included), and what it counted. */
static tm_status clock_rows(dec *d) {
    const tm_clocks *c = &d->rd.clocks;
    for (size_t i = 0; i < c->n_snaps; i++) {
        const tm_clock_snap *s = &c->snaps[i];
        for (uint32_t k = 0; k < s->n; k++) {
            const tm_clock_point *pt = &c->points[s->first + k];
            tp_clock_row *row;
            if (PUSH(d->tp, clocks, row) != TM_OK) return nomem(d);
            *row = (tp_clock_row){pt->trace_ns, pt->value, (uint32_t)(pt->clock & 0xff), s->id};
        }
    }
    stat_add(d, TPS_clock_sync_cache_miss, (int64_t)c->cache_misses);
    stat_add(d, TPS_invalid_clock_snapshots, (int64_t)c->invalid_snapshots);
    stat_add(d, TPS_clock_sync_failure_no_path, (int64_t)c->failed_no_path);
    stat_add(d, TPS_clock_sync_failure_unknown_source_clock, (int64_t)c->failed_unknown_source);
    stat_add(d, TPS_clock_sync_failure_undeferrable_packet_loss, (int64_t)d->rd.counts.clock_undeferrable);
    return TM_OK;
}

static tm_status decode_trace(dec *d) {
    tm_pf_packet k;
    int rc;
    while ((rc = tm_pf_next(&d->rd, &k)) == TM_PF_PACKET) TM_TRY(decode_packet(d, &k));
    return rc == TM_PF_ERROR ? d->rd.err->code : clock_rows(d);
}

/* ---- parser: callstacks ----------------------------------------------------- */

/* Resolving in a generation after its last sample would make second rows
 * of what it resolved, from entries the reader may have let go: never
 * silently. */
static tm_status check_live(dec *d, uint32_t gen) {
    if (gen >= d->n_gen_samples_left || d->gen_samples_left[gen] != GEN_DONE) return TM_OK;
    return tm_fail(d->err, TM_ERR_UNSUPPORTED, 0, NULL,
                   "rows of generation %u resolved after its last sample (a tracemill bug)", gen);
}

static tm_status hex_build_id(dec *d, tm_bytes raw, tm_str *out) {
    if (raw.len == 33) { /* already a Chrome/breakpad module id in hex */
        *out = raw;
        return TM_OK;
    }
    char *p = tm_arena_alloc(&d->tp->arena, raw.len * 2 + 1);
    if (!p) return nomem(d);
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < raw.len; i++) {
        p[2 * i] = digits[raw.data[i] >> 4];
        p[2 * i + 1] = digits[raw.data[i] & 15];
    }
    p[raw.len * 2] = 0;
    *out = (tm_str){(const uint8_t *)p, raw.len * 2};
    return TM_OK;
}

static int mapping_eq(const void *ctx, uint32_t idx, const void *key) {
    const tp_mapping *a = &((const tm_tp *)ctx)->mappings[idx], *b = key;
    return a->exact_offset == b->exact_offset && a->start_offset == b->start_offset && a->start == b->start &&
           a->end == b->end && a->load_bias == b->load_bias && tm_bytes_eq(a->build_id, b->build_id) &&
           tm_bytes_eq(a->name, b->name);
}
static uint32_t mapping_hash(const tp_mapping *m) {
    return (uint32_t)tm_hash_bytes(tm_hash_bytes(m->start ^ m->end * 31 ^ m->exact_offset * 131, m->name), m->build_id);
}

/* owner: the generation a process-private row belongs to (unused if global). */
static tm_status add_mapping(dec *d, const tp_mapping *m, bool global, uint32_t owner, uint32_t *out) {
    uint32_t h = mapping_hash(m);
    if (global) {
        uint32_t i = tm_idxset_find(&d->global_map_set, h, mapping_eq, d->tp, m);
        if (i != TM_ABSENT) {
            *out = i;
            return TM_OK;
        }
    }
    tp_mapping *row;
    if (PUSH(d->tp, mappings, row) != TM_OK) return nomem(d);
    *row = *m;
    *out = (uint32_t)(d->tp->n_mappings - 1);
    if (TM_VEC_RESERVE(d->mem, d->mapping_owner, d->cap_mapping_owner, d->tp->n_mappings) != TM_OK) return nomem(d);
    d->mapping_owner[*out] = global ? TP_NULL : owner;
    if (global && tm_idxset_add(d->mem, &d->global_map_set, h, *out) != TM_OK) return nomem(d);
    return TM_OK;
}

/* Returns TM_ABSENT in *out (and raises a stat) when the mapping is unknown. */
static tm_status resolve_mapping(dec *d, uint32_t gen, uint32_t upid, uint64_t iid, uint32_t *out) {
    uint32_t row = cache_get(d, CK_MAPPING, gen, upid, iid);
    if (row != TM_ABSENT) {
        *out = row;
        return TM_OK;
    }
    *out = TM_ABSENT;
    TM_TRY(check_live(d, gen));
    tm_bytes ent;
    const tm_bytes *e = lookup(d, gen, TM_PF_INTERNED_MAPPINGS, iid, &ent) ? &ent : NULL;
    if (!e) {
        stat_add(d, TPS_stackprofile_invalid_mapping_id, 1);
        return TM_OK;
    }
    tp_mapping m;
    memset(&m, 0, sizeof m);
    m.build_id = empty_str;
    tm_pb_reader r = tm_pb_reader_of(*e);
    tm_pb_field f;
    int rc;
    char path[4096];
    size_t plen = 0;
    bool path_ok = true;
    uint64_t segments = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case TM_PF_MAPPING_BUILD_ID: {
            tm_str raw;
            if (f.val && interned_str(d, gen, TM_PF_INTERNED_BUILD_IDS, f.val, &raw)) TM_TRY(hex_build_id(d, raw, &m.build_id));
            break;
        }
        case TM_PF_MAPPING_START_OFFSET: m.start_offset = f.val; break;
        case TM_PF_MAPPING_START: m.start = f.val; break;
        case TM_PF_MAPPING_END: m.end = f.val; break;
        case TM_PF_MAPPING_LOAD_BIAS: m.load_bias = f.val; break;
        case TM_PF_MAPPING_EXACT_OFFSET: m.exact_offset = f.val; break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "interned mapping");
    /* path_string_ids: a bad iid ends the path */
    tm_pb_repeated ids = tm_pb_repeated_of(*e, TM_PF_MAPPING_PATH_STRING_IDS);
    uint64_t v;
    while ((rc = tm_pb_repeated_next(&ids, &v)) == TM_PB_OK) {
        if (++segments > d->lim->max_path_segments)
            return tm_fail(d->err, TM_ERR_LIMIT, off_of(d, ids.msg.p), NULL, "more than %llu path segments",
                           (unsigned long long)d->lim->max_path_segments);
        tm_str seg;
        if (!path_ok || !interned_str(d, gen, TM_PF_INTERNED_MAPPING_PATHS, v, &seg)) {
            path_ok = false;
            continue;
        }
        if (plen + seg.len + 1 < sizeof path) {
            path[plen++] = '/';
            memcpy(path + plen, seg.data, seg.len);
            plen += seg.len;
        }
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &ids.msg, "interned mapping.path_string_ids");
    size_t skip = plen >= 2 && path[0] == '/' && path[1] == '/' ? 1 : 0; /* Chrome sends full paths */
    m.name = empty_str;
    if (plen) TM_TRY(arena_str(d, path + skip, plen - skip, &m.name));
    bool kernel = m.name.len == 7 && !memcmp(m.name.data, "/kernel", 7);
    bool global = m.start == m.end || kernel || upid == TP_NULL;
    TM_TRY(add_mapping(d, &m, global, gen, &row));
    TM_TRY(cache_put(d, CK_MAPPING, gen, upid, iid, row));
    *out = row;
    return TM_OK;
}

typedef struct frame_key {
    uint32_t mapping;
    uint64_t rel_pc;
    tm_str name, source;
    uint32_t line;
} frame_key;

static int frame_eq(const void *ctx, uint32_t idx, const void *key) {
    const dec *d = ctx;
    const tp_frame *a = &d->tp->frames[idx];
    const frame_key *b = key;
    if (a->mapping != b->mapping || a->rel_pc != b->rel_pc || (a->name.data == NULL) != (b->name.data == NULL) ||
        !tm_bytes_eq(a->name, b->name))
        return 0;
    tm_str src = no_str;
    uint32_t line = 0;
    if (a->has_symbol) src = d->tp->symbols[a->symbol_set].source_file, line = d->tp->symbols[a->symbol_set].line;
    return tm_bytes_eq(src, b->source) && line == b->line;
}

/* unmapped: the Frame named no mapping; Trace Processor then gives a frame
 * without a source location symbol set 0 (observed), not NULL. */
static tm_status add_frame(dec *d, const frame_key *k, tm_str type, bool unmapped, uint32_t *out) {
    uint32_t h = (uint32_t)tm_hash_bytes(tm_hash_bytes(k->rel_pc * 0x9e3779b97f4a7c15ull ^ k->mapping ^ (uint64_t)k->line << 40,
                                                       k->name), k->source);
    uint32_t i = tm_idxset_find(&d->frame_set, h, frame_eq, d, k);
    if (i != TM_ABSENT) {
        *out = i;
        return TM_OK;
    }
    tp_frame *f;
    if (PUSH(d->tp, frames, f) != TM_OK) return nomem(d);
    f->name = k->name;
    f->type = type;
    f->rel_pc = k->rel_pc;
    f->mapping = k->mapping;
    f->symbol_set = unmapped ? 0 : TP_NULL;
    i = (uint32_t)(d->tp->n_frames - 1);
    if (TM_VEC_RESERVE(d->mem, d->frame_owner, d->cap_frame_owner, d->tp->n_frames) != TM_OK) return nomem(d);
    d->frame_owner[i] = d->mapping_owner[k->mapping];
    if (k->source.data || k->line) {
        tp_symbol *sym;
        if (PUSH(d->tp, symbols, sym) != TM_OK) return nomem(d);
        sym->symbol_set = (uint32_t)(d->tp->n_symbols - 1);
        sym->name = k->name;
        sym->source_file = k->source;
        sym->line = k->line;
        d->tp->frames[i].symbol_set = sym->symbol_set;
        d->tp->frames[i].has_symbol = true;
    }
    if (tm_idxset_add(d->mem, &d->frame_set, h, i) != TM_OK) return nomem(d);
    *out = i;
    return TM_OK;
}

/* The shared mapping of frames without one (inline callstacks). */
static tm_status dummy_mapping(dec *d, uint32_t *out) {
    if (d->dummy_mapping == TP_NULL) {
        tp_mapping m;
        memset(&m, 0, sizeof m);
        m.build_id = empty_str;
        m.name = empty_str;
        m.end = UINT64_MAX;
        TM_TRY(add_mapping(d, &m, true, TP_NULL, &d->dummy_mapping));
    }
    *out = d->dummy_mapping;
    return TM_OK;
}

static const char *const frame_kinds[] = {NULL, "native", "kernel", "interpreted", "jit", "gc", "runtime"};

static tm_status resolve_frame(dec *d, uint32_t gen, uint32_t upid, uint64_t iid, uint32_t *out) {
    uint32_t row = cache_get(d, CK_FRAME, gen, upid, iid);
    if (row != TM_ABSENT) {
        *out = row;
        return TM_OK;
    }
    *out = TM_ABSENT;
    TM_TRY(check_live(d, gen));
    tm_bytes ent;
    const tm_bytes *e = lookup(d, gen, TM_PF_INTERNED_FRAMES, iid, &ent) ? &ent : NULL;
    if (!e) {
        stat_add(d, TPS_stackprofile_invalid_frame_id, 1);
        return TM_OK;
    }
    frame_key k;
    memset(&k, 0, sizeof k);
    tm_str type = no_str;
    uint64_t name_iid = 0, mapping_iid = 0, source_iid = 0;
    tm_pb_reader r = tm_pb_reader_of(*e);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case TM_PF_FRAME_FUNCTION_NAME_ID: name_iid = f.val; break;
        case TM_PF_FRAME_MAPPING_ID: mapping_iid = f.val; break;
        case TM_PF_FRAME_REL_PC: k.rel_pc = f.val; break;
        case TM_PF_FRAME_SOURCE_PATH_IID: source_iid = f.val; break;
        case TM_PF_FRAME_LINE_NUMBER: k.line = (uint32_t)f.val; break;
        case TM_PF_FRAME_KIND:
            if (f.val < sizeof frame_kinds / sizeof *frame_kinds && frame_kinds[f.val])
                type = (tm_str){(const uint8_t *)frame_kinds[f.val], strlen(frame_kinds[f.val])};
            break;
        case TM_PF_FRAME_KIND_STR: if (f.wire == TM_PB_LEN) type = f.bytes; break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "interned frame");
    if (name_iid && !interned_str(d, gen, TM_PF_INTERNED_FUNCTION_NAMES, name_iid, &k.name)) {
        stat_add(d, TPS_stackprofile_invalid_string_id, 1);
        return TM_OK;
    }
    if (source_iid && !interned_str(d, gen, TM_PF_INTERNED_SOURCE_PATHS, source_iid, &k.source)) k.source = no_str;
    if (mapping_iid) {
        TM_TRY(resolve_mapping(d, gen, upid, mapping_iid, &k.mapping));
        if (k.mapping == TM_ABSENT) return TM_OK;
    } else {
        TM_TRY(dummy_mapping(d, &k.mapping));
    }
    TM_TRY(add_frame(d, &k, type, mapping_iid == 0, &row));
    TM_TRY(cache_put(d, CK_FRAME, gen, upid, iid, row));
    *out = row;
    return TM_OK;
}

#define CS_TRIE_FREED (TM_ABSENT - 1)
#define CS_NO_NODE TM_ABSENT
#define CS_WIDE (TM_ABSENT - 1)
#define CS_WIDE_AT 8 /* children listed before a parent's go to its trie's wide map */

static const cs_at cs_root = {TP_NULL, TP_NULL, 0};

/* Room for `more` callsite rows after those there: at once for the rows
 * the trace promises (rows_promised), where that much memory is given. */
static tm_status reserve_callsites(dec *d, size_t more) {
    tp_callsites *cs = &d->tp->callsites;
    size_t need = cs->n + more, promised;
    if (need <= cs->cap && need / 64 + 1 <= cs->cap_words) return TM_OK;
    if ((promised = rows_promised(cs->n, d->samples_parsed, d->tp->n_samples, TP_NULL - 1)) > need &&
        TM_VEC_RESERVE(d->mem, cs->frame, cs->cap, promised) == TM_OK &&
        TM_VEC_RESERVE(d->mem, cs->words, cs->cap_words, promised / 64 + 1) == TM_OK)
        return TM_OK;
    if (TM_VEC_RESERVE(d->mem, cs->frame, cs->cap, need) != TM_OK ||
        TM_VEC_RESERVE(d->mem, cs->words, cs->cap_words, need / 64 + 1) != TM_OK)
        return nomem(d);
    return TM_OK;
}

/* Appends a callsite row (tp.h: tp_callsites). */
static tm_status new_callsite(dec *d, uint32_t depth, uint32_t parent, uint32_t frame, uint32_t *out) {
    tp_callsites *cs = &d->tp->callsites;
    size_t r = cs->n;
    if (r >= TP_NULL - 1) return tm_fail(d->err, TM_ERR_LIMIT, 0, NULL, "more than %u callsites", TP_NULL - 1);
    TM_TRY(reserve_callsites(d, 1));
    if (r % 64 == 0) cs->words[r / 64] = (tp_cs_word){0, (uint32_t)cs->n_heads};
    if (!(r && parent == r - 1 && depth == cs->last_depth + 1)) {
        if (TM_VEC_RESERVE(d->mem, cs->heads, cs->cap_heads, cs->n_heads + 1) != TM_OK) return nomem(d);
        cs->heads[cs->n_heads++] = (tp_cs_head){parent, depth};
        cs->words[r / 64].head_bits |= 1ull << (r % 64);
    }
    cs->frame[r] = frame;
    cs->last_depth = depth;
    cs->n = r + 1;
    *out = (uint32_t)r;
    return TM_OK;
}

/* The trie of generation owner's callsites (see cs_tries), made on first use. */
static tm_status trie_of(dec *d, uint32_t owner, uint32_t *out) {
    uint32_t t = tm_iidmap_get(&d->cs_trie_by_gen, owner);
    if (t == CS_TRIE_FREED) /* would make a second row of a callsite: never silently */
        return tm_fail(d->err, TM_ERR_UNSUPPORTED, 0, NULL,
                       "callsites of generation %u resolved after its last sample (a tracemill bug)", owner);
    if (t == TM_ABSENT) {
        if (TM_VEC_RESERVE(d->mem, d->cs_tries, d->cap_cs_tries, d->n_cs_tries + 1) != TM_OK) return nomem(d);
        t = (uint32_t)d->n_cs_tries;
        d->cs_tries[t] = d->spare_trie;
        memset(&d->spare_trie, 0, sizeof d->spare_trie);
        if (tm_iidmap_put(d->mem, &d->cs_trie_by_gen, owner, t, (size_t)d->rd.n_gens + 1) != TM_OK) return nomem(d);
        d->n_cs_tries++;
        cs_trie *tr = &d->cs_tries[t]; /* no spare (generations in progress at once): sized as the largest done */
        if (!tr->cap && d->trie_hint && TM_VEC_RESERVE(d->mem, tr->nodes, tr->cap, d->trie_hint) != TM_OK)
            return nomem(d);
    }
    *out = t;
    return TM_OK;
}

static void trie_free(tm_mem *m, cs_trie *tr) {
    tm_mem_free(m, tr->nodes, tr->cap * sizeof *tr->nodes);
    tm_u64map_free(m, &tr->entry);
    tm_u64map_free(m, &tr->wide);
    memset(tr, 0, sizeof *tr);
}

/* A trie done with: kept emptied as the spare when it is the largest so
 * far (a trace's generations tend to make alike tries: no regrowing them
 * from nothing, nor fresh pages each time), else freed. */
static void trie_done(dec *d, cs_trie *tr) {
    if (tr->n > d->trie_hint) d->trie_hint = tr->n;
    if (tr->cap <= d->spare_trie.cap) {
        trie_free(d->mem, tr);
        return;
    }
    trie_free(d->mem, &d->spare_trie);
    tm_u64map_clear(d->mem, &tr->entry);
    tm_u64map_clear(d->mem, &tr->wide);
    tr->n = 0;
    d->spare_trie = *tr;
    memset(tr, 0, sizeof *tr);
}

/* A new callsite and its node in trie tr, childless. */
static tm_status new_node(dec *d, cs_trie *tr, uint32_t depth, uint32_t parent, uint32_t frame, uint32_t *node) {
    if (tr->n >= CS_WIDE || TM_VEC_RESERVE(d->mem, tr->nodes, tr->cap, tr->n + 1) != TM_OK) return nomem(d);
    uint32_t row;
    TM_TRY(new_callsite(d, depth, parent, frame, &row));
    *node = (uint32_t)tr->n++;
    tr->nodes[*node] = (cs_node){row, frame, CS_NO_NODE, CS_NO_NODE};
    return TM_OK;
}

/* The child of frame under at's node, in at's trie; made if absent. */
static tm_status trie_child(dec *d, uint32_t depth, uint32_t frame, cs_at *at) {
    cs_trie *tr = &d->cs_tries[at->trie];
    uint32_t p = at->node, c, listed = 0;
    bool wide = tr->nodes[p].first_child == CS_WIDE;
    if (wide) {
        c = tm_u64map_get(&tr->wide, (uint64_t)p << 32 | frame);
    } else {
        for (c = tr->nodes[p].first_child; c != CS_NO_NODE && tr->nodes[c].frame != frame; c = tr->nodes[c].next_sibling)
            listed++;
    }
    if (c == CS_NO_NODE) {
        TM_TRY(new_node(d, tr, depth, at->row, frame, &c));
        cs_node *n = tr->nodes;
        if (!wide && listed + 1 >= CS_WIDE_AT) { /* the list moves to the map */
            for (uint32_t x = n[p].first_child; x != CS_NO_NODE; x = n[x].next_sibling)
                if (tm_u64map_put(d->mem, &tr->wide, (uint64_t)p << 32 | n[x].frame, x) != TM_OK) return nomem(d);
            n[p].first_child = CS_WIDE;
            wide = true;
        }
        if (wide) {
            if (tm_u64map_put(d->mem, &tr->wide, (uint64_t)p << 32 | frame, c) != TM_OK) return nomem(d);
        } else {
            n[c].next_sibling = n[p].first_child;
            n[p].first_child = c;
        }
    }
    at->row = tr->nodes[c].row;
    at->node = c;
    return TM_OK;
}

/* Moves at to the callsite of frame under it (depth: at's plus one, 0 at
 * the root), made if absent: (parent, frame) is the key. */
static tm_status add_callsite(dec *d, uint32_t depth, uint32_t frame, cs_at *at) {
    if (at->trie != TP_NULL) return trie_child(d, depth, frame, at);
    uint64_t key = (uint64_t)at->row << 32 | frame;
    uint32_t owner = d->frame_owner[frame];
    if (owner == TP_NULL) { /* shared under shared: stays shared */
        uint32_t row = tm_u64map_get(&d->cs_shared, key);
        if (row == TM_ABSENT) {
            TM_TRY(new_callsite(d, depth, at->row, frame, &row));
            if (tm_u64map_put(d->mem, &d->cs_shared, key, row) != TM_OK) return nomem(d);
        }
        at->row = row;
        return TM_OK;
    }
    uint32_t t = 0;
    TM_TRY(trie_of(d, owner, &t));
    cs_trie *tr = &d->cs_tries[t];
    uint32_t c = tm_u64map_get(&tr->entry, key);
    if (c == TM_ABSENT) {
        TM_TRY(new_node(d, tr, depth, at->row, frame, &c));
        if (tm_u64map_put(d->mem, &tr->entry, key, c) != TM_OK) return nomem(d);
    }
    *at = (cs_at){tr->nodes[c].row, t, c};
    return TM_OK;
}

/* Room for `more` callsites chained under the last one made, in trie tr
 * (see resolve_callstack_slow); *ok false, with nothing reserved, when
 * they would pass a limit: new_callsite and new_node then say so. */
static tm_status reserve_chain(dec *d, cs_trie *tr, size_t more, bool *ok) {
    tp_callsites *cs = &d->tp->callsites;
    *ok = cs->n + more < TP_NULL - 1 && tr->n + more < CS_WIDE;
    if (!*ok) return TM_OK;
    TM_TRY(reserve_callsites(d, more));
    return TM_VEC_RESERVE(d->mem, tr->nodes, tr->cap, tr->n + more) != TM_OK ? nomem(d) : TM_OK;
}

/* resolve_callstack when the callstack is not in its row set (or has none):
 * only the cache of what row sets do not hold is left to look in. */
static tm_status resolve_callstack_slow(dec *d, uint32_t gen, uint32_t upid, uint64_t iid, uint32_t *out) {
    uint32_t row = in_sets(CK_CALLSTACK, gen) ? TM_ABSENT : cache_get(d, CK_CALLSTACK, gen, upid, iid);
    bool miss = row == TM_ABSENT;
    d->cs_misses += miss - (uint32_t)(d->cs_recent >> 63);
    d->cs_recent = d->cs_recent << 1 | miss;
    if (!miss) {
        *out = row;
        return TM_OK;
    }
    *out = TP_NULL;
    TM_TRY(check_live(d, gen));
    tm_bytes ent;
    const tm_bytes *e = lookup(d, gen, TM_PF_INTERNED_CALLSTACKS, iid, &ent) ? &ent : NULL;
    if (!e) {
        stat_add(d, TPS_stackprofile_invalid_callstack_id, 1);
        return TM_OK;
    }
    /* The frame ids, read once (the reader checked the message): no more
     * than its bytes, and one past the depth limit says it is passed. */
    tm_pb_repeated ids = tm_pb_repeated_of(*e, TM_PF_CALLSTACK_FRAME_IDS);
    uint64_t v;
    /* Writers put the callstack's own iid (field 1) before its frame ids:
     * stepped over here, the ids are all read in tm_pb_repeated_fill's loops. */
    if (e->len && e->data[0] == (TM_PF_INTERNED_IID << 3 | TM_PB_VARINT)) {
        const uint8_t *after = e->data + 1;
        if (tm_pb_varint(&after, e->data + e->len, &v) == 0) ids.msg.p = after;
    }
    size_t n = 0, cap = e->len < d->lim->max_stack_depth ? e->len : d->lim->max_stack_depth + 1;
    if (TM_VEC_RESERVE(d->mem, d->cs_ids, d->cap_cs_ids, cap) != TM_OK) return nomem(d);
    int rc = tm_pb_repeated_fill(&ids, d->cs_ids, cap, &n);
    if (n > d->lim->max_stack_depth)
        return tm_fail(d->err, TM_ERR_LIMIT, off_of(d, e->data), NULL, "a callstack deeper than %llu frames",
                       (unsigned long long)d->lim->max_stack_depth);
    if (rc == TM_PB_ERROR) return pb_fail(d, &ids.msg, "interned callstack");
    /* Each frame's row is a likely cache miss, and the walk below reads
     * them one after another: they are asked for all at once first. */
    const row_set *rs = set_of(d, gen, upid);
    const tm_iidmap *frames = rs ? &rs->rows[CK_FRAME - CK_MAPPING] : NULL;
    if (frames) {
        const uint64_t *ids = d->cs_ids;
        const uint32_t *dense = frames->dense;
        for (size_t k = 0, n_dense = frames->n_dense; k < n; k++)
            if (ids[k] < n_dense) __builtin_prefetch(&dense[ids[k]]);
    }
    /* Once the walk has made a callsite in a generation's trie, every one
     * below it is new too (its node is childless), and its row continues
     * the run of its parent's (no head, tp.h): `chain` then appends rows
     * and nodes in room reserved for the rest of the stack, where
     * add_callsite would search the children and check each time. The
     * frames made meanwhile make no callsites. */
    cs_at at = cs_root;
    tp_callsites *cs = &d->tp->callsites;
    cs_trie *tr = NULL;
    bool chain = false;
    for (size_t k = 0; k < n; k++) {
        uint32_t frame = TM_ABSENT;
        v = d->cs_ids[k];
        /* the row already made, inline; else a new one (which may make the set) */
        if (frames && v < frames->n_dense) frame = frames->dense[v];
        if (frame == TM_ABSENT) {
            TM_TRY(resolve_frame(d, gen, upid, v, &frame));
            if (frame == TM_ABSENT) return TM_OK;
            rs = set_of(d, gen, upid); /* sets and their maps may have moved */
            frames = rs ? &rs->rows[CK_FRAME - CK_MAPPING] : NULL;
        }
        if (chain) {
            size_t r = cs->n;
            if (r % 64 == 0) cs->words[r / 64] = (tp_cs_word){0, (uint32_t)cs->n_heads};
            cs->frame[r] = frame;
            cs->last_depth = (uint32_t)k;
            cs->n = r + 1;
            uint32_t c = (uint32_t)tr->n++;
            tr->nodes[c] = (cs_node){(uint32_t)r, frame, CS_NO_NODE, CS_NO_NODE};
            tr->nodes[at.node].first_child = c;
            at.row = (uint32_t)r, at.node = c;
            continue;
        }
        TM_TRY(add_callsite(d, (uint32_t)k, frame, &at));
        if (at.trie != TP_NULL && k + 1 < n && at.row + 1 == cs->n && cs->last_depth == k &&
            d->cs_tries[at.trie].nodes[at.node].first_child == CS_NO_NODE) {
            tr = &d->cs_tries[at.trie];
            TM_TRY(reserve_chain(d, tr, n - k - 1, &chain));
        }
    }
    uint32_t parent = at.row;
    if (parent == TP_NULL) {
        stat_add(d, TPS_stackprofile_empty_callstack, 1);
        return TM_OK;
    }
    TM_TRY(cache_put(d, CK_CALLSTACK, gen, upid, iid, parent));
    *out = parent;
    return TM_OK;
}

/* The leaf callsite of an interned callstack, or TP_NULL: a sample's
 * callstack is almost always resolved already, an array load in its set. */
static inline tm_status resolve_callstack(dec *d, uint32_t gen, uint32_t upid, uint64_t iid, uint32_t *out) {
    const row_set *rs = in_sets(CK_CALLSTACK, gen) ? set_of(d, gen, upid) : NULL;
    uint32_t row = rs ? tm_iidmap_get(&rs->rows[CK_CALLSTACK - CK_MAPPING], iid) : TM_ABSENT;
    if (row == TM_ABSENT) return resolve_callstack_slow(d, gen, upid, iid, out);
    d->cs_misses -= (uint32_t)(d->cs_recent >> 63);
    d->cs_recent <<= 1;
    *out = row;
    return TM_OK;
}

/* ArtProcessMetadata's Java stack of the thread that ran out of memory,
 * innermost frame first: frames of a mapping "art_process_metadata" of
 * their own, named by method (a signature's return type and parameters
 * cut off), joined into a callstack as Trace Processor does, so that
 * DeobfuscationMapping packets rename them. */
static tm_status art_process_metadata(dec *d, tm_bytes b) {
    tm_bytes stack = {0};
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK)
        if (f.num == TM_PF_ART_METADATA_OOM_THREAD_JAVA_STACK && f.wire == TM_PB_LEN) stack = f.bytes;
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "art_process_metadata");
    if (!stack.data) return TM_OK;
    frame_key keys[64], *k = keys;
    size_t n = 0, cap = sizeof keys / sizeof *keys;
    tm_status st = TM_OK;
    if (d->art_mapping == TP_NULL) {
        static const char name[] = "art_process_metadata";
        tp_mapping m;
        memset(&m, 0, sizeof m);
        m.build_id = empty_str;
        m.name = (tm_str){(const uint8_t *)name, sizeof name - 1};
        TM_TRY(add_mapping(d, &m, true, TP_NULL, &d->art_mapping));
    }
    r = tm_pb_reader_of(stack);
    while (st == TM_OK && (rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != TM_PF_JAVA_STACK_FRAMES || f.wire != TM_PB_LEN) continue;
        frame_key key;
        memset(&key, 0, sizeof key);
        key.mapping = d->art_mapping;
        bool named = false;
        tm_pb_reader c = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
            if (g.num == TM_PF_JAVA_FRAME_METHOD_NAME && g.wire == TM_PB_LEN) key.name = g.bytes, named = true;
            if (g.num == TM_PF_JAVA_FRAME_SOURCE_FILE && g.wire == TM_PB_LEN) key.source = g.bytes;
            if (g.num == TM_PF_JAVA_FRAME_LINE_NUMBER && g.wire == TM_PB_VARINT) key.line = (uint32_t)g.val;
        }
        if (rc == TM_PB_ERROR) {
            st = pb_fail(d, &c, "art_process_metadata.oom_thread_java_stack.frames");
            break;
        }
        if (!named) continue;
        /* "void a.b.C.m(int)" -> "a.b.C.m" */
        const uint8_t *paren = key.name.len ? memchr(key.name.data, '(', key.name.len) : NULL;
        if (paren) key.name.len = (size_t)(paren - key.name.data);
        for (size_t i = key.name.len; i-- > 0;)
            if (key.name.data[i] == ' ') {
                key.name = (tm_str){key.name.data + i + 1, key.name.len - i - 1};
                break;
            }
        if (n == cap) {
            if (n >= d->lim->max_stack_depth) {
                st = tm_fail(d->err, TM_ERR_LIMIT, off_of(d, f.start), NULL, "a Java stack deeper than %zu frames", n);
                break;
            }
            frame_key *more = tm_mem_alloc(d->mem, cap * 2 * sizeof *more);
            if (!more) {
                st = nomem(d);
                break;
            }
            memcpy(more, k, n * sizeof *k);
            if (k != keys) tm_mem_free(d->mem, k, cap * sizeof *k);
            k = more, cap *= 2;
        }
        k[n++] = key;
    }
    if (st == TM_OK && rc == TM_PB_ERROR) st = pb_fail(d, &r, "art_process_metadata.oom_thread_java_stack");
    cs_at at = cs_root;
    for (size_t i = n, depth = 0; st == TM_OK && i-- > 0; depth++) { /* root first */
        uint32_t frame;
        st = add_frame(d, &k[i], no_str, false, &frame);
        if (st == TM_OK) st = add_callsite(d, (uint32_t)depth, frame, &at);
    }
    if (k != keys) tm_mem_free(d->mem, k, cap * sizeof *k);
    return st;
}

/* StackSample's inline callstack: frames named by function and source. */
static tm_status inline_callstack(dec *d, tm_bytes b, uint32_t *out) {
    *out = TP_NULL;
    uint32_t mapping, depth = 0;
    cs_at at = cs_root;
    TM_TRY(dummy_mapping(d, &mapping));
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != TM_PF_INLINE_CALLSTACK_FRAMES || f.wire != TM_PB_LEN) continue;
        frame_key k;
        memset(&k, 0, sizeof k);
        k.mapping = mapping;
        tm_pb_reader c = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
            if (g.num == TM_PF_INLINE_FRAME_FUNCTION_NAME && g.wire == TM_PB_LEN) k.name = g.bytes;
            if (g.num == TM_PF_INLINE_FRAME_SOURCE_FILE && g.wire == TM_PB_LEN) k.source = g.bytes;
            if (g.num == TM_PF_INLINE_FRAME_LINE_NUMBER && g.wire == TM_PB_VARINT) k.line = (uint32_t)g.val;
        }
        if (rc == TM_PB_ERROR) return pb_fail(d, &c, "stack_sample.callstack.frames");
        if (depth >= d->lim->max_stack_depth)
            return tm_fail(d->err, TM_ERR_LIMIT, off_of(d, f.start), NULL, "a callstack deeper than %llu frames",
                           (unsigned long long)d->lim->max_stack_depth);
        uint32_t frame;
        TM_TRY(add_frame(d, &k, no_str, false, &frame));
        TM_TRY(add_callsite(d, depth++, frame, &at));
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "stack_sample.callstack");
    if (at.row == TP_NULL) stat_add(d, TPS_stackprofile_empty_callstack, 1);
    *out = at.row;
    return TM_OK;
}

/* ---- parser: contexts, sessions, counters ------------------------------------ */

static int task_eq(const void *ctx, uint32_t idx, const void *key) {
    return memcmp(&((const tm_tp *)ctx)->tasks[idx], key, sizeof(tp_task_ctx)) == 0;
}
static tm_status task_of(dec *d, uint32_t upid, uint32_t utid, uint32_t async, uint32_t *out) {
    tp_task_ctx k = {upid, utid, async};
    uint32_t h = (uint32_t)tm_hash_u64((uint64_t)upid << 40 ^ (uint64_t)utid << 20 ^ async);
    uint32_t i = tm_idxset_find(&d->task_set, h, task_eq, d->tp, &k);
    if (i == TM_ABSENT) {
        tp_task_ctx *t;
        if (PUSH(d->tp, tasks, t) != TM_OK) return nomem(d);
        *t = k;
        i = (uint32_t)(d->tp->n_tasks - 1);
        if (tm_idxset_add(d->mem, &d->task_set, h, i) != TM_OK) return nomem(d);
    }
    *out = i;
    return TM_OK;
}

static int exec_eq(const void *ctx, uint32_t idx, const void *key) {
    const tp_exec_ctx *a = &((const tm_tp *)ctx)->execs[idx], *b = key;
    return a->cpu == b->cpu && a->mode == b->mode;
}
static tm_status exec_of(dec *d, uint32_t cpu, const char *mode, uint32_t *out) {
    tp_exec_ctx k = {cpu, mode};
    uint32_t h = (uint32_t)tm_hash_u64((uint64_t)cpu << 8 ^ (uint64_t)(uintptr_t)mode);
    uint32_t i = tm_idxset_find(&d->exec_set, h, exec_eq, d->tp, &k);
    if (i == TM_ABSENT) {
        tp_exec_ctx *e;
        if (PUSH(d->tp, execs, e) != TM_OK) return nomem(d);
        *e = k;
        i = (uint32_t)(d->tp->n_execs - 1);
        if (tm_idxset_add(d->mem, &d->exec_set, h, i) != TM_OK) return nomem(d);
    }
    *out = i;
    return TM_OK;
}

static const char *perf_mode(uint64_t m) {
    static const char *const names[] = {"unknown", "kernel", "user", "hypervisor", "guest_kernel", "guest_user"};
    return m < 6 ? names[m] : "unknown";
}
static const char *stack_mode(uint64_t m) {
    static const char *const names[] = {"unknown", "user", "kernel", "hypervisor", "guest_user", "guest_kernel"};
    return m < 6 ? names[m] : "unknown";
}


static const char *const perf_counter_names[] = {
    NULL, "cpu-clock", "page-faults", "task-clock", "context-switches", "cpu-migrations", "minor-faults",
    "major-faults", "alignment-faults", "emulation-faults", "cpu-cycles", "instructions", "cache-references",
    "cache-misses", "branch-instructions", "branch-misses", "bus-cycles", "stalled-cycles-frontend",
    "stalled-cycles-backend", "ref-cycles", "dummy"};

/* Name of a perf event description (Timebase or FollowerEvent): its name
 * field, else the counter's perf name, else the tracepoint's. */
static tm_str perf_event_name(tm_bytes ev, uint32_t name_field, uint32_t counter_field, uint32_t tracepoint_field) {
    tm_str name = no_str;
    const char *counter = NULL;
    tm_pb_reader r = tm_pb_reader_of(ev);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.num == name_field && f.wire == TM_PB_LEN && f.bytes.len) name = f.bytes;
        if (f.num == counter_field && f.wire == TM_PB_VARINT &&
            f.val < sizeof perf_counter_names / sizeof *perf_counter_names)
            counter = perf_counter_names[f.val];
        if (f.num == tracepoint_field && f.wire == TM_PB_LEN && !counter) {
            tm_pb_reader t = tm_pb_reader_of(f.bytes);
            tm_pb_field g;
            while (tm_pb_next(&t, &g) == TM_PB_OK)
                if (g.num == TM_PF_TRACEPOINT_NAME && g.wire == TM_PB_LEN) name = name.data ? name : g.bytes;
        }
    }
    if (name.data) return name;
    if (!counter) counter = "cpu-clock";
    return (tm_str){(const uint8_t *)counter, strlen(counter)};
}

static tm_status new_track(dec *d, uint8_t kind, tm_str name, tm_str unit, uint32_t session, uint32_t cpu,
                           bool timebase, uint32_t *out) {
    tp_track *t;
    if (PUSH(d->tp, tracks, t) != TM_OK) return nomem(d);
    t->kind = kind, t->name = name, t->unit = unit, t->session = session, t->cpu = cpu;
    t->is_timebase = timebase;
    *out = (uint32_t)(d->tp->n_tracks - 1);
    return TM_OK;
}

static tm_status add_counter(dec *d, int64_t ts, uint32_t track, double v, uint32_t sample) {
    tp_counter *c;
    if (PUSH(d->tp, counters, c) != TM_OK) return nomem(d);
    c->ts = ts, c->track = track, c->value = v, c->sample = sample;
    return TM_OK;
}

/* The perf counter track of (session, cpu, index): index 0 is the
 * timebase, i + 1 the i-th follower; all of a (session, cpu) are made at
 * once, in that order. */
static tm_status perf_track(dec *d, uint32_t gen, uint32_t session, uint32_t cpu, uint32_t index, uint32_t *out) {
    for (size_t i = 0, k = 0; i < d->tp->n_tracks; i++) {
        const tp_track *t = &d->tp->tracks[i];
        if (t->kind != TP_TRACK_PERF_COUNTER || t->session != session || t->cpu != cpu) continue;
        if (k++ == index) {
            *out = (uint32_t)i;
            return TM_OK;
        }
    }
    tm_bytes defs = gen_of(d, gen)->perf_defaults;
    tm_bytes timebase = {NULL, 0};
    tm_pb_reader r = tm_pb_reader_of(defs);
    tm_pb_field f;
    while (defs.data && tm_pb_next(&r, &f) == TM_PB_OK)
        if (f.num == TM_PF_PERF_DEFAULTS_TIMEBASE && f.wire == TM_PB_LEN) timebase = f.bytes;
    size_t first = d->tp->n_tracks;
    uint32_t id;
    TM_TRY(new_track(d, TP_TRACK_PERF_COUNTER, perf_event_name(timebase, TM_PF_TIMEBASE_NAME, TM_PF_TIMEBASE_COUNTER,
                                                                      TM_PF_TIMEBASE_TRACEPOINT), no_str, session, cpu, true, &id));
    r = tm_pb_reader_of(defs);
    while (defs.data && tm_pb_next(&r, &f) == TM_PB_OK)
        if (f.num == TM_PF_PERF_DEFAULTS_FOLLOWERS && f.wire == TM_PB_LEN)
            TM_TRY(new_track(d, TP_TRACK_PERF_COUNTER,
                             perf_event_name(f.bytes, TM_PF_FOLLOWER_EVENT_NAME, TM_PF_FOLLOWER_EVENT_COUNTER,
                                             TM_PF_FOLLOWER_EVENT_TRACEPOINT),
                             no_str, session, cpu, false, &id));
    if (first + index >= d->tp->n_tracks) {
        *out = TP_NULL;
        return TM_OK;
    }
    *out = (uint32_t)(first + index);
    return TM_OK;
}

static tm_status session_of(dec *d, uint32_t gen, bool perf, uint32_t *out) {
    seq_state *s = &d->seqs[gen_of(d, gen)->seq];
    if (s->session == TP_NULL) {
        tp_session *ss;
        if (PUSH(d->tp, sessions, ss) != TM_OK) return nomem(d);
        ss->is_perf = perf;
        if (perf) {
            ss->source = (tm_str){(const uint8_t *)"linux.perf", 10};
        } else {
            tm_bytes defs = gen_of(d, gen)->stack_defaults;
            tm_pb_reader r = tm_pb_reader_of(defs);
            tm_pb_field f;
            while (defs.data && tm_pb_next(&r, &f) == TM_PB_OK)
                if (f.num == TM_PF_STACK_DEFAULTS_SOURCE && f.wire == TM_PB_LEN) ss->source = f.bytes;
        }
        s->session = (uint32_t)(d->tp->n_sessions - 1);
    }
    *out = s->session;
    return TM_OK;
}

static tm_str unit_name(tm_bytes desc) {
    static const char *const units[] = {NULL, "ns", "cycles", "instructions", "bytes", "page_faults",
                                        "cache_misses", "cache_references", "branch_misses", "count"};
    tm_str out = no_str;
    tm_pb_reader r = tm_pb_reader_of(desc);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.num == TM_PF_COUNTER_DESC_UNIT && f.wire == TM_PB_VARINT && f.val < sizeof units / sizeof *units &&
            units[f.val])
            out = (tm_str){(const uint8_t *)units[f.val], strlen(units[f.val])};
        if (f.num == TM_PF_COUNTER_DESC_UNIT_NAME && f.wire == TM_PB_LEN) out = f.bytes;
    }
    return out;
}
static tm_str desc_name(tm_bytes desc) {
    tm_str out = no_str;
    tm_pb_reader r = tm_pb_reader_of(desc);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK)
        if (f.num == TM_PF_COUNTER_DESC_NAME && f.wire == TM_PB_LEN) out = f.bytes;
    return out;
}

/* The stack-sample counter track of a descriptor in a session. */
static tm_status stack_track(dec *d, uint32_t session, tm_bytes desc, bool timebase, uint32_t *out) {
    tm_str name = desc_name(desc), unit = unit_name(desc);
    for (size_t i = 0; i < d->tp->n_tracks; i++) {
        const tp_track *t = &d->tp->tracks[i];
        if (t->kind == TP_TRACK_STACK_SAMPLE_COUNTER && t->session == session && tm_bytes_eq(t->name, name) &&
            t->is_timebase == timebase) {
            *out = (uint32_t)i;
            return TM_OK;
        }
    }
    if (timebase && !d->tp->sessions[session].timebase_unit.data) d->tp->sessions[session].timebase_unit = unit;
    return new_track(d, TP_TRACK_STACK_SAMPLE_COUNTER, name, unit, session, TP_NULL, timebase, out);
}

/* ---- parser: samples ------------------------------------------------------------ */

/* Reads the length-prefixed payload a sample column points at. */
static tm_bytes payload_at(const uint8_t *len_prefix) {
    uint64_t n = 0;
    const uint8_t *p = len_prefix;
    tm_pb_varint(&p, p + 10, &n); /* validated when the packet was scanned */
    return (tm_bytes){p, (size_t)n};
}

/* Sample w is being written (w <= the row being read: dropped rows close up). */
typedef struct out_row {
    size_t w;
    int64_t ts;
    uint32_t gen;
} out_row;

static tm_status parse_perf(dec *d, const out_row *o, const uint8_t *ref, bool *keep) {
    tm_tp *tp = d->tp;
    tm_bytes b = payload_at(ref);
    uint64_t cpu = 0, pid = 0, tid = 0, cs_iid = 0, mode = 0, lost = 0, unwind = 0, skip = 0;
    bool has_cpu = false, has_unwind = false, has_skip = false, has_timebase = false, guardrail = false,
         has_followers = false;
    uint64_t timebase = 0;
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case TM_PF_PERF_SAMPLE_CPU: cpu = f.val, has_cpu = true; break;
        case TM_PF_PERF_SAMPLE_PID: pid = f.val; break;
        case TM_PF_PERF_SAMPLE_TID: tid = f.val; break;
        case TM_PF_PERF_SAMPLE_CALLSTACK_IID: cs_iid = f.val; break;
        case TM_PF_PERF_SAMPLE_CPU_MODE: mode = f.val; break;
        case TM_PF_PERF_SAMPLE_TIMEBASE_COUNT: timebase = f.val, has_timebase = true; break;
        case TM_PF_PERF_SAMPLE_UNWIND_ERROR: unwind = f.val, has_unwind = true; break;
        case TM_PF_PERF_SAMPLE_KERNEL_RECORDS_LOST: lost = f.val; break;
        case TM_PF_PERF_SAMPLE_SKIPPED_REASON: skip = f.val, has_skip = true; break;
        case TM_PF_PERF_SAMPLE_FOLLOWER_COUNTS: has_followers = true; break;
        case TM_PF_PERF_SAMPLE_PRODUCER_EVENT: {
            tm_pb_reader e = tm_pb_reader_of(f.bytes);
            tm_pb_field g;
            while (f.wire == TM_PB_LEN && tm_pb_next(&e, &g) == TM_PB_OK)
                if (g.num == TM_PF_PRODUCER_EVENT_SOURCE_STOP_REASON && g.wire == TM_PB_VARINT &&
                    g.val == TM_PF_PROFILER_STOP_GUARDRAIL)
                    guardrail = true;
            break;
        }
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "perf_sample");
    *keep = false;
    if (lost) return stat_set_idx(d, TPS_perf_cpu_lost_records, 0, (int64_t)cpu, (int64_t)lost, true);
    uint32_t session;
    TM_TRY(session_of(d, o->gen, true, &session));
    if (guardrail) return stat_set_idx(d, TPS_perf_guardrail_stop_ts, 0, session, o->ts, false);
    uint32_t utid, upid, task, exec, attr, callsite = TP_NULL;
    /* perf_sample.cpu is NULL, not 0, when the sample names no cpu. */
    uint32_t cpu_key = has_cpu ? (uint32_t)cpu : TP_NULL;
    uint8_t unwind_key = has_unwind ? (uint8_t)(unwind + 1) : 0;
    const char *mode_name = perf_mode(mode);
    ctx_memo *m = &d->perf_memo[(tid * 0x9e3779b1u ^ cpu_key) & (TM_TP_CONTEXT_MEMO - 1)];
    bool hit = m->version == threads_version(d) && m->tid == tid && m->pid == pid && m->cpu == cpu_key &&
               m->mode == mode_name && m->unwind == unwind_key && m->session == session;
    size_t version = 0;
    if (hit) {
        utid = m->utid, upid = m->upid, task = m->task, exec = m->exec;
    } else {
        TM_TRY(thread_of(d, (int64_t)tid, (int64_t)pid, &utid, &upid));
        version = threads_version(d);
        TM_TRY(task_of(d, upid, utid, TP_NULL, &task));
        TM_TRY(exec_of(d, cpu_key, mode_name, &exec));
    }
    if (has_skip) {
        if (skip == TM_PF_SKIPPED_READ_STAGE || skip == TM_PF_SKIPPED_UNWIND_STAGE)
            stat_add(d, TPS_perf_samples_skipped, 1);
        if (skip == TM_PF_SKIPPED_UNWIND_ENQUEUE) stat_add(d, TPS_perf_samples_skipped_dataloss, 1);
    } else if (cs_iid) {
        TM_TRY(resolve_callstack(d, o->gen, upid, cs_iid, &callsite));
    }
    if (hit) {
        attr = m->attr;
    } else {
        TM_TRY(attr_of(d, TP_SRC_PERF, unwind_key, exec, session, 0, &attr));
        *m = (ctx_memo){tid, pid, mode_name, cpu_key, session, unwind_key, version, utid, upid, task, exec, attr};
    }
    tp->s_ts[o->w] = o->ts;
    tp->s_callsite[o->w] = callsite;
    tp->s_task[o->w] = task;
    tp->s_attr[o->w] = attr;
    tp->perf_rows[o->w / 64] |= 1ull << (o->w % 64);
    *keep = true;
    if (has_skip) return TM_OK;
    uint32_t track;
    if (has_timebase) {
        TM_TRY(perf_track(d, o->gen, session, (uint32_t)cpu, 0, &track));
        TM_TRY(add_counter(d, o->ts, track, (double)timebase, TP_NULL));
    }
    if (!has_followers) return TM_OK; /* (no second scan of the payload to find none) */
    tm_pb_repeated followers = tm_pb_repeated_of(b, TM_PF_PERF_SAMPLE_FOLLOWER_COUNTS);
    uint64_t v;
    for (uint32_t i = 1; (rc = tm_pb_repeated_next(&followers, &v)) == TM_PB_OK; i++) {
        TM_TRY(perf_track(d, o->gen, session, (uint32_t)cpu, i, &track));
        if (track != TP_NULL) TM_TRY(add_counter(d, o->ts, track, (double)v, TP_NULL));
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &followers.msg, "perf_sample.follower_counts");
    return TM_OK;
}

static tm_status parse_chrome(dec *d, const out_row *o, uint64_t iid, uint32_t pending, uint32_t attr) {
    tm_tp *tp = d->tp;
    uint32_t utid, upid, task, callsite;
    ctx_memo *m = &d->chrome_memo[pending];
    if (m->version == threads_version(d)) {
        utid = m->utid, upid = m->upid, task = m->task;
    } else {
        TM_TRY(thread_of(d, d->pend[pending][1], d->pend[pending][0], &utid, &upid));
        m->version = threads_version(d);
        TM_TRY(task_of(d, upid, utid, TP_NULL, &task));
        m->utid = utid, m->upid = upid, m->task = task;
    }
    TM_TRY(resolve_callstack(d, o->gen, upid, iid, &callsite));
    tp->s_ts[o->w] = o->ts;
    tp->s_callsite[o->w] = callsite;
    tp->s_task[o->w] = task;
    tp->s_attr[o->w] = attr;
    tp->chrome_rows[o->w / 64] |= 1ull << (o->w % 64);
    return TM_OK;
}

/* An async context row, its parents first. */
static tm_status async_ctx(dec *d, uint32_t gen, uint64_t iid, int depth, uint32_t *out) {
    *out = TP_NULL;
    uint32_t row = cache_get(d, CK_ASYNC, gen, 0, iid);
    if (row != TM_ABSENT) {
        *out = row;
        return TM_OK;
    }
    tm_bytes ent;
    const tm_bytes *e = lookup(d, gen, TM_PF_INTERNED_ASYNC_CONTEXTS, iid, &ent) ? &ent : NULL;
    if (!e || depth > 64) return TM_OK;
    tm_str name = no_str, kind = no_str;
    uint64_t parent_iid = 0;
    tm_pb_reader r = tm_pb_reader_of(*e);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_ASYNC_CONTEXT_NAME && f.wire == TM_PB_LEN) name = f.bytes;
        if (f.num == TM_PF_ASYNC_CONTEXT_KIND && f.wire == TM_PB_LEN) kind = f.bytes;
        if (f.num == TM_PF_ASYNC_CONTEXT_PARENT_IID && f.wire == TM_PB_VARINT) parent_iid = f.val;
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "interned async context");
    uint32_t parent = TP_NULL;
    if (parent_iid && parent_iid != iid) TM_TRY(async_ctx(d, gen, parent_iid, depth + 1, &parent));
    tp_async_ctx *a;
    if (PUSH(d->tp, asyncs, a) != TM_OK) return nomem(d);
    a->name = name, a->kind = kind, a->parent = parent;
    row = (uint32_t)(d->tp->n_asyncs - 1);
    TM_TRY(cache_put(d, CK_ASYNC, gen, 0, iid, row));
    *out = row;
    return TM_OK;
}

/* The message of an inline-or-interned oneof: the inline one, else the
 * interned entry of iid. */
static tm_bytes inline_or_interned(const dec *d, uint32_t gen, tm_bytes msg, uint64_t iid, uint32_t kind) {
    if (msg.data) return msg;
    tm_bytes e = {NULL, 0};
    if (iid && !lookup(d, gen, kind, iid, &e)) e = (tm_bytes){NULL, 0};
    return e;
}

static tm_status parse_stack_sample(dec *d, const out_row *o, const uint8_t *ref) {
    tm_tp *tp = d->tp;
    tm_bytes b = payload_at(ref);
    tm_bytes task_msg = {NULL, 0}, exec_msg = {NULL, 0}, cs_msg = {NULL, 0}, primary = {NULL, 0};
    uint64_t task_iid = 0, exec_iid = 0, cs_iid = 0, primary_iid = 0, weight = 0;
    bool has_cs_iid = false;
    bool has_weight = false;
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        bool len = f.wire == TM_PB_LEN;
        switch (f.num) {
        case TM_PF_STACK_SAMPLE_TASK_CONTEXT: if (len) task_msg = f.bytes; break;
        case TM_PF_STACK_SAMPLE_TASK_CONTEXT_IID: task_iid = f.val; break;
        case TM_PF_STACK_SAMPLE_EXECUTION_CONTEXT: if (len) exec_msg = f.bytes; break;
        case TM_PF_STACK_SAMPLE_EXECUTION_CONTEXT_IID: exec_iid = f.val; break;
        case TM_PF_STACK_SAMPLE_CALLSTACK: if (len) cs_msg = f.bytes; break;
        case TM_PF_STACK_SAMPLE_CALLSTACK_IID: cs_iid = f.val, has_cs_iid = true; break;
        case TM_PF_STACK_SAMPLE_PRIMARY_DESCRIPTOR: if (len) primary = f.bytes; break;
        case TM_PF_STACK_SAMPLE_PRIMARY_DESCRIPTOR_IID: primary_iid = f.val; break;
        case TM_PF_STACK_SAMPLE_PRIMARY_WEIGHT: weight = f.val, has_weight = true; break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "stack_sample");
    uint32_t session, upid = TP_NULL, utid = TP_NULL, async = TP_NULL, task = TP_NULL, exec = TP_NULL, attr;
    uint32_t callsite = TP_NULL;
    TM_TRY(session_of(d, o->gen, false, &session));
    task_msg = inline_or_interned(d, o->gen, task_msg, task_iid, TM_PF_INTERNED_TASK_CONTEXTS);
    if (task_msg.data) {
        uint64_t pid = 0, tid = 0, async_iid = 0;
        tm_pb_reader t = tm_pb_reader_of(task_msg);
        while ((rc = tm_pb_next(&t, &f)) == TM_PB_OK) {
            if (f.num == TM_PF_TASK_CONTEXT_PID) pid = f.val;
            if (f.num == TM_PF_TASK_CONTEXT_TID) tid = f.val;
            if (f.num == TM_PF_TASK_CONTEXT_ASYNC_ID) async_iid = f.val;
        }
        if (rc == TM_PB_ERROR) return pb_fail(d, &t, "stack_sample.task_context");
        if (tid)
            TM_TRY(thread_of(d, (int64_t)tid, (int64_t)pid, &utid, &upid));
        else if (pid)
            TM_TRY(process_of(d, (int64_t)pid, &upid));
        if (async_iid) TM_TRY(async_ctx(d, o->gen, async_iid, 0, &async));
        TM_TRY(task_of(d, upid, utid, async, &task));
    }
    exec_msg = inline_or_interned(d, o->gen, exec_msg, exec_iid, TM_PF_INTERNED_EXECUTION_CONTEXTS);
    if (exec_msg.data) {
        uint32_t cpu = TP_NULL;
        uint64_t mode = 0;
        tm_pb_reader t = tm_pb_reader_of(exec_msg);
        while ((rc = tm_pb_next(&t, &f)) == TM_PB_OK) {
            if (f.num == TM_PF_EXECUTION_CONTEXT_CPU) cpu = (uint32_t)f.val;
            if (f.num == TM_PF_EXECUTION_CONTEXT_MODE) mode = f.val;
        }
        if (rc == TM_PB_ERROR) return pb_fail(d, &t, "stack_sample.execution_context");
        TM_TRY(exec_of(d, cpu, stack_mode(mode), &exec));
    }
    /* An interned callstack wins over an inline one, as in Trace Processor. */
    if (has_cs_iid)
        TM_TRY(resolve_callstack(d, o->gen, upid, cs_iid, &callsite));
    else if (cs_msg.data)
        TM_TRY(inline_callstack(d, cs_msg, &callsite));
    TM_TRY(attr_of(d, TP_SRC_STACK, 0, exec, session, 0, &attr));
    tp->s_ts[o->w] = o->ts;
    tp->s_callsite[o->w] = callsite;
    tp->s_task[o->w] = task;
    tp->s_attr[o->w] = attr;
    /* The weights: primary on the timebase track, followers on theirs. */
    tm_bytes defs = gen_of(d, o->gen)->stack_defaults;
    primary = inline_or_interned(d, o->gen, primary, primary_iid, TM_PF_INTERNED_COUNTER_DESCRIPTORS);
    tm_pb_reader dr = tm_pb_reader_of(defs);
    while (!primary.data && defs.data && tm_pb_next(&dr, &f) == TM_PB_OK)
        if (f.num == TM_PF_STACK_DEFAULTS_PRIMARY_COUNTER && f.wire == TM_PB_LEN) primary = f.bytes;
    uint32_t track;
    if (has_weight && primary.data) {
        TM_TRY(stack_track(d, session, primary, true, &track));
        TM_TRY(add_counter(d, o->ts, track, (double)weight, (uint32_t)o->w));
    }
    /* Follower weights pair with the defaults' follower descriptors in order. */
    tm_pb_repeated weights = tm_pb_repeated_of(b, TM_PF_STACK_SAMPLE_FOLLOWER_WEIGHTS);
    tm_pb_reader descs = tm_pb_reader_of(defs);
    uint64_t v;
    while ((rc = tm_pb_repeated_next(&weights, &v)) == TM_PB_OK) {
        tm_bytes desc = {NULL, 0};
        while (!desc.data && descs.p < descs.end && tm_pb_next(&descs, &f) == TM_PB_OK)
            if (f.num == TM_PF_STACK_DEFAULTS_FOLLOWER_COUNTERS && f.wire == TM_PB_LEN) desc = f.bytes;
        if (!desc.data) continue;
        TM_TRY(stack_track(d, session, desc, false, &track));
        TM_TRY(add_counter(d, o->ts, track, (double)v, (uint32_t)o->w));
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &weights.msg, "stack_sample.follower_weights");
    return TM_OK;
}

/* ---- parser: processes and threads ---------------------------------------------- */

/* A kernel workqueue worker's comm ends in the queue it last served
 * ("kworker/45:2-mm_percpu_wq", "+" while busy), which changes from one scan
 * to the next; Trace Processor keeps only the worker's own part, cut at the
 * first '-' or '+' after "kworker/". Returns whether name was cut. */
static bool kworker_pool(tm_str *name) {
    static const char prefix[] = "kworker/";
    const size_t k = sizeof prefix - 1;
    if (name->len <= k || memcmp(name->data, prefix, k) != 0) return false;
    for (size_t i = k; i < name->len; i++)
        if (name->data[i] == '-' || name->data[i] == '+') {
            name->len = i;
            return true;
        }
    return false;
}

static tm_status apply_process_tree(dec *d, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.wire != TM_PB_LEN) continue;
        tm_pb_reader c = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        if (f.num == TM_PF_PROCESS_TREE_PROCESSES) {
            int64_t pid = 0, ppid = 0, uid = TP_NO_INT;
            bool is_comm = false;
            tm_str first = no_str;
            size_t n_args = 0, total = 0;
            while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
                if (g.num == TM_PF_PROCESS_PID && g.wire == TM_PB_VARINT) pid = (int32_t)g.val;
                if (g.num == TM_PF_PROCESS_PPID && g.wire == TM_PB_VARINT) ppid = (int32_t)g.val;
                if (g.num == TM_PF_PROCESS_UID && g.wire == TM_PB_VARINT) uid = (int32_t)g.val;
                if (g.num == TM_PF_PROCESS_CMDLINE_IS_COMM && g.wire == TM_PB_VARINT) is_comm = g.val != 0;
                if (g.num == TM_PF_PROCESS_CMDLINE && g.wire == TM_PB_LEN) {
                    if (!n_args++) first = g.bytes;
                    total += g.bytes.len + 1;
                }
            }
            if (rc == TM_PB_ERROR) return pb_fail(d, &c, "process_tree.processes");
            if (!n_args) continue; /* Trace Processor skips processes without a cmdline */
            uint32_t parent, upid;
            TM_TRY(process_of(d, ppid, &parent));
            TM_TRY(process_of(d, pid, &upid));
            tm_str cmdline;
            if (ppid == 2 && kworker_pool(&first)) {
                cmdline = first; /* the whole command line is the pool's name too */
            } else {
                char *cmd = tm_arena_alloc(&d->tp->arena, total + 1);
                if (!cmd) return nomem(d);
                size_t n = 0;
                c = tm_pb_reader_of(f.bytes);
                while (tm_pb_next(&c, &g) == TM_PB_OK)
                    if (g.num == TM_PF_PROCESS_CMDLINE && g.wire == TM_PB_LEN) {
                        if (n) cmd[n++] = ' ';
                        memcpy(cmd + n, g.bytes.data, g.bytes.len);
                        n += g.bytes.len;
                    }
                cmd[n] = 0;
                cmdline = (tm_str){(const uint8_t *)cmd, n};
            }
            tp_process *p = &d->tp->processes[upid];
            p->parent_upid = parent;
            p->cmdline = cmdline;
            if (uid != TP_NO_INT) p->uid = uid;
            if (n_args == 1) { /* a single element may be a whole command line */
                const uint8_t *sp = memchr(first.data, ' ', first.len);
                if (sp) first.len = (size_t)(sp - first.data);
            }
            name_process(d, upid, first, 4);
            if (is_comm) { /* the "cmdline" is the main thread's comm: it names that thread */
                uint32_t utid;
                TM_TRY(thread_of(d, pid, pid, &utid, &upid));
                name_thread(d, utid, cmdline, 2);
            }
        } else if (f.num == TM_PF_PROCESS_TREE_THREADS) {
            int64_t tid = 0, tgid = 0;
            tm_str name = no_str;
            while ((rc = tm_pb_next(&c, &g)) == TM_PB_OK) {
                if (g.num == TM_PF_THREAD_TID && g.wire == TM_PB_VARINT) tid = (int32_t)g.val;
                if (g.num == TM_PF_THREAD_TGID && g.wire == TM_PB_VARINT) tgid = (int32_t)g.val;
                if (g.num == TM_PF_THREAD_NAME && g.wire == TM_PB_LEN) name = g.bytes;
            }
            if (rc == TM_PB_ERROR) return pb_fail(d, &c, "process_tree.threads");
            uint32_t utid, upid;
            TM_TRY(thread_of(d, tid, tgid, &utid, &upid));
            name_thread(d, utid, name, 2);
        }
    }
    return rc == TM_PB_ERROR ? pb_fail(d, &r, "process_tree") : TM_OK;
}

static tm_status apply_process_desc(dec *d, tm_bytes b, uint32_t name_prio) {
    int64_t pid = 0;
    tm_str name = no_str;
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_PROCESS_DESC_PID && f.wire == TM_PB_VARINT) pid = (int32_t)f.val;
        if (f.num == TM_PF_PROCESS_DESC_PROCESS_NAME && f.wire == TM_PB_LEN) name = f.bytes;
    }
    if (rc == TM_PB_ERROR) return pb_fail(d, &r, "process_descriptor");
    uint32_t upid;
    TM_TRY(process_of(d, pid, &upid));
    name_process(d, upid, name, name_prio);
    return TM_OK;
}

static tm_status apply_thread_desc(dec *d, tm_bytes b) {
    int64_t pid = 0, tid = 0, ref;
    bool has_ref;
    tm_str name = no_str;
    if (parse_thread_desc(b, &pid, &tid, &ref, &has_ref, &name) != TM_OK)
        return tm_fail(d->err, TM_ERR_MALFORMED, off_of(d, b.data), NULL, "thread_descriptor is malformed");
    uint32_t utid, upid;
    TM_TRY(thread_of(d, tid, pid, &utid, &upid));
    name_thread(d, utid, name, 4);
    return TM_OK;
}

/* ---- heapprofd dumps (perfetto/heap.h) ------------------------------------------ */

/* A ProfilePacket's own tables are the sequence's, not a process's: their
 * rows are made when the packet is read (heap_entry), with no process. */
static tm_status heap_callsite(void *ctx, const tm_pf_heap_stack *st, uint32_t *out) {
    dec *d = ctx;
    uint32_t upid = TP_NULL, cs;
    uint32_t gen = st->gen;
    if (st->tables) d->local = st->tables, gen = LOCAL_GEN | st->tables->serial;
    else TM_TRY(process_of(d, st->pid, &upid));
    tm_status s = resolve_callstack(d, gen, upid, st->iid, &cs);
    d->local = NULL;
    *out = cs == TP_NULL ? TM_ABSENT : cs;
    return s;
}

static tm_status heap_entry(void *ctx, const tm_pf_heap_stack *e, uint32_t field) {
    dec *d = ctx;
    uint32_t row;
    d->local = e->tables;
    uint32_t gen = LOCAL_GEN | e->tables->serial;
    tm_status s = field == TM_PF_INTERNED_MAPPINGS ? resolve_mapping(d, gen, TP_NULL, e->iid, &row)
                  : field == TM_PF_INTERNED_FRAMES ? resolve_frame(d, gen, TP_NULL, e->iid, &row)
                                                   : resolve_callstack(d, gen, TP_NULL, e->iid, &row);
    d->local = NULL;
    return s;
}

static tm_status heap_dump(void *ctx, const tm_pf_heap_dump *hd) {
    dec *d = ctx;
    tp_heap_dump *row;
    uint32_t upid;
    TM_TRY(process_of(d, hd->pid, &upid));
    if (PUSH(d->tp, heap_dumps, row) != TM_OK) return nomem(d);
    *row = (tp_heap_dump){hd->ts, hd->ts_end, upid, hd->heap_name};
    return TM_OK;
}

/* A sample's change: a heap_profile_allocation row for its allocations,
 * then one for its frees, as Trace Processor makes them. */
static tm_status heap_rows(void *ctx, const tm_pf_heap_row *alloc, const tm_pf_heap_row *freed) {
    dec *d = ctx;
    uint32_t upid;
    TM_TRY(process_of(d, (alloc ? alloc : freed)->pid, &upid));
    const tm_pf_heap_row *both[2] = {alloc, freed};
    for (int i = 0; i < 2; i++) {
        const tm_pf_heap_row *hr = both[i];
        tp_heap_alloc *row;
        if (!hr) continue;
        if (PUSH(d->tp, heap_allocs, row) != TM_OK) return nomem(d);
        *row = (tp_heap_alloc){hr->ts, hr->count, hr->size, upid, hr->callsite, hr->heap_name};
    }
    return TM_OK;
}

static tm_status heap_stat(void *ctx, tm_pf_heap_stat stat, int64_t pid, int64_t v) {
    static const uint32_t keys[] = {
        [TM_HEAP_CLIENT_DISCONNECTED] = TPS_heapprofd_client_disconnected,
        [TM_HEAP_BUFFER_CORRUPTED] = TPS_heapprofd_buffer_corrupted,
        [TM_HEAP_BUFFER_OVERRAN] = TPS_heapprofd_buffer_overran,
        [TM_HEAP_REJECTED_CONCURRENT] = TPS_heapprofd_rejected_concurrent,
        [TM_HEAP_HIT_GUARDRAIL] = TPS_heapprofd_hit_guardrail,
        [TM_HEAP_UNWIND_TIME_US] = TPS_heapprofd_unwind_time_us,
        [TM_HEAP_UNWIND_SAMPLES] = TPS_heapprofd_unwind_samples,
        [TM_HEAP_CLIENT_SPINLOCK_BLOCKED] = TPS_heapprofd_client_spinlock_blocked,
        [TM_HEAP_MALFORMED_PACKET] = TPS_heapprofd_malformed_packet,
        [TM_HEAP_CLIENT_ERROR] = TPS_heapprofd_client_error,
        [TM_HEAP_SAMPLING_INTERVAL_ADJUSTED] = TPS_heapprofd_sampling_interval_adjusted,
        [TM_HEAP_LAST_PROFILE_TIMESTAMP] = TPS_heapprofd_last_profile_timestamp,
        [TM_HEAP_MISSING_PACKET] = TPS_heapprofd_missing_packet,
        [TM_HEAP_NON_FINALIZED_PROFILE] = TPS_heapprofd_non_finalized_profile,
    };
    dec *d = ctx;
    if (stat == TM_HEAP_DUMP_LOSSY) return TM_OK; /* the flags' own stats say it */
    if (stat >= TM_HEAP_MISSING_PACKET) {
        stat_add(d, keys[stat], v);
        return TM_OK;
    }
    return stat_set_idx(d, keys[stat], 0, pid, v, stat <= TM_HEAP_STAT_ADDED_LAST);
}

static tm_pf_heap_sink heap_sink(dec *d) { return (tm_pf_heap_sink){d, heap_callsite, heap_entry, heap_dump, heap_rows, heap_stat}; }

/* ProcessStats: one counter per process and figure, on Trace Processor's
 * process counter tracks (mem.rss, mem.rss.anon, ...), in bytes. */
static tm_status apply_process_stats(dec *d, int64_t ts, tm_bytes b) {
    static const char *const names[TM_PF_PROC_STATS_OOM_SCORE_ADJ + 1] = {
        [TM_PF_PROC_STATS_VM_SIZE_KB] = "mem.virt",         [TM_PF_PROC_STATS_VM_RSS_KB] = "mem.rss",
        [TM_PF_PROC_STATS_RSS_ANON_KB] = "mem.rss.anon",    [TM_PF_PROC_STATS_RSS_FILE_KB] = "mem.rss.file",
        [TM_PF_PROC_STATS_RSS_SHMEM_KB] = "mem.rss.shmem",  [TM_PF_PROC_STATS_VM_SWAP_KB] = "mem.swap",
        [TM_PF_PROC_STATS_VM_LOCKED_KB] = "mem.locked",     [TM_PF_PROC_STATS_VM_HWM_KB] = "mem.rss.watermark",
        [TM_PF_PROC_STATS_OOM_SCORE_ADJ] = "oom_score_adj"};
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != TM_PF_PROCESS_STATS_PROCESSES) continue;
        int64_t pid = 0;
        tm_pb_reader pr = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while (tm_pb_next(&pr, &g) == TM_PB_OK)
            if (g.num == TM_PF_PROC_STATS_PID) pid = (int32_t)g.val;
        uint32_t upid;
        TM_TRY(process_of(d, pid, &upid));
        pr = tm_pb_reader_of(f.bytes);
        while (tm_pb_next(&pr, &g) == TM_PB_OK) {
            if (g.num <= TM_PF_PROC_STATS_PID || g.num > TM_PF_PROC_STATS_OOM_SCORE_ADJ) continue;
            uint64_t key = (uint64_t)upid << 8 | g.num;
            uint32_t track = tm_u64map_get(&d->proc_track, key);
            if (track == TM_ABSENT) {
                const char *n = names[g.num];
                TM_TRY(new_track(d, TP_TRACK_PROCESS_COUNTER, (tm_str){(const uint8_t *)n, strlen(n)}, no_str, TP_NULL,
                                 TP_NULL, false, &track));
                d->tp->tracks[track].upid = upid;
                if (tm_u64map_put(d->mem, &d->proc_track, key, track) != TM_OK) return nomem(d);
            }
            double v = g.num == TM_PF_PROC_STATS_OOM_SCORE_ADJ ? (double)(int32_t)g.val : (double)g.val * 1024.0;
            TM_TRY(add_counter(d, ts, track, v, TP_NULL));
        }
    }
    return rc == TM_PB_ERROR ? pb_fail(d, &r, "process_stats") : TM_OK;
}

static tm_status apply_event(dec *d, const event *e) {
    switch (e->kind) {
    case EV_PROCESS_STATS: return apply_process_stats(d, e->ts, e->msg);
    case EV_PROFILE_PACKET: {
        tm_pf_heap_sink sink = heap_sink(d);
        return tm_pf_heap_packet(&d->heap, &d->rd, e->gen, e->msg, e->ts, &sink);
    }
    case EV_PROCESS_TREE: return apply_process_tree(d, e->msg);
    case EV_PROCESS_DESC: return apply_process_desc(d, e->msg, 2);
    case EV_THREAD_DESC: return apply_thread_desc(d, e->msg);
    case EV_TRACK_DESC: {
        tm_pb_reader r = tm_pb_reader_of(e->msg);
        tm_pb_field f;
        int rc;
        while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
            if (f.num == TM_PF_TRACK_DESC_PROCESS && f.wire == TM_PB_LEN) TM_TRY(apply_process_desc(d, f.bytes, 2));
            if (f.num == TM_PF_TRACK_DESC_THREAD && f.wire == TM_PB_LEN) TM_TRY(apply_thread_desc(d, f.bytes));
        }
        return rc == TM_PB_ERROR ? pb_fail(d, &r, "track_descriptor") : TM_OK;
    }
    default: return TM_OK;
    }
}

/* ---- sorting and the parse pass ------------------------------------------------- */

static int cmp_event(const void *a, const void *b) {
    const event *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* Does row a (file order) sort before row b: time, then file order? */
static bool sample_before(const int64_t *ts, uint32_t a, uint32_t b) { return ts[a] < ts[b] || (ts[a] == ts[b] && a < b); }

/* One pass of a natural merge sort of rows in by time: each two runs in
 * order merged into out. Returns whether in was one run already. */
static bool merge_runs(const int64_t *ts, const uint32_t *in, uint32_t *out, size_t n) {
    size_t i = 0;
    bool one_run = true;
    while (i < n) {
        size_t mid = i + 1;
        while (mid < n && sample_before(ts, in[mid - 1], in[mid])) mid++;
        size_t end = mid < n ? mid + 1 : n;
        while (end < n && sample_before(ts, in[end - 1], in[end])) end++;
        if (mid < n) one_run = false;
        size_t a = i, b = mid, o = i;
        while (a < mid && b < end) out[o++] = sample_before(ts, in[b], in[a]) ? in[b++] : in[a++];
        while (a < mid) out[o++] = in[a++];
        while (b < end) out[o++] = in[b++];
        i = end;
    }
    return one_run;
}

enum { MERGE_RUNS_MAX = 64 };

/* The runs' heads in merge_heads: each run's next row and its time; a run
 * that is done holds (INT64_MAX, UINT32_MAX), after every row. */
typedef struct run_heads {
    int64_t ts[MERGE_RUNS_MAX];
    uint32_t row[MERGE_RUNS_MAX];
} run_heads;

static bool head_before(const run_heads *h, size_t a, size_t b) {
    return h->ts[a] < h->ts[b] || (h->ts[a] == h->ts[b] && h->row[a] < h->row[b]);
}

/* Merges the k runs of in that start at starts (ascending, the first at 0;
 * each in time order) into out in one pass, through a tournament of the
 * runs' heads (each node of the tree holds the loser of its match, so an
 * output row replays one match per level): each output row reads the time
 * of the next row of its own run only, so the reads stay a few streams in
 * address order. */
static void merge_heads(const int64_t *ts, const uint32_t *in, uint32_t *out, size_t n, const uint32_t *starts,
                        size_t k) {
    run_heads h;
    uint32_t at[MERGE_RUNS_MAX], end[MERGE_RUNS_MAX];
    uint8_t loser[MERGE_RUNS_MAX], won[2 * MERGE_RUNS_MAX];
    size_t leaves = 1;
    for (size_t r = 0; r < k; r++) at[r] = starts[r], end[r] = r + 1 < k ? starts[r + 1] : (uint32_t)n;
    while (leaves < k) leaves *= 2;
    for (size_t r = 0; r < leaves; r++) {
        h.row[r] = r < k ? in[at[r]] : UINT32_MAX;
        h.ts[r] = r < k ? ts[h.row[r]] : INT64_MAX;
        won[leaves + r] = (uint8_t)r;
    }
    for (size_t v = leaves - 1; v >= 1; v--) {
        uint8_t x = won[2 * v], y = won[2 * v + 1];
        bool y_wins = head_before(&h, y, x);
        won[v] = y_wins ? y : x;
        loser[v] = y_wins ? x : y;
    }
    size_t w = won[1];
    for (size_t o = 0; o < n; o++) {
        out[o] = h.row[w];
        if (++at[w] < end[w]) {
            h.row[w] = in[at[w]];
            h.ts[w] = ts[h.row[w]];
        } else {
            h.row[w] = UINT32_MAX, h.ts[w] = INT64_MAX;
        }
        for (size_t v = (leaves + w) / 2; v >= 1; v /= 2)
            if (head_before(&h, loser[v], w)) {
                size_t t = loser[v];
                loser[v] = (uint8_t)w;
                w = t;
            }
    }
}

/* sort_samples' count, then next place, of each sequence's rows, and the
 * time of the last row placed. */
typedef struct seq_rows {
    size_t at;
    int64_t last;
} seq_rows;

/* Puts the sample columns in timestamp order, ties in file order; d->s_order
 * keeps each row's file order for ties with events. A sequence's samples
 * come in time order (mostly) while the file interleaves sequences: grouped
 * by sequence, the rows make a few runs in order, merged in one pass
 * (merge_heads; pass by pass past MERGE_RUNS_MAX runs: merge_runs), over 4
 * bytes a row where a sort of (time, row) pairs took 32. */
static tm_status sort_samples(dec *d) {
    tm_tp *tp = d->tp;
    size_t n = tp->n_samples;
    size_t i = 1;
    while (i < n && tp->s_ts[i - 1] <= tp->s_ts[i]) i++;
    if (i >= n) return TM_OK;
    size_t n_seqs = d->rd.n_seqs;
    uint32_t *order = tm_mem_alloc(d->mem, n * sizeof *order);
    uint32_t *spare = tm_mem_alloc(d->mem, n * sizeof *spare);
    seq_rows *q = tm_mem_alloc(d->mem, (n_seqs + 1) * sizeof *q);
    if (!order || !spare || !q) {
        tm_mem_free(d->mem, order, n * sizeof *order);
        tm_mem_free(d->mem, spare, n * sizeof *spare);
        tm_mem_free(d->mem, q, (n_seqs + 1) * sizeof *q);
        return nomem(d);
    }
    /* By sequence, file order within each (the callsite column holds the
     * generation); the runs in time order are found on the way, in one
     * pass over the times in file order: a run starts with each sequence,
     * and where a row is earlier than its sequence's row before. */
    for (size_t s = 0; s <= n_seqs; s++) q[s] = (seq_rows){0, INT64_MIN};
    for (i = 0; i < n; i++) q[gen_of(d, tp->s_callsite[i])->seq + 1].at++;
    uint32_t starts[MERGE_RUNS_MAX];
    size_t k = 0;
    for (size_t s = 0; s < n_seqs; s++) {
        if (q[s + 1].at && k < MERGE_RUNS_MAX) starts[k] = (uint32_t)q[s].at;
        k += q[s + 1].at != 0;
        q[s + 1].at += q[s].at;
    }
    for (i = 0; i < n; i++) {
        seq_rows *r = &q[gen_of(d, tp->s_callsite[i])->seq];
        if (tp->s_ts[i] < r->last) {
            if (k < MERGE_RUNS_MAX) starts[k] = (uint32_t)r->at;
            k++;
        }
        r->last = tp->s_ts[i];
        spare[r->at++] = (uint32_t)i;
    }
    tm_mem_free(d->mem, q, (n_seqs + 1) * sizeof *q);
    if (k <= MERGE_RUNS_MAX) {
        for (size_t a = 1; a < k; a++) /* in place order: breaks were found in file order */
            for (size_t b = a; b > 0 && starts[b - 1] > starts[b]; b--) {
                uint32_t t = starts[b];
                starts[b] = starts[b - 1], starts[b - 1] = t;
            }
        merge_heads(tp->s_ts, spare, order, n, starts, k);
    } else {
        while (!merge_runs(tp->s_ts, spare, order, n)) {
            uint32_t *t = order;
            order = spare, spare = t;
        }
    }
    d->s_order = order;
    d->n_order = n;
    /* Each column gathered in order into another buffer, which becomes
     * the column: the 4-byte columns into spare, then each into the buffer
     * the one before gave up; then the times into a new one, once spare's
     * last is freed (nothing copied back, no more memory at once). */
    uint32_t **cols[] = {&tp->s_callsite, &tp->s_task, &tp->s_attr};
    size_t *caps[] = {&tp->cap_callsite, &tp->cap_task, &tp->cap_attr}, cap = n;
    for (size_t c = 0; c < sizeof cols / sizeof *cols; c++) {
        uint32_t *col = *cols[c];
        for (size_t r = 0; r < n; r++) spare[r] = col[order[r]];
        *cols[c] = spare, spare = col;
        size_t t = *caps[c];
        *caps[c] = cap, cap = t;
    }
    tm_mem_free(d->mem, spare, cap * sizeof *spare);
    int64_t *ts = tm_mem_alloc(d->mem, n * sizeof *ts);
    if (!ts) return nomem(d);
    for (size_t r = 0; r < n; r++) ts[r] = tp->s_ts[order[r]];
    tm_mem_free(d->mem, tp->s_ts, tp->cap_ts * sizeof *tp->s_ts);
    tp->s_ts = ts, tp->cap_ts = n;
    tp->cap_samples = n; /* the times' (the others' are at least n) */
    return TM_OK;
}

/* How many samples resolve in each generation: when a generation's last
 * one is parsed its callsite trie goes (nothing resolves in it again), so
 * a trace of many clears holds the tries of the generations in progress
 * only. Heap profiles resolve in theirs until the end: pinned. */
static tm_status count_gen_samples(dec *d) {
    size_t n = d->rd.n_gens;
    d->gen_samples_left = tm_mem_alloc(d->mem, (n ? n : 1) * sizeof *d->gen_samples_left);
    if (!d->gen_samples_left) return nomem(d);
    d->n_gen_samples_left = n ? n : 1;
    memset(d->gen_samples_left, 0, d->n_gen_samples_left * sizeof *d->gen_samples_left);
    for (size_t i = 0; i < d->n_events; i++)
        if (d->events[i].kind == EV_PROFILE_PACKET && d->events[i].gen < n) d->gen_samples_left[d->events[i].gen] = GEN_PINNED;
    for (size_t i = 0; i < d->tp->n_samples; i++) {
        uint32_t gen = d->tp->s_callsite[i];
        if (gen < n && d->gen_samples_left[gen] != GEN_PINNED) d->gen_samples_left[gen]++;
    }
    for (size_t gen = 0; gen < n; gen++) {
        uint32_t left = d->gen_samples_left[gen];
        if (!left) continue;
        uint64_t key = (uint64_t)gen_of(d, (uint32_t)gen)->seq << 32 | gen_of(d, (uint32_t)gen)->epoch;
        uint32_t e = tm_u64map_get(&d->epoch_slot, key);
        if (e == TM_ABSENT) {
            if (TM_VEC_RESERVE(d->mem, d->epoch_gens_left, d->cap_epoch_slots, d->n_epoch_slots + 1) != TM_OK)
                return nomem(d);
            e = (uint32_t)d->n_epoch_slots++;
            d->epoch_gens_left[e] = 0;
            if (tm_u64map_put(d->mem, &d->epoch_slot, key, e) != TM_OK) return nomem(d);
        }
        if (left == GEN_PINNED) d->epoch_gens_left[e] = GEN_PINNED;
        else if (d->epoch_gens_left[e] != GEN_PINNED) d->epoch_gens_left[e]++;
    }
    return TM_OK;
}

static tm_status sample_parsed(dec *d, uint32_t gen) {
    if (gen >= d->n_gen_samples_left || d->gen_samples_left[gen] == GEN_PINNED || --d->gen_samples_left[gen]) return TM_OK;
    d->gen_samples_left[gen] = GEN_DONE;
    const tm_pf_gen *g = gen_of(d, gen);
    uint32_t e = tm_u64map_get(&d->epoch_slot, (uint64_t)g->seq << 32 | g->epoch);
    if (e != TM_ABSENT && d->epoch_gens_left[e] != GEN_PINNED && --d->epoch_gens_left[e] == 0)
        tm_pf_release_epoch(&d->rd, g->seq, g->epoch);
    uint32_t t = tm_iidmap_get(&d->cs_trie_by_gen, gen);
    if (t != TM_ABSENT) trie_done(d, &d->cs_tries[t]);
    for (uint32_t i = tm_iidmap_get(&d->set_by_gen, gen); i != TM_ABSENT; i = d->sets[i].next)
        for (int k = 0; k < 3; k++) tm_iidmap_free(d->mem, &d->sets[i].rows[k]);
    return tm_iidmap_put(d->mem, &d->cs_trie_by_gen, gen, CS_TRIE_FREED, d->rd.n_gens + 1) == TM_OK ? TM_OK : nomem(d);
}

/* A PerfSample's callstack_iid (0: none, or not read: parse_perf says
 * why) and the pid before it, for prefetching only. */
static uint64_t perf_callstack_iid(const uint8_t *len_prefix, uint64_t *pid) {
    tm_pb_reader r = tm_pb_reader_of(payload_at(len_prefix));
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.num == TM_PF_PERF_SAMPLE_PID) *pid = f.val;
        if (f.num == TM_PF_PERF_SAMPLE_CALLSTACK_IID && f.wire == TM_PB_VARINT) return f.val;
    }
    return 0;
}

/* Asks for the slot a callstack's row would be in, when process pid has a
 * row set in generation gen already (a sample names its process by pid;
 * nothing is made here). */
static void prefetch_callstack_row(dec *d, uint32_t gen, uint64_t pid, uint64_t iid) {
    uint32_t upid = tm_u64map_get(&d->proc_by_pid, pid);
    const row_set *rs = upid == TM_ABSENT || !in_sets(CK_CALLSTACK, gen) ? NULL : set_of(d, gen, upid);
    if (rs && iid < rs->rows[CK_CALLSTACK - CK_MAPPING].n_dense)
        __builtin_prefetch(&rs->rows[CK_CALLSTACK - CK_MAPPING].dense[iid]);
}

/* How many samples ahead of the one parsed a callstack's bytes are asked
 * for (its index slot twice as far): on a heavy trace each is a cache miss
 * in the mapped input, which the samples between hide. */
#define PREFETCH_AHEAD 8
/* Of the last 64 callstack resolutions, how many must have missed the
 * caches for that to be worth its cost (a trace whose few callstacks all
 * resolve in the first samples has nothing to wait for). */
#define PREFETCH_MISSES 4

static tm_status parse_all(dec *d) {
    tm_tp *tp = d->tp;
    TM_TRY(sort_samples(d));
    if (d->n_events) qsort(d->events, d->n_events, sizeof *d->events, cmp_event);
    TM_TRY(count_gen_samples(d));
    if (d->n_pend) {
        d->chrome_memo = tm_mem_alloc(d->mem, d->n_pend * sizeof *d->chrome_memo);
        if (!d->chrome_memo) return nomem(d);
        d->n_chrome_memo = d->n_pend;
        memset(d->chrome_memo, 0, d->n_pend * sizeof *d->chrome_memo);
    }
    size_t j = 0, w = 0, n = tp->n_samples;
    tp->n_kind_words = n / 64 + 1;
    tp->perf_rows = tm_mem_alloc(d->mem, tp->n_kind_words * sizeof *tp->perf_rows);
    tp->chrome_rows = tm_mem_alloc(d->mem, tp->n_kind_words * sizeof *tp->chrome_rows);
    if (!tp->perf_rows || !tp->chrome_rows) return nomem(d);
    memset(tp->perf_rows, 0, tp->n_kind_words * sizeof *tp->perf_rows);
    memset(tp->chrome_rows, 0, tp->n_kind_words * sizeof *tp->chrome_rows);
    /* The callstack iids of the samples ahead, read once for both steps
     * (by sample index modulo 2 * PREFETCH_AHEAD; 0: none, or not read). */
    uint64_t ahead[2 * PREFETCH_AHEAD] = {0}, ahead_pid[2 * PREFETCH_AHEAD] = {0};
    for (size_t i = 0; i < n; i++) {
        size_t a = i + 2 * PREFETCH_AHEAD; /* the callstacks of samples ahead, asked for early */
        ahead[a % (2 * PREFETCH_AHEAD)] = 0;
        if (a < n && d->cs_misses >= PREFETCH_MISSES) {
            uint8_t kind = tp->attrs[tp->s_attr[a]].kind;
            uint64_t iid = 0, pid = 0;
            const sample_ref *ref = &d->s_ref[d->s_order ? d->s_order[a] : a];
            if (kind == TP_SRC_CHROME) iid = ref->iid, pid = (uint64_t)d->pend[tp->s_task[a]][0];
            if (kind == TP_SRC_PERF) iid = perf_callstack_iid(ref->payload, &pid);
            ahead[a % (2 * PREFETCH_AHEAD)] = iid;
            ahead_pid[a % (2 * PREFETCH_AHEAD)] = pid;
            if (iid) tm_pf_prefetch(&d->rd, tp->s_callsite[a], TM_PF_INTERNED_CALLSTACKS, iid, 0);
        }
        a = i + PREFETCH_AHEAD;
        uint64_t iid = ahead[a % (2 * PREFETCH_AHEAD)];
        if (a < n && iid) {
            tm_pf_prefetch(&d->rd, tp->s_callsite[a], TM_PF_INTERNED_CALLSTACKS, iid, 1);
            prefetch_callstack_row(d, tp->s_callsite[a], ahead_pid[a % (2 * PREFETCH_AHEAD)], iid);
        }
        size_t order = d->s_order ? d->s_order[i] : i;
        d->samples_parsed = i + 1;
        while (j < d->n_events &&
               (d->events[j].ts < tp->s_ts[i] || (d->events[j].ts == tp->s_ts[i] && d->events[j].order <= order)))
            TM_TRY(apply_event(d, &d->events[j++]));
        out_row o = {w, tp->s_ts[i], tp->s_callsite[i]};
        sample_ref ref = d->s_ref[order];
        uint32_t attr = tp->s_attr[i];
        bool keep = true;
        switch (tp->attrs[attr].kind) {
        case TP_SRC_PERF: TM_TRY(parse_perf(d, &o, ref.payload, &keep)); break;
        case TP_SRC_CHROME: TM_TRY(parse_chrome(d, &o, ref.iid, tp->s_task[i], attr)); break;
        default: TM_TRY(parse_stack_sample(d, &o, ref.payload)); break;
        }
        if (keep) w++;
        TM_TRY(sample_parsed(d, o.gen));
    }
    while (j < d->n_events) TM_TRY(apply_event(d, &d->events[j++]));
    tp->n_samples = w;
    tm_pf_heap_sink sink = heap_sink(d);
    TM_TRY(tm_pf_heap_finish(&d->heap, &sink));
    /* trace_start(): the earliest row with a time */
    bool any = false;
    int64_t start = 0;
#define EARLIEST(v) do { if (!any || (v) < start) start = (v), any = true; } while (0)
    if (tp->n_samples) EARLIEST(tp->s_ts[0]);
    for (size_t i = 0; i < tp->n_heap_allocs; i++) EARLIEST(tp->heap_allocs[i].ts);
    for (size_t i = 0; i < tp->n_counters; i++) EARLIEST(tp->counters[i].ts);
#undef EARLIEST
    tp->trace_start = start;
    return TM_OK;
}

/* ---- results: stats, metadata --------------------------------------------------- */

static tm_status sequence_stats(dec *d) {
    static const uint32_t reason_keys[9] = {0, TPS_traced_buf_data_loss_read_gap, TPS_traced_buf_data_loss_chunk_corrupted,
                                            TPS_traced_buf_data_loss_orphan_continuation,
                                            TPS_traced_buf_data_loss_reassembly_gap,
                                            TPS_traced_buf_data_loss_reassembly_broken_chain,
                                            TPS_traced_buf_data_loss_overwrite, TPS_traced_buf_data_loss_writer_abort,
                                            TPS_traced_buf_data_loss_smb_full};
    for (size_t i = 0; i < d->n_seqs; i++) {
        const seq_state *s = &d->seqs[i];
        if (s->buffer == TP_NULL) continue;
        TM_TRY(stat_set_idx(d, TPS_traced_buf_sequence_packet_loss, 0, s->buffer, s->packet_losses, true));
        TM_TRY(stat_set_idx(d, TPS_traced_buf_incremental_sequences_dropped, 0, s->buffer,
                            s->needs_skipped && !s->needs_accepted, true));
        for (int bit = 1; bit < 9; bit++)
            if (s->loss_reasons[bit])
                TM_TRY(stat_set_idx(d, reason_keys[bit], 0, s->buffer, s->loss_reasons[bit], true));
    }
    return TM_OK;
}

static int cmp_stat(const void *a, const void *b) {
    const stat_ent *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    if (x->machine != y->machine) return x->machine < y->machine ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* One row per single stat, then the indexed ones that were set, in key order. */
static tm_status build_stats(dec *d) {
    if (d->n_stats) qsort(d->stats, d->n_stats, sizeof *d->stats, cmp_stat);
    size_t j = 0;
    for (uint32_t key = 0; key < TPS_COUNT; key++) {
        tp_stat *row;
        if (!tp_stat_defs[key].indexed) {
            if (PUSH(d->tp, stats, row) != TM_OK) return nomem(d);
            *row = (tp_stat){key, 0, TP_NO_INT, d->single[key]};
        }
        for (; j < d->n_stats && d->stats[j].key == key; j++) {
            if (PUSH(d->tp, stats, row) != TM_OK) return nomem(d);
            *row = (tp_stat){key, d->stats[j].machine, d->stats[j].idx, d->stats[j].value};
        }
    }
    return TM_OK;
}

static tm_status add_meta(dec *d, const char *name, int64_t v, tm_str s) {
    tp_meta *m;
    if (PUSH(d->tp, meta, m) != TM_OK) return nomem(d);
    m->name = name, m->int_value = v, m->str_value = s;
    return TM_OK;
}

static tm_status build_metadata(dec *d, const uint8_t *buf, size_t len) {
    /* A trace names itself by a TraceUuid packet or its config's
     * trace_uuid_msb/lsb; without either Trace Processor names it by the
     * 64-bit FNV-1a hash of its first 4 KiB (as the low half). Printed as
     * Perfetto does: the 128 bits, msb first, big-endian, 8-4-4-4-12. */
    uint64_t msb = d->uuid_msb, lsb = d->uuid_lsb;
    if (!d->uuid_from_packet && !d->uuid_from_config) {
        msb = 0, lsb = 0xcbf29ce484222325ull;
        for (size_t i = 0; i < len && i < 4096; i++) lsb = (lsb ^ buf[i]) * 0x100000001b3ull;
    }
    char uuid[40];
    snprintf(uuid, sizeof uuid, "%08llx-%04x-%04x-%04x-%012llx", (unsigned long long)(msb >> 32),
             (unsigned)(msb >> 16 & 0xffff), (unsigned)(msb & 0xffff), (unsigned)(lsb >> 48),
             (unsigned long long)(lsb & 0xffffffffffffull));
    TM_TRY(add_meta(d, "trace_size_bytes", (int64_t)len, no_str));
    if (tm_clocks_real_snapshots(&d->rd.clocks))
        TM_TRY(add_meta(d, "trace_time_clock_id", (int64_t)d->rd.clocks.trace_clock, no_str));
    TM_TRY(add_meta(d, "trace_type", TP_NO_INT, (tm_str){(const uint8_t *)"proto", 5}));
    tm_str uuid_str;
    TM_TRY(arena_str(d, uuid, strlen(uuid), &uuid_str));
    TM_TRY(add_meta(d, "trace_uuid", TP_NO_INT, uuid_str));
    return TM_OK;
}

/* ---- entry points ------------------------------------------------------------------ */

static void dec_release(dec *d) {
    tm_mem *m = d->mem;
    for (size_t i = 0; i < d->n_sets; i++)
        for (int k = 0; k < 3; k++) tm_iidmap_free(m, &d->sets[i].rows[k]);
    tm_mem_free(m, d->sets, d->cap_sets * sizeof *d->sets);
    tm_u64map_free(m, &d->set_by_key);
    tm_iidmap_free(m, &d->set_by_gen);
    tm_mem_free(m, d->seqs, d->cap_seqs * sizeof *d->seqs);
    tm_pf_reader_release(&d->rd);
    tm_pf_symbols_free(m, &d->syms);
    tm_mem_free(m, d->cache, d->cap_cache * sizeof *d->cache);
    tm_idxset_free(m, &d->cache_set);
    tm_mem_free(m, d->stats, d->cap_stats * sizeof *d->stats);
    tm_mem_free(m, d->events, d->cap_events * sizeof *d->events);
    tm_pf_heap_release(&d->heap);
    tm_u64map_free(m, &d->proc_track);
    tm_mem_free(m, d->s_ref, d->cap_ref * sizeof *d->s_ref);
    tm_mem_free(m, d->s_order, d->n_order * sizeof *d->s_order);
    tm_mem_free(m, d->pend, d->cap_pend * sizeof *d->pend);
    tm_mem_free(m, d->chrome_memo, d->n_chrome_memo * sizeof *d->chrome_memo);
    tm_u64map_free(m, &d->pend_by_key);
    tm_u64map_free(m, &d->proc_by_pid);
    tm_u64map_free(m, &d->thread_by_tid);
    for (size_t i = 0; i < d->n_cs_tries; i++) trie_free(m, &d->cs_tries[i]);
    trie_free(m, &d->spare_trie);
    tm_mem_free(m, d->cs_tries, d->cap_cs_tries * sizeof *d->cs_tries);
    tm_iidmap_free(m, &d->cs_trie_by_gen);
    tm_mem_free(m, d->gen_samples_left, d->n_gen_samples_left * sizeof *d->gen_samples_left);
    tm_u64map_free(m, &d->epoch_slot);
    tm_mem_free(m, d->epoch_gens_left, d->cap_epoch_slots * sizeof *d->epoch_gens_left);
    tm_u64map_free(m, &d->cs_shared);
    tm_mem_free(m, d->cs_ids, d->cap_cs_ids * sizeof *d->cs_ids);
    tm_mem_free(m, d->mapping_owner, d->cap_mapping_owner * sizeof *d->mapping_owner);
    tm_mem_free(m, d->frame_owner, d->cap_frame_owner * sizeof *d->frame_owner);
    tm_idxset *sets[] = {&d->frame_set, &d->global_map_set, &d->exec_set,
                         &d->attr_set, &d->task_set};
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++) tm_idxset_free(m, sets[i]);
}

tm_status tm_tp_build(tm_tp *tp, tm_mem *mem, const uint8_t *buf, size_t len, const tm_limits *limits, bool strict,
                      tm_error *err) {
    memset(tp, 0, sizeof *tp);
    tp->mem = mem;
    tm_arena_init(&tp->arena, mem);
    dec d;
    memset(&d, 0, sizeof d);
    d.tp = tp, d.mem = mem, d.lim = limits, d.err = err;
    tm_pf_reader_init(&d.rd, buf, len, mem, &tp->arena, limits, TM_PF_KEEP_EPOCHS | (strict ? TM_PF_STRICT : 0), err);
    d.dummy_mapping = TP_NULL;
    d.art_mapping = TP_NULL;
    memset(d.set_memo, 0xff, sizeof d.set_memo); /* TM_ABSENT */
    d.kind_attr[0] = d.kind_attr[1] = TM_ABSENT;
    tm_pf_heap_init(&d.heap, mem);
    /* The reserved rows: process 0 and its idle thread "swapper". */
    uint32_t upid;
    tm_status st = process_of(&d, 0, &upid);
    if (st == TM_OK) {
        tp->threads[0].name = (tm_str){(const uint8_t *)"swapper", 7};
        tp->threads[0].name_prio = UINT32_MAX;
        tp->threads[0].is_idle = 1;
    }
    struct timespec t1, t2;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st == TM_OK) st = decode_trace(&d);
    if (st == TM_OK) st = parse_all(&d);
    if (st == TM_OK) {
        tm_pf_walk_error bad;
        st = symbols_status(&d, tm_tp_symbols_apply(tp, &d.syms, d.single, &bad), &bad);
    }
    if (st == TM_OK) st = sequence_stats(&d);
    if (st == TM_OK) st = build_metadata(&d, buf, len);
    tp->cut_off = d.rd.counts.truncated;
    tp->cut_off_at = d.rd.counts.truncated_at;
    /* Wall-clock timings, as Trace Processor reports them (never 0). The
     * type guess is the reader's test of the first byte, inside the parse:
     * no time of its own to measure. */
    clock_gettime(CLOCK_MONOTONIC, &t2);
    int64_t parse_ns = (t2.tv_sec - t1.tv_sec) * 1000000000ll + (t2.tv_nsec - t1.tv_nsec);
    d.single[TPS_guess_trace_type_duration_ns] = 1;
    d.single[TPS_parse_trace_duration_ns] = parse_ns > 0 ? parse_ns : 1;
    if (st == TM_OK) st = build_stats(&d);
    dec_release(&d);
    if (st != TM_OK) tm_tp_release(tp);
    return st;
}

void tm_tp_release(tm_tp *tp) {
    tm_mem *m = tp->mem;
    if (!m) return;
#define FREE_VEC(v) tm_mem_free(m, tp->v, tp->cap_##v * sizeof *tp->v)
    FREE_VEC(processes); FREE_VEC(threads); FREE_VEC(mappings); FREE_VEC(frames);
    FREE_VEC(symbols); FREE_VEC(attrs); FREE_VEC(tasks); FREE_VEC(execs); FREE_VEC(asyncs);
    FREE_VEC(sessions); FREE_VEC(tracks); FREE_VEC(counters); FREE_VEC(stats); FREE_VEC(meta);
    FREE_VEC(clocks); FREE_VEC(heap_allocs); FREE_VEC(heap_dumps);
    FREE_VEC(packages); tm_idxset_free(m, &tp->package_names);
#undef FREE_VEC
    tm_mem_free(m, tp->callsites.frame, tp->callsites.cap * sizeof *tp->callsites.frame);
    tm_mem_free(m, tp->callsites.words, tp->callsites.cap_words * sizeof *tp->callsites.words);
    tm_mem_free(m, tp->callsites.heads, tp->callsites.cap_heads * sizeof *tp->callsites.heads);
    tm_mem_free(m, tp->s_ts, tp->cap_ts * sizeof *tp->s_ts);
    tm_mem_free(m, tp->s_callsite, tp->cap_callsite * sizeof *tp->s_callsite);
    tm_mem_free(m, tp->s_task, tp->cap_task * sizeof *tp->s_task);
    tm_mem_free(m, tp->s_attr, tp->cap_attr * sizeof *tp->s_attr);
    tm_mem_free(m, tp->perf_rows, tp->n_kind_words * sizeof *tp->perf_rows);
    tm_mem_free(m, tp->chrome_rows, tp->n_kind_words * sizeof *tp->chrome_rows);
    tm_arena_release(&tp->arena);
    memset(tp, 0, sizeof *tp);
}

/* ---- names ---------------------------------------------------------------------------- */

const char *tm_tp_unwind_error_name(unsigned plus_one) {
    static const char *const names[] = {"unknown", "none", "memory_invalid", "unwind_info", "unsupported",
                                        "invalid_map", "max_frames_exceeded", "repeated_frame", "invalid_elf",
                                        "system_call", "thread_timeout", "thread_does_not_exist", "bad_arch",
                                        "maps_parse", "invalid_parameter", "ptrace_call"};
    if (!plus_one) return NULL;
    return plus_one - 1 < sizeof names / sizeof *names ? names[plus_one - 1] : "unknown";
}

const char *tm_tp_clock_name(uint32_t id) {
    static const char *const names[] = {NULL, "REALTIME", "REALTIME_COARSE", "MONOTONIC", "MONOTONIC_COARSE",
                                        "MONOTONIC_RAW", "BOOTTIME"};
    return id < sizeof names / sizeof *names ? names[id] : NULL;
}

const tp_stat_def *tm_tp_stat_def(uint32_t key) { return &tp_stat_defs[key]; }

const char *tm_tp_stat_description(uint32_t key) {
    switch (key) {
    case TPS_clock_sync_cache_miss: return "Clock conversions that were not in the 8-entry cache of single-hop conversions.";
    case TPS_clock_sync_failure_unknown_source_clock: return "Timestamps in a clock that no ClockSnapshot mentions.";
    case TPS_clock_sync_failure_no_path: return "Timestamps whose clock no chain of ClockSnapshots links to trace time.";
    case TPS_clock_sync_failure_undeferrable_packet_loss: return "Packets dropped because their timestamp could not be converted.";
    case TPS_packet_skipped_seq_needs_incremental_state_invalid: return "Packets that need interned data skipped while their sequence had lost it.";
    case TPS_interned_data_skipped_incremental_state_invalid: return "Interned data ignored while its sequence had lost its incremental state.";
    case TPS_perf_cpu_lost_records: return "PerfSample records the kernel dropped, by CPU.";
    case TPS_perf_samples_skipped: return "PerfSamples the profiler could not read or unwind.";
    case TPS_perf_samples_skipped_dataloss: return "PerfSamples the profiler shed under load.";
    case TPS_perf_guardrail_stop_ts: return "When a guardrail stopped the perf session.";
    case TPS_stackprofile_invalid_string_id: case TPS_stackprofile_invalid_mapping_id:
    case TPS_stackprofile_invalid_frame_id: case TPS_stackprofile_invalid_callstack_id:
        return "Callstacks dropped because an interned id was never defined on their sequence.";
    case TPS_stackprofile_empty_callstack: return "Callstacks without frames.";
    case TPS_stackprofile_parser_error: return "StreamingProfilePackets with fewer timestamp deltas than callstacks.";
    case TPS_streaming_profile_invalid_timestamp: return "StreamingProfilePacket samples whose time came out negative.";
    case TPS_traced_buf_sequence_packet_loss: return "Times a sequence writing into this buffer lost packets.";
    case TPS_traced_buf_incremental_sequences_dropped: return "Sequences of this buffer whose every packet needing interned data was skipped.";
    case TPS_long_trace_mode_bytes_overwritten: return "Bytes a buffer overwrote while streaming into a file: missing from the trace.";
    default: return "";
    }
}

tm_status tm_tp_require_perfetto(const tm_options *opts, const uint8_t *buf, size_t len, const char *who,
                                 tm_error *err) {
    tm_input_format f = opts ? opts->input : TM_INPUT_AUTO;
    if (f == TM_INPUT_AUTO) f = len ? tm_input_detect(buf, len) : TM_INPUT_PERFETTO;
    if (f == TM_INPUT_PERFETTO) return TM_OK;
    return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "%s needs a Perfetto trace; this is %s input", who,
                   tm_input_format_name(f));
}
