/*
 * trace_builder.c — the in-memory Perfetto trace writer used by tests, the
 * demo and the benchmark generator (see trace_builder.h).
 */
#include "trace_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static void reserve(tb_buf *b, size_t n) {
    if (b->cap - b->len >= n) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->len < n) cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        fprintf(stderr, "trace_builder: out of memory\n");
        abort();
    }
    b->data = p;
    b->cap = cap;
}

void tb_free(tb_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

void tb_raw(tb_buf *b, const void *p, size_t n) {
    reserve(b, n);
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

static void put_varint(uint8_t *p, uint64_t v) {
    while (v >= 0x80) *p++ = (uint8_t)(v | 0x80), v >>= 7;
    *p = (uint8_t)v;
}

void tb_varint(tb_buf *b, uint64_t v) {
    reserve(b, 10);
    put_varint(b->data + b->len, v);
    b->len += varint_len(v);
}

void tb_tag(tb_buf *b, uint32_t field, uint32_t wire) { tb_varint(b, ((uint64_t)field << 3) | wire); }

void tb_uint(tb_buf *b, uint32_t field, uint64_t v) {
    tb_tag(b, field, 0);
    tb_varint(b, v);
}

void tb_fixed64(tb_buf *b, uint32_t field, uint64_t v) {
    tb_tag(b, field, 1);
    uint8_t x[8];
    for (int i = 0; i < 8; i++) x[i] = (uint8_t)(v >> (8 * i));
    tb_raw(b, x, 8);
}

void tb_fixed32(tb_buf *b, uint32_t field, uint32_t v) {
    tb_tag(b, field, 5);
    uint8_t x[4];
    for (int i = 0; i < 4; i++) x[i] = (uint8_t)(v >> (8 * i));
    tb_raw(b, x, 4);
}

void tb_bytes(tb_buf *b, uint32_t field, const void *p, size_t n) {
    tb_tag(b, field, 2);
    tb_varint(b, n);
    tb_raw(b, p, n);
}

void tb_str(tb_buf *b, uint32_t field, const char *s) { tb_bytes(b, field, s, strlen(s)); }

void tb_packed(tb_buf *b, uint32_t field, const uint64_t *v, size_t n) {
    size_t len = 0;
    for (size_t i = 0; i < n; i++) len += varint_len(v[i]);
    tb_tag(b, field, 2);
    tb_varint(b, len);
    for (size_t i = 0; i < n; i++) tb_varint(b, v[i]);
}

void tb_repeated(tb_buf *b, uint32_t field, const uint64_t *v, size_t n) {
    for (size_t i = 0; i < n; i++) tb_uint(b, field, v[i]);
}

size_t tb_open(tb_buf *b, uint32_t field) {
    tb_tag(b, field, 2);
    return b->len;
}

void tb_close(tb_buf *b, size_t mark) {
    size_t body = b->len - mark, n = varint_len(body);
    reserve(b, n);
    memmove(b->data + mark + n, b->data + mark, body);
    put_varint(b->data + mark, body);
    b->len += n;
}

void tb_compressed_packet(tb_buf *trace, const tb_buf *inner) {
    uLongf cap = compressBound((uLong)inner->len);
    uint8_t *z = malloc(cap);
    if (!z || compress2(z, &cap, inner->data, (uLong)inner->len, 6) != Z_OK) {
        fprintf(stderr, "trace_builder: compression failed\n");
        abort();
    }
    size_t p = tb_open(trace, TM_PF_TRACE_PACKET);
    tb_bytes(trace, TM_PF_PACKET_COMPRESSED_PACKETS, z, cap);
    tb_close(trace, p);
    free(z);
}

void tb_interned_string(tb_buf *b, uint32_t field, uint64_t iid, const void *s, size_t n) {
    size_t m = tb_open(b, field);
    tb_uint(b, TM_PF_INTERNED_IID, iid);
    tb_bytes(b, TM_PF_INTERNED_STRING_STR, s, n);
    tb_close(b, m);
}

void tb_frame(tb_buf *b, uint64_t iid, uint64_t fn_iid, uint64_t mapping_iid, uint64_t rel_pc) {
    size_t m = tb_open(b, TM_PF_INTERNED_FRAMES);
    tb_uint(b, TM_PF_INTERNED_IID, iid);
    if (fn_iid) tb_uint(b, TM_PF_FRAME_FUNCTION_NAME_ID, fn_iid);
    if (mapping_iid) tb_uint(b, TM_PF_FRAME_MAPPING_ID, mapping_iid);
    tb_uint(b, TM_PF_FRAME_REL_PC, rel_pc);
    tb_close(b, m);
}

void tb_callstack(tb_buf *b, uint64_t iid, const uint64_t *frames, size_t n, int packed) {
    size_t m = tb_open(b, TM_PF_INTERNED_CALLSTACKS);
    tb_uint(b, TM_PF_INTERNED_IID, iid);
    if (packed) tb_packed(b, TM_PF_CALLSTACK_FRAME_IDS, frames, n);
    else
        for (size_t i = 0; i < n; i++) tb_uint(b, TM_PF_CALLSTACK_FRAME_IDS, frames[i]);
    tb_close(b, m);
}

void tb_mapping(tb_buf *b, uint64_t iid, uint64_t build_iid, uint64_t start, uint64_t end,
                const uint64_t *path_iids, size_t n_paths) {
    size_t m = tb_open(b, TM_PF_INTERNED_MAPPINGS);
    tb_uint(b, TM_PF_INTERNED_IID, iid);
    if (build_iid) tb_uint(b, TM_PF_MAPPING_BUILD_ID, build_iid);
    tb_uint(b, TM_PF_MAPPING_START, start);
    tb_uint(b, TM_PF_MAPPING_END, end);
    for (size_t i = 0; i < n_paths; i++) tb_uint(b, TM_PF_MAPPING_PATH_STRING_IDS, path_iids[i]);
    tb_close(b, m);
}

void tb_standard_clocks(tb_buf *t, uint32_t seq) {
    static const uint32_t ids[] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_REALTIME};
    static const uint64_t vals[] = {TB_BOOT0, TB_UNIX0};
    tb_clock_snapshot(t, seq, ids, vals, 2);
}

void tb_clock_snapshot(tb_buf *t, uint32_t seq, const uint32_t *ids, const uint64_t *values, size_t n) {
    tb_clock_snapshot_primary(t, seq, ids, values, n, 0);
}

void tb_perf_sample(tb_buf *t, uint32_t seq, uint64_t ts, uint32_t pid, uint32_t tid, uint64_t cs_iid,
                    uint32_t flags) {
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    tb_uint(t, TM_PF_PACKET_TIMESTAMP, ts);
    tb_uint(t, TM_PF_PACKET_SEQUENCE_ID, seq);
    if (flags) tb_uint(t, TM_PF_PACKET_SEQUENCE_FLAGS, flags);
    size_t s = tb_open(t, TM_PF_PACKET_PERF_SAMPLE);
    tb_uint(t, TM_PF_PERF_SAMPLE_PID, pid);
    tb_uint(t, TM_PF_PERF_SAMPLE_TID, tid);
    tb_uint(t, TM_PF_PERF_SAMPLE_CALLSTACK_IID, cs_iid);
    tb_close(t, s);
    tb_close(t, p);
}

size_t tb_packet_open(tb_buf *t, uint32_t seq, uint64_t ts, uint32_t flags) {
    size_t p = tb_open(t, TM_PF_TRACE_PACKET);
    if (ts != TB_NO_TS) tb_uint(t, TM_PF_PACKET_TIMESTAMP, ts);
    if (seq) tb_uint(t, TM_PF_PACKET_SEQUENCE_ID, seq);
    if (flags) tb_uint(t, TM_PF_PACKET_SEQUENCE_FLAGS, flags);
    return p;
}

void tb_clock_snapshot_primary(tb_buf *t, uint32_t seq, const uint32_t *ids, const uint64_t *values, size_t n,
                               uint32_t primary) {
    size_t p = tb_packet_open(t, seq, TB_NO_TS, 0);
    size_t cs = tb_open(t, TM_PF_PACKET_CLOCK_SNAPSHOT);
    for (size_t i = 0; i < n; i++) {
        size_t c = tb_open(t, TM_PF_CLOCK_SNAPSHOT_CLOCKS);
        tb_uint(t, TM_PF_CLOCK_ID, ids[i]);
        tb_uint(t, TM_PF_CLOCK_TIMESTAMP, values[i]);
        tb_close(t, c);
    }
    if (primary) tb_uint(t, TM_PF_CLOCK_SNAPSHOT_PRIMARY_TRACE_CLOCK, primary);
    tb_close(t, cs);
    tb_close(t, p);
}

void tb_pt_thread(tb_buf *t, uint64_t tid, uint64_t tgid, const char *name) {
    size_t th = tb_open(t, TM_PF_PROCESS_TREE_THREADS);
    tb_uint(t, TM_PF_THREAD_TID, tid);
    tb_str(t, TM_PF_THREAD_NAME, name);
    tb_uint(t, TM_PF_THREAD_TGID, tgid);
    tb_close(t, th);
}

static void stack_sample_body(tb_buf *t, const tb_stack_sample *s) {
    size_t ss = tb_open(t, TM_PF_PACKET_STACK_SAMPLE);
    if (s->task) {
        size_t tc = tb_open(t, TM_PF_STACK_SAMPLE_TASK_CONTEXT);
        if (s->pid != TB_SS_NONE) tb_uint(t, TM_PF_TASK_CONTEXT_PID, s->pid);
        if (s->tid != TB_SS_NONE) tb_uint(t, TM_PF_TASK_CONTEXT_TID, s->tid);
        if (s->async_id) tb_uint(t, TM_PF_TASK_CONTEXT_ASYNC_ID, s->async_id);
        tb_close(t, tc);
    }
    if (s->task_iid) tb_uint(t, TM_PF_STACK_SAMPLE_TASK_CONTEXT_IID, s->task_iid);
    if (s->cpu > 0) {
        size_t ec = tb_open(t, TM_PF_STACK_SAMPLE_EXECUTION_CONTEXT);
        tb_uint(t, TM_PF_EXECUTION_CONTEXT_CPU, (uint64_t)s->cpu);
        if (s->mode) tb_uint(t, TM_PF_EXECUTION_CONTEXT_MODE, s->mode);
        tb_close(t, ec);
    }
    if (s->exec_iid) tb_uint(t, TM_PF_STACK_SAMPLE_EXECUTION_CONTEXT_IID, s->exec_iid);
    if (s->inline_cs) {
        size_t cs = tb_open(t, TM_PF_STACK_SAMPLE_CALLSTACK);
        for (size_t i = 0; i < s->n_frames; i++) {
            size_t f = tb_open(t, TM_PF_INLINE_CALLSTACK_FRAMES);
            if (s->frames[i]) tb_str(t, TM_PF_INLINE_FRAME_FUNCTION_NAME, s->frames[i]);
            if (s->source) {
                tb_str(t, TM_PF_INLINE_FRAME_SOURCE_FILE, s->source);
                tb_uint(t, TM_PF_INLINE_FRAME_LINE_NUMBER, i + 1);
            }
            tb_close(t, f);
        }
        tb_close(t, cs);
    }
    if (s->cs_iid) tb_uint(t, TM_PF_STACK_SAMPLE_CALLSTACK_IID, s->cs_iid);
    if (s->unwind_error) tb_str(t, TM_PF_STACK_SAMPLE_UNWIND_ERROR, s->unwind_error);
    if (s->weight) tb_uint(t, TM_PF_STACK_SAMPLE_PRIMARY_WEIGHT, s->weight);
    if (s->n_followers) tb_packed(t, TM_PF_STACK_SAMPLE_FOLLOWER_WEIGHTS, s->followers, s->n_followers);
    tb_close(t, ss);
}

void tb_stack_sample_packet(tb_buf *t, const tb_stack_sample *s) {
    size_t p = tb_packet_open(t, s->seq, s->ts, s->flags);
    if (s->clock_id) tb_uint(t, TM_PF_PACKET_TIMESTAMP_CLOCK_ID, s->clock_id);
    stack_sample_body(t, s);
    tb_close(t, p);
}

void tb_task_context(tb_buf *b, uint64_t iid, uint32_t pid, uint32_t tid) {
    size_t m = tb_open(b, TM_PF_INTERNED_TASK_CONTEXTS);
    tb_uint(b, TM_PF_INTERNED_IID, iid);
    tb_uint(b, TM_PF_TASK_CONTEXT_PID, pid);
    tb_uint(b, TM_PF_TASK_CONTEXT_TID, tid);
    tb_close(b, m);
}

void tb_heap_sample_msg(tb_buf *b, const tb_heap_sample *s, size_t pad) {
    size_t h = tb_open(b, TM_PF_HEAP_DUMP_SAMPLES);
    static const char filler[300];
    if (pad) tb_bytes(b, 20, filler, pad < sizeof filler ? pad : sizeof filler);
    tb_uint(b, TM_PF_HEAP_SAMPLE_CALLSTACK_ID, s->callstack);
    tb_uint(b, TM_PF_HEAP_SAMPLE_SELF_ALLOCATED, s->allocated);
    tb_uint(b, TM_PF_HEAP_SAMPLE_SELF_FREED, s->freed);
    tb_uint(b, TM_PF_HEAP_SAMPLE_ALLOC_COUNT, s->alloc_count);
    tb_uint(b, TM_PF_HEAP_SAMPLE_FREE_COUNT, s->free_count);
    tb_close(b, h);
}

void tb_heap_dump(tb_buf *b, uint32_t pid, uint64_t ts, const char *heap_name, uint64_t interval,
                  const tb_heap_sample *s, size_t n) {
    size_t d = tb_open(b, TM_PF_PROFILE_PROCESS_DUMPS);
    tb_uint(b, TM_PF_HEAP_DUMP_PID, pid);
    tb_uint(b, TM_PF_HEAP_DUMP_TIMESTAMP, ts);
    if (heap_name) tb_str(b, TM_PF_HEAP_DUMP_HEAP_NAME, heap_name);
    if (interval) tb_uint(b, TM_PF_HEAP_DUMP_SAMPLING_INTERVAL_BYTES, interval);
    for (size_t i = 0; i < n; i++) tb_heap_sample_msg(b, &s[i], 0);
    tb_close(b, d);
}

void tb_heap_clocks(tb_buf *t, uint32_t seq) {
    const uint32_t ids[2] = {TM_PF_BUILTIN_CLOCK_BOOTTIME, TM_PF_BUILTIN_CLOCK_MONOTONIC_COARSE};
    const uint64_t values[2] = {0, 0};
    tb_clock_snapshot(t, seq, ids, values, 2);
}
