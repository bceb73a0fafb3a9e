/* Attention through the tiers (st_kv_attend_*): with a hot pool far smaller than the
 * context (streaming) or large enough for the needed pages (batch fetch), every output is
 * bit-identical to the all-in-RAM result, dense and with a Quest selection, for decode
 * batches and for chunks; a corrupted spill read fails the sequence instead of computing
 * from garbage. */
#include "strata/kv.h"
#include "strata/quest.h"
#include "kv/kv_int.h"
#include "../test.h"

#include <fcntl.h>
#include <unistd.h>

/* LEN: 263 pages, past ST_ATTN_LONG_LIST_TOKENS, so dense decode (and the long selection)
 * cut long runs, the short selection short ones */
enum { L = 2, H = 2, NH = 4, D = 16, P = 16, LEN = 4200, VIEWS = 300 };

typedef struct rig {
    st_kv *kv;
    char dir[64];
    st_io *fault;
} rig;

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0) * 4.0 - 2.0);
}

static int fault_open(void *arg, const char *path, int direct, st_io **out) {
    rig *r = arg;
    st_io *fd;
    int rc = st_io_fd_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600, &fd);
    if (rc) return rc;
    st_io_fault_cfg none;
    memset(&none, 0, sizeof none);
    if ((rc = st_io_fault_create(fd, &none, out)) == 0) r->fault = *out;
    return rc;
}

/* ram 0: no tier. Fills sequence *seq with LEN tokens of seeded K/V, a removed range and a
 * removed whole page (a hole). */
static void rig_make(st_ctx *ctx, rig *r, int64_t ram, int faults, st_kv_seq_id *seq) {
    memset(r, 0, sizeof *r);
    st_kv_params p = st_kv_default_params();
    p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.page_size = P, p.type = ST_TYPE_F16;
    p.n_pages = 600;
    if (ram) {
        snprintf(r->dir, sizeof r->dir, "/tmp/strata-attend-XXXXXX");
        REQUIRE(mkdtemp(r->dir) != NULL);
        p.spill_dir = r->dir;
        p.ram_pages = ram;
        p.prefetch = 1; /* exactness with the read-ahead too */
        if (faults) p.spill_open = fault_open, p.spill_open_arg = r;
    }
    REQUIRE(st_kv_create(ctx, &p, &r->kv) == 0);
    REQUIRE(st_kv_seq_create(r->kv, seq) == 0);
    uint64_t s = 7;
    const int chunk = 100;
    float *k = malloc(sizeof(float) * L * chunk * H * D), *v = malloc(sizeof(float) * L * chunk * H * D);
    for (int t = 0; t < LEN; t += chunk) {
        for (int i = 0; i < L * chunk * H * D; i++) k[i] = frand(&s), v[i] = frand(&s);
        REQUIRE(st_kv_seq_append(r->kv, *seq, chunk, NULL, k, v) == 0);
    }
    free(k);
    free(v);
    REQUIRE(st_kv_seq_remove(r->kv, *seq, 100, 123) == 0);  /* a masked page */
    REQUIRE(st_kv_seq_remove(r->kv, *seq, 640, 656) == 0);  /* a hole */
}

static void rig_free(rig *r) {
    st_kv_destroy(r->kv);
    if (r->dir[0]) CHECK_INT(rmdir(r->dir), 0);
}

static st_attn_geom geom(void) {
    st_attn_geom g = {.n_head = NH, .n_kv_head = H, .head_dim = D, .page_size = P,
                      .type = ST_TYPE_F16, .scale = 0};
    return g;
}

TEST(test_attend_bit_identical) {
    st_ctx *ctx;
    st_ctx_params cp = {.n_threads = 2, .isa = -1};
    REQUIRE(st_ctx_create(&cp, &ctx) == 0);
    st_attn_ws *ws;
    REQUIRE(st_attn_ws_create(st_ctx_isa(ctx), &ws) == 0);
    rig a, b, c;
    st_kv_seq_id sa, sb, sc, sc2;
    rig_make(ctx, &a, 0, 0, &sa);   /* all in RAM */
    rig_make(ctx, &b, 6, 0, &sb);   /* 6 hot pages for 263: streams */
    rig_make(ctx, &c, 300, 0, &sc); /* fits once fetched */
    /* push most of c's sequence to disk with a second one, so attend must fetch it back */
    REQUIRE(st_kv_seq_create(c.kv, &sc2) == 0);
    REQUIRE(st_kv_seq_reserve(c.kv, sc2, 190 * P, NULL, NULL) == 0);
    for (int pg = 0; pg < 190; pg++) {
        float z[P * H * D];
        for (int i = 0; i < P * H * D; i++) z[i] = (float)pg;
        for (int l = 0; l < L; l++) REQUIRE(st_kv_write(c.kv, sc2, l, (int64_t)pg * P, P, z, z) == 0);
    }
    int64_t hot = 0, cold = 0;
    CHECK_OK(st_kv_seq_residency(c.kv, sc, &hot, &cold));
    CHECK(cold > 100);
    CHECK_OK(st_kv_seq_residency(b.kv, sb, &hot, &cold));
    CHECK(cold > 150 && hot <= 6 * L); /* 6 pages' worth of layer blocks */
    {
        /* the page map agrees with the residency counts; the removed page is a hole */
        int64_t len = 0, n_map = -1, n_ram = 0, n_disk = 0, n_none = 0;
        CHECK_OK(st_kv_seq_len(b.kv, sb, &len));
        CHECK_INT(st_kv_seq_page_map(b.kv, sb, NULL, 0, &n_map), ST_E_LIMIT);
        CHECK_INT(n_map, (len + P - 1) / P);
        uint8_t map[512];
        REQUIRE(n_map <= 512);
        CHECK_OK(st_kv_seq_page_map(b.kv, sb, map, 512, &n_map));
        for (int64_t i = 0; i < n_map; i++) {
            n_ram += map[i] == ST_KV_PAGE_IN_RAM, n_disk += map[i] == ST_KV_PAGE_ON_DISK;
            n_none += map[i] == 0;
        }
        CHECK_INT(n_ram, hot);
        CHECK_INT(n_disk, cold);
        CHECK_INT(n_none, n_map - hot - cold);
        CHECK_INT(map[640 / P], 0);
        CHECK_INT(st_kv_seq_page_map(b.kv, -1, map, 512, &n_map), ST_E_INVAL);
        /* a fork shares every page */
        st_kv_seq_id f;
        REQUIRE(st_kv_seq_fork(b.kv, sb, &f) == 0);
        CHECK_OK(st_kv_seq_page_map(b.kv, f, map, 512, &n_map));
        CHECK(map[0] & ST_KV_PAGE_SHARED);
        CHECK_OK(st_kv_seq_free(b.kv, f));
        CHECK_OK(st_kv_seq_page_map(b.kv, sb, map, 512, &n_map));
        CHECK(!(map[0] & ST_KV_PAGE_SHARED));
    }

    const st_attn_geom g = geom();
    st_kv_select *sel;
    REQUIRE(st_kv_select_create(&sel) == 0);
    st_kv_quest_params qp = st_kv_quest_default_params(), qp_long;
    qp.budget = 40 * P;
    qp.dense_layers = 0;
    qp_long = qp;
    qp_long.budget = 258 * P; /* of 262 pages: not dense, lists long enough for long runs */
    uint64_t s = 99;
    float q[NH * D], oa[NH * D], ob[NH * D], oc[NH * D], ref[NH * D];
    st_attn_page views[VIEWS];
    for (int l = 0; l < L; l++)
        for (int with_sel = 0; with_sel < 3; with_sel++) {
            for (int i = 0; i < NH * D; i++) q[i] = frand(&s);
            const st_kv_select *sv[1] = {NULL};
            if (with_sel) {
                CHECK_OK(st_kv_quest_select(a.kv, sa, l, ws, q, NH, with_sel == 1 ? &qp : &qp_long, sel));
                CHECK(!st_kv_select_dense(sel));
                sv[0] = sel;
            }
            int nv = 0;
            CHECK_OK(st_kv_seq_views(a.kv, sa, l, views, VIEWS, &nv));
            st_attn_seq as = {.pages = views, .n_pages = nv};
            if (with_sel) CHECK_OK(st_kv_select_apply(sel, &as));
            CHECK_OK(st_attn_decode(ctx, ws, &g, &as, q, ref));
            CHECK_OK(st_kv_attend_decode(a.kv, ctx, ws, &g, l, &sa, 1, sv, q, oa));
            CHECK_OK(st_kv_attend_decode(b.kv, ctx, ws, &g, l, &sb, 1, sv, q, ob));
            CHECK_OK(st_kv_attend_decode(c.kv, ctx, ws, &g, l, &sc, 1, sv, q, oc));
            CHECK(memcmp(oa, ref, sizeof ref) == 0);
            CHECK(memcmp(ob, ref, sizeof ref) == 0);
            if (memcmp(ob, ref, sizeof ref)) {
                double md = 0;
                for (int i = 0; i < NH * D; i++) md = fmax(md, fabs(ob[i] - ref[i]));
                fprintf(stderr, "  layer %d sel %d: max |diff| %g (ref[0] %g ob[0] %g)\n", l, with_sel, md, ref[0], ob[0]);
            }
            CHECK(memcmp(oc, ref, sizeof ref) == 0);
            CHECK(ref[0] != 0 || ref[1] != 0);
        }
    /* decode steps layer after layer, as a model runs them: the read-ahead of each next
     * layer's last selection moves blocks in between calls and changes no bit */
    rig d; /* 120 frames: one layer's selection (up to 80 pages) and room to read ahead */
    st_kv_seq_id sd;
    rig_make(ctx, &d, 60, 0, &sd);
    for (int step = 0; step < 4; step++)
        for (int l = 0; l < L; l++) {
            for (int i = 0; i < NH * D; i++) q[i] = frand(&s);
            CHECK_OK(st_kv_quest_select(a.kv, sa, l, ws, q, NH, &qp, sel));
            const st_kv_select *sv[1] = {sel};
            CHECK_OK(st_kv_attend_decode(a.kv, ctx, ws, &g, l, &sa, 1, sv, q, oa));
            CHECK_OK(st_kv_attend_decode(b.kv, ctx, ws, &g, l, &sb, 1, sv, q, ob));
            CHECK_OK(st_kv_attend_decode(d.kv, ctx, ws, &g, l, &sd, 1, sv, q, oc));
            CHECK(memcmp(oa, ob, sizeof oa) == 0 && memcmp(oa, oc, sizeof oa) == 0);
        }
    st_kv_stats st;
    st_kv_get_stats(d.kv, &st);
    CHECK(st.tier_prefetches > 0);
    rig_free(&d);
    st_kv_get_stats(b.kv, &st);
    CHECK(st.tier_block_reads > 100);
    st_kv_get_stats(c.kv, &st);
    CHECK(st.tier_reads > 100);

    /* a batch of two sequences (a fork that grew) through streaming == all in RAM */
    st_kv_seq_id fa, fb, ba[2], bb[2];
    CHECK_OK(st_kv_seq_fork(a.kv, sa, &fa));
    CHECK_OK(st_kv_seq_fork(b.kv, sb, &fb));
    float kk[3 * L * H * D];
    for (int i = 0; i < 3 * L * H * D; i++) kk[i] = frand(&s);
    CHECK_OK(st_kv_seq_append(a.kv, fa, 3, NULL, kk, kk));
    CHECK_OK(st_kv_seq_append(b.kv, fb, 3, NULL, kk, kk));
    ba[0] = sa, ba[1] = fa, bb[0] = sb, bb[1] = fb;
    float q2[2 * NH * D], o2a[2 * NH * D], o2b[2 * NH * D];
    for (int i = 0; i < 2 * NH * D; i++) q2[i] = frand(&s);
    CHECK_OK(st_kv_attend_decode(a.kv, ctx, ws, &g, 1, ba, 2, NULL, q2, o2a));
    CHECK_OK(st_kv_attend_decode(b.kv, ctx, ws, &g, 1, bb, 2, NULL, q2, o2b));
    CHECK(memcmp(o2a, o2b, sizeof o2a) == 0);

    /* chunk: the last 40 positions of the fork attend causally */
    enum { NQ = 40 };
    float *qc = malloc(sizeof(float) * NQ * NH * D), *ca = malloc(sizeof(float) * NQ * NH * D),
          *cb = malloc(sizeof(float) * NQ * NH * D), *cr = malloc(sizeof(float) * NQ * NH * D);
    for (int i = 0; i < NQ * NH * D; i++) qc[i] = frand(&s);
    int64_t len;
    CHECK_OK(st_kv_seq_len(a.kv, fa, &len));
    int nv = 0;
    CHECK_OK(st_kv_seq_views(a.kv, fa, 0, views, VIEWS, &nv));
    st_attn_seq as = {.pages = views, .n_pages = nv};
    CHECK_OK(st_attn_chunk(ctx, ws, &g, &as, qc, NQ, len - NQ, cr));
    CHECK_OK(st_kv_attend_chunk(a.kv, ctx, ws, &g, 0, fa, qc, NQ, len - NQ, ca));
    CHECK_OK(st_kv_attend_chunk(b.kv, ctx, ws, &g, 0, fb, qc, NQ, len - NQ, cb));
    CHECK(memcmp(ca, cr, sizeof(float) * NQ * NH * D) == 0);
    CHECK(memcmp(cb, cr, sizeof(float) * NQ * NH * D) == 0);
    free(qc), free(ca), free(cb), free(cr);

    char msg[256];
    CHECK_OK(kv_check(b.kv, msg, sizeof msg));
    CHECK_OK(kv_check(c.kv, msg, sizeof msg));
    st_kv_select_destroy(sel);
    rig_free(&a), rig_free(&b), rig_free(&c);
    st_attn_ws_destroy(ws);
    st_ctx_destroy(ctx);
}

TEST(test_attend_corrupt_read_fails_sequence) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_attn_ws *ws;
    REQUIRE(st_attn_ws_create(st_ctx_isa(ctx), &ws) == 0);
    rig r;
    st_kv_seq_id seq;
    rig_make(ctx, &r, 4, 1, &seq);
    CHECK_OK(st_kv_flush(r.kv));
    st_io_fault_counts n = st_io_fault_get_counts(r.fault);
    st_io_fault_cfg f;
    memset(&f, 0, sizeof f);
    f.corrupt_read_nth = n.reads + 1; /* the next read from the file flips a byte */
    st_io_fault_set(r.fault, &f);
    const st_attn_geom g = geom();
    float q[NH * D], out[NH * D];
    for (int i = 0; i < NH * D; i++) q[i] = 0.1f * (float)i;
    CHECK_INT(st_kv_attend_decode(r.kv, ctx, ws, &g, 0, &seq, 1, NULL, q, out), ST_E_CORRUPT);
    CHECK_INT(st_kv_seq_error(r.kv, seq), ST_E_CORRUPT);
    CHECK_INT(st_kv_attend_decode(r.kv, ctx, ws, &g, 1, &seq, 1, NULL, q, out), ST_E_CORRUPT);
    float kv1[L * H * D] = {0};
    CHECK_INT(st_kv_seq_append(r.kv, seq, 1, NULL, kv1, kv1), ST_E_CORRUPT);
    st_kv_stats st;
    st_kv_get_stats(r.kv, &st);
    CHECK_INT(st.tier_errors, 1);
    CHECK_INT(st.tier_checksum_failures, 1);
    CHECK_INT(st.tier_io_errors, 0);
    CHECK_OK(st_kv_seq_free(r.kv, seq));
    char msg[256];
    CHECK_OK(kv_check(r.kv, msg, sizeof msg));
    rig_free(&r);
    st_attn_ws_destroy(ws);
    st_ctx_destroy(ctx);
}

/* A selection is a snapshot of the page table: attend rejects it, naming the problem,
 * once the table has moved under it (a selected page removed, a page appended), instead
 * of reading pages the selection did not choose or missing new ones. */
TEST(test_attend_stale_selection) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_attn_ws *ws;
    REQUIRE(st_attn_ws_create(st_ctx_isa(ctx), &ws) == 0);
    rig r;
    st_kv_seq_id seq;
    rig_make(ctx, &r, 0, 0, &seq);
    const st_attn_geom g = geom();
    st_kv_select *sel;
    REQUIRE(st_kv_select_create(&sel) == 0);
    st_kv_quest_params qp = st_kv_quest_default_params();
    qp.budget = 40 * P;
    qp.dense_layers = 0;
    uint64_t s = 5;
    float q[NH * D], o[NH * D];
    for (int i = 0; i < NH * D; i++) q[i] = frand(&s);
    const st_kv_select *sv[1] = {sel};
    CHECK_OK(st_kv_quest_select(r.kv, seq, 1, ws, q, NH, &qp, sel));
    CHECK_OK(st_kv_attend_decode(r.kv, ctx, ws, &g, 1, &seq, 1, sv, q, o));
    /* remove the first selected page past the sink: its entry becomes a hole */
    const int32_t *idx;
    int32_t n;
    CHECK_OK(st_kv_select_head(sel, 0, &idx, &n));
    REQUIRE(n > 1);
    st_attn_page views[VIEWS];
    int nv = 0;
    CHECK_OK(st_kv_seq_views(r.kv, seq, 1, views, VIEWS, &nv));
    REQUIRE(idx[1] < nv);
    const int64_t pos = views[idx[1]].pos0;
    CHECK_OK(st_kv_seq_remove(r.kv, seq, pos, pos + P));
    CHECK_INT(st_kv_attend_decode(r.kv, ctx, ws, &g, 1, &seq, 1, sv, q, o), ST_E_INVAL);
    CHECK(strstr(st_ctx_error(ctx), "stale selection") != NULL);
    /* a fresh selection works; then a page appended after it is caught too */
    CHECK_OK(st_kv_quest_select(r.kv, seq, 1, ws, q, NH, &qp, sel));
    CHECK_OK(st_kv_attend_decode(r.kv, ctx, ws, &g, 1, &seq, 1, sv, q, o));
    float kv1[L * P * H * D];
    for (int i = 0; i < L * P * H * D; i++) kv1[i] = frand(&s);
    CHECK_OK(st_kv_seq_append(r.kv, seq, P, NULL, kv1, kv1));
    CHECK_INT(st_kv_attend_decode(r.kv, ctx, ws, &g, 1, &seq, 1, sv, q, o), ST_E_INVAL);
    CHECK(strstr(st_ctx_error(ctx), "selection made for") != NULL);
    st_kv_select_destroy(sel);
    rig_free(&r);
    st_attn_ws_destroy(ws);
    st_ctx_destroy(ctx);
}

/* A write that cannot get a frame because the caller pinned the whole hot pool fails at
 * once with the counts in the message (the deadlock guard's contract). */
TEST(test_write_hot_pool_full_counts) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    rig r;
    st_kv_seq_id seq;
    rig_make(ctx, &r, 4, 0, &seq);
    st_kv_page_id pages[VIEWS];
    int np = 0;
    CHECK_OK(st_kv_seq_pages(r.kv, seq, pages, VIEWS, &np));
    REQUIRE(np > 10);
    for (int i = 0; i < 4; i++) CHECK_OK(st_kv_pin(r.kv, pages[i]));
    float kv1[H * D] = {0};
    CHECK_INT(st_kv_write(r.kv, seq, 0, 8 * P, 1, kv1, kv1), ST_E_POOL_FULL);
    CHECK_STR(st_ctx_error(ctx), "kv: write needs 1 RAM block(s) but only 0 of the hot pool's "
                                 "8 are obtainable (0 free); 8 pinned, 0 held by this operation");
    for (int i = 0; i < 4; i++) CHECK_OK(st_kv_unpin(r.kv, pages[i]));
    CHECK_OK(st_kv_write(r.kv, seq, 0, 8 * P, 1, kv1, kv1));
    rig_free(&r);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_attend_bit_identical, test_attend_corrupt_read_fails_sequence,
          test_attend_stale_selection, test_write_hot_pool_full_counts)
