/*
 * test_query.c — `tracemill query` and `tracemill export-sqlite` as a user
 * runs them: the built binary (TM_CLI) through the shell, stdout and stderr
 * captured.
 *
 * Covered: the exact text of every output format (perfetto, csv, json,
 * table) for literal values (NULL, integers, negative, doubles, a string
 * holding a quote, a comma and a newline, invalid UTF-8); several
 * statements and their separators, empty statements and comments; SQL
 * errors (exit 1, statement number, line:column, SQLite's message);
 * usage and I/O errors; -f files; SQL and dot-commands read from stdin;
 * export-sqlite read back with SQLite's C API; the sandbox (no ATTACH,
 * VACUUM INTO, pragma assignments or fts3_tokenizer), --timeout, Ctrl-C in
 * the shell on a pseudo-terminal. Results depend on literal SQL, never on
 * what the decoder fills the tables with.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tutil.h"

#define TRACE TM_FIXTURES "/perfetto-probes/p2_perf_sample/trace.pftrace"

/* ---- helpers ---- */

typedef struct run_result {
    int code; /* exit status; -1 if the command did not exit normally */
    char *out, *err;
} run_result;

static void run_free(run_result *r) {
    free(r->out);
    free(r->err);
}

static char *temp_file(const char *content) {
    char *path = strdup("/tmp/tm_query_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0, "mkstemp failed");
    size_t n = content ? strlen(content) : 0;
    cr_assert_eq(write(fd, content ? content : "", n), (ssize_t)n);
    close(fd);
    return path;
}

/* Runs `TM_CLI <args>` through /bin/sh with stdin from input (NULL:
 * /dev/null) and captures stdout and stderr. */
static run_result run_with_input(const char *input, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char *in = temp_file(input), *out = temp_file(NULL), *err = temp_file(NULL);
    /* stdin first, so that a redirection in args overrides it */
    snprintf(cmd, sizeof cmd, "%s <%s %s >%s 2>%s", TM_CLI, in, args, out, err);
    int st = system(cmd);
    run_result r;
    r.code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = tu_read_file(out, NULL);
    r.err = tu_read_file(err, NULL);
    cr_assert(r.out && r.err, "cannot read the captured output");
    remove(in), remove(out), remove(err);
    free(in), free(out), free(err);
    return r;
}

#define run(...) run_with_input(NULL, __VA_ARGS__)

/* sql single-quoted for /bin/sh (a static buffer: one use per call). */
static const char *shq(const char *sql) {
    static char buf[2048];
    size_t n = 0;
    buf[n++] = '\'';
    for (const char *p = sql; *p && n + 5 < sizeof buf; p++) {
        if (*p == '\'') {
            memcpy(buf + n, "'\\''", 4);
            n += 4;
        } else {
            buf[n++] = *p;
        }
    }
    buf[n++] = '\'';
    buf[n] = 0;
    return buf;
}

static void expect_output(const char *format, const char *sql, const char *want) {
    run_result r = run("query --format %s " TRACE " %s", format, shq(sql));
    cr_expect_eq(r.code, 0, "--format %s: exit %d: %s", format, r.code, r.err);
    cr_expect_str_eq(r.out, want, "--format %s of %s:\n%s\nwant:\n%s", format, sql, r.out, want);
    run_free(&r);
}

/* NULL, integer, negative, double, and a string with " , and a newline. */
#define VALUES "select null as n, 42 as i, -7 as neg, 1.5 as d, 'a\"b,c' || char(10) || 'd' as s"

/* ---- formats ---- */

Test(query_format, perfetto_is_trace_processor_csv) {
    /* Strings are written between quotes verbatim, as Trace Processor's
     * shell does (an embedded quote is not doubled). */
    expect_output("perfetto", VALUES, "\"n\",\"i\",\"neg\",\"d\",\"s\"\n\"[NULL]\",42,-7,1.500000,\"a\"b,c\nd\"\n");
    expect_output("perfetto", "select 2.0 as x, 0.1 as y, 9223372036854775807 as big, -0.5 as neg",
                  "\"x\",\"y\",\"big\",\"neg\"\n2.000000,0.100000,9223372036854775807,-0.500000\n");
}

Test(query_format, perfetto_empty_result_is_header_only) {
    expect_output("perfetto", "select 1 as a, 'x' as b where 0", "\"a\",\"b\"\n");
}

Test(query_format, csv_is_rfc4180) {
    expect_output("csv", VALUES, "n,i,neg,d,s\n,42,-7,1.5,\"a\"\"b,c\nd\"\n");
    /* Doubles keep a decimal point and their shortest exact digits;
     * a column name that needs quotes gets them. */
    expect_output("csv", "select 2.0 as \"x,y\", 0.1 as y, 1e300 as z, 'plain' as w",
                  "\"x,y\",y,z,w\n2.0,0.1,1e+300,plain\n");
}

Test(query_format, json_array_of_objects) {
    expect_output("json", VALUES, "[{\"n\":null,\"i\":42,\"neg\":-7,\"d\":1.5,\"s\":\"a\\\"b,c\\nd\"}]\n");
    expect_output("json", "select 1 as a union all select 2", "[{\"a\":1},\n{\"a\":2}]\n");
    expect_output("json", "select 1 as a where 0", "[]\n");
}

Test(query_format, json_is_valid_json_for_any_text) {
    /* control characters, a backslash, a tab and an invalid UTF-8 byte */
    run_result r = run("query --format json " TRACE " %s",
                       shq("select char(1) || '\\' || char(9) || cast(x'ff41' as text) as s, 2.5 as d, "
                           "9007199254740993 as big"));
    cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    json_error_t e;
    json_t *doc = json_loads(r.out, 0, &e);
    cr_assert_not_null(doc, "not JSON (%s): %s", e.text, r.out);
    json_t *row = json_array_get(doc, 0);
    cr_assert(json_is_object(row), "%s", r.out);
    cr_expect_str_eq(json_string_value(json_object_get(row, "s")), "\x01\\\t\xEF\xBF\xBD" "A");
    cr_expect(json_is_real(json_object_get(row, "d")) && json_real_value(json_object_get(row, "d")) == 2.5);
    cr_expect(json_is_integer(json_object_get(row, "big")) &&
              json_integer_value(json_object_get(row, "big")) == 9007199254740993LL);
    json_decref(doc);
    run_free(&r);
}

Test(query_format, table_aligns_columns) {
    expect_output("table", VALUES,
                  " n    | i  | neg | d   | s\n"
                  "------+----+-----+-----+----------\n"
                  " NULL | 42 |  -7 | 1.5 | a\"b,c\\nd\n"
                  "(1 row)\n");
    expect_output("table", "select 'abc' as x where 0",
                  " x\n"
                  "---\n"
                  "(0 rows)\n");
    /* widths count characters, not bytes */
    expect_output("table", "select 'é' as x, 1 as y union all select 'ab', 22",
                  " x  | y\n"
                  "----+----\n"
                  " é  |  1\n"
                  " ab | 22\n"
                  "(2 rows)\n");
    /* and columns on a terminal: CJK characters take two, a combining accent none */
    expect_output("table", "select '\xE5\xB7\xA5\xE4\xBD\x9C' as x, 1 as y union all select 'e' || char(769), 22",
                  " x    | y\n"
                  "------+----\n"
                  " \xE5\xB7\xA5\xE4\xBD\x9C |  1\n"
                  " e\xCC\x81    | 22\n"
                  "(2 rows)\n");
}

Test(query_format, default_is_csv_when_stdout_is_not_a_terminal) {
    run_result r = run("query " TRACE " %s", shq("select 1 as a, null as b"));
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "a,b\n1,\n");
    run_free(&r);
}

/* ---- several statements ---- */

#define MULTI "select 1 as a; create view v as select 2 as b; select * from v; ; -- a comment\n" \
              "select 3 as c where 0; /* done */"

Test(query_multi, result_sets_are_separated_by_one_blank_line) {
    expect_output("perfetto", MULTI, "\"a\"\n1\n\n\"b\"\n2\n\n\"c\"\n");
    expect_output("csv", MULTI, "a\n1\n\nb\n2\n\nc\n");
    expect_output("json", MULTI, "[{\"a\":1}]\n[{\"b\":2}]\n[]\n");
}

Test(query_multi, statements_without_columns_print_nothing) {
    expect_output("perfetto", "create table t(x); insert into t values (1), (2);", "");
    expect_output("perfetto", "create table t(x); insert into t values (5); select x from t",
                  "\"x\"\n5\n");
}

/* ---- errors ---- */

Test(query_errors, sql_error_names_statement_and_position) {
    run_result r = run("query --format csv " TRACE " %s", shq("select 1 as a;\nselect * from nosuch;\nselect 2"));
    cr_expect_eq(r.code, 1, "exit %d", r.code);
    cr_expect_str_eq(r.out, "a\n1\n", "statements before the error run: %s", r.out);
    cr_expect(strstr(r.err, "statement 2") && strstr(r.err, "no such table: nosuch") && strstr(r.err, "SQL:2:"),
              "stderr: %s", r.err);
    run_free(&r);

    r = run("query --format csv " TRACE " %s", shq("select 1;\n  selec 2"));
    cr_expect_eq(r.code, 1);
    cr_expect(strstr(r.err, "SQL:2:3: statement 2:") && strstr(r.err, "syntax error"), "stderr: %s", r.err);
    run_free(&r);
}

/* A run-time error points at its statement's first token, not at the
 * comment above it (the line of the comment was given). */
Test(query_errors, runtime_error_points_past_comments) {
    run_result r = run("query --format csv " TRACE " %s",
                       shq("select 1 as a;\n-- overflows\n /* b */ select abs(-9223372036854775807 - 1)"));
    cr_expect_eq(r.code, 1, "exit %d", r.code);
    cr_expect(strstr(r.err, "tracemill query: SQL:3:10: statement 2: integer overflow"), "stderr: %s", r.err);
    run_free(&r);
}

/* An INCLUDE of a module tracemill lacks is an SQL error like any other:
 * where, line, column (its name) and statement number; the message had
 * none of them. */
Test(query_errors, unknown_module_names_its_position) {
    run_result r = run("query --format csv " TRACE " %s", shq("select 1 as a;\n  INCLUDE PERFETTO MODULE no.such;"));
    cr_expect_eq(r.code, 1, "exit %d", r.code);
    cr_expect_str_eq(r.out, "a\n1\n");
    cr_expect(strstr(r.err, "tracemill query: SQL:2:27: statement 2: INCLUDE PERFETTO MODULE no.such:"), "stderr: %s",
              r.err);
    run_free(&r);
}

/* A statement that fails at its first step prints nothing in any format:
 * no header, no empty JSON array that a script would take for no rows. */
Test(query_errors, runtime_error_exits_1) {
    static const char *const formats[] = {"csv", "json", "table", "perfetto"};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        run_result r =
            run("query --format %s " TRACE " %s", formats[i], shq("select abs(-9223372036854775807 - 1) as x"));
        cr_expect_eq(r.code, 1, "%s: exit %d", formats[i], r.code);
        cr_expect(strstr(r.err, "integer overflow"), "%s: stderr: %s", formats[i], r.err);
        cr_expect_str_eq(r.out, "", "%s: printed for a statement that failed: %s", formats[i], r.out);
        run_free(&r);
    }
}

Test(query_errors, usage_errors_exit_2) {
    static const char *const cases[] = {
        "query",                                    /* no trace */
        "query --format xml " TRACE " 'select 1'", /* unknown format */
        "query " TRACE " 'select 1' --format",      /* format without a value */
        "query --bogus " TRACE " 'select 1'",       /* unknown option */
        "query " TRACE " 'select 1' 'select 2'",    /* two SQL arguments */
        "query -f /dev/null " TRACE " 'select 1'",  /* SQL twice */
        "query -",                                  /* trace and SQL both on stdin */
        "query " TRACE " -f",                       /* -f without a file */
        "export-sqlite " TRACE,                     /* no output */
        "export-sqlite " TRACE " /tmp/a.db /tmp/b.db",
        "export-sqlite " TRACE " -",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("%s", cases[i]);
        cr_expect_eq(r.code, 2, "`tracemill %s` exited %d, want 2; stderr: %s", cases[i], r.code, r.err);
        cr_expect(r.err[0], "`tracemill %s` printed no message", cases[i]);
        cr_expect_str_eq(r.out, "", "`tracemill %s` wrote to stdout", cases[i]);
        run_free(&r);
    }
}

Test(query_errors, missing_files_exit_3) {
    run_result r = run("query /nonexistent/t.pftrace 'select 1'");
    cr_expect_eq(r.code, 3, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "/nonexistent/t.pftrace"), "%s", r.err);
    run_free(&r);
    r = run("query -f /nonexistent/q.sql " TRACE);
    cr_expect_eq(r.code, 3, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "/nonexistent/q.sql"), "%s", r.err);
    run_free(&r);
    r = run("export-sqlite " TRACE " /nonexistent_dir_tm/out.db");
    cr_expect_eq(r.code, 3, "exit %d: %s", r.code, r.err);
    run_free(&r);
}

/* ---- SQL from a file and from stdin ---- */

Test(query_input, sql_file) {
    char *sql = temp_file("-- two statements\nselect 'x' as s;\n\nselect 1.25 as d;\n");
    run_result r = run("query --format perfetto -f %s " TRACE, sql);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "\"s\"\n\"x\"\n\n\"d\"\n1.250000\n");
    run_free(&r);
    /* errors name the file and the line in it */
    FILE *f = fopen(sql, "w");
    fputs("select 1;\n\nselect nope;\n", f);
    fclose(f);
    r = run("query --format csv -f %s " TRACE, sql);
    cr_expect_eq(r.code, 1);
    char want[128];
    snprintf(want, sizeof want, "%s:3:8: statement 2: no such column: nope", sql);
    cr_expect(strstr(r.err, want), "want %s in: %s", want, r.err);
    run_free(&r);
    remove(sql);
    free(sql);
}

Test(query_input, trace_from_stdin_with_sql_argument) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "query --format csv - 'select 7 as x' <" TRACE);
    run_result r = run("%s", cmd);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "x\n7\n");
    run_free(&r);
}

Test(query_input, sql_from_stdin_spanning_lines) {
    run_result r = run_with_input("select 1 as a;\nselect\n  2 as b; select 3 as c;\n\n-- last one has no ';'\nselect 4 as d\n",
                                  "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "a\n1\n\nb\n2\n\nc\n3\n\nd\n4\n");
    run_free(&r);
}

Test(query_input, stdin_script_stops_at_first_error) {
    run_result r = run_with_input("select 1 as a;\n\nselect x\n  from nosuch;\nselect 2 as b;\n",
                                  "query --format csv " TRACE);
    cr_expect_eq(r.code, 1);
    cr_expect_str_eq(r.out, "a\n1\n");
    cr_expect(strstr(r.err, "stdin:3:1: statement 2: no such table: nosuch"), "%s", r.err);
    run_free(&r);
}

/* An SQL file that opens with a comment, as most do: INCLUDE PERFETTO
 * MODULE after a comment (or with one between its words) is still the
 * include, as in Trace Processor; it was passed to SQLite as a syntax
 * error at "INCLUDE". */
Test(query_input, include_after_a_comment) {
    run_result r = run_with_input("-- heap intervals\n/* a */ INCLUDE /* b */ PERFETTO MODULE "
                                  "android.memory.heap_profile.intervals; -- the view\n"
                                  "select count(*) as n from _android_heap_profile_intervals;\n",
                                  "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect_str_eq(r.out, "n\n0\n");
    run_free(&r);
    /* an include inside a comment is only a comment */
    r = run_with_input("-- INCLUDE PERFETTO MODULE no.such;\nselect 1 as a;\n", "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect_str_eq(r.out, "a\n1\n");
    run_free(&r);
}

/* A reader that goes away (| head -1) from a query whose SIGPIPE is
 * ignored, as under a parent that ignores it: the write fails with EPIPE
 * and the statement stops with exit 3. It ran on writing into the closed
 * pipe: for ever with an unbounded result. */
Test(query_output, closed_pipe_stops_the_statement, .timeout = 60) {
    static const char *const formats[] = {"csv", "json", "perfetto"};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        char *rc = temp_file(NULL), *err = temp_file(NULL), cmd[2048];
        snprintf(cmd, sizeof cmd,
                 "trap '' PIPE; { timeout 20 %s query --format %s " TRACE
                 " 'with recursive c(x) as (select 1 union all select x + 1 from c) select x from c' 2>%s;"
                 " echo $? >%s; } | head -c 1 >/dev/null",
                 TM_CLI, formats[i], err, rc);
        cr_assert_neq(system(cmd), -1);
        char *code = tu_read_file(rc, NULL), *msg = tu_read_file(err, NULL);
        cr_assert(code && msg);
        cr_expect_eq(atoi(code), 3, "%s: exit %s (124: still running after 20 s); stderr: %s", formats[i], code, msg);
        cr_expect(strstr(msg, "cannot write standard output: Broken pipe"), "%s: stderr: %s", formats[i], msg);
        free(code), free(msg);
        remove(rc), remove(err);
        free(rc), free(err);
    }
}

/* ---- dot-commands (the shell's, read from a piped stdin) ---- */

Test(query_shell, mode_switches_format) {
    run_result r = run_with_input("select 1 as a;\n.mode json\nselect 2 as b;\n  .mode   'perfetto'\nselect 'z' as c;\n"
                                  ".mode\n",
                                  "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "a\n1\n[{\"b\":2}]\n\"c\"\n\"z\"\nperfetto\n");
    run_free(&r);
}

Test(query_shell, tables_and_schema) {
    run_result r = run_with_input("create table zz_mine(a INTEGER, b TEXT);\n.tables\n.schema \"zz_mine\"\n",
                                  "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\nstats\n") && strstr(r.out, "\nthread\n") && strstr(r.out, "\nzz_mine\n"),
              ".tables: %s", r.out);
    cr_expect(strstr(r.out, "zz_mine\nname,type\na,INTEGER\nb,TEXT\n"), ".schema: %s", r.out);
    run_free(&r);

    r = run_with_input(".schema\n", "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\nstats(id ") || strncmp(r.out, "stats(id ", 9) == 0, ".schema: %s", r.out);
    run_free(&r);
}

Test(query_shell, timer_and_help) {
    run_result r = run_with_input(".timer on\nselect 1 as a;\n.timer\n.timer off\nselect 2 as b;\n.help\n",
                                  "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    const char *t = strstr(r.err, "time: ");
    cr_expect(t && strstr(t, " ms\n") && !strstr(t + 1, "time: "), "one timing, stderr: %s", r.err);
    cr_expect(strncmp(r.out, "a\n1\non\n\nb\n2\n", 12) == 0, "%s", r.out);
    cr_expect(strstr(r.out, ".schema") && strstr(r.out, ".mode") && strstr(r.out, ".quit"), "%s", r.out);
    run_free(&r);
}

Test(query_shell, quit_and_bad_commands) {
    run_result r = run_with_input("select 1 as a;\n.quit\nselect 2 as b;\n", "query --format csv " TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "a\n1\n");
    run_free(&r);
    static const char *const bad[] = {".bogus\n", ".mode xml\n", ".timer maybe\n", ".schema a b\n",
                                      ".schema nosuchtable\n", ".mode \"csv\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = run_with_input(bad[i], "query --format csv " TRACE);
        cr_expect_eq(r.code, 1, "%s: exit %d", bad[i], r.code);
        cr_expect(r.err[0], "%s: no message", bad[i]);
        run_free(&r);
    }
}

/* ---- export-sqlite ---- */

static long long query_count(const char *table) {
    char sql[256];
    snprintf(sql, sizeof sql, "select count(*) from \"%s\"", table);
    run_result r = run("query --format csv " TRACE " %s", shq(sql));
    cr_assert_eq(r.code, 0, "%s: %s", sql, r.err);
    long long n = -1;
    cr_assert_eq(sscanf(r.out, "count(*)\n%lld", &n), 1, "%s", r.out);
    run_free(&r);
    return n;
}

Test(query_export, sqlite_file_holds_every_table) {
    char *db_path = temp_file(NULL); /* an existing file is replaced */
    run_result r = run("export-sqlite " TRACE " %s", db_path);
    cr_assert_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    run_free(&r);

    /* the tables that `query` sees, as plain text */
    r = run_with_input(".tables\n", "query --format csv " TRACE);
    cr_assert_eq(r.code, 0);
    char *names = r.out;
    r.out = NULL;
    run_free(&r);

    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(db_path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "select name from sqlite_schema where type = 'table' order by name", -1, &st,
                                    NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    size_t tables = 0, pos = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *name = (const char *)sqlite3_column_text(st, 0);
        size_t n = strlen(name);
        cr_expect(strncmp(names + pos, name, n) == 0 && names[pos + n] == '\n', "table %s: not next in .tables: %s",
                  name, names + pos);
        pos += n + 1;
        char sql[256];
        snprintf(sql, sizeof sql, "select count(*) from \"%s\"", name);
        sqlite3_stmt *c;
        cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &c, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_step(c), SQLITE_ROW);
        cr_expect_eq(sqlite3_column_int64(c, 0), query_count(name), "row count of %s", name);
        sqlite3_finalize(c);
        tables++;
    }
    sqlite3_finalize(st);
    cr_expect_eq(names[pos], 0, "tables missing from the file: %s", names + pos);
    cr_expect_gt(tables, 5u);
    /* plain tables with Trace Processor's columns, readable without tracemill */
    cr_expect_eq(sqlite3_prepare_v2(db, "select name, idx, severity, source, value from stats", -1, &st, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(names);
    remove(db_path);
    free(db_path);
}

/* ---- the sandbox: queries read, export-sqlite writes ---- */

Test(query_sandbox, statements_that_write_files_or_settings_are_refused) {
    char dir[] = "/tmp/tm_query_sandbox_XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char sql[6][512];
    snprintf(sql[0], sizeof sql[0], "ATTACH '%s/a.db' AS a; CREATE TABLE a.t(x)", dir);
    snprintf(sql[1], sizeof sql[1], "VACUUM INTO '%s/v.db'", dir);
    snprintf(sql[2], sizeof sql[2], "PRAGMA writable_schema=ON");
    snprintf(sql[3], sizeof sql[3], "SELECT hex(fts3_tokenizer('simple'))");
    snprintf(sql[4], sizeof sql[4], "DETACH main");
    snprintf(sql[5], sizeof sql[5], "PRAGMA journal_mode=OFF");
    for (size_t i = 0; i < 6; i++) {
        run_result r = run("query " TRACE " %s", shq(sql[i]));
        cr_expect_eq(r.code, 1, "%s: exit %d: %s", sql[i], r.code, r.err);
        cr_expect(strstr(r.err, "authoriz"), "%s: %s", sql[i], r.err);
        run_free(&r);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rmdir %s", dir); /* fails if a file was created */
    cr_expect_eq(system(cmd), 0, "a statement created a file in %s", dir);
    /* reading stays allowed: pragmas that only report, tables in memory */
    run_result r = run("query --format csv " TRACE " %s",
                       shq("PRAGMA table_info(thread); CREATE TABLE x(a); INSERT INTO x VALUES (7); SELECT a FROM x"));
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "utid") && strstr(r.out, "a\n7\n"), "%s", r.out);
    run_free(&r);
}

#define FOREVER "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c"

Test(query_sandbox, timeout_stops_a_statement, .timeout = 20) {
    run_result r = run("query --timeout 0.3 " TRACE " %s", shq(FOREVER));
    cr_expect_eq(r.code, 1, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "statement 1: stopped after --timeout 0.3 s"), "%s", r.err);
    run_free(&r);
    r = run("query --timeout 5 --format csv " TRACE " 'SELECT 1 AS a'");
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "a\n1\n");
    run_free(&r);
    static const char *const bad[] = {"--timeout 0", "--timeout -1", "--timeout x", "--timeout"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = run("query %s " TRACE " 'SELECT 1'", bad[i]);
        cr_expect_eq(r.code, 2, "%s: exit %d: %s", bad[i], r.code, r.err);
        run_free(&r);
    }
}

/* Ctrl-C stops the running statement or drops the line being typed; the
 * shell goes on, as sqlite3's does. */
Test(query_shell, ctrl_c_cancels_the_statement_not_the_shell, .timeout = 30) {
    char *argv[] = {TM_CLI, "query", TRACE, NULL};
    int master;
    int pid = tu_spawn_on_pty(argv, &master);
    cr_assert_gt(pid, 0);
    tu_membuf seen = {0};
    cr_assert(tu_pty_wait_for(master, &seen, "tracemill> ", 5000), "no prompt: %s", seen.data);
    cr_assert_eq(write(master, FOREVER ";\n", strlen(FOREVER ";\n")), (ssize_t)strlen(FOREVER ";\n"));
    struct timespec pause = {0, 300000000};
    nanosleep(&pause, NULL);
    cr_assert_eq(write(master, "\x03", 1), 1);
    cr_expect(tu_pty_wait_for(master, &seen, "interrupted\r\ntracemill> ", 5000), "the statement was not stopped: %s",
              seen.data);
    /* a half-typed statement is dropped (typed as a person would: after
     * the line editor is ready, with a pause before Ctrl-C) */
    tu_membuf_free(&seen);
    nanosleep(&pause, NULL);
    cr_assert_eq(write(master, "SELECT 'dropped'", 16), 16);
    cr_expect(tu_pty_wait_for(master, &seen, "dropped", 5000), "%s", seen.data);
    nanosleep(&pause, NULL);
    cr_assert_eq(write(master, "\x03", 1), 1);
    cr_expect(tu_pty_wait_for(master, &seen, "tracemill> ", 5000), "no new prompt: %s", seen.data);
    tu_membuf_free(&seen);
    cr_assert_eq(write(master, "SELECT 6 * 7 AS answer;\n", 24), 24);
    cr_expect(tu_pty_wait_for(master, &seen, " 42", 5000), "the shell did not go on: %s", seen.data);
    cr_expect(!strstr(seen.data, "syntax error"), "the dropped line was kept: %s", seen.data);
    cr_assert_eq(write(master, ".quit\n", 6), 6);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d", status);
    tu_membuf_free(&seen);
    close(master);
}

/* SQL that opens with a "-- comment" was taken for an unknown option with
 * no way around it; "--" ends the options, and without it the message
 * says so. */
Test(query_input, double_dash_ends_the_options) {
    run_result r = run("query --format csv " TRACE " -- %s", shq("-- a comment\nselect 1 as a"));
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect_str_eq(r.out, "a\n1\n");
    run_free(&r);
    r = run("query --format csv -- " TRACE " %s", shq("--format"));
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect_str_eq(r.out, "");
    run_free(&r);
    r = run("query " TRACE " %s", shq("-- a comment\nselect 1 as a"));
    cr_expect_eq(r.code, 2, "exit %d", r.code);
    cr_expect(strstr(r.err, "goes after \"--\""), "stderr: %s", r.err);
    run_free(&r);
    r = run("query " TRACE " -- 'select 1' 'select 2'");
    cr_expect_eq(r.code, 2, "exit %d", r.code);
    run_free(&r);
}

Test(query_errors, a_format_given_to_f_gets_a_hint) {
    static const char *const formats[] = {"csv", "json", "table", "perfetto", "svg"};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        run_result r = run("query " TRACE " -f %s", formats[i]);
        char want[64];
        snprintf(want, sizeof want, "did you mean --format %s?", formats[i]);
        cr_expect_eq(r.code, 2, "-f %s: exit %d: %s", formats[i], r.code, r.err);
        cr_expect(strstr(r.err, want), "-f %s: %s", formats[i], r.err);
        run_free(&r);
    }
}
