/*
 * test_serve.c — `tracemill serve` end to end: the built binary (TM_CLI)
 * started as a user starts it, envelopes posted over HTTP with libcurl,
 * results read back from the local store (`tracemill store`, SQLite) or
 * consumed from Kafka (librdkafka's mock cluster, run inside this test).
 *
 * Covered: an Android-like compound chunk whose payload equals `tracemill
 * convert --meta` and whose raw bytes are the trace; the same through Kafka
 * field by field with the project_id header; plain JSON chunks; every
 * rejection with its HTTP status or outcome reason; each Content-Encoding
 * and a decompression bomb; authentication; rate limits (429 with
 * Retry-After and X-Sentry-Rate-Limits); /healthz and /metrics; a broker
 * outage with spooling and replay (nothing lost or duplicated); kill -9
 * under load and restart (every acknowledged chunk stored exactly once);
 * malformed configuration; graceful stop on SIGTERM; a repeated chunk
 * stored once and counted; the generated key kept across a restart; chunk
 * ids that are not UUIDs rejected, and `store ls|export` safe on rows that
 * hold them; outcomes of dropped items counted as Relay counts them, client
 * reports turned into outcomes, the other items of an envelope whose chunk
 * is rate limited, and the store endpoint's event types.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <pthread.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>
#include <brotli/encode.h>

#include "server.h"
#include "tserve.h"
#include "tutil.h"

#define DEMO_TRACE TM_SOURCE_DIR "/examples/demo.pftrace"
#define DEMO_META TM_SOURCE_DIR "/examples/demo.meta.json"
#define KEY "e12d836b15bb49d7bbf99e64295d995b"
#define OTHER_KEY "0123456789abcdef0123456789abcdef"
#define UUID_A "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define UUID_B "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define UUID_C "cccccccccccccccccccccccccccccccc"
#define UUID_D "dddddddddddddddddddddddddddddddd"

/* ---- files and processes ---- */

static const char *project_yaml =
    "projects:\n"
    "  - id: 42\n"
    "    organization_id: 7\n"
    "    public_keys: [" KEY "]\n"
    "    retention_days: 30\n"
    "  - id: 43\n"
    "    public_keys: [" OTHER_KEY "]\n";

static ts_server start_server(const char *extra_yaml) {
    char *dir = ts_temp_dir("tm_serve");
    char *yaml = ts_fmt("%s%s", project_yaml, extra_yaml ? extra_yaml : "");
    ts_server s = ts_server_start(dir, 0, yaml);
    free(yaml);
    free(dir);
    return s;
}

/* ---- HTTP ---- */

typedef struct response {
    long status;
    tu_membuf body, headers;
} response;

static size_t collect(char *p, size_t size, size_t n, void *ctx) {
    return tu_membuf_write(ctx, p, size * n) ? 0 : size * n;
}

/* base: http://HOST:PORT */
static response request_at(const char *base, const char *method, const char *path, const char *const *headers,
                           const void *body, size_t len) {
    response r = {0};
    CURL *c = curl_easy_init();
    cr_assert(c);
    char *url = ts_fmt("%s%s", base, path);
    struct curl_slist *h = NULL;
    for (size_t i = 0; headers && headers[i]; i++) h = curl_slist_append(h, headers[i]);
    h = curl_slist_append(h, "Expect:");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    CURLcode rc = curl_easy_perform(c);
    cr_assert_eq(rc, CURLE_OK, "%s %s: %s", method, url, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    if (!r.body.data) tu_membuf_write(&r.body, "", 0);
    if (!r.headers.data) tu_membuf_write(&r.headers, "", 0);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(url);
    return r;
}

static response request(int port, const char *method, const char *path, const char *const *headers, const void *body,
                        size_t len) {
    char *base = ts_fmt("http://127.0.0.1:%d", port);
    response r = request_at(base, method, path, headers, body, len);
    free(base);
    return r;
}

static void response_free(response *r) {
    tu_membuf_free(&r->body);
    tu_membuf_free(&r->headers);
}

static const char *const auth_headers[] = {"X-Sentry-Auth: Sentry sentry_key=" KEY ", sentry_version=7", NULL};

static response post(int port, const void *body, size_t len) {
    return request(port, "POST", "/api/42/envelope/", auth_headers, body, len);
}

/* ---- envelopes ---- */

typedef struct chunk {
    char id[33];
    char *meta;        /* the metadata JSON with this chunk_id */
    size_t meta_len;
} chunk;

static char *demo_trace;
static size_t demo_trace_len;

static void load_demo(void) {
    if (!demo_trace) demo_trace = tu_read_file(DEMO_TRACE, &demo_trace_len);
    cr_assert(demo_trace);
}

/* The demo metadata with a fresh chunk_id (seq decides it). */
static chunk make_chunk(unsigned seq) {
    chunk c;
    snprintf(c.id, sizeof c.id, "%08x%024x", seq, 0xabcu);
    size_t len;
    char *meta = tu_read_file(DEMO_META, &len);
    cr_assert(meta);
    char *at = strstr(meta, "\"chunk_id\":\"");
    cr_assert(at);
    at += strlen("\"chunk_id\":\"");
    char *end = strchr(at, '"');
    *end = 0;
    c.meta = ts_fmt("%.*s%s\"%s", (int)(at - meta), meta, c.id, end + 1);
    while (c.meta[strlen(c.meta) - 1] == '\n') c.meta[strlen(c.meta) - 1] = 0;
    c.meta_len = strlen(c.meta);
    free(meta);
    return c;
}

/* An Android SDK envelope: one compound profile_chunk item. */
static tu_membuf android_envelope(const chunk *c, const char *item_ctype) {
    load_demo();
    tu_membuf e = {0};
    char *head = ts_fmt("{\"event_id\":\"%s\",\"sdk\":{\"name\":\"sentry.java.android\",\"version\":\"8.38.0\"}}\n"
                     "{\"content_type\":\"%s\",\"filename\":\"profile.perfetto-stack-sample\",\"type\":\"profile_chunk\","
                     "\"platform\":\"android\",\"meta_length\":%zu,\"length\":%zu}\n",
                     c->id, item_ctype, c->meta_len, c->meta_len + demo_trace_len);
    tu_membuf_write(&e, head, strlen(head));
    tu_membuf_write(&e, c->meta, c->meta_len);
    tu_membuf_write(&e, demo_trace, demo_trace_len);
    tu_membuf_write(&e, "\n", 1);
    free(head);
    return e;
}

/* What `tracemill convert --meta` makes of the demo trace with c's metadata. */
static char *expected_payload(const chunk *c, const char *dir) {
    char *meta_path = ts_fmt("%s/meta-%s.json", dir, c->id);
    ts_write_file(meta_path, c->meta, c->meta_len);
    char *cmd = ts_fmt("%s convert --meta %s %s", TM_CLI, meta_path, DEMO_TRACE);
    int code;
    char *out = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0);
    free(cmd);
    free(meta_path);
    return out;
}

/* The outcome messages stored, concatenated. */
static char *stored_outcomes(const char *store) {
    char *path = ts_fmt("%s/tracemill.db", store);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    cr_assert_eq(sqlite3_prepare_v2(db, "select message from outcomes order by id", -1, &st, NULL), SQLITE_OK);
    tu_membuf all = {0};
    tu_membuf_write(&all, "", 0);
    while (sqlite3_step(st) == SQLITE_ROW) {
        tu_membuf_write(&all, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
        tu_membuf_write(&all, "\n", 1);
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(path);
    return all.data;
}

TestSuite(serve, .init = NULL);

/* ---- local store ---- */

Test(serve, android_chunk_into_the_local_store) {
    ts_server s = start_server(NULL);
    chunk c = make_chunk(1);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    response r = post(s.port, env.data, env.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    char *want_id = ts_fmt("{\"id\":\"%s\"}", c.id);
    cr_assert_str_eq(r.body.data, want_id);

    int code;
    char *cmd = ts_fmt("%s store get %s --store %s", TM_CLI, c.id, s.store);
    char *payload = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0);
    char *want = expected_payload(&c, s.dir);
    cr_assert_str_eq(payload, want, "the stored payload differs from `tracemill convert --meta`");

    free(cmd);
    cmd = ts_fmt("%s store get %s --raw --store %s -o %s/raw.pftrace", TM_CLI, c.id, s.store, s.dir);
    free(ts_run_capture(cmd, &code));
    cr_assert_eq(code, 0);
    char *raw_path = ts_fmt("%s/raw.pftrace", s.dir);
    size_t raw_len;
    char *raw = tu_read_file(raw_path, &raw_len);
    cr_assert_eq(raw_len, demo_trace_len);
    cr_assert(memcmp(raw, demo_trace, raw_len) == 0, "raw bytes differ from the trace sent");

    free(cmd);
    cmd = ts_fmt("%s store ls --store %s", TM_CLI, s.store);
    char *ls = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0);
    char *want_ls = ts_fmt("project=42  chunk_id=%s  payload=%zu  raw=%zu\n", c.id, strlen(want) - 1, demo_trace_len);
    cr_assert(strstr(ls, want_ls), "store ls: %s", ls);
    cr_assert_eq(ts_server_stop(&s), 0, "SIGTERM must stop the server cleanly");

    free(ls), free(want_ls), free(raw), free(raw_path), free(cmd), free(payload), free(want), free(want_id);
    response_free(&r);
    tu_membuf_free(&env);
    free(c.meta);
    ts_server_free(&s);
}

/* Listening on IPv6 loopback: the banner's URL and DSN bracket the address
 * (pasted into curl or an SDK they must work) and a chunk posted there is
 * stored. Skipped where the machine has no ::1. */
Test(serve, ipv6_loopback) {
    int probe = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    int have_v6 = probe >= 0 && bind(probe, (struct sockaddr *)&a, sizeof a) == 0;
    if (probe >= 0) close(probe);
    if (!have_v6) cr_skip_test("no IPv6 loopback here");
    char *dir = ts_temp_dir("tm_serve");
    ts_server s = ts_server_start_at(dir, "[::1]:0", project_yaml);
    char *want_url = ts_fmt("http://[::1]:%d", s.port);
    cr_assert_str_eq(s.url, want_url);
    char *want_dsn = ts_fmt("DSN: http://" KEY "@[::1]:%d/42", s.port);
    cr_assert(strncmp(s.dsn, want_dsn, strlen(want_dsn)) == 0, "%s", s.dsn);

    chunk c = make_chunk(1);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    response r = request_at(s.url, "POST", "/api/42/envelope/", auth_headers, env.data, env.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    cr_assert_eq(ts_server_stop(&s), 0);
    cr_assert_eq(ts_count_rows(s.store, "SELECT count(*) FROM chunks"), 1);

    response_free(&r);
    tu_membuf_free(&env);
    free(c.meta), free(want_dsn), free(want_url), free(dir);
    ts_server_free(&s);
}

Test(serve, perfetto_routed_by_json_content_type_and_plain_json_chunks) {
    ts_server s = start_server(NULL);
    /* SDKs in the field: item content type generic, JSON says "perfetto" */
    chunk c = make_chunk(2);
    tu_membuf env = android_envelope(&c, "application/octet-stream");
    response r = post(s.port, env.data, env.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);

    /* a Python SDK chunk: plain JSON, no meta_length; out-of-order samples get sorted */
    const char *json = "{\"chunk_id\":\"00000000000000000000000000000003\",\"profiler_id\":"
                       "\"11111111111111111111111111111111\",\"platform\":\"python\",\"version\":\"2\","
                       "\"client_sdk\":{\"name\":\"sentry.python\",\"version\":\"2.0.0\"},\"profile\":{"
                       "\"frames\":[{\"function\":\"main\",\"lineno\":3}],\"stacks\":[[0]],\"samples\":["
                       "{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1700000000.25},"
                       "{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1700000000.125}],"
                       "\"thread_metadata\":{\"1\":{\"name\":\"MainThread\"},\"9\":{\"name\":\"idle\"}}}}";
    char *body = ts_fmt("{}\n{\"type\":\"profile_chunk\"}\n%s\n", json);
    r = post(s.port, body, strlen(body));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);

    int code;
    char *cmd = ts_fmt("%s store get 00000000000000000000000000000003 --store %s", TM_CLI, s.store);
    char *payload = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0);
    cr_assert_str_eq(payload,
                     "{\"chunk_id\":\"00000000000000000000000000000003\",\"profiler_id\":"
                     "\"11111111111111111111111111111111\",\"platform\":\"python\",\"version\":\"2\","
                     "\"client_sdk\":{\"name\":\"sentry.python\",\"version\":\"2.0.0\"},\"profile\":{"
                     "\"frames\":[{\"function\":\"main\",\"lineno\":3}],\"stacks\":[[0]],\"samples\":["
                     "{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1700000000.125},"
                     "{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1700000000.25}],"
                     "\"thread_metadata\":{\"1\":{\"name\":\"MainThread\"}}}}\n");
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 2);
    free(payload), free(cmd), free(body);
    tu_membuf_free(&env);
    free(c.meta);
    ts_server_free(&s);
}

/* Each rejection: the HTTP answer and the outcome stored. */
Test(serve, rejections_and_their_outcomes) {
    ts_server s = start_server(NULL);
    load_demo();
    struct {
        const char *what, *body, *reason;
    } cases[] = {
        {"meta_length past the payload",
         "{}\n{\"type\":\"profile_chunk\",\"meta_length\":999,\"length\":5,\"platform\":\"android\"}\nabcde\n",
         "profiling_invalid_sampled_profile"},
        {"not Perfetto", NULL, "profiling_platform_not_supported"},
        {"bad metadata", NULL, "profiling_invalid_json"},
        {"plain chunk without samples",
         "{}\n{\"type\":\"profile_chunk\"}\n{\"chunk_id\":\"" UUID_A "\",\"profiler_id\":\"" UUID_B "\","
         "\"platform\":\"python\",\"version\":\"2\",\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[]}}\n",
         "profiling_not_enough_samples"},
        {"stack out of range",
         "{}\n{\"type\":\"profile_chunk\"}\n{\"chunk_id\":\"" UUID_A "\",\"profiler_id\":\"" UUID_B "\","
         "\"platform\":\"python\",\"version\":\"2\",\"profile\":{\"frames\":[],\"stacks\":[],\"samples\":[{\"stack_id\":0,"
         "\"thread_id\":\"1\",\"timestamp\":1.0}]}}\n",
         "profiling_malformed_samples"},
        {"other item type", "{}\n{\"type\":\"event\"}\n{}\n", "unsupported_item_type"},
        {"item platform of the other profile type",
         "{}\n{\"type\":\"profile_chunk\",\"platform\":\"android\"}\n{\"chunk_id\":\"" UUID_A "\",\"profiler_id\":\""
         UUID_B "\",\"platform\":\"python\",\"version\":\"2\",\"profile\":{\"frames\":[{\"function\":\"f\"}],"
         "\"stacks\":[[0]],\"samples\":[{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1.0},{\"stack_id\":0,"
         "\"thread_id\":\"1\",\"timestamp\":1.01}]}}\n",
         "profiling_invalid_profile_type"},
    };
    /* compound items whose lengths are computed */
    const char *gecko = "{\"content_type\":\"gecko\"}", *perfetto = "{\"content_type\":\"perfetto\"}";
    char *not_perfetto = ts_fmt("{}\n{\"type\":\"profile_chunk\",\"meta_length\":%zu,\"length\":%zu}\n%sabcd\n",
                             strlen(gecko), strlen(gecko) + 4, gecko);
    char *bad_meta = ts_fmt("{}\n{\"type\":\"profile_chunk\",\"meta_length\":%zu,\"length\":%zu,\"content_type\":"
                         "\"application/x-perfetto-trace\"}\n%sabcd\n",
                         strlen(perfetto), strlen(perfetto) + 4, perfetto);
    cases[1].body = not_perfetto;
    cases[2].body = bad_meta;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        response r = post(s.port, cases[i].body, strlen(cases[i].body));
        cr_assert_eq(r.status, 200, "%s: %s", cases[i].what, r.body.data);
        response_free(&r);
        char *outcomes = stored_outcomes(s.store);
        char *want = ts_fmt("\"reason\":\"%s\"", cases[i].reason);
        cr_assert(strstr(outcomes, want), "%s: no outcome %s in %s", cases[i].what, want, outcomes);
        cr_assert(strstr(outcomes, "\"project_id\":42"), "%s", outcomes);
        free(want);
        free(outcomes);
    }
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 0);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes"), (int)(sizeof cases / sizeof cases[0]));
    free(not_perfetto), free(bad_meta);

    /* malformed envelopes: 400 naming the byte offset */
    const char *bad = "{}\n{\"type\":\"profile_chunk\",\"length\":100}\nshort\n";
    response r = post(s.port, bad, strlen(bad));
    cr_assert_eq(r.status, 400);
    cr_assert(strstr(r.body.data, "at byte 3"), "%s", r.body.data);
    response_free(&r);
    r = post(s.port, "not json\n", 9);
    cr_assert_eq(r.status, 400);
    cr_assert(strstr(r.body.data, "\"detail\":\"invalid envelope at byte 0"), "%s", r.body.data);
    response_free(&r);
    ts_server_free(&s);
}

/* "category:quantity" of each stored outcome, in order, space-separated. */
static char *outcome_quantities(const char *store) {
    char *path = ts_fmt("%s/tracemill.db", store);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    const char *sql = "select json_extract(message, '$.category') || ':' || json_extract(message, '$.quantity') "
                      "from outcomes order by id";
    cr_assert_eq(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
    tu_membuf all = {0};
    tu_membuf_write(&all, "", 0);
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (all.len) tu_membuf_write(&all, " ", 1);
        tu_membuf_write(&all, sqlite3_column_text(st, 0), (size_t)sqlite3_column_bytes(st, 0));
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    free(path);
    return all.data;
}

/* Items dropped as unsupported are counted as Relay counts them
 * (Item::quantities): an attachment in bytes and as one attachment item,
 * logs in bytes and items (item_count), user reports as feedback, and no
 * outcome for a client report. Found with Debian's sentry-sdk 1.9: its
 * 16-byte attachment was an outcome of quantity 1, its user_report and
 * client_report outcomes of category 0 (Relay's unused Default). */
Test(serve, dropped_items_counted_as_relay_counts_them) {
    ts_server s = start_server(NULL);
    const char *body =
        "{\"event_id\":\"" UUID_A "\"}\n"
        "{\"type\":\"event\",\"length\":2}\n{}\n"
        "{\"type\":\"attachment\",\"length\":16,\"filename\":\"att.txt\"}\nattachment bytes\n"
        "{\"type\":\"user_report\",\"length\":2}\n{}\n"
        "{\"type\":\"client_report\"}\n{\"discarded_events\":[]}\n"
        "{\"type\":\"session\"}\n{\"sid\":\"x\"}\n"
        "{\"type\":\"log\",\"item_count\":3,\"length\":11}\n{\"items\":1}\n"
        "{\"type\":\"feedback\"}\n{}\n"
        "{\"type\":\"replay_recording\",\"length\":3}\nabc\n"
        "{\"type\":\"statsd\"}\nx:1|c\n";
    response r = post(s.port, body, strlen(body));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    char *got = outcome_quantities(s.store);
    cr_assert_str_eq(got, "1:1 4:16 22:1 14:1 5:1 24:11 23:3 14:1 7:1");
    free(got);
    r = request(s.port, "GET", "/metrics", NULL, NULL, 0);
    cr_assert(strstr(r.body.data, "tracemill_items_total{type=\"other\",outcome=\"unsupported_item_type\"} 8\n"),
              "every item is counted in /metrics: %s", r.body.data);
    response_free(&r);
    ts_server_free(&s);
}

/* "outcome reason category quantity timestamp" of each stored outcome, one a line. */
static char *outcome_rows(const char *store) {
    char *cmd = ts_fmt("sqlite3 %s/tracemill.db \"select json_extract(message, '$.outcome'), "
                       "ifnull(json_extract(message, '$.reason'), 'null'), json_extract(message, '$.category'), "
                       "json_extract(message, '$.quantity'), json_extract(message, '$.timestamp'), "
                       "ifnull(json_extract(message, '$.event_id'), 'null') from outcomes order by id\"",
                       store);
    int code;
    char *out = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0, "%s", cmd);
    free(cmd);
    return out;
}

/* A client report is what the SDK itself dropped (a send that failed, a
 * rate limit it honoured, a full queue): Relay turns each entry into an
 * outcome (client_discard, or rate_limited; equal ones summed, in Relay's
 * order) and keeps nothing else of it.
 * Found with Debian's sentry-sdk 1.9: the report of a message lost while
 * the server restarted (network_error) became an unsupported_item_type
 * outcome of category 0, and the SDK's count was lost. */
Test(serve, client_reports_become_outcomes) {
    ts_server s = start_server(NULL);
    time_t now = time(NULL);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S.000000Z", gmtime(&(time_t){now - 10}));
    /* Java's SDK sends the time as RFC 3339, here at +02:00 */
    char iso_offset[40];
    strftime(iso_offset, sizeof iso_offset, "%Y-%m-%dT%H:%M:%S.123+02:00", gmtime(&(time_t){now - 20 + 7200}));
    char iso_stamp[32];
    strftime(iso_stamp, sizeof iso_stamp, "%Y-%m-%dT%H:%M:%S.000000Z", gmtime(&(time_t){now - 20}));
    char *body = ts_fmt(
        "{}\n"
        "{\"type\":\"client_report\"}\n{\"timestamp\":%lld.25,\"discarded_events\":["
        "{\"reason\":\"network_error\",\"category\":\"error\",\"quantity\":1},"
        "{\"reason\":\"ratelimit_backoff\",\"category\":\"profile_chunk\",\"quantity\":3},"
        "{\"reason\":\"queue_overflow\",\"category\":\"no_such_category\",\"quantity\":5},"
        "{\"reason\":\"network_error\",\"category\":\"error\",\"quantity\":2}],"
        "\"rate_limited_events\":[{\"reason\":\"\",\"category\":\"transaction\",\"quantity\":4}]}\n"
        "{\"type\":\"client_report\"}\n{\"timestamp\":%lld,\"discarded_events\":["
        "{\"reason\":\"network_error\",\"category\":\"error\",\"quantity\":1}]}\n"
        "{\"type\":\"client_report\"}\n{\"discarded_events\":[{\"reason\":\"x\",\"category\":\"error\"}]}\n"
        "{\"type\":\"client_report\"}\n{\"timestamp\":\"%s\",\"discarded_events\":["
        "{\"reason\":\"before_send\",\"category\":\"profile_chunk_ui\",\"quantity\":2}]}\n",
        (long long)now - 10, (long long)now - 200 * 86400, iso_offset);
    response r = post(s.port, body, strlen(body));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    cr_assert_str_eq(r.body.data, "{}");
    response_free(&r);
    char *got = outcome_rows(s.store);
    char *want = ts_fmt("2|null|2|4|%s|null\n5|network_error|1|3|%s|null\n5|ratelimit_backoff|18|3|%s|null\n"
                        "5|before_send|26|2|%s|null\n",
                        stamp, stamp, stamp, iso_stamp);
    cr_assert_str_eq(got, want, "the report older than the retention and the malformed one give nothing");
    free(got), free(want), free(body);
    ts_server_free(&s);
}

/* A report whose RFC 3339 time is not one Relay reads (a day past its
 * month's end, a sign in a field, a fraction without digits, an offset past
 * 23:59) is ignored whole: no outcome (found by a fuzz campaign reading
 * the parser: sscanf and timegm rolled 2025-11-31 on to December 1st). */
Test(serve, client_reports_with_impossible_times_give_nothing) {
    ts_server s = start_server(NULL);
    time_t now = time(NULL);
    /* Each would have read as a time within the retention: yesterday's date,
     * and the day after the last of a short month among the last 80 days
     * (what it rolled on to is the next month's first, still past). */
    char day[16], overflow[48] = "";
    strftime(day, sizeof day, "%Y-%m-%d", gmtime(&(time_t){now - 86400}));
    for (int back = 80; back > 28 && !overflow[0]; back--) {
        struct tm tm = *gmtime(&(time_t){now - (time_t)back * 86400});
        static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        int year = tm.tm_year + 1900, last = days[tm.tm_mon] + (tm.tm_mon == 1 && year % 4 == 0);
        if (last < 31 && tm.tm_mday == last)
            snprintf(overflow, sizeof overflow, "%04d-%02d-%02d", year, tm.tm_mon + 1, last + 1);
    }
    cr_assert(overflow[0]);
    char *times[] = {ts_fmt("%sT12:00:00Z", overflow),      ts_fmt("%sT+1:00:00Z", day),
                     ts_fmt("%sT12:00:00.Z", day),          ts_fmt("%sT12:00:00+00:99", day),
                     ts_fmt("%sT12:00:00+99:00", day),      ts_fmt("%sT12:00:00+0", day)};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        char *body = ts_fmt("{}\n{\"type\":\"client_report\"}\n{\"timestamp\":\"%s\",\"discarded_events\":["
                            "{\"reason\":\"network_error\",\"category\":\"error\",\"quantity\":1}]}\n",
                            times[i]);
        response r = post(s.port, body, strlen(body));
        cr_assert_eq(r.status, 200, "%s: %s", times[i], r.body.data);
        response_free(&r);
        char *got = outcome_rows(s.store);
        cr_expect_str_eq(got, "", "%s gave outcomes", times[i]);
        free(got), free(body), free(times[i]);
    }
    ts_server_free(&s);
}

/* Without a configured project the generated key is kept in the store
 * (mode 0600): a restart on the same store takes the DSN it gave before. */
Test(serve, generated_key_survives_a_restart) {
    char *dir = ts_temp_dir("tm_serve_key");
    ts_server s = ts_server_start(dir, 0, "");
    char *key_path = ts_fmt("%s/" TM_SRV_KEY_FILE, s.store);
    size_t len;
    char *key = tu_read_file(key_path, &len);
    cr_assert(key && len == 33 && key[32] == '\n', "%s", key_path);
    key[32] = 0;
    char *said = ts_fmt("/1 (generated key, kept in %s)\n", key_path);
    cr_assert(strstr(s.dsn, key) && strstr(s.dsn, said), "%s", s.dsn);
    cr_assert_eq(ts_server_stop(&s), 0);

    ts_server again = ts_server_start(dir, 0, "");
    free(said);
    said = ts_fmt("DSN: http://%s@127.0.0.1:%d/1 (stored key, kept in %s)\n", key, again.port, key_path);
    cr_assert_str_eq(again.dsn, said);
    char *auth = ts_fmt("X-Sentry-Auth: Sentry sentry_key=%s, sentry_version=7", key);
    const char *const headers[] = {auth, NULL};
    chunk c = make_chunk(5);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    response r = request(again.port, "POST", "/api/1/envelope/", headers, env.data, env.len);
    cr_assert_eq(r.status, 200, "the key from before the restart: %s", r.body.data);
    cr_assert_eq(ts_count_rows(again.store, "select count(*) from chunks where project_id = 1"), 1);
    struct stat sb;
    cr_assert_eq(stat(key_path, &sb), 0);
    cr_assert_eq(sb.st_mode & 07777, 0600, "mode %o", sb.st_mode & 07777);

    response_free(&r);
    tu_membuf_free(&env);
    free(c.meta), free(auth), free(said), free(key), free(key_path);
    free(s.dir), free(s.store), free(dir);
    ts_server_free(&again);
}

/* An SDK that lost the answer posts again: each post is acknowledged, the
 * chunk is stored once, and the repeats are counted. */
Test(serve, a_chunk_posted_three_times_is_stored_once) {
    ts_server s = start_server(NULL);
    chunk c = make_chunk(4);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    for (int i = 0; i < 3; i++) {
        response r = post(s.port, env.data, env.len);
        cr_assert_eq(r.status, 200, "post %d: %s", i + 1, r.body.data);
        response_free(&r);
    }
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 1);
    response m = request(s.port, "GET", "/metrics", NULL, NULL, 0);
    cr_assert(strstr(m.body.data, "\ntracemill_chunks_duplicate_total 2\n"), "%s", m.body.data);
    cr_assert(strstr(m.body.data, "tracemill_items_total{type=\"profile_chunk\",outcome=\"accepted\"} 3\n"), "%s",
              m.body.data);
    response_free(&m);
    tu_membuf_free(&env);
    free(c.meta);
    ts_server_free(&s);
}

/* A plain JSON chunk whose chunk_id is the JSON string text given. */
static char *plain_chunk(const char *chunk_id_json) {
    return ts_fmt("{}\n{\"type\":\"profile_chunk\"}\n{\"chunk_id\":\"%s\",\"profiler_id\":\"" UUID_B "\","
                  "\"platform\":\"python\",\"version\":\"2\",\"profile\":{\"frames\":[{\"function\":\"f\"}],"
                  "\"stacks\":[[0]],\"samples\":[{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1.0}]}}\n",
                  chunk_id_json);
}

/* Chunks are unique per (project, chunk_id): the same chunk_id sent to two
 * projects is two rows, and `store get` needs --project to choose (it took
 * one of them in silence). */
Test(serve, store_get_asks_for_the_project_of_a_chunk_id_in_two) {
    ts_server s = start_server(NULL);
    char *body = plain_chunk(UUID_A);
    response r = post(s.port, body, strlen(body));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    const char *const other[] = {"X-Sentry-Auth: Sentry sentry_key=" OTHER_KEY, NULL};
    r = request(s.port, "POST", "/api/43/envelope/", other, body, strlen(body));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 2);
    int code;
    char *cmd = ts_fmt("%s store get %s --store %s 2>&1", TM_CLI, UUID_A, s.store);
    char *said = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 2, "%s", said);
    cr_assert(strstr(said, "more than one project (42, 43)") && strstr(said, "--project"), "%s", said);
    free(said), free(cmd);
    cmd = ts_fmt("%s store get %s --project 43 --store %s", TM_CLI, UUID_A, s.store);
    said = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0, "%s", said);
    cr_assert(strstr(said, "\"chunk_id\":\"" UUID_A "\""), "%s", said);
    free(said), free(cmd);
    cmd = ts_fmt("%s store get %s --project 44 --store %s 2>&1", TM_CLI, UUID_A, s.store);
    said = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 1, "%s", said);
    cr_assert(strstr(said, "no chunk with chunk_id"), "%s", said);
    free(said), free(cmd), free(body);
    /* ls and export take --project too (they listed and wrote every project's chunks) */
    cmd = ts_fmt("%s store ls --project 43 --store %s", TM_CLI, s.store);
    said = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0, "%s", said);
    cr_assert(strstr(said, "project=43") && !strstr(said, "project=42") && strchr(said, '\n') == strrchr(said, '\n'),
              "ls --project 43: %s", said);
    free(said), free(cmd);
    cmd = ts_fmt("%s store export %s/out --project 42 --store %s 2>&1 && ls %s/out", TM_CLI, s.dir, s.store, s.dir);
    said = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0, "%s", said);
    const char *json = strstr(said, "-" UUID_A ".json\n");
    cr_assert(strstr(said, "1 chunks written") && json && !strstr(json + strlen("-" UUID_A ".json"), ".json"),
              "export --project 42: %s", said);
    free(said), free(cmd);
    ts_server_free(&s);
}

/* A --project value that is not a project id is named as such (it got the
 * command's general usage line), and one past 64 bits is refused rather than
 * read as the largest id. */
Test(serve, store_project_value_is_checked_and_named) {
    const char *const bad[] = {"abc", "0", "-1", "01", "42x", "99999999999999999999999", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int code;
        char *cmd = ts_fmt("%s store get " UUID_A " --store /nonexistent --project%s%s 2>&1", TM_CLI,
                           bad[i] ? " " : "", bad[i] ? bad[i] : "");
        char *said = ts_run_capture(cmd, &code);
        cr_assert_eq(code, 2, "%s: %s", cmd, said);
        char *want = ts_fmt("--project takes a project id, a number from 1 to 18446744073709551615, not %s%s%s",
                            bad[i] ? "'" : "", bad[i] ? bad[i] : "nothing", bad[i] ? "'" : "");
        cr_assert(strstr(said, want), "%s: %s", cmd, said);
        free(want), free(said), free(cmd);
    }
}

/* Chunk ids key store rows and Kafka messages and name exported files:
 * plain JSON chunks get the Perfetto path's UUID check, and the accepted
 * ones are normalised. */
Test(serve, hostile_chunk_ids_are_rejected_and_uuids_normalised) {
    ts_server s = start_server(NULL);
    const char *hostile[] = {"../../etc/passwd", "a/b", "\\u001b[2J0123456789abcdef0123456789ab",
                             "0123456789abcdef0123456789abcde\\n", "0123456789abcdef0123456789abcdeg",
                             "01234567-89ab-cdef-0123-456789abcdef0", ""};
    const size_t n_hostile = sizeof hostile / sizeof hostile[0];
    for (size_t i = 0; i < n_hostile; i++) {
        char *body = plain_chunk(hostile[i]);
        response r = post(s.port, body, strlen(body));
        cr_assert_eq(r.status, 200, "%s: %s", hostile[i], r.body.data);
        response_free(&r);
        free(body);
    }
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 0);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes where message like "
                                        "'%\"reason\":\"profiling_invalid_json\"%'"),
                 (int)n_hostile);
    response m = request(s.port, "GET", "/metrics", NULL, NULL, 0);
    char *want = ts_fmt("tracemill_items_total{type=\"profile_chunk\",outcome=\"profiling_invalid_json\"} %zu\n",
                        n_hostile);
    cr_assert(strstr(m.body.data, want), "%s", m.body.data);
    response_free(&m);
    free(want);

    /* a dashed, upper-case UUID is stored (and written in the payload) as 32 lower-case hex digits */
    char *body = plain_chunk("ABCDEF01-2345-6789-ABCD-EF0123456789");
    response r = post(s.port, body, strlen(body));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks where chunk_id = "
                                        "'abcdef0123456789abcdef0123456789'"), 1);
    int code;
    char *cmd = ts_fmt("%s store get ABCDEF01-2345-6789-ABCD-EF0123456789 --store %s", TM_CLI, s.store);
    char *payload = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0, "store get takes the dashed form");
    cr_assert(strstr(payload, "{\"chunk_id\":\"abcdef0123456789abcdef0123456789\",\"profiler_id\":\"" UUID_B "\","),
              "%s", payload);
    free(payload), free(cmd), free(body);
    ts_server_free(&s);
}

/* A store written by an older server (or any SQLite client) may hold ids
 * that are not UUIDs and messages that do not decode: `store ls` shows
 * them escaped, one line each, and `store export` skips them and goes on. */
Test(serve, store_ls_escapes_and_export_skips_bad_rows) {
    char *dir = ts_temp_dir("tm_store_rows");
    char *store_dir = ts_fmt("%s/store", dir);
    tm_srv_store *st;
    tm_error err;
    cr_assert_eq(tm_srv_store_open(store_dir, &st, &err), TM_OK, "%s", err.message);
    tm_srv_chunk_msg m = {.organization_id = 1, .project_id = 1, .received = 1, .retention_days = 90,
                          .payload = (const uint8_t *)"{}", .payload_len = 2};
    tm_srv_buf msg = {0};
    cr_assert_eq(tm_srv_chunk_msg_encode(&m, &msg, &err), TM_OK, "%s", err.message);
    const char *forged = "x\x1b[2J\nforged  project=9  chunk_id=" UUID_A;
    const tm_srv_record recs[] = {
        {.kind = TM_SRV_RECORD_CHUNK, .project_id = 1, .chunk_id = {forged, strlen(forged)}, .value = msg.data,
         .value_len = msg.len},
        {.kind = TM_SRV_RECORD_CHUNK, .project_id = 1, .chunk_id = {UUID_A, 32},
         .value = (const uint8_t *)"not msgpack", .value_len = 11},
        {.kind = TM_SRV_RECORD_CHUNK, .project_id = 1, .chunk_id = {UUID_B, 32}, .value = msg.data,
         .value_len = msg.len},
    };
    cr_assert_eq(tm_srv_store_put(st, recs, 3, 0, &err), TM_OK, "%s", err.message);
    tm_srv_store_close(st);
    tm_srv_buf_release(&msg);
    /* a message that is not even a zstd frame, then a good row after it */
    char *db_path = ts_fmt("%s/tracemill.db", store_dir);
    sqlite3 *db;
    cr_assert_eq(sqlite3_open(db_path, &db), SQLITE_OK);
    const char *insert =
        "INSERT INTO chunks(received, project_id, chunk_id, payload_size, raw_size, message) "
        "VALUES (1, 1, '" UUID_C "', 4, 0, x'deadbeef');"
        "INSERT INTO chunks(received, project_id, chunk_id, payload_size, raw_size, message) "
        "SELECT received, project_id, '" UUID_D "', payload_size, raw_size, message FROM chunks "
        "WHERE chunk_id = '" UUID_B "';";
    cr_assert_eq(sqlite3_exec(db, insert, NULL, NULL, NULL), SQLITE_OK, "%s", sqlite3_errmsg(db));
    sqlite3_close(db);
    free(db_path);

    int code;
    char *cmd = ts_fmt("%s store ls --store %s", TM_CLI, store_dir);
    char *ls = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 0);
    cr_assert_null(strchr(ls, '\x1b'), "%s", ls);
    cr_assert(strstr(ls, "chunk_id=x\\x1b[2J\\x0aforged\\x20\\x20project=9\\x20\\x20chunk_id=" UUID_A "  payload="),
              "%s", ls);
    size_t lines = 0;
    for (const char *p = ls; *p; p++) lines += *p == '\n';
    cr_assert_eq(lines, 5, "%s", ls);
    free(cmd);

    cmd = ts_fmt("%s store export %s/out --store %s 2>&1", TM_CLI, dir, store_dir);
    char *said = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 1, "skipped rows make the export exit 1: %s", said);
    cr_assert(strstr(said, "2 chunks written to"), "%s", said);
    cr_assert(strstr(said, "3 skipped"), "%s", said);
    cr_assert(strstr(said, "(chunk_id " UUID_C "): the stored message is not a zstd frame"), "%s", said);
    cr_assert_null(strchr(said, '\x1b'), "%s", said);
    free(cmd);
    cmd = ts_fmt("ls %s/out", dir);
    char *files = ts_run_capture(cmd, &code);
    cr_assert_str_eq(files, "000003-" UUID_B ".json\n000005-" UUID_D ".json\n");
    free(files), free(said), free(cmd), free(ls);
    cmd = ts_fmt("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd), free(store_dir), free(dir);
}

Test(serve, authentication) {
    ts_server s = start_server(NULL);
    const char *env = "{}\n";
    const char *const none[] = {NULL};
    response r = request(s.port, "POST", "/api/42/envelope/", none, env, 3);
    cr_assert_eq(r.status, 401);
    cr_assert(strstr(r.body.data, "\"detail\":\"missing authorization"), "%s", r.body.data);
    response_free(&r);
    const char *const unknown[] = {"X-Sentry-Auth: Sentry sentry_key=ffffffffffffffffffffffffffffffff", NULL};
    r = request(s.port, "POST", "/api/42/envelope/", unknown, env, 3);
    cr_assert_eq(r.status, 401);
    response_free(&r);
    /* another project's key */
    const char *const other[] = {"X-Sentry-Auth: Sentry sentry_key=" OTHER_KEY ", sentry_version=7", NULL};
    r = request(s.port, "POST", "/api/42/envelope/", other, env, 3);
    cr_assert_eq(r.status, 403);
    response_free(&r);
    /* the key as a query parameter */
    r = request(s.port, "POST", "/api/43/envelope/?sentry_key=" OTHER_KEY, none, env, 3);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    /* the Sentry scheme in Authorization, as Relay takes it */
    const char *const authorization[] = {"Authorization: Sentry sentry_key=" OTHER_KEY, NULL};
    r = request(s.port, "POST", "/api/43/envelope/", authorization, env, 3);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    /* two different keys, in the header and the query: refused, neither taken */
    r = request(s.port, "POST", "/api/42/envelope/?sentry_key=" OTHER_KEY, auth_headers, env, 3);
    cr_assert_eq(r.status, 400, "%s", r.body.data);
    cr_assert(strstr(r.body.data, "two different public keys"), "%s", r.body.data);
    response_free(&r);
    r = request(s.port, "GET", "/api/42/envelope/", auth_headers, NULL, 0);
    cr_assert_eq(r.status, 405);
    cr_assert(strcasestr(r.headers.data, "\r\nAllow: POST, OPTIONS\r\n"), "a 405 says what is allowed: %s",
              r.headers.data);
    response_free(&r);
    r = request(s.port, "POST", "/healthz", NULL, "x", 1);
    cr_assert_eq(r.status, 405);
    cr_assert(strcasestr(r.headers.data, "\r\nAllow: GET, HEAD\r\n"), "%s", r.headers.data);
    response_free(&r);
    r = request(s.port, "GET", "/nope", NULL, NULL, 0);
    cr_assert_eq(r.status, 404);
    response_free(&r);
    r = request(s.port, "GET", "/healthz", NULL, NULL, 0);
    cr_assert_eq(r.status, 200);
    cr_assert_str_eq(r.body.data, "ok\n");
    response_free(&r);
    r = request(s.port, "GET", "/metrics", NULL, NULL, 0);
    cr_assert_eq(r.status, 200);
    cr_assert(strstr(r.body.data, "tracemill_requests_total{status=\"401\"} 2\n"), "%s", r.body.data);
    cr_assert(strstr(r.body.data, "tracemill_requests_total{status=\"403\"} 1\n"), "%s", r.body.data);
    cr_assert(strstr(r.body.data, "# TYPE tracemill_conversion_seconds histogram\n"), "%s", r.body.data);
    cr_assert(strstr(r.body.data, "tracemill_store_backlog 0\n"), "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 0);
    ts_server_free(&s);
}

/* ---- content encodings ---- */

static tu_membuf deflate_with(const void *data, size_t len, int window_bits) {
    tu_membuf out = {0};
    z_stream z = {0};
    cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY), Z_OK);
    uLong bound = deflateBound(&z, (uLong)len);
    out.data = malloc(bound + 1);
    out.cap = bound + 1;
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)len;
    z.next_out = (Bytef *)out.data;
    z.avail_out = (uInt)bound;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    out.len = z.total_out;
    deflateEnd(&z);
    return out;
}

static tu_membuf encode(const char *coding, const void *data, size_t len) {
    if (strcmp(coding, "gzip") == 0) return deflate_with(data, len, 31);
    if (strcmp(coding, "deflate") == 0) return deflate_with(data, len, 15);
    tu_membuf out = {0};
    if (strcmp(coding, "zstd") == 0) {
        size_t bound = ZSTD_compressBound(len);
        out.data = malloc(bound);
        out.len = ZSTD_compress(out.data, bound, data, len, 3);
        cr_assert(!ZSTD_isError(out.len));
    } else {
        size_t n = BrotliEncoderMaxCompressedSize(len);
        out.data = malloc(n);
        cr_assert(BrotliEncoderCompress(5, 22, BROTLI_MODE_GENERIC, len, data, &n, (uint8_t *)out.data));
        out.len = n;
    }
    return out;
}

Test(serve, content_encodings_and_a_bomb) {
    ts_server s = start_server("limits: {max_envelope_size: 4MiB}\n");
    const char *codings[] = {"gzip", "deflate", "zstd", "br"};
    for (unsigned i = 0; i < 4; i++) {
        chunk c = make_chunk(100 + i);
        tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
        tu_membuf enc = encode(codings[i], env.data, env.len);
        char *ce = ts_fmt("Content-Encoding: %s", codings[i]);
        const char *const h[] = {auth_headers[0], ce, NULL};
        response r = request(s.port, "POST", "/api/42/envelope/", h, enc.data, enc.len);
        cr_assert_eq(r.status, 200, "%s: %s", codings[i], r.body.data);
        char *cmd = ts_fmt("%s store get %s --store %s", TM_CLI, c.id, s.store);
        int code;
        char *payload = ts_run_capture(cmd, &code);
        char *want = expected_payload(&c, s.dir);
        cr_assert_eq(code, 0, "%s", codings[i]);
        cr_assert_str_eq(payload, want, "%s", codings[i]);
        free(payload), free(want), free(cmd), free(ce), free(c.meta);
        response_free(&r);
        tu_membuf_free(&enc);
        tu_membuf_free(&env);
    }
    /* 64 MiB of zeros in ~64 KB of gzip: refused at the 4 MiB cap */
    size_t bomb_len = 64u << 20;
    char *zeros = calloc(1, bomb_len);
    for (unsigned i = 0; i < 4; i++) {
        tu_membuf bomb = encode(codings[i], zeros, bomb_len);
        char *ce = ts_fmt("Content-Encoding: %s", codings[i]);
        const char *const h[] = {auth_headers[0], ce, NULL};
        response r = request(s.port, "POST", "/api/42/envelope/", h, bomb.data, bomb.len);
        cr_assert_eq(r.status, 413, "%s bomb: %ld %s", codings[i], r.status, r.body.data);
        response_free(&r);
        tu_membuf_free(&bomb);
        free(ce);
    }
    free(zeros);
    const char *const unknown[] = {auth_headers[0], "Content-Encoding: compress", NULL};
    response r = request(s.port, "POST", "/api/42/envelope/", unknown, "{}\n", 3);
    cr_assert_eq(r.status, 415);
    response_free(&r);
    const char *const broken[] = {auth_headers[0], "Content-Encoding: gzip", NULL};
    r = request(s.port, "POST", "/api/42/envelope/", broken, "\x1f\x8b garbage", 10);
    cr_assert_eq(r.status, 400, "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 4);
    ts_server_free(&s);
}

/* Content-Encoding in several field lines is one list (RFC 9110 §5.3): the
 * gzip of the second line was not decoded behind an identity first line. */
Test(serve, content_encoding_in_two_field_lines) {
    ts_server s = start_server(NULL);
    chunk c = make_chunk(200);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    tu_membuf enc = encode("gzip", env.data, env.len);
    const char *const two[] = {auth_headers[0], "Content-Encoding: identity", "content-encoding: GZIP", NULL};
    response r = request(s.port, "POST", "/api/42/envelope/", two, enc.data, enc.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    const char *const stacked[] = {auth_headers[0], "Content-Encoding: gzip", "Content-Encoding: gzip", NULL};
    r = request(s.port, "POST", "/api/42/envelope/", stacked, enc.data, enc.len);
    cr_assert_eq(r.status, 415, "two gzip lines are two codings: %ld %s", r.status, r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 1);
    free(c.meta);
    tu_membuf_free(&enc);
    tu_membuf_free(&env);
    ts_server_free(&s);
}

Test(serve, rate_limits) {
    char *dir = ts_temp_dir("tm_serve");
    ts_server s = ts_server_start(dir, 0, "projects:\n  - id: 42\n    public_keys: [" KEY "]\n    rate_limit: 2\n");
    free(dir);
    int ok = 0, limited = 0;
    for (unsigned i = 0; i < 6; i++) {
        chunk c = make_chunk(200 + i);
        tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
        response r = post(s.port, env.data, env.len);
        if (r.status == 200) ok++;
        if (r.status == 429) {
            limited++;
            cr_assert(strstr(r.headers.data, "Retry-After: "), "%s", r.headers.data);
            cr_assert(strstr(r.headers.data, "X-Sentry-Rate-Limits: 1:profile_chunk;profile_chunk_ui:project:"),
                      "%s", r.headers.data);
        }
        response_free(&r);
        tu_membuf_free(&env);
        free(c.meta);
    }
    /* a burst of 2, refilled at 2/s: at least 3 of 6 quick requests refused */
    cr_assert(ok >= 2 && limited >= 3 && ok + limited == 6, "ok %d limited %d", ok, limited);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), ok);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes where message like '%\"outcome\":2%'"), limited);
    ts_server_free(&s);
}

/* A rate limit on chunks holds back the chunks only: Relay still takes the
 * envelope's other items (here dropped with their outcomes) and answers 429
 * with the limits, and SDKs then count nothing as lost themselves, trusting
 * the server's outcomes. The event and attachment beside a limited chunk
 * were dropped without any outcome. */
Test(serve, a_rate_limited_chunk_keeps_the_other_items) {
    char *dir = ts_temp_dir("tm_serve");
    /* a refill of 1000 s: the first chunk takes the bucket, the next is limited however slow the test runs */
    ts_server s = ts_server_start(dir, 0, "projects:\n  - id: 42\n    public_keys: [" KEY "]\n    rate_limit: 0.001\n");
    free(dir);
    chunk first = make_chunk(300), second = make_chunk(301);
    tu_membuf env = android_envelope(&first, "application/x-perfetto-trace");
    response r = post(s.port, env.data, env.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    tu_membuf_free(&env);
    env = android_envelope(&second, "application/x-perfetto-trace");
    const char *others = "{\"type\":\"event\",\"length\":2}\n{}\n"
                         "{\"type\":\"attachment\",\"length\":16}\nattachment bytes\n";
    tu_membuf_write(&env, others, strlen(others));
    r = post(s.port, env.data, env.len);
    cr_assert_eq(r.status, 429, "%s", r.body.data);
    cr_assert(strstr(r.headers.data, "X-Sentry-Rate-Limits: "), "%s", r.headers.data);
    response_free(&r);
    char *got = outcome_quantities(s.store);
    cr_assert(strcmp(got, "26:1 1:1 4:16 22:1") == 0, "the chunk rate limited, the event and attachment dropped: %s",
              got);
    free(got);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 1);
    tu_membuf_free(&env);
    free(first.meta), free(second.meta);
    ts_server_free(&s);
}

Test(serve, malformed_config_is_refused_at_start) {
    char *dir = ts_temp_dir("tm_serve");
    char *path = ts_fmt("%s/bad.yml", dir);
    const char *yaml = "listen: 127.0.0.1:0\nprojects:\n  - id: 42\n    public_keys: [abc]\n    featurs: []\n";
    ts_write_file(path, yaml, strlen(yaml));
    char *cmd = ts_fmt("%s serve --config %s 2>&1", TM_CLI, path);
    int code;
    char *out = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 2, "%s", out);
    cr_assert(strstr(out, "featurs"), "%s", out);
    cr_assert(strstr(out, "5:"), "the error names the line: %s", out);
    free(out), free(cmd);
    cmd = ts_fmt("%s serve --config %s/missing.yml 2>&1", TM_CLI, dir);
    out = ts_run_capture(cmd, &code);
    cr_assert_eq(code, 3, "%s", out);
    cr_assert(strstr(out, "missing.yml"), "%s", out);
    free(out), free(cmd), free(path);
    cmd = ts_fmt("rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    free(cmd), free(dir);
}

/* ---- kill -9 under load ---- */

typedef struct loader {
    int port;
    unsigned first, count;
    unsigned acked[400];
    unsigned n_acked;
} loader;

static void *load(void *arg) {
    loader *l = arg;
    for (unsigned i = 0; i < l->count; i++) {
        chunk c = make_chunk(l->first + i);
        tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
        CURL *h = curl_easy_init();
        char *url = ts_fmt("http://127.0.0.1:%d/api/42/envelope/", l->port);
        struct curl_slist *hd = curl_slist_append(NULL, auth_headers[0]);
        tu_membuf body = {0};
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hd);
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, env.data);
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)env.len);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
        long status = 0;
        int done = curl_easy_perform(h) == CURLE_OK;
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
        if (done && status == 200) l->acked[l->n_acked++] = l->first + i;
        curl_slist_free_all(hd);
        curl_easy_cleanup(h);
        tu_membuf_free(&body);
        tu_membuf_free(&env);
        free(url), free(c.meta);
        if (!done) break; /* the server is gone */
    }
    return NULL;
}

Test(serve, kill_9_under_load_loses_no_acknowledged_chunk) {
    char *dir = ts_temp_dir("tm_serve");
    ts_server s = ts_server_start(dir, 0, project_yaml);
    loader l[4];
    pthread_t th[4];
    for (unsigned t = 0; t < 4; t++) {
        l[t] = (loader){.port = s.port, .first = 1000 + t * 400, .count = 400};
        pthread_create(&th[t], NULL, load, &l[t]);
    }
    /* kill once some chunks are in */
    while (ts_count_rows(s.store, "select count(*) from chunks") < 20) usleep(20000);
    kill(s.pid, SIGKILL);
    waitpid(s.pid, NULL, 0);
    s.pid = 0;
    fclose(s.out);
    s.out = NULL;
    unsigned acked = 0;
    for (unsigned t = 0; t < 4; t++) {
        pthread_join(th[t], NULL);
        acked += l[t].n_acked;
    }
    cr_assert(acked >= 1);
    /* restart on the same store: everything acknowledged is there, once */
    ts_server again = ts_server_start(dir, 0, project_yaml);
    for (unsigned t = 0; t < 4; t++)
        for (unsigned i = 0; i < l[t].n_acked; i++) {
            char *sql = ts_fmt("select count(*) from chunks where chunk_id = '%08x%024x'", l[t].acked[i], 0xabcu);
            cr_assert_eq(ts_count_rows(again.store, sql), 1, "acknowledged chunk %u", l[t].acked[i]);
            free(sql);
        }
    cr_assert_eq(ts_count_rows(again.store, "select count(*) from (select chunk_id from chunks group by chunk_id "
                                         "having count(*) > 1)"),
                 0, "a chunk was stored twice");
    cr_assert_eq(ts_server_stop(&again), 0);
    ts_server_free(&again);
    free(s.dir), free(s.store), free(dir);
}

/* ---- Kafka (the mock cluster runs in this process) ---- */

typedef struct kafka_env {
    rd_kafka_t *host;
    rd_kafka_mock_cluster_t *cluster;
    const char *bootstraps;
} kafka_env;

static kafka_env kafka_start(void) {
    kafka_env k = {0};
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "log_level", "0", errstr, sizeof errstr);
    k.host = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cr_assert(k.host, "%s", errstr);
    k.cluster = rd_kafka_mock_cluster_new(k.host, 3);
    cr_assert(k.cluster);
    k.bootstraps = rd_kafka_mock_cluster_bootstraps(k.cluster);
    cr_assert_eq(rd_kafka_mock_topic_create(k.cluster, "ingest-profiles", 1, 3), RD_KAFKA_RESP_ERR_NO_ERROR);
    cr_assert_eq(rd_kafka_mock_topic_create(k.cluster, "outcomes", 1, 3), RD_KAFKA_RESP_ERR_NO_ERROR);
    return k;
}

static void kafka_stop(kafka_env *k) {
    rd_kafka_mock_cluster_destroy(k->cluster);
    rd_kafka_destroy(k->host);
}

typedef struct consumed {
    tu_membuf *values;
    char **project_ids;
    size_t n;
} consumed;

/* Reads every message of topic (partition 0) from the beginning until
 * `want` arrived or nothing new came for a few seconds. */
static consumed kafka_consume(const kafka_env *k, const char *topic, size_t want) {
    consumed c = {calloc(want + 64, sizeof(tu_membuf)), calloc(want + 64, sizeof(char *)), 0};
    char errstr[256];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", k->bootstraps, errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "group.id", "test", errstr, sizeof errstr);
    rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    cr_assert(rk, "%s", errstr);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    cr_assert_eq(rd_kafka_assign(rk, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(parts);
    int idle = 0;
    while (c.n < want + 64 && idle < (c.n >= want ? 3 : 60)) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m) {
            idle++;
            continue;
        }
        if (!m->err) {
            idle = 0;
            tu_membuf_write(&c.values[c.n], m->payload, m->len);
            rd_kafka_headers_t *hdrs = NULL;
            const void *v = NULL;
            size_t vlen = 0;
            if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                rd_kafka_header_get_last(hdrs, "project_id", &v, &vlen) == RD_KAFKA_RESP_ERR_NO_ERROR)
                c.project_ids[c.n] = strndup(v, vlen);
            c.n++;
        }
        rd_kafka_message_destroy(m);
    }
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return c;
}

static void consumed_free(consumed *c) {
    for (size_t i = 0; i < c->n; i++) {
        tu_membuf_free(&c->values[i]);
        free(c->project_ids[i]);
    }
    free(c->values);
    free(c->project_ids);
}

static char *kafka_yaml(const kafka_env *k) {
    return ts_fmt("%skafka:\n  bootstrap_servers: \"%s\"\n  delivery_timeout_ms: 1500\n", project_yaml, k->bootstraps);
}

Test(serve, chunks_and_outcomes_into_kafka) {
    kafka_env k = kafka_start();
    char *yaml = kafka_yaml(&k);
    char *dir = ts_temp_dir("tm_serve");
    ts_server s = ts_server_start(dir, 0, yaml);
    chunk c = make_chunk(300);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    response r = post(s.port, env.data, env.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    const char *bad = "{}\n{\"type\":\"profile_chunk\",\"meta_length\":99,\"length\":3,\"platform\":\"android\"}\nabc\n";
    r = post(s.port, bad, strlen(bad));
    cr_assert_eq(r.status, 200);
    response_free(&r);

    consumed got = kafka_consume(&k, "ingest-profiles", 1);
    cr_assert_eq(got.n, 1);
    cr_assert_str_eq(got.project_ids[0], "42");
    tm_srv_chunk_msg m;
    char ctype[64];
    tm_error err;
    cr_assert_eq(tm_srv_chunk_msg_decode((const uint8_t *)got.values[0].data, got.values[0].len, &m, ctype,
                                         sizeof ctype, &err),
                 TM_OK, "%s", err.message);
    cr_assert_eq(m.organization_id, 7);
    cr_assert_eq(m.project_id, 42);
    cr_assert_eq(m.retention_days, 30);
    cr_assert(m.received > 1700000000u);
    cr_assert_str_eq(ctype, "perfetto");
    char *want = expected_payload(&c, dir);
    cr_assert_eq(m.payload_len + 1, strlen(want), "the payload is the CLI's output without its newline");
    cr_assert(memcmp(m.payload, want, m.payload_len) == 0, "payload differs from `tracemill convert --meta`");
    cr_assert_eq(m.raw_profile_len, demo_trace_len);
    cr_assert(memcmp(m.raw_profile, demo_trace, demo_trace_len) == 0);
    consumed_free(&got);

    consumed outcomes = kafka_consume(&k, "outcomes", 1);
    cr_assert_eq(outcomes.n, 1);
    cr_assert(strstr(outcomes.values[0].data, "\"reason\":\"profiling_invalid_sampled_profile\""), "%s",
              outcomes.values[0].data);
    cr_assert(strstr(outcomes.values[0].data, "\"category\":26"), "%s", outcomes.values[0].data);
    consumed_free(&outcomes);

    cr_assert_eq(ts_server_stop(&s), 0);
    ts_server_free(&s);
    kafka_stop(&k);
    free(want), free(yaml), free(dir), free(c.meta);
    tu_membuf_free(&env);
}

Test(serve, broker_outage_spools_and_replays_in_order) {
    kafka_env k = kafka_start();
    char *yaml = kafka_yaml(&k);
    char *dir = ts_temp_dir("tm_serve");
    ts_server s = ts_server_start(dir, 0, yaml);
    for (int b = 1; b <= 3; b++) rd_kafka_mock_broker_set_down(k.cluster, b);
    const unsigned n = 6;
    for (unsigned i = 0; i < n; i++) {
        chunk c = make_chunk(400 + i);
        tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
        response r = post(s.port, env.data, env.len);
        cr_assert_eq(r.status, 200, "chunk %u during the outage: %s", i, r.body.data);
        response_free(&r);
        tu_membuf_free(&env);
        free(c.meta);
    }
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from spool"), (int)n);
    response r = request(s.port, "GET", "/metrics", NULL, NULL, 0);
    cr_assert(strstr(r.body.data, "tracemill_spooled 6\n"), "%s", r.body.data);
    response_free(&r);
    /* stop while spooled: the next run replays */
    cr_assert_eq(ts_server_stop(&s), 0);
    for (int b = 1; b <= 3; b++) rd_kafka_mock_broker_set_up(k.cluster, b);
    ts_server again = ts_server_start(dir, 0, yaml);
    consumed got = kafka_consume(&k, "ingest-profiles", n);
    cr_assert_eq(got.n, n, "every spooled chunk exactly once");
    for (unsigned i = 0; i < n; i++) {
        tm_srv_chunk_msg m;
        char ctype[64], id[64];
        tm_error err;
        cr_assert_eq(tm_srv_chunk_msg_decode((const uint8_t *)got.values[i].data, got.values[i].len, &m, ctype,
                                             sizeof ctype, &err),
                     TM_OK);
        snprintf(id, sizeof id, "\"chunk_id\":\"%08x%024x\"", 400 + i, 0xabcu);
        cr_assert(memmem(m.payload, m.payload_len, id, strlen(id)), "message %u is not chunk %u: order lost", i, i);
    }
    consumed_free(&got);
    for (int tries = 0; ts_count_rows(again.store, "select count(*) from spool") && tries < 100; tries++) usleep(50000);
    cr_assert_eq(ts_count_rows(again.store, "select count(*) from spool"), 0);
    cr_assert_eq(ts_server_stop(&again), 0);
    ts_server_free(&again);
    kafka_stop(&k);
    free(s.dir), free(s.store), free(yaml), free(dir);
}

/* Items of other types go to the upstream unchanged when one is set. */
Test(serve, other_items_forwarded_upstream) {
    ts_server up = start_server(NULL);
    char *yaml = ts_fmt("upstream: http://127.0.0.1:%d\n", up.port);
    ts_server s = start_server(yaml);
    chunk c = make_chunk(500);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    const char *event = "{\"type\":\"event\",\"length\":11}\n{\"x\":\"evt\"}\n";
    tu_membuf_write(&env, event, strlen(event));
    response r = post(s.port, env.data, env.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 1, "the chunk stays here");
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes"), 0);
    /* the upstream (a tracemill too) received only the event, and dropped it with an outcome */
    cr_assert_eq(ts_count_rows(up.store, "select count(*) from chunks"), 0);
    char *outcomes = stored_outcomes(up.store);
    cr_assert(strstr(outcomes, "\"reason\":\"unsupported_item_type\""), "%s", outcomes);
    cr_assert(strstr(outcomes, "\"category\":1,"), "an event counts as an error: %s", outcomes);
    free(outcomes);
    /* the key in the query (as JavaScript SDKs send it) reaches the upstream too, as a header */
    const char *const none[] = {NULL};
    char *path = ts_fmt("/api/42/envelope/?sentry_key=%s", KEY);
    r = request(s.port, "POST", path, none, env.data, env.len);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    response_free(&r);
    free(path);
    cr_assert_eq(ts_count_rows(up.store, "select count(*) from outcomes"), 2, "the upstream took the second event");
    /* the upstream gone: 503, and nothing of the envelope is kept */
    cr_assert_eq(ts_server_stop(&up), 0);
    r = post(s.port, env.data, env.len);
    cr_assert_eq(r.status, 503, "%s", r.body.data);
    cr_assert(strstr(r.body.data, "upstream"), "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 1);
    /* and /metrics counts nothing of it as accepted or forwarded: the two envelopes kept, no more */
    r = request(s.port, "GET", "/metrics", NULL, NULL, 0);
    cr_assert(strstr(r.body.data, "tracemill_items_total{type=\"profile_chunk\",outcome=\"accepted\"} 2\n") &&
                  strstr(r.body.data, "tracemill_items_total{type=\"other\",outcome=\"forwarded\"} 2\n"),
              "%s", r.body.data);
    response_free(&r);
    ts_server_free(&s);
    ts_server_free(&up);
    tu_membuf_free(&env);
    free(c.meta), free(yaml);
}

/* The legacy store endpoint (where SDKs before envelopes, such as
 * Debian's sentry-sdk 1.9, send errors) takes one JSON event: wrapped in
 * an envelope, it goes upstream like any other item, and the answer names
 * its id. It was a 404, so such an SDK lost every error. */
Test(serve, legacy_store_endpoint_forwards_events) {
    ts_server up = start_server(NULL);
    char *yaml = ts_fmt("upstream: http://127.0.0.1:%d\n", up.port);
    ts_server s = start_server(yaml);
    const char *event = "{\"event_id\":\"ABCDEF01-2345-6789-ABCD-EF0123456789\",\"message\":\"boom\"}";
    response r = request(s.port, "POST", "/api/42/store/", auth_headers, event, strlen(event));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    cr_assert_str_eq(r.body.data, "{\"id\":\"abcdef0123456789abcdef0123456789\"}");
    response_free(&r);
    char *outcomes = stored_outcomes(up.store);
    cr_assert(strstr(outcomes, "\"reason\":\"unsupported_item_type\"") && strstr(outcomes, "\"category\":1,"),
              "the upstream got an event: %s", outcomes);
    free(outcomes);
    /* no event_id: one is made; the key in the query, as for envelopes */
    const char *bare = "{\"message\":\"boom\"}";
    char *path = ts_fmt("/api/42/store?sentry_key=%s", KEY);
    r = request(s.port, "POST", path, NULL, bare, strlen(bare));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    cr_assert(strlen(r.body.data) == 41 && strncmp(r.body.data, "{\"id\":\"", 7) == 0, "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(up.store, "select count(*) from outcomes"), 2);
    /* no key: an event has no envelope header to bring a dsn */
    r = request(s.port, "POST", "/api/42/store/", NULL, bare, strlen(bare));
    cr_assert_eq(r.status, 401, "%s", r.body.data);
    response_free(&r);
    /* not an event: 400 naming the byte, nothing forwarded */
    r = request(s.port, "POST", path, NULL, "{\"message\":", 11);
    cr_assert_eq(r.status, 400, "%s", r.body.data);
    cr_assert(strstr(r.body.data, "invalid event at byte 11"), "%s", r.body.data);
    response_free(&r);
    r = request(s.port, "POST", path, NULL, "{\"event_id\":\"x\"}", 16);
    cr_assert_eq(r.status, 400, "%s", r.body.data);
    cr_assert(strstr(r.body.data, "event_id is not a UUID"), "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(up.store, "select count(*) from outcomes"), 2);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 0);
    ts_server_free(&s);
    ts_server_free(&up);
    free(path), free(yaml);
}

/* The store endpoint makes the item Relay makes of the event's "type"
 * (ItemType::from_event_type): a transaction, a security report, feedback
 * or an event. Every body was wrapped as an event, so an SDK's transaction
 * posted there was counted (and forwarded) as an error. */
Test(serve, legacy_store_endpoint_keeps_the_event_type) {
    ts_server s = start_server(NULL);
    const char *bodies[] = {"{\"type\":\"transaction\",\"spans\":[]}", "{\"type\":\"csp\"}", "{\"type\":\"feedback\"}",
                            "{\"type\":\"error\"}", "{\"type\":\"nel\"}", "{\"message\":\"no type\"}"};
    for (size_t i = 0; i < sizeof bodies / sizeof bodies[0]; i++) {
        response r = request(s.port, "POST", "/api/42/store/", auth_headers, bodies[i], strlen(bodies[i]));
        cr_assert_eq(r.status, 200, "%s: %s", bodies[i], r.body.data);
        response_free(&r);
    }
    char *got = outcome_quantities(s.store);
    cr_assert(strcmp(got, "2:1 3:1 14:1 1:1 1:1 1:1") == 0, "transaction, security, feedback, then events: %s", got);
    free(got);
    ts_server_free(&s);
}

/* A browser SDK posts from its page's origin: the preflight is answered
 * without a key, and every answer of the API (a refusal too) lets the
 * page read it. Without them a browser dropped every chunk. */
Test(serve, cors_for_browser_sdks) {
    ts_server s = start_server(NULL);
    const char *const preflight[] = {"Origin: https://app.example", "Access-Control-Request-Method: POST",
                                     "Access-Control-Request-Headers: content-type", NULL};
    response r = request(s.port, "OPTIONS", "/api/42/envelope/", preflight, NULL, 0);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    cr_assert(strcasestr(r.headers.data, "\r\nAccess-Control-Allow-Origin: *\r\n") &&
                  strcasestr(r.headers.data, "\r\nAccess-Control-Allow-Methods: POST") &&
                  strcasestr(r.headers.data, "\r\nAccess-Control-Allow-Headers: Content-Type,"),
              "%s", r.headers.data);
    response_free(&r);
    const char *const origin[] = {"Origin: https://app.example", NULL};
    char *path = ts_fmt("/api/42/envelope/?sentry_key=%s", KEY);
    r = request(s.port, "POST", path, origin, "{}\n", 3);
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    cr_assert(strcasestr(r.headers.data, "\r\nAccess-Control-Allow-Origin: *\r\n") &&
                  strcasestr(r.headers.data, "\r\nAccess-Control-Expose-Headers: Retry-After, X-Sentry-Rate-Limits"),
              "%s", r.headers.data);
    response_free(&r);
    r = request(s.port, "POST", "/api/42/envelope/?sentry_key=" OTHER_KEY, origin, "{}\n", 3);
    cr_assert_eq(r.status, 403, "%s", r.body.data);
    cr_assert(strcasestr(r.headers.data, "\r\nAccess-Control-Allow-Origin: *\r\n"), "%s", r.headers.data);
    response_free(&r);
    /* not the API's: no CORS */
    r = request(s.port, "GET", "/healthz", origin, NULL, 0);
    cr_assert(!strcasestr(r.headers.data, "Access-Control"), "%s", r.headers.data);
    response_free(&r);
    ts_server_free(&s);
    free(path);
}

/* SIGTERM while a request is in flight: it is answered, then exit 0. */
/* An upstream that refuses the forwarded items (4xx) has its answer passed
 * on, not turned into a 503 that asks the client to send it again for
 * ever; nothing of the envelope is kept either way. */
Test(serve, an_upstream_refusal_is_passed_on) {
    char *dir = ts_temp_dir("tm_serve_up");
    ts_server up = ts_server_start(dir, 0, "projects:\n  - id: 43\n    public_keys: [" OTHER_KEY "]\n");
    free(dir);
    char *yaml = ts_fmt("upstream: http://127.0.0.1:%d\n", up.port);
    ts_server s = start_server(yaml);
    const char *env = "{}\n{\"type\":\"event\",\"length\":11}\n{\"x\":\"evt\"}\n";
    response r = post(s.port, env, strlen(env));
    cr_assert_eq(r.status, 401, "the upstream knows no key of project 42: %s", r.body.data);
    cr_assert(strstr(r.body.data, "upstream") && strstr(r.body.data, "401"), "%s", r.body.data);
    response_free(&r);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from outcomes"), 0);
    ts_server_free(&s);
    ts_server_free(&up);
    free(yaml);
}

/* The envelope header's event_id is a UUID, as Relay's EventId: answered
 * as 32 lowercase hex digits, and refused (400) when it is not one (it was
 * echoed as sent, escapes and all). */
Test(serve, the_event_id_is_a_uuid) {
    ts_server s = start_server(NULL);
    const char *dashed = "{\"event_id\":\"ABCDEF01-2345-6789-ABCD-EF0123456789\"}\n";
    response r = post(s.port, dashed, strlen(dashed));
    cr_assert_eq(r.status, 200, "%s", r.body.data);
    cr_assert_str_eq(r.body.data, "{\"id\":\"abcdef0123456789abcdef0123456789\"}");
    response_free(&r);
    const char *const bad[] = {"{\"event_id\":\"not-a-uuid\"}\n", "{\"event_id\":\"\\u0041bc\"}\n",
                               "{\"event_id\":\"\xff\xfe\"}\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        r = post(s.port, bad[i], strlen(bad[i]));
        cr_assert_eq(r.status, 400, "%s: %s", bad[i], r.body.data);
        cr_assert(strstr(r.body.data, "event_id is not a UUID"), "%s", r.body.data);
        response_free(&r);
    }
    ts_server_free(&s);
}

Test(serve, sigterm_drains_requests_in_flight) {
    ts_server s = start_server(NULL);
    chunk c = make_chunk(601);
    tu_membuf env = android_envelope(&c, "application/x-perfetto-trace");
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s.port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    char *head = ts_fmt("POST /api/42/envelope/ HTTP/1.1\r\nHost: x\r\n%s\r\nContent-Length: %zu\r\n\r\n",
                     auth_headers[0], env.len);
    size_t half = env.len / 2;
    cr_assert_eq(write(fd, head, strlen(head)), (ssize_t)strlen(head));
    cr_assert_eq(write(fd, env.data, half), (ssize_t)half);
    /* the server has the request in hand once its gauge says so (its
     * connection thread may run late on a loaded machine) */
    int seen = 0;
    for (int tries = 0; !seen && tries < 500; tries++) {
        response r = request(s.port, "GET", "/metrics", NULL, NULL, 0);
        cr_assert_eq(r.status, 200);
        seen = strstr(r.body.data, "\ntracemill_requests_in_flight 1\n") != NULL;
        response_free(&r);
        if (!seen) usleep(10000);
    }
    cr_assert(seen, "the request never showed as in flight");
    signal(SIGPIPE, SIG_IGN); /* a closed connection fails the assertions below, not the process */
    kill(s.pid, SIGTERM);
    usleep(100000);
    cr_assert_eq(write(fd, env.data + half, env.len - half), (ssize_t)(env.len - half));
    char answer[4096];
    size_t got = 0;
    ssize_t n;
    while (got < sizeof answer - 1 && (n = read(fd, answer + got, sizeof answer - 1 - got)) > 0) {
        got += (size_t)n;
        answer[got] = 0;
        if (strstr(answer, "\r\n\r\n{\"id\"") && strchr(strstr(answer, "{\"id\""), '}')) break;
    }
    answer[got] = 0;
    cr_assert(strncmp(answer, "HTTP/1.1 200", 12) == 0, "a request in flight gets its answer: %s", answer);
    close(fd);
    int status;
    waitpid(s.pid, &status, 0);
    s.pid = 0;
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    cr_assert_eq(ts_count_rows(s.store, "select count(*) from chunks"), 1);
    tu_membuf_free(&env);
    free(c.meta), free(head);
    ts_server_free(&s);
}
