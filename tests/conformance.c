/*
 * conformance.c — the writer-side strict check (see conformance.h): walks
 * Trace.packet and the messages our writers emit repeated scalars in, and
 * flags a length-delimited record where the proto declares an unpacked
 * varint list.
 */
#include "conformance.h"

#include <stdio.h>

#include "perfetto/fields.h"
#include "wire/pb.h"

typedef struct checker {
    const uint8_t *base;
    long found;
    char *msg;
    size_t msg_size;
} checker;

/* Fields of one message that must be unpacked varints. */
static void check_unpacked(checker *c, tm_bytes msg, const char *name, const uint32_t *fields, size_t n,
                           const char *const *field_names) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK)
        for (size_t i = 0; i < n; i++) {
            if (f.num != fields[i] || f.wire != TM_PB_LEN) continue;
            if (!c->found++)
                snprintf(c->msg, c->msg_size, "byte %td: %s.%s is packed; the proto declares it unpacked",
                         f.start - c->base, name, field_names[i]);
        }
}

/* The sub-messages `field` of msg, each checked for the unpacked fields. */
static void check_children(checker *c, tm_bytes msg, uint32_t field, const char *name, const uint32_t *fields,
                           size_t n, const char *const *field_names) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK)
        if (f.num == field && f.wire == TM_PB_LEN) check_unpacked(c, f.bytes, name, fields, n, field_names);
}

static void check_packet(checker *c, tm_bytes packet) {
    static const uint32_t frame_ids[] = {TM_PF_CALLSTACK_FRAME_IDS}, path_ids[] = {TM_PF_MAPPING_PATH_STRING_IDS},
                          streaming[] = {TM_PF_STREAMING_CALLSTACK_IID, TM_PF_STREAMING_TIMESTAMP_DELTA_US},
                          followers[] = {TM_PF_PERF_SAMPLE_FOLLOWER_COUNTS}, nspid[] = {6}, nstid[] = {4};
    static const char *const frame_ids_n[] = {"frame_ids"}, *const path_ids_n[] = {"path_string_ids"},
                             *const streaming_n[] = {"callstack_iid", "timestamp_delta_us"},
                             *const followers_n[] = {"follower_counts"}, *const nspid_n[] = {"nspid"},
                             *const nstid_n[] = {"nstid"};
    tm_pb_reader r = tm_pb_reader_of(packet);
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK) {
        if (f.wire != TM_PB_LEN) continue;
        switch (f.num) {
        case TM_PF_PACKET_INTERNED_DATA:
            check_children(c, f.bytes, TM_PF_INTERNED_CALLSTACKS, "Callstack", frame_ids, 1, frame_ids_n);
            check_children(c, f.bytes, TM_PF_INTERNED_MAPPINGS, "Mapping", path_ids, 1, path_ids_n);
            break;
        case TM_PF_PACKET_STREAMING_PROFILE_PACKET:
            check_unpacked(c, f.bytes, "StreamingProfilePacket", streaming, 2, streaming_n);
            break;
        case TM_PF_PACKET_PERF_SAMPLE: check_unpacked(c, f.bytes, "PerfSample", followers, 1, followers_n); break;
        case TM_PF_PACKET_PROCESS_TREE:
            check_children(c, f.bytes, TM_PF_PROCESS_TREE_PROCESSES, "ProcessTree.Process", nspid, 1, nspid_n);
            check_children(c, f.bytes, TM_PF_PROCESS_TREE_THREADS, "ProcessTree.Thread", nstid, 1, nstid_n);
            break;
        default: break;
        }
    }
}

long tc_check_trace(const uint8_t *buf, size_t len, char *msg, size_t msg_size) {
    checker c = {buf, 0, msg, msg_size};
    if (msg_size) msg[0] = 0;
    tm_pb_reader r = tm_pb_reader_of((tm_bytes){buf, len});
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK)
        if (f.num == TM_PF_TRACE_PACKET && f.wire == TM_PB_LEN) check_packet(&c, f.bytes);
    if (rc == TM_PB_ERROR) {
        snprintf(msg, msg_size, "not a readable trace");
        return -1;
    }
    return c.found;
}
