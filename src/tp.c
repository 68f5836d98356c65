/* tp.c — temporary: being written (Trace Processor model). */
#include <string.h>
#include "tp.h"
tm_status tm_tp_build(tm_tp *tp, tm_mem *mem, const uint8_t *buf, size_t len, const tm_limits *limits,
                      tm_error *err) {
    (void)buf, (void)len, (void)limits, (void)err;
    memset(tp, 0, sizeof *tp);
    tp->mem = mem;
    return TM_OK;
}
void tm_tp_release(tm_tp *tp) { (void)tp; }
const char *tp_unwind_error_name(unsigned u) { (void)u; return NULL; }
const char *tp_clock_name(uint32_t id) { (void)id; return NULL; }
const char *tp_stat_description(uint32_t key) { (void)key; return ""; }
