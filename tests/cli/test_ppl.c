/* The perplexity estimate and llama.cpp's "+/-" (perplexity.cpp: sqrt((E[x^2] - E[x]^2) /
 * (n - 1)) * PPL over the scored tokens' NLLs x), against values worked by hand. */
#include "cli/ppl.h"
#include "../test.h"

TEST(test_ppl_uncertainty_by_hand) {
    /* NLLs 1, 2, 3, 4: mean 2.5, E[x^2] = 30/4 = 7.5, var = 7.5 - 6.25 = 1.25,
     * sqrt(1.25 / 3) = 0.6454972, PPL = e^2.5 = 12.1824940, +/- 0.6454972 * 12.1824940 */
    st_ppl_acc a = {0};
    for (int i = 1; i <= 4; i++) st_ppl_add(&a, i);
    CHECK_INT(a.count, 4);
    CHECK_NEAR(st_ppl_value(&a), 12.182493960703473, 1e-12);
    CHECK_NEAR(st_ppl_uncertainty(&a), 7.863766037512831, 1e-12);
    /* 0.5, 1.25, 2: mean 1.25, var (0.5625 + 0 + 0.5625) / 3 = 0.375, sqrt(0.375 / 2) = 0.4330127 */
    st_ppl_acc b = {0};
    st_ppl_add(&b, 0.5), st_ppl_add(&b, 1.25), st_ppl_add(&b, 2.0);
    CHECK_NEAR(st_ppl_value(&b), 3.4903429574618414, 1e-12);
    CHECK_NEAR(st_ppl_uncertainty(&b), 0.4330127018922193 * 3.4903429574618414, 1e-12);
}

TEST(test_ppl_degenerate) {
    st_ppl_acc a = {0};
    CHECK(isnan(st_ppl_value(&a)));
    st_ppl_add(&a, 2.0);
    CHECK_NEAR(st_ppl_value(&a), exp(2.0), 1e-12);
    CHECK(isnan(st_ppl_uncertainty(&a))); /* one token: no spread to speak of */
    st_ppl_add(&a, 2.0), st_ppl_add(&a, 2.0);
    CHECK_NEAR(st_ppl_uncertainty(&a), 0, 0); /* identical NLLs (a variance that may round below 0) */
}

TEST_MAIN(test_ppl_uncertainty_by_hand, test_ppl_degenerate)
