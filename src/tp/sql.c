/*
 * sql.c — the SQL layer: Trace Processor's tables and views over the
 * Trace Processor model (tp.h) as SQLite virtual tables, plus tm_db_*.
 *
 * Every table is one table_def: a row count, an optional row filter (the
 * views perf_sample, cpu_profile_stack_sample, perf_session, ... select
 * rows of a shared table) and a list of columns, each a getter that writes
 * one value of one row. Rows are read from the model's arrays when SQLite
 * asks for them; nothing is copied into SQLite, so opening a trace costs a
 * decode. xBestIndex answers equality and ranges on the row id (every
 * table's id, upid or utid) by direct access, which is what the usual joins
 * (callsite_id = id, frame_id = id, track_id = id) need.
 */
#include <limits.h>
#include <math.h>
#include <sqlite3.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/limits.h"
#include "tp/tp.h"
#include "wire/input.h" /* tm_input_open */
#include "tracemill_sql.h"

typedef void (*col_get)(const tm_tp *tp, size_t row, sqlite3_context *ctx);

typedef struct col_def {
    const char *name;
    const char *type;
    col_get get;
} col_def;

typedef struct table_def {
    const char *name;
    const col_def *cols;
    int n_cols;
    int n_id_cols;  /* leading columns that equal the row id (id; upid, id; ...) */
    size_t (*count)(const tm_tp *tp);
    int (*visible)(const tm_tp *tp, size_t row); /* NULL: every row */
    const uint64_t *(*visible_rows)(const tm_tp *tp); /* NULL, or visible's rows a bit each (tp.h: perf_rows) */
} table_def;

struct tm_db {
    tm_mem mem;
    tm_input source; /* the bytes decoded: the tables' strings point into them */
    tm_tp tp;
    sqlite3 *sql;
    int exporting; /* tm_db_export's own ATTACH is allowed */
};

/* ---- value helpers --------------------------------------------------- */

static void put_str(sqlite3_context *c, tm_str s) {
    if (!s.data)
        sqlite3_result_null(c);
    else
        sqlite3_result_text(c, (const char *)s.data, (int)s.len, SQLITE_STATIC);
}
static void put_cstr(sqlite3_context *c, const char *s) {
    if (s)
        sqlite3_result_text(c, s, -1, SQLITE_STATIC);
    else
        sqlite3_result_null(c);
}
static void put_id(sqlite3_context *c, uint32_t v) {
    if (v == TP_NULL)
        sqlite3_result_null(c);
    else
        sqlite3_result_int64(c, v);
}
static void put_int(sqlite3_context *c, int64_t v) {
    if (v == TP_NO_INT)
        sqlite3_result_null(c);
    else
        sqlite3_result_int64(c, v);
}
/* Unsigned 64-bit values are shown as Trace Processor does: as int64. */
static void put_u64(sqlite3_context *c, uint64_t v) { sqlite3_result_int64(c, (int64_t)v); }

static void col_row(const tm_tp *tp, size_t row, sqlite3_context *c) {
    (void)tp;
    sqlite3_result_int64(c, (int64_t)row);
}
static void col_null(const tm_tp *tp, size_t row, sqlite3_context *c) {
    (void)tp, (void)row;
    sqlite3_result_null(c);
}
static void col_zero(const tm_tp *tp, size_t row, sqlite3_context *c) {
    (void)tp, (void)row;
    sqlite3_result_int64(c, 0);
}

#define GETTER(fn, T, arr, expr)                                          \
    static void fn(const tm_tp *tp, size_t row, sqlite3_context *c) {     \
        const T *r = &tp->arr[row];                                       \
        expr;                                                             \
    }

/* ---- process, thread -------------------------------------------------- */

GETTER(proc_pid, tp_process, processes, sqlite3_result_int64(c, r->pid))
GETTER(proc_name, tp_process, processes, put_str(c, r->name))
GETTER(proc_parent, tp_process, processes, put_id(c, r->parent_upid))
GETTER(proc_uid, tp_process, processes, put_int(c, r->uid))
GETTER(proc_appid, tp_process, processes, put_int(c, r->uid == TP_NO_INT ? TP_NO_INT : r->uid % 100000))
GETTER(proc_userid, tp_process, processes, put_int(c, r->uid == TP_NO_INT ? TP_NO_INT : r->uid / 100000))
GETTER(proc_cmdline, tp_process, processes, put_str(c, r->cmdline))

static const col_def process_cols[] = {
    {"upid", "INTEGER", col_row},       {"id", "INTEGER", col_row},
    {"pid", "INTEGER", proc_pid},       {"name", "TEXT", proc_name},
    {"start_ts", "INTEGER", col_null},  {"end_ts", "INTEGER", col_null},
    {"parent_upid", "INTEGER", proc_parent}, {"uid", "INTEGER", proc_uid},
    {"android_appid", "INTEGER", proc_appid}, {"android_user_id", "INTEGER", proc_userid},
    {"cmdline", "TEXT", proc_cmdline},  {"arg_set_id", "INTEGER", col_null},
    {"machine_id", "INTEGER", col_zero},
};

GETTER(thr_tid, tp_thread, threads, sqlite3_result_int64(c, r->tid))
GETTER(thr_name, tp_thread, threads, put_str(c, r->name))
GETTER(thr_upid, tp_thread, threads, put_id(c, r->upid))
GETTER(thr_main, tp_thread, threads, put_int(c, r->is_main < 0 ? TP_NO_INT : r->is_main))
GETTER(thr_idle, tp_thread, threads, sqlite3_result_int64(c, r->is_idle))

static const col_def thread_cols[] = {
    {"utid", "INTEGER", col_row},      {"id", "INTEGER", col_row},
    {"tid", "INTEGER", thr_tid},       {"name", "TEXT", thr_name},
    {"start_ts", "INTEGER", col_null}, {"end_ts", "INTEGER", col_null},
    {"upid", "INTEGER", thr_upid},     {"is_main_thread", "INTEGER", thr_main},
    {"is_idle", "INTEGER", thr_idle},  {"machine_id", "INTEGER", col_zero},
    {"arg_set_id", "INTEGER", col_null},
};

/* ---- stack_profile_* -------------------------------------------------- */

GETTER(map_build_id, tp_mapping, mappings, put_str(c, r->build_id))
GETTER(map_exact, tp_mapping, mappings, put_u64(c, r->exact_offset))
GETTER(map_start_off, tp_mapping, mappings, put_u64(c, r->start_offset))
GETTER(map_start, tp_mapping, mappings, put_u64(c, r->start))
GETTER(map_end, tp_mapping, mappings, put_u64(c, r->end))
GETTER(map_bias, tp_mapping, mappings, put_u64(c, r->load_bias))
GETTER(map_name, tp_mapping, mappings, put_str(c, r->name))

static const col_def mapping_cols[] = {
    {"id", "INTEGER", col_row},          {"build_id", "TEXT", map_build_id},
    {"exact_offset", "INTEGER", map_exact}, {"start_offset", "INTEGER", map_start_off},
    {"start", "INTEGER", map_start},     {"end", "INTEGER", map_end},
    {"load_bias", "INTEGER", map_bias},  {"name", "TEXT", map_name},
};

GETTER(frame_name, tp_frame, frames, put_str(c, r->name))
GETTER(frame_mapping, tp_frame, frames, put_id(c, r->mapping))
GETTER(frame_rel_pc, tp_frame, frames, put_u64(c, r->rel_pc))
GETTER(frame_symbols, tp_frame, frames, put_id(c, r->symbol_set))
GETTER(frame_type, tp_frame, frames, put_str(c, r->type))
GETTER(frame_deobf, tp_frame, frames, put_str(c, r->deobfuscated_name))

static const col_def frame_cols[] = {
    {"id", "INTEGER", col_row},           {"name", "TEXT", frame_name},
    {"mapping", "INTEGER", frame_mapping}, {"rel_pc", "INTEGER", frame_rel_pc},
    {"symbol_set_id", "INTEGER", frame_symbols}, {"deobfuscated_name", "TEXT", frame_deobf},
    {"type", "TEXT", frame_type},
};

static void cs_depth(const tm_tp *tp, size_t row, sqlite3_context *c) {
    sqlite3_result_int64(c, tm_tp_cs_depth(tp, (uint32_t)row));
}
static void cs_parent(const tm_tp *tp, size_t row, sqlite3_context *c) { put_id(c, tm_tp_cs_parent(tp, (uint32_t)row)); }
static void cs_frame(const tm_tp *tp, size_t row, sqlite3_context *c) {
    sqlite3_result_int64(c, tm_tp_cs_frame(tp, (uint32_t)row));
}

static const col_def callsite_cols[] = {
    {"id", "INTEGER", col_row},
    {"depth", "INTEGER", cs_depth},
    {"parent_id", "INTEGER", cs_parent},
    {"frame_id", "INTEGER", cs_frame},
};

GETTER(sym_set, tp_symbol, symbols, sqlite3_result_int64(c, r->symbol_set))
GETTER(sym_name, tp_symbol, symbols, put_str(c, r->name))
GETTER(sym_file, tp_symbol, symbols, put_str(c, r->source_file))
GETTER(sym_line, tp_symbol, symbols, r->no_line ? sqlite3_result_null(c) : sqlite3_result_int64(c, r->line))
GETTER(sym_inlined, tp_symbol, symbols, sqlite3_result_int64(c, r->inlined))

static const col_def symbol_cols[] = {
    {"id", "INTEGER", col_row},        {"symbol_set_id", "INTEGER", sym_set},
    {"name", "TEXT", sym_name},        {"source_file", "TEXT", sym_file},
    {"line_number", "INTEGER", sym_line}, {"inlined", "INTEGER", sym_inlined},
};

/* ---- samples ---------------------------------------------------------- */

static const tp_sample_attr *attr_of(const tm_tp *tp, size_t row) { return &tp->attrs[tp->s_attr[row]]; }
static const tp_task_ctx *task_of(const tm_tp *tp, size_t row) {
    uint32_t t = tp->s_task[row];
    return t == TP_NULL ? NULL : &tp->tasks[t];
}
static const tp_exec_ctx *exec_of(const tm_tp *tp, size_t row) {
    uint32_t e = attr_of(tp, row)->exec;
    return e == TP_NULL ? NULL : &tp->execs[e];
}

static void smp_ts(const tm_tp *tp, size_t row, sqlite3_context *c) { sqlite3_result_int64(c, tp->s_ts[row]); }
static void smp_callsite(const tm_tp *tp, size_t row, sqlite3_context *c) { put_id(c, tp->s_callsite[row]); }
static void smp_task(const tm_tp *tp, size_t row, sqlite3_context *c) { put_id(c, tp->s_task[row]); }
static void smp_exec(const tm_tp *tp, size_t row, sqlite3_context *c) { put_id(c, attr_of(tp, row)->exec); }
static void smp_session(const tm_tp *tp, size_t row, sqlite3_context *c) { put_id(c, attr_of(tp, row)->session); }
static void smp_utid(const tm_tp *tp, size_t row, sqlite3_context *c) {
    const tp_task_ctx *t = task_of(tp, row);
    put_id(c, t ? t->utid : TP_NULL);
}
static void smp_cpu(const tm_tp *tp, size_t row, sqlite3_context *c) {
    const tp_exec_ctx *e = exec_of(tp, row);
    put_id(c, e ? e->cpu : TP_NULL);
}
static void smp_mode(const tm_tp *tp, size_t row, sqlite3_context *c) {
    const tp_exec_ctx *e = exec_of(tp, row);
    put_cstr(c, e ? e->mode : NULL);
}
static void smp_unwind(const tm_tp *tp, size_t row, sqlite3_context *c) {
    put_cstr(c, tm_tp_unwind_error_name(attr_of(tp, row)->unwind_error));
}
static void smp_priority(const tm_tp *tp, size_t row, sqlite3_context *c) {
    sqlite3_result_int64(c, attr_of(tp, row)->priority);
}
static void smp_source(const tm_tp *tp, size_t row, sqlite3_context *c) {
    const tp_sample_attr *a = attr_of(tp, row);
    if (a->kind == TP_SRC_CHROME)
        put_cstr(c, "chrome");
    else if (a->session != TP_NULL)
        put_str(c, tp->sessions[a->session].source);
    else
        sqlite3_result_null(c);
}
static size_t count_samples(const tm_tp *tp) { return tp->n_samples; }
static int is_perf_sample(const tm_tp *tp, size_t row) { return attr_of(tp, row)->kind == TP_SRC_PERF; }
static int is_chrome_sample(const tm_tp *tp, size_t row) { return attr_of(tp, row)->kind == TP_SRC_CHROME; }
static const uint64_t *perf_rows(const tm_tp *tp) { return tp->perf_rows; }
static const uint64_t *chrome_rows(const tm_tp *tp) { return tp->chrome_rows; }

static const col_def perf_sample_cols[] = {
    {"id", "INTEGER", col_row},         {"ts", "INTEGER", smp_ts},
    {"utid", "INTEGER", smp_utid},      {"cpu", "INTEGER", smp_cpu},
    {"cpu_mode", "TEXT", smp_mode},     {"callsite_id", "INTEGER", smp_callsite},
    {"unwind_error", "TEXT", smp_unwind}, {"perf_session_id", "INTEGER", smp_session},
};
static const col_def cpu_profile_cols[] = {
    {"id", "INTEGER", col_row},          {"ts", "INTEGER", smp_ts},
    {"callsite_id", "INTEGER", smp_callsite}, {"utid", "INTEGER", smp_utid},
    {"process_priority", "INTEGER", smp_priority},
};
static const col_def stack_sample_cols[] = {
    {"id", "INTEGER", col_row},            {"ts", "INTEGER", smp_ts},
    {"source", "TEXT", smp_source},        {"task_context_id", "INTEGER", smp_task},
    {"execution_context_id", "INTEGER", smp_exec}, {"callsite_id", "INTEGER", smp_callsite},
    {"session_id", "INTEGER", smp_session},
};

GETTER(task_upid, tp_task_ctx, tasks, put_id(c, r->upid))
GETTER(task_utid, tp_task_ctx, tasks, put_id(c, r->utid))
GETTER(task_async, tp_task_ctx, tasks, put_id(c, r->async))
static const col_def task_cols[] = {
    {"id", "INTEGER", col_row},
    {"upid", "INTEGER", task_upid},
    {"utid", "INTEGER", task_utid},
    {"async_context_id", "INTEGER", task_async},
};

GETTER(exec_cpu, tp_exec_ctx, execs, put_id(c, r->cpu))
GETTER(exec_mode, tp_exec_ctx, execs, put_cstr(c, r->mode))
static const col_def exec_cols[] = {
    {"id", "INTEGER", col_row},
    {"ucpu", "INTEGER", exec_cpu},
    {"cpu_mode", "TEXT", exec_mode},
};

GETTER(async_name, tp_async_ctx, asyncs, put_str(c, r->name))
GETTER(async_kind, tp_async_ctx, asyncs, put_str(c, r->kind))
GETTER(async_parent, tp_async_ctx, asyncs, put_id(c, r->parent))
static const col_def async_cols[] = {
    {"id", "INTEGER", col_row},
    {"name", "TEXT", async_name},
    {"kind", "TEXT", async_kind},
    {"parent_id", "INTEGER", async_parent},
};

GETTER(sess_source, tp_session, sessions, put_str(c, r->source))
GETTER(sess_unit, tp_session, sessions, put_str(c, r->timebase_unit))
GETTER(sess_cmdline, tp_session, sessions, put_str(c, r->cmdline))
static const col_def perf_session_cols[] = {
    {"id", "INTEGER", col_row},
    {"perf_session_id", "INTEGER", col_row},
    {"cmdline", "TEXT", sess_cmdline},
};
static const col_def stack_session_cols[] = {
    {"id", "INTEGER", col_row},
    {"source", "TEXT", sess_source},
    {"timebase_unit", "TEXT", sess_unit},
    {"cmdline", "TEXT", sess_cmdline},
};
static int is_perf_session(const tm_tp *tp, size_t row) { return tp->sessions[row].is_perf; }
static int is_stack_session(const tm_tp *tp, size_t row) { return !tp->sessions[row].is_perf; }

/* ---- tracks and counters --------------------------------------------- */

static const char *track_type(const tp_track *t) {
    switch (t->kind) {
    case TP_TRACK_PERF_COUNTER: return "perf_cpu_counter";
    case TP_TRACK_PROCESS_COUNTER: return "process_memory_counter";
    default: return "stack_sample_counter";
    }
}
GETTER(trk_name, tp_track, tracks, put_str(c, r->name))
GETTER(trk_type, tp_track, tracks, put_cstr(c, track_type(r)))
GETTER(trk_unit, tp_track, tracks, put_str(c, r->unit))
GETTER(trk_session, tp_track, tracks, put_id(c, r->session))
GETTER(trk_cpu, tp_track, tracks, put_id(c, r->cpu))
GETTER(trk_timebase, tp_track, tracks, sqlite3_result_int64(c, r->is_timebase))
static const col_def track_cols[] = {
    {"id", "INTEGER", col_row},          {"name", "TEXT", trk_name},
    {"type", "TEXT", trk_type},          {"dimension_arg_set_id", "INTEGER", col_null},
    {"parent_id", "INTEGER", col_null},  {"source_arg_set_id", "INTEGER", col_null},
    {"machine_id", "INTEGER", col_zero}, {"track_group_id", "INTEGER", col_null},
};
static const col_def perf_counter_track_cols[] = {
    {"id", "INTEGER", col_row},          {"name", "TEXT", trk_name},
    {"type", "TEXT", trk_type},          {"parent_id", "INTEGER", col_null},
    {"source_arg_set_id", "INTEGER", col_null}, {"machine_id", "INTEGER", col_zero},
    {"unit", "TEXT", trk_unit},          {"description", "TEXT", col_null},
    {"perf_session_id", "INTEGER", trk_session}, {"cpu", "INTEGER", trk_cpu},
    {"is_timebase", "INTEGER", trk_timebase},
};
/* Every track is a counter track: counter_track, Trace Processor's parent
 * table of the three kinds, lists them all with the columns they share. */
static const col_def counter_track_cols[] = {
    {"id", "INTEGER", col_row},          {"name", "TEXT", trk_name},
    {"type", "TEXT", trk_type},          {"parent_id", "INTEGER", col_null},
    {"source_arg_set_id", "INTEGER", col_null}, {"machine_id", "INTEGER", col_zero},
    {"unit", "TEXT", trk_unit},          {"description", "TEXT", col_null},
};
static const col_def stack_counter_track_cols[] = {
    {"id", "INTEGER", col_row},          {"name", "TEXT", trk_name},
    {"type", "TEXT", trk_type},          {"unit", "TEXT", trk_unit},
    {"session_id", "INTEGER", trk_session}, {"is_timebase", "INTEGER", trk_timebase},
};
GETTER(trk_upid, tp_track, tracks, put_id(c, r->upid))
static const col_def process_counter_track_cols[] = {
    {"id", "INTEGER", col_row},          {"name", "TEXT", trk_name},
    {"type", "TEXT", trk_type},          {"parent_id", "INTEGER", col_null},
    {"source_arg_set_id", "INTEGER", col_null}, {"machine_id", "INTEGER", col_zero},
    {"unit", "TEXT", trk_unit},          {"description", "TEXT", col_null},
    {"upid", "INTEGER", trk_upid},
};
static int is_process_track(const tm_tp *tp, size_t row) { return tp->tracks[row].kind == TP_TRACK_PROCESS_COUNTER; }
static int is_perf_track(const tm_tp *tp, size_t row) { return tp->tracks[row].kind == TP_TRACK_PERF_COUNTER; }
static int is_stack_track(const tm_tp *tp, size_t row) {
    return tp->tracks[row].kind == TP_TRACK_STACK_SAMPLE_COUNTER;
}

GETTER(ctr_ts, tp_counter, counters, sqlite3_result_int64(c, r->ts))
GETTER(ctr_track, tp_counter, counters, sqlite3_result_int64(c, r->track))
GETTER(ctr_value, tp_counter, counters, sqlite3_result_double(c, r->value))
GETTER(ctr_sample, tp_counter, counters, put_id(c, r->sample))
static const col_def counter_cols[] = {
    {"id", "INTEGER", col_row},      {"ts", "INTEGER", ctr_ts},
    {"track_id", "INTEGER", ctr_track}, {"value", "REAL", ctr_value},
    {"arg_set_id", "INTEGER", col_null},
};
static const col_def stack_counter_cols[] = {
    {"id", "INTEGER", col_row},      {"ts", "INTEGER", ctr_ts},
    {"track_id", "INTEGER", ctr_track}, {"value", "REAL", ctr_value},
    {"stack_sample_id", "INTEGER", ctr_sample},
};
static int is_stack_counter(const tm_tp *tp, size_t row) { return tp->counters[row].sample != TP_NULL; }

/* ---- stats, metadata, clock_snapshot ---------------------------------- */

static const char *const severity_names[] = {"info", "notice", "data_loss", "error"};
static const char *const source_names[] = {"trace", "analysis"};

static const tp_stat_def *stat_def(const tm_tp *tp, size_t row) { return tm_tp_stat_def(tp->stats[row].key); }
static void st_name(const tm_tp *tp, size_t row, sqlite3_context *c) { put_cstr(c, stat_def(tp, row)->name); }
GETTER(st_key, tp_stat, stats, sqlite3_result_int64(c, r->key))
GETTER(st_idx, tp_stat, stats, put_int(c, r->idx))
GETTER(st_value, tp_stat, stats, sqlite3_result_int64(c, r->value))
static void st_severity(const tm_tp *tp, size_t row, sqlite3_context *c) {
    put_cstr(c, severity_names[stat_def(tp, row)->severity]);
}
static void st_source(const tm_tp *tp, size_t row, sqlite3_context *c) {
    put_cstr(c, source_names[stat_def(tp, row)->source]);
}
static void st_description(const tm_tp *tp, size_t row, sqlite3_context *c) {
    put_cstr(c, tm_tp_stat_description(tp->stats[row].key));
}
static void st_scope(const tm_tp *tp, size_t row, sqlite3_context *c) {
    if (stat_def(tp, row)->global)
        sqlite3_result_null(c);
    else
        sqlite3_result_int64(c, tp->stats[row].machine);
}
static void st_trace(const tm_tp *tp, size_t row, sqlite3_context *c) {
    if (stat_def(tp, row)->global)
        sqlite3_result_null(c);
    else
        sqlite3_result_int64(c, 0);
}
static const col_def stats_cols[] = {
    {"id", "INTEGER", col_row},          {"name", "TEXT", st_name},
    {"key", "INTEGER", st_key},          {"idx", "INTEGER", st_idx},
    {"severity", "TEXT", st_severity},   {"source", "TEXT", st_source},
    {"value", "INTEGER", st_value},      {"description", "TEXT", st_description},
    {"machine_id", "INTEGER", st_scope}, {"trace_id", "INTEGER", st_trace},
};

GETTER(meta_name, tp_meta, meta, put_cstr(c, r->name))
static void meta_key_type(const tm_tp *tp, size_t row, sqlite3_context *c) {
    (void)tp, (void)row;
    put_cstr(c, "single");
}
GETTER(meta_int, tp_meta, meta, put_int(c, r->int_value))
GETTER(meta_str, tp_meta, meta, put_str(c, r->str_value))
static const col_def meta_cols[] = {
    {"id", "INTEGER", col_row},         {"name", "TEXT", meta_name},
    {"key_type", "TEXT", meta_key_type},    {"int_value", "INTEGER", meta_int},
    {"str_value", "TEXT", meta_str},    {"machine_id", "INTEGER", col_zero},
    {"trace_id", "INTEGER", col_zero},
};

GETTER(clk_ts, tp_clock_row, clocks, sqlite3_result_int64(c, r->ts))
GETTER(clk_id, tp_clock_row, clocks, sqlite3_result_int64(c, r->clock_id))
GETTER(clk_name, tp_clock_row, clocks, put_cstr(c, tm_tp_clock_name(r->clock_id)))
GETTER(clk_value, tp_clock_row, clocks, sqlite3_result_int64(c, r->value))
GETTER(clk_snapshot, tp_clock_row, clocks, sqlite3_result_int64(c, r->snapshot))
static const col_def clock_cols[] = {
    {"id", "INTEGER", col_row},          {"ts", "INTEGER", clk_ts},
    {"clock_id", "INTEGER", clk_id},     {"clock_name", "TEXT", clk_name},
    {"clock_value", "INTEGER", clk_value}, {"snapshot_id", "INTEGER", clk_snapshot},
    {"machine_id", "INTEGER", col_zero},
};

/* ---- heap profiles ----------------------------------------------------- */

GETTER(ha_ts, tp_heap_alloc, heap_allocs, sqlite3_result_int64(c, r->ts))
GETTER(ha_upid, tp_heap_alloc, heap_allocs, put_id(c, r->upid))
GETTER(ha_heap, tp_heap_alloc, heap_allocs, put_str(c, r->heap_name))
GETTER(ha_callsite, tp_heap_alloc, heap_allocs, put_id(c, r->callsite))
GETTER(ha_count, tp_heap_alloc, heap_allocs, sqlite3_result_int64(c, r->count))
GETTER(ha_size, tp_heap_alloc, heap_allocs, sqlite3_result_int64(c, r->size))
static const col_def heap_alloc_cols[] = {
    {"id", "INTEGER", col_row},           {"ts", "INTEGER", ha_ts},       {"upid", "INTEGER", ha_upid},
    {"heap_name", "TEXT", ha_heap},       {"callsite_id", "INTEGER", ha_callsite},
    {"count", "INTEGER", ha_count},       {"size", "INTEGER", ha_size},
};

GETTER(hd_ts, tp_heap_dump, heap_dumps, sqlite3_result_int64(c, r->ts))
GETTER(hd_ts_end, tp_heap_dump, heap_dumps, sqlite3_result_int64(c, r->ts_end))
GETTER(hd_dur, tp_heap_dump, heap_dumps, sqlite3_result_int64(c, (int64_t)((uint64_t)r->ts_end - (uint64_t)r->ts)))
GETTER(hd_upid, tp_heap_dump, heap_dumps, put_id(c, r->upid))
GETTER(hd_heap, tp_heap_dump, heap_dumps, put_str(c, r->heap_name))
static const col_def heap_dump_cols[] = {
    {"id", "INTEGER", col_row},     {"ts", "INTEGER", hd_ts},       {"dur", "INTEGER", hd_dur},
    {"ts_end", "INTEGER", hd_ts_end}, {"upid", "INTEGER", hd_upid}, {"heap_name", "TEXT", hd_heap},
};

/* ---- package_list ------------------------------------------------------ */

GETTER(pkg_name, tp_package, packages, put_str(c, r->name))
GETTER(pkg_uid, tp_package, packages, sqlite3_result_int64(c, r->uid))
GETTER(pkg_debuggable, tp_package, packages, sqlite3_result_int64(c, r->debuggable))
GETTER(pkg_profileable, tp_package, packages, sqlite3_result_int64(c, r->profileable_from_shell))
GETTER(pkg_version, tp_package, packages, sqlite3_result_int64(c, r->version_code))
static const col_def package_cols[] = {
    {"id", "INTEGER", col_row},           {"package_name", "TEXT", pkg_name},
    {"uid", "INTEGER", pkg_uid},          {"debuggable", "INTEGER", pkg_debuggable},
    {"profileable_from_shell", "INTEGER", pkg_profileable}, {"version_code", "INTEGER", pkg_version},
};

/* ---- the table list --------------------------------------------------- */

#define COUNT_OF(arr) \
    static size_t count_##arr(const tm_tp *tp) { return tp->n_##arr; }
COUNT_OF(processes)
COUNT_OF(threads)
COUNT_OF(mappings)
COUNT_OF(frames)
static size_t count_callsites(const tm_tp *tp) { return tp->callsites.n; }
COUNT_OF(symbols)
COUNT_OF(tasks)
COUNT_OF(execs)
COUNT_OF(asyncs)
COUNT_OF(sessions)
COUNT_OF(tracks)
COUNT_OF(counters)
COUNT_OF(stats)
COUNT_OF(meta)
COUNT_OF(clocks)
COUNT_OF(heap_allocs)
COUNT_OF(heap_dumps)
COUNT_OF(packages)

#define TABLE(name, cols, ids, count, visible) \
    {name, cols, (int)(sizeof cols / sizeof cols[0]), ids, count, visible, NULL}
#define TABLE_OF_ROWS(name, cols, ids, count, visible, visible_rows) \
    {name, cols, (int)(sizeof cols / sizeof cols[0]), ids, count, visible, visible_rows}

static const table_def tables[] = {
    TABLE("process", process_cols, 2, count_processes, NULL),
    TABLE("thread", thread_cols, 2, count_threads, NULL),
    TABLE("stack_profile_mapping", mapping_cols, 1, count_mappings, NULL),
    TABLE("stack_profile_frame", frame_cols, 1, count_frames, NULL),
    TABLE("stack_profile_callsite", callsite_cols, 1, count_callsites, NULL),
    TABLE("stack_profile_symbol", symbol_cols, 1, count_symbols, NULL),
    TABLE_OF_ROWS("perf_sample", perf_sample_cols, 1, count_samples, is_perf_sample, perf_rows),
    TABLE_OF_ROWS("cpu_profile_stack_sample", cpu_profile_cols, 1, count_samples, is_chrome_sample, chrome_rows),
    TABLE("stack_sample", stack_sample_cols, 1, count_samples, NULL),
    TABLE("stack_sample_task_context", task_cols, 1, count_tasks, NULL),
    TABLE("stack_sample_execution_context", exec_cols, 1, count_execs, NULL),
    TABLE("stack_sample_async_context", async_cols, 1, count_asyncs, NULL),
    TABLE("perf_session", perf_session_cols, 2, count_sessions, is_perf_session),
    TABLE("stack_sample_session", stack_session_cols, 1, count_sessions, is_stack_session),
    TABLE("track", track_cols, 1, count_tracks, NULL),
    TABLE("counter_track", counter_track_cols, 1, count_tracks, NULL),
    TABLE("perf_counter_track", perf_counter_track_cols, 1, count_tracks, is_perf_track),
    TABLE("stack_sample_counter_track", stack_counter_track_cols, 1, count_tracks, is_stack_track),
    TABLE("process_counter_track", process_counter_track_cols, 1, count_tracks, is_process_track),
    TABLE("counter", counter_cols, 1, count_counters, NULL),
    TABLE("stack_sample_counter", stack_counter_cols, 1, count_counters, is_stack_counter),
    TABLE("stats", stats_cols, 1, count_stats, NULL),
    TABLE("metadata", meta_cols, 1, count_meta, NULL),
    TABLE("clock_snapshot", clock_cols, 1, count_clocks, NULL),
    TABLE("heap_profile_allocation", heap_alloc_cols, 1, count_heap_allocs, NULL),
    TABLE("heap_profile", heap_dump_cols, 1, count_heap_dumps, NULL),
    TABLE("package_list", package_cols, 1, count_packages, NULL),
};
#define N_TABLES (sizeof tables / sizeof tables[0])

/* ---- the virtual-table module ----------------------------------------- */

typedef struct vtab {
    sqlite3_vtab base;
    const table_def *def;
    const tm_tp *tp;
    const uint64_t *visible_rows; /* def's, or NULL */
} vtab;

typedef struct vcursor {
    sqlite3_vtab_cursor base;
    size_t row, end; /* rows [row, end) remain */
} vcursor;

typedef struct module_ctx {
    const table_def *def;
    const tm_tp *tp;
} module_ctx;

static int vt_connect(sqlite3 *db, void *aux, int argc, const char *const *argv, sqlite3_vtab **out,
                      char **errmsg) {
    (void)argc, (void)argv, (void)errmsg;
    const module_ctx *m = aux;
    char decl[2048];
    size_t n = (size_t)snprintf(decl, sizeof decl, "CREATE TABLE x(");
    for (int i = 0; i < m->def->n_cols && n < sizeof decl; i++)
        n += (size_t)snprintf(decl + n, sizeof decl - n, "%s\"%s\" %s", i ? ", " : "", m->def->cols[i].name,
                              m->def->cols[i].type);
    if (n + 2 >= sizeof decl) return SQLITE_ERROR;
    memcpy(decl + n, ")", 2);
    int rc = sqlite3_declare_vtab(db, decl);
    if (rc != SQLITE_OK) return rc;
    vtab *v = sqlite3_malloc(sizeof *v);
    if (!v) return SQLITE_NOMEM;
    memset(v, 0, sizeof *v);
    v->def = m->def;
    v->tp = m->tp;
    v->visible_rows = m->def->visible_rows ? m->def->visible_rows(m->tp) : NULL;
    *out = &v->base;
    return SQLITE_OK;
}

static int vt_disconnect(sqlite3_vtab *v) {
    sqlite3_free(v);
    return SQLITE_OK;
}

/* idxNum bits: 1 id = ?, 2 id > or >= ?, 4 id < or <= ? (argv in that order;
 * idxStr says which of > / >= and < / <= via 'g'/'G', 'l'/'L'). */
static int vt_best_index(sqlite3_vtab *tab, sqlite3_index_info *info) {
    const vtab *v = (const vtab *)tab;
    int eq = -1, lo = -1, hi = -1;
    for (int i = 0; i < info->nConstraint; i++) {
        const struct sqlite3_index_constraint *c = &info->aConstraint[i];
        if (!c->usable || c->iColumn >= v->def->n_id_cols) continue; /* -1 is the rowid, also the id */
        if (c->op == SQLITE_INDEX_CONSTRAINT_EQ && eq < 0) eq = i;
        if ((c->op == SQLITE_INDEX_CONSTRAINT_GT || c->op == SQLITE_INDEX_CONSTRAINT_GE) && lo < 0) lo = i;
        if ((c->op == SQLITE_INDEX_CONSTRAINT_LT || c->op == SQLITE_INDEX_CONSTRAINT_LE) && hi < 0) hi = i;
    }
    double rows = (double)v->def->count(v->tp) + 1;
    int argv_i = 1;
    info->idxNum = 0;
    if (eq >= 0) {
        info->aConstraintUsage[eq].argvIndex = argv_i++;
        info->aConstraintUsage[eq].omit = 1;
        info->idxNum = 1;
        info->estimatedCost = 1;
        info->estimatedRows = 1;
        info->idxFlags = SQLITE_INDEX_SCAN_UNIQUE;
    } else {
        char *flags = sqlite3_mprintf("%c%c", lo >= 0 && info->aConstraint[lo].op == SQLITE_INDEX_CONSTRAINT_GE ? 'G' : 'g',
                                      hi >= 0 && info->aConstraint[hi].op == SQLITE_INDEX_CONSTRAINT_LE ? 'L' : 'l');
        if (!flags) return SQLITE_NOMEM;
        info->idxStr = flags;
        info->needToFreeIdxStr = 1;
        if (lo >= 0) {
            info->aConstraintUsage[lo].argvIndex = argv_i++;
            info->aConstraintUsage[lo].omit = 1;
            info->idxNum |= 2;
            rows /= 2;
        }
        if (hi >= 0) {
            info->aConstraintUsage[hi].argvIndex = argv_i++;
            info->aConstraintUsage[hi].omit = 1;
            info->idxNum |= 4;
            rows /= 2;
        }
        info->estimatedCost = rows + 10;
        info->estimatedRows = (sqlite3_int64)rows;
    }
    /* Rows come out in id order. */
    if (info->nOrderBy == 1 && info->aOrderBy[0].iColumn >= 0 &&
        info->aOrderBy[0].iColumn < v->def->n_id_cols && !info->aOrderBy[0].desc)
        info->orderByConsumed = 1;
    return SQLITE_OK;
}

static int vt_open(sqlite3_vtab *tab, sqlite3_vtab_cursor **out) {
    (void)tab;
    vcursor *c = sqlite3_malloc(sizeof *c);
    if (!c) return SQLITE_NOMEM;
    memset(c, 0, sizeof *c);
    *out = &c->base;
    return SQLITE_OK;
}

static int vt_close(sqlite3_vtab_cursor *c) {
    sqlite3_free(c);
    return SQLITE_OK;
}

/* Moves c to its first visible row (or its end): a word of visible_rows at
 * a time when the table has them, else row by row. */
static inline void skip_hidden(vcursor *c) {
    const vtab *v = (const vtab *)c->base.pVtab;
    if (!v->def->visible) return;
    if (v->visible_rows) {
        while (c->row < c->end) {
            uint64_t later = v->visible_rows[c->row / 64] >> (c->row % 64);
            if (later) {
                c->row += (size_t)__builtin_ctzll(later);
                break;
            }
            c->row = (c->row / 64 + 1) * 64;
        }
        if (c->row > c->end) c->row = c->end;
        return;
    }
    while (c->row < c->end && !v->def->visible(v->tp, c->row)) c->row++;
}

/* Narrows rows [*lo, *hi) to those with `id > val` or `id >= val`
 * (lower) or `id < val` or `id <= val` (upper). SQLite orders NULL before
 * numbers, and text and blobs after them. */
static void bound_rows(sqlite3_value *val, int lower, int inclusive, size_t *lo, size_t *hi) {
    int t = sqlite3_value_numeric_type(val);
    if (t == SQLITE_NULL) {
        *hi = 0; /* a comparison with NULL is never true */
        return;
    }
    if (t != SQLITE_INTEGER && t != SQLITE_FLOAT) {
        if (lower) *hi = 0; /* every id is below text and blobs */
        return;
    }
    double d = sqlite3_value_double(val);
    if (lower) {
        double first = inclusive ? ceil(d) : floor(d) + 1;
        if (first > (double)*lo) *lo = first >= (double)*hi ? *hi : (size_t)first;
    } else {
        double end = inclusive ? floor(d) + 1 : ceil(d);
        if (end < (double)*hi) *hi = end <= 0 ? 0 : (size_t)end;
    }
}

static int vt_filter(sqlite3_vtab_cursor *cur, int idx_num, const char *idx_str, int argc,
                     sqlite3_value **argv) {
    (void)argc;
    vcursor *c = (vcursor *)cur;
    const vtab *v = (const vtab *)cur->pVtab;
    size_t n = v->def->count(v->tp);
    c->row = 0;
    c->end = n;
    if (idx_num & 1) {
        /* Only an integral number in range names a row. */
        int t = sqlite3_value_numeric_type(argv[0]);
        double id = sqlite3_value_double(argv[0]);
        if ((t != SQLITE_INTEGER && t != SQLITE_FLOAT) || id < 0 || id >= (double)n || id != floor(id)) {
            c->end = 0;
            return SQLITE_OK;
        }
        c->row = (size_t)id;
        /* the one row tested by itself (test_sql compares it with the scan's visible_rows) */
        c->end = v->def->visible && !v->def->visible(v->tp, c->row) ? c->row : c->row + 1;
        return SQLITE_OK;
    }
    int a = 0;
    if (idx_num & 2) bound_rows(argv[a++], 1, idx_str[0] == 'G', &c->row, &c->end);
    if (idx_num & 4) bound_rows(argv[a++], 0, idx_str[1] == 'L', &c->row, &c->end);
    if (c->row > c->end) c->row = c->end;
    skip_hidden(c);
    return SQLITE_OK;
}

static int vt_next(sqlite3_vtab_cursor *cur) {
    vcursor *c = (vcursor *)cur;
    c->row++;
    skip_hidden(c);
    return SQLITE_OK;
}

static int vt_eof(sqlite3_vtab_cursor *cur) {
    const vcursor *c = (const vcursor *)cur;
    return c->row >= c->end;
}

static int vt_column(sqlite3_vtab_cursor *cur, sqlite3_context *ctx, int i) {
    const vcursor *c = (const vcursor *)cur;
    const vtab *v = (const vtab *)cur->pVtab;
    v->def->cols[i].get(v->tp, c->row, ctx);
    return SQLITE_OK;
}

static int vt_rowid(sqlite3_vtab_cursor *cur, sqlite3_int64 *out) {
    *out = (sqlite3_int64)((const vcursor *)cur)->row;
    return SQLITE_OK;
}

static const sqlite3_module table_module = {
    .iVersion = 1,
    .xCreate = vt_connect,
    .xConnect = vt_connect,
    .xBestIndex = vt_best_index,
    .xDisconnect = vt_disconnect,
    .xDestroy = vt_disconnect,
    .xOpen = vt_open,
    .xClose = vt_close,
    .xFilter = vt_filter,
    .xNext = vt_next,
    .xEof = vt_eof,
    .xColumn = vt_column,
    .xRowid = vt_rowid,
};

/* ---- tm_db ------------------------------------------------------------- */

static tm_status sql_fail(tm_error *err, sqlite3 *db, const char *what) {
    return tm_fail(err, TM_ERR_IO, 0, NULL, "%s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

/* ---- the sandbox: statements read the trace, they write no file ---- */

/* Pragmas that only report; any other pragma may not set a value. */
static int pragma_reads(const char *name, const char *value) {
    static const char *const with_argument[] = {
        "table_info", "table_xinfo", "table_list", "index_list", "index_info", "index_xinfo",
        "foreign_key_list", "function_list", "module_list", "pragma_list", "collation_list", "database_list",
    };
    static const char *const without_argument_but_writing[] = {
        "optimize", "shrink_memory", "incremental_vacuum", "wal_checkpoint",
    };
    for (size_t i = 0; i < sizeof with_argument / sizeof *with_argument; i++)
        if (sqlite3_stricmp(name, with_argument[i]) == 0) return 1;
    for (size_t i = 0; i < sizeof without_argument_but_writing / sizeof *without_argument_but_writing; i++)
        if (sqlite3_stricmp(name, without_argument_but_writing[i]) == 0) return 0;
    return value == NULL;
}

/* ATTACH (and VACUUM INTO, which attaches its target) would create files
 * anywhere; fts3_tokenizer() hands out a function pointer. */
static int sandbox(void *ctx, int action, const char *arg1, const char *arg2, const char *db, const char *trigger) {
    const tm_db *d = ctx;
    (void)db, (void)trigger;
    switch (action) {
    case SQLITE_ATTACH:
    case SQLITE_DETACH: return d->exporting ? SQLITE_OK : SQLITE_DENY;
    case SQLITE_PRAGMA: return pragma_reads(arg1, arg2) ? SQLITE_OK : SQLITE_DENY;
    case SQLITE_FUNCTION: return sqlite3_stricmp(arg2, "fts3_tokenizer") == 0 ? SQLITE_DENY : SQLITE_OK;
    default: return SQLITE_OK;
    }
}

static tm_status lock_down(tm_db *d, tm_error *err) {
    int off = 0, on = 1;
    if (sqlite3_db_config(d->sql, SQLITE_DBCONFIG_DEFENSIVE, 1, &on) != SQLITE_OK ||
        sqlite3_db_config(d->sql, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, 0, &off) != SQLITE_OK ||
        sqlite3_db_config(d->sql, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, &off) != SQLITE_OK ||
        sqlite3_set_authorizer(d->sql, sandbox, d) != SQLITE_OK)
        return sql_fail(err, d->sql, "securing SQLite");
    return TM_OK;
}

static tm_status register_tables(tm_db *d, tm_error *err) {
    for (size_t i = 0; i < N_TABLES; i++) {
        module_ctx *m = sqlite3_malloc(sizeof *m);
        if (!m) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        m->def = &tables[i];
        m->tp = &d->tp;
        char modname[64];
        snprintf(modname, sizeof modname, "tm_%s", tables[i].name);
        if (sqlite3_create_module_v2(d->sql, modname, &table_module, m, sqlite3_free) != SQLITE_OK)
            return sql_fail(err, d->sql, "registering a table");
        char *stmt = sqlite3_mprintf("CREATE VIRTUAL TABLE \"%w\" USING \"%w\"", tables[i].name, modname);
        if (!stmt) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        int rc = sqlite3_exec(d->sql, stmt, NULL, NULL, NULL);
        sqlite3_free(stmt);
        if (rc != SQLITE_OK) return sql_fail(err, d->sql, "creating a table");
    }
    return TM_OK;
}

/* ---- functions and modules of Trace Processor's standard library ------- */

static void fn_trace_start(sqlite3_context *c, int argc, sqlite3_value **argv) {
    (void)argc, (void)argv;
    sqlite3_result_int64(c, ((const tm_tp *)sqlite3_user_data(c))->trace_start);
}

/* The modules `INCLUDE PERFETTO MODULE` may name: views it makes. */
static const struct {
    const char *module, *sql;
} modules[] = {
    /* One row per dump of a process's heap over its interval: from the
     * dump's start, or for producers without one from just after the
     * heap's previous dump (the trace's start for the first), clamped to
     * the dump; allocated: bytes allocated in it; retained: of those, what
     * callsites still hold (net count above 0); delta: the net change. */
    {"android.memory.heap_profile.intervals",
     "CREATE VIEW IF NOT EXISTS _android_heap_profile_intervals AS "
     "WITH per_callsite AS ("
     "  SELECT upid, heap_name, ts, min(id) AS first_id, sum(count) AS net_count, sum(size) AS net_size,"
     "         sum(max(size, 0)) AS allocated"
     "  FROM heap_profile_allocation GROUP BY upid, heap_name, ts, callsite_id),"
     " dumps AS ("
     "  SELECT min(p.first_id) AS id, p.upid AS upid, p.heap_name AS heap_name, p.ts AS ts_end, hp.ts AS start_ts,"
     "         sum(iif(p.net_count > 0, p.net_size, 0)) AS retained, sum(p.allocated) AS allocated,"
     "         sum(p.net_size) AS delta"
     "  FROM per_callsite AS p JOIN heap_profile AS hp"
     "    ON hp.upid = p.upid AND hp.ts_end = p.ts AND coalesce(hp.heap_name, 'unknown') = p.heap_name"
     "  GROUP BY p.upid, p.heap_name, p.ts),"
     " windows AS ("
     "  SELECT *, iif(start_ts < ts_end, start_ts,"
     "    min(coalesce(lag(ts_end) OVER (PARTITION BY upid, heap_name ORDER BY ts_end), trace_start()) + 1,"
     "        ts_end)) AS ts"
     "  FROM dumps)"
     "SELECT id, upid, heap_name, ts, ts_end - ts AS dur, retained, allocated, delta FROM windows"},
    /* The frames still to symbolize, per process: every frame of every
     * callsite a CPU or heap sample uses (its ancestors included) that has
     * no symbol set, in a mapping with a build id; for Chrome's libraries
     * also their breakpad module id (the build id's first 16 bytes as a
     * GUID with its first three fields byte-swapped, then age 0). */
    {"stacks.symbolization_candidates",
     "CREATE VIEW IF NOT EXISTS _stacks_symbolization_candidates AS "
     "WITH RECURSIVE sampled(upid, callsite_id) AS ("
     "  SELECT t.upid, s.callsite_id FROM perf_sample AS s JOIN thread AS t USING (utid)"
     "   WHERE s.callsite_id IS NOT NULL"
     "  UNION SELECT t.upid, s.callsite_id FROM cpu_profile_stack_sample AS s JOIN thread AS t USING (utid)"
     "  UNION SELECT upid, callsite_id FROM heap_profile_allocation),"
     " chain(upid, callsite_id) AS ("
     "  SELECT upid, callsite_id FROM sampled"
     "  UNION SELECT chain.upid, c.parent_id FROM chain JOIN stack_profile_callsite AS c ON c.id = chain.callsite_id"
     "   WHERE c.parent_id IS NOT NULL),"
     " frames AS ("
     "  SELECT DISTINCT chain.upid, f.mapping, f.rel_pc FROM chain"
     "  JOIN stack_profile_callsite AS c ON c.id = chain.callsite_id"
     "  JOIN stack_profile_frame AS f ON f.id = c.frame_id WHERE f.symbol_set_id IS NULL)"
     "SELECT frames.upid AS upid, m.name AS module, m.build_id AS build_id, frames.rel_pc AS rel_pc,"
     "  CASE WHEN (m.name GLOB '*libmonochrome_64.so' OR m.name GLOB '*libchrome.so'"
     "    OR m.name GLOB '*libmonochrome.so' OR m.name GLOB '*libwebviewchromium.so'"
     "    OR m.name GLOB '*libchromium_android_linker.so') AND length(m.build_id) >= 40"
     "  THEN substr(m.build_id, 7, 2) || substr(m.build_id, 5, 2) || substr(m.build_id, 3, 2)"
     "    || substr(m.build_id, 1, 2) || substr(m.build_id, 11, 2) || substr(m.build_id, 9, 2)"
     "    || substr(m.build_id, 15, 2) || substr(m.build_id, 13, 2) || substr(m.build_id, 17, 16) || '0'"
     "  END AS breakpad_module_id "
     "FROM frames JOIN stack_profile_mapping AS m ON m.id = frames.mapping WHERE m.build_id != ''"},
};

static tm_status register_library(tm_db *d, tm_error *err) {
    if (sqlite3_create_function(d->sql, "trace_start", 0, SQLITE_UTF8 | SQLITE_DETERMINISTIC, &d->tp, fn_trace_start,
                                NULL, NULL) != SQLITE_OK)
        return sql_fail(err, d->sql, "registering trace_start()");
    return TM_OK;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/* Also between the words of an INCLUDE, as Trace Processor's preprocessor does. */
const char *tm_db_statement_start(const char *p) {
    if (!p) return NULL;
    for (;;) {
        while (is_space(*p)) p++;
        if (p[0] == '-' && p[1] == '-') {
            p += strcspn(p, "\n");
        } else if (p[0] == '/' && p[1] == '*') {
            const char *end = strstr(p + 2, "*/");
            p = end ? end + 2 : p + strlen(p);
        } else {
            return p;
        }
    }
}

int tm_db_include(sqlite3 *db, const char *sql, const char **tail, tm_error *err) {
    const char *p = sql;
    static const char *const words[] = {"include", "perfetto", "module"};
    for (int w = 0; w < 3; w++) {
        p = tm_db_statement_start(p);
        size_t n = strlen(words[w]);
        if (sqlite3_strnicmp(p, words[w], (int)n) != 0 || tm_db_statement_start(p + n) == p + n) return 0;
        p += n;
    }
    p = tm_db_statement_start(p);
    const char *name = p;
    while (*p && *p != ';' && !is_space(*p) && tm_db_statement_start(p) == p) p++;
    size_t len = (size_t)(p - name);
    p = tm_db_statement_start(p);
    if (*p == ';') p++;
    if (tail) *tail = p;
    for (size_t i = 0; i < sizeof modules / sizeof *modules; i++) {
        if (strlen(modules[i].module) != len || memcmp(modules[i].module, name, len)) continue;
        if (sqlite3_exec(db, modules[i].sql, NULL, NULL, NULL) == SQLITE_OK) return 1;
        sql_fail(err, db, "INCLUDE PERFETTO MODULE");
        if (err) err->offset = (uint64_t)(name - sql);
        return -1;
    }
    tm_fail(err, TM_ERR_UNSUPPORTED, (uint64_t)(name - sql), NULL,
            "INCLUDE PERFETTO MODULE %.*s: tracemill provides only %s and %s", (int)(len > 200 ? 200 : len), name,
            modules[0].module, modules[1].module);
    return -1;
}

tm_status tm_db_new(const void *buf, size_t len, const tm_options *opts, tm_db **out, tm_error *err) {
    if (!out || (!buf && len)) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_db_new: NULL argument");
    *out = NULL;
    TM_TRY(tm_check_options(opts, err));
    tm_mem mem;
    tm_mem_init(&mem, opts ? opts->alloc : NULL);
    tm_db *d = tm_mem_alloc(&mem, sizeof *d);
    if (!d) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    memset(d, 0, sizeof *d);
    d->mem = mem;
    tm_options defaults;
    memset(&defaults, 0, sizeof defaults);
    tm_limits limits;
    tm_limits_resolve(opts ? opts : &defaults, &limits);
    tm_status st = tm_input_open(&d->mem, buf, len, &limits, false, &d->source, err);
    if (st == TM_OK) st = tm_tp_require_perfetto(opts, d->source.bytes.data, d->source.bytes.len, "SQL", err);
    if (st == TM_OK) st = tm_tp_build(&d->tp, &d->mem, d->source.bytes.data, d->source.bytes.len, &limits,
                                       opts && opts->strict, err);
    if (st == TM_OK && sqlite3_open_v2(":memory:", &d->sql, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
                           SQLITE_OK)
        st = sql_fail(err, d->sql, "opening SQLite");
    if (st == TM_OK) st = register_tables(d, err);
    if (st == TM_OK) st = register_library(d, err);
    if (st == TM_OK) st = lock_down(d, err);
    if (st != TM_OK) {
        tm_db_free(d);
        return st;
    }
    *out = d;
    return TM_OK;
}

struct sqlite3 *tm_db_sqlite(tm_db *db) { return db ? db->sql : NULL; }

/* SQLite's message, with the system's reason when a file operation failed. */
static tm_status export_fail(tm_error *err, sqlite3 *db) {
    int sys = sqlite3_system_errno(db);
    return tm_fail(err, TM_ERR_IO, 0, NULL, "%s%s%s", sqlite3_errmsg(db), sys ? ": " : "", sys ? strerror(sys) : "");
}

tm_status tm_db_export(tm_db *db, const char *path, tm_error *err) {
    if (!db || !path) return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_db_export: NULL argument");
    if (!*path) /* SQLite would take it for a temporary database, gone at once */
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_db_export: empty path");
    struct stat before;
    int existed = stat(path, &before) == 0;
    if (existed && (!S_ISREG(before.st_mode) || before.st_size != 0))
        return tm_fail(err, TM_ERR_IO, 0, NULL, "%s: %s", path,
                       S_ISREG(before.st_mode) ? "exists and is not empty" : "not a regular file");
    char *attach = sqlite3_mprintf("ATTACH DATABASE %Q AS tm_export", path);
    if (!attach) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    db->exporting = 1;
    int rc = sqlite3_exec(db->sql, attach, NULL, NULL, NULL);
    sqlite3_free(attach);
    if (rc != SQLITE_OK) {
        db->exporting = 0;
        return export_fail(err, db->sql);
    }
    tm_status st = TM_OK;
    rc = sqlite3_exec(db->sql, "BEGIN", NULL, NULL, NULL);
    for (size_t i = 0; i < N_TABLES && rc == SQLITE_OK; i++) {
        char *copy = sqlite3_mprintf("CREATE TABLE tm_export.\"%w\" AS SELECT * FROM main.\"%w\"", tables[i].name,
                                     tables[i].name);
        rc = copy ? sqlite3_exec(db->sql, copy, NULL, NULL, NULL) : SQLITE_NOMEM;
        sqlite3_free(copy);
    }
    if (rc == SQLITE_OK) rc = sqlite3_exec(db->sql, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) {
        st = export_fail(err, db->sql);
        sqlite3_exec(db->sql, "ROLLBACK", NULL, NULL, NULL);
    }
    sqlite3_exec(db->sql, "DETACH DATABASE tm_export", NULL, NULL, NULL);
    db->exporting = 0;
    if (st != TM_OK && !existed) remove(path);
    return st;
}

int tm_db_truncated(const tm_db *db, uint64_t *offset) {
    if (!db || !db->tp.cut_off) return 0;
    if (offset) *offset = db->tp.cut_off_at;
    return 1;
}

void tm_db_free(tm_db *db) {
    if (!db) return;
    sqlite3_close(db->sql);
    tm_tp_release(&db->tp);
    tm_input_close(&db->mem, &db->source);
    tm_mem m = db->mem;
    tm_mem_free(&m, db, sizeof *db);
}
