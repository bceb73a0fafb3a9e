/* The spill store under a misbehaving disk: a randomized run against an oracle with the
 * fault-injecting backend, and a real small filesystem (tmpfs) that fills up. The rule in
 * both: what a read returns equals what was written, or the read returns an error. */
#include "strata/tier.h"
#include "../test.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <unistd.h>

#define SLOT 4096
#define MAX_LIVE 48

static void fill(uint8_t *p, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

static uint32_t rnd(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*st >> 33);
}

typedef struct live {
    st_slot slot;
    uint64_t key;
    size_t len;
} live;

/* One random fault rule (or none) for the next round. */
static st_io_fault_cfg random_faults(uint64_t *rs, st_io *f) {
    st_io_fault_counts c = st_io_fault_get_counts(f);
    st_io_fault_cfg cfg = {0};
    switch (rnd(rs) % 7) {
    case 0: cfg.fail_write_nth = c.writes + 1 + rnd(rs) % 6, cfg.fail_write_errno = EIO; break;
    case 1: cfg.short_write_max = 1 + rnd(rs) % 3000, cfg.short_read_max = 1 + rnd(rs) % 5000; break;
    case 2: cfg.eintr_storm = 1 + rnd(rs) % 20; break;
    case 3: cfg.eio_read_nth = c.reads + 1 + rnd(rs) % 3; break;
    case 4: cfg.corrupt_read_nth = c.reads + 1 + rnd(rs) % 3, cfg.corrupt_byte = rnd(rs); break;
    case 5: cfg.enospc_enabled = 1, cfg.enospc_after_bytes = c.bytes_written + rnd(rs) % (6 * SLOT); break;
    default: break;
    }
    return cfg;
}

TEST(test_faults_randomized_never_wrong_data) {
    st_io *m = NULL, *f = NULL;
    CHECK_OK(st_io_mem_create(&m));
    CHECK_OK(st_io_fault_create(m, NULL, &f));
    st_spill_params p = st_spill_default_params(SLOT);
    p.queue_depth = 4;
    p.max_read_bytes = 4 * SLOT;
    st_spill *s = NULL;
    CHECK_OK(st_spill_open_io(f, &p, NULL, &s));
    REQUIRE(s);
    uint64_t rs = 0x5eed;
    live lv[MAX_LIVE];
    int n_live = 0;
    uint64_t next_key = 1;
    static uint8_t src[SLOT], bufs[8][SLOT], want[SLOT];
    long ok_reads = 0, err_reads = 0, wrong = 0, err_writes = 0, nospace = 0;
    for (int round = 0; round < 300; round++) {
        CHECK_INT(st_spill_flush(s, 0, NULL) > 0, 0); /* quiesce before changing the rules */
        st_io_fault_cfg cfg = random_faults(&rs, f);
        st_io_fault_set(f, &cfg);
        for (int op = 0; op < 12; op++) {
            uint32_t what = rnd(&rs) % 10;
            if (what < 5 && n_live < MAX_LIVE) {
                size_t len = 1 + rnd(&rs) % SLOT;
                uint64_t key = next_key++;
                fill(src, len, (uint32_t)key);
                st_spill_page pg = {.data = src, .len = len, .type = ST_TYPE_I8, .key = key, .gen = key};
                st_slot sl;
                int rc = st_spill_write(s, &pg, 0, &sl, NULL);
                if (rc == ST_E_NOSPACE) {
                    nospace++;
                    if (n_live) { /* drop the oldest, as the pool drops cached pages */
                        CHECK_OK(st_spill_release(s, lv[0].slot, ST_SPILL_DROP));
                        lv[0] = lv[--n_live];
                    }
                    continue;
                }
                CHECK_OK(rc);
                if (!rc) lv[n_live++] = (live){sl, key, len};
            } else if (what < 8 && n_live) {
                int n = 1 + (int)(rnd(&rs) % 8);
                if (n > n_live) n = n_live;
                st_spill_rd rd[8];
                int idx[8];
                for (int i = 0; i < n; i++) {
                    idx[i] = (int)(rnd(&rs) % (uint32_t)n_live); /* duplicates allowed */
                    live *l = &lv[idx[i]];
                    rd[i] = (st_spill_rd){.slot = l->slot, .key = l->key, .gen = l->key, .buf = bufs[i], .len = l->len};
                }
                st_spill_read_batch(s, rd, n, NULL);
                for (int i = 0; i < n; i++) {
                    live *l = &lv[idx[i]];
                    if (rd[i].rc) {
                        err_reads++;
                        CHECK(rd[i].rc != ST_E_STATE);
                        continue;
                    }
                    ok_reads++;
                    fill(want, l->len, (uint32_t)l->key);
                    if (memcmp(want, bufs[i], l->len) != 0) wrong++;
                }
            } else if (n_live) {
                int i = (int)(rnd(&rs) % (uint32_t)n_live);
                CHECK_OK(st_spill_release(s, lv[i].slot, 0));
                lv[i] = lv[--n_live];
            }
        }
        /* A page whose write failed is lost for good: the pool fails its sequences. */
        for (int i = 0; i < n_live; i++) {
            int st = st_spill_slot_status(s, lv[i].slot);
            if (st < 0) {
                err_writes++;
                CHECK_OK(st_spill_release(s, lv[i].slot, 0));
                lv[i--] = lv[--n_live];
            }
        }
    }
    st_spill_stats st = st_spill_get_stats(s);
    fprintf(stderr, "  reads ok %ld, failed %ld (checksum %llu), lost writes %ld, nospace %ld, wrong %ld\n",
            ok_reads, err_reads, (unsigned long long)st.checksum_failures, err_writes, nospace, wrong);
    CHECK_INT(wrong, 0);
    CHECK(ok_reads > 500);
    CHECK(err_reads > 5);
    CHECK(st.checksum_failures > 0);
    CHECK(err_writes > 5);
    st_spill_close(s);
}

/* ---- a real filesystem that fills up ------------------------------------------------ */

TEST(test_faults_tmpfs_fills_up) {
    if (geteuid() != 0) {
        test_skip("not root: cannot mount a 1 MiB tmpfs to fill up");
        return;
    }
    char root[] = "/tmp/strata-tier-tmpfs-XXXXXX";
    REQUIRE(mkdtemp(root));
    if (mount("tmpfs", root, "tmpfs", 0, "size=1M")) {
        char why[128];
        snprintf(why, sizeof why, "mount -t tmpfs -o size=1M refused: %s", strerror(errno));
        test_skip(why);
        rmdir(root);
        return;
    }
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_spill_dir *d = NULL;
    CHECK_OK(st_spill_dir_open(root, "fill", ctx, &d));
    st_spill_params p = st_spill_default_params(64 * 1024);
    p.queue_depth = 4;
    st_spill *s = NULL;
    if (d) CHECK_OK(st_spill_open(d, &p, ctx, &s));
    if (!s) goto out;
    st_spill_info info = st_spill_get_info(s);
    fprintf(stderr, "  tmpfs: direct=%d uring=%d %s\n", info.direct, info.uring, info.why);
    enum { N = 40 };
    static uint8_t data[64 * 1024], back[64 * 1024];
    st_slot slots[N];
    int n = 0, rc = 0;
    for (; n < N; n++) {
        fill(data, sizeof data, (uint32_t)n);
        st_spill_page pg = {.data = data, .len = sizeof data, .type = ST_TYPE_I8, .key = (uint64_t)n, .gen = 1};
        rc = st_spill_write(s, &pg, 0, &slots[n], ctx);
        if (rc) break;
    }
    int frc = st_spill_flush(s, 0, ctx);
    fprintf(stderr, "  accepted %d writes, then %s; flush: %s\n", n, st_errname(rc), st_errname(frc));
    CHECK_INT(frc, -ENOSPC);
    int good = 0, lost = 0, wrong = 0;
    for (int i = 0; i < n; i++) {
        int st = st_spill_slot_status(s, slots[i]);
        int r = st_spill_read(s, slots[i], (uint64_t)i, 1, back, sizeof back, ctx);
        if (st == 0) {
            CHECK_OK(r);
            fill(data, sizeof data, (uint32_t)i);
            wrong += memcmp(data, back, sizeof data) != 0;
            good++;
        } else {
            CHECK_INT(st, -ENOSPC);
            CHECK_INT(r, -ENOSPC);
            lost++;
        }
    }
    fprintf(stderr, "  %d pages stored and verified, %d refused by the full filesystem\n", good, lost);
    CHECK(good >= 8); /* ~15 slots of 64 KiB fit in 1 MiB */
    CHECK(lost >= 1);
    CHECK_INT(wrong, 0);
    /* once the filesystem said ENOSPC, new slots are refused up front ... */
    st_slot extra;
    st_spill_page pg = {.data = data, .len = sizeof data, .type = ST_TYPE_I8, .key = 999, .gen = 1};
    CHECK_INT(st_spill_write(s, &pg, 0, &extra, ctx), ST_E_NOSPACE);
    fprintf(stderr, "  then: %s\n", st_ctx_error(ctx));
    /* ... and a released slot that has its blocks is reused and works */
    int victim = -1;
    for (int i = 0; i < n && victim < 0; i++)
        if (st_spill_slot_status(s, slots[i]) == 0) victim = i;
    REQUIRE(victim >= 0);
    CHECK_OK(st_spill_release(s, slots[victim], ST_SPILL_DROP));
    fill(data, sizeof data, 999);
    CHECK_OK(st_spill_write(s, &pg, 0, &extra, ctx));
    CHECK_OK(st_spill_flush(s, 0, ctx));
    CHECK_OK(st_spill_read(s, extra, 999, 1, back, sizeof back, ctx));
    CHECK(memcmp(data, back, sizeof data) == 0);
out:
    st_spill_close(s);
    st_spill_dir_close(d);
    st_ctx_destroy(ctx);
    CHECK_INT(umount2(root, MNT_DETACH), 0);
    rmdir(root);
}

TEST_MAIN(test_faults_randomized_never_wrong_data, test_faults_tmpfs_fills_up)
