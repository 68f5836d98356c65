/*
 * out_folded.c — profile model -> folded stacks ("root;...;leaf COUNT", the
 * text format of Brendan Gregg's flame graph tools) and their two-column
 * diff ("stack BASE_COUNT NEW_COUNT", the difffolded convention).
 *
 * One line per distinct stack text: frame labels (aggregate.h) root first,
 * joined by ';', then a space and the summed sample weight. Lines are keyed
 * by their text, not by stack id, so two stacks that read the same (equal
 * names at different addresses) become one line. Labels are made safe for
 * the format: ';' becomes ':', newline and CR become a space; other bytes
 * are kept as they are (the output is bytes, like the input names).
 * With thread_prefix the thread label is the root frame.
 *
 * A stack without frames is written as "[no frames] COUNT" (with
 * thread_prefix: "THREAD;[no frames] COUNT", not to be taken for a frame
 * named like the thread), so its samples are never dropped; in_folded.c
 * reads "[no frames]" back as an empty stack.
 *
 * Lines are sorted by the bytes of the whole line, so output is stable and
 * diff-friendly. Cost: one pass over the samples (tm_stack_counts_build);
 * all string work is per distinct stack.
 */
#include <stdlib.h>

#include "profile/aggregate.h"  /* tm_stack_counts, tm_frame_labels, tm_thread_select */
#include "wire/json_write.h" /* tm_jw */

static const char NO_FRAMES[] = "[no frames]";

/* One stack text and its count(s): counts[0] for folded, base/now in a diff. */
typedef struct folded_line {
    tm_str stack;
    uint64_t counts[2];
} folded_line;

/* The lines of one profile, sorted by stack text and merged. Texts live in
 * the arena (allocated through the profile's tm_mem). */
typedef struct folded_set {
    tm_mem *mem;
    folded_line *v;
    size_t n, cap;
    tm_arena text;
} folded_set;

static void set_release(folded_set *s) {
    if (!s->mem) return;
    tm_mem_free(s->mem, s->v, s->cap * sizeof *s->v);
    tm_arena_release(&s->text);
    memset(s, 0, sizeof *s);
}

static int cmp_text(tm_str a, tm_str b) {
    size_t m = a.len < b.len ? a.len : b.len;
    int c = m ? memcmp(a.data, b.data, m) : 0;
    if (c) return c;
    return (a.len > b.len) - (a.len < b.len);
}

static int cmp_line_stack(const void *a, const void *b) {
    return cmp_text(((const folded_line *)a)->stack, ((const folded_line *)b)->stack);
}

static int cmp_str(const void *a, const void *b) { return cmp_text(*(const tm_str *)a, *(const tm_str *)b); }

/* Copies a label, replacing the bytes that would break a folded line. */
static uint8_t *put_label(uint8_t *d, tm_str s) {
    for (size_t i = 0; i < s.len; i++) {
        uint8_t c = s.data[i];
        d[i] = c == ';' ? ':' : (c == '\n' || c == '\r') ? ' ' : c;
    }
    return d + s.len;
}

/* Joins the stack's labels (root first, after the optional thread label). */
static tm_status stack_text(const tm_profile *p, const tm_frame_labels *labels, const tm_stack_count *c,
                            int prefix, tm_arena *ar, tm_str *out) {
    char buf[32];
    tm_str thread = {0};
    const tm_prof_stack *sk = &p->stacks[c->stack];
    const uint32_t *ids = tm_profile_stack_frames(p, sk);
    size_t len = 0;
    if (prefix) {
        thread = tm_thread_label(p, c->thread, buf);
        len = thread.len + 1;
    }
    if (!sk->len) len += sizeof NO_FRAMES - 1;
    for (uint32_t j = 0; j < sk->len; j++) len += labels->of[ids[j]].len + (j ? 1 : 0);
    uint8_t *d = tm_arena_alloc(ar, len + 1);
    if (!d) return TM_ERR_NOMEM;
    out->data = d;
    out->len = len;
    if (prefix) {
        d = put_label(d, thread);
        *d++ = ';';
    }
    if (!sk->len) memcpy(d, NO_FRAMES, sizeof NO_FRAMES - 1);
    for (uint32_t j = sk->len; j-- > 0;) { /* leaf first in the model */
        d = put_label(d, labels->of[ids[j]]);
        if (j) *d++ = ';';
    }
    return TM_OK;
}

/* Fills s (side: which count column) with the merged, stack-sorted lines
 * of the selected threads of p. */
static tm_status build_set(const tm_profile *p, const uint8_t *sel, int prefix, int side, folded_set *s) {
    memset(s, 0, sizeof *s);
    s->mem = p->mem;
    tm_arena_init(&s->text, p->mem);
    tm_stack_counts counts;
    tm_frame_labels labels;
    TM_TRY(tm_stack_counts_build(p, sel, prefix, &counts));
    tm_status st = tm_frame_labels_build(p, p->label_lines, &labels);
    if (st != TM_OK) {
        tm_stack_counts_release(p, &counts);
        return st;
    }
    st = TM_VEC_RESERVE(p->mem, s->v, s->cap, counts.n);
    for (size_t i = 0; i < counts.n && st == TM_OK; i++) {
        folded_line *l = &s->v[s->n++];
        l->counts[0] = l->counts[1] = 0;
        l->counts[side] = counts.v[i].count;
        st = stack_text(p, &labels, &counts.v[i], prefix, &s->text, &l->stack);
    }
    tm_frame_labels_release(p, &labels);
    tm_stack_counts_release(p, &counts);
    if (st != TM_OK) return st;
    if (s->n > 1) qsort(s->v, s->n, sizeof *s->v, cmp_line_stack);
    size_t w = 0; /* merge equal texts */
    for (size_t i = 0; i < s->n; i++) {
        if (w && tm_bytes_eq(s->v[w - 1].stack, s->v[i].stack)) {
            s->v[w - 1].counts[side] += s->v[i].counts[side];
        } else {
            s->v[w++] = s->v[i];
        }
    }
    s->n = w;
    return TM_OK;
}

/* Renders "stack C1[ C2]" for every line, sorts the lines byte-wise and
 * writes them. */
static tm_status write_lines(tm_mem *mem, const folded_line *v, size_t n, int columns, const tm_sink *out,
                             tm_error *err) {
    tm_arena ar;
    tm_arena_init(&ar, mem);
    tm_str *text = tm_mem_alloc(mem, (n + 1) * sizeof *text);
    tm_jw *w = tm_mem_alloc(mem, sizeof *w);
    tm_status st = text && w ? TM_OK : TM_ERR_NOMEM;
    for (size_t i = 0; i < n && st == TM_OK; i++) {
        char *d = tm_arena_alloc(&ar, v[i].stack.len + 2 * 21);
        if (!d) {
            st = TM_ERR_NOMEM;
            break;
        }
        text[i].data = (const uint8_t *)d;
        memcpy(d, v[i].stack.data, v[i].stack.len);
        d += v[i].stack.len;
        for (int c = 0; c < columns; c++) {
            *d++ = ' ';
            d = tm_put_u64(d, v[i].counts[c]);
        }
        text[i].len = (size_t)(d - (const char *)text[i].data);
    }
    if (st == TM_OK) {
        if (n > 1) qsort(text, n, sizeof *text, cmp_str);
        tm_jw_init(w, out);
        for (size_t i = 0; i < n; i++) {
            tm_jw_raw(w, text[i].data, text[i].len);
            tm_jw_char(w, '\n');
        }
        st = tm_jw_finish(w);
        if (st != TM_OK) st = tm_fail(err, st, 0, NULL, "writing folded stacks failed");
    } else {
        st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    }
    tm_mem_free(mem, w, sizeof *w);
    tm_mem_free(mem, text, (n + 1) * sizeof *text);
    tm_arena_release(&ar);
    return st;
}

tm_status tm_write_folded(const tm_trace *t, const tm_folded_options *opts, const tm_sink *out, tm_error *err) {
    if (!t || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_folded: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_folded_options", err));
    TM_TRY(TM_CHECK_RESERVED(opts ? &opts->threads : NULL, "tm_thread_filter", err));
    tm_profile view;
    TM_TRY(tm_profile_value_view(tm_trace_profile(t), opts ? opts->value : TM_VALUE_DEFAULT, &view, NULL, err));
    const tm_profile *p = &view;
    uint8_t *sel = NULL;
    tm_status st = tm_thread_select(p, opts ? &opts->threads : NULL, &sel, err);
    if (st == TM_OK) {
        folded_set s;
        st = build_set(p, sel, opts && opts->thread_prefix, 0, &s);
        tm_thread_selection_free(p, sel);
        if (st == TM_OK) st = write_lines(p->mem, s.v, s.n, 1, out, err);
        else st = tm_fail(err, st, 0, NULL, "out of memory");
        set_release(&s);
    }
    tm_profile_value_view_release(tm_trace_profile(t), &view);
    return tm_trace_budget_status(t, st, err);
}

/* Lines of one side of a diff; a thread filter that matches nothing in this
 * profile leaves the side empty (*matched = 0) instead of failing. */
static tm_status diff_side(const tm_profile *orig, const tm_folded_options *opts, int side, folded_set *s,
                           int *matched, tm_error *err) {
    uint8_t *sel = NULL;
    memset(s, 0, sizeof *s);
    tm_profile view;
    TM_TRY(tm_profile_value_view(orig, opts ? opts->value : TM_VALUE_DEFAULT, &view, NULL, err));
    const tm_profile *p = &view;
    tm_status st = tm_thread_select(p, opts ? &opts->threads : NULL, &sel, err);
    *matched = st == TM_OK;
    if (st == TM_OK) {
        st = build_set(p, sel, opts && opts->thread_prefix, side, s);
        tm_thread_selection_free(p, sel);
        if (st != TM_OK) {
            set_release(s);
            st = tm_fail(err, st, 0, NULL, "out of memory");
        }
    } else if (st == TM_ERR_INVALID_ARG) {
        st = TM_OK;
    }
    tm_profile_value_view_release(orig, &view);
    return st;
}

tm_status tm_write_folded_diff(const tm_trace *base, const tm_trace *now, const tm_folded_options *opts,
                               const tm_sink *out, tm_error *err) {
    if (!base || !now || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_folded_diff: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    TM_TRY(TM_CHECK_RESERVED(opts, "tm_folded_options", err));
    TM_TRY(TM_CHECK_RESERVED(opts ? &opts->threads : NULL, "tm_thread_filter", err));
    const tm_profile *pb = tm_trace_profile(base), *pn = tm_trace_profile(now);
    TM_TRY(tm_profile_diff_value(pb, pn, opts ? opts->value : TM_VALUE_DEFAULT, err));
    folded_set a, b;
    int a_matched = 0, b_matched = 0;
    folded_line *v = NULL;
    size_t n = 0, cap = 0;
    tm_status st = diff_side(pb, opts, 0, &a, &a_matched, err);
    if (st == TM_OK) {
        st = diff_side(pn, opts, 1, &b, &b_matched, err);
        if (st != TM_OK) set_release(&a);
    }
    if (st != TM_OK) return tm_trace_budget_status(base, tm_trace_budget_status(now, st, err), err);
    if (!a_matched && !b_matched) { /* err holds the second profile's message */
        st = TM_ERR_INVALID_ARG;
    } else if (TM_VEC_RESERVE(pn->mem, v, cap, a.n + b.n + 1) != TM_OK) {
        st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    } else {
        size_t i = 0, j = 0; /* merge join: both sides are sorted by stack text */
        while (i < a.n || j < b.n) {
            int c = i == a.n ? 1 : j == b.n ? -1 : cmp_text(a.v[i].stack, b.v[j].stack);
            folded_line *l = &v[n++];
            *l = c <= 0 ? a.v[i] : b.v[j];
            if (c == 0) l->counts[1] = b.v[j].counts[1];
            i += c <= 0;
            j += c >= 0;
        }
        st = write_lines(pn->mem, v, n, 2, out, err);
    }
    tm_mem_free(pn->mem, v, cap * sizeof *v);
    set_release(&a);
    set_release(&b);
    return tm_trace_budget_status(base, tm_trace_budget_status(now, st, err), err);
}
