/*
 * tp_symbols.h — symbols in the Trace Processor model: the ModuleSymbols
 * and DeobfuscationMapping payloads tp.c collects while reading
 * (tm_pf_symbols), applied once every frame exists (tp_symbols.c).
 */
#ifndef TM_TP_SYMBOLS_H
#define TM_TP_SYMBOLS_H

#include "perfetto/symbols.h" /* tm_pf_symbols */
#include "tp/tp.h"

/* In file order: ModuleSymbols add stack_profile_symbol rows (one set per
 * address, innermost inlined function first, `inlined` on all but the
 * last) and point the frames of every mapping with that build id and
 * rel_pc at them; DeobfuscationMapping sets deobfuscated_name on the
 * frames named "ObfuscatedClass.obfuscatedMethod" (the first mapping that
 * names a frame wins). stats: Trace Processor's single stats, by key. */
tm_status tm_tp_symbols_apply(tm_tp *tp, const tm_pf_symbols *s, int64_t *stats, tm_error *err);

#endif
