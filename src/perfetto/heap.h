/*
 * heap.h — heapprofd's native heap profiles (ProfilePacket, TracePacket
 * 37), read once for every consumer with Trace Processor's rules:
 *  - a ProfilePacket's own strings, mappings, frames and callstacks belong
 *    to its sequence until the dump ends (the first packet without
 *    `continued`); a callstack id not found there names InternedData;
 *  - a dump's samples wait until it ends too, so that a dump split over
 *    several packets is committed whole; a trace that ends inside one
 *    counts it as non-finalized;
 *  - a dump covers [start_timestamp, timestamp] (MONOTONIC_COARSE, through
 *    the reader's clock tracker; without a start, the point `timestamp`),
 *    reported once per (process, end, heap);
 *  - HeapSample values are totals since profiling started: each dump
 *    becomes the change since the previous one per (process, callsite), an
 *    allocation row (count, size >= 0) and a free row (<= 0), each only
 *    when not zero; when a callstack id starts naming another callsite the
 *    totals it had are carried over (Trace Processor's correction); a
 *    change that shrinks a total is counted as malformed and dropped;
 *  - dump-at-max samples (self_max) are allocations only, with a count
 *    only from producers that also write orig_sampling_interval_bytes;
 *  - gaps in `index` are missing packets; the flags that mean lost data
 *    are counted per process.
 * Consumers map callstacks to their own callsites (a callback that reads
 * the tables through tm_pf_heap_lookup or InternedData through the reader)
 * and keep their own rows.
 *
 * StreamingAllocation and StreamingFree (heapprofd's streaming mode) carry
 * an address, sizes, a heap and a sequence number per entry but no
 * callstack: no callsite, so no row can come of them (Trace Processor does
 * not import them at all). tm_pf_heap_streamed counts what they hold.
 */
#ifndef TM_PERFETTO_HEAP_H
#define TM_PERFETTO_HEAP_H

#include "perfetto/reader.h"

/* One sequence's ProfilePacket tables, as InternedString, Mapping, Frame
 * and Callstack messages by iid; the first entry of an iid wins. */
typedef struct tm_pf_heap_tables {
    tm_bytes *ents; size_t n_ents, cap_ents;
    tm_u64map by_iid[4];   /* strings, mappings, frames, callstacks: iid -> entry */
    uint32_t serial;       /* unique per dump: consumers key their caches by it */
} tm_pf_heap_tables;

/* The entry (field, iid) of the tables, field named as in InternedData
 * (TM_PF_INTERNED_FUNCTION_NAMES, _MAPPING_PATHS and _BUILD_IDS all name
 * the strings); string 0 is the empty string. */
bool tm_pf_heap_lookup(const tm_pf_heap_tables *t, uint32_t field, uint64_t iid, tm_bytes *out);
bool tm_pf_heap_lookup_str(const tm_pf_heap_tables *t, uint32_t field, uint64_t iid, tm_str *out);

/* A callstack a dump's sample names. */
typedef struct tm_pf_heap_stack {
    const tm_pf_heap_tables *tables; /* NULL: InternedData, as generation gen sees it */
    uint32_t gen;
    uint64_t iid;
    int64_t pid;
    const uint8_t *at;               /* the ProfilePacket, for errors */
} tm_pf_heap_stack;

typedef struct tm_pf_heap_dump {
    int64_t pid;
    tm_str heap_name;                /* data NULL: the producer named none */
    int64_t ts, ts_end;              /* trace time */
    uint64_t sampling_interval;      /* bytes; 0: not given */
} tm_pf_heap_dump;

/* One heap_profile_allocation row. */
typedef struct tm_pf_heap_row {
    int64_t ts, pid;
    tm_str heap_name;                /* "unknown" when the producer named none */
    uint32_t heap;                   /* the heap's number: 0, 1, ... in order of first dump */
    uint32_t callsite;
    int64_t count, size;
} tm_pf_heap_row;

/* What the module counts, by process (pid) where Trace Processor indexes. */
typedef enum tm_pf_heap_stat {
    TM_HEAP_CLIENT_DISCONNECTED, TM_HEAP_BUFFER_CORRUPTED, TM_HEAP_BUFFER_OVERRAN, TM_HEAP_REJECTED_CONCURRENT,
    TM_HEAP_HIT_GUARDRAIL, TM_HEAP_UNWIND_TIME_US, TM_HEAP_UNWIND_SAMPLES, TM_HEAP_CLIENT_SPINLOCK_BLOCKED,
    TM_HEAP_MALFORMED_PACKET,
    TM_HEAP_STAT_ADDED_LAST = TM_HEAP_MALFORMED_PACKET, /* the ones above add; these set: */
    TM_HEAP_CLIENT_ERROR, TM_HEAP_SAMPLING_INTERVAL_ADJUSTED, TM_HEAP_LAST_PROFILE_TIMESTAMP,
    TM_HEAP_MISSING_PACKET,          /* not by process: pid 0, adds */
    TM_HEAP_NON_FINALIZED_PROFILE,   /* not by process: pid 0, adds */
    TM_HEAP_DUMP_LOSSY               /* once per dump (continued packets repeat it) that any of the
                                        flags above marks as lossy; Trace Processor has no such stat */
} tm_pf_heap_stat;

typedef struct tm_pf_heap_sink {
    void *ctx;
    /* The consumer's callsite of a sample's callstack; TM_ABSENT when it
     * cannot be resolved (the consumer counts why). */
    tm_status (*callsite)(void *ctx, const tm_pf_heap_stack *stack, uint32_t *out);
    /* Optional: each mapping, frame and callstack (field
     * TM_PF_INTERNED_MAPPINGS, _FRAMES, _CALLSTACKS) of a packet's tables,
     * in that order, when the packet is read (Trace Processor makes their
     * rows then, used or not). */
    tm_status (*entry)(void *ctx, const tm_pf_heap_stack *entry, uint32_t field);
    tm_status (*dump)(void *ctx, const tm_pf_heap_dump *dump);
    /* A sample's change: its allocation row and its free row (NULL: not
     * made, as rows of no change are not), at once, so that a consumer that
     * adds both to one entry looks it up once. */
    tm_status (*rows)(void *ctx, const tm_pf_heap_row *alloc, const tm_pf_heap_row *freed);
    tm_status (*stat)(void *ctx, tm_pf_heap_stat stat, int64_t pid, int64_t value);
} tm_pf_heap_sink;

typedef struct tm_pf_heap_seq tm_pf_heap_seq;

typedef struct tm_pf_heap {
    tm_mem *mem;
    tm_pf_heap_seq **seqs; size_t n_seqs, cap_seqs; /* by the reader's sequence index */
    tm_pf_heap_dump *dumps; size_t n_dumps, cap_dumps; tm_idxset dump_set;
    tm_str *heap_names; size_t n_heap_names, cap_heap_names; /* samples name heaps by index */
    uint32_t art_heap;               /* the index of ART's heap (allocations only); UINT32_MAX: none */
    uint32_t serial;
    uint64_t profile_packets;
} tm_pf_heap;

void tm_pf_heap_init(tm_pf_heap *h, tm_mem *mem);
void tm_pf_heap_release(tm_pf_heap *h);

/* One ProfilePacket: its payload (checked by the reader), read with the
 * state of generation gen of its sequence; ts is the packet's trace time.
 * The reader may have finished reading: consumers that apply packets in
 * timestamp order call it then. */
tm_status tm_pf_heap_packet(tm_pf_heap *h, tm_pf_reader *r, uint32_t gen, tm_bytes payload, int64_t ts,
                            const tm_pf_heap_sink *sink);
/* The end of the trace: dumps still waiting for their last packet. */
tm_status tm_pf_heap_finish(tm_pf_heap *h, const tm_pf_heap_sink *sink);

/* What streaming packets held: entries, and the bytes the allocations
 * stand for (sample_size; size where a packet has none; at most
 * INT64_MAX). */
typedef struct tm_pf_heap_streamed {
    uint64_t allocations, alloc_bytes, frees;
    uint64_t malformed; /* packets whose repeated fields disagree in length: not counted */
} tm_pf_heap_streamed;

/* Adds one StreamingAllocation or StreamingFree payload (data_field says
 * which; checked by the reader). An entry is an address: every other field
 * the packet has must have as many values. */
void tm_pf_heap_streamed_add(tm_pf_heap_streamed *s, uint32_t data_field, tm_bytes payload);

#endif
