/*
 * http_conn.c — tracemill's own HTTP/1.1 layer under `tracemill serve`:
 * the listening socket and its accept thread (one thread per connection),
 * the request-head parser, the body framing (Content-Length and chunked),
 * reads with an idle deadline, and the response writer. What a request
 * means is http.c's: this file only frames bytes, and every input it
 * refuses comes back as a status and a detail for a JSON answer.
 */
#define _GNU_SOURCE /* accept4, pthread_setname_np */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "server.h"

#define MAX_METHOD_BYTES 32u
/* a longer request line has a target past TM_SRV_HTTP_MAX_TARGET */
#define MAX_REQUEST_LINE (MAX_METHOD_BYTES + TM_SRV_HTTP_MAX_TARGET + 16u)
#define MAX_CHUNK_LINE 4096u     /* a chunk-size line with its extensions */
#define MAX_TRAILER_BYTES (64u * 1024u)
/* Bytes of a head's first read: a head is mostly far smaller, and what
 * arrives after it of a Content-Length body is better received straight
 * into the body (tm_srv_http_recv_body) than copied out of the buffer. */
#define HEAD_READ 4096u

static int fail(tm_srv_http_error *e, unsigned status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(tm_srv_http_error *e, unsigned status, const char *fmt, ...) {
    e->status = status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->detail, sizeof e->detail, fmt, ap);
    va_end(ap);
    return -1;
}

/* RFC 9110's tchar: the bytes of methods and field names. */
static int tchar(unsigned char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) return 1;
    return c && strchr("!#$%&'*+-.^_`|~", c) != NULL;
}

/* ---- the request head ---- */

/* Where the head ends (after its empty line), looking for it from
 * *scanned on; 0 while it is incomplete, with *scanned moved to where the
 * next look resumes (so bytes are looked at once, however they arrive). */
static size_t head_end(const char *buf, size_t len, size_t *scanned) {
    size_t pos = *scanned;
    for (;;) {
        const char *lf = pos < len ? memchr(buf + pos, '\n', len - pos) : NULL;
        if (!lf) {
            *scanned = len;
            return 0;
        }
        size_t i = (size_t)(lf - buf);
        if (i + 1 < len && buf[i + 1] == '\n') return i + 2;
        if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n') return i + 3;
        if (i + 1 == len || (i + 2 == len && buf[i + 1] == '\r')) {
            *scanned = i; /* the next line's start is not in yet */
            return 0;
        }
        pos = i + 1;
    }
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

size_t tm_srv_http_unescape(char *s, size_t len, int plus_is_space) {
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        int hi, lo;
        if (s[i] == '%' && len - i > 2 && (hi = hex_value(s[i + 1])) >= 0 && (lo = hex_value(s[i + 2])) >= 0) {
            s[o++] = (char)(hi * 16 + lo);
            i += 2;
        } else {
            s[o++] = plus_is_space && s[i] == '+' ? ' ' : s[i];
        }
    }
    s[o] = 0;
    return o;
}

/* The request line "METHOD TARGET HTTP/1.x", line[0..n) without its line
 * end; with h, NUL-terminates the method and the path in place for it
 * (without, only checks). */
static int request_line(char *line, size_t n, tm_srv_http_head *h, tm_srv_http_error *e) {
    size_t m = 0;
    while (m < n && tchar((unsigned char)line[m])) m++;
    if (m == 0 || m >= n || line[m] != ' ')
        return fail(e, 400, "the request line is not METHOD TARGET HTTP/VERSION");
    if (m > MAX_METHOD_BYTES) return fail(e, 400, "the method is longer than %u bytes", MAX_METHOD_BYTES);
    size_t t = m + 1, u = t;
    while (u < n && (unsigned char)line[u] > ' ' && line[u] != 0x7f) u++;
    if (u == t || u >= n || line[u] != ' ')
        return fail(e, 400, "the request line is not METHOD TARGET HTTP/VERSION");
    const char *v = line + u + 1;
    size_t vn = n - u - 1;
    if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' ||
        v[7] > '9')
        return fail(e, 400, "the request line does not end in HTTP/VERSION");
    size_t target_len = u - t;
    if (h) { /* named in the answer and the access log, refused or not */
        line[m] = 0;
        line[u] = 0;
        h->method = line;
        h->path = line + t;
        h->target_len = target_len;
    }
    if (v[5] != '1') return fail(e, 505, "HTTP version %.8s is not supported (HTTP/1.0 and HTTP/1.1 are)", v);
    if (target_len > TM_SRV_HTTP_MAX_TARGET)
        return fail(e, 414, "request target of %zu bytes is longer than %u bytes", target_len,
                    TM_SRV_HTTP_MAX_TARGET);
    if (!h) return 0;
    h->minor = (unsigned)(v[7] - '0');
    /* the absolute form (RFC 9112 §3.2.2, which a server must accept): its path and query; the authority is
     * the Host's concern. "http://host?q" is the path "/" (the authority's last byte is overwritten). */
    size_t scheme = target_len >= 7 && strncasecmp(line + t, "http://", 7) == 0    ? 7
                    : target_len >= 8 && strncasecmp(line + t, "https://", 8) == 0 ? 8
                                                                                    : 0;
    if (scheme) {
        size_t p = scheme;
        while (p < target_len && line[t + p] != '/' && line[t + p] != '?') p++;
        if (p == target_len || line[t + p] == '?') line[t + --p] = '/';
        t += p;
        h->path = line + t;
        h->target_len = target_len - p;
    }
    char *q = memchr(line + t, '?', h->target_len);
    size_t path_len = h->target_len;
    if (q) {
        *q = 0;
        h->query = q + 1;
        path_len = (size_t)(q - (line + t));
    }
    tm_srv_http_unescape(line + t, path_len, 0);
    return 0;
}

/* Comma-separated tokens of a Connection header. */
static void connection_tokens(const char *v, int *close, int *keep_alive) {
    while (*v) {
        while (*v == ' ' || *v == '\t' || *v == ',') v++;
        const char *t = v;
        while (*v && *v != ',') v++;
        const char *end = v;
        while (end > t && (end[-1] == ' ' || end[-1] == '\t')) end--;
        size_t n = (size_t)(end - t);
        if (n == 5 && strncasecmp(t, "close", 5) == 0) *close = 1;
        if (n == 10 && strncasecmp(t, "keep-alive", 10) == 0) *keep_alive = 1;
    }
}

/* The framing and connection headers: Content-Length, Transfer-Encoding,
 * Connection, Expect. */
static int framing(tm_srv_http_head *h, tm_srv_http_error *e) {
    const char *length = NULL, *te = NULL;
    int close = 0, keep_alive = 0;
    for (size_t i = 0; i < h->n_fields; i++) {
        const char *name = h->fields[i].name, *value = h->fields[i].value;
        if (strcasecmp(name, "Content-Length") == 0) {
            size_t n = strlen(value);
            if (n == 0 || strspn(value, "0123456789") != n)
                return fail(e, 400, "Content-Length is not a number: \"%.40s\"", value);
            uint64_t x = 0;
            for (size_t k = 0; k < n; k++) {
                if (x > (UINT64_MAX - (uint64_t)(value[k] - '0')) / 10)
                    return fail(e, 413, "Content-Length %.40s%s is past 64 bits", value, n > 40 ? "..." : "");
                x = x * 10 + (uint64_t)(value[k] - '0');
            }
            if (length && x != h->content_length) return fail(e, 400, "conflicting Content-Length headers");
            length = value;
            h->content_length = x;
        } else if (strcasecmp(name, "Transfer-Encoding") == 0) {
            if (te || strcasecmp(value, "chunked") != 0)
                return fail(e, 501, "unsupported Transfer-Encoding: \"%.40s\" (only chunked is)", value);
            te = value;
        } else if (strcasecmp(name, "Connection") == 0) {
            connection_tokens(value, &close, &keep_alive);
        } else if (strcasecmp(name, "Expect") == 0) {
            if (strcasecmp(value, "100-continue") != 0)
                return fail(e, 417, "unsupported Expect: \"%.40s\" (only 100-continue is)", value);
            h->expect_continue = h->minor >= 1;
        }
    }
    /* a body framed two ways is how requests are smuggled past proxies */
    if (length && te) return fail(e, 400, "both Content-Length and Transfer-Encoding");
    h->has_length = length != NULL;
    h->chunked = te != NULL;
    h->keep_alive = !close && (h->minor >= 1 || keep_alive);
    return 0;
}

/* An incomplete head that can already be refused: bytes that do not start
 * with a method (not HTTP), a request line that is complete and wrong (a
 * client may wait for the answer before sending more), or a head that has
 * filled its limit. */
static int refuse_early(char *buf, size_t len, size_t skip, tm_srv_http_error *e) {
    if (len - skip == 1 && buf[skip] == '\r') return 0; /* an empty line's CR */
    size_t m = skip;
    while (m < len && m - skip <= MAX_METHOD_BYTES && tchar((unsigned char)buf[m])) m++;
    if (m < len && (m == skip || buf[m] != ' ')) return fail(e, 400, "not an HTTP request");
    /* looked for in a bounded window, so that a line arriving slowly costs little per read */
    size_t window = len - skip < MAX_REQUEST_LINE ? len - skip : MAX_REQUEST_LINE;
    char *lf = memchr(buf + skip, '\n', window);
    if (lf) {
        size_t n = (size_t)(lf - buf) - skip - (lf > buf + skip && lf[-1] == '\r');
        if (request_line(buf + skip, n, NULL, e) != 0) return -1;
    } else if (len - skip > MAX_REQUEST_LINE) {
        return fail(e, 414, "request line longer than %u bytes (a request target may have %u)", MAX_REQUEST_LINE,
                    TM_SRV_HTTP_MAX_TARGET);
    }
    if (len < TM_SRV_HTTP_MAX_HEAD) return 0; /* the empty lines before it count: they take the same buffer */
    return fail(e, 431, "request head is larger than %u bytes", TM_SRV_HTTP_MAX_HEAD);
}

size_t tm_srv_http_empty_lines(const char *buf, size_t len) {
    size_t n = 0;
    while (n < len && (buf[n] == '\n' || (buf[n] == '\r' && n + 1 < len && buf[n + 1] == '\n')))
        n += buf[n] == '\n' ? 1 : 2;
    return n;
}

int tm_srv_http_parse_head(char *buf, size_t len, size_t *scanned, tm_srv_http_head *h, tm_srv_http_error *e) {
    memset(h, 0, offsetof(tm_srv_http_head, fields));
    size_t skip = tm_srv_http_empty_lines(buf, len);
    if (*scanned < skip) *scanned = skip;
    size_t end = head_end(buf, len, scanned);
    if (!end) return refuse_early(buf, len, skip, e);
    h->length = end;
    /* lines: [a, lf) with the CR before lf dropped */
    char *a = buf + skip, *stop = buf + end;
    char *lf = memchr(a, '\n', (size_t)(stop - a));
    size_t n = (size_t)(lf - a) - (lf > a && lf[-1] == '\r');
    if (request_line(a, n, h, e) != 0) return -1;
    if (end > TM_SRV_HTTP_MAX_HEAD)
        return fail(e, 431, "request head of %zu bytes is larger than %u bytes", end, TM_SRV_HTTP_MAX_HEAD);
    size_t fields = 0;
    for (a = lf + 1;; a = lf + 1) {
        lf = memchr(a, '\n', (size_t)(stop - a));
        n = (size_t)(lf - a) - (lf > a && lf[-1] == '\r');
        if (n == 0) break; /* the empty line */
        fields++;
        if (fields > TM_SRV_HTTP_MAX_FIELDS) continue; /* counted for the answer */
        if (a[0] == ' ' || a[0] == '\t')
            return fail(e, 400, "header line %zu starts with whitespace (obsolete line folding)", fields);
        char *colon = memchr(a, ':', n);
        if (!colon) return fail(e, 400, "header line %zu has no colon", fields);
        for (char *p = a; p < colon; p++)
            if (!tchar((unsigned char)*p)) return fail(e, 400, "header line %zu has an invalid field name", fields);
        if (colon == a) return fail(e, 400, "header line %zu has an empty field name", fields);
        char *v = colon + 1, *ve = a + n;
        while (v < ve && (*v == ' ' || *v == '\t')) v++;
        while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        for (char *p = v; p < ve; p++)
            if (((unsigned char)*p < ' ' && *p != '\t') || *p == 0x7f)
                return fail(e, 400, "header line %zu has a control character in its value", fields);
        *colon = 0;
        *ve = 0;
        h->fields[h->n_fields++] = (tm_srv_http_field){a, v};
    }
    if (fields > TM_SRV_HTTP_MAX_FIELDS)
        return fail(e, 431, "%zu header fields, more than %u", fields, TM_SRV_HTTP_MAX_FIELDS);
    return framing(h, e) != 0 ? -1 : 1;
}

const char *tm_srv_http_header(const tm_srv_http_head *h, const char *name) {
    for (size_t i = 0; i < h->n_fields; i++)
        if (strcasecmp(h->fields[i].name, name) == 0) return h->fields[i].value;
    return NULL;
}

char *tm_srv_http_query_arg(char *query, const char *name, size_t *len) {
    size_t name_len = strlen(name);
    for (char *p = query; p && *p;) {
        char *amp = strchr(p, '&');
        size_t n = amp ? (size_t)(amp - p) : strlen(p);
        if (n > name_len && p[name_len] == '=' && memcmp(p, name, name_len) == 0) {
            *len = tm_srv_http_unescape(p + name_len + 1, n - name_len - 1, 1);
            return p + name_len + 1;
        }
        p = amp ? amp + 1 : NULL;
    }
    return NULL;
}

/* ---- the body's framing ---- */

enum {
    BODY_DATA,       /* Content-Length bytes, or a chunk's */
    BODY_SIZE,       /* a chunk-size line's hex digits */
    BODY_EXT,        /* the rest of a chunk-size line */
    BODY_SIZE_LF,    /* its LF after a CR */
    BODY_DATA_CR,    /* the CRLF after a chunk's data */
    BODY_DATA_LF,
    BODY_TRAILER,    /* the start of a trailer line, or the final empty line */
    BODY_TRAILER_LINE,
    BODY_END_LF,
    BODY_DONE
};

void tm_srv_http_body_init(tm_srv_http_body *b, const tm_srv_http_head *h) {
    memset(b, 0, sizeof *b);
    if (h->chunked) {
        b->chunked = 1;
        b->state = BODY_SIZE;
    } else {
        b->left = h->has_length ? h->content_length : 0;
        b->state = b->left ? BODY_DATA : BODY_DONE;
    }
}

int tm_srv_http_body_take(tm_srv_http_body *b, const char *in, size_t len, size_t *used, const char **data,
                          size_t *data_len, tm_srv_http_error *e) {
    size_t i = 0;
    *data = NULL;
    *data_len = 0;
    while (b->state != BODY_DONE) {
        if (b->state == BODY_DATA) {
            if (i == len) break;
            size_t n = len - i < b->left ? len - i : (size_t)b->left;
            *data = in + i;
            *data_len = n;
            i += n;
            b->left -= n;
            b->offset += n;
            if (!b->left) b->state = b->chunked ? BODY_DATA_CR : BODY_DONE;
            break; /* one run of data a call: the caller takes it before the framing goes on */
        }
        if (i == len) break;
        char c = in[i++];
        b->offset++;
        switch (b->state) {
        case BODY_SIZE: {
            int d = hex_value(c);
            if (d >= 0) {
                if (b->digits++ == 15)
                    return fail(e, 400, "chunked body: a chunk size past 60 bits (at byte %llu of the body)",
                                (unsigned long long)b->offset);
                b->left = b->left * 16 + (uint64_t)d;
                b->line++;
                break;
            }
            if (!b->digits)
                return fail(e, 400, "chunked body: a chunk size is not hexadecimal (at byte %llu of the body)",
                            (unsigned long long)b->offset);
            if (c == ';' || c == ' ' || c == '\t') b->state = BODY_EXT;
            else if (c == '\r') b->state = BODY_SIZE_LF;
            else if (c == '\n') goto size_line_done;
            else
                return fail(e, 400, "chunked body: a chunk-size line has an invalid byte (at byte %llu of the body)",
                            (unsigned long long)b->offset);
            break;
        }
        case BODY_EXT:
            if (c == '\r') b->state = BODY_SIZE_LF;
            else if (c == '\n') goto size_line_done;
            else if (((unsigned char)c < ' ' && c != '\t') || c == 0x7f)
                return fail(e, 400, "chunked body: a chunk extension has a control byte (at byte %llu of the body)",
                            (unsigned long long)b->offset);
            else if (++b->line > MAX_CHUNK_LINE)
                return fail(e, 400, "chunked body: a chunk-size line longer than %u bytes", MAX_CHUNK_LINE);
            break;
        case BODY_SIZE_LF:
            if (c != '\n')
                return fail(e, 400, "chunked body: a chunk-size line ends in CR without LF (at byte %llu of the body)",
                            (unsigned long long)b->offset);
        size_line_done:
            b->digits = 0;
            b->line = 0;
            b->state = b->left ? BODY_DATA : BODY_TRAILER;
            break;
        case BODY_DATA_CR:
            if (c == '\r') b->state = BODY_DATA_LF;
            else if (c == '\n') b->state = BODY_SIZE;
            else
                return fail(e, 400, "chunked body: a chunk's data is not followed by CRLF (at byte %llu of the body)",
                            (unsigned long long)b->offset);
            break;
        case BODY_DATA_LF:
            if (c != '\n')
                return fail(e, 400, "chunked body: a chunk's data is not followed by CRLF (at byte %llu of the body)",
                            (unsigned long long)b->offset);
            b->state = BODY_SIZE;
            break;
        case BODY_TRAILER:
            if (c == '\r') b->state = BODY_END_LF;
            else if (c == '\n') b->state = BODY_DONE;
            else b->state = BODY_TRAILER_LINE;
            b->line++;
            break;
        case BODY_TRAILER_LINE:
            if (++b->line > MAX_TRAILER_BYTES)
                return fail(e, 400, "chunked body: trailer fields longer than %u bytes", MAX_TRAILER_BYTES);
            if (c == '\n') b->state = BODY_TRAILER;
            break;
        case BODY_END_LF:
            if (c != '\n') {
                if (++b->line > MAX_TRAILER_BYTES)
                    return fail(e, 400, "chunked body: trailer fields longer than %u bytes", MAX_TRAILER_BYTES);
                b->state = BODY_TRAILER_LINE; /* a trailer line starting with CR: skipped like the others */
            } else {
                b->state = BODY_DONE;
            }
            break;
        }
    }
    *used = i;
    return b->state == BODY_DONE;
}

/* ---- a connection's reads and writes ---- */

int tm_srv_http_conn_init(tm_srv_http_conn *c, int fd, int idle_ms) {
    memset(c, 0, sizeof *c);
    c->fd = fd;
    c->idle_ms = idle_ms;
    c->cap = TM_SRV_HTTP_MAX_HEAD;
    c->buf = malloc(c->cap + 1); /* + the NUL a head's last field may get */
    return c->buf ? 0 : -1;
}

void tm_srv_http_conn_release(tm_srv_http_conn *c) {
    free(c->buf);
    c->buf = NULL;
}

/* Receives at most cap bytes into dst: how many, or 0 when the peer
 * closed, the connection broke or stayed silent for idle_ms. */
static size_t receive(tm_srv_http_conn *c, char *dst, size_t cap) {
    for (;;) {
        /* what has arrived is taken at once; poll only when nothing has */
        ssize_t n = recv(c->fd, dst, cap, MSG_DONTWAIT);
        if (n > 0) return (size_t)n;
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            c->input_closed = 1;
            return 0;
        }
        struct pollfd p = {c->fd, POLLIN, 0};
        int r = poll(&p, 1, c->idle_ms);
        if (r == 0 || (r < 0 && errno != EINTR)) return 0;
    }
}

/* Reads at most `most` more bytes into the buffer (the unconsumed bytes
 * first moved to its front): 1, or 0 when the peer closed, the connection
 * broke or stayed silent for idle_ms. */
static int fill(tm_srv_http_conn *c, size_t most) {
    if (c->start) {
        memmove(c->buf, c->buf + c->start, c->len - c->start);
        c->len -= c->start;
        c->start = 0;
    }
    if (c->len == c->cap) return 0;
    size_t n = receive(c, c->buf + c->len, c->cap - c->len < most ? c->cap - c->len : most);
    c->len += n;
    return n > 0;
}

int tm_srv_http_read_head(tm_srv_http_conn *c, tm_srv_http_head *h, tm_srv_http_error *e) {
    c->scanned = 0;
    size_t most = HEAD_READ; /* then what fits, so that a long head is judged as whole as before */
    for (;;) {
        /* dropped here, so that a stream of them is not looked at again with every read */
        size_t empty = tm_srv_http_empty_lines(c->buf + c->start, c->len - c->start);
        c->start += empty;
        c->scanned = c->scanned > empty ? c->scanned - empty : 0;
        int r = tm_srv_http_parse_head(c->buf + c->start, c->len - c->start, &c->scanned, h, e);
        if (r > 0) {
            c->start += h->length;
            tm_srv_http_body_init(&c->body, h);
            c->body_done = c->body.state == BODY_DONE;
            return 1;
        }
        if (r < 0) return -1;
        if (!fill(c, most)) return 0;
        most = SIZE_MAX;
    }
}

int tm_srv_http_read_body(tm_srv_http_conn *c, const char **data, size_t *len, tm_srv_http_error *e) {
    for (;;) {
        if (c->body_done) return 0;
        size_t used;
        int r = tm_srv_http_body_take(&c->body, c->buf + c->start, c->len - c->start, &used, data, len, e);
        c->start += used;
        if (r < 0) return -1;
        if (r > 0) c->body_done = 1;
        if (*len) return 1;
        if (r > 0) return 0;
        if (c->start == c->len) c->start = c->len = 0;
        if (!fill(c, SIZE_MAX)) return -2;
    }
}

uint64_t tm_srv_http_body_direct(const tm_srv_http_conn *c) {
    if (c->body_done || c->body.chunked || c->body.state != BODY_DATA || c->start != c->len) return 0;
    return c->body.left;
}

int tm_srv_http_recv_body(tm_srv_http_conn *c, void *dst, size_t cap, size_t *n) {
    if (cap > c->body.left) cap = (size_t)c->body.left; /* the next request's bytes stay for the buffer */
    c->start = c->len = 0;
    *n = receive(c, dst, cap);
    if (!*n) return -2;
    c->body.left -= *n;
    c->body.offset += *n;
    if (!c->body.left) {
        c->body.state = BODY_DONE;
        c->body_done = 1;
    }
    return 1;
}

/* Writes every byte of iov (sendmsg moves through it), waiting at most
 * idle_ms for the socket to take each part: 0, or -1. */
static int write_all(tm_srv_http_conn *c, struct iovec *iov, int n) {
    while (n) {
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN) return -1;
            struct pollfd p = {c->fd, POLLOUT, 0};
            if (poll(&p, 1, c->idle_ms) <= 0) return -1;
            continue;
        }
        size_t left = (size_t)w;
        while (n && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++, n--;
        }
        if (n) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

int tm_srv_http_continue(tm_srv_http_conn *c) {
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    struct iovec iov = {(void *)line, sizeof line - 1};
    return write_all(c, &iov, 1);
}

const char *tm_srv_http_reason(unsigned status) {
    switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 300 ? "OK" : status < 500 ? "Bad Request" : "Internal Server Error";
    }
}

int tm_srv_http_respond(tm_srv_http_conn *c, unsigned status, const char *headers, const void *body, size_t len,
                        int head_only, tm_srv_http_connection connection) {
    char head[512];
    /* formatted once a second per thread: gmtime_r takes glibc's time zone lock */
    static _Thread_local time_t date_second = -1;
    static _Thread_local char date[64];
    time_t now = time(NULL);
    if (now != date_second) {
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
        date_second = now;
    }
    static const char *const lines[] = {"", "Connection: close\r\n", "Connection: keep-alive\r\n"};
    int n = snprintf(head, sizeof head, "HTTP/1.1 %u %s\r\nDate: %s\r\n%sContent-Length: %zu\r\n", status,
                     tm_srv_http_reason(status), date, lines[connection], len);
    if (n < 0 || (size_t)n >= sizeof head) return -1;
    struct iovec iov[4] = {{head, (size_t)n}, {(void *)headers, strlen(headers)}, {"\r\n", 2}, {(void *)body, len}};
    return write_all(c, iov, head_only || !len ? 3 : 4);
}

/* ---- the listener ---- */

struct tm_srv_http_listener {
    int fd;
    int wake[2]; /* a byte here ends the accept thread */
    pthread_t thread;
    tm_srv_http_accept_fn accept;
    tm_srv_http_serve_fn serve;
    void *ctx;
};

typedef struct spawn {
    tm_srv_http_serve_fn serve;
    void *ctx, *conn;
} spawn;

static void *run_conn(void *arg) {
    spawn sp = *(spawn *)arg;
    free(arg);
    pthread_setname_np(pthread_self(), "tm-conn"); /* threads are named for top, perf and bench-serve */
    sp.serve(sp.ctx, sp.conn, 1);
    return NULL;
}

static void *accept_loop(void *arg) {
    tm_srv_http_listener *l = arg;
    pthread_setname_np(pthread_self(), "tm-accept");
    for (;;) {
        struct pollfd p[2] = {{l->fd, POLLIN, 0}, {l->wake[0], POLLIN, 0}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            return NULL;
        }
        if (p[1].revents) return NULL;
        struct sockaddr_storage addr;
        socklen_t addr_len = sizeof addr;
        int fd = accept4(l->fd, (struct sockaddr *)&addr, &addr_len, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                poll(NULL, 0, 100); /* out of descriptors: let connections end rather than spin */
            continue;
        }
        int one = 1; /* an answer is written whole: nothing to gain from Nagle's delay */
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        void *conn = l->accept(l->ctx, fd, (struct sockaddr *)&addr, addr_len);
        if (!conn) {
            close(fd);
            continue;
        }
        spawn *sp = malloc(sizeof *sp);
        pthread_attr_t attr;
        pthread_t th;
        int started = 0;
        if (sp && pthread_attr_init(&attr) == 0) {
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            *sp = (spawn){l->serve, l->ctx, conn};
            started = pthread_create(&th, &attr, run_conn, sp) == 0;
            pthread_attr_destroy(&attr);
        }
        if (!started) {
            free(sp);
            l->serve(l->ctx, conn, 0);
        }
    }
}

tm_status tm_srv_http_listen(const struct sockaddr *addr, socklen_t addr_len, tm_srv_http_accept_fn accept_fn,
                             tm_srv_http_serve_fn serve, void *ctx, tm_srv_http_listener **out, uint16_t *port,
                             tm_error *err) {
    *out = NULL;
    tm_srv_http_listener *l = calloc(1, sizeof *l);
    if (!l) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
    l->wake[0] = l->wake[1] = -1;
    l->accept = accept_fn;
    l->serve = serve;
    l->ctx = ctx;
    l->fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (l->fd < 0 || setsockopt(l->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        (addr->sa_family == AF_INET6 && setsockopt(l->fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one) != 0) ||
        bind(l->fd, addr, addr_len) != 0 || listen(l->fd, SOMAXCONN) != 0) {
        if (l->fd >= 0) close(l->fd);
        free(l);
        return tm_srv_fail(err, TM_ERR_IO, 0, "%s", strerror(errno));
    }
    struct sockaddr_storage bound;
    socklen_t bound_len = sizeof bound;
    getsockname(l->fd, (struct sockaddr *)&bound, &bound_len);
    *port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                              : ((struct sockaddr_in *)&bound)->sin_port);
    if (pipe2(l->wake, O_CLOEXEC) != 0 || pthread_create(&l->thread, NULL, accept_loop, l) != 0) {
        int e = errno;
        if (l->wake[0] >= 0) close(l->wake[0]), close(l->wake[1]);
        close(l->fd);
        free(l);
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "cannot start the accept thread: %s", strerror(e));
    }
    *out = l;
    return TM_OK;
}

void tm_srv_http_listener_close(tm_srv_http_listener *l) {
    if (!l) return;
    if (write(l->wake[1], "x", 1) != 1) { /* a pipe's first byte always fits */
    }
    pthread_join(l->thread, NULL);
    close(l->wake[0]);
    close(l->wake[1]);
    close(l->fd);
    free(l);
}
