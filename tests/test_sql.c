/*
 * test_sql.c — the virtual tables' constraint handling (src/sql.c): every
 * id predicate the tables answer themselves must select the same rows as
 * SQLite does on a real table with the same contents (the exported copy);
 * and the sandbox of the connection (no ATTACH, VACUUM INTO, pragma
 * assignments or fts3_tokenizer) with tm_db_export never replacing a file.
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

static sqlite3_int64 count(sqlite3 *db, const char *table, const char *where) {
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT count(*), total(id) FROM %s WHERE %s", table, where);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s: %s", sql, sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    /* count and the sum of ids: the same number of rows could still be other rows */
    sqlite3_int64 n = sqlite3_column_int64(st, 0) * 1000003 + (sqlite3_int64)sqlite3_column_double(st, 1);
    sqlite3_finalize(st);
    return n;
}

/* The bundled example as a database; *buf holds the trace it reads (free
 * it after the database). */
static tm_db *demo_db(char **buf) {
    size_t len;
    *buf = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert_not_null(*buf);
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(*buf, len, NULL, &db, &err), TM_OK, "%s", err.message);
    return db;
}

/* perf_sample and cpu_profile_stack_sample scan from one of their rows to
 * the next through the model's bitmaps of them (src/tp/sql.c visible_rows),
 * while a lookup by id tests that row's kind itself: both must find the
 * same rows, over a whole scan and a range. */
Test(sql, sample_views_scan_the_rows_their_id_lookups_find) {
    char *buf;
    tm_db *db = demo_db(&buf);
    sqlite3 *sql = tm_db_sqlite(db);
    static const char *const views[] = {"perf_sample", "cpu_profile_stack_sample"};
    static const char *const wheres[] = {"1", "id >= 700 AND id < 2100", "id > 63 AND id <= 128"};
    for (size_t v = 0; v < sizeof views / sizeof *views; v++)
        for (size_t i = 0; i < sizeof wheres / sizeof *wheres; i++) {
            char lookup[256];
            snprintf(lookup, sizeof lookup, "EXISTS (SELECT 1 FROM %s p WHERE p.id = stack_sample.id) AND %s",
                     views[v], wheres[i]);
            sqlite3_int64 scanned = count(sql, views[v], wheres[i]);
            cr_expect_gt(scanned, 0, "%s WHERE %s", views[v], wheres[i]);
            cr_expect_eq(scanned, count(sql, "stack_sample", lookup), "%s WHERE %s", views[v], wheres[i]);
        }
    tm_db_free(db);
    free(buf);
}

Test(sql, id_constraints_match_a_real_table) {
    char *buf;
    tm_db *db = demo_db(&buf);
    tm_error err;
    char path[] = "/tmp/tm_test_sql_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    close(fd);
    cr_assert_eq(tm_db_export(db, path, &err), TM_OK, "%s", err.message);
    sqlite3 *real;
    cr_assert_eq(sqlite3_open(path, &real), SQLITE_OK);
    static const char *const wheres[] = {
        "id = 3", "id = 3.0", "id = 3.5", "id = '3'", "id = 'x'", "id = NULL", "id = -1", "id = 1e300",
        "id > 2.5 AND id < 5", "id >= 3 AND id <= 4", "id > 10", "id >= 10", "id < 10", "id <= 10",
        "id < 'x'", "id > 'x'", "id > NULL", "id < NULL", "id < -1", "id > -5 AND id < 2", "id > 1e30",
        "id <= 1e30 AND id >= 2600", "id < 0.5", "id <= -0.5", "10 < id AND id < 12",
    };
    static const char *const tables[] = {"stack_profile_callsite", "thread", "stack_profile_frame"};
    for (size_t t = 0; t < sizeof tables / sizeof *tables; t++)
        for (size_t i = 0; i < sizeof wheres / sizeof *wheres; i++)
            cr_expect_eq(count(tm_db_sqlite(db), tables[t], wheres[i]), count(real, tables[t], wheres[i]),
                         "%s WHERE %s", tables[t], wheres[i]);
    sqlite3_close(real);
    unlink(path);
    tm_db_free(db);
    free(buf);
}

Test(sql, limits_of_the_options_apply) {
    size_t len;
    char *buf = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert_not_null(buf);
    tm_options opts;
    memset(&opts, 0, sizeof opts);
    opts.limits.max_samples = 10; /* the demo has 3000 */
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_new(buf, len, &opts, &db, &err), TM_ERR_LIMIT);
    cr_assert_null(db);
    cr_assert(strstr(err.message, "more than 10 samples"), "%s", err.message);
    opts.limits.max_samples = 3000;
    cr_assert_eq(tm_db_new(buf, len, &opts, &db, &err), TM_OK, "%s", err.message);
    tm_db_free(db);
    free(buf);
}

/* Input of another format is named, not reported as malformed Perfetto,
 * unless the caller names the format: as tm_trace_parse does, a format
 * named in tm_options is taken, so TM_INPUT_PERFETTO reads the same bytes
 * as Perfetto (and rejects them as tm_trace_parse does, at byte 0), and
 * another named format is refused without a look. */
Test(sql, other_input_formats_are_named) {
    static const char *const inputs[][2] = {{"main;work 3\n", "folded"}, {"{\"version\":\"2\"}", "sample-v2"}};
    for (size_t i = 0; i < 2; i++) {
        tm_db *db = NULL;
        tm_error err = {0};
        cr_expect_eq(tm_db_new(inputs[i][0], strlen(inputs[i][0]), NULL, &db, &err), TM_ERR_UNSUPPORTED, "%s",
                     err.message);
        cr_expect_null(db);
        char want[64];
        snprintf(want, sizeof want, "this is %s input", inputs[i][1]);
        cr_expect(strstr(err.message, want), "%s", err.message);

        tm_options as_perfetto = {.input = TM_INPUT_PERFETTO};
        tm_trace *t = NULL;
        tm_error perr = {0};
        cr_expect_eq(tm_trace_parse(inputs[i][0], strlen(inputs[i][0]), &as_perfetto, &t, &perr), TM_ERR_MALFORMED);
        cr_expect_eq(tm_db_new(inputs[i][0], strlen(inputs[i][0]), &as_perfetto, &db, &err), TM_ERR_MALFORMED, "%s",
                     err.message);
        cr_expect_eq(err.offset, perr.offset);
        cr_expect_str_eq(err.message, perr.message);
    }
    tm_options as_folded = {.input = TM_INPUT_FOLDED};
    tm_db *db = NULL;
    tm_error err = {0};
    cr_expect_eq(tm_db_new(inputs[1][0], strlen(inputs[1][0]), &as_folded, &db, &err), TM_ERR_UNSUPPORTED);
    cr_expect(strstr(err.message, "this is folded input"), "%s", err.message);
}

/* Blanks and both kinds of comment before a statement are skipped; an
 * unclosed comment runs to the end; "-" alone and "/" alone are tokens. */
Test(sql, statement_start_skips_blanks_and_comments) {
    static const char *const texts[][2] = {
        {" \t\n-- one\n  /* two\n */ select 1", "select 1"},
        {"-- to the end", ""},
        {"/* unclosed", ""},
        {"- 1", "- 1"},
        {"/ 2", "/ 2"},
        {"select -- after", "select -- after"},
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++)
        cr_expect_str_eq(tm_db_statement_start(texts[i][0]), texts[i][1], "text %zu", i);
    cr_expect_null(tm_db_statement_start(NULL));
}

/* The connection tm_db_sqlite hands out runs what a user types: it reads
 * the trace but creates no file and changes no setting; tm_db_export is
 * how a database gets written, and it never replaces one. */

Test(sql, the_connection_writes_no_file_and_export_replaces_none) {
    char *buf;
    tm_db *db = demo_db(&buf);
    tm_error err;
    sqlite3 *s = tm_db_sqlite(db);
    char dir[] = "/tmp/tm_test_sql_XXXXXX", sql[256], path[64];
    cr_assert_not_null(mkdtemp(dir));
    snprintf(sql, sizeof sql, "ATTACH '%s/a.db' AS a", dir);
    cr_expect_neq(sqlite3_exec(s, sql, NULL, NULL, NULL), SQLITE_OK, "ATTACH ran");
    snprintf(sql, sizeof sql, "VACUUM INTO '%s/v.db'", dir);
    cr_expect_neq(sqlite3_exec(s, sql, NULL, NULL, NULL), SQLITE_OK, "VACUUM INTO ran");
    cr_expect_neq(sqlite3_exec(s, "PRAGMA writable_schema=ON", NULL, NULL, NULL), SQLITE_OK);
    cr_expect_neq(sqlite3_exec(s, "SELECT fts3_tokenizer('simple')", NULL, NULL, NULL), SQLITE_OK);
    cr_expect_eq(sqlite3_exec(s, "SELECT count(*) FROM thread", NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(s));

    /* an existing database is refused and kept; a new path is written */
    snprintf(path, sizeof path, "%s/kept.db", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("not empty", f);
    fclose(f);
    cr_expect_eq(tm_db_export(db, path, &err), TM_ERR_IO);
    char *kept = tu_read_file(path, NULL);
    cr_expect(kept && strcmp(kept, "not empty") == 0, "the existing file was replaced");
    free(kept);
    unlink(path);
    /* an empty path is refused: SQLite would make a temporary database of it */
    cr_expect_eq(tm_db_export(db, "", &err), TM_ERR_INVALID_ARG);
    snprintf(path, sizeof path, "%s/new.db", dir);
    cr_expect_eq(tm_db_export(db, path, &err), TM_OK, "%s", err.message);
    cr_expect_eq(sqlite3_exec(s, sql, NULL, NULL, NULL) == SQLITE_OK, 0, "export left ATTACH allowed");
    unlink(path);
    cr_expect_eq(rmdir(dir), 0, "a statement left a file in %s", dir);
    tm_db_free(db);
    free(buf);
}

/* A trace cut off inside a packet: the tables hold what came before it, and
 * tm_db_truncated names the packet where the profile model does; a whole
 * trace is not cut off; strict rejects the cut one. */
Test(sql, cut_off_trace_is_said_where) {
    size_t len;
    char *buf = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert_not_null(buf);
    tm_error err;
    tm_db *db = NULL;
    uint64_t at = 0;
    cr_assert_eq(tm_db_new(buf, len, NULL, &db, &err), TM_OK, "%s", err.message);
    cr_expect_eq(tm_db_truncated(db, &at), 0);
    tm_db_free(db);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(buf, len - 7, NULL, &t, &err), TM_OK, "%s", err.message);
    cr_assert(tm_trace_get_stats(t)->truncated);
    cr_assert_eq(tm_db_new(buf, len - 7, NULL, &db, &err), TM_OK, "%s", err.message);
    cr_expect_eq(tm_db_truncated(db, &at), 1);
    cr_expect_eq(at, tm_trace_get_stats(t)->truncated_at);
    cr_expect_eq(tm_db_truncated(db, NULL), 1); /* the offset is optional */
    cr_expect_eq(tm_db_truncated(NULL, &at), 0); /* an accessor on NULL, as tm_db_sqlite */
    cr_expect_gt(count(tm_db_sqlite(db), "cpu_profile_stack_sample", "1"), 0);
    tm_db_free(db);
    tm_trace_free(t);
    tm_options strict = {.strict = 1};
    cr_expect_eq(tm_db_new(buf, len - 7, &strict, &db, &err), TM_ERR_TRUNCATED);
    cr_expect_eq(err.offset, at);
    free(buf);
}
