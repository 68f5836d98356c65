/*
 * bench_process.c — the server's work on one envelope without sockets,
 * Kafka or threads: tm_srv_process (envelope parsing, Relay's rules, the
 * Perfetto conversion, the Kafka/store message around it) on the same
 * envelope N times, under the server's default limits. Prints the best and
 * median time per envelope and the message bytes it made. Run under
 * `valgrind --tool=callgrind` to count instructions per chunk
 * (tm_srv_process's inclusive count / N); beside bench_convert on the
 * envelope's trace it tells the server's own share from the conversion's.
 *
 * With OUT, the records' messages of the last run go there one after the
 * other (the server's output, to compare builds byte for byte: the time of
 * receipt is fixed).
 *
 * usage: bench_process ENVELOPE [RUNS [OUT]]
 */
#define _GNU_SOURCE /* mallopt */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "server.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_process ENVELOPE [RUNS [OUT]]\n");
        return 2;
    }
    int runs = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 200;
    if (runs < 1) runs = 1;
    /* The server's request threads keep freed memory in their arenas; alone
     * in the main arena, glibc would hand each envelope's ~0.4 MB message
     * back to the kernel at every free and fault it in again (~110 page
     * faults an envelope, a third of the time), which the server never does. */
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 3;
    }
    tm_srv_buf body = {0};
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (tm_srv_buf_append(&body, chunk, n)) return 3;
    fclose(f);

    tm_error err;
    tm_srv_config cfg;
    if (tm_srv_config_init(&cfg, &err) != TM_OK) {
        fprintf(stderr, "bench_process: %s\n", err.message);
        return 1;
    }
    static char key[] = "e12d836b15bb49d7bbf99e64295d995b";
    static char *keys[] = {key};
    tm_srv_project project = {.id = 1, .organization_id = 1, .public_keys = keys, .n_public_keys = 1,
                              .retention_days = 90, .continuous_profiling = 1, .continuous_profiling_perfetto = 1};
    tm_srv_context ctx = {.cfg = &cfg, .project = &project, .now_unix = 1771278043};
    tm_srv_scratch_pool scratch; /* as the server converts */
    tm_srv_scratch_pool_init(&scratch, 1);
    double *times = malloc((size_t)runs * sizeof *times);
    if (!times) return 3;
    size_t records = 0, bytes = 0;
    for (int r = 0; r < runs; r++) {
        tm_srv_processed out;
        double t0 = now();
        ctx.scratch = tm_srv_scratch_take(&scratch);
        tm_status st = tm_srv_process(&ctx, body.data, body.len, &out, &err);
        tm_srv_scratch_give(&scratch, ctx.scratch);
        if (st != TM_OK) {
            fprintf(stderr, "bench_process: %s\n", err.message);
            return 1;
        }
        times[r] = now() - t0;
        records = out.n_records;
        bytes = 0;
        for (size_t i = 0; i < out.n_records; i++) bytes += out.records[i].value_len;
        if (r == runs - 1 && argc > 3) {
            FILE *o = fopen(argv[3], "wb");
            if (!o) {
                perror(argv[3]);
                return 3;
            }
            for (size_t i = 0; i < out.n_records; i++) fwrite(out.records[i].value, 1, out.records[i].value_len, o);
            if (fclose(o)) {
                perror(argv[3]);
                return 3;
            }
        }
        tm_srv_processed_release(&out);
    }
    qsort(times, (size_t)runs, sizeof *times, by_value);
    printf("envelope: %zu bytes; %zu records, %zu message bytes (%d runs)\n", body.len, records, bytes, runs);
    printf("tm_srv_process: best %.3f ms, median %.3f ms per envelope\n", times[0] * 1e3, times[runs / 2] * 1e3);
    free(times);
    tm_srv_scratch_pool_release(&scratch);
    tm_srv_buf_release(&body);
    tm_srv_config_release(&cfg);
    return 0;
}
