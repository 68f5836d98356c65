/*
 * test_serve_sdk.c — `tracemill serve` driven by the real Sentry Python SDK
 * (Debian's python3-sentry-sdk): starts the server as a user does and runs
 * tests/test_serve_sdk.py against its DSN and store, which sends errors, an
 * attachment, a transaction, a session, a client report and a continuous
 * profiling chunk through the SDK and checks the answers, the stored chunk
 * (`tracemill store ls|get`) and the outcomes. Skipped when /usr/bin/python3
 * has no sentry_sdk.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tserve.h"

#define KEY "e12d836b15bb49d7bbf99e64295d995b"
#define SDK_PYTHON "/usr/bin/python3"
#define SDK_SCRIPT TM_SOURCE_DIR "/tests/test_serve_sdk.py"
/* the script's exit code when the SDK is absent (ctest's and automake's skip) */
#define SDK_ABSENT 77

Test(serve_sdk, python_sdk_round_trip) {
    int code;
    char *probe = ts_run_capture(SDK_PYTHON " -c 'import sentry_sdk' 2>/dev/null", &code);
    free(probe);
    if (code != 0) cr_skip_test("the Sentry SDK is not installed (apt-get install python3-sentry-sdk)");
    char *dir = ts_temp_dir("tm_serve_sdk");
    ts_server s = ts_server_start(dir, 0, "projects:\n  - id: 42\n    public_keys: [" KEY "]\n");
    char *cmd = ts_fmt(SDK_PYTHON " %s 'http://" KEY "@127.0.0.1:%d/42' '%s' '%s' 2>&1", SDK_SCRIPT, s.port, s.store,
                       TM_CLI);
    char *out = ts_run_capture(cmd, &code);
    cr_assert_neq(code, SDK_ABSENT, "%s", out);
    cr_assert_eq(code, 0, "%s", out);
    cr_assert(strstr(out, "ok: "), "%s", out);
    free(out), free(cmd), free(dir);
    cr_assert_eq(ts_server_stop(&s), 0);
    ts_server_free(&s);
}
