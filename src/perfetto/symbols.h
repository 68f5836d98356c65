/*
 * symbols.h — the two symbol payloads of a trace, decoded for every
 * consumer (the profile model and the Trace Processor model): ModuleSymbols
 * (TracePacket.module_symbols: function, file and line per address of a
 * build id, innermost inlined function first) and DeobfuscationMapping
 * (TracePacket.deobfuscation_mapping: obfuscated Java class and method names
 * of a package), and PackagesList (TracePacket.packages_list: the apps
 * installed and their uids, which tell whose app a process is). The reader
 * checked their wire types (schema.c) before a consumer sees them; these
 * walk them without allocating.
 */
#ifndef TM_PERFETTO_SYMBOLS_H
#define TM_PERFETTO_SYMBOLS_H

#include "common/limits.h" /* TM_MAX_SYMBOL_LINES */
#include "perfetto/reader.h"



/* Where a walker found a payload malformed (the walkers return
 * TM_ERR_MALFORMED): the wire reader that failed (its p, err) and the
 * message it was reading. Consumers report at.p through the reader's
 * offset rule, so the error names the byte. */
typedef struct tm_pf_walk_error {
    tm_pb_reader at;
    const char *where;
} tm_pf_walk_error;

typedef struct tm_pf_line {
    tm_str function, file; /* file.data NULL: none */
    uint32_t line;         /* 0: none */
} tm_pf_line;

/* One AddressSymbols of a ModuleSymbols: lines[0] is the innermost frame,
 * lines[n - 1] the function the address is in. */
typedef struct tm_pf_address_symbols {
    tm_str path;        /* ModuleSymbols.path */
    tm_bytes build_id;  /* raw bytes */
    uint64_t address;   /* rel_pc */
    size_t n;
    tm_pf_line lines[TM_MAX_SYMBOL_LINES];
} tm_pf_address_symbols;

typedef tm_status (*tm_pf_address_fn)(void *ctx, const tm_pf_address_symbols *a);
/* Calls fn for every AddressSymbols of a ModuleSymbols payload, in order. */
tm_status tm_pf_module_symbols(tm_bytes payload, tm_pf_address_fn fn, void *ctx, tm_pf_walk_error *bad);

/* One renamed method (or, with method.data NULL, a renamed class) of a
 * DeobfuscationMapping. */
typedef struct tm_pf_deobf {
    tm_str package;            /* data NULL: none (applies to every package) */
    tm_str obf_class, class_name;
    tm_str obf_method, method; /* method: a bare name, or "Class.name" when it moved */
    uint32_t obf_line_start, obf_line_end, line_start; /* 0: not given */
} tm_pf_deobf;

typedef tm_status (*tm_pf_deobf_fn)(void *ctx, const tm_pf_deobf *d);
/* Calls fn for every class, then each of its methods, of a
 * DeobfuscationMapping payload. */
tm_status tm_pf_deobfuscation(tm_bytes payload, tm_pf_deobf_fn fn, void *ctx, tm_pf_walk_error *bad);

/* One PackageInfo of a PackagesList. */
typedef struct tm_pf_package {
    tm_str name;           /* "" when absent */
    uint64_t uid;
    int64_t version_code;
    bool debuggable, profileable_from_shell;
} tm_pf_package;

typedef tm_status (*tm_pf_package_fn)(void *ctx, const tm_pf_package *pkg);
/* Calls fn for every package of a PackagesList payload, in order; its
 * read_error and parse_error flags into *read_error and *parse_error. */
tm_status tm_pf_packages_list(tm_bytes payload, tm_pf_package_fn fn, void *ctx, bool *read_error, bool *parse_error,
                              tm_pf_walk_error *bad);

/* The symbol payloads of a trace, collected in file order while reading
 * (consumers apply them once every frame exists). Views into the input or
 * the reader's arena. */
typedef struct tm_pf_symbols {
    tm_bytes *payloads;
    uint32_t *fields; /* TM_PF_PACKET_MODULE_SYMBOLS, _DEOBFUSCATION_MAPPING or _PACKAGES_LIST */
    size_t n, cap;
} tm_pf_symbols;

tm_status tm_pf_symbols_add(tm_mem *mem, tm_pf_symbols *s, uint32_t field, tm_bytes payload);
void tm_pf_symbols_free(tm_mem *mem, tm_pf_symbols *s);

/* The app a mapping belongs to by its path, as Android installs apps:
 * /data/app/[~~random/]PACKAGE-suffix/...; empty when the path says none.
 * Both consumers bind ProGuard maps to frames by it. */
tm_str tm_pf_path_package(tm_str path);
/* Is a mapping path JIT code (/memfd:...), which belongs to whichever app
 * runs it, so no package can be read from it nor guessed for it? */
bool tm_pf_path_is_jit(tm_str path);

#endif
