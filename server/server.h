/*
 * server.h — the ingest service's internal interfaces (`tracemill serve`).
 *
 * The server is a layer above libtracemill: it uses the public header for
 * conversion and owns everything that speaks to the network, Kafka and the
 * local store. Its pieces, each in its own file:
 *
 *   envelope.c   Sentry envelope parsing and item payload splitting (pure)
 *   encoding.c   streaming Content-Encoding decoders with a decoded-size cap
 *   config.c     YAML configuration, defaults, command-line overrides
 *   ratelimit.c  per-project token buckets
 *   message.c    ProfileChunkKafkaMessage (MessagePack) and outcome JSON
 *   process.c    an envelope -> messages and outcomes (Relay's rules)
 *   store.c      the local SQLite store (WAL, group commit, Kafka spool)
 *   kafka.c      the librdkafka producer: acks=all, spooling, replay
 *   metrics.c    counters and histograms in Prometheus text format
 *   http_conn.c  HTTP/1.1: listener, request heads, body framing, answers
 *   http.c       the front end tying it all together (routes, auth, budgets)
 *
 * Errors use the library's tm_status / tm_error. Functions here never exit
 * and never print; the CLI (cli/cli_serve.c) reports.
 */
#ifndef TM_SERVER_H
#define TM_SERVER_H

#include <stddef.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/socket.h>

#include "tracemill.h"

/* ==== Byte buffers and views ========================================== */

typedef struct tm_srv_view {
    const char *ptr; /* not NUL-terminated; NULL when absent */
    size_t len;
} tm_srv_view;

/* A growable heap buffer (malloc). */
typedef struct tm_srv_buf {
    uint8_t *data;
    size_t len, cap;
} tm_srv_buf;

/* 0 on success, -1 when memory runs out (the buffer is left as it was). */
int tm_srv_buf_append(tm_srv_buf *b, const void *data, size_t len);
/* Room for extra more bytes, allocated exactly (no doubling): 0, or -1 when out of memory. */
int tm_srv_buf_reserve(tm_srv_buf *b, size_t extra);
void tm_srv_buf_release(tm_srv_buf *b);

/* The conversion's working memory (scratch.c): a block bumped through by
 * one conversion at a time and reset after it, taken from a pool shared by
 * the connection threads. What does not fit goes to the C library. */
typedef struct tm_srv_scratch tm_srv_scratch;
typedef struct tm_srv_scratch_pool {
    pthread_mutex_t mu;
    tm_srv_scratch *free_list;
    size_t n_free, keep; /* blocks beyond keep are freed when given back */
} tm_srv_scratch_pool;
void tm_srv_scratch_pool_init(tm_srv_scratch_pool *pool, size_t keep);
void tm_srv_scratch_pool_release(tm_srv_scratch_pool *pool);
/* A reset scratch, or NULL when memory runs out (then the C library's). */
tm_srv_scratch *tm_srv_scratch_take(tm_srv_scratch_pool *pool);
/* Back to the pool: everything allocated from s must be freed by then. */
void tm_srv_scratch_give(tm_srv_scratch_pool *pool, tm_srv_scratch *s);
/* The allocator for tm_options.alloc; NULL for a NULL s (the C library's). */
const tm_alloc *tm_srv_scratch_alloc(tm_srv_scratch *s);

/* Appends s[0..len) as a JSON string escaped as serde_json does (", \\,
 * \b \f \n \r \t, other control bytes as \u00XX; valid UTF-8 as it is), a
 * byte that is not UTF-8 as the text \xNN (serde_json has no such strings;
 * JSON allows no raw one): what an access log line holds stays JSON. 0, or
 * -1 when memory runs out. */
int tm_srv_json_string(tm_srv_buf *out, const char *s, size_t len);

/* Chunk ids as Relay's EventId takes them: a UUID, plain (32 hex digits)
 * or with dashes (8-4-4-4-12), either case. Writes the 32 lowercase hex
 * digits and a NUL to out and returns 1; 0 for anything else (a path, a
 * control character, ...), leaving out unspecified. */
#define TM_SRV_UUID_HEX 32
int tm_srv_uuid_normalize(const char *s, size_t len, char out[TM_SRV_UUID_HEX + 1]);

/* Formats into err (code, offset, message); returns code. */
tm_status tm_srv_fail(tm_error *err, tm_status code, uint64_t offset, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ==== Envelopes (envelope.c) =========================================== */

/* Hard ceilings of the envelope parser, independent of configuration. */
#define TM_SRV_MAX_HEADER_BYTES (64u * 1024u) /* one header line */
#define TM_SRV_MAX_ITEMS 1000u                /* items in one envelope */

typedef struct tm_srv_item {
    uint64_t offset;         /* byte offset of the item header line */
    tm_srv_view header;      /* the item header JSON, as sent */
    tm_srv_view type;        /* "type" (required) */
    tm_srv_view content_type;/* "content_type" or absent */
    tm_srv_view platform;    /* "platform" or absent */
    tm_srv_view filename;    /* "filename" or absent */
    int has_meta_length;
    uint64_t meta_length;    /* "meta_length" when has_meta_length */
    int has_item_count;
    uint64_t item_count;     /* "item_count" (items in a log or span container) when has_item_count */
    const uint8_t *payload;  /* view into the envelope body */
    size_t payload_len;
    uint64_t payload_offset; /* byte offset of the payload */
} tm_srv_item;

typedef struct tm_srv_envelope {
    tm_srv_view header;      /* the envelope header JSON line */
    tm_srv_view event_id;    /* "event_id" or absent */
    tm_srv_view dsn;         /* "dsn" or absent */
    tm_srv_item *items;      /* malloc'd; release with tm_srv_envelope_release */
    size_t n_items;
} tm_srv_envelope;

/* Parses buf[0..len) (views point into it). Items with "length" take that
 * many bytes (then an optional '\n'); items without run to the next '\n'
 * or the end. Errors: TM_ERR_MALFORMED / TM_ERR_TRUNCATED / TM_ERR_LIMIT
 * with the byte offset of the problem. */
tm_status tm_srv_envelope_parse(const uint8_t *buf, size_t len, tm_srv_envelope *out, tm_error *err);
void tm_srv_envelope_release(tm_srv_envelope *env);

/* Checks an envelope's framing while its (decoded) body arrives, so that a
 * body which cannot become valid is refused early: a header line longer
 * than TM_SRV_MAX_HEADER_BYTES after that many bytes, not after the whole
 * body; a header that is not valid JSON once its line is complete; an item
 * declaring a length past max_len; more than TM_SRV_MAX_ITEMS items. It
 * refuses only what tm_srv_envelope_parse would refuse too (with the same
 * offsets and messages). Start zeroed; each call gets the whole body so
 * far (buf may move between calls, len only grows). */
typedef struct tm_srv_envelope_scan {
    size_t pos;           /* start of the part not yet checked */
    size_t searched;      /* a newline was looked for up to here */
    int state;
    uint64_t payload_end; /* of an item with "length" */
    size_t n_items;
    int header_done;      /* the envelope header line has been read */
    int has_dsn;          /* its "dsn", as buf[dsn_offset..+dsn_len) */
    size_t dsn_offset, dsn_len;
} tm_srv_envelope_scan;

tm_status tm_srv_envelope_scan_feed(tm_srv_envelope_scan *sc, const uint8_t *buf, size_t len, uint64_t max_len,
                                    tm_error *err);

/* Relay's split_item_payload: with meta_length inside the payload, json is
 * the first meta_length bytes and raw the rest (raw.len 0 -> no raw);
 * without meta_length, or out of range, json is the whole payload and raw
 * is empty. Returns 1 when the item is compound and in range, else 0. */
int tm_srv_item_split(const tm_srv_item *item, tm_srv_view *json, tm_srv_view *raw);

/* Appends one item (header JSON line, '\n', payload, '\n') to out. */
int tm_srv_envelope_write_item(tm_srv_buf *out, const char *header_json, size_t header_len,
                               const void *payload, size_t payload_len);

/* ==== Content-Encoding (encoding.c) ===================================== */

typedef enum tm_srv_encoding {
    TM_SRV_ENC_IDENTITY = 0,
    TM_SRV_ENC_GZIP,
    TM_SRV_ENC_DEFLATE, /* zlib-wrapped, or raw deflate as some clients send */
    TM_SRV_ENC_ZSTD,
    TM_SRV_ENC_BR
} tm_srv_encoding;

/* Parses a Content-Encoding header value (case-insensitive; NULL or empty
 * is identity), a list in which "identity" and empty elements count for
 * nothing. -1 for an unsupported coding or two stacked ones. */
int tm_srv_encoding_parse(const char *value, tm_srv_encoding *out);

typedef struct tm_srv_decoder tm_srv_decoder;

/* Bytes held by all requests together, against a limit (the decoded
 * bodies in flight). Thread-safe. */
typedef struct tm_srv_budget {
    _Atomic uint64_t used;
    uint64_t limit;
} tm_srv_budget;

/* Takes n bytes: 0, or -1 (nothing taken) when that would pass the limit. */
int tm_srv_budget_take(tm_srv_budget *b, uint64_t n);
void tm_srv_budget_give(tm_srv_budget *b, uint64_t n);

/* A streaming decoder appending decoded bytes to out, failing with
 * TM_ERR_LIMIT as soon as out would exceed max_decoded bytes (so a bomb
 * costs at most max_decoded of memory). */
tm_status tm_srv_decoder_new(tm_srv_encoding enc, uint64_t max_decoded, tm_srv_decoder **out,
                             tm_error *err);
tm_status tm_srv_decoder_feed(tm_srv_decoder *d, const void *data, size_t len, tm_srv_buf *out,
                              tm_error *err);
/* As tm_srv_decoder_feed, but returns once out has grown by quota bytes
 * (one library step more at most) while input is left: *used says how much
 * of data was taken, so the caller can look at the output as it grows. */
tm_status tm_srv_decoder_feed_part(tm_srv_decoder *d, const void *data, size_t len, size_t quota, size_t *used,
                                   tm_srv_buf *out, tm_error *err);
/* Charges every byte the output buffer grows by to shared as well (until
 * tm_srv_decoder_free gives them back); a growth the budget cannot cover
 * fails with TM_ERR_NOMEM, as memory running out does. */
void tm_srv_decoder_share(tm_srv_decoder *d, tm_srv_budget *shared);
/* The body's declared length (Content-Length), for the identity coding:
 * the output is sized for it at its first growth (up to 1 MiB; more
 * arrives in steps as before), so that a body is copied once. */
void tm_srv_decoder_expect(tm_srv_decoder *d, uint64_t length);
/* For a reader that receives an identity body straight into the output
 * (no copy out of its own buffer): the room for the next at most want bytes
 * at out's end, grown and charged as a feed of want bytes would grow it
 * (a window may take in more than one feed step when out has the room);
 * tm_srv_decoder_commit then counts the n bytes put there, failing with
 * TM_ERR_LIMIT past max_decoded as a feed does. */
int tm_srv_decoder_is_identity(const tm_srv_decoder *d);
tm_status tm_srv_decoder_window(tm_srv_decoder *d, tm_srv_buf *out, size_t want, uint8_t **room, size_t *room_len,
                                tm_error *err);
tm_status tm_srv_decoder_commit(tm_srv_decoder *d, tm_srv_buf *out, size_t n, tm_error *err);
/* Ends the stream: TM_ERR_TRUNCATED when the encoded stream is incomplete. */
tm_status tm_srv_decoder_finish(tm_srv_decoder *d, tm_srv_buf *out, tm_error *err);
void tm_srv_decoder_free(tm_srv_decoder *d);

/* ==== Configuration (config.c) ========================================== */

typedef struct tm_srv_project {
    uint64_t id;
    uint64_t organization_id;         /* default 1 */
    char **public_keys;               /* at least one */
    size_t n_public_keys;
    uint32_t retention_days;          /* default 90 */
    int continuous_profiling;         /* feature flags; default on */
    int continuous_profiling_perfetto;
    double rate_limit;                /* chunks per second; 0 = unlimited */
} tm_srv_project;

typedef struct tm_srv_kv {
    char *key, *value;
} tm_srv_kv;

typedef enum tm_srv_access_log {
    TM_SRV_ACCESS_LOG_OFF = 0,
    TM_SRV_ACCESS_LOG_TEXT,
    TM_SRV_ACCESS_LOG_JSON
} tm_srv_access_log;

typedef struct tm_srv_config {
    char *listen_host;                /* default "127.0.0.1" */
    uint16_t listen_port;             /* default 3000 */
    char *store_path;                 /* default "./tracemill-store" */
    char *upstream;                   /* forward other items here; NULL: drop them */
    tm_srv_project *projects;
    size_t n_projects;
    struct {
        uint64_t max_envelope_size;   /* decoded bytes, default 200 MiB */
        uint64_t max_profile_size;    /* item payload and expanded JSON, default 50 MiB */
        uint32_t max_connections;     /* default 256; more get 503 */
        uint32_t max_connections_per_ip; /* default 64; more get 503 */
        uint32_t request_timeout_s;   /* idle connection timeout, default 30 */
        uint32_t header_timeout_s;    /* connect (or previous answer) to headers, default 10 */
        uint32_t body_timeout_s;      /* headers to the body's last byte, default 120 */
        uint64_t min_body_rate;       /* bytes/s after header_timeout_s of body, default 1 KiB */
        uint64_t max_decoded_in_flight; /* decoded bodies of all requests, default 512 MiB */
        uint32_t shutdown_timeout_s;  /* SIGTERM to exit, default 10 */
        uint64_t max_conversion_work;   /* a chunk decode's working tables, default 15 MiB */
        uint64_t max_conversion_result; /* its profile + Sample v2 writer, default 40 MiB */
    } limits;
    tm_srv_access_log access_log;     /* default TM_SRV_ACCESS_LOG_TEXT */
    char *access_log_path;            /* appended to; NULL: stderr */
    struct {
        char *bootstrap_servers;      /* NULL: no Kafka, the local store is the output */
        char *profiles_topic;         /* default "ingest-profiles" */
        char *outcomes_topic;         /* default "outcomes" */
        tm_srv_kv *properties;        /* any librdkafka property, applied last */
        size_t n_properties;
        uint32_t delivery_timeout_ms; /* before a message is spooled; default 5000 */
    } kafka;
} tm_srv_config;

/* Fills cfg with the defaults (no projects). */
tm_status tm_srv_config_init(tm_srv_config *cfg, tm_error *err);
/* Reads YAML text on top of cfg; errors name the line:column or key. */
tm_status tm_srv_config_parse(tm_srv_config *cfg, const char *yaml, size_t len, tm_error *err);
tm_status tm_srv_config_load(tm_srv_config *cfg, const char *path, tm_error *err);
/* Command-line overrides: "HOST:PORT" (or ":PORT", or "PORT") and "ID:KEY". */
tm_status tm_srv_config_set_listen(tm_srv_config *cfg, const char *host_port, tm_error *err);
tm_status tm_srv_config_add_project(tm_srv_config *cfg, const char *id_key, tm_error *err);
tm_status tm_srv_config_set_store(tm_srv_config *cfg, const char *path, tm_error *err);
/* "off", "text" or "json" (--access-log). */
tm_status tm_srv_config_set_access_log(tm_srv_config *cfg, const char *format, tm_error *err);
/* Validates; with no project configured adds project 1 with a random
 * 32-hex-digit key (*generated_key set to it, else NULL). */
tm_status tm_srv_config_finish(tm_srv_config *cfg, const char **generated_key, tm_error *err);
/* Fills buf with TM_SRV_KEY_HEX random lowercase hex digits and a NUL. */
#define TM_SRV_KEY_HEX 32
tm_status tm_srv_random_key(char *buf, tm_error *err);
void tm_srv_config_release(tm_srv_config *cfg);

/* Authentication result of a key for a project id. */
typedef enum tm_srv_auth {
    TM_SRV_AUTH_OK = 0,
    TM_SRV_AUTH_UNKNOWN_KEY,    /* 401 */
    TM_SRV_AUTH_WRONG_PROJECT,  /* 403: the key belongs to another project */
    TM_SRV_AUTH_UNKNOWN_PROJECT /* 403 */
} tm_srv_auth;

tm_srv_auth tm_srv_config_authenticate(const tm_srv_config *cfg, uint64_t project_id, const char *key,
                                       size_t key_len, const tm_srv_project **project);

/* ==== Rate limits (ratelimit.c) ========================================= */

/* Token buckets, one per project of a config (indexed like cfg->projects);
 * capacity max(1, rate) tokens, refilled at rate per second. Thread-safe. */
typedef struct tm_srv_ratelimit tm_srv_ratelimit;

tm_srv_ratelimit *tm_srv_ratelimit_new(const tm_srv_config *cfg);
/* Takes n tokens from project index p at now_ns (CLOCK_MONOTONIC): 1 when
 * granted, 0 when not (nothing taken; *retry_after_s set, >= 1). */
int tm_srv_ratelimit_take(tm_srv_ratelimit *rl, size_t p, uint32_t n, uint64_t now_ns,
                          uint32_t *retry_after_s);
void tm_srv_ratelimit_free(tm_srv_ratelimit *rl);

/* ==== Messages (message.c) ============================================== */

/* Relay's ProfileChunkKafkaMessage. */
typedef struct tm_srv_chunk_msg {
    uint64_t organization_id;
    uint64_t project_id;
    uint64_t received;               /* Unix seconds */
    uint32_t retention_days;
    const uint8_t *payload;          /* expanded Sample v2 JSON */
    size_t payload_len;
    const uint8_t *raw_profile;      /* NULL: field omitted */
    size_t raw_profile_len;
    const char *raw_profile_content_type; /* NULL: field omitted */
} tm_srv_chunk_msg;

/* MessagePack map with field names, in the order above, "type":"profile_chunk" first. */
tm_status tm_srv_chunk_msg_encode(const tm_srv_chunk_msg *m, tm_srv_buf *out, tm_error *err);
/* The same message around a payload already in buf after
 * TM_SRV_CHUNK_MSG_HEAD_ROOM reserved bytes (m->payload is not read):
 * the fields before it go into the end of the room, the rest is appended;
 * the message is buf->data + *start up to buf->len. Saves copying the
 * payload, the largest part of a message. */
#define TM_SRV_CHUNK_MSG_HEAD_ROOM 128
tm_status tm_srv_chunk_msg_encode_around(const tm_srv_chunk_msg *m, tm_srv_buf *buf, size_t *start,
                                         tm_error *err);
/* Decodes what encode writes (views into buf; raw_profile_content_type is
 * copied into ctype_buf). Unknown keys are skipped. */
tm_status tm_srv_chunk_msg_decode(const uint8_t *buf, size_t len, tm_srv_chunk_msg *m, char *ctype_buf,
                                  size_t ctype_cap, tm_error *err);

/* Relay's outcome ids and the data categories a profile chunk counts in. */
enum { TM_SRV_OUTCOME_FILTERED = 1, TM_SRV_OUTCOME_RATE_LIMITED = 2, TM_SRV_OUTCOME_INVALID = 3,
       TM_SRV_OUTCOME_CLIENT_DISCARD = 5 };
enum { TM_SRV_CATEGORY_PROFILE_CHUNK = 18, TM_SRV_CATEGORY_PROFILE_CHUNK_UI = 26 };

typedef struct tm_srv_outcome {
    uint64_t timestamp;       /* Unix seconds */
    uint64_t org_id, project_id;
    int outcome;              /* TM_SRV_OUTCOME_* */
    const char *reason;       /* e.g. "profiling_invalid_sampled_profile"; NULL: none */
    tm_srv_view event_id;     /* the envelope's, may be absent */
    int category;             /* TM_SRV_CATEGORY_* */
    uint32_t quantity;
} tm_srv_outcome;

/* Relay's TrackOutcome JSON:
 * {"timestamp":"2026-11-22T10:00:00.000000Z","org_id":1,"project_id":42,
 *  "key_id":null,"outcome":3,"reason":"...","event_id":"...",
 *  "remote_addr":null,"source":"tracemill","category":26,"quantity":1} */
tm_status tm_srv_outcome_json(const tm_srv_outcome *o, tm_srv_buf *out, tm_error *err);

/* ==== Records handed to an output ======================================= */

typedef enum tm_srv_record_kind {
    TM_SRV_RECORD_CHUNK = 0,   /* a ProfileChunkKafkaMessage (msgpack) */
    TM_SRV_RECORD_OUTCOME = 1  /* an outcome (JSON) */
} tm_srv_record_kind;

typedef struct tm_srv_record {
    tm_srv_record_kind kind;
    uint64_t project_id;
    uint64_t received;        /* Unix seconds */
    tm_srv_view chunk_id;     /* chunks: from the metadata (may be absent) */
    size_t payload_size;      /* chunks: expanded JSON bytes */
    size_t raw_size;          /* chunks: raw profile bytes */
    const uint8_t *value;     /* the encoded message */
    size_t value_len;
    void *owned;              /* the allocation value lies in (tm_srv_processed_release frees it) */
} tm_srv_record;

/* ==== Local store (store.c) ============================================= */

/* SQLite in WAL mode at DIR/tracemill.db (DIR is created). Tables:
 * chunks(id, received, project_id, chunk_id, payload_size, raw_size,
 * message; one row per project_id and chunk_id), outcomes(id, received,
 * project_id, message) and spool(id,
 * kind, project_id, chunk_id, message) for Kafka messages waiting for a
 * broker. A background thread commits concurrent submissions in one
 * transaction (group commit, synchronous=FULL). Thread-safe. */
typedef struct tm_srv_store tm_srv_store;

tm_status tm_srv_store_open(const char *dir, tm_srv_store **out, tm_error *err);
void tm_srv_store_close(tm_srv_store *s); /* commits what is queued first */

/* Writes the records (chunks -> chunks, outcomes -> outcomes, or all into
 * spool when spool is set) and returns once they are committed (fsync'd).
 * On failure nothing of this call is stored. */
tm_status tm_srv_store_put(tm_srv_store *s, const tm_srv_record *recs, size_t n, int spool, tm_error *err);

/* Spool access for the Kafka replayer, oldest first: up to max entries
 * into out, *n_out of them (0 when the spool is empty). Each value is
 * malloc'd (free it). */
typedef struct tm_srv_spooled {
    int64_t id;
    tm_srv_record_kind kind;
    uint64_t project_id;
    tm_srv_view chunk_id;     /* in value's allocation (freed with it); may be absent */
    uint8_t *value;
    size_t value_len;
} tm_srv_spooled;
tm_status tm_srv_store_spool_peek(tm_srv_store *s, size_t max, tm_srv_spooled *out, size_t *n_out,
                                  tm_error *err);
tm_status tm_srv_store_spool_delete(tm_srv_store *s, int64_t up_to_id, tm_error *err);
uint64_t tm_srv_store_spool_count(tm_srv_store *s);
uint64_t tm_srv_store_backlog(tm_srv_store *s); /* submissions waiting for commit */
/* Chunks put since open that were already stored (same project_id and
 * chunk_id) and so were skipped: each is stored once, and its put succeeds. */
uint64_t tm_srv_store_duplicates(tm_srv_store *s);

/* Reading back (`tracemill store ...`): calls fn for every stored chunk in
 * id order (message is the msgpack); a non-zero return from fn stops the
 * walk early, and the call still returns TM_OK. */
typedef struct tm_srv_stored_chunk {
    int64_t id;
    uint64_t received, project_id;
    tm_srv_view chunk_id;
    size_t payload_size, raw_size;
    const uint8_t *message; /* NULL when it cannot be read back: unreadable says why */
    size_t message_len;
    const char *unreadable;
} tm_srv_stored_chunk;
typedef int (*tm_srv_chunk_fn)(void *ctx, const tm_srv_stored_chunk *c);
/* chunk_id NULL: all chunks. */
tm_status tm_srv_store_each_chunk(tm_srv_store *s, const char *chunk_id, tm_srv_chunk_fn fn, void *ctx,
                                  tm_error *err);
/* Opens an existing store read-only (no writer thread); close as usual. */
tm_status tm_srv_store_open_readonly(const char *dir, tm_srv_store **out, tm_error *err);

/* The public key `serve` uses when no project is configured, kept in
 * DIR/TM_SRV_KEY_FILE so that DSNs survive a restart: read back when the
 * file exists (it must be a regular file of mode 0600 holding
 * TM_SRV_KEY_HEX lowercase hex digits), else a random key written there
 * atomically (a complete file or none; of two servers racing, both end up
 * with the one that was linked first). DIR is created like the store's.
 * *created tells which. */
#define TM_SRV_KEY_FILE "public_key"
tm_status tm_srv_store_key(const char *dir, char key[TM_SRV_KEY_HEX + 1], int *created, tm_error *err);

/* ==== Kafka (kafka.c) =================================================== */

/* A producer with acks=all and idempotence. tm_srv_kafka_send returns once
 * every record is acknowledged by the brokers, or (when Kafka fails or
 * does not answer within delivery_timeout_ms) once the unacknowledged ones
 * are spooled to the store. While the spool is not empty new records are
 * spooled too, and a background thread replays the spool in order as soon
 * as a broker answers; on start, what an earlier run spooled is replayed. */
typedef struct tm_srv_kafka tm_srv_kafka;

/* The store must outlive the producer: tm_srv_kafka_free may still spool. */
tm_status tm_srv_kafka_new(const tm_srv_config *cfg, tm_srv_store *spool, tm_srv_kafka **out,
                           tm_error *err);
/* TM_ERR_LIMIT: a record larger than the producer's message.max.bytes
 * (nothing produced or spooled). */
tm_status tm_srv_kafka_send(tm_srv_kafka *k, const tm_srv_record *recs, size_t n, tm_error *err);
uint64_t tm_srv_kafka_queue_depth(tm_srv_kafka *k); /* messages in flight */
/* Flushes (bounded by delivery_timeout_ms; the rest stays spooled). */
void tm_srv_kafka_free(tm_srv_kafka *k);


/* ==== Metrics (metrics.c) =============================================== */

/* Counters and histograms shared by every request thread (atomics and one
 * mutex for the labelled item counters). */
typedef struct tm_srv_metrics tm_srv_metrics;

tm_srv_metrics *tm_srv_metrics_new(void);
void tm_srv_metrics_free(tm_srv_metrics *m);
void tm_srv_metrics_request(tm_srv_metrics *m, unsigned http_status, uint64_t bytes_in, double seconds);
/* One item: type is its item type, outcome "accepted", "dropped" or a
 * Relay reason string. Both must be static strings. */
void tm_srv_metrics_item(tm_srv_metrics *m, const char *type, const char *outcome);
void tm_srv_metrics_conversion(tm_srv_metrics *m, double seconds);

typedef struct tm_srv_gauges {
    uint64_t requests_in_flight; /* envelope requests between headers and answer */
    uint64_t kafka_queue_depth;
    uint64_t store_backlog;
    uint64_t spooled;
    uint64_t chunks_duplicate;   /* a counter: chunks the store already held */
} tm_srv_gauges;

/* Appends the Prometheus text exposition. */
int tm_srv_metrics_render(tm_srv_metrics *m, const tm_srv_gauges *g, tm_srv_buf *out);

/* ==== Processing (process.c) ============================================ */

/* One envelope's worth of work, decided before anything is handed over. */
/* What became of an envelope's items, for /metrics once the envelope is
 * kept (tm_srv_processed_count): type and outcome are static strings. */
typedef struct tm_srv_item_count {
    const char *type, *outcome;
    uint32_t n;
} tm_srv_item_count;

typedef struct tm_srv_processed {
    tm_srv_record *records;  /* chunks and outcomes, malloc'd values */
    size_t n_records, cap_records;
    tm_srv_item_count *counts; /* malloc'd */
    size_t n_counts, cap_counts;
    tm_srv_buf forward;      /* items for the upstream (an envelope), or empty */
    unsigned http_status;    /* 200, or 429 when rate limited */
    uint32_t retry_after_s;  /* with 429 */
    tm_srv_view event_id;    /* the envelope header's, normalised (32 lowercase hex digits) into event_id_hex */
    char event_id_hex[TM_SRV_UUID_HEX + 1];
} tm_srv_processed;

typedef struct tm_srv_context {
    const tm_srv_config *cfg;
    const tm_srv_project *project;
    size_t project_index;    /* into cfg->projects and the rate limiter */
    tm_srv_ratelimit *ratelimit; /* NULL: no limits */
    tm_srv_metrics *metrics;     /* NULL: not counted */
    uint64_t now_unix;       /* Unix seconds, for "received" and outcomes */
    uint64_t now_mono_ns;    /* CLOCK_MONOTONIC, for the rate limiter */
    int keep_other_items;    /* 1: items of other types go to forward (an upstream is set) */
    tm_srv_scratch *scratch; /* the conversion's memory; NULL: the C library's */
} tm_srv_context;

/* Parses the (decoded) envelope body and applies Relay's profile_chunk
 * rules: compound Perfetto items are converted (payload = expanded Sample
 * v2 JSON, raw_profile = the trace bytes), plain JSON chunks validated and
 * normalised, rejections become outcomes with Relay's reason strings.
 * TM_OK with *out filled (release it), or an error for a malformed
 * envelope (HTTP 400). */
tm_status tm_srv_process(const tm_srv_context *ctx, const uint8_t *body, size_t len, tm_srv_processed *out,
                         tm_error *err);
void tm_srv_processed_release(tm_srv_processed *p);
/* The body of a legacy store request (one JSON event) as the envelope an
 * SDK would send today: the event's event_id (normalised; a new one when
 * it has none) in the header, the event as the item Relay makes of its
 * "type" (transaction, security for csp/hpkp/expectct/expectstaple,
 * feedback, else event). TM_OK, or an
 * error naming the byte for a body that is not a JSON object or an
 * event_id that is not a UUID (HTTP 400). */
tm_status tm_srv_event_envelope(const uint8_t *event, size_t len, tm_srv_buf *out, tm_error *err);
/* Adds p's item counts to m: called once the envelope was handed over (a
 * 503 keeps nothing, and counts nothing as accepted or forwarded). */
void tm_srv_processed_count(const tm_srv_processed *p, tm_srv_metrics *m);

/* ==== HTTP/1.1 (http_conn.c) ========================================== */

/* Limits of a request head; past them the parser refuses it (414, 431). */
#define TM_SRV_HTTP_MAX_TARGET (8u * 1024u) /* the request target (path and query), as sent */
#define TM_SRV_HTTP_MAX_HEAD (64u * 1024u)  /* the request line and every header field */
#define TM_SRV_HTTP_MAX_FIELDS 256u

/* Why input was refused: the status to answer and a detail for its JSON body. */
typedef struct tm_srv_http_error {
    unsigned status;
    char detail[200];
} tm_srv_http_error;

typedef struct tm_srv_http_field {
    const char *name, *value; /* NUL-terminated in the parsed buffer; the value without surrounding spaces */
} tm_srv_http_field;

typedef struct tm_srv_http_head {
    const char *method;      /* NULL until the request line is read */
    char *path;              /* percent-decoded, without the query */
    char *query;             /* after '?', as sent; NULL without one */
    size_t target_len;       /* path and query as sent */
    unsigned minor;          /* HTTP/1.minor */
    size_t length;           /* bytes of the head, with its empty line */
    int has_length;          /* Content-Length given: content_length */
    uint64_t content_length;
    int chunked;             /* Transfer-Encoding: chunked */
    int keep_alive;          /* the connection may stay after the answer */
    int expect_continue;     /* Expect: 100-continue (HTTP/1.1) */
    size_t n_fields;
    tm_srv_http_field fields[TM_SRV_HTTP_MAX_FIELDS];
} tm_srv_http_head;

/* Parses a request head at the start of buf[0..len), writing NULs into it
 * (views in *h point there). 1: complete and valid, its h->length bytes
 * taken; 0: incomplete (call again with more bytes and the same
 * *scanned, 0 at first); -1: refused, *e says why (method and path are
 * set when the request line was read). Never reads past len. */
int tm_srv_http_parse_head(char *buf, size_t len, size_t *scanned, tm_srv_http_head *h, tm_srv_http_error *e);
/* Bytes of empty lines (CRLF or LF) at the start of buf[0..len), which
 * the parser skips before a request line, as clients send some after a body. */
size_t tm_srv_http_empty_lines(const char *buf, size_t len);
/* The first field of that name (any case), or NULL. */
const char *tm_srv_http_header(const tm_srv_http_head *h, const char *name);
/* The percent-decoded value of query argument name ('+' as space),
 * decoded in place; NULL when absent. */
char *tm_srv_http_query_arg(char *query, const char *name, size_t *len);
/* Decodes %XX in s[0..len) in place and NUL-terminates it; the new length. */
size_t tm_srv_http_unescape(char *s, size_t len, int plus_is_space);

/* A body's framing, Content-Length or chunked. */
typedef struct tm_srv_http_body {
    int chunked, state, digits;
    uint64_t left;   /* data bytes left of the body or the chunk */
    uint64_t offset; /* bytes of the body as sent, framing included */
    size_t line;     /* bytes of the current chunk-size or trailer line(s) */
} tm_srv_http_body;

void tm_srv_http_body_init(tm_srv_http_body *b, const tm_srv_http_head *h);
/* Takes framing and at most one run of data from in[0..len): *used bytes
 * taken, the data among them in *data (*data_len 0: none). 1: the body is
 * complete, 0: more is needed, -1: broken framing (*e). */
int tm_srv_http_body_take(tm_srv_http_body *b, const char *in, size_t len, size_t *used, const char **data,
                          size_t *data_len, tm_srv_http_error *e);

/* One connection's input buffer (TM_SRV_HTTP_MAX_HEAD bytes; pipelined
 * requests wait in it) and its reads and writes. A read or write that waits
 * longer than idle_ms ends the connection. */
typedef struct tm_srv_http_conn {
    int fd, idle_ms;
    char *buf;
    size_t start, len, cap; /* buf[start..len) is received and not taken */
    size_t scanned;         /* for tm_srv_http_parse_head */
    int input_closed;       /* the peer closed its side */
    tm_srv_http_body body;
    int body_done;
} tm_srv_http_conn;

int tm_srv_http_conn_init(tm_srv_http_conn *c, int fd, int idle_ms); /* -1: out of memory */
void tm_srv_http_conn_release(tm_srv_http_conn *c);                  /* does not close fd */
/* The next request's head: 1 (valid; its body follows), -1 (refused: *e),
 * 0 (the connection ended, or went idle, before a whole head). */
int tm_srv_http_read_head(tm_srv_http_conn *c, tm_srv_http_head *h, tm_srv_http_error *e);
/* The body's next bytes (valid until the next call): 1, 0 at its end,
 * -1 for broken framing (*e), -2 when the connection ended first. */
int tm_srv_http_read_body(tm_srv_http_conn *c, const char **data, size_t *len, tm_srv_http_error *e);
/* How much of a Content-Length body can be received straight into the
 * caller's memory with tm_srv_http_recv_body: what is left of it when none
 * of it waits in the connection's buffer, else 0 (chunked, complete, or
 * buffered bytes first: tm_srv_http_read_body). */
uint64_t tm_srv_http_body_direct(const tm_srv_http_conn *c);
/* After tm_srv_http_body_direct: receives the body's next bytes into
 * dst[0..cap), never past its end: 1 with *n, or -2 when the connection
 * ended first. Saves copying a large body out of the connection's buffer. */
int tm_srv_http_recv_body(tm_srv_http_conn *c, void *dst, size_t cap, size_t *n);
int tm_srv_http_continue(tm_srv_http_conn *c); /* "100 Continue": 0, or -1 */

typedef enum tm_srv_http_connection {
    TM_SRV_HTTP_KEEP = 0,      /* HTTP/1.1's default: no header */
    TM_SRV_HTTP_CLOSE,         /* Connection: close */
    TM_SRV_HTTP_KEEP_ALIVE     /* Connection: keep-alive (HTTP/1.0 asked for it) */
} tm_srv_http_connection;

/* Writes an answer: the status line, Date, the Connection header,
 * Content-Length, `headers` (complete lines, each ending in CRLF; "" for
 * none), and the body unless head_only. 0, or -1 when the peer is gone. */
int tm_srv_http_respond(tm_srv_http_conn *c, unsigned status, const char *headers, const void *body, size_t len,
                        int head_only, tm_srv_http_connection connection);
const char *tm_srv_http_reason(unsigned status);

/* A listening socket and its accept thread. accept runs there for each
 * connection and returns its state (NULL: the socket is closed at once);
 * serve(ctx, conn, 1) then runs on a thread of its own and must close the
 * socket; serve(ctx, conn, 0) releases a connection whose thread could not
 * start. */
typedef void *(*tm_srv_http_accept_fn)(void *ctx, int fd, const struct sockaddr *addr, socklen_t addr_len);
typedef void (*tm_srv_http_serve_fn)(void *ctx, void *conn, int run);
typedef struct tm_srv_http_listener tm_srv_http_listener;

/* Listens on addr (port 0: any free port; *port tells which). */
tm_status tm_srv_http_listen(const struct sockaddr *addr, socklen_t addr_len, tm_srv_http_accept_fn accept,
                             tm_srv_http_serve_fn serve, void *ctx, tm_srv_http_listener **out, uint16_t *port,
                             tm_error *err);
/* Stops accepting and closes the socket (connections already accepted go on). */
void tm_srv_http_listener_close(tm_srv_http_listener *l);

/* ==== The server (http.c) =============================================== */

/* A running ingest server: the HTTP layer above with a thread per
 * connection, the local store, and Kafka when configured. */
typedef struct tm_srv_server tm_srv_server;

/* Opens the store (and Kafka), then listens. cfg must stay valid until
 * tm_srv_server_stop. */
tm_status tm_srv_server_start(const tm_srv_config *cfg, tm_srv_server **out, tm_error *err);
/* The port listened on (useful with port 0: any free port). */
uint16_t tm_srv_server_port(const tm_srv_server *s);
/* The first half of tm_srv_server_stop (which does it when not done):
 * stops accepting and lets requests in flight finish, within the shutdown
 * timeout's share; those left are cut (a body still arriving: 503). */
void tm_srv_server_drain(tm_srv_server *s);
/* From another thread, while tm_srv_server_drain runs or before: cuts its
 * wait short (an operator's second SIGTERM). */
void tm_srv_server_hurry(tm_srv_server *s);
/* Graceful stop: drains (above), flushes Kafka, closes the store. NULL:
 * no-op. */
void tm_srv_server_stop(tm_srv_server *s);

#endif /* TM_SERVER_H */
