/*
 * cli.h — shared pieces of the tracemill command: exit codes, input loading
 * (mmap for files, a growing buffer for stdin) and error printing. The CLI
 * uses only the public header include/tracemill.h.
 */
#ifndef TM_CLI_H
#define TM_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "tracemill.h"

enum { EXIT_OK = 0, EXIT_REJECTED = 1, EXIT_USAGE = 2, EXIT_IO = 3 };

typedef struct cli_input {
    const uint8_t *data;
    size_t len;
    int mapped; /* 1: munmap, 0: free */
} cli_input;

/* Loads path ("-" is stdin). Prints an error and returns EXIT_IO on failure. */
int cli_input_load(const char *path, cli_input *in);
void cli_input_release(cli_input *in);

/* Prints "tracemill: <what>: <reason> at byte N: message" for a library error;
 * returns the exit code for it. */
int cli_report_error(const char *what, const tm_error *err);

/* Parses a limit value (decimal, optional k/M/G suffix); returns 0 on error. */
int cli_parse_u64(const char *s, uint64_t *out);

/* Applies --max-* and --limits options; returns 1 if argv[*i] was one of them
 * (consuming its value), 0 if not, -1 on a bad value. */
int cli_limit_option(int argc, char **argv, int *i, tm_options *opts);

int cli_convert(int argc, char **argv);
int cli_info(int argc, char **argv);

extern const char cli_usage[];

#endif
