/*
 * out_sample_v1.c — profile model -> Sentry Sample v1 transaction profile
 * JSON (the format sentry-python's transaction profiler sends in a
 * "profile" envelope item, and Relay's sample/v1.rs reads).
 *
 * The samples written are those Relay's v1 normalisation keeps: per
 * thread, samples with an empty stack before its first and after its last
 * non-empty one are idle edges and go; then threads left with one sample
 * go. None left is NotEnoughSamples; the last sample more than 30 s after
 * the first is DurationIsTooLong (or, with truncate, samples more than 30 s
 * after the trace's first sample are left out first, as sentry-python stops
 * profiling there).
 *
 * Times: "timestamp" is the Unix time of the first written sample as RFC
 * 3339 with nanoseconds, and each sample's elapsed_since_start_ns is its
 * trace-time distance from that sample, so the monotonic spacing of the
 * samples is kept exactly. Ids the metadata does not give are hashed from
 * the written samples (UUID v4 layout), so output is reproducible.
 *
 * Frames carry in_app as Sample v2's do (sentry_json.c's rule, the
 * options' prefixes first), except in TM_MODE_RELAY.
 */
#include <stdlib.h> /* qsort */

#include "common/limits.h"
#include "export/sentry_json.h" /* tm_sentry_*, tm_jw, tm_profile */
#include "wire/rfc3339.h"       /* tm_rfc3339_format */

#define REJECT(err, reason, ...) tm_fail((err), TM_ERR_REJECTED, 0, (reason), __VA_ARGS__)

/* Relay's MAX_PROFILE_DURATION for transaction profiles (and
 * sentry-python's MAX_PROFILE_DURATION_NS). */
#define V1_MAX_DURATION_NS 30000000000ull

/* Sample v1 normalisation strips pointer-authentication bits from
 * instruction addresses on platform "cocoa" with an arm64(e) device. */
#define COCOA_ADDR_MASK 0x0000000FFFFFFFFFull

/* ---- metadata ---- */

typedef struct meta {
    json_t *root;
    json_t *platform, *release, *environment, *dist, *device, *os, *runtime, *tx_name;
    char event_id[33], tx_id[33], trace_id[33]; /* "" when not given */
    int64_t active_tid;
    int has_active_tid;
} meta;

/* An optional member: absent or null gives NULL. */
static tm_status optional(json_t *o, const char *key, int (*test)(const json_t *), const char *what, json_t **out,
                          tm_error *err) {
    json_t *v = json_object_get(o, key);
    *out = json_is_null(v) ? NULL : v;
    if (*out && !test(*out)) return REJECT(err, "InvalidJson", "metadata field %s is not %s", key, what);
    return TM_OK;
}

static int is_string(const json_t *v) { return json_is_string(v); }
static int is_object(const json_t *v) { return json_is_object(v); }

/* An object whose listed members are strings; required ones must be there. */
static tm_status string_members(const json_t *o, const char *name, const char *const *keys, size_t n_required,
                                size_t n, tm_error *err) {
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_object_get(o, keys[i]);
        if ((!v && i < n_required) || (v && !json_is_string(v)))
            return REJECT(err, "InvalidJson", "metadata field %s.%s is %s", name, keys[i],
                          v ? "not a string" : "missing");
    }
    return TM_OK;
}

/* A non-nil UUID, or absent. */
static tm_status uuid_member(const json_t *o, const char *key, const char *where, char out[33], tm_error *err) {
    const json_t *v = json_object_get(o, key);
    out[0] = 0;
    if (!v || json_is_null(v)) return TM_OK;
    if (!tm_sentry_event_id(v, out) || strcmp(out, "00000000000000000000000000000000") == 0)
        return REJECT(err, where ? "InvalidTransactionMetadata" : "InvalidJson", "metadata field %s%s is not a "
                      "non-nil UUID", where ? where : "", key);
    return TM_OK;
}

/* Optional '-', then decimal digits fitting an int64_t. */
static int decimal_i64(const char *s, size_t len, int64_t *out) {
    size_t i = len && s[0] == '-';
    int neg = i == 1;
    if (i == len) return 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < len; i++) {
        unsigned d = (unsigned)s[i] - '0';
        if (d > 9 || v > (limit - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

static tm_status parse_transaction(meta *m, json_t *tx, tm_error *err) {
    if (!json_is_object(tx)) return REJECT(err, "InvalidJson", "metadata field transaction is not an object");
    m->tx_name = json_object_get(tx, "name");
    if (json_is_null(m->tx_name)) m->tx_name = NULL;
    if (m->tx_name && (!json_is_string(m->tx_name) || !json_string_length(m->tx_name)))
        return REJECT(err, "InvalidTransactionMetadata", "metadata field transaction.name is not a non-empty string");
    TM_TRY(uuid_member(tx, "id", "transaction.", m->tx_id, err));
    TM_TRY(uuid_member(tx, "trace_id", "transaction.", m->trace_id, err));
    const json_t *a = json_object_get(tx, "active_thread_id");
    if (a && !json_is_null(a)) {
        if (!(json_is_integer(a) ? (m->active_tid = (int64_t)json_integer_value(a), 1)
                                 : json_is_string(a) && decimal_i64(json_string_value(a), json_string_length(a),
                                                                     &m->active_tid)))
            return REJECT(err, "InvalidJson", "metadata field transaction.active_thread_id is not a thread id");
        m->has_active_tid = 1;
    }
    return TM_OK;
}

static tm_status parse_meta(const char *json, size_t len, meta *m, tm_error *err) {
    if (len > TM_MAX_META_BYTES) return REJECT(err, "InvalidJson", "metadata larger than %u bytes", TM_MAX_META_BYTES);
    json_error_t je;
    m->root = json_loadb(json || len ? json : "", len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je); /* as v2's */
    if (!m->root)
        return tm_fail(err, TM_ERR_REJECTED, tm_sentry_json_error_offset(&je), "InvalidJson", "metadata is not JSON: %s",
                       je.text);
    json_t *o = m->root;
    if (!json_is_object(o)) return REJECT(err, "InvalidJson", "metadata is not a JSON object");
    const json_t *v = json_object_get(o, "version");
    if (v && !tm_sentry_str_is(v, "1")) return REJECT(err, "InvalidJson", "metadata field version must be \"1\"");
    TM_TRY(uuid_member(o, "event_id", NULL, m->event_id, err));
    TM_TRY(optional(o, "platform", is_string, "a string", &m->platform, err));
    TM_TRY(optional(o, "release", is_string, "a string", &m->release, err));
    TM_TRY(optional(o, "environment", is_string, "a string", &m->environment, err));
    TM_TRY(optional(o, "dist", is_string, "a string", &m->dist, err));
    TM_TRY(optional(o, "device", is_object, "an object", &m->device, err));
    TM_TRY(optional(o, "os", is_object, "an object", &m->os, err));
    TM_TRY(optional(o, "runtime", is_object, "an object", &m->runtime, err));
    /* What Relay's ProfileMetadata requires of them. */
    static const char *const device_keys[] = {"architecture", "locale", "manufacturer", "model"};
    static const char *const os_keys[] = {"name", "version", "build_number"};
    if (m->device) TM_TRY(string_members(m->device, "device", device_keys, 1, 4, err));
    const json_t *emulator = m->device ? json_object_get(m->device, "is_emulator") : NULL;
    if (emulator && !json_is_boolean(emulator))
        return REJECT(err, "InvalidJson", "metadata field device.is_emulator is not a boolean");
    if (m->os) TM_TRY(string_members(m->os, "os", os_keys, 2, 3, err));
    if (m->runtime) TM_TRY(string_members(m->runtime, "runtime", os_keys, 2, 2, err));
    json_t *tx = json_object_get(o, "transaction");
    if (!tx || json_is_null(tx)) {
        json_t *txs = json_object_get(o, "transactions");
        if (txs && !json_is_null(txs) && !json_is_array(txs))
            return REJECT(err, "InvalidJson", "metadata field transactions is not an array");
        tx = json_array_get(txs, 0);
    }
    if (tx) TM_TRY(parse_transaction(m, tx, err));
    return TM_OK;
}

tm_status tm_sample_v1_check_meta(const char *json, size_t len, tm_error *err) {
    meta m;
    memset(&m, 0, sizeof m);
    tm_status st = parse_meta(json, len, &m, err);
    if (m.root) json_decref(m.root);
    return st;
}

/* ---- the samples written ---- */

typedef struct selection {
    uint8_t *keep;   /* per sample */
    uint32_t *count; /* per thread: samples kept */
    size_t n_kept;
    int64_t first, last; /* trace times of the first and last kept sample */
} selection;

static void selection_release(const tm_profile *p, selection *s) {
    tm_mem_free(p->mem, s->keep, p->n_samples + 1);
    tm_mem_free(p->mem, s->count, (p->n_threads + 1) * sizeof *s->count);
}

static tm_status select_samples(const tm_profile *p, int truncate, selection *s, tm_error *err) {
    if (!p->n_samples) return REJECT(err, "NotEnoughSamples", "the profile has no samples");
    size_t n = p->n_samples, n_threads = p->n_threads;
    s->keep = tm_mem_alloc(p->mem, n + 1);
    s->count = tm_mem_alloc(p->mem, (n_threads + 1) * sizeof *s->count);
    size_t *edge = tm_mem_alloc(p->mem, 2 * (n_threads + 1) * sizeof *edge); /* first, last non-empty */
    if (!s->keep || !s->count || !edge) {
        tm_mem_free(p->mem, edge, 2 * (n_threads + 1) * sizeof *edge);
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    }
    size_t end = n; /* with truncate: the first sample past 30 s */
    if (truncate) {
        end = 0;
        while (end < n && (uint64_t)p->samples[end].ts - (uint64_t)p->samples[0].ts <= V1_MAX_DURATION_NS) end++;
    }
    for (size_t i = 0; i < n_threads; i++) edge[2 * i] = SIZE_MAX, edge[2 * i + 1] = 0;
    for (size_t i = 0; i < end; i++) {
        const tm_prof_sample *x = &p->samples[i];
        if (!p->stacks[x->stack].len) continue;
        if (edge[2 * x->thread] == SIZE_MAX) edge[2 * x->thread] = i;
        edge[2 * x->thread + 1] = i;
    }
    memset(s->count, 0, (n_threads + 1) * sizeof *s->count);
    for (size_t i = 0; i < n; i++) {
        uint32_t th = p->samples[i].thread;
        s->keep[i] = i < end && edge[2 * th] != SIZE_MAX && i >= edge[2 * th] && i <= edge[2 * th + 1];
        s->count[th] += s->keep[i];
    }
    tm_mem_free(p->mem, edge, 2 * (n_threads + 1) * sizeof *edge);
    s->n_kept = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t th = p->samples[i].thread;
        if (s->keep[i] && s->count[th] <= 1) s->keep[i] = 0;
        if (!s->keep[i]) continue;
        if (!s->n_kept++) s->first = p->samples[i].ts;
        s->last = p->samples[i].ts;
    }
    for (size_t i = 0; i < n_threads; i++)
        if (s->count[i] <= 1) s->count[i] = 0;
    if (!s->n_kept)
        return REJECT(err, "NotEnoughSamples", "no thread has two samples between its first and last non-empty stack");
    uint64_t span = (uint64_t)s->last - (uint64_t)s->first;
    if (span > V1_MAX_DURATION_NS)
        return REJECT(err, "DurationIsTooLong", "samples span %.3f s, more than the 30 s a transaction profile may "
                      "last (the truncate option, --truncate, keeps the first 30 s)", (double)span / 1e9);
    return TM_OK;
}

/* ---- ids ---- */

/* 32 hex digits with the UUID v4 version and variant bits, from two hashes
 * of the written samples (as written: elapsed time, stack, tid) and a salt. */
static void derive_id(const tm_profile *p, const selection *s, uint64_t salt, char out[33]) {
    uint64_t h[2] = {salt, ~salt};
    for (size_t i = 0; i < p->n_samples; i++) {
        if (!s->keep[i]) continue;
        const tm_prof_sample *x = &p->samples[i];
        uint64_t v = ((uint64_t)x->ts - (uint64_t)s->first) ^ ((uint64_t)x->stack << 32) ^
                     (uint64_t)p->threads[x->thread].tid;
        h[0] = tm_hash_u64(h[0] ^ v);
        h[1] = tm_hash_u64(h[1] + v);
    }
    uint8_t b[16];
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(h[0] >> (8 * i)), b[8 + i] = (uint8_t)(h[1] >> (8 * i));
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
    for (int i = 0; i < 16; i++) {
        out[2 * i] = "0123456789abcdef"[b[i] >> 4];
        out[2 * i + 1] = "0123456789abcdef"[b[i] & 15];
    }
    out[32] = 0;
}

/* ---- writing ---- */

static int has_java(const tm_profile *p) {
    for (size_t i = 0; i < p->n_frames; i++)
        if (p->frames[i].flags & TM_FRAME_JAVA) return 1;
    return 0;
}

/* The thread the transaction ran on: the metadata's, else the one with
 * the most samples written (ties: the lowest tid), which reading the
 * output back gives again. */
static int64_t active_thread(const tm_profile *p, const meta *m, const selection *s) {
    if (m->has_active_tid) return m->active_tid;
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < p->n_threads; i++) {
        if (!s->count[i]) continue;
        if (best == SIZE_MAX || s->count[i] > s->count[best] ||
            (s->count[i] == s->count[best] && p->threads[i].tid < p->threads[best].tid))
            best = i;
    }
    return p->threads[best].tid;
}

static void write_quoted_i64(tm_jw *w, int64_t v) {
    tm_jw_char(w, '"');
    tm_jw_i64(w, v);
    tm_jw_char(w, '"');
}

static void write_id(tm_jw *w, const char *given, const tm_profile *p, const selection *s, uint64_t salt) {
    char id[33];
    if (!given[0]) derive_id(p, s, salt, id);
    tm_jw_char(w, '"');
    tm_jw_raw(w, given[0] ? given : id, 32);
    tm_jw_char(w, '"');
}

/* A member from the metadata when it is there: ,"key":value */
static void write_member(tm_jw *w, const char *key, const json_t *v) {
    if (!v) return;
    tm_jw_char(w, ',');
    tm_jw_cstr(w, key);
    tm_jw_char(w, ':');
    tm_sentry_write_value(w, v);
}

static void write_header(tm_jw *w, const tm_profile *p, const meta *m, const selection *s, int64_t start_unix_ns) {
    tm_jw_lit(w, "{\"version\":\"1\",\"platform\":");
    if (m->platform) tm_sentry_write_value(w, m->platform);
    else tm_jw_cstr(w, has_java(p) ? "java" : "native");
    tm_jw_lit(w, ",\"event_id\":");
    write_id(w, m->event_id, p, s, 1);
    char ts[TM_RFC3339_MAX];
    tm_jw_lit(w, ",\"timestamp\":\"");
    tm_jw_raw(w, ts, tm_rfc3339_format(start_unix_ns, ts));
    tm_jw_char(w, '"');
    write_member(w, "release", m->release);
    write_member(w, "environment", m->environment);
    write_member(w, "dist", m->dist);
    if (m->device) write_member(w, "device", m->device);
    else tm_jw_lit(w, ",\"device\":{\"architecture\":\"unknown\"}");
    if (m->os) write_member(w, "os", m->os);
    else tm_jw_lit(w, ",\"os\":{\"name\":\"unknown\",\"version\":\"unknown\"}");
    write_member(w, "runtime", m->runtime);
    if (tm_sentry_has_images(p)) {
        tm_jw_lit(w, ",\"debug_meta\":{\"images\":[");
        tm_sentry_write_images(w, p, 0);
        tm_jw_lit(w, "]}");
    }
    tm_jw_lit(w, ",\"transactions\":[{\"name\":");
    if (m->tx_name) tm_sentry_write_value(w, m->tx_name);
    else tm_jw_lit(w, "\"tracemill\"");
    tm_jw_lit(w, ",\"id\":");
    write_id(w, m->tx_id, p, s, 2);
    tm_jw_lit(w, ",\"trace_id\":");
    write_id(w, m->trace_id, p, s, 3);
    tm_jw_lit(w, ",\"active_thread_id\":");
    write_quoted_i64(w, active_thread(p, m, s));
    /* Relay wants start < end, and keeps the samples within [start, end]. */
    uint64_t span = (uint64_t)s->last - (uint64_t)s->first;
    tm_jw_lit(w, ",\"relative_start_ns\":\"0\",\"relative_end_ns\":\"");
    tm_jw_u64(w, span ? span : 1);
    tm_jw_lit(w, "\"}]");
}

static void write_samples(tm_jw *w, const tm_profile *p, const selection *s) {
    tm_jw_lit(w, ",\"profile\":{\"samples\":[");
    int comma = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        if (!s->keep[i]) continue;
        const tm_prof_sample *x = &p->samples[i];
        char *o = tm_jw_reserve(w, 128);
        if (comma) *o++ = ',';
        comma = 1;
        static const char k1[] = "{\"elapsed_since_start_ns\":\"", k2[] = "\",\"thread_id\":\"",
                          k3[] = "\",\"stack_id\":";
        memcpy(o, k1, sizeof k1 - 1);
        o = tm_put_u64(o + sizeof k1 - 1, (uint64_t)x->ts - (uint64_t)s->first);
        memcpy(o, k2, sizeof k2 - 1);
        o += sizeof k2 - 1;
        int64_t tid = p->threads[x->thread].tid;
        if (tid < 0) *o++ = '-';
        o = tm_put_u64(o, tid < 0 ? (uint64_t)0 - (uint64_t)tid : (uint64_t)tid);
        memcpy(o, k3, sizeof k3 - 1);
        o = tm_put_u64(o + sizeof k3 - 1, x->stack);
        *o++ = '}';
        tm_jw_commit(w, o);
    }
    tm_jw_char(w, ']');
}

/* rules NULL: no in_app (Relay's converter never writes it). */
static void write_stacks_and_frames(tm_jw *w, const tm_profile *p, uint64_t addr_mask, const tm_in_app_rules *rules) {
    tm_jw_lit(w, ",\"stacks\":[");
    for (size_t i = 0; i < p->n_stacks; i++) {
        const tm_prof_stack *sk = &p->stacks[i];
        if (i) tm_jw_char(w, ',');
        tm_jw_char(w, '[');
        for (uint32_t j = 0; j < sk->len; j++) { /* leaf first, as the model and sentry-python */
            if (j) tm_jw_char(w, ',');
            tm_jw_u64(w, p->frame_ids[sk->off + j]);
        }
        tm_jw_char(w, ']');
    }
    tm_jw_lit(w, "],\"frames\":[");
    for (size_t i = 0; i < p->n_frames; i++) {
        const tm_prof_frame *f = &p->frames[i];
        if (i) tm_jw_char(w, ',');
        char sep = '{';
        if (f->flags & TM_FRAME_HAS_FILE) { /* as Sample v2: a path from the root is abs_path too */
            if (f->file.data[0] == '/') {
                tm_jw_lit(w, "{\"abs_path\":");
                tm_jw_str(w, f->file);
                sep = ',';
            }
            tm_jw_char(w, sep);
            tm_jw_lit(w, "\"filename\":");
            tm_jw_str(w, f->file);
            sep = ',';
        }
        if (f->flags & TM_FRAME_HAS_FUNCTION) {
            tm_jw_char(w, sep);
            tm_jw_lit(w, "\"function\":");
            tm_jw_str(w, f->function);
            sep = ',';
        }
        int in_app = rules ? tm_sentry_in_app(p, (uint32_t)i, rules) : -1;
        if (in_app >= 0) {
            tm_jw_char(w, sep);
            if (in_app) tm_jw_lit(w, "\"in_app\":true"); /* a literal: tm_jw_lit takes its size */
            else tm_jw_lit(w, "\"in_app\":false");
            sep = ',';
        }
        if (f->flags & TM_FRAME_HAS_MODULE) {
            tm_jw_char(w, sep);
            tm_jw_lit(w, "\"module\":");
            tm_jw_str(w, f->module);
            sep = ',';
        }
        if (f->flags & TM_FRAME_HAS_ADDR) {
            tm_jw_char(w, sep);
            tm_jw_lit(w, "\"instruction_addr\":");
            /* inside its image, as tm_sentry_write_images places it */
            tm_jw_hex(w, (p->relay_compat ? f->addr : tm_frame_process_address(p, f)) & addr_mask);
            sep = ',';
        }
        if (f->flags & TM_FRAME_HAS_LINE) {
            tm_jw_char(w, sep);
            tm_jw_lit(w, "\"lineno\":");
            tm_jw_u64(w, f->line);
            sep = ',';
        }
        if (f->flags & TM_FRAME_HAS_PACKAGE) { /* the mapping: in_app is decided again from it when read back */
            tm_jw_char(w, sep);
            tm_jw_lit(w, "\"package\":");
            tm_jw_str(w, f->package);
            sep = ',';
        }
        if (f->flags & TM_FRAME_JAVA) {
            tm_jw_char(w, sep);
            tm_jw_lit(w, "\"platform\":\"java\"");
            sep = ',';
        }
        if (sep == '{') tm_jw_char(w, '{');
        tm_jw_char(w, '}');
    }
    tm_jw_char(w, ']');
}

typedef struct tid_index {
    int64_t tid;
    uint32_t index;
} tid_index;

static int cmp_tid(const void *a, const void *b) {
    int64_t x = ((const tid_index *)a)->tid, y = ((const tid_index *)b)->tid;
    return (x > y) - (x < y);
}

/* {"<tid>": {"name": ...}} for the threads written that have a name (a
 * main thread without one of its own: its process's, else "main"), sorted
 * by tid. */
static tm_status write_thread_metadata(tm_jw *w, const tm_profile *p, const selection *s, tm_error *err) {
    tid_index *order = tm_mem_alloc(p->mem, (p->n_threads + 1) * sizeof *order);
    if (!order) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < p->n_threads; i++) {
        const tm_prof_thread *th = &p->threads[i];
        if (s->count[i] && (th->name_prio || (th->pid && th->tid == th->pid))) {
            order[n].tid = th->tid;
            order[n++].index = (uint32_t)i;
        }
    }
    qsort(order, n, sizeof *order, cmp_tid);
    tm_jw_lit(w, ",\"thread_metadata\":{");
    for (size_t i = 0; i < n; i++) {
        const tm_prof_thread *th = &p->threads[order[i].index];
        if (i) tm_jw_char(w, ',');
        write_quoted_i64(w, th->tid);
        tm_jw_lit(w, ":{\"name\":");
        tm_str proc = tm_profile_main_thread_process_name(p, th);
        if (th->name_prio) tm_jw_str(w, th->name);
        else if (proc.len) tm_jw_str(w, proc);
        else tm_jw_lit(w, "\"main\"");
        tm_jw_char(w, '}');
    }
    tm_jw_lit(w, "}}}");
    tm_mem_free(p->mem, order, (p->n_threads + 1) * sizeof *order);
    return TM_OK;
}

static tm_status write_profile(tm_jw *w, const tm_profile *p, const meta *m, const selection *s, int64_t start,
                               const tm_in_app_rules *rules, tm_error *err) {
    write_header(w, p, m, s, start);
    write_samples(w, p, s);
    int cocoa_arm = tm_sentry_str_is(m->platform, "cocoa") && m->device &&
                    (tm_sentry_str_is(json_object_get(m->device, "architecture"), "arm64") ||
                     tm_sentry_str_is(json_object_get(m->device, "architecture"), "arm64e"));
    write_stacks_and_frames(w, p, cocoa_arm ? COCOA_ADDR_MASK : UINT64_MAX, rules);
    return write_thread_metadata(w, p, s, err);
}

tm_status tm_write_sample_v1(const tm_trace *t, const tm_sample_v1_options *opts, const tm_sink *out,
                             tm_error *err) {
    static const tm_sample_v1_options no_opts;
    if (!t || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_sample_v1: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_sample_v1_options", err));
    if (!opts) opts = &no_opts;
    const tm_profile *p = tm_trace_profile(t);
    if (p->untimed)
        return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "folded stacks have no timestamps, which Sample v1 needs");
    meta m;
    memset(&m, 0, sizeof m);
    selection sel;
    memset(&sel, 0, sizeof sel);
    tm_jw *w = NULL;
    int64_t start = 0;
    tm_status st = TM_OK;
    if (opts->meta_json) st = parse_meta(opts->meta_json, opts->meta_len, &m, err);
    if (st == TM_OK) st = select_samples(p, opts->truncate, &sel, err);
    if (st == TM_OK && p->relay_compat) { /* Relay's clock: the first BOOTTIME/REALTIME snapshot, as Sample v2's */
        tm_i128 unix_ns = (tm_i128)sel.first + p->relay_offset_ns;
        if (!p->has_relay_offset)
            st = tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL,
                         "no ClockSnapshot holds both BOOTTIME and REALTIME, so the profile's timestamp is unknown");
        else if (unix_ns < INT64_MIN || unix_ns > INT64_MAX)
            st = tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "the profile's timestamp is out of range");
        else start = (int64_t)unix_ns;
    } else if (st == TM_OK && !tm_profile_realtime(p, sel.first, &start))
        st = tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL,
                     "no ClockSnapshot relates the trace clock to REALTIME, so the profile's timestamp is unknown");
    tm_in_app_rules rules;
    if (st == TM_OK)
        st = tm_in_app_rules_of(opts->in_app_prefixes, opts->n_in_app_prefixes, opts->not_in_app_prefixes,
                                opts->n_not_in_app_prefixes, "tm_write_sample_v1", &rules, err);
    if (st == TM_OK && !(w = tm_mem_alloc(p->mem, sizeof *w))) st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    if (st == TM_OK) {
        tm_jw_init(w, out);
        st = write_profile(w, p, &m, &sel, start, p->relay_compat ? NULL : &rules, err);
        tm_status wst = tm_jw_finish(w);
        if (st == TM_OK && wst != TM_OK) st = tm_fail(err, wst, 0, NULL, "writing the output failed");
    }
    tm_mem_free(p->mem, w, sizeof *w);
    selection_release(p, &sel);
    if (m.root) json_decref(m.root);
    return tm_trace_budget_status(t, st, err);
}
