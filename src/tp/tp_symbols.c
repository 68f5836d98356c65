/*
 * tp_symbols.c — applies ModuleSymbols and DeobfuscationMapping to the
 * Trace Processor model (tp_symbols.h), as Trace Processor does when it
 * reads them (tp_symbols.h): a ModuleSymbols packet whose build id names no
 * mapping raises stackprofile_invalid_mapping_id, an address with lines but
 * no frame raises stackprofile_invalid_frame_id; the symbol rows stay
 * either way. Mappings match by build id (the model holds it in hex),
 * frames by (mapping, rel_pc); Java frames by name, and by obfuscated line
 * for R8's line ranges. The payloads are walked by perfetto/symbols.c.
 */
#include <stdlib.h>
#include <string.h>

#include "perfetto/fields.h"
#include "perfetto/symbols.h"
#include "tp/tp_packages.h"
#include "tp/tp_symbols.h"

/* ---- indexes: mappings by build id, frames by (mapping, rel_pc) and by name ---- */

/* A sort key and the row it stands for (qsort sees only these). */
typedef struct ref {
    tm_str s;        /* build id or frame name */
    uint64_t pc;
    uint32_t mapping, row;
} ref;

typedef struct apply_ctx {
    tm_tp *tp;
    int64_t *stats;
    ref *maps, *frames, *names; /* sorted: by build id; by (mapping, rel_pc); by name */
    tm_arena *arena;
} apply_ctx;

static int cmp_str(tm_str a, tm_str b) {
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.data, b.data, n) : 0;
    return c ? c : (a.len > b.len) - (a.len < b.len);
}
static int cmp_row(const ref *a, const ref *b) { return (a->row > b->row) - (a->row < b->row); }
static int cmp_s(const void *x, const void *y) {
    int c = cmp_str(((const ref *)x)->s, ((const ref *)y)->s);
    return c ? c : cmp_row(x, y);
}
static int cmp_pc(const void *x, const void *y) {
    const ref *a = x, *b = y;
    if (a->mapping != b->mapping) return a->mapping < b->mapping ? -1 : 1;
    if (a->pc != b->pc) return a->pc < b->pc ? -1 : 1;
    return cmp_row(a, b);
}

/* The first of refs[0..n) not below key (by s, or by (mapping, pc)). */
static size_t lower(const ref *refs, size_t n, const ref *key, bool by_pc) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const ref *r = &refs[mid];
        bool below = by_pc ? r->mapping < key->mapping || (r->mapping == key->mapping && r->pc < key->pc)
                           : cmp_str(r->s, key->s) < 0;
        if (below) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static tm_status hex(apply_ctx *c, tm_bytes raw, tm_str *out) {
    char *p = tm_arena_alloc(c->arena, raw.len * 2 + 1);
    if (!p) return TM_ERR_NOMEM;
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < raw.len; i++) p[2 * i] = digits[raw.data[i] >> 4], p[2 * i + 1] = digits[raw.data[i] & 15];
    *out = (tm_str){(const uint8_t *)p, raw.len * 2};
    return TM_OK;
}

/* ---- ModuleSymbols ---- */

static tm_status on_address(void *ctx, const tm_pf_address_symbols *a) {
    apply_ctx *c = ctx;
    tm_tp *tp = c->tp;
    if (!a->n) return TM_OK;
    if (!a->build_id.len) {
        c->stats[TPS_stackprofile_invalid_mapping_id]++;
        return TM_OK;
    }
    tm_str id;
    TM_TRY(hex(c, a->build_id, &id));
    ref key = {id, 0, 0, 0};
    size_t m = lower(c->maps, tp->n_mappings, &key, false);
    if (m == tp->n_mappings || !tm_bytes_eq(c->maps[m].s, id)) {
        c->stats[TPS_stackprofile_invalid_mapping_id]++;
        return TM_OK;
    }
    uint32_t set = (uint32_t)tp->n_symbols;
    for (size_t i = 0; i < a->n; i++) {
        if (tp->n_symbols == tp->cap_symbols &&
            tm_vec_grow(tp->mem, (void **)&tp->symbols, &tp->cap_symbols, sizeof *tp->symbols, tp->n_symbols + 1) != TM_OK)
            return TM_ERR_NOMEM;
        tp_symbol *s = &tp->symbols[tp->n_symbols++];
        memset(s, 0, sizeof *s);
        s->symbol_set = set;
        s->name = a->lines[i].function;
        s->source_file = a->lines[i].file.len ? a->lines[i].file : (tm_str){NULL, 0};
        s->line = a->lines[i].line;
        s->no_line = !a->lines[i].line;
        s->inlined = i + 1 < a->n;
    }
    bool found = false;
    for (; m < tp->n_mappings && tm_bytes_eq(c->maps[m].s, id); m++) {
        ref k = {{NULL, 0}, a->address, c->maps[m].row, 0};
        for (size_t f = lower(c->frames, tp->n_frames, &k, true);
             f < tp->n_frames && c->frames[f].mapping == k.mapping && c->frames[f].pc == k.pc; f++) {
            tp->frames[c->frames[f].row].symbol_set = set;
            tp->frames[c->frames[f].row].has_symbol = true;
            found = true;
        }
    }
    if (!found) c->stats[TPS_stackprofile_invalid_frame_id]++;
    return TM_OK;
}

/* ---- DeobfuscationMapping ---- */

/* One renamed method: frames named key ("obfClass.obfMethod") become name
 * ("Class.method"), within an obfuscated line range when it has one. */
typedef struct deobf_ent {
    tm_str package, key, name;
    uint32_t obf_start, obf_end, src_start;
    uint32_t order;
} deobf_ent;

typedef struct deobf_list {
    apply_ctx *c;
    deobf_ent *v;
    size_t n, cap;
} deobf_list;

static tm_status joined(apply_ctx *c, tm_str a, tm_str b, tm_str *out) {
    char *p = tm_arena_alloc(c->arena, a.len + 1 + b.len);
    if (!p) return TM_ERR_NOMEM;
    if (a.len) memcpy(p, a.data, a.len);
    p[a.len] = '.';
    if (b.len) memcpy(p + a.len + 1, b.data, b.len);
    *out = (tm_str){(const uint8_t *)p, a.len + 1 + b.len};
    return TM_OK;
}

static tm_status on_deobf(void *ctx, const tm_pf_deobf *d) {
    deobf_list *l = ctx;
    if (!d->obf_method.data || !d->obf_method.len || !d->method.len) return TM_OK; /* class entries: frames are methods */
    TM_TRY(TM_VEC_RESERVE(l->c->tp->mem, l->v, l->cap, l->n + 1));
    deobf_ent *e = &l->v[l->n];
    memset(e, 0, sizeof *e);
    e->package = d->package;
    TM_TRY(joined(l->c, d->obf_class, d->obf_method, &e->key));
    /* a method that moved names its class already ("Cls.m") */
    if (memchr(d->method.data, '.', d->method.len)) e->name = d->method;
    else TM_TRY(joined(l->c, d->class_name, d->method, &e->name));
    e->obf_start = d->obf_line_start, e->obf_end = d->obf_line_end, e->src_start = d->line_start;
    e->order = (uint32_t)l->n++;
    return TM_OK;
}

static int cmp_deobf(const void *x, const void *y) {
    const deobf_ent *a = x, *b = y;
    int c = cmp_str(a->key, b->key);
    return c ? c : (a->order > b->order) - (a->order < b->order);
}

static int cmp_name_ptr(const void *x, const void *y) { return cmp_str(**(const tm_str *const *)x, **(const tm_str *const *)y); }

/* deobfuscated_name: every distinct name the frame's candidates give,
 * sorted, joined with " | " (an ambiguous mapping, as retrace shows it). */
static tm_status set_names(apply_ctx *c, tp_frame *f, const deobf_ent *const *cand, size_t n) {
    const tm_str *names[64];
    size_t k = 0, len = 0;
    for (size_t i = 0; i < n && k < 64; i++) names[k++] = &cand[i]->name;
    qsort(names, k, sizeof *names, cmp_name_ptr);
    size_t w = 0;
    for (size_t i = 0; i < k; i++)
        if (!w || !tm_bytes_eq(*names[w - 1], *names[i])) names[w++] = names[i], len += names[i]->len + 3;
    if (w == 1) {
        f->deobfuscated_name = *names[0];
        return TM_OK;
    }
    char *p = tm_arena_alloc(c->arena, len);
    if (!p) return TM_ERR_NOMEM;
    size_t at = 0;
    for (size_t i = 0; i < w; i++) {
        if (i) memcpy(p + at, " | ", 3), at += 3;
        memcpy(p + at, names[i]->data, names[i]->len), at += names[i]->len;
    }
    f->deobfuscated_name = (tm_str){(const uint8_t *)p, at};
    return TM_OK;
}

/* A frame with an obfuscated line (its symbol set's first row): the
 * candidates whose obfuscated range holds it, in map order, become a new
 * symbol set, innermost inlined method first, as R8's retrace expands it. */
static tm_status retrace(apply_ctx *c, tp_frame *f, const deobf_ent **cand, size_t *n) {
    tm_tp *tp = c->tp;
    if (!f->has_symbol || tp->symbols[f->symbol_set].no_line) return TM_OK;
    uint32_t line = tp->symbols[f->symbol_set].line;
    size_t k = 0;
    const deobf_ent *hit[64];
    for (size_t i = 0; i < *n && k < 64; i++)
        if (cand[i]->obf_end && cand[i]->obf_start <= line && line <= cand[i]->obf_end) hit[k++] = cand[i];
    if (!k) return TM_OK;
    uint32_t set = (uint32_t)tp->n_symbols;
    for (size_t i = 0; i < k; i++) {
        TM_TRY(TM_VEC_RESERVE(tp->mem, tp->symbols, tp->cap_symbols, tp->n_symbols + 1));
        tp_symbol *s = &tp->symbols[tp->n_symbols++];
        memset(s, 0, sizeof *s);
        s->symbol_set = set;
        s->name = hit[i]->name;
        s->source_file = tp->symbols[f->symbol_set].source_file;
        s->line = hit[i]->src_start ? hit[i]->src_start + (line - hit[i]->obf_start) : line;
        s->inlined = i + 1 < k;
    }
    f->symbol_set = set;
    memcpy(cand, hit, k * sizeof *hit);
    *n = k;
    return TM_OK;
}

/* ---- the default package: a Java frame whose path names no app is the
 * app's whose process it ran in ---- */

/* The package a frame's mapping path gives; *jit: JIT code of any app. */
static tm_str frame_package(const tm_tp *tp, const tp_frame *f, bool *jit) {
    tm_str path = f->mapping == TP_NULL ? (tm_str){NULL, 0} : tp->mappings[f->mapping].name;
    *jit = tm_pf_path_is_jit(path);
    return tm_pf_path_package(path);
}

typedef struct guesser {
    const tm_tp *tp;
    tm_str *of_process; /* by upid */
    tm_str *guess;      /* by frame; data NULL: none (yet) */
    uint8_t *needs;     /* by frame: a Java frame without a package of its own */
    uint8_t *walked;    /* by callsite: every frame above it has its guess */
} guesser;

/* Gives the frames of callsite cs and its callers that need one the
 * package of process upid; the first process to reach a frame wins. */
static void guess_chain(guesser *g, uint32_t upid, uint32_t cs) {
    if (upid == TP_NULL || upid >= g->tp->n_processes || !g->of_process[upid].data) return;
    tm_str pkg = g->of_process[upid];
    while (cs != TP_NULL && cs < g->tp->callsites.n && !g->walked[cs]) {
        g->walked[cs] = 1;
        uint32_t fr = tm_tp_cs_frame(g->tp, cs);
        if (fr < g->tp->n_frames && g->needs[fr] && !g->guess[fr].data) g->guess[fr] = pkg;
        cs = tm_tp_cs_parent(g->tp, cs);
    }
}

/* Trace Processor's order: heap allocations, then samples (their task
 * context's process). */
static tm_status guess_packages(const tm_tp *tp, tm_str *guess) {
    size_t nf = tp->n_frames + 1, nc = tp->callsites.n + 1;
    guesser g = {tp, NULL, guess, tm_mem_alloc(tp->mem, nf), tm_mem_alloc(tp->mem, nc)};
    tm_status st = g.needs && g.walked ? tm_tp_process_packages(tp, &g.of_process) : TM_ERR_NOMEM;
    if (st == TM_OK) {
        memset(g.walked, 0, nc);
        for (size_t i = 0; i < tp->n_frames; i++) {
            bool memfd;
            const tp_frame *f = &tp->frames[i];
            g.needs[i] = f->name.len && memchr(f->name.data, '.', f->name.len) && !frame_package(tp, f, &memfd).len &&
                         !memfd;
        }
        for (size_t i = 0; i < tp->n_heap_allocs; i++) guess_chain(&g, tp->heap_allocs[i].upid, tp->heap_allocs[i].callsite);
        for (size_t i = 0; i < tp->n_samples; i++) {
            uint32_t task = tp->s_task[i];
            if (task != TP_NULL && task < tp->n_tasks) guess_chain(&g, tp->tasks[task].upid, tp->s_callsite[i]);
        }
        tm_mem_free(tp->mem, g.of_process, (tp->n_processes + 1) * sizeof *g.of_process);
    }
    tm_mem_free(tp->mem, g.needs, nf);
    tm_mem_free(tp->mem, g.walked, nc);
    return st;
}

static tm_status deobfuscate(apply_ctx *c, deobf_list *l) {
    tm_tp *tp = c->tp;
    if (!l->n) return TM_OK;
    qsort(l->v, l->n, sizeof *l->v, cmp_deobf);
    tm_str *guess = NULL;
    if (tp->n_packages) {
        guess = tm_mem_alloc(tp->mem, (tp->n_frames + 1) * sizeof *guess);
        if (!guess) return TM_ERR_NOMEM;
        memset(guess, 0, (tp->n_frames + 1) * sizeof *guess);
        tm_status st = guess_packages(tp, guess);
        if (st != TM_OK) {
            tm_mem_free(tp->mem, guess, (tp->n_frames + 1) * sizeof *guess);
            return st;
        }
    }
    tm_status st = TM_OK;
    for (size_t fi = 0; fi < tp->n_frames && st == TM_OK; fi++) {
        tp_frame *f = &tp->frames[fi];
        if (!f->name.len) continue;
        size_t lo = 0, hi = l->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (cmp_str(l->v[mid].key, f->name) < 0) lo = mid + 1;
            else hi = mid;
        }
        bool memfd;
        tm_str pkg = frame_package(tp, f, &memfd);
        if (!pkg.len && guess) pkg = guess[fi];
        const deobf_ent *cand[64];
        size_t n = 0;
        for (size_t i = lo; i < l->n && tm_bytes_eq(l->v[i].key, f->name) && n < 64; i++)
            if (!pkg.len || !l->v[i].package.len || tm_bytes_eq(pkg, l->v[i].package)) cand[n++] = &l->v[i];
        if (!n) continue;
        st = retrace(c, f, cand, &n);
        if (st == TM_OK) st = set_names(c, f, cand, n);
    }
    if (guess) tm_mem_free(tp->mem, guess, (tp->n_frames + 1) * sizeof *guess);
    return st;
}

tm_status tm_tp_symbols_apply(tm_tp *tp, const tm_pf_symbols *s, int64_t *stats, tm_pf_walk_error *bad) {
    /* Android's SELinux keeps symbolizers out of /data/local/tmp: a mapping
     * there without a build id cannot be symbolized later */
    static const char tmp[] = "/data/local/tmp/";
    for (size_t i = 0; i < tp->n_mappings; i++) {
        const tp_mapping *m = &tp->mappings[i];
        if (!m->build_id.len && m->name.len >= sizeof tmp - 1 && !memcmp(m->name.data, tmp, sizeof tmp - 1))
            stats[TPS_symbolization_tmp_build_id_not_found]++;
    }
    if (!s->n) return TM_OK;
    size_t nm = tp->n_mappings ? tp->n_mappings : 1, nf = tp->n_frames ? tp->n_frames : 1;
    apply_ctx c = {tp, stats, tm_mem_alloc(tp->mem, nm * sizeof(ref)), tm_mem_alloc(tp->mem, nf * sizeof(ref)),
                   tm_mem_alloc(tp->mem, nf * sizeof(ref)), &tp->arena};
    tm_status st = c.maps && c.frames && c.names ? TM_OK : TM_ERR_NOMEM;
    if (st == TM_OK) {
        for (uint32_t i = 0; i < tp->n_mappings; i++) c.maps[i] = (ref){tp->mappings[i].build_id, 0, 0, i};
        for (uint32_t i = 0; i < tp->n_frames; i++) {
            c.frames[i] = (ref){{NULL, 0}, tp->frames[i].rel_pc, tp->frames[i].mapping, i};
            c.names[i] = (ref){tp->frames[i].name, 0, 0, i};
        }
        qsort(c.maps, tp->n_mappings, sizeof(ref), cmp_s);
        qsort(c.frames, tp->n_frames, sizeof(ref), cmp_pc);
        qsort(c.names, tp->n_frames, sizeof(ref), cmp_s);
    }
    /* symbols first: a Java frame's obfuscated line comes from them */
    for (size_t i = 0; i < s->n && st == TM_OK; i++)
        if (s->fields[i] == TM_PF_PACKET_MODULE_SYMBOLS) st = tm_pf_module_symbols(s->payloads[i], on_address, &c, bad);
    deobf_list l = {&c, NULL, 0, 0};
    for (size_t i = 0; i < s->n && st == TM_OK; i++)
        if (s->fields[i] == TM_PF_PACKET_DEOBFUSCATION_MAPPING) st = tm_pf_deobfuscation(s->payloads[i], on_deobf, &l, bad);
    if (st == TM_OK) st = deobfuscate(&c, &l);
    tm_mem_free(tp->mem, l.v, l.cap * sizeof *l.v);
    tm_mem_free(tp->mem, c.maps, nm * sizeof(ref));
    tm_mem_free(tp->mem, c.frames, nf * sizeof(ref));
    tm_mem_free(tp->mem, c.names, nf * sizeof(ref));
    return st;
}
