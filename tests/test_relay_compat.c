/*
 * test_relay_compat.c — TM_MODE_RELAY against Sentry Relay's own outputs.
 *
 * For every NAME.pftrace in fixtures/relay-compat/ the library (parse in
 * Relay mode, tm_write_sample_v2 with meta.json) must produce exactly the
 * bytes of expected/NAME.expand.json and, with remove_single_samples on,
 * expected/NAME.expand_remove_single.json. The
 * expected files end with the newline the CLI appends; the library writes
 * none. An expected file "error: <Variant>" means Relay rejects the trace and
 * tracemill must fail with err.reason == "<Variant>" (at parse or at write).
 * exactly_max_samples.pftrace has no expected file: 100 000 samples pass
 * (Relay's MAX_SAMPLES is a ">" test). A missing fixture, a missing
 * expected file or an empty directory fails the suite: a compatibility
 * test that silently compares nothing is worse than none.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tracemill.h"
#include "tutil.h"

#define RC_DIR TM_FIXTURES "/relay-compat"

/* ---- helpers ---- */

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Names (without .pftrace) of the traces in the fixture directory, sorted. */
static size_t list_traces(char ***out) {
    struct dirent **ents = NULL;
    int n = scandir(RC_DIR, &ents, NULL, alphasort);
    size_t count = 0;
    char **names = calloc(n > 0 ? (size_t)n : 1, sizeof *names);
    for (int i = 0; i < n; i++) {
        const char *d = ents[i]->d_name;
        size_t l = strlen(d);
        if (l > 8 && strcmp(d + l - 8, ".pftrace") == 0) {
            names[count] = malloc(l - 7);
            memcpy(names[count], d, l - 8);
            names[count][l - 8] = 0;
            count++;
        }
        free(ents[i]);
    }
    free(ents);
    *out = names;
    return count;
}

static void free_names(char **names, size_t n) {
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* Prints where two byte strings first differ, with some context. */
static void report_diff(const char *what, const char *got, size_t got_len, const char *exp, size_t exp_len) {
    size_t i = 0;
    while (i < got_len && i < exp_len && got[i] == exp[i]) i++;
    size_t from = i > 40 ? i - 40 : 0;
    size_t ge = got_len < i + 40 ? got_len : i + 40, ee = exp_len < i + 40 ? exp_len : i + 40;
    cr_log_error("%s: output differs at byte %zu (got %zu bytes, expected %zu)\n"
                 "  expected: ...%.*s...\n  got:      ...%.*s...",
                 what, i, got_len, exp_len, (int)(ee - from), exp + from, (int)(ge - from), got + from);
}

/* tm_write_sample_v2 with chunk metadata meta[0..meta_len) into out. */
static tm_status write_v2(const tm_trace *t, const char *meta, size_t meta_len, int remove_single,
                          tu_membuf *out, tm_error *err) {
    tm_sample_v2_options v2 = {0};
    v2.meta_json = meta;
    v2.meta_len = meta_len;
    v2.remove_single_samples = remove_single;
    tm_sink sink = {.write = tu_membuf_write, .ctx = out};
    return tm_write_sample_v2(t, &v2, &sink, err);
}

/* Runs one (trace, variant) pair against its expected file. Returns 1 when
 * the behaviour matches. */
static int check_case(const char *name, int remove_single, const char *meta, size_t meta_len) {
    char path[512], what[256];
    snprintf(what, sizeof what, "%s (%s)", name, remove_single ? "expand_remove_single" : "expand");
    snprintf(path, sizeof path, RC_DIR "/expected/%s.%s.json", name,
             remove_single ? "expand_remove_single" : "expand");
    size_t exp_len = 0, trace_len = 0;
    char *exp = tu_read_file(path, &exp_len);
    if (!exp) {
        cr_log_error("%s: expected file %s is missing", what, path);
        return 0;
    }
    snprintf(path, sizeof path, RC_DIR "/%s.pftrace", name);
    char *trace = tu_read_file(path, &trace_len);
    if (!trace) {
        cr_log_error("%s: cannot read %s", what, path);
        free(exp);
        return 0;
    }
    int ok = 0;
    if (exp_len == 0 || exp[exp_len - 1] != '\n' || (exp_len > 1 && exp[exp_len - 2] == '\n')) {
        cr_log_error("%s: expected file does not end with exactly one newline", what);
        goto out;
    }
    exp_len--; /* the CLI's trailing newline; the library writes none */

    const char *want_reason = NULL;
    char reason_buf[128];
    if (strncmp(exp, "error: ", 7) == 0) {
        snprintf(reason_buf, sizeof reason_buf, "%.*s", (int)(exp_len - 7), exp + 7);
        want_reason = reason_buf;
    }

    tm_options opts = {0};
    opts.mode = TM_MODE_RELAY;
    tm_trace *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_trace_parse(trace, trace_len, &opts, &t, &err);
    tu_membuf out = {0};
    if (st == TM_OK) st = write_v2(t, meta, meta_len, remove_single, &out, &err);
    if (want_reason) {
        if (st == TM_OK) cr_log_error("%s: succeeded, but Relay rejects it with %s", what, want_reason);
        else if (!err.reason || strcmp(err.reason, want_reason) != 0)
            cr_log_error("%s: failed with reason %s (%s: %s), Relay says %s", what,
                         err.reason ? err.reason : "(none)", tm_status_str(err.code), err.message,
                         want_reason);
        else ok = 1;
    } else if (st != TM_OK) {
        cr_log_error("%s: failed with %s / %s: %s", what, tm_status_str(err.code),
                     err.reason ? err.reason : "(no reason)", err.message);
    } else if (out.len != exp_len || memcmp(out.data, exp, exp_len) != 0) {
        report_diff(what, out.data ? out.data : "", out.len, exp, exp_len);
    } else {
        ok = 1;
    }
    tm_trace_free(t);
    free(out.data);
out:
    free(exp);
    free(trace);
    return ok;
}

/* ---- tests ---- */

/* The PR's converter tests, one fixture each. */
static const char *const known_fixtures[] = {
    "minimal", "empty", "invalid_protobuf", "missing_clock_snapshot", "mapping_resolution",
    "separate_namespaces", "incremental_state_reset", "incremental_state_reset_before_after",
    "frame_deduplication", "java_frame_splitting", "native_frame", "mapping_with_build_id",
    "main_thread_inferred_from_pid", "exceeds_max_samples", "exactly_max_samples", "multi_sequence",
    "empty_callstack",
};

Test(relay_compat, fixture_directory_is_complete) {
    char path[512];
    char **names = NULL;
    size_t n = list_traces(&names);
    cr_assert_gt(n, 0, "no .pftrace files in %s", RC_DIR);
    cr_expect(file_exists(RC_DIR "/meta.json"), "meta.json is missing");
    for (size_t k = 0; k < sizeof known_fixtures / sizeof *known_fixtures; k++) {
        snprintf(path, sizeof path, RC_DIR "/%s.pftrace", known_fixtures[k]);
        cr_expect(file_exists(path), "fixture %s is missing", path);
    }
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "exactly_max_samples") == 0) continue;
        snprintf(path, sizeof path, RC_DIR "/expected/%s.expand.json", names[i]);
        cr_expect(file_exists(path), "%s has no expected file %s", names[i], path);
        snprintf(path, sizeof path, RC_DIR "/expected/%s.expand_remove_single.json", names[i]);
        cr_expect(file_exists(path), "%s has no expected file %s", names[i], path);
    }
    free_names(names, n);
}

Test(relay_compat, every_fixture_reproduces_relay_bytes) {
    size_t meta_len = 0;
    char *meta = tu_read_file(RC_DIR "/meta.json", &meta_len);
    cr_assert_not_null(meta, "cannot read meta.json");
    char **names = NULL;
    size_t n = list_traces(&names), compared = 0, failed = 0;
    cr_assert_gt(n, 0, "no .pftrace files in %s", RC_DIR);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(names[i], "exactly_max_samples") == 0) continue;
        for (int rs = 0; rs <= 1; rs++) {
            compared++;
            if (!check_case(names[i], rs, meta, meta_len)) failed++;
        }
    }
    free_names(names, n);
    free(meta);
    cr_expect_geq(compared, 2 * (sizeof known_fixtures / sizeof *known_fixtures - 1),
                  "only %zu cases compared", compared);
    cr_assert_eq(failed, 0, "%zu of %zu fixture cases differ from Relay (details above)", failed, compared);
}

Test(relay_compat, exactly_max_samples_is_accepted) {
    size_t meta_len = 0, trace_len = 0;
    char *meta = tu_read_file(RC_DIR "/meta.json", &meta_len);
    char *trace = tu_read_file(RC_DIR "/exactly_max_samples.pftrace", &trace_len);
    cr_assert_not_null(meta, "cannot read meta.json");
    cr_assert_not_null(trace, "exactly_max_samples.pftrace is missing");
    tm_options opts = {0};
    opts.mode = TM_MODE_RELAY;
    tm_trace *t = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(trace, trace_len, &opts, &t, &err);
    cr_assert_eq(st, TM_OK, "parse failed: %s %s", err.reason ? err.reason : "", err.message);
    cr_expect_eq(tm_trace_get_stats(t)->samples_kept, 100000u);
    for (int rs = 0; rs <= 1; rs++) {
        tu_membuf out = {0};
        st = write_v2(t, meta, meta_len, rs, &out, &err);
        cr_assert_eq(st, TM_OK, "write failed (remove_single=%d): %s %s", rs, err.reason ? err.reason : "",
                     err.message);
        json_error_t je;
        json_t *root = json_loadb(out.data, out.len, 0, &je);
        cr_assert_not_null(root, "output is not JSON: %s at %d", je.text, je.position);
        json_t *samples = json_object_get(json_object_get(root, "profile"), "samples");
        cr_expect_eq(json_array_size(samples), 100000u, "samples: %zu", json_array_size(samples));
        /* Samples are 1 us apart; ms rounding keeps them sorted. */
        double last = json_number_value(json_object_get(json_array_get(samples, 99999), "timestamp"));
        cr_expect_eq(last, 1700000001.1, "last timestamp %.17g", last);
        json_decref(root);
        free(out.data);
    }
    tm_trace_free(t);
    free(trace);
    free(meta);
}
