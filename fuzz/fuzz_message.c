/*
 * fuzz_message.c — fuzz target for the MessagePack decoder of stored and
 * spooled ProfileChunkKafkaMessages; what decodes must encode back to a
 * message that decodes to the same fields.
 */
#include "fuzz_common.h"
#include "server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_srv_chunk_msg m;
    char ctype[64];
    tm_error err;
    tm_status st = tm_srv_chunk_msg_decode(data, size, &m, ctype, sizeof ctype, &err);
    fuzz_check_error(st, &err);
    if (st != TM_OK) return 0;
    tm_srv_buf again = {0};
    if (tm_srv_chunk_msg_encode(&m, &again, &err) != TM_OK) abort();
    tm_srv_chunk_msg m2;
    char ctype2[64];
    if (tm_srv_chunk_msg_decode(again.data, again.len, &m2, ctype2, sizeof ctype2, &err) != TM_OK) abort();
    if (m2.project_id != m.project_id || m2.payload_len != m.payload_len ||
        (m.payload_len && memcmp(m2.payload, m.payload, m.payload_len) != 0) || m2.raw_profile_len != m.raw_profile_len)
        abort();
    tm_srv_buf_release(&again);
    return 0;
}
