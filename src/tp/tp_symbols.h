/*
 * tp_symbols.h — symbols in the Trace Processor model: the ModuleSymbols
 * and DeobfuscationMapping payloads tp.c collects while reading
 * (tm_pf_symbols), applied once every frame exists (tp_symbols.c).
 */
#ifndef TM_TP_SYMBOLS_H
#define TM_TP_SYMBOLS_H

#include "perfetto/symbols.h" /* tm_pf_symbols */
#include "tp/tp.h"

/* ModuleSymbols first, in file order: stack_profile_symbol rows (one set
 * per address, innermost inlined function first, `inlined` on all but the
 * last), and the frames of every mapping with that build id and rel_pc
 * pointed at them. Then DeobfuscationMapping: a frame named
 * "ObfuscatedClass.obfuscatedMethod" gets deobfuscated_name (the distinct
 * candidates sorted and joined with " | " when the map is ambiguous), only
 * from maps of its app when its mapping's path names one
 * (/data/app/PACKAGE-...) or, for a path that names none (not /memfd:),
 * when the first process that ran it has a package (tp_packages.h); with an
 * obfuscated line (from its symbols) the
 * methods whose line range holds it become its symbol set, inlined ones
 * first, as R8's retrace expands them. Also counts mappings in
 * /data/local/tmp without a build id (symbolization_tmp_build_id_not_found).
 * stats: Trace Processor's single stats, by key. TM_ERR_NOMEM, or
 * TM_ERR_MALFORMED with *bad saying where a payload is malformed. */
tm_status tm_tp_symbols_apply(tm_tp *tp, const tm_pf_symbols *s, int64_t *stats, tm_pf_walk_error *bad);

#endif
