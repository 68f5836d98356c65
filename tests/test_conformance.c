/*
 * test_conformance.c — the traces our own tools write use the encodings
 * Perfetto's protos declare (tests/conformance.c): the bundled examples,
 * bench/gen_trace's traces, and the check itself on a packed list. The
 * recorder's writer is checked in test_record_writer.
 */
#define _GNU_SOURCE /* mkdtemp */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conformance.h"
#include "trace_builder.h"
#include "tutil.h"

static long check_file(const char *path, char *why, size_t n) {
    size_t len;
    char *buf = tu_read_file(path, &len);
    cr_assert_not_null(buf, "cannot read %s", path);
    long found = tc_check_trace((const uint8_t *)buf, len, why, n);
    free(buf);
    return found;
}

static void one_callstack(tb_buf *b, int packed) {
    const uint64_t frames[] = {1, 2, 3};
    size_t p = tb_packet_open(b, 1, 100, TB_SEQ_CLEARED);
    size_t i = tb_open(b, TM_PF_PACKET_INTERNED_DATA);
    tb_callstack(b, 1, frames, 3, packed);
    tb_close(b, i);
    tb_close(b, p);
}

Test(conformance, a_packed_list_is_flagged_with_its_offset) {
    tb_buf packed = {0}, unpacked = {0};
    one_callstack(&packed, 1);
    one_callstack(&unpacked, 0);
    char why[256];
    cr_assert_eq(tc_check_trace(packed.data, packed.len, why, sizeof why), 1);
    cr_assert(strstr(why, "Callstack.frame_ids is packed"), "%s", why);
    cr_assert_eq(tc_check_trace(unpacked.data, unpacked.len, why, sizeof why), 0, "%s", why);
    const uint64_t cs[] = {1, 1}, dt[] = {10, 10};
    tb_buf s = {0};
    size_t p = tb_packet_open(&s, 1, 100, 0);
    size_t m = tb_open(&s, TM_PF_PACKET_STREAMING_PROFILE_PACKET);
    tb_repeated(&s, TM_PF_STREAMING_CALLSTACK_IID, cs, 2);
    tb_packed(&s, TM_PF_STREAMING_TIMESTAMP_DELTA_US, dt, 2);
    tb_close(&s, m);
    tb_close(&s, p);
    cr_assert_eq(tc_check_trace(s.data, s.len, why, sizeof why), 1);
    cr_assert(strstr(why, "StreamingProfilePacket.timestamp_delta_us"), "%s", why);
    tb_free(&packed);
    tb_free(&unpacked);
    tb_free(&s);
}

Test(conformance, bundled_examples) {
    DIR *d = opendir(TM_SOURCE_DIR "/examples");
    cr_assert_not_null(d);
    struct dirent *e;
    int n = 0;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 9 || strcmp(e->d_name + l - 8, ".pftrace") != 0) continue;
        char path[4096], why[256];
        snprintf(path, sizeof path, "%s/examples/%s", TM_SOURCE_DIR, e->d_name);
        cr_expect_eq(check_file(path, why, sizeof why), 0, "%s: %s", e->d_name, why);
        n++;
    }
    closedir(d);
    cr_assert_geq(n, 1, "no .pftrace in examples/");
}

Test(conformance, gen_trace_output) {
    char dir[] = "/tmp/tm-conformance-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char out[4096], cmd[8192], why[256];
    snprintf(out, sizeof out, "%s/g.pftrace", dir);
    /* both sample kinds, and resets so that interned data is re-sent */
    snprintf(cmd, sizeof cmd, "'%s' '%s' --samples 4000 --threads 4 --resets 2 2>/dev/null", TM_GEN_TRACE, out);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    cr_expect_eq(check_file(out, why, sizeof why), 0, "%s", why);
    remove(out);
    rmdir(dir);
}
