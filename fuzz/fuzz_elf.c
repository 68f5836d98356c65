/*
 * fuzz_elf.c — fuzz target for the ELF/DWARF path of the symbolizer
 * (src/symbolize/elf_dw.c): the input is written to a file in a symbol
 * directory and looked up by its own build id (or, without one, a fixed id
 * it cannot have), then addresses across its first megabyte and ones the
 * input names are resolved. Truncated, corrupt or hostile files must give
 * "not found", "mismatch" or no lines, never a crash or a hang.
 */
#define _GNU_SOURCE
#include <elfutils/libdwelf.h>
#include <gelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/limits.h"
#include "symbolize/symbolize.h"

static char dir[64], file[96];

/* elfutils keeps a few small allocations between files (CI's smoke run saw
 * 32 bytes from inside libdw once in ~100 000 inputs, and the input alone
 * does not reproduce it); what this code opens it closes, which the ASan
 * suite checks on every symbolizer test. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:libdw.so\nleak:libelf.so\n"; }

static void remove_dir(void) { rmdir(dir); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/fuzz_elf_XXXXXX");
        if (!mkdtemp(dir)) abort();
        atexit(remove_dir);
        snprintf(file, sizeof file, "%s/lib.so", dir);
        elf_version(EV_CURRENT);
    }
    FILE *f = fopen(file, "wb");
    if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) abort();
    uint8_t id[64];
    size_t id_len = 8;
    memset(id, 0xee, sizeof id);
    Elf *e = elf_memory((char *)(uintptr_t)data, size);
    const void *bits;
    ssize_t n = e ? dwelf_elf_gnu_build_id(e, &bits) : -1;
    if (n > 0 && n <= 64) memcpy(id, bits, (size_t)n), id_len = (size_t)n;
    if (e) elf_end(e);
    tm_mem mem;
    tm_mem_init(&mem, NULL);
    const char *dirs[1] = {dir};
    tm_elf_search s = {&mem, dirs, 1, 0, NULL};
    tm_elf *elf;
    int found;
    if (tm_elf_open(&s, "/somewhere/lib.so", id, id_len, &elf, &found) != TM_OK) abort();
    if ((elf != NULL) != (found == TM_ELF_FOUND)) abort();
    if (elf) {
        tm_elf_line lines[TM_MAX_SYMBOL_LINES];
        size_t nl;
        for (uint64_t a = 0; a < (1u << 20); a += 4093) {
            tm_elf_resolve(elf, a, lines, TM_MAX_SYMBOL_LINES, &nl);
            if (nl > TM_MAX_SYMBOL_LINES) abort();
            for (size_t k = 0; k < nl; k++)
                if (!lines[k].function) abort();
        }
        for (size_t i = 0; i + 8 <= size && i < 64 * 8; i += 8) {
            uint64_t a;
            memcpy(&a, data + i, 8);
            tm_elf_resolve(elf, a, lines, TM_MAX_SYMBOL_LINES, &nl);
        }
        tm_elf_close(elf);
    }
    unlink(file);
    return 0;
}
