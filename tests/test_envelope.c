/*
 * test_envelope.c — tests of server/envelope.c (tm_srv_envelope_parse,
 * tm_srv_item_split, tm_srv_envelope_write_item) against the Sentry envelope
 * format as Relay reads it: a realistic Android profile_chunk envelope built
 * from examples/demo.pftrace, items with and without "length", blank lines,
 * every malformed header and payload with its exact byte offset, the
 * header-size, item-count and nesting ceilings, and every rule of Relay's
 * split_item_payload.
 *
 * Every input is parsed from an exact-size heap copy, so a read past the end
 * hits ASan's redzone.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "tutil.h"

/* An exact-size heap copy of buf, parsed into *env; the copy is returned
 * (free it after the views). */
static uint8_t *parse_copy(const void *buf, size_t n, tm_srv_envelope *env, tm_status *st, tm_error *err) {
    uint8_t *copy = malloc(n ? n : 1);
    cr_assert_not_null(copy);
    if (n) memcpy(copy, buf, n);
    *st = tm_srv_envelope_parse(copy, n, env, err);
    return copy;
}

/* Parses s, which must succeed; the caller releases env and frees the result. */
static uint8_t *parse_ok(const char *s, size_t n, tm_srv_envelope *env) {
    tm_status st;
    tm_error err = {0};
    uint8_t *copy = parse_copy(s, n, env, &st, &err);
    cr_assert_eq(st, TM_OK, "parse failed: %s at %llu: %s", tm_status_str(st), (unsigned long long)err.offset,
                 err.message);
    return copy;
}

/* Parses s, which must fail with code at offset; returns the error. */
static tm_error parse_fail(const void *s, size_t n, tm_status code, uint64_t offset) {
    tm_srv_envelope env;
    tm_status st;
    tm_error err = {0};
    free(parse_copy(s, n, &env, &st, &err));
    cr_assert_eq(st, code, "expected %s, got %s (%s)", tm_status_str(code), tm_status_str(st), err.message);
    cr_assert_eq(err.code, code);
    cr_assert_eq(err.offset, offset, "offset %llu, expected %llu (%s)", (unsigned long long)err.offset,
                 (unsigned long long)offset, err.message);
    cr_assert_null(env.items, "a failed parse leaves no items");
    cr_assert_eq(env.n_items, 0);
    return err;
}

static tm_error fail_str(const char *s, tm_status code, uint64_t offset) {
    return parse_fail(s, strlen(s), code, offset);
}

/* Offset of the first occurrence of needle in s. */
static uint64_t at(const char *s, const char *needle) {
    const char *p = strstr(s, needle);
    cr_assert_not_null(p, "'%s' not in '%s'", needle, s);
    return (uint64_t)(p - s);
}

static void assert_view(tm_srv_view v, const char *want) {
    if (!want) {
        cr_assert_null(v.ptr, "expected an absent view, got '%.*s'", (int)v.len, v.ptr ? v.ptr : "");
        cr_assert_eq(v.len, 0);
        return;
    }
    cr_assert_not_null(v.ptr, "expected '%s', got an absent view", want);
    cr_assert_eq(v.len, strlen(want), "'%.*s' vs '%s'", (int)v.len, v.ptr, want);
    cr_assert(memcmp(v.ptr, want, v.len) == 0, "'%.*s' vs '%s'", (int)v.len, v.ptr, want);
}

static void assert_payload(const tm_srv_item *it, const char *want) {
    cr_assert_eq(it->payload_len, strlen(want), "payload '%.*s' vs '%s'", (int)it->payload_len,
                 (const char *)it->payload, want);
    cr_assert(memcmp(it->payload, want, it->payload_len) == 0);
}

static char *read_or_die(const char *path, size_t *len) {
    char *p = tu_read_file(path, len);
    cr_assert_not_null(p, "cannot read %s", path);
    return p;
}

/* ---- well-formed envelopes -------------------------------------------- */

Test(envelope, android_profile_chunk) {
    size_t trace_len, meta_len;
    char *trace = read_or_die(TM_SOURCE_DIR "/examples/demo.pftrace", &trace_len);
    char *meta = read_or_die(TM_SOURCE_DIR "/examples/demo.meta.json", &meta_len);
    while (meta_len && (meta[meta_len - 1] == '\n' || meta[meta_len - 1] == ' ')) meta_len--;
    cr_assert_gt(trace_len, 90000);

    tm_srv_buf body = {0};
    const char *env_header = "{\"event_id\":\"c3b09c0608844f558eaf6e65df6b9cdf\",\"sdk\":{\"name\":"
                             "\"sentry.java.android\",\"version\":\"8.38.0\",\"packages\":[{\"name\":"
                             "\"maven:io.sentry:sentry\",\"version\":\"8.38.0\"}]}}";
    cr_assert_eq(tm_srv_buf_append(&body, env_header, strlen(env_header)), 0);
    cr_assert_eq(tm_srv_buf_append(&body, "\n", 1), 0);
    uint64_t item_off = body.len;
    char item_header[512];
    int hl = snprintf(item_header, sizeof item_header,
                      "{\"content_type\":\"application/x-perfetto-trace\",\"filename\":"
                      "\"profile.perfetto-stack-sample\",\"type\":\"profile_chunk\",\"platform\":\"android\","
                      "\"meta_length\":%zu,\"length\":%zu}",
                      meta_len, meta_len + trace_len);
    tm_srv_buf payload = {0};
    cr_assert_eq(tm_srv_buf_append(&payload, meta, meta_len), 0);
    cr_assert_eq(tm_srv_buf_append(&payload, trace, trace_len), 0);
    cr_assert_eq(tm_srv_envelope_write_item(&body, item_header, (size_t)hl, payload.data, payload.len), 0);

    tm_srv_envelope env;
    uint8_t *copy = parse_ok((const char *)body.data, body.len, &env);
    assert_view(env.header, env_header);
    assert_view(env.event_id, "c3b09c0608844f558eaf6e65df6b9cdf");
    assert_view(env.dsn, NULL);
    cr_assert_eq(env.n_items, 1);
    const tm_srv_item *it = &env.items[0];
    cr_assert_eq(it->offset, item_off);
    assert_view(it->header, item_header);
    assert_view(it->type, "profile_chunk");
    assert_view(it->content_type, "application/x-perfetto-trace");
    assert_view(it->platform, "android");
    assert_view(it->filename, "profile.perfetto-stack-sample");
    cr_assert_eq(it->has_meta_length, 1);
    cr_assert_eq(it->meta_length, meta_len);
    cr_assert_eq(it->payload_len, meta_len + trace_len);
    cr_assert_eq(it->payload_offset, item_off + (uint64_t)hl + 1);
    cr_assert_eq(it->payload, copy + it->payload_offset, "the payload is a view into the input");
    cr_assert(memcmp(it->payload, payload.data, payload.len) == 0);

    tm_srv_view json, raw;
    cr_assert_eq(tm_srv_item_split(it, &json, &raw), 1);
    cr_assert_eq(json.len, meta_len);
    cr_assert(memcmp(json.ptr, meta, meta_len) == 0);
    cr_assert_eq(raw.len, trace_len);
    cr_assert(memcmp(raw.ptr, trace, trace_len) == 0);

    tm_srv_envelope_release(&env);
    cr_assert_null(env.items);
    cr_assert_eq(env.n_items, 0);
    tm_srv_envelope_release(&env); /* twice is harmless */
    free(copy);
    tm_srv_buf_release(&payload);
    tm_srv_buf_release(&body);
    free(trace);
    free(meta);
}

Test(envelope, many_items_with_and_without_length) {
    const char s[] = "{\"dsn\":\"https://abc@o1.ingest.sentry.io/42\"}\n"
                     "{\"type\":\"attachment\",\"length\":7,\"filename\":\"a.txt\"}\n"
                     "ab\ncd\ne\n"                          /* '\n' inside a length-delimited payload */
                     "{\"type\":\"event\"}\n"
                     "{\"message\":\"hi\"}\n"               /* runs to the newline */
                     "{\"type\":\"empty\",\"length\":0}\n"
                     "\n"                                   /* the empty payload's terminator */
                     "{\"type\":\"nolen_empty\"}\n"
                     "\n"                                   /* empty payload without length */
                     "\n\n"                                 /* blank lines between items */
                     "{\"type\":\"last\",\"length\":3}\n"
                     "xyz";                                 /* no newline at EOF */
    tm_srv_envelope env;
    uint8_t *copy = parse_ok(s, sizeof s - 1, &env);
    assert_view(env.dsn, "https://abc@o1.ingest.sentry.io/42");
    assert_view(env.event_id, NULL);
    cr_assert_eq(env.n_items, 5);
    assert_view(env.items[0].type, "attachment");
    assert_view(env.items[0].filename, "a.txt");
    assert_payload(&env.items[0], "ab\ncd\ne");
    cr_assert_eq(env.items[0].payload_offset, at(s, "ab\n"));
    cr_assert_eq(env.items[0].has_meta_length, 0);
    assert_view(env.items[1].type, "event");
    assert_payload(&env.items[1], "{\"message\":\"hi\"}");
    cr_assert_eq(env.items[1].offset, at(s, "{\"type\":\"event\""));
    assert_view(env.items[2].type, "empty");
    assert_payload(&env.items[2], "");
    assert_view(env.items[3].type, "nolen_empty");
    assert_payload(&env.items[3], "");
    assert_view(env.items[4].type, "last");
    cr_assert_eq(env.items[4].offset, at(s, "{\"type\":\"last\""));
    assert_payload(&env.items[4], "xyz");
    cr_assert_eq(env.items[4].payload_offset, sizeof s - 4);
    tm_srv_envelope_release(&env);
    free(copy);
}

Test(envelope, header_only_and_trailing_newlines) {
    static const char *const ok[] = {"{}", "{}\n", "{}\n\n\n", " {\"event_id\":\"e1\"} \r\n", "{}\r\n\r\n"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        tm_srv_envelope env;
        uint8_t *copy = parse_ok(ok[i], strlen(ok[i]), &env);
        cr_assert_eq(env.n_items, 0, "'%s'", ok[i]);
        cr_assert_null(env.items);
        cr_assert_eq(env.header.ptr, (const char *)copy + at(ok[i], "{"), "the header view is the object");
        tm_srv_envelope_release(&env);
        free(copy);
    }
    tm_srv_envelope env;
    const char *spaced = " {\"event_id\":\"e1\"} \r\n";
    uint8_t *copy = parse_ok(spaced, strlen(spaced), &env);
    assert_view(env.header, "{\"event_id\":\"e1\"}");
    assert_view(env.event_id, "e1");
    tm_srv_envelope_release(&env);
    free(copy);
}

Test(envelope, item_header_at_eof) {
    const char *cases[] = {"{}\n{\"type\":\"a\"}", "{}\n{\"type\":\"a\"}\n", "{}\n{\"type\":\"a\",\"length\":0}"};
    for (size_t i = 0; i < 3; i++) {
        tm_srv_envelope env;
        uint8_t *copy = parse_ok(cases[i], strlen(cases[i]), &env);
        cr_assert_eq(env.n_items, 1, "'%s'", cases[i]);
        assert_view(env.items[0].type, "a");
        assert_payload(&env.items[0], "");
        cr_assert_eq(env.items[0].payload_offset, strlen(cases[i]));
        tm_srv_envelope_release(&env);
        free(copy);
    }
    /* ... but a declared payload must be there. */
    tm_error e = fail_str("{}\n{\"type\":\"a\",\"length\":1}", TM_ERR_TRUNCATED, 3);
    cr_assert(strstr(e.message, "length 1") && strstr(e.message, "only 0 bytes"), "%s", e.message);
}

Test(envelope, json_keys_values_and_escapes) {
    const char s[] = "{\"event_id\":\"first\",\"sdk\":{\"type\":\"x\","
                     "\"a\":[1,-2.5e+3,true,false,null,{\"x\":[[],{}]},\"}]\\\"\\\\\\u00e9\"]},"
                     "\"event_id\":\"second\",\"dsn\":null,\"extra\":{\"event_id\":\"nested\",\"dsn\":\"nested\"}}\n"
                     "{\"type\":\"first\",\"platform\":\"cocoa\",\"type\":\"pro\\u0066ile\","
                     "\"platform\":null,\"plat\\u0066orm\":\"escaped key\",\"meta_length\":5,"
                     "\"meta_length\":null,\"content_type\" : \"x\" , \"filename\":\"\"}\n"
                     "payload\n";
    tm_srv_envelope env;
    uint8_t *copy = parse_ok(s, sizeof s - 1, &env);
    assert_view(env.event_id, "second");       /* duplicate keys: the last wins */
    assert_view(env.dsn, NULL);                /* null is absent; keys of nested objects never count */
    cr_assert_eq(env.n_items, 1);
    const tm_srv_item *it = &env.items[0];
    assert_view(it->type, "pro\\u0066ile");    /* raw view: escapes not decoded */
    assert_view(it->platform, NULL);           /* reset by the later null; the escaped key matches nothing */
    cr_assert_eq(it->has_meta_length, 0);
    assert_view(it->content_type, "x");
    assert_view(it->filename, "");
    cr_assert_not_null(it->filename.ptr, "an empty string is present, not absent");
    assert_payload(it, "payload");
    tm_srv_envelope_release(&env);
    free(copy);
}

/* ---- malformed envelopes, each with its offset -------------------------- */

Test(envelope, empty_and_non_object_headers) {
    parse_fail("", 0, TM_ERR_MALFORMED, 0);
    fail_str("\n{\"type\":\"a\"}\n", TM_ERR_MALFORMED, 0);
    fail_str("[]\n", TM_ERR_MALFORMED, 0);
    fail_str("  \"str\"\n", TM_ERR_MALFORMED, 2);
    fail_str("null", TM_ERR_MALFORMED, 0);
    fail_str("{}\n[\"type\"]\n", TM_ERR_MALFORMED, 3);
    fail_str("{}\n{\"type\":\"a\"}\nx\n7\n", TM_ERR_MALFORMED, 18); /* '7' starts a header */
}

Test(envelope, bad_json_in_headers) {
    static const struct {
        const char *s, *where;
    } cases[] = {
        {"{\"a\":}\n", "}"},
        {"{\"a\" 1}\n", "1"},
        {"{\"a\":1,}\n", "}"},
        {"{a:1}\n", "a"},
        {"{\"a\":tru}\n", "tru"},
        {"{\"a\":nul}\n", "nul"},
        {"{\"a\":01}\n", "1}"},
        {"{\"a\":-}\n", "}"},
        {"{\"a\":1.}\n", "}"},
        {"{\"a\":1e}\n", "}"},
        {"{\"a\":+1}\n", "+"},
        {"{\"a\":1 2}\n", "2"},
        {"{\"a\":[1 2]}\n", "2"},
        {"{\"a\":{\"b\" 1}}\n", "1"},
        {"{\"a\":{\"b\":1,}}\n", "}}"},
        {"{\"a\":[1,]}\n", "]"},
        {"{\"a\":[1}}\n", "}}"},
        {"{\"a\":\"x\\qy\"}\n", "\\q"},
        {"{\"a\":\"\\u12G4\"}\n", "\\u"},
        {"{\"a\":\"x\ty\"}\n", "\t"},
        {"{}x\n", "x"},                                /* missing newline after the header */
        {"{}{\"type\":\"a\"}\n", "{\"type"},
        {"{}\n{\"type\":\"a\"} x\npayload\n", "x\n"},
        {"{}\n{\"type\":\"a\"}{\"type\":\"b\"}\n", "{\"type\":\"b"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        fail_str(cases[i].s, TM_ERR_MALFORMED, at(cases[i].s, cases[i].where));
}

Test(envelope, header_line_ends_inside_json) {
    /* The offset is the end of the line: its '\n', or the end of the input. */
    fail_str("{\"a\":1\n{\"type\":\"x\"}\n", TM_ERR_MALFORMED, 6);
    fail_str("{\"a\":[1,\n", TM_ERR_MALFORMED, 8);
    fail_str("{\"a\"", TM_ERR_MALFORMED, 4);
    fail_str("{", TM_ERR_MALFORMED, 1);
    fail_str("{}\n{\"type\":\"a\",", TM_ERR_MALFORMED, 15);
    /* An unterminated string is reported at its opening quote. */
    fail_str("{\"a\":\"xx\n", TM_ERR_MALFORMED, 5);
    fail_str("{\"a\":\"x\\", TM_ERR_MALFORMED, 5);
}

Test(envelope, item_type_is_required) {
    tm_error e = fail_str("{}\n{\"length\":0}\n\n", TM_ERR_MALFORMED, 3);
    cr_assert(strstr(e.message, "\"type\""), "%s", e.message);
    e = fail_str("{}\n{}\n", TM_ERR_MALFORMED, 3);
    cr_assert(strstr(e.message, "\"type\""), "%s", e.message);
    static const char *const bad[] = {"{}\n{\"type\":5}\n", "{}\n{\"type\":null}\n", "{}\n{\"type\":[\"a\"]}\n",
                                      "{}\n{\"type\":\"a\",\"type\":true}\n"};
    for (size_t i = 0; i < 4; i++) {
        const char *s = bad[i];
        const char *v = strrchr(s, ':') + 1;
        e = fail_str(s, TM_ERR_MALFORMED, (uint64_t)(v - s));
        cr_assert(strstr(e.message, "\"type\""), "%s", e.message);
    }
}

Test(envelope, string_fields_must_be_strings) {
    static const char *const names[] = {"content_type", "platform", "filename"};
    for (size_t i = 0; i < 3; i++) {
        char s[128];
        snprintf(s, sizeof s, "{}\n{\"type\":\"a\",\"%s\":{}}\n\n", names[i]);
        tm_error e = fail_str(s, TM_ERR_MALFORMED, at(s, "{}}"));
        cr_assert(strstr(e.message, names[i]), "%s", e.message);
    }
    tm_error e = fail_str("{\"event_id\":12}\n", TM_ERR_MALFORMED, 12);
    cr_assert(strstr(e.message, "event_id"), "%s", e.message);
    e = fail_str("{\"dsn\":false}\n", TM_ERR_MALFORMED, 7);
    cr_assert(strstr(e.message, "dsn"), "%s", e.message);
}

Test(envelope, bad_lengths) {
    static const char *const fields[] = {"length", "meta_length"};
    static const char *const values[] = {"-1", "1.5", "1e3", "1E0", "2.0", "-0", "\"5\"", "true", "[1]",
                                         "18446744073709551616", "99999999999999999999999", "{\"x\":1}"};
    for (size_t f = 0; f < 2; f++)
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            char s[160];
            snprintf(s, sizeof s, "{}\n{\"type\":\"a\",\"%s\":%s}\nabc\n", fields[f], values[v]);
            tm_error e = fail_str(s, TM_ERR_MALFORMED, at(s, values[v]));
            cr_assert(strstr(e.message, fields[f]), "%s", e.message);
        }
    /* "+1" is not JSON at all. */
    fail_str("{}\n{\"type\":\"a\",\"length\":+1}\nabc\n", TM_ERR_MALFORMED, 24);
    /* 2^64-1 fits, and is then far past the end. */
    const char *huge = "{}\n{\"type\":\"a\",\"length\":18446744073709551615}\nabc\n";
    tm_error e = fail_str(huge, TM_ERR_TRUNCATED, 3);
    cr_assert(strstr(e.message, "18446744073709551615") && strstr(e.message, "only 4 bytes"), "%s", e.message);
    /* A big meta_length is fine for the parser (split treats it as out of range). */
    tm_srv_envelope env;
    const char *big = "{}\n{\"type\":\"a\",\"meta_length\":18446744073709551615}\nabc\n";
    uint8_t *copy = parse_ok(big, strlen(big), &env);
    cr_assert_eq(env.items[0].meta_length, UINT64_MAX);
    tm_srv_envelope_release(&env);
    free(copy);
}

Test(envelope, length_past_end_and_missing_payload_newline) {
    const char *s = "{}\n{\"type\":\"a\",\"length\":1}\nx\n{\"type\":\"b\",\"length\":10}\n0123456";
    tm_error e = fail_str(s, TM_ERR_TRUNCATED, at(s, "{\"type\":\"b\""));
    cr_assert(strstr(e.message, "length 10") && strstr(e.message, "only 7 bytes"), "%s", e.message);
    /* A payload shorter than declared swallows the newline and then lacks its own. */
    s = "{}\n{\"type\":\"a\",\"length\":2}\nabcd\n";
    fail_str(s, TM_ERR_MALFORMED, at(s, "cd"));
    /* A lying length that ends inside the next item header. */
    s = "{}\n{\"type\":\"a\",\"length\":4}\nab\n{\"type\":\"b\"}\n";
    fail_str(s, TM_ERR_MALFORMED, at(s, "\"type\":\"b"));
}

Test(envelope, lying_meta_length_parses_and_splits_as_plain) {
    const char s[] = "{}\n{\"type\":\"profile_chunk\",\"meta_length\":100,\"length\":5}\n{\"a\"}\n";
    tm_srv_envelope env;
    uint8_t *copy = parse_ok(s, sizeof s - 1, &env);
    cr_assert_eq(env.items[0].meta_length, 100);
    tm_srv_view json, raw;
    cr_assert_eq(tm_srv_item_split(&env.items[0], &json, &raw), 0);
    assert_view(json, "{\"a\"}");
    assert_view(raw, NULL);
    tm_srv_envelope_release(&env);
    free(copy);
}

/* ---- ceilings ---------------------------------------------------------- */

/* A header line of exactly n bytes: {"pad":"xxx..."}. */
static char *header_of(size_t n) {
    char *h = malloc(n + 1);
    cr_assert_not_null(h);
    memcpy(h, "{\"pad\":\"", 8);
    memset(h + 8, 'x', n - 10);
    memcpy(h + n - 2, "\"}", 3);
    return h;
}

Test(envelope, header_line_limit) {
    tm_srv_buf b = {0};
    char *h = header_of(TM_SRV_MAX_HEADER_BYTES);
    cr_assert_eq(tm_srv_buf_append(&b, h, strlen(h)), 0);
    cr_assert_eq(tm_srv_buf_append(&b, "\n", 1), 0);
    tm_srv_envelope env;
    uint8_t *copy = parse_ok((const char *)b.data, b.len, &env);
    cr_assert_eq(env.header.len, TM_SRV_MAX_HEADER_BYTES);
    tm_srv_envelope_release(&env);
    free(copy);
    /* Without the newline too. */
    copy = parse_ok((const char *)b.data, b.len - 1, &env);
    tm_srv_envelope_release(&env);
    free(copy);
    free(h);

    h = header_of(TM_SRV_MAX_HEADER_BYTES + 1);
    parse_fail(h, strlen(h), TM_ERR_LIMIT, 0);
    b.len = 0;
    cr_assert_eq(tm_srv_buf_append(&b, h, strlen(h)), 0);
    cr_assert_eq(tm_srv_buf_append(&b, "\n", 1), 0);
    parse_fail(b.data, b.len, TM_ERR_LIMIT, 0);

    /* An item header over the limit, at its own offset. */
    b.len = 0;
    cr_assert_eq(tm_srv_buf_append(&b, "{}\n{\"type\":\"a\"}\nx\n", 18), 0);
    cr_assert_eq(tm_srv_buf_append(&b, h, strlen(h)), 0);
    cr_assert_eq(tm_srv_buf_append(&b, "\nx\n", 3), 0);
    tm_error e = parse_fail(b.data, b.len, TM_ERR_LIMIT, 18);
    cr_assert(strstr(e.message, "65536"), "%s", e.message);
    free(h);
    tm_srv_buf_release(&b);
}

static void append_items(tm_srv_buf *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const char *item = (i % 2) ? "{\"type\":\"t\",\"length\":1}\nx\n" : "{\"type\":\"t\"}\nline\n";
        cr_assert_eq(tm_srv_buf_append(b, item, strlen(item)), 0);
    }
}

Test(envelope, item_count_limit) {
    tm_srv_buf b = {0};
    cr_assert_eq(tm_srv_buf_append(&b, "{}\n", 3), 0);
    append_items(&b, TM_SRV_MAX_ITEMS);
    tm_srv_envelope env;
    uint8_t *copy = parse_ok((const char *)b.data, b.len, &env);
    cr_assert_eq(env.n_items, TM_SRV_MAX_ITEMS);
    assert_payload(&env.items[TM_SRV_MAX_ITEMS - 1], "x");
    assert_payload(&env.items[0], "line");
    tm_srv_envelope_release(&env);
    free(copy);
    size_t over = b.len;
    append_items(&b, 1);
    tm_error e = parse_fail(b.data, b.len, TM_ERR_LIMIT, over);
    cr_assert(strstr(e.message, "1000"), "%s", e.message);
    tm_srv_buf_release(&b);
}

/* {"type":"a","deep": followed by depth nested containers. */
static tm_srv_buf nested(size_t depth, int objects) {
    tm_srv_buf b = {0};
    const char *head = "{}\n{\"type\":\"a\",\"deep\":";
    cr_assert_eq(tm_srv_buf_append(&b, head, strlen(head)), 0);
    for (size_t i = 0; i < depth; i++)
        cr_assert_eq(tm_srv_buf_append(&b, objects ? "{\"k\":" : "[", objects ? 5 : 1), 0);
    cr_assert_eq(tm_srv_buf_append(&b, "1", 1), 0);
    for (size_t i = 0; i < depth; i++) cr_assert_eq(tm_srv_buf_append(&b, objects ? "}" : "]", 1), 0);
    cr_assert_eq(tm_srv_buf_append(&b, "}\npayload\n", 10), 0);
    return b;
}

Test(envelope, nesting_limit) {
    const size_t head = strlen("{}\n{\"type\":\"a\",\"deep\":");
    for (int objects = 0; objects < 2; objects++) {
        tm_srv_buf b = nested(63, objects); /* 64 levels with the header object */
        tm_srv_envelope env;
        uint8_t *copy = parse_ok((const char *)b.data, b.len, &env);
        assert_payload(&env.items[0], "payload");
        tm_srv_envelope_release(&env);
        free(copy);
        tm_srv_buf_release(&b);

        b = nested(64, objects);
        parse_fail(b.data, b.len, TM_ERR_LIMIT, head + 63 * (objects ? 5 : 1));
        tm_srv_buf_release(&b);
        b = nested(10000, objects); /* no recursion: fails at the same place */
        parse_fail(b.data, b.len, TM_ERR_LIMIT, head + 63 * (objects ? 5 : 1));
        tm_srv_buf_release(&b);
    }
}

/* ---- split_item_payload ------------------------------------------------- */

Test(envelope, split_rules) {
    static const uint8_t abc[] = {'a', 'b', 'c'};
    static const struct {
        int has;
        uint64_t meta;
        size_t payload_len;
        int ret;
        size_t json_len;   /* json always starts at the payload */
        size_t raw_len;    /* 0: no raw ({NULL, 0}) */
    } cases[] = {
        {0, 0, 3, 0, 3, 0},          /* no meta_length: everything is json */
        {0, 2, 3, 0, 3, 0},          /* meta_length ignored when absent */
        {1, 0, 3, 1, 0, 3},          /* 0: empty json, everything raw */
        {1, 0, 0, 1, 0, 0},          /* 0 of nothing: empty json, no raw */
        {1, 1, 3, 1, 1, 2},
        {1, 2, 3, 1, 2, 1},
        {1, 3, 3, 1, 3, 0},          /* equal: empty raw part -> no raw, still compound */
        {1, 4, 3, 0, 3, 0},          /* out of range: whole payload, no raw */
        {1, UINT64_MAX, 3, 0, 3, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tm_srv_item it = {0};
        it.payload = abc;
        it.payload_len = cases[i].payload_len;
        it.has_meta_length = cases[i].has;
        it.meta_length = cases[i].meta;
        tm_srv_view json = {"junk", 4}, raw = {"junk", 4};
        cr_assert_eq(tm_srv_item_split(&it, &json, &raw), cases[i].ret, "case %zu", i);
        cr_assert_eq(json.ptr, (const char *)abc, "case %zu", i);
        cr_assert_eq(json.len, cases[i].json_len, "case %zu", i);
        cr_assert_eq(raw.len, cases[i].raw_len, "case %zu", i);
        if (cases[i].raw_len)
            cr_assert_eq(raw.ptr, (const char *)abc + cases[i].json_len, "case %zu", i);
        else
            cr_assert_null(raw.ptr, "case %zu", i);
    }
}

Test(envelope, write_item_round_trip) {
    tm_srv_buf b = {0};
    cr_assert_eq(tm_srv_buf_append(&b, "{}\n", 3), 0);
    const char *h1 = "{\"type\":\"a\",\"length\":5}";
    cr_assert_eq(tm_srv_envelope_write_item(&b, h1, strlen(h1), "x\ny\nz", 5), 0);
    const char *h2 = "{\"type\":\"b\"}";
    cr_assert_eq(tm_srv_envelope_write_item(&b, h2, strlen(h2), NULL, 0), 0);
    const char *want = "{}\n{\"type\":\"a\",\"length\":5}\nx\ny\nz\n{\"type\":\"b\"}\n\n";
    cr_assert_eq(b.len, strlen(want));
    cr_assert(memcmp(b.data, want, b.len) == 0, "%.*s", (int)b.len, (const char *)b.data);
    tm_srv_envelope env;
    uint8_t *copy = parse_ok((const char *)b.data, b.len, &env);
    cr_assert_eq(env.n_items, 2);
    assert_payload(&env.items[0], "x\ny\nz");
    assert_view(env.items[0].header, h1);
    assert_payload(&env.items[1], "");
    tm_srv_envelope_release(&env);
    free(copy);
    tm_srv_buf_release(&b);
}
