/*
 * http.c — the HTTP front end of `tracemill serve` (libmicrohttpd, one
 * thread per connection): routes, DSN authentication, request bodies
 * decoded and checked as they stream in, envelope processing, durable
 * hand-over to Kafka or the local store before the answer, upstream
 * forwarding of other item types (libcurl), /healthz and /metrics, the
 * connection and request budgets, the access log, and the drain on stop.
 *
 * Budgets. Every connection is registered from accept to close; one over
 * max_connections or max_connections_per_ip gets 503 at its first request's
 * headers. A reaper thread cuts (shutdown(2), libmicrohttpd then closes)
 * connections whose request headers are not complete header_timeout after
 * the connect or the previous answer, and bodies that take longer than
 * body_timeout or, after their first header_timeout seconds, arrive slower
 * than min_body_rate. Whatever the headers decide (401, 403, 413, 415, 503,
 * conflicting Content-Length) is answered at once, and the connection
 * closes without reading the body. Decoded bodies count against
 * max_envelope_size each and max_decoded_in_flight together, and the
 * envelope's framing is checked as the body arrives (tm_srv_envelope_scan).
 *
 * Drain (tm_srv_server_stop): the listener closes, idle keep-alive
 * connections are cut between requests, requests already received are
 * answered with "Connection: close", new ones on open connections get 503;
 * after shutdown_timeout (less the Kafka flush's share) the rest is closed.
 */
#define _GNU_SOURCE /* memmem */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

#define REAPER_PERIOD_MS 100
#define LINGER_MS 2000

/* A request's head (request line and header fields) is read into
 * libmicrohttpd's per-connection memory, and one that does not fit gets the
 * library's own HTML answer (414 or 431). That memory is made large enough
 * for heads well past the limits below, so that a head over them reaches
 * tracemill, which answers it in JSON. Pages of it are touched only as a
 * head or a body needs them. */
#define CONNECTION_MEMORY (256u * 1024u)
#define MAX_TARGET_BYTES (8u * 1024u)  /* the request target (path and query), as sent */
#define MAX_HEAD_BYTES (64u * 1024u)   /* the request line and every header field */
#define MAX_HEADER_FIELDS 256u

typedef enum phase {
    PHASE_IDLE,    /* waiting for a request's headers */
    PHASE_BODY,    /* headers in hand, the body arriving */
    PHASE_WORKING  /* the whole request in hand: processing and answering */
} phase;

/* One TCP connection, registered from accept to close; the fields after
 * fd are guarded by the server's mu. */
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
} conn;

struct tm_srv_server {
    const tm_srv_config *cfg;
    struct MHD_Daemon *daemon;
    tm_srv_store *store;
    tm_srv_kafka *kafka;
    tm_srv_ratelimit *ratelimit;
    tm_srv_metrics *metrics;
    uint16_t port;
    _Atomic int in_flight; /* envelope requests between first byte and answer */
    _Atomic int draining;
    tm_srv_budget decoded; /* decoded request bodies in flight */
    int log_fd;            /* access log; -1: off */
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a connection closed, or the reaper should look now */
    conn *conns;
    unsigned n_admitted;    /* connections within the caps */
    int stopping;           /* the reaper ends */
    pthread_t reaper;
    int have_reaper, have_sync;
};

typedef enum route { ROUTE_ENVELOPE, ROUTE_HEALTH, ROUTE_METRICS, ROUTE_NOT_FOUND, ROUTE_BAD_METHOD } route;

typedef struct request {
    int begun;             /* the access handler has seen it (begin) */
    size_t target_len;     /* the request target as sent, from on_target */
    route route;
    conn *conn;            /* NULL when its registration failed (out of memory) */
    struct timespec start;
    uint64_t bytes_in;
    char method[16], path[256];
    int answered;          /* a response is queued */
    int mid_body;          /* answering while the body arrives: written here, then closed */
    int close;             /* answer with Connection: close */
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
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char when[40], head[256];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%S", &tm);
    size_t n = strlen(when);
    snprintf(when + n, sizeof when - n, ".%03ldZ", now.tv_nsec / 1000000);
    char project[24] = "-";
    if (project_id) snprintf(project, sizeof project, "%llu", (unsigned long long)project_id);
    int json = s->cfg->access_log == TM_SRV_ACCESS_LOG_JSON;
    tm_srv_buf line = {0};
    int bad = 0;
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

/* libmicrohttpd 0.9 queues no answer while a body is still arriving. A
 * refusal decided then is written on the socket here (the connection's
 * thread is inside this callback, so nothing else writes to it), and
 * MHD_NO makes libmicrohttpd close the connection without sending more. */
static enum MHD_Result write_mid_body(request *r, unsigned status, const char *ctype, const void *data,
                                      size_t len) {
    char head[256];
    const char *reason = MHD_get_reason_phrase_for(status);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %u %s\r\nConnection: close\r\nContent-Type: %s\r\nContent-Length: %zu\r\n\r\n",
                     status, reason ? reason : "", ctype, len);
    int fd = r->conn ? r->conn->fd : -1;
    if (fd >= 0 && n > 0 && (size_t)n < sizeof head) {
        struct iovec iov[2] = {{head, (size_t)n}, {(void *)data, len}};
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
        /* an error answer fits the socket's send buffer; a client that does not read it loses it */
        if (sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT) > 0) linger(fd);
    }
    r->answered = 1;
    return MHD_NO;
}

/* Sends the answer, counts it and logs it; outcome says what became of
 * the request, in a few words. */
static enum MHD_Result answer(tm_srv_server *s, request *r, struct MHD_Connection *mc, unsigned status,
                              const char *ctype, const void *data, size_t len, uint32_t retry_after,
                              const char *outcome) {
    double seconds = seconds_since(&r->start);
    tm_srv_metrics_request(s->metrics, status, r->bytes_in, seconds);
    log_line(s, r->conn ? r->conn->client : "-", r->method, r->path, r->project ? r->project->id : 0, status,
             r->bytes_in, seconds, outcome);
    if (r->mid_body) return write_mid_body(r, status, ctype, data, len);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (retry_after) {
        char value[128];
        snprintf(value, sizeof value, "%u", retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, value);
        if (status == 429) {
            snprintf(value, sizeof value, "%u:profile_chunk;profile_chunk_ui:project:project_rate_limit",
                     retry_after);
            MHD_add_response_header(resp, "X-Sentry-Rate-Limits", value);
        }
    }
    if (r->close || atomic_load(&s->draining)) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(mc, status, resp);
    MHD_destroy_response(resp);
    if (ret == MHD_YES) r->answered = 1;
    return ret;
}

/* Answers {"key":"value"} (value JSON-escaped). */
static enum MHD_Result answer_json_field(tm_srv_server *s, request *r, struct MHD_Connection *mc, unsigned status,
                                         const char *key, const char *value, size_t value_len,
                                         uint32_t retry_after, const char *outcome) {
    tm_srv_buf body = {0};
    enum MHD_Result ret = MHD_NO;
    if (!tm_srv_buf_append(&body, "{\"", 2) && !tm_srv_buf_append(&body, key, strlen(key)) &&
        !tm_srv_buf_append(&body, "\":", 2) && !tm_srv_json_string(&body, value, value_len) &&
        !tm_srv_buf_append(&body, "}", 1))
        ret = answer(s, r, mc, status, "application/json", body.data, body.len, retry_after, outcome);
    tm_srv_buf_release(&body);
    return ret;
}

static enum MHD_Result answer_error(tm_srv_server *s, request *r, struct MHD_Connection *mc, unsigned status,
                                    const char *detail) {
    return answer_json_field(s, r, mc, status, "detail", detail, strlen(detail), status == 503 ? 1 : 0, detail);
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
static void authenticate(tm_srv_server *s, request *r, struct MHD_Connection *mc) {
    const char *header = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, "X-Sentry-Auth");
    const char *key = NULL;
    size_t key_len = 0;
    if (header) {
        snprintf(r->auth_header, sizeof r->auth_header, "X-Sentry-Auth: %s", header);
        auth_header_key(header, &key, &key_len);
    }
    if (!key) {
        key = MHD_lookup_connection_value(mc, MHD_GET_ARGUMENT_KIND, "sentry_key");
        key_len = key ? strlen(key) : 0;
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

/* "/api/<project_id>/envelope/" (the trailing slash optional): 1 with the
 * id, -1 for an id that is not canonical decimal, 0 for another path. */
static int envelope_path(const char *url, uint64_t *project_id) {
    if (strncmp(url, "/api/", 5) != 0) return 0;
    const char *id = url + 5, *p = id;
    while (*p >= '0' && *p <= '9') p++;
    if (p == id || (strcmp(p, "/envelope/") != 0 && strcmp(p, "/envelope") != 0)) return 0;
    return canonical_id(id, (size_t)(p - id), project_id) ? 1 : -1;
}

/* ---- request bodies ---- */

typedef struct length_headers {
    const char *first;
    int conflict;
} length_headers;

static enum MHD_Result note_length(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    length_headers *l = cls;
    if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) != 0 || !value) return MHD_YES;
    if (!l->first) l->first = value;
    else if (strcmp(l->first, value) != 0) l->conflict = 1;
    return MHD_YES;
}

/* Checks that need only the headers: Content-Length and Content-Encoding. */
static void start_body(tm_srv_server *s, request *r, struct MHD_Connection *mc) {
    length_headers lengths = {0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, note_length, &lengths);
    if (lengths.conflict) {
        refuse(r, 400, "conflicting Content-Length headers");
        return;
    }
    /* a body over the limit as sent is over it once decoded too: no coding shrinks data it cannot compress */
    if (lengths.first && strtoull(lengths.first, NULL, 10) > s->cfg->limits.max_envelope_size) {
        refuse(r, 413, "envelope of %s bytes exceeds the limit of %llu bytes", lengths.first,
               (unsigned long long)s->cfg->limits.max_envelope_size);
        return;
    }
    const char *coding = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    tm_srv_encoding enc;
    if (tm_srv_encoding_parse(coding, &enc) != 0) {
        refuse(r, 415, "unsupported Content-Encoding: %s", coding);
        return;
    }
    tm_error err;
    if (tm_srv_decoder_new(enc, s->cfg->limits.max_envelope_size, &r->decoder, &err) != TM_OK) {
        refuse(r, 503, "%s", err.message);
        return;
    }
    tm_srv_decoder_share(r->decoder, &s->decoded);
    if (lengths.first) tm_srv_decoder_expect(r->decoder, strtoull(lengths.first, NULL, 10));
}

static void start_envelope(tm_srv_server *s, request *r, struct MHD_Connection *mc) {
    atomic_fetch_add(&s->in_flight, 1);
    authenticate(s, r, mc);
    if (!r->error_status) start_body(s, r, mc);
}

/* Decoded bytes looked at between two checks of the envelope's framing. */
#define SCAN_QUOTA (64u * 1024u)

static void feed_body(tm_srv_server *s, request *r, const char *data, size_t len) {
    r->bytes_in += len;
    while (len && !r->error_status) {
        tm_error err;
        size_t used;
        if (tm_srv_decoder_feed_part(r->decoder, data, len, SCAN_QUOTA, &used, &r->body, &err) != TM_OK) {
            refuse(r, err.code == TM_ERR_LIMIT ? 413 : err.code == TM_ERR_NOMEM ? 503 : 400,
                   "request body: %s (at encoded byte %llu)", err.message, (unsigned long long)err.offset);
        } else if (tm_srv_envelope_scan_feed(&r->scan, r->body.data, r->body.len,
                                             s->cfg->limits.max_envelope_size, &err) != TM_OK) {
            refuse(r, err.code == TM_ERR_LIMIT ? 413 : 400, "invalid envelope at byte %llu: %s",
                   (unsigned long long)err.offset, err.message);
        } else if (r->scan.header_done && !r->dsn_checked) {
            authenticate_dsn(s, r);
        }
        data += used;
        len -= used;
    }
    if (r->error_status) tm_srv_buf_release(&r->body);
}

/* ---- upstream ---- */

static size_t discard_response(char *ptr, size_t size, size_t n, void *ctx) {
    (void)ptr;
    (void)ctx;
    return size * n;
}

/* POSTs the other items to the upstream's envelope endpoint. */
static int forward_upstream(tm_srv_server *s, request *r, const tm_srv_buf *envelope, char *why, size_t why_cap) {
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
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)s->cfg->limits.request_timeout_s);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
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

static enum MHD_Result finish_envelope(tm_srv_server *s, request *r, struct MHD_Connection *mc) {
    tm_error err;
    if (!r->error_status && tm_srv_decoder_finish(r->decoder, &r->body, &err) != TM_OK)
        refuse(r, err.code == TM_ERR_LIMIT ? 413 : 400, "request body: %s", err.message);
    if (!r->error_status && r->auth_pending) authenticate_dsn(s, r); /* the body ended inside the header */
    if (r->error_status) return answer_error(s, r, mc, r->error_status, r->error);

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
    tm_srv_processed p;
    tm_status st = tm_srv_process(&ctx, r->body.data, r->body.len, &p, &err);
    if (st != TM_OK) {
        char detail[256];
        snprintf(detail, sizeof detail, "invalid envelope at byte %llu: %s", (unsigned long long)err.offset,
                 err.message);
        return answer_error(s, r, mc, st == TM_ERR_NOMEM ? 503 : 400, detail);
    }
    char why[1200];
    if (p.forward.len && forward_upstream(s, r, &p.forward, why, sizeof why) != 0) {
        tm_srv_processed_release(&p);
        return answer_error(s, r, mc, 503, why);
    }
    if ((st = hand_over(s, &p, &err)) != TM_OK) {
        tm_srv_processed_release(&p);
        snprintf(why, sizeof why, "could not hand the envelope over: %s", err.message);
        return answer_error(s, r, mc, st == TM_ERR_LIMIT ? 413 : 503, why);
    }
    size_t chunks = 0;
    for (size_t i = 0; i < p.n_records; i++) chunks += p.records[i].kind == TM_SRV_RECORD_CHUNK;
    char outcome[128];
    snprintf(outcome, sizeof outcome, "accepted: %zu chunks, %zu outcomes%s", chunks, p.n_records - chunks,
             p.forward.len ? ", items forwarded" : "");
    enum MHD_Result ret;
    if (p.http_status == 429)
        ret = answer_json_field(s, r, mc, 429, "detail", "rate limited", strlen("rate limited"), p.retry_after_s,
                                "rate limited");
    else if (p.event_id.ptr)
        ret = answer_json_field(s, r, mc, p.http_status, "id", p.event_id.ptr, p.event_id.len, 0, outcome);
    else
        ret = answer(s, r, mc, p.http_status, "application/json", "{}", 2, 0, outcome);
    tm_srv_processed_release(&p);
    return ret;
}

static enum MHD_Result answer_metrics(tm_srv_server *s, request *r, struct MHD_Connection *mc) {
    tm_srv_gauges g = {.requests_in_flight = (uint64_t)atomic_load(&s->in_flight),
                       .kafka_queue_depth = s->kafka ? tm_srv_kafka_queue_depth(s->kafka) : 0,
                       .store_backlog = tm_srv_store_backlog(s->store),
                       .spooled = s->kafka ? tm_srv_store_spool_count(s->store) : 0,
                       .chunks_duplicate = tm_srv_store_duplicates(s->store)};
    tm_srv_buf out = {0};
    if (tm_srv_metrics_render(s->metrics, &g, &out) != 0) {
        tm_srv_buf_release(&out);
        return answer_error(s, r, mc, 500, "out of memory");
    }
    enum MHD_Result ret = answer(s, r, mc, 200, "text/plain; version=0.0.4", out.data, out.len, 0, "ok");
    tm_srv_buf_release(&out);
    return ret;
}

/* ---- requests ---- */

static void set_phase(tm_srv_server *s, conn *c, phase ph) {
    if (!c) return;
    pthread_mutex_lock(&s->mu);
    c->phase = ph;
    c->body_bytes = 0;
    clock_gettime(CLOCK_MONOTONIC, &c->since);
    pthread_mutex_unlock(&s->mu);
}

/* libmicrohttpd calls this with the request target as soon as the
 * request line is in, before the header fields: the request's state starts
 * here, to keep the target's length as sent (the access handler gets the
 * path unescaped, without its query). NULL when out of memory (begin then
 * refuses nothing: the connection is closed). */
static void *on_target(void *cls, const char *uri, struct MHD_Connection *mc) {
    (void)cls;
    (void)mc;
    request *r = calloc(1, sizeof *r);
    if (r) r->target_len = strlen(uri);
    return r;
}

typedef struct head_size {
    size_t bytes, fields;
} head_size;

static enum MHD_Result add_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    head_size *h = cls;
    h->bytes += strlen(key) + (value ? strlen(value) : 0) + 4; /* ": " and CRLF */
    h->fields++;
    return MHD_YES;
}

/* The head's limits, answered 414 or 431 here (in JSON) rather than by
 * libmicrohttpd (in HTML): see CONNECTION_MEMORY. */
static void check_head(request *r, struct MHD_Connection *mc, const char *method, const char *version) {
    if (r->target_len > MAX_TARGET_BYTES) {
        refuse(r, 414, "request target of %zu bytes is longer than %u bytes", r->target_len, MAX_TARGET_BYTES);
        return;
    }
    head_size h = {strlen(method) + r->target_len + strlen(version) + 4, 0};
    MHD_get_connection_values(mc, MHD_HEADER_KIND, add_field, &h);
    if (h.fields > MAX_HEADER_FIELDS)
        refuse(r, 431, "%zu header fields, more than %u", h.fields, MAX_HEADER_FIELDS);
    else if (h.bytes > MAX_HEAD_BYTES)
        refuse(r, 431, "request head of %zu bytes is larger than %u bytes", h.bytes, MAX_HEAD_BYTES);
}

/* The request's first call, with its headers: the route, and every
 * refusal the headers alone decide. */
static request *begin(tm_srv_server *s, struct MHD_Connection *mc, request *r, const char *url,
                      const char *method, const char *version) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    conn *c = info ? info->socket_context : NULL;
    if (!r) return NULL; /* on_target could not allocate it */
    r->begun = 1;
    clock_gettime(CLOCK_MONOTONIC, &r->start);
    r->conn = c;
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->path, sizeof r->path, "%s", url);
    const char *length = MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    /* an answer given before the body is read ends the connection */
    r->close = (length && strcmp(length, "0") != 0) ||
               MHD_lookup_connection_value(mc, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    int path = envelope_path(url, &r->project_id);
    if (strcmp(url, "/healthz") == 0) {
        r->route = get ? ROUTE_HEALTH : ROUTE_BAD_METHOD;
    } else if (strcmp(url, "/metrics") == 0) {
        r->route = get ? ROUTE_METRICS : ROUTE_BAD_METHOD;
    } else if (path) {
        r->route = strcmp(method, "POST") == 0 ? ROUTE_ENVELOPE : ROUTE_BAD_METHOD;
        if (path < 0) refuse(r, 400, "the project id in the URL must be a decimal number without leading zeros");
    } else {
        r->route = ROUTE_NOT_FOUND;
    }
    check_head(r, mc, method, version);
    if (!c) refuse(r, 503, "out of memory for the connection");
    else if (c->over) refuse(r, 503, "%s", c->over);
    else if (atomic_load(&s->draining)) refuse(r, 503, "the server is shutting down");
    if (r->route == ROUTE_ENVELOPE) {
        start_envelope(s, r, mc);
    } else if (!r->error_status) {
        if (r->route == ROUTE_BAD_METHOD) refuse(r, 405, "method not allowed");
        if (r->route == ROUTE_NOT_FOUND)
            refuse(r, 404, "not found: the envelope endpoint is POST /api/<project_id>/envelope/");
    }
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    tm_srv_server *s = cls;
    request *r = *con_cls;
    if (!r || !r->begun) {
        const union MHD_ConnectionInfo *info = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        conn *c = info ? info->socket_context : NULL;
        if (c) {
            pthread_mutex_lock(&s->mu);
            int cut = c->cut != NULL;
            pthread_mutex_unlock(&s->mu);
            if (cut) return MHD_NO; /* the reaper got there first */
        }
        set_phase(s, c, PHASE_BODY);
        if (!(r = begin(s, mc, r, url, method, version))) return MHD_NO;
        /* refused at the headers: answered now, the body is never read */
        if (r->error_status) return answer_error(s, r, mc, r->error_status, r->error);
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (r->conn) {
            pthread_mutex_lock(&s->mu);
            r->conn->body_bytes += n;
            pthread_mutex_unlock(&s->mu);
        }
        if (r->answered) return MHD_YES;
        if (r->route != ROUTE_ENVELOPE) {
            r->bytes_in += n;
            return MHD_YES;
        }
        feed_body(s, r, upload_data, n);
        if (!r->error_status) return MHD_YES;
        r->mid_body = 1;
        return answer_error(s, r, mc, r->error_status, r->error);
    }
    if (r->answered) return MHD_YES;
    set_phase(s, r->conn, PHASE_WORKING);
    r->close = 0; /* the body is read: the connection may stay */
    switch (r->route) {
    case ROUTE_ENVELOPE:
        return finish_envelope(s, r, mc);
    case ROUTE_HEALTH:
        return answer(s, r, mc, 200, "text/plain", "ok\n", 3, 0, "ok");
    case ROUTE_METRICS:
        return answer_metrics(s, r, mc);
    default:
        return answer_error(s, r, mc, r->error_status, r->error);
    }
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)mc;
    (void)toe;
    tm_srv_server *s = cls;
    request *r = *con_cls;
    if (!r) return;
    if (r->begun) {
        set_phase(s, r->conn, PHASE_IDLE);
        if (r->conn) {
            pthread_mutex_lock(&s->mu);
            r->conn->answered++;
            pthread_mutex_unlock(&s->mu);
        }
        if (r->route == ROUTE_ENVELOPE) atomic_fetch_sub(&s->in_flight, 1);
    }
    tm_srv_decoder_free(r->decoder);
    tm_srv_buf_release(&r->body);
    free(r);
    *con_cls = NULL;
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

static void register_conn(tm_srv_server *s, struct MHD_Connection *mc, void **socket_context) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return; /* its requests get 503 */
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr = MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    c->fd = fd ? fd->connect_fd : -1;
    snprintf(c->client, sizeof c->client, "-");
    if (addr && addr->client_addr) {
        const struct sockaddr *sa = addr->client_addr;
        if (sa->sa_family == AF_INET) {
            memcpy(&c->addr, sa, sizeof(struct sockaddr_in));
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->client, sizeof c->client);
        } else if (sa->sa_family == AF_INET6) {
            memcpy(&c->addr, sa, sizeof(struct sockaddr_in6));
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->client, sizeof c->client);
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &c->since);
    pthread_mutex_lock(&s->mu);
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
    pthread_mutex_unlock(&s->mu);
    *socket_context = c;
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    tm_srv_server *s = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        register_conn(s, mc, socket_context);
        return;
    }
    conn *c = *socket_context;
    if (!c) return;
    /* libmicrohttpd closes the socket after this: the reaper, holding mu, never sees a closed fd */
    pthread_mutex_lock(&s->mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    if (!c->over) s->n_admitted--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    free(c);
    *socket_context = NULL;
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
            if (!draining && (c->phase == PHASE_BODY || !c->answered))
                log_line(s, c->client, "-", "-", 0, 408, c->phase == PHASE_BODY ? c->body_bytes : 0, age, why);
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

static tm_status resolve(const tm_srv_config *cfg, struct sockaddr_storage *addr, socklen_t *len, int *ipv6,
                         tm_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char port[8];
    snprintf(port, sizeof port, "%u", cfg->listen_port);
    int rc = getaddrinfo(cfg->listen_host, port, &hints, &res);
    if (rc != 0 || !res)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "listen address %s: %s", cfg->listen_host, gai_strerror(rc));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    *ipv6 = res->ai_family == AF_INET6;
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
    if (pthread_create(&s->reaper, NULL, reap, s) != 0)
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "cannot start the connection reaper");
    s->have_reaper = 1;
    return TM_OK;
}

tm_status tm_srv_server_start(const tm_srv_config *cfg, tm_srv_server **out, tm_error *err) {
    *out = NULL;
    struct sockaddr_storage addr;
    socklen_t addr_len;
    int ipv6 = 0;
    tm_status st = resolve(cfg, &addr, &addr_len, &ipv6, err);
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
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_USE_POLL | (ipv6 ? MHD_USE_IPv6 : 0);
    /* room above the caps for the connections that are answered 503; past it libmicrohttpd drops them at accept */
    unsigned hard_limit = cfg->limits.max_connections + cfg->limits.max_connections / 4 + 16;
    s->daemon = MHD_start_daemon(flags, cfg->listen_port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK,
                                 on_target, s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONNECTION_MEMORY,
                                 MHD_OPTION_CONNECTION_LIMIT,
                                 hard_limit, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->limits.request_timeout_s,
                                 MHD_OPTION_END);
    if (!s->daemon) {
        st = tm_srv_fail(err, TM_ERR_IO, 0, "cannot listen on %s:%u (address in use or not permitted)",
                         cfg->listen_host, cfg->listen_port);
        goto fail;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : cfg->listen_port;
    *out = s;
    return TM_OK;
fail:
    tm_srv_server_stop(s);
    return st;
}

uint16_t tm_srv_server_port(const tm_srv_server *s) { return s->port; }

/* Stops accepting, cuts idle connections, lets the requests in hand finish
 * until the drain's share of shutdown_timeout is spent, then closes the rest. */
static void drain(tm_srv_server *s) {
    const tm_srv_config *cfg = s->cfg;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    atomic_store(&s->draining, 1);
    MHD_socket listener = MHD_quiesce_daemon(s->daemon);
    if (listener != MHD_INVALID_SOCKET) close(listener);
    /* Kafka's flush gets up to delivery_timeout_ms of the shutdown timeout, at most half */
    double flush = s->kafka ? cfg->kafka.delivery_timeout_ms / 1e3 : 0;
    if (flush > cfg->limits.shutdown_timeout_s / 2.0) flush = cfg->limits.shutdown_timeout_s / 2.0;
    double budget = cfg->limits.shutdown_timeout_s - flush;
    pthread_mutex_lock(&s->mu);
    pthread_cond_broadcast(&s->changed); /* the reaper cuts the idle ones now */
    while (s->conns && seconds_since(&t0) < budget) {
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_nsec += 20 * 1000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&s->changed, &s->mu, &until);
    }
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->daemon);
}

void tm_srv_server_stop(tm_srv_server *s) {
    if (!s) return;
    if (s->daemon) drain(s);
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
    }
    tm_srv_kafka_free(s->kafka);
    tm_srv_store_close(s->store);
    tm_srv_ratelimit_free(s->ratelimit);
    tm_srv_metrics_free(s->metrics);
    if (s->cfg->upstream) curl_global_cleanup();
    if (s->log_fd > STDERR_FILENO) close(s->log_fd);
    free(s);
}
