/*
 * test_cli_input.c — what tracemill does with the input it is given, from
 * the library's entry points and the command: the max_input_bytes bound on
 * files, pipes and devices; empty input; inputs compressed whole with gzip
 * or zstd.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sqlite3.h>
#include <zlib.h>
#include <zstd.h>

#include "tutil.h"
#include "tracemill.h"
#include "tracemill_sql.h"

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
    cr_expect_eq(tm_db_new(buf, len, &opts, &db, &err), TM_ERR_LIMIT);
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
    cr_expect_eq(tm_db_new(nothing, 0, NULL, &db, &err), TM_ERR_EMPTY);
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

/* ---- gzip and zstd inputs ---- */

static char *read_fixture(const char *path, size_t *len) {
    char *buf = tu_read_file(path, len);
    cr_assert_not_null(buf, "cannot read %s", path);
    return buf;
}

/* buf as one gzip member (zlib's gzip wrapper), malloc'd. */
static uint8_t *gzip_of(const void *buf, size_t len, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, len) + 64;
    uint8_t *out = malloc(cap);
    z.next_in = (Bytef *)(uintptr_t)buf;
    z.avail_in = (uInt)len;
    z.next_out = out;
    z.avail_out = (uInt)cap;
    cr_assert_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    *out_len = cap - z.avail_out;
    deflateEnd(&z);
    return out;
}

static uint8_t *zstd_of(const void *buf, size_t len, size_t *out_len) {
    size_t cap = ZSTD_compressBound(len);
    uint8_t *out = malloc(cap);
    *out_len = ZSTD_compress(out, cap, buf, len, 3);
    cr_assert(!ZSTD_isError(*out_len));
    return out;
}

/* Folded stacks of a trace parsed with opts (malloc'd text); NULL and *st
 * on a parse failure. */
static char *folded_of(const void *buf, size_t len, const tm_options *opts, tm_status *st, tm_error *err) {
    tm_trace *t = NULL;
    *st = tm_trace_parse(buf, len, opts, &t, err);
    if (*st != TM_OK) return NULL;
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    cr_assert_eq(tm_write_folded(t, NULL, &sink, err), TM_OK);
    tm_trace_free(t);
    return out.data;
}

Test(input_compressed, gzip_and_zstd_decode_like_the_plain_trace) {
    size_t len, gz_len, zst_len;
    char *plain = read_fixture(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    uint8_t *gz = gzip_of(plain, len, &gz_len), *zst = zstd_of(plain, len, &zst_len);
    tm_status st;
    tm_error err;
    char *want = folded_of(plain, len, NULL, &st, &err);
    cr_assert_not_null(want, "%s", err.message);
    const uint8_t *inputs[] = {gz, zst};
    size_t lens[] = {gz_len, zst_len};
    for (int i = 0; i < 2; i++) {
        char *got = folded_of(inputs[i], lens[i], NULL, &st, &err);
        cr_expect_not_null(got, "%s: %s %s", i ? "zstd" : "gzip", tm_status_str(st), err.message);
        if (got) cr_expect_str_eq(got, want);
        free(got);
        tm_trace *t = NULL;
        cr_assert_eq(tm_trace_parse(inputs[i], lens[i], NULL, &t, &err), TM_OK);
        cr_expect_eq(tm_trace_get_stats(t)->bytes, lens[i]);
        cr_expect_eq(tm_trace_get_stats(t)->bytes_decompressed, len);
        tm_trace_free(t);
        tm_db *db = NULL;
        cr_assert_eq(tm_db_new(inputs[i], lens[i], NULL, &db, &err), TM_OK, "%s", err.message);
        sqlite3_stmt *q = NULL;
        cr_assert_eq(sqlite3_prepare_v2(tm_db_sqlite(db), "select count(*) from perf_sample", -1, &q, NULL), SQLITE_OK);
        cr_assert_eq(sqlite3_step(q), SQLITE_ROW);
        cr_expect_gt(sqlite3_column_int64(q, 0), 0);
        sqlite3_finalize(q);
        tm_db_free(db);
    }
    free(want);
    free(gz);
    free(zst);
    free(plain);
}

Test(input_compressed, errors_name_the_compressed_byte) {
    size_t len, gz_len, zst_len;
    char *plain = read_fixture(MINIMAL, &len);
    uint8_t *gz = gzip_of(plain, len, &gz_len), *zst = zstd_of(plain, len, &zst_len);
    tm_trace *t = NULL;
    tm_error err;
    /* truncated */
    cr_expect_eq(tm_trace_parse(gz, gz_len - 3, NULL, &t, &err), TM_ERR_TRUNCATED);
    cr_expect_eq(err.offset, gz_len - 3);
    cr_expect(strstr(err.message, "gzip"), "%s", err.message);
    cr_expect_eq(tm_trace_parse(zst, zst_len - 3, NULL, &t, &err), TM_ERR_TRUNCATED);
    cr_expect_eq(err.offset, zst_len - 3);
    /* bytes after the stream */
    uint8_t *junk = malloc(gz_len + 4);
    memcpy(junk, gz, gz_len);
    memcpy(junk + gz_len, "junk", 4);
    cr_expect_eq(tm_trace_parse(junk, gz_len + 4, NULL, &t, &err), TM_ERR_MALFORMED);
    cr_expect_eq(err.offset, gz_len, "the first byte after the gzip stream");
    /* a corrupt deflate block */
    memcpy(junk, gz, gz_len);
    junk[12] ^= 0xff;
    junk[13] ^= 0xff;
    tm_status st = tm_trace_parse(junk, gz_len, NULL, &t, &err);
    cr_expect(st == TM_ERR_MALFORMED || st == TM_ERR_TRUNCATED, "%s", tm_status_str(st));
    cr_expect_leq(err.offset, gz_len);
    /* the inflated size is capped by max_inflated_bytes */
    tm_options opts = {0};
    opts.limits.max_inflated_bytes = len - 1;
    cr_expect_eq(tm_trace_parse(gz, gz_len, &opts, &t, &err), TM_ERR_LIMIT);
    cr_expect(strstr(err.message, "max_inflated_bytes"), "%s", err.message);
    cr_expect_eq(tm_trace_parse(zst, zst_len, &opts, &t, &err), TM_ERR_LIMIT);
    opts.limits.max_inflated_bytes = len;
    cr_expect_eq(tm_trace_parse(gz, gz_len, &opts, &t, &err), TM_OK, "%s", err.message);
    tm_trace_free(t);
    cr_expect_eq(tm_trace_parse(zst, zst_len, &opts, &t, &err), TM_OK, "%s", err.message);
    tm_trace_free(t);
    /* Relay's converter reads uncompressed traces only */
    tm_options relay = {.mode = TM_MODE_RELAY};
    cr_expect_eq(tm_trace_parse(gz, gz_len, &relay, &t, &err), TM_ERR_UNSUPPORTED);
    free(junk);
    free(gz);
    free(zst);
    free(plain);
}

Test(input_compressed, gzip_members_concatenate_and_an_empty_stream_is_empty) {
    size_t len, gz_len, empty_len;
    char *plain = read_fixture(MINIMAL, &len);
    uint8_t *gz = gzip_of(plain, len, &gz_len), *empty = gzip_of("", 0, &empty_len);
    uint8_t *two = malloc(2 * gz_len);
    memcpy(two, gz, gz_len);
    memcpy(two + gz_len, gz, gz_len);
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(two, 2 * gz_len, NULL, &t, &err), TM_OK, "%s", err.message);
    cr_expect_eq(tm_trace_get_stats(t)->bytes_decompressed, 2 * len);
    tm_trace_free(t);
    cr_expect_eq(tm_trace_parse(empty, empty_len, NULL, &t, &err), TM_ERR_EMPTY);
    tm_db *db = NULL;
    cr_expect_eq(tm_db_new(empty, empty_len, NULL, &db, &err), TM_ERR_EMPTY);
    free(two);
    free(empty);
    free(gz);
    free(plain);
}

Test(input_compressed, a_gzip_bomb_stops_at_the_cap) {
    size_t n = 64u << 20, gz_len;
    uint8_t *zeros = calloc(1, n);
    uint8_t *gz = gzip_of(zeros, n, &gz_len);
    free(zeros);
    tu_fail_alloc fa = {.fail_at = -1};
    tm_alloc alloc = {.malloc_fn = tu_fa_malloc, .realloc_fn = tu_fa_realloc, .free_fn = tu_fa_free, .ctx = &fa};
    tm_options opts = {.alloc = &alloc};
    opts.limits.max_inflated_bytes = 1u << 20;
    tm_trace *t = NULL;
    tm_error err;
    cr_expect_eq(tm_trace_parse(gz, gz_len, &opts, &t, &err), TM_ERR_LIMIT);
    cr_expect_lt(err.offset, gz_len, "stops inside the stream");
    cr_expect_eq(fa.live, 0, "everything freed");
    free(gz);
}

Test(input_compressed, cli_reads_compressed_files_and_pipes) {
    shell_result plain = shell(CLI " convert -f folded " TM_SOURCE_DIR "/examples/demo.pftrace");
    cr_assert_eq(plain.code, 0, "%s", plain.err);
    shell_result gz = shell("gzip -c " TM_SOURCE_DIR "/examples/demo.pftrace | " CLI " convert -f folded -");
    cr_expect_eq(gz.code, 0, "%s", gz.err);
    cr_expect_str_eq(gz.out, plain.out);
    shell_free(&gz);
    shell_result zst = shell("zstd -q -c " TM_SOURCE_DIR "/examples/demo.pftrace | " CLI " convert -f folded -");
    cr_expect_eq(zst.code, 0, "%s", zst.err);
    cr_expect_str_eq(zst.out, plain.out);
    shell_free(&zst);
    shell_free(&plain);
    shell_result q = shell("gzip -c " MINIMAL " > /tmp/tm_input_q.pftrace.gz && " CLI
                           " query /tmp/tm_input_q.pftrace.gz 'select count(*) as n from perf_sample' --format csv; "
                           "rm -f /tmp/tm_input_q.pftrace.gz");
    cr_expect_eq(q.code, 0, "%s", q.err);
    cr_expect(strstr(q.out, "n\n2"), "%s", q.out);
    shell_free(&q);
    expect_rejected("gzip -c " MINIMAL " | head -c 30 | " CLI " info -", "TM_ERR_TRUNCATED at byte 30",
                    "gzip-compressed input", NULL);
}
