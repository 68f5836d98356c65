/*
 * test_kafka.c — server/kafka.c against librdkafka's mock cluster (three
 * in-process brokers) with a store in a temporary directory, read back by
 * a real rdkafka consumer.
 *
 * Covered: chunks and outcomes reach their topics byte for byte with the
 * project_id header; copies of a chunk share one partition; a broker outage (every send from several threads
 * returns TM_OK after spooling, the spool holds exactly the records, and
 * after the brokers return it drains into Kafka exactly once and in spool
 * order, then new records go out after them); a spool left by one producer
 * is replayed by the next, before anything new; free() answers a send
 * that waits for the brokers, with its record spooled; unknown or invalid
 * properties and a missing bootstrap are errors naming the property; an
 * oversized record is refused before anything is produced or spooled.
 * Waiting for the replayer is a bounded polling loop with a generous
 * deadline, never a timing assertion.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "server.h"

#define PROFILES "test-profiles"
#define OUTCOMES "test-outcomes"
#define N_BROKERS 3
#define DEADLINE_MS 90000 /* generous: only reached when something is broken */

/* ---- fixtures ---- */

typedef struct cluster {
    rd_kafka_t *host; /* the mock cluster lives in this handle */
    rd_kafka_mock_cluster_t *mc;
    const char *bootstraps;
} cluster;

static void quiet(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    (void)rk, (void)level, (void)fac, (void)buf;
}

static void cluster_start(cluster *c) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set_log_cb(conf, quiet);
    char errstr[256];
    c->host = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cr_assert_not_null(c->host, "%s", errstr);
    c->mc = rd_kafka_mock_cluster_new(c->host, N_BROKERS);
    cr_assert_not_null(c->mc);
    c->bootstraps = rd_kafka_mock_cluster_bootstraps(c->mc);
    /* One partition each, so that the topic order is the produce order. */
    cr_assert_eq(rd_kafka_mock_topic_create(c->mc, PROFILES, 1, N_BROKERS), RD_KAFKA_RESP_ERR_NO_ERROR);
    cr_assert_eq(rd_kafka_mock_topic_create(c->mc, OUTCOMES, 1, N_BROKERS), RD_KAFKA_RESP_ERR_NO_ERROR);
}

static void cluster_set(cluster *c, int up) {
    for (int32_t b = 1; b <= N_BROKERS; b++)
        cr_assert_eq(up ? rd_kafka_mock_broker_set_up(c->mc, b) : rd_kafka_mock_broker_set_down(c->mc, b),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
}

static void cluster_stop(cluster *c) {
    rd_kafka_mock_cluster_destroy(c->mc);
    rd_kafka_destroy(c->host);
}

static tm_srv_config config_for(const char *bootstraps) {
    tm_srv_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kafka.bootstrap_servers = (char *)bootstraps;
    cfg.kafka.profiles_topic = PROFILES;
    cfg.kafka.outcomes_topic = OUTCOMES;
    /* long enough for a cold mock cluster on a loaded machine: a delivery
     * that should succeed must not time out into the spool */
    cfg.kafka.delivery_timeout_ms = 5000;
    return cfg;
}

typedef struct tmp_store {
    char dir[64];
    tm_srv_store *s;
} tmp_store;

static void store_open(tmp_store *t) {
    snprintf(t->dir, sizeof t->dir, "/tmp/tm_test_kafka.XXXXXX");
    cr_assert_not_null(mkdtemp(t->dir));
    tm_error err;
    cr_assert_eq(tm_srv_store_open(t->dir, &t->s, &err), TM_OK, "%s", err.message);
}

static void store_remove(tmp_store *t) {
    tm_srv_store_close(t->s);
    DIR *d = opendir(t->dir);
    cr_assert_not_null(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", t->dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(t->dir);
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Polls until the spool is empty; fails the test after DEADLINE_MS. */
static void wait_spool_empty(tm_srv_store *s) {
    const uint64_t end = now_ms() + DEADLINE_MS;
    while (tm_srv_store_spool_count(s) > 0) {
        cr_assert_lt(now_ms(), end, "spool still holds %" PRIu64 " records", tm_srv_store_spool_count(s));
        usleep(50 * 1000);
    }
}

static tm_srv_record record(tm_srv_record_kind kind, uint64_t project_id, const void *value, size_t len) {
    tm_srv_record r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    r.project_id = project_id;
    r.received = 1700000000;
    r.value = value;
    r.value_len = len;
    return r;
}

/* ---- reading back ---- */

typedef struct got {
    uint8_t *value;
    size_t len;
    char project_id[32]; /* the header's value; "" when missing */
    char key[64];        /* the message key; "" when missing */
} got;

typedef struct topic_read {
    got *msgs;
    size_t n;
    int64_t total; /* messages in the partition (high - low watermark) */
} topic_read;

/* Reads partition 0 of topic from the beginning until `want` messages
 * arrived (or the deadline passed), then the partition's message count. */
static topic_read consume(const char *bootstraps, const char *topic, size_t want) {
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char errstr[256];
    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", bootstraps, errstr, sizeof errstr),
                 RD_KAFKA_CONF_OK);
    cr_assert_eq(rd_kafka_conf_set(conf, "group.id", "tm-test", errstr, sizeof errstr), RD_KAFKA_CONF_OK);
    cr_assert_eq(rd_kafka_conf_set(conf, "enable.auto.commit", "false", errstr, sizeof errstr),
                 RD_KAFKA_CONF_OK);
    cr_assert_eq(rd_kafka_conf_set(conf, "auto.offset.reset", "earliest", errstr, sizeof errstr),
                 RD_KAFKA_CONF_OK);
    rd_kafka_conf_set_log_cb(conf, quiet);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, errstr, sizeof errstr);
    cr_assert_not_null(rk, "%s", errstr);
    rd_kafka_poll_set_consumer(rk);
    rd_kafka_topic_partition_list_t *parts = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(parts, topic, 0)->offset = RD_KAFKA_OFFSET_BEGINNING;
    cr_assert_eq(rd_kafka_assign(rk, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(parts);

    topic_read r = {.msgs = calloc(want ? want : 1, sizeof(got))};
    const uint64_t end = now_ms() + DEADLINE_MS;
    while (r.n < want && now_ms() < end) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 200);
        if (!m) continue;
        if (!m->err) {
            got *g = &r.msgs[r.n++];
            g->len = m->len;
            g->value = malloc(m->len ? m->len : 1);
            memcpy(g->value, m->payload, m->len);
            if (m->key && m->key_len < sizeof g->key) memcpy(g->key, m->key, m->key_len);
            rd_kafka_headers_t *h = NULL;
            const void *v = NULL;
            size_t vlen = 0;
            if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                rd_kafka_header_get_last(h, "project_id", &v, &vlen) == RD_KAFKA_RESP_ERR_NO_ERROR &&
                vlen < sizeof g->project_id)
                memcpy(g->project_id, v, vlen);
        }
        rd_kafka_message_destroy(m);
    }
    int64_t lo = 0, hi = 0;
    cr_assert_eq(rd_kafka_query_watermark_offsets(rk, topic, 0, &lo, &hi, 10000), RD_KAFKA_RESP_ERR_NO_ERROR);
    r.total = hi - lo;
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return r;
}

static void topic_read_free(topic_read *r) {
    for (size_t i = 0; i < r->n; i++) free(r->msgs[i].value);
    free(r->msgs);
}

static void assert_msg(const got *g, const void *value, size_t len, const char *project_id) {
    cr_assert_eq(g->len, len);
    cr_assert_eq(memcmp(g->value, value, len), 0);
    cr_assert_str_eq(g->project_id, project_id);
}

/* ---- delivery ---- */

Test(kafka, chunks_and_outcomes_reach_their_topics, .timeout = 240) {
    cluster c;
    cluster_start(&c);
    tmp_store st;
    store_open(&st);
    tm_srv_config cfg = config_for(c.bootstraps);
    tm_srv_kafka *k;
    tm_error err;
    cr_assert_eq(tm_srv_kafka_new(&cfg, st.s, &k, &err), TM_OK, "%s", err.message);

    /* Binary values: NUL and 0xff bytes, and one of 200 KiB. */
    static const uint8_t chunk_a[] = {0x89, 0xa4, 't', 'y', 'p', 'e', 0x00, 0xff, 0x00};
    size_t big_len = 200 * 1024;
    uint8_t *big = malloc(big_len);
    for (size_t i = 0; i < big_len; i++) big[i] = (uint8_t)(i * 131u + 7u);
    static const char outcome_a[] = "{\"org_id\":1,\"project_id\":42,\"outcome\":3}";
    static const char outcome_b[] = "{\"org_id\":1,\"project_id\":18446744073709551615,\"outcome\":2}";
    tm_srv_record recs[] = {
        record(TM_SRV_RECORD_CHUNK, 42, chunk_a, sizeof chunk_a),
        record(TM_SRV_RECORD_OUTCOME, 42, outcome_a, strlen(outcome_a)),
        record(TM_SRV_RECORD_CHUNK, 7, big, big_len),
        record(TM_SRV_RECORD_OUTCOME, UINT64_MAX, outcome_b, strlen(outcome_b)),
    };
    recs[0].chunk_id = (tm_srv_view){"0123456789abcdef0123456789abcdef", 32};
    cr_assert_eq(tm_srv_kafka_send(k, recs, 4, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_srv_kafka_send(k, recs, 0, &err), TM_OK);
    cr_assert_eq(tm_srv_store_spool_count(st.s), 0);

    topic_read p = consume(c.bootstraps, PROFILES, 2);
    cr_assert_eq(p.n, 2);
    cr_assert_eq(p.total, 2);
    assert_msg(&p.msgs[0], chunk_a, sizeof chunk_a, "42");
    assert_msg(&p.msgs[1], big, big_len, "7");
    /* a chunk is keyed by its chunk_id, which consumers deduplicate by */
    cr_assert_str_eq(p.msgs[0].key, "0123456789abcdef0123456789abcdef");
    cr_assert_str_eq(p.msgs[1].key, "");
    topic_read o = consume(c.bootstraps, OUTCOMES, 2);
    cr_assert_eq(o.n, 2);
    cr_assert_eq(o.total, 2);
    assert_msg(&o.msgs[0], outcome_a, strlen(outcome_a), "42");
    assert_msg(&o.msgs[1], outcome_b, strlen(outcome_b), "18446744073709551615");

    topic_read_free(&p);
    topic_read_free(&o);
    free(big);
    tm_srv_kafka_free(k);
    cr_assert_eq(tm_srv_store_spool_count(st.s), 0);
    store_remove(&st);
    cluster_stop(&c);
}

/* Copies of one chunk (an SDK's retry, a replay) share their key, so they
 * land in one partition of a topic of many, where a consumer that
 * deduplicates by key sees them together. */
Test(kafka, copies_of_a_chunk_land_in_one_partition, .timeout = 240) {
    enum { PARTITIONS = 8, COPIES = 6 };
    cluster c;
    cluster_start(&c);
    cr_assert_eq(rd_kafka_mock_topic_create(c.mc, "test-keyed", PARTITIONS, N_BROKERS), RD_KAFKA_RESP_ERR_NO_ERROR);
    tmp_store st;
    store_open(&st);
    tm_srv_config cfg = config_for(c.bootstraps);
    cfg.kafka.profiles_topic = "test-keyed";
    tm_srv_kafka *k;
    tm_error err;
    cr_assert_eq(tm_srv_kafka_new(&cfg, st.s, &k, &err), TM_OK, "%s", err.message);
    static const uint8_t chunk[] = {0x81, 0xa1, 'x', 0x01};
    for (int i = 0; i < COPIES; i++) { /* one send each, as retried posts are */
        tm_srv_record r = record(TM_SRV_RECORD_CHUNK, 42, chunk, sizeof chunk);
        r.chunk_id = (tm_srv_view){"fedcba9876543210fedcba9876543210", 32};
        cr_assert_eq(tm_srv_kafka_send(k, &r, 1, &err), TM_OK, "%s", err.message);
    }
    tm_srv_kafka_free(k);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    char errstr[256];
    cr_assert_eq(rd_kafka_conf_set(conf, "bootstrap.servers", c.bootstraps, errstr, sizeof errstr), RD_KAFKA_CONF_OK);
    rd_kafka_conf_set_log_cb(conf, quiet);
    rd_kafka_t *reader = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    cr_assert_not_null(reader, "%s", errstr);
    int64_t counts[PARTITIONS], total = 0, most = 0;
    for (int32_t p = 0; p < PARTITIONS; p++) {
        int64_t lo = 0, hi = 0;
        cr_assert_eq(rd_kafka_query_watermark_offsets(reader, "test-keyed", p, &lo, &hi, 10000),
                     RD_KAFKA_RESP_ERR_NO_ERROR);
        counts[p] = hi - lo;
        total += counts[p];
        if (counts[p] > most) most = counts[p];
    }
    cr_assert_eq(total, COPIES);
    cr_expect_eq(most, COPIES, "copies spread over partitions: %lld %lld %lld %lld %lld %lld %lld %lld",
                 (long long)counts[0], (long long)counts[1], (long long)counts[2], (long long)counts[3],
                 (long long)counts[4], (long long)counts[5], (long long)counts[6], (long long)counts[7]);
    rd_kafka_destroy(reader);
    store_remove(&st);
    cluster_stop(&c);
}

/* ---- outage and replay ---- */

#define THREADS 4
#define SENDS 10 /* per thread, each a chunk and an outcome */

typedef struct sender {
    tm_srv_kafka *k;
    int t;
    char values[SENDS][2][48];
    tm_status st[SENDS];
} sender;

static void *send_main(void *arg) {
    sender *s = arg;
    for (int i = 0; i < SENDS; i++) {
        snprintf(s->values[i][0], sizeof s->values[i][0], "chunk thread %d send %d", s->t, i);
        snprintf(s->values[i][1], sizeof s->values[i][1], "outcome thread %d send %d", s->t, i);
        tm_srv_record recs[2] = {
            record(TM_SRV_RECORD_CHUNK, 100 + (uint64_t)s->t, s->values[i][0], strlen(s->values[i][0])),
            record(TM_SRV_RECORD_OUTCOME, 100 + (uint64_t)s->t, s->values[i][1], strlen(s->values[i][1])),
        };
        recs[0].chunk_id = (tm_srv_view){s->values[i][0], strlen(s->values[i][0])}; /* the key: the value */
        tm_error err;
        s->st[i] = tm_srv_kafka_send(s->k, recs, 2, &err);
    }
    return NULL;
}

/* The spool's records of one kind, oldest first (value and project id). */
typedef struct spooled_list {
    char value[THREADS * SENDS][48];
    char project_id[THREADS * SENDS][32];
    size_t n;
} spooled_list;

static void read_spool(tm_srv_store *s, spooled_list *chunks, spooled_list *outcomes) {
    enum { MAX = 4 * THREADS * SENDS };
    tm_srv_spooled *e = calloc(MAX, sizeof *e);
    size_t n = 0;
    tm_error err;
    cr_assert_eq(tm_srv_store_spool_peek(s, MAX, e, &n, &err), TM_OK, "%s", err.message);
    chunks->n = outcomes->n = 0;
    for (size_t i = 0; i < n; i++) {
        spooled_list *l = e[i].kind == TM_SRV_RECORD_CHUNK ? chunks : outcomes;
        cr_assert_lt(l->n, THREADS * SENDS, "more spooled records than sent");
        cr_assert_lt(e[i].value_len, sizeof l->value[0]);
        memcpy(l->value[l->n], e[i].value, e[i].value_len);
        l->value[l->n][e[i].value_len] = '\0';
        snprintf(l->project_id[l->n], sizeof l->project_id[0], "%" PRIu64, e[i].project_id);
        if (e[i].kind == TM_SRV_RECORD_CHUNK) /* spooled with the chunk_id its key comes from */
            cr_assert(e[i].chunk_id.len == e[i].value_len && !memcmp(e[i].chunk_id.ptr, e[i].value, e[i].value_len));
        else
            cr_assert_null(e[i].chunk_id.ptr);
        l->n++;
        if (i > 0) cr_assert_gt(e[i].id, e[i - 1].id);
        free(e[i].value);
    }
    free(e);
}

static size_t occurrences(const spooled_list *l, const char *value) {
    size_t c = 0;
    for (size_t i = 0; i < l->n; i++) c += strcmp(l->value[i], value) == 0;
    return c;
}

static void assert_topic_is(const topic_read *r, const spooled_list *l) {
    cr_assert_eq(r->n, l->n);
    cr_assert_eq(r->total, (int64_t)l->n, "duplicates: %" PRId64 " messages for %zu records", r->total, l->n);
    for (size_t i = 0; i < l->n; i++) assert_msg(&r->msgs[i], l->value[i], strlen(l->value[i]), l->project_id[i]);
}

Test(kafka, outage_spools_then_replays_in_order_exactly_once, .timeout = 300) {
    cluster c;
    cluster_start(&c);
    cluster_set(&c, 0);
    tmp_store st;
    store_open(&st);
    tm_srv_config cfg = config_for(c.bootstraps);
    tm_srv_kafka *k;
    tm_error err;
    cr_assert_eq(tm_srv_kafka_new(&cfg, st.s, &k, &err), TM_OK, "%s", err.message);

    sender *senders = calloc(THREADS, sizeof *senders);
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        senders[t].k = k;
        senders[t].t = t;
        cr_assert_eq(pthread_create(&th[t], NULL, send_main, &senders[t]), 0);
    }
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < SENDS; i++)
            cr_assert_eq(senders[t].st[i], TM_OK, "thread %d send %d: %s", t, i, tm_status_str(senders[t].st[i]));

    /* Every record is spooled exactly once, and each thread's in order. */
    cr_assert_eq(tm_srv_store_spool_count(st.s), 2 * THREADS * SENDS);
    static spooled_list chunks, outcomes;
    read_spool(st.s, &chunks, &outcomes);
    cr_assert_eq(chunks.n, THREADS * SENDS);
    cr_assert_eq(outcomes.n, THREADS * SENDS);
    for (int t = 0; t < THREADS; t++)
        for (int i = 0; i < SENDS; i++) {
            cr_assert_eq(occurrences(&chunks, senders[t].values[i][0]), 1);
            cr_assert_eq(occurrences(&outcomes, senders[t].values[i][1]), 1);
        }

    /* A record sent as the brokers return queues behind the spool (the
     * replayer may still be backing off; a direct produce would overtake). */
    cluster_set(&c, 1);
    static const char after[] = "chunk after the outage";
    tm_srv_record rec = record(TM_SRV_RECORD_CHUNK, 5, after, strlen(after));
    cr_assert_eq(tm_srv_kafka_send(k, &rec, 1, &err), TM_OK, "%s", err.message);
    wait_spool_empty(st.s);

    topic_read p = consume(c.bootstraps, PROFILES, THREADS * SENDS + 1);
    cr_assert_eq(p.n, THREADS * SENDS + 1);
    cr_assert_eq(p.total, THREADS * SENDS + 1, "duplicates: %" PRId64 " chunk messages", p.total);
    for (size_t i = 0; i < chunks.n; i++) {
        assert_msg(&p.msgs[i], chunks.value[i], strlen(chunks.value[i]), chunks.project_id[i]);
        cr_assert_str_eq(p.msgs[i].key, chunks.value[i], "a replayed chunk keeps its key");
    }
    assert_msg(&p.msgs[chunks.n], after, strlen(after), "5");
    topic_read o = consume(c.bootstraps, OUTCOMES, THREADS * SENDS);
    assert_topic_is(&o, &outcomes);

    topic_read_free(&p);
    topic_read_free(&o);
    free(senders);
    tm_srv_kafka_free(k);
    store_remove(&st);
    cluster_stop(&c);
}

Test(kafka, spool_of_an_earlier_run_is_replayed, .timeout = 240) {
    cluster c;
    cluster_start(&c);
    cluster_set(&c, 0);
    tmp_store st;
    store_open(&st);
    tm_srv_config cfg = config_for(c.bootstraps);
    tm_srv_kafka *k;
    tm_error err;
    cr_assert_eq(tm_srv_kafka_new(&cfg, st.s, &k, &err), TM_OK, "%s", err.message);
    static const char *values[] = {"first", "second", "third", "fourth", "fifth", "sixth"};
    for (int i = 0; i < 6; i += 2) {
        tm_srv_record recs[2] = {
            record(TM_SRV_RECORD_CHUNK, 9, values[i], strlen(values[i])),
            record(TM_SRV_RECORD_CHUNK, 9, values[i + 1], strlen(values[i + 1])),
        };
        cr_assert_eq(tm_srv_kafka_send(k, recs, 2, &err), TM_OK, "%s", err.message);
    }
    cr_assert_eq(tm_srv_store_spool_count(st.s), 6);
    tm_srv_kafka_free(k);
    cr_assert_eq(tm_srv_store_spool_count(st.s), 6);

    /* The new producer sends what was spooled before anything new. */
    cluster_set(&c, 1);
    cr_assert_eq(tm_srv_kafka_new(&cfg, st.s, &k, &err), TM_OK, "%s", err.message);
    static const char fresh[] = "seventh";
    tm_srv_record rec = record(TM_SRV_RECORD_CHUNK, 10, fresh, strlen(fresh));
    cr_assert_eq(tm_srv_kafka_send(k, &rec, 1, &err), TM_OK, "%s", err.message);
    wait_spool_empty(st.s);
    topic_read p = consume(c.bootstraps, PROFILES, 7);
    cr_assert_eq(p.n, 7);
    cr_assert_eq(p.total, 7);
    for (size_t i = 0; i < 6; i++) assert_msg(&p.msgs[i], values[i], strlen(values[i]), "9");
    assert_msg(&p.msgs[6], fresh, strlen(fresh), "10");
    topic_read_free(&p);
    tm_srv_kafka_free(k);
    store_remove(&st);
    cluster_stop(&c);
}

typedef struct lone_send {
    tm_srv_kafka *k;
    tm_status st;
} lone_send;

static void *lone_send_main(void *arg) {
    lone_send *l = arg;
    static const char value[] = "in flight at shutdown";
    tm_srv_record rec = record(TM_SRV_RECORD_OUTCOME, 3, value, strlen(value));
    tm_error err;
    l->st = tm_srv_kafka_send(l->k, &rec, 1, &err);
    return NULL;
}

Test(kafka, free_answers_a_send_waiting_for_the_brokers, .timeout = 120) {
    cluster c;
    cluster_start(&c);
    cluster_set(&c, 0);
    tmp_store st;
    store_open(&st);
    tm_srv_config cfg = config_for(c.bootstraps);
    lone_send l = {.st = TM_ERR_IO};
    tm_error err;
    cr_assert_eq(tm_srv_kafka_new(&cfg, st.s, &l.k, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_srv_kafka_queue_depth(l.k), 0, "nothing produced yet");
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, lone_send_main, &l), 0);
    /* Once the message is queued, the send is blocked on its report. */
    const uint64_t end = now_ms() + DEADLINE_MS;
    while (tm_srv_kafka_queue_depth(l.k) == 0) {
        cr_assert_lt(now_ms(), end);
        usleep(1000);
    }
    tm_srv_kafka_free(l.k);
    pthread_join(th, NULL);
    cr_assert_eq(l.st, TM_OK, "%s", tm_status_str(l.st));
    static spooled_list chunks, outcomes;
    read_spool(st.s, &chunks, &outcomes);
    cr_assert_eq(chunks.n, 0);
    cr_assert_eq(outcomes.n, 1);
    cr_assert_str_eq(outcomes.value[0], "in flight at shutdown");
    cr_assert_str_eq(outcomes.project_id[0], "3");
    store_remove(&st);
    cluster_stop(&c);
}

/* ---- errors ---- */

static void assert_new_fails(tm_srv_config *cfg, tm_srv_store *s, tm_status code, const char *needle) {
    tm_srv_kafka *k = (tm_srv_kafka *)&k; /* must be reset to NULL */
    tm_error err;
    memset(&err, 0, sizeof err);
    cr_assert_eq(tm_srv_kafka_new(cfg, s, &k, &err), code, "%s", err.message);
    cr_assert_eq(err.code, code);
    cr_assert_null(k);
    cr_assert_not_null(strstr(err.message, needle), "message \"%s\" lacks \"%s\"", err.message, needle);
}

Test(kafka, invalid_properties_are_named) {
    tmp_store st;
    store_open(&st);
    tm_srv_config cfg = config_for("127.0.0.1:1");
    tm_srv_kv unknown[] = {{"no.such.property", "1"}};
    cfg.kafka.properties = unknown;
    cfg.kafka.n_properties = 1;
    assert_new_fails(&cfg, st.s, TM_ERR_INVALID_ARG, "\"no.such.property\"");
    assert_new_fails(&cfg, st.s, TM_ERR_INVALID_ARG, "No such configuration property");

    tm_srv_kv bad_value[] = {{"client.id", "tracemill"}, {"linger.ms", "-5"}};
    cfg.kafka.properties = bad_value;
    cfg.kafka.n_properties = 2;
    assert_new_fails(&cfg, st.s, TM_ERR_INVALID_ARG, "\"linger.ms\"");

    /* Accepted one by one, refused together by the producer. */
    tm_srv_kv conflict[] = {{"acks", "1"}};
    cfg.kafka.properties = conflict;
    cfg.kafka.n_properties = 1;
    assert_new_fails(&cfg, st.s, TM_ERR_INVALID_ARG, "acks");

    cfg.kafka.properties = NULL;
    cfg.kafka.n_properties = 0;
    cfg.kafka.bootstrap_servers = NULL;
    assert_new_fails(&cfg, st.s, TM_ERR_INVALID_ARG, "kafka.bootstrap_servers");
    cfg.kafka.bootstrap_servers = "127.0.0.1:1";
    cfg.kafka.outcomes_topic = NULL;
    assert_new_fails(&cfg, st.s, TM_ERR_INVALID_ARG, "kafka.outcomes_topic");
    cfg.kafka.outcomes_topic = OUTCOMES;
    cfg.kafka.delivery_timeout_ms = 0;
    assert_new_fails(&cfg, st.s, TM_ERR_INVALID_ARG, "kafka.delivery_timeout_ms");
    cr_assert_eq(tm_srv_store_spool_count(st.s), 0);
    tm_srv_kafka_free(NULL); /* a no-op */
    store_remove(&st);
}

Test(kafka, oversized_record_is_refused_before_anything_is_sent, .timeout = 120) {
    cluster c;
    cluster_start(&c);
    tmp_store st;
    store_open(&st);
    tm_srv_config cfg = config_for(c.bootstraps);
    tm_srv_kv props[] = {{"message.max.bytes", "2000"}};
    cfg.kafka.properties = props;
    cfg.kafka.n_properties = 1;
    tm_srv_kafka *k;
    tm_error err;
    cr_assert_eq(tm_srv_kafka_new(&cfg, st.s, &k, &err), TM_OK, "%s", err.message);
    static uint8_t small[100], large[3000];
    tm_srv_record recs[] = {
        record(TM_SRV_RECORD_CHUNK, 1, small, sizeof small),
        record(TM_SRV_RECORD_CHUNK, 1, large, sizeof large),
    };
    cr_assert_eq(tm_srv_kafka_send(k, recs, 2, &err), TM_ERR_LIMIT);
    cr_assert_not_null(strstr(err.message, "record 1 has 3000 bytes"), "%s", err.message);
    cr_assert_not_null(strstr(err.message, "message.max.bytes"), "%s", err.message);
    cr_assert_eq(tm_srv_store_spool_count(st.s), 0);

    /* The small one alone goes through: nothing of the refused call did. */
    cr_assert_eq(tm_srv_kafka_send(k, recs, 1, &err), TM_OK, "%s", err.message);
    topic_read p = consume(c.bootstraps, PROFILES, 1);
    cr_assert_eq(p.n, 1);
    cr_assert_eq(p.total, 1);
    assert_msg(&p.msgs[0], small, sizeof small, "1");
    topic_read_free(&p);
    tm_srv_kafka_free(k);
    store_remove(&st);
    cluster_stop(&c);
}
