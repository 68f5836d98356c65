/*
 * cli_symbolize.c — `tracemill symbolize`: the input trace with ModuleSymbols
 * and DeobfuscationMapping packets appended (tm_symbolize), and the
 * --symbols/--proguard-map/--debuginfod-cache options that convert and query share, which
 * symbolize the input in memory before it is read (the same path), and
 * the symbolization of the trace files `tracemill record` writes.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

void cli_symbols_release(cli_symbols *s) {
    for (size_t i = 0; i < s->n_maps; i++) cli_input_release(&s->map_files[i]);
    free(s->dirs);
    free(s->maps);
    free(s->map_files);
    memset(s, 0, sizeof *s);
}

static int push_dir(cli_symbols *s, const char *dir) {
    const char **d = realloc(s->dirs, (s->n_dirs + 1) * sizeof *d);
    if (!d) return -1;
    s->dirs = d;
    s->dirs[s->n_dirs++] = dir;
    return 1;
}

/* [package=]PATH: the mapping file is read now, so a missing one is a
 * usage-time error, not a count. */
static int push_map(cli_symbols *s, char *arg) {
    tm_proguard_map *m = realloc(s->maps, (s->n_maps + 1) * sizeof *m);
    if (!m) return -1;
    s->maps = m;
    cli_input *f = realloc(s->map_files, (s->n_maps + 1) * sizeof *f);
    if (!f) return -1;
    s->map_files = f;
    char *eq = strchr(arg, '=');
    const char *path = arg, *package = NULL;
    if (eq && eq != arg) {
        *eq = 0;
        package = arg;
        path = eq + 1;
    }
    if (cli_input_load(path, NULL, &s->map_files[s->n_maps]) != EXIT_OK) return -1;
    s->maps[s->n_maps] = (tm_proguard_map){.package = package, .data = (const char *)s->map_files[s->n_maps].data,
                                           .len = s->map_files[s->n_maps].len};
    s->n_maps++;
    return 1;
}

int cli_symbols_option(int argc, char **argv, int *i, cli_symbols *s) {
    const char *a = argv[*i];
    if (strcmp(a, "--no-system-symbols") == 0) {
        s->no_system = 1;
        return 1;
    }
    if (strcmp(a, "--no-demangle") == 0) { /* how names are written, not a reason to symbolize */
        s->no_demangle = 1;
        return 1;
    }
    int dir = strcmp(a, "--symbols") == 0, map = strcmp(a, "--proguard-map") == 0,
        cache = strcmp(a, "--debuginfod-cache") == 0;
    if (!dir && !map && !cache) return 0;
    if (++*i >= argc) {
        snprintf(s->bad, sizeof s->bad, "missing value for %s", a);
        return -1;
    }
    s->any = 1;
    if (dir || cache) { /* a mistyped directory would leave the output unsymbolized without a word */
        struct stat st;
        int found = stat(argv[*i], &st) == 0;
        if (!found || !S_ISDIR(st.st_mode)) {
            snprintf(s->bad, sizeof s->bad, "%s %s: %s", a, argv[*i], found ? "not a directory" : strerror(errno));
            return -1;
        }
    }
    if (cache) {
        s->debuginfod = argv[*i];
        return 1;
    }
    return dir ? push_dir(s, argv[*i]) : push_map(s, argv[*i]);
}

typedef struct membuf {
    uint8_t *data;
    size_t len, cap;
} membuf;

static int mem_write(void *ctx, const void *data, size_t len) {
    membuf *b = ctx;
    if (b->cap - b->len < len) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap - b->len < len) cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p) return -1;
        b->data = p, b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

static void options_of(const cli_symbols *s, tm_symbolize_options *o) {
    memset(o, 0, sizeof *o);
    o->symbol_dirs = s->dirs;
    o->n_symbol_dirs = s->n_dirs;
    o->no_system_paths = s->no_system;
    o->proguard_maps = s->maps;
    o->n_proguard_maps = s->n_maps;
    o->debuginfod_cache = s->debuginfod;
    o->no_demangle = s->no_demangle;
}

int cli_symbols_apply(const cli_symbols *s, const tm_options *opts, const char *what, cli_input *in) {
    if (!s->any) return EXIT_OK;
    int rc = cli_require_perfetto("symbolizing (--symbols, --proguard-map, --debuginfod-cache)", what, in);
    if (rc != EXIT_OK) return rc;
    tm_symbolize_options o;
    options_of(s, &o);
    membuf b = {0};
    tm_sink sink = {.write = mem_write, .ctx = &b};
    tm_error err;
    if (tm_symbolize(in->data, in->len, opts, &o, &sink, NULL, &err) != TM_OK) {
        free(b.data);
        return cli_report_error(what, &err);
    }
    cli_input_release(in);
    in->data = b.data;
    in->len = b.len;
    in->mapped = 0;
    return EXIT_OK;
}

static void report(const char *who, const tm_symbolize_stats *st) {
    fprintf(stderr,
            "%s: symbolized %llu of %llu frames (%llu with file and line, %llu inlined frames) in %llu "
            "of %llu mappings; not found %llu, build id mismatch %llu, no build id %llu; ProGuard: %llu "
            "classes, %llu methods",
            who, (unsigned long long)st->frames_symbolized, (unsigned long long)st->frames,
            (unsigned long long)st->frames_with_lines, (unsigned long long)st->inlined_frames,
            (unsigned long long)st->mappings_symbolized, (unsigned long long)st->mappings,
            (unsigned long long)st->mappings_not_found, (unsigned long long)st->mappings_build_id_mismatch,
            (unsigned long long)st->mappings_no_build_id, (unsigned long long)st->java_classes,
            (unsigned long long)st->java_methods);
    if (st->java_map_lines_skipped) /* a map that is not one, or damaged: say so rather than rename less */
        fprintf(stderr, ", %llu lines of the maps not understood (skipped)",
                (unsigned long long)st->java_map_lines_skipped);
    if (st->mappings_dwarf_unreadable)
        fprintf(stderr, "; the DWARF of %llu mappings is compressed in a way this libdw cannot read (zstd needs "
                        "elfutils 0.189 or later): their functions are named without files, lines or inlined frames",
                (unsigned long long)st->mappings_dwarf_unreadable);
    fputc('\n', stderr);
}

int cli_symbolize_file(const char *path, const char *name, const cli_symbols *s) {
    cli_input in = {0};
    int rc = cli_input_load(path, NULL, &in);
    if (rc != EXIT_OK || in.len == 0) {
        cli_input_release(&in);
        return rc;
    }
    tm_symbolize_options so;
    options_of(s, &so);
    membuf b = {0};
    tm_sink sink = {.write = mem_write, .ctx = &b};
    tm_symbolize_stats st;
    tm_error err;
    if (tm_symbolize(in.data, in.len, NULL, &so, &sink, &st, &err) != TM_OK) {
        rc = cli_report_error(name, &err);
    } else {
        cli_output o;
        rc = cli_output_open(path, 0, NULL, &o);
        if (rc == EXIT_OK) {
            if (fwrite(b.data, 1, b.len, o.f) != b.len) rc = cli_output_error(name, errno);
            rc = cli_output_close(&o, rc);
        }
        if (rc == EXIT_OK && st.frames) report("tracemill record", &st); /* nothing recorded: nothing to say */
    }
    free(b.data);
    cli_input_release(&in);
    return rc;
}

static int usage(const char *msg, const char *arg) {
    return cli_usage_error("symbolize", "%s%s%s", msg, arg ? " " : "", arg ? arg : "");
}

int cli_symbolize(int argc, char **argv) {
    cli_symbols s;
    memset(&s, 0, sizeof s);
    tm_options opts;
    memset(&opts, 0, sizeof opts);
    const char *in_path = NULL, *out_path = NULL;
    int quiet = 0, rc = EXIT_OK;
    for (int i = 1; i < argc && rc == EXIT_OK; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int r = cli_symbols_option(argc, argv, &i, &s);
        char why[160] = "";
        if (r == 0 && (r = cli_limit_option(argc, argv, &i, &opts)) < 0) cli_limit_problem(a, v, why, sizeof why);
        if (r < 0 && s.bad[0]) rc = cli_usage_error("symbolize", "%s", s.bad);
        else if (r < 0) rc = why[0] ? cli_usage_error("symbolize", "%s", why) : usage("bad value for", a);
        else if (r > 0) continue;
        else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            if (++i >= argc) rc = usage("missing value for", a);
            else out_path = argv[i];
        } else if (strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if (a[0] == '-' && a[1] != 0) {
            rc = usage("unknown option", a);
        } else if (in_path) {
            rc = usage("more than one trace given:", a);
        } else {
            in_path = a;
        }
    }
    if (rc == EXIT_OK && !in_path) rc = usage("no trace given", NULL);
    if (rc == EXIT_OK && !out_path) rc = usage("no output given (-o OUT)", NULL);
    cli_input in = {0};
    if (rc == EXIT_OK) rc = cli_input_load(in_path, &opts, &in);
    if (rc == EXIT_OK && (rc = cli_require_perfetto("symbolize", in_path, &in)) != EXIT_OK) cli_input_release(&in);
    if (rc != EXIT_OK) {
        cli_symbols_release(&s);
        return rc;
    }
    const char *inputs[] = {in_path, NULL};
    cli_output o;
    rc = cli_output_open(out_path, CLI_OUT_BINARY, inputs, &o);
    if (rc == EXIT_OK) {
        tm_symbolize_options so;
        options_of(&s, &so);
        tm_symbolize_stats st;
        tm_error err;
        tm_sink sink = tm_sink_file(o.f);
        if (tm_symbolize(in.data, in.len, &opts, &so, &sink, &st, &err) != TM_OK)
            rc = ferror(o.f) ? cli_output_error(o.path, errno) : cli_report_error(in_path, &err);
        else if (!quiet)
            report("tracemill", &st);
        rc = cli_output_close(&o, rc);
    }
    cli_input_release(&in);
    cli_symbols_release(&s);
    return rc;
}
