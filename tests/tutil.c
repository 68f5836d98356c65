/*
 * tutil.c — the shared test plumbing declared in tutil.h: the tu_membuf
 * sink, the failing allocator, whole-file reading and the recorded child's
 * ASan settings. No Criterion and no libtracemill here (see
 * tutil.h): callers assert on the return values.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv */
#endif
#include "tutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tu_membuf_write(void *ctx, const void *data, size_t len) {
    tu_membuf *m = ctx;
    if (m->cap - m->len < len + 1) { /* room for the data and the NUL */
        size_t cap = m->cap ? m->cap : 4096;
        while (cap - m->len < len + 1) cap *= 2;
        char *p = realloc(m->data, cap);
        if (!p) return 1;
        m->data = p;
        m->cap = cap;
    }
    if (len) memcpy(m->data + m->len, data, len);
    m->len += len;
    m->data[m->len] = 0;
    return 0;
}

void tu_membuf_free(tu_membuf *m) {
    free(m->data);
    memset(m, 0, sizeof *m);
}

char *tu_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    if (!buf) abort();
    for (;;) {
        if (n == cap) {
            buf = realloc(buf, (cap *= 2) + 1);
            if (!buf) abort();
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        if (got == 0) break;
        n += got;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

void *tu_fa_malloc(void *ctx, size_t size) {
    tu_fail_alloc *a = ctx;
    if (a->count++ == a->fail_at) return NULL;
    a->live += (long)size;
    return malloc(size);
}

void *tu_fa_realloc(void *ctx, void *p, size_t old_size, size_t new_size) {
    tu_fail_alloc *a = ctx;
    if (a->count++ == a->fail_at) return NULL;
    void *np = realloc(p, new_size);
    if (np) a->live += (long)new_size - (long)old_size;
    return np;
}

void tu_fa_free(void *ctx, void *p, size_t size) {
    tu_fail_alloc *a = ctx;
    if (p) a->live -= (long)size;
    free(p);
}

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TU_CLANG_ASAN 1
#endif
#endif

void tu_asan_recorded_child_env(void) {
#if defined(__SANITIZE_ADDRESS__) || defined(TU_CLANG_ASAN)
    setenv("ASAN_OPTIONS", "verify_asan_link_order=0:detect_leaks=0", 1);
#endif
}
