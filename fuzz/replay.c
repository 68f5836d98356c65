/*
 * replay.c — a plain main() for every fuzz target: runs each file given
 * (or each file in each directory given) through LLVMFuzzerTestOneInput
 * once, without libFuzzer, so the corpora and past crashes replay as
 * regression tests in `make test` with any compiler.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: cannot open %s\n", path);
        return 1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0, n;
    do {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            uint8_t *p = realloc(buf, cap);
            if (!p) {
                fclose(f);
                free(buf);
                return 1;
            }
            buf = p;
        }
        n = fread(buf + len, 1, cap - len, f);
        len += n;
    } while (n > 0);
    fclose(f);
    /* an exact-size copy, so reading past the input is caught by ASan */
    uint8_t *exact = malloc(len ? len : 1);
    if (len) memcpy(exact, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
    size_t files = 0;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue; /* an empty corpus directory may be absent */
        if (!S_ISDIR(st.st_mode)) {
            failed |= run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) continue;
        char **names = NULL;
        size_t n = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            names = realloc(names, (n + 1) * sizeof *names);
            size_t len = strlen(argv[i]) + strlen(e->d_name) + 2;
            names[n] = malloc(len);
            snprintf(names[n], len, "%s/%s", argv[i], e->d_name);
            n++;
        }
        closedir(d);
        qsort(names, n, sizeof *names, cmp_names);
        for (size_t k = 0; k < n; k++) {
            failed |= run_file(names[k]);
            free(names[k]);
        }
        free(names);
        files += n;
    }
    printf("replay: %zu inputs, no crash\n", files);
    return failed || files == 0;
}
