/*
 * test_cli.c — the tracemill command as a user runs it (design.md,
 * "Command-line contract"): the built binary (TM_CLI) is run through the
 * shell with stdout and stderr captured in temporary files.
 *
 * Covered: exit codes (0 ok, 1 rejected input with "<kind> at byte N",
 * 2 usage, 3 I/O); `-` as stdin and stdout; `-o FILE` written atomically
 * (no FILE.tmp-* left, nothing written for a rejected trace, an existing
 * file kept); `-o /dev/null` must leave /dev/null a character device (an
 * earlier version renamed its temp file over it); `--compat relay --meta`
 * reproducing Relay's bytes plus a newline; `info` and `info --json`;
 * `--max-samples`; `--version` and `help`; usage errors of the exporter
 * options and of `diff`.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tutil.h"

#define RC_DIR TM_FIXTURES "/relay-compat"
#define MINIMAL RC_DIR "/minimal.pftrace"
#define META RC_DIR "/meta.json"

/* ---- helpers ---- */

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

typedef struct run_result {
    int code;     /* exit status; -1 if the command did not exit normally */
    char *out, *err;
    size_t out_len, err_len;
} run_result;

static void run_free(run_result *r) {
    free(r->out);
    free(r->err);
}

/* Runs `TM_CLI <args>` through /bin/sh (args may hold redirections) and
 * captures stdout and stderr. */
static run_result run(const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    char out_path[] = "/tmp/tm_cli_out_XXXXXX", err_path[] = "/tmp/tm_cli_err_XXXXXX";
    int fo = mkstemp(out_path), fe = mkstemp(err_path);
    cr_assert(fo >= 0 && fe >= 0, "mkstemp failed");
    close(fo);
    close(fe);
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>%s", TM_CLI, args, out_path, err_path);
    int st = system(cmd);
    run_result r;
    r.code = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    r.out = tu_read_file(out_path, &r.out_len);
    r.err = tu_read_file(err_path, &r.err_len);
    remove(out_path);
    remove(err_path);
    cr_assert(r.out && r.err, "cannot read the captured output");
    return r;
}

/* expected/minimal.expand.json: Relay's bytes + the CLI's newline. */
static char *expected_minimal(size_t *len) {
    char *e = tu_read_file(RC_DIR "/expected/minimal.expand.json", len);
    cr_assert_not_null(e, "expected/minimal.expand.json is missing");
    cr_assert(*len > 1 && e[*len - 1] == '\n' && e[*len - 2] == '}', "unexpected expected file");
    return e;
}

/* A scratch directory per test, removed (with its files) at the end. */
static char scratch[64];

static void make_scratch(void) {
    snprintf(scratch, sizeof scratch, "/tmp/tm_cli_dir_XXXXXX");
    cr_assert_not_null(mkdtemp(scratch), "mkdtemp failed");
}

static size_t count_entries(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            strncmp(e->d_name, prefix, strlen(prefix)) == 0)
            n++;
    closedir(d);
    return n;
}

static void remove_scratch(void) {
    DIR *d = opendir(scratch);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", scratch, e->d_name);
        remove(p);
    }
    closedir(d);
    rmdir(scratch);
}

static int matches(const char *text, const char *pattern) {
    regex_t re;
    cr_assert_eq(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0, "bad regex %s", pattern);
    int ok = regexec(&re, text, 0, NULL, 0) == 0;
    regfree(&re);
    return ok;
}

static void expect_dev_null_intact(void) {
    struct stat st;
    cr_assert_eq(stat("/dev/null", &st), 0);
    cr_assert(S_ISCHR(st.st_mode), "/dev/null is no longer a character device (mode %o)",
              (unsigned)st.st_mode);
}

/* ---- exit codes ---- */

Test(cli_exit, usage_errors_exit_2) {
    static const char *const cases[] = {
        "",                                              /* no arguments */
        "frobnicate " MINIMAL,                           /* unknown command */
        "convert --bogus " MINIMAL,                      /* unknown option */
        "convert -f xml " MINIMAL,                       /* unknown format */
        "convert -f",                                    /* -f without a value */
        "convert --max-samples abc " MINIMAL,            /* not a number */
        "convert --max-samples -5 " MINIMAL,             /* negative */
        "convert --max-samples 0 " MINIMAL,              /* must be positive */
        "convert --max-samples 12Q " MINIMAL,            /* bad suffix */
        "convert --max-samples 99999999999999999999 " MINIMAL, /* overflow */
        "convert --max-samples",                         /* missing value */
        "convert --compat foo " MINIMAL,                 /* unknown compat mode */
        "convert",                                       /* no trace */
        "convert " MINIMAL " " MINIMAL,                  /* two traces */
        "info --bogus " MINIMAL,
        "info",
        "convert --per-thread -f folded -o /tmp " MINIMAL, /* --per-thread is pprof only */
        "convert --per-thread -f pprof " MINIMAL,        /* ... and needs -o DIR */
        "convert --period 0 -f pprof -o /dev/null " MINIMAL, /* zero period */
        "convert --period 10parsecs " MINIMAL,           /* unknown unit */
        "convert --input-format xml " MINIMAL,           /* unknown input format */
        "convert --thread " MINIMAL,                     /* --thread swallows the trace: none left */
        "convert --width 5 -f svg " MINIMAL,             /* too narrow */
        "convert -f folded --thread nosuchthread " MINIMAL, /* filter matching nothing */
        "convert --compat relay --input-format folded " MINIMAL, /* relay is Perfetto only */
        "diff " MINIMAL,                                 /* one profile */
        "diff " MINIMAL " " MINIMAL " " MINIMAL,         /* three */
        "diff -f pprof " MINIMAL " " MINIMAL,            /* diff writes svg or folded */
        "diff - -",                                      /* stdin twice */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("%s", cases[i]);
        cr_expect_eq(r.code, 2, "`tracemill %s` exited %d, want 2; stderr: %s", cases[i], r.code, r.err);
        cr_expect_gt(r.err_len, 0u, "`tracemill %s` printed no message", cases[i]);
        cr_expect_eq(r.out_len, 0u, "`tracemill %s` wrote to stdout: %s", cases[i], r.out);
        run_free(&r);
    }
}

Test(cli_exit, missing_input_is_io_error_3) {
    run_result r = run("convert /nonexistent/trace.pftrace");
    cr_expect_eq(r.code, 3, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "/nonexistent/trace.pftrace"), "message does not name the file: %s", r.err);
    run_free(&r);
    r = run("info /nonexistent/trace.pftrace");
    cr_expect_eq(r.code, 3, "info: exit %d: %s", r.code, r.err);
    run_free(&r);
    r = run("convert --meta /nonexistent/meta.json " MINIMAL);
    cr_expect_eq(r.code, 3, "missing --meta file: exit %d: %s", r.code, r.err);
    run_free(&r);
}

Test(cli_exit, output_into_missing_directory_is_io_error_3) {
    run_result r = run("convert -o /nonexistent_dir_tm/out.json " MINIMAL);
    cr_expect_eq(r.code, 3, "exit %d: %s", r.code, r.err);
    cr_expect_gt(r.err_len, 0u);
    cr_expect_eq(r.out_len, 0u, "wrote to stdout instead: %s", r.out);
    run_free(&r);
}

/* Exit 1 and "tracemill: FILE: <kind> at byte N: message". */
Test(cli_exit, rejected_input_exits_1_naming_kind_and_offset) {
    static const struct {
        const char *args, *kind;
    } cases[] = {
        {RC_DIR "/invalid_protobuf.pftrace", "TM_ERR_MALFORMED"},
        {"--compat relay --meta " META " " RC_DIR "/invalid_protobuf.pftrace", "InvalidSampledProfile"},
        {"--compat relay --meta " META " " RC_DIR "/empty.pftrace", "NotEnoughSamples"},
        {"--compat relay --meta " META " " RC_DIR "/missing_clock_snapshot.pftrace", "InvalidSampledProfile"},
        {"--compat relay --meta " META " " RC_DIR "/exceeds_max_samples.pftrace", "ExceedSizeLimit"},
    };
    char pattern[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("convert %s", cases[i].args);
        cr_expect_eq(r.code, 1, "`convert %s` exited %d: %s", cases[i].args, r.code, r.err);
        snprintf(pattern, sizeof pattern, "^tracemill: [^\n]*: %s at byte [0-9]+: ", cases[i].kind);
        cr_expect(matches(r.err, pattern), "`convert %s`: stderr %s does not match %s", cases[i].args, r.err,
                  pattern);
        cr_expect_eq(r.out_len, 0u, "`convert %s` wrote output: %s", cases[i].args, r.out);
        run_free(&r);
    }
}

/* A trace cut short: the offset points into the file. */
Test(cli_exit, truncated_trace_reports_offset_inside_file) {
    size_t len = 0;
    char *trace = tu_read_file(MINIMAL, &len);
    cr_assert_not_null(trace);
    make_scratch();
    char path[128];
    snprintf(path, sizeof path, "%s/cut.pftrace", scratch);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    fwrite(trace, 1, len - 5, f);
    fclose(f);
    run_result r = run("convert %s", path);
    cr_expect_eq(r.code, 1, "exit %d: %s", r.code, r.err);
    cr_expect(matches(r.err, "TM_ERR_TRUNCATED at byte [0-9]+"), "stderr: %s", r.err);
    const char *at = strstr(r.err, "at byte ");
    if (at) {
        unsigned long long off = strtoull(at + 8, NULL, 10);
        cr_expect_lt(off, (unsigned long long)(len - 5), "offset %llu beyond the %zu-byte file", off,
                     len - 5);
    }
    run_free(&r);
    free(trace);
    remove_scratch();
}

Test(cli_exit, max_samples_limit_rejects_with_exit_1) {
    run_result r = run("convert --max-samples 1 " MINIMAL);
    cr_expect_eq(r.code, 1, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "max_samples"), "stderr does not name the limit: %s", r.err);
    cr_expect_eq(r.out_len, 0u);
    run_free(&r);
    r = run("convert --max-samples 2 " MINIMAL);
    cr_expect_eq(r.code, 0, "2 samples within --max-samples 2: exit %d: %s", r.code, r.err);
    run_free(&r);
}

/* ---- input and output plumbing ---- */

Test(cli_io, relay_output_to_stdout_matches_expected_plus_newline) {
    size_t exp_len;
    char *exp = expected_minimal(&exp_len);
    static const char *const cases[] = {
        "convert --compat relay --meta " META " " MINIMAL,
        "convert --compat relay --meta " META " -o - " MINIMAL,
        "convert --compat relay --meta " META " - < " MINIMAL,
        "convert -o - --meta " META " --compat relay - < " MINIMAL,
        "convert --compat relay --meta " META " -f sample-v2 " MINIMAL,
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("%s", cases[i]);
        cr_expect_eq(r.code, 0, "`%s` exited %d: %s", cases[i], r.code, r.err);
        cr_expect(r.out_len == exp_len && memcmp(r.out, exp, exp_len) == 0,
                  "`%s` output differs:\n got %s\nwant %s", cases[i], r.out, exp);
        cr_expect_eq(r.err_len, 0u, "`%s` printed to stderr: %s", cases[i], r.err);
        run_free(&r);
    }
    free(exp);
}

Test(cli_io, output_file_is_written_whole_without_temp_files) {
    size_t exp_len, got_len;
    char *exp = expected_minimal(&exp_len);
    make_scratch();
    char out[128];
    snprintf(out, sizeof out, "%s/out.json", scratch);
    run_result r = run("convert --compat relay --meta " META " -o %s " MINIMAL, out);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect_eq(r.out_len, 0u, "stdout not empty with -o FILE: %s", r.out);
    char *got = tu_read_file(out, &got_len);
    cr_assert_not_null(got, "no output file");
    cr_expect(got_len == exp_len && memcmp(got, exp, exp_len) == 0, "file differs:\n got %s\nwant %s", got,
              exp);
    cr_expect_eq(count_entries(scratch, "out.json.tmp"), 0u, "a temporary file was left behind");
    cr_expect_eq(count_entries(scratch, ""), 1u, "unexpected files in the output directory");
    free(got);
    run_free(&r);

    /* overwriting an existing file works the same way */
    r = run("convert --compat relay --meta " META " -o %s " MINIMAL, out);
    cr_expect_eq(r.code, 0, "second run: exit %d: %s", r.code, r.err);
    got = tu_read_file(out, &got_len);
    cr_expect(got && got_len == exp_len && memcmp(got, exp, exp_len) == 0, "overwritten file differs");
    cr_expect_eq(count_entries(scratch, ""), 1u);
    free(got);
    run_free(&r);
    free(exp);
    remove_scratch();
}

Test(cli_io, rejected_trace_leaves_no_output_file) {
    make_scratch();
    char out[128];
    snprintf(out, sizeof out, "%s/out.json", scratch);
    /* rejected by the decoder */
    run_result r = run("convert -o %s " RC_DIR "/invalid_protobuf.pftrace", out);
    cr_expect_eq(r.code, 1, "exit %d: %s", r.code, r.err);
    cr_expect_not(exists(out), "output file created for a rejected trace");
    cr_expect_eq(count_entries(scratch, ""), 0u, "files left in the output directory");
    run_free(&r);
    /* rejected by the writer (after the output was opened) */
    r = run("convert --compat relay --meta " META " -o %s " RC_DIR "/empty.pftrace", out);
    cr_expect_eq(r.code, 1, "exit %d: %s", r.code, r.err);
    cr_expect_not(exists(out), "output file created for a rejected trace");
    cr_expect_eq(count_entries(scratch, ""), 0u, "files left in the output directory");
    run_free(&r);
    /* an existing file is left as it was */
    FILE *f = fopen(out, "wb");
    cr_assert_not_null(f);
    fputs("previous\n", f);
    fclose(f);
    r = run("convert --compat relay --meta " META " -o %s " RC_DIR "/empty.pftrace", out);
    cr_expect_eq(r.code, 1);
    char *kept = tu_read_file(out, NULL);
    cr_expect(kept && strcmp(kept, "previous\n") == 0, "existing output replaced by a failed run: %s",
              kept ? kept : "(gone)");
    cr_expect_eq(count_entries(scratch, ""), 1u, "temporary files left behind");
    free(kept);
    run_free(&r);
    remove_scratch();
}

Test(cli_io, dev_null_stays_a_character_device) {
    expect_dev_null_intact();
    run_result r = run("convert --compat relay --meta " META " -o /dev/null " MINIMAL);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect_eq(r.out_len, 0u);
    run_free(&r);
    expect_dev_null_intact();
    r = run("convert -o /dev/null " MINIMAL);
    cr_expect_eq(r.code, 0, "default mode: exit %d: %s", r.code, r.err);
    run_free(&r);
    expect_dev_null_intact();
    r = run("convert -f report -o /dev/null " MINIMAL);
    cr_expect_eq(r.code, 0, "report: exit %d: %s", r.code, r.err);
    run_free(&r);
    expect_dev_null_intact();
    r = run("convert --compat relay --meta " META " -o /dev/null " RC_DIR "/empty.pftrace");
    cr_expect_eq(r.code, 1, "rejected: exit %d: %s", r.code, r.err);
    run_free(&r);
    expect_dev_null_intact();
}

/* ---- info, version, help ---- */

Test(cli_info, summary_counts_samples) {
    run_result r = run("info " MINIMAL);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.out, "samples: 2 kept"), "summary: %s", r.out);
    cr_expect(strstr(r.out, "Unix time known"), "summary: %s", r.out);
    run_free(&r);
    r = run("info - < " RC_DIR "/multi_sequence.pftrace");
    cr_expect_eq(r.code, 0, "stdin: exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.out, "samples: 2 kept"), "summary: %s", r.out);
    run_free(&r);
}

Test(cli_info, json_report_is_valid_and_counts_samples) {
    static const struct {
        const char *args;
        long long kept;
    } cases[] = {
        {"info --json " MINIMAL, 2},
        {"info --json --compat relay " MINIMAL, 2},
        {"info --json " RC_DIR "/exactly_max_samples.pftrace", 100000},
        {"convert -f report " MINIMAL, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("%s", cases[i].args);
        cr_expect_eq(r.code, 0, "`%s`: exit %d: %s", cases[i].args, r.code, r.err);
        json_error_t je;
        json_t *root = json_loadb(r.out, r.out_len, 0, &je);
        cr_expect_not_null(root, "`%s`: not JSON (%s): %s", cases[i].args, je.text, r.out);
        json_t *kept = json_object_get(json_object_get(root, "samples"), "kept");
        cr_expect(json_is_integer(kept) && json_integer_value(kept) == cases[i].kept,
                  "`%s`: samples.kept is not %lld: %s", cases[i].args, cases[i].kept, r.out);
        json_decref(root);
        run_free(&r);
    }
}

Test(cli_info, version_and_help_exit_0) {
    run_result r = run("--version");
    cr_expect_eq(r.code, 0, "--version exit %d", r.code);
    cr_expect(matches(r.out, "^tracemill [0-9]+\\.[0-9]+\\.[0-9]+\n$"), "--version printed: %s", r.out);
    run_free(&r);
    r = run("help");
    cr_expect_eq(r.code, 0, "help exit %d", r.code);
    cr_expect(strstr(r.out, "usage: tracemill"), "help printed: %s", r.out);
    cr_expect(strstr(r.out, "convert") && strstr(r.out, "info"), "help lacks the commands: %s", r.out);
    run_free(&r);
}
