/*
 * sentry_json.c — helpers shared by the Sample v1 and Sample v2 writers
 * (see sentry_json.h): metadata ids and strings, jansson values written
 * with the JSON writer, debug images from native mappings, and in_app.
 */
#include "export/sentry_json.h"
#include "profile/aggregate.h" /* tm_frame_kind_of */

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

int tm_sentry_str_is(const json_t *v, const char *lit) {
    return json_is_string(v) && json_string_length(v) == strlen(lit) &&
           memcmp(json_string_value(v), lit, strlen(lit)) == 0;
}

uint64_t tm_sentry_json_error_offset(const json_error_t *je) {
    uint64_t pos = je->position > 0 ? (uint64_t)je->position : 0;
    const char *near = strstr(je->text, " near '");
    size_t len = strlen(je->text);
    if (near && len && je->text[len - 1] == '\'') { /* jansson names a token of up to 20 bytes, as it read them */
        size_t n = (size_t)(je->text + len - 1 - (near + 7));
        if (n <= pos) pos -= n;
    }
    return pos;
}

int tm_sentry_event_id(const json_t *v, char out[33]) {
    if (!json_is_string(v)) return 0;
    const char *s = json_string_value(v);
    size_t len = json_string_length(v), n = 0;
    if (len != 32 && len != 36) return 0;
    for (size_t i = 0; i < len; i++) {
        if (len == 36 && (i == 8 || i == 13 || i == 18 || i == 23)) {
            if (s[i] != '-') return 0;
            continue;
        }
        int h = hexval((unsigned char)s[i]);
        if (h < 0) return 0;
        out[n++] = "0123456789abcdef"[h];
    }
    out[n] = 0;
    return n == 32;
}

void tm_sentry_write_value(tm_jw *w, const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_STRING: {
        tm_str s = {(const uint8_t *)json_string_value(v), json_string_length(v)};
        tm_jw_str(w, s);
        break;
    }
    case JSON_INTEGER: tm_jw_i64(w, (int64_t)json_integer_value(v)); break;
    case JSON_REAL: tm_jw_f64(w, json_real_value(v)); break;
    case JSON_TRUE: tm_jw_lit(w, "true"); break;
    case JSON_FALSE: tm_jw_lit(w, "false"); break;
    case JSON_NULL: tm_jw_lit(w, "null"); break;
    case JSON_ARRAY: {
        tm_jw_char(w, '[');
        size_t i;
        json_t *e;
        json_array_foreach(v, i, e) {
            if (i) tm_jw_char(w, ',');
            tm_sentry_write_value(w, e);
        }
        tm_jw_char(w, ']');
        break;
    }
    case JSON_OBJECT: {
        tm_jw_char(w, '{');
        const char *k;
        json_t *e;
        int first = 1;
        json_object_foreach((json_t *)v, k, e) {
            if (!first) tm_jw_char(w, ',');
            first = 0;
            tm_jw_cstr(w, k);
            tm_jw_char(w, ':');
            tm_sentry_write_value(w, e);
        }
        tm_jw_char(w, '}');
        break;
    }
    }
}

/* A build id as a debug id: a GUID whose first three fields are
 * little-endian, as Sentry reads ELF build ids. */
static void write_debug_id(tm_jw *w, tm_bytes build_id) {
    static const int order[16] = {3, 2, 1, 0, 5, 4, 7, 6, 8, 9, 10, 11, 12, 13, 14, 15};
    uint8_t b[16] = {0};
    memcpy(b, build_id.data, build_id.len < 16 ? build_id.len : 16);
    char s[38];
    size_t n = 0;
    s[n++] = '"';
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10) s[n++] = '-';
        s[n++] = "0123456789abcdef"[b[order[i]] >> 4];
        s[n++] = "0123456789abcdef"[b[order[i]] & 15];
    }
    s[n++] = '"';
    tm_jw_raw(w, s, n);
}

static int is_image(const tm_prof_mapping *m) {
    return m->path.len && !(m->flags & TM_MAPPING_JAVA) && m->build_id.len;
}

/* Default mode: the image begins where its ELF file does, so that its frames' process addresses fall inside
 * it; Relay's converter gives the mapping's start. */
static uint64_t image_start(const tm_profile *p, const tm_prof_mapping *m) {
    return p->relay_compat ? m->start : m->elf_start;
}

size_t tm_sentry_write_images(tm_jw *w, const tm_profile *p, int comma) {
    size_t written = 0;
    for (size_t i = 0; i < p->n_mappings; i++) {
        const tm_prof_mapping *m = &p->mappings[i];
        if (!is_image(m)) continue;
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = is_image(&p->mappings[j]) && image_start(p, &p->mappings[j]) == image_start(p, m) &&
                  tm_bytes_eq(p->mappings[j].path, m->path);
        if (dup) continue;
        if (comma || written) tm_jw_char(w, ',');
        written++;
        tm_jw_lit(w, "{\"code_file\":");
        tm_jw_str(w, m->path);
        tm_jw_lit(w, ",\"debug_id\":");
        write_debug_id(w, m->build_id);
        uint64_t image_addr = image_start(p, m);
        tm_jw_lit(w, ",\"type\":\"symbolic\",\"image_addr\":");
        tm_jw_hex(w, image_addr);
        if (p->relay_compat || (m->flags & TM_MAPPING_HAS_LOAD_BIAS)) {
            tm_jw_lit(w, ",\"image_vmaddr\":");
            tm_jw_hex(w, m->load_bias);
        }
        if (m->end > m->start) {
            tm_jw_lit(w, ",\"image_size\":");
            tm_jw_u64(w, m->end - image_addr);
        }
        tm_jw_char(w, '}');
    }
    return written;
}

int tm_sentry_has_images(const tm_profile *p) {
    for (size_t i = 0; i < p->n_mappings; i++)
        if (is_image(&p->mappings[i])) return 1;
    return 0;
}

/* ---- in_app ---- */

/* Where an OS keeps its own libraries (Linux distributions, Android and
 * its updatable modules): their frames are not the app's, as Sentry's
 * grouping rules for native frames have it. Executables in /usr/bin and
 * the like are the program profiled, so not listed. Sorted by first byte
 * (any_prefix stops past the name's). */
static const char *const system_paths[] = {
    "apex/", "data/dalvik-cache/", "data/misc/", "lib/", "lib32/", "lib64/", "odm/", "product/", "system/",
    "system_ext/", "usr/lib/", "usr/lib32/", "usr/lib64/", "usr/libexec/", "usr/local/lib/", "vendor/",
};

/* Java and Android platform packages (the runtime, the framework, their
 * libraries): the classes Sentry's Android grouping never counts in_app.
 * Sorted by first byte, as system_paths. */
static const char *const system_classes[] = {
    "android.", "androidx.", "com.android.", "com.google.android.", "com.sun.", "dalvik.", "java.", "javax.",
    "jdk.", "kotlin.", "kotlinx.", "libcore.", "org.apache.harmony.", "org.json.", "org.w3c.", "org.xml.",
    "sun.",
};

static tm_str no_slash(tm_str s) {
    if (s.len && s.data[0] == '/') s.data++, s.len--;
    return s;
}

/* The length of the longest of list[0..n) that starts s (leading '/'
 * ignored on both sides), or -1. Compared byte by byte, no strlen: most
 * prefixes differ from s in their first byte, and this runs per frame. */
static long longest(tm_str s, const char *const *list, size_t n) {
    long best = -1;
    for (size_t i = 0; s.data && i < n; i++) {
        const char *pre = list[i];
        if (!pre) continue;
        if (*pre == '/') pre++;
        size_t k = 0;
        while (pre[k] && k < s.len && (uint8_t)pre[k] == s.data[k]) k++;
        if (!pre[k] && (long)k > best) best = (long)k;
    }
    return best;
}

/* Whether one of list[0..n) (no leading '/', each of 4 bytes or more,
 * sorted by first byte) starts s: the fixed lists only ask that. Entries
 * past s's first byte are not looked at; the first 4 bytes are compared
 * as one word: most entries differ from s there, and Java classes share
 * "com." with three of them. */
static int any_prefix(tm_str s, const char *const *list, size_t n) {
    if (s.len < 4) return 0;
    uint32_t head;
    memcpy(&head, s.data, 4);
    for (size_t i = 0; i < n && (uint8_t)list[i][0] <= s.data[0]; i++) {
        const char *pre = list[i];
        uint32_t pre_head;
        memcpy(&pre_head, pre, 4);
        if (pre_head != head) continue;
        size_t k = 4;
        while (pre[k] && k < s.len && (uint8_t)pre[k] == s.data[k]) k++;
        if (!pre[k]) return 1;
    }
    return 0;
}

int tm_sentry_in_app(const tm_profile *p, uint32_t frame, const tm_in_app_rules *r) {
    const tm_prof_frame *f = &p->frames[frame];
    tm_str path = {NULL, 0}, cls = {NULL, 0};
    if (f->flags & TM_FRAME_HAS_PACKAGE) path = no_slash(f->package);
    else if (f->mapping) path = no_slash(p->mappings[f->mapping - 1].path);
    if ((f->flags & TM_FRAME_JAVA) && (f->flags & TM_FRAME_HAS_MODULE)) cls = f->module;
    if (r && (r->n_in_app || r->n_not_in_app)) { /* most callers give none */
        long yes = longest(path, r->in_app, r->n_in_app), no = longest(path, r->not_in_app, r->n_not_in_app);
        long cy = longest(cls, r->in_app, r->n_in_app), cn = longest(cls, r->not_in_app, r->n_not_in_app);
        if (cy > yes) yes = cy;
        if (cn > no) no = cn;
        if (yes >= 0 || no >= 0) return yes >= no;
    }
    if (tm_frame_kind_of(p, frame) == TM_KIND_KERNEL) return 0;
    /* a Java frame's class decides: JIT code of any class shares one mapping */
    if (cls.len) return !any_prefix(cls, system_classes, sizeof system_classes / sizeof *system_classes);
    if (!path.len) return -1;
    if (path.data[0] == '[') return 0; /* [vdso], [vsyscall], [anon:...] */
    return !any_prefix(path, system_paths, sizeof system_paths / sizeof *system_paths);
}

int tm_sentry_in_app_memo(const tm_profile *p, uint32_t frame, const tm_in_app_rules *r, int8_t *memo) {
    const tm_prof_frame *f = &p->frames[frame];
    /* a native frame's answer reads only its mapping's path (its rules, its
     * library's name "[kernel..." and its system prefixes) and its address */
    if ((f->flags & TM_FRAME_JAVA) || !f->mapping || ((f->flags & TM_FRAME_HAS_ADDR) && f->addr >= TM_KERNEL_ADDR_MIN))
        return tm_sentry_in_app(p, frame, r);
    if ((f->flags & TM_FRAME_HAS_PACKAGE) && !tm_frame_package_is_mapping_path(p, f))
        return tm_sentry_in_app(p, frame, r);
    int8_t *m = &memo[f->mapping - 1];
    if (*m == TM_IN_APP_UNKNOWN) *m = (int8_t)tm_sentry_in_app(p, frame, r);
    return *m;
}

tm_status tm_in_app_rules_of(const char *const *in_app, size_t n_in_app, const char *const *not_in_app,
                             size_t n_not_in_app, const char *who, tm_in_app_rules *out, tm_error *err) {
    *out = (tm_in_app_rules){in_app, not_in_app, n_in_app, n_not_in_app};
    if ((n_in_app && !in_app) || (n_not_in_app && !not_in_app))
        return tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "%s: in_app prefixes without a list", who);
    return TM_OK;
}

int tm_trace_frame_in_app(const tm_trace *t, size_t i) {
    const tm_profile *p = t ? tm_trace_profile(t) : NULL;
    return p && i < p->n_frames ? tm_sentry_in_app(p, (uint32_t)i, NULL) : -1;
}
