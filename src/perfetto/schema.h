/*
 * schema.h — checks a TracePacket payload's wire types against the schema
 * of its message (schema.c), for the reader.
 */
#ifndef TM_PERFETTO_SCHEMA_H
#define TM_PERFETTO_SCHEMA_H

#include "perfetto/reader.h"

/* Checks the packet's `oneof data` member, if it is one consumers read:
 * every field a consumer reads has the wire type its type allows, and
 * repeated varints and nested messages are well-formed. A PerfSample of
 * the common shape is read on the way (pk->perf_read). */
tm_status tm_pf_check_payload(const tm_pf_reader *r, tm_pf_packet *pk);
/* The same check without its one-pass shortcuts (plain messages, the
 * PerfSample read): its verdict and error must be tm_pf_check_payload's,
 * which tests compare on the same inputs. */
tm_status tm_pf_check_payload_general(const tm_pf_reader *r, const tm_pf_packet *pk);

#endif
