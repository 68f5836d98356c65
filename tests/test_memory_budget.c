/*
 * test_memory_budget.c — the per-conversion memory budgets of tm_limits:
 * max_work_bytes (the decode's working tables) and max_result_bytes (the
 * trace's model plus what exporters allocate from it). Each is tested at its
 * exact boundary, found by bisection: one byte less is TM_ERR_LIMIT naming
 * the limit and a packet, never TM_ERR_NOMEM or a crash; at the boundary the
 * result equals an unbudgeted run. Also the presets, Relay's reason, and the
 * ingest server turning a breach into an ExceedSizeLimit outcome.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"
#include "trace_builder.h"
#include "tracemill.h"
#include "tutil.h"

/* A trace whose working tables and model both grow with n: one sequence
 * interning n function names, frames and one-frame callstacks (in one
 * packet after a clock snapshot), then 4n samples over them. */
static tb_buf interning_trace(uint64_t n, size_t *interned_at) {
    tb_buf t = {0};
    uint32_t ids[] = {TM_PF_BUILTIN_CLOCK_BOOTTIME};
    uint64_t vals[] = {1000};
    tb_clock_snapshot(&t, 0, ids, vals, 1);
    *interned_at = t.len;
    size_t pk = tb_packet_open(&t, 1, 1000, TB_SEQ_CLEARED | TB_SEQ_NEEDS);
    size_t in = tb_open(&t, TM_PF_PACKET_INTERNED_DATA);
    char name[32];
    for (uint64_t i = 1; i <= n; i++) {
        int len = snprintf(name, sizeof name, "function_%llu", (unsigned long long)i);
        tb_interned_string(&t, TM_PF_INTERNED_FUNCTION_NAMES, i, name, (size_t)len);
    }
    for (uint64_t i = 1; i <= n; i++) tb_frame(&t, i, i, 0, i * 16);
    for (uint64_t i = 1; i <= n; i++) tb_callstack(&t, i, &i, 1, 1);
    tb_close(&t, in);
    tb_close(&t, pk);
    for (uint64_t s = 0; s < 4 * n; s++)
        tb_perf_sample(&t, 1, 2000 + s * 1000, 10, 10 + (uint32_t)(s % 3), 1 + s % n, TB_SEQ_NEEDS);
    return t;
}

typedef enum { PARSE_ONLY, PARSE_AND_PPROF } workload;

/* Runs the workload with the given budgets (0: preset); returns its status
 * and the error. */
static tm_status run(const tb_buf *t, tm_mode mode, uint64_t work, uint64_t result, workload w, tm_error *err) {
    tm_options o;
    memset(&o, 0, sizeof o);
    o.mode = mode;
    o.limits.max_work_bytes = work;
    o.limits.max_result_bytes = result;
    tm_trace *tr = NULL;
    tm_status st = tm_trace_parse(t->data, t->len, &o, &tr, err);
    if (st == TM_OK && w == PARSE_AND_PPROF) {
        tu_membuf out = {0};
        tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
        st = tm_write_pprof(tr, NULL, &sink, err);
        tu_membuf_free(&out);
    }
    tm_trace_free(tr);
    return st;
}

/* The smallest budget (work or result) with which the workload succeeds:
 * success is monotonic in the budget because the allocation sequence does
 * not depend on it. */
static uint64_t smallest_budget(const tb_buf *t, int result_side, workload w) {
    uint64_t lo = 1, hi = (uint64_t)1 << 32; /* hi succeeds, lo - 1 is never asked */
    tm_error err;
    cr_assert_eq(run(t, TM_MODE_DEFAULT, result_side ? 0 : hi, result_side ? hi : 0, w, &err), TM_OK, "%s",
                 err.message);
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (run(t, TM_MODE_DEFAULT, result_side ? 0 : mid, result_side ? mid : 0, w, &err) == TM_OK) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

Test(memory_budget, presets_are_relays_and_generous) {
    tm_limits relay, cli;
    tm_limits_preset(TM_LIMITS_RELAY, &relay);
    tm_limits_preset(TM_LIMITS_GENEROUS, &cli);
    cr_assert_eq(relay.max_work_bytes, 15ull << 20);
    cr_assert_eq(relay.max_result_bytes, 40ull << 20);
    cr_assert_gt(cli.max_work_bytes, relay.max_work_bytes);
    cr_assert_gt(cli.max_result_bytes, relay.max_result_bytes);
}

Test(memory_budget, work_budget_boundary) {
    size_t interned_at;
    tb_buf t = interning_trace(5000, &interned_at);
    uint64_t need = smallest_budget(&t, 0, PARSE_ONLY);
    /* 5000 entries in three tables cannot fit in less than 5000 * 3 * 8 bytes */
    cr_assert_gt(need, 5000 * 3 * 8, "work budget %llu", (unsigned long long)need);
    tm_error err;
    cr_assert_eq(run(&t, TM_MODE_DEFAULT, need - 1, 0, PARSE_ONLY, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "max_work_bytes"), "%s", err.message);
    cr_assert_geq(err.offset, interned_at, "offset %llu", (unsigned long long)err.offset);
    cr_assert_lt(err.offset, t.len);
    cr_assert_eq(t.data[err.offset], 0x0a, "the offset is a packet's");
    cr_assert_eq(run(&t, TM_MODE_DEFAULT, need, 0, PARSE_ONLY, &err), TM_OK, "%s", err.message);
    tb_free(&t);
}

Test(memory_budget, work_budget_grows_with_the_tables) {
    size_t at;
    tb_buf small = interning_trace(2000, &at), large = interning_trace(8000, &at);
    uint64_t a = smallest_budget(&small, 0, PARSE_ONLY), b = smallest_budget(&large, 0, PARSE_ONLY);
    cr_assert_gt(b, 2 * a, "%llu vs %llu", (unsigned long long)a, (unsigned long long)b);
    cr_assert_lt(b, 8 * a, "%llu vs %llu", (unsigned long long)a, (unsigned long long)b);
    tb_free(&small);
    tb_free(&large);
}

Test(memory_budget, result_budget_boundary_and_identical_output) {
    size_t at;
    tb_buf t = interning_trace(3000, &at);
    uint64_t need = smallest_budget(&t, 1, PARSE_ONLY);
    tm_error err;
    cr_assert_eq(run(&t, TM_MODE_DEFAULT, 0, need - 1, PARSE_ONLY, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "max_result_bytes"), "%s", err.message);
    cr_assert_lt(err.offset, t.len);

    /* at the boundary the decode is the unbudgeted one */
    tm_options o;
    memset(&o, 0, sizeof o);
    tm_trace *plain = NULL, *tight = NULL;
    cr_assert_eq(tm_trace_parse(t.data, t.len, &o, &plain, &err), TM_OK);
    o.limits.max_result_bytes = need;
    cr_assert_eq(tm_trace_parse(t.data, t.len, &o, &tight, &err), TM_OK);
    /* (the stats live in zeroed memory, padding included) */
    cr_assert_eq(memcmp(tm_trace_get_stats(plain), tm_trace_get_stats(tight), sizeof(tm_trace_stats)), 0);
    cr_assert_eq(tm_trace_get_stats(tight)->samples_kept, 4 * 3000);
    /* an exporter needs memory beyond the model: at this budget it fails cleanly */
    tu_membuf out = {0};
    tm_sink sink = {.write = tu_membuf_write, .ctx = &out};
    cr_assert_eq(tm_write_report(tight, &sink, &err), TM_ERR_LIMIT);
    cr_assert_eq(tm_write_report(plain, &sink, &err), TM_OK);
    tu_membuf_free(&out);
    tm_trace_free(plain);
    tm_trace_free(tight);
    tb_free(&t);
}

Test(memory_budget, exporters_share_the_result_budget) {
    size_t at;
    tb_buf t = interning_trace(3000, &at);
    uint64_t parse = smallest_budget(&t, 1, PARSE_ONLY), both = smallest_budget(&t, 1, PARSE_AND_PPROF);
    cr_assert_gt(both, parse, "pprof's tables count: %llu vs %llu", (unsigned long long)both,
                 (unsigned long long)parse);
    tm_error err;
    cr_assert_eq(run(&t, TM_MODE_DEFAULT, 0, both - 1, PARSE_AND_PPROF, &err), TM_ERR_LIMIT);
    cr_assert(strstr(err.message, "max_result_bytes"), "%s", err.message);
    cr_assert_eq(run(&t, TM_MODE_DEFAULT, 0, both, PARSE_AND_PPROF, &err), TM_OK, "%s", err.message);
    tb_free(&t);
}

Test(memory_budget, relay_mode_reports_exceed_size_limit) {
    size_t at;
    tb_buf t = interning_trace(2000, &at);
    tm_error err;
    cr_assert_eq(run(&t, TM_MODE_RELAY, 4096, 0, PARSE_ONLY, &err), TM_ERR_LIMIT);
    cr_assert_str_eq(err.reason, "ExceedSizeLimit");
    cr_assert_eq(run(&t, TM_MODE_RELAY, 0, 4096, PARSE_ONLY, &err), TM_ERR_LIMIT);
    cr_assert_str_eq(err.reason, "ExceedSizeLimit");
    /* the Relay preset's own 15 MiB / 40 MiB hold this trace */
    cr_assert_eq(run(&t, TM_MODE_RELAY, 0, 0, PARSE_ONLY, &err), TM_OK, "%s", err.message);
    tb_free(&t);
}

/* Outcome reasons of the processed envelope, comma-joined. */
static void outcome_reasons(const tm_srv_processed *p, char *out, size_t cap) {
    out[0] = 0;
    for (size_t i = 0; i < p->n_records; i++) {
        if (p->records[i].kind != TM_SRV_RECORD_OUTCOME) continue;
        const char *v = (const char *)p->records[i].value;
        const char *r = strstr(v, "\"reason\":\"");
        if (!r) continue;
        r += 10;
        size_t n = strcspn(r, "\"");
        strncat(out, r, n < cap - strlen(out) - 2 ? n : cap - strlen(out) - 2);
        strcat(out, ",");
    }
}

static size_t chunks_of(const tm_srv_processed *p) {
    size_t n = 0;
    for (size_t i = 0; i < p->n_records; i++) n += p->records[i].kind == TM_SRV_RECORD_CHUNK;
    return n;
}

static void process_demo(const char *yaml, tm_srv_processed *out) {
    tm_srv_config cfg;
    tm_error err;
    cr_assert_eq(tm_srv_config_init(&cfg, &err), TM_OK);
    cr_assert_eq(tm_srv_config_parse(&cfg, yaml, strlen(yaml), &err), TM_OK, "%s", err.message);
    size_t len;
    char *body = tu_read_file(TM_SOURCE_DIR "/examples/demo.envelope", &len);
    cr_assert_not_null(body);
    static char key[] = "e12d836b15bb49d7bbf99e64295d995b";
    static char *keys[] = {key};
    tm_srv_project project = {.id = 1, .organization_id = 1, .public_keys = keys, .n_public_keys = 1,
                              .retention_days = 90, .continuous_profiling = 1,
                              .continuous_profiling_perfetto = 1};
    tm_srv_context ctx = {.cfg = &cfg, .project = &project, .now_unix = 1771278043};
    cr_assert_eq(tm_srv_process(&ctx, (const uint8_t *)body, len, out, &err), TM_OK, "%s", err.message);
    free(body);
    tm_srv_config_release(&cfg);
}

/* The JSON is written straight into the message up to max_profile_size:
 * exactly that many bytes pass, one more is refused (the demo's trace is
 * far under both). */
Test(memory_budget, server_caps_the_expanded_json_at_max_profile_size) {
    tm_srv_processed p;
    char yaml[96], reasons[256];
    process_demo("", &p);
    cr_assert_eq(chunks_of(&p), 1);
    size_t json = 0;
    for (size_t i = 0; i < p.n_records; i++)
        if (p.records[i].kind == TM_SRV_RECORD_CHUNK) json = p.records[i].payload_size;
    tm_srv_processed_release(&p);
    cr_assert_gt(json, 200000u);
    snprintf(yaml, sizeof yaml, "limits:\n  max_profile_size: %zu\n", json);
    process_demo(yaml, &p);
    cr_assert_eq(chunks_of(&p), 1);
    tm_srv_processed_release(&p);
    snprintf(yaml, sizeof yaml, "limits:\n  max_profile_size: %zu\n", json - 1);
    process_demo(yaml, &p);
    outcome_reasons(&p, reasons, sizeof reasons);
    cr_assert_eq(chunks_of(&p), 0);
    cr_assert_str_eq(reasons, "profiling_exceed_size_limit,");
    tm_srv_processed_release(&p);
}

Test(memory_budget, server_rejects_a_chunk_over_its_budget) {
    tm_srv_processed p;
    char reasons[256];
    process_demo("limits:\n  max_conversion_work: 1KiB\n", &p);
    outcome_reasons(&p, reasons, sizeof reasons);
    cr_assert_eq(chunks_of(&p), 0);
    cr_assert_str_eq(reasons, "profiling_exceed_size_limit,");
    tm_srv_processed_release(&p);

    process_demo("limits:\n  max_conversion_result: 64KiB\n", &p);
    outcome_reasons(&p, reasons, sizeof reasons);
    cr_assert_eq(chunks_of(&p), 0);
    cr_assert_str_eq(reasons, "profiling_exceed_size_limit,");
    tm_srv_processed_release(&p);

    process_demo("limits:\n  max_conversion_work: 15MiB\n  max_conversion_result: 40MiB\n", &p);
    cr_assert_eq(chunks_of(&p), 1);
    tm_srv_processed_release(&p);
}
