/*
 * test_abi.c — the ABI of the public structs (see "ABI" in tracemill.h):
 *  - layout: the size of every struct a caller allocates and the offset and
 *    size of each of its fields are those of ABI version 0, written out below
 *    as frozen copies (abi0_*). Adding a field outside reserved_, reordering
 *    fields or changing a field's size fails here; a new field that takes
 *    reserved_ space does not (reserved_ shrinks, the size stays), and is
 *    checked to sit in its reserved_ word (SLOT);
 *  - inputs: every entry point that takes such a struct rejects non-zero
 *    reserved_ space with TM_ERR_INVALID_ARG and a message naming the struct,
 *    and zero-initialised structs work;
 *  - outputs: the structs the library fills come back zeroed whole, reserved_
 *    included (on 64-bit targets the sizes are also checked as numbers).
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tracemill.h"
#include "tracemill_record.h"
#include "tracemill_sql.h"
#include "tutil.h"

/* ==== ABI version 0, frozen ============================================
 * Copies of the public structs as version 0 shipped them. Never edit one to
 * make the test pass: a struct that must change incompatibly needs a new
 * major version (libtracemill.so.1). */

struct abi0_tm_error {
    tm_status code;
    uint64_t offset;
    const char *reason;
    char message[200];
    uint64_t reserved_[4];
};
struct abi0_tm_alloc {
    void *(*malloc_fn)(void *ctx, size_t size);
    void *(*realloc_fn)(void *ctx, void *ptr, size_t old_size, size_t new_size);
    void (*free_fn)(void *ctx, void *ptr, size_t size);
    void *ctx;
    uint64_t reserved_[4];
};
struct abi0_tm_limits {
    uint64_t max_samples, max_stack_depth, max_sequences, max_packet_bytes, max_unique_frames, max_path_segments,
        max_inflated_bytes, max_interned_entries, max_chunk_duration_ns, max_work_bytes, max_result_bytes,
        max_input_bytes;
    uint64_t reserved_[20];
};
struct abi0_tm_options {
    tm_mode mode;
    tm_limit_preset preset;
    struct abi0_tm_limits limits;
    const tm_alloc *alloc;
    tm_input_format input;
    int strict;
    int no_source_lines;
    uint64_t reserved_[28];
};
struct abi0_tm_trace_stats {
    uint64_t bytes, packets, compressed_packets, packets_unsupported, packets_skipped_incremental,
        interned_data_skipped, sequences, incremental_resets, data_losses, sequences_with_data_loss, clock_snapshots,
        perf_samples, streaming_samples, stack_samples, stack_samples_without_callstack, samples_kept,
        dropped_unresolved, dropped_stale_interning, dropped_never_cleared, dropped_missing_clock,
        dropped_bad_timestamp, dropped_malformed_streaming, perf_samples_skipped, perf_samples_without_callstack,
        perf_records_lost, streaming_without_reference_time, samples_without_thread, threads, threads_without_name,
        frames, stacks, mappings, mappings_without_build_id;
    int64_t first_sample_ns, last_sample_ns;
    uint32_t trace_clock_id;
    int has_realtime;
    uint64_t trace_stats_packets, buffer_chunks_overwritten, buffer_chunks_discarded, buffer_bytes_overwritten,
        writer_packet_loss, clock_readings_ignored, oneof_members_ignored, dropped_without_sequence,
        bytes_decompressed, service_chunks_discarded;
    int truncated;
    uint64_t truncated_at, heap_profile_packets, heap_dumps, heap_dumps_with_loss, heap_missing_packets,
        heap_malformed, heap_unfinished_dumps, heap_samples_unresolved, heap_alloc_bytes, heap_inuse_bytes,
        perf_samples_truncated, heap_streaming_allocations, heap_streaming_alloc_bytes, heap_streaming_frees,
        heap_streaming_malformed, off_cpu_samples, off_cpu_ns, perf_samples_counted, perf_counted_cpu_ns,
        perf_timebase_hz, off_cpu_preempted_samples, off_cpu_preempted_ns;
    uint64_t reserved_[59];
};
struct abi0_tm_thread_info {
    int64_t tid, pid;
    const char *name;
    size_t name_len;
    uint64_t samples;
    uint64_t reserved_[3];
};
struct abi0_tm_sample_info {
    int64_t ts;
    uint64_t weight;
    size_t thread, stack;
    uint64_t reserved_[4];
};
struct abi0_tm_sink {
    int (*write)(void *ctx, const void *data, size_t len);
    void *ctx;
    uint64_t reserved_[6];
};
struct abi0_tm_sample_v2_options {
    const char *meta_json;
    size_t meta_len;
    int remove_single_samples;
    const char *const *in_app_prefixes;
    size_t n_in_app_prefixes;
    const char *const *not_in_app_prefixes;
    size_t n_not_in_app_prefixes;
    uint64_t reserved_[25];
};
struct abi0_tm_sample_v1_options {
    const char *meta_json;
    size_t meta_len;
    int truncate;
    const char *const *in_app_prefixes;
    size_t n_in_app_prefixes;
    const char *const *not_in_app_prefixes;
    size_t n_not_in_app_prefixes;
    uint64_t reserved_[25];
};
struct abi0_tm_thread_filter {
    const char *name;
    int64_t tid;
    int by_tid;
    uint64_t reserved_[5];
};
struct abi0_tm_pprof_options {
    struct abi0_tm_thread_filter threads;
    int64_t period_ns;
    int uncompressed;
    tm_value value;
    uint64_t reserved_[22];
};
struct abi0_tm_folded_options {
    struct abi0_tm_thread_filter threads;
    int thread_prefix;
    tm_value value;
    uint64_t reserved_[23];
};
struct abi0_tm_speedscope_options {
    struct abi0_tm_thread_filter threads;
    int64_t period_ns;
    const char *name;
    tm_value value;
    uint64_t reserved_[21];
};
struct abi0_tm_flamegraph_options {
    struct abi0_tm_thread_filter threads;
    const char *title;
    int reverse;
    unsigned width_px;
    double min_width_px;
    tm_value value;
    uint64_t reserved_[20];
};
struct abi0_tm_proguard_map {
    const char *package, *data;
    size_t len;
    uint64_t reserved_[5];
};
struct abi0_tm_symbolize_options {
    const char *const *symbol_dirs;
    size_t n_symbol_dirs;
    int no_system_paths;
    const tm_proguard_map *proguard_maps;
    size_t n_proguard_maps;
    const char *debuginfod_cache;
    int no_demangle;
    uint64_t reserved_[25];
};
struct abi0_tm_symbolize_stats {
    uint64_t mappings, mappings_symbolized, mappings_no_build_id, mappings_not_found, mappings_build_id_mismatch,
        frames, frames_symbolized, frames_with_lines, inlined_frames, java_classes, java_methods;
    uint64_t reserved_[21];
};
struct abi0_tm_recorder_options {
    const char *output;
    uint32_t hz;
    tm_record_clock clock;
    tm_record_unwind unwind;
    uint32_t max_depth, buffer_kb;
    tm_record_fill fill;
    uint32_t file_write_period_ms, clear_period_ms, duration_ms, chunk_seconds;
    tm_record_chunk_fn on_chunk;
    void *chunk_ctx;
    int demangle;
    uint32_t mem_period_ms;
    int name_frames;
    uint64_t reserved_[22];
};
struct abi0_tm_recorder_stats {
    uint64_t samples, samples_lost, timer_overruns, packets_overwritten, bytes_overwritten, packets_discarded,
        bytes_discarded, sample_packets_lost, bytes_written;
    uint32_t threads, chunks;
    uint64_t heap_samples, heap_samples_lost, heap_unwind_errors;
    uint64_t stacks_truncated, cpu_time_ns;
    uint64_t reserved_[17];
};

/* ==== layout ============================================================ */

/* A field of ABI 0 where version 0 put it, with the same size. */
#define FIELD(T, f)                                                                                         \
    do {                                                                                                    \
        cr_expect_eq(offsetof(T, f), offsetof(struct abi0_##T, f), #T "." #f ": offset %zu, ABI 0 has %zu", \
                     offsetof(T, f), offsetof(struct abi0_##T, f));                                         \
        cr_expect_eq(sizeof(((T *)0)->f), sizeof(((struct abi0_##T *)0)->f), #T "." #f ": size changed");  \
    } while (0)

/* A field added since version 0 in word k of its reserved_: the slot's
 * 8 bytes (a union with a uint64_t: a pointer has 4 on 32-bit targets). */
#define SLOT(T, f, k)                                                                                       \
    do {                                                                                                    \
        cr_expect_eq(offsetof(T, f), offsetof(struct abi0_##T, reserved_) + 8 * (k),                        \
                     #T "." #f ": offset %zu, reserved_[" #k "] of ABI 0 is at %zu", offsetof(T, f),        \
                     offsetof(struct abi0_##T, reserved_) + 8 * (k));                                       \
        cr_expect_eq(sizeof(((T *)0)->f##_slot_), 8u, #T "." #f ": its slot is not 8 bytes");               \
    } while (0)

/* The struct's size is version 0's, and reserved_ is its tail. */
#define STRUCT(T)                                                                                            \
    do {                                                                                                     \
        cr_expect_eq(sizeof(T), sizeof(struct abi0_##T), #T ": %zu bytes, ABI 0 has %zu", sizeof(T),         \
                     sizeof(struct abi0_##T));                                                               \
        cr_expect_eq(offsetof(T, reserved_) + sizeof(((T *)0)->reserved_), sizeof(T),                        \
                     #T ": reserved_ is not the last member");                                               \
    } while (0)

Test(abi, tm_error_tm_alloc_tm_limits_tm_options) {
    STRUCT(tm_error);
    FIELD(tm_error, code); FIELD(tm_error, offset); FIELD(tm_error, reason); FIELD(tm_error, message);
    STRUCT(tm_alloc);
    FIELD(tm_alloc, malloc_fn); FIELD(tm_alloc, realloc_fn); FIELD(tm_alloc, free_fn); FIELD(tm_alloc, ctx);
    STRUCT(tm_limits);
    FIELD(tm_limits, max_samples); FIELD(tm_limits, max_stack_depth); FIELD(tm_limits, max_sequences);
    FIELD(tm_limits, max_packet_bytes); FIELD(tm_limits, max_unique_frames); FIELD(tm_limits, max_path_segments);
    FIELD(tm_limits, max_inflated_bytes); FIELD(tm_limits, max_interned_entries);
    FIELD(tm_limits, max_chunk_duration_ns); FIELD(tm_limits, max_work_bytes); FIELD(tm_limits, max_result_bytes);
    FIELD(tm_limits, max_input_bytes);
    STRUCT(tm_options);
    FIELD(tm_options, mode); FIELD(tm_options, preset); FIELD(tm_options, limits); FIELD(tm_options, alloc);
    FIELD(tm_options, input); FIELD(tm_options, strict); FIELD(tm_options, no_source_lines);
}

Test(abi, tm_trace_stats) {
    STRUCT(tm_trace_stats);
    FIELD(tm_trace_stats, bytes); FIELD(tm_trace_stats, packets); FIELD(tm_trace_stats, compressed_packets);
    FIELD(tm_trace_stats, packets_unsupported); FIELD(tm_trace_stats, packets_skipped_incremental);
    FIELD(tm_trace_stats, interned_data_skipped); FIELD(tm_trace_stats, sequences);
    FIELD(tm_trace_stats, incremental_resets); FIELD(tm_trace_stats, data_losses);
    FIELD(tm_trace_stats, sequences_with_data_loss); FIELD(tm_trace_stats, clock_snapshots);
    FIELD(tm_trace_stats, perf_samples); FIELD(tm_trace_stats, streaming_samples);
    FIELD(tm_trace_stats, stack_samples); FIELD(tm_trace_stats, stack_samples_without_callstack);
    FIELD(tm_trace_stats, samples_kept); FIELD(tm_trace_stats, dropped_unresolved);
    FIELD(tm_trace_stats, dropped_stale_interning); FIELD(tm_trace_stats, dropped_never_cleared);
    FIELD(tm_trace_stats, dropped_missing_clock); FIELD(tm_trace_stats, dropped_bad_timestamp);
    FIELD(tm_trace_stats, dropped_malformed_streaming); FIELD(tm_trace_stats, perf_samples_skipped);
    FIELD(tm_trace_stats, perf_samples_without_callstack); FIELD(tm_trace_stats, perf_records_lost);
    FIELD(tm_trace_stats, streaming_without_reference_time); FIELD(tm_trace_stats, samples_without_thread);
    FIELD(tm_trace_stats, threads); FIELD(tm_trace_stats, threads_without_name); FIELD(tm_trace_stats, frames);
    FIELD(tm_trace_stats, stacks); FIELD(tm_trace_stats, mappings); FIELD(tm_trace_stats, mappings_without_build_id);
    FIELD(tm_trace_stats, first_sample_ns); FIELD(tm_trace_stats, last_sample_ns);
    FIELD(tm_trace_stats, trace_clock_id); FIELD(tm_trace_stats, has_realtime);
    FIELD(tm_trace_stats, trace_stats_packets); FIELD(tm_trace_stats, buffer_chunks_overwritten);
    FIELD(tm_trace_stats, buffer_chunks_discarded); FIELD(tm_trace_stats, buffer_bytes_overwritten);
    FIELD(tm_trace_stats, writer_packet_loss); FIELD(tm_trace_stats, clock_readings_ignored);
    FIELD(tm_trace_stats, oneof_members_ignored); FIELD(tm_trace_stats, dropped_without_sequence);
    FIELD(tm_trace_stats, bytes_decompressed); FIELD(tm_trace_stats, service_chunks_discarded);
    FIELD(tm_trace_stats, truncated); FIELD(tm_trace_stats, truncated_at);
    FIELD(tm_trace_stats, heap_profile_packets); FIELD(tm_trace_stats, heap_dumps);
    FIELD(tm_trace_stats, heap_dumps_with_loss); FIELD(tm_trace_stats, heap_missing_packets);
    FIELD(tm_trace_stats, heap_malformed); FIELD(tm_trace_stats, heap_unfinished_dumps);
    FIELD(tm_trace_stats, heap_samples_unresolved); FIELD(tm_trace_stats, heap_alloc_bytes);
    FIELD(tm_trace_stats, heap_inuse_bytes); FIELD(tm_trace_stats, perf_samples_truncated);
    FIELD(tm_trace_stats, heap_streaming_allocations); FIELD(tm_trace_stats, heap_streaming_alloc_bytes);
    FIELD(tm_trace_stats, heap_streaming_frees); FIELD(tm_trace_stats, heap_streaming_malformed);
    FIELD(tm_trace_stats, off_cpu_samples); FIELD(tm_trace_stats, off_cpu_ns);
    FIELD(tm_trace_stats, perf_samples_counted); FIELD(tm_trace_stats, perf_counted_cpu_ns);
    FIELD(tm_trace_stats, perf_timebase_hz);
    FIELD(tm_trace_stats, off_cpu_preempted_samples); FIELD(tm_trace_stats, off_cpu_preempted_ns);
}

Test(abi, readers_and_sink) {
    STRUCT(tm_thread_info);
    FIELD(tm_thread_info, tid); FIELD(tm_thread_info, pid); FIELD(tm_thread_info, name);
    FIELD(tm_thread_info, name_len); FIELD(tm_thread_info, samples);
    STRUCT(tm_sample_info);
    FIELD(tm_sample_info, ts); FIELD(tm_sample_info, weight); FIELD(tm_sample_info, thread);
    FIELD(tm_sample_info, stack);
    STRUCT(tm_sink);
    FIELD(tm_sink, write); FIELD(tm_sink, ctx); SLOT(tm_sink, lend, 0);
}

Test(abi, writer_options) {
    STRUCT(tm_sample_v2_options);
    FIELD(tm_sample_v2_options, meta_json); FIELD(tm_sample_v2_options, meta_len);
    FIELD(tm_sample_v2_options, remove_single_samples);
    FIELD(tm_sample_v2_options, in_app_prefixes); FIELD(tm_sample_v2_options, n_in_app_prefixes);
    FIELD(tm_sample_v2_options, not_in_app_prefixes); FIELD(tm_sample_v2_options, n_not_in_app_prefixes);
    SLOT(tm_sample_v2_options, meta, 0);
    STRUCT(tm_sample_v1_options);
    FIELD(tm_sample_v1_options, meta_json); FIELD(tm_sample_v1_options, meta_len);
    FIELD(tm_sample_v1_options, truncate); FIELD(tm_sample_v1_options, in_app_prefixes);
    FIELD(tm_sample_v1_options, n_in_app_prefixes); FIELD(tm_sample_v1_options, not_in_app_prefixes);
    FIELD(tm_sample_v1_options, n_not_in_app_prefixes);
    STRUCT(tm_thread_filter);
    FIELD(tm_thread_filter, name); FIELD(tm_thread_filter, tid); FIELD(tm_thread_filter, by_tid);
    STRUCT(tm_pprof_options);
    FIELD(tm_pprof_options, threads); FIELD(tm_pprof_options, period_ns); FIELD(tm_pprof_options, uncompressed);
    FIELD(tm_pprof_options, value);
    STRUCT(tm_folded_options);
    FIELD(tm_folded_options, threads); FIELD(tm_folded_options, thread_prefix); FIELD(tm_folded_options, value);
    STRUCT(tm_speedscope_options);
    FIELD(tm_speedscope_options, threads); FIELD(tm_speedscope_options, period_ns);
    FIELD(tm_speedscope_options, name); FIELD(tm_speedscope_options, value);
    STRUCT(tm_flamegraph_options);
    FIELD(tm_flamegraph_options, threads); FIELD(tm_flamegraph_options, title); FIELD(tm_flamegraph_options, reverse);
    FIELD(tm_flamegraph_options, width_px); FIELD(tm_flamegraph_options, min_width_px);
    FIELD(tm_flamegraph_options, value);
}

Test(abi, symbolize_and_recorder) {
    STRUCT(tm_proguard_map);
    FIELD(tm_proguard_map, package); FIELD(tm_proguard_map, data); FIELD(tm_proguard_map, len);
    STRUCT(tm_symbolize_options);
    FIELD(tm_symbolize_options, symbol_dirs); FIELD(tm_symbolize_options, n_symbol_dirs);
    FIELD(tm_symbolize_options, no_system_paths); FIELD(tm_symbolize_options, proguard_maps);
    FIELD(tm_symbolize_options, n_proguard_maps); FIELD(tm_symbolize_options, debuginfod_cache);
    FIELD(tm_symbolize_options, no_demangle);
    STRUCT(tm_symbolize_stats);
    FIELD(tm_symbolize_stats, mappings); FIELD(tm_symbolize_stats, mappings_symbolized);
    FIELD(tm_symbolize_stats, mappings_no_build_id); FIELD(tm_symbolize_stats, mappings_not_found);
    FIELD(tm_symbolize_stats, mappings_build_id_mismatch); FIELD(tm_symbolize_stats, frames);
    FIELD(tm_symbolize_stats, frames_symbolized); FIELD(tm_symbolize_stats, frames_with_lines);
    FIELD(tm_symbolize_stats, inlined_frames); FIELD(tm_symbolize_stats, java_classes);
    FIELD(tm_symbolize_stats, java_methods);
    STRUCT(tm_recorder_options);
    FIELD(tm_recorder_options, output); FIELD(tm_recorder_options, hz); FIELD(tm_recorder_options, clock);
    FIELD(tm_recorder_options, unwind); FIELD(tm_recorder_options, max_depth); FIELD(tm_recorder_options, buffer_kb);
    FIELD(tm_recorder_options, fill); FIELD(tm_recorder_options, file_write_period_ms);
    FIELD(tm_recorder_options, clear_period_ms); FIELD(tm_recorder_options, duration_ms);
    FIELD(tm_recorder_options, chunk_seconds); FIELD(tm_recorder_options, on_chunk);
    FIELD(tm_recorder_options, chunk_ctx); FIELD(tm_recorder_options, demangle);
    FIELD(tm_recorder_options, mem_period_ms); FIELD(tm_recorder_options, name_frames);
    STRUCT(tm_recorder_stats);
    FIELD(tm_recorder_stats, samples); FIELD(tm_recorder_stats, samples_lost); FIELD(tm_recorder_stats, timer_overruns);
    FIELD(tm_recorder_stats, packets_overwritten); FIELD(tm_recorder_stats, bytes_overwritten);
    FIELD(tm_recorder_stats, packets_discarded); FIELD(tm_recorder_stats, bytes_discarded);
    FIELD(tm_recorder_stats, sample_packets_lost); FIELD(tm_recorder_stats, bytes_written);
    FIELD(tm_recorder_stats, threads); FIELD(tm_recorder_stats, chunks); FIELD(tm_recorder_stats, heap_samples);
    FIELD(tm_recorder_stats, heap_samples_lost); FIELD(tm_recorder_stats, heap_unwind_errors);
    FIELD(tm_recorder_stats, stacks_truncated); FIELD(tm_recorder_stats, cpu_time_ns);
}

/* The sizes docs/library.md gives, on 64-bit targets (LP64: 8-byte pointers
 * and 8-byte aligned uint64_t); 32-bit targets lay the same fields out
 * smaller, which the frozen copies above check. */
Test(abi, sizes_on_64_bit_targets) {
    if (sizeof(void *) != 8 || _Alignof(uint64_t) != 8) cr_skip_test("not an LP64 target");
    static const struct {
        const char *name;
        size_t size, want;
    } s[] = {
        {"tm_error", sizeof(tm_error), 256},
        {"tm_alloc", sizeof(tm_alloc), 64},
        {"tm_limits", sizeof(tm_limits), 256},
        {"tm_options", sizeof(tm_options), 512},
        {"tm_trace_stats", sizeof(tm_trace_stats), 1024},
        {"tm_thread_info", sizeof(tm_thread_info), 64},
        {"tm_sample_info", sizeof(tm_sample_info), 64},
        {"tm_sink", sizeof(tm_sink), 64},
        {"tm_sample_v2_options", sizeof(tm_sample_v2_options), 256},
        {"tm_sample_v1_options", sizeof(tm_sample_v1_options), 256},
        {"tm_thread_filter", sizeof(tm_thread_filter), 64},
        {"tm_pprof_options", sizeof(tm_pprof_options), 256},
        {"tm_folded_options", sizeof(tm_folded_options), 256},
        {"tm_speedscope_options", sizeof(tm_speedscope_options), 256},
        {"tm_flamegraph_options", sizeof(tm_flamegraph_options), 256},
        {"tm_proguard_map", sizeof(tm_proguard_map), 64},
        {"tm_symbolize_options", sizeof(tm_symbolize_options), 256},
        {"tm_symbolize_stats", sizeof(tm_symbolize_stats), 256},
        {"tm_recorder_options", sizeof(tm_recorder_options), 256},
        {"tm_recorder_stats", sizeof(tm_recorder_stats), 256},
    };
    for (size_t i = 0; i < sizeof s / sizeof *s; i++)
        cr_expect_eq(s[i].size, s[i].want, "%s: %zu bytes, ABI 0 has %zu", s[i].name, s[i].size, s[i].want);
}

/* ==== inputs: reserved space must be zero =============================== */

static tu_membuf g_demo;

static void load_demo(void) {
    size_t len = 0;
    char *data = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert(data, "examples/demo.pftrace");
    g_demo.data = data;
    g_demo.len = len;
}
static void free_demo(void) { tu_membuf_free(&g_demo); }

static tm_trace *parse_demo(void) {
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(g_demo.data, g_demo.len, NULL, &t, &err), TM_OK, "%s", err.message);
    return t;
}

/* st is TM_ERR_INVALID_ARG and err names the struct. */
static void expect_rejected(tm_status st, const tm_error *err, const char *type) {
    cr_expect_eq(st, TM_ERR_INVALID_ARG, "%s with non-zero reserved_: %s", type, tm_status_str(st));
    cr_expect_eq(err->code, TM_ERR_INVALID_ARG);
    char want[64];
    snprintf(want, sizeof want, "%s: reserved space is not zero", type);
    cr_expect(strstr(err->message, want), "message \"%s\" does not start with \"%s\"", err->message, want);
}

/* The last byte of a reserved_ array: set by a caller built against a
 * header where a field has taken it. */
#define POISON(s) ((unsigned char *)(s).reserved_)[sizeof (s).reserved_ - 1] = 1

Test(abi_inputs, tm_options_tm_limits_tm_alloc, .init = load_demo, .fini = free_demo) {
    const char *types[] = {"tm_options", "tm_limits", "tm_alloc"};
    for (int which = 0; which < 3; which++) {
        tm_alloc alloc = {0};
        tm_options o = {.alloc = &alloc};
        if (which == 0) POISON(o);
        if (which == 1) POISON(o.limits);
        if (which == 2) POISON(alloc);
        tm_trace *t = NULL;
        tm_error err;
        expect_rejected(tm_trace_parse(g_demo.data, g_demo.len, &o, &t, &err), &err, types[which]);
        cr_expect_null(t);
        tm_db *db = NULL;
        expect_rejected(tm_db_new(g_demo.data, g_demo.len, &o, &db, &err), &err, types[which]);
        cr_expect_null(db);
        tu_membuf out = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
        expect_rejected(tm_symbolize(g_demo.data, g_demo.len, &o, NULL, &sink, NULL, &err), &err, types[which]);
        cr_expect_eq(out.len, 0, "nothing written");
        tu_membuf_free(&out);
    }
}

Test(abi_inputs, symbolize_options_and_proguard_maps, .init = load_demo, .fini = free_demo) {
    tm_proguard_map maps[2] = {{.data = "", .len = 0}, {.data = "", .len = 0}};
    POISON(maps[1]); /* the second element of the array: its stride is the struct's size */
    tm_symbolize_options so = {.no_system_paths = 1, .proguard_maps = maps, .n_proguard_maps = 2};
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    expect_rejected(tm_symbolize(g_demo.data, g_demo.len, NULL, &so, &sink, NULL, &err), &err, "tm_proguard_map");
    memset(&maps[1], 0, sizeof maps[1]);
    POISON(so);
    expect_rejected(tm_symbolize(g_demo.data, g_demo.len, NULL, &so, &sink, NULL, &err), &err, "tm_symbolize_options");
    memset(&so, 0, sizeof so);
    so.no_system_paths = 1;
    POISON(sink);
    expect_rejected(tm_symbolize(g_demo.data, g_demo.len, NULL, &so, &sink, NULL, &err), &err, "tm_sink");
    cr_expect_eq(out.len, 0);
    tu_membuf_free(&out);
}

/* Every writer with a poisoned sink, poisoned options and a poisoned thread
 * filter; with all of them zero, each writes. */
Test(abi_inputs, writers, .init = load_demo, .fini = free_demo) {
    tm_trace *t = parse_demo();
    for (int poison = 0; poison < 4; poison++) { /* 0: none, 1: sink, 2: options, 3: thread filter */
        tu_membuf out = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
        tm_sample_v2_options v2 = {0};
        tm_sample_v1_options v1 = {.truncate = 1};
        tm_pprof_options pprof = {0};
        tm_folded_options folded = {0};
        tm_speedscope_options speedscope = {0};
        tm_flamegraph_options flamegraph = {0};
        if (poison == 1) POISON(sink);
        if (poison == 2) POISON(v2), POISON(v1), POISON(pprof), POISON(folded), POISON(speedscope), POISON(flamegraph);
        if (poison == 3)
            POISON(pprof.threads), POISON(folded.threads), POISON(speedscope.threads), POISON(flamegraph.threads);
        struct {
            const char *type;
            tm_status st;
            tm_error err;
        } r[9];
        r[0].type = "tm_sample_v2_options", r[0].st = tm_write_sample_v2(t, &v2, &sink, &r[0].err);
        r[1].type = "tm_sample_v1_options", r[1].st = tm_write_sample_v1(t, &v1, &sink, &r[1].err);
        r[2].type = "tm_pprof_options", r[2].st = tm_write_pprof(t, &pprof, &sink, &r[2].err);
        r[3].type = "tm_folded_options", r[3].st = tm_write_folded(t, &folded, &sink, &r[3].err);
        r[4].type = "tm_folded_options", r[4].st = tm_write_folded_diff(t, t, &folded, &sink, &r[4].err);
        r[5].type = "tm_speedscope_options", r[5].st = tm_write_speedscope(t, &speedscope, &sink, &r[5].err);
        r[6].type = "tm_flamegraph_options", r[6].st = tm_write_flamegraph(t, &flamegraph, &sink, &r[6].err);
        r[7].type = "tm_flamegraph_options", r[7].st = tm_write_flamegraph_diff(t, t, &flamegraph, &sink, &r[7].err);
        r[8].type = NULL, r[8].st = TM_OK; /* no options: only a poisoned sink concerns it */
        if (poison < 2) r[8].st = tm_write_report(t, &sink, &r[8].err);
        for (size_t i = 0; i < 9; i++) {
            if (poison == 0) {
                cr_expect_eq(r[i].st, TM_OK, "writer %zu, zero-initialised: %s", i, r[i].err.message);
            } else if (poison == 1) {
                expect_rejected(r[i].st, &r[i].err, "tm_sink");
            } else if (r[i].type && (poison == 2 || i >= 2)) { /* Sample v2 and v1 have no thread filter */
                expect_rejected(r[i].st, &r[i].err, poison == 2 ? r[i].type : "tm_thread_filter");
            }
        }
        if (poison == 0) cr_expect_gt(out.len, 0);
        if (poison == 1 || poison == 2) cr_expect_eq(out.len, 0, "a rejected writer wrote %zu bytes", out.len);
        tu_membuf_free(&out);
    }
    tm_trace_free(t);
}

/* st is TM_ERR_INVALID_ARG with what in its message, and nothing was written. */
static void expect_refused(tm_status st, const tm_error *err, const char *what, const tu_membuf *out, const char *call) {
    cr_expect_eq(st, TM_ERR_INVALID_ARG, "%s: %s (%s)", call, tm_status_str(st), st ? err->message : "");
    cr_expect(st != TM_ERR_INVALID_ARG || strstr(err->message, what), "%s: \"%s\" does not say \"%s\"", call,
              err->message, what);
    cr_expect_eq(out->len, 0, "%s wrote %zu bytes", call, out->len);
}

/* Enumerations past their last value and periods outside 0..TM_PERIOD_NS_MAX
 * are refused by every reader and writer that takes them, not read as
 * something else (an index out of an array) or computed with (int64
 * overflow); the largest period is taken. */
Test(abi_inputs, out_of_range_values_modes_and_periods, .init = load_demo, .fini = free_demo) {
    tm_error err;
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_options bad_mode = {.mode = (tm_mode)7}, bad_preset = {.preset = (tm_limit_preset)9};
    tm_options bad_input = {.input = (tm_input_format)5};
    tm_trace *t = NULL;
    expect_refused(tm_trace_parse(g_demo.data, g_demo.len, &bad_mode, &t, &err), &err, "mode", &out, "parse");
    expect_refused(tm_trace_parse(g_demo.data, g_demo.len, &bad_preset, &t, &err), &err, "preset", &out, "parse");
    expect_refused(tm_trace_parse(g_demo.data, g_demo.len, &bad_input, &t, &err), &err, "input format", &out, "parse");
    tm_db *db = NULL;
    expect_refused(tm_db_new(g_demo.data, g_demo.len, &bad_mode, &db, &err), &err, "mode", &out, "tm_db_new");
    expect_refused(tm_db_new(g_demo.data, g_demo.len, &bad_input, &db, &err), &err, "input format", &out,
                   "tm_db_new");
    cr_expect_null(db);
    t = parse_demo();
    const tm_value bad_values[] = {(tm_value)8, (tm_value)-1, (tm_value)1000000};
    for (size_t i = 0; i < sizeof bad_values / sizeof *bad_values; i++) {
        tm_value v = bad_values[i];
        tm_pprof_options pprof = {.value = v};
        tm_folded_options folded = {.value = v};
        tm_speedscope_options speedscope = {.value = v};
        tm_flamegraph_options flamegraph = {.value = v};
        expect_refused(tm_write_pprof(t, &pprof, &sink, &err), &err, "value", &out, "pprof");
        expect_refused(tm_write_folded(t, &folded, &sink, &err), &err, "value", &out, "folded");
        expect_refused(tm_write_folded_diff(t, t, &folded, &sink, &err), &err, "value", &out, "folded diff");
        expect_refused(tm_write_speedscope(t, &speedscope, &sink, &err), &err, "value", &out, "speedscope");
        expect_refused(tm_write_flamegraph(t, &flamegraph, &sink, &err), &err, "value", &out, "flame graph");
        expect_refused(tm_write_flamegraph_diff(t, t, &flamegraph, &sink, &err), &err, "value", &out, "diff graph");
    }
    const int64_t bad_periods[] = {-5, TM_PERIOD_NS_MAX + 1, INT64_MAX};
    for (size_t i = 0; i < sizeof bad_periods / sizeof *bad_periods; i++) {
        tm_pprof_options pprof = {.period_ns = bad_periods[i]};
        tm_speedscope_options speedscope = {.period_ns = bad_periods[i]};
        expect_refused(tm_write_pprof(t, &pprof, &sink, &err), &err, "period", &out, "pprof");
        expect_refused(tm_write_speedscope(t, &speedscope, &sink, &err), &err, "period", &out, "speedscope");
    }
    tm_pprof_options pprof = {.period_ns = TM_PERIOD_NS_MAX};
    tm_speedscope_options speedscope = {.period_ns = TM_PERIOD_NS_MAX};
    cr_expect_eq(tm_write_pprof(t, &pprof, &sink, &err), TM_OK, "%s", err.message);
    cr_expect_eq(tm_write_speedscope(t, &speedscope, &sink, &err), TM_OK, "%s", err.message);
    tu_membuf_free(&out);
    tm_trace_free(t);
}

Test(abi_inputs, tm_recorder_options) {
    tm_recorder_options o = {.output = "/dev/null"};
    tm_recorder *r = NULL;
    tm_error err;
    cr_assert_eq(tm_recorder_new(&o, &r, &err), TM_OK, "zero-initialised: %s", err.message);
    tm_recorder_free(r);
    POISON(o);
    r = NULL;
    expect_rejected(tm_recorder_new(&o, &r, &err), &err, "tm_recorder_options");
    cr_expect_null(r);
}

/* ==== outputs: zeroed whole ============================================= */

static int all_zero(const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i]) return 0;
    return 1;
}
#define RESERVED_ZERO(s) all_zero((s).reserved_, sizeof (s).reserved_)

Test(abi_outputs, library_filled_structs_are_zeroed, .init = load_demo, .fini = free_demo) {
    tm_trace *t = parse_demo();
    cr_expect(RESERVED_ZERO(*tm_trace_get_stats(t)), "tm_trace_stats");

    tm_thread_info ti;
    memset(&ti, 0xff, sizeof ti);
    cr_assert_eq(tm_trace_thread(t, 0, &ti), TM_OK);
    cr_expect(RESERVED_ZERO(ti), "tm_thread_info");
    memset(&ti, 0xff, sizeof ti);
    cr_expect_eq(tm_trace_thread(t, tm_trace_thread_count(t), &ti), TM_ERR_INVALID_ARG);
    cr_expect(all_zero(&ti, sizeof ti), "tm_thread_info, out of range");

    tm_sample_info si;
    memset(&si, 0xff, sizeof si);
    cr_assert_eq(tm_trace_sample(t, 0, &si), TM_OK);
    cr_expect(RESERVED_ZERO(si), "tm_sample_info");

    tm_limits lim;
    memset(&lim, 0xff, sizeof lim);
    tm_limits_preset(TM_LIMITS_RELAY, &lim);
    cr_expect(RESERVED_ZERO(lim), "tm_limits");

    tm_error err;
    memset(&err, 0xff, sizeof err);
    cr_expect_eq(tm_write_report(t, NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(RESERVED_ZERO(err), "tm_error");

    tm_sink file = tm_sink_file(stdout);
    cr_expect(RESERVED_ZERO(file), "tm_sink_file");

    tm_symbolize_stats ss;
    memset(&ss, 0xff, sizeof ss);
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_symbolize_options so = {.no_system_paths = 1};
    cr_expect_eq(tm_symbolize(g_demo.data, g_demo.len, NULL, &so, &sink, &ss, &err), TM_OK, "%s", err.message);
    cr_expect(RESERVED_ZERO(ss), "tm_symbolize_stats");
    tu_membuf_free(&out);
    tm_trace_free(t);

    tm_recorder_stats rs;
    memset(&rs, 0xff, sizeof rs);
    tm_recorder_get_stats(NULL, &rs);
    cr_expect(all_zero(&rs, sizeof rs), "tm_recorder_stats of no recorder");
    tm_recorder_options ro = {.output = "/dev/null"};
    tm_recorder *r = NULL;
    cr_assert_eq(tm_recorder_new(&ro, &r, &err), TM_OK, "%s", err.message);
    memset(&rs, 0xff, sizeof rs);
    tm_recorder_get_stats(r, &rs);
    cr_expect(all_zero(&rs, sizeof rs), "tm_recorder_stats of a recorder not started");
    tm_recorder_free(r);
}
