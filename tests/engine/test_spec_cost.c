/* The engine-wide cost check of drafting (en_spec_cost_record) on made-up step timings:
 * verify steps that cost more per emitted token pause drafting for 8, 16, 32, 64, 64 steps,
 * counted down by decode steps; verify steps that cost less never pause it and reset the
 * pause length; a run of verify steps with too few plain ones to compare with buys a short
 * pause to measure plain decode; steps that emitted nothing or carry no valid time are
 * ignored. */
#include "engine/engine_int.h"
#include "../test.h"

#include <math.h>
#include <string.h>

/* n decode steps of s seconds emitting tok tokens each, with (v) or without a verify round;
 * returns how many of them started a pause */
static int steps(en_spec_cost *c, int n, double s, int64_t tok, int v) {
    int started = 0;
    for (int i = 0; i < n; i++) started += en_spec_cost_record(c, s, tok, v);
    return started;
}

TEST(test_costly_verify_pauses_longer_each_time) {
    en_spec_cost c;
    memset(&c, 0, sizeof c);
    /* plain: 10 ms a token; verify: 14 ms a step that emitted 1 token (its draft rejected) */
    CHECK_INT(steps(&c, 4, 0.010, 1, 0), 0);
    CHECK_INT(steps(&c, 3, 0.014, 1, 1), 0);
    CHECK_INT(c.pause, 0);
    CHECK_INT(en_spec_cost_record(&c, 0.014, 1, 1), 1);
    CHECK_INT(c.pause, 8);
    const int want[] = {16, 32, 64, 64};
    for (int r = 0; r < 4; r++) {
        /* the pause's plain steps count it down to 0 */
        CHECK_INT(steps(&c, 8 << (r < 3 ? r : 3), 0.010, 1, 0), 0);
        CHECK_INT(c.pause, 0);
        /* the verify window restarted: 3 more steps give no verdict, the 4th pauses again */
        CHECK_INT(steps(&c, 3, 0.024, 2, 1), 0);
        CHECK_INT(en_spec_cost_record(&c, 0.024, 2, 1), 1);
        CHECK_INT(c.pause, want[r]);
    }
}

TEST(test_cheap_verify_never_pauses) {
    en_spec_cost c;
    memset(&c, 0, sizeof c);
    CHECK_INT(steps(&c, 6, 0.010, 1, 0), 0);
    /* 13 ms a step for 2 tokens: 6.5 ms a token */
    CHECK_INT(steps(&c, 200, 0.013, 2, 1), 0);
    CHECK_INT(c.pause, 0);
    /* a loss then a win: the win resets the next pause to 8 steps */
    en_spec_cost d;
    memset(&d, 0, sizeof d);
    steps(&d, 4, 0.010, 1, 0);
    CHECK_INT(steps(&d, 4, 0.013, 1, 1), 1);
    CHECK_INT(d.exp, 1);
    steps(&d, 8, 0.010, 1, 0);
    CHECK_INT(steps(&d, 8, 0.013, 3, 1), 0);
    CHECK_INT(d.exp, 0);
    /* the window's older, cheaper verify steps are outweighed once verify turns costly */
    int started = 0, k = 0;
    while (!started && k < 64) started = en_spec_cost_record(&d, 0.013, 1, 1), k++;
    CHECK(started);
    CHECK_INT(d.pause, 8);
}

TEST(test_verify_only_probes_plain) {
    en_spec_cost c;
    memset(&c, 0, sizeof c);
    CHECK_INT(steps(&c, 15, 0.012, 1, 1), 0);
    CHECK_INT(en_spec_cost_record(&c, 0.012, 1, 1), 1);
    CHECK_INT(c.pause, 4);
    CHECK_INT(c.exp, 0);
    /* the probe's plain steps show verify costs more: the next verify step pauses for 8 */
    CHECK_INT(steps(&c, 4, 0.010, 1, 0), 0);
    CHECK_INT(c.pause, 0);
    CHECK_INT(en_spec_cost_record(&c, 0.012, 1, 1), 1);
    CHECK_INT(c.pause, 8);
}

TEST(test_empty_steps_ignored) {
    en_spec_cost c;
    memset(&c, 0, sizeof c);
    CHECK_INT(steps(&c, 10, 0.010, 0, 0), 0);
    CHECK_INT(steps(&c, 10, NAN, 1, 1), 0);
    CHECK_INT(steps(&c, 10, -1.0, 1, 1), 0);
    CHECK_INT(c.n[0], 0);
    CHECK_INT(c.n[1], 0);
    /* a pause still counts down on such steps */
    c.pause = 3;
    steps(&c, 2, 0.010, 0, 0);
    CHECK_INT(c.pause, 1);
}

TEST_MAIN(test_costly_verify_pauses_longer_each_time, test_cheap_verify_never_pauses, test_verify_only_probes_plain,
          test_empty_steps_ignored)
