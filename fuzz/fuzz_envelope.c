/*
 * fuzz_envelope.c — fuzz target for the server's envelope handling as far
 * as it goes without sockets: the envelope parser and item split, then
 * tm_srv_process (Relay's profile_chunk rules, Perfetto conversion, JSON
 * normalisation, outcomes) under the server's default limits.
 */
#include "fuzz_common.h"
#include "server.h"

static char key[] = "e12d836b15bb49d7bbf99e64295d995b";
static char *keys[] = {key};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_srv_envelope env;
    tm_error err;
    tm_status st = tm_srv_envelope_parse(data, size, &env, &err);
    fuzz_check_error(st, &err);
    if (st == TM_OK) {
        for (size_t i = 0; i < env.n_items; i++) {
            const tm_srv_item *it = &env.items[i];
            if (it->payload < data || it->payload + it->payload_len > data + size) abort();
            tm_srv_view json, raw;
            tm_srv_item_split(it, &json, &raw);
            if (json.len + raw.len > it->payload_len) abort();
        }
        tm_srv_envelope_release(&env);
    }
    tm_srv_config cfg;
    if (tm_srv_config_init(&cfg, &err) != TM_OK) abort();
    tm_srv_project project = {.id = 42, .organization_id = 1, .public_keys = keys, .n_public_keys = 1,
                              .retention_days = 90, .continuous_profiling = 1, .continuous_profiling_perfetto = 1};
    cfg.limits.max_profile_size = 4u << 20;
    tm_srv_context ctx = {.cfg = &cfg, .project = &project, .now_unix = 1771278043, .keep_other_items = size & 1};
    tm_srv_processed out;
    st = tm_srv_process(&ctx, data, size, &out, &err);
    fuzz_check_error(st, &err);
    if (st == TM_OK) {
        for (size_t i = 0; i < out.n_records; i++)
            if (!out.records[i].value || !out.records[i].value_len) abort();
        tm_srv_processed_release(&out);
    }
    tm_srv_config_release(&cfg);
    return 0;
}
