/*
 * store.c — the local SQLite store at DIR/tracemill.db: the server's output
 * when Kafka is not configured (tables chunks and outcomes) and the spool
 * of Kafka messages waiting for a broker (table spool).
 *
 * Durability: a put returns only after its transaction is committed in WAL
 * mode with synchronous=FULL, so an acknowledged record survives kill -9
 * and power loss. One fsync per request would cap throughput at the disk's
 * sync rate, so puts are group-committed: callers queue a submission and
 * sleep; one writer thread (with its own connection) takes everything
 * queued, inserts it in one BEGIN IMMEDIATE transaction with a SAVEPOINT
 * per submission (a failing submission is rolled back alone), commits, and
 * wakes every waiter with its status. Records are not copied: put blocks,
 * so the caller's memory outlives the insert.
 *
 * Chunk messages are stored zstd-compressed (level 1, by the calling
 * thread, not the writer): a message is ~300 KB of JSON and trace, and
 * the writer's disk bandwidth (each byte goes to the WAL, then to the
 * database) is what limits ingest; each_chunk hands them back as sent.
 *
 * Idempotence: a chunk is stored once per (project_id, chunk_id), under a
 * unique index. A repeated chunk (an SDK retrying after a lost answer) is
 * skipped without an error and counted, so its sender still gets its 200.
 *
 * The store directory also keeps the project key `serve` generates when
 * none is configured (tm_srv_store_key), so a restart keeps its DSN.
 *
 * Threading: every function may be called from any thread. Spool access
 * shares a second connection under db_mu; each_chunk opens its own
 * read-only connection so its callback may call back into the store.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <sqlite3.h>
#include <zstd.h>

#include "server.h"

#define DB_NAME "tracemill.db"
#define BUSY_TIMEOUT_MS 10000

static const char schema[] =
    "CREATE TABLE IF NOT EXISTS chunks("
    " id INTEGER PRIMARY KEY, received INTEGER NOT NULL, project_id INTEGER NOT NULL,"
    " chunk_id TEXT, payload_size INTEGER NOT NULL, raw_size INTEGER NOT NULL, message BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS outcomes("
    " id INTEGER PRIMARY KEY, received INTEGER NOT NULL, project_id INTEGER NOT NULL, message TEXT NOT NULL);"
    /* AUTOINCREMENT: spool ids never go back, even once the spool empties,
     * so an id the replayer peeked always names the same message */
    "CREATE TABLE IF NOT EXISTS spool("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, kind INTEGER NOT NULL, project_id INTEGER NOT NULL,"
    " chunk_id TEXT, message BLOB NOT NULL);";

/* The writer's statements, prepared once. */
enum { S_BEGIN, S_COMMIT, S_ROLLBACK, S_SAVEPOINT, S_RELEASE, S_ROLLBACK_TO, S_CHUNK, S_OUTCOME, S_SPOOL, S_COUNT };
static const char *const stmt_sql[S_COUNT] = {
    "BEGIN IMMEDIATE",
    "COMMIT",
    "ROLLBACK",
    "SAVEPOINT submission",
    "RELEASE submission",
    "ROLLBACK TO submission",
    ("INSERT INTO chunks(received, project_id, chunk_id, payload_size, raw_size, message) VALUES(?,?,?,?,?,?)"
     " ON CONFLICT(chunk_id, project_id) DO NOTHING"),
    "INSERT INTO outcomes(received, project_id, message) VALUES(?,?,?)",
    "INSERT INTO spool(kind, project_id, chunk_id, message) VALUES(?,?,?,?)",
};

/* One put call waiting for the writer; lives on the caller's stack. */
typedef struct submission {
    const tm_srv_record *recs;
    size_t n;
    int spool;
    int done;
    uint64_t duplicates; /* chunks already stored, skipped */
    tm_status st;
    tm_error err;
    struct submission *next;
} submission;

struct tm_srv_store {
    char *db_path;
    int readonly;
    sqlite3 *db; /* spool access from callers, under db_mu */
    pthread_mutex_t db_mu;

    sqlite3 *wdb; /* the writer thread's alone */
    sqlite3_stmt *stmt[S_COUNT];
    pthread_t writer;
    int has_writer;

    pthread_mutex_t mu; /* guards the fields below */
    pthread_cond_t work; /* something queued, or closing */
    pthread_cond_t done; /* submissions finished */
    submission *head, *tail;
    uint64_t backlog;
    uint64_t in_put; /* callers inside put, which close waits out */
    int64_t spooled; /* rows in spool; briefly negative if a delete beats the writer's count */
    uint64_t duplicates; /* chunks skipped as already stored, since open */
    int closing;
};

static tm_status sql_fail(tm_error *err, sqlite3 *db, const char *what, const char *path) {
    return tm_srv_fail(err, TM_ERR_IO, 0, "%s %s: %s", what, path, db ? sqlite3_errmsg(db) : "out of memory");
}

/* mkdir -p: parents 0755, the store itself 0700 (it holds customer data). */
static tm_status make_dirs(const char *dir, tm_error *err) {
    const size_t len = strlen(dir);
    char *p = malloc(len + 1);
    if (!p) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
    memcpy(p, dir, len + 1);
    tm_status st = TM_OK;
    for (size_t i = 1; i <= len && st == TM_OK; i++) {
        if (i < len && p[i] != '/') continue;
        p[i] = 0;
        if (mkdir(p, i == len ? 0700 : 0755) != 0 && errno != EEXIST)
            st = tm_srv_fail(err, TM_ERR_IO, 0, "create directory %s: %s", p, strerror(errno));
        if (i < len) p[i] = '/';
    }
    free(p);
    struct stat sb;
    if (st == TM_OK && (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)))
        st = tm_srv_fail(err, TM_ERR_IO, 0, "store directory %s is not a directory", dir);
    return st;
}

static tm_status exec(sqlite3 *db, const char *sql, const char *what, const char *path, tm_error *err) {
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK) return sql_fail(err, db, what, path);
    return TM_OK;
}

static tm_status open_conn(const char *path, int readonly, sqlite3 **out, tm_error *err) {
    const int flags = SQLITE_OPEN_NOMUTEX | (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    sqlite3 *db = NULL;
    tm_status st = TM_OK;
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK)
        st = sql_fail(err, db, readonly ? "open (read-only)" : "open", path);
    else if (sqlite3_busy_timeout(db, BUSY_TIMEOUT_MS) != SQLITE_OK)
        st = sql_fail(err, db, "set busy_timeout on", path);
    /* A commit rewrites every page it touches (the chunks' last leaf, the
     * unique index's, ...) whole, in the WAL and again at the checkpoint;
     * a compressed message is ~40 KB, so 16 KiB pages write ~100 KB a chunk
     * where 64 KiB ones wrote ~200 KB (takes effect only on a new, empty
     * database; older stores keep their pages). */
    if (st == TM_OK && !readonly) st = exec(db, "PRAGMA page_size=16384", "set page_size on", path, err);
    if (st == TM_OK && !readonly) {
        /* journal_mode answers with the mode it ended up in */
        sqlite3_stmt *q = NULL;
        if (sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &q, NULL) != SQLITE_OK ||
            sqlite3_step(q) != SQLITE_ROW)
            st = sql_fail(err, db, "switch to WAL", path);
        else if (sqlite3_stricmp((const char *)sqlite3_column_text(q, 0), "wal") != 0)
            st = tm_srv_fail(err, TM_ERR_IO, 0, "switch to WAL %s: journal mode stays %s", path,
                             (const char *)sqlite3_column_text(q, 0));
        sqlite3_finalize(q);
        if (st == TM_OK) st = exec(db, "PRAGMA synchronous=FULL", "set synchronous=FULL on", path, err);
    }
    if (st != TM_OK) {
        sqlite3_close(db);
        return st;
    }
    *out = db;
    return TM_OK;
}

/* ---- The writer -------------------------------------------------------- */

/* Runs a prepared statement that returns no rows. */
static tm_status run(tm_srv_store *s, int i, const char *what, tm_error *err) {
    sqlite3_stmt *q = s->stmt[i];
    tm_status st = TM_OK;
    if (sqlite3_step(q) != SQLITE_DONE) st = sql_fail(err, s->wdb, what, s->db_path);
    sqlite3_reset(q);
    return st;
}

static int bind_view(sqlite3_stmt *q, int i, tm_srv_view v) {
    return v.ptr ? sqlite3_bind_text64(q, i, v.ptr, v.len, SQLITE_STATIC, SQLITE_UTF8) : sqlite3_bind_null(q, i);
}

/* A NULL value binds NULL, which the NOT NULL constraints refuse. A chunk
 * already stored inserts nothing and counts in b->duplicates. */
static tm_status insert(tm_srv_store *s, submission *b, size_t i, tm_error *err) {
    const tm_srv_record *r = &b->recs[i];
    const int spool = b->spool;
    sqlite3_stmt *q;
    int rc;
    const char *what;
    if (r->kind != TM_SRV_RECORD_CHUNK && r->kind != TM_SRV_RECORD_OUTCOME)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "record %zu: unknown kind %d", i, (int)r->kind);
    if (spool) {
        q = s->stmt[S_SPOOL];
        what = "insert into spool";
        rc = sqlite3_bind_int(q, 1, (int)r->kind) | sqlite3_bind_int64(q, 2, (sqlite3_int64)r->project_id) |
             bind_view(q, 3, r->chunk_id) |
             sqlite3_bind_blob64(q, 4, r->value, r->value_len, SQLITE_STATIC);
    } else if (r->kind == TM_SRV_RECORD_CHUNK) {
        q = s->stmt[S_CHUNK];
        what = "insert into chunks";
        rc = sqlite3_bind_int64(q, 1, (sqlite3_int64)r->received) |
             sqlite3_bind_int64(q, 2, (sqlite3_int64)r->project_id) | bind_view(q, 3, r->chunk_id) |
             sqlite3_bind_int64(q, 4, (sqlite3_int64)r->payload_size) |
             sqlite3_bind_int64(q, 5, (sqlite3_int64)r->raw_size) |
             sqlite3_bind_blob64(q, 6, r->value, r->value_len, SQLITE_STATIC);
    } else {
        q = s->stmt[S_OUTCOME];
        what = "insert into outcomes";
        rc = sqlite3_bind_int64(q, 1, (sqlite3_int64)r->received) |
             sqlite3_bind_int64(q, 2, (sqlite3_int64)r->project_id) |
             sqlite3_bind_text64(q, 3, (const char *)r->value, r->value_len, SQLITE_STATIC, SQLITE_UTF8);
    }
    tm_status st = TM_OK;
    if (rc != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE)
        st = tm_srv_fail(err, TM_ERR_IO, 0, "record %zu: %s in %s: %s", i, what, s->db_path, sqlite3_errmsg(s->wdb));
    else if (q == s->stmt[S_CHUNK] && sqlite3_changes(s->wdb) == 0)
        b->duplicates++;
    sqlite3_reset(q);
    return st;
}

static void fail_all(submission *batch, const tm_error *e) {
    for (submission *b = batch; b; b = b->next) {
        b->st = e->code;
        b->err = *e;
    }
}

/* Commits a batch of submissions in one transaction; returns the number of
 * spool rows it added. Sets every submission's status. */
static int64_t commit_batch(tm_srv_store *s, submission *batch) {
    tm_error e;
    if (run(s, S_BEGIN, "begin a transaction in", &e) != TM_OK) {
        fail_all(batch, &e);
        return 0;
    }
    for (submission *b = batch; b; b = b->next) {
        if (run(s, S_SAVEPOINT, "open a savepoint in", &e) != TM_OK) goto abort;
        b->st = TM_OK;
        b->duplicates = 0;
        for (size_t i = 0; i < b->n && b->st == TM_OK; i++) b->st = insert(s, b, i, &b->err);
        if (b->st != TM_OK && run(s, S_ROLLBACK_TO, "roll back a submission in", &e) != TM_OK) goto abort;
        if (run(s, S_RELEASE, "release a savepoint in", &e) != TM_OK) goto abort;
    }
    if (run(s, S_COMMIT, "commit to", &e) != TM_OK) goto abort;
    int64_t spooled = 0;
    for (submission *b = batch; b; b = b->next)
        if (b->st == TM_OK && b->spool) spooled += (int64_t)b->n;
    return spooled;
abort:
    if (!sqlite3_get_autocommit(s->wdb)) {
        tm_error ignored;
        run(s, S_ROLLBACK, "roll back", &ignored);
    }
    fail_all(batch, &e);
    return 0;
}

static void *writer_main(void *arg) {
    tm_srv_store *s = arg;
    pthread_setname_np(pthread_self(), "tm-store");
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->closing) pthread_cond_wait(&s->work, &s->mu);
        submission *batch = s->head;
        if (!batch) break; /* closing and drained */
        s->head = s->tail = NULL;
        pthread_mutex_unlock(&s->mu);
        const int64_t spooled = commit_batch(s, batch);
        pthread_mutex_lock(&s->mu);
        s->spooled += spooled;
        for (submission *b = batch, *next; b; b = next) {
            next = b->next; /* b may vanish once done is seen */
            if (b->st == TM_OK) s->duplicates += b->duplicates;
            b->done = 1;
            s->backlog--;
        }
        pthread_cond_broadcast(&s->done);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- Opening and closing ----------------------------------------------- */

static void store_free(tm_srv_store *s) {
    for (int i = 0; i < S_COUNT; i++) sqlite3_finalize(s->stmt[i]);
    sqlite3_close(s->wdb);
    sqlite3_close(s->db);
    pthread_mutex_destroy(&s->db_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->work);
    pthread_cond_destroy(&s->done);
    free(s->db_path);
    free(s);
}

static tm_status count_spool(tm_srv_store *s, tm_error *err) {
    sqlite3_stmt *q = NULL;
    tm_status st = TM_OK;
    if (sqlite3_prepare_v2(s->db, "SELECT count(*) FROM spool", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_step(q) != SQLITE_ROW)
        st = sql_fail(err, s->db, "count the spool of", s->db_path);
    else
        s->spooled = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return st;
}

/* Stores written before chunks were unique may hold one chunk several
 * times. The unique index cannot be built over them, so every copy but the
 * first (lowest id) moves to chunks_duplicate, a table of the same columns:
 * nothing is deleted. This runs once, inside a write transaction, so two
 * servers opening one old store do not both migrate it. */
static const char move_duplicates[] =
    "CREATE TABLE IF NOT EXISTS chunks_duplicate AS SELECT * FROM chunks WHERE 0;"
    "CREATE TEMP TABLE first_copy AS SELECT min(id) AS id FROM chunks WHERE chunk_id IS NOT NULL"
    " GROUP BY chunk_id, project_id;"
    "INSERT INTO chunks_duplicate SELECT * FROM chunks"
    " WHERE chunk_id IS NOT NULL AND id NOT IN (SELECT id FROM first_copy);"
    "DELETE FROM chunks WHERE chunk_id IS NOT NULL AND id NOT IN (SELECT id FROM first_copy);"
    "DROP TABLE first_copy;";

/* The first column of the first row, as an integer. */
static tm_status query_int(sqlite3 *db, const char *sql, int64_t *n) {
    sqlite3_stmt *q = NULL;
    const int ok = sqlite3_prepare_v2(db, sql, -1, &q, NULL) == SQLITE_OK && sqlite3_step(q) == SQLITE_ROW;
    if (ok) *n = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return ok ? TM_OK : TM_ERR_IO;
}

static tm_status make_chunks_unique(tm_srv_store *s, tm_error *err) {
    static const char has_index[] = "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'chunks_unique'";
    static const char copies[] = "SELECT count(*) - (SELECT count(*) FROM"
                                 " (SELECT 1 FROM chunks WHERE chunk_id IS NOT NULL GROUP BY chunk_id, project_id))"
                                 " FROM chunks WHERE chunk_id IS NOT NULL";
    int64_t indexed = 0, duplicates = 0;
    if (query_int(s->db, has_index, &indexed) != TM_OK) return sql_fail(err, s->db, "read the schema of", s->db_path);
    if (indexed) return TM_OK;
    tm_status st = exec(s->db, "BEGIN IMMEDIATE", "begin the migration of", s->db_path, err);
    if (st != TM_OK) return st;
    if (query_int(s->db, has_index, &indexed) != TM_OK || query_int(s->db, copies, &duplicates) != TM_OK)
        st = sql_fail(err, s->db, "read the chunks of", s->db_path);
    if (st == TM_OK && !indexed && duplicates > 0)
        st = exec(s->db, move_duplicates, "move duplicate chunks aside in", s->db_path, err);
    if (st == TM_OK && !indexed)
        st = exec(s->db,
                  "CREATE UNIQUE INDEX chunks_unique ON chunks(chunk_id, project_id);"
                  "DROP INDEX IF EXISTS chunks_by_chunk_id;", /* the unique index serves lookups by chunk_id */
                  "index the chunks of", s->db_path, err);
    if (st == TM_OK) st = exec(s->db, "COMMIT", "commit the migration of", s->db_path, err);
    if (st != TM_OK && !sqlite3_get_autocommit(s->db)) sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
    return st;
}

static tm_status start_writer(tm_srv_store *s, tm_error *err) {
    tm_status st = open_conn(s->db_path, 0, &s->wdb, err);
    /* checkpoint every 4 MiB of WAL, whatever the store's page size: short,
     * frequent copies instead of a long one that stalls every commit behind it */
    int64_t page_size = 0;
    if (st == TM_OK && query_int(s->wdb, "PRAGMA page_size", &page_size) != TM_OK)
        st = sql_fail(err, s->wdb, "read the page size of", s->db_path);
    if (st == TM_OK) {
        char sql[64];
        snprintf(sql, sizeof sql, "PRAGMA wal_autocheckpoint=%lld",
                 (long long)(page_size > 0 ? (4 << 20) / page_size : 64));
        st = exec(s->wdb, sql, "set wal_autocheckpoint on", s->db_path, err);
    }
    /* A savepoint's journal (one per submission) stays in memory: it holds
     * pages an earlier submission of the batch changed, and spilled to a
     * temporary file it cost a write, and a truncate, of each at every commit. */
    if (st == TM_OK) st = exec(s->wdb, "PRAGMA temp_store=MEMORY", "set temp_store on", s->db_path, err);
    for (int i = 0; i < S_COUNT && st == TM_OK; i++)
        if (sqlite3_prepare_v3(s->wdb, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->stmt[i], NULL) != SQLITE_OK)
            st = sql_fail(err, s->wdb, "prepare statements for", s->db_path);
    if (st == TM_OK) {
        const int rc = pthread_create(&s->writer, NULL, writer_main, s);
        if (rc != 0) st = tm_srv_fail(err, TM_ERR_IO, 0, "start the writer thread for %s: %s", s->db_path, strerror(rc));
        s->has_writer = rc == 0;
    }
    return st;
}

static tm_status store_open(const char *dir, int readonly, tm_srv_store **out, tm_error *err) {
    *out = NULL;
    tm_status st = readonly ? TM_OK : make_dirs(dir, err);
    if (st != TM_OK) return st;
    tm_srv_store *s = calloc(1, sizeof *s);
    const size_t len = strlen(dir) + sizeof "/" DB_NAME;
    if (!s || !(s->db_path = malloc(len))) {
        free(s);
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory opening the store");
    }
    snprintf(s->db_path, len, "%s/%s", dir, DB_NAME);
    s->readonly = readonly;
    pthread_mutex_init(&s->db_mu, NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->done, NULL);
    st = open_conn(s->db_path, readonly, &s->db, err);
    if (st == TM_OK && !readonly) st = exec(s->db, schema, "create the tables of", s->db_path, err);
    if (st == TM_OK && !readonly) st = make_chunks_unique(s, err);
    if (st == TM_OK) st = count_spool(s, err);
    if (st == TM_OK && !readonly) st = start_writer(s, err);
    if (st != TM_OK) {
        store_free(s);
        return st;
    }
    *out = s;
    return TM_OK;
}

tm_status tm_srv_store_open(const char *dir, tm_srv_store **out, tm_error *err) {
    return store_open(dir, 0, out, err);
}

tm_status tm_srv_store_open_readonly(const char *dir, tm_srv_store **out, tm_error *err) {
    return store_open(dir, 1, out, err);
}

void tm_srv_store_close(tm_srv_store *s) {
    if (!s) return;
    if (s->has_writer) {
        pthread_mutex_lock(&s->mu);
        s->closing = 1;
        pthread_cond_signal(&s->work);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->writer, NULL);
        /* woken puts still touch mu on their way out */
        pthread_mutex_lock(&s->mu);
        while (s->in_put) pthread_cond_wait(&s->done, &s->mu);
        pthread_mutex_unlock(&s->mu);
    }
    store_free(s);
}

/* ---- Writing ----------------------------------------------------------- */

/* Frees the compressed values of packed: those that differ from recs'. */
static void release_packed(tm_srv_record *packed, const tm_srv_record *recs, size_t n) {
    if (!packed) return;
    for (size_t i = 0; i < n; i++)
        if (packed[i].value != recs[i].value) free((void *)packed[i].value);
    free(packed);
}

/* A copy of recs whose chunk values are zstd frames (malloc'd). */
static tm_status compress_chunks(const tm_srv_record *recs, size_t n, tm_srv_record **out, tm_error *err) {
    tm_srv_record *packed = malloc(n * sizeof *packed);
    if (!packed) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory compressing a message");
    memcpy(packed, recs, n * sizeof *packed);
    for (size_t i = 0; i < n; i++) {
        if (recs[i].kind != TM_SRV_RECORD_CHUNK) continue;
        if (!recs[i].value) continue; /* the insert refuses it (message is NOT NULL) */
        size_t cap = ZSTD_compressBound(recs[i].value_len);
        uint8_t *z = malloc(cap);
        size_t len = z ? ZSTD_compress(z, cap, recs[i].value, recs[i].value_len, 1) : 0;
        if (!z || ZSTD_isError(len)) {
            free(z);
            release_packed(packed, recs, n);
            return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory compressing a message");
        }
        packed[i].value = z;
        packed[i].value_len = len;
    }
    *out = packed;
    return TM_OK;
}

tm_status tm_srv_store_put(tm_srv_store *s, const tm_srv_record *recs, size_t n, int spool, tm_error *err) {
    if (s->readonly) return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "store %s was opened read-only", s->db_path);
    if (n == 0) return TM_OK;
    tm_srv_record *packed = NULL;
    if (!spool) {
        tm_status st = compress_chunks(recs, n, &packed, err);
        if (st != TM_OK) return st;
    }
    submission sub = {.recs = packed ? packed : recs, .n = n, .spool = spool};
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        return tm_srv_fail(err, TM_ERR_IO, 0, "store %s is closing", s->db_path);
    }
    if (s->tail) s->tail->next = &sub;
    else s->head = &sub;
    s->tail = &sub;
    s->backlog++;
    s->in_put++;
    pthread_cond_signal(&s->work);
    while (!sub.done) pthread_cond_wait(&s->done, &s->mu);
    if (--s->in_put == 0 && s->closing) pthread_cond_broadcast(&s->done);
    pthread_mutex_unlock(&s->mu);
    release_packed(packed, recs, n);
    if (sub.st != TM_OK && err) *err = sub.err;
    return sub.st;
}

uint64_t tm_srv_store_duplicates(tm_srv_store *s) {
    pthread_mutex_lock(&s->mu);
    const uint64_t n = s->duplicates;
    pthread_mutex_unlock(&s->mu);
    return n;
}

uint64_t tm_srv_store_backlog(tm_srv_store *s) {
    pthread_mutex_lock(&s->mu);
    const uint64_t n = s->backlog;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- The spool --------------------------------------------------------- */

static void free_spooled(tm_srv_spooled *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free(out[i].value);
        out[i].value = NULL;
    }
}

tm_status tm_srv_store_spool_peek(tm_srv_store *s, size_t max, tm_srv_spooled *out, size_t *n_out,
                                  tm_error *err) {
    *n_out = 0;
    if (max == 0) return TM_OK;
    pthread_mutex_lock(&s->db_mu);
    sqlite3_stmt *q = NULL;
    tm_status st = TM_OK;
    size_t n = 0;
    int rc = sqlite3_prepare_v2(s->db, "SELECT id, kind, project_id, message, chunk_id FROM spool ORDER BY id LIMIT ?",
                                -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(q, 1, max > INT64_MAX ? INT64_MAX : (sqlite3_int64)max);
    while (rc == SQLITE_OK && st == TM_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        tm_srv_spooled *e = &out[n];
        e->id = sqlite3_column_int64(q, 0);
        const int kind = sqlite3_column_int(q, 1);
        e->project_id = (uint64_t)sqlite3_column_int64(q, 2);
        const void *v = sqlite3_column_blob(q, 3);
        e->value_len = (size_t)sqlite3_column_bytes(q, 3);
        const char *chunk_id = (const char *)sqlite3_column_text(q, 4);
        const size_t chunk_id_len = (size_t)sqlite3_column_bytes(q, 4);
        e->value = malloc(e->value_len + chunk_id_len + 1);
        if (!e->value) {
            st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory reading spool entry %lld", (long long)e->id);
            break;
        }
        if (e->value_len) memcpy(e->value, v, e->value_len);
        e->chunk_id = (tm_srv_view){NULL, 0};
        if (chunk_id) {
            memcpy(e->value + e->value_len, chunk_id, chunk_id_len);
            e->chunk_id = (tm_srv_view){(const char *)e->value + e->value_len, chunk_id_len};
        }
        n++;
        if (kind != TM_SRV_RECORD_CHUNK && kind != TM_SRV_RECORD_OUTCOME)
            st = tm_srv_fail(err, TM_ERR_MALFORMED, 0, "spool entry %lld in %s has unknown kind %d",
                             (long long)e->id, s->db_path, kind);
        e->kind = (tm_srv_record_kind)kind;
        rc = SQLITE_OK;
    }
    if (st == TM_OK && rc != SQLITE_DONE) st = sql_fail(err, s->db, "read the spool of", s->db_path);
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_mu);
    if (st != TM_OK) {
        free_spooled(out, n);
        return st;
    }
    *n_out = n;
    return TM_OK;
}

tm_status tm_srv_store_spool_delete(tm_srv_store *s, int64_t up_to_id, tm_error *err) {
    pthread_mutex_lock(&s->db_mu);
    sqlite3_stmt *q = NULL;
    tm_status st = TM_OK;
    if (sqlite3_prepare_v2(s->db, "DELETE FROM spool WHERE id <= ?", -1, &q, NULL) != SQLITE_OK ||
        sqlite3_bind_int64(q, 1, up_to_id) != SQLITE_OK || sqlite3_step(q) != SQLITE_DONE)
        st = sql_fail(err, s->db, "delete from the spool of", s->db_path);
    const int64_t deleted = st == TM_OK ? sqlite3_changes64(s->db) : 0;
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->db_mu);
    pthread_mutex_lock(&s->mu);
    s->spooled -= deleted;
    pthread_mutex_unlock(&s->mu);
    return st;
}

uint64_t tm_srv_store_spool_count(tm_srv_store *s) {
    pthread_mutex_lock(&s->mu);
    const uint64_t n = s->spooled > 0 ? (uint64_t)s->spooled : 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- Reading chunks back ----------------------------------------------- */

tm_status tm_srv_store_each_chunk(tm_srv_store *s, const char *chunk_id, tm_srv_chunk_fn fn, void *ctx,
                                  tm_error *err) {
    sqlite3 *db = NULL;
    tm_status st = open_conn(s->db_path, 1, &db, err);
    if (st != TM_OK) return st;
    sqlite3_stmt *q = NULL;
    int rc = sqlite3_prepare_v2(db,
                                chunk_id ? "SELECT id, received, project_id, chunk_id, payload_size, raw_size, message"
                                           " FROM chunks WHERE chunk_id = ? ORDER BY id"
                                         : "SELECT id, received, project_id, chunk_id, payload_size, raw_size, message"
                                           " FROM chunks ORDER BY id",
                                -1, &q, NULL);
    if (rc == SQLITE_OK && chunk_id) rc = sqlite3_bind_text(q, 1, chunk_id, -1, SQLITE_STATIC);
    int stop = 0;
    while (rc == SQLITE_OK && !stop && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        tm_srv_stored_chunk c;
        c.id = sqlite3_column_int64(q, 0);
        c.received = (uint64_t)sqlite3_column_int64(q, 1);
        c.project_id = (uint64_t)sqlite3_column_int64(q, 2);
        c.chunk_id.ptr = (const char *)sqlite3_column_text(q, 3);
        c.chunk_id.len = (size_t)sqlite3_column_bytes(q, 3);
        c.payload_size = (size_t)sqlite3_column_int64(q, 4);
        c.raw_size = (size_t)sqlite3_column_int64(q, 5);
        const void *z = sqlite3_column_blob(q, 6);
        size_t z_len = (size_t)sqlite3_column_bytes(q, 6);
        /* A row that does not decode goes to fn too, which skips or reports
         * it: the rows after it are still read. */
        unsigned long long len = ZSTD_getFrameContentSize(z, z_len);
        void *message = NULL;
        c.unreadable = NULL;
        if (len == ZSTD_CONTENTSIZE_ERROR || len == ZSTD_CONTENTSIZE_UNKNOWN || len >= SIZE_MAX)
            c.unreadable = "the stored message is not a zstd frame of known size";
        else if (!(message = malloc(len ? len : 1)))
            c.unreadable = "the stored message is too large to decode here";
        else if (ZSTD_isError(ZSTD_decompress(message, len, z, z_len)))
            c.unreadable = "the stored message does not decompress";
        c.message = c.unreadable ? NULL : message;
        c.message_len = c.unreadable ? 0 : len;
        stop = fn(ctx, &c);
        free(message);
        rc = SQLITE_OK;
    }
    if (st == TM_OK && !stop && rc != SQLITE_DONE) st = sql_fail(err, db, "read the chunks of", s->db_path);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return st; /* an early stop by fn is not an error */
}

/* ---- The generated project key ----------------------------------------- */

/* Reads a key file already open as fd: TM_SRV_KEY_HEX lowercase hex digits,
 * an optional newline, and nothing readable by anyone but its owner. */
static tm_status read_key(int fd, const char *path, char key[TM_SRV_KEY_HEX + 1], tm_error *err) {
    struct stat sb;
    char text[TM_SRV_KEY_HEX + 2];
    if (fstat(fd, &sb) != 0) return tm_srv_fail(err, TM_ERR_IO, 0, "stat %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode)) return tm_srv_fail(err, TM_ERR_IO, 0, "%s is not a regular file", path);
    if (sb.st_mode & 077)
        return tm_srv_fail(err, TM_ERR_IO, 0, "%s holds a secret but has mode %04o: chmod 600 it", path,
                           (unsigned)(sb.st_mode & 07777));
    ssize_t n;
    size_t len = 0;
    while (len < sizeof text && (n = read(fd, text + len, sizeof text - len)) != 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return tm_srv_fail(err, TM_ERR_IO, 0, "read %s: %s", path, strerror(errno));
        len += (size_t)n;
    }
    int valid = len == TM_SRV_KEY_HEX || (len == TM_SRV_KEY_HEX + 1 && text[TM_SRV_KEY_HEX] == '\n');
    for (size_t i = 0; valid && i < TM_SRV_KEY_HEX; i++)
        valid = (text[i] >= '0' && text[i] <= '9') || (text[i] >= 'a' && text[i] <= 'f');
    if (!valid)
        return tm_srv_fail(err, TM_ERR_MALFORMED, 0,
                           "%s does not hold a key (%d lowercase hex digits): remove it to get a new one", path,
                           TM_SRV_KEY_HEX);
    memcpy(key, text, TM_SRV_KEY_HEX);
    key[TM_SRV_KEY_HEX] = 0;
    return TM_OK;
}

/* Writes a new random key to a temporary file (mode 0600, synced) and
 * links it to path, which fails rather than replace a key another server
 * wrote first: *lost_race is then set and nothing else happens. */
static tm_status create_key(const char *dir, const char *path, char key[TM_SRV_KEY_HEX + 1], int *lost_race,
                            tm_error *err) {
    *lost_race = 0;
    tm_status st = tm_srv_random_key(key, err);
    if (st != TM_OK) return st;
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s/." TM_SRV_KEY_FILE ".XXXXXX", dir) >= sizeof tmp)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "store path too long: %s", dir);
    int fd = mkstemp(tmp); /* mode 0600 */
    if (fd < 0) return tm_srv_fail(err, TM_ERR_IO, 0, "create a key file in %s: %s", dir, strerror(errno));
    char line[TM_SRV_KEY_HEX + 1];
    memcpy(line, key, TM_SRV_KEY_HEX);
    line[TM_SRV_KEY_HEX] = '\n';
    errno = 0; /* a short write sets none */
    if (write(fd, line, sizeof line) != (ssize_t)sizeof line || fsync(fd) != 0)
        st = tm_srv_fail(err, TM_ERR_IO, 0, "write %s: %s", tmp, strerror(errno ? errno : EIO));
    if (close(fd) != 0 && st == TM_OK) st = tm_srv_fail(err, TM_ERR_IO, 0, "write %s: %s", tmp, strerror(errno));
    if (st == TM_OK && link(tmp, path) != 0) {
        if (errno == EEXIST) *lost_race = 1;
        else st = tm_srv_fail(err, TM_ERR_IO, 0, "create %s: %s", path, strerror(errno));
    }
    unlink(tmp);
    if (st == TM_OK && !*lost_race) { /* the new name survives a power loss too */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0 || fsync(dfd) != 0) st = tm_srv_fail(err, TM_ERR_IO, 0, "sync %s: %s", dir, strerror(errno));
        if (dfd >= 0) close(dfd);
    }
    return st;
}

tm_status tm_srv_store_key(const char *dir, char key[TM_SRV_KEY_HEX + 1], int *created, tm_error *err) {
    *created = 0;
    tm_status st = make_dirs(dir, err);
    if (st != TM_OK) return st;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, TM_SRV_KEY_FILE) >= sizeof path)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "store path too long: %s", dir);
    for (;;) {
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0) {
            st = read_key(fd, path, key, err);
            close(fd);
            return st;
        }
        if (errno != ENOENT) return tm_srv_fail(err, TM_ERR_IO, 0, "open %s: %s", path, strerror(errno));
        int lost_race;
        st = create_key(dir, path, key, &lost_race, err);
        if (st != TM_OK || !lost_race) {
            *created = st == TM_OK;
            return st;
        }
    }
}
