/*
 * proguard.c — reads ProGuard/R8 mapping files (mapping.txt) into Perfetto
 * DeobfuscationMapping packets (symbolize.h).
 *
 * The format, line by line:
 *     com.example.Main -> a.a:                       a class and its new name
 *         int count -> b                             a field
 *         void run() -> c                            a method
 *         1:3:void foo(int):54:56 -> a               with its obfuscated line range
 *         4:4:void bar():60 -> a                       and original first line
 *         5:5:void inlined():70:70 -> a              the same range again: an
 *         5:5:void caller():12 -> a                    inline chain, innermost first
 *         java.lang.String other.Cls.moved() -> d    a method moved from another class
 *     # {"id":"sourceFile","fileName":"Main.java"}   R8 metadata: skipped, as comments
 * A member before any class or after a class line not understood, or a
 * line that is none of these, is counted and skipped; nothing in the text
 * can make the parser fail or loop: it reads each byte once, with no
 * recursion and no limits of its own.
 */
#include <string.h>

#include "perfetto/fields.h"
#include "symbolize/symbolize.h"

typedef struct span {
    const char *p, *end;
} span;

static span trim(span s) {
    while (s.p < s.end && (*s.p == ' ' || *s.p == '\t' || *s.p == '\r')) s.p++;
    while (s.end > s.p && (s.end[-1] == ' ' || s.end[-1] == '\t' || s.end[-1] == '\r')) s.end--;
    return s;
}

/* The last occurrence of "->" in s (NULL: none). */
static const char *arrow(span s) {
    for (const char *q = s.end - 1; q > s.p; q--)
        if (q[-1] == '-' && q[0] == '>') return q - 1;
    return NULL;
}

/* A decimal number at *p (advanced past it); false when there is none. */
static bool number(const char **p, const char *end, uint32_t *out) {
    uint64_t v = 0;
    const char *q = *p;
    while (q < end && *q >= '0' && *q <= '9' && v <= UINT32_MAX) v = v * 10 + (uint64_t)(*q++ - '0');
    if (q == *p || v > UINT32_MAX) return false;
    *p = q;
    *out = (uint32_t)v;
    return true;
}

static void member(tm_obuf *out, span left, span obf, tm_proguard_counts *c) {
    uint32_t a = 0, b = 0, orig_a = 0, orig_b = 0;
    const char *p = left.p;
    /* "a:b:" */
    const char *q = p;
    if (number(&q, left.end, &a) && q < left.end && *q == ':' && (q++, number(&q, left.end, &b)) && q < left.end &&
        *q == ':')
        p = q + 1;
    else
        a = b = 0;
    const char *paren = p;
    while (paren < left.end && *paren != '(') paren++;
    if (paren == left.end) paren = NULL;
    span name;
    if (paren) {
        const char *close = paren;
        while (close < left.end && *close != ')') close++;
        if (close == left.end) {
            c->lines_skipped++;
            return;
        }
        name.end = paren;
        name.p = paren;
        while (name.p > p && name.p[-1] != ' ' && name.p[-1] != '\t') name.p--;
        /* ":c" or ":c:d" after the arguments */
        q = close + 1;
        if (q < left.end && *q == ':' && (q++, number(&q, left.end, &orig_a))) {
            orig_b = orig_a;
            if (q < left.end && *q == ':') q++, number(&q, left.end, &orig_b);
        } else if (a) {
            orig_a = a, orig_b = b; /* no original range: the lines were kept */
        }
    } else {
        name.end = left.end;
        name.p = left.end;
        while (name.p > p && name.p[-1] != ' ' && name.p[-1] != '\t') name.p--;
    }
    if (name.p == name.end || obf.p == obf.end) {
        c->lines_skipped++;
        return;
    }
    size_t m = tm_obuf_open(out, paren ? TM_PF_OBF_CLASS_OBFUSCATED_METHODS : TM_PF_OBF_CLASS_OBFUSCATED_MEMBERS);
    tm_obuf_bytes(out, TM_PF_OBF_MEMBER_OBFUSCATED_NAME, obf.p, (size_t)(obf.end - obf.p));
    tm_obuf_bytes(out, TM_PF_OBF_MEMBER_DEOBFUSCATED_NAME, name.p, (size_t)(name.end - name.p));
    if (a || b) {
        tm_obuf_uint(out, TM_PF_OBF_MEMBER_OBFUSCATED_LINE_START, a);
        tm_obuf_uint(out, TM_PF_OBF_MEMBER_OBFUSCATED_LINE_END, b);
    }
    if (orig_a || orig_b) {
        tm_obuf_uint(out, TM_PF_OBF_MEMBER_SOURCE_LINE_START, orig_a);
        tm_obuf_uint(out, TM_PF_OBF_MEMBER_SOURCE_LINE_END, orig_b);
    }
    tm_obuf_close(out, m);
    if (paren) c->methods++;
    else c->fields++;
}

tm_status tm_proguard_encode(const char *text, size_t len, const char *package, tm_obuf *out,
                             tm_proguard_counts *c) {
    memset(c, 0, sizeof *c);
    size_t pkt = tm_obuf_open(out, TM_PF_TRACE_PACKET);
    size_t map = tm_obuf_open(out, TM_PF_PACKET_DEOBFUSCATION_MAPPING);
    if (package) tm_obuf_bytes(out, TM_PF_DEOBF_PACKAGE_NAME, package, strlen(package));
    size_t cls = 0;
    bool in_class = false;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        span line = {p, nl ? nl : end};
        p = nl ? nl + 1 : end;
        span t = trim(line);
        if (t.p == t.end || *t.p == '#') continue;
        bool indented = line.p < line.end && (*line.p == ' ' || *line.p == '\t');
        if (!indented && in_class) { /* the members of a class line not understood are not the previous class's */
            tm_obuf_close(out, cls);
            in_class = false;
        }
        const char *arw = arrow(t);
        if (!arw) {
            c->lines_skipped++;
            continue;
        }
        span left = trim((span){t.p, arw}), right = trim((span){arw + 2, t.end});
        if (!indented) {
            if (right.p == right.end || right.end[-1] != ':' || left.p == left.end) {
                c->lines_skipped++;
                continue;
            }
            right = trim((span){right.p, right.end - 1}); /* "a.a :" */
            if (right.p == right.end) {
                c->lines_skipped++;
                continue;
            }
            cls = tm_obuf_open(out, TM_PF_DEOBF_OBFUSCATED_CLASSES);
            in_class = true;
            tm_obuf_bytes(out, TM_PF_OBF_CLASS_OBFUSCATED_NAME, right.p, (size_t)(right.end - right.p));
            tm_obuf_bytes(out, TM_PF_OBF_CLASS_DEOBFUSCATED_NAME, left.p, (size_t)(left.end - left.p));
            c->classes++;
        } else if (!in_class) {
            c->lines_skipped++;
        } else {
            member(out, left, right, c);
        }
    }
    if (in_class) tm_obuf_close(out, cls);
    tm_obuf_close(out, map);
    tm_obuf_close(out, pkt);
    return out->st;
}
