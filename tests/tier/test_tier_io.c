/* st_io backends and loops, the fault injector, and cold compression. */
#include "strata/tier.h"
#include "../test.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

static st_io *mem_fault(const st_io_fault_cfg *cfg) {
    st_io *m = NULL, *f = NULL;
    if (st_io_mem_create(&m)) return NULL;
    if (st_io_fault_create(m, cfg, &f)) return NULL;
    return f;
}

TEST(test_io_short_transfers_and_eintr_storm) {
    st_io_fault_cfg cfg = {.short_write_max = 7, .short_read_max = 5, .eintr_storm = 3};
    st_io *io = mem_fault(&cfg);
    REQUIRE(io);
    enum { N = 10007 };
    static uint8_t a[N], b[N];
    fill(a, N, 1);
    CHECK_OK(st_io_pwrite_full(io, a, N, 100));
    CHECK_OK(st_io_pread_full(io, b, N, 100));
    CHECK(memcmp(a, b, N) == 0);
    st_io_fault_counts c = st_io_fault_get_counts(io);
    CHECK(c.injected_short > 1000);
    CHECK(c.injected_eintr > 3000);
    CHECK_INT(c.bytes_written, N);
    /* reading past the end is an error, not a short success */
    CHECK_INT(st_io_pread_full(io, b, 16, 100 + N - 8), ST_E_IO);
    st_io_close(io);
    st_io_close(NULL);
}

TEST(test_io_fail_nth_write) {
    st_io_fault_cfg cfg = {.fail_write_nth = 3, .fail_write_errno = EIO, .fail_write_count = 2};
    st_io *io = mem_fault(&cfg);
    REQUIRE(io);
    uint8_t a[64] = {1};
    CHECK_OK(st_io_pwrite_full(io, a, 64, 0));
    CHECK_OK(st_io_pwrite_full(io, a, 64, 64));
    CHECK_INT(st_io_pwrite_full(io, a, 64, 128), -EIO);
    CHECK_INT(st_io_pwrite_full(io, a, 64, 128), -EIO);
    CHECK_OK(st_io_pwrite_full(io, a, 64, 128));
    CHECK_INT(st_io_fault_get_counts(io).injected_errors, 2);
    st_io_close(io);
}

TEST(test_io_enospc_after_bytes) {
    st_io_fault_cfg cfg = {.enospc_enabled = 1, .enospc_after_bytes = 5000};
    st_io *io = mem_fault(&cfg);
    REQUIRE(io);
    uint8_t a[4096];
    fill(a, sizeof a, 2);
    CHECK_OK(st_io_pwrite_full(io, a, 4096, 0));
    CHECK_INT(st_io_pwrite_full(io, a, 4096, 4096), -ENOSPC);
    CHECK_INT(st_io_fault_get_counts(io).bytes_written, 5000); /* partial, like a real fs */
    CHECK_INT(st_io_pwrite_full(io, a, 1, 9000), -ENOSPC);
    st_io_close(io);
}

TEST(test_io_read_faults) {
    st_io_fault_cfg cfg = {.eio_read_nth = 2, .corrupt_read_nth = 3, .corrupt_byte = 10};
    st_io *io = mem_fault(&cfg);
    REQUIRE(io);
    uint8_t a[256], b[256];
    fill(a, sizeof a, 3);
    CHECK_OK(st_io_pwrite_full(io, a, 256, 0));
    CHECK_OK(st_io_pread_full(io, b, 256, 0));
    CHECK_INT(st_io_pread_full(io, b, 256, 0), -EIO);
    CHECK_OK(st_io_pread_full(io, b, 256, 0)); /* the byte flip is silent at this level */
    CHECK_INT(b[10], a[10] ^ 0x5a);
    CHECK_OK(st_io_pread_full(io, b, 256, 0));
    CHECK(memcmp(a, b, 256) == 0);
    CHECK_INT(st_io_fd(io), -1); /* io_uring must never bypass the injector */
    st_io_close(io);
}

TEST(test_io_fd_backend) {
    char path[] = "/tmp/strata-tier-io-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    st_io *io = NULL;
    CHECK_OK(st_io_fd_open(path, O_RDWR, 0, &io));
    REQUIRE(io);
    CHECK(st_io_fd(io) >= 0);
    uint8_t a[9000], b[9000];
    fill(a, sizeof a, 4);
    CHECK_OK(st_io_pwrite_full(io, a, sizeof a, 3));
    CHECK_OK(st_io_sync(io));
    CHECK_OK(st_io_pread_full(io, b, sizeof b, 3));
    CHECK(memcmp(a, b, sizeof a) == 0);
    st_io_close(io);
    unlink(path);
    CHECK_INT(st_io_fd_open("/nonexistent/dir/x", O_RDONLY, 0, &io), -ENOENT);
    CHECK(io == NULL);
}

/* ---- cold compression ------------------------------------------------------------- */

/* Named thresholds: the largest error of one element relative to its block's absmax.
 * q8: half a step of amax/127, plus the f16 rounding of the scale (2^-11 relative,
 * times up to 127 steps) and of an f16 destination. q4 (q4_0): one step of amax/8 at
 * the clamped end, plus scale rounding. */
#define COLD_Q8_TOL (0.5 / 127.0 + 127.0 / 127.0 * 0x1p-11 + 0x1p-10)
#define COLD_Q4_TOL (1.0 / 8.0 + 8.0 / 8.0 * 0x1p-11 + 0x1p-10)

static void cold_case(st_cold_type ct, st_type ty, size_t ne) {
    size_t es = ty == ST_TYPE_F32 ? 4 : 2;
    float *x = malloc(ne * sizeof *x);
    uint8_t *raw = malloc(ne * es), *back = malloc(ne * es);
    size_t cap = st_cold_bytes(ct, ty, ne * es);
    uint8_t *enc = malloc(cap + 1);
    uint32_t seed = (uint32_t)(ne * 31 + ct);
    for (size_t i = 0; i < ne; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = ((float)(seed >> 8) / 16777216.0f - 0.5f) * (i % 7 == 0 ? 40.0f : 3.0f);
        if (ty == ST_TYPE_F32) memcpy(raw + 4 * i, &v, 4);
        uint16_t h = ty == ST_TYPE_F16 ? st_fp32_to_fp16(v) : st_fp32_to_bf16(v);
        if (ty != ST_TYPE_F32) memcpy(raw + 2 * i, &h, 2);
        x[i] = ty == ST_TYPE_F32 ? v : ty == ST_TYPE_F16 ? st_fp16_to_fp32(h) : st_bf16_to_fp32(h);
    }
    size_t len = 0;
    CHECK_OK(st_cold_encode(ct, ty, raw, ne * es, enc, cap, &len));
    CHECK_INT(len, (ne + 31) / 32 * (ct == ST_COLD_Q8 ? 34 : 18));
    CHECK_OK(st_cold_decode(ct, ty, enc, len, back, ne * es));
    double tol = ct == ST_COLD_Q8 ? COLD_Q8_TOL : COLD_Q4_TOL;
    if (ty == ST_TYPE_BF16) tol += 0x1p-8; /* bf16 destination rounding */
    int bad = 0;
    for (size_t b0 = 0; b0 < ne; b0 += 32) {
        float amax = 0;
        for (size_t i = b0; i < ne && i < b0 + 32; i++) amax = fmaxf(amax, fabsf(x[i]));
        for (size_t i = b0; i < ne && i < b0 + 32; i++) {
            float y;
            if (ty == ST_TYPE_F32) memcpy(&y, back + 4 * i, 4);
            else {
                uint16_t h;
                memcpy(&h, back + 2 * i, 2);
                y = ty == ST_TYPE_F16 ? st_fp16_to_fp32(h) : st_bf16_to_fp32(h);
            }
            if (fabs((double)y - x[i]) > tol * amax + 1e-30) {
                if (!bad) fprintf(stderr, "  %s %s ne=%zu i=%zu x=%g y=%g amax=%g\n", st_cold_name(ct),
                                  st_type_name(ty), ne, i, x[i], y, amax);
                bad++;
            }
        }
    }
    CHECK_INT(bad, 0);
    CHECK_INT(st_cold_encode(ct, ty, raw, ne * es, enc, cap - 1, &len), ST_E_LIMIT);
    free(x), free(raw), free(back), free(enc);
}

TEST(test_cold_roundtrip_awkward_lengths) {
    static const size_t lens[] = {1, 3, 7, 15, 17, 31, 33, 127, 1023, 4096};
    static const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16};
    for (int c = ST_COLD_Q8; c <= ST_COLD_Q4; c++)
        for (int t = 0; t < 3; t++)
            for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) cold_case((st_cold_type)c, types[t], lens[i]);
}

TEST(test_cold_sizes_and_parse) {
    CHECK_INT(st_cold_bytes(ST_COLD_Q8, ST_TYPE_F16, 2 * 4096), 4096 / 32 * 34);
    CHECK_INT(st_cold_bytes(ST_COLD_Q4, ST_TYPE_F32, 4 * 4096), 4096 / 32 * 18);
    CHECK_INT(st_cold_bytes(ST_COLD_Q4, ST_TYPE_Q8_0, 1000), 1000); /* stored raw */
    CHECK_INT(st_cold_bytes(ST_COLD_NONE, ST_TYPE_F32, 1000), 1000);
    CHECK_INT(st_cold_bytes(ST_COLD_Q8, ST_TYPE_F32, 1001), 0);
    CHECK_INT(st_cold_parse("q8"), ST_COLD_Q8);
    CHECK_INT(st_cold_parse("Q4"), ST_COLD_Q4);
    CHECK_INT(st_cold_parse("none"), ST_COLD_NONE);
    CHECK_INT(st_cold_parse("q5"), -1);
    /* all-zero and non-finite input encode to zeros, never NaN */
    float z[32] = {0};
    z[3] = NAN;
    z[4] = INFINITY;
    uint8_t enc[34];
    float back[32];
    size_t len;
    CHECK_OK(st_cold_encode(ST_COLD_Q8, ST_TYPE_F32, z, sizeof z, enc, sizeof enc, &len));
    CHECK_OK(st_cold_decode(ST_COLD_Q8, ST_TYPE_F32, enc, len, back, sizeof back));
    for (int i = 0; i < 32; i++) CHECK(back[i] == 0.0f);
    CHECK_INT(st_cold_decode(ST_COLD_Q8, ST_TYPE_F32, enc, len - 1, back, sizeof back), ST_E_INVAL);
}

TEST_MAIN(test_io_short_transfers_and_eintr_storm, test_io_fail_nth_write, test_io_enospc_after_bytes,
          test_io_read_faults, test_io_fd_backend, test_cold_roundtrip_awkward_lengths,
          test_cold_sizes_and_parse)
