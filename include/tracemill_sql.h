/*
 * tracemill_sql.h — the SQL API of libtracemill (tm_db_*): a trace decoded
 * into Perfetto Trace Processor's tables and queried through SQLite.
 *
 * Defined in libtracemill itself; this header is apart from tracemill.h
 * because it hands out a sqlite3 connection: a program that runs statements
 * on it includes <sqlite3.h> and links SQLite too
 * (pkg-config --cflags --libs tracemill sqlite3).
 *
 * Threading: a tm_db and its connection are used by one thread at a time
 * (call tm_db_new on each thread that needs one; they share nothing).
 *
 * Memory: the tm_db and its decoded columns go through tm_options.alloc
 * (tm_alloc in tracemill.h); the SQLite connection, its statements and the
 * tables' cursors use SQLite's own allocator (sqlite3_config), never
 * tm_alloc.
 */
#ifndef TRACEMILL_SQL_H
#define TRACEMILL_SQL_H

#include "tracemill.h"

struct sqlite3;

#ifdef __cplusplus
extern "C" {
#endif

/* ==== SQL over traces ================================================= */

/* A trace decoded with Perfetto Trace Processor's semantics (packets applied
 * in timestamp order, per-process mappings, callsites deduplicated on
 * (depth, parent, frame), Trace Processor's stats) and exposed to SQLite as
 * tables and views with Trace Processor's names and columns: process,
 * thread, stack_profile_*, perf_sample, cpu_profile_stack_sample,
 * stack_sample*, counter, track, stats, metadata, clock_snapshot, ... The
 * tables are virtual: rows are read from the decoded columns, never copied
 * into SQLite. Only Perfetto input is accepted (gzip or zstd compressed
 * whole, as for tm_trace_parse). With opts->input TM_INPUT_AUTO, the other
 * formats tm_input_detect knows get TM_ERR_UNSUPPORTED naming theirs;
 * TM_INPUT_PERFETTO reads any input as Perfetto, and another format gets
 * TM_ERR_UNSUPPORTED. opts->mode is ignored. The input buffer must outlive
 * the tm_db. */
typedef struct tm_db tm_db;

TM_API tm_status tm_db_new(const void *buf, size_t len, const tm_options *opts, tm_db **out,
                           tm_error *err);

/* The SQLite connection (an in-memory database with the tables attached):
 * run any statement on it with sqlite3_prepare_v2/sqlite3_step. Owned by
 * the tm_db; do not close it. */
TM_API struct sqlite3 *tm_db_sqlite(tm_db *db);

/* Trace Processor's `INCLUDE PERFETTO MODULE name;` is not SQLite: call
 * this with tm_db_sqlite's connection on each statement before preparing
 * it. 1: it was one, for a module tracemill provides
 * (android.memory.heap_profile.intervals, stacks.symbolization_candidates),
 * whose views now exist; go on at *tail (tail may be NULL). 0: not an
 * INCLUDE. -1: an INCLUDE of a module tracemill lacks, or its views could
 * not be made (err says why; err->offset is the byte of sql where the
 * module's name starts). */
TM_API int tm_db_include(struct sqlite3 *db, const char *sql, const char **tail, tm_error *err);

/* Where the statement at sql begins: past blanks and comments ("--" to the
 * end of the line, slash-star to star-slash; an unclosed one runs to the end
 * of the text), as Trace Processor skips them. For pointing at a statement
 * when SQLite's error gives no offset in it (a run-time error). NULL: NULL. */
TM_API const char *tm_db_statement_start(const char *sql);

/* Writes every table into a standalone SQLite file at path, readable
 * without tracemill. path must not exist or be an empty file (a temporary
 * file to rename into place, say): an existing database is never replaced.
 * On failure a file this call created is removed. */
TM_API tm_status tm_db_export(tm_db *db, const char *path, tm_error *err);

/* 1 when the trace was cut off inside a packet and read up to that packet
 * (only without tm_options.strict, which rejects it): *offset (when offset
 * is not NULL) is where the packet starts. 0 otherwise, and for a NULL db. */
TM_API int tm_db_truncated(const tm_db *db, uint64_t *offset);

/* Releases the tm_db and its connection. NULL is a no-op. */
TM_API void tm_db_free(tm_db *db);

#ifdef __cplusplus
}
#endif
#endif /* TRACEMILL_SQL_H */
