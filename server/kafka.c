/*
 * kafka.c — the librdkafka producer behind `tracemill serve` (server.h,
 * "Kafka"): acks=all with idempotence, a spool in the local store for what
 * the brokers do not acknowledge within delivery_timeout_ms, and a replayer
 * that drains that spool in order once a broker answers again.
 *
 * Threads: HTTP threads call tm_srv_kafka_send concurrently; a poll thread
 * serves delivery reports (they complete per-call tickets); a replay thread
 * drains the spool. One mutex guards the shared state; nothing blocking (a
 * store commit, a produce) runs under it.
 *
 * Modes: "direct" produces and waits for the delivery reports; "spooling"
 * (entered on any failed delivery, or at start with a non-empty spool)
 * writes every new record to the spool so that requests need not each wait
 * for a timeout while the brokers are down, and so that spooled records
 * keep their order. Only the replayer leaves spooling, when the spool is
 * empty and no spool write is under way.
 *
 * Delivery is at least once: a record whose delivery failed but may have
 * been written (POSSIBLY_PERSISTED, e.g. a timed-out in-flight request) is
 * spooled and sent again, which may duplicate it; with the idempotent
 * producer this is rare, and losing a record would be worse. Records the
 * replayer sees acknowledged behind a failed one are remembered and not
 * sent again while the process lives.
 *
 * Not handled here: a fatal producer error (rd_kafka_fatal_error) needs a
 * new producer; a record the brokers reject permanently (e.g. larger than
 * the broker's message.max.bytes) keeps the spool from draining until the
 * configuration is fixed — nothing is dropped. librdkafka's own log lines
 * are discarded, as server/ code never prints.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "server.h"

enum {
    REPLAY_BATCH = 256,      /* spooled records produced per replay round */
    REPLAY_IDLE_MS = 200,    /* replayer's wake-up period while spooling */
    BACKOFF_MIN_MS = 500,    /* after a failed replay round, doubling */
    BACKOFF_MAX_MS = 5000,
    POLL_MS = 100,           /* poll thread's rd_kafka_poll timeout */
    MSG_OVERHEAD = 128       /* record framing and the project_id header */
};

/* One send (or replay round) waiting for its delivery reports. */
typedef struct ticket {
    pthread_cond_t done;
    size_t pending; /* delivery reports still to come; under k->mu */
} ticket;

/* A produced message's outcome; the message's opaque points here. */
typedef struct slot {
    ticket *t;
    rd_kafka_resp_err_t err;
    rd_kafka_msg_status_t status;
} slot;

struct tm_srv_kafka {
    rd_kafka_t *rk;
    tm_srv_store *store;
    char *profiles_topic, *outcomes_topic;
    uint32_t timeout_ms;
    size_t max_value; /* largest value the producer accepts */

    pthread_mutex_t mu;
    pthread_cond_t wake; /* the replayer: new spooled records or stop */
    int spooling;        /* new records go to the spool */
    int stop;            /* free() began: spool everything, replayer ends */
    size_t spool_writers;/* spool writes under way (not yet committed) */
    size_t active;       /* sends under way */

    atomic_int stop_poll;
    _Atomic uint64_t in_flight; /* produced, no delivery report yet */
    pthread_t poll_thread, replay_thread;
    int have_poll, have_replay;

    /* The replayer's own state (its thread only). */
    tm_srv_spooled batch[REPLAY_BATCH];
    slot batch_slots[REPLAY_BATCH];
    int64_t acked[REPLAY_BATCH]; /* acknowledged behind a failed record, ascending */
    size_t n_acked;
};

static void quiet_log(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk, (void)level, (void)fac, (void)buf;
}

/* Runs on the thread that polls (the poll thread, or free()'s flush). */
static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    tm_srv_kafka *k = opaque;
    slot *s = m->_private;
    atomic_fetch_sub(&k->in_flight, 1);
    pthread_mutex_lock(&k->mu);
    s->err = m->err;
    s->status = rd_kafka_message_status(m);
    if (--s->t->pending == 0) pthread_cond_signal(&s->t->done);
    pthread_mutex_unlock(&k->mu);
}

static void *poll_main(void *arg) {
    tm_srv_kafka *k = arg;
    pthread_setname_np(pthread_self(), "tm-kafka-poll");
    while (!atomic_load(&k->stop_poll)) rd_kafka_poll(k->rk, POLL_MS);
    return NULL;
}

/* Hands one message to librdkafka, not copied: librdkafka reads value
 * until the message's delivery report, and every caller waits for all its
 * reports (await) before the value is freed. Its report completes *s. A
 * chunk's key is its chunk_id: consumers deduplicate by it (delivery is at
 * least once), and copies of one chunk land in one partition. */
static rd_kafka_resp_err_t produce(tm_srv_kafka *k, tm_srv_record_kind kind, uint64_t project_id,
                                   tm_srv_view chunk_id, const uint8_t *value, size_t len, slot *s) {
    char pid[24];
    int pid_len = snprintf(pid, sizeof pid, "%" PRIu64, project_id);
    rd_kafka_vu_t vu[7];
    vu[0].vtype = RD_KAFKA_VTYPE_TOPIC;
    vu[0].u.cstr = kind == TM_SRV_RECORD_OUTCOME ? k->outcomes_topic : k->profiles_topic;
    vu[1].vtype = RD_KAFKA_VTYPE_PARTITION;
    vu[1].u.i32 = RD_KAFKA_PARTITION_UA;
    vu[2].vtype = RD_KAFKA_VTYPE_MSGFLAGS;
    vu[2].u.i = 0; /* neither F_COPY nor F_FREE: the caller keeps value alive (above) */
    vu[3].vtype = RD_KAFKA_VTYPE_VALUE;
    vu[3].u.mem.ptr = (void *)value;
    vu[3].u.mem.size = len;
    vu[4].vtype = RD_KAFKA_VTYPE_HEADER;
    vu[4].u.header.name = "project_id";
    vu[4].u.header.val = pid;
    vu[4].u.header.size = pid_len;
    vu[5].vtype = RD_KAFKA_VTYPE_OPAQUE;
    vu[5].u.ptr = s;
    vu[6].vtype = RD_KAFKA_VTYPE_KEY;
    vu[6].u.mem.ptr = (void *)chunk_id.ptr;
    vu[6].u.mem.size = chunk_id.len;
    const size_t n_vu = kind == TM_SRV_RECORD_CHUNK && chunk_id.ptr ? 7 : 6;
    atomic_fetch_add(&k->in_flight, 1);
    rd_kafka_error_t *e = rd_kafka_produceva(k->rk, vu, n_vu);
    if (!e) return RD_KAFKA_RESP_ERR_NO_ERROR;
    atomic_fetch_sub(&k->in_flight, 1);
    rd_kafka_resp_err_t code = rd_kafka_error_code(e);
    rd_kafka_error_destroy(e);
    return code;
}

/* A message produce() refused never reaches a broker. */
static void refuse(slot *s, rd_kafka_resp_err_t err) {
    s->err = err;
    s->status = RD_KAFKA_MSG_STATUS_NOT_PERSISTED;
}

/* Waits until every report of t has arrived, after produce() refused
 * `refused` of its messages. */
static void await(tm_srv_kafka *k, ticket *t, size_t refused) {
    pthread_mutex_lock(&k->mu);
    t->pending -= refused;
    while (t->pending) pthread_cond_wait(&t->done, &k->mu);
    pthread_mutex_unlock(&k->mu);
}

/* Spools recs; the caller has counted itself in spool_writers. */
static tm_status spool_put(tm_srv_kafka *k, const tm_srv_record *recs, size_t n, tm_error *err) {
    tm_status st = tm_srv_store_put(k->store, recs, n, 1, err);
    pthread_mutex_lock(&k->mu);
    k->spool_writers--;
    pthread_cond_signal(&k->wake);
    pthread_mutex_unlock(&k->mu);
    return st;
}

static tm_status send_direct(tm_srv_kafka *k, const tm_srv_record *recs, size_t n, tm_error *err) {
    /* Allocated before producing, so that nothing can fail between a
     * failed delivery and spooling it. */
    slot *slots = calloc(n, sizeof *slots);
    tm_srv_record *failed = malloc(n * sizeof *failed);
    if (!slots || !failed) {
        free(slots);
        free(failed);
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "kafka: out of memory for %zu records", n);
    }
    ticket t = {.pending = n};
    pthread_cond_init(&t.done, NULL);
    size_t refused = 0;
    for (size_t i = 0; i < n; i++) {
        slots[i].t = &t;
        rd_kafka_resp_err_t e = produce(k, recs[i].kind, recs[i].project_id, recs[i].chunk_id, recs[i].value,
                                        recs[i].value_len, &slots[i]);
        if (e) {
            refuse(&slots[i], e);
            refused++;
        }
    }
    await(k, &t, refused);
    pthread_cond_destroy(&t.done);

    size_t n_failed = 0, n_errors = 0;
    for (size_t i = 0; i < n; i++) {
        if (!slots[i].err) continue;
        n_errors++;
        if (slots[i].status != RD_KAFKA_MSG_STATUS_PERSISTED) failed[n_failed++] = recs[i];
    }
    free(slots);
    tm_status st = TM_OK;
    if (n_errors) {
        pthread_mutex_lock(&k->mu);
        k->spooling = 1; /* until the replayer gets through to a broker */
        if (n_failed) k->spool_writers++;
        pthread_mutex_unlock(&k->mu);
        if (n_failed) st = spool_put(k, failed, n_failed, err);
    }
    free(failed);
    return st;
}

tm_status tm_srv_kafka_send(tm_srv_kafka *k, const tm_srv_record *recs, size_t n, tm_error *err) {
    /* Checked first: such a record could never leave the spool. */
    for (size_t i = 0; i < n; i++)
        if (recs[i].value_len > k->max_value)
            return tm_srv_fail(err, TM_ERR_LIMIT, 0,
                               "kafka: record %zu has %zu bytes, over message.max.bytes (%zu with framing)", i,
                               recs[i].value_len, k->max_value + MSG_OVERHEAD);
    if (n == 0) return TM_OK;
    pthread_mutex_lock(&k->mu);
    k->active++;
    int direct = !k->spooling && !k->stop;
    if (!direct) k->spool_writers++;
    pthread_mutex_unlock(&k->mu);

    tm_status st = direct ? send_direct(k, recs, n, err) : spool_put(k, recs, n, err);

    pthread_mutex_lock(&k->mu);
    k->active--;
    pthread_mutex_unlock(&k->mu);
    return st;
}

static int is_acked(const tm_srv_kafka *k, int64_t id) {
    for (size_t i = 0; i < k->n_acked; i++)
        if (k->acked[i] == id) return 1;
    return 0;
}

/* One replay round: produces the oldest spooled records (skipping those
 * already acknowledged), waits for their reports, and deletes the
 * acknowledged prefix. Returns 1 when every record of the round went out
 * (or the spool is empty), 0 to back off. */
static int replay_round(tm_srv_kafka *k) {
    size_t n = 0;
    if (tm_srv_store_spool_peek(k->store, REPLAY_BATCH, k->batch, &n, NULL) != TM_OK) return 0;
    if (n == 0) return 1;

    ticket t = {.pending = 0};
    pthread_cond_init(&t.done, NULL);
    for (size_t i = 0; i < n; i++) {
        slot *s = &k->batch_slots[i];
        s->t = &t;
        s->err = RD_KAFKA_RESP_ERR_NO_ERROR;
        s->status = RD_KAFKA_MSG_STATUS_PERSISTED;
        if (!is_acked(k, k->batch[i].id)) t.pending++;
    }
    size_t refused = 0;
    for (size_t i = 0; i < n; i++) {
        const tm_srv_spooled *e = &k->batch[i];
        if (is_acked(k, e->id)) continue;
        rd_kafka_resp_err_t err =
            produce(k, e->kind, e->project_id, e->chunk_id, e->value, e->value_len, &k->batch_slots[i]);
        if (err) {
            refuse(&k->batch_slots[i], err);
            refused++;
        }
    }
    await(k, &t, refused);
    pthread_cond_destroy(&t.done);

    /* Everything acknowledged is remembered until deleted, so that a
     * resent round (or a failed delete) does not duplicate it. */
    int64_t up_to = -1;
    int prefix = 1;
    for (size_t i = 0; i < n; i++) {
        const int64_t id = k->batch[i].id;
        if (k->batch_slots[i].err) {
            prefix = 0;
            continue;
        }
        if (prefix) up_to = id;
        if (!is_acked(k, id) && k->n_acked < REPLAY_BATCH) k->acked[k->n_acked++] = id;
    }
    for (size_t i = 0; i < n; i++) free(k->batch[i].value);

    int deleted = up_to < 0 || tm_srv_store_spool_delete(k->store, up_to, NULL) == TM_OK;
    if (up_to >= 0 && deleted) {
        size_t w = 0;
        for (size_t i = 0; i < k->n_acked; i++)
            if (k->acked[i] > up_to) k->acked[w++] = k->acked[i];
        k->n_acked = w;
    }
    return prefix && deleted;
}

static void deadline_in(struct timespec *ts, uint32_t ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *replay_main(void *arg) {
    tm_srv_kafka *k = arg;
    pthread_setname_np(pthread_self(), "tm-kafka-replay");
    uint32_t backoff = 0;
    int again = 0; /* the spool has more: no pause */
    pthread_mutex_lock(&k->mu);
    while (!k->stop) {
        if (!again) {
            struct timespec ts;
            deadline_in(&ts, backoff ? backoff : REPLAY_IDLE_MS);
            /* A wake-up (new spooled records) does not cut a backoff short. */
            while (!k->stop && pthread_cond_timedwait(&k->wake, &k->mu, &ts) != ETIMEDOUT && backoff) {
            }
            if (k->stop) break;
        }
        again = 0;
        if (!k->spooling) {
            /* A send may have spooled just as the last round drained. */
            pthread_mutex_unlock(&k->mu);
            uint64_t left = tm_srv_store_spool_count(k->store);
            pthread_mutex_lock(&k->mu);
            if (left == 0) continue;
            k->spooling = 1;
        }
        pthread_mutex_unlock(&k->mu);
        int ok = replay_round(k);
        pthread_mutex_lock(&k->mu);
        if (!ok) {
            backoff = backoff ? (backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2) : BACKOFF_MIN_MS;
            continue;
        }
        backoff = 0;
        if (tm_srv_store_spool_count(k->store) == 0 && k->spool_writers == 0)
            k->spooling = 0; /* drained, and a broker answered: healthy */
        else
            again = 1;
    }
    pthread_mutex_unlock(&k->mu);
    return NULL;
}

static tm_status conf_set(rd_kafka_conf_t *conf, const char *key, const char *value, tm_error *err) {
    char errstr[256];
    if (rd_kafka_conf_set(conf, key, value, errstr, sizeof errstr) == RD_KAFKA_CONF_OK) return TM_OK;
    return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "kafka property \"%s\": %s", key, errstr);
}

static tm_status build_conf(const tm_srv_config *cfg, tm_srv_kafka *k, rd_kafka_conf_t *conf, tm_error *err) {
    char timeout[16], max_message[24];
    snprintf(timeout, sizeof timeout, "%" PRIu32, cfg->kafka.delivery_timeout_ms);
    /* A message holds the expanded JSON and the raw trace, each up to
     * max_profile_size (librdkafka's ceiling is 1e9; brokers need a
     * matching message.max.bytes). */
    uint64_t max_bytes = 2 * cfg->limits.max_profile_size + 65536;
    snprintf(max_message, sizeof max_message, "%" PRIu64, max_bytes < 1000000000u ? max_bytes : 1000000000u);
    const char *base[][2] = {
        {"bootstrap.servers", cfg->kafka.bootstrap_servers},
        {"acks", "all"},
        {"enable.idempotence", "true"},
        {"message.timeout.ms", timeout},
        {"queue.buffering.max.ms", "2"},
        /* the key's hash picks the partition ("random" ignores keys), so
         * copies of a chunk meet where a consumer deduplicates them; a
         * record without a key (an outcome) goes to any */
        {"partitioner", "consistent_random"},
        {"message.max.bytes", cfg->limits.max_profile_size ? max_message : NULL},
    };
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) {
        if (!base[i][1]) continue; /* librdkafka's default */
        tm_status st = conf_set(conf, base[i][0], base[i][1], err);
        if (st) return st;
    }
    for (size_t i = 0; i < cfg->kafka.n_properties; i++) {
        tm_status st = conf_set(conf, cfg->kafka.properties[i].key, cfg->kafka.properties[i].value, err);
        if (st) return st;
    }
    char max[32];
    size_t max_len = sizeof max;
    if (rd_kafka_conf_get(conf, "message.max.bytes", max, &max_len) != RD_KAFKA_CONF_OK)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "kafka property \"message.max.bytes\": unreadable");
    char *end;
    errno = 0;
    unsigned long long v = strtoull(max, &end, 10);
    if (errno || *end || v <= MSG_OVERHEAD)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "kafka property \"message.max.bytes\": %s too small", max);
    k->max_value = (size_t)v - MSG_OVERHEAD;
    k->timeout_ms = cfg->kafka.delivery_timeout_ms;
    rd_kafka_conf_set_opaque(conf, k);
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_log_cb(conf, quiet_log);
    return TM_OK;
}

/* Ends the threads, delivers or purges what is queued (so that every send
 * gets its answer and spools its failures) and waits for the sends. The
 * poll thread keeps serving reports until the replayer has its answers. */
static void shut_down(tm_srv_kafka *k) {
    pthread_mutex_lock(&k->mu);
    k->stop = 1;
    pthread_cond_broadcast(&k->wake);
    pthread_mutex_unlock(&k->mu);
    if (k->rk) {
        rd_kafka_flush(k->rk, (int)k->timeout_ms);
        if (rd_kafka_outq_len(k->rk) > 0) rd_kafka_purge(k->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
    }
    if (k->have_replay) pthread_join(k->replay_thread, NULL);
    atomic_store(&k->stop_poll, 1);
    if (k->have_poll) pthread_join(k->poll_thread, NULL);
    pthread_mutex_lock(&k->mu);
    while (k->active) {
        /* A send that produced after the purge waits for its reports
         * (at most delivery_timeout_ms); someone has to serve them. */
        pthread_mutex_unlock(&k->mu);
        rd_kafka_poll(k->rk, POLL_MS);
        pthread_mutex_lock(&k->mu);
    }
    pthread_mutex_unlock(&k->mu);
}

tm_status tm_srv_kafka_new(const tm_srv_config *cfg, tm_srv_store *spool, tm_srv_kafka **out, tm_error *err) {
    *out = NULL;
    if (!cfg->kafka.bootstrap_servers)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "kafka.bootstrap_servers: not set");
    if (!cfg->kafka.profiles_topic || !cfg->kafka.outcomes_topic)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "kafka.%s: not set",
                           cfg->kafka.profiles_topic ? "outcomes_topic" : "profiles_topic");
    if (cfg->kafka.delivery_timeout_ms == 0)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "kafka.delivery_timeout_ms: must be positive");
    tm_srv_kafka *k = calloc(1, sizeof *k);
    if (!k) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "kafka: out of memory");
    k->store = spool;
    k->profiles_topic = strdup(cfg->kafka.profiles_topic);
    k->outcomes_topic = strdup(cfg->kafka.outcomes_topic);
    pthread_mutex_init(&k->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->wake, &ca);
    pthread_condattr_destroy(&ca);
    atomic_init(&k->stop_poll, 0);
    if (!k->profiles_topic || !k->outcomes_topic) {
        tm_srv_kafka_free(k);
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "kafka: out of memory");
    }

    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    tm_status st = build_conf(cfg, k, conf, err);
    if (st) {
        rd_kafka_conf_destroy(conf);
        tm_srv_kafka_free(k);
        return st;
    }
    char errstr[512];
    k->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!k->rk) {
        rd_kafka_conf_destroy(conf);
        tm_srv_kafka_free(k);
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "kafka producer: %s", errstr);
    }
    /* A spool left by an earlier run is replayed before anything new. */
    k->spooling = tm_srv_store_spool_count(spool) > 0;
    if (pthread_create(&k->poll_thread, NULL, poll_main, k) != 0) {
        tm_srv_kafka_free(k);
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "kafka: cannot start the poll thread");
    }
    k->have_poll = 1;
    if (pthread_create(&k->replay_thread, NULL, replay_main, k) != 0) {
        tm_srv_kafka_free(k);
        return tm_srv_fail(err, TM_ERR_NOMEM, 0, "kafka: cannot start the replay thread");
    }
    k->have_replay = 1;
    *out = k;
    return TM_OK;
}

uint64_t tm_srv_kafka_queue_depth(tm_srv_kafka *k) {
    return atomic_load(&k->in_flight);
}

void tm_srv_kafka_free(tm_srv_kafka *k) {
    if (!k) return;
    shut_down(k);
    if (k->rk) rd_kafka_destroy(k->rk);
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->mu);
    free(k->profiles_topic);
    free(k->outcomes_topic);
    free(k);
}
