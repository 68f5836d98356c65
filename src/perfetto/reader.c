/*
 * reader.c — the one reader of the Perfetto wire format (reader.h): packet
 * framing, compressed_packets, the TracePacket header, sequences and their
 * generations, and the intern tables, for every consumer.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "perfetto/fields.h"
#include "perfetto/reader.h"
#include "perfetto/schema.h"  /* tm_pf_check_payload */
#include "wire/inflate.h"     /* tm_inflate */

/* ---- errors ---- */

static const tm_pf_region *region_of(const tm_pf_reader *r, const uint8_t *at) {
    for (size_t i = 0; i < r->n_regions; i++)
        if (at >= r->regions[i].data && at <= r->regions[i].data + r->regions[i].len) return &r->regions[i];
    return NULL;
}

uint64_t tm_pf_offset(const tm_pf_reader *r, const uint8_t *at) {
    if (!at) return 0;
    if (at >= r->base && at <= r->base + r->len) return (uint64_t)(at - r->base);
    const tm_pf_region *g = region_of(r, at);
    return g ? g->wrapper_off : 0;
}

tm_status tm_pf_fail(const tm_pf_reader *r, tm_status code, const uint8_t *at, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *reason = NULL;
    if ((r->flags & TM_PF_RELAY) && code != TM_ERR_NOMEM)
        reason = code == TM_ERR_LIMIT ? "ExceedSizeLimit" : "InvalidSampledProfile";
    bool inflated = at && !(at >= r->base && at <= r->base + r->len) && region_of(r, at);
    return tm_fail(r->err, code, tm_pf_offset(r, at), reason, "%s%s", msg,
                   inflated ? " (inside the compressed packet at this offset)" : "");
}

static tm_status nomem(const tm_pf_reader *r) { return tm_pf_fail(r, TM_ERR_NOMEM, NULL, "out of memory"); }

tm_status tm_pf_pb_fail(const tm_pf_reader *r, const tm_pb_reader *pb, const char *where) {
    return tm_pf_fail(r, pb->err_code, pb->p, "%s: %s", where, pb->err);
}

tm_status tm_pf_wire_fail(const tm_pf_reader *r, const tm_pb_field *f, const char *msg_name) {
    return tm_pf_fail(r, TM_ERR_MALFORMED, f->start, "%s field %u has wire type %u, which its type does not allow",
                      msg_name, f->num, f->wire);
}

/* ---- set-up ---- */

void tm_pf_reader_init(tm_pf_reader *r, const uint8_t *buf, size_t len, tm_mem *mem, tm_arena *arena,
                       const tm_limits *lim, unsigned flags, tm_error *err) {
    memset(r, 0, sizeof *r);
    r->mem = mem;
    r->arena = arena;
    r->lim = lim;
    r->flags = flags;
    r->err = err ? err : &r->own_err; /* consumers read the status of a failed tm_pf_next there */
    r->base = buf;
    r->len = len;
    r->outer = tm_pb_reader_of((tm_bytes){buf, len});
    r->last_seq = TM_ABSENT;
    r->usual_seq_id = UINT64_MAX;
    tm_clocks_init(&r->clocks, mem);
}

static void free_index(tm_mem *m, tm_iidmap *index) {
    if (!index) return;
    for (int k = 0; k < TM_PF_N_INTERNED_KINDS; k++) tm_iidmap_free(m, &index[k]);
    tm_mem_free(m, index, TM_PF_N_INTERNED_KINDS * sizeof *index);
}

/* Frees ended epoch e's own index and entries, if it has them. */
static void release_kept(tm_mem *m, tm_pf_seq *s, size_t e) {
    tm_pf_kept_epoch *k = &s->kept[e];
    if (!k->index) return;
    tm_mem_free(m, k->ents, k->n_ents * sizeof *k->ents);
    free_index(m, k->index);
    memset(k, 0, sizeof *k);
}

/* Frees what only reading s needs: the entries, indexes and InternedData
 * messages of its current epoch and the one before. */
static void release_reading(tm_mem *m, tm_pf_seq *s) {
    tm_mem_free(m, s->ents, s->cap_ents * sizeof *s->ents);
    tm_mem_free(m, s->old_ents, s->cap_old_ents * sizeof *s->old_ents);
    tm_mem_free(m, s->blobs, s->cap_blobs * sizeof *s->blobs);
    tm_mem_free(m, s->old_blobs, s->cap_old_blobs * sizeof *s->old_blobs);
    free_index(m, s->newest);
    free_index(m, s->old_newest);
    s->ents = s->old_ents = NULL, s->newest = s->old_newest = NULL;
    s->blobs = s->old_blobs = NULL;
    s->n_ents = s->cap_ents = s->cap_old_ents = 0;
    s->n_blobs = s->cap_blobs = s->n_old_blobs = s->cap_old_blobs = 0;
}

static void seq_release(tm_mem *m, tm_pf_seq *s) {
    release_reading(m, s);
    tm_mem_free(m, s->kept_ents, s->cap_kept_ents * sizeof *s->kept_ents);
    tm_u64map_free(m, &s->by_epoch);
    for (size_t e = 0; e < s->cap_kept; e++) release_kept(m, s, e);
    tm_mem_free(m, s->kept, s->cap_kept * sizeof *s->kept);
}

void tm_pf_reader_release(tm_pf_reader *r) {
    for (size_t i = 0; i < r->n_seqs; i++) seq_release(r->mem, &r->seqs[i]);
    tm_mem_free(r->mem, r->seqs, r->cap_seqs * sizeof *r->seqs);
    tm_mem_free(r->mem, r->gens, r->cap_gens * sizeof *r->gens);
    tm_mem_free(r->mem, r->regions, r->cap_regions * sizeof *r->regions);
    tm_u64map_free(r->mem, &r->seq_by_id);
    tm_u64map_free(r->mem, &r->first_blob);
    tm_mem_free(r->mem, r->domains, r->cap_domains * sizeof *r->domains);
    tm_u64map_free(r->mem, &r->domain_by_key);
    tm_clocks_release(&r->clocks);
    tm_clocks_init(&r->clocks, r->mem);
    r->domains = NULL;
    r->n_domains = r->cap_domains = 0;
    r->seqs = NULL, r->gens = NULL, r->regions = NULL;
    r->n_seqs = r->cap_seqs = r->n_gens = r->cap_gens = 0;
    r->n_regions = r->cap_regions = 0;
}

/* ---- sequences and generations ---- */

/* The sample kind and period a generation's perf_sample_defaults give
 * (PerfSampleDefaults.timebase). Read leniently, as Trace Processor reads
 * them: a field of another wire type is passed over. */
static void read_timebase(tm_bytes defaults, tm_pf_gen *g) {
    tm_pb_reader pb = tm_pb_reader_of(defaults);
    tm_pb_field f;
    tm_bytes tb = {NULL, 0};
    while (tm_pb_next(&pb, &f) == TM_PB_OK)
        if (f.num == TM_PF_PERF_DEFAULTS_TIMEBASE && f.wire == TM_PB_LEN) tb = f.bytes;
    if (!tb.data) return;
    uint64_t counter = 0, period = 0, frequency = 0;
    tm_bytes name = {NULL, 0};
    pb = tm_pb_reader_of(tb);
    while (tm_pb_next(&pb, &f) == TM_PB_OK) {
        if (f.num == TM_PF_TIMEBASE_COUNTER && f.wire == TM_PB_VARINT) counter = f.val;
        else if (f.num == TM_PF_TIMEBASE_PERIOD && f.wire == TM_PB_VARINT) period = f.val, frequency = 0;
        else if (f.num == TM_PF_TIMEBASE_FREQUENCY && f.wire == TM_PB_VARINT) frequency = f.val, period = 0;
        else if (f.num == TM_PF_TIMEBASE_NAME && f.wire == TM_PB_LEN) name = f.bytes;
    }
    static const char off_cpu[] = TM_PF_OFF_CPU_TIMEBASE;
    g->off_cpu = counter == TM_PF_COUNTER_SW_CONTEXT_SWITCHES && name.len == sizeof off_cpu - 1 &&
                 memcmp(name.data, off_cpu, name.len) == 0;
    /* no counter: the CPU timer, as the proto says */
    bool counts_ns = counter == 0 || counter == TM_PF_COUNTER_SW_CPU_CLOCK || counter == TM_PF_COUNTER_SW_TASK_CLOCK;
    g->period_ns = !counts_ns || g->off_cpu ? 0 : period ? period : frequency ? 1000000000u / frequency : 0;
}

/* Starts a generation of s with the TracePacketDefaults `defaults` (NULL
 * data: none), or with those of its current generation when keep is set. */
static tm_status new_gen(tm_pf_reader *r, tm_pf_seq *s, tm_bytes defaults, bool keep) {
    if (TM_VEC_RESERVE(r->mem, r->gens, r->cap_gens, r->n_gens + 1) != TM_OK) return nomem(r);
    tm_pf_gen g = {s->index, s->epoch, 0, {NULL, 0}, {NULL, 0}, false, 0, (uint32_t)s->n_kept_ents, UINT32_MAX,
                   UINT64_MAX};
    if (keep) {
        g = r->gens[s->gen];
        g.epoch = s->epoch;
        g.kept_base = (uint32_t)s->n_kept_ents, g.kept_end = UINT32_MAX, g.end_at = UINT64_MAX;
    }
    /* The one before sees no entry added from now on, by the packet being
     * read or after it (a new sequence has none before; after a clear it
     * saw all of its epoch). */
    if (s->gen != UINT32_MAX) {
        r->gens[s->gen].end_at = tm_pf_offset(r, r->packet_tag);
        if (r->gens[s->gen].epoch == s->epoch) r->gens[s->gen].kept_end = (uint32_t)s->n_ents;
    }
    if (defaults.data) {
        tm_pb_reader pb = tm_pb_reader_of(defaults);
        tm_pb_field f;
        int rc;
        while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) {
            if (f.num == TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID) {
                TM_PF_WANT(r, f, TM_PB_VARINT, "TracePacketDefaults");
                g.clock_id = (uint32_t)f.val;
            } else if (f.num == TM_PF_DEFAULTS_PERF_SAMPLE) {
                TM_PF_WANT(r, f, TM_PB_LEN, "TracePacketDefaults");
                g.perf_defaults = f.bytes;
                g.off_cpu = false, g.period_ns = 0;
                read_timebase(f.bytes, &g);
            } else if (f.num == TM_PF_DEFAULTS_STACK_SAMPLE) {
                TM_PF_WANT(r, f, TM_PB_LEN, "TracePacketDefaults");
                g.stack_defaults = f.bytes;
            }
        }
        if (rc == TM_PB_ERROR) return tm_pf_pb_fail(r, &pb, "TracePacketDefaults");
    }
    r->gens[r->n_gens] = g;
    s->gen = (uint32_t)r->n_gens++;
    return TM_OK;
}

static tm_status get_seq_slow(tm_pf_reader *r, uint32_t id, const uint8_t *at, tm_pf_seq **out) {
    uint32_t i = tm_u64map_get(&r->seq_by_id, id);
    if (i == TM_ABSENT) {
        if (r->n_seqs >= r->lim->max_sequences)
            return tm_pf_fail(r, TM_ERR_LIMIT, at, "more than %llu packet sequences (max_sequences)",
                              (unsigned long long)r->lim->max_sequences);
        if (TM_VEC_RESERVE(r->mem, r->seqs, r->cap_seqs, r->n_seqs + 1) != TM_OK) return nomem(r);
        i = (uint32_t)r->n_seqs;
        tm_pf_seq *s = &r->seqs[i];
        memset(s, 0, sizeof *s);
        s->id = id;
        s->index = i;
        s->twin_of_epoch = s->copied_in = UINT32_MAX; /* no twin, no copy yet */
        s->gen = UINT32_MAX;                          /* no generation yet */
        if (tm_u64map_put(r->mem, &r->seq_by_id, id, i) != TM_OK) return nomem(r);
        r->n_seqs++;
        TM_TRY(new_gen(r, s, (tm_bytes){NULL, 0}, false));
    }
    r->last_seq = i;
    *out = &r->seqs[i];
    return TM_OK;
}

/* The sequence of id, made on its first packet; packets come in runs per
 * sequence, so the last one answers most calls, inline. */
static inline tm_status get_seq(tm_pf_reader *r, uint32_t id, const uint8_t *at, tm_pf_seq **out) {
    if (TM_LIKELY(r->last_seq != TM_ABSENT && r->seqs[r->last_seq].id == id)) {
        *out = &r->seqs[r->last_seq];
        return TM_OK;
    }
    return get_seq_slow(r, id, at, out);
}

/* ---- interning ---- */

/* The kind index of an interned field (schema_of says which are interned). */
static int kind_of(uint32_t field) {
    switch (field) {
    case TM_PF_INTERNED_FUNCTION_NAMES: return 0;
    case TM_PF_INTERNED_FRAMES: return 1;
    case TM_PF_INTERNED_CALLSTACKS: return 2;
    case TM_PF_INTERNED_BUILD_IDS: return 3;
    case TM_PF_INTERNED_MAPPING_PATHS: return 4;
    case TM_PF_INTERNED_SOURCE_PATHS: return 5;
    case TM_PF_INTERNED_MAPPINGS: return 6;
    case TM_PF_INTERNED_TASK_CONTEXTS: return 7;
    case TM_PF_INTERNED_EXECUTION_CONTEXTS: return 8;
    case TM_PF_INTERNED_COUNTER_DESCRIPTORS: return 9;
    case TM_PF_INTERNED_ASYNC_CONTEXTS: return 10;
    default: return -1;
    }
}

/* The key of (epoch, kind, iid) in by_epoch; false when they do not pack
 * (iids past 2^36 or epochs past 2^24: the epoch chain finds those). */
static bool epoch_key(uint32_t epoch, int kind, uint64_t iid, uint64_t *key) {
    if (iid >> 36 || epoch >> 24) return false;
    *key = (uint64_t)epoch << 40 | (uint64_t)kind << 36 | iid;
    return true;
}

/* The entry of (kind, iid) in the current epoch of generation g's
 * sequence (an older epoch's: none). */
static const tm_pf_entry *find_entry(const tm_pf_reader *r, uint32_t gen, const tm_pf_gen *g, int kind, uint64_t iid) {
    const tm_pf_seq *s = &r->seqs[g->seq];
    uint32_t i = s->newest ? tm_iidmap_get(&s->newest[kind], iid) : TM_ABSENT;
    if (i != TM_ABSENT && s->ents[i].epoch != g->epoch) i = TM_ABSENT;
    return i == TM_ABSENT || s->ents[i].gen > gen ? NULL : &s->ents[i];
}

const tm_pf_entry *tm_pf_find(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid) {
    int kind = kind_of(field);
    return kind < 0 ? NULL : find_entry(r, gen, &r->gens[gen], kind, iid);
}

bool tm_pf_lookup(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid, tm_bytes *out) {
    const tm_pf_gen *g = &r->gens[gen];
    const tm_pf_seq *s = &r->seqs[g->seq];
    int kind = kind_of(field);
    if (kind < 0) return false;
    if ((r->flags & TM_PF_KEEP_EPOCHS) && (g->epoch != s->epoch || r->kept_all)) { /* a kept epoch's */
        const tm_pf_kept *k;
        uint64_t key;
        if (g->epoch < s->cap_kept && s->kept[g->epoch].index) {
            const tm_pf_kept_epoch *ke = &s->kept[g->epoch];
            uint32_t i = tm_iidmap_get(&ke->index[kind], iid);
            if (i == TM_ABSENT || (ke->ents ? i >= g->kept_end : i >= g->end_at)) return false;
            if (!ke->ents) { /* i: the offset of its tag in the input (checked when it was interned) */
                const uint8_t *p = r->base + i, *end = r->base + r->len;
                uint64_t v = 0;
                tm_pb_varint(&p, end, &v);
                tm_pb_varint(&p, end, &v);
                out->data = p;
                out->len = (size_t)v;
                return true;
            }
            k = &ke->ents[i];
        } else {
            uint32_t i = epoch_key(g->epoch, kind, iid, &key) ? tm_u64map_get(&s->by_epoch, key) : TM_ABSENT;
            if (i == TM_ABSENT || i - g->kept_base >= g->kept_end) return false;
            k = &s->kept_ents[i];
        }
        out->data = (const uint8_t *)(uintptr_t)((uint64_t)k->hi << 32 | k->lo);
        out->len = k->len;
        return true;
    }
    const tm_pf_entry *e = find_entry(r, gen, g, kind, iid);
    if (!e) return false;
    out->data = e->msg;
    out->len = e->len;
    return true;
}

void tm_pf_prefetch(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid, int step) {
    const tm_pf_gen *g = &r->gens[gen];
    const tm_pf_seq *s = &r->seqs[g->seq];
    int kind = kind_of(field);
    if (kind < 0 || !(r->flags & TM_PF_KEEP_EPOCHS) || (g->epoch == s->epoch && !r->kept_all) ||
        g->epoch >= s->cap_kept || !s->kept[g->epoch].index || s->kept[g->epoch].ents)
        return;
    const tm_iidmap *index = &s->kept[g->epoch].index[kind];
    if (iid >= index->n_dense) return;
    if (step == 0) {
        __builtin_prefetch(&index->dense[iid]);
        return;
    }
    uint32_t at = index->dense[iid];
    if (at != TM_ABSENT && at < r->len) __builtin_prefetch(r->base + at);
}

void tm_pf_release_epoch(tm_pf_reader *r, uint32_t seq, uint32_t epoch) {
    tm_pf_seq *s = &r->seqs[seq];
    if (epoch < s->cap_kept) release_kept(r->mem, s, epoch);
}

bool tm_pf_unchanged_since(const tm_pf_reader *r, uint32_t gen, uint32_t epoch) {
    const tm_pf_gen *g = &r->gens[gen];
    const tm_pf_seq *s = &r->seqs[g->seq];
    return !(r->flags & TM_PF_KEEP_EPOCHS) && s->gen == gen && s->epoch == g->epoch && epoch < g->epoch &&
           s->last_unfull <= epoch && s->n_same == s->n_before;
}

/* Whether sequence q's epoch, linked in epoch linked_in to sequence other's
 * epoch other_epoch (as its twin or its copy), and that epoch both still
 * hold their first InternedData message alone. */
static bool linked_alone(const tm_pf_reader *r, const tm_pf_seq *q, uint32_t linked_in, uint32_t other,
                         uint32_t other_epoch) {
    if ((r->flags & (TM_PF_KEEP_EPOCHS | TM_PF_RELAY)) || linked_in != q->epoch || q->n_blobs != 1) return false;
    const tm_pf_seq *o = &r->seqs[other];
    return o->epoch == other_epoch && o->n_blobs == 1;
}

bool tm_pf_twin_of(const tm_pf_reader *r, uint32_t s, uint32_t *twin) {
    const tm_pf_seq *q = &r->seqs[s];
    if (!linked_alone(r, q, q->twin_of_epoch, q->twin, q->twin_epoch)) return false;
    *twin = q->twin;
    return true;
}

bool tm_pf_copy_of(const tm_pf_reader *r, uint32_t s, uint32_t *copy) {
    const tm_pf_seq *q = &r->seqs[s];
    if (!linked_alone(r, q, q->copied_in, q->copy, q->copy_epoch)) return false;
    *copy = q->copy;
    return true;
}

/* The string of an InternedString message (checked when it was interned).
 * As writers write it, {iid, str} under one-byte tags, it is found without
 * the field decoder. */
static tm_str str_of(tm_bytes msg) {
    enum { IID_TAG = TM_PF_INTERNED_IID << 3 | TM_PB_VARINT, STR_TAG = TM_PF_INTERNED_STRING_STR << 3 | TM_PB_LEN };
    const uint8_t *end = msg.data + msg.len, *p;
    uint64_t len;
    if (msg.len >= 4 && msg.data[0] == IID_TAG && (p = tm_pb_varint_fast(msg.data + 1, end, &len)) && end - p >= 2 &&
        p[0] == STR_TAG && (p = tm_pb_varint_fast(p + 1, end, &len)) && len == (uint64_t)(end - p))
        return (tm_str){p, (size_t)len};
    tm_str out = {msg.data, 0}; /* an entry without str is the empty string */
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (tm_pb_next(&pb, &f) == TM_PB_OK) /* checked when interned */
        if (f.num == TM_PF_INTERNED_STRING_STR) out = f.bytes;
    return out;
}

bool tm_pf_lookup_str(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid, tm_str *out) {
    tm_bytes msg;
    if (!tm_pf_lookup(r, gen, field, iid, &msg)) return false;
    *out = str_of(msg);
    return true;
}

/* Counts the values of a repeated varint field, packed or not, checking
 * each. */
static tm_status count_repeated(const tm_pf_reader *r, tm_bytes msg, uint32_t num, const char *name, uint64_t *n) {
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    *n = 0;
    while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) {
        if (f.num != num) continue;
        if (f.wire == TM_PB_VARINT) {
            (*n)++;
        } else if (f.wire == TM_PB_LEN) {
            tm_pb_reader packed = tm_pb_reader_of(f.bytes);
            uint64_t v;
            int prc;
            while ((prc = tm_pb_packed_next(&packed, &v)) == TM_PB_OK) (*n)++;
            if (prc == TM_PB_ERROR) return tm_pf_pb_fail(r, &packed, name);
        } else {
            return tm_pf_wire_fail(r, &f, name);
        }
    }
    return rc == TM_PB_ERROR ? tm_pf_pb_fail(r, &pb, name) : TM_OK;
}

/* The schema of one interned entry: which fields must be varints (a bit
 * per field number 1..31), which length-delimited, which repeated varint
 * list is bounded by which limit. */
typedef struct entry_schema {
    const char *name;
    uint32_t varints, lens;
    uint32_t list_field;
} entry_schema;

#define BIT(n) (1u << (n))
static const entry_schema string_schema = {"InternedString", BIT(1), BIT(2), 0};
static const entry_schema frame_schema = {"Frame", BIT(1) | BIT(2) | BIT(3) | BIT(4), 0, 0};
static const entry_schema mapping_schema = {
    "Mapping", BIT(1) | BIT(2) | BIT(3) | BIT(4) | BIT(5) | BIT(6) | BIT(8), 0, TM_PF_MAPPING_PATH_STRING_IDS};
static const entry_schema callstack_schema = {"Callstack", BIT(1), 0, TM_PF_CALLSTACK_FRAME_IDS};
static const entry_schema task_schema = {"TaskContext", BIT(1) | BIT(2) | BIT(3) | BIT(4), 0, 0};
static const entry_schema iid_schema = {"interned entry", BIT(1), 0, 0};
#undef BIT

/* The schema of InternedData field `field`, or NULL when the field is not
 * interned (the Relay reading knows only the profiling tables). */
static const entry_schema *schema_of(const tm_pf_reader *r, uint32_t field) {
    bool relay = r->flags & TM_PF_RELAY;
    switch (field) {
    case TM_PF_INTERNED_FUNCTION_NAMES: case TM_PF_INTERNED_BUILD_IDS: case TM_PF_INTERNED_MAPPING_PATHS:
        return &string_schema;
    case TM_PF_INTERNED_FRAMES: return &frame_schema;
    case TM_PF_INTERNED_CALLSTACKS: return &callstack_schema;
    case TM_PF_INTERNED_MAPPINGS: return &mapping_schema;
    case TM_PF_INTERNED_SOURCE_PATHS: return relay ? NULL : &string_schema;
    case TM_PF_INTERNED_TASK_CONTEXTS: return relay ? NULL : &task_schema;
    case TM_PF_INTERNED_EXECUTION_CONTEXTS: case TM_PF_INTERNED_COUNTER_DESCRIPTORS:
    case TM_PF_INTERNED_ASYNC_CONTEXTS:
        return relay ? NULL : &iid_schema;
    default: return NULL;
    }
}

/* What errors call an entry: strings by the table they are in. */
static const char *entry_name(uint32_t field, const entry_schema *sc) {
    switch (field) {
    case TM_PF_INTERNED_FUNCTION_NAMES: return "function_names";
    case TM_PF_INTERNED_BUILD_IDS: return "build_ids";
    case TM_PF_INTERNED_MAPPING_PATHS: return "mapping_paths";
    case TM_PF_INTERNED_SOURCE_PATHS: return "source_paths";
    default: return sc->name;
    }
}

static tm_status depth_fail(const tm_pf_reader *r, const uint8_t *at, uint64_t iid, uint64_t n) {
    return tm_pf_fail(r, TM_ERR_LIMIT, at, "callstack %llu has %llu frames (max_stack_depth %llu)",
                      (unsigned long long)iid, (unsigned long long)n, (unsigned long long)r->lim->max_stack_depth);
}

/* A Callstack as writers emit it, {iid, frame_ids...} as plain varints
 * with one-byte tags, read in one tight pass: true with *iid and *n set.
 * Anything else (packed ids, other fields, long or broken varints) returns
 * false, and the general check reads it, with its errors. Heavy traces
 * re-send every callstack after each clear: this is most of their bytes. */
static bool scan_plain_callstack(tm_bytes msg, uint64_t *iid, uint64_t *n) {
    enum { IID_TAG = TM_PF_INTERNED_IID << 3 | TM_PB_VARINT, FRAME_TAG = TM_PF_CALLSTACK_FRAME_IDS << 3 | TM_PB_VARINT };
    const uint8_t *p = msg.data, *end = p + msg.len;
    uint64_t count = 0, id = 0;
    while (p < end) {
        uint8_t tag = *p++;
        /* frame ids below 2^14 (one or two bytes): the common case */
        if (tag == FRAME_TAG && end - p >= 2 && (p[0] < 0x80 || p[1] < 0x80)) {
            p += p[0] < 0x80 ? 1 : 2;
            count++;
            continue;
        }
        if (tag != FRAME_TAG && tag != IID_TAG) return false;
        uint64_t v = 0;
        unsigned shift = 0;
        for (;;) { /* at most 9 bytes (63 bits): longer ones take the general path */
            if (p >= end || shift > 56) return false;
            uint8_t b = *p++;
            v |= (uint64_t)(b & 0x7f) << shift;
            if (b < 0x80) break;
            shift += 7;
        }
        if (tag == IID_TAG) id = v;
        else count++;
    }
    *iid = id;
    *n = count;
    return true;
}

/* An entry of fields under one-byte tags, varints where sc wants varints
 * and length-delimited fields (1-9 byte lengths) where it wants those,
 * its repeated varint list (a Mapping's path ids) unpacked and within
 * max_path_segments: what writers emit for every table but callstacks,
 * read in one tight pass with what check_entry takes from it (true). Any
 * other shape, or an error, returns false, and the general check reads it,
 * with its errors. */
static bool scan_plain_entry(const tm_pf_reader *r, const entry_schema *sc, tm_bytes msg, uint64_t *iid,
                             tm_str *str) {
    enum { IID_TAG = TM_PF_INTERNED_IID << 3 | TM_PB_VARINT, STR_TAG = TM_PF_INTERNED_STRING_STR << 3 | TM_PB_LEN };
    const uint8_t *p = msg.data, *end = p + msg.len;
    uint64_t id = 0, n_list = 0;
    /* the two common shapes first: a string as {iid, str}; a message of
     * varints alone (a Frame) */
    if (sc == &string_schema && msg.len >= 4 && p[0] == IID_TAG && (p = tm_pb_varint_fast(p + 1, end, &id)) &&
        end - p >= 2 && p[0] == STR_TAG && (p = tm_pb_varint_fast(p + 1, end, &n_list)) &&
        n_list == (uint64_t)(end - p)) {
        *iid = id;
        *str = (tm_str){p, (size_t)n_list};
        return true;
    }
    if (!sc->lens && !sc->list_field) {
        for (p = msg.data, id = 0; p < end;) {
            uint8_t tag = *p++;
            uint64_t v;
            if (tag < 8 || tag >= 0x80 || (tag & 7) != TM_PB_VARINT || p >= end || !(p = tm_pb_varint_fast(p, end, &v)))
                return false;
            if (tag == IID_TAG) id = v;
        }
        *iid = id;
        *str = (tm_str){msg.data, 0};
        return true;
    }
    p = msg.data, id = 0, n_list = 0;
    uint32_t list = sc->list_field; /* 0: none (no field is 0) */
    tm_str s = {msg.data, 0};
    while (p < end) {
        uint8_t tag = *p++;
        uint32_t num = tag >> 3;
        uint64_t v;
        if (tag < 8 || tag >= 0x80 || p >= end || !(p = tm_pb_varint_fast(p, end, &v))) return false;
        if ((tag & 7) == TM_PB_VARINT) {
            if (sc->lens >> num & 1) return false;
            if (num == TM_PF_INTERNED_IID) id = v;
            n_list += num == list;
        } else if ((tag & 7) == TM_PB_LEN) {
            if ((sc->varints >> num & 1) || num == list || v > (uint64_t)(end - p))
                return false;
            if (sc == &string_schema && num == TM_PF_INTERNED_STRING_STR) s = (tm_str){p, (size_t)v};
            p += v;
        } else {
            return false;
        }
    }
    if (n_list > r->lim->max_path_segments) return false;
    *iid = id;
    *str = s;
    return true;
}

/* Checks one entry against its schema and limits; *iid is 0 when it has none. */
static tm_status check_entry(const tm_pf_reader *r, uint32_t field, const entry_schema *sc, tm_bytes msg,
                             const uint8_t *at, uint64_t *iid, tm_str *str) {
    const char *name = entry_name(field, sc);
    uint64_t n_frames;
    if (sc == &callstack_schema && scan_plain_callstack(msg, iid, &n_frames)) {
        str->data = msg.data;
        str->len = 0;
        return n_frames > r->lim->max_stack_depth ? depth_fail(r, at, *iid, n_frames) : TM_OK;
    }
    if (sc != &callstack_schema && scan_plain_entry(r, sc, msg, iid, str)) return TM_OK;
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    *iid = 0;
    str->data = msg.data;
    str->len = 0;
    while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) {
        if (f.num < 32 && (sc->varints >> f.num & 1)) TM_PF_WANT(r, f, TM_PB_VARINT, name);
        if (f.num < 32 && (sc->lens >> f.num & 1)) TM_PF_WANT(r, f, TM_PB_LEN, name);
        if (f.num == TM_PF_INTERNED_IID) *iid = f.val;
        if (sc == &string_schema && f.num == TM_PF_INTERNED_STRING_STR) *str = f.bytes;
    }
    if (rc == TM_PB_ERROR) return tm_pf_pb_fail(r, &pb, name);
    if (sc == &callstack_schema) {
        uint64_t n;
        TM_TRY(count_repeated(r, msg, sc->list_field, "Callstack.frame_ids", &n));
        if (n > r->lim->max_stack_depth) return depth_fail(r, at, *iid, n);
    } else if (sc == &mapping_schema) {
        uint64_t n;
        TM_TRY(count_repeated(r, msg, sc->list_field, "Mapping.path_string_ids", &n));
        if (n > r->lim->max_path_segments)
            return tm_pf_fail(r, TM_ERR_LIMIT, at, "mapping has %llu path segments (max_path_segments %llu)",
                              (unsigned long long)n, (unsigned long long)r->lim->max_path_segments);
    }
    return TM_OK;
}

/* The entry of (kind, iid) in the epoch before s's current one, if it had
 * one. Only sequences whose old epochs go keep that one apart (old_newest):
 * consumers that keep epochs resolve per generation and never read
 * same_since, so there it is always NULL. */
static const tm_pf_entry *entry_before(const tm_pf_seq *s, int kind, uint64_t iid) {
    uint32_t i = s->old_newest ? tm_iidmap_get(&s->old_newest[kind], iid) : TM_ABSENT;
    return i == TM_ABSENT ? NULL : &s->old_ents[i];
}

/* The per-kind index of s's entries, made on first use (most sequences of a
 * system trace intern nothing). */
static tm_status make_index(tm_pf_reader *r, tm_pf_seq *s) {
    s->newest = tm_mem_alloc(r->mem, TM_PF_N_INTERNED_KINDS * sizeof *s->newest);
    if (!s->newest) return nomem(r);
    memset(s->newest, 0, TM_PF_N_INTERNED_KINDS * sizeof *s->newest);
    return TM_OK;
}

static inline tm_status ensure_index(tm_pf_reader *r, tm_pf_seq *s) {
    return s->newest ? TM_OK : make_index(r, s);
}

static tm_status add_entry(tm_pf_reader *r, tm_pf_seq *s, uint32_t field, const entry_schema *sc, tm_bytes msg,
                           const uint8_t *at) {
    uint64_t iid;
    tm_str str;
    TM_TRY(check_entry(r, field, sc, msg, at, &iid, &str));
    if (iid == 0) return TM_OK; /* iid 0 means "not set": nothing can refer to it */
    /* Relay's converter keeps only valid UTF-8 names and paths. */
    if ((r->flags & TM_PF_RELAY) && sc == &string_schema && field != TM_PF_INTERNED_BUILD_IDS &&
        !tm_utf8_valid(str))
        return TM_OK;
    int kind = kind_of(field);
    TM_TRY(ensure_index(r, s));
    uint32_t i = tm_iidmap_get(&s->newest[kind], iid);
    if (i != TM_ABSENT && s->ents[i].epoch == s->epoch) {
        if (r->flags & TM_PF_RELAY) { /* Relay: a later entry replaces the earlier one */
            s->ents[i].msg = msg.data;
            s->ents[i].len = (uint32_t)msg.len;
            s->ents[i].hdr = (uint32_t)(msg.data - at);
        }
        return TM_OK; /* Trace Processor: the first one stays */
    }
    if (++s->n_interned > r->lim->max_interned_entries)
        return tm_pf_fail(r, TM_ERR_LIMIT, at, "more than %llu interned entries on sequence %u",
                          (unsigned long long)r->lim->max_interned_entries, s->id);
    if (s->n_kept_ents + s->n_ents >= UINT32_MAX - 1 || msg.len > UINT32_MAX)
        return tm_pf_fail(r, TM_ERR_LIMIT, at, "interned data past 4 GiB on sequence %u", s->id);
    if (TM_VEC_RESERVE(r->mem, s->ents, s->cap_ents, s->n_ents + 1) != TM_OK) return nomem(r);
    const tm_pf_entry *before = entry_before(s, kind, iid);
    bool same = before && before->len == msg.len && memcmp(before->msg, msg.data, msg.len) == 0;
    s->n_same += same;
    s->ents[s->n_ents] = (tm_pf_entry){msg.data, (uint32_t)msg.len, s->epoch, s->gen, (uint32_t)(msg.data - at),
                                       same ? before->same_since : s->epoch, (uint32_t)kind, iid};
    if (tm_iidmap_put(r->mem, &s->newest[kind], iid, (uint32_t)s->n_ents, s->n_ents + 1) != TM_OK) return nomem(r);
    s->n_ents++;
    return TM_OK;
}

/* Can s's index take src_index's slots as they are, when the entries of
 * blob o, all src_n entries of their epoch, become s's first? Then each
 * has the same place in both, and s's index is empty. */
static bool index_copies(const tm_pf_seq *s, const tm_iidmap *src_index, const tm_pf_blob *o, size_t src_n) {
    if (s->n_ents != 0 || o->first != 0 || o->count != src_n || !src_index) return false;
    for (int kind = 0; kind < TM_PF_N_INTERNED_KINDS; kind++)
        if (src_index[kind].sparse.len) return false;
    return true;
}

/* Gives the empty iid map to the dense slots of from, copied: a dense part
 * smaller than from's is replaced by a copy of it whole, not grown and
 * filled with TM_ABSENT first. */
static tm_status copy_dense(tm_pf_reader *r, tm_iidmap *to, const tm_iidmap *from) {
    size_t n = from->n_dense;
    if (!n) return TM_OK;
    if (to->n_dense < n) { /* its slots are all TM_ABSENT: nothing to keep */
        tm_mem_free(r->mem, to->dense, to->n_dense * sizeof *to->dense);
        to->dense = NULL;
        to->n_dense = 0;
        uint32_t *d = tm_mem_alloc(r->mem, n * sizeof *d);
        if (!d) return nomem(r);
        to->dense = d;
        to->n_dense = n;
    }
    memcpy(to->dense, from->dense, n * sizeof *from->dense);
    return TM_OK;
}

/* When b is blob o's bytes, read at the same place of s's epoch (o->first:
 * where its entries start in src), adds the entries o added, moved to b:
 * the same bytes give the same entries. same: they are what s's epoch
 * before had here (their same_since holds); else each is compared with it.
 * src_index: src's per-kind index, whose sizes s's index takes at once, or
 * its dense slots whole when o added all src_n entries of src's epoch.
 * *done false when b is not o's bytes, or when the entries would cross
 * max_interned_entries (the general path names the entry). */
static tm_status copy_blob(tm_pf_reader *r, tm_pf_seq *s, const tm_pf_entry *src, const tm_iidmap *src_index,
                           size_t src_n, const tm_pf_blob *o, tm_bytes b, bool same, bool *done) {
    *done = false;
    if (o->bytes.len != b.len || o->first != s->n_ents || s->n_interned + o->count > r->lim->max_interned_entries ||
        s->n_kept_ents + s->n_ents + o->count >= UINT32_MAX - 1 || memcmp(o->bytes.data, b.data, b.len) != 0)
        return TM_OK;
    if (!o->count) {
        *done = true;
        return TM_OK;
    }
    if (TM_VEC_RESERVE(r->mem, s->ents, s->cap_ents, s->n_ents + o->count) != TM_OK) return nomem(r);
    TM_TRY(ensure_index(r, s));
    bool whole = index_copies(s, src_index, o, src_n);
    /* Each kind's index sized at once as far as the source's grew (it
     * held these iids), not doubled as they arrive, nor scanned for them. */
    for (int kind = 0; src_index && !whole && kind < TM_PF_N_INTERNED_KINDS; kind++)
        if (src_index[kind].n_dense &&
            tm_iidmap_reserve(r->mem, &s->newest[kind], src_index[kind].n_dense - 1, s->n_ents + o->count) != TM_OK)
            return nomem(r);
    size_t at = s->n_ents;
    const tm_pf_entry *from = src + o->first;
    tm_pf_entry *to = s->ents + at;
    for (uint32_t k = 0; k < o->count; k++) {
        to[k] = from[k];
        to[k].msg = b.data + (from[k].msg - o->bytes.data);
        to[k].epoch = s->epoch, to[k].gen = s->gen;
    }
    if (whole) {
        for (int kind = 0; kind < TM_PF_N_INTERNED_KINDS; kind++) TM_TRY(copy_dense(r, &s->newest[kind], &src_index[kind]));
    } else {
        for (uint32_t k = 0; k < o->count; k++)
            if (tm_iidmap_put(r->mem, &s->newest[to[k].kind], to[k].iid, (uint32_t)(at + k), at + k + 1) != TM_OK)
                return nomem(r);
    }
    if (same) {
        s->n_same += o->count;
    } else if (!s->old_newest) { /* no epoch before: none is the same as one of it */
        for (uint32_t k = 0; k < o->count; k++) to[k].same_since = s->epoch;
    } else {
        for (uint32_t k = 0; k < o->count; k++) {
            const tm_pf_entry *before = entry_before(s, (int)to[k].kind, to[k].iid);
            bool kept = before && before->len == to[k].len && memcmp(before->msg, to[k].msg, to[k].len) == 0;
            s->n_same += kept;
            to[k].same_since = kept ? before->same_since : s->epoch;
        }
    }
    s->n_ents += o->count;
    s->n_interned += o->count;
    *done = true;
    return TM_OK;
}

/* When b is the same bytes as the InternedData message the epoch before
 * had at this place (and every one before it in this epoch was too), adds
 * the entries that one added, moved to b: they were checked then, and the
 * same bytes give the same entries. False when it is not (or would cross
 * max_interned_entries: the general path names the entry). */
static tm_status replay(tm_pf_reader *r, tm_pf_seq *s, tm_bytes b, bool *done) {
    *done = false;
    if ((r->flags & TM_PF_RELAY) || s->n_replayed != s->n_blobs ||
        s->n_blobs >= s->n_old_blobs)
        return TM_OK;
    const tm_pf_blob *last = &s->old_blobs[s->n_old_blobs - 1];
    TM_TRY(copy_blob(r, s, s->old_ents, s->old_newest, last->first + last->count, &s->old_blobs[s->n_blobs], b, true,
                     done));
    s->n_replayed += *done;
    return TM_OK;
}

/* Links s's epoch to the epoch of sequence ti it began as a copy of, both
 * ways. */
static void set_twin(tm_pf_reader *r, tm_pf_seq *s, uint32_t ti) {
    tm_pf_seq *t = &r->seqs[ti];
    s->twin = ti, s->twin_epoch = t->epoch, s->twin_of_epoch = s->epoch;
    t->copy = s->index, t->copy_epoch = s->epoch, t->copied_in = t->epoch;
}

/* When b begins s's epoch and another sequence's epoch began with the same
 * bytes (a writer with a sequence per thread interns the same tables in
 * each), adds the entries that one added, moved to b: the same bytes read
 * first in an epoch give the same entries. Only their comparison with s's
 * epoch before (same_since) is s's own. False when there is no such
 * sequence (found by the bytes' hash, then compared), or when the entries
 * would cross max_interned_entries (the general path names the entry).
 * Only for sequences whose old epochs go (kept epochs are never twins). */
static tm_status copy_from_twin(tm_pf_reader *r, tm_pf_seq *s, tm_bytes b, uint64_t hash, bool *done) {
    *done = false;
    uint32_t ti = tm_u64map_get(&r->first_blob, hash);
    if (ti == TM_ABSENT || ti == s->index || r->seqs[ti].n_blobs == 0) return TM_OK;
    TM_TRY(copy_blob(r, s, r->seqs[ti].ents, r->seqs[ti].newest, r->seqs[ti].n_ents, &r->seqs[ti].blobs[0], b, false,
                     done));
    if (*done) set_twin(r, s, ti);
    return TM_OK;
}

/* Remembers InternedData message b, which added the entries from first on. */
static tm_status add_blob(tm_pf_reader *r, tm_pf_seq *s, tm_bytes b, size_t first) {
    if (TM_VEC_RESERVE(r->mem, s->blobs, s->cap_blobs, s->n_blobs + 1) != TM_OK) return nomem(r);
    s->blobs[s->n_blobs++] = (tm_pf_blob){b, (uint32_t)first, (uint32_t)(s->n_ents - first)};
    return TM_OK;
}

/* When b, which begins s's epoch as the epoch before's first message
 * again (replayed), is also what another sequence's epoch began with, that
 * one is s's twin as if s had copied it: the same bytes give the same
 * entries. A writer's sequences that each re-send their tables at every
 * clear are twins in every epoch, not only in their first. */
static void twin_of_replayed(tm_pf_reader *r, tm_pf_seq *s, tm_bytes b) {
    uint32_t ti = tm_u64map_get(&r->first_blob, s->first_hash);
    if (ti == TM_ABSENT || ti == s->index || r->seqs[ti].n_blobs == 0) return;
    const tm_pf_seq *t = &r->seqs[ti];
    if (t->blobs[0].bytes.len != b.len || memcmp(t->blobs[0].bytes.data, b.data, b.len) != 0) return;
    set_twin(r, s, ti);
}

/* The key an epoch's first InternedData message is found by among other
 * sequences': its length and its first and last 128 bytes. Every use
 * compares the whole message before it takes a twin's entries, so two
 * messages sharing a key only hide a twin, and hashing a whole table (tens
 * of KB a chunk) bought nothing. */
static uint64_t first_blob_key(tm_bytes b) {
    enum { EDGE = 128 };
    if (b.len <= 2 * EDGE) return tm_hash_bytes(0, b);
    uint64_t h = tm_hash_bytes(b.len, (tm_bytes){b.data, EDGE});
    return tm_hash_bytes(h, (tm_bytes){b.data + b.len - EDGE, EDGE});
}

/* A length-delimited field at p < end under a tag of one or two bytes
 * (InternedData's tables, as writers write them), within end: its number
 * and bytes, and where it ends; NULL for any other form (the field decoder
 * reads it, with its errors). */
TM_PB_INLINE const uint8_t *len_field(const uint8_t *p, const uint8_t *end, uint32_t *num, tm_bytes *bytes) {
    uint32_t tag = p[0];
    const uint8_t *q = p + 1;
    uint64_t len;
    if (tag >= 0x80) {
        if (end - p < 2 || p[1] >= 0x80) return NULL;
        tag = (tag & 0x7f) | (uint32_t)p[1] << 7;
        q = p + 2;
    }
    if ((tag & 7) != TM_PB_LEN || tag < 8 || q >= end || !(q = tm_pb_varint_fast(q, end, &len)) ||
        len > (uint64_t)(end - q))
        return NULL;
    *num = tag >> 3;
    *bytes = (tm_bytes){q, (size_t)len};
    return q + len;
}

/* Makes room in s->ents for the entries InternedData message b may add
 * (its fields before the first of another form, up to the one that would
 * cross max_interned_entries: all of them interned ones as writers write
 * it) at once, not doubling as they come. Only when the room left might
 * not hold them (each takes 2 bytes at least). */
static tm_status reserve_entries(tm_pf_reader *r, tm_pf_seq *s, tm_bytes b) {
    if (s->cap_ents - s->n_ents >= b.len / 2) return TM_OK;
    const uint8_t *p = b.data, *end = p + b.len;
    uint64_t n = 0, room = r->lim->max_interned_entries - s->n_interned; /* n_interned is within it */
    uint32_t num;
    tm_bytes m;
    while (p < end && n <= room && (p = len_field(p, end, &num, &m)) != NULL) n++;
    if (TM_VEC_RESERVE(r->mem, s->ents, s->cap_ents, s->n_ents + (size_t)n) != TM_OK) return nomem(r);
    return TM_OK;
}

static tm_status add_interned(tm_pf_reader *r, tm_pf_seq *s, tm_bytes b) {
    size_t first = s->n_ents;
    bool replayed;
    TM_TRY(replay(r, s, b, &replayed));
    if (replayed) {
        if (s->n_blobs == 0 && !(r->flags & TM_PF_KEEP_EPOCHS)) { /* the epoch's first message: first_hash is its hash still */
            s->first_class = s->old_first_class;
            twin_of_replayed(r, s, b);
            if (tm_u64map_put(r->mem, &r->first_blob, s->first_hash, s->index) != TM_OK) return nomem(r);
        }
        return add_blob(r, s, b, first);
    }
    /* an epoch's first message, not the one before's again: another sequence may have begun with it */
    bool epoch_start = !(r->flags & (TM_PF_KEEP_EPOCHS | TM_PF_RELAY)) && s->n_blobs == 0 && s->n_ents == 0;
    uint64_t hash = epoch_start ? first_blob_key(b) : 0;
    if (epoch_start) {
        s->first_hash = hash;
        TM_TRY(copy_from_twin(r, s, b, hash, &replayed));
        if (tm_u64map_put(r->mem, &r->first_blob, hash, s->index) != TM_OK) return nomem(r);
        /* classes never wrap: past the last one an epoch has none */
        s->first_class = replayed ? r->seqs[s->twin].first_class : r->n_classes < UINT32_MAX ? ++r->n_classes : 0;
        if (replayed) return add_blob(r, s, b, first);
    }
    TM_TRY(reserve_entries(r, s, b));
    tm_pb_reader pb = tm_pb_reader_of(b);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) {
        const entry_schema *sc = schema_of(r, f.num);
        if (!sc) continue;
        TM_PF_WANT(r, f, TM_PB_LEN, "InternedData");
        TM_TRY(add_entry(r, s, f.num, sc, f.bytes, f.start));
    }
    if (rc == TM_PB_ERROR) return tm_pf_pb_fail(r, &pb, "InternedData");
    return r->flags & TM_PF_RELAY ? TM_OK : add_blob(r, s, b, first);
}

/* ---- clocks ---- */

static tm_pf_clock *find_clock(tm_pf_reader *r, uint64_t key) {
    uint32_t i = tm_u64map_get(&r->domain_by_key, key);
    return i == TM_ABSENT ? NULL : &r->domains[i];
}

/* Reads a ClockSnapshot into r->snapshot: the first reading of a clock
 * fixes its multiplier and whether it is incremental; each reading of an
 * incremental clock restarts it. */
static tm_status read_snapshot(tm_pf_reader *r, tm_pf_packet *pk) {
    tm_pf_snapshot *snap = &r->snapshot;
    snap->primary = 0;
    snap->n = 0;
    snap->ignored = 0;
    tm_pb_reader pb = tm_pb_reader_of(pk->data);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) { /* wire types checked by the schema */
        if (f.num == TM_PF_CLOCK_SNAPSHOT_PRIMARY_TRACE_CLOCK) snap->primary = (uint32_t)f.val;
        if (f.num != TM_PF_CLOCK_SNAPSHOT_CLOCKS) continue;
        uint64_t id = 0, value = 0, mult = 1;
        bool incremental = false;
        tm_pb_reader cr = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while (tm_pb_next(&cr, &g) == TM_PB_OK) {
            if (g.num == TM_PF_CLOCK_ID) id = g.val;
            else if (g.num == TM_PF_CLOCK_TIMESTAMP) value = g.val;
            else if (g.num == TM_PF_CLOCK_IS_INCREMENTAL) incremental = g.val != 0;
            else if (g.num == TM_PF_CLOCK_UNIT_MULTIPLIER_NS && g.val) mult = g.val;
        }
        if (r->flags & TM_PF_RELAY) { /* Relay reads clock ids and raw values, nothing else */
            if (snap->n < TM_MAX_CLOCKS) snap->readings[snap->n++] = (tm_pf_clock_reading){id, (int64_t)value};
            continue;
        }
        if (id >= TM_PF_FIRST_RESERVED_CLOCK || snap->n >= TM_MAX_CLOCKS) {
            snap->ignored++;
            continue;
        }
        uint64_t key = tm_pf_clock_key(pk->seq_id, (uint32_t)id);
        tm_pf_clock *c = find_clock(r, key);
        if (!c) {
            if (TM_VEC_RESERVE(r->mem, r->domains, r->cap_domains, r->n_domains + 1) != TM_OK) return nomem(r);
            if (tm_u64map_put(r->mem, &r->domain_by_key, key, (uint32_t)r->n_domains) != TM_OK) return nomem(r);
            c = &r->domains[r->n_domains++];
            c->mult = mult;
            c->incremental = incremental && id >= TM_PF_FIRST_SEQUENCE_CLOCK;
            c->last = 0;
        }
        uint64_t scaled;
        if (__builtin_mul_overflow(value, c->mult, &scaled) || scaled > INT64_MAX) {
            snap->ignored++;
            continue;
        }
        if (c->incremental) c->last = (int64_t)scaled;
        snap->readings[snap->n++] = (tm_pf_clock_reading){key, (int64_t)scaled};
    }
    pk->snapshot = snap;
    if (rc == TM_PB_ERROR) return tm_pf_pb_fail(r, &pb, "ClockSnapshot");
    if (r->flags & TM_PF_RELAY) return TM_OK;
    tm_clock_point pts[TM_MAX_CLOCKS];
    for (size_t i = 0; i < snap->n; i++) pts[i] = (tm_clock_point){snap->readings[i].clock, snap->readings[i].ns, 0};
    tm_status st = tm_clocks_add(&r->clocks, pts, snap->n, snap->primary);
    if (st == TM_ERR_NOMEM) return nomem(r);
    if (st != TM_OK) return tm_pf_fail(r, st, pk->start, "more than %u clock snapshots", TM_MAX_CLOCK_SNAPSHOTS);
    return TM_OK;
}

/* The packet's timestamp in its clock domain: multiplier applied, and
 * incremental clocks advanced by it. The value wraps as Trace Processor's
 * int64 arithmetic does; time_ok says whether it did. */
tm_status tm_pf_to_trace_time(tm_pf_reader *r, uint64_t clock, int64_t ns, bool record, int64_t *out, bool *ok,
                              bool *wrapped) {
    *ok = tm_clocks_to_trace(&r->clocks, clock, ns, record, out, wrapped);
    return r->clocks.out_of_memory ? nomem(r) : TM_OK;
}

/* resolve_time for a timestamp in a clock other than the trace's. */
static tm_status resolve_clock_time(tm_pf_reader *r, tm_pf_packet *pk, uint32_t id) {
    pk->time_clock = tm_pf_clock_key(pk->seq_id, id);
    uint64_t raw = pk->timestamp;
    bool overflow = false;
    tm_pf_clock *c = find_clock(r, pk->time_clock);
    if (c) {
        overflow = __builtin_mul_overflow(raw, c->mult, &raw);
        if (c->incremental) {
            raw += (uint64_t)c->last;
            c->last = (int64_t)raw;
        }
    }
    pk->time_ok = !overflow && raw <= INT64_MAX;
    pk->time_ns = (int64_t)raw;
    /* In trace time. Trace Processor tries a failing conversion twice, once
     * quietly and once counting the failure, before it drops the packet. */
    pk->trace_exact = pk->time_ok;
    if (r->flags & TM_PF_RELAY) {
        pk->trace_ok = true;
        pk->trace_ns = pk->time_ns;
        if (pk->trace_ns > r->latest_ns) r->latest_ns = pk->trace_ns;
        return TM_OK;
    }
    bool wrapped;
    TM_TRY(tm_pf_to_trace_time(r, pk->time_clock, pk->time_ns, false, &pk->trace_ns, &pk->trace_ok, &wrapped));
    if (!pk->trace_ok)
        TM_TRY(tm_pf_to_trace_time(r, pk->time_clock, pk->time_ns, true, &pk->trace_ns, &pk->trace_ok, &wrapped));
    if (!pk->trace_ok) r->counts.clock_undeferrable++;
    pk->trace_exact = pk->time_ok && !wrapped;
    if (pk->trace_ok && pk->trace_ns > r->latest_ns) r->latest_ns = pk->trace_ns;
    return TM_OK;
}

/* Resolves the packet's timestamp: in its clock domain, multiplier applied
 * and incremental clocks advanced by it, then in trace time. The value
 * wraps as Trace Processor's int64 arithmetic does; time_ok says whether it
 * did. A timestamp in the trace's clock (the common case) is inline. id:
 * the clock it is in (0: the trace's). */
static inline tm_status resolve_time_in(tm_pf_reader *r, tm_pf_packet *pk, uint32_t id) {
    pk->has_time = true;
    if (id) return resolve_clock_time(r, pk, id);
    pk->time_clock = 0;
    pk->time_ok = pk->trace_exact = pk->timestamp <= INT64_MAX;
    pk->time_ns = pk->trace_ns = (int64_t)pk->timestamp;
    pk->trace_ok = true;
    if (pk->trace_ns > r->latest_ns) r->latest_ns = pk->trace_ns;
    return TM_OK;
}

/* resolve_time_in for the packet's clock: its own, else its generation's. */
static inline tm_status resolve_time(tm_pf_reader *r, tm_pf_packet *pk) {
    uint32_t id = pk->clock_id;
    if (!id && pk->seq) id = r->gens[pk->gen].clock_id;
    return resolve_time_in(r, pk, id);
}

/* Packets consumed before their time matters. */
static bool consumed_untimed(uint32_t data_field) {
    return data_field == TM_PF_PACKET_CLOCK_SNAPSHOT || data_field == TM_PF_PACKET_TRACE_STATS ||
           data_field == TM_PF_PACKET_TRACE_CONFIG || data_field == TM_PF_PACKET_FTRACE_STATS ||
           data_field == TM_PF_PACKET_TRACE_UUID || data_field == TM_PF_PACKET_MODULE_SYMBOLS ||
           data_field == TM_PF_PACKET_DEOBFUSCATION_MAPPING || data_field == TM_PF_PACKET_PACKAGES_LIST;
}

/* ---- packets ---- */

/* Is field `num` a member of TracePacket's `oneof data` that some
 * consumer reads? All of them are messages or bytes. */
static bool is_data_member(uint32_t num, bool relay) {
    switch (num) {
    case TM_PF_PACKET_CLOCK_SNAPSHOT: case TM_PF_PACKET_PERF_SAMPLE:
        return true;
    case TM_PF_PACKET_PROCESS_TREE: case TM_PF_PACKET_TRACE_CONFIG: case TM_PF_PACKET_FTRACE_STATS:
    case TM_PF_PACKET_TRACE_STATS: case TM_PF_PACKET_PROCESS_DESCRIPTOR: case TM_PF_PACKET_THREAD_DESCRIPTOR:
    case TM_PF_PACKET_COMPRESSED_PACKETS: case TM_PF_PACKET_STREAMING_PROFILE_PACKET:
    case TM_PF_PACKET_TRACK_DESCRIPTOR: case TM_PF_PACKET_TRACE_UUID: case TM_PF_PACKET_ZSTD_COMPRESSED_PACKETS:
    case TM_PF_PACKET_STACK_SAMPLE: case TM_PF_PACKET_PROFILE_PACKET: case TM_PF_PACKET_PROCESS_STATS:
    case TM_PF_PACKET_MODULE_SYMBOLS: case TM_PF_PACKET_DEOBFUSCATION_MAPPING:
    case TM_PF_PACKET_PACKAGES_LIST: case TM_PF_PACKET_STREAMING_ALLOCATION: case TM_PF_PACKET_STREAMING_FREE:
    case TM_PF_PACKET_ART_PROCESS_METADATA:
        return !relay;
    default:
        return false;
    }
}

/* Is field `num` one of the TracePacket header's varints? Relay's schema
 * has only the timestamp, the sequence id and its flags. */
static bool is_header_varint(uint32_t num, bool relay) {
    switch (num) {
    case TM_PF_PACKET_TIMESTAMP: case TM_PF_PACKET_SEQUENCE_ID: case TM_PF_PACKET_SEQUENCE_FLAGS:
        return true;
    case TM_PF_PACKET_TIMESTAMP_CLOCK_ID: case TM_PF_PACKET_INCREMENTAL_STATE_CLEARED:
    case TM_PF_PACKET_PREVIOUS_PACKET_DROPPED: case TM_PF_PACKET_FIRST_PACKET_ON_SEQUENCE:
    case TM_PF_PACKET_MACHINE_ID:
        return !relay;
    default:
        return false;
    }
}

/* The first and second bytes of a two-byte tag of a length-delimited field. */
#define LEN_TAG_0(num) ((((num) << 3 | TM_PB_LEN) & 0x7f) | 0x80)
#define LEN_TAG_1(num) ((num) >> 4)

/* The PerfSample or StreamingProfilePacket under its two-byte tag at p
 * (end - p >= 2), taken as the packet's member of `oneof data`: where it
 * ends, or NULL for any other field or form. */
TM_PB_INLINE const uint8_t *sample_member(tm_pf_reader *r, const uint8_t *p, const uint8_t *end, bool relay,
                                           tm_pf_packet *pk) {
    uint32_t num;
    uint64_t len;
    const uint8_t *e;
    if (p[0] == LEN_TAG_0(TM_PF_PACKET_PERF_SAMPLE) && p[1] == LEN_TAG_1(TM_PF_PACKET_PERF_SAMPLE))
        num = TM_PF_PACKET_PERF_SAMPLE;
    else if (!relay && p[0] == LEN_TAG_0(TM_PF_PACKET_STREAMING_PROFILE_PACKET) &&
             p[1] == LEN_TAG_1(TM_PF_PACKET_STREAMING_PROFILE_PACKET))
        num = TM_PF_PACKET_STREAMING_PROFILE_PACKET;
    else
        return NULL;
    if (end - p < 3 || !(e = tm_pb_varint_fast(p + 2, end, &len)) || len > (uint64_t)(end - e)) return NULL;
    if (pk->data_field) r->counts.oneof_ignored++; /* protobuf: the last member of a oneof wins */
    pk->data_field = num;
    pk->data = (tm_bytes){e, (size_t)len};
    pk->data_tag = p;
    return e + len;
}

/* The varint of a timestamp at q < end: nanoseconds of a clock that
 * started long ago take five to eight bytes. */
TM_PB_INLINE const uint8_t *timestamp_varint(const uint8_t *q, const uint8_t *end, uint64_t *out) {
    const uint8_t *e = tm_pb_varint_eight(q, end, out);
    return TM_LIKELY(e != NULL) ? e : tm_pb_varint_fast(q, end, out);
}

/* Varint fields first and second of values below 128, under one-byte
 * tags, at p (end - p >= 4), in one load: *a and *b; false for any other
 * form. (A sample packet's sequence id and flags, as writers write them.) */
static inline bool small_pair(const uint8_t *p, uint32_t first, uint32_t second, uint32_t *a, uint32_t *b) {
    uint32_t w = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    if ((w & 0x80ff80ffu) != ((first << 3 | TM_PB_VARINT) | (second << 3 | TM_PB_VARINT) << 16)) return false;
    *a = w >> 8 & 0x7f;
    *b = w >> 24;
    return true;
}

/* Reads the fields of a sample packet written as writers write them (the
 * header's varints under their one-byte tags, the PerfSample or
 * StreamingProfilePacket under its two-byte tag) from p on, as scan_packet
 * reads them, without the general field decoder. Returns where it stopped:
 * at the end, or at the first field of another kind or form, for the
 * general loop to go on from. */
static const uint8_t *scan_usual(tm_pf_reader *r, const uint8_t *p, const uint8_t *end, bool relay,
                                 tm_pf_packet *pk) {
    uint64_t v;
    const uint8_t *e;
    /* The fields in the order writers write them (timestamp, sequence id,
     * flags, payload) straight, then the loop for any other order. */
    if (end - p >= 2 && p[0] == (TM_PF_PACKET_TIMESTAMP << 3 | TM_PB_VARINT) &&
        (e = timestamp_varint(p + 1, end, &v))) {
        pk->timestamp = v, pk->has_timestamp = true;
        p = e;
        if (end - p >= 4 && small_pair(p, TM_PF_PACKET_SEQUENCE_ID, TM_PF_PACKET_SEQUENCE_FLAGS, &pk->seq_id,
                                       &pk->flags)) {
            p += 4;
            if (end - p >= 2 && (e = sample_member(r, p, end, relay, pk))) p = e;
        }
    }
    while (end - p >= 2) {
        switch (p[0]) {
        case TM_PF_PACKET_TIMESTAMP << 3 | TM_PB_VARINT:
            if (!(e = tm_pb_varint_fast(p + 1, end, &v))) return p;
            pk->timestamp = v, pk->has_timestamp = true;
            break;
        case TM_PF_PACKET_SEQUENCE_ID << 3 | TM_PB_VARINT:
            if (!(e = tm_pb_varint_fast(p + 1, end, &v))) return p;
            pk->seq_id = (uint32_t)v;
            break;
        case TM_PF_PACKET_SEQUENCE_FLAGS << 3 | TM_PB_VARINT:
            if (!(e = tm_pb_varint_fast(p + 1, end, &v))) return p;
            pk->flags = (uint32_t)v;
            break;
        default:
            if (!(e = sample_member(r, p, end, relay, pk))) return p;
            break;
        }
        p = e;
    }
    return p;
}

/* Reads the header fields of TracePacket b and its `oneof data` member;
 * *usual: scan_usual read them all (none of the others is there). It
 * zeroes pk's fields up to data_field; next_sample or clear_rest sets the
 * others. */
static tm_status scan_packet(tm_pf_reader *r, tm_bytes b, tm_pf_packet *pk, bool *usual) {
    bool relay = r->flags & TM_PF_RELAY;
    memset(&pk->timestamp, 0, offsetof(tm_pf_packet, data) - offsetof(tm_pf_packet, timestamp));
    pk->start = b.data;
    pk->bytes = b;
    const uint8_t *end = b.data + b.len; /* b is not empty */
    const uint8_t *rest = scan_usual(r, b.data, end, relay, pk);
    *usual = rest == end;
    if (*usual) return TM_OK;
    tm_pb_reader pb = {rest, end, NULL, TM_OK};
    tm_pb_field f;
    int rc;
    bool legacy_cleared = false;
    while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) {
        /* The fields every sample packet has, first: one switch. */
        switch (f.num) {
        case TM_PF_PACKET_TIMESTAMP:
            TM_PF_WANT(r, f, TM_PB_VARINT, "TracePacket");
            pk->timestamp = f.val, pk->has_timestamp = true;
            continue;
        case TM_PF_PACKET_SEQUENCE_ID:
            TM_PF_WANT(r, f, TM_PB_VARINT, "TracePacket");
            pk->seq_id = (uint32_t)f.val;
            continue;
        case TM_PF_PACKET_SEQUENCE_FLAGS:
            TM_PF_WANT(r, f, TM_PB_VARINT, "TracePacket");
            pk->flags = (uint32_t)f.val;
            continue;
        case TM_PF_PACKET_PERF_SAMPLE: case TM_PF_PACKET_STREAMING_PROFILE_PACKET:
            if (relay && f.num != TM_PF_PACKET_PERF_SAMPLE) continue;
            TM_PF_WANT(r, f, TM_PB_LEN, "TracePacket");
            if (pk->data_field) r->counts.oneof_ignored++; /* protobuf: the last member of a oneof wins */
            pk->data_field = f.num;
            pk->data = f.bytes;
            pk->data_tag = f.start;
            continue;
        default: break;
        }
        if (is_header_varint(f.num, relay)) {
            TM_PF_WANT(r, f, TM_PB_VARINT, "TracePacket");
            switch (f.num) {
            case TM_PF_PACKET_TIMESTAMP_CLOCK_ID: pk->clock_id = (uint32_t)f.val; break;
            case TM_PF_PACKET_INCREMENTAL_STATE_CLEARED: legacy_cleared = f.val != 0; break;
            case TM_PF_PACKET_PREVIOUS_PACKET_DROPPED: pk->lost = (uint32_t)f.val; break;
            case TM_PF_PACKET_FIRST_PACKET_ON_SEQUENCE: pk->first_on_sequence = f.val != 0; break;
            default: pk->machine_id = (uint32_t)f.val; break;
            }
            continue;
        }
        if (f.num == TM_PF_PACKET_INTERNED_DATA || (!relay && f.num == TM_PF_PACKET_DEFAULTS)) {
            TM_PF_WANT(r, f, TM_PB_LEN, "TracePacket");
            if (f.num == TM_PF_PACKET_INTERNED_DATA) pk->interned = f.bytes;
            else pk->defaults = f.bytes;
            continue;
        }
        if (!is_data_member(f.num, relay)) continue;
        TM_PF_WANT(r, f, TM_PB_LEN, "TracePacket");
        if (pk->data_field) r->counts.oneof_ignored++; /* protobuf: the last member of a oneof wins */
        pk->data_field = f.num;
        pk->data = f.bytes;
        pk->data_tag = f.start;
    }
    if (rc == TM_PB_ERROR) return tm_pf_pb_fail(r, &pb, "TracePacket");
    if (legacy_cleared) pk->flags |= TM_PF_SEQ_INCREMENTAL_STATE_CLEARED;
    return TM_OK;
}

/* Trims the dense part of an ended epoch's index to the last iid it holds. */
static tm_status trim_index(tm_pf_reader *r, tm_iidmap *index) {
    size_t used = index->n_dense;
    while (used && index->dense[used - 1] == TM_ABSENT) used--;
    if (used == index->n_dense) return TM_OK;
    if (!used) {
        tm_mem_free(r->mem, index->dense, index->n_dense * sizeof *index->dense);
        index->dense = NULL;
    } else {
        uint32_t *d = tm_mem_realloc(r->mem, index->dense, index->n_dense * sizeof *d, used * sizeof *d);
        if (!d) return nomem(r);
        index->dense = d;
    }
    index->n_dense = used;
    return TM_OK;
}

/* Turns the places in s->ents that index holds into the offsets of their
 * entries' tags in the input. */
static void to_offsets(const tm_pf_reader *r, const tm_pf_seq *s, tm_iidmap *index) {
    for (size_t k = 0; k < index->n_dense; k++)
        if (index->dense[k] != TM_ABSENT) {
            const tm_pf_entry *e = &s->ents[index->dense[k]];
            index->dense[k] = (uint32_t)(e->msg - e->hdr - r->base);
        }
    for (size_t k = 0; index->sparse.len && k < index->sparse.cap; k++)
        if (index->sparse.vals[k] != TM_ABSENT) {
            const tm_pf_entry *e = &s->ents[index->sparse.vals[k]];
            index->sparse.vals[k] = (uint32_t)(e->msg - e->hdr - r->base);
        }
}

/* Epochs that added at least this many entries keep their own index. */
#define KEPT_INDEX_MIN_ENTRIES 64

static tm_pf_kept kept_of(const tm_pf_entry *e) {
    uint64_t p = (uint64_t)(uintptr_t)e->msg;
    return (tm_pf_kept){(uint32_t)p, (uint32_t)(p >> 32), e->len};
}

/* Are all of s's current entries in the input (none came out of a
 * compressed packet)? Each is in one of its epoch's InternedData messages
 * (blobs) that added entries, so those say it, but under Relay's reading,
 * which keeps no blobs. */
static bool entries_in_input(const tm_pf_reader *r, const tm_pf_seq *s) {
    const uint8_t *end = r->base + r->len;
    if (!(r->flags & TM_PF_RELAY)) {
        for (size_t i = 0; i < s->n_blobs; i++) {
            const tm_pf_blob *b = &s->blobs[i];
            if (b->count && !(b->bytes.data >= r->base && b->bytes.data + b->bytes.len <= end)) return false;
        }
        return true;
    }
    for (size_t e = 0; e < s->n_ents; e++)
        if (!(s->ents[e].msg >= r->base && s->ents[e].msg < end)) return false;
    return true;
}

/* TM_PF_KEEP_EPOCHS: the epoch that ends keeps its entries' bytes and its
 * index (see kept). */
static tm_status keep_epoch(tm_pf_reader *r, tm_pf_seq *s) {
    size_t n = s->n_ents, base = s->n_kept_ents;
    if (!n) return TM_OK;
    bool own = n >= KEPT_INDEX_MIN_ENTRIES;
    uint64_t key;
    for (size_t e = 0; !own && e < n; e++) own = !epoch_key(s->epoch, (int)s->ents[e].kind, s->ents[e].iid, &key);
    if (own) {
        size_t had = s->cap_kept;
        if (TM_VEC_RESERVE(r->mem, s->kept, s->cap_kept, (size_t)s->epoch + 1) != TM_OK) return nomem(r);
        memset(s->kept + had, 0, (s->cap_kept - had) * sizeof *s->kept); /* epochs without their own index */
        /* Entries in the input are added in its order: a generation sees
         * those before the offset where it ended. */
        bool in_input = r->len < UINT32_MAX - 1 && entries_in_input(r, s);
        tm_pf_kept *ents = NULL;
        if (in_input) {
            for (int k = 0; k < TM_PF_N_INTERNED_KINDS; k++) to_offsets(r, s, &s->newest[k]);
        } else {
            ents = tm_mem_alloc(r->mem, n * sizeof *ents);
            if (!ents) return nomem(r);
            for (size_t e = 0; e < n; e++) ents[e] = kept_of(&s->ents[e]);
        }
        s->kept[s->epoch] = (tm_pf_kept_epoch){s->newest, ents, ents ? n : 0};
        s->newest = NULL;
        for (int k = 0; k < TM_PF_N_INTERNED_KINDS; k++) TM_TRY(trim_index(r, &s->kept[s->epoch].index[k]));
        return TM_OK;
    }
    if (TM_VEC_RESERVE(r->mem, s->kept_ents, s->cap_kept_ents, base + n) != TM_OK) return nomem(r);
    for (size_t e = 0; e < n; e++) {
        s->kept_ents[base + e] = kept_of(&s->ents[e]);
        epoch_key(s->epoch, (int)s->ents[e].kind, s->ents[e].iid, &key);
        if (tm_u64map_put(r->mem, &s->by_epoch, key, (uint32_t)(base + e)) != TM_OK) return nomem(r);
    }
    s->n_kept_ents = base + n; /* below UINT32_MAX - 1: add_entry and copy_blob see to it */
    for (int k = 0; k < TM_PF_N_INTERNED_KINDS; k++) tm_iidmap_clear(r->mem, &s->newest[k]);
    return TM_OK;
}

/* A clear: a new epoch, whose entries start empty; the one that ends
 * becomes the one before. Without TM_PF_KEEP_EPOCHS nothing looks up an
 * older epoch again, so the one before it goes; with it, every epoch's
 * entries are kept (keep_epoch). */
static tm_status seq_clear(tm_pf_reader *r, tm_pf_seq *s) {
    bool keep = r->flags & TM_PF_KEEP_EPOCHS;
    if (keep) TM_TRY(keep_epoch(r, s));
    if (s->n_same != s->n_before) s->last_unfull = s->epoch;
    s->n_before = s->n_interned;
    s->n_same = 0;
    s->epoch++;
    s->n_interned = 0;
    tm_pf_entry *ents = s->old_ents;
    size_t cap = s->cap_old_ents;
    s->old_ents = s->ents, s->cap_old_ents = s->cap_ents;
    s->ents = ents, s->cap_ents = cap, s->n_ents = 0;
    if (!keep) { /* kept epochs compare nothing with the one before (same_since) */
        tm_iidmap *index = s->old_newest;
        s->old_newest = s->newest;
        s->newest = index;
        if (index)
            for (int k = 0; k < TM_PF_N_INTERNED_KINDS; k++) tm_iidmap_clear(r->mem, &index[k]);
    }
    tm_pf_blob *blobs = s->old_blobs;
    size_t cap_blobs = s->cap_old_blobs;
    s->old_blobs = s->blobs, s->cap_old_blobs = s->cap_blobs, s->n_old_blobs = s->n_blobs;
    s->blobs = blobs, s->cap_blobs = cap_blobs, s->n_blobs = 0;
    s->n_replayed = 0;
    s->old_first_class = s->first_class;
    s->first_class = 0;
    return new_gen(r, s, (tm_bytes){NULL, 0}, false);
}

/* Relay's converter: every sequence id (0 too) has tables, created when
 * interned data first arrives; a clear empties them if they exist; there is
 * no loss handling, so nothing is ever stale. */
static tm_status sequence_relay(tm_pf_reader *r, tm_pf_packet *pk) {
    tm_pf_seq *s;
    TM_TRY(get_seq(r, pk->seq_id, pk->start, &s));
    pk->seq = s;
    if ((pk->flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED) && s->seen) {
        TM_TRY(seq_clear(r, s));
        pk->cleared = true;
    }
    if (pk->interned.data) {
        s->seen = true;
        TM_TRY(add_interned(r, s, pk->interned));
    }
    pk->gen = s->gen;
    return TM_OK;
}

/* Trace Processor's order: clear or loss, then defaults, then interned
 * data; whether the packet is stale is for the consumer to act on, after
 * it has taken what stale packets still give (clock snapshots, stats). */
static tm_status sequence_update(tm_pf_reader *r, tm_pf_packet *pk) {
    if (r->flags & TM_PF_RELAY) return sequence_relay(r, pk);
    if (!pk->seq_id) {
        if (pk->flags & TM_PF_SEQ_NEEDS_INCREMENTAL_STATE)
            return tm_pf_fail(r, TM_ERR_MALFORMED, pk->start,
                              "a packet needs incremental state but has no trusted_packet_sequence_id");
        return TM_OK;
    }
    tm_pf_seq *s;
    TM_TRY(get_seq(r, pk->seq_id, pk->start, &s));
    pk->seq = s;
    pk->loss = pk->lost && s->seen && !pk->first_on_sequence;
    if (pk->flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED) {
        s->valid = true;
        TM_TRY(seq_clear(r, s));
        pk->cleared = true;
    } else if (pk->lost && s->seen) {
        /* Interned data stays readable by packets that do not need it. */
        s->valid = false;
        TM_TRY(new_gen(r, s, (tm_bytes){NULL, 0}, true));
    }
    s->seen = true;
    if (pk->defaults.data) TM_TRY(new_gen(r, s, pk->defaults, false));
    if (pk->interned.data) {
        if (s->valid) TM_TRY(add_interned(r, s, pk->interned));
        else pk->interned_skipped = true;
    }
    pk->stale = (pk->flags & TM_PF_SEQ_NEEDS_INCREMENTAL_STATE) && !s->valid;
    pk->gen = s->gen;
    return TM_OK;
}

/* Inflates a compressed_packets payload; its packets are read next. */
static tm_status enter_compressed(tm_pf_reader *r, const tm_pf_packet *pk, const uint8_t *packet_tag) {
    tm_bytes inner;
    const char *why = NULL;
    tm_status st = tm_inflate(r->arena, r->mem, pk->data, r->lim->max_inflated_bytes, &inner, &why);
    if (st != TM_OK) return tm_pf_fail(r, st, packet_tag, "compressed_packets: %s", why ? why : "cannot inflate");
    if (TM_VEC_RESERVE(r->mem, r->regions, r->cap_regions, r->n_regions + 1) != TM_OK) return nomem(r);
    r->regions[r->n_regions++] = (tm_pf_region){inner.data, inner.len, tm_pf_offset(r, packet_tag)};
    r->counts.compressed_packets++;
    r->inner = tm_pb_reader_of(inner);
    r->in_inner = true;
    return TM_OK;
}

/* Is the payload one a consumer reads? Clock snapshots and trace stats
 * always are; a packet its sequence cannot interpret (stale, or samples
 * and legacy descriptors without a sequence) is skipped unread. */
static bool payload_is_read(const tm_pf_packet *pk) {
    switch (pk->data_field) {
    case TM_PF_PACKET_CLOCK_SNAPSHOT: case TM_PF_PACKET_TRACE_STATS: case TM_PF_PACKET_TRACE_CONFIG:
    case TM_PF_PACKET_FTRACE_STATS:
        return true;
    case TM_PF_PACKET_PERF_SAMPLE: case TM_PF_PACKET_STREAMING_PROFILE_PACKET: case TM_PF_PACKET_STACK_SAMPLE:
    case TM_PF_PACKET_THREAD_DESCRIPTOR:
        return pk->seq && !pk->stale;
    default:
        return !pk->stale;
    }
}

/* TM_PF_KEEP_EPOCHS, at the end of the trace: every sequence's current
 * epoch is kept as the ended ones are (nothing is added to it any more),
 * and what only reading needed goes. */
static tm_status keep_all(tm_pf_reader *r) {
    if (!(r->flags & TM_PF_KEEP_EPOCHS) || r->kept_all) return TM_OK;
    for (size_t i = 0; i < r->n_seqs; i++) {
        tm_pf_seq *s = &r->seqs[i];
        TM_TRY(keep_epoch(r, s));
        release_reading(r->mem, s);
    }
    r->kept_all = true;
    return TM_OK;
}

/* Sets usual_seq_id after the general path, which alone changes which
 * sequence is last and whether its state is valid. */
static void note_usual_seq(tm_pf_reader *r) {
    const tm_pf_seq *s = r->last_seq != TM_ABSENT ? &r->seqs[r->last_seq] : NULL;
    r->usual_seq_id = !(r->flags & TM_PF_RELAY) && s && s->valid ? s->id : UINT64_MAX;
}

/* Is pk, which has only the fields scan_usual reads, a sample on the
 * sequence of the packet before, whose state is valid, that does not clear
 * it? Then sequence_update would only mark the sequence seen and give the
 * packet its generation, and the payload is read: next_sample does that,
 * without the general path's tests (the common packet). */
static inline bool usual_sample(const tm_pf_reader *r, const tm_pf_packet *pk) {
    return pk->data_field && pk->seq_id == r->usual_seq_id && !(pk->flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED);
}

/* What sequence_update, the payload check and resolve_time do for a
 * usual_sample packet, and the fields after data_field scan_packet left
 * (data and data_tag it set: the packet has a payload). */
static int next_sample(tm_pf_reader *r, tm_pf_packet *pk) {
    tm_pf_seq *s = &r->seqs[r->last_seq];
    s->seen = true;
    pk->seq = s;
    pk->gen = s->gen;
    pk->snapshot = NULL;
    memset(&pk->perf_read, 0, sizeof *pk - offsetof(tm_pf_packet, perf_read));
    if (!pk->has_timestamp)
        memset(&pk->has_time, 0, offsetof(tm_pf_packet, perf_read) - offsetof(tm_pf_packet, has_time));
    if (!(pk->data_field == TM_PF_PACKET_PERF_SAMPLE && pk->data.len && tm_pf_read_plain_perf_sample(pk)) &&
        tm_pf_check_payload(r, pk) != TM_OK)
        return TM_PF_ERROR;
    /* scan_usual reads no timestamp_clock_id: the generation's clock */
    if (pk->has_timestamp && resolve_time_in(r, pk, r->gens[s->gen].clock_id) != TM_OK) return TM_PF_ERROR;
    return TM_PF_PACKET;
}

/* Zeroes the fields after data_field that scan_packet left, but its
 * payload's when it has one: what the general path reads a packet into. */
static void clear_rest(tm_pf_packet *pk) {
    if (!pk->data_field) pk->data = (tm_bytes){NULL, 0}, pk->data_tag = NULL;
    memset(&pk->seq, 0, sizeof *pk - offsetof(tm_pf_packet, seq));
}

/* What the general path of tm_pf_next returns for a packet it reads no
 * further (a compressed_packets wrapper, whose packets come next). */
enum { NEXT_RECORD = 2 };

/* A Trace.packet record: rc TM_PF_PACKET with its bytes, TM_PF_END or
 * TM_PF_ERROR. */
typedef struct packet_record {
    int rc;
    tm_bytes bytes;
} packet_record;

/* For the rare paths of tm_pf_next: out of line, whatever the compiler
 * thinks of a function called once, so that the usual packet's path keeps
 * few registers to save. */
#if defined(__GNUC__)
#define OUT_OF_LINE __attribute__((noinline))
#else
#define OUT_OF_LINE
#endif

/* next_packet_record for any record the inline case does not take, with
 * its errors; it also goes past records that are not packets and out of
 * inflated payloads that end. */
OUT_OF_LINE static packet_record next_packet_record_slow(tm_pf_reader *r) {
    tm_pb_field f;
    /* Trace Processor's first test of a trace's type: it opens with a
     * Trace.packet record (the inline case takes only those). */
    if (!r->in_inner && r->outer.p == r->base && r->len && r->base[0] != 0x0a) {
        tm_pf_fail(r, TM_ERR_MALFORMED, r->base, "not a Perfetto trace: it does not start with a TracePacket");
        return (packet_record){TM_PF_ERROR, {NULL, 0}};
    }
    for (;;) {
        tm_pb_reader *pb = r->in_inner ? &r->inner : &r->outer;
        const uint8_t *record = pb->p;
        int rc = tm_pb_next(pb, &f);
        /* A trace cut off inside its last packet (a partial copy, a killed
         * writer): Trace Processor keeps every complete packet, and so does
         * the reader unless strict (Relay's converter rejects the trace). */
        if (rc == TM_PB_ERROR && !r->in_inner && pb->err_code == TM_ERR_TRUNCATED &&
            !(r->flags & (TM_PF_STRICT | TM_PF_RELAY))) {
            r->counts.truncated = true;
            r->counts.truncated_at = (uint64_t)(record - r->base);
            return (packet_record){keep_all(r) == TM_OK ? TM_PF_END : TM_PF_ERROR, {NULL, 0}};
        }
        if (rc == TM_PB_DONE) {
            if (!r->in_inner) return (packet_record){keep_all(r) == TM_OK ? TM_PF_END : TM_PF_ERROR, {NULL, 0}};
            r->in_inner = false;
            continue;
        }
        if (rc == TM_PB_ERROR) {
            tm_pf_pb_fail(r, pb, "Trace");
            return (packet_record){TM_PF_ERROR, {NULL, 0}};
        }
        if (f.num != TM_PF_TRACE_PACKET) continue; /* Trace Processor skips other top-level fields */
        if (f.wire != TM_PB_LEN) {
            tm_pf_fail(r, TM_ERR_MALFORMED, f.start, "Trace.packet has wire type %u, expected 2", f.wire);
            return (packet_record){TM_PF_ERROR, {NULL, 0}};
        }
        if (f.bytes.len > r->lim->max_packet_bytes) {
            tm_pf_fail(r, TM_ERR_LIMIT, f.start, "packet of %zu bytes exceeds max_packet_bytes %llu", f.bytes.len,
                       (unsigned long long)r->lim->max_packet_bytes);
            return (packet_record){TM_PF_ERROR, {NULL, 0}};
        }
        r->counts.packets++;
        r->packet_tag = f.start;
        return (packet_record){TM_PF_PACKET, f.bytes};
    }
}

/* Is the record at p (before end) a Trace.packet of under 128 bytes, in
 * bounds and within max_packet_bytes (its tag and length a byte each)? */
static inline bool small_record(const tm_pf_reader *r, const uint8_t *p, const uint8_t *end) {
    return end - p >= 2 && p[0] == (TM_PF_TRACE_PACKET << 3 | TM_PB_LEN) && p[1] < 0x80 && p[1] <= end - p - 2 &&
           p[1] <= r->lim->max_packet_bytes;
}

/* The next Trace.packet record, counted (r->packet_tag is its tag). A
 * packet of under 128 bytes (most sample packets) is read inline. */
static inline packet_record next_packet_record(tm_pf_reader *r) {
    tm_pb_reader *pb = r->in_inner ? &r->inner : &r->outer;
    const uint8_t *p = pb->p;
    if (TM_LIKELY(small_record(r, p, pb->end))) {
        size_t len = p[1];
        pb->p = p + 2 + len;
        r->counts.packets++;
        r->packet_tag = p;
        return (packet_record){TM_PF_PACKET, {p + 2, len}};
    }
    return next_packet_record_slow(r);
}

/* The rest of tm_pf_next for a packet scan_packet read that is not a
 * usual sample: TM_PF_PACKET, TM_PF_ERROR or NEXT_RECORD. Out of line, so
 * that the usual packet's path stays small. */
OUT_OF_LINE static int read_packet(tm_pf_reader *r, tm_pf_packet *pk, const uint8_t *packet_tag) {
    clear_rest(pk);
    if (pk->data_field == TM_PF_PACKET_COMPRESSED_PACKETS) {
        /* Only the inner packets count: the wrapper's other fields are ignored. */
        if (r->in_inner) {
            r->counts.nested_compressed++;
            return NEXT_RECORD;
        }
        return enter_compressed(r, pk, packet_tag) == TM_OK ? NEXT_RECORD : TM_PF_ERROR;
    }
    if (sequence_update(r, pk) != TM_OK) return TM_PF_ERROR;
    if (payload_is_read(pk) && tm_pf_check_payload(r, pk) != TM_OK) return TM_PF_ERROR;
    if (pk->data_field == TM_PF_PACKET_CLOCK_SNAPSHOT && read_snapshot(r, pk) != TM_OK) return TM_PF_ERROR;
    if (pk->has_timestamp && !pk->stale && !consumed_untimed(pk->data_field) && resolve_time(r, pk) != TM_OK)
        return TM_PF_ERROR;
    return TM_PF_PACKET;
}

int tm_pf_next(tm_pf_reader *r, tm_pf_packet *pk) {
    for (;;) {
        packet_record rec = next_packet_record(r);
        if (rec.rc != TM_PF_PACKET) return rec.rc;
        if (rec.bytes.len == 0) continue; /* an empty packet says nothing */
        bool usual;
        if (scan_packet(r, rec.bytes, pk, &usual) != TM_OK) return TM_PF_ERROR;
        if (usual && usual_sample(r, pk)) return next_sample(r, pk);
        int rc = read_packet(r, pk, r->packet_tag);
        note_usual_seq(r);
        if (rc != NEXT_RECORD) return rc;
    }
}

/* The varint field num under its one-byte tag at p: where it ends, its
 * value in *v; NULL for any other field or form. */
static inline const uint8_t *small_varint_field(const uint8_t *p, const uint8_t *end, uint32_t num, uint64_t *v) {
    return end - p >= 2 && p[0] == (num << 3 | TM_PB_VARINT) ? tm_pb_varint_fast(p + 1, end, v) : NULL;
}

/* A PerfSample [p, end) as writers write it: its cpu (or none), pid, tid
 * and callstack_iid, in that order, nothing else. Reads into *out what
 * tm_pf_read_plain_perf_sample reads of it, without its loop; false for
 * any other form. */
static inline bool read_perf_in_order(const uint8_t *p, const uint8_t *end, tm_pf_sample *out) {
    const uint8_t *q;
    uint64_t cpu, pid, tid;
    if ((q = small_varint_field(p, end, TM_PF_PERF_SAMPLE_CPU, &cpu))) p = q;
    if (!(p = small_varint_field(p, end, TM_PF_PERF_SAMPLE_PID, &pid)) ||
        !(p = small_varint_field(p, end, TM_PF_PERF_SAMPLE_TID, &tid)) ||
        !(p = small_varint_field(p, end, TM_PF_PERF_SAMPLE_CALLSTACK_IID, &out->cs)) || p != end)
        return false;
    out->pid = (uint32_t)pid, out->tid = (uint32_t)tid, out->count = 0;
    out->has_pid = out->has_cs = true;
    return true;
}

/* Is TracePacket [p, end), of under 128 bytes, a usual PerfSample packet
 * (tm_pf_next_run) whose payload is as writers write it, but maybe on
 * another sequence? Then *out holds its payload and what the payload check
 * reads of it (tm_pf_packet's perf_* fields), *ts its timestamp and
 * *seq_id its sequence id, as scan_packet and the check read them; nothing
 * else is changed. */
static inline bool usual_perf_sample(const uint8_t *p, const uint8_t *end, tm_pf_sample *out, uint64_t *ts,
                                     uint32_t *seq_id) {
    const uint8_t *e;
    uint32_t flags;
    if (end - p < 2 || p[0] != (TM_PF_PACKET_TIMESTAMP << 3 | TM_PB_VARINT) || !(e = timestamp_varint(p + 1, end, ts)))
        return false;
    p = e;
    /* The sequence id and flags, then the PerfSample, the last field: in a
     * packet this small its length is one byte. */
    if (end - p < 7 || !small_pair(p, TM_PF_PACKET_SEQUENCE_ID, TM_PF_PACKET_SEQUENCE_FLAGS, seq_id, &flags) ||
        p[4] != LEN_TAG_0(TM_PF_PACKET_PERF_SAMPLE) || p[5] != LEN_TAG_1(TM_PF_PACKET_PERF_SAMPLE) ||
        p[6] != end - p - 7 || !p[6])
        return false;
    if (flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED) return false;
    out->data = p + 7;
    return read_perf_in_order(p + 7, end, out); /* any other: tm_pf_next's reading */
}

/* The shape of a run's usual PerfSample packet (usual_perf_sample took
 * it), which the packets after it on its sequence mostly repeat: its record
 * byte for byte but the values of its varints (the timestamp, cpu, pid, tid
 * and callstack_iid), of which only the high bits are compared, so each
 * keeps its length. A packet of the same shape has the same fields at the
 * same places, the same sequence id and flags, and its record is small, so
 * it is read at those places without a test a field: the same values
 * usual_perf_sample reads. */
enum { SHAPE_WORDS = 4, SHAPE_BYTES = SHAPE_WORDS * 8, SHAPE_READ = SHAPE_BYTES + 8 };
typedef struct run_shape {
    uint64_t mask[SHAPE_WORDS], want[SHAPE_WORDS];
    uint64_t ts_keep, cs_keep; /* tm_pb_varint_keep of their lengths */
    uint8_t len;               /* the record's bytes, its tag and length included */
    uint8_t data_at, ts_at, ts_len, pid_at, pid_len, tid_at, tid_len, cs_at, cs_len;
} run_shape;

/* The length of the varint at p, which ends before end. */
static unsigned varint_len(const uint8_t *p) {
    unsigned n = 1;
    while (p[n - 1] >= 0x80) n++;
    return n;
}

/* Marks the varint field's value at p (after its one-byte tag) in the
 * shape's masks: its high bits alone are compared. Its offset and length:
 * *at and *len. False when it is longer than tm_pb_varint_of_len reads. */
static bool shape_varint(const uint8_t *rec, const uint8_t *p, uint8_t *mask, uint8_t *at, uint8_t *len) {
    unsigned n = varint_len(p);
    if (n > 8) return false;
    *at = (uint8_t)(p - rec), *len = (uint8_t)n;
    for (unsigned i = 0; i < n; i++) mask[*at + i] = 0x80;
    return true;
}

/* The shape of the usual PerfSample packet whose record is at rec; false
 * when it has none (its record is over SHAPE_BYTES, or a varint over eight
 * bytes). */
static bool learn_shape(const uint8_t *rec, run_shape *sh) {
    size_t len = 2 + (size_t)rec[1];
    if (len > SHAPE_BYTES) return false;
    uint8_t mask[SHAPE_BYTES] = {0}, want[SHAPE_BYTES] = {0}, cpu_at, cpu_len;
    memset(mask, 0xff, len);
    /* the Trace.packet tag and length, the timestamp's tag */
    if (!shape_varint(rec, rec + 3, mask, &sh->ts_at, &sh->ts_len)) return false;
    /* the sequence id and flags (a byte each), the PerfSample's tag and length */
    const uint8_t *p = rec + sh->ts_at + sh->ts_len + 4 + 3;
    sh->data_at = (uint8_t)(p - rec);
    if (p[0] == (TM_PF_PERF_SAMPLE_CPU << 3 | TM_PB_VARINT)) {
        if (!shape_varint(rec, p + 1, mask, &cpu_at, &cpu_len)) return false;
        p += 1 + cpu_len;
    }
    if (!shape_varint(rec, p + 1, mask, &sh->pid_at, &sh->pid_len)) return false;
    p += 1 + sh->pid_len;
    if (!shape_varint(rec, p + 1, mask, &sh->tid_at, &sh->tid_len)) return false;
    p += 1 + sh->tid_len;
    if (!shape_varint(rec, p + 1, mask, &sh->cs_at, &sh->cs_len)) return false;
    memcpy(want, rec, len);
    memcpy(sh->mask, mask, sizeof mask);
    memcpy(sh->want, want, sizeof want);
    for (int i = 0; i < SHAPE_WORDS; i++) sh->want[i] &= sh->mask[i];
    sh->len = (uint8_t)len;
    sh->ts_keep = tm_pb_varint_keep(sh->ts_len);
    sh->cs_keep = tm_pb_varint_keep(sh->cs_len);
    return true;
}

static inline uint64_t load_word(const uint8_t *p) {
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

/* Is the record at rec, with SHAPE_READ bytes readable there, of shape sh? */
static inline bool has_shape(const uint8_t *rec, const run_shape *sh) {
    return (((load_word(rec) ^ sh->want[0]) & sh->mask[0]) | ((load_word(rec + 8) ^ sh->want[1]) & sh->mask[1]) |
            ((load_word(rec + 16) ^ sh->want[2]) & sh->mask[2]) |
            ((load_word(rec + 24) ^ sh->want[3]) & sh->mask[3])) == 0;
}

/* What usual_perf_sample reads of a record of shape sh. */
static inline void read_shaped(const uint8_t *rec, const run_shape *sh, tm_pf_sample *out, uint64_t *ts) {
    *ts = tm_pb_varint_of_len(rec + sh->ts_at, sh->ts_len, sh->ts_keep);
    out->data = rec + sh->data_at;
    out->pid = (uint32_t)tm_pb_varint_of_len(rec + sh->pid_at, sh->pid_len, tm_pb_varint_keep(sh->pid_len));
    out->tid = (uint32_t)tm_pb_varint_of_len(rec + sh->tid_at, sh->tid_len, tm_pb_varint_keep(sh->tid_len));
    out->cs = tm_pb_varint_of_len(rec + sh->cs_at, sh->cs_len, sh->cs_keep);
    out->count = 0;
    out->has_pid = out->has_cs = true;
}

/* resolve_time_in for a run's sample of timestamp ts in clock clock_id
 * (not the trace's) of sequence seq_id. */
OUT_OF_LINE static tm_status run_clock_time(tm_pf_reader *r, uint64_t ts, uint32_t seq_id, uint32_t clock_id,
                                            tm_pf_sample *out) {
    tm_pf_packet pk;
    pk.timestamp = ts, pk.seq_id = seq_id;
    TM_TRY(resolve_time_in(r, &pk, clock_id));
    tm_pf_sample_time(out, &pk);
    return TM_OK;
}

/* A usual sample packet on sequence id, not the last one: when its state
 * is valid, the general path would make it the last one (get_seq) and the
 * one of usual_seq_id (note_usual_seq), changing nothing else in it; so
 * does this. */
static bool switch_usual_seq(tm_pf_reader *r, uint32_t id) {
    uint32_t i = tm_u64map_get(&r->seq_by_id, id);
    if (i == TM_ABSENT || !r->seqs[i].valid || !r->seqs[i].seen) return false;
    r->last_seq = i;
    r->usual_seq_id = id;
    return true;
}

int tm_pf_next_run(tm_pf_reader *r, tm_pf_sample_run *run) {
    run->n = 0;
    if (r->flags & TM_PF_RELAY) return TM_PF_PACKET;
    tm_pb_reader *pb = r->in_inner ? &r->inner : &r->outer;
    int rc = TM_PF_PACKET;
    size_t n = 0;
    /* In locals: the stores to run may alias them. */
    tm_pb_reader at = *pb;
    uint64_t usual_seq_id = r->usual_seq_id;
    uint32_t clock_id = 0;
    run_shape shape;
    bool shaped = false;
    while (n < TM_PF_RUN_MAX) {
        const uint8_t *tag = at.p, *end;
        tm_pf_sample *out = &run->samples[n];
        uint64_t ts;
        uint32_t seq_id = (uint32_t)usual_seq_id;
        if (shaped && at.end - tag >= SHAPE_READ && has_shape(tag, &shape)) {
            read_shaped(tag, &shape, out, &ts);
            end = tag + shape.len;
        } else {
            if (!small_record(r, tag, at.end)) break;
            end = tag + 2 + tag[1];
            if (!usual_perf_sample(tag + 2, end, out, &ts, &seq_id)) break;
            if (seq_id != usual_seq_id && (n || !switch_usual_seq(r, seq_id))) break;
            if (!n) {
                /* What tm_pf_next does for each: the sequence needs nothing (it
                 * was seen, its state is valid), the time is in the
                 * generation's clock. */
                tm_pf_seq *s = &r->seqs[r->last_seq];
                usual_seq_id = s->id;
                run->seq = s;
                run->gen = s->gen;
                clock_id = r->gens[s->gen].clock_id;
            }
            shaped = learn_shape(tag, &shape);
        }
        at.p = end;
        out->tag = tag, out->start = tag + 2;
        n++;
        if (clock_id) {
            if (run_clock_time(r, ts, seq_id, clock_id, out) != TM_OK) {
                rc = TM_PF_ERROR; /* this packet read, but not given */
                break;
            }
        } else {
            tm_pf_packet pk; /* in the trace's clock: inline, in registers */
            pk.timestamp = ts;
            resolve_time_in(r, &pk, 0);
            tm_pf_sample_time(out, &pk);
        }
    }
    if (n) {
        pb->p = at.p;
        r->packet_tag = run->samples[n - 1].tag;
        r->counts.packets += n;
    }
    run->n = rc == TM_PF_PACKET ? n : n - 1;
    return rc;
}
