/*
 * metrics.c — the server's counters and latency histograms, rendered in
 * Prometheus' text exposition format for GET /metrics.
 *
 * Plain counters are C11 atomics (every request thread bumps them); the
 * labelled item counters, whose label values are static strings, sit in a
 * small table under one mutex.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* Upper bounds in seconds, Prometheus' default buckets plus finer ones
 * for conversions that take a millisecond. */
static const double bucket_bounds[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                       0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0};
#define N_BUCKETS (sizeof bucket_bounds / sizeof bucket_bounds[0])
#define MAX_ITEM_SERIES 64
#define N_STATUS_CLASSES 14 /* the statuses the server sends, and "other" */

typedef struct histogram {
    _Atomic uint64_t buckets[N_BUCKETS + 1]; /* the last is +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_ns;
} histogram;

typedef struct item_series {
    const char *type, *outcome;
    uint64_t count;
} item_series;

struct tm_srv_metrics {
    _Atomic uint64_t requests[N_STATUS_CLASSES];
    _Atomic uint64_t bytes_in;
    histogram request_seconds, conversion_seconds;
    pthread_mutex_t lock;
    item_series items[MAX_ITEM_SERIES];
    size_t n_items;
};

static const unsigned status_codes[N_STATUS_CLASSES - 1] = {200, 400, 401, 403, 404, 405, 408,
                                                            411, 413, 415, 429, 500, 503};

tm_srv_metrics *tm_srv_metrics_new(void) {
    tm_srv_metrics *m = calloc(1, sizeof *m);
    if (m && pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return NULL;
    }
    return m;
}

void tm_srv_metrics_free(tm_srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

static void observe(histogram *h, double seconds) {
    size_t b = 0;
    while (b < N_BUCKETS && seconds > bucket_bounds[b]) b++;
    atomic_fetch_add(&h->buckets[b], 1);
    atomic_fetch_add(&h->count, 1);
    atomic_fetch_add(&h->sum_ns, (uint64_t)(seconds * 1e9));
}

static size_t status_slot(unsigned status) {
    size_t i = 0;
    while (i < N_STATUS_CLASSES - 1 && status_codes[i] != status) i++;
    return i;
}

void tm_srv_metrics_request(tm_srv_metrics *m, unsigned http_status, uint64_t bytes_in, double seconds) {
    if (!m) return;
    atomic_fetch_add(&m->requests[status_slot(http_status)], 1);
    atomic_fetch_add(&m->bytes_in, bytes_in);
    observe(&m->request_seconds, seconds);
}

void tm_srv_metrics_conversion(tm_srv_metrics *m, double seconds) {
    if (m) observe(&m->conversion_seconds, seconds);
}

void tm_srv_metrics_item(tm_srv_metrics *m, const char *type, const char *outcome) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    size_t i = 0;
    while (i < m->n_items && (strcmp(m->items[i].type, type) != 0 || strcmp(m->items[i].outcome, outcome) != 0)) i++;
    if (i == m->n_items && m->n_items < MAX_ITEM_SERIES) m->items[m->n_items++] = (item_series){type, outcome, 0};
    if (i < m->n_items) m->items[i].count++;
    pthread_mutex_unlock(&m->lock);
}

static int printf_buf(tm_srv_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int printf_buf(tm_srv_buf *out, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof line) return -1;
    return tm_srv_buf_append(out, line, (size_t)n);
}

static int render_histogram(tm_srv_buf *out, const char *name, const char *help, histogram *h) {
    int rc = printf_buf(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= N_BUCKETS && !rc; b++) {
        cumulative += atomic_load(&h->buckets[b]);
        if (b < N_BUCKETS)
            rc = printf_buf(out, "%s_bucket{le=\"%g\"} %llu\n", name, bucket_bounds[b], (unsigned long long)cumulative);
        else
            rc = printf_buf(out, "%s_bucket{le=\"+Inf\"} %llu\n", name, (unsigned long long)cumulative);
    }
    if (!rc) rc = printf_buf(out, "%s_sum %.9f\n%s_count %llu\n", name, (double)atomic_load(&h->sum_ns) / 1e9, name,
                             (unsigned long long)atomic_load(&h->count));
    return rc;
}

int tm_srv_metrics_render(tm_srv_metrics *m, const tm_srv_gauges *g, tm_srv_buf *out) {
    int rc = printf_buf(out, "# HELP tracemill_requests_total Envelope and API requests by HTTP status.\n"
                             "# TYPE tracemill_requests_total counter\n");
    for (size_t i = 0; i < N_STATUS_CLASSES - 1 && !rc; i++)
        rc = printf_buf(out, "tracemill_requests_total{status=\"%u\"} %llu\n", status_codes[i],
                        (unsigned long long)atomic_load(&m->requests[i]));
    if (!rc)
        rc = printf_buf(out, "tracemill_requests_total{status=\"other\"} %llu\n",
                        (unsigned long long)atomic_load(&m->requests[N_STATUS_CLASSES - 1]));
    if (!rc) rc = printf_buf(out, "# HELP tracemill_items_total Envelope items by type and outcome (accepted, "
                                  "or Relay's reason).\n# TYPE tracemill_items_total counter\n");
    pthread_mutex_lock(&m->lock);
    for (size_t i = 0; i < m->n_items && !rc; i++)
        rc = printf_buf(out, "tracemill_items_total{type=\"%s\",outcome=\"%s\"} %llu\n", m->items[i].type,
                        m->items[i].outcome, (unsigned long long)m->items[i].count);
    pthread_mutex_unlock(&m->lock);
    if (!rc) rc = printf_buf(out, "# HELP tracemill_bytes_in_total Request body bytes received (encoded).\n"
                                  "# TYPE tracemill_bytes_in_total counter\ntracemill_bytes_in_total %llu\n",
                             (unsigned long long)atomic_load(&m->bytes_in));
    if (!rc) rc = render_histogram(out, "tracemill_conversion_seconds", "Time to convert one Perfetto chunk.",
                                   &m->conversion_seconds);
    if (!rc) rc = render_histogram(out, "tracemill_request_seconds",
                                   "End-to-end request time, body received to response queued.", &m->request_seconds);
    if (!rc)
        rc = printf_buf(out,
                        "# HELP tracemill_requests_in_flight Envelope requests being received or processed.\n"
                        "# TYPE tracemill_requests_in_flight gauge\ntracemill_requests_in_flight %llu\n"
                        "# HELP tracemill_kafka_queue_depth Messages produced and not yet acknowledged.\n"
                        "# TYPE tracemill_kafka_queue_depth gauge\ntracemill_kafka_queue_depth %llu\n"
                        "# HELP tracemill_store_backlog Submissions waiting for the local store's commit.\n"
                        "# TYPE tracemill_store_backlog gauge\ntracemill_store_backlog %llu\n"
                        "# HELP tracemill_spooled Kafka messages spooled in the local store.\n"
                        "# TYPE tracemill_spooled gauge\ntracemill_spooled %llu\n",
                        (unsigned long long)g->requests_in_flight, (unsigned long long)g->kafka_queue_depth,
                        (unsigned long long)g->store_backlog,
                        (unsigned long long)g->spooled);
    if (!rc)
        rc = printf_buf(out,
                        "# HELP tracemill_chunks_duplicate_total Chunks the local store already held (same project "
                        "and chunk_id): acknowledged, not stored again.\n"
                        "# TYPE tracemill_chunks_duplicate_total counter\ntracemill_chunks_duplicate_total %llu\n",
                        (unsigned long long)g->chunks_duplicate);
    return rc;
}
