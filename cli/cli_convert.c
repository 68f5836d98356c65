/*
 * cli_convert.c — `tracemill convert`: one decode, one output format.
 * Output to a regular file goes to OUT.tmp-PID first and is renamed into
 * place only when the whole document was written, so a rejected trace never
 * leaves a truncated file behind. Devices and pipes (/dev/null, a FIFO) are
 * written directly: renaming over them would replace the device.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

typedef enum { FMT_SAMPLE_V2, FMT_REPORT } out_format;

static int usage(const char *msg, const char *arg) {
    fprintf(stderr, "tracemill convert: %s%s%s\n\n%s", msg, arg ? " " : "", arg ? arg : "", cli_usage);
    return EXIT_USAGE;
}

int cli_convert(int argc, char **argv) {
    tm_options opts = {0};
    tm_sample_v2_options v2 = {0};
    const char *out_path = NULL, *meta_path = NULL, *in_path = NULL;
    out_format fmt = FMT_SAMPLE_V2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int lim = cli_limit_option(argc, argv, &i, &opts);
        if (lim < 0) return usage("bad limit value for", a);
        if (lim > 0) continue;
        if (strcmp(a, "-f") == 0 || strcmp(a, "--format") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            if (strcmp(argv[i], "sample-v2") == 0) fmt = FMT_SAMPLE_V2;
            else if (strcmp(argv[i], "report") == 0) fmt = FMT_REPORT;
            else return usage("unknown or not yet available format:", argv[i]);
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            out_path = argv[i];
        } else if (strcmp(a, "--meta") == 0) {
            if (++i >= argc) return usage("missing value for", a);
            meta_path = argv[i];
        } else if (strcmp(a, "--compat") == 0) {
            if (++i >= argc || strcmp(argv[i], "relay") != 0) return usage("--compat takes: relay", NULL);
            opts.mode = TM_MODE_RELAY;
        } else if (strcmp(a, "--remove-single-samples") == 0) {
            v2.remove_single_samples = 1;
        } else if (a[0] == '-' && a[1] != 0) {
            return usage("unknown option", a);
        } else if (in_path) {
            return usage("more than one trace given:", a);
        } else {
            in_path = a;
        }
    }
    if (!in_path) return usage("no trace given", NULL);

    cli_input meta = {0}, in;
    int rc;
    if (meta_path && (rc = cli_input_load(meta_path, &meta)) != EXIT_OK) return rc;
    v2.meta_json = (const char *)meta.data;
    v2.meta_len = meta.len;
    if ((rc = cli_input_load(in_path, &in)) != EXIT_OK) {
        cli_input_release(&meta);
        return rc;
    }
    tm_trace *t = NULL;
    tm_error err;
    if (meta_path && tm_sample_v2_check_meta(v2.meta_json, v2.meta_len, &err) != TM_OK) {
        rc = cli_report_error(meta_path, &err); /* metadata errors first, as Relay */
        goto done;
    }
    if (tm_trace_parse(in.data, in.len, &opts, &t, &err) != TM_OK) {
        rc = cli_report_error(in_path, &err);
        goto done;
    }
    FILE *f = stdout;
    char *tmp = NULL;
    struct stat ost;
    int special = out_path && stat(out_path, &ost) == 0 && !S_ISREG(ost.st_mode);
    if (special) {
        f = fopen(out_path, "wb");
        if (!f) {
            fprintf(stderr, "tracemill: cannot open %s: %s\n", out_path, strerror(errno));
            rc = EXIT_IO;
            goto done;
        }
    } else if (out_path && strcmp(out_path, "-") != 0) {
        size_t n = strlen(out_path) + 32;
        tmp = malloc(n);
        if (!tmp) {
            rc = EXIT_IO;
            goto done;
        }
        snprintf(tmp, n, "%s.tmp-%ld", out_path, (long)getpid());
        f = fopen(tmp, "wb");
        if (!f) {
            fprintf(stderr, "tracemill: cannot create %s: %s\n", tmp, strerror(errno));
            free(tmp);
            rc = EXIT_IO;
            goto done;
        }
    }
    tm_sink sink = tm_sink_file(f);
    tm_status st = fmt == FMT_REPORT ? tm_write_report(t, &sink, &err) : tm_write_sample_v2(t, &v2, &sink, &err);
    if (st == TM_OK && fmt == FMT_SAMPLE_V2 && fputc('\n', f) == EOF) st = TM_ERR_IO;
    if (st == TM_OK && fflush(f) != 0) {
        st = TM_ERR_IO;
        snprintf(err.message, sizeof err.message, "%s", strerror(errno));
        err.code = st;
        err.offset = 0;
        err.reason = NULL;
    }
    rc = st == TM_OK ? EXIT_OK : cli_report_error(in_path, &err);
    if (tmp) {
        if (fclose(f) != 0 && rc == EXIT_OK) {
            fprintf(stderr, "tracemill: cannot write %s: %s\n", out_path, strerror(errno));
            rc = EXIT_IO;
        }
        if (rc == EXIT_OK && rename(tmp, out_path) != 0) {
            fprintf(stderr, "tracemill: cannot rename %s to %s: %s\n", tmp, out_path, strerror(errno));
            rc = EXIT_IO;
        }
        if (rc != EXIT_OK) remove(tmp);
        free(tmp);
    } else if (special && fclose(f) != 0 && rc == EXIT_OK) {
        rc = EXIT_IO;
    }
done:
    tm_trace_free(t);
    cli_input_release(&in);
    cli_input_release(&meta);
    return rc;
}
