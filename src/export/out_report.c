/*
 * out_report.c — the data-quality report: every counter of a decode as one
 * JSON object, grouped by what they count. `tracemill info --json` and
 * `convert -f report` print this.
 * Also home of tm_sink_file, the stdio sink.
 */
#include "wire/json_write.h" /* tm_jw */
#include "profile/profile.h"    /* tm_profile */

static int file_write(void *ctx, const void *data, size_t len) {
    return fwrite(data, 1, len, ctx) != len;
}

tm_sink tm_sink_file(FILE *f) {
    tm_sink s = {.write = file_write, .ctx = f};
    return s;
}

typedef struct counter {
    const char *name;
    uint64_t value;
} counter;

static void write_group(tm_jw *w, const char *name, const counter *c, size_t n, int last) {
    tm_jw_cstr(w, name);
    tm_jw_lit(w, ":{");
    for (size_t i = 0; i < n; i++) {
        if (i) tm_jw_char(w, ',');
        tm_jw_cstr(w, c[i].name);
        tm_jw_char(w, ':');
        tm_jw_u64(w, c[i].value);
    }
    tm_jw_char(w, '}');
    if (!last) tm_jw_char(w, ',');
}

#define N(a) (sizeof(a) / sizeof *(a))

tm_status tm_write_report(const tm_trace *t, const tm_sink *out, tm_error *err) {
    if (!t || !out || !out->write) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_write_report: NULL argument");
    TM_TRY(TM_CHECK_RESERVED(out, "tm_sink", err));
    const tm_profile *p = tm_trace_profile(t);
    const tm_trace_stats *s = &p->stats;
    tm_jw *w = tm_mem_alloc(p->mem, sizeof *w);
    if (!w) return tm_trace_budget_status(t, tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory"), err);
    tm_jw_init(w, out);
    tm_jw_lit(w, "{\"mode\":");
    tm_jw_cstr(w, p->relay_compat ? "relay" : "default");
    tm_jw_lit(w, ",\"input\":");
    tm_jw_cstr(w, tm_input_format_name(tm_trace_input_format(t)));
    tm_jw_lit(w, ",\"bytes\":");
    tm_jw_u64(w, s->bytes);
    tm_jw_char(w, ',');
    const counter packets[] = {
        {"read", s->packets},
        {"compressed", s->compressed_packets},
        {"skipped_unsupported", s->packets_unsupported},
        {"skipped_needs_incremental_state", s->packets_skipped_incremental},
        {"interned_data_skipped", s->interned_data_skipped},
        {"oneof_members_ignored", s->oneof_members_ignored},
        {"truncated", (uint64_t)s->truncated},
        {"truncated_at_byte", s->truncated_at},
    };
    write_group(w, "packets", packets, N(packets), 0);
    const counter samples[] = {
        {"perf_sample", s->perf_samples},
        {"streaming_profile", s->streaming_samples},
        {"stack_sample", s->stack_samples},
        {"kept", s->samples_kept},
        {"perf_sample_stack_truncated", s->perf_samples_truncated},
        {"off_cpu", s->off_cpu_samples},
        {"off_cpu_blocked_ns", s->off_cpu_ns}, /* all the time off the CPU, preempted included */
        {"off_cpu_preempted", s->off_cpu_preempted_samples},
        {"off_cpu_preempted_ns", s->off_cpu_preempted_ns},
        {"perf_sample_cpu_time_counted", s->perf_samples_counted},
        {"perf_counted_cpu_ns", s->perf_counted_cpu_ns},
        {"perf_timebase_hz", s->perf_timebase_hz},
    };
    write_group(w, "samples", samples, N(samples), 0);
    const counter dropped[] = {
        {"unresolved_callstack", s->dropped_unresolved},
        {"stale_interning_after_data_loss", s->dropped_stale_interning},
        {"incremental_state_never_cleared", s->dropped_never_cleared},
        {"missing_clock", s->dropped_missing_clock},
        {"bad_timestamp", s->dropped_bad_timestamp},
        {"stack_sample_without_callstack", s->stack_samples_without_callstack},
        {"fewer_deltas_than_callstacks", s->dropped_malformed_streaming},
        {"perf_sample_skipped_by_producer", s->perf_samples_skipped},
        {"perf_sample_without_callstack", s->perf_samples_without_callstack},
        {"perf_kernel_records_lost", s->perf_records_lost},
        {"without_sequence", s->dropped_without_sequence},
    };
    write_group(w, "samples_dropped", dropped, N(dropped), 0);
    const counter seqs[] = {
        {"count", s->sequences},
        {"incremental_state_resets", s->incremental_resets},
        {"data_losses", s->data_losses},
        {"with_data_loss", s->sequences_with_data_loss},
    };
    write_group(w, "sequences", seqs, N(seqs), 0);
    const counter producer[] = {
        {"trace_stats_packets", s->trace_stats_packets},
        {"chunks_overwritten", s->buffer_chunks_overwritten},
        {"chunks_discarded", s->buffer_chunks_discarded},
        {"bytes_overwritten", s->buffer_bytes_overwritten},
        {"writer_packet_loss", s->writer_packet_loss},
    };
    write_group(w, "producer_losses", producer, N(producer), 0);
    /* Not this trace's loss: the service's count over all its sessions. */
    const counter service[] = {{"chunks_discarded", s->service_chunks_discarded}};
    write_group(w, "tracing_service_all_sessions", service, N(service), 0);
    const counter timing[] = {
        {"clock_snapshots", s->clock_snapshots},
        {"clock_readings_ignored", s->clock_readings_ignored},
        {"trace_clock_id", s->trace_clock_id},
        {"has_realtime", (uint64_t)s->has_realtime},
        {"streaming_samples_timed_from_packet_timestamp", s->streaming_without_reference_time},
    };
    write_group(w, "clocks", timing, N(timing), 0);
    const counter model[] = {
        {"threads", s->threads},
        {"threads_without_name", s->threads_without_name},
        {"samples_without_thread", s->samples_without_thread},
        {"frames", s->frames},
        {"stacks", s->stacks},
        {"mappings", s->mappings},
        {"mappings_without_build_id", s->mappings_without_build_id},
    };
    write_group(w, "profile", model, N(model), 0);
    uint64_t totals[4] = {0};
    for (size_t i = 0; i < p->n_heap_samples; i++)
        for (int k = 0; k < 4; k++) { /* a stack that freed more than it allocated holds nothing */
            int64_t v = tm_heap_value(&p->heap_samples[i], (tm_value)(TM_VALUE_ALLOC_OBJECTS + k));
            totals[k] += v > 0 ? (uint64_t)v : 0;
        }
    const counter memory[] = {
        {"profile_packets", s->heap_profile_packets},
        {"dumps", s->heap_dumps},
        {"dumps_with_loss", s->heap_dumps_with_loss},
        {"missing_packets", s->heap_missing_packets},
        {"malformed_changes", s->heap_malformed},
        {"unfinished_dumps", s->heap_unfinished_dumps},
        {"samples_unresolved", s->heap_samples_unresolved},
        {"streaming_allocations", s->heap_streaming_allocations},
        {"streaming_alloc_bytes", s->heap_streaming_alloc_bytes},
        {"streaming_frees", s->heap_streaming_frees},
        {"streaming_malformed", s->heap_streaming_malformed},
        {"stacks", p->n_heap_samples},
        {"heaps", p->n_heap_names},
        {"sampling_interval_bytes", p->heap_interval},
        {"alloc_objects", totals[0]},
        {"alloc_space_bytes", totals[1]},
        {"inuse_objects", totals[2]},
        {"inuse_space_bytes", totals[3]},
        {"process_memory_readings", p->n_memory},
        {"peak_rss_bytes", tm_profile_peak_rss(p)},
    };
    write_group(w, "memory", memory, N(memory), 0);
    tm_jw_lit(w, "\"first_sample_ns\":");
    tm_jw_i64(w, s->first_sample_ns);
    tm_jw_lit(w, ",\"last_sample_ns\":");
    tm_jw_i64(w, s->last_sample_ns);
    tm_jw_lit(w, "}\n");
    tm_status st = tm_jw_finish(w);
    tm_mem_free(p->mem, w, sizeof *w);
    if (st != TM_OK) return tm_fail(err, st, 0, NULL, "writing the report failed");
    return TM_OK;
}
