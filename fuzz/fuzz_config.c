/*
 * fuzz_config.c — fuzz target for the server's YAML configuration loader
 * (libyaml underneath): parse on top of the defaults, validate, look up a
 * key, release.
 */
#include "fuzz_common.h"
#include "server.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_srv_config cfg;
    tm_error err;
    if (tm_srv_config_init(&cfg, &err) != TM_OK) abort();
    tm_status st = tm_srv_config_parse(&cfg, (const char *)data, size, &err);
    fuzz_check_error(st, &err);
    if (st == TM_OK) {
        const char *generated = NULL;
        st = tm_srv_config_finish(&cfg, &generated, &err);
        fuzz_check_error(st, &err);
        if (st == TM_OK) {
            if (cfg.n_projects == 0) abort();
            const tm_srv_project *p = NULL;
            const char *k = cfg.projects[0].public_keys[0];
            if (tm_srv_config_authenticate(&cfg, cfg.projects[0].id, k, strlen(k), &p) != TM_SRV_AUTH_OK) abort();
        }
    }
    tm_srv_config_release(&cfg);
    return 0;
}
