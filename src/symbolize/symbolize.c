/*
 * symbolize.c — tm_symbolize: reads a trace into the Trace Processor model
 * (tp/), the one place that already knows which frames of which mappings
 * the samples use, finds each build id's ELF file once (elf_dw.c), resolves
 * every distinct rel_pc of its frames, and writes the input followed by one
 * ModuleSymbols packet per symbolized build id and one DeobfuscationMapping
 * packet per ProGuard map (proguard.c).
 *
 * The debuginfod cache searched when none is given is the one
 * debuginfod-find fills: $DEBUGINFOD_CACHE_PATH, else
 * $HOME/.cache/debuginfod_client (only read here, never fetched into).
 *
 * A ModuleSymbols packet carries the mapping's path as the trace names it
 * and its build id as raw bytes; each AddressSymbols one rel_pc and its
 * lines, innermost inlined function first, as traceconv writes them.
 * A frame its producer already named keeps that name for its outermost
 * line, the function the pc is in, and the DWARF adds the file, the line
 * and the functions inlined there. Names read from the ELF file are C++-
 * demangled unless no_demangle, by the C++ runtime's __cxa_demangle (this
 * process's, else libstdc++'s, loaded at the first mangled name and kept
 * loaded: the library itself is C), as the recorder names frames.
 */
#define _GNU_SOURCE /* RTLD_DEFAULT */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/limits.h"
#include "perfetto/fields.h"
#include "symbolize/symbolize.h"
#include "tp/tp.h"
#include "wire/input.h"
#include "wire/pb.h"

typedef struct frame_ref {
    tm_str build_id, path; /* build_id: hex as the model holds it */
    uint64_t rel_pc;
    tm_str name; /* the producer's, if any */
} frame_ref;

static int cmp_bytes(tm_bytes a, tm_bytes b) {
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.data, b.data, n) : 0;
    return c ? c : (a.len > b.len) - (a.len < b.len);
}

static int cmp_ref(const void *x, const void *y) {
    const frame_ref *a = x, *b = y;
    int c = cmp_bytes(a->build_id, b->build_id);
    if (c) return c;
    if (!a->build_id.len && (c = cmp_bytes(a->path, b->path)) != 0) return c; /* without a build id: by mapping */
    if (a->rel_pc != b->rel_pc) return a->rel_pc < b->rel_pc ? -1 : 1;
    return cmp_bytes(a->path, b->path);
}

static int hexval(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The raw build id of the model's hex; 0 when it is none (empty, a
 * breakpad module id of odd length, not hex). */
static size_t unhex(tm_str h, uint8_t out[64]) {
    if (!h.len || h.len % 2 || h.len > 128) return 0;
    for (size_t i = 0; i < h.len; i += 2) {
        int hi = hexval(h.data[i]), lo = hexval(h.data[i + 1]);
        if (hi < 0 || lo < 0) return 0;
        out[i / 2] = (uint8_t)(hi << 4 | lo);
    }
    return h.len / 2;
}

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

typedef struct sym_run {
    tm_mem *mem;
    cxa_demangle_fn demangle; /* looked up at the first mangled name */
    bool demangle_sought;
    const tm_symbolize_options *o;
    const char *debuginfod; /* the cache searched, or NULL */
    char debuginfod_buf[4096];
    tm_symbolize_stats *st;
    tm_obuf out;
    tm_error *err;
} sym_run;

static cxa_demangle_fn find_demangler(void) {
    void *fn = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (!fn) {
        void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        fn = lib ? dlsym(lib, "__cxa_demangle") : NULL;
    }
    cxa_demangle_fn f;
    memcpy(&f, &fn, sizeof f); /* object to function pointer, as POSIX allows */
    return f;
}

/* Writes a function name read from the ELF file, demangled unless told
 * not to; a PLT stub's "@plt" stays after the demangled name. */
static void put_function_name(sym_run *r, const char *name) {
    size_t len = strlen(name), base = len;
    if (r->o->no_demangle || len < 3 || name[0] != '_' || name[1] != 'Z') {
        tm_obuf_bytes(&r->out, TM_PF_LINE_FUNCTION_NAME, name, len);
        return;
    }
    if (!r->demangle_sought) r->demangle = find_demangler(), r->demangle_sought = true;
    static const char plt[] = "@plt";
    if (len > sizeof plt - 1 && strcmp(name + len - (sizeof plt - 1), plt) == 0) base = len - (sizeof plt - 1);
    char *mangled = r->demangle ? tm_mem_alloc(r->mem, base + 1) : NULL;
    char *shown = NULL;
    int status = -1;
    if (mangled) {
        memcpy(mangled, name, base);
        mangled[base] = 0;
        shown = r->demangle(mangled, NULL, NULL, &status);
        tm_mem_free(r->mem, mangled, base + 1);
    }
    if (status != 0 || !shown) {
        tm_obuf_bytes(&r->out, TM_PF_LINE_FUNCTION_NAME, name, len);
    } else { /* the demangled name, then the stub's suffix */
        size_t n = strlen(shown), at = tm_obuf_open(&r->out, TM_PF_LINE_FUNCTION_NAME);
        tm_obuf_raw(&r->out, shown, n);
        tm_obuf_raw(&r->out, name + base, len - base);
        tm_obuf_close(&r->out, at);
    }
    tm_free_foreign(shown); /* the C++ runtime allocates with malloc */
}

/* The frames refs[0..n) share one build id. */
static tm_status module(sym_run *r, const frame_ref *refs, size_t n) {
    uint8_t id[64];
    size_t id_len = unhex(refs[0].build_id, id);
    r->st->mappings++;
    if (!id_len) {
        r->st->mappings_no_build_id++;
        return TM_OK;
    }
    char path[4096];
    size_t plen = refs[0].path.len < sizeof path - 1 ? refs[0].path.len : sizeof path - 1;
    if (plen) memcpy(path, refs[0].path.data, plen);
    path[plen] = 0;
    size_t distinct = 0;
    for (size_t i = 0; i < n; i++) distinct += i == 0 || refs[i].rel_pc != refs[i - 1].rel_pc;
    r->st->frames += distinct;
    tm_elf_search s = {r->mem, r->o->symbol_dirs, r->o->n_symbol_dirs, !r->o->no_system_paths, r->debuginfod};
    tm_elf *e;
    int found;
    if (tm_elf_open(&s, path, id, id_len, &e, &found) != TM_OK)
        return tm_fail(r->err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    if (found == TM_ELF_NOT_FOUND) r->st->mappings_not_found++;
    if (found == TM_ELF_MISMATCH) r->st->mappings_build_id_mismatch++;
    if (!e) return TM_OK;
    r->st->mappings_symbolized++;
    r->st->mappings_dwarf_unreadable += tm_elf_dwarf_unreadable(e);
    size_t pkt = tm_obuf_open(&r->out, TM_PF_TRACE_PACKET);
    size_t ms = tm_obuf_open(&r->out, TM_PF_PACKET_MODULE_SYMBOLS);
    tm_obuf_bytes(&r->out, TM_PF_MODULE_SYMBOLS_PATH, path, plen);
    tm_obuf_bytes(&r->out, TM_PF_MODULE_SYMBOLS_BUILD_ID, id, id_len);
    tm_elf_line lines[TM_MAX_SYMBOL_LINES];
    for (size_t i = 0; i < n; i++) {
        if (i && refs[i].rel_pc == refs[i - 1].rel_pc) continue;
        size_t nl;
        tm_elf_resolve(e, refs[i].rel_pc, lines, TM_MAX_SYMBOL_LINES, &nl);
        if (!nl) continue;
        tm_str named = refs[i].name;
        for (size_t k = i + 1; !named.len && k < n && refs[k].rel_pc == refs[i].rel_pc; k++) named = refs[k].name;
        r->st->frames_symbolized++;
        r->st->frames_with_lines += lines[0].file && lines[0].line;
        r->st->inlined_frames += nl - 1;
        size_t as = tm_obuf_open(&r->out, TM_PF_MODULE_SYMBOLS_ADDRESS_SYMBOLS);
        tm_obuf_uint(&r->out, TM_PF_ADDRESS_SYMBOLS_ADDRESS, refs[i].rel_pc);
        for (size_t k = 0; k < nl; k++) {
            size_t l = tm_obuf_open(&r->out, TM_PF_ADDRESS_SYMBOLS_LINES);
            if (k == nl - 1 && named.len) tm_obuf_bytes(&r->out, TM_PF_LINE_FUNCTION_NAME, named.data, named.len);
            else put_function_name(r, lines[k].function);
            if (lines[k].file) tm_obuf_bytes(&r->out, TM_PF_LINE_SOURCE_FILE_NAME, lines[k].file, strlen(lines[k].file));
            if (lines[k].line) tm_obuf_uint(&r->out, TM_PF_LINE_LINE_NUMBER, lines[k].line);
            tm_obuf_close(&r->out, l);
        }
        tm_obuf_close(&r->out, as);
    }
    tm_obuf_close(&r->out, ms);
    tm_obuf_close(&r->out, pkt);
    tm_elf_close(e);
    return r->out.st == TM_OK ? TM_OK : tm_fail(r->err, TM_ERR_NOMEM, 0, NULL, "out of memory");
}

static bool is_dir(const char *p) {
    struct stat st;
    return p && *p && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The cache given, else (with system paths) the debuginfod client's own. */
static void find_debuginfod(sym_run *r) {
    if (r->o->debuginfod_cache) {
        r->debuginfod = r->o->debuginfod_cache;
        return;
    }
    if (r->o->no_system_paths) return;
    const char *env = getenv("DEBUGINFOD_CACHE_PATH"), *home = getenv("HOME");
    if (env && *env) r->debuginfod = env;
    else if (home && *home &&
             snprintf(r->debuginfod_buf, sizeof r->debuginfod_buf, "%s/.cache/debuginfod_client", home) <
                 (int)sizeof r->debuginfod_buf)
        r->debuginfod = r->debuginfod_buf;
    if (!is_dir(r->debuginfod)) r->debuginfod = NULL;
}

static tm_status native(sym_run *r, const tm_tp *tp) {
    size_t n = 0;
    frame_ref *refs = tp->n_frames ? tm_mem_alloc(r->mem, tp->n_frames * sizeof *refs) : NULL;
    if (tp->n_frames && !refs) return tm_fail(r->err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    for (size_t i = 0; i < tp->n_frames; i++) {
        const tp_frame *f = &tp->frames[i];
        if (f->mapping == TP_NULL || f->has_symbol) continue;
        const tp_mapping *m = &tp->mappings[f->mapping];
        if (!m->name.len && !m->build_id.len) continue; /* the shared mapping of inline callstacks */
        refs[n++] = (frame_ref){m->build_id, m->name, f->rel_pc, f->name};
    }
    if (n) qsort(refs, n, sizeof *refs, cmp_ref);
    tm_status st = TM_OK;
    for (size_t i = 0; i < n && st == TM_OK;) {
        size_t j = i + 1;
        while (j < n && tm_bytes_eq(refs[j].build_id, refs[i].build_id) &&
               (refs[i].build_id.len || tm_bytes_eq(refs[j].path, refs[i].path)))
            j++;
        st = module(r, refs + i, j - i);
        i = j;
    }
    tm_mem_free(r->mem, refs, tp->n_frames * sizeof *refs);
    return st;
}

static tm_status java(sym_run *r) {
    for (size_t i = 0; i < r->o->n_proguard_maps; i++) {
        const tm_proguard_map *m = &r->o->proguard_maps[i];
        if (!m->data && m->len) return tm_fail(r->err, TM_ERR_INVALID_ARG, 0, NULL, "tm_symbolize: a map without data");
        tm_proguard_counts c;
        if (tm_proguard_encode(m->data ? m->data : "", m->len, m->package, &r->out, &c) != TM_OK)
            return tm_fail(r->err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        r->st->java_classes += c.classes;
        r->st->java_methods += c.methods;
        r->st->java_map_lines_skipped += c.lines_skipped;
    }
    return TM_OK;
}

/* The length of the input's whole top-level records: a trace cut off
 * inside a packet (a recorded program killed mid-write) is read up to the
 * cut, and the packets appended must follow the last whole one, not
 * complete the cut one. */
static size_t whole_records(tm_bytes in) {
    tm_pb_reader r = tm_pb_reader_of(in);
    tm_pb_field f;
    size_t whole = 0;
    while (tm_pb_next(&r, &f) == TM_PB_OK) whole = (size_t)(r.p - in.data);
    return whole;
}

tm_status tm_symbolize(const void *buf, size_t len, const tm_options *opts, const tm_symbolize_options *sopts,
                       const tm_sink *out, tm_symbolize_stats *stats, tm_error *err) {
    if (stats) memset(stats, 0, sizeof *stats);
    if ((!buf && len) || !out || !out->write)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_symbolize: NULL argument");
    TM_TRY(tm_check_options(opts, err));
    TM_TRY(tm_check_symbolize_options(sopts, err));
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    tm_symbolize_options none;
    memset(&none, 0, sizeof none);
    tm_symbolize_stats counts;
    memset(&counts, 0, sizeof counts);
    tm_options defaults;
    memset(&defaults, 0, sizeof defaults);
    if (!opts) opts = &defaults;
    tm_limits limits;
    tm_limits_resolve(opts, &limits);
    tm_mem mem;
    tm_mem_init(&mem, opts->alloc);
    sym_run r;
    memset(&r, 0, sizeof r);
    r.mem = &mem, r.o = sopts ? sopts : &none, r.st = &counts, r.err = err;
    tm_obuf_init(&r.out, &mem);
    tm_input in;
    memset(&in, 0, sizeof in);
    tm_tp tp;
    memset(&tp, 0, sizeof tp);
    tm_status st = tm_input_open(&mem, buf, len, &limits, false, &in, err);
    if (st == TM_OK) st = tm_tp_require_perfetto(opts, in.bytes.data, in.bytes.len, "symbolize", err);
    if (st == TM_OK) st = tm_tp_build(&tp, &mem, in.bytes.data, in.bytes.len, &limits, opts->strict, err);
    if (st == TM_OK) find_debuginfod(&r);
    if (st == TM_OK) st = native(&r, &tp);
    if (st == TM_OK) st = java(&r);
    size_t whole = st == TM_OK && r.out.len ? whole_records(in.bytes) : in.bytes.len;
    if (st == TM_OK && (out->write(out->ctx, in.bytes.data, whole) != 0 ||
                        (r.out.len && out->write(out->ctx, r.out.data, r.out.len) != 0)))
        st = tm_fail(err, TM_ERR_IO, 0, NULL, "writing the symbolized trace failed");
    tm_tp_release(&tp);
    tm_input_close(&mem, &in);
    tm_obuf_free(&r.out);
    if (stats) *stats = counts;
    return st;
}
