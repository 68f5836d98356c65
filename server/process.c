/*
 * process.c — what the server does with one envelope, before anything is
 * handed over: Relay's profile_chunk rules,
 * conversion of Perfetto chunks with the library, validation and
 * normalisation of plain Sample v2 JSON chunks, rate limits, and an
 * outcome with Relay's reason string for every rejection.
 *
 * The result is a list of records (Kafka messages and outcomes) that the
 * front end hands to Kafka or the local store in one go.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server.h"

#define PERFETTO_CONTENT_TYPE "application/x-perfetto-trace"
/* Relay's MAX_PROFILE_CHUNK_DURATION: 60 s chunks plus slack. */
#define MAX_CHUNK_DURATION_S 66.0

static const struct {
    const char *error, *reason;
} reasons[] = {
    {"CannotSerializePayload", "profiling_failed_serialization"},
    {"ExceedSizeLimit", "profiling_exceed_size_limit"},
    {"InvalidBase64Value", "profiling_invalid_base64_value"},
    {"InvalidJson", "profiling_invalid_json"},
    {"InvalidSampledProfile", "profiling_invalid_sampled_profile"},
    {"InvalidTransactionMetadata", "profiling_invalid_transaction_metadata"},
    {"InvalidProfileType", "profiling_invalid_profile_type"},
    {"MalformedSamples", "profiling_malformed_samples"},
    {"MalformedStacks", "profiling_malformed_stacks"},
    {"MissingProfileMetadata", "profiling_invalid_profile_metadata"},
    {"NoTransactionAssociated", "profiling_no_transaction_associated"},
    {"NotEnoughSamples", "profiling_not_enough_samples"},
    {"PlatformNotSupported", "profiling_platform_not_supported"},
    {"TooManyProfiles", "profiling_too_many_profiles"},
    {"DurationIsTooLong", "profiling_duration_is_too_long"},
    {"DurationIsZero", "profiling_duration_is_zero"},
    {"InvalidBuildID", "invalid_build_id"},
};

/* Relay's reason string for a ProfileError name. */
static const char *reason_string(const char *profile_error) {
    if (profile_error)
        for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
            if (strcmp(reasons[i].error, profile_error) == 0) return reasons[i].reason;
    return "profiling_invalid_sampled_profile";
}

static int view_is(tm_srv_view v, const char *s) {
    size_t n = strlen(s);
    return v.ptr && v.len == n && memcmp(v.ptr, s, n) == 0;
}

/* Relay's profile type: UI platforms count as profile_chunk_ui. */
static int is_ui_platform(const char *p, size_t n) {
    tm_srv_view v = {p, n};
    return view_is(v, "android") || view_is(v, "cocoa") || view_is(v, "javascript");
}

/* Relay's data categories (relay-base-schema's DataCategory) that items dropped unsupported are counted in. */
enum {
    CATEGORY_ERROR = 1, CATEGORY_TRANSACTION = 2, CATEGORY_SECURITY = 3, CATEGORY_ATTACHMENT = 4,
    CATEGORY_SESSION = 5, CATEGORY_PROFILE = 6, CATEGORY_REPLAY = 7, CATEGORY_MONITOR = 10, CATEGORY_SPAN = 12,
    CATEGORY_FEEDBACK = 14, CATEGORY_ATTACHMENT_ITEM = 22, CATEGORY_LOG_ITEM = 23, CATEGORY_LOG_BYTE = 24
};

typedef struct item_quantity {
    int category;
    uint64_t quantity;
} item_quantity;

/* Relay's Item::quantities: what a dropped item counts for in outcomes.
 * Attachments and logs count their bytes too, containers (log, span) their
 * item_count; client reports, metrics and unknown types count nothing
 * (Relay sends no outcome for them). Returns how many of out[2] are set. */
static size_t item_quantities(const tm_srv_item *item, item_quantity out[2]) {
    static const struct {
        const char *type;
        int category;
    } single[] = {{"event", CATEGORY_ERROR},          {"unreal_report", CATEGORY_ERROR},
                  {"transaction", CATEGORY_TRANSACTION}, {"security", CATEGORY_SECURITY},
                  {"raw_security", CATEGORY_SECURITY}, {"session", CATEGORY_SESSION},
                  {"sessions", CATEGORY_SESSION},     {"user_report", CATEGORY_FEEDBACK},
                  {"feedback", CATEGORY_FEEDBACK},    {"profile", CATEGORY_PROFILE},
                  {"replay_event", CATEGORY_REPLAY},  {"replay_recording", CATEGORY_REPLAY},
                  {"replay_video", CATEGORY_REPLAY},  {"check_in", CATEGORY_MONITOR},
                  {"span", CATEGORY_SPAN},            {"otel_span", CATEGORY_SPAN}};
    uint64_t bytes = item->payload_len ? item->payload_len : 1;
    int container = view_is(item->type, "log") || view_is(item->type, "span");
    uint64_t count = container && item->has_item_count ? item->item_count : 1;
    if (view_is(item->type, "attachment")) {
        out[0] = (item_quantity){CATEGORY_ATTACHMENT, bytes};
        out[1] = (item_quantity){CATEGORY_ATTACHMENT_ITEM, 1};
        return 2;
    }
    if (view_is(item->type, "log")) {
        out[0] = (item_quantity){CATEGORY_LOG_BYTE, bytes};
        out[1] = (item_quantity){CATEGORY_LOG_ITEM, count};
        return 2;
    }
    for (size_t i = 0; i < sizeof single / sizeof single[0]; i++)
        if (view_is(item->type, single[i].type)) {
            out[0] = (item_quantity){single[i].category, count};
            return 1;
        }
    return 0;
}

static const char *json_str(const json_t *obj, const char *key) {
    return json_string_value(json_object_get(obj, key));
}

/* A UUID field of the chunk (chunk_id, profiler_id) as 32 lowercase hex
 * digits, or 0 when it is missing or not a UUID. */
static int uuid_field(const json_t *obj, const char *key, char out[TM_SRV_UUID_HEX + 1]) {
    const json_t *v = json_object_get(obj, key);
    return json_is_string(v) && tm_srv_uuid_normalize(json_string_value(v), json_string_length(v), out);
}

/* ---- records ---- */

/* Appends a record owning value, whose message starts at byte start (a
 * copy of chunk_id goes after it). */
static tm_status add_record(tm_srv_processed *out, tm_srv_record rec, tm_srv_buf *value, size_t start,
                            tm_error *err) {
    if (out->n_records == out->cap_records) {
        size_t cap = out->cap_records ? out->cap_records * 2 : 4;
        tm_srv_record *r = realloc(out->records, cap * sizeof *r);
        if (!r) goto nomem;
        out->records = r;
        out->cap_records = cap;
    }
    size_t value_len = value->len;
    if (rec.chunk_id.ptr && tm_srv_buf_append(value, rec.chunk_id.ptr, rec.chunk_id.len)) goto nomem;
    rec.owned = value->data;
    rec.value = value->data + start;
    rec.value_len = value_len - start;
    if (rec.chunk_id.ptr) rec.chunk_id.ptr = (const char *)value->data + value_len;
    out->records[out->n_records++] = rec;
    *value = (tm_srv_buf){0};
    return TM_OK;
nomem:
    tm_srv_buf_release(value);
    return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
}

void tm_srv_processed_release(tm_srv_processed *p) {
    if (!p) return;
    for (size_t i = 0; i < p->n_records; i++) free(p->records[i].owned);
    free(p->records);
    free(p->counts);
    tm_srv_buf_release(&p->forward);
    memset(p, 0, sizeof *p);
}

void tm_srv_processed_count(const tm_srv_processed *p, tm_srv_metrics *m) {
    for (size_t i = 0; i < p->n_counts; i++)
        for (uint32_t k = 0; k < p->counts[i].n; k++) tm_srv_metrics_item(m, p->counts[i].type, p->counts[i].outcome);
}

typedef struct chunk_job {
    const tm_srv_context *ctx;
    tm_srv_processed *out;
    const tm_srv_item *item;
    int ui;                 /* category of outcomes */
} chunk_job;

static tm_status add_outcome(const chunk_job *j, int outcome, const char *reason, int category,
                             uint64_t quantity, tm_error *err) {
    const tm_srv_context *ctx = j->ctx;
    tm_srv_outcome o = {.timestamp = ctx->now_unix,
                        .org_id = ctx->project->organization_id,
                        .project_id = ctx->project->id,
                        .outcome = outcome,
                        .reason = reason,
                        .event_id = j->out->event_id,
                        .category = category,
                        .quantity = quantity < UINT32_MAX ? (uint32_t)quantity : UINT32_MAX};
    tm_srv_buf value = {0};
    tm_status st = tm_srv_outcome_json(&o, &value, err);
    if (st != TM_OK) {
        tm_srv_buf_release(&value);
        return st;
    }
    tm_srv_record rec = {.kind = TM_SRV_RECORD_OUTCOME, .project_id = ctx->project->id,
                         .received = ctx->now_unix};
    return add_record(j->out, rec, &value, 0, err);
}

/* Notes an item's fate for /metrics (counted once the envelope is kept);
 * a count that finds no memory is let go: only the metric misses it. */
static void count(const chunk_job *j, const char *type, const char *outcome) {
    tm_srv_processed *p = j->out;
    for (size_t i = 0; i < p->n_counts; i++)
        if (p->counts[i].type == type && p->counts[i].outcome == outcome) {
            p->counts[i].n++;
            return;
        }
    if (p->n_counts == p->cap_counts) {
        size_t cap = p->cap_counts ? 2 * p->cap_counts : 8;
        tm_srv_item_count *c = realloc(p->counts, cap * sizeof *c);
        if (!c) return;
        p->counts = c, p->cap_counts = cap;
    }
    p->counts[p->n_counts++] = (tm_srv_item_count){type, outcome, 1};
}

/* Rejects the chunk with Relay's outcome for a ProfileError name. */
static tm_status reject(const chunk_job *j, const char *profile_error, tm_error *err) {
    const char *reason = reason_string(profile_error);
    count(j, "profile_chunk", reason);
    return add_outcome(j, TM_SRV_OUTCOME_INVALID, reason,
                       j->ui ? TM_SRV_CATEGORY_PROFILE_CHUNK_UI : TM_SRV_CATEGORY_PROFILE_CHUNK, 1, err);
}

/* An empty payload buffer with the message's head room in front and
 * room for about expect bytes after it; -1 when out of memory. */
static int start_payload(tm_srv_buf *payload, size_t expect) {
    if (tm_srv_buf_reserve(payload, TM_SRV_CHUNK_MSG_HEAD_ROOM + expect)) return -1;
    payload->len = TM_SRV_CHUNK_MSG_HEAD_ROOM;
    return 0;
}

/* chunk_id is the chunk's, normalised (uuid_field): the store and Kafka
 * key chunks by it, and `store export` names files after it, so only a
 * UUID gets this far. The message is made around the payload
 * (start_payload), which the record then owns. */
static tm_status add_chunk(const chunk_job *j, const char *chunk_id, tm_srv_buf *payload, tm_srv_view raw,
                           tm_error *err) {
    const tm_srv_context *ctx = j->ctx;
    const size_t payload_len = payload->len - TM_SRV_CHUNK_MSG_HEAD_ROOM;
    tm_srv_chunk_msg m = {.organization_id = ctx->project->organization_id,
                          .project_id = ctx->project->id,
                          .received = ctx->now_unix,
                          .retention_days = ctx->project->retention_days,
                          .payload_len = payload_len};
    if (raw.len) {
        m.raw_profile = (const uint8_t *)raw.ptr;
        m.raw_profile_len = raw.len;
        m.raw_profile_content_type = "perfetto";
    }
    size_t start;
    tm_status st = tm_srv_chunk_msg_encode_around(&m, payload, &start, err);
    if (st != TM_OK) return st;
    tm_srv_record rec = {.kind = TM_SRV_RECORD_CHUNK,
                         .project_id = ctx->project->id,
                         .received = ctx->now_unix,
                         .chunk_id = {chunk_id, TM_SRV_UUID_HEX},
                         .payload_size = payload_len,
                         .raw_size = raw.len};
    st = add_record(j->out, rec, payload, start, err);
    if (st == TM_OK) count(j, "profile_chunk", "accepted");
    return st;
}

/* ---- Perfetto chunks: [JSON metadata][trace] ---- */

typedef struct capped_sink {
    tm_srv_buf *buf;
    uint64_t cap;
    int over;
} capped_sink;

/* the bytes of the payload so far, after the message head's room */
static uint64_t payload_bytes(const capped_sink *s) { return s->buf->len - TM_SRV_CHUNK_MSG_HEAD_ROOM; }

static int capped_write(void *ctx, const void *data, size_t len) {
    capped_sink *s = ctx;
    if (payload_bytes(s) + len > s->cap) {
        s->over = 1;
        return 1;
    }
    return tm_srv_buf_append(s->buf, data, len);
}

/* The writer formats the JSON straight into the message (tm_sink.lend), not
 * into its own buffer to be copied here: a window never reaches past the
 * cap, so asking for more than it leaves is the same refusal as above. */
static int capped_lend(void *ctx, size_t used, size_t min, void **window, size_t *cap) {
    capped_sink *s = ctx;
    s->buf->len += used;
    if (!min) return 0;
    uint64_t left = s->cap - payload_bytes(s);
    if (min > left) {
        s->over = 1;
        return 1;
    }
    size_t room = s->buf->cap - s->buf->len;
    /* doubled when short, as tm_srv_buf_append grows */
    if (room < min && tm_srv_buf_reserve(s->buf, min > s->buf->cap ? min : s->buf->cap)) return 1;
    room = s->buf->cap - s->buf->len;
    *window = s->buf->data + s->buf->len;
    *cap = room < left ? room : (size_t)left;
    return 0;
}

static double elapsed_s(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* Converts trace + metadata into payload; returns the ProfileError name on
 * rejection, NULL on success (or sets *st on an internal failure). */
static const char *expand_perfetto(const chunk_job *j, const tm_chunk_meta *meta, tm_srv_view raw,
                                   tm_srv_buf *payload, tm_status *st, tm_error *err) {
    *st = TM_OK;
    tm_error e;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    /* strict: a cut-off trace is rejected, as Relay rejects it */
    tm_options opts = {.preset = TM_LIMITS_RELAY, .input = TM_INPUT_PERFETTO, .strict = 1,
                       .alloc = tm_srv_scratch_alloc(j->ctx->scratch)};
    opts.limits.max_work_bytes = j->ctx->cfg->limits.max_conversion_work;
    opts.limits.max_result_bytes = j->ctx->cfg->limits.max_conversion_result;
    opts.limits.max_input_bytes = j->ctx->cfg->limits.max_profile_size; /* 0: the preset's */
    tm_trace *t = NULL;
    if (tm_trace_parse(raw.ptr, raw.len, &opts, &t, &e) != TM_OK) {
        /* Relay reads the metadata before the trace, so its errors win;
         * on success tm_write_sample_v2 checks the metadata first itself */
        tm_error meta_err;
        if (tm_chunk_meta_check(meta, &meta_err) != TM_OK)
            return meta_err.reason ? meta_err.reason : "InvalidJson";
        if (e.code == TM_ERR_NOMEM) {
            *st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory converting a chunk");
            return NULL;
        }
        return e.code == TM_ERR_LIMIT ? "ExceedSizeLimit" : e.reason ? e.reason : "InvalidSampledProfile";
    }
    capped_sink cs = {payload, j->ctx->cfg->limits.max_profile_size, 0};
    tm_sink sink = {.write = capped_write, .ctx = &cs, .lend = capped_lend};
    tm_sample_v2_options v2 = {.meta = meta};
    tm_status ws = tm_write_sample_v2(t, &v2, &sink, &e);
    tm_trace_free(t);
    if (j->ctx->metrics) tm_srv_metrics_conversion(j->ctx->metrics, elapsed_s(&t0));
    if (ws == TM_OK) return NULL;
    if (cs.over || ws == TM_ERR_LIMIT) return "ExceedSizeLimit";
    if (ws == TM_ERR_IO || ws == TM_ERR_NOMEM) {
        *st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory writing a chunk");
        return NULL;
    }
    return e.reason ? e.reason : "InvalidSampledProfile";
}

static tm_status process_compound(chunk_job *j, tm_srv_view meta, tm_srv_view raw, tm_error *err) {
    const tm_srv_item *item = j->item;
    /* read once, for its fields here and for the conversion */
    tm_chunk_meta *chunk_meta = NULL;
    if (tm_chunk_meta_new(meta.ptr, meta.len, &chunk_meta, NULL) != TM_OK)
        return tm_srv_fail(err, TM_ERR_NOMEM, item->payload_offset, "out of memory reading chunk metadata");
    const char *ctype = tm_chunk_meta_string(chunk_meta, "content_type", NULL);
    const char *platform = tm_chunk_meta_string(chunk_meta, "platform", NULL);
    if (platform) j->ui = is_ui_platform(platform, strlen(platform));
    tm_status st = TM_OK;
    int perfetto = view_is(item->content_type, PERFETTO_CONTENT_TYPE) ||
                   (ctype && (strcmp(ctype, "perfetto") == 0 || strcmp(ctype, PERFETTO_CONTENT_TYPE) == 0));
    if (!perfetto) {
        st = reject(j, "PlatformNotSupported", err);
    } else if (!j->ctx->project->continuous_profiling_perfetto) {
        count(j, "profile_chunk", "dropped"); /* FilterFeatureFlag: no outcome */
    } else {
        /* the Sample v2 JSON of a Perfetto chunk is 2 to 3 times its size;
         * the raw trace goes after it in the message */
        tm_srv_buf payload = {0};
        const char *rejected = NULL;
        if (start_payload(&payload, 4 * raw.len + meta.len + 4096))
            st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory converting a chunk");
        else
            rejected = expand_perfetto(j, chunk_meta, raw, &payload, &st, err);
        if (st == TM_OK && !rejected && item->platform.ptr && platform &&
            is_ui_platform(item->platform.ptr, item->platform.len) != is_ui_platform(platform, strlen(platform)))
            rejected = "InvalidProfileType";
        /* the chunk is keyed by its chunk_id (add_chunk): a UUID, "\u0000" and all */
        size_t id_len;
        const char *id = tm_chunk_meta_string(chunk_meta, "chunk_id", &id_len);
        char chunk_id[TM_SRV_UUID_HEX + 1];
        if (st == TM_OK && !rejected && !(id && tm_srv_uuid_normalize(id, id_len, chunk_id))) rejected = "InvalidJson";
        if (st == TM_OK)
            st = rejected ? reject(j, rejected, err) : add_chunk(j, chunk_id, &payload, raw, err);
        tm_srv_buf_release(&payload);
    }
    tm_chunk_meta_free(chunk_meta);
    return st;
}

/* ---- plain Sample v2 JSON chunks ---- */

/* Writes JSON compactly in document order; reals in the shortest form that
 * reads back to the same double, as serde_json does. */
static int dump_json(const json_t *v, tm_srv_buf *out);

static int dump_real(double d, tm_srv_buf *out) {
    char text[40];
    if (!isfinite(d)) return -1;
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(text, sizeof text, "%.*g", prec, d);
        if (strtod(text, NULL) == d) break;
    }
    if (!strpbrk(text, ".e")) {
        size_t n = strlen(text);
        memcpy(text + n, ".0", 3);
    }
    return tm_srv_buf_append(out, text, strlen(text));
}

static int dump_json(const json_t *v, tm_srv_buf *out) {
    char text[32];
    switch (json_typeof(v)) {
    case JSON_OBJECT: {
        const char *key;
        json_t *val;
        int first = 1;
        if (tm_srv_buf_append(out, "{", 1)) return -1;
        json_object_foreach((json_t *)v, key, val) {
            if (!first && tm_srv_buf_append(out, ",", 1)) return -1;
            first = 0;
            if (tm_srv_json_string(out, key, strlen(key)) || tm_srv_buf_append(out, ":", 1) || dump_json(val, out))
                return -1;
        }
        return tm_srv_buf_append(out, "}", 1);
    }
    case JSON_ARRAY:
        if (tm_srv_buf_append(out, "[", 1)) return -1;
        for (size_t i = 0; i < json_array_size(v); i++)
            if ((i && tm_srv_buf_append(out, ",", 1)) || dump_json(json_array_get(v, i), out)) return -1;
        return tm_srv_buf_append(out, "]", 1);
    case JSON_STRING:
        return tm_srv_json_string(out, json_string_value(v), json_string_length(v));
    case JSON_INTEGER:
        snprintf(text, sizeof text, "%" JSON_INTEGER_FORMAT, json_integer_value(v));
        return tm_srv_buf_append(out, text, strlen(text));
    case JSON_REAL:
        return dump_real(json_real_value(v), out);
    case JSON_TRUE:
        return tm_srv_buf_append(out, "true", 4);
    case JSON_FALSE:
        return tm_srv_buf_append(out, "false", 5);
    case JSON_NULL:
        return tm_srv_buf_append(out, "null", 4);
    }
    return -1;
}

typedef struct timed_sample {
    double ts;
    size_t index;
} timed_sample;

static int by_time_then_index(const void *a, const void *b) {
    const timed_sample *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static int is_index(const json_t *v, size_t n) {
    return json_is_integer(v) && json_integer_value(v) >= 0 && (uint64_t)json_integer_value(v) < n;
}

/* Masks pointer-authentication bits of "0x..." addresses (cocoa only). */
static void strip_pac(json_t *frames) {
    size_t i;
    json_t *f;
    json_array_foreach(frames, i, f) {
        const char *a = json_str(f, "instruction_addr");
        if (!a || strncmp(a, "0x", 2) != 0) continue;
        char *end;
        unsigned long long addr = strtoull(a + 2, &end, 16);
        if (*end) continue;
        char text[24];
        snprintf(text, sizeof text, "0x%llx", addr & 0x0000000FFFFFFFFFull);
        json_object_set_new(f, "instruction_addr", json_string(text));
    }
}

/* Relay's ProfileData::normalize on a parsed chunk; the error name or NULL. */
static const char *normalize_chunk(json_t *root, int *oom) {
    json_t *profile = json_object_get(root, "profile");
    json_t *samples = json_object_get(profile, "samples");
    json_t *stacks = json_object_get(profile, "stacks");
    json_t *frames = json_object_get(profile, "frames");
    if (!json_is_object(profile) || !json_is_array(samples) || !json_is_array(stacks) || !json_is_array(frames))
        return "InvalidJson";
    size_t n = json_array_size(samples);
    if (n == 0) return "NotEnoughSamples";
    size_t i;
    json_t *s;
    json_array_foreach(samples, i, s) {
        if (!json_is_object(s) || !json_is_number(json_object_get(s, "timestamp")) ||
            !json_is_string(json_object_get(s, "thread_id")) || !json_is_integer(json_object_get(s, "stack_id")))
            return "InvalidJson";
        if (!is_index(json_object_get(s, "stack_id"), json_array_size(stacks))) return "MalformedSamples";
    }
    json_array_foreach(stacks, i, s) {
        if (!json_is_array(s)) return "InvalidJson";
        size_t k;
        json_t *f;
        json_array_foreach(s, k, f) if (!is_index(f, json_array_size(frames))) return "MalformedStacks";
    }
    timed_sample *order = malloc(n * sizeof *order);
    json_t *sorted = json_array();
    if (!order || !sorted) {
        free(order);
        json_decref(sorted);
        *oom = 1;
        return NULL;
    }
    json_array_foreach(samples, i, s) order[i] = (timed_sample){json_number_value(json_object_get(s, "timestamp")), i};
    qsort(order, n, sizeof *order, by_time_then_index);
    double duration = order[n - 1].ts - order[0].ts;
    for (i = 0; i < n; i++) json_array_append(sorted, json_array_get(samples, order[i].index));
    free(order);
    json_object_set_new(profile, "samples", sorted);
    if (duration > MAX_CHUNK_DURATION_S) return "DurationIsTooLong";
    const char *platform = json_str(root, "platform");
    if (platform && strcmp(platform, "cocoa") == 0) strip_pac(frames);
    json_t *threads = json_object_get(profile, "thread_metadata");
    if (json_is_object(threads)) {
        /* the thread ids that have samples, as a set: one pass, not one per thread */
        json_t *sampled = json_object();
        if (!sampled) {
            *oom = 1;
            return NULL;
        }
        json_array_foreach(sorted, i, s) json_object_set(sampled, json_str(s, "thread_id"), json_true());
        const char *tid;
        json_t *meta, *tmp;
        json_object_foreach_safe(threads, tmp, tid, meta) if (!json_object_get(sampled, tid)) json_object_del(threads, tid);
        json_decref(sampled);
    }
    return NULL;
}

static tm_status process_json_chunk(chunk_job *j, tm_error *err) {
    const tm_srv_item *item = j->item;
    if (item->platform.ptr) j->ui = is_ui_platform(item->platform.ptr, item->platform.len);
    json_t *root = json_loadb((const char *)item->payload, item->payload_len, JSON_REJECT_DUPLICATES, NULL);
    const char *version = json_str(root, "version");
    /* the fields Relay's ProfileChunk cannot do without; its ids are UUIDs
     * (EventId), checked as the Perfetto path checks them, and written the
     * way Relay writes them back: 32 lowercase hex digits */
    char chunk_id[TM_SRV_UUID_HEX + 1], profiler_id[TM_SRV_UUID_HEX + 1];
    if (!version || strcmp(version, "2") != 0 || !uuid_field(root, "chunk_id", chunk_id) ||
        !uuid_field(root, "profiler_id", profiler_id) || !json_str(root, "platform")) {
        json_decref(root);
        return reject(j, "InvalidJson", err);
    }
    if (json_object_set_new(root, "chunk_id", json_string(chunk_id)) ||
        json_object_set_new(root, "profiler_id", json_string(profiler_id))) {
        json_decref(root);
        return tm_srv_fail(err, TM_ERR_NOMEM, item->payload_offset, "out of memory normalising a chunk");
    }
    const char *platform = json_str(root, "platform");
    if (platform) j->ui = is_ui_platform(platform, strlen(platform));
    int oom = 0;
    /* the item header's profile type must be the payload's, as for Perfetto chunks (Relay checks it
     * before normalising) */
    const char *rejected = item->platform.ptr && platform &&
                                   is_ui_platform(item->platform.ptr, item->platform.len) != j->ui
                               ? "InvalidProfileType"
                               : normalize_chunk(root, &oom);
    tm_status st = TM_OK;
    tm_srv_buf payload = {0};
    if (oom || (!rejected && (start_payload(&payload, item->payload_len) || dump_json(root, &payload))))
        st = tm_srv_fail(err, TM_ERR_NOMEM, item->payload_offset, "out of memory normalising a chunk");
    else if (!rejected && payload.len - TM_SRV_CHUNK_MSG_HEAD_ROOM > j->ctx->cfg->limits.max_profile_size)
        rejected = "ExceedSizeLimit";
    if (st == TM_OK)
        st = rejected ? reject(j, rejected, err)
                      : add_chunk(j, chunk_id, &payload, (tm_srv_view){NULL, 0}, err);
    tm_srv_buf_release(&payload);
    json_decref(root);
    return st;
}

/* ---- client reports ---- */

/* Relay's DataCategory by the name client reports give; -1 if unknown. */
static int category_by_name(const char *name) {
    static const char *const names[] = {
        "default",      "error",          "transaction",  "security",       "attachment",
        "session",      "profile",        "replay",       "transaction_processed", "transaction_indexed",
        "monitor",      "profile_indexed", "span",        "monitor_seat",   "feedback",
        "metric_bucket", "span_indexed",  "profile_duration", "profile_chunk", "metric_second",
        "replay_video", "uptime",         "attachment_item", "log_item",    "log_byte",
        "profile_duration_ui", "profile_chunk_ui"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(name, names[i]) == 0) return (int)i;
    return -1;
}

/* Relay's limits on a client report: reasons longer are ignored, and a
 * report from further in the future than this is dropped. */
#define CLIENT_REPORT_MAX_REASON 200
#define CLIENT_REPORT_MAX_SECS_IN_FUTURE 60

typedef struct client_outcome {
    int outcome;
    const char *reason; /* NULL: none (a rate limit without a reason code) */
    int category;
    uint64_t quantity;
} client_outcome;

/* The n decimal digits at s (digits only: no sign, no blank), or -1. */
static int digits_at(const char *s, int n) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static int days_in_month(int year, int month) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

/* An RFC 3339 date-time (2026-11-29T01:50:00.123+02:00, or ...Z) in Unix
 * seconds, as Relay's UnixTimestamp reads strings; 0 when it is not one (a
 * day past its month's end, a sign in a field, a fraction without digits
 * or an offset past 23:59 included, as Relay rejects them). */
static int rfc3339_seconds(const char *s, uint64_t *out) {
    if (strlen(s) < 20 || s[4] != '-' || s[7] != '-' || (s[10] != 'T' && s[10] != 't' && s[10] != ' ') ||
        s[13] != ':' || s[16] != ':')
        return 0;
    int year = digits_at(s, 4), month = digits_at(s + 5, 2), day = digits_at(s + 8, 2), hour = digits_at(s + 11, 2),
        minute = digits_at(s + 14, 2), second = digits_at(s + 17, 2);
    if (year < 0 || month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) || hour < 0 ||
        hour > 23 || minute < 0 || minute > 59 || second < 0 || second > 60)
        return 0;
    const char *p = s + 19;
    if (*p == '.') {
        const char *digits = ++p;
        while (*p >= '0' && *p <= '9') p++;
        if (p == digits) return 0;
    }
    long offset = 0;
    if ((*p == 'Z' || *p == 'z') && !p[1]) {
        offset = 0;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int off_hour = digits_at(p + 1, 2), off_minute = digits_at(p + 4, 2);
        if (off_hour < 0 || off_hour > 23 || off_minute < 0 || off_minute > 59) return 0;
        offset = (*p == '-' ? -1 : 1) * (off_hour * 3600L + off_minute * 60L);
    } else {
        return 0;
    }
    struct tm tm = {.tm_year = year - 1900, .tm_mon = month - 1, .tm_mday = day,
                    .tm_hour = hour, .tm_min = minute, .tm_sec = second};
    time_t t = timegm(&tm);
    if (t == (time_t)-1 || (long long)t - offset < 0) return 0;
    *out = (uint64_t)((long long)t - offset);
    return 1;
}

/* The report's timestamp in Unix seconds (a number, as most SDKs send it,
 * or an RFC 3339 string, as Java's does), or when it has none the time
 * received; 0 when it is neither. */
static int report_time(const json_t *report, uint64_t received, uint64_t *out) {
    const json_t *ts = json_object_get(report, "timestamp");
    if (!ts || json_is_null(ts)) {
        *out = received;
        return 1;
    }
    if (json_is_string(ts)) return rfc3339_seconds(json_string_value(ts), out);
    if (!json_is_number(ts) || json_number_value(ts) < 0 || json_number_value(ts) > 253402300799.0) return 0;
    *out = (uint64_t)json_number_value(ts);
    return 1;
}

/* Appends the entries of one list (discarded_events, rate_limited_events)
 * to out; 0 when an entry is malformed (Relay then ignores the whole
 * report). Entries with an unknown category or an overlong reason are
 * skipped, as in Relay. */
static int read_client_entries(const json_t *list, int outcome, client_outcome *out, size_t *n) {
    if (!list || json_is_null(list)) return 1;
    if (!json_is_array(list)) return 0;
    size_t i;
    const json_t *entry;
    json_array_foreach(list, i, entry) {
        const json_t *q = json_object_get(entry, "quantity");
        const char *reason = json_str(entry, "reason"), *category = json_str(entry, "category");
        if (!reason || !category || !json_is_integer(q) || json_integer_value(q) < 0 ||
            json_integer_value(q) > UINT32_MAX)
            return 0;
        int cat = category_by_name(category);
        if (cat < 0 || strlen(reason) > CLIENT_REPORT_MAX_REASON) continue;
        /* a rate limit without a reason code has none */
        const char *kept = outcome == TM_SRV_OUTCOME_RATE_LIMITED && !*reason ? NULL : reason;
        out[(*n)++] = (client_outcome){outcome, kept, cat, (uint64_t)json_integer_value(q)};
    }
    return 1;
}

/* Relay's order of merged client outcomes (a BTreeMap): rate limits before
 * client discards, then by reason, then by category. */
static int client_outcome_cmp(const void *a, const void *b) {
    const client_outcome *x = a, *y = b;
    if (x->outcome != y->outcome) return x->outcome == TM_SRV_OUTCOME_RATE_LIMITED ? -1 : 1;
    int by_reason = strcmp(x->reason ? x->reason : "", y->reason ? y->reason : "");
    if (by_reason) return by_reason;
    return (x->category > y->category) - (x->category < y->category);
}

/* A client report (what the SDK dropped itself) becomes outcomes, as in
 * Relay's process_client_reports: client_discard per discarded entry and
 * rate_limited per rate-limited entry, equal ones summed, with the report's
 * time and no event_id. A malformed report, one older than the project's
 * retention or from the future gives none; nothing else of it is kept. */
static tm_status process_client_report(const chunk_job *j, tm_error *err) {
    const tm_srv_context *ctx = j->ctx;
    count(j, "client_report", "accepted");
    json_t *root = json_loadb((const char *)j->item->payload, j->item->payload_len, 0, NULL);
    size_t entries = 0;
    if (json_is_object(root))
        entries = json_array_size(json_object_get(root, "discarded_events")) +
                  json_array_size(json_object_get(root, "rate_limited_events"));
    client_outcome *merged = entries ? calloc(entries, sizeof *merged) : NULL;
    if (entries && !merged) {
        json_decref(root);
        return tm_srv_fail(err, TM_ERR_NOMEM, j->item->offset, "out of memory reading a client report");
    }
    size_t n = 0;
    uint64_t when = 0;
    int valid = json_is_object(root) && report_time(root, ctx->now_unix, &when) &&
                read_client_entries(json_object_get(root, "discarded_events"), TM_SRV_OUTCOME_CLIENT_DISCARD,
                                    merged, &n) &&
                read_client_entries(json_object_get(root, "rate_limited_events"), TM_SRV_OUTCOME_RATE_LIMITED,
                                    merged, &n);
    uint64_t max_age = (uint64_t)ctx->project->retention_days * 86400;
    if (!valid || (when < ctx->now_unix && ctx->now_unix - when > max_age) ||
        (when > ctx->now_unix && when - ctx->now_unix > CLIENT_REPORT_MAX_SECS_IN_FUTURE))
        n = 0;
    /* equal outcomes summed: sorted, then adjacent ones merged */
    if (n) qsort(merged, n, sizeof *merged, client_outcome_cmp);
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        if (kept && client_outcome_cmp(&merged[kept - 1], &merged[i]) == 0)
            merged[kept - 1].quantity += merged[i].quantity;
        else merged[kept++] = merged[i];
    }
    n = kept;
    tm_status st = TM_OK;
    for (size_t i = 0; st == TM_OK && i < n; i++) {
        tm_srv_outcome o = {.timestamp = when,
                            .org_id = ctx->project->organization_id,
                            .project_id = ctx->project->id,
                            .outcome = merged[i].outcome,
                            .reason = merged[i].reason,
                            .category = merged[i].category,
                            .quantity = merged[i].quantity < UINT32_MAX ? (uint32_t)merged[i].quantity : UINT32_MAX};
        tm_srv_buf value = {0};
        st = tm_srv_outcome_json(&o, &value, err);
        tm_srv_record rec = {.kind = TM_SRV_RECORD_OUTCOME, .project_id = ctx->project->id,
                             .received = ctx->now_unix};
        if (st == TM_OK) st = add_record(j->out, rec, &value, 0, err);
        else tm_srv_buf_release(&value);
    }
    free(merged);
    json_decref(root);
    return st;
}

/* ---- the envelope ---- */

static tm_status process_item(const tm_srv_context *ctx, tm_srv_processed *out, const tm_srv_item *item,
                              tm_error *err) {
    chunk_job j = {ctx, out, item, item->platform.ptr && is_ui_platform(item->platform.ptr, item->platform.len)};
    if (!view_is(item->type, "profile_chunk")) {
        if (ctx->keep_other_items) {
            count(&j, "other", "forwarded");
            return tm_srv_envelope_write_item(&out->forward, item->header.ptr, item->header.len, item->payload,
                                              item->payload_len)
                       ? tm_srv_fail(err, TM_ERR_NOMEM, item->offset, "out of memory")
                       : TM_OK;
        }
        if (view_is(item->type, "client_report")) return process_client_report(&j, err);
        count(&j, "other", "unsupported_item_type");
        item_quantity quantities[2];
        size_t n = item_quantities(item, quantities);
        tm_status st = TM_OK;
        for (size_t i = 0; st == TM_OK && i < n; i++)
            st = add_outcome(&j, TM_SRV_OUTCOME_INVALID, "unsupported_item_type", quantities[i].category,
                             quantities[i].quantity, err);
        return st;
    }
    if (!ctx->project->continuous_profiling) {
        count(&j, "profile_chunk", "dropped"); /* the feature is off: dropped without outcome */
        return TM_OK;
    }
    if (item->payload_len > ctx->cfg->limits.max_profile_size) return reject(&j, "ExceedSizeLimit", err);
    if (!item->has_meta_length) return process_json_chunk(&j, err);
    tm_srv_view meta, raw;
    if (!tm_srv_item_split(item, &meta, &raw)) return reject(&j, "InvalidSampledProfile", err);
    return process_compound(&j, meta, raw, err);
}

static tm_status rate_limit(const tm_srv_context *ctx, const tm_srv_envelope *env, tm_srv_processed *out,
                            tm_error *err) {
    uint32_t chunks = 0;
    for (size_t i = 0; i < env->n_items; i++) chunks += view_is(env->items[i].type, "profile_chunk");
    if (!chunks || !ctx->ratelimit ||
        tm_srv_ratelimit_take(ctx->ratelimit, ctx->project_index, chunks, ctx->now_mono_ns, &out->retry_after_s))
        return TM_OK;
    out->http_status = 429;
    for (size_t i = 0; i < env->n_items; i++) {
        const tm_srv_item *item = &env->items[i];
        if (!view_is(item->type, "profile_chunk")) continue;
        chunk_job j = {ctx, out, item, item->platform.ptr && is_ui_platform(item->platform.ptr, item->platform.len)};
        count(&j, "profile_chunk", "rate_limited");
        tm_status st = add_outcome(&j, TM_SRV_OUTCOME_RATE_LIMITED, "project_rate_limit",
                                   j.ui ? TM_SRV_CATEGORY_PROFILE_CHUNK_UI : TM_SRV_CATEGORY_PROFILE_CHUNK, 1, err);
        if (st != TM_OK) return st;
    }
    return TM_OK;
}

/* The item type Relay makes of an event's "type" (ItemType::from_event_type). */
static const char *event_item_type(const json_t *event) {
    const char *type = json_str(event, "type");
    if (!type) return "event";
    if (strcmp(type, "transaction") == 0) return "transaction";
    if (strcmp(type, "feedback") == 0) return "feedback";
    if (strcmp(type, "csp") == 0 || strcmp(type, "hpkp") == 0 || strcmp(type, "expectct") == 0 ||
        strcmp(type, "expectstaple") == 0)
        return "security";
    return "event";
}

tm_status tm_srv_event_envelope(const uint8_t *event, size_t len, tm_srv_buf *out, tm_error *err) {
    json_error_t jerr;
    json_t *root = json_loadb((const char *)event, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return tm_srv_fail(err, TM_ERR_MALFORMED, (uint64_t)jerr.position, "the event: %s", jerr.text);
    char id[TM_SRV_UUID_HEX + 1];
    const json_t *given = json_object_get(root, "event_id");
    tm_status st = TM_OK;
    if (!json_is_object(root))
        st = tm_srv_fail(err, TM_ERR_MALFORMED, 0, "the event is not a JSON object");
    else if (given && !json_is_null(given) && !uuid_field(root, "event_id", id))
        st = tm_srv_fail(err, TM_ERR_MALFORMED, 0, "the event's event_id is not a UUID");
    else if (!given || json_is_null(given)) {
        if ((st = tm_srv_random_key(id, err)) == TM_OK) id[12] = '4'; /* a version 4 UUID, as SDKs make them */
    }
    const char *item_type = st == TM_OK ? event_item_type(root) : NULL;
    json_decref(root);
    if (st != TM_OK) return st;
    char head[160];
    int n = snprintf(head, sizeof head, "{\"event_id\":\"%s\"}\n{\"type\":\"%s\",\"length\":%zu}\n", id, item_type,
                     len);
    if (tm_srv_buf_append(out, head, (size_t)n) || tm_srv_buf_append(out, event, len) ||
        tm_srv_buf_append(out, "\n", 1))
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
    return TM_OK;
}

tm_status tm_srv_process(const tm_srv_context *ctx, const uint8_t *body, size_t len, tm_srv_processed *out,
                         tm_error *err) {
    memset(out, 0, sizeof *out);
    out->http_status = 200;
    tm_srv_envelope env;
    tm_status st = tm_srv_envelope_parse(body, len, &env, err);
    if (st != TM_OK) return st;
    /* a UUID, as Relay's EventId: answered and put in outcomes as 32 lowercase hex digits */
    if (env.event_id.ptr && !tm_srv_uuid_normalize(env.event_id.ptr, env.event_id.len, out->event_id_hex))
        st = tm_srv_fail(err, TM_ERR_MALFORMED, (uint64_t)((const uint8_t *)env.event_id.ptr - body),
                         "the envelope header's event_id is not a UUID");
    else if (env.event_id.ptr)
        out->event_id = (tm_srv_view){out->event_id_hex, TM_SRV_UUID_HEX};
    if (st == TM_OK) st = rate_limit(ctx, &env, out, err);
    if (st == TM_OK && ctx->keep_other_items) {
        /* the envelope header heads whatever is forwarded */
        if (tm_srv_buf_append(&out->forward, env.header.ptr, env.header.len) ||
            tm_srv_buf_append(&out->forward, "\n", 1))
            st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
    }
    /* limited chunks have their outcomes; the other items go on, and the answer stays 429, as in Relay */
    for (size_t i = 0; st == TM_OK && i < env.n_items; i++)
        if (out->http_status == 200 || !view_is(env.items[i].type, "profile_chunk"))
            st = process_item(ctx, out, &env.items[i], err);
    if (st == TM_OK && out->forward.len == env.header.len + 1) out->forward.len = 0; /* nothing to forward */
    tm_srv_envelope_release(&env);
    if (st != TM_OK) tm_srv_processed_release(out);
    return st;
}
