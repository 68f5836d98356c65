/*
 * fuzz_differential.c — fuzz target for the agreement of tracemill's two
 * Perfetto readers: tm_diff_check (tests/differential.h) runs the profile
 * model (convert/info) and the SQL model (query) on the input and aborts
 * when they disagree: one accepts and the other rejects, both reject with
 * another status or offset, or they keep other samples.
 *
 * Known divergence classes of today's readers (the letters of
 * tests/test_differential.c: its `divergence` suite and its list of
 * disagreeing hostile traces), which the fuzzer finds at once and which
 * the seed corpus fuzz/corpus/differential therefore avoids:
 *  (a) compressed_packets nested in a compressed payload;
 *  (b) a wire type the field does not allow: the profile model rejects,
 *      the SQL model skips the field (e.g. ClockSnapshot.Clock field 4);
 *  (c) max_interned_entries: per sequence in one, per trace in the other;
 *  (d) unit_multiplier_ns of an incremental sequence-scoped clock;
 *  (e) two members of TracePacket's oneof data in one packet;
 *  (f) a truncated packed varint only the profile model reads;
 *  (g) the offset reported for an error in or of a compressed payload, and
 *      for a limit;
 *  (h) timestamps past int64: dropped by one, kept by the other;
 *  (i) StreamingProfilePacket without a thread descriptor;
 * and, at the first byte, the SQL model wants a TracePacket (0x0a).
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
