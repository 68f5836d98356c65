/*
 * trace.h — the Perfetto trace model: per-sequence intern tables and
 * incremental state, clocks, and the decoder that turns a .pftrace buffer
 * into a tm_profile; the entry point tm_trace_parse also dispatches to the
 * Sample v2, Sample v1 and folded readers. See trace.c for the rules and perfetto/fields.h
 * for the field numbers.
 */
#ifndef TM_TRACE_H
#define TM_TRACE_H

#include "common/alloc.h"   /* tm_mem, tm_arena */
#include "profile/profile.h" /* tm_profile */
#include "wire/input.h"     /* tm_input */

struct tm_trace {
    tm_mem mem;            /* counted against result_budget */
    tm_budget result_budget;
    tm_arena arena;
    tm_profile profile;
    tm_limits limits;  /* resolved: preset, then the caller's overrides */
    tm_input_format input;
    tm_input source;   /* the bytes decoded: string views point into them */
};

/* Readers of the other input formats (in_sample_v2.c, which reads both
 * Sentry formats, and in_folded.c): each fills t->profile within t->limits,
 * sorted by time, with its stats. */
tm_status tm_sample_v2_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err);
tm_status tm_sample_v1_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err);
tm_status tm_folded_read(tm_trace *t, const uint8_t *buf, size_t len, tm_error *err);
/* Whether a line (trailing blanks removed) ends in what is meant as a
 * folded count: a blank, then a digit or a signed digit. Detection uses it,
 * so that a malformed count (3.5, -1, 2^64, after a tab) reaches the folded
 * reader and its message rather than the Perfetto decoder's. */
int tm_folded_looks_like_sample(tm_str line);

#endif
