/*
 * gen_util.h — what the trace generators share: their options and a
 * deterministic random number source (xorshift), so a generated trace is
 * the same on every run.
 */
#ifndef TM_GEN_UTIL_H
#define TM_GEN_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static inline uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* The value of option `name` (argv[2..]), or def. */
static inline uint64_t arg_u64(int argc, char **argv, const char *name, uint64_t def) {
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return strtoull(argv[i + 1], NULL, 10);
    return def;
}

#endif
