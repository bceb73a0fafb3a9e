/* Certified sparse decode through the engine (built-in model): a request's quest_epsilon 0,
 * and an engine whose quest params say certify with epsilon 0, emit exactly the dense token
 * streams even with a budget that alone would skip pages; a certified request with a
 * positive epsilon never drafts; an epsilon outside [0, 1] is refused at submit. */
#include "strata/engine.h"
#include "../test.h"

#include <stdlib.h>
#include <string.h>

#define N_REQ 3
#define N_GEN 48

typedef struct job {
    int32_t prompt[200];
    int32_t n_prompt;
    int32_t toks[N_GEN + 1];
    int n_toks;
    st_req_id id;
} job;

static void make_jobs(job *jobs) {
    memset(jobs, 0, sizeof *jobs * N_REQ);
    uint32_t seed = 99;
    for (int i = 0; i < N_REQ; i++) {
        job *j = &jobs[i];
        j->prompt[j->n_prompt++] = 1;
        for (int t = 0; t < 120 + 20 * i; t++) {
            seed = seed * 1103515245u + 12345u;
            j->prompt[j->n_prompt++] = 3 + (int32_t)((seed >> 8) % 250);
        }
    }
}

/* Runs the jobs together with quest_budget / quest_epsilon / spec_ngram per request. */
static int drive(st_engine *e, job *jobs, int64_t budget, double eps, int spec) {
    for (int i = 0; i < N_REQ; i++) {
        st_engine_req_params rp = st_engine_req_default_params();
        rp.tokens = jobs[i].prompt, rp.n_tokens = jobs[i].n_prompt;
        rp.sampling.temp = 0;
        rp.max_tokens = N_GEN;
        rp.quest_budget = budget;
        rp.quest_epsilon = eps;
        rp.spec_ngram = spec;
        jobs[i].n_toks = 0;
        if (st_engine_submit(e, &rp, &jobs[i].id)) return -1;
    }
    int left = N_REQ;
    for (int step = 0; left > 0 && step < 10000; step++) {
        const st_engine_event *ev;
        int nev;
        if (st_engine_step(e, &ev, &nev)) return -1;
        for (int k = 0; k < nev; k++)
            for (int i = 0; i < N_REQ; i++) {
                if (jobs[i].id != ev[k].req) continue;
                if (ev[k].token >= 0 && jobs[i].n_toks <= N_GEN) jobs[i].toks[jobs[i].n_toks++] = ev[k].token;
                if (ev[k].finish) left--;
            }
    }
    return left ? -1 : 0;
}

static st_engine_params params(void) {
    st_engine_params p = st_engine_default_params();
    p.n_threads = 2;
    p.n_batch = 64;
    p.n_parallel = 4;
    p.n_ctx = 512;
    return p;
}

static int same(const job *a, const job *b) {
    for (int i = 0; i < N_REQ; i++)
        if (a[i].n_toks != b[i].n_toks || memcmp(a[i].toks, b[i].toks, sizeof(int32_t) * (size_t)a[i].n_toks))
            return 0;
    return 1;
}

TEST(test_engine_cert) {
    static job dense[N_REQ], z[N_REQ], c[N_REQ];
    make_jobs(dense);
    memcpy(z, dense, sizeof z);
    memcpy(c, dense, sizeof c);
    st_engine_params p = params();
    st_engine *e = NULL;
    REQUIRE(st_engine_create(&p, &e, NULL, 0) == 0);
    CHECK_OK(drive(e, dense, -1, -1, 0));
    CHECK_INT(dense[0].n_toks, N_GEN);
    /* per request: epsilon 0 with a budget of 2 pages is dense */
    CHECK_OK(drive(e, z, 32, 0, 0));
    CHECK(same(dense, z));
    /* out of range */
    st_engine_req_params rp = st_engine_req_default_params();
    rp.tokens = dense[0].prompt, rp.n_tokens = dense[0].n_prompt;
    rp.quest_epsilon = 1.5;
    st_req_id id;
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_INVAL);
    rp.quest_epsilon = NAN;
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_INVAL);
    /* certified with a loose epsilon and drafting asked for: no draft */
    st_engine_stats es0, es1;
    st_engine_get_stats(e, &es0);
    CHECK_OK(drive(e, c, 32, 0.5, 2));
    st_engine_get_stats(e, &es1);
    CHECK_INT(es1.spec_drafts - es0.spec_drafts, 0);
    st_engine_destroy(e);
    /* engine-wide: certify with epsilon 0 */
    p.quest = st_kv_quest_default_params();
    p.quest.budget = 32;
    p.quest.dense_layers = 0;
    p.quest.certify = 1;
    p.quest.epsilon = 0;
    memcpy(z, dense, sizeof z);
    REQUIRE(st_engine_create(&p, &e, NULL, 0) == 0);
    CHECK_OK(drive(e, z, -1, -1, 0));
    CHECK(same(dense, z));
    st_engine_destroy(e);
}

TEST_MAIN(test_engine_cert)
