/* Streaming decode through the SSD tier cuts a long list into windows of at most a stream
 * buffer of cold blocks; each window's runs must be the whole list's runs (the run length
 * depends on the list's length, st_attn_pages_per_run), also for a last window shorter than
 * ST_ATTN_LONG_LIST_TOKENS: the output is bit-identical to the all-in-RAM pool's. */
#include "strata/kv.h"
#include "kv/kv_int.h"
#include "../test.h"

#include <unistd.h>

/* a layer block of 4 KiB: 512 blocks per 2 MiB stream buffer; 700 pages, nearly all cold,
 * make a first window of ~512 pages and a second of ~190 (12 long runs, 24 short ones) */
enum { L = 1, H = 2, NH = 4, D = 16, P = 16, PAGES = 700 };

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0) * 4.0 - 2.0);
}

static void make(st_ctx *ctx, const char *dir, st_kv **out, st_kv_seq_id *seq) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.page_size = P, p.type = ST_TYPE_F16;
    p.n_pages = PAGES + 8;
    if (dir) p.spill_dir = dir, p.ram_pages = 4;
    REQUIRE(st_kv_create(ctx, &p, out) == 0);
    st_kv *kv = *out;
    REQUIRE(st_kv_seq_create(kv, seq) == 0);
    uint64_t s = 3;
    float k[P * H * D], v[P * H * D];
    for (int pg = 0; pg < PAGES; pg++) {
        for (int i = 0; i < P * H * D; i++) k[i] = frand(&s), v[i] = frand(&s);
        REQUIRE(st_kv_seq_append(kv, *seq, P, NULL, k, v) == 0);
    }
}

TEST(test_stream_last_window_runs) {
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_attn_ws *ws;
    REQUIRE(st_attn_ws_create(st_ctx_isa(ctx), &ws) == 0);
    char dir[] = "/tmp/strata-stream-runs-XXXXXX";
    REQUIRE(mkdtemp(dir) != NULL);
    st_kv_seq_id sr, st;
    st_kv *ram = NULL, *tier = NULL;
    make(ctx, NULL, &ram, &sr);
    make(ctx, dir, &tier, &st);
    REQUIRE(st_kv_get_geometry(tier)->layer_bytes == 4096);
    int64_t hot = 0, cold = 0;
    CHECK_OK(st_kv_seq_residency(tier, st, &hot, &cold));
    CHECK(cold > 600);
    st_attn_geom g = {.n_head = NH, .n_kv_head = H, .head_dim = D, .page_size = P, .type = ST_TYPE_F16};
    uint64_t s = 11;
    float q[NH * D], a[NH * D], b[NH * D];
    for (int i = 0; i < NH * D; i++) q[i] = frand(&s);
    CHECK_OK(st_kv_attend_decode(ram, ctx, ws, &g, 0, &sr, 1, NULL, q, a));
    CHECK_OK(st_kv_attend_decode(tier, ctx, ws, &g, 0, &st, 1, NULL, q, b));
    CHECK(memcmp(a, b, sizeof a) == 0);
    st_kv_stats ks;
    st_kv_get_stats(tier, &ks);
    CHECK(ks.tier_block_reads > 600); /* it streamed */
    st_kv_destroy(tier);
    st_kv_destroy(ram);
    CHECK_INT(rmdir(dir), 0);
    st_attn_ws_destroy(ws);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_stream_last_window_runs)
