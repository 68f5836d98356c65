/*
 * test_message.c — server/message.c: the ProfileChunkKafkaMessage encoder
 * pinned byte for byte against hand-written MessagePack (field order, bin
 * versus str, smallest integer encodings, as rmp_serde::to_vec_named writes
 * them) and made in place around a payload, the strict decoder's errors with their offsets and field names,
 * and the exact outcome JSON; JSON strings of bytes that are not UTF-8.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* ---- A tiny MessagePack writer for hand-made inputs -------------------- */

typedef struct mp {
    uint8_t b[4096];
    size_t n;
} mp;

static void raw(mp *m, const void *p, size_t n) {
    cr_assert_leq(m->n + n, sizeof m->b);
    memcpy(m->b + m->n, p, n);
    m->n += n;
}
static void byte(mp *m, uint8_t v) { raw(m, &v, 1); }
static void str(mp *m, const char *s) {
    byte(m, (uint8_t)(0xa0 | strlen(s))); /* fixstr: tests keep strings < 32 bytes */
    raw(m, s, strlen(s));
}
static void bin(mp *m, const char *s) {
    byte(m, 0xc4);
    byte(m, (uint8_t)strlen(s));
    raw(m, s, strlen(s));
}

/* The fields every message needs, as pairs after a map header. */
static void required(mp *m, int skip) {
    if (skip != 0) { str(m, "type"); str(m, "profile_chunk"); }
    if (skip != 1) { str(m, "organization_id"); byte(m, 1); }
    if (skip != 2) { str(m, "project_id"); byte(m, 42); }
    if (skip != 3) { str(m, "received"); byte(m, 7); }
    if (skip != 4) { str(m, "retention_days"); byte(m, 90); }
    if (skip != 5) { str(m, "payload"); bin(m, "{}"); }
}

static tm_status decode(const mp *m, tm_srv_chunk_msg *out, tm_error *err) {
    static char ctype[64];
    return tm_srv_chunk_msg_decode(m->b, m->n, out, ctype, sizeof ctype, err);
}

/* ---- Encoding ---------------------------------------------------------- */

Test(message, exact_bytes_with_raw_profile) {
    static const uint8_t expected[] = {
        0x88,                                                       /* map of 8 */
        0xa4, 't', 'y', 'p', 'e',
        0xad, 'p', 'r', 'o', 'f', 'i', 'l', 'e', '_', 'c', 'h', 'u', 'n', 'k',
        0xaf, 'o', 'r', 'g', 'a', 'n', 'i', 'z', 'a', 't', 'i', 'o', 'n', '_', 'i', 'd',
        0x01,                                                       /* positive fixint */
        0xaa, 'p', 'r', 'o', 'j', 'e', 'c', 't', '_', 'i', 'd',
        0xcd, 0x01, 0x2c,                                           /* uint16 300 */
        0xa8, 'r', 'e', 'c', 'e', 'i', 'v', 'e', 'd',
        0xce, 0x69, 0x93, 0x8e, 0xdb,                               /* uint32 1771278043 */
        0xae, 'r', 'e', 't', 'e', 'n', 't', 'i', 'o', 'n', '_', 'd', 'a', 'y', 's',
        0x5a,                                                       /* 90 */
        0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd',
        0xc4, 0x02, '{', '}',                                       /* bin 8 */
        0xab, 'r', 'a', 'w', '_', 'p', 'r', 'o', 'f', 'i', 'l', 'e',
        0xc4, 0x03, 0x00, 0xff, 0x0a,
        0xb8, 'r', 'a', 'w', '_', 'p', 'r', 'o', 'f', 'i', 'l', 'e', '_', 'c', 'o', 'n', 't', 'e', 'n', 't',
        '_', 't', 'y', 'p', 'e',
        0xa8, 'p', 'e', 'r', 'f', 'e', 't', 't', 'o',               /* str, not bin */
    };
    static const uint8_t rawp[] = {0x00, 0xff, 0x0a};
    tm_srv_chunk_msg m = {.organization_id = 1, .project_id = 300, .received = 1771278043, .retention_days = 90,
                          .payload = (const uint8_t *)"{}", .payload_len = 2, .raw_profile = rawp,
                          .raw_profile_len = sizeof rawp, .raw_profile_content_type = "perfetto"};
    tm_srv_buf out = {0};
    tm_error err;
    cr_assert_eq(tm_srv_chunk_msg_encode(&m, &out, &err), TM_OK, "%s", err.message);
    cr_assert_eq(out.len, sizeof expected);
    cr_assert_arr_eq(out.data, expected, sizeof expected);
    tm_srv_buf_release(&out);
}

Test(message, exact_bytes_without_optional_fields) {
    static const uint8_t expected[] = {
        0x86,                                                       /* map of 6: no raw fields */
        0xa4, 't', 'y', 'p', 'e',
        0xad, 'p', 'r', 'o', 'f', 'i', 'l', 'e', '_', 'c', 'h', 'u', 'n', 'k',
        0xaf, 'o', 'r', 'g', 'a', 'n', 'i', 'z', 'a', 't', 'i', 'o', 'n', '_', 'i', 'd',
        0xcf, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00,       /* uint64 2^32 */
        0xaa, 'p', 'r', 'o', 'j', 'e', 'c', 't', '_', 'i', 'd',
        0xcc, 0xc8,                                                 /* uint8 200 */
        0xa8, 'r', 'e', 'c', 'e', 'i', 'v', 'e', 'd',
        0x00,
        0xae, 'r', 'e', 't', 'e', 'n', 't', 'i', 'o', 'n', '_', 'd', 'a', 'y', 's',
        0xce, 0xff, 0xff, 0xff, 0xff,                               /* uint32 max */
        0xa7, 'p', 'a', 'y', 'l', 'o', 'a', 'd',
        0xc4, 0x00,                                                 /* empty bin */
    };
    tm_srv_chunk_msg m = {.organization_id = 1ull << 32, .project_id = 200, .received = 0,
                          .retention_days = UINT32_MAX, .payload = (const uint8_t *)"", .payload_len = 0};
    tm_srv_buf out = {0};
    cr_assert_eq(tm_srv_chunk_msg_encode(&m, &out, NULL), TM_OK);
    cr_assert_eq(out.len, sizeof expected);
    cr_assert_arr_eq(out.data, expected, sizeof expected);
    tm_srv_buf_release(&out);
}

Test(message, encode_appends_to_the_buffer) {
    tm_srv_buf out = {0};
    cr_assert_eq(tm_srv_buf_append(&out, "xy", 2), 0);
    tm_srv_chunk_msg m = {.payload = (const uint8_t *)"{}", .payload_len = 2};
    cr_assert_eq(tm_srv_chunk_msg_encode(&m, &out, NULL), TM_OK);
    cr_assert_eq(memcmp(out.data, "xy\x86\xa4type", 8), 0);
    tm_srv_buf_release(&out);
}

/* The message made around a payload already in its buffer is the one
 * encode writes from a copy, at every bin header size (bin8, bin16, bin32)
 * and with or without the raw profile. */
Test(message, encode_around_a_payload_in_place_matches_encode) {
    static const size_t sizes[] = {0, 1, 255, 256, 65535, 65536, 300000};
    uint8_t *payload = malloc(300000);
    for (size_t i = 0; i < 300000; i++) payload[i] = (uint8_t)(i * 7 + 3);
    for (int with_raw = 0; with_raw < 2; with_raw++) {
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            tm_srv_chunk_msg m = {.organization_id = 1u << 20, .project_id = 42, .received = 1700000000,
                                  .retention_days = 90, .payload = payload, .payload_len = sizes[k]};
            if (with_raw) {
                m.raw_profile = (const uint8_t *)"trace bytes";
                m.raw_profile_len = 11;
                m.raw_profile_content_type = "perfetto";
            }
            tm_srv_buf want = {0}, in_place = {0};
            tm_error err;
            cr_assert_eq(tm_srv_chunk_msg_encode(&m, &want, &err), TM_OK);
            cr_assert_eq(tm_srv_buf_reserve(&in_place, TM_SRV_CHUNK_MSG_HEAD_ROOM), 0);
            in_place.len = TM_SRV_CHUNK_MSG_HEAD_ROOM;
            cr_assert_eq(tm_srv_buf_append(&in_place, payload, sizes[k]), 0);
            m.payload = NULL; /* not read: the payload is the buffer's */
            size_t start = SIZE_MAX;
            cr_assert_eq(tm_srv_chunk_msg_encode_around(&m, &in_place, &start, &err), TM_OK);
            cr_assert_lt(start, TM_SRV_CHUNK_MSG_HEAD_ROOM);
            cr_assert_eq(in_place.len - start, want.len, "payload %zu, raw %d", sizes[k], with_raw);
            cr_assert(memcmp(in_place.data + start, want.data, want.len) == 0, "payload %zu, raw %d", sizes[k],
                      with_raw);
            tm_srv_buf_release(&want);
            tm_srv_buf_release(&in_place);
        }
    }
    free(payload);
}

Test(message, round_trip) {
    uint8_t payload[70000], rawp[300];
    for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < sizeof rawp; i++) rawp[i] = (uint8_t)(255 - i);
    const tm_srv_chunk_msg cases[] = {
        {.organization_id = UINT64_MAX, .project_id = 0, .received = 1771278043, .retention_days = 30,
         .payload = payload, .payload_len = sizeof payload, .raw_profile = rawp, .raw_profile_len = sizeof rawp,
         .raw_profile_content_type = "application/x-perfetto-trace"},
        {.organization_id = 5, .project_id = 65536, .received = 127, .retention_days = 128, .payload = payload,
         .payload_len = 255},
        {.organization_id = 128, .project_id = 65535, .received = 256, .retention_days = 0, .payload = payload,
         .payload_len = 256, .raw_profile = rawp, .raw_profile_len = 0},
        {.payload = payload, .payload_len = 1, .raw_profile_content_type = ""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const tm_srv_chunk_msg *in = &cases[c];
        tm_srv_buf out = {0};
        tm_error err;
        cr_assert_eq(tm_srv_chunk_msg_encode(in, &out, &err), TM_OK, "case %zu: %s", c, err.message);
        tm_srv_chunk_msg m;
        char ctype[64];
        cr_assert_eq(tm_srv_chunk_msg_decode(out.data, out.len, &m, ctype, sizeof ctype, &err), TM_OK,
                     "case %zu: %s", c, err.message);
        cr_assert_eq(m.organization_id, in->organization_id, "case %zu", c);
        cr_assert_eq(m.project_id, in->project_id, "case %zu", c);
        cr_assert_eq(m.received, in->received, "case %zu", c);
        cr_assert_eq(m.retention_days, in->retention_days, "case %zu", c);
        cr_assert_eq(m.payload_len, in->payload_len, "case %zu", c);
        cr_assert_eq(memcmp(m.payload, in->payload, in->payload_len), 0, "case %zu", c);
        /* views point into the encoded buffer */
        cr_assert(m.payload >= out.data && m.payload + m.payload_len <= out.data + out.len, "case %zu", c);
        cr_assert_eq(m.raw_profile != NULL, in->raw_profile != NULL, "case %zu", c);
        if (in->raw_profile) {
            cr_assert_eq(m.raw_profile_len, in->raw_profile_len, "case %zu", c);
            cr_assert_eq(memcmp(m.raw_profile, in->raw_profile, in->raw_profile_len), 0, "case %zu", c);
        }
        cr_assert_eq(m.raw_profile_content_type != NULL, in->raw_profile_content_type != NULL, "case %zu", c);
        if (in->raw_profile_content_type) {
            cr_assert_eq(m.raw_profile_content_type, ctype, "case %zu", c);
            cr_assert_str_eq(ctype, in->raw_profile_content_type, "case %zu", c);
        }
        tm_srv_buf_release(&out);
    }
}

/* ---- Decoding errors --------------------------------------------------- */

Test(message, truncated_at_every_byte) {
    tm_srv_chunk_msg in = {.organization_id = 1 << 20, .project_id = 42, .received = 1771278043,
                           .retention_days = 90, .payload = (const uint8_t *)"{\"a\":1}", .payload_len = 7,
                           .raw_profile = (const uint8_t *)"raw", .raw_profile_len = 3,
                           .raw_profile_content_type = "perfetto"};
    tm_srv_buf out = {0};
    cr_assert_eq(tm_srv_chunk_msg_encode(&in, &out, NULL), TM_OK);
    for (size_t cut = 0; cut < out.len; cut++) {
        tm_srv_chunk_msg m;
        char ctype[16];
        tm_error err = {0};
        cr_assert_eq(tm_srv_chunk_msg_decode(out.data, cut, &m, ctype, sizeof ctype, &err), TM_ERR_TRUNCATED,
                     "cut at %zu: %s", cut, err.message);
        cr_assert_eq(err.code, TM_ERR_TRUNCATED);
        cr_assert_leq(err.offset, cut, "cut at %zu: offset %llu", cut, (unsigned long long)err.offset);
    }
    /* the offset names the value that runs past the end: the payload's bin head */
    tm_srv_chunk_msg m;
    char ctype[16];
    tm_error err;
    size_t payload_at = 0;
    for (size_t i = 0; i + 8 <= out.len; i++)
        if (memcmp(out.data + i, "\xa7payload", 8) == 0) payload_at = i + 8;
    cr_assert_neq(payload_at, 0);
    cr_assert_eq(tm_srv_chunk_msg_decode(out.data, payload_at + 4, &m, ctype, sizeof ctype, &err), TM_ERR_TRUNCATED);
    cr_assert_eq(err.offset, payload_at);
    tm_srv_buf_release(&out);
}

Test(message, trailing_bytes) {
    mp m = {0};
    byte(&m, 0x86);
    required(&m, -1);
    const size_t end = m.n;
    byte(&m, 0xc0);
    tm_srv_chunk_msg out;
    tm_error err;
    cr_assert_eq(decode(&m, &out, &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, end);
    cr_assert(strstr(err.message, "after the end"), "%s", err.message);
}

Test(message, missing_fields) {
    static const char *const names[] = {"type", "organization_id", "project_id", "received", "retention_days",
                                        "payload"};
    for (int skip = 0; skip < 6; skip++) {
        mp m = {0};
        byte(&m, 0x85);
        required(&m, skip);
        tm_srv_chunk_msg out;
        tm_error err;
        cr_assert_eq(decode(&m, &out, &err), TM_ERR_MALFORMED, "without %s", names[skip]);
        char want[64];
        snprintf(want, sizeof want, "missing field \"%s\"", names[skip]);
        cr_assert_str_eq(err.message, want);
    }
}

/* A message whose field `key` has the value bytes v[0..n); the rest valid. */
static tm_status with_field(const char *key, const void *v, size_t n, tm_error *err, uint64_t *value_at) {
    static const char *const names[] = {"type", "organization_id", "project_id", "received", "retention_days",
                                        "payload"};
    mp m = {0};
    byte(&m, 0x86);
    for (int i = 0; i < 6; i++) {
        if (strcmp(names[i], key) != 0) continue;
        required(&m, i); /* the other five */
        str(&m, key);
        *value_at = m.n;
        raw(&m, v, n);
    }
    tm_srv_chunk_msg out;
    return decode(&m, &out, err);
}

Test(message, wrong_types_name_the_field) {
    static const struct {
        const char *key;
        const char *value;
        size_t len;
        const char *message;
    } cases[] = {
        {"organization_id", "\xa1x", 2, "field \"organization_id\": expected an unsigned integer, found string"},
        {"project_id", "\xff", 1, "field \"project_id\": expected an unsigned integer, found negative integer"},
        {"project_id", "\xd0\x80", 2, "field \"project_id\": expected an unsigned integer, found negative integer"},
        {"received", "\xcb\x00\x00\x00\x00\x00\x00\x00\x00", 9,
         "field \"received\": expected an unsigned integer, found float"},
        {"retention_days", "\xcf\x00\x00\x00\x01\x00\x00\x00\x00", 9,
         "field \"retention_days\": 4294967296 does not fit in 32 bits"},
        {"payload", "\xa2{}", 3, "field \"payload\": expected binary, found string"},
        {"payload", "\xc0", 1, "field \"payload\": expected binary, found nil"},
        {"type", "\xc4\x0dprofile_chunk", 15, "field \"type\": expected a string, found binary"},
        {"type", "\xa7profile", 8, "field \"type\": expected \"profile_chunk\", found \"profile\""},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        tm_error err;
        uint64_t at = 0;
        cr_assert_eq(with_field(cases[c].key, cases[c].value, cases[c].len, &err, &at), TM_ERR_MALFORMED,
                     "case %zu", c);
        cr_assert_str_eq(err.message, cases[c].message, "case %zu", c);
        cr_assert_eq(err.offset, at, "case %zu", c);
    }
}

Test(message, signed_encodings_of_non_negative_values_are_accepted) {
    tm_error err;
    uint64_t at;
    cr_assert_eq(with_field("project_id", "\xd1\x01\x00", 3, &err, &at), TM_OK, "%s", err.message);
    mp m = {0};
    byte(&m, 0x86);
    required(&m, 2);
    str(&m, "project_id");
    raw(&m, "\xd3\x00\x00\x00\x00\x00\x00\x01\x00", 9); /* int64 256 */
    tm_srv_chunk_msg out;
    cr_assert_eq(decode(&m, &out, &err), TM_OK, "%s", err.message);
    cr_assert_eq(out.project_id, 256);
}

Test(message, optional_fields_wrong_type_nil_and_small_buffer) {
    tm_srv_chunk_msg out;
    tm_error err;
    mp m = {0};
    byte(&m, 0x87);
    required(&m, -1);
    const uint64_t at = m.n + 1 + strlen("raw_profile_content_type");
    str(&m, "raw_profile_content_type");
    bin(&m, "perfetto");
    cr_assert_eq(decode(&m, &out, &err), TM_ERR_MALFORMED);
    cr_assert_str_eq(err.message, "field \"raw_profile_content_type\": expected a string, found binary");
    cr_assert_eq(err.offset, at);

    m.n = 0; /* nil optional fields read as absent */
    byte(&m, 0x88);
    required(&m, -1);
    str(&m, "raw_profile");
    byte(&m, 0xc0);
    str(&m, "raw_profile_content_type");
    byte(&m, 0xc0);
    cr_assert_eq(decode(&m, &out, &err), TM_OK, "%s", err.message);
    cr_assert_null(out.raw_profile);
    cr_assert_null(out.raw_profile_content_type);

    m.n = 0; /* a content type longer than the caller's buffer */
    byte(&m, 0x87);
    required(&m, -1);
    str(&m, "raw_profile_content_type");
    str(&m, "perfetto");
    char small[8];
    cr_assert_eq(tm_srv_chunk_msg_decode(m.b, m.n, &out, small, sizeof small, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "raw_profile_content_type"), "%s", err.message);
    char exact[9];
    cr_assert_eq(tm_srv_chunk_msg_decode(m.b, m.n, &out, exact, sizeof exact, &err), TM_OK, "%s", err.message);
    cr_assert_str_eq(out.raw_profile_content_type, "perfetto");
}

Test(message, structural_errors) {
    tm_srv_chunk_msg out;
    tm_error err;
    mp m = {0};
    byte(&m, 0x91); /* an array, not a map */
    byte(&m, 0x01);
    cr_assert_eq(decode(&m, &out, &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, 0);
    cr_assert_str_eq(err.message, "a profile chunk message is a map, found array");

    m.n = 0; /* a non-string key */
    byte(&m, 0x87);
    required(&m, -1);
    const uint64_t key_at = m.n;
    byte(&m, 0x07);
    byte(&m, 0x01);
    cr_assert_eq(decode(&m, &out, &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, key_at);
    cr_assert_str_eq(err.message, "map key 6 is not a string (found unsigned integer)");

    m.n = 0; /* a duplicate key */
    byte(&m, 0x87);
    required(&m, -1);
    const uint64_t dup_at = m.n;
    str(&m, "project_id");
    byte(&m, 43);
    cr_assert_eq(decode(&m, &out, &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, dup_at);
    cr_assert_str_eq(err.message, "duplicate field \"project_id\"");

    m.n = 0; /* the reserved type byte inside a skipped value */
    byte(&m, 0x87);
    required(&m, -1);
    str(&m, "extra");
    const uint64_t bad_at = m.n + 2;
    byte(&m, 0x92);
    byte(&m, 0x01);
    byte(&m, 0xc1);
    cr_assert_eq(decode(&m, &out, &err), TM_ERR_MALFORMED);
    cr_assert_eq(err.offset, bad_at);

    m.n = 0; /* an unknown value claiming 2^32-1 elements ends early, without looping over them */
    byte(&m, 0x87);
    required(&m, -1);
    str(&m, "extra");
    const uint64_t arr_at = m.n;
    raw(&m, "\xdd\xff\xff\xff\xff\x01", 6);
    cr_assert_eq(decode(&m, &out, &err), TM_ERR_TRUNCATED);
    cr_assert_eq(err.offset, arr_at);

    cr_assert_eq(tm_srv_chunk_msg_decode(m.b, 0, &out, NULL, 0, &err), TM_ERR_TRUNCATED);
    cr_assert_eq(err.offset, 0);
}

Test(message, unknown_keys_are_skipped) {
    mp m = {0};
    byte(&m, 0x8a);
    str(&m, "first"); /* before "type" */
    /* {"a": [1, 0.0, true], "b": {nil: fixext4}} */
    static const uint8_t nested[] = {0x82, 0xa1, 'a', 0x93, 0x01, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xc3,
                                     0xa1, 'b',  0x81, 0xc0, 0xd6, 0x01, 0, 0, 0, 0};
    raw(&m, nested, sizeof nested);
    required(&m, -1);
    str(&m, "ext8");
    raw(&m, "\xc7\x02\x05xy", 5);
    str(&m, "bin16");
    raw(&m, "\xc5\x00\x03xyz", 6);
    str(&m, "str8");
    raw(&m, "\xd9\x01z", 3);
    tm_srv_chunk_msg out;
    tm_error err;
    cr_assert_eq(decode(&m, &out, &err), TM_OK, "%s", err.message);
    cr_assert_eq(out.organization_id, 1);
    cr_assert_eq(out.project_id, 42);
    cr_assert_eq(out.received, 7);
    cr_assert_eq(out.retention_days, 90);
    cr_assert_eq(out.payload_len, 2);
    cr_assert_eq(memcmp(out.payload, "{}", 2), 0);
    cr_assert_null(out.raw_profile);
}

Test(message, deeply_nested_unknown_value_is_skipped_without_recursion) {
    static uint8_t buf[300000];
    mp head = {0};
    byte(&head, 0x87);
    required(&head, -1);
    str(&head, "deep");
    memcpy(buf, head.b, head.n);
    size_t n = head.n;
    const size_t depth = 200000;
    memset(buf + n, 0x91, depth); /* [[[[...1...]]]] */
    n += depth;
    buf[n++] = 0x01;
    tm_srv_chunk_msg out;
    tm_error err;
    cr_assert_eq(tm_srv_chunk_msg_decode(buf, n, &out, NULL, 0, &err), TM_OK, "%s", err.message);
    cr_assert_eq(out.project_id, 42);
    cr_assert_eq(tm_srv_chunk_msg_decode(buf, n - 1, &out, NULL, 0, &err), TM_ERR_TRUNCATED);
}

/* ---- Outcome JSON ------------------------------------------------------ */

static char *outcome(const tm_srv_outcome *o, tm_srv_buf *out) {
    tm_error err;
    cr_assert_eq(tm_srv_outcome_json(o, out, &err), TM_OK, "%s", err.message);
    cr_assert_eq(tm_srv_buf_append(out, "", 1), 0);
    return (char *)out->data;
}

Test(message, outcome_json_exact) {
    tm_srv_outcome o = {.timestamp = 1771278043, .org_id = 1, .project_id = 42, .outcome = TM_SRV_OUTCOME_INVALID,
                        .reason = "profiling_invalid_sampled_profile",
                        .event_id = {"9ec79c33ec9942ab8353589fcb2e04dc", 32},
                        .category = TM_SRV_CATEGORY_PROFILE_CHUNK_UI, .quantity = 1};
    tm_srv_buf out = {0};
    cr_assert_str_eq(outcome(&o, &out),
                     "{\"timestamp\":\"2026-02-16T21:40:43.000000Z\",\"org_id\":1,\"project_id\":42,"
                     "\"key_id\":null,\"outcome\":3,\"reason\":\"profiling_invalid_sampled_profile\","
                     "\"event_id\":\"9ec79c33ec9942ab8353589fcb2e04dc\",\"remote_addr\":null,"
                     "\"source\":\"tracemill\",\"category\":26,\"quantity\":1}");
    tm_srv_buf_release(&out);
}

Test(message, outcome_json_without_reason_or_event_id) {
    tm_srv_outcome o = {.timestamp = 0, .org_id = 18446744073709551615ull, .project_id = 7,
                        .outcome = TM_SRV_OUTCOME_RATE_LIMITED, .category = TM_SRV_CATEGORY_PROFILE_CHUNK,
                        .quantity = 4294967295u};
    tm_srv_buf out = {0};
    cr_assert_str_eq(outcome(&o, &out),
                     "{\"timestamp\":\"1970-01-01T00:00:00.000000Z\",\"org_id\":18446744073709551615,"
                     "\"project_id\":7,\"key_id\":null,\"outcome\":2,\"reason\":null,\"event_id\":null,"
                     "\"remote_addr\":null,\"source\":\"tracemill\",\"category\":18,\"quantity\":4294967295}");
    tm_srv_buf_release(&out);
}

Test(message, outcome_json_escaping) {
    tm_srv_outcome o = {.timestamp = 253402300799ull, .org_id = 1, .project_id = 1, .outcome = 1,
                        .reason = "q\"b\\s/n\nr\rt\tb\bf\f\x01\x1f\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
                        .event_id = {"", 0}, .category = 18, .quantity = 1};
    tm_srv_buf out = {0};
    cr_assert_str_eq(outcome(&o, &out),
                     "{\"timestamp\":\"9999-12-31T23:59:59.000000Z\",\"org_id\":1,\"project_id\":1,"
                     "\"key_id\":null,\"outcome\":1,"
                     "\"reason\":\"q\\\"b\\\\s/n\\nr\\rt\\tb\\bf\\f\\u0001\\u001f\x7f \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\","
                     "\"event_id\":\"\",\"remote_addr\":null,\"source\":\"tracemill\",\"category\":18,\"quantity\":1}");
    tm_srv_buf_release(&out);
}

Test(message, outcome_json_errors_leave_the_buffer) {
    tm_srv_buf out = {0};
    cr_assert_eq(tm_srv_buf_append(&out, "keep", 4), 0);
    tm_error err;
    tm_srv_outcome o = {.timestamp = 253402300800ull, .outcome = 3, .category = 18, .quantity = 1};
    cr_assert_eq(tm_srv_outcome_json(&o, &out, &err), TM_ERR_INVALID_ARG);
    cr_assert(strstr(err.message, "253402300800"), "%s", err.message);
    cr_assert_eq(out.len, 4);

    o.timestamp = 1;
    o.event_id = (tm_srv_view){"ab\xc3(", 4}; /* a lead byte without its continuation */
    cr_assert_eq(tm_srv_outcome_json(&o, &out, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(err.offset, 2);
    cr_assert(strstr(err.message, "event_id"), "%s", err.message);
    cr_assert_eq(out.len, 4);

    o.event_id = (tm_srv_view){NULL, 0};
    o.reason = "\xed\xa0\x80"; /* an encoded surrogate */
    cr_assert_eq(tm_srv_outcome_json(&o, &out, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(err.offset, 0);
    cr_assert(strstr(err.message, "reason"), "%s", err.message);
    o.reason = "\xc0\xaf"; /* overlong '/' */
    cr_assert_eq(tm_srv_outcome_json(&o, &out, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(out.len, 4);
    tm_srv_buf_release(&out);
}

/* JSON strings as serde_json writes them for UTF-8 text, and JSON still
 * for bytes that are not UTF-8 (an access log line holds a client's path). */
Test(message, json_strings_escape_what_is_not_utf8) {
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"a\"b\\c\n\x01", "\"a\\\"b\\\\c\\n\\u0001\""},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
        {"/nope\xff\xfe\"x", "\"/nope\\\\xff\\\\xfe\\\"x\""},
        {"\xc3", "\"\\\\xc3\""},                       /* cut */
        {"\xc0\xaf", "\"\\\\xc0\\\\xaf\""},            /* overlong */
        {"\xed\xa0\x80", "\"\\\\xed\\\\xa0\\\\x80\""}, /* a surrogate */
        {"\xf4\x90\x80\x80", "\"\\\\xf4\\\\x90\\\\x80\\\\x80\""}, /* past U+10FFFF */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        tm_srv_buf b = {0};
        cr_assert_eq(tm_srv_json_string(&b, cases[i].in, strlen(cases[i].in)), 0);
        cr_assert_eq(b.len, strlen(cases[i].out), "case %zu: %.*s", i, (int)b.len, b.data);
        cr_assert_eq(memcmp(b.data, cases[i].out, b.len), 0, "case %zu: %.*s", i, (int)b.len, b.data);
        tm_srv_buf_release(&b);
    }
}
