/*
 * cli_io.c — input loading, output files, error reporting and shared
 * option parsing for the tracemill command. Files are mapped read-only so a
 * 10 GB trace costs page cache, not a copy; stdin, pipes and devices are
 * read into one growing buffer that stops at max_input_bytes. Output to a regular file (symbolic links followed to their
 * target) goes to TARGET.tmp-XXXXXX beside it, with the target's mode, and
 * is renamed over it only when the command succeeded, so a rejected trace
 * never leaves a truncated file behind and a failed one never removes the
 * old file. Character devices and FIFOs (/dev/null, a named pipe) are
 * written directly: renaming over them would replace the device.
 * Directories, read-only files and the command's own inputs are refused.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

/* The input size the options allow: their max_input_bytes, else the preset's. */
static uint64_t max_input_bytes(const tm_options *opts) {
    if (opts && opts->limits.max_input_bytes) return opts->limits.max_input_bytes;
    tm_limits preset;
    tm_limits_preset(opts && (opts->mode == TM_MODE_RELAY || opts->preset == TM_LIMITS_RELAY) ? TM_LIMITS_RELAY
                                                                                               : TM_LIMITS_GENEROUS,
                     &preset);
    return preset.max_input_bytes;
}

static int too_large(const char *name, uint64_t max_bytes) {
    tm_error err = {.code = TM_ERR_LIMIT, .offset = max_bytes};
    snprintf(err.message, sizeof err.message,
             "input is larger than max_input_bytes (%llu; raise it with --max-input-bytes)",
             (unsigned long long)max_bytes);
    return cli_report_error(name, &err);
}

/* Reads fd to its end, stopping as soon as it holds more than max_bytes:
 * a pipe or device (/dev/zero) never grows the buffer past the limit. */
static int read_all(int fd, const char *name, uint64_t max_bytes, cli_input *in) {
    size_t bound = max_bytes < SIZE_MAX - 1 ? (size_t)max_bytes + 1 : SIZE_MAX - 1;
    size_t cap = bound < ((size_t)1 << 16) ? bound : (size_t)1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        fprintf(stderr, "tracemill: out of memory reading %s\n", name);
        return EXIT_IO;
    }
    while (len < bound) {
        if (len == cap) {
            size_t ncap = cap > bound / 2 ? bound : cap * 2;
            uint8_t *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fprintf(stderr, "tracemill: out of memory reading %s\n", name);
                return EXIT_IO;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n == 0) break;
        if (n < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "tracemill: cannot read %s: %s\n", name, strerror(errno));
            free(buf);
            return EXIT_IO;
        }
        len += (size_t)n;
        cli_progress_bytes(len);
    }
    if (len > max_bytes) {
        free(buf);
        return too_large(name, max_bytes);
    }
    in->data = buf;
    in->len = len;
    in->mapped = 0;
    return EXIT_OK;
}

int cli_input_load(const char *path, const tm_options *opts, cli_input *in) {
    memset(in, 0, sizeof *in);
    uint64_t max_bytes = max_input_bytes(opts);
    if (strcmp(path, "-") == 0) return read_all(STDIN_FILENO, "standard input", max_bytes, in);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        fprintf(stderr, "tracemill: cannot open %s: %s\n", path, strerror(errno));
        return EXIT_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        fprintf(stderr, "tracemill: cannot stat %s: %s\n", path, strerror(errno));
        close(fd);
        return EXIT_IO;
    }
    int rc = EXIT_OK;
    if (S_ISDIR(st.st_mode)) {
        fprintf(stderr, "tracemill: %s is a directory\n", path);
        rc = EXIT_IO;
    } else if (!S_ISREG(st.st_mode)) {
        rc = read_all(fd, path, max_bytes, in); /* pipes, /dev/stdin, ... */
    } else if ((uint64_t)st.st_size > max_bytes) {
        rc = too_large(path, max_bytes);
    } else if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) rc = read_all(fd, path, max_bytes, in);
        else {
            posix_madvise(p, (size_t)st.st_size, POSIX_MADV_SEQUENTIAL);
            in->data = p;
            in->len = (size_t)st.st_size;
            in->mapped = 1;
        }
    }
    close(fd);
    return rc;
}

void cli_input_release(cli_input *in) {
    if (in->mapped) munmap((void *)(uintptr_t)in->data, in->len);
    else free((void *)(uintptr_t)in->data);
    memset(in, 0, sizeof *in);
}

static int report(const char *what, const tm_error *err, int names_a_byte) {
    const char *kind = err->reason ? err->reason : tm_status_str(err->code);
    if (!names_a_byte || err->code == TM_ERR_INVALID_ARG) /* about the options or the profile, not a byte */
        fprintf(stderr, "tracemill: %s: %s: %s\n", what, kind, err->message);
    else
        fprintf(stderr, "tracemill: %s: %s at byte %llu: %s\n", what, kind, (unsigned long long)err->offset,
                err->message);
    if (err->code == TM_ERR_IO) return EXIT_IO;
    if (err->code == TM_ERR_INVALID_ARG) return EXIT_USAGE;
    return EXIT_REJECTED;
}

int cli_report_error(const char *what, const tm_error *err) { return report(what, err, 1); }

int cli_require_perfetto(const char *cmd, const char *path, const cli_input *in) {
    tm_input_format f = in->len ? tm_input_detect(in->data, in->len) : TM_INPUT_PERFETTO;
    if (f == TM_INPUT_PERFETTO) return EXIT_OK;
    fprintf(stderr, "tracemill: %s: %s needs a Perfetto trace; this is %s input\n", path, cmd, tm_input_format_name(f));
    return EXIT_REJECTED;
}

int cli_report_export_error(const char *what, const tm_error *err) { return report(what, err, 0); }

int cli_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-') return 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return 0;
    uint64_t mult = 1;
    if (*end == 'k' || *end == 'K') mult = 1000, end++;
    else if (*end == 'M') mult = 1000000, end++;
    else if (*end == 'G') mult = 1000000000, end++;
    if (*end) return 0;
    if (v > UINT64_MAX / mult) return 0;
    *out = (uint64_t)v * mult;
    return 1;
}

int cli_limit_option(int argc, char **argv, int *i, tm_options *opts) {
    static const struct {
        const char *flag;
        size_t offset;
    } flags[] = {
        {"--max-samples", offsetof(tm_limits, max_samples)},
        {"--max-stack-depth", offsetof(tm_limits, max_stack_depth)},
        {"--max-sequences", offsetof(tm_limits, max_sequences)},
        {"--max-packet-bytes", offsetof(tm_limits, max_packet_bytes)},
        {"--max-unique-frames", offsetof(tm_limits, max_unique_frames)},
        {"--max-path-segments", offsetof(tm_limits, max_path_segments)},
        {"--max-inflated-bytes", offsetof(tm_limits, max_inflated_bytes)},
        {"--max-interned-entries", offsetof(tm_limits, max_interned_entries)},
        {"--max-chunk-duration-ns", offsetof(tm_limits, max_chunk_duration_ns)},
        {"--max-work-bytes", offsetof(tm_limits, max_work_bytes)},
        {"--max-result-bytes", offsetof(tm_limits, max_result_bytes)},
        {"--max-input-bytes", offsetof(tm_limits, max_input_bytes)},
    };
    const char *arg = argv[*i];
    if (strcmp(arg, "--strict") == 0) {
        opts->strict = 1;
        return 1;
    }
    if (strcmp(arg, "--limits") == 0) {
        if (*i + 1 >= argc) return -1;
        const char *v = argv[++*i];
        if (strcmp(v, "relay") == 0) opts->preset = TM_LIMITS_RELAY;
        else if (strcmp(v, "generous") == 0) opts->preset = TM_LIMITS_GENEROUS;
        else return -1;
        return 1;
    }
    for (size_t k = 0; k < sizeof flags / sizeof *flags; k++) {
        if (strcmp(arg, flags[k].flag) != 0) continue;
        uint64_t v;
        if (*i + 1 >= argc || !cli_parse_u64(argv[*i + 1], &v) || v == 0) return -1; /* the caller says so */
        ++*i;
        memcpy((char *)&opts->limits + flags[k].offset, &v, sizeof v);
        return 1;
    }
    return 0;
}

void cli_limit_problem(const char *opt, const char *v, char *out, size_t cap) {
    size_t digits = v ? strspn(v, "0123456789") : 0;
    if (strcmp(opt, "--limits") == 0) snprintf(out, cap, "%s takes relay or generous", opt);
    else if (!v) snprintf(out, cap, "%s needs a value", opt);
    else if (digits && v[0] != '0' && (!v[digits] || (strchr("kKMG", v[digits]) && !v[digits + 1])))
        snprintf(out, cap, "%s %.40s is over the largest value, %" PRIu64, opt, v, UINT64_MAX);
    else snprintf(out, cap, "%s needs a positive number (k, M or G may follow), not '%.40s'", opt, v);
}

void cli_warn_cut_off(const char *what, uint64_t at) {
    fprintf(stderr,
            "tracemill: warning: %s is cut off: the packet at byte %llu runs past the end; the complete packets "
            "before it were read (--strict rejects such a trace)\n",
            what, (unsigned long long)at);
}

void cli_warn_truncated(const char *what, const tm_trace *t) {
    const tm_trace_stats *st = tm_trace_get_stats(t);
    if (st->truncated) cli_warn_cut_off(what, st->truncated_at);
}

int cli_output_error(const char *path, int errnum) {
    fprintf(stderr, "tracemill: cannot write %s: %s\n", path ? path : "standard output", strerror(errnum));
    return EXIT_IO;
}

/* path with its symbolic links followed to the file they end at, which may
 * not exist yet (a dangling link names the file to create). NULL with
 * errno set on failure. */
static char *final_target(const char *path) {
    char *cur = strdup(path);
    for (int hops = 0; cur; hops++) {
        struct stat st;
        if (lstat(cur, &st) != 0) {
            if (errno == ENOENT) return cur;
            free(cur);
            return NULL;
        }
        if (!S_ISLNK(st.st_mode)) return cur;
        char link[PATH_MAX];
        ssize_t n = -1;
        if (hops == 40) errno = ELOOP;
        else n = readlink(cur, link, sizeof link - 1);
        if (n < 0) {
            free(cur);
            return NULL;
        }
        link[n] = 0;
        /* A relative link is relative to the directory holding it. */
        const char *slash = strrchr(cur, '/');
        int dir_len = link[0] == '/' || !slash ? 0 : (int)(slash - cur) + 1;
        size_t len = (size_t)dir_len + (size_t)n + 1;
        char *next = malloc(len);
        if (next) snprintf(next, len, "%.*s%s", dir_len, cur, link);
        free(cur);
        cur = next;
    }
    errno = ENOMEM;
    return NULL;
}

/* A new empty file with the given mode: TARGET.tmp-XXXXXX beside target
 * (so that rename() replaces target atomically) or, with target NULL, in
 * $TMPDIR. Returns its descriptor (name in *name), or -1 with errno. */
static int create_temp(const char *target, mode_t mode, char **name) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    size_t len = strlen(target ? target : dir) + 32;
    *name = malloc(len);
    if (!*name) {
        errno = ENOMEM;
        return -1;
    }
    if (target) snprintf(*name, len, "%s.tmp-XXXXXX", target);
    else snprintf(*name, len, "%s/tracemill-XXXXXX", dir);
    int fd = mkstemp(*name);
    if (fd >= 0 && fchmod(fd, mode) == 0) return fd;
    int e = errno;
    if (fd >= 0) {
        close(fd);
        unlink(*name);
    }
    free(*name);
    *name = NULL;
    errno = e;
    return -1;
}

/* Whether out is one of inputs (same device and inode), said on stderr. */
static int is_an_input(const char *path, const struct stat *out, const char *const *inputs) {
    for (; inputs && *inputs; inputs++) {
        struct stat st;
        if (strcmp(*inputs, "-") == 0 || stat(*inputs, &st) != 0) continue;
        if (st.st_dev == out->st_dev && st.st_ino == out->st_ino) {
            fprintf(stderr, "tracemill: refusing to write %s: it is the input %s\n", path, *inputs);
            return 1;
        }
    }
    return 0;
}

/* The file a device or FIFO gets as a stream, for a writer that needs a
 * named, seekable file: a temporary file copied over at close. */
static int open_special(const char *path, int named, cli_output *o) {
    o->special = 1;
    o->f = fopen(path, "wb");
    if (!o->f) return cli_output_error(path, errno);
    if (!named) return EXIT_OK;
    int fd = create_temp(NULL, 0600, &o->tmp);
    if (fd < 0) return cli_output_error(path, errno);
    close(fd);
    return EXIT_OK;
}

/* The descriptor /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N
 * names when this process has it open, else -1. */
static int named_descriptor(const char *path) {
    if (strcmp(path, "/dev/stdout") == 0) return fcntl(STDOUT_FILENO, F_GETFL) == -1 ? -1 : STDOUT_FILENO;
    if (strcmp(path, "/dev/stderr") == 0) return fcntl(STDERR_FILENO, F_GETFL) == -1 ? -1 : STDERR_FILENO;
    static const char *const dirs[] = {"/dev/fd/", "/proc/self/fd/"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        size_t n = strlen(dirs[i]);
        if (strncmp(path, dirs[i], n) != 0 || path[n] < '0' || path[n] > '9') continue;
        char *end;
        errno = 0;
        long fd = strtol(path + n, &end, 10);
        if (*end || errno || fd > INT_MAX || fcntl((int)fd, F_GETFL) == -1) return -1;
        return (int)fd;
    }
    return -1;
}

/* A descriptor the command was given (-o /dev/stdout) is written through
 * a copy of it, as a shell's redirection is: its link leads to what was
 * opened, which following it would replace (losing what `>>` appends to)
 * or not find at all (a pipe's "pipe:[N]"). */
static int open_descriptor(const char *path, int fd, int flags, cli_output *o) {
    if ((flags & CLI_OUT_BINARY) && isatty(fd)) {
        fprintf(stderr, "tracemill: refusing to write binary output to a terminal (use -o FILE)\n");
        return EXIT_USAGE;
    }
    o->special = 1;
    int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    if (copy < 0) return cli_output_error(path, errno);
    if (!(o->f = fdopen(copy, "wb"))) {
        int e = errno;
        close(copy);
        return cli_output_error(path, e);
    }
    if (!(flags & CLI_OUT_NAMED)) return EXIT_OK;
    int tmp = create_temp(NULL, 0600, &o->tmp);
    if (tmp < 0) return cli_output_error(path, errno);
    close(tmp);
    return EXIT_OK;
}

static int open_output(const char *path, int flags, const char *const *inputs, cli_output *o);

int cli_output_open(const char *path, int flags, const char *const *inputs, cli_output *o) {
    int rc = open_output(path, flags, inputs, o);
    if (rc != EXIT_OK) { /* nothing was written: release what the attempt holds */
        if (o->f && o->f != stdout) fclose(o->f);
        if (o->tmp) {
            unlink(o->tmp);
            free(o->tmp);
        }
        free(o->target);
        memset(o, 0, sizeof *o);
    }
    return rc;
}

static int open_output(const char *path, int flags, const char *const *inputs, cli_output *o) {
    memset(o, 0, sizeof *o);
    o->path = path;
    if (!path || strcmp(path, "-") == 0) {
        o->path = NULL;
        o->f = stdout;
        if ((flags & CLI_OUT_BINARY) && isatty(STDOUT_FILENO)) {
            fprintf(stderr, "tracemill: refusing to write binary output to a terminal (use -o FILE)\n");
            return EXIT_USAGE;
        }
        return EXIT_OK;
    }
    int fd = named_descriptor(path);
    if (fd >= 0) return open_descriptor(path, fd, flags, o);
    o->target = final_target(path);
    if (!o->target) return cli_output_error(path, errno);
    struct stat st;
    mode_t mode;
    if (stat(o->target, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return cli_output_error(path, EISDIR);
        if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return open_special(path, flags & CLI_OUT_NAMED, o);
        if (!S_ISREG(st.st_mode)) {
            fprintf(stderr, "tracemill: cannot write %s: not a regular file, character device or FIFO\n", path);
            return EXIT_IO;
        }
        if (is_an_input(path, &st, inputs)) return EXIT_USAGE;
        /* rename() would replace a file we may not write: refuse, as an
         * in-place write would (and, for root, when it has no write bit). */
        if (access(o->target, W_OK) != 0 || !(st.st_mode & 0222)) {
            fprintf(stderr, "tracemill: cannot write %s: the file is read-only\n", path);
            return EXIT_IO;
        }
        mode = st.st_mode & 07777;
    } else {
        mode_t mask = umask(0);
        umask(mask);
        mode = 0666 & ~mask;
    }
    fd = create_temp(o->target, mode, &o->tmp);
    if (fd < 0) return cli_output_error(path, errno);
    if (flags & CLI_OUT_NAMED) close(fd);
    else if (!(o->f = fdopen(fd, "wb"))) {
        int e = errno;
        close(fd);
        return cli_output_error(path, e);
    }
    return EXIT_OK;
}

/* Appends the temporary file's bytes to o->f (a device or FIFO). */
static int copy_temp(cli_output *o) {
    FILE *in = fopen(o->tmp, "rb");
    if (!in) return cli_output_error(o->path, errno);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, o->f) != n) break;
    int rc = ferror(in) ? cli_output_error(o->path, errno) : EXIT_OK;
    fclose(in);
    return rc;
}

int cli_output_close(cli_output *o, int rc) {
    if (o->special && o->tmp && rc == EXIT_OK) rc = copy_temp(o);
    if (o->f) {
        int failed = fflush(o->f) != 0 || ferror(o->f), e = errno;
        if (o->f != stdout && fclose(o->f) != 0 && !failed) failed = 1, e = errno;
        if (failed && rc == EXIT_OK) rc = cli_output_error(o->path, e);
    }
    if (o->tmp) {
        if (!o->special && rc == EXIT_OK && rename(o->tmp, o->target) != 0) rc = cli_output_error(o->path, errno);
        if (o->special || rc != EXIT_OK) unlink(o->tmp);
    }
    free(o->tmp);
    free(o->target);
    memset(o, 0, sizeof *o);
    return rc;
}

int cli_close_stdout(int rc) {
    int failed = fflush(stdout) != 0 || ferror(stdout), e = errno;
    /* EBADF from the close alone: stdout was closed before we ran and
     * nothing was written there (a write would have failed above). */
    if (fclose(stdout) != 0 && !failed && errno != EBADF) failed = 1, e = errno;
    /* A command that failed has said why; its output may be cut short. */
    return failed && rc == EXIT_OK ? cli_output_error(NULL, e) : rc;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "tracemill%s%s: ", cmd ? " " : "", cmd ? cmd : "");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nsee 'tracemill%s%s --help'\n", cmd ? " " : "", cmd ? cmd : "");
    return EXIT_USAGE;
}
