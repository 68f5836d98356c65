/*
 * differential.h — the agreement check between tracemill's two readers of
 * a Perfetto trace: the profile model (tm_trace_parse, behind `convert` and
 * `info`) and the Trace Processor SQL model (tm_db_new, behind `query`).
 * Used by tests/test_differential.c and fuzz/fuzz_differential.c; compiled
 * into the tm_differential library. Not part of libtracemill.
 *
 * tm_diff_check feeds the same bytes to both as Perfetto input and checks:
 *  - both accept or both reject;
 *  - when both reject: the same tm_status and the same error byte offset;
 *  - when both accept: the samples the profile model keeps and the rows of
 *    perf_sample, cpu_profile_stack_sample and (for StackSample packets)
 *    stack_sample are equal multisets of (ts, tid, stack), the stack being
 *    the frame names leaf to root. SQL rows without a callsite that the
 *    profile model drops (it keeps no unresolvable sample) are tolerated up
 *    to the drops its stats count (see differential.c).
 */
#ifndef TM_DIFFERENTIAL_H
#define TM_DIFFERENTIAL_H

#include <stddef.h>
#include <stdint.h>

#include "tracemill.h"
#include "tracemill_sql.h"

typedef enum tm_diff_verdict {
    TM_DIFF_AGREE = 0,
    TM_DIFF_ACCEPTANCE, /* one reader accepts, the other rejects */
    TM_DIFF_ERROR,      /* both reject, with another status or offset */
    TM_DIFF_SAMPLES,    /* both accept, with other samples */
    TM_DIFF_HARNESS     /* the check itself could not run (SQL error, out of memory) */
} tm_diff_verdict;

typedef struct tm_diff_report {
    tm_diff_verdict verdict;
    tm_error profile_err, sql_err;  /* code TM_OK when that reader accepted */
    size_t profile_samples;         /* samples the profile model keeps */
    size_t sql_samples;             /* rows of the sample tables */
    size_t sql_without_callsite;    /* of those, rows the profile model dropped */
    char message[1024];             /* the first difference; "" when they agree */
} tm_diff_report;

/* Checks buf[0..len) with default options. Returns 1 when the readers
 * agree, else 0 with the first difference in report->message. */
int tm_diff_check(const void *buf, size_t len, tm_diff_report *report);

/* The same with opts (NULL: defaults) given to both readers; the input
 * format is always Perfetto, the only one tm_db_new reads. */
int tm_diff_check_with(const void *buf, size_t len, const tm_options *opts, tm_diff_report *report);

/* The sample comparison alone, of a trace the profile model read and one
 * the SQL model read (the same one, or, to test the check, another): sets
 * verdict (TM_DIFF_AGREE, TM_DIFF_SAMPLES or TM_DIFF_HARNESS), the sample
 * counts and message; leaves the error fields alone. */
int tm_diff_compare(const tm_trace *t, tm_db *db, tm_diff_report *report);

#endif
