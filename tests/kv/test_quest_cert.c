/* Quest certificates (st_kv_quest_certify): on hand-made pages whose keys all equal their
 * box the bound equals the true skipped mass to ~1e-12 and the growth stops at the shortest
 * prefix of the bound order; on random pages of every KV type, with GQA, over thousands of
 * (query, layer, head) samples the true skipped mass never exceeds the bound; epsilon 0 and
 * growth to every page give a dense selection. */
#include "strata/quest.h"
#include "quest_fx.h"


/* Page p's keys: every token c_p * u (f16-exact values, so the box is the key itself). */
#define T_D 16
#define T_P 8
#define T_PAGES 7
#define T_LEN (6 * T_P + 3)
static const float t_c[T_PAGES] = {1.0f, 2.5f, 0.5f, 3.0f, 1.75f, 1.25f, 0.75f};
static float t_u(int d) { return (float)((d % 5) - 2) / 4.0f; }

/* The exact skipped mass of query head g when the pages flagged in skip[] are left out. */
static double exact_skip(const float *q, int g, const int *skip) {
    const double scale = 1.0 / sqrt((double)T_D);
    double s[T_PAGES], m = -INFINITY, tot = 0, out = 0;
    for (int p = 0; p < T_PAGES; p++) {
        s[p] = 0;
        for (int d = 0; d < T_D; d++) s[p] += (double)q[g * T_D + d] * t_c[p] * t_u(d);
        s[p] *= scale;
        if (s[p] > m) m = s[p];
    }
    for (int p = 0; p < T_PAGES; p++) {
        const double n = p == T_PAGES - 1 ? T_LEN - 6 * T_P : T_P, e = n * exp(s[p] - m);
        tot += e;
        if (skip[p]) out += e;
    }
    return out / tot;
}

static void view_list(fx *f, st_kv_seq_id s, int layer, st_attn_page *views, int cap, int *nv) {
    CHECK_OK(st_kv_seq_views(f->kv, s, layer, views, cap, nv));
}

TEST(test_bound_tight) {
    fx f;
    REQUIRE(fx_open(&f, ST_TYPE_F32, T_P, 16, 1, 1, T_D) == 0);
    st_kv_seq_id s;
    CHECK_OK(st_kv_seq_create(f.kv, &s));
    float k[T_LEN * T_D], v[T_LEN * T_D];
    for (int t = 0; t < T_LEN; t++)
        for (int d = 0; d < T_D; d++) {
            k[t * T_D + d] = t_c[t / T_P] * t_u(d);
            v[t * T_D + d] = 0.5f;
        }
    CHECK_OK(st_kv_seq_append(f.kv, s, T_LEN, NULL, k, v));
    /* two query heads of the one KV head; head 1 prefers other pages than head 0 */
    float q[2 * T_D];
    for (int d = 0; d < T_D; d++) q[d] = 3.0f * t_u(d) + 0.01f * (float)d, q[T_D + d] = -1.5f * t_u(d);
    st_kv_quest_params p = st_kv_quest_default_params();
    p.budget = 4 * T_P; /* sink page 0, recent 5-6, one of 1..4 ranked */
    p.dense_layers = 0;
    p.certify = 1;
    p.epsilon = 1;
    p.cert_dense_frac = 1; /* grow page by page: the growth order is what is checked */
    st_kv_select *sel;
    REQUIRE(st_kv_select_create(&sel) == 0);
    st_attn_page views[16];
    int nv = 0;
    view_list(&f, s, 0, views, 16, &nv);
    CHECK_INT(nv, T_PAGES);
    CHECK_OK(st_kv_quest_select(f.kv, s, 0, f.ws, q, 2, &p, sel));
    double bound[2], skip[2], frac[2];
    CHECK_OK(st_kv_quest_certify(f.kv, views, nv, q, 2, 0, 1.0, sel, bound));
    const int32_t *idx;
    int32_t n;
    CHECK_OK(st_kv_select_head(sel, 0, &idx, &n));
    CHECK_INT(n, 4);
    int skipped[T_PAGES] = {1, 1, 1, 1, 1, 1, 1};
    for (int i = 0; i < n; i++) skipped[idx[i]] = 0;
    CHECK_OK(st_kv_quest_mass_skip(f.kv, views, nv, sel, q, 2, 0, frac, skip));
    for (int g = 0; g < 2; g++) {
        const double want = exact_skip(q, g, skipped);
        printf("  head %d: skipped mass %.12g, reported bound %.12g, audit %.12g\n", g, want, bound[g], skip[g]);
        CHECK(want > 1e-6); /* something was really left out */
        CHECK(bound[g] >= want);
        CHECK(bound[g] >= skip[g]);
        CHECK(bound[g] <= want * (1 + 1e-9)); /* tight: box = keys */
        CHECK_NEAR(skip[g], want, want * 1e-12);
    }
    /* growth: the skipped pages in decreasing group bound; an eps between the worst head's
     * mass after cut and after cut + 1 pages of that order must add exactly cut + 1 */
    int order[T_PAGES], n_sk = 0;
    for (int j = 0; j < T_PAGES; j++)
        if (skipped[j]) order[n_sk++] = j;
    double key[T_PAGES];
    for (int j = 0; j < T_PAGES; j++) {
        key[j] = -INFINITY;
        for (int g = 0; g < 2; g++) {
            double sc = 0;
            for (int d = 0; d < T_D; d++) sc += (double)q[g * T_D + d] * t_c[j] * t_u(d);
            if (sc > key[j]) key[j] = sc;
        }
    }
    for (int a = 0; a < n_sk; a++)
        for (int b = a + 1; b < n_sk; b++)
            if (key[order[b]] > key[order[a]]) {
                int t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
    double worst[T_PAGES + 1];
    int sk2[T_PAGES];
    memcpy(sk2, skipped, sizeof sk2);
    for (int i = 0; i <= n_sk; i++) {
        worst[i] = fmax(exact_skip(q, 0, sk2), exact_skip(q, 1, sk2));
        if (i < n_sk) sk2[order[i]] = 0;
    }
    /* the first step of the order that lowers the worst head clearly: eps just above it */
    int cut = 0;
    while (cut < n_sk && !(worst[cut + 1] < worst[cut] * 0.9)) cut++;
    REQUIRE(cut < n_sk);
    const double eps = sqrt(worst[cut] * worst[cut + 1]);
    CHECK_OK(st_kv_quest_select(f.kv, s, 0, f.ws, q, 2, &p, sel));
    CHECK_OK(st_kv_quest_certify(f.kv, views, nv, q, 2, 0, eps, sel, bound));
    st_kv_select_stats ss;
    st_kv_select_get_stats(sel, &ss);
    CHECK_INT(ss.n_grown, cut + 1);
    CHECK_INT(ss.n_listed, 4 + cut + 1);
    CHECK_INT(ss.n_bound, 2);
    CHECK_OK(st_kv_select_head(sel, 0, &idx, &n));
    int has = 0;
    for (int i = 0; i < n; i++) {
        has += idx[i] == order[0];
        if (i) CHECK(idx[i] > idx[i - 1]); /* ascending */
    }
    CHECK_INT(has, 1);
    CHECK(fmax(bound[0], bound[1]) <= eps);
    CHECK(fmax(bound[0], bound[1]) >= worst[cut + 1]);
    CHECK_NEAR(ss.bound_max, fmax(bound[0], bound[1]), 0);
    /* a tiny epsilon grows to every page: dense; epsilon 0 at select is dense already */
    CHECK_OK(st_kv_quest_select(f.kv, s, 0, f.ws, q, 2, &p, sel));
    CHECK(!st_kv_select_dense(sel));
    CHECK_OK(st_kv_quest_certify(f.kv, views, nv, q, 2, 0, 0, sel, bound));
    CHECK(st_kv_select_dense(sel));
    CHECK(bound[0] == 0 && bound[1] == 0);
    p.epsilon = 0;
    CHECK_OK(st_kv_quest_select(f.kv, s, 0, f.ws, q, 2, &p, sel));
    CHECK(st_kv_select_dense(sel));
    /* bad arguments */
    p.epsilon = 1.5;
    CHECK_INT(st_kv_quest_select(f.kv, s, 0, f.ws, q, 2, &p, sel), ST_E_INVAL);
    p.epsilon = NAN;
    CHECK_INT(st_kv_quest_select(f.kv, s, 0, f.ws, q, 2, &p, sel), ST_E_INVAL);
    p.epsilon = 0.5;
    CHECK_OK(st_kv_quest_select(f.kv, s, 0, f.ws, q, 2, &p, sel));
    CHECK_INT(st_kv_quest_certify(f.kv, views, nv - 1, q, 2, 0, 0.5, sel, bound), ST_E_INVAL);
    CHECK_INT(st_kv_quest_certify(f.kv, views, nv, q, 2, 0, -0.1, sel, bound), ST_E_INVAL);
    CHECK_INT(st_kv_quest_certify(f.kv, views, nv, q, 0, 0, 0.5, sel, bound), ST_E_INVAL);
    st_kv_select_destroy(sel);
    fx_close(&f);
}

/* Random keys (page amplitudes vary) of every KV type, 2 layers, 2 KV heads of 2 query
 * heads each: the true skipped mass (audited in double) never exceeds the bound. */
TEST(test_bound_random) {
    static const st_type types[] = {ST_TYPE_F32, ST_TYPE_F16, ST_TYPE_BF16, ST_TYPE_Q8_0};
    static const double epss[] = {1.0, 1e-2, 1e-4};
    enum { L = 2, H = 2, NH = 4, D = 32, P = 8, LEN = 8 * 40 + 5 };
    int64_t samples = 0, skipping = 0, violations = 0, grown = 0;
    double worst_ratio = 0;
    for (size_t ti = 0; ti < 4; ti++) {
        fx f;
        REQUIRE(fx_open(&f, types[ti], P, 64, L, H, D) == 0);
        st_kv_seq_id s;
        CHECK_OK(st_kv_seq_create(f.kv, &s));
        rng_state = 11 + ti;
        const int row = H * D;
        float *k = malloc((size_t)L * LEN * row * sizeof *k), *v = malloc((size_t)L * LEN * row * sizeof *v);
        for (int l = 0; l < L; l++)
            for (int t = 0; t < LEN; t++) {
                const float amp = 0.25f + (float)((t / P * 7919 + l * 31) % 13) / 3.0f;
                for (int j = 0; j < row; j++) {
                    k[((size_t)l * LEN + t) * row + j] = amp * frand();
                    v[((size_t)l * LEN + t) * row + j] = frand();
                }
            }
        CHECK_OK(st_kv_seq_append(f.kv, s, LEN, NULL, k, v));
        free(k);
        free(v);
        st_kv_select *sel;
        REQUIRE(st_kv_select_create(&sel) == 0);
        st_attn_page views[64];
        float q[NH * D];
        for (int rep = 0; rep < 40; rep++) {
            const float qa = 0.5f + (float)(rep % 5);
            for (int i = 0; i < NH * D; i++) q[i] = qa * frand();
            for (int l = 0; l < L; l++) {
                int nv = 0;
                view_list(&f, s, l, views, 64, &nv);
                for (size_t ei = 0; ei < 3; ei++) {
                    st_kv_quest_params p = st_kv_quest_default_params();
                    p.budget = (rep % 4 + 3) * P;
                    p.dense_layers = 0;
                    p.certify = 1;
                    p.epsilon = epss[ei];
                    double bound[NH], skip[NH], frac[NH];
                    CHECK_OK(st_kv_quest_select(f.kv, s, l, f.ws, q, NH, &p, sel));
                    CHECK_OK(st_kv_quest_certify(f.kv, views, nv, q, NH, 0, p.epsilon, sel, bound));
                    st_kv_select_stats ss;
                    st_kv_select_get_stats(sel, &ss);
                    grown += ss.n_grown;
                    CHECK_OK(st_kv_quest_mass_skip(f.kv, views, nv, sel, q, NH, 0, frac, skip));
                    for (int g = 0; g < NH; g++) {
                        const int32_t *idx;
                        int32_t n;
                        CHECK_OK(st_kv_select_head(sel, g / 2, &idx, &n));
                        samples++;
                        skipping += n < nv && skip[g] > 0;
                        CHECK(bound[g] <= p.epsilon);
                        if (skip[g] > bound[g]) {
                            violations++;
                            fprintf(stderr, "  VIOLATION type %zu rep %d layer %d head %d: %.17g > %.17g\n", ti,
                                    rep, l, g, skip[g], bound[g]);
                        }
                        if (skip[g] > 0 && skip[g] / bound[g] > worst_ratio) worst_ratio = skip[g] / bound[g];
                    }
                }
            }
        }
        st_kv_select_destroy(sel);
        fx_close(&f);
    }
    printf("  %lld samples, %lld skipping pages, %lld pages grown, %lld violations, max mass/bound %.6f\n",
           (long long)samples, (long long)skipping, (long long)grown, (long long)violations, worst_ratio);
    CHECK_INT(violations, 0);
    CHECK(samples >= 3000);
    CHECK(skipping >= 1000);
    CHECK(grown > 0);
    CHECK(worst_ratio > 0.01); /* the bound means something: not vacuously 1 */
}

TEST_MAIN(test_bound_tight, test_bound_random)
