/* Sampler: greedy, filters, penalty, and reproducibility from the seed. */
#include "strata/sample.h"
#include "../test.h"

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

TEST_MAIN(test_greedy, test_top_k_one_is_greedy_and_filters_bound_choices, test_seed_reproducible,
          test_repetition_penalty, test_frequency_presence_penalties)
