/*
 * test_http.c — tracemill's own HTTP/1.1 layer (server/http_conn.c) as
 * `tracemill serve` runs it, over raw sockets on 127.0.0.1: every malformed
 * head gets its status with a JSON body, chunked bodies, Expect:
 * 100-continue (raw and with curl), pipelined requests, HTTP/1.0 and
 * keep-alive, HEAD; and the parser itself on heads cut at every byte.
 *
 * Every wait is bounded.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "server.h"
#include "tserve.h"
#include "tutil.h"

#define KEY "e12d836b15bb49d7bbf99e64295d995b"
#define AUTH "X-Sentry-Auth: Sentry sentry_key=" KEY ", sentry_version=7"
#define ENVELOPE_PATH "/api/42/envelope/"

TestSuite(http);

static ts_server start(void) {
    char *dir = ts_temp_dir("tm_http");
    ts_server s = ts_server_start(dir, 0, "projects:\n  - id: 42\n    public_keys: [" KEY "]\n");
    free(dir);
    return s;
}

/* A plain JSON chunk envelope with event id ...seq. */
static char *envelope(unsigned seq) {
    return ts_fmt("{\"event_id\":\"%032x\"}\n{\"type\":\"profile_chunk\"}\n{\"chunk_id\":\"%032x\",\"profiler_id\":"
                  "\"11111111111111111111111111111111\",\"platform\":\"python\",\"version\":\"2\",\"profile\":{"
                  "\"frames\":[{\"function\":\"main\"}],\"stacks\":[[0]],\"samples\":[{\"stack_id\":0,"
                  "\"thread_id\":\"1\",\"timestamp\":1700000000.25}]}}\n",
                  seq, 0xc0de0000u + seq);
}

static void send_bytes(int fd, const void *p, size_t n) {
    cr_assert_eq(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n, "send: %s", strerror(errno));
}

static void send_str(int fd, const char *s) { send_bytes(fd, s, strlen(s)); }

static size_t collect(char *p, size_t size, size_t n, void *ctx) {
    return tu_membuf_write(ctx, p, size * n) ? 0 : size * n;
}

/* The answer to raw bytes, read until the server closes (within 2 s). */
static char *exchange(int port, const void *bytes, size_t n) {
    int fd = ts_dial(port);
    send_bytes(fd, bytes, n);
    int closed;
    char *got = ts_read_answers(fd, 0, 2.0, &closed);
    cr_assert(closed, "the server did not close: %.300s", got);
    close(fd);
    return got;
}

static void assert_json_error(const char *got, unsigned status, const char *detail) {
    char line[16];
    snprintf(line, sizeof line, "HTTP/1.1 %u ", status);
    cr_assert(strncmp(got, line, strlen(line)) == 0, "want %u: %.400s", status, got);
    cr_assert(strstr(got, "\r\nContent-Type: application/json\r\n"), "not JSON: %.400s", got);
    cr_assert(strstr(got, "\r\nConnection: close\r\n"), "not closing: %.400s", got);
    const char *body = strstr(got, "\r\n\r\n");
    cr_assert(body && strncmp(body + 4, "{\"detail\":\"", 11) == 0 && strstr(body, detail), "want \"%s\": %.400s",
              detail, got);
}

/* What libmicrohttpd used to answer in HTML, and the rest of the parser's refusals. */
Test(http, malformed_heads_get_json_errors) {
    ts_server s = start();
    struct {
        const char *request;
        unsigned status;
        const char *detail;
    } cases[] = {
        {"GET /healthz\r\nHost: x\r\n\r\n", 400, "the request line is not METHOD TARGET HTTP/VERSION"},
        /* a wrong request line is answered without waiting for the rest of the head */
        {"GET /healthz\r\n", 400, "the request line is not METHOD TARGET HTTP/VERSION"},
        {"GET /healthz HTTP/3.0\r\nHost", 505, "HTTP/3.0"},
        {"GET  /healthz HTTP/1.1\r\n\r\n", 400, "the request line is not"},
        {"GET /healthz HTTP/1.1 x\r\n\r\n", 400, "does not end in HTTP/VERSION"},
        {"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n", 505, "HTTP version HTTP/2.0 is not supported"},
        {"GET /healthz HTTP/0.9\r\n\r\n", 505, "HTTP/0.9"},
        {"GET /healthz HTTP/1.1\r\nHost: x\r\nNo colon here\r\n\r\n", 400, "header line 2 has no colon"},
        {"GET /healthz HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", 400, "header line 2 starts with whitespace"},
        {"GET /healthz HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "header line 1 has an invalid field name"},
        {"GET /healthz HTTP/1.1\r\n: x\r\n\r\n", 400, "header line 1 has an empty field name"},
        {"GET /healthz HTTP/1.1\r\nX: a\x01z\r\n\r\n", 400, "header line 1 has a control character"},
        {"POST " ENVELOPE_PATH " HTTP/1.1\r\nHost: x\r\nContent-Length: x1\r\n\r\n", 400,
         "Content-Length is not a number: \\\"x1\\\""},
        {"POST " ENVELOPE_PATH " HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length is not a number"},
        {"POST " ENVELOPE_PATH " HTTP/1.1\r\nContent-Length: 18446744073709551616\r\n\r\n", 413,
         "Content-Length 18446744073709551616 is past 64 bits"},
        {"POST " ENVELOPE_PATH " HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", 400,
         "conflicting Content-Length headers"},
        {"POST " ENVELOPE_PATH " HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", 400,
         "both Content-Length and Transfer-Encoding"},
        {"POST " ENVELOPE_PATH " HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
         "unsupported Transfer-Encoding"},
        {"POST " ENVELOPE_PATH " HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 3\r\n\r\n", 417, "unsupported Expect"},
        {"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 400, "not an HTTP request"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = exchange(s.port, cases[i].request, strlen(cases[i].request));
        assert_json_error(got, cases[i].status, cases[i].detail);
        free(got);
    }
    /* a head past any limit, in one header field and then as a request line that never ends */
    size_t big = 300 * 1024;
    char *head = malloc(big);
    memset(head, 'a', big);
    memcpy(head, "GET /healthz HTTP/1.1\r\nX-Big: ", 30);
    char *got = exchange(s.port, head, big);
    assert_json_error(got, 431, "request head is larger than 65536 bytes");
    free(got);
    memset(head, 'a', big);
    memcpy(head, "GET /", 5);
    got = exchange(s.port, head, big);
    assert_json_error(got, 414, "request line longer than 8240 bytes (a request target may have 8192)");
    free(got), free(head);
    /* the server still serves */
    int fd = ts_dial(s.port);
    send_str(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
    int closed;
    got = ts_read_answers(fd, 1, 2.0, &closed);
    cr_assert(strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0 && strstr(got, "\r\n\r\nok\n"), "%s", got);
    free(got);
    close(fd);
    ts_server_free(&s);
}

/* Broken chunked framing is answered 400 while the body arrives. */
Test(http, broken_chunked_framing_gets_json_400) {
    ts_server s = start();
    const char *bodies[][2] = {
        {"zz\r\n", "a chunk size is not hexadecimal"},
        {"5\r\nabcdeXX", "not followed by CRLF"},
        {"5x\r\n", "a chunk-size line has an invalid byte"},
        {"3\rX", "ends in CR without LF"},
        {"11111111111111111\r\n", "past 60 bits"},
    };
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        char *req = ts_fmt("POST " ENVELOPE_PATH " HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nTransfer-Encoding: chunked\r\n"
                           "\r\n%s",
                           bodies[i][0]);
        char *got = exchange(s.port, req, strlen(req));
        assert_json_error(got, 400, bodies[i][1]);
        cr_assert(strstr(got, "chunked body: "), "%s", got);
        free(got), free(req);
    }
    ts_server_free(&s);
}

/* A chunked envelope in pieces of every size, with extensions and trailers. */
Test(http, chunked_uploads) {
    ts_server s = start();
    for (unsigned piece = 1; piece <= 64; piece *= 4) {
        char *env = envelope(piece);
        size_t n = strlen(env);
        int fd = ts_dial(s.port);
        send_str(fd, "POST " ENVELOPE_PATH " HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nTransfer-Encoding: chunked\r\n\r\n");
        for (size_t at = 0; at < n; at += piece) {
            size_t k = n - at < piece ? n - at : piece;
            char *size = ts_fmt(at == 0 ? "%zx;name=value\r\n" : "%zX\r\n", k);
            send_str(fd, size);
            send_bytes(fd, env + at, k);
            send_str(fd, "\r\n");
            free(size);
        }
        send_str(fd, "0\r\nX-Trailer: yes\r\n\r\n");
        int closed;
        char *got = ts_read_answers(fd, 1, 5.0, &closed);
        char *want = ts_fmt("{\"id\":\"%032x\"}", piece);
        cr_assert(strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0 && strstr(got, want), "piece %u: %s", piece, got);
        cr_assert(!strstr(got, "Connection: close"), "%s", got);
        free(want), free(got), free(env);
        /* the connection stays for the next request */
        send_str(fd, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        got = ts_read_answers(fd, 1, 2.0, &closed);
        cr_assert(strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", got);
        free(got);
        close(fd);
    }
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 4);
    ts_server_free(&s);
}

/* 100 Continue comes once the headers are accepted; a refusal comes at once instead. */
Test(http, expect_100_continue) {
    ts_server s = start();
    char *env = envelope(1);
    char *head = ts_fmt("POST " ENVELOPE_PATH " HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nExpect: 100-continue\r\n"
                        "Content-Length: %zu\r\n\r\n",
                        strlen(env));
    int fd = ts_dial(s.port);
    send_str(fd, head);
    int closed;
    char *got = ts_read_answers(fd, 1, 2.0, &closed);
    cr_assert_str_eq(got, "HTTP/1.1 100 Continue\r\n\r\n");
    free(got);
    send_str(fd, env);
    got = ts_read_answers(fd, 1, 5.0, &closed);
    cr_assert(strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0 && strstr(got, "{\"id\":"), "%s", got);
    free(got), free(head);
    close(fd);
    /* an unknown key: 401 without a 100 first */
    fd = ts_dial(s.port);
    send_str(fd, "POST " ENVELOPE_PATH " HTTP/1.1\r\nHost: x\r\nX-Sentry-Auth: Sentry sentry_key=ffff\r\n"
                 "Expect: 100-continue\r\nContent-Length: 100\r\n\r\n");
    got = ts_read_answers(fd, 1, 2.0, &closed);
    assert_json_error(got, 401, "unknown public key");
    free(got);
    close(fd);

    /* curl with a large body, gzip, and its own Expect: no wait for its 1 s expect timeout */
    size_t big = 4u << 20;
    char *body = malloc(big + strlen(env));
    size_t len = (size_t)sprintf(body, "{\"event_id\":\"%032x\"}\n{\"type\":\"attachment\",\"length\":%zu}\n", 7u,
                                 big - 100);
    memset(body + len, 'x', big - 100);
    len += big - 100;
    body[len++] = '\n';
    CURL *c = curl_easy_init();
    tu_membuf out = {0};
    char *url = ts_fmt("http://127.0.0.1:%d" ENVELOPE_PATH, s.port);
    struct curl_slist *h = curl_slist_append(NULL, AUTH);
    h = curl_slist_append(h, "Expect: 100-continue");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_EXPECT_100_TIMEOUT_MS, 3000L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    double t0 = ts_now_s();
    cr_assert_eq(curl_easy_perform(c), CURLE_OK);
    double took = ts_now_s() - t0;
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    tu_membuf_write(&out, "", 1);
    cr_assert_eq(status, 200, "%s", out.data);
    cr_assert(took < 2.5, "curl waited for 100 Continue: %.2f s", took);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    tu_membuf_free(&out);
    free(url), free(body), free(env);
    ts_server_free(&s);
}

/* Requests sent back to back on one connection are answered in order. */
Test(http, pipelined_requests) {
    ts_server s = start();
    char *env = envelope(9);
    char *reqs = ts_fmt("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                        "POST " ENVELOPE_PATH " HTTP/1.1\r\nHost: x\r\n" AUTH "\r\nContent-Length: %zu\r\n\r\n%s"
                        "\r\n" /* an empty line between requests is skipped */
                        "GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n"
                        "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                        "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"
                        "GET /healthz HTTP/1.1\r\n\r\n",
                        strlen(env), env);
    int fd = ts_dial(s.port);
    send_str(fd, reqs);
    int closed;
    char *got = ts_read_answers(fd, 0, 3.0, &closed);
    cr_assert(closed, "Connection: close was not honoured: %s", got);
    const char *p = got;
    const char *want[] = {"HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\n", "HTTP/1.1 404 Not Found\r\n",
                          "HTTP/1.1 200 OK\r\n", "HTTP/1.1 200 OK\r\n"};
    for (size_t i = 0; i < 5; i++) {
        cr_assert(strncmp(p, want[i], strlen(want[i])) == 0, "answer %zu: %s", i, p);
        size_t n = ts_answer_len(p, strlen(p));
        if (i == 3) { /* HEAD: the length of the body it does not send */
            const char *end = strstr(p, "\r\n\r\n");
            cr_assert(strstr(p, "Content-Length: 3\r\n") && end, "%s", p);
            n = (size_t)(end - p) + 4;
        }
        if (i == 1) cr_assert(strstr(p, "{\"id\":\"00000000000000000000000000000009\"}"), "%s", p);
        cr_assert(n, "answer %zu incomplete: %s", i, p);
        p += n;
    }
    cr_assert_str_eq(p, "", "answered past Connection: close: %s", p);
    free(got), free(reqs), free(env);
    close(fd);
    ts_server_free(&s);
}

Test(http, http_1_0) {
    ts_server s = start();
    /* closed after the answer */
    int fd = ts_dial(s.port);
    send_str(fd, "GET /healthz HTTP/1.0\r\n\r\n");
    int closed;
    char *got = ts_read_answers(fd, 0, 2.0, &closed);
    cr_assert(closed && strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0 && strstr(got, "Connection: close\r\n"), "%s",
              got);
    free(got);
    close(fd);
    /* unless it asks for keep-alive */
    fd = ts_dial(s.port);
    send_str(fd, "GET /healthz HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
    got = ts_read_answers(fd, 1, 2.0, &closed);
    cr_assert(!closed && strstr(got, "Connection: keep-alive\r\n") && strstr(got, "\r\n\r\nok\n"), "%s", got);
    free(got);
    char *env = envelope(3);
    char *req = ts_fmt("POST " ENVELOPE_PATH "?sentry_key=" KEY " HTTP/1.0\r\nContent-Length: %zu\r\n\r\n%s",
                       strlen(env), env);
    send_str(fd, req);
    got = ts_read_answers(fd, 0, 5.0, &closed);
    cr_assert(closed && strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0 && strstr(got, "{\"id\":"), "%s", got);
    free(got), free(req), free(env);
    close(fd);
    ts_server_free(&s);
}

/* A request target in absolute form (RFC 9112 §3.2.2: a server must accept
 * it) is routed by its path and query: it got 404. */
Test(http, absolute_form_targets) {
    ts_server s = start();
    char *req = ts_fmt("GET http://127.0.0.1:%d/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", s.port);
    char *got = exchange(s.port, req, strlen(req));
    cr_assert(strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0 && strstr(got, "\r\n\r\nok\n"), "%s", got);
    free(got), free(req);
    char *env = envelope(7);
    req = ts_fmt("POST HTTPS://example.com" ENVELOPE_PATH "?sentry_key=" KEY " HTTP/1.1\r\nHost: example.com\r\n"
                 "Connection: close\r\nContent-Length: %zu\r\n\r\n%s", strlen(env), env);
    got = exchange(s.port, req, strlen(req));
    cr_assert(strncmp(got, "HTTP/1.1 200 OK\r\n", 17) == 0 &&
                  strstr(got, "{\"id\":\"00000000000000000000000000000007\"}"), "%s", got);
    free(got), free(req), free(env);
    /* no path: "/", which is not found */
    static const char *const bare[] = {"GET http://x HTTP/1.1\r\nConnection: close\r\n\r\n",
                                       "GET http://x?a=1 HTTP/1.1\r\nConnection: close\r\n\r\n",
                                       "GET http:// HTTP/1.1\r\nConnection: close\r\n\r\n"};
    for (size_t i = 0; i < sizeof bare / sizeof bare[0]; i++) {
        got = exchange(s.port, bare[i], strlen(bare[i]));
        assert_json_error(got, 404, "not found");
        free(got);
    }
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 1);
    ts_server_free(&s);
}

/* The parser on its own: a head cut at every byte is incomplete until its
 * last byte, then parses as it does whole. */
Test(http, parser_takes_heads_in_any_pieces) {
    const char *head = "\r\nPOST /api/%34%32/envelope/?a=1&sentry_key=k%2By+z HTTP/1.1\r\nHost: x\r\n"
                       "Content-Length:  12 \r\nConnection: keep-alive, Close\nX-Empty:\r\n\r\nBODY";
    size_t n = strlen(head) - 4;
    char *buf = malloc(n + 4);
    tm_srv_http_head *h = malloc(sizeof *h);
    tm_srv_http_error e;
    size_t scanned = 0;
    for (size_t len = 0; len < n; len++) {
        memcpy(buf, head, len);
        cr_assert_eq(tm_srv_http_parse_head(buf, len, &scanned, h, &e), 0, "at %zu: %s", len, e.detail);
    }
    memcpy(buf, head, n + 4);
    cr_assert_eq(tm_srv_http_parse_head(buf, n + 4, &scanned, h, &e), 1, "%s", e.detail);
    cr_assert_eq(h->length, n);
    cr_assert_str_eq(h->method, "POST");
    cr_assert_str_eq(h->path, "/api/42/envelope/");
    cr_assert_eq(h->target_len, strlen("/api/%34%32/envelope/?a=1&sentry_key=k%2By+z"));
    cr_assert(h->has_length && h->content_length == 12 && !h->chunked && !h->keep_alive);
    cr_assert_str_eq(tm_srv_http_header(h, "content-length"), "12");
    cr_assert_str_eq(tm_srv_http_header(h, "X-EMPTY"), "");
    size_t key_len;
    char *key = tm_srv_http_query_arg(h->query, "sentry_key", &key_len);
    cr_assert(key && key_len == 5 && memcmp(key, "k+y z", 5) == 0);
    /* the body: Content-Length bytes, the rest stays for the next request */
    tm_srv_http_body b;
    tm_srv_http_body_init(&b, h);
    const char *data;
    size_t used, got;
    cr_assert_eq(tm_srv_http_body_take(&b, "0123456789abNEXT", 16, &used, &data, &got, &e), 1);
    cr_assert_eq(used, 12);
    cr_assert_eq(got, 12);
    free(h), free(buf);
}
