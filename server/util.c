/*
 * util.c — the server layer's growable byte buffer and error formatting.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

int tm_srv_buf_append(tm_srv_buf *b, const void *data, size_t len) {
    if (len > SIZE_MAX - b->len) return -1;
    if (b->len + len > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + len) cap = cap > SIZE_MAX / 2 ? b->len + len : cap * 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p) return -1;
        b->data = p;
        b->cap = cap;
    }
    if (len) memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

void tm_srv_buf_release(tm_srv_buf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

tm_status tm_srv_fail(tm_error *err, tm_status code, uint64_t offset, const char *fmt, ...) {
    if (err) {
        err->code = code;
        err->offset = offset;
        err->reason = NULL;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return code;
}
