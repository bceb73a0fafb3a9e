/* Speculative decoding by prompt lookup in the engine: greedy streams with drafting equal
 * plain decode token for token and byte for byte (built-in model: copy-heavy prompts and
 * free text; all in RAM, spilling through a tiny hot pool, a Quest budget below, across and
 * above the context; 1 and 2 threads; drafting and plain requests batched together; stop
 * strings and limits inside a verify round), the pool ends as plain decode leaves it, and
 * the counters count real rounds. */
#include "strata/engine.h"
#include "../test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_GEN 96

typedef struct job {
    int32_t prompt[256];
    int32_t n_prompt;
    int32_t max_tokens;
    int spec;                  /* spec_ngram of the request (0: plain) */
    int32_t draft_max;
    int at_step;
    const char *stop;
    int64_t budget;            /* quest_budget (-1: the engine's) */
    int32_t n_logprobs;
    int32_t toks[MAX_GEN + 1];
    float lp[MAX_GEN + 1];
    int n_toks;
    char text[8192];
    size_t n_text;
    st_finish fin;
    st_req_id id;
} job;

static st_engine_params params(int n_threads) {
    st_engine_params p = st_engine_default_params();
    p.n_threads = n_threads;
    p.n_batch = 64;
    p.n_parallel = 4;
    p.n_ctx = 512;
    return p;
}

static float drive_temp; /* the requests' temperature (0: greedy) */

static int drive(st_engine *e, job *jobs, int n) {
    int step = 0, left = n;
    for (int i = 0; i < n; i++) jobs[i].id = 0, jobs[i].n_toks = 0, jobs[i].n_text = 0, jobs[i].fin = 0;
    while (left > 0 && step < 100000) {
        for (int i = 0; i < n; i++)
            if (!jobs[i].id && jobs[i].at_step <= step) {
                st_engine_req_params rp = st_engine_req_default_params();
                rp.tokens = jobs[i].prompt, rp.n_tokens = jobs[i].n_prompt;
                rp.sampling.temp = drive_temp;
                rp.sampling.seed = 77u + (uint64_t)i;
                rp.max_tokens = jobs[i].max_tokens;
                rp.spec_ngram = jobs[i].spec;
                rp.draft_max = jobs[i].draft_max;
                rp.quest_budget = jobs[i].budget;
                rp.n_logprobs = jobs[i].n_logprobs;
                const char *stops[1] = {jobs[i].stop};
                if (jobs[i].stop) rp.stop = stops, rp.n_stop = 1;
                if (st_engine_submit(e, &rp, &jobs[i].id)) return -1;
            }
        const st_engine_event *ev;
        int nev;
        if (st_engine_step(e, &ev, &nev)) return -1;
        for (int k = 0; k < nev; k++) {
            int j = -1;
            for (int i = 0; i < n; i++)
                if (jobs[i].id == ev[k].req) j = i;
            if (j < 0) return -1;
            if (ev[k].token >= 0 && jobs[j].n_toks <= MAX_GEN) {
                jobs[j].lp[jobs[j].n_toks] = ev[k].has_logprob ? ev[k].logprob : 0;
                jobs[j].toks[jobs[j].n_toks++] = ev[k].token;
            }
            if (jobs[j].n_text + ev[k].text_len < sizeof jobs[j].text) {
                memcpy(jobs[j].text + jobs[j].n_text, ev[k].text, ev[k].text_len);
                jobs[j].n_text += ev[k].text_len;
            }
            if (ev[k].finish) {
                jobs[j].fin = ev[k].finish;
                left--;
            }
        }
        step++;
    }
    return left ? -1 : step;
}

/* A passage (a few dozen tokens) said twice, and free text: random token ids. */
static void make_jobs(job *jobs, int n, int spec) {
    memset(jobs, 0, sizeof *jobs * (size_t)n);
    uint32_t seed = 1234;
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        j->max_tokens = 64;
        j->spec = spec;
        j->budget = -1;
        j->n_logprobs = -1;
        j->at_step = i;
        const int np = 20 + 7 * i;
        j->n_prompt = 0;
        j->prompt[j->n_prompt++] = 1;
        for (int t = 0; t < np; t++) {
            seed = seed * 1103515245u + 12345u;
            j->prompt[j->n_prompt++] = 3 + (int32_t)((seed >> 8) % 500);
        }
        if (i % 2 == 0) /* copy-heavy: the passage again */
            for (int t = 0; t < np; t++) j->prompt[j->n_prompt++] = j->prompt[1 + t];
    }
}

static void check_same(const job *a, const job *b, int n) {
    for (int i = 0; i < n; i++) {
        CHECK_INT(a[i].fin, b[i].fin);
        CHECK_INT(a[i].n_toks, b[i].n_toks);
        CHECK(!memcmp(a[i].toks, b[i].toks, sizeof(int32_t) * (size_t)a[i].n_toks));
        CHECK(a[i].n_text == b[i].n_text && !memcmp(a[i].text, b[i].text, a[i].n_text));
    }
}

/* Runs jobs plain and with drafting on engines made from p; returns the spec engine's stats
 * and checks the pools end alike. */
static void plain_vs_spec(const st_engine_params *p, job *plain, job *spec, int n, st_engine_stats *es) {
    st_engine *e = NULL;
    st_kv_stats k0, k1;
    CHECK_OK(st_engine_create(p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, plain, n) > 0);
    st_kv_get_stats(st_engine_kv(e), &k0);
    st_engine_destroy(e);
    CHECK_OK(st_engine_create(p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, spec, n) > 0);
    st_engine_get_stats(e, es);
    st_kv_get_stats(st_engine_kv(e), &k1);
    st_engine_destroy(e);
    check_same(plain, spec, n);
    /* what the finished requests leave: the same pages cached (sealed pages of the same
     * tokens), none used, the rejected drafts' pages free */
    CHECK_INT(k1.pages_used, 0);
    CHECK_INT(k1.pages_used, k0.pages_used);
    CHECK_INT(k1.pages_cached, k0.pages_cached);
    CHECK_INT(k1.pages_free, k0.pages_free);
}

static void report(const char *what, const st_engine_stats *es) {
    fprintf(stderr, "  %-26s %lld rounds, %lld drafted, %lld accepted, %lld steps, %lld tokens\n", what,
            (long long)es->spec_drafts, (long long)es->spec_drafted, (long long)es->spec_accepted,
            (long long)es->steps, (long long)es->tokens_generated);
}

TEST(test_spec_equals_plain_ram) {
    for (int th = 1; th <= 2; th++) {
        static job a[6], b[6];
        make_jobs(a, 6, 0);
        make_jobs(b, 6, 3);
        st_engine_params p = params(th);
        st_engine_stats es;
        plain_vs_spec(&p, a, b, 6, &es);
        report(th == 1 ? "RAM, 1 thread" : "RAM, 2 threads", &es);
        CHECK(es.spec_drafts > 0);
        CHECK(es.spec_accepted > 0);
        CHECK(es.spec_accepted <= es.spec_drafted);
        /* a round emits its accepted tokens plus one: fewer steps than tokens */
        CHECK(es.steps < es.tokens_generated);
    }
}

/* Drafting and plain requests batched together, n-gram 1 and 2, a small draft_max, and
 * logprobs: every stream as plain. */
TEST(test_spec_mixed_batch) {
    static job a[6], b[6];
    make_jobs(a, 6, 0);
    make_jobs(b, 6, 0);
    for (int i = 0; i < 6; i++) {
        b[i].spec = i % 3 == 0 ? 0 : i % 3;
        b[i].draft_max = i == 4 ? 2 : 0;
        a[i].n_logprobs = b[i].n_logprobs = i == 1 ? 2 : -1;
        a[i].at_step = b[i].at_step = 0;
    }
    st_engine_params p = params(2);
    st_engine_stats es;
    plain_vs_spec(&p, a, b, 6, &es);
    for (int i = 0; i < 6; i++) CHECK(!memcmp(a[i].lp, b[i].lp, sizeof(float) * (size_t)a[i].n_toks));
    report("mixed batch", &es);
    CHECK(es.spec_accepted > 0);
}

/* A stop string and max_tokens that fall inside a verify round cut it where plain decode
 * stops. */
TEST(test_spec_stop_and_limit) {
    static job a[4], b[4];
    make_jobs(a, 4, 0);
    st_engine_params p = params(1);
    st_engine *e = NULL;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, a, 4) > 0);
    st_engine_destroy(e);
    /* stops: 3 bytes from the middle of each plain text; limits: odd counts */
    static char stops[4][8];
    for (int i = 0; i < 4; i++) {
        if (a[i].n_text > 12) {
            memcpy(stops[i], a[i].text + a[i].n_text / 2, 3);
            stops[i][3] = 0;
        }
        a[i].stop = b[i].stop = a[i].n_text > 12 && i % 2 == 0 && !memchr(stops[i], 0, 3) ? stops[i] : NULL;
        a[i].max_tokens = b[i].max_tokens = 13 + 10 * i;
    }
    memcpy(b, a, sizeof a);
    for (int i = 0; i < 4; i++) b[i].spec = 2;
    st_engine_stats es;
    plain_vs_spec(&p, a, b, 4, &es);
    int stopped = 0;
    for (int i = 0; i < 4; i++) stopped += a[i].fin == ST_FINISH_STOP;
    CHECK(stopped > 0);
    report("stops and limits", &es);
}

/* Spilling through a hot pool of a few pages: the round's pages spill and come back, the
 * output is plain decode's. */
TEST(test_spec_spill) {
    static job a[6], b[6];
    make_jobs(a, 6, 0);
    make_jobs(b, 6, 3);
    char dir[] = "/tmp/strata-spec-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    st_engine_params p = params(2);
    p.spill_dir = dir;
    p.ram_pages = 12;
    st_engine *e = NULL;
    st_engine_stats es;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, a, 6) > 0);
    st_engine_destroy(e);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, b, 6) > 0);
    st_engine_get_stats(e, &es);
    st_kv_stats ks;
    st_kv_get_stats(st_engine_kv(e), &ks);
    st_engine_destroy(e);
    check_same(a, b, 6);
    CHECK(ks.tier_writes > 0);
    CHECK(es.spec_accepted > 0);
    report("spill, 12 RAM pages", &es);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Quest budgets: above the context (drafting throughout), below it (the gate never opens
 * for long prompts) and across the crossover (drafting until the budget stops covering
 * every page, plain decode after): byte-identical to plain decode with the same budget. */
TEST(test_spec_quest_gate) {
    const int64_t budgets[3] = {1024, 48, 96};
    for (int bi = 0; bi < 3; bi++) {
        static job a[4], b[4];
        make_jobs(a, 4, 0);
        make_jobs(b, 4, 3);
        for (int i = 0; i < 4; i++) a[i].max_tokens = b[i].max_tokens = 80;
        st_engine_params p = params(2);
        p.quest.budget = budgets[bi];
        st_engine_stats es;
        plain_vs_spec(&p, a, b, 4, &es);
        char what[64];
        snprintf(what, sizeof what, "Quest budget %lld", (long long)budgets[bi]);
        report(what, &es);
        if (bi != 1) CHECK(es.spec_accepted > 0);
        st_runner_quest_stats qs;
        (void)qs;
    }
}

TEST(test_spec_params) {
    st_engine_params p = params(1);
    p.spec_ngram = 65;
    st_engine *e = NULL;
    char why[256];
    CHECK(st_engine_create(&p, &e, why, sizeof why) == ST_E_INVAL);
    CHECK(strstr(why, "spec_ngram") != NULL);
    p.spec_ngram = 2;
    CHECK_OK(st_engine_create(&p, &e, why, sizeof why));
    if (!e) return;
    st_engine_req_params rp = st_engine_req_default_params();
    int32_t tok[4] = {1, 5, 6, 7};
    rp.tokens = tok, rp.n_tokens = 4;
    rp.draft_max = 65;
    st_req_id id;
    CHECK(st_engine_submit(e, &rp, &id) == ST_E_INVAL);
    CHECK(strstr(st_ctx_error(st_engine_ctx(e)), "draft_max") != NULL);
    st_engine_destroy(e);
    /* the engine default drafts for requests that leave it (-1) */
    static job a[2], b[2];
    make_jobs(a, 2, 0);
    make_jobs(b, 2, -1);
    st_engine_params p0 = params(1);
    st_engine_stats es;
    CHECK_OK(st_engine_create(&p0, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, a, 2) > 0);
    st_engine_destroy(e);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, b, 2) > 0);
    st_engine_get_stats(e, &es);
    st_engine_destroy(e);
    check_same(a, b, 2);
    CHECK(es.spec_drafts > 0);
}

/* Sampling requests draft too (the speculative rule, st_sampler_sample_draft, whose
 * distribution test_sample checks): drafts are made and some are taken at temperature > 0,
 * every request finishes with its tokens, and the pool ends as plain decode's does. */
TEST(test_spec_sampling_drafts) {
    static job a[4], b[4];
    make_jobs(a, 4, 0);
    make_jobs(b, 4, 2);
    drive_temp = 0.05f;
    st_engine_params p = params(2);
    st_engine *e = NULL;
    st_engine_stats es;
    st_kv_stats k0, k1;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, a, 4) > 0);
    st_kv_get_stats(st_engine_kv(e), &k0);
    st_engine_destroy(e);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, b, 4) > 0);
    st_engine_get_stats(e, &es);
    st_kv_get_stats(st_engine_kv(e), &k1);
    st_engine_destroy(e);
    drive_temp = 0;
    report("sampling, temp 0.05", &es);
    CHECK(es.spec_drafts > 0);
    CHECK(es.spec_accepted > 0);
    for (int i = 0; i < 4; i++) {
        CHECK_INT(b[i].fin, ST_FINISH_LENGTH);
        CHECK_INT(b[i].n_toks, 64);
    }
    CHECK_INT(k1.pages_used, k0.pages_used);
    CHECK_INT(k1.n_seqs, 0);
}

TEST_MAIN(test_spec_sampling_drafts, test_spec_equals_plain_ram, test_spec_mixed_batch, test_spec_stop_and_limit, test_spec_spill,
          test_spec_quest_gate, test_spec_params)
