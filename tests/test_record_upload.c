/*
 * test_record_upload.c — `tracemill record --upload DSN` end to end: the
 * test program recorded in 1 s chunks, each chunk sent as a Sentry envelope
 * to a `tracemill serve` started here, then read back from the server's
 * store (every chunk converted, no outcome, one profiler_id, distinct
 * chunk_ids, the release and environment given); and the on-disk queue:
 * chunks recorded while the server is down are retried, kept within the
 * queue bound, and sent by the next run; a run without --chunk-seconds
 * leaves no temporary file, and its report reaches record's stderr though
 * the program closed its own; a malformed DSN is refused before the
 * program runs, and a recorder that cannot start fails the run.
 *
 * Binaries: TM_CLI, TM_RECORD_TARGET (plain gcc -O2 program) and
 * TM_RECORD_PRELOAD (libtracemill_record.so), from the build.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tracemill.h"
#include "tserve.h"
#include "tutil.h"

#define KEY "5f2b7c0d9e8a41b3a6c4d2e1f0a9b8c7"

/* A local port nothing listens on (bound, then released). */
static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t len = sizeof a;
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* `tracemill serve` on 127.0.0.1:port (0: any), project 1 with KEY, its
 * store in dir/store. */
static ts_server start_server(const char *dir, int port) {
    return ts_server_start(dir, port, "projects:\n  - id: 1\n    public_keys: [" KEY "]\n");
}

/* Stops the server, which must exit cleanly, and removes its directory
 * (the test's) with everything in it. */
static void stop_server(ts_server *s) {
    cr_assert_eq(ts_server_stop(s), 0, "the server did not stop cleanly");
    ts_server_free(s);
}

static pid_t start_record(const char *dir, int port, const char *seconds, const char *queue_max, const char *timeout_ms,
                          int n) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        tu_asan_recorded_child_env();
        char *log = ts_fmt("%s/record-%d.log", dir, n), *dsn = ts_fmt("http://" KEY "@127.0.0.1:%d/1", port);
        char *out = ts_fmt("%s/trace.pftrace", dir), *queue = ts_fmt("%s/queue", dir), *run_for = ts_fmt("%s.4", seconds);
        if (!freopen(log, "w", stderr)) _exit(126);
        execl(TM_CLI, TM_CLI, "record", "--preload", TM_RECORD_PRELOAD, "--chunk-seconds", "1", "--duration", seconds,
              "--upload", dsn, "--release", "app@1.2.3", "--environment", "ci \"quoted\"", "--upload-queue", queue,
              "--upload-queue-max", queue_max, "--upload-timeout-ms", timeout_ms, "-o", out, "--",
              TM_RECORD_TARGET, "--seconds", run_for, (char *)NULL);
        _exit(127);
    }
    return pid;
}

typedef struct run_report {
    unsigned long long sent, recorded, rejected, failed, dropped, left;
    char profiler_id[33];
} run_report;

/* Waits for the recording and reads the recorder's closing report. */
static run_report finish_record(const char *dir, pid_t pid, int n) {
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    char *log_path = ts_fmt("%s/record-%d.log", dir, n);
    size_t len;
    char *log = tu_read_file(log_path, &len);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "record failed: %s", log);
    run_report r = {0};
    const char *line = strstr(log, "tracemill record: profiler_id ");
    cr_assert(line, "no upload report: %s", log);
    cr_assert_eq(sscanf(line,
                        "tracemill record: profiler_id %32[0-9a-f]: uploaded %llu chunks (%llu recorded), %llu rejected, "
                        "%llu failed attempts, %llu dropped from the full queue, %llu left queued",
                        r.profiler_id, &r.sent, &r.recorded, &r.rejected, &r.failed, &r.dropped, &r.left),
                 7, "unreadable report: %s", line);
    free(log);
    free(log_path);
    return r;
}

/* Chunks in the store: chunk ids and profiler ids from the stored payloads. */
typedef struct stored {
    size_t n;
    char chunk_id[16][33], profiler_id[16][33];
} stored;

static void json_field(const char *json, const char *key, char out[33]) {
    char *pat = ts_fmt("\"%s\":\"", key);
    const char *p = strstr(json, pat);
    cr_assert(p, "payload without %s", key);
    cr_assert_eq(sscanf(p + strlen(pat), "%32[0-9a-f]", out), 1);
    cr_assert_eq(strlen(out), 32, "%s is not 32 hex digits", key);
    free(pat);
}

static stored read_store(const char *store) {
    stored s = {0};
    int code;
    char *cmd = ts_fmt("%s store ls --store %s", TM_CLI, store);
    char *ls = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0);
    for (const char *p = ls; (p = strstr(p, "chunk_id=")); p++) {
        cr_assert_lt(s.n, 16);
        cr_assert_eq(sscanf(p, "chunk_id=%32[0-9a-f]", s.chunk_id[s.n]), 1);
        char *get = ts_fmt("%s store get %s --store %s", TM_CLI, s.chunk_id[s.n], store);
        char *payload = ts_run_capture(get, &code);
        cr_assert_eq(code, 0, "store get %s", s.chunk_id[s.n]);
        char chunk_id[33];
        json_field(payload, "chunk_id", chunk_id);
        cr_assert_str_eq(chunk_id, s.chunk_id[s.n]);
        json_field(payload, "profiler_id", s.profiler_id[s.n]);
        cr_assert(strstr(payload, "\"platform\":\"native\""), "platform: %.300s", payload);
        cr_assert(strstr(payload, "\"release\":\"app@1.2.3\""), "release: %.300s", payload);
        cr_assert(strstr(payload, "\"environment\":\"ci \\\"quoted\\\"\""), "environment: %.300s", payload);
        cr_assert(strstr(payload, "\"samples\":[{"), "chunk %s has no samples", s.chunk_id[s.n]);
        free(payload);
        free(get);
        s.n++;
    }
    free(ls);
    free(cmd);
    return s;
}

static size_t queued_files(const char *dir) {
    int code;
    char *cmd = ts_fmt("ls %s/queue | grep -c '\\.envelope$'", dir);
    char *out = ts_run_capture(cmd, &code);
    size_t n = strtoul(out, NULL, 10);
    free(out);
    free(cmd);
    return n;
}

TestSuite(record_upload);

Test(record_upload, every_chunk_reaches_tracemill_serve) {
    char *dir = ts_temp_dir("tm_record_upload");
    ts_server s = start_server(dir, 0);
    run_report r = finish_record(dir, start_record(dir, s.port, "3", "100", "5000", 0), 0);
    cr_assert_eq(r.recorded, 3, "3 s in 1 s chunks: %llu chunks", r.recorded);
    cr_assert_eq(r.sent, 3);
    cr_assert_eq(r.failed + r.rejected + r.dropped + r.left, 0);
    cr_assert_eq(queued_files(dir), 0, "sent chunks must leave the queue");

    stored st = read_store(s.store);
    cr_assert_eq(st.n, 3, "the store holds %zu chunks", st.n);
    for (size_t i = 0; i < st.n; i++) {
        cr_assert_str_eq(st.profiler_id[i], r.profiler_id, "one profiler_id per run");
        for (size_t j = 0; j < i; j++) cr_assert_str_neq(st.chunk_id[i], st.chunk_id[j], "chunk ids repeat");
    }
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes"), 0, "a chunk was rejected");

    /* The raw trace kept by the server is the recorder's, and decodes. */
    char *raw = ts_fmt("%s/raw.pftrace", dir);
    char *cmd = ts_fmt("%s store get %s --raw --store %s -o %s", TM_CLI, st.chunk_id[0], s.store, raw);
    int code;
    free(ts_run_capture(cmd, &code));
    cr_assert_eq(code, 0);
    size_t len;
    char *data = tu_read_file(raw, &len);
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(data, len, NULL, &t, &err), TM_OK, "%s", err.message);
    /* a chunk is 1 s of wall time: ~100 samples alone, a few tens on a loaded machine */
    cr_assert_gt(tm_trace_get_stats(t)->samples_kept, 5);
    /* Not symbolized before it is sent, so named while recording. */
    tu_membuf folded = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &folded};
    cr_assert_eq(tm_write_folded(t, NULL, &sink, &err), TM_OK, "%s", err.message);
    cr_assert(folded.data && strstr(folded.data, "worker_main"), "the uploaded chunk's frames have no names:\n%.2000s",
              folded.data ? folded.data : "");
    tu_membuf_free(&folded);
    tm_trace_free(t);
    free(data), free(cmd), free(raw);
    stop_server(&s);
    free(dir);
}

Test(record_upload, retries_until_the_server_comes_up) {
    char *dir = ts_temp_dir("tm_record_upload");
    int port = free_port();
    pid_t rec = start_record(dir, port, "3", "100", "8000", 0);
    /* The first chunk (at 1 s) meets a refused connection; the server
     * appears at 1.5 s and the backoff retries reach it. */
    struct timespec wait = {1, 500000000L};
    nanosleep(&wait, NULL);
    ts_server s = start_server(dir, port);
    run_report r = finish_record(dir, rec, 0);
    cr_assert_gt(r.failed, 0, "no attempt failed: the server was up too early");
    cr_assert_eq(r.recorded, 3);
    cr_assert_eq(r.sent, 3, "sent %llu of 3 after retries", r.sent);
    cr_assert_eq(r.left, 0);
    cr_assert_eq(read_store(s.store).n, 3);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes"), 0);
    stop_server(&s);
    free(dir);
}

/* A server that takes the connection and never answers: the request in
 * flight at exit is cut at --upload-timeout-ms, not held for its own 30 s,
 * and its chunk stays queued. */
Test(record_upload, a_server_that_never_answers_does_not_hold_the_exit) {
    char *dir = ts_temp_dir("tm_record_upload");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    cr_assert(bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && listen(fd, 16) == 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    double t0 = ts_now_s();
    pid_t rec = start_record(dir, ntohs(a.sin_port), "1", "100", "1000", 0);
    run_report r = finish_record(dir, rec, 0);
    double took = ts_now_s() - t0;
    close(fd);
    cr_expect_lt(took, 8.0, "record took %.1f s with a 1 s upload timeout", took);
    cr_expect_eq(r.sent, 0);
    cr_expect_gt(r.left, 0, "the unanswered chunk is not left queued");
    char *rm = ts_fmt("rm -rf %s", dir);
    cr_expect_eq(system(rm), 0);
    free(rm);
    free(dir);
}

Test(record_upload, the_queue_is_bounded_and_sent_by_the_next_run) {
    char *dir = ts_temp_dir("tm_record_upload");
    int port = free_port();
    /* Server down for the whole run: a queue of 2 keeps the newest 2 of 3. */
    run_report first = finish_record(dir, start_record(dir, port, "3", "2", "300", 0), 0);
    cr_assert_eq(first.recorded, 3);
    cr_assert_eq(first.sent, 0);
    cr_assert_gt(first.failed, 0);
    cr_assert_eq(first.dropped, 1, "dropped %llu", first.dropped);
    cr_assert_eq(first.left, 2);
    cr_assert_eq(queued_files(dir), 2);

    ts_server s = start_server(dir, port);
    run_report second = finish_record(dir, start_record(dir, port, "1", "2", "5000", 1), 1);
    cr_assert_eq(second.recorded, 1);
    cr_assert_eq(second.sent, 3, "the 2 queued chunks and the new one: %llu sent", second.sent);
    cr_assert_eq(second.left, 0);
    cr_assert_eq(queued_files(dir), 0);
    cr_assert_str_neq(first.profiler_id, second.profiler_id, "each run draws its profiler_id");

    stored st = read_store(s.store);
    cr_assert_eq(st.n, 3);
    size_t from_first = 0, from_second = 0;
    for (size_t i = 0; i < st.n; i++) {
        from_first += strcmp(st.profiler_id[i], first.profiler_id) == 0;
        from_second += strcmp(st.profiler_id[i], second.profiler_id) == 0;
    }
    cr_assert_eq(from_first, 2, "queued chunks keep their run's profiler_id");
    cr_assert_eq(from_second, 1);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes"), 0);
    stop_server(&s);
    free(dir);
}

/* `record --upload` of a shell script in dir, -o trace.pftrace, to a port
 * nothing listens on (under `timeout 60`): its stderr and exit status. */
static char *record_script(const char *dir, const char *shell, const char *script, int *code) {
    char *dsn = ts_fmt("http://" KEY "@127.0.0.1:%d/1", free_port());
    char *cmd = ts_fmt("cd %s && timeout 60 %s record --preload %s --upload %s --upload-timeout-ms 200 -o "
                       "trace.pftrace -- %s -c '%s' 2>&1",
                       dir, TM_CLI, TM_RECORD_PRELOAD, dsn, shell, script);
    tu_asan_recorded_child_env(); /* the recorded shell is not instrumented */
    char *log = ts_run_capture(cmd, code);
    free(cmd);
    free(dsn);
    return log;
}

/* Without --chunk-seconds and --upload-queue, an upload run still records
 * in chunks into OUT.queue/ and writes no OUT, which it says (OUT was
 * asked for): no temporary OUT is left behind. The recorder's closing report reaches record's stderr even when
 * the program has closed its own (as xz does before exiting). A fork child
 * that ends with exit() (bash's command substitution) leaves the parent's
 * uploader alone: closing it in the child waited forever. */
Test(record_upload, a_single_run_of_a_forking_program_ends_and_reports) {
    char *dir = ts_temp_dir("tm_record_upload");
    int code;
    char *log = record_script(dir, "bash",
                              "exec 2>&-; x=$(echo forked); i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done", &code);
    cr_assert_neq(code, 124, "record hung (a fork child closing the uploader?): %s", log);
    cr_assert_eq(code, 0, "record failed: %s", log);
    cr_assert(strstr(log, "tracemill record: profiler_id "), "the report of a program without stderr is lost: %s", log);
    cr_assert(strstr(log, "1 left queued"), "the run's one chunk is not queued: %s", log);
    char *ls = ts_fmt("ls -a %s", dir);
    char *names = ts_run_capture(ls, &code);
    cr_assert_eq(code, 0);
    cr_assert_null(strstr(names, ".tmp"), "a temporary file is left: %s", names);
    cr_assert_null(strstr(names, "trace.pftrace"), "an upload run wrote OUT: %s", names);
    cr_assert(strstr(names, "trace.queue"), "the queue is not OUT.queue: %s", names);
    cr_assert(strstr(log, "nothing was written to ") && strstr(log, "trace.pftrace: with --upload"),
              "record does not say that the -o it was given got nothing: %s", log);
    free(names);
    free(ls);
    free(log);
    free(dir);
}

/* dash (Debian's sh) ends every `-c` script with _exit: the trace is ended, but the uploader
 * cannot be flushed there, so record says where the chunk waits. */
Test(record_upload, a_program_ending_by__exit_is_told_where_its_chunk_waits) {
    char *dir = ts_temp_dir("tm_record_upload");
    int code;
    char *log = record_script(dir, "dash", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done", &code);
    cr_assert_eq(code, 0, "record failed: %s", log);
    cr_assert(strstr(log, "ended without exit()") && strstr(log, "upload queue trace.queue/"),
              "record is silent about the unsent chunk: %s", log);
    char *ls = ts_fmt("ls %s/trace.queue | grep -c '\\.envelope$'", dir);
    char *n = ts_run_capture(ls, &code);
    cr_assert_eq(strtoul(n, NULL, 10), 1, "chunks queued: %s", n);
    free(n);
    free(ls);
    free(log);
    free(dir);
}

/* A DSN the uploader would refuse is refused by `record` itself, before the
 * program runs: inside the program the recorder could only print a message
 * and the run would exit 0 with nothing recorded. */
Test(record_upload, a_malformed_dsn_is_a_usage_error) {
    static const char *const bad[] = {"ftp://" KEY "@127.0.0.1/1",  "http://127.0.0.1/1",
                                      "http://" KEY "@/1",           "http://" KEY "@127.0.0.1",
                                      "http://" KEY "@127.0.0.1/",   "http://" KEY "@127.0.0.1/abc"};
    char *dir = ts_temp_dir("tm_record_upload");
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *cmd = ts_fmt("%s record --upload '%s' -o %s/t.pftrace -- %s --seconds 0.2 2>&1", TM_CLI, bad[i], dir,
                           TM_RECORD_TARGET);
        int code;
        char *out = ts_run_capture(cmd, &code);
        cr_assert_eq(code, 2, "%s: exit %d: %s", bad[i], code, out);
        cr_assert_not_null(strstr(out, "--upload wants a DSN"), "%s: %s", bad[i], out);
        cr_assert_null(strstr(out, "cpu-share"), "%s: the program ran: %s", bad[i], out);
        free(out);
        free(cmd);
    }
    char *cmd = ts_fmt("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    free(dir);
}

/* A recorder that cannot start inside the program (here: its queue
 * directory cannot be created) makes `record` fail, though an upload run
 * leaves no trace file whose absence would tell. */
Test(record_upload, a_recorder_that_cannot_start_fails_the_run) {
    tu_asan_recorded_child_env(); /* inherited by the shell and the program (Criterion forks each test) */
    char *dir = ts_temp_dir("tm_record_upload");
    char *cmd = ts_fmt("%s record --upload http://" KEY "@127.0.0.1:1/1 --upload-queue /proc/no/such/dir"
                       " -o %s/t.pftrace -- %s --seconds 0.2 2>&1",
                       TM_CLI, dir, TM_RECORD_TARGET);
    int code;
    char *out = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 125, "exit %d: %s", code, out);
    cr_assert_not_null(strstr(out, "cannot create the queue directory /proc/no/such/dir"), "%s", out);
    cr_assert_not_null(strstr(out, "nothing was recorded"), "%s", out);
    free(out);
    free(cmd);
    cmd = ts_fmt("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd);
    free(dir);
}

/* A server that refuses the chunks (here a key it does not know: 401)
 * loses them for good: record says so with the HTTP status and the server's
 * detail, and exits 125, not the program's 0 ("N rejected" and exit 0 were
 * all it said). A server that cannot be reached is named too (the chunks
 * wait in the queue, and the exit stays the program's). */
Test(record_upload, chunks_the_server_refuses_are_said_with_the_status_and_fail_the_run, .timeout = 120) {
    char *dir = ts_temp_dir("tm_record_upload");
    ts_server s = start_server(dir, 0);
    tu_asan_recorded_child_env();
    char *cmd = ts_fmt("timeout 60 %s record --preload %s --chunk-seconds 1 --upload "
                       "http://0123456789abcdef0123456789abcdef@127.0.0.1:%d/1 --upload-queue %s/q -- %s --seconds 0.3 "
                       "2>&1", TM_CLI, TM_RECORD_PRELOAD, s.port, dir, TM_RECORD_TARGET);
    int code;
    char *log = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 125, "exit %d: %s", code, log);
    cr_assert(strstr(log, "1 chunks were refused by the server and deleted") &&
                  strstr(log, "HTTP 401: {\"detail\":\"unknown public key\"}"),
              "the refusal is not said with its status: %s", log);
    free(log), free(cmd);
    cmd = ts_fmt("timeout 60 %s record --preload %s --upload http://" KEY "@127.0.0.1:%d/1 --upload-timeout-ms 300 "
                 "--upload-queue %s/q2 -- %s --seconds 0.3 2>&1", TM_CLI, TM_RECORD_PRELOAD, free_port(), dir,
                 TM_RECORD_TARGET);
    log = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0, "exit %d: %s", code, log);
    cr_assert(strstr(log, "the last failed attempt to upload: Couldn't connect to server"), "%s", log);
    free(log), free(cmd);
    stop_server(&s);
    free(dir);
}
