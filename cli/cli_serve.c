/*
 * cli_serve.c — the tracemill-serve program behind `tracemill serve` (the
 * ingest server: configuration, start, the DSN banner, graceful stop on
 * SIGTERM/SIGINT) and `tracemill store ls|get|export` (reading back what
 * the local store holds). `tracemill` execs it for those two commands. The
 * server itself is the server/ layer, reached through server/server.h.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "server.h"

#define DEFAULT_STORE "./tracemill-store"

static int config_error(const tm_error *err) {
    fprintf(stderr, "tracemill serve: %s\n", err->message);
    return err->code == TM_ERR_IO ? EXIT_IO : EXIT_USAGE;
}

/* host as a URL's authority spells it: an IPv6 address in brackets, its
 * zone's '%' escaped (RFC 6874), so that the banner's URL and DSNs work
 * when pasted into curl or an SDK. */
static void url_host(const char *host, char *out, size_t size) {
    if (!strchr(host, ':')) {
        snprintf(out, size, "%s", host);
        return;
    }
    size_t n = 0;
    if (n + 1 < size) out[n++] = '[';
    for (const char *p = host; *p && n + 4 < size; p++) {
        if (*p == '%') {
            memcpy(out + n, "%25", 3);
            n += 3;
        } else {
            out[n++] = *p;
        }
    }
    if (n + 1 < size) out[n++] = ']';
    out[n] = 0;
}

static int serve_usage(const char *arg) {
    return cli_usage_error("serve", "unknown option or missing value: %s", arg);
}

/* What waits for a second SIGTERM or SIGINT while the server drains. */
typedef struct second_signal {
    tm_srv_server *server;
    sigset_t signals;
    pthread_mutex_t mu;
    int done; /* under mu: the drain is over (the thread was signalled to end) */
} second_signal;

static void *watch_second_signal(void *arg) {
    second_signal *w = arg;
    int sig = 0;
    sigwait(&w->signals, &sig);
    pthread_mutex_lock(&w->mu);
    if (!w->done) {
        fprintf(stderr, "tracemill serve: %s again: cutting the requests in flight\n",
                sig == SIGTERM ? "SIGTERM" : "SIGINT");
        tm_srv_server_hurry(w->server);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int cli_serve(int argc, char **argv) {
    tm_srv_config cfg;
    tm_error err;
    if (tm_srv_config_init(&cfg, &err) != TM_OK) return config_error(&err);
    const char *config_path = NULL;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--config") == 0 && i + 1 < argc) config_path = argv[++i];
    int rc = EXIT_OK;
    if (config_path && tm_srv_config_load(&cfg, config_path, &err) != TM_OK) {
        rc = config_error(&err);
        goto out;
    }
    /* flags override the file */
    for (int i = 1; i < argc && rc == EXIT_OK; i++) {
        const char *a = argv[i];
        tm_status st = TM_OK;
        if (i + 1 >= argc) {
            rc = serve_usage(a);
        } else if (strcmp(a, "--config") == 0) {
            i++;
        } else if (strcmp(a, "--listen") == 0) {
            st = tm_srv_config_set_listen(&cfg, argv[++i], &err);
        } else if (strcmp(a, "--store") == 0) {
            st = tm_srv_config_set_store(&cfg, argv[++i], &err);
        } else if (strcmp(a, "--project") == 0) {
            st = tm_srv_config_add_project(&cfg, argv[++i], &err);
        } else if (strcmp(a, "--access-log") == 0) {
            st = tm_srv_config_set_access_log(&cfg, argv[++i], &err);
        } else {
            rc = serve_usage(a);
        }
        if (st != TM_OK) rc = config_error(&err);
    }
    /* Without a configured project, project 1's key is kept in the store,
     * so the DSN stays the same across restarts. */
    char stored_key[TM_SRV_KEY_HEX + 1] = "";
    int key_created = 0;
    if (rc == EXIT_OK && cfg.n_projects == 0) {
        char project[sizeof "1:" + TM_SRV_KEY_HEX];
        if (tm_srv_store_key(cfg.store_path, stored_key, &key_created, &err) != TM_OK) {
            fprintf(stderr, "tracemill serve: %s\n", err.message);
            rc = EXIT_IO;
        } else {
            snprintf(project, sizeof project, "1:%s", stored_key);
            if (tm_srv_config_add_project(&cfg, project, &err) != TM_OK) rc = config_error(&err);
        }
    }
    if (rc == EXIT_OK && tm_srv_config_finish(&cfg, NULL, &err) != TM_OK) rc = config_error(&err);
    if (rc != EXIT_OK) goto out;

    /* Every thread the server starts inherits this mask, so the signals
     * arrive only at sigwait below. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    tm_srv_server *server = NULL;
    if (tm_srv_server_start(&cfg, &server, &err) != TM_OK) {
        fprintf(stderr, "tracemill serve: %s\n", err.message);
        rc = EXIT_IO;
        goto out;
    }
    unsigned port = tm_srv_server_port(server);
    char host[3 * 256];
    url_host(cfg.listen_host, host, sizeof host);
    printf("tracemill serve: listening on http://%s:%u, ", host, port);
    if (cfg.kafka.bootstrap_servers)
        printf("Kafka %s (spool in %s)\n", cfg.kafka.bootstrap_servers, cfg.store_path);
    else
        printf("local store %s\n", cfg.store_path);
    for (size_t p = 0; p < cfg.n_projects; p++)
        for (size_t k = 0; k < cfg.projects[p].n_public_keys; k++) {
            const char *key = cfg.projects[p].public_keys[k];
            printf("DSN: http://%s@%s:%u/%" PRIu64, key, host, port, cfg.projects[p].id);
            if (strcmp(key, stored_key) == 0)
                printf(" (%s key, kept in %s/%s)", key_created ? "generated" : "stored", cfg.store_path,
                       TM_SRV_KEY_FILE);
            putchar('\n');
        }
    fflush(stdout);

    int sig = 0;
    sigwait(&stop, &sig);
    fprintf(stderr, "tracemill serve: %s: draining (at most %u s) and stopping (again: at once)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", cfg.limits.shutdown_timeout_s);
    /* a second signal cuts the drain's wait short */
    second_signal hurry = {server, stop, PTHREAD_MUTEX_INITIALIZER, 0};
    pthread_t watcher;
    int watching = pthread_create(&watcher, NULL, watch_second_signal, &hurry) == 0;
    tm_srv_server_drain(server);
    if (watching) {
        pthread_mutex_lock(&hurry.mu);
        hurry.done = 1;
        pthread_mutex_unlock(&hurry.mu);
        pthread_kill(watcher, SIGTERM); /* ends its sigwait: blocked, the signal goes to that thread alone */
        pthread_join(watcher, NULL);
    }
    tm_srv_server_stop(server);
out:
    tm_srv_config_release(&cfg);
    return rc;
}

/* ---- tracemill store ---- */

static int store_usage(void) {
    return cli_usage_error("store",
                           "wants ls, get CHUNK_ID or export OUT_DIR, with --store PATH, -o OUT, --raw, --project ID");
}

static void format_time(uint64_t unix_s, char *out, size_t cap) {
    time_t t = (time_t)unix_s;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Writes a chunk id from the store with every byte outside printable
 * ASCII (and the backslash) as \xNN: an id stored by an older server or
 * another writer could otherwise move the cursor or forge a line. */
static void print_escaped(FILE *f, tm_srv_view id) {
    for (size_t i = 0; id.ptr && i < id.len; i++) {
        const unsigned char c = (unsigned char)id.ptr[i];
        if (c > ' ' && c < 0x7f && c != '\\') fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
}

/* ctx: the --project to list (0: any) */
static int print_line(void *ctx, const tm_srv_stored_chunk *c) {
    const uint64_t *project = ctx;
    if (*project && c->project_id != *project) return 0;
    char when[32];
    format_time(c->received, when, sizeof when);
    printf("%s  project=%" PRIu64 "  chunk_id=", when, c->project_id);
    print_escaped(stdout, c->chunk_id);
    printf("  payload=%zu  raw=%zu\n", c->payload_size, c->raw_size);
    return 0;
}

typedef struct get_job {
    int raw;
    const char *out_path;
    uint64_t project; /* 0: any */
    int found, rc;
    uint64_t projects[2]; /* the first two projects that hold the chunk_id (count_projects) */
    size_t n_projects;
} get_job;

/* Notes the projects that hold the chunk_id: one that two projects sent
 * needs --project. */
static int count_projects(void *ctx, const tm_srv_stored_chunk *c) {
    get_job *job = ctx;
    for (size_t i = 0; i < job->n_projects; i++)
        if (job->projects[i] == c->project_id) return 0;
    if (job->n_projects < 2) job->projects[job->n_projects++] = c->project_id;
    return job->n_projects == 2;
}

/* JSON payloads end with a newline, as `tracemill convert` writes them. */
static int write_file(const char *path, int binary, const void *data, size_t len) {
    cli_output o;
    int rc = cli_output_open(path, binary ? CLI_OUT_BINARY : 0, NULL, &o);
    if (rc != EXIT_OK) return rc;
    if ((len && fwrite(data, 1, len, o.f) != len) || (!binary && fputc('\n', o.f) == EOF))
        rc = cli_output_error(o.path, errno);
    return cli_output_close(&o, rc);
}

static int write_chunk(void *ctx, const tm_srv_stored_chunk *c) {
    get_job *job = ctx;
    tm_srv_chunk_msg m;
    char ctype[64];
    tm_error err;
    if (job->project && c->project_id != job->project) return 0;
    job->found++;
    if (c->unreadable) {
        fprintf(stderr, "tracemill store: stored chunk %" PRId64 ": %s\n", c->id, c->unreadable);
        job->rc = EXIT_REJECTED;
        return 1;
    }
    if (tm_srv_chunk_msg_decode(c->message, c->message_len, &m, ctype, sizeof ctype, &err) != TM_OK) {
        job->rc = cli_report_error("stored message", &err);
        return 1;
    }
    if (job->raw && !m.raw_profile) {
        fputs("tracemill store: chunk ", stderr);
        print_escaped(stderr, c->chunk_id);
        fputs(" has no raw profile\n", stderr);
        job->rc = EXIT_REJECTED;
        return 1;
    }
    job->rc = job->raw ? write_file(job->out_path, 1, m.raw_profile, m.raw_profile_len)
                       : write_file(job->out_path, 0, m.payload, m.payload_len);
    return 1; /* the first match only */
}

typedef struct export_job {
    const char *dir;
    uint64_t project; /* 0: any */
    size_t written, skipped;
    int rc;
} export_job;

/* A row that cannot be exported is reported and skipped; the walk goes on. */
static int skip_chunk(export_job *job, const tm_srv_stored_chunk *c, const char *why) {
    fprintf(stderr, "tracemill store: skipping stored chunk %" PRId64 " (chunk_id ", c->id);
    print_escaped(stderr, c->chunk_id);
    fprintf(stderr, "): %s\n", why);
    job->skipped++;
    if (job->rc == EXIT_OK) job->rc = EXIT_REJECTED;
    return 0;
}

static int export_chunk(void *ctx, const tm_srv_stored_chunk *c) {
    export_job *job = ctx;
    tm_srv_chunk_msg m;
    char ctype[64], path[4096], id[TM_SRV_UUID_HEX + 1];
    tm_error err;
    if (job->project && c->project_id != job->project) return 0;
    /* file names come from the normalised id only, never from stored text */
    if (!tm_srv_uuid_normalize(c->chunk_id.ptr, c->chunk_id.len, id))
        return skip_chunk(job, c, "the chunk_id is not a UUID");
    if (c->unreadable) return skip_chunk(job, c, c->unreadable);
    if (tm_srv_chunk_msg_decode(c->message, c->message_len, &m, ctype, sizeof ctype, &err) != TM_OK)
        return skip_chunk(job, c, err.message);
    /* the store id keeps names unique when two projects sent the same chunk_id */
    int n = snprintf(path, sizeof path, "%s/%06" PRId64 "-%s.json", job->dir, c->id, id);
    if (n < 0 || (size_t)n >= sizeof path) return job->rc = EXIT_USAGE, 1;
    int rc = write_file(path, 0, m.payload, m.payload_len);
    if (rc == EXIT_OK && m.raw_profile) {
        memcpy(path + n - 5, ".pftrace", 9);
        rc = write_file(path, 1, m.raw_profile, m.raw_profile_len);
    }
    if (rc != EXIT_OK) return job->rc = rc, 1; /* the disk is the problem: the next row would fail too */
    job->written++;
    return 0;
}

int cli_store(int argc, char **argv) {
    if (argc < 2) return store_usage();
    const char *verb = argv[1], *store_path = DEFAULT_STORE, *arg = NULL, *out_path = NULL;
    int raw = 0;
    uint64_t project = 0;
    for (int i = 2; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "--store") == 0 && i + 1 < argc) store_path = argv[++i];
        else if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) out_path = argv[++i];
        else if (strcmp(argv[i], "--raw") == 0) raw = 1;
        else if (strcmp(argv[i], "--project") == 0) {
            const char *v = i + 1 < argc ? argv[i + 1] : NULL;
            errno = 0;
            if (!v || v[0] < '1' || v[0] > '9' || (project = strtoull(v, &end, 10)) == 0 || *end || errno)
                return cli_usage_error("store", "--project takes a project id, a number from 1 to %" PRIu64
                                       ", not %s%s%s", UINT64_MAX, v ? "'" : "", v ? v : "nothing", v ? "'" : "");
            i++;
        }
        else if (argv[i][0] != '-' && !arg) arg = argv[i];
        else return store_usage();
    }
    int is_ls = strcmp(verb, "ls") == 0, is_get = strcmp(verb, "get") == 0, is_export = strcmp(verb, "export") == 0;
    if (!(is_ls && !arg) && !((is_get || is_export) && arg)) return store_usage();
    tm_srv_store *store = NULL;
    tm_error err;
    if (tm_srv_store_open_readonly(store_path, &store, &err) != TM_OK) {
        fprintf(stderr, "tracemill store: %s\n", err.message);
        return EXIT_IO;
    }
    int rc = EXIT_OK;
    tm_status st = TM_OK;
    if (is_ls) {
        st = tm_srv_store_each_chunk(store, NULL, print_line, &project, &err);
    } else if (is_get) {
        /* ids are stored normalised; one that is not a UUID is looked up as given */
        char id[TM_SRV_UUID_HEX + 1];
        const char *key = tm_srv_uuid_normalize(arg, strlen(arg), id) ? id : arg;
        get_job job = {raw, out_path, project, 0, EXIT_OK, {0, 0}, 0};
        if (!project) st = tm_srv_store_each_chunk(store, key, count_projects, &job, &err);
        if (st == TM_OK && job.n_projects > 1) {
            fprintf(stderr,
                    "tracemill store: chunk_id %s is stored for more than one project (%" PRIu64 ", %" PRIu64
                    "): give --project ID\n",
                    arg, job.projects[0], job.projects[1]);
            rc = EXIT_USAGE;
        } else {
            if (st == TM_OK) st = tm_srv_store_each_chunk(store, key, write_chunk, &job, &err);
            if (st == TM_OK && !job.found) {
                fprintf(stderr, "tracemill store: no chunk with chunk_id %s%s in %s\n", arg,
                        project ? " for that project" : "", store_path);
                rc = EXIT_REJECTED;
            } else {
                rc = job.rc;
            }
        }
    } else {
        export_job job = {arg, project, 0, 0, EXIT_OK};
        if (mkdir(arg, 0755) != 0 && errno != EEXIST) {
            fprintf(stderr, "tracemill store: cannot create %s: %s\n", arg, strerror(errno));
            rc = EXIT_IO;
        } else {
            st = tm_srv_store_each_chunk(store, NULL, export_chunk, &job, &err);
            rc = job.rc;
            if (st == TM_OK && (rc == EXIT_OK || job.skipped))
                fprintf(stderr, "tracemill store: %zu chunks written to %s, %zu skipped\n", job.written, arg,
                        job.skipped);
        }
    }
    if (st != TM_OK) {
        fprintf(stderr, "tracemill store: %s\n", err.message);
        rc = EXIT_IO;
    }
    tm_srv_store_close(store);
    return rc;
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "serve") == 0) return cli_close_stdout(cli_serve(argc - 1, argv + 1));
    if (argc >= 2 && strcmp(argv[1], "store") == 0) return cli_close_stdout(cli_store(argc - 1, argv + 1));
    fputs("usage: tracemill-serve serve|store ... (run through `tracemill serve` / `tracemill store`)\n", stderr);
    return EXIT_USAGE;
}
