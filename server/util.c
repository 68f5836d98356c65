/*
 * util.c — the server layer's growable byte buffer, JSON string escaping,
 * chunk id (UUID) normalisation and error formatting.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

int tm_srv_buf_append(tm_srv_buf *b, const void *data, size_t len) {
    if (len > SIZE_MAX - b->len) return -1;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len) cap = cap > SIZE_MAX / 2 ? b->len + len : cap * 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p) return -1;
        b->data = p;
        b->cap = cap;
    }
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

int tm_srv_buf_reserve(tm_srv_buf *b, size_t extra) {
    if (extra > SIZE_MAX - b->len) return -1;
    if (b->len + extra <= b->cap) return 0;
    uint8_t *p = realloc(b->data, b->len + extra);
    if (!p) return -1;
    b->data = p;
    b->cap = b->len + extra;
    return 0;
}

void tm_srv_buf_release(tm_srv_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

tm_status tm_srv_fail(tm_error *err, tm_status code, uint64_t offset, const char *fmt, ...) {
    if (err) {
        memset(err, 0, sizeof *err); /* reserved_ too, as the library's own errors */
        err->code = code;
        err->offset = offset;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* The length of the UTF-8 sequence at p (n bytes left), 0 when it is not
 * one (a stray continuation, a cut, overlong or surrogate sequence). */
static size_t utf8_len(const uint8_t *p, size_t n) {
    size_t len = p[0] >= 0xF0 ? 4 : p[0] >= 0xE0 ? 3 : 2;
    if (p[0] < 0xC2 || p[0] > 0xF4 || n < len) return 0;
    uint8_t lo = p[0] == 0xE0 ? 0xA0 : p[0] == 0xF0 ? 0x90 : 0x80, hi = p[0] == 0xED ? 0x9F : p[0] == 0xF4 ? 0x8F : 0xBF;
    if (p[1] < lo || p[1] > hi) return 0;
    for (size_t k = 2; k < len; k++)
        if ((p[k] & 0xC0) != 0x80) return 0;
    return len;
}

int tm_srv_json_string(tm_srv_buf *out, const char *s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    const uint8_t *u = (const uint8_t *)s;
    if (tm_srv_buf_append(out, "\"", 1)) return -1;
    size_t run = 0; /* start of the bytes not yet written */
    for (size_t i = 0; i < len; i++) {
        char esc[6] = {'\\', 0};
        size_t esc_len = 2;
        if (u[i] >= 0x80) { /* valid UTF-8 as it is; any other byte as the text \xNN (JSON allows no raw one) */
            size_t seq = utf8_len(u + i, len - i);
            if (seq) {
                i += seq - 1;
                continue;
            }
            memcpy(esc + 1, "\\x", 2);
            esc_len = 5;
        } else {
            switch (u[i]) {
            case '"': esc[1] = '"'; break;
            case '\\': esc[1] = '\\'; break;
            case '\b': esc[1] = 'b'; break;
            case '\f': esc[1] = 'f'; break;
            case '\n': esc[1] = 'n'; break;
            case '\r': esc[1] = 'r'; break;
            case '\t': esc[1] = 't'; break;
            default:
                if (u[i] >= 0x20) continue;
                memcpy(esc + 1, "u00", 3);
                esc_len = 6;
            }
        }
        if (esc_len > 2) { /* the byte in hex ends \xNN and \u00NN */
            esc[esc_len - 2] = hex[u[i] >> 4];
            esc[esc_len - 1] = hex[u[i] & 15];
        }
        if (tm_srv_buf_append(out, s + run, i - run) || tm_srv_buf_append(out, esc, esc_len)) return -1;
        run = i + 1;
    }
    return tm_srv_buf_append(out, s + run, len - run) || tm_srv_buf_append(out, "\"", 1) ? -1 : 0;
}

int tm_srv_uuid_normalize(const char *s, size_t len, char out[TM_SRV_UUID_HEX + 1]) {
    static const char hex[] = "0123456789abcdef";
    size_t n = 0;
    if (!s || (len != 32 && len != 36)) return 0;
    for (size_t i = 0; i < len; i++) {
        if (len == 36 && (i == 8 || i == 13 || i == 18 || i == 23)) {
            if (s[i] != '-') return 0;
            continue;
        }
        const char c = s[i] >= 'A' && s[i] <= 'F' ? (char)(s[i] - 'A' + 'a') : s[i];
        if (!memchr(hex, c, 16)) return 0; /* 16: the NUL is not a digit */
        out[n++] = c;
    }
    out[n] = 0;
    return 1;
}
