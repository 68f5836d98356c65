/*
 * http.c — the HTTP front end of `tracemill serve` (libmicrohttpd, one
 * thread per connection): routes, DSN authentication, request bodies
 * decoded as they stream in, envelope processing, durable hand-over to
 * Kafka or the local store before the answer, upstream forwarding of other
 * item types (libcurl), /healthz and /metrics, graceful stop.
 *
 * A response is queued only once the whole body has been read, even for a
 * request refused at its headers, so keep-alive connections stay usable.
 */
#include <curl/curl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

struct tm_srv_server {
    const tm_srv_config *cfg;
    struct MHD_Daemon *daemon;
    tm_srv_store *store;
    tm_srv_kafka *kafka;
    tm_srv_ratelimit *ratelimit;
    tm_srv_metrics *metrics;
    uint16_t port;
    _Atomic int in_flight; /* envelope requests between first byte and answer */
};

typedef enum route { ROUTE_ENVELOPE, ROUTE_HEALTH, ROUTE_METRICS, ROUTE_NOT_FOUND, ROUTE_BAD_METHOD } route;

typedef struct request {
    route route;
    struct timespec start;
    uint64_t bytes_in;
    /* envelope requests */
    const tm_srv_project *project;
    size_t project_index;
    tm_srv_decoder *decoder;
    tm_srv_buf body;
    unsigned error_status; /* non-zero: refused, the rest of the body is drained */
    char error[256];
    char auth_header[512]; /* forwarded upstream */
} request;

static double seconds_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
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

static enum MHD_Result send_body(struct MHD_Connection *conn, unsigned status, const char *ctype, const void *data,
                                 size_t len, uint32_t retry_after) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    if (status == 429) {
        char value[128];
        snprintf(value, sizeof value, "%u", retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, value);
        snprintf(value, sizeof value, "%u:profile_chunk;profile_chunk_ui:project:project_rate_limit", retry_after);
        MHD_add_response_header(resp, "X-Sentry-Rate-Limits", value);
    }
    enum MHD_Result ret = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* Sends {"key":"value"} (value JSON-escaped) with the status. */
static enum MHD_Result send_json_field(struct MHD_Connection *conn, unsigned status, const char *key,
                                       const char *value, size_t value_len, uint32_t retry_after) {
    tm_srv_buf body = {0};
    enum MHD_Result ret = MHD_NO;
    if (!tm_srv_buf_append(&body, "{\"", 2) && !tm_srv_buf_append(&body, key, strlen(key)) &&
        !tm_srv_buf_append(&body, "\":", 2) && !tm_srv_json_string(&body, value, value_len) &&
        !tm_srv_buf_append(&body, "}", 1))
        ret = send_body(conn, status, "application/json", body.data, body.len, retry_after);
    tm_srv_buf_release(&body);
    return ret;
}

static enum MHD_Result send_error(tm_srv_server *s, request *r, struct MHD_Connection *conn, unsigned status,
                                  const char *detail) {
    tm_srv_metrics_request(s->metrics, status, r->bytes_in, seconds_since(&r->start));
    return send_json_field(conn, status, "detail", detail, strlen(detail), 0);
}

/* ---- authentication ---- */

/* The value of sentry_key in "Sentry sentry_key=KEY, sentry_version=7". */
static int auth_header_key(const char *header, const char **key, size_t *len) {
    const char *p = header;
    while (*p == ' ') p++;
    if (strncmp(p, "Sentry ", 7) == 0) p += 7;
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

static void authenticate(tm_srv_server *s, request *r, struct MHD_Connection *conn, uint64_t project_id) {
    const char *header = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Sentry-Auth");
    const char *key = NULL;
    size_t key_len = 0;
    if (header) {
        snprintf(r->auth_header, sizeof r->auth_header, "X-Sentry-Auth: %s", header);
        auth_header_key(header, &key, &key_len);
    }
    if (!key) {
        key = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "sentry_key");
        key_len = key ? strlen(key) : 0;
    }
    if (!key || !key_len) {
        refuse(r, 401, "missing authorization: X-Sentry-Auth header or sentry_key query parameter");
        return;
    }
    switch (tm_srv_config_authenticate(s->cfg, project_id, key, key_len, &r->project)) {
    case TM_SRV_AUTH_OK:
        r->project_index = (size_t)(r->project - s->cfg->projects);
        return;
    case TM_SRV_AUTH_UNKNOWN_KEY:
        refuse(r, 401, "unknown public key");
        return;
    case TM_SRV_AUTH_WRONG_PROJECT:
        refuse(r, 403, "the public key does not belong to project %llu", (unsigned long long)project_id);
        return;
    case TM_SRV_AUTH_UNKNOWN_PROJECT:
        refuse(r, 403, "unknown project %llu", (unsigned long long)project_id);
        return;
    }
}

/* "/api/<digits>/envelope/" (the trailing slash optional). */
static int envelope_path(const char *url, uint64_t *project_id) {
    if (strncmp(url, "/api/", 5) != 0) return 0;
    const char *p = url + 5;
    uint64_t id = 0;
    if (*p < '0' || *p > '9') return 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (id > (UINT64_MAX - 9) / 10) return 0;
        id = id * 10 + (uint64_t)(*p - '0');
    }
    if (strcmp(p, "/envelope/") != 0 && strcmp(p, "/envelope") != 0) return 0;
    *project_id = id;
    return 1;
}

static void start_envelope(tm_srv_server *s, request *r, struct MHD_Connection *conn, uint64_t project_id) {
    atomic_fetch_add(&s->in_flight, 1);
    authenticate(s, r, conn, project_id);
    if (r->error_status) return;
    const char *length = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    const char *coding = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);
    tm_srv_encoding enc;
    if (tm_srv_encoding_parse(coding, &enc) != 0) {
        refuse(r, 415, "unsupported Content-Encoding: %s", coding);
        return;
    }
    if (length && enc == TM_SRV_ENC_IDENTITY && strtoull(length, NULL, 10) > s->cfg->limits.max_envelope_size) {
        refuse(r, 413, "envelope of %s bytes exceeds the limit of %llu bytes", length,
               (unsigned long long)s->cfg->limits.max_envelope_size);
        return;
    }
    tm_error err;
    if (tm_srv_decoder_new(enc, s->cfg->limits.max_envelope_size, &r->decoder, &err) != TM_OK)
        refuse(r, 500, "%s", err.message);
}

static void feed_body(request *r, const char *data, size_t len) {
    r->bytes_in += len;
    if (r->error_status) return; /* drained */
    tm_error err;
    if (tm_srv_decoder_feed(r->decoder, data, len, &r->body, &err) != TM_OK) {
        refuse(r, err.code == TM_ERR_LIMIT ? 413 : err.code == TM_ERR_NOMEM ? 503 : 400,
               "request body: %s (at encoded byte %llu)", err.message, (unsigned long long)err.offset);
        tm_srv_buf_release(&r->body);
    }
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

static enum MHD_Result finish_envelope(tm_srv_server *s, request *r, struct MHD_Connection *conn) {
    tm_error err;
    if (!r->error_status && tm_srv_decoder_finish(r->decoder, &r->body, &err) != TM_OK)
        refuse(r, err.code == TM_ERR_LIMIT ? 413 : 400, "request body: %s", err.message);
    if (r->error_status) return send_error(s, r, conn, r->error_status, r->error);

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
        return send_error(s, r, conn, st == TM_ERR_NOMEM ? 503 : 400, detail);
    }
    char why[1200];
    if (p.forward.len && forward_upstream(s, r, &p.forward, why, sizeof why) != 0) {
        tm_srv_processed_release(&p);
        return send_error(s, r, conn, 503, why);
    }
    if ((st = hand_over(s, &p, &err)) != TM_OK) {
        tm_srv_processed_release(&p);
        snprintf(why, sizeof why, "could not hand the envelope over: %s", err.message);
        return send_error(s, r, conn, st == TM_ERR_LIMIT ? 413 : 503, why);
    }
    unsigned status = p.http_status;
    uint32_t retry = p.retry_after_s;
    tm_srv_metrics_request(s->metrics, status, r->bytes_in, seconds_since(&r->start));
    enum MHD_Result ret;
    if (status == 429)
        ret = send_json_field(conn, status, "detail", "rate limited", strlen("rate limited"), retry);
    else if (p.event_id.ptr)
        ret = send_json_field(conn, status, "id", p.event_id.ptr, p.event_id.len, 0);
    else
        ret = send_body(conn, status, "application/json", "{}", 2, 0);
    tm_srv_processed_release(&p);
    return ret;
}

static enum MHD_Result send_metrics(tm_srv_server *s, request *r, struct MHD_Connection *conn) {
    tm_srv_gauges g = {.requests_in_flight = (uint64_t)atomic_load(&s->in_flight),
                       .kafka_queue_depth = s->kafka ? tm_srv_kafka_queue_depth(s->kafka) : 0,
                       .store_backlog = tm_srv_store_backlog(s->store),
                       .spooled = s->kafka ? tm_srv_store_spool_count(s->store) : 0,
                       .chunks_duplicate = tm_srv_store_duplicates(s->store)};
    tm_srv_buf out = {0};
    if (tm_srv_metrics_render(s->metrics, &g, &out) != 0) {
        tm_srv_buf_release(&out);
        return send_error(s, r, conn, 500, "out of memory");
    }
    tm_srv_metrics_request(s->metrics, 200, 0, seconds_since(&r->start));
    enum MHD_Result ret = send_body(conn, 200, "text/plain; version=0.0.4", out.data, out.len, 0);
    tm_srv_buf_release(&out);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size,
                                  void **con_cls) {
    (void)version;
    tm_srv_server *s = cls;
    request *r = *con_cls;
    if (!r) {
        r = calloc(1, sizeof *r);
        if (!r) return MHD_NO;
        clock_gettime(CLOCK_MONOTONIC, &r->start);
        *con_cls = r;
        uint64_t project_id;
        int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
        if (strcmp(url, "/healthz") == 0) {
            r->route = get ? ROUTE_HEALTH : ROUTE_BAD_METHOD;
        } else if (strcmp(url, "/metrics") == 0) {
            r->route = get ? ROUTE_METRICS : ROUTE_BAD_METHOD;
        } else if (envelope_path(url, &project_id)) {
            r->route = strcmp(method, "POST") == 0 ? ROUTE_ENVELOPE : ROUTE_BAD_METHOD;
            if (r->route == ROUTE_ENVELOPE) start_envelope(s, r, conn, project_id);
        } else {
            r->route = ROUTE_NOT_FOUND;
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        if (r->route == ROUTE_ENVELOPE) feed_body(r, upload_data, *upload_data_size);
        else r->bytes_in += *upload_data_size;
        *upload_data_size = 0;
        return MHD_YES;
    }
    switch (r->route) {
    case ROUTE_ENVELOPE:
        return finish_envelope(s, r, conn);
    case ROUTE_HEALTH:
        tm_srv_metrics_request(s->metrics, 200, 0, seconds_since(&r->start));
        return send_body(conn, 200, "text/plain", "ok\n", 3, 0);
    case ROUTE_METRICS:
        return send_metrics(s, r, conn);
    case ROUTE_BAD_METHOD:
        return send_error(s, r, conn, 405, "method not allowed");
    case ROUTE_NOT_FOUND:
        break;
    }
    return send_error(s, r, conn, 404, "not found: the envelope endpoint is POST /api/<project_id>/envelope/");
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)conn;
    (void)toe;
    tm_srv_server *s = cls;
    request *r = *con_cls;
    if (!r) return;
    if (r->route == ROUTE_ENVELOPE) atomic_fetch_sub(&s->in_flight, 1);
    tm_srv_decoder_free(r->decoder);
    tm_srv_buf_release(&r->body);
    free(r);
    *con_cls = NULL;
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
    s->metrics = tm_srv_metrics_new();
    s->ratelimit = tm_srv_ratelimit_new(cfg);
    if (!s->metrics || !s->ratelimit) {
        st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
        goto fail;
    }
    if ((st = tm_srv_store_open(cfg->store_path, &s->store, err)) != TM_OK) goto fail;
    if (cfg->kafka.bootstrap_servers && (st = tm_srv_kafka_new(cfg, s->store, &s->kafka, err)) != TM_OK) goto fail;
    if (cfg->upstream) curl_global_init(CURL_GLOBAL_DEFAULT);
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ITC |
                     MHD_USE_POLL | (ipv6 ? MHD_USE_IPv6 : 0);
    s->daemon = MHD_start_daemon(flags, cfg->listen_port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR,
                                 (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)cfg->limits.max_connections,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)cfg->limits.request_timeout_s,
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

void tm_srv_server_stop(tm_srv_server *s) {
    if (!s) return;
    if (s->daemon) {
        MHD_socket listener = MHD_quiesce_daemon(s->daemon);
        if (listener != MHD_INVALID_SOCKET) close(listener);
        /* requests in flight finish and get their answer */
        for (unsigned waited = 0; atomic_load(&s->in_flight) > 0 && waited < s->cfg->limits.request_timeout_s * 100;
             waited++)
            usleep(10000);
        MHD_stop_daemon(s->daemon);
    }
    tm_srv_kafka_free(s->kafka);
    tm_srv_store_close(s->store);
    tm_srv_ratelimit_free(s->ratelimit);
    tm_srv_metrics_free(s->metrics);
    if (s->cfg->upstream) curl_global_cleanup();
    free(s);
}
