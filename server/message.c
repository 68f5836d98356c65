/*
 * message.c — the two kinds of message the server hands to Kafka or the
 * local store: Relay's ProfileChunkKafkaMessage and its TrackOutcome JSON.
 *
 * ProfileChunkKafkaMessage is what Relay writes with rmp_serde::to_vec_named
 * (relay-server store.rs): a MessagePack map
 * with string keys in declaration order, integers in their smallest
 * encoding, the Bytes fields (payload, raw_profile) as bin and the optional
 * fields left out when absent. Encoding uses msgpack-c's packer; decoding is
 * a strict, non-recursive reader of our own so that every error carries the
 * byte offset and the field name, and unknown keys (nested to any depth)
 * are skipped with a pending-element counter instead of recursion.
 *
 * The outcome JSON mirrors Relay's TrackOutcome serialisation, written by
 * hand. Everything here is pure and thread-safe.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <msgpack/pack.h>

#include "server.h"

/* ---- Encoding ---------------------------------------------------------- */

/* msgpack_packer_write: appends to a tm_srv_buf. */
static int buf_write(void *data, const char *buf, size_t len) {
    return tm_srv_buf_append(data, buf, len);
}

static int pack_key(msgpack_packer *pk, const char *key) {
    size_t len = strlen(key);
    return msgpack_pack_str(pk, len) || msgpack_pack_str_body(pk, key, len);
}

static int pack_bin(msgpack_packer *pk, const void *data, size_t len) {
    return msgpack_pack_bin(pk, len) || msgpack_pack_bin_body(pk, data, len);
}

/* The fields before the payload's bytes, its bin header last. */
static int pack_head(msgpack_packer *pk, const tm_srv_chunk_msg *m) {
    static const char type[] = "profile_chunk";
    const int has_raw = m->raw_profile != NULL;
    const int has_ctype = m->raw_profile_content_type != NULL;
    return msgpack_pack_map(pk, 6u + (size_t)has_raw + (size_t)has_ctype) || pack_key(pk, "type") ||
           msgpack_pack_str(pk, sizeof type - 1) || msgpack_pack_str_body(pk, type, sizeof type - 1) ||
           pack_key(pk, "organization_id") || msgpack_pack_uint64(pk, m->organization_id) ||
           pack_key(pk, "project_id") || msgpack_pack_uint64(pk, m->project_id) || pack_key(pk, "received") ||
           msgpack_pack_uint64(pk, m->received) || pack_key(pk, "retention_days") ||
           msgpack_pack_uint32(pk, m->retention_days) || pack_key(pk, "payload") ||
           msgpack_pack_bin(pk, m->payload_len);
}

/* The fields after the payload's bytes. */
static int pack_tail(msgpack_packer *pk, const tm_srv_chunk_msg *m) {
    if (m->raw_profile && (pack_key(pk, "raw_profile") || pack_bin(pk, m->raw_profile, m->raw_profile_len)))
        return -1;
    if (!m->raw_profile_content_type) return 0;
    size_t len = strlen(m->raw_profile_content_type);
    return pack_key(pk, "raw_profile_content_type") || msgpack_pack_str(pk, len) ||
           msgpack_pack_str_body(pk, m->raw_profile_content_type, len);
}

static tm_status encode_nomem(tm_error *err) {
    return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory encoding a profile chunk message");
}

tm_status tm_srv_chunk_msg_encode(const tm_srv_chunk_msg *m, tm_srv_buf *out, tm_error *err) {
    const size_t start = out->len;
    msgpack_packer pk;
    msgpack_packer_init(&pk, out, buf_write);
    if (pack_head(&pk, m) || msgpack_pack_bin_body(&pk, m->payload, m->payload_len) || pack_tail(&pk, m)) {
        out->len = start; /* no half-written message */
        return encode_nomem(err);
    }
    return TM_OK;
}

tm_status tm_srv_chunk_msg_encode_around(const tm_srv_chunk_msg *m, tm_srv_buf *buf, size_t *start,
                                         tm_error *err) {
    tm_srv_buf head = {0};
    msgpack_packer pk;
    msgpack_packer_init(&pk, &head, buf_write);
    tm_srv_chunk_msg at = *m;
    at.payload_len = buf->len - TM_SRV_CHUNK_MSG_HEAD_ROOM;
    int rc = pack_head(&pk, &at);
    if (!rc && head.len <= TM_SRV_CHUNK_MSG_HEAD_ROOM) {
        *start = TM_SRV_CHUNK_MSG_HEAD_ROOM - head.len;
        memcpy(buf->data + *start, head.data, head.len);
        msgpack_packer_init(&pk, buf, buf_write);
        rc = pack_tail(&pk, &at);
    } else {
        rc = -1; /* pack_head writes at most 116 bytes: only memory fails */
    }
    tm_srv_buf_release(&head);
    return rc ? encode_nomem(err) : TM_OK;
}

/* ---- Decoding ---------------------------------------------------------- */

typedef struct reader {
    const uint8_t *base, *p, *end;
} reader;

/* The MessagePack families a value head can belong to. */
typedef enum mp_class {
    MP_NIL, MP_BOOL, MP_UINT, MP_NINT, MP_FLOAT, MP_STR, MP_BIN, MP_ARRAY, MP_MAP, MP_EXT
} mp_class;

static const char *const class_names[] = {"nil",    "boolean", "unsigned integer", "negative integer",
                                          "float",  "string",  "binary",           "array",
                                          "map",    "extension"};

/* A decoded value head: for MP_UINT the value, for MP_STR/MP_BIN/MP_EXT the
 * payload length still to read (ext: including its type byte), for
 * MP_ARRAY/MP_MAP the element/entry count. */
typedef struct mp_head {
    mp_class cls;
    uint64_t n;
    uint64_t offset;
} mp_head;

static uint64_t off(const reader *r) { return (uint64_t)(r->p - r->base); }

static uint64_t be(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static tm_status need(const reader *r, uint64_t n, uint64_t at, tm_error *err) {
    if ((uint64_t)(r->end - r->p) < n)
        return tm_srv_fail(err, TM_ERR_TRUNCATED, at, "message ends inside a value (needs %llu more bytes)",
                           (unsigned long long)(n - (uint64_t)(r->end - r->p)));
    return TM_OK;
}

/* Reads one value head (type byte and its size/length fields, not the
 * payload of strings, binaries and extensions). */
static tm_status read_head(reader *r, mp_head *h, tm_error *err) {
    h->offset = off(r);
    if (r->p == r->end) return tm_srv_fail(err, TM_ERR_TRUNCATED, h->offset, "message ends before a value");
    const uint8_t b = *r->p++;
    size_t extra = 0; /* big-endian size/value bytes following b */
    if (b <= 0x7f) { h->cls = MP_UINT; h->n = b; return TM_OK; }
    if (b >= 0xe0) { h->cls = MP_NINT; h->n = 0; return TM_OK; }
    if (b <= 0x8f) { h->cls = MP_MAP; h->n = b & 0x0fu; return TM_OK; }
    if (b <= 0x9f) { h->cls = MP_ARRAY; h->n = b & 0x0fu; return TM_OK; }
    if (b <= 0xbf) { h->cls = MP_STR; h->n = b & 0x1fu; return TM_OK; }
    switch (b) {
    case 0xc0: h->cls = MP_NIL; h->n = 0; return TM_OK;
    case 0xc2: case 0xc3: h->cls = MP_BOOL; h->n = 0; return TM_OK;
    case 0xc4: case 0xc5: case 0xc6: h->cls = MP_BIN; extra = (size_t)1 << (b - 0xc4); break;
    case 0xc7: case 0xc8: case 0xc9: h->cls = MP_EXT; extra = (size_t)1 << (b - 0xc7); break;
    case 0xca: h->cls = MP_FLOAT; extra = 4; break;
    case 0xcb: h->cls = MP_FLOAT; extra = 8; break;
    case 0xcc: case 0xcd: case 0xce: case 0xcf: h->cls = MP_UINT; extra = (size_t)1 << (b - 0xcc); break;
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: h->cls = MP_NINT; extra = (size_t)1 << (b - 0xd0); break;
    case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
        h->cls = MP_EXT; h->n = 1 + ((uint64_t)1 << (b - 0xd4)); return TM_OK;
    case 0xd9: case 0xda: case 0xdb: h->cls = MP_STR; extra = (size_t)1 << (b - 0xd9); break;
    case 0xdc: case 0xdd: h->cls = MP_ARRAY; extra = (size_t)2 << (b - 0xdc); break;
    case 0xde: case 0xdf: h->cls = MP_MAP; extra = (size_t)2 << (b - 0xde); break;
    default: return tm_srv_fail(err, TM_ERR_MALFORMED, h->offset, "reserved MessagePack type byte 0x%02x", b);
    }
    tm_status st = need(r, extra, h->offset, err);
    if (st != TM_OK) return st;
    h->n = be(r->p, extra);
    r->p += extra;
    if (h->cls == MP_EXT) h->n += 1; /* the ext type byte */
    if (h->cls == MP_NINT) {
        /* signed encodings holding a non-negative value are unsigned to us */
        const int neg = (h->n >> (extra * 8 - 1)) & 1u;
        h->cls = neg ? MP_NINT : MP_UINT;
    }
    return TM_OK;
}

/* Takes the n payload bytes of a string/binary/extension. */
static tm_status take(reader *r, const mp_head *h, const uint8_t **ptr, tm_error *err) {
    tm_status st = need(r, h->n, h->offset, err);
    if (st != TM_OK) return st;
    *ptr = r->p;
    r->p += h->n;
    return TM_OK;
}

/* Skips one complete value of any depth without recursion: each element
 * costs at least one byte, so pending never exceeds what is left. */
static tm_status skip_value(reader *r, tm_error *err) {
    uint64_t pending = 1;
    while (pending) {
        pending--;
        mp_head h;
        const uint8_t *unused;
        tm_status st = read_head(r, &h, err);
        if (st != TM_OK) return st;
        switch (h.cls) {
        case MP_STR: case MP_BIN: case MP_EXT: st = take(r, &h, &unused, err); break;
        case MP_ARRAY: pending += h.n; break;
        case MP_MAP: pending += 2 * h.n; break;
        default: break; /* read_head consumed scalars whole */
        }
        if (st != TM_OK) return st;
        if (pending > (uint64_t)(r->end - r->p))
            return tm_srv_fail(err, TM_ERR_TRUNCATED, h.offset, "message ends inside a %s of %llu elements",
                               class_names[h.cls], (unsigned long long)h.n);
    }
    return TM_OK;
}

static tm_status wrong_type(const mp_head *h, const char *key, const char *want, tm_error *err) {
    return tm_srv_fail(err, TM_ERR_MALFORMED, h->offset, "field \"%s\": expected %s, found %s", key, want,
                       class_names[h->cls]);
}

static tm_status read_uint(reader *r, const char *key, uint64_t *v, tm_error *err) {
    mp_head h;
    tm_status st = read_head(r, &h, err);
    if (st != TM_OK) return st;
    if (h.cls != MP_UINT) return wrong_type(&h, key, "an unsigned integer", err);
    *v = h.n;
    return TM_OK;
}

/* A string or binary (cls) value; *present is 0 for nil when nil_ok. */
static tm_status read_bytes(reader *r, const char *key, mp_class cls, int nil_ok, const uint8_t **ptr,
                            size_t *len, int *present, tm_error *err) {
    mp_head h;
    tm_status st = read_head(r, &h, err);
    if (st != TM_OK) return st;
    if (h.cls == MP_NIL && nil_ok) {
        *present = 0;
        return TM_OK;
    }
    if (h.cls != cls) return wrong_type(&h, key, cls == MP_STR ? "a string" : "binary", err);
    st = take(r, &h, ptr, err);
    if (st != TM_OK) return st;
    *len = (size_t)h.n;
    *present = 1;
    return TM_OK;
}

enum { K_TYPE, K_ORG, K_PROJECT, K_RECEIVED, K_RETENTION, K_PAYLOAD, K_RAW, K_CTYPE, K_COUNT };
static const char *const key_names[K_COUNT] = {"type",          "organization_id", "project_id",
                                               "received",      "retention_days",  "payload",
                                               "raw_profile",   "raw_profile_content_type"};

static int key_index(const uint8_t *k, size_t len) {
    for (int i = 0; i < K_COUNT; i++)
        if (strlen(key_names[i]) == len && memcmp(key_names[i], k, len) == 0) return i;
    return -1;
}

static tm_status read_field(reader *r, int key, tm_srv_chunk_msg *m, char *ctype_buf, size_t ctype_cap,
                            tm_error *err) {
    static const char type[] = "profile_chunk";
    const char *name = key_names[key];
    const uint64_t at = off(r);
    const uint8_t *ptr = NULL;
    size_t len = 0;
    int present = 0;
    uint64_t v = 0;
    tm_status st;
    switch (key) {
    case K_TYPE:
        st = read_bytes(r, name, MP_STR, 0, &ptr, &len, &present, err);
        if (st == TM_OK && (len != sizeof type - 1 || memcmp(ptr, type, len) != 0))
            st = tm_srv_fail(err, TM_ERR_MALFORMED, at, "field \"type\": expected \"profile_chunk\", found \"%.*s\"",
                             (int)(len > 64 ? 64 : len), (const char *)ptr);
        return st;
    case K_ORG: return read_uint(r, name, &m->organization_id, err);
    case K_PROJECT: return read_uint(r, name, &m->project_id, err);
    case K_RECEIVED: return read_uint(r, name, &m->received, err);
    case K_RETENTION:
        st = read_uint(r, name, &v, err);
        if (st == TM_OK && v > UINT32_MAX)
            st = tm_srv_fail(err, TM_ERR_MALFORMED, at, "field \"retention_days\": %llu does not fit in 32 bits",
                             (unsigned long long)v);
        m->retention_days = (uint32_t)v;
        return st;
    case K_PAYLOAD:
        st = read_bytes(r, name, MP_BIN, 0, &m->payload, &m->payload_len, &present, err);
        return st;
    case K_RAW:
        st = read_bytes(r, name, MP_BIN, 1, &ptr, &len, &present, err);
        if (st == TM_OK && present) {
            m->raw_profile = ptr;
            m->raw_profile_len = len;
        }
        return st;
    default: /* K_CTYPE */
        st = read_bytes(r, name, MP_STR, 1, &ptr, &len, &present, err);
        if (st != TM_OK || !present) return st;
        if (!ctype_buf || len >= ctype_cap)
            return tm_srv_fail(err, TM_ERR_LIMIT, at, "field \"raw_profile_content_type\": %zu bytes exceed the %zu-byte buffer",
                               len, ctype_cap ? ctype_cap - 1 : 0);
        memcpy(ctype_buf, ptr, len);
        ctype_buf[len] = 0;
        m->raw_profile_content_type = ctype_buf;
        return TM_OK;
    }
}

tm_status tm_srv_chunk_msg_decode(const uint8_t *buf, size_t len, tm_srv_chunk_msg *m, char *ctype_buf,
                                  size_t ctype_cap, tm_error *err) {
    reader r = {buf, buf, buf + len};
    memset(m, 0, sizeof *m);
    mp_head h;
    tm_status st = read_head(&r, &h, err);
    if (st != TM_OK) return st;
    if (h.cls != MP_MAP)
        return tm_srv_fail(err, TM_ERR_MALFORMED, 0, "a profile chunk message is a map, found %s", class_names[h.cls]);
    unsigned seen = 0;
    for (uint64_t i = 0; i < h.n; i++) {
        mp_head kh;
        const uint8_t *k;
        st = read_head(&r, &kh, err);
        if (st != TM_OK) return st;
        if (kh.cls != MP_STR)
            return tm_srv_fail(err, TM_ERR_MALFORMED, kh.offset, "map key %llu is not a string (found %s)",
                               (unsigned long long)i, class_names[kh.cls]);
        st = take(&r, &kh, &k, err);
        if (st != TM_OK) return st;
        const int key = key_index(k, (size_t)kh.n);
        if (key < 0) {
            st = skip_value(&r, err);
        } else if (seen & 1u << key) {
            st = tm_srv_fail(err, TM_ERR_MALFORMED, kh.offset, "duplicate field \"%s\"", key_names[key]);
        } else {
            seen |= 1u << key;
            st = read_field(&r, key, m, ctype_buf, ctype_cap, err);
        }
        if (st != TM_OK) return st;
    }
    if (r.p != r.end)
        return tm_srv_fail(err, TM_ERR_MALFORMED, off(&r), "%llu bytes after the end of the message",
                           (unsigned long long)(r.end - r.p));
    for (int key = K_TYPE; key <= K_PAYLOAD; key++)
        if (!(seen & 1u << key))
            return tm_srv_fail(err, TM_ERR_MALFORMED, 0, "missing field \"%s\"", key_names[key]);
    return TM_OK;
}

/* ---- Outcome JSON ------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s[0..len), or 0 if it is not one
 * (overlong forms, surrogates and values past U+10FFFF included). */
static size_t utf8_seq(const uint8_t *s, size_t len) {
    const uint8_t c = s[0];
    size_t n;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) { n = 2; cp = c & 0x1fu; min = 0x80; }
    else if ((c & 0xf0) == 0xe0) { n = 3; cp = c & 0x0fu; min = 0x800; }
    else if ((c & 0xf8) == 0xf0) { n = 4; cp = c & 0x07u; min = 0x10000; }
    else return 0;
    if (len < n) return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    return n;
}

/* Appends s as a JSON string (as serde_json escapes it); a string that is
 * not UTF-8 is refused rather than written as invalid JSON. */
static tm_status json_string(tm_srv_buf *out, const char *field, const char *s, size_t len, tm_error *err) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t i = 0, n; i < len; i += n)
        if ((n = utf8_seq(u + i, len - i)) == 0)
            return tm_srv_fail(err, TM_ERR_INVALID_ARG, i, "outcome field \"%s\" is not UTF-8 at byte %zu", field, i);
    if (tm_srv_json_string(out, s, len)) return tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory writing outcome JSON");
    return TM_OK;
}

/* The last second RFC 3339's four-digit year can hold: 9999-12-31T23:59:59Z. */
#define MAX_TIMESTAMP 253402300799ull

tm_status tm_srv_outcome_json(const tm_srv_outcome *o, tm_srv_buf *out, tm_error *err) {
    const size_t start = out->len;
    if (o->timestamp > MAX_TIMESTAMP)
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "outcome timestamp %llu is after the year 9999",
                           (unsigned long long)o->timestamp);
    const time_t t = (time_t)o->timestamp;
    struct tm tm;
    if (!gmtime_r(&t, &tm))
        return tm_srv_fail(err, TM_ERR_INVALID_ARG, 0, "outcome timestamp %llu cannot be represented",
                           (unsigned long long)o->timestamp);
    char tmp[256];
    int n = snprintf(tmp, sizeof tmp,
                     "{\"timestamp\":\"%04d-%02d-%02dT%02d:%02d:%02d.000000Z\",\"org_id\":%llu,"
                     "\"project_id\":%llu,\"key_id\":null,\"outcome\":%d,\"reason\":",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (unsigned long long)o->org_id, (unsigned long long)o->project_id, o->outcome);
    tm_status st = TM_OK;
    if (tm_srv_buf_append(out, tmp, (size_t)n)) goto nomem;
    if (o->reason) st = json_string(out, "reason", o->reason, strlen(o->reason), err);
    else if (tm_srv_buf_append(out, "null", 4)) goto nomem;
    if (st != TM_OK) goto fail;
    if (tm_srv_buf_append(out, ",\"event_id\":", 12)) goto nomem;
    if (o->event_id.ptr) st = json_string(out, "event_id", o->event_id.ptr, o->event_id.len, err);
    else if (tm_srv_buf_append(out, "null", 4)) goto nomem;
    if (st != TM_OK) goto fail;
    n = snprintf(tmp, sizeof tmp,
                 ",\"remote_addr\":null,\"source\":\"tracemill\",\"category\":%d,\"quantity\":%lu}",
                 o->category, (unsigned long)o->quantity);
    if (tm_srv_buf_append(out, tmp, (size_t)n)) goto nomem;
    return TM_OK;
nomem:
    st = tm_srv_fail(err, TM_ERR_NOMEM, 0, "out of memory writing outcome JSON");
fail:
    out->len = start;
    return st;
}
