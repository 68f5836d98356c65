/*
 * test_sample_v2.c — the Sample v2 writer (src/out_sample_v2.c) and the JSON
 * pieces it is built from (src/json_write.h).
 *
 * - tm_format_f64 must print doubles exactly as serde_json does (ryu's
 *   shortest digits and format64 layout), because Relay-mode output is
 *   compared byte for byte with Relay's.
 * - tm_jw_seconds prints default-mode timestamps exactly from nanoseconds.
 * - JSON strings are escaped and always valid UTF-8 (bad bytes -> U+FFFD).
 * - Chunk metadata is validated and merged as Relay's expand_perfetto
 *   does: EventIds, required fields, InvalidJson, key order, release,
 *   SDK images first, Sample v2 normalisation (single-sample threads,
 *   DurationIsTooLong, PAC stripping for cocoa).
 * - Default mode: exact timestamps, named threads, platform
 *   without metadata, always valid JSON.
 * - in_app: the default rule per kind of frame, prefixes (longest wins),
 *   never in Relay mode; kept per mapping, but not for kernel addresses.
 * - tm_chunk_meta: metadata read once reads its string fields whatever
 *   else is wrong with it, checks as tm_sample_v2_check_meta and writes as
 *   meta_json does, to the byte and to the error.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/limits.h" /* TM_MAX_META_BYTES */
#include "wire/json_write.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

/* ---- JSON writer helpers ---- */

static char *fmt_f64(double v, char *buf) {
    size_t n = tm_format_f64(v, buf);
    buf[n] = 0;
    return buf;
}

/* Runs one tm_jw call into a fresh buffer; the result is NUL-terminated. */
static tu_membuf jw_capture_str(const char *s, size_t n) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_jw *w = malloc(sizeof *w);
    tm_jw_init(w, &sink);
    tm_str v = {(const uint8_t *)s, n};
    tm_jw_str(w, v);
    cr_assert_eq(tm_jw_finish(w), TM_OK);
    free(w);
    return m;
}

static tu_membuf jw_capture_seconds(int64_t ns) {
    tu_membuf m = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &m};
    tm_jw *w = malloc(sizeof *w);
    tm_jw_init(w, &sink);
    tm_jw_seconds(w, ns);
    cr_assert_eq(tm_jw_finish(w), TM_OK);
    free(w);
    return m;
}

/* ---- trace building ---- */

#define REAL0 1700000001000000000ull   /* REALTIME at the same instant */

static const uint8_t BUILD_ID[20] = {0xb0, 0x3e, 0x4a, 0x7f, 0x5e, 0x88, 0x4c, 0x8d, 0xa0, 0x4b,
                                     0x05, 0xfa, 0x32, 0xcc, 0x4c, 0xbd, 0x69, 0xfa, 0xff, 0x51};

/* Callstack iids interned by add_interned(). */
enum {
    CS_MAIN_FOO = 1,  /* main -> foo, no mapping (addresses 0x1000, 0x2000) */
    CS_EMPTY = 2,     /* [] */
    CS_NATIVE_IMG = 3,/* native_func in libexample.so (build id -> one debug image) */
    CS_JAVA = 4,      /* android.view.View.draw in boot-framework.oat */
    CS_PAC = 5,       /* signed: rel_pc 0x8000001234567, no mapping */
    CS_ODD_NAME = 6   /* function name with quotes, controls and invalid UTF-8 */
};

static const char ODD_NAME[] = "a\"b\\\n\xff\xc0\xafz";

static void add_clock(tb_buf *t) {
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[2] = {TB_BOOT0, REAL0};
    tb_clock_snapshot(t, 0, ids, vals, 2);
}

static void add_interned(tb_buf *t) {
    size_t pkt = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "foo", 3);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "native_func", 11);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 4, "android.view.View.draw", 22);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 5, "signed", 6);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 6, ODD_NAME, sizeof ODD_NAME - 1);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 10, "libexample.so", 13);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 11, "system", 6);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 12, "framework", 9);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 13, "boot-framework.oat", 18);
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 20, BUILD_ID, sizeof BUILD_ID);
    const uint64_t lib_path[1] = {10}, oat_path[3] = {11, 12, 13};
    tb_mapping(t, 1, 20, 0x70000000, 0x70010000, lib_path, 1);
    tb_mapping(t, 2, 0, 0x1000, 0x2000, oat_path, 3);
    tb_frame(t, 1, 1, 0, 0x1000);
    tb_frame(t, 2, 2, 0, 0x2000);
    tb_frame(t, 3, 3, 1, 0x200);
    tb_frame(t, 4, 4, 2, 0x100);
    tb_frame(t, 5, 5, 0, 0x8000001234567ull);
    tb_frame(t, 6, 6, 0, 0x3000);
    const uint64_t main_foo[2] = {1, 2}, img[1] = {3}, java[1] = {4}, pac[1] = {5}, odd[1] = {6};
    tb_callstack(t, CS_MAIN_FOO, main_foo, 2, 0);
    tb_callstack(t, CS_EMPTY, NULL, 0, 0);
    tb_callstack(t, CS_NATIVE_IMG, img, 1, 0);
    tb_callstack(t, CS_JAVA, java, 1, 0);
    tb_callstack(t, CS_PAC, pac, 1, 0);
    tb_callstack(t, CS_ODD_NAME, odd, 1, 1);
    tb_close(t, in);
    tb_close(t, pkt);
}

typedef struct smp {
    uint64_t ts; /* BOOTTIME ns */
    uint32_t pid, tid;
    uint64_t cs;
} smp;

/* clock snapshot + interned data + the given PerfSamples on sequence 1. */
static void build_trace(tb_buf *t, const smp *s, size_t n) {
    add_clock(t);
    add_interned(t);
    for (size_t i = 0; i < n; i++) tb_perf_sample(t, 1, s[i].ts, s[i].pid, s[i].tid, s[i].cs, 0);
}

/* Parses trace in mode and writes it with meta (may be NULL). */
static tm_status convert_opts(const tb_buf *t, const tm_options *opts, const char *meta, int remove_single,
                              tu_membuf *out, tm_error *err) {
    tm_trace *tr = NULL;
    memset(err, 0, sizeof *err);
    tm_status st = tm_trace_parse(t->data, t->len, opts, &tr, err);
    if (st != TM_OK) return st;
    tm_sample_v2_options v2 = {0};
    v2.meta_json = meta;
    v2.meta_len = meta ? strlen(meta) : 0;
    v2.remove_single_samples = remove_single;
    tm_sink sink = {.write = tu_membuf_write, .ctx = out};
    st = tm_write_sample_v2(tr, &v2, &sink, err);
    tm_trace_free(tr);
    return st;
}

static tm_status convert(const tb_buf *t, tm_mode mode, const char *meta, tu_membuf *out, tm_error *err) {
    tm_options opts = {0};
    opts.mode = mode;
    return convert_opts(t, &opts, meta, 0, out, err);
}

/* convert() that must succeed; returns the output (free its data). */
static tu_membuf convert_ok(const tb_buf *t, tm_mode mode, const char *meta) {
    tu_membuf out = {0};
    tm_error err;
    tm_status st = convert(t, mode, meta, &out, &err);
    cr_assert_eq(st, TM_OK, "[%s] %s: %s", mode == TM_MODE_RELAY ? "relay" : "default", tm_status_str(st),
                 err.message);
    return out;
}

static json_t *load_json(const tu_membuf *m) {
    json_error_t je;
    json_t *root = json_loadb(m->data ? m->data : "", m->len, 0, &je);
    cr_assert_not_null(root, "output is not valid JSON (%s at %d): %s", je.text, je.position,
                       m->data ? m->data : "");
    return root;
}

#define META_FIELDS                                                     \
    "\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","                \
    "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\","             \
    "\"platform\":\"android\",\"content_type\":\"perfetto\","           \
    "\"client_sdk\":{\"name\":\"sentry-android\",\"version\":\"1.0\"}"
static const char META[] = "{\"version\":\"2\"," META_FIELDS "}";

static const smp TWO_SAMPLES[2] = {{TB_BOOT0, 42, 42, CS_MAIN_FOO}, {TB_BOOT0 + 10000000, 42, 42, CS_MAIN_FOO}};

/* ==== tm_format_f64 ==================================================== */

Test(format_f64, matches_serde_json_layout) {
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {1700000001.0, "1700000001.0"},
        {1700000001.01, "1700000001.01"},
        {1771278044.23, "1771278044.23"},
        {1771278043.846, "1771278043.846"},
        {0.0, "0.0"},
        {-0.0, "-0.0"},
        {1.0, "1.0"},
        {-1.5, "-1.5"},
        {0.1, "0.1"},
        {0.3, "0.3"},
        {2.0 / 3.0, "0.6666666666666666"},
        {123.456, "123.456"},
        {1e30, "1e30"},
        {1.5e-7, "1.5e-7"},
        {123456789012345680.0, "1.2345678901234568e17"},
        {0.001, "0.001"},
        {0.0001234, "0.0001234"},  /* kk = -3: still decimal */
        {0.00001, "0.00001"},      /* kk = -4 */
        {0.000001, "1e-6"},        /* kk = -5: exponent */
        {1e16, "1e16"},
        {1e15, "1000000000000000.0"},
        {1234567890123456.0, "1234567890123456.0"}, /* 16 digits: still "D.0" */
        {1.5e16, "1.5e16"},
        {1e21, "1e21"},
        {-2.5e-10, "-2.5e-10"},
        {1.7976931348623157e308, "1.7976931348623157e308"},
        {5e-324, "5e-324"},
        {2.2250738585072014e-308, "2.2250738585072014e-308"},
    };
    char buf[64];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_expect_str_eq(fmt_f64(cases[i].v, buf), cases[i].want, "format of %.17g", cases[i].v);
    /* 12345678901234567 is not a double; the nearest is 12345678901234568:
     * 17 digits, kk = 17 > 16 -> exponent form. */
    cr_expect_str_eq(fmt_f64(12345678901234568.0, buf), "1.2345678901234568e16");
}

/* At a power of two the rounding interval is asymmetric (the gap below is
 * half the gap above). ryu still finds the shortest digits that round-trip;
 * the expected strings are Python's repr (same shortest/closest rule) laid out
 * as ryu does. Printing with growing precision and keeping the first that
 * round-trips misses them: the correctly rounded 16-digit value falls in the
 * narrow lower half and does not round-trip, while the next one up does. */
Test(format_f64, powers_of_two_use_shortest_digits) {
    char buf[64];
    cr_expect_str_eq(fmt_f64(ldexp(1.0, -24), buf), "5.960464477539063e-8");
    cr_expect_str_eq(fmt_f64(ldexp(1.0, -44), buf), "5.684341886080802e-14");
    cr_expect_str_eq(fmt_f64(ldexp(1.0, 89), buf), "6.189700196426902e26");
    cr_expect_str_eq(fmt_f64(ldexp(1.0, 122), buf), "5.316911983139664e36");
    /* and ones that were never a problem */
    cr_expect_str_eq(fmt_f64(ldexp(1.0, -1), buf), "0.5");
    cr_expect_str_eq(fmt_f64(ldexp(1.0, 52), buf), "4503599627370496.0");
}

static uint64_t xorshift64(uint64_t *s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

Test(format_f64, random_doubles_round_trip) {
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    char buf[64];
    size_t checked = 0;
    for (int i = 0; i < 200000; i++) {
        uint64_t bits = xorshift64(&seed);
        double v;
        memcpy(&v, &bits, sizeof v);
        if (!isfinite(v)) continue;
        size_t n = tm_format_f64(v, buf);
        cr_assert_lt(n, 32u, "output too long for %a", v);
        buf[n] = 0;
        char *end;
        double back = strtod(buf, &end);
        cr_assert_eq(*end, 0, "'%s' is not a number", buf);
        cr_assert(memcmp(&back, &v, sizeof v) == 0, "%a printed as '%s' reads back as %a", v, buf, back);
        /* serde_json always marks a float: a '.' or an exponent */
        cr_assert(strchr(buf, '.') || strchr(buf, 'e'), "'%s' looks like an integer", buf);
        checked++;
    }
    cr_expect_gt(checked, 190000u);
}

/* Relay's timestamps are whole milliseconds: the shortest digits are the
 * millisecond decimal with trailing zeros trimmed ("1700000001.0"). */
Test(format_f64, millisecond_timestamps_print_as_decimals) {
    uint64_t seed = 12345;
    char buf[64], want[64];
    for (int i = 0; i < 100000; i++) {
        uint64_t ms = 1500000000000ull + xorshift64(&seed) % 400000000000ull;
        double v = (double)ms / 1000.0;
        snprintf(want, sizeof want, "%llu.%03llu", (unsigned long long)(ms / 1000),
                 (unsigned long long)(ms % 1000));
        size_t n = strlen(want);
        while (want[n - 1] == '0' && want[n - 2] != '.') want[--n] = 0;
        cr_assert_str_eq(fmt_f64(v, buf), want, "ms %llu", (unsigned long long)ms);
    }
}

/* ==== tm_jw_seconds (default-mode timestamps) =========================== */

Test(jw_seconds, exact_nanoseconds) {
    static const struct {
        int64_t ns;
        const char *want;
    } cases[] = {
        {1700000001010000000ll, "1700000001.01"},
        {1700000001000000001ll, "1700000001.000000001"},
        {1700000001000000000ll, "1700000001.0"},
        {1700000001999999999ll, "1700000001.999999999"},
        {1771278044230000000ll, "1771278044.23"},
        {1700000001123456789ll, "1700000001.123456789"},
        {0, "0.0"},
        {1, "0.000000001"},
        {999999999, "0.999999999"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tu_membuf m = jw_capture_seconds(cases[i].ns);
        cr_expect_str_eq(m.data, cases[i].want, "ns %lld", (long long)cases[i].ns);
        free(m.data);
    }
}

/* ==== JSON strings ====================================================== */

static void expect_jw_str(const char *in, size_t n, const char *want) {
    tu_membuf m = jw_capture_str(in, n);
    cr_expect_str_eq(m.data, want);
    json_error_t je;
    json_t *v = json_loadb(m.data, m.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    cr_expect_not_null(v, "%s is not a valid JSON string: %s", m.data, je.text);
    json_decref(v);
    free(m.data);
}

#define EXPECT_JW(lit, want) expect_jw_str((lit), sizeof(lit) - 1, (want))
#define FFFD "\xef\xbf\xbd"

Test(json_string, escapes_quote_backslash_and_control_chars) {
    EXPECT_JW("plain", "\"plain\"");
    EXPECT_JW("", "\"\"");
    EXPECT_JW("a\"b", "\"a\\\"b\"");
    EXPECT_JW("a\\b", "\"a\\\\b\"");
    EXPECT_JW("\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\"");
    EXPECT_JW("\x01\x1f", "\"\\u0001\\u001f\""); /* serde_json: lowercase hex */
    EXPECT_JW("a\0b", "\"a\\u0000b\"");           /* embedded NUL is data, not the end */
    EXPECT_JW("\x7f/", "\"\x7f/\"");              /* DEL and '/' are not escaped */
}

Test(json_string, keeps_valid_multibyte_utf8) {
    EXPECT_JW("caf\xc3\xa9", "\"caf\xc3\xa9\"");                  /* U+00E9 */
    EXPECT_JW("\xe2\x82\xac", "\"\xe2\x82\xac\"");                /* U+20AC */
    EXPECT_JW("\xf0\x9f\x98\x80", "\"\xf0\x9f\x98\x80\"");        /* U+1F600 */
    EXPECT_JW("\xf4\x8f\xbf\xbf", "\"\xf4\x8f\xbf\xbf\"");        /* U+10FFFF, the last one */
    EXPECT_JW("\xed\x9f\xbf\xee\x80\x80", "\"\xed\x9f\xbf\xee\x80\x80\""); /* around surrogates */
}

/* json_write.h: "invalid input bytes become U+FFFD" — one per bad byte. */
Test(json_string, replaces_invalid_utf8_bytes) {
    EXPECT_JW("\xff", "\"" FFFD "\"");
    EXPECT_JW("a\x80z", "\"a" FFFD "z\"");                        /* lone continuation */
    EXPECT_JW("\xc0\xaf", "\"" FFFD FFFD "\"");                   /* overlong '/' */
    EXPECT_JW("\xe0\x80\xaf", "\"" FFFD FFFD FFFD "\"");          /* overlong, 3 bytes */
    EXPECT_JW("\xf0\x80\x80\xaf", "\"" FFFD FFFD FFFD FFFD "\""); /* overlong, 4 bytes */
    EXPECT_JW("\xed\xa0\x80", "\"" FFFD FFFD FFFD "\"");          /* surrogate U+D800 */
    EXPECT_JW("\xed\xbf\xbf", "\"" FFFD FFFD FFFD "\"");          /* surrogate U+DFFF */
    EXPECT_JW("\xf4\x90\x80\x80", "\"" FFFD FFFD FFFD FFFD "\""); /* U+110000 */
    EXPECT_JW("x\xe2\x82", "\"x" FFFD FFFD "\"");                 /* truncated at the end */
    EXPECT_JW("\xe2\x82x", "\"" FFFD FFFD "x\"");                 /* truncated mid-string */
    EXPECT_JW("\xc3\xa9\xff\xc3\xa9", "\"\xc3\xa9" FFFD "\xc3\xa9\""); /* valid around bad */
}

/* The plain scan goes in blocks of 16 and 8 bytes, the last one
 * overlapping, and copies as it goes: a byte that needs care is found at
 * every position of strings of every length around those, and in strings
 * longer than the writer reserves at once. */
static void expect_escape_at(size_t len, size_t at, char c, const char *out) {
    char *in = malloc(len), *want = malloc(len + 16);
    memset(in, 'a', len);
    in[at] = c;
    snprintf(want, len + 16, "\"%.*s%s%.*s\"", (int)at, in, out, (int)(len - at - 1), in + at + 1);
    tu_membuf m = jw_capture_str(in, len);
    cr_expect_str_eq(m.data, want, "length %zu, byte %d at %zu", len, (unsigned char)c, at);
    free(m.data);
    free(want);
    free(in);
}

Test(json_string, finds_escapes_at_every_position) {
    static const struct {
        char c;
        const char *out;
    } bytes[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\x1f', "\\u001f"}, {'\xff', FFFD}, {'\x7f', "\x7f"}, {' ', " "}};
    for (size_t b = 0; b < sizeof bytes / sizeof *bytes; b++) {
        for (size_t len = 1; len <= 40; len++)
            for (size_t at = 0; at < len; at++) expect_escape_at(len, at, bytes[b].c, bytes[b].out);
        for (size_t len = 4093; len <= 4097; len++) {
            expect_escape_at(len, 0, bytes[b].c, bytes[b].out);
            expect_escape_at(len, len / 2, bytes[b].c, bytes[b].out);
            expect_escape_at(len, len - 1, bytes[b].c, bytes[b].out);
        }
    }
}

/* Relay stage C drops interned strings that are not UTF-8: the frame
 * keeps its address but has no "function". Default mode repairs them. */
Test(json_string, invalid_utf8_function_names_per_mode) {
    tb_buf t = {0};
    const smp s[2] = {{TB_BOOT0, 42, 42, CS_ODD_NAME}, {TB_BOOT0 + 1000000, 42, 42, CS_ODD_NAME}};
    build_trace(&t, s, 2);
    tu_membuf out = convert_ok(&t, TM_MODE_RELAY, META);
    cr_expect(strstr(out.data, "\"frames\":[{\"instruction_addr\":\"0x3000\",\"platform\":\"native\"}]"),
              "relay frames: %s", out.data);
    free(out.data);

    tu_membuf def = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&def);
    json_t *frame = json_array_get(json_object_get(json_object_get(root, "profile"), "frames"), 0);
    const char *fn = json_string_value(json_object_get(frame, "function"));
    cr_assert_not_null(fn, "default mode lost the function name: %s", def.data);
    cr_expect_str_eq(fn, "a\"b\\\n" FFFD FFFD FFFD "z");
    json_decref(root);
    free(def.data);
    tb_free(&t);
}

/* ==== metadata =========================================================== */

Test(meta, hyphenated_and_uppercase_event_ids_become_32_lowercase_hex) {
    tb_buf t = {0};
    build_trace(&t, TWO_SAMPLES, 2);
    const char *meta = "{\"version\":\"2\",\"chunk_id\":\"0432A0A4-C25F-4697-BF9F-0A2FCBE6A814\","
                       "\"profiler_id\":\"4d229f1d-3807-421b-a62a-5f8bc295d836\",\"platform\":\"android\","
                       "\"client_sdk\":{\"name\":\"s\",\"version\":\"1\"}}";
    tu_membuf out = convert_ok(&t, TM_MODE_RELAY, meta);
    const char *want = "{\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","
                       "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",";
    cr_expect(strncmp(out.data, want, strlen(want)) == 0, "got %s", out.data);
    free(out.data);
    tb_free(&t);
}

Test(meta, invalid_metadata_is_rejected_as_InvalidJson) {
    static const struct {
        const char *why, *json;
    } cases[] = {
        {"not JSON", "not json"},
        {"truncated JSON", "{\"version\":\"2\""},
        {"an array", "[1,2]"},
        {"a string", "\"2\""},
        {"no chunk_id",
         "{\"version\":\"2\",\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"android\","
         "\"client_sdk\":{\"name\":\"s\",\"version\":\"1\"}}"},
        {"chunk_id not a UUID",
         "{\"version\":\"2\",\"chunk_id\":\"xyz\",\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\","
         "\"platform\":\"android\",\"client_sdk\":{\"name\":\"s\",\"version\":\"1\"}}"},
        {"no profiler_id",
         "{\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\",\"platform\":\"android\","
         "\"client_sdk\":{\"name\":\"s\",\"version\":\"1\"}}"},
        {"no client_sdk",
         "{\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","
         "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"android\"}"},
        {"version \"1\"", "{\"version\":\"1\"," META_FIELDS "}"},
        {"version as a number", "{\"version\":2," META_FIELDS "}"},
        {"SDK image of unknown type",
         "{\"version\":\"2\"," META_FIELDS ",\"debug_meta\":{\"images\":[{\"type\":\"elf\","
         "\"uuid\":\"8286fd8c-0a18-4a43-9d1f-a2c0ae9e4e6f\"}]}}"},
    };
    tb_buf t = {0};
    build_trace(&t, TWO_SAMPLES, 2);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (int mode = 0; mode <= 1; mode++) {
            tu_membuf out = {0};
            tm_error err;
            tm_status st = convert(&t, mode ? TM_MODE_RELAY : TM_MODE_DEFAULT, cases[i].json, &out, &err);
            cr_expect_eq(st, TM_ERR_REJECTED, "%s (mode %d): status %s", cases[i].why, mode,
                         tm_status_str(st));
            cr_expect(err.reason && strcmp(err.reason, "InvalidJson") == 0, "%s (mode %d): reason %s",
                      cases[i].why, mode, err.reason ? err.reason : "(null)");
            free(out.data);
        }
    }
    tb_free(&t);
}

/* Empty metadata (an empty --meta file reads as NULL, 0) says what is wrong
 * with it, for both writers, not jansson's "wrong arguments". */
Test(meta, empty_metadata_says_no_json_object) {
    tm_error err;
    cr_expect_eq(tm_sample_v2_check_meta(NULL, 0, &err), TM_ERR_REJECTED);
    cr_expect(strstr(err.message, "expected near end of file"), "v2: %s", err.message);
    cr_expect_eq(tm_sample_v1_check_meta(NULL, 0, &err), TM_ERR_REJECTED);
    cr_expect(strstr(err.message, "expected near end of file"), "v1: %s", err.message);
}

/* Metadata that is not JSON: the offset is the first byte of the token
 * jansson names (it gives the byte after it), in both writers' checks and
 * tm_chunk_meta_check; at the end when the text ends early. */
Test(meta, not_json_points_at_the_token) {
    static const struct {
        const char *json, *at; /* at: where the offset points; NULL: the end */
    } cases[] = {
        {"{\"a\":1} x", "x"},
        {"{\"a\": tru}", "tru}"},
        {"{\"a\": 1,, \"b\": 2}", ", \"b"},
        {"{\"a\": 1, \"a\": 2}", "\"a\": 2"},
        {"  x", "x"},
        {"{\"a\": [1, 2", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *j = cases[i].json;
        size_t len = strlen(j), at = cases[i].at ? (size_t)(strstr(j, cases[i].at) - j) : len;
        tm_error err;
        cr_expect_eq(tm_sample_v2_check_meta(j, len, &err), TM_ERR_REJECTED, "%s", j);
        cr_expect_eq(err.offset, at, "v2 %s: offset %llu, want %zu (%s)", j, (unsigned long long)err.offset, at,
                     err.message);
        cr_expect_eq(tm_sample_v1_check_meta(j, len, &err), TM_ERR_REJECTED, "%s", j);
        cr_expect_eq(err.offset, at, "v1 %s: offset %llu, want %zu (%s)", j, (unsigned long long)err.offset, at,
                     err.message);
        tm_chunk_meta *m = NULL;
        cr_assert_eq(tm_chunk_meta_new(j, len, &m, &err), TM_OK);
        cr_expect_eq(tm_chunk_meta_check(m, &err), TM_ERR_REJECTED, "%s", j);
        cr_expect_eq(err.offset, at, "chunk_meta %s: offset %llu, want %zu", j, (unsigned long long)err.offset, at);
        tm_chunk_meta_free(m);
    }
}

/* expand_perfetto reads the metadata before it converts: a trace
 * without samples (one empty packet) with bad metadata is InvalidJson, not
 * NotEnoughSamples. */
Test(meta, metadata_is_checked_before_the_samples) {
    tb_buf t = {0};
    tb_close(&t, tb_packet_open(&t, 1, 0, 0));
    tu_membuf out = {0};
    tm_error err;
    tm_status st = convert(&t, TM_MODE_RELAY, "{\"version\":\"2\"}", &out, &err);
    cr_expect_eq(st, TM_ERR_REJECTED);
    cr_expect(err.reason && strcmp(err.reason, "InvalidJson") == 0, "reason %s",
              err.reason ? err.reason : "(null)");
    free(out.data);
    tb_free(&t);
}

Test(meta, release_is_null_when_absent_and_kept_when_present) {
    static const struct {
        const char *json, *want;
    } cases[] = {
        {"{\"version\":\"2\"," META_FIELDS "}", "\"release\":null,"},
        {"{\"version\":\"2\"," META_FIELDS ",\"release\":null}", "\"release\":null,"},
        {"{\"version\":\"2\"," META_FIELDS ",\"release\":\"io.example@1.0+7\"}",
         "\"release\":\"io.example@1.0+7\","},
        {"{\"version\":\"2\"," META_FIELDS ",\"release\":\"\"}", "\"release\":\"\","},
    };
    tb_buf t = {0};
    build_trace(&t, TWO_SAMPLES, 2);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tu_membuf out = convert_ok(&t, TM_MODE_RELAY, cases[i].json);
        cr_expect(strstr(out.data, cases[i].want), "case %zu: want %s in %s", i, cases[i].want, out.data);
        free(out.data);
    }
    tb_free(&t);
}

/* Relay's key order, with every optional key present and the metadata's own
 * keys deliberately shuffled; unknown keys (timestamp, foo, SDK packages) are
 * dropped; the SDK's proguard image stays in front of converted images. */
Test(meta, top_level_key_order_and_sdk_images_first) {
    const char *meta =
        "{\"timestamp\":1700000001.5,\"foo\":\"bar\",\"release\":\"1.0\",\"environment\":\"production\","
        "\"debug_meta\":{\"images\":[{\"uuid\":\"8286fd8c-0a18-4a43-9d1f-a2c0ae9e4e6f\","
        "\"type\":\"proguard\"}]},\"version\":\"2\","
        "\"client_sdk\":{\"packages\":[],\"version\":\"8.0.0\",\"name\":\"sentry.java.android\"},"
        "\"content_type\":\"perfetto\",\"platform\":\"android\","
        "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\","
        "\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\"}";
    tb_buf t = {0};
    const smp s[2] = {{TB_BOOT0, 42, 42, CS_NATIVE_IMG}, {TB_BOOT0 + 10000000, 42, 42, CS_NATIVE_IMG}};
    build_trace(&t, s, 2);
    tu_membuf out = convert_ok(&t, TM_MODE_RELAY, meta);
    json_t *root = load_json(&out);
    static const char *const order[] = {"chunk_id", "profiler_id", "debug_meta", "environment", "platform",
                                        "content_type", "release", "client_sdk", "version", "profile"};
    size_t i = 0;
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        cr_expect(i < sizeof order / sizeof *order && strcmp(key, order[i]) == 0,
                  "key %zu is %s, want %s", i, key, i < sizeof order / sizeof *order ? order[i] : "(end)");
        i++;
    }
    cr_expect_eq(i, sizeof order / sizeof *order, "%zu top-level keys in %s", i, out.data);
    json_decref(root);
    const char *images =
        "\"debug_meta\":{\"images\":["
        "{\"type\":\"proguard\",\"uuid\":\"8286fd8c-0a18-4a43-9d1f-a2c0ae9e4e6f\"},"
        "{\"code_file\":\"libexample.so\",\"debug_id\":\"7f4a3eb0-885e-8d4c-a04b-05fa32cc4cbd\","
        "\"type\":\"symbolic\",\"image_addr\":\"0x70000000\",\"image_vmaddr\":\"0x0\","
        "\"image_size\":65536}]}";
    cr_expect(strstr(out.data, images), "images: %s", out.data);
    cr_expect(strstr(out.data, "\"environment\":\"production\",\"platform\":\"android\""), "%s", out.data);
    cr_expect(strstr(out.data, "\"client_sdk\":{\"name\":\"sentry.java.android\",\"version\":\"8.0.0\"},"
                               "\"version\":\"2\",\"profile\":{"), "%s", out.data);
    cr_expect_null(strstr(out.data, "\"foo\""), "unknown key kept: %s", out.data);
    cr_expect_null(strstr(out.data, "\"packages\""), "client_sdk.packages kept: %s", out.data);
    free(out.data);
    tb_free(&t);
}

/* ==== Sample v2 normalisation ========================================== */

static tm_status convert_two(tm_mode mode, uint64_t span_ns, const tm_limits *lim, tu_membuf *out,
                             tm_error *err) {
    tb_buf t = {0};
    const smp s[2] = {{TB_BOOT0, 42, 42, CS_MAIN_FOO}, {TB_BOOT0 + span_ns, 42, 42, CS_MAIN_FOO}};
    build_trace(&t, s, 2);
    tm_options opts = {0};
    opts.mode = mode;
    if (lim) opts.limits = *lim;
    tm_status st = convert_opts(&t, &opts, mode == TM_MODE_RELAY ? META : NULL, 0, out, err);
    tb_free(&t);
    return st;
}

static void expect_reason(tm_status st, const tm_error *err, const char *reason, const char *what) {
    cr_expect_eq(st, TM_ERR_REJECTED, "%s: status %s", what, tm_status_str(st));
    cr_expect(err->reason && strcmp(err->reason, reason) == 0, "%s: reason %s, want %s", what,
              err->reason ? err->reason : "(null)", reason);
}

Test(duration, relay_rejects_chunks_longer_than_66_s) {
    tu_membuf out = {0};
    tm_error err;
    expect_reason(convert_two(TM_MODE_RELAY, 66001000000ull, NULL, &out, &err), &err, "DurationIsTooLong",
                  "66.001 s");
    expect_reason(convert_two(TM_MODE_RELAY, 3600000000000ull, NULL, &out, &err), &err, "DurationIsTooLong",
                  "1 h");
    cr_expect_eq(convert_two(TM_MODE_RELAY, 66000000000ull, NULL, &out, &err), TM_OK, "66 s exactly: %s",
                 err.message);
    free(out.data);
}

/* normalize() runs on the converted samples, whose timestamps are already
 * rounded to milliseconds: 66.0004 s becomes 66.000 s. */
Test(duration, relay_measures_the_ms_rounded_timestamps) {
    tu_membuf out = {0};
    tm_error err;
    tm_status st = convert_two(TM_MODE_RELAY, 66000400000ull, NULL, &out, &err);
    cr_expect_eq(st, TM_OK, "66.0004 s raw = 66.000 s rounded: %s %s", err.reason ? err.reason : "",
                 err.message);
    if (st == TM_OK)
        cr_expect(strstr(out.data, "{\"timestamp\":1700000067.0,"), "%s", out.data);
    free(out.data);
}

Test(duration, default_mode_has_no_limit_unless_configured) {
    tu_membuf out = {0};
    tm_error err;
    cr_expect_eq(convert_two(TM_MODE_DEFAULT, 3600000000000ull, NULL, &out, &err), TM_OK, "1 h: %s",
                 err.message);
    tm_limits lim = {0};
    lim.max_chunk_duration_ns = 10000000000ull;
    expect_reason(convert_two(TM_MODE_DEFAULT, 10000000001ull, &lim, &out, &err), &err, "DurationIsTooLong",
                  "10 s + 1 ns with a 10 s limit");
    cr_expect_eq(convert_two(TM_MODE_DEFAULT, 10000000000ull, &lim, &out, &err), TM_OK, "10 s: %s",
                 err.message);
    free(out.data);
    /* the writer's limit, not the decoder's: a trace far longer parses */
    tb_buf t = {0};
    const smp s[2] = {{TB_BOOT0, 42, 42, CS_MAIN_FOO}, {TB_BOOT0 + 3600000000000ull, 42, 42, CS_MAIN_FOO}};
    build_trace(&t, s, 2);
    tm_options opts = {0};
    opts.limits.max_chunk_duration_ns = 1;
    tm_trace *tr = NULL;
    cr_expect_eq(tm_trace_parse(t.data, t.len, &opts, &tr, &err), TM_OK, "%s", err.message);
    tm_trace_free(tr);
    tb_free(&t);
}

/* Normalisation: threads with <= 1 non-empty sample lose all their samples,
 * and a later step drops their thread_metadata. */
Test(normalize, remove_single_samples_drops_whole_threads) {
    tb_buf t = {0};
    const smp s[4] = {{TB_BOOT0, 42, 42, CS_MAIN_FOO},
                      {TB_BOOT0 + 10000000, 42, 42, CS_EMPTY},
                      {TB_BOOT0 + 20000000, 42, 43, CS_MAIN_FOO},
                      {TB_BOOT0 + 30000000, 42, 43, CS_MAIN_FOO}};
    build_trace(&t, s, 4);
    tm_options opts = {0};
    opts.mode = TM_MODE_RELAY;
    for (int rs = 0; rs <= 1; rs++) {
        tu_membuf out = {0};
        tm_error err;
        cr_assert_eq(convert_opts(&t, &opts, META, rs, &out, &err), TM_OK, "%s", err.message);
        json_t *root = load_json(&out);
        json_t *prof = json_object_get(root, "profile");
        json_t *samples = json_object_get(prof, "samples");
        cr_expect_eq(json_array_size(samples), rs ? 2u : 4u, "rs=%d: %s", rs, out.data);
        for (size_t i = 0; rs && i < json_array_size(samples); i++)
            cr_expect_str_eq(json_string_value(json_object_get(json_array_get(samples, i), "thread_id")),
                             "43");
        json_t *tm = json_object_get(prof, "thread_metadata");
        if (rs) cr_expect_null(tm, "thread_metadata of a dropped thread kept: %s", out.data);
        else cr_expect(strstr(out.data, "\"thread_metadata\":{\"42\":{\"name\":\"main\"}}"), "%s", out.data);
        /* stacks and frames are not pruned */
        cr_expect(strstr(out.data, "\"stacks\":[[1,0],[]]"), "%s", out.data);
        json_decref(root);
        free(out.data);
    }
    tb_free(&t);
}

/* Normalisation: pointer-authentication bits are stripped (mask
 * 0x0000000FFFFFFFFF) from instruction_addr only when platform is cocoa. */
Test(normalize, pointer_auth_bits_stripped_only_for_cocoa) {
    tb_buf t = {0};
    const smp s[2] = {{TB_BOOT0, 42, 42, CS_PAC}, {TB_BOOT0 + 1000000, 42, 42, CS_PAC}};
    build_trace(&t, s, 2);
    tu_membuf out = convert_ok(&t, TM_MODE_RELAY, META);
    cr_expect(strstr(out.data, "\"instruction_addr\":\"0x8000001234567\""), "android: %s", out.data);
    free(out.data);
    const char *cocoa = "{\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\","
                        "\"profiler_id\":\"4d229f1d3807421ba62a5f8bc295d836\",\"platform\":\"cocoa\","
                        "\"client_sdk\":{\"name\":\"sentry.cocoa\",\"version\":\"1.0\"}}";
    tu_membuf out2 = convert_ok(&t, TM_MODE_RELAY, cocoa);
    cr_expect(strstr(out2.data, "\"instruction_addr\":\"0x1234567\""), "cocoa: %s", out2.data);
    free(out2.data);
    tb_free(&t);
}

/* ==== default mode ======================================================= */

/* A ProcessTree naming threads 42 (the main thread), 43 and 44. */
static void add_process_tree(tb_buf *t) {
    static const struct {
        uint32_t tid;
        const char *name;
    } th[] = {{42, "com.example.app"}, {43, "RenderThread"}, {44, "NeverSampled"}};
    size_t pkt = tb_open(t, TM_PF_TRACE_PACKET);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    for (size_t i = 0; i < sizeof th / sizeof *th; i++) tb_pt_thread(t, th[i].tid, 42, th[i].name);
    tb_close(t, pt);
    tb_close(t, pkt);
}

Test(default_mode, named_threads_with_samples_appear_and_pid_thread_is_main) {
    tb_buf t = {0};
    add_process_tree(&t);
    const smp s[4] = {{TB_BOOT0, 42, 42, CS_MAIN_FOO},
                      {TB_BOOT0 + 1000000, 42, 43, CS_MAIN_FOO},
                      {TB_BOOT0 + 2000000, 42, 43, CS_MAIN_FOO},
                      {TB_BOOT0 + 3000000, 42, 45, CS_MAIN_FOO}};
    build_trace(&t, s, 4);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&out);
    json_t *tm = json_object_get(json_object_get(root, "profile"), "thread_metadata");
    cr_assert(json_is_object(tm), "no thread_metadata: %s", out.data);
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(tm, "42"), "name")), "main");
    cr_expect_str_eq(json_string_value(json_object_get(json_object_get(tm, "43"), "name")), "RenderThread");
    cr_expect_null(json_object_get(tm, "44"), "thread without samples listed: %s", out.data);
    json_decref(root);
    free(out.data);
    tb_free(&t);
}

Test(default_mode, timestamps_are_exact_nanoseconds_and_sorted) {
    tb_buf t = {0};
    const smp s[3] = {{TB_BOOT0 + 10000000, 42, 42, CS_MAIN_FOO},
                      {TB_BOOT0, 42, 42, CS_MAIN_FOO},
                      {TB_BOOT0 + 1, 42, 42, CS_MAIN_FOO}};
    build_trace(&t, s, 3);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    cr_expect(strstr(out.data, "\"samples\":["
                               "{\"timestamp\":1700000001.0,\"stack_id\":0,\"thread_id\":\"42\"},"
                               "{\"timestamp\":1700000001.000000001,\"stack_id\":0,\"thread_id\":\"42\"},"
                               "{\"timestamp\":1700000001.01,\"stack_id\":0,\"thread_id\":\"42\"}]"),
              "%s", out.data);
    free(out.data);
    /* Relay mode rounds the same samples to milliseconds. */
    tu_membuf rel = convert_ok(&t, TM_MODE_RELAY, META);
    cr_expect(strstr(rel.data, "\"samples\":["
                               "{\"timestamp\":1700000001.0,\"stack_id\":0,\"thread_id\":\"42\"},"
                               "{\"timestamp\":1700000001.0,\"stack_id\":0,\"thread_id\":\"42\"},"
                               "{\"timestamp\":1700000001.01,\"stack_id\":0,\"thread_id\":\"42\"}]"),
              "%s", rel.data);
    free(rel.data);
    tb_free(&t);
}

Test(default_mode, platform_without_meta_depends_on_java_frames) {
    static const struct {
        uint64_t cs;
        const char *platform;
    } cases[] = {{CS_MAIN_FOO, "native"}, {CS_NATIVE_IMG, "native"}, {CS_JAVA, "android"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tb_buf t = {0};
        const smp s[2] = {{TB_BOOT0, 42, 42, cases[i].cs}, {TB_BOOT0 + 1000000, 42, 42, cases[i].cs}};
        build_trace(&t, s, 2);
        tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
        json_t *root = load_json(&out);
        cr_expect_str_eq(json_string_value(json_object_get(root, "platform")), cases[i].platform,
                         "case %zu: %s", i, out.data);
        json_decref(root);
        free(out.data);
        tb_free(&t);
    }
}

/* A frame's instruction_addr lies inside its debug_meta image, so that
 * Sentry finds the image and symbolicates it (instruction_addr - image_addr
 * + image_vmaddr = the ELF address rel_pc): a PIE's text mapping, as
 * `tracemill record` writes it, starts at file offset 0x1000, and a frame
 * near its end (rel_pc 0x2f00 of [0x1000, 0x3000)) used to get start +
 * rel_pc, past the image's end. The image now starts where the ELF does.
 * Relay's converter keeps start + rel_pc and image_addr = start. */
Test(default_mode, instruction_addr_is_inside_its_image) {
    tb_buf t = {0};
    add_clock(&t);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "tail_func", 9);
    tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 10, "prog", 4);
    tb_interned_string(&t, TM_PF_INTERNED_BUILD_IDS, 20, BUILD_ID, sizeof BUILD_ID);
    size_t m = tb_open(&t, TM_PF_INTERNED_MAPPINGS);
    tb_uint(&t, TM_PF_INTERNED_IID, 1);
    tb_uint(&t, TM_PF_MAPPING_BUILD_ID, 20);
    tb_uint(&t, TM_PF_MAPPING_START, 0x55d000001000);
    tb_uint(&t, TM_PF_MAPPING_END, 0x55d000003000);
    tb_uint(&t, TM_PF_MAPPING_LOAD_BIAS, 0);
    tb_uint(&t, TM_PF_MAPPING_EXACT_OFFSET, 0x1000);
    tb_uint(&t, TM_PF_MAPPING_PATH_STRING_IDS, 10);
    tb_close(&t, m);
    tb_frame(&t, 1, 1, 1, 0x2f00);
    const uint64_t frames[1] = {1};
    tb_callstack(&t, 1, frames, 1, 0);
    tb_close(&t, in);
    tb_close(&t, pkt);
    tb_perf_sample(&t, 1, TB_BOOT0, 42, 42, 1, 0);
    tb_perf_sample(&t, 1, TB_BOOT0 + 1000000, 42, 42, 1, 0);
    static const struct {
        tm_mode mode;
        const char *addr, *image_addr;
        json_int_t image_size;
    } cases[] = {{TM_MODE_DEFAULT, "0x55d000002f00", "0x55d000000000", 0x3000},
                 {TM_MODE_RELAY, "0x55d000003f00", "0x55d000001000", 0x2000}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tu_membuf out = convert_ok(&t, cases[c].mode, NULL);
        json_t *root = load_json(&out);
        json_t *frame = json_array_get(json_object_get(json_object_get(root, "profile"), "frames"), 0);
        json_t *image = json_array_get(json_object_get(json_object_get(root, "debug_meta"), "images"), 0);
        cr_expect_str_eq(json_string_value(json_object_get(frame, "instruction_addr")), cases[c].addr, "%s", out.data);
        cr_expect_str_eq(json_string_value(json_object_get(image, "image_addr")), cases[c].image_addr, "%s", out.data);
        cr_expect_eq(json_integer_value(json_object_get(image, "image_size")), cases[c].image_size, "%s", out.data);
        json_decref(root);
        free(out.data);
    }
    tb_free(&t);
}

/* Default mode: without --meta the output still holds version, platform,
 * profile and debug_meta, and nothing invented (no chunk_id, no release). */
Test(default_mode, output_without_meta_has_no_chunk_ids) {
    tb_buf t = {0};
    const smp s[3] = {{TB_BOOT0, 42, 42, CS_NATIVE_IMG},
                      {TB_BOOT0 + 1000000, 42, 42, CS_JAVA},
                      {TB_BOOT0 + 2000000, 42, 42, CS_ODD_NAME}};
    build_trace(&t, s, 3);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&out);
    cr_expect_null(json_object_get(root, "chunk_id"), "%s", out.data);
    cr_expect_null(json_object_get(root, "profiler_id"), "%s", out.data);
    cr_expect_str_eq(json_string_value(json_object_get(root, "version")), "2");
    cr_expect_str_eq(json_string_value(json_object_get(root, "platform")), "android");
    cr_expect(json_is_object(json_object_get(root, "profile")), "%s", out.data);
    json_t *images = json_object_get(json_object_get(root, "debug_meta"), "images");
    cr_expect_eq(json_array_size(images), 1u, "%s", out.data);
    /* default mode writes image_vmaddr only when the mapping has a load bias */
    cr_expect_null(json_object_get(json_array_get(images, 0), "image_vmaddr"), "%s", out.data);
    cr_expect_eq(json_array_size(json_object_get(json_object_get(root, "profile"), "samples")), 3u);
    json_decref(root);
    free(out.data);

    /* with metadata the default mode merges it like Relay does */
    tu_membuf m = convert_ok(&t, TM_MODE_DEFAULT, META);
    root = load_json(&m);
    cr_expect_str_eq(json_string_value(json_object_get(root, "chunk_id")),
                     "0432a0a4c25f4697bf9f0a2fcbe6a814");
    cr_expect(json_is_null(json_object_get(root, "release")), "%s", m.data);
    json_decref(root);
    free(m.data);
    tb_free(&t);
}

/* The sample writer formats seconds on its own fast path (cached integer
 * part, 3-digit groups); it must agree with tm_jw_seconds on every kind of
 * fraction: zero, single nanoseconds, group boundaries, trailing zeros. */
Test(default_mode, sample_timestamps_match_exact_seconds_for_every_fraction) {
    /* repeated times too: a record reuses the last one's text */
    static const uint64_t fractions[] = {0,       0,         1,         10,        100,       999,       1000,
                                         1001,    10000,     100000,    999999,    1000000,   1000001,   1000001,
                                         1010000, 100000000, 123456789, 500000000, 999999999, 1000000000,
                                         1000000000, 1000000001, 61000000000ull};
    const size_t n = sizeof fractions / sizeof *fractions;
    smp s[sizeof fractions / sizeof *fractions];
    for (size_t i = 0; i < n; i++) {
        s[i].ts = TB_BOOT0 + fractions[i];
        s[i].pid = 42;
        s[i].tid = 42;
        s[i].cs = CS_MAIN_FOO;
    }
    tb_buf t = {0};
    build_trace(&t, s, n);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    const char *cur = out.data;
    for (size_t i = 0; i < n; i++) {
        tu_membuf want = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &want};
        tm_jw w;
        tm_jw_init(&w, &sink);
        tm_jw_lit(&w, "{\"timestamp\":");
        tm_jw_seconds(&w, (int64_t)(REAL0 + fractions[i]));
        tm_jw_lit(&w, ",");
        cr_assert_eq(tm_jw_finish(&w), TM_OK);
        const char *hit = strstr(cur, want.data);
        cr_expect(hit != NULL, "fraction %llu: expected %s in order in %s", (unsigned long long)fractions[i],
                  want.data, out.data);
        if (hit) cur = hit + want.len;
        free(want.data);
    }
    free(out.data);
    tb_free(&t);
}

/* The fast path keeps the text of the last time's millisecond and second:
 * over a random walk of times (repeats, steps of a few ns, whole us and ms,
 * across ms and second boundaries, long jumps) every record's time must be
 * tm_jw_seconds' text. */
Test(default_mode, sample_timestamps_of_a_random_walk_match_exact_seconds) {
    enum { N = 4000 };
    static const uint64_t steps[] = {0, 1, 7, 999, 1000, 2000, 999000, 1000000, 1000001, 3000000, 999999999,
                                     1000000000};
    smp *s = malloc(N * sizeof *s);
    uint64_t seed = 0x2545f4914f6cdd1dull, at = 0;
    for (size_t i = 0; i < N; i++) {
        uint64_t r = xorshift64(&seed);
        uint64_t step = r % 3 ? steps[r / 3 % (sizeof steps / sizeof *steps)] : r / 3 % 2000000;
        at += step;
        s[i] = (smp){TB_BOOT0 + at, 42, 42, CS_MAIN_FOO};
    }
    tb_buf t = {0};
    build_trace(&t, s, N);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    const char *cur = out.data;
    for (size_t i = 0; i < N; i++) {
        tu_membuf want = jw_capture_seconds((int64_t)(REAL0 + (s[i].ts - TB_BOOT0)));
        char key[64];
        snprintf(key, sizeof key, "{\"timestamp\":%.*s,", (int)want.len, want.data);
        const char *hit = strstr(cur, key);
        cr_assert(hit != NULL, "sample %zu: expected %s in order", i, key);
        cur = hit + strlen(key);
        free(want.data);
    }
    free(out.data);
    free(s);
    tb_free(&t);
}

/* A record's stack and thread come from its (stack, thread) pair's text,
 * made at the pair's first record, or, with more pairs than samples, from
 * the stack's text and the thread's. Both ways (and with a thread dropped
 * for its single sample) each record names its own sample's stack and
 * thread. */
Test(default_mode, records_name_their_stack_and_thread_with_few_or_many_pairs) {
    static const uint64_t stacks[] = {CS_MAIN_FOO, CS_NATIVE_IMG, CS_JAVA};
    static const uint32_t tids[] = {7, 123456789, 42};
    for (size_t n = 4; n <= 40; n += 36) { /* 9 pairs: more than 4 samples, fewer than 40 */
        for (int rs = 0; rs <= 1; rs++) {
            smp s[41];
            for (size_t i = 0; i < n; i++)
                s[i] = (smp){TB_BOOT0 + 1000 * i, 42, tids[i / 2 % 3], stacks[i * 7 / 3 % 3]};
            s[n] = (smp){TB_BOOT0 + 1000 * n, 99, 99, CS_MAIN_FOO}; /* thread 99, a main thread: one sample */
            tb_buf t = {0};
            build_trace(&t, s, n + 1);
            tu_membuf out = {0};
            tm_error err;
            tm_options opts = {0};
            cr_assert_eq(convert_opts(&t, &opts, NULL, rs, &out, &err), TM_OK, "%s", err.message);
            json_t *root = load_json(&out);
            json_t *profile = json_object_get(root, "profile");
            json_t *samples = json_object_get(profile, "samples");
            cr_assert_eq(json_array_size(samples), n + !rs, "n %zu, rs %d: %s", n, rs, out.data);
            for (size_t i = 0; i < json_array_size(samples); i++) {
                json_t *r = json_array_get(samples, i);
                char tid[16];
                snprintf(tid, sizeof tid, "%u", (unsigned)s[i].tid);
                cr_expect_str_eq(json_string_value(json_object_get(r, "thread_id")), tid, "sample %zu", i);
                for (size_t j = 0; j < i; j++) /* the same stack id exactly for the same callstack */
                    cr_expect_eq(json_integer_value(json_object_get(r, "stack_id")) ==
                                     json_integer_value(json_object_get(json_array_get(samples, j), "stack_id")),
                                 s[i].cs == s[j].cs, "samples %zu and %zu", j, i);
            }
            cr_expect_eq(json_object_get(json_object_get(profile, "thread_metadata"), "99") != NULL, !rs);
            json_decref(root);
            free(out.data);
            tb_free(&t);
        }
    }
}

/* Stack and frame ids are written from texts counted up one from the
 * other: their digits stay right where a number gains one (9, 99, ...,
 * 9999 and on). One frame a stack, one sample a stack, the frames in
 * stack order. */
Test(default_mode, stack_and_frame_ids_past_ten_thousand) {
    enum { N = 10005 };
    tb_buf t = {0};
    add_clock(&t);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "f", 1);
    for (uint64_t i = 1; i <= N; i++) {
        tb_frame(&t, i, 1, 0, 0x1000 + 16 * i);
        tb_callstack(&t, i, &i, 1, 0);
    }
    tb_close(&t, in);
    tb_close(&t, pkt);
    for (uint64_t i = 1; i <= N; i++) tb_perf_sample(&t, 1, TB_BOOT0 + 1000 * i, 42, 42, i, 0);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&out);
    json_t *profile = json_object_get(root, "profile");
    json_t *samples = json_object_get(profile, "samples"), *stacks = json_object_get(profile, "stacks");
    cr_assert_eq(json_array_size(samples), N);
    cr_assert_eq(json_array_size(stacks), N);
    cr_assert_eq(json_array_size(json_object_get(profile, "frames")), N);
    for (size_t i = 0; i < N; i++) {
        json_t *stack = json_array_get(stacks, i);
        cr_expect_eq(json_integer_value(json_object_get(json_array_get(samples, i), "stack_id")), (json_int_t)i);
        cr_expect_eq(json_array_size(stack), 1);
        cr_expect_eq(json_integer_value(json_array_get(stack, 0)), (json_int_t)i);
    }
    json_decref(root);
    free(out.data);
    tb_free(&t);
}

/* A frame is written in place, its strings up to 512 bytes with it and
 * longer ones or ones that need escaping apart: every function name comes
 * back as it went in. */
Test(default_mode, frame_strings_of_every_kind_read_back) {
    static const size_t lens[] = {1, 511, 512, 513, 600, 3000, 5000};
    enum { N = sizeof lens / sizeof *lens };
    char *names[2 * N];
    tb_buf t = {0};
    add_clock(&t);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    for (size_t i = 0; i < 2 * N; i++) { /* plain, then with a quote in the middle */
        size_t len = lens[i % N];
        names[i] = malloc(len + 1);
        memset(names[i], 'a' + (char)(i % 26), len);
        names[i][len] = 0;
        if (i >= N) names[i][len / 2] = '"';
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, i + 1, names[i], len);
    }
    uint64_t ids[2 * N];
    for (size_t i = 0; i < 2 * N; i++) {
        tb_frame(&t, i + 1, i + 1, 0, 0x1000 + 16 * i);
        ids[i] = i + 1;
    }
    tb_callstack(&t, 1, ids, 2 * N, 0);
    tb_close(&t, in);
    tb_close(&t, pkt);
    tb_perf_sample(&t, 1, TB_BOOT0, 42, 42, 1, 0);
    tb_perf_sample(&t, 1, TB_BOOT0 + 1000, 42, 42, 1, 0);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&out);
    json_t *frames = json_object_get(json_object_get(root, "profile"), "frames");
    cr_assert_eq(json_array_size(frames), 2 * N);
    for (size_t i = 0; i < 2 * N; i++) {
        json_t *f = json_array_get(frames, i);
        const char *fn = json_string_value(json_object_get(f, "function"));
        int found = 0;
        for (size_t j = 0; j < 2 * N && fn; j++) found |= strcmp(fn, names[j]) == 0;
        cr_expect(found, "frame %zu: function %.40s... is none of the names", i, fn ? fn : "(none)");
    }
    json_decref(root);
    free(out.data);
    for (size_t i = 0; i < 2 * N; i++) free(names[i]);
    tb_free(&t);
}

/* A system-wide trace: kernel thread 50 and single-threaded process 60
 * described only as processes, thread 42 named by the tree, 61 and the
 * main thread of 70 named by nothing. */
static void build_system_wide(tb_buf *t) {
    static const struct {
        uint32_t pid;
        const char *cmdline;
    } pr[] = {{50, "kworker/0:1"}, {60, "/usr/bin/single"}};
    size_t pkt = tb_open(t, TM_PF_TRACE_PACKET);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    for (size_t i = 0; i < sizeof pr / sizeof *pr; i++) {
        size_t p = tb_open(t, TM_PF_PROCESS_TREE_PROCESSES);
        tb_uint(t, 1, pr[i].pid);
        tb_str(t, TM_PF_PROCESS_CMDLINE, pr[i].cmdline);
        tb_close(t, p);
    }
    tb_pt_thread(t, 42, 42, "com.example.app");
    tb_close(t, pt);
    tb_close(t, pkt);
    const smp s[5] = {{TB_BOOT0, 42, 42, CS_MAIN_FOO},
                      {TB_BOOT0 + 1000000, 50, 50, CS_MAIN_FOO},
                      {TB_BOOT0 + 2000000, 60, 60, CS_MAIN_FOO},
                      {TB_BOOT0 + 3000000, 60, 61, CS_MAIN_FOO},
                      {TB_BOOT0 + 4000000, 70, 70, CS_MAIN_FOO}};
    build_trace(t, s, 5);
}

static const char *thread_name(json_t *tm, const char *tid) {
    return json_string_value(json_object_get(json_object_get(tm, tid), "name"));
}

/* The default mode names a main thread without a name of its own after its
 * process, so `--thread main` no longer merges unrelated processes; Relay
 * compat keeps "main" for the observed pid only. */
Test(default_mode, unnamed_main_thread_takes_its_process_name) {
    tb_buf t = {0};
    build_system_wide(&t);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&out);
    json_t *tm = json_object_get(json_object_get(root, "profile"), "thread_metadata");
    cr_expect_str_eq(thread_name(tm, "42"), "main"); /* a named main thread stays "main" */
    cr_expect_str_eq(thread_name(tm, "50"), "kworker/0:1");
    cr_expect_str_eq(thread_name(tm, "60"), "/usr/bin/single");
    cr_expect_str_eq(thread_name(tm, "70"), "main"); /* no process name known */
    cr_expect_null(json_object_get(tm, "61"), "%s", out.data);
    json_decref(root);
    free(out.data);

    tu_membuf rel = convert_ok(&t, TM_MODE_RELAY, META);
    cr_expect(strstr(rel.data, "\"thread_metadata\":{\"42\":{\"name\":\"main\"}}"), "%s", rel.data);
    free(rel.data);

    /* The label other outputs and `--thread` use: "main" picks only 70. */
    tm_options opts = {0};
    tm_trace *tr = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(t.data, t.len, &opts, &tr, &err), TM_OK, "%s", err.message);
    tm_folded_options fo = {0};
    fo.thread_prefix = 1;
    fo.threads.name = "main";
    tu_membuf folded = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &folded};
    cr_assert_eq(tm_write_folded(tr, &fo, &sink, &err), TM_OK, "%s", err.message);
    cr_expect(strncmp(folded.data, "main;", 5) == 0 && !strchr(folded.data, '\n')[1], "%s", folded.data);
    cr_expect(strstr(folded.data, " 1\n"), "%s", folded.data);
    free(folded.data);
    tm_trace_free(tr);
    tb_free(&t);
}

/* Both modes count the same threads unnamed: no name of their own and, for
 * a main thread, none from its process; the "main" placeholder is no name.
 * Relay mode reads no names (Relay's reading), so it counts every one. */
Test(default_mode, threads_without_name_same_rule_in_both_modes) {
    tb_buf t = {0};
    build_system_wide(&t);
    const struct { tm_mode mode; uint64_t unnamed; } want[] = {{TM_MODE_DEFAULT, 2}, {TM_MODE_RELAY, 5}};
    for (size_t i = 0; i < 2; i++) {
        tm_options opts = {0};
        opts.mode = want[i].mode;
        tm_trace *tr = NULL;
        tm_error err;
        cr_assert_eq(tm_trace_parse(t.data, t.len, &opts, &tr, &err), TM_OK, "%s", err.message);
        cr_expect_eq(tm_trace_get_stats(tr)->threads_without_name, want[i].unnamed, "mode %d: %llu", (int)want[i].mode,
                     (unsigned long long)tm_trace_get_stats(tr)->threads_without_name);
        tm_trace_free(tr);
    }
    tb_free(&t);
}

/* ---- in_app ---- */

/* One stack over frames of every kind the default rule tells apart, read
 * from a Sample v2 chunk (its own in_app keys are not read). */
static const char IN_APP_CHUNK[] =
    "{\"version\":\"2\",\"platform\":\"android\",\"profile\":{"
    "\"samples\":[{\"timestamp\":1700000000.0,\"stack_id\":0,\"thread_id\":\"1\"},"
    "{\"timestamp\":1700000000.01,\"stack_id\":0,\"thread_id\":\"1\"}],"
    "\"stacks\":[[0,1,2,3,4,5,6,7,8]],\"frames\":["
    "{\"function\":\"main\",\"package\":\"/home/u/app/bin/prog\",\"instruction_addr\":\"0x401000\"},"
    "{\"function\":\"memcpy\",\"package\":\"/usr/lib/x86_64-linux-gnu/libc.so.6\",\"instruction_addr\":\"0x7f0000001000\"},"
    "{\"function\":\"clock_gettime\",\"package\":\"[vdso]\",\"instruction_addr\":\"0x7ffd00001000\"},"
    "{\"function\":\"do_syscall_64\",\"instruction_addr\":\"0xffffffff81000000\"},"
    "{\"function\":\"onDraw\",\"module\":\"com.example.CanvasView\",\"platform\":\"java\",\"in_app\":false},"
    "{\"function\":\"draw\",\"module\":\"android.view.View\",\"platform\":\"java\"},"
    "{\"instruction_addr\":\"0x1234\"},"
    "{\"function\":\"render\",\"package\":\"data/app/~~x/com.example-1/lib/arm64/libgame.so\",\"instruction_addr\":\"0x7a00001000\"},"
    "{\"function\":\"Invoke\",\"package\":\"/apex/com.android.art/lib64/libart.so\",\"instruction_addr\":\"0x7b00001000\"}]}}";

/* The in_app value of each frame of a written chunk, in order: 't', 'f' or
 * '-' (no key). */
static void in_app_of_frames(const tu_membuf *out, char *got, size_t cap) {
    json_error_t e;
    json_t *root = json_loadb(out->data, out->len, 0, &e);
    cr_assert_not_null(root, "%s", e.text);
    json_t *frames = json_object_get(json_object_get(root, "profile"), "frames");
    size_t n = json_array_size(frames);
    cr_assert_lt(n, cap);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_object_get(json_array_get(frames, i), "in_app");
        got[i] = !v ? '-' : json_is_true(v) ? 't' : 'f';
    }
    got[n] = 0;
    json_decref(root);
}

static void write_in_app(const tm_trace *t, const tm_sample_v2_options *o, char *got, size_t cap) {
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    cr_assert_eq(tm_write_sample_v2(t, o, &sink, &err), TM_OK, "%s", err.message);
    in_app_of_frames(&out, got, cap);
    tu_membuf_free(&out);
}

Test(in_app, default_rule_and_prefixes) {
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(IN_APP_CHUNK, sizeof IN_APP_CHUNK - 1, NULL, &t, &err), TM_OK, "%s", err.message);
    char got[16];
    /* the program, the app's classes and its /data/app library are the app's;
     * libc, [vdso], the kernel, android.* and the ART runtime are not; a
     * frame with neither path nor class has no in_app */
    write_in_app(t, NULL, got, sizeof got);
    cr_assert_str_eq(got, "tffftf-tf");
    /* prefixes first: the longest wins, a tie is in_app; '/' is optional */
    const char *yes[] = {"usr/lib/x86_64-linux-gnu/", "/home/u/app/bin/", "[vdso]"};
    const char *no[] = {"/home/u/", "com.example.", "[vdso]", "/data/app/"};
    tm_sample_v2_options o = {.in_app_prefixes = yes, .n_in_app_prefixes = 3, .not_in_app_prefixes = no,
                              .n_not_in_app_prefixes = 4};
    write_in_app(t, &o, got, sizeof got);
    cr_assert_str_eq(got, "tttfff-ff");
    /* a count without a list is refused */
    tm_sample_v2_options bad = {.n_in_app_prefixes = 1};
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    cr_assert_eq(tm_write_sample_v2(t, &bad, &sink, &err), TM_ERR_INVALID_ARG);
    tu_membuf_free(&out);
    tm_trace_free(t);
}

/* A Perfetto frame's in_app is its mapping's, found once per mapping,
 * except where its address is the kernel's: such a frame is not in_app
 * whatever its mapping, before or after the mapping's other frames. */
Test(in_app, per_mapping_but_kernel_addresses_apart) {
    tb_buf t = {0};
    tb_standard_clocks(&t, 0);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 1, "libapp.so", 9);
    static const char *const fns[] = {"kernel_first", "app_a", "kernel_mid", "app_b"};
    static const uint64_t rel_pc[] = {0xffffffff81000000ull, 0x10, 0xffffffff81000040ull, 0x20};
    for (int i = 0; i < 4; i++) tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, (uint64_t)i + 1, fns[i], strlen(fns[i]));
    const uint64_t path[1] = {1};
    tb_mapping(&t, 1, 0, 0, 0x100000, path, 1);
    for (int i = 0; i < 4; i++) tb_frame(&t, (uint64_t)i + 1, (uint64_t)i + 1, 1, rel_pc[i]);
    const uint64_t cs[4] = {1, 2, 3, 4};
    tb_callstack(&t, 1, cs, 4, 0);
    tb_close(&t, in);
    tb_close(&t, pkt);
    tb_perf_sample(&t, 1, TB_BOOT0 + 1000, 10, 10, 1, TB_SEQ_NEEDS);
    tb_perf_sample(&t, 1, TB_BOOT0 + 2000, 10, 10, 1, TB_SEQ_NEEDS);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&out);
    json_t *frames = json_object_get(json_object_get(root, "profile"), "frames");
    cr_assert_eq(json_array_size(frames), 4);
    for (size_t i = 0; i < 4; i++) {
        json_t *f = json_array_get(frames, i);
        const char *fn = json_string_value(json_object_get(f, "function"));
        cr_assert_not_null(fn);
        int kernel = strncmp(fn, "kernel", 6) == 0;
        cr_expect_eq(json_is_true(json_object_get(f, "in_app")), !kernel, "%s", fn);
        cr_expect(json_is_boolean(json_object_get(f, "in_app")), "%s", fn);
    }
    json_decref(root);
    tu_membuf_free(&out);
    tb_free(&t);
}

/* The fixed lists are searched only up to the name's first byte: every
 * entry must still be found (a class of each platform package, a library
 * under each system path is not the app's), and names beside them are. */
Test(in_app, every_system_class_and_path_is_found) {
    static const char *const classes[] = {
        "android.", "androidx.", "com.android.", "com.google.android.", "com.sun.", "dalvik.", "java.", "javax.",
        "jdk.", "kotlin.", "kotlinx.", "libcore.", "org.apache.harmony.", "org.json.", "org.w3c.", "org.xml.",
        "sun.", "zz.", "com.example.", "a.", "org.jsonx."};
    static const char *const paths[] = {
        "apex/", "data/dalvik-cache/", "data/misc/", "lib/", "lib32/", "lib64/", "odm/", "product/", "system/",
        "system_ext/", "usr/lib/", "usr/lib32/", "usr/lib64/", "usr/libexec/", "usr/local/lib/", "vendor/",
        "zz/", "data/app/", "apps/", "usr/bin/"};
    enum { N_SYS_CLASSES = 17, N_CLASSES = 21, N_SYS_PATHS = 16, N_PATHS = 20 };
    tb_buf t = {0};
    tb_standard_clocks(&t, 0);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    const uint64_t oat[1] = {100};
    tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 100, "boot-framework.oat", 18);
    tb_mapping(&t, 100, 0, 0x1000, 0x2000, oat, 1);
    uint64_t cs[N_CLASSES + N_PATHS];
    for (uint64_t i = 0; i < N_CLASSES + N_PATHS; i++) {
        char name[64];
        if (i < N_CLASSES) {
            snprintf(name, sizeof name, "%sKlass.run", classes[i]);
        } else {
            snprintf(name, sizeof name, "%slibx.so", paths[i - N_CLASSES]);
            const uint64_t path[1] = {200 + i};
            tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 200 + i, name, strlen(name));
            tb_mapping(&t, 200 + i, 0, 0x10000 * (i + 1), 0x10000 * (i + 1) + 0x1000, path, 1);
            snprintf(name, sizeof name, "f%u", (unsigned)i);
        }
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, i + 1, name, strlen(name));
        tb_frame(&t, i + 1, i + 1, i < N_CLASSES ? 100 : 200 + i, 0x10);
        cs[i] = i + 1;
    }
    tb_callstack(&t, 1, cs, N_CLASSES + N_PATHS, 0);
    tb_close(&t, in);
    tb_close(&t, pkt);
    tb_perf_sample(&t, 1, TB_BOOT0 + 1000, 10, 10, 1, TB_SEQ_NEEDS);
    tu_membuf out = convert_ok(&t, TM_MODE_DEFAULT, NULL);
    json_t *root = load_json(&out);
    json_t *frames = json_object_get(json_object_get(root, "profile"), "frames");
    cr_assert_eq(json_array_size(frames), N_CLASSES + N_PATHS);
    for (size_t i = 0; i < json_array_size(frames); i++) {
        json_t *f = json_array_get(frames, i);
        const char *module = json_string_value(json_object_get(f, "module"));
        const char *package = json_string_value(json_object_get(f, "package"));
        int system = -1;
        for (size_t k = 0; k < N_CLASSES; k++)
            if (module && strncmp(module, classes[k], strlen(classes[k])) == 0 &&
                strcmp(module + strlen(classes[k]), "Klass") == 0)
                system = k < N_SYS_CLASSES;
        for (size_t k = 0; !module && k < N_PATHS; k++)
            if (package && strncmp(package, paths[k], strlen(paths[k])) == 0 &&
                strcmp(package + strlen(paths[k]), "libx.so") == 0)
                system = k < N_SYS_PATHS;
        cr_assert(system >= 0, "frame %zu: %s", i, module ? module : package);
        cr_expect(json_is_boolean(json_object_get(f, "in_app")), "frame %zu", i);
        cr_expect_eq(json_is_true(json_object_get(f, "in_app")), !system, "%s", module ? module : package);
    }
    json_decref(root);
    tu_membuf_free(&out);
    tb_free(&t);
}

/* Relay's converter never writes in_app: --compat relay output has none
 * (its bytes are Relay's, test_relay_compat), the default mode's has it. */
Test(in_app, never_in_relay_mode) {
    size_t len;
    char *buf = tu_read_file(TM_FIXTURES "/relay-compat/java_frame_splitting.pftrace", &len);
    cr_assert(buf);
    for (int relay = 0; relay < 2; relay++) {
        tm_options opts = {.mode = relay ? TM_MODE_RELAY : TM_MODE_DEFAULT};
        tm_trace *t = NULL;
        tm_error err;
        cr_assert_eq(tm_trace_parse(buf, len, &opts, &t, &err), TM_OK, "%s", err.message);
        const char *yes[] = {"android."};
        tm_sample_v2_options o = {.in_app_prefixes = yes, .n_in_app_prefixes = 1};
        tu_membuf out = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
        cr_assert_eq(tm_write_sample_v2(t, &o, &sink, &err), TM_OK, "%s", err.message);
        int has = strstr(out.data, "\"in_app\"") != NULL;
        cr_assert_eq(has, !relay, "relay %d", relay);
        tu_membuf_free(&out);
        tm_trace_free(t);
    }
    free(buf);
}

/* A sink that lends its memory (tm_sink.lend) in windows of min + slack
 * bytes, failing its fail_at-th call (-1: never); the writer must then make
 * the bytes it makes through write alone. */
typedef struct lender {
    tu_membuf m;
    size_t slack;
    size_t window; /* the last window's size */
    int calls, fail_at;
} lender;

static int lender_lend(void *ctx, size_t used, size_t min, void **window, size_t *cap) {
    lender *l = ctx;
    if (l->calls++ == l->fail_at) return 1;
    cr_assert_leq(used, l->window, "wrote %zu bytes into a window of %zu", used, l->window);
    l->m.len += used;
    l->window = 0;
    if (!min) return 0;
    size_t need = l->m.len + min + l->slack + 1; /* tu_membuf keeps a NUL after the data */
    if (need > l->m.cap) {
        char *p = realloc(l->m.data, need);
        cr_assert_not_null(p);
        l->m.data = p;
        l->m.cap = need;
    }
    *window = l->m.data + l->m.len;
    *cap = l->window = min + l->slack;
    return 0;
}

static int lender_write(void *ctx, const void *data, size_t len) {
    lender *l = ctx;
    cr_assert_eq(l->window, 0u, "write while a window is lent");
    return tu_membuf_write(&l->m, data, len);
}

Test(lend, sink_memory_holds_the_same_bytes) {
    size_t len;
    char *buf = tu_read_file(TM_SOURCE_DIR "/examples/demo.pftrace", &len);
    cr_assert(buf);
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(buf, len, NULL, &t, &err), TM_OK, "%s", err.message);
    tu_membuf want = {0};
    tm_sink plain = {.write = tu_membuf_write, .ctx = &want};
    cr_assert_eq(tm_write_sample_v2(t, NULL, &plain, &err), TM_OK, "%s", err.message);
    /* windows just large enough (each formatting step asks anew), a few
     * bytes over, and larger than the writer's own buffer */
    const size_t slack[] = {0, 3, 1000, 1 << 20};
    for (size_t i = 0; i < sizeof slack / sizeof slack[0]; i++) {
        lender l = {.slack = slack[i], .fail_at = -1};
        tm_sink sink = {.write = lender_write, .ctx = &l, .lend = lender_lend};
        cr_assert_eq(tm_write_sample_v2(t, NULL, &sink, &err), TM_OK, "%s", err.message);
        cr_assert_eq(l.m.len, want.len, "slack %zu", slack[i]);
        cr_assert(memcmp(l.m.data, want.data, want.len) == 0, "slack %zu", slack[i]);
        tu_membuf_free(&l.m);
    }
    /* a refusal at any call is a write failure, as write's would be */
    for (int at = 0; at < 4; at++) {
        lender l = {.slack = 100, .fail_at = at};
        tm_sink sink = {.write = lender_write, .ctx = &l, .lend = lender_lend};
        cr_assert_eq(tm_write_sample_v2(t, NULL, &sink, &err), TM_ERR_IO, "fail at %d", at);
        tu_membuf_free(&l.m);
    }
    tu_membuf_free(&want);
    tm_trace_free(t);
    free(buf);
}

/* ==== tm_chunk_meta ==================================================== */

/* Metadata good and bad: what the server meets. */
static const char *const CHUNK_METAS[] = {
    META,
    "{\"version\":\"2\"," META_FIELDS ",\"release\":\"1.0\",\"environment\":\"production\","
    "\"debug_meta\":{\"images\":[{\"type\":\"proguard\",\"uuid\":\"8286fd8c-0a18-4a43-9d1f-a2c0ae9e4e6f\"}]},"
    "\"measurements\":{\"cpu\":{\"unit\":\"percent\",\"values\":[{\"timestamp\":1.5,\"value\":3}]}}}",
    /* an integer past 64 bits: a real on the second pass */
    "{\"version\":\"2\"," META_FIELDS ",\"timestamp\":100000000000000000000000000000}",
    "not json",
    "{\"version\":\"2\"",
    "[1,2]",
    "{\"version\":\"1\"," META_FIELDS "}",
    "{\"version\":\"2\"," META_FIELDS ",\"platform\":\"cocoa\"}", /* a duplicate key */
    "{\"version\":\"2\"," META_FIELDS ",\"measurements\":{\"cpu\":{\"unit\":\"percent\",\"values\":[{}]}}}",
    "",
};

static void expect_same_error(tm_status st, const tm_error *e, tm_status want_st, const tm_error *want,
                              const char *what) {
    cr_expect_eq(st, want_st, "%s: %s, want %s", what, tm_status_str(st), tm_status_str(want_st));
    if (st == TM_OK || want_st == TM_OK) return;
    cr_expect_eq(e->code, want->code, "%s", what);
    cr_expect_eq(e->offset, want->offset, "%s: offset %llu, want %llu", what, (unsigned long long)e->offset,
                 (unsigned long long)want->offset);
    cr_expect_str_eq(e->reason ? e->reason : "", want->reason ? want->reason : "", "%s", what);
    cr_expect_str_eq(e->message, want->message, "%s", what);
}

static tm_chunk_meta *chunk_meta_new(const char *json, size_t len) {
    tm_chunk_meta *m = NULL;
    tm_error err;
    cr_assert_eq(tm_chunk_meta_new(json, len, &m, &err), TM_OK, "%s", err.message);
    cr_assert_not_null(m);
    return m;
}

Test(chunk_meta, strings_are_read_whatever_else_is_wrong) {
    tm_chunk_meta *m = chunk_meta_new(META, strlen(META));
    size_t n = 99;
    cr_expect_str_eq(tm_chunk_meta_string(m, "content_type", &n), "perfetto");
    cr_expect_eq(n, 8u);
    cr_expect_str_eq(tm_chunk_meta_string(m, "platform", NULL), "android");
    cr_expect_str_eq(tm_chunk_meta_string(m, "chunk_id", &n), "0432a0a4c25f4697bf9f0a2fcbe6a814");
    cr_expect_eq(n, 32u);
    n = 99;
    cr_expect_null(tm_chunk_meta_string(m, "release", &n), "missing");
    cr_expect_eq(n, 0u);
    cr_expect_null(tm_chunk_meta_string(m, "client_sdk", &n), "not a string");
    cr_expect_eq(n, 0u);
    cr_expect_null(tm_chunk_meta_string(m, NULL, &n));
    tm_chunk_meta_free(m);

    /* invalid (version "1"), yet its fields are there */
    const char *v1 = "{\"version\":\"1\"," META_FIELDS "}";
    m = chunk_meta_new(v1, strlen(v1));
    cr_expect_str_eq(tm_chunk_meta_string(m, "content_type", NULL), "perfetto");
    tm_chunk_meta_free(m);

    /* "\u0000" inside a string: the length says where it ends */
    const char *nul = "{\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\\u0000x\"}";
    m = chunk_meta_new(nul, strlen(nul));
    const char *id = tm_chunk_meta_string(m, "chunk_id", &n);
    cr_expect_eq(n, 34u);
    cr_expect(id && strlen(id) == 32 && memcmp(id + 33, "x", 2) == 0);
    tm_chunk_meta_free(m);

    /* not JSON, not an object, no bytes: a handle without fields */
    const char *none[] = {"not json", "[\"content_type\"]", "\"perfetto\"", ""};
    for (size_t i = 0; i < sizeof none / sizeof *none; i++) {
        m = chunk_meta_new(none[i], strlen(none[i]));
        n = 99;
        cr_expect_null(tm_chunk_meta_string(m, "content_type", &n), "%s", none[i]);
        cr_expect_eq(n, 0u);
        tm_chunk_meta_free(m);
    }
}

/* Larger than the writer takes: still read (the server routes the chunk by
 * its content_type first), and rejected by the check. */
Test(chunk_meta, too_large_metadata_is_read_and_rejected) {
    size_t pad = TM_MAX_META_BYTES;
    char *big = malloc(pad + 64);
    cr_assert(big);
    int head = sprintf(big, "{\"content_type\":\"perfetto\",\"pad\":\"");
    memset(big + head, 'x', pad);
    strcpy(big + head + pad, "\"}");
    size_t len = strlen(big);
    tm_chunk_meta *m = chunk_meta_new(big, len);
    cr_expect_str_eq(tm_chunk_meta_string(m, "content_type", NULL), "perfetto");
    tm_error e, want;
    tm_status st = tm_chunk_meta_check(m, &e);
    expect_same_error(st, &e, tm_sample_v2_check_meta(big, len, &want), &want, "too large");
    cr_expect_eq(st, TM_ERR_REJECTED);
    cr_expect_str_eq(e.message, "metadata larger than 16777216 bytes");
    tm_chunk_meta_free(m);
    free(big);
}

Test(chunk_meta, check_reports_what_check_meta_reports) {
    for (size_t i = 0; i < sizeof CHUNK_METAS / sizeof *CHUNK_METAS; i++) {
        const char *json = CHUNK_METAS[i];
        tm_chunk_meta *m = chunk_meta_new(json, strlen(json));
        tm_error e, want;
        tm_status want_st = tm_sample_v2_check_meta(json, strlen(json), &want);
        expect_same_error(tm_chunk_meta_check(m, &e), &e, want_st, &want, json);
        tm_chunk_meta_free(m);
    }
    /* a few of them to the letter */
    static const struct {
        const char *json, *message;
        uint64_t offset;
    } cases[] = {
        {"{\"version\":\"2\"", "metadata is not JSON: '}' expected near end of file", 14},
        {"[1,2]", "metadata is not a JSON object", 0},
        {"{\"version\":\"1\"," META_FIELDS "}", "metadata field version must be \"2\"", 0},
        {"{\"version\":\"2\",\"chunk_id\":\"0432a0a4c25f4697bf9f0a2fcbe6a814\\u0000\"}",
         "metadata field chunk_id is missing or not a UUID", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tm_chunk_meta *m = chunk_meta_new(cases[i].json, strlen(cases[i].json));
        tm_error e;
        cr_expect_eq(tm_chunk_meta_check(m, &e), TM_ERR_REJECTED, "%s", cases[i].json);
        cr_expect_str_eq(e.reason ? e.reason : "", "InvalidJson");
        cr_expect_str_eq(e.message, cases[i].message);
        cr_expect_eq(e.offset, cases[i].offset, "%s: offset %llu", cases[i].json, (unsigned long long)e.offset);
        tm_chunk_meta_free(m);
    }
}

/* .meta writes the bytes .meta_json writes, or fails as it fails, in both
 * modes; the handle serves any number of writes. */
Test(chunk_meta, writes_what_meta_json_writes) {
    tb_buf t = {0};
    build_trace(&t, TWO_SAMPLES, 2);
    for (int mode = 0; mode <= 1; mode++) {
        tm_options opts = {.mode = mode ? TM_MODE_RELAY : TM_MODE_DEFAULT};
        tm_trace *tr = NULL;
        tm_error err;
        cr_assert_eq(tm_trace_parse(t.data, t.len, &opts, &tr, &err), TM_OK, "%s", err.message);
        for (size_t i = 0; i < sizeof CHUNK_METAS / sizeof *CHUNK_METAS; i++) {
            const char *json = CHUNK_METAS[i];
            tm_chunk_meta *m = chunk_meta_new(json, strlen(json));
            tu_membuf want = {0}, got = {0};
            tm_sink want_sink = {.write = tu_membuf_write, .ctx = &want};
            tm_sink got_sink = {.write = tu_membuf_write, .ctx = &got};
            tm_sample_v2_options by_json = {.meta_json = json, .meta_len = strlen(json)};
            tm_sample_v2_options by_handle = {.meta = m};
            tm_error we, ge;
            tm_status want_st = tm_write_sample_v2(tr, &by_json, &want_sink, &we);
            for (int round = 0; round < 2; round++) {
                got.len = 0;
                expect_same_error(tm_write_sample_v2(tr, &by_handle, &got_sink, &ge), &ge, want_st, &we, json);
                cr_expect_eq(got.len, want.len, "mode %d, %s", mode, json);
                cr_expect(got.len == want.len && (!got.len || memcmp(got.data, want.data, got.len) == 0),
                          "mode %d, %s: other bytes", mode, json);
            }
            tu_membuf_free(&want);
            tu_membuf_free(&got);
            tm_chunk_meta_free(m);
        }
        tm_trace_free(tr);
    }
    tb_free(&t);
}

Test(chunk_meta, null_arguments) {
    tm_error err;
    cr_expect_eq(tm_chunk_meta_new(META, strlen(META), NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "tm_chunk_meta_new"), "%s", err.message);
    cr_expect_eq(tm_chunk_meta_check(NULL, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "tm_chunk_meta_check"), "%s", err.message);
    size_t n = 99;
    cr_expect_null(tm_chunk_meta_string(NULL, "platform", &n));
    cr_expect_eq(n, 0u);
    tm_chunk_meta_free(NULL);
    /* a NULL json is metadata that is not JSON, as for tm_sample_v2_check_meta */
    tm_chunk_meta *m = chunk_meta_new(NULL, 0);
    tm_error want;
    tm_status want_st = tm_sample_v2_check_meta(NULL, 0, &want);
    expect_same_error(tm_chunk_meta_check(m, &err), &err, want_st, &want, "NULL json");
    cr_expect_eq(want_st, TM_ERR_REJECTED);
    /* meta and meta_json together: refused before anything is written */
    tb_buf t = {0};
    build_trace(&t, TWO_SAMPLES, 2);
    tm_trace *tr = NULL;
    cr_assert_eq(tm_trace_parse(t.data, t.len, NULL, &tr, &err), TM_OK, "%s", err.message);
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_sample_v2_options both = {.meta_json = META, .meta_len = strlen(META), .meta = m};
    cr_expect_eq(tm_write_sample_v2(tr, &both, &sink, &err), TM_ERR_INVALID_ARG);
    cr_expect(strstr(err.message, "meta_json"), "%s", err.message);
    cr_expect_eq(out.len, 0u);
    tm_chunk_meta_free(m);
    tm_trace_free(tr);
    tb_free(&t);
}
