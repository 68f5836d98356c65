/*
 * tserve.c — the server-process plumbing declared in tserve.h: starting and
 * stopping `tracemill serve` (TM_CLI, from the build), shell commands, and
 * reading counts back from its SQLite store.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tserve.h"

#include <criterion/criterion.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tutil.h"

char *ts_fmt(const char *f, ...) {
    char *s = NULL;
    va_list ap;
    va_start(ap, f);
    cr_assert(vasprintf(&s, f, ap) >= 0);
    va_end(ap);
    return s;
}

char *ts_temp_dir(const char *prefix) {
    char *dir = ts_fmt("/tmp/%s_XXXXXX", prefix);
    cr_assert(mkdtemp(dir), "mkdtemp failed");
    return dir;
}

void ts_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

char *ts_run_capture(const char *cmd, int *code) {
    FILE *p = popen(cmd, "r");
    cr_assert(p);
    tu_membuf out = {0};
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) tu_membuf_write(&out, buf, n);
    int status = pclose(p);
    *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (!out.data) tu_membuf_write(&out, "", 0);
    return out.data;
}

ts_server ts_server_start(const char *dir, int port, const char *yaml) {
    ts_server s = {0};
    s.dir = strdup(dir);
    s.store = ts_fmt("%s/store", dir);
    char *cfg_path = ts_fmt("%s/config.yml", dir);
    char *text = ts_fmt("listen: 127.0.0.1:%d\nstore: {path: %s}\n%s", port, s.store, yaml);
    ts_write_file(cfg_path, text, strlen(text));
    int pipefd[2];
    cr_assert_eq(pipe(pipefd), 0);
    s.pid = fork();
    cr_assert(s.pid >= 0);
    if (s.pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed assertion ends the test process: the server goes too */
        dup2(pipefd[1], 1);
        close(pipefd[0]);
        close(pipefd[1]);
        execl(TM_CLI, TM_CLI, "serve", "--config", cfg_path, (char *)NULL);
        _exit(127);
    }
    close(pipefd[1]);
    s.out = fdopen(pipefd[0], "r");
    char line[512];
    static const char banner[] = "listening on http://127.0.0.1:";
    while (fgets(line, sizeof line, s.out)) {
        const char *p = strstr(line, banner);
        if (p) s.port = atoi(p + strlen(banner));
        if (strncmp(line, "DSN:", 4) == 0) {
            snprintf(s.dsn, sizeof s.dsn, "%s", line);
            break;
        }
    }
    cr_assert(s.port > 0, "the server printed no port");
    cr_assert(port == 0 || s.port == port, "the server listens on %d, not %d", s.port, port);
    free(cfg_path);
    free(text);
    return s;
}

int ts_server_stop(ts_server *s) {
    int status = 0;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, &status, 0);
    }
    if (s->out) fclose(s->out);
    s->pid = 0;
    s->out = NULL;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void ts_server_free(ts_server *s) {
    if (s->pid > 0) ts_server_stop(s);
    char *cmd = ts_fmt("rm -rf '%s'", s->dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    free(s->dir);
    free(s->store);
    s->dir = s->store = NULL;
}

int ts_count_rows(const char *store, const char *sql) {
    char *path = ts_fmt("%s/tracemill.db", store);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    cr_assert_eq(sqlite3_step(st), SQLITE_ROW);
    int n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(path);
    return n;
}
