/*
 * cli_progress.c — the one progress line of long commands: on stderr, only
 * when stderr is a terminal and the work has run past a second, rewritten
 * in place from a SIGALRM timer and erased when the work ends. The handler
 * formats with write(2) only (async-signal-safe); the command names the
 * phase and, while reading a stream, the bytes so far.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static volatile sig_atomic_t active, shown;
static const char *volatile phase_name;
static volatile size_t phase_done, phase_total;
static struct timespec started;
static struct sigaction old_alarm;

/* Appends v in decimal. */
static size_t put_u64(char *p, uint64_t v) {
    char tmp[24];
    size_t n = 0;
    do tmp[n++] = (char)('0' + v % 10), v /= 10;
    while (v);
    for (size_t i = 0; i < n; i++) p[i] = tmp[n - 1 - i];
    return n;
}

static size_t put_str(char *p, const char *s) {
    size_t n = strlen(s);
    memcpy(p, s, n);
    return n;
}

/* Whole megabytes, kilobytes or bytes. */
static size_t put_size(char *p, uint64_t bytes) {
    int unit = bytes >= 1000000 ? 2 : bytes >= 1000 ? 1 : 0;
    size_t n = put_u64(p, bytes / (unit == 2 ? 1000000 : unit ? 1000 : 1));
    return n + put_str(p + n, unit == 2 ? " MB" : unit ? " kB" : " bytes");
}

static void on_alarm(int sig) {
    (void)sig;
    if (!active || !phase_name) return;
    int saved = errno;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    char line[160];
    size_t n = put_str(line, "\rtracemill: ");
    n += put_str(line + n, phase_name);
    size_t done = phase_done, total = phase_total;
    if (done || total) line[n++] = ' ';
    if (done) n += put_size(line + n, done);
    if (done && total) n += put_str(line + n, " of ");
    if (total) n += put_size(line + n, total);
    n += put_str(line + n, "... ");
    n += put_u64(line + n, (uint64_t)(now.tv_sec - started.tv_sec));
    n += put_str(line + n, " s\033[K");
    if (write(STDERR_FILENO, line, n) > 0) shown = 1;
    errno = saved;
}

void cli_progress_start(int quiet) {
    if (quiet || !isatty(STDERR_FILENO)) return;
    clock_gettime(CLOCK_MONOTONIC, &started);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART; /* reads and writes go on under the timer */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGALRM, &sa, &old_alarm) != 0) return;
    active = 1;
    /* Quiet for the first second: short work says nothing. */
    struct itimerval every = {{0, 500000}, {1, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
}

void cli_progress_phase(const char *name, size_t total) {
    phase_name = NULL; /* the handler skips a half-set phase */
    phase_done = 0;
    phase_total = total;
    phase_name = name;
}

void cli_progress_bytes(size_t done) { phase_done = done; }

void cli_progress_stop(void) {
    if (!active) return;
    struct itimerval off;
    memset(&off, 0, sizeof off);
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old_alarm, NULL);
    active = 0;
    if (shown && write(STDERR_FILENO, "\r\033[K", 4) < 0) return; /* erase the line */
    shown = 0;
}
