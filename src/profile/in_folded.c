/*
 * in_folded.c — reading folded stacks ("root;...;leaf COUNT" lines, the
 * format out_folded.c writes and flame graph tools exchange) into the
 * profile model, so every exporter also works on folded input.
 *
 * Lines end in LF or CRLF; blank lines and lines starting with '#' are
 * skipped; trailing blanks are ignored; a UTF-8 byte order mark is skipped.
 * The count is the decimal number (below 2^63) after the LAST space, so
 * frame names may contain spaces; a line without one, or with a count that
 * is negative, fractional, too large or after a tab, is TM_ERR_MALFORMED at
 * the line's byte offset, with its line number. Frames are split on
 * ';' (an empty name is a frame named ""); the text "[no frames]" alone is
 * an empty stack, as out_folded.c writes one.
 *
 * The model: each distinct name is a frame with just a function name
 * (TM_FRAME_HAS_FUNCTION); each line is one sample of one thread, tid 0
 * named "folded" (the file says nothing of threads), whose weight is the count
 * (p->weights) and whose time is 0 (p->untimed). Lines with the same stack
 * stay separate samples. Names are views into the input buffer.
 *
 * Two passes: the first counts sample lines so samples and weights are
 * allocated exactly once, the second parses them.
 */
#include <stdio.h>

#include "profile/trace.h" /* tm_trace, tm_folded_read */

static const char NO_FRAMES[] = "[no frames]";

typedef struct reader {
    tm_trace *t;
    const uint8_t *base;
    tm_error *err;
    uint32_t *ids; /* frame ids of the current line */
    size_t cap_ids;
} reader;

/* The line starting at s (ends before '\n' or at end), without trailing
 * blanks; *next is the start of the following line. */
static tm_str line_at(const uint8_t *s, const uint8_t *end, const uint8_t **next) {
    const uint8_t *nl = memchr(s, '\n', (size_t)(end - s));
    const uint8_t *e = nl ? nl : end;
    *next = nl ? nl + 1 : end;
    while (e > s && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
    tm_str line = {s, (size_t)(e - s)};
    return line;
}

static int is_sample_line(tm_str line) { return line.len && line.data[0] != '#'; }

/* Where the count of a line starts: after its last blank (space or tab);
 * 0 when the line has no blank. */
static size_t count_start(tm_str line) {
    size_t at = line.len;
    while (at && line.data[at - 1] != ' ' && line.data[at - 1] != '\t') at--;
    return at;
}

static int is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

int tm_folded_looks_like_sample(tm_str line) {
    size_t at = count_start(line);
    if (!at || at == line.len) return 0;
    const uint8_t *c = line.data + at, *end = line.data + line.len;
    if ((*c == '-' || *c == '+') && c + 1 < end) c++;
    return is_digit(*c);
}

/* Splits "STACK COUNT" at the last blank. Returns NULL, or what is wrong
 * with the count. Counts stay below 2^63 because pprof and speedscope
 * write them as signed 64-bit numbers. */
static const char *split_count(tm_str line, tm_str *stack, uint64_t *count) {
    size_t at = count_start(line);
    if (!at || at == line.len) return "expected \"frames COUNT\" (no count after the last space)";
    if (line.data[at - 1] == '\t') return "a tab before the count (folded stacks separate it with a space)";
    tm_str tok = {line.data + at, line.len - at};
    if (tok.data[0] == '-') return "negative count";
    uint64_t v = 0;
    for (size_t i = 0; i < tok.len; i++) {
        if (tok.data[i] == '.' && i && is_digit(tok.data[i - 1])) return "the count is not a whole number";
        if (!is_digit(tok.data[i])) return "the count is not a decimal number";
        unsigned d = (unsigned)tok.data[i] - '0';
        if (v > ((uint64_t)INT64_MAX - d) / 10) return "count past 2^63 - 1";
        v = v * 10 + d;
    }
    stack->data = line.data;
    stack->len = at - 1;
    *count = v;
    return NULL;
}

static tm_status fail_at(reader *r, tm_status code, tm_str line, size_t line_no, const char *what) {
    return tm_fail(r->err, code, (uint64_t)(line.data - r->base), NULL, "folded line %zu: %s", line_no, what);
}

/* Interns the stack of one line (root-first text -> leaf-first ids). */
static tm_status intern_stack(reader *r, tm_str text, size_t line_no, uint32_t *out) {
    tm_profile *p = &r->t->profile;
    size_t n = 0;
    if (!tm_bytes_eq(text, (tm_str){(const uint8_t *)NO_FRAMES, sizeof NO_FRAMES - 1})) {
        n = 1;
        for (size_t i = 0; i < text.len; i++) n += text.data[i] == ';';
    }
    if (n > r->t->limits.max_stack_depth) {
        char msg[96];
        snprintf(msg, sizeof msg, "%zu frames (max_stack_depth %llu)", n,
                 (unsigned long long)r->t->limits.max_stack_depth);
        return fail_at(r, TM_ERR_LIMIT, text, line_no, msg);
    }
    if (TM_VEC_RESERVE(&r->t->mem, r->ids, r->cap_ids, n + 1) != TM_OK)
        return tm_fail(r->err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    const uint8_t *s = text.data, *end = text.data + text.len;
    for (size_t k = n; k-- > 0;) { /* root first in the text, leaf first in the model */
        const uint8_t *semi = k ? memchr(s, ';', (size_t)(end - s)) : end;
        tm_prof_frame f;
        memset(&f, 0, sizeof f);
        f.function.data = s;
        f.function.len = (size_t)(semi - s);
        f.flags = TM_FRAME_HAS_FUNCTION;
        tm_status st = tm_profile_intern_frame(p, &f, &r->ids[k]);
        if (st == TM_ERR_LIMIT) {
            char msg[96];
            snprintf(msg, sizeof msg, "more than %llu unique frames (max_unique_frames)",
                     (unsigned long long)p->max_unique_frames);
            return fail_at(r, st, text, line_no, msg);
        }
        if (st != TM_OK) return tm_fail(r->err, st, 0, NULL, "out of memory");
        s = semi + 1;
    }
    tm_status st = tm_profile_intern_stack(p, r->ids, n, out);
    if (st == TM_ERR_LIMIT) return fail_at(r, st, text, line_no, "too many frames in all stacks");
    if (st != TM_OK) return tm_fail(r->err, st, 0, NULL, "out of memory");
    return TM_OK;
}

static tm_status read_lines(reader *r, const uint8_t *buf, size_t len) {
    tm_profile *p = &r->t->profile;
    const uint8_t *end = buf + len, *next;
    size_t n = 0;
    for (const uint8_t *s = buf; s < end; s = next) {
        tm_str line = line_at(s, end, &next);
        if (!is_sample_line(line)) continue;
        if (++n > r->t->limits.max_samples) {
            char msg[96];
            snprintf(msg, sizeof msg, "more than %llu samples (max_samples)",
                     (unsigned long long)r->t->limits.max_samples);
            size_t line_no = 1;
            for (const uint8_t *c = buf; c < s; c++) line_no += *c == '\n';
            return fail_at(r, TM_ERR_LIMIT, line, line_no, msg);
        }
    }
    if (!n) return TM_OK;
    uint32_t thread;
    p->samples = tm_mem_alloc(p->mem, n * sizeof *p->samples);
    if (p->samples) {
        p->cap_samples = n;
        p->weights = tm_mem_alloc(p->mem, n * sizeof *p->weights); /* freed with cap_samples */
    }
    if (!p->samples || !p->weights || tm_profile_thread(p, 0, &thread) != TM_OK)
        return tm_fail(r->err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    static const char thread_name[] = "folded";
    tm_str name = {(const uint8_t *)thread_name, sizeof thread_name - 1};
    tm_profile_name_thread(p, thread, name, 1);
    size_t line_no = 0;
    uint64_t total = 0;
    for (const uint8_t *s = buf; s < end; s = next) {
        tm_str line = line_at(s, end, &next), stack;
        uint64_t count;
        uint32_t stack_id;
        line_no++;
        if (!is_sample_line(line)) continue;
        const char *bad_count = split_count(line, &stack, &count);
        if (bad_count) return fail_at(r, TM_ERR_MALFORMED, line, line_no, bad_count);
        if (count > (uint64_t)INT64_MAX - total)
            return fail_at(r, TM_ERR_MALFORMED, line, line_no, "the counts add up past 2^63 - 1");
        total += count;
        TM_TRY(intern_stack(r, stack, line_no, &stack_id));
        p->weights[p->n_samples] = count;
        TM_TRY(tm_profile_add_sample(p, 0, stack_id, thread)); /* within cap: cannot fail */
    }
    return TM_OK;
}

tm_status tm_folded_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err) {
    reader r;
    memset(&r, 0, sizeof r);
    r.t = t;
    r.base = buf;
    r.err = err;
    tm_profile *p = &t->profile;
    p->untimed = 1;
    size_t bom = tm_utf8_bom_len(buf, len); /* offsets still count it */
    tm_status st = read_lines(&r, buf + bom, len - bom);
    tm_mem_free(&t->mem, r.ids, r.cap_ids * sizeof *r.ids);
    if (st != TM_OK) return st;
    p->stats.samples_kept = p->n_samples;
    p->stats.threads = p->n_threads;
    return TM_OK;
}
