/*
 * json_read.c — the JSON pull tokenizer of json_read.h: a state machine
 * over the grammar of RFC 8259 (what may come next: a value, a member name,
 * a comma or a close), string scanning with escape and UTF-8 validation,
 * number syntax, and the exact decimal scaling used for timestamps.
 *
 * Hot loop: Sample v2 samples are small objects, so most tokens are short
 * keys, numbers and strings; blanks and plain string bytes are skipped in
 * tight loops and nothing is copied.
 */
#include "wire/json_read.h"

enum {
    EXPECT_VALUE,          /* document start, after ':' and after ',' in an array */
    EXPECT_VALUE_OR_CLOSE, /* after '[' */
    EXPECT_KEY,            /* after ',' in an object */
    EXPECT_KEY_OR_CLOSE,   /* after '{' */
    EXPECT_COMMA_OR_CLOSE, /* after a value inside a container */
    EXPECT_END             /* after the top-level value */
};

void tm_json_reader_init(tm_json_reader *r, const uint8_t *buf, size_t len) {
    memset(r, 0, sizeof *r);
    r->base = r->p = buf;
    r->end = buf + len;
    r->expect = EXPECT_VALUE;
}

void tm_json_reader_at(tm_json_reader *r, const uint8_t *buf, size_t len, size_t offset) {
    tm_json_reader_init(r, buf, len);
    r->p = buf + (offset < len ? offset : len);
    r->one_value = 1;
}

static tm_json_type fail(tm_json_reader *r, tm_status code, const uint8_t *at, const char *msg) {
    r->err_code = code;
    r->err = msg;
    r->err_offset = (size_t)(at - r->base);
    r->p = r->end; /* sticky: every later call fails too */
    return TM_JSON_ERROR;
}

static tm_json_type truncated(tm_json_reader *r, const char *msg) {
    return fail(r, TM_ERR_TRUNCATED, r->end, msg);
}

static int is_blank(uint8_t c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }
static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

static int hex_digit(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The string whose '"' is at r->p; on success r->p is past the closing quote. */
static tm_json_type scan_string(tm_json_reader *r, tm_json_token *t, tm_json_type type) {
    const uint8_t *start = r->p, *q = start + 1, *e = r->end;
    int escaped = 0;
    for (;;) {
        while (q < e && *q >= 0x20 && *q != '"' && *q != '\\' && *q < 0x80) q++;
        if (q == e) return fail(r, TM_ERR_TRUNCATED, start, "unterminated string");
        uint8_t c = *q;
        if (c == '"') break;
        if (c == '\\') {
            escaped = 1;
            if (q + 1 == e) return fail(r, TM_ERR_TRUNCATED, start, "unterminated string");
            uint8_t x = q[1];
            if (x == 'u') {
                if (e - q < 6) {
                    for (const uint8_t *h = q + 2; h < e; h++)
                        if (hex_digit(*h) < 0) return fail(r, TM_ERR_MALFORMED, q, "bad \\u escape in string");
                    return fail(r, TM_ERR_TRUNCATED, start, "unterminated string");
                }
                for (int i = 2; i < 6; i++)
                    if (hex_digit(q[i]) < 0) return fail(r, TM_ERR_MALFORMED, q, "bad \\u escape in string");
                q += 6;
            } else if (x == '"' || x == '\\' || x == '/' || x == 'b' || x == 'f' || x == 'n' || x == 'r' ||
                       x == 't') {
                q += 2;
            } else {
                return fail(r, TM_ERR_MALFORMED, q, "bad escape in string");
            }
        } else if (c < 0x20) {
            return fail(r, TM_ERR_MALFORMED, q, "control character in string");
        } else {
            size_t n = tm_utf8_seq(q, e);
            if (!n) {
                /* A sequence cut by the end of the input is truncation. */
                size_t want = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
                int cut = c >= 0xc2 && c <= 0xf4 && (size_t)(e - q) < want;
                for (size_t i = 1; cut && q + i < e; i++) cut = (q[i] & 0xc0) == 0x80;
                if (cut) return fail(r, TM_ERR_TRUNCATED, start, "unterminated string");
                return fail(r, TM_ERR_MALFORMED, q, "invalid UTF-8 in string");
            }
            q += n;
        }
    }
    t->type = type;
    t->text.data = start + 1;
    t->text.len = (size_t)(q - start - 1);
    t->offset = (size_t)(start - r->base);
    t->escaped = escaped;
    r->p = q + 1;
    return type;
}

/* The number starting at r->p: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static tm_json_type scan_number(tm_json_reader *r, tm_json_token *t) {
    const uint8_t *start = r->p, *q = start, *e = r->end;
    if (*q == '-') q++;
    if (q == e) return truncated(r, "number cut short");
    if (*q == '0') q++;
    else if (is_digit(*q)) while (q < e && is_digit(*q)) q++;
    else return fail(r, TM_ERR_MALFORMED, q, "bad number");
    if (q < e && *q == '.') {
        q++;
        if (q == e) return truncated(r, "number cut short");
        if (!is_digit(*q)) return fail(r, TM_ERR_MALFORMED, q, "bad number: no digit after '.'");
        while (q < e && is_digit(*q)) q++;
    }
    if (q < e && (*q == 'e' || *q == 'E')) {
        q++;
        if (q < e && (*q == '+' || *q == '-')) q++;
        if (q == e) return truncated(r, "number cut short");
        if (!is_digit(*q)) return fail(r, TM_ERR_MALFORMED, q, "bad number: no digit in the exponent");
        while (q < e && is_digit(*q)) q++;
    }
    t->type = TM_JSON_NUMBER;
    t->text.data = start;
    t->text.len = (size_t)(q - start);
    t->offset = (size_t)(start - r->base);
    t->escaped = 0;
    r->p = q;
    return TM_JSON_NUMBER;
}

static tm_json_type scan_literal(tm_json_reader *r, tm_json_token *t, const char *word, size_t n,
                                 tm_json_type type) {
    size_t have = (size_t)(r->end - r->p);
    if (have < n) {
        if (memcmp(r->p, word, have) == 0) return truncated(r, "literal cut short");
        return fail(r, TM_ERR_MALFORMED, r->p, "unexpected character");
    }
    if (memcmp(r->p, word, n) != 0) return fail(r, TM_ERR_MALFORMED, r->p, "unexpected character");
    t->type = type;
    t->text.data = r->p;
    t->text.len = n;
    t->offset = (size_t)(r->p - r->base);
    t->escaped = 0;
    r->p += n;
    return type;
}

static void after_value(tm_json_reader *r) { r->expect = r->depth ? EXPECT_COMMA_OR_CLOSE : EXPECT_END; }

static tm_json_type open_container(tm_json_reader *r, tm_json_token *t, int object) {
    if (r->depth == TM_JSON_MAX_DEPTH) return fail(r, TM_ERR_LIMIT, r->p, "nesting deeper than 64 levels");
    uint64_t bit = (uint64_t)1 << r->depth;
    r->in_object = object ? r->in_object | bit : r->in_object & ~bit;
    r->depth++;
    r->expect = object ? EXPECT_KEY_OR_CLOSE : EXPECT_VALUE_OR_CLOSE;
    t->type = object ? TM_JSON_OBJECT : TM_JSON_ARRAY;
    t->text.data = r->p;
    t->text.len = 1;
    t->offset = (size_t)(r->p - r->base);
    t->escaped = 0;
    r->p++;
    return t->type;
}

static int top_is_object(const tm_json_reader *r) { return (r->in_object >> (r->depth - 1)) & 1; }

/* The '}' or ']' at r->p, which must match the open container. */
static tm_json_type close_container(tm_json_reader *r, tm_json_token *t) {
    int object = *r->p == '}';
    if (object != top_is_object(r))
        return fail(r, TM_ERR_MALFORMED, r->p, object ? "'}' closes an array" : "']' closes an object");
    r->depth--;
    after_value(r);
    t->type = object ? TM_JSON_OBJECT_END : TM_JSON_ARRAY_END;
    t->text.data = r->p;
    t->text.len = 1;
    t->offset = (size_t)(r->p - r->base);
    t->escaped = 0;
    r->p++;
    return t->type;
}

static tm_json_type scan_value(tm_json_reader *r, tm_json_token *t) {
    tm_json_type ty;
    switch (*r->p) {
    case '{': return open_container(r, t, 1);
    case '[': return open_container(r, t, 0);
    case '"': ty = scan_string(r, t, TM_JSON_STRING); break;
    case 't': ty = scan_literal(r, t, "true", 4, TM_JSON_TRUE); break;
    case 'f': ty = scan_literal(r, t, "false", 5, TM_JSON_FALSE); break;
    case 'n': ty = scan_literal(r, t, "null", 4, TM_JSON_NULL); break;
    default:
        if (*r->p == '-' || is_digit(*r->p)) ty = scan_number(r, t);
        else return fail(r, TM_ERR_MALFORMED, r->p, "expected a value");
    }
    if (ty != TM_JSON_ERROR) after_value(r);
    return ty;
}

static tm_json_type scan_key(tm_json_reader *r, tm_json_token *t) {
    if (*r->p != '"') return fail(r, TM_ERR_MALFORMED, r->p, "expected a member name");
    if (scan_string(r, t, TM_JSON_KEY) == TM_JSON_ERROR) return TM_JSON_ERROR;
    while (r->p < r->end && is_blank(*r->p)) r->p++;
    if (r->p == r->end) return truncated(r, "input ends after a member name");
    if (*r->p != ':') return fail(r, TM_ERR_MALFORMED, r->p, "expected ':' after a member name");
    r->p++;
    r->expect = EXPECT_VALUE;
    return TM_JSON_KEY;
}

tm_json_type tm_json_next(tm_json_reader *r, tm_json_token *t) {
    if (r->err_code != TM_OK) return TM_JSON_ERROR;
    while (r->p < r->end && is_blank(*r->p)) r->p++;
    if (r->expect == EXPECT_END) {
        if (r->p == r->end || r->one_value) {
            t->type = TM_JSON_DONE;
            t->text.data = r->p;
            t->text.len = 0;
            t->offset = (size_t)(r->p - r->base);
            t->escaped = 0;
            return TM_JSON_DONE;
        }
        return fail(r, TM_ERR_MALFORMED, r->p, "unexpected data after the JSON value");
    }
    if (r->p == r->end) return truncated(r, "input ends inside the JSON value");
    uint8_t c = *r->p;
    switch (r->expect) {
    case EXPECT_COMMA_OR_CLOSE:
        if (c == '}' || c == ']') return close_container(r, t);
        if (c != ',')
            return fail(r, TM_ERR_MALFORMED, r->p, top_is_object(r) ? "expected ',' or '}'" : "expected ',' or ']'");
        r->p++;
        while (r->p < r->end && is_blank(*r->p)) r->p++;
        if (r->p == r->end) return truncated(r, "input ends inside the JSON value");
        if (top_is_object(r)) return scan_key(r, t);
        if (*r->p == ']') return fail(r, TM_ERR_MALFORMED, r->p, "trailing comma in array");
        return scan_value(r, t);
    case EXPECT_KEY_OR_CLOSE:
        if (c == '}') return close_container(r, t);
        return scan_key(r, t);
    case EXPECT_KEY: return scan_key(r, t);
    case EXPECT_VALUE_OR_CLOSE:
        if (c == ']') return close_container(r, t);
        return scan_value(r, t);
    default: return scan_value(r, t);
    }
}

int tm_json_skip(tm_json_reader *r, const tm_json_token *t) {
    if (t->type != TM_JSON_OBJECT && t->type != TM_JSON_ARRAY) return t->type != TM_JSON_ERROR;
    uint32_t depth = r->depth - 1;
    tm_json_token tok;
    while (r->depth > depth)
        if (tm_json_next(r, &tok) == TM_JSON_ERROR) return 0;
    return 1;
}

/* Four hex digits (validated by the reader). */
static uint32_t hex4(const uint8_t *p) {
    return (uint32_t)(hex_digit(p[0]) << 12 | hex_digit(p[1]) << 8 | hex_digit(p[2]) << 4 | hex_digit(p[3]));
}

static size_t put_utf8(uint8_t *d, uint32_t cp) {
    if (cp < 0x80) {
        d[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        d[0] = (uint8_t)(0xc0 | cp >> 6);
        d[1] = (uint8_t)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        d[0] = (uint8_t)(0xe0 | cp >> 12);
        d[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        d[2] = (uint8_t)(0x80 | (cp & 0x3f));
        return 3;
    }
    d[0] = (uint8_t)(0xf0 | cp >> 18);
    d[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
    d[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
    d[3] = (uint8_t)(0x80 | (cp & 0x3f));
    return 4;
}

size_t tm_json_unescape(tm_bytes text, uint8_t *dst) {
    const uint8_t *s = text.data, *e = text.data + text.len;
    uint8_t *d = dst;
    while (s < e) {
        if (*s != '\\') {
            *d++ = *s++;
            continue;
        }
        uint8_t x = s[1];
        s += 2;
        switch (x) {
        case 'b': *d++ = '\b'; break;
        case 'f': *d++ = '\f'; break;
        case 'n': *d++ = '\n'; break;
        case 'r': *d++ = '\r'; break;
        case 't': *d++ = '\t'; break;
        case 'u': {
            uint32_t cp = hex4(s);
            s += 4;
            if (cp >= 0xd800 && cp <= 0xdbff && e - s >= 6 && s[0] == '\\' && s[1] == 'u') {
                uint32_t lo = hex4(s + 2);
                if (lo >= 0xdc00 && lo <= 0xdfff) {
                    cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                    s += 6;
                }
            }
            if (cp >= 0xd800 && cp <= 0xdfff) cp = 0xfffd; /* a lone surrogate */
            d += put_utf8(d, cp);
            break;
        }
        default: *d++ = x; /* '"', '\\', '/' */
        }
    }
    return (size_t)(d - dst);
}

tm_status tm_json_str(tm_arena *ar, const tm_json_token *t, tm_str *out) {
    if (!t->escaped) {
        *out = t->text;
        return TM_OK;
    }
    uint8_t *d = tm_arena_alloc(ar, t->text.len);
    if (!d) return TM_ERR_NOMEM;
    out->data = d;
    out->len = tm_json_unescape(t->text, d);
    return TM_OK;
}

int tm_json_eq(const tm_json_token *t, const char *name) {
    size_t n = strlen(name);
    if (!t->escaped) return t->text.len == n && memcmp(t->text.data, name, n) == 0;
    uint8_t buf[256];
    if (t->text.len > sizeof buf) return 0; /* decodes to at least len/6 bytes */
    size_t m = tm_json_unescape(t->text, buf);
    return m == n && memcmp(buf, name, n) == 0;
}

int tm_json_u64(const tm_json_token *t, uint64_t *out) {
    if (t->type != TM_JSON_NUMBER || !t->text.len) return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < t->text.len; i++) {
        uint8_t c = t->text.data[i];
        if (!is_digit(c)) return 0;
        if (v > (UINT64_MAX - (uint64_t)(c - '0')) / 10) return 0;
        v = v * 10 + (uint64_t)(c - '0');
    }
    *out = v;
    return 1;
}

int tm_json_scaled_i64(const tm_json_token *t, unsigned scale, int64_t *out) {
    if (t->type != TM_JSON_NUMBER || scale > 18) return 0;
    const uint8_t *s = t->text.data, *e = s + t->text.len;
    int neg = s < e && *s == '-';
    s += neg;
    const uint8_t *int_digits = s;
    while (s < e && is_digit(*s)) s++;
    size_t n_int = (size_t)(s - int_digits), n_frac = 0;
    const uint8_t *frac_digits = s;
    if (s < e && *s == '.') {
        frac_digits = ++s;
        while (s < e && is_digit(*s)) s++;
        n_frac = (size_t)(s - frac_digits);
    }
    int64_t exp = 0;
    if (s < e && (*s == 'e' || *s == 'E')) {
        s++;
        int exp_neg = s < e && *s == '-';
        if (s < e && (*s == '-' || *s == '+')) s++;
        while (s < e && is_digit(*s)) {
            if (exp < ((int64_t)1 << 40)) exp = exp * 10 + (*s - '0'); /* beyond: only 0 fits */
            s++;
        }
        if (exp_neg) exp = -exp;
    }
    if (s != e || !n_int) return 0;
    if (!exp && n_frac <= scale && n_int + scale <= 18) {
        /* The common case (seconds with up to 9 decimals): exact in one go. */
        static const uint64_t pow10[19] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000,
                                           1000000000, 10000000000ull, 100000000000ull, 1000000000000ull,
                                           10000000000000ull, 100000000000000ull, 1000000000000000ull,
                                           10000000000000000ull, 100000000000000000ull, 1000000000000000000ull};
        uint64_t whole = 0, frac = 0;
        for (size_t i = 0; i < n_int; i++) whole = whole * 10 + (uint64_t)(int_digits[i] - '0');
        for (size_t i = 0; i < n_frac; i++) frac = frac * 10 + (uint64_t)(frac_digits[i] - '0');
        uint64_t v = whole * pow10[scale] + frac * pow10[scale - n_frac];
        *out = neg ? -(int64_t)v : (int64_t)v;
        return 1;
    }
    /* The digits d[0..n) (integer then fraction digits) hold the value
     * d * 10^-n_frac; scaled, the integer part is d[0..cut). */
    size_t n = n_int + n_frac;
#define DIGIT(i) ((i) < n_int ? int_digits[i] - '0' : frac_digits[(i) - n_int] - '0')
    int64_t cut = (int64_t)n_int + exp + (int64_t)scale;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX, v = 0;
    for (int64_t i = 0; i < cut; i++) {
        uint64_t d = (uint64_t)i < n ? (uint64_t)DIGIT((size_t)i) : 0;
        if (v == 0 && d == 0 && (uint64_t)i >= n) break; /* zero stays zero */
        if (v > (limit - d) / 10) return 0;
        v = v * 10 + d;
    }
    if (cut >= 0 && (uint64_t)cut < n) { /* round half to even on the dropped digits */
        int first = DIGIT((size_t)cut), rest = 0;
        for (size_t i = (size_t)cut + 1; i < n && !rest; i++) rest = DIGIT(i) != 0;
        if (first > 5 || (first == 5 && (rest || (v & 1)))) {
            if (v == limit) return 0;
            v++;
        }
    }
#undef DIGIT
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}
