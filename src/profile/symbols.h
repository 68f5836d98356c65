/*
 * symbols.h — applies a trace's ModuleSymbols and DeobfuscationMapping
 * packets (collected by trace.c while reading) to the profile model
 * (symbols.c): function names, source files, lines and inlined functions
 * for native frames, original names for Java frames.
 */
#ifndef TM_PROFILE_SYMBOLS_H
#define TM_PROFILE_SYMBOLS_H

#include "perfetto/symbols.h" /* tm_pf_symbols */
#include "profile/profile.h"

/* TM_ERR_NOMEM, TM_ERR_LIMIT when the new frames pass max_unique_frames,
 * or TM_ERR_MALFORMED with *bad saying where a payload is malformed. */
tm_status tm_profile_apply_symbols(tm_profile *p, const tm_pf_symbols *s, tm_pf_walk_error *bad);

#endif
