/*
 * ratelimit.c — per-project token buckets for the chunk rate limit
 * (projects[].rate_limit, chunks per second; 0 = unlimited).
 *
 * One bucket per project of the config, indexed like cfg->projects, holding
 * up to max(1, rate) tokens and refilled continuously at rate tokens per
 * second from the caller's CLOCK_MONOTONIC readings (so tests can pass
 * explicit times). A bucket starts full at its first use. The rates are
 * copied at creation: the limiter does not look at the config again.
 *
 * Thread-safe: one mutex guards all buckets; a take is a few arithmetic
 * operations, so contention stays negligible next to a request's parsing.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "server.h"

/* Absorbs rounding of the refill arithmetic (a millionth of a token). */
#define EPS 1e-6

typedef struct bucket {
    double rate;     /* tokens per second; 0 = unlimited */
    double capacity; /* max(1, rate) */
    double tokens;
    uint64_t last_ns; /* time of the last refill */
    int started;
} bucket;

struct tm_srv_ratelimit {
    pthread_mutex_t mu;
    size_t n;
    bucket b[];
};

tm_srv_ratelimit *tm_srv_ratelimit_new(const tm_srv_config *cfg) {
    size_t n = cfg ? cfg->n_projects : 0;
    tm_srv_ratelimit *rl = malloc(sizeof *rl + n * sizeof rl->b[0]);
    if (!rl) return NULL;
    if (pthread_mutex_init(&rl->mu, NULL) != 0) {
        free(rl);
        return NULL;
    }
    rl->n = n;
    for (size_t i = 0; i < n; i++) {
        double rate = cfg->projects[i].rate_limit > 0 ? cfg->projects[i].rate_limit : 0;
        rl->b[i] = (bucket){.rate = rate, .capacity = rate > 1 ? rate : 1};
    }
    return rl;
}

/* Whole seconds (at least 1) until need tokens accrue at rate. */
static uint32_t seconds_for(double need, double rate) {
    double s = ceil(need / rate - EPS);
    if (s < 1) return 1;
    return s >= (double)UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

int tm_srv_ratelimit_take(tm_srv_ratelimit *rl, size_t p, uint32_t n, uint64_t now_ns,
                          uint32_t *retry_after_s) {
    /* No limiter or a project it does not know: nothing to limit. */
    if (!rl || p >= rl->n || n == 0) return 1;
    bucket *b = &rl->b[p];
    if (b->rate == 0) return 1; /* immutable after new: no lock needed */
    int granted;
    uint32_t retry = 0;
    pthread_mutex_lock(&rl->mu);
    if (!b->started) {
        b->started = 1;
        b->tokens = b->capacity;
        b->last_ns = now_ns;
    } else if (now_ns > b->last_ns) { /* readings from other threads may lag */
        b->tokens += (double)(now_ns - b->last_ns) * b->rate / 1e9;
        if (b->tokens > b->capacity) b->tokens = b->capacity;
        b->last_ns = now_ns;
    }
    /* More than a burst at once would never fit: it takes a full bucket and
     * leaves the rest owed (the tokens below 0), which the refill pays
     * before anything else passes, so the rate holds on average. */
    double need = (double)n > b->capacity ? b->capacity : (double)n;
    if (b->tokens + EPS >= need) {
        granted = 1;
        b->tokens -= (double)n;
        if (b->tokens < 0 && need == (double)n) b->tokens = 0; /* rounding, not a debt */
    } else {
        granted = 0;
        retry = seconds_for(need - b->tokens, b->rate);
    }
    pthread_mutex_unlock(&rl->mu);
    if (!granted && retry_after_s) *retry_after_s = retry;
    return granted;
}

void tm_srv_ratelimit_free(tm_srv_ratelimit *rl) {
    if (!rl) return;
    pthread_mutex_destroy(&rl->mu);
    free(rl);
}
