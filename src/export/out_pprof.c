/*
 * out_pprof.c — profile model -> pprof (profile.proto, package
 * perftools.profiles), gzip
 * compressed or raw.
 *
 * One Sample per profile sample of the selected threads, leaf first, with
 * values [weight, weight * period of its thread] for the sample types
 * samples/count and cpu/nanoseconds (a thread's period is its counted CPU
 * time per sample when the trace counts it, see tm_thread_periods), and labels thread_id, pid, thread_name
 * and timestamp_ns (Unix time when the trace has a realtime clock, else
 * trace time; left out for folded input, which has no time). Locations are
 * the profile's frames in first-use order, functions are deduplicated by
 * (name, system_name, filename), mappings are the profile's used mappings.
 *
 * Samples are grouped by (thread, stack), in time order within a group
 * (pprof gives sample order no meaning; see group_samples), then written in
 * one streaming pass: the location ids of each stack and the labels of
 * each thread are encoded once and copied. Locations, functions, mappings
 * and the string table follow the samples (protobuf lets fields of a
 * message come in any order). Compressed output is a multi-member gzip
 * file (Go's gzip reader and pprof read it as one stream): the samples go
 * through gzip_records.c, which matches each sample against the one
 * before it, and the rest through libdeflate in CHUNK-sized slices. Memory
 * beyond the profile: 8 bytes per selected sample plus a few MiB, however
 * large the output.
 */
#include <libdeflate.h>
#include <stdio.h>

#include "common/limits.h"     /* TM_MAX_SYMBOL_LINES */
#include "profile/aggregate.h"    /* tm_thread_select, tm_thread_periods, tm_frame_labels */
#include "wire/gzip_records.h" /* tm_gzrec */
#include "wire/pb_write.h"  /* tm_pbw */

enum {
    PROFILE_SAMPLE_TYPE = 1, PROFILE_SAMPLE = 2, PROFILE_MAPPING = 3, PROFILE_LOCATION = 4,
    PROFILE_FUNCTION = 5, PROFILE_STRING_TABLE = 6, PROFILE_TIME_NANOS = 9, PROFILE_DURATION_NANOS = 10,
    PROFILE_PERIOD_TYPE = 11, PROFILE_PERIOD = 12, PROFILE_COMMENT = 13, PROFILE_DEFAULT_SAMPLE_TYPE = 14,
    VALUE_TYPE_TYPE = 1, VALUE_TYPE_UNIT = 2,
    SAMPLE_LOCATION_ID = 1, SAMPLE_VALUE = 2, SAMPLE_LABEL = 3,
    LABEL_KEY = 1, LABEL_STR = 2, LABEL_NUM = 3, LABEL_NUM_UNIT = 4,
    MAPPING_ID = 1, MAPPING_MEMORY_START = 2, MAPPING_MEMORY_LIMIT = 3, MAPPING_FILE_OFFSET = 4,
    MAPPING_FILENAME = 5, MAPPING_BUILD_ID = 6, MAPPING_HAS_FUNCTIONS = 7, MAPPING_HAS_FILENAMES = 8,
    MAPPING_HAS_LINE_NUMBERS = 9, MAPPING_HAS_INLINE_FRAMES = 10,
    LOCATION_ID = 1, LOCATION_MAPPING_ID = 2, LOCATION_ADDRESS = 3, LOCATION_LINE = 4,
    LINE_FUNCTION_ID = 1, LINE_LINE = 2,
    FUNCTION_ID = 1, FUNCTION_NAME = 2, FUNCTION_SYSTEM_NAME = 3, FUNCTION_FILENAME = 4
};

/* Slices of about a megabyte compress almost as well as the whole stream
 * and keep the working set small. */
#define CHUNK (1u << 20)
/* libdeflate's fastest level: profiles repeat themselves, so the ratio
 * barely changes with the level while the time does. */
#define GZIP_LEVEL 1
#define GZREC_STAGING (256u << 10)

/* The strings every profile has, interned first in this order. */
enum { S_EMPTY, S_SAMPLES, S_COUNT, S_CPU, S_NANOSECONDS, S_THREAD_ID, S_PID, S_THREAD_NAME, S_TIMESTAMP, N_FIXED };
static const char *const fixed_strings[N_FIXED] = {"",    "samples",   "count",       "cpu",
                                                   "nanoseconds", "thread_id", "pid", "thread_name",
                                                   "timestamp_ns"};

/* ---- string table: deduplicated, numbered in first-use order ---- */

typedef struct strtab {
    tm_str *v;
    size_t n, cap;
    tm_idxset index;
} strtab;

static uint32_t str_hash(tm_str s) {
    uint64_t h = tm_hash_bytes(0, s);
    return (uint32_t)(h ^ (h >> 32));
}

static int str_eq(const void *ctx, uint32_t idx, const void *key) {
    return tm_bytes_eq(((const strtab *)ctx)->v[idx], *(const tm_str *)key);
}

static tm_status str_index(tm_mem *mem, strtab *t, tm_str s, uint32_t *out) {
    uint32_t h = str_hash(s);
    uint32_t idx = tm_idxset_find(&t->index, h, str_eq, t, &s);
    if (idx == TM_ABSENT) {
        if (t->n >= UINT32_MAX - 1) return TM_ERR_LIMIT;
        TM_TRY(TM_VEC_RESERVE(mem, t->v, t->cap, t->n + 1));
        idx = (uint32_t)t->n;
        TM_TRY(tm_idxset_add(mem, &t->index, h, idx));
        t->v[t->n++] = s;
    }
    *out = idx;
    return TM_OK;
}

static tm_str cstr(const char *s) {
    tm_str v = {(const uint8_t *)s, strlen(s)};
    return v;
}

/* ---- functions: deduplicated by their three string indices ---- */

typedef struct func {
    uint32_t name, system_name, filename;
} func;

typedef struct functab {
    func *v;
    size_t n, cap;
    tm_idxset index;
} functab;

static uint32_t func_hash(const func *f) {
    return (uint32_t)tm_hash_u64(((uint64_t)f->name << 32 | f->system_name) ^ tm_hash_u64(f->filename));
}

static int func_eq(const void *ctx, uint32_t idx, const void *key) {
    const func *g = &((const functab *)ctx)->v[idx], *f = key;
    return g->name == f->name && g->system_name == f->system_name && g->filename == f->filename;
}

/* *id: the function's id (from 1). */
static tm_status func_id(tm_mem *mem, functab *t, const func *f, uint32_t *id) {
    uint32_t h = func_hash(f);
    uint32_t idx = tm_idxset_find(&t->index, h, func_eq, t, f);
    if (idx == TM_ABSENT) {
        TM_TRY(TM_VEC_RESERVE(mem, t->v, t->cap, t->n + 1));
        idx = (uint32_t)t->n;
        TM_TRY(tm_idxset_add(mem, &t->index, h, idx));
        t->v[t->n++] = *f;
    }
    *id = idx + 1;
    return TM_OK;
}

/* ---- output: raw, or one gzip member per slice ---- */

typedef struct out_stream {
    const tm_sink *sink;
    struct libdeflate_compressor *gz; /* NULL: uncompressed */
    uint8_t *packed;                  /* compressed slice */
    size_t packed_cap;
} out_stream;

static tm_status flush_slice(void *ctx, const uint8_t *data, size_t len) {
    out_stream *o = ctx;
    if (!o->gz) return o->sink->write(o->sink->ctx, data, len) ? TM_ERR_IO : TM_OK;
    size_t n = libdeflate_gzip_compress(o->gz, data, len, o->packed, o->packed_cap);
    if (!n) return TM_ERR_IO; /* cannot happen: packed_cap is the bound */
    return o->sink->write(o->sink->ctx, o->packed, n) ? TM_ERR_IO : TM_OK;
}

/* ---- the writer ---- */

/* Per-thread bytes shared by its samples: the values of a weight-1 sample,
 * then the thread_id, pid and thread_name labels. */
typedef struct thread_enc {
    uint8_t bytes[96];
    uint8_t values_len, len;
} thread_enc;

/* A location: a frame and the frames it was inlined into, leaf first (a
 * run of TM_FRAME_INLINED frames and the one after them, all of one
 * address), at p->frame_ids[at, at + n). */
typedef struct loc_info {
    uint32_t frame, n;
    size_t at;
} loc_info;

enum { MAP_HAS_FUNCTIONS = 1, MAP_HAS_FILENAMES = 2, MAP_HAS_LINE_NUMBERS = 4, MAP_HAS_INLINE_FRAMES = 8 };

typedef struct pprof_writer {
    const tm_profile *p;
    tm_mem *mem;
    uint8_t *sel;
    int64_t *period, overall_period;
    tm_period_sources period_sources;
    tm_frame_labels labels;
    tm_arena arena; /* build-id hex strings */
    strtab strings;
    functab funcs;
    thread_enc *threads;
    /* Location ids of each stack, encoded as a whole location_id field. */
    size_t *stack_off;  /* into stack_bytes; SIZE_MAX: not encoded yet */
    uint32_t *stack_len;
    uint8_t *stack_bytes;
    size_t n_stack_bytes, cap_stack_bytes;
    uint32_t *loc_of;   /* loc_of[frame]: location id of the run it starts, 0 none yet */
    loc_info *locs;     /* locs[id - 1] */
    size_t n_locs, cap_locs;
    uint32_t *map_id;   /* map_id[mapping]: mapping id, 0 unused */
    uint8_t *map_has;   /* MAP_HAS_* of the mapping's frames */
    uint32_t *func_of;  /* func_of[frame]: function id, 0 none yet */
    uint8_t *rec;       /* one encoded sample */
    size_t cap_rec;
    tm_gzrec *gzrec;    /* compressed output: the samples' compressor */
    uint8_t *gzrec_in, *gzrec_out;
    uint8_t *chunk;
    out_stream out;
    tm_pbw w;
    char comment_period[400], comment_time[96];
} pprof_writer;

static void writer_release(pprof_writer *x) {
    const tm_profile *p = x->p;
    tm_mem *mem = x->mem;
    tm_thread_selection_free(p, x->sel);
    tm_thread_periods_free(p, x->period);
    tm_frame_labels_release(p, &x->labels);
    tm_arena_release(&x->arena);
    tm_mem_free(mem, x->strings.v, x->strings.cap * sizeof *x->strings.v);
    tm_idxset_free(mem, &x->strings.index);
    tm_mem_free(mem, x->funcs.v, x->funcs.cap * sizeof *x->funcs.v);
    tm_idxset_free(mem, &x->funcs.index);
    tm_mem_free(mem, x->threads, (p->n_threads + 1) * sizeof *x->threads);
    tm_mem_free(mem, x->stack_off, (p->n_stacks + 1) * sizeof *x->stack_off);
    tm_mem_free(mem, x->stack_len, (p->n_stacks + 1) * sizeof *x->stack_len);
    tm_mem_free(mem, x->stack_bytes, x->cap_stack_bytes);
    tm_mem_free(mem, x->loc_of, (p->n_frames + 1) * sizeof *x->loc_of);
    tm_mem_free(mem, x->locs, x->cap_locs * sizeof *x->locs);
    tm_mem_free(mem, x->map_id, (p->n_mappings + 1) * sizeof *x->map_id);
    tm_mem_free(mem, x->map_has, p->n_mappings + 1);
    tm_mem_free(mem, x->func_of, (p->n_frames + 1) * sizeof *x->func_of);
    tm_mem_free(mem, x->rec, x->cap_rec);
    tm_mem_free(mem, x->gzrec, sizeof *x->gzrec);
    tm_mem_free(mem, x->gzrec_in, GZREC_STAGING);
    tm_mem_free(mem, x->gzrec_out, CHUNK);
    tm_mem_free(mem, x->chunk, CHUNK);
    tm_mem_free(mem, x->out.packed, x->out.packed_cap);
    if (x->out.gz) libdeflate_free_compressor(x->out.gz);
}

static void *zalloc(tm_mem *mem, size_t size) {
    void *v = tm_mem_alloc(mem, size);
    if (v) memset(v, 0, size);
    return v;
}

/* A small length-delimited message built in scratch (a few KiB at most). */
static void put_small(tm_pbw *w, uint32_t field, const uint8_t *msg, const uint8_t *end) {
    size_t n = (size_t)(end - msg);
    uint8_t *p = tm_pbw_reserve(w, n + 8);
    p = tm_pbw_len(p, field, n);
    memcpy(p, msg, n);
    tm_pbw_commit(w, p + n);
}

static void put_uint(tm_pbw *w, uint32_t field, uint64_t v) {
    tm_pbw_commit(w, tm_pbw_uint(tm_pbw_reserve(w, 2 * TM_PBW_VARINT_MAX), field, v));
}

static void put_value_type(tm_pbw *w, uint32_t field, uint32_t type, uint32_t unit) {
    uint8_t m[32], *e = tm_pbw_uint(m, VALUE_TYPE_TYPE, type);
    put_small(w, field, m, tm_pbw_uint(e, VALUE_TYPE_UNIT, unit));
}

static uint8_t *put_num_label(uint8_t *p, uint32_t key, uint64_t num) {
    uint8_t m[32], *e = tm_pbw_uint(tm_pbw_uint(m, LABEL_KEY, key), LABEL_NUM, num);
    p = tm_pbw_len(p, SAMPLE_LABEL, (size_t)(e - m));
    memcpy(p, m, (size_t)(e - m));
    return p + (e - m);
}

/* Frames the Sample whose fields run from head to q (written past the room
 * left before head for its tag and length) and hands it to the output. */
static void emit_sample(pprof_writer *x, uint8_t *head, const uint8_t *q) {
    size_t body = (size_t)(q - head), hdr = 1 + tm_pbw_varint_len(body);
    tm_pbw_len(head - hdr, PROFILE_SAMPLE, body);
    if (x->gzrec) tm_gzrec_put(x->gzrec, head - hdr, hdr + body);
    else tm_pbw_append(&x->w, head - hdr, hdr + body);
}

/* Adds the Label encoded in m..e to the Sample being written at q. */
static uint8_t *put_label(uint8_t *q, const uint8_t *m, const uint8_t *e) {
    q = tm_pbw_len(q, SAMPLE_LABEL, (size_t)(e - m));
    memcpy(q, m, (size_t)(e - m));
    return q + (e - m);
}

static tm_status encode_threads(pprof_writer *x) {
    const tm_profile *p = x->p;
    for (size_t i = 0; i < p->n_threads; i++) {
        if (!x->sel[i]) continue;
        const tm_prof_thread *th = &p->threads[i];
        thread_enc *te = &x->threads[i];
        char buf[32];
        tm_str label = tm_thread_label(p, (uint32_t)i, buf);
        if (label.data == (const uint8_t *)buf) { /* made up from the tid: keep a copy */
            uint8_t *copy = tm_arena_alloc(&x->arena, label.len);
            if (!copy) return TM_ERR_NOMEM;
            memcpy(copy, buf, label.len);
            label.data = copy;
        }
        uint32_t name;
        TM_TRY(str_index(x->mem, &x->strings, label, &name));
        uint64_t period = (uint64_t)(x->period[i] > 0 ? x->period[i] : 0);
        uint8_t *q = te->bytes, *v = tm_pbw_len(q, SAMPLE_VALUE, 1 + tm_pbw_varint_len(period));
        q = tm_pbw_varint(tm_pbw_varint(v, 1), period);
        te->values_len = (uint8_t)(q - te->bytes);
        q = put_num_label(q, S_THREAD_ID, (uint64_t)th->tid);
        if (th->pid) q = put_num_label(q, S_PID, (uint64_t)th->pid);
        uint8_t m[16], *e = tm_pbw_uint(tm_pbw_uint(m, LABEL_KEY, S_THREAD_NAME), LABEL_STR, name);
        te->len = (uint8_t)(put_label(q, m, e) - te->bytes);
    }
    return TM_OK;
}

/* Encodes the location_id field of a stack seen for the first time,
 * numbering its new frames as locations. */
static tm_status encode_stack(pprof_writer *x, uint32_t stack) {
    const tm_profile *p = x->p;
    const tm_prof_stack *s = &p->stacks[stack];
    const uint32_t *frames = tm_profile_stack_frames(p, s);
    size_t payload = 0;
    for (uint32_t i = 0; i < s->len; i++) {
        uint32_t f = frames[i], start = i;
        while (i + 1 < s->len && (p->frames[frames[i]].flags & TM_FRAME_INLINED)) i++;
        if (!x->loc_of[f]) {
            TM_TRY(TM_VEC_RESERVE(x->mem, x->locs, x->cap_locs, x->n_locs + 1));
            x->locs[x->n_locs++] = (loc_info){f, i - start + 1, s->off + start};
            x->loc_of[f] = (uint32_t)x->n_locs;
        }
        payload += tm_pbw_varint_len(x->loc_of[f]);
    }
    /* at least one byte, so stack_bytes exists even when every stack is
     * empty (pointer arithmetic on NULL is undefined) */
    size_t need = s->len ? payload + 1 + TM_PBW_VARINT_MAX : 1;
    TM_TRY(TM_VEC_RESERVE(x->mem, x->stack_bytes, x->cap_stack_bytes, x->n_stack_bytes + need));
    uint8_t *start = x->stack_bytes + x->n_stack_bytes, *q = start;
    if (s->len) {
        q = tm_pbw_len(q, SAMPLE_LOCATION_ID, payload);
        for (uint32_t i = 0; i < s->len; i++) {
            q = tm_pbw_varint(q, x->loc_of[frames[i]]);
            while (i + 1 < s->len && (p->frames[frames[i]].flags & TM_FRAME_INLINED)) i++;
        }
    }
    if ((size_t)(q - start) > UINT32_MAX) return TM_ERR_LIMIT;
    /* room for a sample with this stack: header, labels, tail */
    TM_TRY(TM_VEC_RESERVE(x->mem, x->rec, x->cap_rec, (size_t)(q - start) + 256));
    x->stack_off[stack] = x->n_stack_bytes;
    x->stack_len[stack] = (uint32_t)(q - start);
    x->n_stack_bytes += (size_t)(q - start);
    return TM_OK;
}

/* The selected samples grouped by (thread, stack), in time order within a
 * group (a counting sort). pprof gives sample order no meaning, and this
 * order makes consecutive samples differ only in their timestamp, which is
 * what lets the record compressor keep up: in time order, threads and
 * stacks interleave and a sample's previous occurrence lies far beyond
 * deflate's 32 KiB window. Each sample keeps only its payload, read in
 * sequence when writing: its trace time, or its weight when the profile is
 * untimed (only folded input has weights, and it has no time).
 *
 * Buckets are dense (rank of the thread * n_stacks + stack) when that
 * space is small, else the (thread, stack) pairs numbered in first-seen
 * order through a hash map. */
#define DENSE_BUCKETS_MAX (1u << 20)

typedef struct grouping {
    uint64_t *payload;
    size_t n;
    uint32_t *end;        /* per bucket: end of its samples in payload */
    size_t n_buckets, cap_buckets;
    int dense;
    uint32_t *rank_thread;/* dense: rank -> thread */
    uint32_t *rank;       /* dense: thread -> rank */
    size_t n_ranked;
    tm_u64map by_key;     /* hashed: thread << 32 | stack -> bucket */
    uint64_t *keys;       /* hashed: bucket -> thread << 32 | stack */
    size_t cap_keys;
} grouping;

static void grouping_release(tm_mem *mem, const tm_profile *p, grouping *g) {
    tm_mem_free(mem, g->payload, (g->n + 1) * sizeof *g->payload);
    tm_mem_free(mem, g->end, g->cap_buckets * sizeof *g->end);
    tm_mem_free(mem, g->rank_thread, (p->n_threads + 1) * sizeof *g->rank_thread);
    tm_mem_free(mem, g->rank, (p->n_threads + 1) * sizeof *g->rank);
    tm_u64map_free(mem, &g->by_key);
    tm_mem_free(mem, g->keys, g->cap_keys * sizeof *g->keys);
}

static inline uint64_t group_key(const tm_prof_sample *s) { return (uint64_t)s->thread << 32 | s->stack; }

/* The bucket of a sample seen in the counting pass (hashed: created). */
static tm_status bucket_new(tm_mem *mem, const tm_profile *p, grouping *g, const tm_prof_sample *s, uint32_t *b) {
    if (g->dense) {
        *b = g->rank[s->thread] * (uint32_t)p->n_stacks + s->stack;
        return TM_OK;
    }
    uint64_t key = group_key(s);
    *b = tm_u64map_get(&g->by_key, key);
    if (*b != TM_ABSENT) return TM_OK;
    if (g->n_buckets >= UINT32_MAX - 1) return TM_ERR_LIMIT;
    TM_TRY(TM_VEC_RESERVE(mem, g->keys, g->cap_keys, g->n_buckets + 1));
    size_t cap = g->cap_buckets;
    TM_TRY(TM_VEC_RESERVE(mem, g->end, g->cap_buckets, g->n_buckets + 1));
    memset(g->end + cap, 0, (g->cap_buckets - cap) * sizeof *g->end);
    *b = (uint32_t)g->n_buckets;
    g->keys[g->n_buckets++] = key;
    return tm_u64map_put(mem, &g->by_key, key, *b);
}

static inline uint32_t bucket_of(const tm_profile *p, const grouping *g, const tm_prof_sample *s) {
    if (g->dense) return g->rank[s->thread] * (uint32_t)p->n_stacks + s->stack;
    return tm_u64map_get(&g->by_key, group_key(s));
}

static tm_status group_samples(pprof_writer *x, grouping *g, int64_t *first, int64_t *last) {
    const tm_profile *p = x->p;
    tm_mem *mem = x->mem;
    g->rank = tm_mem_alloc(mem, (p->n_threads + 1) * sizeof *g->rank);
    g->rank_thread = tm_mem_alloc(mem, (p->n_threads + 1) * sizeof *g->rank_thread);
    if (!g->rank || !g->rank_thread) return TM_ERR_NOMEM;
    for (size_t t = 0; t < p->n_threads; t++)
        if (x->sel[t]) g->rank_thread[g->n_ranked] = (uint32_t)t, g->rank[t] = (uint32_t)g->n_ranked++;
    g->dense = p->n_stacks && g->n_ranked <= DENSE_BUCKETS_MAX / p->n_stacks;
    if (g->dense) {
        g->n_buckets = g->cap_buckets = g->n_ranked * p->n_stacks;
        g->end = zalloc(mem, g->cap_buckets * sizeof *g->end);
        if (!g->end) return TM_ERR_NOMEM;
    }
    size_t n = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        const tm_prof_sample *s = &p->samples[i];
        if (!x->sel[s->thread]) continue;
        if (!n) *first = s->ts;
        *last = s->ts;
        uint32_t b;
        TM_TRY(bucket_new(mem, p, g, s, &b));
        g->end[b]++;
        n++;
    }
    g->n = n;
    g->payload = tm_mem_alloc(mem, (n + 1) * sizeof *g->payload);
    if (!g->payload) return TM_ERR_NOMEM;
    uint32_t sum = 0; /* end[] holds starts during the scatter and ends after it */
    for (size_t b = 0; b < g->n_buckets; b++) {
        uint32_t c = g->end[b];
        g->end[b] = sum;
        sum += c;
    }
    for (size_t i = 0; i < p->n_samples; i++) {
        const tm_prof_sample *s = &p->samples[i];
        if (!x->sel[s->thread]) continue;
        g->payload[g->end[bucket_of(p, g, s)]++] = p->untimed ? tm_profile_weight(p, i) : (uint64_t)s->ts;
    }
    return TM_OK;
}

/* The samples, group by group: each is encoded into x->rec and handed to
 * the record compressor (or, uncompressed, to the stream). */
static tm_status write_samples(pprof_writer *x, const grouping *g) {
    const tm_profile *p = x->p;
    const int timed = !p->untimed;
    size_t seg = 0;
    for (size_t b = 0, at = 0; b < g->n_buckets; b++) {
        if (g->end[b] == at) continue;
        uint32_t thread, stack;
        if (g->dense) {
            thread = g->rank_thread[b / p->n_stacks];
            stack = (uint32_t)(b % p->n_stacks);
        } else {
            thread = (uint32_t)(g->keys[b] >> 32);
            stack = (uint32_t)g->keys[b];
        }
        if (x->stack_off[stack] == SIZE_MAX) TM_TRY(encode_stack(x, stack));
        const thread_enc *te = &x->threads[thread];
        const size_t stack_len = x->stack_len[stack];
        /* The record up to the varying part: header (its length fixed
         * below), stack, values of weight 1 and thread labels. */
        uint8_t *head = x->rec + TM_PBW_VARINT_MAX + 1;
        memcpy(head, x->stack_bytes + x->stack_off[stack], stack_len);
        memcpy(head + stack_len, te->bytes, te->len);
        seg = 0;
        for (; at < g->end[b]; at++) {
            uint64_t payload = g->payload[at];
            /* The varying parts: the values when the weight is not 1, and
             * the timestamp label, its number last so that consecutive
             * samples differ only in their final bytes. */
            uint8_t *q = head + stack_len;
            if (timed) {
                q += te->len; /* weight 1: copied with the head */
            } else if (payload != 1) {
                uint64_t cpu = payload * (uint64_t)(x->period[thread] > 0 ? x->period[thread] : 0);
                q = tm_pbw_len(q, SAMPLE_VALUE, tm_pbw_varint_len(payload) + tm_pbw_varint_len(cpu));
                q = tm_pbw_varint(tm_pbw_varint(q, payload), cpu);
                memcpy(q, te->bytes + te->values_len, te->len - te->values_len);
                q += te->len - te->values_len;
            } else { /* the sample before may have overwritten them */
                memcpy(q, te->bytes, te->len);
                q += te->len;
            }
            if (timed) { /* Unix time: the last realtime segment starting at or before ts */
                int64_t ts = (int64_t)payload;
                while (seg + 1 < p->n_realtime && p->realtime[seg + 1].from_ns <= ts) seg++;
                ts += p->n_realtime ? p->realtime[seg].offset_ns : 0;
                uint8_t *m = q + 2;
                uint8_t *e = tm_pbw_uint(tm_pbw_uint(m, LABEL_KEY, S_TIMESTAMP), LABEL_NUM_UNIT, S_NANOSECONDS);
                e = tm_pbw_uint(e, LABEL_NUM, (uint64_t)ts);
                q[0] = SAMPLE_LABEL << 3 | TM_PB_LEN;
                q[1] = (uint8_t)(e - m);
                q = e;
            }
            emit_sample(x, head, q);
        }
    }
    return x->gzrec ? tm_gzrec_finish(x->gzrec) : x->w.st;
}

static tm_str frame_file(const tm_profile *p, const tm_prof_frame *f) {
    if (f->flags & TM_FRAME_HAS_FILE) return f->file;
    if (f->flags & TM_FRAME_HAS_PACKAGE) return f->package;
    if (f->mapping) return p->mappings[f->mapping - 1].path;
    tm_str none = {NULL, 0};
    return none;
}

static tm_str base_name(tm_str path) {
    if (!path.data) return path; /* no name */
    size_t base = path.len;
    while (base > 0 && path.data[base - 1] != '/') base--;
    return (tm_str){path.data + base, path.len - base};
}

/* Is name the file name of path, or the kernel's 15-byte cut of it? */
static bool names_file(tm_str name, tm_str file) {
    return name.len && (tm_bytes_eq(name, file) ||
                        (name.len == 15 && file.len > 15 && memcmp(name.data, file.data, 15) == 0));
}

/* Is path the file of an executable a process of p is named after? A
 * process's name is its command line's first word, which a launcher may
 * have set to anything (exec -a); its main thread's name (tid == pid) is
 * the kernel's comm, the executable's own file name, unless renamed. */
static bool names_a_process(const tm_profile *p, tm_str path) {
    tm_str file = base_name(path);
    for (size_t i = 0; i < p->n_processes; i++)
        if (names_file(base_name(p->processes[i].name), file)) return true;
    for (size_t i = 0; i < p->n_threads; i++)
        if (p->threads[i].pid && p->threads[i].tid == p->threads[i].pid && names_file(p->threads[i].name, file))
            return true;
    return false;
}

/* Adds one vote to the mapping of the outermost frame of a written stack
 * of a main thread (tid == pid): its entry point (_start) is in the program. */
static void vote_root(const pprof_writer *x, uint32_t thread, uint32_t stack, uint64_t *votes) {
    const tm_profile *p = x->p;
    const tm_prof_thread *t = &p->threads[thread];
    const tm_prof_stack *s = &p->stacks[stack];
    if (!t->pid || t->tid != t->pid || !s->len || x->stack_off[stack] == SIZE_MAX) return;
    uint32_t m = p->frames[tm_profile_stack_frames(p, s)[s->len - 1]].mapping;
    if (m) votes[m - 1]++;
}

/* The mapping most main-thread stacks start in, or 0 (index + 1). Found
 * when a program ran under another name than its file's (sh is
 * /usr/bin/dash, python3 is python3.11): File was libc.so.6. */
static tm_status root_mapping(const pprof_writer *x, uint32_t *out) {
    const tm_profile *p = x->p;
    *out = 0;
    uint64_t *votes = zalloc(x->mem, (p->n_mappings + 1) * sizeof *votes);
    if (!votes) return TM_ERR_NOMEM;
    for (size_t i = 0; i < p->n_samples; i++) vote_root(x, p->samples[i].thread, p->samples[i].stack, votes);
    for (size_t i = 0; i < p->n_off_samples; i++)
        vote_root(x, p->off_samples[i].thread, p->off_samples[i].stack, votes);
    for (size_t i = 0; i < p->n_heap_samples; i++)
        vote_root(x, p->heap_samples[i].thread, p->heap_samples[i].stack, votes);
    uint64_t best = 0;
    for (size_t m = 0; m < p->n_mappings; m++)
        if (votes[m] > best) best = votes[m], *out = (uint32_t)m + 1;
    tm_mem_free(x->mem, votes, (p->n_mappings + 1) * sizeof *votes);
    return TM_OK;
}

/* Numbers functions and used mappings in location order, but the mapping
 * of a program the profile's processes are named after first (else the
 * one main threads start in): pprof takes the first mapping for the main
 * binary (its "File:"). */
static tm_status number_functions_and_mappings(pprof_writer *x) {
    const tm_profile *p = x->p;
    uint32_t n_maps = 0;
    /* each mapping is held against the process names once, not per location */
    uint8_t *checked = zalloc(x->mem, p->n_mappings + 1);
    if (!checked) return TM_ERR_NOMEM;
    for (size_t l = 0; l < x->n_locs && !n_maps; l++) {
        const tm_prof_frame *f = &p->frames[p->frame_ids[x->locs[l].at]];
        if (!f->mapping || checked[f->mapping - 1]) continue;
        checked[f->mapping - 1] = 1;
        if (names_a_process(p, p->mappings[f->mapping - 1].path)) x->map_id[f->mapping - 1] = ++n_maps;
    }
    tm_mem_free(x->mem, checked, p->n_mappings + 1);
    if (!n_maps) {
        uint32_t root;
        TM_TRY(root_mapping(x, &root));
        if (root) x->map_id[root - 1] = ++n_maps;
    }
    for (size_t l = 0; l < x->n_locs; l++) {
        for (uint32_t k = 0; k < x->locs[l].n; k++) {
            uint32_t fi = p->frame_ids[x->locs[l].at + k];
            const tm_prof_frame *f = &p->frames[fi];
            if (!x->func_of[fi]) {
                func fn;
                TM_TRY(str_index(x->mem, &x->strings, x->labels.of[fi], &fn.name));
                fn.system_name = S_EMPTY;
                if (f->flags & TM_FRAME_HAS_FUNCTION)
                    TM_TRY(str_index(x->mem, &x->strings, f->function, &fn.system_name));
                TM_TRY(str_index(x->mem, &x->strings, frame_file(p, f), &fn.filename));
                TM_TRY(func_id(x->mem, &x->funcs, &fn, &x->func_of[fi]));
            }
            if (!f->mapping) continue;
            if (!x->map_id[f->mapping - 1]) x->map_id[f->mapping - 1] = ++n_maps;
            uint8_t *has = &x->map_has[f->mapping - 1];
            if (f->flags & TM_FRAME_HAS_FUNCTION) *has |= MAP_HAS_FUNCTIONS;
            if (f->flags & TM_FRAME_HAS_FILE) *has |= MAP_HAS_FILENAMES;
            if (f->flags & TM_FRAME_HAS_LINE) *has |= MAP_HAS_LINE_NUMBERS;
            if (f->flags & TM_FRAME_INLINED) *has |= MAP_HAS_INLINE_FRAMES;
        }
    }
    return TM_OK;
}

static tm_status write_mappings(pprof_writer *x) {
    const tm_profile *p = x->p;
    /* map_id is dense from 1: write them in id order */
    uint32_t *by_id = tm_mem_alloc(x->mem, (p->n_mappings + 1) * sizeof *by_id);
    if (!by_id) return TM_ERR_NOMEM;
    size_t n = 0;
    for (size_t m = 0; m < p->n_mappings; m++)
        if (x->map_id[m]) by_id[x->map_id[m] - 1] = (uint32_t)m, n++;
    tm_status st = TM_OK;
    for (size_t k = 0; k < n && st == TM_OK; k++) {
        const tm_prof_mapping *m = &p->mappings[by_id[k]];
        uint32_t file = S_EMPTY, build = S_EMPTY;
        st = str_index(x->mem, &x->strings, m->path, &file);
        if (st == TM_OK && m->build_id.len) {
            char *hex = tm_arena_alloc(&x->arena, m->build_id.len * 2);
            if (!hex) {
                st = TM_ERR_NOMEM;
                break;
            }
            for (size_t i = 0; i < m->build_id.len; i++) {
                hex[2 * i] = "0123456789abcdef"[m->build_id.data[i] >> 4];
                hex[2 * i + 1] = "0123456789abcdef"[m->build_id.data[i] & 15];
            }
            tm_str h = {(const uint8_t *)hex, m->build_id.len * 2};
            st = str_index(x->mem, &x->strings, h, &build);
        }
        if (st != TM_OK) break;
        uint8_t msg[96], *e = tm_pbw_uint(msg, MAPPING_ID, k + 1);
        if (m->start) e = tm_pbw_uint(e, MAPPING_MEMORY_START, m->start);
        if (m->end) e = tm_pbw_uint(e, MAPPING_MEMORY_LIMIT, m->end);
        /* traceconv: file_offset = exact_offset (the mapping's file offset;
         * start_offset is where the ELF starts in the file, 0 for plain files). */
        if (m->exact_offset) e = tm_pbw_uint(e, MAPPING_FILE_OFFSET, m->exact_offset);
        if (file) e = tm_pbw_uint(e, MAPPING_FILENAME, file);
        if (build) e = tm_pbw_uint(e, MAPPING_BUILD_ID, build);
        uint8_t has = x->map_has[by_id[k]];
        if (has & MAP_HAS_FUNCTIONS) e = tm_pbw_uint(e, MAPPING_HAS_FUNCTIONS, 1);
        if (has & MAP_HAS_FILENAMES) e = tm_pbw_uint(e, MAPPING_HAS_FILENAMES, 1);
        if (has & MAP_HAS_LINE_NUMBERS) e = tm_pbw_uint(e, MAPPING_HAS_LINE_NUMBERS, 1);
        if (has & MAP_HAS_INLINE_FRAMES) e = tm_pbw_uint(e, MAPPING_HAS_INLINE_FRAMES, 1);
        put_small(&x->w, PROFILE_MAPPING, msg, e);
    }
    tm_mem_free(x->mem, by_id, (p->n_mappings + 1) * sizeof *by_id);
    return st;
}

static void write_locations(pprof_writer *x) {
    const tm_profile *p = x->p;
    /* one Line per frame of the run, leaf first (pprof's order) */
    uint8_t msg[32 + TM_MAX_SYMBOL_LINES * 24];
    for (size_t l = 0; l < x->n_locs; l++) {
        const tm_prof_frame *f = &p->frames[x->locs[l].frame];
        uint8_t *e = tm_pbw_uint(msg, LOCATION_ID, l + 1);
        if (f->mapping) e = tm_pbw_uint(e, LOCATION_MAPPING_ID, x->map_id[f->mapping - 1]);
        /* pprof maps the address back to a file offset through the mapping */
        uint64_t address = f->flags & TM_FRAME_HAS_ADDR ? tm_frame_process_address(p, f) : 0;
        if (address) e = tm_pbw_uint(e, LOCATION_ADDRESS, address);
        uint32_t n = x->locs[l].n < TM_MAX_SYMBOL_LINES ? x->locs[l].n : TM_MAX_SYMBOL_LINES;
        for (uint32_t k = 0; k < n; k++) {
            uint32_t fi = p->frame_ids[x->locs[l].at + k];
            uint64_t line = p->frames[fi].flags & TM_FRAME_HAS_LINE ? p->frames[fi].line : 0;
            size_t len = tm_pbw_uint_len(LINE_FUNCTION_ID, x->func_of[fi]) + (line ? tm_pbw_uint_len(LINE_LINE, line) : 0);
            e = tm_pbw_len(e, LOCATION_LINE, len);
            e = tm_pbw_uint(e, LINE_FUNCTION_ID, x->func_of[fi]);
            if (line) e = tm_pbw_uint(e, LINE_LINE, line);
        }
        put_small(&x->w, PROFILE_LOCATION, msg, e);
    }
}

static void write_functions(pprof_writer *x) {
    for (size_t i = 0; i < x->funcs.n; i++) {
        const func *f = &x->funcs.v[i];
        uint8_t msg[64], *e = tm_pbw_uint(msg, FUNCTION_ID, i + 1);
        if (f->name) e = tm_pbw_uint(e, FUNCTION_NAME, f->name);
        if (f->system_name) e = tm_pbw_uint(e, FUNCTION_SYSTEM_NAME, f->system_name);
        if (f->filename) e = tm_pbw_uint(e, FUNCTION_FILENAME, f->filename);
        put_small(&x->w, PROFILE_FUNCTION, msg, e);
    }
}

/* After the samples: mappings, locations and functions of the stacks they used. */
static tm_status write_locations_and_functions(pprof_writer *x) {
    TM_TRY(tm_frame_labels_build(x->p, false, &x->labels));
    TM_TRY(number_functions_and_mappings(x));
    TM_TRY(write_mappings(x));
    write_locations(x);
    write_functions(x);
    return TM_OK;
}

static tm_status write_profile(pprof_writer *x, const tm_pprof_options *opts) {
    const tm_profile *p = x->p;
    tm_pbw *w = &x->w;
    for (int i = 0; i < N_FIXED; i++) {
        uint32_t idx;
        TM_TRY(str_index(x->mem, &x->strings, cstr(fixed_strings[i]), &idx));
    }
    TM_TRY(encode_threads(x));
    put_value_type(w, PROFILE_SAMPLE_TYPE, S_SAMPLES, S_COUNT);
    put_value_type(w, PROFILE_SAMPLE_TYPE, S_CPU, S_NANOSECONDS);

    int64_t first = 0, last = 0;
    size_t n_samples = 0;
    grouping g;
    memset(&g, 0, sizeof g);
    tm_status st = group_samples(x, &g, &first, &last);
    n_samples = g.n;
    tm_pbw_flush(w); /* the samples go out through their own compressor */
    if (st == TM_OK) st = write_samples(x, &g);
    grouping_release(x->mem, p, &g);
    TM_TRY(st);

    TM_TRY(write_locations_and_functions(x));

    /* The comments are the last strings: every index is known now. */
    if (opts && opts->period_ns > 0)
        snprintf(x->comment_period, sizeof x->comment_period, "period: %lld ns, given", (long long)x->overall_period);
    else if (x->period_sources.counted && !x->period_sources.own && !x->period_sources.overall)
        snprintf(x->comment_period, sizeof x->comment_period,
                 "period: %lld ns, the mean CPU time of a sample; cpu values are the CPU time the recorder counted "
                 "for each thread's samples (task-clock timebase_count), none inferred",
                 (long long)x->overall_period);
    else if (!x->overall_period)
        snprintf(x->comment_period, sizeof x->comment_period, "period: unknown (%s); cpu values are 0",
                 p->untimed ? "input without timestamps" : "no thread has two samples");
    else
        snprintf(x->comment_period, sizeof x->comment_period,
                 "period: %lld ns, inferred as the median gap between samples of the whole trace; cpu values use "
                 "a period per thread: %zu threads the median of their own gaps, %zu (fewer than %d gaps) the "
                 "whole trace's; %zu lowered to their mean gap, so that no thread's time exceeds its span",
                 (long long)x->overall_period, x->period_sources.own, x->period_sources.overall,
                 TM_OWN_PERIOD_MIN_GAPS, x->period_sources.capped);
    if (x->period_sources.counted && (x->period_sources.own || x->period_sources.overall)) {
        size_t len = strlen(x->comment_period);
        snprintf(x->comment_period + len, sizeof x->comment_period - len,
                 "; %zu threads counted, their CPU time measured", x->period_sources.counted);
    }
    snprintf(x->comment_time, sizeof x->comment_time, "timestamp_ns: %s",
             p->untimed ? "absent (input without timestamps)"
             : p->n_realtime ? "Unix time" : "trace time (the trace has no realtime clock)");
    uint32_t c_period, c_time;
    TM_TRY(str_index(x->mem, &x->strings, cstr(x->comment_period), &c_period));
    TM_TRY(str_index(x->mem, &x->strings, cstr(x->comment_time), &c_time));
    for (size_t i = 0; i < x->strings.n; i++)
        tm_pbw_bytes_field(w, PROFILE_STRING_TABLE, x->strings.v[i].data, x->strings.v[i].len);

    if (!p->untimed && n_samples) {
        int64_t start = first;
        tm_profile_realtime(p, first, &start);
        put_uint(w, PROFILE_TIME_NANOS, (uint64_t)start);
        put_uint(w, PROFILE_DURATION_NANOS, (uint64_t)(last - first + x->overall_period));
    }
    put_value_type(w, PROFILE_PERIOD_TYPE, S_CPU, S_NANOSECONDS);
    if (x->overall_period) put_uint(w, PROFILE_PERIOD, (uint64_t)x->overall_period);
    put_uint(w, PROFILE_COMMENT, c_period);
    put_uint(w, PROFILE_COMMENT, c_time);
    /* what pprof shows first: cpu, unless every cpu value is 0 (no period) */
    put_uint(w, PROFILE_DEFAULT_SAMPLE_TYPE, x->overall_period ? S_CPU : S_SAMPLES);
    return tm_pbw_finish(w);
}

/* A memory profile: one Sample per heap sample of the selected processes
 * (already summed over the dumps), values [alloc_objects, alloc_space,
 * inuse_objects, inuse_space], the process labels and a heap label;
 * period space/bytes of the sampling interval. */
static tm_status write_heap_profile(pprof_writer *x, tm_value v) {
    const tm_profile *p = x->p;
    tm_pbw *w = &x->w;
    for (int i = 0; i < N_FIXED; i++) {
        uint32_t idx;
        TM_TRY(str_index(x->mem, &x->strings, cstr(fixed_strings[i]), &idx));
    }
    static const char *const types[4] = {"alloc_objects", "alloc_space", "inuse_objects", "inuse_space"};
    uint32_t type_idx[4], bytes, space, heap_key;
    for (int i = 0; i < 4; i++) TM_TRY(str_index(x->mem, &x->strings, cstr(types[i]), &type_idx[i]));
    TM_TRY(str_index(x->mem, &x->strings, cstr("bytes"), &bytes));
    TM_TRY(str_index(x->mem, &x->strings, cstr("space"), &space));
    TM_TRY(str_index(x->mem, &x->strings, cstr("heap"), &heap_key));
    uint32_t *heap_idx = tm_mem_alloc(x->mem, (p->n_heap_names + 1) * sizeof *heap_idx);
    if (!heap_idx) return TM_ERR_NOMEM;
    tm_status st = TM_OK;
    for (size_t h = 0; h < p->n_heap_names && st == TM_OK; h++)
        st = str_index(x->mem, &x->strings, p->heap_names[h], &heap_idx[h]);
    if (st == TM_OK) st = encode_threads(x);
    for (int i = 0; i < 4 && st == TM_OK; i++) put_value_type(w, PROFILE_SAMPLE_TYPE, type_idx[i], i % 2 ? bytes : S_COUNT);
    tm_pbw_flush(w);
    for (size_t i = 0; i < p->n_heap_samples && st == TM_OK; i++) {
        const tm_prof_heap_sample *hs = &p->heap_samples[i];
        if (!x->sel[hs->thread]) continue;
        if (!hs->alloc_objects && !hs->alloc_space && !hs->inuse_objects && !hs->inuse_space) continue;
        if (x->stack_off[hs->stack] == SIZE_MAX && (st = encode_stack(x, hs->stack)) != TM_OK) break;
        const thread_enc *te = &x->threads[hs->thread];
        uint8_t *head = x->rec + TM_PBW_VARINT_MAX + 1, *q = head;
        memcpy(q, x->stack_bytes + x->stack_off[hs->stack], x->stack_len[hs->stack]);
        q += x->stack_len[hs->stack];
        const int64_t vals[4] = {hs->alloc_objects, hs->alloc_space, hs->inuse_objects, hs->inuse_space};
        size_t vlen = 0;
        for (int k = 0; k < 4; k++) vlen += tm_pbw_varint_len((uint64_t)vals[k]);
        q = tm_pbw_len(q, SAMPLE_VALUE, vlen);
        for (int k = 0; k < 4; k++) q = tm_pbw_varint(q, (uint64_t)vals[k]);
        memcpy(q, te->bytes + te->values_len, te->len - te->values_len);
        q += te->len - te->values_len;
        uint8_t m[16], *e = tm_pbw_uint(tm_pbw_uint(m, LABEL_KEY, heap_key), LABEL_STR, heap_idx[hs->heap]);
        emit_sample(x, head, put_label(q, m, e));
    }
    tm_mem_free(x->mem, heap_idx, (p->n_heap_names + 1) * sizeof *heap_idx);
    TM_TRY(st);
    TM_TRY(x->gzrec ? tm_gzrec_finish(x->gzrec) : x->w.st);
    TM_TRY(write_locations_and_functions(x));
    snprintf(x->comment_period, sizeof x->comment_period,
             "memory profile: bytes and objects allocated at each stack over the trace's heap dumps, and those "
             "still in use at the last one; sampling interval %llu bytes%s",
             (unsigned long long)p->heap_interval, p->heap_interval ? "" : " (not given)");
    uint32_t comment;
    TM_TRY(str_index(x->mem, &x->strings, cstr(x->comment_period), &comment));
    for (size_t i = 0; i < x->strings.n; i++)
        tm_pbw_bytes_field(w, PROFILE_STRING_TABLE, x->strings.v[i].data, x->strings.v[i].len);
    put_value_type(w, PROFILE_PERIOD_TYPE, space, bytes);
    if (p->heap_interval) put_uint(w, PROFILE_PERIOD, p->heap_interval);
    put_uint(w, PROFILE_COMMENT, comment);
    put_uint(w, PROFILE_DEFAULT_SAMPLE_TYPE, type_idx[v - TM_VALUE_ALLOC_OBJECTS]);
    return tm_pbw_finish(w);
}

/* Off-CPU or wall-clock time (x->p a tm_profile_value_view of it): one
 * Sample per view sample of the selected threads, values [1, its ns] for
 * the sample types samples/count and off_cpu/nanoseconds (wall/nanoseconds),
 * the thread labels and timestamp_ns (where an off-CPU sample's thread left
 * the CPU). */
static tm_status write_time_profile(pprof_writer *x, tm_value v, const tm_profile *timed) {
    const tm_profile *p = x->p;
    tm_pbw *w = &x->w;
    for (int i = 0; i < N_FIXED; i++) {
        uint32_t idx;
        TM_TRY(str_index(x->mem, &x->strings, cstr(fixed_strings[i]), &idx));
    }
    uint32_t type;
    TM_TRY(str_index(x->mem, &x->strings, cstr(v == TM_VALUE_WALL ? "wall" : "off_cpu"), &type));
    TM_TRY(encode_threads(x));
    put_value_type(w, PROFILE_SAMPLE_TYPE, S_SAMPLES, S_COUNT);
    put_value_type(w, PROFILE_SAMPLE_TYPE, type, S_NANOSECONDS);
    tm_pbw_flush(w);
    tm_status st = TM_OK;
    size_t seg = 0, n = 0;
    int64_t first = 0, last = 0;
    for (size_t i = 0; i < p->n_samples && st == TM_OK; i++) {
        const tm_prof_sample *s = &p->samples[i];
        if (!x->sel[s->thread]) continue;
        if (x->stack_off[s->stack] == SIZE_MAX && (st = encode_stack(x, s->stack)) != TM_OK) break;
        if (!n++) first = s->ts;
        last = s->ts;
        const thread_enc *te = &x->threads[s->thread];
        uint8_t *head = x->rec + TM_PBW_VARINT_MAX + 1, *q = head;
        memcpy(q, x->stack_bytes + x->stack_off[s->stack], x->stack_len[s->stack]);
        q += x->stack_len[s->stack];
        uint64_t ns = tm_profile_weight(p, i);
        q = tm_pbw_len(q, SAMPLE_VALUE, 1 + tm_pbw_varint_len(ns));
        q = tm_pbw_varint(tm_pbw_varint(q, 1), ns);
        memcpy(q, te->bytes + te->values_len, te->len - te->values_len);
        q += te->len - te->values_len;
        int64_t ts = s->ts; /* Unix time: the last realtime segment starting at or before ts */
        while (seg + 1 < timed->n_realtime && timed->realtime[seg + 1].from_ns <= ts) seg++;
        ts += timed->n_realtime ? timed->realtime[seg].offset_ns : 0;
        uint8_t m[40], *e = tm_pbw_uint(tm_pbw_uint(m, LABEL_KEY, S_TIMESTAMP), LABEL_NUM_UNIT, S_NANOSECONDS);
        e = tm_pbw_uint(e, LABEL_NUM, (uint64_t)ts);
        emit_sample(x, head, put_label(q, m, e));
    }
    TM_TRY(st);
    TM_TRY(x->gzrec ? tm_gzrec_finish(x->gzrec) : x->w.st);
    TM_TRY(write_locations_and_functions(x));
    snprintf(x->comment_period, sizeof x->comment_period, "%s",
             v == TM_VALUE_WALL ? "wall: on-CPU samples weigh their sampling period, off-CPU samples the ns their "
                                  "thread stayed off the CPU from where it left it"
                                : "off_cpu: each sample is where a thread left the CPU, weighing the ns until it ran "
                                  "again (blocked, or waiting to run)");
    snprintf(x->comment_time, sizeof x->comment_time, "timestamp_ns: %s",
             timed->n_realtime ? "Unix time" : "trace time (the trace has no realtime clock)");
    uint32_t c_what, c_time;
    TM_TRY(str_index(x->mem, &x->strings, cstr(x->comment_period), &c_what));
    TM_TRY(str_index(x->mem, &x->strings, cstr(x->comment_time), &c_time));
    for (size_t i = 0; i < x->strings.n; i++)
        tm_pbw_bytes_field(w, PROFILE_STRING_TABLE, x->strings.v[i].data, x->strings.v[i].len);
    if (n) {
        int64_t start = first;
        tm_profile_realtime(timed, first, &start);
        put_uint(w, PROFILE_TIME_NANOS, (uint64_t)start);
        put_uint(w, PROFILE_DURATION_NANOS, (uint64_t)(last - first));
    }
    put_value_type(w, PROFILE_PERIOD_TYPE, type, S_NANOSECONDS);
    put_uint(w, PROFILE_COMMENT, c_what);
    put_uint(w, PROFILE_COMMENT, c_time);
    put_uint(w, PROFILE_DEFAULT_SAMPLE_TYPE, type);
    return tm_pbw_finish(w);
}

static tm_status setup(pprof_writer *x, const tm_pprof_options *opts) {
    const tm_profile *p = x->p;
    if (tm_thread_periods(p, x->sel, opts ? opts->period_ns : 0, true, &x->period, &x->overall_period,
                          &x->period_sources) != TM_OK)
        return TM_ERR_NOMEM;
    x->threads = tm_mem_alloc(x->mem, (p->n_threads + 1) * sizeof *x->threads);
    x->stack_off = tm_mem_alloc(x->mem, (p->n_stacks + 1) * sizeof *x->stack_off);
    x->stack_len = tm_mem_alloc(x->mem, (p->n_stacks + 1) * sizeof *x->stack_len);
    x->loc_of = zalloc(x->mem, (p->n_frames + 1) * sizeof *x->loc_of);
    x->map_has = zalloc(x->mem, p->n_mappings + 1);
    x->func_of = zalloc(x->mem, (p->n_frames + 1) * sizeof *x->func_of);
    x->map_id = zalloc(x->mem, (p->n_mappings + 1) * sizeof *x->map_id);
    x->chunk = tm_mem_alloc(x->mem, CHUNK);
    if (!x->threads || !x->stack_off || !x->stack_len || !x->loc_of || !x->map_id || !x->map_has || !x->func_of ||
        !x->chunk)
        return TM_ERR_NOMEM;
    memset(x->stack_off, 0xff, (p->n_stacks + 1) * sizeof *x->stack_off);
    if (!(opts && opts->uncompressed)) {
        x->out.gz = libdeflate_alloc_compressor(GZIP_LEVEL);
        if (!x->out.gz) return TM_ERR_NOMEM;
        x->out.packed_cap = libdeflate_gzip_compress_bound(x->out.gz, CHUNK);
        x->out.packed = tm_mem_alloc(x->mem, x->out.packed_cap);
        x->gzrec = tm_mem_alloc(x->mem, sizeof *x->gzrec);
        x->gzrec_in = tm_mem_alloc(x->mem, GZREC_STAGING);
        x->gzrec_out = tm_mem_alloc(x->mem, CHUNK);
        if (!x->out.packed || !x->gzrec || !x->gzrec_in || !x->gzrec_out) return TM_ERR_NOMEM;
        tm_gzrec_init(x->gzrec, x->out.sink, x->gzrec_in, GZREC_STAGING, x->gzrec_out, CHUNK);
    }
    tm_pbw_init(&x->w, x->chunk, CHUNK, flush_slice, &x->out);
    return TM_OK;
}

tm_status tm_write_pprof(const tm_trace *t, const tm_pprof_options *opts, const tm_sink *out, tm_error *err) {
    if (!t || !out || !out->write) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_pprof: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_pprof_options", err));
    TM_TRY(TM_CHECK_RESERVED(opts ? &opts->threads : NULL, "tm_thread_filter", err));
    TM_TRY(tm_check_period(opts ? opts->period_ns : 0, "pprof", err));
    TM_TRY(tm_check_value(opts ? opts->value : TM_VALUE_DEFAULT, "pprof", err));
    pprof_writer x;
    memset(&x, 0, sizeof x);
    x.p = tm_trace_profile(t);
    x.mem = x.p->mem;
    x.out.sink = out;
    /* a memory value, or no CPU samples to write: the memory profile */
    tm_value v = opts ? opts->value : TM_VALUE_DEFAULT;
    if (v == TM_VALUE_DEFAULT && !x.p->n_samples && x.p->n_off_samples) v = TM_VALUE_OFF_CPU;
    if (v == TM_VALUE_DEFAULT && !x.p->n_samples && x.p->n_heap_samples) v = TM_VALUE_INUSE_SPACE;
    const bool time_value = v == TM_VALUE_OFF_CPU || v == TM_VALUE_WALL;
    /* Off-CPU and wall-clock time: the writer reads the view (the same
     * threads, stacks and frames, other samples). The threads are chosen
     * by the samples of the value written, a memory value's too, and the
     * view refuses a memory value of a trace without a memory profile. */
    const tm_profile *orig = x.p;
    tm_profile view;
    const bool with_view = v > TM_VALUE_SAMPLES;
    if (with_view) TM_TRY(tm_profile_value_view(orig, v, &view, NULL, err));
    tm_status sel_st = tm_thread_select(with_view ? &view : orig, opts ? &opts->threads : NULL, &x.sel, err);
    if (sel_st != TM_OK) {
        if (with_view) tm_profile_value_view_release(orig, &view);
        return sel_st;
    }
    tm_arena_init(&x.arena, x.mem);
    if (time_value) x.p = &view;
    tm_status st = setup(&x, opts);
    if (st == TM_OK)
        st = time_value             ? write_time_profile(&x, v, orig)
             : v > TM_VALUE_SAMPLES ? write_heap_profile(&x, v)
                                    : write_profile(&x, opts);
    writer_release(&x);
    if (with_view) tm_profile_value_view_release(orig, &view);
    switch (st) {
    case TM_OK: return TM_OK;
    case TM_ERR_IO: return tm_fail(err, st, 0, NULL, "pprof: writing the output failed");
    case TM_ERR_LIMIT: return tm_fail(err, st, 0, NULL, "pprof: more than 2^32 strings or locations");
    default: return tm_trace_budget_status(t, tm_fail(err, st, 0, NULL, "pprof: out of memory"), err);
    }
}
