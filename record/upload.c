/*
 * upload.c — continuous profiling upload: each finished chunk becomes a
 * Sentry envelope with one compound profile_chunk item
 * ([JSON metadata][Perfetto bytes], meta_length, content_type
 * application/x-perfetto-trace, platform native), as Sentry's Android SDK
 * sends Perfetto chunks. Envelopes go first into a bounded queue directory
 * (one file per chunk, oldest dropped and counted when over the bound), then
 * an uploader thread POSTs them with libcurl to DSN's
 * /api/PROJECT/envelope/, retrying network errors, 5xx and 429 with
 * exponential backoff (honouring Retry-After). Files still queued at the end
 * are sent by the next run that uses the same queue directory.
 *
 * The chunk callback runs on the recorder's collector thread and only
 * writes a file; no thread of the sampled program ever waits on the network.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define CURL_DISABLE_TYPECHECK /* the calls below go through function pointers */
#include <curl/curl.h>
#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/base.h" /* tm_fail */
#include "record.h"

/* libcurl is loaded when an upload starts, not linked: it brings some 30
 * libraries whose loading would cost every recorded program ~10 ms of start
 * even when nothing is uploaded. Its handle stays loaded for the process. */
static struct {
    CURLcode (*global_init)(long);
    void (*global_cleanup)(void);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    void (*easy_reset)(CURL *);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    CURLcode (*easy_perform)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
} curl_api;
static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_available;

static void load_curl(void) {
    void *h = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!h) return;
#define LOAD(field, name) *(void **)&curl_api.field = dlsym(h, name)
    LOAD(global_init, "curl_global_init");
    LOAD(global_cleanup, "curl_global_cleanup");
    LOAD(easy_init, "curl_easy_init");
    LOAD(easy_cleanup, "curl_easy_cleanup");
    LOAD(easy_reset, "curl_easy_reset");
    LOAD(easy_setopt, "curl_easy_setopt");
    LOAD(easy_getinfo, "curl_easy_getinfo");
    LOAD(easy_perform, "curl_easy_perform");
    LOAD(easy_strerror, "curl_easy_strerror");
    LOAD(slist_append, "curl_slist_append");
    LOAD(slist_free_all, "curl_slist_free_all");
#undef LOAD
    curl_available = curl_api.global_init && curl_api.global_cleanup && curl_api.easy_init && curl_api.easy_cleanup &&
                     curl_api.easy_reset && curl_api.easy_setopt && curl_api.easy_getinfo && curl_api.easy_perform &&
                     curl_api.easy_strerror && curl_api.slist_append && curl_api.slist_free_all;
}

#define curl_global_init (*curl_api.global_init)
#define curl_global_cleanup (*curl_api.global_cleanup)
#define curl_easy_init (*curl_api.easy_init)
#define curl_easy_cleanup (*curl_api.easy_cleanup)
#define curl_easy_reset (*curl_api.easy_reset)
#undef curl_easy_setopt  /* curl.h defines these two as macros of themselves */
#undef curl_easy_getinfo
#define curl_easy_setopt (*curl_api.easy_setopt)
#define curl_easy_getinfo (*curl_api.easy_getinfo)
#define curl_easy_perform (*curl_api.easy_perform)
#define curl_easy_strerror (*curl_api.easy_strerror)
#define curl_slist_append (*curl_api.slist_append)
#define curl_slist_free_all (*curl_api.slist_free_all)

#define QUEUE_SUFFIX ".envelope"
#define DEFAULT_QUEUE_MAX 100
#define DEFAULT_FLUSH_MS 5000
#define FIRST_BACKOFF_MS 500
#define MAX_BACKOFF_MS 60000

struct tmr_uploader {
    char *url, *auth, *queue_dir, *release, *environment;
    char profiler_id[33];
    uint32_t queue_max, flush_ms;
    uint64_t queue_seq; /* orders queue file names within this run */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int closing;               /* under lock: close asked, flush until deadline */
    uint64_t close_deadline_ms; /* CLOCK_MONOTONIC */
    tmr_upload_stats stats;    /* under lock */
};

static uint64_t now_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* 32 lowercase hex digits of fresh randomness (a UUID's hex form). */
static int random_hex_id(char out[33]) {
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b) return 0;
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* UUID version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    return 1;
}

/* ---- DSN ------------------------------------------------------------------ */

tm_status tmr_dsn_parse(const char *dsn, tmr_dsn *out, tm_error *err) {
    memset(out, 0, sizeof *out);
    const char *scheme_end = dsn ? strstr(dsn, "://") : NULL;
    if (!scheme_end || !((scheme_end - dsn == 4 && strncmp(dsn, "http", 4) == 0) ||
                         (scheme_end - dsn == 5 && strncmp(dsn, "https", 5) == 0)))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "upload: DSN must start with http:// or https://");
    const char *key = scheme_end + 3, *at = strchr(key, '@');
    const char *host = at ? at + 1 : NULL, *slash = host ? strchr(host, '/') : NULL;
    if (!at || at == key || (slash && at > slash))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "upload: DSN has no public key (http://KEY@HOST/PROJECT)");
    if (!slash || slash == host) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "upload: DSN has no host or project");
    const char *project = strrchr(slash, '/') + 1;
    size_t plen = strlen(project);
    if (plen == 0 || strspn(project, "0123456789") != plen)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
            "upload: DSN project must be a number (http://KEY@HOST/PROJECT)");
    const char *colon = memchr(key, ':', (size_t)(at - key)); /* KEY:SECRET, the secret is legacy */
    size_t key_len = (size_t)((colon ? colon : at) - key);
    /* Everything between the host and the project is a path prefix
     * (Sentry allows DSNs like http://KEY@HOST/prefix/PROJECT). */
    if (asprintf(&out->key, "%.*s", (int)key_len, key) < 0 ||
        asprintf(&out->envelope_url, "%.*s%.*s/api/%s/envelope/", (int)(scheme_end + 3 - dsn), dsn,
                 (int)(project - 1 - host), host, project) < 0) {
        tmr_dsn_free(out);
        return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "upload: out of memory");
    }
    out->project_id = strtoull(project, NULL, 10);
    return TM_OK;
}

void tmr_dsn_free(tmr_dsn *d) {
    free(d->key);
    free(d->envelope_url);
    memset(d, 0, sizeof *d);
}

/* ---- envelopes ------------------------------------------------------------ */

/* s as a JSON string literal (with quotes); NULL on allocation failure. */
static char *json_string(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n * 6 + 3), *p = out;
    if (!out) return NULL;
    *p++ = '"';
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c == '"' || *c == '\\') {
            *p++ = '\\';
            *p++ = (char)*c;
        } else if (*c < 0x20) {
            p += snprintf(p, 7, "\\u%04x", *c);
        } else {
            *p++ = (char)*c;
        }
    }
    *p++ = '"';
    *p = 0;
    return out;
}

int tmr_upload_envelope(const char *profiler_id, const char *chunk_id, const char *release, const char *environment,
                        uint32_t index, double timestamp, const void *trace, size_t len, uint8_t **out,
                        size_t *out_len) {
    char *rel = release ? json_string(release) : NULL, *env = environment ? json_string(environment) : NULL;
    char *meta = NULL, *head = NULL;
    int ok = (!release || rel) && (!environment || env);
    if (ok)
        ok = asprintf(&meta,
                      "{\"version\":\"2\",\"content_type\":\"perfetto\",\"chunk_id\":\"%s\",\"profiler_id\":\"%s\","
                      "\"platform\":\"native\"%s%s%s%s,\"client_sdk\":{\"name\":\"tracemill.record\",\"version\":"
                      "\"" TM_VERSION_STRING "\"},\"timestamp\":%.6f}",
                      chunk_id, profiler_id, rel ? ",\"release\":" : "", rel ? rel : "",
                      env ? ",\"environment\":" : "", env ? env : "", timestamp) >= 0;
    size_t meta_len = ok ? strlen(meta) : 0;
    if (ok)
        ok = asprintf(&head,
                      "{\"event_id\":\"%s\",\"sdk\":{\"name\":\"tracemill.record\",\"version\":\"" TM_VERSION_STRING
                      "\"}}\n{\"type\":\"profile_chunk\",\"content_type\":\"application/x-perfetto-trace\","
                      "\"filename\":\"chunk-%u.pftrace\",\"platform\":\"native\",\"meta_length\":%zu,\"length\":%zu}\n",
                      chunk_id, index, meta_len, meta_len + len) >= 0;
    size_t head_len = ok ? strlen(head) : 0;
    uint8_t *e = ok ? malloc(head_len + meta_len + len + 1) : NULL;
    if (e) {
        memcpy(e, head, head_len);
        memcpy(e + head_len, meta, meta_len);
        if (len) memcpy(e + head_len + meta_len, trace, len);
        e[head_len + meta_len + len] = '\n';
        *out = e;
        *out_len = head_len + meta_len + len + 1;
    }
    free(rel);
    free(env);
    free(meta);
    free(head);
    return e != NULL;
}

/* ---- the queue directory -------------------------------------------------- */

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Queued envelope file names, oldest first (names sort by creation time). */
static char **queue_list(const char *dir, size_t *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    size_t cap = 0;
    struct dirent *e;
    size_t sl = strlen(QUEUE_SUFFIX);
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l <= sl || strcmp(e->d_name + l - sl, QUEUE_SUFFIX) != 0) continue;
        if (tmr_grow((void **)&names, &cap, sizeof *names, *n + 1) || !(names[*n] = strdup(e->d_name))) break;
        (*n)++;
    }
    closedir(d);
    if (names) qsort(names, *n, sizeof *names, by_name);
    return names;
}

static void names_free(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

static void unlink_queued(const tmr_uploader *u, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", u->queue_dir, name);
    unlink(path);
}

/* Drops the oldest files beyond the bound; returns how many. */
static uint32_t queue_trim(tmr_uploader *u) {
    size_t n;
    char **names = queue_list(u->queue_dir, &n);
    uint32_t dropped = 0;
    for (size_t i = 0; n > u->queue_max && i < n - u->queue_max; i++, dropped++) unlink_queued(u, names[i]);
    names_free(names, n);
    return dropped;
}

int tmr_upload_chunk(void *ctx, uint32_t index, const void *data, size_t len) {
    tmr_uploader *u = ctx;
    char chunk_id[33];
    uint8_t *env = NULL;
    size_t env_len = 0;
    double ts = (double)now_ms(CLOCK_REALTIME) / 1000.0;
    if (!random_hex_id(chunk_id) ||
        !tmr_upload_envelope(u->profiler_id, chunk_id, u->release, u->environment, index, ts, data, len, &env,
                             &env_len))
        return -1;
    /* Names sort oldest first across runs: wall-clock ms, then this run's
     * counter, then the chunk id. Written under a dot name and renamed, so
     * the uploader never sees half a file. */
    char tmp[4096], path[4096];
    pthread_mutex_lock(&u->lock);
    uint64_t seq = u->queue_seq++;
    pthread_mutex_unlock(&u->lock);
    snprintf(path, sizeof path, "%s/%015llu-%06llu-%s" QUEUE_SUFFIX, u->queue_dir,
             (unsigned long long)now_ms(CLOCK_REALTIME), (unsigned long long)seq, chunk_id);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", u->queue_dir, chunk_id);
    tmr_own_fd own;
    int ok = tmr_own_open(&own, tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644) == 0;
    for (size_t off = 0; ok && off < env_len;) {
        ok = tmr_own_still(&own); /* the program's descriptor now: nothing goes into its file */
        ssize_t w = ok ? write(own.fd, env + off, env_len - off) : -1;
        if (ok && w < 0 && errno == EINTR) continue;
        ok = w > 0;
        off += ok ? (size_t)w : 0;
    }
    if (own.fd >= 0 && tmr_own_close(&own) != 0) ok = 0;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) unlink(tmp);
    free(env);
    uint32_t dropped = ok ? queue_trim(u) : 0;
    pthread_mutex_lock(&u->lock);
    if (ok) u->stats.queued++;
    u->stats.dropped += dropped;
    pthread_cond_signal(&u->wake);
    pthread_mutex_unlock(&u->lock);
    return ok ? 0 : -1;
}

/* ---- sending -------------------------------------------------------------- */

/* The start of an answer's body, for the report (the rest is discarded). */
typedef struct answer {
    char text[112];
    size_t len;
} answer;

static size_t keep_body_start(char *p, size_t size, size_t n, void *ctx) {
    answer *a = ctx;
    for (size_t i = 0; i < size * n && a->len + 1 < sizeof a->text; i++)
        if (p[i] != '\n' && p[i] != '\r') a->text[a->len++] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
    a->text[a->len] = 0;
    return size * n;
}

typedef enum send_result { SENT, REJECTED, RETRY } send_result;

/* A request begun before close (its timeout 30 s) must not hold the exit
 * past the flush deadline: libcurl calls this at least once a second. */
static int abort_past_close(void *ctx, curl_off_t dl_total, curl_off_t dl, curl_off_t ul_total, curl_off_t ul) {
    (void)dl_total, (void)dl, (void)ul_total, (void)ul;
    tmr_uploader *u = ctx;
    pthread_mutex_lock(&u->lock);
    int stop = u->closing && now_ms(CLOCK_MONOTONIC) >= u->close_deadline_ms;
    pthread_mutex_unlock(&u->lock);
    return stop;
}

/* POSTs one envelope; on RETRY, *retry_after_ms is the server's Retry-After
 * (0 when none). why: what went wrong when not SENT ("HTTP 403: body
 * start" or libcurl's error). */
static send_result send_envelope(tmr_uploader *u, CURL *curl, const uint8_t *body, size_t len, long timeout_ms,
                                 uint64_t *retry_after_ms, char *why, size_t why_cap) {
    *retry_after_ms = 0;
    snprintf(why, why_cap, "out of memory");
    answer a = {{0}, 0};
    struct curl_slist *h = curl_slist_append(NULL, u->auth);
    struct curl_slist *h2 = h ? curl_slist_append(h, "Content-Type: application/x-sentry-envelope") : NULL;
    if (!h2) {
        curl_slist_free_all(h);
        return RETRY;
    }
    h = h2;
    curl_easy_reset(curl);
    curl_easy_setopt(curl, CURLOPT_URL, u->url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, (const char *)body);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, keep_body_start);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, abort_past_close);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, u);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_off_t retry_after = 0;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
        curl_easy_getinfo(curl, CURLINFO_RETRY_AFTER, &retry_after);
    }
    curl_slist_free_all(h);
    if (rc != CURLE_OK) snprintf(why, why_cap, "%s", curl_easy_strerror(rc));
    else snprintf(why, why_cap, "HTTP %ld%s%s", status, a.len ? ": " : "", a.text);
    if (rc != CURLE_OK || status >= 500 || status == 429) {
        if (retry_after > 0) *retry_after_ms = (uint64_t)retry_after * 1000u;
        return RETRY;
    }
    /* Any other 4xx will not get better by sending the same bytes again. */
    return status >= 200 && status < 300 ? SENT : REJECTED;
}

static uint8_t *read_queued(const tmr_uploader *u, const char *name, size_t *len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", u->queue_dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    uint8_t *data = NULL;
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (size > 0 && fseek(f, 0, SEEK_SET) == 0 && (data = malloc((size_t)size))) {
        if (fread(data, 1, (size_t)size, f) != (size_t)size) {
            free(data);
            data = NULL;
        }
    }
    fclose(f);
    *len = data ? (size_t)size : 0;
    return data;
}

/* Waits until woken, the deadline (CLOCK_MONOTONIC ms; 0: none) or close. */
static void wait_until(tmr_uploader *u, uint64_t deadline_ms) {
    while (!u->closing) {
        uint64_t now = now_ms(CLOCK_MONOTONIC);
        if (deadline_ms && now >= deadline_ms) return;
        if (!deadline_ms) {
            pthread_cond_wait(&u->wake, &u->lock);
            return;
        }
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t wait_ms = deadline_ms - now;
        ts.tv_sec += (time_t)(wait_ms / 1000u);
        ts.tv_nsec += (long)(wait_ms % 1000u) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        if (pthread_cond_timedwait(&u->wake, &u->lock, &ts) == 0) return;
    }
}

static void *uploader_main(void *arg) {
    tmr_uploader *u = arg;
    tmr_own_descriptor_table(); /* its spool reads, sockets and libcurl's own descriptors */
    if (tmr_heap_ignore_this_thread) tmr_heap_ignore_this_thread();
    CURL *curl = curl_easy_init();
    uint64_t backoff_ms = 0, next_try_ms = 0;
    pthread_mutex_lock(&u->lock);
    for (;;) {
        uint64_t now = now_ms(CLOCK_MONOTONIC);
        if (u->closing && now >= u->close_deadline_ms) break;
        if (next_try_ms > now) {
            /* Backing off: while closing, never past the close deadline. */
            uint64_t until = u->closing && u->close_deadline_ms < next_try_ms ? u->close_deadline_ms : next_try_ms;
            if (u->closing) {
                pthread_mutex_unlock(&u->lock);
                struct timespec ts = {(time_t)((until - now) / 1000u), (long)((until - now) % 1000u) * 1000000L};
                nanosleep(&ts, NULL);
                pthread_mutex_lock(&u->lock);
            } else {
                wait_until(u, until);
            }
            continue;
        }
        pthread_mutex_unlock(&u->lock);
        size_t n;
        char **names = queue_list(u->queue_dir, &n);
        int progressed = 0, retry = 0;
        uint64_t retry_after = 0;
        for (size_t i = 0; i < n && curl && !retry; i++) {
            size_t len;
            uint8_t *body = read_queued(u, names[i], &len);
            if (!body) continue; /* dropped by the bound meanwhile */
            /* While closing, a request may not outlast the flush deadline. */
            pthread_mutex_lock(&u->lock);
            uint64_t t = now_ms(CLOCK_MONOTONIC);
            long timeout_ms = !u->closing ? 30000L : u->close_deadline_ms > t ? (long)(u->close_deadline_ms - t) : 1L;
            pthread_mutex_unlock(&u->lock);
            char why[sizeof u->stats.last_failure];
            send_result r = send_envelope(u, curl, body, len, timeout_ms, &retry_after, why, sizeof why);
            free(body);
            pthread_mutex_lock(&u->lock);
            if (r == RETRY) {
                u->stats.failed_attempts++;
                memcpy(u->stats.last_failure, why, sizeof why);
                retry = 1;
            } else {
                unlink_queued(u, names[i]);
                if (r == SENT) u->stats.sent++;
                else u->stats.rejected++, memcpy(u->stats.last_rejection, why, sizeof why);
                progressed = 1;
            }
            int stop_now = u->closing && now_ms(CLOCK_MONOTONIC) >= u->close_deadline_ms;
            pthread_mutex_unlock(&u->lock);
            if (stop_now) break;
        }
        names_free(names, n);
        pthread_mutex_lock(&u->lock);
        if (retry) {
            backoff_ms = backoff_ms ? backoff_ms * 2 : FIRST_BACKOFF_MS;
            if (backoff_ms > MAX_BACKOFF_MS) backoff_ms = MAX_BACKOFF_MS;
            next_try_ms = now_ms(CLOCK_MONOTONIC) + (retry_after ? retry_after : backoff_ms);
        } else {
            if (progressed) backoff_ms = 0;
            if (u->closing) break; /* the queue is empty */
            wait_until(u, 0);
        }
    }
    pthread_mutex_unlock(&u->lock);
    curl_easy_cleanup(curl);
    return NULL;
}

/* ---- lifetime ------------------------------------------------------------- */

/* The strings and the struct; NULL is a no-op. */
static void uploader_free(tmr_uploader *u) {
    if (!u) return;
    free(u->url);
    free(u->auth);
    free(u->queue_dir);
    free(u->release);
    free(u->environment);
    free(u);
}

tmr_uploader *tmr_upload_new(const tmr_upload_opts *o, tm_error *err) {
    tmr_dsn dsn;
    if (tmr_dsn_parse(o->dsn, &dsn, err) != TM_OK) return NULL;
    if (!o->queue_dir || !*o->queue_dir) {
        tmr_dsn_free(&dsn);
        tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "upload: a queue directory is required");
        return NULL;
    }
    if (mkdir(o->queue_dir, 0755) != 0 && errno != EEXIST) {
        tm_fail(err, TM_ERR_IO, 0, NULL,
            "upload: cannot create the queue directory %s: %s", o->queue_dir, strerror(errno));
        tmr_dsn_free(&dsn);
        return NULL;
    }
    pthread_once(&curl_once, load_curl);
    if (!curl_available) {
        tmr_dsn_free(&dsn);
        tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL, "upload: libcurl.so.4 cannot be loaded (install libcurl4)");
        return NULL;
    }
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        tmr_dsn_free(&dsn);
        tm_fail(err, TM_ERR_IO, 0, NULL, "upload: libcurl failed to initialise");
        return NULL;
    }
    tmr_uploader *u = calloc(1, sizeof *u);
    int ok = u && random_hex_id(u->profiler_id);
    if (ok) {
        u->url = dsn.envelope_url;
        dsn.envelope_url = NULL;
        u->queue_max = o->queue_max ? o->queue_max : DEFAULT_QUEUE_MAX;
        u->flush_ms = o->flush_timeout_ms ? o->flush_timeout_ms : DEFAULT_FLUSH_MS;
        ok = asprintf(&u->auth, "X-Sentry-Auth: Sentry sentry_version=7, sentry_key=%s, sentry_client=tracemill.record/"
                      TM_VERSION_STRING, dsn.key) >= 0;
        if (!ok) u->auth = NULL;
        ok = ok && (u->queue_dir = strdup(o->queue_dir)) && (!o->release || (u->release = strdup(o->release))) &&
             (!o->environment || (u->environment = strdup(o->environment)));
    }
    tmr_dsn_free(&dsn);
    pthread_condattr_t ca;
    if (ok) {
        pthread_mutex_init(&u->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&u->wake, &ca);
        pthread_condattr_destroy(&ca);
        /* The uploader and the threads libcurl starts do not belong in the
         * profile: they never take the recorder's SIGPROF. */
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGPROF);
        pthread_sigmask(SIG_BLOCK, &block, &old);
        ok = pthread_create(&u->thread, NULL, uploader_main, u) == 0;
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (!ok) {
            pthread_cond_destroy(&u->wake);
            pthread_mutex_destroy(&u->lock);
        }
    }
    if (!ok) {
        uploader_free(u);
        curl_global_cleanup();
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "upload: cannot start the uploader");
        return NULL;
    }
    pthread_mutex_lock(&u->lock);
    u->stats.dropped += queue_trim(u);
    pthread_mutex_unlock(&u->lock);
    return u;
}

const char *tmr_upload_profiler_id(const tmr_uploader *u) { return u->profiler_id; }

void tmr_upload_close(tmr_uploader *u, tmr_upload_stats *out) {
    if (!u) return;
    pthread_mutex_lock(&u->lock);
    u->closing = 1;
    u->close_deadline_ms = now_ms(CLOCK_MONOTONIC) + u->flush_ms;
    pthread_cond_signal(&u->wake);
    pthread_mutex_unlock(&u->lock);
    pthread_join(u->thread, NULL);
    size_t left = 0;
    char **names = queue_list(u->queue_dir, &left);
    names_free(names, left);
    u->stats.left = left;
    if (out) *out = u->stats;
    pthread_cond_destroy(&u->wake);
    pthread_mutex_destroy(&u->lock);
    uploader_free(u);
    curl_global_cleanup();
}
