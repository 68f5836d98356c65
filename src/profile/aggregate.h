/*
 * aggregate.h — what the exporters other than Sample v2 share: which
 * threads a tm_thread_filter selects, how frames and threads are named in
 * text formats, what kind a frame is (for colours), the sampling period of
 * each thread, and sample counts per stack (optionally per thread).
 *
 * Everything here reads the profile model only.
 */
#ifndef TM_AGGREGATE_H
#define TM_AGGREGATE_H

#include "profile/profile.h" /* tm_profile */

/* ---- threads ---- */

/* sel[i] = 1 when thread i passes the filter (f NULL or zero: all).
 * TM_ERR_INVALID_ARG when the filter names a thread the profile lacks.
 * Free with tm_thread_selection_free. */
tm_status tm_thread_select(const tm_profile *p, const tm_thread_filter *f, uint8_t **sel, tm_error *err);
void tm_thread_selection_free(const tm_profile *p, uint8_t *sel);

/* The thread's name; unnamed main threads (tid == pid, pid known) are
 * "main", other unnamed ones "tid-N" (formatted into buf, >= 32 bytes). */
tm_str tm_thread_label(const tm_profile *p, uint32_t thread, char *buf);

/* ---- frames ---- */

typedef enum tm_frame_kind {
    TM_KIND_NATIVE = 0,
    TM_KIND_JAVA = 1,
    TM_KIND_KERNEL = 2,  /* kernel mapping ([kernel.kallsyms], ...) or address */
    TM_KIND_UNKNOWN = 3  /* no function name */
} tm_frame_kind;

/* Addresses from here up are the kernel's, whatever the mapping. */
#define TM_KERNEL_ADDR_MIN 0xffff000000000000ull

tm_frame_kind tm_frame_kind_of(const tm_profile *p, uint32_t frame);

/* Display names of every frame, as tracemill.h describes them: the
 * function (Java: Class.method); without one, "0xADDR (libname)", ADDR
 * relative to the library when the mapping is known. lines: a frame with a
 * source file or line is "function (file:line)" (folded and SVG pass
 * p->label_lines; pprof and speedscope, which hold lines apart, false).
 * Views into the profile or into the labels' own arena. */
typedef struct tm_frame_labels {
    tm_str *of; /* of[frame] */
    size_t n;
    tm_arena arena;
} tm_frame_labels;

tm_status tm_frame_labels_build(const tm_profile *p, bool lines, tm_frame_labels *out);
/* One frame's label (with lines as p->label_lines says) formatted into
 * buf[0..cap) as snprintf does: returns its full length
 * (tm_trace_frame_label). */
size_t tm_frame_label_format(const tm_profile *p, uint32_t frame, char *buf, size_t cap);
void tm_frame_labels_release(const tm_profile *p, tm_frame_labels *l);

/* ---- periods ---- */

/* A thread's own median takes this many gaps: fewer are one pause or burst
 * away from a wrong period (two samples 800 ms apart made a 1.6 s thread in
 * a 1 s profile). */
#define TM_OWN_PERIOD_MIN_GAPS 8

/* How tm_thread_periods obtained the periods of the selected threads with
 * samples. */
typedef struct tm_period_sources {
    size_t own;     /* the median of the thread's own gaps */
    size_t overall; /* too few gaps of its own: the whole trace's median */
    size_t capped;  /* lowered to the thread's mean gap (see below) */
    size_t counted; /* measured: every sample's CPU time was counted (see below) */
} tm_period_sources;

/* Sampling period of each selected thread in ns: the median gap between
 * consecutive samples of the thread (up to 64 gaps, evenly spread, are
 * looked at, so memory is 64 entries per thread) when it has at least
 * TM_OWN_PERIOD_MIN_GAPS gaps, else the median over all threads' gaps.
 * within_span: a thread's samples times its period never exceed its span
 * (last - first sample, plus one period), so the period is at most the
 * thread's mean gap (pprof, whose cpu values are samples times period;
 * speedscope weighs each sample by its gap instead). With no gaps anywhere
 * every period is 0. A thread whose every sample came with its CPU time
 * counted by the producer (tm_prof_thread.counted_ns) has that time per
 * sample as its period, measured, neither inferred nor capped; when every
 * thread has, the overall period is the mean over all of them.
 * fixed_ns > 0 skips the inference. *per_thread has
 * p->n_threads entries; free with tm_thread_periods_free. how (may be NULL)
 * counts the threads by source. */
tm_status tm_thread_periods(const tm_profile *p, const uint8_t *sel, int64_t fixed_ns, bool within_span,
                            int64_t **per_thread, int64_t *overall, tm_period_sources *how);
void tm_thread_periods_free(const tm_profile *p, int64_t *per_thread);

/* ---- stack counts ---- */

typedef struct tm_stack_count {
    uint32_t thread; /* TM_ABSENT when counted over all threads */
    uint32_t stack;
    uint64_t count;  /* sum of sample weights */
} tm_stack_count;

typedef struct tm_stack_counts {
    tm_stack_count *v;
    size_t n, cap;
} tm_stack_counts;

/* Sample weight per stack of the selected threads (per (thread, stack)
 * when by_thread), in first-seen order. */
tm_status tm_stack_counts_build(const tm_profile *p, const uint8_t *sel, int by_thread, tm_stack_counts *out);
void tm_stack_counts_release(const tm_profile *p, tm_stack_counts *c);

#endif
