/*
 * elf_dw.c — finds the ELF file of a mapping and resolves addresses in it
 * with elfutils libdw/libdwfl: function names from the symbol table and
 * DWARF, source file and line from the line table, and the chain of
 * inlined functions from the DWARF scopes (DW_TAG_inlined_subroutine with
 * their DW_AT_call_file/DW_AT_call_line), innermost first, as
 * `addr2line -i -f` prints them.
 *
 * Candidates, in order (symbolize.h): for each symbol directory the file
 * named by build id (.build-id/ab/cdef....debug, then without .debug), by
 * the mapping's file name and by its whole path; then a debuginfod client
 * cache's abcdef.../debuginfo and .../executable; then the mapping's path on
 * this machine and /usr/lib/debug/.build-id. A candidate counts only when
 * its build id (GNU build-id note) equals the mapping's; a stripped file's
 * DWARF is then looked for by libdwfl in a separate debug file (by build id
 * in the same directories, or .gnu_debuglink). libdw checks what it reads
 * against the file's bounds; a hostile file yields no symbols, not a crash.
 */
#define _GNU_SOURCE /* realpath, PATH_MAX */
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "symbolize/symbolize.h"

/* A function symbol, [lo, hi) in the module's addresses (hi == lo: size 0). */
typedef struct sym_ent {
    GElf_Addr lo, hi;
    const char *name;
    int global;
} sym_ent;

struct tm_elf {
    tm_mem *mem;
    Dwfl *dwfl;
    Dwfl_Module *mod;
    sym_ent *syms; /* sorted by lo, read on first use: libdwfl's own lookup scans every symbol */
    size_t n_syms, cap_syms;
    bool syms_read;
    Dwfl_Callbacks cb;
    char *debuginfo_path; /* cb.debuginfo_path points here */
    size_t debuginfo_cap;
};

static bool is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* "-:.debug:/usr/lib/debug:DIR..." ('-': no CRC check of .gnu_debuglink
 * files); libdwfl looks each absolute entry up by build id too. */
static tm_status debug_path(tm_elf *e, const tm_elf_search *s) {
    size_t n = 32;
    for (size_t i = 0; i < s->n_dirs; i++) n += strlen(s->dirs[i]) + PATH_MAX + 2;
    e->debuginfo_path = tm_mem_alloc(e->mem, n);
    if (!e->debuginfo_path) return TM_ERR_NOMEM;
    e->debuginfo_cap = n;
    size_t at = (size_t)snprintf(e->debuginfo_path, n, "-:.debug%s", s->system ? ":/usr/lib/debug" : "");
    for (size_t i = 0; i < s->n_dirs; i++) {
        char abs[PATH_MAX];
        const char *d = realpath(s->dirs[i], abs) ? abs : s->dirs[i];
        at += (size_t)snprintf(e->debuginfo_path + at, n - at, ":%s", d);
    }
    return TM_OK;
}

static void drop(tm_elf *e) {
    if (e->dwfl) dwfl_end(e->dwfl);
    e->dwfl = NULL;
    e->mod = NULL;
}

/* Opens path as the module; 1: its build id matches, 0: it does not (or it
 * is no ELF file), -1: out of memory. */
static int try_file(tm_elf *e, const char *path, const uint8_t *id, size_t id_len) {
    drop(e);
    e->dwfl = dwfl_begin(&e->cb);
    if (!e->dwfl) return -1;
    e->mod = dwfl_report_offline(e->dwfl, path, path, -1);
    dwfl_report_end(e->dwfl, NULL, NULL);
    const unsigned char *bits;
    GElf_Addr vaddr;
    int n = e->mod ? dwfl_module_build_id(e->mod, &bits, &vaddr) : -1;
    if (n > 0 && (size_t)n == id_len && memcmp(bits, id, id_len) == 0) return 1;
    drop(e);
    return 0;
}

tm_status tm_elf_open(const tm_elf_search *s, const char *path, const uint8_t *id, size_t id_len, tm_elf **out,
                      int *found) {
    *out = NULL;
    *found = TM_ELF_NOT_FOUND;
    if (!id_len || id_len > 64) return TM_OK;
    tm_elf *e = tm_mem_alloc(s->mem, sizeof *e);
    if (!e) return TM_ERR_NOMEM;
    memset(e, 0, sizeof *e);
    e->mem = s->mem;
    e->cb.find_elf = dwfl_build_id_find_elf;
    e->cb.find_debuginfo = dwfl_standard_find_debuginfo;
    e->cb.section_address = dwfl_offline_section_address;
    if (debug_path(e, s) != TM_OK) {
        tm_elf_close(e);
        return TM_ERR_NOMEM;
    }
    e->cb.debuginfo_path = &e->debuginfo_path;
    char hex[130];
    for (size_t i = 0; i < id_len; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char cand[PATH_MAX];
    bool any = false;
    /* each candidate: 1 matched, 0 try the next */
#define TRY(...)                                                                   \
    do {                                                                           \
        if (snprintf(cand, sizeof cand, __VA_ARGS__) < (int)sizeof cand && is_file(cand)) { \
            any = true;                                                            \
            int r = try_file(e, cand, id, id_len);                                 \
            if (r < 0) goto nomem;                                                 \
            if (r > 0) goto done;                                                  \
        }                                                                          \
    } while (0)
    for (size_t i = 0; i < s->n_dirs; i++) {
        const char *d = s->dirs[i];
        TRY("%s/.build-id/%.2s/%s.debug", d, hex, hex + 2);
        TRY("%s/.build-id/%.2s/%s", d, hex, hex + 2);
        if (*base) TRY("%s/%s", d, base);
        if (path[0] == '/' && strchr(path + 1, '/')) TRY("%s%s", d, path);
    }
    if (s->debuginfod) { /* what debuginfod-find cached: DWARF first */
        TRY("%s/%s/debuginfo", s->debuginfod, hex);
        TRY("%s/%s/executable", s->debuginfod, hex);
    }
    if (s->system) {
        if (path[0] == '/') TRY("%s", path);
        TRY("/usr/lib/debug/.build-id/%.2s/%s.debug", hex, hex + 2);
    }
#undef TRY
    *found = any ? TM_ELF_MISMATCH : TM_ELF_NOT_FOUND;
    tm_elf_close(e);
    return TM_OK;
done:
    *found = TM_ELF_FOUND;
    *out = e;
    return TM_OK;
nomem:
    tm_elf_close(e);
    return TM_ERR_NOMEM;
}

void tm_elf_close(tm_elf *e) {
    if (!e) return;
    drop(e);
    tm_mem_free(e->mem, e->syms, e->cap_syms * sizeof *e->syms);
    tm_mem_free(e->mem, e->debuginfo_path, e->debuginfo_cap);
    tm_mem_free(e->mem, e, sizeof *e);
}

static int cmp_sym(const void *x, const void *y) {
    const sym_ent *a = x, *b = y;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    if (a->global != b->global) return b->global - a->global; /* global names first */
    return (a->hi < b->hi) - (a->hi > b->hi);                /* then the larger */
}

/* Reads the function symbols once (out of memory: none, names from DWARF
 * only). */
static void read_syms(tm_elf *e) {
    e->syms_read = true;
    int n = dwfl_module_getsymtab(e->mod);
    if (n <= 1) return;
    e->syms = tm_mem_alloc(e->mem, (size_t)n * sizeof *e->syms);
    if (!e->syms) return;
    e->cap_syms = (size_t)n;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(e->mod, i, &sym, &addr, NULL, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info);
        if (!name || !*name || sym.st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_GNU_IFUNC)) continue;
        e->syms[e->n_syms++] = (sym_ent){addr, addr + sym.st_size, name, GELF_ST_BIND(sym.st_info) == STB_GLOBAL};
    }
    if (e->n_syms) qsort(e->syms, e->n_syms, sizeof *e->syms, cmp_sym);
}

/* The function symbol holding addr: the last that starts at or below it
 * and, if it has a size, covers it. */
static const char *sym_name(tm_elf *e, GElf_Addr addr) {
    if (!e->syms_read) read_syms(e);
    size_t lo = 0, hi = e->n_syms;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->syms[mid].lo <= addr) lo = mid + 1;
        else hi = mid;
    }
    /* lo: the first starting above addr. Back from there: a sized symbol
     * must cover addr, one without a size only counts at the nearest start;
     * of several at one start, the first in sort order wins. */
    const sym_ent *best = NULL;
    for (size_t i = lo; i-- > 0 && lo - i <= 16;) {
        const sym_ent *s = &e->syms[i];
        if (best && s->lo != best->lo) break;
        if (s->hi > s->lo ? addr < s->hi : s->lo == e->syms[lo - 1].lo) best = s;
    }
    return best ? best->name : NULL;
}

/* The name a scope is called by: its linkage name (as the symbol table
 * spells it), else its name, following abstract origins. */
static const char *scope_name(Dwarf_Die *die) {
    Dwarf_Attribute a;
    const char *n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &a));
    return n;
}

void tm_elf_resolve(tm_elf *e, uint64_t rel_pc, tm_elf_line *lines, size_t cap, size_t *n) {
    *n = 0;
    if (!cap) return;
    GElf_Addr bias = 0;
    if (!dwfl_module_getelf(e->mod, &bias)) return;
    Dwarf_Addr addr = rel_pc + bias;
    /* the leaf's file and line from the line table */
    const char *file = NULL;
    int line = 0;
    Dwfl_Line *ln = dwfl_module_getsrc(e->mod, addr);
    if (ln) file = dwfl_lineinfo(ln, NULL, &line, NULL, NULL, NULL);
    Dwarf_Addr dwbias = 0;
    Dwarf_Die *cu = dwfl_module_addrdie(e->mod, addr, &dwbias);
    Dwarf_Die *scopes = NULL;
    int ns = cu ? dwarf_getscopes(cu, addr - dwbias, &scopes) : 0;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    if (cu && dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = NULL;
    /* dwarf_getscopes continues from an inlined instance into its
     * abstract origin's parents: the caller's concrete scopes come from
     * dwarf_getscopes_die on the instance itself. */
    for (int i = 0; i < ns && *n < cap;) {
        Dwarf_Die *sc = &scopes[i];
        int tag = dwarf_tag(sc);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) {
            i++;
            continue;
        }
        const char *name = scope_name(sc);
        if (!name && tag == DW_TAG_subprogram) name = sym_name(e, addr);
        lines[*n] = (tm_elf_line){name ? name : "", file, line > 0 ? (uint32_t)line : 0};
        (*n)++;
        if (tag == DW_TAG_subprogram) break;
        /* the caller's location: where this inlined call was made */
        Dwarf_Attribute a;
        Dwarf_Word v;
        file = NULL;
        line = 0;
        if (files && dwarf_formudata(dwarf_attr(sc, DW_AT_call_file, &a), &v) == 0 && v < nfiles)
            file = dwarf_filesrc(files, v, NULL, NULL);
        if (dwarf_formudata(dwarf_attr(sc, DW_AT_call_line, &a), &v) == 0 && v <= INT32_MAX) line = (int)v;
        Dwarf_Die *outer = NULL;
        int no = dwarf_getscopes_die(sc, &outer);
        tm_free_foreign(scopes);
        scopes = outer;
        ns = no;
        i = 1; /* outer[0] is the instance itself */
    }
    tm_free_foreign(scopes); /* dwarf_getscopes allocates with malloc */
    const char *sym = *n ? NULL : sym_name(e, addr);
    if (sym) lines[(*n)++] = (tm_elf_line){sym, file, line > 0 ? (uint32_t)line : 0};
}
