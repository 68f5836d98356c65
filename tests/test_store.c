/*
 * test_store.c — server/store.c, the local SQLite store: records written by
 * put come back from each_chunk (and the outcomes and spool tables) exactly
 * once, a chunk put again is skipped and counted (and an older store's
 * copies are moved aside), concurrent puts all land, a failing submission stores nothing of
 * itself, the spool is FIFO with durable deletes, everything survives a
 * reopen, and every put acknowledged before a kill -9 is on disk afterwards.
 * Each test works in its own mkdtemp directory under /tmp and removes it.
 */
#define _XOPEN_SOURCE 700 /* mkdtemp, nftw, fork, kill */
#include <criterion/criterion.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server.h"

/* ---- Helpers ----------------------------------------------------------- */

static char dir[64];

static void make_dir(void) {
    snprintf(dir, sizeof dir, "/tmp/tm_test_store_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void remove_dir(void) {
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(store, .init = make_dir, .fini = remove_dir);

static tm_srv_view view(const char *s) {
    return (tm_srv_view){s, s ? strlen(s) : 0};
}

static tm_srv_record chunk(uint64_t project, uint64_t received, const char *chunk_id, const char *value) {
    return (tm_srv_record){.kind = TM_SRV_RECORD_CHUNK, .project_id = project, .received = received,
                           .chunk_id = view(chunk_id), .payload_size = strlen(value) * 10,
                           .raw_size = strlen(value) * 100, .value = (const uint8_t *)value,
                           .value_len = strlen(value)};
}

static tm_srv_record outcome(uint64_t project, uint64_t received, const char *json) {
    return (tm_srv_record){.kind = TM_SRV_RECORD_OUTCOME, .project_id = project, .received = received,
                           .value = (const uint8_t *)json, .value_len = strlen(json)};
}

static tm_srv_store *open_store(void) {
    tm_srv_store *s = NULL;
    tm_error err;
    cr_assert_eq(tm_srv_store_open(dir, &s, &err), TM_OK, "%s", err.message);
    cr_assert_not_null(s);
    return s;
}

static void put(tm_srv_store *s, const tm_srv_record *recs, size_t n, int spool) {
    tm_error err;
    cr_assert_eq(tm_srv_store_put(s, recs, n, spool, &err), TM_OK, "%s", err.message);
}

/* The chunks each_chunk reports, flattened to "id|received|project|chunk_id|payload|raw|message\n". */
typedef struct seen {
    char text[8192];
    size_t len;
    int calls, stop_at;
} seen;

static int collect(void *ctx, const tm_srv_stored_chunk *c) {
    seen *s = ctx;
    int n = snprintf(s->text + s->len, sizeof s->text - s->len, "%lld|%llu|%llu|%.*s|%zu|%zu|%.*s\n",
                     (long long)c->id, (unsigned long long)c->received, (unsigned long long)c->project_id,
                     c->chunk_id.ptr ? (int)c->chunk_id.len : 4, c->chunk_id.ptr ? c->chunk_id.ptr : "NULL",
                     c->payload_size, c->raw_size, (int)c->message_len, c->message ? (const char *)c->message : "");
    cr_assert_lt((size_t)n, sizeof s->text - s->len);
    s->len += (size_t)n;
    return ++s->calls == s->stop_at ? 7 : 0;
}

static const char *chunks(tm_srv_store *s, const char *chunk_id) {
    static seen out;
    memset(&out, 0, sizeof out);
    tm_error err;
    cr_assert_eq(tm_srv_store_each_chunk(s, chunk_id, collect, &out, &err), TM_OK, "%s", err.message);
    return out.text;
}

/* Runs a one-column text query on the store's database directly. */
static const char *query(const char *sql) {
    static char out[8192];
    char path[128];
    snprintf(path, sizeof path, "%s/tracemill.db", dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *q;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    size_t len = 0;
    out[0] = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        int n = snprintf(out + len, sizeof out - len, "%s\n", (const char *)sqlite3_column_text(q, 0));
        cr_assert_lt((size_t)n, sizeof out - len);
        len += (size_t)n;
    }
    sqlite3_finalize(q);
    sqlite3_close(db);
    return out;
}

/* ---- Round trips ------------------------------------------------------- */

Test(store, put_and_each_chunk_round_trip) {
    tm_srv_store *s = open_store();
    const tm_srv_record recs[] = {
        chunk(42, 1771278043, "c1", "first"),
        outcome(42, 1771278044, "{\"outcome\":3}"),
        chunk(18446744073709551615ull, 18446744073709551615ull, NULL, "second"),
        chunk(7, 0, "", ""),
    };
    put(s, recs, 4, 0);
    cr_assert_str_eq(chunks(s, NULL),
                     "1|1771278043|42|c1|50|500|first\n"
                     "2|18446744073709551615|18446744073709551615|NULL|60|600|second\n"
                     "3|0|7||0|0|\n");
    cr_assert_str_eq(query("SELECT received || '|' || project_id || '|' || message FROM outcomes"),
                     "1771278044|42|{\"outcome\":3}\n");
    cr_assert_str_eq(query("SELECT count(*) FROM spool"), "0\n");
    cr_assert_eq(tm_srv_store_spool_count(s), 0);
    cr_assert_eq(tm_srv_store_backlog(s), 0);
    tm_srv_store_close(s);
}

Test(store, each_chunk_filters_by_chunk_id_and_stops) {
    tm_srv_store *s = open_store();
    const tm_srv_record a[] = {chunk(1, 10, "a", "A1"), chunk(1, 11, "b", "B1")};
    const tm_srv_record b[] = {chunk(2, 12, "a", "A2"), chunk(2, 13, NULL, "N")};
    put(s, a, 2, 0);
    put(s, b, 2, 0);
    cr_assert_str_eq(chunks(s, "a"), "1|10|1|a|20|200|A1\n3|12|2|a|20|200|A2\n");
    cr_assert_str_eq(chunks(s, "b"), "2|11|1|b|20|200|B1\n");
    cr_assert_str_eq(chunks(s, "zz"), "");

    seen out = {.stop_at = 2};
    tm_error err;
    cr_assert_eq(tm_srv_store_each_chunk(s, NULL, collect, &out, &err), TM_OK, "stopping early is not an error");
    cr_assert_eq(out.calls, 2);
    tm_srv_store_close(s);
}

Test(store, empty_put_and_close_null) {
    tm_srv_store *s = open_store();
    put(s, NULL, 0, 0);
    cr_assert_str_eq(chunks(s, NULL), "");
    tm_srv_store_close(s);
    tm_srv_store_close(NULL);
}

/* ---- One chunk per (project, chunk_id) --------------------------------- */

Test(store, a_chunk_is_stored_once_per_project) {
    tm_srv_store *s = open_store();
    const tm_srv_record first[] = {chunk(1, 10, "c", "first"), outcome(1, 10, "{}")};
    const tm_srv_record again[] = {chunk(1, 11, "c", "again"), outcome(1, 11, "{}")};
    put(s, first, 2, 0);
    put(s, again, 2, 0);
    put(s, again, 2, 0);
    cr_assert_eq(tm_srv_store_duplicates(s), 2);
    /* twice in one put; the same id in another project is another chunk;
     * chunks without an id are never duplicates */
    const tm_srv_record mixed[] = {chunk(2, 12, "c", "other project"), chunk(2, 13, "c", "twice"),
                                   chunk(3, 14, NULL, "n1"), chunk(3, 15, NULL, "n2")};
    put(s, mixed, 4, 0);
    cr_assert_eq(tm_srv_store_duplicates(s), 3);
    /* a submission that fails counts none of its duplicates */
    tm_srv_record failing[] = {chunk(1, 16, "c", "dup"), chunk(1, 17, "d", "bad")};
    failing[1].value = NULL;
    tm_error err;
    cr_assert_eq(tm_srv_store_put(s, failing, 2, 0, &err), TM_ERR_IO);
    cr_assert_eq(tm_srv_store_duplicates(s), 3);
    /* the spool keeps every record: Kafka delivery is at least once */
    put(s, again, 1, 1);
    put(s, again, 1, 1);
    cr_assert_eq(tm_srv_store_spool_count(s), 2);
    cr_assert_str_eq(chunks(s, NULL), "1|10|1|c|50|500|first\n"
                                      "2|12|2|c|130|1300|other project\n"
                                      "3|14|3|NULL|20|200|n1\n"
                                      "4|15|3|NULL|20|200|n2\n");
    cr_assert_str_eq(query("SELECT count(*) FROM outcomes"), "3\n");
    tm_srv_store_close(s);
}

/* A store from before the unique index, holding one chunk three times
 * and another twice: the first copy of each stays, the later ones move to
 * chunks_duplicate, and the store then refuses new copies. */
Test(store, old_store_with_duplicates_is_migrated) {
    char path[128];
    snprintf(path, sizeof path, "%s/tracemill.db", dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
    cr_assert_eq(sqlite3_exec(db,
                              "CREATE TABLE chunks(id INTEGER PRIMARY KEY, received INTEGER NOT NULL,"
                              " project_id INTEGER NOT NULL, chunk_id TEXT, payload_size INTEGER NOT NULL,"
                              " raw_size INTEGER NOT NULL, message BLOB NOT NULL);"
                              "CREATE INDEX chunks_by_chunk_id ON chunks(chunk_id);"
                              "INSERT INTO chunks(received, project_id, chunk_id, payload_size, raw_size, message)"
                              " VALUES (1, 1, 'a', 0, 0, x'00'), (2, 1, 'a', 0, 0, x'00'), (3, 2, 'a', 0, 0, x'00'),"
                              " (4, 1, 'b', 0, 0, x'00'), (5, 1, 'a', 0, 0, x'00'), (6, 1, 'b', 0, 0, x'00'),"
                              " (7, 1, NULL, 0, 0, x'00'), (8, 1, NULL, 0, 0, x'00');",
                              NULL, NULL, NULL),
                 SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);

    tm_srv_store *s = open_store();
    cr_assert_str_eq(query("SELECT group_concat(received) FROM (SELECT received FROM chunks ORDER BY id)"),
                     "1,3,4,7,8\n");
    cr_assert_str_eq(query("SELECT group_concat(received) FROM (SELECT received FROM chunks_duplicate ORDER BY id)"),
                     "2,5,6\n");
    cr_assert_str_eq(query("SELECT group_concat(name) FROM (SELECT name FROM sqlite_master WHERE type = 'index'"
                           " AND tbl_name = 'chunks' ORDER BY name)"),
                     "chunks_unique\n");
    const tm_srv_record recs[] = {chunk(1, 9, "a", "new copy"), chunk(1, 10, "e", "new")};
    put(s, recs, 2, 0);
    cr_assert_eq(tm_srv_store_duplicates(s), 1);
    tm_srv_store_close(s);

    s = open_store(); /* once migrated, opening changes nothing */
    tm_srv_store_close(s);
    cr_assert_str_eq(query("SELECT count(*) || ' ' || (SELECT count(*) FROM chunks_duplicate) FROM chunks"), "6 3\n");
}

/* ---- The spool --------------------------------------------------------- */

static void check_peek(tm_srv_store *s, size_t max, size_t want_n, const char *want) {
    tm_srv_spooled e[8];
    size_t n = 99;
    tm_error err;
    cr_assert_eq(tm_srv_store_spool_peek(s, max, e, &n, &err), TM_OK, "%s", err.message);
    cr_assert_eq(n, want_n);
    char got[512] = "";
    size_t len = 0;
    for (size_t i = 0; i < n; i++) {
        len += (size_t)snprintf(got + len, sizeof got - len, "%lld:%d:%llu:%.*s;", (long long)e[i].id,
                                (int)e[i].kind, (unsigned long long)e[i].project_id, (int)e[i].value_len,
                                (const char *)e[i].value);
        free(e[i].value);
    }
    cr_assert_str_eq(got, want);
}

Test(store, spool_put_peek_delete_in_order) {
    tm_srv_store *s = open_store();
    const tm_srv_record one[] = {chunk(5, 1, "x", "m1"), outcome(6, 2, "o2")};
    const tm_srv_record two[] = {chunk(7, 3, NULL, "m3")};
    put(s, one, 2, 1);
    put(s, two, 1, 1);
    cr_assert_str_eq(chunks(s, NULL), ""); /* spooled records are not chunks */
    cr_assert_str_eq(query("SELECT count(*) FROM outcomes"), "0\n");
    cr_assert_str_eq(query("SELECT id || ':' || kind || ':' || coalesce(chunk_id, 'NULL') FROM spool ORDER BY id"),
                     "1:0:x\n2:1:NULL\n3:0:NULL\n");
    cr_assert_eq(tm_srv_store_spool_count(s), 3);

    check_peek(s, 2, 2, "1:0:5:m1;2:1:6:o2;");
    check_peek(s, 8, 3, "1:0:5:m1;2:1:6:o2;3:0:7:m3;");
    check_peek(s, 0, 0, "");
    tm_error err;
    cr_assert_eq(tm_srv_store_spool_delete(s, 1, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_srv_store_spool_count(s), 2);
    check_peek(s, 8, 2, "2:1:6:o2;3:0:7:m3;");
    cr_assert_eq(tm_srv_store_spool_delete(s, 3, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_srv_store_spool_count(s), 0);
    check_peek(s, 8, 0, "");

    /* ids keep growing once the spool has emptied */
    put(s, two, 1, 1);
    check_peek(s, 8, 1, "4:0:7:m3;");
    cr_assert_eq(tm_srv_store_spool_count(s), 1);
    tm_srv_store_close(s);
}

Test(store, reopen_keeps_everything) {
    tm_srv_store *s = open_store();
    const tm_srv_record recs[] = {chunk(1, 100, "c", "kept"), outcome(1, 101, "{}")};
    put(s, recs, 2, 0);
    put(s, recs, 2, 1);
    tm_srv_store_close(s);

    s = open_store();
    cr_assert_str_eq(chunks(s, NULL), "1|100|1|c|40|400|kept\n");
    cr_assert_eq(tm_srv_store_spool_count(s), 2);
    check_peek(s, 8, 2, "1:0:1:kept;2:1:1:{};");
    put(s, recs, 1, 0); /* already stored before the reopen */
    cr_assert_eq(tm_srv_store_duplicates(s), 1);
    tm_srv_store_close(s);

    tm_error err;
    cr_assert_eq(tm_srv_store_open_readonly(dir, &s, &err), TM_OK, "%s", err.message);
    cr_assert_str_eq(chunks(s, NULL), "1|100|1|c|40|400|kept\n");
    cr_assert_eq(tm_srv_store_spool_count(s), 2);
    check_peek(s, 1, 1, "1:0:1:kept;");
    cr_assert_str_eq(query("SELECT count(*) FROM outcomes"), "1\n");
    tm_srv_store_close(s);
}

/* ---- Concurrency ------------------------------------------------------- */

#define THREADS 8
#define PUTS 200

typedef struct worker {
    tm_srv_store *s;
    int t;
    int bad_every; /* 0: all puts good; k: every k-th put carries a NULL value */
    int failures;
} worker;

static void *work(void *arg) {
    worker *w = arg;
    for (int i = 0; i < PUTS; i++) {
        char id[32], value[32];
        snprintf(id, sizeof id, "t%d-%d", w->t, i);
        snprintf(value, sizeof value, "v%d-%d", w->t, i);
        tm_srv_record recs[2] = {chunk((uint64_t)w->t, (uint64_t)i, id, value), chunk(0, 0, id, value)};
        const int bad = w->bad_every && i % w->bad_every == 0;
        if (bad) recs[1].value = NULL;
        tm_error err;
        const tm_status st = tm_srv_store_put(w->s, recs, bad ? 2 : 1, 0, &err);
        if (st != (bad ? TM_ERR_IO : TM_OK)) w->failures++;
    }
    return NULL;
}

typedef struct tally {
    int count[THREADS][PUTS];
    int other;
} tally;

static int count_chunk(void *ctx, const tm_srv_stored_chunk *c) {
    tally *t = ctx;
    int th, i;
    char id[32];
    snprintf(id, sizeof id, "%.*s", (int)c->chunk_id.len, c->chunk_id.ptr);
    char value[32];
    snprintf(value, sizeof value, "%.*s", (int)c->message_len, (const char *)c->message);
    if (sscanf(id, "t%d-%d", &th, &i) == 2 && th >= 0 && th < THREADS && i >= 0 && i < PUTS &&
        (int)c->project_id == th && (int)c->received == i && value[0] == 'v' && strcmp(value + 1, id + 1) == 0)
        t->count[th][i]++;
    else
        t->other++;
    return 0;
}

static void run_workers(tm_srv_store *s, int bad_every) {
    worker w[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        w[t] = (worker){.s = s, .t = t, .bad_every = bad_every};
        cr_assert_eq(pthread_create(&th[t], NULL, work, &w[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        cr_assert_eq(w[t].failures, 0, "thread %d", t);
    }
    cr_assert_eq(tm_srv_store_backlog(s), 0);
    static tally tl;
    memset(&tl, 0, sizeof tl);
    tm_error err;
    cr_assert_eq(tm_srv_store_each_chunk(s, NULL, count_chunk, &tl, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tl.other, 0);
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < PUTS; i++) {
            const int want = bad_every && i % bad_every == 0 ? 0 : 1;
            cr_assert_eq(tl.count[t][i], want, "t%d-%d stored %d times", t, i, tl.count[t][i]);
        }
}

Test(store, concurrent_puts_all_stored_exactly_once) {
    tm_srv_store *s = open_store();
    run_workers(s, 0);
    tm_srv_store_close(s);
    cr_assert_str_eq(query("SELECT count(*) FROM chunks"), "1600\n");
}

Test(store, failing_submissions_do_not_disturb_concurrent_ones) {
    tm_srv_store *s = open_store();
    run_workers(s, 3);
    tm_srv_store_close(s);
    cr_assert_str_eq(query("SELECT count(*) FROM chunks"), "1064\n"); /* 8 * (200 - 67) */
}

/* ---- Failures ---------------------------------------------------------- */

Test(store, failing_put_stores_nothing_of_itself) {
    tm_srv_store *s = open_store();
    tm_srv_record recs[] = {chunk(1, 1, "a", "good"), chunk(1, 2, "b", "bad")};
    recs[1].value = NULL;
    tm_error err;
    cr_assert_eq(tm_srv_store_put(s, recs, 2, 0, &err), TM_ERR_IO);
    cr_assert(strstr(err.message, "record 1: insert into chunks"), "%s", err.message);
    cr_assert(strstr(err.message, "NOT NULL"), "%s", err.message);
    cr_assert(strstr(err.message, dir), "%s", err.message);
    cr_assert_eq(tm_srv_store_put(s, recs, 2, 1, &err), TM_ERR_IO);
    cr_assert(strstr(err.message, "record 1: insert into spool"), "%s", err.message);

    recs[1] = chunk(1, 2, "b", "bad");
    recs[1].kind = (tm_srv_record_kind)9;
    cr_assert_eq(tm_srv_store_put(s, recs, 2, 0, &err), TM_ERR_INVALID_ARG);
    cr_assert_str_eq(err.message, "record 1: unknown kind 9");

    cr_assert_str_eq(chunks(s, NULL), "");
    cr_assert_eq(tm_srv_store_spool_count(s), 0);
    put(s, recs, 1, 0); /* the store still works */
    cr_assert_str_eq(chunks(s, NULL), "1|1|1|a|40|400|good\n");
    tm_srv_store_close(s);
}

Test(store, open_errors_name_the_path) {
    char file[128], sub[160];
    snprintf(file, sizeof file, "%s/plain", dir);
    FILE *f = fopen(file, "w");
    cr_assert_not_null(f);
    fclose(f);
    snprintf(sub, sizeof sub, "%s/store", file);
    tm_srv_store *s = (tm_srv_store *)1;
    tm_error err;
    cr_assert_eq(tm_srv_store_open(sub, &s, &err), TM_ERR_IO);
    cr_assert_null(s);
    cr_assert(strstr(err.message, file), "%s", err.message);
    cr_assert_eq(tm_srv_store_open(file, &s, &err), TM_ERR_IO);
    cr_assert(strstr(err.message, "is not a directory"), "%s", err.message);

    snprintf(sub, sizeof sub, "%s/missing", dir);
    cr_assert_eq(tm_srv_store_open_readonly(sub, &s, &err), TM_ERR_IO);
    cr_assert_null(s);
    cr_assert(strstr(err.message, sub), "%s", err.message);

    /* nested directories are created */
    snprintf(sub, sizeof sub, "%s/a/b/c", dir);
    cr_assert_eq(tm_srv_store_open(sub, &s, &err), TM_OK, "%s", err.message);
    tm_srv_store_close(s);
    snprintf(sub, sizeof sub, "%s/a/b/c/tracemill.db", dir);
    cr_assert_eq(access(sub, R_OK), 0);
}

Test(store, readonly_store_refuses_writes) {
    tm_srv_store *s = open_store();
    const tm_srv_record recs[] = {chunk(1, 1, "a", "x")};
    put(s, recs, 1, 1);
    tm_srv_store_close(s);

    tm_error err;
    cr_assert_eq(tm_srv_store_open_readonly(dir, &s, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_srv_store_put(s, recs, 1, 0, &err), TM_ERR_INVALID_ARG);
    cr_assert(strstr(err.message, "read-only"), "%s", err.message);
    cr_assert_eq(tm_srv_store_spool_delete(s, 1, &err), TM_ERR_IO);
    cr_assert(strstr(err.message, "delete from the spool"), "%s", err.message);
    cr_assert_eq(tm_srv_store_spool_count(s), 1);
    tm_srv_store_close(s);
    cr_assert_str_eq(query("SELECT count(*) FROM spool"), "1\n");
}

/* ---- Crash durability -------------------------------------------------- */

#define CRASH_THREADS 4
#define KILL_AFTER 200

typedef struct crasher {
    tm_srv_store *s;
    int t, fd;
} crasher;

static void *crash_work(void *arg) {
    crasher *c = arg;
    for (int k = c->t;; k += CRASH_THREADS) {
        char id[32], line[32];
        snprintf(id, sizeof id, "k%d", k);
        const tm_srv_record rec = chunk(1, (uint64_t)k, id, id);
        if (tm_srv_store_put(c->s, &rec, 1, 0, NULL) != TM_OK) _exit(3);
        const int n = snprintf(line, sizeof line, "acked %d\n", k);
        if (write(c->fd, line, (size_t)n) != n) _exit(4); /* < PIPE_BUF: never interleaved */
    }
    return NULL;
}

static int count_k(void *ctx, const tm_srv_stored_chunk *c) {
    int *counts = ctx, k;
    char id[32];
    snprintf(id, sizeof id, "%.*s", (int)c->chunk_id.len, c->chunk_id.ptr);
    cr_assert_eq(sscanf(id, "k%d", &k), 1, "%s", id);
    cr_assert(k >= 0 && k < 1000000, "%s", id);
    counts[k]++;
    return 0;
}

Test(store, acknowledged_puts_survive_kill_9) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    const pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        tm_srv_store *s = NULL;
        if (tm_srv_store_open(dir, &s, NULL) != TM_OK) _exit(2);
        crasher c[CRASH_THREADS];
        pthread_t th[CRASH_THREADS];
        for (int t = 0; t < CRASH_THREADS; t++) {
            c[t] = (crasher){s, t, fds[1]};
            if (pthread_create(&th[t], NULL, crash_work, &c[t]) != 0) _exit(5);
        }
        pthread_join(th[0], NULL); /* never returns: the parent kills us */
        _exit(6);
    }
    close(fds[1]);
    FILE *in = fdopen(fds[0], "r");
    cr_assert_not_null(in);
    static char acked[1000000];
    int n_acked = 0, k;
    char line[64];
    while (fgets(line, sizeof line, in)) {
        cr_assert_eq(sscanf(line, "acked %d", &k), 1, "%s", line);
        cr_assert(k >= 0 && k < 1000000);
        acked[k] = 1;
        if (++n_acked == KILL_AFTER) kill(pid, SIGKILL);
    }
    fclose(in);
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child status %d", status);
    cr_assert_geq(n_acked, KILL_AFTER);

    tm_srv_store *s = open_store();
    static int counts[1000000];
    tm_error err;
    cr_assert_eq(tm_srv_store_each_chunk(s, NULL, count_k, counts, &err), TM_OK, "%s", err.message);
    int stored = 0;
    for (k = 0; k < 1000000; k++) {
        cr_assert_leq(counts[k], 1, "k%d stored %d times", k, counts[k]);
        if (acked[k]) cr_assert_eq(counts[k], 1, "acknowledged k%d is missing", k);
        stored += counts[k];
    }
    cr_assert_geq(stored, n_acked);
    cr_log_info("kill -9 after %d acknowledged puts: %d stored", n_acked, stored);
    tm_srv_store_close(s);
}
