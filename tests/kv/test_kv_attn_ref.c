/* Attention over REAL page tables of the KV library against a double-precision reference.
 *
 * tests/attn builds synthetic page lists; here the lists come from st_kv_seq_views after
 * the operations that shape them: batch and single-token appends, several forks of one
 * parent, writes after a fork (copy-on-write, into shared full pages and a shared tail),
 * truncate and regrow, remove leaving holes and partly valid pages (also in a page another
 * sequence still reads whole), and a prefix attach. An oracle keeps, per sequence, the K/V
 * written at each position (rounded to the KV type) and whether it is still readable; the
 * reference attends exactly the readable positions. Decode and chunk outputs must be within
 * attn_ref.h's tolerance of it, and 1 and 2 threads must give the same bits, on every ISA
 * the CPU has. */
#include "strata/kv.h"
#include "kv/kv_int.h"
#include "../test.h"
#include "attn/attn_ref.h"

enum { NL = 2, MAXPOS = 1400, MAXSEQ = 8, NQ = 24 };

typedef struct cfg {
    st_type type;
    int H, G, D, P;
} cfg;

/* Per-sequence oracle: what each position holds and whether attention may read it. */
typedef struct oseq {
    st_kv_seq_id id;
    int64_t len;
    uint8_t ok[MAXPOS];
    double *k, *v; /* [NL][MAXPOS][H][D] */
} oseq;

typedef struct world {
    cfg c;
    st_ctx *ctx;
    st_kv *kv;
    oseq s[MAXSEQ];
    int n;
    uint64_t rng;
    int32_t tok_next;
} world;

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

/* The value the KV holds for x. */
static double stored(st_type t, float x) {
    return t == ST_TYPE_F16 ? (double)st_fp16_to_fp32(st_fp32_to_fp16(x)) : (double)x;
}

static size_t row(const world *w) { return (size_t)w->c.H * w->c.D; }
static double *ok_at(const world *w, double *base, int l, int64_t p) {
    return base + ((size_t)l * MAXPOS + (size_t)p) * row(w);
}

static oseq *o_new(world *w) {
    oseq *o = &w->s[w->n++];
    memset(o, 0, sizeof *o);
    o->k = calloc((size_t)NL * MAXPOS * row(w), sizeof(double));
    o->v = calloc((size_t)NL * MAXPOS * row(w), sizeof(double));
    return o;
}

/* Random K/V [NL][n][H][D] for positions [pos, pos+n), recorded in the oracle. */
static void gen(world *w, oseq *o, int64_t pos, int64_t n, float *k, float *v) {
    const size_t r = row(w);
    for (int l = 0; l < NL; l++)
        for (int64_t i = 0; i < n; i++)
            for (size_t e = 0; e < r; e++) {
                float a = frand(&w->rng) * 2, b = frand(&w->rng);
                k[((size_t)l * n + i) * r + e] = a;
                v[((size_t)l * n + i) * r + e] = b;
                ok_at(w, o->k, l, pos + i)[e] = stored(w->c.type, a);
                ok_at(w, o->v, l, pos + i)[e] = stored(w->c.type, b);
            }
}

/* st_kv_seq_append of n tokens (with token ids when with_tokens). */
static void o_append(world *w, oseq *o, int64_t n, int with_tokens) {
    REQUIRE(o->len + n <= MAXPOS);
    float *k = malloc(sizeof(float) * NL * n * row(w)), *v = malloc(sizeof(float) * NL * n * row(w));
    int32_t *tok = malloc(sizeof(int32_t) * n);
    for (int64_t i = 0; i < n; i++) tok[i] = w->tok_next++;
    gen(w, o, o->len, n, k, v);
    int rc = st_kv_seq_append(w->kv, o->id, n, with_tokens ? tok : NULL, k, v);
    CHECK_OK(rc);
    for (int64_t i = 0; i < n; i++) o->ok[o->len + i] = 1;
    o->len += n;
    free(k), free(v), free(tok);
}

/* Overwrites [pos, pos+n) of every layer through st_kv_write (layer by layer, as a forward
 * step does) and commits. */
static void o_write(world *w, oseq *o, int64_t pos, int64_t n) {
    float *k = malloc(sizeof(float) * NL * n * row(w)), *v = malloc(sizeof(float) * NL * n * row(w));
    gen(w, o, pos, n, k, v);
    for (int l = 0; l < NL; l++)
        CHECK_OK(st_kv_write(w->kv, o->id, l, pos, n, k + (size_t)l * n * row(w),
                             v + (size_t)l * n * row(w)));
    CHECK_OK(st_kv_seq_commit(w->kv, o->id));
    free(k), free(v);
}

static oseq *o_fork(world *w, const oseq *src) {
    oseq *o = o_new(w);
    CHECK_OK(st_kv_seq_fork(w->kv, src->id, &o->id));
    o->len = src->len;
    memcpy(o->ok, src->ok, sizeof o->ok);
    memcpy(o->k, src->k, sizeof(double) * NL * MAXPOS * row(w));
    memcpy(o->v, src->v, sizeof(double) * NL * MAXPOS * row(w));
    return o;
}

static void o_truncate(world *w, oseq *o, int64_t len) {
    CHECK_OK(st_kv_seq_truncate(w->kv, o->id, len));
    for (int64_t p = len; p < o->len; p++) o->ok[p] = 0;
    o->len = len;
}

static void o_remove(world *w, oseq *o, int64_t p0, int64_t p1) {
    CHECK_OK(st_kv_seq_remove(w->kv, o->id, p0, p1));
    for (int64_t p = p0; p < p1 && p < o->len; p++) o->ok[p] = 0;
}

/* Double attention of query q [NH][D] of layer l over o's readable positions <= lim. */
static void ref_attn(const world *w, const oseq *o, int l, const float *q, int64_t lim,
                     double *out, double *den) {
    const int H = w->c.H, D = w->c.D, G = w->c.G;
    const double scale = 1.0 / sqrt((double)D);
    double *sc = malloc(sizeof(double) * (size_t)(o->len + 1));
    for (int hq = 0; hq < H * G; hq++) {
        const int h = hq / G;
        double m = -INFINITY;
        for (int64_t p = 0; p < o->len; p++) {
            sc[p] = -INFINITY;
            if (!o->ok[p] || p > lim) continue;
            const double *kk = ok_at(w, o->k, l, p) + (size_t)h * D;
            double x = 0;
            for (int d = 0; d < D; d++) x += (double)q[hq * D + d] * kk[d];
            sc[p] = x * scale;
            if (sc[p] > m) m = sc[p];
        }
        double *ov = out + (size_t)hq * D, *dn = den + (size_t)hq * D;
        for (int d = 0; d < D; d++) ov[d] = dn[d] = 0;
        if (m == -INFINITY) continue;
        double sum = 0;
        for (int64_t p = 0; p < o->len; p++) {
            if (sc[p] == -INFINITY) continue;
            const double e = exp(sc[p] - m);
            const double *vv = ok_at(w, o->v, l, p) + (size_t)h * D;
            sum += e;
            for (int d = 0; d < D; d++) ov[d] += e * vv[d], dn[d] += e * fabs(vv[d]);
        }
        for (int d = 0; d < D; d++) ov[d] /= sum, dn[d] /= sum;
    }
    free(sc);
}

/* Every sequence, every layer: decode and a chunk over st_kv_seq_views against the
 * reference, and 1 vs 2 threads bit for bit. Returns the worst error seen. */
static double check_all(world *w, st_ctx *c1, st_ctx *c2, st_attn_ws *ws) {
    const int NH = w->c.H * w->c.G, D = w->c.D;
    const st_attn_geom g = {.n_head = NH, .n_kv_head = w->c.H, .head_dim = D,
                            .page_size = w->c.P, .type = w->c.type};
    const double tol = w->c.type == ST_TYPE_F32 ? TOL_F32 : TOL_F16;
    float *q = malloc(sizeof(float) * NQ * NH * D), *o1 = malloc(sizeof(float) * NQ * NH * D),
          *o2 = malloc(sizeof(float) * NQ * NH * D);
    double *ref = malloc(sizeof(double) * NH * D), *den = malloc(sizeof(double) * NH * D);
    const int maxv = MAXPOS / 8 + 1;
    st_attn_page *views = malloc(sizeof(st_attn_page) * maxv);
    double worst = 0;
    for (int i = 0; i < w->n; i++) {
        const oseq *o = &w->s[i];
        int64_t len = 0;
        CHECK_OK(st_kv_seq_len(w->kv, o->id, &len));
        CHECK_INT(len, o->len);
        for (int l = 0; l < NL; l++) {
            int nv = 0;
            CHECK_OK(st_kv_seq_views(w->kv, o->id, l, views, maxv, &nv));
            const st_attn_seq as = {.pages = views, .n_pages = nv};
            for (int j = 0; j < NQ * NH * D; j++) q[j] = 3 * frand(&w->rng);
            /* decode: the query sees every readable position */
            CHECK_OK(st_attn_decode(c1, ws, &g, &as, q, o1));
            CHECK_OK(st_attn_decode(c2, ws, &g, &as, q, o2));
            CHECK(memcmp(o1, o2, sizeof(float) * NH * D) == 0);
            ref_attn(w, o, l, q, INT64_MAX, ref, den);
            double e = rel_err(o1, ref, den, NH, D);
            if (!(e <= tol))
                fprintf(stderr, "  %s seq %d layer %d decode: err %.3g\n",
                        st_type_name(w->c.type), i, l, e);
            CHECK(e <= tol);
            if (!(e <= worst)) worst = e;
            /* chunk: the last NQ positions, causally */
            const int32_t nq = o->len < NQ ? (int32_t)o->len : NQ;
            if (nq == 0) continue;
            const int64_t pos0 = o->len - nq;
            CHECK_OK(st_attn_chunk(c1, ws, &g, &as, q, nq, pos0, o1));
            CHECK_OK(st_attn_chunk(c2, ws, &g, &as, q, nq, pos0, o2));
            CHECK(memcmp(o1, o2, sizeof(float) * nq * NH * D) == 0);
            for (int t = 0; t < nq; t++) {
                ref_attn(w, o, l, q + (size_t)t * NH * D, pos0 + t, ref, den);
                e = rel_err(o1 + (size_t)t * NH * D, ref, den, NH, D);
                if (!(e <= tol))
                    fprintf(stderr, "  %s seq %d layer %d chunk row %d: err %.3g\n",
                            st_type_name(w->c.type), i, l, t, e);
                CHECK(e <= tol);
                if (!(e <= worst)) worst = e;
            }
        }
    }
    free(q), free(o1), free(o2), free(ref), free(den), free(views);
    return worst;
}

/* Builds the sequences: a parent, three forks and a prefix-attached one, then changes
 * every one of them so each page list holds shared pages, private copies, holes and
 * partly valid pages. */
static void build(world *w) {
    const int P = w->c.P;
    oseq *a = o_new(w);
    CHECK_OK(st_kv_seq_create(w->kv, &a->id));
    int64_t start = w->tok_next;
    o_append(w, a, 37 * P, 1);   /* batch: 37 sealed, keyed pages */
    for (int i = 0; i < 5; i++) o_append(w, a, 1, 1); /* single tokens: a partial tail */

    /* prefix attach: a new sequence gets A's keyed pages by reference */
    oseq *e = o_new(w);
    CHECK_OK(st_kv_seq_create(w->kv, &e->id));
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)a->len);
    for (int64_t i = 0; i < a->len; i++) tok[i] = (int32_t)(start + i);
    int64_t att = 0;
    CHECK_OK(st_kv_prefix_attach(w->kv, e->id, tok, a->len, &att));
    CHECK_INT(att, 37 * P);
    free(tok);
    e->len = att;
    memcpy(e->ok, a->ok, (size_t)att);
    memcpy(e->k, a->k, sizeof(double) * NL * MAXPOS * row(w)); /* positions >= att unused */
    memcpy(e->v, a->v, sizeof(double) * NL * MAXPOS * row(w));
    o_append(w, e, 3 * P + 7, 0);

    oseq *b = o_fork(w, a), *c = o_fork(w, a), *d = o_fork(w, a);
    st_kv_stats st0, st1;
    st_kv_get_stats(w->kv, &st0);
    /* writes after the fork: A rewrites part of a shared full page and B of another,
     * C grows from the shared partial tail, D truncates into a shared page and regrows */
    o_write(w, a, 3 * P + 2, 5);
    o_write(w, b, 10 * P, P);
    o_append(w, c, 2 * P + 3, 0);
    o_truncate(w, d, 20 * P + 9);
    o_append(w, d, 4, 0);
    o_write(w, d, 20 * P + 3, 2);
    st_kv_get_stats(w->kv, &st1);
    CHECK(st1.cow_copies >= st0.cow_copies + 4); /* A, B, C's tail, D's tail */

    /* removals: B a whole page (hole) and a partial range across a page boundary, in
     * pages A and C still read whole; A a range inside its tail; E across attached and
     * own pages; C the tail end */
    o_remove(w, b, 5 * P, 6 * P);
    o_remove(w, b, 12 * P + 5, 14 * P + 3);
    o_remove(w, a, a->len - 4, a->len - 2);
    o_remove(w, e, 30 * P + 1, 38 * P + 2);
    o_remove(w, c, c->len - P - 2, c->len - 1);
    /* after a remove: B writes into a page A shares (its own mask stays), D into a hole */
    o_write(w, b, 12 * P + 1, 3);
    o_remove(w, d, 7 * P, 9 * P);
    o_append(w, d, P + 1, 0);
    /* a fork of a fork that removed, then a truncate to a page boundary */
    oseq *f = o_fork(w, b);
    o_truncate(w, f, 24 * P);
    o_append(w, f, 6, 0);
    char msg[256];
    CHECK_OK(kv_check(w->kv, msg, sizeof msg));
}

static void run_cfg(const cfg *c, uint64_t seed) {
    world w;
    memset(&w, 0, sizeof w);
    w.c = *c;
    w.rng = seed;
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = 1;
    st_ctx *c1 = NULL, *c2 = NULL;
    REQUIRE(st_ctx_create(&cp, &c1) == 0);
    cp.n_threads = 2;
    REQUIRE(st_ctx_create(&cp, &c2) == 0);
    st_kv_params p = st_kv_default_params();
    p.n_layer = NL, p.n_kv_head = c->H, p.head_dim = c->D, p.page_size = c->P;
    p.type = c->type;
    p.n_pages = 512;
    REQUIRE(st_kv_create(c1, &p, &w.kv) == 0);
    build(&w);
    const int best = (int)st_ctx_isa(c1);
    for (int isa = 0; isa <= best; isa++) {
        st_attn_ws *ws = NULL;
        CHECK_OK(st_attn_ws_create((st_isa)isa, &ws));
        REQUIRE(ws);
        double e = check_all(&w, c1, c2, ws);
        printf("  %s H %d G %d D %d P %d isa %s: %d sequences, worst err %.3g\n",
               st_type_name(c->type), c->H, c->G, c->D, c->P, st_isa_name((st_isa)isa), w.n, e);
        st_attn_ws_destroy(ws);
    }
    for (int i = 0; i < w.n; i++) {
        CHECK_OK(st_kv_seq_free(w.kv, w.s[i].id));
        free(w.s[i].k), free(w.s[i].v);
    }
    st_kv_stats st;
    st_kv_get_stats(w.kv, &st);
    CHECK_INT(st.pages_used, 0);
    st_kv_destroy(w.kv);
    st_ctx_destroy(c1);
    st_ctx_destroy(c2);
}

TEST(test_attn_over_forks_f32) {
    const cfg cs[] = {{ST_TYPE_F32, 2, 2, 32, 16}, {ST_TYPE_F32, 1, 4, 64, 8}};
    for (int i = 0; i < 2; i++) run_cfg(&cs[i], 11 + (uint64_t)i);
}

TEST(test_attn_over_forks_f16) {
    const cfg cs[] = {{ST_TYPE_F16, 2, 2, 32, 16}, {ST_TYPE_F16, 2, 1, 16, 32}};
    for (int i = 0; i < 2; i++) run_cfg(&cs[i], 21 + (uint64_t)i);
}

TEST_MAIN(test_attn_over_forks_f32, test_attn_over_forks_f16)
