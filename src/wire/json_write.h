/*
 * json_write.h — a small buffered JSON emitter over a tm_sink, fast enough
 * for hundreds of millions of samples: raw appends are memcpy into a 64 KiB
 * buffer, or straight into the sink's memory when it lends it (tm_sink.lend:
 * no copy of the output), integers are formatted by hand.
 *
 * Strings are always valid UTF-8 on output: invalid input bytes become
 * U+FFFD. Doubles are printed as serde_json does (shortest round-trip
 * digits, ryu's layout: "1700000001.0", "1771278044.23", "1e30").
 *
 * Not thread-safe; one writer per output.
 */
#ifndef TM_JSON_WRITE_H
#define TM_JSON_WRITE_H

#include "common/base.h" /* tm_str */

typedef struct tm_jw {
    const tm_sink *sink;
    uint8_t *buf; /* own, or the window the sink lent (see tm_sink.lend) */
    size_t len, cap;
    int failed;
    uint8_t own[1 << 16];
} tm_jw;

void tm_jw_init(tm_jw *w, const tm_sink *sink);
/* Flushes; returns TM_OK or TM_ERR_IO if any write failed. */
tm_status tm_jw_finish(tm_jw *w);
/* Hands what is buffered to the sink (and gives a lent window back), so
 * that writes straight to the sink may follow. */
void tm_jw_flush(tm_jw *w);
/* Out of line: room for n more bytes. Returns 1 when there is none to be
 * had (s, n bytes, then went to the sink directly or was dropped after a
 * failure), 0 when the caller may write at buf + len. */
int tm_jw_room(tm_jw *w, const void *s, size_t n);

static inline void tm_jw_raw(tm_jw *w, const void *s, size_t n) {
    if (TM_UNLIKELY(w->cap - w->len < n) && tm_jw_room(w, s, n)) return;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

/* Space for n bytes written in place; finish with tm_jw_commit. n must be
 * at most 4 KiB. */
static inline char *tm_jw_reserve(tm_jw *w, size_t n) {
    if (TM_UNLIKELY(w->cap - w->len < n)) tm_jw_room(w, NULL, n);
    return (char *)w->buf + w->len;
}
static inline void tm_jw_commit(tm_jw *w, const char *end) { w->len = (size_t)((const uint8_t *)end - w->buf); }
/* Where to write a piece of at most n bytes without asking the sink for
 * room: in place when the buffer has it, else in scratch (n bytes); then
 * tm_jw_end. The sink is asked for exactly what was written, as by
 * tm_jw_raw: a capped sink refuses nothing that fits. */
static inline char *tm_jw_begin(tm_jw *w, size_t n, char *scratch) {
    return w->cap - w->len >= n ? (char *)w->buf + w->len : scratch;
}
static inline void tm_jw_end(tm_jw *w, const char *start, const char *end, const char *scratch) {
    if (start == scratch) tm_jw_raw(w, scratch, (size_t)(end - scratch));
    else tm_jw_commit(w, end);
}
/* The end of the room after a tm_jw_reserve: a writer of many small
 * records checks its own pointer against it instead of reserving each. */
static inline char *tm_jw_limit(const tm_jw *w) { return (char *)w->buf + w->cap; }

/* Writes v in decimal at p (room for 20 bytes); returns the end. Inline:
 * the sample writer calls it for every sample. */
static inline char *tm_put_u64(char *p, uint64_t v) {
    static const char pairs[201] =
        "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
        "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
        "8081828384858687888990919293949596979899";
    static const uint64_t pow10[20] = {1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
                                       100000000ull, 1000000000ull, 10000000000ull, 100000000000ull,
                                       1000000000000ull, 10000000000000ull, 100000000000000ull,
                                       1000000000000000ull, 10000000000000000ull, 100000000000000000ull,
                                       1000000000000000000ull, 10000000000000000000ull};
    unsigned n = 1;
    while (n < 20 && v >= pow10[n]) n++; /* digits by comparison: no division a digit */
    char *e = p + n, *q = e; /* written in place, last digits first: no copy */
    while (v >= 100) {
        q -= 2;
        memcpy(q, pairs + (v % 100) * 2, 2);
        v /= 100;
    }
    if (v >= 10) {
        q -= 2;
        memcpy(q, pairs + v * 2, 2);
    } else {
        *--q = (char)('0' + v);
    }
    return e;
}

#define tm_jw_lit(w, s) tm_jw_raw((w), (s), sizeof(s) - 1) /* s: a literal or an array, never a pointer */

static inline void tm_jw_char(tm_jw *w, char c) {
    if (TM_UNLIKELY(w->len == w->cap)) tm_jw_room(w, NULL, 1);
    w->buf[w->len++] = (uint8_t)c;
}

void tm_jw_u64(tm_jw *w, uint64_t v);
void tm_jw_i64(tm_jw *w, int64_t v);
void tm_jw_str(tm_jw *w, tm_str s);      /* quoted, escaped, UTF-8 repaired */
/* Whether tm_jw_str writes s as it is between its quotes (ASCII, nothing
 * to escape): a string written many times is then checked once. */
bool tm_jw_plain(tm_str s);
void tm_jw_cstr(tm_jw *w, const char *s);/* quoted */
void tm_jw_hex(tm_jw *w, uint64_t v);    /* "0x1f" (quoted, lowercase, no padding) */
/* tm_jw_hex's text written at p (room for 20 bytes); returns the end. */
char *tm_put_hex(char *p, uint64_t v);
/* s quoted at p (room for s.len + 2 bytes) when tm_jw_str would write it
 * so; returns the end, or NULL when s needs escaping. */
char *tm_put_plain_str(char *p, tm_str s);
void tm_jw_f64(tm_jw *w, double v);      /* serde_json's format; null if not finite */
void tm_jw_seconds(tm_jw *w, int64_t ns);/* exact: 1700000001.01 from ns */
/* tm_jw_seconds' text written at p (room for 32 bytes); returns the end. */
char *tm_put_seconds(char *p, int64_t ns);

/* Formats a double like serde_json into buf (>= 32 bytes); returns length. */
size_t tm_format_f64(double v, char *buf);

#endif
