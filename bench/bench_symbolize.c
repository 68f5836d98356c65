/*
 * bench_symbolize.c — times tm_symbolize on a synthetic trace of N distinct
 * pcs (default 100000) spread evenly over the executable segments of 20
 * ELF libraries (given, or the first 20 with a build id under
 * /usr/lib/x86_64-linux-gnu), found at their own paths; then binutils'
 * `addr2line -i -f` and `llvm-symbolizer` (when installed) on the same pcs,
 * one process per library, for comparison. Prints the three times and what
 * tm_symbolize found.
 *
 * usage: bench_symbolize [-n PCS] [--only-tracemill] [LIB...]
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "perfetto/fields.h"
#include "trace_builder.h"
#include "tracemill.h"

enum { MAX_LIBS = 20 };

typedef struct lib {
    char path[512];
    uint8_t id[64];
    size_t id_len;
    uint64_t lo, hi; /* the executable PT_LOAD, as ELF virtual addresses */
} lib;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int load(const char *path, lib *l) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    int ok = 0;
    const void *id;
    ssize_t n = e ? dwelf_elf_gnu_build_id(e, &id) : -1;
    size_t phnum;
    if (n > 0 && n <= 64 && elf_getphdrnum(e, &phnum) == 0) {
        for (size_t i = 0; i < phnum; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X) && ph.p_memsz > 4096) {
                snprintf(l->path, sizeof l->path, "%s", path);
                memcpy(l->id, id, (size_t)n);
                l->id_len = (size_t)n;
                l->lo = ph.p_vaddr, l->hi = ph.p_vaddr + ph.p_memsz;
                ok = 1;
                break;
            }
        }
    }
    if (e) elf_end(e);
    close(fd);
    return ok;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static size_t default_libs(lib *libs) {
    static const char dir[] = "/usr/lib/x86_64-linux-gnu";
    struct dirent **ents;
    int n = scandir(dir, &ents, NULL, by_name);
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, ents[i]->d_name);
        if (k < MAX_LIBS && strstr(ents[i]->d_name, ".so.") && lstat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            st.st_size < (64 << 20) && load(path, &libs[k]))
            k++;
        free(ents[i]);
    }
    free(ents);
    return k;
}

static int count_write(void *ctx, const void *data, size_t len) {
    (void)data;
    *(size_t *)ctx += len;
    return 0;
}

/* Seconds a tool takes over every library's pcs (addresses on stdin). */
static double tool_time(const char *fmt, const lib *libs, size_t n_libs, const uint64_t *const *pcs, size_t per) {
    double t = 0;
    for (size_t i = 0; i < n_libs; i++) {
        char list[] = "/tmp/bench_symbolize_XXXXXX";
        int fd = mkstemp(list);
        FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
        if (!f) return -1;
        for (size_t k = 0; k < per; k++) fprintf(f, "0x%llx\n", (unsigned long long)pcs[i][k]);
        fclose(f);
        char cmd[2048];
        snprintf(cmd, sizeof cmd, fmt, libs[i].path, list);
        double t0 = now();
        int rc = system(cmd);
        t += now() - t0;
        unlink(list);
        if (rc != 0) return -1;
    }
    return t;
}

int main(int argc, char **argv) {
    size_t total = 100000;
    int tools = 1;
    lib libs[MAX_LIBS];
    size_t n_libs = 0;
    elf_version(EV_CURRENT);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) total = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--only-tracemill") == 0) tools = 0;
        else if (n_libs < MAX_LIBS && load(argv[i], &libs[n_libs])) n_libs++;
        else fprintf(stderr, "bench_symbolize: %s: no build id or executable segment, skipped\n", argv[i]);
    }
    if (!n_libs) n_libs = default_libs(libs);
    if (!n_libs || !total) {
        fprintf(stderr, "bench_symbolize: no libraries\n");
        return 1;
    }
    size_t per = total / n_libs;
    uint64_t *pcs[MAX_LIBS];
    tb_buf t = {0};
    tb_standard_clocks(&t, 1);
    size_t pkt = tb_packet_open(&t, 1, TB_NO_TS, TB_SEQ_CLEARED);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    uint64_t frame = 0;
    for (size_t i = 0; i < n_libs; i++) {
        tb_interned_string(&t, TM_PF_INTERNED_MAPPING_PATHS, 1 + i, libs[i].path + 1, strlen(libs[i].path + 1));
        tb_interned_string(&t, TM_PF_INTERNED_BUILD_IDS, 1 + i, libs[i].id, libs[i].id_len);
        const uint64_t seg[1] = {1 + i};
        tb_mapping(&t, 1 + i, 1 + i, 0x10000000ull * (i + 1), 0x10000000ull * (i + 1) + (libs[i].hi - libs[i].lo), seg, 1);
        pcs[i] = malloc(per * sizeof *pcs[i]);
        uint64_t step = (libs[i].hi - libs[i].lo) / per ? (libs[i].hi - libs[i].lo) / per : 1;
        for (size_t k = 0; k < per; k++) {
            pcs[i][k] = libs[i].lo + k * step;
            tb_frame(&t, ++frame, 0, 1 + i, pcs[i][k]);
        }
    }
    /* callstacks of 10 frames, one sample each */
    uint64_t stacks = 0;
    for (uint64_t f = 1; f + 9 <= frame; f += 10) {
        uint64_t fr[10];
        for (int k = 0; k < 10; k++) fr[k] = f + (uint64_t)k;
        tb_callstack(&t, ++stacks, fr, 10, 1);
    }
    tb_close(&t, in);
    tb_close(&t, pkt);
    for (uint64_t s = 1; s <= stacks; s++) tb_perf_sample(&t, 1, TB_BOOT0 + s * 1000, 7, 7, s, TB_SEQ_NEEDS);

    size_t written = 0;
    tm_sink sink = {.write = count_write, .ctx = &written};
    tm_symbolize_stats st;
    tm_error err;
    double t0 = now();
    if (tm_symbolize(t.data, t.len, NULL, NULL, &sink, &st, &err) != TM_OK) {
        fprintf(stderr, "bench_symbolize: %s\n", err.message);
        return 1;
    }
    double ours = now() - t0;
    printf("tm_symbolize: %zu pcs in %zu libraries: %.2f s (%llu symbolized, %llu with file and line, %llu inlined "
           "frames; %llu of %llu mappings found)\n",
           per * n_libs, n_libs, ours, (unsigned long long)st.frames_symbolized,
           (unsigned long long)st.frames_with_lines, (unsigned long long)st.inlined_frames,
           (unsigned long long)st.mappings_symbolized, (unsigned long long)st.mappings);
    double a2l = !tools ? -1 : tool_time("addr2line -i -f -e %s < %s > /dev/null", libs, n_libs, (const uint64_t *const *)pcs, per);
    if (a2l >= 0) printf("addr2line -i -f: %.2f s\n", a2l);
    if (tools && system("command -v llvm-symbolizer > /dev/null 2>&1") == 0) {
        double llvm = tool_time("llvm-symbolizer --inlining --obj=%s < %s > /dev/null", libs, n_libs,
                                (const uint64_t *const *)pcs, per);
        if (llvm >= 0) printf("llvm-symbolizer: %.2f s\n", llvm);
    }
    for (size_t i = 0; i < n_libs; i++) free(pcs[i]);
    tb_free(&t);
    return 0;
}
