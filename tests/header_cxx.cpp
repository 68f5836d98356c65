// header_cxx.cpp — the public headers (tracemill.h, tracemill_sql.h,
// tracemill_record.h) must compile cleanly as C++ (extern "C", no C-only
// constructs). Built by CMake when a C++ compiler exists; links only
// libtracemill, so it calls nothing of the recorder.
#include "tracemill.h"
#include "tracemill_record.h"
#include "tracemill_sql.h"

int main() {
    tm_options opts = tm_options();
    tm_recorder_options ropts = tm_recorder_options();
    tm_trace_free(nullptr);
    tm_db_free(nullptr);
    return opts.mode == TM_MODE_DEFAULT && ropts.hz == 0 ? 0 : 1;
}
