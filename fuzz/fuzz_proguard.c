/*
 * fuzz_proguard.c — fuzz target for the ProGuard/R8 mapping-file reader
 * (src/symbolize/proguard.c): any text becomes a DeobfuscationMapping
 * packet that the trace reader's walker (perfetto/symbols.c) reads back
 * whole, class and method counts agreeing.
 */
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "perfetto/fields.h"
#include "perfetto/symbols.h"
#include "symbolize/symbolize.h"
#include "wire/pb.h"

typedef struct seen {
    uint64_t classes, methods;
} seen;

static tm_status count(void *ctx, const tm_pf_deobf *d) {
    seen *s = ctx;
    if (d->obf_method.data) s->methods++;
    else s->classes++;
    return TM_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_mem mem;
    tm_mem_init(&mem, NULL);
    tm_obuf out;
    tm_obuf_init(&out, &mem);
    tm_proguard_counts c;
    if (tm_proguard_encode((const char *)data, size, size % 2 ? "com.example" : NULL, &out, &c) != TM_OK) abort();
    /* one Trace.packet holding one deobfuscation_mapping */
    tm_pb_reader r = tm_pb_reader_of((tm_bytes){out.data, out.len});
    tm_pb_field f;
    if (tm_pb_next(&r, &f) != TM_PB_OK || f.num != TM_PF_TRACE_PACKET || f.wire != TM_PB_LEN) abort();
    tm_pb_reader pr = tm_pb_reader_of(f.bytes);
    tm_pb_field g;
    if (tm_pb_next(&pr, &g) != TM_PB_OK || g.num != TM_PF_PACKET_DEOBFUSCATION_MAPPING || g.wire != TM_PB_LEN) abort();
    seen s = {0, 0};
    tm_pf_walk_error bad;
    if (tm_pf_deobfuscation(g.bytes, count, &s, &bad) != TM_OK) abort();
    if (s.classes != c.classes || s.methods != c.methods) abort();
    if (tm_pb_next(&r, &f) != TM_PB_DONE) abort();
    tm_obuf_free(&out);
    return 0;
}
