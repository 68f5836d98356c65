/*
 * limits.h — every ceiling tracemill enforces, in one place.
 *
 * Two presets: Relay's hardened converter (getsentry/relay, the Perfetto
 * converter's MAX_* constants; used by the ingest server and --compat relay)
 * and generous ones for the CLI, sized so that a 10 GB trace with 100
 * million samples converts. Callers override single values through
 * tm_options.limits; see tm_limits in tracemill.h for what each one bounds.
 */
#ifndef TM_LIMITS_H
#define TM_LIMITS_H

/* Relay preset. */
#define TM_RELAY_MAX_SAMPLES 100000u          /* relay MAX_SAMPLES */
#define TM_RELAY_MAX_STACK_DEPTH 1000u        /* MAX_CALLSTACK_DEPTH */
#define TM_RELAY_MAX_SEQUENCES 64u            /* MAX_SEQUENCE_IDS */
#define TM_RELAY_MAX_PACKET_BYTES (4u << 20)  /* MAX_TRACE_PACKET_BYTES */
#define TM_RELAY_MAX_UNIQUE_FRAMES 1000000u   /* MAX_UNIQUE_FRAMES */
#define TM_RELAY_MAX_PATH_SEGMENTS 100u       /* MAX_PATH_SEGMENTS */
#define TM_RELAY_MAX_INFLATED_BYTES (50u << 20) /* the server's profile cap */
#define TM_RELAY_MAX_INTERNED 1000000u
#define TM_RELAY_MAX_CHUNK_NS 66000000000ull  /* MAX_PROFILE_CHUNK_DURATION: 60 s + slack */
#define TM_RELAY_MAX_WORK_BYTES (15ull << 20)   /* the hardened converter's intern-table budget */
#define TM_RELAY_MAX_RESULT_BYTES (40ull << 20) /* and its result budget */
#define TM_RELAY_MAX_INPUT_BYTES (50ull << 20)  /* Relay's limits.max_profile_size (50 MiB): the
                                                    largest profile chunk item it accepts */

/* Generous (CLI) preset. */
#define TM_CLI_MAX_SAMPLES 1000000000ull      /* 10x the 1e8-sample target */
#define TM_CLI_MAX_STACK_DEPTH 100000u
#define TM_CLI_MAX_SEQUENCES 1000000u
#define TM_CLI_MAX_PACKET_BYTES (256u << 20)
#define TM_CLI_MAX_UNIQUE_FRAMES 100000000u
#define TM_CLI_MAX_PATH_SEGMENTS 10000u
#define TM_CLI_MAX_INFLATED_BYTES (1ull << 30) /* per compressed packet (writers keep < 512 KB) */
#define TM_CLI_MAX_INTERNED 100000000u
#define TM_CLI_MAX_CHUNK_NS UINT64_MAX        /* no chunk duration limit */
#define TM_CLI_MAX_WORK_BYTES (4ull << 30)    /* 1e8 interned entries fit */
#define TM_CLI_MAX_RESULT_BYTES (16ull << 30) /* 1e8 samples and their sort need ~5 GiB */
#define TM_CLI_MAX_INPUT_BYTES (4ull << 30)   /* stdin or a device is read into memory up to this */

/* Fixed internal ceilings. */
#define TM_MAX_CLOCKS 256u            /* distinct clock ids in snapshots */
#define TM_MAX_CLOCK_SNAPSHOTS 1000000u
#define TM_MAX_META_BYTES (16u << 20) /* --meta JSON */
#define TM_MAX_SYMBOL_LINES 64u       /* lines (an inline chain) per symbolized address; deeper chains are cut */
#define TM_HEAP_IID_MEMO 262144u       /* callstack ids below this get a direct-indexed memo of their last
                                          (process, heap, callsite) per heap sequence (24 bytes each, grown
                                          to the largest id seen); larger ids take the hash maps alone */
#define TM_TP_CONTEXT_MEMO 256u        /* slots of the query model's memo of a PerfSample's thread, task,
                                          execution context and attributes (direct-mapped, power of 2) */
#define TM_TP_SET_MEMO 64u             /* slots of its memo of (generation, process) -> row set (power of 2) */

/* The limits options ask for: their preset (Relay's in Relay mode), then
 * every non-zero field of o->limits (trace.c). */
struct tm_options;
struct tm_limits;
void tm_limits_resolve(const struct tm_options *o, struct tm_limits *out);

#endif
