/* The Quest tests' fixture: a context, a pool of the given geometry (8 sequences at most)
 * and an attention workspace; and the tests' seeded uniform generator. */
#ifndef STRATA_TEST_QUEST_FX_H
#define STRATA_TEST_QUEST_FX_H

#include "strata/quest.h"
#include "../test.h"

typedef struct fx {
    st_ctx *ctx;
    st_kv *kv;
    st_attn_ws *ws;
    int L, H, D, P;
} fx;

static uint64_t rng_state;
static inline float frand(void) { /* uniform [-1, 1) */
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((rng_state >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

static inline int fx_open(fx *f, st_type type, int P, int n_pages, int L, int H, int D) {
    memset(f, 0, sizeof *f);
    f->L = L, f->H = H, f->D = D, f->P = P;
    if (st_ctx_create(NULL, &f->ctx)) return -1;
    st_kv_params p = st_kv_default_params();
    p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.page_size = P, p.type = type;
    p.n_pages = n_pages;
    p.max_seqs = 8;
    int rc = st_kv_create(f->ctx, &p, &f->kv);
    return rc ? rc : st_attn_ws_create(st_ctx_isa(f->ctx), &f->ws);
}
static inline void fx_close(fx *f) {
    st_attn_ws_destroy(f->ws);
    st_kv_destroy(f->kv);
    st_ctx_destroy(f->ctx);
}

#endif
