/*
 * cli_info.c — `tracemill info`: what a trace holds and what was lost, as
 * a short human summary or (--json) the data-quality report.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"

/* The heading of the losses, before the first one (*shown: printed). */
static void heading(int *shown) {
    if (!*shown) printf("dropped or degraded:\n");
    *shown = 1;
}

static void line(int *shown, const char *name, unsigned long long v) {
    if (!v) return;
    heading(shown);
    printf("  %-44s %llu\n", name, v);
}

/* The first lines of another format than Perfetto, which has no packets,
 * sequences or clocks; folded stacks have no time either. */
static void print_other_format(const tm_trace *t, tm_input_format f) {
    const tm_trace_stats *s = tm_trace_get_stats(t);
    printf(", %s input\n", tm_input_format_name(f));
    if (f == TM_INPUT_FOLDED) {
        unsigned long long weight = 0;
        for (size_t i = 0; i < tm_trace_thread_count(t); i++) {
            tm_thread_info ti;
            if (tm_trace_thread(t, i, &ti) == TM_OK) weight += ti.samples;
        }
        printf("samples: %llu lines of %llu samples in all\n", (unsigned long long)s->samples_kept, weight);
    } else {
        printf("samples: %llu\n", (unsigned long long)s->samples_kept);
        if (s->samples_kept)
            printf("time span: %.6f s\n", (double)(s->last_sample_ns - s->first_sample_ns) / 1e9);
    }
}

static void print_summary(const char *path, const tm_trace *t) {
    const tm_trace_stats *s = tm_trace_get_stats(t);
    printf("%s: %llu bytes", path, (unsigned long long)s->bytes);
    if (s->bytes_decompressed) printf(" (%llu decompressed)", (unsigned long long)s->bytes_decompressed);
    const tm_input_format format = tm_trace_input_format(t);
    const int perfetto = format == TM_INPUT_PERFETTO;
    if (!perfetto) {
        print_other_format(t, format);
    } else {
        printf(", %llu packets (%llu compressed), %llu sequences\n", (unsigned long long)s->packets,
               (unsigned long long)s->compressed_packets, (unsigned long long)s->sequences);
        printf("samples: %llu kept of %llu PerfSample + %llu StreamingProfilePacket + %llu StackSample\n",
               (unsigned long long)s->samples_kept, (unsigned long long)s->perf_samples,
               (unsigned long long)s->streaming_samples, (unsigned long long)s->stack_samples);
        if (s->samples_kept)
            printf("time span: %.6f s (trace clock %u)\n", (double)(s->last_sample_ns - s->first_sample_ns) / 1e9,
                   s->trace_clock_id);
    }
    if (s->off_cpu_samples)
        printf("off-CPU: %llu samples (switch-outs), %.6f s off the CPU (--value off_cpu or wall): %llu blocked "
               "(%.6f s), %llu preempted while runnable (%.6f s)\n",
               (unsigned long long)s->off_cpu_samples, (double)s->off_cpu_ns / 1e9,
               (unsigned long long)(s->off_cpu_samples - s->off_cpu_preempted_samples),
               (double)(s->off_cpu_ns - s->off_cpu_preempted_ns) / 1e9,
               (unsigned long long)s->off_cpu_preempted_samples, (double)s->off_cpu_preempted_ns / 1e9);
    if (s->perf_samples_counted) {
        /* What the sampling delivered against what was asked of it. */
        double cpu_s = (double)s->perf_counted_cpu_ns / 1e9;
        double per_cpu_s = cpu_s > 0 ? (double)s->perf_samples_counted / cpu_s : 0;
        printf("CPU time counted: %.6f s by %llu of %llu PerfSamples (task-clock), %.0f samples per CPU-second",
               cpu_s, (unsigned long long)s->perf_samples_counted, (unsigned long long)s->perf_samples, per_cpu_s);
        if (s->perf_timebase_hz) {
            double asked = cpu_s * (double)s->perf_timebase_hz, merged = asked - (double)s->perf_samples_counted;
            printf(" at %llu Hz asked for", (unsigned long long)s->perf_timebase_hz);
            if (merged > 0.1 * asked)
                printf(": %.0f %% delivered, ~%.0f periods without a sample (a signal timer's expirations merged, "
                       "or periods that ended in the kernel, where only user mode is sampled)",
                       100.0 * (double)s->perf_samples_counted / asked, merged);
        }
        putchar('\n');
    }
    printf("profile: %llu threads, %llu stacks, %llu frames, %llu mappings\n", (unsigned long long)s->threads,
           (unsigned long long)s->stacks, (unsigned long long)s->frames, (unsigned long long)s->mappings);
    if (s->heap_profile_packets)
        printf("memory profile: %llu heap dumps in %llu ProfilePackets, %llu bytes allocated, %llu in use at the "
               "last dumps\n",
               (unsigned long long)s->heap_dumps, (unsigned long long)s->heap_profile_packets,
               (unsigned long long)s->heap_alloc_bytes, (unsigned long long)s->heap_inuse_bytes);
    if (perfetto) {
        printf("clocks: %llu snapshots, Unix time %s\n", (unsigned long long)s->clock_snapshots,
               s->has_realtime ? "known" : "UNKNOWN (no snapshot links the trace clock to REALTIME)");
        printf("incremental-state resets: %llu, data losses: %llu on %llu sequences\n",
               (unsigned long long)s->incremental_resets, (unsigned long long)s->data_losses,
               (unsigned long long)s->sequences_with_data_loss);
    }
    int shown = 0;
    line(&shown, "samples: unresolved callstack", s->dropped_unresolved);
    line(&shown, "samples: stale interning after data loss", s->dropped_stale_interning);
    line(&shown, "samples: incremental state never cleared", s->dropped_never_cleared);
    line(&shown, "samples: no clock path to trace time", s->dropped_missing_clock);
    line(&shown, "samples: bad timestamp", s->dropped_bad_timestamp);
    line(&shown, "samples: fewer deltas than callstacks", s->dropped_malformed_streaming);
    line(&shown, "samples: packet without a sequence id", s->dropped_without_sequence);
    line(&shown, "PerfSample skipped by the producer", s->perf_samples_skipped);
    line(&shown, "PerfSample without callstack", s->perf_samples_without_callstack);
    line(&shown, "PerfSample stack cut at the producer's depth", s->perf_samples_truncated);
    line(&shown, "kernel records lost (PerfSample)", s->perf_records_lost);
    line(&shown, "producer: buffer chunks overwritten", s->buffer_chunks_overwritten);
    line(&shown, "producer: buffer chunks discarded", s->buffer_chunks_discarded);
    /* Long-trace mode overwrites by bytes, with no chunk counted. */
    line(&shown, "producer: buffer bytes overwritten", s->buffer_bytes_overwritten);
    line(&shown, "producer: writer packets lost", s->writer_packet_loss);
    line(&shown, "clock readings ignored", s->clock_readings_ignored);
    line(&shown, "packets skipped: needed incremental state", s->packets_skipped_incremental);
    line(&shown, "interned data skipped: state invalid", s->interned_data_skipped);
    line(&shown, "packets skipped: unsupported", s->packets_unsupported);
    line(&shown, "packet oneof members ignored", s->oneof_members_ignored);
    if (s->truncated) heading(&shown);
    if (s->truncated)
        printf("  %-44s at byte %llu (the packets before it were read)\n", "trace cut off",
               (unsigned long long)s->truncated_at);
    line(&shown, "streaming samples timed from packet ts", s->streaming_without_reference_time);
    line(&shown, "heap dumps flagged lossy by the producer", s->heap_dumps_with_loss);
    line(&shown, "heap packets missing (index gaps)", s->heap_missing_packets);
    line(&shown, "heap changes malformed (totals shrank)", s->heap_malformed);
    line(&shown, "heap dumps unfinished at the end", s->heap_unfinished_dumps);
    line(&shown, "heap samples with unresolved callstack", s->heap_samples_unresolved);
    line(&shown, "heap streaming allocations (no callstack)", s->heap_streaming_allocations);
    line(&shown, "heap streaming frees (no callstack)", s->heap_streaming_frees);
    line(&shown, "heap streaming packets malformed", s->heap_streaming_malformed);
    line(&shown, "samples without a thread", s->samples_without_thread);
    line(&shown, "threads with samples but no name", s->threads_without_name);
    line(&shown, "mappings without build id", s->mappings_without_build_id);
    if (!shown) printf("dropped or degraded: nothing\n");
    /* Apart: the service's count spans every producer and session. */
    if (s->service_chunks_discarded)
        printf("tracing service, all sessions (not this trace's loss):\n  %-44s %llu\n", "chunks discarded",
               (unsigned long long)s->service_chunks_discarded);
}

int cli_info(int argc, char **argv) {
    cli_export x; /* only its limits, --compat and --input-format apply */
    memset(&x, 0, sizeof x);
    const char *path = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        int r = cli_export_option(argc, argv, &i, &x);
        if (r < 0)
            return cli_usage_error("info", "%s%s", x.bad[0] ? "" : "bad value for ", x.bad[0] ? x.bad : argv[i]);
        if (r > 0) continue;
        if (strcmp(argv[i], "--json") == 0) json = 1;
        else if (argv[i][0] == '-' && argv[i][1] != 0) {
            return cli_usage_error("info", "unknown option %s", argv[i]);
        } else if (path) {
            return cli_usage_error("info", "more than one trace given");
        } else {
            path = argv[i];
        }
    }
    if (!path) {
        return cli_usage_error("info", "no trace given");
    }
    cli_input in;
    cli_progress_start(x.quiet);
    cli_progress_phase("reading", 0);
    int rc = cli_input_load(path, &x.opts, &in);
    cli_progress_phase("decoding", in.len);
    tm_trace *t = NULL;
    tm_error err;
    tm_status st = rc == EXIT_OK ? tm_trace_parse(in.data, in.len, &x.opts, &t, &err) : TM_OK;
    cli_progress_stop(); /* what follows starts on a clean line */
    if (rc != EXIT_OK) return rc;
    if (st == TM_OK) cli_warn_truncated(path, t);
    if (st != TM_OK) {
        rc = cli_report_error(path, &err);
    } else if (json) {
        tm_sink out = tm_sink_file(stdout);
        if (tm_write_report(t, &out, &err) != TM_OK) rc = cli_report_export_error(path, &err);
    } else {
        print_summary(path, t);
    }
    tm_trace_free(t);
    cli_input_release(&in);
    return rc;
}
