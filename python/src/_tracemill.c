/*
 * _tracemill.c — the CPython extension tracemill._tracemill: the Trace type
 * over a decoded tm_trace (and over a tm_db for SQL, opened from the same
 * bytes on the first query), the exporters and the diff writers, and the
 * exception classes that carry a tm_error. Uses only the public header
 * include/tracemill.h and SQLite's API; tracemill/__init__.py builds the
 * documented Python API (load, numpy and pandas) on top of it.
 *
 * The GIL is released while a trace decodes, an exporter writes, the SQL
 * database is built and a SQL statement steps. A Trace may be used from
 * several threads: the SQL connection is guarded by a lock, and close()
 * while another thread is inside such a call frees the trace only when
 * that call ends (`users` counts them; it changes with the GIL held).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include <sqlite3.h>
#include <stddef.h>
#include <string.h>

#include "tracemill.h"
#include "tracemill_sql.h"

/* ---- exceptions ---- */

static PyObject *Error, *QueryError;
static PyObject *status_error[TM_ERR_EMPTY + 1]; /* class per tm_status */

static const struct {
    const char *name;
    tm_status status;
    int parent; /* index into this table, -1: Error */
    const char *doc;
} error_classes[] = {
    {"OutOfMemoryError", TM_ERR_NOMEM, -1, "An allocation failed (TM_ERR_NOMEM)."},
    {"MalformedError", TM_ERR_MALFORMED, -1, "The input is not what its format allows (TM_ERR_MALFORMED)."},
    {"TruncatedError", TM_ERR_TRUNCATED, 1, "The input ends inside a field or message (TM_ERR_TRUNCATED)."},
    {"LimitError", TM_ERR_LIMIT, -1, "A configured limit was exceeded (TM_ERR_LIMIT)."},
    {"UnsupportedError", TM_ERR_UNSUPPORTED, -1, "Valid input that tracemill does not handle (TM_ERR_UNSUPPORTED)."},
    {"TraceIOError", TM_ERR_IO, -1, "Reading or writing failed (TM_ERR_IO)."},
    {"InvalidArgumentError", TM_ERR_INVALID_ARG, -1,
     "The call was given something unusable, e.g. a thread the profile lacks (TM_ERR_INVALID_ARG)."},
    {"RejectedError", TM_ERR_REJECTED, -1,
     "The profile fails Sample v2 validation (TM_ERR_REJECTED); reason holds Relay's name."},
    {"EmptyError", TM_ERR_EMPTY, -1, "The input holds no bytes (TM_ERR_EMPTY)."},
};
#define N_ERROR_CLASSES (sizeof error_classes / sizeof *error_classes)

/* Raises cls(text) with the attributes status, code, offset, message and
 * reason. Returns NULL. */
/* Sets exc.name = value, taking the reference to value. */
static int set_attr(PyObject *exc, const char *name, PyObject *value) {
    int r = value ? PyObject_SetAttrString(exc, name, value) : -1;
    Py_XDECREF(value);
    return r;
}

/* Raises cls(message) with the attributes status, code, offset, message and
 * reason. Returns NULL. */
static PyObject *raise_with(PyObject *cls, const char *status, long code, unsigned long long offset,
                            const char *message, const char *reason) {
    PyObject *exc = PyObject_CallFunction(cls, "s", message);
    if (!exc) return NULL;
    if (set_attr(exc, "status", PyUnicode_FromString(status)) == 0 && set_attr(exc, "code", PyLong_FromLong(code)) == 0 &&
        set_attr(exc, "offset", PyLong_FromUnsignedLongLong(offset)) == 0 &&
        set_attr(exc, "message", PyUnicode_FromString(message)) == 0 &&
        set_attr(exc, "reason", reason ? PyUnicode_FromString(reason) : Py_NewRef(Py_None)) == 0)
        PyErr_SetObject(cls, exc);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_tm(tm_status st, const tm_error *err) {
    PyObject *cls = st > TM_OK && st <= TM_ERR_EMPTY && status_error[st] ? status_error[st] : Error;
    const char *msg = err->code == st && err->message[0] ? err->message : tm_status_str(st);
    return raise_with(cls, tm_status_str(st), (long)st, err->code == st ? (unsigned long long)err->offset : 0, msg,
                      err->code == st ? err->reason : NULL);
}

/* ---- memory sink ---- */

typedef struct membuf {
    char *data;
    size_t len, cap;
} membuf;

static int membuf_write(void *ctx, const void *data, size_t len) {
    membuf *b = ctx;
    if (len > b->cap - b->len) {
        size_t cap = b->cap ? b->cap : 65536;
        while (cap - b->len < len) {
            if (cap > SIZE_MAX / 2) return 1;
            cap *= 2;
        }
        char *p = PyMem_RawRealloc(b->data, cap);
        if (!p) return 1;
        b->data = p;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

/* The bytes written, or NULL (exception set) when st failed. Frees b. */
static PyObject *membuf_finish(membuf *b, tm_status st, const tm_error *err) {
    PyObject *r = st == TM_OK ? PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len)
                              : raise_tm(st, err);
    PyMem_RawFree(b->data);
    return r;
}

/* ---- Trace ---- */

typedef struct TraceObject {
    PyObject_HEAD
    PyObject *data;           /* bytes: the input the trace's strings view */
    tm_trace *trace;          /* NULL once released */
    tm_options opts;          /* as decoded, for tm_db_new */
    tm_db *db;                /* built on the first query, under lock */
    PyThread_type_lock lock;  /* the SQL database: its creation and statements */
    Py_ssize_t users;         /* calls under way without the GIL */
    int closed;
    PyObject *stacks;         /* tuple of str tuples, root first; built on first use */
} TraceObject;

static PyTypeObject TraceType;

static void trace_release(TraceObject *self) {
    tm_db_free(self->db);
    self->db = NULL;
    tm_trace_free(self->trace);
    self->trace = NULL;
    Py_CLEAR(self->stacks);
    Py_CLEAR(self->data);
}

/* Marks a call that may release the GIL; -1 (ValueError) on a closed trace. */
static int trace_enter(TraceObject *self) {
    if (self->closed || !self->trace) {
        PyErr_SetString(PyExc_ValueError, self->closed ? "the trace is closed" : "the trace was not loaded");
        return -1;
    }
    self->users++;
    return 0;
}

static void trace_leave(TraceObject *self) {
    if (--self->users == 0 && self->closed) trace_release(self);
}

static const struct {
    const char *name;
    size_t offset;
} limit_fields[] = {
#define F(n) {#n, offsetof(tm_limits, n)}
    F(max_samples), F(max_stack_depth), F(max_sequences), F(max_packet_bytes), F(max_unique_frames),
    F(max_path_segments), F(max_inflated_bytes), F(max_interned_entries), F(max_chunk_duration_ns),
    F(max_work_bytes), F(max_result_bytes), F(max_input_bytes),
#undef F
};

static int limits_from_dict(PyObject *dict, tm_limits *out) {
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        size_t i = 0;
        while (name && i < sizeof limit_fields / sizeof *limit_fields && strcmp(limit_fields[i].name, name)) i++;
        if (!name || i == sizeof limit_fields / sizeof *limit_fields) {
            PyErr_Format(PyExc_ValueError, "unknown limit %R (known: max_samples, max_stack_depth, ...)", key);
            return -1;
        }
        unsigned long long v = PyLong_AsUnsignedLongLong(value);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) return -1;
        memcpy((char *)out + limit_fields[i].offset, &(uint64_t){v}, sizeof(uint64_t));
    }
    return 0;
}

static int Trace_init(TraceObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"data", "mode", "preset", "limits", "strict", NULL};
    PyObject *data, *limits = Py_None;
    int mode = TM_MODE_DEFAULT, preset = TM_LIMITS_GENEROUS, strict = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!|iiOp", kwlist, &PyBytes_Type, &data, &mode, &preset, &limits,
                                     &strict))
        return -1;
    if (self->trace || self->closed) {
        PyErr_SetString(PyExc_RuntimeError, "a Trace is initialised once");
        return -1;
    }
    if ((mode != TM_MODE_DEFAULT && mode != TM_MODE_RELAY) ||
        (preset != TM_LIMITS_GENEROUS && preset != TM_LIMITS_RELAY)) {
        PyErr_SetString(PyExc_ValueError, "unknown mode or limits preset");
        return -1;
    }
    tm_options opts;
    memset(&opts, 0, sizeof opts);
    opts.mode = (tm_mode)mode;
    opts.preset = (tm_limit_preset)preset;
    opts.strict = strict;
    if (limits != Py_None) {
        if (!PyDict_Check(limits)) {
            PyErr_SetString(PyExc_TypeError, "limits must be a dict of limit name to int");
            return -1;
        }
        if (limits_from_dict(limits, &opts.limits) < 0) return -1;
    }
    const char *buf = PyBytes_AS_STRING(data);
    size_t len = (size_t)PyBytes_GET_SIZE(data);
    tm_trace *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tm_trace_parse(buf, len, &opts, &t, &err);
    Py_END_ALLOW_THREADS
    if (st != TM_OK) {
        raise_tm(st, &err);
        return -1;
    }
    self->trace = t;
    self->data = Py_NewRef(data);
    self->opts = opts;
    return 0;
}

static PyObject *Trace_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    (void)args;
    (void)kwds;
    TraceObject *self = (TraceObject *)type->tp_alloc(type, 0);
    if (!self) return NULL;
    self->lock = PyThread_allocate_lock();
    if (!self->lock) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static void Trace_dealloc(TraceObject *self) {
    trace_release(self);
    if (self->lock) PyThread_free_lock(self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Trace_close(TraceObject *self, PyObject *unused) {
    (void)unused;
    self->closed = 1;
    if (self->users == 0) trace_release(self);
    Py_RETURN_NONE;
}

static PyObject *Trace_get_closed(TraceObject *self, void *unused) {
    (void)unused;
    return PyBool_FromLong(self->closed);
}

static PyObject *Trace_enter_ctx(TraceObject *self, PyObject *unused) {
    (void)unused;
    if (trace_enter(self) < 0) return NULL;
    trace_leave(self);
    return Py_NewRef(self);
}

static PyObject *Trace_exit_ctx(TraceObject *self, PyObject *args) {
    (void)args;
    return Trace_close(self, NULL);
}

static Py_ssize_t Trace_len(TraceObject *self) {
    if (trace_enter(self) < 0) return -1;
    Py_ssize_t n = (Py_ssize_t)tm_trace_sample_count(self->trace);
    trace_leave(self);
    return n;
}

/* ---- info and threads ---- */

static const struct {
    const char *name;
    size_t offset;
    char kind; /* 'u' uint64_t, 'i' int64_t, 'c' uint32_t, 'b' int (flag) */
} stat_fields[] = {
#define U(n) {#n, offsetof(tm_trace_stats, n), 'u'}
    U(bytes), U(packets), U(compressed_packets), U(packets_unsupported), U(packets_skipped_incremental),
    U(interned_data_skipped), U(sequences), U(incremental_resets), U(data_losses), U(sequences_with_data_loss),
    U(clock_snapshots), U(perf_samples), U(streaming_samples), U(stack_samples),
    U(stack_samples_without_callstack), U(samples_kept), U(dropped_unresolved), U(dropped_stale_interning),
    U(dropped_never_cleared), U(dropped_missing_clock), U(dropped_bad_timestamp), U(dropped_malformed_streaming),
    U(perf_samples_skipped), U(perf_samples_without_callstack), U(perf_records_lost),
    U(streaming_without_reference_time), U(samples_without_thread), U(threads), U(threads_without_name),
    U(frames), U(stacks), U(mappings), U(mappings_without_build_id),
    {"first_sample_ns", offsetof(tm_trace_stats, first_sample_ns), 'i'},
    {"last_sample_ns", offsetof(tm_trace_stats, last_sample_ns), 'i'},
    {"trace_clock_id", offsetof(tm_trace_stats, trace_clock_id), 'c'},
    {"has_realtime", offsetof(tm_trace_stats, has_realtime), 'b'},
    U(trace_stats_packets), U(buffer_chunks_overwritten), U(buffer_chunks_discarded), U(buffer_bytes_overwritten),
    U(writer_packet_loss), U(clock_readings_ignored), U(oneof_members_ignored), U(dropped_without_sequence),
    U(bytes_decompressed), U(service_chunks_discarded),
    {"truncated", offsetof(tm_trace_stats, truncated), 'b'},
    U(truncated_at), U(heap_profile_packets), U(heap_dumps), U(heap_dumps_with_loss), U(heap_missing_packets),
    U(heap_malformed), U(heap_unfinished_dumps), U(heap_samples_unresolved), U(heap_alloc_bytes), U(heap_inuse_bytes),
    U(perf_samples_truncated), U(heap_streaming_allocations), U(heap_streaming_alloc_bytes), U(heap_streaming_frees),
    U(heap_streaming_malformed), U(off_cpu_samples), U(off_cpu_ns), U(perf_samples_counted), U(perf_counted_cpu_ns),
    U(perf_timebase_hz), U(off_cpu_preempted_samples), U(off_cpu_preempted_ns),
#undef U
};

static PyObject *stat_value(const tm_trace_stats *s, size_t i) {
    const char *p = (const char *)s + stat_fields[i].offset;
    switch (stat_fields[i].kind) {
    case 'u': {
        uint64_t v;
        memcpy(&v, p, sizeof v);
        return PyLong_FromUnsignedLongLong(v);
    }
    case 'i': {
        int64_t v;
        memcpy(&v, p, sizeof v);
        return PyLong_FromLongLong(v);
    }
    case 'c': {
        uint32_t v;
        memcpy(&v, p, sizeof v);
        return PyLong_FromUnsignedLong(v);
    }
    default: {
        int v;
        memcpy(&v, p, sizeof v);
        return PyBool_FromLong(v);
    }
    }
}

static PyObject *Trace_info(TraceObject *self, PyObject *unused) {
    (void)unused;
    if (trace_enter(self) < 0) return NULL;
    const tm_trace_stats *s = tm_trace_get_stats(self->trace);
    PyObject *d = PyDict_New();
    if (d && PyDict_SetItemString(d, "mode", PyUnicode_FromString(self->opts.mode == TM_MODE_RELAY ? "relay" : "default")) < 0)
        Py_CLEAR(d);
    for (size_t i = 0; d && i < sizeof stat_fields / sizeof *stat_fields; i++) {
        PyObject *v = stat_value(s, i);
        if (!v || PyDict_SetItemString(d, stat_fields[i].name, v) < 0) Py_CLEAR(d);
        Py_XDECREF(v);
    }
    trace_leave(self);
    return d;
}

static PyObject *Trace_threads(TraceObject *self, PyObject *unused) {
    (void)unused;
    if (trace_enter(self) < 0) return NULL;
    size_t n = tm_trace_thread_count(self->trace);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        tm_thread_info ti;
        tm_trace_thread(self->trace, i, &ti);
        PyObject *name = ti.name ? PyUnicode_DecodeUTF8(ti.name, (Py_ssize_t)ti.name_len, "surrogateescape")
                                 : Py_NewRef(Py_None);
        PyObject *d = name ? Py_BuildValue("{s:L,s:L,s:O,s:K}", "tid", (long long)ti.tid, "pid", (long long)ti.pid,
                                           "name", name, "samples", (unsigned long long)ti.samples)
                           : NULL;
        Py_XDECREF(name);
        if (!d) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    trace_leave(self);
    return list;
}

/* ---- stacks and samples ---- */

static PyObject *frame_labels(const tm_trace *t) {
    size_t n = tm_trace_frame_count(t);
    PyObject *labels = PyTuple_New((Py_ssize_t)n);
    char small[256];
    for (size_t i = 0; labels && i < n; i++) {
        size_t len;
        tm_trace_frame_label(t, i, small, sizeof small, &len);
        char *buf = small;
        if (len >= sizeof small) {
            buf = PyMem_Malloc(len + 1);
            if (!buf) {
                Py_DECREF(labels);
                return PyErr_NoMemory();
            }
            tm_trace_frame_label(t, i, buf, len + 1, &len);
        }
        PyObject *s = PyUnicode_DecodeUTF8(buf, (Py_ssize_t)len, "surrogateescape");
        if (buf != small) PyMem_Free(buf);
        if (!s) Py_CLEAR(labels);
        else PyTuple_SET_ITEM(labels, (Py_ssize_t)i, s);
    }
    return labels;
}

/* The stacks tuple, built on first use. Borrowed. */
static PyObject *trace_stacks(TraceObject *self) {
    if (self->stacks) return self->stacks;
    PyObject *labels = frame_labels(self->trace);
    if (!labels) return NULL;
    size_t n = tm_trace_stack_count(self->trace);
    PyObject *stacks = PyTuple_New((Py_ssize_t)n);
    for (size_t i = 0; stacks && i < n; i++) {
        const uint32_t *frames;
        size_t depth;
        tm_trace_stack(self->trace, i, &frames, &depth);
        PyObject *s = PyTuple_New((Py_ssize_t)depth);
        for (size_t d = 0; s && d < depth; d++) /* leaf first in the model, root first here */
            PyTuple_SET_ITEM(s, (Py_ssize_t)d, Py_NewRef(PyTuple_GET_ITEM(labels, frames[depth - 1 - d])));
        if (!s) Py_CLEAR(stacks);
        else PyTuple_SET_ITEM(stacks, (Py_ssize_t)i, s);
    }
    Py_DECREF(labels);
    if (!stacks) return NULL;
    if (self->stacks) Py_DECREF(stacks); /* another thread built it meanwhile */
    else self->stacks = stacks;
    return self->stacks;
}

static PyObject *Trace_stacks(TraceObject *self, PyObject *unused) {
    (void)unused;
    if (trace_enter(self) < 0) return NULL;
    PyObject *s = trace_stacks(self);
    Py_XINCREF(s);
    trace_leave(self);
    return s;
}

/* Every distinct frame as {"name", "in_app"}: its label as stacks() names
 * it, and True/False by Sentry's in_app rule (as Sample v2 and v1 write
 * it), None where the model knows neither a mapping path nor a Java class. */
static PyObject *Trace_frames(TraceObject *self, PyObject *unused) {
    (void)unused;
    if (trace_enter(self) < 0) return NULL;
    PyObject *labels = frame_labels(self->trace);
    size_t n = labels ? (size_t)PyTuple_GET_SIZE(labels) : 0;
    PyObject *list = labels ? PyList_New((Py_ssize_t)n) : NULL;
    for (size_t i = 0; list && i < n; i++) {
        int in_app = tm_trace_frame_in_app(self->trace, i);
        PyObject *d = Py_BuildValue("{s:O,s:O}", "name", PyTuple_GET_ITEM(labels, (Py_ssize_t)i), "in_app",
                                    in_app < 0 ? Py_None : in_app ? Py_True : Py_False);
        if (!d) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)i, d);
    }
    Py_XDECREF(labels);
    trace_leave(self);
    return list;
}

/* Four bytearrays: ts (int64), tid (int64), stack (uint32), weight (uint64),
 * one entry per sample, in native byte order. */
static PyObject *Trace_sample_buffers(TraceObject *self, PyObject *unused) {
    (void)unused;
    if (trace_enter(self) < 0) return NULL;
    size_t n = tm_trace_sample_count(self->trace), nt = tm_trace_thread_count(self->trace);
    PyObject *ts = PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 8));
    PyObject *tid = ts ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 8)) : NULL;
    PyObject *stack = tid ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 4)) : NULL;
    PyObject *weight = stack ? PyByteArray_FromStringAndSize(NULL, (Py_ssize_t)(n * 8)) : NULL;
    int64_t *tids = weight ? PyMem_Malloc((nt + 1) * sizeof *tids) : NULL;
    PyObject *r = NULL;
    if (tids) {
        for (size_t i = 0; i < nt; i++) {
            tm_thread_info ti;
            tm_trace_thread(self->trace, i, &ti);
            tids[i] = ti.tid;
        }
        int64_t *o_ts = (int64_t *)PyByteArray_AS_STRING(ts), *o_tid = (int64_t *)PyByteArray_AS_STRING(tid);
        uint32_t *o_stack = (uint32_t *)PyByteArray_AS_STRING(stack);
        uint64_t *o_weight = (uint64_t *)PyByteArray_AS_STRING(weight);
        const tm_trace *t = self->trace;
        Py_BEGIN_ALLOW_THREADS
        for (size_t i = 0; i < n; i++) {
            tm_sample_info s;
            tm_trace_sample(t, i, &s);
            o_ts[i] = s.ts;
            o_tid[i] = tids[s.thread];
            o_stack[i] = (uint32_t)s.stack;
            o_weight[i] = s.weight;
        }
        Py_END_ALLOW_THREADS
        PyMem_Free(tids);
        r = PyTuple_Pack(4, ts, tid, stack, weight);
    } else if (weight) {
        PyErr_NoMemory();
    }
    Py_XDECREF(ts);
    Py_XDECREF(tid);
    Py_XDECREF(stack);
    Py_XDECREF(weight);
    trace_leave(self);
    return r;
}

typedef struct SampleIterObject {
    PyObject_HEAD
    TraceObject *trace;
    PyObject *stacks;
    PyObject *tids; /* tuple of int per thread */
    size_t next;
} SampleIterObject;

static PyTypeObject SampleIterType;

static PyObject *Trace_iter_samples(TraceObject *self, PyObject *unused) {
    (void)unused;
    if (trace_enter(self) < 0) return NULL;
    SampleIterObject *it = NULL;
    PyObject *stacks = trace_stacks(self);
    size_t nt = tm_trace_thread_count(self->trace);
    PyObject *tids = stacks ? PyTuple_New((Py_ssize_t)nt) : NULL;
    for (size_t i = 0; tids && i < nt; i++) {
        tm_thread_info ti;
        tm_trace_thread(self->trace, i, &ti);
        PyObject *v = PyLong_FromLongLong(ti.tid);
        if (!v) Py_CLEAR(tids);
        else PyTuple_SET_ITEM(tids, (Py_ssize_t)i, v);
    }
    if (tids) it = PyObject_New(SampleIterObject, &SampleIterType);
    if (it) {
        it->trace = (TraceObject *)Py_NewRef(self);
        it->stacks = Py_NewRef(stacks);
        it->tids = tids;
        it->next = 0;
    } else {
        Py_XDECREF(tids);
    }
    trace_leave(self);
    return (PyObject *)it;
}

static void SampleIter_dealloc(SampleIterObject *it) {
    Py_XDECREF(it->trace);
    Py_XDECREF(it->stacks);
    Py_XDECREF(it->tids);
    PyObject_Free(it);
}

static PyObject *SampleIter_next(SampleIterObject *it) {
    TraceObject *self = it->trace;
    if (trace_enter(self) < 0) return NULL;
    tm_sample_info s;
    PyObject *r = NULL;
    if (tm_trace_sample(self->trace, it->next, &s) == TM_OK) {
        it->next++;
        r = Py_BuildValue("(LOO)", (long long)s.ts, PyTuple_GET_ITEM(it->tids, (Py_ssize_t)s.thread),
                          PyTuple_GET_ITEM(it->stacks, (Py_ssize_t)s.stack));
    }
    trace_leave(self);
    return r; /* NULL without an exception: the end */
}

/* ---- exports ---- */

/* Options every exporter call takes (each format reads its own). */
typedef struct export_args {
    const char *format;
    PyObject *thread;
    const char *title, *name, *meta;
    Py_ssize_t meta_len;
    long long period_ns, width_arg;
    unsigned width;
    int reverse, uncompressed, thread_prefix, remove_single_samples;
    const char *value_name;
    tm_thread_filter filter;
    tm_value value;
} export_args;

static int parse_export_args(PyObject *args, PyObject *kwds, export_args *a) {
    static char *kwlist[] = {"format", "thread", "title", "name", "meta", "period_ns", "width", "reverse",
                             "uncompressed", "thread_prefix", "remove_single_samples", "value", NULL};
    memset(a, 0, sizeof *a);
    a->thread = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|$Ozzz#LLppppz", kwlist, &a->format, &a->thread, &a->title,
                                     &a->name, &a->meta, &a->meta_len, &a->period_ns, &a->width_arg, &a->reverse,
                                     &a->uncompressed, &a->thread_prefix, &a->remove_single_samples, &a->value_name))
        return -1;
    /* taken as a Python int and checked, never wrapped to unsigned (-5 was 4294967291) */
    if (a->width_arg && (a->width_arg < TM_FLAMEGRAPH_WIDTH_MIN || a->width_arg > TM_FLAMEGRAPH_WIDTH_MAX)) {
        PyErr_Format(PyExc_ValueError, "width must be 0 (the default, 1200) or %u..%u pixels, not %lld",
                     TM_FLAMEGRAPH_WIDTH_MIN, TM_FLAMEGRAPH_WIDTH_MAX, a->width_arg);
        return -1;
    }
    a->width = (unsigned)a->width_arg;
    if (a->value_name) {
        tm_error err;
        if (tm_value_parse(a->value_name, &a->value, &err) != TM_OK) {
            PyErr_SetString(PyExc_ValueError, err.message);
            return -1;
        }
    }
    if (PyLong_Check(a->thread)) {
        a->filter.tid = PyLong_AsLongLong(a->thread);
        if (a->filter.tid == -1 && PyErr_Occurred()) return -1;
        a->filter.by_tid = 1;
    } else if (PyUnicode_Check(a->thread)) {
        a->filter.name = PyUnicode_AsUTF8(a->thread);
        if (!a->filter.name) return -1;
    } else if (a->thread != Py_None) {
        PyErr_SetString(PyExc_TypeError, "thread must be a thread id (int), a thread name (str) or None");
        return -1;
    }
    return 0;
}

static PyObject *bad_format(const char *format, const char *known) {
    return PyErr_Format(PyExc_ValueError, "unknown format \"%s\" (one of %s)", format, known);
}

static PyObject *Trace_export(TraceObject *self, PyObject *args, PyObject *kwds) {
    export_args a;
    if (parse_export_args(args, kwds, &a) < 0 || trace_enter(self) < 0) return NULL;
    membuf buf = {0};
    tm_sink sink = {.write = membuf_write, .ctx = &buf};
    tm_error err;
    memset(&err, 0, sizeof err);
    const tm_trace *t = self->trace;
    tm_status st;
    const char *f = a.format;
    if (!strcmp(f, "sample-v2")) {
        tm_sample_v2_options o = {.meta_json = a.meta, .meta_len = (size_t)a.meta_len,
                                  .remove_single_samples = a.remove_single_samples};
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_sample_v2(t, &o, &sink, &err);
        Py_END_ALLOW_THREADS
    } else if (!strcmp(f, "pprof")) {
        tm_pprof_options o = {.threads = a.filter, .period_ns = a.period_ns, .uncompressed = a.uncompressed,
                              .value = a.value};
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_pprof(t, &o, &sink, &err);
        Py_END_ALLOW_THREADS
    } else if (!strcmp(f, "folded")) {
        tm_folded_options o = {.threads = a.filter, .thread_prefix = a.thread_prefix, .value = a.value};
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_folded(t, &o, &sink, &err);
        Py_END_ALLOW_THREADS
    } else if (!strcmp(f, "speedscope")) {
        tm_speedscope_options o = {.threads = a.filter, .period_ns = a.period_ns, .name = a.name, .value = a.value};
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_speedscope(t, &o, &sink, &err);
        Py_END_ALLOW_THREADS
    } else if (!strcmp(f, "svg")) {
        tm_flamegraph_options o = {.threads = a.filter, .title = a.title, .reverse = a.reverse, .width_px = a.width,
                                   .value = a.value};
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_flamegraph(t, &o, &sink, &err);
        Py_END_ALLOW_THREADS
    } else if (!strcmp(f, "report")) {
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_report(t, &sink, &err);
        Py_END_ALLOW_THREADS
    } else {
        trace_leave(self);
        return bad_format(f, "sample-v2, pprof, folded, speedscope, svg, report");
    }
    trace_leave(self);
    return membuf_finish(&buf, st, &err);
}

static PyObject *module_diff(PyObject *module, PyObject *args, PyObject *kwds) {
    (void)module;
    PyObject *base, *now;
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n < 3) return PyErr_Format(PyExc_TypeError, "diff(base, new, format, ...) takes 3 positional arguments");
    base = PyTuple_GET_ITEM(args, 0);
    now = PyTuple_GET_ITEM(args, 1);
    if (!PyObject_TypeCheck(base, &TraceType) || !PyObject_TypeCheck(now, &TraceType))
        return PyErr_Format(PyExc_TypeError, "diff compares two Trace objects");
    PyObject *rest = PyTuple_GetSlice(args, 2, n);
    if (!rest) return NULL;
    export_args a;
    int bad = parse_export_args(rest, kwds, &a);
    Py_DECREF(rest);
    if (bad < 0) return NULL;
    TraceObject *b = (TraceObject *)base, *w = (TraceObject *)now;
    if (strcmp(a.format, "svg") && strcmp(a.format, "folded")) return bad_format(a.format, "svg, folded");
    if (trace_enter(b) < 0) return NULL;
    if (trace_enter(w) < 0) {
        trace_leave(b);
        return NULL;
    }
    membuf buf = {0};
    tm_sink sink = {.write = membuf_write, .ctx = &buf};
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st;
    if (!strcmp(a.format, "svg")) {
        tm_flamegraph_options o = {.threads = a.filter, .title = a.title, .reverse = a.reverse, .width_px = a.width,
                                   .value = a.value};
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_flamegraph_diff(b->trace, w->trace, &o, &sink, &err);
        Py_END_ALLOW_THREADS
    } else {
        tm_folded_options o = {.threads = a.filter, .thread_prefix = a.thread_prefix, .value = a.value};
        Py_BEGIN_ALLOW_THREADS
        st = tm_write_folded_diff(b->trace, w->trace, &o, &sink, &err);
        Py_END_ALLOW_THREADS
    }
    trace_leave(w);
    trace_leave(b);
    return membuf_finish(&buf, st, &err);
}

/* ---- SQL ---- */

static void lock_acquire(PyThread_type_lock lock) {
    if (PyThread_acquire_lock(lock, NOWAIT_LOCK)) return;
    Py_BEGIN_ALLOW_THREADS
    PyThread_acquire_lock(lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
}

/* QueryError from the connection's last error; at is where the failing
 * statement, text, starts in the SQL text. An error SQLite gives no offset
 * (no such table, a run-time error) points at the statement, as the CLI's. */
static PyObject *raise_sql(sqlite3 *db, const char *text, size_t at) {
    int code = sqlite3_extended_errcode(db);
    long long offset = -1;
#if SQLITE_VERSION_NUMBER >= 3038000
    offset = sqlite3_error_offset(db);
#endif
    if (offset < 0) offset = text ? (long long)(tm_db_statement_start(text) - text) : 0;
    return raise_with(QueryError, sqlite3_errstr(code), code, (unsigned long long)offset + at, sqlite3_errmsg(db),
                      NULL);
}

static PyObject *column_value(sqlite3_stmt *stmt, int i) {
    switch (sqlite3_column_type(stmt, i)) {
    case SQLITE_INTEGER:
        return PyLong_FromLongLong(sqlite3_column_int64(stmt, i));
    case SQLITE_FLOAT:
        return PyFloat_FromDouble(sqlite3_column_double(stmt, i));
    case SQLITE_TEXT:
        return PyUnicode_DecodeUTF8((const char *)sqlite3_column_text(stmt, i), sqlite3_column_bytes(stmt, i),
                                    "surrogateescape");
    case SQLITE_BLOB: {
        const void *p = sqlite3_column_blob(stmt, i);
        return PyBytes_FromStringAndSize(p ? p : "", sqlite3_column_bytes(stmt, i));
    }
    default:
        return Py_NewRef(Py_None);
    }
}

/* The statement's column names, or NULL. */
static PyObject *column_names(sqlite3_stmt *stmt) {
    int nc = sqlite3_column_count(stmt);
    PyObject *names = PyList_New(nc);
    for (int i = 0; names && i < nc; i++) {
        const char *name = sqlite3_column_name(stmt, i);
        PyObject *s = PyUnicode_FromString(name ? name : "");
        if (!s) Py_CLEAR(names);
        else PyList_SET_ITEM(names, i, s);
    }
    return names;
}

/* The next row: 1, 0 at the end, -1 (QueryError) on failure. The GIL is
 * released while SQLite works. */
static int step(sqlite3 *db, sqlite3_stmt *stmt, size_t at) {
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = sqlite3_step(stmt);
    Py_END_ALLOW_THREADS
    if (rc == SQLITE_ROW) return 1;
    if (rc == SQLITE_DONE) return 0;
    raise_sql(db, sqlite3_sql(stmt), at);
    return -1;
}

/* Runs one statement: (column names, list of row tuples), or NULL. */
static PyObject *run_rows(sqlite3 *db, sqlite3_stmt *stmt, size_t at) {
    int nc = sqlite3_column_count(stmt), more;
    PyObject *names = column_names(stmt), *rows = names ? PyList_New(0) : NULL;
    while (rows && (more = step(db, stmt, at)) != 0) {
        PyObject *row = more > 0 ? PyTuple_New(nc) : NULL;
        for (int i = 0; row && i < nc; i++) {
            PyObject *v = column_value(stmt, i);
            if (!v) Py_CLEAR(row);
            else PyTuple_SET_ITEM(row, i, v);
        }
        if (!row || PyList_Append(rows, row) < 0) Py_CLEAR(rows);
        Py_XDECREF(row);
    }
    PyObject *r = rows ? PyTuple_Pack(2, names, rows) : NULL;
    Py_XDECREF(names);
    Py_XDECREF(rows);
    return r;
}

/* One column of run_columns: int64 values while every value is an integer,
 * then a list. */
typedef struct column {
    int64_t *ints;
    size_t n, cap;
    PyObject *list;
    char kind; /* 'i' integers (in ints), 'f' numbers, 'o' anything */
} column;

static int column_add(column *c, sqlite3_stmt *stmt, int i) {
    int type = sqlite3_column_type(stmt, i);
    if (!c->list && type == SQLITE_INTEGER) {
        if (c->n == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 1024;
            int64_t *p = PyMem_Realloc(c->ints, cap * sizeof *p);
            if (!p) return PyErr_NoMemory(), -1;
            c->ints = p;
            c->cap = cap;
        }
        c->ints[c->n++] = sqlite3_column_int64(stmt, i);
        return 0;
    }
    if (!c->list) { /* the first value that is not an integer */
        c->list = PyList_New((Py_ssize_t)c->n);
        for (size_t k = 0; c->list && k < c->n; k++) {
            PyObject *v = PyLong_FromLongLong(c->ints[k]);
            if (!v) Py_CLEAR(c->list);
            else PyList_SET_ITEM(c->list, (Py_ssize_t)k, v);
        }
        if (!c->list) return -1;
        PyMem_Free(c->ints);
        c->ints = NULL;
        c->kind = 'f';
    }
    if (type != SQLITE_INTEGER && type != SQLITE_FLOAT) c->kind = 'o';
    PyObject *v = column_value(stmt, i);
    int r = v ? PyList_Append(c->list, v) : -1;
    Py_XDECREF(v);
    return r;
}

/* Runs one statement column by column: (column names, values per column,
 * kinds), where the values of an integer column (kind 'i') are the bytes
 * of an int64 array and those of other columns a list (kind 'f' when they
 * are all numbers, 'o' otherwise); NULL on failure. */
static PyObject *run_columns(sqlite3 *db, sqlite3_stmt *stmt, size_t at) {
    int nc = sqlite3_column_count(stmt), more = 1, ok = 1;
    column *cols = PyMem_Calloc((size_t)nc + 1, sizeof *cols);
    char *kinds = PyMem_Malloc((size_t)nc + 1);
    PyObject *names = cols && kinds ? column_names(stmt) : NULL, *values = NULL, *r = NULL;
    if (!cols || !kinds) PyErr_NoMemory();
    for (int i = 0; cols && i < nc; i++) cols[i].kind = 'i';
    while (names && ok && (more = step(db, stmt, at)) > 0)
        for (int i = 0; ok && i < nc; i++) ok = column_add(&cols[i], stmt, i) == 0;
    if (names && ok && more == 0) values = PyList_New(nc);
    for (int i = 0; values && i < nc; i++) {
        PyObject *v = cols[i].list ? Py_NewRef(cols[i].list)
                                   : PyBytes_FromStringAndSize((const char *)cols[i].ints,
                                                               (Py_ssize_t)(cols[i].n * sizeof(int64_t)));
        kinds[i] = cols[i].kind;
        if (!v) Py_CLEAR(values);
        else PyList_SET_ITEM(values, i, v);
    }
    if (values) r = Py_BuildValue("(OOs#)", names, values, kinds, (Py_ssize_t)nc);
    for (int i = 0; cols && i < nc; i++) {
        PyMem_Free(cols[i].ints);
        Py_XDECREF(cols[i].list);
    }
    PyMem_Free(cols);
    PyMem_Free(kinds);
    Py_XDECREF(names);
    Py_XDECREF(values);
    return r;
}

/* run_rows' (by_column: run_columns') result for the last statement of sql
 * that has columns (or for the last statement). */
static PyObject *Trace_query(TraceObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"sql", "by_column", NULL};
    const char *sql;
    int by_column = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "s|p", kwlist, &sql, &by_column) || trace_enter(self) < 0)
        return NULL;
    lock_acquire(self->lock);
    PyObject *result = NULL;
    if (!self->db) {
        const char *buf = PyBytes_AS_STRING(self->data);
        size_t len = (size_t)PyBytes_GET_SIZE(self->data);
        tm_db *db = NULL;
        tm_error err;
        memset(&err, 0, sizeof err);
        tm_status st;
        Py_BEGIN_ALLOW_THREADS
        st = tm_db_new(buf, len, &self->opts, &db, &err);
        Py_END_ALLOW_THREADS
        if (st != TM_OK) raise_tm(st, &err);
        self->db = db;
    }
    if (self->db) {
        sqlite3 *db = tm_db_sqlite(self->db);
        const char *rest = sql;
        int ok = 1;
        while (ok && *rest) {
            sqlite3_stmt *stmt = NULL;
            const char *tail = NULL;
            tm_error ierr;
            int include = tm_db_include(db, rest, &tail, &ierr);
            if (include < 0) {
                ierr.offset += (uint64_t)(rest - sql); /* of the whole SQL text */
                raise_tm(ierr.code, &ierr);
                ok = 0;
            } else if (include) {
                rest = tail;
                continue;
            } else if (sqlite3_prepare_v2(db, rest, -1, &stmt, &tail) != SQLITE_OK) {
                raise_sql(db, rest, (size_t)(rest - sql));
                ok = 0;
            } else if (stmt) { /* NULL: only blanks or a comment were left */
                PyObject *r = by_column ? run_columns(db, stmt, (size_t)(rest - sql)) : run_rows(db, stmt, (size_t)(rest - sql));
                if (!r) ok = 0;
                else if (!result || sqlite3_column_count(stmt) > 0) Py_XSETREF(result, r);
                else Py_DECREF(r);
            }
            sqlite3_finalize(stmt);
            if (!tail || tail == rest) break;
            rest = tail;
        }
        if (!ok) Py_CLEAR(result);
        else if (!result) result = by_column ? Py_BuildValue("([][]s)", "") : Py_BuildValue("([][])");
    }
    PyThread_release_lock(self->lock);
    trace_leave(self);
    return result;
}

/* ---- type and module ---- */

static PyMethodDef Trace_methods[] = {
    {"close", (PyCFunction)Trace_close, METH_NOARGS,
     "close()\n--\n\nReleases the decoded trace and its SQL database. Idempotent; a call under way in\n"
     "another thread finishes first."},
    {"__enter__", (PyCFunction)Trace_enter_ctx, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Trace_exit_ctx, METH_VARARGS, NULL},
    {"info", (PyCFunction)Trace_info, METH_NOARGS,
     "info()\n--\n\nThe decode's data-quality counters (tm_trace_stats) as a dict, plus \"mode\"."},
    {"threads", (PyCFunction)Trace_threads, METH_NOARGS,
     "threads()\n--\n\nThreads in first-seen order: dicts with tid, pid (0: unknown), name (None:\n"
     "unnamed) and samples."},
    {"stacks", (PyCFunction)Trace_stacks, METH_NOARGS,
     "stacks()\n--\n\nEvery distinct stack as a tuple of frame names, root first; a sample's stack id\n"
     "indexes this tuple."},
    {"frames", (PyCFunction)Trace_frames, METH_NOARGS,
     "frames()\n--\n\nEvery distinct frame: dicts with name (as stacks() names it) and in_app\n"
     "(True/False by Sentry's rule, as Sample v2 and v1 write it; None: nothing says)."},
    {"_sample_buffers", (PyCFunction)Trace_sample_buffers, METH_NOARGS,
     "_sample_buffers()\n--\n\n(ts, tid, stack, weight) bytearrays of int64, int64, uint32 and uint64."},
    {"_iter_samples", (PyCFunction)Trace_iter_samples, METH_NOARGS,
     "_iter_samples()\n--\n\nAn iterator of (ts, tid, stack) tuples."},
    {"_export", (PyCFunction)(void (*)(void))Trace_export, METH_VARARGS | METH_KEYWORDS,
     "_export(format, *, thread=None, title=None, name=None, meta=None, period_ns=0, width=0,\n"
     "        reverse=False, uncompressed=False, thread_prefix=False, remove_single_samples=False)\n"
     "--\n\nThe trace written in format (sample-v2, pprof, folded, speedscope, svg, report)."},
    {"_query", (PyCFunction)(void (*)(void))Trace_query, METH_VARARGS | METH_KEYWORDS,
     "_query(sql, by_column=False)\n--\n\n(column names, rows) of the last statement of sql that returns\n"
     "columns; by_column: (column names, values per column, kinds: a letter per column, i for\n"
     "integers, given as the bytes of an int64 array, f numbers, o other, given as lists)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Trace_getset[] = {
    {"closed", (getter)Trace_get_closed, NULL, "Whether close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods Trace_as_sequence = {.sq_length = (lenfunc)Trace_len};

static PyTypeObject TraceType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracemill._tracemill.Trace",
    .tp_basicsize = sizeof(TraceObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Trace(data, mode=0, preset=0, limits=None, strict=False)\n--\n\n"
              "A decoded profile (use tracemill.load). data is the input as bytes; mode 1 is\n"
              "Relay compatibility; preset 1 Relay's limits; limits a dict of tm_limits fields.",
    .tp_new = Trace_new,
    .tp_init = (initproc)Trace_init,
    .tp_dealloc = (destructor)Trace_dealloc,
    .tp_methods = Trace_methods,
    .tp_getset = Trace_getset,
    .tp_as_sequence = &Trace_as_sequence,
};

static PyTypeObject SampleIterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "tracemill._tracemill.SampleIterator",
    .tp_basicsize = sizeof(SampleIterObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Iterator of (ts, tid, stack) over a Trace's samples.",
    .tp_dealloc = (destructor)SampleIter_dealloc,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)SampleIter_next,
};

static PyMethodDef module_methods[] = {
    {"diff", (PyCFunction)(void (*)(void))module_diff, METH_VARARGS | METH_KEYWORDS,
     "diff(base, new, format, *, thread=None, title=None, width=0, reverse=False, thread_prefix=False)\n"
     "--\n\nA differential flame graph (\"svg\") or folded diff (\"folded\") of two Traces, as bytes."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "tracemill._tracemill",
    "The C core of tracemill: Trace, diff and the error classes (see the tracemill package).", -1,
    module_methods, NULL, NULL, NULL, NULL,
};

static int add_error(PyObject *m, const char *name, PyObject *base, const char *doc, PyObject **out) {
    char qualified[64];
    snprintf(qualified, sizeof qualified, "tracemill.%s", name);
    *out = PyErr_NewExceptionWithDoc(qualified, doc, base, NULL);
    return *out ? PyModule_AddObjectRef(m, name, *out) : -1;
}

PyMODINIT_FUNC PyInit__tracemill(void) {
    if (PyType_Ready(&TraceType) < 0 || PyType_Ready(&SampleIterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (PyModule_AddObjectRef(m, "Trace", (PyObject *)&TraceType) < 0 ||
        PyModule_AddStringConstant(m, "__version__", TM_VERSION_STRING) < 0 ||
        add_error(m, "Error", PyExc_Exception,
                  "A tracemill call failed: status (e.g. \"TM_ERR_MALFORMED\"), code (its number),\n"
                  "offset (the byte of the input it refers to), message and reason (Relay's name for\n"
                  "a rejection, or None).",
                  &Error) < 0 ||
        add_error(m, "QueryError", Error,
                  "A SQL statement failed: status is SQLite's error text, code its extended result\n"
                  "code, offset the byte of the SQL text it points at (where SQLite gives none, as\n"
                  "for a run-time error: where the failing statement starts, past blanks and comments).",
                  &QueryError) < 0)
        goto fail;
    PyObject *made[N_ERROR_CLASSES];
    for (size_t i = 0; i < N_ERROR_CLASSES; i++) {
        PyObject *base = error_classes[i].parent < 0 ? Error : made[error_classes[i].parent];
        if (add_error(m, error_classes[i].name, base, error_classes[i].doc, &made[i]) < 0) goto fail;
        status_error[error_classes[i].status] = made[i];
    }
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
