/*
 * fuzz_request.c — fuzz target for a request body as the HTTP layer
 * receives it: the first byte picks the Content-Encoding and how the body
 * is cut into pieces, the rest is streamed through the decoder (capped at
 * 8 MiB) and the decoded envelope is processed.
 */
#include "fuzz_common.h"
#include "server.h"

static char key[] = "e12d836b15bb49d7bbf99e64295d995b";
static char *keys[] = {key};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    tm_srv_encoding enc = (tm_srv_encoding)(data[0] % 5);
    size_t piece = 1 + (size_t)(data[0] >> 3) * 97;
    data++, size--;
    tm_srv_decoder *d = NULL;
    tm_error err;
    if (tm_srv_decoder_new(enc, 8u << 20, &d, &err) != TM_OK) abort();
    tm_srv_buf body = {0};
    tm_status st = TM_OK;
    for (size_t at = 0; st == TM_OK && at < size; at += piece)
        st = tm_srv_decoder_feed(d, data + at, size - at < piece ? size - at : piece, &body, &err);
    if (st == TM_OK) st = tm_srv_decoder_finish(d, &body, &err);
    fuzz_check_error(st, &err);
    if (body.len > (8u << 20)) abort();
    tm_srv_decoder_free(d);
    if (st == TM_OK) {
        tm_srv_config cfg;
        if (tm_srv_config_init(&cfg, &err) != TM_OK) abort();
        tm_srv_project project = {.id = 1, .organization_id = 1, .public_keys = keys, .n_public_keys = 1,
                                  .retention_days = 90, .continuous_profiling = 1,
                                  .continuous_profiling_perfetto = 1};
        tm_srv_context ctx = {.cfg = &cfg, .project = &project, .now_unix = 1771278043};
        tm_srv_processed out;
        if (tm_srv_process(&ctx, body.data, body.len, &out, &err) == TM_OK) tm_srv_processed_release(&out);
        tm_srv_config_release(&cfg);
    }
    tm_srv_buf_release(&body);
    return 0;
}
