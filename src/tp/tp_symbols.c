/*
 * tp_symbols.c — applies ModuleSymbols and DeobfuscationMapping to the
 * Trace Processor model (tp_symbols.h), as Trace Processor does when it
 * reads them: a ModuleSymbols packet whose build id names no mapping
 * raises stackprofile_invalid_mapping_id, an address with lines but no
 * frame raises stackprofile_invalid_frame_id; the symbol rows stay either
 * way. Mappings match by build id (the model holds it in hex), frames by
 * (mapping, rel_pc). The payloads are walked by perfetto/symbols.c.
 */
#include <stdlib.h>
#include <string.h>

#include "perfetto/fields.h"
#include "perfetto/symbols.h"
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

static tm_status on_deobf(void *ctx, const tm_pf_deobf *d) {
    apply_ctx *c = ctx;
    tm_tp *tp = c->tp;
    if (!d->obf_method.data || !d->obf_method.len || !d->method.len) return TM_OK; /* class entries: frames are methods */
    /* "obfClass.obfMethod" */
    size_t n = d->obf_class.len + 1 + d->obf_method.len;
    char *key = tm_arena_alloc(c->arena, n);
    if (!key) return TM_ERR_NOMEM;
    memcpy(key, d->obf_class.data, d->obf_class.len);
    key[d->obf_class.len] = '.';
    memcpy(key + d->obf_class.len + 1, d->obf_method.data, d->obf_method.len);
    tm_str k = {(const uint8_t *)key, n};
    ref probe = {k, 0, 0, 0};
    size_t i = lower(c->names, tp->n_frames, &probe, false);
    if (i == tp->n_frames || !tm_bytes_eq(c->names[i].s, k)) return TM_OK;
    /* the new name: the method as given when it moved ("Cls.m"), else class.method */
    tm_str name = d->method;
    if (!memchr(d->method.data, '.', d->method.len)) {
        size_t len = d->class_name.len + 1 + d->method.len;
        char *p = tm_arena_alloc(c->arena, len);
        if (!p) return TM_ERR_NOMEM;
        memcpy(p, d->class_name.data, d->class_name.len);
        p[d->class_name.len] = '.';
        memcpy(p + d->class_name.len + 1, d->method.data, d->method.len);
        name = (tm_str){(const uint8_t *)p, len};
    }
    for (; i < tp->n_frames && tm_bytes_eq(c->names[i].s, k); i++)
        if (!tp->frames[c->names[i].row].deobfuscated_name.data) tp->frames[c->names[i].row].deobfuscated_name = name;
    return TM_OK;
}

tm_status tm_tp_symbols_apply(tm_tp *tp, const tm_pf_symbols *s, int64_t *stats, tm_error *err) {
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
    for (size_t i = 0; i < s->n && st == TM_OK; i++)
        st = s->fields[i] == TM_PF_PACKET_MODULE_SYMBOLS ? tm_pf_module_symbols(s->payloads[i], on_address, &c)
                                                         : tm_pf_deobfuscation(s->payloads[i], on_deobf, &c);
    tm_mem_free(tp->mem, c.maps, nm * sizeof(ref));
    tm_mem_free(tp->mem, c.frames, nf * sizeof(ref));
    tm_mem_free(tp->mem, c.names, nf * sizeof(ref));
    return st == TM_OK ? TM_OK
           : st == TM_ERR_NOMEM ? tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory")
                                : tm_fail(err, st, 0, NULL, "malformed symbols");
}
