/*
 * fuzz_http.c — fuzz target for the server's HTTP/1.1 parser
 * (server/http_conn.c): the first byte picks the sizes of the pieces the
 * input arrives in; the rest is parsed as pipelined requests, each head fed
 * growing prefixes (an incomplete head must stay incomplete, and the
 * whole must parse as the prefixes said), then its body's framing. Checks
 * that views stay in the buffer, limits hold and refusals say why.
 */
#include <stdio.h>
#include <string.h>

#include "fuzz_common.h"
#include "server.h"

static void check_error(const tm_srv_http_error *e) {
    static const unsigned statuses[] = {400, 413, 414, 417, 431, 501, 505};
    int known = 0;
    for (size_t i = 0; i < sizeof statuses / sizeof statuses[0]; i++) known |= e->status == statuses[i];
    if (!known || !memchr(e->detail, 0, sizeof e->detail) || !e->detail[0]) abort();
}

static int inside(const char *p, const char *buf, size_t len) { return p >= buf && p + strlen(p) <= buf + len; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    size_t piece = 1 + (size_t)(data[0] % 64) * (data[0] >= 128 ? 257 : 1);
    data++, size--;
    /* exactly the input's bytes, so that a read past them is caught */
    char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    tm_srv_http_head h;
    size_t at = 0;
    for (int requests = 0; requests < 16 && at < size; requests++) {
        char *in = buf + at;
        size_t len = size - at, scanned = 0, upto = 0;
        tm_srv_http_error e;
        /* the whole rest at once, on a copy (the parser writes NULs) */
        char *whole = malloc(len);
        if (!whole) break;
        memcpy(whole, in, len);
        size_t whole_scanned = 0;
        int r_whole = tm_srv_http_parse_head(whole, len, &whole_scanned, &h, &e);
        size_t whole_length = h.length;
        free(whole);
        int r = 0;
        while (r == 0 && upto < len) {
            upto = len - upto < piece ? len : upto + piece;
            r = tm_srv_http_parse_head(in, upto, &scanned, &h, &e);
            if (scanned > upto) abort();
        }
        if (r != r_whole || (r == 1 && h.length != whole_length)) abort();
        if (r == 0) break; /* incomplete at the end of the input */
        if (r < 0) {
            check_error(&e);
            break;
        }
        if (h.length > upto || h.n_fields > TM_SRV_HTTP_MAX_FIELDS ||
            h.target_len > TM_SRV_HTTP_MAX_TARGET || !inside(h.method, in, h.length) ||
            !inside(h.path, in, h.length) || (h.query && !inside(h.query, in, h.length)) ||
            (h.chunked && h.has_length))
            abort();
        for (size_t i = 0; i < h.n_fields; i++)
            if (!inside(h.fields[i].name, in, h.length) || !inside(h.fields[i].value, in, h.length)) abort();
        size_t key_len;
        const char *key = h.query ? tm_srv_http_query_arg(h.query, "sentry_key", &key_len) : NULL;
        if (key && (!inside(key, in, h.length) || strlen(key) > key_len)) abort();
        at += h.length;
        tm_srv_http_body b;
        tm_srv_http_body_init(&b, &h);
        uint64_t body = 0;
        int done = 0;
        for (;;) {
            size_t n = size - at < piece ? size - at : piece, used, got;
            const char *run;
            int st = tm_srv_http_body_take(&b, buf + at, n, &used, &run, &got, &e);
            if (st < 0) {
                check_error(&e);
                break;
            }
            if (used > n || (got && (run < buf + at || run + got > buf + at + used))) abort();
            body += got;
            at += used;
            if (st == 1) {
                done = 1;
                break;
            }
            if (!used) {
                if (n) abort(); /* input left, and no progress */
                break;
            }
        }
        if (!done) break;
        if (h.has_length && body != h.content_length) abort();
    }
    free(buf);
    return 0;
}
