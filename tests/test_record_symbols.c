/*
 * test_record_symbols.c — `tracemill record` symbolizes the trace it
 * writes, with both backends: record_symbols_target (gcc -O2 -g, its hot
 * loop churn_step inlined into churn_outer) recorded by default gets
 * frames with source file and line and the inlined frame, in the folded
 * stacks, in pprof (one Location with a Line per function, has_inline_frames)
 * and in the SQL model's stack_profile_symbol; recorded with
 * --no-symbolize its frames are build ids and pcs (no names, no
 * ModuleSymbols), and `tracemill symbolize` on that trace gives what record
 * gives: the same lines for every pc both traces hold, also on a trace cut
 * off inside its last packet. JIT frames named from /tmp/perf-PID.map keep
 * their names, with or without --no-symbolize. With --chunk-seconds each
 * chunk is symbolized as soon as it is closed, while the program runs.
 *
 * The perf half is skipped, with the reason, when this kernel refuses
 * perf_event_open. Paths come from the build: TM_CLI,
 * TM_RECORD_SYMBOLS_TARGET, TM_RECORD_PERF_TARGET (its jit mode), TM_PPROF_TEXT.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

static void setup(void) {
    cr_assert_not_null(tu_test_dir_make("tm_record_symbols"));
    tu_asan_recorded_child_env();
}

static void teardown(void) { cr_assert_eq(tu_test_dir_remove(), 0); }

TestSuite(record_symbols, .init = setup, .fini = teardown, .timeout = 120);

static char *in_dir(const char *name) { return tu_test_path(name); }

/* Runs a shell command line; asserts it exits 0 and returns its stderr. */
static char *run(const char *line) {
    char *err = in_dir("stderr"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s 2>%s", line, err), 0);
    int st = system(cmd);
    char *text = tu_read_file(err, NULL);
    cr_assert_not_null(text);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed:\n%s", line, text);
    free(cmd), free(err);
    return text;
}

/* Records the target (1 CPU second) with backend and opts into DIR/name. */
static char *record(const char *backend, const char *opts, const char *name) {
    char *trace = in_dir(name), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s record --backend %s -F 101 -o %s %s -- %s 1", TM_CLI, backend, trace, opts,
                          TM_RECORD_SYMBOLS_TARGET),
                 0);
    free(run(cmd));
    free(cmd);
    return trace;
}

/* The output of `tracemill convert -f FORMAT trace`, through pprof_text for pprof. */
static char *convert(const char *trace, const char *format) {
    char *out = in_dir("converted"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s convert -f %s%s %s -o %s", TM_CLI, format,
                          strcmp(format, "pprof") == 0 ? " --uncompressed" : "", trace, out),
                 0);
    free(run(cmd));
    free(cmd);
    char *path = out;
    if (strcmp(format, "pprof") == 0) {
        path = in_dir("pprof.txt");
        cr_assert_gt(asprintf(&cmd, "%s %s > %s", TM_PPROF_TEXT, out, path), 0);
        free(run(cmd));
        free(cmd);
        free(out);
    }
    char *text = tu_read_file(path, NULL);
    cr_assert_not_null(text);
    free(path);
    return text;
}

/* ^ matches at the start of every line: a folded stack is one line. */
static int matches(const char *text, const char *pattern) {
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB | REG_NEWLINE), 0, "bad pattern %s", pattern);
    int hit = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return hit;
}

/* The id of pprof_text's function{id=N name="name"...}. */
static void function_id(const char *pprof, const char *name, char *id, size_t cap) {
    char key[96];
    snprintf(key, sizeof key, " name=\"%s\"", name);
    const char *at = strstr(pprof, key);
    cr_assert_not_null(at, "pprof has no function %s", name);
    const char *start = at;
    while (start > pprof && strncmp(start, "function{id=", 12) != 0) start--;
    cr_assert(start < at && strncmp(start, "function{id=", 12) == 0);
    snprintf(id, cap, "%.*s", (int)(at - start - 12), start + 12);
}

#define SRC "[^;()]*record_symbols_target\\.c:[0-9]+"

/* The inlined loop under its caller, both with file and line, in the
 * folded stacks; in pprof one Location holding churn_step's Line then
 * churn_outer's, and the target's mapping marked as having inline frames. */
static void expect_symbolized_as(const char *trace, const char *mapping) {
    char *folded = convert(trace, "folded");
    cr_assert(matches(folded, "(^|;)churn_outer \\(" SRC "\\);churn_step \\(" SRC "\\)( |;)"),
              "no inlined frame with file and line in:\n%.2000s", folded);
    cr_assert(matches(folded, "(^|;)main \\(" SRC "\\);churn_outer "), "main has no file and line:\n%.2000s", folded);
    free(folded);
    char *pprof = convert(trace, "pprof");
    char step[32], outer[32];
    function_id(pprof, "churn_step", step, sizeof step);
    function_id(pprof, "churn_outer", outer, sizeof outer);
    char pattern[256];
    snprintf(pattern, sizeof pattern, "line\\{function_id=%s line=[0-9]+\\} line\\{function_id=%s line=[0-9]+\\}", step,
             outer);
    cr_assert(matches(pprof, pattern), "no Location with the inline chain (%s):\n%.3000s", pattern, pprof);
    char mapping_re[160];
    snprintf(mapping_re, sizeof mapping_re, "%s\"#[0-9]+ build_id=[^}]*has_line_numbers=1 has_inline_frames=1",
             mapping);
    cr_assert(matches(pprof, mapping_re), "the mapping does not say it has inline frames:\n%.3000s", pprof);
    free(pprof);
}

static void expect_symbolized(const char *trace) {
    expect_symbolized_as(trace, "record_symbols_target");
}

/* One row per pc of the target with a symbol: "rel_pc name@file:line|...",
 * innermost first; *n rows. */
static char **symbol_rows(const char *trace, size_t *n) {
    size_t len = 0;
    char *bytes = tu_read_file(trace, &len);
    cr_assert_not_null(bytes);
    tm_db *db = NULL;
    tm_error e;
    cr_assert_eq(tm_db_new(bytes, len, NULL, &db, &e), TM_OK, "%s", e.message);
    static const char sql[] =
        "select f.rel_pc || ' ' || (select group_concat(x, '|') from (select s.name || '@' || "
        "ifnull(s.source_file, '') || ':' || ifnull(s.line_number, 0) as x from stack_profile_symbol s "
        "where s.symbol_set_id = f.symbol_set_id order by s.id)) from stack_profile_frame f "
        "join stack_profile_mapping m on m.id = f.mapping "
        "where m.name like '%record_symbols_target' and f.symbol_set_id is not null order by f.rel_pc";
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db), sql, -1, &q, NULL), SQLITE_OK, "%s",
                 sqlite3_errmsg(tm_db_sqlite(db)));
    char **rows = NULL;
    *n = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        rows = realloc(rows, (*n + 1) * sizeof *rows);
        cr_assert_not_null(rows);
        rows[(*n)++] = strdup((const char *)sqlite3_column_text(q, 0));
    }
    sqlite3_finalize(q);
    tm_db_free(db);
    free(bytes);
    return rows;
}

static void free_rows(char **rows, size_t n) {
    for (size_t i = 0; i < n; i++) free(rows[i]);
    free(rows);
}

static void expect_record_symbolizes(const char *backend) {
    char *full = record(backend, "", "full.pftrace");
    expect_symbolized(full);

    char *bare = record(backend, "--no-symbolize", "bare.pftrace");
    char *folded = convert(bare, "folded");
    /* the recorder names no frame of a file with a build id: module and pc only */
    cr_assert(!matches(folded, "churn_outer"), "named at record time:\n%.2000s", folded);
    cr_assert(matches(folded, "0x[0-9a-f]+ \\(record_symbols_target\\)"), "no module+pc frame:\n%.2000s", folded);
    cr_assert(!matches(folded, "record_symbols_target\\.c"), "--no-symbolize gave lines:\n%.2000s", folded);
    free(folded);
    size_t n_bare = 0;
    free_rows(symbol_rows(bare, &n_bare), n_bare);
    cr_assert_eq(n_bare, 0, "--no-symbolize wrote %zu symbols", n_bare);

    /* tracemill symbolize later gives what record gives */
    char *later = in_dir("later.pftrace"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s symbolize %s -o %s", TM_CLI, bare, later), 0);
    free(run(cmd));
    free(cmd);
    expect_symbolized(later);
    size_t n_full = 0, n_later = 0, common = 0;
    char **a = symbol_rows(full, &n_full), **b = symbol_rows(later, &n_later);
    cr_assert_gt(n_full, 0);
    for (size_t i = 0; i < n_full; i++)
        for (size_t j = 0; j < n_later; j++) {
            size_t pc = strcspn(a[i], " ");
            if (strncmp(a[i], b[j], pc + 1) != 0) continue;
            common++;
            cr_expect_str_eq(a[i], b[j], "record and symbolize differ at the same pc");
        }
    cr_assert_gt(common, 0, "the two recordings share no pc of the target");
    free_rows(a, n_full);
    free_rows(b, n_later);

    /* a trace cut inside its last packet (a program killed mid-write):
     * the symbols follow its last whole packet and the result reads */
    size_t len = 0;
    char *bytes = tu_read_file(bare, &len);
    cr_assert_not_null(bytes);
    char *cut = in_dir("cut.pftrace");
    FILE *f = fopen(cut, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(bytes, 1, len - 3, f), len - 3);
    cr_assert_eq(fclose(f), 0);
    cr_assert_gt(asprintf(&cmd, "%s symbolize %s -o %s", TM_CLI, cut, later), 0);
    free(run(cmd));
    free(cmd);
    expect_symbolized(later);
    free(bytes), free(cut);
    free(full), free(bare), free(later);
}

Test(record_symbols, signal_backend) {
    expect_record_symbolizes("signal");
}

/* The recorded program's file replaced while it runs (a rebuild, here by
 * the program itself as it starts): record still names its frames from the
 * file that ran, which it holds open, not from the new file at the path
 * (whose build id differs: before, every frame of the program stayed
 * 0x1234 (record_symbols_target), "build id mismatch 1"). The perf backend,
 * which learns of the mapping after the rename, reads the file through
 * /proc/PID/map_files to unwind (before, it read the new file: stacks of
 * one frame, wrong build id). */
static void expect_rebuilt_program_named(const char *backend) {
    char *copy = in_dir("record_symbols_target"), *other = in_dir("other"), *trace = in_dir("rebuilt.pftrace"),
         *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "cp %s %s && cp %s %s", TM_RECORD_SYMBOLS_TARGET, copy, TM_RECORD_PERF_TARGET, other),
                 0);
    free(run(cmd));
    free(cmd);
    cr_assert_gt(asprintf(&cmd, "%s record --backend %s -F 101 -o %s -- %s 1 replace-self %s", TM_CLI, backend, trace,
                          copy, other),
                 0);
    char *said = run(cmd);
    cr_expect(access(other, F_OK) != 0, "the program did not replace itself");
    /* the mapping named as /proc/PID/maps names it once replaced, or as before */
    expect_symbolized_as(trace, "record_symbols_target( \\(deleted\\))?");
    free(said), free(cmd), free(trace), free(other), free(copy);
}

Test(record_symbols, a_rebuilt_program_keeps_its_names) {
    expect_rebuilt_program_named("signal");
}

Test(record_symbols, a_rebuilt_program_keeps_its_names_perf) {
    char why[128];
    if (!tu_perf_available(why, sizeof why)) cr_skip_test("%s", why);
    /* map_files opens for CAP_CHECKPOINT_RESTORE (or CAP_SYS_ADMIN) only */
    FILE *maps = fopen("/proc/self/maps", "r");
    unsigned long long start = 0, end = 0;
    cr_assert(maps && fscanf(maps, "%llx-%llx", &start, &end) == 2);
    fclose(maps);
    char mf[96];
    snprintf(mf, sizeof mf, "/proc/self/map_files/%llx-%llx", start, end);
    int fd = open(mf, O_RDONLY);
    if (fd < 0) cr_skip_test("%s cannot be opened here: %s", mf, strerror(errno));
    close(fd);
    expect_rebuilt_program_named("perf");
}

Test(record_symbols, perf_backend) {
    char why[128];
    if (!tu_perf_available(why, sizeof why)) cr_skip_test("%s", why);
    expect_record_symbolizes("perf");
}

/* Code generated at run time and named in /tmp/perf-PID.map (no build id,
 * nothing to symbolize) keeps its name in the symbolized trace. */
Test(record_symbols, jit_frames_keep_their_names) {
    const char *opts[] = {"", "--no-symbolize"};
    for (size_t k = 0; k < 2; k++) {
        char *trace = in_dir("jit.pftrace"), *out = in_dir("jit.out"), *cmd = NULL;
        cr_assert_gt(asprintf(&cmd, "%s record --backend signal %s -o %s -- %s jit 0.5 >%s", TM_CLI, opts[k], trace,
                              TM_RECORD_PERF_TARGET, out),
                     0);
        free(run(cmd));
        free(cmd);
        char *printed = tu_read_file(out, NULL);
        int pid = 0;
        if (printed && sscanf(printed, "jit %d", &pid) == 1) {
            char map[64];
            snprintf(map, sizeof map, "/tmp/perf-%d.map", pid);
            unlink(map);
        }
        char *folded = convert(trace, "folded");
        cr_assert(matches(folded, "(^|;)tmtest_jitted_loop [0-9]+"), "%s: the JIT frame lost its name:\n%.2000s",
                  opts[k], folded);
        free(folded), free(printed), free(out), free(trace);
    }
}

static double mtime_of(const char *path) {
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0, "%s: %s", path, strerror(errno));
    return (double)sb.st_mtim.tv_sec + (double)sb.st_mtim.tv_nsec * 1e-9;
}

/* With --chunk-seconds each chunk is symbolized as soon as the recorder
 * closes it, while the program runs on: the first chunk's symbolized file
 * is written seconds before the last chunk is closed (symbolized at the
 * end, every chunk would be written after it), and every chunk has its
 * inlined frames with files and lines. */
Test(record_symbols, chunks_symbolized_as_they_close) {
    char *base = in_dir("c.pftrace"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s record --backend signal -F 101 --chunk-seconds 1 -o %s -- %s 3.5", TM_CLI, base,
                          TM_RECORD_SYMBOLS_TARGET),
                 0);
    char *err = run(cmd);
    free(cmd);
    size_t reports = 0;
    for (const char *p = err; (p = strstr(p, "tracemill record: symbolized ")) != NULL; p++) reports++;
    unsigned n = 0;
    for (;; n++) {
        char name[32];
        snprintf(name, sizeof name, "c.%u.pftrace", n);
        char *path = in_dir(name);
        int there = access(path, R_OK) == 0;
        free(path);
        if (!there) break;
    }
    cr_assert_geq(n, 3, "%u chunks of a 3.5 s run:\n%s", n, err);
    cr_expect_eq(reports, n, "one symbolization per chunk:\n%s", err);
    char *first = in_dir("c.0.pftrace"), *last_name = NULL;
    cr_assert_gt(asprintf(&last_name, "c.%u.pftrace", n - 1), 0);
    char *last = in_dir(last_name);
    double ahead = mtime_of(last) - mtime_of(first);
    cr_expect_gt(ahead, 1.0, "chunk 0 was symbolized only %.2f s before the last chunk was done", ahead);
    for (unsigned k = 0; k + 1 < n; k++) { /* the last one may hold too few samples to tell */
        char name[32];
        snprintf(name, sizeof name, "c.%u.pftrace", k);
        char *path = in_dir(name);
        char *folded = convert(path, "folded");
        cr_expect(matches(folded, "(^|;)churn_outer \\(" SRC "\\);churn_step \\(" SRC "\\)( |;)"),
                  "%s: no inlined frame with file and line:\n%.2000s", name, folded);
        free(folded), free(path);
    }
    free(first), free(last), free(last_name), free(base), free(err);
}

/* A symbol option with --no-symbolize is a contradiction, said before anything runs. */
Test(record_symbols, no_symbolize_takes_no_symbol_options) {
    char *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s record --no-symbolize --symbols %s -o %s/x.pftrace -- true 2>/dev/null", TM_CLI,
                          tu_test_dir(), tu_test_dir()),
                 0);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit %d", WEXITSTATUS(st));
    free(cmd);
}
