/*
 * symbolize.h — the symbolizer's parts (tm_symbolize in symbolize.c):
 * finding and reading ELF files with elfutils libdw (elf_dw.c), reading
 * ProGuard/R8 mapping files (proguard.c), and the growing buffer both
 * encode Perfetto packets into.
 */
#ifndef TM_SYMBOLIZE_H
#define TM_SYMBOLIZE_H

#include "common/alloc.h"
#include "common/base.h"

/* ---- a growing protobuf buffer ---- */

typedef struct tm_obuf {
    tm_mem *mem;
    uint8_t *data;
    size_t len, cap;
    tm_status st; /* the first failure; later calls do nothing */
} tm_obuf;

void tm_obuf_init(tm_obuf *b, tm_mem *mem);
void tm_obuf_free(tm_obuf *b);
void tm_obuf_uint(tm_obuf *b, uint32_t field, uint64_t v);
void tm_obuf_bytes(tm_obuf *b, uint32_t field, const void *data, size_t len);
/* Bytes as they are: the body of a field opened with tm_obuf_open. */
void tm_obuf_raw(tm_obuf *b, const void *data, size_t len);
/* A nested message: open returns its start, close writes its length. */
size_t tm_obuf_open(tm_obuf *b, uint32_t field);
void tm_obuf_close(tm_obuf *b, size_t start);

/* ---- ELF files (elf_dw.c) ---- */

enum { TM_ELF_FOUND = 0, TM_ELF_NOT_FOUND = 1, TM_ELF_MISMATCH = 2 };

typedef struct tm_elf tm_elf;

/* Where to look: symbol directories first, then a debuginfod client cache
 * (NULL: none), then (system) the mapping's own path and /usr/lib/debug. */
typedef struct tm_elf_search {
    tm_mem *mem;
    const char *const *dirs;
    size_t n_dirs;
    int system;
    const char *debuginfod;
} tm_elf_search;

/* Finds the ELF file of a mapping (path as in the trace, build id raw) and
 * opens it once; *found is TM_ELF_*. *out is NULL unless found. */
tm_status tm_elf_open(const tm_elf_search *s, const char *path, const uint8_t *build_id, size_t build_id_len,
                      tm_elf **out, int *found);
void tm_elf_close(tm_elf *e);
/* Whether e has debug sections libdw cannot read: compressed, but not in a
 * way it knows (zstd before elfutils 0.189). */
bool tm_elf_dwarf_unreadable(tm_elf *e);

typedef struct tm_elf_line {
    const char *function; /* owned by the tm_elf (valid until it closes) */
    const char *file;     /* NULL: unknown */
    uint32_t line;        /* 0: unknown */
} tm_elf_line;

/* Resolves rel_pc (an ELF virtual address) into at most cap lines,
 * innermost inlined function first; *n 0: nothing known. */
void tm_elf_resolve(tm_elf *e, uint64_t rel_pc, tm_elf_line *lines, size_t cap, size_t *n);

/* ---- ProGuard/R8 mapping files (proguard.c) ---- */

typedef struct tm_proguard_counts {
    uint64_t classes, methods, fields;
    uint64_t lines_skipped; /* neither a class, a member nor a comment */
} tm_proguard_counts;

/* Appends a DeobfuscationMapping TracePacket (as a Trace.packet record) of
 * the mapping file text[0..len) for package (NULL: none) to out. */
tm_status tm_proguard_encode(const char *text, size_t len, const char *package, tm_obuf *out,
                             tm_proguard_counts *counts);

#endif
