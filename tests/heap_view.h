/*
 * heap_view.h — reads the heap profile out of a trace the recorder wrote,
 * for the heap profiling tests (test_record_heap, test_record_writer),
 * independently of the library's decoders: the InternedData of the heap
 * sequence (strings, frames, callstacks, mappings) per generation,
 * the last complete dump (packets joined while continued is set) with each
 * callsite as a folded stack, and the ProcessStats snapshots. It checks the
 * rules a reader relies on and says which one broke: the first packet of a
 * generation sets SEQ_INCREMENTAL_STATE_CLEARED, no iid is defined twice in
 * a generation, every id resolves, indices are consecutive, heap_name is
 * libc.malloc. Not a suite (not named test_*.c): linked into the two.
 */
#ifndef TM_HEAP_VIEW_H
#define TM_HEAP_VIEW_H

#include <stddef.h>
#include <stdint.h>

typedef struct hv_site {
    char *stack; /* function names root first, ';'-separated ("?" when unnamed) */
    uint64_t alloc, freed, alloc_count, free_count;
} hv_site;

typedef struct heap_view {
    hv_site *sites; /* the last complete dump */
    size_t n_sites;
    uint64_t dumps, packets, continued_packets, generations;
    uint64_t strings_defined, frames_defined, callstacks_defined, mappings_defined; /* over all packets */
    uint64_t interval, heap_samples, unwind_errors, pid;
    int from_startup;
    uint64_t mem_snapshots, max_rss_kb, max_hwm_kb, last_anon_kb;
    char why[256]; /* the first broken rule; "" when none */
} heap_view;

/* Reads trace[0..len); 0 when it decodes, else -1 with out->why. */
int hv_read(const void *trace, size_t len, heap_view *out);
void hv_free(heap_view *v);

/* Whether the folded stack holds frame name: a whole element, or a
 * demangled C++ name that starts with name and '('. */
int hv_stack_has(const char *stack, const char *name);

/* Totals of the last dump over the callsites whose stack holds name. */
typedef struct hv_totals {
    uint64_t alloc, freed, alloc_count, free_count;
    size_t sites;
} hv_totals;
hv_totals hv_sum(const heap_view *v, const char *name);

#endif
