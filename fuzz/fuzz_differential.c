/*
 * fuzz_differential.c — fuzz target for the agreement of tracemill's two
 * Perfetto readers: tm_diff_check (tests/differential.h) runs the profile
 * model (convert/info) and the SQL model (query) on the input and aborts
 * when they disagree: one accepts and the other rejects, both reject with
 * another status or offset, or they keep other samples.
 *
 * The classes of disagreement the two readings had before they shared one
 * reader are the `divergence` suite of tests/test_differential.c.
 */
#include <stdio.h>

#include "differential.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_diff_report r;
    if (!tm_diff_check(data, size, &r)) {
        fprintf(stderr, "fuzz_differential: the readers disagree: %s\n", r.message);
        abort();
    }
    return 0;
}
