/*
 * status.c — names of tm_status values, the tm_fail error helper that
 * every fallible library function reports through, and the check of the
 * reserved space of the public structs callers pass in (the one place that
 * enforces "reserved_ must be zero", see "ABI" in tracemill.h).
 */
#include <stdarg.h>
#include <stdio.h>

#include "common/base.h" /* tm_fail */

const char *tm_status_str(tm_status st) {
    switch (st) {
    case TM_OK: return "TM_OK";
    case TM_ERR_NOMEM: return "TM_ERR_NOMEM";
    case TM_ERR_TRUNCATED: return "TM_ERR_TRUNCATED";
    case TM_ERR_MALFORMED: return "TM_ERR_MALFORMED";
    case TM_ERR_LIMIT: return "TM_ERR_LIMIT";
    case TM_ERR_UNSUPPORTED: return "TM_ERR_UNSUPPORTED";
    case TM_ERR_IO: return "TM_ERR_IO";
    case TM_ERR_INVALID_ARG: return "TM_ERR_INVALID_ARG";
    case TM_ERR_REJECTED: return "TM_ERR_REJECTED";
    case TM_ERR_EMPTY: return "TM_ERR_EMPTY";
    }
    return "TM_ERR_UNKNOWN";
}

tm_status tm_fail(tm_error *err, tm_status code, uint64_t offset, const char *reason,
                  const char *fmt, ...) {
    if (err) {
        memset(err, 0, sizeof *err); /* reserved_ too: fields a newer header adds read as 0 */
        err->code = code;
        err->offset = offset;
        err->reason = reason;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}

tm_status tm_check_reserved(const void *reserved, size_t size, const char *type, tm_error *err) {
    const uint8_t *p = reserved;
    for (size_t i = 0; i < size; i++)
        if (p[i])
            return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL,
                           "%s: reserved space is not zero (byte %zu of reserved_): zero-initialise the struct; "
                           "libtracemill %s has no field there",
                           type, i, TM_VERSION_STRING);
    return TM_OK;
}

tm_status tm_check_options(const tm_options *o, tm_error *err) {
    TM_TRY(TM_CHECK_RESERVED(o, "tm_options", err));
    TM_TRY(TM_CHECK_RESERVED(o ? &o->limits : NULL, "tm_limits", err));
    TM_TRY(TM_CHECK_RESERVED(o ? o->alloc : NULL, "tm_alloc", err));
    if (o && (unsigned)o->mode > TM_MODE_RELAY)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_options: unknown mode %d", (int)o->mode);
    if (o && (unsigned)o->input > TM_INPUT_SAMPLE_V1)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_options: unknown input format %d", (int)o->input);
    if (o && (unsigned)o->preset > TM_LIMITS_RELAY)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_options: unknown limit preset %d", (int)o->preset);
    return TM_OK;
}

tm_status tm_check_value(tm_value v, const char *who, tm_error *err) {
    if ((unsigned)v <= TM_VALUE_WALL) return TM_OK;
    return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "%s: unknown value %d", who, (int)v);
}

tm_status tm_check_period(int64_t period_ns, const char *who, tm_error *err) {
    if (period_ns >= 0 && period_ns <= TM_PERIOD_NS_MAX) return TM_OK;
    return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "%s: period %lld ns is %s", who, (long long)period_ns,
                   period_ns < 0 ? "negative" : "longer than an hour (TM_PERIOD_NS_MAX)");
}

tm_status tm_check_symbolize_options(const tm_symbolize_options *o, tm_error *err) {
    TM_TRY(TM_CHECK_RESERVED(o, "tm_symbolize_options", err));
    if (o && o->n_symbol_dirs && !o->symbol_dirs)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_symbolize_options: n_symbol_dirs without symbol_dirs");
    if (o && o->n_proguard_maps && !o->proguard_maps)
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "tm_symbolize_options: n_proguard_maps without proguard_maps");
    for (size_t i = 0; o && o->proguard_maps && i < o->n_proguard_maps; i++)
        TM_TRY(TM_CHECK_RESERVED(&o->proguard_maps[i], "tm_proguard_map", err));
    return TM_OK;
}
