/*
 * cli_record.c — `tracemill record [options] -- CMD ARGS...` (or -p PID,
 * -a): chooses the backend (perf when perf_event_open works, or when -p,
 * -a or --kernel ask for it, else signal), then either runs
 * tracemill-record-perf (record/perf_record.c) on CMD or the processes,
 * passing on the signals that should reach CMD, or runs CMD with
 * libtracemill_record.so in LD_PRELOAD and the options in TRACEMILL_RECORD_*
 * environment variables (see record/preload.c); waits, symbolizes the
 * trace files written (each --chunk-seconds chunk as soon as the recorder
 * closes it, while the program runs on; function, file, line and inlined frames from the
 * DWARF of each mapping's ELF file, as `tracemill symbolize` adds them;
 * not with --no-symbolize), and reports what the trace holds and where it
 * is. Symbolizing here, in tracemill, keeps the DWARF reading out of the
 * profiled program and out of the perf backend's sampling loop.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* The scheduler tick of this kernel (CONFIG_HZ; getconf CLK_TCK says 100
 * whatever the tick is). The kernel checks CPU-time timers at the tick, so
 * expirations closer than a tick merge into one signal (counted as
 * overruns). Measured on this machine with a CPU-bound thread: 101 Hz
 * delivers every expiration, 166 Hz ~93 %, 200 Hz ~70 %, 250 Hz ~45 %,
 * 500 Hz ~28 %. */
#define KERNEL_TICK_HZ 250
#define CPU_TIMER_FULL_RATE_HZ 166
/* The file write period without --file-write-period-ms: a program killed
 * before exit still leaves most of its trace. */
#define DEFAULT_FILE_WRITE_PERIOD_MS "1000"

typedef struct env_opt {
    const char *flag, *var;
    const char *choices[2]; /* NULL: a number, unless text */
    int text;               /* any non-empty string */
} env_opt;

/* A command that cannot be run exits as in a shell (POSIX, and env and
 * time do the same): 127 when it is not found, 126 when it is found but
 * cannot be executed (no permission, not a program, a directory). */
enum { EXIT_NOT_EXECUTABLE = 126, EXIT_NOT_FOUND = 127 };

static int could_not_run(int code) { return code == EXIT_NOT_EXECUTABLE || code == EXIT_NOT_FOUND; }

/* The options that need --upload come after OPT_UPLOAD. */
enum {
    OPT_HZ,
    OPT_DURATION,
    OPT_BUFFER_KB,
    OPT_FILL,
    OPT_CLOCK,
    OPT_CHUNK_SECONDS,
    OPT_UNWIND,
    OPT_MAX_DEPTH,
    OPT_FILE_WRITE_PERIOD,
    OPT_CLEAR_PERIOD,
    OPT_HEAP_INTERVAL,
    OPT_MEM_PERIOD,
    OPT_UPLOAD,
    OPT_RELEASE,
    OPT_ENVIRONMENT,
    OPT_UPLOAD_QUEUE,
    OPT_UPLOAD_QUEUE_MAX,
    OPT_UPLOAD_TIMEOUT,
    N_ENV_OPTS
};

static const env_opt env_opts[N_ENV_OPTS] = {
    [OPT_HZ] = {"-F", "TRACEMILL_RECORD_HZ", {NULL, NULL}, 0},
    [OPT_DURATION] = {"--duration", "TRACEMILL_RECORD_DURATION", {NULL, NULL}, 0},
    [OPT_BUFFER_KB] = {"--buffer-kb", "TRACEMILL_RECORD_BUFFER_KB", {NULL, NULL}, 0},
    [OPT_FILL] = {"--fill", "TRACEMILL_RECORD_FILL", {"ring", "discard"}, 0},
    [OPT_CLOCK] = {"--clock", "TRACEMILL_RECORD_CLOCK", {"cpu", "wall"}, 0},
    [OPT_CHUNK_SECONDS] = {"--chunk-seconds", "TRACEMILL_RECORD_CHUNK_SECONDS", {NULL, NULL}, 0},
    [OPT_UNWIND] = {"--unwind", "TRACEMILL_RECORD_UNWIND", {"dwarf", "fp"}, 0},
    [OPT_MAX_DEPTH] = {"--max-depth", "TRACEMILL_RECORD_MAX_DEPTH", {NULL, NULL}, 0},
    [OPT_FILE_WRITE_PERIOD] = {"--file-write-period-ms", "TRACEMILL_RECORD_FILE_WRITE_PERIOD_MS", {NULL, NULL}, 0},
    [OPT_CLEAR_PERIOD] = {"--clear-period-ms", "TRACEMILL_RECORD_CLEAR_PERIOD_MS", {NULL, NULL}, 0},
    [OPT_HEAP_INTERVAL] = {"--heap-interval", "TRACEMILL_RECORD_HEAP_INTERVAL", {NULL, NULL}, 0},
    [OPT_MEM_PERIOD] = {"--mem-period", "TRACEMILL_RECORD_MEM_PERIOD_MS", {NULL, NULL}, 0},
    [OPT_UPLOAD] = {"--upload", "TRACEMILL_RECORD_UPLOAD", {NULL, NULL}, 1},
    [OPT_RELEASE] = {"--release", "TRACEMILL_RECORD_RELEASE", {NULL, NULL}, 1},
    [OPT_ENVIRONMENT] = {"--environment", "TRACEMILL_RECORD_ENVIRONMENT", {NULL, NULL}, 1},
    [OPT_UPLOAD_QUEUE] = {"--upload-queue", "TRACEMILL_RECORD_UPLOAD_QUEUE", {NULL, NULL}, 1},
    [OPT_UPLOAD_QUEUE_MAX] = {"--upload-queue-max", "TRACEMILL_RECORD_UPLOAD_QUEUE_MAX", {NULL, NULL}, 0},
    [OPT_UPLOAD_TIMEOUT] = {"--upload-timeout-ms", "TRACEMILL_RECORD_UPLOAD_TIMEOUT_MS", {NULL, NULL}, 0},
};

/* The DSN shape the recorder's uploader accepts (record/upload.c's
 * tmr_dsn_parse), checked here too so that a malformed DSN is a usage error
 * before the program starts, not a refusal once it runs. */
static int dsn_well_formed(const char *dsn) {
    const char *key = strncmp(dsn, "http://", 7) == 0 ? dsn + 7 : strncmp(dsn, "https://", 8) == 0 ? dsn + 8 : NULL;
    const char *at = key ? strchr(key, '@') : NULL;
    if (!at || at == key || memchr(key, '/', (size_t)(at - key))) return 0;
    const char *host = at + 1, *slash = strchr(host, '/');
    if (!slash || slash == host) return 0;
    const char *project = strrchr(slash, '/') + 1;
    return *project && strspn(project, "0123456789") == strlen(project);
}

static int valid_value(const env_opt *o, const char *v) {
    if (o->text) return *v != 0;
    if (o->choices[0]) return strcmp(v, o->choices[0]) == 0 || strcmp(v, o->choices[1]) == 0;
    char *end;
    unsigned long n = strtoul(v, &end, 10);
    return *v && !*end && n <= UINT32_MAX;
}

/* A sibling of this program by name into out, if access(mode) allows it. */
static int beside_me(const char *name, int mode, char *out, size_t cap) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    *slash = 0;
    if ((size_t)snprintf(out, cap, "%s/%s", exe, name) >= cap) return 0;
    return access(out, mode) == 0;
}

/* Whether this kernel lets us sample our own children with perf_event_open
 * (a disabled user-only cpu-clock event on ourselves); why not in why. */
static int perf_usable(char *why, size_t cap) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    int e = errno;
    char paranoid[16] = "?";
    FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "re");
    if (f) {
        if (!fgets(paranoid, sizeof paranoid, f)) paranoid[0] = 0;
        paranoid[strcspn(paranoid, "\n")] = 0;
        fclose(f);
    }
    snprintf(why, cap, "perf_event_open refused: %s (kernel.perf_event_paranoid = %s)", strerror(e), paranoid);
    return 0;
}

/* The perf backend's runner, for the signal handlers that pass signals on. */
static volatile sig_atomic_t g_runner = 0;

static void pass_on(int sig, siginfo_t *info, void *uc) {
    (void)uc;
    /* Ctrl-C and Ctrl-\ from the terminal reach the whole process group
     * already; a kill(1) of record does not. */
    if ((sig == SIGINT || sig == SIGQUIT) && info && info->si_code > 0) return;
    if (g_runner > 0) kill((pid_t)g_runner, sig);
}

/* libtracemill_record.so beside this program (the build directory), else
 * in the library directory of the tree it is installed in (BINDIR/../LIBDIR
 * as configured), unless told otherwise. */
static int find_preload(const char *given, char *out, size_t cap) {
    const char *env = getenv("TRACEMILL_RECORD_LIB");
    if (given || env) return realpath(given ? given : env, out) != NULL;
    if (beside_me("libtracemill_record.so", R_OK, out, cap)) return 1;
#if defined(TM_INSTALL_BINDIR) && defined(TM_INSTALL_LIBDIR)
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0) return 0;
    exe[n] = 0;
    *strrchr(exe, '/') = 0;
    /* installed: PREFIX/BINDIR/tracemill and PREFIX/LIBDIR/libtracemill_record.so */
    const char *bindir = TM_INSTALL_BINDIR, *libdir = TM_INSTALL_LIBDIR;
    char lib[PATH_MAX];
    if (libdir[0] == '/') {
        if ((size_t)snprintf(lib, sizeof lib, "%s/libtracemill_record.so", libdir) >= sizeof lib) return 0;
    } else {
        size_t depth = 1; /* directories in BINDIR: as many ".." up to the prefix */
        for (const char *c = bindir; *c; c++) depth += *c == '/' && c[1] && c[1] != '/';
        size_t k = (size_t)snprintf(lib, sizeof lib, "%s", exe);
        while (depth-- && k < sizeof lib) k += (size_t)snprintf(lib + k, sizeof lib - k, "/..");
        if (k >= sizeof lib ||
            (size_t)snprintf(lib + k, sizeof lib - k, "/%s/libtracemill_record.so", libdir) >= sizeof lib - k)
            return 0;
    }
    if (access(lib, R_OK) != 0 || !realpath(lib, out)) return 0;
    return 1;
#else
    return 0;
#endif
}

/* Prints "N samples, T threads, D s" of the trace written to file (named
 * name to the user; by the perf backend when perf) and returns its sample count (off-CPU ones too); 0 if it holds
 * none or does not decode. */
static uint64_t summarize(const char *file, const char *name, int perf, uint64_t *packets_lost, uint64_t *heap_dumps) {
    cli_input in;
    if (cli_input_load(file, NULL, &in) != EXIT_OK) return 0;
    if (in.len == 0) { /* the recorder never wrote: nothing to decode */
        cli_input_release(&in);
        return 0;
    }
    tm_trace *t = NULL;
    tm_error err;
    uint64_t samples = 0;
    const tm_trace_stats *s = tm_trace_parse(in.data, in.len, NULL, &t, &err) == TM_OK ? tm_trace_get_stats(t) : NULL;
    uint64_t lost = s ? s->buffer_chunks_overwritten + s->buffer_chunks_discarded + s->writer_packet_loss : 0;
    if (packets_lost) *packets_lost += lost;
    if (heap_dumps && s) *heap_dumps += s->heap_dumps;
    /* Said when anything was recorded, or lost: a heap profile may hold no
     * CPU sample, and a ring too small may have lost them all. */
    if (s && (s->samples_kept + s->off_cpu_samples || s->heap_dumps || lost)) {
        samples = s->samples_kept + s->off_cpu_samples; /* a program that only waited has off-CPU ones */
        fprintf(stderr, "tracemill record: %s: %zu bytes, %llu samples from %zu threads over %.2f s", name, in.len,
                (unsigned long long)s->samples_kept, tm_trace_thread_count(t),
                (double)(s->last_sample_ns - s->first_sample_ns) * 1e-9);
        if (s->off_cpu_samples)
            fprintf(stderr, ", %llu off-CPU samples (%.3f s)", (unsigned long long)s->off_cpu_samples,
                    (double)s->off_cpu_ns * 1e-9);
        if (s->heap_dumps) fprintf(stderr, ", %llu heap dumps", (unsigned long long)s->heap_dumps);
        if (lost) fprintf(stderr, ", %llu packets lost (see tracemill info)", (unsigned long long)lost);
        if (s->perf_records_lost)
            fprintf(stderr, ", %llu kernel records lost", (unsigned long long)s->perf_records_lost);
        fputc('\n', stderr);
        if (s->perf_samples_counted && s->perf_counted_cpu_ns) {
            /* The weights are measured CPU time: what the timer delivered shows. */
            double cpu_s = (double)s->perf_counted_cpu_ns * 1e-9, rate = (double)s->perf_samples_counted / cpu_s;
            fprintf(stderr, "tracemill record: %.3f s of CPU time counted, %.0f samples per CPU-second", cpu_s, rate);
            if (s->perf_timebase_hz && rate < 0.9 * (double)s->perf_timebase_hz && !perf)
                fprintf(stderr, " (-F %llu asked for: the CPU-time timer delivered %.0f %%; each sample weighs the "
                                "CPU time it stands for, so pprof's cpu/nanoseconds stays exact)",
                        (unsigned long long)s->perf_timebase_hz, 100.0 * rate / (double)s->perf_timebase_hz);
            /* The events count kernel time too, but sample only a period that
             * ends in user mode (unless --kernel). */
            else if (s->perf_timebase_hz && rate < 0.9 * (double)s->perf_timebase_hz)
                fprintf(stderr, " (-F %llu asked for: %.0f %% of it: only user mode is sampled (--kernel samples "
                                "both), and a period that ends in the kernel is not; each sample weighs the CPU time "
                                "since its thread's previous one, kernel time included, so pprof's cpu/nanoseconds "
                                "stays exact)",
                        (unsigned long long)s->perf_timebase_hz, 100.0 * rate / (double)s->perf_timebase_hz);
            fputc('\n', stderr);
        }
    } else if (t == NULL) {
        cli_report_error(name, &err);
    }
    tm_trace_free(t);
    cli_input_release(&in);
    return samples;
}

/* The command's own ELF file, held open from before it runs: when its path
 * names another file by the time a trace is symbolized (rebuilt while
 * recorded, or deleted, by the program itself or by make clean), the file
 * that ran is still read, through /proc/PID/fd. */
static struct {
    int fd;            /* -1: none */
    dev_t dev;
    ino_t ino;
    char path[PATH_MAX]; /* as the kernel names it: the mappings' path */
} g_held = {.fd = -1};

static int exec_file(const char *cmd, char *path, size_t cap);

static void hold_command_file(const char *cmd) {
    char path[PATH_MAX], link[64];
    struct stat st;
    char magic[4];
    if (!exec_file(cmd, path, sizeof path)) return;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, g_held.path, sizeof g_held.path - 1);
    if (n <= 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || pread(fd, magic, 4, 0) != 4 ||
        memcmp(magic, "\177ELF", 4) != 0) {
        close(fd);
        return;
    }
    g_held.path[n] = 0;
    g_held.fd = fd, g_held.dev = st.st_dev, g_held.ino = st.st_ino;
}

/* With --symbols DIR, or with a directory holding a link, under the held
 * file's name, to the file itself when its path has gone or names another
 * file (tried after the user's directories, before the system paths). */
static int symbolize_with_held(const char *path, const char *name, const cli_symbols *syms) {
    struct stat st;
    const char *base = strrchr(g_held.path, '/');
    if (g_held.fd < 0 || syms->no_system || !base || !base[1] ||
        (stat(g_held.path, &st) == 0 && st.st_dev == g_held.dev && st.st_ino == g_held.ino))
        return cli_symbolize_file(path, name, syms);
    char dir[] = "/tmp/tracemill-record-exe-XXXXXX", target[64], *entry = NULL, *gone = NULL;
    const char **dirs = calloc(syms->n_dirs + 1, sizeof *dirs);
    if (!dirs || !mkdtemp(dir)) {
        free(dirs);
        return cli_symbolize_file(path, name, syms);
    }
    snprintf(target, sizeof target, "/proc/%d/fd/%d", (int)getpid(), g_held.fd);
    /* by its name, and by the name a mapping of a deleted file has */
    int linked = asprintf(&entry, "%s%s", dir, base) > 0 && symlink(target, entry) == 0 &&
                 asprintf(&gone, "%s (deleted)", entry) > 0 && symlink(target, gone) == 0;
    cli_symbols with = *syms;
    if (syms->n_dirs) memcpy(dirs, syms->dirs, syms->n_dirs * sizeof *dirs);
    dirs[syms->n_dirs] = dir;
    with.dirs = dirs, with.n_dirs = syms->n_dirs + linked;
    int rc = cli_symbolize_file(path, name, &with);
    if (entry) unlink(entry);
    if (gone) unlink(gone);
    rmdir(dir);
    free(entry), free(gone), free(dirs);
    return rc;
}

/* The trace file path (named name to the user) with ModuleSymbols
 * appended, unless syms is NULL (--no-symbolize). A failure leaves the
 * file as it was: unsymbolized, for `tracemill symbolize` to retry. */
static void symbolize_trace(const char *path, const char *name, const cli_symbols *syms) {
    if (syms && path && symbolize_with_held(path, name, syms) != EXIT_OK)
        fprintf(stderr, "tracemill record: %s is left unsymbolized (tracemill symbolize adds the symbols later)\n",
                name);
}

/* What the perf backend is asked to do beyond the common options. */
typedef struct perf_run {
    const char *max_depth, *duration; /* NULL: the default */
    const char *pids;                 /* -p: attach to these instead of running cmd */
    int demangle, kernel, system_wide, off_cpu;
    char **cmd;                       /* NULL with -p or -a */
    const cli_symbols *syms;          /* NULL: --no-symbolize */
} perf_run;

/* Once the program runs (with SIGPIPE as we got it), a reader of our
 * stderr that went away (record ... 2>&1 | head -1) must not end us
 * before the trace is in place: our writes fail with EPIPE instead. */
static void ignore_sigpipe(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &sa, NULL);
}

/* The perf backend: tracemill-record-perf writes the trace to OUT's
 * temporary file and exits with CMD's status (125: it failed itself). */
/* The file execvp would run for cmd, into path; 0 when none is found. */
static int exec_file(const char *cmd, char *path, size_t cap) {
    if (strchr(cmd, '/')) return snprintf(path, cap, "%s", cmd) < (int)cap;
    const char *dirs = getenv("PATH");
    if (!dirs) dirs = "/bin:/usr/bin";
    for (const char *d = dirs;; d++) {
        size_t len = strcspn(d, ":");
        struct stat st;
        if (snprintf(path, cap, "%.*s%s%s", (int)len, d, len ? "/" : "", cmd) < (int)cap && access(path, X_OK) == 0 &&
            stat(path, &st) == 0 && S_ISREG(st.st_mode))
            return 1;
        d += len;
        if (!*d) return 0;
    }
}

/* The line that draws the recording, its path quoted for a shell when it
 * holds more than letters, digits and "/._-+,:@%" (a path with a space
 * broke the pasted command). */
static void print_flame_hint(const char *path) {
    fputs("tracemill record: flame graph: tracemill convert -f svg ", stderr);
    if (path[strspn(path, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+,:@%")] == 0) {
        fputs(path, stderr);
    } else {
        fputc('\'', stderr);
        for (const char *c = path; *c; c++)
            if (*c == '\'') fputs("'\\''", stderr);
            else fputc(*c, stderr);
        fputc('\'', stderr);
    }
    fputs(" -o flame.svg\n", stderr);
}

/* 1, with what its file is into why ("set-user-ID (uid 0)"), when running
 * cmd gives its process privileges that record lacks (root lacks none):
 * the kernel samples such a program only for a privileged recorder, and the
 * dynamic loader takes no preloaded library into it. */
static int gains_privileges(const char *cmd, char *why, size_t cap) {
    char path[PATH_MAX];
    struct stat st;
    struct statvfs fs;
    if (geteuid() == 0 || !exec_file(cmd, path, sizeof path) || stat(path, &st) != 0) return 0;
    if (statvfs(path, &fs) == 0 && (fs.f_flag & ST_NOSUID)) return 0; /* the mount ignores all three */
    if ((st.st_mode & S_ISUID) && st.st_uid != geteuid())
        snprintf(why, cap, "set-user-ID (uid %u)", (unsigned)st.st_uid);
    else if ((st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) && st.st_gid != getegid())
        snprintf(why, cap, "set-group-ID (gid %u)", (unsigned)st.st_gid);
    else if (getxattr(path, "security.capability", NULL, 0) > 0)
        snprintf(why, cap, "given file capabilities");
    else
        return 0;
    return 1;
}

static int record_perf(const char *helper, const char *out, unsigned long hz, const perf_run *r) {
    if (r->duration && strtoul(r->duration, NULL, 10) == 0)
        return cli_usage_error("record", "--duration must be at least 1 second with the perf backend");
    char **cmd = r->cmd;
    /* What was recorded, as messages name it. */
    const char *what = r->pids ? "the processes attached to" : r->system_wide ? "the system" : cmd[0];
    cli_output o = {0};
    int rc = cli_output_open(out, CLI_OUT_NAMED, NULL, &o);
    if (rc != EXIT_OK) return rc;
    char hz_text[24];
    snprintf(hz_text, sizeof hz_text, "%lu", hz);
    size_t n_cmd = 0;
    while (cmd && cmd[n_cmd]) n_cmd++;
    const char **args = calloc(n_cmd + 16, sizeof *args);
    if (!args) return cli_output_close(&o, EXIT_IO);
    size_t n = 0;
    args[n++] = helper;
    args[n++] = "-F", args[n++] = hz_text, args[n++] = "-o", args[n++] = o.tmp;
    if (r->max_depth) args[n++] = "--max-depth", args[n++] = r->max_depth;
    if (r->duration) args[n++] = "--duration", args[n++] = r->duration;
    if (r->demangle) args[n++] = "--demangle";
    if (r->kernel) args[n++] = "--kernel";
    if (r->off_cpu) args[n++] = "--off-cpu";
    if (r->system_wide) args[n++] = "-a";
    char gained[64];
    int unsampled_cmd = cmd && !r->pids && !r->system_wide && gains_privileges(cmd[0], gained, sizeof gained);
    if (unsampled_cmd) args[n++] = "--cmd-gains", args[n++] = gained;
    if (r->pids) {
        args[n++] = "-p", args[n++] = r->pids;
    } else if (!r->system_wide) {
        args[n++] = "--";
        for (size_t i = 0; i < n_cmd; i++) args[n++] = cmd[i];
    }
    struct sigaction sa, old[4];
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pass_on;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    static const int passed[4] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
    for (int i = 0; i < 4; i++) sigaction(passed[i], &sa, &old[i]);
    pid_t pid = fork();
    if (pid == 0) {
        for (int i = 0; i < 4; i++) sigaction(passed[i], &old[i], NULL);
        execv(helper, (char *const *)args);
        fprintf(stderr, "tracemill record: cannot run %s: %s\n", helper, strerror(errno));
        _exit(125);
    }
    free(args);
    if (pid < 0) {
        fprintf(stderr, "tracemill record: fork: %s\n", strerror(errno));
        return cli_output_close(&o, EXIT_IO);
    }
    ignore_sigpipe();
    g_runner = pid;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    g_runner = 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 125;
    if (WIFSIGNALED(status))
        fprintf(stderr, "tracemill record: the recorder was killed by signal %d\n", WTERMSIG(status));
    symbolize_trace(o.tmp, out, r->syms);
    uint64_t samples = summarize(o.tmp, out, 1, NULL, NULL);
    if (samples == 0 && (code == 125 || could_not_run(code))) { /* recording failed, or CMD could not run: said */
        cli_output_close(&o, EXIT_IO);
        return code;
    }
    if (samples == 0 && unsampled_cmd) {
        fprintf(stderr, "tracemill record: no samples were recorded: %s is %s (said above); nothing was written to %s\n",
                what, gained, out);
        cli_output_close(&o, EXIT_REJECTED);
        return code == 0 ? EXIT_REJECTED : code;
    }
    if (samples == 0) {
        fprintf(stderr,
                "tracemill record: no samples were recorded: %s %s before its first sample (a thread is "
                "sampled every 1/%lu s of its CPU time in user mode on one CPU); nothing was written to %s\n",
                what, r->pids || r->system_wide || r->duration ? "used no CPU time while recorded, or ended" : "ended",
                hz, out);
        cli_output_close(&o, EXIT_REJECTED);
        return code == 0 ? EXIT_REJECTED : code;
    }
    int to_file = !o.special;
    rc = cli_output_close(&o, EXIT_OK);
    if (rc != EXIT_OK) return 125;
    if (to_file) print_flame_hint(out);
    return code;
}

/* The signal backend samples only the threads of the first process that
 * take its SIGPROF: a program whose CPU time went mostly unsampled (threads
 * that block signals, a SIGPROF handler of its own, work done in child
 * processes) is told so, with the backend that records it. ru is the
 * program's, with the descendants it waited for. A program SIGKILL ended
 * lost what was sampled since the last file write instead (it was blamed
 * on blocked signals and child processes). */
static int report_unsampled_cpu(const char *what, const struct rusage *ru, uint64_t samples, unsigned long hz,
                                int sigkilled, const char *write_period_ms) {
    double cpu = (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) +
                 (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1e-6;
    double due = cpu * (double)(hz < CPU_TIMER_FULL_RATE_HZ ? hz : CPU_TIMER_FULL_RATE_HZ);
    if (due < 5.0 || (double)samples >= 0.75 * due) return 0;
    fprintf(stderr,
            "tracemill record: %s used %.3f s of CPU time but only %llu samples were taken (about %.0f were due): ",
            what, cpu, (unsigned long long)samples, due);
    if (sigkilled)
        fprintf(stderr,
                "SIGKILL ended it, which no handler sees, so what was sampled after the recorder's last file "
                "write (every %s ms, --file-write-period-ms) was lost; --backend perf keeps every sample\n",
                write_period_ms);
    else
        fputs("the signal backend samples the threads of its first process that take SIGPROF, so threads that "
              "block signals, a program that handles SIGPROF itself, and child processes go unsampled; "
              "--backend perf samples every thread and child process (it needs kernel.perf_event_paranoid <= 2)\n",
              stderr);
    return 1;
}

/* The length of OUT without its .pftrace, which the recorder's chunks and
 * upload queue are named after (x.pftrace -> x.N.pftrace, x.queue/). */
static int trace_stem(const char *out) {
    size_t len = strlen(out);
    return len >= 8 && strcmp(out + len - 8, ".pftrace") == 0 ? (int)len - 8 : (int)len;
}

/* OUT.N.pftrace, as the recorder names chunk N. */
static int chunk_file(const char *out, unsigned n, char *path, size_t cap) {
    return snprintf(path, cap, "%.*s.%u.pftrace", trace_stem(out), out, n) < (int)cap;
}

/* Symbolizes the chunks the recorder has closed, from *next on: chunk N is
 * closed once N+1 exists (the recorder closes one before it opens the
 * next), every one once the program has ended. Each is done as soon as it
 * is seen closed, while the program runs on. */
static void symbolize_closed_chunks(const char *out, unsigned *next, int ended, const cli_symbols *syms) {
    char path[PATH_MAX], after[PATH_MAX];
    while (chunk_file(out, *next, path, sizeof path) && access(path, R_OK) == 0 &&
           (ended || (chunk_file(out, *next + 1, after, sizeof after) && access(after, F_OK) == 0))) {
        symbolize_trace(path, path, syms);
        (*next)++;
    }
}

static int record_main(int argc, char **argv, cli_symbols *syms) {
    int out_given = 0;
    const char *out = "tracemill-record.pftrace", *preload = NULL, *backend = "auto", *values[N_ENV_OPTS] = {0};
    const char *pids = NULL;
    int heap = 0, kernel = 0, system_wide = 0, off_cpu = 0, i = 1;
    int symbolize = 1;
    for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--no-symbolize") == 0) {
            symbolize = 0;
            continue;
        }
        int sym_opt = cli_symbols_option(argc, argv, &i, syms);
        if (sym_opt < 0) return syms->bad[0] ? cli_usage_error("record", "%s", syms->bad)
                                             : cli_usage_error("record", "bad value for %s", a);
        if (sym_opt > 0) continue;
        if (strcmp(a, "--demangle") == 0) {
            syms->no_demangle = 0;
            continue;
        }
        if (strcmp(a, "--heap") == 0) {
            heap = 1;
            continue;
        }
        if (strcmp(a, "--off-cpu") == 0) {
            off_cpu = 1;
            continue;
        }
        if (strcmp(a, "--kernel") == 0 || strcmp(a, "-a") == 0) {
            *(a[1] == 'a' ? &system_wide : &kernel) = 1;
            continue;
        }
        if (!v) break;
        if (strcmp(a, "-o") == 0) out = argv[++i], out_given = 1;
        else if (strcmp(a, "--preload") == 0) preload = argv[++i];
        else if (strcmp(a, "-p") == 0) {
            pids = argv[++i];
            /* digits, one comma between numbers */
            int ok = *pids >= '1' && *pids <= '9';
            for (const char *c = pids; ok && *c; c++)
                ok = (*c >= '0' && *c <= '9') || (*c == ',' && c[1] >= '1' && c[1] <= '9');
            if (!ok) return cli_usage_error("record", "-p wants PID[,PID...], not %s", pids);
        }
        else if (strcmp(a, "--backend") == 0) {
            backend = argv[++i];
            if (strcmp(backend, "auto") != 0 && strcmp(backend, "perf") != 0 && strcmp(backend, "signal") != 0)
                return cli_usage_error("record", "--backend wants auto, perf or signal, not %s", backend);
        }
        else {
            int k = 0;
            while (k < N_ENV_OPTS && strcmp(env_opts[k].flag, a) != 0) k++;
            if (k == N_ENV_OPTS) break;
            if (!valid_value(&env_opts[k], v)) {
                return cli_usage_error("record", "bad value for %s: %s", a, v);
            }
            values[k] = argv[++i];
        }
    }
    if (i < argc && strcmp(argv[i], "--") != 0)
        return cli_usage_error("record", "unknown option or missing value: %s", argv[i]);
    if (pids && system_wide) return cli_usage_error("record", "-a records every process: give no -p");
    if ((pids || system_wide) && i < argc)
        return cli_usage_error("record", "%s records running processes: give no program (-- %s)", pids ? "-p" : "-a",
                               i + 1 < argc ? argv[i + 1] : "");
    if (!pids && !system_wide && i >= argc - 1)
        return cli_usage_error("record",
                               "no program given: tracemill record [options] -- CMD ARGS..., -p PID, or -a");
    char **cmd = pids || system_wide ? NULL : argv + i + 1;
    const char *upload = values[OPT_UPLOAD];
    if (upload && !dsn_well_formed(upload)) {
        return cli_usage_error("record", "--upload wants a DSN http(s)://KEY@HOST[:PORT]/PROJECT, not %s", upload);
    }
    for (int k = OPT_UPLOAD + 1; !upload && k < N_ENV_OPTS; k++)
        if (values[k]) {
            return cli_usage_error("record", "%s needs --upload", env_opts[k].flag);
        }

    if (values[OPT_HEAP_INTERVAL]) {
        if (strtoul(values[OPT_HEAP_INTERVAL], NULL, 10) == 0)
            return cli_usage_error("record", "--heap-interval must be at least 1 byte");
        heap = 1;
    }
    unsigned long hz = values[OPT_HZ] ? strtoul(values[OPT_HZ], NULL, 10) : 101;
    int wall = values[OPT_CLOCK] && strcmp(values[OPT_CLOCK], "wall") == 0;
    if (hz == 0) {
        return cli_usage_error("record", "-F must be at least 1");
    }

    /* The first option only the signal backend has, if any. */
    const char *signal_only = preload ? "--preload" : heap ? "--heap" : NULL;
    for (int k = 0; k < N_ENV_OPTS && !signal_only; k++)
        if (values[k] && k != OPT_HZ && k != OPT_MAX_DEPTH && k != OPT_DURATION &&
            !(k == OPT_CLOCK && strcmp(values[k], "cpu") == 0) && !(k == OPT_UNWIND && strcmp(values[k], "dwarf") == 0))
            signal_only = env_opts[k].flag;
    char helper[PATH_MAX], why[200] = "";
    int have_helper = beside_me("tracemill-record-perf", X_OK, helper, sizeof helper);
    /* C++ names demangled unless --no-demangle (read with the symbol options:
     * it says how both the recorder and the symbolizer write names). */
    int demangle = !syms->no_demangle;
    if (!symbolize && (syms->any || syms->no_system))
        return cli_usage_error("record", "--no-symbolize takes no symbol options (--symbols, --proguard-map, ...)");
    const cli_symbols *use_syms = symbolize ? syms : NULL;
    if (cmd && use_syms) hold_command_file(cmd[0]);
    perf_run run = {values[OPT_MAX_DEPTH], values[OPT_DURATION], pids, demangle, kernel, system_wide, off_cpu, cmd, use_syms};
    /* The first option only the perf backend has, if any: it chooses perf. */
    const char *perf_only = pids ? "-p" : system_wide ? "-a" : kernel ? "--kernel" : off_cpu ? "--off-cpu" : NULL;
    if (perf_only) {
        if (strcmp(backend, "signal") == 0) return cli_usage_error("record", "%s needs --backend perf", perf_only);
        if (signal_only) return cli_usage_error("record", "%s needs --backend signal, %s --backend perf", signal_only,
                                                perf_only);
        backend = "perf";
    }
    if (strcmp(backend, "perf") == 0) {
        if (signal_only) return cli_usage_error("record", "%s needs --backend signal", signal_only);
        if (!have_helper) {
            fprintf(stderr, "tracemill record: the perf backend is not installed (tracemill-record-perf next to "
                            "tracemill; x86-64 builds only)\n");
            return 125;
        }
        fprintf(stderr, "tracemill record: backend perf (%s)\n", perf_only ? perf_only : "asked for");
        return record_perf(helper, out, hz, &run);
    }
    if (strcmp(backend, "auto") == 0) {
        if (signal_only) snprintf(why, sizeof why, "%s is a signal backend option", signal_only);
        else if (!have_helper) snprintf(why, sizeof why, "tracemill-record-perf is not installed");
        else if (perf_usable(why, sizeof why)) {
            fprintf(stderr, "tracemill record: backend perf (perf_event_open works here)\n");
            return record_perf(helper, out, hz, &run);
        }
    } else {
        snprintf(why, sizeof why, "asked for");
    }
    if (wall) {
        /* Wall-clock timers interrupt whatever the thread is doing, blocking
         * system calls included: select() and sleeps return early with EINTR
         * (SA_RESTART does not restart them), changing the program. */
        fprintf(stderr, "tracemill record: --clock wall is refused by the signal backend: its wall-clock timers "
                        "interrupt the program's blocking system calls (select() fails with EINTR, sleeps end "
                        "early), which changes what the program does. The perf backend records without touching "
                        "the program (--backend perf; see tracemill record --help)\n");
        return 125;
    }
    fprintf(stderr, "tracemill record: backend signal (%s)\n", why);
    if (hz > KERNEL_TICK_HZ)
        fprintf(stderr,
                "tracemill record: -F %lu exceeds what CPU-time timers can deliver: the kernel checks them at its "
                "tick (%d Hz here), so a thread gets at most ~%d samples per CPU-second and the expirations in "
                "between merge into one signal (at 500 Hz about 28 %% arrive). Use -F %d or less for full-rate "
                "samples; every sample still weighs the CPU time it stands for.\n",
                hz, KERNEL_TICK_HZ, KERNEL_TICK_HZ, CPU_TIMER_FULL_RATE_HZ);
    else if (hz > CPU_TIMER_FULL_RATE_HZ)
        fprintf(stderr,
                "tracemill record: note: at -F %lu some CPU-time timer expirations fall within one kernel tick "
                "(%d Hz) and merge (measured: 200 Hz delivers ~70 %%, 250 Hz ~45 %%)\n",
                hz, KERNEL_TICK_HZ);

    char lib[PATH_MAX];
    if (!find_preload(preload, lib, sizeof lib)) {
        fprintf(stderr, "tracemill record: cannot find libtracemill_record.so (next to tracemill or in its "
                        "installed library directory; give "
                        "--preload PATH or TRACEMILL_RECORD_LIB)\n");
        return 125;
    }
    /* One trace goes to a temporary file that replaces OUT only if it holds
     * samples; chunks (OUT.N.pftrace) and uploads (chunks too, 60 s by
     * default, queued in OUT.queue/) are written by the recorder itself. */
    int single = !values[OPT_CHUNK_SECONDS] && !upload;
    cli_output o = {0};
    if (single) {
        int rc = cli_output_open(out, CLI_OUT_NAMED, NULL, &o);
        if (rc != EXIT_OK) return rc; /* refused (said): 3, as every command that writes a file */
    }

    /* The preload library writes here why it did not start recording. */
    char status_path[] = "/tmp/tracemill-record-status-XXXXXX";
    int status_fd = mkstemp(status_path);
    if (status_fd < 0) {
        fprintf(stderr, "tracemill record: cannot create a file in /tmp: %s\n", strerror(errno));
        cli_output_close(&o, EXIT_IO);
        return 125;
    }
    close(status_fd);

    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "tracemill record: fork: %s\n", strerror(errno));
        unlink(status_path);
        cli_output_close(&o, EXIT_IO);
        return 125;
    }
    if (pid == 0) {
        const char *old = getenv("LD_PRELOAD");
        char *preload_value = NULL, pid_text[32];
        if (asprintf(&preload_value, "%s%s%s", lib, old && *old ? ":" : "", old && *old ? old : "") < 0) _exit(126);
        setenv("LD_PRELOAD", preload_value, 1);
        setenv("TRACEMILL_RECORD_OUT", single ? o.tmp : out, 1);
        snprintf(pid_text, sizeof pid_text, "%d", (int)getpid());
        setenv("TRACEMILL_RECORD_PID", pid_text, 1);
        setenv("TRACEMILL_RECORD_STATUS", status_path, 1);
        for (int k = 0; k < N_ENV_OPTS; k++)
            if (values[k]) setenv(env_opts[k].var, values[k], 1);
        if (!values[OPT_FILE_WRITE_PERIOD])
            setenv("TRACEMILL_RECORD_FILE_WRITE_PERIOD_MS", DEFAULT_FILE_WRITE_PERIOD_MS, 1);
        setenv("TRACEMILL_RECORD_DEMANGLE", demangle ? "1" : "0", 1);
        /* Uploaded chunks are sent as the recorder closes them, never
         * symbolized by tracemill: their frames are named while recording,
         * unless --no-symbolize asks for build ids and pcs only. */
        if (upload && use_syms) setenv("TRACEMILL_RECORD_NAME_FRAMES", "1", 1);
        if (heap) {
            setenv("TRACEMILL_RECORD_HEAP", "1", 1);
            /* Memory telemetry beside the heap profile unless told otherwise. */
            if (!values[OPT_MEM_PERIOD]) setenv("TRACEMILL_RECORD_MEM_PERIOD_MS", "1000", 1);
        }
        execvp(cmd[0], cmd);
        int exec_errno = errno;
        fprintf(stderr, "tracemill record: cannot run %s: %s\n", cmd[0], strerror(exec_errno));
        _exit(exec_errno == ENOENT ? EXIT_NOT_FOUND : EXIT_NOT_EXECUTABLE);
    }
    ignore_sigpipe();
    /* Like time(1): ^C and ^\ reach the program, not us; a kill(1) of
     * record (SIGTERM, SIGHUP, or SIGINT sent by a process) is passed on to
     * the program, which ends its trace as it ends, and record waits. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pass_on;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    static const int passed[4] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
    g_runner = pid;
    for (int k = 0; k < 4; k++) sigaction(passed[k], &sa, NULL);
    /* With chunks to symbolize, each is done while the program runs on, as
     * soon as the recorder closes it (looked for every 200 ms). */
    int status = 0, watch_chunks = !single && use_syms && !upload;
    unsigned next_chunk = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    for (;;) {
        pid_t w = wait4(pid, &status, watch_chunks ? WNOHANG : 0, &ru);
        if (w == pid || (w < 0 && errno != EINTR)) break;
        if (w == 0) {
            symbolize_closed_chunks(out, &next_chunk, 0, use_syms);
            struct timespec nap = {0, 200 * 1000 * 1000};
            nanosleep(&nap, NULL);
        }
    }
    g_runner = 0;
    /* The preload library writes "recording" there once it runs (see
     * record/preload.c), or why it could not start; then its end-of-run
     * report, printed here: the program may have closed its own stderr. */
    char recorder_status[16] = "";
    int reported = 0, took_sigprof = 0, upload_refused = 0;
    FILE *status_file = fopen(status_path, "re");
    if (status_file) {
        int c = 0;
        size_t n = 0;
        while ((c = getc(status_file)) != EOF && c != '\n') /* a reason may be longer: its start is kept */
            if (n + 1 < sizeof recorder_status) recorder_status[n++] = (char)c;
        recorder_status[n] = 0;
        char *line = NULL;
        size_t cap = 0;
        while (getline(&line, &cap, status_file) > 0) {
            fputs(line, stderr), reported = 1;
            took_sigprof |= strstr(line, "took SIGPROF for itself") != NULL; /* preload.c's words */
            upload_refused |= strstr(line, "were refused by the server and deleted") != NULL;
        }
        free(line);
        fclose(status_file);
    }
    unlink(status_path);
    int refused = recorder_status[0] && strcmp(recorder_status, "recording") != 0;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (WIFSIGNALED(status))
        fprintf(stderr, "tracemill record: %s was killed by signal %d (exit status %d)\n", cmd[0],
                WTERMSIG(status), code);
    if (took_sigprof)
        fprintf(stderr,
                "tracemill record: %s took SIGPROF for itself after the recorder started (GNU sort does, for its "
                "cleanup), so the signal backend stopped sampling it there; --backend perf records it (without "
                "--heap)\n",
                cmd[0]);
    if (refused) {
        fprintf(stderr, "tracemill record: nothing was recorded: the recorder did not start in %s (see above)\n",
                cmd[0]);
        cli_output_close(&o, EXIT_IO);
        return 125;
    }
    char gained[64];
    if (!recorder_status[0] && gains_privileges(cmd[0], gained, sizeof gained)) {
        fprintf(stderr,
                "tracemill record: nothing was recorded: %s is %s, so it takes no preloaded library, and neither "
                "backend samples it for a recorder without its privileges (record it as root)\n",
                cmd[0], gained);
        cli_output_close(&o, EXIT_IO);
        return 125;
    }
    if (!recorder_status[0] && !(WIFEXITED(status) && could_not_run(code))) { /* CMD could not run (said) */
        fprintf(stderr,
                "tracemill record: nothing was recorded: %s never loaded the recorder (a statically linked or "
                "set-user-ID program does not take preloaded libraries); --backend perf records it without one\n",
                cmd[0]);
        cli_output_close(&o, EXIT_IO);
        return 125;
    }
    /* Uploaded chunks are not files; the program's recorder reported them. */
    if (upload && out_given) /* -o names only the upload queue then: say so, a file was asked for */
        fprintf(stderr, "tracemill record: nothing was written to %s: with --upload the chunks are sent (queued in "
                        "its .queue/ until then), not kept\n", out);
    if (upload) {
        /* The uploader reports as the program exits; a program that ends
         * with _exit (dash's sh -c) ends its trace but cannot flush it. */
        if (!reported) {
            char queue[4096];
            if (values[OPT_UPLOAD_QUEUE]) snprintf(queue, sizeof queue, "%s", values[OPT_UPLOAD_QUEUE]);
            else snprintf(queue, sizeof queue, "%.*s.queue/", trace_stem(out), out);
            fprintf(stderr,
                    "tracemill record: %s ended without exit() (say, by _exit), so its uploader could not send "
                    "or report: what it recorded waits in the upload queue %s for the next run with it\n",
                    cmd[0], queue);
        }
        if (code == 0 && upload_refused) { /* recorded data was lost: the program's 0 would hide it */
            fprintf(stderr, "tracemill record: exit 125: the server refused chunks (above), so they were lost\n");
            return 125;
        }
        return code == 0 ? EXIT_OK : code;
    }

    uint64_t samples = 0, lost = 0, heap_dumps = 0;
    if (single) {
        symbolize_trace(o.tmp, out, use_syms);
        samples = summarize(o.tmp, out, 0, &lost, &heap_dumps);
    } else {
        symbolize_closed_chunks(out, &next_chunk, 1, use_syms); /* the last ones */
        char path[PATH_MAX];
        for (unsigned n = 0; chunk_file(out, n, path, sizeof path) && access(path, R_OK) == 0; n++)
            samples += summarize(path, path, 0, &lost, &heap_dumps);
    }
    /* Packets lost to the ring buffer (said above) may have held the samples;
     * --duration stops sampling while the program runs on, and the CPU time
     * it used meanwhile was not due a sample. */
    struct timespec ended;
    clock_gettime(CLOCK_MONOTONIC, &ended);
    double ran_s = (double)(ended.tv_sec - started.tv_sec) + (double)(ended.tv_nsec - started.tv_nsec) * 1e-9;
    int cut_short = values[OPT_DURATION] && ran_s > strtod(values[OPT_DURATION], NULL);
    int sigkilled = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const char *write_period = values[OPT_FILE_WRITE_PERIOD] ? values[OPT_FILE_WRITE_PERIOD] : DEFAULT_FILE_WRITE_PERIOD_MS;
    int unsampled = !could_not_run(code) && !lost && !cut_short &&
                    report_unsampled_cpu(cmd[0], &ru, samples, hz, sigkilled, write_period);
    /* A heap profile is written even when no CPU sample was taken (the
     * program reported it on stderr). */
    if (samples == 0 && could_not_run(code)) { /* CMD could not run (said), or exited 126 or 127 itself */
        cli_output_close(&o, EXIT_REJECTED);
        return code;
    }
    if (samples == 0 && !heap_dumps) { /* a heap profile without CPU samples is a trace; nothing is not */
        if (unsampled || took_sigprof)
            fprintf(stderr, "tracemill record: no samples were recorded%s%s\n",
                    single ? "; nothing was written to " : "", single ? out : "");
        else
            fprintf(stderr,
                    "tracemill record: no samples were recorded: %s ended before its first sample (a thread is "
                    "sampled every 1/%lu s of CPU time)%s%s\n",
                    cmd[0], hz, single ? "; nothing was written to " : "", single ? out : "");
        cli_output_close(&o, EXIT_REJECTED);
        return code == 0 ? EXIT_REJECTED : code;
    }
    int to_file = !o.special, rc = cli_output_close(&o, EXIT_OK);
    if (rc != EXIT_OK) return 125;
    if (to_file) {
        char first[PATH_MAX];
        print_flame_hint(single || !chunk_file(out, 0, first, sizeof first) ? out : first);
    }
    return code == 0 ? EXIT_OK : code;
}

int cli_record(int argc, char **argv) {
    cli_symbols syms;
    memset(&syms, 0, sizeof syms);
    int rc = record_main(argc, argv, &syms);
    cli_symbols_release(&syms);
    return rc;
}
