/*
 * schema.c — the wire-type schema of the TracePacket payloads consumers
 * read (schema.h). The reader checks a payload against it before any
 * consumer sees the packet, so whether a trace is accepted, and the byte an
 * error names, never depend on which consumer reads it.
 *
 * A schema lists, per field number (< 64), whether the field must be a
 * varint, length-delimited, a repeated varint (packed or not), or a nested
 * message with a schema of its own. Fields it does not list are skipped, as
 * protobuf skips unknown fields. Checking recurses only along the schemas'
 * own nesting (three levels at most), never as deep as the input asks.
 */
#include "perfetto/fields.h"
#include "perfetto/schema.h"

#if defined(__SSE2__)
#include <emmintrin.h> /* varint_masks: 16 bytes a step */
#endif

typedef struct schema schema;
typedef struct child {
    uint32_t field;
    const schema *of;
} child;
typedef struct list_name {
    uint32_t field;
    const char *name; /* "Message.field", for errors */
} list_name;
struct schema {
    const char *name;
    uint64_t varints, lens, repeated;
    const child *children;         /* terminated by a zero field */
    const list_name *lists;        /* names of repeated fields, terminated by a zero field */
};

#define F(n) (1ull << (n))

static const schema producer_event = {"PerfSample.ProducerEvent", F(1), 0, 0, NULL, NULL};
static const child perf_children[] = {{TM_PF_PERF_SAMPLE_PRODUCER_EVENT, &producer_event}, {0, NULL}};
static const list_name perf_lists[] = {{TM_PF_PERF_SAMPLE_FOLLOWER_COUNTS, "PerfSample.follower_counts"}, {0, NULL}};
static const schema perf_sample = {
    "PerfSample", F(1) | F(2) | F(3) | F(4) | F(5) | F(6) | F(16) | F(17) | F(18), 0, F(7), perf_children, perf_lists};
/* Relay's converter declares only cpu, pid, tid and callstack_iid. */
static const schema perf_sample_relay = {"PerfSample", F(1) | F(2) | F(3) | F(4), 0, 0, NULL, NULL};

static const list_name streaming_lists[] = {
    {TM_PF_STREAMING_CALLSTACK_IID, "StreamingProfilePacket.callstack_iid"},
    {TM_PF_STREAMING_TIMESTAMP_DELTA_US, "StreamingProfilePacket.timestamp_delta_us"},
    {0, NULL}};
static const schema streaming = {"StreamingProfilePacket", F(3), 0, F(1) | F(2), NULL, streaming_lists};

static const schema clock = {"ClockSnapshot.Clock", F(1) | F(2) | F(3) | F(4), 0, 0, NULL, NULL};
static const child snapshot_children[] = {{TM_PF_CLOCK_SNAPSHOT_CLOCKS, &clock}, {0, NULL}};
static const schema clock_snapshot = {"ClockSnapshot", F(2), 0, 0, snapshot_children, NULL};
/* Relay's Clock declares only clock_id and timestamp. */
static const schema clock_relay = {"ClockSnapshot.Clock", F(1) | F(2), 0, 0, NULL, NULL};
static const child snapshot_relay_children[] = {{TM_PF_CLOCK_SNAPSHOT_CLOCKS, &clock_relay}, {0, NULL}};
static const schema clock_snapshot_relay = {"ClockSnapshot", F(2), 0, 0, snapshot_relay_children, NULL};

static const schema task_context = {"TaskContext", F(1) | F(2) | F(3) | F(4), 0, 0, NULL, NULL};
static const schema execution_context = {"ExecutionContext", F(2) | F(3), 0, 0, NULL, NULL};
static const schema inline_frame = {"StackSample.Frame", F(3), F(1) | F(2), 0, NULL, NULL};
static const child inline_callstack_children[] = {{TM_PF_INLINE_CALLSTACK_FRAMES, &inline_frame}, {0, NULL}};
static const schema inline_callstack = {"StackSample.Callstack", 0, 0, 0, inline_callstack_children, NULL};
static const child stack_sample_children[] = {{TM_PF_STACK_SAMPLE_TASK_CONTEXT, &task_context},
                                              {TM_PF_STACK_SAMPLE_EXECUTION_CONTEXT, &execution_context},
                                              {TM_PF_STACK_SAMPLE_CALLSTACK, &inline_callstack},
                                              {0, NULL}};
static const list_name stack_sample_lists[] = {
    {TM_PF_STACK_SAMPLE_FOLLOWER_WEIGHTS, "StackSample.follower_weights"}, {0, NULL}};
static const schema stack_sample = {"StackSample", F(2) | F(4) | F(6) | F(8) | F(10) | F(11), F(7) | F(9), F(14),
                                    stack_sample_children, stack_sample_lists};

static const schema thread_descriptor = {"ThreadDescriptor", F(1) | F(2) | F(3) | F(4) | F(6) | F(7) | F(8), F(5),
                                         0, NULL, NULL};
static const schema process_descriptor = {"ProcessDescriptor", F(1) | F(3) | F(4) | F(5) | F(7), F(2) | F(6) | F(8),
                                          0, NULL, NULL};
static const child track_children[] = {{TM_PF_TRACK_DESC_PROCESS, &process_descriptor},
                                       {TM_PF_TRACK_DESC_THREAD, &thread_descriptor},
                                       {0, NULL}};
static const schema track_descriptor = {"TrackDescriptor", 0, 0, 0, track_children, NULL};

static const schema tree_process = {"ProcessTree.Process", F(1) | F(2) | F(5) | F(7) | F(8) | F(9), F(3), F(6), NULL, NULL};
static const schema tree_thread = {"ProcessTree.Thread", F(1) | F(3), F(2), F(4), NULL, NULL};
static const child tree_children[] = {{TM_PF_PROCESS_TREE_PROCESSES, &tree_process},
                                      {TM_PF_PROCESS_TREE_THREADS, &tree_thread},
                                      {0, NULL}};
static const schema process_tree = {"ProcessTree", F(3), 0, 0, tree_children, NULL};

/* TraceStats: every figure the Trace Processor model reads into its stats. */
#define F_RANGE(lo, hi) ((~0ull >> (63 - (hi))) & ~((1ull << (lo)) - 1)) /* fields lo..hi */
static const schema buffer_stats = {"TraceStats.BufferStats", F_RANGE(1, 20), 0, 0, NULL, NULL};
static const schema filter_stats = {"TraceStats.FilterStats", F_RANGE(1, 5), 0, F(20), NULL, NULL};
static const schema writer_stats = {"TraceStats.WriterStats", F(1) | F(4), 0, F(2) | F(3), NULL, NULL};
static const child trace_stats_children[] = {{TM_PF_TRACE_STATS_BUFFER_STATS, &buffer_stats},
                                             {TM_PF_TRACE_STATS_FILTER_STATS, &filter_stats},
                                             {TM_PF_TRACE_STATS_WRITER_STATS, &writer_stats},
                                             {0, NULL}};
static const schema trace_stats = {"TraceStats", F_RANGE(2, 10) | F_RANGE(12, 15), 0, 0, trace_stats_children, NULL};

/* TraceConfig and FtraceStats: what the Trace Processor model reads of them. */
static const schema buffer_config = {"TraceConfig.BufferConfig", F(1) | F(4), 0, 0, NULL, NULL};
static const child config_children[] = {{TM_PF_CONFIG_BUFFERS, &buffer_config}, {0, NULL}};
static const schema trace_config = {"TraceConfig", F(3) | F(8) | F(9) | F(27) | F(28), 0, 0, config_children, NULL};
static const schema ftrace_cpu_stats = {"FtraceCpuStats", F(1) | F(2), 0, 0, NULL, NULL};
static const child ftrace_children[] = {{TM_PF_FTRACE_STATS_CPU_STATS, &ftrace_cpu_stats}, {0, NULL}};
static const schema ftrace_stats = {"FtraceStats", F(1), 0, 0, ftrace_children, NULL};

static const schema trace_uuid = {"TraceUuid", F(1) | F(2), 0, 0, NULL, NULL};

/* ModuleSymbols and DeobfuscationMapping (perfetto/symbols.c). */
static const schema symbol_line = {"Line", F(3), F(1) | F(2), 0, NULL, NULL};
static const child address_children[] = {{TM_PF_ADDRESS_SYMBOLS_LINES, &symbol_line}, {0, NULL}};
static const schema address_symbols = {"AddressSymbols", F(1), 0, 0, address_children, NULL};
static const child module_children[] = {{TM_PF_MODULE_SYMBOLS_ADDRESS_SYMBOLS, &address_symbols}, {0, NULL}};
static const schema module_symbols = {"ModuleSymbols", 0, F(1) | F(2), 0, module_children, NULL};
static const schema obf_member = {"ObfuscatedMember", F(3) | F(4) | F(5) | F(6), F(1) | F(2), 0, NULL, NULL};
static const child obf_class_children[] = {{TM_PF_OBF_CLASS_OBFUSCATED_MEMBERS, &obf_member},
                                           {TM_PF_OBF_CLASS_OBFUSCATED_METHODS, &obf_member},
                                           {0, NULL}};
static const schema obf_class = {"ObfuscatedClass", 0, F(1) | F(2), 0, obf_class_children, NULL};
static const child deobf_children[] = {{TM_PF_DEOBF_OBFUSCATED_CLASSES, &obf_class}, {0, NULL}};
static const schema deobfuscation = {"DeobfuscationMapping", F(2), F(1), 0, deobf_children, NULL};

/* PackagesList (tp/tp_packages.c). */
static const schema package_info = {"PackagesList.PackageInfo", F(2) | F(3) | F(4) | F(5), F(1), 0, NULL, NULL};
static const child packages_children[] = {{TM_PF_PACKAGES_LIST_PACKAGES, &package_info}, {0, NULL}};
static const schema packages_list = {"PackagesList", F(2) | F(3), 0, 0, packages_children, NULL};

/* ProfilePacket: the tables it carries, its dumps and their samples. */
static const schema profile_string = {"ProfilePacket.strings", F(1), F(2), 0, NULL, NULL};
static const schema profile_frame = {"ProfilePacket.frames", F(1) | F(2) | F(3) | F(4), 0, 0, NULL, NULL};
static const list_name profile_callstack_lists[] = {{TM_PF_CALLSTACK_FRAME_IDS, "ProfilePacket.callstacks.frame_ids"},
                                                    {0, NULL}};
static const schema profile_callstack = {"ProfilePacket.callstacks", F(1), 0, F(2), NULL, profile_callstack_lists};
static const list_name profile_mapping_lists[] = {
    {TM_PF_MAPPING_PATH_STRING_IDS, "ProfilePacket.mappings.path_string_ids"}, {0, NULL}};
static const schema profile_mapping = {"ProfilePacket.mappings", F(1) | F(2) | F(3) | F(4) | F(5) | F(6) | F(8), 0,
                                       F(7), NULL, profile_mapping_lists};
static const schema heap_sample = {"ProfilePacket.HeapSample", F(1) | F(2) | F(3) | F(4) | F(5) | F(6) | F(7) | F(8) | F(9),
                                   0, 0, NULL, NULL};
static const schema heap_stats = {"ProfilePacket.ProcessStats", F(1) | F(2) | F(3) | F(5) | F(6), 0, 0, NULL, NULL};
static const child heap_dump_children[] = {{TM_PF_HEAP_DUMP_SAMPLES, &heap_sample}, {TM_PF_HEAP_DUMP_STATS, &heap_stats},
                                           {0, NULL}};
static const schema heap_dump = {"ProfilePacket.ProcessHeapSamples",
                                 F(1) | F(3) | F(4) | F(6) | F(7) | F(8) | F(9) | F(10) | F(12) | F(13) | F(14) | F(15),
                                 F(11), 0, heap_dump_children, NULL};
static const child profile_children[] = {{TM_PF_PROFILE_STRINGS, &profile_string},
                                         {TM_PF_PROFILE_FRAMES, &profile_frame},
                                         {TM_PF_PROFILE_CALLSTACKS, &profile_callstack},
                                         {TM_PF_PROFILE_MAPPINGS, &profile_mapping},
                                         {TM_PF_PROFILE_PROCESS_DUMPS, &heap_dump},
                                         {0, NULL}};
static const schema profile_packet = {"ProfilePacket", F(6) | F(7), 0, 0, profile_children, NULL};

/* StreamingAllocation and StreamingFree: repeated varints only. */
static const list_name streaming_alloc_lists[] = {
    {TM_PF_STREAMING_ALLOC_ADDRESS, "StreamingAllocation.address"},
    {TM_PF_STREAMING_ALLOC_SIZE, "StreamingAllocation.size"},
    {TM_PF_STREAMING_ALLOC_SAMPLE_SIZE, "StreamingAllocation.sample_size"},
    {TM_PF_STREAMING_ALLOC_TIMESTAMP, "StreamingAllocation.clock_monotonic_coarse_timestamp"},
    {TM_PF_STREAMING_ALLOC_HEAP_ID, "StreamingAllocation.heap_id"},
    {TM_PF_STREAMING_ALLOC_SEQUENCE_NUMBER, "StreamingAllocation.sequence_number"},
    {0, NULL}};
static const schema streaming_alloc = {"StreamingAllocation", 0, 0, F(1) | F(2) | F(3) | F(4) | F(5) | F(6), NULL,
                                       streaming_alloc_lists};
static const list_name streaming_free_lists[] = {{TM_PF_STREAMING_FREE_ADDRESS, "StreamingFree.address"},
                                                 {TM_PF_STREAMING_FREE_HEAP_ID, "StreamingFree.heap_id"},
                                                 {TM_PF_STREAMING_FREE_SEQUENCE_NUMBER, "StreamingFree.sequence_number"},
                                                 {0, NULL}};
static const schema streaming_free = {"StreamingFree", 0, 0, F(1) | F(2) | F(3), NULL, streaming_free_lists};

/* ArtProcessMetadata: the Java stack of the thread that ran out of memory
 * (tp/tp.c); its other fields are skipped, their framing still checked. */
static const schema java_frame = {"ArtProcessMetadata.oom_thread_java_stack.frames", F(TM_PF_JAVA_FRAME_LINE_NUMBER),
                                  F(TM_PF_JAVA_FRAME_METHOD_NAME) | F(TM_PF_JAVA_FRAME_SOURCE_FILE), 0, NULL, NULL};
static const child java_stack_children[] = {{TM_PF_JAVA_STACK_FRAMES, &java_frame}, {0, NULL}};
static const schema java_stack = {"ArtProcessMetadata.oom_thread_java_stack", 0, 0, 0, java_stack_children, NULL};
static const child art_children[] = {{TM_PF_ART_METADATA_OOM_THREAD_JAVA_STACK, &java_stack}, {0, NULL}};
static const schema art_process_metadata = {"ArtProcessMetadata", 0, 0, 0, art_children, NULL};

/* ProcessStats: the memory figures of each process. */
static const schema proc_stats_process = {"ProcessStats.Process", F_RANGE(1, 10), 0, 0, NULL, NULL};
static const child process_stats_children[] = {{TM_PF_PROCESS_STATS_PROCESSES, &proc_stats_process}, {0, NULL}};
static const schema process_stats = {"ProcessStats", F(2), 0, 0, process_stats_children, NULL};
#undef F_RANGE

#undef F

static inline const schema *payload_schema(uint32_t data_field, bool relay) {
    switch (data_field) {
    case TM_PF_PACKET_PERF_SAMPLE: return relay ? &perf_sample_relay : &perf_sample;
    case TM_PF_PACKET_CLOCK_SNAPSHOT: return relay ? &clock_snapshot_relay : &clock_snapshot;
    case TM_PF_PACKET_STREAMING_PROFILE_PACKET: return &streaming;
    case TM_PF_PACKET_STACK_SAMPLE: return &stack_sample;
    case TM_PF_PACKET_THREAD_DESCRIPTOR: return &thread_descriptor;
    case TM_PF_PACKET_PROCESS_DESCRIPTOR: return &process_descriptor;
    case TM_PF_PACKET_TRACK_DESCRIPTOR: return &track_descriptor;
    case TM_PF_PACKET_PROCESS_TREE: return &process_tree;
    case TM_PF_PACKET_TRACE_STATS: return &trace_stats;
    case TM_PF_PACKET_TRACE_CONFIG: return &trace_config;
    case TM_PF_PACKET_FTRACE_STATS: return &ftrace_stats;
    case TM_PF_PACKET_TRACE_UUID: return &trace_uuid;
    case TM_PF_PACKET_MODULE_SYMBOLS: return relay ? NULL : &module_symbols;
    case TM_PF_PACKET_DEOBFUSCATION_MAPPING: return relay ? NULL : &deobfuscation;
    case TM_PF_PACKET_PACKAGES_LIST: return relay ? NULL : &packages_list;

    case TM_PF_PACKET_PROFILE_PACKET: return relay ? NULL : &profile_packet;
    case TM_PF_PACKET_PROCESS_STATS: return relay ? NULL : &process_stats;
    case TM_PF_PACKET_STREAMING_ALLOCATION: return relay ? NULL : &streaming_alloc;
    case TM_PF_PACKET_STREAMING_FREE: return relay ? NULL : &streaming_free;
    case TM_PF_PACKET_ART_PROCESS_METADATA: return relay ? NULL : &art_process_metadata;
    default: return NULL;
    }
}

/* The name errors give a repeated field. */
static const char *repeated_name(const schema *sc, uint32_t field) {
    for (const list_name *l = sc->lists; l && l->field; l++)
        if (l->field == field) return l->name;
    return sc->name;
}

static const schema *child_schema(const schema *sc, uint32_t field) {
    for (const child *c = sc->children; c && c->field; c++)
        if (c->field == field) return c->of;
    return NULL;
}

/* The fields of sc that must be length-delimited: its strings and bytes,
 * and its nested messages. */
static uint64_t len_fields(const schema *sc) {
    uint64_t m = sc->lens;
    for (const child *c = sc->children; c && c->field; c++)
        if (c->field < 64) m |= 1ull << c->field;
    return m;
}

/* The end of the varint at p < end when it has 1 to 9 bytes (what
 * tm_pb_varint_fast takes) and ends by end; NULL otherwise. Only its end
 * is wanted. Bytes up to limit (>= end) may be read: a message's varints
 * are found with one load each, its last ones too. */
static inline const uint8_t *skip_varint(const uint8_t *p, const uint8_t *end, const uint8_t *limit) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (TM_LIKELY(limit - p >= 8)) {
        uint64_t stops = ~tm_pb_load8(p) & 0x8080808080808080ull;
        size_t n = stops ? (size_t)__builtin_ctzll(stops) / 8 + 1 : 9;
        return n <= (size_t)(end - p) && (n < 9 || p[8] < 0x80) ? p + n : NULL;
    }
#else
    (void)limit;
#endif
    for (int i = 0; i < 9 && p + i < end; i++)
        if (p[i] < 0x80) return p + i + 1;
    return NULL;
}

/* n <= 8 bytes at p as a little-endian word (byte k in bits 8k..8k+7). */
static inline uint64_t load_le(const uint8_t *p, size_t n) {
#if defined(__GNUC__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (TM_LIKELY(n == 8)) return tm_pb_load8(p);
#endif
    uint64_t w = 0;
    for (size_t k = 0; k < n; k++) w |= (uint64_t)p[k] << 8 * k;
    return w;
}

/* The high bit of each byte of w, gathered: bit k is byte k's. */
static inline uint64_t high_bits(uint64_t w) {
    return (((w >> 7) & 0x0101010101010101ull) * 0x0102040810204080ull) >> 56;
}

/* The stops (bytes below 0x80) of the n <= 64 bytes at p, and the bytes
 * that are no varint tag of fields 1-15, as bit k for byte k (bits from n
 * on may be set). Bytes up to limit may be read. */
static inline void varint_masks(const uint8_t *p, size_t n, const uint8_t *limit, uint64_t *stops,
                                uint64_t *bad_tags) {
    uint64_t st = 0, bad = 0;
    size_t i = 0;
#if defined(__SSE2__)
    for (; i < n && limit - (p + i) >= 16; i += 16) {
        __m128i w = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        __m128i zero = _mm_setzero_si128();
        unsigned more = (unsigned)_mm_movemask_epi8(w);
        unsigned wire0 = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(w, _mm_set1_epi8(7)), zero));
        unsigned field0 = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(w, _mm_set1_epi8(0x78)), zero));
        st |= (uint64_t)(~more & 0xffff) << i;
        bad |= (uint64_t)(~(wire0 & ~field0) & 0xffff) << i;
    }
#endif
    for (; i < n; i += 8) {
        size_t avail = (size_t)(limit - (p + i));
        uint64_t w = load_le(p + i, avail < 8 ? avail : 8);
        uint64_t wire = (w & 0x0707070707070707ull) + 0x7f7f7f7f7f7f7f7full;  /* high bit: wire type not 0 */
        uint64_t field = (w & 0x7878787878787878ull) + 0x7878787878787878ull; /* high bit: field not 0 */
        st |= high_bits(~w) << i;
        bad |= high_bits(wire | ~field) << i;
    }
    *stops = st;
    *bad_tags = bad;
}

/* Bit k of the result: an odd number of x's bits up to bit k. */
static inline uint64_t prefix_odd(uint64_t x) {
    x ^= x << 1, x ^= x << 2, x ^= x << 4, x ^= x << 8, x ^= x << 16, x ^= x << 32;
    return x;
}

/* A message of fewer than 64 bytes of varints only under one-byte tags (a
 * HeapSample), checked as bit masks, not field by field. Its stops (bytes
 * below 0x80) are, counted from the first, a tag, a varint's last byte, a
 * tag, ...; it is valid when the tags are byte 0 and each byte after a
 * varint's end, the last end is its last byte, no varint has more than 9
 * bytes (tm_pb_varint_fast's limit) and every tag is a varint of fields
 * 1-15. Bytes up to limit may be read. */
static inline bool plain_varints(const uint8_t *p, size_t len, const uint8_t *limit) {
    uint64_t stops, bad_tags;
    varint_masks(p, len, limit, &stops, &bad_tags);
    uint64_t in = (1ull << len) - 1;
    stops &= in;
    uint64_t odd = prefix_odd(stops);
    uint64_t tags = stops & odd, ends = stops & ~odd;
    uint64_t more = ~stops & in, run = more & more >> 1; /* run: 9 varint bytes in a row that say more follow */
    run &= run >> 2, run &= run >> 4, run &= more >> 8;
    return (tags | 1ull << len) == (ends << 1 | 1) && !(tags & bad_tags) && !run;
}

/* plain_varints for a message of any length (a StreamingProfilePacket of
 * unpacked ids), 64 bytes at a time: what carries from one block to the
 * next is whether a varint is open (an odd number of stops), whether the
 * last byte ended one, and how many bytes saying more follow it ended on. */
static bool plain_varints_any(const uint8_t *p, size_t len) {
    const uint8_t *limit = p + len;
    bool open = false, after_end = true; /* the message starts as after a varint's end */
    unsigned trailing = 0;
    for (size_t at = 0; at < len; at += 64) {
        size_t n = len - at < 64 ? len - at : 64;
        uint64_t stops, bad_tags;
        varint_masks(p + at, n, limit, &stops, &bad_tags);
        uint64_t in = n == 64 ? ~0ull : (1ull << n) - 1;
        stops &= in;
        if (!stops) return false; /* 64 bytes saying more follow, or the message ends inside a varint */
        uint64_t odd = prefix_odd(stops) ^ (open ? ~0ull : 0);
        uint64_t tags = stops & odd, ends = stops & ~odd;
        uint64_t more = ~stops & in, run = more & more >> 1;
        run &= run >> 2, run &= run >> 4, run &= more >> 8;
        if (tags != ((ends << 1 | after_end) & in) || (tags & bad_tags) || run ||
            trailing + (unsigned)__builtin_ctzll(stops) >= 9)
            return false;
        unsigned last = 63 - (unsigned)__builtin_clzll(stops);
        trailing = (unsigned)n - 1 - last;
        open = odd >> (n - 1) & 1;
        after_end = ends >> (n - 1) & 1;
    }
    return after_end;
}

/* A message whose fields all have one-byte tags, varints and
 * length-delimited ones of 1-9 byte lengths, and whose nested messages and
 * packed varints are of that shape too: what heapprofd writes (a
 * ProfilePacket of thousands of HeapSamples). Checked in one pass that mirrors
 * check_message's order of rules, decoding nothing but lengths; true only
 * when check_message accepts the message. Anything else (or an error) is
 * left to the general check, which names it. Bytes up to limit may be
 * read (skip_varint). */
static bool plain_message(const schema *sc, const uint8_t *p, const uint8_t *end, const uint8_t *limit) {
    uint64_t not_varint = len_fields(sc); /* a varint there is an error (or a field listed twice) */
    int leaf_tag = -1; /* of the last nested message of varints only (a HeapSample): they come in runs */
    while (p < end) {
        uint8_t tag = *p++;
        if (tag == leaf_tag && p < end && *p < 64 && *p < end - p) { /* the run goes on, a length of one byte */
            size_t len = *p++;
            if (!plain_varints(p, len, limit)) return false;
            p += len;
            continue;
        }
        if (tag < 8 || tag >= 0x80 || p >= end) return false;
        uint32_t num = tag >> 3;
        uint64_t bit = 1ull << num;
        if ((tag & 7) == TM_PB_VARINT) {
            if ((not_varint & bit) || !(p = skip_varint(p, end, limit))) return false;
            continue;
        }
        uint64_t len;
        if ((tag & 7) != TM_PB_LEN || !(p = tm_pb_varint_fast(p, end, &len)) || len > (uint64_t)(end - p))
            return false;
        const uint8_t *sub = p;
        p += len;
        if (sc->varints & bit) return false;
        if (sc->lens & bit) continue;
        if (sc->repeated & bit) { /* packed */
            for (const uint8_t *q = sub; q < p;)
                if (!(q = skip_varint(q, p, limit))) return false;
            continue;
        }
        const schema *of = child_schema(sc, num);
        if (!of) continue;
        bool of_varints = !of->children && !of->lens && !of->repeated;
        if (of_varints) leaf_tag = tag;
        if (!(of_varints && len < 64 ? plain_varints(sub, (size_t)len, limit) : plain_message(of, sub, p, limit)))
            return false;
    }
    return true;
}

/* A message of varints only with one-byte tags (fields 1-15), none of them
 * a field sc wants length-delimited: the shape of the many small messages
 * a payload repeats (a Frame, a PerfSample, a StreamingProfilePacket of
 * unpacked fields), in the tightest loop. Valid, since a varint is what sc
 * wants of any other field (a repeated one may come unpacked). */
static bool varints_only(const schema *sc, tm_bytes msg) {
    const uint8_t *p = msg.data, *end = p + msg.len;
    uint64_t lens = len_fields(sc);
    if (!(lens & 0xfffe) && msg.len >= 64) return plain_varints_any(p, msg.len); /* no field 1-15 is one */
    while (p < end) {
        uint8_t tag = *p++;
        if (tag < 8 || tag >= 0x80 || (tag & 7) != TM_PB_VARINT || (lens >> (tag >> 3) & 1) || p >= end)
            return false;
        uint64_t v;
        if (!(p = tm_pb_varint_fast(p, end, &v))) return false;
    }
    return true;
}

static tm_status check_message(const tm_pf_reader *r, const schema *sc, tm_bytes msg, bool fast) {
    if (fast && msg.len &&
        (varints_only(sc, msg) || plain_message(sc, msg.data, msg.data + msg.len, msg.data + msg.len)))
        return TM_OK;
    tm_pb_reader pb = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&pb, &f)) == TM_PB_OK) {
        if (f.num >= 64) continue;
        uint64_t bit = 1ull << f.num;
        if (sc->varints & bit) {
            TM_PF_WANT(r, f, TM_PB_VARINT, sc->name);
        } else if (sc->lens & bit) {
            TM_PF_WANT(r, f, TM_PB_LEN, sc->name);
        } else if (sc->repeated & bit) {
            if (f.wire == TM_PB_LEN) {
                tm_pb_reader packed = tm_pb_reader_of(f.bytes);
                uint64_t v;
                int prc;
                while ((prc = tm_pb_packed_next(&packed, &v)) == TM_PB_OK) continue;
                if (prc == TM_PB_ERROR) return tm_pf_pb_fail(r, &packed, repeated_name(sc, f.num));
            } else {
                TM_PF_WANT(r, f, TM_PB_VARINT, repeated_name(sc, f.num));
            }
        } else {
            const schema *of = child_schema(sc, f.num);
            if (!of) continue;
            TM_PF_WANT(r, f, TM_PB_LEN, sc->name);
            TM_TRY(check_message(r, of, f.bytes, fast));
        }
    }
    return rc == TM_PB_ERROR ? tm_pf_pb_fail(r, &pb, sc->name) : TM_OK;
}

tm_status tm_pf_check_payload(const tm_pf_reader *r, tm_pf_packet *pk) {
    if (pk->data_field == TM_PF_PACKET_PERF_SAMPLE && pk->data.len && tm_pf_read_plain_perf_sample(pk)) return TM_OK;
    const schema *sc = payload_schema(pk->data_field, r->flags & TM_PF_RELAY);
    return sc ? check_message(r, sc, pk->data, true) : TM_OK;
}

tm_status tm_pf_check_payload_general(const tm_pf_reader *r, const tm_pf_packet *pk) {
    const schema *sc = payload_schema(pk->data_field, r->flags & TM_PF_RELAY);
    return sc ? check_message(r, sc, pk->data, false) : TM_OK;
}
