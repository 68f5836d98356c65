/*
 * tp_packages.c — the package_list table (tp_packages.h): PackagesList
 * packets, which Android's packages_list data source writes from
 * /data/system/packages.list, read into rows of package name, uid,
 * debuggable, profileable_from_shell and version_code; and the lookup of a
 * process's package by its uid.
 */
#include <string.h>

#include "perfetto/symbols.h" /* tm_pf_packages_list */
#include "tp/tp_packages.h"

static int name_eq(const void *ctx, uint32_t idx, const void *key) {
    return tm_bytes_eq(((const tm_tp *)ctx)->packages[idx].name, *(const tm_str *)key);
}

static tm_status add_package(void *ctx, const tm_pf_package *pkg) {
    tm_tp *tp = ctx;
    uint64_t h = tm_hash_bytes(0x9a3c, pkg->name);
    uint32_t h32 = (uint32_t)(h ^ (h >> 32));
    if (tm_idxset_find(&tp->package_names, h32, name_eq, tp, &pkg->name) != TM_ABSENT)
        return TM_OK; /* the first list naming a package wins */
    TM_TRY(TM_VEC_RESERVE(tp->mem, tp->packages, tp->cap_packages, tp->n_packages + 1));
    TM_TRY(tm_idxset_add(tp->mem, &tp->package_names, h32, (uint32_t)tp->n_packages));
    tp->packages[tp->n_packages++] = (tp_package){pkg->name, (int64_t)pkg->uid, pkg->version_code, pkg->debuggable,
                                                   pkg->profileable_from_shell};
    return TM_OK;
}

tm_status tm_tp_packages_list(tm_tp *tp, tm_bytes payload, int64_t *stats, tm_pf_walk_error *bad) {
    bool read_error, parse_error;
    TM_TRY(tm_pf_packages_list(payload, add_package, tp, &read_error, &parse_error, bad));
    stats[TPS_packages_list_has_read_errors] = read_error;
    stats[TPS_packages_list_has_parse_errors] = parse_error;
    return TM_OK;
}

tm_status tm_tp_process_packages(const tm_tp *tp, tm_str **out) {
    *out = tm_mem_alloc(tp->mem, (tp->n_processes + 1) * sizeof **out);
    if (!*out) return TM_ERR_NOMEM;
    tm_u64map by_uid; /* uid -> its first package */
    memset(&by_uid, 0, sizeof by_uid);
    tm_status st = TM_OK;
    for (size_t i = 0; i < tp->n_packages && st == TM_OK; i++)
        if (tm_u64map_get(&by_uid, (uint64_t)tp->packages[i].uid) == TM_ABSENT)
            st = tm_u64map_put(tp->mem, &by_uid, (uint64_t)tp->packages[i].uid, (uint32_t)i);
    for (size_t p = 0; p < tp->n_processes; p++) {
        int64_t uid = tp->processes[p].uid;
        uint32_t k = uid == TP_NO_INT ? TM_ABSENT : tm_u64map_get(&by_uid, (uint64_t)(uid % 100000));
        (*out)[p] = k == TM_ABSENT ? (tm_str){NULL, 0} : tp->packages[k].name;
    }
    tm_u64map_free(tp->mem, &by_uid);
    if (st != TM_OK) tm_mem_free(tp->mem, *out, (tp->n_processes + 1) * sizeof **out);
    return st;
}
