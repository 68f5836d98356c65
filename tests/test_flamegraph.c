/*
 * test_flamegraph.c — SVG flame graphs: tm_write_flamegraph and
 * tm_write_flamegraph_diff (src/out_flamegraph.c).
 *
 * Traces are built with trace_builder.h from a table of stacks (root-first
 * frame names, thread, sample count); the expected call tree — one node per
 * distinct root-first label path, with its sample count — is computed here
 * from that table and compared with the frames parsed back out of the SVG:
 * node count, counts, x/width proportional to counts, children tiling their
 * parent in name order, y by depth (flipped by reverse), thread filters,
 * XML escaping of hostile names, min-width pruning, kind colours, the diff's
 * colours, counts and share deltas, folded input's weights, I/O and
 * allocation failures.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base.h" /* tm_utf8_valid */
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

#define MAX_FRAMES 8
#define AVAIL 1180.0 /* default width 1200 minus 2 x 10 px padding */
#define HEADER 72.0
#define LEVEL 16.0

/* ---- building traces ---- */

/* One stack: frames root first, NULL-terminated. A frame "name|k" is a
 * distinct frame (its own rel_pc) whose function is "name", so frames can
 * share a label; "J:Class.method" lives in a Java mapping (boot.oat). */
typedef struct stk {
    uint32_t tid;
    unsigned count;
    const char *frames[MAX_FRAMES];
} stk;

typedef struct strtab {
    const char *v[64];
    size_t n;
} strtab;

static uint64_t intern(strtab *t, const char *s, size_t len) {
    for (size_t i = 0; i < t->n; i++)
        if (strlen(t->v[i]) == len && memcmp(t->v[i], s, len) == 0) return i + 1;
    cr_assert(t->n < 64);
    t->v[t->n] = strndup(s, len);
    return ++t->n;
}

static void strtab_free(strtab *t) {
    for (size_t i = 0; i < t->n; i++) free((void *)t->v[i]);
}

/* The function name of a frame key. */
static const char *fn_of(const char *key, size_t *len) {
    const char *s = strncmp(key, "J:", 2) == 0 ? key + 2 : key;
    const char *bar = strchr(s, '|');
    *len = bar ? (size_t)(bar - s) : strlen(s);
    return s;
}

/* Threads of pid 10: 10 "main", 11 "worker", 12 "bg". */
static tb_buf build(const stk *stacks, size_t n) {
    tb_buf t = {0};
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[2] = {TB_BOOT0, 1700000000000000000ull};
    tb_clock_snapshot(&t, 0, ids, vals, 2);
    size_t p = tb_packet_open(&t, 2, 1, 0);
    size_t pt = tb_open(&t, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(&t, 10, 10, "main");
    tb_pt_thread(&t, 11, 10, "worker");
    tb_pt_thread(&t, 12, 10, "bg");
    tb_close(&t, pt);
    tb_close(&t, p);

    strtab fns = {0}, frames = {0};
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 1, "libx.so", 7);
    tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 2, "boot.oat", 8);
    const uint64_t lib[1] = {1}, oat[1] = {2};
    tb_mapping(&t, 1, 0, 0x10000, 0x20000, lib, 1);
    tb_mapping(&t, 2, 0, 0x30000, 0x40000, oat, 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t cs[MAX_FRAMES];
        size_t depth = 0;
        for (; stacks[i].frames[depth]; depth++) {
            const char *key = stacks[i].frames[depth];
            size_t before = frames.n, len;
            cs[depth] = intern(&frames, key, strlen(key));
            if (frames.n == before) continue;
            const char *fn = fn_of(key, &len);
            size_t fns_before = fns.n;
            uint64_t fn_iid = intern(&fns, fn, len);
            if (fns.n != fns_before) tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, fn_iid, fn, len);
            tb_frame(&t, cs[depth], fn_iid, strncmp(key, "J:", 2) == 0 ? 2 : 1, 0x10 * cs[depth]);
        }
        tb_callstack(&t, i + 1, cs, depth, 0);
    }
    tb_close(&t, in);
    tb_close(&t, pkt);
    uint64_t ts = TB_BOOT0;
    for (size_t i = 0; i < n; i++)
        for (unsigned k = 0; k < stacks[i].count; k++) tb_perf_sample(&t, 1, ts += 1000, 10, stacks[i].tid, i + 1, 0);
    strtab_free(&fns);
    strtab_free(&frames);
    return t;
}

typedef struct parsed_trace {
    tb_buf buf;
    tm_trace *t;
} parsed_trace;

static parsed_trace parse_with(const stk *stacks, size_t n, const tm_options *o) {
    parsed_trace pt = {build(stacks, n), NULL};
    tm_error err;
    tm_status st = tm_trace_parse(pt.buf.data, pt.buf.len, o, &pt.t, &err);
    cr_assert_eq(st, TM_OK, "parse: %s: %s", tm_status_str(st), err.message);
    return pt;
}

static parsed_trace parse(const stk *stacks, size_t n) { return parse_with(stacks, n, NULL); }

static void parsed_free(parsed_trace *pt) {
    tm_trace_free(pt->t);
    tb_free(&pt->buf);
}

/* ---- the expected call tree, from the stack table ---- */

typedef struct path_count {
    char path[256]; /* labels joined by '\x1f', root ("all") first */
    uint64_t count;
} path_count;

typedef struct expected {
    path_count v[128];
    size_t n;
    uint64_t total;
} expected;

static void expect_add(expected *e, const char *path, uint64_t count) {
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->v[i].path, path) == 0) {
            e->v[i].count += count;
            return;
        }
    cr_assert(e->n < 128);
    snprintf(e->v[e->n].path, sizeof e->v[e->n].path, "%s", path);
    e->v[e->n++].count = count;
}

/* Every prefix of every stack of the selected thread (tid 0: all). */
static expected expect_tree(const stk *stacks, size_t n, uint32_t tid) {
    expected e;
    memset(&e, 0, sizeof e);
    for (size_t i = 0; i < n; i++) {
        if (tid && stacks[i].tid != tid) continue;
        char path[256] = "all";
        expect_add(&e, path, stacks[i].count);
        e.total += stacks[i].count;
        for (size_t d = 0; stacks[i].frames[d]; d++) {
            size_t len, at = strlen(path);
            const char *fn = fn_of(stacks[i].frames[d], &len);
            snprintf(path + at, sizeof path - at, "\x1f%.*s", (int)len, fn);
            expect_add(&e, path, stacks[i].count);
        }
    }
    return e;
}

static const path_count *expect_find(const expected *e, const char *path) {
    for (size_t i = 0; i < e->n; i++)
        if (strcmp(e->v[i].path, path) == 0) return &e->v[i];
    return NULL;
}

/* ---- reading the SVG back ---- */

typedef struct frame {
    uint64_t s, n;
    unsigned d;
    double x, y, w;
    int r, g, b;
    char title[512]; /* XML-unescaped */
    char name[256];  /* title up to its trailing " (" */
    char text[256];
    char path[256];
    int parent;      /* index, -1 for the root */
} frame;

typedef struct svg_doc {
    char *text;
    frame *f;
    size_t n;
} svg_doc;

static void unescape(const char *s, size_t len, char *out, size_t cap) {
    static const struct {
        const char *ent, *ch;
    } ents[] = {{"&lt;", "<"}, {"&gt;", ">"}, {"&amp;", "&"}, {"&quot;", "\""}, {"&apos;", "'"}};
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < cap;) {
        size_t k = 0;
        for (; k < 5; k++)
            if (strncmp(s + i, ents[k].ent, strlen(ents[k].ent)) == 0) break;
        if (k < 5) {
            out[o++] = ents[k].ch[0];
            i += strlen(ents[k].ent);
        } else {
            out[o++] = s[i++];
        }
    }
    out[o] = 0;
}

static const char *between(const char *from, const char *open, const char *close, size_t *len) {
    const char *a = strstr(from, open);
    cr_assert(a, "missing %s", open);
    a += strlen(open);
    const char *b = strstr(a, close);
    cr_assert(b, "missing %s", close);
    *len = (size_t)(b - a);
    return a;
}

static svg_doc parse_svg(char *text) {
    svg_doc doc = {text, NULL, 0};
    size_t cap = 0;
    for (const char *p = strstr(text, "<g class=\"f\""); p; p = strstr(p + 1, "<g class=\"f\"")) {
        if (doc.n == cap) doc.f = realloc(doc.f, (cap = cap ? cap * 2 : 64) * sizeof *doc.f);
        frame *f = &doc.f[doc.n++];
        memset(f, 0, sizeof *f);
        unsigned long long s, n;
        cr_assert_eq(sscanf(p, "<g class=\"f\" data-s=\"%llu\" data-n=\"%llu\" data-d=\"%u\">", &s, &n, &f->d), 3);
        f->s = s, f->n = n;
        size_t len;
        const char *t = between(p, "<title>", "</title>", &len);
        unescape(t, len, f->title, sizeof f->title);
        char *paren = strrchr(f->title, '(');
        cr_assert(paren && paren > f->title + 1 && paren[-1] == ' ', "title: %s", f->title);
        snprintf(f->name, sizeof f->name, "%.*s", (int)(paren - 1 - f->title), f->title);
        const char *rect = strstr(p, "<rect ");
        cr_assert_eq(sscanf(rect, "<rect x=\"%lf\" y=\"%lf\" width=\"%lf\" height=\"15\"", &f->x, &f->y, &f->w), 3);
        cr_assert_eq(sscanf(strstr(rect, "fill=\""), "fill=\"rgb(%d,%d,%d)\"", &f->r, &f->g, &f->b), 3);
        t = between(strstr(p, "<text "), ">", "</text>", &len);
        unescape(t, len, f->text, sizeof f->text);
    }
    /* The parent of a frame: the frame one level down whose sample range
     * holds it. */
    for (size_t i = 0; i < doc.n; i++) {
        frame *f = &doc.f[i];
        f->parent = -1;
        for (size_t j = 0; j < doc.n && f->d; j++)
            if (doc.f[j].d + 1 == f->d && doc.f[j].s <= f->s && f->s + f->n <= doc.f[j].s + doc.f[j].n)
                f->parent = (int)j;
        cr_assert(f->d == 0 || f->parent >= 0, "frame %s has no parent", f->title);
    }
    for (size_t done = 0; done < doc.n;) /* paths, parents first */
        for (size_t i = 0; i < doc.n; i++) {
            frame *f = &doc.f[i];
            if (f->path[0] || (f->parent >= 0 && !doc.f[f->parent].path[0])) continue;
            int len = f->parent < 0 ? snprintf(f->path, sizeof f->path, "%s", f->name)
                                    : snprintf(f->path, sizeof f->path, "%s\x1f%s", doc.f[f->parent].path, f->name);
            cr_assert_lt(len, (int)sizeof f->path);
            done++;
        }
    return doc;
}

static void svg_free(svg_doc *d) {
    free(d->text);
    free(d->f);
}

static tm_status try_write(const tm_trace *base, const tm_trace *t, const tm_flamegraph_options *o, char **out,
                           tm_error *err) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_status st = base ? tm_write_flamegraph_diff(base, t, o, &sink, err) : tm_write_flamegraph(t, o, &sink, err);
    *out = m.data;
    return st;
}

static svg_doc write_svg(const tm_trace *base, const tm_trace *t, const tm_flamegraph_options *o) {
    char *text;
    tm_error err;
    tm_status st = try_write(base, t, o, &text, &err);
    cr_assert_eq(st, TM_OK, "write: %s: %s", tm_status_str(st), err.message);
    return parse_svg(text);
}

static const frame *find_frame(const svg_doc *d, const char *path) {
    for (size_t i = 0; i < d->n; i++)
        if (strcmp(d->f[i].path, path) == 0) return &d->f[i];
    return NULL;
}

/* Well-formedness that does not need a parser: valid UTF-8, no control
 * characters but '\n', every '&' outside CDATA starts one of the five
 * entities; then xmllint when it is installed. */
static void expect_well_formed(const char *text) {
    tm_bytes b = {(const uint8_t *)text, strlen(text)};
    cr_assert(tm_utf8_valid(b), "output is not valid UTF-8");
    for (const char *p = text; *p; p++) {
        if (strncmp(p, "<![CDATA[", 9) == 0) {
            p = strstr(p, "]]>");
            cr_assert(p, "unterminated CDATA section");
        }
        cr_assert((unsigned char)*p >= 0x20 || *p == '\n', "control character 0x%02x at %zu", *p, (size_t)(p - text));
        if (*p == '&')
            cr_assert(!strncmp(p, "&lt;", 4) || !strncmp(p, "&gt;", 4) || !strncmp(p, "&amp;", 5) ||
                          !strncmp(p, "&quot;", 6) || !strncmp(p, "&apos;", 6),
                      "bare & at %zu", (size_t)(p - text));
    }
    if (access("/usr/bin/xmllint", X_OK) != 0) return;
    char path[] = "/tmp/test_flamegraph_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "/usr/bin/xmllint --noout %s", path);
    int rc = system(cmd);
    unlink(path);
    cr_assert_eq(rc, 0, "xmllint rejects the SVG");
}

/* ---- the plain graph ---- */

/* Frames "dup|1" and "dup|2" are different frames with one label; the
 * stacks main;dup|1 and main;dup|2 must merge into one node. */
static const stk MIXED[] = {
    {10, 30, {"main", "work", "leaf", NULL}},
    {10, 20, {"main", "work", NULL}},
    {11, 15, {"main", "dup|1", NULL}},
    {12, 5, {"main", "dup|2", "leaf", NULL}},
    {11, 10, {"main", "J:com.app.Foo.run", "work", NULL}},
    {12, 7, {"idle", NULL}},
    {10, 3, {NULL}}, /* an empty stack: counted in the root only */
};
#define N_MIXED (sizeof MIXED / sizeof *MIXED)

/* Every drawn frame is one label path with the expected count, at
 * x/width proportional to samples; children tile their parent in
 * byte order of their names. */
static void expect_tree_drawn(const svg_doc *d, const expected *e, double avail) {
    cr_assert_eq(d->n, e->n, "%zu frames drawn, %zu label paths (with the root)", d->n, e->n);
    double scale = avail / (double)e->total;
    for (size_t i = 0; i < d->n; i++) {
        const frame *f = &d->f[i];
        const path_count *pc = expect_find(e, f->path);
        cr_assert(pc, "unexpected frame path %s", f->path);
        cr_assert_eq(f->n, pc->count, "%s: %llu samples, want %llu", f->path, (unsigned long long)f->n,
                     (unsigned long long)pc->count);
        double want_w = f->d ? (double)pc->count * scale : avail;
        cr_assert(fabs(f->w - want_w) < 0.006, "%s: width %.2f, want %.4f", f->path, f->w, want_w);
        cr_assert(fabs(f->x - (10 + (double)f->s * scale)) < 0.006, "%s: x %.2f", f->path, f->x);
        if (f->d == 0) continue;
        const frame *parent = &d->f[f->parent];
        /* Siblings left of this one: exactly those with smaller names, and
         * together with the parent's start they give this frame's start. */
        uint64_t left = parent->s;
        for (size_t j = 0; j < d->n; j++)
            if (d->f[j].parent == f->parent && strcmp(d->f[j].name, f->name) < 0) left += d->f[j].n;
        cr_assert_eq(f->s, left, "%s starts at %llu, want %llu", f->path, (unsigned long long)f->s,
                     (unsigned long long)left);
    }
}

Test(flamegraph, tree_matches_label_paths) {
    parsed_trace pt = parse(MIXED, N_MIXED);
    expected e = expect_tree(MIXED, N_MIXED, 0);
    svg_doc d = write_svg(NULL, pt.t, NULL);
    expect_well_formed(d.text);
    expect_tree_drawn(&d, &e, AVAIL);
    /* The merged "dup" node: 15 + 5 samples from two different frames. */
    const frame *dup = find_frame(&d, "all\x1fmain\x1f" "dup");
    cr_assert(dup && dup->n == 20);
    const frame *root = find_frame(&d, "all");
    cr_assert(root && root->n == e.total && strcmp(root->text, "all") == 0);
    char want[128];
    snprintf(want, sizeof want, "all (%llu samples, 100.00%%)", (unsigned long long)e.total);
    cr_assert_str_eq(root->title, want);
    const frame *work = find_frame(&d, "all\x1fmain\x1fwork");
    snprintf(want, sizeof want, "work (50 samples, %.2f%%)", 5000.0 / (double)e.total);
    cr_assert_str_eq(work->title, want);
    /* Header: default title, the total in the subtitle, the script. */
    cr_assert(strstr(d.text, ">Flame Graph</text>"));
    snprintf(want, sizeof want, ">%llu samples</text>", (unsigned long long)e.total);
    cr_assert(strstr(d.text, want), "subtitle with the total: %s", want);
    cr_assert(strstr(d.text, "<script type=\"text/ecmascript\"><![CDATA["));
    cr_assert(strstr(d.text, "width=\"1200\""));
    svg_free(&d);
    parsed_free(&pt);
}

/* Root at the bottom: y falls as depth grows; reverse (icicle) puts the
 * root on top and y rises with depth. */
Test(flamegraph, reverse_flips_levels) {
    parsed_trace pt = parse(MIXED, N_MIXED);
    svg_doc d = write_svg(NULL, pt.t, NULL);
    tm_flamegraph_options o;
    memset(&o, 0, sizeof o);
    o.reverse = 1;
    svg_doc r = write_svg(NULL, pt.t, &o);
    cr_assert_eq(d.n, r.n);
    unsigned max_depth = 0;
    for (size_t i = 0; i < d.n; i++)
        if (d.f[i].d > max_depth) max_depth = d.f[i].d;
    cr_assert_eq(max_depth, 3);
    for (size_t i = 0; i < d.n; i++) {
        cr_assert_str_eq(d.f[i].path, r.f[i].path);
        cr_assert_eq(d.f[i].y, HEADER + (max_depth - d.f[i].d) * LEVEL, "%s", d.f[i].path);
        cr_assert_eq(r.f[i].y, HEADER + r.f[i].d * LEVEL, "%s", r.f[i].path);
        cr_assert_eq(d.f[i].x, r.f[i].x);
        cr_assert_eq(d.f[i].w, r.f[i].w);
        if (d.f[i].d) {
            cr_assert_lt(d.f[i].y, d.f[d.f[i].parent].y);
            cr_assert_gt(r.f[i].y, r.f[r.f[i].parent].y);
        }
    }
    svg_free(&d);
    svg_free(&r);
    parsed_free(&pt);
}

Test(flamegraph, thread_filter) {
    parsed_trace pt = parse(MIXED, N_MIXED);
    tm_flamegraph_options o;
    memset(&o, 0, sizeof o);
    o.threads.by_tid = 1;
    o.threads.tid = 11;
    expected e = expect_tree(MIXED, N_MIXED, 11);
    svg_doc d = write_svg(NULL, pt.t, &o);
    cr_assert_eq(e.total, 25);
    expect_tree_drawn(&d, &e, AVAIL);
    svg_free(&d);

    memset(&o, 0, sizeof o);
    o.threads.name = "bg";
    e = expect_tree(MIXED, N_MIXED, 12);
    d = write_svg(NULL, pt.t, &o);
    expect_tree_drawn(&d, &e, AVAIL);
    svg_free(&d);

    o.threads.name = "nobody";
    char *text;
    tm_error err;
    cr_assert_eq(try_write(NULL, pt.t, &o, &text, &err), TM_ERR_INVALID_ARG);
    free(text);
    parsed_free(&pt);
}

/* Markup characters become entities; control characters, invalid UTF-8
 * and U+FFFF become U+FFFD, in titles, frame text and the title option. */
Test(flamegraph, escapes_names) {
    static const char hostile[] = "a<b&c>\"d'e\x01" "f\xff" "g\xef\xbf\xbfh";
    static const char want[] = "a&lt;b&amp;c&gt;&quot;d&apos;e\xef\xbf\xbd" "f\xef\xbf\xbd" "g\xef\xbf\xbdh";
    const stk stacks[] = {{10, 4, {"main", hostile, NULL}}};
    parsed_trace pt = parse(stacks, 1);
    tm_flamegraph_options o;
    memset(&o, 0, sizeof o);
    o.title = "<Mine> & \"yours\"";
    char *text;
    tm_error err;
    cr_assert_eq(try_write(NULL, pt.t, &o, &text, &err), TM_OK);
    expect_well_formed(text);
    char title[256];
    snprintf(title, sizeof title, "<title>%s (4 samples, 100.00%%)</title>", want);
    cr_assert(strstr(text, title), "escaped title missing");
    snprintf(title, sizeof title, ">%s</text>", want);
    cr_assert(strstr(text, title), "escaped frame text missing");
    cr_assert(strstr(text, ">&lt;Mine&gt; &amp; &quot;yours&quot;</text>"));
    cr_assert_null(strstr(text, "a<b"));
    free(text);
    parsed_free(&pt);
}

/* 1 sample of 2000 at 100 px is 0.05 px: under the default 0.1 px it is
 * left out with its child, its samples still in its parent; a smaller
 * min_width_px draws it. */
Test(flamegraph, min_width_prunes) {
    const stk stacks[] = {
        {10, 1999, {"main", "big", NULL}},
        {10, 1, {"main", "tiny", "tinier", NULL}},
    };
    parsed_trace pt = parse(stacks, 2);
    expected e = expect_tree(stacks, 2, 0);
    tm_flamegraph_options o;
    memset(&o, 0, sizeof o);
    o.width_px = 120;
    svg_doc d = write_svg(NULL, pt.t, &o);
    cr_assert_eq(d.n, e.n - 2);
    cr_assert_null(find_frame(&d, "all\x1fmain\x1ftiny"));
    cr_assert_null(find_frame(&d, "all\x1fmain\x1ftiny\x1ftinier"));
    const frame *main_frame = find_frame(&d, "all\x1fmain");
    cr_assert(main_frame && main_frame->n == 2000 && fabs(main_frame->w - 100) < 0.006);
    cr_assert(strstr(d.text, "2 frames narrower than 0.10 px not drawn"));
    cr_assert(strstr(d.text, "width=\"120\""));
    svg_free(&d);

    o.min_width_px = 0.01;
    d = write_svg(NULL, pt.t, &o);
    expect_tree_drawn(&d, &e, 100);
    cr_assert_null(strstr(d.text, "not drawn"));
    svg_free(&d);

    o.min_width_px = 60; /* only the root and what is at least 60 px */
    d = write_svg(NULL, pt.t, &o);
    cr_assert_eq(d.n, 3, "all, main, big");
    svg_free(&d);
    parsed_free(&pt);

    /* one frame left out: the singular, and no stray byte after it (a NUL
     * made the whole SVG invalid) */
    const stk one[] = {
        {10, 1999, {"main", "big", NULL}},
        {10, 1, {"main", "tiny", NULL}},
    };
    pt = parse(one, 2);
    o.min_width_px = 0;
    d = write_svg(NULL, pt.t, &o);
    cr_assert(strstr(d.text, "; 1 frame narrower than 0.10 px not drawn</text>"), "%.600s", d.text);
    expect_well_formed(d.text);
    svg_free(&d);
    parsed_free(&pt);
}

/* Kind colours: native frames in the red-yellow family, Java in greens;
 * the same label always gets the same colour. */
Test(flamegraph, kind_colours) {
    parsed_trace pt = parse(MIXED, N_MIXED);
    svg_doc d = write_svg(NULL, pt.t, NULL);
    const frame *java = find_frame(&d, "all\x1fmain\x1f" "com.app.Foo.run");
    cr_assert(java, "Java frame labelled Class.method");
    cr_assert(java->g > java->r && java->g > java->b, "Java green: rgb(%d,%d,%d)", java->r, java->g, java->b);
    const frame *work = find_frame(&d, "all\x1fmain\x1fwork");
    cr_assert(work->r > work->b + 60 && work->r >= work->g, "native warm: rgb(%d,%d,%d)", work->r, work->g, work->b);
    const frame *work2 = find_frame(&d, "all\x1fmain\x1f" "com.app.Foo.run\x1fwork");
    cr_assert(work2->r == work->r && work2->g == work->g && work2->b == work->b);
    svg_free(&d);
    parsed_free(&pt);
}

/* ---- the diff ---- */

static int neutral(const frame *f) { return f->r == f->g && f->g == f->b && f->r > 200; }

Test(flamegraph_diff, colours_by_share_change) {
    const stk base_stacks[] = {
        {10, 50, {"main", "grow", NULL}},
        {10, 50, {"main", "shrink", NULL}},
        {10, 10, {"gone", NULL}}, /* only in base */
    };
    const stk now_stacks[] = {
        {10, 90, {"main", "grow", NULL}},
        {10, 20, {"main", "shrink", NULL}},
        {10, 10, {"main", "fresh", NULL}}, /* only in now */
    };
    parsed_trace base = parse(base_stacks, 3), now = parse(now_stacks, 3);
    expected e = expect_tree(now_stacks, 3, 0);
    svg_doc d = write_svg(base.t, now.t, NULL);
    expect_well_formed(d.text);
    expect_tree_drawn(&d, &e, AVAIL); /* the shape of now */
    cr_assert_null(find_frame(&d, "all\x1fgone"));
    cr_assert(strstr(d.text, ">Differential Flame Graph</text>"));
    char want[256];
    cr_assert(strstr(d.text, "120 samples (base: 110 samples, of which 10 in stacks absent"), "subtitle");
    snprintf(want, sizeof want, "full at %.2f pp", 100 * (90.0 / 120 - 50.0 / 110));
    cr_assert(strstr(d.text, want), "legend names the change drawn fully saturated");

    const frame *grow = find_frame(&d, "all\x1fmain\x1fgrow"), *shrink = find_frame(&d, "all\x1fmain\x1fshrink");
    const frame *fresh = find_frame(&d, "all\x1fmain\x1f" "fresh"), *root = find_frame(&d, "all");
    cr_assert(grow->r > grow->b + 80, "grown frame red: rgb(%d,%d,%d)", grow->r, grow->g, grow->b);
    cr_assert(shrink->b > shrink->r + 80, "shrunk frame blue: rgb(%d,%d,%d)", shrink->r, shrink->g, shrink->b);
    cr_assert(fresh->r > fresh->b, "new frame red");
    cr_assert(neutral(root), "root unchanged: rgb(%d,%d,%d)", root->r, root->g, root->b);
    /* The larger the change, the more saturated. */
    double d_grow = 90.0 / 120 - 50.0 / 110, d_shrink = 20.0 / 120 - 50.0 / 110, d_fresh = 10.0 / 120;
    cr_assert(d_grow > -d_shrink && -d_shrink > d_fresh);
    cr_assert(grow->b < shrink->r && shrink->r < fresh->b, "saturation follows |change|");

    snprintf(want, sizeof want, "grow (now: 90 samples, %.2f%%; base: 50 samples, %.2f%%; +%.2f pp)",
             100 * 90.0 / 120, 100 * 50.0 / 110, 100 * d_grow);
    cr_assert_str_eq(grow->title, want);
    snprintf(want, sizeof want, "shrink (now: 20 samples, %.2f%%; base: 50 samples, %.2f%%; -%.2f pp)",
             100 * 20.0 / 120, 100 * 50.0 / 110, -100 * d_shrink);
    cr_assert_str_eq(shrink->title, want);
    snprintf(want, sizeof want, "fresh (now: 10 samples, %.2f%%; base: 0 samples, 0.00%%; +%.2f pp)",
             100 * d_fresh, 100 * d_fresh);
    cr_assert_str_eq(fresh->title, want);
    svg_free(&d);
    parsed_free(&base);
    parsed_free(&now);
}

Test(flamegraph_diff, against_itself_is_neutral) {
    parsed_trace pt = parse(MIXED, N_MIXED);
    svg_doc d = write_svg(pt.t, pt.t, NULL);
    expected e = expect_tree(MIXED, N_MIXED, 0);
    expect_tree_drawn(&d, &e, AVAIL);
    for (size_t i = 0; i < d.n; i++) {
        cr_assert(neutral(&d.f[i]), "%s: rgb(%d,%d,%d)", d.f[i].path, d.f[i].r, d.f[i].g, d.f[i].b);
        cr_assert(strstr(d.f[i].title, "; +0.00 pp)"), "%s", d.f[i].title);
    }
    cr_assert(strstr(d.text, "of which 0 in stacks"));
    svg_free(&d);

    tm_flamegraph_options o;
    memset(&o, 0, sizeof o);
    o.title = "Mine";
    o.threads.name = "worker";
    d = write_svg(pt.t, pt.t, &o);
    e = expect_tree(MIXED, N_MIXED, 11);
    expect_tree_drawn(&d, &e, AVAIL);
    cr_assert(strstr(d.text, ">Mine</text>"));
    svg_free(&d);
    parsed_free(&pt);
}

/* ---- failures ---- */

static int failing_write(void *ctx, const void *data, size_t len) {
    (void)ctx, (void)data, (void)len;
    return 1;
}

Test(flamegraph, io_failure_and_bad_arguments) {
    parsed_trace pt = parse(MIXED, N_MIXED);
    tm_sink bad = {.write = failing_write, .ctx = NULL};
    tm_error err;
    cr_assert_eq(tm_write_flamegraph(pt.t, NULL, &bad, &err), TM_ERR_IO);
    cr_assert_eq(err.code, TM_ERR_IO);
    cr_assert_eq(tm_write_flamegraph_diff(pt.t, pt.t, NULL, &bad, &err), TM_ERR_IO);
    tu_membuf m = {0};
    tm_sink ok = {.write = tu_membuf_write, .ctx = &m};
    cr_assert_eq(tm_write_flamegraph(NULL, NULL, &ok, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_write_flamegraph(pt.t, NULL, NULL, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_write_flamegraph_diff(NULL, pt.t, NULL, &ok, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_write_flamegraph_diff(pt.t, NULL, NULL, &ok, &err), TM_ERR_INVALID_ARG);
    /* a width a drawing cannot use (a wrapped negative one too) */
    const unsigned widths[] = {TM_FLAMEGRAPH_WIDTH_MIN - 1, TM_FLAMEGRAPH_WIDTH_MAX + 1, (unsigned)-5};
    for (size_t i = 0; i < sizeof widths / sizeof *widths; i++) {
        tm_flamegraph_options o = {.width_px = widths[i]};
        cr_assert_eq(tm_write_flamegraph(pt.t, &o, &ok, &err), TM_ERR_INVALID_ARG, "width %u", widths[i]);
        cr_assert(strstr(err.message, "width_px"), "%s", err.message);
        cr_assert_eq(tm_write_flamegraph_diff(pt.t, pt.t, &o, &ok, &err), TM_ERR_INVALID_ARG, "width %u", widths[i]);
    }
    cr_assert_eq(m.len, 0);
    tm_flamegraph_options edge = {.width_px = TM_FLAMEGRAPH_WIDTH_MIN};
    cr_assert_eq(tm_write_flamegraph(pt.t, &edge, &ok, &err), TM_OK, "%s", err.message);
    tu_membuf_free(&m);
    parsed_free(&pt);
}

/* An empty profile still gives a graph: the root alone. */
Test(flamegraph, no_samples) {
    parsed_trace pt = parse(MIXED, 0);
    svg_doc d = write_svg(NULL, pt.t, NULL);
    expect_well_formed(d.text);
    cr_assert_eq(d.n, 1);
    cr_assert_str_eq(d.f[0].title, "all (0 samples, 0.00%)");
    cr_assert(fabs(d.f[0].w - AVAIL) < 0.006);
    svg_free(&d);
    parsed_free(&pt);
}

/* Every allocation of both writers fails in turn: TM_ERR_NOMEM, no leak. */
Test(flamegraph, allocation_failures) {
    tu_fail_alloc fa = {.fail_at = -1};
    tm_alloc alloc = {.malloc_fn = tu_fa_malloc, .realloc_fn = tu_fa_realloc, .free_fn = tu_fa_free, .ctx = &fa};
    tm_options o;
    memset(&o, 0, sizeof o);
    o.alloc = &alloc;
    parsed_trace pt = parse_with(MIXED, N_MIXED, &o);
    for (int diff = 0; diff < 2; diff++) {
        long live = fa.live, start = fa.count;
        char *text;
        tm_error err;
        cr_assert_eq(try_write(diff ? pt.t : NULL, pt.t, NULL, &text, &err), TM_OK);
        free(text);
        long n = fa.count - start;
        cr_assert_gt(n, 3);
        for (long k = 0; k < n; k++) {
            fa.fail_at = fa.count + k;
            tm_status st = try_write(diff ? pt.t : NULL, pt.t, NULL, &text, &err);
            free(text);
            cr_assert_eq(st, TM_ERR_NOMEM, "allocation %ld of %ld: %s", k, n, tm_status_str(st));
            cr_assert_eq(fa.live, live, "allocation %ld of %ld: leaked %ld bytes", k, n, fa.live - live);
        }
        fa.fail_at = -1;
    }
    parsed_free(&pt);
}

/* Folded input carries weights: a line's count is its samples. */
Test(flamegraph, folded_input_weights) {
    static const char text[] = "main;work 7\nmain;idle 3\nmain;work;leaf 10\n";
    tm_options o;
    memset(&o, 0, sizeof o);
    o.input = TM_INPUT_FOLDED;
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(text, sizeof text - 1, &o, &t, &err), TM_OK, "%s", err.message);
    const stk same[] = {
        {10, 7, {"main", "work", NULL}}, {10, 3, {"main", "idle", NULL}}, {10, 10, {"main", "work", "leaf", NULL}}};
    expected e = expect_tree(same, 3, 0);
    svg_doc d = write_svg(NULL, t, NULL);
    expect_tree_drawn(&d, &e, AVAIL);
    cr_assert_eq(find_frame(&d, "all\x1fmain\x1fwork")->n, 17);
    svg_free(&d);
    tm_trace_free(t);
}
