/*
 * pprof_text.c — prints an uncompressed pprof Profile as text, one line per
 * top-level entry, with field names and string-table indexes resolved
 * ("main"#7), so that pprof golden files are reviewable as text diffs.
 * Unknown fields are printed by number, so nothing the writer emits hides.
 * usage: pprof_text FILE (an uncompressed profile.proto)
 */
#include <stdio.h>
#include <stdlib.h>

#include "wire/pb.h"

typedef enum kind { UINT, INT, HEX, STR_INDEX, STRING, MESSAGE } kind;

typedef struct field_def {
    uint32_t num;
    const char *name;
    kind k;
    const struct msg_def *sub;
} field_def;

typedef struct msg_def {
    const field_def *fields;
    size_t n;
} msg_def;

#define MSG(name, ...)                                   \
    static const field_def name##_fields[] = {__VA_ARGS__}; \
    static const msg_def name = {name##_fields, sizeof name##_fields / sizeof *name##_fields}

MSG(value_type, {1, "type", STR_INDEX, NULL}, {2, "unit", STR_INDEX, NULL});
MSG(label, {1, "key", STR_INDEX, NULL}, {2, "str", STR_INDEX, NULL}, {3, "num", INT, NULL},
    {4, "num_unit", STR_INDEX, NULL});
MSG(sample, {1, "location_id", UINT, NULL}, {2, "value", INT, NULL}, {3, "label", MESSAGE, &label});
MSG(mapping, {1, "id", UINT, NULL}, {2, "memory_start", HEX, NULL}, {3, "memory_limit", HEX, NULL},
    {4, "file_offset", HEX, NULL}, {5, "filename", STR_INDEX, NULL}, {6, "build_id", STR_INDEX, NULL},
    {7, "has_functions", UINT, NULL}, {8, "has_filenames", UINT, NULL}, {9, "has_line_numbers", UINT, NULL},
    {10, "has_inline_frames", UINT, NULL});
MSG(line, {1, "function_id", UINT, NULL}, {2, "line", INT, NULL}, {3, "column", INT, NULL});
MSG(location, {1, "id", UINT, NULL}, {2, "mapping_id", UINT, NULL}, {3, "address", HEX, NULL},
    {4, "line", MESSAGE, &line}, {5, "is_folded", UINT, NULL});
MSG(function, {1, "id", UINT, NULL}, {2, "name", STR_INDEX, NULL}, {3, "system_name", STR_INDEX, NULL},
    {4, "filename", STR_INDEX, NULL}, {5, "start_line", INT, NULL});
MSG(profile, {1, "sample_type", MESSAGE, &value_type}, {2, "sample", MESSAGE, &sample},
    {3, "mapping", MESSAGE, &mapping}, {4, "location", MESSAGE, &location}, {5, "function", MESSAGE, &function},
    {6, "string_table", STRING, NULL}, {7, "drop_frames", STR_INDEX, NULL}, {8, "keep_frames", STR_INDEX, NULL},
    {9, "time_nanos", INT, NULL}, {10, "duration_nanos", INT, NULL}, {11, "period_type", MESSAGE, &value_type},
    {12, "period", INT, NULL}, {13, "comment", STR_INDEX, NULL}, {14, "default_sample_type", STR_INDEX, NULL},
    {15, "doc_url", STR_INDEX, NULL});

static tm_bytes *strings;
static size_t n_strings, strings_printed;

static void print_string(tm_bytes s) {
    putchar('"');
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = s.data[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c >= 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('"');
}

static void print_scalar(kind k, uint64_t v) {
    switch (k) {
    case INT: printf("%lld", (long long)v); break;
    case HEX: printf("0x%llx", (unsigned long long)v); break;
    case STR_INDEX:
        if (v < n_strings) print_string(strings[v]);
        printf("#%llu", (unsigned long long)v);
        break;
    default: printf("%llu", (unsigned long long)v); break;
    }
}

static int print_message(tm_bytes msg, const msg_def *def, int top) {
    tm_pb_reader r = tm_pb_reader_of(msg);
    tm_pb_field f;
    int rc, first = 1;
    while ((rc = tm_pb_next(&r, &f)) == TM_PB_OK) {
        const field_def *fd = NULL;
        for (size_t i = 0; i < def->n; i++)
            if (def->fields[i].num == f.num) fd = &def->fields[i];
        if (!top && !first) putchar(' ');
        first = 0;
        if (!fd) printf("field%u=?wire%u", f.num, f.wire);
        else if (fd->k == MESSAGE && f.wire == TM_PB_LEN) {
            printf("%s{", fd->name);
            if (!print_message(f.bytes, fd->sub, 0)) return 0;
            putchar('}');
        } else if (fd->k == STRING && f.wire == TM_PB_LEN) {
            printf("%s[%zu]=", fd->name, strings_printed++);
            print_string(f.bytes);
        } else if (f.wire == TM_PB_LEN) { /* a packed list */
            printf("%s=[", fd->name);
            tm_pb_reader pr = tm_pb_reader_of(f.bytes);
            uint64_t v;
            int prc, n = 0;
            while ((prc = tm_pb_packed_next(&pr, &v)) == TM_PB_OK) {
                if (n++) putchar(',');
                print_scalar(fd->k, v);
            }
            if (prc == TM_PB_ERROR) return 0;
            putchar(']');
        } else {
            printf("%s=", fd->name);
            print_scalar(fd->k, f.val);
        }
        if (top) putchar('\n');
    }
    return rc != TM_PB_ERROR;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: pprof_text FILE\n");
        return 2;
    }
    FILE *in = fopen(argv[1], "rb");
    if (!in) {
        perror(argv[1]);
        return 1;
    }
    size_t cap = 1 << 16, len = 0, got;
    uint8_t *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len, in)) > 0)
        if ((len += got) == cap) buf = realloc(buf, cap *= 2);
    fclose(in);
    if (!buf) return 1;
    tm_bytes all = {buf, len};
    tm_pb_reader r = tm_pb_reader_of(all); /* the string table first: the rest refers to it */
    tm_pb_field f;
    while (tm_pb_next(&r, &f) == TM_PB_OK)
        if (f.num == 6 && f.wire == TM_PB_LEN) {
            strings = realloc(strings, (n_strings + 1) * sizeof *strings);
            strings[n_strings++] = f.bytes;
        }
    int ok = print_message(all, &profile, 1);
    free(strings);
    free(buf);
    if (!ok) fprintf(stderr, "pprof_text: %s is not a valid profile\n", argv[1]);
    return ok ? 0 : 1;
}
