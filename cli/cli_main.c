/*
 * cli_main.c — `tracemill <command>` dispatch and usage text. Each command
 * lives in its own cli_<command>.c file.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

const char cli_usage[] =
    "usage: tracemill <command> [options]\n"
    "\n"
    "commands:\n"
    "  convert [-f FORMAT] [-o OUT|-] [options] INPUT|-\n"
    "      FORMAT: sample-v2 (default), pprof, folded, speedscope, svg, report\n"
    "      --meta META.json          Sample v2 chunk metadata to merge\n"
    "      --compat relay            byte-compatible with Sentry Relay (sample-v2)\n"
    "      --remove-single-samples   drop threads with at most one non-empty sample\n"
    "      --per-thread              pprof: one file per thread into -o DIRECTORY\n"
    "      --uncompressed            pprof: raw profile.proto instead of gzip\n"
    "      --period DURATION         pprof, speedscope: sampling period (default:\n"
    "                                inferred per thread), e.g. 10ms, 250us, 4000000\n"
    "      --thread NAME|TID         only this thread (--thread-name NAME for digits)\n"
    "      --thread-prefix           folded: the thread name as the root frame\n"
    "      --reverse  --title TEXT  --width PX   svg: icicle graph, title, width\n"
    "  diff BASE NEW [-f svg|folded] [-o OUT] [--thread ...] [--title TEXT] [--reverse]\n"
    "      differential flame graph (default) or \"stack BASE NEW\" folded lines\n"
    "  info TRACE|- [--json] [--compat relay]\n"
    "      packets, sequences, samples kept and dropped by reason, threads,\n"
    "      clocks, resets and data losses\n"
    "  query TRACE [SQL] [-f FILE.sql] [--format table|csv|json|perfetto]\n"
    "      SQL over Trace Processor's tables (process, thread, stack_profile_*,\n"
    "      perf_sample, stack_sample, stats, metadata, ...); several statements\n"
    "      allowed. Without SQL or -f: a shell on a terminal (.help), else the\n"
    "      SQL is read from stdin. Default format: table on a terminal, else\n"
    "      csv; perfetto is Trace Processor's CSV\n"
    "  export-sqlite TRACE OUT.db\n"
    "      the same tables as a standalone SQLite file\n"
    "  serve [--config FILE] [--listen HOST:PORT] [--store PATH] [--project ID:KEY]...\n"
    "      ingest Sentry envelopes (POST /api/ID/envelope/), convert profile\n"
    "      chunks, hand them to Kafka or the local store (default\n"
    "      127.0.0.1:3000, ./tracemill-store, project 1 with a generated key)\n"
    "  store ls | get CHUNK_ID [--raw] [-o OUT] | export OUT_DIR   [--store PATH]\n"
    "      what the local store holds: one line per chunk, a chunk's payload\n"
    "      JSON (--raw: its Perfetto trace), or every chunk as files\n"
    "  record [-F HZ] [-o OUT.pftrace] [--duration S] [--buffer-kb N] [--fill ring|discard]\n"
    "         [--clock cpu|wall] [--chunk-seconds N] [--unwind dwarf|fp] -- CMD ARGS...\n"
    "      run CMD under the sampling profiler (libtracemill_record.so preloaded)\n"
    "      and write a Perfetto trace (default 101 Hz of CPU time per thread)\n"
    "\n"
    "inputs: Perfetto traces, Sample v2 JSON chunks and folded stacks, detected\n"
    "from their first bytes; --input-format perfetto|sample-v2|folded overrides\n"
    "\n"
    "limits (convert, diff, info, query and export-sqlite):\n"
    "  --limits generous|relay   preset (default generous; --compat relay uses relay)\n"
    "  --max-samples N  --max-stack-depth N  --max-sequences N  --max-packet-bytes N\n"
    "  --max-unique-frames N  --max-path-segments N  --max-inflated-bytes N\n"
    "  --max-interned-entries N  --max-chunk-duration-ns N\n"
    "  --max-work-bytes N  --max-result-bytes N   memory budgets (default 4 GiB and\n"
    "                            16 GiB; relay: 15 MiB and 40 MiB); k/M/G = x1000\n"
    "  --max-input-bytes N       bytes read from a file, pipe or device (default\n"
    "                            4 GiB; relay: 50 MiB, Relay's profile size limit)\n"
    "\n"
    "exit codes: 0 ok, 1 input rejected, 2 usage, 3 I/O\n";

/* serve and store live in the sibling program tracemill-serve (it links
 * the server's libraries, which would slow every other command's start). */
static int cli_exec_server(char **argv) {
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof path - 32);
    if (n <= 0) {
        fprintf(stderr, "tracemill: cannot find its own program: %s\n", strerror(errno));
        return EXIT_IO;
    }
    path[n] = 0;
    char *slash = strrchr(path, '/');
    memcpy(slash + 1, "tracemill-serve", sizeof "tracemill-serve");
    argv[0] = path;
    execv(path, argv);
    fprintf(stderr, "tracemill: cannot run %s: %s\n", path, strerror(errno));
    return EXIT_IO;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(cli_usage, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "convert") == 0) return cli_convert(argc - 1, argv + 1);
    if (strcmp(cmd, "info") == 0) return cli_info(argc - 1, argv + 1);
    if (strcmp(cmd, "diff") == 0) return cli_diff(argc - 1, argv + 1);
    if (strcmp(cmd, "query") == 0) return cli_query(argc - 1, argv + 1);
    if (strcmp(cmd, "export-sqlite") == 0) return cli_export_sqlite(argc - 1, argv + 1);
    if (strcmp(cmd, "record") == 0) return cli_record(argc - 1, argv + 1);
    if (strcmp(cmd, "serve") == 0 || strcmp(cmd, "store") == 0) return cli_exec_server(argv);
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
        printf("tracemill %s\n", TM_VERSION_STRING);
        return EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        fputs(cli_usage, stdout);
        return EXIT_OK;
    }
    fprintf(stderr, "tracemill: unknown command '%s'\n\n%s", cmd, cli_usage);
    return EXIT_USAGE;
}
