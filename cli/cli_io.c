/*
 * cli_io.c — input loading, output files, error reporting and shared
 * option parsing for the tracemill command. Files are mapped read-only so a
 * 10 GB trace costs page cache, not a copy; stdin, pipes and devices are
 * read into one growing buffer that stops at max_input_bytes. Output to a
 * regular file goes to OUT.tmp-PID first and is renamed into place only
 * when the whole document was written, so a rejected trace
 * never leaves a truncated file behind. Devices and pipes (/dev/null, a
 * FIFO) are written directly: renaming over them would replace the device.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
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
    tm_error err = {TM_ERR_LIMIT, max_bytes, NULL, ""};
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

int cli_report_error(const char *what, const tm_error *err) {
    const char *kind = err->reason ? err->reason : tm_status_str(err->code);
    fprintf(stderr, "tracemill: %s: %s at byte %llu: %s\n", what, kind, (unsigned long long)err->offset,
            err->message);
    if (err->code == TM_ERR_IO) return EXIT_IO;
    if (err->code == TM_ERR_INVALID_ARG) return EXIT_USAGE;
    return EXIT_REJECTED;
}

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
        if (*i + 1 >= argc || !cli_parse_u64(argv[*i + 1], &v) || v == 0) {
            fprintf(stderr, "tracemill: %s needs a positive number\n", arg);
            return -1;
        }
        ++*i;
        memcpy((char *)&opts->limits + flags[k].offset, &v, sizeof v);
        return 1;
    }
    return 0;
}

int cli_output_open(const char *path, int binary, cli_output *o) {
    memset(o, 0, sizeof *o);
    o->path = path;
    o->f = stdout;
    if (!path || strcmp(path, "-") == 0) {
        if (binary && isatty(STDOUT_FILENO)) {
            fprintf(stderr, "tracemill: refusing to write binary output to a terminal (use -o FILE)\n");
            return EXIT_USAGE;
        }
        return EXIT_OK;
    }
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (S_ISDIR(st.st_mode)) {
            fprintf(stderr, "tracemill: %s is a directory\n", path);
            return EXIT_IO;
        }
        o->special = 1;
        o->f = fopen(path, "wb");
        if (!o->f) {
            fprintf(stderr, "tracemill: cannot open %s: %s\n", path, strerror(errno));
            return EXIT_IO;
        }
        return EXIT_OK;
    }
    size_t n = strlen(path) + 32;
    o->tmp = malloc(n);
    if (!o->tmp) {
        fprintf(stderr, "tracemill: out of memory\n");
        return EXIT_IO;
    }
    snprintf(o->tmp, n, "%s.tmp-%ld", path, (long)getpid());
    o->f = fopen(o->tmp, "wb");
    if (!o->f) {
        fprintf(stderr, "tracemill: cannot create %s: %s\n", o->tmp, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return EXIT_IO;
    }
    return EXIT_OK;
}

int cli_output_close(cli_output *o, int rc) {
    if (!o->f) return rc;
    if (fflush(o->f) != 0 && rc == EXIT_OK) {
        fprintf(stderr, "tracemill: cannot write %s: %s\n", o->path ? o->path : "standard output", strerror(errno));
        rc = EXIT_IO;
    }
    if (o->f != stdout && fclose(o->f) != 0 && rc == EXIT_OK) {
        fprintf(stderr, "tracemill: cannot write %s: %s\n", o->path, strerror(errno));
        rc = EXIT_IO;
    }
    if (o->tmp) {
        if (rc == EXIT_OK && rename(o->tmp, o->path) != 0) {
            fprintf(stderr, "tracemill: cannot rename %s to %s: %s\n", o->tmp, o->path, strerror(errno));
            rc = EXIT_IO;
        }
        if (rc != EXIT_OK) remove(o->tmp);
        free(o->tmp);
    }
    memset(o, 0, sizeof *o);
    return rc;
}
