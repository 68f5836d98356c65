/*
 * base.h — small types and macros every library file uses: byte and string
 * views into the input, the internal error helpers, and TM_TRY.
 *
 * Views never own memory: they point into the caller's input buffer or into
 * a buffer owned by the tm_trace (inflated packets, joined paths).
 */
#ifndef TM_BASE_H
#define TM_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tracemill.h"

typedef struct tm_bytes {
    const uint8_t *data;
    size_t len;
} tm_bytes;

typedef tm_bytes tm_str; /* bytes meant as UTF-8 text (not guaranteed valid) */

#define TM_STR_FMT "%.*s"
#define TM_STR_ARGS(s) (int)(s).len, (const char *)(s).data

static inline bool tm_bytes_eq(tm_bytes a, tm_bytes b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.data, b.data, a.len) == 0);
}

/* Fills err (if not NULL) and returns code. Formats like printf. */
tm_status tm_fail(tm_error *err, tm_status code, uint64_t offset, const char *reason,
                  const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* The trailing reserved_ space of a public struct the caller passed in
 * (type names it in the message): TM_OK when it is all zero, else
 * TM_ERR_INVALID_ARG, since a field this library does not know was set (the
 * program was built against a newer header) or the struct was not
 * zero-initialised. */
tm_status tm_check_reserved(const void *reserved, size_t size, const char *type, tm_error *err);
#define TM_CHECK_RESERVED(s, type, err) \
    ((s) ? tm_check_reserved((s)->reserved_, sizeof (s)->reserved_, type, err) : TM_OK)

/* TM_CHECK_RESERVED of a tm_options (NULL is fine), its tm_limits and its
 * tm_alloc: what every reader taking tm_options checks first. */
tm_status tm_check_options(const tm_options *o, tm_error *err);
/* A writer's tm_value (one the header names) and period_ns (0, or 1 to
 * TM_PERIOD_NS_MAX): TM_ERR_INVALID_ARG naming the writer (who) otherwise. */
tm_status tm_check_value(tm_value v, const char *who, tm_error *err);
tm_status tm_check_period(int64_t period_ns, const char *who, tm_error *err);
/* The same of a tm_symbolize_options (NULL is fine) and its tm_proguard_maps. */
tm_status tm_check_symbolize_options(const tm_symbolize_options *o, tm_error *err);

#define TM_TRY(expr)                        \
    do {                                    \
        tm_status tm_try_st_ = (expr);      \
        if (tm_try_st_ != TM_OK) return tm_try_st_; \
    } while (0)

#if defined(__GNUC__)
#define TM_LIKELY(x) __builtin_expect(!!(x), 1)
#define TM_UNLIKELY(x) __builtin_expect(!!(x), 0)
/* A rarely taken function kept out of its hot callers (their frames and
 * saved registers grow with what is inlined into them). */
#define TM_COLD __attribute__((cold, noinline))
/* A function kept out of line although called from one place: its hot
 * caller's fast path stays small. */
#define TM_NOINLINE __attribute__((noinline))
#else
#define TM_LIKELY(x) (x)
#define TM_UNLIKELY(x) (x)
#define TM_COLD
#define TM_NOINLINE
#endif

/* Signed 128-bit integer: Relay does its clock arithmetic in i128. */
__extension__ typedef __int128 tm_i128;

/* 64-bit mixing hash (splitmix64 finaliser) for integer keys. */
static inline uint64_t tm_hash_u64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 31;
    return x;
}

/* Hash of bytes folded with a seed: eight bytes per multiply, the tail
 * zero-padded, finished with the splitmix mixer. Names and paths hashed
 * here run to tens of bytes, so word steps matter. */
static inline uint64_t tm_hash_bytes(uint64_t seed, tm_bytes b) {
    uint64_t h = seed ^ 0xcbf29ce484222325ull ^ ((uint64_t)b.len << 32);
    size_t i = 0;
    for (; i + 8 <= b.len; i += 8) {
        uint64_t w;
        memcpy(&w, b.data + i, 8);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    if (i < b.len) {
        uint64_t w = 0;
        memcpy(&w, b.data + i, b.len - i);
        h = (h ^ w) * 0x9e3779b97f4a7c15ull;
    }
    return tm_hash_u64(h);
}

/* Length (2..4) of the valid multi-byte UTF-8 sequence at p < e, or 0 if
 * the bytes there are not one (overlong forms and surrogates included). */
static inline size_t tm_utf8_seq(const uint8_t *p, const uint8_t *e) {
    uint8_t c = p[0];
    size_t n;
    uint32_t cp;
    if (c >= 0xc2 && c <= 0xdf) n = 1, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef) n = 2, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4) n = 3, cp = c & 0x07;
    else return 0;
    if ((size_t)(e - p) <= n) return 0;
    for (size_t i = 1; i <= n; i++) {
        if ((p[i] & 0xc0) != 0x80) return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if ((n == 2 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 3 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n + 1;
}

/* 3 when buf starts with a UTF-8 byte order mark (which editors on Windows
 * put in front of text files), else 0. */
static inline size_t tm_utf8_bom_len(const uint8_t *buf, size_t len) {
    return len >= 3 && buf[0] == 0xef && buf[1] == 0xbb && buf[2] == 0xbf ? 3 : 0;
}

static inline int tm_utf8_valid(tm_bytes b) {
    const uint8_t *p = b.data, *e = b.data + b.len;
    while (p < e) {
        if (*p < 0x80) p++;
        else {
            size_t n = tm_utf8_seq(p, e);
            if (!n) return 0;
            p += n;
        }
    }
    return 1;
}

#endif
