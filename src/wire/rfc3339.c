/*
 * rfc3339.c — RFC 3339 timestamps to and from Unix nanoseconds (see
 * rfc3339.h). Calendar arithmetic counts days from 1970-01-01 by 400-year
 * eras (146097 days each), with March as the first month of the
 * computational year so that the leap day ends it.
 */
#include "wire/rfc3339.h"

/* Days from 1970-01-01 to y-m-d (m 1..12, d 1..31). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    unsigned yoe = (unsigned)(y - era * 400);                      /* [0, 399] */
    unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1; /* [0, 365] */
    unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;          /* [0, 146096] */
    return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, unsigned *m, unsigned *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    unsigned doe = (unsigned)(z - era * 146097);
    unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    unsigned mp = (5 * doy + 2) / 153;
    *d = doy - (153 * mp + 2) / 5 + 1;
    *m = mp < 10 ? mp + 3 : mp - 9;
    *y = (int64_t)yoe + era * 400 + (*m <= 2);
}

static char *put_digits(char *p, uint64_t v, int width) {
    for (int i = width - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
    return p + width;
}

size_t tm_rfc3339_format(int64_t unix_ns, char *out) {
    int64_t secs = unix_ns / 1000000000, frac = unix_ns % 1000000000;
    if (frac < 0) frac += 1000000000, secs--;
    int64_t days = secs / 86400, sod = secs % 86400;
    if (sod < 0) sod += 86400, days--;
    int64_t y;
    unsigned m, d;
    civil_from_days(days, &y, &m, &d);
    char *p = out;
    if (y < 0) *p++ = '-';
    uint64_t ay = y < 0 ? (uint64_t)0 - (uint64_t)y : (uint64_t)y;
    int width = 4;
    for (uint64_t x = ay; x >= 10000; x /= 10) width++;
    p = put_digits(p, ay, width);
    *p++ = '-';
    p = put_digits(p, m, 2);
    *p++ = '-';
    p = put_digits(p, d, 2);
    *p++ = 'T';
    p = put_digits(p, (uint64_t)sod / 3600, 2);
    *p++ = ':';
    p = put_digits(p, (uint64_t)sod / 60 % 60, 2);
    *p++ = ':';
    p = put_digits(p, (uint64_t)sod % 60, 2);
    *p++ = '.';
    p = put_digits(p, (uint64_t)frac, 9);
    *p++ = 'Z';
    return (size_t)(p - out);
}

/* n decimal digits at s[*i]; advances *i. */
static int digits(tm_bytes s, size_t *i, int n, unsigned *out) {
    unsigned v = 0;
    for (int k = 0; k < n; k++, (*i)++) {
        if (*i >= s.len || s.data[*i] < '0' || s.data[*i] > '9') return 0;
        v = v * 10 + (unsigned)(s.data[*i] - '0');
    }
    *out = v;
    return 1;
}

static int expect(tm_bytes s, size_t *i, char c) {
    if (*i >= s.len || s.data[*i] != (uint8_t)c) return 0;
    (*i)++;
    return 1;
}

int tm_rfc3339_parse(tm_bytes s, int64_t *unix_ns) {
    static const unsigned month_days[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    size_t i = 0;
    unsigned y, mo, d, h, mi, sec, frac = 0;
    if (!digits(s, &i, 4, &y) || !expect(s, &i, '-') || !digits(s, &i, 2, &mo) || !expect(s, &i, '-') ||
        !digits(s, &i, 2, &d))
        return 0;
    if (i >= s.len || (s.data[i] != 'T' && s.data[i] != 't' && s.data[i] != ' ')) return 0;
    i++;
    if (!digits(s, &i, 2, &h) || !expect(s, &i, ':') || !digits(s, &i, 2, &mi) || !expect(s, &i, ':') ||
        !digits(s, &i, 2, &sec))
        return 0;
    if (mo < 1 || mo > 12 || d < 1 || d > month_days[mo - 1] || h > 23 || mi > 59 || sec > 60) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo == 2 && d == 29 && !leap) return 0;
    if (i < s.len && s.data[i] == '.') {
        i++;
        size_t start = i;
        unsigned scale = 100000000;
        for (; i < s.len && s.data[i] >= '0' && s.data[i] <= '9'; i++) {
            frac += (unsigned)(s.data[i] - '0') * scale;
            scale /= 10;
        }
        if (i == start) return 0;
    }
    int64_t offset_s = 0;
    if (i < s.len && (s.data[i] == 'Z' || s.data[i] == 'z')) {
        i++;
    } else if (i < s.len && (s.data[i] == '+' || s.data[i] == '-')) {
        int neg = s.data[i++] == '-';
        unsigned oh, om;
        if (!digits(s, &i, 2, &oh) || !expect(s, &i, ':') || !digits(s, &i, 2, &om) || oh > 23 || om > 59) return 0;
        offset_s = (int64_t)(oh * 3600 + om * 60) * (neg ? -1 : 1);
    } else {
        return 0;
    }
    if (i != s.len) return 0;
    /* A leap second (:60) counts as the first second of the next minute. */
    int64_t secs = days_from_civil(y, mo, d) * 86400 + (int64_t)(h * 3600 + mi * 60 + sec) - offset_s;
    /* Years 0000..9999 keep secs within +-2^38: only the nanoseconds can overflow. */
    int64_t ns, sub = frac;
    if (secs < 0 && sub) secs++, sub -= 1000000000; /* so that INT64_MIN itself is reachable */
    if (__builtin_mul_overflow(secs, (int64_t)1000000000, &ns) || __builtin_add_overflow(ns, sub, &ns))
        return 0;
    *unix_ns = ns;
    return 1;
}
