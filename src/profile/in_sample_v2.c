/*
 * in_sample_v2.c — Sentry Sample v2 profile-chunk JSON (what Sentry SDKs
 * and Relay produce, and `tracemill convert -f sample-v2` writes) and
 * Sentry Sample v1 transaction profiles (what sentry-python's transaction
 * profiler sends, and `-f sample-v1` writes) -> the profile model, so every
 * exporter reads them. The two share frames, stacks, thread_metadata and
 * debug_meta; they differ in the version and in how samples are timed.
 *
 * One streaming pass with the json_read.h tokenizer (no tree: chunks run to
 * 100+ MB) collects frames, stacks, images, samples and thread names as the
 * JSON holds them, in any key order; unknown keys are skipped. Then, with
 * everything known: images become mappings, frames are interned (Java when
 * their platform is "java", or when they have no platform and no address
 * in a "java"/"android" chunk) and native ones linked to the image holding
 * their address, stacks (leaf first, as in the JSON) and sample stack ids
 * are renumbered to profile ids, and thread_metadata names threads.
 *
 * Sample v2 timestamps are Unix seconds as decimal text and become
 * nanoseconds exactly (no double in between). A Sample v1 sample is timed
 * by elapsed_since_start_ns (a decimal string or integer) after the
 * profile's top-level "timestamp" (RFC 3339, or Unix seconds as a number).
 * Either way the profile's trace time is Unix time: one realtime segment
 * with offset 0. Sample v1 frames may use Relay's older key names (name,
 * file, line). A frame's source is its filename (the name Sentry shows),
 * else its abs_path, and its lineno: what tracemill writes for symbolized
 * frames, and what Python and JavaScript SDKs send. What the model has no
 * field for (colno, in_app, transactions, device, ...) is dropped.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h> /* qsort */

#include "perfetto/clock.h"     /* TM_CLOCK_REALTIME */
#include "wire/json_read.h" /* tm_json_reader */
#include "wire/rfc3339.h"   /* tm_rfc3339_parse */
#include "profile/trace.h"     /* tm_trace */

enum { PLATFORM_NONE, PLATFORM_JAVA, PLATFORM_OTHER };

typedef struct raw_frame {
    tm_prof_frame f;
    uint8_t platform; /* PLATFORM_* */
    size_t offset;
} raw_frame;

typedef struct raw_stack {
    uint32_t off, len; /* into items: JSON frame indices, leaf first */
    size_t offset;
} raw_stack;

typedef struct thread_name {
    int64_t tid;
    tm_str name;
} thread_name;

typedef struct image {
    tm_prof_mapping m;
    uint32_t id; /* interned mapping */
} image;

typedef struct v2 {
    tm_trace *t;
    tm_profile *p;
    tm_mem *mem;
    tm_error *err;
    const uint8_t *buf;
    size_t len;
    tm_json_reader j;
    tm_str platform;
    raw_frame *frames; size_t n_frames, cap_frames;
    raw_stack *stacks; size_t n_stacks, cap_stacks;
    uint32_t *items; size_t n_items, cap_items;
    image *images; size_t n_images, cap_images;
    thread_name *names; size_t n_names, cap_names;
    size_t samples_offset;   /* the '[' of profile.samples */
    int v1;                  /* reading Sample v1: samples are elapsed_since_start_ns after start_ns */
    int has_start;
    int64_t start_ns;        /* Sample v1's "timestamp", Unix ns */
    tm_bytes last_tid_text;  /* consecutive samples mostly share a thread */
    uint32_t last_thread;
} v2;

/* ---- errors ---- */

static tm_status vfail(v2 *r, tm_status code, size_t at, const char *reason, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static tm_status vfail(v2 *r, tm_status code, size_t at, const char *reason, const char *fmt, ...) {
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tm_fail(r->err, code, at, reason, "Sample v%d: %s", r->v1 ? 1 : 2, msg);
}

static tm_status json_error(v2 *r) {
    return tm_fail(r->err, r->j.err_code, r->j.err_offset, NULL, "Sample v%d JSON: %s", r->v1 ? 1 : 2, r->j.err);
}

static tm_status nomem(v2 *r) { return tm_fail(r->err, TM_ERR_NOMEM, 0, NULL, "out of memory"); }

#define NEXT(r, tok)                                                       \
    do {                                                                   \
        if (tm_json_next(&(r)->j, (tok)) == TM_JSON_ERROR) return json_error(r); \
    } while (0)
#define SKIP(r, tok)                                                       \
    do {                                                                   \
        if (!tm_json_skip(&(r)->j, (tok))) return json_error(r);           \
    } while (0)
#define TRY_MEM(r, expr)                   \
    do {                                   \
        if ((expr) != TM_OK) return nomem(r); \
    } while (0)

/* "<array>[<index>]<member> is not <want>" (no index: SIZE_MAX). */
static tm_status wrong_type(v2 *r, const tm_json_token *tok, const char *array, size_t index, const char *member,
                            const char *want) {
    if (index == SIZE_MAX)
        return vfail(r, TM_ERR_MALFORMED, tok->offset, NULL, "%s%s is not %s", array, member, want);
    return vfail(r, TM_ERR_MALFORMED, tok->offset, NULL, "%s[%zu]%s is not %s", array, index, member, want);
}

/* ---- scalar fields ---- */

static int key_is(const tm_json_token *t, const char *name, size_t n) {
    return t->escaped ? tm_json_eq(t, name) : t->text.len == n && memcmp(t->text.data, name, n) == 0;
}
#define KEY_IS(t, lit) key_is((t), lit, sizeof(lit) - 1)

/* Optional '-', then decimal digits fitting an int64_t. */
static int parse_i64(tm_bytes s, int64_t *out) {
    size_t i = s.len && s.data[0] == '-';
    int neg = i == 1;
    if (i == s.len) return 0;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < s.len; i++) {
        unsigned d = (unsigned)s.data[i] - '0';
        if (d > 9 || v > (limit - d) / 10) return 0;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

static int hex_value(uint8_t c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An address: "0x..." hex string, or a non-negative JSON integer. */
static int parse_addr(const tm_json_token *t, uint64_t *out) {
    if (t->type == TM_JSON_NUMBER) return tm_json_u64(t, out);
    if (t->type != TM_JSON_STRING || t->escaped || t->text.len < 3) return 0;
    const uint8_t *s = t->text.data;
    if (s[0] != '0' || (s[1] != 'x' && s[1] != 'X')) return 0;
    uint64_t v = 0;
    for (size_t i = 2; i < t->text.len; i++) {
        int h = hex_value(s[i]);
        if (h < 0 || v >> 60) return 0;
        v = v << 4 | (uint64_t)h;
    }
    *out = v;
    return 1;
}

/* A string field, or null (*present = 0). */
static tm_status read_opt_str(v2 *r, const char *array, size_t index, const char *member, tm_str *out,
                              int *present) {
    tm_json_token tok;
    NEXT(r, &tok);
    *present = 0;
    if (tok.type == TM_JSON_NULL) return TM_OK;
    if (tok.type != TM_JSON_STRING) return wrong_type(r, &tok, array, index, member, "a string");
    TRY_MEM(r, tm_json_str(&r->t->arena, &tok, out));
    *present = 1;
    return TM_OK;
}

/* An address ("0x..." or an integer) or, unless is_addr, a size (an
 * integer), or null (*present = 0). */
static tm_status read_opt_u64(v2 *r, const char *array, size_t index, const char *member, int is_addr,
                              uint64_t *out, int *present) {
    tm_json_token tok;
    NEXT(r, &tok);
    *present = 0;
    if (tok.type == TM_JSON_NULL) return TM_OK;
    if (!(is_addr ? parse_addr(&tok, out) : tm_json_u64(&tok, out)))
        return wrong_type(r, &tok, array, index, member, is_addr ? "an address" : "a size");
    *present = 1;
    return TM_OK;
}

/* A frame's lineno: null, or a number of 32 bits. */
static tm_status read_opt_line(v2 *r, size_t index, uint32_t *out, int *present) {
    tm_json_token tok;
    NEXT(r, &tok);
    *present = 0;
    if (tok.type == TM_JSON_NULL) return TM_OK;
    uint64_t v;
    if (!tm_json_u64(&tok, &v) || v > UINT32_MAX)
        return wrong_type(r, &tok, "profile.frames", index, ".lineno", "a line number");
    *out = (uint32_t)v;
    *present = 1;
    return TM_OK;
}

/* ---- debug_meta ---- */

/* Hex text (dashes ignored) into raw bytes in the arena: every digit when
 * all_digits, else exactly the first 32 (a debug id: GUID plus an optional
 * age). Returns 0 when the text does not have that shape. */
static int hex_bytes(tm_arena *ar, tm_str s, int all_digits, tm_bytes *out, int *oom) {
    size_t digits = 0;
    for (size_t i = 0; i < s.len; i++) {
        if (s.data[i] == '-') continue;
        if (hex_value(s.data[i]) < 0) return 0;
        digits++;
    }
    size_t n = all_digits ? digits : 32;
    if (!n || n % 2 || digits < n) return 0;
    uint8_t *b = tm_arena_alloc(ar, n / 2);
    if (!b) return *oom = 1, 0;
    size_t k = 0;
    for (size_t i = 0; i < s.len && k < n; i++) {
        if (s.data[i] == '-') continue;
        int h = hex_value(s.data[i]);
        if (k % 2) b[k / 2] = (uint8_t)(b[k / 2] | h);
        else b[k / 2] = (uint8_t)(h << 4);
        k++;
    }
    out->data = b;
    out->len = n / 2;
    return 1;
}

/* The build id of an image: code_id (the full ELF build id) when it is hex,
 * else debug_id with the GUID byte order the writer applies
 * (out_sample_v2.c write_debug_id) undone: the first three fields are
 * little-endian. */
static tm_status image_build_id(v2 *r, tm_str code_id, tm_str debug_id, tm_bytes *out) {
    int oom = 0;
    if (code_id.len && hex_bytes(&r->t->arena, code_id, 1, out, &oom)) return TM_OK;
    if (oom) return nomem(r);
    tm_bytes guid;
    if (!hex_bytes(&r->t->arena, debug_id, 0, &guid, &oom)) return oom ? nomem(r) : TM_OK;
    uint8_t *b = (uint8_t *)guid.data, t;
    t = b[0], b[0] = b[3], b[3] = t;
    t = b[1], b[1] = b[2], b[2] = t;
    t = b[4], b[4] = b[5], b[5] = t;
    t = b[6], b[6] = b[7], b[7] = t;
    *out = guid;
    return TM_OK;
}

static tm_status read_image(v2 *r, size_t index, size_t offset) {
    tm_json_token tok;
    tm_str code_file = {0}, debug_id = {0}, code_id = {0};
    int has_file = 0, has_addr = 0, has_size = 0, has_vmaddr = 0, present;
    uint64_t addr = 0, size = 0, vmaddr = 0;
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) break;
        if (KEY_IS(&tok, "code_file")) {
            TM_TRY(read_opt_str(r, "debug_meta.images", index, ".code_file", &code_file, &has_file));
        } else if (KEY_IS(&tok, "debug_id")) {
            TM_TRY(read_opt_str(r, "debug_meta.images", index, ".debug_id", &debug_id, &present));
        } else if (KEY_IS(&tok, "code_id")) {
            TM_TRY(read_opt_str(r, "debug_meta.images", index, ".code_id", &code_id, &present));
        } else if (KEY_IS(&tok, "image_addr")) {
            TM_TRY(read_opt_u64(r, "debug_meta.images", index, ".image_addr", 1, &addr, &has_addr));
        } else if (KEY_IS(&tok, "image_size")) {
            TM_TRY(read_opt_u64(r, "debug_meta.images", index, ".image_size", 0, &size, &has_size));
        } else if (KEY_IS(&tok, "image_vmaddr")) {
            TM_TRY(read_opt_u64(r, "debug_meta.images", index, ".image_vmaddr", 1, &vmaddr, &has_vmaddr));
        } else {
            NEXT(r, &tok);
            SKIP(r, &tok);
        }
    }
    /* Only native images with a file and a load address locate frames. */
    if (!has_file || !code_file.len || !has_addr) return TM_OK;
    image im;
    memset(&im, 0, sizeof im);
    im.m.path = code_file;
    im.m.start = addr;
    if (has_size && __builtin_add_overflow(addr, size, &im.m.end))
        return vfail(r, TM_ERR_MALFORMED, offset, NULL, "debug_meta.images[%zu]: image_addr + image_size overflows",
                     index);
    if (!has_size) im.m.end = addr;
    if (has_vmaddr) {
        im.m.load_bias = vmaddr;
        im.m.flags |= TM_MAPPING_HAS_LOAD_BIAS;
    }
    if (tm_path_is_java(code_file)) im.m.flags |= TM_MAPPING_JAVA;
    TM_TRY(image_build_id(r, code_id, debug_id, &im.m.build_id));
    TRY_MEM(r, TM_VEC_RESERVE(r->mem, r->images, r->cap_images, r->n_images + 1));
    r->images[r->n_images++] = im;
    return TM_OK;
}

static tm_status read_debug_meta(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type == TM_JSON_NULL) return TM_OK;
    if (tok.type != TM_JSON_OBJECT) return wrong_type(r, &tok, "debug_meta", SIZE_MAX, "", "an object");
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) return TM_OK;
        int images = KEY_IS(&tok, "images");
        NEXT(r, &tok);
        if (!images || tok.type == TM_JSON_NULL) {
            SKIP(r, &tok);
            continue;
        }
        if (tok.type != TM_JSON_ARRAY) return wrong_type(r, &tok, "debug_meta.images", SIZE_MAX, "", "an array");
        for (size_t i = 0;; i++) {
            NEXT(r, &tok);
            if (tok.type == TM_JSON_ARRAY_END) break;
            if (tok.type != TM_JSON_OBJECT) return wrong_type(r, &tok, "debug_meta.images", i, "", "an object");
            TM_TRY(read_image(r, i, tok.offset));
        }
    }
}

/* ---- profile ---- */

static tm_status sample_thread(v2 *r, const tm_json_token *tok, size_t index, uint32_t *out) {
    if (r->last_thread != TM_ABSENT && tm_bytes_eq(tok->text, r->last_tid_text)) {
        *out = r->last_thread;
        return TM_OK;
    }
    int64_t tid;
    if ((tok->type != TM_JSON_STRING && tok->type != TM_JSON_NUMBER) || !parse_i64(tok->text, &tid))
        return wrong_type(r, tok, "profile.samples", index, ".thread_id", "a decimal thread id");
    TRY_MEM(r, tm_profile_thread(r->p, tid, out));
    r->last_tid_text = tok->text;
    r->last_thread = *out;
    return TM_OK;
}

/* One {timestamp, stack_id, thread_id}; the stack id stays the JSON index
 * until the stacks are known. */
static tm_status read_sample(v2 *r, size_t index, size_t offset) {
    tm_json_token tok;
    int64_t ts = 0;
    uint64_t stack = 0;
    uint32_t thread = 0;
    int seen = 0;
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) break;
        if (r->v1 && KEY_IS(&tok, "elapsed_since_start_ns")) {
            NEXT(r, &tok);
            uint64_t elapsed;
            tm_json_token digits = tok; /* sentry-python writes it as a string of digits */
            digits.type = tok.type == TM_JSON_STRING && !tok.escaped ? TM_JSON_NUMBER : tok.type;
            if (!tm_json_u64(&digits, &elapsed))
                return wrong_type(r, &tok, "profile.samples", index, ".elapsed_since_start_ns",
                                  "a decimal count of nanoseconds");
            if (elapsed > INT64_MAX)
                return vfail(r, TM_ERR_MALFORMED, tok.offset, NULL,
                             "profile.samples[%zu].elapsed_since_start_ns %.*s is out of range", index,
                             TM_STR_ARGS(tok.text));
            ts = (int64_t)elapsed;
            seen |= 1;
        } else if (!r->v1 && KEY_IS(&tok, "timestamp")) {
            NEXT(r, &tok);
            if (tok.type != TM_JSON_NUMBER) return wrong_type(r, &tok, "profile.samples", index, ".timestamp", "a number");
            if (!tm_json_scaled_i64(&tok, 9, &ts))
                return vfail(r, TM_ERR_MALFORMED, tok.offset, NULL,
                             "profile.samples[%zu].timestamp %.*s is out of range", index, TM_STR_ARGS(tok.text));
            seen |= 1;
        } else if (KEY_IS(&tok, "stack_id")) {
            NEXT(r, &tok);
            if (!tm_json_u64(&tok, &stack)) return wrong_type(r, &tok, "profile.samples", index, ".stack_id", "an index");
            if (stack >= UINT32_MAX)
                return vfail(r, TM_ERR_MALFORMED, tok.offset, "MalformedSamples",
                             "profile.samples[%zu].stack_id %llu: no such stack", index, (unsigned long long)stack);
            seen |= 2;
        } else if (KEY_IS(&tok, "thread_id")) {
            NEXT(r, &tok);
            TM_TRY(sample_thread(r, &tok, index, &thread));
            seen |= 4;
        } else {
            NEXT(r, &tok);
            SKIP(r, &tok);
        }
    }
    if (seen != 7)
        return vfail(r, TM_ERR_MALFORMED, offset, "MalformedSamples", "profile.samples[%zu] has no %s", index,
                     !(seen & 1) ? (r->v1 ? "elapsed_since_start_ns" : "timestamp")
                                 : !(seen & 2) ? "stack_id" : "thread_id");
    if (r->p->n_samples >= r->t->limits.max_samples)
        return vfail(r, TM_ERR_LIMIT, offset, NULL, "more than %llu samples (max_samples)",
                     (unsigned long long)r->t->limits.max_samples);
    TRY_MEM(r, tm_profile_add_sample(r->p, ts, (uint32_t)stack, thread));
    return TM_OK;
}

static tm_status read_samples(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type != TM_JSON_ARRAY) return wrong_type(r, &tok, "profile.samples", SIZE_MAX, "", "an array");
    r->samples_offset = tok.offset;
    for (size_t i = 0;; i++) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_ARRAY_END) return TM_OK;
        if (tok.type != TM_JSON_OBJECT) return wrong_type(r, &tok, "profile.samples", i, "", "an object");
        TM_TRY(read_sample(r, i, tok.offset));
    }
}

static tm_status read_stacks(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type != TM_JSON_ARRAY) return wrong_type(r, &tok, "profile.stacks", SIZE_MAX, "", "an array");
    for (size_t i = 0;; i++) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_ARRAY_END) return TM_OK;
        if (tok.type != TM_JSON_ARRAY) return wrong_type(r, &tok, "profile.stacks", i, "", "an array");
        TRY_MEM(r, TM_VEC_RESERVE(r->mem, r->stacks, r->cap_stacks, r->n_stacks + 1));
        raw_stack *s = &r->stacks[r->n_stacks++];
        s->off = (uint32_t)r->n_items;
        s->offset = tok.offset;
        for (;;) {
            NEXT(r, &tok);
            if (tok.type == TM_JSON_ARRAY_END) break;
            uint64_t f;
            if (!tm_json_u64(&tok, &f)) return wrong_type(r, &tok, "profile.stacks", i, "[]", "a frame index");
            if (f >= UINT32_MAX)
                return vfail(r, TM_ERR_MALFORMED, tok.offset, "MalformedStacks",
                             "profile.stacks[%zu] refers to frame %llu: no such frame", i, (unsigned long long)f);
            if (r->n_items - s->off >= r->t->limits.max_stack_depth)
                return vfail(r, TM_ERR_LIMIT, s->offset, NULL, "profile.stacks[%zu] has more than %llu frames "
                             "(max_stack_depth)", i, (unsigned long long)r->t->limits.max_stack_depth);
            if (r->n_items >= UINT32_MAX)
                return vfail(r, TM_ERR_LIMIT, tok.offset, NULL, "more than 2^32 frame references in stacks");
            TRY_MEM(r, TM_VEC_RESERVE(r->mem, r->items, r->cap_items, r->n_items + 1));
            r->items[r->n_items++] = (uint32_t)f;
        }
        s->len = (uint32_t)(r->n_items - s->off);
    }
}

static tm_status read_frame(v2 *r, size_t index, size_t offset) {
    TRY_MEM(r, TM_VEC_RESERVE(r->mem, r->frames, r->cap_frames, r->n_frames + 1));
    raw_frame *rf = &r->frames[r->n_frames++];
    memset(rf, 0, sizeof *rf);
    rf->offset = offset;
    tm_prof_frame *f = &rf->f;
    tm_json_token tok;
    int present;
    tm_str abs_path = {NULL, 0};
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) {
            if (!(f->flags & TM_FRAME_HAS_FILE) && abs_path.len) f->file = abs_path, f->flags |= TM_FRAME_HAS_FILE;
            return TM_OK;
        }
        if (KEY_IS(&tok, "filename") || KEY_IS(&tok, "file")) { /* "file": Relay's older alias */
            TM_TRY(read_opt_str(r, "profile.frames", index, ".filename", &f->file, &present));
            if (present && f->file.len) f->flags |= TM_FRAME_HAS_FILE;
        } else if (KEY_IS(&tok, "abs_path")) {
            TM_TRY(read_opt_str(r, "profile.frames", index, ".abs_path", &abs_path, &present));
        } else if (KEY_IS(&tok, "lineno") || KEY_IS(&tok, "line")) { /* "line": Relay's older alias */
            TM_TRY(read_opt_line(r, index, &f->line, &present));
            if (present) f->flags |= TM_FRAME_HAS_LINE;
        } else if (KEY_IS(&tok, "function") || KEY_IS(&tok, "name")) { /* "name": Relay's older alias */
            TM_TRY(read_opt_str(r, "profile.frames", index, ".function", &f->function, &present));
            if (present) f->flags |= TM_FRAME_HAS_FUNCTION;
        } else if (KEY_IS(&tok, "module")) {
            TM_TRY(read_opt_str(r, "profile.frames", index, ".module", &f->module, &present));
            if (present) f->flags |= TM_FRAME_HAS_MODULE;
        } else if (KEY_IS(&tok, "package")) {
            TM_TRY(read_opt_str(r, "profile.frames", index, ".package", &f->package, &present));
            if (present) f->flags |= TM_FRAME_HAS_PACKAGE;
        } else if (KEY_IS(&tok, "instruction_addr")) {
            TM_TRY(read_opt_u64(r, "profile.frames", index, ".instruction_addr", 1, &f->addr, &present));
            if (present) f->flags |= TM_FRAME_HAS_ADDR;
        } else if (KEY_IS(&tok, "platform")) {
            tm_str platform;
            TM_TRY(read_opt_str(r, "profile.frames", index, ".platform", &platform, &present));
            if (present) rf->platform = tm_bytes_eq(platform, (tm_str){(const uint8_t *)"java", 4}) ? PLATFORM_JAVA
                                                                                                : PLATFORM_OTHER;
        } else {
            NEXT(r, &tok);
            SKIP(r, &tok);
        }
    }
}

static tm_status read_frames(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type != TM_JSON_ARRAY) return wrong_type(r, &tok, "profile.frames", SIZE_MAX, "", "an array");
    for (size_t i = 0;; i++) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_ARRAY_END) return TM_OK;
        if (tok.type != TM_JSON_OBJECT) return wrong_type(r, &tok, "profile.frames", i, "", "an object");
        TM_TRY(read_frame(r, i, tok.offset));
    }
}

/* {"<tid>": {"name": ..., "priority": ...}}: names are applied at the end,
 * to the threads that have samples. */
static tm_status read_thread_metadata(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type == TM_JSON_NULL) return TM_OK;
    if (tok.type != TM_JSON_OBJECT) return wrong_type(r, &tok, "profile.thread_metadata", SIZE_MAX, "", "an object");
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) return TM_OK;
        int64_t tid;
        if (tok.escaped || !parse_i64(tok.text, &tid))
            return vfail(r, TM_ERR_MALFORMED, tok.offset, NULL, "profile.thread_metadata key \"%.*s\" is not a "
                         "decimal thread id", TM_STR_ARGS(tok.text));
        NEXT(r, &tok);
        if (tok.type == TM_JSON_NULL) continue;
        if (tok.type != TM_JSON_OBJECT)
            return wrong_type(r, &tok, "profile.thread_metadata", SIZE_MAX, "", "an object of objects");
        for (;;) {
            NEXT(r, &tok);
            if (tok.type == TM_JSON_OBJECT_END) break;
            if (!KEY_IS(&tok, "name")) {
                NEXT(r, &tok);
                SKIP(r, &tok);
                continue;
            }
            thread_name tn = {tid, {0}};
            int present;
            TM_TRY(read_opt_str(r, "profile.thread_metadata", SIZE_MAX, ".name", &tn.name, &present));
            if (!present) continue;
            TRY_MEM(r, TM_VEC_RESERVE(r->mem, r->names, r->cap_names, r->n_names + 1));
            r->names[r->n_names++] = tn;
        }
    }
}

/* A key the walk reads must appear once: a second copy would silently mix
 * two documents' worth of data. */
static tm_status once(v2 *r, const tm_json_token *key, unsigned *seen, unsigned bit) {
    if (*seen & bit)
        return vfail(r, TM_ERR_MALFORMED, key->offset, NULL, "duplicate key \"%.*s\"", TM_STR_ARGS(key->text));
    *seen |= bit;
    return TM_OK;
}

static tm_status read_profile(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type != TM_JSON_OBJECT) return wrong_type(r, &tok, "profile", SIZE_MAX, "", "an object");
    unsigned seen = 0;
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) return TM_OK;
        if (KEY_IS(&tok, "samples")) {
            TM_TRY(once(r, &tok, &seen, 1));
            TM_TRY(read_samples(r));
        } else if (KEY_IS(&tok, "stacks")) {
            TM_TRY(once(r, &tok, &seen, 2));
            TM_TRY(read_stacks(r));
        } else if (KEY_IS(&tok, "frames")) {
            TM_TRY(once(r, &tok, &seen, 4));
            TM_TRY(read_frames(r));
        } else if (KEY_IS(&tok, "thread_metadata")) {
            TM_TRY(once(r, &tok, &seen, 8));
            TM_TRY(read_thread_metadata(r));
        } else {
            NEXT(r, &tok);
            SKIP(r, &tok);
        }
    }
}

/* Sample v1's start time: RFC 3339 text, or Unix seconds as a number. */
static tm_status read_start(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type == TM_JSON_STRING && !tok.escaped && tm_rfc3339_parse(tok.text, &r->start_ns)) {
    } else if (tok.type == TM_JSON_NUMBER) {
        if (!tm_json_scaled_i64(&tok, 9, &r->start_ns))
            return vfail(r, TM_ERR_MALFORMED, tok.offset, NULL, "timestamp %.*s is out of range", TM_STR_ARGS(tok.text));
    } else {
        return wrong_type(r, &tok, "timestamp", SIZE_MAX, "", "an RFC 3339 date-time or Unix seconds");
    }
    r->has_start = 1;
    return TM_OK;
}

/* One {timestamp, value} of measurements.memory_footprint: a resident set
 * in bytes at Unix seconds, kept as the profile's memory reading (of no
 * process: a chunk is one). */
static tm_status read_footprint_value(v2 *r, size_t index, size_t offset) {
    tm_json_token tok;
    tm_prof_memory m = {0, 0, 0, 0, 0, 0, 0, 0};
    int seen = 0;
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) break;
        if (KEY_IS(&tok, "timestamp")) {
            NEXT(r, &tok);
            if (tok.type != TM_JSON_NUMBER || !tm_json_scaled_i64(&tok, 9, &m.ts))
                return wrong_type(r, &tok, "measurements.memory_footprint.values", index, ".timestamp",
                                  "Unix seconds");
            seen |= 1;
        } else if (KEY_IS(&tok, "value")) {
            NEXT(r, &tok);
            if (!tm_json_u64(&tok, &m.rss))
                return wrong_type(r, &tok, "measurements.memory_footprint.values", index, ".value", "bytes");
            seen |= 2;
        } else {
            NEXT(r, &tok);
            SKIP(r, &tok);
        }
    }
    if (seen != 3)
        return vfail(r, TM_ERR_MALFORMED, offset, NULL, "measurements.memory_footprint.values[%zu] has no %s", index,
                     seen & 1 ? "value" : "timestamp");
    tm_profile *p = r->p;
    TRY_MEM(r, TM_VEC_RESERVE(p->mem, p->memory, p->cap_memory, p->n_memory + 1));
    p->memory[p->n_memory++] = m;
    return TM_OK;
}

/* "measurements": memory_footprint's values are read back (the writer
 * makes it from the profile's memory readings); other measurements are
 * not the profile's. */
static tm_status read_measurements(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type == TM_JSON_NULL) return TM_OK;
    if (tok.type != TM_JSON_OBJECT) return wrong_type(r, &tok, "measurements", SIZE_MAX, "", "an object");
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) return TM_OK;
        bool footprint = KEY_IS(&tok, "memory_footprint");
        NEXT(r, &tok);
        if (!footprint || tok.type != TM_JSON_OBJECT) {
            SKIP(r, &tok);
            continue;
        }
        for (;;) {
            NEXT(r, &tok);
            if (tok.type == TM_JSON_OBJECT_END) break;
            bool values = KEY_IS(&tok, "values");
            NEXT(r, &tok);
            if (!values) {
                SKIP(r, &tok);
                continue;
            }
            if (tok.type != TM_JSON_ARRAY)
                return wrong_type(r, &tok, "measurements.memory_footprint.values", SIZE_MAX, "", "an array");
            for (size_t i = 0;; i++) {
                NEXT(r, &tok);
                if (tok.type == TM_JSON_ARRAY_END) break;
                if (tok.type != TM_JSON_OBJECT)
                    return wrong_type(r, &tok, "measurements.memory_footprint.values", i, "", "an object");
                TM_TRY(read_footprint_value(r, i, tok.offset));
            }
        }
    }
}

static tm_status read_document(v2 *r) {
    tm_json_token tok;
    NEXT(r, &tok);
    if (tok.type != TM_JSON_OBJECT)
        return vfail(r, TM_ERR_MALFORMED, tok.offset, NULL, "a profile chunk is a JSON object");
    unsigned seen = 0;
    for (;;) {
        NEXT(r, &tok);
        if (tok.type == TM_JSON_OBJECT_END) break;
        if (KEY_IS(&tok, "version")) {
            TM_TRY(once(r, &tok, &seen, 1));
            NEXT(r, &tok);
            if (tok.type != TM_JSON_STRING) return wrong_type(r, &tok, "version", SIZE_MAX, "", "a string");
            if (r->v1 ? !KEY_IS(&tok, "1") : !KEY_IS(&tok, "2"))
                return vfail(r, TM_ERR_UNSUPPORTED, tok.offset, NULL, "version \"%.*s\": this reader takes "
                             "version \"%d\" (%s)", TM_STR_ARGS(tok.text), r->v1 ? 1 : 2,
                             r->v1 ? "transaction profiles" : "profile chunks");
        } else if (r->v1 && KEY_IS(&tok, "timestamp")) {
            TM_TRY(once(r, &tok, &seen, 16));
            TM_TRY(read_start(r));
        } else if (KEY_IS(&tok, "platform")) {
            TM_TRY(once(r, &tok, &seen, 2));
            int present;
            TM_TRY(read_opt_str(r, "platform", SIZE_MAX, "", &r->platform, &present));
        } else if (KEY_IS(&tok, "debug_meta")) {
            TM_TRY(once(r, &tok, &seen, 4));
            TM_TRY(read_debug_meta(r));
        } else if (KEY_IS(&tok, "profile")) {
            TM_TRY(once(r, &tok, &seen, 8));
            TM_TRY(read_profile(r));
        } else if (!r->v1 && KEY_IS(&tok, "measurements")) {
            TM_TRY(once(r, &tok, &seen, 32));
            TM_TRY(read_measurements(r));
        } else {
            NEXT(r, &tok);
            SKIP(r, &tok);
        }
    }
    NEXT(r, &tok); /* only blanks may follow */
    if (!(seen & 8))
        return vfail(r, TM_ERR_MALFORMED, 0, NULL, "no \"profile\" object: not a %s",
                     r->v1 ? "transaction profile" : "profile chunk");
    if (r->v1 && !(seen & 16))
        return vfail(r, TM_ERR_MALFORMED, 0, NULL, "no \"timestamp\": the samples' start time is unknown");
    return TM_OK;
}

/* ---- building the model ---- */

/* Byte offset of element `index` of the array at `offset` (for errors
 * found after the walk). */
static size_t element_offset(const v2 *r, size_t offset, size_t index) {
    tm_json_reader j;
    tm_json_token tok;
    tm_json_reader_at(&j, r->buf, r->len, offset);
    if (tm_json_next(&j, &tok) != TM_JSON_ARRAY) return offset;
    for (size_t i = 0; i <= index; i++) {
        if (tm_json_next(&j, &tok) == TM_JSON_ERROR) return offset;
        if (i == index) return tok.offset;
        if (!tm_json_skip(&j, &tok)) return offset;
    }
    return offset;
}

static int chunk_is_jvm(const v2 *r) {
    static const tm_str java = {(const uint8_t *)"java", 4}, android = {(const uint8_t *)"android", 7};
    return tm_bytes_eq(r->platform, java) || tm_bytes_eq(r->platform, android);
}

static int cmp_image_start(const void *a, const void *b) {
    uint64_t x = ((const image *)a)->m.start, y = ((const image *)b)->m.start;
    return (x > y) - (x < y);
}

/* Interns the images, then sorts them by start with max_end[i] = the
 * largest end among images[0..i], so a lookup stops early. */
static tm_status intern_images(v2 *r, uint64_t **max_end) {
    for (size_t i = 0; i < r->n_images; i++)
        TRY_MEM(r, tm_profile_intern_mapping(r->p, &r->images[i].m, &r->images[i].id));
    if (r->n_images > 1) qsort(r->images, r->n_images, sizeof *r->images, cmp_image_start);
    *max_end = tm_mem_alloc(r->mem, (r->n_images + 1) * sizeof **max_end);
    if (!*max_end) return nomem(r);
    uint64_t m = 0;
    for (size_t i = 0; i < r->n_images; i++) {
        if (r->images[i].m.end > m) m = r->images[i].m.end;
        (*max_end)[i] = m;
    }
    return TM_OK;
}

/* The image holding addr: the one with the largest start <= addr whose
 * [start, end) contains it; NULL if none. */
static const image *image_of(const v2 *r, const uint64_t *max_end, uint64_t addr) {
    size_t lo = 0, hi = r->n_images; /* first image with start > addr */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (r->images[mid].m.start <= addr) lo = mid + 1;
        else hi = mid;
    }
    for (size_t i = lo; i-- > 0 && max_end[i] > addr;)
        if (addr < r->images[i].m.end) return &r->images[i];
    return NULL;
}

static tm_status build(v2 *r) {
    tm_profile *p = r->p;
    uint64_t *max_end = NULL;
    uint32_t *frame_id = NULL, *stack_id = NULL, *scratch = NULL;
    size_t max_len = 1;
    for (size_t i = 0; i < r->n_stacks; i++)
        if (r->stacks[i].len > max_len) max_len = r->stacks[i].len;
    tm_status st = intern_images(r, &max_end);
    if (st == TM_OK) {
        frame_id = tm_mem_alloc(r->mem, (r->n_frames + 1) * sizeof *frame_id);
        stack_id = tm_mem_alloc(r->mem, (r->n_stacks + 1) * sizeof *stack_id);
        scratch = tm_mem_alloc(r->mem, max_len * sizeof *scratch);
        if (!frame_id || !stack_id || !scratch) st = nomem(r);
    }
    int jvm = chunk_is_jvm(r);
    for (size_t i = 0; st == TM_OK && i < r->n_frames; i++) {
        raw_frame *rf = &r->frames[i];
        tm_prof_frame *f = &rf->f;
        if (rf->platform == PLATFORM_JAVA || (rf->platform == PLATFORM_NONE && jvm && !(f->flags & TM_FRAME_HAS_ADDR)))
            f->flags |= TM_FRAME_JAVA;
        else if (f->flags & TM_FRAME_HAS_ADDR) {
            const image *im = image_of(r, max_end, f->addr);
            if (im) {
                f->mapping = im->id + 1;
                /* the ELF address, as Sentry's symbolicator and Perfetto's rel_pc have it */
                f->rel_pc = f->addr - im->m.start + im->m.load_bias;
            }
        }
        st = tm_profile_intern_frame(p, f, &frame_id[i]);
        if (st == TM_ERR_LIMIT)
            st = vfail(r, TM_ERR_LIMIT, rf->offset, NULL, "more than %llu unique frames (max_unique_frames)",
                       (unsigned long long)r->t->limits.max_unique_frames);
        else if (st != TM_OK) st = nomem(r);
    }
    for (size_t i = 0; st == TM_OK && i < r->n_stacks; i++) {
        const raw_stack *s = &r->stacks[i];
        for (uint32_t k = 0; st == TM_OK && k < s->len; k++) {
            uint32_t f = r->items[s->off + k];
            if (f >= r->n_frames)
                st = vfail(r, TM_ERR_MALFORMED, s->offset, "MalformedStacks",
                           "profile.stacks[%zu] refers to frame %u, but there are %zu frames", i, f, r->n_frames);
            else scratch[k] = frame_id[f];
        }
        if (st == TM_OK && tm_profile_intern_stack(p, scratch, s->len, &stack_id[i]) != TM_OK) st = nomem(r);
    }
    for (size_t i = 0; st == TM_OK && i < p->n_samples; i++) {
        uint32_t s = p->samples[i].stack;
        if (s >= r->n_stacks)
            st = vfail(r, TM_ERR_MALFORMED, element_offset(r, r->samples_offset, i), "MalformedSamples",
                       "profile.samples[%zu].stack_id %u, but there are %zu stacks", i, s, r->n_stacks);
        else p->samples[i].stack = stack_id[s];
    }
    tm_mem_free(r->mem, max_end, (r->n_images + 1) * sizeof *max_end);
    tm_mem_free(r->mem, frame_id, (r->n_frames + 1) * sizeof *frame_id);
    tm_mem_free(r->mem, stack_id, (r->n_stacks + 1) * sizeof *stack_id);
    tm_mem_free(r->mem, scratch, max_len * sizeof *scratch);
    return st;
}

static tm_status finish(v2 *r) {
    tm_profile *p = r->p;
    for (size_t i = 0; i < r->n_names; i++) {
        uint32_t th = tm_u64map_get(&p->thread_by_tid, (uint64_t)r->names[i].tid);
        if (th != TM_ABSENT) tm_profile_name_thread(p, th, r->names[i].name, 1);
    }
    for (size_t i = 0; r->v1 && i < p->n_samples; i++)
        if (__builtin_add_overflow(p->samples[i].ts, r->start_ns, &p->samples[i].ts))
            return vfail(r, TM_ERR_MALFORMED, element_offset(r, r->samples_offset, i), NULL,
                         "timestamp + profile.samples[%zu].elapsed_since_start_ns is past the year 2262", i);
    /* Timestamps are Unix time already: trace time maps to itself. */
    p->realtime = tm_mem_alloc(r->mem, sizeof *p->realtime);
    if (!p->realtime) return nomem(r);
    p->realtime[0].from_ns = INT64_MIN;
    p->realtime[0].offset_ns = 0;
    p->n_realtime = 1;
    TRY_MEM(r, tm_profile_sort_samples(p));
    tm_trace_stats *st = &p->stats;
    st->samples_kept = p->n_samples;
    st->threads = p->n_threads;
    st->trace_clock_id = TM_CLOCK_REALTIME;
    st->has_realtime = 1;
    if (p->n_samples) {
        st->first_sample_ns = p->samples[0].ts;
        st->last_sample_ns = p->samples[p->n_samples - 1].ts;
    }
    /* Every thread here has samples (threads come from samples). */
    for (size_t i = 0; i < p->n_threads; i++)
        if (!p->threads[i].name_prio) st->threads_without_name++;
    return TM_OK;
}

static void release(v2 *r) {
    tm_mem_free(r->mem, r->frames, r->cap_frames * sizeof *r->frames);
    tm_mem_free(r->mem, r->stacks, r->cap_stacks * sizeof *r->stacks);
    tm_mem_free(r->mem, r->items, r->cap_items * sizeof *r->items);
    tm_mem_free(r->mem, r->images, r->cap_images * sizeof *r->images);
    tm_mem_free(r->mem, r->names, r->cap_names * sizeof *r->names);
}

static tm_status read_sentry(tm_trace *t, const uint8_t *buf, size_t len, int v1, tm_error *err) {
    v2 r;
    memset(&r, 0, sizeof r);
    r.v1 = v1;
    r.t = t;
    r.p = &t->profile;
    r.mem = &t->mem;
    r.err = err;
    r.buf = buf;
    r.len = len;
    r.last_thread = TM_ABSENT;
    tm_json_reader_init(&r.j, buf, len);
    r.j.p += tm_utf8_bom_len(buf, len); /* offsets still count the byte order mark */
    /* A sample takes ~65 bytes of JSON: reserve for that (at most 2^24
     * samples up front) instead of regrowing from small. */
    size_t reserve = len / 64 < ((size_t)1 << 24) ? len / 64 : (size_t)1 << 24;
    tm_status st = TM_OK;
    if (reserve > 1024 && TM_VEC_RESERVE(r.mem, r.p->samples, r.p->cap_samples, reserve) != TM_OK) st = nomem(&r);
    if (st == TM_OK) st = read_document(&r);
    if (st == TM_OK) st = build(&r);
    if (st == TM_OK) st = finish(&r);
    release(&r);
    return st;
}

tm_status tm_sample_v2_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err) {
    return read_sentry(t, buf, len, 0, err);
}

tm_status tm_sample_v1_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err) {
    return read_sentry(t, buf, len, 1, err);
}
