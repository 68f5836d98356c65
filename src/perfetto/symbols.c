/*
 * symbols.c — walks ModuleSymbols, DeobfuscationMapping and PackagesList
 * payloads (symbols.h). Field numbers are in fields.h; the reader has already
 * checked every wire type against schema.c, so a field of another wire type
 * cannot reach here (it is skipped all the same).
 */
#include <string.h>

#include "perfetto/fields.h"
#include "perfetto/symbols.h"
#include "wire/pb.h"

static tm_status walk_error(const tm_pb_reader *r, const char *where, tm_pf_walk_error *bad) {
    bad->at = *r;
    bad->where = where;
    return TM_ERR_MALFORMED;
}

static tm_status read_line(tm_bytes msg, tm_pf_line *out, tm_pf_walk_error *bad) {
    memset(out, 0, sizeof *out);
    out->function = (tm_str){(const uint8_t *)"", 0};
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_LINE_FUNCTION_NAME && f.wire == TM_PB_LEN) out->function = f.bytes;
        else if (f.num == TM_PF_LINE_SOURCE_FILE_NAME && f.wire == TM_PB_LEN) out->file = f.bytes;
        else if (f.num == TM_PF_LINE_LINE_NUMBER && f.wire == TM_PB_VARINT) out->line = (uint32_t)f.val;
    }
    return rc == TM_PB_ERROR ? walk_error(&r, "ModuleSymbols line", bad) : TM_OK;
}

tm_status tm_pf_module_symbols(tm_bytes payload, tm_pf_address_fn fn, void *ctx, tm_pf_walk_error *bad) {
    tm_pf_address_symbols a;
    memset(&a, 0, sizeof a);
    a.path = (tm_str){(const uint8_t *)"", 0};
    a.build_id = (tm_bytes){(const uint8_t *)"", 0};
    tm_pb_reader r = tm_pb_reader_of(payload);
    tm_pb_field f;
    int rc;
    /* path and build_id may follow the addresses on the wire */
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_MODULE_SYMBOLS_PATH && f.wire == TM_PB_LEN) a.path = f.bytes;
        else if (f.num == TM_PF_MODULE_SYMBOLS_BUILD_ID && f.wire == TM_PB_LEN) a.build_id = f.bytes;
    }
    if (rc == TM_PB_ERROR) return walk_error(&r, "ModuleSymbols", bad);
    r = tm_pb_reader_of(payload);
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != TM_PF_MODULE_SYMBOLS_ADDRESS_SYMBOLS || f.wire != TM_PB_LEN) continue;
        a.address = 0;
        a.n = 0;
        tm_pb_reader ar = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        int arc;
        while ((arc = tm_pb_next(&ar, &g)) == TM_PB_OK) {
            if (g.num == TM_PF_ADDRESS_SYMBOLS_ADDRESS && g.wire == TM_PB_VARINT) a.address = g.val;
            else if (g.num == TM_PF_ADDRESS_SYMBOLS_LINES && g.wire == TM_PB_LEN && a.n < TM_MAX_SYMBOL_LINES)
                TM_TRY(read_line(g.bytes, &a.lines[a.n++], bad));
        }
        if (arc == TM_PB_ERROR) return walk_error(&ar, "ModuleSymbols address_symbols", bad);
        TM_TRY(fn(ctx, &a));
    }
    return rc == TM_PB_ERROR ? walk_error(&r, "ModuleSymbols", bad) : TM_OK;
}

static tm_status read_member(tm_bytes msg, tm_pf_deobf *d, tm_pf_walk_error *bad) {
    d->obf_method = d->method = (tm_str){(const uint8_t *)"", 0};
    d->obf_line_start = d->obf_line_end = d->line_start = 0;
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        switch (f.num) {
        case TM_PF_OBF_MEMBER_OBFUSCATED_NAME: if (f.wire == TM_PB_LEN) d->obf_method = f.bytes; break;
        case TM_PF_OBF_MEMBER_DEOBFUSCATED_NAME: if (f.wire == TM_PB_LEN) d->method = f.bytes; break;
        case TM_PF_OBF_MEMBER_OBFUSCATED_LINE_START: if (f.wire == TM_PB_VARINT) d->obf_line_start = (uint32_t)f.val; break;
        case TM_PF_OBF_MEMBER_OBFUSCATED_LINE_END: if (f.wire == TM_PB_VARINT) d->obf_line_end = (uint32_t)f.val; break;
        case TM_PF_OBF_MEMBER_SOURCE_LINE_START: if (f.wire == TM_PB_VARINT) d->line_start = (uint32_t)f.val; break;
        default: break;
        }
    }
    return rc == TM_PB_ERROR ? walk_error(&r, "DeobfuscationMapping member", bad) : TM_OK;
}

tm_status tm_pf_deobfuscation(tm_bytes payload, tm_pf_deobf_fn fn, void *ctx, tm_pf_walk_error *bad) {
    tm_pf_deobf d;
    memset(&d, 0, sizeof d);
    tm_pb_reader r = tm_pb_reader_of(payload);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK)
        if (f.num == TM_PF_DEOBF_PACKAGE_NAME && f.wire == TM_PB_LEN) d.package = f.bytes;
    if (rc == TM_PB_ERROR) return walk_error(&r, "DeobfuscationMapping", bad);
    r = tm_pb_reader_of(payload);
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num != TM_PF_DEOBF_OBFUSCATED_CLASSES || f.wire != TM_PB_LEN) continue;
        d.obf_class = d.class_name = (tm_str){(const uint8_t *)"", 0};
        tm_pb_reader cr = tm_pb_reader_of(f.bytes);
        tm_pb_field g;
        int crc;
        while ((crc = tm_pb_next(&cr, &g)) == TM_PB_OK) {
            if (g.num == TM_PF_OBF_CLASS_OBFUSCATED_NAME && g.wire == TM_PB_LEN) d.obf_class = g.bytes;
            else if (g.num == TM_PF_OBF_CLASS_DEOBFUSCATED_NAME && g.wire == TM_PB_LEN) d.class_name = g.bytes;
        }
        if (crc == TM_PB_ERROR) return walk_error(&cr, "DeobfuscationMapping class", bad);
        d.obf_method = d.method = (tm_str){NULL, 0};
        d.obf_line_start = d.obf_line_end = d.line_start = 0;
        TM_TRY(fn(ctx, &d));
        cr = tm_pb_reader_of(f.bytes);
        while ((crc = tm_pb_next(&cr, &g)) == TM_PB_OK) {
            if (g.num != TM_PF_OBF_CLASS_OBFUSCATED_METHODS || g.wire != TM_PB_LEN) continue;
            TM_TRY(read_member(g.bytes, &d, bad));
            TM_TRY(fn(ctx, &d));
        }
        if (crc == TM_PB_ERROR) return walk_error(&cr, "DeobfuscationMapping class", bad);
    }
    return rc == TM_PB_ERROR ? walk_error(&r, "DeobfuscationMapping", bad) : TM_OK;
}

static tm_status read_package(tm_bytes msg, tm_pf_package *out, tm_pf_walk_error *bad) {
    memset(out, 0, sizeof *out);
    out->name = (tm_str){(const uint8_t *)"", 0};
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_PACKAGE_INFO_NAME && f.wire == TM_PB_LEN) out->name = f.bytes;
        else if (f.wire != TM_PB_VARINT) continue;
        else if (f.num == TM_PF_PACKAGE_INFO_UID) out->uid = f.val;
        else if (f.num == TM_PF_PACKAGE_INFO_DEBUGGABLE) out->debuggable = f.val != 0;
        else if (f.num == TM_PF_PACKAGE_INFO_PROFILEABLE_FROM_SHELL) out->profileable_from_shell = f.val != 0;
        else if (f.num == TM_PF_PACKAGE_INFO_VERSION_CODE) out->version_code = (int64_t)f.val;
    }
    return rc == TM_PB_ERROR ? walk_error(&r, "PackagesList package", bad) : TM_OK;
}

tm_status tm_pf_packages_list(tm_bytes payload, tm_pf_package_fn fn, void *ctx, bool *read_error, bool *parse_error,
                              tm_pf_walk_error *bad) {
    *read_error = *parse_error = false;
    tm_pb_reader r = tm_pb_reader_of(payload);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        if (f.num == TM_PF_PACKAGES_LIST_PACKAGES && f.wire == TM_PB_LEN) {
            tm_pf_package p;
            TM_TRY(read_package(f.bytes, &p, bad));
            TM_TRY(fn(ctx, &p));
        } else if (f.num == TM_PF_PACKAGES_LIST_READ_ERROR && f.wire == TM_PB_VARINT) {
            *read_error = f.val != 0;
        } else if (f.num == TM_PF_PACKAGES_LIST_PARSE_ERROR && f.wire == TM_PB_VARINT) {
            *parse_error = f.val != 0;
        }
    }
    return rc == TM_PB_ERROR ? walk_error(&r, "PackagesList", bad) : TM_OK;
}

tm_status tm_pf_symbols_add(tm_mem *mem, tm_pf_symbols *s, uint32_t field, tm_bytes payload) {
    if (s->n == s->cap) {
        size_t cap = s->cap;
        if (tm_vec_grow(mem, (void **)&s->payloads, &cap, sizeof *s->payloads, s->n + 1) != TM_OK) return TM_ERR_NOMEM;
        cap = s->cap;
        if (tm_vec_grow(mem, (void **)&s->fields, &cap, sizeof *s->fields, s->n + 1) != TM_OK) return TM_ERR_NOMEM;
        s->cap = cap;
    }
    s->payloads[s->n] = payload;
    s->fields[s->n++] = field;
    return TM_OK;
}

void tm_pf_symbols_free(tm_mem *mem, tm_pf_symbols *s) {
    tm_mem_free(mem, s->payloads, s->cap * sizeof *s->payloads);
    tm_mem_free(mem, s->fields, s->cap * sizeof *s->fields);
    memset(s, 0, sizeof *s);
}

tm_str tm_pf_path_package(tm_str path) {
    static const char app[] = "/data/app/";
    if (path.len < sizeof app - 1 || memcmp(path.data, app, sizeof app - 1) != 0) return (tm_str){NULL, 0};
    const uint8_t *q = path.data + sizeof app - 1, *end = path.data + path.len;
    if (end - q > 2 && q[0] == '~' && q[1] == '~') {
        while (q < end && *q != '/') q++;
        if (q < end) q++;
    }
    const uint8_t *e = q;
    while (e < end && *e != '-' && *e != '/') e++;
    return (tm_str){q, (size_t)(e - q)};
}

bool tm_pf_path_is_jit(tm_str path) {
    static const char memfd[] = "/memfd:";
    return path.len >= sizeof memfd - 1 && memcmp(path.data, memfd, sizeof memfd - 1) == 0;
}
