/*
 * bench_convert.c — times tracemill's decode and Sample v2 conversion
 * in-process with the public API only: best of N runs of tm_trace_parse and
 * of tm_write_sample_v2 into a sink that counts bytes (what the CLI does,
 * minus the kernel's write path). Prints MB/s of trace, samples/s and the
 * peak RSS of the process; scripts/bench.sh adds the CLI's end-to-end run.
 *
 * usage: bench_convert TRACE [RUNS]
 */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tracemill.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int count_write(void *ctx, const void *data, size_t len) {
    (void)data;
    *(size_t *)ctx += len;
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: bench_convert TRACE [RUNS]\n");
        return 2;
    }
    int runs = argc > 2 ? (int)strtol(argv[2], NULL, 10) : 5;
    if (runs < 1) runs = 1;
    int fd = open(argv[1], O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        perror(argv[1]);
        return 3;
    }
    size_t len = (size_t)st.st_size;
    const void *buf = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (buf == MAP_FAILED) {
        perror("mmap");
        return 3;
    }
    double best_parse = 1e9, best_write = 1e9, best_total = 1e9;
    size_t out_bytes = 0;
    uint64_t samples = 0;
    for (int r = 0; r < runs; r++) {
        tm_trace *t = NULL;
        tm_error err;
        double t0 = now();
        if (tm_trace_parse(buf, len, NULL, &t, &err) != TM_OK) {
            fprintf(stderr, "parse failed: %s at %llu: %s\n", tm_status_str(err.code),
                    (unsigned long long)err.offset, err.message);
            return 1;
        }
        double t1 = now();
        out_bytes = 0;
        tm_sink sink = {.write = count_write, .ctx = &out_bytes};
        if (tm_write_sample_v2(t, NULL, &sink, &err) != TM_OK) {
            fprintf(stderr, "write failed: %s\n", err.message);
            return 1;
        }
        double t2 = now();
        samples = tm_trace_get_stats(t)->samples_kept;
        tm_trace_free(t);
        if (t1 - t0 < best_parse) best_parse = t1 - t0;
        if (t2 - t1 < best_write) best_write = t2 - t1;
        if (t2 - t0 < best_total) best_total = t2 - t0;
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double mb = (double)len / 1e6;
    printf("trace: %.1f MB, %llu samples; Sample v2 output: %.1f MB (best of %d runs)\n", mb,
           (unsigned long long)samples, (double)out_bytes / 1e6, runs);
    printf("decode:            %7.1f ms  %8.1f MB/s  %6.2f M samples/s\n", best_parse * 1e3, mb / best_parse,
           (double)samples / best_parse / 1e6);
    printf("write Sample v2:   %7.1f ms  %8.1f MB/s of output\n", best_write * 1e3,
           (double)out_bytes / 1e6 / best_write);
    printf("decode + write:    %7.1f ms  %8.1f MB/s  %6.2f M samples/s\n", best_total * 1e3, mb / best_total,
           (double)samples / best_total / 1e6);
    printf("peak RSS (in-process, trace mapped): %.1f MB\n", (double)ru.ru_maxrss / 1024.0);
    munmap((void *)(uintptr_t)buf, len);
    close(fd);
    return 0;
}
