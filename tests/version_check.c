/*
 * version_check.c — the public header's version macros agree with each
 * other, with the CMake project version (TM_PROJECT_VERSION, passed by the
 * build) and with the library's tm_version_number()/tm_version_string().
 * Plain C (no Criterion): it runs in library-only builds too.
 */
#include <stdio.h>
#include <string.h>

#include "tracemill.h"

static int failures;

static void check(int ok, const char *what) {
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    if (!ok) failures++;
}

int main(void) {
    char want[64];
    snprintf(want, sizeof want, "%d.%d.%d", TM_VERSION_MAJOR, TM_VERSION_MINOR, TM_VERSION_PATCH);
    check(strcmp(want, TM_VERSION_STRING) == 0, "TM_VERSION_STRING is MAJOR.MINOR.PATCH");
    check(TM_VERSION_NUMBER == TM_VERSION_MAJOR * 10000 + TM_VERSION_MINOR * 100 + TM_VERSION_PATCH,
          "TM_VERSION_NUMBER is MAJOR*10000 + MINOR*100 + PATCH");
    check(TM_VERSION_MINOR < 100 && TM_VERSION_PATCH < 100, "MINOR and PATCH below 100");
#ifdef TM_PROJECT_VERSION
    check(strcmp(TM_PROJECT_VERSION, TM_VERSION_STRING) == 0, "TM_VERSION_STRING is the CMake project version");
#endif
    check(tm_version_number() == TM_VERSION_NUMBER, "tm_version_number() is TM_VERSION_NUMBER");
    check(strcmp(tm_version_string(), TM_VERSION_STRING) == 0, "tm_version_string() is TM_VERSION_STRING");
    printf("tracemill %s (%u)\n", tm_version_string(), tm_version_number());
    return failures ? 1 : 0;
}
