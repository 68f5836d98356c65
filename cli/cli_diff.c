/*
 * cli_diff.c — `tracemill diff BASE NEW`: two profiles (Perfetto traces,
 * Sample v2 chunks or folded stacks, each detected on its own) to a
 * differential flame graph or a two-count folded diff.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int usage(const char *msg, const char *arg) {
    return cli_usage_error("diff", "%s%s%s", msg, arg ? " " : "", arg ? arg : "");
}

int cli_diff(int argc, char **argv) {
    cli_export x;
    memset(&x, 0, sizeof x);
    x.format = FMT_SVG;
    const char *out_path = NULL, *paths[2] = {NULL, NULL};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int r = cli_export_option(argc, argv, &i, &x);
        if (r < 0) return x.bad[0] ? usage(x.bad, NULL) : usage("bad value for", a);
        if (r > 0) continue;
        if (strcmp(a, "-f") == 0 || strcmp(a, "--format") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            if (!cli_parse_format(argv[i], &x.format) || (x.format != FMT_SVG && x.format != FMT_FOLDED))
                return usage("diff writes svg or folded, not", argv[i]);
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            out_path = argv[i];
        } else if (a[0] == '-' && a[1] != 0) {
            return usage("unknown option", a);
        } else if (paths[1]) {
            return usage("more than two profiles given:", a);
        } else {
            paths[paths[0] ? 1 : 0] = a;
        }
    }
    if (!paths[1]) return usage("needs two profiles: BASE NEW", NULL);
    const char *ignored = cli_export_ignored(&x, 1);
    if (ignored) return usage(ignored, NULL);
    if (x.value && (x.format == FMT_SAMPLE_V2 || x.format == FMT_SAMPLE_V1 || x.format == FMT_REPORT))
        return usage("--value and --samples apply to -f pprof, folded, speedscope and svg", NULL);
    if (strcmp(paths[0], "-") == 0 && strcmp(paths[1], "-") == 0) return usage("only one input may be -", NULL);

    cli_input in[2] = {{0}, {0}};
    tm_trace *t[2] = {NULL, NULL};
    tm_error err;
    int rc = EXIT_OK;
    cli_progress_start(x.quiet);
    for (int k = 0; k < 2 && rc == EXIT_OK; k++) {
        cli_progress_phase("reading", 0);
        rc = cli_input_load(paths[k], &x.opts, &in[k]);
        cli_progress_phase("decoding", in[k].len);
        if (rc == EXIT_OK && tm_trace_parse(in[k].data, in[k].len, &x.opts, &t[k], &err) != TM_OK) {
            cli_progress_stop(); /* errors start on a clean line */
            rc = cli_report_error(paths[k], &err);
        } else if (rc == EXIT_OK) {
            cli_progress_stop();
            cli_warn_truncated(paths[k], t[k]);
        }
    }
    cli_progress_phase("writing", 0);
    if (rc == EXIT_OK) {
        cli_output o;
        const char *inputs[] = {paths[0], paths[1], NULL};
        rc = cli_output_open(out_path, 0, inputs, &o);
        if (rc == EXIT_OK) {
            tm_sink sink = tm_sink_file(o.f);
            tm_status st = cli_export_write(&x, t[0], t[1], &sink, &err);
            cli_progress_stop();
            if (st != TM_OK)
                rc = ferror(o.f) ? cli_output_error(o.path, errno) : cli_report_export_error(paths[1], &err);
            rc = cli_output_close(&o, rc);
        }
    }
    cli_progress_stop();
    for (int k = 0; k < 2; k++) {
        tm_trace_free(t[k]);
        cli_input_release(&in[k]);
    }
    return rc;
}
