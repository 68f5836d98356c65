// header_cxx.cpp — tracemill.h must compile cleanly as C++ (extern "C",
// no C-only constructs). Built by CMake when a C++ compiler exists.
#include "tracemill.h"

int main() {
    tm_options opts = tm_options();
    tm_trace_free(nullptr);
    return opts.mode == TM_MODE_DEFAULT ? 0 : 1;
}
