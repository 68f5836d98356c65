/*
 * out_sample_v2.c — profile model -> Sentry Sample v2 profile-chunk JSON
 * (Relay's format), written in one streaming pass.
 *
 * Metadata (the [JSON] part of a profile_chunk item) is read with jansson
 * and merged the way Relay's expand_perfetto does: known keys in Relay's
 * serialisation order, SDK debug images first, "release" always present,
 * unknown keys dropped; bad metadata is InvalidJson. A tm_chunk_meta holds
 * metadata read once, for a caller that reads its fields too. Then Sample v2's
 * normalisation: optional single-sample-thread removal, NotEnoughSamples,
 * index checks, DurationIsTooLong.
 *
 * Relay mode writes Relay's bytes: timestamps rounded to milliseconds as
 * f64 seconds, only the first observed pid named "main". Default mode
 * writes exact nanosecond timestamps and names every thread (a main thread
 * without a name after its process).
 */
#include <math.h>

#include "common/limits.h"
#include "export/sentry_json.h" /* tm_sentry_*, tm_jw, tm_profile */

#define REJECT(err, reason, ...) tm_fail((err), TM_ERR_REJECTED, 0, (reason), __VA_ARGS__)

/* ---- metadata ---- */

typedef struct meta {
    json_t *root;  /* the metadata's document */
    json_t *owned; /* root when read from JSON here (parse_meta), not a tm_chunk_meta's */
    char chunk_id[33], profiler_id[33];
    json_t *platform, *release, *environment, *content_type, *client_sdk, *images, *measurements;
} meta;

static const char *const image_types[] = {"symbolic", "macho", "sourcemap", "proguard", "jvm"};

/* The metadata as read: the document, or why it is not JSON. */
struct tm_chunk_meta {
    json_t *root; /* NULL: not JSON, see je */
    json_error_t je;
    size_t len; /* bytes given: over TM_MAX_META_BYTES is rejected */
    tm_mem mem; /* the handle's own memory */
};

static json_t *load_meta(const char *json, size_t len, json_error_t *je) {
    /* serde_json, which Relay reads it with, takes "\u0000" in strings and
     * integers beyond 64 bits (as floats): so do we, the latter on a second
     * pass, so that ordinary integers stay integers. */
    if (!json && !len) json = ""; /* an empty file: jansson's error for NULL is "wrong arguments" */
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, je);
    if (!root && strstr(je->text, "too big"))
        root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, je);
    return root;
}

/* Relay's checks of the metadata read (c), in its order; m's fields point
 * into c's document. */
static tm_status check_meta(const tm_chunk_meta *c, meta *m, tm_error *err) {
    memset(m, 0, sizeof *m);
    if (c->len > TM_MAX_META_BYTES)
        return REJECT(err, "InvalidJson", "metadata larger than %u bytes", TM_MAX_META_BYTES);
    if (!c->root) return tm_fail(err, TM_ERR_REJECTED, tm_sentry_json_error_offset(&c->je), "InvalidJson",
                                 "metadata is not JSON: %s", c->je.text);
    m->root = c->root;
    if (!json_is_object(m->root)) return REJECT(err, "InvalidJson", "metadata is not a JSON object");
    json_t *o = m->root, *v;
    v = json_object_get(o, "version");
    if (!tm_sentry_str_is(v, "2"))
        return REJECT(err, "InvalidJson", "metadata field version must be \"2\"");
    if (!tm_sentry_event_id(json_object_get(o, "chunk_id"), m->chunk_id))
        return REJECT(err, "InvalidJson", "metadata field chunk_id is missing or not a UUID");
    if (!tm_sentry_event_id(json_object_get(o, "profiler_id"), m->profiler_id))
        return REJECT(err, "InvalidJson", "metadata field profiler_id is missing or not a UUID");
    m->platform = json_object_get(o, "platform");
    if (!json_is_string(m->platform)) return REJECT(err, "InvalidJson", "metadata field platform is missing or not a string");
    m->client_sdk = json_object_get(o, "client_sdk");
    if (!json_is_object(m->client_sdk) || !json_is_string(json_object_get(m->client_sdk, "name")) ||
        !json_is_string(json_object_get(m->client_sdk, "version")))
        return REJECT(err, "InvalidJson", "metadata field client_sdk needs string name and version");
#define OPTIONAL(field, key, test, what)                                                  \
    m->field = json_object_get(o, key);                                                 \
    if (json_is_null(m->field)) m->field = NULL;                                         \
    if (m->field && !test(m->field))                                                     \
        return REJECT(err, "InvalidJson", "metadata field " key " is not " what);
    OPTIONAL(release, "release", json_is_string, "a string")
    OPTIONAL(environment, "environment", json_is_string, "a string")
    OPTIONAL(content_type, "content_type", json_is_string, "a string")
    OPTIONAL(measurements, "measurements", json_is_object, "an object")
#undef OPTIONAL
    json_t *dm = json_object_get(o, "debug_meta");
    if (dm && !json_is_null(dm)) {
        if (!json_is_object(dm)) return REJECT(err, "InvalidJson", "metadata field debug_meta is not an object");
        m->images = json_object_get(dm, "images");
        if (json_is_null(m->images)) m->images = NULL;
        if (m->images && !json_is_array(m->images))
            return REJECT(err, "InvalidJson", "debug_meta.images is not an array");
        size_t i;
        json_t *img;
        json_array_foreach(m->images, i, img) {
            json_t *ty = json_object_get(img, "type");
            int known = 0;
            for (size_t k = 0; k < sizeof image_types / sizeof *image_types; k++)
                known |= tm_sentry_str_is(ty, image_types[k]);
            if (!json_is_object(img) || !known)
                return REJECT(err, "InvalidJson", "debug_meta.images[%zu] has no known type", i);
        }
    }
    if (m->measurements) {
        const char *key;
        json_t *ms;
        json_object_foreach(m->measurements, key, ms) {
            json_t *vals = json_object_get(ms, "values");
            if (!json_is_object(ms) || !json_is_string(json_object_get(ms, "unit")) || !json_is_array(vals))
                return REJECT(err, "InvalidJson", "measurement %s needs a string unit and values", key);
            size_t i;
            json_t *e;
            json_array_foreach(vals, i, e) {
                if (!json_is_number(json_object_get(e, "value")) || !json_is_number(json_object_get(e, "timestamp")))
                    return REJECT(err, "InvalidJson", "measurement %s value %zu needs numeric timestamp and value", key, i);
            }
        }
    }
    return TM_OK;
}

/* check_meta of the JSON in json[0..len), not read at all when too large;
 * m owns the document (m->owned). */
static tm_status parse_meta(const char *json, size_t len, meta *m, tm_error *err) {
    tm_chunk_meta c;
    memset(&c, 0, sizeof c);
    c.len = len;
    if (len <= TM_MAX_META_BYTES) c.root = load_meta(json, len, &c.je);
    tm_status st = check_meta(&c, m, err);
    m->owned = c.root;
    return st;
}

tm_status tm_chunk_meta_new(const char *json, size_t len, tm_chunk_meta **out, tm_error *err) {
    if (!out) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_chunk_meta_new: NULL argument");
    *out = NULL;
    tm_mem mem;
    tm_mem_init(&mem, NULL);
    tm_chunk_meta *c = tm_mem_alloc(&mem, sizeof *c);
    if (!c) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    *c = (tm_chunk_meta){.mem = mem, .len = len};
    /* whatever its size: the fields of metadata too large are read too */
    c->root = load_meta(json, len, &c->je);
    *out = c;
    return TM_OK;
}

const char *tm_chunk_meta_string(const tm_chunk_meta *c, const char *key, size_t *len) {
    const json_t *v = c && key ? json_object_get(c->root, key) : NULL;
    if (len) *len = json_string_length(v);
    return json_string_value(v);
}

tm_status tm_chunk_meta_check(const tm_chunk_meta *c, tm_error *err) {
    if (!c) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_chunk_meta_check: NULL argument");
    meta m;
    return check_meta(c, &m, err);
}

void tm_chunk_meta_free(tm_chunk_meta *c) {
    if (!c) return;
    json_decref(c->root);
    tm_mem mem = c->mem;
    tm_mem_free(&mem, c, sizeof *c);
}

/* An SDK image with Relay's DebugImage key order; unknown keys dropped. */
static void write_meta_image(tm_jw *w, const json_t *img) {
    static const char *const keys[] = {"code_file", "debug_id", "debug_file", "type", "image_addr",
                                       "image_vmaddr", "image_size", "uuid"};
    int first = 1;
    tm_jw_char(w, '{');
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const json_t *v = json_object_get(img, keys[k]);
        if (!v || json_is_null(v)) continue;
        if (!first) tm_jw_char(w, ',');
        first = 0;
        tm_jw_cstr(w, keys[k]);
        tm_jw_char(w, ':');
        tm_sentry_write_value(w, v);
    }
    tm_jw_char(w, '}');
}

/* Measurements as ChunkMeasurement {unit, values: [{timestamp, value}]},
 * keys sorted as a BTreeMap serialises them: the metadata's, and in
 * default mode the trace's own memory_footprint (the resident set of
 * ProcessStats readings, bytes at Unix seconds) unless the metadata has
 * one. */
static int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

#define FOOTPRINT "memory_footprint"

/* The trace's memory readings for the chunk: those of the process of the
 * first thread with a known pid (all of them when none is known). */
static int64_t footprint_pid(const tm_profile *p) {
    for (size_t i = 0; i < p->n_threads; i++)
        if (p->threads[i].pid) return p->threads[i].pid;
    return 0;
}

static bool has_footprint(const tm_profile *p, const json_t *ms) {
    if (p->relay_compat || !p->n_memory || !p->n_realtime) return false;
    return !(ms && json_object_get(ms, FOOTPRINT));
}

static void write_footprint(tm_jw *w, const tm_profile *p) {
    tm_jw_lit(w, ":{\"unit\":\"byte\",\"values\":[");
    int64_t pid = footprint_pid(p);
    int first = 1;
    for (size_t i = 0; i < p->n_memory; i++) {
        const tm_prof_memory *m = &p->memory[i];
        int64_t unix_ns;
        if ((pid && m->pid != pid) || !tm_profile_realtime(p, m->ts, &unix_ns)) continue;
        if (!first) tm_jw_char(w, ',');
        first = 0;
        tm_jw_lit(w, "{\"timestamp\":");
        tm_jw_seconds(w, unix_ns); /* exact, as the samples' times: read back to the same ns */
        tm_jw_lit(w, ",\"value\":");
        tm_jw_u64(w, m->rss);
        tm_jw_char(w, '}');
    }
    tm_jw_lit(w, "]}");
}

static tm_status write_measurements(tm_jw *w, const tm_profile *p, const json_t *ms, tm_error *err) {
    bool footprint = has_footprint(p, ms);
    size_t n = (ms ? json_object_size(ms) : 0) + footprint, i = 0;
    if (!n) return TM_OK;
    const char **keys = tm_mem_alloc(p->mem, n * sizeof *keys);
    if (!keys) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    const char *k;
    json_t *v;
    if (ms) json_object_foreach((json_t *)ms, k, v) keys[i++] = k;
    if (footprint) keys[i++] = FOOTPRINT;
    qsort(keys, n, sizeof *keys, cmp_cstr);
    tm_jw_lit(w, "\"measurements\":{");
    for (i = 0; i < n; i++) {
        if (i) tm_jw_char(w, ',');
        tm_jw_cstr(w, keys[i]);
        const json_t *m = ms ? json_object_get(ms, keys[i]) : NULL;
        if (!m) {
            write_footprint(w, p);
            continue;
        }
        tm_jw_lit(w, ":{\"unit\":");
        tm_sentry_write_value(w, json_object_get(m, "unit"));
        tm_jw_lit(w, ",\"values\":[");
        size_t j;
        json_t *e;
        json_array_foreach(json_object_get(m, "values"), j, e) {
            if (j) tm_jw_char(w, ',');
            tm_jw_lit(w, "{\"timestamp\":");
            tm_jw_f64(w, json_number_value(json_object_get(e, "timestamp")));
            tm_jw_lit(w, ",\"value\":");
            tm_jw_f64(w, json_number_value(json_object_get(e, "value")));
            tm_jw_char(w, '}');
        }
        tm_jw_lit(w, "]}");
    }
    tm_jw_lit(w, "},");
    tm_mem_free(p->mem, keys, n * sizeof *keys);
    return TM_OK;
}

/* ---- profile ---- */

/* Sample v2 normalisation strips pointer-authentication bits from
 * instruction addresses on platform "cocoa" (arm64e). */
#define COCOA_ADDR_MASK 0x0000000FFFFFFFFFull

/* A frame is written in one piece of at most FRAME_ROOM bytes, in place
 * (tm_jw_begin), without a room check or a buffer update per key: keys,
 * literals and numbers (FRAME_FIXED bytes at most) and its strings, those
 * of up to FRAME_STRING bytes in place when plain, others through
 * tm_jw_str between two pieces. */
#define FRAME_STRING 512
#define FRAME_FIXED 256
#define FRAME_ROOM (FRAME_FIXED + 5 * (FRAME_STRING + 2)) /* the file is written twice */

typedef struct frame_piece {
    tm_jw *w;
    char *start;
    char scratch[FRAME_ROOM];
} frame_piece;

static char *piece_begin(frame_piece *fp) { return fp->start = tm_jw_begin(fp->w, FRAME_ROOM, fp->scratch); }

static void piece_end(frame_piece *fp, const char *end) { tm_jw_end(fp->w, fp->start, end, fp->scratch); }

/* A key after a comma unless it is the object's first: fixed-size copies. */
#define FRAME_KEY(o, comma, key)                 \
    do {                                         \
        *(o) = ',';                              \
        (o) += (comma);                          \
        memcpy((o), key, sizeof key - 1);        \
        (o) += sizeof key - 1;                   \
    } while (0)

/* A string that needs escaping, or long, between two pieces. */
static TM_COLD char *put_frame_str_escaped(frame_piece *fp, char *o, tm_str s) {
    piece_end(fp, o);
    tm_jw_str(fp->w, s);
    return piece_begin(fp);
}

static inline char *put_frame_str(frame_piece *fp, char *o, tm_str s) {
    char *e = s.len <= FRAME_STRING ? tm_put_plain_str(o, s) : NULL;
    return TM_LIKELY(e != NULL) ? e : put_frame_str_escaped(fp, o, s);
}

/* A frame's keys in the order of Relay's Frame: abs_path, filename,
 * function, in_app (-1: none), instruction_addr, lineno, module, package,
 * platform. */
static void write_frame(tm_jw *w, const tm_prof_frame *f, uint64_t addr, int in_app, bool plain_package) {
    frame_piece fp;
    fp.w = w;
    char *o = piece_begin(&fp);
    *o++ = '{';
    int comma = 0;
    if (f->flags & TM_FRAME_HAS_FILE) { /* from symbols; a path from the root is abs_path too */
        if (f->file.data[0] == '/') {
            FRAME_KEY(o, 0, "\"abs_path\":");
            o = put_frame_str(&fp, o, f->file);
            comma = 1;
        }
        FRAME_KEY(o, comma, "\"filename\":");
        o = put_frame_str(&fp, o, f->file);
        comma = 1;
    }
    if (f->flags & TM_FRAME_HAS_FUNCTION) {
        FRAME_KEY(o, comma, "\"function\":");
        o = put_frame_str(&fp, o, f->function);
        comma = 1;
    }
    if (in_app >= 0) {
        if (in_app) FRAME_KEY(o, comma, "\"in_app\":true");
        else FRAME_KEY(o, comma, "\"in_app\":false");
        comma = 1;
    }
    if (f->flags & TM_FRAME_HAS_ADDR) {
        FRAME_KEY(o, comma, "\"instruction_addr\":");
        o = tm_put_hex(o, addr);
        comma = 1;
    }
    if (f->flags & TM_FRAME_HAS_LINE) {
        FRAME_KEY(o, comma, "\"lineno\":");
        o = tm_put_u64(o, f->line);
        comma = 1;
    }
    if (f->flags & TM_FRAME_HAS_MODULE) {
        FRAME_KEY(o, comma, "\"module\":");
        o = put_frame_str(&fp, o, f->module);
        comma = 1;
    }
    if (f->flags & TM_FRAME_HAS_PACKAGE) {
        FRAME_KEY(o, comma, "\"package\":");
        if (plain_package && f->package.len <= FRAME_STRING) { /* known plain: no scan */
            o[0] = '"';
            memcpy(o + 1, f->package.data, f->package.len);
            o[f->package.len + 1] = '"';
            o += f->package.len + 2;
        } else {
            o = put_frame_str(&fp, o, f->package); /* a plain one: the same bytes */
        }
        comma = 1;
    }
    if (f->flags & TM_FRAME_JAVA) FRAME_KEY(o, comma, "\"platform\":\"java\"}");
    else FRAME_KEY(o, comma, "\"platform\":\"native\"}");
    piece_end(&fp, o);
}

#undef FRAME_KEY

/* Relay's timestamp: f64 seconds of (ts + offset), rounded to ms. */
static double relay_seconds(const tm_profile *p, int64_t ts) {
    tm_i128 v = (tm_i128)(uint64_t)ts + p->relay_offset_ns;
    double secs = (double)v / 1e9;
    return round(secs * 1000.0) / 1000.0;
}

/* The per-record pieces are forced inline into one loop whose state is
 * all local: a store through the output pointer may alias anything
 * reachable otherwise, and the compiler would reload it after each. */
#define SAMPLE_INLINE static inline __attribute__((always_inline))

/* Three-digit groups "000".."999"; the 4th byte holds the group's count of
 * trailing zeros, so fractions are trimmed without re-reading digits. A
 * constant table: filling it per chunk cost as much as a tenth of the
 * samples' writing. */
typedef char digit_group[4];

#define GROUP(a, b, c) {'0' + (a), '0' + (b), '0' + (c), (c) ? 0 : (b) ? 1 : (a) ? 2 : 3}
#define GROUPS_OF_TENS(a, b)                                                                            \
    GROUP(a, b, 0), GROUP(a, b, 1), GROUP(a, b, 2), GROUP(a, b, 3), GROUP(a, b, 4), GROUP(a, b, 5),     \
        GROUP(a, b, 6), GROUP(a, b, 7), GROUP(a, b, 8), GROUP(a, b, 9)
#define GROUPS_OF_HUNDREDS(a)                                                                              \
    GROUPS_OF_TENS(a, 0), GROUPS_OF_TENS(a, 1), GROUPS_OF_TENS(a, 2), GROUPS_OF_TENS(a, 3),                 \
        GROUPS_OF_TENS(a, 4), GROUPS_OF_TENS(a, 5), GROUPS_OF_TENS(a, 6), GROUPS_OF_TENS(a, 7),             \
        GROUPS_OF_TENS(a, 8), GROUPS_OF_TENS(a, 9)

static const digit_group digit_groups[1000] = {
    GROUPS_OF_HUNDREDS(0), GROUPS_OF_HUNDREDS(1), GROUPS_OF_HUNDREDS(2), GROUPS_OF_HUNDREDS(3),
    GROUPS_OF_HUNDREDS(4), GROUPS_OF_HUNDREDS(5), GROUPS_OF_HUNDREDS(6), GROUPS_OF_HUNDREDS(7),
    GROUPS_OF_HUNDREDS(8), GROUPS_OF_HUNDREDS(9)};

#undef GROUPS_OF_HUNDREDS
#undef GROUPS_OF_TENS
#undef GROUP

/* The samples array, its records written in place from precomputed
 * texts, a few loads and fixed-size copies a sample: the time's
 * ",{\"timestamp\":1771278043.001" (kept while samples share it, its
 * second while samples stay in that) and the rest of the record,
 * ",\"stack_id\":28,\"thread_id\":\"4202\"}", made the first time its
 * (stack, thread) pair is met (PAIR_SLOT bytes a pair, the length in the
 * last).
 * When there are too many pairs for that, the rest is put together from
 * the stack's text and the thread's (STACK_SLOT and THREAD_SLOT bytes
 * each, the text's length in the slot's last byte). The fixed-size copies
 * write past the texts; SAMPLE_MAX bytes of room hold a record and that
 * slack. */
#define SAMPLE_MAX 160
#define STACK_SLOT 24  /* ",\"stack_id\":" and 5 digits: the first STACK_TEXTS stacks */
#define STACK_TEXTS 65536u
#define THREAD_SLOT 40 /* ",\"thread_id\":\"-" and 19 digits and "\"}" is 36 bytes */
#define PAIR_SLOT 64   /* a stack's text (at most 17 bytes) and a thread's copied after it */
#define PAIR_TEXTS 65536u /* at most so many pairs (4 MiB), and no more than samples */
#define PAIR_UNMADE 0     /* a pair's length before its first record */
#define PAIR_DROPPED 255  /* a pair's length when its thread's samples are not written */
#define SECOND_TEXT 24 /* ",{\"timestamp\":" and 10 digits (INT64_MAX ns is 9223372036 s) */
#define TIME_TEXT 40   /* and ".ddddddddd", and the byte a group's copy writes past it */

typedef struct sample_texts {
    const char *stack, *thread;
    size_t n_stack;
} sample_texts;

/* Texts of (stack, thread) pairs, index stack * n_threads + thread; NULL
 * text: too many pairs, none made. */
typedef struct pair_texts {
    char *text;
    size_t n_threads;
    const uint8_t *drop; /* per thread, or NULL */
    uint8_t *written;    /* per thread */
    sample_texts parts;
} pair_texts;

/* The last record's time as text, and the second and the millisecond it
 * falls in: the text through the second's digits (second_len bytes), and
 * through its millisecond's ".ddd" (at most 4 bytes more: ms_len, zeros
 * trimmed, as the text of the millisecond's start). Both starts are
 * never negative: a time before the epoch never matches (NO_SECOND). The
 * loop keeps the text's length in a local, in a register. */
typedef struct time_text {
    uint64_t second_ns, ms_ns;
    size_t second_len, ms_len;
    char text[TIME_TEXT];
} time_text;

#define NO_SECOND ((uint64_t)1 << 63) /* times from 0 to INT64_MAX are all more than a second past it */

static const char timestamp_key[] = ",{\"timestamp\":";
static const char stack_key[] = ",\"stack_id\":";

/* A time before the epoch: its whole text, no second kept. */
static TM_COLD size_t set_time_negative(time_text *tt, int64_t unix_ns) {
    tt->second_ns = tt->ms_ns = NO_SECOND;
    return (size_t)(tm_put_seconds(tt->text + sizeof timestamp_key - 1, unix_ns) - tt->text);
}

/* tt's second and millisecond for a time at or after the epoch: the
 * second's digits and ".ddd". The 4-byte copy writes one byte past the
 * group; the text has the room. */
SAMPLE_INLINE void set_millisecond(time_text *tt, uint64_t unix_ns) {
    uint64_t in_second = unix_ns - tt->second_ns;
    if (TM_UNLIKELY(in_second >= 1000000000u)) {
        uint64_t secs = unix_ns / 1000000000u;
        tt->second_ns = secs * 1000000000u;
        tt->second_len = (size_t)(tm_put_u64(tt->text + sizeof timestamp_key - 1, secs) - tt->text);
        tt->text[tt->second_len] = '.';
        in_second = unix_ns - tt->second_ns;
    }
    uint32_t ms = (uint32_t)in_second / 1000000u;
    tt->ms_ns = tt->second_ns + (uint64_t)ms * 1000000u;
    memcpy(tt->text + tt->second_len + 1, digit_groups[ms], 4);
    size_t n = 3 - (size_t)digit_groups[ms][3];
    tt->ms_len = tt->second_len + 1 + (n ? n : 1); /* a whole second keeps ".0" */
}

/* tt's text for a time; returns its length: the millisecond's, and the
 * ns within it as ".ddd" groups, zeros trimmed. */
SAMPLE_INLINE size_t set_time(time_text *tt, int64_t unix_ns) {
    if (TM_UNLIKELY(unix_ns < 0)) return set_time_negative(tt, unix_ns);
    uint64_t in_ms = (uint64_t)unix_ns - tt->ms_ns;
    if (TM_UNLIKELY(in_ms >= 1000000u)) {
        set_millisecond(tt, (uint64_t)unix_ns);
        in_ms = (uint64_t)unix_ns - tt->ms_ns;
    }
    if (!in_ms) return tt->ms_len;
    uint32_t us = (uint32_t)in_ms / 1000u, ns = (uint32_t)in_ms - us * 1000u;
    size_t at = tt->second_len + 4; /* past ".ddd" */
    memcpy(tt->text + at, digit_groups[us], 4);
    if (!ns) return at + 3 - (size_t)digit_groups[us][3];
    memcpy(tt->text + at + 3, digit_groups[ns], 4);
    return at + 6 - (size_t)digit_groups[ns][3];
}

/* The stack's text and the thread's, the record's end. */
SAMPLE_INLINE char *put_stack_and_thread(char *o, const tm_prof_sample *s, sample_texts t) {
    if (TM_LIKELY(s->stack < t.n_stack)) {
        const char *text = t.stack + (size_t)s->stack * STACK_SLOT;
        memcpy(o, text, STACK_SLOT);
        o += (uint8_t)text[STACK_SLOT - 1];
    } else {
        memcpy(o, stack_key, sizeof stack_key - 1);
        o = tm_put_u64(o + sizeof stack_key - 1, s->stack);
    }
    const char *text = t.thread + (size_t)s->thread * THREAD_SLOT;
    memcpy(o, text, 32); /* 32 and 8, not one 40-byte copy: gcc makes that a rep movs */
    memcpy(o + 32, text + 32, THREAD_SLOT - 32);
    return o + (uint8_t)text[THREAD_SLOT - 1];
}

/* The first record of pair i (of s): its text, or PAIR_DROPPED; its
 * thread is marked written when it is not dropped. pt by value: the
 * loop's copy stays in registers. */
static TM_COLD uint8_t make_pair(pair_texts pt, const tm_prof_sample *s, char *text) {
    uint8_t len = PAIR_DROPPED;
    if (!pt.drop || !pt.drop[s->thread]) {
        pt.written[s->thread] = 1;
        len = (uint8_t)(put_stack_and_thread(text, s, pt.parts) - text);
    }
    return (uint8_t)(text[PAIR_SLOT - 1] = (char)len);
}

/* Fills n slots of slot_size bytes with prefix and the decimal text of
 * 0, 1, ..., n - 1, each text's length in its slot's last byte. A slot is
 * the one before with its last digits counted up: the number is formatted
 * anew only when it gains a digit. Inline, so that slot_size is a constant
 * and the copies fixed-size. */
SAMPLE_INLINE void put_counting_texts(char *texts, size_t n, size_t slot_size, const char *prefix, size_t prefix_len) {
    if (!n) return;
    memcpy(texts, prefix, prefix_len);
    texts[slot_size - 1] = (char)(tm_put_u64(texts + prefix_len, 0) - texts);
    for (size_t i = 1; i < n; i++) {
        char *slot = texts + i * slot_size, *digits = slot + prefix_len, *d;
        memcpy(slot, slot - slot_size, slot_size);
        for (d = slot + (uint8_t)slot[slot_size - 1] - 1; d >= digits && *d == '9'; d--) *d = '0';
        if (d >= digits) (*d)++;
        else slot[slot_size - 1] = (char)(tm_put_u64(digits, i) - slot); /* 9...9 + 1 */
    }
}

/* Unix time of samples in trace-time order: the realtime segment walked
 * forward, from the first. Passed by value: its address never escapes. */
typedef struct segment_walk {
    size_t seg;
    int64_t next_from, offset;
} segment_walk;

static segment_walk walk_segments(const tm_profile *p, segment_walk sw, int64_t ts) {
    while (ts >= sw.next_from && sw.seg + 1 < p->n_realtime) {
        sw.seg++;
        sw.next_from = sw.seg + 1 < p->n_realtime ? p->realtime[sw.seg + 1].from_ns : INT64_MAX;
    }
    sw.offset = p->realtime[sw.seg].offset_ns;
    return sw;
}

/* The state of the records' loop, in its locals: the trace time of the
 * last record (a time text is made only when it changes, and the clock
 * segment checked), that text and its length. */
typedef struct sample_clock {
    int64_t ts;
    size_t time_len;
    segment_walk sw;
} sample_clock;

/* A default-mode record (exact nanoseconds as Unix seconds) at o; returns
 * its end, o itself when its thread is dropped. by_pair: from pt's pair
 * texts, else from its parts (then marking written and dropping here). */
SAMPLE_INLINE char *put_sample(char *o, const tm_prof_sample *s, const tm_profile *p, const pair_texts *pt, bool by_pair,
                               time_text *tt, sample_clock *c) {
    const char *rest = NULL;
    size_t rest_len = 0;
    if (by_pair) {
        rest = pt->text + ((size_t)s->stack * pt->n_threads + s->thread) * PAIR_SLOT;
        rest_len = (uint8_t)rest[PAIR_SLOT - 1];
        if (TM_UNLIKELY((uint8_t)(rest_len + 1) <= 1)) { /* PAIR_UNMADE or PAIR_DROPPED */
            if (rest_len == PAIR_UNMADE) rest_len = make_pair(*pt, s, (char *)rest);
            if (rest_len == PAIR_DROPPED) return o;
        }
    } else {
        if (pt->drop && pt->drop[s->thread]) return o;
        pt->written[s->thread] = 1;
    }
    if (TM_UNLIKELY(s->ts != c->ts)) {
        c->ts = s->ts;
        if (TM_UNLIKELY(s->ts >= c->sw.next_from)) c->sw = walk_segments(p, c->sw, s->ts); /* seldom */
        c->time_len = set_time(tt, s->ts + c->sw.offset);
    }
    memcpy(o, tt->text, 32); /* 32 and 8, as for the thread's text */
    memcpy(o + 32, tt->text + 32, TIME_TEXT - 32);
    o += c->time_len;
    if (!by_pair) return put_stack_and_thread(o, s, pt->parts);
    memcpy(o, rest, PAIR_SLOT);
    return o + rest_len;
}

/* The records of samples [first, n), the first (kept) one without its
 * comma; their threads marked written. */
SAMPLE_INLINE void put_default_samples(tm_jw *w, const tm_profile *p, size_t first, const pair_texts *pairs,
                                       bool by_pair) {
    const pair_texts local = *pairs, *pt = &local; /* its fields stay in registers */
    const tm_prof_sample *samples = p->samples;
    size_t n = p->n_samples;
    sample_clock c = {samples[first].ts, 0,
                      {0, p->n_realtime > 1 ? p->realtime[1].from_ns : INT64_MAX, p->realtime[0].offset_ns}};
    time_text tt = {.second_ns = NO_SECOND, .ms_ns = NO_SECOND};
    memcpy(tt.text, timestamp_key, sizeof timestamp_key - 1);
    if (TM_UNLIKELY(c.ts >= c.sw.next_from)) c.sw = walk_segments(p, c.sw, c.ts);
    c.time_len = set_time(&tt, c.ts + c.sw.offset);
    char record[SAMPLE_MAX];
    char *e = put_sample(record, &samples[first], p, pt, by_pair, &tt, &c);
    tm_jw_raw(w, record + 1, (size_t)(e - record - 1));
    char *o = tm_jw_reserve(w, SAMPLE_MAX);
    for (const tm_prof_sample *s = samples + first + 1, *last = samples + n; s < last;) {
        /* as many records as the room holds, without checking it for each */
        size_t fit = (size_t)(tm_jw_limit(w) - o) / SAMPLE_MAX;
        for (const tm_prof_sample *to = (size_t)(last - s) > fit ? s + fit : last; s < to; s++)
            o = put_sample(o, s, p, pt, by_pair, &tt, &c);
        tm_jw_commit(w, o);
        o = tm_jw_reserve(w, SAMPLE_MAX);
    }
    tm_jw_commit(w, o);
}

static void put_pair_samples(tm_jw *w, const tm_profile *p, size_t first, const pair_texts *pt) {
    put_default_samples(w, p, first, pt, true);
}

static void put_part_samples(tm_jw *w, const tm_profile *p, size_t first, const pair_texts *pt) {
    put_default_samples(w, p, first, pt, false);
}

/* Marks the threads whose samples it writes in written (all 0 before). */
static tm_status write_samples(tm_jw *w, const tm_profile *p, const uint8_t *drop_thread, uint8_t *written,
                               tm_error *err) {
    size_t n_threads = p->n_threads, n_texts = p->n_stacks < STACK_TEXTS ? p->n_stacks : STACK_TEXTS;
    size_t texts_cap = (n_threads + 1) * THREAD_SLOT + n_texts * STACK_SLOT;
    char *texts = tm_mem_alloc(p->mem, texts_cap);
    if (!texts) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    sample_texts t = {texts + (n_threads + 1) * THREAD_SLOT, texts, n_texts};
    put_counting_texts(texts + (n_threads + 1) * THREAD_SLOT, n_texts, STACK_SLOT, stack_key, sizeof stack_key - 1);
    bool drops = false;
    for (size_t i = 0; i < n_threads; i++) {
        char *slot = texts + i * THREAD_SLOT, *q = slot;
        static const char pre[] = ",\"thread_id\":\"";
        memcpy(q, pre, sizeof pre - 1);
        q += sizeof pre - 1;
        int64_t tid = p->threads[i].tid;
        if (tid < 0) *q++ = '-';
        q = tm_put_u64(q, tid < 0 ? (uint64_t)0 - (uint64_t)tid : (uint64_t)tid);
        *q++ = '"';
        *q++ = '}';
        slot[THREAD_SLOT - 1] = (char)(q - slot);
        drops |= drop_thread[i] != 0;
    }

    /* the first record is written without its comma */
    size_t first = 0;
    while (first < p->n_samples && drop_thread[p->samples[first].thread]) first++;
    if (first == p->n_samples) {
        tm_mem_free(p->mem, texts, texts_cap);
        return TM_OK;
    }
    pair_texts pt = {.n_threads = n_threads, .drop = drops ? drop_thread : NULL, .written = written, .parts = t};
    size_t n_pairs = p->n_stacks * n_threads;
    if (p->relay_compat) {
        for (size_t i = first; i < p->n_samples; i++) {
            const tm_prof_sample *s = &p->samples[i];
            if (drop_thread[s->thread]) continue;
            written[s->thread] = 1;
            char *o = tm_jw_reserve(w, SAMPLE_MAX);
            memcpy(o, timestamp_key + (i == first), sizeof timestamp_key - 1);
            o += sizeof timestamp_key - 1 - (i == first);
            o += tm_format_f64(relay_seconds(p, s->ts), o);
            tm_jw_commit(w, put_stack_and_thread(o, s, t));
        }
    } else if (p->n_stacks <= STACK_TEXTS && n_pairs <= PAIR_TEXTS && n_pairs <= p->n_samples &&
               (pt.text = tm_mem_alloc(p->mem, n_pairs * PAIR_SLOT))) {
        for (size_t i = 0; i < n_pairs; i++) pt.text[i * PAIR_SLOT + PAIR_SLOT - 1] = PAIR_UNMADE;
        put_pair_samples(w, p, first, &pt);
        tm_mem_free(p->mem, pt.text, n_pairs * PAIR_SLOT);
    } else { /* too many pairs, or no memory for them */
        put_part_samples(w, p, first, &pt);
    }
    tm_mem_free(p->mem, texts, texts_cap);
    return TM_OK;
}

static void write_thread_key(tm_jw *w, int64_t tid) {
    tm_jw_char(w, '"');
    tm_jw_i64(w, tid);
    tm_jw_char(w, '"');
}

typedef struct tid_index {
    int64_t tid;
    uint32_t index;
} tid_index;

static int cmp_tid(const void *a, const void *b) {
    int64_t x = ((const tid_index *)a)->tid, y = ((const tid_index *)b)->tid;
    return (x > y) - (x < y);
}

tm_status tm_sample_v2_check_meta(const char *json, size_t len, tm_error *err) {
    meta m;
    tm_status st = parse_meta(json, len, &m, err);
    json_decref(m.owned);
    return st;
}

/* Relay's converter errors, in its order, before anything is written. */
static tm_status check_converter(const tm_profile *p, tm_error *err) {
    if (p->n_samples == 0 && p->n_heap_samples)
        return REJECT(err, "NotEnoughSamples",
                      "the trace holds a memory profile and no CPU samples: Sample v2 carries CPU samples (write "
                      "the memory profile as pprof, folded, svg or speedscope)");
    if (p->n_samples == 0) return REJECT(err, "NotEnoughSamples", "the trace has no samples that resolve to a callstack");
    if (p->relay_compat && !p->has_relay_offset)
        return REJECT(err, "InvalidSampledProfile", "no ClockSnapshot holds both BOOTTIME and REALTIME");
    if (!p->relay_compat && !p->n_realtime)
        return REJECT(err, "InvalidSampledProfile",
                      "no ClockSnapshot relates the trace clock to REALTIME, so Unix times are unknown");
    return TM_OK;
}

/* The samples that are written: Sample v2's normalisation. */
typedef struct selection {
    uint8_t *drop_thread; /* per thread */
    uint8_t *written;     /* per thread: whether samples of it were written (write_samples marks them) */
    int64_t first, last;  /* times of the first and last written sample */
} selection;

static void selection_release(const tm_profile *p, selection *sel) {
    tm_mem_free(p->mem, sel->drop_thread, 2 * (p->n_threads + 1));
}

static tm_status drop_single_sample_threads(const tm_profile *p, uint8_t *drop_thread, tm_error *err) {
    uint32_t *count = tm_mem_alloc(p->mem, (p->n_threads + 1) * sizeof *count);
    if (!count) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    memset(count, 0, (p->n_threads + 1) * sizeof *count);
    for (size_t i = 0; i < p->n_samples; i++)
        if (p->stacks[p->samples[i].stack].len) count[p->samples[i].thread]++;
    size_t kept = 0;
    for (size_t i = 0; i < p->n_threads; i++) drop_thread[i] = count[i] <= 1;
    for (size_t i = 0; i < p->n_samples; i++) kept += !drop_thread[p->samples[i].thread];
    tm_mem_free(p->mem, count, (p->n_threads + 1) * sizeof *count);
    if (!kept) return REJECT(err, "NotEnoughSamples", "no thread has more than one non-empty sample");
    return TM_OK;
}

/* Needs a sample (check_converter). */
static tm_status select_samples(const tm_profile *p, int remove_single_samples, selection *sel, tm_error *err) {
    size_t n_threads = p->n_threads + 1;
    sel->drop_thread = tm_mem_alloc(p->mem, 2 * n_threads);
    if (!sel->drop_thread) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    sel->written = sel->drop_thread + n_threads;
    memset(sel->drop_thread, 0, 2 * n_threads);
    if (remove_single_samples) TM_TRY(drop_single_sample_threads(p, sel->drop_thread, err));
    const tm_prof_sample *s = p->samples;
    size_t from = 0, to = p->n_samples;
    while (sel->drop_thread[s[from].thread]) from++; /* a thread is kept */
    while (sel->drop_thread[s[to - 1].thread]) to--;
    sel->first = s[from].ts;
    sel->last = s[to - 1].ts;
    return TM_OK;
}

static tm_status check_duration(const tm_profile *p, const selection *sel, tm_error *err) {
    int relay = p->relay_compat;
    /* Relay measures the span on the written (ms-rounded) f64 seconds. */
    double span = relay ? relay_seconds(p, sel->last) - relay_seconds(p, sel->first)
                        : (double)(sel->last - sel->first) / 1e9;
    int too_long = relay ? span > (double)p->max_chunk_duration_ns / 1e9
                         : (uint64_t)(sel->last - sel->first) > p->max_chunk_duration_ns;
    if (too_long)
        return REJECT(err, "DurationIsTooLong", "samples span %.3f s, more than the %.3f s a chunk may last", span,
                      (double)p->max_chunk_duration_ns / 1e9);
    return TM_OK;
}

/* The chunk's fields before "profile": merged metadata and debug images. */
static tm_status write_chunk_fields(tm_jw *w, const tm_profile *p, const meta *m, tm_error *err) {
    TM_TRY(write_measurements(w, p, m->root ? m->measurements : NULL, err));
    if (m->root) {
        tm_jw_lit(w, "\"chunk_id\":\"");
        tm_jw_raw(w, m->chunk_id, 32);
        tm_jw_lit(w, "\",\"profiler_id\":\"");
        tm_jw_raw(w, m->profiler_id, 32);
        tm_jw_lit(w, "\",");
    }
    size_t n_meta_images = m->images ? json_array_size(m->images) : 0;
    if (n_meta_images || tm_sentry_has_images(p)) {
        tm_jw_lit(w, "\"debug_meta\":{\"images\":[");
        for (size_t i = 0; i < n_meta_images; i++) {
            if (i) tm_jw_char(w, ',');
            write_meta_image(w, json_array_get(m->images, i));
        }
        tm_sentry_write_images(w, p, n_meta_images > 0);
        tm_jw_lit(w, "]},");
    }
    if (m->environment) {
        tm_jw_lit(w, "\"environment\":");
        tm_sentry_write_value(w, m->environment);
        tm_jw_char(w, ',');
    }
    tm_jw_lit(w, "\"platform\":");
    if (m->root) tm_sentry_write_value(w, m->platform);
    else {
        int java = 0;
        for (size_t i = 0; i < p->n_frames && !java; i++) java = (p->frames[i].flags & TM_FRAME_JAVA) != 0;
        tm_jw_cstr(w, java ? "android" : "native");
    }
    tm_jw_char(w, ',');
    if (m->content_type) {
        tm_jw_lit(w, "\"content_type\":");
        tm_sentry_write_value(w, m->content_type);
        tm_jw_char(w, ',');
    }
    if (m->root) {
        tm_jw_lit(w, "\"release\":");
        if (m->release) tm_sentry_write_value(w, m->release);
        else tm_jw_lit(w, "null");
        tm_jw_lit(w, ",\"client_sdk\":{\"name\":");
        tm_sentry_write_value(w, json_object_get(m->client_sdk, "name"));
        tm_jw_lit(w, ",\"version\":");
        tm_sentry_write_value(w, json_object_get(m->client_sdk, "version"));
        tm_jw_lit(w, "},");
    }
    return TM_OK;
}

/* A stack's frame ids, each ",id", written STACK_IDS_AT_ONCE a reserve
 * (",4294967295" is 11 bytes; STACK_ROOM within tm_jw_reserve's 4 KiB).
 * The first FRAME_TEXTS frames' ",id" are precomputed, ID_SLOT bytes a
 * frame with the length in the last: an 8-byte copy for a digit loop. */
#define STACK_IDS_AT_ONCE 256
#define STACK_ROOM (11 * STACK_IDS_AT_ONCE + ID_SLOT + 2)
#define ID_SLOT 8
#define FRAME_TEXTS 65536u /* ",65535": 6 bytes */

static inline char *put_frame_id(char *o, uint32_t id, const char *texts, size_t n_texts) {
    if (TM_LIKELY(id < n_texts)) {
        const char *text = texts + (size_t)id * ID_SLOT;
        memcpy(o, text, ID_SLOT);
        return o + (uint8_t)text[ID_SLOT - 1];
    }
    *o = ',';
    return tm_put_u64(o + 1, id);
}

/* Relay's converter never writes in_app (rules NULL: none). */
static tm_status write_stacks_and_frames(tm_jw *w, const tm_profile *p, const meta *m, const tm_in_app_rules *rules,
                                         tm_error *err) {
    size_t n_texts = p->n_frames < FRAME_TEXTS ? p->n_frames : FRAME_TEXTS;
    char *texts = tm_mem_alloc(p->mem, n_texts * ID_SLOT + 1); /* + 1: never 0 bytes */
    if (!texts) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    put_counting_texts(texts, n_texts, ID_SLOT, ",", 1);
    tm_jw_lit(w, "],\"stacks\":[");
    for (size_t i = 0; i < p->n_stacks; i++) {
        const tm_prof_stack *sk = &p->stacks[i];
        char *o = tm_jw_reserve(w, STACK_ROOM);
        if (i) *o++ = ',';
        if (!sk->len) { /* none at all: frame_ids is NULL */
            memcpy(o, "[]", 2);
            tm_jw_commit(w, o + 2);
            continue;
        }
        const uint32_t *ids = p->frame_ids + sk->off;
        char *bracket = o; /* where the first id's comma goes, and then '[' */
        for (uint32_t j = 0; j < sk->len;) { /* a deep stack holds hundreds */
            if (j) {
                tm_jw_commit(w, o);
                o = tm_jw_reserve(w, STACK_ROOM);
            }
            uint32_t to = sk->len - j > STACK_IDS_AT_ONCE ? j + STACK_IDS_AT_ONCE : sk->len;
            for (; j < to; j++) o = put_frame_id(o, ids[j], texts, n_texts);
            if (bracket) { /* before any commit: still in the window */
                *bracket = '[';
                bracket = NULL;
            }
        }
        *o++ = ']';
        tm_jw_commit(w, o);
    }
    tm_mem_free(p->mem, texts, n_texts * ID_SLOT + 1);
    tm_jw_lit(w, "],\"frames\":[");
    uint64_t addr_mask = tm_sentry_str_is(m->platform, "cocoa") ? COCOA_ADDR_MASK : UINT64_MAX;
    /* per mapping: in_app, and whether its path (a Perfetto frame's
     * package) needs escaping (0: not known yet, 1: no, 2: yes) */
    size_t n_memo = p->n_mappings + 1;
    int8_t *memo = tm_mem_alloc(p->mem, 2 * n_memo);
    if (!memo) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    int8_t *plain = memo + n_memo;
    memset(memo, TM_IN_APP_UNKNOWN, n_memo);
    memset(plain, 0, n_memo);
    for (size_t i = 0; i < p->n_frames; i++) {
        const tm_prof_frame *f = &p->frames[i];
        bool plain_package = false;
        if ((f->flags & TM_FRAME_HAS_PACKAGE) && tm_frame_package_is_mapping_path(p, f)) {
            int8_t *pl = &plain[f->mapping - 1];
            if (!*pl) *pl = tm_jw_plain(f->package) ? 1 : 2;
            plain_package = *pl == 1;
        }
        if (i) tm_jw_char(w, ',');
        /* Relay writes start + rel_pc; Sentry's symbolicator wants the process address inside its image */
        uint64_t addr = p->relay_compat ? f->addr : tm_frame_process_address(p, f);
        write_frame(w, f, addr & addr_mask, rules ? tm_sentry_in_app_memo(p, (uint32_t)i, rules, memo) : -1,
                    plain_package);
    }
    tm_mem_free(p->mem, memo, 2 * n_memo);
    tm_jw_char(w, ']');
    return TM_OK;
}

/* thread_metadata, of the threads that kept samples: Relay names only the
 * first observed pid "main"; the default mode names every thread, sorted
 * by tid, a main thread without a name of its own after its process when
 * that has one (else "main"). */
static tm_status write_thread_metadata(tm_jw *w, const tm_profile *p, const uint8_t *written, tm_error *err) {
    if (p->relay_compat) {
        uint32_t th = TM_ABSENT;
        for (size_t i = 0; p->has_relay_pid && i < p->n_threads; i++)
            if (p->threads[i].tid == p->relay_observed_pid && written[i]) th = (uint32_t)i;
        if (th != TM_ABSENT) {
            tm_jw_lit(w, ",\"thread_metadata\":{");
            write_thread_key(w, p->threads[th].tid);
            tm_jw_lit(w, ":{\"name\":\"main\"}}");
        }
        return TM_OK;
    }
    tid_index *order = tm_mem_alloc(p->mem, (p->n_threads + 1) * sizeof *order);
    if (!order) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < p->n_threads; i++) {
        const tm_prof_thread *th = &p->threads[i];
        if (written[i] && (th->name_prio || (th->pid && th->tid == th->pid))) {
            order[n].tid = th->tid;
            order[n++].index = (uint32_t)i;
        }
    }
    if (n) {
        qsort(order, n, sizeof *order, cmp_tid);
        tm_jw_lit(w, ",\"thread_metadata\":{");
        for (size_t i = 0; i < n; i++) {
            const tm_prof_thread *th = &p->threads[order[i].index];
            if (i) tm_jw_char(w, ',');
            write_thread_key(w, th->tid);
            tm_jw_lit(w, ":{\"name\":");
            tm_str proc = tm_profile_main_thread_process_name(p, th);
            if (proc.len) tm_jw_str(w, proc);
            else if (th->pid && th->tid == th->pid) tm_jw_lit(w, "\"main\"");
            else tm_jw_str(w, th->name);
            tm_jw_char(w, '}');
        }
        tm_jw_char(w, '}');
    }
    tm_mem_free(p->mem, order, (p->n_threads + 1) * sizeof *order);
    return TM_OK;
}

static tm_status write_chunk(tm_jw *w, const tm_profile *p, const meta *m, const selection *sel,
                             const tm_in_app_rules *rules, tm_error *err) {
    tm_jw_char(w, '{');
    TM_TRY(write_chunk_fields(w, p, m, err));
    tm_jw_lit(w, "\"version\":\"2\",\"profile\":{\"samples\":[");
    TM_TRY(write_samples(w, p, sel->drop_thread, sel->written, err));
    TM_TRY(write_stacks_and_frames(w, p, m, rules, err));
    TM_TRY(write_thread_metadata(w, p, sel->written, err));
    tm_jw_lit(w, "}}");
    return TM_OK;
}

tm_status tm_write_sample_v2(const tm_trace *t, const tm_sample_v2_options *opts, const tm_sink *out,
                             tm_error *err) {
    static const tm_sample_v2_options no_opts;
    if (!t || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_sample_v2: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_sample_v2_options", err));
    if (!opts) opts = &no_opts;
    const tm_profile *p = tm_trace_profile(t);
    if (p->untimed)
        return tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "folded stacks have no timestamps, which Sample v2 needs");
    meta m;
    memset(&m, 0, sizeof m);
    selection sel;
    memset(&sel, 0, sizeof sel);
    tm_jw *w = NULL;
    tm_status st = TM_OK;
    if (opts->meta && opts->meta_json)
        st = tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_sample_v2: both meta and meta_json set");
    else if (opts->meta)
        st = check_meta(opts->meta, &m, err);
    else if (opts->meta_json)
        st = parse_meta(opts->meta_json, opts->meta_len, &m, err);
    if (st == TM_OK) st = check_converter(p, err);
    if (st == TM_OK) st = select_samples(p, opts->remove_single_samples, &sel, err);
    if (st == TM_OK) st = check_duration(p, &sel, err);
    if (st == TM_OK && !(w = tm_mem_alloc(p->mem, sizeof *w))) st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    tm_in_app_rules rules;
    if (st == TM_OK)
        st = tm_in_app_rules_of(opts->in_app_prefixes, opts->n_in_app_prefixes, opts->not_in_app_prefixes,
                                opts->n_not_in_app_prefixes, "tm_write_sample_v2", &rules, err);
    if (st == TM_OK) {
        tm_jw_init(w, out);
        st = write_chunk(w, p, &m, &sel, p->relay_compat ? NULL : &rules, err);
        tm_status wst = tm_jw_finish(w);
        if (st == TM_OK && wst != TM_OK) st = tm_fail(err, wst, 0, NULL, "writing the output failed");
    }
    tm_mem_free(p->mem, w, sizeof *w);
    selection_release(p, &sel);
    json_decref(m.owned);
    return tm_trace_budget_status(t, st, err);
}
