/*
 * test_sql.c — the virtual tables' constraint handling (src/sql.c): every
 * id predicate the tables answer themselves must select the same rows as
 * SQLite does on a real table with the same contents (the exported copy).
 */
#define _POSIX_C_SOURCE 200809L /* mkstemp */
#include <criterion/criterion.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tracemill.h"
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

Test(sql, id_constraints_match_a_real_table) {
    size_t len;
    char *buf = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert_not_null(buf);
    tm_db *db = NULL;
    tm_error err;
    cr_assert_eq(tm_db_open(buf, len, NULL, &db, &err), TM_OK, "%s", err.message);
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
    cr_assert_eq(tm_db_open(buf, len, &opts, &db, &err), TM_ERR_LIMIT);
    cr_assert_null(db);
    cr_assert(strstr(err.message, "more than 10 samples"), "%s", err.message);
    opts.limits.max_samples = 3000;
    cr_assert_eq(tm_db_open(buf, len, &opts, &db, &err), TM_OK, "%s", err.message);
    tm_db_free(db);
    free(buf);
}
