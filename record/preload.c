/*
 * preload.c — the LD_PRELOAD entry of libtracemill_record.so: a constructor
 * that reads the TRACEMILL_RECORD_* environment variables and starts a
 * recorder in an unmodified program, and a destructor that stops it and
 * writes the trace. `tracemill record` sets these variables; they are:
 *
 *   TRACEMILL_RECORD_OUT            trace path (required; nothing happens without it)
 *   TRACEMILL_RECORD_HZ             samples per second per thread (101)
 *   TRACEMILL_RECORD_DURATION       seconds of sampling, then the trace is written
 *   TRACEMILL_RECORD_BUFFER_KB      central buffer size (4096)
 *   TRACEMILL_RECORD_FILL           ring | discard
 *   TRACEMILL_RECORD_CLOCK          cpu | wall
 *   TRACEMILL_RECORD_UNWIND         dwarf | fp
 *   TRACEMILL_RECORD_MAX_DEPTH      frames per stack (128)
 *   TRACEMILL_RECORD_CHUNK_SECONDS  continuous chunks OUT.N.pftrace
 *   TRACEMILL_RECORD_FILE_WRITE_PERIOD_MS, TRACEMILL_RECORD_CLEAR_PERIOD_MS
 *   TRACEMILL_RECORD_DEMANGLE       1: C++ names demangled
 *   TRACEMILL_RECORD_NAME_FRAMES    1: every frame named while recording (else
 *                                   files with build ids are left to tm_symbolize)
 *   TRACEMILL_RECORD_HEAP           1: also a heap profile of native allocations (heap.c)
 *   TRACEMILL_RECORD_HEAP_INTERVAL  its mean sampling interval in bytes (4096)
 *   TRACEMILL_RECORD_MEM_PERIOD_MS  ProcessStats (RSS, swap, peak) this often; 0: none
 *   TRACEMILL_RECORD_UPLOAD         DSN: chunks go to Sentry (or `tracemill serve`) as
 *                                   envelopes instead of files (chunk seconds default 60)
 *   TRACEMILL_RECORD_RELEASE, TRACEMILL_RECORD_ENVIRONMENT   sent with every chunk
 *   TRACEMILL_RECORD_UPLOAD_QUEUE   queue directory of unsent chunks (OUT.queue, OUT without
 *                                   its .pftrace)
 *   TRACEMILL_RECORD_UPLOAD_QUEUE_MAX  chunks kept in it (100; the oldest are dropped)
 *   TRACEMILL_RECORD_UPLOAD_TIMEOUT_MS how long the exit keeps sending (5000)
 *   TRACEMILL_RECORD_STATUS         a file that gets the reason when recording cannot start,
 *                                   else "recording" and the end-of-run report
 *   TRACEMILL_RECORD_PID            only the process with this pid records (its
 *                                   children inherit the variables but must not
 *                                   overwrite its trace)
 *   TRACEMILL_RECORD_APPEND         set by this library before an exec: the new
 *                                   image continues the trace ("CHUNK,HEAP_INDEX,CPU_NS":
 *                                   its first chunk's index, its first heap
 *                                   packet's, the exec'ing thread's CPU time)
 *
 * Problems are reported on stderr with a "tracemill record:" prefix (the
 * end-of-run report through the status file when there is one); the host
 * program always runs on.
 *
 * dlclose: the library defines it too, to have a library's mappings read
 * and its samples drained before its code is unmapped (see dlclose below).
 *
 * SIGPROF: the library defines sigaction, signal and sigset too; before the
 * program sets SIGPROF's disposition, the recorder's timers are deleted
 * (sampling stops there), so that no timer signal of the recorder's reaches
 * the program's handler or kills it.
 *
 * exec: an exec keeps the pid, so the new program is the recorded process
 * too. The library defines the exec functions: before the old image is
 * gone, what it recorded is written (the mappings read, the rings drained,
 * a heap dump), and the new image's recorder adds to the trace (a new
 * generation of every sequence) instead of replacing it. An exec that
 * fails leaves the program and its recorder running as they were.
 *
 * Endings without exit(): the library defines _exit and _Exit (the
 * program's calls reach these first), and handles the fatal signals a
 * program leaves at their default action (TMR_ENDING_SIGNALS: SIGSEGV,
 * SIGABRT, SIGTERM, SIGPIPE, SIGUSR1, ... every one but SIGKILL and the
 * real-time signals). Either way
 * the collector is asked to end the trace (tmr_recorder_end_now, which only
 * stores and wakes: async-signal-safe) and waited for, at most
 * ENDING_TIMEOUT_MS; then the process exits with the status it asked for,
 * or the signal's default action is restored and the signal raised again
 * (a fault returns to the faulting instruction), so the exit status is the
 * program's. A signal the program handles itself is left to its handler:
 * one installed before the recorder starts is never replaced, one installed
 * later replaces the recorder's (its handler then decides how the program
 * ends; exit() and _exit() still end the trace).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "record.h"

static tm_recorder *g_preload_recorder;
static tmr_uploader *g_preload_uploader;
static const tmr_heap_source *g_preload_heap;
static pid_t g_preload_pid; /* a fork child inherits the recorder, inert: it reports nothing */

/* How long an ending waits for the collector to write the end of the trace,
 * and a dlclose for it to read the mappings (short: a dlclose from a
 * destructor may hold the loader's lock, which the collector may want;
 * only names are lost if it is not done in time). */
enum { ENDING_TIMEOUT_MS = 5000, UNMAP_SYNC_TIMEOUT_MS = 250 };

static const int g_fatal_signals[] = {TMR_ENDING_SIGNALS};
enum { N_FATAL = sizeof g_fatal_signals / sizeof *g_fatal_signals };
static struct sigaction g_fatal_old[N_FATAL];
static int g_fatal_installed[N_FATAL];

/* Ends the trace before the process ends (at most once matters: later calls
 * find it ended). Async-signal-safe. */
static void end_trace_now(void) {
    tm_recorder *r = g_preload_recorder;
    if (r && (pid_t)syscall(SYS_getpid) == g_preload_pid) tmr_recorder_end_now(r, ENDING_TIMEOUT_MS);
}

static void on_fatal_signal(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    int saved_errno = errno;
    end_trace_now();
    for (int i = 0; i < N_FATAL; i++)
        if (g_fatal_signals[i] == sig) sigaction(sig, &g_fatal_old[i], NULL);
    /* A fault the kernel raised comes back when the instruction runs again;
     * any other signal (kill, raise, abort) is sent again, and arrives when
     * this handler returns, since it is blocked while the handler runs. */
    int fault = (sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE || sig == SIGILL || sig == SIGTRAP) &&
                si && si->si_code > 0;
    if (!fault) syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
    errno = saved_errno;
}

/* Handlers for the fatal signals still at their default action. */
static void install_ending_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fatal_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_FATAL; i++) {
        if (sigaction(g_fatal_signals[i], NULL, &g_fatal_old[i]) != 0) continue;
        if ((g_fatal_old[i].sa_flags & SA_SIGINFO) || g_fatal_old[i].sa_handler != SIG_DFL) continue;
        g_fatal_installed[i] = sigaction(g_fatal_signals[i], &sa, NULL) == 0;
    }
}

/* Puts back what install_ending_handlers replaced, where it is still ours. */
static void remove_ending_handlers(void) {
    for (int i = 0; i < N_FATAL; i++) {
        if (!g_fatal_installed[i]) continue;
        g_fatal_installed[i] = 0;
        struct sigaction now;
        if (sigaction(g_fatal_signals[i], NULL, &now) == 0 && (now.sa_flags & SA_SIGINFO) &&
            now.sa_sigaction == on_fatal_signal)
            sigaction(g_fatal_signals[i], &g_fatal_old[i], NULL);
    }
}

/* The program's _exit and _Exit (dash, for one, ends every `sh -c` with
 * _exit; fork children call it too, and skip the ending as not the
 * recording process). exit() keeps its own path: atexit and the destructor
 * below. */
__attribute__((visibility("default"))) void _exit(int status) {
    end_trace_now();
    for (;;) syscall(SYS_exit_group, status);
}

__attribute__((visibility("default"))) void _Exit(int status) {
    end_trace_now();
    for (;;) syscall(SYS_exit_group, status);
}

/* The program's dlclose: before a library's code is unmapped the collector
 * reads the mappings and drains the samples taken in it, waited for at most
 * UNMAP_SYNC_TIMEOUT_MS, so that its frames keep their names (the heap
 * profile names its stacks only when it dumps them). */
__attribute__((visibility("default"))) int dlclose(void *handle) {
    static void *_Atomic real_dlclose;
    void *sym = atomic_load_explicit(&real_dlclose, memory_order_relaxed);
    if (!sym) {
        sym = dlsym(RTLD_NEXT, "dlclose");
        if (!sym) return -1; /* dlerror says why */
        atomic_store_explicit(&real_dlclose, sym, memory_order_relaxed);
    }
    int (*next)(void *);
    memcpy(&next, &sym, sizeof sym); /* object to function pointer, as POSIX allows */
    tm_recorder *r = g_preload_recorder;
    int ours = r && (pid_t)syscall(SYS_getpid) == g_preload_pid;
    if (ours) tmr_recorder_sync_before_unmap(r, UNMAP_SYNC_TIMEOUT_MS);
    int rc = next(handle);
    /* a library dlopen maps where this one was must not pass for it */
    if (ours && rc == 0) tmr_recorder_maps_changed(r);
    return rc;
}

/* Unsigned decimal environment value; 0 (the option's default) when unset.
 * A bad value is reported and ignored. */
static uint32_t env_u32(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v) return 0;
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    if (*end || n > UINT32_MAX) {
        fprintf(stderr, "tracemill record: ignoring %s=%s (not a number)\n", name, v);
        return 0;
    }
    return (uint32_t)n;
}

/* 0 for first (or unset), 1 for second; a bad value is reported. */
static int env_choice(const char *name, const char *first, const char *second) {
    const char *v = getenv(name);
    if (!v || !*v || strcmp(v, first) == 0) return 0;
    if (strcmp(v, second) == 0) return 1;
    fprintf(stderr, "tracemill record: ignoring %s=%s (expected %s or %s)\n", name, v, first, second);
    return 0;
}

/* What the status file holds while this process records (cli_record.c
 * reads it by the same word). */
#define TMR_STATUS_RECORDING "recording"

/* Writes text into the file TRACEMILL_RECORD_STATUS names, which tells
 * `tracemill record` whether the recorder ran: TMR_STATUS_RECORDING once it
 * started, the reason when it could not; left empty, the library was never
 * loaded (a static or setuid program). */
static FILE *open_status(const char *mode) {
    const char *path = getenv("TRACEMILL_RECORD_STATUS");
    return path && *path ? fopen(path, mode) : NULL;
}

static void set_status(const char *text) {
    FILE *f = open_status("we");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A line of the end-of-run report. Under `tracemill record` it goes after
 * the status in the status file and record prints it on its own stderr, so
 * that none is lost when the program has closed its stderr (xz does);
 * preloaded by hand, on stderr. */
static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
    FILE *f = open_status("ae");
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f ? f : stderr, fmt, ap);
    va_end(ap);
    if (f) fclose(f);
}

/* Says why this process does not record: on stderr, and in the status file
 * (`tracemill record` then exits non-zero: an upload run leaves no trace
 * file to tell it by). */
static void refuse(const char *why) {
    fprintf(stderr, "tracemill record: not recording: %s\n", why);
    set_status(why);
}

/* Starts recording into TRACEMILL_RECORD_OUT (continuing the trace when
 * TRACEMILL_RECORD_APPEND is set). */
static void start_recording(const char *out) {
    tm_recorder_options o;
    memset(&o, 0, sizeof o);
    o.output = out;
    o.hz = env_u32("TRACEMILL_RECORD_HZ");
    o.duration_ms = env_u32("TRACEMILL_RECORD_DURATION") * 1000u;
    o.buffer_kb = env_u32("TRACEMILL_RECORD_BUFFER_KB");
    o.fill = env_choice("TRACEMILL_RECORD_FILL", "ring", "discard") ? TM_RECORD_FILL_DISCARD : TM_RECORD_FILL_RING;
    o.clock = env_choice("TRACEMILL_RECORD_CLOCK", "cpu", "wall") ? TM_RECORD_CLOCK_WALL : TM_RECORD_CLOCK_CPU;
    o.unwind = env_choice("TRACEMILL_RECORD_UNWIND", "dwarf", "fp") ? TM_RECORD_UNWIND_FP : TM_RECORD_UNWIND_DWARF;
    o.max_depth = env_u32("TRACEMILL_RECORD_MAX_DEPTH");
    o.chunk_seconds = env_u32("TRACEMILL_RECORD_CHUNK_SECONDS");
    o.file_write_period_ms = env_u32("TRACEMILL_RECORD_FILE_WRITE_PERIOD_MS");
    o.clear_period_ms = env_u32("TRACEMILL_RECORD_CLEAR_PERIOD_MS");
    o.demangle = env_u32("TRACEMILL_RECORD_DEMANGLE") != 0;
    o.name_frames = env_u32("TRACEMILL_RECORD_NAME_FRAMES") != 0;
    o.mem_period_ms = env_u32("TRACEMILL_RECORD_MEM_PERIOD_MS");
    tm_error err;
    tmr_uploader *u = NULL;
    const char *dsn = getenv("TRACEMILL_RECORD_UPLOAD");
    if (dsn && *dsn) {
        char *default_queue = NULL;
        const char *queue = getenv("TRACEMILL_RECORD_UPLOAD_QUEUE");
        if ((!queue || !*queue) && asprintf(&default_queue, "%.*s.queue", (int)tmr_trace_stem(out), out) >= 0)
            queue = default_queue;
        tmr_upload_opts uo = {.dsn = dsn,
                              .release = getenv("TRACEMILL_RECORD_RELEASE"),
                              .environment = getenv("TRACEMILL_RECORD_ENVIRONMENT"),
                              .queue_dir = queue,
                              .queue_max = env_u32("TRACEMILL_RECORD_UPLOAD_QUEUE_MAX"),
                              .flush_timeout_ms = env_u32("TRACEMILL_RECORD_UPLOAD_TIMEOUT_MS")};
        u = tmr_upload_new(&uo, &err);
        free(default_queue);
        if (!u) {
            refuse(err.message);
            return;
        }
        if (!o.chunk_seconds) o.chunk_seconds = 60;
        o.on_chunk = tmr_upload_chunk;
        o.chunk_ctx = u;
    }
    tm_recorder *r = NULL;
    const char *append = getenv("TRACEMILL_RECORD_APPEND");
    if (tm_recorder_new(&o, &r, &err) == TM_OK && append && *append) {
        char *comma;
        tmr_continuation from = {(uint32_t)strtoul(append, &comma, 10), 0, 0};
        if (*comma == ',') from.heap_index = strtoull(comma + 1, &comma, 10);
        if (*comma == ',') from.exec_cpu_ns = strtoull(comma + 1, NULL, 10);
        tmr_recorder_continue(r, from);
    }
    if (!r || tm_recorder_start(r, &err) != TM_OK) {
        refuse(err.message);
        tm_recorder_free(r);
        tmr_upload_close(u, NULL);
        return;
    }
    g_preload_recorder = r;
    g_preload_uploader = u;
    g_preload_pid = getpid();
    set_status(TMR_STATUS_RECORDING "\n"); /* the report's lines follow it */
    install_ending_handlers();
    /* Sampling starts once the recorder runs, so that the recorder's own
     * setup is not in the profile. */
    if (env_u32("TRACEMILL_RECORD_HEAP")) {
        g_preload_heap = tmr_heap_start(env_u32("TRACEMILL_RECORD_HEAP_INTERVAL"), o.max_depth, &err);
        if (g_preload_heap) tmr_recorder_set_heap(r, g_preload_heap);
        else fprintf(stderr, "tracemill record: no heap profile: %s\n", err.message);
    }
}

__attribute__((constructor)) static void tracemill_record_preload_start(void) {
    const char *out = getenv("TRACEMILL_RECORD_OUT");
    if (!out || !*out) return;
    const char *pid = getenv("TRACEMILL_RECORD_PID");
    if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid()) return;
    start_recording(out);
}

/* ---- SIGPROF taken by the program ------------------------------------------ */

/* How long a program's sigaction for SIGPROF waits for the timers to go. */
enum { RELEASE_SIGPROF_TIMEOUT_MS = 1000 };

/* The program is about to set SIGPROF's disposition (a handler of its own, as
 * GNU sort installs for its cleanup, or SIG_DFL or SIG_IGN): the recorder's
 * timers are deleted first, so that their signals neither run its handler
 * (which counted them, or died of them as sort does) nor kill it. */
static void before_sigprof_taken(int sig) {
    static atomic_int said;
    tm_recorder *r = g_preload_recorder;
    if (sig != SIGPROF || !r || (pid_t)syscall(SYS_getpid) != g_preload_pid) return;
    tmr_recorder_release_sigprof(r, RELEASE_SIGPROF_TIMEOUT_MS);
    if (!atomic_exchange(&said, 1)) /* cli_record.c looks for these words */
        report("tracemill record: the program took SIGPROF for itself: CPU sampling stopped there\n");
}

/* *slot = the next definition of name (its libc's), looked up once. */
static void *next_definition(void *_Atomic *slot, const char *name) {
    void *sym = atomic_load_explicit(slot, memory_order_relaxed);
    if (!sym && (sym = dlsym(RTLD_NEXT, name))) atomic_store_explicit(slot, sym, memory_order_relaxed);
    if (!sym) errno = ENOSYS;
    return sym;
}

typedef int (*sigaction_fn)(int, const struct sigaction *, struct sigaction *);
typedef void (*handler_fn)(int);
typedef handler_fn (*signal_fn)(int, handler_fn);

__attribute__((visibility("default"))) int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    static void *_Atomic slot;
    void *sym = next_definition(&slot, "sigaction");
    if (!sym) return -1;
    sigaction_fn next;
    memcpy(&next, &sym, sizeof sym);
    /* putting back the handler that is there (the recorder's, saved by a
     * save-and-restore) takes nothing */
    struct sigaction now;
    if (act && sig == SIGPROF && (next(sig, NULL, &now) != 0 || now.sa_handler != act->sa_handler))
        before_sigprof_taken(sig);
    return next(sig, act, old);
}

/* signal and sigset: libc's call its own sigaction, past the one above. */
static handler_fn set_disposition(void *_Atomic *slot, const char *name, int sig, handler_fn handler) {
    void *sym = next_definition(slot, name);
    if (!sym) return SIG_ERR;
    signal_fn next;
    memcpy(&next, &sym, sizeof sym);
    before_sigprof_taken(sig);
    return next(sig, handler);
}

__attribute__((visibility("default"))) handler_fn signal(int sig, handler_fn handler) {
    static void *_Atomic slot;
    return set_disposition(&slot, "signal", sig, handler);
}

__attribute__((visibility("default"))) handler_fn sigset(int sig, handler_fn handler) {
    static void *_Atomic slot;
    return set_disposition(&slot, "sigset", sig, handler);
}

/* ---- exec ------------------------------------------------------------------ */

#define APPEND_VAR "TRACEMILL_RECORD_APPEND="
static char g_append_entry[sizeof APPEND_VAR + 72]; /* for an exec given its own environment */

/* Before the recording process replaces its image: what it recorded is
 * written, and the continuation for the new image's environment is made.
 * 1 when it was (after_failed_exec must follow an exec that returns). The
 * program's environ is left alone: a shell's setenv (bash's) works on its
 * own variable table, so the environment it passes would not have it. */
static int before_exec(void) {
    tm_recorder *r = g_preload_recorder;
    if (!r || (pid_t)syscall(SYS_getpid) != g_preload_pid) return 0; /* a (v)fork child: nothing of ours */
    tm_error err;
    tmr_recorder_sync_before_unmap(r, UNMAP_SYNC_TIMEOUT_MS);
    if (tmr_recorder_write_now(r, &err) != TM_OK) report("tracemill record: before an exec: %s\n", err.message);
    tmr_continuation next = tmr_recorder_where_next(r);
    snprintf(g_append_entry, sizeof g_append_entry, APPEND_VAR "%u,%llu,%llu", next.chunk,
             (unsigned long long)next.heap_index, (unsigned long long)next.exec_cpu_ns);
    return 1;
}

/* The environment an exec passes: a recording environment with the
 * continuation in place of any earlier one (*made: the copy, to free); any
 * other as it is (the new image does not record). */
static char *const *exec_environment(char *const envp[], char ***made) {
    *made = NULL;
    if (!envp) return envp;
    size_t n = 0;
    int recording = 0;
    for (; envp[n]; n++) recording |= strncmp(envp[n], "TRACEMILL_RECORD_OUT=", 21) == 0;
    char **copy = recording ? malloc((n + 2) * sizeof *copy) : NULL;
    if (!copy) return envp;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (strncmp(envp[i], APPEND_VAR, strlen(APPEND_VAR)) != 0) copy[k++] = envp[i];
    copy[k++] = g_append_entry;
    copy[k] = NULL;
    return *made = copy;
}

/* The exec failed and the program goes on, recorded as before. */
static void after_failed_exec(char **made) {
    int saved_errno = errno;
    free(made);
    errno = saved_errno;
}

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);

/* The exec functions that take an environment (execve, execvpe), with the
 * program's environment continued. */
static int exec_with_environment(void *_Atomic *slot, const char *name, const char *file, char *const argv[],
                                 char *const envp[]) {
    void *sym = next_definition(slot, name);
    if (!sym) return -1;
    execve_fn next;
    memcpy(&next, &sym, sizeof sym);
    char **made = NULL;
    if (!before_exec()) return next(file, argv, envp);
    int rc = next(file, argv, exec_environment(envp, &made));
    after_failed_exec(made);
    return rc;
}

__attribute__((visibility("default"))) int execve(const char *path, char *const argv[], char *const envp[]) {
    static void *_Atomic slot;
    return exec_with_environment(&slot, "execve", path, argv, envp);
}

__attribute__((visibility("default"))) int execvpe(const char *file, char *const argv[], char *const envp[]) {
    static void *_Atomic slot;
    return exec_with_environment(&slot, "execvpe", file, argv, envp);
}

__attribute__((visibility("default"))) int fexecve(int fd, char *const argv[], char *const envp[]) {
    static void *_Atomic slot;
    void *sym = next_definition(&slot, "fexecve");
    if (!sym) return -1;
    fexecve_fn next;
    memcpy(&next, &sym, sizeof sym);
    char **made = NULL;
    if (!before_exec()) return next(fd, argv, envp);
    int rc = next(fd, argv, exec_environment(envp, &made));
    after_failed_exec(made);
    return rc;
}

/* execv and execvp pass environ: as execve and execvpe given it. */
__attribute__((visibility("default"))) int execv(const char *path, char *const argv[]) {
    static void *_Atomic slot;
    return exec_with_environment(&slot, "execve", path, argv, environ);
}

__attribute__((visibility("default"))) int execvp(const char *file, char *const argv[]) {
    static void *_Atomic slot;
    return exec_with_environment(&slot, "execvpe", file, argv, environ);
}

/* execl, execlp and execle: their arguments as an array, for the functions
 * above (libc's own go to its internal execve, past them). */
#define EXEC_LIST(first, ap, argv)                                                                                    \
    size_t n_args_ = 1;                                                                                               \
    va_list count_;                                                                                                   \
    va_copy(count_, ap);                                                                                              \
    while (va_arg(count_, char *)) n_args_++;                                                                         \
    va_end(count_);                                                                                                   \
    char *argv[n_args_ + 1];                                                                                          \
    argv[0] = (char *)(first);                                                                                        \
    for (size_t i_ = 1; i_ <= n_args_; i_++) argv[i_] = va_arg(ap, char *)

__attribute__((visibility("default"))) int execl(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    EXEC_LIST(arg, ap, argv);
    va_end(ap);
    return execv(path, argv);
}

__attribute__((visibility("default"))) int execlp(const char *file, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    EXEC_LIST(arg, ap, argv);
    va_end(ap);
    return execvp(file, argv);
}

__attribute__((visibility("default"))) int execle(const char *path, const char *arg, ...) {
    va_list ap;
    va_start(ap, arg);
    EXEC_LIST(arg, ap, argv);
    char *const *envp = va_arg(ap, char *const *);
    va_end(ap);
    return execve(path, argv, envp);
}

/* What the heap profile holds and lost, beside `record`'s summary. */
static void report_heap(const tmr_heap_source *heap) {
    const tmr_heap_callsite *sites;
    tmr_heap_stats st;
    size_t n = heap->snapshot(&sites, &st);
    uint64_t allocated = 0, freed = 0;
    for (size_t i = 0; i < n; i++) allocated += sites[i].alloc_bytes, freed += sites[i].free_bytes;
    report("tracemill record: heap: %llu allocations sampled (mean interval %llu bytes) at %zu callstacks: ~%llu "
            "bytes allocated, ~%llu retained at exit; lost: %llu made inside the profiler, %llu for lack of room; %llu "
            "stacks cut to the caller\n",
            (unsigned long long)st.sampled, (unsigned long long)st.interval, n, (unsigned long long)allocated,
            (unsigned long long)(allocated - freed), (unsigned long long)st.reentrant,
            (unsigned long long)st.table_full, (unsigned long long)st.unwind_errors);
}

__attribute__((destructor)) static void tracemill_record_preload_stop(void) {
    tm_recorder *r = g_preload_recorder;
    if (!r) return;
    remove_ending_handlers();
    g_preload_recorder = NULL;
    tm_error err;
    if (tm_recorder_stop(r, &err) != TM_OK) report("tracemill record: %s\n", err.message);
    tm_recorder_stats rs;
    tm_recorder_get_stats(r, &rs);
    if (rs.stacks_truncated && getpid() == g_preload_pid)
        report("tracemill record: %llu of %llu stacks cut at --max-depth, marked [truncated]\n",
                (unsigned long long)rs.stacks_truncated, (unsigned long long)rs.samples);
    if (rs.timer_overruns && getpid() == g_preload_pid)
        report("tracemill record: %llu timer expirations merged into other signals (timer_getoverrun): the CPU-time "
                "timer delivered %llu of %llu; each sample weighs the CPU time since the thread's previous one\n",
                (unsigned long long)rs.timer_overruns, (unsigned long long)rs.samples,
                (unsigned long long)(rs.samples + rs.timer_overruns));
    tm_recorder_free(r);
    if (g_preload_heap && getpid() == g_preload_pid) report_heap(g_preload_heap);
    tmr_uploader *u = g_preload_uploader;
    if (!u) return;
    g_preload_uploader = NULL;
    /* A fork child's copy is the parent's: its thread is not in this
     * process, and closing it would wait for that thread forever (a bash
     * command substitution ends with exit()). */
    if (getpid() != g_preload_pid) return;
    char profiler_id[33];
    snprintf(profiler_id, sizeof profiler_id, "%s", tmr_upload_profiler_id(u));
    tmr_upload_stats st;
    tmr_upload_close(u, &st);
    report("tracemill record: profiler_id %s: uploaded %llu chunks (%llu recorded), %llu rejected, %llu failed attempts, %llu dropped from the "
            "full queue, %llu left queued\n",
            profiler_id, (unsigned long long)st.sent, (unsigned long long)st.queued, (unsigned long long)st.rejected,
            (unsigned long long)st.failed_attempts, (unsigned long long)st.dropped, (unsigned long long)st.left);
    /* `tracemill record` exits 125 on the first line's words (cli_record.c) */
    if (st.rejected)
        report("tracemill record: %llu chunks were refused by the server and deleted (sending them again cannot "
                "help): %s\n", (unsigned long long)st.rejected, st.last_rejection);
    if (st.failed_attempts)
        report("tracemill record: the last failed attempt to upload: %s\n", st.last_failure);
}
