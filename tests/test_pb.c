/*
 * test_pb.c — unit tests of the protobuf wire reader in src/pb.h
 * (tm_pb_reader_of, tm_pb_next, tm_pb_varint, tm_pb_packed_next,
 * tm_pb_packed_count, tm_pb_repeated_next and _fill, tm_pb_varint_of_len) against
 * https://protobuf.dev/programming-guides/encoding/:
 * base-128 varints of at most 10 bytes (negative int64 takes all 10),
 * little-endian fixed32/fixed64, length-delimited payloads, packed repeated
 * scalars, field numbers 1..2^29-1 and wire types 0, 1, 2, 5 (groups 3/4 and
 * the undefined 6/7 are rejected, as pb.h documents). A differential test
 * runs random damaged messages through tm_pb_next and a reference decoder.
 *
 * Inputs are exact-size arrays or heap copies, so ASan catches any read past
 * the end. Errors must leave err_code (TRUNCATED vs MALFORMED) and r.p at the
 * offending byte, because the decoder turns r.p into tm_error.offset.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/pb.h"
#include "trace_builder.h"

#define N_OF(a) (sizeof(a) / sizeof((a)[0]))

static tm_bytes bytes_of(const uint8_t *p, size_t n) {
    tm_bytes b = {p, n};
    return b;
}

/* A heap copy of exactly the builder's bytes, so over-reads hit ASan's redzone. */
static uint8_t *exact_copy(const tb_buf *b) {
    uint8_t *p = malloc(b->len ? b->len : 1);
    cr_assert_not_null(p);
    if (b->len) memcpy(p, b->data, b->len);
    return p;
}

/* Decodes one varint from exactly n bytes; returns tm_pb_varint's result. */
static int varint_of(const uint8_t *p, size_t n, uint64_t *v, size_t *used) {
    uint8_t *copy = malloc(n ? n : 1);
    cr_assert_not_null(copy);
    if (n) memcpy(copy, p, n);
    const uint8_t *q = copy;
    *v = 0xdeadbeef;
    int rc = tm_pb_varint(&q, copy + n, v);
    *used = (size_t)(q - copy);
    free(copy);
    return rc;
}

/* ---- varints ---- */

Test(pb_varint, one_to_ten_bytes) {
    /* The smallest and largest value of each encoded length n: 2^(7(n-1)) .. 2^(7n)-1. */
    for (unsigned n = 1; n <= 10; n++) {
        uint64_t lo = n == 1 ? 0 : (uint64_t)1 << (7 * (n - 1));
        uint64_t hi = n == 10 ? UINT64_MAX : ((uint64_t)1 << (7 * n)) - 1;
        uint64_t vals[2] = {lo, hi};
        for (int k = 0; k < 2; k++) {
            tb_buf b = {0};
            tb_varint(&b, vals[k]);
            cr_assert_eq(b.len, n, "builder wrote %zu bytes for a %u-byte value", b.len, n);
            uint64_t v;
            size_t used;
            cr_assert_eq(varint_of(b.data, b.len, &v, &used), 0, "n=%u k=%d", n, k);
            cr_assert_eq(v, vals[k], "n=%u: got %llu", n, (unsigned long long)v);
            cr_assert_eq(used, n);
            tb_free(&b);
        }
    }
}

Test(pb_varint, hand_encoded_values) {
    static const uint8_t v0[] = {0x00}, v1[] = {0x01}, v127[] = {0x7f}, v128[] = {0x80, 0x01},
                         v150[] = {0x96, 0x01}, v300[] = {0xac, 0x02}, v16384[] = {0x80, 0x80, 0x01};
    static const struct {
        const uint8_t *p;
        size_t n;
        uint64_t want;
    } cases[] = {{v0, 1, 0}, {v1, 1, 1}, {v127, 1, 127}, {v128, 2, 128}, {v150, 2, 150},
                 {v300, 2, 300}, {v16384, 3, 16384}};
    for (size_t i = 0; i < N_OF(cases); i++) {
        uint64_t v;
        size_t used;
        cr_assert_eq(varint_of(cases[i].p, cases[i].n, &v, &used), 0);
        cr_assert_eq(v, cases[i].want, "case %zu", i);
        cr_assert_eq(used, cases[i].n, "case %zu", i);
    }
}

Test(pb_varint, negative_int64_takes_ten_bytes) {
    /* int64 -1 is written as its two's complement uint64: nine 0xff and 0x01. */
    static const uint8_t minus1[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t minus2[] = {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    static const uint8_t int64_min[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    uint64_t v;
    size_t used;
    cr_assert_eq(varint_of(minus1, 10, &v, &used), 0);
    cr_assert_eq(v, UINT64_MAX);
    cr_assert_eq((int64_t)v, -1);
    cr_assert_eq(used, 10);
    cr_assert_eq(varint_of(minus2, 10, &v, &used), 0);
    cr_assert_eq((int64_t)v, -2);
    cr_assert_eq(varint_of(int64_min, 10, &v, &used), 0);
    cr_assert_eq((int64_t)v, INT64_MIN);

    tb_buf b = {0};
    tb_varint(&b, (uint64_t)(int64_t)-1);
    cr_assert_eq(b.len, 10);
    cr_assert_arr_eq(b.data, minus1, 10);
    tb_free(&b);
}

/* tm_pb_varint_of_len (a varint of known length, as a run's shape reads
 * them) gives tm_pb_varint's value for every length from 1 to 8, smallest,
 * largest and non-minimal encodings, with bytes after it that it must not
 * take in. */
Test(pb_varint, of_known_length) {
    for (unsigned n = 1; n <= 8; n++) {
        uint64_t lo = n == 1 ? 0 : (uint64_t)1 << (7 * (n - 1));
        uint64_t hi = ((uint64_t)1 << (7 * n)) - 1;
        uint64_t vals[3] = {lo, hi, lo | 0x55};
        for (int k = 0; k < 4; k++) {
            uint8_t buf[16];
            memset(buf, 0xff, sizeof buf); /* what follows: every bit set */
            if (k < 3) {
                tb_buf b = {0};
                tb_varint(&b, vals[k]);
                cr_assert_eq(b.len, n);
                memcpy(buf, b.data, n);
                tb_free(&b);
            } else { /* n bytes of 1, non-minimal past the first */
                for (unsigned i = 0; i < n; i++) buf[i] = i + 1 < n ? (i ? 0x80 : 0x81) : (n == 1 ? 1 : 0);
            }
            uint64_t want;
            size_t used;
            cr_assert_eq(varint_of(buf, n, &want, &used), 0);
            cr_assert_eq(used, n);
            cr_assert_eq(tm_pb_varint_of_len(buf, n, tm_pb_varint_keep(n)), want, "n=%u k=%d", n, k);
        }
    }
}

Test(pb_varint, non_minimal_encoding_is_accepted) {
    /* Protobuf parsers accept redundant continuation bytes: 0x80 0x00 is 0 in two bytes. */
    static const uint8_t zero2[] = {0x80, 0x00};
    static const uint8_t one3[] = {0x81, 0x80, 0x00};
    uint64_t v;
    size_t used;
    cr_assert_eq(varint_of(zero2, 2, &v, &used), 0);
    cr_assert_eq(v, 0);
    cr_assert_eq(used, 2);
    cr_assert_eq(varint_of(one3, 3, &v, &used), 0);
    cr_assert_eq(v, 1);
    cr_assert_eq(used, 3);
}

Test(pb_varint, overlong_is_an_error) {
    /* 11 bytes: the 10th still has its continuation bit. */
    static const uint8_t eleven[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x01};
    /* 10 bytes whose last carries bits beyond 64: 0x02 would be bit 64. */
    static const uint8_t tenth2[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    static const uint8_t tenth7f[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f};
    /* Eleven bytes even when the 10th byte's payload is 0: still longer than 10. */
    static const uint8_t zeros11[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    uint64_t v;
    size_t used;
    cr_assert_eq(varint_of(eleven, sizeof eleven, &v, &used), 2);
    cr_assert_eq(used, 0, "the cursor must not move on error");
    cr_assert_eq(varint_of(tenth2, sizeof tenth2, &v, &used), 2);
    cr_assert_eq(varint_of(tenth7f, sizeof tenth7f, &v, &used), 2);
    cr_assert_eq(varint_of(zeros11, sizeof zeros11, &v, &used), 2);
}

Test(pb_varint, truncated_is_an_error) {
    static const uint8_t ten[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    uint64_t v;
    size_t used;
    /* Every proper prefix of a 10-byte varint ends on a continuation bit. */
    for (size_t n = 0; n < 10; n++) {
        cr_assert_eq(varint_of(ten, n, &v, &used), 1, "prefix of %zu bytes", n);
        cr_assert_eq(used, 0);
    }
    cr_assert_eq(varint_of(ten, 10, &v, &used), 0);
}

Test(pb_varint, varint_field_errors_through_tm_pb_next) {
    /* field 1, varint, value cut after one continuation byte */
    static const uint8_t trunc[] = {0x08, 0x80};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(trunc, sizeof trunc));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
    cr_assert_not_null(r.err);
    cr_assert_eq(r.p, trunc + 1, "r.p must point at the truncated varint");

    static const uint8_t over[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    r = tm_pb_reader_of(bytes_of(over, sizeof over));
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_MALFORMED);
    cr_assert_eq(r.p, over + 1);

    static const uint8_t max[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    r = tm_pb_reader_of(bytes_of(max, sizeof max));
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 1);
    cr_assert_eq(f.wire, TM_PB_VARINT);
    cr_assert_eq(f.val, UINT64_MAX);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
}

Test(pb_varint, truncated_or_overlong_tag) {
    static const uint8_t trunc[] = {0x80};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(trunc, 1));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
    cr_assert_eq(r.p, trunc);

    static const uint8_t over[] = {0x88, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    r = tm_pb_reader_of(bytes_of(over, sizeof over));
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_MALFORMED);
    cr_assert_eq(r.p, over);
}

/* ---- fixed-width fields ---- */

Test(pb_fixed, little_endian_values) {
    /* field 1 fixed32 0x12345678, field 2 fixed64 0x0102030405060708 */
    static const uint8_t msg[] = {0x0d, 0x78, 0x56, 0x34, 0x12,
                                  0x11, 0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(msg, sizeof msg));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 1);
    cr_assert_eq(f.wire, TM_PB_I32);
    cr_assert_eq(f.val, 0x12345678u);
    cr_assert_eq(f.start, msg);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 2);
    cr_assert_eq(f.wire, TM_PB_I64);
    cr_assert_eq(f.val, 0x0102030405060708ull);
    cr_assert_eq(f.start, msg + 5);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
}

Test(pb_fixed, extreme_values_via_builder) {
    tb_buf b = {0};
    tb_fixed32(&b, 3, UINT32_MAX);
    tb_fixed64(&b, 4, UINT64_MAX);
    tb_fixed32(&b, 5, 0x80000000u);
    tb_fixed64(&b, 6, 0x8000000000000001ull);
    uint8_t *in = exact_copy(&b);
    tm_pb_reader r = tm_pb_reader_of(bytes_of(in, b.len));
    tm_pb_field f;
    static const uint64_t want[] = {UINT32_MAX, UINT64_MAX, 0x80000000u, 0x8000000000000001ull};
    for (unsigned i = 0; i < 4; i++) {
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
        cr_assert_eq(f.num, 3 + i);
        cr_assert_eq(f.wire, i % 2 ? TM_PB_I64 : TM_PB_I32);
        cr_assert_eq(f.val, want[i], "field %u", 3 + i);
    }
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
    free(in);
    tb_free(&b);
}

Test(pb_fixed, truncated_fixed_fields) {
    static const uint8_t f32[] = {0x0d, 0x01, 0x02, 0x03};
    static const uint8_t f64[] = {0x09, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07};
    for (size_t n = 1; n <= sizeof f32; n++) {
        uint8_t *in = malloc(n);
        memcpy(in, f32, n);
        tm_pb_reader r = tm_pb_reader_of(bytes_of(in, n));
        tm_pb_field f;
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR, "fixed32 cut at %zu", n);
        cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
        cr_assert_eq(r.p, in + 1, "r.p must point at the first payload byte");
        free(in);
    }
    for (size_t n = 1; n <= sizeof f64; n++) {
        uint8_t *in = malloc(n);
        memcpy(in, f64, n);
        tm_pb_reader r = tm_pb_reader_of(bytes_of(in, n));
        tm_pb_field f;
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR, "fixed64 cut at %zu", n);
        cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
        cr_assert_eq(r.p, in + 1);
        free(in);
    }
}

/* ---- length-delimited fields ---- */

Test(pb_len, view_points_into_the_input) {
    tb_buf b = {0};
    tb_uint(&b, 1, 7);
    tb_str(&b, 2, "hello");
    tb_bytes(&b, 3, "", 0);
    uint8_t *in = exact_copy(&b);
    tm_pb_reader r = tm_pb_reader_of(bytes_of(in, b.len));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.val, 7);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 2);
    cr_assert_eq(f.wire, TM_PB_LEN);
    cr_assert_eq(f.start, in + 2);
    /* zero-copy: tag 0x12, length 0x05, then the payload itself */
    cr_assert_eq(f.bytes.data, in + 4);
    cr_assert_eq(f.bytes.len, 5);
    cr_assert_eq(memcmp(f.bytes.data, "hello", 5), 0);
    cr_assert_eq(f.val, 0, "LEN fields carry no value");
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 3);
    cr_assert_eq(f.bytes.len, 0);
    cr_assert_eq(f.bytes.data, in + b.len, "an empty payload is a view at its position");
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE, "DONE is sticky");
    free(in);
    tb_free(&b);
}

Test(pb_len, length_past_the_end) {
    /* field 1 varint 1, then field 2 claiming 5 bytes with only 2 present */
    static const uint8_t msg[] = {0x08, 0x01, 0x12, 0x05, 'a', 'b'};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(msg, sizeof msg));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
    cr_assert_eq(r.p, msg + 2, "r.p must point at the field's tag");
    cr_assert_not_null(r.err);

    /* the boundary: a payload that ends exactly at the message end, and one byte more */
    static const uint8_t exact[] = {0x12, 0x02, 'a', 'b'};
    r = tm_pb_reader_of(bytes_of(exact, sizeof exact));
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.bytes.data, exact + 2);
    cr_assert_eq(f.bytes.len, 2);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
    static const uint8_t over[] = {0x12, 0x03, 'a', 'b'};
    r = tm_pb_reader_of(bytes_of(over, sizeof over));
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
    cr_assert_eq(r.p, over);
}

Test(pb_len, bounds_are_the_message_not_the_buffer) {
    /* Outer field 1 wraps 3 bytes "12 05 61"; the buffer continues, but the
     * inner field's 5 bytes run past its own message. */
    static const uint8_t buf[] = {0x0a, 0x03, 0x12, 0x05, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66};
    tm_pb_reader outer = tm_pb_reader_of(bytes_of(buf, sizeof buf));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&outer, &f), TM_PB_OK);
    cr_assert_eq(f.bytes.len, 3);
    tm_pb_reader inner = tm_pb_reader_of(f.bytes);
    tm_pb_field g;
    cr_assert_eq(tm_pb_next(&inner, &g), TM_PB_ERROR);
    cr_assert_eq(inner.err_code, TM_ERR_TRUNCATED);
    cr_assert_eq(inner.p, buf + 2);
}

Test(pb_len, huge_length_does_not_wrap) {
    /* length 2^63 and UINT64_MAX: must not overflow the pointer arithmetic */
    static const uint8_t l63[] = {0x12, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x00};
    static const uint8_t lmax[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00};
    const uint8_t *ins[] = {l63, lmax};
    for (int i = 0; i < 2; i++) {
        tm_pb_reader r = tm_pb_reader_of(bytes_of(ins[i], sizeof l63));
        tm_pb_field f;
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
        cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
        cr_assert_eq(r.p, ins[i]);
    }
}

Test(pb_len, bad_length_varint) {
    static const uint8_t trunc[] = {0x12, 0x80};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(trunc, sizeof trunc));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
    cr_assert_eq(r.p, trunc + 1);

    static const uint8_t missing[] = {0x12};
    r = tm_pb_reader_of(bytes_of(missing, sizeof missing));
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_TRUNCATED);
    cr_assert_eq(r.p, missing + 1);

    static const uint8_t over[] = {0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    r = tm_pb_reader_of(bytes_of(over, sizeof over));
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_MALFORMED);
    cr_assert_eq(r.p, over + 1);
}

/* ---- tags, unknown fields, wire types ---- */

Test(pb_fields, unknown_fields_of_every_wire_type_are_skipped) {
    /* A reader that wants only field 1 must step over every other field. */
    tb_buf b = {0};
    tb_uint(&b, 100, UINT64_MAX);
    tb_fixed64(&b, 101, 0x1122334455667788ull);
    tb_bytes(&b, 102, "\x08\x05 junk", 7);
    tb_fixed32(&b, 103, 0xcafef00du);
    tb_uint(&b, 1, 42);
    tb_uint(&b, 536870911, 9); /* the largest field number */
    uint8_t *in = exact_copy(&b);
    static const uint32_t nums[] = {100, 101, 102, 103, 1, 536870911};
    static const uint32_t wires[] = {TM_PB_VARINT, TM_PB_I64, TM_PB_LEN,
                                     TM_PB_I32,    TM_PB_VARINT, TM_PB_VARINT};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(in, b.len));
    tm_pb_field f;
    uint64_t field1 = 0;
    size_t i = 0;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        cr_assert_lt(i, N_OF(nums));
        cr_assert_eq(f.num, nums[i], "field %zu", i);
        cr_assert_eq(f.wire, wires[i], "field %zu", i);
        if (f.num == 1) field1 = f.val;
        i++;
    }
    cr_assert_eq(rc, TM_PB_DONE);
    cr_assert_eq(i, N_OF(nums));
    cr_assert_eq(field1, 42);
    cr_assert_eq(r.p, in + b.len);
    free(in);
    tb_free(&b);
}

Test(pb_fields, field_number_zero_is_malformed) {
    static const uint8_t cases[][3] = {{0x00, 0x01, 0x00}, {0x02, 0x00, 0x00}, {0x05, 0x00, 0x00}};
    for (size_t i = 0; i < N_OF(cases); i++) {
        tm_pb_reader r = tm_pb_reader_of(bytes_of(cases[i], 3));
        tm_pb_field f;
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR, "case %zu", i);
        cr_assert_eq(r.err_code, TM_ERR_MALFORMED);
        cr_assert_eq(r.p, cases[i]);
    }
}

Test(pb_fields, field_number_above_2_29_is_malformed) {
    /* 2^29 is one past the largest protobuf field number; tag = 2^32. */
    tb_buf b = {0};
    tb_varint(&b, (uint64_t)1 << 32);
    tb_varint(&b, 1);
    uint8_t *in = exact_copy(&b);
    tm_pb_reader r = tm_pb_reader_of(bytes_of(in, b.len));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR);
    cr_assert_eq(r.err_code, TM_ERR_MALFORMED);
    cr_assert_eq(r.p, in);
    free(in);
    tb_free(&b);
}

Test(pb_fields, groups_and_undefined_wire_types_are_malformed) {
    static const uint8_t wires[] = {3, 4, 6, 7};
    for (size_t i = 0; i < N_OF(wires); i++) {
        /* a valid field first, so r.p must move back to the bad tag, not stay at 0 */
        uint8_t msg[4] = {0x08, 0x01, (uint8_t)((2 << 3) | wires[i]), 0x00};
        tm_pb_reader r = tm_pb_reader_of(bytes_of(msg, sizeof msg));
        tm_pb_field f;
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_ERROR, "wire type %u", wires[i]);
        cr_assert_eq(r.err_code, TM_ERR_MALFORMED);
        cr_assert_eq(r.p, msg + 2);
        cr_assert_not_null(r.err);
    }
}

Test(pb_fields, multi_byte_tag_and_start) {
    /* field 66 (PerfSample in TracePacket) needs a two-byte tag: 0x92 0x04 */
    static const uint8_t msg[] = {0x40, 0x05, 0x92, 0x04, 0x02, 0x10, 0x07};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(msg, sizeof msg));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 8);
    cr_assert_eq(f.val, 5);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 66);
    cr_assert_eq(f.wire, TM_PB_LEN);
    cr_assert_eq(f.start, msg + 2);
    cr_assert_eq(f.bytes.data, msg + 5);
    cr_assert_eq(f.bytes.len, 2);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
}

Test(pb_fields, empty_message_is_done) {
    static const uint8_t one[] = {0x08};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(one, 0));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
    cr_assert_null(r.err);
    cr_assert_eq(r.err_code, TM_OK);
}

/* ---- packed repeated varints ---- */

static const uint64_t packed_vals[] = {0, 1, 127, 128, 300, 16384, (uint64_t)1 << 35,
                                       (uint64_t)(int64_t)-1, (uint64_t)INT64_MIN, 42};

Test(pb_packed, packed_and_unpacked_give_the_same_sequence) {
    size_t n = N_OF(packed_vals);
    tb_buf packed = {0}, unpacked = {0};
    tb_packed(&packed, 2, packed_vals, n);
    for (size_t i = 0; i < n; i++) tb_uint(&unpacked, 2, packed_vals[i]);
    uint8_t *pin = exact_copy(&packed), *uin = exact_copy(&unpacked);

    uint64_t from_packed[N_OF(packed_vals)], from_unpacked[N_OF(packed_vals)];
    size_t np = 0, nu = 0;
    tm_pb_reader r = tm_pb_reader_of(bytes_of(pin, packed.len));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.wire, TM_PB_LEN);
    cr_assert_eq(tm_pb_packed_count(f.bytes), n);
    tm_pb_reader pr = tm_pb_reader_of(f.bytes);
    uint64_t v;
    int rc;
    while ((rc = tm_pb_packed_next(&pr, &v)) == TM_PB_OK) {
        cr_assert_lt(np, n);
        from_packed[np++] = v;
    }
    cr_assert_eq(rc, TM_PB_DONE);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);

    r = tm_pb_reader_of(bytes_of(uin, unpacked.len));
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        cr_assert_eq(f.num, 2);
        cr_assert_eq(f.wire, TM_PB_VARINT);
        cr_assert_lt(nu, n);
        from_unpacked[nu++] = f.val;
    }
    cr_assert_eq(rc, TM_PB_DONE);

    cr_assert_eq(np, n);
    cr_assert_eq(nu, n);
    cr_assert_arr_eq(from_packed, packed_vals, n * sizeof(uint64_t));
    cr_assert_arr_eq(from_unpacked, packed_vals, n * sizeof(uint64_t));
    free(pin);
    free(uin);
    tb_free(&packed);
    tb_free(&unpacked);
}

/* tm_pb_repeated_next reads one- and two-byte unpacked elements and
 * one-byte packed ones inline: every length, both shapes mixed, other
 * fields between, elements that end the message. */
Test(pb_packed, repeated_iterator_mixes_shapes_and_lengths) {
    static const uint64_t vals[] = {5, 127, 128, 16383, 16384, (uint64_t)1 << 35, 0, 300, 1, 2};
    size_t n = N_OF(vals);
    for (size_t cut = 0; cut <= n; cut++) { /* vals[0..cut) unpacked, the rest packed, then unpacked again */
        tb_buf b = {0};
        tb_uint(&b, 3, 99);
        for (size_t i = 0; i < cut; i++) {
            tb_uint(&b, 1, vals[i]);
            if (i % 3 == 1) tb_str(&b, 4, "x");
        }
        if (cut < n) tb_packed(&b, 1, vals + cut, n - cut);
        for (size_t i = 0; i < cut; i++) tb_uint(&b, 1, vals[i]);
        uint8_t *in = exact_copy(&b);
        tm_pb_repeated it = tm_pb_repeated_of(bytes_of(in, b.len), 1);
        uint64_t v;
        size_t k = 0;
        int rc;
        while ((rc = tm_pb_repeated_next(&it, &v)) == TM_PB_OK) {
            size_t want = k < n ? k : k - n;
            cr_assert_lt(k, n + cut, "cut %zu: too many values", cut);
            cr_assert_eq(v, vals[want], "cut %zu, value %zu", cut, k);
            k++;
        }
        cr_assert_eq(rc, TM_PB_DONE, "cut %zu", cut);
        cr_assert_eq(k, n + cut, "cut %zu", cut);
        free(in);
        tb_free(&b);
    }
}

/* tm_pb_repeated_fill reads what tm_pb_repeated_next would, whatever cap
 * it is given: on random messages of both shapes, values of 1 to 10 bytes,
 * other fields between, cut or damaged at random, the same values, the same
 * end (done, error, or cap reached) and the same position afterwards. */
Test(pb_packed, fill_reads_what_next_reads) {
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (int round = 0; round < 3000; round++) {
        tb_buf b = {0};
        int parts = 1 + (int)(seed % 6);
        for (int i = 0; i < parts; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            uint64_t vals[12];
            size_t n = 1 + seed % 12;
            for (size_t k = 0; k < n; k++) {
                seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
                vals[k] = seed % 4 == 0 ? seed >> (seed % 64) : seed % 3 == 0 ? seed % 128 : seed % 16384;
            }
            switch (seed >> 60 & 3) {
            case 0: tb_packed(&b, 1, vals, n); break;
            case 1: tb_str(&b, 2, "other"); break;
            default:
                for (size_t k = 0; k < n; k++) tb_uint(&b, 1, vals[k]);
            }
        }
        size_t len = b.len;
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        if (round % 3 == 1 && len) len -= 1 + seed % (len < 4 ? len : 4); /* cut short */
        if (round % 3 == 2 && len) b.data[seed % len] |= 0x80;           /* a continuation where none was */
        uint8_t *in = malloc(len ? len : 1);
        cr_assert_not_null(in);
        if (len) memcpy(in, b.data, len);
        uint64_t want[256], got[256];
        tm_pb_repeated ref = tm_pb_repeated_of(bytes_of(in, len), 1);
        size_t n_want = 0;
        int want_rc;
        while (n_want < N_OF(want) && (want_rc = tm_pb_repeated_next(&ref, &want[n_want])) == TM_PB_OK) n_want++;
        cr_assert_lt(n_want, N_OF(want));
        for (size_t cap = 0; cap <= n_want + 1; cap++) {
            tm_pb_repeated it = tm_pb_repeated_of(bytes_of(in, len), 1);
            size_t n = 99;
            int rc = tm_pb_repeated_fill(&it, got, cap, &n);
            if (cap <= n_want) { /* cap values, or the error met on the way */
                cr_assert(rc == TM_PB_OK ? n == cap : rc == want_rc && n == n_want, "round %d cap %zu", round, cap);
            } else {
                cr_assert_eq(rc, want_rc, "round %d cap %zu", round, cap);
                cr_assert_eq(n, n_want, "round %d cap %zu", round, cap);
                cr_assert_eq(it.msg.p, ref.msg.p, "round %d: the position after", round);
            }
            for (size_t k = 0; k < n; k++) cr_assert_eq(got[k], want[k], "round %d cap %zu value %zu", round, cap, k);
            if (rc == TM_PB_OK) { /* and the rest follows on */
                uint64_t v;
                size_t k = n;
                while ((rc = tm_pb_repeated_next(&it, &v)) == TM_PB_OK) cr_assert_eq(v, want[k++], "round %d", round);
                cr_assert_eq(rc, want_rc, "round %d cap %zu", round, cap);
                cr_assert_eq(k, n_want, "round %d cap %zu", round, cap);
            }
        }
        free(in);
        tb_free(&b);
    }
}

Test(pb_packed, repeated_iterator_reports_a_wrong_wire_type_and_a_truncated_element) {
    const uint8_t fixed[] = {0x08, 0x85, 0x01, 0x0d, 1, 2, 3, 4}; /* 133, then field 1 as fixed32 */
    tm_pb_repeated it = tm_pb_repeated_of(bytes_of(fixed, sizeof fixed), 1);
    uint64_t v;
    cr_assert_eq(tm_pb_repeated_next(&it, &v), TM_PB_OK);
    cr_assert_eq(v, 133);
    cr_assert_eq(tm_pb_repeated_next(&it, &v), TM_PB_ERROR);
    cr_assert_eq(it.msg.p, fixed + 3);
    const uint8_t cut[] = {0x08, 0x85}; /* a two-byte element cut after its first byte */
    it = tm_pb_repeated_of(bytes_of(cut, sizeof cut), 1);
    cr_assert_eq(tm_pb_repeated_next(&it, &v), TM_PB_ERROR);
    const uint8_t packed_cut[] = {0x0a, 0x02, 0x07, 0x85}; /* 7, then a cut element */
    it = tm_pb_repeated_of(bytes_of(packed_cut, sizeof packed_cut), 1);
    cr_assert_eq(tm_pb_repeated_next(&it, &v), TM_PB_OK);
    cr_assert_eq(v, 7);
    cr_assert_eq(tm_pb_repeated_next(&it, &v), TM_PB_ERROR);
    cr_assert_eq(it.msg.p, packed_cut + 3);
}

Test(pb_packed, hand_encoded_packed_field) {
    /* The protobuf guide's example: field 4 packed [3, 270, 86942] = 22 06 03 8e 02 9e a7 05 */
    static const uint8_t msg[] = {0x22, 0x06, 0x03, 0x8e, 0x02, 0x9e, 0xa7, 0x05};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(msg, sizeof msg));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 4);
    cr_assert_eq(tm_pb_packed_count(f.bytes), 3);
    tm_pb_reader pr = tm_pb_reader_of(f.bytes);
    static const uint64_t want[] = {3, 270, 86942};
    uint64_t v;
    for (size_t i = 0; i < 3; i++) {
        cr_assert_eq(tm_pb_packed_next(&pr, &v), TM_PB_OK);
        cr_assert_eq(v, want[i]);
    }
    cr_assert_eq(tm_pb_packed_next(&pr, &v), TM_PB_DONE);
}

Test(pb_packed, empty_packed_field) {
    static const uint8_t msg[] = {0x12, 0x00};
    tm_pb_reader r = tm_pb_reader_of(bytes_of(msg, sizeof msg));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(tm_pb_packed_count(f.bytes), 0);
    tm_pb_reader pr = tm_pb_reader_of(f.bytes);
    uint64_t v;
    cr_assert_eq(tm_pb_packed_next(&pr, &v), TM_PB_DONE);
}

Test(pb_packed, truncated_element_is_an_error) {
    /* [5, then a varint cut after its continuation byte] */
    static const uint8_t payload[] = {0x05, 0xac};
    tm_pb_reader pr = tm_pb_reader_of(bytes_of(payload, sizeof payload));
    uint64_t v;
    cr_assert_eq(tm_pb_packed_next(&pr, &v), TM_PB_OK);
    cr_assert_eq(v, 5);
    cr_assert_eq(tm_pb_packed_next(&pr, &v), TM_PB_ERROR);
    cr_assert_eq(pr.err_code, TM_ERR_TRUNCATED);
    cr_assert_eq(pr.p, payload + 1, "r.p must point at the truncated element");
    cr_assert_not_null(pr.err);
}

Test(pb_packed, overlong_element_is_an_error) {
    static const uint8_t payload[] = {0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    tm_pb_reader pr = tm_pb_reader_of(bytes_of(payload, sizeof payload));
    uint64_t v;
    cr_assert_eq(tm_pb_packed_next(&pr, &v), TM_PB_OK);
    cr_assert_eq(tm_pb_packed_next(&pr, &v), TM_PB_ERROR);
    cr_assert_eq(pr.err_code, TM_ERR_MALFORMED);
    cr_assert_eq(pr.p, payload + 1);
}

Test(pb_packed, count_counts_terminal_bytes) {
    /* 1 + 2 + 10 + 1 byte varints = 4 elements */
    tb_buf b = {0};
    tb_varint(&b, 1);
    tb_varint(&b, 200);
    tb_varint(&b, UINT64_MAX);
    tb_varint(&b, 0);
    cr_assert_eq(tm_pb_packed_count(bytes_of(b.data, b.len)), 4);
    cr_assert_eq(tm_pb_packed_count(bytes_of(b.data, 0)), 0);
    /* a trailing truncated element is not counted (it has no terminal byte) */
    cr_assert_eq(tm_pb_packed_count(bytes_of(b.data, 2)), 1); /* 01 c8 */
    tb_free(&b);
}

/* ---- nested messages ---- */

Test(pb_nested, trace_packet_perf_sample) {
    /* Trace { packet { timestamp 1000, seq 7, perf_sample { pid 10, tid 11, callstack_iid 3 } } } */
    tb_buf t = {0};
    tb_perf_sample(&t, 7, 1000, 10, 11, 3, 0);
    tb_str(&t, 99, "trailing unknown");
    uint8_t *in = exact_copy(&t);
    tm_pb_reader top = tm_pb_reader_of(bytes_of(in, t.len));
    tm_pb_field f;
    cr_assert_eq(tm_pb_next(&top, &f), TM_PB_OK);
    cr_assert_eq(f.num, TM_PF_TRACE_PACKET);
    cr_assert_eq(f.wire, TM_PB_LEN);

    tm_pb_reader pkt = tm_pb_reader_of(f.bytes);
    tm_pb_field g;
    uint64_t ts = 0, seq = 0, pid = 0, tid = 0, cs = 0;
    int rc, saw_perf = 0;
    while ((rc = tm_pb_next(&pkt, &g)) == TM_PB_OK) {
        if (g.num == TM_PF_PACKET_TIMESTAMP) ts = g.val;
        else if (g.num == TM_PF_PACKET_SEQUENCE_ID) seq = g.val;
        else if (g.num == TM_PF_PACKET_PERF_SAMPLE) {
            saw_perf = 1;
            cr_assert_geq(g.bytes.data, f.bytes.data);
            cr_assert_leq(g.bytes.data + g.bytes.len, f.bytes.data + f.bytes.len);
            tm_pb_reader ps = tm_pb_reader_of(g.bytes);
            tm_pb_field h;
            int prc;
            while ((prc = tm_pb_next(&ps, &h)) == TM_PB_OK) {
                cr_assert_eq(h.wire, TM_PB_VARINT);
                if (h.num == TM_PF_PERF_SAMPLE_PID) pid = h.val;
                else if (h.num == TM_PF_PERF_SAMPLE_TID) tid = h.val;
                else if (h.num == TM_PF_PERF_SAMPLE_CALLSTACK_IID) cs = h.val;
            }
            cr_assert_eq(prc, TM_PB_DONE);
        }
    }
    cr_assert_eq(rc, TM_PB_DONE);
    cr_assert(saw_perf);
    cr_assert_eq(ts, 1000);
    cr_assert_eq(seq, 7);
    cr_assert_eq(pid, 10);
    cr_assert_eq(tid, 11);
    cr_assert_eq(cs, 3);
    /* the outer reader resumes after the whole packet */
    cr_assert_eq(tm_pb_next(&top, &f), TM_PB_OK);
    cr_assert_eq(f.num, 99);
    cr_assert_eq(tm_pb_next(&top, &f), TM_PB_DONE);
    free(in);
    tb_free(&t);
}

Test(pb_nested, deep_nesting_is_walked_iteratively) {
    /* 2000 levels of field 1 { field 1 { ... { field 2 = 77 } } }: the caller
     * descends with one reader per level and no recursion anywhere. */
    enum { DEPTH = 2000 };
    tb_buf b = {0};
    size_t *marks = malloc(DEPTH * sizeof *marks);
    for (int i = 0; i < DEPTH; i++) marks[i] = tb_open(&b, 1);
    tb_uint(&b, 2, 77);
    for (int i = DEPTH - 1; i >= 0; i--) tb_close(&b, marks[i]);
    free(marks);
    uint8_t *in = exact_copy(&b);
    tm_pb_reader r = tm_pb_reader_of(bytes_of(in, b.len));
    tm_pb_field f;
    int depth = 0;
    for (;;) {
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK, "depth %d", depth);
        if (f.num == 2) break;
        cr_assert_eq(f.num, 1);
        cr_assert_eq(f.wire, TM_PB_LEN);
        cr_assert_eq(tm_pb_next(&r, &(tm_pb_field){0}), TM_PB_DONE, "nothing follows at depth %d", depth);
        r = tm_pb_reader_of(f.bytes);
        depth++;
    }
    cr_assert_eq(depth, DEPTH);
    cr_assert_eq(f.val, 77);
    free(in);
    tb_free(&b);
}

/* ---- differential check against a reference decoder ---- */

/* A direct transcription of the encoding guide, written for clarity, not
 * speed. Returns TM_PB_OK/DONE/ERROR like tm_pb_next; on error *code and
 * *at say what and where, following pb.h's contract (tag errors at the tag;
 * bad values, lengths and fixed payloads where they start; a length past
 * the end at the field's tag). */
typedef struct ref_field {
    uint32_t num, wire;
    uint64_t val;
    size_t off, len, start; /* LEN payload offset/length, tag offset */
} ref_field;

static int ref_varint(const uint8_t *b, size_t n, size_t *i, uint64_t *out) {
    uint64_t v = 0;
    for (unsigned k = 0; k < 10; k++) {
        if (*i + k >= n) return 1;
        uint8_t c = b[*i + k];
        if (k == 9 && c > 1) return 2;
        v |= (uint64_t)(c & 0x7f) << (7 * k);
        if (!(c & 0x80)) {
            *i += k + 1;
            *out = v;
            return 0;
        }
    }
    return 2;
}

static int ref_next(const uint8_t *b, size_t n, size_t *i, ref_field *f, tm_status *code, size_t *at) {
    if (*i >= n) return TM_PB_DONE;
    size_t start = *i, j = *i;
    uint64_t tag, v;
    int e = ref_varint(b, n, &j, &tag);
    if (e) {
        *code = e == 1 ? TM_ERR_TRUNCATED : TM_ERR_MALFORMED;
        *at = start;
        return TM_PB_ERROR;
    }
    uint64_t num = tag >> 3;
    uint32_t wire = (uint32_t)(tag & 7);
    if (num < 1 || num > 536870911 || !(wire == 0 || wire == 1 || wire == 2 || wire == 5)) {
        *code = TM_ERR_MALFORMED;
        *at = start;
        return TM_PB_ERROR;
    }
    f->num = (uint32_t)num;
    f->wire = wire;
    f->start = start;
    f->val = 0;
    size_t vstart = j;
    if (wire == 0 || wire == 2) {
        e = ref_varint(b, n, &j, &v);
        if (e) {
            *code = e == 1 ? TM_ERR_TRUNCATED : TM_ERR_MALFORMED;
            *at = vstart;
            return TM_PB_ERROR;
        }
        if (wire == 0) f->val = v;
        else {
            if (v > n - j) {
                *code = TM_ERR_TRUNCATED;
                *at = start;
                return TM_PB_ERROR;
            }
            f->off = j;
            f->len = (size_t)v;
            j += (size_t)v;
        }
    } else {
        size_t w = wire == 1 ? 8 : 4;
        if (n - j < w) {
            *code = TM_ERR_TRUNCATED;
            *at = vstart;
            return TM_PB_ERROR;
        }
        for (size_t k = 0; k < w; k++) f->val |= (uint64_t)b[j + k] << (8 * k);
        j += w;
    }
    *i = j;
    return TM_PB_OK;
}

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Random messages: builder-made fields of every wire type (one- and
 * multi-byte tags, values and lengths), then random damage. */
static void random_message(uint64_t *rng, tb_buf *b) {
    b->len = 0;
    int fields = (int)(xorshift(rng) % 6);
    for (int k = 0; k < fields; k++) {
        uint64_t r = xorshift(rng);
        uint32_t num = r % 4 == 0 ? (uint32_t)(xorshift(rng) % 536870911) + 1 : (uint32_t)(r >> 8) % 20 + 1;
        uint64_t v = xorshift(rng) >> (xorshift(rng) % 64);
        switch ((r >> 4) % 5) {
        case 0: tb_uint(b, num, v); break;
        case 1: tb_fixed64(b, num, v); break;
        case 2: tb_fixed32(b, num, (uint32_t)v); break;
        case 3: {
            static const uint8_t junk[200] = {0x08, 0x96, 0x01, 0x80, 0xff};
            tb_bytes(b, num, junk, (size_t)(v % 200));
            break;
        }
        default: tb_raw(b, (uint8_t[]){(uint8_t)v, (uint8_t)(v >> 8)}, (size_t)(r >> 40) % 3); break;
        }
    }
    if (b->len && xorshift(rng) % 2) b->data[xorshift(rng) % b->len] ^= (uint8_t)(1u << (xorshift(rng) % 8));
    if (b->len && xorshift(rng) % 3 == 0) b->len = (size_t)(xorshift(rng) % b->len);
}

Test(pb_reference, random_inputs_match_a_reference_decoder) {
    uint64_t rng = 0x243f6a8885a308d3ull;
    tb_buf b = {0};
    int errors = 0;
    for (int it = 0; it < 20000; it++) {
        random_message(&rng, &b);
        uint8_t *in = exact_copy(&b);
        tm_pb_reader r = tm_pb_reader_of(bytes_of(in, b.len));
        size_t ri = 0;
        for (int k = 0;; k++) {
            tm_pb_field f;
            ref_field g = {0, 0, 0, 0, 0, 0};
            tm_status code = TM_OK;
            size_t at = 0;
            int want = ref_next(in, b.len, &ri, &g, &code, &at);
            int got = tm_pb_next(&r, &f);
            cr_assert_eq(got, want, "iteration %d field %d: got %d, want %d", it, k, got, want);
            if (got == TM_PB_DONE) break;
            if (got == TM_PB_ERROR) {
                errors++;
                cr_assert_eq(r.err_code, code, "iteration %d field %d", it, k);
                cr_assert_eq(r.p, in + at, "iteration %d field %d: r.p at %td, want %zu", it, k, r.p - in,
                             at);
                cr_assert_not_null(r.err);
                break;
            }
            cr_assert_eq(f.num, g.num, "iteration %d field %d", it, k);
            cr_assert_eq(f.wire, g.wire);
            cr_assert_eq(f.start, in + g.start);
            if (f.wire == TM_PB_LEN) {
                cr_assert_eq(f.bytes.data, in + g.off, "iteration %d field %d", it, k);
                cr_assert_eq(f.bytes.len, g.len);
            } else {
                cr_assert_eq(f.val, g.val, "iteration %d field %d", it, k);
            }
            cr_assert_eq(r.p, in + ri, "iteration %d field %d: the reader resumes after the field", it, k);
        }
        free(in);
    }
    cr_assert_gt(errors, 1000, "the damage should produce plenty of errors, got %d", errors);
    cr_assert_lt(errors, 19000, "and plenty of clean messages, got %d errors", errors);
    tb_free(&b);
}
