/*
 * version.c — the library's version at run time (tm_version_number,
 * tm_version_string), from the header it was built with.
 */
#include "tracemill.h"

unsigned tm_version_number(void) { return TM_VERSION_NUMBER; }

const char *tm_version_string(void) { return TM_VERSION_STRING; }
