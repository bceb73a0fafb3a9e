/* bench/fidelity: what Quest sparse decode costs in quality on a trained long-context model,
 * against dense decode, side by side in one run.
 *
 * Two measures, each for dense decode and for every --budget x --dense-layers pair:
 *   perplexity  --chunks chunks of -c tokens, cut as `strata perplexity` cuts them (each
 *               chunk's first token replaced by BOS, the second half scored); every token is
 *               a decode step, so dense and sparse are scored by the same attention path and
 *               differ only in the pages each step attends to.
 *   copy test   BOS, a passage of --passage tokens, --filler tokens of the text that follows
 *               it, then the passage again: the mean loss (nats per token) on the second copy.
 *               A model that retrieves can predict the second copy from the first; sparse
 *               decode must keep the pages that make that possible. --trials passages from
 *               different places in the text are averaged. The loss on the first copy (dense)
 *               is printed beside it: the gap is what the model gains from the first copy.
 * Sparse layers use Quest's default sinks (one page) and recent pages (two pages).
 *
 * --resident-bonus B1,B2,... adds, for every budget x dense-layers pair and each B, the same
 * measures through the SSD tier: a pool whose RAM holds 1/8 of the pages (--ram-frac), the
 * rest spilled under --spill-dir, with Quest's residency bonus B (quest.h, resident_bonus;
 * 0 = plain Quest, whose output the tier does not change). A bonus makes blocks in RAM win
 * close rankings, so it changes which pages are attended: these rows are its quality cost.
 *
 *   build/bench/fidelity [-m MODEL] [-f TEXT] [-c 4096] [--chunks 4] [--budget 256,512,1k,2k]
 *                        [--dense-layers 0,1,2] [--passage 1000] [--filler 2000] [--trials 3]
 *                        [--resident-bonus 0,2,4] [--ram-frac 8] [--spill-dir /tmp] [-t THREADS]
 *
 * MODEL defaults to ../shared/models/tiny-long.gguf ($STRATA_SHARED); TEXT to the project's own
 * tree as the other trained-model benches read it (bench_text.h), which the model was not
 * trained on. Without the model the program says SKIPPED and exits 0. */
#include "bench_common.h"
#include "bench_text.h"
#include "cli/ppl.h"
#include "strata/kv.h"
#include "strata/model.h"
#include "strata/quest.h"
#include "strata/tok.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_LIST 8

typedef struct bench_run {
    st_kv *kv;
    st_runner *r;
    float *lg;
    int n_vocab;
} bench_run;

/* Runs seq[0..n) as decode steps on a fresh sequence and adds the loss of predicting
 * seq[j + 1] for j in [from, to) to *sum (and the count to *cnt). */
static int score(bench_run *b, const int32_t *seq, int n, int from, int to, double *sum, long long *cnt) {
    st_kv_seq_id id;
    int rc = st_kv_seq_create(b->kv, &id);
    const uint8_t no = 0;
    for (int j = 0; j < n - 1 && !rc; j++) {
        const int want = j >= from && j < to;
        st_batch d = {.n_tokens = 1, .tokens = seq + j, .seq_single = id, .want_logits = want ? NULL : &no};
        rc = st_runner_forward(b->r, &d, want ? b->lg : NULL);
        if (!rc && want) *sum += st_ppl_nll(b->lg, b->n_vocab, seq[j + 1]), ++*cnt;
    }
    if (id >= 0) st_kv_seq_free(b->kv, id);
    return rc;
}

typedef struct setting {
    long long budget, dense_layers; /* budget 0: dense */
    double bonus;                   /* < 0: all in RAM; else tiered with this residency bonus */
    double ppl, copy_loss, pages_frac, spill_mib_step;
} setting;

/* A comma-separated list of numbers >= 0 (bench_parse_list takes positive integers only, and
 * 0 dense layers or a 0 bonus are meaningful) into out[0..cap): the count, or -1. */
static int parse_nonneg(const char *v, double *out, int cap) {
    int n = 0;
    for (const char *s = v; *s;) {
        char *end;
        const double x = strtod(s, &end);
        if (end == s || !(x >= 0) || n == cap || (*end && *end != ',')) return -1;
        out[n++] = x;
        s = *end ? end + 1 : end;
    }
    return n;
}

int main(int argc, char **argv) {
    long long budgets[MAX_LIST] = {256, 512, 1024, 2048}, dls[MAX_LIST] = {0, 1, 2};
    long long C = 4096, n_chunks = 4, n_passage = 1000, n_filler = 2000, n_trials = 3, n_threads = 2;
    int n_budgets = 4, n_dls = 3, n_bonus = 0;
    double bonuses[MAX_LIST];
    long long ram_frac = 8;
    const char *model_path = NULL, *text_path = NULL, *spill_root = "/tmp";
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (ok && !strcmp(a, "-m")) model_path = v;
        else if (ok && !strcmp(a, "-f")) text_path = v;
        else if (ok && !strcmp(a, "-c")) ok = (C = atoll(v)) >= 64;
        else if (ok && !strcmp(a, "--chunks")) ok = (n_chunks = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--budget")) ok = (n_budgets = bench_parse_list(v, budgets, MAX_LIST)) > 0;
        else if (ok && !strcmp(a, "--dense-layers")) {
            double x[MAX_LIST];
            ok = (n_dls = parse_nonneg(v, x, MAX_LIST)) > 0;
            for (int i = 0; ok && i < n_dls; i++) ok = x[i] == (double)(dls[i] = (long long)x[i]);
        } else if (ok && !strcmp(a, "--passage")) ok = (n_passage = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--filler")) ok = (n_filler = atoll(v)) >= 0;
        else if (ok && !strcmp(a, "--trials")) ok = (n_trials = atoll(v)) > 0;
        else if (ok && !strcmp(a, "-t")) ok = (n_threads = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--ram-frac")) ok = (ram_frac = atoll(v)) > 1;
        else if (ok && !strcmp(a, "--spill-dir")) spill_root = v;
        else if (ok && !strcmp(a, "--resident-bonus")) {
            ok = (n_bonus = parse_nonneg(v, bonuses, MAX_LIST)) > 0;
        } else ok = 0;
        if (!ok) {
            fprintf(stderr, "usage: fidelity [-m MODEL] [-f TEXT] [-c CTX] [--chunks N] [--budget 256,512,...] "
                            "[--dense-layers 0,1,2] [--passage N] [--filler N] [--trials N] [--resident-bonus B,...] "
                            "[--ram-frac N] [--spill-dir DIR] [-t THREADS]\n");
            return 2;
        }
    }
    char def_model[4096];
    snprintf(def_model, sizeof def_model, "%s/models/tiny-long.gguf", bench_shared_dir());
    if (!model_path) model_path = def_model;
    if (access(model_path, R_OK)) {
        printf("fidelity: SKIPPED: %s is missing (set STRATA_SHARED or -m)\n", model_path);
        return 0;
    }
    size_t text_len = 0;
    char *text = NULL;
    if (text_path && !(text = bench_read_file(text_path, &text_len))) {
        fprintf(stderr, "fidelity: cannot read %s\n", text_path);
        return 1;
    }

    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = (int)n_threads;
    st_ctx *ctx = NULL;
    st_model *m = NULL;
    st_tok *tok = NULL;
    int32_t *toks = NULL, *seq = NULL;
    int n_toks = 0;
    bench_run b = {0}, bt = {0}; /* all in RAM; tiered */
    char dir[4096] = "";
    int rc = st_ctx_create(&cp, &ctx);
    st_model_load_params lp = bench_model_load_params();
    if (!rc) rc = st_model_load(ctx, model_path, &lp, &m);
    if (!rc) rc = st_tok_load(ctx, st_model_gguf(m), NULL, &tok);
    const long long copy_len = 1 + 2 * n_passage + n_filler;
    const long long need_ppl = n_chunks * C, need_copy = n_trials * (n_passage + n_filler) + 1;
    int n_files = 0;
    if (!rc && text) rc = st_tok_encode_alloc(tok, text, text_len, true, false, &toks, &n_toks);
    else if (!rc && bench_text_tokens(tok, need_ppl > need_copy ? need_ppl : need_copy, &toks, &n_toks, &n_files))
        rc = ST_E_INVAL;
    const st_model_hparams *hp = m ? st_model_get_hparams(m) : NULL;
    if (!rc && (need_ppl > n_toks || need_copy > n_toks)) {
        fprintf(stderr, "fidelity: the text has %d tokens; the perplexity chunks need %lld, the copy trials %lld\n",
                n_toks, need_ppl, need_copy);
        rc = ST_E_INVAL;
    }
    if (!rc && (C > hp->n_ctx_train || copy_len > hp->n_ctx_train)) {
        fprintf(stderr, "fidelity: -c or the copy sequence exceeds the model's context %d\n", hp->n_ctx_train);
        rc = ST_E_INVAL;
    }
    const long long max_len = C > copy_len ? C : copy_len;
    if (!rc) {
        st_kv_params kp = st_kv_default_params();
        kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
        kp.n_pages = (max_len + kp.page_size - 1) / kp.page_size + 2;
        st_runner_params rp = st_runner_default_params();
        rp.n_ctx = (int32_t)max_len;
        b.n_vocab = hp->n_vocab;
        b.lg = malloc((size_t)hp->n_vocab * sizeof *b.lg);
        seq = malloc((size_t)max_len * sizeof *seq);
        rc = b.lg && seq ? st_kv_create(ctx, &kp, &b.kv) : ST_E_NOMEM;
        if (!rc) rc = st_runner_create(ctx, m, b.kv, &rp, &b.r);
        if (!rc && n_bonus) {
            rc = bench_make_spill_dir(spill_root, "fidelity", dir, sizeof dir) ? ST_E_IO : 0;
            kp.spill_dir = dir;
            kp.instance_id = "bench-fidelity";
            kp.ram_pages = kp.n_pages / ram_frac > 2 ? kp.n_pages / ram_frac : 2;
            bt.n_vocab = b.n_vocab, bt.lg = b.lg;
            if (!rc) rc = st_kv_create(ctx, &kp, &bt.kv);
            if (!rc) rc = st_runner_create(ctx, m, bt.kv, &rp, &bt.r);
        }
    }
    /* settings[0] is dense; then budget-major */
    setting set[1 + MAX_LIST * MAX_LIST * (1 + MAX_LIST)];
    int n_set = 0;
    set[n_set++] = (setting){.budget = 0, .dense_layers = 0, .bonus = -1};
    for (int i = 0; i < n_budgets; i++)
        for (int k = 0; k < n_dls; k++) {
            set[n_set++] = (setting){.budget = budgets[i], .dense_layers = dls[k], .bonus = -1};
            for (int j = 0; j < n_bonus; j++)
                set[n_set++] = (setting){.budget = budgets[i], .dense_layers = dls[k], .bonus = bonuses[j]};
        }
    double first_copy_loss = 0;
    const double t0 = st_time_now();
    for (int s = 0; s < n_set && !rc; s++) {
        bench_run *run = set[s].bonus < 0 ? &b : &bt;
        st_kv_quest_params qp = st_kv_quest_default_params();
        qp.budget = set[s].budget;
        qp.dense_layers = (int32_t)set[s].dense_layers;
        qp.resident_bonus = set[s].bonus > 0 ? set[s].bonus : 0;
        rc = st_runner_set_quest(run->r, &qp, 0);
        st_runner_quest_stats q0, q1;
        st_runner_get_quest_stats(run->r, &q0);
        st_kv_stats k0, k1;
        st_kv_get_stats(run->kv, &k0);
        double sum = 0;
        long long cnt = 0;
        for (long long c = 0; c < n_chunks && !rc; c++) {
            memcpy(seq, toks + c * C, (size_t)C * sizeof *seq);
            if (st_tok_add_bos(tok) && st_tok_bos(tok) >= 0) seq[0] = st_tok_bos(tok);
            rc = score(run, seq, (int)C, (int)(C / 2), (int)C - 1, &sum, &cnt);
        }
        if (!rc) set[s].ppl = exp(sum / (double)cnt);
        double csum = 0, fsum = 0;
        long long ccnt = 0, fcnt = 0;
        for (long long t = 0; t < n_trials && !rc; t++) {
            const int32_t *p = toks + 1 + t * (n_passage + n_filler); /* passage, then its filler */
            seq[0] = st_tok_bos(tok) >= 0 ? st_tok_bos(tok) : toks[0];
            memcpy(seq + 1, p, (size_t)(n_passage + n_filler) * sizeof *seq);
            memcpy(seq + 1 + n_passage + n_filler, p, (size_t)n_passage * sizeof *seq);
            const int second = (int)(n_passage + n_filler); /* logits at j predict seq[j + 1] */
            if (s == 0) /* dense: the first copy's loss too */
                rc = score(run, seq, (int)(n_passage + 1), 1, (int)n_passage, &fsum, &fcnt);
            if (!rc) rc = score(run, seq, (int)copy_len, second, (int)copy_len - 1, &csum, &ccnt);
        }
        if (!rc) {
            set[s].copy_loss = csum / (double)ccnt;
            if (s == 0) first_copy_loss = fsum / (double)fcnt;
            st_runner_get_quest_stats(run->r, &q1);
            st_kv_get_stats(run->kv, &k1);
            const int64_t tot = q1.pages_total - q0.pages_total;
            set[s].pages_frac = tot > 0 ? (double)(q1.pages_listed - q0.pages_listed) / (double)tot : 1;
            const int64_t steps = q1.steps - q0.steps;
            set[s].spill_mib_step = steps > 0 ? (double)(k1.tier_bytes_read - k0.tier_bytes_read) / (1 << 20) / (double)steps : 0;
            fprintf(stderr, "fidelity: %d/%d done (%.0f s)\n", s + 1, n_set, st_time_now() - t0);
        }
    }
    if (rc) {
        fprintf(stderr, "fidelity: %s (%s)\n", st_strerror(rc), ctx ? st_ctx_error(ctx) : "");
    } else {
        printf("%s: %d layers; text %s (%d tokens); perplexity %lld chunks of %lld (decode steps, second half "
               "scored); copy test: %lld trials of passage %lld + filler %lld + passage again; %lld threads\n",
               model_path, hp->n_layer, text_path ? text_path : "the project's tree (bench_text.h)", n_toks,
               n_chunks, C, n_trials, n_passage, n_filler, n_threads);
        printf("dense: the first copy's loss %.4f nats/token, the second's %.4f\n", first_copy_loss,
               set[0].copy_loss);
        if (n_bonus)
            printf("tiered rows: RAM for 1/%lld of the pages, spill dir under %s\n", ram_frac, spill_root);
        printf("| budget | dense layers | KV | pages attended (sparse layers) | PPL | vs dense | copy loss | vs dense |%s\n"
               "| --- | --- | --- | --- | --- | --- | --- | --- |%s\n", n_bonus ? " spill MiB/step |" : "",
               n_bonus ? " --- |" : "");
        for (int s = 0; s < n_set; s++) {
            char bud[32], dl[32], mode[48];
            snprintf(bud, sizeof bud, "%lld", set[s].budget);
            snprintf(dl, sizeof dl, "%lld", set[s].dense_layers);
            if (set[s].bonus < 0) snprintf(mode, sizeof mode, "RAM");
            else snprintf(mode, sizeof mode, "tiered, bonus %g", set[s].bonus);
            printf("| %s | %s | %s | %.1f%% | %.4f | %+.2f%% | %.4f | %+.2f%% |", s ? bud : "dense", s ? dl : "all", mode,
                   100 * set[s].pages_frac, set[s].ppl, 100 * (set[s].ppl / set[0].ppl - 1), set[s].copy_loss,
                   100 * (set[s].copy_loss / set[0].copy_loss - 1));
            if (n_bonus) printf(" %.3f |", set[s].spill_mib_step);
            printf("\n");
        }
    }
    free(seq);
    free(b.lg);
    st_runner_destroy(bt.r);
    st_kv_destroy(bt.kv);
    if (dir[0] && rmdir(dir)) fprintf(stderr, "fidelity: could not remove %s\n", dir);
    st_runner_destroy(b.r);
    st_kv_destroy(b.kv);
    free(toks);
    free(text);
    st_tok_destroy(tok);
    st_model_destroy(m);
    st_ctx_destroy(ctx);
    return rc ? 1 : 0;
}
