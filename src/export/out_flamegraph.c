/*
 * out_flamegraph.c — profile model -> one self-contained interactive SVG
 * flame graph (tm_write_flamegraph) or differential flame graph
 * (tm_write_flamegraph_diff).
 *
 * The selected threads' stacks become a call tree whose children merge by
 * frame label text (two frames with the same display name on the same path
 * are one node), children ordered by label. Each node is one
 * <g class="f"><title/><rect/><text/></g>, as wide as its share of samples;
 * nodes narrower than min_width_px are left out with their subtrees (their
 * samples still widen the parent). Colours: by frame kind (a hue family per
 * kind, varied per name by a hash), or in a diff by the change of the
 * node's share of samples between base and now, matched by label path.
 * The embedded script (flamegraph_js.h) adds hover, zoom and search.
 *
 * Work is linear in the distinct stacks times their depth, plus one pass
 * over the samples (tm_stack_counts_build) and a sort of the tree's nodes.
 * All text is XML-escaped and written as valid UTF-8 without control
 * characters (invalid bytes become U+FFFD).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "profile/aggregate.h"     /* tm_thread_select, tm_frame_labels, tm_stack_counts */
#include "export/flamegraph_js.h" /* flamegraph_js */
#include "wire/json_write.h"    /* tm_jw: buffered output */

#define PAD_X 10       /* px left and right of the frames */
#define FRAME_H 16     /* px per stack level (rect 15 + 1 gap) */
#define HEADER_H 72    /* title, subtitle, legend */
#define FOOTER_H 30    /* status line */
#define CHAR_W 7.0     /* average glyph width of the 12 px font, for truncation */
#define ROOT_LABEL TM_ABSENT

/* ---- labels: distinct display names, shared by the profiles of a diff ---- */

typedef struct label {
    tm_str text;
    uint64_t hash;      /* of the text: the per-name colour variation */
    uint32_t rank;      /* position in byte order of all labels: child order */
    tm_frame_kind kind; /* of the first frame seen with this label */
} label;

typedef struct label_set {
    label *v;
    size_t n, cap;
    tm_idxset index;
} label_set;

static int label_eq(const void *ctx, uint32_t idx, const void *key) {
    return tm_bytes_eq(((const label_set *)ctx)->v[idx].text, *(const tm_str *)key);
}

static tm_status labels_intern(tm_mem *mem, label_set *ls, tm_str text, tm_frame_kind kind, uint32_t *out) {
    uint64_t h = tm_hash_bytes(0x5f1a3e, text);
    uint32_t h32 = (uint32_t)(h ^ (h >> 32));
    uint32_t idx = tm_idxset_find(&ls->index, h32, label_eq, ls, &text);
    if (idx == TM_ABSENT) {
        TM_TRY(TM_VEC_RESERVE(mem, ls->v, ls->cap, ls->n + 1));
        idx = (uint32_t)ls->n;
        TM_TRY(tm_idxset_add(mem, &ls->index, h32, idx));
        label *l = &ls->v[ls->n++];
        l->text = text;
        l->hash = h;
        l->rank = 0;
        l->kind = kind;
    }
    *out = idx;
    return TM_OK;
}

static void labels_release(tm_mem *mem, label_set *ls) {
    tm_mem_free(mem, ls->v, ls->cap * sizeof *ls->v);
    tm_idxset_free(mem, &ls->index);
    memset(ls, 0, sizeof *ls);
}

static int cmp_label_text(const void *a, const void *b) {
    const label *x = *(const label *const *)a, *y = *(const label *const *)b;
    size_t n = x->text.len < y->text.len ? x->text.len : y->text.len;
    int c = n ? memcmp(x->text.data, y->text.data, n) : 0;
    return c ? c : (x->text.len > y->text.len) - (x->text.len < y->text.len);
}

/* Sets every label's rank (its place in byte order). */
static tm_status labels_rank(tm_mem *mem, label_set *ls) {
    label **by_text = tm_mem_alloc(mem, (ls->n + 1) * sizeof *by_text);
    if (!by_text) return TM_ERR_NOMEM;
    for (size_t i = 0; i < ls->n; i++) by_text[i] = &ls->v[i];
    qsort(by_text, ls->n, sizeof *by_text, cmp_label_text);
    for (size_t i = 0; i < ls->n; i++) by_text[i]->rank = (uint32_t)i;
    tm_mem_free(mem, by_text, (ls->n + 1) * sizeof *by_text);
    return TM_OK;
}

/* One profile's side of a graph: its selected threads' stack counts and the
 * label of each of its frames. */
typedef struct source {
    const tm_profile *p;   /* &view */
    const tm_profile *orig;
    tm_profile view;       /* the samples of the value drawn (tm_profile_value_view) */
    tm_value value;
    tm_stack_counts counts;
    tm_frame_labels names; /* the label texts point into it */
    uint32_t *label_of;    /* label_of[frame] */
    uint64_t total;        /* samples (weights) of the selected threads */
} source;

/* On failure *src holds what was built so far, for source_release. */
static tm_status source_open(const tm_trace *t, const tm_flamegraph_options *opts, tm_mem *mem, label_set *ls,
                             source *src, tm_error *err) {
    const tm_thread_filter *filter = opts ? &opts->threads : NULL;
    src->orig = tm_trace_profile(t);
    TM_TRY(tm_profile_value_view(src->orig, opts ? opts->value : TM_VALUE_DEFAULT, &src->view, &src->value, err));
    const tm_profile *p = &src->view;
    src->p = p;
    uint8_t *sel = NULL;
    TM_TRY(tm_thread_select(p, filter, &sel, err));
    tm_status st = tm_stack_counts_build(p, sel, 0, &src->counts);
    tm_thread_selection_free(p, sel);
    if (st == TM_OK) st = tm_frame_labels_build(p, p->label_lines, &src->names);
    if (st == TM_OK) {
        src->label_of = tm_mem_alloc(mem, (p->n_frames + 1) * sizeof *src->label_of);
        if (!src->label_of) st = TM_ERR_NOMEM;
    }
    for (size_t f = 0; f < p->n_frames && st == TM_OK; f++)
        st = labels_intern(mem, ls, src->names.of[f], tm_frame_kind_of(p, (uint32_t)f), &src->label_of[f]);
    if (st != TM_OK) return tm_fail(err, st, 0, NULL, "out of memory");
    for (size_t i = 0; i < src->counts.n; i++) src->total += src->counts.v[i].count;
    return TM_OK;
}

static void source_release(tm_mem *mem, source *src) {
    if (!src->p) return;
    tm_stack_counts_release(src->p, &src->counts);
    if (src->names.of) tm_frame_labels_release(src->p, &src->names);
    tm_mem_free(mem, src->label_of, (src->p->n_frames + 1) * sizeof *src->label_of);
    tm_profile_value_view_release(src->orig, &src->view);
    memset(src, 0, sizeof *src);
}

/* ---- the call tree ---- */

typedef struct node {
    uint64_t count;  /* samples of this label path in now (the only profile) */
    uint64_t base;   /* diff: samples of the same label path in base */
    uint32_t parent, label;
    uint32_t first_child, n_children; /* into tree.child_order */
} node;

typedef struct tree {
    node *v;
    size_t n, cap;
    tm_u64map child;       /* parent << 32 | label -> node */
    uint32_t *child_order; /* non-root nodes by (parent, label rank) */
} tree;

static tm_status tree_child(tm_mem *mem, tree *tr, uint32_t parent, uint32_t lab, uint32_t *out) {
    uint64_t key = (uint64_t)parent << 32 | lab;
    uint32_t c = tm_u64map_get(&tr->child, key);
    if (c != TM_ABSENT) {
        *out = c;
        return TM_OK;
    }
    if (tr->n >= TM_ABSENT - 1) return TM_ERR_LIMIT;
    TM_TRY(TM_VEC_RESERVE(mem, tr->v, tr->cap, tr->n + 1));
    node *nd = &tr->v[tr->n];
    memset(nd, 0, sizeof *nd);
    nd->parent = parent;
    nd->label = lab;
    *out = (uint32_t)tr->n++;
    return tm_u64map_put(mem, &tr->child, key, *out);
}

/* Adds every stack of src, root first, creating nodes. */
static tm_status tree_add(tm_mem *mem, tree *tr, const source *src) {
    const tm_profile *p = src->p;
    tr->v[0].count += src->total;
    for (size_t i = 0; i < src->counts.n; i++) {
        const tm_stack_count *c = &src->counts.v[i];
        const tm_prof_stack *s = &p->stacks[c->stack];
        uint32_t at = 0;
        for (uint32_t k = s->len; k-- > 0;) {
            TM_TRY(tree_child(mem, tr, at, src->label_of[p->frame_ids[s->off + k]], &at));
            tr->v[at].count += c->count;
        }
    }
    return TM_OK;
}

/* Diff: adds base's samples to the nodes of now on the same label paths.
 * Returns the base samples whose whole stack has no counterpart in now. */
static uint64_t tree_match_base(tree *tr, const source *base) {
    const tm_profile *p = base->p;
    uint64_t unmatched = 0;
    tr->v[0].base += base->total;
    for (size_t i = 0; i < base->counts.n; i++) {
        const tm_stack_count *c = &base->counts.v[i];
        const tm_prof_stack *s = &p->stacks[c->stack];
        uint32_t at = 0;
        for (uint32_t k = s->len; k-- > 0;) {
            uint32_t lab = base->label_of[p->frame_ids[s->off + k]];
            at = tm_u64map_get(&tr->child, (uint64_t)at << 32 | lab);
            if (at == TM_ABSENT) {
                unmatched += c->count;
                break;
            }
            tr->v[at].base += c->count;
        }
    }
    return unmatched;
}

typedef struct order_key {
    uint64_t key; /* parent << 32 | label rank */
    uint32_t node;
} order_key;

static int cmp_order_key(const void *a, const void *b) {
    uint64_t x = ((const order_key *)a)->key, y = ((const order_key *)b)->key;
    return (x > y) - (x < y);
}

/* Lists each node's children contiguously, in label order. */
static tm_status tree_order(tm_mem *mem, tree *tr, const label_set *ls) {
    size_t n = tr->n - 1;
    order_key *keys = tm_mem_alloc(mem, (n + 1) * sizeof *keys);
    tr->child_order = tm_mem_alloc(mem, (n + 1) * sizeof *tr->child_order);
    if (!keys || !tr->child_order) {
        tm_mem_free(mem, keys, (n + 1) * sizeof *keys);
        return TM_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        const node *nd = &tr->v[i + 1];
        keys[i].key = (uint64_t)nd->parent << 32 | ls->v[nd->label].rank;
        keys[i].node = (uint32_t)(i + 1);
    }
    qsort(keys, n, sizeof *keys, cmp_order_key);
    for (size_t i = 0; i < n; i++) {
        tr->child_order[i] = keys[i].node;
        node *parent = &tr->v[tr->v[keys[i].node].parent];
        if (!parent->n_children++) parent->first_child = (uint32_t)i;
    }
    tm_mem_free(mem, keys, (n + 1) * sizeof *keys);
    return TM_OK;
}

/* ---- layout ---- */

typedef struct placed {
    uint32_t node, depth;
    uint64_t start; /* samples left of the node */
} placed;

typedef struct layout {
    placed *v; /* drawn nodes in pre-order, root first */
    size_t n, cap;
    uint32_t max_depth;
    double scale; /* px per sample */
} layout;

/* Places every node at least min_px wide (the root always), depth first. */
static tm_status layout_build(tm_mem *mem, const tree *tr, double scale, double min_px, layout *lay) {
    placed *todo = NULL;
    size_t n_todo = 0, cap_todo = 0;
    lay->scale = scale;
    TM_TRY(TM_VEC_RESERVE(mem, todo, cap_todo, 1));
    todo[n_todo++] = (placed){0, 0, 0};
    tm_status st = TM_OK;
    while (n_todo && st == TM_OK) {
        placed at = todo[--n_todo];
        st = TM_VEC_RESERVE(mem, lay->v, lay->cap, lay->n + 1);
        if (st != TM_OK) break;
        lay->v[lay->n++] = at;
        if (at.depth > lay->max_depth) lay->max_depth = at.depth;
        const node *nd = &tr->v[at.node];
        st = TM_VEC_RESERVE(mem, todo, cap_todo, n_todo + nd->n_children);
        /* Children sit left-aligned in their parent (the parent's own
         * samples to their right), pushed right to left to pop left to right. */
        uint64_t end = at.start;
        for (uint32_t k = 0; k < nd->n_children; k++) end += tr->v[tr->child_order[nd->first_child + k]].count;
        for (uint32_t k = nd->n_children; k-- > 0 && st == TM_OK;) {
            uint32_t c = tr->child_order[nd->first_child + k];
            end -= tr->v[c].count;
            if ((double)tr->v[c].count * scale >= min_px) todo[n_todo++] = (placed){c, at.depth + 1, end};
        }
    }
    tm_mem_free(mem, todo, cap_todo * sizeof *todo);
    return st;
}

/* ---- text output ---- */

static char *put_fixed2(char *p, double v) {
    if (!(v > 0)) v = 0; /* NaN too */
    uint64_t c = (uint64_t)(v * 100 + 0.5);
    p = tm_put_u64(p, c / 100);
    *p++ = '.';
    *p++ = (char)('0' + c / 10 % 10);
    *p++ = (char)('0' + c % 10);
    return p;
}

static void write_fixed2(tm_jw *w, double v) {
    char *p = tm_jw_reserve(w, 32);
    tm_jw_commit(w, put_fixed2(p, v));
}

static void write_u64(tm_jw *w, uint64_t v) {
    char *p = tm_jw_reserve(w, 24);
    tm_jw_commit(w, tm_put_u64(p, v));
}

/* Length of the character at p as the escaper sees it: a valid UTF-8
 * sequence, or 1 for a byte it replaces. */
static size_t char_len(const uint8_t *p, const uint8_t *e) {
    if (*p < 0x80) return 1;
    size_t n = tm_utf8_seq(p, e);
    return n ? n : 1;
}

static size_t count_chars(tm_str s) {
    size_t n = 0;
    for (const uint8_t *p = s.data, *e = s.data + s.len; p < e; p += char_len(p, e)) n++;
    return n;
}

/* Writes up to max_chars characters of s as XML character data: markup
 * characters as entities; control characters, invalid UTF-8 and the
 * non-characters U+FFFE/U+FFFF (none allowed in XML) as U+FFFD. */
static void write_xml(tm_jw *w, tm_str s, size_t max_chars) {
    static const char replacement[] = "\xef\xbf\xbd";
    const uint8_t *p = s.data, *e = s.data + s.len;
    for (size_t n = 0; p < e && n < max_chars; n++) {
        uint8_t c = *p;
        if (c >= 0x80) {
            size_t len = tm_utf8_seq(p, e);
            if (!len || (len == 3 && c == 0xef && p[1] == 0xbf && p[2] >= 0xbe)) {
                tm_jw_lit(w, replacement);
                p += len ? len : 1;
            } else {
                tm_jw_raw(w, p, len);
                p += len;
            }
            continue;
        }
        p++;
        switch (c) {
        case '&': tm_jw_lit(w, "&amp;"); break;
        case '<': tm_jw_lit(w, "&lt;"); break;
        case '>': tm_jw_lit(w, "&gt;"); break;
        case '"': tm_jw_lit(w, "&quot;"); break;
        case '\'': tm_jw_lit(w, "&apos;"); break;
        default:
            if (c < 0x20 || c == 0x7f) tm_jw_lit(w, replacement);
            else tm_jw_char(w, (char)c);
        }
    }
}

static void write_xml_all(tm_jw *w, tm_str s) { write_xml(w, s, SIZE_MAX); }

static void write_xml_cstr(tm_jw *w, const char *s) {
    tm_str v = {(const uint8_t *)s, strlen(s)};
    write_xml_all(w, v);
}

/* A frame label cut to fit width_px: whole when it fits, else its start
 * and "..", or nothing when fewer than 4 characters fit. */
static void write_fitted(tm_jw *w, tm_str s, double width_px) {
    double fit = (width_px - 6) / CHAR_W;
    if (fit < 1) return;
    size_t max_chars = fit > 1e6 ? (size_t)1e6 : (size_t)fit;
    if (count_chars(s) <= max_chars) {
        write_xml_all(w, s);
    } else if (max_chars >= 4) {
        write_xml(w, s, max_chars - 2);
        tm_jw_lit(w, "..");
    }
}

/* A count in its unit: samples, a memory profile's bytes or objects, or
 * the ns of off-CPU and wall-clock time. */
static void write_samples(tm_jw *w, tm_value unit, uint64_t n) {
    write_u64(w, n);
    if (unit == TM_VALUE_OFF_CPU || unit == TM_VALUE_WALL) {
        tm_jw_lit(w, " ns");
        return;
    }
    const char *name = unit == TM_VALUE_ALLOC_SPACE || unit == TM_VALUE_INUSE_SPACE     ? " byte"
                       : unit == TM_VALUE_ALLOC_OBJECTS || unit == TM_VALUE_INUSE_OBJECTS ? " object"
                                                                                         : " sample";
    tm_jw_raw(w, name, strlen(name));
    if (n != 1) tm_jw_char(w, 's');
}

/* ---- colours ---- */

typedef struct rgb {
    uint8_t r, g, b;
} rgb;

static rgb hsl(double hue, double sat, double light) {
    double c = (1 - fabs(2 * light - 1)) * sat, h = hue / 60;
    double x = c * (1 - fabs(fmod(h, 2) - 1)), m = light - c / 2;
    double r = 0, g = 0, b = 0;
    if (h < 1) r = c, g = x;
    else if (h < 2) r = x, g = c;
    else if (h < 3) g = c, b = x;
    else if (h < 4) g = x, b = c;
    else if (h < 5) r = x, b = c;
    else r = c, b = x;
    rgb out = {(uint8_t)lround((r + m) * 255), (uint8_t)lround((g + m) * 255), (uint8_t)lround((b + m) * 255)};
    return out;
}

/* A hue family per kind, varied per name: t1, t2 in [0, 1] from its hash
 * (0.5 for the legend's swatch). */
static rgb kind_colour(tm_frame_kind kind, double t1, double t2) {
    switch (kind) {
    case TM_KIND_NATIVE: return hsl(5 + 45 * t1, 0.80, 0.56 + 0.08 * t2);   /* red to yellow */
    case TM_KIND_JAVA: return hsl(85 + 60 * t1, 0.55, 0.50 + 0.10 * t2);    /* greens */
    case TM_KIND_KERNEL: return hsl(190 + 40 * t1, 0.60, 0.58 + 0.08 * t2); /* blues */
    case TM_KIND_UNKNOWN: break;
    }
    return hsl(0, 0, 0.66 + 0.10 * t1); /* greys */
}

static rgb label_colour(const label *l) {
    return kind_colour(l->kind, (double)(l->hash & 0xffff) / 0xffff, (double)(l->hash >> 16 & 0xffff) / 0xffff);
}

/* Diff: red when the share grew, blue when it shrank, saturated at
 * |delta| >= full (a share change as a fraction), near white when equal. */
static rgb delta_colour(double delta, double full) {
    double i = fabs(delta) / full;
    if (i > 1) i = 1;
    uint8_t fade = (uint8_t)lround(238 - 188 * i);
    rgb out = {fade, fade, fade};
    if (delta > 0) out.r = 255;
    else if (delta < 0) out.b = 255;
    return out;
}

static void write_rgb(tm_jw *w, rgb c) {
    tm_jw_lit(w, "rgb(");
    write_u64(w, c.r);
    tm_jw_char(w, ',');
    write_u64(w, c.g);
    tm_jw_char(w, ',');
    write_u64(w, c.b);
    tm_jw_char(w, ')');
}

/* ---- the document ---- */

typedef struct graph {
    const tm_flamegraph_options *opts;
    const label_set *labels;
    const tree *tr;
    const layout *lay;
    unsigned width;      /* px */
    double avail;        /* px of the frames */
    double min_px;
    uint64_t total;      /* now's samples */
    int diff;
    uint64_t base_total, base_unmatched;
    double delta_full;   /* diff: share change drawn fully saturated */
    tm_value unit;       /* what the counts are (TM_VALUE_SAMPLES, or a memory value) */
    uint64_t peak_rss;   /* bytes, from the trace's memory readings; 0: none */
} graph;

static const char style_css[] =
    "<style>\n"
    "text{font-family:Verdana,\"DejaVu Sans\",sans-serif;font-size:12px;fill:#000}\n"
    "#title{font-size:17px}\n"
    "#subtitle,.legend{fill:#444}\n"
    ".button{fill:#1a4fa0;cursor:pointer}\n"
    ".button:hover{text-decoration:underline}\n"
    ".hide{display:none}\n"
    "g.f{cursor:pointer}\n"
    "g.f:hover rect{stroke:#000;stroke-width:0.6}\n"
    "g.f text{pointer-events:none}\n"
    "g.parent{opacity:0.6}\n"
    "</style>\n";

static void write_text_open(tm_jw *w, const char *attrs, double x, double y) {
    tm_jw_lit(w, "<text ");
    tm_jw_raw(w, attrs, strlen(attrs));
    tm_jw_lit(w, " x=\"");
    write_fixed2(w, x);
    tm_jw_lit(w, "\" y=\"");
    write_fixed2(w, y);
    tm_jw_lit(w, "\">");
}

static void write_legend_entry(tm_jw *w, double *x, rgb c, const char *name) {
    tm_jw_lit(w, "<rect x=\"");
    write_fixed2(w, *x);
    tm_jw_lit(w, "\" y=\"53\" width=\"10\" height=\"10\" fill=\"");
    write_rgb(w, c);
    tm_jw_lit(w, "\" stroke=\"#888\" stroke-width=\"0.5\"/>");
    write_text_open(w, "class=\"legend\"", *x + 14, 62);
    write_xml_cstr(w, name);
    tm_jw_lit(w, "</text>\n");
    *x += 14 + CHAR_W * (double)strlen(name) + 18;
}

static void write_header(tm_jw *w, const graph *g, double height) {
    tm_jw_lit(w, "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"");
    write_u64(w, g->width);
    tm_jw_lit(w, "\" height=\"");
    write_fixed2(w, height);
    tm_jw_lit(w, "\" viewBox=\"0 0 ");
    write_u64(w, g->width);
    tm_jw_char(w, ' ');
    write_fixed2(w, height);
    tm_jw_lit(w, "\" data-pad=\"");
    write_u64(w, PAD_X);
    tm_jw_lit(w, "\" data-avail=\"");
    write_fixed2(w, g->avail);
    tm_jw_lit(w, "\" data-char-width=\"");
    write_fixed2(w, CHAR_W);
    tm_jw_lit(w, "\">\n");
    tm_jw_raw(w, style_css, sizeof style_css - 1);
    tm_jw_lit(w, "<rect x=\"0\" y=\"0\" width=\"100%\" height=\"100%\" fill=\"#f7f7f2\"/>\n");

    double mid = g->width / 2.0;
    write_text_open(w, "id=\"title\" text-anchor=\"middle\"", mid, 24);
    char memory_title[80];
    const char *kind = g->unit == TM_VALUE_OFF_CPU ? "Off-CPU" : g->unit == TM_VALUE_WALL ? "Wall-Clock" : "Memory";
    snprintf(memory_title, sizeof memory_title, "%s %s Flame Graph (%s)", g->diff ? "Differential" : "", kind,
             g->unit == TM_VALUE_OFF_CPU ? "blocked time"
             : g->unit == TM_VALUE_WALL  ? "on and off CPU"
                                         : tm_value_name(g->unit));
    const char *title = g->opts && g->opts->title      ? g->opts->title
                        : g->unit != TM_VALUE_SAMPLES ? memory_title + (g->diff ? 0 : 1)
                        : g->diff                      ? "Differential Flame Graph"
                                                       : "Flame Graph";
    write_xml_cstr(w, title);
    tm_jw_lit(w, "</text>\n");

    write_text_open(w, "id=\"subtitle\" text-anchor=\"middle\"", mid, 44);
    write_samples(w, g->unit, g->total);
    if (g->diff) {
        tm_jw_lit(w, " (base: ");
        write_samples(w, g->unit, g->base_total);
        tm_jw_lit(w, ", of which ");
        write_u64(w, g->base_unmatched);
        tm_jw_lit(w, " in stacks absent here, not drawn)");
    }
    if (g->peak_rss) {
        char rss[48];
        snprintf(rss, sizeof rss, "; peak RSS %.1f MB", (double)g->peak_rss / 1048576.0);
        tm_jw_raw(w, rss, strlen(rss));
    }
    size_t hidden = g->tr->n - g->lay->n;
    if (hidden) {
        tm_jw_lit(w, "; ");
        write_u64(w, hidden);
        if (hidden == 1) tm_jw_lit(w, " frame narrower than ");
        else tm_jw_lit(w, " frames narrower than ");
        write_fixed2(w, g->min_px);
        tm_jw_lit(w, " px not drawn");
    }
    tm_jw_lit(w, "</text>\n");

    write_text_open(w, "id=\"unzoom\" class=\"button hide\"", PAD_X, 24);
    tm_jw_lit(w, "Reset Zoom</text>\n");
    write_text_open(w, "id=\"search\" class=\"button\" text-anchor=\"end\"", g->width - PAD_X, 24);
    tm_jw_lit(w, "Search</text>\n");
    write_text_open(w, "id=\"clear\" class=\"button hide\" text-anchor=\"end\"", g->width - PAD_X - 60, 24);
    tm_jw_lit(w, "Clear</text>\n");

    tm_jw_lit(w, "<g id=\"legend\">\n");
    double x = PAD_X;
    if (g->diff) {
        write_legend_entry(w, &x, delta_colour(1, 1), "share grew");
        write_legend_entry(w, &x, delta_colour(-1, 1), "share shrank");
        write_legend_entry(w, &x, delta_colour(0, 1), "unchanged");
        char scale[64];
        snprintf(scale, sizeof scale, "deeper: larger change (full at %.2f pp)", g->delta_full * 100);
        write_legend_entry(w, &x, delta_colour(0.5, 1), scale);
    } else {
        write_legend_entry(w, &x, kind_colour(TM_KIND_NATIVE, 0.5, 0.5), "native");
        write_legend_entry(w, &x, kind_colour(TM_KIND_JAVA, 0.5, 0.5), "Java");
        write_legend_entry(w, &x, kind_colour(TM_KIND_KERNEL, 0.5, 0.5), "kernel");
        write_legend_entry(w, &x, kind_colour(TM_KIND_UNKNOWN, 0.5, 0.5), "no symbol");
    }
    tm_jw_lit(w, "</g>\n");
}

static double share(uint64_t part, uint64_t whole) { return whole ? (double)part / (double)whole : 0; }

static void write_percent(tm_jw *w, double fraction) {
    write_fixed2(w, fraction * 100);
    tm_jw_char(w, '%');
}

static void write_node(tm_jw *w, const graph *g, const placed *at) {
    static const tm_str root_name = {(const uint8_t *)"all", 3};
    const node *nd = &g->tr->v[at->node];
    const label *lab = nd->label == ROOT_LABEL ? NULL : &g->labels->v[nd->label];
    tm_str name = lab ? lab->text : root_name;
    double x = PAD_X + (double)at->start * g->lay->scale;
    double width = lab ? (double)nd->count * g->lay->scale : g->avail;
    uint32_t level = g->opts && g->opts->reverse ? at->depth : g->lay->max_depth - at->depth;
    double y = HEADER_H + (double)level * FRAME_H;

    tm_jw_lit(w, "<g class=\"f\" data-s=\"");
    write_u64(w, at->start);
    tm_jw_lit(w, "\" data-n=\"");
    write_u64(w, nd->count);
    tm_jw_lit(w, "\" data-d=\"");
    write_u64(w, at->depth);
    tm_jw_lit(w, "\"><title>");
    write_xml_all(w, name);
    tm_jw_lit(w, " (");
    double now_share = share(nd->count, g->total);
    rgb colour;
    if (g->diff) {
        double base_share = share(nd->base, g->base_total), delta = now_share - base_share;
        tm_jw_lit(w, "now: ");
        write_samples(w, g->unit, nd->count);
        tm_jw_lit(w, ", ");
        write_percent(w, now_share);
        tm_jw_lit(w, "; base: ");
        write_samples(w, g->unit, nd->base);
        tm_jw_lit(w, ", ");
        write_percent(w, base_share);
        tm_jw_lit(w, "; ");
        tm_jw_char(w, delta < 0 ? '-' : '+');
        write_fixed2(w, fabs(delta) * 100);
        tm_jw_lit(w, " pp");
        colour = delta_colour(delta, g->delta_full);
    } else {
        write_samples(w, g->unit, nd->count);
        tm_jw_lit(w, ", ");
        write_percent(w, now_share);
        colour = lab ? label_colour(lab) : hsl(40, 0.15, 0.78);
    }
    tm_jw_lit(w, ")</title><rect x=\"");
    write_fixed2(w, x);
    tm_jw_lit(w, "\" y=\"");
    write_fixed2(w, y);
    tm_jw_lit(w, "\" width=\"");
    write_fixed2(w, width);
    tm_jw_lit(w, "\" height=\"");
    write_u64(w, FRAME_H - 1);
    /* Rounded corners only where they show: on hairlines they fade the fill. */
    if (width >= 6) tm_jw_lit(w, "\" rx=\"2");
    tm_jw_lit(w, "\" fill=\"");
    write_rgb(w, colour);
    tm_jw_lit(w, "\"/><text x=\"");
    write_fixed2(w, x + 3);
    tm_jw_lit(w, "\" y=\"");
    write_fixed2(w, y + 11.5);
    tm_jw_lit(w, "\">");
    write_fitted(w, name, width);
    tm_jw_lit(w, "</text></g>\n");
}

static void write_document(tm_jw *w, const graph *g) {
    double frames_h = (double)(g->lay->max_depth + 1) * FRAME_H;
    double height = HEADER_H + frames_h + FOOTER_H;
    write_header(w, g, height);
    tm_jw_lit(w, "<g id=\"frames\">\n");
    for (size_t i = 0; i < g->lay->n; i++) write_node(w, g, &g->lay->v[i]);
    tm_jw_lit(w, "</g>\n");
    write_text_open(w, "id=\"status\"", PAD_X, HEADER_H + frames_h + 20);
    tm_jw_lit(w, " </text>\n");
    write_text_open(w, "id=\"matched\" text-anchor=\"end\"", g->width - PAD_X, HEADER_H + frames_h + 20);
    tm_jw_lit(w, " </text>\n<script type=\"text/ecmascript\"><![CDATA[\n");
    for (size_t i = 0; i < sizeof flamegraph_js / sizeof *flamegraph_js; i++)
        tm_jw_raw(w, flamegraph_js[i], strlen(flamegraph_js[i]));
    tm_jw_lit(w, "]]></script>\n</svg>\n");
}

/* ---- entry points ---- */

typedef struct work {
    tm_mem *mem;
    label_set labels;
    source now, base;
    tree tr;
    layout lay;
    tm_jw *w;
} work;

static void work_release(work *k) {
    tm_mem *mem = k->mem;
    source_release(mem, &k->now);
    source_release(mem, &k->base);
    labels_release(mem, &k->labels);
    tm_mem_free(mem, k->tr.v, k->tr.cap * sizeof *k->tr.v);
    if (k->tr.child_order) tm_mem_free(mem, k->tr.child_order, k->tr.n * sizeof *k->tr.child_order);
    tm_u64map_free(mem, &k->tr.child);
    tm_mem_free(mem, k->lay.v, k->lay.cap * sizeof *k->lay.v);
    tm_mem_free(mem, k->w, sizeof *k->w);
}

/* Builds the tree of now (with base's counts matched in for a diff), lays
 * it out and writes it. */
static tm_status build_and_write(work *k, const tm_trace *base, const tm_trace *now,
                                 const tm_flamegraph_options *opts, const tm_sink *out, tm_error *err) {
    TM_TRY(source_open(now, opts, k->mem, &k->labels, &k->now, err));
    if (base) TM_TRY(source_open(base, opts, k->mem, &k->labels, &k->base, err));

    tm_status st = labels_rank(k->mem, &k->labels);
    if (st == TM_OK) st = TM_VEC_RESERVE(k->mem, k->tr.v, k->tr.cap, 1);
    if (st != TM_OK) return tm_fail(err, st, 0, NULL, "out of memory");
    memset(&k->tr.v[0], 0, sizeof k->tr.v[0]);
    k->tr.v[0].label = ROOT_LABEL;
    k->tr.n = 1;
    st = tree_add(k->mem, &k->tr, &k->now);
    if (st == TM_ERR_LIMIT) return tm_fail(err, st, 0, NULL, "flame graph: more than 2^32 call tree nodes");
    if (st == TM_OK) st = tree_order(k->mem, &k->tr, &k->labels);
    if (st != TM_OK) return tm_fail(err, st, 0, NULL, "out of memory");

    graph g;
    memset(&g, 0, sizeof g);
    g.opts = opts;
    g.unit = k->now.value;
    g.peak_rss = tm_profile_peak_rss(k->now.orig);
    g.labels = &k->labels;
    g.tr = &k->tr;
    g.lay = &k->lay;
    g.width = opts && opts->width_px ? opts->width_px : 1200;
    g.avail = g.width > 2 * PAD_X + 1 ? g.width - 2 * PAD_X : 1;
    g.min_px = opts && opts->min_width_px > 0 ? opts->min_width_px : 0.1; /* NaN too */
    g.total = k->now.total;
    double scale = g.total ? g.avail / (double)g.total : 0;
    if (layout_build(k->mem, &k->tr, scale, g.min_px, &k->lay) != TM_OK)
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    if (base) {
        g.diff = 1;
        g.base_total = k->base.total;
        g.base_unmatched = tree_match_base(&k->tr, &k->base);
        /* The largest change drawn sets full saturation, but never less
         * than one percentage point, so that noise stays pale. */
        g.delta_full = 0.01;
        for (size_t i = 1; i < k->lay.n; i++) {
            const node *nd = &k->tr.v[k->lay.v[i].node];
            double d = fabs(share(nd->count, g.total) - share(nd->base, g.base_total));
            if (d > g.delta_full) g.delta_full = d;
        }
    }

    k->w = tm_mem_alloc(k->mem, sizeof *k->w);
    if (!k->w) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    tm_jw_init(k->w, out);
    write_document(k->w, &g);
    if (tm_jw_finish(k->w) != TM_OK) return tm_fail(err, TM_ERR_IO, 0, NULL, "flame graph: write failed");
    return TM_OK;
}

static tm_status write_graph(const tm_trace *base, const tm_trace *now, const tm_flamegraph_options *opts,
                             const tm_sink *out, tm_error *err) {
    work k;
    memset(&k, 0, sizeof k);
    k.mem = tm_trace_profile(now)->mem;
    tm_status st = build_and_write(&k, base, now, opts, out, err);
    work_release(&k);
    return st;
}

/* A width outside what a drawing can use is the caller's mistake (a
 * negative number wrapped to unsigned, say), not a graph to draw. */
static tm_status check_width(const tm_flamegraph_options *opts, tm_error *err) {
    unsigned w = opts ? opts->width_px : 0;
    if (w && (w < TM_FLAMEGRAPH_WIDTH_MIN || w > TM_FLAMEGRAPH_WIDTH_MAX))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "width_px %u is outside %u..%u pixels", w,
                       TM_FLAMEGRAPH_WIDTH_MIN, TM_FLAMEGRAPH_WIDTH_MAX);
    return TM_OK;
}

tm_status tm_write_flamegraph(const tm_trace *t, const tm_flamegraph_options *opts, const tm_sink *out,
                              tm_error *err) {
    if (!t || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_flamegraph: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_flamegraph_options", err));
    TM_TRY(TM_CHECK_RESERVED(opts ? &opts->threads : NULL, "tm_thread_filter", err));
    TM_TRY(check_width(opts, err));
    return tm_trace_budget_status(t, write_graph(NULL, t, opts, out, err), err);
}

tm_status tm_write_flamegraph_diff(const tm_trace *base, const tm_trace *now, const tm_flamegraph_options *opts,
                                   const tm_sink *out, tm_error *err) {
    if (!base || !now || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_flamegraph_diff: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_flamegraph_options", err));
    TM_TRY(TM_CHECK_RESERVED(opts ? &opts->threads : NULL, "tm_thread_filter", err));
    TM_TRY(check_width(opts, err));
    TM_TRY(tm_profile_diff_value(tm_trace_profile(base), tm_trace_profile(now), opts ? opts->value : TM_VALUE_DEFAULT,
                                 err));
    return tm_trace_budget_status(base, tm_trace_budget_status(now, write_graph(base, now, opts, out, err), err), err);
}
