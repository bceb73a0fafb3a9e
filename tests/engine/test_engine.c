/* Engine tests on the built-in synthetic model: batched equals alone (token for token, 1 and
 * 2 threads, staggered arrivals, chunked prefill; also read from a file, in the load-time weight
 * layouts), prefix reuse across requests, preemption
 * by spilling with identical output, the disk budget's clean refusal, stop strings split
 * over tokens, cancellation freeing every page. */
#include "strata/engine.h"
#include "strata/quant.h"
#include "../test.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_REQ 16
#define MAX_GEN 64

typedef struct job {
    int32_t prompt[256];
    int32_t n_prompt;
    st_sampler_params sp;
    int32_t max_tokens;
    int at_step;               /* submitted before this step */
    const char *stop;          /* NULL: none */
    /* results */
    int32_t toks[MAX_GEN + 1];
    int n_toks;
    char text[4096];
    size_t n_text;
    st_finish fin;
    int error;
    st_engine_req_stats stats;
    st_req_id id;
} job;

static st_engine_params params(int n_threads, int n_batch, int n_parallel) {
    st_engine_params p = st_engine_default_params();
    p.n_threads = n_threads;
    p.n_batch = n_batch;
    p.n_parallel = n_parallel;
    p.n_ctx = 512;
    return p;
}

static int find_job(job *jobs, int n, st_req_id id) {
    for (int i = 0; i < n; i++)
        if (jobs[i].id == id) return i;
    return -1;
}

/* Runs jobs[n] on engine e (submitting each at its step) until all finished. Returns the
 * number of steps, or -1 on an engine error. */
static int drive(st_engine *e, job *jobs, int n) {
    int step = 0, left = n;
    for (int i = 0; i < n; i++) jobs[i].id = 0, jobs[i].n_toks = 0, jobs[i].n_text = 0, jobs[i].fin = 0;
    while (left > 0 && step < 100000) {
        for (int i = 0; i < n; i++)
            if (!jobs[i].id && jobs[i].at_step <= step) {
                st_engine_req_params rp = st_engine_req_default_params();
                rp.tokens = jobs[i].prompt, rp.n_tokens = jobs[i].n_prompt;
                rp.sampling = jobs[i].sp;
                rp.max_tokens = jobs[i].max_tokens;
                const char *stops[1] = {jobs[i].stop};
                if (jobs[i].stop) rp.stop = stops, rp.n_stop = 1;
                int rc = st_engine_submit(e, &rp, &jobs[i].id);
                if (rc) {
                    jobs[i].fin = ST_FINISH_ERROR, jobs[i].error = rc, jobs[i].id = -1 - i;
                    left--;
                }
            }
        const st_engine_event *ev;
        int nev;
        if (st_engine_step(e, &ev, &nev)) return -1;
        for (int k = 0; k < nev; k++) {
            int j = find_job(jobs, n, ev[k].req);
            if (j < 0) return -1;
            if (ev[k].token >= 0 && jobs[j].n_toks <= MAX_GEN) jobs[j].toks[jobs[j].n_toks++] = ev[k].token;
            if (jobs[j].n_text + ev[k].text_len < sizeof jobs[j].text) {
                memcpy(jobs[j].text + jobs[j].n_text, ev[k].text, ev[k].text_len);
                jobs[j].n_text += ev[k].text_len;
            }
            if (ev[k].finish) {
                jobs[j].fin = ev[k].finish, jobs[j].error = ev[k].error, jobs[j].stats = ev[k].stats;
                left--;
            }
        }
        step++;
    }
    return left ? -1 : step;
}

/* Every request is gone and so is every page it held (full ones may stay cached). */
static void check_pool_empty(st_engine *e) {
    st_kv_stats ks;
    st_kv_get_stats(st_engine_kv(e), &ks);
    CHECK_INT(ks.pages_used, 0);
    CHECK_INT(ks.n_seqs, 0);
}

static void make_jobs(job *jobs, int n) {
    memset(jobs, 0, sizeof *jobs * (size_t)n);
    uint64_t x = 12345;
    for (int i = 0; i < n; i++) {
        job *j = &jobs[i];
        j->n_prompt = 5 + (i * 37) % 180;
        for (int t = 0; t < j->n_prompt; t++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            j->prompt[t] = 3 + (int32_t)((x >> 33) % 256);
        }
        j->prompt[0] = 1; /* BOS */
        j->sp = st_sampler_default_params();
        if (i % 3 == 0) j->sp.temp = 0; /* greedy */
        j->sp.seed = 1000 + (uint64_t)i;
        j->max_tokens = 8 + (i * 13) % 40;
        j->at_step = (i * 5) % 23;
    }
}

/* 16 requests arriving at staggered steps, prompts cut into pieces by a small step budget:
 * each stream equals that request run alone, on 1 and 2 threads. The model: the built-in one
 * (model_path NULL, its weights in the file's rows), or that file. */
static void batched_vs_alone(const char *model_path) {
    static job all[MAX_REQ], one;
    for (int threads = 1; threads <= 2; threads++) {
        make_jobs(all, MAX_REQ);
        st_engine *e = NULL;
        st_engine_params p = params(threads, 48, MAX_REQ);
        p.model_path = model_path;
        CHECK_OK(st_engine_create(&p, &e, NULL, 0));
        if (!e) return;
        CHECK(drive(e, all, MAX_REQ) > 0);
        st_engine_stats es;
        st_engine_get_stats(e, &es);
        CHECK_INT(es.finished, MAX_REQ);
        check_pool_empty(e);
        st_engine_destroy(e);
        for (int i = 0; i < MAX_REQ; i++) {
            one = all[i];
            one.at_step = 0;
            /* alone: a fresh engine, the whole prompt in one piece */
            st_engine_params pa = params(threads, 256, 1);
            pa.model_path = model_path;
            CHECK_OK(st_engine_create(&pa, &e, NULL, 0));
            if (!e) return;
            CHECK(drive(e, &one, 1) > 0);
            st_engine_destroy(e);
            CHECK_INT(all[i].fin, one.fin);
            CHECK_INT(all[i].n_toks, one.n_toks);
            CHECK(all[i].n_toks > 0 && !memcmp(all[i].toks, one.toks, sizeof(int32_t) * (size_t)one.n_toks));
            CHECK(all[i].n_text == one.n_text && !memcmp(all[i].text, one.text, one.n_text));
            if (all[i].fin == ST_FINISH_LENGTH) CHECK_INT(all[i].n_toks, all[i].max_tokens);
        }
    }
}

TEST(test_batched_equals_alone) { batched_vs_alone(NULL); }

/* The same with the built-in model read from a file, as strata serve reads one: its Q8_0
 * matrices take the 16-row groups, so prompt pieces and decode batches of 6 tokens or more
 * run on AMX where the CPU grants it, fewer and single tokens on VNNI, and still every stream
 * equals its request alone. */
TEST(test_batched_equals_alone_from_file) {
    char path[] = "/tmp/strata-test-engine-XXXXXX";
    const int fd = mkstemp(path);
    REQUIRE(fd >= 0);
    close(fd);
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    const st_synth_params sp = st_engine_builtin_model();
    CHECK_OK(st_synth_write(ctx, &sp, path));
    const st_kernels *k = ctx ? st_kernels_get_ex(st_ctx_isa(ctx), st_ctx_amx(ctx)) : NULL;
    if (k && !k->type[ST_TYPE_Q8_0].tilex) test_untested("no AVX-512 VNNI: the file's Q8_0 stays in rows");
    else if (k && !k->amx) test_untested("no AMX-INT8 granted here: the groups run on VNNI only");
    st_engine_params p = params(1, 48, 1);
    p.model_path = path;
    st_engine *e = NULL;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (e && k && k->type[ST_TYPE_Q8_0].tilex) CHECK(st_model_n_quad_matrices(st_engine_model(e)) > 0);
    st_engine_destroy(e);
    batched_vs_alone(path);
    st_ctx_destroy(ctx);
    unlink(path);
}

/* The streamed text is the detokenized token stream. */
TEST(test_stream_text_is_detokenized) {
    static job j[1];
    make_jobs(j, 1);
    j->max_tokens = 40;
    st_engine *e = NULL;
    st_engine_params p = params(2, 64, 2);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, j, 1) > 0);
    char buf[4096];
    size_t n = 0;
    int ntok = j->n_toks - (j->fin == ST_FINISH_EOS);
    CHECK_OK(st_tok_decode(st_engine_tok(e), j->toks, ntok, 0, buf, sizeof buf, &n));
    CHECK_INT(n, j->n_text);
    CHECK(!memcmp(buf, j->text, n));
    st_engine_destroy(e);
}

/* A stop string taken from the middle of the text (so it spans token boundaries): the stream
 * ends with the text before it, and no event ever released any byte of it. */
TEST(test_stop_string_never_leaks) {
    static job j[1];
    make_jobs(j, 1);
    j->sp.temp = 0;
    j->max_tokens = 60;
    st_engine *e = NULL;
    st_engine_params p = params(1, 64, 2);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, j, 1) > 0);
    CHECK(j->n_text > 20);
    if (j->n_text <= 20) return;
    char full[4096], stop[8];
    const size_t nfull = j->n_text;
    memcpy(full, j->text, nfull);
    /* a 5-byte stop string starting at byte 11 that holds no NUL */
    size_t s0 = 11;
    memcpy(stop, full + s0, 5);
    stop[5] = 0;
    CHECK(strlen(stop) == 5);
    j->stop = stop;
    CHECK(drive(e, j, 1) > 0);
    CHECK_INT(j->fin, ST_FINISH_STOP);
    /* the text is everything before the first occurrence */
    const char *first = memmem(full, nfull, stop, 5);
    CHECK(first != NULL);
    CHECK_INT(j->n_text, (size_t)(first - full));
    CHECK(!memcmp(j->text, full, j->n_text));
    CHECK(memmem(j->text, j->n_text, stop, 5) == NULL);
    st_engine_destroy(e);
}

/* A second request with the same 96-token system prompt attaches its full pages and
 * prefills only the rest. */
TEST(test_shared_prefix) {
    static job j[2];
    make_jobs(j, 2);
    int32_t sys[96];
    for (int t = 0; t < 96; t++) sys[t] = 3 + (t * 29) % 250;
    for (int i = 0; i < 2; i++) {
        j[i].n_prompt = 130;
        memcpy(j[i].prompt, sys, sizeof sys);
        for (int t = 96; t < 130; t++) j[i].prompt[t] = 10 + i * 40 + t % 30;
        j[i].at_step = i * 30; /* the first has finished (its pages cached) when the second comes */
        j[i].max_tokens = 4;
    }
    st_engine *e = NULL;
    st_engine_params p = params(2, 64, 4);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, j, 2) > 0);
    CHECK_INT(j[0].stats.n_cached, 0);
    CHECK_INT(j[1].stats.n_cached, 96);
    st_engine_stats es;
    st_engine_get_stats(e, &es);
    CHECK_INT(es.tokens_cached, 96);
    CHECK_INT(es.tokens_prefilled, 130 + 130 - 96);
    /* identical to the second request run cold */
    static job cold[1];
    cold[0] = j[1];
    cold[0].at_step = 0;
    st_engine *e2 = NULL;
    CHECK_OK(st_engine_create(&p, &e2, NULL, 0));
    if (!e2) return;
    CHECK(drive(e2, cold, 1) > 0);
    CHECK_INT(cold[0].stats.n_cached, 0);
    CHECK_INT(cold[0].n_toks, j[1].n_toks);
    CHECK(!memcmp(cold[0].toks, j[1].toks, sizeof(int32_t) * (size_t)j[1].n_toks));
    st_engine_destroy(e2);
    st_engine_destroy(e);
}

/* The prefix cache across engines: save, a new engine, load; the same prompt then attaches
 * its full pages and its greedy tokens equal a cold run's. A missing file loads nothing; a
 * damaged one is refused with nothing loaded; both need an idle engine. */
TEST(test_prefix_save_load) {
    static job j[1], again[1], cold[1];
    make_jobs(j, 1);
    j[0].n_prompt = 130;
    for (int t = 1; t < 130; t++) j[0].prompt[t] = 3 + (t * 31) % 250;
    j[0].sp.temp = 0;
    j[0].max_tokens = 6;
    char dir[64], path[96];
    snprintf(dir, sizeof dir, "/tmp/strata-eng-pfx-XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    snprintf(path, sizeof path, "%s/prefix.kv", dir);
    st_engine_params p = params(2, 64, 4);
    st_engine *e = NULL;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    st_kv_prefix_counts c;
    CHECK_OK(st_engine_prefix_load(e, path, &c)); /* no file yet: nothing */
    CHECK_INT(c.pages, 0);
    CHECK(drive(e, j, 1) > 0);
    CHECK_INT(j[0].stats.n_cached, 0);
    /* busy: refused */
    st_engine_req_params rp = st_engine_req_default_params();
    rp.tokens = j[0].prompt, rp.n_tokens = 20, rp.max_tokens = 2;
    st_req_id id;
    CHECK_OK(st_engine_submit(e, &rp, &id));
    CHECK_INT(st_engine_prefix_save(e, path, NULL), ST_E_STATE);
    CHECK_INT(st_engine_prefix_load(e, path, NULL), ST_E_STATE);
    CHECK_OK(st_engine_cancel(e, id));
    const st_engine_event *ev;
    int nev;
    for (int i = 0; i < 10 && st_engine_n_active(e) > 0; i++) CHECK_OK(st_engine_step(e, &ev, &nev));
    CHECK_INT(st_engine_n_active(e), 0);
    CHECK_OK(st_engine_prefix_save(e, path, &c));
    CHECK_INT(c.pages, (130 + 6 - 1) / 16); /* the prompt's and the output's full pages */
    st_engine_destroy(e);
    size_t n = 0;
    char *file = test_slurp(path, &n);
    REQUIRE(file);
    CHECK(n > 40);

    st_engine *e2 = NULL;
    CHECK_OK(st_engine_create(&p, &e2, NULL, 0));
    if (!e2) return;
    CHECK_OK(st_engine_prefix_load(e2, path, &c));
    CHECK_INT(c.pages, (130 + 6 - 1) / 16);
    again[0] = j[0];
    CHECK(drive(e2, again, 1) > 0);
    CHECK_INT(again[0].stats.n_cached, 128); /* the prompt's full pages (8 of 16 tokens) */
    CHECK_INT(again[0].n_toks, j[0].n_toks);
    CHECK(!memcmp(again[0].toks, j[0].toks, sizeof(int32_t) * (size_t)j[0].n_toks));
    st_engine_destroy(e2);

    /* a damaged file: refused, nothing loaded, the run is cold and still the same */
    file[n / 2] ^= 0x10;
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    CHECK_INT(fwrite(file, 1, n, f), n);
    fclose(f);
    st_engine *e3 = NULL;
    CHECK_OK(st_engine_create(&p, &e3, NULL, 0));
    if (!e3) return;
    int rc = st_engine_prefix_load(e3, path, &c);
    CHECK(rc == ST_E_CORRUPT || rc == ST_E_FORMAT);
    CHECK(strstr(st_ctx_error(st_engine_ctx(e3)), path) != NULL);
    CHECK_INT(c.pages, 0);
    st_kv_stats ks;
    st_kv_get_stats(st_engine_kv(e3), &ks);
    CHECK_INT(ks.pages_cached, 0);
    cold[0] = j[0];
    CHECK(drive(e3, cold, 1) > 0);
    CHECK_INT(cold[0].stats.n_cached, 0);
    CHECK_INT(cold[0].n_toks, j[0].n_toks);
    CHECK(!memcmp(cold[0].toks, j[0].toks, sizeof(int32_t) * (size_t)j[0].n_toks));
    st_engine_destroy(e3);
    free(file);
    CHECK_INT(unlink(path), 0);
    CHECK_INT(rmdir(dir), 0);
}

/* A hot pool too small for all requests at once: requests are preempted, their pages spill,
 * they resume, and every stream equals the unconstrained run's. */
TEST(test_preemption_by_spilling) {
    static job a[8], b[8];
    make_jobs(a, 8);
    for (int i = 0; i < 8; i++) a[i].max_tokens = 40, a[i].at_step = 0;
    memcpy(b, a, sizeof a);
    st_engine *e = NULL;
    st_engine_params p = params(2, 64, 8);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, a, 8) > 0);
    st_engine_destroy(e);
    char dir[] = "/tmp/strata-engine-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    p.spill_dir = dir;
    p.ram_pages = 24; /* the 8 prompts alone need ~60 pages */
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, b, 8) > 0);
    st_engine_stats es;
    st_engine_get_stats(e, &es);
    CHECK(es.preemptions > 0);
    st_kv_stats ks;
    st_kv_get_stats(st_engine_kv(e), &ks);
    CHECK(ks.tier_writes > 0);
    CHECK(ks.tier_reads > 0);
    int preempted = 0;
    for (int i = 0; i < 8; i++) {
        CHECK_INT(a[i].fin, b[i].fin);
        CHECK_INT(a[i].n_toks, b[i].n_toks);
        CHECK(!memcmp(a[i].toks, b[i].toks, sizeof(int32_t) * (size_t)a[i].n_toks));
        preempted += b[i].stats.n_preempted > 0;
    }
    CHECK(preempted > 0);
    fprintf(stderr, "  preemptions %lld (%d requests), %lld pages spilled, %lld fetched\n",
            (long long)es.preemptions, preempted, (long long)ks.tier_writes, (long long)ks.tier_reads);
    st_engine_destroy(e);
    /* a disk budget too small for the longest request: it is refused, the others finish */
    static job c[3];
    make_jobs(c, 3);
    c[1].n_prompt = 200, c[1].max_tokens = 200;
    p.disk_budget = 32768; /* one page of this model (4 layers of 8 KiB blocks) */
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    CHECK(drive(e, c, 3) > 0);
    CHECK_INT(c[1].fin, ST_FINISH_ERROR);
    CHECK_INT(c[1].error, ST_E_LIMIT);
    CHECK(c[0].fin != ST_FINISH_ERROR && c[0].n_toks > 0);
    CHECK(c[2].fin != ST_FINISH_ERROR && c[2].n_toks > 0);
    st_engine_destroy(e);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* mem_limit counts the weights; ram_auto sizes the hot pool from what they leave: three
 * quarters of it in whole pages, at most every page; too little for two pages is refused
 * naming both sizes. */
TEST(test_ram_auto) {
    char dir[] = "/tmp/strata-engine-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    st_engine_params p = params(2, 64, 4);
    p.spill_dir = dir;
    p.ram_auto = 1;
    st_engine *e = NULL;
    /* learn the weights' and a page's bytes */
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    const uint64_t w = st_model_weight_bytes(st_engine_model(e));
    const uint64_t pb = st_kv_get_geometry(st_engine_kv(e))->page_bytes;
    st_kv_stats ks;
    st_kv_get_stats(st_engine_kv(e), &ks);
    const int64_t all = ks.n_pages;
    CHECK_INT(ks.ram_pages, all); /* no limit: every page may hold RAM */
    st_engine_destroy(e);
    /* the weights and 40 pages' worth: 30 pages hot */
    p.mem_limit = w + 40 * pb;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    st_kv_get_stats(st_engine_kv(e), &ks);
    CHECK_INT(ks.ram_pages, 30);
    st_engine_destroy(e);
    /* plenty: capped at the pool */
    p.mem_limit = w + (uint64_t)(all * 4) * pb;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    st_kv_get_stats(st_engine_kv(e), &ks);
    CHECK_INT(ks.ram_pages, all);
    st_engine_destroy(e);
    /* the weights leave less than two pages */
    char why[512];
    p.mem_limit = w + pb;
    CHECK_INT(st_engine_create(&p, &e, why, sizeof why), ST_E_LIMIT);
    CHECK(strstr(why, "weights") != NULL && strstr(why, "2 pages") != NULL);
    fprintf(stderr, "  %s\n", why);
    /* without the tier the whole pool must fit beside the weights */
    p.spill_dir = NULL, p.ram_auto = 0;
    p.mem_limit = w + (uint64_t)(all - 1) * pb;
    CHECK_INT(st_engine_create(&p, &e, why, sizeof why), ST_E_LIMIT);
    CHECK(strstr(why, "after the") != NULL);
    fprintf(stderr, "  %s\n", why);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
}

/* Cancelling mid-prefill (and while waiting, and while decoding) frees every page. */
TEST(test_cancel_frees_pages) {
    st_engine *e = NULL;
    st_engine_params p = params(1, 16, 2);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    static job j[3];
    make_jobs(j, 3);
    st_req_id id[3];
    for (int i = 0; i < 3; i++) {
        st_engine_req_params rp = st_engine_req_default_params();
        j[i].n_prompt = 150;
        rp.tokens = j[i].prompt, rp.n_tokens = 150, rp.max_tokens = 50;
        CHECK_OK(st_engine_submit(e, &rp, &id[i]));
    }
    const st_engine_event *ev;
    int nev;
    for (int s = 0; s < 3; s++) CHECK_OK(st_engine_step(e, &ev, &nev));
    st_engine_req_info info;
    CHECK_OK(st_engine_req_get_info(e, id[0], &info));
    CHECK_INT(info.state, ST_REQ_PREFILL);
    CHECK(info.n_tokens > 0 && info.n_tokens < 150);
    CHECK_OK(st_engine_req_get_info(e, id[2], &info));
    CHECK_INT(info.state, ST_REQ_WAITING);
    for (int i = 0; i < 3; i++) CHECK_OK(st_engine_cancel(e, id[i]));
    CHECK_OK(st_engine_step(e, &ev, &nev));
    CHECK_INT(nev, 3);
    for (int k = 0; k < nev; k++) CHECK_INT(ev[k].finish, ST_FINISH_CANCELLED);
    CHECK_INT(st_engine_n_active(e), 0);
    CHECK_INT(st_engine_cancel(e, id[0]), ST_E_NOT_FOUND);
    check_pool_empty(e);
    st_engine_destroy(e);
}

/* Bad requests get clear errors; the queue bound holds. */
TEST(test_submit_errors) {
    st_engine *e = NULL;
    st_engine_params p = params(1, 32, 1);
    p.max_queue = 2;
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    st_req_id id;
    st_engine_req_params rp = st_engine_req_default_params();
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_INVAL); /* no prompt */
    int32_t big[600];
    for (int i = 0; i < 600; i++) big[i] = 5;
    rp.tokens = big, rp.n_tokens = 600;
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_LIMIT);
    CHECK(strstr(st_ctx_error(st_engine_ctx(e)), "600") != NULL);
    rp.n_tokens = 4;
    big[2] = 99999;
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_INVAL);
    big[2] = 5;
    const char *stops[1] = {""};
    rp.stop = stops, rp.n_stop = 1;
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_INVAL);
    rp.n_stop = 0;
    rp.text = "hello", rp.text_len = 5, rp.tokens = NULL;
    CHECK_OK(st_engine_submit(e, &rp, &id));
    CHECK_OK(st_engine_submit(e, &rp, &id));
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_QUEUE_FULL);
    st_engine_stats es;
    st_engine_get_stats(e, &es);
    CHECK_INT(es.rejected_queue_full, 1);
    st_engine_destroy(e);
}

/* A kept sequence is handed back at the finish holding the prompt and every token drawn but
 * the last; a second request continues it (its length counted as cached), and frees it. */
TEST(test_keep_and_continue) {
    st_engine *e = NULL;
    st_engine_params p = params(1, 64, 2);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    int32_t a[40], b[10];
    for (int i = 0; i < 40; i++) a[i] = 3 + (i * 11) % 250;
    for (int i = 0; i < 10; i++) b[i] = 3 + (i * 17) % 250;
    st_engine_req_params rp = st_engine_req_default_params();
    rp.tokens = a, rp.n_tokens = 40, rp.max_tokens = 12, rp.ignore_eos = 1, rp.keep_seq = 1;
    st_req_id id;
    CHECK_OK(st_engine_submit(e, &rp, &id));
    st_kv_seq_id seq = -1;
    int32_t drawn[64];
    int n_drawn = 0;
    for (int guard = 0; guard < 100 && seq < 0; guard++) {
        const st_engine_event *ev;
        int nev;
        CHECK_OK(st_engine_step(e, &ev, &nev));
        for (int k = 0; k < nev; k++) {
            if (ev[k].token >= 0) drawn[n_drawn++] = ev[k].token;
            if (ev[k].finish) {
                CHECK_INT(ev[k].finish, ST_FINISH_LENGTH);
                seq = ev[k].seq;
            }
        }
    }
    CHECK(seq >= 0);
    CHECK_INT(n_drawn, 12);
    int64_t len = 0;
    CHECK_OK(st_kv_seq_len(st_engine_kv(e), seq, &len));
    CHECK_INT(len, 40 + 11);
    int32_t held[51];
    CHECK_OK(st_kv_seq_tokens(st_engine_kv(e), seq, 0, 51, held));
    CHECK(!memcmp(held, a, sizeof a) && !memcmp(held + 40, drawn, 11 * sizeof(int32_t)));
    /* the same sequence in two requests at once is refused */
    st_engine_req_params rc = st_engine_req_default_params();
    rc.tokens = b, rc.n_tokens = 10, rc.max_tokens = 5, rc.seq = seq;
    CHECK_OK(st_engine_submit(e, &rc, &id));
    CHECK_INT(st_engine_submit(e, &rc, &id), ST_E_INVAL);
    st_engine_event fin;
    memset(&fin, 0, sizeof fin);
    for (int guard = 0; guard < 100 && !fin.finish; guard++) {
        const st_engine_event *ev;
        int nev;
        CHECK_OK(st_engine_step(e, &ev, &nev));
        for (int k = 0; k < nev; k++)
            if (ev[k].finish) fin = ev[k];
    }
    CHECK(fin.finish == ST_FINISH_LENGTH || fin.finish == ST_FINISH_EOS);
    CHECK_INT(fin.stats.n_cached, 51);
    CHECK_INT(fin.seq, -1);
    check_pool_empty(e);
    st_engine_destroy(e);
}

/* Logprobs: greedy draws the most likely token, so each event's token is its top[0] with the
 * same log-probability; alternatives descend, none above 0, their mass at most 1. */
TEST(test_logprobs) {
    st_engine *e = NULL;
    st_engine_params p = params(1, 64, 1);
    CHECK_OK(st_engine_create(&p, &e, NULL, 0));
    if (!e) return;
    int32_t a[20];
    for (int i = 0; i < 20; i++) a[i] = 3 + (i * 13) % 250;
    st_engine_req_params rp = st_engine_req_default_params();
    rp.tokens = a, rp.n_tokens = 20, rp.max_tokens = 10, rp.n_logprobs = 3, rp.ignore_eos = 1;
    rp.sampling.temp = 0;
    st_req_id id;
    CHECK_OK(st_engine_submit(e, &rp, &id));
    int seen = 0, done = 0;
    for (int guard = 0; guard < 100 && !done; guard++) {
        const st_engine_event *ev;
        int nev;
        CHECK_OK(st_engine_step(e, &ev, &nev));
        for (int k = 0; k < nev; k++) {
            done |= ev[k].finish != 0;
            if (ev[k].token < 0) continue;
            seen++;
            CHECK(ev[k].has_logprob);
            CHECK_INT(ev[k].n_top, 3);
            CHECK_INT(ev[k].top[0].token, ev[k].token);
            CHECK(ev[k].logprob == ev[k].top[0].logprob);
            CHECK(ev[k].logprob <= 0);
            CHECK(ev[k].top[0].logprob >= ev[k].top[1].logprob && ev[k].top[1].logprob >= ev[k].top[2].logprob);
            double mass = 0;
            for (int j = 0; j < 3; j++) mass += exp(ev[k].top[j].logprob);
            CHECK(mass <= 1.0 + 1e-6 && mass > 0);
        }
    }
    CHECK_INT(seen, 10);
    rp.n_logprobs = 21;
    CHECK_INT(st_engine_submit(e, &rp, &id), ST_E_INVAL);
    st_engine_destroy(e);
}

TEST_MAIN(test_batched_equals_alone, test_batched_equals_alone_from_file, test_prefix_save_load, test_logprobs, test_keep_and_continue, test_stream_text_is_detokenized,
          test_stop_string_never_leaks, test_shared_prefix, test_preemption_by_spilling, test_ram_auto, test_cancel_frees_pages,
          test_submit_errors)
