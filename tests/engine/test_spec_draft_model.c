/* Speculative decoding with a draft model on the trained models of ../shared/models
 * (stories260K and tiny-long share one 512-token SPM vocabulary): greedy streams drafted by
 * the other model (and by the model itself) equal plain decode token for token, in RAM,
 * spilling through a few hot pages, and with a Quest budget below the context, across the
 * crossover and above the context, at 1 and 2 threads, one request and two at once (also
 * spilling with a preemption); both KV pools are left as plain decode leaves the target's
 * (kv_check, stats; under preemption but for cached pages a verify round evicted); a draft model of
 * another vocabulary (the synthetic model; stories260K with one token renamed) is refused
 * naming the difference, with nothing left open. */
#include "strata/engine.h"
#include "strata/gguf.h"
#include "kv/kv_int.h"
#include "../test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_GEN 48

static const char *passage =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park. She ran to the ball and kicked it very high.\n\n"
    "Once upon a time, there was a little girl named Lily. She loved";
static const char *prompts[2] = {"Once upon a time", NULL};

typedef struct run {
    int32_t toks[2][N_GEN];
    int n[2];
    st_engine_stats es;
    st_kv_stats ks, dks; /* the target's pool and the draft model's, after the last finish */
    int has_dkv;
} run;

static void kv_ok(const st_kv *kv) {
    char msg[256] = "";
    const int rc = kv_check(kv, msg, sizeof msg);
    if (rc) fprintf(stderr, "kv_check: %s\n", msg);
    CHECK_INT(rc, 0);
}

/* n_req requests (prompts[0], prompts[1]) at once; draft: spec_draft of every request. */
static int gen(const st_engine_params *p, int n_req, int draft, float temp, run *r) {
    memset(r, 0, sizeof *r);
    st_engine *e = NULL;
    char why[256];
    if (st_engine_create(p, &e, why, sizeof why)) {
        fprintf(stderr, "engine: %s\n", why);
        return -1;
    }
    st_req_id ids[2];
    for (int i = 0; i < n_req; i++) {
        st_engine_req_params rp = st_engine_req_default_params();
        rp.text = prompts[i], rp.text_len = strlen(prompts[i]);
        rp.sampling.temp = temp;
        rp.sampling.seed = 7;
        rp.max_tokens = N_GEN;
        rp.ignore_eos = 1;
        rp.spec_ngram = 0;
        rp.spec_draft = draft;
        if (st_engine_submit(e, &rp, &ids[i])) return st_engine_destroy(e), -1;
    }
    int rc = 0;
    for (int done = 0; done < n_req && !rc;) {
        const st_engine_event *ev;
        int nev;
        if ((rc = st_engine_step(e, &ev, &nev))) break;
        for (int k = 0; k < nev; k++) {
            const int i = ev[k].req == ids[0] ? 0 : 1;
            if (ev[k].token >= 0 && r->n[i] < N_GEN) r->toks[i][r->n[i]++] = ev[k].token;
            if (ev[k].finish) done++;
        }
    }
    st_engine_get_stats(e, &r->es);
    kv_ok(st_engine_kv(e));
    st_kv_get_stats(st_engine_kv(e), &r->ks);
    if (st_engine_draft_kv(e)) {
        r->has_dkv = 1;
        kv_ok(st_engine_draft_kv(e));
        st_kv_get_stats(st_engine_draft_kv(e), &r->dks);
    }
    st_engine_destroy(e);
    return rc ? -1 : 0;
}

/* The pool a drafted run leaves is the one plain decode leaves; the draft pool holds nothing. */
static void same_pool(const run *a, const run *b) {
    CHECK_INT(b->ks.pages_used, a->ks.pages_used);
    CHECK_INT(b->ks.pages_cached, a->ks.pages_cached);
    CHECK_INT(b->ks.pages_free, a->ks.pages_free);
    CHECK_INT(b->ks.n_seqs, a->ks.n_seqs);
    CHECK_INT(b->ks.pages_pinned, 0);
    CHECK(b->has_dkv);
    CHECK_INT(b->dks.pages_used, 0);
    CHECK_INT(b->dks.n_seqs, 0);
    CHECK_INT(b->dks.pages_pinned, 0);
}

/* Two requests plain (no draft model), then drafted by `draft`, greedy: every drafted stream
 * runs to its length with the plain stream's tokens. */
static void plain_then_drafted(st_engine_params *p, const char *draft, run *a, run *b) {
    p->draft_model_path = NULL;
    CHECK_OK(gen(p, 2, 0, 0, a));
    p->draft_model_path = draft;
    CHECK_OK(gen(p, 2, 1, 0, b));
    for (int i = 0; i < 2; i++) {
        CHECK_INT(b->n[i], N_GEN);
        CHECK(!memcmp(a->toks[i], b->toks[i], sizeof a->toks[i]));
    }
}


static void model_path(const char *name, char *out, size_t cap) {
    snprintf(out, cap, "%s/models/%s", test_shared_dir(), name);
}

/* target drafted by draft: every KV mode at 1 and 2 threads, one request; returns the
 * accepted draft tokens over all runs (each run also checked to have drafted). */
static int64_t check_pair(const char *target, const char *draft) {
    char tp[1024], dp[1024];
    model_path(target, tp, sizeof tp);
    model_path(draft, dp, sizeof dp);
    char dir[] = "/tmp/strata-specdm-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    static const char *const mode_name[] = {"RAM", "spill 4 pages", "quest 32", "quest 128", "quest 1024"};
    int64_t accepted = 0;
    for (int mode = 0; mode < 5; mode++)
        for (int th = 1; th <= 2; th++) {
            st_engine_params p = st_engine_default_params();
            p.model_path = tp;
            p.n_threads = th, p.n_parallel = 1, p.n_ctx = 512, p.n_batch = 64;
            p.draft_p_min = 0; /* draft every round: the models agree on too few tokens otherwise */
            if (mode == 1) p.spill_dir = dir, p.ram_pages = 4;
            if (mode == 2) p.quest.budget = 32;   /* below the copy prompt */
            if (mode == 3) p.quest.budget = 128;  /* the crossover falls inside the run */
            if (mode == 4) p.quest.budget = 1024; /* above the context: dense throughout */
            prompts[1] = passage;
            const int pi = (mode + th) % 2;
            prompts[0] = pi ? passage : "Once upon a time";
            run a, b;
            CHECK_OK(gen(&p, 1, 0, 0, &a));
            p.draft_model_path = dp;
            CHECK_OK(gen(&p, 1, 1, 0, &b));
            CHECK_INT(a.n[0], N_GEN);
            CHECK_INT(b.n[0], N_GEN);
            CHECK(!memcmp(a.toks[0], b.toks[0], sizeof a.toks[0]));
            CHECK_INT(a.es.spec_drafts, 0);
            /* a budget under the prompt never covers the sequence: the exactness gate keeps
             * drafting off (quest.h); every other mode drafts */
            if (mode == 2 && pi) CHECK_INT(b.es.spec_drafts, 0);
            else CHECK(b.es.spec_model_drafts > 0);
            CHECK_INT(b.es.spec_model_drafts, b.es.spec_drafts);
            CHECK(b.es.spec_model_accepted <= b.es.spec_model_drafted);
            same_pool(&a, &b);
            accepted += b.es.spec_model_accepted;
            if (th == 1)
                fprintf(stderr, "  %s drafted by %s, %s, %s: %lld rounds, %lld/%lld accepted\n", target, draft,
                        mode_name[mode], pi ? "copy" : "free", (long long)b.es.spec_drafts,
                        (long long)b.es.spec_model_accepted, (long long)b.es.spec_model_drafted);
        }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return accepted;
}

TEST(test_draft_model_greedy_exact) {
    char path[1024];
    model_path("tiny-long.gguf", path, sizeof path);
    if (access(path, R_OK)) {
        test_skip("../shared/models/tiny-long.gguf not found");
        return;
    }
    CHECK(check_pair("stories260K.gguf", "tiny-long.gguf") > 0);
    CHECK(check_pair("tiny-long.gguf", "stories260K.gguf") > 0);
}

/* Two requests at once (their drafts batched in one draft forward per token), the model as
 * its own draft (nearly everything accepted: long rounds, rewinds at the limit), plain and
 * drafted requests side by side, with the default p_min; and a sampling request drafts too. */
TEST(test_draft_model_batched_self) {
    char sp[1024], tp[1024];
    model_path("stories260K.gguf", sp, sizeof sp);
    model_path("tiny-long.gguf", tp, sizeof tp);
    if (access(sp, R_OK) || access(tp, R_OK)) {
        test_skip("../shared/models not found");
        return;
    }
    prompts[0] = "Once upon a time";
    prompts[1] = passage;
    for (int th = 1; th <= 2; th++) {
        st_engine_params p = st_engine_default_params();
        p.model_path = sp;
        p.n_threads = th, p.n_parallel = 2, p.n_ctx = 512, p.n_batch = 64;
        run a, b, c;
        plain_then_drafted(&p, sp, &a, &b);
        CHECK(b.es.spec_model_drafts > 0);
        CHECK(b.es.spec_model_accepted * 10 >= b.es.spec_model_drafted * 9);
        same_pool(&a, &b);
        /* spec_draft -1: the engine's default, on with a draft model loaded */
        p.draft_model_path = tp;
        CHECK_OK(gen(&p, 2, -1, 0, &c));
        for (int i = 0; i < 2; i++) CHECK(!memcmp(a.toks[i], c.toks[i], sizeof a.toks[i]));
        CHECK_INT(c.es.spec_model_drafts, c.es.spec_drafts);
        same_pool(&a, &c);
        /* a sampling request takes the draft by the speculative rule: it runs to its length */
        CHECK_OK(gen(&p, 2, 1, 0.8f, &c));
        CHECK_INT(c.n[0], N_GEN);
        CHECK_INT(c.n[1], N_GEN);
        CHECK(c.es.spec_model_drafted > 0);
        CHECK_INT(c.dks.pages_used, 0);
        /* spilling through 4 hot pages: the newer request is preempted (its draft sequence
         * freed) and resumes (rebuilt) with the same tokens */
        char dir[] = "/tmp/strata-specdm-pre-XXXXXX";
        CHECK(mkdtemp(dir) != NULL);
        p.spill_dir = dir, p.ram_pages = 4;
        prompts[1] = "Lily and Tom"; /* both admitted at once, then grown past the RAM */
        plain_then_drafted(&p, sp, &a, &b);
        CHECK(b.es.preemptions > 0);
        CHECK(b.es.spec_model_accepted > 0);
        /* under this RAM pressure a verify round's reach into the next page can evict a
         * cached page plain decode kept: the pool is plain decode's but for those */
        CHECK_INT(b.ks.pages_used, a.ks.pages_used);
        CHECK_INT(b.ks.n_seqs, a.ks.n_seqs);
        CHECK_INT(b.ks.pages_cached + b.ks.cache_evictions, a.ks.pages_cached + a.ks.cache_evictions);
        CHECK(b.ks.cache_evictions - a.ks.cache_evictions <= 2);
        CHECK_INT(b.dks.pages_used, 0);
        CHECK_INT(b.dks.n_seqs, 0);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        CHECK(system(cmd) == 0);
        prompts[1] = passage;
    }
}

static void expect_refused(const st_engine_params *p, const char *what) {
    st_engine *e = (st_engine *)(uintptr_t)1;
    char why[512] = "";
    CHECK_INT(st_engine_create(p, &e, why, sizeof why), ST_E_INVAL);
    CHECK(e == NULL);
    fprintf(stderr, "  refused: %s\n", why);
    CHECK(strstr(why, "vocabulary is not the target's") != NULL);
    CHECK(strstr(why, what) != NULL);
}

/* A draft model of another vocabulary is refused at the open, naming the first difference. */
TEST(test_draft_model_vocab_mismatch) {
    char sp[1024];
    model_path("stories260K.gguf", sp, sizeof sp);
    if (access(sp, R_OK)) {
        test_skip("../shared/models/stories260K.gguf not found");
        return;
    }
    st_engine_params p = st_engine_default_params();
    p.model_path = sp;
    p.n_threads = 1, p.n_ctx = 256;
    /* the synthetic model: byte-level, 512 tokens too */
    const st_synth_params syn = st_engine_builtin_model();
    p.draft_synth = &syn;
    expect_refused(&p, "token 259 is \"<unused_0>\" in the draft model");
    p.draft_synth = NULL;
    /* stories260K with one token renamed, written by the project's GGUF writer */
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open(ctx, sp, &g));
    st_gguf_writer *w = NULL;
    CHECK_OK(st_gguf_writer_create(ctx, &w));
    for (int64_t i = 0; i < st_gguf_n_kv(g); i++)
        if (strcmp(st_gguf_key_name(g, i), "tokenizer.ggml.tokens")) CHECK_OK(st_gguf_writer_copy_kv(w, g, i));
    uint64_t n = 0;
    st_gguf_vtype et;
    const void *arr;
    CHECK_OK(st_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &arr));
    char **toks = calloc(n, sizeof *toks);
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        CHECK_OK(st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len));
        toks[i] = strndup(s, len);
    }
    free(toks[300]);
    toks[300] = strdup("<renamed>");
    CHECK_OK(st_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks, n));
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        CHECK_OK(st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
    }
    char out[] = "/tmp/strata-specdm-vocab-XXXXXX";
    const int fd = mkstemp(out);
    CHECK(fd >= 0);
    close(fd);
    CHECK_OK(st_gguf_writer_write(w, out));
    st_gguf_writer_destroy(w);
    st_gguf_close(g);
    for (uint64_t i = 0; i < n; i++) free(toks[i]);
    free(toks);
    st_ctx_destroy(ctx);
    p.draft_model_path = out;
    expect_refused(&p, "token 300 is \"<renamed>\" in the draft model");
    /* the same file as the target and its own stories260K as the draft: refused the other way */
    p.model_path = out;
    p.draft_model_path = sp;
    expect_refused(&p, "token 300 is");
    unlink(out);
}

TEST_MAIN(test_draft_model_greedy_exact, test_draft_model_batched_self, test_draft_model_vocab_mismatch)
