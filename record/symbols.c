/*
 * symbols.c — the recorder's symbolizer: the executable mappings of a
 * process (its own /proc/self/maps, or another process's mappings as the
 * perf backend reports them), each mapped ELF file's build id and load bias, and
 * function names from the file's .symtab/.dynsym (or a separate debug file
 * found by build id), with dladdr as the fallback. Turns a pc into
 * (mapping, rel_pc, function name) and caches the answer per pc.
 *
 * By default only frames that no file can name later are named here: JIT
 * and interpreter code, kernel frames, the vDSO, deleted files, and files
 * without a build id. A frame in a file on disk with a build id is written
 * as (mapping, rel_pc) alone, and `tracemill record` (tm_symbolize) names it
 * after the run, in its own process, with files and lines too: the profiled
 * program never reads those symbol tables (TMR_SYMBOLS_NAME_ALL does).
 *
 * rel_pc is what Perfetto's unwinder (libunwindstack) puts in Frame.rel_pc:
 *     rel_pc = pc - map.start + map.offset + load_bias
 * where load_bias = p_vaddr - p_offset of the file's first executable
 * PT_LOAD. That is the pc as an ELF virtual address (the st_value space of
 * the symbol tables), for PIE executables, shared libraries and non-PIE
 * executables alike: a non-PIE x86-64 binary has load_bias 0x400000 and
 * rel_pc == pc; a PIE or a library usually has load_bias 0.
 *
 * ELF files are read from disk with pread and every offset and size is
 * checked against the file, so short, odd or hostile files give "no build
 * id" / "no symbols", never a crash. Files that cannot be opened (the vdso,
 * deleted files) take build id and load bias from the loaded object's
 * program headers (dl_iterate_phdr) and names from dladdr; for another
 * process a deleted file has neither, and its vdso is read from a copy of
 * this process's (the kernel maps one image into every process).
 *
 * Code a JIT or interpreter generates has no file: a pc in anonymous
 * memory, or in no known mapping, is named from /tmp/perf-PID.map (perf's
 * format, which the JIT appends to while it runs: read again, from where it
 * was left, when such a pc has no name, at most every 100 ms). Kernel pcs
 * are named from /proc/kallsyms when the perf backend records the kernel.
 *
 * Mappings are append-only: an index handed out stays valid (and means the
 * same mapping) until tmr_symbols_free, across refreshes. A mapping gone from
 * the maps stays live until another overlaps it: pcs sampled in code since
 * unmapped (dlclose) keep their names. Not thread-safe: the collector thread
 * owns a tmr_symbols.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* dladdr, Dl_info, dl_iterate_phdr */
#endif

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h> /* getauxval: the vdso */
#include <sys/mman.h> /* memfd_create */
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/base.h" /* tm_fail, tm_hash_u64 */
#include "record.h"

typedef ElfW(Ehdr) elf_ehdr;
typedef ElfW(Phdr) elf_phdr;
typedef ElfW(Shdr) elf_shdr;
typedef ElfW(Sym) elf_sym;
typedef ElfW(Rela) elf_rela;
typedef ElfW(Nhdr) elf_nhdr;

#define ELF_CLASS_NATIVE (__ELF_NATIVE_CLASS == 64 ? ELFCLASS64 : ELFCLASS32)
#define ELF_DATA_NATIVE (__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB)
/* st_info splits the same way in both classes (ELF32_ST_* == ELF64_ST_*). */

/* Bounds on what is read from one file, so that a huge or corrupt file
 * cannot make the collector allocate without limit. */
enum {
    MAX_PHDRS = 4096,
    MAX_NOTE_BYTES = 1 << 16,
    REFRESH_MIN_INTERVAL_MS = 100, /* a pc in no mapping re-reads the maps at most this often */
    CACHE_MAX = 1 << 20            /* pc cache entries before it is emptied */
};
static const uint64_t MAX_SYMTAB_BYTES = (uint64_t)256 << 20;

typedef struct func_sym {
    uint64_t addr, size;  /* ELF virtual address (st_value) and st_size */
    const char *name;     /* into the file's string blob */
    const char *shown;    /* demangled name, computed on first use (NULL: not yet) */
    int binding_rank;     /* among aliases at one address: GLOBAL < WEAK < LOCAL */
} func_sym;

typedef struct elf_file {
    char *path;       /* as in /proc/self/maps */
    char *open_path;  /* what was opened (map_files/... for deleted files) */
    uint64_t load_bias;
    uint8_t build_id[32];
    size_t build_id_len;
    int syms_loaded;  /* symbols are read at the first lookup that needs them */
    func_sym *syms;   /* sorted by addr */
    size_t n_syms;
    char *blobs[6];   /* string tables the names point into: .symtab and .dynsym
                         of the file and of its separate debug file */
    size_t n_blobs;
    int copy_fd;      /* +1 of the descriptor open_path names (a copy of the vdso); 0: none */
    int named_later;  /* a file on disk at its own path with a build id: tm_symbolize finds it
                         after the run, so its frames are not named here (unless NAME_ALL) */
} elf_file;

typedef struct cache_ent {
    uint64_t pc;
    uint64_t rel_pc;
    const char *name;
    int mapping;
    int used;
} cache_ent;

typedef char *(*cxa_demangle_fn)(const char *mangled, char *buf, size_t *len, int *status);

/* How many of n records of `size` bytes, sorted by a leading uint64_t
 * start, start at or below key. */
static size_t count_at_or_below(const void *records, size_t n, size_t size, uint64_t key) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint64_t start;
        memcpy(&start, (const char *)records + mid * size, sizeof start);
        if (start <= key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* A function a JIT or interpreter announced in /tmp/perf-PID.map. */
typedef struct jit_sym {
    uint64_t start, size;
    const char *name; /* owned by the tmr_symbols */
} jit_sym;

typedef struct jit_key {
    uint64_t start;
    size_t i; /* into jit: later entries win */
} jit_key;

struct tmr_symbols {
    int32_t pid;              /* 0: this process (/proc/self); else mappings come from tmr_symbols_add */
    cxa_demangle_fn demangle; /* NULL: names as in the symbol table */
    int name_all;             /* TMR_SYMBOLS_NAME_ALL: name frames of named_later files too */
    tmr_mapping *maps;        /* append-only */
    size_t *map_file;         /* per mapping: index into files, or SIZE_MAX */
    size_t n_maps, cap_maps;
    int *live;                /* mappings in the current maps, sorted by start */
    size_t n_live, cap_live;
    elf_file *files;
    size_t n_files, cap_files;
    cache_ent *cache;         /* open addressing on pc, power-of-two size */
    size_t cache_cap, cache_n;
    jit_sym *jit;             /* from /tmp/perf-PID.map, in the order read */
    size_t n_jit, cap_jit;
    jit_key *jit_sorted;      /* jit by start, then order */
    uint64_t jit_read;        /* bytes of the map file taken in */
    struct timespec jit_checked;
    const tmr_kallsyms *kernel; /* NULL: kernel pcs are in no mapping */
    int kernel_map;           /* the TMR_KERNEL_MAPPING mapping */
    char **owned;             /* names from dladdr and __cxa_demangle */
    size_t n_owned, cap_owned;
    struct timespec last_refresh;
    size_t n_gone;            /* live mappings kept though gone from the maps (keep_gone) */
};

/* ---- small helpers ---- */

static char *dup_str(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Keeps a malloc'd name alive until tmr_symbols_free; NULL if memory runs out. */
static const char *own(tmr_symbols *s, char *name) {
    if (!name) return NULL;
    if (tmr_grow((void **)&s->owned, &s->cap_owned, sizeof *s->owned, s->n_owned + 1)) {
        free(name);
        return NULL;
    }
    s->owned[s->n_owned++] = name;
    return name;
}

/* Reads exactly n bytes at off, or fails (short file, I/O error). */
static int read_at(int fd, uint64_t file_size, uint64_t off, void *out, size_t n) {
    if (off > file_size || n > file_size - off) return -1;
    uint8_t *p = out;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r, off += (uint64_t)r, n -= (size_t)r;
    }
    return 0;
}

/* Finds an NT_GNU_BUILD_ID note in notes[0..len); align is the note
 * alignment (4, or 8 for segments aligned so). */
static size_t find_build_id(const uint8_t *notes, size_t len, size_t align, uint8_t out[32]) {
    size_t at = 0;
    while (len - at >= sizeof(elf_nhdr)) {
        elf_nhdr nh;
        memcpy(&nh, notes + at, sizeof nh);
        size_t name_at = at + sizeof nh;
        size_t name_room = ((size_t)nh.n_namesz + align - 1) / align * align;
        size_t desc_room = ((size_t)nh.n_descsz + align - 1) / align * align;
        if (name_room > len - name_at || desc_room > len - name_at - name_room) return 0;
        const uint8_t *desc = notes + name_at + name_room;
        if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && memcmp(notes + name_at, "GNU", 4) == 0 &&
            nh.n_descsz > 0 && nh.n_descsz <= 32) {
            memcpy(out, desc, nh.n_descsz);
            return nh.n_descsz;
        }
        at = name_at + name_room + desc_room;
    }
    return 0;
}

static int ehdr_ok(const elf_ehdr *eh) {
    return memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_ident[EI_CLASS] == ELF_CLASS_NATIVE &&
           eh->e_ident[EI_DATA] == ELF_DATA_NATIVE;
}

/* ---- ELF files on disk ---- */

/* Build id and load bias from the program headers (and, when no PT_NOTE
 * holds the build id, from SHT_NOTE sections). Returns 0 if the file is a
 * readable ELF file of this process's class. */
static int read_elf_ids(int fd, uint64_t size, elf_file *f) {
    elf_ehdr eh;
    if (read_at(fd, size, 0, &eh, sizeof eh) || !ehdr_ok(&eh)) return -1;
    if (eh.e_phentsize == sizeof(elf_phdr) && eh.e_phnum > 0 && eh.e_phnum <= MAX_PHDRS) {
        elf_phdr *ph = malloc(eh.e_phnum * sizeof *ph);
        if (ph && read_at(fd, size, eh.e_phoff, ph, eh.e_phnum * sizeof *ph) == 0) {
            int have_bias = 0;
            for (size_t i = 0; i < eh.e_phnum; i++) {
                if (!have_bias && ph[i].p_type == PT_LOAD && (ph[i].p_flags & PF_X)) {
                    f->load_bias = ph[i].p_vaddr - ph[i].p_offset;
                    have_bias = 1;
                }
                if (!f->build_id_len && ph[i].p_type == PT_NOTE && ph[i].p_filesz <= MAX_NOTE_BYTES) {
                    uint8_t *notes = malloc(ph[i].p_filesz + 1);
                    if (notes && read_at(fd, size, ph[i].p_offset, notes, ph[i].p_filesz) == 0)
                        f->build_id_len =
                            find_build_id(notes, ph[i].p_filesz, ph[i].p_align == 8 ? 8 : 4, f->build_id);
                    free(notes);
                }
            }
        }
        free(ph);
    }
    if (!f->build_id_len && eh.e_shentsize == sizeof(elf_shdr) && eh.e_shnum > 0) {
        elf_shdr *sh = malloc(eh.e_shnum * sizeof *sh);
        if (sh && read_at(fd, size, eh.e_shoff, sh, eh.e_shnum * sizeof *sh) == 0) {
            for (size_t i = 0; i < eh.e_shnum && !f->build_id_len; i++) {
                if (sh[i].sh_type != SHT_NOTE || sh[i].sh_size > MAX_NOTE_BYTES) continue;
                uint8_t *notes = malloc(sh[i].sh_size + 1);
                if (notes && read_at(fd, size, sh[i].sh_offset, notes, sh[i].sh_size) == 0)
                    f->build_id_len =
                        find_build_id(notes, sh[i].sh_size, sh[i].sh_addralign == 8 ? 8 : 4, f->build_id);
                free(notes);
            }
        }
        free(sh);
    }
    return 0;
}

static size_t leading_underscores(const char *s) { return strspn(s, "_"); }

/* By address; among aliases at one address the best name first, as perf
 * chooses: global before weak before local, fewer leading underscores
 * (fopen, not _IO_fopen), then the shorter name. */
static int sym_cmp(const void *a, const void *b) {
    const func_sym *x = a, *y = b;
    if (x->addr != y->addr) return x->addr < y->addr ? -1 : 1;
    if (x->binding_rank != y->binding_rank) return x->binding_rank - y->binding_rank;
    size_t ux = leading_underscores(x->name), uy = leading_underscores(y->name);
    if (ux != uy) return ux < uy ? -1 : 1;
    size_t lx = strlen(x->name), ly = strlen(y->name);
    if (lx != ly) return lx < ly ? -1 : 1;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Appends the function symbols of one SHT_SYMTAB/SHT_DYNSYM section. */
static void read_symtab(int fd, uint64_t size, const elf_shdr *sh, size_t n_sh, size_t idx, elf_file *f) {
    const elf_shdr *st = &sh[idx];
    if (st->sh_entsize != sizeof(elf_sym) || st->sh_link >= n_sh || st->sh_size > MAX_SYMTAB_BYTES) return;
    const elf_shdr *strs = &sh[st->sh_link];
    if (strs->sh_type != SHT_STRTAB || strs->sh_size == 0 || strs->sh_size > MAX_SYMTAB_BYTES) return;
    size_t n = st->sh_size / sizeof(elf_sym);
    elf_sym *raw = malloc(n * sizeof *raw + 1);
    char *blob = malloc(strs->sh_size + 1);
    if (!raw || !blob || f->n_blobs == sizeof f->blobs / sizeof f->blobs[0] ||
        read_at(fd, size, st->sh_offset, raw, n * sizeof *raw) ||
        read_at(fd, size, strs->sh_offset, blob, strs->sh_size)) {
        free(raw);
        free(blob);
        return;
    }
    blob[strs->sh_size] = 0; /* a name running off the end stops here */
    size_t kept = 0;
    for (size_t i = 0; i < n; i++) {
        int type = ELF64_ST_TYPE(raw[i].st_info);
        kept += type == STT_FUNC || type == STT_GNU_IFUNC;
    }
    size_t cap = f->n_syms;
    if (tmr_grow((void **)&f->syms, &cap, sizeof *f->syms, f->n_syms + kept)) {
        free(raw);
        free(blob);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const elf_sym *y = &raw[i];
        int type = ELF64_ST_TYPE(y->st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || y->st_shndx == SHN_UNDEF || y->st_value == 0 ||
            y->st_name == 0 || y->st_name >= strs->sh_size)
            continue;
        if (f->n_syms == cap && tmr_grow((void **)&f->syms, &cap, sizeof *f->syms, f->n_syms + 1)) break;
        int bind = ELF64_ST_BIND(y->st_info);
        f->syms[f->n_syms++] = (func_sym){
            .addr = y->st_value,
            .size = y->st_size,
            .name = blob + y->st_name,
            .binding_rank = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2,
        };
    }
    f->blobs[f->n_blobs++] = blob;
    free(raw);
}

/* Reads a section's bytes into a new NUL-terminated buffer; NULL if it is
 * out of the file or too large. */
static char *read_section(int fd, uint64_t size, const elf_shdr *s) {
    if (s->sh_type == SHT_NOBITS || s->sh_size > MAX_SYMTAB_BYTES) return NULL; /* NOBITS: a debug file's copy */
    char *buf = malloc(s->sh_size + 1);
    if (buf && read_at(fd, size, s->sh_offset, buf, s->sh_size)) {
        free(buf);
        return NULL;
    }
    if (buf) buf[s->sh_size] = 0;
    return buf;
}

/* Names the x86-64 PLT stubs "name@plt", as perf and gdb do: one 16-byte
 * stub per .rela.plt entry, in .plt.sec when the file has one (IBT), else
 * in .plt after its 16-byte header. Without them a pc in a stub takes the
 * name of whatever symbol precedes the PLT. */
static void read_plt(int fd, uint64_t size, const elf_shdr *sh, size_t n_sh, size_t shstrndx, elf_file *f) {
    if (shstrndx >= n_sh || f->n_blobs == sizeof f->blobs / sizeof f->blobs[0]) return;
    char *sec_names = read_section(fd, size, &sh[shstrndx]);
    if (!sec_names) return;
    const elf_shdr *plt = NULL, *plt_sec = NULL, *rela = NULL;
    for (size_t i = 0; i < n_sh; i++) {
        if (sh[i].sh_name >= sh[shstrndx].sh_size) continue;
        const char *nm = sec_names + sh[i].sh_name;
        if (strcmp(nm, ".plt") == 0) plt = &sh[i];
        else if (strcmp(nm, ".plt.sec") == 0) plt_sec = &sh[i];
        else if (strcmp(nm, ".rela.plt") == 0 && sh[i].sh_type == SHT_RELA) rela = &sh[i];
    }
    free(sec_names);
    if (!rela || (!plt && !plt_sec) || rela->sh_entsize != sizeof(elf_rela) || rela->sh_link >= n_sh) return;
    const elf_shdr *dynsym = &sh[rela->sh_link];
    if (dynsym->sh_entsize != sizeof(elf_sym) || dynsym->sh_link >= n_sh) return;
    uint64_t base = plt_sec ? plt_sec->sh_addr : plt->sh_addr + 16;
    uint64_t room = plt_sec ? plt_sec->sh_size : plt->sh_size > 16 ? plt->sh_size - 16 : 0;
    elf_rela *relas = (elf_rela *)(void *)read_section(fd, size, rela);
    elf_sym *syms = (elf_sym *)(void *)read_section(fd, size, dynsym);
    char *strs = read_section(fd, size, &sh[dynsym->sh_link]);
    size_t n = rela->sh_size / sizeof *relas, n_dyn = dynsym->sh_size / sizeof *syms, need = 0, cap = f->n_syms;
    char *blob = NULL;
    if (relas && syms && strs) {
        for (size_t i = 0; i < n; i++) {
            size_t k = ELF64_R_SYM(relas[i].r_info);
            if (k && k < n_dyn && syms[k].st_name < sh[dynsym->sh_link].sh_size)
                need += strlen(strs + syms[k].st_name) + sizeof "@plt";
        }
        blob = need ? malloc(need) : NULL;
    }
    if (blob && tmr_grow((void **)&f->syms, &cap, sizeof *f->syms, f->n_syms + n) == 0) {
        char *at = blob;
        for (size_t i = 0; i < n && 16 * (uint64_t)(i + 1) <= room; i++) {
            size_t k = ELF64_R_SYM(relas[i].r_info);
            if (!k || k >= n_dyn || syms[k].st_name >= sh[dynsym->sh_link].sh_size) continue;
            int len = snprintf(at, need - (size_t)(at - blob), "%s@plt", strs + syms[k].st_name);
            f->syms[f->n_syms++] = (func_sym){.addr = base + 16 * (uint64_t)i, .size = 16, .name = at};
            at += len + 1;
        }
        f->blobs[f->n_blobs++] = blob;
        blob = NULL;
    }
    free(blob);
    free(relas);
    free(syms);
    free(strs);
}

/* Reads .symtab and .dynsym of the file at path. Returns 1 if it has a
 * .symtab (is not stripped), else 0. */
static int load_syms_from(const char *path, elf_file *f) {
    tmr_own_fd file_fd;
    if (tmr_own_open(&file_fd, path, O_RDONLY, 0) != 0) return 0;
    int fd = file_fd.fd;
    struct stat sb;
    elf_ehdr eh;
    int has_symtab = 0;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && read_at(fd, (uint64_t)sb.st_size, 0, &eh, sizeof eh) == 0 &&
        ehdr_ok(&eh) && eh.e_shentsize == sizeof(elf_shdr) && eh.e_shnum > 0) {
        uint64_t size = (uint64_t)sb.st_size;
        elf_shdr *sh = malloc(eh.e_shnum * sizeof *sh);
        if (sh && read_at(fd, size, eh.e_shoff, sh, eh.e_shnum * sizeof *sh) == 0) {
            for (size_t i = 0; i < eh.e_shnum; i++) {
                if (sh[i].sh_type != SHT_SYMTAB && sh[i].sh_type != SHT_DYNSYM) continue;
                has_symtab |= sh[i].sh_type == SHT_SYMTAB;
                read_symtab(fd, size, sh, eh.e_shnum, i, f);
            }
            read_plt(fd, size, sh, eh.e_shnum, eh.e_shstrndx, f);
        }
        free(sh);
    }
    tmr_own_close(&file_fd);
    return has_symtab;
}

/* The file's symbols, plus those of its separate debug file
 * (/usr/lib/debug/.build-id/xx/rest.debug) when it is stripped of .symtab. */
static void load_syms(elf_file *f) {
    f->syms_loaded = 1;
    if (!load_syms_from(f->open_path, f) && f->build_id_len > 1) {
        char dbg[128];
        int at = snprintf(dbg, sizeof dbg, "/usr/lib/debug/.build-id/%02x/", f->build_id[0]);
        for (size_t i = 1; i < f->build_id_len; i++)
            at += snprintf(dbg + at, sizeof dbg - (size_t)at, "%02x", f->build_id[i]);
        snprintf(dbg + at, sizeof dbg - (size_t)at, ".debug");
        load_syms_from(dbg, f);
    }
    if (f->n_syms) qsort(f->syms, f->n_syms, sizeof *f->syms, sym_cmp);
}

/* The function containing ELF address addr, or NULL. */
static func_sym *find_sym(elf_file *f, uint64_t addr) {
    size_t lo = 0, hi = f->n_syms; /* first symbol with addr > target */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (f->syms[mid].addr <= addr) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return NULL;
    /* The nearest start below addr, else an enclosing symbol a little
     * further back (nested or overlapping symbols). A symbol without a size
     * names its own address only: stretched to the next symbol it would
     * name whatever follows it (the PLT after _init). */
    func_sym *near = &f->syms[lo - 1];
    if (near->size == 0 ? addr == near->addr : addr - near->addr < near->size) {
        while (near > f->syms && near[-1].addr == near->addr) near--; /* best-ranked alias */
        return near;
    }
    for (size_t k = lo - 1, steps = 0; k-- > 0 && steps < 8; steps++)
        if (f->syms[k].size && addr - f->syms[k].addr < f->syms[k].size) return &f->syms[k];
    return NULL;
}

/* ---- loaded objects in memory (vdso, deleted files) ---- */

typedef struct phdr_probe {
    uint64_t addr; /* an address inside the object sought */
    elf_file *f;   /* receives its load bias and build id */
} phdr_probe;

static int probe_object(struct dl_phdr_info *info, size_t size, void *ctx) {
    (void)size;
    phdr_probe *p = ctx;
    int covers = 0;
    for (size_t i = 0; i < info->dlpi_phnum && !covers; i++) {
        const elf_phdr *ph = &info->dlpi_phdr[i];
        uint64_t lo = info->dlpi_addr + ph->p_vaddr;
        covers = ph->p_type == PT_LOAD && p->addr >= lo && p->addr - lo < ph->p_memsz;
    }
    if (!covers) return 0;
    int have_bias = 0;
    for (size_t i = 0; i < info->dlpi_phnum; i++) {
        const elf_phdr *ph = &info->dlpi_phdr[i];
        if (!have_bias && ph->p_type == PT_LOAD && (ph->p_flags & PF_X)) {
            p->f->load_bias = ph->p_vaddr - ph->p_offset;
            have_bias = 1;
        }
        /* Notes sit in a loaded read-only segment of a live object. */
        if (!p->f->build_id_len && ph->p_type == PT_NOTE && ph->p_filesz <= MAX_NOTE_BYTES)
            p->f->build_id_len = find_build_id((const uint8_t *)(uintptr_t)(info->dlpi_addr + ph->p_vaddr),
                                               ph->p_filesz, ph->p_align == 8 ? 8 : 4, p->f->build_id);
    }
    return 1; /* found: stop iterating */
}

/* A copy of this process's vdso in a memory file, as a stand-in for another
 * process's [vdso] mapping of `size` bytes: the same image when the sizes
 * agree (a process of another class has another one). -1: none. */
static int own_vdso_copy(uint64_t size) {
    const uint8_t *base = (const uint8_t *)(uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (!base || !ehdr_ok((const elf_ehdr *)base)) return -1;
    const elf_ehdr *eh = (const elf_ehdr *)base;
    uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    uint64_t image = (uint64_t)eh->e_shoff + (uint64_t)eh->e_shnum * eh->e_shentsize; /* section headers come last */
    if (image > size || (image + page - 1) / page * page != size || size > MAX_NOTE_BYTES * 16) return -1;
    int fd = memfd_create("vdso", MFD_CLOEXEC);
    if (fd < 0) return -1;
    if (write(fd, base, (size_t)image) != (ssize_t)image) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- files read inside the program ---- */

char *tmr_read_own(const char *path, size_t *len) {
    tmr_own_fd file_fd;
    if (tmr_own_open(&file_fd, path, O_RDONLY, 0) != 0) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    int ok = 1;
    for (;;) {
        if (tmr_grow((void **)&buf, &cap, 1, n + 4097)) {
            ok = 0;
            break;
        }
        ssize_t got = read(file_fd.fd, buf + n, cap - n - 1);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            ok = got == 0;
            break;
        }
        n += (size_t)got;
    }
    ok = ok && tmr_own_still(&file_fd); /* else what was read may be the program's file */
    tmr_own_close(&file_fd);
    if (!ok) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

FILE *tmr_fopen_own(const char *path, char **text) {
    size_t len;
    *text = tmr_read_own(path, &len);
    FILE *f = *text && len ? fmemopen(*text, len, "r") : NULL;
    if (!f) {
        free(*text);
        *text = NULL;
    }
    return f;
}

/* ---- /proc/self/maps ---- */

static size_t file_for(tmr_symbols *s, const char *path, uint64_t start, uint64_t end, int deleted) {
    for (size_t i = 0; i < s->n_files; i++)
        if (strcmp(s->files[i].path, path) == 0) return i;
    if (tmr_grow((void **)&s->files, &s->cap_files, sizeof *s->files, s->n_files + 1)) return SIZE_MAX;
    elf_file *f = &s->files[s->n_files];
    memset(f, 0, sizeof *f);
    f->path = dup_str(path, strlen(path));
    if (deleted) {
        /* The path may now name another file; the mapping itself is still
         * reachable through map_files (when the kernel lets us open it). */
        char mf[96];
        if (s->pid) snprintf(mf, sizeof mf, "/proc/%d/map_files/%llx-%llx", (int)s->pid, (unsigned long long)start,
                             (unsigned long long)end);
        else snprintf(mf, sizeof mf, "/proc/self/map_files/%llx-%llx", (unsigned long long)start,
                      (unsigned long long)end);
        f->open_path = dup_str(mf, strlen(mf));
    } else {
        f->open_path = dup_str(path, strlen(path));
    }
    if (!f->path || !f->open_path) {
        free(f->path);
        free(f->open_path);
        return SIZE_MAX;
    }
    if (s->pid && strcmp(path, "[vdso]") == 0) {
        int fd = own_vdso_copy(end - start);
        char fd_path[40];
        snprintf(fd_path, sizeof fd_path, "/proc/self/fd/%d", fd);
        char *copy = fd >= 0 ? dup_str(fd_path, strlen(fd_path)) : NULL;
        if (copy) free(f->open_path), f->open_path = copy, f->copy_fd = fd + 1;
        else if (fd >= 0) close(fd);
    }
    int read_ok = -1;
    if (path[0] == '/' || f->copy_fd) {
        tmr_own_fd file_fd;
        struct stat sb;
        if (tmr_own_open(&file_fd, f->open_path, O_RDONLY, 0) == 0 && fstat(file_fd.fd, &sb) == 0 && S_ISREG(sb.st_mode))
            read_ok = read_elf_ids(file_fd.fd, (uint64_t)sb.st_size, f);
        tmr_own_close(&file_fd);
    }
    f->named_later = read_ok == 0 && path[0] == '/' && !deleted && !f->copy_fd && f->build_id_len > 0;
    if (read_ok != 0) {
        if (!s->pid) {
            phdr_probe p = {start, f};
            dl_iterate_phdr(probe_object, &p);
        }
        f->syms_loaded = 1; /* no readable file: names come from dladdr (this process only) */
    }
    return s->n_files++;
}

/* The index of the mapping [start, end) at offset of path (an existing
 * identical one, or a new one), or -1 when memory runs out. */
static int mapping_index(tmr_symbols *s, uint64_t start, uint64_t end, uint64_t offset, const char *path) {
    for (size_t i = 0; i < s->n_maps; i++) {
        const tmr_mapping *m = &s->maps[i];
        if (m->start == start && m->end == end && m->offset == offset && strcmp(m->path, path) == 0) return (int)i;
    }
    if (s->n_maps >= INT32_MAX || tmr_grow((void **)&s->maps, &s->cap_maps, sizeof *s->maps, s->n_maps + 1))
        return -1;
    size_t cap = s->n_maps;
    if (tmr_grow((void **)&s->map_file, &cap, sizeof *s->map_file, s->cap_maps)) return -1;
    size_t plen = strlen(path);
    static const char deleted_sfx[] = " (deleted)";
    int deleted = plen >= sizeof deleted_sfx - 1 && strcmp(path + plen - (sizeof deleted_sfx - 1), deleted_sfx) == 0;
    size_t fi = path[0] == '/' || path[0] == '[' ? file_for(s, path, start, end, deleted) : SIZE_MAX;
    tmr_mapping *m = &s->maps[s->n_maps];
    memset(m, 0, sizeof *m);
    m->start = start, m->end = end, m->offset = offset;
    if (fi != SIZE_MAX) {
        const elf_file *f = &s->files[fi];
        m->path = f->path;
        m->open_path = f->open_path;
        m->load_bias = f->load_bias;
        memcpy(m->build_id, f->build_id, sizeof m->build_id);
        m->build_id_len = f->build_id_len;
    } else {
        m->path = own(s, dup_str(path, plen));
        if (!m->path) m->path = "";
        m->open_path = m->path;
    }
    s->map_file[s->n_maps] = fi;
    return (int)s->n_maps++;
}

/* Answers cached before may name unmapped code or miss new code. */
static void forget_cache(tmr_symbols *s) {
    if (s->cache) memset(s->cache, 0, s->cache_cap * sizeof *s->cache);
    s->cache_n = 0;
}

/* Puts back into live (sorted, from a fresh read of the maps) the mappings
 * of before that are gone and that nothing overlaps now: code unmapped
 * (dlclose) after its pcs were sampled, whose stacks are named later (the
 * heap profile's, at its dumps). Both lists are sorted by start. */
static tm_status keep_gone(tmr_symbols *s, const int *before, size_t n_before, tm_error *err) {
    size_t n_now = s->n_live, kept = 0;
    s->n_gone = 0;
    for (size_t i = 0, j = 0; i < n_before; i++) {
        const tmr_mapping *m = &s->maps[before[i]];
        while (j < n_now && s->maps[s->live[j]].end <= m->start) j++;
        if (j < n_now && s->maps[s->live[j]].start < m->end) continue; /* still there, or replaced */
        if (tmr_grow((void **)&s->live, &s->cap_live, sizeof *s->live, n_now + kept + 1))
            return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory keeping unmapped code's mappings");
        s->live[n_now + kept++] = before[i];
    }
    if (!kept) return TM_OK;
    /* merge the two sorted runs */
    int *merged = malloc((n_now + kept) * sizeof *merged);
    if (!merged) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory keeping unmapped code's mappings");
    const int *a = s->live, *b = s->live + n_now;
    size_t i = 0, j = 0, k = 0;
    while (i < n_now || j < kept)
        merged[k++] = j == kept || (i < n_now && s->maps[a[i]].start < s->maps[b[j]].start) ? a[i++] : b[j++];
    memcpy(s->live, merged, k * sizeof *merged);
    free(merged);
    s->n_live = k;
    s->n_gone = kept;
    return TM_OK;
}

tm_status tmr_symbols_refresh(tmr_symbols *s, tm_error *err) {
    char maps[48];
    if (s->pid) snprintf(maps, sizeof maps, "/proc/%d/maps", (int)s->pid);
    else snprintf(maps, sizeof maps, "/proc/self/maps");
    char *text;
    FILE *in = tmr_fopen_own(maps, &text);
    if (!in) return tm_fail(err, TM_ERR_IO, 0, NULL, "cannot read %s: %s", maps, strerror(errno));
    char *line = NULL;
    size_t line_cap = 0;
    tm_status st = TM_OK;
    /* the mappings live before, kept below where nothing took their place */
    size_t n_before = s->n_live;
    int *before = n_before ? malloc(n_before * sizeof *before) : NULL;
    if (n_before && !before) {
        fclose(in);
        free(text);
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory reading %s", maps);
    }
    if (n_before) memcpy(before, s->live, n_before * sizeof *before);
    s->n_live = 0;
    while (st == TM_OK && getline(&line, &line_cap, in) > 0) {
        unsigned long long start, end, offset, inode;
        char perms[8];
        int path_at = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*x:%*x %llu %n", &start, &end, perms, &offset, &inode, &path_at) < 5 ||
            strlen(perms) < 3 || perms[2] != 'x' || end <= start)
            continue;
        char *path = line + path_at;
        path[strcspn(path, "\n")] = 0;
        int idx = mapping_index(s, start, end, offset, path); /* same mapping as before: same index */
        if (idx < 0 || tmr_grow((void **)&s->live, &s->cap_live, sizeof *s->live, s->n_live + 1)) {
            st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory reading %s", maps);
            break;
        }
        s->live[s->n_live++] = idx; /* the kernel lists mappings by address: live stays sorted */
    }
    free(line);
    fclose(in);
    free(text);
    if (st == TM_OK) st = keep_gone(s, before, n_before, err);
    free(before);
    forget_cache(s);
    clock_gettime(CLOCK_MONOTONIC, &s->last_refresh);
    return st;
}

tm_status tmr_symbols_add(tmr_symbols *s, uint64_t start, uint64_t end, uint64_t offset, const char *path,
                          tm_error *err) {
    if (end <= start) return TM_OK;
    int idx = mapping_index(s, start, end, offset, path);
    if (idx < 0 || tmr_grow((void **)&s->live, &s->cap_live, sizeof *s->live, s->n_live + 1))
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory adding a mapping");
    /* A new mapping replaces whatever it overlaps (mmap MAP_FIXED, munmap
     * then mmap); live stays sorted by start and free of overlaps. */
    size_t kept = 0, at = SIZE_MAX;
    for (size_t i = 0; i < s->n_live; i++) {
        const tmr_mapping *m = &s->maps[s->live[i]];
        if (m->start < end && start < m->end) continue;
        if (at == SIZE_MAX && m->start >= end) at = kept;
        s->live[kept++] = s->live[i];
    }
    if (at == SIZE_MAX) at = kept;
    memmove(s->live + at + 1, s->live + at, (kept - at) * sizeof *s->live);
    s->live[at] = idx;
    s->n_live = kept + 1;
    forget_cache(s);
    return TM_OK;
}

int tmr_symbols_keeps_gone(const tmr_symbols *s) {
    return s->n_gone > 0;
}

void tmr_symbols_forget_live(tmr_symbols *s) {
    s->n_live = 0;
    s->n_gone = 0;
    forget_cache(s);
}

tm_status tmr_symbols_copy_live(tmr_symbols *dst, const tmr_symbols *src, tm_error *err) {
    for (size_t i = 0; i < src->n_live; i++) {
        const tmr_mapping *m = &src->maps[src->live[i]];
        TM_TRY(tmr_symbols_add(dst, m->start, m->end, m->offset, m->path, err));
    }
    return TM_OK;
}

size_t tmr_symbols_live(const tmr_symbols *s, int *out, size_t cap) {
    for (size_t i = 0; i < s->n_live && i < cap; i++) out[i] = s->live[i];
    return s->n_live;
}

tmr_symbols *tmr_symbols_new_for(int32_t pid, int flags, tm_error *err) {
    tmr_symbols *s = calloc(1, sizeof *s);
    if (!s) {
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        return NULL;
    }
    s->pid = pid;
    s->name_all = (flags & TMR_SYMBOLS_NAME_ALL) != 0;
    if (flags & TMR_SYMBOLS_DEMANGLE) {
        void *fn = dlsym(RTLD_DEFAULT, "__cxa_demangle");
        /* The recorder of another process may be a C program: libstdc++
         * has the demangler (loaded once, for the life of the recorder). */
        if (!fn && pid) {
            void *lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
            fn = lib ? dlsym(lib, "__cxa_demangle") : NULL;
        }
        memcpy(&s->demangle, &fn, sizeof fn); /* object to function pointer, as POSIX allows */
    }
    return s;
}

tmr_symbols *tmr_symbols_new(int flags, tm_error *err) {
    tmr_symbols *s = tmr_symbols_new_for(0, flags, err);
    if (s && tmr_symbols_refresh(s, err) != TM_OK) {
        tmr_symbols_free(s);
        return NULL;
    }
    return s;
}

void tmr_symbols_free(tmr_symbols *s) {
    if (!s) return;
    for (size_t i = 0; i < s->n_files; i++) {
        elf_file *f = &s->files[i];
        for (size_t b = 0; b < f->n_blobs; b++) free(f->blobs[b]);
        free(f->syms);
        free(f->path);
        free(f->open_path);
        if (f->copy_fd) close(f->copy_fd - 1);
    }
    for (size_t i = 0; i < s->n_owned; i++) free(s->owned[i]);
    free(s->owned);
    free(s->files);
    free(s->maps);
    free(s->map_file);
    free(s->live);
    free(s->jit);
    free(s->jit_sorted);
    free(s->cache);
    free(s);
}

const tmr_mapping *tmr_symbols_mapping(const tmr_symbols *s, int i) {
    return i >= 0 && (size_t)i < s->n_maps ? &s->maps[i] : NULL;
}

/* ---- lookup ---- */

static int find_live(const tmr_symbols *s, uint64_t pc) {
    size_t lo = 0, hi = s->n_live;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->maps[s->live[mid]].start <= pc) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    int i = s->live[lo - 1];
    return pc < s->maps[i].end ? i : -1;
}

static const char *shown_name(tmr_symbols *s, func_sym *y) {
    if (y->shown) return y->shown;
    y->shown = y->name;
    if (s->demangle && y->name[0] == '_' && y->name[1] == 'Z') {
        int status = -1;
        char *d = s->demangle(y->name, NULL, NULL, &status);
        if (status == 0 && d) y->shown = own(s, d) ? d : y->name;
        else free(d);
    }
    return y->shown;
}

static const char *dladdr_name(tmr_symbols *s, uint64_t pc) {
    Dl_info info;
    if (!dladdr((void *)(uintptr_t)pc, &info) || !info.dli_sname || !info.dli_saddr ||
        (uintptr_t)info.dli_saddr > pc)
        return NULL;
    func_sym y = {.name = info.dli_sname};
    const char *name = shown_name(s, &y);
    /* The object may be dlclose'd later: keep a copy. */
    return name == info.dli_sname ? own(s, dup_str(name, strlen(name))) : name;
}

/* ---- the kernel ---- */

typedef struct ksym {
    uint64_t addr;
    const char *name;
} ksym;

struct tmr_kallsyms {
    ksym *syms; /* sorted by addr */
    size_t n;
    char *names; /* the names, NUL-separated */
};

static int ksym_cmp(const void *a, const void *b) {
    const ksym *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

tmr_kallsyms *tmr_kallsyms_load(tm_error *err) {
    FILE *in = fopen("/proc/kallsyms", "re");
    if (!in) {
        tm_fail(err, TM_ERR_IO, 0, NULL, "cannot open /proc/kallsyms: %s", strerror(errno));
        return NULL;
    }
    tmr_kallsyms *k = calloc(1, sizeof *k);
    size_t cap = 0, at_cap = 0, names_len = 0, names_cap = 0;
    size_t *name_at = NULL; /* offsets while names may move */
    char *line = NULL;
    size_t line_cap = 0;
    int oom = !k;
    while (!oom && getline(&line, &line_cap, in) > 0) {
        /* "ADDR TYPE NAME [MODULE]": text symbols only (t, T, w, W) */
        unsigned long long addr;
        char type;
        int at = 0;
        if (sscanf(line, "%llx %c %n", &addr, &type, &at) < 2 || !at || addr == 0 ||
            !strchr("tTwW", type))
            continue;
        size_t len = strcspn(line + at, " \t\n");
        if (tmr_grow((void **)&k->syms, &cap, sizeof *k->syms, k->n + 1) ||
            tmr_grow((void **)&name_at, &at_cap, sizeof *name_at, k->n + 1) ||
            tmr_grow((void **)&k->names, &names_cap, 1, names_len + len + 1)) {
            oom = 1;
            break;
        }
        memcpy(k->names + names_len, line + at, len);
        k->names[names_len + len] = 0;
        name_at[k->n] = names_len;
        k->syms[k->n++].addr = addr;
        names_len += len + 1;
    }
    free(line);
    fclose(in);
    if (oom) {
        free(name_at);
        tmr_kallsyms_free(k);
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory reading /proc/kallsyms");
        return NULL;
    }
    for (size_t i = 0; i < k->n; i++) k->syms[i].name = k->names + name_at[i];
    free(name_at);
    if (k->n) qsort(k->syms, k->n, sizeof *k->syms, ksym_cmp);
    return k;
}

size_t tmr_kallsyms_count(const tmr_kallsyms *k) { return k ? k->n : 0; }

void tmr_kallsyms_free(tmr_kallsyms *k) {
    if (!k) return;
    free(k->syms);
    free(k->names);
    free(k);
}

/* The kernel function containing addr: kallsyms has no sizes, so the
 * nearest symbol below (as perf takes it). */
static const char *kernel_name(const tmr_kallsyms *k, uint64_t addr) {
    size_t lo = count_at_or_below(k->syms, k->n, sizeof *k->syms, addr);
    return lo ? k->syms[lo - 1].name : NULL;
}

tm_status tmr_symbols_set_kernel(tmr_symbols *s, const tmr_kallsyms *k, tm_error *err) {
    int i = mapping_index(s, TMR_KERNEL_START, UINT64_MAX, 0, TMR_KERNEL_MAPPING);
    if (i < 0) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    s->maps[i].load_bias = TMR_KERNEL_START; /* rel_pc = pc, the address kallsyms names */
    s->kernel = k;
    s->kernel_map = i;
    forget_cache(s);
    return TM_OK;
}

/* ---- JIT and interpreter frames: /tmp/perf-PID.map ---- */

static int jit_cmp(const void *a, const void *b) {
    const jit_key *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static void perf_map_path(const tmr_symbols *s, char *out, size_t cap) {
    snprintf(out, cap, "/tmp/perf-%d.map", (int)(s->pid ? s->pid : (int32_t)getpid()));
}

/* Takes in what the map file gained since the last call (perf's format:
 * "START SIZE NAME", hex, one function a line; JITs append while they
 * run), at most every REFRESH_MIN_INTERVAL_MS. 1 if entries were added. */
static int read_perf_map(tmr_symbols *s) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t ms = (int64_t)(now.tv_sec - s->jit_checked.tv_sec) * 1000 +
                 (now.tv_nsec - s->jit_checked.tv_nsec) / 1000000;
    if ((s->jit_checked.tv_sec || s->jit_checked.tv_nsec) && ms < REFRESH_MIN_INTERVAL_MS) return 0;
    s->jit_checked = now;
    char path[48];
    perf_map_path(s, path, sizeof path);
    tmr_own_fd map_fd;
    if (tmr_own_open(&map_fd, path, O_RDONLY, 0) != 0) return 0;
    struct stat sb;
    if (fstat(map_fd.fd, &sb) || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size == s->jit_read) {
        tmr_own_close(&map_fd);
        return 0;
    }
    if ((uint64_t)sb.st_size < s->jit_read) s->jit_read = 0; /* rewritten: its entries come again */
    /* What it gained, read through the descriptor while it is its own. */
    size_t want = (size_t)((uint64_t)sb.st_size - s->jit_read), got = 0;
    char *gained = malloc(want ? want : 1);
    while (gained && got < want) {
        ssize_t n = pread(map_fd.fd, gained + got, want - got, (off_t)(s->jit_read + got));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    int ours = tmr_own_still(&map_fd);
    tmr_own_close(&map_fd);
    FILE *in = gained && got && ours ? fmemopen(gained, got, "r") : NULL;
    if (!in) {
        free(gained);
        return 0;
    }
    char *line = NULL;
    size_t line_cap = 0, had = s->n_jit;
    ssize_t len;
    while ((len = getline(&line, &line_cap, in)) > 0 && line[len - 1] == '\n') { /* a partial line: later */
        s->jit_read += (uint64_t)len;
        unsigned long long start, size;
        int at = 0;
        line[len - 1] = 0;
        if (sscanf(line, "%llx %llx %n", &start, &size, &at) < 2 || !at || !line[at] || size == 0) continue;
        if (tmr_grow((void **)&s->jit, &s->cap_jit, sizeof *s->jit, s->n_jit + 1)) break;
        const char *name = own(s, dup_str(line + at, strlen(line + at)));
        if (!name) break;
        s->jit[s->n_jit++] = (jit_sym){start, size, name};
    }
    free(line);
    fclose(in);
    free(gained);
    if (s->n_jit == had) return 0;
    forget_cache(s);
    jit_key *sorted = realloc(s->jit_sorted, s->n_jit * sizeof *sorted);
    if (!sorted) {
        s->n_jit = had; /* the names stay owned; those entries are not used */
        return 0;
    }
    s->jit_sorted = sorted;
    for (size_t i = 0; i < s->n_jit; i++) sorted[i] = (jit_key){s->jit[i].start, i};
    qsort(sorted, s->n_jit, sizeof *sorted, jit_cmp);
    return 1;
}

/* The latest entry covering pc (a JIT reuses freed code memory), or NULL. */
static const jit_sym *find_jit(const tmr_symbols *s, uint64_t pc) {
    size_t lo = count_at_or_below(s->jit_sorted, s->n_jit, sizeof *s->jit_sorted, pc);
    const jit_sym *best = NULL;
    size_t best_i = 0;
    for (size_t k = lo, steps = 0; k-- > 0 && steps < 8; steps++) {
        size_t i = s->jit_sorted[k].i;
        if (pc - s->jit[i].start < s->jit[i].size && (!best || i > best_i)) best = &s->jit[i], best_i = i;
    }
    return best;
}

/* Memory no file backs: where JITs put code. */
static int anonymous(const tmr_mapping *m) {
    return !m->path[0] || strcmp(m->path, "//anon") == 0 || strncmp(m->path, "[anon", 5) == 0;
}

/* Names pc from the perf map when it is in anonymous memory or in no
 * mapping (code made executable with mprotect has no MMAP record); a pc in
 * no mapping gets one of the function's extent, named after the map file,
 * as perf shows it. */
static void resolve_jit(tmr_symbols *s, uint64_t pc, int *mapping, uint64_t *rel_pc, const char **name) {
    const jit_sym *j = find_jit(s, pc);
    if (!j && read_perf_map(s)) j = find_jit(s, pc);
    if (!j) return;
    *name = j->name;
    if (*mapping >= 0) return;
    char path[48];
    perf_map_path(s, path, sizeof path);
    int i = mapping_index(s, j->start, j->start + j->size, 0, path);
    if (i < 0) return;
    *mapping = i;
    *rel_pc = pc - j->start;
}

static void resolve(tmr_symbols *s, uint64_t pc, int *mapping, uint64_t *rel_pc, const char **name) {
    if (s->kernel && pc >= TMR_KERNEL_START) {
        *mapping = s->kernel_map;
        *rel_pc = pc;
        *name = kernel_name(s->kernel, pc);
        return;
    }
    int i = find_live(s, pc);
    if (i < 0 && !s->pid) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        int64_t ms = (int64_t)(now.tv_sec - s->last_refresh.tv_sec) * 1000 +
                     (now.tv_nsec - s->last_refresh.tv_nsec) / 1000000;
        if (ms >= REFRESH_MIN_INTERVAL_MS && tmr_symbols_refresh(s, NULL) == TM_OK) i = find_live(s, pc);
    }
    *mapping = i;
    *name = NULL;
    if (i < 0) {
        *rel_pc = pc;
        resolve_jit(s, pc, mapping, rel_pc, name);
        return;
    }
    const tmr_mapping *m = &s->maps[i];
    *rel_pc = pc - m->start + m->offset + m->load_bias;
    size_t fi = s->map_file[i];
    if (fi != SIZE_MAX && s->files[fi].named_later && !s->name_all) return; /* tm_symbolize names it */
    if (fi != SIZE_MAX) {
        elf_file *f = &s->files[fi];
        if (!f->syms_loaded) load_syms(f);
        func_sym *y = find_sym(f, *rel_pc);
        if (y) *name = shown_name(s, y);
    }
    if (!*name && !s->pid) *name = dladdr_name(s, pc);
    if (!*name && anonymous(m)) resolve_jit(s, pc, mapping, rel_pc, name);
}

void tmr_symbols_lookup(tmr_symbols *s, uint64_t pc, int *mapping, uint64_t *rel_pc, const char **name) {
    size_t mask = s->cache_cap - 1;
    if (s->cache_cap) {
        for (size_t k = tm_hash_u64(pc) & mask;; k = (k + 1) & mask) {
            cache_ent *e = &s->cache[k];
            if (!e->used) break;
            if (e->pc == pc) {
                *mapping = e->mapping, *rel_pc = e->rel_pc, *name = e->name;
                return;
            }
        }
    }
    resolve(s, pc, mapping, rel_pc, name); /* may refresh, which empties the cache */
    const tmr_mapping *m = tmr_symbols_mapping(s, *mapping);
    if (!*name && (!m || anonymous(m))) return; /* a JIT may name it later in its perf map */
    if ((s->cache_n + 1) * 2 > s->cache_cap) {
        size_t cap = s->cache_cap ? s->cache_cap * 2 : 1024;
        cache_ent *old = s->cache;
        size_t old_cap = s->cache_cap;
        if (cap > CACHE_MAX) cap = old_cap, old_cap = 0; /* full: start over at this size */
        cache_ent *fresh = calloc(cap, sizeof *fresh);
        if (!fresh) return; /* answer uncached */
        s->cache = fresh, s->cache_cap = cap, s->cache_n = 0;
        for (size_t j = 0; j < old_cap; j++) {
            if (!old[j].used) continue;
            size_t k = tm_hash_u64(old[j].pc) & (cap - 1);
            while (fresh[k].used) k = (k + 1) & (cap - 1);
            fresh[k] = old[j];
            s->cache_n++;
        }
        free(old);
        mask = cap - 1;
    }
    size_t k = tm_hash_u64(pc) & mask;
    while (s->cache[k].used) k = (k + 1) & mask;
    s->cache[k] = (cache_ent){pc, *rel_pc, *name, *mapping, 1};
    s->cache_n++;
}
