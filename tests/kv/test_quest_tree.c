/* Quest's two-level ranking (kv_quest_tree.c): the selection equals the flat ranking's for
 * every budget, query and page layout (pools holding the same keys, one without group
 * boxes); group boxes stay the union of their pages' boxes through truncate, rewind,
 * copy-on-write, free and snapshots (kv_check verifies it after each step); and the ranking
 * really scores fewer boxes on a long in-order sequence. */
#include "strata/quest.h"
#include "kv/kv_int.h"
#include "../test.h"

#include <math.h>

enum { L = 2, H = 2, HQ = 4, D = 16, P = 8, N_POOLS = 4 };
static const int groups[N_POOLS] = {1, 2, 4, 16}; /* pool 0: flat */

typedef struct fx {
    st_ctx *ctx;
    st_kv *kv[N_POOLS];
    st_attn_ws *ws;
} fx;

static uint64_t rng_state;
static uint32_t rnd(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static float frand(void) { return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f; }

static void fx_open(fx *f, int n_pages) {
    memset(f, 0, sizeof *f);
    REQUIRE(st_ctx_create(NULL, &f->ctx) == 0);
    for (int i = 0; i < N_POOLS; i++) {
        st_kv_params p = st_kv_default_params();
        p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.page_size = P;
        p.type = ST_TYPE_F32;
        p.n_pages = n_pages;
        p.max_seqs = 8;
        p.quest_group = groups[i];
        REQUIRE(st_kv_create(f->ctx, &p, &f->kv[i]) == 0);
    }
    REQUIRE(st_attn_ws_create(st_ctx_isa(f->ctx), &f->ws) == 0);
}

static void fx_close(fx *f) {
    st_attn_ws_destroy(f->ws);
    for (int i = 0; i < N_POOLS; i++) st_kv_destroy(f->kv[i]);
    st_ctx_destroy(f->ctx);
}

static void check_all(const fx *f) {
    char msg[256];
    for (int i = 0; i < N_POOLS; i++) {
        const int rc = kv_check(f->kv[i], msg, sizeof msg);
        if (rc) fprintf(stderr, "pool %d: %s\n", i, msg);
        CHECK_OK(rc);
    }
}

/* n tokens appended to seq of every pool, the same keys in each: a per-page scale (so pages
 * rank apart), some pages repeated exactly (ties), a few extreme keys. */
static void append(fx *f, st_kv_seq_id seq, int n) {
    const int row = H * D;
    float *k = malloc((size_t)L * n * row * sizeof *k), *v = malloc((size_t)L * n * row * sizeof *v);
    REQUIRE(k && v);
    const uint32_t mode = rnd() % 4;
    const float amp = 0.1f + (float)(rnd() % 40) / 8.0f;
    for (size_t i = 0; i < (size_t)L * n * row; i++) {
        k[i] = mode == 0 ? 0.5f : amp * frand(); /* mode 0: every key equal -> equal bounds */
        v[i] = frand();
    }
    if (mode == 1) k[rnd() % ((size_t)L * n * row)] = 1e30f; /* an f16 infinity in one box */
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_append(f->kv[i], seq, n, NULL, k, v));
    free(k);
    free(v);
}

/* Random queries and parameters: every pool's selection equals pool 0's (flat). Returns the
 * boxes scored and ranked in pools with groups, summed, for the caller's checks. */
static void compare(fx *f, st_kv_seq_id seq, int trials, int64_t *scored, int64_t *ranked, int *mismatch) {
    st_kv_select *sel[N_POOLS];
    for (int i = 0; i < N_POOLS; i++) REQUIRE(st_kv_select_create(&sel[i]) == 0);
    float q[HQ * D];
    for (int t = 0; t < trials; t++) {
        const uint32_t qm = rnd() % 5;
        for (int i = 0; i < HQ * D; i++) {
            q[i] = qm == 0 ? 0.0f : (qm == 1 && rnd() % 4) ? 0.0f : (1.0f + (float)(rnd() % 3)) * frand();
            if (qm == 2 && i % 7 == 0) q[i] = -q[i] * 8.0f;
        }
        st_kv_quest_params p = st_kv_quest_default_params();
        p.budget = (int64_t)(rnd() % 48) * P + rnd() % 3; /* 0 (dense) up to past every page */
        if (rnd() % 8 == 0) p.budget = 1 << 20;
        p.sinks = rnd() % 3 ? -1 : (int64_t)(rnd() % 40);
        p.recent = rnd() % 3 ? -1 : (int64_t)(rnd() % 60);
        p.dense_layers = 0;
        const int layer = (int)(rnd() % L);
        for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_quest_select(f->kv[i], seq, layer, f->ws, q, HQ, &p, sel[i]));
        for (int i = 1; i < N_POOLS; i++) {
            st_kv_select_stats st;
            st_kv_select_get_stats(sel[i], &st);
            *scored += st.n_scored;
            *ranked += st.n_ranked;
            int bad = st_kv_select_dense(sel[i]) != st_kv_select_dense(sel[0]) ||
                      st_kv_select_n_views(sel[i]) != st_kv_select_n_views(sel[0]);
            for (int h = 0; h < H && !bad; h++) {
                const int32_t *a, *b;
                int32_t na, nb;
                CHECK_OK(st_kv_select_head(sel[0], h, &a, &na));
                CHECK_OK(st_kv_select_head(sel[i], h, &b, &nb));
                bad = na != nb || memcmp(a, b, (size_t)na * sizeof *a) != 0;
            }
            *mismatch += bad;
        }
    }
    for (int i = 0; i < N_POOLS; i++) st_kv_select_destroy(sel[i]);
}

/* One long sequence in order (whole groups), then two interleaved ones (groups shared by
 * both), holes, a fork written into (copy-on-write), truncations and rewinds: the two-level
 * selection is always the flat one, and on the long sequence it scores far fewer boxes. */
TEST(test_tree_equals_flat) {
    fx f;
    fx_open(&f, 1024);
    rng_state = 12345;
    st_kv_seq_id a, b, c;
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_create(f.kv[i], &a));
    for (int i = 0; i < 60; i++) append(&f, a, P * 8);
    check_all(&f);
    int64_t scored = 0, ranked = 0;
    int mismatch = 0;
    compare(&f, a, 400, &scored, &ranked, &mismatch);
    CHECK_INT(mismatch, 0);
    fprintf(stderr, "in order: %lld of %lld ranked boxes scored\n", (long long)scored, (long long)ranked);
    CHECK(scored > 0 && scored < ranked); /* the two-level ranking ran and saved work */
    /* two sequences growing together: their pages alternate in the pool */
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_create(f.kv[i], &b));
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_create(f.kv[i], &c));
    for (int r = 0; r < 40; r++) {
        append(&f, b, P * (1 + (int)(rnd() % 3)));
        append(&f, c, P + (int)(rnd() % (2 * P)));
    }
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_remove(f.kv[i], b, P * 5, P * 9)); /* holes */
    check_all(&f);
    compare(&f, b, 200, &scored, &ranked, &mismatch);
    compare(&f, c, 200, &scored, &ranked, &mismatch);
    CHECK_INT(mismatch, 0);
    /* truncate and rewind inside groups, then grow again with other keys */
    for (int r = 0; r < 12; r++) {
        int64_t len;
        CHECK_OK(st_kv_seq_len(f.kv[0], a, &len));
        const int64_t cut = len - (int64_t)(rnd() % (P * 20)) - 1;
        for (int i = 0; i < N_POOLS; i++)
            CHECK_OK(r % 2 ? st_kv_seq_rewind(f.kv[i], a, cut) : st_kv_seq_truncate(f.kv[i], a, cut));
        check_all(&f);
        append(&f, a, (int)(rnd() % (P * 12)) + 1);
        check_all(&f);
        compare(&f, a, 40, &scored, &ranked, &mismatch);
    }
    CHECK_INT(mismatch, 0);
    /* a fork written into: its copied tail and the shared pages */
    st_kv_seq_id d;
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_fork(f.kv[i], a, &d));
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_truncate(f.kv[i], d, P * 100 + 3));
    append(&f, d, P * 30);
    check_all(&f);
    compare(&f, d, 100, &scored, &ranked, &mismatch);
    compare(&f, a, 100, &scored, &ranked, &mismatch);
    CHECK_INT(mismatch, 0);
    /* freed sequences withdraw their boxes; the rest still agree */
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_free(f.kv[i], b));
    check_all(&f);
    compare(&f, c, 100, &scored, &ranked, &mismatch);
    CHECK_INT(mismatch, 0);
    fx_close(&f);
}

/* A group box is exactly its sealed pages' union: after a rewind drops all but the first
 * page of a group, it equals that page's box; a page's keys leave its group with it. */
TEST(test_tree_withdraw) {
    fx f;
    fx_open(&f, 64);
    rng_state = 7;
    st_kv_seq_id s;
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_create(f.kv[i], &s));
    append(&f, s, P * 4); /* pages 0..3: group 0 of the G=4 pool */
    const st_kv *kv = f.kv[2];
    REQUIRE(kv->qgroup == 4);
    /* a huge key in page 3 widens group 0 */
    const int row = H * D;
    float k[L * P * H * D], v[L * P * H * D];
    for (int i = 0; i < L * P * row; i++) k[i] = 0.01f * frand(), v[i] = 0;
    k[0] = 1000.0f; /* layer 0, token 0, head 0, dim 0 */
    for (int i = 0; i < N_POOLS; i++) {
        CHECK_OK(st_kv_seq_truncate(f.kv[i], s, P * 3));
        CHECK_OK(st_kv_seq_append(f.kv[i], s, P, NULL, k, v));
    }
    check_all(&f);
    CHECK(st_fp16_to_fp32(kv_qgbox(kv, 0, 0, 0)[D]) >= 1000.0f);
    for (int i = 0; i < N_POOLS; i++) CHECK_OK(st_kv_seq_rewind(f.kv[i], s, P + 3));
    check_all(&f);
    CHECK(!kv->qbox_ok[1] && !kv->qbox_ok[3] && kv->qbox_ok[0]);
    CHECK(memcmp(kv_qgbox(kv, 0, 0, 0), kv_qbox(kv, 0, 0, 0), 2 * D * sizeof(uint16_t)) == 0);
    CHECK(memcmp(kv_qgbox(kv, 1, 1, 0), kv_qbox(kv, 1, 1, 0), 2 * D * sizeof(uint16_t)) == 0);
    CHECK(st_fp16_to_fp32(kv_qgbox(kv, 0, 0, 0)[D]) < 1000.0f);
    /* bad group sizes are refused */
    st_kv_params p = st_kv_default_params();
    p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.n_pages = 8;
    st_kv *bad = NULL;
    p.quest_group = 3;
    CHECK_INT(st_kv_create(f.ctx, &p, &bad), ST_E_INVAL);
    p.quest_group = 512;
    CHECK_INT(st_kv_create(f.ctx, &p, &bad), ST_E_INVAL);
    CHECK(bad == NULL);
    fx_close(&f);
}

TEST_MAIN(test_tree_equals_flat, test_tree_withdraw)
