/*
 * test_json_read.c — the zero-copy JSON pull tokenizer (src/json_read.h):
 * token sequences with their offsets on valid documents, every kind of
 * malformed input with the error kind and the byte offset it names
 * (offsets worked out by hand from the input text), the depth limit,
 * skipping values, re-reading from an offset, unescaping (\uXXXX and
 * surrogate pairs to UTF-8), and the exact decimal scaling used for
 * timestamps (round half to even).
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "wire/json_read.h"

/* Reads the whole document; returns the last token type (DONE or ERROR). */
static tm_json_type run(const char *s, size_t len, tm_json_reader *r) {
    tm_json_token t;
    tm_json_reader_init(r, (const uint8_t *)s, len);
    for (int i = 0; i < 100000; i++) {
        tm_json_type ty = tm_json_next(r, &t);
        if (ty == TM_JSON_DONE || ty == TM_JSON_ERROR) return ty;
    }
    cr_assert_fail("reader did not finish");
    return TM_JSON_ERROR;
}

static int text_is(const tm_json_token *t, const char *s) {
    return t->text.len == strlen(s) && memcmp(t->text.data, s, t->text.len) == 0;
}

Test(json_read, token_sequence_with_offsets) {
    /*                 0         1         2         3         4
     *                 0123456789012345678901234567890123456789012345 */
    const char *doc = "{\"a\":[1,-2.5e3,\"x\\ny\",true,false,null],\"b\":{}}";
    static const struct {
        tm_json_type type;
        size_t offset;
        const char *text;
    } want[] = {
        {TM_JSON_OBJECT, 0, "{"},      {TM_JSON_KEY, 1, "a"},        {TM_JSON_ARRAY, 5, "["},
        {TM_JSON_NUMBER, 6, "1"},      {TM_JSON_NUMBER, 8, "-2.5e3"}, {TM_JSON_STRING, 15, "x\\ny"},
        {TM_JSON_TRUE, 22, "true"},    {TM_JSON_FALSE, 27, "false"}, {TM_JSON_NULL, 33, "null"},
        {TM_JSON_ARRAY_END, 37, "]"},  {TM_JSON_KEY, 39, "b"},       {TM_JSON_OBJECT, 43, "{"},
        {TM_JSON_OBJECT_END, 44, "}"}, {TM_JSON_OBJECT_END, 45, "}"}, {TM_JSON_DONE, 46, ""},
    };
    tm_json_reader r;
    tm_json_reader_init(&r, (const uint8_t *)doc, strlen(doc));
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        tm_json_token t;
        tm_json_type ty = tm_json_next(&r, &t);
        cr_assert_eq(ty, want[i].type, "token %zu: type %d, want %d (%s)", i, ty, want[i].type, r.err ? r.err : "");
        cr_assert_eq(t.type, ty);
        cr_assert_eq(t.offset, want[i].offset, "token %zu: offset %zu, want %zu", i, t.offset, want[i].offset);
        cr_assert(text_is(&t, want[i].text), "token %zu: text %.*s", i, (int)t.text.len, (const char *)t.text.data);
        cr_assert_eq(t.escaped, i == 5, "token %zu escaped flag", i);
    }
    cr_assert_eq(r.depth, 0);
}

Test(json_read, blanks_and_scalars_at_top_level) {
    tm_json_reader r;
    tm_json_token t;
    const char *doc = " \t\r\n 42 \n";
    tm_json_reader_init(&r, (const uint8_t *)doc, strlen(doc));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_NUMBER);
    cr_assert_eq(t.offset, 5);
    cr_assert(text_is(&t, "42"));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_DONE);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_DONE, "DONE is repeatable");
    cr_assert_eq(run("\"\"", 2, &r), TM_JSON_DONE);
    cr_assert_eq(run("[[],{},[{}]]", 12, &r), TM_JSON_DONE);
    cr_assert_eq(run("-0.0E+00", 8, &r), TM_JSON_DONE);
    cr_assert_eq(run("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"", 11, &r), TM_JSON_DONE, "valid UTF-8 passes");
}

Test(json_read, malformed_inputs_name_kind_and_offset) {
    static const struct {
        const char *doc;
        size_t len; /* 0: strlen */
        tm_status code;
        size_t offset;
    } cases[] = {
        {"{\"a\":1,}", 0, TM_ERR_MALFORMED, 7},       /* trailing comma in object */
        {"[1,]", 0, TM_ERR_MALFORMED, 3},             /* trailing comma in array */
        {"[1 2]", 0, TM_ERR_MALFORMED, 3},            /* missing comma */
        {"{\"a\" 1}", 0, TM_ERR_MALFORMED, 5},        /* missing colon */
        {"{\"a\":}", 0, TM_ERR_MALFORMED, 5},         /* missing value */
        {"{1:2}", 0, TM_ERR_MALFORMED, 1},            /* key not a string */
        {"{\"a\":1}}", 0, TM_ERR_MALFORMED, 7},       /* trailing garbage */
        {"{\"a\":1} x", 0, TM_ERR_MALFORMED, 8},      /* trailing garbage after blank */
        {"[1}", 0, TM_ERR_MALFORMED, 2},              /* mismatched close */
        {"{\"a\":1]", 0, TM_ERR_MALFORMED, 6},        /* mismatched close */
        {"\"abc", 0, TM_ERR_TRUNCATED, 0},            /* unterminated string: its quote */
        {"[\"a\\", 0, TM_ERR_TRUNCATED, 1},           /* ends inside an escape */
        {"\"a\\qb\"", 0, TM_ERR_MALFORMED, 2},        /* bad escape: the backslash */
        {"\"a\\u12G4\"", 0, TM_ERR_MALFORMED, 2},     /* bad \u escape */
        {"\"a\\u12\"", 0, TM_ERR_MALFORMED, 2},       /* short \u escape */
        {"\"a\x01" "b\"", 0, TM_ERR_MALFORMED, 2},    /* control character */
        {"\"a\tb\"", 0, TM_ERR_MALFORMED, 2},         /* raw tab in a string */
        {"\"\xff\"", 0, TM_ERR_MALFORMED, 1},         /* invalid UTF-8 */
        {"\"\xc0\xaf\"", 0, TM_ERR_MALFORMED, 1},     /* overlong UTF-8 */
        {"\"\xed\xa0\x80\"", 0, TM_ERR_MALFORMED, 1}, /* UTF-8 surrogate */
        {"\"\xe2\x82", 0, TM_ERR_TRUNCATED, 0},       /* UTF-8 cut by the end */
        {"[01]", 0, TM_ERR_MALFORMED, 2},             /* leading zero */
        {"[1.]", 0, TM_ERR_MALFORMED, 3},             /* no fraction digit */
        {"[1e]", 0, TM_ERR_MALFORMED, 3},             /* no exponent digit */
        {"[+1]", 0, TM_ERR_MALFORMED, 1},             /* plus sign */
        {"[.5]", 0, TM_ERR_MALFORMED, 1},
        {"[-x]", 0, TM_ERR_MALFORMED, 2},
        {"-", 0, TM_ERR_TRUNCATED, 1},
        {"1.", 0, TM_ERR_TRUNCATED, 2},
        {"1e+", 0, TM_ERR_TRUNCATED, 3},
        {"[tru]", 0, TM_ERR_MALFORMED, 1},
        {"[nul", 0, TM_ERR_TRUNCATED, 4},
        {"tru", 0, TM_ERR_TRUNCATED, 3},
        {"True", 0, TM_ERR_MALFORMED, 0},
        {"{", 0, TM_ERR_TRUNCATED, 1},
        {"{\"a\"", 0, TM_ERR_TRUNCATED, 4},
        {"{\"a\":1,", 0, TM_ERR_TRUNCATED, 7},
        {"[1", 0, TM_ERR_TRUNCATED, 2},
        {"", 0, TM_ERR_TRUNCATED, 0},
        {"   ", 0, TM_ERR_TRUNCATED, 3},
        {"[1]\0", 4, TM_ERR_MALFORMED, 3},            /* NUL after the value */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tm_json_reader r;
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].doc);
        cr_assert_eq(run(cases[i].doc, len, &r), TM_JSON_ERROR, "case %zu (%s) must fail", i, cases[i].doc);
        cr_assert_eq(r.err_code, cases[i].code, "case %zu (%s): %s, want %s (%s)", i, cases[i].doc,
                     tm_status_str(r.err_code), tm_status_str(cases[i].code), r.err);
        cr_assert_eq(r.err_offset, cases[i].offset, "case %zu (%s): offset %zu, want %zu (%s)", i, cases[i].doc,
                     r.err_offset, cases[i].offset, r.err);
        cr_assert_not_null(r.err);
        tm_json_token t;
        cr_assert_eq(tm_json_next(&r, &t), TM_JSON_ERROR, "case %zu: errors are sticky", i);
    }
}

Test(json_read, depth_limit) {
    char doc[2 * TM_JSON_MAX_DEPTH + 3];
    for (int i = 0; i < TM_JSON_MAX_DEPTH; i++) doc[i] = '[', doc[2 * TM_JSON_MAX_DEPTH - 1 - i] = ']';
    tm_json_reader r;
    cr_assert_eq(run(doc, 2 * TM_JSON_MAX_DEPTH, &r), TM_JSON_DONE, "64 levels are fine: %s", r.err ? r.err : "");
    char deep[TM_JSON_MAX_DEPTH + 1];
    memset(deep, '[', sizeof deep);
    cr_assert_eq(run(deep, sizeof deep, &r), TM_JSON_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_LIMIT);
    cr_assert_eq(r.err_offset, TM_JSON_MAX_DEPTH, "the 65th '[' is at byte 64");
    /* Objects count the same way. */
    char objs[6 * (TM_JSON_MAX_DEPTH + 1)];
    size_t n = 0;
    for (int i = 0; i <= TM_JSON_MAX_DEPTH; i++) memcpy(objs + n, "{\"k\":", 5), n += 5;
    cr_assert_eq(run(objs, n, &r), TM_JSON_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_LIMIT);
    cr_assert_eq(r.err_offset, 5 * TM_JSON_MAX_DEPTH);
}

Test(json_read, skip_values) {
    const char *doc = "{\"skip\":{\"x\":[1,{\"y\":[]}],\"z\":\"}]\"},\"s\":\"str\",\"after\":2}";
    tm_json_reader r;
    tm_json_token t;
    tm_json_reader_init(&r, (const uint8_t *)doc, strlen(doc));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_OBJECT);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_KEY);
    cr_assert(tm_json_eq(&t, "skip"));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_OBJECT);
    cr_assert(tm_json_skip(&r, &t));
    cr_assert_eq(r.depth, 1);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_KEY);
    cr_assert(tm_json_eq(&t, "s"));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_STRING);
    cr_assert(tm_json_skip(&r, &t), "skipping a scalar is a no-op");
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_KEY);
    cr_assert(tm_json_eq(&t, "after"));
    cr_assert_eq(t.offset, (size_t)(strstr(doc, "\"after\"") - doc));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_NUMBER);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_OBJECT_END);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_DONE);

    const char *bad = "[{\"a\":[1,2}]";
    tm_json_reader_init(&r, (const uint8_t *)bad, strlen(bad));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_ARRAY);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_OBJECT);
    cr_assert_not(tm_json_skip(&r, &t), "a malformed value fails the skip");
    cr_assert_eq(r.err_offset, 10);
}

Test(json_read, reader_at_reads_one_value) {
    const char *doc = "[10, [20, 30], 40]";
    tm_json_reader r;
    tm_json_token t;
    tm_json_reader_at(&r, (const uint8_t *)doc, strlen(doc), 5);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_ARRAY);
    cr_assert_eq(t.offset, 5);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_NUMBER);
    cr_assert(text_is(&t, "20"));
    cr_assert_eq(t.offset, 6, "offsets stay relative to the whole buffer");
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_NUMBER);
    cr_assert_eq(t.offset, 10);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_ARRAY_END);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_DONE, "what follows the value is not read");
}

static void check_unescape(const char *raw, const char *want, size_t want_len) {
    tm_bytes text = {(const uint8_t *)raw, strlen(raw)};
    uint8_t *dst = malloc(text.len + 1);
    size_t n = tm_json_unescape(text, dst);
    cr_assert_eq(n, want_len, "%s: length %zu, want %zu", raw, n, want_len);
    cr_assert_eq(memcmp(dst, want, n), 0, "%s decodes wrongly", raw);
    free(dst);
}

Test(json_read, unescape) {
    check_unescape("plain", "plain", 5);
    check_unescape("a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t", "a\"b\\c/d\b\f\n\r\t", 12);
    check_unescape("\\u0041\\u00e9", "A\xc3\xa9", 3);
    check_unescape("\\u20AC", "\xe2\x82\xac", 3);
    check_unescape("x\\ud83d\\ude00y", "x\xf0\x9f\x98\x80y", 6);    /* U+1F600 from a pair */
    check_unescape("\\ud800x", "\xef\xbf\xbdx", 4);                  /* lone high surrogate */
    check_unescape("\\udc00", "\xef\xbf\xbd", 3);                    /* lone low surrogate */
    check_unescape("\\ud800\\u0041", "\xef\xbf\xbd" "A", 4);        /* high + non-surrogate */
    check_unescape("\\u0000", "\0", 1);

    /* tm_json_str: a view without escapes, an arena copy with them. */
    const char *doc = "[\"view\",\"c\\u00e9\"]";
    tm_mem mem;
    tm_mem_init(&mem, NULL);
    tm_arena ar;
    tm_arena_init(&ar, &mem);
    tm_json_reader r;
    tm_json_token t;
    tm_str s;
    tm_json_reader_init(&r, (const uint8_t *)doc, strlen(doc));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_ARRAY);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_STRING);
    cr_assert_eq(tm_json_str(&ar, &t, &s), TM_OK);
    cr_assert_eq((const char *)s.data, doc + 2, "unescaped strings are views into the input");
    cr_assert_eq(s.len, 4);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_STRING);
    cr_assert_eq(tm_json_str(&ar, &t, &s), TM_OK);
    cr_assert_eq(s.len, 3);
    cr_assert_eq(memcmp(s.data, "c\xc3\xa9", 3), 0);
    tm_arena_release(&ar);
}

Test(json_read, key_comparison_decodes_escapes) {
    const char *doc = "{\"\\u0073amples\":1}";
    tm_json_reader r;
    tm_json_token t;
    tm_json_reader_init(&r, (const uint8_t *)doc, strlen(doc));
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_OBJECT);
    cr_assert_eq(tm_json_next(&r, &t), TM_JSON_KEY);
    cr_assert(t.escaped);
    cr_assert(tm_json_eq(&t, "samples"));
    cr_assert_not(tm_json_eq(&t, "sample"));
    cr_assert_not(tm_json_eq(&t, "\\u0073amples"));
}

static tm_json_token number(const char *s) {
    tm_json_token t = {TM_JSON_NUMBER, {(const uint8_t *)s, strlen(s)}, 0, 0};
    return t;
}

Test(json_read, u64) {
    uint64_t v;
    tm_json_token t = number("0");
    cr_assert(tm_json_u64(&t, &v) && v == 0);
    t = number("18446744073709551615");
    cr_assert(tm_json_u64(&t, &v) && v == UINT64_MAX);
    const char *bad[] = {"18446744073709551616", "-1", "1.0", "1e3", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        t = number(bad[i]);
        cr_assert_not(tm_json_u64(&t, &v), "%s is not a u64", bad[i]);
    }
    tm_json_token str = {TM_JSON_STRING, {(const uint8_t *)"5", 1}, 0, 0};
    cr_assert_not(tm_json_u64(&str, &v), "strings are not numbers");
}

Test(json_read, scaled_exact_half_even) {
    static const struct {
        const char *text;
        unsigned scale;
        int64_t want;
    } ok[] = {
        {"1771278043.501001", 9, 1771278043501001000},
        {"1700000001.0", 9, 1700000001000000000},
        {"1700000001", 9, 1700000001000000000},
        {"1771278044.23", 9, 1771278044230000000},
        {"0.000000001", 9, 1},
        {"0.0000000005", 9, 0},            /* tie: to even 0 */
        {"0.0000000015", 9, 2},            /* tie: to even 2 */
        {"0.0000000025", 9, 2},            /* tie: to even 2 */
        {"0.00000000250001", 9, 3},        /* above the tie */
        {"0.00000000149999", 9, 1},
        {"0.0000000004999", 9, 0},
        {"1.5e-9", 9, 2},
        {"17.71278043501001e8", 9, 1771278043501001000},
        {"1771278043501001e-6", 9, 1771278043501001000},
        {"1.5E9", 0, 1500000000},
        {"-1.5", 9, -1500000000},
        {"-0.0000000005", 9, 0},
        {"-0.0000000015", 9, -2},
        {"-0", 9, 0},
        {"123", 0, 123},
        {"0e400", 9, 0},
        {"1e-400", 9, 0},
        {"0.000000000000000000000000000000000000000000000000000000000009", 9, 0},
        {"9223372036.854775807", 9, INT64_MAX},
        {"-9223372036.854775808", 9, INT64_MIN},
        {"9223372036854775807", 0, INT64_MAX},
        {"1e18", 0, 1000000000000000000},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        tm_json_token t = number(ok[i].text);
        int64_t v = 42;
        cr_assert(tm_json_scaled_i64(&t, ok[i].scale, &v), "%s must fit", ok[i].text);
        cr_assert_eq(v, ok[i].want, "%s x 10^%u = %lld, want %lld", ok[i].text, ok[i].scale, (long long)v,
                     (long long)ok[i].want);
    }
    static const char *const overflow[] = {"9223372036.854775808", "9223372036.8547758075", "-9223372036.854775809",
                                           "1e400", "1e19", "99999999999"};
    for (size_t i = 0; i < sizeof overflow / sizeof *overflow; i++) {
        tm_json_token t = number(overflow[i]);
        int64_t v;
        cr_assert_not(tm_json_scaled_i64(&t, 9, &v), "%s x 1e9 does not fit", overflow[i]);
    }
}
