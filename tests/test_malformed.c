/*
 * test_malformed.c — hostile input through the public API (tm_trace_parse),
 * in the default mode and in TM_MODE_RELAY. A server feeds untrusted
 * .pftrace bytes straight into the decoder, so every malformed or oversized
 * input must come back as a clean error: the right tm_status (TRUNCATED when
 * the input ends inside a field, MALFORMED when the bytes are not what the
 * protobuf encoding or the Perfetto schema allows, LIMIT when a tm_limits
 * ceiling is breached), a message, an err.offset at the offending byte, and
 * in Relay mode Relay's reason ("InvalidSampledProfile" for bad input,
 * "ExceedSizeLimit" for limits).
 *
 * It also runs a deterministic random-mutation loop over a valid trace and
 * a failing allocator that fails every allocation in turn, counting live
 * blocks and bytes to prove that nothing leaks and that free/realloc get
 * the right old sizes. The suite runs under ASan/UBSan.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "wire/pb.h" /* tm_pb_varint: to locate packet payloads in built traces */
#include "trace_builder.h"
#include "tracemill.h"
#include "tracemill_sql.h"
#include "tutil.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static const tm_mode modes[] = {TM_MODE_DEFAULT, TM_MODE_RELAY};
static const char *mode_name(tm_mode m) { return m == TM_MODE_RELAY ? "relay" : "default"; }

/* Options with every field zero (the preset's limits, malloc) but the mode. */
/* Strict: a cut-off trace is an error here, so that every cut is one to
 * check; what the default makes of it is tested below. */
static tm_options options_for(tm_mode mode) {
    tm_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.strict = 1;
    return o;
}

/* ---- building blocks ---- */

/* Offset of the first payload byte of the length-delimited field whose tag is at `at`. */
static size_t payload_of(const tb_buf *t, size_t at) {
    const uint8_t *p = t->data + at, *end = t->data + t->len;
    uint64_t tag, len;
    cr_assert_eq(tm_pb_varint(&p, end, &tag), 0);
    cr_assert_eq(tm_pb_varint(&p, end, &len), 0);
    return (size_t)(p - t->data);
}

/* Closes a sub-message opened at mark and returns where pos (recorded while
 * it was open) ends up once the length prefix is inserted. */
static size_t close_at(tb_buf *t, size_t mark, size_t pos) {
    size_t before = t->len;
    tb_close(t, mark);
    return pos >= mark ? pos + (t->len - before) : pos;
}


/* interned_data on seq 1 with SEQ_INCREMENTAL_STATE_CLEARED: three functions,
 * three frames without mapping, callstack 1 = {1, 2}. */
static void interned_packet(tb_buf *t) {
    size_t p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "work", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "leaf", 4);
    for (uint64_t k = 1; k <= 3; k++) tb_frame(t, k, k, 0, 0x100 * k);
    static const uint64_t cs[] = {1, 2};
    tb_callstack(t, 1, cs, 2, 1);
    tb_close(t, i);
    tb_close(t, p);
}

/* A valid trace: clock snapshot, interned data, n perf samples on seq 1. */
static void valid_trace(tb_buf *t, int n) {
    tb_standard_clocks(t, 1);
    interned_packet(t);
    for (int k = 0; k < n; k++)
        tb_perf_sample(t, 1, 2000000000ull + 1000000ull * (uint64_t)k, 100, 100, 1, TB_SEQ_NEEDS);
}

/* Parses an exact-size heap copy (so ASan sees over-reads) and frees the result. */
static tm_status parse_opts(const uint8_t *data, size_t len, const tm_options *o, tm_error *err) {
    uint8_t *copy = malloc(len ? len : 1);
    cr_assert_not_null(copy);
    if (len) memcpy(copy, data, len);
    tm_trace *t = (tm_trace *)(uintptr_t)1; /* must be overwritten either way */
    memset(err, 0, sizeof *err);
    tm_status st = tm_trace_parse(copy, len, o, &t, err);
    if (st != TM_OK) cr_assert_null(t, "a failed parse must leave *out NULL");
    else cr_assert_not_null(t);
    tm_trace_free(t);
    free(copy);
    return st;
}

static tm_status parse_buf(const tb_buf *b, tm_mode mode, const tm_limits *lim, tm_error *err) {
    tm_options o = options_for(mode);
    if (lim) o.limits = *lim;
    return parse_opts(b->data, b->len, &o, err);
}

static int discard(void *ctx, const void *data, size_t len) {
    (void)ctx, (void)data, (void)len;
    return 0;
}

/* The error out-param is optional: without one, tm_trace_parse fails with
 * the same status, and so do the SQL model and the symbolizer (default
 * mode: they have no Relay mode) as they do with one. */
static void expect_same_without_err(const tb_buf *b, tm_mode mode, const tm_limits *lim, tm_status code) {
    tm_options o = options_for(mode);
    if (lim) o.limits = *lim;
    tm_trace *t = NULL;
    cr_assert_eq(tm_trace_parse(b->data, b->len, &o, &t, NULL), code, "[%s] without an error out-param",
                 mode_name(mode));
    cr_assert_null(t);
    if (mode != TM_MODE_DEFAULT) return;
    tm_error err;
    tm_db *db = NULL;
    tm_status with = tm_db_new(b->data, b->len, &o, &db, &err);
    tm_db_free(db);
    db = NULL;
    cr_assert_eq(tm_db_new(b->data, b->len, &o, &db, NULL), with, "tm_db_new without an error out-param");
    tm_db_free(db);
    tm_sink sink = {.write = discard};
    with = tm_symbolize(b->data, b->len, &o, NULL, &sink, NULL, &err);
    cr_assert_eq(tm_symbolize(b->data, b->len, &o, NULL, &sink, NULL, NULL), with,
                 "tm_symbolize without an error out-param");
}

/* Asserts a clean error of code `code` at an offset in [lo, hi], the same
 * without an error out-param. */
static void expect_error_in(const tb_buf *b, tm_mode mode, const tm_limits *lim, tm_status code, uint64_t lo,
                            uint64_t hi) {
    tm_error err;
    tm_status st = parse_buf(b, mode, lim, &err);
    cr_assert_eq(st, code, "[%s] status %s, want %s (%s)", mode_name(mode), tm_status_str(st),
                 tm_status_str(code), err.message);
    cr_assert_eq(err.code, code, "[%s] err.code must match the return value", mode_name(mode));
    cr_assert_gt(strlen(err.message), 0, "[%s] empty error message", mode_name(mode));
    cr_assert(err.offset >= lo && err.offset <= hi, "[%s] offset %llu not in [%llu, %llu]: %s",
              mode_name(mode), (unsigned long long)err.offset, (unsigned long long)lo,
              (unsigned long long)hi, err.message);
    if (mode == TM_MODE_RELAY) {
        const char *want = code == TM_ERR_LIMIT ? "ExceedSizeLimit" : "InvalidSampledProfile";
        cr_assert_not_null(err.reason, "[relay] %s without a reason", tm_status_str(code));
        cr_assert_str_eq(err.reason, want);
    }
    expect_same_without_err(b, mode, lim, code);
}

static void expect_error_at(const tb_buf *b, tm_mode mode, const tm_limits *lim, tm_status code,
                            uint64_t at) {
    expect_error_in(b, mode, lim, code, at, at);
}

static void expect_ok(const tb_buf *b, tm_mode mode, const tm_limits *lim) {
    tm_error err;
    tm_status st = parse_buf(b, mode, lim, &err);
    cr_assert_eq(st, TM_OK, "[%s] %s: %s", mode_name(mode), tm_status_str(st), err.message);
}

/* Limits are inclusive: with only the tm_limits member `field` (LIMIT(name))
 * set, the trace parses at `ok` and fails at ok - 1 with TM_ERR_LIMIT at an
 * offset in [lo, hi]. */
#define LIMIT(name) offsetof(tm_limits, name)
static void expect_exact_limit(const tb_buf *b, tm_mode mode, size_t field, uint64_t ok, uint64_t lo,
                               uint64_t hi) {
    tm_limits lim;
    memset(&lim, 0, sizeof lim);
    uint64_t *value = (uint64_t *)(void *)((char *)&lim + field);
    *value = ok;
    expect_ok(b, mode, &lim);
    *value = ok - 1;
    expect_error_in(b, mode, &lim, TM_ERR_LIMIT, lo, hi);
}

Test(malformed, the_valid_base_trace_parses) {
    /* Guards every test below: their failures come from the damage, not the base. */
    tb_buf t = {0};
    valid_trace(&t, 3);
    for (size_t m = 0; m < N_OF(modes); m++) expect_ok(&t, modes[m], NULL);
    tb_free(&t);
}

/* ---- truncation ---- */

Test(malformed, truncated_varint_at_top_level) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        /* a packet tag whose length varint is cut: "0a 80" at the end of the input */
        tb_buf t = {0};
        valid_trace(&t, 2);
        size_t at = t.len;
        tb_raw(&t, "\x0a\x80", 2);
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, at + 1);
        tb_free(&t);

        /* a tag cut after its continuation byte */
        valid_trace(&t, 2);
        at = t.len;
        tb_raw(&t, "\x80", 1);
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, at);
        tb_free(&t);

        /* an unknown top-level varint field whose value is cut */
        valid_trace(&t, 1);
        at = t.len;
        tb_raw(&t, "\x10\xff\xff", 3);
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, at + 1);
        tb_free(&t);
    }
}

Test(malformed, truncated_varint_in_third_packet) {
    /* Packet 3 is 3 bytes long and holds a timestamp tag and a varint cut by
     * the packet's own end; a valid packet follows it, so the bound that
     * matters is the packet's, not the input's. */
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        interned_packet(&t);
        size_t at = t.len;
        tb_raw(&t, "\x0a\x03\x40\x80\x80", 5);
        tb_perf_sample(&t, 1, 5, 100, 100, 1, 0);
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, at + 3);
        tb_free(&t);
    }
}

Test(malformed, input_cut_inside_the_last_packet) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 2);
        size_t at = t.len;
        tb_perf_sample(&t, 1, 7, 100, 100, 1, 0);
        /* every cut inside the last packet: its tag, length or payload */
        for (size_t cut = at + 1; cut < t.len; cut++) {
            tb_buf c = {t.data, cut, cut};
            tm_error err;
            tm_status st = parse_buf(&c, modes[m], NULL, &err);
            cr_assert_eq(st, TM_ERR_TRUNCATED, "[%s] cut at %zu: %s", mode_name(modes[m]), cut,
                         tm_status_str(st));
            /* a missing length is reported where it should be; a short payload at the packet's tag */
            size_t want = cut == at + 1 ? at + 1 : at;
            cr_assert_eq(err.offset, want, "[%s] cut at %zu: offset %llu", mode_name(modes[m]), cut,
                         (unsigned long long)err.offset);
        }
        tb_free(&t);
    }
}

/* Without strict, a trace cut inside its last packet keeps the packets
 * before it, says where the cut packet starts, and both readers agree;
 * Relay mode still rejects it, as Relay does. */
Test(malformed, a_cut_trace_keeps_its_complete_packets_unless_strict) {
    tb_buf t = {0};
    valid_trace(&t, 2);
    tm_trace *whole = NULL;
    cr_assert_eq(tm_trace_parse(t.data, t.len, NULL, &whole, NULL), TM_OK);
    size_t kept = tm_trace_get_stats(whole)->samples_kept;
    tm_trace_free(whole);
    size_t at = t.len;
    tb_perf_sample(&t, 1, 7, 100, 100, 1, 0);
    for (size_t cut = at + 1; cut < t.len; cut++) {
        tm_trace *tr = NULL;
        tm_error err;
        cr_assert_eq(tm_trace_parse(t.data, cut, NULL, &tr, &err), TM_OK, "cut at %zu: %s", cut, err.message);
        const tm_trace_stats *st = tm_trace_get_stats(tr);
        cr_assert(st->truncated, "cut at %zu: not reported as truncated", cut);
        cr_assert_eq(st->truncated_at, at, "cut at %zu: truncated_at %llu", cut, (unsigned long long)st->truncated_at);
        cr_assert_eq(st->samples_kept, kept, "cut at %zu: %zu samples", cut, (size_t)st->samples_kept);
        tm_trace_free(tr);
        tm_db *db = NULL;
        cr_assert_eq(tm_db_new(t.data, cut, NULL, &db, &err), TM_OK, "SQL, cut at %zu: %s", cut, err.message);
        tm_db_free(db);
        tm_options relay = options_for(TM_MODE_RELAY);
        relay.strict = 0;
        cr_assert_eq(tm_trace_parse(t.data, cut, &relay, &tr, &err), TM_ERR_TRUNCATED, "relay, cut at %zu", cut);
    }
    tb_free(&t);
}

Test(malformed, length_past_end_top_level_packet) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 2);
        size_t at = t.len;
        tb_raw(&t, "\x0a\x10\x08\x01", 4); /* claims 16 bytes, 2 present */
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, at);
        tb_free(&t);
    }
}

Test(malformed, length_past_end_of_interned_data) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        size_t bad = t.len;
        tb_tag(&t, TM_PF_PACKET_INTERNED_DATA, TM_PB_LEN);
        tb_varint(&t, 32); /* 3 bytes follow in the packet */
        tb_raw(&t, "\x2a\x01\x00", 3);
        bad = close_at(&t, p, bad);
        tb_perf_sample(&t, 1, 5, 100, 100, 1, 0); /* more input after the packet */
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, bad);
        tb_free(&t);
    }
}

Test(malformed, length_past_end_of_interned_frame) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
        size_t bad = t.len;
        tb_tag(&t, TM_PF_INTERNED_FRAMES, TM_PB_LEN);
        tb_varint(&t, 20);
        tb_raw(&t, "\x08\x01", 2);
        bad = close_at(&t, i, bad);
        tb_uint(&t, TM_PF_PACKET_TIMESTAMP, 1); /* packet bytes after the interned data */
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, bad);
        tb_free(&t);
    }
}

/* ---- wrong wire types ---- */

Test(malformed, trace_packet_sent_as_varint) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 1);
        size_t at = t.len;
        tb_uint(&t, TM_PF_TRACE_PACKET, 5); /* 08 05 */
        valid_trace(&t, 1);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, at);
        tb_free(&t);

        /* and as fixed32 */
        valid_trace(&t, 1);
        at = t.len;
        tb_fixed32(&t, TM_PF_TRACE_PACKET, 5);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, at);
        tb_free(&t);
    }
}

Test(malformed, perf_sample_tid_sent_as_len) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 1);
        size_t p = tb_packet_open(&t, 1, 3000000000ull, 0);
        size_t s = tb_open(&t, TM_PF_PACKET_PERF_SAMPLE);
        tb_uint(&t, TM_PF_PERF_SAMPLE_PID, 100);
        size_t bad = t.len;
        tb_bytes(&t, TM_PF_PERF_SAMPLE_TID, "\x65", 1);
        tb_uint(&t, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
        bad = close_at(&t, s, bad);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, bad);
        tb_free(&t);
    }
}

Test(malformed, packet_timestamp_sent_as_fixed64) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 1);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, 0);
        size_t bad = t.len;
        tb_fixed64(&t, TM_PF_PACKET_TIMESTAMP, 3000000000ull);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, bad);
        tb_free(&t);
    }
}

Test(malformed, interned_frame_iid_sent_as_len) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        size_t f = tb_open(&t, TM_PF_INTERNED_FRAMES);
        size_t bad = t.len;
        tb_bytes(&t, TM_PF_INTERNED_IID, "\x01", 1); /* Frame.iid is uint64 */
        bad = close_at(&t, f, bad);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, bad);
        tb_free(&t);
    }
}

/* ---- garbage inside nested messages ---- */

Test(malformed, garbage_inside_interned_data) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        /* a tag cut by the end of interned_data */
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
        size_t bad = t.len;
        tb_raw(&t, "\xff\xff\xff", 3);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, bad);
        tb_free(&t);

        /* wire type 7 inside a Frame */
        tb_standard_clocks(&t, 1);
        p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        size_t f = tb_open(&t, TM_PF_INTERNED_FRAMES);
        tb_uint(&t, TM_PF_INTERNED_IID, 1);
        bad = t.len;
        tb_tag(&t, TM_PF_FRAME_REL_PC, 7); /* no such wire type */
        tb_varint(&t, 0);
        bad = close_at(&t, f, bad);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, bad);
        tb_free(&t);

        /* a packed Callstack.frame_ids whose last element is cut */
        tb_standard_clocks(&t, 1);
        p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        size_t c = tb_open(&t, TM_PF_INTERNED_CALLSTACKS);
        tb_uint(&t, TM_PF_INTERNED_IID, 1);
        tb_tag(&t, TM_PF_CALLSTACK_FRAME_IDS, TM_PB_LEN);
        tb_varint(&t, 3);
        bad = t.len + 2;
        tb_raw(&t, "\x01\x02\x83", 3);
        bad = close_at(&t, c, bad);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_TRUNCATED, bad);
        tb_free(&t);

        /* a mapping path id sent as fixed32 */
        tb_standard_clocks(&t, 1);
        p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        size_t mp = tb_open(&t, TM_PF_INTERNED_MAPPINGS);
        tb_uint(&t, TM_PF_INTERNED_IID, 1);
        bad = t.len;
        tb_fixed32(&t, TM_PF_MAPPING_PATH_STRING_IDS, 1);
        bad = close_at(&t, mp, bad);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, bad);
        tb_free(&t);
    }
}

Test(malformed, group_wire_types) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        /* Trace.packet as a start-group */
        tb_buf t = {0};
        valid_trace(&t, 1);
        size_t at = t.len;
        tb_raw(&t, "\x0b\x08\x01\x0c", 4);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, at);
        tb_free(&t);

        /* an unknown TracePacket field 1000 as start-group, and as end-group */
        for (uint32_t w = 3; w <= 4; w++) {
            valid_trace(&t, 1);
            size_t p = tb_packet_open(&t, 1, TB_NO_TS, 0);
            size_t bad = t.len;
            tb_tag(&t, 1000, w);
            bad = close_at(&t, p, bad);
            expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, bad);
            tb_free(&t);
        }
    }
}

Test(malformed, field_number_zero_in_a_packet) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 1);
        size_t at = t.len;
        tb_raw(&t, "\x0a\x04\x40\x01\x00\x00", 6);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, at + 4);
        tb_free(&t);
    }
}

/* ---- compressed_packets ---- */

static void raw_compressed_packet(tb_buf *t, const void *z, size_t n) {
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_bytes(t, TM_PF_PACKET_COMPRESSED_PACKETS, z, n);
    tb_close(t, p);
}

/* Relay's converter does not read compressed_packets (field 50 is not in
 * its subset, and prost skips unknown fields), so
 * in Relay mode bad compressed payloads are skipped, never inflated. */
static void expect_relay_skips(const tb_buf *t) {
    tm_options o = options_for(TM_MODE_RELAY);
    uint8_t *copy = malloc(t->len);
    memcpy(copy, t->data, t->len);
    tm_trace *tr = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(copy, t->len, &o, &tr, &err), TM_OK, "[relay] %s", err.message);
    cr_assert_eq(tm_trace_get_stats(tr)->compressed_packets, 0);
    tm_trace_free(tr);
    free(copy);
}

Test(malformed, invalid_zlib_data) {
    tb_buf t = {0};
    valid_trace(&t, 1);
    size_t at = t.len;
    raw_compressed_packet(&t, "this is not a zlib stream", 25);
    size_t end = t.len;
    valid_trace(&t, 1);
    expect_error_in(&t, TM_MODE_DEFAULT, NULL, TM_ERR_MALFORMED, at, end - 1);
    expect_relay_skips(&t);
    tb_free(&t);
}

Test(malformed, raw_deflate_is_rejected) {
    /* Trace Processor inflates with inflateInit2(32+MAX_WBITS): zlib or gzip
     * headers only; raw deflate fails (Trace Processor's rule). */
    static const char inner_src[] = "\x0a\x02\x40\x01";
    uint8_t z[64];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    cr_assert_eq(deflateInit2(&zs, 6, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = (Bytef *)(uintptr_t)inner_src;
    zs.avail_in = 4;
    zs.next_out = z;
    zs.avail_out = sizeof z;
    cr_assert_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
    size_t zn = sizeof z - zs.avail_out;
    deflateEnd(&zs);
    tb_buf t = {0};
    valid_trace(&t, 1);
    size_t at = t.len;
    raw_compressed_packet(&t, z, zn);
    expect_error_in(&t, TM_MODE_DEFAULT, NULL, TM_ERR_MALFORMED, at, t.len - 1);
    tb_free(&t);
}

Test(malformed, truncated_zlib) {
    tb_buf inner = {0};
    for (int k = 0; k < 50; k++) tb_perf_sample(&inner, 1, 3000000000ull + k, 100, 100 + k, 1, TB_SEQ_NEEDS);
    tb_buf whole = {0};
    tb_compressed_packet(&whole, &inner);
    /* Re-read the zlib bytes out of the wrapper and keep every proper prefix of some lengths. */
    tm_pb_reader r = tm_pb_reader_of((tm_bytes){whole.data, whole.len});
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    tm_pb_reader pr = tm_pb_reader_of(f.bytes);
    cr_assert_eq(tm_pb_next(&pr, &f), TM_PB_OK);
    cr_assert_eq(f.num, TM_PF_PACKET_COMPRESSED_PACKETS);
    size_t zn = f.bytes.len;
    cr_assert_gt(zn, 8);
    size_t cuts[] = {1, 2, zn / 2, zn - 4, zn - 1};
    for (size_t c = 0; c < N_OF(cuts); c++) {
        tb_buf t = {0};
        valid_trace(&t, 1);
        size_t at = t.len;
        raw_compressed_packet(&t, f.bytes.data, cuts[c]);
        size_t end = t.len;
        valid_trace(&t, 1);
        /* the field itself is complete; its zlib stream is not a whole stream */
        expect_error_in(&t, TM_MODE_DEFAULT, NULL, TM_ERR_MALFORMED, at, end - 1);
        expect_relay_skips(&t);
        tb_free(&t);
    }
    /* the intact stream parses and yields its 50 samples */
    tb_buf ok = {0};
    valid_trace(&ok, 0);
    tb_raw(&ok, whole.data, whole.len);
    expect_ok(&ok, TM_MODE_DEFAULT, NULL);
    tb_free(&ok);
    tb_free(&whole);
    tb_free(&inner);
}

/* zlib of `zeros` zero bytes, streamed so the input never exists in memory. */
static uint8_t *zlib_zeros(size_t zeros, size_t *out_len) {
    static const uint8_t chunk[1 << 16];
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    cr_assert_eq(deflateInit(&zs, 9), Z_OK);
    size_t cap = 1 << 20, len = 0;
    uint8_t *out = malloc(cap);
    size_t left = zeros;
    int flush;
    do {
        size_t n = left < sizeof chunk ? left : sizeof chunk;
        left -= n;
        flush = left ? Z_NO_FLUSH : Z_FINISH;
        zs.next_in = (Bytef *)(uintptr_t)chunk;
        zs.avail_in = (uInt)n;
        do {
            zs.next_out = out + len;
            zs.avail_out = (uInt)(cap - len);
            int zr = deflate(&zs, flush);
            cr_assert(zr == Z_OK || zr == Z_STREAM_END || zr == Z_BUF_ERROR);
            len = cap - zs.avail_out;
            cr_assert_lt(len, cap, "compressed zeros should stay far below 1 MiB");
        } while (zs.avail_in > 0 || (flush == Z_FINISH && zs.avail_out == 0));
    } while (flush != Z_FINISH);
    deflateEnd(&zs);
    *out_len = len;
    return out;
}

Test(malformed, zip_bomb_hits_max_inflated_bytes) {
    size_t zn;
    uint8_t *z = zlib_zeros((size_t)64 << 20, &zn);
    cr_assert_lt(zn, 200000, "64 MiB of zeros compress to ~64 KiB");
    tb_buf t = {0};
    valid_trace(&t, 1);
    size_t at = t.len;
    raw_compressed_packet(&t, z, zn);
    size_t end = t.len;
    tm_limits lim;
    memset(&lim, 0, sizeof lim);
    lim.max_inflated_bytes = 1 << 20;
    expect_error_in(&t, TM_MODE_DEFAULT, &lim, TM_ERR_LIMIT, at, end - 1);
    expect_relay_skips(&t);

    /* The bound is exact: 1 MiB of zeros inflates within a 1 MiB limit (and
     * then fails as a trace, because zero bytes are field number 0). */
    free(z);
    tb_free(&t);
    z = zlib_zeros((size_t)1 << 20, &zn);
    valid_trace(&t, 1);
    at = t.len;
    raw_compressed_packet(&t, z, zn);
    expect_error_in(&t, TM_MODE_DEFAULT, &lim, TM_ERR_MALFORMED, at, t.len - 1);
    lim.max_inflated_bytes = (1 << 20) - 1;
    expect_error_in(&t, TM_MODE_DEFAULT, &lim, TM_ERR_LIMIT, at, t.len - 1);
    free(z);
    tb_free(&t);
}

Test(malformed, error_inside_a_compressed_packet_points_at_the_wrapper) {
    tb_buf inner = {0};
    tb_perf_sample(&inner, 1, 3000000000ull, 100, 100, 1, 0);
    tb_raw(&inner, "\x0a\x05\x08", 3); /* a packet whose length runs past the inflated end */
    tb_buf t = {0};
    valid_trace(&t, 1);
    size_t at = t.len;
    tb_compressed_packet(&t, &inner);
    size_t end = t.len;
    valid_trace(&t, 1);
    tm_error err;
    cr_assert_eq(parse_buf(&t, TM_MODE_DEFAULT, NULL, &err), TM_ERR_TRUNCATED);
    cr_assert(err.offset >= at && err.offset < end, "offset %llu outside the wrapper [%zu, %zu)",
              (unsigned long long)err.offset, at, end);
    cr_assert_not_null(strstr(err.message, "compressed"), "message: %s", err.message);
    tb_free(&t);
    tb_free(&inner);
}

/* ---- limits ---- */

Test(limits, max_samples) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 2);
        size_t at = t.len;
        tb_perf_sample(&t, 1, 9000000000ull, 100, 100, 1, TB_SEQ_NEEDS);
        size_t end = t.len;
        expect_exact_limit(&t, modes[m], LIMIT(max_samples), 3, at, end - 1);
        tb_free(&t);
    }
}

/* Both encodings of frame_ids: unpacked ones (as writers emit them) take
 * the reader's one-pass scan, packed ones its general check. */
Test(limits, max_stack_depth) {
    for (size_t m = 0; m < N_OF(modes); m++)
        for (int packed = 0; packed < 2; packed++) {
            tb_buf t = {0};
            tb_standard_clocks(&t, 1);
            size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
            size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
            static const uint64_t two[] = {1, 2}, three[] = {1, 2, 300};
            tb_callstack(&t, 1, two, 2, !packed);
            size_t bad = t.len;
            tb_callstack(&t, 2, three, 3, packed);
            bad = close_at(&t, i, bad);
            bad = close_at(&t, p, bad);
            expect_exact_limit(&t, modes[m], LIMIT(max_stack_depth), 3, bad, bad);
            tb_free(&t);
        }
}

/* A frame id whose varint runs past its callstack: the same error, at the
 * same offset, whichever path reads it. */
Test(malformed, frame_id_varint_past_its_callstack) {
    tb_buf t = {0};
    tb_standard_clocks(&t, 1);
    size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    size_t cs = tb_open(&t, TM_PF_INTERNED_CALLSTACKS);
    tb_uint(&t, TM_PF_INTERNED_IID, 1);
    tb_uint(&t, TM_PF_CALLSTACK_FRAME_IDS, 5);
    tb_tag(&t, TM_PF_CALLSTACK_FRAME_IDS, TM_PB_VARINT);
    size_t at = t.len;
    tb_raw(&t, "\x80\x80", 2); /* continuation bits, then the end of the callstack */
    tb_close(&t, cs);
    tb_close(&t, i);
    tb_close(&t, p);
    tm_error err;
    cr_assert_eq(parse_buf(&t, TM_MODE_DEFAULT, NULL, &err), TM_ERR_TRUNCATED, "%s", err.message);
    cr_assert(strstr(err.message, "Callstack: truncated varint"), "message: %s", err.message);
    cr_assert(err.offset >= at - 1 && err.offset <= at + 3, "offset %llu, the varint at %zu",
              (unsigned long long)err.offset, at);
    tb_free(&t);
}

Test(limits, max_sequences) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        size_t at = 0;
        for (uint32_t seq = 1; seq <= 3; seq++) {
            at = t.len;
            size_t p = tb_packet_open(&t, seq, 1000 * seq, 0);
            tb_close(&t, p);
        }
        size_t end = t.len;
        expect_exact_limit(&t, modes[m], LIMIT(max_sequences), 3, at, end - 1);
        tb_free(&t);
    }
}

Test(limits, max_packet_bytes) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 1);
        size_t at = t.len;
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, 0);
        static const char pad[300] = {0};
        tb_bytes(&t, TM_PF_PACKET_FOR_TESTING, pad, sizeof pad); /* skipped */
        tb_close(&t, p);
        size_t big = t.len - payload_of(&t, at);
        valid_trace(&t, 1);
        expect_exact_limit(&t, modes[m], LIMIT(max_packet_bytes), big, at, at);
        tb_free(&t);
    }
}

Test(limits, max_unique_frames) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        interned_packet(&t);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, 0);
        size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        static const uint64_t three[] = {1, 2, 3};
        tb_callstack(&t, 2, three, 3, 1);
        tb_close(&t, i);
        tb_close(&t, p);
        size_t at = t.len;
        tb_perf_sample(&t, 1, 3000000000ull, 100, 100, 2, TB_SEQ_NEEDS);
        size_t end = t.len;
        expect_exact_limit(&t, modes[m], LIMIT(max_unique_frames), 3, at, end - 1);
        tb_free(&t);
    }
}

Test(limits, max_path_segments) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        static const uint64_t paths[] = {1, 2, 3};
        tb_mapping(&t, 1, 0, 0x1000, 0x2000, paths, 2);
        size_t bad = t.len;
        tb_mapping(&t, 2, 0, 0x3000, 0x4000, paths, 3);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_exact_limit(&t, modes[m], LIMIT(max_path_segments), 3, bad, bad);
        tb_free(&t);
    }
}

Test(limits, max_interned_entries) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "a", 1);
        tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 1, "b", 1);
        size_t bad = t.len;
        tb_frame(&t, 1, 1, 0, 0);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_exact_limit(&t, modes[m], LIMIT(max_interned_entries), 3, bad, bad);
        tb_free(&t);
    }
}

/* An epoch that re-sends the one before's interned data byte for byte (the
 * reader copies its entries instead of reading them again) counts those
 * entries against the limit all the same. */
Test(limits, max_interned_entries_counts_re_sent_entries) {
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        tb_standard_clocks(&t, 1);
        for (int epoch = 0; epoch < 2; epoch++) {
            size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
            size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
            tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "a", 1);
            tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 1, "b", 1);
            tb_close(&t, i);
            tb_close(&t, p);
        }
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_NEEDS);
        size_t i = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        size_t bad = t.len;
        tb_frame(&t, 1, 1, 0, 0);
        bad = close_at(&t, i, bad);
        bad = close_at(&t, p, bad);
        expect_exact_limit(&t, modes[m], LIMIT(max_interned_entries), 3, bad, bad);
        tb_free(&t);
    }
}

/* ---- output checks ---- */

static void assert_json_object(const tu_membuf *s, const char *what) {
    json_error_t je;
    json_t *j = json_loadb(s->data, s->len, JSON_ALLOW_NUL, &je); /* \u0000 is valid JSON */
    cr_assert_not_null(j, "%s is not JSON (%s at %d): %.*s", what, je.text, je.position,
                       (int)(s->len < 300 ? s->len : 300), s->data ? s->data : "");
    cr_assert(json_is_object(j), "%s is not a JSON object", what);
    json_decref(j);
}

Test(limits, max_chunk_duration_is_a_sample_v2_rejection) {
    /* Samples 2 ms apart with a 1 ms chunk limit: the trace parses; the
     * Sample v2 writer refuses it as Relay does (DurationIsTooLong). */
    for (size_t m = 0; m < N_OF(modes); m++) {
        tb_buf t = {0};
        valid_trace(&t, 3);
        tm_options o = options_for(modes[m]);
        o.limits.max_chunk_duration_ns = 1000000;
        tm_trace *tr = NULL;
        tm_error err;
        cr_assert_eq(tm_trace_parse(t.data, t.len, &o, &tr, &err), TM_OK, "%s", err.message);
        tu_membuf s = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &s};
        cr_assert_eq(tm_write_sample_v2(tr, NULL, &sink, &err), TM_ERR_REJECTED, "[%s]", mode_name(modes[m]));
        cr_assert_not_null(err.reason);
        cr_assert_str_eq(err.reason, "DurationIsTooLong");
        tm_trace_free(tr);
        free(s.data);
        tb_free(&t);
    }
}

/* ---- deterministic random mutations ---- */

static uint64_t rng_next(uint64_t *s) { /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* Everything the decoder reads: clocks, a process tree, interned data with
 * mappings (native and Java), packed and unpacked callstacks, PerfSamples,
 * a ThreadDescriptor with a StreamingProfilePacket, defaults, and a
 * compressed packet. */
static void rich_trace(tb_buf *t) {
    static const uint32_t ids[] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME,
                                   TM_PF_BUILTIN_CLOCK_MONOTONIC};
    static const uint64_t vals[] = {1000000000ull, 1700000000000000000ull, 500000000ull};
    tb_clock_snapshot(t, 1, ids, vals, 3);

    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_uint(t, TM_PF_PACKET_TIMESTAMP, 1000000001ull);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    size_t pr = tb_open(t, TM_PF_PROCESS_TREE_PROCESSES);
    tb_uint(t, TM_PF_PROCESS_PID, 100);
    tb_str(t, TM_PF_PROCESS_CMDLINE, "com.example.app");
    tb_close(t, pr);
    tb_pt_thread(t, 101, 100, "w\xc3\xb6rker");
    tb_close(t, pt);
    tb_close(t, p);

    p = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t d = tb_open(t, TM_PF_PACKET_DEFAULTS);
    tb_uint(t, TM_PF_DEFAULTS_TIMESTAMP_CLOCK_ID, TM_PF_BUILTIN_CLOCK_BOOTTIME);
    tb_close(t, d);
    size_t i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "\xe5\xb7\xa5\xe4\xbd\x9c", 6);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "android.view.View.draw", 22);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 1, "system", 6);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 2, "lib64", 5);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 3, "libc.so", 7);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 4, "boot.oat", 8);
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 1, "\x01\x02\xab\xcd", 4);
    static const uint64_t native_path[] = {1, 2, 3}, java_path[] = {1, 4};
    tb_mapping(t, 1, 1, 0x7000000000ull, 0x7000100000ull, native_path, 3);
    tb_mapping(t, 2, 0, 0x6000000000ull, 0x6000100000ull, java_path, 2);
    tb_frame(t, 1, 1, 1, 0x1234);
    tb_frame(t, 2, 2, 1, 0x5678);
    tb_frame(t, 3, 3, 2, 0x9abc);
    tb_frame(t, 4, 0, 0, 0x42);
    static const uint64_t cs1[] = {1, 2}, cs2[] = {1, 3, 4}, cs3[] = {1, 2, 3, 4};
    tb_callstack(t, 1, cs1, 2, 1);
    tb_callstack(t, 2, cs2, 3, 0);
    tb_callstack(t, 3, cs3, 4, 1);
    tb_close(t, i);
    tb_close(t, p);

    for (int k = 0; k < 6; k++)
        tb_perf_sample(t, 1, 1000000000ull + 1000000ull * (uint64_t)k, 100, k % 2 ? 101 : 100,
                       (uint64_t)(k % 3) + 1, TB_SEQ_NEEDS);

    /* Sequence 2: a ThreadDescriptor time base and streaming samples. */
    p = tb_packet_open(t, 2, TB_NO_TS, TB_SEQ_CLEARED);
    size_t td = tb_open(t, TM_PF_PACKET_THREAD_DESCRIPTOR);
    tb_uint(t, TM_PF_THREAD_DESC_PID, 100);
    tb_uint(t, TM_PF_THREAD_DESC_TID, 102);
    tb_str(t, TM_PF_THREAD_DESC_THREAD_NAME, "sampler");
    tb_uint(t, TM_PF_THREAD_DESC_REFERENCE_TIMESTAMP_US, 500000);
    tb_close(t, td);
    i = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "chrome_main", 11);
    tb_frame(t, 1, 1, 0, 0x10);
    tb_callstack(t, 7, (const uint64_t[]){1}, 1, 0);
    tb_close(t, i);
    tb_close(t, p);
    p = tb_packet_open(t, 2, TB_NO_TS, TB_SEQ_NEEDS);
    size_t sp = tb_open(t, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    static const uint64_t sp_cs[] = {7, 7, 7}, sp_dt[] = {10, 20, 30};
    tb_packed(t, TM_PF_STREAMING_CALLSTACK_IID, sp_cs, 3);
    tb_packed(t, TM_PF_STREAMING_TIMESTAMP_DELTA_US, sp_dt, 3);
    tb_close(t, sp);
    tb_close(t, p);

    /* Two more samples on seq 1 inside a compressed packet. */
    tb_buf inner = {0};
    tb_perf_sample(&inner, 1, 1010000000ull, 100, 100, 3, TB_SEQ_NEEDS);
    tb_perf_sample(&inner, 1, 1011000000ull, 100, 101, 1, TB_SEQ_NEEDS);
    tb_compressed_packet(t, &inner);
    tb_free(&inner);
}

Test(mutation, rich_trace_is_valid) {
    tb_buf t = {0};
    rich_trace(&t);
    for (size_t m = 0; m < N_OF(modes); m++) {
        tm_options o = options_for(modes[m]);
        tm_trace *tr = NULL;
        tm_error err;
        cr_assert_eq(tm_trace_parse(t.data, t.len, &o, &tr, &err), TM_OK, "%s", err.message);
        const tm_trace_stats *st = tm_trace_get_stats(tr);
        /* Relay reads PerfSamples only and skips compressed packets. */
        cr_assert_eq(st->samples_kept, modes[m] == TM_MODE_RELAY ? 6u : 11u, "[%s] %llu samples",
                     mode_name(modes[m]), (unsigned long long)st->samples_kept);
        tu_membuf s = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &s};
        cr_assert_eq(tm_write_sample_v2(tr, NULL, &sink, &err), TM_OK, "%s", err.message);
        assert_json_object(&s, "sample v2");
        free(s.data);
        tm_trace_free(tr);
    }
    tb_free(&t);
}

static void mutate(uint64_t *rng, const tb_buf *src, tb_buf *dst) {
    dst->len = 0;
    tb_raw(dst, src->data, src->len);
    int op = (int)(rng_next(rng) % 6);
    size_t n = dst->len;
    switch (op) {
    case 0: /* flip one bit */
        dst->data[rng_next(rng) % n] ^= (uint8_t)(1u << (rng_next(rng) % 8));
        break;
    case 1: { /* flip several bits */
        int k = 2 + (int)(rng_next(rng) % 7);
        for (int j = 0; j < k; j++) dst->data[rng_next(rng) % n] ^= (uint8_t)(1u << (rng_next(rng) % 8));
        break;
    }
    case 2: { /* an interesting byte value */
        static const uint8_t vals[] = {0x00, 0x01, 0x7f, 0x80, 0xff, 0x0a, 0x0b, 0x0f};
        dst->data[rng_next(rng) % n] = vals[rng_next(rng) % N_OF(vals)];
        break;
    }
    case 3: /* truncate */
        dst->len = (size_t)(rng_next(rng) % n);
        break;
    case 4: { /* delete a short range */
        size_t at = (size_t)(rng_next(rng) % n), k = 1 + (size_t)(rng_next(rng) % 8);
        if (at + k > n) k = n - at;
        memmove(dst->data + at, dst->data + at + k, n - at - k);
        dst->len -= k;
        break;
    }
    default: /* a random byte, then a truncation far from the end */
        dst->data[rng_next(rng) % n] = (uint8_t)rng_next(rng);
        if (rng_next(rng) % 4 == 0) dst->len = n - (size_t)(rng_next(rng) % (n / 4 + 1));
        break;
    }
}

static void mutation_loop(tm_mode mode, uint64_t seed, int iterations) {
    tb_buf base = {0}, cur = {0};
    rich_trace(&base);
    uint64_t rng = seed;
    int ok = 0, failed = 0;
    for (int it = 0; it < iterations; it++) {
        mutate(&rng, &base, &cur);
        uint8_t *copy = malloc(cur.len ? cur.len : 1);
        if (cur.len) memcpy(copy, cur.data, cur.len);
        tm_options o = options_for(mode);
        tm_trace *tr = NULL;
        tm_error err;
        memset(&err, 0, sizeof err);
        tm_status st = tm_trace_parse(copy, cur.len, &o, &tr, &err);
        if (st != TM_OK) {
            failed++;
            cr_assert(st == TM_ERR_TRUNCATED || st == TM_ERR_MALFORMED || st == TM_ERR_LIMIT ||
                          (st == TM_ERR_EMPTY && cur.len == 0),
                      "[%s] iteration %d: unexpected %s (%s)", mode_name(mode), it, tm_status_str(st),
                      err.message);
            cr_assert_null(tr);
            cr_assert_eq(err.code, st);
            cr_assert_gt(strlen(err.message), 0, "iteration %d", it);
            cr_assert_leq(err.offset, cur.len, "iteration %d: offset %llu beyond the input", it,
                          (unsigned long long)err.offset);
            if (mode == TM_MODE_RELAY) {
                cr_assert_not_null(err.reason, "iteration %d", it);
                const char *want = st == TM_ERR_LIMIT   ? "ExceedSizeLimit"
                                   : st == TM_ERR_EMPTY ? "NotEnoughSamples"
                                                        : "InvalidSampledProfile";
                cr_assert_str_eq(err.reason, want);
            }
        } else {
            ok++;
            cr_assert_eq(tm_trace_get_stats(tr)->bytes, cur.len);
            tu_membuf s = {0};
            tm_sink sink = {.write = tu_membuf_write, .ctx = &s};
            st = tm_write_sample_v2(tr, NULL, &sink, &err);
            cr_assert(st == TM_OK || st == TM_ERR_REJECTED, "[%s] iteration %d: writer returned %s (%s)",
                      mode_name(mode), it, tm_status_str(st), err.message);
            if (st == TM_OK) assert_json_object(&s, "sample v2 of a mutated trace");
            else cr_assert_not_null(err.reason, "iteration %d: a rejection names Relay's reason", it);
            s.len = 0;
            cr_assert_eq(tm_write_report(tr, &sink, &err), TM_OK, "iteration %d: %s", it, err.message);
            assert_json_object(&s, "report of a mutated trace");
            free(s.data);
            tm_trace_free(tr);
        }
        free(copy);
    }
    cr_log_info("[%s] %d mutated traces parsed, %d rejected", mode_name(mode), ok, failed);
    /* The mix must exercise both sides, or the loop proves little. */
    cr_assert_gt(ok, iterations / 20, "[%s] only %d of %d mutated traces parsed", mode_name(mode), ok,
                 iterations);
    cr_assert_gt(failed, iterations / 20, "[%s] only %d of %d mutated traces failed", mode_name(mode), failed,
                 iterations);
    tb_free(&base);
    tb_free(&cur);
}

Test(mutation, default_mode_never_crashes) { mutation_loop(TM_MODE_DEFAULT, 0x9e3779b97f4a7c15ull, 4000); }

Test(mutation, relay_mode_never_crashes) { mutation_loop(TM_MODE_RELAY, 0xd1b54a32d192ed03ull, 4000); }

/* ---- failing allocator ---- */

typedef struct block {
    void *p;
    size_t size;
} block;

typedef struct fail_alloc {
    long fail_at; /* index of the allocation that fails; -1: none */
    long count;   /* allocation attempts (malloc and realloc) */
    size_t live_blocks, live_bytes;
    long size_mismatches, unknown_frees;
    block *blocks;
    size_t n_blocks, cap_blocks;
} fail_alloc;

static block *find_block(fail_alloc *a, void *p) {
    for (size_t i = 0; i < a->n_blocks; i++)
        if (a->blocks[i].p == p) return &a->blocks[i];
    return NULL;
}

static void add_block(fail_alloc *a, void *p, size_t size) {
    if (a->n_blocks == a->cap_blocks) {
        a->cap_blocks = a->cap_blocks ? a->cap_blocks * 2 : 64;
        a->blocks = realloc(a->blocks, a->cap_blocks * sizeof *a->blocks);
        if (!a->blocks) abort();
    }
    a->blocks[a->n_blocks].p = p;
    a->blocks[a->n_blocks].size = size;
    a->n_blocks++;
    a->live_blocks++;
    a->live_bytes += size;
}

static void drop_block(fail_alloc *a, block *b) {
    a->live_blocks--;
    a->live_bytes -= b->size;
    *b = a->blocks[--a->n_blocks];
}

static void *fa_malloc(void *ctx, size_t size) {
    fail_alloc *a = ctx;
    if (a->count++ == a->fail_at) return NULL;
    void *p = malloc(size);
    if (p) add_block(a, p, size);
    return p;
}

static void *fa_realloc(void *ctx, void *ptr, size_t old_size, size_t new_size) {
    fail_alloc *a = ctx;
    block *b = find_block(a, ptr);
    if (!b) a->unknown_frees++;
    else if (b->size != old_size) a->size_mismatches++;
    if (a->count++ == a->fail_at) return NULL;
    void *p = realloc(ptr, new_size);
    if (!p) return NULL;
    if (b) drop_block(a, b);
    add_block(a, p, new_size);
    return p;
}

static void fa_free(void *ctx, void *ptr, size_t size) {
    fail_alloc *a = ctx;
    block *b = find_block(a, ptr);
    if (!b) a->unknown_frees++;
    else {
        if (b->size != size) a->size_mismatches++;
        drop_block(a, b);
    }
    free(ptr);
}

static void fa_reset(fail_alloc *a, long fail_at) {
    cr_assert_eq(a->n_blocks, 0);
    a->fail_at = fail_at;
    a->count = 0;
    a->live_blocks = a->live_bytes = 0;
    a->size_mismatches = a->unknown_frees = 0;
}

static void fa_assert_clean(const fail_alloc *a, const char *when) {
    cr_assert_eq(a->live_blocks, 0, "%s: %zu blocks (%zu bytes) not freed", when, a->live_blocks,
                 a->live_bytes);
    cr_assert_eq(a->live_bytes, 0, "%s", when);
    cr_assert_eq(a->size_mismatches, 0, "%s: free/realloc got a wrong old size %ld times", when,
                 a->size_mismatches);
    cr_assert_eq(a->unknown_frees, 0, "%s: freed %ld pointers it never allocated", when, a->unknown_frees);
}

static void failing_alloc_parse(tm_mode mode) {
    tb_buf t = {0};
    rich_trace(&t);
    fail_alloc fa;
    memset(&fa, 0, sizeof fa);
    tm_alloc alloc = {.malloc_fn = fa_malloc, .realloc_fn = fa_realloc, .free_fn = fa_free, .ctx = &fa};
    tm_options o = options_for(mode);
    o.alloc = &alloc;

    /* A counting run: how many allocations a successful parse makes. */
    fa_reset(&fa, -1);
    tm_trace *tr = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(t.data, t.len, &o, &tr, &err), TM_OK, "%s", err.message);
    long total = fa.count;
    cr_assert_gt(total, 5, "a rich trace should need several allocations");
    cr_assert_gt(fa.live_blocks, 0, "the trace's memory must come from the caller's allocator");
    tm_trace_free(tr);
    fa_assert_clean(&fa, "after a successful parse");

    /* Fail each allocation in turn; collect every wrong outcome so one run
     * reports all of them. */
    char bad[600] = "";
    size_t n_bad = 0;
    for (long n = 0; n <= total; n++) {
        fa_reset(&fa, n);
        tr = NULL;
        memset(&err, 0, sizeof err);
        tm_status st = tm_trace_parse(t.data, t.len, &o, &tr, &err);
        tm_status want = n < total ? TM_ERR_NOMEM : TM_OK;
        if (st != want) {
            if (n_bad++ < 6) {
                size_t used = strlen(bad);
                snprintf(bad + used, sizeof bad - used, " #%ld: %s (%s);", n, tm_status_str(st), err.message);
            }
        } else if (st != TM_OK) {
            cr_assert_null(tr);
            cr_assert_eq(err.code, TM_ERR_NOMEM);
            cr_assert_gt(strlen(err.message), 0);
            cr_assert_null(err.reason, "out of memory is not a Relay rejection");
        }
        tm_trace_free(tr);
        char when[64];
        snprintf(when, sizeof when, "[%s] failing allocation %ld", mode_name(mode), n);
        fa_assert_clean(&fa, when);
    }
    cr_assert_eq(n_bad, 0, "[%s] %zu of %ld failing allocations did not give TM_ERR_NOMEM:%s",
                 mode_name(mode), n_bad, total, bad);
    free(fa.blocks);
    tb_free(&t);
}

Test(failing_alloc, every_parse_allocation_default_mode) { failing_alloc_parse(TM_MODE_DEFAULT); }

Test(failing_alloc, every_parse_allocation_relay_mode) { failing_alloc_parse(TM_MODE_RELAY); }

Test(failing_alloc, every_sample_v2_writer_allocation) {
    /* The writer's scratch memory comes from the trace's allocator too. */
    tb_buf t = {0};
    rich_trace(&t);
    fail_alloc fa;
    memset(&fa, 0, sizeof fa);
    tm_alloc alloc = {.malloc_fn = fa_malloc, .realloc_fn = fa_realloc, .free_fn = fa_free, .ctx = &fa};
    for (size_t m = 0; m < N_OF(modes); m++) {
        tm_options o = options_for(modes[m]);
        o.alloc = &alloc;
        fa_reset(&fa, -1);
        tm_trace *tr = NULL;
        tm_error err;
        cr_assert_eq(tm_trace_parse(t.data, t.len, &o, &tr, &err), TM_OK);
        long parsed = fa.count;
        size_t live = fa.live_blocks;
        tu_membuf s = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &s};
        cr_assert_eq(tm_write_sample_v2(tr, NULL, &sink, &err), TM_OK, "%s", err.message);
        long writer = fa.count - parsed;
        cr_assert_eq(fa.live_blocks, live, "the writer must free its scratch memory");
        for (long n = 0; n < writer; n++) {
            fa.fail_at = fa.count + n;
            s.len = 0;
            tm_status st = tm_write_sample_v2(tr, NULL, &sink, &err);
            cr_assert_eq(st, TM_ERR_NOMEM, "[%s] writer allocation %ld failed: got %s", mode_name(modes[m]),
                         n, tm_status_str(st));
            cr_assert_eq(fa.live_blocks, live, "[%s] writer allocation %ld: leaked", mode_name(modes[m]), n);
        }
        free(s.data);
        tm_trace_free(tr);
        fa_assert_clean(&fa, "after the writer runs");
    }
    free(fa.blocks);
    tb_free(&t);
}

/* ---- Relay's schema decides which wire types Relay mode checks ---- */

/* Relay decodes the whole trace with prost: a known
 * field with the wrong wire type is a decode error (InvalidSampledProfile),
 * an unknown one is skipped whatever its wire type. PerfSample.cpu (1) is in
 * Relay's subset, even though the converter never uses it. */
Test(relay_schema, perf_sample_cpu_with_wrong_wire_type_is_rejected) {
    tb_buf t = {0};
    valid_trace(&t, 2);
    size_t p = tb_packet_open(&t, 1, 3000000000ull, 0);
    size_t s = tb_open(&t, TM_PF_PACKET_PERF_SAMPLE);
    size_t bad = t.len;
    tb_bytes(&t, TM_PF_PERF_SAMPLE_CPU, "\x02", 1);
    tb_uint(&t, TM_PF_PERF_SAMPLE_PID, 100);
    tb_uint(&t, TM_PF_PERF_SAMPLE_TID, 100);
    tb_uint(&t, TM_PF_PERF_SAMPLE_CALLSTACK_IID, 1);
    bad = close_at(&t, s, bad);
    bad = close_at(&t, p, bad);
    expect_error_at(&t, TM_MODE_RELAY, NULL, TM_ERR_MALFORMED, bad);
    tb_free(&t);
}

/* A payload of one-byte varint fields passes the schema without the
 * general walk, unless one of them is a field the schema wants
 * length-delimited: a ClockSnapshot whose clocks (1) come as a varint is
 * malformed at that field, in both modes. */
Test(schema, varint_where_a_nested_message_belongs_is_rejected) {
    for (size_t m = 0; m < 2; m++) {
        tb_buf t = {0};
        valid_trace(&t, 2);
        size_t p = tb_packet_open(&t, 1, TB_NO_TS, 0);
        size_t cs = tb_open(&t, TM_PF_PACKET_CLOCK_SNAPSHOT);
        size_t bad = t.len;
        tb_uint(&t, TM_PF_CLOCK_SNAPSHOT_CLOCKS, 6);
        bad = close_at(&t, cs, bad);
        bad = close_at(&t, p, bad);
        expect_error_at(&t, modes[m], NULL, TM_ERR_MALFORMED, bad);
        tb_free(&t);
    }
}

/* ClockSnapshot.Clock in Relay's subset has clock_id (1) and timestamp (2)
 * only, so prost skips is_incremental (3) and unit_multiplier_ns (4)
 * whatever their wire type, and Relay converts the trace. */
Test(relay_schema, clock_fields_outside_relays_subset_are_skipped) {
    tb_buf t = {0};
    size_t p = tb_packet_open(&t, 1, TB_NO_TS, 0);
    size_t cs = tb_open(&t, TM_PF_PACKET_CLOCK_SNAPSHOT);
    static const uint32_t ids[] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    static const uint64_t vals[] = {1000000000ull, 1700000000000000000ull};
    for (int k = 0; k < 2; k++) {
        size_t c = tb_open(&t, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
        tb_uint(&t, TM_PF_CLOCK_ID, ids[k]);
        tb_uint(&t, TM_PF_CLOCK_TIMESTAMP, vals[k]);
        tb_bytes(&t, TM_PF_CLOCK_IS_INCREMENTAL, "\x00", 1);
        tb_fixed32(&t, TM_PF_CLOCK_UNIT_MULTIPLIER_NS, 1);
        tb_close(&t, c);
    }
    tb_close(&t, cs);
    tb_close(&t, p);
    interned_packet(&t);
    for (int k = 0; k < 3; k++) tb_perf_sample(&t, 1, 2000000000ull + 1000000ull * k, 100, 100, 1, 0);
    expect_ok(&t, TM_MODE_RELAY, NULL);
    tb_free(&t);
}

/* ---- symbol payloads: nested messages below the reader's schema ---- */

/* A valid trace followed by a packet `field` whose innermost message (opened
 * through the field numbers of path[]) holds a string field whose length
 * runs past that message: both models reject it with the same code at that
 * field (the reader's schema or the symbol walkers catch it, whichever
 * reaches that deep), not at byte 0, and not as "out of memory". */
static void expect_nested_symbols_error(uint32_t field, const uint32_t *path, size_t depth) {
    tb_buf t = {0};
    valid_trace(&t, 2);
    size_t p = tb_packet_open(&t, 0, TB_NO_TS, 0);
    size_t marks[4];
    marks[0] = tb_open(&t, field);
    for (size_t i = 0; i < depth; i++) marks[i + 1] = tb_open(&t, path[i]);
    size_t bad = t.len;
    tb_tag(&t, 1, TM_PB_LEN);
    tb_varint(&t, 40);
    tb_raw(&t, "ab", 2);
    for (size_t i = depth + 1; i-- > 0;) bad = close_at(&t, marks[i], bad);
    bad = close_at(&t, p, bad);
    tm_error err;
    tm_status st = parse_buf(&t, TM_MODE_DEFAULT, NULL, &err);
    cr_assert(st == TM_ERR_MALFORMED || st == TM_ERR_TRUNCATED, "%s: %s", tm_status_str(st), err.message);
    cr_assert_eq(err.offset, bad, "names byte %llu, the bad field is at %zu: %s", (unsigned long long)err.offset,
                 bad, err.message);
    tm_db *db = NULL;
    memset(&err, 0, sizeof err);
    cr_assert_eq(tm_db_new(t.data, t.len, NULL, &db, &err), st, "SQL: %s", err.message);
    cr_assert_null(db);
    cr_assert_eq(err.offset, bad, "SQL names byte %llu, the bad field is at %zu: %s",
                 (unsigned long long)err.offset, bad, err.message);
    tb_free(&t);
}

Test(malformed, a_bad_nested_field_in_symbol_payloads_names_its_byte) {
    static const uint32_t line[] = {TM_PF_MODULE_SYMBOLS_ADDRESS_SYMBOLS, TM_PF_ADDRESS_SYMBOLS_LINES};
    expect_nested_symbols_error(TM_PF_PACKET_MODULE_SYMBOLS, line, 2);
    static const uint32_t member[] = {TM_PF_DEOBF_OBFUSCATED_CLASSES, TM_PF_OBF_CLASS_OBFUSCATED_METHODS};
    expect_nested_symbols_error(TM_PF_PACKET_DEOBFUSCATION_MAPPING, member, 2);
    static const uint32_t package[] = {TM_PF_PACKAGES_LIST_PACKAGES};
    expect_nested_symbols_error(TM_PF_PACKET_PACKAGES_LIST, package, 1);
}
