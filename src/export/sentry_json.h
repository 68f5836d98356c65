/*
 * sentry_json.h — what the two Sentry writers (Sample v1 transaction
 * profiles, out_sample_v1.c, and Sample v2 chunks, out_sample_v2.c) share:
 * reading ids and strings from metadata parsed with jansson, writing
 * jansson values with the JSON writer, the debug images made from the
 * profile's native mappings, and which frames are in_app.
 */
#ifndef TM_SENTRY_JSON_H
#define TM_SENTRY_JSON_H

#include <jansson.h>

#include "profile/profile.h" /* tm_profile */
#include "wire/json_write.h" /* tm_jw */

/* Whether v is the string lit exactly (strings may hold NULs). */
int tm_sentry_str_is(const json_t *v, const char *lit);

/* The byte of the input a jansson error is about: the first byte of the
 * token its text names ("... near 'TOKEN'"), where json_error_t.position
 * is the byte after it; position itself when the text names none. */
uint64_t tm_sentry_json_error_offset(const json_error_t *je);

/* Relay's EventId: a UUID, simple or hyphenated, as 32 lowercase hex
 * digits into out. Returns 0 when v is not one. */
int tm_sentry_event_id(const json_t *v, char out[33]);

/* Writes a jansson value (strings, numbers, literals, containers). */
void tm_sentry_write_value(tm_jw *w, const json_t *v);

/* Debug images for native mappings with a build id, first encounter first,
 * deduplicated on (code_file, start), each preceded by ',' when comma or
 * after the first. Returns how many were written. */
size_t tm_sentry_write_images(tm_jw *w, const tm_profile *p, int comma);

/* Whether the profile has a mapping tm_sentry_write_images would write. */
int tm_sentry_has_images(const tm_profile *p);

/* Prefixes that decide in_app before the default rule (tracemill.h,
 * tm_sample_v2_options). */
typedef struct tm_in_app_rules {
    const char *const *in_app, *const *not_in_app;
    size_t n_in_app, n_not_in_app;
} tm_in_app_rules;

/* A frame's in_app: 1 or 0, or -1 when nothing says (no mapping path, no
 * class): the longest prefix of r that starts the frame's mapping path or
 * its Java class wins, in_app on a tie; else not in_app for kernel frames,
 * Java platform classes and, for frames without a class, pseudo mappings
 * ("[vdso]") and system libraries; in_app for the rest. */
int tm_sentry_in_app(const tm_profile *p, uint32_t frame, const tm_in_app_rules *r);

/* Whether a frame's package is its mapping's path, the very string (every
 * Perfetto frame's is): what holds for the path holds for the package. */
static inline bool tm_frame_package_is_mapping_path(const tm_profile *p, const tm_prof_frame *f) {
    return f->mapping && f->package.data == p->mappings[f->mapping - 1].path.data &&
           f->package.len == p->mappings[f->mapping - 1].path.len;
}

/* tm_sentry_in_app over many frames: a native frame without a package and
 * outside the kernel's addresses takes its mapping's answer, kept in
 * memo[mapping - 1] (n_mappings bytes, TM_IN_APP_UNKNOWN at first). */
#define TM_IN_APP_UNKNOWN INT8_MIN
int tm_sentry_in_app_memo(const tm_profile *p, uint32_t frame, const tm_in_app_rules *r, int8_t *memo);

/* An exporter's in_app prefixes (its options' lists and counts) as rules;
 * TM_ERR_INVALID_ARG, naming `who`, when a count comes without its list. */
tm_status tm_in_app_rules_of(const char *const *in_app, size_t n_in_app, const char *const *not_in_app,
                             size_t n_not_in_app, const char *who, tm_in_app_rules *out, tm_error *err);

#endif
