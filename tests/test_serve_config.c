/*
 * test_serve_config.c — the server's configuration (server/config.c) and
 * rate limiter (server/ratelimit.c).
 *
 * Covered: a full YAML file read back field by field, the defaults, every
 * listen/size/feature/key form, lists added to what is configured, every
 * error (code, key path, line:column and byte offset; the expected position
 * is marked with '^' in the test's YAML and removed before parsing), the
 * file loader, the command-line overrides, finish with and without
 * projects (the generated key), authentication outcomes, and the token
 * buckets driven by explicit clock readings (burst, refill, retry-after,
 * unlimited, requests larger than the bucket).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server.h"

#define MIB (1024ull * 1024ull)
#define SEC 1000000000ull

static tm_srv_config cfg;

static void setup(void) {
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_init(&cfg, &err), TM_OK);
}

static void teardown(void) {
    tm_srv_config_release(&cfg);
}

TestSuite(serve_config, .init = setup, .fini = teardown);

static void parse_ok(const char *yaml) {
    tm_error err = {0};
    tm_status st = tm_srv_config_parse(&cfg, yaml, strlen(yaml), &err);
    cr_assert_eq(st, TM_OK, "parse failed: %s", err.message);
}

/* "LINE:COL:" (1-based) of byte off in s. */
static void line_col(const char *s, size_t off, char *out, size_t cap) {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (s[i] == '\n') line++, col = 1;
        else col++;
    }
    snprintf(out, cap, "%zu:%zu:", line, col);
}

/* Parses marked (with '^' where the error must point, removed first) on
 * top of cfg and checks the code, the offset, "LINE:COL:" and that the
 * message holds path and text. */
static void parse_fails_on(const char *marked, tm_status code, const char *path, const char *text) {
    size_t n = strlen(marked);
    char *yaml = malloc(n + 1);
    const char *caret = strchr(marked, '^');
    cr_assert(caret, "test YAML without ^: %s", marked);
    size_t at = (size_t)(caret - marked);
    memcpy(yaml, marked, at);
    memcpy(yaml + at, caret + 1, n - at); /* with the NUL */
    tm_error err = {0};
    tm_status st = tm_srv_config_parse(&cfg, yaml, n - 1, &err);
    char lc[32];
    line_col(yaml, at, lc, sizeof lc);
    cr_expect_eq(st, code, "status %d (%s) for:\n%s", st, err.message, yaml);
    cr_expect_eq(err.code, code);
    cr_expect_eq(err.offset, at, "offset %llu, expected %zu (%s) for:\n%s", (unsigned long long)err.offset, at,
                 err.message, yaml);
    cr_expect(strncmp(err.message, lc, strlen(lc)) == 0, "message \"%s\" should start with %s", err.message,
              lc);
    if (path) cr_expect(strstr(err.message, path), "message \"%s\" should name %s", err.message, path);
    if (text) cr_expect(strstr(err.message, text), "message \"%s\" should say %s", err.message, text);
    free(yaml);
}

/* parse_fails_on with a fresh default config. */
static void parse_fails(const char *marked, tm_status code, const char *path, const char *text) {
    teardown();
    setup();
    parse_fails_on(marked, code, path, text);
}

static const char FULL[] = "listen: 10.1.2.3:3100\n"
                           "store: {path: /var/lib/tm}\n"
                           "upstream: https://sentry.example.com\n"
                           "limits:\n"
                           "  max_envelope_size: 100MiB\n"
                           "  max_profile_size: 20MB\n"
                           "  max_connections: 64\n"
                           "  request_timeout: 12\n"
                           "projects:\n"
                           "  - id: 42\n"
                           "    organization_id: 7\n"
                           "    public_keys: [e12d836b15bb49d7bbf99e64295d995b, second_key-2]\n"
                           "    retention_days: 30\n"
                           "    features: [continuous-profiling]\n"
                           "    rate_limit: 100\n"
                           "  - id: 43\n"
                           "    public_key: \"k43\"\n"
                           "kafka:\n"
                           "  bootstrap_servers: \"localhost:9092,other:9093\"\n"
                           "  topics: {profiles: my-profiles, outcomes: my.outcomes}\n"
                           "  delivery_timeout_ms: 2500\n"
                           "  config: {\"queue.buffering.max.ms\": \"5\", \"security.protocol\": plaintext,\n"
                           "           linger.ms: 10, enable.idempotence: true}\n";

Test(serve_config, full_file_read_back) {
    parse_ok(FULL);
    cr_assert_str_eq(cfg.listen_host, "10.1.2.3");
    cr_assert_eq(cfg.listen_port, 3100);
    cr_assert_str_eq(cfg.store_path, "/var/lib/tm");
    cr_assert_str_eq(cfg.upstream, "https://sentry.example.com");
    cr_assert_eq(cfg.limits.max_envelope_size, 100 * MIB);
    cr_assert_eq(cfg.limits.max_profile_size, 20000000u);
    cr_assert_eq(cfg.limits.max_connections, 64);
    cr_assert_eq(cfg.limits.request_timeout_s, 12);

    cr_assert_eq(cfg.n_projects, 2);
    const tm_srv_project *p = &cfg.projects[0];
    cr_assert_eq(p->id, 42);
    cr_assert_eq(p->organization_id, 7);
    cr_assert_eq(p->n_public_keys, 2);
    cr_assert_str_eq(p->public_keys[0], "e12d836b15bb49d7bbf99e64295d995b");
    cr_assert_str_eq(p->public_keys[1], "second_key-2");
    cr_assert_eq(p->retention_days, 30);
    cr_assert_eq(p->continuous_profiling, 1);
    cr_assert_eq(p->continuous_profiling_perfetto, 0);
    cr_assert_eq(p->rate_limit, 100.0);
    p = &cfg.projects[1]; /* the defaults of a project */
    cr_assert_eq(p->id, 43);
    cr_assert_eq(p->organization_id, 1);
    cr_assert_eq(p->n_public_keys, 1);
    cr_assert_str_eq(p->public_keys[0], "k43");
    cr_assert_eq(p->retention_days, 90);
    cr_assert_eq(p->continuous_profiling, 1);
    cr_assert_eq(p->continuous_profiling_perfetto, 1);
    cr_assert_eq(p->rate_limit, 0.0);

    cr_assert_str_eq(cfg.kafka.bootstrap_servers, "localhost:9092,other:9093");
    cr_assert_str_eq(cfg.kafka.profiles_topic, "my-profiles");
    cr_assert_str_eq(cfg.kafka.outcomes_topic, "my.outcomes");
    cr_assert_eq(cfg.kafka.delivery_timeout_ms, 2500);
    cr_assert_eq(cfg.kafka.n_properties, 4);
    static const char *const kv[][2] = {{"queue.buffering.max.ms", "5"},
                                        {"security.protocol", "plaintext"},
                                        {"linger.ms", "10"},
                                        {"enable.idempotence", "true"}};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_str_eq(cfg.kafka.properties[i].key, kv[i][0]);
        cr_assert_str_eq(cfg.kafka.properties[i].value, kv[i][1]);
    }
}

Test(serve_config, defaults) {
    cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
    cr_assert_eq(cfg.listen_port, 3000);
    cr_assert_str_eq(cfg.store_path, "./tracemill-store");
    cr_assert_null(cfg.upstream);
    cr_assert_eq(cfg.n_projects, 0);
    cr_assert_null(cfg.projects);
    cr_assert_eq(cfg.limits.max_envelope_size, 200 * MIB);
    cr_assert_eq(cfg.limits.max_profile_size, 50 * MIB);
    cr_assert_eq(cfg.limits.max_connections, 256);
    cr_assert_eq(cfg.limits.request_timeout_s, 30);
    cr_assert_eq(cfg.limits.max_connections_per_ip, 64);
    cr_assert_eq(cfg.limits.header_timeout_s, 10);
    cr_assert_eq(cfg.limits.body_timeout_s, 120);
    cr_assert_eq(cfg.limits.min_body_rate, 1024);
    cr_assert_eq(cfg.limits.max_decoded_in_flight, 512 * MIB);
    cr_assert_eq(cfg.limits.shutdown_timeout_s, 10);
    cr_assert_eq(cfg.access_log, TM_SRV_ACCESS_LOG_TEXT);
    cr_assert_null(cfg.access_log_path);
    cr_assert_null(cfg.kafka.bootstrap_servers);
    cr_assert_str_eq(cfg.kafka.profiles_topic, "ingest-profiles");
    cr_assert_str_eq(cfg.kafka.outcomes_topic, "outcomes");
    cr_assert_eq(cfg.kafka.n_properties, 0);
    cr_assert_eq(cfg.kafka.delivery_timeout_ms, 5000);
    /* Empty, comment-only and null documents change nothing. */
    parse_ok("");
    parse_ok("# nothing here\n\n");
    parse_ok("---\n~\n...\n");
    cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
    cr_assert_eq(cfg.listen_port, 3000);
    /* A partial file replaces only what it names. */
    parse_ok("limits: {max_connections: 9}\n");
    cr_assert_eq(cfg.limits.max_connections, 9);
    cr_assert_eq(cfg.limits.request_timeout_s, 30);
    cr_assert_eq(cfg.limits.max_envelope_size, 200 * MIB);
}

Test(serve_config, budgets_and_access_log) {
    parse_ok("limits:\n  max_connections_per_ip: 8\n  header_timeout: 3\n  body_timeout: 40\n"
             "  min_body_rate: 2KiB\n  max_decoded_in_flight: 1GiB\n  shutdown_timeout: 7\n"
             "access_log: {format: json, path: /tmp/access.log}\n");
    cr_assert_eq(cfg.limits.max_connections_per_ip, 8);
    cr_assert_eq(cfg.limits.header_timeout_s, 3);
    cr_assert_eq(cfg.limits.body_timeout_s, 40);
    cr_assert_eq(cfg.limits.min_body_rate, 2048);
    cr_assert_eq(cfg.limits.max_decoded_in_flight, 1024 * MIB);
    cr_assert_eq(cfg.limits.shutdown_timeout_s, 7);
    cr_assert_eq(cfg.access_log, TM_SRV_ACCESS_LOG_JSON);
    cr_assert_str_eq(cfg.access_log_path, "/tmp/access.log");
    parse_ok("access_log: off\n");
    cr_assert_eq(cfg.access_log, TM_SRV_ACCESS_LOG_OFF);
    parse_fails("access_log: ^loud\n", TM_ERR_MALFORMED, "access_log", "not off, text or json");
    parse_fails("limits: {shutdown_timeout: ^0}\n", TM_ERR_MALFORMED, "limits.shutdown_timeout", "1 to");
}

Test(serve_config, listen_forms) {
    parse_ok("http: {host: 0.0.0.0, port: 8080}\n");
    cr_assert_str_eq(cfg.listen_host, "0.0.0.0");
    cr_assert_eq(cfg.listen_port, 8080);
    parse_ok("http: {port: \"81\"}\n"); /* quoted numbers are numbers; the host stays */
    cr_assert_str_eq(cfg.listen_host, "0.0.0.0");
    cr_assert_eq(cfg.listen_port, 81);
    parse_ok("http: {host: \"::1\"}\n");
    cr_assert_str_eq(cfg.listen_host, "::1");
    cr_assert_eq(cfg.listen_port, 81);
    parse_ok("listen: \"[fe80::1%eth0]:65535\"\n");
    cr_assert_str_eq(cfg.listen_host, "fe80::1%eth0");
    cr_assert_eq(cfg.listen_port, 65535);
    parse_ok("listen: localhost:1\n");
    cr_assert_str_eq(cfg.listen_host, "localhost");
    cr_assert_eq(cfg.listen_port, 1);
    parse_ok("listen: :4000\n");
    cr_assert_str_eq(cfg.listen_host, "localhost");
    cr_assert_eq(cfg.listen_port, 4000);
    parse_ok("listen: 4001\n");
    cr_assert_str_eq(cfg.listen_host, "localhost");
    cr_assert_eq(cfg.listen_port, 4001);
}

Test(serve_config, sizes) {
    static const struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {{"12345", 12345},
                 {"7B", 7},
                 {"1KB", 1000},
                 {"1KiB", 1024},
                 {"3 MB", 3000000},
                 {"3mib", 3 * MIB},
                 {"2GB", 2000000000ull},
                 {"2 GiB", 2048 * MIB},
                 {"\"17179869183GiB\"", 17179869183ull << 30}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char yaml[128];
        snprintf(yaml, sizeof yaml, "limits: {max_profile_size: %s}", cases[i].text);
        parse_ok(yaml);
        cr_expect_eq(cfg.limits.max_profile_size, cases[i].bytes, "%s", cases[i].text);
    }
}

Test(serve_config, features_keys_rates_and_optional_nulls) {
    parse_ok("projects:\n"
             "  - {id: 1, public_key: a, features: []}\n"
             "  - {id: 2, public_key: b, features: [continuous-profiling-perfetto]}\n"
             "  - {id: 3, public_key: c, public_keys: [d, e], rate_limit: 0.5}\n"
             "  - {id: 18446744073709551615, organization_id: 18446744073709551615, public_key: f,\n"
             "     retention_days: 4294967295, rate_limit: 0}\n"
             "upstream: http://up\n");
    cr_assert_eq(cfg.n_projects, 4);
    cr_assert_eq(cfg.projects[0].continuous_profiling, 0);
    cr_assert_eq(cfg.projects[0].continuous_profiling_perfetto, 0);
    cr_assert_eq(cfg.projects[1].continuous_profiling, 0);
    cr_assert_eq(cfg.projects[1].continuous_profiling_perfetto, 1);
    cr_assert_eq(cfg.projects[2].n_public_keys, 3);
    cr_assert_str_eq(cfg.projects[2].public_keys[0], "c");
    cr_assert_str_eq(cfg.projects[2].public_keys[2], "e");
    cr_assert_eq(cfg.projects[2].rate_limit, 0.5);
    cr_assert_eq(cfg.projects[3].id, UINT64_MAX);
    cr_assert_eq(cfg.projects[3].organization_id, UINT64_MAX);
    cr_assert_eq(cfg.projects[3].retention_days, UINT32_MAX);
    cr_assert_str_eq(cfg.upstream, "http://up");
    /* null switches the optional outputs off again */
    parse_ok("upstream: ~\nkafka: {bootstrap_servers: h:1}\n");
    cr_assert_null(cfg.upstream);
    cr_assert_str_eq(cfg.kafka.bootstrap_servers, "h:1");
    parse_ok("kafka: {bootstrap_servers: null}\n");
    cr_assert_null(cfg.kafka.bootstrap_servers);
}

Test(serve_config, lists_are_added_to_what_is_configured) {
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_add_project(&cfg, "5:cli_key", &err), TM_OK);
    parse_ok("projects: [{id: 6, public_key: file_key}]\nkafka: {config: {linger.ms: 7, socket.timeout.ms: 9000}}\n");
    parse_ok("projects: [{id: 7, public_key: second_file}]\nkafka: {config: {linger.ms: 8}}\n");
    cr_assert_eq(cfg.n_projects, 3);
    cr_assert_eq(cfg.projects[0].id, 5);
    cr_assert_eq(cfg.projects[1].id, 6);
    cr_assert_eq(cfg.projects[2].id, 7);
    /* a property set again keeps its place and takes the new value */
    cr_assert_eq(cfg.kafka.n_properties, 2);
    cr_assert_str_eq(cfg.kafka.properties[0].key, "linger.ms");
    cr_assert_str_eq(cfg.kafka.properties[0].value, "8");
    cr_assert_str_eq(cfg.kafka.properties[1].value, "9000");
    /* what the command line configured counts for the uniqueness checks */
    parse_fails_on("projects: [{id: ^5, public_key: other}]\n", TM_ERR_MALFORMED, "projects[0].id",
                   "duplicate project id 5");
    parse_fails_on("projects: [{id: 8, public_key: ^cli_key}]\n", TM_ERR_MALFORMED, "projects[0].public_key",
                "already used by project 5");
}

/* ---- errors --------------------------------------------------------------- */

Test(serve_config, unknown_keys) {
    parse_fails("listen: 1\n^lsiten: 2\n", TM_ERR_MALFORMED, "lsiten", "unknown key");
    parse_fails("projects:\n"
                "  - id: 1\n"
                "    public_keys: [k1]\n"
                "  - id: 2\n"
                "    public_keys: [k2]\n"
                "    ^featurs: [continuous-profiling]\n",
                TM_ERR_MALFORMED, "projects[1].featurs", "unknown key");
    parse_fails("limits:\n  max_connections: 3\n  ^max_conections: 4\n", TM_ERR_MALFORMED,
                "limits.max_conections", "unknown key");
    parse_fails("kafka: {topics: {profiles: p, ^errors: e}}", TM_ERR_MALFORMED, "kafka.topics.errors",
                "unknown key");
    parse_fails("store: {^dir: x}", TM_ERR_MALFORMED, "store.dir", "unknown key");
    parse_fails("http: {^hots: x}", TM_ERR_MALFORMED, "http.hots", "unknown key");
    parse_fails("kafka: {^brokers: x}", TM_ERR_MALFORMED, "kafka.brokers", "unknown key");
    /* unprintable bytes of a key are not copied into the message */
    parse_fails("^\"a\\tb\": 1", TM_ERR_MALFORMED, "a?b", "unknown key");
    /* a long key is cut short */
    parse_fails("^aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa: 1",
                TM_ERR_MALFORMED, "aaaaaaaa...", "unknown key");
}

Test(serve_config, wrong_types) {
    parse_fails("listen: ^{a: 1}\n", TM_ERR_MALFORMED, "listen", "expected a scalar, found a mapping");
    parse_fails("store: ^./x\n", TM_ERR_MALFORMED, "store", "expected a mapping, found a scalar");
    parse_fails("^- a\n- b\n", TM_ERR_MALFORMED, "(top level)", "expected a mapping, found a sequence");
    parse_fails("^just text\n", TM_ERR_MALFORMED, "(top level)", "expected a mapping");
    parse_fails("projects: ^{id: 1}\n", TM_ERR_MALFORMED, "projects", "expected a sequence, found a mapping");
    parse_fails("projects: [^x]\n", TM_ERR_MALFORMED, "projects[0]", "expected a mapping");
    parse_fails("projects: [{id: 1, public_keys: ^k}]\n", TM_ERR_MALFORMED, "projects[0].public_keys",
                "expected a sequence");
    parse_fails("projects: [{id: 1, public_keys: [^[k]]}]\n", TM_ERR_MALFORMED, "projects[0].public_keys[0]",
                "expected a scalar, found a sequence");
    parse_fails("kafka: {config: {a: ^[1]}}\n", TM_ERR_MALFORMED, "kafka.config.a", "expected a scalar");
    parse_fails("? ^[a]\n: 1\n", TM_ERR_MALFORMED, "(top level)", "a key must be a scalar");
}

Test(serve_config, bad_numbers) {
    parse_fails("http: {port: ^abc}\n", TM_ERR_MALFORMED, "http.port", "not an integer");
    parse_fails("http: {port: ^3000.5}\n", TM_ERR_MALFORMED, "http.port", "not an integer");
    parse_fails("http: {port: ^65536}\n", TM_ERR_MALFORMED, "http.port", "0 to 65535");
    parse_fails("http: {port: ^+80}\n", TM_ERR_MALFORMED, "http.port", "not an integer");
    parse_fails("limits: {max_connections: ^-1}\n", TM_ERR_MALFORMED, "limits.max_connections", "negative");
    parse_fails("limits: {max_connections: ^4294967296}\n", TM_ERR_MALFORMED, "limits.max_connections",
                "1 to 4294967295");
    parse_fails("limits: {request_timeout: ^0}\n", TM_ERR_MALFORMED, "limits.request_timeout", "1 to");
    parse_fails("limits: {max_envelope_size: ^18446744073709551616}\n", TM_ERR_MALFORMED,
                "limits.max_envelope_size", "too large");
    parse_fails("limits: {max_envelope_size: ^17179869184GiB}\n", TM_ERR_MALFORMED, "limits.max_envelope_size",
                "too large");
    parse_fails("limits: {max_envelope_size: ^0MiB}\n", TM_ERR_MALFORMED, "limits.max_envelope_size",
                "greater than 0");
    parse_fails("limits: {max_envelope_size: ^12XB}\n", TM_ERR_MALFORMED, "limits.max_envelope_size",
                "not a size");
    parse_fails("limits: {max_envelope_size: ^MiB}\n", TM_ERR_MALFORMED, "limits.max_envelope_size",
                "not a size");
    parse_fails("limits: {max_profile_size: ^-5MiB}\n", TM_ERR_MALFORMED, "limits.max_profile_size",
                "negative");
    parse_fails("kafka: {delivery_timeout_ms: ^0}\n", TM_ERR_MALFORMED, "kafka.delivery_timeout_ms", "1 to");
    parse_fails("projects: [{id: ^0, public_key: k}]\n", TM_ERR_MALFORMED, "projects[0].id", "1 to");
    parse_fails("projects: [{id: ^18446744073709551616, public_key: k}]\n", TM_ERR_MALFORMED, "projects[0].id",
                "1 to 18446744073709551615");
    parse_fails("projects: [{id: 1, organization_id: ^0, public_key: k}]\n", TM_ERR_MALFORMED,
                "projects[0].organization_id", "1 to");
    parse_fails("projects: [{id: 1, retention_days: ^-90, public_key: k}]\n", TM_ERR_MALFORMED,
                "projects[0].retention_days", "negative");
    parse_fails("projects: [{id: 1, rate_limit: ^-1, public_key: k}]\n", TM_ERR_MALFORMED,
                "projects[0].rate_limit", "negative");
    parse_fails("projects: [{id: 1, rate_limit: ^1e3, public_key: k}]\n", TM_ERR_MALFORMED,
                "projects[0].rate_limit", "chunks per second");
    parse_fails("projects: [{id: 1, rate_limit: ^.nan, public_key: k}]\n", TM_ERR_MALFORMED,
                "projects[0].rate_limit", "chunks per second");
}

Test(serve_config, bad_projects) {
    parse_fails("projects: [{id: 1, public_keys: ^[]}]\n", TM_ERR_MALFORMED, "projects[0].public_keys",
                "at least one key");
    parse_fails("projects: [^{id: 1}]\n", TM_ERR_MALFORMED, "projects[0]", "missing public_keys");
    parse_fails("projects:\n  - ^public_key: k\n", TM_ERR_MALFORMED, "projects[0]", "missing id");
    parse_fails("projects:\n  - {id: 1, public_key: a}\n  - {id: ^1, public_key: b}\n", TM_ERR_MALFORMED,
                "projects[1].id", "duplicate project id 1");
    parse_fails("projects:\n  - {id: 1, public_key: a}\n  - {id: 2, public_keys: [b, ^a]}\n", TM_ERR_MALFORMED,
                "projects[1].public_keys[1]", "already used by project 1");
    parse_fails("projects: [{id: 1, public_key: a, public_keys: [^a]}]\n", TM_ERR_MALFORMED,
                "projects[0].public_keys[0]", "listed twice");
    parse_fails("projects: [{id: 1, public_keys: [^\"a b\"]}]\n", TM_ERR_MALFORMED,
                "projects[0].public_keys[0]", "[A-Za-z0-9_-]");
    parse_fails("projects: [{id: 1, public_keys: [^k.1]}]\n", TM_ERR_MALFORMED, "projects[0].public_keys[0]",
                "byte 1 is not");
    parse_fails("projects: [{id: 1, public_keys: [^\"\"]}]\n", TM_ERR_MALFORMED, "projects[0].public_keys[0]",
                "needs a value");
    char yaml[512];
    char key[130];
    memset(key, 'k', 129);
    key[129] = '\0';
    snprintf(yaml, sizeof yaml, "projects: [{id: 1, public_key: ^%s}]", key);
    parse_fails(yaml, TM_ERR_MALFORMED, "projects[0].public_key", "at most 128 bytes");
    parse_fails("projects: [{id: 1, public_key: k, features: [continuous-profiling, ^profiling]}]\n",
                TM_ERR_MALFORMED, "projects[0].features[1]", "unknown feature \"profiling\"");
    parse_fails("projects: [{id: 1, public_key: k, features: ^continuous-profiling}]\n", TM_ERR_MALFORMED,
                "projects[0].features", "expected a sequence");
    /* a failed project is not added; the ones before it are */
    parse_fails("projects:\n  - {id: 1, public_key: a}\n  - {id: 2, ^bogus: 1, public_key: b}\n",
                TM_ERR_MALFORMED, "projects[1].bogus", "unknown key");
    cr_assert_eq(cfg.n_projects, 1);
    cr_assert_eq(cfg.projects[0].id, 1);
}

Test(serve_config, bad_values) {
    parse_fails("store: {path: ^\"\"}\n", TM_ERR_MALFORMED, "store.path", "needs a value");
    parse_fails("store:\n  path: ^~\n", TM_ERR_MALFORMED, "store.path", "needs a value");
    parse_fails("store: {path: ^\"a\\0b\"}\n", TM_ERR_MALFORMED, "store.path", "NUL byte");
    parse_fails("upstream: ^ftp://x\n", TM_ERR_MALFORMED, "upstream", "http:// or https://");
    parse_fails("upstream: ^http://\n", TM_ERR_MALFORMED, "upstream", "http:// or https://");
    parse_fails("listen: ^\"\"\n", TM_ERR_MALFORMED, "listen", "needs a value");
    parse_fails("listen: ^::1:80\n", TM_ERR_MALFORMED, "listen", "brackets");
    parse_fails("listen: ^localhost\n", TM_ERR_MALFORMED, "listen", "expected HOST:PORT");
    parse_fails("listen: ^host:65536\n", TM_ERR_MALFORMED, "listen", "0 (any free port) to 65535");
    parse_fails("listen: ^\"[::1]\"\n", TM_ERR_MALFORMED, "listen", "expected ':PORT' after ']'");
    parse_fails("listen: ^\"[::1:80\"\n", TM_ERR_MALFORMED, "listen", "missing ']'");
    parse_fails("http: {host: ^\"a b\"}\n", TM_ERR_MALFORMED, "http.host", "bad host name");
    parse_fails("listen: 1\n^http: {port: 2}\n", TM_ERR_MALFORMED, "http", "listen and http both");
    parse_fails("listen: 1\n^listen: 2\n", TM_ERR_MALFORMED, "listen", "duplicate key (first at 1:1)");
    parse_fails("kafka: {config: {^\"a b\": 1}}\n", TM_ERR_MALFORMED, "kafka.config.a b", "property name");
    parse_fails("kafka: {config: {a: ^\"\"}}\n", TM_ERR_MALFORMED, "kafka.config.a", "needs a value");
    /* librdkafka's own verdict, at the line of the name or of the value */
    parse_fails("kafka:\n  config:\n    ^bogus.prop: 1\n", TM_ERR_MALFORMED, "kafka.config.bogus.prop",
                "No such configuration property");
    parse_fails("kafka: {config: {compression.type: ^zzz}}\n", TM_ERR_MALFORMED, "kafka.config.compression.type",
                "Invalid value \"zzz\"");
    parse_fails("kafka: {config: {a: ^}}\n", TM_ERR_MALFORMED, "kafka.config.a", "needs a value");
    parse_fails("kafka: {topics: {profiles: ^\"a/b\"}}\n", TM_ERR_MALFORMED, "kafka.topics.profiles",
                "topic name");
    parse_fails("kafka: {bootstrap_servers: ^\"\"}\n", TM_ERR_MALFORMED, "kafka.bootstrap_servers",
                "needs a value");
}

Test(serve_config, yaml_level_errors) {
    parse_fails("a: ^&x 1\nb: 2\n", TM_ERR_MALFORMED, NULL, "anchors (&x) are not allowed");
    parse_fails("a: ^&x [1]\n", TM_ERR_MALFORMED, NULL, "anchors");
    parse_fails("a: 1\nb: ^*x\n", TM_ERR_MALFORMED, NULL, "aliases (*name) are not allowed");
    parse_fails("listen: 1\n^---\nlisten: 2\n", TM_ERR_MALFORMED, NULL, "only one YAML document");

    /* 16 nested sequences under the top-level mapping: 17 levels */
    char deep[64];
    snprintf(deep, sizeof deep, "a: %.15s^[1%.16s", "[[[[[[[[[[[[[[[[[[[[", "]]]]]]]]]]]]]]]]]]]]");
    parse_fails(deep, TM_ERR_MALFORMED, NULL, "nested deeper than 16 levels");

    /* a sequence of 4097 entries */
    size_t cap = 8 * 4100 + 32, len = 0;
    char *big = malloc(cap);
    len += (size_t)snprintf(big + len, cap - len, "projects: [");
    for (int i = 0; i < 4096; i++) len += (size_t)snprintf(big + len, cap - len, "1,");
    snprintf(big + len, cap - len, "^1]");
    parse_fails(big, TM_ERR_LIMIT, NULL, "more than 4096 entries in one sequence");
    free(big);
}

Test(serve_config, project_and_key_counts) {
    size_t cap = 32 * 4100, len = 0;
    char *yaml = malloc(cap);
    /* 4096 keys in one project fill the key budget */
    len += (size_t)snprintf(yaml + len, cap - len, "projects:\n  - id: 1\n    public_keys: [");
    for (int i = 0; i < 4096; i++) len += (size_t)snprintf(yaml + len, cap - len, "k%d,", i);
    snprintf(yaml + len, cap - len, "]\n  - {id: 2, public_key: ^x}\n");
    parse_fails(yaml, TM_ERR_LIMIT, "projects[1].public_key", "more than 4096 public keys");
    cr_assert_eq(cfg.n_projects, 1);
    cr_assert_eq(cfg.projects[0].n_public_keys, 4096);
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_add_project(&cfg, "3:y", &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "more than 4096 public keys"), "%s", err.message);

    /* one project from the command line and 4096 from the file */
    teardown();
    setup();
    cr_assert_eq(tm_srv_config_add_project(&cfg, "100000:cli", &err), TM_OK);
    len = (size_t)snprintf(yaml, cap, "projects:\n");
    for (int i = 1; i < 4096; i++)
        len += (size_t)snprintf(yaml + len, cap - len, "- {id: %d, public_key: k%d}\n", i, i);
    snprintf(yaml + len, cap - len, "- ^{id: 4096, public_key: k4096}\n");
    parse_fails_on(yaml, TM_ERR_LIMIT, "projects[4095]", "more than 4096 projects");
    cr_assert_eq(cfg.n_projects, 4096);
    free(yaml);
}

Test(serve_config, syntax_errors) {
    static const char *const bad[] = {"listen: [1, 2\n", "a: 'x\n", "a: b: c\n", "a:\n  - 1\n b: 2\n", "{a: 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm_error err = {0};
        tm_status st = tm_srv_config_parse(&cfg, bad[i], strlen(bad[i]), &err);
        cr_expect_eq(st, TM_ERR_MALFORMED, "%s", bad[i]);
        cr_expect(strstr(err.message, "YAML syntax error: "), "%s", err.message);
        cr_expect_leq(err.offset, strlen(bad[i]));
        if (err.offset == strlen(bad[i])) continue; /* libyaml ends the stream on a line of its own */
        char lc[32];
        line_col(bad[i], (size_t)err.offset, lc, sizeof lc);
        cr_expect(strncmp(err.message, lc, strlen(lc)) == 0, "\"%s\" should start with %s", err.message, lc);
    }
    /* the exact position of one: the tab is not allowed as indentation */
    tm_error err = {0};
    const char *tab = "a: 1\n\tb: 2\n";
    cr_assert_eq(tm_srv_config_parse(&cfg, tab, strlen(tab), &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, 5, "%s", err.message);
    cr_assert(strncmp(err.message, "2:1: YAML syntax error: ", 24) == 0, "%s", err.message);
    cr_assert(strstr(err.message, "while scanning a plain scalar at 1:4"), "%s", err.message);
    const char *colon = "a: b: c\n";
    cr_assert_eq(tm_srv_config_parse(&cfg, colon, strlen(colon), &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, 4);
    cr_assert_str_eq(err.message, "1:5: YAML syntax error: mapping values are not allowed in this context");
    /* bytes that are not text have no line:column, only the offset */
    const char ctl[] = "listen: 1\nx: \x01\n";
    cr_assert_eq(tm_srv_config_parse(&cfg, ctl, sizeof ctl - 1, &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, 13);
    cr_assert(strstr(err.message, "byte 13: YAML: "), "%s", err.message);
    const char nul[] = "a: 1\0";
    cr_assert_eq(tm_srv_config_parse(&cfg, nul, sizeof nul - 1, &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, 4);
}

Test(serve_config, too_large) {
    size_t len = 1024 * 1024 + 1;
    char *yaml = malloc(len);
    memset(yaml, '#', len);
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_parse(&cfg, yaml, len, &err), TM_ERR_LIMIT);
    cr_assert_eq(err.offset, 1024 * 1024);
    cr_assert(strstr(err.message, "1048576 bytes"), "%s", err.message);
    /* exactly 1 MiB of comment is fine */
    cr_assert_eq(tm_srv_config_parse(&cfg, yaml, len - 1, &err), TM_OK, "%s", err.message);
    free(yaml);
}

/* ---- the file loader ------------------------------------------------------- */

static char *write_temp(const char *data, size_t len) {
    char *path = strdup("/tmp/test_serve_config_XXXXXX");
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

Test(serve_config, load) {
    tm_error err = {0};
    char *path = write_temp(FULL, sizeof FULL - 1);
    cr_assert_eq(tm_srv_config_load(&cfg, path, &err), TM_OK, "%s", err.message);
    cr_assert_eq(cfg.listen_port, 3100);
    cr_assert_eq(cfg.n_projects, 2);
    unlink(path);
    free(path);

    const char bad[] = "limits:\n  max_connections: 1\n  bogus: 2\n";
    path = write_temp(bad, sizeof bad - 1);
    cr_assert_eq(tm_srv_config_load(&cfg, path, &err), TM_ERR_MALFORMED);
    char want[128];
    snprintf(want, sizeof want, "%s:3:3: limits.bogus: unknown key", path);
    cr_assert_str_eq(err.message, want);
    cr_assert_eq(err.offset, 31);
    unlink(path);

    /* the file is gone now */
    cr_assert_eq(tm_srv_config_load(&cfg, path, &err), TM_ERR_IO);
    cr_assert(strstr(err.message, path) && strstr(err.message, "No such file or directory"), "%s", err.message);
    free(path);

    cr_assert_eq(tm_srv_config_load(&cfg, "/tmp", &err), TM_ERR_IO);
    cr_assert(strstr(err.message, "/tmp: Is a directory"), "%s", err.message);

    size_t len = 1024 * 1024 + 10;
    char *huge = malloc(len);
    memset(huge, '\n', len);
    path = write_temp(huge, len);
    cr_assert_eq(tm_srv_config_load(&cfg, path, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, path), "%s", err.message);
    unlink(path);
    free(path);
    free(huge);
}

/* ---- command-line overrides ------------------------------------------------- */

Test(serve_config, set_listen) {
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_set_listen(&cfg, "0.0.0.0:9000", &err), TM_OK);
    cr_assert_str_eq(cfg.listen_host, "0.0.0.0");
    cr_assert_eq(cfg.listen_port, 9000);
    cr_assert_eq(tm_srv_config_set_listen(&cfg, ":9001", &err), TM_OK);
    cr_assert_str_eq(cfg.listen_host, "0.0.0.0");
    cr_assert_eq(cfg.listen_port, 9001);
    cr_assert_eq(tm_srv_config_set_listen(&cfg, "9002", &err), TM_OK);
    cr_assert_eq(cfg.listen_port, 9002);
    cr_assert_eq(tm_srv_config_set_listen(&cfg, "[::1]:9003", &err), TM_OK);
    cr_assert_str_eq(cfg.listen_host, "::1");
    cr_assert_eq(cfg.listen_port, 9003);

    static const struct {
        const char *arg, *why;
        uint64_t at;
    } bad[] = {{"", "expected HOST:PORT", 0},
               {"host", "expected HOST:PORT", 0},
               {"host:", "0 (any free port) to 65535", 5},
               {"host:65536", "0 (any free port) to 65535", 5},
               {"host:80x", "0 (any free port) to 65535", 5},
               {"::1:80", "brackets", 1},
               {"[::1]80", "expected ':PORT'", 5},
               {"[::1", "missing ']'", 0},
               {"[]:80", "bad IPv6 address", 0},
               {"a b:80", "bad host name", 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(tm_srv_config_set_listen(&cfg, bad[i].arg, &err), TM_ERR_INVALID_ARG, "%s", bad[i].arg);
        char arg[64];
        snprintf(arg, sizeof arg, "--listen \"%s\"", bad[i].arg);
        cr_expect(strstr(err.message, arg) && strstr(err.message, bad[i].why), "%s", err.message);
        cr_expect_eq(err.offset, bad[i].at, "%s: %llu", bad[i].arg, (unsigned long long)err.offset);
    }
    /* failures leave the address as it was */
    cr_assert_str_eq(cfg.listen_host, "::1");
    cr_assert_eq(cfg.listen_port, 9003);
}

Test(serve_config, set_store) {
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_set_store(&cfg, "/data/x", &err), TM_OK);
    cr_assert_str_eq(cfg.store_path, "/data/x");
    cr_assert_eq(tm_srv_config_set_store(&cfg, "", &err), TM_ERR_INVALID_ARG);
    cr_assert(strstr(err.message, "--store"), "%s", err.message);
    cr_assert_str_eq(cfg.store_path, "/data/x");
}

Test(serve_config, add_project) {
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_add_project(&cfg, "42:abc", &err), TM_OK);
    cr_assert_eq(tm_srv_config_add_project(&cfg, "42:def", &err), TM_OK); /* another key of 42 */
    cr_assert_eq(tm_srv_config_add_project(&cfg, "42:abc", &err), TM_OK); /* already there */
    cr_assert_eq(tm_srv_config_add_project(&cfg, "7:X_y-1", &err), TM_OK);
    cr_assert_eq(cfg.n_projects, 2);
    cr_assert_eq(cfg.projects[0].id, 42);
    cr_assert_eq(cfg.projects[0].n_public_keys, 2);
    cr_assert_str_eq(cfg.projects[0].public_keys[1], "def");
    cr_assert_eq(cfg.projects[0].organization_id, 1);
    cr_assert_eq(cfg.projects[0].retention_days, 90);
    cr_assert_eq(cfg.projects[0].continuous_profiling_perfetto, 1);
    cr_assert_str_eq(cfg.projects[1].public_keys[0], "X_y-1");

    static const struct {
        const char *arg, *why;
        uint64_t at;
    } bad[] = {{"42", "expected ID:KEY", 0},
               {"x:abc", "non-zero integer", 0},
               {"0:abc", "non-zero integer", 0},
               {":abc", "non-zero integer", 0},
               {"18446744073709551616:abc", "non-zero integer", 0},
               {"5:", "1 to 128 bytes", 2},
               {"5:ab cd", "character 5 is not", 4},
               {"5:ab:cd", "character 5 is not", 4},
               {"5:def", "belongs to project 42", 2}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_expect_eq(tm_srv_config_add_project(&cfg, bad[i].arg, &err), TM_ERR_INVALID_ARG, "%s", bad[i].arg);
        char arg[64];
        snprintf(arg, sizeof arg, "--project \"%s\"", bad[i].arg);
        cr_expect(strstr(err.message, arg) && strstr(err.message, bad[i].why), "%s", err.message);
        cr_expect_eq(err.offset, bad[i].at, "%s: %llu", bad[i].arg, (unsigned long long)err.offset);
    }
    cr_assert_eq(cfg.n_projects, 2);
}

/* ---- finish and authenticate -------------------------------------------------- */

Test(serve_config, finish_generates_a_project) {
    tm_error err = {0};
    const char *key = (const char *)1;
    cr_assert_eq(tm_srv_config_finish(&cfg, &key, &err), TM_OK, "%s", err.message);
    cr_assert_not_null(key);
    cr_assert_eq(strlen(key), 32);
    cr_assert_eq(strspn(key, "0123456789abcdef"), 32, "%s", key);
    cr_assert_eq(cfg.n_projects, 1);
    const tm_srv_project *p = &cfg.projects[0];
    cr_assert_eq(p->id, 1);
    cr_assert_eq(p->organization_id, 1);
    cr_assert_eq(p->retention_days, 90);
    cr_assert_eq(p->continuous_profiling, 1);
    cr_assert_eq(p->continuous_profiling_perfetto, 1);
    cr_assert_eq(p->rate_limit, 0.0);
    cr_assert_eq(key, p->public_keys[0]); /* points into cfg */
    const tm_srv_project *found = NULL;
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 1, key, 32, &found), TM_SRV_AUTH_OK);
    cr_assert_eq(found, p);

    /* two generated keys differ */
    tm_srv_config other;
    cr_assert_eq(tm_srv_config_init(&other, &err), TM_OK);
    const char *key2 = NULL;
    cr_assert_eq(tm_srv_config_finish(&other, &key2, &err), TM_OK);
    cr_assert_str_neq(key, key2);
    /* finishing again keeps the project and generates nothing */
    cr_assert_eq(tm_srv_config_finish(&other, &key2, &err), TM_OK);
    cr_assert_null(key2);
    cr_assert_eq(other.n_projects, 1);
    tm_srv_config_release(&other);
}

Test(serve_config, finish_with_projects) {
    tm_error err = {0};
    parse_ok("projects: [{id: 9, public_key: k9}]");
    const char *key = (const char *)1;
    cr_assert_eq(tm_srv_config_finish(&cfg, &key, &err), TM_OK);
    cr_assert_null(key);
    cr_assert_eq(cfg.n_projects, 1);
    cr_assert_eq(cfg.projects[0].id, 9);
    cr_assert_eq(tm_srv_config_finish(&cfg, NULL, &err), TM_OK);

    /* a project filled in by hand without a key, or with id 0 */
    size_t n = cfg.projects[0].n_public_keys;
    cfg.projects[0].n_public_keys = 0;
    cr_assert_eq(tm_srv_config_finish(&cfg, &key, &err), TM_ERR_MALFORMED);
    cr_assert(strstr(err.message, "project 9: no public key"), "%s", err.message);
    cfg.projects[0].n_public_keys = n;
    cfg.projects[0].id = 0;
    cr_assert_eq(tm_srv_config_finish(&cfg, &key, &err), TM_ERR_MALFORMED);
    cr_assert(strstr(err.message, "projects[0]: the id must not be 0"), "%s", err.message);

    tm_srv_config zero = {0};
    cr_assert_eq(tm_srv_config_finish(&zero, &key, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(zero.n_projects, 0);
}

Test(serve_config, authenticate) {
    parse_ok("projects:\n"
             "  - {id: 1, public_keys: [aaaa, bbbb]}\n"
             "  - {id: 2, public_key: cccc}\n");
    const tm_srv_project *p = NULL;
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 1, "bbbb", 4, &p), TM_SRV_AUTH_OK);
    cr_assert_eq(p, &cfg.projects[0]);
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 2, "cccc", 4, &p), TM_SRV_AUTH_OK);
    cr_assert_eq(p, &cfg.projects[1]);
    /* the key is a view: only key_len bytes count */
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 2, "ccccXYZ", 4, &p), TM_SRV_AUTH_OK);
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 2, "ccccXYZ", 5, &p), TM_SRV_AUTH_UNKNOWN_KEY);
    cr_assert_null(p);
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 2, "ccc", 3, &p), TM_SRV_AUTH_UNKNOWN_KEY);
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 2, "", 0, &p), TM_SRV_AUTH_UNKNOWN_KEY);
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 99, "zzzz", 4, &p), TM_SRV_AUTH_UNKNOWN_KEY);
    /* a known key for the wrong project */
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 2, "aaaa", 4, &p), TM_SRV_AUTH_WRONG_PROJECT);
    cr_assert_null(p);
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 99, "aaaa", 4, &p), TM_SRV_AUTH_UNKNOWN_PROJECT);
    cr_assert_null(p);
    cr_assert_eq(tm_srv_config_authenticate(&cfg, 1, "aaaa", 4, NULL), TM_SRV_AUTH_OK);
}

Test(serve_config, release_is_safe_on_any_state) {
    tm_srv_config zero = {0};
    tm_srv_config_release(&zero);
    tm_srv_config_release(NULL);
    /* half filled by a failing parse, then released twice */
    tm_srv_config half;
    tm_error err = {0};
    cr_assert_eq(tm_srv_config_init(&half, &err), TM_OK);
    const char *yaml = "kafka: {config: {linger.ms: 3}}\nprojects: [{id: 1, public_key: k}, {id: 2, oops: 1}]\n";
    cr_assert_eq(tm_srv_config_parse(&half, yaml, strlen(yaml), &err), TM_ERR_MALFORMED);
    cr_assert_eq(half.n_projects, 1);
    tm_srv_config_release(&half);
    cr_assert_null(half.listen_host);
    cr_assert_eq(half.n_projects, 0);
    tm_srv_config_release(&half);
}

/* ---- rate limits ---------------------------------------------------------------- */

static tm_srv_ratelimit *limiter(const char *yaml) {
    parse_ok(yaml);
    tm_srv_ratelimit *rl = tm_srv_ratelimit_new(&cfg);
    cr_assert_not_null(rl);
    return rl;
}

Test(serve_config, ratelimit_burst_and_refill) {
    tm_srv_ratelimit *rl = limiter("projects: [{id: 1, public_key: a, rate_limit: 5}]");
    uint64_t t0 = 1000 * SEC;
    uint32_t retry = 0;
    for (int i = 0; i < 5; i++) cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0, &retry), 1, "take %d", i);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0, &retry), 0);
    cr_assert_eq(retry, 1);
    /* 200 ms bring one token back, 199 ms do not */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + 199000000, &retry), 0);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + 200000000, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + 200000000, &retry), 0);
    /* an hour later the bucket holds its capacity, not more */
    uint64_t t1 = t0 + 3600 * SEC;
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 5, t1, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t1, &retry), 0);
    /* a clock reading older than the last one refills nothing */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0, &retry), 0);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t1 + SEC / 5, &retry), 1);
    tm_srv_ratelimit_free(rl);
}

/* An envelope of more chunks than a burst passes once the bucket is full,
 * and what it took past the burst is owed: nothing passes until the refill
 * has paid it (it got 429 for ever before, and Retry-After asked it to
 * come back). */
Test(serve_config, ratelimit_more_than_a_burst_passes_in_debt) {
    tm_srv_ratelimit *rl = limiter("projects: [{id: 1, public_key: a, rate_limit: 2}]");
    uint64_t t0 = 1000 * SEC;
    uint32_t retry = 0;
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 3, t0, &retry), 0, "the bucket is not full");
    cr_assert_eq(retry, 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 3, t0 + SEC / 2, &retry), 1, "full again: 3 pass, 1 owed");
    /* 1 owed and 1 to take: a second at 2 a second */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + SEC, &retry), 0);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + SEC / 2 + SEC - SEC / 100, &retry), 0);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + SEC / 2 + SEC, &retry), 1);
    tm_srv_ratelimit_free(rl);
}

Test(serve_config, ratelimit_retry_after) {
    tm_srv_ratelimit *rl = limiter("projects:\n"
                                   "  - {id: 1, public_key: a, rate_limit: 0.5}\n"
                                   "  - {id: 2, public_key: b, rate_limit: 10}\n");
    uint64_t t0 = 5 * SEC;
    uint32_t retry = 0;
    /* rate 0.5: capacity 1, a token every 2 s */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0, &retry), 0);
    cr_assert_eq(retry, 2);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + SEC, &retry), 0);
    cr_assert_eq(retry, 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + SEC + SEC / 2, &retry), 0);
    cr_assert_eq(retry, 1); /* 0.25 s rounds up to 1 */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + 2 * SEC, &retry), 1);
    /* rate 10: after taking all 10, 7 more need 0.7 s -> 1; at +0.5 s 5 are back */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 10, t0, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 7, t0, &retry), 0);
    cr_assert_eq(retry, 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 7, t0 + SEC / 2, &retry), 0); /* nothing taken */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 5, t0 + SEC / 2, &retry), 1);
    /* projects are independent */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, t0 + 2 * SEC, &retry), 0);
    cr_assert_eq(retry, 2);
    tm_srv_ratelimit_free(rl);
}

Test(serve_config, ratelimit_more_than_capacity) {
    tm_srv_ratelimit *rl = limiter("projects: [{id: 1, public_key: a, rate_limit: 10},"
                                   " {id: 2, public_key: b, rate_limit: 0.25}]");
    uint32_t retry = 0;
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 25, 0, &retry), 1); /* a full bucket, 15 owed */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, SEC, &retry), 0);
    cr_assert_eq(retry, 1); /* -5 after a second: 6 more to come, 0.6 s */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 10, 100 * SEC, &retry), 1); /* paid, and full again */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 2, 0, &retry), 1); /* capacity max(1, 0.25): full, 1 owed */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 1, 0, &retry), 0);
    cr_assert_eq(retry, 8); /* 2 tokens at 0.25 a second */
    tm_srv_ratelimit_free(rl);
}

Test(serve_config, ratelimit_unlimited) {
    tm_srv_ratelimit *rl = limiter("projects: [{id: 1, public_key: a}, {id: 2, public_key: b, rate_limit: 1}]");
    uint32_t retry = 77;
    for (int i = 0; i < 100000; i++) cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1000, 0, &retry), 1);
    cr_assert_eq(retry, 77); /* untouched when granted */
    /* n = 0, an index beyond the config and no limiter at all: nothing to limit */
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 1, 0, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 1, 0, &retry), 0);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 1, 0, 0, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 2, 1, 0, &retry), 1);
    cr_assert_eq(tm_srv_ratelimit_take(NULL, 0, 1, 0, &retry), 1);
    tm_srv_ratelimit_free(rl);
    tm_srv_ratelimit_free(NULL);
    /* a config without projects gives an empty limiter */
    tm_srv_config none = {0};
    rl = tm_srv_ratelimit_new(&none);
    cr_assert_not_null(rl);
    cr_assert_eq(tm_srv_ratelimit_take(rl, 0, 1, 0, &retry), 1);
    tm_srv_ratelimit_free(rl);
}
