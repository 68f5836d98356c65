/*
 * cli_query.c — `tracemill query` and `tracemill export-sqlite`: SQL over a
 * trace through the library's SQL API (tm_db_*), and the result printers.
 *
 * A run prepares the SQL text one statement at a time (sqlite3_prepare_v2's
 * tail), skipping empty ones, and prints each statement that has columns:
 *   perfetto  Trace Processor shell's CSV, byte for byte: names and strings
 *             in double quotes (written verbatim, as Trace Processor does: an
 *             embedded quote is not doubled), doubles with "%f", NULL as
 *             "[NULL]"; result sets separated by one blank line.
 *   csv       RFC 4180 quoting (a field holding , " CR or LF is quoted, "
 *             doubled), LF line ends, NULL empty; blank line between sets.
 *   json      one array of objects per statement, one object per line;
 *             numbers as numbers (non-finite doubles null), NULL null,
 *             strings escaped (invalid UTF-8 becomes U+FFFD).
 *   table     aligned columns for people, buffered per statement.
 * BLOBs print as X'hex' text (table: their size). The interactive shell
 * and stdin scripts live in cli_shell.c.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

const char *const cli_qformat_names[] = {"table", "csv", "json", "perfetto"};

int cli_qformat_parse(const char *name, cli_qformat *out) {
    for (int i = 0; i < 4; i++)
        if (strcmp(name, cli_qformat_names[i]) == 0) {
            *out = (cli_qformat)i;
            return 1;
        }
    return 0;
}

/* ---- value rendering shared by the formats ---- */

/* The shortest of %.15g / %.17g that reads back as v, with ".0" added to
 * integral values so a REAL never looks like an INTEGER. */
static void format_double(double v, char *buf, size_t cap) {
    if (!isfinite(v)) {
        snprintf(buf, cap, "%s", isnan(v) ? "nan" : v < 0 ? "-inf" : "inf");
        return;
    }
    snprintf(buf, cap, "%.15g", v);
    if (strtod(buf, NULL) != v) snprintf(buf, cap, "%.17g", v);
    if (!strpbrk(buf, ".eE")) {
        size_t n = strlen(buf);
        if (n + 3 <= cap) memcpy(buf + n, ".0", 3);
    }
}

static void write_blob_hex(FILE *f, sqlite3_stmt *st, int c) {
    const unsigned char *b = sqlite3_column_blob(st, c);
    int n = sqlite3_column_bytes(st, c);
    fputs("X'", f);
    for (int i = 0; i < n; i++) fprintf(f, "%02x", b[i]);
    fputc('\'', f);
}

/* ---- perfetto: Trace Processor's CSV ---- */

static void perfetto_header(FILE *f, sqlite3_stmt *st, int n) {
    for (int c = 0; c < n; c++) fprintf(f, "%s\"%s\"", c ? "," : "", sqlite3_column_name(st, c));
    fputc('\n', f);
}

static void perfetto_row(FILE *f, sqlite3_stmt *st, int n, long row) {
    (void)row;
    for (int c = 0; c < n; c++) {
        if (c) fputc(',', f);
        switch (sqlite3_column_type(st, c)) {
        case SQLITE_INTEGER: fprintf(f, "%lld", (long long)sqlite3_column_int64(st, c)); break;
        case SQLITE_FLOAT: fprintf(f, "%f", sqlite3_column_double(st, c)); break;
        case SQLITE_NULL: fputs("\"[NULL]\"", f); break;
        case SQLITE_BLOB:
            fputc('"', f);
            write_blob_hex(f, st, c);
            fputc('"', f);
            break;
        default:
            fputc('"', f);
            fwrite(sqlite3_column_text(st, c), 1, (size_t)sqlite3_column_bytes(st, c), f);
            fputc('"', f);
        }
    }
    fputc('\n', f);
}

/* ---- csv: RFC 4180 ---- */

static void csv_field(FILE *f, const char *s, size_t len) {
    int quote = 0;
    for (size_t i = 0; i < len && !quote; i++) quote = s[i] == ',' || s[i] == '"' || s[i] == '\r' || s[i] == '\n';
    if (!quote) {
        fwrite(s, 1, len, f);
        return;
    }
    fputc('"', f);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"') fputc('"', f);
        fputc(s[i], f);
    }
    fputc('"', f);
}

static void csv_header(FILE *f, sqlite3_stmt *st, int n) {
    for (int c = 0; c < n; c++) {
        const char *name = sqlite3_column_name(st, c);
        if (c) fputc(',', f);
        csv_field(f, name, strlen(name));
    }
    fputc('\n', f);
}

static void csv_row(FILE *f, sqlite3_stmt *st, int n, long row) {
    (void)row;
    char num[40];
    for (int c = 0; c < n; c++) {
        if (c) fputc(',', f);
        switch (sqlite3_column_type(st, c)) {
        case SQLITE_INTEGER: fprintf(f, "%lld", (long long)sqlite3_column_int64(st, c)); break;
        case SQLITE_FLOAT:
            format_double(sqlite3_column_double(st, c), num, sizeof num);
            fputs(num, f);
            break;
        case SQLITE_NULL: break;
        case SQLITE_BLOB: write_blob_hex(f, st, c); break;
        default:
            csv_field(f, (const char *)sqlite3_column_text(st, c), (size_t)sqlite3_column_bytes(st, c));
        }
    }
    fputc('\n', f);
}

/* ---- json ---- */

/* Length of the valid UTF-8 sequence at s (0: invalid), per RFC 3629. */
static size_t utf8_len(const unsigned char *s, size_t left) {
    unsigned char c = s[0];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || n > left) return 0;
    uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1Fu : n == 3 ? c & 0x0Fu : c & 0x07u;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3Fu);
    }
    static const uint32_t min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return n;
}

static void json_string(FILE *f, const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    fputc('"', f);
    for (size_t i = 0; i < len;) {
        unsigned char c = s[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else {
            size_t n = utf8_len(s + i, len - i);
            if (n == 0) fputs("\xEF\xBF\xBD", f); /* U+FFFD for one bad byte */
            else fwrite(s + i, 1, n, f);
            i += n ? n : 1;
            continue;
        }
        i++;
    }
    fputc('"', f);
}

static void json_header(FILE *f, sqlite3_stmt *st, int n) {
    (void)st, (void)n;
    fputc('[', f);
}

static void json_row(FILE *f, sqlite3_stmt *st, int n, long row) {
    char num[40];
    if (row) fputs(",\n", f);
    fputc('{', f);
    for (int c = 0; c < n; c++) {
        const char *name = sqlite3_column_name(st, c);
        if (c) fputc(',', f);
        json_string(f, name, strlen(name));
        fputc(':', f);
        switch (sqlite3_column_type(st, c)) {
        case SQLITE_INTEGER: fprintf(f, "%lld", (long long)sqlite3_column_int64(st, c)); break;
        case SQLITE_FLOAT: {
            double v = sqlite3_column_double(st, c);
            format_double(v, num, sizeof num);
            fputs(isfinite(v) ? num : "null", f);
            break;
        }
        case SQLITE_NULL: fputs("null", f); break;
        case SQLITE_BLOB:
            fputc('"', f);
            write_blob_hex(f, st, c);
            fputc('"', f);
            break;
        default:
            json_string(f, (const char *)sqlite3_column_text(st, c), (size_t)sqlite3_column_bytes(st, c));
        }
    }
    fputc('}', f);
}

/* ---- table: aligned columns, every cell buffered first ---- */

typedef struct cell {
    char *text; /* control characters escaped, so one line each */
    size_t width; /* in terminal columns */
    int right;    /* numbers align right */
} cell;

/* Columns a code point takes on a terminal: 2 for East Asian wide and
 * full-width characters (CJK, Hangul, full-width forms, emoji), 0 for
 * combining marks and zero-width characters, else 1. Not from the locale's
 * wcwidth: the output is UTF-8 whatever the locale says. */
static size_t cp_width(uint32_t cp) {
    static const uint32_t zero[][2] = {{0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x0610, 0x061A},
                                       {0x064B, 0x065F}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF}, {0x200B, 0x200F},
                                       {0x20D0, 0x20FF}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}, {0xFEFF, 0xFEFF}};
    static const uint32_t wide[][2] = {{0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF},
                                       {0x3400, 0x4DBF},   {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},
                                       {0xAC00, 0xD7A3},   {0xF900, 0xFAFF},   {0xFE30, 0xFE4F},
                                       {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},   {0x1F300, 0x1F64F},
                                       {0x1F900, 0x1F9FF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD}};
    for (size_t i = 0; i < sizeof zero / sizeof *zero; i++)
        if (cp >= zero[i][0] && cp <= zero[i][1]) return 0;
    for (size_t i = 0; i < sizeof wide / sizeof *wide; i++)
        if (cp >= wide[i][0] && cp <= wide[i][1]) return 2;
    return 1;
}

static size_t display_width(const char *s) {
    size_t w = 0;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        /* a lead byte and its continuation bytes; a stray byte counts as one column */
        uint32_t cp = *p;
        int more = cp >= 0xF0 && cp < 0xF8 ? 3 : cp >= 0xE0 ? 2 : cp >= 0xC0 ? 1 : 0;
        if (cp >= 0xF8) more = 0;
        cp &= more == 3 ? 0x07 : more == 2 ? 0x0F : more == 1 ? 0x1F : 0xFF;
        p++;
        for (; more && (*p & 0xC0) == 0x80; more--, p++) cp = cp << 6 | (*p & 0x3F);
        w += more ? 1 : cp_width(cp);
    }
    return w;
}

/* Copies src[0..len) with control characters written as \n, \t, \xNN. */
static char *escape_controls(const char *src, size_t len) {
    char *out = malloc(len * 4 + 1), *p = out;
    if (!out) return NULL;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c == '\n') p += snprintf(p, 3, "\\n");
        else if (c == '\t') p += snprintf(p, 3, "\\t");
        else if (c < 0x20 || c == 0x7F) p += snprintf(p, 5, "\\x%02x", c);
        else *p++ = (char)c;
    }
    *p = 0;
    return out;
}

static int make_cell(sqlite3_stmt *st, int c, cell *out) {
    char buf[40];
    const char *s = buf;
    int type = sqlite3_column_type(st, c);
    out->right = type == SQLITE_INTEGER || type == SQLITE_FLOAT;
    if (type == SQLITE_INTEGER) snprintf(buf, sizeof buf, "%lld", (long long)sqlite3_column_int64(st, c));
    else if (type == SQLITE_FLOAT) format_double(sqlite3_column_double(st, c), buf, sizeof buf);
    else if (type == SQLITE_NULL) s = "NULL";
    else if (type == SQLITE_BLOB) snprintf(buf, sizeof buf, "<%d-byte blob>", sqlite3_column_bytes(st, c));
    else s = (const char *)sqlite3_column_text(st, c);
    size_t len = type == SQLITE_TEXT ? (size_t)sqlite3_column_bytes(st, c) : strlen(s);
    out->text = escape_controls(s ? s : "", s ? len : 0);
    if (!out->text) return 0;
    out->width = display_width(out->text);
    return 1;
}

static void pad(FILE *f, size_t n) {
    while (n--) fputc(' ', f);
}

static void table_print(FILE *f, const cell *cells, size_t rows, int n) {
    size_t *w = calloc((size_t)n, sizeof *w);
    if (!w) return;
    for (size_t r = 0; r <= rows; r++) /* row 0 is the header */
        for (int c = 0; c < n; c++)
            if (cells[r * (size_t)n + (size_t)c].width > w[c]) w[c] = cells[r * (size_t)n + (size_t)c].width;
    for (size_t r = 0; r <= rows; r++) {
        for (int c = 0; c < n; c++) {
            const cell *x = &cells[r * (size_t)n + (size_t)c];
            fputs(c ? " | " : " ", f);
            if (x->right) pad(f, w[c] - x->width);
            fputs(x->text, f);
            if (!x->right && c + 1 < n) pad(f, w[c] - x->width);
        }
        fputc('\n', f);
        if (r == 0) {
            for (int c = 0; c < n; c++) {
                fputs(c ? "-+-" : "-", f);
                for (size_t k = 0; k < w[c]; k++) fputc('-', f);
            }
            fputs("-\n", f);
        }
    }
    fprintf(f, "(%zu row%s)\n", rows, rows == 1 ? "" : "s");
    free(w);
}

/* Steps st to the end from its first step's code (rc: a row, or done),
 * printing it as a table; returns the last step code. */
static int table_run(FILE *f, sqlite3_stmt *st, int n, int rc) {
    size_t rows = 0, cap = 16, un = (size_t)n;
    cell *cells = calloc(cap * un, sizeof *cells); /* zeroed: free(NULL) on unmade cells */
    if (!cells) rc = SQLITE_NOMEM;
    for (int c = 0; c < n && cells; c++) {
        const char *name = sqlite3_column_name(st, c);
        cells[c].text = escape_controls(name, strlen(name));
        if (!cells[c].text) rc = SQLITE_NOMEM;
        else cells[c].width = display_width(cells[c].text);
    }
    while (rc == SQLITE_ROW) {
        if (rows + 2 > cap) {
            cell *nc = realloc(cells, cap * 2 * un * sizeof *cells);
            if (!nc) {
                rc = SQLITE_NOMEM;
                break;
            }
            memset(nc + cap * un, 0, cap * un * sizeof *cells);
            cells = nc;
            cap *= 2;
        }
        rows++;
        for (int c = 0; c < n && rc == SQLITE_ROW; c++)
            if (!make_cell(st, c, &cells[rows * un + (size_t)c])) rc = SQLITE_NOMEM;
        if (rc == SQLITE_ROW) rc = sqlite3_step(st);
    }
    if (rc == SQLITE_DONE) table_print(f, cells, rows, n);
    for (size_t i = 0; cells && i < (rows + 1) * un; i++) free(cells[i].text);
    free(cells);
    return rc;
}

/* ---- running statements ---- */

typedef struct stream_writer {
    void (*header)(FILE *f, sqlite3_stmt *st, int n);
    void (*row)(FILE *f, sqlite3_stmt *st, int n, long row);
    const char *footer;
} stream_writer;

static const stream_writer writers[] = {
    [QFMT_CSV] = {csv_header, csv_row, ""},
    [QFMT_JSON] = {json_header, json_row, "]\n"},
    [QFMT_PERFETTO] = {perfetto_header, perfetto_row, ""},
};

/* Steps st to the end, printing its rows; returns the last step code. */
static int print_result(sqlite3_stmt *st, cli_qout *o) {
    int n = sqlite3_column_count(st);
    if (n == 0) { /* CREATE, INSERT, ...: run, print nothing */
        int rc;
        while ((rc = sqlite3_step(st)) == SQLITE_ROW) {}
        return rc;
    }
    /* a statement that fails at its first step prints nothing, not even
     * its header (or an empty JSON array) */
    int rc = sqlite3_step(st);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return rc;
    if (o->result_sets++ && o->format != QFMT_JSON) fputc('\n', o->f);
    if (o->format == QFMT_TABLE) return table_run(o->f, st, n, rc);
    const stream_writer *w = &writers[o->format];
    w->header(o->f, st, n);
    long row = 0;
    /* a write that failed (EPIPE with SIGPIPE ignored) ends the statement:
     * an unbounded one would run on forever */
    for (; rc == SQLITE_ROW && !o->write_errno; rc = sqlite3_step(st)) {
        w->row(o->f, st, n, row++);
        if (ferror(o->f)) o->write_errno = errno ? errno : EIO;
    }
    fputs(w->footer, o->f);
    return rc;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Line and column (both from 1) of pos in text, counted from first_line. */
static void position(const char *text, const char *pos, int first_line, int *line, int *col) {
    *line = first_line;
    *col = 1;
    for (const char *p = text; p < pos; p++) {
        if (*p == '\n') ++*line, *col = 1;
        else if (((unsigned char)*p & 0xC0) != 0x80) ++*col;
    }
}

static int progress(void *ctx) {
    const cli_qout *o = ctx;
    return o->cancel || (o->timeout_s > 0 && now_s() > o->deadline);
}

void cli_query_watch(sqlite3 *db, cli_qout *o) { sqlite3_progress_handler(db, 10000, progress, o); }

static int sql_error(sqlite3 *db, const char *sql, const char *at, int stmt_no, const char *where,
                     int first_line, const cli_qout *o) {
    int line, col, off = sqlite3_error_offset(db), code = sqlite3_errcode(db);
    if (off < 0) at = tm_db_statement_start(at); /* a run-time error: point at the statement */
    else at += off;
    position(sql, at, first_line, &line, &col);
    fflush(stdout);
    fprintf(stderr, "tracemill query: %s:%d:%d: statement %d: ", where, line, col, stmt_no);
    if (code == SQLITE_INTERRUPT && o->cancel) fputs("interrupted\n", stderr);
    else if (code == SQLITE_INTERRUPT) fprintf(stderr, "stopped after --timeout %g s\n", o->timeout_s);
    else if (code == SQLITE_AUTH)
        fprintf(stderr, "%s (queries may not write files or settings: no ATTACH, VACUUM or pragma assignments; "
                        "export-sqlite writes a database)\n", sqlite3_errmsg(db));
    else fprintf(stderr, "%s\n", sqlite3_errmsg(db));
    return EXIT_REJECTED;
}

int cli_query_run(sqlite3 *db, const char *sql, const char *where, int first_line, cli_qout *o) {
    for (const char *p = sql; *p;) {
        sqlite3_stmt *st = NULL;
        const char *tail = NULL;
        tm_error err = {0};
        int include = tm_db_include(db, p, &tail, &err);
        if (include < 0) {
            int line, col;
            position(sql, p + err.offset, first_line, &line, &col);
            fflush(stdout);
            fprintf(stderr, "tracemill query: %s:%d:%d: statement %d: %s\n", where, line, col, o->statements + 1,
                    err.message);
            return EXIT_REJECTED;
        }
        if (include) {
            p = tail;
            continue;
        }
        if (sqlite3_prepare_v2(db, p, -1, &st, &tail) != SQLITE_OK)
            return sql_error(db, sql, p, o->statements + 1, where, first_line, o);
        if (!st) { /* only blanks, comments or ';' */
            if (!tail || tail == p) break;
            p = tail;
            continue;
        }
        o->statements++;
        double t0 = now_s();
        o->deadline = t0 + o->timeout_s;
        int rc = print_result(st, o);
        if (o->timer) fprintf(stderr, "time: %.3f ms\n", (now_s() - t0) * 1e3);
        if (o->write_errno) rc = cli_output_error(NULL, o->write_errno);
        else if (rc != SQLITE_DONE) rc = sql_error(db, sql, p, o->statements, where, first_line, o);
        else rc = EXIT_OK;
        sqlite3_finalize(st);
        if (rc != EXIT_OK) return rc;
        p = tail;
    }
    return EXIT_OK;
}

/* ---- the commands ---- */

/* Opens path as a tm_db, with a progress line on a terminal unless quiet;
 * on failure prints why and returns the exit code. */
static int open_db(const char *path, const tm_options *opts, const cli_symbols *sym, int quiet, cli_input *in,
                   tm_db **db) {
    cli_progress_start(quiet);
    cli_progress_phase("reading", 0);
    int rc = cli_input_load(path, opts, in);
    if (rc == EXIT_OK && (rc = cli_require_perfetto("SQL (query, export-sqlite)", path, in)) != EXIT_OK)
        cli_input_release(in);
    if (rc == EXIT_OK && sym->any) {
        cli_progress_phase("symbolizing", in->len);
        if ((rc = cli_symbols_apply(sym, opts, path, in)) != EXIT_OK) cli_input_release(in);
    }
    if (rc == EXIT_OK) cli_progress_phase("loading the tables of", in->len);
    tm_error err;
    if (rc == EXIT_OK && tm_db_new(in->data, in->len, opts, db, &err) != TM_OK) {
        cli_progress_stop(); /* the error starts on a clean line */
        rc = cli_report_error(path, &err);
        cli_input_release(in);
    }
    cli_progress_stop();
    uint64_t cut_at;
    if (rc == EXIT_OK && tm_db_truncated(*db, &cut_at)) cli_warn_cut_off(path, cut_at);
    return rc;
}

/* The whole of path as a NUL-terminated string (NULL after printing why). */
static char *read_text(const char *path, const tm_options *opts) {
    cli_input in;
    if (cli_input_load(path, opts, &in) != EXIT_OK) return NULL;
    char *s = malloc(in.len + 1);
    if (s) {
        if (in.len) memcpy(s, in.data, in.len);
        s[in.len] = 0;
    } else {
        fprintf(stderr, "tracemill: out of memory reading %s\n", path);
    }
    cli_input_release(&in);
    return s;
}

static int usage(const char *cmd, const char *why, const char *arg) {
    return cli_usage_error(cmd, "%s%s", why, arg ? arg : "");
}

/* A limit option's bad value; opt is argv's element that named it. */
static int limit_usage(const char *cmd, int argc, char **argv, const char *opt) {
    int at = 0;
    while (at < argc && argv[at] != opt) at++;
    char why[160];
    cli_limit_problem(opt, at + 1 < argc ? argv[at + 1] : NULL, why, sizeof why);
    return cli_usage_error(cmd, "%s", why);
}

/* Parses query's arguments; returns the exit code of a usage error, or
 * EXIT_OK. */
static int query_args(int argc, char **argv, tm_options *opts, cli_symbols *sym, cli_qout *o, const char **trace,
                      const char **sql, const char **file, int *quiet) {
    int options = 1; /* until "--": after it SQL may start with "-- comment" */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (options && strcmp(a, "--") == 0) {
            options = 0;
            continue;
        }
        if (!options) {
            if (!*trace) *trace = a;
            else if (!*sql) *sql = a;
            else return usage("query", "too many arguments: ", a);
            continue;
        }
        int r = cli_symbols_option(argc, argv, &i, sym);
        if (r < 0 && sym->bad[0]) return usage("query", sym->bad, NULL);
        if (r == 0 && (r = cli_limit_option(argc, argv, &i, opts)) < 0) return limit_usage("query", argc, argv, a);
        if (r < 0) return usage("query", "bad value for ", a);
        if (r > 0) continue;
        if (strcmp(a, "--quiet") == 0) {
            *quiet = 1;
            continue;
        }
        if (strcmp(a, "-f") == 0 || strcmp(a, "--file") == 0) {
            if (++i >= argc) return usage("query", "-f needs a file", NULL);
            if (*file) return usage("query", "more than one -f given", NULL);
            *file = argv[i];
            cli_qformat f;
            cli_format x;
            /* convert's -f is a format: catch the habit before reading a
             * file named "csv" */
            if (cli_qformat_parse(*file, &f) || cli_parse_format(*file, &x)) {
                return cli_usage_error("query", "-f takes a file of SQL, not a format: did you mean --format %s?",
                                       *file);
            }
        } else if (strcmp(a, "--timeout") == 0) {
            char *end = NULL;
            o->timeout_s = ++i < argc ? strtod(argv[i], &end) : 0;
            if (!end || *end || !(o->timeout_s > 0)) return usage("query", "--timeout needs seconds > 0", NULL);
        } else if (strcmp(a, "--format") == 0) {
            if (++i >= argc) return usage("query", "--format needs table, csv, json or perfetto", NULL);
            if (!cli_qformat_parse(argv[i], &o->format)) return usage("query", "unknown --format ", argv[i]);
        } else if (a[0] == '-' && a[1] != 0) {
            if (a[1] == '-' && a[strcspn(a, " \t\r\n")]) /* SQL opening with a comment */
                return usage("query", "SQL that starts with \"--\" goes after \"--\": query TRACE -- SQL; not an option: ",
                             a);
            return usage("query", "unknown option ", a);
        } else if (!*trace) {
            *trace = a;
        } else if (!*sql) {
            *sql = a;
        } else {
            return usage("query", "too many arguments: ", a);
        }
    }
    if (!*trace) return usage("query", "no trace given", NULL);
    if (*sql && *file) return usage("query", "give the SQL as an argument or with -f, not both", NULL);
    if (!*sql && !*file && strcmp(*trace, "-") == 0)
        return usage("query", "the trace is on stdin: give the SQL as an argument or with -f", NULL);
    return EXIT_OK;
}

int cli_query(int argc, char **argv) {
    tm_options opts;
    memset(&opts, 0, sizeof opts);
    const char *trace = NULL, *sql = NULL, *file = NULL;
    int quiet = 0;
    cli_qout o = {stdout, isatty(STDOUT_FILENO) ? QFMT_TABLE : QFMT_CSV, 0, 0, 0, 0, 0, 0, 0};
    cli_symbols sym;
    memset(&sym, 0, sizeof sym);
    int rc = query_args(argc, argv, &opts, &sym, &o, &trace, &sql, &file, &quiet);
    char *text = NULL;
    if (rc == EXIT_OK && file && !(text = read_text(file, &opts))) rc = EXIT_IO;
    cli_input in;
    tm_db *db = NULL;
    if (rc == EXIT_OK && (rc = open_db(trace, &opts, &sym, quiet, &in, &db)) == EXIT_OK) {
        sqlite3 *s = tm_db_sqlite(db);
        cli_query_watch(s, &o);
        if (!sql && !file) rc = cli_query_shell(s, &o, isatty(STDIN_FILENO));
        else rc = cli_query_run(s, file ? text : sql, file ? file : "SQL", 1, &o);
        tm_db_free(db);
        cli_input_release(&in);
    }
    free(text);
    cli_symbols_release(&sym);
    return rc;
}

int cli_export_sqlite(int argc, char **argv) {
    tm_options opts;
    memset(&opts, 0, sizeof opts);
    const char *trace = NULL, *out = NULL;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_limit_option(argc, argv, &i, &opts);
        if (r < 0) return limit_usage("export-sqlite", argc, argv, a);
        if (r > 0) continue;
        if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1] != 0) return usage("export-sqlite", "unknown option ", argv[i]);
        if (!trace) trace = argv[i];
        else if (!out) out = argv[i];
        else return usage("export-sqlite", "too many arguments: ", argv[i]);
    }
    if (!out) return usage("export-sqlite", "needs TRACE and OUT.db", NULL);
    if (strcmp(out, "-") == 0) return usage("export-sqlite", "OUT.db must be a file", NULL);
    cli_input in;
    tm_db *db = NULL;
    cli_symbols none;
    memset(&none, 0, sizeof none);
    int rc = open_db(trace, &opts, &none, quiet, &in, &db);
    if (rc != EXIT_OK) return rc;
    const char *inputs[] = {trace, NULL};
    cli_output o;
    rc = cli_output_open(out, CLI_OUT_NAMED, inputs, &o);
    tm_error err;
    if (rc == EXIT_OK && tm_db_export(db, o.tmp, &err) != TM_OK) {
        fprintf(stderr, "tracemill: cannot write %s: %s\n", out, err.message);
        rc = EXIT_IO;
    }
    rc = cli_output_close(&o, rc);
    tm_db_free(db);
    cli_input_release(&in);
    return rc;
}
