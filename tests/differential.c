/*
 * differential.c — tm_diff_check (differential.h): runs the profile model
 * and the SQL model on the same bytes and compares what they accept,
 * reject and keep.
 *
 * Both sides are reduced to records (ts, tid, stack), stack = the frame
 * names leaf to root encoded as length-prefixed bytes, then sorted and
 * compared group by group (a group = the records of one key). How each
 * side maps onto a record, from reading the two decoders:
 *  - profile model: stacks are stored leaf first (trace.c reverses
 *    Perfetto's root-first frame_ids) and deduplicated; a frame in a Java
 *    mapping has its name split at the last '.' into module and function,
 *    joined back here; a frame without a function name has name "".
 *    Samples without a thread have tid 0. Off-CPU samples, which it keeps
 *    apart from the others, are records too: SQL has them in perf_sample.
 *  - SQL model: callsite_id is the leaf; parent_id leads to the root.
 *    Frame names are NULL without a function name ("" here, as above).
 *    Symbols: a frame whose mapping has a build id and whose symbol set has
 *    rows (ModuleSymbols, or R8 line ranges retraced) is those rows' names,
 *    innermost first, as the profile model expands it; else a frame with a
 *    deobfuscated_name is that name; else its name.
 *    perf_sample and cpu_profile_stack_sample have utid; StackSample rows
 *    (stack_sample rows in neither of those views) have a task context
 *    whose utid may be NULL: the profile model then uses the process's
 *    main thread (tid = pid) when the pid is known, else tid 0, and so
 *    does this mapping.
 *  - A sample whose callstack cannot be resolved, is empty, or is absent
 *    (skipped PerfSample, no callstack) is a row with callsite_id NULL in
 *    SQL; the profile model drops it and counts it (dropped_unresolved,
 *    perf_samples_skipped, *_without_callstack), except an empty stack,
 *    which it keeps. So a NULL callsite is the empty stack.
 *  - The check is one way, as the readers' contract says: every sample the
 *    profile model keeps is in SQL. SQL may have more, at most as many as
 *    the profile model counts as dropped (the counters above, and
 *    timestamps it cannot convert or that overflow int64, which Trace
 *    Processor keeps as they wrap).
 *  - The one place the profile model knowingly keeps more: StreamingProfile
 *    Packet samples on a sequence without a legacy ThreadDescriptor time
 *    base, which Trace Processor drops and the profile model times from
 *    packet timestamps (counted in streaming_without_reference_time). Up
 *    to that many profile samples may be missing from SQL.
 */
#include "differential.h"

#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"

/* ---- growable buffers (out of memory aborts: this is test tooling) ---- */

static void *xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) abort();
    return q;
}

#define GROW(vec, n, cap)                                        \
    do {                                                         \
        if ((n) == (cap)) {                                      \
            (cap) = (cap) ? (cap) * 2 : 64;                      \
            (vec) = xrealloc((vec), (cap) * sizeof *(vec));      \
        }                                                        \
    } while (0)

/* An encoded stack: per frame a 4-byte length and the name's bytes. */
typedef struct dkey {
    unsigned char *data;
    size_t len, cap, frames;
} dkey;

static void key_add(dkey *k, const void *name, size_t n) {
    while (k->len + 4 + n > k->cap) {
        k->cap = k->cap ? k->cap * 2 : 64;
        k->data = xrealloc(k->data, k->cap);
    }
    uint32_t n32 = (uint32_t)n;
    memcpy(k->data + k->len, &n32, 4);
    if (n) memcpy(k->data + k->len + 4, name, n);
    k->len += 4 + n;
    k->frames++;
}

typedef struct drec {
    int64_t ts, tid;
    const dkey *stack;
    const char *table; /* SQL: the table of the row; profile: NULL */
    int no_callsite;   /* SQL: callsite_id was NULL */
} drec;

typedef struct drecs {
    drec *v;
    size_t n, cap;
} drecs;

static void push_rec(drecs *r, drec rec) {
    GROW(r->v, r->n, r->cap);
    r->v[r->n++] = rec;
}

static int key_cmp(const dkey *a, const dkey *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = n ? memcmp(a->data, b->data, n) : 0;
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int rec_cmp(const drec *a, const drec *b) {
    if (a->ts != b->ts) return a->ts < b->ts ? -1 : 1;
    if (a->tid != b->tid) return a->tid < b->tid ? -1 : 1;
    return key_cmp(a->stack, b->stack);
}

static int rec_qsort(const void *a, const void *b) { return rec_cmp(a, b); }

/* ---- readable text ---- */

typedef struct text {
    char *p;
    size_t n, cap; /* cap includes the NUL */
} text;

static void tx_printf(text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static void tx_printf(text *t, const char *fmt, ...) {
    if (t->n + 1 >= t->cap) return;
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(t->p + t->n, t->cap - t->n, fmt, ap);
    va_end(ap);
    if (w > 0) t->n = t->n + (size_t)w < t->cap ? t->n + (size_t)w : t->cap - 1;
}

/* A stack as "leaf <- ... <- root", names escaped and cut short so that a
 * fuzzed name cannot flood the message. */
static void tx_stack(text *t, const dkey *k) {
    enum { MAX_FRAMES = 6, MAX_NAME = 48 };
    if (!k->frames) {
        tx_printf(t, "(empty)");
        return;
    }
    size_t off = 0;
    for (size_t f = 0; f < k->frames; f++) {
        uint32_t n;
        memcpy(&n, k->data + off, 4);
        const unsigned char *s = k->data + off + 4;
        off += 4 + n;
        if (f == MAX_FRAMES) {
            tx_printf(t, " <- ... (%zu frames)", k->frames);
            return;
        }
        if (f) tx_printf(t, " <- ");
        if (!n) tx_printf(t, "?");
        for (uint32_t i = 0; i < n && i < MAX_NAME; i++)
            tx_printf(t, s[i] >= 0x20 && s[i] < 0x7f ? "%c" : "\\x%02x", s[i]);
        if (n > MAX_NAME) tx_printf(t, "...");
    }
}

static void tx_rec(text *t, const drec *r) {
    tx_printf(t, "ts=%lld tid=%lld stack [", (long long)r->ts, (long long)r->tid);
    tx_stack(t, r->stack);
    tx_printf(t, "]");
}

/* ---- the profile model's side ---- */

static void profile_records(const tm_profile *p, dkey **keys, drecs *out) {
    *keys = calloc(p->n_stacks ? p->n_stacks : 1, sizeof **keys);
    if (!*keys) abort();
    for (size_t s = 0; s < p->n_stacks; s++) {
        const uint32_t *ids = tm_profile_stack_frames(p, &p->stacks[s]);
        for (uint32_t i = 0; i < p->stacks[s].len; i++) {
            const tm_prof_frame *f = &p->frames[ids[i]];
            if (f->flags & TM_FRAME_HAS_MODULE) { /* a Java name split at its last '.' */
                size_t n = f->module.len + 1 + f->function.len;
                char *full = xrealloc(NULL, n);
                memcpy(full, f->module.data, f->module.len);
                full[f->module.len] = '.';
                if (f->function.len) memcpy(full + f->module.len + 1, f->function.data, f->function.len);
                key_add(&(*keys)[s], full, n);
                free(full);
            } else if (f->flags & TM_FRAME_HAS_FUNCTION) {
                key_add(&(*keys)[s], f->function.data, f->function.len);
            } else {
                key_add(&(*keys)[s], NULL, 0);
            }
        }
    }
    for (size_t i = 0; i < p->n_samples; i++) {
        const tm_prof_sample *smp = &p->samples[i];
        drec r = {smp->ts, p->threads[smp->thread].tid, &(*keys)[smp->stack], NULL, 0};
        push_rec(out, r);
    }
    for (size_t i = 0; i < p->n_off_samples; i++) { /* kept apart in the model, perf_sample rows in SQL */
        const tm_prof_off_sample *smp = &p->off_samples[i];
        drec r = {smp->ts, p->threads[smp->thread].tid, &(*keys)[smp->stack], NULL, 0};
        push_rec(out, r);
    }
}

/* ---- the SQL model's side ---- */

typedef struct sql_side {
    sqlite3 *db;
    char *err;          /* first SQL failure, malloc'd */
    /* By row id. */
    int64_t *tid_of_utid; size_t n_utid;
    int64_t *pid_of_upid; size_t n_upid;
    dkey *frame_key; size_t n_frames; /* per frame: its name(s), encoded as in a stack */
    int64_t *cs_parent, *cs_frame; size_t n_cs;  /* parent -1: root */
    dkey *cs_key; unsigned char *cs_done;         /* memoised stacks per callsite */
    dkey empty;
} sql_side;

static int sql_fail(sql_side *s, const char *what) {
    if (!s->err) {
        size_t n = strlen(what) + strlen(sqlite3_errmsg(s->db)) + 8;
        s->err = xrealloc(NULL, n);
        snprintf(s->err, n, "%s: %s", what, sqlite3_errmsg(s->db));
    }
    return 0;
}

/* Records the first reason the SQL side could not be read; returns 0. */
static int set_err(sql_side *s, const char *what, int64_t id) {
    if (!s->err) {
        s->err = xrealloc(NULL, 128);
        snprintf(s->err, 128, "%s %lld", what, (long long)id);
    }
    return 0;
}

/* Checks that a row id read from one table is below n (ids are row numbers). */
static int in_range(sql_side *s, int64_t id, size_t n, const char *what) {
    return (id >= 0 && (uint64_t)id < n) || set_err(s, what, id);
}

enum { ID_ROWS_MAX = 1u << 30 };

static int load_ids(sql_side *s, const char *sql, int64_t **vals, size_t *n) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_fail(s, sql);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        if (!in_range(s, id, ID_ROWS_MAX, "row id out of range:")) break;
        if ((size_t)id >= *n) {
            *vals = xrealloc(*vals, ((size_t)id + 1) * sizeof **vals);
            for (size_t k = *n; k <= (size_t)id; k++) (*vals)[k] = 0;
            *n = (size_t)id + 1;
        }
        (*vals)[id] = sqlite3_column_int64(q, 1);
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) sql_fail(s, sql);
    sqlite3_finalize(q);
    return !s->err;
}

/* A frame's names: its symbols' (innermost first) when symbols of its
 * mapping's build id name it, as the profile model then expands it; else
 * its deobfuscated name, else its name. */
static int load_frames(sql_side *s) {
    const char *sql = "SELECT f.id, f.name, f.deobfuscated_name, sym.name, m.build_id != '' AND sym.id IS NOT NULL"
                      " FROM stack_profile_frame AS f JOIN stack_profile_mapping AS m ON m.id = f.mapping"
                      " LEFT JOIN stack_profile_symbol AS sym USING (symbol_set_id) ORDER BY f.id, sym.id";
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_fail(s, sql);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        if (!in_range(s, id, ID_ROWS_MAX, "row id out of range:")) break;
        if ((size_t)id >= s->n_frames) {
            s->frame_key = xrealloc(s->frame_key, ((size_t)id + 1) * sizeof *s->frame_key);
            memset(s->frame_key + s->n_frames, 0, ((size_t)id + 1 - s->n_frames) * sizeof *s->frame_key);
            s->n_frames = (size_t)id + 1;
        }
        dkey *k = &s->frame_key[id];
        int col = sqlite3_column_int(q, 4) ? 3 : sqlite3_column_type(q, 2) != SQLITE_NULL ? 2 : 1;
        if (col != 3 && k->frames) continue; /* one row per symbol: the name only once */
        const void *name = sqlite3_column_blob(q, col); /* names may hold NUL bytes */
        key_add(k, name, (size_t)sqlite3_column_bytes(q, col));
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) sql_fail(s, sql);
    sqlite3_finalize(q);
    return !s->err;
}

static int load_callsites(sql_side *s) {
    const char *sql = "SELECT id, parent_id, frame_id FROM stack_profile_callsite";
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_fail(s, sql);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        int64_t id = sqlite3_column_int64(q, 0);
        if (!in_range(s, id, ID_ROWS_MAX, "row id out of range:")) break;
        if ((size_t)id >= s->n_cs) {
            s->cs_parent = xrealloc(s->cs_parent, ((size_t)id + 1) * sizeof *s->cs_parent);
            s->cs_frame = xrealloc(s->cs_frame, ((size_t)id + 1) * sizeof *s->cs_frame);
            for (size_t k = s->n_cs; k <= (size_t)id; k++) s->cs_parent[k] = -1, s->cs_frame[k] = -1;
            s->n_cs = (size_t)id + 1;
        }
        s->cs_parent[id] = sqlite3_column_type(q, 1) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, 1);
        s->cs_frame[id] = sqlite3_column_int64(q, 2);
    }
    if (rc != SQLITE_DONE && rc != SQLITE_ROW) sql_fail(s, sql);
    sqlite3_finalize(q);
    s->cs_key = calloc(s->n_cs ? s->n_cs : 1, sizeof *s->cs_key);
    s->cs_done = calloc(s->n_cs ? s->n_cs : 1, 1);
    if (!s->cs_key || !s->cs_done) abort();
    return !s->err;
}

/* The stack of a leaf callsite, walked up the parent chain (at most one
 * step per callsite row, so a cycle cannot loop). */
static const dkey *callsite_stack(sql_side *s, int64_t leaf) {
    if (!in_range(s, leaf, s->n_cs, "no such callsite:")) return NULL;
    dkey *k = &s->cs_key[leaf];
    if (s->cs_done[leaf]) return k;
    int64_t c = leaf;
    for (size_t steps = 0; c >= 0; steps++) {
        if (steps == s->n_cs) {
            set_err(s, "cyclic parent chain from callsite", leaf);
            return NULL;
        }
        if (!in_range(s, c, s->n_cs, "no such parent callsite:") ||
            !in_range(s, s->cs_frame[c], s->n_frames, "no such frame:"))
            return NULL;
        int64_t fr = s->cs_frame[c];
        const dkey *names = &s->frame_key[fr];
        while (k->len + names->len > k->cap) {
            k->cap = k->cap ? k->cap * 2 : 64;
            k->data = xrealloc(k->data, k->cap);
        }
        if (names->len) memcpy(k->data + k->len, names->data, names->len);
        k->len += names->len;
        k->frames += names->frames;
        c = s->cs_parent[c];
    }
    s->cs_done[leaf] = 1;
    return k;
}

static int64_t col_id(sqlite3_stmt *q, int col) {
    return sqlite3_column_type(q, col) == SQLITE_NULL ? -1 : sqlite3_column_int64(q, col);
}

/* Rows of one sample table: columns ts, utid, upid, callsite_id. */
static int load_samples(sql_side *s, const char *table, const char *sql, drecs *out) {
    sqlite3_stmt *q;
    if (sqlite3_prepare_v2(s->db, sql, -1, &q, NULL) != SQLITE_OK) return sql_fail(s, sql);
    int rc;
    while ((rc = sqlite3_step(q)) == SQLITE_ROW) {
        drec r = {sqlite3_column_int64(q, 0), 0, &s->empty, table, 0};
        int64_t utid = col_id(q, 1), upid = col_id(q, 2), cs = col_id(q, 3);
        if (utid >= 0) {
            if (!in_range(s, utid, s->n_utid, "no such utid:")) break;
            r.tid = s->tid_of_utid[utid];
        } else if (upid >= 0) { /* no thread: the process's main thread, as the profile model does */
            if (!in_range(s, upid, s->n_upid, "no such upid:")) break;
            r.tid = s->pid_of_upid[upid];
        }
        if (cs < 0) r.no_callsite = 1;
        else if (!(r.stack = callsite_stack(s, cs))) break;
        push_rec(out, r);
    }
    if (!s->err && rc != SQLITE_DONE && rc != SQLITE_ROW) sql_fail(s, sql);
    sqlite3_finalize(q);
    return !s->err;
}

static int sql_records(sql_side *s, drecs *out) {
    return load_ids(s, "SELECT utid, tid FROM thread", &s->tid_of_utid, &s->n_utid) &&
           load_ids(s, "SELECT upid, pid FROM process", &s->pid_of_upid, &s->n_upid) && load_frames(s) &&
           load_callsites(s) &&
           load_samples(s, "perf_sample", "SELECT ts, utid, NULL, callsite_id FROM perf_sample", out) &&
           load_samples(s, "cpu_profile_stack_sample",
                        "SELECT ts, utid, NULL, callsite_id FROM cpu_profile_stack_sample", out) &&
           load_samples(s, "stack_sample",
                        "SELECT s.ts, c.utid, c.upid, s.callsite_id FROM stack_sample s"
                        " LEFT JOIN stack_sample_task_context c ON c.id = s.task_context_id"
                        " WHERE s.id NOT IN (SELECT id FROM perf_sample)"
                        " AND s.id NOT IN (SELECT id FROM cpu_profile_stack_sample)",
                        out);
}

static void sql_release(sql_side *s) {
    for (size_t i = 0; i < s->n_frames; i++) free(s->frame_key[i].data);
    for (size_t i = 0; i < s->n_cs; i++) free(s->cs_key[i].data);
    free(s->frame_key);
    free(s->cs_parent);
    free(s->cs_frame);
    free(s->cs_key);
    free(s->cs_done);
    free(s->tid_of_utid);
    free(s->pid_of_upid);
    free(s->err);
}

/* ---- the comparison ---- */

static size_t group_end(const drecs *r, size_t i, const drec *k) {
    while (i < r->n && rec_cmp(&r->v[i], k) == 0) i++;
    return i;
}

/* The first record of r at ts, to show beside a difference. */
static const drec *at_ts(const drecs *r, int64_t ts) {
    for (size_t i = 0; i < r->n; i++)
        if (r->v[i].ts == ts) return &r->v[i];
    return NULL;
}

static int compare(const drecs *p, const drecs *s, uint64_t tolerated_max, uint64_t profile_extra_max,
                   tm_diff_report *rep) {
    text t = {rep->message, 0, sizeof rep->message};
    size_t i = 0, j = 0;
    uint64_t tolerated = 0, profile_extra = 0;
    while (i < p->n || j < s->n) {
        drec key;
        if (i == p->n) key = s->v[j];
        else if (j == s->n || rec_cmp(&p->v[i], &s->v[j]) <= 0) key = p->v[i];
        else key = s->v[j];
        size_t pi = group_end(p, i, &key), sj = group_end(s, j, &key);
        size_t np = pi - i, ns = sj - j;
        /* SQL's extra rows must be ones the profile model counts as dropped,
         * the profile model's ones streaming samples without a time base. */
        int ok = ns >= np ? tolerated + (ns - np) <= tolerated_max : profile_extra + (np - ns) <= profile_extra_max;
        if (!ok) {
            const char *table = ns ? s->v[j].table : "sample tables";
            tx_printf(&t, "samples differ at ");
            tx_rec(&t, &key);
            tx_printf(&t, ": the profile model keeps %zu, SQL %s has %zu", np, table, ns);
            const drec *other = ns > np ? at_ts(p, key.ts) : at_ts(s, key.ts);
            if (other) {
                tx_printf(&t, "; %s has at that ts: ", ns > np ? "the profile model" : "SQL");
                tx_rec(&t, other);
            }
            return 0;
        }
        if (ns >= np) tolerated += ns - np;
        else profile_extra += np - ns;
        i = pi;
        j = sj;
    }
    rep->sql_without_callsite = (size_t)tolerated;
    return 1;
}

/* ---- entry points ---- */

static void describe_error(text *t, const char *who, const tm_error *e) {
    tx_printf(t, "%s rejects: %s at byte %llu: %s", who, tm_status_str(e->code), (unsigned long long)e->offset,
              e->message);
}

int tm_diff_compare(const tm_trace *tr, tm_db *db, tm_diff_report *rep) {
    rep->verdict = TM_DIFF_AGREE;
    rep->profile_samples = rep->sql_samples = rep->sql_without_callsite = 0;
    rep->message[0] = 0;
    text t = {rep->message, 0, sizeof rep->message};
    const tm_profile *p = tm_trace_profile(tr);
    const tm_trace_stats *st = tm_trace_get_stats(tr);
    dkey *pkeys = NULL;
    drecs pr = {NULL, 0, 0}, sr = {NULL, 0, 0};
    profile_records(p, &pkeys, &pr);
    sql_side s;
    memset(&s, 0, sizeof s);
    s.db = tm_db_sqlite(db);
    if (!sql_records(&s, &sr)) {
        rep->verdict = TM_DIFF_HARNESS;
        tx_printf(&t, "reading the SQL tables failed: %s", s.err ? s.err : "?");
    } else {
        rep->profile_samples = pr.n;
        rep->sql_samples = sr.n;
        if (pr.n) qsort(pr.v, pr.n, sizeof *pr.v, rec_qsort);
        if (sr.n) qsort(sr.v, sr.n, sizeof *sr.v, rec_qsort);
        uint64_t dropped = st->dropped_unresolved + st->perf_samples_skipped + st->perf_samples_without_callstack +
                           st->stack_samples_without_callstack + st->dropped_bad_timestamp +
                           st->dropped_missing_clock;
        if (!compare(&pr, &sr, dropped, st->streaming_without_reference_time, rep)) rep->verdict = TM_DIFF_SAMPLES;
    }
    sql_release(&s);
    for (size_t i = 0; i < p->n_stacks; i++) free(pkeys[i].data);
    free(pkeys);
    free(pr.v);
    free(sr.v);
    return rep->verdict == TM_DIFF_AGREE;
}

int tm_diff_check(const void *buf, size_t len, tm_diff_report *report) {
    return tm_diff_check_with(buf, len, NULL, report);
}

int tm_diff_check_with(const void *buf, size_t len, const tm_options *opts, tm_diff_report *rep) {
    tm_options o;
    memset(&o, 0, sizeof o);
    if (opts) o = *opts;
    o.input = TM_INPUT_PERFETTO;
    memset(rep, 0, sizeof *rep);
    text t = {rep->message, 0, sizeof rep->message};

    tm_trace *tr = NULL;
    tm_db *db = NULL;
    tm_status pst = tm_trace_parse(buf, len, &o, &tr, &rep->profile_err);
    tm_status sst = tm_db_new(buf, len, &o, &db, &rep->sql_err);
    if (pst == TM_OK) memset(&rep->profile_err, 0, sizeof rep->profile_err);
    if (sst == TM_OK) memset(&rep->sql_err, 0, sizeof rep->sql_err);
    rep->profile_err.code = pst;
    rep->sql_err.code = sst;

    if (pst != TM_OK && sst != TM_OK) {
        if (pst != sst || rep->profile_err.offset != rep->sql_err.offset) {
            rep->verdict = TM_DIFF_ERROR;
            tx_printf(&t, "both reject, differently: ");
            describe_error(&t, "the profile model", &rep->profile_err);
            tx_printf(&t, "; ");
            describe_error(&t, "SQL", &rep->sql_err);
        }
        return rep->verdict == TM_DIFF_AGREE;
    }
    if (pst != TM_OK || sst != TM_OK) {
        rep->verdict = TM_DIFF_ACCEPTANCE;
        if (pst != TM_OK) {
            describe_error(&t, "the profile model", &rep->profile_err);
            tx_printf(&t, "; SQL accepts");
        } else {
            tx_printf(&t, "the profile model accepts (%zu samples); ", tm_trace_profile(tr)->n_samples);
            describe_error(&t, "SQL", &rep->sql_err);
        }
        tm_trace_free(tr);
        tm_db_free(db);
        return 0;
    }

    tm_diff_compare(tr, db, rep);
    tm_trace_free(tr);
    tm_db_free(db);
    return rep->verdict == TM_DIFF_AGREE;
}
