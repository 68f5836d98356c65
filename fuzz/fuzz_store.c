/*
 * fuzz_store.c — fuzz target for the legacy store endpoint's body (one JSON
 * event): tm_srv_event_envelope, whose envelope must then parse with one
 * item carrying the event byte for byte, and tm_srv_process on it.
 */
#include "fuzz_common.h"
#include "server.h"

static char key[] = "e12d836b15bb49d7bbf99e64295d995b";
static char *keys[] = {key};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_srv_buf wrapped = {0};
    tm_error err;
    tm_status st = tm_srv_event_envelope(data, size, &wrapped, &err);
    fuzz_check_error(st, &err);
    if (st != TM_OK) {
        tm_srv_buf_release(&wrapped);
        return 0;
    }
    /* the envelope made of an accepted event is one the server reads back */
    tm_srv_envelope env;
    if (tm_srv_envelope_parse(wrapped.data, wrapped.len, &env, &err) != TM_OK || env.n_items != 1 ||
        env.items[0].payload_len != size || memcmp(env.items[0].payload, data, size) != 0)
        abort();
    tm_srv_envelope_release(&env);
    tm_srv_config cfg;
    if (tm_srv_config_init(&cfg, &err) != TM_OK) abort();
    tm_srv_project project = {.id = 42, .organization_id = 1, .public_keys = keys, .n_public_keys = 1,
                              .retention_days = 90, .continuous_profiling = 1, .continuous_profiling_perfetto = 1};
    tm_srv_context ctx = {.cfg = &cfg, .project = &project, .now_unix = 1771278043, .keep_other_items = size & 1};
    tm_srv_processed out;
    st = tm_srv_process(&ctx, wrapped.data, wrapped.len, &out, &err);
    fuzz_check_error(st, &err);
    if (st == TM_OK) tm_srv_processed_release(&out);
    tm_srv_config_release(&cfg);
    tm_srv_buf_release(&wrapped);
    return 0;
}
