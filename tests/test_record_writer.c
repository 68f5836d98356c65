/*
 * test_record_writer.c — tests of the recorder's Perfetto writer
 * (record/writer.c) and symbolizer (record/symbols.c). Samples are made of
 * real addresses of functions in this test binary (so the symbolizer must
 * name them) and of junk addresses; the emitted bytes are read back with
 * the public decoder (tm_trace_parse, tm_write_folded, Relay mode) and
 * scanned packet by packet with the wire reader to check interning and
 * sequence flags; heap dumps are read back with heap_view.c. Symbolizer results are checked against binutils (nm,
 * readelf -n) and dladdr, which are independent of symbols.c.
 */
#define _GNU_SOURCE /* dladdr, popen, realpath, pthread_setname_np, ... */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "perfetto/fields.h"
#include "wire/pb.h"
#include "record.h"
#include "tracemill_record.h"
#include "conformance.h"
#include "heap_view.h"
#include "tutil.h"

/* ---- functions whose addresses make the synthetic stacks ---- */

static volatile int sink_var;

/* Bodies long enough that pc+2 is inside each function. */
#define BODY                                            \
    for (int i = 0; i < 3; i++) sink_var += i * sink_var; \
    sink_var++

__attribute__((noinline, used)) static void rw_leaf(void) { BODY; }
__attribute__((noinline, used)) static void rw_middle(void) { BODY; }
__attribute__((noinline, used)) static void rw_root(void) { BODY; }
/* A C++-mangled name for the demangling test: rw::mangle(). */
__attribute__((noinline, used)) void rw_mangled(void) __asm__("_ZN2rw6mangleEv");
void rw_mangled(void) { BODY; }

static uint64_t addr_of(void (*fn)(void)) { return (uint64_t)(uintptr_t)fn; }

/* A leaf pc inside fn, and a return address that points inside it once the
 * writer looks it up at pc - 1. */
static uint64_t leaf_pc(void (*fn)(void)) { return addr_of(fn) + 1; }
static uint64_t ret_pc(void (*fn)(void)) { return addr_of(fn) + 2; }

/* ---- plumbing ---- */

static int emit_to_membuf(void *ctx, const uint8_t *rec, size_t len) { return tu_membuf_write(ctx, rec, len); }

static int fail_emit(void *ctx, const uint8_t *rec, size_t len) {
    (void)rec, (void)len;
    int *left = ctx;
    return (*left)-- <= 0;
}

typedef struct rig {
    tmr_symbols *syms;
    tmr_writer *w;
    tu_membuf out;
} rig;

static void rig_open(rig *r, int demangle) {
    tm_error err;
    memset(r, 0, sizeof *r);
    r->syms = tmr_symbols_new((demangle ? TMR_SYMBOLS_DEMANGLE : 0) | TMR_SYMBOLS_NAME_ALL, &err);
    cr_assert_not_null(r->syms, "%s", err.message);
    tmr_writer_opts o = {.pid = (int32_t)getpid(), .process_name = "rw-test", .sampling_hz = 101, .buffer_kb = 64};
    r->w = tmr_writer_new(&o, r->syms, emit_to_membuf, &r->out, &err);
    cr_assert_not_null(r->w, "%s", err.message);
    cr_assert_eq(tmr_writer_begin(r->w, &err), TM_OK, "%s", err.message);
}

static void rig_close(rig *r) {
    tmr_writer_free(r->w);
    tmr_symbols_free(r->syms);
    tu_membuf_free(&r->out);
}

static void sample(rig *r, uint32_t seq, int32_t tid, uint64_t ts, const uint64_t *pcs, uint32_t n, int dropped) {
    tm_error err;
    cr_assert_eq(tmr_writer_sample(r->w, seq, tid, 0, ts, pcs, n, 0, dropped ? TMR_SAMPLE_PREV_DROPPED : 0, &err), TM_OK, "%s", err.message);
}

static void stats_no_loss(rig *r) {
    tm_error err;
    cr_assert_eq(tmr_writer_stats(r->w, NULL, &err), TM_OK, "%s", err.message);
}

static tm_trace *parse(const rig *r, tm_mode mode) {
    tm_options opts = {.mode = mode, .input = TM_INPUT_PERFETTO};
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(r->out.data, r->out.len, &opts, &t, &err), TM_OK, "%s at %llu: %s",
                 tm_status_str(err.code), (unsigned long long)err.offset, err.message);
    return t;
}

/* Folded stacks of the parsed trace, NUL-terminated (free with tu_membuf_free). */
static tu_membuf folded(const tm_trace *t) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    cr_assert_eq(tm_write_folded(t, NULL, &sink, &err), TM_OK, "%s", err.message);
    cr_assert_not_null(m.data);
    return m;
}

/* Count of stack line in folded text ("a;b;c N"), 0 when absent. */
static long folded_count(const char *text, const char *stack) {
    size_t n = strlen(stack);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (strncmp(line, stack, n) == 0 && line[n] == ' ') return strtol(line + n + 1, NULL, 10);
    return 0;
}

static int has_thread(const tm_trace *t, const char *name) {
    for (size_t i = 0; i < tm_trace_thread_count(t); i++) {
        tm_thread_info ti;
        cr_assert_eq(tm_trace_thread(t, i, &ti), TM_OK);
        if (ti.name && ti.name_len == strlen(name) && memcmp(ti.name, name, ti.name_len) == 0) return 1;
    }
    return 0;
}

/* ---- a raw scan of the packets, independent of the decoder ---- */

typedef struct pkt_info {
    uint32_t seq, flags, prev_dropped;
    int has_perf_sample, has_defaults;
    int n_frames, n_callstacks, n_mappings, n_names, n_build_ids, n_paths;
    uint64_t first_callstack_frames[8]; /* frame iids of the first interned callstack */
    int first_callstack_len;
    /* Repeated varint fields by wire type: Callstack.frame_ids and
     * Mapping.path_string_ids, which the protos declare unpacked. */
    int frame_ids_varint, frame_ids_len, path_ids_varint, path_ids_len;
} pkt_info;

/* The sequence flags of a packet that starts a generation of interning. */
enum { NEW_GENERATION = TM_PF_SEQ_INCREMENTAL_STATE_CLEARED | TM_PF_SEQ_NEEDS_INCREMENTAL_STATE };

static tm_bytes bytes(const void *p, size_t n) {
    tm_bytes b = {p, n};
    return b;
}

/* Counts field num's entries in msg by wire type (varint or length-delimited);
 * the values, packed or not, go to out[0..max) when out is given. */
static void repeated_ids(tm_bytes msg, uint32_t num, int *n_varint, int *n_len, uint64_t *out, int *n_out, int max) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field c;
    while (tm_pb_next(&r, &c) == TM_PB_OK) {
        if (c.num != num) continue;
        if (c.wire == TM_PB_VARINT) {
            (*n_varint)++;
            if (out && *n_out < max) out[(*n_out)++] = c.val;
            continue;
        }
        (*n_len)++;
        tm_pb_reader packed = tm_pb_reader_of(c.bytes);
        uint64_t v;
        while (tm_pb_packed_next(&packed, &v) == TM_PB_OK)
            if (out && *n_out < max) out[(*n_out)++] = v;
    }
}

static size_t scan(const rig *r, pkt_info *out, size_t max) {
    tm_pb_reader tr = tm_pb_reader_of(bytes(r->out.data, r->out.len));
    tm_pb_field f;
    size_t n = 0;
    int rc;
    while ((rc = tm_pb_next(&tr, &f)) == TM_PB_OK) {
        cr_assert_eq(f.num, TM_PF_TRACE_PACKET, "top-level field %u", f.num);
        cr_assert_lt(n, max);
        pkt_info *p = &out[n++];
        memset(p, 0, sizeof *p);
        tm_pb_reader pr = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        while (tm_pb_next(&pr, &g) == TM_PB_OK) {
            if (g.num == TM_PF_PACKET_SEQUENCE_ID) p->seq = (uint32_t)g.val;
            if (g.num == TM_PF_PACKET_SEQUENCE_FLAGS) p->flags = (uint32_t)g.val;
            if (g.num == TM_PF_PACKET_PREVIOUS_PACKET_DROPPED) p->prev_dropped = (uint32_t)g.val;
            if (g.num == TM_PF_PACKET_PERF_SAMPLE) p->has_perf_sample = 1;
            if (g.num == TM_PF_PACKET_DEFAULTS) p->has_defaults = 1;
            if (g.num != TM_PF_PACKET_INTERNED_DATA) continue;
            tm_pb_reader ir = tm_pb_reader_of(g.bytes);
            tm_pb_field h;
            while (tm_pb_next(&ir, &h) == TM_PB_OK) {
                p->n_names += h.num == TM_PF_INTERNED_FUNCTION_NAMES;
                p->n_frames += h.num == TM_PF_INTERNED_FRAMES;
                p->n_build_ids += h.num == TM_PF_INTERNED_BUILD_IDS;
                p->n_paths += h.num == TM_PF_INTERNED_MAPPING_PATHS;
                if (h.num == TM_PF_INTERNED_MAPPINGS) {
                    p->n_mappings++;
                    repeated_ids(h.bytes, TM_PF_MAPPING_PATH_STRING_IDS, &p->path_ids_varint, &p->path_ids_len,
                                 NULL, NULL, 0);
                }
                if (h.num != TM_PF_INTERNED_CALLSTACKS) continue;
                int first = p->n_callstacks++ == 0;
                repeated_ids(h.bytes, TM_PF_CALLSTACK_FRAME_IDS, &p->frame_ids_varint, &p->frame_ids_len,
                             first ? p->first_callstack_frames : NULL, &p->first_callstack_len, 8);
            }
        }
    }
    cr_assert_eq(rc, TM_PB_DONE, "trailing garbage in the output");
    return n;
}

/* ---- independent references: binutils ---- */

static void self_exe(char *path, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", path, cap - 1);
    cr_assert_gt(n, 0);
    path[n] = 0;
}

/* st_value of symbol name in the file, via nm; 0 when absent. */
static uint64_t nm_value(const char *file, const char *name) {
    char cmd[4200], line[512];
    snprintf(cmd, sizeof cmd, "nm '%s' 2>/dev/null", file);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    uint64_t v = 0;
    while (fgets(line, sizeof line, p)) {
        unsigned long long a;
        char type, sym[400];
        if (sscanf(line, "%llx %c %399s", &a, &type, sym) == 3 && strcmp(sym, name) == 0) v = a;
    }
    pclose(p);
    return v;
}

/* The build id readelf -n prints for the file, as lowercase hex ("" if none). */
static void readelf_build_id(const char *file, char *hex, size_t cap) {
    char cmd[4200], line[512];
    snprintf(cmd, sizeof cmd, "readelf -n '%s' 2>/dev/null", file);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    hex[0] = 0;
    while (fgets(line, sizeof line, p)) {
        const char *at = strstr(line, "Build ID: ");
        if (at) sscanf(at + 10, "%127s", hex);
    }
    pclose(p);
    (void)cap;
}

static void hex_of(const uint8_t *b, size_t n, char *out) {
    for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
    out[2 * n] = 0;
}

/* ==== the writer, read back ============================================ */

Test(record_writer, samples_threads_and_names_read_back) {
    rig r;
    rig_open(&r, 0);
    tm_error err;
    int32_t pid = (int32_t)getpid();
    cr_assert_eq(tmr_writer_thread(r.w, pid + 1000, "worker-a", &err), TM_OK);
    cr_assert_eq(tmr_writer_thread(r.w, pid + 1001, "worker-b", &err), TM_OK);
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    const uint64_t shallow[] = {leaf_pc(rw_middle), ret_pc(rw_root)};
    uint64_t ts = 1000000000;
    for (int i = 0; i < 10; i++) sample(&r, 1, pid + 1000, ts += 1000000, deep, 3, 0);
    for (int i = 0; i < 5; i++) sample(&r, 2, pid + 1001, ts += 1000000, shallow, 2, 0);
    stats_no_loss(&r);

    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_expect_eq(st->perf_samples, 15);
    cr_expect_eq(st->samples_kept, 15);
    cr_expect_eq(st->dropped_unresolved + st->dropped_stale_interning + st->dropped_never_cleared +
                     st->dropped_missing_clock,
                 0);
    cr_expect_eq(st->data_losses, 0);
    cr_expect_eq(st->trace_clock_id, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    cr_expect(st->has_realtime);
    cr_expect_eq(st->first_sample_ns, 1001000000);
    cr_expect(has_thread(t, "worker-a"));
    cr_expect(has_thread(t, "worker-b"));
    tu_membuf fo = folded(t);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;rw_leaf"), 10, "%s", fo.data);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle"), 5, "%s", fo.data);

    char exe[4096], want[130];
    self_exe(exe, sizeof exe);
    readelf_build_id(exe, want, sizeof want);
    cr_expect_geq(st->mappings, 1);
    if (want[0]) cr_expect_eq(st->mappings_without_build_id, 0);
    tu_membuf_free(&fo);
    tm_trace_free(t);
    rig_close(&r);
}

Test(record_writer, interning_once_per_sequence_and_flags) {
    rig r;
    rig_open(&r, 0);
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    for (int i = 0; i < 4; i++) sample(&r, 7, 1, 100 + (uint64_t)i, deep, 3, 0);
    for (int i = 0; i < 2; i++) sample(&r, 8, 2, 200 + (uint64_t)i, deep, 3, 0);
    pkt_info p[64];
    size_t n = scan(&r, p, 64);
    int frames7 = 0, frames8 = 0, stacks7 = 0, cleared7 = 0, seen7 = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i].has_perf_sample) {
            cr_expect_eq(p[i].seq, TMR_WRITER_SEQ, "descriptors go on the writer's own sequence");
            continue;
        }
        cr_expect(p[i].flags & TM_PF_SEQ_NEEDS_INCREMENTAL_STATE, "every sample packet needs incremental state");
        if (p[i].seq == 7) {
            frames7 += p[i].n_frames, stacks7 += p[i].n_callstacks;
            cleared7 += (p[i].flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED) != 0;
            if (!seen7++) {
                cr_expect(p[i].flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED,
                          "first packet of a sequence clears its state");
                cr_expect(p[i].has_defaults);
                /* Root first: the root's frame was interned last (pcs run leaf to root). */
                cr_expect_eq(p[i].first_callstack_len, 3);
                cr_expect_gt(p[i].first_callstack_frames[0], p[i].first_callstack_frames[2]);
                cr_expect_eq(p[i].n_names, 3);
                cr_expect_eq(p[i].n_mappings, 1);
                cr_expect_eq(p[i].n_paths, 1);
            }
        }
        if (p[i].seq == 8) frames8 += p[i].n_frames;
    }
    cr_expect_eq(frames7, 3, "each frame once per sequence");
    cr_expect_eq(stacks7, 1, "each callstack once per sequence");
    cr_expect_eq(cleared7, 1);
    cr_expect_eq(frames8, 3, "the other sequence interns its own copy");

    /* A clear re-interns on the next packet of every sequence. */
    size_t before = n;
    tmr_writer_clear_incremental(r.w);
    sample(&r, 7, 1, 300, deep, 3, 0);
    sample(&r, 7, 1, 301, deep, 3, 0);
    n = scan(&r, p, 64);
    cr_assert_eq(n, before + 2);
    cr_expect_eq(p[before].flags, NEW_GENERATION);
    cr_expect_eq(p[before].n_frames, 3);
    cr_expect_eq(p[before + 1].flags, TM_PF_SEQ_NEEDS_INCREMENTAL_STATE);
    cr_expect_eq(p[before + 1].n_frames, 0);
    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    cr_expect_eq(tm_trace_get_stats(t)->samples_kept, 8);
    cr_expect_geq(tm_trace_get_stats(t)->incremental_resets, 3);
    tm_trace_free(t);
    rig_close(&r);
}

/* Perfetto's decoder reads a repeated field only in the encoding its proto
 * declares: Callstack.frame_ids and Mapping.path_string_ids are not
 * [packed = true], and packed frame ids left Trace Processor with no stacks
 * (issue 22). One varint field per frame id, per path id. */
Test(record_writer, repeated_ids_are_unpacked_as_declared) {
    rig r;
    rig_open(&r, 0);
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    const uint64_t shallow[] = {leaf_pc(rw_middle), ret_pc(rw_root)};
    sample(&r, 1, 1, 100, deep, 3, 0);
    sample(&r, 1, 1, 101, shallow, 2, 0);
    sample(&r, 2, 2, 102, deep, 3, 0);
    pkt_info p[64];
    size_t n = scan(&r, p, 64);
    int stacks = 0, ids = 0, packed = 0, paths = 0, packed_paths = 0;
    for (size_t i = 0; i < n; i++) {
        stacks += p[i].n_callstacks;
        ids += p[i].frame_ids_varint, packed += p[i].frame_ids_len;
        paths += p[i].path_ids_varint, packed_paths += p[i].path_ids_len;
    }
    cr_expect_eq(stacks, 3);
    cr_expect_eq(packed, 0, "Callstack.frame_ids written packed (wire type 2)");
    cr_expect_eq(ids, 3 + 2 + 3, "one varint field per frame of each interned callstack");
    cr_expect_eq(packed_paths, 0, "Mapping.path_string_ids written packed (wire type 2)");
    cr_expect_eq(paths, 2, "one path id per interned mapping (one mapping on each sequence)");
    char why[256];
    cr_expect_eq(tc_check_trace((const uint8_t *)r.out.data, r.out.len, why, sizeof why), 0, "%s", why);

    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    tu_membuf fo = folded(t);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;rw_leaf"), 2, "%s", fo.data);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle"), 1, "%s", fo.data);
    tu_membuf_free(&fo);
    tm_trace_free(t);
    rig_close(&r);
}

Test(record_writer, data_loss_is_reported_and_later_samples_resolve) {
    rig r;
    rig_open(&r, 0);
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    uint64_t ts = 5000;
    for (int i = 0; i < 5; i++) sample(&r, 3, 33, ts++, deep, 3, 0);
    sample(&r, 3, 33, ts++, deep, 3, 1);
    for (int i = 0; i < 4; i++) sample(&r, 3, 33, ts++, deep, 3, 0);
    const uint32_t seqs[] = {3};
    const uint64_t lost[] = {7};
    tmr_losses l = {.n_writers = 1, .writer_seq = seqs, .writer_samples_lost = lost};
    tm_error err;
    cr_assert_eq(tmr_writer_stats(r.w, &l, &err), TM_OK);

    pkt_info p[64];
    size_t n = scan(&r, p, 64);
    int found = 0;
    for (size_t i = 0; i < n; i++) {
        if (!p[i].prev_dropped) continue;
        found++;
        cr_expect_eq(p[i].seq, 3);
        cr_expect_eq(p[i].flags, 0, "the loss marker needs no incremental state");
        cr_expect(!p[i].has_perf_sample);
        cr_assert_lt(i + 1, n);
        cr_expect_eq(p[i + 1].flags, NEW_GENERATION, "the sample after a loss starts a new generation");
        cr_expect_eq(p[i + 1].n_frames, 3, "and re-interns what it uses");
        cr_expect_eq(p[i + 1].n_callstacks, 1);
    }
    cr_expect_eq(found, 1);

    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_expect_eq(st->data_losses, 1);
    cr_expect_eq(st->sequences_with_data_loss, 1);
    cr_expect_eq(st->samples_kept, 10, "every sample resolves, the ones after the loss too");
    cr_expect_eq(st->dropped_stale_interning, 0);
    tu_membuf fo = folded(t);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;rw_leaf"), 10, "%s", fo.data);
    tu_membuf_free(&fo);
    tm_trace_free(t);
    rig_close(&r);
}

Test(record_writer, junk_pcs_and_empty_stacks_do_not_break_the_trace) {
    rig r;
    rig_open(&r, 0);
    const uint64_t junk[] = {0x10, 0xdeadbeef000, ret_pc(rw_root), UINT64_MAX};
    sample(&r, 1, 5, 10, junk, 4, 0);
    sample(&r, 1, 5, 11, junk, 4, 0);
    sample(&r, 1, 5, 12, NULL, 0, 0);
    tm_error err;
    cr_expect_eq(tmr_writer_sample(r.w, 0, 5, 0, 13, junk, 1, 0, 0, &err), TM_ERR_INVALID_ARG);
    cr_expect_eq(tmr_writer_sample(r.w, TMR_WRITER_SEQ, 5, 0, 13, junk, 1, 0, 0, &err), TM_ERR_INVALID_ARG);
    stats_no_loss(&r);
    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_expect_eq(st->samples_kept, 2);
    cr_expect_eq(st->perf_samples_without_callstack, 1);
    cr_expect_eq(st->dropped_unresolved, 0);
    tu_membuf fo = folded(t);
    /* Root first: the outermost junk pc (looked up at pc - 1), then rw_root, ... */
    cr_expect_eq(folded_count(fo.data, "0xfffffffffffffffe;rw_root;0xdeadbeeefff;0x10"), 2, "%s", fo.data);
    tu_membuf_free(&fo);
    tm_trace_free(t);
    rig_close(&r);
}

Test(record_writer, emit_failure_is_io_error_and_state_recovers) {
    tm_error err;
    tmr_symbols *s = tmr_symbols_new(0, &err);
    cr_assert_not_null(s);
    int left = 100;
    tmr_writer_opts o = {0};
    tmr_writer *w = tmr_writer_new(&o, s, fail_emit, &left, &err);
    cr_assert_not_null(w);
    cr_assert_eq(tmr_writer_begin(w, &err), TM_OK);
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_root)};
    left = 0;
    cr_expect_eq(tmr_writer_sample(w, 1, 1, 0, 1, deep, 2, 0, 0, &err), TM_ERR_IO);
    tmr_writer_free(w);
    tmr_symbols_free(s);

    /* After a failed emit the sequence re-interns: collect and check. */
    rig r;
    rig_open(&r, 0);
    tmr_writer_free(r.w);
    tu_membuf_free(&r.out);
    tmr_writer_opts o2 = {.process_name = "x"};
    r.w = tmr_writer_new(&o2, r.syms, emit_to_membuf, &r.out, &err);
    cr_assert_eq(tmr_writer_begin(r.w, &err), TM_OK);
    sample(&r, 1, 1, 1, deep, 2, 0);
    cr_expect_eq(tmr_writer_new(NULL, r.syms, emit_to_membuf, &r.out, &err), NULL);
    cr_expect_eq(err.code, TM_ERR_INVALID_ARG);
    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    cr_expect_eq(tm_trace_get_stats(t)->samples_kept, 1);
    tm_trace_free(t);
    rig_close(&r);
}

Test(record_writer, relay_mode_converts_the_output) {
    rig r;
    rig_open(&r, 0);
    tm_error err;
    int32_t pid = (int32_t)getpid();
    cr_assert_eq(tmr_writer_thread(r.w, pid, "rw-main", &err), TM_OK);
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    uint64_t ts = 2000000000;
    for (int i = 0; i < 20; i++) sample(&r, 1, pid, ts += 9900990, deep, 3, 0);
    stats_no_loss(&r);
    tm_trace *t = parse(&r, TM_MODE_RELAY);
    tu_membuf v2 = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &v2};
    cr_assert_eq(tm_write_sample_v2(t, NULL, &sink, &err), TM_OK, "%s (%s)", err.message,
                 err.reason ? err.reason : "");
    cr_expect_not_null(strstr(v2.data, "\"rw_leaf\""), "%s", v2.data);
    cr_expect_not_null(strstr(v2.data, "\"rw_root\""));
    cr_expect_not_null(strstr(v2.data, "\"debug_meta\""));
    tu_membuf_free(&v2);
    tm_trace_free(t);
    rig_close(&r);
}

/* ==== the symbolizer =================================================== */

/* ---- heap dumps ---- */

enum { HEAP_SITES = 300 };

/* HEAP_SITES callsites: a distinct junk leaf under rw_middle and rw_root,
 * the totals scaled by round. */
static void heap_sites(tmr_heap_callsite *sites, uint64_t pcs[][3], uint64_t round) {
    for (int i = 0; i < HEAP_SITES; i++) {
        pcs[i][0] = 0x10000 + 16 * (uint64_t)i;
        pcs[i][1] = ret_pc(rw_middle);
        pcs[i][2] = ret_pc(rw_root);
        sites[i] = (tmr_heap_callsite){pcs[i], 3, 4096 * round * (uint64_t)(i + 1), 4096 * (round - 1) * (uint64_t)i,
                                       round * (uint64_t)(i + 1), (round - 1) * (uint64_t)i};
    }
}

static heap_view read_heap(const rig *r) {
    heap_view v;
    cr_assert_eq(hv_read(r->out.data, r->out.len, &v), 0, "%s", v.why);
    return v;
}

/* A dump larger than max_packet is split with continued on all but its last
 * packet; a later dump defines nothing again but repeats every callsite with
 * its totals; a clear or a loss starts a generation that defines all again. */
Test(record_writer, heap_dumps_split_and_intern_once_per_generation) {
    rig r;
    rig_open(&r, 0);
    static tmr_heap_callsite sites[HEAP_SITES];
    static uint64_t pcs[HEAP_SITES][3];
    tmr_heap_stats st = {.interval = 4096, .sampled = 7};
    tm_error err;
    heap_sites(sites, pcs, 1);
    cr_assert_eq(tmr_writer_heap_dump(r.w, 1000, sites, HEAP_SITES, &st, 2048, 0, &err), TM_OK, "%s", err.message);
    heap_view v = read_heap(&r);
    cr_expect_eq(v.dumps, 1);
    cr_expect_gt(v.continued_packets, 2, "%llu packets for %d callsites", (unsigned long long)v.packets, HEAP_SITES);
    cr_expect_eq(v.continued_packets, v.packets - 1);
    cr_expect_eq(v.n_sites, HEAP_SITES);
    cr_expect_eq(v.callstacks_defined, HEAP_SITES);
    cr_expect_eq(v.interval, 4096);
    cr_expect_eq(v.heap_samples, 7);
    hv_totals t = hv_sum(&v, "rw_middle");
    cr_expect_eq(t.sites, HEAP_SITES);
    cr_expect_eq(t.alloc, 4096ull * HEAP_SITES * (HEAP_SITES + 1) / 2);
    uint64_t defined = v.strings_defined + v.frames_defined + v.callstacks_defined + v.mappings_defined;
    hv_free(&v);

    heap_sites(sites, pcs, 2);
    cr_assert_eq(tmr_writer_heap_dump(r.w, 2000, sites, HEAP_SITES, &st, 1 << 20, 0, &err), TM_OK, "%s", err.message);
    v = read_heap(&r);
    cr_expect_eq(v.dumps, 2);
    cr_expect_eq(v.generations, 1);
    cr_expect_eq(v.strings_defined + v.frames_defined + v.callstacks_defined + v.mappings_defined, defined,
                 "the second dump defined entries again");
    t = hv_sum(&v, "rw_root");
    cr_expect_eq(t.alloc, 2 * 4096ull * HEAP_SITES * (HEAP_SITES + 1) / 2, "the last dump's totals");
    cr_expect_eq(t.freed, 4096ull * HEAP_SITES * (HEAP_SITES - 1) / 2);
    hv_free(&v);

    tmr_writer_clear_incremental(r.w);
    cr_assert_eq(tmr_writer_heap_dump(r.w, 3000, sites, HEAP_SITES, &st, 1 << 20, 0, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tmr_writer_heap_dump(r.w, 4000, sites, HEAP_SITES, &st, 1 << 20, 1, &err), TM_OK, "%s", err.message);
    v = read_heap(&r);
    cr_expect_eq(v.dumps, 4);
    cr_expect_eq(v.generations, 3);
    cr_expect_eq(v.callstacks_defined, 3 * HEAP_SITES);
    hv_free(&v);
    /* The library reads the loss mark of the last one. */
    stats_no_loss(&r);
    tm_trace *tr = parse(&r, TM_MODE_DEFAULT);
    cr_expect_eq(tm_trace_get_stats(tr)->data_losses, 1);
    tm_trace_free(tr);
    rig_close(&r);
}

/* ProcessStats: this process's memory from /proc/self/status. */
Test(record_writer, process_stats_hold_this_process_memory) {
    rig r;
    rig_open(&r, 0);
    tm_error err;
    cr_assert_eq(tmr_writer_process_stats(r.w, &err), TM_OK, "%s", err.message);
    heap_view v = read_heap(&r);
    cr_expect_eq(v.mem_snapshots, 1);
    cr_expect_gt(v.max_rss_kb, 100);
    cr_expect_geq(v.max_hwm_kb, v.max_rss_kb);
    cr_expect_gt(v.last_anon_kb, 0);
    hv_free(&v);
    rig_close(&r);
}

Test(record_symbols, rel_pc_and_names_match_nm_and_dladdr) {
    tm_error err;
    tmr_symbols *s = tmr_symbols_new(TMR_SYMBOLS_NAME_ALL, &err);
    cr_assert_not_null(s, "%s", err.message);
    char exe[4096];
    self_exe(exe, sizeof exe);
    void (*fns[])(void) = {rw_leaf, rw_middle, rw_root};
    const char *names[] = {"rw_leaf", "rw_middle", "rw_root"};
    for (int i = 0; i < 3; i++) {
        int m;
        uint64_t rel;
        const char *name;
        tmr_symbols_lookup(s, addr_of(fns[i]) + 1, &m, &rel, &name);
        cr_assert_geq(m, 0);
        uint64_t st_value = nm_value(exe, names[i]);
        cr_assert_neq(st_value, 0, "nm knows %s", names[i]);
        cr_expect_eq(rel, st_value + 1, "%s: rel_pc %llx, st_value %llx", names[i], (unsigned long long)rel,
                     (unsigned long long)st_value);
        cr_expect_str_eq(name, names[i]);
        /* rel_pc is the pc minus the object's load address (dladdr's base
         * minus the ELF address of its first byte, 0 for PIE, 0x400000 non-PIE). */
        Dl_info di;
        cr_assert(dladdr((void *)(uintptr_t)addr_of(fns[i]), &di));
        const tmr_mapping *mp = tmr_symbols_mapping(s, m);
        cr_assert_not_null(mp);
        cr_expect_str_eq(mp->path, exe);
        uint64_t first_vaddr = mp->load_bias; /* == vaddr at file offset 0 */
        cr_expect_eq(rel, addr_of(fns[i]) + 1 - (uint64_t)(uintptr_t)di.dli_fbase + first_vaddr);

        /* Cached: the same answer again. */
        int m2;
        uint64_t rel2;
        const char *name2;
        tmr_symbols_lookup(s, addr_of(fns[i]) + 1, &m2, &rel2, &name2);
        cr_expect(m2 == m && rel2 == rel && name2 == name);
    }
    tmr_symbols_free(s);
}

/* PLT stubs are named name@plt, as objdump names them; a symbol without a
 * size (_init, just before the PLT) names its own address only. */
Test(record_symbols, plt_stubs_named_and_sizeless_symbols_not_stretched) {
    tm_error err;
    tmr_symbols *s = tmr_symbols_new(TMR_SYMBOLS_NAME_ALL, &err);
    cr_assert_not_null(s, "%s", err.message);
    char exe[4096], cmd[9000], line[1024], want[512];
    self_exe(exe, sizeof exe);
    int m;
    uint64_t rel;
    const char *name;
    tmr_symbols_lookup(s, leaf_pc(rw_leaf), &m, &rel, &name);
    cr_assert_geq(m, 0);
    Dl_info di;
    cr_assert(dladdr((void *)(uintptr_t)addr_of(rw_leaf), &di));
    /* pc = load address + ELF address - the ELF address of the first byte */
    uint64_t base = (uint64_t)(uintptr_t)di.dli_fbase - tmr_symbols_mapping(s, m)->load_bias;
    snprintf(cmd, sizeof cmd, "objdump -d -j .plt.sec '%s' 2>/dev/null; objdump -d -j .plt '%s' 2>/dev/null", exe,
             exe);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    int checked = 0;
    unsigned long long at;
    while (fgets(line, sizeof line, p))
        if (sscanf(line, "%llx <%511[^>]>:", &at, want) == 2 && strlen(want) > 4 &&
            strcmp(want + strlen(want) - 4, "@plt") == 0) { /* not PLT0, "x@plt-0x10" */
            tmr_symbols_lookup(s, base + at + 4, &m, &rel, &name);
            cr_expect(name && strcmp(name, want) == 0, "pc in the stub at %llx: %s, objdump says %s", at,
                      name ? name : "(none)", want);
            checked++;
        }
    pclose(p);
    cr_assert_geq(checked, 3, "objdump listed %d PLT stubs", checked);
    uint64_t init = nm_value(exe, "_init");
    cr_assert_neq(init, 0);
    tmr_symbols_lookup(s, base + init + 8, &m, &rel, &name);
    cr_expect(!name || strcmp(name, "_init") != 0, "a pc 8 bytes into the size-0 _init is named _init");
    tmr_symbols_free(s);
}

Test(record_symbols, build_id_matches_readelf) {
    tm_error err;
    tmr_symbols *s = tmr_symbols_new(TMR_SYMBOLS_NAME_ALL, &err);
    cr_assert_not_null(s);
    char exe[4096], want[130], got[70];
    self_exe(exe, sizeof exe);
    readelf_build_id(exe, want, sizeof want);
    int m;
    uint64_t rel;
    const char *name;
    tmr_symbols_lookup(s, addr_of(rw_root), &m, &rel, &name);
    const tmr_mapping *mp = tmr_symbols_mapping(s, m);
    cr_assert_not_null(mp);
    hex_of(mp->build_id, mp->build_id_len, got);
    cr_expect_str_eq(got, want);
    /* libc too (looked up through a libc function's address). */
    Dl_info di;
    cr_assert(dladdr((void *)(uintptr_t)(uint64_t)(uintptr_t)&getpid, &di));
    tmr_symbols_lookup(s, (uint64_t)(uintptr_t)&getpid, &m, &rel, &name);
    mp = tmr_symbols_mapping(s, m);
    cr_assert_not_null(mp);
    char real_libc[4096];
    cr_assert_not_null(realpath(di.dli_fname, real_libc));
    readelf_build_id(mp->path, want, sizeof want);
    hex_of(mp->build_id, mp->build_id_len, got);
    cr_expect_str_eq(got, want, "%s", mp->path);
    cr_expect_not_null(name);
    tmr_symbols_free(s);
}

Test(record_symbols, pcs_outside_mappings_and_bad_files) {
    tm_error err;
    tmr_symbols *s = tmr_symbols_new(0, &err);
    cr_assert_not_null(s);
    const uint64_t junk[] = {0, 0x10, 0xdeadbeef000, UINT64_MAX};
    for (size_t i = 0; i < sizeof junk / sizeof junk[0]; i++) {
        int m = 99;
        uint64_t rel = 1;
        const char *name = "x";
        tmr_symbols_lookup(s, junk[i], &m, &rel, &name);
        cr_expect_eq(m, -1);
        cr_expect_eq(rel, junk[i]);
        cr_expect_null(name);
    }
    cr_expect_null(tmr_symbols_mapping(s, -1));
    cr_expect_null(tmr_symbols_mapping(s, 1 << 30));

    /* Executable mappings of a garbage file and of an ELF header cut short:
     * no build id, no name, no crash. (Skipped where /tmp is noexec.) */
    char exe[4096];
    self_exe(exe, sizeof exe);
    FILE *src = fopen(exe, "rb");
    cr_assert_not_null(src);
    unsigned char head[64];
    cr_assert_eq(fread(head, 1, sizeof head, src), sizeof head);
    fclose(src);
    const struct {
        const void *data;
        size_t len;
    } files[] = {{"this is not an ELF file at all", 30}, {head, sizeof head}, {"\177ELF", 4}};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        char path[] = "/tmp/rw_symbols_XXXXXX";
        int fd = mkstemp(path);
        cr_assert_geq(fd, 0);
        cr_assert_eq(write(fd, files[i].data, files[i].len), (ssize_t)files[i].len);
        void *map = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
        close(fd);
        if (map == MAP_FAILED) {
            unlink(path);
            continue;
        }
        cr_assert_eq(tmr_symbols_refresh(s, &err), TM_OK);
        int m;
        uint64_t rel;
        const char *name;
        tmr_symbols_lookup(s, (uint64_t)(uintptr_t)map + 8, &m, &rel, &name);
        cr_assert_geq(m, 0);
        const tmr_mapping *mp = tmr_symbols_mapping(s, m);
        cr_expect_str_eq(mp->path, path);
        cr_expect_eq(mp->build_id_len, 0);
        cr_expect_eq(rel, 8 + mp->load_bias);
        cr_expect_null(name);
        munmap(map, 4096);
        unlink(path);
        /* After the unmap a refresh forgets it; the index stays readable. */
        cr_assert_eq(tmr_symbols_refresh(s, &err), TM_OK);
        cr_expect_not_null(tmr_symbols_mapping(s, m));
    }
    tmr_symbols_free(s);
}

/* By default a frame in a file on disk with a build id is left to
 * tm_symbolize: its mapping, build id and rel_pc, no name; tm_symbolize then
 * names it as TMR_SYMBOLS_NAME_ALL would have (the vDSO, JIT and deleted
 * files, which tm_symbolize cannot name later, keep being named: tests
 * below). */
Test(record_symbols, files_with_build_ids_left_to_tm_symbolize) {
    tm_error err;
    tmr_symbols *lazy = tmr_symbols_new(0, &err), *eager = tmr_symbols_new(TMR_SYMBOLS_NAME_ALL, &err);
    cr_assert(lazy && eager);
    void (*fns[])(void) = {rw_leaf, rw_middle, rw_root};
    for (int i = 0; i < 3; i++) {
        int m, m2;
        uint64_t rel, rel2;
        const char *name, *name2;
        tmr_symbols_lookup(lazy, addr_of(fns[i]) + 1, &m, &rel, &name);
        tmr_symbols_lookup(eager, addr_of(fns[i]) + 1, &m2, &rel2, &name2);
        cr_assert_geq(m, 0);
        cr_expect_null(name, "named at record time: %s", name);
        cr_expect_not_null(name2);
        cr_expect_eq(rel, rel2);
        const tmr_mapping *mp = tmr_symbols_mapping(lazy, m);
        cr_expect_gt(mp->build_id_len, 0, "the build id tm_symbolize finds the file by");
    }
    tmr_symbols_free(lazy);
    tmr_symbols_free(eager);

    /* A trace written so, symbolized: the names NAME_ALL would have given. */
    rig r;
    memset(&r, 0, sizeof r);
    r.syms = tmr_symbols_new(0, &err);
    cr_assert_not_null(r.syms);
    tmr_writer_opts o = {.pid = (int32_t)getpid(), .process_name = "rw-test", .sampling_hz = 101, .buffer_kb = 64};
    r.w = tmr_writer_new(&o, r.syms, emit_to_membuf, &r.out, &err);
    cr_assert_not_null(r.w);
    cr_assert_eq(tmr_writer_begin(r.w, &err), TM_OK, "%s", err.message);
    const uint64_t pcs[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    sample(&r, 1, (int32_t)gettid(), 1000, pcs, 3, 0);
    stats_no_loss(&r);
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(r.out.data, r.out.len, NULL, &t, &err), TM_OK, "%s", err.message);
    tu_membuf before = {0}, after = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &before};
    cr_assert_eq(tm_write_folded(t, NULL, &sink, &err), TM_OK);
    tm_trace_free(t);
    cr_expect_null(strstr(before.data, "rw_leaf"), "unsymbolized, yet named: %s", before.data);
    tu_membuf sym = {0};
    tm_sink to_sym = {.write = tu_membuf_write, .ctx = &sym};
    cr_assert_eq(tm_symbolize(r.out.data, r.out.len, NULL, NULL, &to_sym, NULL, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_trace_parse(sym.data, sym.len, NULL, &t, &err), TM_OK, "%s", err.message);
    sink.ctx = &after;
    cr_assert_eq(tm_write_folded(t, NULL, &sink, &err), TM_OK);
    tm_trace_free(t);
    cr_expect(strstr(after.data, "rw_root") && strstr(after.data, "rw_middle") && strstr(after.data, "rw_leaf"),
              "symbolized: %s", after.data);
    tu_membuf_free(&before);
    tu_membuf_free(&after);
    tu_membuf_free(&sym);
    rig_close(&r);
}

Test(record_symbols, demangling_on_and_off) {
    /* __cxa_demangle comes from libstdc++; load it if this C program lacks it. */
    void *cxx = dlopen("libstdc++.so.6", RTLD_NOW | RTLD_GLOBAL);
    if (!cxx && !dlsym(RTLD_DEFAULT, "__cxa_demangle")) cr_skip_test("no libstdc++ to demangle with");
    tm_error err;
    for (int demangle = 0; demangle < 2; demangle++) {
        tmr_symbols *s = tmr_symbols_new((demangle ? TMR_SYMBOLS_DEMANGLE : 0) | TMR_SYMBOLS_NAME_ALL, &err);
        cr_assert_not_null(s);
        int m;
        uint64_t rel;
        const char *name;
        tmr_symbols_lookup(s, addr_of(rw_mangled) + 1, &m, &rel, &name);
        cr_assert_not_null(name);
        cr_expect_str_eq(name, demangle ? "rw::mangle()" : "_ZN2rw6mangleEv");
        tmr_symbols_lookup(s, addr_of(rw_leaf) + 1, &m, &rel, &name);
        cr_expect_str_eq(name, "rw_leaf", "C names pass through");
        tmr_symbols_free(s);
    }
    if (cxx) dlclose(cxx);
}

Test(record_symbols, vdso_and_deleted_files) {
    tm_error err;
    tmr_symbols *s = tmr_symbols_new(0, &err);
    cr_assert_not_null(s);
    /* The vdso: no file to open; build id and names come from memory. */
    uint64_t vdso = getauxval(AT_SYSINFO_EHDR);
    if (vdso) {
        void *h = dlopen("linux-vdso.so.1", RTLD_NOW | RTLD_NOLOAD);
        void *fn = h ? dlsym(h, "__vdso_clock_gettime") : NULL;
        if (fn) {
            int m;
            uint64_t rel;
            const char *name;
            tmr_symbols_lookup(s, (uint64_t)(uintptr_t)fn + 1, &m, &rel, &name);
            const tmr_mapping *mp = tmr_symbols_mapping(s, m);
            cr_assert_not_null(mp);
            cr_expect_str_eq(mp->path, "[vdso]");
            cr_expect_not_null(name);
            if (name) cr_expect_not_null(strstr(name, "clock_gettime"), "%s", name);
        }
        if (h) dlclose(h);
    }
    /* A file deleted while mapped. */
    char path[] = "/tmp/rw_deleted_XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "\177ELF\2\1\1", 7), 7);
    void *map = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    close(fd);
    unlink(path);
    if (map != MAP_FAILED) {
        cr_assert_eq(tmr_symbols_refresh(s, &err), TM_OK);
        int m;
        uint64_t rel;
        const char *name;
        tmr_symbols_lookup(s, (uint64_t)(uintptr_t)map + 16, &m, &rel, &name);
        const tmr_mapping *mp = tmr_symbols_mapping(s, m);
        cr_assert_not_null(mp);
        cr_expect_not_null(strstr(mp->path, " (deleted)"), "%s", mp->path);
        cr_expect_eq(mp->build_id_len, 0);
        cr_expect_null(name);
        munmap(map, 4096);
    }
    tmr_symbols_free(s);
}

/* Off-CPU samples (TMR_SAMPLE_OFF_CPU) on sequences of their own: the reader
 * tells them from the CPU samples by their timebase and weighs each by the
 * growth of its sequence's timebase_count. The CPU samples alone stay the
 * default profile; off_cpu and wall views give the blocked ns exactly, in
 * time order across threads, in folded stacks, speedscope and pprof. */
static tu_membuf written(const tm_trace *t, tm_value v, int format) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_error err;
    tm_status st;
    if (format == 'f') {
        tm_folded_options o = {.value = v};
        st = tm_write_folded(t, &o, &sink, &err);
    } else if (format == 's') {
        tm_speedscope_options o = {.value = v};
        st = tm_write_speedscope(t, &o, &sink, &err);
    } else {
        tm_pprof_options o = {.value = v, .uncompressed = 1};
        st = tm_write_pprof(t, &o, &sink, &err);
    }
    cr_assert_eq(st, TM_OK, "%s", err.message);
    cr_assert(tu_membuf_write(&m, "", 1) == 0);
    return m;
}

Test(record_writer, off_cpu_samples_weigh_their_blocked_time) {
    rig r;
    rig_open(&r, 0);
    tm_error err;
    int32_t pid = (int32_t)getpid(), a = pid + 2000, b = pid + 2001;
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    const uint64_t shallow[] = {leaf_pc(rw_middle), ret_pc(rw_root)};
    const uint64_t ms = 1000000, t0 = 1000000000;
    for (int i = 0; i < 4; i++) sample(&r, 1, a, t0 + (uint64_t)i * 10 * ms, deep, 3, 0);
    /* thread a blocked 5 ms at root;middle;leaf, then 7 ms at root;middle;
     * thread b preempted 0.7 ms at root;middle, written after a's although
     * earlier; each off-CPU stack ends with why: [blocked] or [preempted] */
    cr_assert_eq(tmr_writer_sample(r.w, 2, a, 0, t0 + 1 * ms, deep, 3, 5 * ms, TMR_SAMPLE_OFF_CPU, &err), TM_OK);
    cr_assert_eq(tmr_writer_sample(r.w, 2, a, 1, t0 + 20 * ms, shallow, 2, 12 * ms, TMR_SAMPLE_OFF_CPU, &err), TM_OK);
    cr_assert_eq(tmr_writer_sample(r.w, 3, b, 0, t0 + 2 * ms, shallow, 2, 700000,
                                   TMR_SAMPLE_OFF_CPU | TMR_SAMPLE_PREEMPTED, &err),
                 TM_OK);
    stats_no_loss(&r);

    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_expect_eq(st->perf_samples, 4);
    cr_expect_eq(st->samples_kept, 4);
    cr_expect_eq(tm_trace_sample_count(t), 4);
    cr_expect_eq(st->off_cpu_samples, 3);
    cr_expect_eq(st->off_cpu_ns, 12 * ms + 700000);
    cr_expect_eq(st->off_cpu_preempted_samples, 1);
    cr_expect_eq(st->off_cpu_preempted_ns, 700000);
    tu_membuf fo = folded(t); /* the default: CPU samples only */
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;rw_leaf"), 4, "%s", fo.data);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle"), 0, "%s", fo.data);
    tu_membuf_free(&fo);
    fo = written(t, TM_VALUE_OFF_CPU, 'f');
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;rw_leaf;[blocked]"), 5 * ms, "%s", fo.data);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;[blocked]"), 7 * ms, "%s", fo.data);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;[preempted]"), 700000, "%s", fo.data);
    tu_membuf_free(&fo);
    /* wall: a CPU sample weighs the timebase's period, 1 s / 101 */
    fo = written(t, TM_VALUE_WALL, 'f');
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;rw_leaf"), 4 * (1000000000 / 101), "%s", fo.data);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;rw_leaf;[blocked]"), 5 * ms, "%s", fo.data);
    cr_expect_eq(folded_count(fo.data, "rw_root;rw_middle;[blocked]"), 7 * ms, "%s", fo.data);
    tu_membuf_free(&fo);
    fo = written(t, TM_VALUE_OFF_CPU, 's');
    cr_expect(strstr(fo.data, "\"unit\":\"nanoseconds\""), "%s", fo.data);
    cr_expect(strstr(fo.data, "\"weights\":[5000000,7000000]"), "%s", fo.data);
    cr_expect(strstr(fo.data, "\"weights\":[700000]"), "%s", fo.data);
    tu_membuf_free(&fo);
    fo = written(t, TM_VALUE_OFF_CPU, 'p');
    cr_expect(memmem(fo.data, fo.len, "off_cpu", 7) && memmem(fo.data, fo.len, "nanoseconds", 11));
    tu_membuf_free(&fo);
    tm_trace_free(t);
    rig_close(&r);
}

/* Without off-CPU samples the off_cpu value is refused with the reason. */
Test(record_writer, off_cpu_value_without_off_cpu_samples) {
    rig r;
    rig_open(&r, 0);
    const uint64_t deep[] = {leaf_pc(rw_leaf), ret_pc(rw_middle), ret_pc(rw_root)};
    sample(&r, 1, (int32_t)getpid(), 1000000000, deep, 3, 0);
    stats_no_loss(&r);
    tm_trace *t = parse(&r, TM_MODE_DEFAULT);
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_folded_options o = {.value = TM_VALUE_OFF_CPU};
    tm_error err;
    cr_expect_eq(tm_write_folded(t, &o, &sink, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "no off-CPU samples"), "%s", err.message);
    cr_expect_eq(tm_trace_get_stats(t)->off_cpu_samples, 0);
    tu_membuf_free(&m);
    tm_trace_free(t);
    rig_close(&r);
}

/* A tm_recorder_start that fails (here: its output's directory is missing)
 * leaves the recorder as it was, so that it can be started again once the
 * cause is gone: it used to keep the symbolizer and writer it had made and
 * make new ones at the next start, leaking ~15 KB a try. */
Test(record_api, a_failed_start_can_be_retried_without_leaking) {
    cr_assert_not_null(tu_test_dir_make("tm_record_api"));
    char *dir = tu_test_path("missing"), *out = tu_test_path("missing/x.pftrace");
    tm_recorder_options o = {.output = out};
    tm_recorder *r = NULL;
    tm_error err;
    cr_assert_eq(tm_recorder_new(&o, &r, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_recorder_start(r, &err), TM_ERR_IO); /* the first try's allocations may stay (caches) */
    struct mallinfo2 before = mallinfo2();
    for (int i = 0; i < 40; i++) {
        cr_assert_eq(tm_recorder_start(r, &err), TM_ERR_IO);
        cr_assert(strstr(err.message, "cannot create"), "%s", err.message);
    }
    struct mallinfo2 after = mallinfo2();
    cr_expect_lt(after.uordblks, before.uordblks + 64 * 1024, "40 failed starts kept %zu bytes",
                 after.uordblks - before.uordblks);
    cr_assert_eq(mkdir(dir, 0755), 0);
    cr_assert_eq(tm_recorder_start(r, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_recorder_stop(r, &err), TM_OK, "%s", err.message);
    tm_recorder_free(r);
    size_t len;
    char *bytes = tu_read_file(out, &len);
    cr_assert_not_null(bytes);
    tm_trace *t = NULL;
    cr_expect_eq(tm_trace_parse(bytes, len, NULL, &t, &err), TM_OK, "%s", err.message);
    tm_trace_free(t);
    free(bytes);
    free(dir);
    free(out);
    cr_expect_eq(tu_test_dir_remove(), 0);
}

/* Each call refused says why: a NULL recorder is not "already started". */
Test(record_api, refusals_name_their_cause) {
    tm_error err;
    cr_expect_eq(tm_recorder_start(NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "NULL"), "%s", err.message);
    cr_expect_eq(tm_recorder_flush(NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "NULL"), "%s", err.message);
    cr_expect_eq(tm_recorder_stop(NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "NULL"), "%s", err.message);
    tm_recorder_options o = {.output = "/dev/null"};
    tm_recorder *r = NULL;
    cr_assert_eq(tm_recorder_new(&o, &r, &err), TM_OK, "%s", err.message);
    cr_expect_eq(tm_recorder_flush(r, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "not recording"), "%s", err.message);
    cr_assert_eq(tm_recorder_start(r, &err), TM_OK, "%s", err.message);
    cr_expect_eq(tm_recorder_start(r, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "already started"), "%s", err.message);
    cr_expect_eq(tm_recorder_stop(r, &err), TM_OK, "%s", err.message);
    tm_recorder_free(r);
}
