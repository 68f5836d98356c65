/*
 * heap_view.c — the heap profile of a recorded trace read with the wire
 * reader alone (see heap_view.h): tables per sequence generation, the last
 * complete dump as folded stacks, ProcessStats, and the rules a reader
 * relies on. Out of memory aborts: this is test tooling.
 */
#include "heap_view.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perfetto/fields.h"
#include "wire/pb.h"

/* One generation's interned entries, by iid (one counter for every kind). */
typedef struct table {
    char **str;          /* strings */
    uint64_t *name;      /* frames: function_name_id */
    uint64_t **frames;   /* callstacks: frame ids, root first */
    uint32_t *n_frames;
    uint8_t *defined;
    size_t cap;
} table;

typedef struct reader {
    heap_view *v;
    table t;
    hv_site *dump; /* the dump being read */
    size_t n_dump, cap_dump;
    int in_dump, seen_heap;
    uint64_t next_index;
} reader;

static void *grow(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) abort();
    return q;
}

static void fail(reader *r, const char *why, uint64_t what) {
    if (!r->v->why[0]) snprintf(r->v->why, sizeof r->v->why, "%s (%llu)", why, (unsigned long long)what);
}

static void table_clear(table *t) {
    for (size_t i = 0; i < t->cap; i++) free(t->str[i]), free(t->frames[i]);
    free(t->str), free(t->name), free(t->frames), free(t->n_frames), free(t->defined);
    memset(t, 0, sizeof *t);
}

/* The slot of iid, marked defined; a second definition breaks a rule. */
static int define(reader *r, uint64_t iid) {
    table *t = &r->t;
    if (iid == 0 || iid > 10000000) {
        fail(r, "iid out of range", iid);
        return 0;
    }
    if (iid >= t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap <= iid) cap *= 2;
        t->str = grow(t->str, cap * sizeof *t->str);
        t->name = grow(t->name, cap * sizeof *t->name);
        t->frames = grow(t->frames, cap * sizeof *t->frames);
        t->n_frames = grow(t->n_frames, cap * sizeof *t->n_frames);
        t->defined = grow(t->defined, cap);
        size_t old = t->cap;
        memset(t->str + old, 0, (cap - old) * sizeof *t->str);
        memset(t->name + old, 0, (cap - old) * sizeof *t->name);
        memset(t->frames + old, 0, (cap - old) * sizeof *t->frames);
        memset(t->n_frames + old, 0, (cap - old) * sizeof *t->n_frames);
        memset(t->defined + old, 0, cap - old);
        t->cap = cap;
    }
    if (t->defined[iid]) {
        fail(r, "iid defined twice in one generation", iid);
        return 0;
    }
    t->defined[iid] = 1;
    return 1;
}

static uint64_t field_u64(tm_bytes msg, uint32_t num) {
    tm_pb_reader pr = tm_pb_reader_of(msg);
    tm_pb_field f;
    uint64_t v = 0;
    while (tm_pb_next(&pr, &f) == TM_PB_OK)
        if (f.num == num && f.wire == TM_PB_VARINT) v = f.val;
    return v;
}

/* The InternedData of a heap packet: function names, mapping paths and build
 * ids are strings; mappings, frames and callstacks. */
static void read_tables(reader *r, tm_bytes interned) {
    tm_pb_reader pr = tm_pb_reader_of(interned);
    tm_pb_field f;
    while (tm_pb_next(&pr, &f) == TM_PB_OK) {
        if (f.wire != TM_PB_LEN) continue;
        uint64_t iid = field_u64(f.bytes, TM_PF_INTERNED_IID);
        if (f.num == TM_PF_INTERNED_FUNCTION_NAMES || f.num == TM_PF_INTERNED_MAPPING_PATHS ||
            f.num == TM_PF_INTERNED_BUILD_IDS) {
            r->v->strings_defined++;
            if (!define(r, iid)) continue;
            tm_pb_reader sr = tm_pb_reader_of(f.bytes);
            tm_pb_field s;
            while (tm_pb_next(&sr, &s) == TM_PB_OK)
                if (s.num == TM_PF_INTERNED_STRING_STR && s.wire == TM_PB_LEN) {
                    char *copy = grow(NULL, s.bytes.len + 1);
                    memcpy(copy, s.bytes.data, s.bytes.len);
                    copy[s.bytes.len] = 0;
                    r->t.str[iid] = copy;
                }
        } else if (f.num == TM_PF_INTERNED_FRAMES) {
            r->v->frames_defined++;
            if (!define(r, iid)) continue;
            r->t.name[iid] = field_u64(f.bytes, TM_PF_FRAME_FUNCTION_NAME_ID);
        } else if (f.num == TM_PF_INTERNED_MAPPINGS) {
            r->v->mappings_defined++;
            define(r, iid);
        } else if (f.num == TM_PF_INTERNED_CALLSTACKS) {
            r->v->callstacks_defined++;
            if (!define(r, iid)) continue;
            tm_pb_reader cr = tm_pb_reader_of(f.bytes);
            tm_pb_field c;
            while (tm_pb_next(&cr, &c) == TM_PB_OK) {
                if (c.num != TM_PF_CALLSTACK_FRAME_IDS) continue;
                if (c.wire != TM_PB_VARINT) {
                    fail(r, "callstack frame_ids not unpacked", iid);
                    continue;
                }
                r->t.frames[iid] = grow(r->t.frames[iid], (r->t.n_frames[iid] + 1) * sizeof(uint64_t));
                r->t.frames[iid][r->t.n_frames[iid]++] = c.val;
            }
        }
    }
}

/* The folded stack of callstack iid, or NULL (rule broken). */
static char *folded(reader *r, uint64_t cs) {
    table *t = &r->t;
    if (cs >= t->cap || !t->defined[cs] || !t->frames[cs]) {
        fail(r, "HeapSample callstack_id undefined", cs);
        return NULL;
    }
    size_t len = 0, cap = 64;
    char *out = grow(NULL, cap);
    out[0] = 0;
    for (uint32_t i = 0; i < t->n_frames[cs]; i++) {
        uint64_t fr = t->frames[cs][i];
        if (fr >= t->cap || !t->defined[fr]) {
            fail(r, "callstack frame undefined", fr);
            free(out);
            return NULL;
        }
        uint64_t s = t->name[fr];
        if (s && (s >= t->cap || !t->str[s])) {
            fail(r, "frame function_name_id undefined", s);
            free(out);
            return NULL;
        }
        const char *name = s ? t->str[s] : "?";
        size_t n = strlen(name);
        if (len + n + 2 > cap) {
            while (len + n + 2 > cap) cap *= 2;
            out = grow(out, cap);
        }
        if (i) out[len++] = ';';
        memcpy(out + len, name, n + 1);
        len += n;
    }
    return out;
}

static void read_dump(reader *r, tm_bytes d) {
    heap_view *v = r->v;
    tm_pb_reader pr = tm_pb_reader_of(d);
    tm_pb_field f;
    while (tm_pb_next(&pr, &f) == TM_PB_OK) {
        switch (f.num) {
        case TM_PF_HEAP_DUMP_PID: v->pid = f.val; break;
        case TM_PF_HEAP_DUMP_FROM_STARTUP: v->from_startup = (int)f.val; break;
        case TM_PF_HEAP_DUMP_SAMPLING_INTERVAL_BYTES: v->interval = f.val; break;
        case TM_PF_HEAP_DUMP_HEAP_NAME:
            if (f.bytes.len != 11 || memcmp(f.bytes.data, "libc.malloc", 11) != 0) fail(r, "heap_name", f.bytes.len);
            break;
        case TM_PF_HEAP_DUMP_STATS:
            v->unwind_errors = field_u64(f.bytes, TM_PF_HEAP_STATS_UNWINDING_ERRORS);
            v->heap_samples = field_u64(f.bytes, TM_PF_HEAP_STATS_HEAP_SAMPLES);
            break;
        case TM_PF_HEAP_DUMP_SAMPLES: {
            char *stack = folded(r, field_u64(f.bytes, TM_PF_HEAP_SAMPLE_CALLSTACK_ID));
            if (!stack) break;
            if (r->n_dump == r->cap_dump) {
                r->cap_dump = r->cap_dump ? r->cap_dump * 2 : 64;
                r->dump = grow(r->dump, r->cap_dump * sizeof *r->dump);
            }
            hv_site *s = &r->dump[r->n_dump++];
            s->stack = stack;
            s->alloc = field_u64(f.bytes, TM_PF_HEAP_SAMPLE_SELF_ALLOCATED);
            s->freed = field_u64(f.bytes, TM_PF_HEAP_SAMPLE_SELF_FREED);
            s->alloc_count = field_u64(f.bytes, TM_PF_HEAP_SAMPLE_ALLOC_COUNT);
            s->free_count = field_u64(f.bytes, TM_PF_HEAP_SAMPLE_FREE_COUNT);
            if (s->freed > s->alloc || s->free_count > s->alloc_count) fail(r, "more freed than allocated", s->freed);
            break;
        }
        default: break;
        }
    }
}

static void drop_sites(hv_site *s, size_t n) {
    for (size_t i = 0; i < n; i++) free(s[i].stack);
    free(s);
}

static void read_profile_packet(reader *r, tm_bytes pp, tm_bytes interned, uint64_t flags) {
    heap_view *v = r->v;
    v->packets++;
    if (!r->seen_heap && !(flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED)) fail(r, "first heap packet not CLEARED", 0);
    if (flags & TM_PF_SEQ_INCREMENTAL_STATE_CLEARED) {
        table_clear(&r->t);
        v->generations++;
    }
    uint64_t index = field_u64(pp, TM_PF_PROFILE_INDEX);
    if (r->seen_heap && index != r->next_index) fail(r, "ProfilePacket index not consecutive", index);
    r->next_index = index + 1;
    r->seen_heap = 1;
    read_tables(r, interned);
    if (!r->in_dump) r->n_dump = 0; /* the sites of the previous dump were handed over */
    r->in_dump = 1;
    tm_pb_reader pr = tm_pb_reader_of(pp);
    tm_pb_field f;
    while (tm_pb_next(&pr, &f) == TM_PB_OK)
        if (f.num == TM_PF_PROFILE_PROCESS_DUMPS && f.wire == TM_PB_LEN) read_dump(r, f.bytes);
    if (field_u64(pp, TM_PF_PROFILE_CONTINUED)) {
        v->continued_packets++;
        return;
    }
    drop_sites(v->sites, v->n_sites); /* a complete dump replaces the last one */
    v->sites = r->dump, v->n_sites = r->n_dump;
    r->dump = NULL, r->n_dump = r->cap_dump = 0;
    r->in_dump = 0;
    v->dumps++;
}

static void read_process_stats(reader *r, tm_bytes ps) {
    heap_view *v = r->v;
    tm_pb_reader pr = tm_pb_reader_of(ps);
    tm_pb_field f;
    while (tm_pb_next(&pr, &f) == TM_PB_OK) {
        if (f.num != TM_PF_PROCESS_STATS_PROCESSES || f.wire != TM_PB_LEN) continue;
        v->mem_snapshots++;
        uint64_t rss = field_u64(f.bytes, TM_PF_PROC_STATS_VM_RSS_KB);
        uint64_t hwm = field_u64(f.bytes, TM_PF_PROC_STATS_VM_HWM_KB);
        if (rss > v->max_rss_kb) v->max_rss_kb = rss;
        if (hwm > v->max_hwm_kb) v->max_hwm_kb = hwm;
        v->last_anon_kb = field_u64(f.bytes, TM_PF_PROC_STATS_RSS_ANON_KB);
    }
}

int hv_read(const void *trace, size_t len, heap_view *out) {
    memset(out, 0, sizeof *out);
    reader r = {.v = out};
    tm_pb_reader tr = tm_pb_reader_of((tm_bytes){trace, len});
    tm_pb_field pkt;
    int rc;
    while ((rc = tm_pb_next(&tr, &pkt)) == TM_PB_OK) {
        if (pkt.num != 1 || pkt.wire != TM_PB_LEN) continue;
        uint64_t flags = 0;
        tm_bytes pp = {NULL, 0}, ps = {NULL, 0}, interned = {NULL, 0};
        tm_pb_reader fr = tm_pb_reader_of(pkt.bytes);
        tm_pb_field f;
        while (tm_pb_next(&fr, &f) == TM_PB_OK) {
            if (f.num == TM_PF_PACKET_SEQUENCE_FLAGS) flags = f.val;
            else if (f.num == TM_PF_PACKET_PROFILE_PACKET) pp = f.bytes;
            else if (f.num == TM_PF_PACKET_PROCESS_STATS) ps = f.bytes;
            else if (f.num == TM_PF_PACKET_INTERNED_DATA) interned = f.bytes;
        }
        if (pp.data) read_profile_packet(&r, pp, interned, flags);
        if (ps.data) read_process_stats(&r, ps);
    }
    if (rc == TM_PB_ERROR) fail(&r, "the trace does not decode", 0);
    if (r.in_dump) fail(&r, "the last dump never ends (continued)", 0);
    drop_sites(r.dump, r.n_dump);
    table_clear(&r.t);
    return out->why[0] ? -1 : 0;
}

void hv_free(heap_view *v) {
    drop_sites(v->sites, v->n_sites);
    memset(v, 0, sizeof *v);
}

int hv_stack_has(const char *stack, const char *name) {
    size_t n = strlen(name);
    for (const char *p = stack; p; p = strchr(p, ';') ? strchr(p, ';') + 1 : NULL)
        if (strncmp(p, name, n) == 0 && (p[n] == 0 || p[n] == ';' || p[n] == '(')) return 1;
    return 0;
}

hv_totals hv_sum(const heap_view *v, const char *name) {
    hv_totals t = {0};
    for (size_t i = 0; i < v->n_sites; i++) {
        const hv_site *s = &v->sites[i];
        if (!hv_stack_has(s->stack, name)) continue;
        t.alloc += s->alloc, t.freed += s->freed, t.alloc_count += s->alloc_count, t.free_count += s->free_count;
        t.sites++;
    }
    return t;
}
