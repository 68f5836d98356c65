/*
 * test_symbolize.c — the symbolizer end to end: small C programs built here
 * with -g (and -O2 with an inlined function) are resolved by tm_symbolize
 * and compared with binutils' `addr2line -i -f` pc by pc (function, file,
 * line, inline chain); a stripped binary whose DWARF is in a
 * .build-id/ab/cdef.debug file; the counted outcomes (build id mismatch,
 * not found, no build id); a ProGuard/R8 map renaming Java frames; the
 * symbols reaching the SQL model, the profile model, folded and pprof; and
 * the CLI (symbolize, then query and convert; --symbols on convert).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "perfetto/fields.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

static char dir[64];

static const char prog_src[] =
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "static inline __attribute__((always_inline)) unsigned mix(unsigned x) {\n"
    "    for (int r = 0; r < 8; r++) x = x * 2654435761u ^ (x >> 13);\n"
    "    return x;\n"
    "}\n"
    "__attribute__((noinline)) unsigned work(unsigned n, unsigned seed) {\n"
    "    unsigned h = seed;\n"
    "    for (unsigned i = 0; i < n; i++) h = mix(h + i);\n"
    "    return h;\n"
    "}\n"
    "int main(int argc, char **argv) {\n"
    "    printf(\"%u\\n\", work(argc > 1 ? (unsigned)atoi(argv[1]) : 10u, (unsigned)argc));\n"
    "    return 0;\n"
    "}\n";

static int sh(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

/* A command's whole standard output (malloc'd, NUL-terminated). */
static char *capture(const char *fmt, ...) {
    char cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    FILE *p = popen(cmd, "r");
    cr_assert(p, "popen %s", cmd);
    tu_membuf out = {0};
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) tu_membuf_write(&out, buf, n);
    pclose(p);
    if (!out.data) tu_membuf_write(&out, "", 0);
    return out.data;
}

/* Builds DIR/NAME from prog_src with cflags; returns its build id. */
/* Builds dir/name from prog.c with compiler and cflags (and -g); its build id. */
static size_t build_with(const char *compiler, const char *name, const char *cflags, uint8_t id[64]) {
    cr_assert_eq(sh("cd %s && %s %s -g -Wl,--build-id=sha1 -o %s prog.c", dir, compiler, cflags, name), 0);
    char *hex = capture("readelf -n %s/%s | sed -n 's/.*Build ID: *//p'", dir, name);
    size_t n = 0;
    for (char *p = hex; p[0] && p[1] && p[0] != '\n' && n < 64; p += 2) {
        unsigned v;
        cr_assert_eq(sscanf(p, "%2x", &v), 1);
        id[n++] = (uint8_t)v;
    }
    free(hex);
    cr_assert_eq(n, 20, "build id of %s", name);
    return n;
}

static size_t build(const char *name, const char *cflags, uint8_t id[64]) { return build_with("cc", name, cflags, id); }

/* "ab/cdef...": a build id's path under .build-id/ (without ".debug"). */
static const char *build_id_path(const uint8_t id[20]) {
    static char path[48];
    int n = snprintf(path, sizeof path, "%02x/", id[0]);
    for (int i = 1; i < 20; i++) n += snprintf(path + n, sizeof path - (size_t)n, "%02x", id[i]);
    return path;
}

/* [start, end) of a function, from nm. */
static void symbol_range(const char *name, const char *fn, uint64_t *start, uint64_t *end) {
    char *out = capture("nm -S --defined-only %s/%s | awk '$4 == \"%s\" {print $1, $2}'", dir, name, fn);
    unsigned long long a = 0, s = 0;
    cr_assert_eq(sscanf(out, "%llx %llx", &a, &s), 2, "nm %s: %s", fn, out);
    free(out);
    *start = a, *end = a + s;
}

/* Writes text to dir/name. */
static void write_source(const char *name, const char *text) {
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/tm_symXXXXXX");
    cr_assert(mkdtemp(dir));
    write_source("prog.c", prog_src);
}

static void teardown(void) { sh("rm -rf %s", dir); }

TestSuite(symbolize, .init = setup, .fini = teardown, .timeout = 120);

/* A trace with one sample per pc, each a single frame of a mapping named
 * path with build id id (id_len 0: none); Java frames (java != NULL) are
 * named java[i] in a .odex mapping instead. */
static void trace_of(tb_buf *t, const char *path, const uint8_t *id, size_t id_len, const uint64_t *pcs, size_t n,
                     const char *const *java) {
    tb_standard_clocks(t, 1);
    size_t pkt = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    /* the path as its segments */
    uint64_t seg[16];
    size_t nseg = 0;
    const char *p = path;
    while (*p && nseg < 16) {
        while (*p == '/') p++;
        const char *e = strchr(p, '/');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 100 + nseg, p, len);
        seg[nseg] = 100 + nseg;
        nseg++;
        p += len;
    }
    if (id_len) tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 7, id, id_len);
    tb_mapping(t, 1, id_len ? 7 : 0, 0x10000, 0x900000, seg, nseg);
    for (size_t i = 0; i < n; i++) {
        if (java) tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1 + i, java[i], strlen(java[i]));
        tb_frame(t, 1 + i, java ? 1 + i : 0, 1, pcs[i]);
        const uint64_t frames[1] = {1 + i};
        tb_callstack(t, 1 + i, frames, 1, 0);
    }
    tb_close(t, in);
    tb_close(t, pkt);
    for (size_t i = 0; i < n; i++) tb_perf_sample(t, 1, TB_BOOT0 + 1000 * (i + 1), 42, 42, 1 + i, TB_SEQ_NEEDS);
}

static tm_status symbolize(const tb_buf *t, const char *const *dirs, size_t n_dirs, const tm_proguard_map *maps,
                           size_t n_maps, tu_membuf *out, tm_symbolize_stats *st) {
    tm_symbolize_options o = {.symbol_dirs = dirs, .n_symbol_dirs = n_dirs, .no_system_paths = 1,
                              .proguard_maps = maps, .n_proguard_maps = n_maps};
    tm_sink sink = {.write = tu_membuf_write, .ctx = out};
    tm_error err;
    tm_status s = tm_symbolize(t->data, t->len, NULL, &o, &sink, st, &err);
    cr_assert_eq(s, TM_OK, "%s", err.message);
    return s;
}

/* A trace of n Java frames named names (one sample each) symbolized with
 * one ProGuard map, into out. */
static void symbolize_java(const char *map, size_t len, const char *const *names, size_t n, tu_membuf *out,
                           tm_symbolize_stats *st) {
    tm_proguard_map maps[1] = {{.package = NULL, .data = map, .len = len}};
    uint64_t pcs[8];
    cr_assert_leq(n, 8);
    for (size_t i = 0; i < n; i++) pcs[i] = i + 1;
    tb_buf t = {0};
    trace_of(&t, "/data/app/base.odex", NULL, 0, pcs, n, names);
    symbolize(&t, NULL, 0, maps, 1, out, st);
    tb_free(&t);
}

/* The lines of the frame at rel_pc as "fn file:line|fn file:line", innermost first. */
static char *sql_lines(sqlite3 *db, uint64_t pc) {
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(db,
                                    "select s.name, coalesce(s.source_file, '?\?'), coalesce(s.line_number, 0), s.inlined "
                                    "from stack_profile_frame f join stack_profile_symbol s using (symbol_set_id) "
                                    "where f.rel_pc = ? order by s.id",
                                    -1, &q, NULL),
                 SQLITE_OK);
    sqlite3_bind_int64(q, 1, (sqlite3_int64)pc);
    tu_membuf out = {0};
    int k = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        char line[1024];
        int n = snprintf(line, sizeof line, "%s%s %s:%d", k++ ? "|" : "", sqlite3_column_text(q, 0),
                         sqlite3_column_text(q, 1), sqlite3_column_int(q, 2));
        tu_membuf_write(&out, line, (size_t)n);
    }
    sqlite3_finalize(q);
    if (!out.data) tu_membuf_write(&out, "", 0);
    return out.data;
}

/* addr2line's answer in the same shape (discriminators dropped). */
static char *addr2line(const char *name, uint64_t pc) {
    char *raw = capture("addr2line -i -f -e %s/%s 0x%llx", dir, name, (unsigned long long)pc);
    tu_membuf out = {0};
    char *save = NULL, *fn, *loc;
    int k = 0;
    for (fn = strtok_r(raw, "\n", &save); fn && (loc = strtok_r(NULL, "\n", &save)); fn = strtok_r(NULL, "\n", &save)) {
        char *disc = strstr(loc, " (discriminator");
        if (disc) *disc = 0;
        size_t loc_len = strlen(loc);
        if (loc_len >= 2 && strcmp(loc + loc_len - 2, ":?") == 0) strcpy(loc + loc_len - 1, "0"); /* line 0 */
        char line[1024];
        int n = snprintf(line, sizeof line, "%s%s %s", k++ ? "|" : "", fn, loc);
        tu_membuf_write(&out, line, (size_t)n);
    }
    free(raw);
    if (!out.data) tu_membuf_write(&out, "", 0);
    return out.data;
}

/* Every pc of work in dir/name (build id id), symbolized with dir as the
 * symbol directory and loaded as SQL tables: *pcs and *n the pcs, out the
 * symbolized trace (the tables' strings point into it). */
static tm_db *symbolize_work(const char *name, const uint8_t *id, size_t id_len, uint64_t **pcs, size_t *n,
                             tu_membuf *out, tm_symbolize_stats *st) {
    uint64_t start, end;
    symbol_range(name, "work", &start, &end);
    *n = (size_t)(end - start);
    cr_assert(*n > 4 && *n < 4096);
    *pcs = calloc(*n, sizeof **pcs);
    for (size_t i = 0; i < *n; i++) (*pcs)[i] = start + i;
    char path[128];
    snprintf(path, sizeof path, "/nonexistent/%s", name); /* found by file name in the symbol directory */
    tb_buf t = {0};
    trace_of(&t, path, id, id_len, *pcs, *n, NULL);
    const char *dirs[1] = {dir};
    symbolize(&t, dirs, 1, NULL, 0, out, st);
    tb_free(&t);
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(out->data, out->len, NULL, &db, &err), TM_OK, "%s", err.message);
    return db;
}

static void compare_with_addr2line(const char *compiler, const char *name, const char *cflags, size_t *inlined) {
    uint8_t id[64];
    size_t id_len = build_with(compiler, name, cflags, id), n;
    uint64_t *pcs;
    tu_membuf out = {0};
    tm_symbolize_stats st;
    tm_db *db = symbolize_work(name, id, id_len, &pcs, &n, &out, &st);
    cr_assert_eq(st.mappings_symbolized, 1);
    cr_assert_eq(st.frames, n);
    size_t same = 0;
    *inlined = 0;
    for (size_t i = 0; i < n; i++) {
        char *got = sql_lines(tm_db_sqlite(db), pcs[i]), *want = addr2line(name, pcs[i]);
        if (strcmp(got, want) == 0) same++;
        else cr_log_warn("pc 0x%llx: got %s, addr2line %s", (unsigned long long)pcs[i], got, want);
        if (strchr(got, '|')) (*inlined)++;
        free(got);
        free(want);
    }
    cr_assert_geq(same * 100, n * 99, "%zu of %zu pcs agree with addr2line", same, n);
    tm_db_free(db);
    tu_membuf_free(&out);
    free(pcs);
}

Test(symbolize, every_pc_as_addr2line_O0) {
    size_t inlined; /* always_inline inlines at -O0 too */
    compare_with_addr2line("cc", "plain", "-O0", &inlined);
    cr_assert_gt(inlined, 0);
}

Test(symbolize, every_pc_as_addr2line_O2_with_inlining) {
    size_t inlined;
    compare_with_addr2line("cc", "inl", "-O2", &inlined);
    cr_assert_gt(inlined, 0, "mix is inlined into work at -O2");
}

/* gcc -flto: the inlined functions' abstract origins are in other units
 * than the code, which dwarf_getscopes does not follow. (addr2line names
 * the file "<artificial>" there: the reference is what the source says.)
 * Every pc of work is in work or in mix inlined into it at line 9, and
 * the function's name never carries mix's lines. */
Test(symbolize, inlined_calls_of_gcc_lto) {
    uint8_t id[64];
    size_t id_len = build("lto", "-O2 -flto", id), n;
    uint64_t *pcs;
    tu_membuf out = {0};
    tm_symbolize_stats st;
    tm_db *db = symbolize_work("lto", id, id_len, &pcs, &n, &out, &st);
    char in_work[160], in_mix[160];
    snprintf(in_mix, sizeof in_mix, "|work %s/prog.c:9", dir);
    size_t inlined = 0;
    for (size_t i = 0; i < n; i++) {
        char *got = sql_lines(tm_db_sqlite(db), pcs[i]);
        snprintf(in_work, sizeof in_work, "work %s/prog.c:", dir);
        if (strncmp(got, "mix ", 4) == 0) {
            inlined++;
            cr_expect(strstr(got, in_mix) && !strchr(strchr(got, '|') + 1, '|'), "pc 0x%llx: %s",
                      (unsigned long long)pcs[i], got);
        } else {
            int line = 0;
            cr_expect(strncmp(got, in_work, strlen(in_work)) == 0 && !strchr(got, '|') &&
                          sscanf(got + strlen(in_work), "%d", &line) == 1 && line >= 7 && line <= 11 && line != 4,
                      "pc 0x%llx: %s", (unsigned long long)pcs[i], got);
        }
        free(got);
    }
    cr_assert_gt(inlined, 0, "mix is inlined into work at -O2 -flto");
    tm_db_free(db);
    tu_membuf_free(&out);
    free(pcs);
}

/* -gsplit-dwarf: the functions are in the .dwo file's split unit, beside
 * the binary. addr2line cannot read it: the same code built without it is
 * the reference, pc for pc. */
Test(symbolize, split_dwarf_as_the_same_code_without_it) {
    uint8_t id[64], id_split[64];
    size_t id_len = build("whole", "-O2", id), id_split_len = build("split", "-O2 -gsplit-dwarf", id_split);
    uint64_t start, end, start_split, end_split;
    symbol_range("whole", "work", &start, &end);
    symbol_range("split", "work", &start_split, &end_split);
    cr_assert(start == start_split && end == end_split, "the same code at the same addresses");
    size_t n = (size_t)(end - start);
    uint64_t *pcs = calloc(n, sizeof *pcs);
    for (size_t i = 0; i < n; i++) pcs[i] = start + i;
    tm_db *db[2] = {NULL, NULL};
    tu_membuf out[2] = {{0}, {0}}; /* the tables' strings point into them */
    const char *names[2] = {"/nonexistent/whole", "/nonexistent/split"};
    for (int k = 0; k < 2; k++) {
        tb_buf t = {0};
        trace_of(&t, names[k], k ? id_split : id, k ? id_split_len : id_len, pcs, n, NULL);
        tm_symbolize_stats st;
        const char *dirs[1] = {dir};
        symbolize(&t, dirs, 1, NULL, 0, &out[k], &st);
        tm_error err;
        cr_assert_eq(tm_db_new(out[k].data, out[k].len, NULL, &db[k], &err), TM_OK, "%s", err.message);
        tb_free(&t);
    }
    size_t inlined = 0;
    for (size_t i = 0; i < n; i++) {
        char *want = sql_lines(tm_db_sqlite(db[0]), pcs[i]), *got = sql_lines(tm_db_sqlite(db[1]), pcs[i]);
        cr_expect(strcmp(got, want) == 0, "pc 0x%llx: %s, without split DWARF %s", (unsigned long long)pcs[i], got,
                  want);
        inlined += strchr(got, '|') != NULL;
        free(want), free(got);
    }
    cr_assert_gt(inlined, 0, "mix is inlined into work at -O2");
    tm_db_free(db[0]), tm_db_free(db[1]);
    tu_membuf_free(&out[0]), tu_membuf_free(&out[1]);
    free(pcs);
}

/* clang writes no .debug_aranges (unless -gdwarf-aranges), through which
 * libdw places a pc in its compilation unit: the units' own ranges do. */
Test(symbolize, every_pc_as_addr2line_clang_without_aranges) {
    if (sh("command -v clang >/dev/null") != 0) cr_skip_test("no clang");
    size_t inlined;
    compare_with_addr2line("clang", "clang", "-O2", &inlined);
    cr_assert_eq(sh("readelf -S %s/clang | grep -q debug_aranges", dir) != 0, 1, "the binary has .debug_aranges");
    cr_assert_gt(inlined, 0, "mix is inlined into work at -O2");
}

static size_t build_id_of(const char *name, uint8_t id[64]);

/* A source compiled by a relative path (cc -g src/prog.c, as make does):
 * its file is joined to the compilation directory, as addr2line prints it,
 * for the leaf's line and an inlined call's alike. */
Test(symbolize, relative_source_paths_are_made_absolute) {
    cr_assert_eq(sh("cd %s && mkdir -p src && cp prog.c src/prog.c && cc -O2 -g -Wl,--build-id=sha1 -o rel src/prog.c",
                    dir),
                 0);
    uint8_t id[64];
    size_t id_len = build_id_of("rel", id), n;
    uint64_t *pcs;
    tu_membuf out = {0};
    tm_symbolize_stats st;
    tm_db *db = symbolize_work("rel", id, id_len, &pcs, &n, &out, &st);
    char want[160];
    snprintf(want, sizeof want, "%s/src/prog.c:", dir);
    size_t inlined = 0, same = 0;
    for (size_t i = 0; i < n; i++) {
        char *got = sql_lines(tm_db_sqlite(db), pcs[i]), *a2l = addr2line("rel", pcs[i]);
        cr_assert(strstr(got, want), "pc 0x%llx: %s", (unsigned long long)pcs[i], got);
        inlined += strchr(got, '|') != NULL;
        same += strcmp(got, a2l) == 0;
        free(got), free(a2l);
    }
    cr_assert_gt(inlined, 0, "mix is inlined into work at -O2");
    cr_assert_geq(same * 100, n * 99, "%zu of %zu pcs agree with addr2line", same, n);
    tm_db_free(db);
    tu_membuf_free(&out);
    free(pcs);
}

/* Debug sections compressed with zlib are read; with zstd only by an
 * elfutils that knows it (0.189): a mapping whose DWARF cannot be read is
 * counted, exactly when it gets no lines. */
/* A relative compilation directory (-fdebug-prefix-map=DIR=., as Debian
 * builds its packages: libc's units say ./csu and ../sysdeps/...) is joined
 * to the file's relative name too, as addr2line and llvm-symbolizer print
 * it: ./sub/../src/prog.c, not ../src/prog.c, which names the file relative
 * to nothing the user can know. */
Test(symbolize, a_relative_compilation_directory_is_joined_too) {
    cr_assert_eq(sh("cd %s && mkdir -p src sub && cp prog.c src/prog.c && cd sub && "
                    "cc -O2 -g -fdebug-prefix-map=%s=. -Wl,--build-id=sha1 -o ../relc ../src/prog.c",
                    dir, dir),
                 0);
    uint8_t id[64];
    size_t id_len = build_id_of("relc", id), n;
    uint64_t *pcs;
    tu_membuf out = {0};
    tm_symbolize_stats st;
    tm_db *db = symbolize_work("relc", id, id_len, &pcs, &n, &out, &st);
    size_t same = 0;
    for (size_t i = 0; i < n; i++) {
        char *got = sql_lines(tm_db_sqlite(db), pcs[i]), *a2l = addr2line("relc", pcs[i]);
        cr_assert(strstr(got, " ./sub/../src/prog.c:"), "pc 0x%llx: %s", (unsigned long long)pcs[i], got);
        same += strcmp(got, a2l) == 0;
        free(got), free(a2l);
    }
    cr_assert_geq(same * 100, n * 99, "%zu of %zu pcs agree with addr2line", same, n);
    tm_db_free(db);
    tu_membuf_free(&out);
    free(pcs);
}

Test(symbolize, compressed_debug_sections_are_read_or_said_unreadable) {
    uint8_t id[64];
    size_t id_len = build("plain", "-O0", id);
    const char *kinds[2] = {"zlib", "zstd"};
    for (int k = 0; k < 2; k++) {
        if (sh("cd %s && objcopy --compress-debug-sections=%s plain %s", dir, kinds[k], kinds[k]) != 0) {
            cr_log_warn("objcopy cannot compress with %s", kinds[k]);
            continue;
        }
        uint64_t start, end;
        symbol_range(kinds[k], "work", &start, &end);
        uint64_t pcs[1] = {start};
        char path[64];
        snprintf(path, sizeof path, "/nonexistent/%s", kinds[k]);
        tb_buf t = {0};
        trace_of(&t, path, id, id_len, pcs, 1, NULL);
        tu_membuf out = {0};
        tm_symbolize_stats st;
        const char *dirs[1] = {dir};
        symbolize(&t, dirs, 1, NULL, 0, &out, &st);
        cr_assert_eq(st.mappings_symbolized, 1, "%s", kinds[k]);
        cr_assert_eq(st.frames_symbolized, 1, "%s: named from the symbol table at least", kinds[k]);
        if (k == 0) cr_assert_eq(st.frames_with_lines, 1, "zlib is read");
        cr_assert_eq(st.mappings_dwarf_unreadable, st.frames_with_lines ? 0u : 1u, "%s: %llu with lines", kinds[k],
                     (unsigned long long)st.frames_with_lines);
        tu_membuf_free(&out);
        tb_free(&t);
    }
}

/* The first pc of work in dir/inl as the one frame of a mapping at path
 * (build id id), symbolized with dirs: out the symbolized trace. */
static void symbolize_work_start(const char *path, const uint8_t *id, size_t id_len, const char *const *dirs,
                                 size_t n_dirs, tu_membuf *out, tm_symbolize_stats *st) {
    uint64_t start, end;
    symbol_range("inl", "work", &start, &end);
    uint64_t pcs[1] = {start};
    tb_buf t = {0};
    trace_of(&t, path, id, id_len, pcs, 1, NULL);
    symbolize(&t, dirs, n_dirs, NULL, 0, out, st);
    tb_free(&t);
}

/* A stripped binary elsewhere; its DWARF only in SYMS/.build-id/ab/cdef.debug. */
Test(symbolize, separate_debug_file_by_build_id) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O2", id);
    cr_assert_eq(sh("cd %s && mkdir -p syms/.build-id/%02x && objcopy --only-keep-debug inl syms/.build-id/%s.debug && "
                    "strip -o stripped inl",
                    dir, id[0], build_id_path(id)),
                 0);
    char syms[96];
    snprintf(syms, sizeof syms, "%s/syms", dir);
    const char *dirs[1] = {syms};
    tu_membuf out = {0};
    tm_symbolize_stats st;
    symbolize_work_start("/opt/app/inl", id, id_len, dirs, 1, &out, &st);
    cr_assert_eq(st.mappings_symbolized, 1);
    cr_assert_eq(st.frames_with_lines, 1);
    tm_trace *tr = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(out.data, out.len, NULL, &tr, &err), TM_OK, "%s", err.message);
    char label[256];
    size_t len;
    cr_assert_eq(tm_trace_frame_label(tr, 0, label, sizeof label, &len), TM_OK);
    char want[256];
    snprintf(want, sizeof want, "work (%s/prog.c:7)", dir); /* work's first line in prog_src */
    cr_assert_str_eq(label, want);
    tm_trace_free(tr);
    tu_membuf_free(&out);
}

/* A mapping of a file deleted or replaced while it ran is "PATH (deleted)"
 * (/proc/PID/maps, so the trace): a copy of the file in a symbol directory
 * is found by the name and by the path without that suffix, and so is the
 * file at PATH on this machine. Nothing was found before: the candidates
 * were "DIR/inl (deleted)" and "DIR/opt/app/inl (deleted)". */
Test(symbolize, a_deleted_mapping_is_found_by_its_name_without_the_suffix) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O2", id);
    cr_assert_eq(sh("cd %s && mkdir -p byname bypath/opt/app && cp inl byname/inl && cp inl bypath/opt/app/inl", dir),
                 0);
    char byname[96], bypath[96], own[128];
    snprintf(byname, sizeof byname, "%s/byname", dir);
    snprintf(bypath, sizeof bypath, "%s/bypath", dir);
    snprintf(own, sizeof own, "%s/inl (deleted)", dir);
    struct {
        const char *dir, *path;
    } cases[] = {{byname, "/opt/app/inl (deleted)"}, {bypath, "/opt/app/inl (deleted)"}, {NULL, own}};
    for (size_t c = 0; c < 3; c++) {
        uint64_t start, end;
        symbol_range("inl", "work", &start, &end);
        tb_buf t = {0};
        trace_of(&t, cases[c].path, id, id_len, &start, 1, NULL);
        const char *dirs[1] = {cases[c].dir};
        tm_symbolize_options o = {.symbol_dirs = dirs, .n_symbol_dirs = cases[c].dir ? 1 : 0,
                                  .no_system_paths = cases[c].dir != NULL};
        tu_membuf out = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
        tm_symbolize_stats st;
        tm_error err;
        cr_assert_eq(tm_symbolize(t.data, t.len, NULL, &o, &sink, &st, &err), TM_OK, "%s", err.message);
        cr_assert_eq(st.mappings_symbolized, 1, "case %zu: not found %llu", c,
                     (unsigned long long)st.mappings_not_found);
        cr_assert_eq(st.frames_with_lines, 1, "case %zu", c);
        /* the symbols are for the mapping as the trace names it */
        tm_db *db = NULL;
        cr_assert_eq(tm_db_new(out.data, out.len, NULL, &db, &err), TM_OK, "%s", err.message);
        char *lines = sql_lines(tm_db_sqlite(db), start);
        cr_assert(strncmp(lines, "work ", 5) == 0, "case %zu: %s", c, lines);
        free(lines);
        tm_db_free(db);
        tu_membuf_free(&out);
        tb_free(&t);
    }
}

/* A FIFO where libdwfl looks for a stripped file's DWARF (by build id, or
 * by its .gnu_debuglink name) is passed over, not opened (the open would
 * block for ever): the symbol table names the function. */
Test(symbolize, a_fifo_among_the_debug_files_is_not_opened, .timeout = 60) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O2", id);
    cr_assert_eq(sh("cd %s && mkdir -p fifo1/.build-id/%02x fifo2 && strip -g -o fifo1/inl inl && "
                    "mkfifo fifo1/.build-id/%s.debug && objcopy --only-keep-debug inl inl.debug && "
                    "strip -g -o fifo2/inl inl && objcopy --add-gnu-debuglink=inl.debug fifo2/inl && "
                    "mkfifo fifo2/inl.debug",
                    dir, id[0], build_id_path(id)),
                 0);
    uint8_t id2[64];
    cr_assert_eq(build_id_of("fifo2/inl", id2), id_len);
    cr_assert_eq(memcmp(id, id2, id_len), 0, "objcopy kept the build id");
    for (int k = 1; k <= 2; k++) {
        char syms[96];
        snprintf(syms, sizeof syms, "%s/fifo%d", dir, k);
        const char *dirs[1] = {syms};
        tu_membuf out = {0};
        tm_symbolize_stats st;
        symbolize_work_start("/opt/app/inl", id, id_len, dirs, 1, &out, &st);
        cr_assert_eq(st.mappings_symbolized, 1, "fifo%d", k);
        cr_assert_eq(st.frames_symbolized, 1, "fifo%d: named from the symbol table", k);
        cr_assert_eq(st.frames_with_lines, 0, "fifo%d", k);
        tu_membuf_free(&out);
    }
}

/* A debug file cut short (its build id note whole, its symbols and DWARF
 * gone) matches the build id but names nothing: a later candidate that
 * can, the binary itself, is taken instead. */
Test(symbolize, a_cut_debug_file_gives_way_to_a_whole_candidate) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O2", id);
    cr_assert_eq(sh("cd %s && mkdir -p cut/.build-id/%02x && objcopy --only-keep-debug inl inl.full.debug && "
                    "head -c 3000 inl.full.debug > cut/.build-id/%s.debug",
                    dir, id[0], build_id_path(id)),
                 0);
    char cut[96];
    snprintf(cut, sizeof cut, "%s/cut", dir);
    const char *dirs[2] = {cut, dir}; /* the cut file first, the binary by name after it */
    tu_membuf out = {0};
    tm_symbolize_stats st;
    symbolize_work_start("/nonexistent/inl", id, id_len, dirs, 2, &out, &st);
    cr_assert_eq(st.mappings_symbolized, 1);
    cr_assert_eq(st.frames_with_lines, 1, "the cut file was taken");
    tu_membuf_free(&out);
}

Test(symbolize, outcomes_are_counted_not_errors) {
    uint8_t id[64], other[64];
    size_t id_len = build("inl", "-O2", id);
    build("plain", "-O0", other);
    cr_assert_eq(sh("cd %s && mkdir -p wrong empty && cp plain wrong/inl", dir), 0);
    uint64_t pcs[2] = {0x1000, 0x1010};
    char wrong[96], empty[96];
    snprintf(wrong, sizeof wrong, "%s/wrong", dir);
    snprintf(empty, sizeof empty, "%s/empty", dir);
    struct {
        const char *dir;
        size_t id_len;
        uint64_t mismatch, not_found, no_id;
    } cases[] = {{wrong, id_len, 1, 0, 0}, {empty, id_len, 0, 1, 0}, {empty, 0, 0, 0, 1}};
    for (size_t c = 0; c < 3; c++) {
        tb_buf t = {0};
        trace_of(&t, "/opt/app/inl", id, cases[c].id_len, pcs, 2, NULL);
        const char *dirs[1] = {cases[c].dir};
        tu_membuf out = {0};
        tm_symbolize_stats st;
        symbolize(&t, dirs, 1, NULL, 0, &out, &st);
        cr_assert_eq(st.mappings, 1);
        cr_assert_eq(st.mappings_symbolized, 0);
        cr_assert_eq(st.mappings_build_id_mismatch, cases[c].mismatch, "case %zu", c);
        cr_assert_eq(st.mappings_not_found, cases[c].not_found, "case %zu", c);
        cr_assert_eq(st.mappings_no_build_id, cases[c].no_id, "case %zu", c);
        /* nothing appended: the output is the input */
        cr_assert_eq(out.len, t.len);
        cr_assert_eq(memcmp(out.data, t.data, t.len), 0);
        tu_membuf_free(&out);
        tb_free(&t);
    }
}

/* A program without DWARF: a C function under a C++ name (asm label), a
 * call through the PLT, an exported function, and a function symbol with
 * no size followed by bytes no symbol covers. */
static const char nodwarf_src[] =
    "#include <stdio.h>\n"
    "__attribute__((noinline)) int cxx_work(int n) __asm__(\"_ZN2ns4workEi\");\n"
    "__attribute__((noinline)) int cxx_work(int n) { return puts(\"x\") + n; }\n"
    "__attribute__((noinline)) int exported_fn(int n) { return cxx_work(n) * 3; }\n"
    "__asm__(\".text\\n.globl sizeless\\n.type sizeless,@function\\nsizeless:\\n ret\\n"
    " nop\\n nop\\n nop\\n nop\\n nop\\n nop\\n nop\\n nop\\n\");\n"
    "int main(int argc, char **argv) { (void)argv; return exported_fn(argc); }\n";

/* What tm_symbolize names pc of a mapping /nonexistent/NAME as, its file
 * found in symbol directory in ("" when nothing). */
static char *name_at(const char *in, const char *name, const uint8_t *id, size_t id_len, uint64_t pc,
                     int no_demangle) {
    tb_buf t = {0};
    char path[128];
    snprintf(path, sizeof path, "/nonexistent/%s", name);
    trace_of(&t, path, id, id_len, &pc, 1, NULL);
    const char *dirs[1] = {in};
    tm_symbolize_options o = {.symbol_dirs = dirs, .n_symbol_dirs = 1, .no_system_paths = 1,
                              .no_demangle = no_demangle};
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    cr_assert_eq(tm_symbolize(t.data, t.len, NULL, &o, &sink, NULL, &err), TM_OK, "%s", err.message);
    tm_db *db = NULL;
    cr_assert_eq(tm_db_new(out.data, out.len, NULL, &db, &err), TM_OK, "%s", err.message);
    char *got = sql_lines(tm_db_sqlite(db), pc);
    tm_db_free(db);
    tu_membuf_free(&out);
    tb_free(&t);
    return got;
}

static size_t build_id_of(const char *name, uint8_t id[64]) {
    char *hex = capture("readelf -n %s/%s | sed -n 's/.*Build ID: *//p'", dir, name);
    size_t n = 0;
    unsigned v;
    for (char *p = hex; p[0] && p[1] && p[0] != '\n' && n < 64 && sscanf(p, "%2x", &v) == 1; p += 2) id[n++] = (uint8_t)v;
    free(hex);
    cr_assert_eq(n, 20, "build id of %s", name);
    return n;
}

/* Without DWARF the symbol tables name frames, as the recorder named them:
 * C++ names demangled unless no_demangle, PLT stubs "function@plt", a
 * symbol without a size only at its own address, .dynsym in a stripped
 * file. */
Test(symbolize, names_from_symbol_tables_without_dwarf) {
    write_source("nodwarf.c", nodwarf_src);
    cr_assert_eq(sh("cd %s && cc -O1 -rdynamic -Wl,--build-id=sha1 -o nodwarf nodwarf.c && "
                    "strip -o stripped nodwarf",
                    dir),
                 0);
    uint8_t id[64];
    size_t id_len = build_id_of("nodwarf", id);
    uint64_t cxx, cxx_end, sizeless, exported, exported_end;
    symbol_range("nodwarf", "_ZN2ns4workEi", &cxx, &cxx_end);
    symbol_range("nodwarf", "exported_fn", &exported, &exported_end);
    char *out = capture("nm --defined-only %s/nodwarf | awk '$3 == \"sizeless\" {print $1}'", dir);
    unsigned long long a = 0;
    cr_assert_eq(sscanf(out, "%llx", &a), 1, "nm sizeless: %s", out);
    free(out);
    sizeless = a;
    out = capture("objdump -d %s/nodwarf | sed -n 's/^\\([0-9a-f]*\\) <puts@plt>:$/\\1/p'", dir);
    cr_assert_eq(sscanf(out, "%llx", &a), 1, "no puts@plt stub in objdump -d: %s", out);
    free(out);
    uint64_t plt = a;

    char *got = name_at(dir, "nodwarf", id, id_len, cxx + 1, 0);
    cr_expect_str_eq(got, "ns::work(int) ??:0");
    free(got);
    got = name_at(dir, "nodwarf", id, id_len, cxx + 1, 1);
    cr_expect_str_eq(got, "_ZN2ns4workEi ??:0", "no_demangle keeps the symbol");
    free(got);
    got = name_at(dir, "nodwarf", id, id_len, plt + 4, 0);
    cr_expect_str_eq(got, "puts@plt ??:0");
    free(got);
    got = name_at(dir, "nodwarf", id, id_len, sizeless, 0);
    cr_expect_str_eq(got, "sizeless ??:0");
    free(got);
    got = name_at(dir, "nodwarf", id, id_len, sizeless + 3, 0);
    cr_expect_str_eq(got, "", "a symbol without a size is not stretched over what follows it");
    free(got);
    /* stripped: .symtab is gone, the exported function is in .dynsym */
    cr_assert_eq(sh("cd %s && mkdir -p s && cp stripped s/nodwarf", dir), 0);
    char stripped[96];
    snprintf(stripped, sizeof stripped, "%s/s", dir);
    got = name_at(stripped, "nodwarf", id, id_len, exported + 1, 0);
    cr_expect_str_eq(got, "exported_fn ??:0", "named from .dynsym of a stripped file");
    free(got);
}

/* main with a cold part (the abort), at -O2: its line table's last
 * sequence ends with a zero-length row just before crt1.o's _start, which
 * has no DWARF; libdw still finds that row for every pc of _start. */
static const char cold_src[] =
    "#include <stdio.h>\n"
    "#include <stdlib.h>\n"
    "__attribute__((noinline)) unsigned work(unsigned n, unsigned seed) {\n"
    "    unsigned h = seed;\n"
    "    for (unsigned i = 0; i < n; i++) h = h * 2654435761u ^ (h >> 13) ^ i;\n"
    "    return h;\n"
    "}\n"
    "int main(int argc, char **argv) {\n"
    "    unsigned v = work(argc > 1 ? (unsigned)atoi(argv[1]) : 10u, (unsigned)argc);\n"
    "    if (argc > 2 && atoi(argv[2]) == -1) abort();\n"
    "    printf(\"%u\\n\", v);\n"
    "    return argc > 3 ? atoi(argv[3]) : 0;\n"
    "}\n";

/* A pc that no compilation unit covers (crt1.o's _start) is named by its
 * symbol with no file or line, as addr2line has it, while the program's
 * own functions keep theirs. */
Test(symbolize, pcs_outside_every_compilation_unit_have_no_line) {
    write_source("cold.c", cold_src);
    cr_assert_eq(sh("cd %s && cc -O2 -g -Wl,--build-id=sha1 -o cold cold.c", dir), 0);
    uint8_t id[64];
    size_t id_len = build_id_of("cold", id);
    uint64_t start, end, work, work_end;
    symbol_range("cold", "_start", &start, &end);
    symbol_range("cold", "work", &work, &work_end);
    cr_assert_gt(end, start);
    for (uint64_t pc = start; pc < end; pc++) {
        char *got = name_at(dir, "cold", id, id_len, pc, 0);
        cr_expect_str_eq(got, "_start ??:0", "pc 0x%llx", (unsigned long long)pc);
        free(got);
    }
    char *got = name_at(dir, "cold", id, id_len, work + 1, 0);
    cr_expect(strstr(got, "work ") == got && strstr(got, "/cold.c:"), "work + 1: %s", got);
    free(got);
}

/* The symbols in the profile model: folded shows the inline chain
 * (root first), pprof one location with two lines. */
Test(symbolize, profile_model_and_exporters) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O2", id);
    uint64_t start, end;
    symbol_range("inl", "work", &start, &end);
    /* a pc inside the inlined loop: the first whose lines are mix|work */
    uint64_t pc = 0;
    for (uint64_t a = start; a < end && !pc; a++) {
        char *l = addr2line("inl", a);
        if (strncmp(l, "mix ", 4) == 0 && strstr(l, "|work ")) pc = a;
        free(l);
    }
    cr_assert(pc, "no inlined pc in work");
    tb_buf t = {0};
    trace_of(&t, "/nonexistent/inl", id, id_len, &pc, 1, NULL);
    const char *dirs[1] = {dir};
    tu_membuf out = {0};
    tm_symbolize_stats st;
    symbolize(&t, dirs, 1, NULL, 0, &out, &st);
    cr_assert_eq(st.inlined_frames, 1);
    tm_trace *tr = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(out.data, out.len, NULL, &tr, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_trace_frame_count(tr), 2);
    /* by default folded, SVG and tm_trace_frame_label say "function (file:line)" */
    tu_membuf folded = {0};
    tm_sink fs = {.write = tu_membuf_write, .ctx = &folded};
    cr_assert_eq(tm_write_folded(tr, NULL, &fs, &err), TM_OK);
    char want[256], mix_label[128];
    snprintf(want, sizeof want, "work (%s/prog.c:9);mix (%s/prog.c:4) 1\n", dir, dir);
    cr_assert_str_eq(folded.data, want);
    snprintf(mix_label, sizeof mix_label, "mix (%s/prog.c:4)", dir);
    char label[128];
    size_t label_len;
    bool seen = false;
    for (size_t i = 0; i < 2; i++) {
        cr_assert_eq(tm_trace_frame_label(tr, i, label, sizeof label, &label_len), TM_OK);
        seen |= strcmp(label, mix_label) == 0;
    }
    cr_assert(seen, "tm_trace_frame_label names %s", mix_label);
    tu_membuf svg = {0};
    tm_sink ss = {.write = tu_membuf_write, .ctx = &svg};
    cr_assert_eq(tm_write_flamegraph(tr, NULL, &ss, &err), TM_OK);
    cr_assert(memmem(svg.data, svg.len, mix_label, strlen(mix_label)), "the SVG names %s", mix_label);
    tu_membuf_free(&svg);
    /* pprof and speedscope keep lines in fields of their own: names are bare */
    tu_membuf sp = {0};
    tm_sink sps = {.write = tu_membuf_write, .ctx = &sp};
    cr_assert_eq(tm_write_speedscope(tr, NULL, &sps, &err), TM_OK);
    cr_assert(strstr(sp.data, "\"name\":\"mix\""), "%s", sp.data);
    cr_assert_null(strstr(sp.data, "mix ("));
    tu_membuf_free(&sp);
    /* no_source_lines (--no-lines): by function, lines merged */
    tm_options merged_opts = {.no_source_lines = 1};
    tm_trace *tl = NULL;
    cr_assert_eq(tm_trace_parse(out.data, out.len, &merged_opts, &tl, &err), TM_OK, "%s", err.message);
    tu_membuf fl = {0};
    tm_sink fls = {.write = tu_membuf_write, .ctx = &fl};
    cr_assert_eq(tm_write_folded(tl, NULL, &fls, &err), TM_OK);
    cr_assert_str_eq(fl.data, "work;mix 1\n");
    tu_membuf_free(&fl);
    tm_trace_free(tl);
    /* pprof: Location with Line{mix, 4} then Line{work, 9} */
    tu_membuf pp = {0};
    tm_sink ps = {.write = tu_membuf_write, .ctx = &pp};
    tm_pprof_options po = {.uncompressed = 1};
    cr_assert_eq(tm_write_pprof(tr, &po, &ps, &err), TM_OK);
    /* Line messages: 0x22 len { 0x08 fn 0x10 line } */
    const uint8_t line_mix[] = {0x22, 0x04, 0x08, 0x01, 0x10, 0x04}, line_work[] = {0x22, 0x04, 0x08, 0x02, 0x10, 0x09};
    cr_assert(memmem(pp.data, pp.len, line_mix, sizeof line_mix), "Line{mix:4}");
    cr_assert(memmem(pp.data, pp.len, line_work, sizeof line_work), "Line{work:9}");
    /* Mapping has_functions, has_filenames, has_line_numbers, has_inline_frames */
    const uint8_t has[] = {0x38, 0x01, 0x40, 0x01, 0x48, 0x01, 0x50, 0x01};
    cr_assert(memmem(pp.data, pp.len, has, sizeof has));
    cr_assert_null(memmem(pp.data, pp.len, "mix (", 5), "pprof function names carry no lines");
    tu_membuf_free(&pp);
    tu_membuf_free(&folded);
    tm_trace_free(tr);
    tu_membuf_free(&out);
    tb_free(&t);
}

/* A count of maps without the maps is refused, as in_app prefixes without
 * a list are: it read proguard_maps[0] through NULL (SIGSEGV). */
Test(symbolize, proguard_map_count_without_maps_is_refused) {
    tb_buf t = {0};
    const char *names[1] = {"a.a.a"};
    uint64_t pcs[1] = {1};
    trace_of(&t, "/data/app/base.odex", NULL, 0, pcs, 1, names);
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_symbolize_options o = {.no_system_paths = 1, .n_proguard_maps = 2};
    tm_error err;
    cr_expect_eq(tm_symbolize(t.data, t.len, NULL, &o, &sink, NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect_eq(err.code, TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "n_proguard_maps"), "%s", err.message);
    cr_expect_eq(out.len, 0);
    /* the same of the symbol directories: they were taken as none */
    tm_symbolize_options dirs = {.no_system_paths = 1, .n_symbol_dirs = 3};
    cr_expect_eq(tm_symbolize(t.data, t.len, NULL, &dirs, &sink, NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "n_symbol_dirs"), "%s", err.message);
    cr_expect_eq(out.len, 0);
    tu_membuf_free(&out);
    tb_free(&t);
}

/* Input of another format is named, as tm_db_new names it: it was
 * "not a Perfetto trace" (TM_ERR_MALFORMED), as if a trace were broken; a
 * format named in tm_options is taken as named. tm_limits_preset takes a
 * NULL out as nothing to fill. */
Test(symbolize, other_input_formats_are_named) {
    static const char folded[] = "main;work 3\n";
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    cr_expect_eq(tm_symbolize(folded, sizeof folded - 1, NULL, NULL, &sink, NULL, &err), TM_ERR_UNSUPPORTED);
    cr_expect_str_eq(err.message, "symbolize needs a Perfetto trace; this is folded input");
    tm_options as_perfetto = {.input = TM_INPUT_PERFETTO};
    cr_expect_eq(tm_symbolize(folded, sizeof folded - 1, &as_perfetto, NULL, &sink, NULL, &err), TM_ERR_MALFORMED);
    cr_expect_eq(out.len, 0);
    tm_limits_preset(TM_LIMITS_RELAY, NULL);
    tu_membuf_free(&out);
}

/* ProGuard/R8: obfuscated Java frames get their original names in SQL
 * (deobfuscated_name) and in the profile model, the same names. */
Test(symbolize, proguard_map_renames_java_frames) {
    size_t len;
    char *map = tu_read_file(TM_FIXTURES "/proguard/mapping.txt", &len);
    cr_assert(map);
    tm_proguard_map maps[1] = {{.package = NULL, .data = map, .len = len}};
    const char *names[4] = {"a.a.a", "a.a.b", "a.b.a", "x.y"};
    uint64_t pcs[4] = {1, 2, 3, 4};
    tb_buf t = {0};
    trace_of(&t, "/data/app/base.odex", NULL, 0, pcs, 4, names);
    tu_membuf out = {0};
    tm_symbolize_stats st;
    symbolize(&t, NULL, 0, maps, 1, &out, &st);
    cr_assert_eq(st.java_classes, 3);
    cr_assert_eq(st.java_methods, 9);
    cr_assert_eq(st.java_map_lines_skipped, 1); /* the fixture's "this line is not a member" */
    /* lines that are no map lines, before the first class and inside one, are
     * counted and skipped; the rest renames the same */
    tu_membuf damaged = {0};
    const char *class_line = strstr(map, "\ncom.example.Main -> a.a:\n");
    cr_assert_not_null(class_line);
    size_t class_end = (size_t)(class_line - map) + strlen("\ncom.example.Main -> a.a:\n");
    tu_membuf_write(&damaged, "not a mapping line\n", strlen("not a mapping line\n"));
    tu_membuf_write(&damaged, map, class_end);
    tu_membuf_write(&damaged, "    garbage\n    -> x\n", strlen("    garbage\n    -> x\n"));
    tu_membuf_write(&damaged, map + class_end, len - class_end);
    tm_proguard_map damaged_maps[1] = {{.package = NULL, .data = (const char *)damaged.data, .len = damaged.len}};
    tu_membuf out2 = {0};
    tm_symbolize_stats st2;
    symbolize(&t, NULL, 0, damaged_maps, 1, &out2, &st2);
    cr_assert_eq(st2.java_classes, 3);
    cr_assert_eq(st2.java_methods, 9);
    cr_assert_eq(st2.java_map_lines_skipped, 4);
    tu_membuf_free(&out2);
    tu_membuf_free(&damaged);
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(out.data, out.len, NULL, &db, &err), TM_OK, "%s", err.message);
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db),
                                    "select name, coalesce(deobfuscated_name, '-') from stack_profile_frame order by name",
                                    -1, &q, NULL),
                 SQLITE_OK);
    /* a.a.a: five entries without a line to choose by: every candidate, as Trace Processor */
    const char *want[4][2] = {{"a.a.a", "com.example.Main.bar | com.example.Main.foo | com.example.Main.test"},
                              {"a.a.b", "com.example.Main.compute"},
                              {"a.b.a", "com.example.Util.format"},
                              {"x.y", "-"}};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
        cr_assert_str_eq((const char *)sqlite3_column_text(q, 0), want[i][0]);
        cr_assert_str_eq((const char *)sqlite3_column_text(q, 1), want[i][1]);
    }
    sqlite3_finalize(q);
    tm_db_free(db);
    tm_trace *tr = NULL;
    cr_assert_eq(tm_trace_parse(out.data, out.len, NULL, &tr, &err), TM_OK, "%s", err.message);
    tu_membuf folded = {0};
    tm_sink fs = {.write = tu_membuf_write, .ctx = &folded};
    cr_assert_eq(tm_write_folded(tr, NULL, &fs, &err), TM_OK);
    cr_assert(strstr(folded.data, "com.example.Main.bar | com.example.Main.foo | com.example.Main.test 1\n"), "%s",
              folded.data);
    cr_assert(strstr(folded.data, "com.example.Main.compute 1\n"), "%s", folded.data);
    cr_assert(strstr(folded.data, "com.example.Util.format 1\n"), "%s", folded.data);
    cr_assert(strstr(folded.data, "x.y 1\n"), "%s", folded.data);
    tm_trace_free(tr);
    tu_membuf_free(&folded);
    tu_membuf_free(&out);
    tb_free(&t);
    free(map);
}

/* A class line that is not one (its ':' or its arrow lost) ends the class
 * before it: the members under it are skipped, not renamed as the previous
 * class's (a.a.a was "com.example.A.bar | com.example.A.foo", a.a.b
 * com.example.A.baz and a.c.a "com.example.C.quux | com.example.C.qux":
 * methods A and C never had). */
Test(symbolize, proguard_members_of_a_damaged_class_line_are_not_the_previous_class) {
    static const char map[] = "com.example.A -> a.a:\n"
                              "    void foo() -> a\n"
                              "com.example.B -> a.b\n"
                              "    void bar() -> a\n"
                              "    void baz() -> b\n"
                              "com.example.C -> a.c:\n"
                              "    void qux() -> a\n"
                              "com.example.D a.d:\n" /* its arrow lost */
                              "    void quux() -> a\n";
    const char *names[4] = {"a.a.a", "a.a.b", "a.b.a", "a.c.a"};
    tu_membuf out = {0};
    tm_symbolize_stats st;
    symbolize_java(map, sizeof map - 1, names, 4, &out, &st);
    cr_assert_eq(st.java_classes, 2);
    cr_assert_eq(st.java_methods, 2);
    cr_assert_eq(st.java_map_lines_skipped, 5);
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(out.data, out.len, NULL, &db, &err), TM_OK, "%s", err.message);
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db),
                                    "select name, coalesce(deobfuscated_name, '-') from stack_profile_frame order by name",
                                    -1, &q, NULL),
                 SQLITE_OK);
    const char *want[4][2] = {
        {"a.a.a", "com.example.A.foo"}, {"a.a.b", "-"}, {"a.b.a", "-"}, {"a.c.a", "com.example.C.qux"}};
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
        cr_assert_str_eq((const char *)sqlite3_column_text(q, 0), want[i][0]);
        cr_assert_str_eq((const char *)sqlite3_column_text(q, 1), want[i][1]);
    }
    sqlite3_finalize(q);
    tm_db_free(db);
    tu_membuf_free(&out);
}

/* Tabs separate as spaces do (a member line may be indented with one, and
 * so may its type be set off from its name), and a class's new name ends
 * before any blank ahead of its ':': the names were "void\tfoo" and "a.a "
 * (which no frame is called), the frames left obfuscated or misnamed. */
Test(symbolize, proguard_blanks_are_not_part_of_names) {
    static const char map[] = "com.example.Main -> a.a :\n"
                              "    void foo() -> a\n"
                              "com.example.Util -> a.b:\n"
                              "\t1:3:java.lang.String\tformat(int):10:12 -> a\n"
                              "\tint\tcount -> b\n";
    const char *names[2] = {"a.a.a", "a.b.a"};
    tu_membuf out = {0};
    tm_symbolize_stats st;
    symbolize_java(map, sizeof map - 1, names, 2, &out, &st);
    cr_assert_eq(st.java_classes, 2);
    cr_assert_eq(st.java_methods, 2);
    cr_assert_eq(st.java_map_lines_skipped, 0);
    tm_trace *tr = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(out.data, out.len, NULL, &tr, &err), TM_OK, "%s", err.message);
    tu_membuf folded = {0};
    tm_sink fs = {.write = tu_membuf_write, .ctx = &folded};
    cr_assert_eq(tm_write_folded(tr, NULL, &fs, &err), TM_OK);
    cr_assert(strstr(folded.data, "com.example.Main.foo 1\n"), "%s", folded.data);
    cr_assert_null(strstr(folded.data, "void"), "%s", folded.data);
    cr_assert(strstr(folded.data, "com.example.Util.format 1\n"), "%s", folded.data);
    tm_trace_free(tr);
    tu_membuf_free(&folded);
    tu_membuf_free(&out);
}

/* The CLI: symbolize writes a trace query and convert read symbolized;
 * convert --symbols does the same in memory. */
Test(symbolize, cli_end_to_end) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O2", id);
    uint64_t start, end;
    symbol_range("inl", "main", &start, &end);
    tb_buf t = {0};
    trace_of(&t, "/nonexistent/inl", id, id_len, &start, 1, NULL);
    char path[128];
    snprintf(path, sizeof path, "%s/in.pftrace", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(t.data, 1, t.len, f);
    fclose(f);
    cr_assert_eq(sh("%s symbolize --quiet --no-system-symbols --symbols %s -o %s/out.pftrace %s", TM_CLI, dir, dir, path),
                 0);
    char *rows = capture("%s query %s/out.pftrace 'select name, line_number, inlined from stack_profile_symbol'", TM_CLI,
                         dir);
    cr_assert_str_eq(rows, "name,line_number,inlined\nmain,12,0\n");
    free(rows);
    /* main starts at line 12 of prog.c: labels say so unless --no-lines */
    char want[256];
    snprintf(want, sizeof want, "main (%s/prog.c:12) 1\n", dir);
    char *folded = capture("%s convert -f folded %s/out.pftrace", TM_CLI, dir);
    cr_assert_str_eq(folded, want);
    free(folded);
    folded = capture("%s convert -f folded --no-lines %s/out.pftrace", TM_CLI, dir);
    cr_assert_str_eq(folded, "main 1\n");
    free(folded);
    folded = capture("%s convert -f folded --no-lines --lines %s/out.pftrace", TM_CLI, dir);
    cr_assert_str_eq(folded, want);
    free(folded);
    folded = capture("%s convert -f folded --no-lines --no-system-symbols --symbols %s %s", TM_CLI, dir, path);
    cr_assert_str_eq(folded, "main 1\n");
    free(folded);
    folded = capture("%s convert -f folded %s", TM_CLI, path);
    cr_assert_eq(strstr(folded, "main"), NULL, "unsymbolized: %s", folded);
    free(folded);
    char *svg = capture("%s diff --no-lines %s/out.pftrace %s/out.pftrace", TM_CLI, dir, dir);
    cr_assert(strstr(svg, ">main<"), "diff --no-lines names main");
    cr_assert_eq(strstr(svg, "prog.c:12"), NULL);
    free(svg);
    svg = capture("%s diff %s/out.pftrace %s/out.pftrace", TM_CLI, dir, dir);
    cr_assert(strstr(svg, "prog.c:12)"), "diff names main's line");
    free(svg);
    tb_free(&t);
}

/* R8's inline ranges in the profile model: an obfuscated frame whose line
 * (from ModuleSymbols) falls in several entries' range becomes those
 * methods, innermost last in folded order (Perfetto's own diff test trace),
 * each at the line Perfetto's expected output gives it. */
Test(symbolize, r8_inline_ranges_expand_java_frames) {
    size_t len;
    char *buf = tu_read_file(TM_FIXTURES "/perfetto-difftests/R8RetraceCompat__inline_positions/trace.pftrace", &len);
    cr_assert(buf);
    tm_trace *tr = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(buf, len, NULL, &tr, &err), TM_OK, "%s", err.message);
    tu_membuf folded = {0};
    tm_sink fs = {.write = tu_membuf_write, .ctx = &folded};
    tm_folded_options fo = {.value = TM_VALUE_ALLOC_SPACE};
    cr_assert_eq(tm_write_folded(tr, &fo, &fs, &err), TM_OK, "%s", err.message);
    cr_assert_str_eq(folded.data,
                     "com.example.Main.test (Main.java:50);com.example.Main.foo (Main.java:54) 1000\n"
                     "com.example.Main.test (Main.java:50);com.example.Main.foo (Main.java:55);"
                     "com.example.Main.bar (Main.java:59) 1000\n"
                     "com.example.Main.test (Main.java:50);com.example.Main.foo (Main.java:55);"
                     "com.example.Main.bar (Main.java:60);com.example.Main.baz (Main.java:64) 1000\n");
    tu_membuf_free(&folded);
    tm_trace_free(tr);
    free(buf);
}

/* What one symbolization with these options finds of a one-frame trace. */
static tm_symbolize_stats symbolize_with(const tb_buf *t, const tm_symbolize_options *o) {
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_symbolize_stats st;
    tm_error err;
    cr_assert_eq(tm_symbolize(t->data, t->len, NULL, o, &sink, &st, &err), TM_OK, "%s", err.message);
    tu_membuf_free(&out);
    return st;
}

/* A debuginfod client cache (DIR/<build id>/debuginfo or .../executable):
 * the one given, else $DEBUGINFOD_CACHE_PATH, else
 * $HOME/.cache/debuginfod_client; the mapping's own path does not exist, so
 * only the cache can name the frame. */
Test(symbolize, debuginfod_client_cache) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O0", id);
    char hex[130];
    for (size_t i = 0; i < id_len; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
    uint64_t start, end;
    symbol_range("inl", "work", &start, &end);
    tb_buf t = {0};
    trace_of(&t, "/nonexistent/inl", id, id_len, &start, 1, NULL);
    char cache[256], home_cache[256];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(home_cache, sizeof home_cache, "%s/home/.cache/debuginfod_client", dir);
    cr_assert_eq(sh("mkdir -p %s/%s %s/%s && cp %s/inl %s/%s/executable && cp %s/inl %s/%s/debuginfo", cache, hex,
                    home_cache, hex, dir, cache, hex, dir, home_cache, hex),
                 0);
    tm_symbolize_options o = {.no_system_paths = 1};
    tm_symbolize_stats st = symbolize_with(&t, &o);
    cr_assert_eq(st.mappings_not_found, 1, "without a cache nothing has the build id");
    o.debuginfod_cache = cache; /* its executable */
    st = symbolize_with(&t, &o);
    cr_assert_eq(st.mappings_symbolized, 1);
    cr_assert_eq(st.frames_with_lines, 1);
    cr_assert_eq(sh("mv %s/%s/executable %s/%s/debuginfo", cache, hex, cache, hex), 0);
    st = symbolize_with(&t, &o); /* its debuginfo */
    cr_assert_eq(st.mappings_symbolized, 1);
    /* defaults, only with system paths */
    tm_symbolize_options d = {0};
    setenv("HOME", "/nonexistent", 1);
    setenv("DEBUGINFOD_CACHE_PATH", cache, 1);
    st = symbolize_with(&t, &d);
    cr_assert_eq(st.mappings_symbolized, 1, "$DEBUGINFOD_CACHE_PATH");
    d.no_system_paths = 1;
    st = symbolize_with(&t, &d);
    cr_assert_eq(st.mappings_symbolized, 0, "no default cache without system paths");
    d.no_system_paths = 0;
    unsetenv("DEBUGINFOD_CACHE_PATH");
    char home[256];
    snprintf(home, sizeof home, "%s/home", dir);
    setenv("HOME", home, 1);
    st = symbolize_with(&t, &d);
    cr_assert_eq(st.mappings_symbolized, 1, "~/.cache/debuginfod_client");
    /* the CLI: symbolize, convert and query take --debuginfod-cache */
    char path[128];
    snprintf(path, sizeof path, "%s/in.pftrace", dir);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    fwrite(t.data, 1, t.len, f);
    fclose(f);
    setenv("HOME", "/nonexistent", 1);
    cr_assert_eq(sh("%s symbolize --quiet --no-system-symbols --debuginfod-cache %s -o %s/out.pftrace %s", TM_CLI,
                    cache, dir, path),
                 0);
    char *rows = capture("%s query %s/out.pftrace 'select name from stack_profile_symbol'", TM_CLI, dir);
    cr_assert_str_eq(rows, "name\nwork\n");
    free(rows);
    rows = capture("%s query --no-system-symbols --debuginfod-cache %s %s 'select name from stack_profile_symbol'",
                   TM_CLI, cache, path);
    cr_assert_str_eq(rows, "name\nwork\n");
    free(rows);
    char *folded = capture("%s convert -f folded --no-lines --no-system-symbols --debuginfod-cache %s %s", TM_CLI,
                           cache, path);
    cr_assert_str_eq(folded, "work 1\n");
    free(folded);
    tb_free(&t);
}

/* A stripped copy of the program (its .dynsym only, no debug file beside
 * it) in a symbol directory gives way to a later candidate with DWARF: the
 * debuginfod cache's debuginfo, or the mapping's own path whose
 * .gnu_debuglink names a debug file beside it. The copy came first and was
 * taken, .dynsym counting as a symbol table: no frame was named. */
Test(symbolize, a_stripped_copy_gives_way_to_a_candidate_with_dwarf) {
    uint8_t id[64];
    size_t id_len = build("inl", "-O2", id);
    char hex[130];
    for (size_t i = 0; i < id_len; i++) snprintf(hex + 2 * i, 3, "%02x", id[i]);
    cr_assert_eq(sh("cd %s && mkdir -p copy cache/%s app && objcopy --only-keep-debug inl cache/%s/debuginfo && "
                    "strip -o copy/inl inl && objcopy --only-keep-debug inl app/inl.debug && strip -o app/inl inl && "
                    "objcopy --add-gnu-debuglink=app/inl.debug app/inl",
                    dir, hex, hex),
                 0);
    uint8_t id2[64];
    cr_assert_eq(build_id_of("app/inl", id2), id_len);
    cr_assert_eq(memcmp(id, id2, id_len), 0, "objcopy kept the build id");
    uint64_t start, end;
    symbol_range("inl", "work", &start, &end);
    char copy[96], cache[96], app[96];
    snprintf(copy, sizeof copy, "%s/copy", dir);
    snprintf(cache, sizeof cache, "%s/cache", dir);
    snprintf(app, sizeof app, "%s/app/inl", dir);
    const char *dirs[1] = {copy};
    for (int k = 0; k < 2; k++) {
        tb_buf t = {0};
        trace_of(&t, k ? app : "/nonexistent/inl", id, id_len, &start, 1, NULL);
        /* k 0: the cache after the copy; k 1: the mapping's path after it (system paths on) */
        tm_symbolize_options o = {.symbol_dirs = dirs, .n_symbol_dirs = 1, .no_system_paths = !k,
                                  .debuginfod_cache = k ? NULL : cache};
        tm_symbolize_stats st = symbolize_with(&t, &o);
        cr_assert_eq(st.mappings_symbolized, 1, "case %d", k);
        cr_assert_eq(st.frames_symbolized, 1, "case %d: the stripped copy was taken", k);
        cr_assert_eq(st.frames_with_lines, 1, "case %d", k);
        tb_free(&t);
    }
    /* with nothing better the stripped copy is still the file found */
    tb_buf t = {0};
    trace_of(&t, "/nonexistent/inl", id, id_len, &start, 1, NULL);
    tm_symbolize_options o = {.symbol_dirs = dirs, .n_symbol_dirs = 1, .no_system_paths = 1};
    tm_symbolize_stats st = symbolize_with(&t, &o);
    cr_assert_eq(st.mappings_symbolized, 1);
    cr_assert_eq(st.mappings_not_found + st.mappings_build_id_mismatch, 0);
    tb_free(&t);
}

/* Rows of a query as "a|b|c\n" lines. */
static char *sql_rows(sqlite3 *db, const char *sql) {
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    tu_membuf out = {0};
    while (sqlite3_step(q) == SQLITE_ROW) {
        for (int c = 0; c < sqlite3_column_count(q); c++) {
            const char *v = (const char *)sqlite3_column_text(q, c);
            if (c) tu_membuf_write(&out, "|", 1);
            tu_membuf_write(&out, v ? v : "NULL", strlen(v ? v : "NULL"));
        }
        tu_membuf_write(&out, "\n", 1);
    }
    sqlite3_finalize(q);
    if (!out.data) tu_membuf_write(&out, "", 0);
    return out.data;
}

static void package_info(tb_buf *t, const char *name, uint64_t uid, int debuggable, int profileable, uint64_t version) {
    size_t p = tb_open(t, TM_PF_PACKAGES_LIST_PACKAGES);
    tb_str(t, TM_PF_PACKAGE_INFO_NAME, name);
    tb_uint(t, TM_PF_PACKAGE_INFO_UID, uid);
    if (debuggable) tb_uint(t, TM_PF_PACKAGE_INFO_DEBUGGABLE, 1);
    if (profileable) tb_uint(t, TM_PF_PACKAGE_INFO_PROFILEABLE_FROM_SHELL, 1);
    if (version) tb_uint(t, TM_PF_PACKAGE_INFO_VERSION_CODE, version);
    tb_close(t, p);
}

/* PackagesList becomes Trace Processor's package_list table: each name
 * once (the first list's row), its flags and version; the last list's
 * read_error and parse_error are stats. */
Test(packages, package_list_table_and_stats) {
    tb_buf t = {0};
    tb_standard_clocks(&t, 1);
    size_t pkt = tb_packet_open(&t, 2, TB_NO_TS, 0);
    size_t pl = tb_open(&t, TM_PF_PACKET_PACKAGES_LIST);
    package_info(&t, "com.example.a", 10050, 1, 1, 7);
    package_info(&t, "com.example.b", 10051, 0, 0, 0);
    tb_close(&t, pl);
    tb_close(&t, pkt);
    pkt = tb_packet_open(&t, 2, TB_NO_TS, 0);
    pl = tb_open(&t, TM_PF_PACKET_PACKAGES_LIST);
    package_info(&t, "com.example.a", 999, 0, 0, 1); /* listed already: skipped */
    package_info(&t, "com.example.c", 10052, 0, 1, 3);
    tb_uint(&t, TM_PF_PACKAGES_LIST_READ_ERROR, 1);
    tb_close(&t, pl);
    tb_close(&t, pkt);
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(t.data, t.len, NULL, &db, &err), TM_OK, "%s", err.message);
    char *rows = sql_rows(tm_db_sqlite(db), "select * from package_list order by id");
    cr_assert_str_eq(rows, "0|com.example.a|10050|1|1|7\n1|com.example.b|10051|0|0|0\n2|com.example.c|10052|0|1|3\n");
    free(rows);
    rows = sql_rows(tm_db_sqlite(db), "select name, value from stats where name like 'packages_list%' order by name");
    cr_assert_str_eq(rows, "packages_list_has_parse_errors|0\npackages_list_has_read_errors|1\n");
    free(rows);
    tm_db_free(db);
    tb_free(&t);
}

/* Perfetto's profile_deobfuscation_default_package: the obfuscated frames
 * of two system .apk mappings (their paths name no app) take the maps of
 * the app whose process ran them, by uid in PackagesList: classtwo/classone
 * for the heap samples of com.google.android.prebuilt1, classfour/classthree
 * for the CPU sample of prebuilt2 (Perfetto's expected output), in SQL and
 * in the profile model alike. */
Test(packages, default_package_of_unnamed_mappings) {
    size_t len;
    char *buf = tu_read_file(
        TM_FIXTURES "/perfetto-difftests/Deobfuscation__profile_deobfuscation_default_package/trace.pftrace", &len);
    cr_assert(buf);
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(buf, len, NULL, &db, &err), TM_OK, "%s", err.message);
    char *rows = sql_rows(tm_db_sqlite(db), "select f.name, f.deobfuscated_name, m.name from stack_profile_frame f "
                                            "join stack_profile_mapping m on f.mapping = m.id order by f.id");
    cr_assert_str_eq(rows, "hye.a|com.google.classone.foo|/system/priv-app/Prebuilt1/Prebuilt1.apk\n"
                           "hwe.a|com.google.classtwo.foo|/system/priv-app/Prebuilt1/Prebuilt1.apk\n"
                           "hwe.a|com.google.classfour.foo|/system/priv-app/Prebuilt2/Prebuilt2.apk\n"
                           "hye.a|com.google.classthree.foo|/system/priv-app/Prebuilt2/Prebuilt2.apk\n");
    free(rows);
    tm_db_free(db);
    tm_trace *tr = NULL;
    cr_assert_eq(tm_trace_parse(buf, len, NULL, &tr, &err), TM_OK, "%s", err.message);
    static const struct {
        tm_value value;
        const char *want;
    } cases[] = {{TM_VALUE_SAMPLES, "com.google.classfour.foo;com.google.classthree.foo 1\n"},
                 {TM_VALUE_ALLOC_SPACE, "com.google.classone.foo;com.google.classtwo.foo 32768\n"}};
    for (size_t i = 0; i < 2; i++) {
        tu_membuf folded = {0};
        tm_sink fs = {.write = tu_membuf_write, .ctx = &folded};
        tm_folded_options fo = {.value = cases[i].value};
        cr_assert_eq(tm_write_folded(tr, &fo, &fs, &err), TM_OK, "%s", err.message);
        cr_assert_str_eq(folded.data, cases[i].want);
        tu_membuf_free(&folded);
    }
    tm_trace_free(tr);
    free(buf);
}
