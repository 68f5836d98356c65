/*
 * cli_main.c — `tracemill <command>` dispatch, the overview and each
 * command's --help text (also `tracemill help COMMAND`). Each command lives
 * in its own cli_<command>.c file.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

#define LIMITS_HELP                                                                                   \
    "limits (a trace beyond one is rejected, exit 1):\n"                                               \
    "  --limits generous|relay   preset (default generous; --compat relay uses relay)\n"               \
    "  --max-samples N  --max-stack-depth N  --max-sequences N  --max-packet-bytes N\n"                \
    "  --max-unique-frames N  --max-path-segments N  --max-inflated-bytes N\n"                         \
    "  --max-interned-entries N  --max-chunk-duration-ns N\n"                                          \
    "  --max-work-bytes N  --max-result-bytes N   memory budgets; k/M/G multiply by 1000\n"              \
    "  --max-input-bytes N       bytes read from a file, pipe or device (default 4 GiB;\n"               \
    "                            relay: 50 MiB, Relay's profile size limit)\n"               \
    "  --strict                  reject a trace cut off inside a packet (default: read the\n"              \
    "                            complete packets before it and warn; --compat relay rejects)\n"

#define INPUT_HELP                                                                                    \
    "  --input-format perfetto|sample-v2|sample-v1|folded   override detection from the\n"      \
    "                            first bytes\n"

#define OUTPUT_HELP                                                                                   \
    "-o FILE is replaced only when the command succeeds, keeping its mode; a symbolic\n"               \
    "link is written through; a device or FIFO is written in place; a directory, a\n"                 \
    "read-only file or the input itself is refused.\n"

/* A command's text may go on in the entries that follow it with the same
 * name and no summary. */
static const struct command_help {
    const char *name, *summary, *text;
} commands[] = {
    {"convert", "a profile to sample-v2, sample-v1, pprof, folded, speedscope, svg or report",
     "usage: tracemill convert [-f FORMAT] [-o OUT|-] [options] INPUT|-\n"
     "\n"
     "Decodes a Perfetto trace, Sample v2 chunk, Sample v1 profile or folded stacks and\n"
     "writes it in FORMAT: sample-v2 (default), sample-v1 (a Sentry transaction profile,\n"
     "as sentry-python sends), pprof, folded, speedscope, svg (flame graph) or report.\n"
     "\n"
     "  -f, --format FORMAT       output format\n"
     "  -o, --output OUT          output file (default: standard output)\n"
     "  --meta META.json          sample-v2: chunk metadata to merge; sample-v1: event_id,\n"
     "                            platform, release, environment, dist, device, os, runtime,\n"
     "                            transaction {name, id, trace_id, active_thread_id}\n"
     "  --truncate                sample-v1: keep the first 30 s instead of failing\n"
     "  --compat relay            byte-compatible with Sentry Relay (sample-v2)\n"
     "  --remove-single-samples   drop threads with at most one non-empty sample\n"
     "  --in-app PREFIX  --not-in-app PREFIX   sample-v2 and sample-v1: frames whose\n"
     "                            mapping path or Java class starts with PREFIX are\n"
     "                            (not) in_app\n"
     "                            (repeatable; the longest wins; default: system\n"
     "                            libraries, the kernel, [vdso] and Java platform classes\n"
     "                            are not, the rest is; not with --compat relay)\n"
     "  --per-thread              pprof: one file per thread into -o DIRECTORY\n"
     "  --uncompressed            pprof: raw profile.proto instead of gzip\n"
     "  --quiet                   no progress line (shown on a terminal after a second)\n"
     "  --period DURATION         pprof, speedscope: sampling period (default: inferred\n"
     "                            per thread), e.g. 10ms, 250us, 4000000\n"
     "  --thread NAME|TID         only this thread (--thread-name NAME for digits);\n"
     "                            not with sample-v2, sample-v1 or report (every thread)\n"
     "  --thread-prefix           folded: the thread name as the root frame\n"
     "  --no-lines                folded, svg: frames by function, their lines merged\n"
     "                            (default: \"function (file:line)\" when symbols give\n"
     "                            them; --lines restores it); also on diff\n"
     "  --symbols DIR  --proguard-map [PKG=]MAP  --debuginfod-cache DIR\n"
     "  --no-system-symbols  --no-demangle   symbolize first, in memory (tracemill\n"
     "                            symbolize --help)\n"
     "  --value VALUE             memory profiles: alloc_space, alloc_objects, inuse_space,\n"
     "                            inuse_objects (default: CPU samples if any, else inuse_space;\n"
     "                            pprof writes all four, VALUE the default); also samples\n"
     "  --samples on-cpu|off-cpu|both   CPU samples (default), off-CPU time (record\n"
     "                            --off-cpu) in ns, or both in ns (--value off_cpu, wall)\n"
     "  --reverse  --title TEXT  --width PX   svg: icicle graph, title, width\n" INPUT_HELP "\n" OUTPUT_HELP
     "pprof is refused on a terminal.\n\n" LIMITS_HELP},
    {"symbolize", "function, file, line and inlined frames from ELF/DWARF; Java names from ProGuard maps",
     "usage: tracemill symbolize TRACE|- -o OUT [--symbols DIR]... [--proguard-map [PKG=]MAP]... [options]\n"
     "\n"
     "Writes TRACE with Perfetto ModuleSymbols packets appended (as traceconv symbolize),\n"
     "and a DeobfuscationMapping packet per ProGuard/R8 map: every tool that reads\n"
     "Perfetto traces, this one included, then shows function names, files, lines and\n"
     "inlined functions. Each mapping's ELF file is found by its build id.\n"
     "\n"
     "  -o, --output OUT          the symbolized trace\n"
     "  --symbols DIR             look here first (repeatable): DIR/.build-id/ab/cdef.debug,\n"
     "                            DIR/<file name>, DIR/<mapping path>; then the mapping's\n"
     "                            path on this machine and /usr/lib/debug/.build-id\n"
     "  --debuginfod-cache DIR    a debuginfod client cache, searched after --symbols:\n"
     "                            DIR/<build id>/debuginfo, DIR/<build id>/executable\n"
     "                            (default: $DEBUGINFOD_CACHE_PATH, else\n"
     "                            ~/.cache/debuginfod_client, if there; never fetched)\n"
     "  --no-system-symbols       only the --symbols directories (and --debuginfod-cache)\n"
     "  --proguard-map [PKG=]MAP  a ProGuard/R8 mapping.txt, for app PKG (default: all)\n"
     "  --no-demangle             C++ names as the ELF file spells them (default:\n"
     "                            demangled, ns::f(int); PLT stubs name@plt)\n"
     "  --quiet                   no summary of what was found on stderr\n"
     "\n"
     "The function a pc is in is named from the symbol table when a symbol covers it,\n"
     "else from DWARF. convert and query take --symbols, --proguard-map,\n"
     "--debuginfod-cache, --no-system-symbols and --no-demangle too, and symbolize in\n"
     "memory before reading.\n\n" OUTPUT_HELP "\n" LIMITS_HELP},
    {"diff", "a differential flame graph (or folded diff) of two profiles",
     "usage: tracemill diff BASE NEW [-f svg|folded] [-o OUT] [options]\n"
     "\n"
     "Compares two profiles (each detected on its own): a differential flame graph, or\n"
     "with -f folded one \"stack BASE NEW\" line per stack.\n"
     "\n"
     "  -f, --format svg|folded   output format (default svg)\n"
     "  -o, --output OUT          output file (default: standard output)\n"
     "  --thread NAME|TID  --thread-name NAME   only this thread\n"
     "  --thread-prefix           folded: the thread name as the root frame\n"
     "  --no-lines                frames by function, their lines merged (default:\n"
     "                            \"function (file:line)\" when symbols give them)\n"
     "  --value VALUE             memory profiles: what grew (alloc_space, inuse_space, ...)\n"
     "  --samples on-cpu|off-cpu|both   CPU samples (default), off-CPU time or both\n"
     "  --reverse  --title TEXT  --width PX   svg: icicle graph, title, width\n"
     "  --quiet                   no progress line (shown on a terminal after a second)\n" INPUT_HELP
     "\n" OUTPUT_HELP "\n" LIMITS_HELP},
    {"info", "what a trace holds and what was lost",
     "usage: tracemill info TRACE|- [--json] [--compat relay] [--quiet] [options]\n"
     "\n"
     "Packets, sequences, samples kept and dropped by reason, threads, clocks,\n"
     "resets and data losses; --json prints the data-quality report.\n"
     "\n" INPUT_HELP "\n" LIMITS_HELP},
    {"query", "SQL over Trace Processor's tables",
     "usage: tracemill query TRACE [SQL] [-f FILE.sql] [--format table|csv|json|perfetto]\n"
     "                       [--timeout SECONDS] [options]\n"
     "\n"
     "Runs SQL (several statements allowed) over Trace Processor's tables: process,\n"
     "thread, stack_profile_*, perf_sample, stack_sample, stats, metadata, ...\n"
     "Without SQL or -f: a shell on a terminal (.help lists its commands; Ctrl-C stops\n"
     "a statement), else SQL read from standard input.\n"
     "\n"
     "  -f, --file FILE.sql       SQL from a file (the output format is --format)\n"
     "  --format FORMAT           table (default on a terminal), csv (default\n"
     "                            otherwise), json, or perfetto (Trace Processor's CSV)\n"
     "  --timeout SECONDS         stop a statement that runs longer (exit 1)\n"
     "  --quiet                   no progress line on a terminal while the trace loads\n"
     "  --symbols DIR  --proguard-map [PKG=]MAP  --debuginfod-cache DIR\n"
     "  --no-system-symbols  --no-demangle   symbolize first, in memory (tracemill\n"
     "                            symbolize --help)\n"
     "  --                        the options end: what follows is TRACE and SQL (SQL\n"
     "                            that opens with a \"-- comment\")\n"
     "\n"
     "Queries read: ATTACH, VACUUM and pragmas that set values are refused, so a query\n"
     "writes no file; export-sqlite writes the tables to a database.\n"
     "\n" LIMITS_HELP},
    {"export-sqlite", "the SQL tables as a standalone SQLite file",
     "usage: tracemill export-sqlite TRACE OUT.db [options]\n"
     "\n"
     "Writes the tables `tracemill query` sees into a SQLite database readable\n"
     "without tracemill.\n"
     "\n" OUTPUT_HELP "\n" LIMITS_HELP},
    {"record", "run a program under the sampling profiler",
     "usage: tracemill record [-F HZ] [-o OUT.pftrace] [options] -- CMD ARGS...\n"
     "       tracemill record -p PID[,PID...] [--duration S] [-o OUT.pftrace] [options]\n"
     "       tracemill record -a [--duration S] [-o OUT.pftrace] [options]\n"
     "\n"
     "Runs CMD, or attaches to running processes, and writes a Perfetto trace of\n"
     "their CPU time (default 101 Hz per thread, to tracemill-record.pftrace), with\n"
     "one of two backends:\n"
     "  perf    perf_event_open cpu-clock events on CMD, every thread and child\n"
     "          process, stacks unwound by tracemill-record-perf with DWARF; nothing\n"
     "          is injected (needs kernel.perf_event_paranoid <= 2, or root)\n"
     "  signal  libtracemill_record.so preloaded into CMD: SIGPROF timers per thread;\n"
     "          each sample weighs its thread's CPU time since its previous one, so\n"
     "          pprof's cpu/nanoseconds is the CPU time used (a -F above the ~250 Hz\n"
     "          the kernel tick allows is said, with what was delivered); _exit,\n"
     "          crashes, SIGTERM and Ctrl-C still leave the whole trace\n"
     "\n"
     "  --backend auto|perf|signal  auto (default): perf when perf_event_open works\n"
     "                            and no signal-only option is given, else signal\n"
     "  -F HZ                     samples per second of each thread's clock\n"
     "  -o OUT.pftrace            the trace (replaced only if samples were recorded)\n"
     "  --max-depth N  --no-demangle  stack depth (deeper: cut, a [truncated] root\n"
     "                            frame, counted); C++ names demangled unless told\n"
     "  --duration S              stop sampling after S s; CMD runs on, record waits\n"
     "                            for it and exits with its status\n"
     "  --no-symbolize            leave the trace with build ids and pcs (tracemill\n"
     "                            symbolize names them later; JIT, kernel and vDSO\n"
     "                            frames are named while recording); by default, once\n"
     "                            CMD ends, tracemill appends each frame's function,\n"
     "                            file, line and inlined functions from its ELF file\n"
     "                            and DWARF (the trace and every chunk)\n"
     "  --symbols DIR  --debuginfod-cache DIR  --no-system-symbols\n"
     "                            where that looks (tracemill symbolize --help)\n"
     "perf backend only:\n"
     "  -p PID[,PID...]           attach: every thread, and the threads and children\n"
     "                            they start, until --duration, Ctrl-C/SIGTERM or\n"
     "                            their exit; they run on untouched (exit 0; 125: no\n"
     "                            such PID, or permission: others' need root)\n"
     "  -a                        every process until --duration or Ctrl-C (needs\n"
     "                            perf_event_paranoid <= 0 or CAP_PERFMON, else 125)\n"
     "  --kernel                  kernel frames too, from /proc/kallsyms (needs\n"
     "                            perf_event_paranoid <= 1 or CAP_PERFMON, else 125)\n"
     "  --off-cpu                 blocked time too: at each context switch the\n"
     "                            thread's stack, weighing the ns until it runs\n"
     "                            again, as separate off-CPU samples (--value off_cpu\n"
     "                            or wall in the exporters; default: on-CPU only).\n"
     "                            Needs perf_event_paranoid <= 1 or CAP_PERFMON, else 125\n"
     "JIT frames are named from /tmp/perf-PID.map (python3 -X perf, node\n"
     "--perf-basic-prof), with either backend.\n"},
    {"record", NULL, /* the rest of record's text: one C string literal may not pass 4095 bytes */
     "signal backend only:\n"
     "  --clock cpu               CPU time; wall is refused (exit 125): wall-clock\n"
     "                            timers interrupt CMD's blocking system calls\n"
     "  --buffer-kb N  --fill ring|discard   the sample buffer and what a full one does\n"
     "  --chunk-seconds N         continuous: OUT.0.pftrace, OUT.1.pftrace, ...\n"
     "  --unwind dwarf|fp         how stacks are taken\n"
     "  --file-write-period-ms N  --clear-period-ms N\n"
     "  --heap                    also a heap profile: malloc, free, new, delete\n"
     "                            sampled every ~4096 bytes as heapprofd dumps,\n"
     "                            every second and at exit; CPU samples are\n"
     "                            taken too (heap almost alone: -F 1)\n"
     "  --heap-interval BYTES     its mean sampling interval (implies --heap)\n"
     "  --mem-period MS           ProcessStats (RSS anon/file/shmem, swap, peak)\n"
     "                            this often; default 1000 with --heap, else none\n"
     "  --preload LIB.so          the recorder library (default: next to tracemill, else\n"
     "                            in the library directory it is installed with)\n"
     "  --upload DSN              send each chunk to Sentry or `tracemill serve`\n"
     "  --release R  --environment E  --upload-queue DIR  --upload-queue-max N\n"
     "  --upload-timeout-ms N     with --upload; unsent chunks wait in the queue\n"
     "\n"
     "A run without CPU samples (and without --heap), or whose program cannot\n"
     "start, leaves OUT as it was.\n"
     "record exits with CMD's status (128+N if a signal N killed it), 127 if CMD\n"
     "is not found, 126 if it cannot be executed, 125 if recording failed, with\n"
     "either backend; SIGTERM, SIGHUP and a kill -INT are passed on to CMD.\n"},
    {"serve", "the ingest server for Sentry envelopes",
     "usage: tracemill serve [--config FILE] [--listen HOST:PORT] [--store PATH]\n"
     "                       [--project ID:KEY]... [--access-log off|text|json]\n"
     "\n"
     "Accepts Sentry envelopes (POST /api/ID/envelope/), converts profile chunks and\n"
     "hands them to Kafka or the local store (default 127.0.0.1:3000,\n"
     "./tracemill-store, project 1 with a key generated once and kept in the store's\n"
     "public_key file). SIGTERM drains: requests received are answered, then it exits.\n"},
    {"store", "read what the local store holds",
     "usage: tracemill store ls | get CHUNK_ID [--raw] [-o OUT] | export OUT_DIR  [--project ID] [--store PATH]\n"
     "\n"
     "  ls                        one line per stored chunk\n"
     "  get CHUNK_ID              the chunk's payload JSON (--raw: its Perfetto trace)\n"
     "  export OUT_DIR            every chunk as files\n"
     "  --project ID              only this project's chunks (get: for a chunk_id two projects sent)\n"
     "  --store PATH              the store (default ./tracemill-store)\n"
     "\n" OUTPUT_HELP},
};
#define N_COMMANDS (sizeof commands / sizeof *commands)

static int print_usage(FILE *f) {
    fputs("usage: tracemill COMMAND [options]     (tracemill COMMAND --help for its options)\n\ncommands:\n", f);
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (commands[i].summary) fprintf(f, "  %-15s %s\n", commands[i].name, commands[i].summary);
    fputs("  help COMMAND    a command's options\n"
          "\n"
          "inputs: Perfetto traces, Sample v2 JSON chunks, Sample v1 profiles and folded\n"
          "stacks, detected from their first bytes. Exit codes: 0 ok, 1 input rejected,\n"
          "2 usage, 3 I/O.\n"
          "-V, --version prints the version. man tracemill has the details.\n",
          f);
    return f == stdout ? EXIT_OK : EXIT_USAGE;
}

static const struct command_help *find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

static int print_help(const char *name) {
    const struct command_help *c = find_command(name);
    if (!c) return cli_usage_error(NULL, "no command named '%s'", name);
    do fputs(c++->text, stdout);
    while (c < commands + N_COMMANDS && !c->summary && strcmp(c->name, name) == 0);
    return EXIT_OK;
}

/* --help or -h among a command's options (before record's "--"). */
static int asks_for_help(int argc, char **argv) {
    for (int i = 2; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return 1;
    return 0;
}

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

static int run_command(int argc, char **argv) {
    if (argc < 2) return print_usage(stderr);
    const char *cmd = argv[1];
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "-V") == 0 || strcmp(cmd, "version") == 0) {
        printf("tracemill %s\n", TM_VERSION_STRING);
        return EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0)
        return argc > 2 ? print_help(argv[2]) : print_usage(stdout);
    if (!find_command(cmd)) return cli_usage_error(NULL, "unknown command '%s'", cmd);
    if (asks_for_help(argc, argv)) return print_help(cmd);
    if (strcmp(cmd, "convert") == 0) return cli_convert(argc - 1, argv + 1);
    if (strcmp(cmd, "info") == 0) return cli_info(argc - 1, argv + 1);
    if (strcmp(cmd, "diff") == 0) return cli_diff(argc - 1, argv + 1);
    if (strcmp(cmd, "query") == 0) return cli_query(argc - 1, argv + 1);
    if (strcmp(cmd, "export-sqlite") == 0) return cli_export_sqlite(argc - 1, argv + 1);
    if (strcmp(cmd, "record") == 0) return cli_record(argc - 1, argv + 1);
    if (strcmp(cmd, "symbolize") == 0) return cli_symbolize(argc - 1, argv + 1);
    return cli_exec_server(argv); /* serve, store */
}

int main(int argc, char **argv) { return cli_close_stdout(run_command(argc, argv)); }
