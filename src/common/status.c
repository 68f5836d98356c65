/*
 * status.c — names of tm_status values and the tm_fail error helper that
 * every fallible library function reports through.
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
