/*
 * perf_record.c — the perf backend of `tracemill record`: the program
 * tracemill-record-perf, which runs a command under perf_event_open and
 * writes its Perfetto trace. Nothing is injected into the command: it is
 * forked, and before it calls exec the recorder opens, on it, one software
 * cpu-clock event per CPU (inherit: every thread and child process it will
 * start; enable_on_exec: counting starts at its first instruction), each
 * with a ring buffer this process reads. Samples carry the user registers
 * and a copy of the user stack, unwound here with DWARF (perf_unwind.c);
 * MMAP2, COMM, FORK and EXIT records give every process's mappings,
 * thread names, threads and children. Records of all rings are put in time
 * order before they are used (a record is used once every ring has been
 * read past its time), and each process becomes a tmr_symbols, an
 * unwinder and a tmr_writer of its own (its own Perfetto sequence and
 * ProcessTree) writing into one trace file.
 *
 * It runs until the command exits (SIGTERM and SIGHUP, and SIGINT/SIGQUIT
 * sent by kill rather than by the terminal, are forwarded to it), drains
 * the rings and exits with the command's status (128+N when killed by
 * signal N), 127 when the command cannot be run, 125 for its own failures.
 * With --duration it stops sampling after that long, writes the trace and
 * still waits for the command (passing signals on), as its parent.
 *
 * -p PID,... attaches instead: one event per CPU on every thread of each
 * process (inherit: the threads and children they start later), all
 * writing into one ring per CPU (PERF_EVENT_IOC_SET_OUTPUT); the processes'
 * names, threads and mappings come from /proc, as no record announces what
 * existed before. Recording ends at --duration, at SIGINT, SIGTERM, SIGHUP
 * or SIGQUIT, or when every process has exited; they are never signalled.
 * Exit 0, or 125.
 *
 * x86-64 only (the sampled register set and the unwinder's are x86-64's).
 *
 * -a records every process: one event per CPU (pid -1), processes
 * described from /proc when first seen; it ends at --duration or a signal,
 * as attaching does. The recorder's own samples are left out.
 *
 * --kernel samples kernel mode too: the kernel's own callchain comes first
 * in each stack, named from /proc/kallsyms. A stack longer than
 * --max-depth is cut there and marked (TMR_SAMPLE_TRUNCATED).
 *
 * --off-cpu records blocked time too: a second event per CPU (and thread),
 * the software context-switches counter sampled at every switch (period 1,
 * with the same registers and stack copy), takes the stack where a thread
 * leaves the CPU; its context_switch records (PERF_RECORD_SWITCH, or
 * SWITCH_CPU_WIDE with -a) say when it comes back. The stack is unwound at
 * the switch-out and kept until the thread's switch-in, then written as an
 * off-CPU sample (TMR_SAMPLE_OFF_CPU) on the thread's off-CPU sequence,
 * timestamped at the switch-out, weighing the time between the two. The
 * switch-out happens in the kernel, so this event cannot exclude kernel
 * mode: it needs kernel.perf_event_paranoid <= 1, CAP_PERFMON or root (with
 * exclude_kernel the kernel never counts a switch); without that it is
 * refused with the reason, and exit 125. A thread still off the CPU when
 * recording ends weighs the time up to that end.
 *
 * Usage: tracemill-record-perf [-F HZ] [-o FILE] [--max-depth N] [--demangle]
 *                              [--duration S] [--kernel] [--off-cpu]
 *                              (-p PID[,PID...] | -a | -- CMD ARGS...)
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/base.h" /* tm_fail, TM_TRY */
#include "record.h"

#if !defined(__x86_64__)
#error "the perf backend samples x86-64 registers"
#endif

enum {
    EXIT_OWN_FAILURE = 125, /* as timeout(1) and env(1): the recorder failed, not the command */
    EXIT_NOT_EXECUTABLE = 126, /* as a shell: the command is there but cannot be executed */
    EXIT_NOT_FOUND = 127,      /* as a shell: no such command */
    STACK_BYTES = 32768,    /* user stack copied per sample */
    RING_BYTES_MAX = 8 << 20,   /* per CPU ring: 256 samples of a full stack copy, 128 ms at 1000 Hz x 2 */
    RING_BYTES_TOTAL = 64 << 20, /* over all CPUs (rings are locked memory); halved while the kernel refuses */
    DEFAULT_MAX_DEPTH = 256,
    POLL_MS = 100,
    MAX_PIDS = 1024
};

/* ---- the command line ---- */

typedef struct opts {
    unsigned hz;
    const char *out;
    uint32_t max_depth;
    int demangle;
    double duration;    /* seconds; 0: until the end */
    int kernel;         /* --kernel: kernel mode sampled too, with the kernel's callchain */
    int off_cpu;        /* --off-cpu: blocked time, with the stack at each switch-out */
    int system_wide;    /* -a: every process, one event per CPU */
    int sample_read;    /* samples carry their event's count (PERF_SAMPLE_READ): not a flag, probed */
    int32_t *pids;      /* -p: the processes attached to */
    size_t n_pids;
    char **cmd;         /* NULL with -p */
    const char *cmd_gains; /* --cmd-gains WHAT: CMD gains privileges as it starts (record checked), so it is not
                              sampled: what it is ("set-user-ID (uid 0)"), said when no sample came */
    struct sigaction sigpipe; /* SIGPIPE as inherited, for the command (we ignore it: see install_signals) */
} opts;

static int usage(const char *why) {
    fprintf(stderr,
            "tracemill-record-perf: %s\n"
            "usage: tracemill-record-perf [-F HZ] [-o FILE] [--max-depth N] [--demangle] [--duration S] [--kernel]\n"
            "                             [--off-cpu] [--cmd-gains WHAT]\n"
            "                             (-p PID[,PID...] | -a | -- CMD ARGS...)\n",
            why);
    return EXIT_OWN_FAILURE;
}

/* ---- signals: a self-pipe carries what the handlers saw ---- */

static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig, siginfo_t *info, void *uc) {
    (void)uc;
    int saved = errno;
    /* Ctrl-C and Ctrl-\ reach the command from the terminal already; only
     * a signal sent by a process (kill) is forwarded. */
    unsigned char b[2] = {(unsigned char)sig, (unsigned char)(info && info->si_code <= 0)};
    ssize_t w = write(g_sig_pipe[1], b, sizeof b);
    (void)w;
    errno = saved;
}

/* A reader of our stderr that went away (record ... 2>&1 | head -1) must
 * not end us before the trace is whole: SIGPIPE is ignored, writes fail
 * with EPIPE instead. The command gets SIGPIPE back as inherited. */
static int install_signals(opts *o) {
    if (pipe2(g_sig_pipe, O_CLOEXEC | O_NONBLOCK)) return -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    if (sigaction(SIGPIPE, &sa, &o->sigpipe)) return -1;
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    static const int sigs[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (sigaction(sigs[i], &sa, NULL)) return -1;
    return 0;
}

/* ---- events and rings ---- */

typedef struct ring {
    int fd;
    uint32_t cpu;
    int off_cpu;         /* the off-CPU event's ring (--off-cpu) */
    uint8_t *base;       /* the metadata page, then data */
    size_t data_size;    /* a power of two */
} ring;

static uint64_t boottime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* launch: the event waits for the command's exec (enable_on_exec); else it
 * counts from now, on a process already running. off_cpu: the off-CPU
 * event (context switches, each sampled, with switch records) instead of
 * cpu-clock; the cpu-clock event alone reports mappings, names and tasks. */
static void perf_attr(struct perf_event_attr *a, const opts *o, int launch, int off_cpu) {
    memset(a, 0, sizeof *a);
    a->size = sizeof *a;
    a->type = PERF_TYPE_SOFTWARE;
    a->config = PERF_COUNT_SW_CPU_CLOCK;
    a->sample_period = 1000000000u / o->hz; /* cpu-clock counts nanoseconds */
    a->sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD |
                     (o->sample_read ? PERF_SAMPLE_READ : 0) | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER |
                     PERF_SAMPLE_STACK_USER;
    a->sample_regs_user = TMR_PERF_REGS_MASK;
    a->sample_stack_user = STACK_BYTES;
    a->exclude_kernel = !o->kernel;
    a->exclude_hv = 1;
    a->exclude_callchain_kernel = !o->kernel;
    a->disabled = launch;
    a->enable_on_exec = launch;
    a->inherit = !o->system_wide; /* a CPU-wide event has no task to inherit from */
    a->mmap = 1;
    a->mmap2 = 1;
    a->comm = 1;
    a->comm_exec = 1;
    a->task = 1;
    a->sample_id_all = 1;
    a->use_clockid = 1;
    a->clockid = CLOCK_BOOTTIME; /* the trace clock */
    a->watermark = 1;
    if (off_cpu) {
        a->config = PERF_COUNT_SW_CONTEXT_SWITCHES;
        a->sample_period = 1;
        a->exclude_kernel = 0; /* a switch happens in the kernel: excluding it would count none */
        a->mmap = a->mmap2 = a->comm = a->comm_exec = a->task = 0;
        a->context_switch = 1; /* PERF_RECORD_SWITCH: when the thread comes back */
    }
}

/* Whether this kernel gives an inherited event's samples the count of the
 * sampled thread's own event (PERF_SAMPLE_READ with inherit and
 * PERF_SAMPLE_TID: Linux 6.12 and later): a disabled event on ourselves
 * tells. */
static int can_sample_read(const opts *o) {
    opts with = *o;
    with.sample_read = 1;
    struct perf_event_attr a;
    perf_attr(&a, &with, 1, 0);
    a.enable_on_exec = 0;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) return 0;
    close(fd);
    return 1;
}

/* Opens the event of CPU cpu on pid and maps its ring, of at most
 * max_pages data pages (a power of two). 0, or -1 with errno set (ENODEV:
 * an offline CPU). */
static int open_ring(pid_t pid, uint32_t cpu, const opts *o, int launch, int off_cpu, size_t max_pages, ring *r) {
    struct perf_event_attr a;
    perf_attr(&a, o, launch, off_cpu);
    long page = sysconf(_SC_PAGESIZE);
    for (size_t pages = max_pages; pages >= 8; pages /= 2) {
        a.wakeup_watermark = (uint32_t)(pages * (size_t)page / 4);
        int fd = (int)syscall(SYS_perf_event_open, &a, pid, (int)cpu, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0) return -1;
        void *base = mmap(NULL, (pages + 1) * (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (base != MAP_FAILED) {
            *r = (ring){fd, cpu, off_cpu, base, pages * (size_t)page};
            return 0;
        }
        int e = errno;
        close(fd);
        if (e != EPERM && e != ENOMEM) {
            errno = e;
            return -1;
        }
    }
    return -1;
}

/* Opens the event of CPU cpu on thread tid, writing into ring r (of the
 * same CPU). Its fd, or -1 with errno set. */
static int open_into(pid_t tid, const ring *r, const opts *o) {
    struct perf_event_attr a;
    perf_attr(&a, o, 0, r->off_cpu);
    a.wakeup_watermark = (uint32_t)(r->data_size / 4);
    int fd = (int)syscall(SYS_perf_event_open, &a, tid, (int)r->cpu, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd >= 0 && ioctl(fd, PERF_EVENT_IOC_SET_OUTPUT, r->fd)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static void close_ring(ring *r) {
    long page = sysconf(_SC_PAGESIZE);
    munmap(r->base, r->data_size + (size_t)page);
    close(r->fd);
}

/* ---- records in time order ---- */

typedef struct rec {
    uint64_t ts, order; /* order: arrival, to keep records of one time stable */
    uint32_t cpu;
    int off_cpu;        /* from the off-CPU event's ring */
    uint8_t *data;      /* the whole record, header first */
} rec;

typedef struct queue {
    rec *r;
    size_t n, cap;
    uint64_t arrivals;
} queue;

/* The record's time: PERF_SAMPLE_TIME in a sample (after pid/tid), the
 * sample_id trailer's (pid/tid, time, cpu) in every other record. */
static uint64_t rec_time(const uint8_t *d, uint16_t size) {
    const struct perf_event_header *h = (const void *)d;
    uint64_t t = 0;
    if (h->type == PERF_RECORD_SAMPLE) {
        if (size >= 24) memcpy(&t, d + 16, 8);
    } else if (size >= sizeof *h + 24) {
        memcpy(&t, d + size - 16, 8);
    }
    return t;
}

/* Copies every complete record of ring r into q. -1 when memory runs out. */
static int read_ring(ring *r, queue *q) {
    struct perf_event_mmap_page *mp = (void *)r->base;
    const uint8_t *data = r->base + sysconf(_SC_PAGESIZE);
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE), tail = mp->data_tail;
    size_t mask = r->data_size - 1;
    int rc = 0;
    while (tail + sizeof(struct perf_event_header) <= head) {
        struct perf_event_header h;
        for (size_t i = 0; i < sizeof h; i++) ((uint8_t *)&h)[i] = data[(tail + i) & mask];
        if (h.size < sizeof h || tail + h.size > head) break;
        uint8_t *copy = malloc(h.size);
        if (!copy || tmr_grow((void **)&q->r, &q->cap, sizeof *q->r, q->n + 1)) {
            free(copy);
            rc = -1;
            break;
        }
        size_t at = (size_t)(tail & mask), first = r->data_size - at < h.size ? r->data_size - at : h.size;
        memcpy(copy, data + at, first);
        memcpy(copy + first, data, h.size - first);
        q->r[q->n++] = (rec){rec_time(copy, h.size), q->arrivals++, r->cpu, r->off_cpu, copy};
        tail += h.size;
    }
    __atomic_store_n(&mp->data_tail, tail, __ATOMIC_RELEASE);
    return rc;
}

static int rec_cmp(const void *a, const void *b) {
    const rec *x = a, *y = b;
    if (x->ts != y->ts) return x->ts < y->ts ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* ---- processes and threads ---- */

typedef struct proc {
    int32_t pid, ppid;
    tmr_symbols *syms;
    tmr_unwinder *unw;  /* NULL once its main thread exited (its files are closed) */
    tmr_writer *w;
    uint32_t own_seq;
    int maps_changed;   /* the unwinder's modules are stale */
    char comm[17];
} proc;

/* An off-CPU sample waiting for its thread's switch-in (its weight). */
typedef struct off_wait {
    uint64_t *pcs;      /* malloc'd; NULL: none waits */
    uint32_t depth, cpu;
    uint64_t ts;        /* the switch-out */
    unsigned flags;
} off_wait;

typedef struct thread {
    int32_t tid, pid;
    uint32_t seq;
    uint32_t off_seq;   /* its off-CPU samples' sequence; 0: none yet */
    uint64_t cpu_ns;    /* its CPU time so far, the sum of its samples' weights (their timebase_count) */
    uint64_t *read_at;  /* per CPU: its event's count at its last sample there (PERF_SAMPLE_READ) */
    size_t n_read_at;
    uint64_t off_ns;    /* its blocked time so far (the off-CPU timebase_count) */
    off_wait wait;
    char name[17];
} thread;

typedef struct stats {
    uint64_t samples, complete, partial, truncated, callchain_used;
    uint64_t lost, throttled, processes, threads;
    uint64_t off_samples, off_ns, off_unmatched; /* unmatched: switch-outs whose switch-in was never seen */
    uint64_t off_preempted, off_preempted_ns;    /* of off_samples: switched out while runnable */
} stats;

typedef struct rec_state {
    opts o;
    FILE *out;
    int write_failed;
    proc **procs;           /* each allocated once: writers keep pointers into it */
    size_t n_procs, cap_procs;
    thread *threads;
    size_t n_threads, cap_threads;
    uint32_t next_seq;      /* thread sequences: 1, 2, ... */
    uint32_t next_own_seq;  /* process sequences: TMR_WRITER_SEQ, TMR_WRITER_SEQ - 1, ... */
    int32_t root;           /* the command's pid; 0 when attached */
    int began;              /* the trace-wide packets are written */
    uint64_t *pcs;
    tmr_kallsyms *kallsyms; /* --kernel: the kernel's names */
    stats st;
} rec_state;

static int emit(void *ctx, const uint8_t *p, size_t len) {
    rec_state *s = ctx;
    if (fwrite(p, 1, len, s->out) != len) s->write_failed = 1;
    return s->write_failed;
}

static void report(const char *what, const tm_error *err) {
    fprintf(stderr, "tracemill-record-perf: %s: %s\n", what, err->message);
}

static proc *find_proc(rec_state *s, int32_t pid) {
    for (size_t i = s->n_procs; i-- > 0;)
        if (s->procs[i]->pid == pid) return s->procs[i];
    return NULL;
}

static thread *find_thread(rec_state *s, int32_t tid) {
    for (size_t i = s->n_threads; i-- > 0;)
        if (s->threads[i].tid == tid) return &s->threads[i];
    return NULL;
}

/* The command line of a live process; *len excludes the final NUL.
 * malloc'd; NULL when it cannot be read. */
static char *cmdline_of(int32_t pid, size_t *len) {
    char path[48], *buf = NULL;
    size_t n = 0, cap = 0;
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "re");
    if (f) {
        while (!tmr_grow((void **)&buf, &cap, 1, n + 4097)) {
            size_t got = fread(buf + n, 1, cap - n - 1, f);
            n += got;
            if (got == 0) break;
        }
        fclose(f);
    }
    if (n == 0) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* argv as a NUL-separated command line; malloc'd, NULL when memory runs out. */
static char *argv_cmdline(char **argv, size_t *len) {
    size_t n = 0;
    for (char **a = argv; *a; a++) n += strlen(*a) + 1;
    char *buf = malloc(n + 1);
    if (!buf) return NULL;
    *len = 0;
    for (char **a = argv; *a; a++) {
        memcpy(buf + *len, *a, strlen(*a) + 1);
        *len += strlen(*a) + 1;
    }
    if (*len) (*len)--; /* the last NUL is the terminator */
    buf[*len] = 0;
    return buf;
}

/* p's command line: the command's arguments before its exec (it still runs
 * this program then), /proc/PID/cmdline while it lives, else name.
 * malloc'd; NULL when memory runs out. */
static char *proc_cmdline(rec_state *s, const proc *p, int before_exec, const char *name, size_t *len) {
    char *c = before_exec ? NULL : cmdline_of(p->pid, len);
    if (!c && p->pid == s->root) c = argv_cmdline(s->o.cmd, len);
    if (!c && (c = malloc(strlen(name) + 1))) {
        *len = strlen(name);
        memcpy(c, name, *len + 1);
    }
    return c;
}

/* A (new) writer for p: its descriptors, thread entries for its known
 * threads; the first writer of the trace also writes the trace-wide packets. */
static tm_status new_writer(rec_state *s, proc *p, const char *cmdline, size_t cmdline_len, tm_error *err) {
    tmr_writer_free(p->w);
    tmr_writer_opts wo = {.pid = p->pid,
                          .process_name = p->comm[0] ? p->comm : NULL,
                          .sampling_hz = s->o.hz,
                          .perf_cpu_clock = 1,
                          .ppid = p->ppid,
                          .cmdline = cmdline,
                          .cmdline_len = cmdline_len,
                          .own_seq = p->own_seq,
                          .process_only = s->began};
    p->w = tmr_writer_new(&wo, p->syms, emit, s, err);
    if (!p->w) return err->code;
    TM_TRY(tmr_writer_begin(p->w, err));
    s->began = 1;
    for (size_t i = 0; i < s->n_threads; i++)
        if (s->threads[i].pid == p->pid) TM_TRY(tmr_writer_thread(p->w, s->threads[i].tid, s->threads[i].name, err));
    return TM_OK;
}

/* /proc/PID/task/TID/comm into name[17]; "" when it cannot be read. */
static void read_comm(int32_t pid, int32_t tid, char name[17]) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task/%d/comm", (int)pid, (int)tid);
    name[0] = 0;
    FILE *f = fopen(path, "re");
    if (!f) return;
    if (!fgets(name, 17, f)) name[0] = 0;
    name[strcspn(name, "\n")] = 0;
    fclose(f);
}

/* The parent of a live process from /proc/PID/stat; 0 when unknown. */
static int32_t read_ppid(int32_t pid) {
    char path[48], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    /* "pid (comm) state ppid": comm may hold spaces and parentheses */
    char *close_paren = strrchr(buf, ')');
    int ppid = 0;
    if (!close_paren || sscanf(close_paren + 1, " %*c %d", &ppid) != 1) return 0;
    return (int32_t)ppid;
}

/* A process seen for the first time; parent (may be NULL) lends its
 * mappings, as fork does. One found otherwise (attached to, or known only
 * from a sample) takes its name, parent and mappings from /proc. */
static proc *add_proc(rec_state *s, int32_t pid, const proc *parent, tm_error *err) {
    proc *p = calloc(1, sizeof *p);
    if (!p || tmr_grow((void **)&s->procs, &s->cap_procs, sizeof *s->procs, s->n_procs + 1)) {
        free(p);
        tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        return NULL;
    }
    p->pid = pid;
    int from_proc = !parent && pid != s->root;
    p->ppid = parent ? parent->pid : from_proc ? read_ppid(pid) : (int32_t)getpid();
    p->own_seq = s->next_own_seq--;
    p->maps_changed = 1;
    if (from_proc) read_comm(pid, pid, p->comm);
    else snprintf(p->comm, sizeof p->comm, "%s", parent ? parent->comm : "");
    p->syms = tmr_symbols_new_for(pid, s->o.demangle, err);
    if (p->syms && s->kallsyms && tmr_symbols_set_kernel(p->syms, s->kallsyms, err) != TM_OK) {
        tmr_symbols_free(p->syms);
        p->syms = NULL;
    }
    p->unw = p->syms ? tmr_unwind_new(pid, err) : NULL;
    if (!p->unw) {
        tmr_symbols_free(p->syms);
        free(p);
        return NULL;
    }
    s->procs[s->n_procs++] = p;
    s->st.processes++;
    tm_status st = parent ? tmr_symbols_copy_live(p->syms, parent->syms, err) : TM_OK;
    if (st == TM_OK && from_proc) tmr_symbols_refresh(p->syms, NULL); /* its maps, while it lives */
    size_t len = 0;
    /* The command, before its exec, still runs this program: its arguments are known. */
    char *cmdline = st == TM_OK ? proc_cmdline(s, p, pid == s->root, p->comm, &len) : NULL;
    if (st == TM_OK && !cmdline) st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    if (st == TM_OK) st = new_writer(s, p, cmdline, len, err);
    free(cmdline);
    return st == TM_OK ? p : NULL;
}

static thread *add_thread(rec_state *s, int32_t tid, int32_t pid, const char *name, tm_error *err) {
    thread *t = find_thread(s, tid);
    if (!t) {
        if (tmr_grow((void **)&s->threads, &s->cap_threads, sizeof *s->threads, s->n_threads + 1)) {
            tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
            return NULL;
        }
        t = &s->threads[s->n_threads++];
        memset(t, 0, sizeof *t);
        t->tid = tid;
        t->seq = s->next_seq++;
        s->st.threads++;
    }
    t->pid = pid;
    if (name) snprintf(t->name, sizeof t->name, "%s", name);
    proc *p = find_proc(s, pid);
    if (p && tmr_writer_thread(p->w, tid, t->name[0] ? t->name : NULL, err) != TM_OK) return NULL;
    return t;
}

/* ---- records ---- */

/* The fields of a FORK or EXIT record. */
typedef struct task_rec {
    uint32_t pid, ppid, tid, ptid;
} task_rec;

static tm_status on_comm(rec_state *s, const uint8_t *d, uint16_t size, int exec, tm_error *err) {
    uint32_t pid, tid;
    if (size < 8 + 8 + 1) return TM_OK;
    memcpy(&pid, d + 8, 4);
    memcpy(&tid, d + 12, 4);
    char name[17];
    snprintf(name, sizeof name, "%.*s", (int)(size - 16), (const char *)d + 16);
    proc *p = find_proc(s, (int32_t)pid);
    if (!p && !(p = add_proc(s, (int32_t)pid, NULL, err))) return err->code;
    if (exec) {
        /* A new program: none of the old mappings, a new command line. */
        tmr_symbols_forget_live(p->syms);
        p->maps_changed = 1;
        snprintf(p->comm, sizeof p->comm, "%s", name);
        size_t len = 0;
        char *cmdline = proc_cmdline(s, p, 0, name, &len);
        if (!cmdline) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
        tm_status st = new_writer(s, p, cmdline, len, err);
        free(cmdline);
        TM_TRY(st);
    }
    return add_thread(s, (int32_t)tid, (int32_t)pid, name, err) ? TM_OK : err->code;
}

static tm_status on_mmap2(rec_state *s, const uint8_t *d, uint16_t size, tm_error *err) {
    /* pid tid; addr len pgoff; maj min ino ino_generation (or build id); prot flags; filename */
    enum { AT_NAME = 8 + 8 + 24 + 24 + 8 };
    if (size <= AT_NAME) return TM_OK;
    uint32_t pid, prot;
    uint64_t addr, len, pgoff;
    memcpy(&pid, d + 8, 4);
    memcpy(&addr, d + 16, 8);
    memcpy(&len, d + 24, 8);
    memcpy(&pgoff, d + 32, 8);
    memcpy(&prot, d + AT_NAME - 8, 4);
    if (!(prot & PROT_EXEC)) return TM_OK;
    char path[4096];
    int n = snprintf(path, sizeof path, "%.*s", (int)(size - AT_NAME), (const char *)d + AT_NAME);
    /* The file mapped may be gone from its path by now, or replaced there (a
     * rebuild): then its path says so, as /proc/PID/maps would, and it is
     * read through /proc/PID/map_files (symbols.c). Replaced means another
     * inode on the same device (an overlay reports devices of its own). The
     * events do not ask for build ids, so the record has the inode. */
    uint32_t maj, min;
    uint64_t ino;
    struct stat sb;
    memcpy(&maj, d + 40, 4);
    memcpy(&min, d + 44, 4);
    memcpy(&ino, d + 48, 8);
    if (path[0] == '/' && n > 10 && (size_t)n + 10 < sizeof path && strcmp(path + n - 10, " (deleted)") != 0 &&
        (stat(path, &sb) != 0 ? errno == ENOENT
                              : major(sb.st_dev) == maj && minor(sb.st_dev) == min && sb.st_ino != ino))
        memcpy(path + n, " (deleted)", 11);
    proc *p = find_proc(s, (int32_t)pid);
    if (!p && !(p = add_proc(s, (int32_t)pid, NULL, err))) return err->code;
    p->maps_changed = 1;
    return tmr_symbols_add(p->syms, addr, addr + len, pgoff, path, err);
}

static tm_status on_fork(rec_state *s, const task_rec *t, tm_error *err) {
    proc *parent = find_proc(s, (int32_t)t->ppid);
    thread *pt = find_thread(s, (int32_t)t->ptid);
    char name[17] = "";
    if (pt) memcpy(name, pt->name, sizeof name); /* a new thread has its creator's name until it sets one */
    if (t->pid != t->ppid && !find_proc(s, (int32_t)t->pid)) {
        if (!add_proc(s, (int32_t)t->pid, parent, err)) return err->code;
    }
    return add_thread(s, (int32_t)t->tid, (int32_t)t->pid, name[0] ? name : NULL, err) ? TM_OK : err->code;
}

static void on_exit_rec(rec_state *s, const task_rec *t) {
    thread *th = find_thread(s, (int32_t)t->tid);
    if (th && th->wait.pcs) { /* it ran to exit: its switch-in was lost */
        s->st.off_unmatched++;
        free(th->wait.pcs);
        th->wait.pcs = NULL;
    }
    proc *p = find_proc(s, (int32_t)t->pid);
    if (p && t->pid == t->tid) { /* the process is gone: close its ELF files */
        tmr_unwind_free(p->unw);
        p->unw = NULL;
    }
}

/* Writes thread t's waiting off-CPU sample, which weighs until - its
 * switch-out (nothing when that is not after it). */
static tm_status off_cpu_done(rec_state *s, thread *t, uint64_t until, tm_error *err) {
    off_wait *o = &t->wait;
    if (!o->pcs) return TM_OK;
    tm_status st = TM_OK;
    proc *p = find_proc(s, t->pid);
    if (p && until > o->ts) {
        if (!t->off_seq) t->off_seq = s->next_seq++;
        t->off_ns += until - o->ts;
        s->st.off_samples++;
        s->st.off_ns += until - o->ts;
        if (o->flags & TMR_SAMPLE_PREEMPTED) s->st.off_preempted++, s->st.off_preempted_ns += until - o->ts;
        st = tmr_writer_sample(p->w, t->off_seq, t->tid, o->cpu, o->ts, o->pcs, o->depth, t->off_ns,
                               o->flags | TMR_SAMPLE_OFF_CPU, err);
    }
    free(o->pcs);
    o->pcs = NULL;
    return st;
}

/* A switch-out's stack (off-CPU), kept until the thread's switch-in. */
static tm_status off_cpu_wait(rec_state *s, thread *t, uint32_t cpu, uint64_t ts, uint32_t depth, unsigned flags,
                              tm_error *err) {
    if (t->wait.pcs) { /* its switch-in was lost */
        s->st.off_unmatched++;
        free(t->wait.pcs);
        t->wait.pcs = NULL;
    }
    uint64_t *pcs = malloc((depth + 1) * sizeof *pcs);
    if (!pcs) return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    if (depth) memcpy(pcs, s->pcs, depth * sizeof *pcs);
    t->wait = (off_wait){pcs, depth, cpu, ts, flags};
    return TM_OK;
}

/* A PERF_RECORD_SWITCH or SWITCH_CPU_WIDE: a switch-out says whether the
 * thread was preempted (still runnable) or blocked, which its waiting
 * off-CPU sample (taken at the same switch, just before) keeps; a switch-in
 * ends the wait. */
static tm_status on_switch(rec_state *s, const rec *r, uint16_t size, tm_error *err) {
    const struct perf_event_header *h = (const void *)r->data;
    if (size < sizeof *h + 24) return TM_OK;
    uint32_t tid; /* the sample_id trailer: pid, tid, time, cpu */
    memcpy(&tid, r->data + size - 20, 4);
    thread *t = find_thread(s, (int32_t)tid);
    if (!t) return TM_OK;
    if (h->misc & PERF_RECORD_MISC_SWITCH_OUT) {
        if (t->wait.pcs && t->wait.ts <= r->ts && (h->misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT))
            t->wait.flags |= TMR_SAMPLE_PREEMPTED;
        return TM_OK;
    }
    return off_cpu_done(s, t, r->ts, err);
}

/* The CPU time in ns a sample of thread t on cpu stands for. Its period,
 * unless the kernel gave its event's count (PERF_SAMPLE_READ; count 0: not
 * given): then the count's growth since the thread's previous sample on that
 * CPU (one event per thread and CPU). The count also holds what the period
 * misses: periods that ended in kernel mode, whose samples exclude_kernel
 * drops (a busy machine switches a thread in and out there often). */
static uint64_t sample_weight(thread *t, uint32_t cpu, uint64_t period, uint64_t count) {
    if (!count) return period;
    if (cpu >= t->n_read_at) {
        size_t had = t->n_read_at;
        if (tmr_grow((void **)&t->read_at, &t->n_read_at, sizeof *t->read_at, (size_t)cpu + 1)) return period;
        memset(t->read_at + had, 0, (t->n_read_at - had) * sizeof *t->read_at);
    }
    uint64_t grown = count > t->read_at[cpu] ? count - t->read_at[cpu] : period;
    t->read_at[cpu] = count;
    return grown;
}

static tm_status on_sample(rec_state *s, const uint8_t *d, uint16_t size, int off_cpu, tm_error *err) {
    const uint8_t *at = d + 8, *end = d + size;
    uint16_t misc;
    memcpy(&misc, d + 4, 2);
    int kernel_mode = (misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_KERNEL;
    uint32_t pid, tid, cpu;
    uint64_t ts, period, count = 0, nr, abi = 0, stack_size = 0, dyn_size = 0;
    if (end - at < 8 + 8 + 8 + 8 + 8 + (s->o.sample_read ? 8 : 0)) return TM_OK;
    memcpy(&pid, at, 4), memcpy(&tid, at + 4, 4), at += 8;
    memcpy(&ts, at, 8), at += 8;
    memcpy(&cpu, at, 4), at += 8;
    memcpy(&period, at, 8), at += 8;
    if (s->o.sample_read) memcpy(&count, at, 8), at += 8;
    memcpy(&nr, at, 8), at += 8;
    if (nr > (uint64_t)(end - at) / 8) return TM_OK;
    const uint8_t *chain = at;
    at += nr * 8;
    uint64_t regs[TMR_PERF_NREGS];
    if (end - at >= 8) memcpy(&abi, at, 8), at += 8;
    if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
        if ((size_t)(end - at) < sizeof regs) return TM_OK;
        memcpy(regs, at, sizeof regs), at += sizeof regs;
    }
    if (end - at >= 8) memcpy(&stack_size, at, 8), at += 8;
    const uint8_t *stack = at;
    if (stack_size) {
        if (stack_size > (uint64_t)(end - at) || (uint64_t)(end - at) - stack_size < 8) return TM_OK;
        memcpy(&dyn_size, at + stack_size, 8);
        if (dyn_size > stack_size) dyn_size = stack_size;
    }

    if (pid == 0) return TM_OK; /* the idle task (-a --kernel): not a process */
    if (s->o.system_wide && pid == (uint32_t)getpid()) return TM_OK; /* the recorder's own work */
    proc *p = find_proc(s, (int32_t)pid);
    if (!p && !(p = add_proc(s, (int32_t)pid, NULL, err))) return err->code;
    thread *t = find_thread(s, (int32_t)tid);
    if (!t || t->pid != (int32_t)pid) {
        /* No record named it (it ran before the recording): its name in /proc, else its process's. */
        char name[17] = "";
        if (!t) read_comm((int32_t)pid, (int32_t)tid, name);
        if (!(t = add_thread(s, (int32_t)tid, (int32_t)pid, t ? NULL : name[0] ? name : p->comm, err)))
            return err->code;
    }
    uint32_t max = s->o.max_depth, nk = 0, depth = 0;
    int ended = TMR_UNWIND_PARTIAL, truncated = 0;
    /* Kernel frames (--kernel) first, leaf first, from the kernel's callchain. */
    for (uint64_t i = 0, kernel = 0; s->o.kernel && i < nr && !truncated; i++) {
        uint64_t ip;
        memcpy(&ip, chain + i * 8, 8);
        if (ip >= (uint64_t)PERF_CONTEXT_MAX) kernel = ip == (uint64_t)PERF_CONTEXT_KERNEL;
        else if (kernel && nk == max) truncated = 1;
        else if (kernel) s->pcs[nk++] = ip;
    }
    uint64_t *user = s->pcs + nk;
    if (!p->unw) { /* a thread outlived the main one, whose exit closed the unwinder */
        if (!(p->unw = tmr_unwind_new(p->pid, err))) return err->code;
        p->maps_changed = 1;
    }
    if (abi != PERF_SAMPLE_REGS_ABI_NONE && nk < max) {
        if (p->maps_changed) tmr_unwind_set_mappings(p->unw, p->syms);
        p->maps_changed = 0;
        tmr_unwind_input in = {(int32_t)tid, regs, stack, (size_t)dyn_size};
        depth = tmr_unwind(p->unw, &in, user, max - nk, &ended);
    } else if (abi != PERF_SAMPLE_REGS_ABI_NONE) {
        truncated = 1; /* a user part, and no room left for it */
    }
    /* The kernel's frame-pointer callchain (user part): the stack when
     * there are no registers to unwind from, or when DWARF unwinding got no
     * further than the sampled pc. */
    if (depth <= 1 && ended == TMR_UNWIND_PARTIAL && !truncated) {
        uint32_t n = 0;
        int in_user = 0, more = 0;
        for (uint64_t i = 0; i < nr && !more; i++) {
            uint64_t ip;
            memcpy(&ip, chain + i * 8, 8);
            if (ip >= (uint64_t)PERF_CONTEXT_MAX) in_user = ip == (uint64_t)PERF_CONTEXT_USER;
            else if (in_user && nk + n == max) more = 1;
            else if (in_user) user[n++] = ip;
        }
        if (n > depth) {
            depth = n;
            s->st.callchain_used++;
            if (more) ended = TMR_UNWIND_TRUNCATED;
        }
    }
    depth += nk;
    truncated |= ended == TMR_UNWIND_TRUNCATED;
    unsigned flags = (truncated ? TMR_SAMPLE_TRUNCATED : 0) | (kernel_mode ? TMR_SAMPLE_KERNEL : 0);
    if (off_cpu) return off_cpu_wait(s, t, cpu, ts, depth, flags, err);
    s->st.samples++;
    if (truncated) s->st.truncated++;
    else if (ended == TMR_UNWIND_COMPLETE) s->st.complete++;
    else s->st.partial++;
    /* PerfSample.timebase_count is the thread's CPU time so far on its own
     * sequence (a task-clock timebase, as the signal backend writes it): the
     * difference to the sequence's previous sample is this one's weight. */
    t->cpu_ns += sample_weight(t, cpu, period, count);
    return tmr_writer_sample(p->w, t->seq, (int32_t)tid, cpu, ts, s->pcs, depth, t->cpu_ns, flags, err);
}

static tm_status on_record(rec_state *s, const rec *r, tm_error *err) {
    const struct perf_event_header *h = (const void *)r->data;
    const uint8_t *d = r->data;
    switch (h->type) {
    case PERF_RECORD_SAMPLE: return on_sample(s, d, h->size, r->off_cpu, err);
    case PERF_RECORD_SWITCH:
    case PERF_RECORD_SWITCH_CPU_WIDE: return on_switch(s, r, h->size, err);
    case PERF_RECORD_MMAP2: return on_mmap2(s, d, h->size, err);
    case PERF_RECORD_COMM: return on_comm(s, d, h->size, (h->misc & PERF_RECORD_MISC_COMM_EXEC) != 0, err);
    case PERF_RECORD_FORK:
    case PERF_RECORD_EXIT: {
        task_rec t;
        if (h->size < 8 + sizeof t) return TM_OK;
        memcpy(&t, d + 8, sizeof t);
        if (h->type == PERF_RECORD_FORK) return on_fork(s, &t, err);
        on_exit_rec(s, &t);
        return TM_OK;
    }
    case PERF_RECORD_LOST: {
        uint64_t lost;
        if (h->size < 8 + 16) return TM_OK;
        memcpy(&lost, d + 16, 8);
        s->st.lost += lost;
        /* The lost records may have been mappings: each process still
         * alive has them in /proc/PID/maps. */
        for (size_t i = 0; i < s->n_procs; i++) {
            proc *q = s->procs[i];
            if (q->unw && tmr_symbols_refresh(q->syms, NULL) == TM_OK) q->maps_changed = 1;
        }
        return s->n_procs ? tmr_writer_records_lost(s->procs[0]->w, r->cpu, r->ts, lost, err) : TM_OK;
    }
    case PERF_RECORD_THROTTLE: s->st.throttled++; return TM_OK;
    default: return TM_OK;
    }
}

/* Uses the queued records up to time until (all of them: UINT64_MAX) in
 * time order; the others stay queued. */
static tm_status use_records(rec_state *s, queue *q, uint64_t until, tm_error *err) {
    if (q->n) qsort(q->r, q->n, sizeof *q->r, rec_cmp); /* none yet: q->r may be NULL */
    size_t used = 0;
    tm_status st = TM_OK;
    for (; used < q->n && q->r[used].ts <= until && st == TM_OK; used++) {
        st = on_record(s, &q->r[used], err);
        free(q->r[used].data);
    }
    if (used) memmove(q->r, q->r + used, (q->n - used) * sizeof *q->r);
    q->n -= used;
    return st;
}

/* ---- the run ---- */

/* Writes TraceStats: every thread's sequence, and no central-buffer loss
 * (the kernel's losses are in the PerfSamples carrying kernel_records_lost). */
static tm_status write_stats(rec_state *s, tm_error *err) {
    if (!s->n_procs) return TM_OK;
    proc *first = s->procs[0]; /* its writer began the trace */
    uint32_t *seqs = calloc(2 * s->n_threads + 1, sizeof *seqs);
    uint64_t *lost = calloc(2 * s->n_threads + 1, sizeof *lost);
    tm_status st;
    if (!seqs || !lost) {
        st = tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    } else {
        size_t n = 0;
        for (size_t i = 0; i < s->n_threads; i++) {
            seqs[n++] = s->threads[i].seq;
            if (s->threads[i].off_seq) seqs[n++] = s->threads[i].off_seq;
        }
        tmr_losses l = {.n_writers = (uint32_t)n, .writer_seq = seqs, .writer_samples_lost = lost};
        st = tmr_writer_stats(first->w, &l, err);
    }
    free(seqs);
    free(lost);
    return st;
}

static void free_state(rec_state *s) {
    for (size_t i = 0; i < s->n_procs; i++) {
        tmr_writer_free(s->procs[i]->w);
        tmr_unwind_free(s->procs[i]->unw);
        tmr_symbols_free(s->procs[i]->syms);
        free(s->procs[i]);
    }
    free(s->procs);
    for (size_t i = 0; i < s->n_threads; i++) free(s->threads[i].wait.pcs), free(s->threads[i].read_at);
    free(s->threads);
    free(s->pcs);
    tmr_kallsyms_free(s->kallsyms);
}

/* -p's PID[,PID...] into o->pids; -1 on a malformed list. */
static int parse_pids(const char *v, opts *o) {
    for (const char *at = v;;) {
        char *end;
        long pid = strtol(at, &end, 10);
        if (end == at || pid <= 0 || pid > INT32_MAX || (*end && *end != ',') || o->n_pids == MAX_PIDS) return -1;
        int32_t *grown = realloc(o->pids, (o->n_pids + 1) * sizeof *o->pids);
        if (!grown) return -1;
        o->pids = grown;
        o->pids[o->n_pids++] = (int32_t)pid;
        if (!*end) return 0;
        at = end + 1;
    }
}

static int parse_opts(int argc, char **argv, opts *o) {
    *o = (opts){.hz = 101, .out = "tracemill-record.pftrace", .max_depth = DEFAULT_MAX_DEPTH};
    int i = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (strcmp(a, "--demangle") == 0) o->demangle = 1;
        else if (strcmp(a, "--kernel") == 0) o->kernel = 1;
        else if (strcmp(a, "--off-cpu") == 0) o->off_cpu = 1;
        else if (strcmp(a, "-a") == 0) o->system_wide = 1;
        else if (!v) return usage("an option needs a value");
        else if (strcmp(a, "-o") == 0) o->out = argv[++i];
        else if (strcmp(a, "--cmd-gains") == 0) o->cmd_gains = argv[++i];
        else if (strcmp(a, "-F") == 0) {
            unsigned long hz = strtoul(v, &end, 10);
            if (*end || hz == 0 || hz > 100000) return usage("-F wants 1..100000");
            o->hz = (unsigned)hz, i++;
        } else if (strcmp(a, "--max-depth") == 0) {
            unsigned long d = strtoul(v, &end, 10);
            if (*end || d == 0 || d > 65536) return usage("--max-depth wants 1..65536");
            o->max_depth = (uint32_t)d, i++;
        } else if (strcmp(a, "--duration") == 0) {
            double d = strtod(v, &end);
            if (*end || !(d > 0 && d < 1e9)) return usage("--duration wants seconds, more than 0");
            o->duration = d, i++;
        } else if (strcmp(a, "-p") == 0) {
            if (parse_pids(v, o)) return usage("-p wants PID[,PID...] (at most 1024)");
            i++;
        } else return usage("unknown option");
    }
    if (o->n_pids && o->system_wide) return usage("-a and -p exclude each other");
    if (o->n_pids || o->system_wide) {
        if (i < argc) return usage("-p or -a, and a command, exclude each other");
        return 0;
    }
    if (i >= argc - 1) return usage("no command given");
    o->cmd = argv + i + 1;
    return 0;
}

/* ---- the events of a run ---- */

typedef struct events {
    ring *rings;        /* per CPU, then (--off-cpu) the off-CPU event's per CPU; fd -1: none (an offline CPU) */
    size_t n_cpus, n_rings;
    int *hup;           /* per ring: its own event has ended (poll would only say so again) */
    int *fds;           /* further events, each writing into its CPU's ring */
    size_t n_fds, cap_fds;
    size_t max_pages;   /* data pages per ring */
} events;

static int events_init(events *ev, int off_cpu) {
    long n = sysconf(_SC_NPROCESSORS_CONF);
    ev->n_cpus = n > 0 ? (size_t)n : 1;
    ev->n_rings = ev->n_cpus * (off_cpu ? 2 : 1);
    ev->rings = calloc(ev->n_rings, sizeof *ev->rings);
    ev->hup = calloc(ev->n_rings, sizeof *ev->hup);
    if (!ev->rings || !ev->hup) return -1;
    for (size_t c = 0; c < ev->n_rings; c++) ev->rings[c].fd = -1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ev->max_pages = 8;
    while (ev->max_pages * 2 * page <= RING_BYTES_MAX && ev->max_pages * 2 * page * ev->n_rings <= RING_BYTES_TOTAL)
        ev->max_pages *= 2;
    return 0;
}

/* Opens one event per CPU on thread (or process) tid, the off-CPU event
 * with off_cpu: the first of each CPU gets the ring, the others write into
 * it. 0, or -1 with errno set (ESRCH: the thread is gone). */
static int open_on(events *ev, pid_t tid, const opts *o, int launch, int off_cpu) {
    size_t opened = 0;
    int e = 0;
    for (size_t c = 0; c < ev->n_cpus; c++) {
        ring *r = &ev->rings[off_cpu ? ev->n_cpus + c : c];
        if (r->fd < 0) {
            if (open_ring(tid, (uint32_t)c, o, launch, off_cpu, ev->max_pages, r) == 0) opened++;
            else if (errno != ENODEV) e = errno, r->fd = -1; /* ENODEV: an offline CPU */
            else r->fd = -1;
            continue;
        }
        if (tmr_grow((void **)&ev->fds, &ev->cap_fds, sizeof *ev->fds, ev->n_fds + 1)) {
            e = ENOMEM;
            break;
        }
        int fd = open_into(tid, r, o);
        if (fd >= 0) ev->fds[ev->n_fds++] = fd, opened++;
        else if (errno != ENODEV) e = errno;
    }
    if (e || !opened) {
        errno = e ? e : ENODEV;
        return -1;
    }
    return 0;
}

/* open_on for the cpu-clock event, then (--off-cpu) the off-CPU one; on
 * failure *off_cpu says which was refused. */
static int open_events(events *ev, pid_t tid, const opts *o, int launch, int *off_cpu) {
    *off_cpu = 0;
    if (open_on(ev, tid, o, launch, 0)) return -1;
    *off_cpu = 1;
    return o->off_cpu ? open_on(ev, tid, o, launch, 1) : 0;
}

/* Stops every event and closes it (the rings stay mapped until events_free). */
static void events_stop(events *ev) {
    for (size_t i = 0; i < ev->n_fds; i++) close(ev->fds[i]);
    ev->n_fds = 0;
    for (size_t c = 0; c < ev->n_rings; c++)
        if (ev->rings[c].fd >= 0) ioctl(ev->rings[c].fd, PERF_EVENT_IOC_DISABLE, 0);
}

static void events_free(events *ev) {
    events_stop(ev);
    for (size_t c = 0; ev->rings && c < ev->n_rings; c++)
        if (ev->rings[c].fd >= 0) close_ring(&ev->rings[c]);
    free(ev->rings);
    free(ev->hup);
    free(ev->fds);
}

/* Copies every complete record of every ring into q. */
static tm_status read_rings(events *ev, queue *q, tm_error *err) {
    for (size_t c = 0; c < ev->n_rings; c++)
        if (ev->rings[c].fd >= 0 && read_ring(&ev->rings[c], q))
            return tm_fail(err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    return TM_OK;
}

static const char *paranoid_level(void) {
    static char level[16];
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
    if (!f || !fgets(level, sizeof level, f)) snprintf(level, sizeof level, "?");
    if (f) fclose(f);
    level[strcspn(level, "\n")] = 0;
    return level;
}

/* Why the kernel refused an event (errno e), for the messages that say so;
 * off_cpu: the off-CPU event. */
static void say_refusal(const opts *o, int e, int off_cpu) {
    if (e != EACCES && e != EPERM) {
        fputc('\n', stderr);
        return;
    }
    if (off_cpu)
        fprintf(stderr,
                " (--off-cpu samples each context switch, which happens in kernel mode: that needs "
                "kernel.perf_event_paranoid <= 1, it is %s, or CAP_PERFMON or root: sysctl "
                "kernel.perf_event_paranoid=1, or record without --off-cpu)\n",
                paranoid_level());
    else if (o->system_wide)
        fprintf(stderr,
                " (system-wide recording, -a, needs kernel.perf_event_paranoid <= 0, it is %s, or CAP_PERFMON "
                "or CAP_SYS_ADMIN, as root usually has: sysctl kernel.perf_event_paranoid=0)\n",
                paranoid_level());
    else if (o->kernel)
        fprintf(stderr,
                " (kernel frames, --kernel, need kernel.perf_event_paranoid <= 1, it is %s, or CAP_PERFMON or "
                "root: sysctl kernel.perf_event_paranoid=1)\n",
                paranoid_level());
    else if (o->n_pids)
        fprintf(stderr,
                " (kernel.perf_event_paranoid is %s: a user may attach only to the processes it may ptrace, "
                "with paranoid <= 2; others need root or CAP_PERFMON)\n",
                paranoid_level());
    else
        fprintf(stderr, " (kernel.perf_event_paranoid must be 2 or less, or run as root; "
                        "`tracemill record --backend signal` needs no permission)\n");
}

/* ---- attaching ---- */

/* Whether process pid still runs (a zombie has exited). */
static int alive(int32_t pid) {
    char path[48], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *close_paren = strrchr(buf, ')'), state = 0;
    if (close_paren) sscanf(close_paren + 1, " %c", &state);
    return state && state != 'Z' && state != 'X';
}

/* Whether a ring already holds the FORK record of thread tid: a thread
 * whose creator was attached when it started inherited its events (the
 * kernel writes that record once the new thread's events exist). The rings
 * are only looked at, not consumed. */
static int fork_seen(const events *ev, int32_t tid) {
    long page = sysconf(_SC_PAGESIZE);
    for (size_t c = 0; c < ev->n_rings; c++) {
        const ring *r = &ev->rings[c];
        if (r->fd < 0 || r->off_cpu) continue;
        struct perf_event_mmap_page *mp = (void *)r->base;
        const uint8_t *data = r->base + page;
        uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE), at = mp->data_tail;
        size_t mask = r->data_size - 1;
        while (at + sizeof(struct perf_event_header) <= head) {
            uint8_t h_bytes[sizeof(struct perf_event_header) + 16];
            size_t want = sizeof h_bytes;
            for (size_t i = 0; i < want && at + i < head; i++) h_bytes[i] = data[(at + i) & mask];
            struct perf_event_header h;
            memcpy(&h, h_bytes, sizeof h);
            if (h.size < sizeof h || at + h.size > head) break;
            task_rec t; /* pid, ppid, tid, ptid */
            if (h.type == PERF_RECORD_FORK && h.size >= sizeof h + sizeof t) {
                memcpy(&t, h_bytes + sizeof h, sizeof t);
                if ((int32_t)t.tid == tid) return 1;
            }
            at += h.size;
        }
    }
    return 0;
}

/* fork_seen; with again, looked for again after 5 ms when not yet there
 * (a later pass: the thread started after the first). */
static int inherited(const events *ev, int32_t tid, int again) {
    if (fork_seen(ev, tid)) return 1;
    if (!again) return 0;
    struct timespec pause = {0, 5000000};
    nanosleep(&pause, NULL);
    return fork_seen(ev, tid);
}

/* Opens events on every thread of process pid (again until a pass finds
 * no thread it did not know: threads started meanwhile by one not yet
 * attached are not inherited) and describes the process from /proc. A
 * thread started after its creator was attached inherited its events: it
 * gets none of its own then (it would be sampled twice), as its FORK record
 * shows, which the kernel writes just after it appears in /proc (in a
 * later pass, looked for again after a moment). 0, or -1 after saying why. */
static int attach(rec_state *s, events *ev, int32_t pid) {
    char dir[48];
    snprintf(dir, sizeof dir, "/proc/%d/task", (int)pid);
    tm_error err;
    memset(&err, 0, sizeof err);
    for (int pass = 0, found = 1; found && pass < 16; pass++) {
        DIR *d = opendir(dir);
        if (!d) {
            if (pass) return 0; /* it exited meanwhile: what was attached stays */
            fprintf(stderr, "tracemill record: cannot attach to process %d: %s\n", (int)pid,
                    strerror(errno == ENOENT ? ESRCH : errno));
            return -1;
        }
        if (!find_proc(s, pid) && !add_proc(s, pid, NULL, &err)) {
            closedir(d);
            report("starting the trace", &err);
            return -1;
        }
        found = 0;
        struct dirent *de;
        while ((de = readdir(d))) {
            char *end;
            long tid = strtol(de->d_name, &end, 10);
            if (*end || tid <= 0 || find_thread(s, (int32_t)tid)) continue;
            if (inherited(ev, (int32_t)tid, pass > 0)) continue; /* its records describe it */
            int which;
            if (open_events(ev, (pid_t)tid, &s->o, 0, &which)) {
                if (errno == ESRCH) continue; /* the thread ended meanwhile */
                int e = errno;
                fprintf(stderr, "tracemill record: cannot attach to process %d (thread %ld): %s", (int)pid, tid,
                        strerror(e));
                say_refusal(&s->o, e, which);
                closedir(d);
                return -1;
            }
            char name[17];
            read_comm(pid, (int32_t)tid, name);
            if (!add_thread(s, (int32_t)tid, pid, name, &err)) {
                closedir(d);
                report("starting the trace", &err);
                return -1;
            }
            found = 1;
        }
        closedir(d);
    }
    return 0;
}

/* ---- the command ---- */

/* Waits for the command after sampling ended, passing signals on. */
static int wait_command(pid_t child) {
    int status = 0;
    for (;;) {
        struct pollfd pfd = {.fd = g_sig_pipe[0], .events = POLLIN};
        poll(&pfd, 1, POLL_MS);
        unsigned char sig[2];
        while (read(g_sig_pipe[0], sig, sizeof sig) == (ssize_t)sizeof sig)
            if (sig[0] != SIGCHLD && !((sig[0] == SIGINT || sig[0] == SIGQUIT) && !sig[1])) kill(child, sig[0]);
        pid_t w = waitpid(child, &status, WNOHANG);
        if (w == child || (w < 0 && errno != EINTR)) return status;
    }
}

/* The command's CPU time (its own and that of the descendants it waited
 * for; the recorder has no other children), beside the samples: a program
 * whose every thread and process ended before a whole period of CPU time
 * on one CPU is never sampled, and must not look as if it used none. */
static void report_command_cpu(const rec_state *s, int stopped_early) {
    struct rusage ru;
    if (getrusage(RUSAGE_CHILDREN, &ru)) return;
    double user = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6;
    double sys = (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    fprintf(stderr, "tracemill record: %s used %.3f s of CPU time in user mode (%.3f s in the kernel)", s->o.cmd[0],
            user, sys);
    double due = user * s->o.hz;
    if (s->st.samples == 0 && s->o.cmd_gains)
        fprintf(stderr, ", but no sample was taken: %s is %s, and the kernel does not sample a program that gains "
                        "privileges as it starts for a recorder without them (record it as root)",
                s->o.cmd[0], s->o.cmd_gains);
    else if (stopped_early) /* its CPU time after --duration was never meant to be sampled */
        fprintf(stderr, ", sampled for its first %g s (--duration)", s->o.duration);
    else if ((s->st.samples == 0 && due >= 1.0) || (due >= 5.0 && (double)s->st.samples < 0.25 * due))
        fprintf(stderr, ", about %.0f samples' worth, but only %llu were taken: each of its %llu threads (in %llu "
                        "processes) is sampled once it has run a whole period (%.3f ms) in user mode on one CPU, so "
                        "a run of many short threads or processes goes mostly unsampled, as under perf record",
                due, (unsigned long long)s->st.samples, (unsigned long long)s->st.threads,
                (unsigned long long)s->st.processes, 1e3 / s->o.hz);
    fputc('\n', stderr);
}

/* Forks the command, stopped before its exec until *go is written; exec_err
 * receives exec's errno. The child's pid, or -1. */
static pid_t fork_command(const opts *o, int go[2], int exec_err[2]) {
    if (pipe2(go, O_CLOEXEC) || pipe2(exec_err, O_CLOEXEC)) return -1;
    pid_t child = fork();
    if (child == 0) {
        close(go[1]);
        close(exec_err[0]);
        char byte;
        if (read(go[0], &byte, 1) != 1) _exit(EXIT_OWN_FAILURE); /* the recorder gave up */
        sigaction(SIGPIPE, &o->sigpipe, NULL);
        execvp(o->cmd[0], o->cmd);
        int e = errno;
        ssize_t w = write(exec_err[1], &e, sizeof e);
        (void)w;
        _exit(e == ENOENT ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE);
    }
    if (child > 0) {
        close(go[0]);
        close(exec_err[1]);
    }
    return child;
}

/* Lets the command exec. 0, or EXIT_NOT_FOUND / EXIT_NOT_EXECUTABLE / EXIT_OWN_FAILURE after
 * saying why (the command is reaped). */
static int start_command(const opts *o, pid_t child, int go, int exec_err) {
    if (write(go, "g", 1) != 1) {
        fprintf(stderr, "tracemill-record-perf: starting the command: %s\n", strerror(errno));
        kill(child, SIGKILL);
        waitpid(child, NULL, 0);
        return EXIT_OWN_FAILURE;
    }
    close(go);
    int exec_errno = 0;
    ssize_t got;
    while ((got = read(exec_err, &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
    }
    close(exec_err);
    if (got == (ssize_t)sizeof exec_errno) {
        fprintf(stderr, "tracemill record: cannot run %s: %s\n", o->cmd[0], strerror(exec_errno));
        waitpid(child, NULL, 0);
        return exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE;
    }
    return 0;
}

int main(int argc, char **argv) {
    rec_state s;
    memset(&s, 0, sizeof s);
    if (parse_opts(argc, argv, &s.o)) return EXIT_OWN_FAILURE;
    s.next_seq = 1;
    s.next_own_seq = TMR_WRITER_SEQ;
    s.pcs = malloc(s.o.max_depth * sizeof *s.pcs);
    s.out = fopen(s.o.out, "we");
    if (!s.pcs || !s.out) {
        fprintf(stderr, "tracemill-record-perf: cannot write %s: %s\n", s.o.out, strerror(errno));
        return EXIT_OWN_FAILURE;
    }
    if (install_signals(&s.o)) {
        fprintf(stderr, "tracemill-record-perf: signals: %s\n", strerror(errno));
        return EXIT_OWN_FAILURE;
    }
    events ev;
    memset(&ev, 0, sizeof ev);
    int code = EXIT_OWN_FAILURE;
    tm_error err;
    memset(&err, 0, sizeof err);
    pid_t child = 0;
    /* An event per CPU on every task (-a) counts the CPU's time, not a thread's. */
    s.o.sample_read = !s.o.system_wide && can_sample_read(&s.o);
    if (events_init(&ev, s.o.off_cpu)) {
        fprintf(stderr, "tracemill-record-perf: out of memory\n");
        goto done;
    }
    if (s.o.kernel) {
        s.kallsyms = tmr_kallsyms_load(&err);
        if (!s.kallsyms || !tmr_kallsyms_count(s.kallsyms))
            fprintf(stderr, "tracemill record: kernel frames will have no names: %s\n",
                    s.kallsyms ? "/proc/kallsyms shows no addresses (kernel.kptr_restrict)" : err.message);
    }

    if (s.o.cmd) {
        /* The command waits on go until its events are open; exec_err
         * tells why exec failed (it closes on a successful exec). */
        int go[2], exec_err[2];
        child = fork_command(&s.o, go, exec_err);
        if (child < 0) {
            fprintf(stderr, "tracemill-record-perf: fork: %s\n", strerror(errno));
            goto done;
        }
        s.root = (int32_t)child;
        int which;
        if (open_events(&ev, child, &s.o, 1, &which)) {
            int e = errno;
            fprintf(stderr, "tracemill record: perf_event_open on the command%s: %s", which ? " (--off-cpu)" : "",
                    strerror(e));
            say_refusal(&s.o, e, which);
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            goto done;
        }
        /* The root process is known before its first record. */
        proc *root = add_proc(&s, s.root, NULL, &err);
        if (!root) {
            report("starting the trace", &err);
            kill(child, SIGKILL);
            waitpid(child, NULL, 0);
            goto done;
        }
        snprintf(root->comm, sizeof root->comm, "%s", s.o.cmd[0]);
        int rc = start_command(&s.o, child, go[1], exec_err[0]);
        if (rc) {
            code = rc;
            goto done;
        }
    } else if (s.o.system_wide) {
        int which;
        if (open_events(&ev, -1, &s.o, 0, &which)) {
            int e = errno;
            fprintf(stderr, "tracemill record: cannot record system-wide%s: %s", which ? " (--off-cpu)" : "",
                    strerror(e));
            say_refusal(&s.o, e, which);
            goto done;
        }
    } else {
        for (size_t i = 0; i < s.o.n_pids; i++)
            if (attach(&s, &ev, s.o.pids[i])) goto done;
    }

    queue q = {0};
    struct pollfd *pfd = calloc(ev.n_rings + 1, sizeof *pfd);
    tm_status st = pfd ? TM_OK : tm_fail(&err, TM_ERR_NOMEM, 0, NULL, "out of memory");
    int status = 0, exited = 0, stop = 0;
    uint64_t deadline = s.o.duration ? boottime_ns() + (uint64_t)(s.o.duration * 1e9) : UINT64_MAX;
    while (st == TM_OK && !stop) {
        pfd[0] = (struct pollfd){.fd = g_sig_pipe[0], .events = POLLIN};
        for (size_t c = 0; c < ev.n_rings; c++)
            pfd[c + 1] = (struct pollfd){.fd = ev.hup[c] ? -1 : ev.rings[c].fd, .events = POLLIN};
        poll(pfd, ev.n_rings + 1, POLL_MS);
        for (size_t c = 0; c < ev.n_rings; c++) ev.hup[c] |= (pfd[c + 1].revents & POLLHUP) != 0;
        unsigned char sig[2];
        while (read(g_sig_pipe[0], sig, sizeof sig) == (ssize_t)sizeof sig) {
            if (sig[0] == SIGCHLD) continue;
            if (!child) stop = 1; /* attached: any of them ends the recording */
            /* SIGINT or SIGQUIT from the terminal reached the command already */
            else if (!((sig[0] == SIGINT || sig[0] == SIGQUIT) && !sig[1])) kill(child, sig[0]);
        }
        if (child) {
            exited = waitpid(child, &status, WNOHANG) == child;
            stop |= exited;
        } else if (s.o.n_pids) {
            int any = 0;
            for (size_t i = 0; i < s.o.n_pids && !any; i++) any = alive(s.o.pids[i]);
            stop |= !any;
        }
        /* Every record older than now is in its ring by now. */
        uint64_t now = boottime_ns();
        stop |= now >= deadline;
        st = read_rings(&ev, &q, &err);
        /* Records after the deadline (the events are closed a loop later) are not used. */
        if (st == TM_OK) st = use_records(&s, &q, exited || now > deadline ? deadline : now, &err);
    }
    events_stop(&ev);
    if (st == TM_OK) st = read_rings(&ev, &q, &err);
    if (st == TM_OK) st = use_records(&s, &q, deadline, &err);
    /* Threads still off the CPU: blocked up to the end of the recording
     * (attached, or --duration); the command's exited, so none of its
     * threads should wait, unless their switch-in was lost. */
    uint64_t end_ns = boottime_ns() < deadline ? boottime_ns() : deadline;
    for (size_t i = 0; i < s.n_threads && st == TM_OK; i++) {
        thread *t = &s.threads[i];
        if (exited && t->wait.pcs) s.st.off_unmatched++, free(t->wait.pcs), t->wait.pcs = NULL;
        st = off_cpu_done(&s, t, end_ns, &err);
    }
    for (size_t i = 0; i < q.n; i++) free(q.r[i].data);
    free(q.r);
    free(pfd);
    if (st == TM_OK) st = write_stats(&s, &err);
    if (st == TM_OK && fflush(s.out)) st = tm_fail(&err, TM_ERR_IO, 0, NULL, "%s", strerror(errno));
    if (st != TM_OK) report(s.write_failed ? "writing the trace" : "recording", &err);
    else
        fprintf(stderr,
                "tracemill record: backend perf (cpu-clock every %.3f ms of CPU time, %zu CPUs): %llu samples of "
                "%llu threads in %llu processes; stacks: %llu complete, %llu partial, %llu cut at %u frames, %llu "
                "from the frame-pointer callchain; %llu records lost, %llu throttled\n",
                1e3 / s.o.hz, ev.n_cpus, (unsigned long long)s.st.samples, (unsigned long long)s.st.threads,
                (unsigned long long)s.st.processes, (unsigned long long)s.st.complete,
                (unsigned long long)s.st.partial, (unsigned long long)s.st.truncated, (unsigned)s.o.max_depth,
                (unsigned long long)s.st.callchain_used, (unsigned long long)s.st.lost,
                (unsigned long long)s.st.throttled);
    if (st == TM_OK && s.o.off_cpu)
        fprintf(stderr,
                "tracemill record: off-CPU: %llu samples (switch-outs with their stack), %.3f s off the CPU: %.3f s "
                "blocked, %.3f s preempted (%llu samples); %llu switch-outs without a switch-in left out\n",
                (unsigned long long)s.st.off_samples, (double)s.st.off_ns / 1e9,
                (double)(s.st.off_ns - s.st.off_preempted_ns) / 1e9, (double)s.st.off_preempted_ns / 1e9,
                (unsigned long long)s.st.off_preempted, (unsigned long long)s.st.off_unmatched);
    events_free(&ev);
    memset(&ev, 0, sizeof ev);
    if (!child) {
        code = st == TM_OK ? 0 : EXIT_OWN_FAILURE;
        goto done;
    }
    if (!exited) { /* --duration, or the recorder failed: the command still runs; wait for it as promised */
        if (st == TM_OK && s.o.duration)
            fprintf(stderr, "tracemill record: sampling stopped after %g s; waiting for %s to exit\n", s.o.duration,
                    s.o.cmd[0]);
        status = wait_command(child);
    }
    if (st != TM_OK) goto done;
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (WIFSIGNALED(status))
        fprintf(stderr, "tracemill record: %s was killed by signal %d; the trace holds everything up to its end\n",
                s.o.cmd[0], WTERMSIG(status));
    report_command_cpu(&s, !exited && s.o.duration);
done:
    events_free(&ev);
    free_state(&s);
    free(s.o.pids);
    if (fclose(s.out) && code != EXIT_OWN_FAILURE) {
        fprintf(stderr, "tracemill-record-perf: writing %s: %s\n", s.o.out, strerror(errno));
        code = EXIT_OWN_FAILURE;
    }
    return code;
}
