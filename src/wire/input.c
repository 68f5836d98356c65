/*
 * input.c — the input front end (see input.h). It runs before any format is
 * detected, so every reader sees the same rules for what it is given.
 */
#include "wire/input.h" /* tm_input_check */

tm_status tm_input_check(size_t len, const tm_limits *lim, bool relay, tm_error *err) {
    if (len > lim->max_input_bytes)
        return tm_fail(err, TM_ERR_LIMIT, lim->max_input_bytes, relay ? "ExceedSizeLimit" : NULL,
                       "input is %zu bytes, more than max_input_bytes (%llu)", len,
                       (unsigned long long)lim->max_input_bytes);
    /* Zero bytes is a valid empty protobuf message, but no recorder writes
     * one on purpose: it is a failed capture or copy, so say so rather than
     * print an empty profile. Relay answers it with NotEnoughSamples. */
    if (len == 0)
        return tm_fail(err, TM_ERR_EMPTY, 0, relay ? "NotEnoughSamples" : NULL, "empty input: 0 bytes");
    return TM_OK;
}
