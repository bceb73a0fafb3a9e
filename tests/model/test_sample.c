/* Sampler: greedy, filters, penalty, and reproducibility from the seed. */
#include "strata/sample.h"
#include "../test.h"

#include <math.h>

#define NV 1000

static void fill(float *lg, unsigned seed) {
    for (int i = 0; i < NV; i++) {
        seed = seed * 1664525u + 1013904223u;
        lg[i] = (float)((seed >> 8) % 10000) / 1000.0f; /* 0..10 */
    }
}

static int argmax(const float *x) {
    int b = 0;
    for (int i = 1; i < NV; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

TEST(test_greedy) {
    float lg[NV];
    fill(lg, 1);
    st_sampler_params p = st_sampler_default_params();
    p.temp = 0;
    st_sampler *s = NULL;
    REQUIRE(st_sampler_create(&p, NV, &s) == 0);
    CHECK_INT(st_sampler_sample(s, lg), argmax(lg));
    lg[3] = 100; /* ties go to the lowest id */
    lg[7] = 100;
    CHECK_INT(st_sampler_sample(s, lg), 3);
    lg[NV - 1] = 101; /* the largest in the tail past the last 16-lane block */
    CHECK_INT(st_sampler_sample(s, lg), NV - 1);
    lg[0] = NAN, lg[5] = NAN; /* NaNs never win */
    CHECK_INT(st_sampler_sample(s, lg), NV - 1);
    for (int i = 0; i < NV; i++) lg[i] = -INFINITY;
    lg[2] = NAN;
    CHECK_INT(st_sampler_sample(s, lg), 0); /* all -inf: the first */
    st_sampler_destroy(s);
    st_sampler_destroy(NULL);
}

TEST(test_top_k_one_is_greedy_and_filters_bound_choices) {
    float lg[NV];
    fill(lg, 2);
    st_sampler_params p = st_sampler_default_params();
    p.top_k = 1, p.temp = 1.5f;
    st_sampler *s = NULL;
    REQUIRE(st_sampler_create(&p, NV, &s) == 0);
    for (int i = 0; i < 50; i++) CHECK_INT(st_sampler_sample(s, lg), argmax(lg));
    st_sampler_destroy(s);
    /* top-k 5: every draw is among the 5 best */
    p.top_k = 5, p.top_p = 1, p.min_p = 0, p.temp = 5;
    REQUIRE(st_sampler_create(&p, NV, &s) == 0);
    int seen[NV] = {0}, distinct = 0;
    for (int i = 0; i < 400; i++) {
        int t = st_sampler_sample(s, lg);
        int better = 0;
        for (int j = 0; j < NV; j++) better += lg[j] > lg[t];
        CHECK(better < 5);
        distinct += !seen[t]++;
    }
    CHECK(distinct > 1);
    st_sampler_destroy(s);
    /* min-p 0.5 at temp 1 over logits where only two tokens are within log(2) of the best */
    for (int i = 0; i < NV; i++) lg[i] = 0;
    lg[10] = 10, lg[11] = 9.8f, lg[12] = 9;
    p.top_k = 0, p.top_p = 1, p.min_p = 0.5f, p.temp = 1;
    REQUIRE(st_sampler_create(&p, NV, &s) == 0);
    for (int i = 0; i < 200; i++) {
        int t = st_sampler_sample(s, lg);
        CHECK(t == 10 || t == 11);
    }
    st_sampler_destroy(s);
    /* top-p 0.5: the best token alone holds > 0.5 of the mass */
    p.min_p = 0, p.top_p = 0.5f;
    lg[11] = 5;
    REQUIRE(st_sampler_create(&p, NV, &s) == 0);
    for (int i = 0; i < 100; i++) CHECK_INT(st_sampler_sample(s, lg), 10);
    st_sampler_destroy(s);
}

TEST(test_seed_reproducible) {
    float lg[NV];
    fill(lg, 3);
    st_sampler_params p = st_sampler_default_params();
    p.temp = 2, p.top_k = 0, p.top_p = 1, p.min_p = 0, p.seed = 1234;
    st_sampler *a = NULL, *b = NULL, *c = NULL;
    REQUIRE(st_sampler_create(&p, NV, &a) == 0);
    REQUIRE(st_sampler_create(&p, NV, &b) == 0);
    p.seed = 99;
    REQUIRE(st_sampler_create(&p, NV, &c) == 0);
    int same = 1, differ = 0, ta[64];
    for (int i = 0; i < 64; i++) {
        ta[i] = st_sampler_sample(a, lg);
        same &= ta[i] == st_sampler_sample(b, lg);
        differ += ta[i] != st_sampler_sample(c, lg);
    }
    CHECK(same);
    CHECK(differ > 0);
    st_sampler_reset(a); /* back to the seed */
    for (int i = 0; i < 64; i++) CHECK_INT(st_sampler_sample(a, lg), ta[i]);
    st_sampler_destroy(a), st_sampler_destroy(b), st_sampler_destroy(c);
}

TEST(test_repetition_penalty) {
    float lg[NV] = {0};
    lg[5] = 2.0f, lg[6] = 1.9f, lg[7] = -1.0f;
    st_sampler_params p = st_sampler_default_params();
    p.temp = 0, p.repeat_penalty = 1.2f, p.repeat_last_n = 4;
    st_sampler *s = NULL;
    REQUIRE(st_sampler_create(&p, NV, &s) == 0);
    CHECK_INT(st_sampler_sample(s, lg), 5);
    st_sampler_accept(s, 5); /* 2.0 / 1.2 < 1.9 */
    CHECK_INT(st_sampler_sample(s, lg), 6);
    for (int i = 0; i < 4; i++) st_sampler_accept(s, 100 + i); /* 5 leaves the window */
    CHECK_INT(st_sampler_sample(s, lg), 5);
    st_sampler_destroy(s);
    CHECK_INT(st_sampler_create(&p, 0, &s), ST_E_INVAL);
    p.repeat_penalty = 0;
    CHECK_INT(st_sampler_create(&p, NV, &s), ST_E_INVAL);
    CHECK(s == NULL);
}

/* Frequency and presence penalties as llama.cpp's penalties stage: logit - count * freq -
 * presence for a token in the window, after the repetition penalty; the same in the greedy
 * path and in the sampling path (top-k 1 makes it pick the best penalized logit). */
TEST(test_frequency_presence_penalties) {
    float lg[NV] = {0};
    lg[5] = 1.0f, lg[6] = 0.85f, lg[7] = -1.0f;
    for (int path = 0; path < 2; path++) {
        st_sampler_params p = st_sampler_default_params();
        p.temp = path ? 0.7f : 0, p.top_k = 1, p.repeat_last_n = 8;
        p.freq_penalty = 0.05f; /* token 5 twice: 1.0 - 0.1 = 0.9 > 0.85 */
        st_sampler *s = NULL;
        REQUIRE(st_sampler_create(&p, NV, &s) == 0);
        st_sampler_accept(s, 5), st_sampler_accept(s, 5);
        CHECK_INT(st_sampler_sample(s, lg), 5);
        st_sampler_accept(s, 5), st_sampler_accept(s, 5); /* four times: 0.8 < 0.85 */
        CHECK_INT(st_sampler_sample(s, lg), 6);
        st_sampler_destroy(s);

        p.freq_penalty = 0, p.presence_penalty = 0.1f; /* any count: 1.0 - 0.1 = 0.9 */
        REQUIRE(st_sampler_create(&p, NV, &s) == 0);
        for (int i = 0; i < 6; i++) st_sampler_accept(s, 5);
        CHECK_INT(st_sampler_sample(s, lg), 5);
        st_sampler_accept(s, 6); /* 6: 0.85 - 0.1 = 0.75 */
        CHECK_INT(st_sampler_sample(s, lg), 5);
        st_sampler_destroy(s);

        p.presence_penalty = 0.2f; /* 0.8 < 0.85: 6 unless it is in the window too */
        REQUIRE(st_sampler_create(&p, NV, &s) == 0);
        st_sampler_accept(s, 5);
        CHECK_INT(st_sampler_sample(s, lg), 6);
        st_sampler_destroy(s);

        /* the repetition penalty first, then the subtraction: 1.0 / 1.25 - 0.1 = 0.7 < 0.71;
         * the other order, (1.0 - 0.1) / 1.25 = 0.72, would pick 5 */
        lg[6] = 0.71f;
        p.repeat_penalty = 1.25f, p.presence_penalty = 0.1f;
        REQUIRE(st_sampler_create(&p, NV, &s) == 0);
        st_sampler_accept(s, 5);
        CHECK_INT(st_sampler_sample(s, lg), 6);
        st_sampler_destroy(s);
        lg[6] = 0.85f;

        p.repeat_penalty = 1, p.presence_penalty = NAN;
        CHECK_INT(st_sampler_create(&p, NV, &s), ST_E_INVAL);
        p.presence_penalty = 0, p.freq_penalty = INFINITY;
        CHECK_INT(st_sampler_create(&p, NV, &s), ST_E_INVAL);
    }
}

/* Pearson's chi-square of counts[n] against probabilities p[n] over `total` draws (cells whose
 * expectation is below 5 pooled into one). *df its degrees of freedom. */
static double chi_square(const long *counts, const double *p, int n, long total, int *df) {
    double chi = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int i = 0; i < n; i++) {
        const double e = p[i] * (double)total;
        if (e < 5) {
            pool_e += e, pool_o += (double)counts[i];
            continue;
        }
        chi += ((double)counts[i] - e) * ((double)counts[i] - e) / e, cells++;
    }
    if (pool_e > 0) chi += (pool_o - pool_e) * (pool_o - pool_e) / pool_e, cells++;
    *df = cells - 1;
    return chi;
}

/* Wilson-Hilferty: a chi-square with df degrees of freedom as a standard normal z. */
static double chi_z(double chi, int df) {
    const double k = df, a = 2.0 / (9.0 * k);
    return (cbrt(chi / k) - (1 - a)) / sqrt(a);
}

/* The speculative rule for a deterministic draft: over many seeds, the token drawn at a
 * drafted position has exactly st_sampler_sample's distribution (chi-square against the
 * softmax the sampler draws from, and two-sample against st_sampler_sample's own draws), the
 * draft is taken with its probability, and a draft outside the candidates (top-k) is never
 * taken. The same statistic flags the wrong rule "always take the draft". */
TEST(test_draft_rule_keeps_the_distribution) {
    enum { N = 6, DRAWS = 40000 };
    const float lg[N] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -1.0f};
    for (int variant = 0; variant < 2; variant++) {
        st_sampler_params sp = st_sampler_default_params();
        sp.temp = 0.9f, sp.top_p = 1.0f, sp.min_p = 0.0f;
        sp.top_k = variant ? 3 : 0;
        const int32_t draft = variant ? 4 : 1; /* variant 1: a draft the top-k cut leaves out */
        /* the distribution the plain draw picks from: softmax at temp over the candidates */
        double p[N] = {0}, sum = 0;
        const int nc = variant ? 3 : N;
        for (int i = 0; i < nc; i++) sum += p[i] = exp((double)lg[i] / sp.temp);
        for (int i = 0; i < nc; i++) p[i] /= sum;
        long spec[N] = {0}, plain[N] = {0}, taken = 0;
        for (long d = 0; d < DRAWS; d++) {
            sp.seed = 1000003u * (uint64_t)d + 17u;
            st_sampler *s = NULL;
            CHECK_OK(st_sampler_create(&sp, N, &s));
            if (!s) return;
            int acc = -1;
            const int32_t t = st_sampler_sample_draft(s, lg, draft, &acc);
            CHECK(t >= 0 && t < N && (acc == 0 || acc == 1));
            if (t < 0 || t >= N) {
                st_sampler_destroy(s);
                return;
            }
            CHECK_INT(acc, t == draft); /* taken exactly when the token is the draft */
            spec[t]++, taken += acc;
            st_sampler_reset(s);
            plain[st_sampler_sample(s, lg)]++;
            st_sampler_destroy(s);
        }
        int df = 0, df_plain = 0, df_wrong = 0;
        const double c_spec = chi_square(spec, p, N, DRAWS, &df), z_spec = chi_z(c_spec, df);
        const int df_spec = df;
        const double c_plain = chi_square(plain, p, N, DRAWS, &df_plain), z_plain = chi_z(c_plain, df_plain);
        /* the wrong rule: every draw takes the draft */
        long wrong[N] = {0};
        wrong[draft] = DRAWS;
        const double c_wrong = chi_square(wrong, p, N, DRAWS, &df_wrong), z_wrong = chi_z(c_wrong, df_wrong);
        const double p_draft = draft < nc ? p[draft] : 0;
        fprintf(stderr, "  %s: draft taken %.4f (p = %.4f); chi-square z: rule %.2f (df %d), plain %.2f, always-take %.0f\n",
                variant ? "top-k 3, draft outside" : "no truncation", (double)taken / DRAWS, p_draft, z_spec, df_spec,
                z_plain, z_wrong);
        CHECK(z_spec < 3.72);  /* p < 1e-4 */
        CHECK(z_plain < 3.72);
        CHECK(z_wrong > 3.72); /* the statistic sees a wrong rule */
        if (variant) CHECK_INT(taken, 0);
        else CHECK(fabs((double)taken / DRAWS - p_draft) < 4 * sqrt(p_draft * (1 - p_draft) / DRAWS));
    }
    /* greedy: the argmax, taken when it is the draft */
    st_sampler_params g = st_sampler_default_params();
    g.temp = 0;
    st_sampler *s = NULL;
    CHECK_OK(st_sampler_create(&g, N, &s));
    int acc = -1;
    CHECK_INT(st_sampler_sample_draft(s, lg, 0, &acc), 0);
    CHECK_INT(acc, 1);
    CHECK_INT(st_sampler_sample_draft(s, lg, 2, &acc), 0);
    CHECK_INT(acc, 0);
    st_sampler_destroy(s);
}

TEST_MAIN(test_greedy, test_draft_rule_keeps_the_distribution, test_top_k_one_is_greedy_and_filters_bound_choices, test_seed_reproducible,
          test_repetition_penalty, test_frequency_presence_penalties)
