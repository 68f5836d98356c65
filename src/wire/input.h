/*
 * input.h — the checks every input passes before a decoder reads it, shared
 * by tm_trace_parse and tm_db_open: the size limit (max_input_bytes) and
 * empty input (TM_ERR_EMPTY).
 */
#ifndef TM_INPUT_H
#define TM_INPUT_H

#include "common/base.h" /* tm_status */

/* Checks an input of len bytes against lim. relay: errors carry Relay's
 * ProfileError names. */
tm_status tm_input_check(size_t len, const tm_limits *lim, bool relay, tm_error *err);

#endif
