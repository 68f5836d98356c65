/*
 * cli_convert.c — `tracemill convert`: one decode, one output format (or,
 * with --per-thread, one pprof file per thread in a directory).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static int usage(const char *msg, const char *arg) {
    return cli_usage_error("convert", "%s%s%s", msg, arg ? " " : "", arg ? arg : "");
}

/* inputs: the trace, then --meta if given, then NULL. */
static int write_one(const cli_export *x, const tm_trace *t, const char *const *inputs, const char *out_path) {
    const char *in_path = inputs[0];
    cli_output o;
    int rc = cli_output_open(out_path, x->format == FMT_PPROF ? CLI_OUT_BINARY : 0, inputs, &o);
    if (rc != EXIT_OK) return rc;
    tm_sink sink = tm_sink_file(o.f);
    tm_error err;
    tm_status st = cli_export_write(x, NULL, t, &sink, &err);
    cli_progress_stop(); /* errors start on a clean line */
    int json_line = x->format == FMT_SAMPLE_V2 || x->format == FMT_SAMPLE_V1; /* the report ends its own line */
    if (st == TM_OK && json_line && fputc('\n', o.f) == EOF)
        rc = cli_output_error(o.path, errno);
    else if (st != TM_OK) /* a failed write, or a trace the format cannot hold */
        rc = ferror(o.f) ? cli_output_error(o.path, errno) : cli_report_export_error(in_path, &err);
    return cli_output_close(&o, rc);
}

/* A sink that notes its first bytes and stops the writer there. */
static int note_and_stop(void *ctx, const void *data, size_t len) {
    (void)data;
    if (!len) return 0;
    *(int *)ctx = 1;
    return -1;
}

/* Whether th's folded stacks of value v hold anything (a value the trace
 * lacks: no): the writer stops at its first line. */
static int folded_has(const tm_trace *t, const tm_thread_info *th, tm_value v) {
    int seen = 0;
    tm_sink sink = {.write = note_and_stop, .ctx = &seen};
    tm_folded_options fo = {.threads = {.tid = th->tid, .by_tid = 1}, .value = v};
    tm_error err;
    (void)tm_write_folded(t, &fo, &sink, &err);
    return seen;
}

/* Whether th's profile holds anything: its CPU samples, counted; else
 * (off-CPU or wall time, a memory profile, a trace without CPU samples)
 * its stacks of the value, a memory profile's by the bytes allocated,
 * which every heap sample has (pprof carries all four values; a process
 * is the thread tid == pid, with no CPU samples of its own perhaps). */
static int thread_has_data(const cli_export *x, const tm_trace *t, const tm_thread_info *th) {
    tm_value v = x->value;
    if (v == TM_VALUE_SAMPLES || (v == TM_VALUE_DEFAULT && tm_trace_sample_count(t) > 0)) return th->samples > 0;
    if (v == TM_VALUE_OFF_CPU || v == TM_VALUE_WALL) return folded_has(t, th, v);
    return (v == TM_VALUE_DEFAULT && folded_has(t, th, v)) || folded_has(t, th, TM_VALUE_ALLOC_SPACE);
}

/* DIR/<tid>-<name>.pb.gz for every thread with something of the value. */
static int write_per_thread(cli_export *x, const tm_trace *t, const char *const *inputs, const char *dir) {
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "tracemill: cannot create directory %s: %s\n", dir, strerror(errno));
        return EXIT_IO;
    }
    size_t n = tm_trace_thread_count(t), written = 0;
    for (size_t i = 0; i < n; i++) {
        tm_thread_info th;
        if (tm_trace_thread(t, i, &th) != TM_OK || !thread_has_data(x, t, &th)) continue;
        char name[64];
        size_t k = 0;
        for (size_t c = 0; c < th.name_len && k < sizeof name - 1; c++) {
            char ch = th.name[c];
            int safe = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                       ch == '.' || ch == '_' || ch == '-';
            name[k++] = safe ? ch : '_';
        }
        name[k] = 0;
        size_t len = strlen(dir) + sizeof name + 48;
        char *path = malloc(len);
        if (!path) return EXIT_IO;
        snprintf(path, len, "%s/%lld%s%s.pb%s", dir, (long long)th.tid, k ? "-" : "", name,
                 x->uncompressed ? "" : ".gz");
        x->threads.by_tid = 1;
        x->threads.tid = th.tid;
        int rc = write_one(x, t, inputs, path);
        free(path);
        if (rc != EXIT_OK) return rc;
        written++;
    }
    fprintf(stderr, "tracemill: wrote %zu per-thread profiles to %s\n", written, dir);
    return EXIT_OK;
}

/* prefixes: room for argc --in-app, then argc --not-in-app values */
static int convert(int argc, char **argv, cli_symbols *sym, const char **prefixes) {
    cli_export x;
    memset(&x, 0, sizeof x);
    x.v2.in_app_prefixes = x.v1.in_app_prefixes = prefixes;
    x.v2.not_in_app_prefixes = x.v1.not_in_app_prefixes = prefixes + argc;
    const char *out_path = NULL, *meta_path = NULL, *in_path = NULL;
    int per_thread = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_symbols_option(argc, argv, &i, sym);
        if (r < 0 && sym->bad[0]) return usage(sym->bad, NULL);
        if (r == 0) r = cli_export_option(argc, argv, &i, &x);
        if (r < 0) return x.bad[0] ? usage(x.bad, NULL) : usage("bad value for", a);
        if (r > 0) continue;
        if (strcmp(a, "-f") == 0 || strcmp(a, "--format") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            if (!cli_parse_format(argv[i], &x.format)) return usage("unknown format:", argv[i]);
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            out_path = argv[i];
        } else if (strcmp(a, "--meta") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            meta_path = argv[i];
        } else if (strcmp(a, "--truncate") == 0) {
            x.v1.truncate = 1;
        } else if (strcmp(a, "--remove-single-samples") == 0) {
            x.v2.remove_single_samples = 1;
        } else if (strcmp(a, "--per-thread") == 0) {
            per_thread = 1;
        } else if (strcmp(a, "--in-app") == 0 || strcmp(a, "--not-in-app") == 0) {
            if (++i >= argc || !argv[i][0]) return usage("missing value for", a);
            if (a[2] == 'i') prefixes[x.v2.n_in_app_prefixes++] = argv[i];
            else prefixes[argc + x.v2.n_not_in_app_prefixes++] = argv[i];
            x.v1.n_in_app_prefixes = x.v2.n_in_app_prefixes; /* the same lists for either format */
            x.v1.n_not_in_app_prefixes = x.v2.n_not_in_app_prefixes;
        } else if (a[0] == '-' && a[1] != 0) {
            return usage("unknown option", a);
        } else if (in_path) {
            return usage("more than one trace given:", a);
        } else {
            in_path = a;
        }
    }
    if (!in_path) return usage("no trace given", NULL);
    /* Options the format would ignore are refused, not silently dropped. */
    int whole = x.format == FMT_SAMPLE_V2 || x.format == FMT_SAMPLE_V1 || x.format == FMT_REPORT;
    if ((x.threads.name || x.threads.by_tid) && whole)
        return usage("--thread does not apply to -f sample-v2, sample-v1 or report: they hold every thread", NULL);
    if (x.v1.truncate && x.format != FMT_SAMPLE_V1) return usage("--truncate applies to -f sample-v1 only", NULL);
    if (meta_path && x.format != FMT_SAMPLE_V2 && x.format != FMT_SAMPLE_V1)
        return usage("--meta applies to -f sample-v2 and sample-v1 only", NULL);
    const char *ignored = cli_export_ignored(&x, 0);
    if (ignored) return usage(ignored, NULL);
    if (x.v2.remove_single_samples && x.format != FMT_SAMPLE_V2)
        return usage("--remove-single-samples applies to -f sample-v2 only", NULL);
    if ((x.v2.n_in_app_prefixes || x.v2.n_not_in_app_prefixes) &&
        ((x.format != FMT_SAMPLE_V2 && x.format != FMT_SAMPLE_V1) || x.opts.mode == TM_MODE_RELAY))
        return usage("--in-app and --not-in-app apply to -f sample-v2 and sample-v1 without --compat relay (Relay "
                     "never writes in_app)",
                     NULL);
    if (x.value && (x.format == FMT_SAMPLE_V2 || x.format == FMT_SAMPLE_V1 || x.format == FMT_REPORT))
        return usage("--value and --samples apply to -f pprof, folded, speedscope and svg", NULL);
    if (per_thread && (x.format != FMT_PPROF || !out_path || strcmp(out_path, "-") == 0))
        return usage("--per-thread needs -f pprof and -o DIRECTORY", NULL);

    cli_input meta = {0}, in;
    int rc;
    if (meta_path && (rc = cli_input_load(meta_path, &x.opts, &meta)) != EXIT_OK) return rc;
    x.v2.meta_json = x.v1.meta_json = (const char *)meta.data;
    x.v2.meta_len = x.v1.meta_len = meta.len;
    cli_progress_start(x.quiet || per_thread); /* --per-thread reports each file it writes */
    cli_progress_phase("reading", 0);
    rc = cli_input_load(in_path, &x.opts, &in);
    if (rc == EXIT_OK && sym->any) {
        cli_progress_phase("symbolizing", in.len);
        if ((rc = cli_symbols_apply(sym, &x.opts, in_path, &in)) != EXIT_OK) cli_input_release(&in);
    }
    if (rc != EXIT_OK) {
        cli_progress_stop();
        cli_input_release(&meta);
        return rc;
    }
    cli_progress_phase("decoding", in.len);
    const char *inputs[] = {in_path, meta_path, NULL};
    tm_trace *t = NULL;
    tm_error err;
    tm_status meta_st = !meta_path ? TM_OK
                        : x.format == FMT_SAMPLE_V1 ? tm_sample_v1_check_meta(x.v1.meta_json, x.v1.meta_len, &err)
                                                    : tm_sample_v2_check_meta(x.v2.meta_json, x.v2.meta_len, &err);
    if (meta_st != TM_OK)
        rc = cli_report_error(meta_path, &err); /* metadata errors first, as Relay */
    else if (tm_trace_parse(in.data, in.len, &x.opts, &t, &err) != TM_OK) {
        cli_progress_stop();
        rc = cli_report_error(in_path, &err);
    } else if (per_thread) {
        cli_warn_truncated(in_path, t);
        rc = write_per_thread(&x, t, inputs, out_path);
    } else {
        cli_progress_stop();
        cli_warn_truncated(in_path, t);
        cli_progress_phase("writing", 0);
        rc = write_one(&x, t, inputs, out_path);
    }
    cli_progress_stop();
    tm_trace_free(t);
    cli_input_release(&in);
    cli_input_release(&meta);
    return rc;
}

int cli_convert(int argc, char **argv) {
    cli_symbols sym;
    memset(&sym, 0, sizeof sym);
    const char **prefixes = calloc(2 * (size_t)argc, sizeof *prefixes);
    if (!prefixes) {
        fprintf(stderr, "tracemill: out of memory\n");
        return EXIT_IO;
    }
    int rc = convert(argc, argv, &sym, prefixes);
    free(prefixes);
    cli_symbols_release(&sym);
    return rc;
}
