/*
 * test_pprof.c — the pprof writer (src/out_pprof.c) and the two encoders
 * under it: the protobuf stream (src/pb_write.h) and the record-matching
 * gzip writer (src/gzip_records.h).
 *
 * Output is inflated with zlib (every gzip member in turn) and decoded
 * with our own pull reader (src/pb.h) into plain structs; expectations are
 * computed from the traces the tests build, never from the writer. Checks:
 * string table, sample and period types, ids numbered from 1 and every
 * reference resolvable, stacks leaf first, values [weight, weight *
 * period], labels (thread_id, pid, thread_name, timestamp_ns in Unix
 * time), mappings with hex build ids, Java frames, thread filters, a fixed
 * period, errors (filter matching nothing, failing sink) and large outputs
 * crossing gzip members and deflate's window.
 */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "wire/gzip_records.h"
#include "wire/pb.h"
#include "wire/pb_write.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

/* ==== decoding what we wrote ============================================ */

/* Inflates every gzip member of gz into a malloc'd buffer. */
static uint8_t *gunzip_all(const uint8_t *gz, size_t len, size_t *out_len) {
    size_t cap = 1 << 16, n = 0;
    uint8_t *out = malloc(cap);
    z_stream z;
    memset(&z, 0, sizeof z);
    cr_assert_eq(inflateInit2(&z, 16 + MAX_WBITS), Z_OK);
    z.next_in = (Bytef *)gz;
    z.avail_in = (uInt)len;
    size_t members = 0;
    while (z.avail_in > 0) {
        if (n == cap) out = realloc(out, cap *= 2);
        z.next_out = out + n;
        z.avail_out = (uInt)(cap - n);
        int r = inflate(&z, Z_NO_FLUSH);
        n = cap - z.avail_out;
        if (r == Z_STREAM_END) {
            members++;
            if (z.avail_in) cr_assert_eq(inflateReset(&z), Z_OK);
            continue;
        }
        cr_assert(r == Z_OK || r == Z_BUF_ERROR, "inflate failed (%d) after %zu members: %s", r, members,
                  z.msg ? z.msg : "");
        cr_assert(r == Z_OK || z.avail_out == 0, "gzip stream truncated");
    }
    cr_assert_gt(members, 0);
    inflateEnd(&z);
    *out_len = n;
    return out;
}

typedef struct d_label {
    uint64_t key, str, num, unit;
} d_label;

typedef struct d_sample {
    uint64_t *locs;
    size_t n_locs;
    int64_t values[4];
    size_t n_values;
    d_label labels[8];
    size_t n_labels;
} d_sample;

typedef struct d_location {
    uint64_t id, mapping_id, address, function_id;
    size_t n_lines;
} d_location;

typedef struct d_function {
    uint64_t id, name, system_name, filename;
} d_function;

typedef struct d_mapping {
    uint64_t id, start, limit, offset, filename, build_id, has_functions;
} d_mapping;

typedef struct d_profile {
    char **strings;
    size_t n_strings;
    uint64_t sample_type[4][2];
    size_t n_sample_types;
    d_sample *samples;
    size_t n_samples;
    d_location *locations;
    size_t n_locations;
    d_function *functions;
    size_t n_functions;
    d_mapping *mappings;
    size_t n_mappings;
    int64_t time_nanos, duration_nanos, period;
    uint64_t period_type[2];
    uint64_t comments[8];
    size_t n_comments;
    uint64_t default_sample_type;
    uint8_t *raw; /* the uncompressed bytes */
    size_t raw_len;
} d_profile;

/* Appends a slot to arr (n elements; capacity: the next power of two). */
#define GROW(arr, n) \
    (((n) & ((n) - 1)) == 0 ? (void)((arr) = realloc((arr), ((n) ? 2 * (n) : 1) * sizeof *(arr))) : (void)0, \
     &(arr)[(n)++])

static tm_pb_reader sub(const tm_pb_field *f) {
    cr_assert_eq(f->wire, TM_PB_LEN, "field %u: want a length-delimited field", f->num);
    return tm_pb_reader_of(f->bytes);
}

/* Appends the varints of a repeated field, packed or not. */
static void repeated(const tm_pb_field *f, uint64_t **v, size_t *n) {
    if (f->wire == TM_PB_VARINT) {
        *GROW(*v, *n) = f->val;
        return;
    }
    tm_pb_reader r = sub(f);
    uint64_t x;
    int st;
    while ((st = tm_pb_packed_next(&r, &x)) == TM_PB_OK) *GROW(*v, *n) = x;
    cr_assert_eq(st, TM_PB_DONE);
}

static void decode_value_type(const tm_pb_field *outer, uint64_t vt[2]) {
    tm_pb_reader r = sub(outer);
    tm_pb_field f;
    int st;
    vt[0] = vt[1] = 0;
    while ((st = tm_pb_next(&r, &f)) == TM_PB_OK)
        if (f.num == 1 || f.num == 2) vt[f.num - 1] = f.val;
    cr_assert_eq(st, TM_PB_DONE);
}

static void decode_sample(const tm_pb_field *outer, d_sample *s) {
    memset(s, 0, sizeof *s);
    tm_pb_reader r = sub(outer);
    tm_pb_field f;
    int st;
    while ((st = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == 1) {
            repeated(&f, &s->locs, &s->n_locs);
        } else if (f.num == 2) {
            uint64_t *v = NULL;
            size_t n = 0;
            repeated(&f, &v, &n);
            for (size_t i = 0; i < n; i++) {
                cr_assert_lt(s->n_values, 4);
                s->values[s->n_values++] = (int64_t)v[i];
            }
            free(v);
        } else if (f.num == 3) {
            cr_assert_lt(s->n_labels, 8);
            d_label *l = &s->labels[s->n_labels++];
            memset(l, 0, sizeof *l);
            tm_pb_reader lr = sub(&f);
            tm_pb_field lf;
            while ((st = tm_pb_next(&lr, &lf)) == TM_PB_OK) {
                if (lf.num == 1) l->key = lf.val;
                if (lf.num == 2) l->str = lf.val;
                if (lf.num == 3) l->num = lf.val;
                if (lf.num == 4) l->unit = lf.val;
            }
            cr_assert_eq(st, TM_PB_DONE);
        }
    }
    cr_assert_eq(st, TM_PB_DONE);
}

static void decode_profile(const uint8_t *raw, size_t len, d_profile *d) {
    memset(d, 0, sizeof *d);
    tm_bytes b = {raw, len};
    tm_pb_reader r = tm_pb_reader_of(b);
    tm_pb_field f;
    int st;
    while ((st = tm_pb_next(&r, &f)) == TM_PB_OK) {
        tm_pb_reader m;
        tm_pb_field g;
        switch (f.num) {
        case 1:
            cr_assert_lt(d->n_sample_types, 4);
            decode_value_type(&f, d->sample_type[d->n_sample_types++]);
            break;
        case 2: decode_sample(&f, GROW(d->samples, d->n_samples)); break;
        case 3: {
            d_mapping *mp = GROW(d->mappings, d->n_mappings);
            memset(mp, 0, sizeof *mp);
            m = sub(&f);
            while (tm_pb_next(&m, &g) == TM_PB_OK) {
                uint64_t *fields[] = {NULL, &mp->id, &mp->start, &mp->limit, &mp->offset, &mp->filename,
                                      &mp->build_id, &mp->has_functions};
                if (g.num >= 1 && g.num <= 7) *fields[g.num] = g.val;
            }
            break;
        }
        case 4: {
            d_location *l = GROW(d->locations, d->n_locations);
            memset(l, 0, sizeof *l);
            m = sub(&f);
            while (tm_pb_next(&m, &g) == TM_PB_OK) {
                if (g.num == 1) l->id = g.val;
                if (g.num == 2) l->mapping_id = g.val;
                if (g.num == 3) l->address = g.val;
                if (g.num == 4) {
                    l->n_lines++;
                    tm_pb_reader lr = sub(&g);
                    tm_pb_field lf;
                    while (tm_pb_next(&lr, &lf) == TM_PB_OK)
                        if (lf.num == 1) l->function_id = lf.val;
                }
            }
            break;
        }
        case 5: {
            d_function *fn = GROW(d->functions, d->n_functions);
            memset(fn, 0, sizeof *fn);
            m = sub(&f);
            while (tm_pb_next(&m, &g) == TM_PB_OK) {
                uint64_t *fields[] = {NULL, &fn->id, &fn->name, &fn->system_name, &fn->filename};
                if (g.num >= 1 && g.num <= 4) *fields[g.num] = g.val;
            }
            break;
        }
        case 6: {
            cr_assert_eq(f.wire, TM_PB_LEN);
            char *s = malloc(f.bytes.len + 1);
            memcpy(s, f.bytes.data, f.bytes.len);
            s[f.bytes.len] = 0;
            *GROW(d->strings, d->n_strings) = s;
            break;
        }
        case 9: d->time_nanos = (int64_t)f.val; break;
        case 10: d->duration_nanos = (int64_t)f.val; break;
        case 11: decode_value_type(&f, d->period_type); break;
        case 12: d->period = (int64_t)f.val; break;
        case 13: cr_assert_lt(d->n_comments, 8); d->comments[d->n_comments++] = f.val; break;
        case 14: d->default_sample_type = f.val; break;
        default: cr_assert_fail("unexpected Profile field %u", f.num);
        }
    }
    cr_assert_eq(st, TM_PB_DONE, "profile does not decode: %s", r.err ? r.err : "");
}

static void free_profile(d_profile *d) {
    for (size_t i = 0; i < d->n_strings; i++) free(d->strings[i]);
    for (size_t i = 0; i < d->n_samples; i++) free(d->samples[i].locs);
    free(d->strings);
    free(d->samples);
    free(d->locations);
    free(d->functions);
    free(d->mappings);
    free(d->raw);
    memset(d, 0, sizeof *d);
}

static const char *str_at(const d_profile *d, uint64_t i) {
    cr_assert_lt(i, d->n_strings, "string index %llu out of range", (unsigned long long)i);
    return d->strings[i];
}

static const d_location *location(const d_profile *d, uint64_t id) {
    /* ids are 1..n in table order (check_ids), so that is where id is */
    cr_assert(id >= 1 && id <= d->n_locations && d->locations[id - 1].id == id, "no location %llu",
              (unsigned long long)id);
    return &d->locations[id - 1];
}

static const d_function *function(const d_profile *d, uint64_t id) {
    /* ids are 1..n in table order (check_ids), so that is where id is */
    cr_assert(id >= 1 && id <= d->n_functions && d->functions[id - 1].id == id, "no function %llu",
              (unsigned long long)id);
    return &d->functions[id - 1];
}

static const d_mapping *mapping(const d_profile *d, uint64_t id) {
    /* ids are 1..n in table order (check_ids), so that is where id is */
    cr_assert(id >= 1 && id <= d->n_mappings && d->mappings[id - 1].id == id, "no mapping %llu",
              (unsigned long long)id);
    return &d->mappings[id - 1];
}

/* The label of a sample with this key, or NULL. */
static const d_label *label(const d_profile *d, const d_sample *s, const char *key) {
    for (size_t i = 0; i < s->n_labels; i++)
        if (strcmp(str_at(d, s->labels[i].key), key) == 0) return &s->labels[i];
    return NULL;
}

/* Function name of a sample's k-th location (0: the leaf). */
static const char *frame_name(const d_profile *d, const d_sample *s, size_t k) {
    cr_assert_lt(k, s->n_locs);
    return str_at(d, function(d, location(d, s->locs[k])->function_id)->name);
}

/* The rules of Go's CheckValid plus ours: ids 1..n per table, every
 * reference resolvable, one Line per location, one value per type. */
static void check_ids(const d_profile *d) {
    cr_assert_gt(d->n_strings, 0);
    cr_assert_str_eq(d->strings[0], "");
    for (size_t i = 0; i < d->n_locations; i++) {
        const d_location *l = &d->locations[i];
        cr_assert_eq(l->id, i + 1);
        cr_assert_eq(l->n_lines, 1);
        function(d, l->function_id);
        if (l->mapping_id) mapping(d, l->mapping_id);
    }
    for (size_t i = 0; i < d->n_functions; i++) {
        cr_assert_eq(d->functions[i].id, i + 1);
        str_at(d, d->functions[i].name);
        str_at(d, d->functions[i].system_name);
        str_at(d, d->functions[i].filename);
    }
    for (size_t i = 0; i < d->n_mappings; i++) {
        cr_assert_eq(d->mappings[i].id, i + 1);
        str_at(d, d->mappings[i].filename);
        str_at(d, d->mappings[i].build_id);
    }
    for (size_t i = 0; i < d->n_samples; i++) {
        cr_assert_eq(d->samples[i].n_values, d->n_sample_types);
        for (size_t k = 0; k < d->samples[i].n_locs; k++) location(d, d->samples[i].locs[k]);
    }
}

/* ==== building traces ==================================================== */

#define REAL0 1700000001000000000ull /* REALTIME at the same instant */
#define PERIOD 10000000ull           /* 10 ms between a thread's samples */
#define PID 42

static const uint8_t BUILD_ID[4] = {0xb0, 0x0a, 0x4c, 0x01};

enum {
    CS_MAIN_FOO = 1, /* main -> foo, no mapping */
    CS_NATIVE = 2,   /* main -> native_func in libexample.so */
    CS_JAVA = 3,     /* main -> android.view.View.draw in boot-framework.oat */
    CS_UNNAMED = 4   /* an address in libexample.so without a function name */
};

static void add_clock(tb_buf *t) {
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    const uint64_t vals[2] = {TB_BOOT0, REAL0};
    tb_clock_snapshot(t, 0, ids, vals, 2);
}

static void add_thread_names(tb_buf *t) {
    size_t p = tb_packet_open(t, 2, TB_BOOT0, 0);
    size_t pt = tb_open(t, TM_PF_PACKET_PROCESS_TREE);
    tb_pt_thread(t, 43, PID, "RenderThread");
    tb_close(t, pt);
    tb_close(t, p);
}

static void add_interned(tb_buf *t) {
    size_t pkt = tb_packet_open(t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main", 4);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "foo", 3);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 3, "native_func", 11);
    tb_interned_string(t, TM_PF_INTERNED_FUNCTION_NAMES, 4, "android.view.View.draw", 22);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 10, "libexample.so", 13);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 11, "system", 6);
    tb_interned_string(t, TM_PF_INTERNED_MAPPING_PATHS, 12, "boot-framework.oat", 18);
    tb_interned_string(t, TM_PF_INTERNED_BUILD_IDS, 20, BUILD_ID, sizeof BUILD_ID);
    const uint64_t lib_path[1] = {10}, oat_path[2] = {11, 12};
    tb_mapping(t, 1, 20, 0x70000000, 0x70010000, lib_path, 1);
    tb_mapping(t, 2, 0, 0x1000, 0x2000, oat_path, 2);
    tb_frame(t, 1, 1, 0, 0x1000);
    tb_frame(t, 2, 2, 0, 0x2000);
    tb_frame(t, 3, 3, 1, 0x200);
    tb_frame(t, 4, 4, 2, 0x100);
    tb_frame(t, 5, 0, 1, 0x345);
    const uint64_t main_foo[2] = {1, 2}, native[2] = {1, 3}, java[2] = {1, 4}, unnamed[1] = {5};
    tb_callstack(t, CS_MAIN_FOO, main_foo, 2, 0);
    tb_callstack(t, CS_NATIVE, native, 2, 1);
    tb_callstack(t, CS_JAVA, java, 2, 0);
    tb_callstack(t, CS_UNNAMED, unnamed, 1, 0);
    tb_close(t, in);
    tb_close(t, pkt);
}

typedef struct smp {
    uint64_t ts; /* BOOTTIME ns */
    uint32_t tid;
    uint64_t cs;
} smp;

/* Thread 42 (the main thread: tid == pid) and 43 ("RenderThread") take
 * turns, each sampling every PERIOD ns. */
static const smp SAMPLES[] = {
    {TB_BOOT0, 42, CS_MAIN_FOO},
    {TB_BOOT0 + 1000, 43, CS_NATIVE},
    {TB_BOOT0 + PERIOD, 42, CS_JAVA},
    {TB_BOOT0 + PERIOD + 1000, 43, CS_NATIVE},
    {TB_BOOT0 + 2 * PERIOD, 42, CS_MAIN_FOO},
    {TB_BOOT0 + 2 * PERIOD + 1000, 43, CS_UNNAMED},
    {TB_BOOT0 + 3 * PERIOD, 42, CS_MAIN_FOO},
};
#define N_SAMPLES (sizeof SAMPLES / sizeof *SAMPLES)

static void build_trace(tb_buf *t, const smp *s, size_t n) {
    add_clock(t);
    add_thread_names(t);
    add_interned(t);
    for (size_t i = 0; i < n; i++) tb_perf_sample(t, 1, s[i].ts, PID, s[i].tid, s[i].cs, 0);
}

static tm_trace *parse(const tb_buf *t) {
    tm_trace *tr = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(t->data, t->len, NULL, &tr, &err);
    cr_assert_eq(st, TM_OK, "%s: %s", tm_status_str(st), err.message);
    return tr;
}

/* Writes tr as pprof with opts and decodes it (inflating unless raw). */
static void write_and_decode(const tm_trace *tr, const tm_pprof_options *opts, d_profile *d) {
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    tm_status st = tm_write_pprof(tr, opts, &sink, &err);
    cr_assert_eq(st, TM_OK, "%s: %s", tm_status_str(st), err.message);
    uint8_t *raw;
    size_t len;
    if (opts && opts->uncompressed) {
        cr_assert(out.len < 2 || (uint8_t)out.data[0] != 0x1f || (uint8_t)out.data[1] != 0x8b);
        raw = malloc(out.len + 1);
        memcpy(raw, out.data, out.len);
        len = out.len;
    } else {
        cr_assert(out.len >= 2 && (uint8_t)out.data[0] == 0x1f && (uint8_t)out.data[1] == 0x8b, "not gzip");
        raw = gunzip_all((const uint8_t *)out.data, out.len, &len);
    }
    tu_membuf_free(&out);
    decode_profile(raw, len, d);
    d->raw = raw;
    d->raw_len = len;
    check_ids(d);
}

/* The built sample whose Unix timestamp this is. */
static const smp *sample_at(const smp *s, size_t n, uint64_t unix_ns) {
    for (size_t i = 0; i < n; i++)
        if (s[i].ts - TB_BOOT0 + REAL0 == unix_ns) return &s[i];
    cr_assert_fail("no sample at %llu", (unsigned long long)unix_ns);
    return NULL;
}

/* ==== the profile ======================================================== */

Test(pprof, header_types_and_string_table) {
    tb_buf t = {0};
    build_trace(&t, SAMPLES, N_SAMPLES);
    tm_trace *tr = parse(&t);
    d_profile d;
    write_and_decode(tr, NULL, &d);
    cr_assert_eq(d.n_sample_types, 2);
    cr_assert_str_eq(str_at(&d, d.sample_type[0][0]), "samples");
    cr_assert_str_eq(str_at(&d, d.sample_type[0][1]), "count");
    cr_assert_str_eq(str_at(&d, d.sample_type[1][0]), "cpu");
    cr_assert_str_eq(str_at(&d, d.sample_type[1][1]), "nanoseconds");
    cr_assert_str_eq(str_at(&d, d.period_type[0]), "cpu");
    cr_assert_str_eq(str_at(&d, d.period_type[1]), "nanoseconds");
    cr_assert_str_eq(str_at(&d, d.default_sample_type), "cpu");
    cr_assert_eq(d.period, (int64_t)PERIOD);
    /* first sample in Unix time; last - first plus one period */
    cr_assert_eq(d.time_nanos, (int64_t)REAL0);
    cr_assert_eq(d.duration_nanos, (int64_t)(3 * PERIOD + PERIOD));
    int inferred = 0;
    for (size_t i = 0; i < d.n_comments; i++) inferred |= strstr(str_at(&d, d.comments[i]), "inferred") != NULL;
    cr_assert(inferred, "a comment says the period was inferred");
    for (size_t i = 1; i < d.n_strings; i++)
        for (size_t j = i + 1; j < d.n_strings; j++)
            cr_assert_str_neq(d.strings[i], d.strings[j], "string %zu repeated", i);
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(pprof, one_sample_per_profile_sample_with_labels_and_values) {
    tb_buf t = {0};
    build_trace(&t, SAMPLES, N_SAMPLES);
    tm_trace *tr = parse(&t);
    d_profile d;
    write_and_decode(tr, NULL, &d);
    cr_assert_eq(d.n_samples, N_SAMPLES);
    int seen[N_SAMPLES] = {0};
    for (size_t i = 0; i < d.n_samples; i++) {
        const d_sample *s = &d.samples[i];
        const d_label *ts = label(&d, s, "timestamp_ns"), *tid = label(&d, s, "thread_id"),
                      *pid = label(&d, s, "pid"), *name = label(&d, s, "thread_name");
        cr_assert(ts && tid && pid && name, "sample %zu lacks a label", i);
        cr_assert_str_eq(str_at(&d, ts->unit), "nanoseconds");
        const smp *want = sample_at(SAMPLES, N_SAMPLES, ts->num);
        seen[want - SAMPLES]++;
        cr_assert_eq(tid->num, want->tid);
        cr_assert_eq(pid->num, PID);
        cr_assert_eq(name->str != 0 && name->num == 0, 1);
        cr_assert_str_eq(str_at(&d, name->str), want->tid == PID ? "main" : "RenderThread");
        cr_assert_eq(s->values[0], 1);
        cr_assert_eq(s->values[1], (int64_t)PERIOD);
        switch (want->cs) { /* leaf first */
        case CS_MAIN_FOO:
            cr_assert_eq(s->n_locs, 2);
            cr_assert_str_eq(frame_name(&d, s, 0), "foo");
            cr_assert_str_eq(frame_name(&d, s, 1), "main");
            break;
        case CS_NATIVE:
            cr_assert_eq(s->n_locs, 2);
            cr_assert_str_eq(frame_name(&d, s, 0), "native_func");
            cr_assert_str_eq(frame_name(&d, s, 1), "main");
            break;
        case CS_JAVA:
            cr_assert_eq(s->n_locs, 2);
            cr_assert_str_eq(frame_name(&d, s, 0), "android.view.View.draw");
            cr_assert_str_eq(frame_name(&d, s, 1), "main");
            break;
        case CS_UNNAMED:
            cr_assert_eq(s->n_locs, 1);
            cr_assert_str_eq(frame_name(&d, s, 0), "0x345 (libexample.so)");
            break;
        }
    }
    for (size_t i = 0; i < N_SAMPLES; i++) cr_assert_eq(seen[i], 1, "sample %zu written %d times", i, seen[i]);
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(pprof, locations_functions_and_mappings) {
    tb_buf t = {0};
    build_trace(&t, SAMPLES, N_SAMPLES);
    tm_trace *tr = parse(&t);
    d_profile d;
    write_and_decode(tr, NULL, &d);
    /* five distinct frames, "main" shared by four stacks */
    cr_assert_eq(d.n_locations, 5);
    cr_assert_eq(d.n_functions, 5);
    cr_assert_eq(d.n_mappings, 2);
    int checked = 0;
    for (size_t i = 0; i < d.n_locations; i++) {
        const d_location *l = &d.locations[i];
        const d_function *fn = function(&d, l->function_id);
        const char *name = str_at(&d, fn->name), *system = str_at(&d, fn->system_name);
        if (strcmp(name, "native_func") == 0) {
            const d_mapping *m = mapping(&d, l->mapping_id);
            cr_assert_eq(l->address, 0x70000000 + 0x200);
            cr_assert_str_eq(str_at(&d, m->filename), "libexample.so");
            cr_assert_str_eq(str_at(&d, fn->filename), "libexample.so");
            cr_assert_eq(m->start, 0x70000000);
            cr_assert_eq(m->limit, 0x70010000);
            char hex[2 * sizeof BUILD_ID + 1];
            for (size_t k = 0; k < sizeof BUILD_ID; k++) snprintf(hex + 2 * k, 3, "%02x", BUILD_ID[k]);
            cr_assert_str_eq(str_at(&d, m->build_id), hex);
            cr_assert_eq(m->has_functions, 1);
            cr_assert_str_eq(system, "native_func");
            checked++;
        } else if (strcmp(name, "android.view.View.draw") == 0) {
            const d_mapping *m = mapping(&d, l->mapping_id);
            cr_assert_str_eq(str_at(&d, m->filename), "system/boot-framework.oat");
            cr_assert_eq(m->build_id, 0);
            cr_assert_str_eq(system, "draw");
            checked++;
        } else if (strcmp(name, "0x345 (libexample.so)") == 0) {
            cr_assert_eq(l->address, 0x70000000 + 0x345);
            cr_assert_str_eq(system, "");
            checked++;
        } else if (strcmp(name, "foo") == 0 || strcmp(name, "main") == 0) {
            cr_assert_eq(l->mapping_id, 0);
            cr_assert_str_eq(system, name);
            checked++;
        }
    }
    cr_assert_eq(checked, 5);
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

/* A Perfetto frame's rel_pc is an address in its ELF file's virtual
 * address space; pprof wants the address in the process, which its
 * symbolizer turns back into a file offset through the mapping (address -
 * memory_start + file_offset). So the location's address undoes the load
 * bias and the mapping's offset into the ELF: a non-PIE Go binary (vaddr
 * 0x400000 at offset 0, load_bias 0x400000) and the text segment of a PIE
 * binary (file offset 0x1000, vaddr 0x1000) as `tracemill record` writes
 * them; each address falls inside its mapping. */
Test(pprof, location_addresses_are_process_addresses_inside_their_mapping) {
    static const struct {
        uint64_t start, end, load_bias, exact_offset, rel_pc, want;
    } cases[] = {
        {0x400000, 0x483000, 0x400000, 0, 0x45ce80, 0x45ce80},
        {0x55d000001000, 0x55d000003000, 0, 0x1000, 0x117c, 0x55d00000117c},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tb_buf t = {0};
        add_clock(&t);
        size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
        size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "main.fib", 8);
        tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 10, "prog", 4);
        size_t m = tb_open(&t, TM_PF_INTERNED_MAPPINGS);
        tb_uint(&t, TM_PF_INTERNED_IID, 1);
        tb_uint(&t, TM_PF_MAPPING_START, cases[c].start);
        tb_uint(&t, TM_PF_MAPPING_END, cases[c].end);
        tb_uint(&t, TM_PF_MAPPING_LOAD_BIAS, cases[c].load_bias);
        tb_uint(&t, TM_PF_MAPPING_EXACT_OFFSET, cases[c].exact_offset);
        tb_uint(&t, TM_PF_MAPPING_PATH_STRING_IDS, 10);
        tb_close(&t, m);
        tb_frame(&t, 1, 1, 1, cases[c].rel_pc);
        const uint64_t frames[1] = {1};
        tb_callstack(&t, 1, frames, 1, 0);
        tb_close(&t, in);
        tb_close(&t, pkt);
        tb_perf_sample(&t, 1, TB_BOOT0, PID, PID, 1, 0);
        tm_trace *tr = parse(&t);
        d_profile d;
        write_and_decode(tr, NULL, &d);
        cr_assert_eq(d.n_locations, 1);
        const d_location *l = &d.locations[0];
        const d_mapping *mp = mapping(&d, l->mapping_id);
        cr_assert_eq(l->address, cases[c].want, "case %zu: address 0x%llx", c, (unsigned long long)l->address);
        cr_assert(l->address >= mp->start && l->address < mp->limit);
        cr_assert_eq(mp->offset, cases[c].exact_offset);
        free_profile(&d);
        tm_trace_free(tr);
        tb_free(&t);
    }
}

/* pprof takes the first mapping for the main binary ("File:" in its
 * reports): the mapping of the program a process is named after comes
 * first, though another was used first. named 2: the command line names
 * something else (exec -a) and the main thread's name, the kernel's comm,
 * names the program (found recording a renamed program busy in libc: File
 * was libc.so.6); named 3: only another thread has that name, which does
 * not make it the program. */
Test(pprof, the_processes_program_is_the_first_mapping) {
    for (int named = 0; named <= 3; named++) {
        tb_buf t = {0};
        if (named) {
            size_t p = tb_packet_open(&t, 2, TB_BOOT0, 0);
            size_t pt = tb_open(&t, TM_PF_PACKET_PROCESS_TREE);
            size_t pr = tb_open(&t, TM_PF_PROCESS_TREE_PROCESSES);
            tb_uint(&t, TM_PF_PROCESS_PID, PID);
            tb_str(&t, TM_PF_PROCESS_CMDLINE, named == 1 ? "/apex/boot-framework.oat" : "renamed");
            tb_close(&t, pr);
            if (named >= 2) {
                tb_pt_thread(&t, 43, PID, "RenderThread"); /* first: its samples (libexample.so) come first */
                tb_pt_thread(&t, named == 2 ? PID : 44, PID, "boot-framework.oat");
            }
            tb_close(&t, pt);
            tb_close(&t, p);
        }
        build_trace(&t, SAMPLES, N_SAMPLES);
        tm_trace *tr = parse(&t);
        d_profile d;
        write_and_decode(tr, NULL, &d);
        cr_assert_eq(d.n_mappings, 2);
        const d_mapping *first = mapping(&d, 1);
        cr_assert_not_null(first);
        /* libexample.so's native_func is sampled before View.draw */
        const char *want = named == 1 || named == 2 ? "system/boot-framework.oat" : "libexample.so";
        cr_assert_str_eq(str_at(&d, first->filename), want, "named %d", named);
        free_profile(&d);
        tm_trace_free(tr);
        tb_free(&t);
    }
}

/* A program run by another name than its file's (sh is /usr/bin/dash):
 * no mapping names a process, so the one its main thread's stacks start
 * in (_start) is the program, not libc.so.6, whose leaf came first. */
Test(pprof, the_mapping_main_threads_start_in_is_the_first) {
    tb_buf t = {0};
    add_clock(&t);
    size_t p = tb_packet_open(&t, 2, TB_BOOT0, 0);
    size_t pt = tb_open(&t, TM_PF_PACKET_PROCESS_TREE);
    size_t pr = tb_open(&t, TM_PF_PROCESS_TREE_PROCESSES);
    tb_uint(&t, TM_PF_PROCESS_PID, PID);
    tb_str(&t, TM_PF_PROCESS_CMDLINE, "sh");
    tb_close(&t, pr);
    tb_pt_thread(&t, PID, PID, "sh");
    tb_close(&t, pt);
    tb_close(&t, p);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 1, "_start", 6);
    tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, 2, "strcmp", 6);
    tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 10, "/usr/bin/dash", 13);
    tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 11, "/usr/lib/libc.so.6", 18);
    const uint64_t dash[1] = {10}, libc[1] = {11};
    tb_mapping(&t, 1, 0, 0x1000, 0x2000, dash, 1);
    tb_mapping(&t, 2, 0, 0x70000000, 0x70010000, libc, 1);
    tb_frame(&t, 1, 1, 1, 0x100);
    tb_frame(&t, 2, 2, 2, 0x200);
    const uint64_t frames[2] = {1, 2};
    tb_callstack(&t, 1, frames, 2, 0);
    tb_close(&t, in);
    tb_close(&t, pkt);
    tb_perf_sample(&t, 1, TB_BOOT0, PID, PID, 1, 0);
    tb_perf_sample(&t, 1, TB_BOOT0 + PERIOD, PID, PID, 1, 0);
    tm_trace *tr = parse(&t);
    d_profile d;
    write_and_decode(tr, NULL, &d);
    cr_assert_eq(d.n_mappings, 2);
    cr_assert_str_eq(str_at(&d, mapping(&d, 1)->filename), "/usr/bin/dash");
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(pprof, gzip_and_raw_hold_the_same_profile) {
    tb_buf t = {0};
    build_trace(&t, SAMPLES, N_SAMPLES);
    tm_trace *tr = parse(&t);
    d_profile gz, raw;
    tm_pprof_options o = {0};
    write_and_decode(tr, &o, &gz);
    o.uncompressed = 1;
    write_and_decode(tr, &o, &raw);
    cr_assert_eq(gz.raw_len, raw.raw_len);
    cr_assert_eq(memcmp(gz.raw, raw.raw, raw.raw_len), 0);
    free_profile(&gz);
    free_profile(&raw);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(pprof, thread_filter_by_name_and_tid) {
    tb_buf t = {0};
    build_trace(&t, SAMPLES, N_SAMPLES);
    tm_trace *tr = parse(&t);
    size_t want43 = 0;
    for (size_t i = 0; i < N_SAMPLES; i++) want43 += SAMPLES[i].tid == 43;
    tm_pprof_options o = {0};
    o.threads.name = "RenderThread";
    d_profile d;
    write_and_decode(tr, &o, &d);
    cr_assert_eq(d.n_samples, want43);
    for (size_t i = 0; i < d.n_samples; i++) cr_assert_eq(label(&d, &d.samples[i], "thread_id")->num, 43);
    /* time range of the selected thread only */
    cr_assert_eq(d.time_nanos, (int64_t)(REAL0 + 1000));
    free_profile(&d);

    memset(&o, 0, sizeof o);
    o.threads.by_tid = 1;
    o.threads.tid = 42;
    write_and_decode(tr, &o, &d);
    cr_assert_eq(d.n_samples, N_SAMPLES - want43);
    for (size_t i = 0; i < d.n_samples; i++) cr_assert_eq(label(&d, &d.samples[i], "thread_id")->num, 42);
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(pprof, fixed_period) {
    tb_buf t = {0};
    build_trace(&t, SAMPLES, N_SAMPLES);
    tm_trace *tr = parse(&t);
    tm_pprof_options o = {0};
    o.period_ns = 2500000;
    d_profile d;
    write_and_decode(tr, &o, &d);
    cr_assert_eq(d.period, 2500000);
    for (size_t i = 0; i < d.n_samples; i++) cr_assert_eq(d.samples[i].values[1], 2500000);
    int given = 0;
    for (size_t i = 0; i < d.n_comments; i++) given |= strstr(str_at(&d, d.comments[i]), "given") != NULL;
    cr_assert(given);
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

/* CPU time per thread_id label. */
static void cpu_by_thread(const d_profile *d, int64_t cpu[2], const int64_t tids[2]) {
    cpu[0] = cpu[1] = 0;
    for (size_t i = 0; i < d->n_samples; i++) {
        const d_label *l = label(d, &d->samples[i], "thread_id");
        cr_assert_not_null(l);
        for (int k = 0; k < 2; k++)
            if ((int64_t)l->num == tids[k]) cpu[k] += d->samples[i].values[1];
    }
}

/* A thread's period comes from its own gaps only when it has enough of
 * them, and its CPU time never exceeds its span: tid 43 with two samples
 * 800 ms apart was 1.6 s of CPU in a 1 s profile. */
Test(pprof, inferred_periods_keep_cpu_time_within_each_thread_span) {
    smp s[1002];
    size_t n = 0;
    for (int i = 0; i < 1000; i++) s[n++] = (smp){TB_BOOT0 + (uint64_t)i * 1000000, 42, CS_MAIN_FOO};
    s[n++] = (smp){TB_BOOT0 + 100000000 + 500, 43, CS_NATIVE};
    s[n++] = (smp){TB_BOOT0 + 900000000 + 500, 43, CS_NATIVE};
    /* samples in time order, as a trace holds them */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && s[j - 1].ts > s[j].ts; j--) {
            smp tmp = s[j];
            s[j] = s[j - 1];
            s[j - 1] = tmp;
        }
    tb_buf t = {0};
    build_trace(&t, s, n);
    tm_trace *tr = parse(&t);
    d_profile d;
    write_and_decode(tr, NULL, &d);
    cr_assert_eq(d.period, 1000000);
    int64_t cpu[2];
    const int64_t tids[2] = {42, 43};
    cpu_by_thread(&d, cpu, tids);
    cr_expect_eq(cpu[0], 1000 * 1000000ll, "tid 42: its own 1 ms period");
    cr_expect_eq(cpu[1], 2 * 1000000ll, "tid 43: too few gaps, the whole trace's 1 ms: %lld", (long long)cpu[1]);
    int says = 0;
    for (size_t i = 0; i < d.n_comments; i++)
        says |= strstr(str_at(&d, d.comments[i]), "1 threads the median of their own gaps, 1 (fewer than 8 gaps)") !=
                NULL;
    cr_expect(says, "the comment says how each period was obtained");
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);

    /* tid 42 samples in bursts: 5 gaps of 100 ms, 4 of 1 ms -> median
     * 100 ms, but 10 samples span only 504 ms: lowered to the mean gap. */
    n = 0;
    uint64_t ts = TB_BOOT0;
    for (int i = 0; i < 10; i++) {
        s[n++] = (smp){ts, 42, CS_MAIN_FOO};
        ts += i < 5 ? 100000000 : 1000000;
    }
    t = (tb_buf){0};
    build_trace(&t, s, n);
    tr = parse(&t);
    write_and_decode(tr, NULL, &d);
    cpu_by_thread(&d, cpu, tids);
    cr_expect_leq(cpu[0], 504000000ll + d.period, "tid 42: %lld ns of CPU in a 504 ms span", (long long)cpu[0]);
    says = 0;
    for (size_t i = 0; i < d.n_comments; i++)
        says |= strstr(str_at(&d, d.comments[i]), "1 lowered to their mean gap") != NULL;
    cr_expect(says, "the comment says the period was lowered");
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(pprof, unnamed_thread_without_unix_time) {
    /* no clock snapshot: timestamps stay in trace time; tid 50 is unnamed */
    tb_buf t = {0};
    add_interned(&t);
    tb_perf_sample(&t, 1, 5000, PID, 50, CS_MAIN_FOO, 0);
    tb_perf_sample(&t, 1, 9000, PID, 50, CS_MAIN_FOO, 0);
    tm_trace *tr = parse(&t);
    d_profile d;
    write_and_decode(tr, NULL, &d);
    cr_assert_eq(d.n_samples, 2);
    uint64_t sum = 0;
    for (size_t i = 0; i < d.n_samples; i++) {
        cr_assert_str_eq(str_at(&d, label(&d, &d.samples[i], "thread_name")->str), "tid-50");
        sum += label(&d, &d.samples[i], "timestamp_ns")->num;
        cr_assert_eq(d.samples[i].values[1], 4000);
    }
    cr_assert_eq(sum, 5000 + 9000);
    cr_assert_eq(d.time_nanos, 5000);
    cr_assert_eq(d.duration_nanos, 4000 + 4000);
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

Test(pprof, folded_input_weights_without_time) {
    static const char folded[] = "main;foo 3\nmain;bar 2\nmain;foo 1\n";
    tm_options opts = {0};
    opts.input = TM_INPUT_FOLDED;
    tm_trace *tr = NULL;
    tm_error err;
    tm_status st = tm_trace_parse(folded, sizeof folded - 1, &opts, &tr, &err);
    cr_assert_eq(st, TM_OK, "%s", err.message);
    tm_pprof_options o = {0};
    o.period_ns = 1000;
    d_profile d;
    write_and_decode(tr, &o, &d);
    int64_t foo = 0, bar = 0;
    for (size_t i = 0; i < d.n_samples; i++) {
        const d_sample *s = &d.samples[i];
        cr_assert_null(label(&d, s, "timestamp_ns"));
        cr_assert_eq(s->values[1], s->values[0] * 1000);
        cr_assert_str_eq(frame_name(&d, s, 1), "main");
        *(strcmp(frame_name(&d, s, 0), "foo") == 0 ? &foo : &bar) += s->values[0];
    }
    cr_assert_eq(foo, 4);
    cr_assert_eq(bar, 2);
    cr_assert_eq(d.time_nanos, 0);
    cr_assert_str_eq(str_at(&d, d.default_sample_type), "cpu"); /* a period given: cpu values */
    free_profile(&d);
    /* no period: every cpu value is 0, and pprof would show "0 of 0 total" */
    write_and_decode(tr, NULL, &d);
    cr_assert_eq(d.period, 0);
    cr_assert_str_eq(str_at(&d, d.default_sample_type), "samples");
    free_profile(&d);
    tm_trace_free(tr);
}

/* ==== errors ============================================================= */

static int failing_write(void *ctx, const void *data, size_t len) {
    (void)data, (void)len;
    return ++*(int *)ctx >= 1;
}

Test(pprof, errors) {
    tb_buf t = {0};
    build_trace(&t, SAMPLES, N_SAMPLES);
    tm_trace *tr = parse(&t);
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    tm_pprof_options o = {0};
    o.threads.name = "no-such-thread";
    cr_assert_eq(tm_write_pprof(tr, &o, &sink, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(err.code, TM_ERR_INVALID_ARG);
    cr_assert_eq(out.len, 0);
    memset(&o, 0, sizeof o);
    o.threads.by_tid = 1;
    o.threads.tid = 999;
    cr_assert_eq(tm_write_pprof(tr, &o, &sink, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_write_pprof(tr, NULL, NULL, &err), TM_ERR_INVALID_ARG);
    cr_assert_eq(tm_write_pprof(NULL, NULL, &sink, NULL), TM_ERR_INVALID_ARG);
    for (int uncompressed = 0; uncompressed < 2; uncompressed++) {
        int calls = 0;
        tm_sink bad = {.write = failing_write, .ctx = &calls};
        memset(&o, 0, sizeof o);
        o.uncompressed = uncompressed;
        cr_assert_eq(tm_write_pprof(tr, &o, &bad, &err), TM_ERR_IO);
        cr_assert_eq(err.code, TM_ERR_IO);
    }
    tu_membuf_free(&out);
    tm_trace_free(tr);
    tb_free(&t);
}

/* ==== large outputs ======================================================= */

/* Many samples over stacks of very different depths (one record longer than
 * deflate's window), four threads: the output spans several gzip members,
 * and every sample must come back with its stack and time. */
Test(pprof, large_profile_across_members) {
    enum { N_FRAMES = 300, N_STACKS = 40, N = 60000, DEEP = 20000 };
    tb_buf t = {0};
    add_clock(&t);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    char name[32];
    for (int f = 1; f <= N_FRAMES; f++) {
        int n = snprintf(name, sizeof name, "fn_%d", f);
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, (uint64_t)f, name, (size_t)n);
        tb_frame(&t, (uint64_t)f, (uint64_t)f, 0, (uint64_t)f * 16);
    }
    static uint64_t frames[DEEP];
    size_t depth[N_STACKS + 1];
    for (int cs = 1; cs <= N_STACKS; cs++) {
        depth[cs] = cs == N_STACKS ? DEEP : (size_t)(1 + (cs * 7) % 60);
        for (size_t k = 0; k < depth[cs]; k++) frames[k] = 1 + (uint64_t)((cs * 31 + (int)k * 17) % N_FRAMES);
        tb_callstack(&t, (uint64_t)cs, frames, depth[cs], 1);
    }
    tb_close(&t, in);
    tb_close(&t, pkt);
    uint64_t ts_sum = 0, deep_samples = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint64_t cs = 1 + (i * 2654435761u) % N_STACKS;
        uint64_t ts = TB_BOOT0 + i * 250000 + (i % 7);
        tb_perf_sample(&t, 1, ts, PID, (uint32_t)(100 + i % 4), cs, 0);
        ts_sum += ts - TB_BOOT0 + REAL0;
        deep_samples += cs == N_STACKS;
    }
    tm_trace *tr = parse(&t);
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    tm_error err;
    cr_assert_eq(tm_write_pprof(tr, NULL, &sink, &err), TM_OK, "%s", err.message);
    /* more than one gzip member */
    size_t members = 0;
    for (size_t i = 0; i + 3 < out.len; i++)
        members += memcmp(out.data + i, "\x1f\x8b\x08\x00", 4) == 0;
    cr_assert_gt(members, 1);
    tu_membuf_free(&out);
    d_profile d;
    write_and_decode(tr, NULL, &d);
    cr_assert_eq(d.n_samples, N);
    uint64_t got_ts = 0, got_deep = 0;
    for (size_t i = 0; i < d.n_samples; i++) {
        const d_sample *s = &d.samples[i];
        got_ts += label(&d, s, "timestamp_ns")->num;
        got_deep += s->n_locs == DEEP;
        /* depths tell the stacks apart; the leaf is the callstack's last frame */
        size_t cs = 0;
        for (size_t c = 1; c <= N_STACKS; c++)
            if (depth[c] == s->n_locs) cs = c;
        cr_assert_neq(cs, 0);
        snprintf(name, sizeof name, "fn_%d", 1 + (int)((cs * 31 + (depth[cs] - 1) * 17) % N_FRAMES));
        cr_assert_str_eq(frame_name(&d, s, 0), name);
    }
    cr_assert_eq(got_ts, ts_sum);
    cr_assert_eq(got_deep, deep_samples);
    free_profile(&d);
    tm_trace_free(tr);
    tb_free(&t);
}

/* ==== the encoders ======================================================== */

/* Records that repeat, vary and grow: the record compressor's output must
 * inflate to exactly its input, across small members. */
Test(gzip_records, round_trip) {
    const size_t out_cap = TM_GZREC_MIN_OUT;
    uint8_t *staging = malloc(TM_GZREC_MIN_STAGING), *outbuf = malloc(out_cap);
    tm_gzrec *g = malloc(sizeof *g);
    tu_membuf gz = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &gz};
    tm_gzrec_init(g, &sink, staging, TM_GZREC_MIN_STAGING, outbuf, out_cap);
    size_t total = 0, cap = 1 << 20;
    uint8_t *want = malloc(cap), rec[40000];
    uint32_t seed = 1;
    for (int i = 0; i < 3000; i++) {
        size_t len = i % 500 == 0 ? sizeof rec : (size_t)(i % 13) * 7;
        for (size_t k = 0; k < len; k++) {
            seed = seed * 1103515245u + 12345u;
            rec[k] = (i % 3 == 0) ? (uint8_t)(seed >> 24) : (uint8_t)(k * 3 + (k > len / 2 ? (unsigned)i : 0));
        }
        if (total + len > cap) want = realloc(want, cap = 2 * (total + len));
        memcpy(want + total, rec, len);
        total += len;
        tm_gzrec_put(g, rec, len);
    }
    cr_assert_eq(tm_gzrec_finish(g), TM_OK);
    size_t got_len;
    uint8_t *got = gunzip_all((const uint8_t *)gz.data, gz.len, &got_len);
    cr_assert_eq(got_len, total);
    cr_assert_eq(memcmp(got, want, total), 0);
    free(got);
    free(want);
    free(g);
    free(staging);
    free(outbuf);
    tu_membuf_free(&gz);
}

static tm_status collect(void *ctx, const uint8_t *data, size_t len) {
    return tu_membuf_write(ctx, data, len) ? TM_ERR_IO : TM_OK;
}

Test(pb_write, varints_fields_and_slices) {
    uint8_t buf[16];
    tu_membuf m = {0};
    tm_pbw w;
    tm_pbw_init(&w, buf, sizeof buf, collect, &m);
    const uint64_t values[] = {0, 1, 127, 128, 300, UINT32_MAX, UINT64_MAX};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        uint8_t *p = tm_pbw_reserve(&w, 2 * TM_PBW_VARINT_MAX);
        uint8_t *e = tm_pbw_uint(p, 3, values[i]);
        cr_assert_eq((size_t)(e - p), tm_pbw_uint_len(3, values[i]));
        tm_pbw_commit(&w, e);
    }
    static const char text[] = "a string longer than the sixteen-byte buffer";
    tm_pbw_bytes_field(&w, 200, text, sizeof text - 1);
    cr_assert_eq(tm_pbw_finish(&w), TM_OK);
    tm_bytes all = {(const uint8_t *)m.data, m.len};
    tm_pb_reader r = tm_pb_reader_of(all);
    tm_pb_field f;
    for (size_t i = 0; i < sizeof values / sizeof *values; i++) {
        cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
        cr_assert_eq(f.num, 3);
        cr_assert_eq(f.val, values[i]);
    }
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_OK);
    cr_assert_eq(f.num, 200);
    cr_assert_eq(f.bytes.len, sizeof text - 1);
    cr_assert_eq(memcmp(f.bytes.data, text, f.bytes.len), 0);
    cr_assert_eq(tm_pb_next(&r, &f), TM_PB_DONE);
    tu_membuf_free(&m);
}
