/*
 * tserve.h — plumbing for the suites that drive `tracemill serve` as a
 * process (test_serve.c, test_record_upload.c): formatted strings, scratch
 * directories, shell commands with their output, the server started from a
 * YAML configuration and stopped with SIGTERM, and row counts in its store.
 *
 * Unlike tutil.c these assert with Criterion: a failure ends the test.
 */
#ifndef TM_TSERVE_H
#define TM_TSERVE_H

#include <stdio.h>
#include <sys/types.h>

/* vasprintf that asserts; free() the result. */
char *ts_fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));

/* mkdtemp of /tmp/PREFIX_XXXXXX; free() the result. */
char *ts_temp_dir(const char *prefix);

/* Writes len bytes to path, asserting. */
void ts_write_file(const char *path, const void *data, size_t len);

/* Runs cmd with the shell; returns its stdout (malloc'd, NUL-terminated)
 * and its exit code in *code (-1 if it did not exit). */
char *ts_run_capture(const char *cmd, int *code);

typedef struct ts_server {
    pid_t pid;
    int port;
    FILE *out; /* the server's stdout */
    char *dir, *store;
    char url[300];  /* the banner's http://HOST:PORT */
    char dsn[512]; /* the banner's first DSN line */
} ts_server;

/* Starts `tracemill serve --config DIR/config.yml` listening on
 * 127.0.0.1:port (0: any free port) with its store in DIR/store and the
 * YAML given added, and waits for its DSN banner. The server dies with the
 * test process. */
ts_server ts_server_start(const char *dir, int port, const char *yaml);
/* The same listening on `listen` (HOST:PORT, [IPv6]:PORT). */
ts_server ts_server_start_at(const char *dir, const char *listen, const char *yaml);

/* SIGTERM, then the exit status (a graceful stop exits 0); -1 if the server
 * did not exit. The directory stays; ts_server_free removes it. */
int ts_server_stop(ts_server *s);

/* Stops the server if it runs, removes its directory, frees *s. */
void ts_server_free(ts_server *s);

/* The single integer the SQL query gives on the store's database. */
int ts_count_rows(const char *store, const char *sql);

/* ---- raw sockets to a server on 127.0.0.1 ---- */

/* A monotonic clock in seconds. */
double ts_now_s(void);
/* A connected socket to 127.0.0.1:port (asserts). */
int ts_dial(int port);
/* Bytes of complete HTTP answers at the start of p[0..n) (by their
 * Content-Length; a 100 Continue has no body): 0 while the first is incomplete. */
size_t ts_answer_len(const char *p, size_t n);
/* Reads from fd until `answers` whole answers are in (0: no such bound),
 * the server closes, or `seconds` pass; returns what came (malloc'd,
 * NUL-terminated) and sets *closed when the server closed the connection. */
char *ts_read_answers(int fd, int answers, double seconds, int *closed);

#endif
