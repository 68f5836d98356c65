/*
 * cli.h — shared pieces of the tracemill command: exit codes, input loading
 * (mmap for files, a growing buffer for stdin) and error printing. The CLI
 * uses only the public header include/tracemill.h.
 */
#ifndef TM_CLI_H
#define TM_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tracemill.h"
#include "tracemill_sql.h" /* the query commands' tm_db and sqlite3 */

enum { EXIT_OK = 0, EXIT_REJECTED = 1, EXIT_USAGE = 2, EXIT_IO = 3 };

typedef struct cli_input {
    const uint8_t *data;
    size_t len;
    int mapped; /* 1: munmap, 0: free */
} cli_input;

/* A progress line on stderr for long work (cli_progress.c): nothing unless
 * stderr is a terminal, quiet is 0 and the work passes a second. phase
 * names what runs now ("reading", "decoding", ...), total its input bytes
 * (0: unknown); cli_progress_bytes the bytes done so far. stop erases the
 * line. */
void cli_progress_start(int quiet);
void cli_progress_phase(const char *name, size_t total);
void cli_progress_bytes(size_t done);
void cli_progress_stop(void);

/* Loads path ("-" is stdin), at most the max_input_bytes of opts (NULL: the
 * generous preset). Prints an error and returns EXIT_IO on failure, or
 * EXIT_REJECTED for an input past the limit. */
int cli_input_load(const char *path, const tm_options *opts, cli_input *in);
void cli_input_release(cli_input *in);

/* Prints "tracemill: <what>: <reason> at byte N: message" for a library error;
 * returns the exit code for it. */
int cli_report_error(const char *what, const tm_error *err);
/* EXIT_OK when in is a Perfetto trace (or empty: its reader says so);
 * else says that cmd reads Perfetto traces only and what in is instead,
 * and returns EXIT_REJECTED. */
int cli_require_perfetto(const char *cmd, const char *path, const cli_input *in);
/* The same for an exporter's error: about the decoded profile (a format
 * that cannot hold it), so no byte of the input is named. */
int cli_report_export_error(const char *what, const tm_error *err);
/* Says on stderr that a trace was cut off inside its packet at byte at
 * (what came before was read); cli_warn_truncated: if a decoded one was. */
void cli_warn_cut_off(const char *what, uint64_t at);
void cli_warn_truncated(const char *what, const tm_trace *t);

/* Parses a limit value (decimal, optional k/M/G suffix); returns 0 on error. */
int cli_parse_u64(const char *s, uint64_t *out);

/* Applies --max-* and --limits options; returns 1 if argv[*i] was one of them
 * (consuming its value), 0 if not, -1 on a bad value. */
int cli_limit_option(int argc, char **argv, int *i, tm_options *opts);
/* Why cli_limit_option refused option opt's value v (NULL: none), as
 * "OPT needs ...", into out. */
void cli_limit_problem(const char *opt, const char *v, char *out, size_t cap);

/* An output of a command (see cli_io.c). "-" or NULL is stdout; a device
 * or FIFO is written in place; a regular file (symbolic links followed) is
 * written to a temporary file beside it that replaces it, with its mode,
 * only when the command succeeds. */
typedef struct cli_output {
    FILE *f;      /* where to write; NULL with CLI_OUT_NAMED on a regular file */
    const char *path; /* as given, for messages; NULL for stdout */
    char *target; /* the file renamed onto */
    char *tmp;    /* the file being written (CLI_OUT_NAMED: write to this name) */
    int special;  /* a device or FIFO */
} cli_output;

enum {
    CLI_OUT_BINARY = 1, /* refused on a terminal */
    CLI_OUT_NAMED = 2,  /* the writer needs a file by name (tmp), even for a device */
};

/* Opens path for writing; inputs (NULL-terminated, may be NULL) are the
 * files it must not be. Prints why and returns the exit code on failure. */
int cli_output_open(const char *path, int flags, const char *const *inputs, cli_output *o);
/* Flushes and closes; replaces the target when rc is EXIT_OK, else leaves
 * it as it was. Returns rc or the write failure. */
int cli_output_close(cli_output *o, int rc);
/* Prints "tracemill: cannot write PATH: <errno text>" (PATH NULL: standard
 * output); returns EXIT_IO. */
int cli_output_error(const char *path, int errnum);
/* What main returns: rc, or EXIT_IO (said on stderr) when standard output
 * could not be written (a full disk, a closed pipe, /dev/full). */
int cli_close_stdout(int rc);

/* ---- exporters (cli_export.c), shared by convert and diff ---- */

typedef enum { FMT_SAMPLE_V2, FMT_PPROF, FMT_FOLDED, FMT_SPEEDSCOPE, FMT_SVG, FMT_REPORT, FMT_SAMPLE_V1 } cli_format;

typedef struct cli_export {
    tm_options opts; /* mode, limits, input format */
    cli_format format;
    tm_sample_v2_options v2;
    tm_sample_v1_options v1;
    tm_thread_filter threads;
    int64_t period_ns;
    int thread_prefix, reverse, uncompressed, quiet;
    unsigned width_px;
    const char *title;
    tm_value value;  /* --value: what memory profiles weigh */
    char bad[160];   /* why cli_export_option refused a value ("": a limit's, see cli_limit_option) */
} cli_export;

/* Parses -f/--format (NULL: no -f given) into x->format; 0 on an unknown
 * name. */
int cli_parse_format(const char *name, cli_format *out);

/* Parses an option shared by convert and diff (limits, input format,
 * thread filter, period, flame graph and folded switches). Returns 1 if
 * argv[*i] was one (consuming its value), 0 if not, -1 on a bad value
 * (after printing why). */
int cli_export_option(int argc, char **argv, int *i, cli_export *x);
/* The usage message for an option given that x's format would ignore
 * (diff: for `tracemill diff`), or NULL: such options are refused. */
const char *cli_export_ignored(const cli_export *x, int diff);

/* Writes t (diff: base against t) in x->format to out. */
tm_status cli_export_write(const cli_export *x, const tm_trace *base, const tm_trace *t, const tm_sink *out,
                           tm_error *err);

int cli_convert(int argc, char **argv);
int cli_diff(int argc, char **argv);
int cli_info(int argc, char **argv);
/* The ingest server and its local store (cli_serve.c, the tracemill-serve
 * program). */
int cli_serve(int argc, char **argv);
int cli_store(int argc, char **argv);

/* ---- SQL (cli_query.c, cli_shell.c): query, export-sqlite, the shell ---- */

typedef enum { QFMT_TABLE, QFMT_CSV, QFMT_JSON, QFMT_PERFETTO } cli_qformat;

/* Where and how result sets are printed, shared by every statement of a run. */
typedef struct cli_qout {
    FILE *f;
    cli_qformat format;
    int timer;       /* print each statement's wall time to stderr */
    int result_sets; /* printed so far: separators go between them */
    int statements;  /* run so far: errors name statements by number */
    double timeout_s; /* --timeout: a statement running longer stops (0: none) */
    double deadline;  /* of the running statement, on the monotonic clock */
    volatile sig_atomic_t cancel; /* set by the shell's Ctrl-C: stop the statement */
    int write_errno; /* f failed (a reader that went away): the errno; the statement stopped */
} cli_qout;

/* Makes the statements run on db stop (SQLITE_INTERRUPT) at o's timeout or
 * when o->cancel is set. */
void cli_query_watch(struct sqlite3 *db, cli_qout *o);

/* Parses table|csv|json|perfetto; 0 on an unknown name. */
int cli_qformat_parse(const char *name, cli_qformat *out);
extern const char *const cli_qformat_names[]; /* indexed by cli_qformat */

/* Runs every statement of sql (NUL-terminated) in order and prints each
 * result set. On an SQL error prints "tracemill query: WHERE:LINE:COL:
 * statement N: message" (first_line: the line sql starts on in WHERE) and
 * returns EXIT_REJECTED; else EXIT_OK. */
int cli_query_run(struct sqlite3 *db, const char *sql, const char *where, int first_line, cli_qout *o);

/* Reads statements and dot-commands (.help lists them) from stdin: with
 * line editing and history when interactive, else as a script that stops
 * at the first error. Returns the exit code. */
int cli_query_shell(struct sqlite3 *db, cli_qout *o, int interactive);

int cli_query(int argc, char **argv);
int cli_export_sqlite(int argc, char **argv);

/* ---- symbols (cli_symbolize.c): symbolize, and --symbols on convert and query ---- */

typedef struct cli_symbols {
    const char **dirs; size_t n_dirs;     /* --symbols DIR */
    tm_proguard_map *maps; size_t n_maps; /* --proguard-map [PACKAGE=]MAP */
    cli_input *map_files;                 /* their contents */
    int no_system;                        /* --no-system-symbols */
    const char *debuginfod;               /* --debuginfod-cache DIR */
    int any;                              /* a --symbols, --proguard-map or --debuginfod-cache was given */
    int no_demangle;                      /* --no-demangle: C++ names as the ELF file spells them */
    char bad[256];                        /* why a value was refused: the usage error's one line */
} cli_symbols;

/* Parses --symbols, --proguard-map, --debuginfod-cache,
 * --no-system-symbols or --no-demangle: 1 if argv[*i] was one (consuming its value), 0 if
 * not, -1 on a bad value (why in s->bad for the caller's usage error, or said). */
int cli_symbols_option(int argc, char **argv, int *i, cli_symbols *s);
/* With any --symbols, --proguard-map or --debuginfod-cache: replaces in by the trace
 * tm_symbolize makes of it, in memory; returns the exit code. */
int cli_symbols_apply(const cli_symbols *s, const tm_options *opts, const char *what, cli_input *in);
void cli_symbols_release(cli_symbols *s);
/* Replaces the trace file at path (name in messages) by the trace
 * tm_symbolize makes of it, and says what was symbolized; on failure says
 * why and leaves the file as it was. Returns the exit code. */
int cli_symbolize_file(const char *path, const char *name, const cli_symbols *s);
int cli_symbolize(int argc, char **argv);

/* `tracemill record`: runs a command under libtracemill_record.so. */
int cli_record(int argc, char **argv);

/* Prints "tracemill CMD: <message>" and "see 'tracemill CMD --help'" (cmd
 * NULL: the overview); returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
