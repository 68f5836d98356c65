/*
 * test_cli.c — the tracemill command as a user runs it (its
 * command-line contract): the built binary (TM_CLI) is run through the
 * shell with stdout and stderr captured in temporary files.
 *
 * Covered: exit codes (0 ok, 1 rejected input with "<kind> at byte N",
 * 2 usage, 3 I/O); `-` as stdin and stdout; `-o FILE` written atomically
 * (no FILE.tmp-* left, nothing written for a rejected trace, an existing
 * file kept); `-o /dev/null` must leave /dev/null a character device (an
 * earlier version renamed its temp file over it); `--compat relay --meta`
 * reproducing Relay's bytes plus a newline; `info` and `info --json`;
 * `--max-samples`; `--version` and `help`; usage errors of the exporter
 * options and of `diff`. What every writing command does with an existing
 * output (FIFOs and devices written in place; directories, read-only files
 * and the input refused; mode kept; links followed), output errors naming
 * the output, failed writes to stdout; per-command --help, one-line usage
 * errors, the manual page and bash completion; thread options a format
 * ignores; binary output refused on a pseudo-terminal.
 */
#define _XOPEN_SOURCE 700
#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
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
        "convert --in-app " MINIMAL " -o /dev/null",     /* the trace is taken as the prefix: none left */
        "convert -f folded --in-app /opt/ " MINIMAL,     /* in_app is Sample v2's */
        "convert --compat relay --not-in-app /opt/ " MINIMAL, /* Relay never writes in_app */
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

/* Exit 1 and "tracemill: FILE: <kind> at byte N: message" for input the
 * decoder rejects; a profile the output format cannot hold is no fault of
 * any input byte: "tracemill: FILE: <reason>: message", no "at byte". */
Test(cli_exit, rejected_input_exits_1_naming_kind_and_offset) {
    static const struct {
        const char *args, *kind;
        int names_a_byte;
    } cases[] = {
        {RC_DIR "/invalid_protobuf.pftrace", "TM_ERR_MALFORMED", 1},
        {"--compat relay --meta " META " " RC_DIR "/invalid_protobuf.pftrace", "InvalidSampledProfile", 1},
        {"--compat relay --meta " META " " RC_DIR "/empty.pftrace", "NotEnoughSamples", 1},
        {"--compat relay --meta " META " " RC_DIR "/exceeds_max_samples.pftrace", "ExceedSizeLimit", 1},
        {"-f sample-v1 " RC_DIR "/empty_callstack.pftrace", "NotEnoughSamples", 0},
        {"--compat relay --meta " META " " RC_DIR "/missing_clock_snapshot.pftrace", "InvalidSampledProfile", 0},
    };
    char pattern[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("convert %s", cases[i].args);
        cr_expect_eq(r.code, 1, "`convert %s` exited %d: %s", cases[i].args, r.code, r.err);
        snprintf(pattern, sizeof pattern, "^tracemill: [^\n]*: %s%s: ", cases[i].kind,
                 cases[i].names_a_byte ? " at byte [0-9]+" : "");
        cr_expect(matches(r.err, pattern), "`convert %s`: stderr %s does not match %s", cases[i].args, r.err,
                  pattern);
        if (!cases[i].names_a_byte) cr_expect(!strstr(r.err, "at byte"), "`convert %s`: %s", cases[i].args, r.err);
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
    /* by default the complete packets are read, with a warning naming where the cut packet starts */
    run_result w = run("convert -f folded %s", path);
    cr_expect_eq(w.code, 0, "exit %d: %s", w.code, w.err);
    cr_expect(matches(w.err, "warning: .* is cut off: the packet at byte [0-9]+ runs past the end"), "stderr: %s",
              w.err);
    /* every command that reads the trace says so, at the same byte: the SQL model too */
    const char *readers[] = {"info %s", "query %s 'select 1'", "export-sqlite %s %s/cut.db"};
    for (size_t i = 0; i < sizeof readers / sizeof *readers; i++) {
        run_result q = run(readers[i], path, scratch);
        cr_expect_eq(q.code, 0, "`%s` exit %d: %s", readers[i], q.code, q.err);
        cr_expect(w.err[0] && strstr(q.err, w.err), "`%s` does not warn as convert does (%s): %s", readers[i], w.err,
                  q.err);
        run_free(&q);
    }
    run_free(&w);
    run_result r = run("convert --strict %s", path);
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

/* ---- what commands do with existing files ---- */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    fputs(text, f);
    fclose(f);
}

static void expect_text(const char *path, const char *text, const char *what) {
    char *got = tu_read_file(path, NULL);
    cr_expect(got && strcmp(got, text) == 0, "%s: %s now holds %s", what, path, got ? got : "(nothing)");
    free(got);
}

static mode_t mode_of(const char *path) {
    struct stat st;
    cr_assert_eq(lstat(path, &st), 0, "%s is gone", path);
    return st.st_mode;
}

/* Each command that writes, with OUT for its output and IN for its input. */
static const char *const writers[] = {
    "convert -o OUT IN", "convert -f folded -o OUT IN", "diff IN " MINIMAL " -o OUT", "export-sqlite IN OUT",
};

static run_result run_writer(const char *tmpl, const char *in, const char *out) {
    char args[1024];
    size_t n = 0;
    for (const char *p = tmpl; *p && n < sizeof args;) {
        if (strncmp(p, "OUT", 3) == 0) n += (size_t)snprintf(args + n, sizeof args - n, "%s", out), p += 3;
        else if (strncmp(p, "IN", 2) == 0) n += (size_t)snprintf(args + n, sizeof args - n, "%s", in), p += 2;
        else args[n++] = *p++;
    }
    cr_assert_lt(n, sizeof args);
    args[n] = 0;
    return run("%s", args);
}

/* A process that copies what arrives on fifo into copy, until EOF. */
static pid_t start_fifo_reader(const char *fifo, const char *copy) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        FILE *in = fopen(fifo, "rb"), *out = fopen(copy, "wb");
        if (!in || !out) _exit(1);
        int c;
        while ((c = getc(in)) != EOF) putc(c, out);
        _exit(fclose(out) != 0);
    }
    return pid;
}

static int starts_with_file(const char *path, const char *prefix) {
    size_t len;
    char *got = tu_read_file(path, &len);
    int ok = got && len >= strlen(prefix) && memcmp(got, prefix, strlen(prefix)) == 0;
    free(got);
    return ok;
}

/* Replacing a FIFO or a device node by a regular file (as a rename, or
 * export-sqlite's remove-then-create, did) would break it for everyone. */
Test(cli_files, a_fifo_or_device_is_written_in_place) {
    static const char *const prefixes[] = {"{", "", "<?xml", "SQLite format 3"};
    make_scratch();
    char fifo[128], copy[128], dev[128];
    snprintf(fifo, sizeof fifo, "%s/fifo", scratch);
    snprintf(copy, sizeof copy, "%s/copy", scratch);
    snprintf(dev, sizeof dev, "%s/null", scratch);
    cr_assert_eq(mkfifo(fifo, 0600), 0);
    /* a private /dev/null where device nodes can be made (root) */
    int have_dev = mknod(dev, S_IFCHR | 0666, makedev(1, 3)) == 0;
    for (size_t i = 0; i < sizeof writers / sizeof *writers; i++) {
        pid_t reader = start_fifo_reader(fifo, copy);
        run_result r = run_writer(writers[i], MINIMAL, fifo);
        int st;
        waitpid(reader, &st, 0);
        cr_expect_eq(r.code, 0, "`%s` to a FIFO: exit %d: %s", writers[i], r.code, r.err);
        cr_expect(S_ISFIFO(mode_of(fifo)), "`%s` replaced the FIFO", writers[i]);
        cr_expect(starts_with_file(copy, prefixes[i]), "`%s`: the FIFO's reader got no %s", writers[i],
                  prefixes[i]);
        run_free(&r);
        if (!have_dev) continue;
        r = run_writer(writers[i], MINIMAL, dev);
        cr_expect_eq(r.code, 0, "`%s` to a device: exit %d: %s", writers[i], r.code, r.err);
        cr_expect(S_ISCHR(mode_of(dev)), "`%s` replaced the device node", writers[i]);
        run_free(&r);
    }
    expect_dev_null_intact();
    remove_scratch();
}

/* -o /dev/stdout (or /dev/fd/N) is the descriptor the shell opened: a file
 * it appends to keeps what came before and after (following the link
 * replaced the file with the output alone), and a pipe, whose link reads
 * "pipe:[N]", gets the output (it was "No such file or directory"). */
Test(cli_files, dev_stdout_is_written_through_the_descriptor) {
    static const char *const prefixes[] = {"{", "", "<?xml", "SQLite format 3"};
    make_scratch();
    char file[128], copy[128], args[1024], cmd[2048];
    snprintf(file, sizeof file, "%s/log", scratch);
    snprintf(copy, sizeof copy, "%s/copy", scratch);
    for (size_t i = 0; i < sizeof writers / sizeof *writers; i++) {
        const char *out = i % 2 ? "/dev/fd/1" : "/dev/stdout";
        size_t n = 0;
        for (const char *q = writers[i]; *q && n < sizeof args - 32;) {
            if (strncmp(q, "OUT", 3) == 0) n += (size_t)sprintf(args + n, "%s", out), q += 3;
            else if (strncmp(q, "IN", 2) == 0) n += (size_t)sprintf(args + n, "%s", MINIMAL), q += 2;
            else args[n++] = *q++;
        }
        args[n] = 0;
        write_text(file, "first\n");
        snprintf(cmd, sizeof cmd, "{ %s %s && echo last; } >>%s", TM_CLI, args, file);
        cr_expect_eq(system(cmd), 0, "`%s`", cmd);
        size_t len;
        char *got = tu_read_file(file, &len);
        cr_assert_not_null(got);
        cr_expect(len > 11 && strncmp(got, "first\n", 6) == 0 &&
                      strncmp(got + 6, prefixes[i], strlen(prefixes[i])) == 0 && strcmp(got + len - 5, "last\n") == 0,
                  "`%s`: the file holds %zu bytes: %.40s", cmd, len, got);
        free(got);
        snprintf(cmd, sizeof cmd, "%s %s | cat >%s", TM_CLI, args, copy);
        cr_expect_eq(system(cmd), 0, "`%s`", cmd);
        cr_expect(starts_with_file(copy, prefixes[i]), "`%s`: the pipe got no %s", cmd, prefixes[i]);
    }
    remove_scratch();
}

Test(cli_files, a_directory_is_refused) {
    make_scratch();
    char dir[128];
    snprintf(dir, sizeof dir, "%s/d", scratch);
    cr_assert_eq(mkdir(dir, 0755), 0);
    for (size_t i = 0; i < sizeof writers / sizeof *writers; i++) {
        run_result r = run_writer(writers[i], MINIMAL, dir);
        cr_expect_eq(r.code, 3, "`%s`: exit %d: %s", writers[i], r.code, r.err);
        cr_expect(S_ISDIR(mode_of(dir)), "`%s` replaced the directory", writers[i]);
        cr_expect(strstr(r.err, "Is a directory"), "`%s`: %s", writers[i], r.err);
        run_free(&r);
    }
    remove_scratch();
}

Test(cli_files, the_input_is_refused_as_output) {
    make_scratch();
    char in[128], link[128];
    snprintf(in, sizeof in, "%s/t.pftrace", scratch);
    snprintf(link, sizeof link, "%s/link", scratch);
    size_t len, after_len;
    char *orig = tu_read_file(MINIMAL, &len);
    cr_assert_not_null(orig);
    FILE *f = fopen(in, "wb");
    cr_assert_not_null(f);
    fwrite(orig, 1, len, f);
    fclose(f);
    cr_assert_eq(symlink("t.pftrace", link), 0);
    for (size_t i = 0; i < sizeof writers / sizeof *writers; i++) {
        const char *outs[] = {in, link};
        for (int k = 0; k < 2; k++) {
            run_result r = run_writer(writers[i], in, outs[k]);
            cr_expect_eq(r.code, 2, "`%s` onto %s: exit %d: %s", writers[i], outs[k], r.code, r.err);
            cr_expect(strstr(r.err, "it is the input"), "`%s`: %s", writers[i], r.err);
            char *after = tu_read_file(in, &after_len);
            cr_expect(after && after_len == len && memcmp(after, orig, len) == 0, "`%s` changed its input",
                      writers[i]);
            free(after);
            run_free(&r);
        }
    }
    cr_expect_eq(count_entries(scratch, ""), 2u, "temporary files left behind");
    free(orig);
    remove_scratch();
}

Test(cli_files, mode_links_and_read_only_files_are_respected) {
    make_scratch();
    char out[128], link[128], dangling[128], made[128], ro[128];
    snprintf(out, sizeof out, "%s/out", scratch);
    snprintf(link, sizeof link, "%s/link", scratch);
    snprintf(dangling, sizeof dangling, "%s/dangling", scratch);
    snprintf(made, sizeof made, "%s/made", scratch);
    snprintf(ro, sizeof ro, "%s/ro", scratch);
    for (size_t i = 0; i < sizeof writers / sizeof *writers; i++) {
        /* an existing file keeps its mode */
        write_text(out, "old\n");
        cr_assert_eq(chmod(out, 0600), 0);
        run_result r = run_writer(writers[i], MINIMAL, out);
        cr_expect_eq(r.code, 0, "`%s`: exit %d: %s", writers[i], r.code, r.err);
        cr_expect_eq(mode_of(out) & 07777, 0600, "`%s`: mode %o, not 600", writers[i], mode_of(out) & 07777);
        run_free(&r);
        /* a new file gets 0666 less the umask */
        remove(made);
        mode_t mask = umask(027);
        r = run_writer(writers[i], MINIMAL, made);
        umask(mask);
        cr_expect_eq(r.code, 0, "`%s`: exit %d: %s", writers[i], r.code, r.err);
        cr_expect_eq(mode_of(made) & 07777, 0640, "`%s`: new file mode %o, not 640", writers[i],
                     mode_of(made) & 07777);
        run_free(&r);
        /* a symbolic link is written through, to its target */
        remove(link);
        cr_assert_eq(symlink("out", link), 0);
        r = run_writer(writers[i], MINIMAL, link);
        cr_expect_eq(r.code, 0, "`%s` through a link: exit %d: %s", writers[i], r.code, r.err);
        cr_expect(S_ISLNK(mode_of(link)), "`%s` replaced the link", writers[i]);
        cr_expect(!starts_with_file(out, "old"), "`%s` did not write the link's target", writers[i]);
        run_free(&r);
        /* a dangling link creates its target */
        remove(dangling);
        remove(made);
        cr_assert_eq(symlink("made", dangling), 0);
        r = run_writer(writers[i], MINIMAL, dangling);
        cr_expect_eq(r.code, 0, "`%s` through a dangling link: exit %d: %s", writers[i], r.code, r.err);
        cr_expect(S_ISLNK(mode_of(dangling)) && exists(made), "`%s`: the link's target was not created",
                  writers[i]);
        run_free(&r);
        /* a read-only file is refused, also for root */
        write_text(ro, "keep\n");
        cr_assert_eq(chmod(ro, 0444), 0);
        r = run_writer(writers[i], MINIMAL, ro);
        cr_expect_eq(r.code, 3, "`%s` onto a read-only file: exit %d: %s", writers[i], r.code, r.err);
        cr_expect(strstr(r.err, "read-only"), "`%s`: %s", writers[i], r.err);
        expect_text(ro, "keep\n", writers[i]);
        cr_assert_eq(chmod(ro, 0644), 0);
        run_free(&r);
    }
    cr_expect_eq(count_entries(scratch, "out.tmp"), 0u, "temporary files left behind");
    remove_scratch();
}

/* ---- output errors ---- */

Test(cli_files, output_errors_name_the_output_and_the_reason) {
    make_scratch();
    char missing[160];
    snprintf(missing, sizeof missing, "%s/no/such/dir/out", scratch);
    for (size_t i = 0; i < sizeof writers / sizeof *writers; i++) {
        const char *outs[] = {"/dev/full", missing};
        const char *reasons[] = {"No space left on device", "No such file or directory"};
        for (int k = 0; k < 2; k++) {
            run_result r = run_writer(writers[i], MINIMAL, outs[k]);
            char want[256];
            snprintf(want, sizeof want, "tracemill: cannot write %s: %s", outs[k], reasons[k]);
            cr_expect_eq(r.code, 3, "`%s` to %s: exit %d: %s", writers[i], outs[k], r.code, r.err);
            cr_expect(strstr(r.err, want), "`%s`: wanted \"%s\", got %s", writers[i], want, r.err);
            cr_expect(!strstr(r.err, "at byte") && !strstr(r.err, ".tmp") && !strstr(r.err, MINIMAL),
                      "`%s`: %s", writers[i], r.err);
            run_free(&r);
        }
    }
    remove_scratch();
}

Test(cli_files, a_failed_write_to_stdout_fails_the_command) {
    static const char *const cases[] = {
        "--help", "help convert", "--version", "info " MINIMAL, "info --json " MINIMAL,
        "convert " MINIMAL, "convert -f folded " MINIMAL, "query " MINIMAL " 'SELECT 1'",
    };
    char err_path[] = "/tmp/tm_cli_err_XXXXXX", cmd[1024];
    int fd = mkstemp(err_path);
    cr_assert_geq(fd, 0);
    close(fd);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(cmd, sizeof cmd, "%s %s >/dev/full 2>%s", TM_CLI, cases[i], err_path);
        int st = system(cmd);
        char *err = tu_read_file(err_path, NULL);
        cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "`%s`: exit %d: %s", cases[i], WEXITSTATUS(st), err);
        cr_expect(err && strstr(err, "cannot write standard output: No space left on device"), "`%s`: %s",
                  cases[i], err);
        free(err);
    }
    remove(err_path);
}

/* With standard output closed, a command that writes nothing there
 * succeeds (as `record -o T -- CMD >&-` must, passing CMD's status on), and
 * one that writes there fails, naming it. */
Test(cli_files, a_closed_stdout_fails_only_a_command_writing_there) {
    make_scratch();
    char cmd[1024], out[160], err_path[160];
    snprintf(out, sizeof out, "%s/out.json", scratch);
    snprintf(err_path, sizeof err_path, "%s/err", scratch);
    snprintf(cmd, sizeof cmd, "%s convert -o %s %s >&- 2>%s", TM_CLI, out, MINIMAL, err_path);
    int st = system(cmd);
    char *err = tu_read_file(err_path, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "convert -o: exit %d: %s", WEXITSTATUS(st), err);
    cr_expect_eq(access(out, F_OK), 0, "no output written");
    free(err);
    snprintf(cmd, sizeof cmd, "%s info %s >&- 2>%s", TM_CLI, MINIMAL, err_path);
    st = system(cmd);
    err = tu_read_file(err_path, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 3, "info: exit %d: %s", WEXITSTATUS(st), err);
    cr_expect(err && strstr(err, "cannot write standard output"), "info: %s", err);
    free(err);
    remove_scratch();
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

/* Input of another format is summarised as what it is: no packets,
 * sequences or clocks, and folded stacks by their lines and weight. info
 * read such input with Perfetto's words ("0 packets ... 0 PerfSample"). */
Test(cli_info, other_formats_are_summarised_as_what_they_are) {
    char folded[] = "/tmp/tm_cli_info_XXXXXX";
    int fd = mkstemp(folded);
    cr_assert(fd >= 0);
    static const char lines[] = "main;work 51\nmain 3\n";
    cr_assert(write(fd, lines, sizeof lines - 1) == (ssize_t)(sizeof lines - 1));
    close(fd);
    run_result r = run("info %s", folded);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.out, "bytes, folded input\nsamples: 2 lines of 54 samples in all\n"), "%s", r.out);
    cr_expect(!strstr(r.out, "packets") && !strstr(r.out, "clocks") && !strstr(r.out, "time span"), "%s", r.out);
    /* the losses' heading, alone, read as a cut output */
    cr_expect(strstr(r.out, "\ndropped or degraded: nothing\n"), "%s", r.out);
    run_free(&r);
    r = run("info --json %s", folded);
    cr_expect(strstr(r.out, "\"input\":\"folded\""), "%s", r.out);
    run_free(&r);
    remove(folded);
    r = run("convert -f sample-v2 %s | %s info -", MINIMAL, TM_CLI);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.out, "bytes, sample-v2 input\nsamples: 2\ntime span: "), "%s", r.out);
    cr_expect(!strstr(r.out, "packets") && !strstr(r.out, "clocks"), "%s", r.out);
    run_free(&r);
    r = run("info --json " MINIMAL);
    cr_expect(strstr(r.out, "{\"mode\":\"default\",\"input\":\"perfetto\","), "%s", r.out);
    run_free(&r);
}

/* The service's chunks_discarded (top-level TraceStats field 8) is shown
 * apart from this trace's losses, the per-buffer figures. */
Test(cli_info, service_chunks_discarded_apart_from_losses) {
    size_t len;
    char *min = tu_read_file(MINIMAL, &len);
    cr_assert_not_null(min);
    /* Trace.packet { trace_stats { buffer_stats { chunks_discarded: 2 } chunks_discarded: 9 } } */
    static const unsigned char stats[] = {0x0a, 0x0a, 0x9a, 0x02, 0x07, 0x0a, 0x03, 0x90, 0x01, 0x02, 0x40, 0x09};
    char path[] = "/tmp/tm_cli_stats_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert(write(fd, min, len) == (ssize_t)len && write(fd, stats, sizeof stats) == (ssize_t)sizeof stats);
    close(fd);
    free(min);
    run_result r = run("info %s", path);
    remove(path);
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    const char *own = strstr(r.out, "producer: buffer chunks discarded");
    cr_expect(own && strncmp(strchr(own, '\n') - 2, " 2\n", 3) == 0, "%s", r.out);
    const char *svc = strstr(r.out, "tracing service, all sessions (not this trace's loss):\n  chunks discarded");
    cr_expect(svc && strstr(svc, " 9\n"), "%s", r.out);
    run_free(&r);
}

/* Perfetto's long-trace mode loses data by bytes overwritten, with no chunk
 * counted: info lists that loss with the others. */
Test(cli_info, lists_buffer_bytes_overwritten) {
    run_result r = run("info " TM_FIXTURES "/perfetto-difftests/ParsingTracedStats__long_trace_mode_bytes_overwritten"
                       "/trace.pftrace");
    cr_expect_eq(r.code, 0, "exit %d: %s", r.code, r.err);
    const char *l = strstr(r.out, "producer: buffer bytes overwritten");
    cr_expect(l && strncmp(strchr(l, '\n') - 5, " 2048\n", 6) == 0, "%s", r.out);
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
        /* one line: the JSON and its newline, no blank line after */
        cr_expect(r.out_len >= 2 && r.out[r.out_len - 1] == '\n' && r.out[r.out_len - 2] == '}',
                  "`%s`: does not end with \"}\\n\"", cases[i].args);
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

/* ---- help, usage errors, the manual and completion ---- */

Test(cli_help, every_command_has_its_own_help) {
    static const char *const cmds[] = {"convert", "diff", "info", "query", "export-sqlite", "record", "serve", "store"};
    for (size_t i = 0; i < sizeof cmds / sizeof *cmds; i++) {
        char want[64];
        snprintf(want, sizeof want, "usage: tracemill %s", cmds[i]);
        const char *forms[] = {"%s --help", "%s -h", "help %s", "%s " MINIMAL " --help"};
        for (size_t k = 0; k < sizeof forms / sizeof *forms; k++) {
            char args[256];
            snprintf(args, sizeof args, forms[k], cmds[i]);
            run_result r = run("%s", args);
            cr_expect_eq(r.code, 0, "`%s`: exit %d: %s", args, r.code, r.err);
            cr_expect(strncmp(r.out, want, strlen(want)) == 0, "`%s`: %s", args, r.out);
            cr_expect_eq(r.err_len, 0u, "`%s`: %s", args, r.err);
            run_free(&r);
        }
    }
    run_result r = run("-V");
    cr_expect(r.code == 0 && strncmp(r.out, "tracemill ", 10) == 0, "-V: %s", r.out);
    run_free(&r);
    r = run("help nosuchcommand");
    cr_expect_eq(r.code, 2);
    run_free(&r);
}

/* One line saying what is wrong and where the help is, not the overview. */
Test(cli_help, a_usage_error_is_one_line_and_a_pointer) {
    static const struct {
        const char *args, *cmd;
    } cases[] = {
        {"convert --bogus " MINIMAL, "convert"},     {"diff " MINIMAL, "diff"},
        {"info --bogus " MINIMAL, "info"},           {"query " MINIMAL " --bogus", "query"},
        {"export-sqlite " MINIMAL, "export-sqlite"}, {"record --bogus -- true", "record"},
        {"convert -f nope " MINIMAL, "convert"},
        /* a bad value of an option every exporter takes: its reason is the line */
        {"convert --value bogus " MINIMAL, "convert"},
        {"convert --value samples --value wall " MINIMAL, "convert"},
        {"convert --max-samples 0 " MINIMAL, "convert"},
        {"diff --width 5 " MINIMAL " " MINIMAL, "diff"},
        {"info --compat nope " MINIMAL, "info"},
        {"query --max-samples abc " MINIMAL " 'select 1'", "query"},
        /* a --symbols or --debuginfod-cache that is not a directory, on each command that takes them */
        {"convert --symbols /dev/null " MINIMAL, "convert"},
        {"query --debuginfod-cache /dev/null " MINIMAL " 'select 1'", "query"},
        {"symbolize --symbols /dev/null -o /dev/null " MINIMAL, "symbolize"},
        {"record --symbols /dev/null -- true", "record"},
        {"symbolize " MINIMAL " --symbols", "symbolize"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("%s", cases[i].args);
        char see[80];
        snprintf(see, sizeof see, "\nsee 'tracemill %s --help'\n", cases[i].cmd);
        cr_expect_eq(r.code, 2, "`%s`: exit %d", cases[i].args, r.code);
        const char *nl = strchr(r.err, '\n');
        cr_expect(nl && strcmp(nl, see) == 0, "`%s`: not one line and the pointer: %s", cases[i].args, r.err);
        run_free(&r);
    }
}

/* A limit's value is named for what is wrong with it: one past 64 bits is
 * a number, only too large (it was told "needs a positive number"). */
Test(cli_help, a_limit_value_says_what_is_wrong_with_it) {
    static const struct {
        const char *args, *said;
    } cases[] = {
        {"convert --max-samples 99999999999999999999 " MINIMAL,
         "convert: --max-samples 99999999999999999999 is over the largest value, 18446744073709551615\n"},
        {"info --max-input-bytes 20000000000G " MINIMAL,
         "info: --max-input-bytes 20000000000G is over the largest value, 18446744073709551615\n"},
        {"query --max-samples 99999999999999999999 " MINIMAL " 'select 1'",
         "query: --max-samples 99999999999999999999 is over the largest value, 18446744073709551615\n"},
        {"export-sqlite --max-samples 99999999999999999999 " MINIMAL " x.db",
         "export-sqlite: --max-samples 99999999999999999999 is over the largest value, 18446744073709551615\n"},
        {"symbolize --max-samples 99999999999999999999 " MINIMAL,
         "symbolize: --max-samples 99999999999999999999 is over the largest value, 18446744073709551615\n"},
        {"convert --max-samples 0 " MINIMAL,
         "convert: --max-samples needs a positive number (k, M or G may follow), not '0'\n"},
        {"query --max-samples abc " MINIMAL " 'select 1'",
         "query: --max-samples needs a positive number (k, M or G may follow), not 'abc'\n"},
        {"convert " MINIMAL " --max-samples", "convert: --max-samples needs a value\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("%s", cases[i].args);
        cr_expect_eq(r.code, 2, "`%s`: exit %d", cases[i].args, r.code);
        cr_expect(strstr(r.err, cases[i].said), "`%s`: %s", cases[i].args, r.err);
        run_free(&r);
    }
}

Test(cli_help, the_manual_renders_and_completion_completes) {
    char cmd[1024];
    if (system("command -v man >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd,
                 "MANWIDTH=80 man -l %s/docs/tracemill.1 2>&1 | grep -q 'export-sqlite' && "
                 "! man --warnings -l %s/docs/tracemill.1 2>&1 >/dev/null | grep -q .",
                 TM_SOURCE_DIR, TM_SOURCE_DIR);
        cr_expect_eq(system(cmd), 0, "docs/tracemill.1 does not render cleanly with man -l");
    }
    snprintf(cmd, sizeof cmd,
             "bash -c 'source %s/docs/tracemill.bash-completion && "
             "COMP_WORDS=(tracemill ex); COMP_CWORD=1; _tracemill; [ \"${COMPREPLY[*]}\" = export-sqlite ] && "
             "COMP_WORDS=(tracemill convert -f sv); COMP_CWORD=3; _tracemill; [ \"${COMPREPLY[*]}\" = svg ] && "
             "COMP_WORDS=(tracemill query t --tim); COMP_CWORD=3; _tracemill; [ \"${COMPREPLY[*]}\" = --timeout ]'",
             TM_SOURCE_DIR);
    cr_expect_eq(system(cmd), 0, "docs/tracemill.bash-completion does not complete commands and options");
}

/* The completion offers every option the commands' --help lists, and every
 * input and output format; and no option the command refuses as unknown. */
Test(cli_help, completion_offers_every_option_of_the_help) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "bash %s/tests/completion_check.sh %s/docs/tracemill.bash-completion %s >&2",
             TM_SOURCE_DIR, TM_SOURCE_DIR, TM_CLI);
    cr_expect_eq(system(cmd), 0, "docs/tracemill.bash-completion misses or wrongly offers options (listed above)");
}

/* The overview and the manual name every format convert reads and writes. */
Test(cli_help, overview_and_manual_name_sample_v1) {
    run_result r = run("--help");
    cr_expect(strstr(r.out, "Sample v1 profiles"), "tracemill --help: %s", r.out);
    run_free(&r);
    size_t len;
    char *man = tu_read_file(TM_SOURCE_DIR "/docs/tracemill.1", &len);
    cr_assert_not_null(man);
    cr_expect(strstr(man, "Sample v1 profiles") && strstr(man, "sample-v1 (a Sentry"), "docs/tracemill.1");
    free(man);
}

/* An option the chosen format would ignore is refused (exit 2, naming it),
 * not silently dropped; where it applies it is taken. */
Test(cli_convert, options_the_format_ignores_are_refused) {
    static const struct {
        const char *args, *says;
    } refused[] = {
        {"convert -f svg --uncompressed " MINIMAL, "--uncompressed applies to -f pprof only"},
        {"convert -f folded --period 10ms " MINIMAL, "--period applies to -f pprof and speedscope only"},
        {"convert -f pprof --reverse " MINIMAL, "--reverse and --width apply to -f svg only"},
        {"convert -f folded --width 500 " MINIMAL, "--reverse and --width apply to -f svg only"},
        {"convert -f pprof --title x " MINIMAL, "--title applies to -f svg and speedscope only"},
        {"convert -f pprof --remove-single-samples " MINIMAL, "--remove-single-samples applies to -f sample-v2"},
        {"diff -f folded --reverse " MINIMAL " " MINIMAL, "--reverse and --width apply to -f svg only"},
        {"diff --uncompressed " MINIMAL " " MINIMAL, "--uncompressed applies to -f pprof only"},
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        run_result r = run("%s", refused[i].args);
        cr_expect_eq(r.code, 2, "`%s`: exit %d", refused[i].args, r.code);
        cr_expect(strstr(r.err, refused[i].says), "`%s`: %s", refused[i].args, r.err);
        run_free(&r);
    }
    static const char *const taken[] = {
        "convert -f pprof --uncompressed --period 10ms -o /dev/null " MINIMAL,
        "convert -f speedscope --period 10ms --title x " MINIMAL,
        "convert -f svg --reverse --width 500 --title x " MINIMAL,
        "diff --reverse --title x " MINIMAL " " MINIMAL,
    };
    for (size_t i = 0; i < sizeof taken / sizeof *taken; i++) {
        run_result r = run("%s", taken[i]);
        cr_expect_eq(r.code, 0, "`%s`: exit %d: %s", taken[i], r.code, r.err);
        run_free(&r);
    }
}

/* ---- memory profiles: --value ---- */

#define HEAP_TRACE TM_SOURCE_DIR "/tests/fixtures/perfetto-difftests/ProfilingHeapProfiling__heap_profile_dump_max/trace.pftrace"

/* convert --per-thread of a memory profile: a file for the process (the
 * thread tid == pid, which has no CPU samples of its own), not for the
 * threads with CPU samples, whose files held no heap sample. Wrote 0
 * files for a memory-only trace (exit 0), and with --value a file for
 * each CPU-sampled thread, all empty, leaving the heap profile out. */
Test(cli_value, per_thread_writes_each_process_memory_profile) {
    make_scratch();
    char mixed[128]; /* CPU samples of thread 42, heap of process 2 */
    snprintf(mixed, sizeof mixed, "%s/mixed.pftrace", scratch);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cat %s %s > %s", MINIMAL, HEAP_TRACE, mixed);
    cr_assert_eq(system(cmd), 0);
    static const struct {
        const char *args, *file, *input;
    } cases[] = {
        {"", "2.pb.gz", HEAP_TRACE},                   /* memory only: inuse_space by default */
        {"--value alloc_space", "2.pb.gz", NULL},      /* the mixed trace */
        {"", "42.pb.gz", NULL},                        /* the mixed trace's CPU samples, as before */
        {"--value samples", "42.pb.gz", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char dir[160];
        snprintf(dir, sizeof dir, "%s/per%zu", scratch, i);
        run_result r = run("convert -f pprof --per-thread %s -o %s %s", cases[i].args, dir,
                           cases[i].input ? cases[i].input : mixed);
        cr_expect_eq(r.code, 0, "case %zu: %s", i, r.err);
        cr_expect(strstr(r.err, "wrote 1 per-thread profiles"), "case %zu: %s", i, r.err);
        cr_expect_eq(count_entries(dir, ""), 1, "case %zu", i);
        char path[256];
        snprintf(path, sizeof path, "%s/%s", dir, cases[i].file);
        struct stat st;
        cr_expect(stat(path, &st) == 0 && st.st_size > 0, "case %zu: no %s", i, cases[i].file);
        run_free(&r);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s/per*", scratch);
    cr_expect_eq(system(cmd), 0);
    remove_scratch();
}

/* A thread that exists but holds none of the samples of the value written
 * is refused, naming where a memory profile's samples are: every format
 * wrote an empty profile with exit 0. Thread 42 has the mixed trace's CPU
 * samples, process 2 its memory profile. */
Test(cli_value, a_thread_without_samples_of_the_value_is_refused) {
    make_scratch();
    char mixed[128];
    snprintf(mixed, sizeof mixed, "%s/mixed.pftrace", scratch);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cat %s %s > %s", MINIMAL, HEAP_TRACE, mixed);
    cr_assert_eq(system(cmd), 0);
    static const char *const formats[] = {"folded", "pprof -o /dev/null", "speedscope", "svg"};
    for (size_t i = 0; i < sizeof formats / sizeof *formats; i++) {
        run_result r = run("convert -f %s --value alloc_space --thread 42 %s", formats[i], mixed);
        cr_expect_eq(r.code, 2, "%s: exit %d: %s", formats[i], r.code, r.err);
        cr_expect(strstr(r.err, "the thread selected holds none of the samples (a memory profile's samples are its "
                                "process's, on its main thread: tid = pid)"),
                  "%s: %s", formats[i], r.err);
        run_free(&r);
        r = run("convert -f %s --value alloc_space --thread 2 %s", formats[i], mixed); /* the process: its samples */
        cr_expect_eq(r.code, 0, "%s: exit %d: %s", formats[i], r.code, r.err);
        run_free(&r);
        r = run("convert -f %s --thread 42 %s", formats[i], mixed); /* CPU samples: as before */
        cr_expect_eq(r.code, 0, "%s: exit %d: %s", formats[i], r.code, r.err);
        run_free(&r);
    }
    remove_scratch();
}

Test(cli_value, memory_values_choose_what_the_outputs_weigh) {
    run_result r = run("convert -f folded --value alloc_space " HEAP_TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    /* the trace's ModuleSymbols name f2 (two addresses: f2.cc lines 22 and 23) and f3 (f3.cc:33) */
    cr_expect_str_eq(r.out, "f1;symbolized f2 (f2.cc:22);symbolized f3 (f3.cc:33) 1000\n"
                            "f1;symbolized f2 (f2.cc:23) 90\n");
    run_free(&r);
    r = run("convert -f folded --no-lines --value alloc_space " HEAP_TRACE); /* f2's lines merge */
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "f1;symbolized f2 90\nf1;symbolized f2;symbolized f3 1000\n");
    run_free(&r);
    r = run("convert -f svg --value alloc_objects " HEAP_TRACE);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "Memory Flame Graph (alloc_objects)") && strstr(r.out, "7 objects"), "no title or unit");
    run_free(&r);
    r = run("info " HEAP_TRACE);
    cr_expect(strstr(r.out, "memory profile: 1 heap dumps in 1 ProfilePackets, 1090 bytes allocated"), "%s", r.out);
    run_free(&r);
    r = run("diff -f folded --no-lines --value inuse_space " HEAP_TRACE " " HEAP_TRACE); /* what grew: nothing */
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect_str_eq(r.out, "f1;symbolized f2 90 90\nf1;symbolized f2;symbolized f3 1000 1000\n");
    run_free(&r);
    static const char *const refused[] = {"convert --value alloc_space " HEAP_TRACE,
                                          "convert -f report --value inuse_space " HEAP_TRACE,
                                          "convert -f folded --value bytes " HEAP_TRACE};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        r = run("%s", refused[i]);
        cr_expect_eq(r.code, 2, "`%s`: exit %d", refused[i], r.code);
        cr_expect(strstr(r.err, "--value"), "`%s`: %s", refused[i], r.err);
        run_free(&r);
    }
    r = run("convert -f folded --value samples " HEAP_TRACE); /* no CPU samples in it: a usage error */
    cr_expect_eq(r.code, 2, "%s", r.err);
    cr_expect(strstr(r.err, "memory profile") && !strstr(r.err, "at byte"), "%s", r.err);
    run_free(&r);
    /* a diff of a memory profile against a CPU profile would set bytes against samples */
    static const char *const mixed[] = {"diff -f folded " HEAP_TRACE " " MINIMAL, "diff " MINIMAL " " HEAP_TRACE};
    for (size_t i = 0; i < sizeof mixed / sizeof *mixed; i++) {
        r = run("%s", mixed[i]);
        cr_expect_eq(r.code, 2, "`%s`: exit %d: %s", mixed[i], r.code, r.err);
        cr_expect(strstr(r.err, "weigh different values") && strstr(r.err, "inuse_space") && strstr(r.err, "samples"),
                  "`%s`: %s", mixed[i], r.err);
        cr_expect_eq(r.out_len, 0u, "`%s` wrote %s", mixed[i], r.out);
        run_free(&r);
    }
}

/* ---- commands that read Perfetto traces only ---- */

/* SQL and symbolization need a Perfetto trace: another input is named for
 * what it is, not called a malformed trace; a --symbols directory that
 * does not exist is refused, not left to symbolize nothing. */
Test(cli_inputs, perfetto_only_commands_name_the_input_they_got) {
    const char *v1 = TM_FIXTURES "/sentry-python/profile_v1.json";
    static const char *const said[] = {
        "SQL (query, export-sqlite) needs a Perfetto trace; this is sample-v1 input",
        "symbolize needs a Perfetto trace; this is sample-v1 input",
        "symbolizing (--symbols, --proguard-map, --debuginfod-cache) needs a Perfetto trace; this is sample-v1 input",
    };
    for (size_t i = 0; i < sizeof said / sizeof *said; i++) {
        run_result r = i == 0   ? run("query %s 'select 1'", v1)
                       : i == 1 ? run("symbolize %s -o /dev/null", v1)
                                : run("convert -f folded --proguard-map %s/proguard/mapping.txt %s", TM_FIXTURES, v1);
        cr_expect_eq(r.code, 1, "case %zu: exit %d: %s", i, r.code, r.err);
        cr_expect(strstr(r.err, said[i]) && !strstr(r.err, "not a Perfetto trace"), "case %zu: %s", i, r.err);
        run_free(&r);
    }
    run_result r = run("convert -f folded --symbols /nonexistent/dir " MINIMAL);
    cr_expect_eq(r.code, 2, "exit %d: %s", r.code, r.err);
    cr_expect(strstr(r.err, "--symbols /nonexistent/dir: No such file or directory"), "%s", r.err);
    cr_expect_eq(r.out_len, 0u, "%s", r.out);
    run_free(&r);
    /* nor a debuginfod cache that is missing or a file (each command that takes it) */
    static const char *const cache[] = {
        "convert -f folded --debuginfod-cache /nonexistent/dir " MINIMAL,
        "query --debuginfod-cache /nonexistent/dir " MINIMAL " 'select 1'",
        "symbolize --debuginfod-cache /nonexistent/dir -o /dev/null " MINIMAL,
        "convert -f folded --debuginfod-cache " MINIMAL " " MINIMAL,
    };
    for (size_t i = 0; i < sizeof cache / sizeof *cache; i++) {
        r = run("%s", cache[i]);
        cr_expect_eq(r.code, 2, "`%s`: exit %d: %s", cache[i], r.code, r.err);
        cr_expect(strstr(r.err, i < 3 ? "--debuginfod-cache /nonexistent/dir: No such file or directory"
                                      : "not a directory"),
                  "`%s`: %s", cache[i], r.err);
        cr_expect_eq(r.out_len, 0u, "`%s`: %s", cache[i], r.out);
        run_free(&r);
    }
}

/* ---- options a format would ignore; binary output on a terminal ---- */

Test(cli_help, thread_options_the_format_ignores_are_refused) {
    static const char *const cases[] = {
        "convert --thread main " MINIMAL, "convert -f sample-v2 --thread 1 " MINIMAL,
        "convert -f report --thread-name x " MINIMAL, "convert --thread-prefix " MINIMAL,
        "convert -f svg --thread-prefix " MINIMAL, "diff --thread-prefix " MINIMAL " " MINIMAL,
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_result r = run("%s", cases[i]);
        cr_expect_eq(r.code, 2, "`%s`: exit %d: %s", cases[i], r.code, r.err);
        cr_expect(strstr(r.err, "--thread"), "`%s`: %s", cases[i], r.err);
        run_free(&r);
    }
    run_result r = run("convert -f folded --thread-prefix " MINIMAL);
    cr_expect_eq(r.code, 0, "%s", r.err);
    run_free(&r);
}

/* --in-app and --not-in-app reach the Sample v2 writer: the Relay fixture's
 * android.view.View frame is a platform class, not in_app by default. */
Test(cli_in_app, prefixes_override_the_default) {
    const char *java = TM_FIXTURES "/relay-compat/java_frame_splitting.pftrace";
    run_result r = run("convert %s", java);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"function\":\"draw\",\"in_app\":false,\"module\":\"android.view.View\""), "%s", r.out);
    run_free(&r);
    r = run("convert --in-app android.view. --not-in-app android. %s", java);
    cr_expect_eq(r.code, 0, "%s", r.err);
    cr_expect(strstr(r.out, "\"function\":\"draw\",\"in_app\":true,\"module\":\"android.view.View\""), "%s", r.out);
    run_free(&r);
}

Test(cli_io, binary_output_is_refused_on_a_terminal, .timeout = 20) {
    static const char *const formats[][4] = {{"-f", "pprof", NULL}, {"-f", "pprof", "--uncompressed", NULL}};
    for (size_t i = 0; i < 2; i++) {
        char *argv[8] = {TM_CLI, "convert"};
        int n = 2;
        for (int k = 0; formats[i][k]; k++) argv[n++] = (char *)formats[i][k];
        argv[n++] = MINIMAL;
        argv[n] = NULL;
        int master;
        int pid = tu_spawn_on_pty(argv, &master);
        cr_assert_gt(pid, 0);
        tu_membuf seen = {0};
        tu_pty_wait_for(master, &seen, "\n", 5000);
        int status;
        cr_assert_eq(waitpid(pid, &status, 0), pid);
        cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 2, "%s: status %d: %s", argv[n - 2], status,
                  seen.data ? seen.data : "");
        cr_expect(seen.data && strstr(seen.data, "refusing to write binary output to a terminal"), "%s",
                  seen.data ? seen.data : "(nothing)");
        tu_membuf_free(&seen);
        close(master);
    }
}

/* ---- progress ---- */

/* A slow input: the trace, then two seconds before the stream ends. The
 * progress line shows on a terminal, past the first second, and is erased;
 * with --quiet, or stderr a pipe, nothing is said. */
#define SLOW_CONVERT "(cat " MINIMAL "; sleep 2) | " TM_CLI " convert -f folded -o /dev/null "

static char *on_pty(const char *cmd) {
    char *argv[] = {"/bin/sh", "-c", (char *)cmd, NULL};
    int master;
    int pid = tu_spawn_on_pty(argv, &master);
    cr_assert_gt(pid, 0);
    tu_membuf seen = {0};
    tu_pty_wait_for(master, &seen, "no such text", 8000); /* until the program closes the terminal */
    int status;
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: status %d: %s", cmd, status,
              seen.data ? seen.data : "");
    close(master);
    return seen.data ? seen.data : strdup("");
}

Test(cli_progress, shown_on_a_terminal_for_slow_work, .timeout = 30) {
    char *seen = on_pty(SLOW_CONVERT "-");
    cr_expect(strstr(seen, "\rtracemill: reading "), "no progress: %s", seen);
    cr_expect(strstr(seen, " bytes... "), "no bytes read: %s", seen);
    cr_expect(strstr(seen, "\r\033[K"), "the line was not erased: %s", seen);
    free(seen);
    seen = on_pty(SLOW_CONVERT "--quiet -");
    cr_expect(!strstr(seen, "tracemill:"), "--quiet: %s", seen);
    free(seen);
}

Test(cli_progress, query_loading_shows_it_too, .timeout = 30) {
    char *seen = on_pty("(cat " MINIMAL "; sleep 2) | " TM_CLI " query - \"select count(*) from perf_sample\" >/dev/null");
    cr_expect(strstr(seen, "\rtracemill: reading "), "no progress: %s", seen);
    cr_expect(strstr(seen, "\r\033[K"), "the line was not erased: %s", seen);
    free(seen);
    seen = on_pty("(cat " MINIMAL "; sleep 2) | " TM_CLI " query --quiet - \"select 1\" >/dev/null");
    cr_expect(!strstr(seen, "tracemill:"), "--quiet: %s", seen);
    free(seen);
}

Test(cli_progress, never_when_stderr_is_a_pipe, .timeout = 30) {
    char *seen = on_pty(SLOW_CONVERT "- 2>&1 | cat"); /* a terminal is there, but not on stderr */
    cr_expect(!strstr(seen, "tracemill:"), "said: %s", seen);
    free(seen);
}
