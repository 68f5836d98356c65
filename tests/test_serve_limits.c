/*
 * test_serve_limits.c — `tracemill serve` under attack and at shutdown, as
 * a process on 127.0.0.1: slow and unauthenticated clients, header and body
 * deadlines, the connection caps (503), refusals decided from the headers
 * before the body, the envelope header's dsn, conflicting Content-Length,
 * canonical project ids, JSON answers to oversized request heads,
 * concurrent decompression bombs against the
 * decoded-bytes budget (peak RSS of the server), the drain on SIGTERM with
 * keep-alive clients posting throughout, and the access log.
 *
 * Every wait is bounded; every client stops by itself.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "tserve.h"
#include "tutil.h"

#define KEY "e12d836b15bb49d7bbf99e64295d995b"
#define AUTH "X-Sentry-Auth: Sentry sentry_key=" KEY ", sentry_version=7"

static const char *projects = "projects:\n  - id: 42\n    public_keys: [" KEY "]\n"
                              "  - id: 43\n    public_keys: [0123456789abcdef0123456789abcdef]\n";

static ts_server start(const char *extra) {
    char *dir = ts_temp_dir("tm_limits");
    char *yaml = ts_fmt("%s%s", projects, extra ? extra : "");
    ts_server s = ts_server_start(dir, 0, yaml);
    free(yaml);
    free(dir);
    return s;
}

/* A plain JSON chunk envelope whose chunk_id is made from seq. */
static char *json_envelope(unsigned seq, const char *envelope_header) {
    return ts_fmt("%s\n{\"type\":\"profile_chunk\"}\n{\"chunk_id\":\"%08x%024x\",\"profiler_id\":"
                  "\"11111111111111111111111111111111\",\"platform\":\"python\",\"version\":\"2\",\"profile\":{"
                  "\"frames\":[{\"function\":\"main\"}],\"stacks\":[[0]],\"samples\":[{\"stack_id\":0,"
                  "\"thread_id\":\"1\",\"timestamp\":1700000000.25}]}}\n",
                  envelope_header, seq, 0xbeefu);
}

/* ---- raw sockets ---- */

static void send_all(int fd, const char *s) {
    size_t n = strlen(s);
    cr_assert_eq(send(fd, s, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* ---- HTTP with libcurl ---- */

typedef struct reply {
    long status;
    tu_membuf body, headers;
    double seconds;
} reply;

static size_t collect(char *p, size_t size, size_t n, void *ctx) {
    return tu_membuf_write(ctx, p, size * n) ? 0 : size * n;
}

static reply call(CURL *c, int port, const char *method, const char *path, const char *const *headers,
                  const void *body, size_t len) {
    reply r = {0};
    int own = !c;
    if (own) c = curl_easy_init();
    char *url = ts_fmt("http://127.0.0.1:%d%s", port, path);
    struct curl_slist *h = curl_slist_append(NULL, "Expect:");
    for (size_t i = 0; headers && headers[i]; i++) h = curl_slist_append(h, headers[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? len : 0));
    if (!body) curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    double t0 = ts_now_s();
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    r.seconds = ts_now_s() - t0;
    tu_membuf_write(&r.body, "", 1);
    tu_membuf_write(&r.headers, "", 1);
    curl_slist_free_all(h);
    if (own) curl_easy_cleanup(c);
    free(url);
    return r;
}

static void reply_free(reply *r) {
    tu_membuf_free(&r->body);
    tu_membuf_free(&r->headers);
}

static const char *const auth[] = {AUTH, NULL};

TestSuite(serve_limits);

/* ---- item 1: budgets of connections and requests ---- */

#define SLOW_CLIENTS 260

typedef struct slow_attack {
    int port;
    int fds[SLOW_CLIENTS];
    atomic_int unauthorized; /* clients answered 401 */
    atomic_int stop;
} slow_attack;

/* 260 clients: a POST header with an unknown key, then 1 body byte a second. */
static void *attack(void *arg) {
    slow_attack *a = arg;
    const char *head = "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n"
                       "X-Sentry-Auth: Sentry sentry_key=ffffffffffffffffffffffffffffffff\r\n"
                       "Content-Length: 100000\r\n\r\n";
    for (int i = 0; i < SLOW_CLIENTS; i++) {
        a->fds[i] = ts_dial(a->port);
        send_all(a->fds[i], head);
    }
    int answered[SLOW_CLIENTS] = {0};
    for (int second = 0; second < 4 && !atomic_load(&a->stop); second++) {
        for (int i = 0; i < SLOW_CLIENTS; i++) {
            if (answered[i]) continue;
            char buf[512];
            ssize_t n = recv(a->fds[i], buf, sizeof buf - 1, MSG_DONTWAIT);
            if (n > 0) {
                buf[n] = 0;
                answered[i] = 1;
                if (strstr(buf, "HTTP/1.1 401") && strstr(buf, "{\"detail\":")) atomic_fetch_add(&a->unauthorized, 1);
                continue;
            }
            (void)send(a->fds[i], "x", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        usleep(1000000);
    }
    for (int i = 0; i < SLOW_CLIENTS; i++) close(a->fds[i]);
    return NULL;
}

Test(serve_limits, slow_unauthenticated_clients_do_not_starve_the_others) {
    ts_server s = start(NULL);
    slow_attack a = {.port = s.port};
    pthread_t th;
    pthread_create(&th, NULL, attack, &a);
    usleep(500000); /* the attack is on */
    double worst = 0;
    for (unsigned i = 0; i < 10; i++) {
        reply r = call(NULL, s.port, "GET", "/healthz", NULL, NULL, 0);
        cr_assert_eq(r.status, 200, "healthz %u under attack: %ld %s", i, r.status, r.body.data);
        if (r.seconds > worst) worst = r.seconds;
        reply_free(&r);
        char *env = json_envelope(i, "{}");
        r = call(NULL, s.port, "POST", "/api/42/envelope/", auth, env, strlen(env));
        cr_assert_eq(r.status, 200, "post %u under attack: %ld %s", i, r.status, r.body.data);
        if (r.seconds > worst) worst = r.seconds;
        reply_free(&r);
        free(env);
        usleep(100000);
    }
    atomic_store(&a.stop, 1);
    pthread_join(th, NULL);
    fprintf(stderr, "serve_limits: worst latency under %d slow clients: %.1f ms; %d answered 401\n", SLOW_CLIENTS,
            worst * 1e3, atomic_load(&a.unauthorized));
    cr_assert(worst < 2.0, "a request took %.3f s under attack", worst);
    cr_assert(atomic_load(&a.unauthorized) >= SLOW_CLIENTS - 5, "only %d of %d slow clients got 401 at their headers",
              atomic_load(&a.unauthorized), SLOW_CLIENTS);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 10);
    ts_server_free(&s);
}

Test(serve_limits, slow_headers_and_slow_bodies_are_cut) {
    char *log_dir = ts_temp_dir("tm_limits_log"), *log_path = ts_fmt("%s/access.log", log_dir);
    char *yaml = ts_fmt("limits: {header_timeout: 1, min_body_rate: 1KiB}\naccess_log: {format: text, path: %s}\n",
                        log_path);
    ts_server s = start(yaml);
    free(yaml);
    /* headers a byte at a time: cut at header_timeout, not at the 30 s idle timeout */
    int fd = ts_dial(s.port);
    const char *head = "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n";
    double t0 = ts_now_s();
    int closed = 0;
    for (size_t i = 0; head[i] && !closed && ts_now_s() - t0 < 5; i++) {
        if (send(fd, head + i, 1, MSG_NOSIGNAL) != 1) break;
        free(ts_read_answers(fd, 0, 0.3, &closed));
    }
    if (!closed) free(ts_read_answers(fd, 0, 5 - (ts_now_s() - t0), &closed));
    double took = ts_now_s() - t0;
    cr_assert(closed, "slow headers were not cut");
    cr_assert(took < 3.0, "slow headers cut after %.2f s (header_timeout 1 s)", took);
    close(fd);

    /* a body at 30 bytes/s with a valid key: below 1 KiB/s, cut after its first second */
    fd = ts_dial(s.port);
    send_all(fd, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nContent-Length: 100000\r\n\r\n");
    t0 = ts_now_s();
    closed = 0;
    while (!closed && ts_now_s() - t0 < 5) {
        if (send(fd, "{\"x\":1}  ", 9, MSG_NOSIGNAL) != 9) break;
        free(ts_read_answers(fd, 0, 0.3, &closed));
    }
    if (!closed) free(ts_read_answers(fd, 0, 1, &closed));
    took = ts_now_s() - t0;
    cr_assert(closed, "a slow body was not cut");
    cr_assert(took < 3.5, "a slow body cut after %.2f s", took);
    close(fd);

    /* the server still answers, and counted both as 408; the slow body's
     * line names its request */
    reply r = call(NULL, s.port, "GET", "/healthz", NULL, NULL, 0);
    cr_assert_eq(r.status, 200);
    reply_free(&r);
    r = call(NULL, s.port, "GET", "/metrics", NULL, NULL, 0);
    cr_assert(strstr(r.body.data, "tracemill_requests_total{status=\"408\"} 2\n"), "%s", r.body.data);
    reply_free(&r);
    char *log = tu_read_file(log_path, NULL);
    cr_assert_not_null(log);
    cr_assert(strstr(log, " POST \"/api/42/envelope/\" project=42 status=408 ") &&
                  strstr(log, "outcome=\"body slower than min_body_rate\""),
              "%s", log);
    cr_assert(strstr(log, " - \"-\" project=- status=408 ") && strstr(log, "no complete request headers"), "%s",
              log);
    free(log);
    ts_server_free(&s);
    char *rm = ts_fmt("rm -rf '%s'", log_dir);
    cr_assert_eq(system(rm), 0);
    free(rm), free(log_path), free(log_dir);
}

static void expect_503_json(int port, const char *why) {
    reply r = call(NULL, port, "GET", "/healthz", NULL, NULL, 0);
    cr_assert_eq(r.status, 503, "%ld %s", r.status, r.body.data);
    cr_assert(strstr(r.body.data, "{\"detail\":\"too many connections"), "%s", r.body.data);
    cr_assert(strstr(r.body.data, why), "%s", r.body.data);
    cr_assert(strstr(r.headers.data, "Content-Type: application/json"), "%s", r.headers.data);
    reply_free(&r);
}

/* Idle connections fill a cap; the next one is answered 503 (JSON). */
static void fill_and_probe(int port, int n, const char *why) {
    int fds[8];
    for (int i = 0; i < n; i++) fds[i] = ts_dial(port);
    usleep(200000); /* the server has registered them */
    expect_503_json(port, why);
    for (int i = 0; i < n; i++) close(fds[i]);
    reply r = {0};
    for (int tries = 0; tries < 50 && r.status != 200; tries++) {
        reply_free(&r);
        usleep(50000);
        r = call(NULL, port, "GET", "/healthz", NULL, NULL, 0);
    }
    cr_assert_eq(r.status, 200, "the caps did not free up: %ld %s", r.status, r.body.data);
    reply_free(&r);
}

Test(serve_limits, connection_caps_answer_503) {
    ts_server s = start("limits: {max_connections: 4, max_connections_per_ip: 100}\n");
    fill_and_probe(s.port, 4, "max_connections");
    ts_server_free(&s);
    s = start("limits: {max_connections: 100, max_connections_per_ip: 3}\n");
    fill_and_probe(s.port, 3, "max_connections_per_ip");
    ts_server_free(&s);
}

/* Answers decided from the headers come before any body byte is sent. */
static char *answer_without_body(int port, const char *request_head) {
    int fd = ts_dial(port);
    send_all(fd, request_head);
    int closed;
    char *got = ts_read_answers(fd, 0, 2.0, &closed);
    cr_assert(closed, "the server waited for the body: %s", got);
    close(fd);
    return got;
}

Test(serve_limits, headers_decide_before_the_body) {
    ts_server s = start("limits: {max_envelope_size: 1MiB}\n");
    char *got = answer_without_body(s.port, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n"
                                            "X-Sentry-Auth: Sentry sentry_key=ffffffffffffffffffffffffffffffff\r\n"
                                            "Content-Length: 100000\r\n\r\n");
    cr_assert(strncmp(got, "HTTP/1.1 401", 12) == 0 && strstr(got, "{\"detail\":\"unknown public key\"}"), "%s", got);
    free(got);
    got = answer_without_body(s.port, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n"
                                      "Content-Encoding: gzip\r\nContent-Length: 2000000\r\n\r\n");
    cr_assert(strncmp(got, "HTTP/1.1 413", 12) == 0 && strstr(got, "{\"detail\":\"envelope of 2000000 bytes"), "%s",
              got);
    free(got);
    got = answer_without_body(s.port, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n"
                                      "Content-Length: 30\r\nContent-Length: 31\r\n\r\n");
    cr_assert(strncmp(got, "HTTP/1.1 400", 12) == 0 && strstr(got, "conflicting Content-Length"), "%s", got);
    free(got);
    got = answer_without_body(s.port, "POST /api/042/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n"
                                      "Content-Length: 30\r\n\r\n");
    cr_assert(strncmp(got, "HTTP/1.1 400", 12) == 0 && strstr(got, "without leading zeros"), "%s", got);
    free(got);
    /* a header line past 64 KiB is refused there, while the body is still arriving */
    int fd = ts_dial(s.port);
    send_all(fd, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nContent-Length: 1000000\r\n\r\n");
    char *line = malloc(100000);
    memset(line, 'a', 100000);
    line[0] = '{';
    ssize_t sent = send(fd, line, 100000, MSG_NOSIGNAL);
    cr_assert(sent > 65536);
    int closed;
    got = ts_read_answers(fd, 0, 2.0, &closed);
    cr_assert(strncmp(got, "HTTP/1.1 413", 12) == 0 && strstr(got, "header line longer than 65536 bytes"), "%s", got);
    free(got), free(line);
    close(fd);
    ts_server_free(&s);
}

/* The answer to a request head of `size` bytes, made of the request line
 * and padding header fields of `field` bytes each. */
static char *answer_to_head(int port, const char *request_line, size_t size, size_t field) {
    tu_membuf head = {0};
    tu_membuf_write(&head, request_line, strlen(request_line));
    tu_membuf_write(&head, "Host: x\r\n", 9);
    char *line = malloc(field + 1);
    for (unsigned i = 0; head.len + field < size; i++) {
        int n = snprintf(line, field + 1, "X-Pad-%u: ", i);
        memset(line + n, 'p', field - (size_t)n - 2);
        memcpy(line + field - 2, "\r\n", 2);
        tu_membuf_write(&head, line, field);
    }
    tu_membuf_write(&head, "\r\n", 3); /* with its NUL */
    char *got = answer_without_body(port, (const char *)head.data);
    free(line);
    tu_membuf_free(&head);
    return got;
}

static void assert_json_answer(const char *got, const char *status, const char *detail) {
    cr_assert(strncmp(got, status, strlen(status)) == 0, "%s: %.300s", status, got);
    cr_assert(strstr(got, "\r\nContent-Type: application/json\r\n"), "not JSON: %.300s", got);
    cr_assert(strstr(got, "\r\n\r\n{\"detail\":\"") && strstr(got, detail), "%s: %.300s", detail, got);
}

/* Heads over the limits get JSON answers (414, 431), as do heads that are
 * not valid HTTP. */
Test(serve_limits, oversized_heads_get_json_errors) {
    ts_server s = start(NULL);
    char *target = malloc(20001);
    memset(target, 'a', 20000);
    target[0] = '/';
    target[20000] = 0;
    char *request = ts_fmt("GET %s HTTP/1.1\r\nHost: x\r\n\r\n", target);
    char *got = answer_without_body(s.port, request);
    assert_json_answer(got, "HTTP/1.1 414", "request target of 20000 bytes is longer than 8192 bytes");
    free(got), free(request);
    /* the query counts: it is part of the target as sent */
    request = ts_fmt("POST /api/42/envelope/?sentry_key=%s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n",
                     target + 1);
    got = answer_without_body(s.port, request);
    assert_json_answer(got, "HTTP/1.1 414", "longer than 8192 bytes");
    free(got), free(request), free(target);
    /* one large header field, then many small ones */
    got = answer_to_head(s.port, "GET /healthz HTTP/1.1\r\n", 150 * 1024, 150 * 1024 - 100);
    assert_json_answer(got, "HTTP/1.1 431", "is larger than 65536 bytes");
    free(got);
    got = answer_to_head(s.port, "POST /api/42/envelope/ HTTP/1.1\r\n", 20000, 20);
    assert_json_answer(got, "HTTP/1.1 431", "header fields, more than 256");
    free(got);
    /* a head within the limits is served */
    got = answer_to_head(s.port, "GET /healthz HTTP/1.1\r\nConnection: close\r\n", 60000, 1000);
    cr_assert(strncmp(got, "HTTP/1.1 200", 12) == 0 && strstr(got, "\r\n\r\nok\n"), "%.300s", got);
    free(got);
    /* a body over max_envelope_size, as declared */
    got = answer_without_body(s.port, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\n"
                                      "Content-Length: 999999999999\r\n\r\n");
    assert_json_answer(got, "HTTP/1.1 413", "exceeds the limit of 209715200 bytes");
    free(got);
    /* syntax errors get JSON too (test_http.c has the rest) */
    got = answer_without_body(s.port, "GET /healthz\r\nHost: x\r\n\r\n");
    assert_json_answer(got, "HTTP/1.1 400", "the request line is not METHOD TARGET HTTP/VERSION");
    free(got);
    got = answer_without_body(s.port, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\nContent-Length: x1\r\n\r\n");
    assert_json_answer(got, "HTTP/1.1 400", "Content-Length is not a number");
    free(got);
    reply r = call(NULL, s.port, "GET", "/healthz", NULL, NULL, 0);
    cr_assert_eq(r.status, 200);
    reply_free(&r);
    ts_server_free(&s);
}

Test(serve_limits, sentry_auth_scheme_and_the_envelope_dsn) {
    ts_server s = start(NULL);
    const char *const lower[] = {"X-Sentry-Auth: sentry sentry_key=" KEY, NULL};
    char *env = json_envelope(1, "{}");
    reply r = call(NULL, s.port, "POST", "/api/42/envelope/", lower, env, strlen(env));
    cr_assert_eq(r.status, 200, "the Sentry scheme in lower case: %s", r.body.data);
    reply_free(&r);
    free(env);
    /* no key in the request: the envelope header's dsn authenticates */
    env = json_envelope(2, "{\"dsn\":\"https://" KEY "@o1.ingest.example.com/42\"}");
    r = call(NULL, s.port, "POST", "/api/42/envelope/", NULL, env, strlen(env));
    cr_assert_eq(r.status, 200, "dsn: %s", r.body.data);
    reply_free(&r);
    free(env);
    struct {
        const char *header;
        long status;
        const char *detail;
    } refused[] = {
        {"{\"dsn\":\"https://ffffffffffffffffffffffffffffffff@h/42\"}", 401, "unknown public key"},
        {"{\"dsn\":\"https://" KEY "@h/43\"}", 400, "is for project 43"},
        {"{\"dsn\":\"not a dsn\"}", 401, "dsn is not"},
        {"{}", 401, "missing authorization"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        env = json_envelope(10 + (unsigned)i, refused[i].header);
        r = call(NULL, s.port, "POST", "/api/42/envelope/", NULL, env, strlen(env));
        cr_assert_eq(r.status, refused[i].status, "%s: %ld %s", refused[i].header, r.status, r.body.data);
        cr_assert(strstr(r.body.data, refused[i].detail), "%s: %s", refused[i].header, r.body.data);
        reply_free(&r);
        free(env);
    }
    /* a key in the request and another one in the dsn */
    env = json_envelope(20, "{\"dsn\":\"https://0123456789abcdef0123456789abcdef@h/42\"}");
    r = call(NULL, s.port, "POST", "/api/42/envelope/", auth, env, strlen(env));
    cr_assert_eq(r.status, 400, "%s", r.body.data);
    reply_free(&r);
    free(env);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 2);
    ts_server_free(&s);
}

/* ---- item 2: the decode budget ---- */

#define BOMB_BLOCK (64u << 20)

/* One gzip member of prefix followed by BOMB_BLOCK zero bytes. */
static void gzip_member(tu_membuf *out, const char *prefix, const char *zeros) {
    z_stream z = {0};
    cr_assert_eq(deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY), Z_OK);
    unsigned char buf[1 << 16];
    for (int step = 0; step < 2; step++) {
        z.next_in = step == 0 ? (Bytef *)prefix : (Bytef *)zeros;
        z.avail_in = step == 0 ? (uInt)strlen(prefix) : (uInt)BOMB_BLOCK;
        int flush = step == 1 ? Z_FINISH : Z_NO_FLUSH, rc;
        do {
            z.next_out = buf;
            z.avail_out = sizeof buf;
            rc = deflate(&z, flush);
            tu_membuf_write(out, buf, sizeof buf - z.avail_out);
        } while (z.avail_out == 0 || (flush == Z_FINISH && rc != Z_STREAM_END));
    }
    deflateEnd(&z);
}

/* gzip of prefix and blocks x 64 MiB of zeros, as concatenated members
 * (the server accepts them; a few MB on the wire). */
static tu_membuf repeat_bomb(const char *prefix, unsigned blocks) {
    char *zeros = calloc(1, BOMB_BLOCK);
    tu_membuf out = {0}, more = {0};
    gzip_member(&out, prefix, zeros);
    gzip_member(&more, "", zeros);
    for (unsigned b = 1; b < blocks; b++) tu_membuf_write(&out, more.data, more.len);
    tu_membuf_free(&more);
    free(zeros);
    return out;
}

typedef struct bomb_job {
    int port;
    const tu_membuf *bomb;
    long status;
    char detail[200];
} bomb_job;

static void *throw_bomb(void *arg) {
    bomb_job *j = arg;
    const char *const h[] = {AUTH, "Content-Encoding: gzip", NULL};
    reply r = call(NULL, j->port, "POST", "/api/42/envelope/", h, j->bomb->data, j->bomb->len);
    j->status = r.status;
    snprintf(j->detail, sizeof j->detail, "%s", r.body.data);
    reply_free(&r);
    return NULL;
}

static long peak_rss_kib(pid_t pid) {
    char *path = ts_fmt("/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    cr_assert(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) kib = strtol(line + 6, NULL, 10);
    fclose(f);
    free(path);
    return kib;
}

/* 8 bombs at once; their answers in jobs. */
static void eight_bombs(int port, const tu_membuf *bomb, bomb_job jobs[8]) {
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        jobs[i] = (bomb_job){.port = port, .bomb = bomb};
        pthread_create(&th[i], NULL, throw_bomb, &jobs[i]);
    }
    for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
}

Test(serve_limits, concurrent_bombs_stay_within_the_decoded_budget, .timeout = 120) {
    ts_server s = start(NULL); /* the default limits: 200 MiB per request, 512 MiB in flight */
    /* 1 GiB of zeros: no header line ends within 64 KiB */
    tu_membuf zeros = repeat_bomb("", 16);
    bomb_job jobs[8];
    eight_bombs(s.port, &zeros, jobs);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(jobs[i].status, 413, "bomb %d of zeros: %ld %s", i, jobs[i].status, jobs[i].detail);
    tu_membuf_free(&zeros);
    long after_zeros = peak_rss_kib(s.pid);
    /* a valid header and an item running to the next newline: 1 GiB of
     * zeros that look like a payload, stopped by the per-request cap or by
     * the server-wide budget */
    tu_membuf payload = repeat_bomb("{}\n{\"type\":\"profile_chunk\"}\n", 16);
    eight_bombs(s.port, &payload, jobs);
    int too_large = 0;
    for (int i = 0; i < 8; i++) {
        cr_assert(jobs[i].status == 413 || jobs[i].status == 503, "bomb %d: %ld %s", i, jobs[i].status,
                  jobs[i].detail);
        too_large += jobs[i].status == 413;
    }
    tu_membuf_free(&payload);
    long peak = peak_rss_kib(s.pid);
    fprintf(stderr, "serve_limits: server peak RSS %ld MiB after 8 zero bombs, %ld MiB after 8 payload bombs "
                    "(%d answered 413, the rest 503)\n", after_zeros / 1024, peak / 1024, too_large);
    cr_assert(after_zeros < 64 * 1024, "peak RSS %ld KiB after bombs refused at 64 KiB", after_zeros);
    cr_assert(peak < 1024 * 1024, "peak RSS %ld KiB", peak);
    reply r = call(NULL, s.port, "GET", "/healthz", NULL, NULL, 0);
    cr_assert_eq(r.status, 200);
    reply_free(&r);
    ts_server_free(&s);
}

/* ---- item 3: the drain ---- */

typedef struct poster {
    int port;
    unsigned first;
    unsigned acked[2000];
    unsigned n_acked, n_close;
} poster;

/* Keep-alive posts until the server stops answering. */
static void *post_until_refused(void *arg) {
    poster *p = arg;
    CURL *c = curl_easy_init();
    for (unsigned i = 0; i < 2000; i++) {
        char *env = json_envelope(p->first + i, "{}");
        reply r = call(c, p->port, "POST", "/api/42/envelope/", auth, env, strlen(env));
        free(env);
        if (r.status == 200) p->acked[p->n_acked++] = p->first + i;
        if (strcasestr(r.headers.data, "Connection: close")) p->n_close++;
        int over = r.status != 200;
        reply_free(&r);
        if (over) break;
    }
    curl_easy_cleanup(c);
    return NULL;
}

Test(serve_limits, sigterm_drains_keep_alive_clients, .timeout = 60) {
    ts_server s = start("limits: {shutdown_timeout: 5}\n");
    poster p[4];
    pthread_t th[4];
    for (unsigned t = 0; t < 4; t++) {
        p[t] = (poster){.port = s.port, .first = 1000 + t * 2000};
        pthread_create(&th[t], NULL, post_until_refused, &p[t]);
    }
    while (ts_count_rows(s.store, "select count(*) from chunks") < 20) usleep(20000);
    double t0 = ts_now_s();
    kill(s.pid, SIGTERM);
    int status;
    waitpid(s.pid, &status, 0);
    double took = ts_now_s() - t0;
    s.pid = 0;
    unsigned acked = 0, closes = 0;
    for (unsigned t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        acked += p[t].n_acked;
        closes += p[t].n_close;
    }
    fprintf(stderr, "serve_limits: drained in %.3f s, %u posts acknowledged, %u answers with Connection: close\n",
            took, acked, closes);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the drain must exit 0");
    cr_assert(took < 5.5, "the drain took %.2f s (shutdown_timeout 5 s)", took);
    for (unsigned t = 0; t < 4; t++)
        for (unsigned i = 0; i < p[t].n_acked; i++) {
            char *sql = ts_fmt("select count(*) from chunks where chunk_id = '%08x%024x'", p[t].acked[i], 0xbeefu);
            cr_assert_eq(ts_count_rows(s.store, sql), 1, "acknowledged chunk %u is not stored", p[t].acked[i]);
            free(sql);
        }
    ts_server_free(&s);
}

/* A kept-alive idle connection is closed at once, not after the idle timeout. */
Test(serve_limits, sigterm_closes_idle_connections_between_requests) {
    ts_server s = start(NULL);
    int fd = ts_dial(s.port);
    send_all(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    int closed;
    char *got = ts_read_answers(fd, 0, 0.5, &closed);
    cr_assert(strstr(got, "\r\n\r\nok\n") && !closed, "%s", got);
    free(got);
    double t0 = ts_now_s();
    kill(s.pid, SIGTERM);
    got = ts_read_answers(fd, 0, 5.0, &closed);
    cr_assert(closed && got[0] == 0, "an idle connection gets no answer, only its end: %s", got);
    free(got);
    int status;
    waitpid(s.pid, &status, 0);
    s.pid = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert(ts_now_s() - t0 < 2.0, "stopping with an idle connection took %.2f s", ts_now_s() - t0);
    close(fd);
    ts_server_free(&s);
}

/* A body still arriving when the drain's time is up is answered 503 (send
 * it again), and the server exits within shutdown_timeout, what follows the
 * wait included. */
Test(serve_limits, sigterm_answers_a_body_still_arriving_and_exits_in_time, .timeout = 30) {
    ts_server s = start("limits: {shutdown_timeout: 4}\n"); /* 0.4 s for what follows the wait */
    int fd = ts_dial(s.port);
    send_all(fd, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nContent-Length: 100000\r\n\r\n{}\n");
    int closed = 0;
    free(ts_read_answers(fd, 0, 0.3, &closed));
    cr_assert(!closed, "the request was refused before its body");
    double t0 = ts_now_s();
    kill(s.pid, SIGTERM);
    tu_membuf got = {0};
    while (!closed && ts_now_s() - t0 < 8) { /* 100 bytes a second, until the server answers or closes */
        if (send(fd, "          ", 10, MSG_NOSIGNAL) != 10) break;
        char *some = ts_read_answers(fd, 0, 0.1, &closed);
        tu_membuf_write(&got, some, strlen(some));
        free(some);
    }
    if (!closed) {
        char *rest = ts_read_answers(fd, 0, 1.0, &closed);
        tu_membuf_write(&got, rest, strlen(rest));
        free(rest);
    }
    tu_membuf_write(&got, "", 1);
    int status;
    waitpid(s.pid, &status, 0);
    double took = ts_now_s() - t0;
    s.pid = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the drain must exit 0");
    cr_assert(took < 4.0, "the drain took %.2f s (shutdown_timeout 4 s)", took);
    cr_assert(strstr((char *)got.data, "HTTP/1.1 503") && strstr((char *)got.data, "send it again"),
              "the cut request got: %s", (char *)got.data);
    tu_membuf_free(&got);
    close(fd);
    ts_server_free(&s);
}

/* A second SIGTERM cuts the drain's wait short: the request still in
 * flight is answered 503 and the server exits 0 at once, not at the end of
 * shutdown_timeout (the second signal did nothing). */
Test(serve_limits, a_second_sigterm_cuts_the_drain_short, .timeout = 60) {
    ts_server s = start("limits: {shutdown_timeout: 30}\n");
    int fd = ts_dial(s.port);
    send_all(fd, "POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nContent-Length: 100000\r\n\r\n{}\n");
    int closed = 0;
    free(ts_read_answers(fd, 0, 0.3, &closed));
    cr_assert(!closed, "the request was refused before its body");
    kill(s.pid, SIGTERM);
    char *got = ts_read_answers(fd, 0, 1.0, &closed); /* the drain waits for the body */
    int status;
    cr_assert_eq(waitpid(s.pid, &status, WNOHANG), 0, "the server did not wait for the request in flight");
    free(got);
    double t0 = ts_now_s();
    kill(s.pid, SIGTERM);
    got = ts_read_answers(fd, 0, 8.0, &closed);
    pid_t done = 0;
    while ((done = waitpid(s.pid, &status, WNOHANG)) == 0 && ts_now_s() - t0 < 10) usleep(20000);
    double took = ts_now_s() - t0;
    if (!done) kill(s.pid, SIGKILL), waitpid(s.pid, &status, 0);
    s.pid = 0;
    cr_assert(done, "a second SIGTERM did not stop the server within 10 s");
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the cut drain must exit 0");
    cr_assert(took < 5.0, "stopping after the second SIGTERM took %.2f s", took);
    cr_assert(strstr(got, "HTTP/1.1 503") && strstr(got, "send it again"), "the cut request got: %s", got);
    free(got);
    close(fd);
    ts_server_free(&s);
}

/* ---- item 4: the access log ---- */

Test(serve_limits, access_log_json_lines) {
    char *dir = ts_temp_dir("tm_limits");
    char *log = ts_fmt("%s/access.log", dir);
    char *yaml = ts_fmt("%saccess_log: {format: json, path: %s}\n", projects, log);
    ts_server s = ts_server_start(dir, 0, yaml);
    char *env = json_envelope(1, "{}");
    reply r = call(NULL, s.port, "POST", "/api/42/envelope/", auth, env, strlen(env));
    cr_assert_eq(r.status, 200);
    reply_free(&r);
    const char *const bad[] = {"X-Sentry-Auth: Sentry sentry_key=nope", NULL};
    r = call(NULL, s.port, "POST", "/api/42/envelope/", bad, env, strlen(env));
    cr_assert_eq(r.status, 401);
    reply_free(&r);
    cr_assert_eq(ts_server_stop(&s), 0);
    size_t len;
    char *text = tu_read_file(log, &len);
    cr_assert(text, "no access log at %s", log);
    char *second = strchr(text, '\n');
    cr_assert(second && strchr(second + 1, '\n') && !strchr(strchr(second + 1, '\n') + 1, '\n'), "two lines: %s",
              text);
    cr_assert(strstr(text, "\"client\":\"127.0.0.1\",\"method\":\"POST\",\"path\":\"/api/42/envelope/\","
                           "\"project\":42,\"status\":200,\"bytes\":"), "%s", text);
    cr_assert(strstr(text, "\"outcome\":\"accepted: 1 chunks, 0 outcomes\"}"), "%s", text);
    cr_assert(strstr(second, "\"project\":null,\"status\":401,"), "%s", second);
    cr_assert(strstr(second, "\"outcome\":\"unknown public key\"}"), "%s", second);
    cr_assert(strstr(text, "\"duration_ms\":") && strstr(text, "{\"time\":\"20"), "%s", text);
    free(text), free(env), free(yaml), free(log), free(dir);
    ts_server_free(&s);
}

Test(serve_limits, access_log_off) {
    char *dir = ts_temp_dir("tm_limits");
    char *log = ts_fmt("%s/access.log", dir);
    char *yaml = ts_fmt("%saccess_log: {format: off, path: %s}\n", projects, log);
    ts_server s = ts_server_start(dir, 0, yaml);
    reply r = call(NULL, s.port, "GET", "/healthz", NULL, NULL, 0);
    cr_assert_eq(r.status, 200);
    reply_free(&r);
    cr_assert_eq(ts_server_stop(&s), 0);
    cr_assert(access(log, F_OK) != 0, "access_log: off wrote %s", log);
    free(yaml), free(log), free(dir);
    ts_server_free(&s);
}
