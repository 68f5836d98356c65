/*
 * cli_export.c — what `convert` and `diff` share: the output format names,
 * the options of the exporters (thread filter, period, flame graph and
 * folded switches, input format) and the call into the right tm_write_*.
 */
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const struct {
    const char *name;
    cli_format format;
} formats[] = {
    {"sample-v2", FMT_SAMPLE_V2}, {"pprof", FMT_PPROF}, {"folded", FMT_FOLDED},
    {"speedscope", FMT_SPEEDSCOPE}, {"svg", FMT_SVG},   {"report", FMT_REPORT},
    {"sample-v1", FMT_SAMPLE_V1},
};

int cli_parse_format(const char *name, cli_format *out) {
    for (size_t k = 0; k < sizeof formats / sizeof *formats; k++)
        if (strcmp(name, formats[k].name) == 0) {
            *out = formats[k].format;
            return 1;
        }
    return 0;
}

/* "10ms", "250us", "1s", "4000000" or "4000000ns". */
static int parse_duration_ns(const char *s, int64_t *out) {
    char *end;
    if (!s || *s < '0' || *s > '9') return 0;
    unsigned long long v = strtoull(s, &end, 10);
    static const struct {
        const char *suffix;
        unsigned long long mult;
    } units[] = {{"", 1}, {"ns", 1}, {"us", 1000}, {"ms", 1000000}, {"s", 1000000000}};
    for (size_t k = 0; k < sizeof units / sizeof *units; k++)
        if (strcmp(end, units[k].suffix) == 0) {
            if (v == 0 || v > (unsigned long long)INT64_MAX / units[k].mult) return 0;
            *out = (int64_t)(v * units[k].mult);
            return 1;
        }
    return 0;
}

static int is_number(const char *s) {
    if (!*s) return 0;
    for (const char *c = s; *c; c++)
        if (*c < '0' || *c > '9') return 0;
    return 1;
}

/* Keeps why opt's value is refused, for the command's one usage line. */
static int bad(cli_export *x, const char *opt, const char *what) {
    snprintf(x->bad, sizeof x->bad, "%s %s", opt, what);
    return -1;
}

int cli_export_option(int argc, char **argv, int *i, cli_export *x) {
    const char *a = argv[*i];
    const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
    int lim = cli_limit_option(argc, argv, i, &x->opts);
    if (lim < 0) {
        cli_limit_problem(a, v, x->bad, sizeof x->bad);
        return -1;
    }
    if (lim) return lim;
    if (strcmp(a, "--reverse") == 0) x->reverse = 1;
    else if (strcmp(a, "--thread-prefix") == 0) x->thread_prefix = 1;
    else if (strcmp(a, "--uncompressed") == 0) x->uncompressed = 1;
    else if (strcmp(a, "--quiet") == 0) x->quiet = 1;
    else if (strcmp(a, "--no-lines") == 0) x->opts.no_source_lines = 1;
    else if (strcmp(a, "--lines") == 0) x->opts.no_source_lines = 0; /* the default, after a --no-lines */
    else if (strcmp(a, "--compat") == 0) {
        if (!v || strcmp(v, "relay") != 0) return bad(x, a, "takes: relay");
        x->opts.mode = TM_MODE_RELAY;
        ++*i;
    } else if (strcmp(a, "--input-format") == 0) {
        if (!v) return bad(x, a, "takes: perfetto, sample-v2, sample-v1 or folded");
        if (strcmp(v, "perfetto") == 0) x->opts.input = TM_INPUT_PERFETTO;
        else if (strcmp(v, "sample-v2") == 0) x->opts.input = TM_INPUT_SAMPLE_V2;
        else if (strcmp(v, "sample-v1") == 0) x->opts.input = TM_INPUT_SAMPLE_V1;
        else if (strcmp(v, "folded") == 0) x->opts.input = TM_INPUT_FOLDED;
        else if (strcmp(v, "auto") == 0) x->opts.input = TM_INPUT_AUTO;
        else return bad(x, a, "takes: perfetto, sample-v2, sample-v1, folded or auto");
        ++*i;
    } else if (strcmp(a, "--thread") == 0) {
        if (!v || !*v) return bad(x, a, "takes a thread name or tid");
        /* A number is a tid; --thread-name forces a name made of digits. */
        if (is_number(v)) {
            x->threads.by_tid = 1;
            x->threads.tid = strtoll(v, NULL, 10);
        } else {
            x->threads.name = v;
        }
        ++*i;
    } else if (strcmp(a, "--thread-name") == 0) {
        if (!v) return bad(x, a, "takes a thread name");
        x->threads.name = v;
        ++*i;
    } else if (strcmp(a, "--period") == 0) {
        if (!parse_duration_ns(v, &x->period_ns) || x->period_ns > TM_PERIOD_NS_MAX)
            return bad(x, a, "takes a duration up to an hour: 4000000, 250us, 10ms, 1s");
        ++*i;
    } else if (strcmp(a, "--value") == 0 || strcmp(a, "--samples") == 0) {
        /* --samples on-cpu|off-cpu|both names the values samples|off_cpu|wall */
        static const char *const kinds[3] = {"on-cpu", "off-cpu", "both"};
        static const tm_value kind_values[3] = {TM_VALUE_SAMPLES, TM_VALUE_OFF_CPU, TM_VALUE_WALL};
        if (x->value != TM_VALUE_DEFAULT) return bad(x, a, "given twice: give one --value or --samples");
        if (a[2] == 's') {
            for (int k = 0; v && k < 3 && x->value == TM_VALUE_DEFAULT; k++)
                if (strcmp(v, kinds[k]) == 0) x->value = kind_values[k];
            if (x->value == TM_VALUE_DEFAULT) return bad(x, a, "takes: on-cpu, off-cpu or both");
        } else if (!v || tm_value_parse(v, &x->value, NULL) != TM_OK || x->value == TM_VALUE_DEFAULT) {
            return bad(x, a, "takes: samples, off_cpu, wall, alloc_objects, alloc_space, inuse_objects or inuse_space");
        }
        ++*i;
    } else if (strcmp(a, "--title") == 0) {
        if (!v) return bad(x, a, "takes a title");
        x->title = v;
        ++*i;
    } else if (strcmp(a, "--width") == 0) {
        uint64_t w;
        if (!v || !cli_parse_u64(v, &w) || w < TM_FLAMEGRAPH_WIDTH_MIN || w > TM_FLAMEGRAPH_WIDTH_MAX)
            return bad(x, a, "takes 100..100000 pixels");
        x->width_px = (unsigned)w;
        ++*i;
    } else {
        return 0;
    }
    return 1;
}

const char *cli_export_ignored(const cli_export *x, int diff) {
    int svg = x->format == FMT_SVG;
    if (x->thread_prefix && x->format != FMT_FOLDED) return "--thread-prefix applies to -f folded only";
    if (x->uncompressed && (diff || x->format != FMT_PPROF)) return "--uncompressed applies to -f pprof only";
    if (x->period_ns && (diff || (x->format != FMT_PPROF && x->format != FMT_SPEEDSCOPE)))
        return "--period applies to -f pprof and speedscope only";
    if ((x->reverse || x->width_px) && !svg) return "--reverse and --width apply to -f svg only";
    if (x->title && !svg && (diff || x->format != FMT_SPEEDSCOPE))
        return diff ? "--title applies to -f svg only" : "--title applies to -f svg and speedscope only";
    return NULL;
}

tm_status cli_export_write(const cli_export *x, const tm_trace *base, const tm_trace *t, const tm_sink *out,
                           tm_error *err) {
    tm_folded_options folded = {.threads = x->threads, .thread_prefix = x->thread_prefix, .value = x->value};
    tm_flamegraph_options svg = {.threads = x->threads, .title = x->title, .reverse = x->reverse,
                                 .width_px = x->width_px, .value = x->value};
    if (base) {
        if (x->format == FMT_FOLDED) return tm_write_folded_diff(base, t, &folded, out, err);
        return tm_write_flamegraph_diff(base, t, &svg, out, err);
    }
    switch (x->format) {
    case FMT_PPROF: {
        tm_pprof_options o = {.threads = x->threads, .period_ns = x->period_ns, .uncompressed = x->uncompressed,
                              .value = x->value};
        return tm_write_pprof(t, &o, out, err);
    }
    case FMT_FOLDED: return tm_write_folded(t, &folded, out, err);
    case FMT_SPEEDSCOPE: {
        tm_speedscope_options o = {.threads = x->threads, .period_ns = x->period_ns, .name = x->title,
                                   .value = x->value};
        return tm_write_speedscope(t, &o, out, err);
    }
    case FMT_SVG: return tm_write_flamegraph(t, &svg, out, err);
    case FMT_REPORT: return tm_write_report(t, out, err);
    case FMT_SAMPLE_V1: return tm_write_sample_v1(t, &x->v1, out, err);
    case FMT_SAMPLE_V2: break;
    }
    return tm_write_sample_v2(t, &x->v2, out, err);
}
