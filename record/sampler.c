/*
 * sampler.c — the signal-driven half of the recorder: one POSIX timer per
 * sampled thread (its CPU-time clock, or CLOCK_MONOTONIC for wall-clock
 * sampling) sending SIGPROF to that very thread, the async-signal-safe
 * handler that unwinds the interrupted stack (libunwind's DWARF CFI by
 * default, or a bounds-checked frame-pointer walk) into the thread's
 * single-producer single-consumer ring, and the /proc/self/task scan that
 * picks up threads however they were created.
 *
 * The handler takes no lock, calls no malloc and no stdio: it reads the
 * slot through the timer's sigev_value, checks that the slot is armed for
 * the calling thread, and publishes one ring entry with a release store.
 * (libunwind mmaps its per-thread frame cache on a thread's first sample,
 * with every signal blocked around its own lock.) The heap profiler
 * (heap.c) unwinds allocations with the same per-thread cache, which is not
 * reentrant: a signal that lands in such an unwind only leaves a note, and
 * the sample is taken when the unwind is over (tmr_sampler_take_deferred).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define UNW_LOCAL_ONLY
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libunwind.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "common/base.h" /* tm_fail */
#include "record.h"

#define NOINLINE_CAPTURE __attribute__((noinline))

/* Ring entry layout, in 64-bit words. */
enum { E_TS, E_CPU_DEPTH, E_OVERRUN, E_THREAD_CPU_NS, E_PCS };
/* Frames of the handler itself (it, libunwind, the signal trampoline) that
 * an unwind from inside it records before the interrupted one. */
enum { HANDLER_FRAMES_MAX = 16 };
_Static_assert(sizeof(void *) == sizeof(uint64_t), "ring entries hold pcs as 64-bit words");

typedef struct tmr_slot {
    _Atomic int32_t tid;         /* 0: free */
    _Atomic int armed;           /* the handler accepts signals for this slot */
    uint32_t seq;
    uint64_t start_time;         /* /proc starttime: tells a reused tid from the old thread */
    char name[32];
    uint64_t scan_gen;
    timer_t timer;
    int has_timer;
    _Atomic uint64_t last_sp;    /* frame-pointer mode: a stack pointer seen by the handler */
    _Atomic uint64_t stack_hi;   /* frame-pointer mode: top of the thread's stack; 0 unknown */
    _Atomic uint32_t head;       /* written by the handler */
    _Atomic uint32_t tail;       /* written by the collector */
    _Atomic uint64_t lost;       /* samples a full ring dropped */
    uint64_t lost_reported;
    uint64_t *entries;
} tmr_slot;

struct tmr_sampler {
    tmr_sampler_opts o;
    uint32_t entry_words;
    struct sigaction old_action;
    tmr_slot **slots;
    size_t n_slots, cap_slots;
    uint32_t next_seq;
    uint64_t scan_gen;
};

/* The active sampler (one per process: it owns SIGPROF) and the number of
 * handlers running, so that freeing waits for them. */
static _Atomic(tmr_sampler *) g_sampler;
static atomic_int g_in_handler;

/* ---- the signal path ---------------------------------------------------- */

__thread volatile int tmr_unwind_busy __attribute__((tls_model("initial-exec")));
/* The slot of a signal that came while tmr_unwind_busy, and its overruns. */
static __thread _Atomic(tmr_slot *) t_deferred __attribute__((tls_model("initial-exec")));
static __thread int t_deferred_overrun __attribute__((tls_model("initial-exec")));

/* unw_step from the signal context: each step blocks and restores every
 * signal around libunwind's global cache lock, two system calls a frame. */
static uint32_t unwind_stepwise(ucontext_t *uc, uint64_t *pcs, uint32_t max) {
    unw_cursor_t cursor;
    if (unw_init_local2(&cursor, (unw_context_t *)uc, UNW_INIT_SIGNAL_FRAME) < 0) {
        pcs[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
        return 1;
    }
    uint32_t n = 0;
    do {
        unw_word_t ip;
        if (unw_get_reg(&cursor, UNW_REG_IP, &ip) < 0 || ip == 0) break;
        pcs[n++] = ip;
    } while (n < max && unw_step(&cursor) > 0);
    return n;
}

/* unw_backtrace caches each return address's frame layout per thread, so
 * once warm it unwinds with no system call (~50x faster than stepping). It
 * starts in this handler: the frames before the interrupted pc are dropped,
 * and when that pc is not among the first HANDLER_FRAMES_MAX, stepping from
 * the signal context does the job. pcs has room for max + HANDLER_FRAMES_MAX. */
static uint32_t unwind_dwarf(ucontext_t *uc, uint64_t *pcs, uint32_t max) {
    uint64_t rip = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    void **frames = (void **)pcs;
    int n = unw_backtrace(frames, (int)(max + HANDLER_FRAMES_MAX));
    for (int i = 0; i < n && i <= HANDLER_FRAMES_MAX; i++) {
        if ((uint64_t)(uintptr_t)frames[i] != rip) continue;
        uint32_t depth = (uint32_t)(n - i) < max ? (uint32_t)(n - i) : max;
        memmove(pcs, frames + i, depth * sizeof *frames); /* void * and uint64_t: same size (asserted above) */
        return depth;
    }
    return unwind_stepwise(uc, pcs, max);
}

/* Follows saved frame pointers only inside [sp, stack top): a binary built
 * without frame pointers gives a short or wrong stack, never a crash. */
static uint32_t unwind_fp(tmr_slot *t, ucontext_t *uc, uint64_t *pcs, uint32_t max) {
    uint64_t sp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
    uint64_t fp = (uint64_t)uc->uc_mcontext.gregs[REG_RBP];
    uint64_t hi = atomic_load_explicit(&t->stack_hi, memory_order_relaxed);
    pcs[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    if (hi == 0) atomic_store_explicit(&t->last_sp, sp, memory_order_relaxed);
    uint32_t n = 1;
    uint64_t lo = sp;
    while (n < max && hi != 0) {
        if (fp < lo || fp > hi - 16 || (fp & 7) != 0) break;
        const uint64_t *frame = (const uint64_t *)fp;
        uint64_t next = frame[0], ret = frame[1];
        if (ret == 0) break;
        pcs[n++] = ret;
        if (next <= fp) break;
        lo = fp + 16;
        fp = next;
    }
    return n;
}

/* One sample into t's ring, unwound from the signal context uc, or (uc
 * NULL, a deferred sample) from the caller of tmr_sampler_take_deferred. */
static NOINLINE_CAPTURE void capture(const tmr_sampler *s, tmr_slot *t, ucontext_t *uc, int overrun) {
    uint32_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(&t->tail, memory_order_acquire);
    if (head - tail >= s->o.ring_samples) {
        atomic_fetch_add_explicit(&t->lost, 1, memory_order_relaxed);
        return;
    }
    uint64_t *e = t->entries + (size_t)(head & (s->o.ring_samples - 1)) * s->entry_words;
    struct timespec ts, used;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    /* The thread's CPU time so far: the difference to its previous sample
     * is the CPU time this sample stands for, whatever the timer delivered. */
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used) != 0) used.tv_sec = used.tv_nsec = 0;
    int cpu = sched_getcpu();
    uint32_t depth;
    if (!uc) { /* this frame and tmr_sampler_take_deferred's are the sampler's own */
        void **frames = (void **)(e + E_PCS);
        int n = unw_backtrace(frames, (int)(s->o.max_depth + 2));
        depth = n > 2 ? (uint32_t)n - 2 : 0;
        memmove(frames, frames + 2, depth * sizeof *frames);
    } else {
        depth = s->o.unwind_fp ? unwind_fp(t, uc, e + E_PCS, s->o.max_depth)
                               : unwind_dwarf(uc, e + E_PCS, s->o.max_depth);
    }
    if (depth == 0) return;
    e[E_TS] = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    e[E_CPU_DEPTH] = (uint64_t)(uint32_t)(cpu < 0 ? 0 : cpu) | (uint64_t)depth << 32;
    e[E_OVERRUN] = overrun > 0 ? (uint64_t)overrun : 0;
    e[E_THREAD_CPU_NS] = (uint64_t)used.tv_sec * 1000000000u + (uint64_t)used.tv_nsec;
    atomic_store_explicit(&t->head, head + 1, memory_order_release);
}

static void on_sigprof(int signo, siginfo_t *si, void *uc) {
    (void)signo;
    int saved_errno = errno;
    atomic_fetch_add(&g_in_handler, 1);
    const tmr_sampler *s = atomic_load(&g_sampler);
    if (s && si->si_code == SI_TIMER && si->si_value.sival_ptr) {
        tmr_slot *t = si->si_value.sival_ptr;
        if (atomic_load_explicit(&t->armed, memory_order_acquire) &&
            atomic_load_explicit(&t->tid, memory_order_relaxed) == gettid()) {
            if (tmr_unwind_busy) {
                t_deferred_overrun += si->si_overrun;
                atomic_store(&t_deferred, t);
            } else {
                capture(s, t, uc, si->si_overrun);
            }
        }
    }
    atomic_fetch_sub(&g_in_handler, 1);
    errno = saved_errno;
}

void tmr_sampler_take_deferred(void) {
    while (atomic_load_explicit(&t_deferred, memory_order_relaxed)) {
        atomic_fetch_add(&g_in_handler, 1);
        tmr_unwind_busy = 1; /* a signal during this capture is deferred in turn */
        tmr_slot *t = atomic_exchange(&t_deferred, NULL);
        int overrun = t_deferred_overrun;
        t_deferred_overrun = 0;
        const tmr_sampler *s = atomic_load(&g_sampler);
        if (s && atomic_load_explicit(&t->armed, memory_order_acquire) &&
            atomic_load_explicit(&t->tid, memory_order_relaxed) == gettid())
            capture(s, t, NULL, overrun);
        tmr_unwind_busy = 0;
        atomic_fetch_sub(&g_in_handler, 1);
    }
}

/* ---- setup and teardown ------------------------------------------------- */

void tmr_unwind_init(void) {
    /* libunwind's first use opens a pipe (to check addresses) that it keeps
     * for good: with stdin, stdout or stderr closed, it would take their
     * numbers, and the program's writes to them would go into it. They are
     * held on /dev/null meanwhile. */
    int held[3], n_held = 0;
    for (int fd; n_held < 3 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) {
        if (fd > STDERR_FILENO) {
            close(fd);
            break;
        }
        held[n_held++] = fd;
    }
    unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
    /* unw_backtrace's first call creates its per-thread cache key and pool:
     * done here, outside any signal handler. */
    void *warm[4];
    unw_backtrace(warm, 4);
    while (n_held) close(held[--n_held]);
}

tmr_sampler *tmr_sampler_new(const tmr_sampler_opts *o, tm_error *err) {
    if (o->hz == 0 || o->max_depth == 0 || o->ring_samples == 0 || (o->ring_samples & (o->ring_samples - 1))) {
        tm_fail(err, TM_ERR_INVALID_ARG, 0, NULL, "sampler: hz, max_depth and a power-of-two ring size are required");
        return NULL;
    }
    tmr_sampler *s = calloc(1, sizeof *s);
    if (!s) {
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "sampler: out of memory");
        return NULL;
    }
    s->o = *o;
    s->entry_words = E_PCS + o->max_depth + (o->unwind_fp ? 0 : HANDLER_FRAMES_MAX); /* see unwind_dwarf */
    tmr_sampler *none = NULL;
    if (!atomic_compare_exchange_strong(&g_sampler, &none, s)) {
        free(s);
        tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL,
            "another recorder is already sampling this process (SIGPROF is taken)");
        return NULL;
    }
    /* g_sampler is claimed but no timer exists yet, so no SIGPROF of ours can
     * arrive before the handler is in place. */
    if (sigaction(SIGPROF, NULL, &s->old_action) != 0 ||
        (s->old_action.sa_flags & SA_SIGINFO) ||
        (s->old_action.sa_handler != SIG_DFL && s->old_action.sa_handler != SIG_IGN)) {
        atomic_store(&g_sampler, NULL);
        free(s);
        tm_fail(err, TM_ERR_UNSUPPORTED, 0, NULL,
                "the program already has a SIGPROF handler (setitimer profiling, gprof or another "
                "profiler?); tracemill's recorder needs SIGPROF and will not replace it");
        return NULL;
    }
    if (!o->unwind_fp) tmr_unwind_init();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sigprof;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPROF, &sa, NULL) != 0) {
        atomic_store(&g_sampler, NULL);
        free(s);
        tm_fail(err, TM_ERR_IO, 0, NULL, "sampler: cannot install the SIGPROF handler");
        return NULL;
    }
    return s;
}

static void slot_disarm(tmr_slot *t) {
    atomic_store_explicit(&t->armed, 0, memory_order_release);
    if (t->has_timer) timer_delete(t->timer);
    t->has_timer = 0;
}

void tmr_sampler_disarm(tmr_sampler *s) {
    for (size_t i = 0; i < s->n_slots; i++) slot_disarm(s->slots[i]);
}

void tmr_sampler_forget_after_fork(tmr_sampler *s) {
    atomic_store(&g_sampler, NULL);
    atomic_store(&g_in_handler, 0);
    for (size_t i = 0; i < s->n_slots; i++) {
        atomic_store(&s->slots[i]->armed, 0);
        s->slots[i]->has_timer = 0;
    }
}

void tmr_sampler_free(tmr_sampler *s) {
    if (!s) return;
    tmr_sampler_disarm(s);
    tmr_sampler *self = s;
    int owned = atomic_compare_exchange_strong(&g_sampler, &self, NULL);
    while (atomic_load(&g_in_handler) > 0) {
        struct timespec pause = {0, 100000};
        nanosleep(&pause, NULL);
    }
    /* The disposition goes back only while the handler is still ours: a
     * program that took SIGPROF for itself since (with its own ITIMER_PROF
     * still armed) would be killed by the default action before exit
     * flushes its output. */
    struct sigaction now;
    if (owned && sigaction(SIGPROF, NULL, &now) == 0 && (now.sa_flags & SA_SIGINFO) && now.sa_sigaction == on_sigprof)
        sigaction(SIGPROF, &s->old_action, NULL);
    for (size_t i = 0; i < s->n_slots; i++) {
        free(s->slots[i]->entries);
        free(s->slots[i]);
    }
    free(s->slots);
    free(s);
}

/* ---- thread registry (collector thread only) ----------------------------- */

/* Linux encodes another thread's CPU-time clock as (~tid << 3) | PERTHREAD |
 * SCHED (what pthread_getcpuclockid computes); the scan knows tids, not
 * pthread_t values. */
static clockid_t thread_cpu_clock(int32_t tid) {
    return (clockid_t)(((unsigned)~tid << 3) | 4u | 2u);
}

/* The name and start time in a thread's stat line; 0 when it has neither. */
static int parse_thread_stat(char *buf, char *name, size_t name_cap, uint64_t *start_time) {
    char *open = strchr(buf, '('), *close = strrchr(buf, ')');
    if (!open || !close || close < open) return 0;
    size_t len = (size_t)(close - open - 1);
    if (len >= name_cap) len = name_cap - 1;
    memcpy(name, open + 1, len);
    name[len] = 0;
    /* starttime is field 22; fields after ')' start at 3 (state). */
    char *p = close + 1;
    for (int field = 3; field < 22 && p; field++) p = strchr(p + 1, ' ');
    *start_time = p ? strtoull(p + 1, NULL, 10) : 0;
    return 1;
}

/* Name and start time of a thread from /proc/self/task/TID/stat; 0 when it
 * is gone. */
static int read_thread_stat(int32_t tid, char *name, size_t name_cap, uint64_t *start_time) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
    size_t n;
    char *buf = tmr_read_own(path, &n);
    if (!buf) return 0;
    int ok = parse_thread_stat(buf, name, name_cap, start_time);
    free(buf);
    return ok;
}

static tmr_slot *slot_take(tmr_sampler *s) {
    for (size_t i = 0; i < s->n_slots; i++)
        if (atomic_load(&s->slots[i]->tid) == 0) return s->slots[i];
    if (s->n_slots == s->cap_slots) {
        size_t cap = s->cap_slots ? s->cap_slots * 2 : 16;
        tmr_slot **grown = realloc(s->slots, cap * sizeof *grown);
        if (!grown) return NULL;
        s->slots = grown;
        s->cap_slots = cap;
    }
    tmr_slot *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->entries = calloc((size_t)s->o.ring_samples * s->entry_words, sizeof(uint64_t));
    if (!t->entries) {
        free(t);
        return NULL;
    }
    s->slots[s->n_slots++] = t;
    return t;
}

/* Registers tid and arms its timer; 0 when the thread vanished meanwhile. */
static int slot_arm(tmr_sampler *s, tmr_slot *t, int32_t tid) {
    atomic_store(&t->head, 0);
    atomic_store(&t->tail, 0);
    atomic_store(&t->lost, 0);
    atomic_store(&t->stack_hi, 0);
    atomic_store(&t->last_sp, 0);
    t->lost_reported = 0;
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev.sigev_value.sival_ptr = t;
    sev._sigev_un._tid = tid;
    clockid_t clock = s->o.wall_clock ? CLOCK_MONOTONIC : thread_cpu_clock(tid);
    if (timer_create(clock, &sev, &t->timer) != 0) return 0;
    t->has_timer = 1;
    atomic_store(&t->tid, tid);
    atomic_store_explicit(&t->armed, 1, memory_order_release);
    long period_ns = 1000000000L / (long)s->o.hz;
    struct itimerspec its;
    its.it_interval.tv_sec = period_ns / 1000000000L;
    its.it_interval.tv_nsec = period_ns % 1000000000L;
    its.it_value = its.it_interval;
    if (timer_settime(t->timer, 0, &its, NULL) != 0) {
        slot_disarm(t);
        atomic_store(&t->tid, 0);
        return 0;
    }
    return 1;
}

/* Frame-pointer mode: the handler reported a stack pointer; the mapping
 * holding it bounds the walk. */
static void find_stack_top(tmr_slot *t) {
    uint64_t sp = atomic_load(&t->last_sp);
    if (sp == 0 || atomic_load(&t->stack_hi) != 0) return;
    char *text;
    FILE *f = tmr_fopen_own("/proc/self/maps", &text);
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long long lo, hi;
        if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && sp >= lo && sp < hi) {
            atomic_store(&t->stack_hi, (uint64_t)hi);
            break;
        }
    }
    fclose(f);
    free(text);
}

static size_t slot_drain(tmr_sampler *s, tmr_slot *t, tmr_sample_fn on_sample, void *ctx, int final) {
    if (s->o.unwind_fp) find_stack_top(t);
    uint32_t tail = atomic_load_explicit(&t->tail, memory_order_relaxed);
    uint32_t head = atomic_load_explicit(&t->head, memory_order_acquire);
    size_t n = 0;
    tmr_raw_sample r;
    r.seq = t->seq;
    r.tid = atomic_load(&t->tid);
    for (; tail != head; tail++, n++) {
        const uint64_t *e = t->entries + (size_t)(tail & (s->o.ring_samples - 1)) * s->entry_words;
        uint64_t lost = atomic_load_explicit(&t->lost, memory_order_relaxed);
        r.cpu = (uint32_t)e[E_CPU_DEPTH];
        r.depth = (uint32_t)(e[E_CPU_DEPTH] >> 32);
        r.ts_ns = e[E_TS];
        r.overruns = e[E_OVERRUN];
        r.thread_cpu_ns = e[E_THREAD_CPU_NS];
        r.pcs = e + E_PCS;
        r.lost = lost - t->lost_reported;
        t->lost_reported = lost;
        on_sample(ctx, &r);
        atomic_store_explicit(&t->tail, tail + 1, memory_order_release);
    }
    uint64_t lost = atomic_load(&t->lost);
    if (final && lost != t->lost_reported) {
        r.depth = 0;
        r.pcs = NULL;
        r.cpu = 0;
        r.ts_ns = 0;
        r.overruns = 0;
        r.thread_cpu_ns = 0;
        r.lost = lost - t->lost_reported;
        t->lost_reported = lost;
        on_sample(ctx, &r);
    }
    return n;
}

size_t tmr_sampler_drain(tmr_sampler *s, tmr_sample_fn on_sample, void *ctx) {
    size_t n = 0;
    for (size_t i = 0; i < s->n_slots; i++)
        if (atomic_load(&s->slots[i]->tid) != 0) n += slot_drain(s, s->slots[i], on_sample, ctx, !s->slots[i]->has_timer);
    return n;
}

static tmr_slot *slot_of(tmr_sampler *s, int32_t tid) {
    for (size_t i = 0; i < s->n_slots; i++)
        if (atomic_load(&s->slots[i]->tid) == tid) return s->slots[i];
    return NULL;
}

static void slot_retire(tmr_sampler *s, tmr_slot *t, tmr_sample_fn on_sample, void *ctx) {
    slot_disarm(t);
    slot_drain(s, t, on_sample, ctx, 1);
    atomic_store(&t->tid, 0);
}

/* The ids of this process's threads (malloc'd, *n of them), read from
 * /proc/self/task through a descriptor of its own (getdents64: a DIR
 * would close its descriptor whoever's it is by then); NULL when it cannot
 * be read. */
static int32_t *task_ids(size_t *n) {
    tmr_own_fd own;
    if (tmr_own_open(&own, "/proc/self/task", O_RDONLY | O_DIRECTORY, 0) != 0) return NULL;
    int32_t *ids = NULL;
    size_t cap = 0;
    int ok = 1;
    *n = 0;
    _Alignas(8) char buf[4096];
    long got;
    while (ok && (got = (long)getdents64(own.fd, buf, sizeof buf)) > 0)
        for (long at = 0; ok && at < got;) {
            unsigned short reclen; /* linux_dirent64: ino (8), off (8), reclen (2), type (1), name */
            memcpy(&reclen, buf + at + 16, sizeof reclen);
            char *end, *entry = buf + at + 19;
            at += reclen;
            long tid = strtol(entry, &end, 10);
            if (*end || tid <= 0) continue;
            ok = !tmr_grow((void **)&ids, &cap, sizeof *ids, *n + 1);
            if (ok) ids[(*n)++] = (int32_t)tid;
        }
    ok = ok && got == 0 && tmr_own_still(&own);
    tmr_own_close(&own);
    if (!ok) free(ids);
    return ok ? ids : NULL;
}

tm_status tmr_sampler_scan(tmr_sampler *s, int32_t skip_tid, tmr_thread_fn on_thread, tmr_sample_fn on_sample,
                           void *ctx, tm_error *err) {
    size_t n_tasks;
    int32_t *tasks = task_ids(&n_tasks);
    if (!tasks) {
        tm_fail(err, TM_ERR_IO, 0, NULL, "sampler: cannot read /proc/self/task");
        return TM_ERR_IO;
    }
    uint64_t gen = ++s->scan_gen;
    for (size_t k = 0; k < n_tasks; k++) {
        int32_t tid = tasks[k];
        if (tid == skip_tid) continue;
        char name[32];
        uint64_t start_time;
        if (!read_thread_stat(tid, name, sizeof name, &start_time)) continue;
        tmr_slot *t = slot_of(s, tid);
        if (t && t->start_time != start_time) { /* the tid was reused by a new thread */
            slot_retire(s, t, on_sample, ctx);
            t = NULL;
        }
        if (!t) {
            t = slot_take(s);
            if (!t) {
                free(tasks);
                tm_fail(err, TM_ERR_NOMEM, 0, NULL, "sampler: out of memory");
                return TM_ERR_NOMEM;
            }
            if (!slot_arm(s, t, tid)) continue;
            t->seq = ++s->next_seq;
            t->start_time = start_time;
            t->name[0] = 0;
        }
        t->scan_gen = gen;
        if (strcmp(t->name, name) != 0) {
            snprintf(t->name, sizeof t->name, "%s", name);
            on_thread(ctx, t->seq, tid, name);
        }
    }
    free(tasks);
    for (size_t i = 0; i < s->n_slots; i++) {
        tmr_slot *t = s->slots[i];
        if (atomic_load(&t->tid) != 0 && t->scan_gen != gen) slot_retire(s, t, on_sample, ctx);
    }
    return TM_OK;
}
