/*
 * load_serve.c — the load generator of the ingest benchmark (`make
 * bench-serve`): N connections, one thread each, POST Android-style
 * profile_chunk envelopes (metadata JSON + Perfetto trace, compound item)
 * over HTTP/1.1 keep-alive as fast as the server answers, and report
 * throughput, latency percentiles and the CPU used by the server and by
 * the generator itself over the measured window (after a warm-up).
 *
 * usage: load_serve --url http://HOST:PORT/api/1/envelope/ --key KEY
 *                   --trace FILE --meta FILE [--connections N] [--duration S]
 *                   [--warmup S] [--server-pid PID] [--broker-pid PID]
 *
 * --server-pid / --broker-pid: processes whose CPU time (utime + stime from
 * /proc/PID/stat) is reported for the measured window, 100 % = one core.
 * The server's is also split by thread, from the names its threads carry
 * (connections, store writer, librdkafka, other), per accepted chunk.
 *
 * Plain POSIX sockets so that the generator stays cheap next to the server
 * on the same machine. Every request carries a unique event_id and
 * chunk_id (patched in place into a per-thread request buffer).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define ID_HEX 32          /* event_id and chunk_id: 32 hex digits */
#define MAX_ERROR_BODIES 5 /* error responses printed in full (truncated) */
#define RESP_MAX (64u * 1024u) /* responses are small JSON */
#define IO_TIMEOUT_S 60

typedef struct options {
    char host[256], port[16], path[1024];
    const char *key, *trace_path, *meta_path;
    long connections;
    double duration, warmup;
    long server_pid; /* 0: not measured */
    long broker_pid; /* the mock Kafka; 0: none */
} options;

/* Shared, read-only once the threads start (apart from the atomics). */
typedef struct shared {
    const options *opt;
    struct addrinfo *addr;
    const uint8_t *request; /* template: HTTP head + envelope */
    size_t request_len;
    size_t event_id_at, chunk_id_at; /* offsets of the 32-hex placeholders */
    uint64_t run_tag;       /* per-run prefix of the ids */
    uint64_t t_start_ns, t_measure_ns, t_end_ns;
    atomic_int errors_printed;
    atomic_int stop;
} shared;

typedef struct worker {
    shared *sh;
    unsigned index;
    pthread_t thread;
    uint64_t *lat_ns; /* latencies of the 200s completed in the window */
    size_t n_lat, cap_lat;
    uint64_t requests, errors;  /* completed in the window */
    uint64_t reconnects, warmup_requests;
    char fatal[256];            /* set when the thread gave up */
} worker;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t_ns) {
    for (;;) {
        uint64_t n = now_ns();
        if (n >= t_ns) return;
        uint64_t d = t_ns - n;
        struct timespec ts = {.tv_sec = (time_t)(d / 1000000000u), .tv_nsec = (long)(d % 1000000000u)};
        nanosleep(&ts, NULL);
    }
}

static int read_file(const char *path, uint8_t **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            uint8_t *nb = realloc(buf, cap * 2 + 65536);
            if (!nb) {
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
            cap = cap * 2 + 65536;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return -1;
    }
    *out = buf;
    *len = n;
    return 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= 0)) return -1;
    *out = v;
    return 0;
}

static int parse_long(const char *s, long min, long max, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < min || v > max) return -1;
    *out = v;
    return 0;
}

/* http://HOST[:PORT]/PATH (no https: this is loopback benchmarking). */
static int parse_url(const char *url, options *o) {
    const char *p = url;
    if (strncmp(p, "http://", 7) != 0) return -1;
    p += 7;
    const char *slash = strchr(p, '/');
    if (!slash) slash = p + strlen(p);
    const char *colon = memchr(p, ':', (size_t)(slash - p));
    const char *host_end = colon ? colon : slash;
    if (host_end == p || (size_t)(host_end - p) >= sizeof o->host) return -1;
    memcpy(o->host, p, (size_t)(host_end - p));
    o->host[host_end - p] = '\0';
    if (colon) {
        size_t pl = (size_t)(slash - colon - 1);
        if (pl == 0 || pl >= sizeof o->port) return -1;
        memcpy(o->port, colon + 1, pl);
        o->port[pl] = '\0';
    } else {
        snprintf(o->port, sizeof o->port, "80");
    }
    if (*slash == '\0') {
        snprintf(o->path, sizeof o->path, "/");
    } else if ((size_t)snprintf(o->path, sizeof o->path, "%s", slash) >= sizeof o->path) {
        return -1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: load_serve --url http://HOST:PORT/api/ID/envelope/ --key KEY --trace FILE --meta FILE\n"
                    "                  [--connections N=16] [--duration S=10] [--warmup S=2] [--server-pid PID]\n"
                    "                  [--broker-pid PID]\n");
}

static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->connections = 16;
    o->duration = 10;
    o->warmup = 2;
    int have_url = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "load_serve: %s needs a value\n", a);
            return -1;
        }
        const char *v = argv[++i];
        int bad = 0;
        if (strcmp(a, "--url") == 0) {
            bad = parse_url(v, o);
            have_url = 1;
        } else if (strcmp(a, "--key") == 0) {
            o->key = v;
        } else if (strcmp(a, "--trace") == 0) {
            o->trace_path = v;
        } else if (strcmp(a, "--meta") == 0) {
            o->meta_path = v;
        } else if (strcmp(a, "--connections") == 0) {
            bad = parse_long(v, 1, 4096, &o->connections);
        } else if (strcmp(a, "--duration") == 0) {
            bad = parse_double(v, &o->duration) || o->duration <= 0;
        } else if (strcmp(a, "--warmup") == 0) {
            bad = parse_double(v, &o->warmup);
        } else if (strcmp(a, "--server-pid") == 0) {
            bad = parse_long(v, 1, 1L << 30, &o->server_pid);
        } else if (strcmp(a, "--broker-pid") == 0) {
            bad = parse_long(v, 1, 1L << 30, &o->broker_pid);
        } else {
            fprintf(stderr, "load_serve: unknown option %s\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "load_serve: bad value for %s: %s\n", a, v);
            return -1;
        }
    }
    if (!have_url || !o->key || !o->trace_path || !o->meta_path) {
        fprintf(stderr, "load_serve: --url, --key, --trace and --meta are required\n");
        return -1;
    }
    return 0;
}

/* A growable byte buffer for building the request template. */
typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

static int put(bytes *b, const void *d, size_t n) {
    if (b->cap - b->len < n) {
        size_t nc = (b->cap + n) * 2;
        uint8_t *np = realloc(b->p, nc);
        if (!np) return -1;
        b->p = np;
        b->cap = nc;
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
    return 0;
}

static int putf(bytes *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int putf(bytes *b, const char *fmt, ...) {
    char tmp[2048];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) return -1;
    return put(b, tmp, (size_t)n);
}

/* Finds the string value of "chunk_id" in the metadata JSON: [*at, *at+*len). */
static int find_chunk_id(const uint8_t *meta, size_t len, size_t *at, size_t *vlen) {
    static const char key[] = "\"chunk_id\"";
    const uint8_t *k = memmem(meta, len, key, sizeof key - 1);
    if (!k) return -1;
    size_t i = (size_t)(k - meta) + sizeof key - 1;
    while (i < len && (meta[i] == ' ' || meta[i] == '\t' || meta[i] == '\n' || meta[i] == '\r')) i++;
    if (i >= len || meta[i] != ':') return -1;
    i++;
    while (i < len && (meta[i] == ' ' || meta[i] == '\t' || meta[i] == '\n' || meta[i] == '\r')) i++;
    if (i >= len || meta[i] != '"') return -1;
    size_t start = ++i;
    while (i < len && meta[i] != '"' && meta[i] != '\\') i++;
    if (i >= len || meta[i] != '"') return -1;
    *at = start;
    *vlen = i - start;
    return 0;
}

/* Builds the request template: HTTP head, envelope header, item header,
 * metadata (its chunk_id replaced by a 32-hex placeholder) + trace, '\n'. */
static int build_request(shared *sh, const options *o, const uint8_t *meta, size_t meta_len,
                         const uint8_t *trace, size_t trace_len) {
    size_t cid_at, cid_len;
    if (find_chunk_id(meta, meta_len, &cid_at, &cid_len) != 0) {
        fprintf(stderr, "load_serve: %s has no \"chunk_id\" string\n", o->meta_path);
        return -1;
    }
    static const char zeros[ID_HEX + 1] = "00000000000000000000000000000000";
    size_t m_len = meta_len - cid_len + ID_HEX;

    bytes env = {0};
    size_t ev_at, ci_at;
    int bad = putf(&env, "{\"event_id\":\"");
    ev_at = env.len;
    bad |= put(&env, zeros, ID_HEX);
    bad |= putf(&env, "\"}\n{\"type\":\"profile_chunk\",\"content_type\":\"application/x-perfetto-trace\","
                      "\"platform\":\"android\",\"meta_length\":%zu,\"length\":%zu}\n",
                m_len, m_len + trace_len);
    bad |= put(&env, meta, cid_at);
    ci_at = env.len;
    bad |= put(&env, zeros, ID_HEX);
    bad |= put(&env, meta + cid_at + cid_len, meta_len - cid_at - cid_len);
    bad |= put(&env, trace, trace_len);
    bad |= put(&env, "\n", 1);

    bytes req = {0};
    bad |= putf(&req,
                "POST %s HTTP/1.1\r\nHost: %s:%s\r\nUser-Agent: tracemill-load_serve\r\n"
                "X-Sentry-Auth: Sentry sentry_version=7, sentry_key=%s, sentry_client=tracemill-load_serve/1\r\n"
                "Content-Type: application/x-sentry-envelope\r\nContent-Length: %zu\r\n\r\n",
                o->path, o->host, o->port, o->key, env.len);
    size_t head = req.len;
    bad |= put(&req, env.p, env.len);
    free(env.p);
    if (bad) {
        free(req.p);
        fprintf(stderr, "load_serve: out of memory building the request\n");
        return -1;
    }
    sh->request = req.p;
    sh->request_len = req.len;
    sh->event_id_at = head + ev_at;
    sh->chunk_id_at = head + ci_at;
    return 0;
}

static void put_hex(uint8_t *at, uint64_t v, int digits) {
    static const char hex[] = "0123456789abcdef";
    for (int i = digits - 1; i >= 0; i--) {
        at[i] = (uint8_t)hex[v & 15];
        v >>= 4;
    }
}

/* Unique ids: 16 hex of the run tag, 4 of the thread, 12 of the sequence. */
static void patch_ids(const shared *sh, uint8_t *req, unsigned thread, uint64_t seq) {
    uint8_t id[ID_HEX];
    put_hex(id, sh->run_tag, 16);
    put_hex(id + 16, thread, 4);
    put_hex(id + 20, seq, 12);
    memcpy(req + sh->event_id_at, id, ID_HEX);
    put_hex(id, ~sh->run_tag, 16); /* the chunk_id differs from the event_id */
    memcpy(req + sh->chunk_id_at, id, ID_HEX);
}

static int connect_server(const shared *sh) {
    for (const struct addrinfo *a = sh->addr; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
            int one = 1;
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            struct timeval tv = {.tv_sec = IO_TIMEOUT_S};
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            return fd;
        }
        close(fd);
    }
    return -1;
}

static int send_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

typedef struct response {
    char buf[RESP_MAX];
    size_t len;       /* bytes in buf */
    unsigned status;
    size_t body_at, body_len;
    int close_after;  /* Connection: close, or read to EOF */
} response;

/* Case-insensitive search for header NAME in head[0..len); value into out. */
static int header_value(const char *head, size_t len, const char *name, const char **val, size_t *vlen) {
    size_t nl = strlen(name);
    const char *p = memchr(head, '\n', len); /* skip the status line */
    while (p && (size_t)(p - head) + 1 < len) {
        const char *line = p + 1;
        const char *eol = memchr(line, '\n', len - (size_t)(line - head));
        if (!eol) break;
        if ((size_t)(eol - line) > nl && strncasecmp(line, name, nl) == 0 && line[nl] == ':') {
            const char *v = line + nl + 1, *e = eol;
            while (v < e && (*v == ' ' || *v == '\t')) v++;
            while (e > v && (e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) e--;
            *val = v;
            *vlen = (size_t)(e - v);
            return 1;
        }
        p = eol;
    }
    return 0;
}

/* Reads one full response. 0: done; -1: I/O error or EOF before any byte
 * (*got_any tells which); -2: malformed or unsupported response. */
static int read_response(int fd, response *r, int *got_any) {
    r->len = 0;
    *got_any = 0;
    size_t head_end = 0;
    for (;;) {
        if (r->len > 0) {
            char *e = memmem(r->buf, r->len, "\r\n\r\n", 4);
            if (e) {
                head_end = (size_t)(e - r->buf) + 4;
                break;
            }
        }
        if (r->len == sizeof r->buf) return -2;
        ssize_t n = recv(fd, r->buf + r->len, sizeof r->buf - r->len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        r->len += (size_t)n;
        *got_any = 1;
    }
    unsigned major, minor, status;
    if (sscanf(r->buf, "HTTP/%u.%u %u", &major, &minor, &status) != 3) return -2;
    r->status = status;
    const char *v;
    size_t vl;
    r->close_after = (major == 1 && minor == 0);
    if (header_value(r->buf, head_end, "Connection", &v, &vl)) {
        if (vl == 5 && strncasecmp(v, "close", 5) == 0) r->close_after = 1;
        if (vl == 10 && strncasecmp(v, "keep-alive", 10) == 0) r->close_after = 0;
    }
    if (header_value(r->buf, head_end, "Transfer-Encoding", &v, &vl)) return -2; /* not sent by the server */
    r->body_at = head_end;
    long long want = -1;
    if (header_value(r->buf, head_end, "Content-Length", &v, &vl)) {
        char tmp[32];
        if (vl == 0 || vl >= sizeof tmp) return -2;
        memcpy(tmp, v, vl);
        tmp[vl] = '\0';
        char *end;
        want = strtoll(tmp, &end, 10);
        if (*end != '\0' || want < 0 || (unsigned long long)want > sizeof r->buf - head_end) return -2;
    } else if (status == 204 || status == 304 || status / 100 == 1) {
        want = 0;
    } else {
        r->close_after = 1; /* body runs to EOF */
    }
    for (;;) {
        size_t have = r->len - head_end;
        if (want >= 0 && have >= (size_t)want) break;
        if (r->len == sizeof r->buf) return -2;
        ssize_t n = recv(fd, r->buf + r->len, sizeof r->buf - r->len, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return -1;
        if (n == 0) {
            if (want < 0) break;
            return -1;
        }
        r->len += (size_t)n;
    }
    r->body_len = want >= 0 ? (size_t)want : r->len - head_end;
    return 0;
}

static void print_error_body(shared *sh, unsigned thread, const response *r) {
    if (atomic_fetch_add(&sh->errors_printed, 1) >= MAX_ERROR_BODIES) return;
    int n = (int)(r->body_len > 300 ? 300 : r->body_len);
    fprintf(stderr, "load_serve: connection %u: HTTP %u: %.*s\n", thread, r->status, n, r->buf + r->body_at);
}

static void note_error(shared *sh, unsigned thread, const char *what) {
    if (atomic_fetch_add(&sh->errors_printed, 1) >= MAX_ERROR_BODIES) return;
    fprintf(stderr, "load_serve: connection %u: %s\n", thread, what);
}

static int record(worker *w, uint64_t lat) {
    if (w->n_lat == w->cap_lat) {
        size_t nc = w->cap_lat ? w->cap_lat * 2 : 4096;
        uint64_t *np = realloc(w->lat_ns, nc * sizeof *np);
        if (!np) return -1;
        w->lat_ns = np;
        w->cap_lat = nc;
    }
    w->lat_ns[w->n_lat++] = lat;
    return 0;
}

static void *worker_main(void *arg) {
    worker *w = arg;
    shared *sh = w->sh;
    uint8_t *req = malloc(sh->request_len);
    response *resp = malloc(sizeof *resp);
    if (!req || !resp) {
        snprintf(w->fatal, sizeof w->fatal, "out of memory");
        free(req);
        free(resp);
        return NULL;
    }
    memcpy(req, sh->request, sh->request_len);
    uint64_t seq = 0;
    int fd = -1;
    int fresh = 0; /* fd was opened for this request: a failure is not a keep-alive race */
    /* Runs past t_end_ns (those requests are not counted) until main has
     * read the server's threads: a connection closed earlier could end its
     * server thread first, whose CPU would then count as "other". */
    while (!atomic_load(&sh->stop)) {
        if (fd < 0) {
            fd = connect_server(sh);
            if (fd < 0) {
                snprintf(w->fatal, sizeof w->fatal, "cannot connect: %s", strerror(errno));
                break;
            }
            fresh = 1;
        }
        patch_ids(sh, req, w->index, seq++);
        uint64_t t0 = now_ns();
        int got_any = 0, rc = send_all(fd, req, sh->request_len);
        if (rc == 0) rc = read_response(fd, resp, &got_any);
        uint64_t t1 = now_ns();
        int in_window = t1 >= sh->t_measure_ns && t1 <= sh->t_end_ns;
        if (rc == -1 && !got_any && !fresh) {
            /* The server closed an idle keep-alive connection: retry on a new one. */
            close(fd);
            fd = -1;
            w->reconnects++;
            continue;
        }
        fresh = 0;
        if (rc != 0) {
            char what[128];
            snprintf(what, sizeof what, "%s", rc == -2 ? "malformed or oversized response" : strerror(errno));
            note_error(sh, w->index, what);
            close(fd);
            fd = -1;
            w->reconnects++;
            if (in_window) {
                w->requests++;
                w->errors++;
            }
            continue;
        }
        if (resp->status != 200) print_error_body(sh, w->index, resp);
        if (in_window) {
            w->requests++;
            if (resp->status != 200) {
                w->errors++;
            } else if (record(w, t1 - t0) != 0) {
                snprintf(w->fatal, sizeof w->fatal, "out of memory");
                break;
            }
        } else if (t1 < sh->t_measure_ns) {
            w->warmup_requests++;
        }
        if (resp->close_after) {
            close(fd);
            fd = -1;
            w->reconnects++;
        }
    }
    if (fd >= 0) close(fd);
    free(req);
    free(resp);
    return NULL;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(const uint64_t *v, size_t n, double q) {
    if (n == 0) return 0;
    size_t k = (size_t)(q * (double)n + 0.999999);
    if (k < 1) k = 1;
    if (k > n) k = n;
    return (double)v[k - 1] / 1e6;
}

/* utime + stime of a process in clock ticks, from /proc/PID/stat. */
/* utime + stime of a /proc stat file, and its comm when comm is not NULL. */
static int stat_cpu_ticks(const char *path, uint64_t *ticks, char *comm, size_t comm_cap) {
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* comm (field 2) may hold spaces and ')': fields resume after the last ')'. */
    char *p = strrchr(buf, ')'), *open = strchr(buf, '(');
    if (!p || !open) return -1;
    if (comm) snprintf(comm, comm_cap, "%.*s", (int)(p - open - 1), open + 1);
    unsigned long long ut, st;
    /* state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    *ticks = ut + st;
    return 0;
}

static int proc_cpu_ticks(long pid, uint64_t *ticks) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    return stat_cpu_ticks(path, ticks, NULL, 0);
}

/* The server's threads by what they do, from their names (server/ names
 * its own; librdkafka's start with "rdk:"). */
enum { KIND_CONNECTIONS, KIND_STORE_WRITER, KIND_LIBRDKAFKA, KIND_OTHER, N_KINDS };
static const char *const kind_names[N_KINDS] = {"connections", "store_writer", "librdkafka", "other"};

static int thread_kind(const char *comm) {
    if (strcmp(comm, "tm-conn") == 0) return KIND_CONNECTIONS;
    if (strcmp(comm, "tm-store") == 0) return KIND_STORE_WRITER;
    if (strncmp(comm, "rdk:", 4) == 0) return KIND_LIBRDKAFKA;
    return KIND_OTHER;
}

#define MAX_TASKS 4096

typedef struct task_ticks {
    long tid;
    int kind;
    uint64_t ticks;
} task_ticks;

/* Every thread of pid with its CPU ticks and kind: how many (at most MAX_TASKS), or -1. */
static long proc_task_ticks(long pid, task_ticks *out) {
    char path[96];
    snprintf(path, sizeof path, "/proc/%ld/task", pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    long n = 0;
    struct dirent *e;
    while (n < MAX_TASKS && (e = readdir(d)) != NULL) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0) continue;
        char comm[64];
        snprintf(path, sizeof path, "/proc/%ld/task/%ld/stat", pid, tid);
        if (stat_cpu_ticks(path, &out[n].ticks, comm, sizeof comm) != 0) continue; /* it ended meanwhile */
        out[n].tid = tid;
        out[n].kind = thread_kind(comm);
        n++;
    }
    closedir(d);
    return n;
}

/* Ticks per kind between two snapshots (a thread born in between counts whole). */
static void ticks_by_kind(const task_ticks *t0, long n0, const task_ticks *t1, long n1, uint64_t by_kind[N_KINDS]) {
    memset(by_kind, 0, N_KINDS * sizeof *by_kind);
    for (long i = 0; i < n1; i++) {
        uint64_t before = 0;
        for (long j = 0; j < n0; j++)
            if (t0[j].tid == t1[i].tid) before = t0[j].ticks;
        if (t1[i].ticks > before) by_kind[t1[i].kind] += t1[i].ticks - before;
    }
}

static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
           (double)ru.ru_stime.tv_usec / 1e6;
}

int main(int argc, char **argv) {
    options opt;
    if (parse_options(argc, argv, &opt) != 0) {
        usage();
        return 2;
    }
    uint8_t *trace, *meta;
    size_t trace_len, meta_len;
    if (read_file(opt.trace_path, &trace, &trace_len) != 0) {
        fprintf(stderr, "load_serve: cannot read %s: %s\n", opt.trace_path, strerror(errno));
        return 2;
    }
    if (read_file(opt.meta_path, &meta, &meta_len) != 0) {
        fprintf(stderr, "load_serve: cannot read %s: %s\n", opt.meta_path, strerror(errno));
        return 2;
    }
    while (meta_len > 0 && (meta[meta_len - 1] == '\n' || meta[meta_len - 1] == '\r' || meta[meta_len - 1] == ' '))
        meta_len--;

    static shared sh; /* large-ish and shared by every thread */
    sh.opt = &opt;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    int gai = getaddrinfo(opt.host, opt.port, &hints, &sh.addr);
    if (gai != 0) {
        fprintf(stderr, "load_serve: %s:%s: %s\n", opt.host, opt.port, gai_strerror(gai));
        return 2;
    }
    if (build_request(&sh, &opt, meta, meta_len, trace, trace_len) != 0) return 2;
    free(trace);
    free(meta);
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    sh.run_tag = ((uint64_t)rt.tv_sec << 20) ^ (uint64_t)rt.tv_nsec ^ ((uint64_t)getpid() << 40);

    worker *ws = calloc((size_t)opt.connections, sizeof *ws);
    if (!ws) return 2;
    sh.t_start_ns = now_ns();
    sh.t_measure_ns = sh.t_start_ns + (uint64_t)(opt.warmup * 1e9);
    sh.t_end_ns = sh.t_measure_ns + (uint64_t)(opt.duration * 1e9);
    long started = 0;
    for (long i = 0; i < opt.connections; i++) {
        ws[i].sh = &sh;
        ws[i].index = (unsigned)i;
        if (pthread_create(&ws[i].thread, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "load_serve: cannot start thread %ld\n", i);
            atomic_store(&sh.stop, 1);
            break;
        }
        started++;
    }

    long tck = sysconf(_SC_CLK_TCK);
    uint64_t srv0 = 0, srv1 = 0, brk0 = 0, brk1 = 0;
    int srv_ok = 0, brk_ok = 0;
    static task_ticks tasks0[MAX_TASKS], tasks1[MAX_TASKS];
    long n_tasks0 = -1, n_tasks1 = -1;
    sleep_until(sh.t_measure_ns);
    double self0 = self_cpu_s();
    uint64_t m0 = now_ns();
    if (opt.server_pid) srv_ok = proc_cpu_ticks(opt.server_pid, &srv0) == 0;
    if (opt.server_pid) n_tasks0 = proc_task_ticks(opt.server_pid, tasks0);
    if (opt.broker_pid) brk_ok = proc_cpu_ticks(opt.broker_pid, &brk0) == 0;
    sleep_until(sh.t_end_ns);
    if (opt.server_pid) srv_ok = srv_ok && proc_cpu_ticks(opt.server_pid, &srv1) == 0;
    if (opt.server_pid) n_tasks1 = proc_task_ticks(opt.server_pid, tasks1);
    if (opt.broker_pid) brk_ok = brk_ok && proc_cpu_ticks(opt.broker_pid, &brk1) == 0;
    double self1 = self_cpu_s();
    uint64_t m1 = now_ns();
    atomic_store(&sh.stop, 1);

    for (long i = 0; i < started; i++) pthread_join(ws[i].thread, NULL);

    uint64_t requests = 0, errors = 0, reconnects = 0, warm = 0;
    size_t n_lat = 0;
    int fatal = 0;
    for (long i = 0; i < started; i++) {
        requests += ws[i].requests;
        errors += ws[i].errors;
        reconnects += ws[i].reconnects;
        warm += ws[i].warmup_requests;
        n_lat += ws[i].n_lat;
        if (ws[i].fatal[0]) {
            fprintf(stderr, "load_serve: connection %ld: %s\n", i, ws[i].fatal);
            fatal = 1;
        }
    }
    uint64_t *all = malloc((n_lat ? n_lat : 1) * sizeof *all);
    if (!all) return 2;
    size_t k = 0;
    for (long i = 0; i < started; i++) {
        if (ws[i].n_lat) memcpy(all + k, ws[i].lat_ns, ws[i].n_lat * sizeof *all);
        k += ws[i].n_lat;
        free(ws[i].lat_ns);
    }
    qsort(all, n_lat, sizeof *all, cmp_u64);
    double secs = (double)(m1 - m0) / 1e9;
    double ok = (double)n_lat;
    double mean = 0;
    for (size_t i = 0; i < n_lat; i++) mean += (double)all[i];
    mean = n_lat ? mean / (double)n_lat / 1e6 : 0;

    printf("connections: %ld\n", started);
    printf("request_bytes: %zu\n", sh.request_len);
    printf("warmup_requests: %" PRIu64 "\n", warm);
    printf("requests: %" PRIu64 "\n", requests);
    printf("errors: %" PRIu64 "\n", errors);
    printf("reconnects: %" PRIu64 "\n", reconnects);
    printf("seconds: %.3f\n", secs);
    printf("chunks_per_s: %.1f\n", ok / secs);
    printf("mb_per_s: %.2f\n", ok * (double)sh.request_len / secs / 1e6);
    printf("mean_ms: %.3f\n", mean);
    printf("p50_ms: %.3f\n", pct_ms(all, n_lat, 0.50));
    printf("p99_ms: %.3f\n", pct_ms(all, n_lat, 0.99));
    printf("p999_ms: %.3f\n", pct_ms(all, n_lat, 0.999));
    printf("max_ms: %.3f\n", n_lat ? (double)all[n_lat - 1] / 1e6 : 0.0);
    if (opt.server_pid && srv_ok && tck > 0) {
        double cpu_s = (double)(srv1 - srv0) / (double)tck;
        printf("server_cpu_pct: %.1f\n", cpu_s / secs * 100);
        /* the server's CPU cost of one accepted chunk: utime + stime over the window per 200 */
        if (ok > 0) printf("server_cpu_ms_per_chunk: %.3f\n", cpu_s * 1e3 / ok);
        if (ok > 0 && n_tasks0 >= 0 && n_tasks1 >= 0) {
            uint64_t by_kind[N_KINDS];
            ticks_by_kind(tasks0, n_tasks0, tasks1, n_tasks1, by_kind);
            /* "other" is what the named kinds leave of the process's total, so that
             * threads which ended inside the window (their ticks gone from
             * /proc/PID/task) still count, and the split adds up */
            uint64_t named = by_kind[KIND_CONNECTIONS] + by_kind[KIND_STORE_WRITER] + by_kind[KIND_LIBRDKAFKA];
            by_kind[KIND_OTHER] = srv1 - srv0 > named ? srv1 - srv0 - named : 0;
            for (int i = 0; i < N_KINDS; i++)
                printf("server_cpu_ms_per_chunk_%s: %.3f\n", kind_names[i], (double)by_kind[i] / (double)tck * 1e3 / ok);
        }
    } else if (opt.server_pid) {
        printf("server_cpu_pct: unknown\n");
    }
    if (opt.broker_pid && brk_ok && tck > 0)
        printf("broker_cpu_pct: %.1f\n", (double)(brk1 - brk0) / (double)tck / secs * 100);
    else if (opt.broker_pid)
        printf("broker_cpu_pct: unknown\n");
    printf("generator_cpu_pct: %.1f\n", (self1 - self0) / secs * 100);
    free(all);
    free(ws);
    free((void *)sh.request);
    freeaddrinfo(sh.addr);
    return fatal || n_lat == 0 ? 1 : 0;
}
