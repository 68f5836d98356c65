/*
 * perf_unwind.c — the perf backend's user-stack unwinder: DWARF CFI
 * unwinding of one sample in the recorder process, over the registers and
 * the copy of the user stack the kernel put in the sample
 * (PERF_SAMPLE_REGS_USER, PERF_SAMPLE_STACK_USER), with elfutils libdw.
 *
 * One Dwfl per sampled process: its modules are the ELF files of the
 * process's live executable mappings (each reported once, at the address
 * where the file's offset 0 is mapped: start - offset of its first
 * executable mapping); a new Dwfl when the mappings change. The Dwfl is
 * attached once, with callbacks that read "the thread" being unwound from
 * the sample in hand: memory_read serves the stack copy, and
 * set_initial_registers hands libdw the sampled registers in DWARF order.
 * Memory outside the stack copy cannot be read, so a stack whose frames
 * go beyond the copy ends early (the partial stack is kept).
 *
 * x86-64 only: the register layout is x86-64's.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <elfutils/libdwfl.h>
#include <string.h>

#include "common/base.h" /* tm_fail */
#include "record.h"

struct tmr_unwinder {
    Dwfl *dwfl;
    int32_t pid;
    int attached;                   /* dwfl_attach_state succeeded */
    const tmr_unwind_input *in;     /* the sample being unwound */
    uint64_t *pcs;                  /* its frames, filled by on_frame */
    uint32_t depth, max;
    int truncated;                  /* the stack had more than max frames */
};

static const Dwfl_Callbacks dwfl_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

tmr_unwinder *tmr_unwind_new(int32_t pid, tm_error *err) {
    tmr_unwinder *u = calloc(1, sizeof *u);
    if (!u) {
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        return NULL;
    }
    u->pid = pid;
    return u;
}

void tmr_unwind_free(tmr_unwinder *u) {
    if (!u) return;
    if (u->dwfl) dwfl_end(u->dwfl);
    free(u);
}

void tmr_unwind_set_mappings(tmr_unwinder *u, const tmr_symbols *syms) {
    /* A new Dwfl each time: modules reported again into a Dwfl already
     * attached were not found by its unwinder (a sample during the dynamic
     * loader's work, then the libraries' mappings, left whole runs without
     * stacks). Mappings change seldom after a process starts. */
    if (u->dwfl) dwfl_end(u->dwfl);
    u->attached = 0;
    u->dwfl = dwfl_begin(&dwfl_callbacks);
    if (!u->dwfl) return; /* out of memory: samples keep their pc (or the kernel's callchain) */
    int idx[4096];
    size_t n = tmr_symbols_live(syms, idx, sizeof idx / sizeof idx[0]);
    if (n > sizeof idx / sizeof idx[0]) n = sizeof idx / sizeof idx[0];
    dwfl_report_begin(u->dwfl);
    for (size_t i = 0; i < n; i++) {
        const tmr_mapping *m = tmr_symbols_mapping(syms, idx[i]);
        if (m->path[0] != '/' || m->start < m->offset) continue;
        /* A file is one module: its first (lowest) executable mapping places it. */
        int seen = 0;
        for (size_t k = 0; k < i && !seen; k++) seen = strcmp(tmr_symbols_mapping(syms, idx[k])->path, m->path) == 0;
        if (!seen) dwfl_report_elf(u->dwfl, m->path, m->open_path, -1, m->start - m->offset, false);
    }
    dwfl_report_end(u->dwfl, NULL, NULL);
}

/* ---- the callbacks: one thread, the sample's ---- */

static pid_t next_thread(Dwfl *dwfl, void *arg, void **thread_arg) {
    (void)dwfl;
    tmr_unwinder *u = arg;
    if (*thread_arg) return 0; /* one thread per sample, already listed */
    *thread_arg = u;
    return u->in ? u->in->tid : 0;
}

static bool get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_arg) {
    (void)dwfl;
    tmr_unwinder *u = arg;
    *thread_arg = u;
    return u->in && u->in->tid == tid;
}

static bool memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg) {
    (void)dwfl;
    const tmr_unwind_input *in = ((tmr_unwinder *)arg)->in;
    uint64_t sp = in->regs[TMR_PERF_REG_SP];
    if (addr < sp || addr - sp > in->stack_len || in->stack_len - (addr - sp) < sizeof *result) return false;
    memcpy(result, in->stack + (addr - sp), sizeof *result);
    return true;
}

static bool set_initial_registers(Dwfl_Thread *thread, void *arg) {
    const uint64_t *r = ((tmr_unwinder *)arg)->in->regs;
    /* DWARF x86-64 numbering: rax rdx rcx rbx rsi rdi rbp rsp r8..r15, then
     * the return address column 16 (rip). */
    Dwarf_Word d[17] = {r[TMR_PERF_REG_AX], r[TMR_PERF_REG_DX], r[TMR_PERF_REG_CX], r[TMR_PERF_REG_BX],
                        r[TMR_PERF_REG_SI], r[TMR_PERF_REG_DI], r[TMR_PERF_REG_BP], r[TMR_PERF_REG_SP]};
    for (int i = 0; i < 8; i++) d[8 + i] = r[TMR_PERF_REG_R8 + i];
    d[16] = r[TMR_PERF_REG_IP];
    if (!dwfl_thread_state_registers(thread, 0, 17, d)) return false;
    dwfl_thread_state_register_pc(thread, r[TMR_PERF_REG_IP]);
    return true;
}

static const Dwfl_Thread_Callbacks thread_callbacks = {
    .next_thread = next_thread,
    .get_thread = get_thread,
    .memory_read = memory_read,
    .set_initial_registers = set_initial_registers,
};

static int on_frame(Dwfl_Frame *state, void *arg) {
    tmr_unwinder *u = arg;
    Dwarf_Addr pc;
    if (!dwfl_frame_pc(state, &pc, NULL) || pc == 0) return DWARF_CB_ABORT;
    if (u->depth == u->max) {
        u->truncated = 1;
        return DWARF_CB_ABORT;
    }
    u->pcs[u->depth++] = pc;
    return DWARF_CB_OK;
}

uint32_t tmr_unwind(tmr_unwinder *u, const tmr_unwind_input *in, uint64_t *pcs, uint32_t max, int *end) {
    *end = TMR_UNWIND_PARTIAL;
    if (max == 0) return 0;
    u->in = in, u->pcs = pcs, u->depth = 0, u->max = max, u->truncated = 0;
    /* The machine comes from the first module's ELF: attach once there is one. */
    if (!u->attached && u->dwfl) u->attached = dwfl_attach_state(u->dwfl, NULL, u->pid, &thread_callbacks, u);
    if (u->attached) {
        /* 0: the outermost frame was reached; DWARF_CB_ABORT: on_frame
         * stopped at a zero pc (also the end) or at max; -1: a frame could
         * not be unwound. */
        int rc = dwfl_getthread_frames(u->dwfl, in->tid, on_frame, u);
        *end = u->truncated ? TMR_UNWIND_TRUNCATED
               : rc == 0 || rc == DWARF_CB_ABORT ? TMR_UNWIND_COMPLETE
                                                 : TMR_UNWIND_PARTIAL;
    }
    if (u->depth == 0) { /* not even the first frame: the sampled pc alone */
        pcs[0] = in->regs[TMR_PERF_REG_IP];
        u->depth = 1;
    }
    u->in = NULL;
    return u->depth;
}
