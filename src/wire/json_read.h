/*
 * json_read.h — a zero-copy JSON pull tokenizer (RFC 8259) for documents
 * too large for a tree: Sample v2 chunks run to 100+ MB.
 *
 * A tm_json_reader walks one JSON value in buf[0..len) and yields one token
 * at a time. It never allocates and never recurses: nesting is an explicit
 * depth counter (at most TM_JSON_MAX_DEPTH) with one bit per level saying
 * object or array. Tokens are views into the buffer with their byte offset;
 * strings come raw (between the quotes, escapes undecoded) and are decoded
 * on demand by tm_json_unescape / tm_json_str; numbers come as their text.
 *
 * The grammar is checked strictly: commas and colons, trailing commas,
 * number syntax, literals, escapes, control characters and invalid UTF-8
 * in strings, nesting depth, and anything after the top-level value. An
 * error is sticky: r->err_code (TM_ERR_TRUNCATED when the input ends where
 * more was needed, TM_ERR_MALFORMED, or TM_ERR_LIMIT for depth), a static
 * message and the byte offset it refers to.
 *
 * Not thread-safe; one reader per walk. The buffer must outlive the tokens.
 */
#ifndef TM_JSON_READ_H
#define TM_JSON_READ_H

#include "common/alloc.h" /* tm_arena */
#include "common/base.h"  /* tm_bytes */

#define TM_JSON_MAX_DEPTH 64

typedef enum tm_json_type {
    TM_JSON_ERROR = 0,   /* see r->err_code, r->err, r->err_offset */
    TM_JSON_OBJECT,      /* '{' */
    TM_JSON_OBJECT_END,  /* '}' */
    TM_JSON_ARRAY,       /* '[' */
    TM_JSON_ARRAY_END,   /* ']' */
    TM_JSON_KEY,         /* a member name; its ':' is already consumed */
    TM_JSON_STRING,
    TM_JSON_NUMBER,
    TM_JSON_TRUE,
    TM_JSON_FALSE,
    TM_JSON_NULL,
    TM_JSON_DONE         /* the top-level value ended and only blanks follow */
} tm_json_type;

typedef struct tm_json_token {
    tm_json_type type;
    tm_bytes text;  /* KEY/STRING: between the quotes, raw; NUMBER: the literal */
    size_t offset;  /* byte offset of the token's first byte ('"' for strings) */
    int escaped;    /* KEY/STRING: text holds backslash escapes */
} tm_json_token;

typedef struct tm_json_reader {
    const uint8_t *base, *p, *end;
    uint64_t in_object; /* bit d-1: the container at depth d is an object */
    uint32_t depth;     /* open containers */
    int expect;         /* grammar state (json_read.c) */
    int one_value;      /* tm_json_reader_at: done after the first value */
    tm_status err_code; /* TM_OK until an error */
    const char *err;
    size_t err_offset;
} tm_json_reader;

/* A reader over one JSON document buf[0..len). */
void tm_json_reader_init(tm_json_reader *r, const uint8_t *buf, size_t len);

/* A reader over the single value starting at buf + offset (offsets stay
 * relative to buf); what follows that value is not looked at. Used to
 * re-walk part of a document, e.g. to find an element's offset. */
void tm_json_reader_at(tm_json_reader *r, const uint8_t *buf, size_t len, size_t offset);

/* Reads the next token into *t and returns its type (TM_JSON_ERROR on
 * error, and on every call after one). */
tm_json_type tm_json_next(tm_json_reader *r, tm_json_token *t);

/* Skips the rest of the value t began: a no-op for scalars, else reads up
 * to the matching close. Returns 1, or 0 on error. */
int tm_json_skip(tm_json_reader *r, const tm_json_token *t);

/* Decodes the escapes of a KEY/STRING token's text (already validated by
 * the reader) into dst, which needs room for text.len bytes (decoding
 * never grows the text). \uXXXX becomes UTF-8, surrogate pairs one code
 * point, lone surrogates U+FFFD. Returns the decoded length. */
size_t tm_json_unescape(tm_bytes text, uint8_t *dst);

/* A string token's value: a view into the buffer when it has no escapes,
 * else decoded into the arena. TM_ERR_NOMEM on allocation failure. */
tm_status tm_json_str(tm_arena *ar, const tm_json_token *t, tm_str *out);

/* Whether a KEY/STRING token's value equals the NUL-terminated name
 * (escapes decoded). */
int tm_json_eq(const tm_json_token *t, const char *name);

/* A NUMBER token as a non-negative integer: digits only (no sign, fraction
 * or exponent) and at most UINT64_MAX. Returns 1, or 0 if it is not one. */
int tm_json_u64(const tm_json_token *t, uint64_t *out);

/* A NUMBER token times 10^scale (scale <= 18), exactly: every decimal
 * digit and the exponent are used, and a result between integers is
 * rounded half to even. Returns 1, or 0 when the result does not fit an
 * int64_t. E.g. scale 9 turns seconds into nanoseconds without the error
 * of a double. */
int tm_json_scaled_i64(const tm_json_token *t, unsigned scale, int64_t *out);

#endif
