/*
 * json_write.c — the buffered JSON emitter (see json_write.h). The double
 * formatter finds the shortest digit string that round-trips (printf with
 * growing precision, checked with strtod) and lays it out with the rules of
 * ryu's format64, which serde_json uses.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "wire/json_write.h" /* tm_jw */

#if defined(__SSE2__)
#include <emmintrin.h> /* plain_prefix: 16 bytes a step */
#endif

void tm_jw_init(tm_jw *w, const tm_sink *sink) {
    w->sink = sink;
    w->len = 0;
    w->failed = 0;
    /* a lending sink gets its first window asked for at the first write */
    w->buf = sink->lend ? NULL : w->own;
    w->cap = sink->lend ? 0 : sizeof w->own;
}

/* After a failure nothing more reaches the sink: the own buffer takes
 * writes and drops them at each flush. */
static void fail(tm_jw *w) {
    w->failed = 1;
    w->buf = w->own;
    w->cap = sizeof w->own;
    w->len = 0;
}

void tm_jw_flush(tm_jw *w) {
    if (w->failed) {
        w->len = 0;
    } else if (w->sink->lend) {
        if (w->buf && w->sink->lend(w->sink->ctx, w->len, 0, NULL, NULL)) fail(w);
        w->buf = w->failed ? w->own : NULL;
        w->cap = w->failed ? sizeof w->own : 0;
        w->len = 0;
    } else {
        if (w->len && w->sink->write(w->sink->ctx, w->buf, w->len)) fail(w);
        w->len = 0;
    }
}

int tm_jw_room(tm_jw *w, const void *s, size_t n) {
    if (!w->failed && w->sink->lend) {
        /* what the window holds becomes output; the sink picks the next
         * window's size (at least n) */
        void *win = NULL;
        size_t cap = 0;
        if (w->sink->lend(w->sink->ctx, w->buf ? w->len : 0, n, &win, &cap) || !win || cap < n) {
            fail(w);
        } else {
            w->buf = win;
            w->cap = cap;
            w->len = 0;
            return 0;
        }
    } else {
        tm_jw_flush(w);
        if (n <= w->cap) return 0;
        if (!w->failed && w->sink->write(w->sink->ctx, s, n)) fail(w);
        return 1;
    }
    return n > w->cap; /* failed: the own buffer drops what fits */
}

tm_status tm_jw_finish(tm_jw *w) {
    tm_jw_flush(w);
    return w->failed ? TM_ERR_IO : TM_OK;
}

static size_t u64_digits(uint64_t v, char *out) { return (size_t)(tm_put_u64(out, v) - out); }

void tm_jw_u64(tm_jw *w, uint64_t v) {
    char b[24];
    tm_jw_raw(w, b, u64_digits(v, b));
}

void tm_jw_i64(tm_jw *w, int64_t v) {
    if (v < 0) {
        tm_jw_char(w, '-');
        tm_jw_u64(w, (uint64_t)0 - (uint64_t)v);
    } else {
        tm_jw_u64(w, (uint64_t)v);
    }
}

char *tm_put_hex(char *o, uint64_t v) {
    static const char pairs[513] =
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f"
        "303132333435363738393a3b3c3d3e3f404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f"
        "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f808182838485868788898a8b8c8d8e8f"
        "909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebf"
        "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef"
        "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff";
    size_t n = ((size_t)(64 - __builtin_clzll(v | 1)) + 3) / 4; /* digits: the count known, written from the end */
    char *q = o + 3 + n;
    o[0] = '"';
    o[1] = '0';
    o[2] = 'x';
    *q = '"';
    for (; q - o >= 5; v >>= 8) { /* two digits a byte */
        q -= 2;
        memcpy(q, pairs + (v & 255) * 2, 2);
    }
    if (q - o == 4) o[3] = "0123456789abcdef"[v & 15];
    return o + 4 + n;
}

void tm_jw_hex(tm_jw *w, uint64_t v) { tm_jw_commit(w, tm_put_hex(tm_jw_reserve(w, 20), v)); }

char *tm_put_seconds(char *p, int64_t ns) {
    uint64_t u = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    if (ns < 0) *p++ = '-';
    p = tm_put_u64(p, u / 1000000000u);
    *p++ = '.';
    uint64_t frac = u % 1000000000u;
    char f[9];
    for (int i = 8; i >= 0; i--) {
        f[i] = (char)('0' + frac % 10);
        frac /= 10;
    }
    size_t fl = 9;
    while (fl > 1 && f[fl - 1] == '0') fl--;
    memcpy(p, f, fl);
    return p + fl;
}

void tm_jw_seconds(tm_jw *w, int64_t ns) {
    char b[40];
    tm_jw_raw(w, b, (size_t)(tm_put_seconds(b, ns) - b));
}

/* Writes v as "[-]d.ddde[+-]x" with the fewest significant digits that
 * read back as v. printf gives the closest decimal of each length; where
 * the rounding interval is lopsided (powers of two) a neighbour of that
 * decimal can round-trip when the closest does not, so both neighbours are
 * tried at each length before moving on, as ryu's shortest search would. */
static int round_trips(double v, int prec, char out[40]) {
    snprintf(out, 40, "%.*e", prec, v);
    return strtod(out, NULL) == v;
}

static void shortest_digits(double v, char out[40]) {
    /* The correctly rounded prec-digit form round-trips for every prec from
     * some p0 up (a longer form is never farther from v), so p0 is found by
     * bisection: 4 conversions instead of up to 15 (Relay's timestamps need
     * 13 digits). */
    int lo = 0, hi = 15;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (round_trips(v, mid, out)) hi = mid;
        else lo = mid + 1;
    }
    if (lo < 15) {
        round_trips(v, lo, out);
        return;
    }
    for (int prec = 15; prec < 17; prec++) {
        if (round_trips(v, prec, out)) return;
        /* at 16 and 17 digits a neighbour of the closest form may round-trip
         * where it does not: the mantissa digits as an integer, +-1 */
        const char *p = out + (out[0] == '-');
        char *e = strchr(out, 'e');
        uint64_t m = 0;
        for (const char *q = p; q < e; q++)
            if (*q != '.') m = m * 10 + (uint64_t)(*q - '0');
        long exp10 = strtol(e + 1, NULL, 10);
        for (int delta = -1; delta <= 1; delta += 2) {
            uint64_t c = m + (uint64_t)(int64_t)delta;
            char digits[24], cand[40];
            int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)c);
            if (n != prec + 1) continue; /* carried into another digit: not this length */
            snprintf(cand, sizeof cand, "%s%c.%se%+ld", out[0] == '-' ? "-" : "", digits[0], digits + 1, exp10);
            if (strtod(cand, NULL) == v) {
                memcpy(out, cand, strlen(cand) + 1);
                return;
            }
        }
    }
    snprintf(out, 40, "%.16e", v);
}

size_t tm_format_f64(double v, char *out) {
    if (v == 0) {
        if (signbit(v)) {
            memcpy(out, "-0.0", 4);
            return 4;
        }
        memcpy(out, "0.0", 3);
        return 3;
    }
    char tmp[40];
    shortest_digits(v, tmp);
    /* tmp = [-]d[.ddd]e[+-]xx */
    const char *p = tmp;
    size_t n = 0;
    if (*p == '-') out[n++] = *p++;
    char digits[24];
    size_t len = 0;
    while (*p && *p != 'e') {
        if (*p != '.') digits[len++] = *p;
        p++;
    }
    while (len > 1 && digits[len - 1] == '0') len--;
    int exp10 = (int)strtol(p + 1, NULL, 10); /* value = d.ddd x 10^exp10 */
    int kk = exp10 + 1;      /* 10^(kk-1) <= v < 10^kk */
    int k = kk - (int)len;
    if (k >= 0 && kk <= 16) {
        memcpy(out + n, digits, len);
        n += len;
        for (int i = 0; i < k; i++) out[n++] = '0';
        out[n++] = '.';
        out[n++] = '0';
    } else if (kk > 0 && kk <= 16) {
        memcpy(out + n, digits, (size_t)kk);
        n += (size_t)kk;
        out[n++] = '.';
        memcpy(out + n, digits + kk, len - (size_t)kk);
        n += len - (size_t)kk;
    } else if (kk > -5 && kk <= 0) {
        out[n++] = '0';
        out[n++] = '.';
        for (int i = 0; i < -kk; i++) out[n++] = '0';
        memcpy(out + n, digits, len);
        n += len;
    } else {
        out[n++] = digits[0];
        if (len > 1) {
            out[n++] = '.';
            memcpy(out + n, digits + 1, len - 1);
            n += len - 1;
        }
        n += (size_t)snprintf(out + n, 8, "e%d", kk - 1);
    }
    return n;
}

void tm_jw_f64(tm_jw *w, double v) {
    if (!isfinite(v)) {
        tm_jw_lit(w, "null");
        return;
    }
    char b[40];
    tm_jw_raw(w, b, tm_format_f64(v, b));
}

/* Whether none of the 8 bytes in x needs care in a string: no control
 * byte, '"', '\\' or non-ASCII byte (the exact any-byte tests of "Bit
 * Twiddling Hacks"). Paths and names are mostly plain, so they are
 * scanned a word at a time. */
static inline bool plain8(uint64_t x) {
    const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
    uint64_t quote = x ^ (ones * '"'), backslash = x ^ (ones * '\\');
    uint64_t control = (x - ones * 0x20) & ~x, quotes = (quote - ones) & ~quote,
             backslashes = (backslash - ones) & ~backslash;
    return ((control | quotes | backslashes | x) & high) == 0;
}

/* The same test for one byte. */
static inline bool plain1(uint8_t c) { return c >= 0x20 && c != '"' && c != '\\' && c < 0x80; }

#if defined(__SSE2__)
/* plain8 for 16 bytes: as signed bytes, control and non-ASCII bytes are
 * both below 0x20. */
static inline bool plain16(__m128i x) {
    __m128i care = _mm_or_si128(_mm_cmplt_epi8(x, _mm_set1_epi8(0x20)),
                                _mm_or_si128(_mm_cmpeq_epi8(x, _mm_set1_epi8('"')),
                                             _mm_cmpeq_epi8(x, _mm_set1_epi8('\\'))));
    return _mm_movemask_epi8(care) == 0;
}
#endif

/* How many bytes s starts with that need no care, give or take: exact
 * when that is all of s, else at most the exact count (the scan goes 16
 * or 8 bytes at a time, a string of 16 or 8 bytes or more ending on an
 * overlapping block). Unless copy is NULL, those bytes are copied there
 * as they are scanned. */
static inline __attribute__((always_inline)) size_t plain_prefix(const uint8_t *d, size_t len, uint8_t *copy) {
    size_t i = 0;
#if defined(__SSE2__)
    if (len >= 16) {
        for (; i + 16 <= len; i += 16) {
            __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(d + i));
            if (!plain16(x)) return i;
            if (copy) _mm_storeu_si128((__m128i *)(void *)(copy + i), x);
        }
        if (i == len) return len;
        __m128i x = _mm_loadu_si128((const __m128i *)(const void *)(d + len - 16));
        if (!plain16(x)) return i;
        if (copy) _mm_storeu_si128((__m128i *)(void *)(copy + len - 16), x);
        return len;
    }
#endif
    for (; i + 8 <= len; i += 8) {
        uint64_t x;
        memcpy(&x, d + i, 8);
        if (!plain8(x)) return i;
        if (copy) memcpy(copy + i, &x, 8);
    }
    if (i == len) return len;
    if (len >= 8) {
        uint64_t x;
        memcpy(&x, d + len - 8, 8);
        if (!plain8(x)) return i;
        if (copy) memcpy(copy + len - 8, &x, 8);
        return len;
    }
    for (; i < len; i++) {
        if (!plain1(d[i])) return i;
        if (copy) copy[i] = d[i];
    }
    return len;
}

bool tm_jw_plain(tm_str s) { return plain_prefix(s.data, s.len, NULL) == s.len; }

/* tm_jw_str of a string that needs escaping (or is long): out of line,
 * so that the common case saves no registers for it. */
static TM_COLD void put_escaped(tm_jw *w, tm_str s) {
    tm_jw_char(w, '"');
    const uint8_t *p = s.data, *e = s.data + s.len, *run = s.data;
    while (p < e) {
        if (e - p >= 8) {
            uint64_t x;
            memcpy(&x, p, 8);
            if (plain8(x)) {
                p += 8;
                continue;
            }
        }
        uint8_t c = *p;
        if (plain1(c)) {
            p++;
            continue;
        }
        size_t seq = c >= 0x80 ? tm_utf8_seq(p, e) : 0;
        if (seq) {
            p += seq;
            continue;
        }
        tm_jw_raw(w, run, (size_t)(p - run));
        if (c == '"') tm_jw_lit(w, "\\\"");
        else if (c == '\\') tm_jw_lit(w, "\\\\");
        else if (c == '\n') tm_jw_lit(w, "\\n");
        else if (c == '\r') tm_jw_lit(w, "\\r");
        else if (c == '\t') tm_jw_lit(w, "\\t");
        else if (c == '\b') tm_jw_lit(w, "\\b");
        else if (c == '\f') tm_jw_lit(w, "\\f");
        else if (c < 0x20) {
            char b[7];
            snprintf(b, sizeof b, "\\u%04x", c);
            tm_jw_raw(w, b, 6);
        } else {
            tm_jw_lit(w, "\xef\xbf\xbd"); /* U+FFFD for an invalid byte */
        }
        p++;
        run = p;
    }
    tm_jw_raw(w, run, (size_t)(p - run));
    tm_jw_char(w, '"');
}

char *tm_put_plain_str(char *p, tm_str s) {
    if (plain_prefix(s.data, s.len, (uint8_t *)p + 1) < s.len) return NULL; /* the bytes copied as they are scanned */
    p[0] = '"';
    p[s.len + 1] = '"';
    return p + s.len + 2;
}

void tm_jw_str(tm_jw *w, tm_str s) {
    char *e = NULL;
    if (TM_LIKELY(s.len <= 4094)) e = tm_put_plain_str(tm_jw_reserve(w, s.len + 2), s); /* the common case */
    if (TM_LIKELY(e)) tm_jw_commit(w, e);
    else put_escaped(w, s); /* what was copied is not committed: written again */
}

void tm_jw_cstr(tm_jw *w, const char *s) {
    tm_str v = {(const uint8_t *)s, strlen(s)};
    tm_jw_str(w, v);
}
