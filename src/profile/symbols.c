/*
 * symbols.c — gives the profile model's frames what a trace's ModuleSymbols
 * and DeobfuscationMapping packets say about them (symbols.h), once the
 * whole trace is read:
 *  - a native frame whose mapping's build id and rel_pc have an
 *    AddressSymbols becomes one frame per line, innermost inlined function
 *    first (leaf first, as stacks are), each with its function, source file
 *    and line; all but the last are TM_FRAME_INLINED, and all keep the
 *    frame's address, so an exporter can tell one address's inline chain
 *    (pprof: one Location, several Lines);
 *  - a Java frame (class in module, method in function; or any frame named
 *    "Class.method", as frames of .apk mappings are) whose class and method
 *    a DeobfuscationMapping renames gets the original names; with a line
 *    (from the symbols) inside entries' obfuscated line ranges it becomes
 *    those methods, the inlined ones first, each at its original line, as
 *    R8's retrace expands it; a class renamed without its method keeps the
 *    method's name. Maps of another app than the one the frame's mapping
 *    path names do not apply; a frame whose path names none (a system
 *    .apk's, say) belongs to the app of the first process that ran it, by
 *    the process's uid in PackagesList.
 * The first entry for an address or a name wins. Stacks are rewritten and
 * frames no stack uses any more are dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "perfetto/fields.h"
#include "profile/symbols.h"

typedef struct addr_ent {
    tm_bytes build_id;
    uint64_t address;
    uint32_t off, n, order; /* lines[off, off + n) */
} addr_ent;

typedef struct name_ent {
    tm_str package;               /* data NULL: every app */
    tm_str obf_class, obf_method;
    tm_str class_name, method;
    uint32_t obf_start, obf_end, src_start; /* obf_end 0: no line range */
    uint32_t order;
} name_ent;

typedef struct pkg_ent {
    tm_str name;
    uint64_t uid;
} pkg_ent;

typedef struct sym_tables {
    tm_mem *mem;
    addr_ent *addrs; size_t n_addrs, cap_addrs;
    tm_pf_line *lines; size_t n_lines, cap_lines;
    name_ent *names; size_t n_names, cap_names;
    pkg_ent *pkgs; size_t n_pkgs, cap_pkgs; tm_idxset pkg_set; /* PackagesList, a name once */
    tm_str *guess; /* by frame: the package of the first process that ran it (data NULL: none) */
} sym_tables;

static tm_status on_address(void *ctx, const tm_pf_address_symbols *a) {
    sym_tables *t = ctx;
    if (!a->n || !a->build_id.len) return TM_OK;
    TM_TRY(TM_VEC_RESERVE(t->mem, t->addrs, t->cap_addrs, t->n_addrs + 1));
    TM_TRY(TM_VEC_RESERVE(t->mem, t->lines, t->cap_lines, t->n_lines + a->n));
    t->addrs[t->n_addrs] = (addr_ent){a->build_id, a->address, (uint32_t)t->n_lines, (uint32_t)a->n, (uint32_t)t->n_addrs};
    t->n_addrs++;
    memcpy(t->lines + t->n_lines, a->lines, a->n * sizeof *a->lines);
    t->n_lines += a->n;
    return TM_OK;
}

static int pkg_eq(const void *ctx, uint32_t idx, const void *key) {
    return tm_bytes_eq(((const sym_tables *)ctx)->pkgs[idx].name, *(const tm_str *)key);
}

static tm_status on_package(void *ctx, const tm_pf_package *pkg) {
    sym_tables *t = ctx;
    uint64_t h = tm_hash_bytes(0x9a3c, pkg->name);
    uint32_t h32 = (uint32_t)(h ^ (h >> 32));
    if (tm_idxset_find(&t->pkg_set, h32, pkg_eq, t, &pkg->name) != TM_ABSENT) return TM_OK; /* the first wins */
    TM_TRY(TM_VEC_RESERVE(t->mem, t->pkgs, t->cap_pkgs, t->n_pkgs + 1));
    TM_TRY(tm_idxset_add(t->mem, &t->pkg_set, h32, (uint32_t)t->n_pkgs));
    t->pkgs[t->n_pkgs++] = (pkg_ent){pkg->name, pkg->uid};
    return TM_OK;
}

static tm_status on_deobf(void *ctx, const tm_pf_deobf *d) {
    sym_tables *t = ctx;
    if (!d->obf_method.data || !d->obf_method.len || !d->method.len) return TM_OK; /* frames are methods */
    TM_TRY(TM_VEC_RESERVE(t->mem, t->names, t->cap_names, t->n_names + 1));
    t->names[t->n_names] = (name_ent){d->package,        d->obf_class,    d->obf_method,  d->class_name, d->method,
                                      d->obf_line_start, d->obf_line_end, d->line_start, (uint32_t)t->n_names};
    t->n_names++;
    return TM_OK;
}

static int cmp_bytes(tm_bytes a, tm_bytes b) {
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.data, b.data, n) : 0;
    return c ? c : (a.len > b.len) - (a.len < b.len);
}
static int cmp_addr(const void *x, const void *y) {
    const addr_ent *a = x, *b = y;
    int c = cmp_bytes(a->build_id, b->build_id);
    if (c) return c;
    if (a->address != b->address) return a->address < b->address ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}
static int cmp_name_key(tm_str cls, tm_str method, const name_ent *b) {
    int c = cmp_bytes(cls, b->obf_class);
    return c ? c : cmp_bytes(method, b->obf_method);
}
static int cmp_name(const void *x, const void *y) {
    const name_ent *a = x, *b = y;
    int c = cmp_name_key(a->obf_class, a->obf_method, b);
    return c ? c : (a->order > b->order) - (a->order < b->order);
}

static const addr_ent *find_addr(const sym_tables *t, tm_bytes id, uint64_t address) {
    size_t lo = 0, hi = t->n_addrs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const addr_ent *e = &t->addrs[mid];
        int c = cmp_bytes(e->build_id, id);
        if (c < 0 || (c == 0 && e->address < address)) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->n_addrs && tm_bytes_eq(t->addrs[lo].build_id, id) && t->addrs[lo].address == address
               ? &t->addrs[lo]
               : NULL;
}

static const name_ent *find_name(const sym_tables *t, tm_str cls, tm_str method) {
    size_t lo = 0, hi = t->n_names;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_name_key(cls, method, &t->names[mid]) > 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->n_names && cmp_name_key(cls, method, &t->names[lo]) == 0 ? &t->names[lo] : NULL;
}

/* g renamed to cls.method: a Java frame keeps class and method apart, any
 * other frame (an .apk mapping's, say) is named "Class.method". */
static tm_status set_java_name(tm_profile *p, tm_prof_frame *g, tm_str cls, tm_str method) {
    /* a method that moved names its class: "other.Cls.m" */
    size_t dot = method.len;
    while (dot > 0 && method.data[dot - 1] != '.') dot--;
    if (dot > 1) cls = (tm_str){method.data, dot - 1}, method = (tm_str){method.data + dot, method.len - dot};
    if (g->flags & TM_FRAME_JAVA) {
        g->module = cls;
        g->function = method;
        g->flags |= TM_FRAME_HAS_MODULE | TM_FRAME_HAS_FUNCTION;
        return TM_OK;
    }
    char *n = tm_arena_alloc(p->arena, cls.len + 1 + method.len);
    if (!n) return TM_ERR_NOMEM;
    if (cls.len) memcpy(n, cls.data, cls.len); /* an empty view may be NULL */
    n[cls.len] = '.';
    if (method.len) memcpy(n + cls.len + 1, method.data, method.len);
    g->function = (tm_str){(const uint8_t *)n, cls.len + 1 + method.len};
    g->flags |= TM_FRAME_HAS_FUNCTION;
    return TM_OK;
}

/* The obfuscated class and method of a frame: a Java frame's module and
 * function, or another frame's function split at its last dot. */
static bool obf_names(const tm_prof_frame *g, tm_str *cls, tm_str *method) {
    if (!(g->flags & TM_FRAME_HAS_FUNCTION)) return false;
    if (g->flags & TM_FRAME_HAS_MODULE) {
        *cls = g->module, *method = g->function;
        return true;
    }
    size_t dot = g->function.len;
    while (dot > 0 && g->function.data[dot - 1] != '.') dot--;
    if (dot < 2 || dot == g->function.len) return false;
    *cls = (tm_str){g->function.data, dot - 1};
    *method = (tm_str){g->function.data + dot, g->function.len - dot};
    return true;
}

/* A method entry's full original name: "Class.method", or the method as
 * given when it moved ("other.Cls.m"). */
static tm_status full_name(tm_profile *p, const name_ent *e, tm_str *out) {
    if (e->method.len && memchr(e->method.data, '.', e->method.len)) {
        *out = e->method;
        return TM_OK;
    }
    char *n = tm_arena_alloc(p->arena, e->class_name.len + 1 + e->method.len);
    if (!n) return TM_ERR_NOMEM;
    if (e->class_name.len) memcpy(n, e->class_name.data, e->class_name.len); /* an empty view may be NULL */
    n[e->class_name.len] = '.';
    if (e->method.len) memcpy(n + e->class_name.len + 1, e->method.data, e->method.len);
    *out = (tm_str){(const uint8_t *)n, e->class_name.len + 1 + e->method.len};
    return TM_OK;
}

static int cmp_str_ptr(const void *x, const void *y) {
    return cmp_bytes(**(const tm_str *const *)x, **(const tm_str *const *)y);
}

/* What frame f (as the trace names it; chain[0, *n) what its symbols made
 * of it, or f itself) becomes under the deobfuscation maps, as Trace
 * Processor reads them: the method entries of f's name, from maps of any
 * app or of the one its mapping's path names. With symbols whose first line
 * falls in entries' obfuscated ranges, those methods replace the chain,
 * the inlined ones first, each at its original line (R8's retrace); without
 * symbols, f is named by its candidates: one, or all of them sorted and
 * joined with " | " when the map is ambiguous. */
static tm_status deobfuscate(tm_profile *p, const sym_tables *t, const tm_prof_frame *f, tm_str guess,
                             bool from_symbols, tm_prof_frame *chain, size_t *n, bool *changed) {
    tm_str cls, method;
    if (!t->n_names || !obf_names(f, &cls, &method)) return TM_OK;
    const name_ent *first = find_name(t, cls, method);
    if (!first) return TM_OK;
    tm_str pkg = f->mapping ? tm_pf_path_package(p->mappings[f->mapping - 1].path) : (tm_str){NULL, 0};
    if (!pkg.len) pkg = guess;
    const name_ent *cand[64];
    size_t k = 0;
    for (const name_ent *e = first; e < t->names + t->n_names && k < 64 && !cmp_name_key(cls, method, e); e++)
        if (!pkg.len || !e->package.len || tm_bytes_eq(pkg, e->package)) cand[k++] = e;
    if (!k) return TM_OK;
    if (from_symbols) {
        if (!(chain[0].flags & TM_FRAME_HAS_LINE)) return TM_OK;
        uint32_t line = chain[0].line;
        tm_prof_frame out[TM_MAX_SYMBOL_LINES];
        size_t m = 0;
        for (size_t i = 0; i < k && m < TM_MAX_SYMBOL_LINES; i++) {
            const name_ent *e = cand[i];
            if (!e->obf_end || line < e->obf_start || line > e->obf_end) continue;
            tm_prof_frame h = chain[0];
            h.flags &= ~(uint32_t)(TM_FRAME_HAS_MODULE | TM_FRAME_INLINED);
            h.module = (tm_str){NULL, 0};
            TM_TRY(set_java_name(p, &h, e->class_name, e->method));
            h.line = e->src_start ? e->src_start + (line - e->obf_start) : line;
            if (m) out[m - 1].flags |= TM_FRAME_INLINED;
            out[m++] = h;
        }
        if (!m) return TM_OK;
        memcpy(chain, out, m * sizeof *out);
        *n = m;
        *changed = true;
        return TM_OK;
    }
    tm_str names[64];
    const tm_str *sorted[64];
    size_t len = 0, w = 0;
    for (size_t i = 0; i < k; i++) {
        TM_TRY(full_name(p, cand[i], &names[i]));
        sorted[i] = &names[i];
    }
    qsort(sorted, k, sizeof *sorted, cmp_str_ptr);
    for (size_t i = 0; i < k; i++)
        if (!w || !tm_bytes_eq(*sorted[w - 1], *sorted[i])) sorted[w++] = sorted[i], len += sorted[i]->len + 3;
    tm_prof_frame g = *f;
    g.flags &= ~(uint32_t)TM_FRAME_HAS_MODULE;
    g.module = (tm_str){NULL, 0};
    if (w == 1) {
        /* one name: class and method, as the frame kept them */
        size_t dot = sorted[0]->len;
        while (dot > 0 && sorted[0]->data[dot - 1] != '.') dot--;
        tm_str none = {NULL, 0};
        TM_TRY(set_java_name(p, &g, dot ? (tm_str){sorted[0]->data, dot - 1} : none,
                             sorted[0]->len ? (tm_str){sorted[0]->data + dot, sorted[0]->len - dot} : none));
    } else {
        char *j = tm_arena_alloc(p->arena, len);
        if (!j) return TM_ERR_NOMEM;
        size_t at = 0;
        for (size_t i = 0; i < w; i++) {
            if (i) memcpy(j + at, " | ", 3), at += 3;
            memcpy(j + at, sorted[i]->data, sorted[i]->len), at += sorted[i]->len;
        }
        g.function = (tm_str){(const uint8_t *)j, at};
        g.flags |= TM_FRAME_HAS_FUNCTION;
    }
    chain[0] = g;
    *n = 1;
    *changed = true;
    return TM_OK;
}

/* ---- the default package: a Java frame whose mapping's path names no
 * app is the app's whose process first ran it (heap samples first, then
 * CPU samples), the process's uid naming it in PackagesList, as Trace
 * Processor guesses it ---- */

typedef struct guesser {
    const tm_profile *p;
    sym_tables *t;
    tm_u64map by_uid;  /* app uid -> its first package */
    uint8_t *needs;    /* by frame */
    uint8_t *walked;   /* by stack: its frames have their guess */
} guesser;

static tm_str thread_package(const guesser *g, uint32_t thread) {
    tm_str none = {NULL, 0};
    uint32_t proc = tm_u64map_get(&g->p->process_by_pid, (uint64_t)g->p->threads[thread].pid);
    if (proc == TM_ABSENT || !g->p->processes[proc].has_uid) return none;
    uint32_t k = tm_u64map_get(&g->by_uid, (uint64_t)(g->p->processes[proc].uid % 100000));
    return k == TM_ABSENT ? none : g->t->pkgs[k].name;
}

static void guess_stack(guesser *g, uint32_t stack, uint32_t thread) {
    if (stack >= g->p->n_stacks || thread >= g->p->n_threads || g->walked[stack]) return;
    tm_str pkg = thread_package(g, thread);
    if (!pkg.data) return;
    g->walked[stack] = 1;
    const tm_prof_stack *sk = &g->p->stacks[stack];
    for (uint32_t j = 0; j < sk->len; j++) {
        uint32_t fr = g->p->frame_ids[sk->off + j];
        if (g->needs[fr] && !g->t->guess[fr].data) g->t->guess[fr] = pkg;
    }
}

static tm_status guess_packages(const tm_profile *p, sym_tables *t) {
    if (!t->n_pkgs || !t->n_names) return TM_OK;
    size_t nf = p->n_frames + 1, ns = p->n_stacks + 1;
    guesser g = {p, t, {0}, tm_mem_alloc(p->mem, nf), tm_mem_alloc(p->mem, ns)};
    t->guess = tm_mem_alloc(p->mem, nf * sizeof *t->guess);
    tm_status st = g.needs && g.walked && t->guess ? TM_OK : TM_ERR_NOMEM;
    for (size_t i = 0; i < t->n_pkgs && st == TM_OK; i++)
        if (tm_u64map_get(&g.by_uid, t->pkgs[i].uid) == TM_ABSENT) st = tm_u64map_put(p->mem, &g.by_uid, t->pkgs[i].uid, (uint32_t)i);
    if (st == TM_OK) {
        memset(t->guess, 0, nf * sizeof *t->guess);
        memset(g.walked, 0, ns);
        for (size_t i = 0; i < p->n_frames; i++) {
            const tm_prof_frame *f = &p->frames[i];
            tm_str cls, method, path = f->mapping ? p->mappings[f->mapping - 1].path : (tm_str){NULL, 0};
            g.needs[i] = obf_names(f, &cls, &method) && !tm_pf_path_package(path).len && !tm_pf_path_is_jit(path);
        }
        for (size_t i = 0; i < p->n_heap_samples; i++) guess_stack(&g, p->heap_samples[i].stack, p->heap_samples[i].thread);
        for (size_t i = 0; i < p->n_samples; i++) guess_stack(&g, p->samples[i].stack, p->samples[i].thread);
    }
    tm_u64map_free(p->mem, &g.by_uid);
    tm_mem_free(p->mem, g.needs, nf);
    tm_mem_free(p->mem, g.walked, ns);
    return st;
}

/* Expands every frame it can into exp[off[i], off[i] + len[i]). */
static tm_status expand(tm_profile *p, const sym_tables *t, uint32_t *off, uint32_t *len, uint32_t **exp, size_t *n_exp,
                        size_t *cap_exp) {
    tm_prof_frame chain[TM_MAX_SYMBOL_LINES];
    size_t n0 = p->n_frames;
    for (size_t i = 0; i < n0; i++) {
        tm_prof_frame f = p->frames[i];
        size_t n = 0;
        bool changed = false;
        const addr_ent *e = f.mapping && t->n_addrs ? find_addr(t, p->mappings[f.mapping - 1].build_id, f.rel_pc) : NULL;
        if (e) {
            for (uint32_t k = 0; k < e->n && n < TM_MAX_SYMBOL_LINES; k++) {
                const tm_pf_line *l = &t->lines[e->off + k];
                tm_prof_frame g = f;
                g.function = l->function;
                g.module = (tm_str){NULL, 0};
                g.flags |= TM_FRAME_HAS_FUNCTION;
                g.flags &= ~(uint32_t)(TM_FRAME_HAS_MODULE | TM_FRAME_HAS_FILE | TM_FRAME_HAS_LINE | TM_FRAME_INLINED);
                g.file = l->file.len ? l->file : (tm_str){NULL, 0};
                g.line = l->line;
                if (l->file.len) g.flags |= TM_FRAME_HAS_FILE;
                if (l->line) g.flags |= TM_FRAME_HAS_LINE;
                if (k + 1 < e->n) g.flags |= TM_FRAME_INLINED;
                chain[n++] = g;
            }
            changed = true;
        } else {
            chain[n++] = f;
        }
        TM_TRY(deobfuscate(p, t, &f, t->guess ? t->guess[i] : (tm_str){NULL, 0}, e != NULL, chain, &n, &changed));
        if (!changed) continue;
        TM_TRY(TM_VEC_RESERVE(p->mem, *exp, *cap_exp, *n_exp + n));
        off[i] = (uint32_t)*n_exp, len[i] = (uint32_t)n;
        for (size_t k = 0; k < n; k++) {
            uint32_t id;
            TM_TRY(tm_profile_intern_frame(p, &chain[k], &id));
            (*exp)[(*n_exp)++] = id;
        }
    }
    return TM_OK;
}

/* Rewrites every stack with the expansions, then drops unused frames. */
static tm_status rewrite(tm_profile *p, size_t n0, const uint32_t *off, const uint32_t *len, const uint32_t *exp) {
    size_t total = 0;
    for (size_t i = 0; i < p->n_frame_ids; i++) {
        uint32_t f = p->frame_ids[i];
        total += f < n0 && len[f] ? len[f] : 1;
    }
    uint32_t *ids = tm_mem_alloc(p->mem, (total ? total : 1) * sizeof *ids);
    uint8_t *keep = tm_mem_alloc(p->mem, p->n_frames ? p->n_frames : 1);
    if (!ids || !keep) {
        tm_mem_free(p->mem, ids, (total ? total : 1) * sizeof *ids);
        tm_mem_free(p->mem, keep, p->n_frames ? p->n_frames : 1);
        return TM_ERR_NOMEM;
    }
    memset(keep, 0, p->n_frames ? p->n_frames : 1);
    size_t w = 0;
    for (size_t s = 0; s < p->n_stacks; s++) {
        tm_prof_stack *st = &p->stacks[s];
        uint32_t start = (uint32_t)w;
        for (uint32_t k = 0; k < st->len; k++) {
            uint32_t f = p->frame_ids[st->off + k];
            if (f < n0 && len[f]) {
                for (uint32_t j = 0; j < len[f]; j++) keep[ids[w++] = exp[off[f] + j]] = 1;
            } else {
                keep[ids[w++] = f] = 1;
            }
        }
        st->off = start;
        st->len = (uint32_t)(w - start);
    }
    tm_mem_free(p->mem, p->frame_ids, p->cap_frame_ids * sizeof *p->frame_ids);
    p->frame_ids = ids;
    p->n_frame_ids = w;
    p->cap_frame_ids = total ? total : 1;
    tm_status st = tm_profile_compact_frames(p, keep);
    tm_mem_free(p->mem, keep, p->n_frames ? p->n_frames : 1);
    return st;
}

tm_status tm_profile_apply_symbols(tm_profile *p, const tm_pf_symbols *s, tm_pf_walk_error *bad) {
    if (!s->n) return TM_OK; /* read even without frames: a malformed payload is an error either way, as in SQL */
    sym_tables t;
    memset(&t, 0, sizeof t);
    t.mem = p->mem;
    tm_status st = TM_OK;
    for (size_t i = 0; i < s->n && st == TM_OK; i++)
        if (s->fields[i] == TM_PF_PACKET_MODULE_SYMBOLS) st = tm_pf_module_symbols(s->payloads[i], on_address, &t, bad);
        else if (s->fields[i] == TM_PF_PACKET_DEOBFUSCATION_MAPPING) st = tm_pf_deobfuscation(s->payloads[i], on_deobf, &t, bad);
        else { /* PackagesList */
            bool read_error, parse_error;
            st = tm_pf_packages_list(s->payloads[i], on_package, &t, &read_error, &parse_error, bad);
        }
    if (t.n_addrs) qsort(t.addrs, t.n_addrs, sizeof *t.addrs, cmp_addr);
    if (t.n_names) qsort(t.names, t.n_names, sizeof *t.names, cmp_name);
    size_t n0 = p->n_frames;
    if (st == TM_OK) st = guess_packages(p, &t);
    uint32_t *off = tm_mem_alloc(p->mem, n0 * sizeof *off), *len = tm_mem_alloc(p->mem, n0 * sizeof *len);
    uint32_t *exp = NULL;
    size_t n_exp = 0, cap_exp = 0;
    if (st == TM_OK && (!off || !len)) st = TM_ERR_NOMEM;
    if (st == TM_OK) {
        memset(len, 0, n0 * sizeof *len);
        st = expand(p, &t, off, len, &exp, &n_exp, &cap_exp);
    }
    if (st == TM_OK && n_exp) st = rewrite(p, n0, off, len, exp);
    tm_mem_free(p->mem, off, n0 * sizeof *off);
    tm_mem_free(p->mem, len, n0 * sizeof *len);
    tm_mem_free(p->mem, exp, cap_exp * sizeof *exp);
    tm_mem_free(p->mem, t.addrs, t.cap_addrs * sizeof *t.addrs);
    tm_mem_free(p->mem, t.lines, t.cap_lines * sizeof *t.lines);
    tm_mem_free(p->mem, t.names, t.cap_names * sizeof *t.names);
    tm_mem_free(p->mem, t.pkgs, t.cap_pkgs * sizeof *t.pkgs);
    tm_idxset_free(p->mem, &t.pkg_set);
    tm_mem_free(p->mem, t.guess, (n0 + 1) * sizeof *t.guess);
    return st;
}
