/*
 * elf_dw.c — finds the ELF file of a mapping and resolves addresses in it
 * with elfutils libdw/libdwfl: function names from the symbol table and
 * DWARF, source file and line from the line table, and the chain of
 * inlined functions from the DWARF scopes (DW_TAG_inlined_subroutine with
 * their DW_AT_call_file/DW_AT_call_line), innermost first, as
 * `addr2line -i -f` prints them. A pc's compilation unit is found through
 * .debug_aranges by libdw, else (clang writes none by default) through the
 * units' own address ranges; a skeleton unit (-gsplit-dwarf) is read
 * through its split unit in the .dwo file; when an inlined function's
 * origin is in another unit (gcc -flto), the unit's own tree of scopes is
 * walked. Relative file names are joined to the unit's DW_AT_comp_dir.
 *
 * Function names: the function a pc is in is named from the symbol table
 * (.symtab, or .dynsym of a stripped file) when a symbol covers the pc, as
 * the recorder named it, else from DWARF; inlined functions from DWARF.
 * In the symbol table a symbol
 * without a size names its own address only, and x86-64 PLT stubs are
 * named "function@plt" from .rela.plt.
 *
 * Candidates, in order (symbolize.h): for each symbol directory the file
 * named by build id (.build-id/ab/cdef....debug, then without .debug), by
 * the mapping's file name and by its whole path; then a debuginfod client
 * cache's abcdef.../debuginfo and .../executable; then the mapping's path on
 * this machine and /usr/lib/debug/.build-id (a path " (deleted)" names
 * without that suffix). A candidate counts only when
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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/limits.h" /* TM_MAX_SYMBOL_LINES */
#include "symbolize/symbolize.h"

/* A function symbol, [lo, hi) in the module's addresses (hi == lo: size 0). */
typedef struct sym_ent {
    GElf_Addr lo, hi;
    const char *name;
    int rank; /* among aliases at one address: global 0, weak 1, local 2 */
} sym_ent;

/* A compilation unit's address range [lo, hi), in its DWARF's addresses. */
typedef struct cu_range {
    Dwarf_Addr lo, hi;
    Dwarf_Off die; /* the unit's DIE */
} cu_range;

struct tm_elf {
    tm_mem *mem;
    Dwfl *dwfl;
    Dwfl_Module *mod;
    cu_range *cus; /* sorted by lo, made on the first pc that .debug_aranges does not place */
    size_t n_cus, cap_cus;
    bool cus_read;
    tm_u64map abs_by_file; /* a relative file name (libdw's string) -> its absolute path in abs */
    char **abs;
    size_t n_abs, cap_abs;
    sym_ent *syms; /* sorted by lo, read on first use: libdwfl's own lookup scans every symbol */
    size_t n_syms, cap_syms;
    bool syms_read;
    char *plt_names; /* "name@plt" strings of the PLT stubs the syms hold */
    size_t plt_names_len;
    char *bare_names; /* versioned symbols' names without their version ("f" of "f@@GLIBC_2.17") */
    size_t bare_names_len;
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

/* Whether the path fmt makes is absent or a regular file: what libdwfl
 * may open without blocking (a FIFO or a device among the candidates would
 * hang the open). A path too long for PATH_MAX cannot be opened either. */
static bool safe_to_open(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool safe_to_open(const char *fmt, ...) {
    char path[PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(path, sizeof path, fmt, ap);
    va_end(ap);
    struct stat st;
    return n < 0 || (size_t)n >= sizeof path || stat(path, &st) != 0 || S_ISREG(st.st_mode);
}

/* Whether every file libdwfl's standard search (elfutils' find-debuginfo.c)
 * may open for mod's separate debug information is absent or regular: by
 * build id in each absolute entry of the path; the debuglink name (or the
 * main file's name plus ".debug") in the main file's directory, in a
 * relative entry under it, and under an absolute entry with the main file's
 * directory appended, or in it directly. */
static bool search_is_safe(const tm_elf *e, Dwfl_Module *mod, const char *file_name, const char *debuglink) {
    const unsigned char *bits;
    GElf_Addr vaddr;
    int id_len = dwfl_module_build_id(mod, &bits, &vaddr);
    char hex[130] = "";
    for (int i = 0; i < id_len && i < 64; i++) snprintf(hex + 2 * i, 3, "%02x", bits[i]);
    const char *base = file_name ? strrchr(file_name, '/') : NULL;
    int dir_len = base ? (int)(base - file_name) : 1;
    const char *dir = base ? file_name : ".";
    base = base ? base + 1 : file_name;
    bool own = !debuglink && base; /* the main file's name plus ".debug" */
    const char *p = e->debuginfo_path + (e->debuginfo_path[0] == '-' || e->debuginfo_path[0] == '+');
    while (*p) {
        int len = (int)strcspn(p, ":");
        const char *entry = p;
        p += len + (p[len] == ':');
        if (entry[0] == '/' && hex[0] && !safe_to_open("%.*s/.build-id/%.2s/%s.debug", len, entry, hex, hex + 2))
            return false;
        if (!debuglink && !own) continue;
        const char *link = own ? base : debuglink, *ext = own ? ".debug" : "";
        if (entry[0] == '/' && !(safe_to_open("%.*s/%.*s/%s%s", len, entry, dir_len, dir, link, ext) &&
                                 safe_to_open("%.*s/%s%s", len, entry, link, ext)))
            return false;
        if (entry[0] != '/' && len && !safe_to_open("%.*s/%.*s/%s%s", dir_len, dir, len, entry, link, ext))
            return false;
        if (!len && !safe_to_open("%.*s/%s%s", dir_len, dir, link, ext)) return false;
    }
    return true;
}

/* libdwfl's standard search for separate debug information, unless a file
 * it may open is a FIFO or a device (then none: the symbol table names
 * the functions). */
static int find_debuginfo(Dwfl_Module *mod, void **userdata, const char *modname, Dwarf_Addr base,
                          const char *file_name, const char *debuglink, GElf_Word crc, char **debuginfo_name) {
    const tm_elf *e = *userdata;
    if (e && !search_is_safe(e, mod, file_name, debuglink)) return -1;
    return dwfl_standard_find_debuginfo(mod, userdata, modname, base, file_name, debuglink, crc, debuginfo_name);
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
    void **userdata = NULL;
    if (e->mod) dwfl_module_info(e->mod, &userdata, NULL, NULL, NULL, NULL, NULL, NULL);
    if (userdata) *userdata = e; /* find_debuginfo reads the search path there */
    const unsigned char *bits;
    GElf_Addr vaddr;
    int n = e->mod ? dwfl_module_build_id(e->mod, &bits, &vaddr) : -1;
    if (n > 0 && (size_t)n == id_len && memcmp(bits, id, id_len) == 0) return 1;
    drop(e);
    return 0;
}

/* What the module opened can name pcs by: 2 DWARF (its own or a separate
 * debug file's), 1 a symbol table only, 0 neither. */
static int usable(tm_elf *e) {
    Dwarf_Addr bias;
    if (dwfl_module_getdwarf(e->mod, &bias) != NULL) return 2;
    return dwfl_module_getsymtab(e->mod) > 0;
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
    e->cb.find_debuginfo = find_debuginfo;
    e->cb.section_address = dwfl_offline_section_address;
    if (debug_path(e, s) != TM_OK) {
        tm_elf_close(e);
        return TM_ERR_NOMEM;
    }
    e->cb.debuginfo_path = &e->debuginfo_path;
    char hex[130];
    for (size_t i = 0; i < id_len; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
    /* a file deleted or replaced while mapped is "PATH (deleted)" in
     * /proc/PID/maps and so in the trace: its copy is looked for by PATH */
    char live[PATH_MAX];
    static const char deleted[] = " (deleted)";
    size_t plen = strlen(path), dlen = sizeof deleted - 1;
    if (plen > dlen && plen - dlen < sizeof live && strcmp(path + plen - dlen, deleted) == 0) {
        memcpy(live, path, plen - dlen);
        live[plen - dlen] = 0;
        path = live;
    }
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    char cand[PATH_MAX], spare[PATH_MAX] = "";
    bool any = false;
    int spare_use = -1;
    /* each candidate: 1 matched, 0 try the next; a match without DWARF (a
     * stripped copy whose debug file is not beside it, a cut or damaged
     * debug file) only if none better comes after it: the first with a
     * symbol table, else the first */
#define TRY(...)                                                                   \
    do {                                                                           \
        if (snprintf(cand, sizeof cand, __VA_ARGS__) < (int)sizeof cand && is_file(cand)) { \
            any = true;                                                            \
            int r = try_file(e, cand, id, id_len), use = r > 0 ? usable(e) : -1;   \
            if (r < 0) goto nomem;                                                 \
            if (use == 2) goto done;                                               \
            if (use > spare_use) memcpy(spare, cand, sizeof spare), spare_use = use; \
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
    if (spare[0]) {
        int r = try_file(e, spare, id, id_len);
        if (r < 0) goto nomem;
        if (r > 0) goto done;
    }
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
    tm_mem_free(e->mem, e->cus, e->cap_cus * sizeof *e->cus);
    for (size_t i = 0; i < e->n_abs; i++) tm_mem_free(e->mem, e->abs[i], strlen(e->abs[i]) + 1);
    tm_mem_free(e->mem, e->abs, e->cap_abs * sizeof *e->abs);
    tm_u64map_free(e->mem, &e->abs_by_file);
    tm_mem_free(e->mem, e->syms, e->cap_syms * sizeof *e->syms);
    tm_mem_free(e->mem, e->plt_names, e->plt_names_len);
    tm_mem_free(e->mem, e->bare_names, e->bare_names_len);
    tm_mem_free(e->mem, e->debuginfo_path, e->debuginfo_cap);
    tm_mem_free(e->mem, e, sizeof *e);
}

bool tm_elf_dwarf_unreadable(tm_elf *e) {
    Dwarf_Addr dwbias;
    GElf_Addr bias;
    if (dwfl_module_getdwarf(e->mod, &dwbias)) return false;
    Elf *elf = dwfl_module_getelf(e->mod, &bias);
    size_t names;
    if (!elf || elf_getshdrstrndx(elf, &names) != 0) return false;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn)) != NULL;) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_COMPRESSED)) continue;
        const char *name = elf_strptr(elf, names, sh.sh_name);
        if (name && strncmp(name, ".debug_", 7) == 0) return true;
    }
    return false;
}

/* By address; among aliases at one address the best name first, as perf
 * and the recorder choose: global before weak before local, then fewer
 * leading underscores (fopen, not _IO_fopen), the shorter name, the larger
 * size. */
static int cmp_sym(const void *x, const void *y) {
    const sym_ent *a = x, *b = y;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    if (a->rank != b->rank) return a->rank - b->rank;
    size_t ua = strspn(a->name, "_"), ub = strspn(b->name, "_");
    if (ua != ub) return ua < ub ? -1 : 1;
    size_t la = strlen(a->name), lb = strlen(b->name);
    if (la != lb) return la < lb ? -1 : 1;
    if (a->hi != b->hi) return a->hi > b->hi ? -1 : 1;
    return strcmp(a->name, b->name);
}

/* The x86-64 PLT of elf: its stubs' first address (ELF address) and room,
 * and the .rela.plt entries that name them, one 16-byte stub each, in
 * .plt.sec when the file has one (IBT), else in .plt after its 16-byte
 * header. false: none (another machine, a debug file's NOBITS copies). */
typedef struct plt_info {
    GElf_Addr base, room;
    Elf_Data *rela, *dynsym;
    size_t n, dynstr; /* relocations; the dynamic string table's section index */
} plt_info;

static bool find_plt(Elf *elf, plt_info *p) {
    GElf_Ehdr eh;
    size_t shstrndx;
    if (!gelf_getehdr(elf, &eh) || eh.e_machine != EM_X86_64 || elf_getshdrstrndx(elf, &shstrndx) != 0) return false;
    GElf_Shdr plt = {0}, plt_sec = {0}, rela = {0};
    Elf_Scn *rela_scn = NULL, *scn = NULL;
    while ((scn = elf_nextscn(elf, scn)) != NULL) {
        GElf_Shdr sh;
        const char *name = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstrndx, sh.sh_name) : NULL;
        if (!name || sh.sh_type == SHT_NOBITS) continue;
        if (strcmp(name, ".plt") == 0) plt = sh;
        else if (strcmp(name, ".plt.sec") == 0) plt_sec = sh;
        else if (strcmp(name, ".rela.plt") == 0 && sh.sh_type == SHT_RELA) rela = sh, rela_scn = scn;
    }
    if (!rela_scn || (!plt.sh_size && !plt_sec.sh_size)) return false;
    Elf_Scn *dyn_scn = elf_getscn(elf, rela.sh_link);
    GElf_Shdr dyn;
    if (!dyn_scn || !gelf_getshdr(dyn_scn, &dyn) || dyn.sh_type != SHT_DYNSYM) return false;
    p->rela = elf_getdata(rela_scn, NULL);
    p->dynsym = elf_getdata(dyn_scn, NULL);
    p->dynstr = dyn.sh_link;
    if (!p->rela || !p->dynsym || !p->rela->d_buf || !p->dynsym->d_buf || !rela.sh_entsize) return false;
    p->n = rela.sh_size / rela.sh_entsize;
    p->base = plt_sec.sh_size ? plt_sec.sh_addr : plt.sh_addr + 16;
    p->room = plt_sec.sh_size ? plt_sec.sh_size : plt.sh_size > 16 ? plt.sh_size - 16 : 0;
    if (p->n > p->room / 16) p->n = (size_t)(p->room / 16);
    return p->n > 0;
}

/* The name of PLT stub i (NULL: none). */
static const char *plt_target(Elf *elf, const plt_info *p, size_t i) {
    GElf_Rela r;
    GElf_Sym sym;
    if (!gelf_getrela(p->rela, (int)i, &r) || !GELF_R_SYM(r.r_info) ||
        !gelf_getsym(p->dynsym, (int)GELF_R_SYM(r.r_info), &sym))
        return NULL;
    const char *name = elf_strptr(elf, p->dynstr, sym.st_name);
    return name && *name ? name : NULL;
}

/* Adds "name@plt" for each PLT stub, as perf and gdb name them: without
 * them a pc in a stub would take the name of whatever precedes the PLT.
 * syms has room for n_plt more. */
static void read_plt(tm_elf *e, Elf *elf, GElf_Addr bias, const plt_info *p) {
    size_t need = 0;
    for (size_t i = 0; i < p->n; i++) {
        const char *name = plt_target(elf, p, i);
        if (name) need += strlen(name) + sizeof "@plt";
    }
    if (!need || !(e->plt_names = tm_mem_alloc(e->mem, need))) return;
    e->plt_names_len = need;
    char *at = e->plt_names;
    for (size_t i = 0; i < p->n; i++) {
        const char *name = plt_target(elf, p, i);
        if (!name) continue;
        int len = snprintf(at, need - (size_t)(at - e->plt_names), "%s@plt", name);
        GElf_Addr lo = bias + p->base + 16 * (GElf_Addr)i;
        e->syms[e->n_syms++] = (sym_ent){lo, lo + 16, at, 0};
        at += len + 1;
    }
}

/* A .symtab names a versioned definition "f@@GLIBC_2.17" (binutils >= 2.35;
 * .dynsym keeps versions apart): the function is "f", as the recorder and
 * perf name it from .dynsym. Out of memory: names keep their version. */
static void drop_versions(tm_elf *e) {
    size_t need = 0;
    for (size_t i = 0; i < e->n_syms; i++) {
        const char *at = strchr(e->syms[i].name, '@');
        if (at && at != e->syms[i].name) need += (size_t)(at - e->syms[i].name) + 1;
    }
    if (!need || !(e->bare_names = tm_mem_alloc(e->mem, need))) return;
    e->bare_names_len = need;
    char *to = e->bare_names;
    for (size_t i = 0; i < e->n_syms; i++) {
        const char *name = e->syms[i].name, *at = strchr(name, '@');
        if (!at || at == name) continue;
        memcpy(to, name, (size_t)(at - name));
        to[at - name] = 0;
        e->syms[i].name = to;
        to += at - name + 1;
    }
}

/* Reads the function symbols (.symtab, else .dynsym) and names the PLT
 * stubs, once (out of memory: none, names from DWARF only). */
static void read_syms(tm_elf *e) {
    e->syms_read = true;
    int n = dwfl_module_getsymtab(e->mod);
    GElf_Addr bias = 0;
    Elf *elf = dwfl_module_getelf(e->mod, &bias);
    plt_info plt = {0};
    bool has_plt = elf && find_plt(elf, &plt);
    size_t cap = (n > 1 ? (size_t)n : 0) + (has_plt ? plt.n : 0);
    if (!cap) return;
    e->syms = tm_mem_alloc(e->mem, cap * sizeof *e->syms);
    if (!e->syms) return;
    e->cap_syms = cap;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(e->mod, i, &sym, &addr, NULL, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info);
        if (!name || !*name || sym.st_shndx == SHN_UNDEF || (type != STT_FUNC && type != STT_GNU_IFUNC)) continue;
        int bind = GELF_ST_BIND(sym.st_info);
        e->syms[e->n_syms++] = (sym_ent){addr, addr + sym.st_size, name, bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2};
    }
    drop_versions(e);
    if (has_plt) read_plt(e, elf, bias, &plt);
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
     * must cover addr, one without a size names its own address only
     * (stretched to the next symbol it would name whatever follows it: the
     * PLT after _init); of several at one start, the first in sort order
     * wins. */
    const sym_ent *best = NULL;
    for (size_t i = lo; i-- > 0 && lo - i <= 16;) {
        const sym_ent *s = &e->syms[i];
        if (best && s->lo != best->lo) break;
        if (s->hi > s->lo ? addr < s->hi : s->lo == addr) best = s;
    }
    return best ? best->name : NULL;
}

/* The name a scope is called by. The function the pc is in (not an
 * inlined instance) takes the name of the symbol covering the pc when there
 * is one, as perf and the recorder name it (the symbol's preferred alias,
 * the mangled C++ name that DW_AT_name alone lacks the namespace and
 * parameters of, "foo.cold" for a split-off part); otherwise, and for an
 * inlined function, its DWARF linkage name, else its name, following
 * abstract origins. */
static const char *scope_name(tm_elf *e, Dwarf_Die *die, GElf_Addr addr) {
    if (dwarf_tag(die) == DW_TAG_subprogram) {
        const char *sym = sym_name(e, addr);
        if (sym) return sym;
    }
    Dwarf_Attribute a;
    const char *n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_linkage_name, &a));
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &a));
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &a));
    return n;
}

/* Whether a (in the CU's addresses) is in one of the CU's ranges. libdw
 * finds a CU, and a line-table row, for an address past the end of every
 * sequence too (the last row at or below it, a zero-length one at a
 * sequence's end included), as for a crt1.o function without DWARF that
 * follows the CU's last function. */
static bool cu_covers(Dwarf_Die *cu, Dwarf_Addr a) {
    Dwarf_Addr base, start, end;
    ptrdiff_t at = 0;
    while ((at = dwarf_ranges(cu, at, &base, &start, &end)) > 0)
        if (a >= start && a < end) return true;
    return false;
}

static int cmp_cu(const void *x, const void *y) {
    const cu_range *a = x, *b = y;
    return (a->lo > b->lo) - (a->lo < b->lo);
}

/* Every compilation unit's ranges (DW_AT_low_pc/high_pc or DW_AT_ranges),
 * sorted: libdw places a pc in its unit through .debug_aranges alone, which
 * clang does not write unless asked (-gdwarf-aranges). */
static void read_cus(tm_elf *e, Dwarf *dw) {
    e->cus_read = true;
    Dwarf_CU *unit = NULL;
    Dwarf_Die cudie;
    uint8_t type;
    while (dwarf_get_units(dw, unit, &unit, NULL, &type, &cudie, NULL) == 0) {
        if (type != DW_UT_compile && type != DW_UT_skeleton) continue;
        Dwarf_Addr base, lo, hi;
        for (ptrdiff_t at = 0; (at = dwarf_ranges(&cudie, at, &base, &lo, &hi)) > 0;) {
            if (hi <= lo) continue;
            if (TM_VEC_RESERVE(e->mem, e->cus, e->cap_cus, e->n_cus + 1) != TM_OK) return; /* what fits */
            e->cus[e->n_cus++] = (cu_range){lo, hi, dwarf_dieoffset(&cudie)};
        }
    }
    if (e->n_cus) qsort(e->cus, e->n_cus, sizeof *e->cus, cmp_cu);
}

/* The unit whose ranges hold a (in the DWARF's addresses), into *out. */
static Dwarf_Die *cu_by_range(tm_elf *e, Dwarf *dw, Dwarf_Addr a, Dwarf_Die *out) {
    if (!e->cus_read) read_cus(e, dw);
    size_t lo = 0, hi = e->n_cus;
    while (lo < hi) { /* the first range starting past a */
        size_t mid = lo + (hi - lo) / 2;
        if (e->cus[mid].lo <= a) lo = mid + 1;
        else hi = mid;
    }
    for (size_t i = lo; i-- > 0;) /* ranges may nest (a unit spanning others): the innermost that holds a */
        if (a < e->cus[i].hi) return dwarf_offdie(dw, e->cus[i].die, out);
    return NULL;
}

/* The concrete scopes that hold a (in cu's addresses): the function and
 * the inlined calls in it, innermost first, into out (at most cap); how
 * many. The walk dwarf_getscopes makes finds none when an inlined
 * function's abstract origin is in another unit, as gcc -flto writes it;
 * this one keeps to the unit's own tree (namespaces and classes searched
 * through) and follows origins only for names. */
static int concrete_scopes(Dwarf_Die *cu, Dwarf_Addr a, Dwarf_Die *out, int cap) {
    enum { MAX_CONTAINERS = 64 };
    Dwarf_Die todo[MAX_CONTAINERS];
    int n_todo = 0, n = 0;
    todo[n_todo++] = *cu;
    while (n_todo > 0) {
        Dwarf_Die parent = todo[--n_todo], child;
        if (dwarf_child(&parent, &child) != 0) continue;
        do {
            int tag = dwarf_tag(&child);
            if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine || tag == DW_TAG_lexical_block) {
                if (dwarf_haspc(&child, a) != 1) continue;
                if (tag != DW_TAG_lexical_block && n < cap) out[n++] = child;
                n_todo = 0; /* a is in this one: only its children are left to search */
                todo[n_todo++] = child;
                break;
            }
            if ((tag == DW_TAG_namespace || tag == DW_TAG_module || tag == DW_TAG_class_type ||
                 tag == DW_TAG_structure_type || tag == DW_TAG_union_type) &&
                n_todo < MAX_CONTAINERS)
                todo[n_todo++] = child;
        } while (dwarf_siblingof(&child, &child) == 0);
    }
    for (int i = 0; i < n / 2; i++) {
        Dwarf_Die t = out[i];
        out[i] = out[n - 1 - i], out[n - 1 - i] = t;
    }
    return n;
}

/* file joined to its unit's compilation directory when it is relative, as
 * addr2line and llvm-symbolizer print it (gcc names a file as the compiler
 * was given it, src/prog.c); kept by e. A relative directory (Debian's
 * packages map theirs to ./csu and the like with -fdebug-prefix-map) is
 * joined too: ./csu/../sysdeps/x.h names the file under the source tree,
 * ../sysdeps/x.h nothing. */
static const char *absolute(tm_elf *e, const char *file, const char *comp_dir) {
    if (!file || file[0] == '/' || !comp_dir || !comp_dir[0]) return file;
    uint32_t i = tm_u64map_get(&e->abs_by_file, (uint64_t)(uintptr_t)file);
    if (i != TM_ABSENT) return e->abs[i];
    size_t len = strlen(comp_dir) + 1 + strlen(file);
    char *p = tm_mem_alloc(e->mem, len + 1);
    if (!p || e->n_abs >= TM_ABSENT || TM_VEC_RESERVE(e->mem, e->abs, e->cap_abs, e->n_abs + 1) != TM_OK) {
        tm_mem_free(e->mem, p, len + 1);
        return file;
    }
    snprintf(p, len + 1, "%s/%s", comp_dir, file);
    if (tm_u64map_put(e->mem, &e->abs_by_file, (uint64_t)(uintptr_t)file, (uint32_t)e->n_abs) != TM_OK) {
        tm_mem_free(e->mem, p, len + 1);
        return file;
    }
    e->abs[e->n_abs++] = p;
    return p;
}

/* The caller's location: where the inlined call sc was made (its
 * DW_AT_call_file in the unit's files, and DW_AT_call_line). */
static void call_site(tm_elf *e, Dwarf_Die *sc, Dwarf_Files *files, size_t nfiles, const char *comp_dir,
                      const char **file, int *line) {
    Dwarf_Attribute a;
    Dwarf_Word v;
    *file = NULL;
    *line = 0;
    if (files && dwarf_formudata(dwarf_attr(sc, DW_AT_call_file, &a), &v) == 0 && v < nfiles)
        *file = absolute(e, dwarf_filesrc(files, v, NULL, NULL), comp_dir);
    if (dwarf_formudata(dwarf_attr(sc, DW_AT_call_line, &a), &v) == 0 && v <= INT32_MAX) *line = (int)v;
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
    Dwarf_Die *cu = dwfl_module_addrdie(e->mod, addr, &dwbias), found;
    Dwarf *dw = cu ? NULL : dwfl_module_getdwarf(e->mod, &dwbias);
    if (dw && (cu = cu_by_range(e, dw, addr - dwbias, &found)) != NULL && !ln) {
        Dwarf_Line *dl = dwarf_getsrc_die(cu, addr - dwbias);
        file = dl ? dwarf_linesrc(dl, NULL, NULL) : NULL;
        if (!dl || dwarf_lineno(dl, &line) != 0) line = 0;
    }
    Dwarf_Attribute comp_attr;
    const char *comp_dir = cu ? dwarf_formstring(dwarf_attr(cu, DW_AT_comp_dir, &comp_attr)) : NULL;
    /* a skeleton unit (-gsplit-dwarf): its functions are in the split unit
     * of its .dwo file, which libdw opens beside it */
    uint8_t unit_type;
    Dwarf_Die split;
    if (cu && dwarf_cu_info(cu->cu, NULL, &unit_type, NULL, &split, NULL, NULL, NULL) == 0 &&
        unit_type == DW_UT_skeleton && dwarf_tag(&split) == DW_TAG_compile_unit)
        cu = &split;
    file = absolute(e, file, comp_dir);
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
        const char *name = scope_name(e, sc, addr);
        lines[*n] = (tm_elf_line){name ? name : "", file, line > 0 ? (uint32_t)line : 0};
        (*n)++;
        if (tag == DW_TAG_subprogram) break;
        call_site(e, sc, files, nfiles, comp_dir, &file, &line);
        Dwarf_Die *outer = NULL;
        int no = dwarf_getscopes_die(sc, &outer);
        tm_free_foreign(scopes);
        scopes = outer;
        ns = no;
        i = 1; /* outer[0] is the instance itself */
    }
    tm_free_foreign(scopes); /* dwarf_getscopes allocates with malloc */
    if (!*n && cu && ns <= 0) { /* an origin in another unit (gcc -flto): the unit's own tree */
        Dwarf_Die chain[TM_MAX_SYMBOL_LINES];
        int room = (int)(cap < TM_MAX_SYMBOL_LINES ? cap : TM_MAX_SYMBOL_LINES);
        int nc = concrete_scopes(cu, addr - dwbias, chain, room);
        for (int i = 0; i < nc; i++) {
            const char *name = scope_name(e, &chain[i], addr);
            lines[(*n)++] = (tm_elf_line){name ? name : "", file, line > 0 ? (uint32_t)line : 0};
            if (dwarf_tag(&chain[i]) == DW_TAG_subprogram) break;
            call_site(e, &chain[i], files, nfiles, comp_dir, &file, &line);
        }
    }
    /* No DWARF function there: the symbol's name, with the line-table row
     * only where a CU's ranges hold the pc (assembly with line info). */
    const char *sym = *n ? NULL : sym_name(e, addr);
    if (sym && !(cu && cu_covers(cu, addr - dwbias))) file = NULL, line = 0;
    if (sym) lines[(*n)++] = (tm_elf_line){sym, file, line > 0 ? (uint32_t)line : 0};
}
