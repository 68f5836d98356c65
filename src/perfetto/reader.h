/*
 * reader.h — the one reader of the Perfetto wire format. Every consumer
 * (the profile model in profile/, the Trace Processor model in tp/) pulls
 * packets from it instead of parsing traces itself.
 *
 * It owns, with one rule each:
 *  - framing: Trace.packet records, max_packet_bytes, empty packets;
 *  - compressed_packets: inflated (within max_inflated_bytes) and their
 *    packets yielded in place; one inside another is not inflated but
 *    counted (nested_compressed) and skipped;
 *  - error offsets: the byte in the input, or for a packet that came out of
 *    a compressed_packets payload, the offset of that wrapper packet;
 *  - the TracePacket header: timestamp, clock, sequence id and flags, loss,
 *    first_packet_on_sequence, defaults, interned data, and the member of
 *    `oneof data` (the last one on the wire; the others are counted);
 *  - sequences, in Trace Processor's order: clear or loss, then defaults,
 *    then interned data; validity, epochs (one per clear) and generations
 *    (one per clear, loss or defaults);
 *  - interning: entries keyed by (sequence, epoch, field, iid), each
 *    visible from the generation that added it on; the first entry of an
 *    iid wins (Trace Processor), or, with TM_PF_RELAY, the last one (Sentry
 *    Relay's converter); every entry is checked against its schema and the
 *    limits (max_interned_entries per sequence, max_stack_depth,
 *    max_path_segments) when it is added, so lookups never fail. Each
 *    sequence keeps its current epoch's entries in one array, indexed by
 *    iid per field (the epoch before's apart, for comparison), or, when
 *    epochs are kept, per epoch: an epoch that ends (and at the end of the
 *    trace every current one) keeps where its entries' bytes are. A large
 *    one keeps its iid index, which gives the offset of each entry in the
 *    input (or its place among 12-byte tm_pf_kept when some came out of a
 *    compressed packet), until the consumer is done with it
 *    (tm_pf_release_epoch); the entries of small ones go to tm_pf_kept
 *    and one map by (epoch, field, iid).
 *    Without TM_PF_KEEP_EPOCHS a clear drops the old epoch's entries (for
 *    consumers that resolve packets as they come); with it they stay, for
 *    consumers that resolve them after reading (in timestamp order);
 *  - sample kinds: whether a generation's PerfSamples are off-CPU samples
 *    (TM_PF_OFF_CPU_TIMEBASE) and its CPU timebase's period in ns, read
 *    once from its perf_sample_defaults;
 *  - payloads: every payload a consumer reads is checked against its
 *    message's wire types (schema.c) before the packet is yielded;
 *  - clock readings: ClockSnapshots parsed once (sequence-scoped ids keyed
 *    by sequence, reserved ids and overflowing values counted, multipliers
 *    applied), and each packet's timestamp resolved to a clock domain and
 *    nanoseconds: its clock, else its generation's default, multiplier and
 *    incremental clocks applied, then converted to trace time through the
 *    one clock tracker (clock.c), as Trace Processor converts it when it
 *    reads the packet.
 * Runs of usual PerfSample packets (the common packet) may be read in one
 * call into plain records instead (tm_pf_next_run), exactly as tm_pf_next
 * reads them.
 * It never allocates per packet and never recurses. It knows nothing of
 * profiles or SQL: consumers keep their own caches, keyed by generation,
 * and their own rows.
 */
#ifndef TM_PERFETTO_READER_H
#define TM_PERFETTO_READER_H

#include "common/alloc.h" /* tm_mem, tm_arena, tm_idxset, tm_u64map */
#include "common/base.h"
#include "common/limits.h" /* TM_MAX_CLOCKS */
#include "perfetto/clock.h" /* tm_clocks */
#include "wire/pb.h"      /* tm_pb_reader */

enum {
    TM_PF_RELAY = 1,      /* Sentry Relay's reading: its schema subset, last entry wins, no loss handling */
    TM_PF_KEEP_EPOCHS = 2, /* keep the entries of every epoch: lookups from any generation, any time */
    TM_PF_STRICT = 4       /* a trace cut off inside a packet is an error, not the end of the trace */
};

/* The InternedData fields the reader interns, as small indexes. */
enum { TM_PF_N_INTERNED_KINDS = 11 };

typedef struct tm_pf_entry {
    const uint8_t *msg;
    uint32_t len;
    uint32_t epoch, gen;
    uint32_t hdr;  /* the bytes of its field's tag and length, before msg */
    uint32_t same_since; /* the first epoch from which its field and iid had these bytes in every epoch:
                            what a consumer resolved in one of those still holds, if what it refers
                            to stayed the same too (with TM_PF_KEEP_EPOCHS: not kept up) */
    uint32_t kind;       /* its field, as an index (see reader.c) */
    uint64_t iid;
} tm_pf_entry;

/* With TM_PF_KEEP_EPOCHS, an entry of an epoch that ended: its message
 * alone (the pointer in two halves: 12 bytes, where a tm_pf_entry takes
 * 40). Which generations see it follows from its place among its epoch's
 * entries (tm_pf_gen.kept_end). */
typedef struct tm_pf_kept {
    uint32_t lo, hi, len;
} tm_pf_kept;

/* An ended epoch with its own index, per kind: iid -> place in ents, or
 * when every entry is in the input (not in an inflated packet), with no
 * ents: iid -> the offset of its field's tag there, from which the entry
 * is read again (4 bytes an entry in all). */
typedef struct tm_pf_kept_epoch {
    tm_iidmap *index;      /* [TM_PF_N_INTERNED_KINDS]; NULL: none (small, or released) */
    tm_pf_kept *ents; size_t n_ents;
} tm_pf_kept_epoch;

/* One InternedData message of an epoch, and the entries it added. */
typedef struct tm_pf_blob {
    tm_bytes bytes;
    uint32_t first, count; /* in the epoch's entries */
} tm_pf_blob;

/* One sequence (trusted_packet_sequence_id). */
typedef struct tm_pf_seq {
    uint32_t id;           /* trusted_packet_sequence_id */
    uint32_t index;        /* in order of first appearance */
    uint32_t epoch;        /* incremental-state clears so far */
    uint32_t gen;          /* the generation its next packet sees */
    uint64_t n_interned;   /* entries added since the last clear */
    tm_pf_entry *ents; size_t n_ents, cap_ents;
    tm_iidmap *newest;     /* [TM_PF_N_INTERNED_KINDS]: iid -> its newest entry; NULL until the first */
    /* The epoch before this one (kept so entries can be compared with it:
     * same_since, and copied when they come again: replay), swapped in at
     * a clear. */
    tm_pf_entry *old_ents; size_t cap_old_ents;
    tm_iidmap *old_newest;
    /* The InternedData messages of this epoch and the one before, in order.
     * While this epoch's so far are the same bytes as the first ones of the
     * epoch before (n_replayed of them), their entries are copied, not read
     * again (a writer re-sending all it interned at each clear). */
    tm_pf_blob *blobs, *old_blobs; size_t n_blobs, cap_blobs, n_old_blobs, cap_old_blobs;
    size_t n_replayed;
    /* twin_of_epoch == epoch: this epoch began with a copy of the first
     * InternedData message of sequence twin's epoch twin_epoch (or with the
     * same bytes again, replayed). */
    uint32_t twin, twin_epoch, twin_of_epoch;
    /* copied_in == epoch: sequence copy's epoch copy_epoch is the latest
     * that began with a copy of this epoch's first InternedData message
     * (this sequence is its twin). */
    uint32_t copy, copy_epoch, copied_in;
    uint64_t first_hash;   /* first_blob_key of the first InternedData message of the epoch that read it */
    /* The class of this epoch's first InternedData message (and of the
     * epoch before's, kept for a replay): epochs of any sequences whose
     * first messages have one class began with the same bytes, compared
     * (replayed, or copied from a twin). 0: none yet. */
    uint32_t first_class, old_first_class;
    /* Did this epoch re-send everything the one before had, byte for byte?
     * Yes when n_same reaches n_before. last_unfull: the latest ended epoch
     * that did not. */
    uint64_t n_before, n_same;
    uint32_t last_unfull;
    /* TM_PF_KEEP_EPOCHS: ents and newest hold the current epoch only. At a
     * clear, an epoch that added many entries or one whose (epoch, kind,
     * iid) does not pack into 64 bits keeps them and its index in
     * kept[epoch]: a lookup in a busy epoch is one array load. Those of
     * other epochs go to kept_ents, in order, and into by_epoch: a trace of
     * many small epochs costs no index each. */
    tm_pf_kept_epoch *kept; size_t cap_kept;
    tm_pf_kept *kept_ents; size_t n_kept_ents, cap_kept_ents;
    tm_u64map by_epoch;    /* (epoch, kind, iid) -> place in kept_ents */
    bool valid;            /* incremental state is valid */
    bool seen;             /* a packet of it was read before */
} tm_pf_seq;

/* Off-CPU samples, as tracemill record --off-cpu writes them: PerfSamples
 * of a sequence whose perf_sample_defaults timebase is the context-switches
 * counter (SW_CONTEXT_SWITCHES) named TM_PF_OFF_CPU_TIMEBASE. Each is the
 * stack where a thread left the CPU, at that time; timebase_count is the
 * sequence's blocked time so far in ns (a running value, as Perfetto reads
 * timebase_count), so a sample's blocked time is its count minus the count
 * of the sequence's sample before. */
#define TM_PF_OFF_CPU_TIMEBASE "off-cpu"
/* Why the thread left the CPU: the leaf frame (function and mapping name)
 * of each such stack. Preempted: switched out while still runnable
 * (PERF_RECORD_MISC_SWITCH_OUT_PREEMPT); blocked: any other switch-out
 * (waiting in a system call, sleeping, on a lock or I/O). */
#define TM_PF_PREEMPTED_FRAME "[preempted]"
#define TM_PF_BLOCKED_FRAME "[blocked]"

/* A generation: the state a packet saw. TracePacketDefaults are read once,
 * when it starts. */
typedef struct tm_pf_gen {
    uint32_t seq;          /* sequence index */
    uint32_t epoch;
    uint32_t clock_id;     /* TracePacketDefaults.timestamp_clock_id; 0: none */
    tm_bytes perf_defaults;  /* perf_sample_defaults (NULL data: none) */
    tm_bytes stack_defaults; /* stack_sample_defaults (NULL data: none) */
    bool off_cpu;          /* its PerfSamples are off-CPU samples (TM_PF_OFF_CPU_TIMEBASE) */
    uint64_t period_ns;    /* the perf timebase's sampling period in ns, when it counts time (cpu-clock or
                              task-clock: its period, or 1e9 / its frequency); 0: unknown */
    /* TM_PF_KEEP_EPOCHS, once its epoch ended: it sees the first kept_end
     * entries of its epoch (those added before its sequence's next
     * generation began, at offset end_at: those in the input before it),
     * from kept_base on in kept_ents when they are there. */
    uint32_t kept_base, kept_end;
    uint64_t end_at;
} tm_pf_gen;

/* A clock domain: a builtin clock id, or (sequence id << 8 | id) for the
 * sequence-scoped ids 64..127. */
static inline uint64_t tm_pf_clock_key(uint32_t seq_id, uint32_t id) {
    return id >= 64 && id < 128 ? (uint64_t)seq_id << 8 | id : id;
}

typedef struct tm_pf_clock_reading {
    uint64_t clock; /* tm_pf_clock_key */
    int64_t ns;     /* value x unit_multiplier_ns */
} tm_pf_clock_reading;

/* One ClockSnapshot's usable readings, in order. */
typedef struct tm_pf_snapshot {
    uint32_t primary;  /* primary_trace_clock; 0: none */
    size_t n;
    uint64_t ignored;  /* reserved ids (>= 128), past TM_MAX_CLOCKS, or value x multiplier past int64 */
    tm_pf_clock_reading readings[TM_MAX_CLOCKS];
} tm_pf_snapshot;

/* What the reader knows of a clock domain from the snapshots. */
typedef struct tm_pf_clock {
    uint64_t mult;     /* unit_multiplier_ns, as first seen */
    int64_t last;      /* incremental clocks: the value so far */
    bool incremental;
} tm_pf_clock;

/* One packet as a consumer sees it, after its sequence was updated and its
 * interned data added. */
typedef struct tm_pf_packet {
    const uint8_t *start;   /* the TracePacket message */
    tm_bytes bytes;
    /* From here to data_field: zeroed before each packet is read (the rest
     * is set as the packet needs it: a sample packet pays for little). */
    uint64_t timestamp;
    uint32_t clock_id;      /* timestamp_clock_id; 0: none */
    uint32_t seq_id;        /* trusted_packet_sequence_id; 0: none */
    uint32_t flags;         /* sequence_flags (with incremental_state_cleared folded in) */
    uint32_t lost;          /* previous_packet_dropped */
    uint32_t machine_id;
    bool has_timestamp;
    bool first_on_sequence; /* first_packet_on_sequence */
    bool loss;              /* lost data before it on a sequence seen before (not its first packet) */
    bool cleared;           /* it cleared its sequence's incremental state */
    bool stale;             /* it needs incremental state its sequence does not have */
    bool interned_skipped;  /* its interned data came while the state was invalid, and was dropped */
    tm_bytes defaults, interned;
    uint32_t data_field;    /* the member of `oneof data`; 0: none */
    tm_bytes data;          /* its payload (length-delimited members) */
    const uint8_t *data_tag;/* its tag */
    tm_pf_seq *seq;         /* NULL without a sequence id */
    uint32_t gen;           /* the generation it sees (valid when seq is set) */
    const tm_pf_snapshot *snapshot; /* a ClockSnapshot's readings (valid until the next packet) */
    /* The timestamp, resolved: set for packets with a timestamp that are
     * neither stale nor consumed before conversion (snapshots, stats, config). */
    bool has_time;
    bool time_ok;           /* false: the value overflows int64 in nanoseconds */
    uint64_t time_clock;    /* tm_pf_clock_key; 0: the trace's default clock */
    int64_t time_ns;
    /* That time in trace time (with has_time): trace_ok false when no
     * snapshot path leads there (Trace Processor drops the packet); the
     * value wraps as Trace Processor's arithmetic does, trace_exact says it
     * did not (neither the value nor its conversion overflowed int64). */
    bool trace_ok, trace_exact;
    int64_t trace_ns;
    /* A PerfSample of varints under one-byte tags only (fields 1-15: the
     * common shape), read by the payload check in its one pass over it:
     * perf_read says so, and a consumer may take these fields instead of
     * reading the payload again (the last of a repeated field wins). */
    bool perf_read, perf_has_pid, perf_has_cs;
    uint32_t perf_pid, perf_tid;
    uint64_t perf_cs, perf_count;
} tm_pf_packet;

/* What the reader counted over the whole trace. */
typedef struct tm_pf_counts {
    uint64_t packets;            /* Trace.packet records, empty ones and inflated ones included */
    uint64_t compressed_packets; /* compressed_packets payloads inflated */
    uint64_t nested_compressed;  /* compressed_packets inside one: skipped */
    uint64_t oneof_ignored;      /* members of `oneof data` overridden by a later one */
    uint64_t clock_undeferrable; /* packets whose time could not be converted */
    bool truncated;              /* the last packet runs past the end (without TM_PF_STRICT) */
    uint64_t truncated_at;       /* the offset of that packet */
} tm_pf_counts;

/* Where the packets of one inflated compressed_packets payload live, so an
 * error about any of them names the wrapper packet (also after reading). */
typedef struct tm_pf_region {
    const uint8_t *data;
    size_t len;
    uint64_t wrapper_off;
} tm_pf_region;

typedef struct tm_pf_reader {
    /* configuration */
    tm_mem *mem;           /* the reader's tables */
    tm_arena *arena;       /* inflated payloads: they outlive the reader */
    const tm_limits *lim;
    tm_error *err;         /* the caller's, else own_err: never NULL */
    tm_error own_err;
    unsigned flags;        /* TM_PF_* */
    const uint8_t *base; size_t len;
    /* framing */
    tm_pb_reader outer, inner;
    bool in_inner;
    const uint8_t *packet_tag; /* the Trace.packet record being read: errors found later name it */
    tm_pf_region *regions; size_t n_regions, cap_regions;
    tm_pf_counts counts;
    /* sequences */
    tm_pf_seq *seqs; size_t n_seqs, cap_seqs;
    tm_u64map seq_by_id;
    uint32_t last_seq;     /* one-entry cache: packets come in runs per sequence */
    uint64_t usual_seq_id; /* last_seq's id while its state is valid, outside Relay's reading (its sample packets
                              may take the usual path); UINT64_MAX: none */
    tm_u64map first_blob;  /* hash of an epoch's first InternedData message -> the sequence it began */
    uint32_t n_classes;    /* classes of first InternedData messages given so far (tm_pf_seq.first_class) */
    tm_pf_gen *gens; size_t n_gens, cap_gens;
    /* clocks */
    tm_pf_clock *domains; size_t n_domains, cap_domains;
    tm_u64map domain_by_key;
    tm_pf_snapshot snapshot;
    tm_clocks clocks;      /* snapshots and conversion to trace time (not in Relay mode) */
    int64_t latest_ns;     /* the latest trace time so far: packets without a timestamp are at it */
    bool kept_all;         /* TM_PF_KEEP_EPOCHS: read to the end, the current epochs kept too (keep_epoch) */
} tm_pf_reader;

/* Starts reading buf[0, len). mem holds the reader's tables (freed by
 * tm_pf_reader_release); arena the inflated payloads, which consumers may
 * keep views into. */
void tm_pf_reader_init(tm_pf_reader *r, const uint8_t *buf, size_t len, tm_mem *mem, tm_arena *arena,
                       const tm_limits *lim, unsigned flags, tm_error *err);
void tm_pf_reader_release(tm_pf_reader *r);

enum { TM_PF_END = 0, TM_PF_PACKET = 1, TM_PF_ERROR = -1 };
/* The next packet: TM_PF_PACKET, TM_PF_END, or TM_PF_ERROR with err set. */
int tm_pf_next(tm_pf_reader *r, tm_pf_packet *pk);

/* One packet of a run of usual PerfSample packets (tm_pf_next_run): what
 * tm_pf_next gives of it, for a consumer that reads no more of it. */
typedef struct tm_pf_sample {
    const uint8_t *tag;     /* its Trace.packet record (r->packet_tag while it is read) */
    const uint8_t *start;   /* the TracePacket message */
    const uint8_t *data;    /* its PerfSample payload */
    int64_t trace_ns;       /* the time, as tm_pf_packet's: all of these have a timestamp */
    bool has_time, time_ok, trace_ok, trace_exact;
    bool exact;             /* all four: trace_ns is the time (the usual case, one test) */
    /* The PerfSample, as tm_pf_packet's perf_* fields (it is read: perf_read). */
    bool has_pid, has_cs;
    uint32_t pid, tid;
    uint64_t cs, count;
} tm_pf_sample;

/* A sample's time as tm_pf_next resolved pk's: what both paths give the
 * consumer. */
static inline void tm_pf_sample_time(tm_pf_sample *out, const tm_pf_packet *pk) {
    out->has_time = pk->has_time, out->time_ok = pk->time_ok, out->trace_ok = pk->trace_ok;
    out->trace_exact = pk->trace_exact, out->trace_ns = pk->trace_ns;
    out->exact = pk->has_time && pk->time_ok && pk->trace_ok && pk->trace_exact;
}

enum { TM_PF_RUN_MAX = 32 };

/* A run of usual PerfSample packets on one sequence, one generation. */
typedef struct tm_pf_sample_run {
    tm_pf_seq *seq;
    uint32_t gen;
    size_t n;
    tm_pf_sample samples[TM_PF_RUN_MAX];
} tm_pf_sample_run;

/* The next packets, while they are usual PerfSample packets: on one
 * sequence (the packet before's, or another seen before) whose state is
 * valid, of under 128 bytes, written as writers write them (a timestamp,
 * the sequence id and flags that do not clear it, then a PerfSample of its
 * cpu or none, pid, tid and callstack_iid, nothing else), outside Relay's
 * reading. It reads up to TM_PF_RUN_MAX of them as tm_pf_next would, in
 * run->samples (run->n), and stops before any other packet, which
 * tm_pf_next reads (run->n < TM_PF_RUN_MAX: the next one is one). Returns
 * TM_PF_PACKET, or TM_PF_ERROR with err set, after run->n packets a
 * consumer takes first. A consumer that fails at one of them names it in
 * later errors with tm_pf_failed_at. */
int tm_pf_next_run(tm_pf_reader *r, tm_pf_sample_run *run);
static inline void tm_pf_failed_at(tm_pf_reader *r, const tm_pf_sample *s) { r->packet_tag = s->tag; }

/* The interned entry (field, iid) as a packet of generation gen sees it;
 * NULL when there is none. Without TM_PF_KEEP_EPOCHS (with it, an ended
 * epoch keeps its entries' bytes alone: tm_pf_lookup). */
const tm_pf_entry *tm_pf_find(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid);
/* Its message; false when there is none. */
bool tm_pf_lookup(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid, tm_bytes *out);
/* Asks the cache for what tm_pf_lookup(r, gen, field, iid) will read, in
 * two steps a consumer issues some lookups apart: step 0 the index slot,
 * step 1 (once that slot is cached) the entry's bytes. Only for an ended
 * epoch indexed by offset (the lookups that miss); otherwise nothing. */
void tm_pf_prefetch(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid, int step);
/* TM_PF_KEEP_EPOCHS: the consumer looks nothing up in the generations of
 * sequence seq's (by index) epoch `epoch` again: an ended epoch with an
 * index of its own frees it and its entries (lookups there then find
 * nothing); any other is left as it is. */
void tm_pf_release_epoch(tm_pf_reader *r, uint32_t seq, uint32_t epoch);
/* The string of an interned InternedString (function_names, mapping_paths,
 * build_ids, source_paths); false when absent. */
bool tm_pf_lookup_str(const tm_pf_reader *r, uint32_t gen, uint32_t field, uint64_t iid, tm_str *out);
/* Does a packet of generation gen (its sequence's newest) see every entry
 * its sequence had at the end of epoch `epoch`, with the same bytes, as
 * every epoch since did? Then what a consumer resolved in that epoch still
 * holds. Always false with TM_PF_KEEP_EPOCHS. */
bool tm_pf_unchanged_since(const tm_pf_reader *r, uint32_t gen, uint32_t epoch);
/* Whether what sequence *twin resolved in its current epoch holds for
 * sequence s (by index): s's epoch began with a copy of the first
 * InternedData message of twin's epoch, and both epochs still hold that
 * one message alone, so both have the same entries byte for byte. Both:
 * twin may have resolved something while an entry it refers to was
 * missing (a mapping path stops at its first unresolvable segment, a
 * build id is left out), which a later message of s may add. */
bool tm_pf_twin_of(const tm_pf_reader *r, uint32_t s, uint32_t *twin);
/* The other way round: a sequence *copy that took s as its twin in its
 * current epoch, from s's current epoch, and both still hold that one
 * message alone, so whatever *copy resolved, it resolved from the entries
 * s has. */
bool tm_pf_copy_of(const tm_pf_reader *r, uint32_t s, uint32_t *copy);
/* The class of the tables a packet of generation gen of sequence s (by
 * index) sees, when gen is s's newest and s's epoch holds one InternedData
 * message alone: two such sequences (or epochs) of one class hold the same message
 * byte for byte, so every iid resolves alike in both, whatever either
 * lacks. 0: none (no message or more than one, an older generation, or
 * TM_PF_KEEP_EPOCHS or TM_PF_RELAY, which keep no messages). */
static inline uint32_t tm_pf_tables_class(const tm_pf_reader *r, uint32_t s, uint32_t gen) {
    const tm_pf_seq *q = &r->seqs[s];
    return q->gen == gen && q->n_blobs == 1 ? q->first_class : 0;
}

/* ns of clock (tm_pf_clock_key) in trace time, for times a consumer keeps
 * itself (the legacy track-event time base); record: count a failure.
 * *ok: converted (*wrapped: past int64, wrapped). */
tm_status tm_pf_to_trace_time(tm_pf_reader *r, uint64_t clock, int64_t ns, bool record, int64_t *out, bool *ok,
                              bool *wrapped);

static inline const tm_pf_gen *tm_pf_gen_of(const tm_pf_reader *r, uint32_t gen) { return &r->gens[gen]; }

/* The offset errors about `at` name: at's offset in the input, or the
 * compressed packet's that holds it. */
uint64_t tm_pf_offset(const tm_pf_reader *r, const uint8_t *at);
/* Reports an error about `at` (NULL: no offset) by the reader's rule. */
tm_status tm_pf_fail(const tm_pf_reader *r, tm_status code, const uint8_t *at, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;
/* A wire-reader error (r->err_code, r->p) in message `where`. */
tm_status tm_pf_pb_fail(const tm_pf_reader *r, const tm_pb_reader *pb, const char *where);
/* A field whose wire type its declared type does not allow. */
tm_status tm_pf_wire_fail(const tm_pf_reader *r, const tm_pb_field *f, const char *msg_name);

#define TM_PF_WANT(r, f, w, name)                                          \
    do {                                                                   \
        if ((f).wire != (w)) return tm_pf_wire_fail((r), &(f), (name));    \
    } while (0)

#endif
