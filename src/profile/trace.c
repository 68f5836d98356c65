/*
 * trace.c — decodes a Perfetto trace (protos/perfetto/trace/trace_packet.proto
 * and profiling/profile_common.proto; field numbers in perfetto-wire.md §1)
 * into the profile model, streaming packet by packet over the caller's
 * buffer: no message tree is ever built.
 *
 * Two explicit paths share the wire reader and the profile model:
 *  - default mode follows Trace Processor: each trusted_packet_sequence_id
 *    has its own intern tables (function_names, mapping_paths, build_ids,
 *    frames, callstacks, mappings), valid only after
 *    SEQ_INCREMENTAL_STATE_CLEARED; after previous_packet_dropped, packets
 *    flagged SEQ_NEEDS_INCREMENTAL_STATE are skipped (and counted) until the
 *    next clear; the first interned entry of an iid wins; PerfSample,
 *    StreamingProfilePacket and (v58) StackSample samples are resolved
 *    when read; clocks go through the snapshot graph (clock.c) once the
 *    whole trace is read.
 *  - TM_MODE_RELAY reproduces Sentry Relay's converter (relay-sample-v2.md
 *    §2): PerfSample only, later entries overwrite, no loss handling,
 *    unresolvable frames skipped, the first BOOTTIME/REALTIME snapshot.
 *
 * Resolution results (profile stack, frame and mapping per iid) are cached
 * per sequence and dropped by a clear (or, in Relay mode, by any
 * interned-data merge); a sample whose callstack was seen before costs one
 * array load.
 */
#include <stdarg.h>
#include <stdio.h>

#include "wire/inflate.h" /* tm_inflate */
#include "common/limits.h"
#include "wire/pb.h"      /* tm_pb_reader, tm_pb_next */
#include "profile/trace.h"   /* struct tm_trace */

enum { SEQ_CLEARED = 1, SEQ_NEEDS = 2 };
enum { STR_FUNCTION = 0, STR_PATH = 1, STR_BUILD_ID = 2, N_STR_KINDS = 3 };
enum { F_HAS_FN = 1, F_HAS_MAPPING = 2, F_HAS_REL_PC = 4 };
enum { M_HAS_BUILD = 1, M_HAS_LOAD_BIAS = 2 };

/* Thread and process name priorities (Trace Processor's, §2.7). */
enum { PRIO_PROCESS_TREE = 2, PRIO_TRACK_DESCRIPTOR = 4 };

typedef struct ent_frame {
    uint64_t fn, mapping, rel_pc;
    uint32_t flags;
} ent_frame;

typedef struct ent_mapping {
    tm_bytes msg; /* for path_string_ids */
    uint64_t build, start, end, load_bias, start_offset, exact_offset;
    uint32_t flags;
} ent_mapping;

typedef struct ent_callstack {
    tm_bytes msg; /* for frame_ids */
} ent_callstack;

/* StackSample's TaskContext (interned or inline); async_id is not kept:
 * the profile model has threads, not async tasks. */
typedef struct ent_task {
    uint32_t pid, tid;
    bool has_tid;
} ent_task;

typedef struct seq_state {
    uint64_t id;
    tm_iidmap str_map[N_STR_KINDS];
    tm_bytes *strs[N_STR_KINDS];
    size_t n_strs[N_STR_KINDS], cap_strs[N_STR_KINDS];
    tm_iidmap frame_map;    ent_frame *frames;    size_t n_frames, cap_frames;
    tm_iidmap mapping_map;  ent_mapping *mappings; size_t n_mappings, cap_mappings;
    tm_iidmap cs_map;       ent_callstack *css;   size_t n_css, cap_css;
    tm_iidmap task_map;     ent_task *tasks;      size_t n_tasks, cap_tasks;
    tm_iidmap stack_by_iid; /* callstack iid -> resolved profile stack, this generation */
    tm_iidmap frame_by_iid; /* frame iid -> resolved profile frame, this generation */
    tm_iidmap mapping_by_iid; /* mapping iid -> resolved profile mapping, this generation */
    uint64_t n_interned;
    bool seen, valid, had_loss, has_thread, has_ref_time;
    uint32_t default_clock;
    int64_t pid, tid;
    int64_t time_ns; /* legacy track-event time (MONOTONIC), StreamingProfilePacket base */
} seq_state;

typedef struct clock_run {
    size_t first;    /* first sample index */
    uint64_t clock;  /* 0: already trace time */
    int keep_raw;    /* keep unconvertible timestamps (StreamingProfilePacket) */
    int anchored;    /* one StreamingProfilePacket: convert its base, then add deltas */
    int64_t anchor;  /* that base, in `clock` */
} clock_run;

typedef struct clock_info {
    uint64_t key, mult;
    int incremental;
    int64_t last;
} clock_info;

typedef struct pkt {
    const uint8_t *start;
    uint64_t ts, seq, dropped;
    uint32_t clock_id, flags;
    bool has_ts, has_seq, legacy_cleared, zstd;
    tm_bytes interned, defaults, snapshot, ptree, pdesc, tdesc, track, compressed, streaming, perf, stack;
    tm_bytes trace_stats;
} pkt;

typedef struct dec {
    tm_trace *t;
    tm_profile *p;
    tm_mem *mem;          /* the working tables', counted against work_budget */
    tm_mem work;
    tm_budget work_budget;
    const uint8_t *packet_at; /* the top-level packet being decoded */
    const tm_limits *lim;
    int relay;
    tm_error *err;
    const uint8_t *base;  /* the input buffer */
    int inflated;         /* decoding packets from a compressed_packets payload */
    uint64_t wrapper_off; /* offset of that compressed packet */

    seq_state **seqs; size_t n_seqs, cap_seqs;
    tm_u64map seq_map;
    seq_state *last_seq;

    uint64_t *cs_scratch; size_t cap_cs;
    int64_t *delta_scratch; size_t cap_delta;
    uint32_t *frame_scratch; size_t cap_fs;

    clock_run *runs; size_t n_runs, cap_runs;
    clock_info clocks[TM_MAX_CLOCKS]; size_t n_clocks;
    uint64_t latest_ts;
    int64_t last_tid; uint32_t last_thread; /* one-entry cache: samples come in runs per thread */
    uint64_t relay_samples;
    uint64_t relay_boot, relay_real;
    /* StackSample counters that tm_trace_stats has no field for yet; until
     * it does they only feed max_samples. */
} dec;

/* ---- errors ---- */

static uint64_t off_of(const dec *d, const uint8_t *at) {
    return d->inflated ? d->wrapper_off : (uint64_t)(at - d->base);
}

static tm_status dfail(dec *d, tm_status code, const uint8_t *at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

static tm_status dfail(dec *d, tm_status code, const uint8_t *at, const char *fmt, ...) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *reason = NULL;
    if (d->relay && code != TM_ERR_NOMEM)
        reason = code == TM_ERR_LIMIT ? "ExceedSizeLimit" : "InvalidSampledProfile";
    uint64_t off = at ? off_of(d, at) : 0;
    return tm_fail(d->err, code, off, reason, "%s%s", msg,
                   d->inflated ? " (inside the compressed packet at this offset)" : "");
}

static tm_status nomem(dec *d) { return dfail(d, TM_ERR_NOMEM, NULL, "out of memory"); }

#define DTRY_MEM(d, expr)                            \
    do {                                             \
        if ((expr) != TM_OK) return nomem(d);        \
    } while (0)

static tm_status pb_error(dec *d, const tm_pb_reader *r, const char *where) {
    return dfail(d, r->err_code, r->p, "%s: %s", where, r->err);
}

static tm_status wire_error(dec *d, const tm_pb_field *f, const char *msg_name) {
    return dfail(d, TM_ERR_MALFORMED, f->start, "%s field %u has wire type %u, which its type does not allow",
                 msg_name, f->num, f->wire);
}

/* Checks a scalar field's wire type. */
#define WANT(d, f, w, name) \
    do {                    \
        if ((f).wire != (w)) return wire_error((d), &(f), (name)); \
    } while (0)

/* ---- sequences ---- */

static void seq_free(tm_mem *m, seq_state *s) {
    for (int k = 0; k < N_STR_KINDS; k++) {
        tm_iidmap_free(m, &s->str_map[k]);
        tm_mem_free(m, s->strs[k], s->cap_strs[k] * sizeof *s->strs[k]);
    }
    tm_iidmap_free(m, &s->frame_map);
    tm_iidmap_free(m, &s->mapping_map);
    tm_iidmap_free(m, &s->cs_map);
    tm_iidmap_free(m, &s->task_map);
    tm_mem_free(m, s->frames, s->cap_frames * sizeof *s->frames);
    tm_mem_free(m, s->mappings, s->cap_mappings * sizeof *s->mappings);
    tm_mem_free(m, s->css, s->cap_css * sizeof *s->css);
    tm_mem_free(m, s->tasks, s->cap_tasks * sizeof *s->tasks);
    tm_iidmap_free(m, &s->stack_by_iid);
    tm_iidmap_free(m, &s->frame_by_iid);
    tm_iidmap_free(m, &s->mapping_by_iid);
    tm_mem_free(m, s, sizeof *s);
}

/* Drops what was resolved from the tables: after a clear, and in Relay
 * mode after any merge, which may replace entries. */
static void seq_forget_resolved(tm_mem *m, seq_state *s) {
    tm_iidmap_clear(m, &s->stack_by_iid);
    tm_iidmap_clear(m, &s->frame_by_iid);
    tm_iidmap_clear(m, &s->mapping_by_iid);
}

static void seq_clear_tables(tm_mem *m, seq_state *s) {
    for (int k = 0; k < N_STR_KINDS; k++) {
        tm_iidmap_clear(m, &s->str_map[k]);
        s->n_strs[k] = 0;
    }
    tm_iidmap_clear(m, &s->frame_map);
    tm_iidmap_clear(m, &s->mapping_map);
    tm_iidmap_clear(m, &s->cs_map);
    tm_iidmap_clear(m, &s->task_map);
    s->n_frames = s->n_mappings = s->n_css = s->n_tasks = 0;
    s->n_interned = 0;
    seq_forget_resolved(m, s);
}

static tm_status get_seq(dec *d, uint64_t id, const uint8_t *at, seq_state **out) {
    if (d->last_seq && d->last_seq->id == id) {
        *out = d->last_seq;
        return TM_OK;
    }
    uint32_t idx = tm_u64map_get(&d->seq_map, id);
    if (idx == TM_ABSENT) {
        if (d->n_seqs >= d->lim->max_sequences)
            return dfail(d, TM_ERR_LIMIT, at, "more than %llu packet sequences (max_sequences)",
                         (unsigned long long)d->lim->max_sequences);
        DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->seqs, d->cap_seqs, d->n_seqs + 1));
        seq_state *s = tm_mem_alloc(d->mem, sizeof *s);
        if (!s) return nomem(d);
        memset(s, 0, sizeof *s);
        s->id = id;
        idx = (uint32_t)d->n_seqs;
        if (tm_u64map_put(d->mem, &d->seq_map, id, idx) != TM_OK) {
            tm_mem_free(d->mem, s, sizeof *s);
            return nomem(d);
        }
        d->seqs[d->n_seqs++] = s;
        d->p->stats.sequences++;
    }
    *out = d->last_seq = d->seqs[idx];
    return TM_OK;
}

/* Finds or creates the slot for iid in one intern table. Returns the slot
 * index in *slot, or TM_ABSENT when an existing entry must be kept (the
 * first entry wins outside Relay mode). */
static tm_status intern_slot(dec *d, seq_state *s, tm_iidmap *map, void **vec, size_t *n,
                             size_t *cap, size_t elem, uint64_t iid, const uint8_t *at,
                             uint32_t *slot) {
    uint32_t idx = tm_iidmap_get(map, iid);
    if (idx != TM_ABSENT) {
        *slot = d->relay ? idx : TM_ABSENT;
        return TM_OK;
    }
    if (++s->n_interned > d->lim->max_interned_entries)
        return dfail(d, TM_ERR_LIMIT, at, "more than %llu interned entries on sequence %llu",
                     (unsigned long long)d->lim->max_interned_entries, (unsigned long long)s->id);
    DTRY_MEM(d, tm_vec_grow(d->mem, vec, cap, elem, *n + 1));
    idx = (uint32_t)*n;
    DTRY_MEM(d, tm_iidmap_put(d->mem, map, iid, idx, *n + 1));
    (*n)++;
    *slot = idx;
    return TM_OK;
}

#define INTERN_SLOT(d, s, map, vec, n, cap, iid, at, slot) \
    intern_slot((d), (s), &(map), (void **)&(vec), &(n), &(cap), sizeof *(vec), (iid), (at), (slot))

/* ---- interned data ---- */

static tm_status merge_string(dec *d, seq_state *s, int kind, tm_bytes msg, const uint8_t *at) {
    static const char *const names[N_STR_KINDS] = {"function_names", "mapping_paths", "build_ids"};
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    uint64_t iid = 0;
    tm_bytes str = {msg.data, 0};
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == 1) { WANT(d, f, TM_PB_VARINT, names[kind]); iid = f.val; }
        else if (f.num == 2) { WANT(d, f, TM_PB_LEN, names[kind]); str = f.bytes; }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, names[kind]);
    if (iid == 0) return TM_OK;
    if (d->relay && kind != STR_BUILD_ID && !tm_utf8_valid(str)) return TM_OK;
    uint32_t slot;
    TM_TRY(INTERN_SLOT(d, s, s->str_map[kind], s->strs[kind], s->n_strs[kind], s->cap_strs[kind], iid,
                       at, &slot));
    if (slot != TM_ABSENT) s->strs[kind][slot] = str;
    return TM_OK;
}

/* Counts the varints of a repeated scalar field's occurrences in msg,
 * packed or not, validating them. */
static tm_status count_repeated(dec *d, tm_bytes msg, uint32_t num, const char *name, uint64_t *n) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    *n = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != num) continue;
        if (f.wire == TM_PB_VARINT) (*n)++;
        else if (f.wire == TM_PB_LEN) {
            tm_pb_reader pr = tm_pb_reader_of(f.bytes);
            uint64_t v;
            int prc;
            while ((prc = tm_pb_packed_next(&pr, &v)) == TM_PB_OK) (*n)++;
            if (prc == TM_PB_ERROR) return pb_error(d, &pr, name);
        } else return wire_error(d, &f, name);
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, name);
    return TM_OK;
}

static tm_status merge_frame(dec *d, seq_state *s, tm_bytes msg, const uint8_t *at) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    ent_frame e = {0, 0, 0, 0};
    uint64_t iid = 0;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case 1: WANT(d, f, TM_PB_VARINT, "Frame"); iid = f.val; break;
        case 2: WANT(d, f, TM_PB_VARINT, "Frame"); e.fn = f.val; e.flags |= F_HAS_FN; break;
        case 3: WANT(d, f, TM_PB_VARINT, "Frame"); e.mapping = f.val; e.flags |= F_HAS_MAPPING; break;
        case 4: WANT(d, f, TM_PB_VARINT, "Frame"); e.rel_pc = f.val; e.flags |= F_HAS_REL_PC; break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "Frame");
    if (iid == 0) return TM_OK;
    uint32_t slot;
    TM_TRY(INTERN_SLOT(d, s, s->frame_map, s->frames, s->n_frames, s->cap_frames, iid, at, &slot));
    if (slot != TM_ABSENT) s->frames[slot] = e;
    return TM_OK;
}

static tm_status merge_mapping(dec *d, seq_state *s, tm_bytes msg, const uint8_t *at) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    ent_mapping e;
    memset(&e, 0, sizeof e);
    e.msg = msg;
    uint64_t iid = 0;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num >= 1 && f.num <= 8 && f.num != 7) WANT(d, f, TM_PB_VARINT, "Mapping");
        switch (f.num) {
        case 1: iid = f.val; break;
        case 2: e.build = f.val; e.flags |= M_HAS_BUILD; break;
        case 3: e.start_offset = f.val; break;
        case 4: e.start = f.val; break;
        case 5: e.end = f.val; break;
        case 6: e.load_bias = f.val; e.flags |= M_HAS_LOAD_BIAS; break;
        case 8: e.exact_offset = f.val; break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "Mapping");
    uint64_t segs;
    TM_TRY(count_repeated(d, msg, 7, "Mapping.path_string_ids", &segs));
    if (segs > d->lim->max_path_segments)
        return dfail(d, TM_ERR_LIMIT, at, "mapping has %llu path segments (max_path_segments %llu)",
                     (unsigned long long)segs, (unsigned long long)d->lim->max_path_segments);
    if (iid == 0) return TM_OK;
    uint32_t slot;
    TM_TRY(INTERN_SLOT(d, s, s->mapping_map, s->mappings, s->n_mappings, s->cap_mappings, iid, at, &slot));
    if (slot != TM_ABSENT) s->mappings[slot] = e;
    return TM_OK;
}

static tm_status merge_callstack(dec *d, seq_state *s, tm_bytes msg, const uint8_t *at) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    uint64_t iid = 0;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK)
        if (f.num == 1) { WANT(d, f, TM_PB_VARINT, "Callstack"); iid = f.val; }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "Callstack");
    uint64_t n;
    TM_TRY(count_repeated(d, msg, 2, "Callstack.frame_ids", &n));
    if (n > d->lim->max_stack_depth)
        return dfail(d, TM_ERR_LIMIT, at, "callstack %llu has %llu frames (max_stack_depth %llu)",
                     (unsigned long long)iid, (unsigned long long)n,
                     (unsigned long long)d->lim->max_stack_depth);
    if (iid == 0) return TM_OK;
    uint32_t slot;
    TM_TRY(INTERN_SLOT(d, s, s->cs_map, s->css, s->n_css, s->cap_css, iid, at, &slot));
    if (slot != TM_ABSENT) s->css[slot].msg = msg;
    return TM_OK;
}

/* StackSample.TaskContext { iid=1; uint32 pid=2; uint32 tid=3; uint64 async_id=4; } */
static tm_status parse_task_context(dec *d, tm_bytes msg, ent_task *e, uint64_t *iid) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    memset(e, 0, sizeof *e);
    *iid = 0;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num >= 1 && f.num <= 4) WANT(d, f, TM_PB_VARINT, "TaskContext");
        if (f.num == 1) *iid = f.val;
        else if (f.num == 2) e->pid = (uint32_t)f.val;
        else if (f.num == 3) e->tid = (uint32_t)f.val, e->has_tid = true;
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "TaskContext");
    return TM_OK;
}

static tm_status merge_task_context(dec *d, seq_state *s, tm_bytes msg, const uint8_t *at) {
    ent_task e;
    uint64_t iid;
    TM_TRY(parse_task_context(d, msg, &e, &iid));
    if (iid == 0) return TM_OK;
    uint32_t slot;
    TM_TRY(INTERN_SLOT(d, s, s->task_map, s->tasks, s->n_tasks, s->cap_tasks, iid, at, &slot));
    if (slot != TM_ABSENT) s->tasks[slot] = e;
    return TM_OK;
}

static tm_status merge_interned(dec *d, seq_state *s, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        int kind = -1;
        switch (f.num) {
        case 5: kind = STR_FUNCTION; break;
        case 17: kind = STR_PATH; break;
        case 16: kind = STR_BUILD_ID; break;
        case 6: case 7: case 19: break;
        case 48: if (d->relay) continue; break; /* stack_sample_task_contexts: not in Relay's schema */
        default: continue;
        }
        WANT(d, f, TM_PB_LEN, "InternedData");
        if (kind >= 0) TM_TRY(merge_string(d, s, kind, f.bytes, f.start));
        else if (f.num == 6) TM_TRY(merge_frame(d, s, f.bytes, f.start));
        else if (f.num == 7) TM_TRY(merge_callstack(d, s, f.bytes, f.start));
        else if (f.num == 48) TM_TRY(merge_task_context(d, s, f.bytes, f.start));
        else TM_TRY(merge_mapping(d, s, f.bytes, f.start));
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "InternedData");
    if (d->relay) seq_forget_resolved(d->mem, s); /* later entries may have replaced earlier ones */
    return TM_OK;
}

/* ---- resolution: interned ids -> profile model ---- */

static const tm_bytes *lookup_str(const seq_state *s, int kind, uint64_t iid) {
    uint32_t idx = tm_iidmap_get(&s->str_map[kind], iid);
    return idx == TM_ABSENT ? NULL : &s->strs[kind][idx];
}

/* Joins the resolvable path segments of a mapping with '/'. Relay skips
 * unresolvable ids; Trace Processor stops at the first one. */
static tm_status mapping_path(dec *d, const seq_state *s, tm_bytes msg, tm_str *out) {
    tm_bytes segs[64];
    size_t n = 0, total = 0;
    tm_bytes *many = NULL;
    size_t cap_many = 0;
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int stop = 0;
    tm_status st = TM_OK;
    while (!stop && st == TM_OK && tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.num != 7) continue;
        int packed = f.wire == TM_PB_LEN;
        tm_bytes none = {NULL, 0};
        tm_pb_reader pr = tm_pb_reader_of(packed ? f.bytes : none); /* bytes is unset for varints */
        uint64_t id = f.val;
        while (!stop && (!packed || tm_pb_packed_next(&pr, &id) == TM_PB_OK)) {
            const tm_bytes *seg = lookup_str(s, STR_PATH, id);
            if (!seg) {
                if (!d->relay) stop = 1;
            } else {
                if (n < 64) segs[n] = *seg;
                else {
                    if (TM_VEC_RESERVE(d->mem, many, cap_many, n + 1) != TM_OK) { st = TM_ERR_NOMEM; break; }
                    if (n == 64) memcpy(many, segs, sizeof segs);
                    many[n] = *seg;
                }
                total += seg->len + 1;
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

static tm_status resolve_mapping(dec *d, seq_state *s, uint64_t iid, const ent_mapping *e, uint32_t *out) {
    uint32_t cached = tm_iidmap_get(&s->mapping_by_iid, iid);
    if (cached != TM_ABSENT) {
        *out = cached;
        return TM_OK;
    }
    tm_prof_mapping m;
    memset(&m, 0, sizeof m);
    TM_TRY(mapping_path(d, s, e->msg, &m.path));
    if ((e->flags & M_HAS_BUILD) && e->build) {
        const tm_bytes *b = lookup_str(s, STR_BUILD_ID, e->build);
        if (b) m.build_id = *b;
    }
    m.start = e->start;
    m.end = e->end;
    m.load_bias = e->load_bias;
    m.start_offset = e->start_offset;
    m.exact_offset = e->exact_offset;
    if (e->flags & M_HAS_LOAD_BIAS) m.flags |= TM_MAPPING_HAS_LOAD_BIAS;
    if (m.path.len && tm_path_is_java(m.path)) m.flags |= TM_MAPPING_JAVA;
    DTRY_MEM(d, tm_profile_intern_mapping(d->p, &m, out));
    DTRY_MEM(d, tm_iidmap_put(d->mem, &s->mapping_by_iid, iid, *out, s->n_mappings));
    return TM_OK;
}

/* Adds a frame to the profile, within max_unique_frames. */
static tm_status intern_frame(dec *d, const tm_prof_frame *pf, const uint8_t *at, uint32_t *out) {
    if (tm_profile_intern_frame(d->p, pf, out) == TM_OK) return TM_OK;
    if (d->p->n_frames >= d->p->max_unique_frames)
        return dfail(d, TM_ERR_LIMIT, at, "more than %llu unique frames (max_unique_frames)",
                     (unsigned long long)d->p->max_unique_frames);
    return nomem(d);
}

/* Resolves a frame iid; *ok = 0 when it cannot be (the caller decides
 * whether that drops the stack or only the frame). */
static tm_status resolve_frame(dec *d, seq_state *s, uint64_t iid, const uint8_t *at, uint32_t *out,
                               int *ok) {
    uint32_t cached = tm_iidmap_get(&s->frame_by_iid, iid);
    if (cached != TM_ABSENT) {
        *out = cached;
        *ok = 1;
        return TM_OK;
    }
    uint32_t idx = tm_iidmap_get(&s->frame_map, iid);
    *ok = 0;
    if (idx == TM_ABSENT) return TM_OK;
    const ent_frame *e = &s->frames[idx];
    tm_prof_frame pf;
    memset(&pf, 0, sizeof pf);
    tm_str name = {NULL, 0};
    int has_name = 0;
    if ((e->flags & F_HAS_FN) && (e->fn || d->relay)) {
        const tm_bytes *nm = lookup_str(s, STR_FUNCTION, e->fn);
        if (nm) name = *nm, has_name = 1;
        else if (!d->relay) return TM_OK;
    }
    const tm_prof_mapping *pm = NULL;
    if ((e->flags & F_HAS_MAPPING) && (e->mapping || d->relay)) {
        uint32_t midx = tm_iidmap_get(&s->mapping_map, e->mapping);
        if (midx != TM_ABSENT) {
            uint32_t pmi;
            TM_TRY(resolve_mapping(d, s, e->mapping, &s->mappings[midx], &pmi));
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
    DTRY_MEM(d, tm_iidmap_put(d->mem, &s->frame_by_iid, iid, *out, s->n_frames));
    *ok = 1;
    return TM_OK;
}

/* Perfetto lists frames root first; the model is leaf first. */
static void reverse_scratch(dec *d, size_t n) {
    for (size_t i = 0; i < n / 2; i++) {
        uint32_t tmp = d->frame_scratch[i];
        d->frame_scratch[i] = d->frame_scratch[n - 1 - i];
        d->frame_scratch[n - 1 - i] = tmp;
    }
}

/* Resolves callstack iid, first time in this generation. */
static tm_status resolve_callstack_slow(dec *d, seq_state *s, uint64_t iid, const uint8_t *at,
                                        uint32_t *out, int *ok) {
    uint32_t idx = tm_iidmap_get(&s->cs_map, iid);
    *ok = 0;
    if (idx == TM_ABSENT) return TM_OK;
    const ent_callstack *e = &s->css[idx];
    size_t n = 0;
    tm_pb_reader r = tm_pb_reader_of(e->msg);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) { /* validated when merged */
        if (f.num != 2) continue;
        int packed = f.wire == TM_PB_LEN;
        tm_bytes none = {NULL, 0};
        tm_pb_reader pr = tm_pb_reader_of(packed ? f.bytes : none); /* bytes is unset for varints */
        uint64_t fid = f.val;
        while (!packed || tm_pb_packed_next(&pr, &fid) == TM_PB_OK) {
            uint32_t pfi;
            int fok;
            TM_TRY(resolve_frame(d, s, fid, at, &pfi, &fok));
            if (fok) {
                DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->frame_scratch, d->cap_fs, n + 1));
                d->frame_scratch[n++] = pfi;
            } else if (!d->relay) {
                return TM_OK;
            }
            if (!packed) break;
        }
    }
    reverse_scratch(d, n);
    DTRY_MEM(d, tm_profile_intern_stack(d->p, d->frame_scratch, n, out));
    DTRY_MEM(d, tm_iidmap_put(d->mem, &s->stack_by_iid, iid, *out, s->n_css));
    *ok = 1;
    return TM_OK;
}

/* Resolves a callstack iid to a profile stack (leaf first). *ok = 0 when
 * the sample must be dropped. A callstack seen before in this generation
 * costs one array load. */
static inline tm_status resolve_callstack(dec *d, seq_state *s, uint64_t iid, const uint8_t *at,
                                          uint32_t *out, int *ok) {
    uint32_t stack = tm_iidmap_get(&s->stack_by_iid, iid);
    if (TM_LIKELY(stack != TM_ABSENT)) {
        *out = stack;
        *ok = 1;
        return TM_OK;
    }
    return resolve_callstack_slow(d, s, iid, at, out, ok);
}

/* ---- samples ---- */

static tm_status push_run(dec *d, uint64_t clock, int keep_raw, int anchored, int64_t anchor) {
    DTRY_MEM(d, TM_VEC_RESERVE(d->mem, d->runs, d->cap_runs, d->n_runs + 1));
    clock_run *run = &d->runs[d->n_runs++];
    run->first = d->p->n_samples;
    run->clock = clock;
    run->keep_raw = keep_raw;
    run->anchored = anchored;
    run->anchor = anchor;
    return TM_OK;
}

/* Records a sample whose timestamp is in `clock` (converted after the last
 * packet, when every snapshot is known). */
static tm_status add_sample(dec *d, int64_t ts, uint64_t clock, uint32_t stack, uint32_t thread) {
    const clock_run *last = d->n_runs ? &d->runs[d->n_runs - 1] : NULL;
    if (!last || last->clock != clock || last->anchored) TM_TRY(push_run(d, clock, 0, 0, 0));
    DTRY_MEM(d, tm_profile_add_sample(d->p, ts, stack, thread));
    return TM_OK;
}

static tm_status check_sample_limit(dec *d, const uint8_t *at) {
    const tm_trace_stats *st = &d->p->stats;
    uint64_t n = d->relay ? d->relay_samples : st->perf_samples + st->streaming_samples + st->stack_samples;
    if (n > d->lim->max_samples)
        return dfail(d, TM_ERR_LIMIT, at, "more than %llu samples (max_samples)",
                     (unsigned long long)d->lim->max_samples);
    return TM_OK;
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
    return TM_OK;
}

/* The profile thread of tid (its pid recorded when known). Samples come in
 * runs per thread, so a one-entry cache answers most calls. */
static inline tm_status thread_of(dec *d, int64_t tid, int64_t pid, uint32_t *out) {
    if (TM_LIKELY(d->last_thread != TM_ABSENT && d->last_tid == tid &&
                  (!pid || d->p->threads[d->last_thread].pid))) {
        *out = d->last_thread;
        return TM_OK;
    }
    return thread_of_slow(d, tid, pid, out);
}

static clock_info *find_clock(dec *d, uint64_t key) {
    for (size_t i = 0; i < d->n_clocks; i++)
        if (d->clocks[i].key == key) return &d->clocks[i];
    return NULL;
}

static uint64_t clock_key(uint64_t seq, uint32_t id) {
    return id >= 64 && id < 128 ? (seq << 8) | id : id;
}

/* The packet's timestamp in ns and the clock it is in (0: trace clock). */
static int packet_time(dec *d, const seq_state *s, const pkt *k, int64_t *ts, uint64_t *clock) {
    uint64_t raw = k->has_ts ? k->ts : d->latest_ts;
    uint32_t id = k->clock_id ? k->clock_id : s->default_clock;
    *clock = id ? clock_key(s->id, id) : 0;
    clock_info *ci = id ? find_clock(d, *clock) : NULL;
    if (ci) {
        if (__builtin_mul_overflow(raw, ci->mult, &raw)) return 0;
        if (ci->incremental) {
            raw += (uint64_t)ci->last;
            ci->last = (int64_t)raw;
        }
    }
    if (raw > INT64_MAX) return 0;
    *ts = (int64_t)raw;
    return 1;
}

static tm_status on_perf_sample(dec *d, seq_state *s, const pkt *k) {
    tm_pb_reader r = tm_pb_reader_of(k->perf);
    tm_pb_field f;
    uint64_t pid = 0, tid = 0, cs = 0, lost = 0;
    bool has_pid = false, has_cs = false, skipped = false;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case 1: WANT(d, f, TM_PB_VARINT, "PerfSample"); break; /* cpu */
        case 2: WANT(d, f, TM_PB_VARINT, "PerfSample"); pid = (uint32_t)f.val; has_pid = true; break;
        case 3: WANT(d, f, TM_PB_VARINT, "PerfSample"); tid = (uint32_t)f.val; break;
        case 4: WANT(d, f, TM_PB_VARINT, "PerfSample"); cs = f.val; has_cs = true; break;
        case 17: if (!d->relay) { WANT(d, f, TM_PB_VARINT, "PerfSample"); lost = f.val; } break;
        case 18: if (!d->relay) { WANT(d, f, TM_PB_VARINT, "PerfSample"); skipped = true; } break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "PerfSample");
    tm_profile *p = d->p;
    if (d->relay) {
        if (!has_cs) return TM_OK;
        d->relay_samples++;
        p->stats.perf_samples++;
        if (has_pid && !p->has_relay_pid) {
            p->has_relay_pid = 1;
            p->relay_observed_pid = (int64_t)pid;
        }
        uint32_t stack, thread;
        int ok;
        TM_TRY(resolve_callstack(d, s, cs, k->perf.data, &stack, &ok));
        if (ok) {
            TM_TRY(thread_of(d, (int64_t)tid, 0, &thread));
            DTRY_MEM(d, tm_profile_add_sample(p, (int64_t)(k->has_ts ? k->ts : 0), stack, thread));
        } else {
            p->stats.dropped_unresolved++;
        }
        return check_sample_limit(d, k->start);
    }
    if (lost) {
        p->stats.perf_records_lost += lost;
        return TM_OK;
    }
    if (skipped) {
        p->stats.perf_samples_skipped++;
        return TM_OK;
    }
    if (!has_cs) {
        p->stats.perf_samples_without_callstack++;
        return TM_OK;
    }
    p->stats.perf_samples++;
    TM_TRY(check_sample_limit(d, k->start));
    uint32_t stack, thread;
    int ok;
    TM_TRY(resolve_callstack(d, s, cs, k->perf.data, &stack, &ok));
    if (!ok) {
        p->stats.dropped_unresolved++;
        return TM_OK;
    }
    int64_t ts;
    uint64_t clock;
    if (!packet_time(d, s, k, &ts, &clock)) {
        p->stats.dropped_bad_timestamp++;
        return TM_OK;
    }
    TM_TRY(thread_of(d, (int64_t)tid, (int64_t)pid, &thread));
    return add_sample(d, ts, clock, stack, thread);
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
        } else return wire_error(d, &f, name);
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, name);
    return TM_OK;
}

static tm_status on_streaming(dec *d, seq_state *s, const pkt *k) {
    size_t n_cs, n_dt;
    TM_TRY(collect_repeated(d, k->streaming, 1, "StreamingProfilePacket.callstack_iid", &d->cs_scratch,
                            &d->cap_cs, &n_cs));
    TM_TRY(collect_repeated(d, k->streaming, 2, "StreamingProfilePacket.timestamp_delta_us",
                            (uint64_t **)&d->delta_scratch, &d->cap_delta, &n_dt));
    tm_profile *p = d->p;
    p->stats.streaming_samples += n_cs;
    TM_TRY(check_sample_limit(d, k->start));
    uint32_t thread;
    if (s->has_thread) TM_TRY(thread_of(d, s->tid, s->pid, &thread));
    else {
        TM_TRY(thread_of(d, 0, 0, &thread));
        p->stats.samples_without_thread += n_cs;
    }
    int64_t t;
    uint64_t clock = TM_CLOCK_MONOTONIC;
    int keep_raw = 1;
    if (s->has_ref_time) t = s->time_ns;
    else {
        p->stats.streaming_without_reference_time += n_cs;
        keep_raw = 0;
        if (!packet_time(d, s, k, &t, &clock)) {
            p->stats.dropped_bad_timestamp += n_cs;
            return TM_OK;
        }
    }
    /* Trace Processor converts the packet's base once and adds the deltas in
     * trace time: the samples form one run anchored at the base. */
    TM_TRY(push_run(d, clock, keep_raw, 1, t));
    int bad_time = 0;
    for (size_t i = 0; i < n_dt; i++) {
        int64_t delta;
        if (__builtin_mul_overflow((int64_t)d->delta_scratch[i], (int64_t)1000, &delta) ||
            __builtin_add_overflow(t, delta, &t))
            bad_time = 1;
        if (i >= n_cs) continue; /* trailing deltas still advance the time */
        uint32_t stack;
        int ok;
        TM_TRY(resolve_callstack(d, s, d->cs_scratch[i], k->streaming.data, &stack, &ok));
        if (!ok) p->stats.dropped_unresolved++;
        else if (bad_time || t < 0) p->stats.dropped_bad_timestamp++;
        else DTRY_MEM(d, tm_profile_add_sample(p, t, stack, thread));
    }
    if (n_cs > n_dt) p->stats.dropped_malformed_streaming += n_cs - n_dt;
    if (s->has_ref_time && !bad_time) s->time_ns = t;
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
        if (f.num != 1) continue;
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
            if (g.num == 1 || g.num == 2) WANT(d, g, TM_PB_LEN, "StackSample.Frame");
            else if (g.num == 3) WANT(d, g, TM_PB_VARINT, "StackSample.Frame");
            if (g.num == 1) pf.function = g.bytes;
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
static tm_status on_stack_sample(dec *d, seq_state *s, const pkt *k) {
    tm_pb_reader r = tm_pb_reader_of(k->stack);
    tm_pb_field f;
    ent_task task = {0, 0, false};
    uint64_t task_iid = 0, cs_iid = 0, iid;
    tm_bytes cs_msg = {NULL, 0};
    const uint8_t *cs_at = k->stack.data;
    int cs_kind = CS_NONE;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case 1:
            WANT(d, f, TM_PB_LEN, "StackSample");
            TM_TRY(parse_task_context(d, f.bytes, &task, &iid));
            task_iid = 0;
            break;
        case 2:
            WANT(d, f, TM_PB_VARINT, "StackSample");
            task_iid = f.val;
            memset(&task, 0, sizeof task);
            break;
        case 5: WANT(d, f, TM_PB_LEN, "StackSample"); cs_msg = f.bytes; cs_at = f.start; cs_kind = CS_INLINE; break;
        case 6: WANT(d, f, TM_PB_VARINT, "StackSample"); cs_iid = f.val; cs_at = f.start; cs_kind = CS_IID; break;
        case 3: case 7: case 9: WANT(d, f, TM_PB_LEN, "StackSample"); break;
        case 4: case 8: case 10: case 11: WANT(d, f, TM_PB_VARINT, "StackSample"); break;
        case 14: /* follower_weights, packed or not */
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
        uint32_t idx = tm_iidmap_get(&s->task_map, task_iid);
        if (idx == TM_ABSENT) {
            p->stats.dropped_unresolved++;
            return TM_OK;
        }
        task = s->tasks[idx];
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
    uint64_t clock;
    if (!packet_time(d, s, k, &ts, &clock)) {
        p->stats.dropped_bad_timestamp++;
        return TM_OK;
    }
    /* Without a tid (a task context naming only a process or an async task,
     * or none at all) the sample goes to the process's main thread (tid =
     * pid) when the pid is known, else to tid 0 and samples_without_thread,
     * like a StreamingProfilePacket on a sequence without a thread. */
    if (task.has_tid) TM_TRY(thread_of(d, task.tid, task.pid, &thread));
    else if (task.pid) TM_TRY(thread_of(d, task.pid, task.pid, &thread));
    else {
        TM_TRY(thread_of(d, 0, 0, &thread));
        p->stats.samples_without_thread++;
    }
    return add_sample(d, ts, clock, stack, thread);
}

/* Counts the samples a skipped packet would have produced. */
static uint64_t samples_in(const pkt *k) {
    if (k->perf.data) {
        tm_pb_reader r = tm_pb_reader_of(k->perf);
        tm_pb_field f;
        while (tm_pb_next(&r, &f) == TM_PB_OK)
            if (f.num == 4) return 1;
        return 0;
    }
    if (k->streaming.data) {
        uint64_t n = 0;
        tm_pb_reader r = tm_pb_reader_of(k->streaming);
        tm_pb_field f;
        while (tm_pb_next(&r, &f) == TM_PB_OK)
            if (f.num == 1) n += f.wire == TM_PB_LEN ? tm_pb_packed_count(f.bytes) : 1;
        return n;
    }
    if (k->stack.data) {
        tm_pb_reader r = tm_pb_reader_of(k->stack);
        tm_pb_field f;
        while (tm_pb_next(&r, &f) == TM_PB_OK)
            if (f.num == 5 || f.num == 6) return 1;
    }
    return 0;
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
        case 1: WANT(d, f, TM_PB_VARINT, "ThreadDescriptor"); td->pid = (int32_t)f.val; break;
        case 2: WANT(d, f, TM_PB_VARINT, "ThreadDescriptor"); td->tid = (int64_t)f.val; td->has_tid = true; break;
        case 5: WANT(d, f, TM_PB_LEN, "ThreadDescriptor"); td->name = f.bytes; break;
        case 6: WANT(d, f, TM_PB_VARINT, "ThreadDescriptor"); td->ref_us = (int64_t)f.val; td->has_ref = true; break;
        default: break;
        }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "ThreadDescriptor");
    return TM_OK;
}

/* A sequence's thread: from its ThreadDescriptor or TrackDescriptor.thread. */
static tm_status apply_thread_desc(dec *d, seq_state *s, const thread_desc *td, bool set_time) {
    if (!td->has_tid) return TM_OK;
    uint32_t thread;
    TM_TRY(thread_of(d, td->tid, td->pid, &thread));
    tm_profile_name_thread(d->p, thread, td->name, PRIO_TRACK_DESCRIPTOR);
    if (!s->has_thread || set_time) {
        s->has_thread = true;
        s->pid = td->pid;
        s->tid = td->tid;
    }
    if (set_time && td->has_ref && s->valid) {
        int64_t ns;
        if (!__builtin_mul_overflow(td->ref_us, (int64_t)1000, &ns)) {
            s->time_ns = ns;
            s->has_ref_time = true;
        }
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
        if (f.num == 1) { WANT(d, f, TM_PB_VARINT, "ProcessDescriptor"); pid = (int32_t)f.val; }
        else if (f.num == 6) { WANT(d, f, TM_PB_LEN, "ProcessDescriptor"); name = f.bytes; }
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "ProcessDescriptor");
    if (!pid) return TM_OK;
    uint32_t proc;
    DTRY_MEM(d, tm_profile_process(d->p, pid, &proc));
    tm_profile_name_process(d->p, proc, name, PRIO_PROCESS_TREE);
    return TM_OK;
}

static tm_status on_track_desc(dec *d, seq_state *s, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == 3) {
            WANT(d, f, TM_PB_LEN, "TrackDescriptor");
            TM_TRY(on_process_desc(d, f.bytes));
        } else if (f.num == 4) {
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
 * one wins; BufferStats are summed over the buffers. */
static tm_status on_trace_stats(dec *d, tm_bytes b) {
    tm_trace_stats *st = &d->p->stats;
    uint64_t overwritten = 0, discarded = 0, bytes_overwritten = 0, writer_loss = 0;
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == 8) {
            WANT(d, f, TM_PB_VARINT, "TraceStats");
            discarded += f.val; /* the service's chunks_discarded, outside any buffer */
            continue;
        }
        if (f.num != 1) continue;
        WANT(d, f, TM_PB_LEN, "TraceStats");
        tm_pb_reader br = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while ((rc = tm_pb_next(&br, &g)) == TM_PB_OK) {
            uint64_t *sum = g.num == 3 ? &overwritten : g.num == 18 ? &discarded : g.num == 13 ? &bytes_overwritten
                          : g.num == 19 ? &writer_loss : NULL;
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
    st->buffer_bytes_overwritten = bytes_overwritten;
    st->writer_packet_loss = writer_loss;
    return TM_OK;
}

static tm_status on_process_tree(dec *d, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != 1 && f.num != 2) continue;
        WANT(d, f, TM_PB_LEN, "ProcessTree");
        tm_pb_reader er = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        int64_t id = 0, tgid = 0;
        tm_str name = {NULL, 0};
        bool has_name = false;
        int erc;
        const char *what = f.num == 1 ? "ProcessTree.Process" : "ProcessTree.Thread";
        while ((erc = tm_pb_next(&er, &g)) == TM_PB_OK) {
            if (g.num == 1) { WANT(d, g, TM_PB_VARINT, what); id = (int32_t)g.val; }
            else if (f.num == 1 && g.num == 3) {
                WANT(d, g, TM_PB_LEN, what);
                if (!has_name) name = g.bytes, has_name = true; /* cmdline[0] */
            } else if (f.num == 2 && g.num == 2) { WANT(d, g, TM_PB_LEN, what); name = g.bytes; }
            else if (f.num == 2 && g.num == 3) { WANT(d, g, TM_PB_VARINT, what); tgid = (int32_t)g.val; }
        }
        if (erc == TM_PB_ERROR) return pb_error(d, &er, what);
        if (f.num == 1) {
            if (!has_name) continue; /* processes without cmdline are skipped */
            uint32_t proc;
            DTRY_MEM(d, tm_profile_process(d->p, id, &proc));
            tm_profile_name_process(d->p, proc, name, PRIO_TRACK_DESCRIPTOR);
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

static tm_status on_clock_snapshot(dec *d, seq_state *s, const pkt *k) {
    tm_clock_point pts[TM_MAX_CLOCKS];
    size_t n = 0;
    uint32_t primary = 0;
    uint64_t relay_boot = 0, relay_real = 0;
    bool has_boot = false, has_real = false;
    tm_pb_reader r = tm_pb_reader_of(k->snapshot);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == 2) { WANT(d, f, TM_PB_VARINT, "ClockSnapshot"); primary = (uint32_t)f.val; continue; }
        if (f.num != 1) continue;
        WANT(d, f, TM_PB_LEN, "ClockSnapshot");
        tm_pb_reader cr = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        uint32_t id = 0;
        uint64_t value = 0, mult = 1;
        bool incremental = false;
        int crc;
        while ((crc = tm_pb_next(&cr, &g)) == TM_PB_OK) {
            /* Relay's schema declares only clock_id and timestamp; prost skips the rest. */
            if (g.num >= 1 && g.num <= (d->relay ? 2u : 4u)) WANT(d, g, TM_PB_VARINT, "ClockSnapshot.Clock");
            if (g.num == 1) id = (uint32_t)g.val;
            else if (g.num == 2) value = g.val;
            else if (g.num == 3) incremental = g.val != 0;
            else if (g.num == 4 && g.val) mult = g.val;
        }
        if (crc == TM_PB_ERROR) return pb_error(d, &cr, "ClockSnapshot.Clock");
        if (d->relay) {
            if (id == TM_CLOCK_BOOTTIME && !has_boot) relay_boot = value, has_boot = true;
            if (id == TM_CLOCK_REALTIME && !has_real) relay_real = value, has_real = true;
            continue;
        }
        if (id >= 128 || n >= TM_MAX_CLOCKS) {
            d->p->stats.clock_readings_ignored++;
            continue;
        }
        uint64_t key = clock_key(s->id, id);
        clock_info *ci = find_clock(d, key);
        if (!ci && d->n_clocks < TM_MAX_CLOCKS) {
            ci = &d->clocks[d->n_clocks++];
            ci->key = key;
            ci->mult = mult;
            ci->incremental = incremental && id >= 64;
        }
        uint64_t scaled;
        if (__builtin_mul_overflow(value, mult, &scaled) || scaled > INT64_MAX) {
            d->p->stats.clock_readings_ignored++;
            continue;
        }
        if (ci && ci->incremental) ci->last = (int64_t)scaled;
        pts[n].clock = key;
        pts[n].value = (int64_t)scaled;
        n++;
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "ClockSnapshot");
    d->p->stats.clock_snapshots++;
    if (d->relay) {
        if (!d->p->has_relay_offset && has_boot && has_real) {
            d->p->has_relay_offset = 1;
            d->relay_boot = relay_boot;
            d->relay_real = relay_real;
        }
        return TM_OK;
    }
    tm_status st = tm_clocks_add(&d->t->clocks, pts, n, primary);
    if (st == TM_ERR_NOMEM) return nomem(d);
    if (st != TM_OK) return dfail(d, st, k->start, "more than %u clock snapshots", TM_MAX_CLOCK_SNAPSHOTS);
    return TM_OK;
}

static tm_status on_defaults(dec *d, seq_state *s, tm_bytes b) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK)
        if (f.num == 58) { WANT(d, f, TM_PB_VARINT, "TracePacketDefaults"); s->default_clock = (uint32_t)f.val; }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "TracePacketDefaults");
    return TM_OK;
}

/* ---- packets ---- */

static tm_status decode_trace(dec *d, tm_bytes buf);

static tm_status scan_packet(dec *d, tm_bytes b, pkt *k) {
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    /* Per packet, so only what is read unconditionally is cleared: the
     * scalars, and the data pointers that mark a payload as present. */
    k->start = b.data;
    k->ts = k->seq = k->dropped = 0;
    k->clock_id = k->flags = 0;
    k->has_ts = k->has_seq = k->legacy_cleared = k->zstd = false;
    k->interned.data = k->defaults.data = k->snapshot.data = k->ptree.data = k->pdesc.data = NULL;
    k->tdesc.data = k->track.data = k->compressed.data = k->streaming.data = k->perf.data = NULL;
    k->stack.data = k->trace_stats.data = NULL;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        tm_bytes *slot = NULL;
        switch (f.num) {
        case 8: WANT(d, f, TM_PB_VARINT, "TracePacket"); k->ts = f.val; k->has_ts = true; continue;
        case 10: WANT(d, f, TM_PB_VARINT, "TracePacket"); k->seq = (uint32_t)f.val; k->has_seq = true; continue;
        case 13: WANT(d, f, TM_PB_VARINT, "TracePacket"); k->flags = (uint32_t)f.val; continue;
        case 12: slot = &k->interned; break;
        case 6: slot = &k->snapshot; break;
        case 66: slot = &k->perf; break;
        default: break;
        }
        if (!slot && !d->relay) {
            switch (f.num) {
            case 58: WANT(d, f, TM_PB_VARINT, "TracePacket"); k->clock_id = (uint32_t)f.val; continue;
            case 41: WANT(d, f, TM_PB_VARINT, "TracePacket"); k->legacy_cleared = f.val != 0; continue;
            case 42: WANT(d, f, TM_PB_VARINT, "TracePacket"); k->dropped = f.val; continue;
            case 59: slot = &k->defaults; break;
            case 2: slot = &k->ptree; break;
            case 43: slot = &k->pdesc; break;
            case 44: slot = &k->tdesc; break;
            case 60: slot = &k->track; break;
            case 50: slot = &k->compressed; break;
            case 54: slot = &k->streaming; break;
            case 135: slot = &k->stack; break; /* StackSample: not in Relay's schema */
            case 35: slot = &k->trace_stats; break;
            case 133: k->zstd = true; continue;
            default: continue;
            }
        }
        if (!slot) continue;
        WANT(d, f, TM_PB_LEN, "TracePacket");
        slot->data = f.bytes.data; /* two scalar copies: a 16-byte one stalls on store forwarding */
        slot->len = f.bytes.len;
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "TracePacket");
    return TM_OK;
}

static tm_status decode_packet_relay(dec *d, const pkt *k) {
    seq_state *s;
    TM_TRY(get_seq(d, k->seq, k->start, &s));
    if ((k->flags & SEQ_CLEARED) && s->seen) {
        seq_clear_tables(d->mem, s);
        d->p->stats.incremental_resets++;
    }
    if (k->interned.data) {
        s->seen = true; /* Relay creates the tables on demand */
        TM_TRY(merge_interned(d, s, k->interned));
    }
    if (k->snapshot.data) TM_TRY(on_clock_snapshot(d, s, k));
    if (k->perf.data) TM_TRY(on_perf_sample(d, s, k));
    return TM_OK;
}

static tm_status decode_packet(dec *d, tm_bytes b) {
    pkt k;
    TM_TRY(scan_packet(d, b, &k));
    d->p->stats.packets++;
    if (d->relay) return decode_packet_relay(d, &k);
    if (k.has_ts && k.ts > d->latest_ts) d->latest_ts = k.ts;
    if (k.compressed.data) {
        if (d->inflated) {
            d->p->stats.packets_unsupported++; /* nested compression */
            return TM_OK;
        }
        tm_bytes inner;
        const char *why = "";
        tm_status st = tm_inflate(&d->t->arena, d->mem, k.compressed, d->lim->max_inflated_bytes, &inner, &why);
        if (st != TM_OK) return dfail(d, st, b.data, "compressed_packets: %s", why);
        d->p->stats.compressed_packets++;
        d->inflated = 1;
        d->wrapper_off = (uint64_t)(b.data - d->base);
        st = decode_trace(d, inner);
        d->inflated = 0;
        return st;
    }
    if (k.zstd) {
        d->p->stats.packets_unsupported++;
        return TM_OK;
    }
    seq_state *s;
    TM_TRY(get_seq(d, k.seq, k.start, &s));
    tm_trace_stats *st = &d->p->stats;
    /* 1. data loss (counted like TP's traced_buf_sequence_packet_loss, also
     * when the same packet clears the state), then the clear, if any */
    if (k.dropped && s->seen) {
        st->data_losses++;
        if (!s->had_loss) st->sequences_with_data_loss++;
        s->had_loss = true;
    }
    if ((k.flags & SEQ_CLEARED) || k.legacy_cleared) {
        seq_clear_tables(d->mem, s);
        s->valid = true;
        s->default_clock = 0;
        st->incremental_resets++;
    } else if (k.dropped && s->seen) {
        s->valid = false;
    }
    s->seen = true;
    /* 2. defaults, 3. interned data */
    if (k.defaults.data) TM_TRY(on_defaults(d, s, k.defaults));
    if (k.interned.data) {
        if (s->valid) TM_TRY(merge_interned(d, s, k.interned));
        else st->interned_data_skipped++;
    }
    /* 4. clock snapshots and trace stats are consumed here */
    if (k.snapshot.data) return on_clock_snapshot(d, s, &k);
    if (k.trace_stats.data) return on_trace_stats(d, k.trace_stats);
    /* 5. packets that need incremental state while it is invalid */
    if ((k.flags & SEQ_NEEDS) && !s->valid) {
        st->packets_skipped_incremental++;
        uint64_t lost = samples_in(&k);
        if (s->had_loss) st->dropped_stale_interning += lost;
        else st->dropped_never_cleared += lost;
        return TM_OK;
    }
    /* 6. payloads */
    if (k.tdesc.data) {
        thread_desc td;
        TM_TRY(parse_thread_desc(d, k.tdesc, &td));
        TM_TRY(apply_thread_desc(d, s, &td, true));
    }
    if (k.track.data) TM_TRY(on_track_desc(d, s, k.track));
    if (k.pdesc.data) TM_TRY(on_process_desc(d, k.pdesc));
    if (k.ptree.data) TM_TRY(on_process_tree(d, k.ptree));
    if (k.perf.data) TM_TRY(on_perf_sample(d, s, &k));
    if (k.streaming.data) TM_TRY(on_streaming(d, s, &k));
    if (k.stack.data) TM_TRY(on_stack_sample(d, s, &k));
    return TM_OK;
}

/* Trace { repeated TracePacket packet = 1; }: other top-level fields are
 * skipped, as Trace Processor does. */
static tm_status decode_trace(dec *d, tm_bytes buf) {
    tm_pb_reader r = tm_pb_reader_of(buf);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != 1) continue;
        if (f.wire != TM_PB_LEN)
            return dfail(d, TM_ERR_MALFORMED, f.start, "Trace.packet has wire type %u, expected 2", f.wire);
        if (f.bytes.len > d->lim->max_packet_bytes)
            return dfail(d, TM_ERR_LIMIT, f.start, "packet of %zu bytes exceeds max_packet_bytes %llu",
                         f.bytes.len, (unsigned long long)d->lim->max_packet_bytes);
        if (!d->inflated) d->packet_at = f.start;
        TM_TRY(decode_packet(d, f.bytes));
    }
    if (rc == TM_PB_ERROR) return pb_error(d, &r, "Trace");
    return TM_OK;
}

/* ---- after the last packet ---- */

/* Converts samples recorded in other clocks to trace time and drops those
 * that cannot be (counted as dropped_missing_clock). Samples arrive in runs
 * of one clock; paths are built once per clock and runs already in trace
 * time are left where they are. */
#define PATH_CACHE 8

static tm_status convert_sample_clocks(dec *d) {
    tm_profile *p = d->p;
    tm_clocks *c = &d->t->clocks;
    tm_clock_path paths[PATH_CACHE];
    uint64_t path_clock[PATH_CACHE];
    size_t n_paths = 0, w = 0;
    tm_status st = TM_OK;
    for (size_t ri = 0; ri < d->n_runs && st == TM_OK; ri++) {
        const clock_run *run = &d->runs[ri];
        size_t end = ri + 1 < d->n_runs ? d->runs[ri + 1].first : p->n_samples;
        if (run->clock == 0 || run->clock == c->trace_clock) {
            if (w != run->first) memmove(p->samples + w, p->samples + run->first, (end - run->first) * sizeof *p->samples);
            w += end - run->first;
            continue;
        }
        size_t k = 0;
        while (k < n_paths && path_clock[k] != run->clock) k++;
        if (k == n_paths) {
            if (n_paths == PATH_CACHE) { /* rare: many clocks; recycle the last slot */
                tm_clock_path_release(c, &paths[--n_paths]);
                k = n_paths;
            }
            st = tm_clock_path_build(c, run->clock, c->trace_clock, &paths[k]);
            if (st != TM_OK) break;
            path_clock[k] = run->clock;
            n_paths++;
        }
        const tm_clock_path *path = &paths[k];
        /* An anchored run (one StreamingProfilePacket) converts its base once
         * and shifts every sample by the same amount. */
        int64_t base, shift = 0;
        int anchor_ok = run->anchored && tm_clock_path_convert(path, run->anchor, &base) &&
                        !__builtin_sub_overflow(base, run->anchor, &shift);
        for (size_t i = run->first; i < end; i++) {
            tm_prof_sample smp = p->samples[i];
            int64_t out;
            int converted = run->anchored ? anchor_ok && !__builtin_add_overflow(smp.ts, shift, &out)
                                          : tm_clock_path_convert(path, smp.ts, &out);
            if (converted) smp.ts = out;
            else if (!run->keep_raw || path->ok) {
                p->stats.dropped_missing_clock++;
                continue;
            }
            p->samples[w++] = smp;
        }
    }
    for (size_t k = 0; k < n_paths; k++) tm_clock_path_release(c, &paths[k]);
    if (st != TM_OK) return nomem(d);
    p->n_samples = w;
    return TM_OK;
}

/* Piecewise offsets from trace time to REALTIME, one per snapshot. */
static tm_status build_realtime(dec *d) {
    tm_profile *p = d->p;
    tm_clocks *c = &d->t->clocks;
    if (c->trace_clock == TM_CLOCK_REALTIME) {
        p->realtime = tm_mem_alloc(p->mem, sizeof *p->realtime);
        if (!p->realtime) return nomem(d);
        p->realtime[0].from_ns = INT64_MIN;
        p->realtime[0].offset_ns = 0;
        p->n_realtime = 1;
        return TM_OK;
    }
    tm_clock_path path;
    DTRY_MEM(d, tm_clock_path_build(c, c->trace_clock, TM_CLOCK_REALTIME, &path));
    if (!path.ok) return TM_OK;
    tm_status st = TM_OK;
    size_t n = path.hops[0].n;
    p->realtime = tm_mem_alloc(p->mem, n * sizeof *p->realtime);
    if (!p->realtime) st = TM_ERR_NOMEM;
    for (size_t i = 0; st == TM_OK && i < n; i++) {
        int64_t from = path.hops[0].from_vals[i], to;
        if (!tm_clock_path_convert(&path, from, &to)) continue;
        if (p->n_realtime && p->realtime[p->n_realtime - 1].from_ns == from) continue;
        p->realtime[p->n_realtime].from_ns = from;
        p->realtime[p->n_realtime].offset_ns = to - from;
        p->n_realtime++;
    }
    tm_clock_path_release(c, &path);
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

static tm_status finish(dec *d) {
    tm_profile *p = d->p;
    if (d->relay) {
        /* Relay adds REALTIME - BOOTTIME in 128-bit arithmetic */
        if (p->has_relay_offset) p->relay_offset_ns = (tm_i128)d->relay_real - (tm_i128)d->relay_boot;
    } else {
        TM_TRY(convert_sample_clocks(d));
        TM_TRY(build_realtime(d));
    }
    DTRY_MEM(d, tm_profile_sort_samples(p));
    tm_trace_stats *st = &p->stats;
    st->samples_kept = p->n_samples;
    st->threads = p->n_threads;
    st->trace_clock_id = (uint32_t)d->t->clocks.trace_clock;
    st->has_realtime = d->relay ? p->has_relay_offset : p->n_realtime > 0;
    if (p->n_samples) {
        st->first_sample_ns = p->samples[0].ts;
        st->last_sample_ns = p->samples[p->n_samples - 1].ts;
    }
    /* Threads with samples but no name (the main thread of a known pid is
     * named "main"; tid 0 of an unknown process is not). */
    uint8_t *has = tm_mem_alloc(d->mem, p->n_threads + 1);
    if (!has) return nomem(d);
    memset(has, 0, p->n_threads + 1);
    for (size_t i = 0; i < p->n_samples; i++) has[p->samples[i].thread] = 1;
    for (size_t i = 0; i < p->n_threads; i++)
        if (has[i] && !p->threads[i].name_prio && !(p->threads[i].tid == p->threads[i].pid && p->threads[i].pid))
            st->threads_without_name++;
    tm_mem_free(d->mem, has, p->n_threads + 1);
    return TM_OK;
}

static void dec_release(dec *d) {
    for (size_t i = 0; i < d->n_seqs; i++) seq_free(d->mem, d->seqs[i]);
    tm_mem_free(d->mem, d->seqs, d->cap_seqs * sizeof *d->seqs);
    tm_u64map_free(d->mem, &d->seq_map);
    tm_mem_free(d->mem, d->cs_scratch, d->cap_cs * sizeof *d->cs_scratch);
    tm_mem_free(d->mem, d->delta_scratch, d->cap_delta * sizeof *d->delta_scratch);
    tm_mem_free(d->mem, d->frame_scratch, d->cap_fs * sizeof *d->frame_scratch);
    tm_mem_free(d->mem, d->runs, d->cap_runs * sizeof *d->runs);
}

/* ---- public API ---- */

void tm_limits_preset(tm_limit_preset preset, tm_limits *out) {
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
    for (size_t i = 0; i < sizeof *out / sizeof(uint64_t); i++)
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
    d.base = buf;
    d.last_thread = TM_ABSENT;
    tm_bytes all = {buf, len};
    /* A sample costs ~16 bytes of trace or more in the common encodings:
     * reserving len/16 up front (at most 2^24 samples, 256 MiB) avoids most
     * regrowth copies without claiming memory a huge trace may not need. */
    tm_status st = TM_OK;
    size_t reserve = len / 16 < ((size_t)1 << 24) ? len / 16 : (size_t)1 << 24;
    if (reserve > t->limits.max_samples) reserve = (size_t)t->limits.max_samples;
    if (reserve > 1024 && TM_VEC_RESERVE(&t->mem, t->profile.samples, t->profile.cap_samples, reserve) != TM_OK)
        st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    if (st == TM_OK) st = decode_trace(&d, all);
    if (st == TM_OK) st = finish(&d);
    if (st == TM_ERR_NOMEM && tm_budget_exceeded(&d.work_budget))
        st = dfail(&d, TM_ERR_LIMIT, d.packet_at,
                   "memory budget exceeded: the decode's working tables need more than %llu bytes (max_work_bytes)",
                   (unsigned long long)t->limits.max_work_bytes);
    if (st == TM_ERR_NOMEM && tm_budget_exceeded(&t->result_budget))
        st = dfail(&d, TM_ERR_LIMIT, d.packet_at,
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
    if (opts->input != TM_INPUT_AUTO && !tm_input_format_name(opts->input))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_trace_parse: unknown input format %d", (int)opts->input);
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
    tm_clocks_init(&t->clocks, &t->mem);
    t->profile.relay_compat = opts->mode == TM_MODE_RELAY;
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
    tm_clocks_release(&t->clocks);
    tm_arena_release(&t->arena);
    tm_input_close(&mem, &t->source);
    tm_mem_free(&mem, t, sizeof *t);
}

const tm_trace_stats *tm_trace_get_stats(const tm_trace *t) { return &t->profile.stats; }

const tm_profile *tm_trace_profile(const tm_trace *t) { return &t->profile; }

size_t tm_trace_thread_count(const tm_trace *t) { return t ? t->profile.n_threads : 0; }

tm_status tm_trace_thread(const tm_trace *t, size_t i, tm_thread_info *out) {
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

tm_input_format tm_input_detect(const void *buf, size_t len) {
    const uint8_t *p = buf;
    if (!p || !len || p[0] == 0x0a) return TM_INPUT_PERFETTO;
    size_t bom = tm_utf8_bom_len(p, len);
    p += bom, len -= bom;
    size_t i = 0;
    while (i < len && is_blank(p[i])) i++;
    if (i < len && p[i] == '{') return TM_INPUT_SAMPLE_V2;
    if (looks_folded(p, len)) return TM_INPUT_FOLDED;
    return TM_INPUT_PERFETTO;
}

const char *tm_input_format_name(tm_input_format f) {
    switch (f) {
    case TM_INPUT_PERFETTO: return "perfetto";
    case TM_INPUT_SAMPLE_V2: return "sample-v2";
    case TM_INPUT_FOLDED: return "folded";
    case TM_INPUT_AUTO: break;
    }
    return NULL;
}
