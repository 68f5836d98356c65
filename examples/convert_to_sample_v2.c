/*
 * convert_to_sample_v2.c — the library's three-call happy path, as shown in
 * the README: parse a trace, write it as a Sentry Sample v2 chunk, free it.
 * Uses only the public header. Built and run by `make test`.
 *
 * usage: convert_to_sample_v2 TRACE > chunk.json
 */
#include <stdio.h>
#include <stdlib.h>

#include "tracemill.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s TRACE\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        perror(argv[1]);
        return 3;
    }
    static char buf[1 << 20]; /* the demo trace fits; real programs mmap */
    size_t len = fread(buf, 1, sizeof buf, f);
    /* A read error or a longer file must not pass for a trace cut short,
     * which tm_trace_parse reads up to the cut. */
    int failed = ferror(f), longer = !failed && len == sizeof buf && fgetc(f) != EOF;
    fclose(f);
    if (failed || longer) {
        if (failed) perror(argv[1]);
        else fprintf(stderr, "%s: larger than %zu bytes, this example's buffer\n", argv[1], sizeof buf);
        return 3;
    }

    tm_trace *t = NULL;
    tm_error err;
    tm_sink out = tm_sink_file(stdout);
    if (tm_trace_parse(buf, len, NULL, &t, &err) != TM_OK ||       /* 1. decode */
        tm_write_sample_v2(t, NULL, &out, &err) != TM_OK) {         /* 2. convert */
        fprintf(stderr, "%s at byte %llu: %s\n", err.reason ? err.reason : tm_status_str(err.code),
                (unsigned long long)err.offset, err.message);
        tm_trace_free(t);
        return 1;
    }
    tm_trace_free(t);                                               /* 3. free */
    /* What stdout still buffers is written now: a full disk fails here. */
    if (fflush(stdout) != 0) {
        perror("stdout");
        return 1;
    }
    return 0;
}
