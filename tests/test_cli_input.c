/*
 * test_cli_input.c — what tracemill does with the input it is given, from
 * the library's entry points and the command: the max_input_bytes bound on
 * files, pipes and devices.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tutil.h"
#include "tracemill.h"

#define RC_DIR TM_FIXTURES "/relay-compat"
#define MINIMAL RC_DIR "/minimal.pftrace"
#define CLI TM_CLI

typedef struct shell_result {
    int code; /* exit status; -1 if the command did not exit normally */
    char *out, *err;
    size_t out_len;
} shell_result;

/* Runs a shell command line (printf-style) with stdout and stderr captured. */
static shell_result shell(const char *fmt, ...) {
    char line[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    char out_path[] = "/tmp/tm_input_out_XXXXXX", err_path[] = "/tmp/tm_input_err_XXXXXX";
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    cr_assert(fo >= 0 && fe >= 0, "mkstemp failed");
    close(fo);
    close(fe);
    snprintf(cmd, sizeof cmd, "( %s ) >%s 2>%s", line, out_path, err_path);
    int st = system(cmd);
    shell_result r;
    r.code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = tu_read_file(out_path, &r.out_len);
    r.err = tu_read_file(err_path, NULL);
    remove(out_path);
    remove(err_path);
    cr_assert(r.out && r.err, "cannot read the captured output");
    return r;
}

static void shell_free(shell_result *r) {
    free(r->out);
    free(r->err);
}

/* The command exits 1 and stderr holds every one of the NULL-ended needles. */
static void expect_rejected(const char *cmd, ...) {
    shell_result r = shell("%s", cmd);
    cr_expect_eq(r.code, 1, "`%s`: exit %d, not 1: %s", cmd, r.code, r.err);
    va_list ap;
    va_start(ap, cmd);
    for (const char *needle; (needle = va_arg(ap, const char *));)
        cr_expect(strstr(r.err, needle), "`%s`: stderr lacks \"%s\": %s", cmd, needle, r.err);
    va_end(ap);
    shell_free(&r);
}

/* ---- max_input_bytes ---- */

Test(input_limit, presets_bound_the_input) {
    tm_limits l;
    tm_limits_preset(TM_LIMITS_GENEROUS, &l);
    cr_expect_eq(l.max_input_bytes, 4ull << 30);
    tm_limits_preset(TM_LIMITS_RELAY, &l);
    cr_expect_eq(l.max_input_bytes, 50ull << 20, "Relay's max_profile_size is 50 MiB");
}

Test(input_limit, library_rejects_a_buffer_past_the_limit) {
    size_t len;
    char *buf = tu_read_file(MINIMAL, &len);
    cr_assert_not_null(buf);
    tm_options opts = {0};
    opts.limits.max_input_bytes = len - 1;
    tm_trace *t = NULL;
    tm_error err;
    cr_expect_eq(tm_trace_parse(buf, len, &opts, &t, &err), TM_ERR_LIMIT);
    cr_expect_eq(err.offset, len - 1);
    cr_expect(strstr(err.message, "max_input_bytes"), "%s", err.message);
    tm_db *db = NULL;
    cr_expect_eq(tm_db_open(buf, len, &opts, &db, &err), TM_ERR_LIMIT);
    cr_expect_null(db);
    opts.limits.max_input_bytes = len;
    cr_expect_eq(tm_trace_parse(buf, len, &opts, &t, &err), TM_OK, "%s", err.message);
    tm_trace_free(t);
    free(buf);
}

Test(input_limit, cli_stops_reading_pipes_and_devices_at_the_limit) {
    expect_rejected(CLI " convert --max-input-bytes 1M - < /dev/zero", "standard input: TM_ERR_LIMIT at byte 1000000",
                    "--max-input-bytes", NULL);
    expect_rejected(CLI " convert --max-input-bytes 1M /dev/urandom", "/dev/urandom: TM_ERR_LIMIT at byte 1000000",
                    NULL);
    expect_rejected(CLI " convert --max-input-bytes 1M --meta /dev/zero " MINIMAL, "/dev/zero: TM_ERR_LIMIT", NULL);
    expect_rejected(CLI " info --max-input-bytes 100 " MINIMAL, "TM_ERR_LIMIT at byte 100", NULL);
    expect_rejected(CLI " query --max-input-bytes 100 " MINIMAL " 'select 1'", "TM_ERR_LIMIT at byte 100", NULL);
    /* --compat relay reads at most Relay's 50 MiB */
    expect_rejected("head -c 60000000 /dev/zero | " CLI " convert --compat relay -", "TM_ERR_LIMIT at byte 52428800",
                    NULL);
    shell_result r = shell(CLI " info --max-input-bytes 121 - < " MINIMAL);
    cr_expect_eq(r.code, 0, "a 121-byte trace within --max-input-bytes 121: exit %d: %s", r.code, r.err);
    shell_free(&r);
}

/* ---- empty input ---- */

Test(input_empty, library_names_empty_input) {
    tm_trace *t = NULL;
    tm_db *db = NULL;
    tm_error err;
    static const char nothing[1];
    cr_expect_eq(tm_trace_parse(nothing, 0, NULL, &t, &err), TM_ERR_EMPTY);
    cr_expect_null(t);
    cr_expect(strstr(err.message, "empty input"), "%s", err.message);
    cr_expect_str_eq(tm_status_str(TM_ERR_EMPTY), "TM_ERR_EMPTY");
    cr_expect_eq(tm_db_open(nothing, 0, NULL, &db, &err), TM_ERR_EMPTY);
    cr_expect_null(db);
    /* Relay answers an empty trace with NotEnoughSamples */
    tm_options relay = {.mode = TM_MODE_RELAY};
    cr_expect_eq(tm_trace_parse(NULL, 0, &relay, &t, &err), TM_ERR_EMPTY);
    cr_expect(err.reason && strcmp(err.reason, "NotEnoughSamples") == 0);
}

Test(input_empty, every_command_rejects_empty_input) {
    static const char *const commands[] = {
        "convert -f folded",     "convert -f svg", "convert -f pprof -o /dev/null", "convert -f speedscope",
        "convert -f report",     "convert",        "info",                          "info --json",
        "convert --input-format folded -f folded", "diff -f folded " MINIMAL,
    };
    for (size_t i = 0; i < sizeof commands / sizeof *commands; i++) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, CLI " %s - < /dev/null", commands[i]);
        expect_rejected(cmd, "TM_ERR_EMPTY at byte 0: empty input", NULL);
        snprintf(cmd, sizeof cmd, CLI " %s /dev/null", commands[i]);
        expect_rejected(cmd, "/dev/null: TM_ERR_EMPTY", NULL);
    }
    expect_rejected(": | " CLI " query - 'select 1'", "TM_ERR_EMPTY", NULL);
    expect_rejected(CLI " export-sqlite /dev/null /dev/null", "TM_ERR_EMPTY", NULL);
    expect_rejected(CLI " info " RC_DIR "/empty.pftrace", "empty.pftrace: TM_ERR_EMPTY", NULL);
}
