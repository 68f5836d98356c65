/*
 * test_sample_v2_input.c — reading Sentry Sample v2 chunks
 * (src/in_sample_v2.c) into the profile model.
 *
 * - A hand-written chunk with keys in unusual order, unknown keys, escapes,
 *   a JVM frame, native frames inside and outside a debug image, unsorted
 *   samples: frames, stacks (leaf first), images -> mappings (build id from
 *   the debug id), frame -> image links, threads and names, exact
 *   nanosecond timestamps, sort order, stats and the identity realtime map.
 * - Round trips: Perfetto -> Sample v2 -> parse (auto-detected) -> Sample
 *   v2 gives the same bytes, for a built trace with awkward strings and
 *   nanosecond timestamps, the demo trace and every Relay fixture.
 * - Errors: MalformedSamples / MalformedStacks with the offset of the
 *   offending element, wrong types, versions, duplicates, limits, every
 *   truncated prefix and single-byte corruptions (no crash, offset in range).
 * - The CLI reads a chunk end to end.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profile/aggregate.h" /* tm_frame_labels */
#include "profile/trace.h"     /* tm_trace internals */
#include "trace_builder.h"
#include "tutil.h"

/* ---- helpers ---- */

static void check_round_trip(const tu_membuf *a, const char *what);

static tm_trace *parse_ok(const char *json, size_t len, const tm_options *opts) {
    tm_trace *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_trace_parse(json, len, opts, &t, &err);
    cr_assert_eq(st, TM_OK, "%s at byte %llu: %s", tm_status_str(st), (unsigned long long)err.offset, err.message);
    return t;
}

static tm_status parse_err(const char *json, size_t len, const tm_options *opts, tm_error *err) {
    tm_trace *t = NULL;
    memset(err, 0, sizeof *err);
    tm_options o = {0};
    if (opts) o = *opts;
    o.input = TM_INPUT_SAMPLE_V2;
    tm_status st = tm_trace_parse(json, len, &o, &t, err);
    cr_assert_null(t);
    return st;
}

static tu_membuf write_v2(const tm_trace *t) {
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    tm_status st = tm_write_sample_v2(t, NULL, &sink, &err);
    cr_assert_eq(st, TM_OK, "%s: %s", tm_status_str(st), err.message);
    return out;
}

static int str_is(tm_str s, const char *want) { return s.len == strlen(want) && memcmp(s.data, want, s.len) == 0; }

static size_t offset_of(const char *doc, const char *needle) {
    const char *p = strstr(doc, needle);
    cr_assert_not_null(p, "test input lacks %s", needle);
    return (size_t)(p - doc);
}

/* ---- a hand-written chunk ---- */

/* Keys out of Relay's order; unknown keys at every level; an SDK proguard
 * image before the native one; samples unsorted, one tie. */
static const char CHUNK[] =
    "{\"environment\":\"prod\",\"profile\":{"
    "\"thread_metadata\":{\"7\":{\"name\":\"worker \\u00e9\"},\"1\":{\"name\":\"main\",\"priority\":31},"
    "\"99\":{\"name\":\"idle\"}},"
    "\"samples\":["
    "{\"stack_id\":1,\"thread_id\":\"7\",\"timestamp\":1700000000.5},"
    "{\"timestamp\":1700000000.25,\"stack_id\":0,\"thread_id\":\"1\",\"extra\":[1,{\"x\":null}]},"
    "{\"thread_id\":\"7\",\"timestamp\":1.7000000005e9,\"stack_id\":2},"
    "{\"timestamp\":1700000000.000000001,\"stack_id\":3,\"thread_id\":\"1\"}],"
    "\"stacks\":[[0,1],[2,1,3],[],[4]],"
    "\"frames\":["
    "{\"function\":\"leaf\",\"instruction_addr\":\"0x7000001234\",\"platform\":\"native\",\"lineno\":12},"
    "{\"function\":\"ma\\\"in\",\"package\":\"/system/lib64/libc.so\",\"instruction_addr\":\"0x10\","
    "\"platform\":\"native\"},"
    "{\"function\":\"draw\",\"module\":\"android.view.View\",\"platform\":\"java\",\"in_app\":false},"
    "{\"instruction_addr\":\"0x7000100000\",\"platform\":\"native\"},"
    "{\"instruction_addr\":\"0x7000000abc\",\"function\":null}],"
    "\"unknown\":{\"deep\":[[[]]]}},"
    "\"platform\":\"android\",\"version\":\"2\","
    "\"debug_meta\":{\"images\":[{\"type\":\"proguard\",\"uuid\":\"b4e2d3c9-0000-0000-0000-000000000000\"},"
    "{\"code_file\":\"/data/lib/libgame.so\",\"debug_id\":\"7f4a3eb0-885e-8d4c-a04b-05fa32cc4cbd\","
    "\"type\":\"symbolic\",\"image_addr\":\"0x7000000000\",\"image_size\":1048576}]},"
    "\"chunk_id\":\"x\"}";

#define T0 1700000000000000000ll

Test(sample_v2_input, hand_written_chunk) {
    cr_assert_eq(tm_input_detect(CHUNK, sizeof CHUNK - 1), TM_INPUT_SAMPLE_V2);
    tm_trace *t = parse_ok(CHUNK, sizeof CHUNK - 1, NULL);
    const tm_profile *p = tm_trace_profile(t);

    /* Frames in JSON order. */
    cr_assert_eq(p->n_frames, 5);
    const tm_prof_frame *f = p->frames;
    cr_assert(str_is(f[0].function, "leaf"));
    cr_assert_eq(f[0].flags, TM_FRAME_HAS_FUNCTION | TM_FRAME_HAS_ADDR | TM_FRAME_HAS_LINE);
    cr_assert_eq(f[0].line, 12);
    cr_assert_eq(f[0].addr, 0x7000001234ull);
    cr_assert_eq(f[0].mapping, 1, "inside libgame.so");
    cr_assert_eq(f[0].rel_pc, 0x1234);
    cr_assert(str_is(f[1].function, "ma\"in"), "escapes decoded");
    cr_assert(str_is(f[1].package, "/system/lib64/libc.so"));
    cr_assert_eq(f[1].flags, TM_FRAME_HAS_FUNCTION | TM_FRAME_HAS_ADDR | TM_FRAME_HAS_PACKAGE);
    cr_assert_eq(f[1].mapping, 0, "0x10 is in no image");
    cr_assert_eq(f[2].flags, TM_FRAME_HAS_FUNCTION | TM_FRAME_HAS_MODULE | TM_FRAME_JAVA);
    cr_assert(str_is(f[2].module, "android.view.View"));
    cr_assert(str_is(f[2].function, "draw"));
    cr_assert_eq(f[3].flags, TM_FRAME_HAS_ADDR);
    cr_assert_eq(f[3].mapping, 0, "the image's end is outside it");
    cr_assert_eq(f[4].flags, TM_FRAME_HAS_ADDR, "null function is no function; an address is native");
    cr_assert_eq(f[4].mapping, 1);
    cr_assert_eq(f[4].rel_pc, 0xabc);

    /* Stacks leaf first, as in the JSON. */
    cr_assert_eq(p->n_stacks, 4);
    static const uint32_t want_stacks[4][3] = {{0, 1}, {2, 1, 3}, {0}, {4}};
    static const uint32_t want_len[4] = {2, 3, 0, 1};
    for (size_t s = 0; s < 4; s++) {
        cr_assert_eq(p->stacks[s].len, want_len[s], "stack %zu", s);
        for (uint32_t k = 0; k < want_len[s]; k++)
            cr_assert_eq(p->frame_ids[p->stacks[s].off + k], want_stacks[s][k], "stack %zu frame %u", s, k);
    }

    /* The native image; the proguard one has no file and locates nothing. */
    cr_assert_eq(p->n_mappings, 1);
    const tm_prof_mapping *m = &p->mappings[0];
    cr_assert(str_is(m->path, "/data/lib/libgame.so"));
    cr_assert_eq(m->start, 0x7000000000ull);
    cr_assert_eq(m->end, 0x7000100000ull);
    static const uint8_t want_id[16] = {0xb0, 0x3e, 0x4a, 0x7f, 0x5e, 0x88, 0x4c, 0x8d,
                                        0xa0, 0x4b, 0x05, 0xfa, 0x32, 0xcc, 0x4c, 0xbd};
    cr_assert_eq(m->build_id.len, 16);
    cr_assert_eq(memcmp(m->build_id.data, want_id, 16), 0, "debug id back to ELF build id byte order");

    /* Threads from the samples (first seen: 7, then 1); 99 has no samples. */
    cr_assert_eq(tm_trace_thread_count(t), 2);
    tm_thread_info ti;
    cr_assert_eq(tm_trace_thread(t, 0, &ti), TM_OK);
    cr_assert_eq(ti.tid, 7);
    cr_assert_eq(ti.name_len, strlen("worker \xc3\xa9"));
    cr_assert_eq(memcmp(ti.name, "worker \xc3\xa9", ti.name_len), 0);
    cr_assert_eq(ti.samples, 2);
    cr_assert_eq(tm_trace_thread(t, 1, &ti), TM_OK);
    cr_assert_eq(ti.tid, 1);
    cr_assert_eq(ti.name_len, 4);
    cr_assert_eq(memcmp(ti.name, "main", 4), 0);

    /* Samples sorted by exact ns; the tie keeps input order. */
    cr_assert_eq(p->n_samples, 4);
    static const struct {
        int64_t ts;
        uint32_t stack, thread;
    } want[4] = {{T0 + 1, 3, 1}, {T0 + 250000000, 0, 1}, {T0 + 500000000, 1, 0}, {T0 + 500000000, 2, 0}};
    for (size_t i = 0; i < 4; i++) {
        cr_assert_eq(p->samples[i].ts, want[i].ts, "sample %zu ts %lld", i, (long long)p->samples[i].ts);
        cr_assert_eq(p->samples[i].stack, want[i].stack, "sample %zu stack", i);
        cr_assert_eq(p->samples[i].thread, want[i].thread, "sample %zu thread", i);
    }
    int64_t unix_ns = 0;
    cr_assert(tm_profile_realtime(p, T0 + 5, &unix_ns));
    cr_assert_eq(unix_ns, T0 + 5, "timestamps are Unix time already");

    const tm_trace_stats *st = tm_trace_get_stats(t);
    cr_assert_eq(st->samples_kept, 4);
    cr_assert_eq(st->threads, 2);
    cr_assert_eq(st->frames, 5);
    cr_assert_eq(st->stacks, 4);
    cr_assert_eq(st->mappings, 1);
    cr_assert_eq(st->first_sample_ns, T0 + 1);
    cr_assert_eq(st->last_sample_ns, T0 + 500000000);
    cr_assert_eq(st->has_realtime, 1);
    cr_assert_eq(st->threads_without_name, 0);
    cr_assert_eq(st->bytes, sizeof CHUNK - 1);

    /* Exporters name frames from it: Java Class.method, "0xREL (lib)". */
    tm_frame_labels labels;
    cr_assert_eq(tm_frame_labels_build(p, true, &labels), TM_OK);
    cr_assert(str_is(labels.of[2], "android.view.View.draw"));
    cr_assert(str_is(labels.of[3], "0x7000100000"), "%.*s", TM_STR_ARGS(labels.of[3]));
    cr_assert(str_is(labels.of[4], "0xabc (libgame.so)"), "%.*s", TM_STR_ARGS(labels.of[4]));
    tm_frame_labels_release(p, &labels);
    tm_trace_free(t);
}

/* JavaScript and Python frames: their source (filename, else abs_path;
 * lineno) is kept, so flame graphs tell apart what has the same name, and
 * a function without a name is labelled "(anonymous)". Both were dropped:
 * a JavaScript profile's anonymous functions all became one empty label. */
static const char JS_CHUNK[] =
    "{\"version\":\"2\",\"platform\":\"javascript\",\"profile\":{"
    "\"frames\":[{\"function\":\"main\",\"abs_path\":\"https://a.example/app.js\",\"lineno\":3},"
    "{\"function\":\"\",\"abs_path\":\"https://a.example/app.js\",\"filename\":\"app.js\",\"lineno\":10},"
    "{\"abs_path\":\"https://a.example/lib.js\",\"lineno\":20,\"colno\":2},"
    "{\"function\":\"run\",\"module\":\"jobs\",\"file\":\"jobs.py\",\"line\":7}],"
    "\"stacks\":[[1,0],[2,0],[3]],"
    "\"samples\":[{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1},"
    "{\"stack_id\":1,\"thread_id\":\"1\",\"timestamp\":2},{\"stack_id\":2,\"thread_id\":\"1\",\"timestamp\":3}]}}";

Test(sample_v2_input, sources_and_anonymous_functions) {
    tm_trace *t = parse_ok(JS_CHUNK, sizeof JS_CHUNK - 1, NULL);
    const tm_profile *p = tm_trace_profile(t);
    cr_assert_eq(p->n_frames, 4);
    const tm_prof_frame *f = p->frames;
    cr_assert(str_is(f[0].file, "https://a.example/app.js") && f[0].line == 3, "abs_path when no filename");
    cr_assert(str_is(f[1].file, "app.js") && f[1].line == 10, "filename first");
    cr_assert_eq(f[2].flags, TM_FRAME_HAS_FILE | TM_FRAME_HAS_LINE);
    cr_assert(str_is(f[3].file, "jobs.py") && f[3].line == 7, "Relay's older keys");
    tm_frame_labels labels;
    cr_assert_eq(tm_frame_labels_build(p, true, &labels), TM_OK);
    static const char *const want[4] = {"main (https://a.example/app.js:3)", "(anonymous) (app.js:10)",
                                        "(anonymous) (https://a.example/lib.js:20)", "run (jobs.py:7)"};
    for (int i = 0; i < 4; i++)
        cr_assert(str_is(labels.of[i], want[i]), "frame %d: %.*s", i, TM_STR_ARGS(labels.of[i]));
    tm_frame_labels_release(p, &labels);
    cr_assert_eq(tm_frame_labels_build(p, false, &labels), TM_OK);
    cr_assert(str_is(labels.of[0], "main") && str_is(labels.of[2], "(anonymous)"), "without source lines");
    tm_frame_labels_release(p, &labels);
    /* written back and read again: the same sources */
    tu_membuf out = write_v2(t);
    tm_trace *again = parse_ok(out.data, out.len, NULL);
    const tm_profile *q = tm_trace_profile(again);
    cr_assert_eq(q->n_frames, 4);
    for (size_t i = 0; i < 4; i++) {
        const tm_prof_frame *g = &q->frames[i];
        tm_str want_file = p->frames[i].file;
        cr_assert(g->file.len == want_file.len && memcmp(g->file.data, want_file.data, g->file.len) == 0 &&
                      g->line == p->frames[i].line,
                  "frame %zu: %.*s:%u", i, TM_STR_ARGS(g->file), g->line);
    }
    tm_trace_free(again);
    tu_membuf_free(&out);
    tm_trace_free(t);
}

Test(sample_v2_input, written_back) {
    tm_trace *t = parse_ok(CHUNK, sizeof CHUNK - 1, NULL);
    tu_membuf out = write_v2(t);
    json_error_t je;
    json_t *root = json_loadb(out.data, out.len, 0, &je);
    cr_assert_not_null(root, "%s", je.text);
    json_t *img = json_array_get(json_object_get(json_object_get(root, "debug_meta"), "images"), 0);
    cr_assert_str_eq(json_string_value(json_object_get(img, "debug_id")), "7f4a3eb0-885e-8d4c-a04b-05fa32cc4cbd");
    cr_assert_str_eq(json_string_value(json_object_get(img, "code_file")), "/data/lib/libgame.so");
    cr_assert_eq(json_integer_value(json_object_get(img, "image_size")), 1048576);
    cr_assert_str_eq(json_string_value(json_object_get(root, "platform")), "android");
    json_t *samples = json_object_get(json_object_get(root, "profile"), "samples");
    cr_assert_eq(json_array_size(samples), 4);
    cr_assert(strstr(out.data, "{\"timestamp\":1700000000.000000001,\"stack_id\":3,\"thread_id\":\"1\"}"), "%s",
              out.data);
    json_t *tm = json_object_get(json_object_get(root, "profile"), "thread_metadata");
    cr_assert_str_eq(json_string_value(json_object_get(json_object_get(tm, "7"), "name")), "worker \xc3\xa9");
    cr_assert_null(json_object_get(tm, "99"), "threads without samples are not written");
    json_decref(root);
    tu_membuf_free(&out);
    tm_trace_free(t);
}

/* measurements.memory_footprint is the profile's memory readings, read
 * back: written again the same, times exact to the ns; other measurements
 * are not the profile's. */
Test(sample_v2_input, memory_footprint_read_back) {
    static const char chunk[] =
        "{\"measurements\":{\"cpu\":{\"unit\":\"percent\",\"values\":[{\"timestamp\":1.5,\"value\":3}]},"
        "\"memory_footprint\":{\"unit\":\"byte\",\"values\":[{\"timestamp\":1700000000.158022976,\"value\":3055616},"
        "{\"value\":4096,\"timestamp\":1700000001}]}},"
        "\"profile\":{\"samples\":[{\"stack_id\":0,\"thread_id\":\"1\",\"timestamp\":1700000000.5}],"
        "\"stacks\":[[0]],\"frames\":[{\"function\":\"f\"}],\"thread_metadata\":{}},"
        "\"platform\":\"python\",\"version\":\"2\"}";
    tm_trace *t = parse_ok(chunk, sizeof chunk - 1, NULL);
    tu_membuf out = write_v2(t);
    cr_expect(strstr(out.data, "\"measurements\":{\"memory_footprint\":{\"unit\":\"byte\",\"values\":["
                               "{\"timestamp\":1700000000.158022976,\"value\":3055616},"
                               "{\"timestamp\":1700000001.0,\"value\":4096}]}}"),
              "%s", out.data);
    check_round_trip(&out, "memory_footprint");
    tu_membuf_free(&out);
    tm_trace_free(t);
    tm_error err;
    static const char bad[] = "{\"measurements\":{\"memory_footprint\":{\"values\":[{\"timestamp\":1}]}},"
                              "\"profile\":{\"samples\":[],\"stacks\":[],\"frames\":[]},\"version\":\"2\"}";
    cr_expect_eq(parse_err(bad, sizeof bad - 1, NULL, &err), TM_ERR_MALFORMED);
    cr_expect(strstr(err.message, "memory_footprint.values[0] has no value"), "%s", err.message);
}

Test(sample_v2_input, any_key_order_and_blanks) {
    /* Frames after stacks after samples, platform last, blanks around
     * everything: the same profile as the compact form. */
    const char *a = "{\"version\":\"2\",\"platform\":\"java\",\"profile\":{\"frames\":[{\"function\":\"run\","
                    "\"module\":\"a.B\"}],\"stacks\":[[0]],\"samples\":[{\"timestamp\":5,\"stack_id\":0,"
                    "\"thread_id\":\"3\"}]}}";
    const char *b = " \n{ \"profile\" : { \"samples\" : [ { \"thread_id\" : \"3\" , \"stack_id\" : 0 , "
                    "\"timestamp\" : 5.000 } ] , \"stacks\" : [ [ 0 ] ] , \"frames\" : [ { \"module\" : \"a.B\" , "
                    "\"function\" : \"run\" } ] } , \"platform\" : \"java\" }\r\n";
    tm_trace *ta = parse_ok(a, strlen(a), NULL), *tb = parse_ok(b, strlen(b), NULL);
    const tm_profile *pa = tm_trace_profile(ta), *pb = tm_trace_profile(tb);
    cr_assert_eq(pa->n_frames, 1);
    cr_assert_eq(pb->n_frames, 1);
    cr_assert_eq(pa->frames[0].flags, TM_FRAME_HAS_FUNCTION | TM_FRAME_HAS_MODULE | TM_FRAME_JAVA,
                 "no platform, no address, java chunk: a JVM frame");
    cr_assert_eq(pb->frames[0].flags, pa->frames[0].flags, "platform after the frames still applies");
    cr_assert_eq(pb->samples[0].ts, 5000000000ll);
    cr_assert_eq(pa->samples[0].ts, 5000000000ll);
    cr_assert_eq(pb->threads[0].tid, 3);
    tm_trace_free(ta);
    tm_trace_free(tb);
}

Test(sample_v2_input, build_id_prefers_code_id) {
    const char *doc = "{\"debug_meta\":{\"images\":[{\"code_file\":\"libx.so\",\"code_id\":\"b03e4a7f5e884c8da04b05fa"
                      "32cc4cbd69faff51\",\"debug_id\":\"00000000-0000-0000-0000-000000000000\",\"image_addr\":"
                      "\"0x1000\",\"image_vmaddr\":\"0x0\",\"image_size\":4096}]},\"profile\":{\"samples\":[],"
                      "\"stacks\":[],\"frames\":[]}}";
    tm_trace *t = parse_ok(doc, strlen(doc), NULL);
    const tm_profile *p = tm_trace_profile(t);
    cr_assert_eq(p->n_mappings, 1);
    static const uint8_t want[20] = {0xb0, 0x3e, 0x4a, 0x7f, 0x5e, 0x88, 0x4c, 0x8d, 0xa0, 0x4b,
                                     0x05, 0xfa, 0x32, 0xcc, 0x4c, 0xbd, 0x69, 0xfa, 0xff, 0x51};
    cr_assert_eq(p->mappings[0].build_id.len, 20);
    cr_assert_eq(memcmp(p->mappings[0].build_id.data, want, 20), 0);
    cr_assert_eq(p->mappings[0].flags, TM_MAPPING_HAS_LOAD_BIAS);
    cr_assert_eq(p->mappings[0].end, 0x2000);
    cr_assert_eq(p->n_samples, 0);
    tm_trace_free(t);
}

/* An image's frame has the ELF address Sentry's symbolicator computes,
 * instruction_addr - image_addr + image_vmaddr (as Perfetto's rel_pc), so
 * that symbols are looked up and frames named like the trace the chunk was
 * written from: a non-PIE binary loaded at its preferred 0x400000. */
Test(sample_v2_input, rel_pc_is_the_elf_address_with_image_vmaddr) {
    const char *doc = "{\"debug_meta\":{\"images\":[{\"code_file\":\"prog\",\"debug_id\":\"b03e4a7f-5e88-4c8d-a04b-"
                      "05fa32cc4cbd\",\"image_addr\":\"0x400000\",\"image_vmaddr\":\"0x400000\",\"image_size\":"
                      "536576}]},\"profile\":{\"samples\":[],\"stacks\":[],\"frames\":[{\"instruction_addr\":"
                      "\"0x45ce80\",\"platform\":\"native\"}]}}";
    tm_trace *t = parse_ok(doc, strlen(doc), NULL);
    const tm_profile *p = tm_trace_profile(t);
    cr_assert_eq(p->n_frames, 1);
    cr_assert_eq(p->frames[0].mapping, 1);
    cr_assert_eq(p->frames[0].addr, 0x45ce80);
    cr_assert_eq(p->frames[0].rel_pc, 0x45ce80, "rel_pc 0x%llx", (unsigned long long)p->frames[0].rel_pc);
    tm_trace_free(t);
}

/* ---- round trips ---- */

/* parse(json) -> write must give json back; the parse auto-detects. */
static void check_round_trip(const tu_membuf *a, const char *what) {
    cr_assert_eq(tm_input_detect(a->data, a->len), TM_INPUT_SAMPLE_V2);
    tm_trace *t = parse_ok(a->data, a->len, NULL);
    cr_assert_eq(t->input, TM_INPUT_SAMPLE_V2);
    tu_membuf b = write_v2(t);
    if (a->len != b.len || memcmp(a->data, b.data, a->len) != 0) {
        size_t i = 0;
        while (i < a->len && i < b.len && a->data[i] == b.data[i]) i++;
        cr_assert_fail("%s: round trip differs at byte %zu of %zu/%zu:\n  %.80s\n  %.80s", what, i, a->len, b.len,
                       a->data + (i > 20 ? i - 20 : 0), b.data + (i > 20 ? i - 20 : 0));
    }
    tu_membuf_free(&b);
    tm_trace_free(t);
}

static tu_membuf perfetto_to_v2(const void *buf, size_t len) {
    tm_trace *t = parse_ok(buf, len, NULL);
    cr_assert_eq(t->input, TM_INPUT_PERFETTO);
    tu_membuf a = write_v2(t);
    tm_trace_free(t);
    return a;
}

static const char ODD_NAME[] = "q\"b\\s\n\x01\xff\xc0\xafz\xe2\x82\xac";

static void build_trace(tb_buf *t) {
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[2] = {1000000000ull, 1700000001000000000ull};
    tb_clock_snapshot(t, 0, ids, vals, 2);
    size_t pkt = tb_packet_open(t, 2, 1, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(t, 42, 42, "app");
    tb_pt_thread(t, 43, 42, "worker \"1\"\t\xce\xbb");
    tb_close(t, pt);
    tb_close(t, pkt);
    pkt = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, ODD_NAME, sizeof ODD_NAME - 1);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "com.example.Foo.bar", 19);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 10, "libexample.so", 13);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 11, "base.odex", 9);
    static const uint8_t short_id[4] = {0xaa, 0xbb, 0xcc, 0xdd};
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 20, short_id, sizeof short_id);
    const uint64_t lib_path[1] = {10}, odex_path[1] = {11};
    tb_mapping(t, 1, 20, 0x70000000, 0x70010000, lib_path, 1);
    tb_mapping(t, 2, 0, 0x1000, 0x2000, odex_path, 1);
    tb_frame(t, 1, 1, 1, 0x200);
    tb_frame(t, 2, 2, 0, 0x2000);
    tb_frame(t, 3, 3, 2, 0x100);
    tb_frame(t, 4, 0, 1, 0x300); /* no function: an address in libexample.so */
    const uint64_t cs1[3] = {1, 3, 2}, cs2[2] = {1, 4};
    tb_callstack(t, 1, cs1, 3, 0);
    tb_callstack(t, 2, cs2, 2, 1);
    tb_callstack(t, 3, NULL, 0, 0);
    tb_close(t, in);
    tb_close(t, pkt);
    /* Nanosecond timestamps, out of order, two threads, ties. */
    static const uint64_t offs[] = {7, 1000000001, 3, 999999999, 1000000001, 5000000123, 0, 42};
    for (size_t i = 0; i < sizeof offs / sizeof *offs; i++)
        tb_perf_sample(t, 1, 1000000000ull + offs[i], 42, i % 3 ? 43 : 42, 1 + i % 3, 0);
}

Test(sample_v2_input, round_trip_built_trace) {
    tb_buf t = {0};
    build_trace(&t);
    tu_membuf a = perfetto_to_v2(t.data, t.len);
    cr_assert(strstr(a.data, "\"timestamp\":1700000001.000000003,"), "ns timestamps survive: %s", a.data);
    check_round_trip(&a, "built trace");
    tu_membuf_free(&a);
    tb_free(&t);
}

Test(sample_v2_input, round_trip_demo) {
    size_t len;
    char *buf = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert_not_null(buf);
    tu_membuf a = perfetto_to_v2(buf, len);
    check_round_trip(&a, "demo.pftrace");
    tu_membuf_free(&a);
    free(buf);
}

/* Every fixture that converts in default mode (some are empty or invalid
 * on purpose) must round-trip. */
Test(sample_v2_input, round_trip_relay_fixtures) {
    struct dirent **ents = NULL;
    int n = scandir(TM_FIXTURES "/relay-compat", &ents, NULL, alphasort);
    cr_assert_gt(n, 0, "no fixtures");
    size_t traces = 0, done = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ents[i]->d_name;
        size_t l = strlen(name);
        if (l > 8 && strcmp(name + l - 8, ".pftrace") == 0) {
            traces++;
            char path[512];
            snprintf(path, sizeof path, "%s/relay-compat/%s", TM_FIXTURES, name);
            size_t len;
            char *buf = tu_read_file(path, &len);
            cr_assert_not_null(buf, "cannot read %s", path);
            tm_trace *t = NULL;
            tm_error err;
            if (tm_trace_parse(buf, len, NULL, &t, &err) == TM_OK) {
                tu_membuf a = {0};
                tm_sink sink = {.write = tu_membuf_write, .ctx = &a};
                if (tm_write_sample_v2(t, NULL, &sink, &err) == TM_OK) {
                    check_round_trip(&a, name);
                    done++;
                }
                tu_membuf_free(&a);
                tm_trace_free(t);
            }
            free(buf);
        }
        free(ents[i]);
    }
    free(ents);
    cr_assert_geq(traces, 10, "fixtures missing");
    cr_assert_geq(done, traces - 4, "only %zu of %zu fixtures converted", done, traces);
}

/* ---- errors ---- */

Test(sample_v2_input, missing_stack_is_malformed_samples) {
    const char *doc = "{\"profile\":{\"samples\":[{\"timestamp\":1,\"stack_id\":0,\"thread_id\":\"1\"},"
                      "{\"timestamp\":2,\"stack_id\":1,\"thread_id\":\"1\"}],\"stacks\":[[]],\"frames\":[]}}";
    tm_error err;
    cr_assert_eq(parse_err(doc, strlen(doc), NULL, &err), TM_ERR_MALFORMED);
    cr_assert_str_eq(err.reason, "MalformedSamples");
    cr_assert_eq(err.offset, offset_of(doc, "{\"timestamp\":2"), "offset %llu", (unsigned long long)err.offset);
    cr_assert(strstr(err.message, "samples[1]"), "%s", err.message);
}

Test(sample_v2_input, missing_frame_is_malformed_stacks) {
    const char *doc = "{\"profile\":{\"samples\":[],\"stacks\":[[0],[0,3]],\"frames\":[{\"function\":\"f\"}]}}";
    tm_error err;
    cr_assert_eq(parse_err(doc, strlen(doc), NULL, &err), TM_ERR_MALFORMED);
    cr_assert_str_eq(err.reason, "MalformedStacks");
    cr_assert_eq(err.offset, offset_of(doc, "[0,3]"));
    cr_assert(strstr(err.message, "stacks[1]"), "%s", err.message);
}

Test(sample_v2_input, rejected_documents) {
    static const struct {
        const char *doc;
        tm_status code;
        const char *at;   /* the offset is where this text starts; NULL: 0 */
        const char *what; /* in the message */
    } cases[] = {
        {"[1]", TM_ERR_MALFORMED, NULL, "JSON object"},
        {"{\"version\":\"2\"}", TM_ERR_MALFORMED, NULL, "profile"},
        {"{\"version\":\"1\",\"profile\":{}}", TM_ERR_UNSUPPORTED, "\"1\"", "version"},
        {"{\"version\":2,\"profile\":{}}", TM_ERR_MALFORMED, "2,", "version"},
        {"{\"profile\":{},\"profile\":{}}", TM_ERR_MALFORMED, "\"profile\":{}}", "duplicate"},
        {"{\"profile\":{\"samples\":[],\"samples\":[]}}", TM_ERR_MALFORMED, "\"samples\":[]}", "duplicate"},
        {"{\"profile\":[]}", TM_ERR_MALFORMED, "[]", "profile"},
        {"{\"profile\":{\"samples\":{}}}", TM_ERR_MALFORMED, "{}}}", "samples"},
        {"{\"profile\":{\"samples\":[{\"timestamp\":1,\"stack_id\":0,\"thread_id\":\"x1\"}]}}", TM_ERR_MALFORMED,
         "\"x1\"", "thread_id"},
        {"{\"profile\":{\"samples\":[{\"timestamp\":\"1\",\"stack_id\":0,\"thread_id\":\"1\"}]}}", TM_ERR_MALFORMED,
         "\"1\",", "timestamp"},
        {"{\"profile\":{\"samples\":[{\"timestamp\":1e300,\"stack_id\":0,\"thread_id\":\"1\"}]}}", TM_ERR_MALFORMED,
         "1e300", "timestamp"},
        {"{\"profile\":{\"samples\":[{\"stack_id\":0,\"thread_id\":\"1\"}]}}", TM_ERR_MALFORMED, "{\"stack_id\"",
         "timestamp"},
        {"{\"profile\":{\"samples\":[{\"timestamp\":1,\"stack_id\":-1,\"thread_id\":\"1\"}]}}", TM_ERR_MALFORMED,
         "-1", "stack_id"},
        {"{\"profile\":{\"stacks\":[[0.5]]}}", TM_ERR_MALFORMED, "0.5", "stacks"},
        {"{\"profile\":{\"frames\":[{\"function\":7}]}}", TM_ERR_MALFORMED, "7}", "function"},
        {"{\"profile\":{\"frames\":[{\"lineno\":4294967296}]}}", TM_ERR_MALFORMED, "4294967296", "lineno"},
        {"{\"profile\":{\"frames\":[{\"lineno\":\"3\"}]}}", TM_ERR_MALFORMED, "\"3\"", "lineno"},
        {"{\"profile\":{\"frames\":[{\"filename\":[]}]}}", TM_ERR_MALFORMED, "[]", "filename"},
        {"{\"profile\":{\"frames\":[{\"instruction_addr\":\"12ab\"}]}}", TM_ERR_MALFORMED, "\"12ab\"",
         "instruction_addr"},
        {"{\"profile\":{\"frames\":[{\"instruction_addr\":\"0x10000000000000000\"}]}}", TM_ERR_MALFORMED,
         "\"0x1", "instruction_addr"},
        {"{\"profile\":{\"thread_metadata\":{\"main\":{}}}}", TM_ERR_MALFORMED, "\"main\"", "thread_metadata"},
        {"{\"debug_meta\":{\"images\":[{\"code_file\":\"a\",\"image_addr\":\"0xffffffffffffffff\",\"image_size\":2}]},"
         "\"profile\":{}}", TM_ERR_MALFORMED, "{\"code_file\"", "overflows"},
        {"{\"profile\":{}} {}", TM_ERR_MALFORMED, " {}", "after"},
        {"{\"profile\":{\"samples\":[}}", TM_ERR_MALFORMED, "}}", "value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tm_error err;
        tm_status st = parse_err(cases[i].doc, strlen(cases[i].doc), NULL, &err);
        cr_assert_eq(st, cases[i].code, "case %zu (%s): %s, want %s (%s)", i, cases[i].doc, tm_status_str(st),
                     tm_status_str(cases[i].code), err.message);
        size_t at = cases[i].at ? offset_of(cases[i].doc, cases[i].at) : 0;
        if (cases[i].at && strcmp(cases[i].at, " {}") == 0) at++; /* the second '{', past the blank */
        cr_assert_eq(err.offset, at, "case %zu (%s): offset %llu, want %zu (%s)", i, cases[i].doc,
                     (unsigned long long)err.offset, at, err.message);
        cr_assert(strstr(err.message, cases[i].what), "case %zu: message \"%s\" lacks \"%s\"", i, err.message,
                  cases[i].what);
    }
}

Test(sample_v2_input, limits) {
    const char *doc = "{\"profile\":{\"samples\":[{\"timestamp\":1,\"stack_id\":0,\"thread_id\":\"1\"},"
                      "{\"timestamp\":2,\"stack_id\":0,\"thread_id\":\"1\"},"
                      "{\"timestamp\":3,\"stack_id\":0,\"thread_id\":\"1\"}],"
                      "\"stacks\":[[0,1,2]],\"frames\":[{\"function\":\"a\"},{\"function\":\"b\"},{\"function\":\"c\"}]}}";
    tm_error err;
    tm_options o = {0};
    o.limits.max_samples = 2;
    cr_assert_eq(parse_err(doc, strlen(doc), &o, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "max_samples"), "%s", err.message);
    cr_assert_eq(err.offset, offset_of(doc, "{\"timestamp\":3"));
    o.limits.max_samples = 3;
    tm_trace *t = parse_ok(doc, strlen(doc), &o);
    tm_trace_free(t);

    memset(&o, 0, sizeof o);
    o.limits.max_stack_depth = 2;
    cr_assert_eq(parse_err(doc, strlen(doc), &o, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "max_stack_depth"), "%s", err.message);
    cr_assert_eq(err.offset, offset_of(doc, "[0,1,2]"));

    memset(&o, 0, sizeof o);
    o.limits.max_unique_frames = 2;
    cr_assert_eq(parse_err(doc, strlen(doc), &o, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "max_unique_frames"), "%s", err.message);
    cr_assert_eq(err.offset, offset_of(doc, "{\"function\":\"c\""));
}

Test(sample_v2_input, truncated_prefixes_fail_cleanly) {
    size_t n = sizeof CHUNK - 1;
    for (size_t len = 0; len < n; len++) {
        char *prefix = malloc(len ? len : 1); /* exact size: reads past it would be caught by ASan */
        memcpy(prefix, CHUNK, len);
        tm_error err;
        tm_status st = parse_err(prefix, len, NULL, &err);
        cr_assert(st == TM_ERR_TRUNCATED || st == TM_ERR_MALFORMED || (st == TM_ERR_EMPTY && len == 0),
                  "prefix %zu: %s (%s)", len, tm_status_str(st), err.message);
        cr_assert_leq(err.offset, len, "prefix %zu: offset %llu", len, (unsigned long long)err.offset);
        free(prefix);
    }
}

Test(sample_v2_input, corrupted_bytes_never_crash) {
    static const char subst[] = {'"', '{', ']', '\\', 0x01, '9', ',', (char)0xff};
    size_t n = sizeof CHUNK - 1;
    char *doc = malloc(n);
    for (size_t i = 0; i < n; i++) {
        for (size_t k = 0; k < sizeof subst; k++) {
            memcpy(doc, CHUNK, n);
            if (doc[i] == subst[k]) continue;
            doc[i] = subst[k];
            tm_trace *t = NULL;
            tm_error err;
            tm_options o = {0};
            o.input = TM_INPUT_SAMPLE_V2;
            tm_status st = tm_trace_parse(doc, n, &o, &t, &err);
            if (st == TM_OK) {
                cr_assert_not_null(t);
                tm_trace_free(t);
            } else {
                cr_assert_null(t);
                cr_assert_leq(err.offset, n, "byte %zu -> %d: offset %llu", i, subst[k], (unsigned long long)err.offset);
            }
        }
    }
    free(doc);
}

/* ---- the CLI ---- */

static int run_cli(const char *args, char **out, size_t *out_len) {
    char out_path[] = "/tmp/tm_v2in_out_XXXXXX";
    int fd = mkstemp(out_path);
    cr_assert(fd >= 0);
    close(fd);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s >%s 2>&1", TM_CLI, args, out_path);
    int st = system(cmd);
    *out = tu_read_file(out_path, out_len);
    remove(out_path);
    cr_assert_not_null(*out);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

Test(sample_v2_input, cli_reads_a_chunk) {
    char path[] = "/tmp/tm_v2in_chunk_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, CHUNK, sizeof CHUNK - 1), (ssize_t)(sizeof CHUNK - 1));
    close(fd);
    char args[256], *out;
    size_t len;
    snprintf(args, sizeof args, "convert -f report %s", path);
    cr_assert_eq(run_cli(args, &out, &len), 0, "%s", out);
    json_error_t je;
    json_t *report = json_loadb(out, len, 0, &je);
    cr_assert_not_null(report, "%s: %s", je.text, out);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(report, "samples"), "kept")), 4, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(json_object_get(report, "profile"), "frames")), 5, "%s", out);
    json_decref(report);
    free(out);

    snprintf(args, sizeof args, "convert -f folded %s", path);
    cr_assert_eq(run_cli(args, &out, &len), 0, "%s", out);
    cr_assert(strstr(out, "android.view.View.draw"), "%s", out);
    free(out);

    /* A malformed chunk: exit 1 naming the reason (Relay's name) and the byte. */
    fd = open(path, O_WRONLY | O_TRUNC);
    cr_assert(fd >= 0);
    const char *bad = "{\"profile\":{\"samples\":[{\"timestamp\":1,\"stack_id\":9,\"thread_id\":\"1\"}]}}";
    cr_assert_eq(write(fd, bad, strlen(bad)), (ssize_t)strlen(bad));
    close(fd);
    snprintf(args, sizeof args, "convert %s", path);
    cr_assert_eq(run_cli(args, &out, &len), 1, "%s", out);
    char want[64];
    snprintf(want, sizeof want, "MalformedSamples at byte %zu", offset_of(bad, "{\"timestamp\""));
    cr_assert(strstr(out, want), "%s", out);
    free(out);
    remove(path);
}
