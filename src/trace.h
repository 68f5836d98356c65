/*
 * trace.h — the Perfetto trace model: per-sequence intern tables and
 * incremental state, clocks, and the decoder that turns a .pftrace buffer
 * into a tm_profile. See trace.c for the rules and perfetto-wire.md for
 * the field numbers.
 */
#ifndef TM_TRACE_H
#define TM_TRACE_H

#include "alloc.h"   /* tm_mem, tm_arena */
#include "clock.h"   /* tm_clocks */
#include "profile.h" /* tm_profile */

struct tm_trace {
    tm_mem mem;
    tm_arena arena;
    tm_profile profile;
    tm_clocks clocks;
    tm_limits limits;  /* resolved: preset, then the caller's overrides */
};

#endif
