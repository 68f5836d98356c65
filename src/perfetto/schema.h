/*
 * schema.h — checks a TracePacket payload's wire types against the schema
 * of its message (schema.c), for the reader.
 */
#ifndef TM_PERFETTO_SCHEMA_H
#define TM_PERFETTO_SCHEMA_H

#include "perfetto/fields.h"
#include "perfetto/reader.h"

/* Checks the packet's `oneof data` member, if it is one consumers read:
 * every field a consumer reads has the wire type its type allows, and
 * repeated varints and nested messages are well-formed. A PerfSample of
 * the common shape is read on the way (pk->perf_read). */
tm_status tm_pf_check_payload(const tm_pf_reader *r, tm_pf_packet *pk);
/* The same check without its one-pass shortcuts (plain messages, the
 * PerfSample read): its verdict and error must be tm_pf_check_payload's,
 * which tests compare on the same inputs. */
tm_status tm_pf_check_payload_general(const tm_pf_reader *r, const tm_pf_packet *pk);

/* A PerfSample of varints under one-byte tags: valid under either of its
 * schemas (none of fields 1-15 is length-delimited in them), so checked
 * and read in one pass; false leaves it to the general check. The reader
 * inlines it for the packets it reads in one pass (reader.c). */
static inline bool tm_pf_read_plain_perf_sample(tm_pf_packet *pk) {
    const uint8_t *p = pk->data.data, *end = p + pk->data.len;
    while (p < end) {
        uint8_t tag = *p++;
        /* field 1-15 (not 0, no second tag byte), wire type varint */
        if ((tag & (0x80 | 7)) || tag == 0 || p >= end) return false;
        uint64_t v;
        if (!(p = tm_pb_varint_fast(p, end, &v))) return false;
        switch (tag) {
        case TM_PF_PERF_SAMPLE_PID << 3: pk->perf_pid = (uint32_t)v, pk->perf_has_pid = true; break;
        case TM_PF_PERF_SAMPLE_TID << 3: pk->perf_tid = (uint32_t)v; break;
        case TM_PF_PERF_SAMPLE_CALLSTACK_IID << 3: pk->perf_cs = v, pk->perf_has_cs = true; break;
        case TM_PF_PERF_SAMPLE_TIMEBASE_COUNT << 3: pk->perf_count = v; break;
        default: break;
        }
    }
    pk->perf_read = true;
    return true;
}

#endif
