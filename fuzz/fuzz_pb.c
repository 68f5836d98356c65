/*
 * fuzz_pb.c — fuzz target for the protobuf wire reader (src/pb.h): walks
 * any bytes as a message, descends into length-delimited fields as nested
 * messages (an explicit stack, 16 deep) and reads them as packed varints
 * and repeated fields too. The reader must never read outside the input
 * and must end every walk with DONE or ERROR.
 */
#include <stdint.h>
#include <stdlib.h>

#include "wire/pb.h"

#define MAX_DEPTH 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t observed;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_pb_reader stack[MAX_DEPTH];
    int depth = 0;
    stack[0] = tm_pb_reader_of((tm_bytes){data, size});
    uint64_t sink = 0;
    while (depth >= 0) {
        tm_pb_field f;
        int rc = tm_pb_next(&stack[depth], &f);
        if (rc != TM_PB_OK) {
            if (rc == TM_PB_ERROR && !stack[depth].err) abort(); /* an error always says why */
            depth--;
            continue;
        }
        if (f.wire == TM_PB_LEN) {
            if (f.bytes.data < data || f.bytes.data + f.bytes.len > data + size) abort();
            tm_pb_reader packed = tm_pb_reader_of(f.bytes);
            uint64_t v;
            while (tm_pb_packed_next(&packed, &v) == TM_PB_OK) sink += v;
            sink += tm_pb_packed_count(f.bytes);
            if (depth + 1 < MAX_DEPTH) stack[++depth] = tm_pb_reader_of(f.bytes);
        } else {
            sink += f.val;
        }
    }
    tm_pb_repeated it = tm_pb_repeated_of((tm_bytes){data, size}, 1);
    uint64_t v;
    while (tm_pb_repeated_next(&it, &v) == TM_PB_OK) sink += v;
    observed = sink; /* keeps the reads from being optimised away */
    return 0;
}
