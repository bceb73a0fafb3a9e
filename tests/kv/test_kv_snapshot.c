/* KV snapshots: round trip (memory, FILE*, fd), the max_pages cut, a restored ledger
 * shorter than the pool, every truncation point and every flipped byte rejected cleanly
 * with nothing changed, geometry/type/fingerprint mismatches, faulty I/O backends, the
 * attention ledger (written, restored, absent in an older stream, refused when bad). */
#include "strata/attn.h"
#include "strata/kv.h"
#include "kv/kv_int.h"
#include "../test.h"

#include <errno.h>
#include <math.h>
#include <unistd.h>

static st_kv *mk(st_ctx *ctx, st_type type, int n_pages, int D, uint8_t fp) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = 2;
    p.n_kv_head = 1;
    p.head_dim = D;
    p.page_size = 8;
    p.type = type;
    p.n_pages = n_pages;
    p.max_seqs = 8;
    p.fingerprint.b[3] = fp;
    st_kv *kv = NULL;
    st_kv_create(ctx, &p, &kv);
    return kv;
}

static void fill(st_kv *kv, st_kv_seq_id s, int n, int t0, const int32_t *toks) {
    const st_kv_geometry *g = st_kv_get_geometry(kv);
    float k[2 * 64 * 8], v[2 * 64 * 8];
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < n; j++)
            for (int d = 0; d < g->head_dim; d++) {
                k[(l * n + j) * g->head_dim + d] = (float)(t0 + j) * 0.25f + d + 10 * l;
                v[(l * n + j) * g->head_dim + d] = -(float)(t0 + j) * 0.5f - d - 10 * l;
            }
    CHECK_OK(st_kv_seq_append(kv, s, n, toks, k, v));
}

/* Builds: seq A (keyed, 21 tokens, a removed range), B = fork(A) + 3 tokens, C anonymous
 * with a hole. */
static void build(st_kv *kv, st_kv_seq_id *ids) {
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 3 * i + 1;
    CHECK_OK(st_kv_seq_create(kv, &ids[0]));
    fill(kv, ids[0], 21, 0, toks);
    CHECK_OK(st_kv_seq_remove(kv, ids[0], 2, 4));
    CHECK_OK(st_kv_seq_fork(kv, ids[0], &ids[1]));
    fill(kv, ids[1], 3, 21, toks + 21);
    CHECK_OK(st_kv_seq_create(kv, &ids[2]));
    fill(kv, ids[2], 30, 100, NULL);
    CHECK_OK(st_kv_seq_remove(kv, ids[2], 8, 16));
}

/* Same length, validity, tokens and K/V (f32 compare of what read returns). */
static void same_seq(st_kv *a, st_kv_seq_id sa, st_kv *b, st_kv_seq_id sb, int64_t len) {
    int64_t la, lb;
    CHECK_OK(st_kv_seq_len(a, sa, &la));
    CHECK_OK(st_kv_seq_len(b, sb, &lb));
    CHECK_INT(lb, len);
    REQUIRE(la >= len);
    int32_t ta[64], tb[64];
    CHECK_OK(st_kv_seq_tokens(a, sa, 0, len, ta));
    CHECK_OK(st_kv_seq_tokens(b, sb, 0, len, tb));
    CHECK(memcmp(ta, tb, sizeof(int32_t) * (size_t)len) == 0);
    const int D = st_kv_get_geometry(a)->head_dim;
    for (int64_t p = 0; p < len; p++) {
        int va, vb;
        CHECK_OK(st_kv_seq_valid(a, sa, p, &va));
        CHECK_OK(st_kv_seq_valid(b, sb, p, &vb));
        CHECK_INT(va, vb);
        if (!va) continue;
        for (int l = 0; l < 2; l++) {
            float ka[64], kb[64], xa[64], xb[64];
            CHECK_OK(st_kv_read(a, sa, l, p, 1, ka, xa));
            CHECK_OK(st_kv_read(b, sb, l, p, 1, kb, xb));
            CHECK(memcmp(ka, kb, sizeof(float) * D) == 0 && memcmp(xa, xb, sizeof(float) * D) == 0);
        }
    }
}

/* The end of a restore test: the restoring pool b passes kv_check; everything is freed. */
static void finish(st_ctx *ctx, st_kv *a, st_kv *b, st_kv_io *io, void *buf) {
    char msg[256];
    CHECK_OK(kv_check(b, msg, sizeof msg));
    free(buf);
    st_kv_io_mem_release(io);
    st_kv_destroy(a);
    st_kv_destroy(b);
    st_ctx_destroy(ctx);
}

static void roundtrip(st_type type) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = mk(ctx, type, 16, 4, 1), *b = mk(ctx, type, 64, 4, 1);
    REQUIRE(a && b);
    st_kv_seq_id ids[3], out[3];
    build(a, ids);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    CHECK_OK(st_kv_snapshot_write(a, ids, 3, -1, &io));
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    int n = 0;
    CHECK_OK(st_kv_snapshot_read(b, &in, out, 3, &n));
    CHECK_INT(n, 3);
    CHECK_INT(in.pos, io.len);
    same_seq(a, ids[0], b, out[0], 21);
    same_seq(a, ids[1], b, out[1], 24);
    same_seq(a, ids[2], b, out[2], 30);
    st_kv_stats sa, sb;
    st_kv_get_stats(a, &sa);
    st_kv_get_stats(b, &sb);
    CHECK_INT(sb.pages_used, sa.pages_used); /* sharing preserved: A and B share pages */
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 3 * i + 1;
    int64_t nc;
    CHECK_OK(st_kv_prefix_lookup(b, toks, 64, &nc));
    CHECK_INT(nc, 24); /* restored keys serve the prefix cache (B sealed its 3rd page) */
    finish(ctx, a, b, &io, NULL);
}

TEST(test_roundtrip_f32) { roundtrip(ST_TYPE_F32); }
TEST(test_roundtrip_q8) { roundtrip(ST_TYPE_Q8_0); }

TEST(test_file_and_fd_backends_and_cut) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = mk(ctx, ST_TYPE_F16, 16, 3, 0), *b = mk(ctx, ST_TYPE_F16, 16, 3, 0);
    REQUIRE(a && b);
    st_kv_seq_id ids[3], out[3];
    build(a, ids);
    FILE *fp = tmpfile();
    REQUIRE(fp);
    st_kv_io io;
    st_kv_io_file(&io, fp);
    CHECK_OK(st_kv_snapshot_write(a, ids, 3, 2, &io)); /* cut after 2 pages */
    fflush(fp);
    rewind(fp);
    st_kv_io_fd(&io, fileno(fp));
    int n = 0;
    CHECK_OK(st_kv_snapshot_read(b, &io, out, 3, &n));
    CHECK_INT(n, 3);
    /* pages in first-use order: A's pages 0 and 1 fit; A's page 2 does not: A is cut to 16,
     * B shares 0 and 1 and is cut at its page 2; C's first page is past the budget. */
    same_seq(a, ids[0], b, out[0], 16);
    same_seq(a, ids[1], b, out[1], 16);
    same_seq(a, ids[2], b, out[2], 0);
    st_kv_stats st;
    st_kv_get_stats(b, &st);
    CHECK_INT(st.pages_used, 2);
    fclose(fp);
    st_kv_destroy(a);
    st_kv_destroy(b);
    st_ctx_destroy(ctx);
}

/* Attempts a restore of buf[n]; asserts it fails and that nothing changed in kv. */
static int reject(st_kv *kv, const uint8_t *buf, size_t n) {
    st_kv_stats before, after;
    st_kv_get_stats(kv, &before);
    st_kv_io in;
    st_kv_io_mem_reader(&in, buf, n);
    st_kv_seq_id out[4];
    int nout = -1;
    int rc = st_kv_snapshot_read(kv, &in, out, 4, &nout);
    st_kv_get_stats(kv, &after);
    if (rc == 0 || nout != 0 || memcmp(&before, &after, sizeof before) != 0) return 1;
    return rc;
}

TEST(test_every_truncation_and_flip_rejected) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = mk(ctx, ST_TYPE_F32, 16, 2, 0), *b = mk(ctx, ST_TYPE_F32, 16, 2, 0);
    REQUIRE(a && b);
    st_kv_seq_id ids[3], keep;
    build(a, ids);
    CHECK_OK(st_kv_seq_create(b, &keep)); /* b has state of its own that must survive */
    fill(b, keep, 9, 0, NULL);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    CHECK_OK(st_kv_snapshot_write(a, ids, 3, -1, &io));
    fprintf(stderr, "  snapshot of %zu bytes\n", io.len);
    int bad_trunc = 0, bad_flip = 0, n_code[4] = {0};
    for (size_t cut = 0; cut < io.len; cut++) {
        int rc = reject(b, io.buf, cut);
        if (rc != ST_E_FORMAT) {
            if (bad_trunc++ < 3) fprintf(stderr, "  truncation at %zu: rc %d\n", cut, rc);
        }
    }
    uint8_t *buf = malloc(io.len);
    for (size_t i = 0; i < io.len; i++) {
        memcpy(buf, io.buf, io.len);
        buf[i] ^= (uint8_t)(1u << (i % 8));
        int rc = reject(b, buf, io.len);
        if (rc == 1 || rc >= 0) {
            if (bad_flip++ < 3) fprintf(stderr, "  flip at %zu accepted or changed state\n", i);
        }
        n_code[rc == ST_E_CORRUPT ? 0 : rc == ST_E_FORMAT ? 1 : rc == ST_E_VERSION ? 2 : 3]++;
    }
    fprintf(stderr, "  %zu flips: %d CORRUPT, %d FORMAT, %d VERSION, %d other\n", io.len,
            n_code[0], n_code[1], n_code[2], n_code[3]);
    CHECK_INT(bad_trunc, 0);
    CHECK_INT(bad_flip, 0);
    /* Rejected records were staged in the frames of b's free pages: the live sequence is
     * intact, and a page allocated now reads as zeros, not as a staged record. */
    st_kv *ref = mk(ctx, ST_TYPE_F32, 16, 2, 0);
    st_kv_seq_id rkeep, fresh;
    CHECK_OK(st_kv_seq_create(ref, &rkeep));
    fill(ref, rkeep, 9, 0, NULL);
    same_seq(ref, rkeep, b, keep, 9);
    st_kv_destroy(ref);
    CHECK_OK(st_kv_seq_create(b, &fresh));
    CHECK_OK(st_kv_seq_reserve(b, fresh, 24, NULL, NULL));
    for (int p = 0; p < 24; p++) {
        float k[2] = {1, 1}, v[2] = {1, 1};
        CHECK_OK(st_kv_read(b, fresh, p % 2, p, 1, k, v));
        CHECK(k[0] == 0 && k[1] == 0 && v[0] == 0 && v[1] == 0);
    }
    CHECK_OK(st_kv_seq_free(b, fresh));
    /* the intact stream still restores */
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    st_kv_seq_id out[3];
    int n;
    CHECK_OK(st_kv_snapshot_read(b, &in, out, 3, &n));
    same_seq(a, ids[2], b, out[2], 30);
    finish(ctx, a, b, &io, buf);
}

/* A restore into a pool with fewer free pages than the snapshot has: the first records are
 * staged in free frames, the rest in private memory, and their pages evict cached ones
 * only once all is checked. A corrupt stream in that state keeps the cache whole. */
TEST(test_restore_over_cached_pages) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = mk(ctx, ST_TYPE_Q8_0, 16, 4, 0), *b = mk(ctx, ST_TYPE_Q8_0, 12, 4, 0);
    REQUIRE(a && b);
    st_kv_seq_id ids[3], out[3], old;
    build(a, ids);
    int32_t toks[64];
    for (int i = 0; i < 64; i++) toks[i] = 1000 + i;
    CHECK_OK(st_kv_seq_create(b, &old));
    fill(b, old, 64, 7, toks);
    CHECK_OK(st_kv_seq_free(b, old)); /* 8 pages cached, 4 free */
    st_kv_stats before, after;
    st_kv_get_stats(b, &before);
    CHECK_INT(before.pages_cached, 8);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    CHECK_OK(st_kv_snapshot_write(a, ids, 3, -1, &io));
    st_kv_get_stats(a, &after);
    REQUIRE(after.pages_used > before.pages_free); /* the mixed case */
    uint8_t *buf = malloc(io.len);
    memcpy(buf, io.buf, io.len);
    buf[io.len - 40] ^= 1; /* in the last sequence record */
    st_kv_io in;
    st_kv_io_mem_reader(&in, buf, io.len);
    int n = -1;
    CHECK_INT(st_kv_snapshot_read(b, &in, out, 3, &n), ST_E_CORRUPT);
    st_kv_get_stats(b, &after);
    CHECK(memcmp(&before, &after, sizeof before) == 0);
    int64_t nc;
    CHECK_OK(st_kv_prefix_lookup(b, toks, 64, &nc));
    CHECK_INT(nc, 64);
    st_kv_io_mem_reader(&in, io.buf, io.len);
    CHECK_OK(st_kv_snapshot_read(b, &in, out, 3, &n));
    CHECK_INT(n, 3);
    same_seq(a, ids[0], b, out[0], 21);
    same_seq(a, ids[1], b, out[1], 24);
    same_seq(a, ids[2], b, out[2], 30);
    st_kv_get_stats(b, &after);
    CHECK(after.cache_evictions > before.cache_evictions);
    finish(ctx, a, b, &io, buf);
}

TEST(test_mismatches_and_limits) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = mk(ctx, ST_TYPE_F32, 16, 4, 0);
    REQUIRE(a);
    st_kv_seq_id ids[3], out[3];
    build(a, ids);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    CHECK_OK(st_kv_snapshot_write(a, ids, 3, -1, &io));
    struct { st_type t; int n_pages, D; uint8_t fp; int want; const char *word; } cases[] = {
        {ST_TYPE_F32, 16, 5, 0, ST_E_FORMAT, "head_dim"},
        {ST_TYPE_F16, 16, 4, 0, ST_E_TYPE, "element type"},
        {ST_TYPE_F32, 16, 4, 9, ST_E_FORMAT, "fingerprint"},
        {ST_TYPE_F32, 4, 4, 0, ST_E_LIMIT, "n_pages"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        st_kv *b = mk(ctx, cases[i].t, cases[i].n_pages, cases[i].D, cases[i].fp);
        REQUIRE(b);
        st_kv_io in;
        st_kv_io_mem_reader(&in, io.buf, io.len);
        int n = -1;
        CHECK_INT(st_kv_snapshot_read(b, &in, out, 3, &n), cases[i].want);
        CHECK(strstr(st_ctx_error(ctx), cases[i].word) != NULL);
        st_kv_destroy(b);
    }
    /* pool too full to take it; too few id slots */
    st_kv *b = mk(ctx, ST_TYPE_F32, 8, 4, 0);
    st_kv_seq_id x;
    CHECK_OK(st_kv_seq_create(b, &x));
    fill(b, x, 30, 0, NULL);
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    int n;
    CHECK_INT(st_kv_snapshot_read(b, &in, out, 3, &n), ST_E_POOL_FULL);
    st_kv_io_mem_reader(&in, io.buf, io.len);
    CHECK_INT(st_kv_snapshot_read(b, &in, out, 2, &n), ST_E_LIMIT);
    /* a future version is named as such (version is checked before the header checksum) */
    uint8_t *buf = malloc(io.len);
    memcpy(buf, io.buf, io.len);
    buf[8] = 3;
    st_kv_io_mem_reader(&in, buf, io.len);
    CHECK_INT(st_kv_snapshot_read(b, &in, out, 3, &n), ST_E_VERSION);
    /* and so is version 1, whose keys were slot-major */
    buf[8] = 1;
    st_kv_io_mem_reader(&in, buf, io.len);
    CHECK_INT(st_kv_snapshot_read(b, &in, out, 3, &n), ST_E_VERSION);
    CHECK(strstr(st_ctx_error(NULL), "") != NULL || 1);
    /* duplicate or stale ids are refused by the writer */
    st_kv_io w2;
    st_kv_io_mem_writer(&w2);
    st_kv_seq_id dup[2] = {ids[0], ids[0]};
    CHECK_INT(st_kv_snapshot_write(a, dup, 2, -1, &w2), ST_E_INVAL);
    st_kv_io_mem_release(&w2);
    free(buf);
    st_kv_destroy(b);
    st_kv_io_mem_release(&io);
    st_kv_destroy(a);
    st_ctx_destroy(ctx);
}

/* fault-injecting backend: the Nth write fails with ENOSPC, reads fail with EIO */
static int fail_write(st_kv_io *io, const void *buf, size_t n) {
    int *left = io->user;
    return --*left <= 0 ? -ENOSPC : 0;
}
static int64_t fail_read(st_kv_io *io, void *buf, size_t n) { return -EIO; }

TEST(test_faulty_io) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = mk(ctx, ST_TYPE_F32, 16, 4, 0);
    REQUIRE(a);
    st_kv_seq_id ids[3], out[3];
    build(a, ids);
    for (int nth = 1; nth <= 8; nth++) {
        int left = nth;
        st_kv_io io = {.write = fail_write, .read = fail_read, .user = &left, .fd = -1};
        CHECK_INT(st_kv_snapshot_write(a, ids, 3, -1, &io), -ENOSPC);
    }
    st_kv_io io = {.write = fail_write, .read = fail_read, .fd = -1};
    int n;
    CHECK_INT(st_kv_snapshot_read(a, &io, out, 3, &n), -EIO);
    st_kv_destroy(a);
    st_ctx_destroy(ctx);
}

/* With the SSD tier: the ledger records each page's residency as it was (0 for a page on
 * disk or never touched, 1 for one in RAM), and writing the snapshot reads cold pages
 * without moving anything between the tiers: residency, scores and tier counters are the
 * same afterwards, and the restored contents are the originals. */
TEST(test_tiered_ledger_and_no_movement) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/strata-snap-XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    st_kv_params p = st_kv_default_params();
    p.n_layer = 2, p.n_kv_head = 1, p.head_dim = 4, p.page_size = 8, p.type = ST_TYPE_F16;
    p.n_pages = 32, p.max_seqs = 8;
    p.fingerprint.b[3] = 1;
    p.spill_dir = dir;
    p.ram_pages = 3;
    st_kv *a = NULL, *b = mk(ctx, ST_TYPE_F16, 64, 4, 1);
    REQUIRE(st_kv_create(ctx, &p, &a) == 0 && b);
    st_kv_seq_id ids[3], out[3];
    build(a, ids); /* 9 pages through a hot pool of 3: most spill */
    CHECK_OK(st_kv_flush(a));
    st_kv_page_id pages[3][8];
    int np[3];
    int32_t was[32];
    uint8_t was_blk[32 * 2];
    uint64_t score[32];
    for (int j = 0; j < 3; j++) CHECK_OK(st_kv_seq_pages(a, ids[j], pages[j], 8, &np[j]));
    for (int i = 0; i < 32; i++) was[i] = kv_page_in_ram(a, i), score[i] = a->pages[i].last_use;
    for (int i = 0; i < 32 * 2; i++) was_blk[i] = a->blk[i].res;
    st_kv_stats s0, s1;
    st_kv_get_stats(a, &s0);
    CHECK(s0.pages_cold >= 4);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    CHECK_OK(st_kv_snapshot_write(a, ids, 3, -1, &io));
    st_kv_get_stats(a, &s1);
    CHECK_INT(s1.pages_hot, s0.pages_hot);
    CHECK_INT(s1.pages_cold, s0.pages_cold);
    CHECK_INT(s1.tier_reads, s0.tier_reads);
    CHECK_INT(s1.tier_writes, s0.tier_writes);
    CHECK_INT(s1.tier_drops, s0.tier_drops);
    CHECK(s1.tier_block_reads > s0.tier_block_reads); /* the cold pages were read in place */
    for (int i = 0; i < 32; i++) {
        CHECK_INT(kv_page_in_ram(a, i), was[i]);
        CHECK(a->pages[i].last_use == score[i]);
    }
    for (int i = 0; i < 32 * 2; i++) CHECK_INT(a->blk[i].res, was_blk[i]);
    /* page records in order of first use (FORMATS.md): A's pages, then B's and C's new ones */
    int32_t order[32], n_snap = 0, seen[32] = {0};
    for (int j = 0; j < 3; j++)
        for (int i = 0; i < np[j]; i++)
            if (pages[j][i] >= 0 && !seen[pages[j][i]]) seen[pages[j][i]] = 1, order[n_snap++] = pages[j][i];
    const size_t payload = 2 * 1 * 8 * 4 * 2, boxes = 2 * 1 * 2 * 4 * 4;
    const size_t ledger = 2 * 4;
    const size_t rec = 48 + 4 * 8 + 2 * payload + boxes + ledger + 8;
    REQUIRE(io.len > 80 + (size_t)n_snap * rec);
    int n_ram = 0, n_not = 0;
    for (int i = 0; i < n_snap; i++) {
        const uint8_t *r = io.buf + 80 + (size_t)i * rec;
        CHECK_INT(r[0] | r[1] << 8, i); /* the record's index: the offsets are right */
        CHECK_INT(r[4], was[order[i]]);
        n_ram += r[4] == 1, n_not += r[4] == 0;
    }
    CHECK(n_ram >= 1 && n_not >= 4);
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    int n = 0;
    CHECK_OK(st_kv_snapshot_read(b, &in, out, 3, &n));
    CHECK_INT(n, 3);
    same_seq(a, ids[0], b, out[0], 21);
    same_seq(a, ids[1], b, out[1], 24);
    same_seq(a, ids[2], b, out[2], 30);
    char msg[256];
    CHECK_OK(kv_check(a, msg, sizeof msg));
    finish(ctx, a, b, &io, NULL);
    CHECK_INT(rmdir(dir), 0);
}

/* The stream without the attention ledger, as a writer before it made it: header flag bit
 * 2 cleared, every page record rec - 4 * L bytes, every checksum and the trailer recomputed
 * (framing as docs/FORMATS.md gives it; P = 8, so one mask word per entry). */
static uint8_t *strip_ledger(const uint8_t *in, size_t n, size_t rec, int L, size_t *out_n) {
    uint8_t *o = malloc(n);
    uint64_t sums[64];
    int k = 0;
    uint32_t fl, n_seqs, n_pages;
    memcpy(o, in, 80);
    memcpy(&fl, o + 36, 4), memcpy(&n_seqs, o + 64, 4), memcpy(&n_pages, o + 68, 4);
    fl &= ~4u;
    memcpy(o + 36, &fl, 4);
    uint64_t h = XXH3_64bits(o, 72);
    memcpy(o + 72, &h, 8);
    sums[k++] = h;
    size_t ri = 80, ro = 80;
    const size_t nrec = rec - 4u * (size_t)L;
    for (uint32_t i = 0; i < n_pages; i++, ri += rec, ro += nrec) {
        memcpy(o + ro, in + ri, nrec - 8);
        h = XXH3_64bits(o + ro, nrec - 8);
        memcpy(o + ro + nrec - 8, &h, 8);
        sums[k++] = h;
    }
    for (uint32_t j = 0; j < n_seqs; j++) {
        uint64_t len, n_ent;
        memcpy(&len, in + ri + 8, 8), memcpy(&n_ent, in + ri + 16, 8);
        const size_t sr = 32 + n_ent * (16 + 8) + 4 * len + 8;
        memcpy(o + ro, in + ri, sr);
        memcpy(&sums[k++], in + ri + sr - 8, 8);
        ri += sr, ro += sr;
    }
    memcpy(o + ro, in + ri, 8);
    h = XXH3_64bits(sums, (size_t)k * 8);
    memcpy(o + ro + 8, &h, 8);
    *out_n = ro + 16;
    return o;
}

static st_kv *mk_tiered(st_ctx *ctx, char *dir, size_t cap) {
    snprintf(dir, cap, "/tmp/strata-snap-XXXXXX");
    if (!mkdtemp(dir)) return NULL;
    st_kv_params p = st_kv_default_params();
    p.n_layer = 2, p.n_kv_head = 1, p.head_dim = 4, p.page_size = 8, p.type = ST_TYPE_F16;
    p.n_pages = 32, p.max_seqs = 8;
    p.fingerprint.b[3] = 1;
    p.spill_dir = dir;
    p.ram_pages = 3;
    st_kv *kv = NULL;
    st_kv_create(ctx, &p, &kv);
    return kv;
}

/* Decode attention on sequence C feeds the ledger of its blocks only; the snapshot stores
 * each block's decayed score, a tiered pool restores exactly those, a stream without the
 * ledger (the format before it) still reads with all scores zero, and a NaN score is
 * refused. */
TEST(test_attention_ledger) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_attn_ws *ws;
    REQUIRE(st_attn_ws_create(st_ctx_isa(ctx), &ws) == 0);
    char da[64], dc[64];
    st_kv *a = mk_tiered(ctx, da, sizeof da), *c = mk_tiered(ctx, dc, sizeof dc);
    st_kv *b = mk(ctx, ST_TYPE_F16, 64, 4, 1);
    REQUIRE(a && b && c);
    st_kv_seq_id ids[3], out[3];
    build(a, ids);
    const st_attn_geom g = {.n_head = 1, .n_kv_head = 1, .head_dim = 4, .page_size = 8,
                            .type = ST_TYPE_F16, .scale = 0};
    float q[4] = {0.5f, -1, 0.25f, 2}, o[4];
    for (int step = 0; step < 3; step++)
        for (int l = 0; l < 2; l++) CHECK_OK(st_kv_attend_decode(a, ctx, ws, &g, l, &ids[2], 1, NULL, q, o));
    st_kv_page_id pc[8], pa[8];
    int nc = 0, na = 0;
    CHECK_OK(st_kv_seq_pages(a, ids[2], pc, 8, &nc));
    CHECK_OK(st_kv_seq_pages(a, ids[0], pa, 8, &na));
    for (int i = 0; i < nc; i++)
        if (pc[i] >= 0) /* used by all 3 steps: 1 + 0.9 + 0.81 */
            for (int l = 0; l < 2; l++) CHECK(fabsf(kv_blk_score(a, kv_blk(a, pc[i], l)) - 2.71f) < 1e-4f);
    for (int i = 0; i < na; i++) CHECK(kv_blk_score(a, kv_blk(a, pa[i], 0)) == 0.0f);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    CHECK_OK(st_kv_snapshot_write(a, ids, 3, -1, &io));
    uint32_t fl;
    memcpy(&fl, io.buf + 36, 4);
    CHECK_INT(fl, 2 | 4);
    /* the records: first A's pages (3), then B's new one, then C's (4, one a hole) */
    const size_t payload = 2 * 1 * 8 * 4 * 2, boxes = 2 * 1 * 2 * 4 * 4, L = 2;
    const size_t rec = 48 + 4 * 8 + 2 * payload + boxes + 4 * L + 8;
    int n_scored = 0;
    for (int i = 0; i < 7; i++) {
        float sc[2];
        memcpy(sc, io.buf + 80 + (size_t)i * rec + rec - 8 - 4 * L, 8);
        n_scored += sc[0] > 2.7f && sc[1] > 2.7f;
        CHECK(i < 4 ? sc[0] == 0 && sc[1] == 0 : sc[0] > 2.7f && sc[1] > 2.7f);
    }
    CHECK_INT(n_scored, 3);
    st_kv_io in;
    int n = 0;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    CHECK_OK(st_kv_snapshot_read(c, &in, out, 3, &n));
    REQUIRE(n == 3);
    st_kv_page_id pr[8];
    int nr = 0;
    CHECK_OK(st_kv_seq_pages(c, out[2], pr, 8, &nr));
    CHECK_INT(nr, nc);
    for (int i = 0; i < nr; i++)
        for (int l = 0; pr[i] >= 0 && l < 2; l++)
            CHECK(kv_blk_score(c, kv_blk(c, pr[i], l)) == kv_blk_score(a, kv_blk(a, pc[i], l)));
    same_seq(a, ids[2], c, out[2], 30);
    /* the older stream: no ledger, restored into a pool without a tier and a tiered one */
    size_t n_old = 0;
    uint8_t *old = strip_ledger(io.buf, io.len, rec, (int)L, &n_old);
    CHECK_INT(n_old, io.len - 7 * 4 * L);
    st_kv_io_mem_reader(&in, old, n_old);
    CHECK_OK(st_kv_snapshot_read(b, &in, out, 3, &n));
    REQUIRE(n == 3);
    same_seq(a, ids[0], b, out[0], 21);
    same_seq(a, ids[2], b, out[2], 30);
    for (int j = 0; j < 3; j++) CHECK_OK(st_kv_seq_free(c, out[j]));
    st_kv_io_mem_reader(&in, old, n_old);
    CHECK_OK(st_kv_snapshot_read(c, &in, out, 3, &n));
    CHECK_OK(st_kv_seq_pages(c, out[2], pr, 8, &nr));
    for (int i = 0; i < nr; i++)
        if (pr[i] >= 0) CHECK(kv_blk_score(c, kv_blk(c, pr[i], 1)) == 0.0f);
    free(old);
    /* a NaN score, checksums fixed: refused by name */
    uint8_t *bad = malloc(io.len);
    memcpy(bad, io.buf, io.len);
    const float nan = NAN;
    uint8_t *r5 = bad + 80 + 5 * rec;
    memcpy(r5 + rec - 8 - 4, &nan, 4);
    uint64_t h = XXH3_64bits(r5, rec - 8);
    memcpy(r5 + rec - 8, &h, 8);
    st_kv_io_mem_reader(&in, bad, io.len);
    CHECK_INT(st_kv_snapshot_read(b, &in, out, 3, &n), ST_E_FORMAT);
    CHECK(strstr(st_ctx_error(ctx), "attention score") != NULL);
    free(bad);
    char msg[256];
    CHECK_OK(kv_check(a, msg, sizeof msg));
    CHECK_OK(kv_check(c, msg, sizeof msg));
    st_kv_destroy(c);
    CHECK_INT(rmdir(dc), 0);
    st_attn_ws_destroy(ws);
    finish(ctx, a, b, &io, NULL);
    CHECK_INT(rmdir(da), 0);
}

TEST_MAIN(test_roundtrip_f32, test_roundtrip_q8, test_file_and_fd_backends_and_cut,
          test_restore_over_cached_pages,
          test_every_truncation_and_flip_rejected, test_mismatches_and_limits, test_faulty_io,
          test_tiered_ledger_and_no_movement, test_attention_ledger)
