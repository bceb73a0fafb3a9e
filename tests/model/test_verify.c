/* Verify runs (st_batch.verify): n tokens through the weights together, each attending as
 * the decode token of its position, give bit for bit the logits and K/V of feeding them one
 * per call; st_kv_seq_rewind then leaves the pool as it was. Tiny synthetic models. */
#include "kv/kv_int.h"
#include "strata/model.h"
#include "../test.h"

typedef struct env {
    st_ctx *ctx;
    void *buf;
    st_model *m;
    st_kv *kv;
    st_runner *r;
    int nv;
} env;

static int env_open(env *e, int n_threads, st_type kv_type, int n_batch) {
    memset(e, 0, sizeof *e);
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = n_threads;
    int rc = st_ctx_create(&cp, &e->ctx);
    st_synth_params p = st_synth_default_params();
    p.n_layer = 2, p.n_embd = 128, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 256, p.n_vocab = 300, p.n_ctx = 512;
    p.rope_base = 10000.0f, p.seed = 5;
    size_t n = 0;
    if (!rc) rc = st_synth_write_memory(e->ctx, &p, &e->buf, &n);
    if (!rc) rc = st_model_load_memory(e->ctx, e->buf, n, "tiny", &e->m);
    if (rc) return rc;
    const st_model_hparams *hp = st_model_get_hparams(e->m);
    e->nv = hp->n_vocab;
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.page_size = 16, kp.type = kv_type, kp.n_pages = 64;
    st_model_fingerprint(e->m, kp.fingerprint.b);
    if ((rc = st_kv_create(e->ctx, &kp, &e->kv))) return rc;
    st_runner_params rp = st_runner_default_params();
    rp.n_batch = n_batch;
    return st_runner_create(e->ctx, e->m, e->kv, &rp, &e->r);
}

static void env_close(env *e) {
    st_runner_destroy(e->r);
    st_kv_destroy(e->kv);
    st_model_destroy(e->m);
    free(e->buf);
    st_ctx_destroy(e->ctx);
}

static void make_tokens(int32_t *t, int n, int nv, uint32_t seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 3 + (int32_t)((seed >> 8) % (uint32_t)(nv - 3));
    }
}

/* prompt of n_prompt tokens, then k tokens: one per call vs one verify run; logits and every
 * layer's K/V must be equal */
static void check_verify(int n_threads, st_type kv_type, int n_prompt, int k, int n_batch) {
    env a, b;
    CHECK_OK(env_open(&a, n_threads, kv_type, n_batch));
    CHECK_OK(env_open(&b, n_threads, kv_type, n_batch));
    const int n = n_prompt + k, nv = a.nv;
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    float *la = malloc((size_t)k * nv * sizeof(float)), *lb = malloc((size_t)k * nv * sizeof(float));
    uint8_t *want = malloc((size_t)k), *ver = malloc((size_t)k);
    memset(want, 1, (size_t)k), memset(ver, 1, (size_t)k);
    make_tokens(tok, n, nv, 99);
    st_kv_seq_id sa, sb;
    CHECK_OK(st_kv_seq_create(a.kv, &sa));
    CHECK_OK(st_kv_seq_create(b.kv, &sb));
    st_batch pa = {.n_tokens = n_prompt, .tokens = tok, .seq_single = sa};
    st_batch pb = {.n_tokens = n_prompt, .tokens = tok, .seq_single = sb};
    float *scratch = malloc((size_t)nv * sizeof(float));
    CHECK_OK(st_runner_forward(a.r, &pa, scratch));
    CHECK_OK(st_runner_forward(b.r, &pb, scratch));
    for (int i = 0; i < k; i++) {
        st_batch d = {.n_tokens = 1, .tokens = tok + n_prompt + i, .seq_single = sa};
        CHECK_OK(st_runner_forward(a.r, &d, la + (size_t)i * nv));
    }
    st_batch v = {.n_tokens = k, .tokens = tok + n_prompt, .seq_single = sb, .want_logits = want, .verify = ver};
    CHECK_OK(st_runner_forward(b.r, &v, lb));
    CHECK(memcmp(la, lb, (size_t)k * nv * sizeof(float)) == 0);
    const st_model_hparams *hp = st_model_get_hparams(a.m);
    const size_t row = (size_t)hp->n_head_kv * hp->head_dim;
    float *ka = malloc(n * row * sizeof(float)), *kb = malloc(n * row * sizeof(float));
    float *va = malloc(n * row * sizeof(float)), *vb = malloc(n * row * sizeof(float));
    for (int l = 0; l < hp->n_layer; l++) {
        CHECK_OK(st_kv_read(a.kv, sa, l, 0, n, ka, va));
        CHECK_OK(st_kv_read(b.kv, sb, l, 0, n, kb, vb));
        CHECK(memcmp(ka, kb, n * row * sizeof(float)) == 0);
        CHECK(memcmp(va, vb, n * row * sizeof(float)) == 0);
    }
    /* a token decoded after the verify run also matches */
    int32_t t1 = 7;
    st_batch da = {.n_tokens = 1, .tokens = &t1, .seq_single = sa}, db = {.n_tokens = 1, .tokens = &t1, .seq_single = sb};
    CHECK_OK(st_runner_forward(a.r, &da, la));
    CHECK_OK(st_runner_forward(b.r, &db, lb));
    CHECK(memcmp(la, lb, (size_t)nv * sizeof(float)) == 0);
    free(tok), free(la), free(lb), free(want), free(ver), free(scratch);
    free(ka), free(kb), free(va), free(vb);
    env_close(&a);
    env_close(&b);
}

TEST(verify_equals_decode) {
    check_verify(1, ST_TYPE_F16, 20, 5, 256);
    check_verify(2, ST_TYPE_F16, 14, 6, 256);  /* crosses a page boundary */
    check_verify(2, ST_TYPE_F32, 31, 17, 256); /* two boundaries */
    check_verify(1, ST_TYPE_BF16, 9, 8, 4);   /* the run cut over chunks */
}

/* A verify run beside another sequence's decode token and prompt piece: each sequence's
 * logits are what it gets alone. */
TEST(verify_batched) {
    env e, r;
    CHECK_OK(env_open(&e, 2, ST_TYPE_F16, 256));
    CHECK_OK(env_open(&r, 2, ST_TYPE_F16, 256));
    const int nv = e.nv;
    int32_t tok[64];
    make_tokens(tok, 64, nv, 3);
    st_kv_seq_id s[3], q;
    float *lg = malloc((size_t)16 * nv * sizeof(float)), *ref = malloc((size_t)16 * nv * sizeof(float));
    for (int i = 0; i < 3; i++) {
        CHECK_OK(st_kv_seq_create(e.kv, &s[i]));
        st_batch p = {.n_tokens = 10 + i, .tokens = tok + 10 * i, .seq_single = s[i]};
        CHECK_OK(st_runner_forward(e.r, &p, lg));
    }
    /* seq 0: one decode token; seq 1: a verify run of 4; seq 2: a prompt piece of 3 */
    int32_t bt[8] = {tok[40], tok[41], tok[42], tok[43], tok[44], tok[45], tok[46], tok[47]};
    st_kv_seq_id bs[8] = {s[0], s[1], s[1], s[1], s[1], s[2], s[2], s[2]};
    uint8_t want[8] = {1, 1, 1, 1, 1, 0, 0, 1}, ver[8] = {0, 1, 1, 1, 1, 0, 0, 0};
    st_batch b = {.n_tokens = 8, .tokens = bt, .seq = bs, .want_logits = want, .verify = ver};
    CHECK_OK(st_runner_forward(e.r, &b, lg));
    /* seq 1 alone, token by token */
    CHECK_OK(st_kv_seq_create(r.kv, &q));
    st_batch p = {.n_tokens = 11, .tokens = tok + 10, .seq_single = q};
    CHECK_OK(st_runner_forward(r.r, &p, ref));
    for (int i = 0; i < 4; i++) {
        st_batch d = {.n_tokens = 1, .tokens = bt + 1 + i, .seq_single = q};
        CHECK_OK(st_runner_forward(r.r, &d, ref + (size_t)i * nv));
    }
    CHECK(memcmp(lg + (size_t)1 * nv, ref, (size_t)4 * nv * sizeof(float)) == 0);
    free(lg), free(ref);
    env_close(&e);
    env_close(&r);
}

typedef struct pool_state {
    st_kv_stats st;
    int64_t len;
    st_kv_page_id pages[8];
    int n;
} pool_state;

static void snap(st_kv *kv, st_kv_seq_id s, pool_state *o) {
    memset(o, 0, sizeof *o);
    st_kv_get_stats(kv, &o->st);
    st_kv_seq_len(kv, s, &o->len);
    o->n = 0;
}

/* Appending a run that seals a page and rewinding it: pages used / cached / free and the
 * prefix index are as before; the prefix cache does not find the dropped tokens. */
TEST(rewind_restores_pool) {
    env e;
    CHECK_OK(env_open(&e, 1, ST_TYPE_F16, 256));
    int32_t tok[64];
    make_tokens(tok, 64, e.nv, 21);
    st_kv_seq_id s;
    CHECK_OK(st_kv_seq_create(e.kv, &s));
    float *lg = malloc((size_t)20 * e.nv * sizeof(float));
    st_batch p = {.n_tokens = 13, .tokens = tok, .seq_single = s};
    CHECK_OK(st_runner_forward(e.r, &p, lg));
    pool_state before, after;
    snap(e.kv, s, &before);
    uint8_t want[20], ver[20];
    memset(want, 1, sizeof want), memset(ver, 1, sizeof ver);
    st_batch v = {.n_tokens = 20, .tokens = tok + 13, .seq_single = s, .want_logits = want, .verify = ver};
    CHECK_OK(st_runner_forward(e.r, &v, lg)); /* 13..32: seals pages 0 and 1 */
    st_kv_stats mid;
    st_kv_get_stats(e.kv, &mid);
    CHECK(mid.pages_used > before.st.pages_used);
    char msg0[256];
    CHECK_OK(kv_check(e.kv, msg0, sizeof msg0));
    CHECK_OK(st_kv_seq_rewind(e.kv, s, 13));
    CHECK_OK(kv_check(e.kv, msg0, sizeof msg0));
    snap(e.kv, s, &after);
    CHECK_INT(after.len, 13);
    CHECK_INT(after.st.pages_used, before.st.pages_used);
    CHECK_INT(after.st.pages_cached, before.st.pages_cached);
    CHECK_INT(after.st.pages_free, before.st.pages_free);
    CHECK_INT(after.st.pages_pinned, before.st.pages_pinned);
    /* nothing of the dropped tokens is in the prefix index: a new sequence attaches nothing */
    st_kv_seq_id t;
    int64_t att = -1;
    CHECK_OK(st_kv_seq_create(e.kv, &t));
    CHECK_OK(st_kv_prefix_attach(e.kv, t, tok, 33, &att));
    CHECK_INT(att, 0);
    CHECK_OK(st_kv_seq_free(e.kv, t));
    /* plain truncate keeps sealed pages cached (the admission's use); rewind does not */
    CHECK_OK(st_runner_forward(e.r, &v, lg));
    CHECK_OK(st_kv_seq_truncate(e.kv, s, 13));
    st_kv_stats tr;
    st_kv_get_stats(e.kv, &tr);
    CHECK(tr.pages_cached > before.st.pages_cached);
    char msg[256];
    CHECK_OK(kv_check(e.kv, msg, sizeof msg));
    free(lg);
    env_close(&e);
}

TEST_MAIN(verify_equals_decode, verify_batched, rewind_restores_pool)
