/*
 * heap.c — heapprofd's ProfilePackets read once for every consumer (the
 * rules are in heap.h): the sequences' own tables, dumps committed when
 * their last packet arrives, dump windows in trace time, and the totals of
 * each dump turned into changes per (process, callsite).
 */
#include <string.h>

#include "common/limits.h"
#include "perfetto/fields.h"
#include "perfetto/heap.h"

/* What the samples of a dump waiting for its last packet share. */
typedef struct pending_dump {
    int64_t pid, ts;
    tm_str heap_name;
    uint32_t heap;         /* heap_name's index in tm_pf_heap.heap_names: compared instead of the text */
} pending_dump;

/* A dump's sample, waiting for the dump's last packet. */
typedef struct pending {
    uint32_t dump;         /* in tm_pf_heap_seq.pend_dumps */
    uint64_t iid;
    uint64_t allocated, freed, alloc_count, free_count;
} pending;

/* A callsite's totals as the rows so far add them up: allocations (>= 0)
 * and frees (<= 0). */
typedef struct totals {
    int64_t alloc_count, alloc_size, free_count, free_size;
} totals;

/* A callsite a (process, callstack id, heap) has named. */
typedef struct seen_key {
    int64_t pid;
    uint64_t iid;
    uint32_t heap, callsite;
} seen_key;

/* What a callstack id last committed with: when the next dump's sample has
 * the same process, heap and callsite (nearly always), its totals, its
 * correction and that the callsite was seen are known without a lookup. */
typedef struct iid_memo {
    int64_t pid;
    uint32_t heap, callsite; /* callsite TM_ABSENT: nothing yet */
    uint32_t prev, corr;     /* as in the maps below (corr may be TM_ABSENT) */
} iid_memo;

struct tm_pf_heap_seq {
    tm_pf_heap_tables tables;
    bool has_index;
    uint64_t prev_index;
    pending *pend; size_t n_pend, cap_pend;
    pending_dump *pend_dumps; size_t n_pend_dumps, cap_pend_dumps;
    totals *tot; size_t n_tot, cap_tot;
    tm_u64map prev;        /* (pid, callsite) -> tot: the last totals */
    tm_u64map correction;  /* callstack id -> tot: carried over to a new callsite */
    seen_key *seen; size_t n_seen, cap_seen; tm_idxset seen_set;
    iid_memo *memo; size_t n_memo, cap_memo; /* by callstack id, below TM_HEAP_IID_MEMO */
};

static const tm_str unknown_heap = {(const uint8_t *)"unknown", 7};

/* Totals are int64 as in Trace Processor; hostile values wrap instead of
 * overflowing (undefined in C). */
static inline int64_t add64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t sub64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }

/* ---- the tables ---- */

static int table_of(uint32_t field) {
    switch (field) {
    case TM_PF_INTERNED_FUNCTION_NAMES: case TM_PF_INTERNED_MAPPING_PATHS: case TM_PF_INTERNED_BUILD_IDS:
    case TM_PF_PROFILE_STRINGS: return 0;
    case TM_PF_INTERNED_MAPPINGS: case TM_PF_PROFILE_MAPPINGS: return 1;
    case TM_PF_INTERNED_FRAMES: case TM_PF_PROFILE_FRAMES: return 2;
    case TM_PF_INTERNED_CALLSTACKS: case TM_PF_PROFILE_CALLSTACKS: return 3;
    default: return -1;
    }
}

bool tm_pf_heap_lookup(const tm_pf_heap_tables *t, uint32_t field, uint64_t iid, tm_bytes *out) {
    int k = table_of(field);
    if (k < 0) return false;
    uint32_t i = tm_u64map_get(&t->by_iid[k], iid);
    if (i == TM_ABSENT) return false;
    *out = t->ents[i];
    return true;
}

bool tm_pf_heap_lookup_str(const tm_pf_heap_tables *t, uint32_t field, uint64_t iid, tm_str *out) {
    tm_bytes msg;
    static const uint8_t empty[1];
    out->data = empty;
    out->len = 0;
    if (!tm_pf_heap_lookup(t, field, iid, &msg)) return iid == 0;
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (tm_pb_next(&pb, &f) == TM_PB_OK) /* checked by the reader */
        if (f.num == TM_PF_INTERNED_STRING_STR) *out = f.bytes;
    return true;
}

static tm_status table_add(tm_mem *mem, tm_pf_heap_tables *t, int k, tm_bytes msg) {
    uint64_t iid = 0;
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (tm_pb_next(&pb, &f) == TM_PB_OK)
        if (f.num == TM_PF_INTERNED_IID) iid = f.val;
    if (tm_u64map_get(&t->by_iid[k], iid) != TM_ABSENT) return TM_OK;
    TM_TRY(TM_VEC_RESERVE(mem, t->ents, t->cap_ents, t->n_ents + 1));
    t->ents[t->n_ents] = msg;
    return tm_u64map_put(mem, &t->by_iid[k], iid, (uint32_t)t->n_ents++);
}

static void tables_clear(tm_mem *mem, tm_pf_heap_tables *t) {
    for (int k = 0; k < 4; k++) tm_u64map_clear(mem, &t->by_iid[k]);
    t->n_ents = 0;
}

/* ---- state ---- */

void tm_pf_heap_init(tm_pf_heap *h, tm_mem *mem) {
    memset(h, 0, sizeof *h);
    h->mem = mem;
    h->art_heap = UINT32_MAX;
}

static void seq_free(tm_mem *mem, tm_pf_heap_seq *s) {
    for (int k = 0; k < 4; k++) tm_u64map_free(mem, &s->tables.by_iid[k]);
    tm_mem_free(mem, s->tables.ents, s->tables.cap_ents * sizeof *s->tables.ents);
    tm_mem_free(mem, s->pend, s->cap_pend * sizeof *s->pend);
    tm_mem_free(mem, s->pend_dumps, s->cap_pend_dumps * sizeof *s->pend_dumps);
    tm_mem_free(mem, s->tot, s->cap_tot * sizeof *s->tot);
    tm_u64map_free(mem, &s->prev);
    tm_u64map_free(mem, &s->correction);
    tm_mem_free(mem, s->seen, s->cap_seen * sizeof *s->seen);
    tm_idxset_free(mem, &s->seen_set);
    tm_mem_free(mem, s->memo, s->cap_memo * sizeof *s->memo);
    tm_mem_free(mem, s, sizeof *s);
}

void tm_pf_heap_release(tm_pf_heap *h) {
    for (size_t i = 0; i < h->n_seqs; i++)
        if (h->seqs[i]) seq_free(h->mem, h->seqs[i]);
    tm_mem_free(h->mem, h->seqs, h->cap_seqs * sizeof *h->seqs);
    tm_mem_free(h->mem, h->dumps, h->cap_dumps * sizeof *h->dumps);
    tm_mem_free(h->mem, h->heap_names, h->cap_heap_names * sizeof *h->heap_names);
    tm_idxset_free(h->mem, &h->dump_set);
    memset(h, 0, sizeof *h);
}

static tm_status seq_of(tm_pf_heap *h, uint32_t index, tm_pf_heap_seq **out) {
    while (h->n_seqs <= index) {
        TM_TRY(TM_VEC_RESERVE(h->mem, h->seqs, h->cap_seqs, h->n_seqs + 1));
        h->seqs[h->n_seqs++] = NULL;
    }
    if (!h->seqs[index]) {
        tm_pf_heap_seq *s = tm_mem_alloc(h->mem, sizeof *s);
        if (!s) return TM_ERR_NOMEM;
        memset(s, 0, sizeof *s);
        h->seqs[index] = s;
    }
    *out = h->seqs[index];
    return TM_OK;
}

static tm_status new_totals(tm_mem *mem, tm_pf_heap_seq *s, uint32_t *out) {
    TM_TRY(TM_VEC_RESERVE(mem, s->tot, s->cap_tot, s->n_tot + 1));
    memset(&s->tot[s->n_tot], 0, sizeof *s->tot);
    *out = (uint32_t)s->n_tot++;
    return TM_OK;
}

/* ---- committing a dump ---- */

static uint32_t seen_hash(const seen_key *k) {
    return (uint32_t)tm_hash_u64(tm_hash_u64((uint64_t)k->pid * 0x9e3779b97f4a7c15ull ^ k->iid) ^
                                 ((uint64_t)k->callsite << 20 | k->heap));
}
static int seen_eq(const void *ctx, uint32_t idx, const void *key) {
    const seen_key *a = &((const tm_pf_heap_seq *)ctx)->seen[idx], *b = key;
    return a->pid == b->pid && a->iid == b->iid && a->callsite == b->callsite && a->heap == b->heap;
}

/* Whether (pid, iid, heap) names this callsite for the first time. */
static tm_status first_seen(tm_mem *mem, tm_pf_heap_seq *s, const seen_key *k, bool *first) {
    uint32_t h = seen_hash(k);
    *first = tm_idxset_find(&s->seen_set, h, seen_eq, s, k) == TM_ABSENT;
    if (!*first) return TM_OK;
    TM_TRY(TM_VEC_RESERVE(mem, s->seen, s->cap_seen, s->n_seen + 1));
    s->seen[s->n_seen] = *k;
    return tm_idxset_add(mem, &s->seen_set, h, (uint32_t)s->n_seen++);
}

/* The memo of callstack id iid, grown to it; NULL for ids past the memo's
 * ceiling. */
static tm_status memo_of(tm_mem *mem, tm_pf_heap_seq *s, uint64_t iid, iid_memo **out) {
    *out = NULL;
    if (iid >= TM_HEAP_IID_MEMO) return TM_OK;
    if (iid >= s->n_memo) {
        TM_TRY(TM_VEC_RESERVE(mem, s->memo, s->cap_memo, (size_t)iid + 1));
        for (size_t i = s->n_memo; i <= iid; i++) s->memo[i] = (iid_memo){.callsite = TM_ABSENT};
        s->n_memo = (size_t)iid + 1;
    }
    *out = &s->memo[iid];
    return TM_OK;
}

/* The totals of (pid, callsite) and the correction of a->iid, made when
 * they do not exist yet; the correction takes the old callsite's totals
 * when the id names this callsite for the first time. */
static tm_status totals_of(tm_pf_heap *h, tm_pf_heap_seq *s, const pending_dump *d, const pending *a, uint32_t callsite,
                           uint32_t *prev_out, uint32_t *corr_out) {
    uint64_t key = (uint64_t)(uint32_t)d->pid << 32 | callsite;
    uint32_t prev = tm_u64map_get(&s->prev, key);
    if (prev == TM_ABSENT) {
        TM_TRY(new_totals(h->mem, s, &prev));
        TM_TRY(tm_u64map_put(h->mem, &s->prev, key, prev));
    }
    seen_key sk = {d->pid, a->iid, d->heap, callsite};
    bool first;
    TM_TRY(first_seen(h->mem, s, &sk, &first));
    uint32_t corr = tm_u64map_get(&s->correction, a->iid);
    if (first) { /* the id names a new callsite: what the old one had counts on */
        if (corr == TM_ABSENT) {
            TM_TRY(new_totals(h->mem, s, &corr));
            TM_TRY(tm_u64map_put(h->mem, &s->correction, a->iid, corr));
        }
        s->tot[corr] = s->tot[prev];
    }
    *prev_out = prev, *corr_out = corr;
    return TM_OK;
}

static tm_status commit(tm_pf_heap *h, tm_pf_heap_seq *s, const pending *a, uint32_t gen, const uint8_t *at,
                        const tm_pf_heap_sink *sink) {
    const pending_dump *d = &s->pend_dumps[a->dump];
    tm_pf_heap_stack stack = {s->tables.n_ents && tm_u64map_get(&s->tables.by_iid[3], a->iid) != TM_ABSENT
                                  ? &s->tables : NULL,
                              gen, a->iid, d->pid, at};
    uint32_t callsite;
    TM_TRY(sink->callsite(sink->ctx, &stack, &callsite));
    if (callsite == TM_ABSENT) return TM_OK;
    iid_memo *m;
    TM_TRY(memo_of(h->mem, s, a->iid, &m));
    uint32_t prev, corr;
    if (m && m->callsite == callsite && m->pid == d->pid && m->heap == d->heap) {
        prev = m->prev, corr = m->corr; /* seen before: neither is made nor changes */
    } else {
        TM_TRY(totals_of(h, s, d, a, callsite, &prev, &corr));
        if (m) *m = (iid_memo){.pid = d->pid, .heap = d->heap, .callsite = callsite, .prev = prev, .corr = corr};
    }
    totals now = {(int64_t)a->alloc_count, (int64_t)a->allocated, sub64(0, (int64_t)a->free_count),
                  sub64(0, (int64_t)a->freed)};
    if (corr != TM_ABSENT) {
        const totals *c = &s->tot[corr];
        now.alloc_count = add64(now.alloc_count, c->alloc_count), now.alloc_size = add64(now.alloc_size, c->alloc_size);
        now.free_count = add64(now.free_count, c->free_count), now.free_size = add64(now.free_size, c->free_size);
    }
    const totals *p = &s->tot[prev];
    tm_pf_heap_row alloc = {d->ts, d->pid, d->heap_name, d->heap, callsite, sub64(now.alloc_count, p->alloc_count),
                            sub64(now.alloc_size, p->alloc_size)};
    tm_pf_heap_row freed = {d->ts, d->pid, d->heap_name, d->heap, callsite, sub64(now.free_count, p->free_count),
                            sub64(now.free_size, p->free_size)};
    if (alloc.count < 0 || alloc.size < 0 || freed.count > 0 || freed.size > 0)
        return sink->stat(sink->ctx, TM_HEAP_MALFORMED_PACKET, d->pid, 1);
    bool make_alloc = alloc.count || alloc.size;
    /* ART's heap reports allocations only: its frees would be made up */
    static const tm_str art = {(const uint8_t *)"com.android.art", 15};
    bool make_free = (freed.count || freed.size) && !(d->heap == h->art_heap && tm_bytes_eq(d->heap_name, art));
    if (make_alloc || make_free) TM_TRY(sink->rows(sink->ctx, make_alloc ? &alloc : NULL, make_free ? &freed : NULL));
    s->tot[prev] = now;
    return TM_OK;
}

static tm_status finalize(tm_pf_heap *h, tm_pf_heap_seq *s, uint32_t gen, const uint8_t *at,
                          const tm_pf_heap_sink *sink) {
    tm_status st = TM_OK;
    for (size_t i = 0; i < s->n_pend && st == TM_OK; i++) st = commit(h, s, &s->pend[i], gen, at, sink);
    s->n_pend = s->n_pend_dumps = 0;
    tables_clear(h->mem, &s->tables);
    s->tables.serial = ++h->serial;
    return st;
}

/* ---- dumps ---- */

static uint32_t dump_hash(const tm_pf_heap_dump *d) {
    return (uint32_t)tm_hash_bytes(tm_hash_u64((uint64_t)d->pid ^ (uint64_t)d->ts_end * 31), d->heap_name);
}
static int dump_eq(const void *ctx, uint32_t idx, const void *key) {
    const tm_pf_heap_dump *a = &((const tm_pf_heap *)ctx)->dumps[idx], *b = key;
    return a->pid == b->pid && a->ts_end == b->ts_end && (a->heap_name.data == NULL) == (b->heap_name.data == NULL) &&
           tm_bytes_eq(a->heap_name, b->heap_name);
}

/* A dump's window once per (process, end, heap): continued packets repeat
 * it. *first: this is its first packet. */
static tm_status report_dump(tm_pf_heap *h, const tm_pf_heap_dump *d, const tm_pf_heap_sink *sink, bool *first) {
    uint32_t hash = dump_hash(d);
    *first = tm_idxset_find(&h->dump_set, hash, dump_eq, h, d) == TM_ABSENT;
    if (!*first) return TM_OK;
    TM_TRY(TM_VEC_RESERVE(h->mem, h->dumps, h->cap_dumps, h->n_dumps + 1));
    h->dumps[h->n_dumps] = *d;
    TM_TRY(tm_idxset_add(h->mem, &h->dump_set, hash, (uint32_t)h->n_dumps++));
    return sink->dump(sink->ctx, d);
}

typedef struct dump_fields {
    tm_pf_heap_dump d;
    uint64_t ts_raw, start_raw, orig_interval, client_error;
    bool has_start;
    bool flags[5]; /* disconnected, corrupted, overran, rejected, guardrail */
    tm_bytes stats;
} dump_fields;

/* A dump's next field, as tm_pb_next reads it; a sample of fewer than 128
 * bytes (nearly all of a dump's fields) in a few instructions. */
static inline int next_dump_field(tm_pb_reader *pb, tm_pb_field *f) {
    const uint8_t *q = pb->p;
    if (pb->end - q >= 2 && q[0] == (TM_PF_HEAP_DUMP_SAMPLES << 3 | TM_PB_LEN) && q[1] < 0x80 &&
        q[1] <= pb->end - q - 2) {
        *f = (tm_pb_field){.num = TM_PF_HEAP_DUMP_SAMPLES, .wire = TM_PB_LEN, .bytes = {q + 2, q[1]}, .start = q};
        pb->p = q + 2 + q[1];
        return TM_PB_OK;
    }
    return tm_pb_next(pb, f);
}

static dump_fields read_dump(tm_bytes msg) {
    dump_fields x;
    memset(&x, 0, sizeof x);
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (next_dump_field(&pb, &f) == TM_PB_OK) { /* wire types checked by the reader */
        switch (f.num) {
        case TM_PF_HEAP_DUMP_PID: x.d.pid = (int64_t)(uint32_t)f.val; break; /* Trace Processor's pids are 32-bit */
        case TM_PF_HEAP_DUMP_TIMESTAMP: x.ts_raw = f.val; break;
        case TM_PF_HEAP_DUMP_START_TIMESTAMP: x.start_raw = f.val, x.has_start = true; break;
        case TM_PF_HEAP_DUMP_HEAP_NAME: if (f.bytes.len) x.d.heap_name = f.bytes; break;
        case TM_PF_HEAP_DUMP_SAMPLING_INTERVAL_BYTES: x.d.sampling_interval = f.val; break;
        case TM_PF_HEAP_DUMP_ORIG_SAMPLING_INTERVAL_BYTES: x.orig_interval = f.val; break;
        case TM_PF_HEAP_DUMP_CLIENT_ERROR: x.client_error = f.val; break;
        case TM_PF_HEAP_DUMP_DISCONNECTED: x.flags[0] = f.val != 0; break;
        case TM_PF_HEAP_DUMP_BUFFER_CORRUPTED: x.flags[1] = f.val != 0; break;
        case TM_PF_HEAP_DUMP_BUFFER_OVERRAN: x.flags[2] = f.val != 0; break;
        case TM_PF_HEAP_DUMP_REJECTED_CONCURRENT: x.flags[3] = f.val != 0; break;
        case TM_PF_HEAP_DUMP_HIT_GUARDRAIL: x.flags[4] = f.val != 0; break;
        case TM_PF_HEAP_DUMP_STATS: x.stats = f.bytes; break;
        default: break;
        }
    }
    return x;
}

static tm_status dump_stats(const dump_fields *x, int64_t packet_ts, bool first, const tm_pf_heap_sink *sink) {
    int64_t pid = x->d.pid;
    void *c = sink->ctx;
    TM_TRY(sink->stat(c, TM_HEAP_LAST_PROFILE_TIMESTAMP, pid, packet_ts));
    static const tm_pf_heap_stat flag_stats[5] = {TM_HEAP_CLIENT_DISCONNECTED, TM_HEAP_BUFFER_CORRUPTED,
                                                  TM_HEAP_BUFFER_OVERRAN, TM_HEAP_REJECTED_CONCURRENT,
                                                  TM_HEAP_HIT_GUARDRAIL};
    bool lossy = x->client_error != 0;
    for (int i = 0; i < 5; i++) {
        bool on = x->flags[i] || (i == 2 && x->client_error == TM_PF_HEAP_CLIENT_ERROR_HIT_TIMEOUT);
        if (on) TM_TRY(sink->stat(c, flag_stats[i], pid, 1));
        lossy |= on;
    }
    if (x->client_error) TM_TRY(sink->stat(c, TM_HEAP_CLIENT_ERROR, pid, (int64_t)x->client_error));
    if (lossy && first) TM_TRY(sink->stat(c, TM_HEAP_DUMP_LOSSY, pid, 1));
    if (x->orig_interval)
        TM_TRY(sink->stat(c, TM_HEAP_SAMPLING_INTERVAL_ADJUSTED, pid,
                          (int64_t)x->d.sampling_interval - (int64_t)x->orig_interval));
    uint64_t time_us = 0, samples = 0, blocked_us = 0;
    tm_pb_reader pb = tm_pb_reader_of(x->stats);
    tm_pb_field f;
    while (x->stats.data && tm_pb_next(&pb, &f) == TM_PB_OK) {
        if (f.num == TM_PF_HEAP_STATS_TOTAL_UNWINDING_TIME_US) time_us = f.val;
        if (f.num == TM_PF_HEAP_STATS_HEAP_SAMPLES) samples = f.val;
        if (f.num == TM_PF_HEAP_STATS_CLIENT_SPINLOCK_BLOCKED_US) blocked_us = f.val;
    }
    TM_TRY(sink->stat(c, TM_HEAP_UNWIND_TIME_US, pid, (int64_t)time_us));
    TM_TRY(sink->stat(c, TM_HEAP_UNWIND_SAMPLES, pid, (int64_t)samples));
    return sink->stat(c, TM_HEAP_CLIENT_SPINLOCK_BLOCKED, pid, (int64_t)blocked_us);
}

/* The varint at q < limit, as tm_pb_varint_fast reads it, three bytes
 * (the sizes and callstack ids heapprofd writes) without its word path. */
static inline const uint8_t *sample_varint(const uint8_t *q, const uint8_t *limit, uint64_t *out) {
    uint64_t b0 = q[0];
    if (b0 < 0x80) {
        *out = b0;
        return q + 1;
    }
    if (limit - q >= 3) {
        uint64_t b1 = q[1], b2 = q[2];
        if (b1 < 0x80) {
            *out = (b0 & 0x7f) | b1 << 7;
            return q + 2;
        }
        if (b2 < 0x80) {
            *out = (b0 & 0x7f) | (b1 & 0x7f) << 7 | b2 << 14;
            return q + 3;
        }
    }
    return tm_pb_varint_fast(q, limit, out);
}

/* A HeapSample of varints only under one-byte tags (as heapprofd writes
 * them), read in one tight loop: v[field], and bit field of *seen set.
 * Bytes up to limit (>= end) may be read: a varint of any length is one
 * load. false leaves the sample to the general decoder. */
static bool read_plain_sample(const uint8_t *p, const uint8_t *end, const uint8_t *limit, uint64_t v[16],
                              uint32_t *seen) {
    while (p < end) {
        unsigned tag = *p++;
        if (!tag || (tag & 0x87) || p >= end) return false; /* not a varint of fields 1-15 */
        uint64_t x;
        if (!(p = sample_varint(p, limit, &x)) || p > end) return false;
        v[tag >> 3] = x;
        *seen |= 1u << (tag >> 3);
    }
    return true;
}

/* The index of a heap's name: a trace has a few. */
static tm_status heap_index(tm_pf_heap *h, tm_str name, uint32_t *out) {
    for (uint32_t i = 0; i < h->n_heap_names; i++)
        if (tm_bytes_eq(h->heap_names[i], name)) {
            *out = i;
            return TM_OK;
        }
    TM_TRY(TM_VEC_RESERVE(h->mem, h->heap_names, h->cap_heap_names, h->n_heap_names + 1));
    static const tm_str art = {(const uint8_t *)"com.android.art", 15};
    if (tm_bytes_eq(name, art)) h->art_heap = (uint32_t)h->n_heap_names;
    h->heap_names[h->n_heap_names] = name;
    *out = (uint32_t)h->n_heap_names++;
    return TM_OK;
}

static tm_status queue_samples(tm_pf_heap *h, tm_pf_heap_seq *s, tm_bytes msg, const dump_fields *x) {
    bool trusted_max_count = x->orig_interval > 0; /* producers fixed self_max_count when they added it */
    tm_str heap = x->d.heap_name.data ? x->d.heap_name : unknown_heap;
    uint32_t heap_idx;
    TM_TRY(heap_index(h, heap, &heap_idx));
    TM_TRY(TM_VEC_RESERVE(h->mem, s->pend_dumps, s->cap_pend_dumps, s->n_pend_dumps + 1));
    s->pend_dumps[s->n_pend_dumps] = (pending_dump){x->d.pid, x->d.ts_end, heap, heap_idx};
    uint32_t dump = (uint32_t)s->n_pend_dumps++;
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (next_dump_field(&pb, &f) == TM_PB_OK) {
        if (f.num != TM_PF_HEAP_DUMP_SAMPLES) continue;
        tm_bytes b = f.bytes;
        uint64_t v[16]; /* fields 1-15 of a varint tag; 10-15 are not read */
        memset(v, 0, 10 * sizeof *v);
        uint32_t seen = 0;
        if (!read_plain_sample(b.data, b.data + b.len, pb.end, v, &seen)) {
            memset(v, 0, 10 * sizeof *v);
            seen = 0;
            tm_pb_reader sp = tm_pb_reader_of(b);
            tm_pb_field g;
            while (tm_pb_next(&sp, &g) == TM_PB_OK)
                if (g.num < 10) {
                    v[g.num] = g.val;
                    seen |= 1u << g.num;
                }
        }
        bool has_max = seen >> TM_PF_HEAP_SAMPLE_SELF_MAX & 1;
        pending a = {dump, v[TM_PF_HEAP_SAMPLE_CALLSTACK_ID], 0, 0, 0, 0};
        if (has_max) {
            a.allocated = v[TM_PF_HEAP_SAMPLE_SELF_MAX];
            if (trusted_max_count) a.alloc_count = v[TM_PF_HEAP_SAMPLE_SELF_MAX_COUNT];
        } else {
            a.allocated = v[TM_PF_HEAP_SAMPLE_SELF_ALLOCATED], a.freed = v[TM_PF_HEAP_SAMPLE_SELF_FREED];
            a.alloc_count = v[TM_PF_HEAP_SAMPLE_ALLOC_COUNT], a.free_count = v[TM_PF_HEAP_SAMPLE_FREE_COUNT];
        }
        TM_TRY(TM_VEC_RESERVE(h->mem, s->pend, s->cap_pend, s->n_pend + 1));
        s->pend[s->n_pend++] = a;
    }
    return TM_OK;
}

tm_status tm_pf_heap_packet(tm_pf_heap *h, tm_pf_reader *r, uint32_t gen, tm_bytes payload, int64_t ts,
                            const tm_pf_heap_sink *sink) {
    tm_pf_heap_seq *s;
    TM_TRY(seq_of(h, r->gens[gen].seq, &s));
    h->profile_packets++;
    bool continued = false;
    uint64_t index = 0;
    tm_pb_reader pb = tm_pb_reader_of(payload);
    tm_pb_field f;
    /* The tables first (a dump may come before them on the wire). */
    while (tm_pb_next(&pb, &f) == TM_PB_OK) {
        int k = f.num >= TM_PF_PROFILE_STRINGS && f.num <= TM_PF_PROFILE_MAPPINGS ? table_of(f.num) : -1;
        if (k >= 0) TM_TRY(table_add(h->mem, &s->tables, k, f.bytes));
        if (f.num == TM_PF_PROFILE_CONTINUED) continued = f.val != 0;
        if (f.num == TM_PF_PROFILE_INDEX) index = f.val;
    }
    if (sink->entry) {
        static const uint32_t order[3][2] = {{TM_PF_PROFILE_MAPPINGS, TM_PF_INTERNED_MAPPINGS},
                                             {TM_PF_PROFILE_FRAMES, TM_PF_INTERNED_FRAMES},
                                             {TM_PF_PROFILE_CALLSTACKS, TM_PF_INTERNED_CALLSTACKS}};
        for (int i = 0; i < 3; i++) {
            pb = tm_pb_reader_of(payload);
            while (tm_pb_next(&pb, &f) == TM_PB_OK) {
                if (f.num != order[i][0]) continue;
                tm_pf_heap_stack e = {&s->tables, gen, 0, 0, f.start};
                tm_pb_reader er = tm_pb_reader_of(f.bytes);
                tm_pb_field g;
                while (tm_pb_next(&er, &g) == TM_PB_OK)
                    if (g.num == TM_PF_INTERNED_IID) e.iid = g.val;
                TM_TRY(sink->entry(sink->ctx, &e, order[i][1]));
            }
        }
    }
    /* heapprofd numbers a sequence's packets from 0 */
    if (s->has_index ? s->prev_index + 1 != index : index != 0)
        TM_TRY(sink->stat(sink->ctx, TM_HEAP_MISSING_PACKET, 0, 1));
    s->has_index = true;
    s->prev_index = index;
    pb = tm_pb_reader_of(payload);
    while (tm_pb_next(&pb, &f) == TM_PB_OK) {
        if (f.num != TM_PF_PROFILE_PROCESS_DUMPS) continue;
        dump_fields x = read_dump(f.bytes);
        bool ok, wrapped;
        TM_TRY(tm_pf_to_trace_time(r, TM_PF_BUILTIN_CLOCK_MONOTONIC_COARSE, (int64_t)x.ts_raw, true, &x.d.ts_end, &ok,
                                   &wrapped));
        if (!ok) continue;
        x.d.ts = x.d.ts_end;
        if (x.has_start) {
            int64_t start;
            TM_TRY(tm_pf_to_trace_time(r, TM_PF_BUILTIN_CLOCK_MONOTONIC_COARSE, (int64_t)x.start_raw, true, &start,
                                       &ok, &wrapped));
            if (ok) x.d.ts = start;
        }
        bool first;
        TM_TRY(report_dump(h, &x.d, sink, &first));
        TM_TRY(dump_stats(&x, ts, first, sink));
        TM_TRY(queue_samples(h, s, f.bytes, &x));
    }
    return continued ? TM_OK : finalize(h, s, gen, payload.data, sink);
}

tm_status tm_pf_heap_finish(tm_pf_heap *h, const tm_pf_heap_sink *sink) {
    for (size_t i = 0; i < h->n_seqs; i++)
        if (h->seqs[i] && h->seqs[i]->n_pend) TM_TRY(sink->stat(sink->ctx, TM_HEAP_NON_FINALIZED_PROFILE, 0, 1));
    return TM_OK;
}

/* ---- streaming packets ---- */

/* a + b, at most INT64_MAX (what JSON readers and SQL take as an integer). */
static uint64_t add_capped(uint64_t a, uint64_t b) {
    uint64_t r;
    return __builtin_add_overflow(a, b, &r) || r > INT64_MAX ? INT64_MAX : r;
}

void tm_pf_heap_streamed_add(tm_pf_heap_streamed *s, uint32_t data_field, tm_bytes payload) {
    enum { FIELDS = 7 };
    bool alloc = data_field == TM_PF_PACKET_STREAMING_ALLOCATION;
    uint64_t values[FIELDS] = {0}, sizes[2] = {0}; /* sizes: sample_size, size */
    tm_pb_reader pb = tm_pb_reader_of(payload);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) {
        if (f.num >= FIELDS) continue;
        bool is_size = alloc && (f.num == TM_PF_STREAMING_ALLOC_SAMPLE_SIZE || f.num == TM_PF_STREAMING_ALLOC_SIZE);
        uint64_t *sum = &sizes[f.num == TM_PF_STREAMING_ALLOC_SIZE];
        if (f.wire == TM_PB_VARINT) {
            values[f.num]++;
            if (is_size) *sum = add_capped(*sum, f.val);
        } else if (f.wire == TM_PB_LEN) { /* packed, though the proto says unpacked */
            tm_pb_reader packed = tm_pb_reader_of(f.bytes);
            uint64_t v;
            while (tm_pb_packed_next(&packed, &v) == TM_PB_OK) {
                values[f.num]++;
                if (is_size) *sum = add_capped(*sum, v);
            }
        }
    }
    uint64_t entries = values[alloc ? TM_PF_STREAMING_ALLOC_ADDRESS : TM_PF_STREAMING_FREE_ADDRESS];
    int last = alloc ? TM_PF_STREAMING_ALLOC_SEQUENCE_NUMBER : TM_PF_STREAMING_FREE_SEQUENCE_NUMBER;
    bool agree = rc != TM_PB_ERROR;
    for (int k = 1; k <= last; k++) agree &= values[k] == 0 || values[k] == entries;
    if (!agree) {
        s->malformed++;
        return;
    }
    if (alloc) {
        s->allocations += entries;
        s->alloc_bytes = add_capped(s->alloc_bytes, values[TM_PF_STREAMING_ALLOC_SAMPLE_SIZE] ? sizes[0] : sizes[1]);
    } else {
        s->frees += entries;
    }
}
