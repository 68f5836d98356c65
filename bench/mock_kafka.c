/*
 * mock_kafka.c — a stand-alone Kafka for the ingest benchmark: starts
 * librdkafka's mock cluster (3 brokers) with the topics "ingest-profiles"
 * and "outcomes" (replication factor 3), prints its bootstrap servers on
 * stdout as one line, then serves until stdin closes or SIGTERM/SIGINT
 * arrives (so it also goes away when the driver that holds stdin dies).
 *
 * usage: mock_kafka [--partitions N]   (default 3)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define N_BROKERS 3

static const char *const topics[] = {"ingest-profiles", "outcomes"};

int main(int argc, char **argv) {
    long partitions = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--partitions") == 0 && i + 1 < argc) {
            char *end;
            partitions = strtol(argv[++i], &end, 10);
            if (*end != '\0' || partitions < 1 || partitions > 1000) {
                fprintf(stderr, "mock_kafka: bad --partitions %s\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "usage: mock_kafka [--partitions N]\n");
            return 2;
        }
    }

    /* Block the signals before librdkafka starts its threads so that only
     * the signalfd below sees them. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &sigs, NULL) != 0) return 1;
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0) {
        perror("mock_kafka: signalfd");
        return 1;
    }

    /* The mock cluster lives inside a client handle; nothing is produced
     * through it. */
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "mock_kafka: %s\n", errstr);
        return 1;
    }
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk) {
        fprintf(stderr, "mock_kafka: rd_kafka_new: %s\n", errstr);
        return 1;
    }
    rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, N_BROKERS);
    if (!mc) {
        fprintf(stderr, "mock_kafka: cannot create the mock cluster\n");
        rd_kafka_destroy(rk);
        return 1;
    }
    for (size_t i = 0; i < sizeof topics / sizeof topics[0]; i++) {
        rd_kafka_resp_err_t e = rd_kafka_mock_topic_create(mc, topics[i], (int)partitions, N_BROKERS);
        if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
            fprintf(stderr, "mock_kafka: topic %s: %s\n", topics[i], rd_kafka_err2str(e));
            rd_kafka_mock_cluster_destroy(mc);
            rd_kafka_destroy(rk);
            return 1;
        }
    }
    printf("%s\n", rd_kafka_mock_cluster_bootstraps(mc));
    fflush(stdout);

    struct pollfd pf[2] = {{.fd = STDIN_FILENO, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
    for (;;) {
        if (poll(pf, 2, -1) < 0) {
            if (errno == EINTR) continue;
            perror("mock_kafka: poll");
            break;
        }
        if (pf[1].revents) break; /* SIGTERM / SIGINT */
        if (pf[0].revents) {
            char buf[256];
            ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
            if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) break; /* stdin closed */
        }
    }
    rd_kafka_mock_cluster_destroy(mc);
    rd_kafka_destroy(rk);
    close(sfd);
    return 0;
}
