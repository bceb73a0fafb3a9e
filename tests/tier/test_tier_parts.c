/* The spill store with parts (n_parts > 1, what the KV pool uses: one part per layer
 * block): the part-major extent layout byte by byte, one coalesced read for the same part
 * of consecutive slots (read straight into the caller's buffer when it is contiguous),
 * whole-page and ranged reads, per-part checksums, cold coding, and failed part writes. */
#include "strata/tier.h"
#include "../test.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#define NP 4
#define PART 8192
#define PAGE (NP * PART)
#define HDR 4096

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

static st_spill_params parts_params(uint32_t budget_slots) {
    st_spill_params p = st_spill_default_params(PAGE);
    p.n_parts = NP;
    p.disk_budget = (uint64_t)budget_slots * PAGE;
    p.queue_depth = 4;
    return p;
}

static st_spill_page page_of(const uint8_t *data, uint64_t key) {
    return (st_spill_page){.data = data, .len = PAGE, .type = ST_TYPE_I8, .key = key, .gen = key + 1};
}

/* Writes n pages (page i = data + i*PAGE) and flushes. */
static void write_pages(st_spill *s, const uint8_t *data, int n, st_slot *slots) {
    for (int i = 0; i < n; i++) {
        st_spill_page pg = page_of(data + (size_t)i * PAGE, (uint64_t)i);
        CHECK_OK(st_spill_write(s, &pg, 0, &slots[i], NULL));
    }
    CHECK_OK(st_spill_flush(s, 0, NULL));
}

/* Part `part` of slots[0..n) into one contiguous buffer, one batch; returns the read I/Os. */
static uint64_t read_part(st_spill *s, const st_slot *slots, int n, uint32_t part, uint8_t *buf,
                          int expect_rc, st_spill_rd *rd) {
    for (int i = 0; i < n; i++)
        rd[i] = (st_spill_rd){.slot = slots[i], .key = (uint64_t)i, .gen = (uint64_t)i + 1,
                              .buf = buf + (size_t)i * PART, .len = PART, .part_first = part,
                              .part_count = 1};
    uint64_t ios = st_spill_get_stats(s).read_ios;
    CHECK_INT(st_spill_read_batch(s, rd, n, NULL), expect_rc);
    return st_spill_get_stats(s).read_ios - ios;
}

TEST(test_parts_layout_memory) {
    enum { N = 40, G = 32 }; /* the budget (G slots) bounds the extent */
    st_io *mem = NULL;
    REQUIRE(st_io_mem_create(&mem) == 0);
    st_spill_params p = parts_params(G);
    st_spill *s = NULL;
    REQUIRE(st_spill_open_io(mem, &p, NULL, &s) == 0);
    st_spill_info info = st_spill_get_info(s);
    CHECK_INT(info.slot_bytes, PAGE);
    CHECK_INT(info.part_bytes, PART);
    CHECK_INT(info.extent_slots, G);
    uint8_t *data = malloc((size_t)N * PAGE), *back = st_alloc_aligned((size_t)N * PAGE, 4096);
    REQUIRE(data && back);
    fill(data, (size_t)N * PAGE, 5);
    st_slot slots[N];
    write_pages(s, data, G, slots);
    CHECK_INT(st_spill_write(s, &(st_spill_page){.data = data, .len = PAGE, .type = ST_TYPE_I8},
                             0, &slots[G], NULL),
              ST_E_NOSPACE); /* budget */
    /* The header (docs/FORMATS.md): version 2, n_parts, extent, checksum. */
    size_t size = 0;
    const uint8_t *disk = st_io_mem_data(mem, &size);
    uint32_t v32;
    uint64_t v64;
    REQUIRE(disk && size >= HDR + (size_t)G * PAGE);
    CHECK(memcmp(disk, "STRSPILL", 8) == 0);
    memcpy(&v32, disk + 8, 4);
    CHECK_INT(v32, 2);
    memcpy(&v64, disk + 16, 8);
    CHECK_INT(v64, PAGE);
    memcpy(&v32, disk + 48, 4);
    CHECK_INT(v32, NP);
    memcpy(&v32, disk + 52, 4);
    CHECK_INT(v32, G);
    memcpy(&v64, disk + 56, 8);
    CHECK(v64 == XXH3_64bits(disk, 56));
    /* Part p of slot i at HDR + (i / G)*G*S + (p*G + i % G)*part_bytes. */
    int bad = 0;
    for (int i = 0; i < G; i++)
        for (int q = 0; q < NP; q++) {
            size_t off = HDR + (size_t)(slots[i] / G) * G * PAGE + ((size_t)q * G + slots[i] % G) * PART;
            bad += memcmp(disk + off, data + (size_t)i * PAGE + (size_t)q * PART, PART) != 0;
        }
    CHECK_INT(bad, 0);
    /* One part over all slots: one I/O, read in place, right bytes. */
    st_spill_rd rd[N];
    for (uint32_t q = 0; q < NP; q++) {
        memset(back, 0xee, (size_t)G * PART);
        CHECK_INT(read_part(s, slots, G, q, back, 0, rd), 1);
        bad = 0;
        for (int i = 0; i < G; i++)
            bad += memcmp(back + (size_t)i * PART, data + (size_t)i * PAGE + q * PART, PART) != 0;
        CHECK_INT(bad, 0);
    }
    /* Whole pages: one I/O per part for a run of slots; and a ranged read of parts [1, 3). */
    for (int i = 0; i < 8; i++)
        rd[i] = (st_spill_rd){.slot = slots[i], .key = (uint64_t)i, .gen = (uint64_t)i + 1,
                              .buf = back + (size_t)i * PAGE, .len = PAGE};
    uint64_t ios = st_spill_get_stats(s).read_ios;
    CHECK_OK(st_spill_read_batch(s, rd, 8, NULL));
    CHECK_INT(st_spill_get_stats(s).read_ios - ios, NP);
    CHECK(memcmp(back, data, (size_t)8 * PAGE) == 0);
    rd[0] = (st_spill_rd){.slot = slots[3], .key = 3, .gen = 4, .buf = back, .len = 2 * PART,
                          .part_first = 1, .part_count = 2};
    CHECK_OK(st_spill_read_batch(s, rd, 1, NULL));
    CHECK(memcmp(back, data + 3 * (size_t)PAGE + PART, 2 * PART) == 0);
    rd[0].len = PART; /* the length must match the range */
    CHECK_INT(st_spill_read_batch(s, rd, 1, NULL), ST_E_STATE);
    /* One rotten part: that entry fails and is zeroed; its neighbours in the same I/O and
     * the slot's other parts are fine; a whole-page read of it is all zeros. */
    uint8_t *dm = st_io_mem_data(mem, &size);
    dm[HDR + ((size_t)2 * G + slots[5]) * PART + 77] ^= 1; /* part 2 of slot 5 */
    memset(back, 0xee, (size_t)G * PART);
    CHECK_INT(read_part(s, slots, 10, 2, back, ST_E_CORRUPT, rd), 1);
    bad = 0;
    for (int i = 0; i < 10; i++) {
        CHECK_INT(rd[i].rc, i == 5 ? ST_E_CORRUPT : 0);
        if (i != 5) bad += memcmp(back + (size_t)i * PART, data + (size_t)i * PAGE + 2 * PART, PART) != 0;
    }
    CHECK_INT(bad, 0);
    int nz = 0;
    for (size_t k = 0; k < PART; k++) nz += back[5 * PART + k] != 0;
    CHECK_INT(nz, 0);
    rd[0] = (st_spill_rd){.slot = slots[5], .key = 5, .gen = 6, .buf = back, .len = PART,
                          .part_first = 1, .part_count = 1};
    CHECK_OK(st_spill_read_batch(s, rd, 1, NULL)); /* the slot's other parts are intact */
    CHECK(memcmp(back, data + 5 * (size_t)PAGE + PART, PART) == 0);
    memset(back, 0xee, PAGE);
    CHECK_INT(st_spill_read(s, slots[5], 5, 6, back, PAGE, NULL), ST_E_CORRUPT);
    nz = 0;
    for (size_t k = 0; k < PAGE; k++) nz += back[k] != 0;
    CHECK_INT(nz, 0);
    CHECK_INT(st_spill_get_stats(s).checksum_failures, 2);
    st_spill_close(s);
    free(data);
    st_free_aligned(back);
}

/* Real file: O_DIRECT (where the filesystem takes it) with io_uring or pread, reads into
 * the caller's buffer and through the bounce buffer, several extents. */
static void parts_file(int no_uring) {
    char root[] = "/tmp/strata-tier-parts-XXXXXX";
    REQUIRE(mkdtemp(root));
    st_spill_dir *d = NULL;
    REQUIRE(st_spill_dir_open(root, "t", NULL, &d) == 0);
    st_spill_params p = parts_params(0);
    p.no_uring = no_uring;
    p.max_read_bytes = 16 * PART;
    st_spill *s = NULL;
    REQUIRE(st_spill_open(d, &p, NULL, &s) == 0);
    st_spill_info info = st_spill_get_info(s);
    fprintf(stderr, "  direct=%d uring=%d extent=%u why=\"%s\"\n", info.direct, info.uring,
            info.extent_slots, info.why);
    CHECK_INT(info.extent_slots, 1024); /* 8 MiB runs of 8 KiB parts */
    enum { N = 100 };
    uint8_t *data = malloc((size_t)N * PAGE), *back = st_alloc_aligned((size_t)N * PAGE + PART, 4096);
    REQUIRE(data && back);
    fill(data, (size_t)N * PAGE, 9);
    st_slot slots[N];
    write_pages(s, data, N, slots);
    st_spill_rd rd[N];
    /* In place (aligned, contiguous): 100 parts of 8 KiB, at most 16 per I/O. */
    CHECK_INT(read_part(s, slots, N, 3, back, 0, rd), (N + 15) / 16);
    int bad = 0;
    for (int i = 0; i < N; i++)
        bad += memcmp(back + (size_t)i * PART, data + (size_t)i * PAGE + 3 * PART, PART) != 0;
    CHECK_INT(bad, 0);
    /* Misaligned destination: through the bounce buffer, same bytes. */
    memset(back, 0, (size_t)N * PAGE);
    CHECK_INT(read_part(s, slots, N, 1, back + 512, 0, rd), (N + 15) / 16);
    bad = 0;
    for (int i = 0; i < N; i++)
        bad += memcmp(back + 512 + (size_t)i * PART, data + (size_t)i * PAGE + PART, PART) != 0;
    CHECK_INT(bad, 0);
    /* Whole pages in reverse order (the store sorts). */
    for (int i = 0; i < N; i++) {
        int j = N - 1 - i;
        rd[i] = (st_spill_rd){.slot = slots[j], .key = (uint64_t)j, .gen = (uint64_t)j + 1,
                              .buf = back + (size_t)j * PAGE, .len = PAGE};
    }
    CHECK_OK(st_spill_read_batch(s, rd, N, NULL));
    CHECK(memcmp(back, data, (size_t)N * PAGE) == 0);
    st_spill_close(s);
    st_spill_dir_close(d);
    CHECK_INT(rmdir(root), 0);
    free(data);
    st_free_aligned(back);
}

TEST(test_parts_file_uring) { parts_file(0); }
TEST(test_parts_file_pread) { parts_file(1); }

TEST(test_parts_cold_q8) {
    st_io *mem = NULL;
    REQUIRE(st_io_mem_create(&mem) == 0);
    enum { E = PART / 4 }; /* f32 elements per part */
    st_spill_params p = parts_params(8);
    p.cold = ST_COLD_Q8;
    st_spill *s = NULL;
    REQUIRE(st_spill_open_io(mem, &p, NULL, &s) == 0);
    float *x = malloc(PAGE), *y = malloc(PAGE);
    REQUIRE(x && y);
    for (int i = 0; i < NP * E; i++) x[i] = (float)((i * 37) % 101 - 50) / 16.0f;
    st_spill_page pg = {.data = x, .len = PAGE, .type = ST_TYPE_F32, .key = 1, .gen = 2};
    st_slot sl;
    CHECK_OK(st_spill_write(s, &pg, 0, &sl, NULL));
    CHECK_OK(st_spill_flush(s, 0, NULL));
    st_spill_stats st = st_spill_get_stats(s);
    CHECK_INT(st.bytes_stored, NP * (E / 32) * 34);
    CHECK_INT(st.bytes_written, NP * 4096); /* 2176 B per part, padded to a block each */
    st_spill_rd rd = {.slot = sl, .key = 1, .gen = 2, .buf = y, .len = PART, .part_first = 2,
                      .part_count = 1};
    CHECK_OK(st_spill_read_batch(s, &rd, 1, NULL));
    double err = 0;
    for (int i = 0; i < E; i++) {
        double e = y[i] - x[2 * E + i];
        err = e * e > err ? e * e : err;
    }
    CHECK(err < 0.05 * 0.05);
    CHECK_OK(st_spill_read(s, sl, 1, 2, y, PAGE, NULL));
    err = 0;
    for (int i = 0; i < NP * E; i++) {
        double e = y[i] - x[i];
        err = e * e > err ? e * e : err;
    }
    CHECK(err < 0.05 * 0.05);
    st_spill_close(s);
    free(x), free(y);
}

/* One failed part write fails the whole slot; ENOSPC in the middle of a slot's parts
 * fails it and caps the store at the slots it had. */
TEST(test_parts_failed_part_write) {
    st_io *m = NULL, *f = NULL;
    REQUIRE(st_io_mem_create(&m) == 0);
    st_io_fault_cfg cfg = {0};
    REQUIRE(st_io_fault_create(m, &cfg, &f) == 0);
    st_spill_params p = parts_params(0);
    st_spill *s = NULL;
    REQUIRE(st_spill_open_io(f, &p, NULL, &s) == 0);
    CHECK_OK(st_spill_flush(s, 0, NULL));
    uint8_t *a = malloc(PAGE), *b = malloc(PAGE);
    REQUIRE(a && b);
    fill(a, PAGE, 3);
    cfg.fail_write_nth = st_io_fault_get_counts(f).writes + NP + 3; /* 2nd page, 3rd part */
    cfg.fail_write_errno = EIO;
    st_io_fault_set(f, &cfg);
    st_slot sl[3];
    for (int i = 0; i < 3; i++) {
        st_spill_page pg = page_of(a, (uint64_t)i);
        CHECK_OK(st_spill_write(s, &pg, 0, &sl[i], NULL));
        CHECK_INT(st_spill_flush(s, 0, NULL), i == 1 ? -EIO : 0);
    }
    CHECK_INT(st_spill_slot_status(s, sl[1]), -EIO);
    CHECK_INT(st_spill_read(s, sl[1], 1, 2, b, PAGE, NULL), -EIO);
    st_spill_rd rd = {.slot = sl[1], .key = 1, .gen = 2, .buf = b, .len = PART, .part_count = 1};
    CHECK_INT(st_spill_read_batch(s, &rd, 1, NULL), -EIO); /* its good parts too */
    CHECK_OK(st_spill_read(s, sl[2], 2, 3, b, PAGE, NULL));
    CHECK(memcmp(a, b, PAGE) == 0);
    CHECK_INT(st_spill_get_stats(s).write_errors, 1);
    /* ENOSPC after one more page and half of the next */
    cfg = (st_io_fault_cfg){.enospc_enabled = 1,
                            .enospc_after_bytes = st_io_fault_get_counts(f).bytes_written +
                                                  PAGE + 2 * PART};
    st_io_fault_set(f, &cfg);
    st_slot ok, bad;
    st_spill_page pg = page_of(a, 7);
    CHECK_OK(st_spill_write(s, &pg, 0, &ok, NULL));
    CHECK_OK(st_spill_flush(s, 0, NULL));
    pg.key = 8;
    CHECK_OK(st_spill_write(s, &pg, 0, &bad, NULL));
    CHECK_INT(st_spill_flush(s, 0, NULL), -ENOSPC);
    CHECK_INT(st_spill_slot_status(s, bad), -ENOSPC);
    CHECK_OK(st_spill_read(s, ok, 7, 8, b, PAGE, NULL));
    CHECK(memcmp(a, b, PAGE) == 0);
    /* Only slots whose blocks exist may be written now: the failed one is not one. */
    CHECK_OK(st_spill_release(s, bad, 0));
    st_slot again;
    pg.key = 9;
    CHECK_INT(st_spill_write(s, &pg, 0, &again, NULL), ST_E_NOSPACE);
    CHECK_OK(st_spill_release(s, sl[0], 0));
    CHECK_OK(st_spill_write(s, &pg, 0, &again, NULL)); /* a backed slot is reused */
    CHECK_INT(again, sl[0]);
    st_spill_close(s);
    free(a), free(b);
}

TEST_MAIN(test_parts_layout_memory, test_parts_file_uring, test_parts_file_pread,
          test_parts_cold_q8, test_parts_failed_part_write)
