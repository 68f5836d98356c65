/*
 * tp_packages.h — Android's installed packages in the Trace Processor
 * model: the package_list table from PackagesList packets (tp_packages.c),
 * and the package a process runs as, which deobfuscation falls back to.
 */
#ifndef TM_TP_PACKAGES_H
#define TM_TP_PACKAGES_H

#include "perfetto/symbols.h" /* tm_pf_walk_error */
#include "tp/tp.h"

/* Adds the packages of one PackagesList payload (checked against its
 * schema by the reader) as Trace Processor does: a package name already
 * listed is skipped, and the packet's read_error and parse_error set
 * packages_list_has_read_errors and _parse_errors (the last packet's
 * values stay). stats: Trace Processor's single stats, by key. */
tm_status tm_tp_packages_list(tm_tp *tp, tm_bytes payload, int64_t *stats, tm_pf_walk_error *bad);

/* The package each process runs as, by upid, into *out (n_processes
 * entries, from tp->mem; free with tp->mem): the first package_list row
 * whose uid is the process's android_appid (uid % 100000); data NULL when
 * the process has no uid or no package has it. */
tm_status tm_tp_process_packages(const tm_tp *tp, tm_str **out);

#endif
