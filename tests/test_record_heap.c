/*
 * test_record_heap.c — `tracemill record --heap` end to end: the test
 * programs record_heap_target (C) and record_heap_target_cxx (operator new
 * and delete) are recorded through the CLI, and the heap profile is read
 * back from the trace with the wire reader (heap_view.c): each allocation
 * site's share of the bytes against what the program really allocated, a
 * site that frees everything retaining exactly nothing, leaks within 10 %,
 * blocks of the interval or more counted exactly, threads, fork children, allocations before main, the program's own
 * results unchanged, memory snapshots, chunks that each hold a whole
 * profile, libraries loaded and closed while recording, and the same numbers
 * through `tracemill query`.
 *
 * Paths come from the build: TM_CLI, TM_RECORD_PRELOAD, TM_RECORD_HEAP_TARGET,
 * TM_RECORD_HEAP_TARGET_CXX (absent without a C++ compiler).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "heap_view.h"
#include "tracemill.h"
#include "tutil.h"

#define RUN_TIMEOUT_S 60

/* The recorder names every frame itself (TRACEMILL_RECORD_NAME_FRAMES, not
 * only those no file can name later): heap_view reads the names the
 * recorder interned, independently of the library's symbolizer. */
static void setup(void) {
    cr_assert_not_null(tu_test_dir_make("tm_record_heap"));
    cr_assert_eq(setenv("TRACEMILL_RECORD_NAME_FRAMES", "1", 1), 0);
}

static void teardown(void) { cr_assert_eq(tu_test_dir_remove(), 0); }

TestSuite(record_heap, .init = setup, .fini = teardown, .timeout = 120);

static char *path_in_dir(const char *name) { return tu_test_path(name); }

/* What one recorded run left: its exit status, stdout, stderr and trace. */
typedef struct run_result {
    int status;
    char *out, *err, *trace;
    size_t trace_len;
    heap_view heap;
} run_result;

/* Runs argv (NULL-terminated) with stdout and stderr into files of the test
 * directory; a hang past RUN_TIMEOUT_S fails the test. */
static int run(char *const argv[], const char *out_path, const char *err_path) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        setpgid(0, 0);
        tu_asan_recorded_child_env();
        if (!freopen(out_path, "w", stdout) || !freopen(err_path, "w", stderr)) _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    int status = 0;
    if (tu_wait_child(pid, RUN_TIMEOUT_S, &status) != 0)
        cr_assert_fail("%s hung (killed after %d s)", argv[0], RUN_TIMEOUT_S);
    return status;
}

/* `tracemill record --heap [extra...] -o DIR/NAME -- TARGET MODE`, and the
 * heap profile read back (the trace must exist and hold one); unsymbolized
 * (--no-symbolize), so that frames are named by function alone. */
static run_result record_heap(const char *target, const char *mode, const char *name, char *const extra[]) {
    run_result r = {0};
    char *trace = path_in_dir(name), *out = path_in_dir("stdout"), *err = path_in_dir("stderr");
    char *argv[32];
    size_t n = 0;
    argv[n++] = TM_CLI, argv[n++] = "record", argv[n++] = "--preload", argv[n++] = TM_RECORD_PRELOAD;
    argv[n++] = "--heap", argv[n++] = "--no-symbolize";
    for (size_t i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
    argv[n++] = "-o", argv[n++] = trace, argv[n++] = "--", argv[n++] = (char *)target;
    if (mode) argv[n++] = (char *)mode;
    argv[n] = NULL;
    r.status = run(argv, out, err);
    r.out = tu_read_file(out, NULL);
    r.err = tu_read_file(err, NULL);
    cr_assert(r.out && r.err);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "record exited %d: %s%s", r.status, r.err, r.out);
    r.trace = tu_read_file(trace, &r.trace_len);
    cr_assert_not_null(r.trace, "no trace: %s", r.err);
    cr_assert_eq(hv_read(r.trace, r.trace_len, &r.heap), 0, "heap profile: %s", r.heap.why);
    cr_assert_geq(r.heap.dumps, 1, "no complete heap dump");
    free(trace), free(out), free(err);
    return r;
}

static void release(run_result *r) {
    hv_free(&r->heap);
    free(r->out), free(r->err), free(r->trace);
}

static uint64_t truth(const char *out, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *p = strstr(out, pat);
    cr_assert_not_null(p, "no %s in the program's output: %s", key, out);
    return strtoull(p + strlen(pat), NULL, 10);
}

/* Bytes allocated and retained under each function of names (SQL IN list)
 * as `tracemill query` sees the trace: Trace Processor's
 * heap_profile_allocation rows over the callsites that hold the frame. */
typedef struct sql_site {
    char name[32];
    double alloc, retained;
} sql_site;

static size_t query_sites(const char *trace, const char *names, sql_site *out, size_t cap) {
    char *cmd = NULL;
    cr_assert_gt(asprintf(&cmd,
                          "%s query %s \"with recursive anc(cs, id) as (select id, id from stack_profile_callsite "
                          "union all select anc.cs, c.parent_id from anc join stack_profile_callsite c "
                          "on c.id = anc.id where c.parent_id is not null) "
                          "select f.name, sum(max(a.size, 0)), sum(a.size) "
                          "from heap_profile_allocation a join anc on anc.cs = a.callsite_id "
                          "join stack_profile_callsite c on c.id = anc.id "
                          "join stack_profile_frame f on f.id = c.frame_id "
                          "where f.name in (%s) group by f.name\"",
                          TM_CLI, trace, names),
                 0);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[256];
    size_t n = 0;
    cr_assert_not_null(fgets(line, sizeof line, p)); /* the header */
    while (n < cap && fgets(line, sizeof line, p)) {
        sql_site *s = &out[n];
        if (sscanf(line, "%31[^,],%lf,%lf", s->name, &s->alloc, &s->retained) == 3) n++;
    }
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    free(cmd);
    return n;
}

static const sql_site *sql_site_named(const sql_site *s, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s[i].name, name) == 0) return &s[i];
    cr_assert_fail("no heap_profile_allocation rows under %s", name);
    return NULL;
}

/* Bytes per function of names[] in `tracemill convert -f folded --value V`
 * (a stack counts for every function of names it holds). */
static void folded_bytes(const char *trace, const char *value, const char *const names[], double *bytes, size_t n) {
    char *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s convert -f folded --value %s %s", TM_CLI, value, trace), 0);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    memset(bytes, 0, n * sizeof *bytes);
    char line[4096];
    while (fgets(line, sizeof line, p)) {
        char *space = strrchr(line, ' ');
        cr_assert_not_null(space, "not a folded line: %s", line);
        *space = 0;
        for (size_t i = 0; i < n; i++)
            if (hv_stack_has(line, names[i])) bytes[i] += strtod(space + 1, NULL);
    }
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    free(cmd);
}

/* The largest value of a process counter track (mem.rss.watermark, ...) in SQL. */
static double counter_max(const char *trace, const char *track) {
    char *cmd = NULL;
    cr_assert_gt(asprintf(&cmd,
                          "%s query %s \"select max(c.value) from counter c join process_counter_track t "
                          "on c.track_id = t.id where t.name = '%s'\"",
                          TM_CLI, trace, track),
                 0);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[256];
    double v = -1;
    if (fgets(line, sizeof line, p) && fgets(line, sizeof line, p)) v = strtod(line, NULL);
    cr_assert_eq(pclose(p), 0, "%s", cmd);
    free(cmd);
    return v;
}

static void log_sites(const heap_view *v) {
    for (size_t i = 0; i < v->n_sites; i++)
        cr_log_info("site %s: %llu allocated, %llu freed (%llu/%llu)", v->sites[i].stack,
                    (unsigned long long)v->sites[i].alloc, (unsigned long long)v->sites[i].freed,
                    (unsigned long long)v->sites[i].alloc_count, (unsigned long long)v->sites[i].free_count);
}

/* The retained bytes of name's sites are within 10 % of want. */
static void expect_retained_near(const heap_view *v, const char *name, uint64_t want) {
    hv_totals t = hv_sum(v, name);
    double retained = (double)(t.alloc - t.freed);
    cr_expect(fabs(retained - (double)want) <= 0.10 * (double)want, "%s retains %.0f bytes, the program %llu", name,
              retained, (unsigned long long)want);
}

/* Shares of site_a/b/c's bytes within 3 points of the truth, site_freed
 * retaining exactly 0, site_leak within 10 %; the trace also holds memory
 * snapshots and decodes in tracemill with its CPU samples. */
Test(record_heap, sites_have_their_shares) {
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "sites", "sites.pftrace", NULL);
    const heap_view *v = &r.heap;
    log_sites(v);
    cr_expect_eq(v->interval, 4096);
    cr_expect_eq(v->from_startup, 1);
    cr_expect_eq(v->pid > 0, 1);
    uint64_t a = truth(r.out, "a"), b = truth(r.out, "b"), c = truth(r.out, "c"), leak = truth(r.out, "leak");
    hv_totals ta = hv_sum(v, "site_a"), tb = hv_sum(v, "site_b"), tc = hv_sum(v, "site_c");
    double all = (double)(ta.alloc + tb.alloc + tc.alloc), real = (double)(a + b + c);
    cr_assert_gt(all, 0, "no bytes at site_a/b/c");
    double sa = 100 * ta.alloc / all, sb = 100 * tb.alloc / all, sc = 100 * tc.alloc / all;
    double wa = 100 * a / real, wb = 100 * b / real, wc = 100 * c / real;
    cr_log_info("shares a %.2f%% (%.2f), b %.2f%% (%.2f), c %.2f%% (%.2f); %llu samples", sa, wa, sb, wb, sc, wc,
                (unsigned long long)v->heap_samples);
    cr_expect(fabs(sa - wa) < 3 && fabs(sb - wb) < 3 && fabs(sc - wc) < 3,
              "shares %.1f/%.1f/%.1f, truth %.1f/%.1f/%.1f", sa, sb, sc, wa, wb, wc);
    /* The bytes themselves are unbiased estimates too. */
    cr_expect(fabs(all - real) < 0.05 * real, "%.0f bytes estimated at a/b/c, %.0f allocated", all, real);
    /* All freed at exit (the program drains its rings before it exits). */
    cr_expect_eq(ta.alloc, ta.freed);
    hv_totals freed = hv_sum(v, "site_freed");
    cr_expect_gt(freed.alloc_count, 0, "site_freed was never sampled");
    cr_expect_eq(freed.alloc - freed.freed, 0, "site_freed retains %llu bytes",
                 (unsigned long long)(freed.alloc - freed.freed));
    cr_expect_eq(freed.alloc_count, freed.free_count);
    expect_retained_near(v, "site_leak", leak);
    /* Every site's stack reaches the program's entry (main tail-calls the mode). */
    for (size_t i = 0; i < v->n_sites; i++)
        if (hv_stack_has(v->sites[i].stack, "site_a") || hv_stack_has(v->sites[i].stack, "site_leak"))
            cr_expect(strncmp(v->sites[i].stack, "_start;", 7) == 0 && hv_stack_has(v->sites[i].stack, "mode_sites"),
                      "not rooted: %s", v->sites[i].stack);
    cr_expect_eq(v->unwind_errors, 0);
    /* --heap writes ProcessStats every second and at the end. */
    cr_expect_geq(v->mem_snapshots, 1);
    cr_expect_geq(v->max_hwm_kb, leak / 1024, "peak RSS %llu kB below the leak", (unsigned long long)v->max_hwm_kb);
    cr_expect(strstr(r.err, "allocations sampled"), "no heap summary: %s", r.err);
    /* The same through tracemill's SQL tables (Trace Processor's reading). */
    char *trace = path_in_dir("sites.pftrace");
    sql_site q[8];
    size_t nq = query_sites(trace, "'site_a','site_b','site_c','site_freed','site_leak'", q, 8);
    free(trace);
    const sql_site *qa = sql_site_named(q, nq, "site_a"), *qb = sql_site_named(q, nq, "site_b"),
                   *qc = sql_site_named(q, nq, "site_c"), *qf = sql_site_named(q, nq, "site_freed"),
                   *ql = sql_site_named(q, nq, "site_leak");
    double qall = qa->alloc + qb->alloc + qc->alloc;
    cr_expect(fabs(100 * qa->alloc / qall - wa) < 3 && fabs(100 * qb->alloc / qall - wb) < 3 &&
                  fabs(100 * qc->alloc / qall - wc) < 3,
              "SQL shares %.1f/%.1f/%.1f", 100 * qa->alloc / qall, 100 * qb->alloc / qall, 100 * qc->alloc / qall);
    cr_expect(qf->alloc > 0 && qf->retained == 0, "SQL: site_freed %.0f allocated, %.0f retained", qf->alloc,
              qf->retained);
    cr_expect(fabs(ql->retained - (double)leak) <= 0.1 * (double)leak, "SQL: site_leak retains %.0f", ql->retained);
    /* ... through the profile model's memory values (every exporter's) ... */
    static const char *const names[] = {"site_a", "site_b", "site_c", "site_freed", "site_leak"};
    double fa[5], fi[5];
    char *trace_path = path_in_dir("sites.pftrace");
    folded_bytes(trace_path, "alloc_space", names, fa, 5);
    folded_bytes(trace_path, "inuse_space", names, fi, 5);
    double fall = fa[0] + fa[1] + fa[2];
    cr_expect(fabs(100 * fa[0] / fall - wa) < 3 && fabs(100 * fa[1] / fall - wb) < 3 &&
                  fabs(100 * fa[2] / fall - wc) < 3,
              "alloc_space shares %.1f/%.1f/%.1f", 100 * fa[0] / fall, 100 * fa[1] / fall, 100 * fa[2] / fall);
    cr_expect(fa[3] > 0 && fi[3] == 0, "site_freed: alloc_space %.0f, inuse_space %.0f", fa[3], fi[3]);
    cr_expect(fabs(fi[4] - (double)leak) <= 0.1 * (double)leak, "inuse_space of site_leak: %.0f", fi[4]);
    /* ... pprof takes it ... */
    char *pprof = path_in_dir("sites.pb.gz"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s convert -f pprof --value inuse_space -o %s %s", TM_CLI, pprof, trace_path), 0);
    cr_expect_eq(system(cmd), 0, "%s", cmd);
    size_t pprof_len = 0;
    char *pprof_bytes = tu_read_file(pprof, &pprof_len);
    cr_expect(pprof_bytes && pprof_len > 100, "no pprof profile");
    free(pprof_bytes), free(cmd), free(pprof);
    /* ... and the ProcessStats are Trace Processor's process counter tracks. */
    cr_expect_geq(counter_max(trace_path, "mem.rss.watermark"), (double)leak, "peak RSS below the leak");
    cr_expect_gt(counter_max(trace_path, "mem.rss.anon"), 0);
    free(trace_path);
    /* The CPU half of the same trace. */
    tm_trace *t = NULL;
    tm_error err;
    cr_assert_eq(tm_trace_parse(r.trace, r.trace_len, NULL, &t, &err), TM_OK, "%s", err.message);
    cr_expect_eq(tm_trace_get_stats(t)->data_losses, 0);
    tm_trace_free(t);
    release(&r);
}

Test(record_heap, threads_are_profiled) {
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "threads", "threads.pftrace", NULL);
    log_sites(&r.heap);
    expect_retained_near(&r.heap, "thread_leak", truth(r.out, "leak"));
    hv_totals churn = hv_sum(&r.heap, "thread_site");
    cr_expect_gt(churn.alloc_count, 1000);
    cr_expect_eq(churn.alloc, churn.freed);
    for (size_t i = 0; i < r.heap.n_sites; i++)
        if (hv_stack_has(r.heap.sites[i].stack, "thread_leak"))
            cr_expect(hv_stack_has(r.heap.sites[i].stack, "start_thread"), "not rooted: %s", r.heap.sites[i].stack);
    release(&r);
}

/* An allocation of the interval or more is always sampled, at its own size,
 * whatever the countdown left by the small ones before it: at an interval
 * between the two sizes, large_leak's bytes and count are exact (a fast
 * path that let a large block through would miss about a fifth of them). */
Test(record_heap, blocks_of_the_interval_or_more_are_exact) {
    char *extra[] = {"--heap-interval", "65536", NULL};
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "large", "large.pftrace", extra);
    log_sites(&r.heap);
    cr_expect_eq(r.heap.interval, 65536);
    uint64_t want = truth(r.out, "large");
    hv_totals large = hv_sum(&r.heap, "large_leak");
    cr_expect_eq(large.alloc, want, "large_leak: %llu bytes sampled of %llu", (unsigned long long)large.alloc,
                 (unsigned long long)want);
    cr_expect_eq(large.alloc_count, want / 100000);
    cr_expect_eq(large.freed, 0);
    hv_totals small = hv_sum(&r.heap, "small_churn");
    cr_expect_gt(small.alloc_count, 0, "small_churn was never sampled");
    cr_expect_eq(small.alloc, small.freed);
    release(&r);
}

/* The recorder's own threads (the collector, which may start before the
 * heap profile and then wrote the last dump) are never sampled: with every
 * byte sampled, a short run's profile holds the program's stacks only. It
 * held collector_main's in most such runs before. */
Test(record_heap, the_recorders_own_threads_are_never_sampled) {
    char *extra[] = {"--heap-interval", "1", NULL};
    for (int k = 0; k < 5; k++) {
        run_result r = record_heap(TM_RECORD_HEAP_TARGET, "large", "own.pftrace", extra);
        for (size_t i = 0; i < r.heap.n_sites; i++) {
            const char *stack = r.heap.sites[i].stack;
            cr_expect(!strstr(stack, "collector_main") && !strstr(stack, "uploader_main") && !strstr(stack, "tmr_"),
                      "run %d: the recorder's allocation was sampled: %s", k, stack);
        }
        cr_expect_gt(hv_sum(&r.heap, "large_leak").alloc, 0, "run %d: large_leak was not sampled", k);
        release(&r);
    }
}

/* A program that takes SIGPROF for itself once recorded (GNU sort's
 * cleanup handler, which restores the default action and raises the signal
 * again) died of the recorder's first timer signal (exit 128 + SIGPROF):
 * the timers now go before its handler comes, so it runs as without the
 * recorder, record says why its CPU time was not sampled, and the trace
 * holds its heap profile. */
Test(record_heap, a_program_taking_sigprof_runs_on) {
    char *trace = path_in_dir("kept.pftrace"), *out = path_in_dir("stdout"), *err = path_in_dir("stderr");
    char *argv[] = {TM_CLI, "record", "--preload", TM_RECORD_PRELOAD, "--heap", "--no-symbolize", "-o", trace, "--",
                    TM_RECORD_HEAP_TARGET, "sigprof", NULL};
    int status = run(argv, out, err);
    char *said = tu_read_file(err, NULL), *printed = tu_read_file(out, NULL);
    cr_assert(said && printed);
    cr_expect(strstr(printed, "not killed"), "the program died: status %#x: %s", status, said);
    cr_expect(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %#x: %s", status, said);
    cr_expect(strstr(said, "took SIGPROF for itself") && strstr(said, "--backend perf"), "%s", said);
    size_t len = 0;
    char *bytes = tu_read_file(trace, &len);
    heap_view heap = {0};
    cr_assert_not_null(bytes, "no trace: %s", said);
    cr_expect_eq(hv_read(bytes, len, &heap), 0, "heap profile: %s", heap.why);
    cr_expect_geq(heap.dumps, 1, "no complete heap dump");
    hv_free(&heap);
    free(bytes), free(said), free(printed), free(trace), free(out), free(err);
}

/* More live samples than the profiler can track (every byte sampled, 1.2
 * million blocks kept): the ones it loses are said in the trace itself, as
 * dumps with loss (heapprofd's buffer_overran), not only on stderr. */
Test(record_heap, samples_lost_for_room_are_marked_in_the_trace) {
    char *extra[] = {"--heap-interval", "1", NULL};
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "many", "many.pftrace", extra);
    cr_expect(strstr(r.err, "for lack of room") && !strstr(r.err, " 0 for lack of room"), "%s", r.err);
    char *trace = path_in_dir("many.pftrace"), *cmd = NULL, *report = path_in_dir("report.json");
    cr_assert_gt(asprintf(&cmd, "%s convert -f report -o %s %s", TM_CLI, report, trace), 0);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char *text = tu_read_file(report, NULL);
    cr_assert_not_null(text);
    const char *at = strstr(text, "\"dumps_with_loss\":");
    cr_expect(at && atoi(at + strlen("\"dumps_with_loss\":")) >= 1, "no dump with loss: %.400s", at ? at : text);
    free(text), free(cmd), free(trace), free(report);
    release(&r);
}

/* A stack deeper than --max-depth keeps its innermost frames under a
 * "[truncated]" root, as CPU samples do, whether the profiler's memo of
 * unwound stacks could have held it (--max-depth 20) or not (the default);
 * a shallow one is whole. */
Test(record_heap, stacks_deeper_than_max_depth_are_marked_truncated) {
    char *depth20[] = {"--max-depth", "20", NULL};
    char *const *extras[] = {NULL, depth20};
    for (size_t k = 0; k < 2; k++) {
        run_result r = record_heap(TM_RECORD_HEAP_TARGET, "deep", "deep.pftrace", extras[k]);
        size_t deep = 0, shallow = 0;
        for (size_t i = 0; i < r.heap.n_sites; i++) {
            const char *stack = r.heap.sites[i].stack;
            if (strstr(stack, "deep_site")) {
                deep++;
                cr_expect(strncmp(stack, "[truncated];", 12) == 0, "%s: deep stack not marked: %.200s",
                          k ? "--max-depth 20" : "default", stack);
            }
            if (strstr(stack, "shallow_site")) {
                shallow++;
                cr_expect(!strstr(stack, "[truncated]"), "a shallow stack marked: %s", stack);
            }
        }
        cr_expect(deep > 0 && shallow > 0, "deep_site %zu, shallow_site %zu sites", deep, shallow);
        release(&r);
    }
}

/* Builds DIR/libplug.so from lib_source and DIR/host from host_source (a
 * printf format whose %s is the library's path); their paths in *lib and
 * *host. */
static void build_plugin(const char *lib_source, const char *host_source, char **lib, char **host) {
    char *lib_c = path_in_dir("plug.c"), *main_c = path_in_dir("host.c"), *cmd = NULL;
    *lib = path_in_dir("libplug.so"), *host = path_in_dir("host");
    FILE *f = fopen(lib_c, "w");
    cr_assert_not_null(f);
    fputs(lib_source, f);
    fclose(f);
    f = fopen(main_c, "w");
    cr_assert_not_null(f);
    fprintf(f, host_source, *lib);
    fclose(f);
    cr_assert_gt(
        asprintf(&cmd, "cc -O1 -g -shared -fPIC -o %s %s && cc -O1 -g -o %s %s -ldl", *lib, lib_c, *host, main_c), 0);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    free(cmd), free(lib_c), free(main_c);
}

static const char plug_alloc_source[] = "#include <stdlib.h>\n"
                                        "__attribute__((noinline)) void *plug_alloc(size_t n) {\n"
                                        "    void *p = malloc(n);\n"
                                        "    __asm__ volatile(\"\" : \"+r\"(p));\n"
                                        "    return p;\n"
                                        "}\n";

/* A library the program loads with dlopen after recording began, and
 * allocates from, is named in the heap profile even when the program ends
 * at once (within the maps' re-read throttle): the maps are read again
 * when new stacks are dumped. */
Test(record_heap, a_library_loaded_at_run_time_is_named) {
    char *lib, *host, *trace = path_in_dir("plug.pftrace"), *cmd = NULL;
    build_plugin(plug_alloc_source,
                 "#include <dlfcn.h>\n"
                 "#include <stdlib.h>\n"
                 "int main(void) {\n"
                 "    void *h = dlopen(\"%s\", RTLD_NOW);\n"
                 "    if (!h) return 3;\n"
                 "    void *(*plug_alloc)(size_t) = (void *(*)(size_t))dlsym(h, \"plug_alloc\");\n"
                 "    for (int i = 0; i < 20000; i++) free(plug_alloc(1000));\n"
                 "    return 0;\n"
                 "}\n",
                 &lib, &host);
    for (int k = 0; k < 3; k++) {
        cr_assert_gt(asprintf(&cmd, "%s record --preload %s --heap -o %s -- %s 2>/dev/null && %s convert -f folded "
                                    "--value alloc_space %s | grep -q plug_alloc",
                              TM_CLI, TM_RECORD_PRELOAD, trace, host, TM_CLI, trace),
                     0);
        tu_asan_recorded_child_env();
        cr_expect_eq(system(cmd), 0, "run %d: plug_alloc is not named: %s", k, cmd);
        free(cmd);
    }
    free(lib), free(host), free(trace);
}

/* A library closed with dlclose before the program ends keeps its names:
 * the blocks it allocated and kept (named at the heap dump, after the
 * close), and the CPU samples taken in it shortly before the close (drained
 * after it, without the dlclose hook). */
Test(record_heap, a_library_closed_before_the_end_keeps_its_names) {
    char *lib, *host, *trace = path_in_dir("closed.pftrace"), *cmd = NULL;
    char lib_source[1024];
    snprintf(lib_source, sizeof lib_source,
             "%s__attribute__((noinline)) double plug_spin(long n) {\n"
             "    double x = 0;\n"
             "    for (long i = 0; i < n; i++) x += (double)i * 0.5;\n"
             "    return x;\n"
             "}\n",
             plug_alloc_source);
    build_plugin(lib_source,
                 "#include <dlfcn.h>\n"
                 "#include <stdlib.h>\n"
                 "int main(void) {\n"
                 "    volatile double y = 0;\n"
                 "    for (int round = 0; round < 5; round++) {\n"
                 "        void *h = dlopen(\"%s\", RTLD_NOW);\n"
                 "        if (!h) return 3;\n"
                 "        void *(*plug_alloc)(size_t) = (void *(*)(size_t))dlsym(h, \"plug_alloc\");\n"
                 "        double (*plug_spin)(long) = (double (*)(long))dlsym(h, \"plug_spin\");\n"
                 "        for (int i = 0; i < 2000; i++) plug_alloc(1000);\n"
                 "        y += plug_spin(30000000);\n"
                 "        dlclose(h);\n"
                 "        for (long i = 0; i < 30000000; i++) y += (double)i * 0.25;\n"
                 "    }\n"
                 "    return y < 0;\n"
                 "}\n",
                 &lib, &host);
    cr_assert_gt(asprintf(&cmd, "%s record --preload %s --backend signal --heap -o %s -- %s 2>/dev/null", TM_CLI,
                          TM_RECORD_PRELOAD, trace, host),
                 0);
    tu_asan_recorded_child_env();
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    free(cmd);
    const char *values[] = {"inuse_space", "samples"};
    for (int v = 0; v < 2; v++) {
        char *folded = path_in_dir("closed.folded");
        cr_assert_gt(asprintf(&cmd, "%s convert -f folded --value %s -o %s %s", TM_CLI, values[v], folded, trace), 0);
        cr_assert_eq(system(cmd), 0, "%s", cmd);
        free(cmd);
        char *text = tu_read_file(folded, NULL);
        cr_assert_not_null(text);
        cr_expect(strstr(text, v ? "plug_spin" : "plug_alloc"), "%s: the library's function is not named:\n%s",
                  values[v], text);
        for (char *line = text; *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : line + strlen(line))
            cr_expect(strncmp(strstr(line, ";0x") ? strstr(line, ";0x") : "", ";0x7", 4) != 0,
                      "%s: a frame named by its address alone: %.*s", values[v], (int)strcspn(line, "\n"), line);
        free(text), free(folded);
    }
    free(lib), free(host), free(trace);
}

/* A library loaded after another was closed, at the address the closed one
 * had (the loader reuses it), is named as itself: its pcs must not pass for
 * the closed library's, which the recorder keeps for the names of its
 * stacks. */
Test(record_heap, a_library_loaded_where_a_closed_one_was_is_named) {
    char *libs[2], *host = path_in_dir("reload_host"), *trace = path_in_dir("reload.pftrace"), *cmd = NULL;
    static const char *const names[] = {"plug_one", "plug_two"};
    for (int k = 0; k < 2; k++) {
        char *src = NULL, base[32];
        snprintf(base, sizeof base, "libreload%d", k);
        char *c = path_in_dir(base);
        libs[k] = NULL;
        cr_assert_gt(asprintf(&libs[k], "%s.so", c), 0);
        cr_assert_gt(asprintf(&src, "%s.c", c), 0);
        FILE *f = fopen(src, "w");
        cr_assert_not_null(f);
        /* different code before the spin, so that its pcs differ too */
        fprintf(f,
                "double pad%d(double x) { return x * %d.5 + %d; }\n"
                "__attribute__((noinline)) double %s(double i) { return i * 0.5; }\n"
                "double plug_spin(long n) {\n"
                "    double x = 0;\n"
                "    for (long i = 0; i < n; i++) x += %s((double)i);\n"
                "    return x;\n"
                "}\n",
                k, k + 1, k, names[k], names[k]);
        fclose(f);
        char *build = NULL;
        cr_assert_gt(asprintf(&build, "cc -O1 -g -shared -fPIC -fno-inline -o %s %s", libs[k], src), 0);
        cr_assert_eq(system(build), 0, "%s", build);
        free(build), free(src), free(c);
    }
    char *main_c = path_in_dir("reload_host.c");
    FILE *f = fopen(main_c, "w");
    cr_assert_not_null(f);
    fputs("#include <dlfcn.h>\n"
          "int main(int argc, char **argv) {\n"
          "    volatile double y = 0;\n"
          "    for (int k = 1; k < argc; k++) {\n"
          "        void *h = dlopen(argv[k], RTLD_NOW);\n"
          "        if (!h) return 3;\n"
          "        double (*spin)(long) = (double (*)(long))dlsym(h, \"plug_spin\");\n"
          "        y += spin(150000000);\n"
          "        dlclose(h);\n"
          "    }\n"
          "    return y < 0;\n"
          "}\n",
          f);
    fclose(f);
    cr_assert_gt(asprintf(&cmd, "cc -O1 -g -o %s %s -ldl", host, main_c), 0);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    free(cmd);
    cr_assert_gt(asprintf(&cmd, "%s record --preload %s --backend signal -o %s -- %s %s %s 2>/dev/null", TM_CLI,
                          TM_RECORD_PRELOAD, trace, host, libs[0], libs[1]),
                 0);
    tu_asan_recorded_child_env();
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    free(cmd);
    char *folded = path_in_dir("reload.folded");
    cr_assert_gt(asprintf(&cmd, "%s convert -f folded -o %s %s", TM_CLI, folded, trace), 0);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    char *text = tu_read_file(folded, NULL);
    cr_assert_not_null(text);
    /* the two libraries spin alike: each has a good share of the samples (by
     * their source files' names, which only the right library gives) */
    static const char *const files[] = {"libreload0.c", "libreload1.c"};
    long n[2] = {0, 0};
    for (char *line = text; *line;) {
        size_t len = strcspn(line, "\n");
        const char *count = line + len;
        while (count > line && count[-1] != ' ') count--;
        for (int k = 0; k < 2; k++)
            if (memmem(line, len, files[k], strlen(files[k]))) n[k] += atol(count);
        line += len + (line[len] == '\n');
    }
    cr_expect(n[0] > 20 && n[1] > n[0] / 3, "samples in %s %ld, in %s %ld:\n%s", files[0], n[0], files[1], n[1], text);
    free(text), free(folded), free(cmd), free(main_c), free(host), free(trace), free(libs[0]), free(libs[1]);
}

/* A heap profile that sampled nothing (an interval no allocation reaches)
 * is a trace with heap dumps; asked for a memory value, convert says that
 * nothing was sampled rather than that there is no memory profile. */
Test(record_heap, a_profile_that_sampled_nothing_says_so) {
    char *extra[] = {"--heap-interval", "4000000000", NULL};
    run_result r = record_heap("/bin/true", NULL, "none.pftrace", extra);
    char *trace = path_in_dir("none.pftrace"), *err = path_in_dir("convert.err"), *cmd = NULL;
    cr_assert_gt(asprintf(&cmd, "%s convert -f folded --value alloc_space %s >/dev/null 2>%s", TM_CLI, trace, err), 0);
    int st = system(cmd);
    char *said = tu_read_file(err, NULL);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 2, "status %#x", st);
    cr_expect(said && strstr(said, "sampled no allocation"), "%s", said ? said : "(nothing)");
    free(said), free(cmd), free(err), free(trace);
    release(&r);
}

/* A call site reached through different callers with the same stack
 * address (the profiler's memo of unwound stacks must tell them apart by
 * the stack's words), and through frame-pointer frames of variable size:
 * each path's share of the bytes within 3 points of the truth. */
Test(record_heap, paths_to_one_site_are_told_apart) {
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "paths", "paths.pftrace", NULL);
    const heap_view *v = &r.heap;
    log_sites(v);
    static const char *const paths[] = {"path_a", "path_b", "path_c", "fp_path_a", "fp_path_b"};
    static const char *const keys[] = {"a", "b", "c", "fa", "fb"};
    double got[5], want[5];
    for (int i = 0; i < 5; i++) {
        got[i] = (double)hv_sum(v, paths[i]).alloc;
        want[i] = (double)truth(r.out, keys[i]);
    }
    for (int group = 0; group < 2; group++) {
        int first = group ? 3 : 0, n = group ? 2 : 3;
        double got_all = 0, want_all = 0;
        for (int i = first; i < first + n; i++) got_all += got[i], want_all += want[i];
        cr_assert_gt(got_all, 0, "no bytes under %s", paths[first]);
        for (int i = first; i < first + n; i++)
            cr_expect(fabs(100 * got[i] / got_all - 100 * want[i] / want_all) < 3, "%s: %.1f %% of the bytes, truth %.1f %%",
                      paths[i], 100 * got[i] / got_all, 100 * want[i] / want_all);
    }
    /* Every sample of shared_site went through exactly one path. */
    hv_totals site = hv_sum(v, "shared_site");
    double paths_sum = got[0] + got[1] + got[2] + got[3] + got[4];
    cr_expect_eq((double)site.alloc, paths_sum, "shared_site %llu bytes, its paths %.0f",
                 (unsigned long long)site.alloc, paths_sum);
    cr_expect_eq(site.alloc, site.freed);
    cr_expect_eq(v->unwind_errors, 0);
    release(&r);
}

/* Fork children (one execs) run and exit normally; only the parent profiles. */
Test(record_heap, fork_children_run_unprofiled) {
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "fork", "fork.pftrace", NULL);
    cr_expect(strstr(r.out, "children ok 8"), "%s", r.out);
    cr_expect_gt(hv_sum(&r.heap, "site_a").alloc_count, 0);
    cr_expect_eq(hv_sum(&r.heap, "site_b").alloc_count, 0, "a child's allocations are in the parent's profile");
    /* One summary: the children's inherited recorder stays quiet. */
    const char *first = strstr(r.err, "allocations sampled");
    cr_expect(first && !strstr(first + 1, "allocations sampled"), "%s", r.err);
    release(&r);
}

/* The program computes the same results with every allocation function interposed. */
Test(record_heap, results_are_unchanged) {
    char *out = path_in_dir("plain.out"), *err = path_in_dir("plain.err");
    char *argv[] = {TM_RECORD_HEAP_TARGET, "correct", NULL};
    int status = run(argv, out, err);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    char *plain = tu_read_file(out, NULL);
    cr_assert(plain && strstr(plain, "\nok\n"), "%s", plain);
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "correct", "correct.pftrace", NULL);
    cr_expect_str_eq(r.out, plain);
    cr_expect_gt(r.heap.heap_samples, 1000);
    release(&r);
    free(plain), free(out), free(err);
}

Test(record_heap, cxx_new_and_delete) {
#ifndef TM_RECORD_HEAP_TARGET_CXX
    cr_skip_test("no C++ compiler: record_heap_target_cxx was not built");
#else
    run_result r = record_heap(TM_RECORD_HEAP_TARGET_CXX, NULL, "cxx.pftrace", NULL);
    log_sites(&r.heap);
    cr_expect(strstr(r.out, "\nok\n"), "%s", r.out);
    hv_totals temp = hv_sum(&r.heap, "cxx_temp");
    cr_expect_gt(temp.alloc_count, 100);
    cr_expect_eq(temp.alloc, temp.freed, "cxx_temp retains %llu bytes", (unsigned long long)(temp.alloc - temp.freed));
    expect_retained_near(&r.heap, "cxx_leak", truth(r.out, "leak"));
    /* A static initializer runs after the preload library's constructor. */
    hv_totals early = hv_sum(&r.heap, "cxx_before_main");
    cr_expect_eq(early.alloc - early.freed, 4u << 20, "cxx_before_main retains %llu bytes",
                 (unsigned long long)(early.alloc - early.freed));
    release(&r);
#endif
}

/* A program that closes every descriptor it did not open and then opens
 * its own files (as daemons start), and changes directory: its files hold
 * what it wrote, and the trace is whole. The recorder kept its trace open:
 * the program's third file got the trace's packets, and the trace nothing. */
Test(record_heap, a_program_closing_every_descriptor_keeps_its_files) {
    /* CPU samples by frame pointers: libunwind's stepping from a signal
     * may open a pipe of its own in the program, which the program's closes
     * then break (docs/recording.md); that is not the recorder's. */
    char *extra[] = {"--file-write-period-ms", "50", "--unwind", "fp", NULL};
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "closefrom", "closefrom.pftrace", extra);
    const char *dir = strstr(r.out, "dir=");
    cr_assert_not_null(dir, "%s", r.out);
    for (int i = 0; i < 8; i++) {
        char path[128];
        snprintf(path, sizeof path, "%.*s/user%d.txt", (int)strcspn(dir + 4, "\n"), dir + 4, i);
        size_t len = 0;
        char *text = tu_read_file(path, &len);
        cr_assert_not_null(text, "%s", path);
        cr_expect(len == 10 && memcmp(text, "user data\n", 10) == 0, "%s holds %zu bytes", path, len);
        free(text);
        unlink(path);
    }
    hv_totals leak = hv_sum(&r.heap, "steady_leak");
    cr_expect_gt(leak.alloc, 1000000, "the trace has the allocations after the close: %llu bytes",
                 (unsigned long long)leak.alloc);
    release(&r);
}

/* An exec keeps the pid: the program before it and the one after it are
 * one recorded process, in one trace; an exec that fails leaves the
 * program recorded. The exec'd image replaced the trace, and what ran
 * before the exec was lost without a word. */
static void check_exec_continues_the_trace(const char *mode) {
    char *trace = path_in_dir("exec.pftrace"), *out = path_in_dir("stdout"), *err = path_in_dir("stderr");
    char *argv[] = {TM_CLI, "record", "--preload", TM_RECORD_PRELOAD, "--heap", "--no-symbolize", "-o", trace, "--",
                    TM_RECORD_HEAP_TARGET, (char *)mode, NULL};
    int status = run(argv, out, err);
    char *err_text = tu_read_file(err, NULL);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", err_text);
    static const char *const names[3] = {"exec_leak", "after_failed_exec", "steady_leak"};
    static const double truth[3] = {8e6, 4e6, 24e6};
    double folded[3];
    folded_bytes(trace, "alloc_space", names, folded, 3);
    sql_site q[3];
    size_t n = query_sites(trace, "'exec_leak','after_failed_exec','steady_leak'", q, 3);
    for (int i = 0; i < 3; i++) {
        cr_expect(fabs(folded[i] - truth[i]) < 0.1 * truth[i], "%s: %s: %.0f of %.0f bytes", mode, names[i],
                  folded[i], truth[i]);
        const sql_site *site = sql_site_named(q, n, names[i]);
        cr_expect(fabs(site->alloc - truth[i]) < 0.1 * truth[i], "%s: SQL: %s: %.0f of %.0f bytes", mode, names[i],
                  site->alloc, truth[i]);
    }
    size_t len = 0;
    char *bytes = tu_read_file(trace, &len);
    tm_trace *t = NULL;
    tm_error e;
    cr_assert_eq(tm_trace_parse(bytes, len, NULL, &t, &e), TM_OK, "%s", e.message);
    cr_expect_eq(tm_trace_get_stats(t)->heap_missing_packets, 0, "%s: the heap packets are numbered on", mode);
    tm_trace_free(t);
    free(bytes), free(err_text), free(trace), free(out), free(err);
}

Test(record_heap, an_exec_continues_the_trace) { check_exec_continues_the_trace("exec"); }

/* A shell's exec (bash's: its own setenv, which leaves environ alone, and
 * execve given environ) started the new image without the continuation:
 * it replaced the trace (found recording python3 through pyenv's bash shim,
 * whose heap packets were numbered twice over). */
Test(record_heap, a_shell_exec_continues_the_trace) { check_exec_continues_the_trace("exec-shell"); }

/* --chunk-seconds: every chunk holds a whole heap profile of its own
 * (tables re-sent, totals since the start), the last the final totals. */
Test(record_heap, chunks_hold_whole_profiles) {
    char *extra[] = {"--chunk-seconds", "1", "--heap-interval", "8192", NULL};
    char *trace = path_in_dir("chunked.pftrace"), *out = path_in_dir("stdout"), *err = path_in_dir("stderr");
    char *argv[] = {TM_CLI, "record", "--preload", TM_RECORD_PRELOAD, extra[0], extra[1], extra[2], extra[3],
                    "-o", trace, "--", TM_RECORD_HEAP_TARGET, "steady", NULL};
    int status = run(argv, out, err);
    char *err_text = tu_read_file(err, NULL);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", err_text);
    int chunks = 0;
    uint64_t last_leak = 0;
    for (;; chunks++) {
        char name[48];
        snprintf(name, sizeof name, "chunked.%d.pftrace", chunks);
        char *path = path_in_dir(name);
        size_t len;
        char *bytes = tu_read_file(path, &len);
        free(path);
        if (!bytes) break;
        heap_view v;
        cr_assert_eq(hv_read(bytes, len, &v), 0, "chunk %d: %s", chunks, v.why);
        cr_expect_eq(v.generations >= 1 && v.dumps >= 1, 1, "chunk %d has no heap profile", chunks);
        cr_expect_eq(v.interval, 8192);
        hv_totals leak = hv_sum(&v, "steady_leak");
        cr_expect_geq(leak.alloc, last_leak, "chunk %d: totals went down", chunks);
        /* each chunk numbers its heap packets from 0: nothing reads as lost */
        tm_trace *t = NULL;
        tm_error e;
        cr_assert_eq(tm_trace_parse(bytes, len, NULL, &t, &e), TM_OK, "chunk %d: %s", chunks, e.message);
        cr_expect_eq(tm_trace_get_stats(t)->heap_missing_packets, 0, "chunk %d", chunks);
        tm_trace_free(t);
        last_leak = leak.alloc;
        hv_free(&v);
        free(bytes);
    }
    cr_expect_geq(chunks, 2);
    cr_expect(fabs((double)last_leak - 24e6) < 0.1 * 24e6, "the last chunk's total: %llu of 24 MB",
              (unsigned long long)last_leak);
    free(err_text), free(trace), free(out), free(err);
}

/* A ring smaller than the last dump itself (300 stacks up to 300 frames
 * deep, their tables re-sent after the overwrites): the buffer is written
 * out as that dump goes in. The dump overwrote its own first packet, which
 * carries the tables, and the trace had no heap profile at all. */
Test(record_heap, a_last_dump_larger_than_the_ring_is_whole) {
    char *extra[] = {"--buffer-kb", "16", "--file-write-period-ms", "0", NULL};
    run_result r = record_heap(TM_RECORD_HEAP_TARGET, "depths", "depths.pftrace", extra);
    hv_totals deep = hv_sum(&r.heap, "deep_site");
    cr_expect(fabs((double)deep.alloc - 19.2e6) < 0.1 * 19.2e6, "deep_site allocated %llu of 19.2 MB",
              (unsigned long long)deep.alloc);
    release(&r);
}

/* A ring buffer far too small, written only at the end: the packets of the
 * periodic dumps are overwritten, and the end of the trace still holds a
 * clock snapshot and the last dump, whose totals (since the start) say
 * what the program allocated. */
Test(record_heap, the_last_dump_survives_a_tiny_ring) {
    char *trace = path_in_dir("tiny.pftrace"), *out = path_in_dir("stdout"), *err = path_in_dir("stderr");
    char *argv[] = {TM_CLI, "record", "--preload", TM_RECORD_PRELOAD, "--heap", "-F", "500",
                    "--buffer-kb", "2", "--file-write-period-ms", "0", "-o", trace, "--", TM_RECORD_HEAP_TARGET,
                    "steady", NULL};
    int status = run(argv, out, err);
    char *err_text = tu_read_file(err, NULL);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", err_text);
    cr_expect(strstr(err_text, "packets lost"), "the buffer did not overflow: %s", err_text);
    sql_site q[2];
    size_t n = query_sites(trace, "'steady_leak'", q, 2);
    const sql_site *leak = sql_site_named(q, n, "steady_leak");
    cr_expect(fabs(leak->retained - 24e6) < 0.1 * 24e6, "steady_leak retains %.0f of 24 MB", leak->retained);
    free(err_text), free(trace), free(out), free(err);
}
