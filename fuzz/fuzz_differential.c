/*
 * fuzz_differential.c — fuzz target for the agreement of tracemill's two
 * Perfetto readers: tm_diff_check (tests/differential.h) runs the profile
 * model (convert/info) and the SQL model (query) on the input and aborts
 * when they disagree: one accepts and the other rejects, both reject with
 * another status or offset, or they keep other samples.
 *
 * Known divergence classes of today's readers (see the `divergence` suite
 * of tests/test_differential.c), which the fuzzer finds at once and which
 * the seed corpus fuzz/corpus/differential therefore avoids:
 *  (a) compressed_packets nested in a compressed payload;
 *  (b) wire types the field does not allow, which the profile model
 *      rejects and the SQL model skips (e.g. ClockSnapshot.Clock field 4);
 *  (c) max_interned_entries, per sequence in one and per trace in the other;
 *  (d) unit_multiplier_ns of incremental sequence-scoped clocks;
 *  (e) several members of TracePacket's oneof data in one packet;
 * and the differences in where each reports an error (offsets inside
 * compressed payloads, the first bytes: the SQL model wants a TracePacket
 * first).
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
