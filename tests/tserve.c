/*
 * tserve.c — the server-process plumbing declared in tserve.h: starting and
 * stopping `tracemill serve` (TM_CLI, from the build), shell commands,
 * reading counts back from its SQLite store, and raw sockets to it.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "tserve.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
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
    char *listen = ts_fmt("127.0.0.1:%d", port);
    ts_server s = ts_server_start_at(dir, listen, yaml);
    cr_assert(port == 0 || s.port == port, "the server listens on %d, not %d", s.port, port);
    free(listen);
    return s;
}

ts_server ts_server_start_at(const char *dir, const char *listen, const char *yaml) {
    ts_server s = {0};
    s.dir = strdup(dir);
    s.store = ts_fmt("%s/store", dir);
    char *cfg_path = ts_fmt("%s/config.yml", dir);
    char *text = ts_fmt("listen: \"%s\"\nstore: {path: %s}\n%s", listen, s.store, yaml);
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
    static const char banner[] = "listening on http://";
    while (fgets(line, sizeof line, s.out)) {
        const char *p = strstr(line, banner);
        if (p) {
            p += strlen(banner);
            const char *end = strchr(p, ','), *colon = NULL;
            for (const char *q = p; end && q < end; q++)
                if (*q == ':') colon = q; /* the last one: an IPv6 host has its own */
            cr_assert(colon, "no port in the banner: %s", line);
            snprintf(s.url, sizeof s.url, "http://%.*s", (int)(end - p), p);
            s.port = atoi(colon + 1);
        }
        if (strncmp(line, "DSN:", 4) == 0) {
            snprintf(s.dsn, sizeof s.dsn, "%s", line);
            break;
        }
    }
    cr_assert(s.port > 0, "the server printed no port");
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

double ts_now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int ts_dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof a), 0, "connect: %s", strerror(errno));
    return fd;
}

size_t ts_answer_len(const char *p, size_t n) {
    const char *end = memmem(p, n, "\r\n\r\n", 4);
    if (!end) return 0;
    size_t head = (size_t)(end - p) + 4, body = 0;
    const char *cl = memmem(p, head, "Content-Length: ", 16);
    if (cl) body = strtoul(cl + 16, NULL, 10);
    if (strncmp(p, "HTTP/1.1 100", 12) == 0) body = 0;
    return head + body <= n ? head + body : 0;
}

char *ts_read_answers(int fd, int answers, double seconds, int *closed) {
    tu_membuf got = {0};
    tu_membuf_write(&got, "", 0);
    double end = ts_now_s() + seconds;
    *closed = 0;
    for (;;) {
        int complete = 0;
        for (size_t at = 0, n; got.len > at && (n = ts_answer_len((char *)got.data + at, got.len - at)); at += n)
            complete++;
        if (answers && complete >= answers) break;
        double left = end - ts_now_s();
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, (int)(left * 1000) + 1) <= 0) continue;
        char buf[8192];
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) {
            *closed = 1;
            break;
        }
        tu_membuf_write(&got, buf, (size_t)n);
    }
    tu_membuf_write(&got, "", 1);
    return (char *)got.data;
}
