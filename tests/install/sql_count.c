/*
 * sql_count.c — a client of tracemill_sql.h, built against an installed
 * tracemill by tests/install/run.sh and the Debian package check
 * (pkg-config --cflags --libs tracemill sqlite3): opens a trace as a tm_db
 * and prints the rows of perf_sample as "perf_sample N".
 *
 * usage: sql_count TRACE
 */
#include <sqlite3.h>
#include <stdio.h>

#include "tracemill_sql.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TRACE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 3;
    }
    static char buf[1 << 20]; /* the demo trace fits */
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);

    tm_db *db = NULL;
    tm_error err;
    if (tm_db_new(buf, len, NULL, &db, &err) != TM_OK) {
        fprintf(stderr, "%s: %s\n", tm_status_str(err.code), err.message);
        return 1;
    }
    sqlite3_stmt *st = NULL;
    int ok = sqlite3_prepare_v2(tm_db_sqlite(db), "select count(*) from perf_sample", -1, &st, NULL) == SQLITE_OK &&
             sqlite3_step(st) == SQLITE_ROW;
    if (ok)
        printf("perf_sample %lld\n", (long long)sqlite3_column_int64(st, 0));
    else
        fprintf(stderr, "%s\n", sqlite3_errmsg(tm_db_sqlite(db)));
    sqlite3_finalize(st);
    tm_db_free(db);
    return ok ? 0 : 1;
}
