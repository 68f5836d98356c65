/*
 * envelope.c — Sentry envelope parsing and item payload splitting (the
 * "Envelopes" section of server.h). Format, as Relay reads it
 * (relay-server/src/envelope.rs; https://develop.sentry.dev/sdk/envelopes/):
 *
 *   envelope header JSON object '\n'
 *   { item header JSON object '\n' payload ['\n'] }*
 *
 * An item with "length" takes exactly that many payload bytes, which must be
 * followed by '\n' or the end (Relay's MissingNewline otherwise); without it
 * the payload runs to the next '\n' or the end. Whitespace (blank lines)
 * before an item header is skipped, as Relay's serde stream does, so blank
 * trailing lines are fine. Each header must fit on one line of at most
 * TM_SRV_MAX_HEADER_BYTES (stricter than serde, which would let a header span
 * lines).
 *
 * The headers are read by a small strict JSON scanner that never recurses
 * (nesting is tracked in a fixed stack of MAX_DEPTH) and never allocates;
 * only top-level keys are looked at, and a key written with escapes matches
 * nothing. String values are returned as raw views between the quotes, with
 * any escapes left undecoded. UTF-8 is not validated. A null value counts as
 * absent (serde's Option), except for "type", which must be a string.
 *
 * Pure: no I/O, no global state; the views point into the caller's buffer.
 * Work is O(n) in the envelope size.
 */
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* Nesting of JSON containers in one header, the header object included. */
#define MAX_DEPTH 64

typedef enum field_kind { FIELD_STR, FIELD_STR_REQUIRED, FIELD_U64 } field_kind;

/* A top-level header key to extract; the other keys are skipped. */
typedef struct field {
    const char *name;
    field_kind kind;
    tm_srv_view *str; /* FIELD_STR, FIELD_STR_REQUIRED */
    int *has;         /* FIELD_U64 */
    uint64_t *num;    /* FIELD_U64 */
} field;

/* One header line: buf[.. end) with offsets absolute in the envelope. */
typedef struct scan {
    const uint8_t *buf;
    size_t end;
    tm_error *err;
} scan;

static size_t skip_ws(const scan *s, size_t p) {
    while (p < s->end && (s->buf[p] == ' ' || s->buf[p] == '\t' || s->buf[p] == '\r')) p++;
    return p;
}

static tm_status line_ended(const scan *s) {
    return tm_srv_fail(s->err, TM_ERR_MALFORMED, s->end, "header line ends inside the JSON object");
}

static int is_hex(uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* *p at '"'; moves past the closing quote. *escaped is set when the string
 * holds a backslash escape. */
static tm_status scan_string(const scan *s, size_t *p, int *escaped) {
    size_t q = *p + 1;
    *escaped = 0;
    while (q < s->end) {
        uint8_t c = s->buf[q];
        if (c == '"') {
            *p = q + 1;
            return TM_OK;
        }
        if (c < 0x20)
            return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "control character 0x%02x in a JSON string", c);
        if (c == '\\') {
            *escaped = 1;
            if (q + 1 >= s->end) break;
            uint8_t e = s->buf[q + 1];
            if (e == 'u') {
                for (size_t i = 2; i < 6; i++)
                    if (q + i >= s->end || !is_hex(s->buf[q + i]))
                        return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "bad \\u escape in a JSON string");
                q += 6;
                continue;
            }
            if (e == 0 || !strchr("\"\\/bfnrt", e))
                return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "bad escape in a JSON string");
            q += 2;
            continue;
        }
        q++;
    }
    return tm_srv_fail(s->err, TM_ERR_MALFORMED, *p, "unterminated JSON string");
}

static size_t skip_digits(const scan *s, size_t p) {
    while (p < s->end && s->buf[p] >= '0' && s->buf[p] <= '9') p++;
    return p;
}

/* JSON number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static tm_status scan_number(const scan *s, size_t *p) {
    size_t q = *p;
    if (s->buf[q] == '-') q++;
    if (q >= s->end || s->buf[q] < '0' || s->buf[q] > '9')
        return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "bad JSON number");
    q = s->buf[q] == '0' ? q + 1 : skip_digits(s, q);
    if (q < s->end && s->buf[q] == '.') {
        size_t d = skip_digits(s, q + 1);
        if (d == q + 1) return tm_srv_fail(s->err, TM_ERR_MALFORMED, q + 1, "bad JSON number");
        q = d;
    }
    if (q < s->end && (s->buf[q] == 'e' || s->buf[q] == 'E')) {
        q++;
        if (q < s->end && (s->buf[q] == '+' || s->buf[q] == '-')) q++;
        size_t d = skip_digits(s, q);
        if (d == q) return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "bad JSON number");
        q = d;
    }
    *p = q;
    return TM_OK;
}

static int has_literal(const scan *s, size_t p, const char *lit) {
    size_t n = strlen(lit);
    return s->end - p >= n && memcmp(s->buf + p, lit, n) == 0;
}

/* A string, number, true, false or null at *p (not whitespace, not EOL). */
static tm_status skip_scalar(const scan *s, size_t *p) {
    uint8_t c = s->buf[*p];
    if (c == '"') {
        int escaped;
        return scan_string(s, p, &escaped);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return scan_number(s, p);
    static const char *const lits[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++)
        if (has_literal(s, *p, lits[i])) {
            *p += strlen(lits[i]);
            return TM_OK;
        }
    return tm_srv_fail(s->err, TM_ERR_MALFORMED, *p, "unexpected character '%c' in JSON",
                       c >= 0x20 && c < 0x7f ? c : '?');
}

/* Reads `"key" :` at *p; the key's span (without quotes) goes to *key. */
static tm_status scan_key(const scan *s, size_t *p, size_t *key, size_t *key_len, int *escaped) {
    size_t q = skip_ws(s, *p);
    if (q >= s->end) return line_ended(s);
    if (s->buf[q] != '"') return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "expected a JSON object key");
    size_t start = q;
    tm_status st = scan_string(s, &q, escaped);
    if (st) return st;
    *key = start + 1;
    *key_len = q - start - 2;
    q = skip_ws(s, q);
    if (q >= s->end) return line_ended(s);
    if (s->buf[q] != ':') return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "expected ':' after a JSON key");
    *p = q + 1;
    return TM_OK;
}

/* Skips one JSON value at *p, iteratively; depth is the nesting of the
 * container holding it. */
static tm_status skip_value(const scan *s, size_t *p, unsigned depth) {
    uint8_t closer[MAX_DEPTH]; /* '}' or ']' of each open container */
    unsigned top = 0;
    size_t q = *p, key, key_len;
    int escaped;
    tm_status st;
    for (;;) {
        q = skip_ws(s, q);
        if (q >= s->end) return line_ended(s);
        uint8_t c = s->buf[q];
        if (c == '{' || c == '[') {
            if (depth + top + 1 > MAX_DEPTH)
                return tm_srv_fail(s->err, TM_ERR_LIMIT, q, "JSON nested deeper than %u", MAX_DEPTH);
            closer[top++] = c == '{' ? '}' : ']';
            q = skip_ws(s, q + 1);
            if (q >= s->end) return line_ended(s);
            if (s->buf[q] == closer[top - 1]) {
                q++;
                top--;
            } else {
                if (c == '{' && (st = scan_key(s, &q, &key, &key_len, &escaped))) return st;
                continue; /* the container's first value */
            }
        } else if ((st = skip_scalar(s, &q))) {
            return st;
        }
        /* After a complete value: close containers until one continues. */
        for (;;) {
            if (top == 0) {
                *p = q;
                return TM_OK;
            }
            q = skip_ws(s, q);
            if (q >= s->end) return line_ended(s);
            c = s->buf[q];
            if (c == closer[top - 1]) {
                q++;
                top--;
                continue;
            }
            if (c != ',')
                return tm_srv_fail(s->err, TM_ERR_MALFORMED, q, "expected ',' or '%c' in JSON", closer[top - 1]);
            q++;
            if (closer[top - 1] == '}' && (st = scan_key(s, &q, &key, &key_len, &escaped))) return st;
            break;
        }
    }
}

/* Reads the value of a wanted field at *p (not whitespace, not EOL). */
static tm_status read_field(const scan *s, size_t *p, const field *f) {
    size_t v = *p;
    uint8_t c = s->buf[v];
    if (has_literal(s, v, "null") && f->kind != FIELD_STR_REQUIRED) {
        if (f->kind == FIELD_U64) {
            *f->has = 0;
            *f->num = 0;
        } else {
            f->str->ptr = NULL;
            f->str->len = 0;
        }
        *p = v + 4;
        return TM_OK;
    }
    if (f->kind != FIELD_U64) {
        if (c != '"') return tm_srv_fail(s->err, TM_ERR_MALFORMED, v, "\"%s\" must be a string", f->name);
        int escaped; /* the view stays raw: escapes are not decoded */
        tm_status st = scan_string(s, p, &escaped);
        if (st) return st;
        f->str->ptr = (const char *)s->buf + v + 1;
        f->str->len = *p - v - 2;
        return TM_OK;
    }
    if (c < '0' || c > '9')
        return tm_srv_fail(s->err, TM_ERR_MALFORMED, v, "\"%s\" must be a non-negative integer", f->name);
    tm_status st = scan_number(s, p);
    if (st) return st;
    uint64_t n = 0;
    for (size_t q = v; q < *p; q++) {
        uint8_t d = s->buf[q];
        if (d < '0' || d > '9')
            return tm_srv_fail(s->err, TM_ERR_MALFORMED, v, "\"%s\" must be an integer", f->name);
        if (n > (UINT64_MAX - (d - '0')) / 10)
            return tm_srv_fail(s->err, TM_ERR_MALFORMED, v, "\"%s\" exceeds 2^64-1", f->name);
        n = n * 10 + (d - '0');
    }
    *f->has = 1;
    *f->num = n;
    return TM_OK;
}

/* Reads the header line starting at buf[start] (it ends at '\n' or len):
 * one JSON object, whose span goes to *json; *next is the offset after the
 * line's '\n' (len + 1 when the line runs to the end). */
static tm_status read_header(const uint8_t *buf, size_t len, size_t start, const field *fields,
                             size_t n_fields, tm_srv_view *json, size_t *next, tm_error *err) {
    size_t rest = len - start;
    size_t look = rest < TM_SRV_MAX_HEADER_BYTES + 1 ? rest : TM_SRV_MAX_HEADER_BYTES + 1;
    const uint8_t *nl = look ? memchr(buf + start, '\n', look) : NULL;
    if (!nl && rest > TM_SRV_MAX_HEADER_BYTES)
        return tm_srv_fail(err, TM_ERR_LIMIT, start, "header line longer than %u bytes",
                           TM_SRV_MAX_HEADER_BYTES);
    scan s = {buf, nl ? (size_t)(nl - buf) : len, err};
    *next = s.end + 1;

    size_t p = skip_ws(&s, start);
    if (p >= s.end || buf[p] != '{')
        return tm_srv_fail(err, TM_ERR_MALFORMED, p, "header is not a JSON object");
    size_t obj = p;
    p = skip_ws(&s, p + 1);
    if (p >= s.end) return line_ended(&s);
    if (buf[p] == '}') {
        p++;
    } else {
        for (;;) {
            size_t key, key_len;
            int escaped;
            tm_status st = scan_key(&s, &p, &key, &key_len, &escaped);
            if (st) return st;
            p = skip_ws(&s, p);
            if (p >= s.end) return line_ended(&s);
            const field *f = NULL;
            for (size_t i = 0; i < n_fields && !escaped && !f; i++)
                if (strlen(fields[i].name) == key_len && memcmp(fields[i].name, buf + key, key_len) == 0)
                    f = &fields[i];
            st = f ? read_field(&s, &p, f) : skip_value(&s, &p, 1);
            if (st) return st;
            p = skip_ws(&s, p);
            if (p >= s.end) return line_ended(&s);
            if (buf[p] == '}') {
                p++;
                break;
            }
            if (buf[p] != ',') return tm_srv_fail(err, TM_ERR_MALFORMED, p, "expected ',' or '}' in JSON");
            p++;
        }
    }
    json->ptr = (const char *)buf + obj;
    json->len = p - obj;
    p = skip_ws(&s, p);
    if (p < s.end) return tm_srv_fail(err, TM_ERR_MALFORMED, p, "expected a newline after the header");
    return TM_OK;
}

/* Reads the item header line at buf[start] into *it (payload unset);
 * *after is the offset past its '\n'. */
static tm_status read_item_header(const uint8_t *buf, size_t len, size_t start, tm_srv_item *it, int *has_length,
                                  uint64_t *length, size_t *after, tm_error *err) {
    *has_length = 0;
    *length = 0;
    const field fields[] = {
        {"type", FIELD_STR_REQUIRED, &it->type, NULL, NULL},
        {"length", FIELD_U64, NULL, has_length, length},
        {"content_type", FIELD_STR, &it->content_type, NULL, NULL},
        {"platform", FIELD_STR, &it->platform, NULL, NULL},
        {"filename", FIELD_STR, &it->filename, NULL, NULL},
        {"meta_length", FIELD_U64, NULL, &it->has_meta_length, &it->meta_length},
        {"item_count", FIELD_U64, NULL, &it->has_item_count, &it->item_count},
    };
    memset(it, 0, sizeof *it);
    it->offset = start;
    tm_status st = read_header(buf, len, start, fields, sizeof fields / sizeof fields[0], &it->header, after, err);
    if (st) return st;
    if (!it->type.ptr) return tm_srv_fail(err, TM_ERR_MALFORMED, start, "item header lacks \"type\"");
    return TM_OK;
}

/* Parses the item at buf[start] into *it; *next is where the next one may begin. */
static tm_status read_item(const uint8_t *buf, size_t len, size_t start, tm_srv_item *it, size_t *next,
                           tm_error *err) {
    int has_length;
    uint64_t length;
    size_t after;
    tm_status st = read_item_header(buf, len, start, it, &has_length, &length, &after, err);
    if (st) return st;

    size_t pstart = after < len ? after : len;
    size_t pend;
    if (has_length) {
        if (length > len - pstart)
            return tm_srv_fail(err, TM_ERR_TRUNCATED, start,
                               "item declares length %llu but only %zu bytes follow its header",
                               (unsigned long long)length, len - pstart);
        pend = pstart + (size_t)length;
        if (pend < len && buf[pend] != '\n')
            return tm_srv_fail(err, TM_ERR_MALFORMED, pend, "expected a newline after the %llu-byte payload",
                               (unsigned long long)length);
    } else {
        const uint8_t *nl = pstart < len ? memchr(buf + pstart, '\n', len - pstart) : NULL;
        pend = nl ? (size_t)(nl - buf) : len;
    }
    it->payload = buf + pstart;
    it->payload_len = pend - pstart;
    it->payload_offset = pstart;
    *next = pend < len ? pend + 1 : len;
    return TM_OK;
}

static tm_status read_envelope_header(const uint8_t *buf, size_t len, tm_srv_envelope *env, size_t *after,
                                     tm_error *err) {
    const field fields[] = {
        {"event_id", FIELD_STR, &env->event_id, NULL, NULL},
        {"dsn", FIELD_STR, &env->dsn, NULL, NULL},
    };
    return read_header(buf, len, 0, fields, 2, &env->header, after, err);
}

static int is_blank(uint8_t c) { return c == '\n' || c == '\r' || c == ' ' || c == '\t'; }

static tm_status parse(const uint8_t *buf, size_t len, tm_srv_envelope *env, tm_error *err) {
    if (len == 0) return tm_srv_fail(err, TM_ERR_MALFORMED, 0, "empty envelope: no header");
    size_t p;
    tm_status st = read_envelope_header(buf, len, env, &p, err);
    if (st) return st;
    size_t cap = 0;
    for (;;) {
        while (p < len && is_blank(buf[p])) p++;
        if (p >= len) return TM_OK;
        if (env->n_items == TM_SRV_MAX_ITEMS)
            return tm_srv_fail(err, TM_ERR_LIMIT, p, "more than %u items in the envelope", TM_SRV_MAX_ITEMS);
        if (env->n_items == cap) {
            cap = cap ? cap * 2 : 4;
            tm_srv_item *items = realloc(env->items, cap * sizeof *items);
            if (!items) return tm_srv_fail(err, TM_ERR_NOMEM, p, "out of memory for envelope items");
            env->items = items;
        }
        if ((st = read_item(buf, len, p, &env->items[env->n_items], &p, err))) return st;
        env->n_items++;
    }
}

tm_status tm_srv_envelope_parse(const uint8_t *buf, size_t len, tm_srv_envelope *out, tm_error *err) {
    memset(out, 0, sizeof *out);
    tm_status st = parse(buf, len, out, err);
    if (st) tm_srv_envelope_release(out);
    return st;
}

void tm_srv_envelope_release(tm_srv_envelope *env) {
    if (!env) return;
    free(env->items);
    memset(env, 0, sizeof *env);
}

/* ---- checking the framing while the body arrives ---- */

enum { SCAN_ENVELOPE_HEADER = 0, SCAN_ITEM_HEADER, SCAN_SIZED_PAYLOAD, SCAN_LINE_PAYLOAD };

/* The line starting at sc->pos: its '\n' offset, or 0 while it is still
 * incomplete (a header line never starts with '\n'). */
static size_t line_end(tm_srv_envelope_scan *sc, const uint8_t *buf, size_t len) {
    size_t from = sc->searched > sc->pos ? sc->searched : sc->pos;
    const uint8_t *nl = from < len ? memchr(buf + from, '\n', len - from) : NULL;
    if (nl) return (size_t)(nl - buf);
    sc->searched = len;
    return 0;
}

tm_status tm_srv_envelope_scan_feed(tm_srv_envelope_scan *sc, const uint8_t *buf, size_t len, uint64_t max_len,
                                    tm_error *err) {
    for (;;) {
        if (sc->state == SCAN_SIZED_PAYLOAD) {
            /* the payload, then a '\n' unless the envelope ends there */
            if (len <= sc->payload_end) return TM_OK;
            if (buf[sc->payload_end] != '\n')
                return tm_srv_fail(err, TM_ERR_MALFORMED, sc->payload_end,
                                   "expected a newline after the %llu-byte payload",
                                   (unsigned long long)(sc->payload_end - sc->pos));
            sc->pos = (size_t)sc->payload_end + 1;
            sc->state = SCAN_ITEM_HEADER;
            continue;
        }
        if (sc->state == SCAN_LINE_PAYLOAD) {
            size_t nl = line_end(sc, buf, len);
            if (!nl) return TM_OK;
            sc->pos = nl + 1;
            sc->state = SCAN_ITEM_HEADER;
            continue;
        }
        if (sc->state == SCAN_ITEM_HEADER) {
            while (sc->pos < len && is_blank(buf[sc->pos])) sc->pos++;
            if (sc->pos >= len) return TM_OK;
            if (sc->n_items == TM_SRV_MAX_ITEMS)
                return tm_srv_fail(err, TM_ERR_LIMIT, sc->pos, "more than %u items in the envelope", TM_SRV_MAX_ITEMS);
        }
        size_t nl = line_end(sc, buf, len);
        if (!nl) {
            if (len - sc->pos > TM_SRV_MAX_HEADER_BYTES)
                return tm_srv_fail(err, TM_ERR_LIMIT, sc->pos, "header line longer than %u bytes",
                                   TM_SRV_MAX_HEADER_BYTES);
            return TM_OK;
        }
        size_t after;
        tm_status st;
        if (sc->state == SCAN_ENVELOPE_HEADER) {
            tm_srv_envelope env = {0};
            if ((st = read_envelope_header(buf, nl + 1, &env, &after, err))) return st;
            sc->has_dsn = env.dsn.ptr != NULL;
            sc->dsn_offset = sc->has_dsn ? (size_t)((const uint8_t *)env.dsn.ptr - buf) : 0;
            sc->dsn_len = env.dsn.len;
            sc->header_done = 1;
            sc->pos = after;
            sc->state = SCAN_ITEM_HEADER;
            continue;
        }
        tm_srv_item it;
        int has_length;
        uint64_t length;
        if ((st = read_item_header(buf, nl + 1, sc->pos, &it, &has_length, &length, &after, err))) return st;
        sc->n_items++;
        if (has_length && length > max_len - (after < max_len ? after : max_len))
            return tm_srv_fail(err, TM_ERR_LIMIT, sc->pos, "item declares length %llu, more than the %llu-byte "
                               "envelope limit leaves", (unsigned long long)length, (unsigned long long)max_len);
        sc->pos = after;
        sc->payload_end = after + length;
        sc->state = has_length ? SCAN_SIZED_PAYLOAD : SCAN_LINE_PAYLOAD;
    }
}

/* Relay's split_item_payload: the compound split is used only when
 * meta_length <= payload_len; an empty raw part is reported as no raw
 * ({NULL, 0}), so meta_length == payload_len gives json = payload, no raw,
 * and still returns 1 (the item is compound and in range). */
int tm_srv_item_split(const tm_srv_item *item, tm_srv_view *json, tm_srv_view *raw) {
    const char *p = (const char *)item->payload;
    raw->ptr = NULL;
    raw->len = 0;
    json->ptr = p;
    json->len = item->payload_len;
    if (!item->has_meta_length || item->meta_length > item->payload_len) return 0;
    json->len = (size_t)item->meta_length;
    if (json->len < item->payload_len) {
        raw->ptr = p + json->len;
        raw->len = item->payload_len - json->len;
    }
    return 1;
}

/* The header must be a single line (no '\n'); the caller builds it. */
int tm_srv_envelope_write_item(tm_srv_buf *out, const char *header_json, size_t header_len,
                               const void *payload, size_t payload_len) {
    size_t old = out->len;
    if (tm_srv_buf_append(out, header_json, header_len) || tm_srv_buf_append(out, "\n", 1) ||
        tm_srv_buf_append(out, payload, payload_len) || tm_srv_buf_append(out, "\n", 1)) {
        out->len = old;
        return -1;
    }
    return 0;
}
