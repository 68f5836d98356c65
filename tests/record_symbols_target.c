/*
 * record_symbols_target.c — the program the recorder's symbolization tests
 * profile (test_record_symbols.c), built with gcc -O2 -g: main calls
 * churn_outer (kept out of line), whose hot loop is churn_step, inlined
 * into it (always_inline), so that most samples fall on pcs whose DWARF
 * says "churn_step, inlined into churn_outer". It spins for the CPU
 * seconds given (default 1).
 *
 *   record_symbols_target SECONDS replace-self FILE
 *
 * first renames FILE over its own executable (as a rebuild of the program
 * while it is recorded replaces it; exits 2 if it cannot), then spins.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

static volatile uint64_t g_sink;

static inline __attribute__((always_inline)) uint64_t churn_step(uint64_t x) {
    for (int i = 0; i < 4096; i++) x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

__attribute__((noinline, noipa)) static uint64_t churn_outer(double seconds) {
    double end = cpu_seconds() + seconds;
    uint64_t x = 1;
    do x = churn_step(x);
    while (cpu_seconds() < end);
    return x;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[2], "replace-self") == 0) {
        char self[4096];
        ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
        if (n <= 0) return 2;
        self[n] = 0;
        if (rename(argv[3], self) != 0) {
            perror("record_symbols_target: rename over itself");
            return 2;
        }
    }
    g_sink = churn_outer(argc > 1 ? atof(argv[1]) : 1.0);
    return 0;
}
