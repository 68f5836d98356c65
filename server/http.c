/*
 * http.c — the HTTP front end of `tracemill serve` (on http_conn.c, one
 * thread per connection): routes, DSN authentication, request bodies
 * decoded and checked as they stream in, envelope processing, durable
 * hand-over to Kafka or the local store before the answer, upstream
 * forwarding of other item types (libcurl), the legacy store endpoint (an
 * event wrapped in an envelope), CORS for browser SDKs, /healthz and
 * /metrics, the connection and request budgets, the access log, and the
 * drain on stop.
 *
 * Budgets. Every connection is registered from accept to close; one over
 * max_connections or max_connections_per_ip gets 503 at its first request's
 * headers. A reaper thread cuts (shutdown(2); the connection's thread then closes)
 * connections whose request headers are not complete header_timeout after
 * the connect or the previous answer, and bodies that take longer than
 * body_timeout or, after their first header_timeout seconds, arrive slower
 * than min_body_rate. Whatever the headers decide (401, 403, 413, 415, 503,
 * a head http_conn.c refuses) is answered at once, and the connection
 * closes without reading the body. Decoded bodies count against
 * max_envelope_size each and max_decoded_in_flight together, and the
 * envelope's framing is checked as the body arrives (tm_srv_envelope_scan).
 *
 * Drain (tm_srv_server_stop): the listener closes, idle keep-alive
 * connections are cut between requests, requests already received are
 * answered with "Connection: close", new ones on open connections get 503;
 * after shutdown_timeout (less the Kafka flush's share, and a tenth of it, at
 * most a second, for what comes after) the rest is closed, a body still
 * arriving then answered 503.
 */
#define _GNU_SOURCE /* memmem, pthread_setname_np */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

#define REAPER_PERIOD_MS 100
#define LINGER_MS 2000

typedef enum phase {
    PHASE_IDLE,    /* waiting for a request's headers */
    PHASE_BODY,    /* headers in hand, the body arriving */
    PHASE_WORKING  /* the whole request in hand: processing and answering */
} phase;

/* One TCP connection, registered from accept to close; the fields after
 * fd up to http are guarded by the server's mu. */
typedef struct conn {
    struct conn *prev, *next;
    int fd;
    struct sockaddr_storage addr;
    char client[INET6_ADDRSTRLEN];
    const char *over;      /* NULL: within the connection caps; else why not */
    phase phase;
    struct timespec since; /* when the phase began */
    uint64_t body_bytes;   /* in PHASE_BODY */
    unsigned answered;     /* requests completed on it */
    const char *cut;       /* the reaper closed it, and why */
    char method[16], path[256]; /* the request whose body is arriving ("": none), for the reaper's log */
    uint64_t project;
    tm_srv_http_conn http; /* its reads and writes: the connection's own thread only */
    int linger;            /* answered before the input was read: see linger() */
} conn;

struct tm_srv_server {
    const tm_srv_config *cfg;
    tm_srv_http_listener *listener;
    tm_srv_store *store;
    tm_srv_kafka *kafka;
    tm_srv_ratelimit *ratelimit;
    tm_srv_metrics *metrics;
    uint16_t port;
    _Atomic int in_flight; /* envelope requests between first byte and answer */
    _Atomic int draining;
    _Atomic int hurry;     /* tm_srv_server_hurry: the drain waits no more */
    tm_srv_budget decoded; /* decoded request bodies in flight */
    tm_srv_scratch_pool scratch; /* the conversions' working memory */
    int log_fd;            /* access log; -1: off */
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a connection closed, or the reaper should look now */
    conn *conns;
    unsigned n_conns;       /* registered */
    unsigned hard_limit;    /* past it a connection is closed at accept */
    unsigned n_admitted;    /* connections within the caps */
    int stopping;           /* the reaper ends */
    pthread_t reaper;
    int have_reaper, have_sync;
};

typedef enum route {
    ROUTE_ENVELOPE, /* and the legacy store endpoint */
    ROUTE_PREFLIGHT, /* a browser's CORS OPTIONS before it posts */
    ROUTE_HEALTH,
    ROUTE_METRICS,
    ROUTE_NOT_FOUND,
    ROUTE_BAD_METHOD
} route;

typedef struct request {
    route route;
    conn *conn;
    struct timespec start;
    uint64_t bytes_in;
    char method[16], path[256];
    int head_only;         /* HEAD: the answer without its body */
    int http10;            /* HTTP/1.0: keep-alive only when asked for */
    int keep_alive;        /* the head allows the connection to stay */
    int close;             /* answer with Connection: close: the body was not read */
    int closing;           /* the answer closed the connection (or could not be written) */
    int api;               /* an /api/ID/ endpoint: answers carry the CORS headers */
    int legacy_store;      /* /api/ID/store/: the body is one JSON event, not an envelope */
    /* envelope requests */
    uint64_t project_id;   /* from the URL */
    const tm_srv_project *project;
    size_t project_index;
    int auth_pending;      /* no key in the request: the envelope header's dsn decides */
    int dsn_checked;
    char key[129];         /* the request's key, for the dsn comparison */
    tm_srv_decoder *decoder;
    tm_srv_buf body;
    tm_srv_envelope_scan scan;
    unsigned error_status; /* non-zero: refused */
    const char *allow;     /* the route's methods, for a 405's Allow header */
    char error[256];
    char auth_header[512]; /* forwarded upstream */
} request;

static double seconds_between(const struct timespec *t0, const struct timespec *t1) {
    return (double)(t1->tv_sec - t0->tv_sec) + (double)(t1->tv_nsec - t0->tv_nsec) / 1e9;
}

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return seconds_between(t0, &t1);
}

static void refuse(request *r, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(request *r, unsigned status, const char *fmt, ...) {
    if (r->error_status) return;
    r->error_status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof r->error, fmt, ap);
    va_end(ap);
}

/* ---- the access log ---- */

static void log_line(tm_srv_server *s, const char *client, const char *method, const char *path,
                     uint64_t project_id, unsigned status, uint64_t bytes, double seconds, const char *outcome) {
    if (s->log_fd < 0) return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    /* the second formatted once per thread: gmtime_r takes glibc's time zone lock */
    static _Thread_local time_t when_second = -1;
    static _Thread_local char when[40];
    static _Thread_local size_t when_len;
    if (now.tv_sec != when_second) {
        struct tm tm;
        gmtime_r(&now.tv_sec, &tm);
        when_len = strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
        when_second = now.tv_sec;
    }
    char head[256];
    snprintf(when + when_len, sizeof when - when_len, ".%03ldZ", now.tv_nsec / 1000000);
    char project[24] = "-";
    if (project_id) snprintf(project, sizeof project, "%llu", (unsigned long long)project_id);
    int json = s->cfg->access_log == TM_SRV_ACCESS_LOG_JSON;
    tm_srv_buf line = {0};
    int bad = tm_srv_buf_reserve(&line, 512); /* one allocation for a usual line */
    /* the path and the outcome come from the client or hold its text: escaped in both formats */
    if (json) {
        snprintf(head, sizeof head, "{\"time\":\"%s\",\"client\":\"%s\",\"method\":\"%s\",\"path\":", when, client,
                 method);
        bad |= tm_srv_buf_append(&line, head, strlen(head)) || tm_srv_json_string(&line, path, strlen(path));
        snprintf(head, sizeof head,
                 ",\"project\":%s,\"status\":%u,\"bytes\":%llu,\"duration_ms\":%.3f,\"outcome\":",
                 project_id ? project : "null", status, (unsigned long long)bytes, seconds * 1e3);
        bad |= tm_srv_buf_append(&line, head, strlen(head)) ||
               tm_srv_json_string(&line, outcome, strlen(outcome)) || tm_srv_buf_append(&line, "}\n", 2);
    } else {
        snprintf(head, sizeof head, "%s %s %s ", when, client, method);
        bad |= tm_srv_buf_append(&line, head, strlen(head)) || tm_srv_json_string(&line, path, strlen(path));
        snprintf(head, sizeof head, " project=%s status=%u bytes=%llu ms=%.3f outcome=", project, status,
                 (unsigned long long)bytes, seconds * 1e3);
        bad |= tm_srv_buf_append(&line, head, strlen(head)) ||
               tm_srv_json_string(&line, outcome, strlen(outcome)) || tm_srv_buf_append(&line, "\n", 1);
    }
    /* one write(2) per line, so lines of concurrent requests do not mix */
    if (!bad && write(s->log_fd, line.data, line.len) < 0) { /* a full disk must not stop ingestion */
    }
    tm_srv_buf_release(&line);
}

/* ---- answers ---- */

/* Closing a socket with unread input resets the connection, and the
 * client may lose the answer before reading it. So after the answer the
 * sending side is closed and input is discarded until the client closes
 * too, for at most LINGER_MS (a client that stops sending once answered
 * closes at once). */
static void linger(int fd) {
    shutdown(fd, SHUT_WR);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char sink[16384];
    for (;;) {
        int left = LINGER_MS - (int)(seconds_since(&t0) * 1e3);
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0) return;
        ssize_t n = recv(fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return;
    }
}

/* Sends the answer, counts it and logs it; outcome says what became of
 * the request, in a few words. */
static void answer(tm_srv_server *s, request *r, unsigned status, const char *ctype, const void *data, size_t len,
                   uint32_t retry_after, const char *outcome) {
    double seconds = seconds_since(&r->start);
    tm_srv_metrics_request(s->metrics, status, r->bytes_in, seconds);
    log_line(s, r->conn->client, r->method, r->path, r->project ? r->project->id : 0, status, r->bytes_in, seconds,
             outcome);
    char headers[768];
    int n = snprintf(headers, sizeof headers, "Content-Type: %s\r\n", ctype);
    if (status == 405 && r->allow) /* RFC 9110: a 405 says what the resource takes */
        n += snprintf(headers + n, sizeof headers - (size_t)n, "Allow: %s\r\n", r->allow);
    /* A browser SDK posts from its page's origin with the key in the query
     * (no cookies): any origin may, and its script may read why it was
     * refused or slowed down. The preflight also says what may be sent. */
    if (r->api)
        n += snprintf(headers + n, sizeof headers - (size_t)n,
                      "Access-Control-Allow-Origin: *\r\n"
                      "Access-Control-Expose-Headers: Retry-After, X-Sentry-Rate-Limits, X-Sentry-Error\r\n");
    if (r->route == ROUTE_PREFLIGHT && status == 200)
        n += snprintf(headers + n, sizeof headers - (size_t)n,
                      "Access-Control-Allow-Methods: POST, OPTIONS\r\n"
                      "Access-Control-Allow-Headers: Content-Type, Content-Encoding, X-Sentry-Auth, Authorization, "
                      "Authentication, X-Requested-With, Origin, Accept, sentry-trace, baggage\r\n"
                      "Access-Control-Max-Age: 3600\r\n");
    if (retry_after) {
        n += snprintf(headers + n, sizeof headers - (size_t)n, "Retry-After: %u\r\n", retry_after);
        if (status == 429)
            snprintf(headers + n, sizeof headers - (size_t)n,
                     "X-Sentry-Rate-Limits: %u:profile_chunk;profile_chunk_ui:project:project_rate_limit\r\n",
                     retry_after);
    }
    tm_srv_http_connection how = TM_SRV_HTTP_KEEP;
    if (r->close || !r->keep_alive || atomic_load(&s->draining)) how = TM_SRV_HTTP_CLOSE;
    else if (r->http10) how = TM_SRV_HTTP_KEEP_ALIVE;
    r->closing = how == TM_SRV_HTTP_CLOSE;
    if (tm_srv_http_respond(&r->conn->http, status, headers, data, len, r->head_only, how) != 0) r->closing = 1;
}

/* Answers {"key":"value"} (value JSON-escaped). */
static void answer_json_field(tm_srv_server *s, request *r, unsigned status, const char *key, const char *value,
                              size_t value_len, uint32_t retry_after, const char *outcome) {
    tm_srv_buf body = {0};
    if (!tm_srv_buf_append(&body, "{\"", 2) && !tm_srv_buf_append(&body, key, strlen(key)) &&
        !tm_srv_buf_append(&body, "\":", 2) && !tm_srv_json_string(&body, value, value_len) &&
        !tm_srv_buf_append(&body, "}", 1))
        answer(s, r, status, "application/json", body.data, body.len, retry_after, outcome);
    else
        r->closing = 1; /* out of memory: the connection ends without an answer */
    tm_srv_buf_release(&body);
}

static void answer_error(tm_srv_server *s, request *r, unsigned status, const char *detail) {
    answer_json_field(s, r, status, "detail", detail, strlen(detail), status == 503 ? 1 : 0, detail);
}

/* ---- authentication ---- */

/* The value of sentry_key in "Sentry sentry_key=KEY, sentry_version=7"
 * (the scheme in any case, as HTTP auth schemes are). */
static int auth_header_key(const char *header, const char **key, size_t *len) {
    const char *p = header;
    while (*p == ' ') p++;
    if (strncasecmp(p, "sentry ", 7) == 0) p += 7;
    while (*p) {
        while (*p == ' ' || *p == ',') p++;
        const char *name = p;
        while (*p && *p != '=' && *p != ',') p++;
        if (*p != '=') continue;
        size_t name_len = (size_t)(p - name);
        const char *value = ++p;
        while (*p && *p != ',' && *p != ' ') p++;
        if (name_len == 10 && memcmp(name, "sentry_key", 10) == 0) {
            *key = value;
            *len = (size_t)(p - value);
            return 1;
        }
    }
    return 0;
}

/* A canonical decimal number (no sign, no leading zero but "0") fitting
 * 64 bits: 1 and *out, else 0. */
static int canonical_id(const char *p, size_t n, uint64_t *out) {
    if (n == 0 || (n > 1 && p[0] == '0')) return 0;
    uint64_t id = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9' || id > (UINT64_MAX - (uint64_t)(p[i] - '0')) / 10) return 0;
        id = id * 10 + (uint64_t)(p[i] - '0');
    }
    *out = id;
    return 1;
}

/* The public key and project id of a DSN,
 * SCHEME://PUBLIC_KEY[:SECRET]@HOST[:PORT]/[PATH/]PROJECT_ID. */
static int dsn_parts(const char *d, size_t n, const char **key, size_t *key_len, uint64_t *project_id) {
    const char *end = d + n, *p = memmem(d, n, "://", 3);
    if (!p) return 0;
    p += 3;
    const char *at = memchr(p, '@', (size_t)(end - p));
    if (!at) return 0;
    const char *colon = memchr(p, ':', (size_t)(at - p));
    *key = p;
    *key_len = (size_t)((colon ? colon : at) - p);
    const char *slash = end;
    while (slash > at && slash[-1] != '/') slash--;
    const char *host_end = memchr(at, '/', (size_t)(end - at));
    return *key_len && host_end && slash > host_end && canonical_id(slash, (size_t)(end - slash), project_id);
}

static void decide(tm_srv_server *s, request *r, const char *key, size_t key_len) {
    switch (tm_srv_config_authenticate(s->cfg, r->project_id, key, key_len, &r->project)) {
    case TM_SRV_AUTH_OK:
        r->project_index = (size_t)(r->project - s->cfg->projects);
        return;
    case TM_SRV_AUTH_UNKNOWN_KEY:
        refuse(r, 401, "unknown public key");
        return;
    case TM_SRV_AUTH_WRONG_PROJECT:
        refuse(r, 403, "the public key does not belong to project %llu", (unsigned long long)r->project_id);
        return;
    case TM_SRV_AUTH_UNKNOWN_PROJECT:
        refuse(r, 403, "unknown project %llu", (unsigned long long)r->project_id);
        return;
    }
}

/* From the request's headers; with no key there, the envelope header's
 * dsn decides once it has arrived (Relay accepts either). */
static void authenticate(tm_srv_server *s, request *r, const tm_srv_http_head *h) {
    const char *header = tm_srv_http_header(h, "X-Sentry-Auth");
    if (!header) { /* Relay takes the Sentry scheme in Authorization too */
        const char *authz = tm_srv_http_header(h, "Authorization");
        if (authz && strncasecmp(authz + strspn(authz, " "), "sentry ", 7) == 0) header = authz;
    }
    const char *key = NULL, *query_key = NULL;
    size_t key_len = 0, query_key_len = 0;
    if (header) {
        snprintf(r->auth_header, sizeof r->auth_header, "X-Sentry-Auth: %s", header);
        auth_header_key(header, &key, &key_len);
    }
    if (h->query) query_key = tm_srv_http_query_arg(h->query, "sentry_key", &query_key_len);
    if (key && query_key && (key_len != query_key_len || memcmp(key, query_key, key_len) != 0)) {
        refuse(r, 400, "two different public keys: in the auth header and in the sentry_key query parameter");
        return;
    }
    if (!key && query_key) { /* forwarded upstream as a header: the URL's query is not */
        key = query_key, key_len = query_key_len;
        snprintf(r->auth_header, sizeof r->auth_header, "X-Sentry-Auth: Sentry sentry_key=%.*s", (int)key_len, key);
    }
    if ((!key || !key_len) && r->legacy_store) { /* an event has no envelope header to bring a dsn */
        refuse(r, 401, "missing authorization: X-Sentry-Auth header or sentry_key query parameter");
        return;
    }
    if (!key || !key_len) {
        r->auth_pending = 1;
        return;
    }
    snprintf(r->key, sizeof r->key, "%.*s", (int)(key_len < sizeof r->key ? key_len : sizeof r->key - 1), key);
    decide(s, r, key, key_len);
}

/* Once the envelope header is in: its dsn authenticates a request that
 * brought no key, and must agree with the key of one that did. */
static void authenticate_dsn(tm_srv_server *s, request *r) {
    const tm_srv_envelope_scan *sc = &r->scan;
    r->dsn_checked = 1;
    const char *key = NULL;
    size_t key_len = 0;
    uint64_t dsn_project = 0;
    int readable = sc->has_dsn && dsn_parts((const char *)r->body.data + sc->dsn_offset, sc->dsn_len, &key,
                                            &key_len, &dsn_project);
    if (!r->auth_pending) {
        if (readable && (key_len != strlen(r->key) || memcmp(key, r->key, key_len) != 0))
            refuse(r, 400, "the envelope header's dsn names another public key than the request");
        return;
    }
    r->auth_pending = 0;
    if (!sc->has_dsn) {
        refuse(r, 401, "missing authorization: X-Sentry-Auth header, sentry_key query parameter or dsn in the "
                       "envelope header");
    } else if (!readable) {
        refuse(r, 401, "the envelope header's dsn is not PROTOCOL://PUBLIC_KEY@HOST/PROJECT_ID");
    } else if (dsn_project != r->project_id) {
        refuse(r, 400, "the envelope header's dsn is for project %llu, the URL for project %llu",
               (unsigned long long)dsn_project, (unsigned long long)r->project_id);
    } else {
        snprintf(r->auth_header, sizeof r->auth_header, "X-Sentry-Auth: Sentry sentry_key=%.*s", (int)key_len, key);
        decide(s, r, key, key_len);
    }
}

/* "/api/<project_id>/envelope/" or the legacy ".../store/" (the trailing
 * slash optional): 1 with the id (*store set for the latter), -1 for an id
 * that is not canonical decimal, 0 for another path. */
static int api_path(const char *url, uint64_t *project_id, int *store) {
    if (strncmp(url, "/api/", 5) != 0) return 0;
    const char *id = url + 5, *p = id;
    while (*p >= '0' && *p <= '9') p++;
    *store = strcmp(p, "/store/") == 0 || strcmp(p, "/store") == 0;
    if (p == id || (!*store && strcmp(p, "/envelope/") != 0 && strcmp(p, "/envelope") != 0)) return 0;
    return canonical_id(id, (size_t)(p - id), project_id) ? 1 : -1;
}

/* ---- request bodies ---- */

/* Checks that need only the headers: Content-Length and Content-Encoding
 * (http_conn.c has refused conflicting lengths). */
static void start_body(tm_srv_server *s, request *r, const tm_srv_http_head *h) {
    const char *length = tm_srv_http_header(h, "Content-Length");
    /* a body over the limit as sent is over it once decoded too: no coding shrinks data it cannot compress */
    if (h->has_length && h->content_length > s->cfg->limits.max_envelope_size) {
        refuse(r, 413, "envelope of %s bytes exceeds the limit of %llu bytes", length,
               (unsigned long long)s->cfg->limits.max_envelope_size);
        return;
    }
    /* several Content-Encoding lines are one list (RFC 9110 §5.3): one real coding in all of them */
    tm_srv_encoding enc = TM_SRV_ENC_IDENTITY;
    for (size_t i = 0; i < h->n_fields; i++) {
        if (strcasecmp(h->fields[i].name, "Content-Encoding") != 0) continue;
        const char *coding = h->fields[i].value;
        tm_srv_encoding e;
        if (tm_srv_encoding_parse(coding, &e) != 0 || (e != TM_SRV_ENC_IDENTITY && enc != TM_SRV_ENC_IDENTITY)) {
            refuse(r, 415, "unsupported Content-Encoding: %s", coding);
            return;
        }
        if (e != TM_SRV_ENC_IDENTITY) enc = e;
    }
    tm_error err;
    if (tm_srv_decoder_new(enc, s->cfg->limits.max_envelope_size, &r->decoder, &err) != TM_OK) {
        refuse(r, 503, "%s", err.message);
        return;
    }
    tm_srv_decoder_share(r->decoder, &s->decoded);
    if (h->has_length) tm_srv_decoder_expect(r->decoder, h->content_length);
}

static void start_envelope(tm_srv_server *s, request *r, const tm_srv_http_head *h) {
    atomic_fetch_add(&s->in_flight, 1);
    authenticate(s, r, h);
    if (!r->error_status) start_body(s, r, h);
}

/* Decoded bytes looked at between two checks of the envelope's framing. */
#define SCAN_QUOTA (64u * 1024u)

static void refuse_decoding(request *r, const tm_error *err) {
    refuse(r, err->code == TM_ERR_LIMIT ? 413 : err->code == TM_ERR_NOMEM ? 503 : 400,
           "request body: %s (at encoded byte %llu)", err->message, (unsigned long long)err->offset);
}

/* Checks the envelope's framing in what has been decoded so far. */
static void scan_body(tm_srv_server *s, request *r) {
    tm_error err;
    if (r->legacy_store) {
        /* one JSON event: read whole once it is in */
    } else if (tm_srv_envelope_scan_feed(&r->scan, r->body.data, r->body.len, s->cfg->limits.max_envelope_size,
                                         &err) != TM_OK) {
        refuse(r, err.code == TM_ERR_LIMIT ? 413 : 400, "invalid envelope at byte %llu: %s",
               (unsigned long long)err.offset, err.message);
    } else if (r->scan.header_done && !r->dsn_checked) {
        authenticate_dsn(s, r);
    }
}

static void feed_body(tm_srv_server *s, request *r, const char *data, size_t len) {
    r->bytes_in += len;
    while (len && !r->error_status) {
        tm_error err;
        size_t used;
        if (tm_srv_decoder_feed_part(r->decoder, data, len, SCAN_QUOTA, &used, &r->body, &err) != TM_OK)
            refuse_decoding(r, &err);
        else
            scan_body(s, r);
        data += used;
        len -= used;
    }
    if (r->error_status) tm_srv_buf_release(&r->body);
}

/* The body's next bytes received straight into the decoded body (an
 * identity Content-Length body: feed_body's copy saved), as many as have
 * arrived and fit the room the decoder has (its declared length's, mostly),
 * and the framing checked after them: as tm_srv_http_read_body's answers,
 * and the bytes' count in *n. */
static int receive_body(tm_srv_server *s, request *r, uint64_t left, size_t *n) {
    tm_error err;
    uint8_t *room;
    size_t room_len;
    *n = 0;
    if (tm_srv_decoder_window(r->decoder, &r->body, left < SIZE_MAX ? (size_t)left : SIZE_MAX, &room, &room_len,
                              &err) != TM_OK) {
        refuse_decoding(r, &err);
    } else {
        int got = tm_srv_http_recv_body(&r->conn->http, room, room_len, n);
        if (got < 0) return got;
        r->bytes_in += *n;
        if (tm_srv_decoder_commit(r->decoder, &r->body, *n, &err) != TM_OK) refuse_decoding(r, &err);
        else scan_body(s, r);
    }
    if (r->error_status) tm_srv_buf_release(&r->body);
    return 1;
}

/* ---- upstream ---- */

static size_t discard_response(char *ptr, size_t size, size_t n, void *ctx) {
    (void)ptr;
    (void)ctx;
    return size * n;
}

/* POSTs the other items to the upstream's envelope endpoint. */
/* The upstream's Retry-After (seconds), from its answer's headers. */
static size_t upstream_header(char *line, size_t size, size_t n, void *ctx) {
    uint32_t *retry_after = ctx;
    size_t len = size * n;
    if (len > 12 && strncasecmp(line, "Retry-After:", 12) == 0) {
        unsigned long v = strtoul(line + 12, NULL, 10);
        *retry_after = v > 0 && v < 86400 ? (uint32_t)v : 60;
    }
    return len;
}

/* Sends the other items upstream: 0, or -1 with why and the upstream's
 * status (0: no answer) and Retry-After. */
static int forward_upstream(tm_srv_server *s, request *r, const tm_srv_buf *envelope, char *why, size_t why_cap,
                            long *status_out, uint32_t *retry_after) {
    char url[1024];
    snprintf(url, sizeof url, "%s/api/%llu/envelope/", s->cfg->upstream, (unsigned long long)r->project->id);
    CURL *curl = curl_easy_init();
    if (!curl) return snprintf(why, why_cap, "cannot start an upstream request"), -1;
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/x-sentry-envelope");
    if (r->auth_header[0]) headers = curl_slist_append(headers, r->auth_header);
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (const char *)envelope->data);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)envelope->len);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, discard_response);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, upstream_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, retry_after);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)s->cfg->limits.request_timeout_s);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    *status_out = rc == CURLE_OK ? status : 0;
    if (rc != CURLE_OK) return snprintf(why, why_cap, "upstream %s: %s", url, curl_easy_strerror(rc)), -1;
    if (status < 200 || status > 299) return snprintf(why, why_cap, "upstream %s answered %ld", url, status), -1;
    return 0;
}

/* ---- the envelope's answer ---- */

static tm_status hand_over(tm_srv_server *s, const tm_srv_processed *p, tm_error *err) {
    if (!p->n_records) return TM_OK;
    if (s->kafka) return tm_srv_kafka_send(s->kafka, p->records, p->n_records, err);
    return tm_srv_store_put(s->store, p->records, p->n_records, 0, err);
}

static void finish_envelope(tm_srv_server *s, request *r) {
    tm_error err;
    if (!r->error_status && tm_srv_decoder_finish(r->decoder, &r->body, &err) != TM_OK)
        refuse(r, err.code == TM_ERR_LIMIT ? 413 : 400, "request body: %s", err.message);
    if (!r->error_status && r->auth_pending) authenticate_dsn(s, r); /* the body ended inside the header */
    if (!r->error_status && r->legacy_store) {
        tm_srv_buf wrapped = {0};
        if (tm_srv_event_envelope(r->body.data, r->body.len, &wrapped, &err) != TM_OK)
            refuse(r, err.code == TM_ERR_NOMEM ? 503 : 400, "invalid event at byte %llu: %s",
                   (unsigned long long)err.offset, err.message);
        tm_srv_buf_release(&r->body);
        r->body = wrapped;
    }
    if (r->error_status) {
        answer_error(s, r, r->error_status, r->error);
        return;
    }

    struct timespec mono;
    clock_gettime(CLOCK_MONOTONIC, &mono);
    tm_srv_context ctx = {.cfg = s->cfg,
                          .project = r->project,
                          .project_index = r->project_index,
                          .ratelimit = s->ratelimit,
                          .metrics = s->metrics,
                          .now_unix = (uint64_t)time(NULL),
                          .now_mono_ns = (uint64_t)mono.tv_sec * 1000000000ull + (uint64_t)mono.tv_nsec,
                          .keep_other_items = s->cfg->upstream != NULL};
    ctx.scratch = tm_srv_scratch_take(&s->scratch);
    tm_srv_processed p;
    tm_status st = tm_srv_process(&ctx, r->body.data, r->body.len, &p, &err);
    tm_srv_scratch_give(&s->scratch, ctx.scratch); /* the conversion's memory is all freed by now */
    if (st != TM_OK) {
        char detail[256];
        snprintf(detail, sizeof detail, "invalid envelope at byte %llu: %s", (unsigned long long)err.offset,
                 err.message);
        answer_error(s, r, st == TM_ERR_NOMEM ? 503 : 400, detail);
        return;
    }
    char why[1200];
    long upstream_status = 0;
    uint32_t retry_after = 60;
    if (p.forward.len &&
        forward_upstream(s, r, &p.forward, why, sizeof why, &upstream_status, &retry_after) != 0) {
        tm_srv_processed_release(&p);
        /* nothing of the envelope is kept; the client learns whether sending it again can help: a
         * refusal (4xx) is passed on, a rate limit with the upstream's Retry-After, a failure is 503 */
        if (upstream_status == 429)
            answer_json_field(s, r, 429, "detail", why, strlen(why), retry_after, why);
        else if (upstream_status >= 400 && upstream_status <= 499 && upstream_status != 408)
            answer_error(s, r, (unsigned)upstream_status, why);
        else
            answer_error(s, r, 503, why);
        return;
    }
    if ((st = hand_over(s, &p, &err)) != TM_OK) {
        tm_srv_processed_release(&p);
        snprintf(why, sizeof why, "could not hand the envelope over: %s", err.message);
        answer_error(s, r, st == TM_ERR_LIMIT ? 413 : 503, why);
        return;
    }
    tm_srv_processed_count(&p, s->metrics);
    size_t chunks = 0;
    for (size_t i = 0; i < p.n_records; i++) chunks += p.records[i].kind == TM_SRV_RECORD_CHUNK;
    char outcome[128];
    snprintf(outcome, sizeof outcome, "accepted: %zu chunks, %zu outcomes%s", chunks, p.n_records - chunks,
             p.forward.len ? ", items forwarded" : "");
    if (p.http_status == 429)
        answer_json_field(s, r, 429, "detail", "rate limited", strlen("rate limited"), p.retry_after_s,
                          "rate limited");
    else if (p.event_id.ptr)
        answer_json_field(s, r, p.http_status, "id", p.event_id.ptr, p.event_id.len, 0, outcome);
    else
        answer(s, r, p.http_status, "application/json", "{}", 2, 0, outcome);
    tm_srv_processed_release(&p);
}

static void answer_metrics(tm_srv_server *s, request *r) {
    tm_srv_gauges g = {.requests_in_flight = (uint64_t)atomic_load(&s->in_flight),
                       .kafka_queue_depth = s->kafka ? tm_srv_kafka_queue_depth(s->kafka) : 0,
                       .store_backlog = tm_srv_store_backlog(s->store),
                       .spooled = s->kafka ? tm_srv_store_spool_count(s->store) : 0,
                       .chunks_duplicate = tm_srv_store_duplicates(s->store)};
    tm_srv_buf out = {0};
    if (tm_srv_metrics_render(s->metrics, &g, &out) != 0) {
        tm_srv_buf_release(&out);
        answer_error(s, r, 500, "out of memory");
        return;
    }
    answer(s, r, 200, "text/plain; version=0.0.4", out.data, out.len, 0, "ok");
    tm_srv_buf_release(&out);
}

/* ---- requests ---- */

static void set_phase(tm_srv_server *s, conn *c, phase ph) {
    pthread_mutex_lock(&s->mu);
    c->phase = ph;
    c->body_bytes = 0;
    c->method[0] = c->path[0] = 0, c->project = 0;
    clock_gettime(CLOCK_MONOTONIC, &c->since);
    pthread_mutex_unlock(&s->mu);
}

/* The route, and every refusal the headers alone decide. */
static void begin(tm_srv_server *s, request *r, const tm_srv_http_head *h) {
    conn *c = r->conn;
    snprintf(r->method, sizeof r->method, "%s", h->method);
    snprintf(r->path, sizeof r->path, "%s", h->path);
    r->head_only = strcmp(h->method, "HEAD") == 0;
    r->http10 = h->minor == 0;
    r->keep_alive = h->keep_alive;
    /* an answer given before the body is read ends the connection */
    r->close = (h->has_length && h->content_length) || h->chunked;
    int get = strcmp(h->method, "GET") == 0 || r->head_only;
    int path = api_path(h->path, &r->project_id, &r->legacy_store);
    if (strcmp(h->path, "/healthz") == 0) {
        r->route = get ? ROUTE_HEALTH : ROUTE_BAD_METHOD;
        r->allow = "GET, HEAD";
    } else if (strcmp(h->path, "/metrics") == 0) {
        r->route = get ? ROUTE_METRICS : ROUTE_BAD_METHOD;
        r->allow = "GET, HEAD";
    } else if (path) {
        r->api = 1;
        r->route = strcmp(h->method, "POST") == 0      ? ROUTE_ENVELOPE
                   : strcmp(h->method, "OPTIONS") == 0 ? ROUTE_PREFLIGHT
                                                        : ROUTE_BAD_METHOD;
        r->allow = "POST, OPTIONS";
        if (path < 0) refuse(r, 400, "the project id in the URL must be a decimal number without leading zeros");
    } else {
        r->route = ROUTE_NOT_FOUND;
    }
    if (c->over) {
        refuse(r, 503, "%s", c->over);
        r->close = 1; /* its only answer */
    }
    else if (atomic_load(&s->draining)) refuse(r, 503, "the server is shutting down");
    if (r->route == ROUTE_ENVELOPE) {
        start_envelope(s, r, h);
    } else if (!r->error_status) {
        if (r->route == ROUTE_BAD_METHOD) refuse(r, 405, "method not allowed");
        if (r->route == ROUTE_NOT_FOUND)
            refuse(r, 404, "not found: the envelope endpoint is POST /api/<project_id>/envelope/ (events also "
                           "POST /api/<project_id>/store/)");
    }
}

/* Why the drain cut a connection whose requests did not finish in time. */
static const char drain_cut[] = "the server stopped";

static int cut_by_drain(tm_srv_server *s, const conn *c) {
    pthread_mutex_lock(&s->mu);
    int by_drain = c->cut == drain_cut;
    pthread_mutex_unlock(&s->mu);
    return by_drain;
}

/* Reads the body, decoding and checking an envelope's as it arrives: 0
 * once it is all in, -1 when the request was answered (refused: the
 * connection then lingers) or the connection ended first. */
static int read_body(tm_srv_server *s, request *r) {
    tm_srv_http_conn *hc = &r->conn->http;
    for (;;) {
        const char *data = NULL;
        size_t n;
        tm_srv_http_error e;
        uint64_t direct = r->route == ROUTE_ENVELOPE && r->decoder && tm_srv_decoder_is_identity(r->decoder)
                              ? tm_srv_http_body_direct(hc)
                              : 0;
        int got = direct ? receive_body(s, r, direct, &n) : tm_srv_http_read_body(hc, &data, &n, &e);
        if (got == 0) return 0;
        if (got == -2) {
            r->closing = 1;
            if (cut_by_drain(s, r->conn)) /* the client can still read: it learns to send again */
                answer_error(s, r, 503, "the server stopped before the request's body was complete; send it again");
            return -1;
        }
        if (got < 0) {
            refuse(r, e.status, "%s", e.detail);
            answer_error(s, r, r->error_status, r->error);
            r->conn->linger = 1;
            return -1;
        }
        pthread_mutex_lock(&s->mu);
        r->conn->body_bytes += n;
        pthread_mutex_unlock(&s->mu);
        if (r->route != ROUTE_ENVELOPE) {
            r->bytes_in += n;
            continue;
        }
        if (!direct) feed_body(s, r, data, n);
        if (r->error_status) {
            answer_error(s, r, r->error_status, r->error);
            r->conn->linger = 1;
            return -1;
        }
    }
}

/* One request on connection c: 1 when the connection stays for the next. */
static int serve_request(tm_srv_server *s, conn *c) {
    tm_srv_http_head h;
    tm_srv_http_error e;
    int got = tm_srv_http_read_head(&c->http, &h, &e);
    pthread_mutex_lock(&s->mu);
    int cut = c->cut != NULL;
    pthread_mutex_unlock(&s->mu);
    if (got == 0 || cut) return 0; /* closed, idle, or the reaper got there first */
    set_phase(s, c, PHASE_BODY);
    request r = {.conn = c, .route = ROUTE_NOT_FOUND, .close = 1};
    clock_gettime(CLOCK_MONOTONIC, &r.start);
    if (got < 0) { /* a head http_conn.c refused: the client may still be sending it */
        snprintf(r.method, sizeof r.method, "%s", h.method ? h.method : "-");
        snprintf(r.path, sizeof r.path, "%s", h.method ? h.path : "-");
        answer_error(s, &r, e.status, e.detail);
        c->linger = 1;
        return 0;
    }
    begin(s, &r, &h);
    pthread_mutex_lock(&s->mu); /* what the reaper names if the body is too slow */
    snprintf(c->method, sizeof c->method, "%s", r.method);
    snprintf(c->path, sizeof c->path, "%s", r.path);
    c->project = r.project ? r.project->id : 0;
    pthread_mutex_unlock(&s->mu);
    if (r.error_status) {
        /* refused at the headers: answered now, the body is never read */
        answer_error(s, &r, r.error_status, r.error);
    } else if (h.expect_continue && !c->http.body_done && c->http.len == c->http.start &&
               tm_srv_http_continue(&c->http) != 0) {
        r.closing = 1;
    } else if (read_body(s, &r) == 0) {
        set_phase(s, c, PHASE_WORKING);
        r.close = 0; /* the body is read: the connection may stay */
        switch (r.route) {
        case ROUTE_ENVELOPE:
            finish_envelope(s, &r);
            break;
        case ROUTE_HEALTH:
            answer(s, &r, 200, "text/plain", "ok\n", 3, 0, "ok");
            break;
        case ROUTE_PREFLIGHT:
            answer(s, &r, 200, "application/json", "{}", 2, 0, "preflight");
            break;
        case ROUTE_METRICS:
            answer_metrics(s, &r);
            break;
        default:
            answer_error(s, &r, r.error_status, r.error);
        }
    }
    set_phase(s, c, PHASE_IDLE);
    pthread_mutex_lock(&s->mu);
    c->answered++;
    pthread_mutex_unlock(&s->mu);
    if (r.route == ROUTE_ENVELOPE) atomic_fetch_sub(&s->in_flight, 1);
    tm_srv_decoder_free(r.decoder);
    tm_srv_buf_release(&r.body);
    return !r.closing;
}

/* ---- connections ---- */

static int same_host(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)a)->sin_addr.s_addr == ((const struct sockaddr_in *)b)->sin_addr.s_addr;
    if (a->ss_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr, &((const struct sockaddr_in6 *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return 0;
}

/* On the accept thread: registers the connection against the caps (one
 * over a cap is served its 503); NULL closes it at once. */
static void *on_accept(void *ctx, int fd, const struct sockaddr *sa, socklen_t len) {
    tm_srv_server *s = ctx;
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->fd = fd;
    snprintf(c->client, sizeof c->client, "-");
    if (sa->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
        memcpy(&c->addr, sa, sizeof(struct sockaddr_in));
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->client, sizeof c->client);
    } else if (sa->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
        memcpy(&c->addr, sa, sizeof(struct sockaddr_in6));
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->client, sizeof c->client);
    }
    clock_gettime(CLOCK_MONOTONIC, &c->since);
    pthread_mutex_lock(&s->mu);
    if (s->n_conns >= s->hard_limit) {
        pthread_mutex_unlock(&s->mu);
        free(c);
        return NULL;
    }
    unsigned same = 0;
    for (conn *o = s->conns; o; o = o->next) same += !o->over && same_host(&o->addr, &c->addr);
    if (s->n_admitted >= s->cfg->limits.max_connections)
        c->over = "too many connections: the server's max_connections are in use";
    else if (same >= s->cfg->limits.max_connections_per_ip)
        c->over = "too many connections from this address (max_connections_per_ip)";
    else
        s->n_admitted++;
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    pthread_mutex_unlock(&s->mu);
    return c;
}

/* The connection's own thread: its requests one after another, then the
 * close (after a linger when an answer cut the input short). */
static void serve(void *ctx, void *arg, int run) {
    tm_srv_server *s = ctx;
    conn *c = arg;
    uint32_t idle_s = s->cfg->limits.request_timeout_s; /* 0, or past poll's range: no idle deadline */
    int idle_ms = idle_s && idle_s < INT_MAX / 1000 ? (int)idle_s * 1000 : -1;
    if (run && tm_srv_http_conn_init(&c->http, c->fd, idle_ms) == 0) {
        while (serve_request(s, c)) {
        }
        pthread_mutex_lock(&s->mu);
        int cut = c->cut != NULL;
        pthread_mutex_unlock(&s->mu);
        if (!cut && c->linger && !c->http.input_closed) linger(c->fd);
    }
    tm_srv_http_conn_release(&c->http);
    /* unlinked before the close: the reaper, holding mu, never sees a closed fd */
    pthread_mutex_lock(&s->mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (!c->over) s->n_admitted--;
    s->n_conns--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    close(c->fd);
    free(c);
}

/* Why connection c, in its phase for `age` seconds, must be cut; NULL if not. */
static const char *overdue(const tm_srv_server *s, const conn *c, double age, int draining) {
    const tm_srv_config *cfg = s->cfg;
    if (c->phase == PHASE_IDLE) {
        if (draining) return "closed between requests: the server is shutting down";
        if (age > cfg->limits.header_timeout_s) return "no complete request headers within header_timeout";
    } else if (c->phase == PHASE_BODY) {
        if (age > cfg->limits.body_timeout_s) return "body not complete within body_timeout";
        if (age > cfg->limits.header_timeout_s && (double)c->body_bytes < (double)cfg->limits.min_body_rate * age)
            return "body slower than min_body_rate";
    }
    return NULL;
}

static void *reap(void *arg) {
    tm_srv_server *s = arg;
    pthread_setname_np(pthread_self(), "tm-reaper");
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int draining = atomic_load(&s->draining);
        for (conn *c = s->conns; c; c = c->next) {
            if (c->cut || c->fd < 0) continue;
            double age = seconds_between(&c->since, &now);
            const char *why = overdue(s, c, age, draining);
            if (!why) continue;
            c->cut = why;
            shutdown(c->fd, SHUT_RDWR); /* the connection's thread sees the end and closes it */
            /* closing a kept-alive connection that went quiet after its answers is routine */
            if (!draining && (c->phase == PHASE_BODY || !c->answered)) {
                uint64_t bytes = c->phase == PHASE_BODY ? c->body_bytes : 0;
                tm_srv_metrics_request(s->metrics, 408, bytes, age);
                log_line(s, c->client, c->method[0] ? c->method : "-", c->path[0] ? c->path : "-", c->project, 408,
                         bytes, age, why);
            }
        }
        struct timespec until = now;
        until.tv_nsec += REAPER_PERIOD_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->changed, &s->mu, &until);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle ---- */

static tm_status resolve(const tm_srv_config *cfg, struct sockaddr_storage *addr, socklen_t *len, tm_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", cfg->listen_port);
    int rc = getaddrinfo(cfg->listen_host, port, &hints, &res);
    if (rc != 0 || !res)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "listen address %s: %s", cfg->listen_host, gai_strerror(rc));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return TM_OK;
}

static tm_status open_access_log(tm_srv_server *s, tm_error *err) {
    s->log_fd = -1;
    if (s->cfg->access_log == TM_SRV_ACCESS_LOG_OFF) return TM_OK;
    if (!s->cfg->access_log_path) {
        s->log_fd = STDERR_FILENO;
        return TM_OK;
    }
    s->log_fd = open(s->cfg->access_log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (s->log_fd < 0)
        return tm_srv_fail(err, TM_ERR_IO, 0, "access log %s: %s", s->cfg->access_log_path, strerror(errno));
    return TM_OK;
}

static tm_status start_connections(tm_srv_server *s, tm_error *err) {
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    int ok = pthread_mutex_init(&s->mu, NULL) == 0 && pthread_cond_init(&s->changed, &ca) == 0;
    pthread_condattr_destroy(&ca);
    if (!ok) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "cannot create the connection registry");
    s->have_sync = 1;
    /* a conversion runs on a core: a block for each, and for each waiting its turn */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    tm_srv_scratch_pool_init(&s->scratch, cores > 1 ? 2 * (size_t)cores : 2);
    if (pthread_create(&s->reaper, NULL, reap, s) != 0)
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "cannot start the connection reaper");
    s->have_reaper = 1;
    return TM_OK;
}

tm_status tm_srv_server_start(const tm_srv_config *cfg, tm_srv_server **out, tm_error *err) {
    *out = NULL;
    struct sockaddr_storage addr;
    socklen_t addr_len = 0;
    tm_status st = resolve(cfg, &addr, &addr_len, err);
    if (st != TM_OK) return st;
    tm_srv_server *s = calloc(1, sizeof *s);
    if (!s) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
    s->cfg = cfg;
    s->log_fd = -1;
    s->decoded.limit = cfg->limits.max_decoded_in_flight;
    s->metrics = tm_srv_metrics_new();
    s->ratelimit = tm_srv_ratelimit_new(cfg);
    if (!s->metrics || !s->ratelimit) {
        st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
        goto fail;
    }
    if ((st = open_access_log(s, err)) != TM_OK || (st = start_connections(s, err)) != TM_OK) goto fail;
    if ((st = tm_srv_store_open(cfg->store_path, &s->store, err)) != TM_OK) goto fail;
    if (cfg->kafka.bootstrap_servers && (st = tm_srv_kafka_new(cfg, s->store, &s->kafka, err)) != TM_OK) goto fail;
    if (cfg->upstream) curl_global_init(CURL_GLOBAL_DEFAULT);
    /* room above the caps for the connections that are answered 503; past it they are closed at accept */
    s->hard_limit = cfg->limits.max_connections + cfg->limits.max_connections / 4 + 16;
    if (tm_srv_http_listen((struct sockaddr *)&addr, addr_len, on_accept, serve, s, &s->listener, &s->port, err) !=
        TM_OK) {
        char why[sizeof err->message];
        snprintf(why, sizeof why, "%s", err->message);
        st = tm_srv_fail(err, TM_ERR_IO, 0, "cannot listen on %s:%u: %s", cfg->listen_host, cfg->listen_port, why);
        goto fail;
    }
    *out = s;
    return TM_OK;
fail:
    tm_srv_server_stop(s);
    return st;
}

uint16_t tm_srv_server_port(const tm_srv_server *s) { return s->port; }

/* Stops accepting, cuts idle connections, lets the requests in hand finish
 * until the drain's share of shutdown_timeout is spent, then closes the rest:
 * a body still coming in is cut on its input side only, so that its request
 * is answered 503 (read_body). */
void tm_srv_server_hurry(tm_srv_server *s) {
    atomic_store(&s->hurry, 1);
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
}

void tm_srv_server_drain(tm_srv_server *s) {
    if (!s || !s->listener) return;
    const tm_srv_config *cfg = s->cfg;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    atomic_store(&s->draining, 1);
    tm_srv_http_listener_close(s->listener);
    s->listener = NULL;
    /* Kafka's flush gets up to delivery_timeout_ms of the shutdown timeout, at most half */
    double flush = s->kafka ? cfg->kafka.delivery_timeout_ms / 1e3 : 0;
    if (flush > cfg->limits.shutdown_timeout_s / 2.0) flush = cfg->limits.shutdown_timeout_s / 2.0;
    /* what follows the wait (the cut requests' ends, the store's close) gets
     * a tenth of the timeout, at most a second: the exit stays within it */
    double after = cfg->limits.shutdown_timeout_s / 10.0 < 1 ? cfg->limits.shutdown_timeout_s / 10.0 : 1;
    double budget = cfg->limits.shutdown_timeout_s - flush - after;
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->changed); /* the reaper cuts the idle ones now */
    while (s->conns && seconds_since(&t0) < budget && !atomic_load(&s->hurry)) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 20 * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->changed, &s->mu, &until);
    }
    /* the rest is cut; their threads are waited for, as one may be handing an envelope over */
    for (conn *c = s->conns; c; c = c->next) {
        if (c->cut) continue;
        shutdown(c->fd, c->phase == PHASE_BODY ? SHUT_RD : SHUT_RDWR);
        c->cut = drain_cut;
    }
    while (s->conns) pthread_cond_wait(&s->changed, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void tm_srv_server_stop(tm_srv_server *s) {
    if (!s) return;
    tm_srv_server_drain(s);
    if (s->have_reaper) {
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_cond_broadcast(&s->changed);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->reaper, NULL);
    }
    if (s->have_sync) {
        pthread_cond_destroy(&s->changed);
        pthread_mutex_destroy(&s->mu);
        tm_srv_scratch_pool_release(&s->scratch);
    }
    tm_srv_kafka_free(s->kafka);
    tm_srv_store_close(s->store);
    tm_srv_ratelimit_free(s->ratelimit);
    tm_srv_metrics_free(s->metrics);
    if (s->cfg->upstream) curl_global_cleanup();
    if (s->log_fd > STDERR_FILENO) close(s->log_fd);
    free(s);
}
