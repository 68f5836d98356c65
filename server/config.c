/*
 * config.c — the server's configuration: defaults, the YAML file (libyaml's
 * event API), command-line overrides (--listen, --store, --project), the
 * final validation that adds a generated project when none is configured,
 * and key authentication. Nothing here touches the network.
 *
 * The YAML file (every key optional; unknown keys are errors):
 *
 *   listen: 127.0.0.1:3000   # "HOST:PORT", ":PORT" or "PORT" (both keep the
 *                            # current host), "[::1]:PORT"; default 127.0.0.1:3000
 *   http: {host: 127.0.0.1, port: 3000}   # the same as a mapping (either one); port 0: any free port
 *   store: {path: ./tracemill-store}      # local store directory (the default)
 *   upstream: http://sentry.example.com   # http:// or https://; other item
 *                                         # types are forwarded there; absent
 *                                         # or null: they are dropped
 *   limits:
 *     max_envelope_size: 200MiB  # decoded bytes; integers with an optional
 *     max_profile_size: 50MiB    # B, KB, MB, GB (x1000) or KiB, MiB, GiB (x1024)
 *     max_connections: 256       # suffix (case-insensitive); all must be > 0
 *     max_connections_per_ip: 64 # connections over either cap are answered 503
 *     request_timeout: 30        # seconds of idle connection
 *     header_timeout: 10         # seconds from connect (or the previous answer) to complete headers
 *     body_timeout: 120          # seconds from the headers to the body's last byte
 *     min_body_rate: 1KiB        # per second, once a body took header_timeout seconds
 *     max_decoded_in_flight: 512MiB  # decoded bodies of all requests together
 *     shutdown_timeout: 10       # seconds from SIGTERM to exit
 *     max_conversion_work: 15MiB # memory budgets of one chunk's conversion
 *     max_conversion_result: 40MiB  # (Relay's): decode tables, and profile +
 *                                # writer; a chunk over either is rejected
 *                                # with an ExceedSizeLimit outcome
 *   access_log: text             # off, text or json (one JSON object a line), or
 *   access_log: {format: json, path: /var/log/tracemill.log}   # appended to; default stderr
 *   projects:                    # added to projects already configured
 *     - id: 42                   # required, non-zero, unique
 *       organization_id: 1       # default 1, non-zero
 *       public_keys: [e12d836b15bb49d7bbf99e64295d995b]  # and/or
 *       public_key: e12d836b15bb49d7bbf99e64295d995b     # one key; at least one
 *                                # key, each [A-Za-z0-9_-]{1,128}, used by one project only
 *       retention_days: 90       # default 90, > 0
 *       features: [continuous-profiling, continuous-profiling-perfetto]
 *                                # absent: both on; present: exactly these
 *       rate_limit: 100          # chunks per second (decimals allowed);
 *                                # 0 or absent: unlimited
 *   kafka:
 *     bootstrap_servers: "localhost:9092"   # absent or null: no Kafka, the
 *                                           # local store is the output
 *     topics: {profiles: ingest-profiles, outcomes: outcomes}  # the defaults
 *     delivery_timeout_ms: 5000  # before a message is spooled; > 0
 *     config:                    # any librdkafka property, applied last; values
 *       queue.buffering.max.ms: "5"  # are kept as text (5, true work too); a
 *                                # property set twice keeps the last value
 *
 * Numbers are plain decimal digits (quoted or not). Anchors and aliases are
 * rejected (no billion-laughs expansion), as are duplicate keys in a
 * mapping, a second document, more than 1 MiB of text, nesting deeper than
 * 16 levels and more than 4096 entries in one mapping or sequence, 4096
 * projects or 4096 keys in all (TM_ERR_LIMIT for the counts). Errors say
 * "LINE:COLUMN: key.path[i]: problem" (1-based; tm_srv_config_load puts
 * "FILE:" in front when it fits) and set err->offset to the byte offset.
 * On an error, cfg may hold part of the file: release it. --project ID:KEY
 * with an ID already configured adds the key to that project.
 *
 * Not thread-safe while being filled; a finished config is read-only and may
 * be shared by any number of threads.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <yaml.h>

#include "server.h"

#define MAX_CONFIG_BYTES (1024u * 1024u)
#define MAX_DEPTH 16
#define MAX_ENTRIES 4096u /* per mapping or sequence; projects and keys in all */
#define MAX_KEY_LEN 128u
#define MAX_HOST_LEN 253u

static tm_status nomem(tm_error *err) {
    return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory");
}

/* ---- strings ------------------------------------------------------------ */

static char *dup_len(const char *s, size_t len) {
    char *p = malloc(len + 1);
    if (!p) return NULL;
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

/* Replaces *dst with a copy of s[0..len); -1 when memory runs out. */
static int set_str(char **dst, const char *s, size_t len) {
    char *p = dup_len(s, len);
    if (!p) return -1;
    free(*dst);
    *dst = p;
    return 0;
}

static int key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* Index of the first byte of a public key outside [A-Za-z0-9_-], or len. */
static size_t bad_key_char(const char *s, size_t len) {
    size_t i = 0;
    while (i < len && key_char(s[i])) i++;
    return i;
}

/* Kafka topic and librdkafka property names: [A-Za-z0-9._-]. */
static int name_ok(const char *s, size_t len) {
    if (len == 0) return 0;
    for (size_t i = 0; i < len; i++)
        if (!key_char(s[i]) && s[i] != '.') return 0;
    return 1;
}

/* Parses decimal digits only (no sign, no spaces); -1 when empty, not all
 * digits, or above max. */
static int parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out) {
    uint64_t v = 0;
    if (len == 0) return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9') return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (max - d) / 10) return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

/* ---- keys and projects --------------------------------------------------- */

static int key_eq(const char *a, size_t alen, const char *b, size_t blen) {
    /* Every byte is compared so the time does not reveal a common prefix. */
    unsigned diff = alen != blen;
    size_t n = alen < blen ? alen : blen;
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

/* The project index owning key, or -1. */
static long key_owner(const tm_srv_config *cfg, const char *key, size_t len) {
    for (size_t p = 0; p < cfg->n_projects; p++)
        for (size_t k = 0; k < cfg->projects[p].n_public_keys; k++) {
            const char *s = cfg->projects[p].public_keys[k];
            if (key_eq(s, strlen(s), key, len)) return (long)p;
        }
    return -1;
}

/* Whether a project already uses key (plain comparison: configuration time). */
static int key_used(const tm_srv_config *cfg, const char *key, size_t len, uint64_t *project_id) {
    for (size_t p = 0; p < cfg->n_projects; p++)
        for (size_t k = 0; k < cfg->projects[p].n_public_keys; k++) {
            const char *s = cfg->projects[p].public_keys[k];
            if (strncmp(s, key, len) == 0 && s[len] == '\0') {
                *project_id = cfg->projects[p].id;
                return 1;
            }
        }
    return 0;
}

static size_t total_keys(const tm_srv_config *cfg) {
    size_t n = 0;
    for (size_t p = 0; p < cfg->n_projects; p++) n += cfg->projects[p].n_public_keys;
    return n;
}

static long project_index(const tm_srv_config *cfg, uint64_t id) {
    for (size_t p = 0; p < cfg->n_projects; p++)
        if (cfg->projects[p].id == id) return (long)p;
    return -1;
}

static void project_release(tm_srv_project *p) {
    for (size_t k = 0; k < p->n_public_keys; k++) free(p->public_keys[k]);
    free(p->public_keys);
    p->public_keys = NULL;
    p->n_public_keys = 0;
}

static void project_defaults(tm_srv_project *p, uint64_t id) {
    memset(p, 0, sizeof *p);
    p->id = id;
    p->organization_id = 1;
    p->retention_days = 90;
    p->continuous_profiling = 1;
    p->continuous_profiling_perfetto = 1;
}

static int project_add_key(tm_srv_project *p, const char *key, size_t len) {
    char **keys = realloc(p->public_keys, (p->n_public_keys + 1) * sizeof *keys);
    if (!keys) return -1;
    p->public_keys = keys;
    if (!(keys[p->n_public_keys] = dup_len(key, len))) return -1;
    p->n_public_keys++;
    return 0;
}

/* Moves *p into cfg (p is zeroed); -1 when memory runs out (p untouched). */
static int config_push_project(tm_srv_config *cfg, tm_srv_project *p) {
    tm_srv_project *a = realloc(cfg->projects, (cfg->n_projects + 1) * sizeof *a);
    if (!a) return -1;
    cfg->projects = a;
    a[cfg->n_projects++] = *p;
    memset(p, 0, sizeof *p);
    return 0;
}

/* Sets kafka property key=value, replacing an earlier value of key. */
static int config_set_property(tm_srv_config *cfg, const char *key, size_t klen, const char *val,
                               size_t vlen) {
    for (size_t i = 0; i < cfg->kafka.n_properties; i++) {
        tm_srv_kv *kv = &cfg->kafka.properties[i];
        if (strlen(kv->key) == klen && memcmp(kv->key, key, klen) == 0) return set_str(&kv->value, val, vlen);
    }
    tm_srv_kv *a = realloc(cfg->kafka.properties, (cfg->kafka.n_properties + 1) * sizeof *a);
    if (!a) return -1;
    cfg->kafka.properties = a;
    tm_srv_kv kv = {dup_len(key, klen), dup_len(val, vlen)};
    if (!kv.key || !kv.value) {
        free(kv.key);
        free(kv.value);
        return -1;
    }
    a[cfg->kafka.n_properties++] = kv;
    return 0;
}

/* ---- listen addresses ---------------------------------------------------- */

static int host_ok(const char *s, size_t len, int allow_colon) {
    if (len == 0 || len > MAX_HOST_LEN) return 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c <= ' ' || c >= 0x7f || c == '/' || c == '[' || c == ']' || (c == ':' && !allow_colon)) return 0;
    }
    return 1;
}

/* Splits "HOST:PORT", ":PORT", "PORT" or "[V6]:PORT". *host is NULL when
 * the text names no host (keep the current one). Returns a static reason on
 * error, with *at the byte index of the problem. */
static const char *split_listen(const char *s, size_t len, const char **host, size_t *host_len,
                                uint16_t *port, size_t *at) {
    const char *colon = NULL;
    *host = NULL;
    *host_len = 0;
    *at = 0;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close) return "missing ']' after the IPv6 address";
        *host = s + 1;
        *host_len = (size_t)(close - s - 1);
        if (!host_ok(*host, *host_len, 1)) return "bad IPv6 address";
        *at = (size_t)(close - s) + 1;
        if (*at >= len || s[*at] != ':') return "expected ':PORT' after ']'";
        colon = s + *at;
    } else {
        for (size_t i = 0; i < len; i++)
            if (s[i] == ':') {
                if (colon) {
                    *at = i;
                    return "an IPv6 address needs brackets: [::1]:PORT";
                }
                colon = s + i;
            }
        if (colon && colon > s) {
            *host = s;
            *host_len = (size_t)(colon - s);
            if (!host_ok(*host, *host_len, 0)) return "bad host name";
        }
    }
    if (!colon && (len == 0 || s[0] < '0' || s[0] > '9')) return "expected HOST:PORT, :PORT or PORT";
    const char *digits = colon ? colon + 1 : s;
    size_t dlen = len - (size_t)(digits - s);
    uint64_t v;
    *at = (size_t)(digits - s);
    if (parse_u64(digits, dlen, 65535, &v) != 0) return "the port must be 0 (any free port) to 65535";
    *port = (uint16_t)v;
    return NULL;
}

/* ---- the YAML tree -------------------------------------------------------- */

enum { N_SCALAR, N_MAP, N_SEQ };

/* A parsed YAML node. Maps keep keys and values alternating in kids. */
typedef struct node {
    int kind;
    int plain;  /* scalar written without quotes or block style */
    char *text; /* scalar text, NUL-terminated (may hold NULs from escapes) */
    size_t len;
    yaml_mark_t mark;
    struct node *kids;
    size_t n, cap;
} node;

static void node_release(node *n) {
    for (size_t i = 0; i < n->n; i++) node_release(&n->kids[i]);
    free(n->kids);
    free(n->text);
}

static tm_status at_mark(tm_error *err, tm_status code, yaml_mark_t m, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static tm_status at_mark(tm_error *err, tm_status code, yaml_mark_t m, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tm_srv_fail(err, code, m.index, "%zu:%zu: %s", m.line + 1, m.column + 1, msg);
}

static tm_status syntax_error(const yaml_parser_t *p, tm_error *err) {
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (p->error == YAML_MEMORY_ERROR) return nomem(err);
    if (p->error == YAML_READER_ERROR) /* no line:column: the bytes are not text */
        return tm_srv_fail(err, TM_ERR_MALFORMED, p->problem_offset, "byte %zu: YAML: %s", p->problem_offset,
                           problem);
    if (p->context)
        return at_mark(err, TM_ERR_MALFORMED, p->problem_mark, "YAML syntax error: %s %s at %zu:%zu", problem,
                       p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    return at_mark(err, TM_ERR_MALFORMED, p->problem_mark, "YAML syntax error: %s", problem);
}

/* Appends a node to the container on top of the stack (or makes it the
 * root) and returns where it now lives. */
static node *attach(node **stack, size_t depth, node *root, int *have_root, const node *n, tm_error *err,
                    tm_status *st) {
    if (depth == 0) {
        *root = *n;
        *have_root = 1;
        return root;
    }
    node *top = stack[depth - 1];
    size_t limit = top->kind == N_MAP ? 2 * MAX_ENTRIES : MAX_ENTRIES;
    if (top->n >= limit) {
        *st = at_mark(err, TM_ERR_LIMIT, n->mark, "more than %u entries in one %s", MAX_ENTRIES,
                      top->kind == N_MAP ? "mapping" : "sequence");
        return NULL;
    }
    if (top->n == top->cap) {
        size_t cap = top->cap ? top->cap * 2 : 8;
        node *k = realloc(top->kids, cap * sizeof *k);
        if (!k) {
            *st = nomem(err);
            return NULL;
        }
        top->kids = k;
        top->cap = cap;
    }
    top->kids[top->n] = *n;
    return &top->kids[top->n++];
}

/* Builds the node tree of the (single) document; *have_root is 0 for an
 * empty stream. Rejects anchors and aliases. */
static tm_status build_tree(const char *yaml, size_t len, node *root, int *have_root, tm_error *err) {
    yaml_parser_t parser;
    node *stack[MAX_DEPTH];
    size_t depth = 0;
    int docs = 0, done = 0;
    tm_status st = TM_OK;

    *have_root = 0;
    memset(root, 0, sizeof *root);
    if (!yaml_parser_initialize(&parser)) return nomem(err);
    yaml_parser_set_input_string(&parser, (const unsigned char *)yaml, len);
    while (!done && st == TM_OK) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            st = syntax_error(&parser, err);
            break;
        }
        node n = {.kind = N_SCALAR, .mark = ev.start_mark};
        const yaml_char_t *anchor = NULL;
        switch (ev.type) {
        case YAML_STREAM_END_EVENT: done = 1; break;
        case YAML_DOCUMENT_START_EVENT:
            if (docs++ > 0)
                st = at_mark(err, TM_ERR_MALFORMED, ev.start_mark, "only one YAML document is allowed");
            break;
        case YAML_ALIAS_EVENT:
            st = at_mark(err, TM_ERR_MALFORMED, ev.start_mark, "YAML aliases (*name) are not allowed");
            break;
        case YAML_SCALAR_EVENT:
            anchor = ev.data.scalar.anchor;
            n.plain = ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
            n.len = ev.data.scalar.length;
            if (!(n.text = dup_len((const char *)ev.data.scalar.value, n.len))) st = nomem(err);
            break;
        case YAML_MAPPING_START_EVENT:
        case YAML_SEQUENCE_START_EVENT:
            anchor = ev.type == YAML_MAPPING_START_EVENT ? ev.data.mapping_start.anchor
                                                         : ev.data.sequence_start.anchor;
            n.kind = ev.type == YAML_MAPPING_START_EVENT ? N_MAP : N_SEQ;
            if (depth == MAX_DEPTH)
                st = at_mark(err, TM_ERR_MALFORMED, ev.start_mark, "nested deeper than %d levels", MAX_DEPTH);
            break;
        case YAML_MAPPING_END_EVENT:
        case YAML_SEQUENCE_END_EVENT: depth--; break;
        default: break;
        }
        if (st == TM_OK && anchor)
            st = at_mark(err, TM_ERR_MALFORMED, ev.start_mark, "YAML anchors (&%.40s) are not allowed",
                         (const char *)anchor);
        if (st == TM_OK && (ev.type == YAML_SCALAR_EVENT || n.kind != N_SCALAR)) {
            node *where = attach(stack, depth, root, have_root, &n, err, &st);
            if (where && n.kind != N_SCALAR) stack[depth++] = where;
            if (where) n.text = NULL; /* owned by the tree now */
        }
        free(n.text);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&parser);
    if (st != TM_OK) {
        node_release(root);
        memset(root, 0, sizeof *root);
        *have_root = 0;
    }
    return st;
}

/* ---- walking the tree ------------------------------------------------------ */

typedef struct walk {
    tm_srv_config *cfg;
    tm_error *err;
} walk;

/* path + "." + key, with unprintable bytes of the key shown as '?' and a
 * long key cut short with "...". */
static void path_key(char *out, size_t cap, const char *path, const node *key) {
    char k[44];
    size_t j = 0, max = sizeof k - 4; /* room for "..." and the NUL */
    for (; j < key->len && j < max; j++) {
        unsigned char c = (unsigned char)key->text[j];
        k[j] = c >= ' ' && c < 0x7f ? (char)c : '?';
    }
    if (key->len > max) memcpy(k + j, "...", 4);
    else k[j] = '\0';
    snprintf(out, cap, "%s%s%s", path, *path ? "." : "", k);
}

static void path_index(char *out, size_t cap, const char *path, size_t i) {
    snprintf(out, cap, "%s[%zu]", path, i);
}

static tm_status bad(walk *w, const node *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static tm_status bad(walk *w, const node *n, const char *path, const char *fmt, ...) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return at_mark(w->err, TM_ERR_MALFORMED, n->mark, "%s: %s", *path ? path : "(top level)", msg);
}

static const char *kind_name(int kind) {
    return kind == N_MAP ? "a mapping" : kind == N_SEQ ? "a sequence" : "a scalar";
}

static int is_null(const node *n) {
    if (n->kind != N_SCALAR || !n->plain) return 0;
    return n->len == 0 || strcmp(n->text, "~") == 0 || strcmp(n->text, "null") == 0 ||
           strcmp(n->text, "Null") == 0 || strcmp(n->text, "NULL") == 0;
}

static tm_status want(walk *w, const node *n, const char *path, int kind) {
    if (n->kind == kind) return TM_OK;
    return bad(w, n, path, "expected %s, found %s", kind_name(kind), kind_name(n->kind));
}

/* A non-empty scalar without NUL bytes. */
static tm_status text_value(walk *w, const node *n, const char *path) {
    tm_status st = want(w, n, path, N_SCALAR);
    if (st != TM_OK) return st;
    if (is_null(n) || n->len == 0) return bad(w, n, path, "needs a value");
    if (memchr(n->text, '\0', n->len)) return bad(w, n, path, "contains a NUL byte");
    return TM_OK;
}

static tm_status string_value(walk *w, const node *n, const char *path, char **dst) {
    tm_status st = text_value(w, n, path);
    if (st != TM_OK) return st;
    return set_str(dst, n->text, n->len) ? nomem(w->err) : TM_OK;
}

/* An optional string: null clears it. */
static tm_status optional_string(walk *w, const node *n, const char *path, char **dst) {
    if (is_null(n)) {
        free(*dst);
        *dst = NULL;
        return TM_OK;
    }
    return string_value(w, n, path, dst);
}

/* An integer in [min, max]. */
static tm_status uint_value(walk *w, const node *n, const char *path, uint64_t min, uint64_t max,
                            uint64_t *out) {
    tm_status st = text_value(w, n, path);
    if (st != TM_OK) return st;
    if (n->text[0] == '-') return bad(w, n, path, "must not be negative");
    uint64_t v;
    int all_digits = 1;
    for (size_t i = 0; i < n->len; i++) all_digits &= n->text[i] >= '0' && n->text[i] <= '9';
    if (!all_digits) return bad(w, n, path, "\"%.40s\" is not an integer", n->text);
    if (parse_u64(n->text, n->len, max, &v) != 0 || v < min)
        return bad(w, n, path, "must be %llu to %llu", (unsigned long long)min, (unsigned long long)max);
    *out = v;
    return TM_OK;
}

static tm_status u32_value(walk *w, const node *n, const char *path, uint32_t *out) {
    uint64_t v;
    tm_status st = uint_value(w, n, path, 1, UINT32_MAX, &v);
    if (st == TM_OK) *out = (uint32_t)v;
    return st;
}

/* A byte size: digits, optional spaces, optional B/KB/KiB/MB/MiB/GB/GiB. */
static tm_status size_value(walk *w, const node *n, const char *path, uint64_t *out) {
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"kb", 1000},
                 {"kib", 1024},
                 {"mb", 1000000},
                 {"mib", 1024 * 1024},
                 {"gb", 1000000000},
                 {"gib", 1024 * 1024 * 1024}};
    tm_status st = text_value(w, n, path);
    if (st != TM_OK) return st;
    if (n->text[0] == '-') return bad(w, n, path, "must not be negative");
    size_t d = 0;
    while (d < n->len && n->text[d] >= '0' && n->text[d] <= '9') d++;
    size_t s = d;
    while (s < n->len && n->text[s] == ' ') s++;
    for (size_t u = 0; d > 0 && u < sizeof units / sizeof units[0]; u++) {
        if (strcasecmp(n->text + s, units[u].suffix) != 0) continue;
        uint64_t v;
        if (parse_u64(n->text, d, UINT64_MAX / units[u].mult, &v) != 0)
            return bad(w, n, path, "too large");
        if (v == 0) return bad(w, n, path, "must be greater than 0");
        *out = v * units[u].mult;
        return TM_OK;
    }
    return bad(w, n, path,
               "\"%.40s\" is not a size (an integer with an optional B, KB, KiB, MB, MiB, GB or GiB)",
               n->text);
}

/* Calls fn for each key/value of map n (which must be a mapping), after
 * rejecting non-scalar and duplicate keys. */
typedef tm_status (*entry_fn)(walk *w, const char *path, const node *key, const node *val, void *ctx);

static tm_status each_entry(walk *w, const node *map, const char *path, entry_fn fn, void *ctx) {
    tm_status st = want(w, map, path, N_MAP);
    if (st != TM_OK) return st;
    for (size_t i = 0; i + 1 < map->n; i += 2) {
        const node *key = &map->kids[i];
        if (key->kind != N_SCALAR)
            return bad(w, key, path, "a key must be a scalar, found %s", kind_name(key->kind));
        char sub[160];
        path_key(sub, sizeof sub, path, key);
        /* Entries per map are capped, so the quadratic scan stays small. */
        for (size_t j = 0; j < i; j += 2)
            if (map->kids[j].len == key->len && memcmp(map->kids[j].text, key->text, key->len) == 0)
                return bad(w, key, sub, "duplicate key (first at %zu:%zu)", map->kids[j].mark.line + 1,
                           map->kids[j].mark.column + 1);
        if ((st = fn(w, sub, key, &map->kids[i + 1], ctx)) != TM_OK) return st;
    }
    return TM_OK;
}

static int key_is(const node *key, const char *name) {
    return key->len == strlen(name) && memcmp(key->text, name, key->len) == 0;
}

static tm_status unknown(walk *w, const node *key, const char *path) {
    return bad(w, key, path, "unknown key");
}

/* -- http / limits / store -- */

static tm_status http_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    (void)ctx;
    if (key_is(key, "host")) {
        tm_status st = text_value(w, val, path);
        if (st != TM_OK) return st;
        if (!host_ok(val->text, val->len, 1)) return bad(w, val, path, "bad host name");
        return set_str(&w->cfg->listen_host, val->text, val->len) ? nomem(w->err) : TM_OK;
    }
    if (key_is(key, "port")) {
        uint64_t v;
        tm_status st = uint_value(w, val, path, 0, 65535, &v);
        if (st == TM_OK) w->cfg->listen_port = (uint16_t)v;
        return st;
    }
    return unknown(w, key, path);
}

static tm_status store_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    (void)ctx;
    if (key_is(key, "path")) return string_value(w, val, path, &w->cfg->store_path);
    return unknown(w, key, path);
}

static tm_status limits_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    (void)ctx;
    if (key_is(key, "max_envelope_size")) return size_value(w, val, path, &w->cfg->limits.max_envelope_size);
    if (key_is(key, "max_profile_size")) return size_value(w, val, path, &w->cfg->limits.max_profile_size);
    if (key_is(key, "max_connections")) return u32_value(w, val, path, &w->cfg->limits.max_connections);
    if (key_is(key, "max_connections_per_ip"))
        return u32_value(w, val, path, &w->cfg->limits.max_connections_per_ip);
    if (key_is(key, "request_timeout")) return u32_value(w, val, path, &w->cfg->limits.request_timeout_s);
    if (key_is(key, "header_timeout")) return u32_value(w, val, path, &w->cfg->limits.header_timeout_s);
    if (key_is(key, "body_timeout")) return u32_value(w, val, path, &w->cfg->limits.body_timeout_s);
    if (key_is(key, "min_body_rate")) return size_value(w, val, path, &w->cfg->limits.min_body_rate);
    if (key_is(key, "max_decoded_in_flight"))
        return size_value(w, val, path, &w->cfg->limits.max_decoded_in_flight);
    if (key_is(key, "shutdown_timeout")) return u32_value(w, val, path, &w->cfg->limits.shutdown_timeout_s);
    if (key_is(key, "max_conversion_work")) return size_value(w, val, path, &w->cfg->limits.max_conversion_work);
    if (key_is(key, "max_conversion_result"))
        return size_value(w, val, path, &w->cfg->limits.max_conversion_result);
    return unknown(w, key, path);
}

static int access_log_format(const char *text, tm_srv_access_log *out) {
    static const char *const names[] = {"off", "text", "json"};
    for (int i = 0; i < 3; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = (tm_srv_access_log)i;
            return 0;
        }
    return -1;
}

static tm_status access_log_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    (void)ctx;
    if (key_is(key, "path")) return string_value(w, val, path, &w->cfg->access_log_path);
    if (!key_is(key, "format")) return unknown(w, key, path);
    tm_status st = text_value(w, val, path);
    if (st == TM_OK && access_log_format(val->text, &w->cfg->access_log))
        st = bad(w, val, path, "\"%.40s\" is not off, text or json", val->text);
    return st;
}

/* -- kafka -- */

static tm_status topics_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    (void)ctx;
    char **dst = key_is(key, "profiles")   ? &w->cfg->kafka.profiles_topic
                 : key_is(key, "outcomes") ? &w->cfg->kafka.outcomes_topic
                                           : NULL;
    if (!dst) return unknown(w, key, path);
    tm_status st = text_value(w, val, path);
    if (st != TM_OK) return st;
    if (!name_ok(val->text, val->len) || val->len > 249)
        return bad(w, val, path, "a topic name is 1 to 249 of [A-Za-z0-9._-]");
    return set_str(dst, val->text, val->len) ? nomem(w->err) : TM_OK;
}

static tm_status property_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    (void)ctx;
    if (!name_ok(key->text, key->len)) return bad(w, key, path, "not a librdkafka property name");
    tm_status st = text_value(w, val, path);
    if (st != TM_OK) return st;
    /* librdkafka's own check of the name and value (no network), so that a
     * mistake is named with its line now rather than at the producer's start;
     * not of plugin paths, which librdkafka loads as they are set */
    if (strcmp(key->text, "plugin.library.paths") != 0) {
        rd_kafka_conf_t *probe = rd_kafka_conf_new();
        if (!probe) return nomem(w->err);
        char errstr[128];
        rd_kafka_conf_res_t res = rd_kafka_conf_set(probe, key->text, val->text, errstr, sizeof errstr);
        rd_kafka_conf_destroy(probe);
        if (res == RD_KAFKA_CONF_UNKNOWN) return bad(w, key, path, "%s", errstr);
        if (res != RD_KAFKA_CONF_OK) return bad(w, val, path, "%s", errstr);
    }
    return config_set_property(w->cfg, key->text, key->len, val->text, val->len) ? nomem(w->err) : TM_OK;
}

static tm_status kafka_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    (void)ctx;
    if (key_is(key, "bootstrap_servers"))
        return optional_string(w, val, path, &w->cfg->kafka.bootstrap_servers);
    if (key_is(key, "topics")) return each_entry(w, val, path, topics_entry, NULL);
    if (key_is(key, "delivery_timeout_ms")) return u32_value(w, val, path, &w->cfg->kafka.delivery_timeout_ms);
    if (key_is(key, "config")) return each_entry(w, val, path, property_entry, NULL);
    return unknown(w, key, path);
}

/* -- projects -- */

typedef struct project_ctx {
    tm_srv_project p;
    int has_id;
} project_ctx;

static tm_status public_key(walk *w, const node *n, const char *path, project_ctx *pc) {
    tm_status st = text_value(w, n, path);
    if (st != TM_OK) return st;
    size_t bad_at = bad_key_char(n->text, n->len);
    if (bad_at < n->len) return bad(w, n, path, "a key is made of [A-Za-z0-9_-] (byte %zu is not)", bad_at);
    if (n->len > MAX_KEY_LEN) return bad(w, n, path, "a key is at most %u bytes", MAX_KEY_LEN);
    uint64_t owner;
    if (key_used(w->cfg, n->text, n->len, &owner))
        return bad(w, n, path, "key already used by project %llu", (unsigned long long)owner);
    for (size_t k = 0; k < pc->p.n_public_keys; k++)
        if (strcmp(pc->p.public_keys[k], n->text) == 0) return bad(w, n, path, "key listed twice");
    if (total_keys(w->cfg) + pc->p.n_public_keys >= MAX_ENTRIES)
        return at_mark(w->err, TM_ERR_LIMIT, n->mark, "%s: more than %u public keys", path, MAX_ENTRIES);
    return project_add_key(&pc->p, n->text, n->len) ? nomem(w->err) : TM_OK;
}

static tm_status project_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    project_ctx *pc = ctx;
    tm_srv_project *p = &pc->p;
    tm_status st;
    if (key_is(key, "id")) {
        if ((st = uint_value(w, val, path, 1, UINT64_MAX, &p->id)) != TM_OK) return st;
        if (project_index(w->cfg, p->id) >= 0)
            return bad(w, val, path, "duplicate project id %llu", (unsigned long long)p->id);
        pc->has_id = 1;
        return TM_OK;
    }
    if (key_is(key, "organization_id")) return uint_value(w, val, path, 1, UINT64_MAX, &p->organization_id);
    if (key_is(key, "retention_days")) return u32_value(w, val, path, &p->retention_days);
    if (key_is(key, "public_key")) return public_key(w, val, path, pc);
    if (key_is(key, "public_keys")) {
        if ((st = want(w, val, path, N_SEQ)) != TM_OK) return st;
        if (val->n == 0) return bad(w, val, path, "needs at least one key");
        for (size_t i = 0; i < val->n; i++) {
            char sub[176];
            path_index(sub, sizeof sub, path, i);
            if ((st = public_key(w, &val->kids[i], sub, pc)) != TM_OK) return st;
        }
        return TM_OK;
    }
    if (key_is(key, "features")) {
        if ((st = want(w, val, path, N_SEQ)) != TM_OK) return st;
        p->continuous_profiling = p->continuous_profiling_perfetto = 0;
        for (size_t i = 0; i < val->n; i++) {
            const node *f = &val->kids[i];
            char sub[176];
            path_index(sub, sizeof sub, path, i);
            if ((st = text_value(w, f, sub)) != TM_OK) return st;
            if (strcmp(f->text, "continuous-profiling") == 0) p->continuous_profiling = 1;
            else if (strcmp(f->text, "continuous-profiling-perfetto") == 0)
                p->continuous_profiling_perfetto = 1;
            else
                return bad(w, f, sub,
                           "unknown feature \"%.40s\" (continuous-profiling, continuous-profiling-perfetto)",
                           f->text);
        }
        return TM_OK;
    }
    if (key_is(key, "rate_limit")) {
        if ((st = text_value(w, val, path)) != TM_OK) return st;
        if (val->text[0] == '-') return bad(w, val, path, "must not be negative");
        /* Digits with an optional fraction: no exponents, hex, inf or nan. */
        size_t i = 0, digits = 0;
        while (i < val->len && val->text[i] >= '0' && val->text[i] <= '9') i++, digits++;
        if (i < val->len && val->text[i] == '.')
            for (i++; i < val->len && val->text[i] >= '0' && val->text[i] <= '9'; i++) digits++;
        if (digits == 0 || i != val->len || digits > 30)
            return bad(w, val, path, "\"%.40s\" is not a number of chunks per second", val->text);
        p->rate_limit = strtod(val->text, NULL);
        return TM_OK;
    }
    return unknown(w, key, path);
}

static tm_status projects_value(walk *w, const node *seq, const char *path) {
    tm_status st = want(w, seq, path, N_SEQ);
    if (st != TM_OK) return st;
    for (size_t i = 0; i < seq->n; i++) {
        const node *item = &seq->kids[i];
        char sub[160];
        path_index(sub, sizeof sub, path, i);
        if (w->cfg->n_projects >= MAX_ENTRIES)
            return at_mark(w->err, TM_ERR_LIMIT, item->mark, "%s: more than %u projects", sub, MAX_ENTRIES);
        project_ctx pc = {.has_id = 0};
        project_defaults(&pc.p, 0);
        st = each_entry(w, item, sub, project_entry, &pc);
        if (st == TM_OK && !pc.has_id) st = bad(w, item, sub, "missing id");
        if (st == TM_OK && pc.p.n_public_keys == 0)
            st = bad(w, item, sub, "missing public_keys (or public_key)");
        if (st == TM_OK && config_push_project(w->cfg, &pc.p)) st = nomem(w->err);
        project_release(&pc.p);
        if (st != TM_OK) return st;
    }
    return TM_OK;
}

/* -- the top level -- */

typedef struct top_ctx {
    const node *listen_key; /* "listen" or "http", whichever came first */
} top_ctx;

static tm_status top_entry(walk *w, const char *path, const node *key, const node *val, void *ctx) {
    top_ctx *tc = ctx;
    tm_status st;
    if (key_is(key, "listen") || key_is(key, "http")) {
        if (tc->listen_key)
            return bad(w, key, path, "listen and http both set the address (the other at %zu:%zu)",
                       tc->listen_key->mark.line + 1, tc->listen_key->mark.column + 1);
        tc->listen_key = key;
        if (key_is(key, "http")) return each_entry(w, val, path, http_entry, NULL);
        if ((st = text_value(w, val, path)) != TM_OK) return st;
        const char *host, *why;
        size_t host_len, at;
        uint16_t port;
        if ((why = split_listen(val->text, val->len, &host, &host_len, &port, &at)) != NULL)
            return bad(w, val, path, "%s (character %zu of \"%.60s\")", why, at + 1, val->text);
        if (host && set_str(&w->cfg->listen_host, host, host_len)) return nomem(w->err);
        w->cfg->listen_port = port;
        return TM_OK;
    }
    if (key_is(key, "store")) return each_entry(w, val, path, store_entry, NULL);
    if (key_is(key, "upstream")) {
        if (is_null(val)) return optional_string(w, val, path, &w->cfg->upstream);
        if ((st = text_value(w, val, path)) != TM_OK) return st;
        if ((strncmp(val->text, "http://", 7) != 0 || val->len == 7) &&
            (strncmp(val->text, "https://", 8) != 0 || val->len == 8))
            return bad(w, val, path, "must be an http:// or https:// URL");
        return set_str(&w->cfg->upstream, val->text, val->len) ? nomem(w->err) : TM_OK;
    }
    if (key_is(key, "limits")) return each_entry(w, val, path, limits_entry, NULL);
    if (key_is(key, "access_log")) {
        if (val->kind == N_MAP) return each_entry(w, val, path, access_log_entry, NULL);
        if ((st = text_value(w, val, path)) != TM_OK) return st;
        if (access_log_format(val->text, &w->cfg->access_log))
            return bad(w, val, path, "\"%.40s\" is not off, text or json", val->text);
        return TM_OK;
    }
    if (key_is(key, "projects")) return projects_value(w, val, path);
    if (key_is(key, "kafka")) return each_entry(w, val, path, kafka_entry, NULL);
    return unknown(w, key, path);
}

/* ---- the interface ---------------------------------------------------------- */

tm_status tm_srv_config_init(tm_srv_config *cfg, tm_error *err) {
    memset(cfg, 0, sizeof *cfg);
    cfg->listen_host = dup_len("127.0.0.1", 9);
    cfg->listen_port = 3000;
    cfg->store_path = dup_len("./tracemill-store", 17);
    cfg->limits.max_envelope_size = 200u * 1024u * 1024u;
    cfg->limits.max_profile_size = 50u * 1024u * 1024u;
    cfg->limits.max_connections = 256;
    cfg->limits.max_connections_per_ip = 64;
    cfg->limits.request_timeout_s = 30;
    cfg->limits.header_timeout_s = 10;
    cfg->limits.body_timeout_s = 120;
    cfg->limits.min_body_rate = 1024;
    cfg->limits.max_decoded_in_flight = 512u * 1024u * 1024u;
    cfg->limits.shutdown_timeout_s = 10;
    cfg->access_log = TM_SRV_ACCESS_LOG_TEXT;
    cfg->limits.max_conversion_work = 15u * 1024u * 1024u;
    cfg->limits.max_conversion_result = 40u * 1024u * 1024u;
    cfg->kafka.profiles_topic = dup_len("ingest-profiles", 15);
    cfg->kafka.outcomes_topic = dup_len("outcomes", 8);
    cfg->kafka.delivery_timeout_ms = 5000;
    if (!cfg->listen_host || !cfg->store_path || !cfg->kafka.profiles_topic || !cfg->kafka.outcomes_topic) {
        tm_srv_config_release(cfg);
        return nomem(err);
    }
    return TM_OK;
}

tm_status tm_srv_config_parse(tm_srv_config *cfg, const char *yaml, size_t len, tm_error *err) {
    if (len > MAX_CONFIG_BYTES)
        return tm_srv_fail(err, TM_ERR_LIMIT, MAX_CONFIG_BYTES, "the configuration is larger than %u bytes",
                           MAX_CONFIG_BYTES);
    node root;
    int have_root;
    tm_status st = build_tree(yaml, len, &root, &have_root, err);
    if (st != TM_OK) return st;
    if (have_root && !is_null(&root)) {
        walk w = {cfg, err};
        top_ctx tc = {NULL};
        st = each_entry(&w, &root, "", top_entry, &tc);
    }
    node_release(&root);
    return st;
}

tm_status tm_srv_config_load(tm_srv_config *cfg, const char *path, tm_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return tm_srv_fail(err, TM_ERR_IO, 0, "%s: %s", path, strerror(errno));
    char *buf = malloc(MAX_CONFIG_BYTES + 1);
    if (!buf) {
        fclose(f);
        return nomem(err);
    }
    size_t len = fread(buf, 1, MAX_CONFIG_BYTES + 1, f);
    int failed = ferror(f), saved = errno;
    fclose(f);
    tm_status st;
    if (failed) st = tm_srv_fail(err, TM_ERR_IO, 0, "%s: %s", path, strerror(saved));
    else if (len > MAX_CONFIG_BYTES)
        st = tm_srv_fail(err, TM_ERR_LIMIT, MAX_CONFIG_BYTES, "%s: larger than %u bytes", path,
                         MAX_CONFIG_BYTES);
    else if ((st = tm_srv_config_parse(cfg, buf, len, err)) != TM_OK && err) {
        /* "FILE:LINE:COL: ..." like a compiler, when it fits. */
        size_t pl = strlen(path), ml = strlen(err->message);
        if (pl + 1 + ml < sizeof err->message) {
            memmove(err->message + pl + 1, err->message, ml + 1);
            memcpy(err->message, path, pl);
            err->message[pl] = ':';
        }
    }
    free(buf);
    return st;
}

tm_status tm_srv_config_set_listen(tm_srv_config *cfg, const char *host_port, tm_error *err) {
    const char *host, *why;
    size_t host_len, at;
    uint16_t port;
    if ((why = split_listen(host_port, strlen(host_port), &host, &host_len, &port, &at)) != NULL)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, at, "--listen \"%.60s\": %s (character %zu)", host_port,
                           why, at + 1);
    if (host && set_str(&cfg->listen_host, host, host_len)) return nomem(err);
    cfg->listen_port = port;
    return TM_OK;
}

tm_status tm_srv_config_set_store(tm_srv_config *cfg, const char *path, tm_error *err) {
    if (!*path) return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "--store: the path is empty");
    return set_str(&cfg->store_path, path, strlen(path)) ? nomem(err) : TM_OK;
}

tm_status tm_srv_config_add_project(tm_srv_config *cfg, const char *id_key, tm_error *err) {
    const char *colon = strchr(id_key, ':');
    uint64_t id;
    if (!colon)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "--project \"%.60s\": expected ID:KEY", id_key);
    if (parse_u64(id_key, (size_t)(colon - id_key), UINT64_MAX, &id) != 0 || id == 0)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "--project \"%.60s\": the id must be a non-zero integer",
                           id_key);
    const char *key = colon + 1;
    size_t len = strlen(key), at = (size_t)(key - id_key);
    if (len == 0 || len > MAX_KEY_LEN)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, at, "--project \"%.60s\": the key must be 1 to %u bytes",
                           id_key, MAX_KEY_LEN);
    size_t bad_at = bad_key_char(key, len);
    if (bad_at < len)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, at + bad_at,
                           "--project \"%.60s\": a key is made of [A-Za-z0-9_-] (character %zu is not)", id_key,
                           at + bad_at + 1);
    long owner = key_owner(cfg, key, len), idx = project_index(cfg, id);
    if (owner >= 0 && owner == idx) return TM_OK;
    if (owner >= 0)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, at, "--project \"%.60s\": the key belongs to project %llu",
                           id_key, (unsigned long long)cfg->projects[owner].id);
    if (total_keys(cfg) >= MAX_ENTRIES)
        return tm_srv_fail(err, TM_ERR_LIMIT, 0, "--project \"%.60s\": more than %u public keys", id_key,
                           MAX_ENTRIES);
    if (idx >= 0) return project_add_key(&cfg->projects[idx], key, len) ? nomem(err) : TM_OK;
    if (cfg->n_projects >= MAX_ENTRIES)
        return tm_srv_fail(err, TM_ERR_LIMIT, 0, "--project \"%.60s\": more than %u projects", id_key,
                           MAX_ENTRIES);
    tm_srv_project p;
    project_defaults(&p, id);
    if (project_add_key(&p, key, len) || config_push_project(cfg, &p)) {
        project_release(&p);
        return nomem(err);
    }
    return TM_OK;
}

tm_status tm_srv_random_key(char *buf, tm_error *err) {
    unsigned char raw[TM_SRV_KEY_HEX / 2];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    if (got < sizeof raw) { /* kernels without getrandom(2) */
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return tm_srv_fail(err, TM_ERR_IO, 0, "/dev/urandom: %s", strerror(errno));
        while (got < sizeof raw) {
            ssize_t n = read(fd, raw + got, sizeof raw - got);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                int e = n < 0 ? errno : EIO;
                close(fd);
                return tm_srv_fail(err, TM_ERR_IO, 0, "/dev/urandom: %s", strerror(e));
            }
            got += (size_t)n;
        }
        close(fd);
    }
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < sizeof raw; i++) {
        buf[2 * i] = hex[raw[i] >> 4];
        buf[2 * i + 1] = hex[raw[i] & 15];
    }
    buf[TM_SRV_KEY_HEX] = '\0';
    return TM_OK;
}

tm_status tm_srv_config_finish(tm_srv_config *cfg, const char **generated_key, tm_error *err) {
    if (generated_key) *generated_key = NULL;
    if (!cfg->listen_host || !cfg->store_path || !cfg->kafka.profiles_topic || !cfg->kafka.outcomes_topic)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "the configuration was not initialised");
    for (size_t i = 0; i < cfg->n_projects; i++) {
        if (cfg->projects[i].id == 0)
            return tm_srv_fail(err, TM_ERR_MALFORMED, 0, "projects[%zu]: the id must not be 0", i);
        if (cfg->projects[i].n_public_keys == 0)
            return tm_srv_fail(err, TM_ERR_MALFORMED, 0, "project %llu: no public key",
                               (unsigned long long)cfg->projects[i].id);
    }
    if (cfg->n_projects > 0) return TM_OK;
    char key[TM_SRV_KEY_HEX + 1];
    tm_status st = tm_srv_random_key(key, err);
    if (st != TM_OK) return st;
    tm_srv_project p;
    project_defaults(&p, 1);
    if (project_add_key(&p, key, TM_SRV_KEY_HEX) || config_push_project(cfg, &p)) {
        project_release(&p);
        return nomem(err);
    }
    if (generated_key) *generated_key = cfg->projects[0].public_keys[0];
    return TM_OK;
}

tm_status tm_srv_config_set_access_log(tm_srv_config *cfg, const char *format, tm_error *err) {
    if (access_log_format(format, &cfg->access_log))
        return tm_srv_fail(err, TM_ERR_MALFORMED, 0, "--access-log: \"%.40s\" is not off, text or json", format);
    return TM_OK;
}

void tm_srv_config_release(tm_srv_config *cfg) {
    if (!cfg) return;
    free(cfg->listen_host);
    free(cfg->store_path);
    free(cfg->upstream);
    free(cfg->access_log_path);
    for (size_t i = 0; i < cfg->n_projects; i++) project_release(&cfg->projects[i]);
    free(cfg->projects);
    free(cfg->kafka.bootstrap_servers);
    free(cfg->kafka.profiles_topic);
    free(cfg->kafka.outcomes_topic);
    for (size_t i = 0; i < cfg->kafka.n_properties; i++) {
        free(cfg->kafka.properties[i].key);
        free(cfg->kafka.properties[i].value);
    }
    free(cfg->kafka.properties);
    memset(cfg, 0, sizeof *cfg);
}

tm_srv_auth tm_srv_config_authenticate(const tm_srv_config *cfg, uint64_t project_id, const char *key,
                                       size_t key_len, const tm_srv_project **project) {
    if (project) *project = NULL;
    long owner = key_owner(cfg, key, key_len);
    if (owner < 0) return TM_SRV_AUTH_UNKNOWN_KEY;
    if (cfg->projects[owner].id == project_id) {
        if (project) *project = &cfg->projects[owner];
        return TM_SRV_AUTH_OK;
    }
    return project_index(cfg, project_id) >= 0 ? TM_SRV_AUTH_WRONG_PROJECT : TM_SRV_AUTH_UNKNOWN_PROJECT;
}
