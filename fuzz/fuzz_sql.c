/*
 * fuzz_sql.c — fuzz target for the Trace Processor model behind `tracemill
 * query` (src/tp.c, a second reading of the Perfetto wire format): opens
 * the trace as a database and reads every row of the main tables.
 */
#include <sqlite3.h>

#include "fuzz_common.h"
#include "tracemill_sql.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_options opts = {0};
    opts.limits.max_samples = 100000;
    opts.limits.max_inflated_bytes = 16u << 20;
    tm_db *db = NULL;
    tm_error err;
    tm_status st = tm_db_new(data, size, &opts, &db, &err);
    fuzz_check_error(st, &err);
    if (!db) return 0;
    static const char *const queries[] = {
        "select * from process", "select * from thread", "select * from stack_profile_mapping",
        "select * from stack_profile_frame", "select * from stack_profile_callsite", "select * from perf_sample",
        "select * from cpu_profile_stack_sample", "select * from stack_sample", "select * from stats",
        "select * from metadata", "select * from clock_snapshot", "select * from counter", "select * from track",
        "select * from package_list",
    };
    for (size_t i = 0; i < sizeof queries / sizeof queries[0]; i++) {
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(tm_db_sqlite(db), queries[i], -1, &q, NULL) != SQLITE_OK) abort();
        while (sqlite3_step(q) == SQLITE_ROW)
            for (int c = 0; c < sqlite3_column_count(q); c++) sqlite3_column_text(q, c);
        sqlite3_finalize(q);
    }
    tm_db_free(db);
    return 0;
}
