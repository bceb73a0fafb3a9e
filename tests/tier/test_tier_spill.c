/* The spill store: round trips (memory, fd + io_uring, fd + pread/pwrite, O_DIRECT and
 * buffered), coalesced batch reads, checksums, budget, write-behind errors, staging reads. */
#include "strata/tier.h"
#include "../test.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <xxhash.h>

#define SLOT 8192

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

static st_spill_page page(const void *data, size_t len, uint64_t key) {
    st_spill_page pg = {.data = data, .len = len, .type = ST_TYPE_I8, .key = key, .gen = key * 7 + 1};
    return pg;
}

static st_spill *open_mem(const st_spill_params *p, st_io **mem_out) {
    st_io *m = NULL;
    st_spill *s = NULL;
    if (st_io_mem_create(&m)) return NULL;
    if (mem_out) *mem_out = m;
    if (st_spill_open_io(m, p, NULL, &s)) return NULL;
    return s;
}

TEST(test_spill_roundtrip_memory) {
    st_spill_params p = st_spill_default_params(SLOT - 100); /* rounded up to 8192 */
    st_spill *s = open_mem(&p, NULL);
    REQUIRE(s);
    st_spill_info info = st_spill_get_info(s);
    CHECK_INT(info.slot_bytes, SLOT);
    CHECK_INT(info.uring, 0);
    enum { N = 40 };
    static uint8_t data[N][SLOT], back[SLOT];
    st_slot slots[N];
    for (int i = 0; i < N; i++) {
        size_t len = 1 + (size_t)i * 197 % (SLOT - 100);
        fill(data[i], len, (uint32_t)i);
        st_spill_page pg = page(data[i], len, (uint64_t)i);
        CHECK_OK(st_spill_write(s, &pg, 0, &slots[i], NULL));
        if (i % 3 == 0) { /* release some and let later writes reuse them */
            CHECK_OK(st_spill_release(s, slots[i], ST_SPILL_DROP));
            CHECK_INT(st_spill_release(s, slots[i], 0), ST_E_STATE); /* double release */
            slots[i] = ST_SLOT_NONE;
        }
    }
    CHECK_OK(st_spill_flush(s, 1, NULL));
    for (int i = 0; i < N; i++) {
        if (slots[i] == ST_SLOT_NONE) continue;
        size_t len = 1 + (size_t)i * 197 % (SLOT - 100);
        CHECK_INT(st_spill_slot_status(s, slots[i]), 0);
        CHECK_OK(st_spill_read(s, slots[i], (uint64_t)i, (uint64_t)i * 7 + 1, back, len, NULL));
        CHECK(memcmp(back, data[i], len) == 0);
    }
    st_spill_stats st = st_spill_get_stats(s);
    CHECK_INT(st.writes, N);
    CHECK_INT(st.drops, (N + 2) / 3);
    CHECK_INT(st.slots_used, N - (N + 2) / 3);
    CHECK(st.slots_hwm < N); /* released slots were reused */
    CHECK_INT(st.checksum_failures + st.write_errors + st.read_errors, 0);
    /* wrong identity or length is a state error, not data */
    int k = 1;
    CHECK_INT(st_spill_read(s, slots[k], 99, 8, back, 1 + 197, NULL), ST_E_STATE);
    CHECK_INT(st_spill_read(s, slots[k], 1, 8, back, 10, NULL), ST_E_STATE);
    CHECK_INT(st_spill_read(s, 12345, 1, 8, back, 10, NULL), ST_E_STATE);
    st_spill_page big = page(data[0], SLOT + 1, 0);
    st_slot sl;
    CHECK_INT(st_spill_write(s, &big, 0, &sl, NULL), ST_E_LIMIT);
    CHECK_INT(sl, ST_SLOT_NONE);
    st_spill_close(s);
    st_spill_close(NULL);
}

/* Real files: O_DIRECT (or not) x io_uring (or not); batch reads must coalesce. */
static void file_roundtrip(int no_direct, int no_uring) {
    char root[] = "/tmp/strata-tier-spill-XXXXXX";
    REQUIRE(mkdtemp(root));
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_spill_dir *d = NULL;
    CHECK_OK(st_spill_dir_open(root, "t", ctx, &d));
    REQUIRE(d);
    st_spill_params p = st_spill_default_params(SLOT);
    p.no_direct = no_direct;
    p.no_uring = no_uring;
    p.queue_depth = 4;
    p.max_read_bytes = 16 * SLOT;
    st_spill *s = NULL;
    CHECK_OK(st_spill_open(d, &p, ctx, &s));
    REQUIRE(s);
    st_spill_info info = st_spill_get_info(s);
    fprintf(stderr, "  direct=%d uring=%d why=\"%s\"\n", info.direct, info.uring, info.why);
    if (no_direct) CHECK_INT(info.direct, 0);
    if (no_uring) CHECK_INT(info.uring, 0);
    if (!no_uring && !info.uring) test_untested("io_uring refused here: only the fallback ran");
    enum { N = 64 };
    uint8_t *data = malloc((size_t)N * SLOT), *back = malloc((size_t)N * SLOT);
    st_slot slots[N];
    for (int i = 0; i < N; i++) {
        fill(data + (size_t)i * SLOT, SLOT, (uint32_t)i + 100);
        st_spill_page pg = page(data + (size_t)i * SLOT, SLOT - (i % 5) * 1000, (uint64_t)i);
        CHECK_OK(st_spill_write(s, &pg, 0, &slots[i], ctx));
    }
    CHECK_OK(st_spill_flush(s, 0, ctx));
    st_spill_rd rd[N];
    for (int i = 0; i < N; i++) { /* a permutation: the store sorts */
        int j = (i * 37) % N;
        rd[i] = (st_spill_rd){.slot = slots[j], .key = (uint64_t)j, .gen = (uint64_t)j * 7 + 1,
                              .buf = back + (size_t)j * SLOT, .len = SLOT - (j % 5) * 1000};
    }
    st_spill_stats before = st_spill_get_stats(s);
    CHECK_OK(st_spill_read_batch(s, rd, N, ctx));
    st_spill_stats after = st_spill_get_stats(s);
    int bad = 0;
    for (int j = 0; j < N; j++)
        bad += memcmp(back + (size_t)j * SLOT, data + (size_t)j * SLOT, SLOT - (j % 5) * 1000) != 0;
    CHECK_INT(bad, 0);
    CHECK_INT(after.reads - before.reads, N);
    CHECK_INT(after.read_ios - before.read_ios, N / 16); /* 64 adjacent slots, 16 per I/O */
    /* async prefetch form */
    st_spill_ticket *t = NULL;
    memset(back, 0, SLOT);
    CHECK_OK(st_spill_read_submit(s, rd, 1, &t));
    CHECK_OK(st_spill_read_wait(s, t, ctx));
    int j0 = 0; /* rd[0] is j = 0 */
    CHECK(memcmp(back, data, SLOT - (j0 % 5) * 1000) == 0);
    st_spill_close(s);
    st_spill_dir_close(d);
    CHECK_INT(rmdir(root), 0);
    free(data), free(back);
    st_ctx_destroy(ctx);
}

TEST(test_spill_file_direct_uring) { file_roundtrip(0, 0); }
TEST(test_spill_file_direct_pread) { file_roundtrip(0, 1); }
TEST(test_spill_file_buffered_uring) { file_roundtrip(1, 0); }
TEST(test_spill_file_buffered_pread) { file_roundtrip(1, 1); }

/* A filesystem that accepts O_DIRECT at open but refuses the first I/O with EINVAL. */
static int einval_open(void *arg, const char *path, int direct, st_io **out) {
    int rc = st_io_fd_open(path, O_RDWR | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0600, out);
    if (rc || !direct) return rc;
    st_io_fault_cfg cfg = {.fail_write_nth = 1, .fail_write_errno = EINVAL, .fail_write_count = 1000};
    return st_io_fault_create(*out, &cfg, out);
}

TEST(test_spill_direct_einval_falls_back) {
    char root[] = "/tmp/strata-tier-spill-XXXXXX";
    REQUIRE(mkdtemp(root));
    st_spill_dir *d = NULL;
    CHECK_OK(st_spill_dir_open(root, "t", NULL, &d));
    REQUIRE(d);
    st_spill_params p = st_spill_default_params(4096);
    p.open_fn = einval_open;
    st_spill *s = NULL;
    CHECK_OK(st_spill_open(d, &p, NULL, &s));
    REQUIRE(s);
    st_spill_info info = st_spill_get_info(s);
    CHECK_INT(info.direct, 0);
    CHECK(strstr(info.why, "first write") != NULL);
    fprintf(stderr, "  why=\"%s\"\n", info.why);
    uint8_t a[4096], b[4096];
    fill(a, sizeof a, 9);
    st_slot sl;
    st_spill_page pg = page(a, sizeof a, 5);
    CHECK_OK(st_spill_write(s, &pg, 0, &sl, NULL));
    CHECK_OK(st_spill_read(s, sl, 5, 36, b, sizeof b, NULL));
    CHECK(memcmp(a, b, sizeof a) == 0);
    st_spill_close(s);
    st_spill_dir_close(d);
    CHECK_INT(rmdir(root), 0);
}

TEST(test_spill_checksum_detects_corruption) {
    st_spill_params p = st_spill_default_params(4096);
    st_io *mem = NULL;
    st_spill *s = open_mem(&p, &mem);
    REQUIRE(s);
    uint8_t a[3000], b[3000];
    fill(a, sizeof a, 11);
    st_slot s0, s1, s2;
    st_spill_page pg = page(a, sizeof a, 1);
    CHECK_OK(st_spill_write(s, &pg, 0, &s0, NULL));
    CHECK_OK(st_spill_write(s, &pg, 0, &s1, NULL));
    pg.has_checksum = 1; /* an end-to-end checksum that does not match the data */
    pg.checksum = XXH3_64bits(a, sizeof a) ^ 1;
    CHECK_OK(st_spill_write(s, &pg, 0, &s2, NULL));
    CHECK_OK(st_spill_flush(s, 0, NULL));
    size_t size = 0;
    uint8_t *disk = st_io_mem_data(mem, &size);
    REQUIRE(disk && size >= 4096 + 2 * 4096);
    disk[4096 + (size_t)s1 * 4096 + 1234] ^= 0x10; /* one bit of slot s1 rots */
    memset(b, 0xee, sizeof b);
    CHECK_OK(st_spill_read(s, s0, 1, 8, b, sizeof b, NULL));
    CHECK(memcmp(a, b, sizeof a) == 0);
    memset(b, 0xee, sizeof b);
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    CHECK_INT(st_spill_read(s, s1, 1, 8, b, sizeof b, ctx), ST_E_CORRUPT);
    fprintf(stderr, "  %s\n", st_ctx_error(ctx));
    int nz = 0;
    for (size_t i = 0; i < sizeof b; i++) nz += b[i] != 0;
    CHECK_INT(nz, 0); /* zeroed, never the rotten bytes */
    CHECK_INT(st_spill_read(s, s2, 1, 8, b, sizeof b, NULL), ST_E_CORRUPT);
    CHECK_INT(st_spill_get_stats(s).checksum_failures, 2);
    st_ctx_destroy(ctx);
    st_spill_close(s);
}

TEST(test_spill_disk_budget) {
    st_spill_params p = st_spill_default_params(4096);
    p.disk_budget = 4 * 4096 + 100;
    st_spill *s = open_mem(&p, NULL);
    REQUIRE(s);
    uint8_t a[4096] = {7};
    st_slot sl[5];
    st_spill_page pg = page(a, sizeof a, 1);
    for (int i = 0; i < 4; i++) CHECK_OK(st_spill_write(s, &pg, 0, &sl[i], NULL));
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    CHECK_INT(st_spill_write(s, &pg, 0, &sl[4], ctx), ST_E_NOSPACE);
    CHECK(strstr(st_ctx_error(ctx), "budget") != NULL);
    st_spill_stats st = st_spill_get_stats(s);
    CHECK_INT(st.slots_used, 4);
    CHECK_INT(st.slots_max, 4);
    CHECK_INT(st.bytes_used, 4 * 4096);
    CHECK_INT(st.nospace, 1);
    CHECK_OK(st_spill_release(s, sl[2], ST_SPILL_DROP)); /* the caller drops a cached page */
    CHECK_OK(st_spill_write(s, &pg, 0, &sl[4], ctx));
    CHECK_INT(sl[4], sl[2]);
    st_ctx_destroy(ctx);
    st_spill_close(s);
}

TEST(test_spill_cold_q8_saves_bytes) {
    enum { NE = 2048 };
    st_spill_params p = st_spill_default_params(NE * 2);
    p.cold = ST_COLD_Q8;
    st_spill *s = open_mem(&p, NULL);
    REQUIRE(s);
    uint16_t x[NE], y[NE];
    for (int i = 0; i < NE; i++) x[i] = st_fp32_to_fp16(sinf((float)i * 0.37f) * 3.0f);
    st_spill_page pg = {.data = x, .len = sizeof x, .type = ST_TYPE_F16, .key = 3, .gen = 4};
    st_slot sl;
    CHECK_OK(st_spill_write(s, &pg, 0, &sl, NULL));
    CHECK_OK(st_spill_flush(s, 0, NULL));
    CHECK_OK(st_spill_read(s, sl, 3, 4, y, sizeof y, NULL));
    double maxerr = 0;
    for (int i = 0; i < NE; i++) maxerr = fmax(maxerr, fabs(st_fp16_to_fp32(x[i]) - st_fp16_to_fp32(y[i])));
    CHECK(maxerr <= 3.0 * (0.5 / 127 + 0x1p-10) + 1e-3);
    st_spill_stats st = st_spill_get_stats(s);
    CHECK_INT(st.bytes_logical, sizeof x);
    CHECK_INT(st.bytes_stored, NE / 32 * 34);
    CHECK_INT(st.bytes_written, 4096 /* 2176 B padded */);
    fprintf(stderr, "  q8 f16 page: %llu -> %llu bytes (%.0f%% saved), max err %.4f\n",
            (unsigned long long)st.bytes_logical, (unsigned long long)st.bytes_stored,
            100.0 * (1.0 - (double)st.bytes_stored / (double)st.bytes_logical), maxerr);
    st_spill_close(s);
}

/* ---- a backend whose writes wait at a gate: write-behind made observable ---------- */

typedef struct gate_io {
    st_io io;
    st_io *inner;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;
} gate_io;

static ssize_t gate_pwrite(st_io *io, const void *b, size_t n, uint64_t off) {
    gate_io *g = (gate_io *)io;
    pthread_mutex_lock(&g->mu);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return g->inner->ops->pwrite(g->inner, b, n, off);
}
static ssize_t gate_pread(st_io *io, void *b, size_t n, uint64_t off) {
    return ((gate_io *)io)->inner->ops->pread(((gate_io *)io)->inner, b, n, off);
}
static int gate_fsync(st_io *io) { return 0; }
static void gate_close(st_io *io) {
    gate_io *g = (gate_io *)io;
    st_io_close(g->inner);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}
static const st_io_ops gate_ops = {gate_pread, gate_pwrite, gate_fsync, gate_close, NULL, NULL};

static void gate_set(gate_io *g, int open) {
    pthread_mutex_lock(&g->mu);
    g->open = open;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static int done_calls;
static void on_done(void *arg, st_slot slot, uint64_t key, uint64_t gen, int rc) {
    __atomic_add_fetch((int *)arg, 1, __ATOMIC_SEQ_CST);
}

TEST(test_spill_write_behind_staging) {
    gate_io *g = calloc(1, sizeof *g);
    REQUIRE(g);
    g->io.ops = &gate_ops;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = 1; /* let the header through */
    CHECK_OK(st_io_mem_create(&g->inner));
    st_spill_params p = st_spill_default_params(4096);
    p.queue_depth = 2;
    p.on_done = on_done;
    p.done_arg = &done_calls;
    st_spill *s = NULL;
    CHECK_OK(st_spill_open_io(&g->io, &p, NULL, &s));
    REQUIRE(s);
    gate_set(g, 0);
    uint8_t a[4096], b[4096];
    fill(a, sizeof a, 21);
    st_slot s0, s1, s2;
    st_spill_page pg = page(a, sizeof a, 1);
    CHECK_OK(st_spill_write(s, &pg, 0, &s0, NULL));
    fill(a, sizeof a, 22); /* the caller reuses its buffer at once */
    pg.key = 2, pg.gen = 15;
    CHECK_OK(st_spill_write(s, &pg, 0, &s1, NULL));
    CHECK_INT(st_spill_write(s, &pg, ST_SPILL_NOWAIT, &s2, NULL), -EAGAIN); /* queue full */
    CHECK_INT(st_spill_slot_status(s, s0), 1);
    /* read-your-writes while the disk has not got it: served from staging */
    CHECK_OK(st_spill_read(s, s1, 2, 15, b, sizeof b, NULL));
    CHECK(memcmp(a, b, sizeof a) == 0);
    fill(a, sizeof a, 21);
    CHECK_OK(st_spill_read(s, s0, 1, 8, b, sizeof b, NULL));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_INT(st_spill_get_stats(s).staged_reads, 2);
    CHECK_OK(st_spill_release(s, s0, 0)); /* released in flight: freed on completion */
    CHECK_INT(st_spill_slot_status(s, s0), ST_E_STATE);
    CHECK_INT(st_spill_get_stats(s).slots_used, 2);
    gate_set(g, 1);
    CHECK_OK(st_spill_flush(s, 1, NULL));
    st_spill_stats st = st_spill_get_stats(s);
    CHECK_INT(st.slots_used, 1);
    CHECK_INT(st.writes, 2);
    CHECK_INT(__atomic_load_n(&done_calls, __ATOMIC_SEQ_CST), 2);
    CHECK_INT(st_spill_slot_status(s, s1), 0);
    st_spill_close(s); /* closes g */
}

TEST(test_spill_write_errors_surface_later) {
    st_io *m = NULL, *f = NULL;
    CHECK_OK(st_io_mem_create(&m));
    st_io_fault_cfg cfg = {0};
    CHECK_OK(st_io_fault_create(m, &cfg, &f));
    st_spill_params p = st_spill_default_params(4096);
    st_spill *s = NULL;
    CHECK_OK(st_spill_open_io(f, &p, NULL, &s));
    REQUIRE(s);
    CHECK_OK(st_spill_flush(s, 0, NULL));
    cfg.fail_write_nth = st_io_fault_get_counts(f).writes + 2; /* the 2nd page write */
    cfg.fail_write_errno = EIO;
    st_io_fault_set(f, &cfg);
    uint8_t a[4096], b[4096];
    fill(a, sizeof a, 31);
    st_slot sl[3];
    st_spill_page pg = page(a, sizeof a, 1);
    for (int i = 0; i < 3; i++) {
        CHECK_OK(st_spill_write(s, &pg, 0, &sl[i], NULL)); /* write-behind: accepted */
        CHECK_INT(st_spill_flush(s, 0, NULL), i == 1 ? -EIO : 0); /* returned once */
    }
    CHECK_INT(st_spill_slot_status(s, sl[0]), 0);
    CHECK_INT(st_spill_slot_status(s, sl[1]), -EIO);
    CHECK_INT(st_spill_read(s, sl[1], 1, 8, b, sizeof b, NULL), -EIO);
    CHECK_OK(st_spill_read(s, sl[2], 1, 8, b, sizeof b, NULL));
    CHECK(memcmp(a, b, sizeof a) == 0);
    CHECK_INT(st_spill_get_stats(s).write_errors, 1);
    CHECK_OK(st_spill_release(s, sl[1], 0));
    /* fsync failure: slots written since the last good fsync become -EIO */
    CHECK_OK(st_spill_flush(s, 1, NULL));
    cfg = (st_io_fault_cfg){.fail_fsync_nth = st_io_fault_get_counts(f).fsyncs + 1};
    st_io_fault_set(f, &cfg);
    st_slot late;
    CHECK_OK(st_spill_write(s, &pg, 0, &late, NULL));
    CHECK_INT(st_spill_flush(s, 1, NULL), -EIO);
    CHECK_OK(st_spill_flush(s, 1, NULL)); /* reported once */
    CHECK_INT(st_spill_read(s, late, 1, 8, b, sizeof b, NULL), -EIO);
    CHECK_OK(st_spill_read(s, sl[0], 1, 8, b, sizeof b, NULL)); /* synced before: intact */
    CHECK_INT(st_spill_get_stats(s).sync_errors, 1);
    st_spill_close(s);
}

TEST_MAIN(test_spill_roundtrip_memory, test_spill_file_direct_uring, test_spill_file_direct_pread,
          test_spill_file_buffered_uring, test_spill_file_buffered_pread,
          test_spill_direct_einval_falls_back, test_spill_checksum_detects_corruption,
          test_spill_disk_budget, test_spill_cold_q8_saves_bytes, test_spill_write_behind_staging,
          test_spill_write_errors_surface_later)
