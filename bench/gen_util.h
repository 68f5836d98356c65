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

/* Whether argv is OUT followed by pairs of a known option (known ends with
 * NULL) and a whole number: a mistyped option or `--help` must not become
 * the name of a file written over with a large trace. */
static inline int args_valid(int argc, char **argv, const char *const *known) {
    if (argc < 2 || argv[1][0] == '-') return 0;
    for (int i = 2; i < argc; i += 2) {
        int found = 0;
        for (const char *const *k = known; *k && !found; k++) found = strcmp(argv[i], *k) == 0;
        if (!found || i + 1 >= argc) return 0;
        char *end = NULL;
        strtoull(argv[i + 1], &end, 10);
        if (end == argv[i + 1] || *end) return 0;
    }
    return 1;
}

/* The value of option `name` (argv[2..]), or def. */
static inline uint64_t arg_u64(int argc, char **argv, const char *name, uint64_t def) {
    for (int i = 2; i + 1 < argc; i++)
        if (strcmp(argv[i], name) == 0) return strtoull(argv[i + 1], NULL, 10);
    return def;
}

#endif
