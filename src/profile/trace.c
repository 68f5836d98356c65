/*
 * trace.c — the profile model's consumer of the Perfetto reader
 * (perfetto/reader.h): turns the packets it yields into profile samples,
 * stacks, frames, mappings, threads and processes, resolving interned
 * callstacks as samples arrive; and the tm_trace entry points.
 *
 * The reader owns packets, sequences, generations and interning; this file
 * never reads a TracePacket header or an InternedData message itself. Two
 * explicit paths share it:
 *  - default mode follows Trace Processor: packets that need incremental
 *    state their sequence lost are skipped (and counted), PerfSample,
 *    StreamingProfilePacket and (v58) StackSample samples are resolved
 *    when read; clocks go through the snapshot graph (clock.c) once the
 *    whole trace is read. PerfSamples of an off-CPU timebase (the reader's
 *    tm_pf_gen.off_cpu) become off-CPU samples, kept apart from the others
 *    and weighed by their blocked ns.
 *  - TM_MODE_RELAY reproduces Sentry Relay's converter (the reader's
 *    TM_PF_RELAY reading: PerfSample only, later entries overwrite, no loss
 *    handling), unresolvable frames skipped, the first BOOTTIME/REALTIME
 *    snapshot.
 *
 * Resolution results (profile stack, frame and mapping per iid) are cached
 * per sequence, with the epochs they hold for: within one epoch entries are
 * only ever added, so a cached resolution stays right across the
 * generations a loss or new defaults start. A clear starts an epoch; a
 * writer that clears often (traced_perf with a short clear_period_ms)
 * re-sends the same entries each time, and a resolution carries over when
 * its entry has had the same bytes ever since (the reader's `same_since`)
 * and everything it refers to carried over too: frames are not interned
 * again, stacks not hashed again. In Relay mode any interned-data merge may
 * replace entries, so it drops them all. A sample whose callstack was seen
 * before in its epoch costs two array loads. Runs of usual PerfSample
 * packets come from the reader in one call (tm_pf_next_run) and are taken
 * in one loop (decode_run), by the same code as one packet's sample.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/limits.h"
#include "perfetto/fields.h"
#include "perfetto/heap.h"   /* heapprofd dumps */
#include "perfetto/reader.h" /* tm_pf_reader: packets, sequences, interning */
#include "wire/json_read.h"  /* tm_json_reader: telling Sample v1 from v2 */
#include "wire/pb.h"         /* tm_pb_reader, tm_pb_next */
#include "profile/aggregate.h" /* tm_frame_label_format */
#include "profile/symbols.h"   /* ModuleSymbols, DeobfuscationMapping */
#include "profile/trace.h"   /* struct tm_trace */

enum { F_HAS_FN = 1, F_HAS_MAPPING = 2, F_HAS_REL_PC = 4 };
enum { M_HAS_BUILD = 1, M_HAS_LOAD_BIAS = 2 };

/* Thread and process name priorities (Trace Processor's). */
enum { PRIO_PROCESS_TREE = 2, PRIO_TRACK_DESCRIPTOR = 4 };

typedef struct ent_frame {
    uint64_t fn, mapping, rel_pc;
    uint32_t flags;
} ent_frame;

/* An interned Frame or Mapping, read when first resolved. */
typedef struct ent_mapping {
    tm_bytes msg; /* for path_string_ids */
    uint64_t build, start, end, load_bias, start_offset, exact_offset;
    uint32_t flags;
} ent_mapping;

/* StackSample's TaskContext (interned or inline); async_id is not kept:
 * the profile model has threads, not async tasks. */
typedef struct ent_task {
    uint32_t pid, tid;
    bool has_tid;
} ent_task;

/* What an interned iid resolved to: id, in every epoch from since to upto
 * (one where it was not resolved included, when its entry stayed the same). */
typedef struct resolved {
    uint32_t id, since, upto;
} resolved;

/* By iid while the iids stay dense (a sample's callstack is one load:
 * heavy traces sample from tens of thousands of stacks per sequence, and
 * each further load is a cache miss), else through a map into res. */
typedef struct res_cache {
    resolved *dense; size_t n_dense; /* id TM_ABSENT: not resolved */
    tm_u64map slot_by_iid;           /* iids past the dense part -> index in res */
    resolved *res; size_t n, cap;
} res_cache;

/* What a callstack or frame iid resolved to in tables of class cls
 * (tm_pf_tables_class). */
typedef struct shared_res {
    uint32_t id, cls;
} shared_res;

/* What the profile model keeps per sequence, beside the reader's
 * tm_pf_seq (same index). */
typedef struct seq_state {
    uint32_t index;
    res_cache stacks;   /* callstack iid -> profile stack */
    res_cache frames;   /* frame iid -> profile frame */
    res_cache mappings; /* mapping iid -> profile mapping */
    bool had_loss, has_thread, has_ref_time;
    int64_t pid, tid;
    int64_t time_ns; /* legacy track-event time (MONOTONIC), StreamingProfilePacket base */
    /* PerfSample timebase counts: whether the generation tb_gen's timebase
     * is task-clock (the sampled thread's CPU time in ns), and the count of
     * the sequence's previous sample that had one (CPU ns, or blocked ns on
     * an off-CPU sequence, so far). */
    uint32_t tb_gen;
    bool tb_known, tb_task_clock;
    uint64_t last_count;
} seq_state;

typedef struct dec {
    tm_trace *t;
    tm_profile *p;
    tm_mem *mem;          /* the working tables', counted against work_budget */
    tm_mem work;
    tm_budget work_budget;
    tm_pf_reader rd;
    uint32_t gen;             /* its generation: what interned lookups see */
    uint32_t cls;             /* the class of the tables gen sees, as resolutions are shared under it (0: none) */
    const tm_limits *lim;
    int relay;
    tm_error *err;

    seq_state **seqs; size_t n_seqs, cap_seqs; /* by the reader's sequence index */
    /* Callstack resolutions shared by the sequences whose tables have one
     * class, by iid, while iids stay dense: a writer's sequences that each
     * intern the same tables, and re-send them at each clear, resolve a
     * callstack once, and a sample loads from one table, not one per
     * sequence (each a cache miss on a heavy trace). */
    shared_res *shared; size_t n_shared; /* cls 0: none */
    /* Frame resolutions shared alike: the frames of a callstack that
     * another sequence of the class resolved are not looked up again. */
    shared_res *shared_frames; size_t n_shared_frames;
    /* Has a resolution met an entry missing from its tables (a mapping
     * path cut at its first unresolvable segment, a build id left out)?
     * Such a resolution does not hold in an epoch that re-sent everything
     * and added the missing entry, so from then on nothing is carried
     * whole (all_carry): each entry is compared instead. */
    bool met_missing;

    uint64_t *cs_scratch; size_t cap_cs;
    int64_t *delta_scratch; size_t cap_delta;
    uint32_t *frame_scratch; size_t cap_fs;

    /* One-entry cache: samples come in runs per thread. last_has_pid: its
     * pid is known (only thread_of_slow sets a thread's pid, never back to 0). */
    int64_t last_tid; uint32_t last_thread; bool last_has_pid;
    uint64_t relay_samples;
    uint64_t relay_boot, relay_real;
    tm_pf_symbols syms;     /* applied to the frames once the trace is read */
    /* StackSample counters that tm_trace_stats has no field for yet; until
     * it does they only feed max_samples. */

    /* heapprofd dumps. While a dump's callstack is resolved in its
     * ProfilePacket's own tables, `local` is set and local_seq caches what
     * they resolve to (for tables of serial local_serial). */
    tm_pf_heap heap;
    tm_pf_heap_streamed streamed;
    const tm_pf_heap_tables *local;
    seq_state local_seq;
    uint32_t local_serial;
} dec;

/* ---- errors: the reader's offset rule ---- */

#define dfail(d, code, at, ...) tm_pf_fail(&(d)->rd, (code), (at), __VA_ARGS__)

static tm_status nomem(dec *d) { return dfail(d, TM_ERR_NOMEM, NULL, "out of memory"); }

#define DTRY_MEM(d, expr)                            \
    do {                                             \
        if ((expr) != TM_OK) return nomem(d);        \
    } while (0)

static tm_status pb_error(dec *d, const tm_pb_reader *r, const char *where) { return tm_pf_pb_fail(&d->rd, r, where); }

/* Checks a scalar field's wire type. */
#define WANT(d, f, w, name) TM_PF_WANT(&(d)->rd, (f), (w), (name))

/* ---- sequences ---- */

static void cache_free(tm_mem *m, res_cache *c) {
    tm_mem_free(m, c->dense, c->n_dense * sizeof *c->dense);
    tm_u64map_free(m, &c->slot_by_iid);
    tm_mem_free(m, c->res, c->cap * sizeof *c->res);
}

/* The dense part does not count what it holds, so a large one is dropped
 * rather than wiped (Relay mode clears after every InternedData message). */
#define DENSE_KEEP 1024u

static void unset_dense(resolved *r, size_t n) {
    for (size_t i = 0; i < n; i++) r[i].id = TM_ABSENT;
}

static void cache_clear(tm_mem *m, res_cache *c) {
    if (c->n_dense > DENSE_KEEP) {
        tm_mem_free(m, c->dense, c->n_dense * sizeof *c->dense);
        c->dense = NULL;
        c->n_dense = 0;
    } else {
        unset_dense(c->dense, c->n_dense);
    }
    tm_u64map_clear(m, &c->slot_by_iid);
    c->n = 0;
}

static void seq_caches_free(tm_mem *m, seq_state *s) {
    cache_free(m, &s->stacks);
    cache_free(m, &s->frames);
    cache_free(m, &s->mappings);
}

static void seq_free(tm_mem *m, seq_state *s) {
    seq_caches_free(m, s);
    tm_mem_free(m, s, sizeof *s);
}

/* Drops what was resolved from the intern tables: in Relay mode after any
 * merge, which may replace entries; for another dump's ProfilePacket
 * tables. */
static void seq_forget_resolved(tm_mem *m, seq_state *s) {
    cache_clear(m, &s->stacks);
    cache_clear(m, &s->frames);
    cache_clear(m, &s->mappings);
}

/* The model's state of a reader sequence, made on its first packet. */
static tm_status seq_new(dec *d, const tm_pf_seq *ps, seq_state **out) {
    while (d->n_seqs <= ps->index) {
        DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->seqs, d->cap_seqs, d->n_seqs + 1));
        seq_state *s = tm_mem_alloc(d->mem, sizeof *s);
        if (!s) return nomem(d);
        memset(s, 0, sizeof *s);
        s->index = (uint32_t)d->n_seqs;
        d->seqs[d->n_seqs++] = s;
        d->p->stats.sequences++;
    }
    *out = d->seqs[ps->index];
    return TM_OK;
}

/* Inline: every packet of a sequence asks. */
static inline tm_status seq_of(dec *d, const tm_pf_seq *ps, seq_state **out) {
    if (TM_UNLIKELY(ps->index >= d->n_seqs)) return seq_new(d, ps, out);
    *out = d->seqs[ps->index];
    return TM_OK;
}

/* How many entries the sequence's tables hold: bounds the dense part of
 * the caches keyed by iid. */
static size_t seq_entries(const dec *d, const seq_state *s) {
    return d->local ? 0 : (size_t)d->rd.seqs[s->index].n_interned;
}

/* The epoch lookups see now (ProfilePacket tables have one). */
static inline uint32_t cur_epoch(const dec *d) { return d->local ? 0 : d->rd.gens[d->gen].epoch; }

static inline resolved *cache_find(res_cache *c, uint64_t iid) {
    if (TM_LIKELY(iid < c->n_dense)) return c->dense[iid].id == TM_ABSENT ? NULL : &c->dense[iid];
    uint32_t i = tm_u64map_get(&c->slot_by_iid, iid);
    return i == TM_ABSENT ? NULL : &c->res[i];
}

/* Grows an array indexed by iid (*arr, *n elements of elem bytes) past
 * iid, doubling from 64, when iid stays dense for the sequence's entries
 * (tm_iid_dense_may_hold): *grown false when it does not. *old_n: its size
 * before; the elements from there on are the caller's to set. */
static tm_status grow_by_iid(dec *d, void **arr, size_t *n, size_t elem, uint64_t iid, size_t n_entries, bool *grown,
                             size_t *old_n) {
    *old_n = *n;
    *grown = tm_iid_dense_may_hold(iid, n_entries);
    if (!*grown) return TM_OK;
    size_t to = *n ? *n : 64;
    while (to <= iid) to *= 2;
    void *a = tm_mem_realloc(d->mem, *arr, *n * elem, to * elem);
    if (!a) return nomem(d);
    *arr = a;
    *n = to;
    return TM_OK;
}

/* Grows the dense part past iid (grow_by_iid); resolutions of iids that
 * the map held move into it. */
static tm_status grow_dense(dec *d, res_cache *c, uint64_t iid, size_t n_entries, bool *grown) {
    size_t old_n;
    TM_TRY(grow_by_iid(d, (void **)&c->dense, &c->n_dense, sizeof *c->dense, iid, n_entries, grown, &old_n));
    if (!*grown) return TM_OK;
    unset_dense(c->dense + old_n, c->n_dense - old_n);
    const tm_u64map *m = &c->slot_by_iid;
    for (size_t i = 0; m->len && i < m->cap; i++)
        if (m->vals[i] != TM_ABSENT && m->keys[i] < c->n_dense) c->dense[m->keys[i]] = c->res[m->vals[i]];
    return TM_OK;
}

/* Records a first resolution of iid past the dense part: grows that, or
 * puts it in the map. */
static tm_status remember_past_dense(dec *d, seq_state *s, res_cache *cache, uint64_t iid, uint32_t id,
                                     uint32_t epoch) {
    bool dense;
    TM_TRY(grow_dense(d, cache, iid, seq_entries(d, s), &dense));
    if (dense) {
        cache->dense[iid] = (resolved){id, epoch, epoch};
        return TM_OK;
    }
    DTRY_MEM(d, TM_VEC_RESERVE(d->mem, cache->res, cache->cap, cache->n + 1));
    cache->res[cache->n] = (resolved){id, epoch, epoch};
    DTRY_MEM(d, tm_u64map_put(d->mem, &cache->slot_by_iid, iid, (uint32_t)cache->n));
    cache->n++;
    return TM_OK;
}

/* Records that iid resolved to id in this epoch; c: what it resolved to
 * before (NULL: never). The run of epochs goes on when the epoch before
 * gave the same id. *since: where the run starts. Inline: each resolution
 * made ends here. */
static inline tm_status remember(dec *d, seq_state *s, res_cache *cache, resolved *c, uint64_t iid, uint32_t id,
                                 uint32_t *since) {
    uint32_t epoch = cur_epoch(d);
    if (c) {
        if (c->upto + 1 != epoch || c->id != id) c->since = epoch;
        c->id = id;
        c->upto = epoch;
        *since = c->since;
        return TM_OK;
    }
    *since = epoch;
    if (TM_UNLIKELY(iid >= cache->n_dense)) return remember_past_dense(d, s, cache, iid, id, epoch);
    cache->dense[iid] = (resolved){id, epoch, epoch};
    return TM_OK;
}

/* A cached resolution that may carry over to this epoch: its entry has had
 * the same bytes since the epoch it was last made in, or before. */
static inline bool may_carry(const resolved *c, uint32_t same_since) { return c && same_since <= c->upto; }

/* A cached resolution that carries over whatever it refers to: the
 * sequence has re-sent everything since, byte for byte (what a writer
 * that re-sends all it interned at each clear gives), and no resolution
 * met a missing entry, which the sequence may have interned since. */
static inline bool all_carry(const dec *d, const resolved *c) {
    return c && !d->local && !d->relay && !d->met_missing && tm_pf_unchanged_since(&d->rd, d->gen, c->upto);
}

/* How far along a chain of twins a resolution is looked for. */
#define TWIN_HOPS 8

/* What sequence `seq` resolved iid to in the cache at offset `which` of
 * seq_state, when that holds in its current epoch: resolved in it, or
 * before it and carried over whole (all_carry's conditions). */
static bool resolved_in(const dec *d, uint32_t seq, size_t which, uint64_t iid, uint32_t *out) {
    res_cache *cache = (res_cache *)(void *)((char *)d->seqs[seq] + which);
    const resolved *c = cache_find(cache, iid);
    const tm_pf_seq *t = &d->rd.seqs[seq];
    if (!c || (c->upto != t->epoch && (d->met_missing || !tm_pf_unchanged_since(&d->rd, t->gen, c->upto))))
        return false;
    *out = c->id;
    return true;
}

/* What s's twin (tm_pf_twin_of) resolved iid to in its current epoch, in
 * the cache at offset `which` of seq_state: the same entries give the same
 * result, so a writer's sequence per thread resolves its tables once. */
static bool twin_resolved(const dec *d, const seq_state *s, size_t which, uint64_t iid, uint32_t *out) {
    if (d->local || d->relay) return false;
    /* The twin's own twin holds the same entries too, and so on along the
     * chain (a writer's sequences clear at different times, each copying
     * the one that began last): the first that resolved iid answers. */
    uint32_t at = s->index, twin;
    for (int hop = 0; hop < TWIN_HOPS && tm_pf_twin_of(&d->rd, at, &twin) && twin < d->n_seqs; hop++) {
        if (resolved_in(d, twin, which, iid, out)) return true;
        at = twin;
    }
    /* And the sequence that copied s's tables, which may have met iid
     * first (the demo's two threads of each kind). */
    return tm_pf_copy_of(&d->rd, s->index, &twin) && twin < d->n_seqs && resolved_in(d, twin, which, iid, out);
}

/* Whether a resolution this sequence never made is asked of its twin
 * before its entry is looked up: at the sequence's newest generation the
 * twin resolved it from entries this sequence has byte for byte, so the
 * lookup would find the entry, and the twin's answer is the one it would
 * give (a heavy trace's sequences resolve each other's tables: the lookup
 * is several cache misses). */
static inline bool twin_first(const dec *d, const seq_state *s, const resolved *c) {
    return !c && !d->local && d->gen == d->rd.seqs[s->index].gen;
}

/* Carries c over to this epoch. */
static inline uint32_t carry(const dec *d, resolved *c, uint32_t *out) {
    c->upto = cur_epoch(d);
    *out = c->id;
    return c->since;
}

/* c's resolution, when it holds in this epoch: made in it, or carried over
 * with everything it refers to (all_carry). */
static inline bool holds_now(const dec *d, resolved *c, uint32_t *out, uint32_t *since) {
    if (!c || (c->upto != cur_epoch(d) && !all_carry(d, c))) return false;
    *since = carry(d, c, out);
    return true;
}

/* StackSample.TaskContext { iid=1; uint32 pid=2; uint32 tid=3; uint64 async_id=4; } */
static tm_status parse_task_context(dec *d, tm_bytes msg, ent_task *e, uint64_t *iid) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    memset(e, 0, sizeof *e);
    *iid = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num >= TM_PF_INTERNED_IID && f.num <= TM_PF_TASK_CONTEXT_ASYNC_ID) WANT(d, f, TM_PB_VARINT, "TaskContext");
        if (f.num == TM_PF_INTERNED_IID) *iid = f.val;
        else if (f.num == TM_PF_TASK_CONTEXT_PID) e->pid = (uint32_t)f.val;
        else if (f.num == TM_PF_TASK_CONTEXT_TID) e->tid = (uint32_t)f.val, e->has_tid = f.val != 0; /* 0: none */
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "TaskContext");
    return TM_OK;
}

static void frame_field(ent_frame *e, uint32_t num, uint64_t val) {
    switch (num) {
    case TM_PF_FRAME_FUNCTION_NAME_ID: e->fn = val; e->flags |= F_HAS_FN; break;
    case TM_PF_FRAME_MAPPING_ID: e->mapping = val; e->flags |= F_HAS_MAPPING; break;
    case TM_PF_FRAME_REL_PC: e->rel_pc = val; e->flags |= F_HAS_REL_PC; break;
    default: break;
    }
}

/* An interned Frame's fields (checked when it was interned). Writers give
 * varints under one-byte tags only, read here without the field decoder,
 * a switch on the tag byte; any other shape goes through it. */
static ent_frame parse_frame(tm_bytes msg) {
    enum {
        FN_TAG = TM_PF_FRAME_FUNCTION_NAME_ID << 3 | TM_PB_VARINT,
        MAPPING_TAG = TM_PF_FRAME_MAPPING_ID << 3 | TM_PB_VARINT,
        REL_PC_TAG = TM_PF_FRAME_REL_PC << 3 | TM_PB_VARINT
    };
    ent_frame e = {0, 0, 0, 0};
    const uint8_t *p = msg.data, *end = p + msg.len;
    bool plain = true;
    while (plain && end - p >= 2) {
        uint64_t v;
        const uint8_t *next = tm_pb_varint_fast(p + 1, end, &v); /* the value, if p[0] is a varint's tag */
        if (!next) break;
        switch (p[0]) {
        case FN_TAG: e.fn = v; e.flags |= F_HAS_FN; break;
        case MAPPING_TAG: e.mapping = v; e.flags |= F_HAS_MAPPING; break;
        case REL_PC_TAG: e.rel_pc = v; e.flags |= F_HAS_REL_PC; break;
        default: plain = (p[0] & 0x87) == TM_PB_VARINT && p[0] >= 8; break; /* a one-byte tag of another varint */
        }
        if (plain) p = next;
    }
    if (p == end) return e;
    e = (ent_frame){0, 0, 0, 0};
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) frame_field(&e, f.num, f.val);
    return e;
}

/* An interned Mapping's scalar fields (checked when it was interned). */
static ent_mapping parse_mapping(tm_bytes msg) {
    ent_mapping e;
    memset(&e, 0, sizeof e);
    e.msg = msg;
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) {
        switch (f.num) {
        case TM_PF_MAPPING_BUILD_ID: e.build = f.val; e.flags |= M_HAS_BUILD; break;
        case TM_PF_MAPPING_START_OFFSET: e.start_offset = f.val; break;
        case TM_PF_MAPPING_START: e.start = f.val; break;
        case TM_PF_MAPPING_END: e.end = f.val; break;
        case TM_PF_MAPPING_LOAD_BIAS: e.load_bias = f.val; e.flags |= M_HAS_LOAD_BIAS; break;
        case TM_PF_MAPPING_EXACT_OFFSET: e.exact_offset = f.val; break;
        default: break;
        }
    }
    return e;
}

/* ---- resolution: interned ids -> profile model ---- */

/* The interned message (field, iid): in the ProfilePacket tables being
 * read, else as the current generation sees InternedData. */
static bool lookup(const dec *d, uint32_t field, uint64_t iid, tm_bytes *out) {
    return d->local ? tm_pf_heap_lookup(d->local, field, iid, out) : tm_pf_lookup(&d->rd, d->gen, field, iid, out);
}

static bool lookup_str(const dec *d, uint32_t field, uint64_t iid, tm_str *out) {
    return d->local ? tm_pf_heap_lookup_str(d->local, field, iid, out)
                    : tm_pf_lookup_str(&d->rd, d->gen, field, iid, out);
}

/* Like lookup; *same_since: the first epoch from which the entry had these
 * bytes in every epoch (never before this one in Relay mode, whose entries
 * may be replaced, nor in ProfilePacket tables). */
static inline bool lookup_since(const dec *d, uint32_t field, uint64_t iid, tm_bytes *out, uint32_t *same_since) {
    *same_since = UINT32_MAX;
    if (d->local || d->relay) return lookup(d, field, iid, out);
    const tm_pf_entry *e = tm_pf_find(&d->rd, d->gen, field, iid);
    if (!e) return false;
    *out = (tm_bytes){e->msg, e->len};
    *same_since = e->same_since;
    return true;
}

/* Has the string entry (field, iid) had the same bytes since epoch `upto`? */
static bool str_same_since(const dec *d, uint32_t field, uint64_t iid, uint32_t upto) {
    tm_bytes msg;
    uint32_t same_since;
    return lookup_since(d, field, iid, &msg, &same_since) && same_since <= upto;
}

/* Joins the resolvable path segments of a mapping with '/'. Relay skips
 * unresolvable ids; Trace Processor stops at the first one. */
static tm_status mapping_path(dec *d, tm_bytes msg, tm_str *out) {
    tm_bytes segs[64];
    size_t n = 0, total = 0;
    tm_bytes *many = NULL;
    size_t cap_many = 0;
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int stop = 0;
    tm_status st = TM_OK;
    while (!stop && st == TM_OK && tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.num != TM_PF_MAPPING_PATH_STRING_IDS) continue;
        int packed = f.wire == TM_PB_LEN;
        tm_bytes none = {NULL, 0};
        tm_pb_reader pr = tm_pb_reader_of(packed ? f.bytes : none); /* bytes is unset for varints */
        uint64_t id = f.val;
        while (!stop && (!packed || tm_pb_packed_next(&pr, &id) == TM_PB_OK)) {
            tm_str seg;
            if (!lookup_str(d, TM_PF_INTERNED_MAPPING_PATHS, id, &seg)) {
                d->met_missing = true;
                if (!d->relay) stop = 1;
            } else {
                if (n < 64) segs[n] = seg;
                else {
                    if (TM_VEC_RESERVE(d->mem, many, cap_many, n + 1) != TM_OK) { st = TM_ERR_NOMEM; break; }
                    if (n == 64) memcpy(many, segs, sizeof segs);
                    many[n] = seg;
                }
                total += seg.len + 1;
                n++;
            }
            if (!packed) break;
        }
    }
    if (st == TM_OK) {
        const tm_bytes *list = n > 64 ? many : segs;
        if (n == 0) out->data = NULL, out->len = 0;
        else if (n == 1) *out = list[0];
        else {
            uint8_t *buf = tm_arena_alloc(&d->t->arena, total);
            if (!buf) st = TM_ERR_NOMEM;
            else {
                size_t k = 0;
                for (size_t i = 0; i < n; i++) {
                    if (i) buf[k++] = '/';
                    if (list[i].len) memcpy(buf + k, list[i].data, list[i].len);
                    k += list[i].len;
                }
                out->data = buf;
                out->len = k;
            }
        }
    }
    tm_mem_free(d->mem, many, cap_many * sizeof *many);
    return st == TM_OK ? TM_OK : nomem(d);
}

/* Have the strings a mapping refers to had the same bytes since epoch upto? */
static bool mapping_refs_same(const dec *d, const ent_mapping *e, uint32_t upto) {
    if ((e->flags & M_HAS_BUILD) && e->build && !str_same_since(d, TM_PF_INTERNED_BUILD_IDS, e->build, upto))
        return false;
    tm_pb_repeated ids = tm_pb_repeated_of(e->msg, TM_PF_MAPPING_PATH_STRING_IDS);
    uint64_t id;
    while (tm_pb_repeated_next(&ids, &id) == TM_PB_OK) /* checked when interned */
        if (!str_same_since(d, TM_PF_INTERNED_MAPPING_PATHS, id, upto)) return false;
    return true;
}

/* Resolves a mapping iid; *ok = 0 when there is none; *since: the first
 * epoch of the run it resolved to the same mapping in. */
static tm_status resolve_mapping(dec *d, seq_state *s, uint64_t iid, uint32_t *out, int *ok, uint32_t *since) {
    resolved *c = cache_find(&s->mappings, iid);
    *ok = 1;
    if (holds_now(d, c, out, since)) return TM_OK;
    bool early = twin_first(d, s, c);
    if (early && twin_resolved(d, s, offsetof(seq_state, mappings), iid, out))
        return remember(d, s, &s->mappings, c, iid, *out, since);
    tm_bytes msg;
    uint32_t same_since;
    if (!lookup_since(d, TM_PF_INTERNED_MAPPINGS, iid, &msg, &same_since)) {
        *ok = 0;
        return TM_OK;
    }
    const ent_mapping mapping = parse_mapping(msg), *e = &mapping;
    if (may_carry(c, same_since) && mapping_refs_same(d, e, c->upto)) {
        *since = carry(d, c, out);
        return TM_OK;
    }
    if (!early && twin_resolved(d, s, offsetof(seq_state, mappings), iid, out))
        return remember(d, s, &s->mappings, c, iid, *out, since);
    tm_prof_mapping m;
    memset(&m, 0, sizeof m);
    TM_TRY(mapping_path(d, e->msg, &m.path));
    if ((e->flags & M_HAS_BUILD) && e->build) {
        tm_str b;
        if (lookup_str(d, TM_PF_INTERNED_BUILD_IDS, e->build, &b)) m.build_id = b;
        else d->met_missing = true;
    }
    m.start = e->start;
    m.end = e->end;
    m.load_bias = e->load_bias;
    m.start_offset = e->start_offset;
    m.exact_offset = e->exact_offset;
    if (e->flags & M_HAS_LOAD_BIAS) m.flags |= TM_MAPPING_HAS_LOAD_BIAS;
    m.flags |= TM_MAPPING_ELF_REL_PC;
    if (m.path.len && tm_path_is_java(m.path)) m.flags |= TM_MAPPING_JAVA;
    DTRY_MEM(d, tm_profile_intern_mapping(d->p, &m, out));
    return remember(d, s, &s->mappings, c, iid, *out, since);
}

/* resolve_mapping, inline for a mapping resolved in this epoch: most
 * frames of a trace share a few mappings. */
static inline tm_status resolve_mapping_fast(dec *d, seq_state *s, uint64_t iid, uint32_t *out, int *ok,
                                             uint32_t *since) {
    const resolved *c = cache_find(&s->mappings, iid);
    if (TM_LIKELY(c && c->upto == cur_epoch(d))) {
        *out = c->id;
        *ok = 1;
        *since = c->since;
        return TM_OK;
    }
    return resolve_mapping(d, s, iid, out, ok, since);
}

/* Why the profile refused a frame: max_unique_frames, else memory. */
TM_COLD static tm_status intern_frame_fail(dec *d, const uint8_t *at) {
    if (d->p->n_frames >= d->p->max_unique_frames)
        return dfail(d, TM_ERR_LIMIT, at, "more than %llu unique frames (max_unique_frames)",
                     (unsigned long long)d->p->max_unique_frames);
    return nomem(d);
}

/* Adds a frame to the profile, within max_unique_frames. */
static inline tm_status intern_frame(dec *d, const tm_prof_frame *pf, const uint8_t *at, uint32_t *out) {
    return TM_LIKELY(tm_profile_intern_frame(d->p, pf, out) == TM_OK) ? TM_OK : intern_frame_fail(d, at);
}

/* Does what a frame refers to resolve as it did in epoch upto? */
static tm_status frame_refs_kept(dec *d, seq_state *s, const ent_frame *e, uint32_t upto, bool *kept) {
    *kept = false;
    if ((e->flags & F_HAS_FN) && e->fn && !str_same_since(d, TM_PF_INTERNED_FUNCTION_NAMES, e->fn, upto))
        return TM_OK;
    if ((e->flags & F_HAS_MAPPING) && e->mapping) {
        uint32_t pmi, since;
        int ok;
        TM_TRY(resolve_mapping_fast(d, s, e->mapping, &pmi, &ok, &since));
        *kept = ok && since <= upto;
        return TM_OK;
    }
    *kept = true;
    return TM_OK;
}

/* Grows shared resolutions (*shared, *n of them) past iid (grow_by_iid),
 * as far as the sequence's own caches may grow. */
static tm_status grow_shared(dec *d, const seq_state *s, shared_res **shared, size_t *n, uint64_t iid,
                             bool *grown) {
    size_t old_n;
    TM_TRY(grow_by_iid(d, (void **)shared, n, sizeof **shared, iid, seq_entries(d, s), grown, &old_n));
    if (*grown) memset(*shared + old_n, 0, (*n - old_n) * sizeof **shared);
    return TM_OK;
}

/* Shares, in *shared (*n of them), that iid resolved to id in tables of
 * class cls (0: nothing to share). */
static inline tm_status share(dec *d, const seq_state *s, shared_res **shared, size_t *n, uint32_t cls,
                              uint64_t iid, uint32_t id) {
    if (!cls) return TM_OK;
    bool dense = iid < *n;
    if (!dense) TM_TRY(grow_shared(d, s, shared, n, iid, &dense));
    if (dense) (*shared)[iid] = (shared_res){id, cls};
    return TM_OK;
}

/* What another sequence whose tables have this class resolved frame iid
 * to, when one did. */
static inline bool shared_frame(const dec *d, uint64_t iid, uint32_t *out) {
    if (!d->cls || iid >= d->n_shared_frames || d->shared_frames[iid].cls != d->cls) return false;
    *out = d->shared_frames[iid].id;
    return true;
}

/* Whether a twin may have resolved iid, which shared (shared, n of them)
 * does not hold for this class: a twin's tables have the class, so one
 * that resolved iid shared it, unless iid is past the dense part or
 * another class took its place there. A resolution of the entry itself
 * gives what the twin's would, so this only spares the twins' lookups. */
static inline bool twin_may_hold(const dec *d, const shared_res *shared, size_t n, uint64_t iid) {
    return !d->cls || iid >= n || shared[iid].cls;
}

/* Resolves a frame iid; *ok = 0 when it cannot be (the caller decides
 * whether that drops the stack or only the frame); *since: the first epoch
 * of the run it resolved to the same frame in. */
static tm_status resolve_frame_entry(dec *d, seq_state *s, resolved *c, uint64_t iid, const uint8_t *at,
                                     uint32_t *out, int *ok, uint32_t *since) {
    *ok = holds_now(d, c, out, since);
    if (*ok) return TM_OK;
    bool early = twin_first(d, s, c);
    if (early && (shared_frame(d, iid, out) || (twin_may_hold(d, d->shared_frames, d->n_shared_frames, iid) &&
                                                twin_resolved(d, s, offsetof(seq_state, frames), iid, out)))) {
        *ok = 1;
        return remember(d, s, &s->frames, c, iid, *out, since);
    }
    tm_bytes msg;
    uint32_t same_since;
    if (!lookup_since(d, TM_PF_INTERNED_FRAMES, iid, &msg, &same_since)) return TM_OK;
    const ent_frame frame = parse_frame(msg), *e = &frame;
    if (may_carry(c, same_since)) {
        bool kept;
        TM_TRY(frame_refs_kept(d, s, e, c->upto, &kept));
        if (kept) {
            *since = carry(d, c, out);
            *ok = 1;
            return TM_OK;
        }
    }
    if (!early && twin_resolved(d, s, offsetof(seq_state, frames), iid, out)) {
        *ok = 1;
        return remember(d, s, &s->frames, c, iid, *out, since);
    }
    tm_prof_frame pf;
    memset(&pf, 0, sizeof pf);
    tm_str name = {NULL, 0};
    int has_name = 0;
    if ((e->flags & F_HAS_FN) && (e->fn || d->relay)) {
        if (lookup_str(d, TM_PF_INTERNED_FUNCTION_NAMES, e->fn, &name)) has_name = 1;
        else if (!d->relay) return TM_OK;
    }
    const tm_prof_mapping *pm = NULL;
    if ((e->flags & F_HAS_MAPPING) && (e->mapping || d->relay)) {
        uint32_t pmi, msince;
        int mok;
        TM_TRY(resolve_mapping_fast(d, s, e->mapping, &pmi, &mok, &msince));
        if (mok) {
            pm = &d->p->mappings[pmi];
            pf.mapping = pmi + 1;
        } else if (!d->relay) return TM_OK;
    }
    pf.rel_pc = e->rel_pc;
    if (pm && pm->path.len) {
        pf.package = pm->path;
        pf.flags |= TM_FRAME_HAS_PACKAGE;
    }
    if (pm && (pm->flags & TM_MAPPING_JAVA)) {
        pf.flags |= TM_FRAME_JAVA;
        if (has_name) {
            size_t dot = name.len;
            while (dot > 0 && name.data[dot - 1] != '.') dot--;
            if (dot > 0) {
                pf.module.data = name.data;
                pf.module.len = dot - 1;
                pf.flags |= TM_FRAME_HAS_MODULE;
                name.data += dot;
                name.len -= dot;
            }
        }
    } else if (e->flags & F_HAS_REL_PC) {
        uint64_t start = pm ? pm->start : 0;
        if (d->relay) {
            pf.addr = e->rel_pc + start; /* Relay wraps */
            pf.flags |= TM_FRAME_HAS_ADDR;
        } else if (!__builtin_add_overflow(e->rel_pc, start, &pf.addr)) {
            pf.flags |= TM_FRAME_HAS_ADDR;
        }
    }
    if (has_name) {
        pf.function = name;
        pf.flags |= TM_FRAME_HAS_FUNCTION;
    }
    TM_TRY(intern_frame(d, &pf, at, out));
    TM_TRY(remember(d, s, &s->frames, c, iid, *out, since));
    *ok = 1;
    return TM_OK;
}

/* resolve_frame_entry, sharing what the frame resolved to under the
 * tables' class. */
TM_NOINLINE static tm_status resolve_frame_slow(dec *d, seq_state *s, resolved *c, uint64_t iid,
                                                const uint8_t *at, uint32_t *out, int *ok, uint32_t *since) {
    TM_TRY(resolve_frame_entry(d, s, c, iid, at, out, ok, since));
    return *ok ? share(d, s, &d->shared_frames, &d->n_shared_frames, d->cls, iid, *out) : TM_OK;
}

/* Perfetto lists frames root first; the model is leaf first. */
static void reverse_scratch(dec *d, size_t n) {
    for (size_t i = 0; i < n / 2; i++) {
        uint32_t tmp = d->frame_scratch[i];
        d->frame_scratch[i] = d->frame_scratch[n - 1 - i];
        d->frame_scratch[n - 1 - i] = tmp;
    }
}

static inline tm_status resolve_frame(dec *d, seq_state *s, uint64_t iid, const uint8_t *at, uint32_t *out,
                                      int *ok, uint32_t *since) {
    resolved *c = cache_find(&s->frames, iid);
    if (TM_LIKELY(c && c->upto == cur_epoch(d))) {
        *out = c->id;
        *ok = 1;
        *since = c->since;
        return TM_OK;
    }
    return resolve_frame_slow(d, s, c, iid, at, out, ok, since);
}

/* Does a callstack whose entry kept its bytes since epoch upto still give
 * the stack it gave then: do all its frames? */
static tm_status frames_kept(dec *d, seq_state *s, tm_bytes msg, const uint8_t *at, uint32_t upto, bool *kept) {
    tm_pb_repeated ids = tm_pb_repeated_of(msg, TM_PF_CALLSTACK_FRAME_IDS);
    uint64_t fid;
    *kept = false;
    while (tm_pb_repeated_next(&ids, &fid) == TM_PB_OK) { /* checked when interned */
        uint32_t pfi, since;
        int ok;
        TM_TRY(resolve_frame(d, s, fid, at, &pfi, &ok, &since));
        if (!ok || since > upto) return TM_OK;
    }
    *kept = true;
    return TM_OK;
}

/* Resolves the frames of callstack msg into frame_scratch (root first):
 * *n of them; *ok = 0 when the stack is dropped. What holds for the whole
 * stack is asked once, and two cases take no call: a frame resolved in
 * this epoch, and one this sequence never resolved that another of its
 * class did (resolve_frame_entry's first case, as twin_first holds: a
 * writer's sequences share most frames). */
static tm_status stack_frames(dec *d, seq_state *s, tm_bytes msg, const uint8_t *at, size_t *n_out, int *ok) {
    const uint32_t epoch = cur_epoch(d), cls = d->cls;
    const bool early = cls && !d->local && d->gen == d->rd.seqs[s->index].gen;
    res_cache *fc = &s->frames;
    size_t n = 0;
    *ok = 0;
    tm_pb_repeated ids = tm_pb_repeated_of(msg, TM_PF_CALLSTACK_FRAME_IDS);
    uint64_t fid;
    while (tm_pb_repeated_next(&ids, &fid) == TM_PB_OK) { /* checked when interned */
        uint32_t pfi, since;
        int fok = 1;
        resolved *c = cache_find(fc, fid);
        if (TM_LIKELY(c && c->upto == epoch)) {
            pfi = c->id;
        } else if (!c && early && fid < fc->n_dense && fid < d->n_shared_frames && d->shared_frames[fid].cls == cls) {
            pfi = d->shared_frames[fid].id;
            fc->dense[fid] = (resolved){pfi, epoch, epoch};
        } else {
            TM_TRY(resolve_frame_slow(d, s, c, fid, at, &pfi, &fok, &since));
        }
        if (fok) {
            DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->frame_scratch, d->cap_fs, n + 1));
            d->frame_scratch[n++] = pfi;
        } else if (!d->relay) {
            return TM_OK;
        }
    }
    *n_out = n;
    *ok = 1;
    return TM_OK;
}

/* Resolves callstack iid, first time in this epoch. */
static tm_status resolve_callstack_epoch(dec *d, seq_state *s, uint64_t iid, const uint8_t *at,
                                         uint32_t *out, int *ok) {
    resolved *c = cache_find(&s->stacks, iid);
    tm_bytes msg;
    uint32_t same_since, since;
    *ok = holds_now(d, c, out, &since);
    if (*ok) return TM_OK;
    bool early = twin_first(d, s, c);
    if (early && twin_may_hold(d, d->shared, d->n_shared, iid) &&
        twin_resolved(d, s, offsetof(seq_state, stacks), iid, out)) {
        *ok = 1;
        return remember(d, s, &s->stacks, c, iid, *out, &since);
    }
    if (!lookup_since(d, TM_PF_INTERNED_CALLSTACKS, iid, &msg, &same_since)) return TM_OK;
    if (may_carry(c, same_since)) {
        bool kept;
        TM_TRY(frames_kept(d, s, msg, at, c->upto, &kept));
        if (kept) {
            carry(d, c, out);
            *ok = 1;
            return TM_OK;
        }
    }
    if (!early && twin_resolved(d, s, offsetof(seq_state, stacks), iid, out)) {
        *ok = 1;
        return remember(d, s, &s->stacks, c, iid, *out, &since);
    }
    size_t n = 0;
    TM_TRY(stack_frames(d, s, msg, at, &n, ok));
    if (!*ok) return TM_OK;
    reverse_scratch(d, n);
    DTRY_MEM(d, tm_profile_intern_stack(d->p, d->frame_scratch, n, out));
    TM_TRY(remember(d, s, &s->stacks, c, iid, *out, &since));
    *ok = 1;
    return TM_OK;
}

/* Resolves callstack iid when tables of its class did not (or it has
 * none): through the sequence's cache, and shares what it resolved to
 * under class cls. */
static tm_status resolve_callstack_slow(dec *d, seq_state *s, uint32_t cls, uint64_t iid, const uint8_t *at,
                                        uint32_t *out, int *ok) {
    const resolved *c = cache_find(&s->stacks, iid);
    if (c && c->upto == cur_epoch(d)) {
        *out = c->id;
        *ok = 1;
    } else {
        TM_TRY(resolve_callstack_epoch(d, s, iid, at, out, ok));
    }
    return *ok ? share(d, s, &d->shared, &d->n_shared, cls, iid, *out) : TM_OK;
}

/* Resolves a callstack iid to a profile stack (leaf first). *ok = 0 when
 * the sample must be dropped. A callstack resolved before in tables of
 * this class costs two array loads. */
static inline tm_status resolve_callstack(dec *d, seq_state *s, uint64_t iid, const uint8_t *at,
                                          uint32_t *out, int *ok) {
    uint32_t cls = d->cls;
    if (TM_LIKELY(cls && iid < d->n_shared && d->shared[iid].cls == cls)) {
        *out = d->shared[iid].id;
        *ok = 1;
        return TM_OK;
    }
    return resolve_callstack_slow(d, s, cls, iid, at, out, ok);
}

/* ---- samples ---- */

/* Inline with the checks below: they run once a sample or packet. */
static inline tm_status add_sample(dec *d, int64_t ts, uint32_t stack, uint32_t thread) {
    DTRY_MEM(d, tm_profile_add_sample(d->p, ts, stack, thread));
    return TM_OK;
}

static tm_status sample_limit_fail(dec *d, const uint8_t *at) {
    return dfail(d, TM_ERR_LIMIT, at, "more than %llu samples (max_samples)", (unsigned long long)d->lim->max_samples);
}

/* The samples counted against max_samples so far. */
static inline uint64_t samples_so_far(const dec *d) {
    const tm_trace_stats *st = &d->p->stats;
    return d->relay ? d->relay_samples
                    : st->perf_samples + st->streaming_samples + st->stack_samples + st->off_cpu_samples;
}

static inline tm_status check_sample_limit(dec *d, const uint8_t *at) {
    return TM_UNLIKELY(samples_so_far(d) > d->lim->max_samples) ? sample_limit_fail(d, at) : TM_OK;
}

static tm_status thread_of_slow(dec *d, int64_t tid, int64_t pid, uint32_t *out) {
    DTRY_MEM(d, tm_profile_thread(d->p, tid, out));
    d->last_tid = tid;
    d->last_thread = *out;
    if (pid && !d->p->threads[*out].pid) {
        d->p->threads[*out].pid = pid;
        uint32_t proc;
        DTRY_MEM(d, tm_profile_process(d->p, pid, &proc));
    }
    d->last_has_pid = d->p->threads[*out].pid != 0;
    return TM_OK;
}

/* The profile thread of tid (its pid recorded when known). Samples come in
 * runs per thread, so a one-entry cache answers most calls. */
static inline tm_status thread_of(dec *d, int64_t tid, int64_t pid, uint32_t *out) {
    if (TM_LIKELY(d->last_thread != TM_ABSENT && d->last_tid == tid &&
                  (!pid || d->last_has_pid))) {
        *out = d->last_thread;
        return TM_OK;
    }
    return thread_of_slow(d, tid, pid, out);
}

/* The rest of resolved_time: a time not in trace time exactly. */
static bool inexact_time(dec *d, bool has_time, bool time_ok, bool trace_ok, bool trace_exact, int64_t trace_ns,
                         uint64_t n_samples, int64_t *ts) {
    if (!has_time) {
        *ts = d->rd.latest_ns;
        return true;
    }
    if (!time_ok || (trace_ok && !trace_exact)) d->p->stats.dropped_bad_timestamp += n_samples;
    else if (!trace_ok) d->p->stats.dropped_missing_clock += n_samples;
    *ts = trace_ns;
    return trace_ok && trace_exact;
}

/* The packet's time in trace time, as the reader converted it (a packet
 * without a timestamp is at the latest time seen); false, counted, when it
 * has none: no conversion path, or past int64. */
static inline bool resolved_time(dec *d, bool has_time, bool time_ok, bool trace_ok, bool trace_exact,
                                 int64_t trace_ns, uint64_t n_samples, int64_t *ts) {
    if (TM_LIKELY(has_time && time_ok && trace_ok && trace_exact)) {
        *ts = trace_ns;
        return true;
    }
    return inexact_time(d, has_time, time_ok, trace_ok, trace_exact, trace_ns, n_samples, ts);
}

static inline bool packet_time(dec *d, const tm_pf_packet *k, uint64_t n_samples, int64_t *ts) {
    return resolved_time(d, k->has_time, k->time_ok, k->trace_ok, k->trace_exact, k->trace_ns, n_samples, ts);
}

/* packet_time for a PerfSample's packet. */
static inline bool sample_time(dec *d, const tm_pf_sample *in, int64_t *ts) {
    if (TM_LIKELY(in->exact)) {
        *ts = in->trace_ns;
        return true;
    }
    return inexact_time(d, in->has_time, in->time_ok, in->trace_ok, in->trace_exact, in->trace_ns, 1, ts);
}

/* Whether stack's leaf frame is the marker TM_PF_PREEMPTED_FRAME: an
 * off-CPU sample of a thread switched out while runnable. */
static bool preempted_stack(const tm_profile *p, uint32_t stack) {
    static const char marker[] = TM_PF_PREEMPTED_FRAME;
    const tm_prof_stack *st = &p->stacks[stack];
    if (!st->len) return false;
    const tm_prof_frame *f = &p->frames[p->frame_ids[st->off]];
    return f->function.len == sizeof marker - 1 && memcmp(f->function.data, marker, sizeof marker - 1) == 0;
}

/* An off-CPU PerfSample (tm_pf_gen.off_cpu): it weighs ns, the growth of
 * its sequence's timebase_count (the ns off the CPU so far). */
static tm_status on_off_cpu_sample(dec *d, seq_state *s, const tm_pf_sample *in, uint64_t ns) {
    tm_profile *p = d->p;
    p->stats.off_cpu_samples++;
    TM_TRY(check_sample_limit(d, in->start));
    uint32_t stack, thread;
    int ok;
    TM_TRY(resolve_callstack(d, s, in->cs, in->data, &stack, &ok));
    int64_t ts;
    if (!ok) p->stats.dropped_unresolved++;
    if (!ok || !sample_time(d, in, &ts)) {
        p->stats.off_cpu_samples--;
        return TM_OK;
    }
    TM_TRY(thread_of(d, (int64_t)in->tid, (int64_t)in->pid, &thread));
    DTRY_MEM(d, TM_VEC_RESERVE(p->mem, p->off_samples, p->cap_off_samples, p->n_off_samples + 1));
    p->off_samples[p->n_off_samples++] = (tm_prof_off_sample){ts, stack, thread, ns};
    p->stats.off_cpu_ns += ns;
    if (preempted_stack(p, stack)) {
        p->stats.off_cpu_preempted_samples++;
        p->stats.off_cpu_preempted_ns += ns;
    }
    return TM_OK;
}

/* Reads the timebase of generation gen (PerfSampleDefaults): whether
 * it counts task-clock, and the frequency the producer asked for. */
TM_COLD static void read_timebase(dec *d, seq_state *s, uint32_t gen) {
    s->tb_known = true;
    s->tb_gen = gen;
    s->tb_task_clock = false;
    tm_pb_reader r = tm_pb_reader_of(tm_pf_gen_of(&d->rd, gen)->perf_defaults), tr;
    tm_pb_field f, g;
    while (tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.num != TM_PF_PERF_DEFAULTS_TIMEBASE || f.wire != TM_PB_LEN) continue;
        tr = tm_pb_reader_of(f.bytes);
        while (tm_pb_next(&tr, &g) == TM_PB_OK) {
            if (g.wire != TM_PB_VARINT) continue;
            if (g.num == TM_PF_TIMEBASE_COUNTER) s->tb_task_clock = g.val == TM_PF_COUNTER_SW_TASK_CLOCK;
            else if (g.num == TM_PF_TIMEBASE_FREQUENCY && g.val > d->p->stats.perf_timebase_hz)
                d->p->stats.perf_timebase_hz = g.val;
        }
    }
}

/* The growth of the sequence's timebase_count at a sample with count
 * (0: none written): its difference to the previous count on the sequence
 * (a counter that starts at 0; one that went back, from a producer that
 * restarted it, counts from 0 again). */
static uint64_t count_growth(seq_state *s, uint64_t count) {
    if (!count) return 0;
    uint64_t ns = count >= s->last_count ? count - s->last_count : count;
    s->last_count = count;
    return ns;
}

/* Whether the growth of a sample's timebase_count in generation gen is
 * the CPU time in ns it stands for: under a task-clock timebase (a counter
 * of the sampled thread's CPU time). The same for every sample of a
 * packet or run: asked once for them. */
static inline bool counts_cpu_ns(dec *d, seq_state *s, uint32_t gen) {
    if (!s->tb_known || s->tb_gen != gen) read_timebase(d, s, gen);
    return s->tb_task_clock;
}

/* What on_perf_sample reads of a PerfSample: what a usual one gives (in,
 * with its packet's place and time), and fields 16-18. */
typedef struct perf_fields {
    tm_pf_sample in;
    uint64_t lost;
    bool skipped, truncated;
} perf_fields;

/* Reads a PerfSample the reader's check did not read (k->perf_read unset:
 * one with fields 16-18). */
static tm_status read_perf_sample(dec *d, const tm_pf_packet *k, perf_fields *pf) {
    tm_pb_reader r = tm_pb_reader_of(k->data);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) { /* wire types checked by the reader's schema */
        switch (f.num) {
        case TM_PF_PERF_SAMPLE_PID: pf->in.pid = (uint32_t)f.val; pf->in.has_pid = true; break;
        case TM_PF_PERF_SAMPLE_TID: pf->in.tid = (uint32_t)f.val; break;
        case TM_PF_PERF_SAMPLE_CALLSTACK_IID: pf->in.cs = f.val; pf->in.has_cs = true; break;
        case TM_PF_PERF_SAMPLE_TIMEBASE_COUNT: pf->in.count = f.val; break;
        case TM_PF_PERF_SAMPLE_KERNEL_RECORDS_LOST: if (!d->relay) pf->lost = f.val; break;
        case TM_PF_PERF_SAMPLE_SKIPPED_REASON: if (!d->relay) pf->skipped = true; break;
        case TM_PF_PERF_SAMPLE_UNWIND_ERROR:
            pf->truncated = f.wire == TM_PB_VARINT && f.val == TM_PF_UNWIND_ERROR_MAX_FRAMES_EXCEEDED;
            break;
        default: break;
        }
    }
    return rc == TM_PB_ERROR ? pb_error(d, &r, "PerfSample") : TM_OK;
}

/* A PerfSample in Relay mode: every one with a callstack counts. */
static tm_status on_perf_sample_relay(dec *d, seq_state *s, const tm_pf_packet *k, const tm_pf_sample *in) {
    tm_profile *p = d->p;
    if (!in->has_cs) return TM_OK;
    d->relay_samples++;
    p->stats.perf_samples++;
    if (in->has_pid && !p->has_relay_pid) {
        p->has_relay_pid = 1;
        p->relay_observed_pid = (int64_t)in->pid;
    }
    uint32_t stack, thread;
    int ok;
    TM_TRY(resolve_callstack(d, s, in->cs, in->data, &stack, &ok));
    if (ok) {
        TM_TRY(thread_of(d, (int64_t)in->tid, 0, &thread));
        DTRY_MEM(d, tm_profile_add_sample(p, (int64_t)(k->has_timestamp ? k->timestamp : 0), stack, thread));
    } else {
        p->stats.dropped_unresolved++;
    }
    return check_sample_limit(d, k->start);
}

/* A PerfSample of generation gen, neither lost nor skipped: in, and
 * whether its stack was cut (unwind_error). Both paths take it: a packet
 * tm_pf_next read (on_perf_sample), and a run's (decode_run), inlined in
 * its loop. task_clock: counts_cpu_ns of its generation; within_limit:
 * the caller knows the samples stay within max_samples. */
TM_PB_INLINE tm_status on_perf_fields(dec *d, seq_state *s, uint32_t gen, bool task_clock, const tm_pf_sample *in,
                                      bool truncated, bool within_limit) {
    tm_profile *p = d->p;
    /* Counted even for a sample dropped below: the next one's difference
     * must not take in this one's time. */
    uint64_t growth = count_growth(s, in->count), cpu_ns = task_clock ? growth : 0;
    if (!in->has_cs) {
        p->stats.perf_samples_without_callstack++;
        return TM_OK;
    }
    const tm_pf_gen *g = tm_pf_gen_of(&d->rd, gen);
    if (g->off_cpu) return on_off_cpu_sample(d, s, in, growth);
    if (!p->on_cpu_period_ns) p->on_cpu_period_ns = g->period_ns;
    p->stats.perf_samples++;
    if (!within_limit) TM_TRY(check_sample_limit(d, in->start));
    uint32_t stack, thread;
    int ok;
    TM_TRY(resolve_callstack(d, s, in->cs, in->data, &stack, &ok));
    if (!ok) {
        p->stats.dropped_unresolved++;
        return TM_OK;
    }
    int64_t ts;
    if (!sample_time(d, in, &ts)) return TM_OK;
    TM_TRY(thread_of(d, (int64_t)in->tid, (int64_t)in->pid, &thread));
    if (truncated) p->stats.perf_samples_truncated++;
    if (cpu_ns) {
        p->threads[thread].counted_ns += cpu_ns;
        p->threads[thread].counted_samples++;
        p->stats.perf_samples_counted++;
        p->stats.perf_counted_cpu_ns += cpu_ns;
    }
    return add_sample(d, ts, stack, thread);
}

static tm_status on_perf_sample(dec *d, seq_state *s, const tm_pf_packet *k) {
    perf_fields pf;
    memset(&pf, 0, sizeof pf);
    pf.in.start = k->start, pf.in.data = k->data.data;
    tm_pf_sample_time(&pf.in, k);
    if (k->perf_read) { /* the reader's check read it (none of fields 16-18 there) */
        pf.in.pid = k->perf_pid, pf.in.tid = k->perf_tid, pf.in.cs = k->perf_cs, pf.in.count = k->perf_count;
        pf.in.has_pid = k->perf_has_pid, pf.in.has_cs = k->perf_has_cs;
    } else {
        TM_TRY(read_perf_sample(d, k, &pf));
    }
    if (d->relay) return on_perf_sample_relay(d, s, k, &pf.in);
    if (pf.lost) {
        d->p->stats.perf_records_lost += pf.lost;
        return TM_OK;
    }
    if (pf.skipped) {
        d->p->stats.perf_samples_skipped++;
        return TM_OK;
    }
    return on_perf_fields(d, s, k->gen, counts_cpu_ns(d, s, k->gen), &pf.in, pf.truncated, false);
}

/* Collects the values of a repeated varint field, packed or not. */
static tm_status collect_repeated(dec *d, tm_bytes msg, uint32_t num, const char *name, uint64_t **vec,
                                  size_t *cap, size_t *n) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    *n = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != num) continue;
        if (f.wire == TM_PB_VARINT) {
            DTRY_MEM(d, TM_VEC_RESERVE(d->mem, *vec, *cap, *n + 1));
            (*vec)[(*n)++] = f.val;
        } else if (f.wire == TM_PB_LEN) {
            DTRY_MEM(d, TM_VEC_RESERVE(d->mem, *vec, *cap, *n + f.bytes.len)); /* >= element count */
            tm_pb_reader pr = tm_pb_reader_of(f.bytes);
            uint64_t v;
            int prc;
            while ((prc = tm_pb_packed_next(&pr, &v)) == TM_PB_OK) (*vec)[(*n)++] = v;
            if (prc == TM_PB_ERROR) return pb_error(d, &pr, name);
        } else return tm_pf_wire_fail(&d->rd, &f, name);
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, name);
    return TM_OK;
}

/* Both lists of a StreamingProfilePacket in one pass, when it holds only
 * varints under one-byte tags (what an unpacked writer sends); *done false
 * otherwise, leaving the packet to collect_repeated. */
static tm_status collect_streaming_plain(dec *d, tm_bytes msg, size_t *n_cs, size_t *n_dt, uint64_t *deltas_or,
                                        bool *done) {
    *n_cs = *n_dt = 0;
    *done = false;
    if (!msg.len) return TM_OK;
    const uint8_t *p = msg.data, *end = p + msg.len;
    /* Each value takes two bytes at least, a tag and a varint: room for
     * len / 2 in each list spares checking it value by value. */
    size_t most = msg.len / 2;
    DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->cs_scratch, d->cap_cs, most));
    DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->delta_scratch, d->cap_delta, most));
    /* The lists and their counts in locals: a store through the lists (of
     * uint64_t, which size_t is) could alias the dec's fields. */
    uint64_t *iids = d->cs_scratch;
    int64_t *deltas = d->delta_scratch;
    size_t cs = 0, dt = 0;
    uint64_t any = 0;
    while (end - p >= 2) {
        uint64_t v;
        unsigned tag = p[0];
        if (!(p = tm_pb_varint_fast(p + 1, end, &v))) return TM_OK;
        /* the two lists' tags first: any other must be a varint's, one byte long */
        if (tag == TM_PF_STREAMING_CALLSTACK_IID << 3) {
            iids[cs++] = v;
        } else if (tag == TM_PF_STREAMING_TIMESTAMP_DELTA_US << 3) {
            deltas[dt++] = (int64_t)v;
            any |= v;
        } else if (tag < 8 || (tag & 0x87) != TM_PB_VARINT) {
            return TM_OK;
        }
    }
    if (p != end) return TM_OK; /* a last byte alone */
    *n_cs = cs;
    *n_dt = dt;
    *deltas_or = any;
    *done = true;
    return TM_OK;
}

/* A StreamingProfilePacket of at most this many deltas, each under 2^32
 * us, spans at most STREAMING_FAST_SPAN_NS: its samples' times need no
 * overflow checks when its base is that far from INT64_MAX. */
#define STREAMING_FAST_DELTAS ((size_t)1 << 20)
#define STREAMING_FAST_SPAN_NS ((int64_t)1 << 62) /* 2^20 * 2^32 us < 2^62 ns */

static tm_status on_streaming(dec *d, seq_state *s, const tm_pf_packet *k) {
    size_t n_cs, n_dt;
    uint64_t deltas_or = UINT64_MAX;
    bool plain;
    TM_TRY(collect_streaming_plain(d, k->data, &n_cs, &n_dt, &deltas_or, &plain));
    if (!plain) {
        deltas_or = UINT64_MAX; /* not known */
        TM_TRY(collect_repeated(d, k->data, TM_PF_STREAMING_CALLSTACK_IID, "StreamingProfilePacket.callstack_iid",
                                &d->cs_scratch, &d->cap_cs, &n_cs));
        TM_TRY(collect_repeated(d, k->data, TM_PF_STREAMING_TIMESTAMP_DELTA_US,
                                "StreamingProfilePacket.timestamp_delta_us", (uint64_t **)&d->delta_scratch,
                                &d->cap_delta, &n_dt));
    }
    tm_profile *p = d->p;
    p->stats.streaming_samples += n_cs;
    TM_TRY(check_sample_limit(d, k->start));
    uint32_t thread;
    if (s->has_thread) TM_TRY(thread_of(d, s->tid, s->pid, &thread));
    else {
        TM_TRY(thread_of(d, 0, 0, &thread));
        p->stats.samples_without_thread += n_cs;
    }
    /* Trace Processor converts the packet's base once, when it reads the
     * packet: the legacy time base (MONOTONIC; kept as it is when it has no
     * conversion), else the packet's own time; it adds the deltas in trace
     * time and advances the time base by them, wrapping as its int64 does.
     * Samples whose time wraps are dropped here. */
    int64_t base;
    bool exact = true;
    if (s->has_ref_time) {
        bool ok, wrapped;
        TM_TRY(tm_pf_to_trace_time(&d->rd, TM_CLOCK_MONOTONIC, s->time_ns, true, &base, &ok, &wrapped));
        if (!ok) base = s->time_ns;
        else exact = !wrapped;
    } else {
        p->stats.streaming_without_reference_time += n_cs;
        if (!packet_time(d, k, n_cs, &base)) return TM_OK;
    }
    /* In locals: the samples' stores could alias them. */
    int64_t acc = 0, time_ns = s->time_ns;
    const int64_t *deltas = d->delta_scratch;
    const uint64_t *iids = d->cs_scratch;
    if (exact && deltas_or <= UINT32_MAX && n_dt <= STREAMING_FAST_DELTAS && base >= 0 &&
        base <= INT64_MAX - STREAMING_FAST_SPAN_NS) {
        /* No sum of the deltas leaves int64 nor takes the time past it:
         * every sample's time is base + acc, none dropped for it. */
        size_t n = n_cs < n_dt ? n_cs : n_dt;
        for (size_t i = 0; i < n; i++) {
            acc += deltas[i] * 1000;
            uint32_t stack;
            int ok;
            TM_TRY(resolve_callstack(d, s, iids[i], k->data.data, &stack, &ok));
            if (!ok) p->stats.dropped_unresolved++;
            else DTRY_MEM(d, tm_profile_add_sample(p, base + acc, stack, thread));
        }
        for (size_t i = n; i < n_dt; i++) acc += deltas[i] * 1000; /* trailing deltas still advance the time */
        time_ns = (int64_t)((uint64_t)time_ns + (uint64_t)acc);
    } else {
        for (size_t i = 0; i < n_dt; i++) {
            uint64_t delta_us = (uint64_t)deltas[i], delta_ns = delta_us * 1000u; /* in int64 to INT64_MAX / 1000 us */
            if (delta_us > INT64_MAX / 1000 || __builtin_add_overflow(acc, (int64_t)delta_ns, &acc)) exact = false;
            time_ns = (int64_t)((uint64_t)time_ns + delta_ns);
            if (i >= n_cs) continue; /* trailing deltas still advance the time */
            uint32_t stack;
            int ok;
            int64_t t;
            TM_TRY(resolve_callstack(d, s, iids[i], k->data.data, &stack, &ok));
            if (!ok) p->stats.dropped_unresolved++;
            else if (!exact || __builtin_add_overflow(base, acc, &t) || t < 0) p->stats.dropped_bad_timestamp++;
            else DTRY_MEM(d, tm_profile_add_sample(p, t, stack, thread));
        }
    }
    if (s->has_ref_time) s->time_ns = time_ns;
    if (n_cs > n_dt) p->stats.dropped_malformed_streaming += n_cs - n_dt;
    return TM_OK;
}

/* StackSample.callstack: repeated Frame frames=1 { string function_name=1;
 * string source_file=2; uint32 line_number=3; }, root first. Its frames
 * become function-only frames (no mapping, no address): the model has no
 * place for source positions, so those are validated and left out. A frame
 * without a name is an unknown frame, as an unsymbolised one would be. */
static tm_status inline_callstack(dec *d, tm_bytes msg, const uint8_t *at, uint32_t *out) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    size_t n = 0;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != TM_PF_INLINE_CALLSTACK_FRAMES) continue;
        WANT(d, f, TM_PB_LEN, "StackSample.Callstack");
        if (n >= d->lim->max_stack_depth)
            return dfail(d, TM_ERR_LIMIT, at, "inline callstack has more than %llu frames (max_stack_depth)",
                         (unsigned long long)d->lim->max_stack_depth);
        tm_prof_frame pf;
        memset(&pf, 0, sizeof pf);
        tm_pb_reader fr = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        int frc;
        while ((frc = tm_pb_next(&fr, &g)) == TM_PB_OK) {
            if (g.num == TM_PF_INLINE_FRAME_FUNCTION_NAME || g.num == TM_PF_INLINE_FRAME_SOURCE_FILE)
                WANT(d, g, TM_PB_LEN, "StackSample.Frame");
            else if (g.num == TM_PF_INLINE_FRAME_LINE_NUMBER)
                WANT(d, g, TM_PB_VARINT, "StackSample.Frame");
            if (g.num == TM_PF_INLINE_FRAME_FUNCTION_NAME) pf.function = g.bytes;
        }
        if (frc == TM_PB_ERROR) return pb_error(d, &fr, "StackSample.Frame");
        if (pf.function.len) pf.flags |= TM_FRAME_HAS_FUNCTION;
        DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->frame_scratch, d->cap_fs, n + 1));
        TM_TRY(intern_frame(d, &pf, at, &d->frame_scratch[n]));
        n++;
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "StackSample.Callstack");
    reverse_scratch(d, n);
    DTRY_MEM(d, tm_profile_intern_stack(d->p, d->frame_scratch, n, out));
    return TM_OK;
}

enum { CS_NONE, CS_INLINE, CS_IID };

/* StackSample (v58, TracePacket 135): one sample. Its stack is the inline
 * callstack or callstack_iid (the interning PerfSample uses; of the two,
 * the last on the wire wins, as for a oneof), its thread the task context
 * (inline or task_context_iid into stack_sample_task_contexts), its time
 * the packet timestamp, converted like PerfSample's. Execution context,
 * unwind error, descriptors and weights are checked but not kept: every
 * exporter counts samples, and the model has per-sample weights only for
 * folded input. Counting and drops follow PerfSample. */
static tm_status on_stack_sample(dec *d, seq_state *s, const tm_pf_packet *k) {
    tm_pb_reader r = tm_pb_reader_of(k->data);
    tm_pb_field f;
    ent_task task = {0, 0, false};
    uint64_t task_iid = 0, cs_iid = 0, iid;
    tm_bytes cs_msg = {NULL, 0};
    const uint8_t *cs_at = k->data.data;
    int cs_kind = CS_NONE;
    bool inline_task = false;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        /* As Trace Processor reads them, wherever each is on the wire: an
         * inline task context wins over an interned one, an interned
         * callstack over an inline one. */
        case TM_PF_STACK_SAMPLE_TASK_CONTEXT:
            WANT(d, f, TM_PB_LEN, "StackSample");
            TM_TRY(parse_task_context(d, f.bytes, &task, &iid));
            inline_task = true;
            task_iid = 0;
            break;
        case TM_PF_STACK_SAMPLE_TASK_CONTEXT_IID:
            WANT(d, f, TM_PB_VARINT, "StackSample");
            if (!inline_task) task_iid = f.val;
            break;
        case TM_PF_STACK_SAMPLE_CALLSTACK:
            WANT(d, f, TM_PB_LEN, "StackSample");
            if (cs_kind == CS_IID) break;
            cs_msg = f.bytes;
            cs_at = f.start;
            cs_kind = CS_INLINE;
            break;
        case TM_PF_STACK_SAMPLE_CALLSTACK_IID:
            WANT(d, f, TM_PB_VARINT, "StackSample");
            cs_iid = f.val, cs_at = f.start, cs_kind = CS_IID;
            break;
        case TM_PF_STACK_SAMPLE_EXECUTION_CONTEXT:
        case TM_PF_STACK_SAMPLE_UNWIND_ERROR:
        case TM_PF_STACK_SAMPLE_PRIMARY_DESCRIPTOR: WANT(d, f, TM_PB_LEN, "StackSample"); break;
        case TM_PF_STACK_SAMPLE_EXECUTION_CONTEXT_IID:
        case TM_PF_STACK_SAMPLE_UNWIND_ERROR_IID:
        case TM_PF_STACK_SAMPLE_PRIMARY_DESCRIPTOR_IID:
        case TM_PF_STACK_SAMPLE_PRIMARY_WEIGHT: WANT(d, f, TM_PB_VARINT, "StackSample"); break;
        case TM_PF_STACK_SAMPLE_FOLLOWER_WEIGHTS: /* packed or not */
            if (f.wire == TM_PB_LEN) {
                tm_pb_reader pr = tm_pb_reader_of(f.bytes);
                uint64_t v;
                int prc;
                while ((prc = tm_pb_packed_next(&pr, &v)) == TM_PB_OK) continue;
                if (prc == TM_PB_ERROR) return pb_error(d, &pr, "StackSample.follower_weights");
            } else WANT(d, f, TM_PB_VARINT, "StackSample");
            break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "StackSample");
    tm_profile *p = d->p;
    if (cs_kind == CS_NONE) {
        p->stats.stack_samples_without_callstack++;
        return TM_OK;
    }
    p->stats.stack_samples++;
    TM_TRY(check_sample_limit(d, k->start));
    if (task_iid) {
        tm_bytes msg;
        if (!lookup(d, TM_PF_INTERNED_TASK_CONTEXTS, task_iid, &msg)) {
            p->stats.dropped_unresolved++;
            return TM_OK;
        }
        uint64_t iid;
        TM_TRY(parse_task_context(d, msg, &task, &iid));
    }
    uint32_t stack, thread;
    int ok = 1;
    if (cs_kind == CS_INLINE) TM_TRY(inline_callstack(d, cs_msg, cs_at, &stack));
    else TM_TRY(resolve_callstack(d, s, cs_iid, cs_at, &stack, &ok));
    if (!ok) {
        p->stats.dropped_unresolved++;
        return TM_OK;
    }
    int64_t ts;
    if (!packet_time(d, k, 1, &ts)) return TM_OK;
    /* Without a tid (a task context naming only a process or an async task,
     * a tid of 0 as the SQL model reads it, or none at all) the sample goes to the process's main thread (tid =
     * pid) when the pid is known, else to tid 0 and samples_without_thread,
     * like a StreamingProfilePacket on a sequence without a thread. */
    if (task.has_tid) TM_TRY(thread_of(d, task.tid, task.pid, &thread));
    else if (task.pid) TM_TRY(thread_of(d, task.pid, task.pid, &thread));
    else {
        TM_TRY(thread_of(d, 0, 0, &thread));
        p->stats.samples_without_thread++;
    }
    return add_sample(d, ts, stack, thread);
}

/* Counts the samples a skipped packet would have produced. */
static uint64_t samples_in(const tm_pf_packet *k) {
    tm_pb_reader r = tm_pb_reader_of(k->data);
    tm_pb_field f;
    uint64_t n = 0;
    switch (k->data_field) {
    case TM_PF_PACKET_PERF_SAMPLE:
        while (tm_pb_next(&r, &f) == TM_PB_OK)
            if (f.num == TM_PF_PERF_SAMPLE_CALLSTACK_IID) return 1;
        return 0;
    case TM_PF_PACKET_STREAMING_PROFILE_PACKET:
        while (tm_pb_next(&r, &f) == TM_PB_OK)
            if (f.num == TM_PF_STREAMING_CALLSTACK_IID) n += f.wire == TM_PB_LEN ? tm_pb_packed_count(f.bytes) : 1;
        return n;
    case TM_PF_PACKET_STACK_SAMPLE:
        while (tm_pb_next(&r, &f) == TM_PB_OK)
            if (f.num == TM_PF_STACK_SAMPLE_CALLSTACK || f.num == TM_PF_STACK_SAMPLE_CALLSTACK_IID) return 1;
        return 0;
    default:
        return 0;
    }
}

/* ---- descriptors ---- */

typedef struct thread_desc {
    int64_t pid, tid, ref_us;
    tm_str name;
    bool has_tid, has_ref;
} thread_desc;

static tm_status parse_thread_desc(dec *d, tm_bytes b, thread_desc *td) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    memset(td, 0, sizeof *td);
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case TM_PF_THREAD_DESC_PID: WANT(d, f, TM_PB_VARINT, "ThreadDescriptor"); td->pid = (int32_t)f.val; break;
        case TM_PF_THREAD_DESC_TID:
            WANT(d, f, TM_PB_VARINT, "ThreadDescriptor");
            td->tid = (int64_t)f.val, td->has_tid = true;
            break;
        case TM_PF_THREAD_DESC_THREAD_NAME: WANT(d, f, TM_PB_LEN, "ThreadDescriptor"); td->name = f.bytes; break;
        case TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US:
            WANT(d, f, TM_PB_VARINT, "ThreadDescriptor");
            td->ref_us = (int64_t)f.val, td->has_ref = true;
            break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "ThreadDescriptor");
    return TM_OK;
}

/* A sequence's thread: from its ThreadDescriptor or TrackDescriptor.thread. */
static tm_status apply_thread_desc(dec *d, seq_state *s, const thread_desc *td, bool set_time) {
    if (!td->has_tid && !set_time) return TM_OK; /* a legacy descriptor without tid is thread 0, as in Trace Processor */
    uint32_t thread;
    TM_TRY(thread_of(d, td->tid, td->pid, &thread));
    tm_profile_name_thread(d->p, thread, td->name, PRIO_TRACK_DESCRIPTOR);
    if (!s) return TM_OK;
    if (!s->has_thread || set_time) {
        s->has_thread = true;
        s->pid = td->pid;
        s->tid = td->tid;
    }
    if (set_time && td->has_ref && d->rd.seqs[s->index].valid) {
        s->time_ns = (int64_t)((uint64_t)td->ref_us * 1000u); /* wraps as Trace Processor's int64 does */
        s->has_ref_time = true;
    }
    return TM_OK;
}

static tm_status on_process_desc(dec *d, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int64_t pid = 0;
    tm_str name = {NULL, 0};
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_PROCESS_DESC_PID) { WANT(d, f, TM_PB_VARINT, "ProcessDescriptor"); pid = (int32_t)f.val; }
        else if (f.num == TM_PF_PROCESS_DESC_PROCESS_NAME) { WANT(d, f, TM_PB_LEN, "ProcessDescriptor"); name = f.bytes; }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "ProcessDescriptor");
    if (!pid) return TM_OK;
    uint32_t proc;
    DTRY_MEM(d, tm_profile_process(d->p, pid, &proc));
    tm_profile_name_process(d->p, proc, name, PRIO_PROCESS_TREE);
    return TM_OK;
}

static tm_status on_track_desc(dec *d, seq_state *s, tm_bytes b) { /* s: NULL without a sequence */
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_TRACK_DESC_PROCESS) {
            WANT(d, f, TM_PB_LEN, "TrackDescriptor");
            TM_TRY(on_process_desc(d, f.bytes));
        } else if (f.num == TM_PF_TRACK_DESC_THREAD) {
            WANT(d, f, TM_PB_LEN, "TrackDescriptor");
            thread_desc td;
            TM_TRY(parse_thread_desc(d, f.bytes, &td));
            TM_TRY(apply_thread_desc(d, s, &td, false));
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "TrackDescriptor");
    return TM_OK;
}

/* TraceStats: each packet is a snapshot of the session so far, so the last
 * one wins; BufferStats are summed over the buffers. Only they are this
 * trace's loss: the top-level chunks_discarded is the service's, across
 * every producer and session, so it is kept apart. */
static tm_status on_trace_stats(dec *d, tm_bytes b) {
    tm_trace_stats *st = &d->p->stats;
    uint64_t overwritten = 0, discarded = 0, bytes_overwritten = 0, writer_loss = 0, service_discarded = 0;
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_TRACE_STATS_CHUNKS_DISCARDED) {
            WANT(d, f, TM_PB_VARINT, "TraceStats");
            service_discarded += f.val;
            continue;
        }
        if (f.num != TM_PF_TRACE_STATS_BUFFER_STATS) continue;
        WANT(d, f, TM_PB_LEN, "TraceStats");
        tm_pb_reader br = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while ((rc = tm_pb_next(&br, &g)) == TM_PB_OK) {
            uint64_t *sum = g.num == TM_PF_BUFFER_STATS_CHUNKS_OVERWRITTEN          ? &overwritten
                          : g.num == TM_PF_BUFFER_STATS_CHUNKS_DISCARDED          ? &discarded
                          : g.num == TM_PF_BUFFER_STATS_BYTES_OVERWRITTEN         ? &bytes_overwritten
                          : g.num == TM_PF_BUFFER_STATS_TRACE_WRITER_PACKET_LOSS ? &writer_loss
                                                                                 : NULL;
            if (!sum) continue;
            WANT(d, g, TM_PB_VARINT, "TraceStats.BufferStats");
            *sum += g.val;
        }
        if (rc == TM_PB_ERROR) return pb_error(d, &br, "TraceStats.BufferStats");
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "TraceStats");
    st->trace_stats_packets++;
    st->buffer_chunks_overwritten = overwritten;
    st->buffer_chunks_discarded = discarded;
    st->service_chunks_discarded = service_discarded;
    st->buffer_bytes_overwritten = bytes_overwritten;
    st->writer_packet_loss = writer_loss;
    return TM_OK;
}

static tm_status on_process_tree(dec *d, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != TM_PF_PROCESS_TREE_PROCESSES && f.num != TM_PF_PROCESS_TREE_THREADS) continue;
        WANT(d, f, TM_PB_LEN, "ProcessTree");
        tm_pb_reader er = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        int64_t id = 0, tgid = 0, uid = 0;
        tm_str name = {NULL, 0};
        bool has_name = false, has_uid = false;
        int erc;
        bool process = f.num == TM_PF_PROCESS_TREE_PROCESSES;
        const char *what = process ? "ProcessTree.Process" : "ProcessTree.Thread";
        while ((erc = tm_pb_next(&er, &g)) == TM_PB_OK) {
            /* pid and tid are both field 1 */
            if (g.num == TM_PF_PROCESS_PID) { WANT(d, g, TM_PB_VARINT, what); id = (int32_t)g.val; }
            else if (process && g.num == TM_PF_PROCESS_CMDLINE) {
                WANT(d, g, TM_PB_LEN, what);
                if (!has_name) name = g.bytes, has_name = true; /* cmdline[0] */
            } else if (!process && g.num == TM_PF_THREAD_NAME) { WANT(d, g, TM_PB_LEN, what); name = g.bytes; }
            else if (!process && g.num == TM_PF_THREAD_TGID) { WANT(d, g, TM_PB_VARINT, what); tgid = (int32_t)g.val; }
            else if (process && g.num == TM_PF_PROCESS_UID) {
                WANT(d, g, TM_PB_VARINT, what);
                uid = (int32_t)g.val, has_uid = true;
            }
        }
        if (erc == TM_PB_ERROR) return pb_error(d, &er, what);
        if (process) {
            if (!has_name) continue; /* processes without cmdline are skipped */
            uint32_t proc;
            DTRY_MEM(d, tm_profile_process(d->p, id, &proc));
            tm_profile_name_process(d->p, proc, name, PRIO_TRACK_DESCRIPTOR);
            if (has_uid) d->p->processes[proc].has_uid = true, d->p->processes[proc].uid = uid; /* the default package */
        } else {
            uint32_t thread;
            TM_TRY(thread_of(d, id, tgid, &thread));
            tm_profile_name_thread(d->p, thread, name, PRIO_PROCESS_TREE);
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "ProcessTree");
    return TM_OK;
}

/* ---- clocks ---- */

static tm_status on_clock_snapshot(dec *d, const tm_pf_packet *k) {
    const tm_pf_snapshot *snap = k->snapshot;
    d->p->stats.clock_snapshots++;
    if (d->relay) {
        /* Relay takes the first snapshot with both BOOTTIME and REALTIME. */
        uint64_t boot = 0, real = 0;
        bool has_boot = false, has_real = false;
        for (size_t i = 0; i < snap->n; i++) {
            uint64_t c = snap->readings[i].clock, v = (uint64_t)snap->readings[i].ns;
            if (c == TM_CLOCK_BOOTTIME && !has_boot) boot = v, has_boot = true;
            if (c == TM_CLOCK_REALTIME && !has_real) real = v, has_real = true;
        }
        if (!d->p->has_relay_offset && has_boot && has_real) {
            d->p->has_relay_offset = 1;
            d->relay_boot = boot;
            d->relay_real = real;
        }
        return TM_OK;
    }
    d->p->stats.clock_readings_ignored += snap->ignored; /* the reader's clock tracker took the rest */
    return TM_OK;
}

/* ---- packets ---- */

/* ---- heapprofd dumps (perfetto/heap.h) ---- */

static tm_status heap_callsite(void *ctx, const tm_pf_heap_stack *hs, uint32_t *out) {
    dec *d = ctx;
    seq_state *s;
    if (!hs->tables) { /* each dump names the callstacks the one before did: resolved in this epoch, they hold */
        const tm_pf_gen *g = &d->rd.gens[hs->gen];
        const resolved *c = cache_find(&d->seqs[g->seq]->stacks, hs->iid);
        if (TM_LIKELY(c && c->upto == g->epoch)) {
            *out = c->id;
            return TM_OK;
        }
    }
    if (hs->tables) {
        if (d->local_serial != hs->tables->serial) { /* another dump's tables: forget what the last ones gave */
            seq_forget_resolved(d->mem, &d->local_seq);
            d->local_serial = hs->tables->serial;
        }
        d->local = hs->tables;
        s = &d->local_seq;
    } else {
        s = d->seqs[d->rd.gens[hs->gen].seq];
    }
    uint32_t gen = d->gen, cls = d->cls;
    d->gen = hs->gen;
    d->cls = hs->tables ? 0 : tm_pf_tables_class(&d->rd, s->index, hs->gen);
    int ok;
    tm_status st = resolve_callstack(d, s, hs->iid, hs->at, out, &ok);
    d->local = NULL;
    d->gen = gen;
    d->cls = cls;
    if (st == TM_OK && !ok) {
        d->p->stats.heap_samples_unresolved++;
        *out = TM_ABSENT;
    }
    return st;
}

static tm_status heap_dump(void *ctx, const tm_pf_heap_dump *hd) {
    dec *d = ctx;
    d->p->stats.heap_dumps++;
    if (hd->sampling_interval) d->p->heap_interval = hd->sampling_interval;
    return TM_OK;
}

/* A sample's change: its allocation row and free row (either NULL) go to
 * the one heap sample of their process, stack and heap. */
static tm_status heap_rows(void *ctx, const tm_pf_heap_row *alloc, const tm_pf_heap_row *freed) {
    dec *d = ctx;
    const tm_pf_heap_row *r = alloc ? alloc : freed;
    uint32_t thread;
    TM_TRY(thread_of(d, r->pid, r->pid, &thread));
    const int64_t allocated[2] = {alloc ? alloc->count : 0, alloc ? alloc->size : 0};
    const int64_t released[2] = {freed ? freed->count : 0, freed ? freed->size : 0};
    tm_status st = tm_profile_add_heap(d->p, r->ts, r->callsite, thread, r->heap, r->heap_name, allocated, released);
    if (st == TM_ERR_LIMIT) return dfail(d, st, NULL, "a memory profile with more than 256 heaps or 2^24 processes");
    return st == TM_OK ? TM_OK : nomem(d);
}

static tm_status heap_stat(void *ctx, tm_pf_heap_stat stat, int64_t pid, int64_t v) {
    tm_trace_stats *st = &((dec *)ctx)->p->stats;
    (void)pid;
    switch (stat) {
    case TM_HEAP_DUMP_LOSSY: st->heap_dumps_with_loss++; break; /* once per dump, whatever its flags */
    case TM_HEAP_MALFORMED_PACKET: st->heap_malformed += (uint64_t)v; break;
    case TM_HEAP_MISSING_PACKET: st->heap_missing_packets += (uint64_t)v; break;
    case TM_HEAP_NON_FINALIZED_PROFILE: st->heap_unfinished_dumps += (uint64_t)v; break;
    default: break;
    }
    return TM_OK;
}

/* ProcessStats: each process's memory at the packet's time. */
static tm_status on_process_stats(dec *d, const tm_pf_packet *k) {
    if (k->has_time && !k->trace_ok) return TM_OK;
    int64_t ts = k->has_time ? k->trace_ns : d->rd.latest_ns;
    tm_profile *p = d->p;
    tm_pb_reader r = tm_pb_reader_of(k->data);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) { /* checked by the reader */
        if (f.num != TM_PF_PROCESS_STATS_PROCESSES) continue;
        tm_prof_memory m = {ts, 0, 0, 0, 0, 0, 0, 0};
        tm_pb_reader pr = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while (tm_pb_next(&pr, &g) == TM_PB_OK) {
            uint64_t bytes = g.val * 1024; /* KiB; a value past 2^54 KiB wraps, as Trace Processor's double rounds */
            switch (g.num) {
            case TM_PF_PROC_STATS_PID: m.pid = (int32_t)g.val; break;
            case TM_PF_PROC_STATS_VM_RSS_KB: m.rss = bytes; break;
            case TM_PF_PROC_STATS_RSS_ANON_KB: m.rss_anon = bytes; break;
            case TM_PF_PROC_STATS_RSS_FILE_KB: m.rss_file = bytes; break;
            case TM_PF_PROC_STATS_RSS_SHMEM_KB: m.rss_shmem = bytes; break;
            case TM_PF_PROC_STATS_VM_SWAP_KB: m.swap = bytes; break;
            case TM_PF_PROC_STATS_VM_HWM_KB: m.rss_peak = bytes; break;
            default: break;
            }
        }
        DTRY_MEM(d, TM_VEC_RESERVE(p->mem, p->memory, p->cap_memory, p->n_memory + 1));
        p->memory[p->n_memory++] = m;
    }
    return TM_OK;
}

static tm_pf_heap_sink heap_sink(dec *d) {
    return (tm_pf_heap_sink){d, heap_callsite, NULL, heap_dump, heap_rows, heap_stat};
}

static tm_status on_profile_packet(dec *d, const tm_pf_packet *k) {
    if (k->has_time && !k->trace_ok) return TM_OK; /* no clock path: Trace Processor drops the packet */
    tm_pf_heap_sink sink = heap_sink(d);
    d->p->stats.heap_profile_packets++;
    return tm_pf_heap_packet(&d->heap, &d->rd, k->gen, k->data, k->has_time ? k->trace_ns : d->rd.latest_ns, &sink);
}

static tm_status decode_packet_relay(dec *d, const tm_pf_packet *k) {
    seq_state *s;
    TM_TRY(seq_of(d, k->seq, &s));
    if (k->cleared) d->p->stats.incremental_resets++;
    if (k->cleared || k->interned.data) seq_forget_resolved(d->mem, s); /* entries may have been replaced */
    if (k->data_field == TM_PF_PACKET_CLOCK_SNAPSHOT) return on_clock_snapshot(d, k);
    if (k->data_field == TM_PF_PACKET_PERF_SAMPLE) return on_perf_sample(d, s, k);
    return TM_OK;
}

static tm_status decode_packet(dec *d, const tm_pf_packet *k) {
    if (d->relay) return decode_packet_relay(d, k);
    tm_trace_stats *st = &d->p->stats;
    /* 1. the sequence: data loss (counted like TP's
     * traced_buf_sequence_packet_loss), clear, interned data dropped */
    seq_state *s = NULL;
    if (k->seq) {
        TM_TRY(seq_of(d, k->seq, &s));
        if (k->loss) {
            st->data_losses++;
            if (!s->had_loss) st->sequences_with_data_loss++;
            s->had_loss = true;
        }
        if (k->cleared) st->incremental_resets++;
        if (k->interned_skipped) st->interned_data_skipped++;
        /* Samples first: nearly every packet is one. */
        if (TM_LIKELY(!k->stale)) {
            if (k->data_field == TM_PF_PACKET_PERF_SAMPLE) return on_perf_sample(d, s, k);
            if (k->data_field == TM_PF_PACKET_STREAMING_PROFILE_PACKET) return on_streaming(d, s, k);
        }
    }
    /* 2. clock snapshots and trace stats are consumed here */
    switch (k->data_field) {
    case TM_PF_PACKET_CLOCK_SNAPSHOT: return on_clock_snapshot(d, k);
    case TM_PF_PACKET_TRACE_STATS: return on_trace_stats(d, k->data);
    case TM_PF_PACKET_ZSTD_COMPRESSED_PACKETS: st->packets_unsupported++; return TM_OK;
    case TM_PF_PACKET_MODULE_SYMBOLS: case TM_PF_PACKET_DEOBFUSCATION_MAPPING: case TM_PF_PACKET_PACKAGES_LIST:
        return tm_pf_symbols_add(d->mem, &d->syms, k->data_field, k->data) == TM_OK ? TM_OK : nomem(d);
    default: break;
    }
    /* 3. packets that need incremental state while it is invalid */
    if (k->stale) {
        st->packets_skipped_incremental++;
        uint64_t lost = samples_in(k);
        if (s->had_loss) st->dropped_stale_interning += lost;
        else st->dropped_never_cleared += lost;
        return TM_OK;
    }
    /* 4. payloads; samples need a sequence's intern tables (Trace Processor
     * drops them without one) */
    if (!s && (k->data_field == TM_PF_PACKET_PERF_SAMPLE || k->data_field == TM_PF_PACKET_STREAMING_PROFILE_PACKET ||
               k->data_field == TM_PF_PACKET_STACK_SAMPLE)) {
        st->dropped_without_sequence += samples_in(k);
        return TM_OK;
    }
    switch (k->data_field) {
    case TM_PF_PACKET_THREAD_DESCRIPTOR: {
        if (!s) return TM_OK; /* a legacy thread descriptor describes its sequence */
        thread_desc td;
        TM_TRY(parse_thread_desc(d, k->data, &td));
        return apply_thread_desc(d, s, &td, true);
    }
    case TM_PF_PACKET_TRACK_DESCRIPTOR: return on_track_desc(d, s, k->data);
    case TM_PF_PACKET_PROCESS_DESCRIPTOR: return on_process_desc(d, k->data);
    case TM_PF_PACKET_PROCESS_TREE: return on_process_tree(d, k->data);
    case TM_PF_PACKET_STACK_SAMPLE: return on_stack_sample(d, s, k);
    case TM_PF_PACKET_PROFILE_PACKET: return s ? on_profile_packet(d, k) : TM_OK;
    case TM_PF_PACKET_PROCESS_STATS: return on_process_stats(d, k);
    case TM_PF_PACKET_STREAMING_ALLOCATION: case TM_PF_PACKET_STREAMING_FREE:
        tm_pf_heap_streamed_add(&d->streamed, k->data_field, k->data); /* no callstack: counted only */
        return TM_OK;
    default: return TM_OK;
    }
}

/* A run of usual PerfSample packets (tm_pf_next_run): what decode_packet
 * does for each of them, its sequence's part once (no loss, clear or stale
 * state there). */
static tm_status decode_run(dec *d, const tm_pf_sample_run *run) {
    seq_state *s;
    TM_TRY(seq_of(d, run->seq, &s));
    d->gen = run->gen;
    d->cls = tm_pf_tables_class(&d->rd, run->seq->index, run->gen);
    /* Each sample adds one at most: the run's cannot pass the limit? */
    bool within_limit = samples_so_far(d) + run->n <= d->lim->max_samples;
    bool task_clock = counts_cpu_ns(d, s, run->gen);
    for (size_t i = 0; i < run->n; i++) {
        tm_status st = on_perf_fields(d, s, run->gen, task_clock, &run->samples[i], false, within_limit);
        if (st != TM_OK) {
            tm_pf_failed_at(&d->rd, &run->samples[i]);
            return st;
        }
    }
    return TM_OK;
}

static tm_status decode_trace(dec *d) {
    tm_pf_packet k;
    tm_pf_sample_run run;
    int rc;
    for (;;) {
        rc = tm_pf_next_run(&d->rd, &run);
        if (run.n) TM_TRY(decode_run(d, &run));
        if (rc == TM_PF_ERROR) break;
        if (run.n == TM_PF_RUN_MAX) continue; /* more may follow; else the next packet is another kind */
        if ((rc = tm_pf_next(&d->rd, &k)) != TM_PF_PACKET) break;
        d->gen = k.gen;
        d->cls = k.seq ? tm_pf_tables_class(&d->rd, k.seq->index, k.gen) : 0; /* none in Relay mode */
        TM_TRY(decode_packet(d, &k));
    }
    if (rc != TM_PF_ERROR) {
        tm_pf_heap_sink sink = heap_sink(d);
        TM_TRY(tm_pf_heap_finish(&d->heap, &sink));
    }
    tm_trace_stats *st = &d->p->stats;
    st->packets = d->rd.counts.packets;
    st->compressed_packets = d->rd.counts.compressed_packets;
    st->packets_unsupported += d->rd.counts.nested_compressed;
    st->oneof_members_ignored = d->rd.counts.oneof_ignored;
    st->truncated = d->rd.counts.truncated;
    st->truncated_at = d->rd.counts.truncated_at;
    st->heap_streaming_allocations = d->streamed.allocations;
    st->heap_streaming_alloc_bytes = d->streamed.alloc_bytes;
    st->heap_streaming_frees = d->streamed.frees;
    st->heap_streaming_malformed = d->streamed.malformed;
    return rc == TM_PF_ERROR ? d->rd.err->code : TM_OK;
}

/* ---- after the last packet ---- */

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Piecewise offsets from trace time to REALTIME, one per trace-clock value
 * of a snapshot (where the conversion may change). */
static tm_status build_realtime(dec *d) {
    tm_profile *p = d->p;
    const tm_clocks *c = &d->rd.clocks;
    size_t n = 0;
    if (c->trace_clock == TM_CLOCK_REALTIME) {
        p->realtime = tm_mem_alloc(p->mem, sizeof *p->realtime);
        if (!p->realtime) return nomem(d);
        p->realtime[0].from_ns = INT64_MIN;
        p->realtime[0].offset_ns = 0;
        p->n_realtime = 1;
        return TM_OK;
    }
    for (size_t i = 0; i < c->n_points; i++) n += c->points[i].clock == c->trace_clock;
    if (!n) return TM_OK;
    int64_t *from = tm_mem_alloc(d->mem, n * sizeof *from);
    if (!from) return nomem(d);
    n = 0;
    for (size_t i = 0; i < c->n_points; i++)
        if (c->points[i].clock == c->trace_clock) from[n++] = c->points[i].value;
    qsort(from, n, sizeof *from, cmp_i64);
    tm_status st = TM_OK;
    p->realtime = tm_mem_alloc(p->mem, n * sizeof *p->realtime);
    if (!p->realtime) st = TM_ERR_NOMEM;
    for (size_t i = 0; st == TM_OK && i < n; i++) {
        int64_t to, offset;
        bool wrapped;
        if (i && from[i] == from[i - 1]) continue;
        if (!tm_clocks_convert(c, c->trace_clock, TM_CLOCK_REALTIME, from[i], &to, &wrapped) || wrapped ||
            __builtin_sub_overflow(to, from[i], &offset))
            continue;
        p->realtime[p->n_realtime].from_ns = from[i];
        p->realtime[p->n_realtime].offset_ns = offset;
        p->n_realtime++;
    }
    tm_mem_free(d->mem, from, n * sizeof *from);
    if (!p->n_realtime) {
        tm_mem_free(p->mem, p->realtime, n * sizeof *p->realtime);
        p->realtime = NULL;
    } else if (n != p->n_realtime) {
        /* FREE_VEC in profile.c releases n_realtime entries: shrink to fit. */
        tm_time_segment *fit = tm_mem_realloc(p->mem, p->realtime, n * sizeof *fit,
                                              p->n_realtime * sizeof *fit);
        if (fit) p->realtime = fit;
        else st = TM_ERR_NOMEM;
    }
    return st == TM_OK ? TM_OK : nomem(d);
}

/* Off-CPU samples by time (written when their thread came back, so out of
 * order across threads); ties by thread, then stack, so that the order
 * does not depend on the sort. */
static int off_sample_cmp(const void *a, const void *b) {
    const tm_prof_off_sample *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    if (x->thread != y->thread) return x->thread < y->thread ? -1 : 1;
    if (x->stack != y->stack) return x->stack < y->stack ? -1 : 1;
    return x->ns < y->ns ? -1 : x->ns > y->ns;
}

static tm_status finish(dec *d) {
    tm_profile *p = d->p;
    if (d->relay) {
        /* Relay adds REALTIME - BOOTTIME in 128-bit arithmetic */
        if (p->has_relay_offset) p->relay_offset_ns = (tm_i128)d->relay_real - (tm_i128)d->relay_boot;
    } else {
        TM_TRY(build_realtime(d));
        tm_pf_walk_error bad;
        tm_status sym = tm_profile_apply_symbols(p, &d->syms, &bad);
        if (sym == TM_ERR_LIMIT)
            return dfail(d, TM_ERR_LIMIT, NULL, "more than %llu unique frames with symbols (max_unique_frames)",
                         (unsigned long long)p->max_unique_frames);
        if (sym == TM_ERR_MALFORMED) /* a nested message the reader's schema does not reach; as the SQL model says */
            return dfail(d, TM_ERR_MALFORMED, bad.at.p, "malformed %s: %s", bad.where, bad.at.err);
        DTRY_MEM(d, sym);
    }
    DTRY_MEM(d, tm_profile_sort_samples(p));
    if (p->n_off_samples) qsort(p->off_samples, p->n_off_samples, sizeof *p->off_samples, off_sample_cmp);
    tm_trace_stats *st = &p->stats;
    for (size_t i = 0; i < p->n_heap_samples; i++) { /* a stack that freed more than it allocated holds nothing */
        const tm_prof_heap_sample *h = &p->heap_samples[i];
        st->heap_alloc_bytes += h->alloc_space > 0 ? (uint64_t)h->alloc_space : 0;
        st->heap_inuse_bytes += h->inuse_space > 0 ? (uint64_t)h->inuse_space : 0;
    }
    st->samples_kept = p->n_samples;
    st->threads = p->n_threads;
    st->trace_clock_id = (uint32_t)d->rd.clocks.trace_clock;
    st->has_realtime = d->relay ? p->has_relay_offset : p->n_realtime > 0;
    if (p->n_samples) {
        st->first_sample_ns = p->samples[0].ts;
        st->last_sample_ns = p->samples[p->n_samples - 1].ts;
    }
    /* Threads with samples but no name from the trace: neither their own
     * nor, for a main thread, its process's. The same rule in both modes:
     * the "main" an output may write for a main thread is no name. */
    uint8_t *has = tm_mem_alloc(d->mem, p->n_threads + 1); /* 2: no name; 1: and samples */
    if (!has) return nomem(d);
    size_t unnamed = 0;
    for (size_t i = 0; i < p->n_threads; i++) {
        has[i] = !p->threads[i].name_prio && !tm_profile_main_thread_process_name(p, &p->threads[i]).len ? 2 : 0;
        unnamed += has[i] != 0;
    }
    for (size_t i = 0; unnamed && i < p->n_samples; i++) /* most traces name every thread */
        if (has[p->samples[i].thread] == 2) has[p->samples[i].thread] = 1, unnamed--, st->threads_without_name++;
    tm_mem_free(d->mem, has, p->n_threads + 1);
    return TM_OK;
}

static void dec_release(dec *d) {
    tm_pf_symbols_free(d->mem, &d->syms);
    for (size_t i = 0; i < d->n_seqs; i++) seq_free(d->mem, d->seqs[i]);
    tm_mem_free(d->mem, d->seqs, d->cap_seqs * sizeof *d->seqs);
    tm_mem_free(d->mem, d->shared, d->n_shared * sizeof *d->shared);
    tm_mem_free(d->mem, d->shared_frames, d->n_shared_frames * sizeof *d->shared_frames);
    tm_pf_reader_release(&d->rd);
    tm_mem_free(d->mem, d->cs_scratch, d->cap_cs * sizeof *d->cs_scratch);
    tm_mem_free(d->mem, d->delta_scratch, d->cap_delta * sizeof *d->delta_scratch);
    tm_mem_free(d->mem, d->frame_scratch, d->cap_fs * sizeof *d->frame_scratch);
    seq_caches_free(d->mem, &d->local_seq);
    tm_pf_heap_release(&d->heap);
}

/* ---- public API ---- */

void tm_limits_preset(tm_limit_preset preset, tm_limits *out) {
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (preset == TM_LIMITS_RELAY) {
        out->max_samples = TM_RELAY_MAX_SAMPLES;
        out->max_stack_depth = TM_RELAY_MAX_STACK_DEPTH;
        out->max_sequences = TM_RELAY_MAX_SEQUENCES;
        out->max_packet_bytes = TM_RELAY_MAX_PACKET_BYTES;
        out->max_unique_frames = TM_RELAY_MAX_UNIQUE_FRAMES;
        out->max_path_segments = TM_RELAY_MAX_PATH_SEGMENTS;
        out->max_inflated_bytes = TM_RELAY_MAX_INFLATED_BYTES;
        out->max_interned_entries = TM_RELAY_MAX_INTERNED;
        out->max_chunk_duration_ns = TM_RELAY_MAX_CHUNK_NS;
        out->max_work_bytes = TM_RELAY_MAX_WORK_BYTES;
        out->max_result_bytes = TM_RELAY_MAX_RESULT_BYTES;
        out->max_input_bytes = TM_RELAY_MAX_INPUT_BYTES;
    } else {
        out->max_samples = TM_CLI_MAX_SAMPLES;
        out->max_stack_depth = TM_CLI_MAX_STACK_DEPTH;
        out->max_sequences = TM_CLI_MAX_SEQUENCES;
        out->max_packet_bytes = TM_CLI_MAX_PACKET_BYTES;
        out->max_unique_frames = TM_CLI_MAX_UNIQUE_FRAMES;
        out->max_path_segments = TM_CLI_MAX_PATH_SEGMENTS;
        out->max_inflated_bytes = TM_CLI_MAX_INFLATED_BYTES;
        out->max_interned_entries = TM_CLI_MAX_INTERNED;
        out->max_chunk_duration_ns = TM_CLI_MAX_CHUNK_NS;
        out->max_work_bytes = TM_CLI_MAX_WORK_BYTES;
        out->max_result_bytes = TM_CLI_MAX_RESULT_BYTES;
        out->max_input_bytes = TM_CLI_MAX_INPUT_BYTES;
    }
}

void tm_limits_resolve(const tm_options *o, tm_limits *out) {
    tm_limits_preset(o->mode == TM_MODE_RELAY ? TM_LIMITS_RELAY : o->preset, out);
    const uint64_t *src = (const uint64_t *)&o->limits;
    uint64_t *dst = (uint64_t *)out;
    for (size_t i = 0; i < offsetof(tm_limits, reserved_) / sizeof(uint64_t); i++)
        if (src[i]) dst[i] = src[i];
}

static tm_status decode_perfetto(tm_trace *t, const uint8_t *buf, size_t len, const tm_options *opts,
                                 tm_error *err) {
    dec d;
    memset(&d, 0, sizeof d);
    d.t = t;
    d.p = &t->profile;
    d.work = t->mem;
    tm_mem_set_budget(&d.work, &d.work_budget, t->limits.max_work_bytes);
    d.mem = &d.work;
    d.lim = &t->limits;
    d.relay = opts->mode == TM_MODE_RELAY;
    d.err = err;
    d.last_thread = TM_ABSENT;
    tm_pf_reader_init(&d.rd, buf, len, d.mem, &t->arena, d.lim,
                      (d.relay ? TM_PF_RELAY : 0) | (opts->strict ? TM_PF_STRICT : 0), err);
    tm_pf_heap_init(&d.heap, d.mem);
    /* A sample costs ~16 bytes of trace or more in the common encodings:
     * reserving len/16 up front (at most 2^24 samples, 256 MiB) avoids most
     * regrowth copies without claiming memory a huge trace may not need. */
    tm_status st = TM_OK;
    size_t reserve = len / 16 < ((size_t)1 << 24) ? len / 16 : (size_t)1 << 24;
    if (reserve > t->limits.max_samples) reserve = (size_t)t->limits.max_samples;
    if (reserve > 1024 && TM_VEC_RESERVE(&t->mem, t->profile.samples, t->profile.cap_samples, reserve) != TM_OK)
        st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    /* Likewise a unique frame, with its name, takes ~256 bytes or more:
     * reserving len/256 spares the copies of regrowing the frames from 16. */
    size_t frames = len / 256 < ((size_t)1 << 16) ? len / 256 : (size_t)1 << 16;
    if (st == TM_OK && frames > 64 &&
        TM_VEC_RESERVE(&t->mem, t->profile.frames, t->profile.cap_frames, frames) != TM_OK)
        st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    if (st == TM_OK) st = decode_trace(&d);
    if (st == TM_OK) st = finish(&d);
    if (st == TM_ERR_NOMEM && tm_budget_exceeded(&d.work_budget))
        st = dfail(&d, TM_ERR_LIMIT, d.rd.packet_tag,
                   "memory budget exceeded: the decode's working tables need more than %llu bytes (max_work_bytes)",
                   (unsigned long long)t->limits.max_work_bytes);
    if (st == TM_ERR_NOMEM && tm_budget_exceeded(&t->result_budget))
        st = dfail(&d, TM_ERR_LIMIT, d.rd.packet_tag,
                   "memory budget exceeded: the profile needs more than %llu bytes (max_result_bytes)",
                   (unsigned long long)t->limits.max_result_bytes);
    dec_release(&d);
    return st;
}

tm_status tm_trace_budget_status(const tm_trace *t, tm_status st, tm_error *err) {
    if (st != TM_ERR_NOMEM || !tm_budget_exceeded(&t->result_budget)) return st;
    return tm_fail(err, TM_ERR_LIMIT, 0, t->profile.relay_compat ? "ExceedSizeLimit" : NULL,
                   "memory budget exceeded: the profile and its conversion need more than %llu bytes "
                   "(max_result_bytes)",
                   (unsigned long long)t->limits.max_result_bytes);
}

tm_status tm_trace_parse(const void *buf, size_t len, const tm_options *opts, tm_trace **out,
                         tm_error *err) {
    static const tm_options defaults;
    if (out) *out = NULL;
    if (!opts) opts = &defaults;
    if (!out || (!buf && len))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_trace_parse: NULL %s", out ? "buffer" : "out");
    TM_TRY(tm_check_options(opts, err));
    tm_mem mem;
    tm_mem_init(&mem, opts->alloc);
    tm_trace *t = tm_mem_alloc(&mem, sizeof *t);
    if (!t) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    memset(t, 0, sizeof *t);
    t->mem = mem;
    tm_limits_resolve(opts, &t->limits);
    tm_mem_set_budget(&t->mem, &t->result_budget, t->limits.max_result_bytes);
    tm_arena_init(&t->arena, &t->mem);
    tm_profile_init(&t->profile, &t->mem, &t->arena);
    t->profile.relay_compat = opts->mode == TM_MODE_RELAY;
    t->profile.label_lines = !opts->no_source_lines;
    t->profile.max_unique_frames = t->limits.max_unique_frames;
    t->profile.max_chunk_duration_ns = t->limits.max_chunk_duration_ns;
    t->profile.stats.bytes = len;

    tm_status st = tm_input_open(&t->mem, buf, len, &t->limits, opts->mode == TM_MODE_RELAY, &t->source, err);
    tm_input_format fmt = TM_INPUT_AUTO;
    if (st == TM_OK) {
        buf = t->source.bytes.data, len = t->source.bytes.len;
        if (t->source.copy) t->profile.stats.bytes_decompressed = len;
        fmt = opts->input == TM_INPUT_AUTO ? tm_input_detect(buf, len) : opts->input;
        if (fmt != TM_INPUT_PERFETTO && opts->mode == TM_MODE_RELAY)
            st = tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "Relay compatibility applies to Perfetto traces, not %s input",
                         tm_input_format_name(fmt));
    }
    t->input = fmt;
    if (st != TM_OK) {
    } else if (fmt == TM_INPUT_SAMPLE_V2) st = tm_sample_v2_read(t, buf, len, err);
    else if (fmt == TM_INPUT_SAMPLE_V1) st = tm_sample_v1_read(t, buf, len, err);
    else if (fmt == TM_INPUT_FOLDED) st = tm_folded_read(t, buf, len, err);
    else st = decode_perfetto(t, buf, len, opts, err);
    if (fmt != TM_INPUT_PERFETTO) st = tm_trace_budget_status(t, st, err);
    if (st != TM_OK) {
        tm_trace_free(t);
        return st;
    }
    tm_profile_count_threads(&t->profile);
    *out = t;
    return TM_OK;
}

void tm_trace_free(tm_trace *t) {
    if (!t) return;
    tm_mem mem = t->mem;
    mem.budget = NULL; /* it lives in *t, freed last */
    tm_profile_release(&t->profile);
    tm_arena_release(&t->arena);
    tm_input_close(&mem, &t->source);
    tm_mem_free(&mem, t, sizeof *t);
}

const tm_trace_stats *tm_trace_get_stats(const tm_trace *t) { return t ? &t->profile.stats : NULL; }

tm_input_format tm_trace_input_format(const tm_trace *t) { return t ? t->input : TM_INPUT_AUTO; }

const tm_profile *tm_trace_profile(const tm_trace *t) { return &t->profile; }

size_t tm_trace_thread_count(const tm_trace *t) { return t ? t->profile.n_threads : 0; }

tm_status tm_trace_thread(const tm_trace *t, size_t i, tm_thread_info *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!t || !out || i >= t->profile.n_threads)
        return TM_ERR_INVALID_ARG;
    const tm_prof_thread *th = &t->profile.threads[i];
    out->tid = th->tid;
    out->pid = th->pid;
    out->name = th->name.len ? (const char *)th->name.data : NULL;
    out->name_len = th->name.len;
    out->samples = th->weight;
    return TM_OK;
}

size_t tm_trace_sample_count(const tm_trace *t) { return t ? t->profile.n_samples : 0; }

tm_status tm_trace_sample(const tm_trace *t, size_t i, tm_sample_info *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!t || !out || i >= t->profile.n_samples) return TM_ERR_INVALID_ARG;
    const tm_prof_sample *s = &t->profile.samples[i];
    out->ts = s->ts;
    out->weight = tm_profile_weight(&t->profile, i);
    out->thread = s->thread;
    out->stack = s->stack;
    return TM_OK;
}

size_t tm_trace_stack_count(const tm_trace *t) { return t ? t->profile.n_stacks : 0; }

tm_status tm_trace_stack(const tm_trace *t, size_t i, const uint32_t **frames, size_t *n) {
    if (!t || !frames || !n || i >= t->profile.n_stacks) return TM_ERR_INVALID_ARG;
    const tm_prof_stack *s = &t->profile.stacks[i];
    *frames = tm_profile_stack_frames(&t->profile, s);
    *n = s->len;
    return TM_OK;
}

size_t tm_trace_frame_count(const tm_trace *t) { return t ? t->profile.n_frames : 0; }

tm_status tm_trace_frame_label(const tm_trace *t, size_t i, char *buf, size_t cap, size_t *len) {
    if (!t || (!buf && cap) || !len || i >= t->profile.n_frames) return TM_ERR_INVALID_ARG;
    *len = tm_frame_label_format(&t->profile, (uint32_t)i, buf, cap);
    return TM_OK;
}

/* ---- input formats ---- */

static int is_blank(uint8_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Folded stacks: the first line that is neither blank nor a '#' comment is
 * printable UTF-8 text ending in a count (tm_folded_looks_like_sample). */
static int looks_folded(const uint8_t *p, size_t len) {
    size_t start = 0;
    for (;;) {
        size_t end = start;
        while (end < len && p[end] != '\n') {
            if (p[end] < 0x20 && p[end] != '\t' && p[end] != '\r') return 0;
            end++;
        }
        size_t n = end;
        while (n > start && (p[n - 1] == '\r' || p[n - 1] == ' ' || p[n - 1] == '\t')) n--;
        while (start < n && (p[start] == ' ' || p[start] == '\t')) start++;
        if (n > start && p[start] != '#') {
            tm_str line = {p + start, n - start};
            return tm_utf8_valid(line) && tm_folded_looks_like_sample(line);
        }
        if (end >= len) return 0;
        start = end + 1;
    }
}

/* The first key of the first element of profile.samples in the object
 * the reader is inside (its '{' read): "elapsed_since_start_ns" means
 * Sample v1, "timestamp" v2; 0 when neither decides. */
static tm_input_format first_sample_key(tm_json_reader *j) {
    tm_json_token tok;
    while (tm_json_next(j, &tok) == TM_JSON_KEY) {
        int samples = tm_json_eq(&tok, "samples");
        if (tm_json_next(j, &tok) == TM_JSON_ERROR) return TM_INPUT_AUTO;
        if (!samples || tok.type != TM_JSON_ARRAY) {
            if (!tm_json_skip(j, &tok)) return TM_INPUT_AUTO;
            continue;
        }
        if (tm_json_next(j, &tok) != TM_JSON_OBJECT) return TM_INPUT_AUTO;
        while (tm_json_next(j, &tok) == TM_JSON_KEY) {
            if (tm_json_eq(&tok, "elapsed_since_start_ns")) return TM_INPUT_SAMPLE_V1;
            if (tm_json_eq(&tok, "timestamp")) return TM_INPUT_SAMPLE_V2;
            if (tm_json_next(j, &tok) == TM_JSON_ERROR || !tm_json_skip(j, &tok)) return TM_INPUT_AUTO;
        }
        return TM_INPUT_AUTO;
    }
    return TM_INPUT_AUTO;
}

/* Sentry JSON: the top-level "version" decides ("1" is a transaction
 * profile); before one, the first sample's time key does (samples_too).
 * Anything else, malformed JSON included, goes to the Sample v2 reader,
 * which says what is wrong. The walk stops at the first decision: both
 * writers put "version" before "profile". */
static tm_input_format sentry_version(const uint8_t *p, size_t len, int samples_too) {
    tm_json_reader j;
    tm_json_token tok;
    tm_json_reader_init(&j, p, len);
    if (tm_json_next(&j, &tok) != TM_JSON_OBJECT) return TM_INPUT_SAMPLE_V2;
    while (tm_json_next(&j, &tok) == TM_JSON_KEY) {
        int version = tm_json_eq(&tok, "version"), profile = samples_too && tm_json_eq(&tok, "profile");
        if (tm_json_next(&j, &tok) == TM_JSON_ERROR) break;
        if (version)
            return tok.type == TM_JSON_STRING && tm_json_eq(&tok, "1") ? TM_INPUT_SAMPLE_V1 : TM_INPUT_SAMPLE_V2;
        if (profile && tok.type == TM_JSON_OBJECT) {
            tm_input_format f = first_sample_key(&j);
            /* No sample to tell: look for a version past the profile. */
            return f != TM_INPUT_AUTO ? f : sentry_version(p, len, 0);
        }
        if (!tm_json_skip(&j, &tok)) break;
    }
    return TM_INPUT_SAMPLE_V2;
}

tm_input_format tm_input_detect(const void *buf, size_t len) {
    const uint8_t *p = buf;
    if (!p || !len || p[0] == 0x0a) return TM_INPUT_PERFETTO;
    size_t bom = tm_utf8_bom_len(p, len);
    p += bom, len -= bom;
    size_t i = 0;
    while (i < len && is_blank(p[i])) i++;
    if (i < len && p[i] == '{') return sentry_version(p, len, 1);
    if (looks_folded(p, len)) return TM_INPUT_FOLDED;
    return TM_INPUT_PERFETTO;
}

const char *tm_input_format_name(tm_input_format f) {
    switch (f) {
    case TM_INPUT_PERFETTO: return "perfetto";
    case TM_INPUT_SAMPLE_V2: return "sample-v2";
    case TM_INPUT_FOLDED: return "folded";
    case TM_INPUT_SAMPLE_V1: return "sample-v1";
    case TM_INPUT_AUTO: break;
    }
    return NULL;
}
