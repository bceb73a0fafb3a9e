/* bench/locality: what the SSD tier reads per Quest decode step for a trained model against a
 * random-weight model of the same shape, side by side in one run.
 *
 * A tiered pool can only serve sparse decode from RAM if consecutive steps select mostly the
 * same pages. bench/sparse measures the tier on a random-weight model (the only long-context
 * model that can be made offline), whose attention has no structure: its selection changes
 * almost completely from step to step. This program measures how much that matters, on the
 * one trained model at hand: ../shared/models/stories260K.gguf (5 layers, 8/4 heads, head_dim
 * 8, context 512) and a model that `strata mkmodel` writes with exactly its shape and f32
 * random weights. Both read the same tokens (the trained model's tokenization of
 * ../shared/peers/stories-sampled.txt): a dense prefill of --prompt tokens, then --steps
 * single-token decode steps fed the text's next tokens (teacher forcing, so the inputs are
 * identical), with Quest at each --budget, every layer sparse, and a RAM pool of --ram-pages
 * pages (the rest spilled under --spill-dir). Per model it prints the spill bytes read per
 * step, the cold layer blocks streamed and pages fetched per step, and the fraction of the
 * dense softmax mass the selection captured (audited every 4th step of a second, all-in-RAM
 * run: the audit needs every key in RAM); then the ratio of the random model's reads to the
 * trained one's.
 *
 *   build/bench/locality [--budget 64,128] [--ram-pages 12] [--prompt 256] [--steps 200]
 *                        [--spill-dir /tmp] [-t THREADS]
 *
 * ../shared is $STRATA_SHARED or ../shared beside the source tree; without it the program
 * says SKIPPED and exits 0. */
#include "bench_common.h"
#include "strata/kv.h"
#include "strata/model.h"
#include "strata/quest.h"
#include "strata/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BUDGETS 8

typedef struct run_result {
    double mib_step, blocks_step, fetches_step, listed, mass_mean, mass_min;
} run_result;

/* One model, one budget: a fresh pool and runner, prefill, then the decode steps. dir set: a
 * tiered pool (fills the tier figures); NULL: all in RAM with the mass audit, which needs
 * every page in RAM (fills mass_mean / mass_min). */
static int run_model(st_ctx *ctx, const st_model *m, const int32_t *toks, int n_prompt, int n_steps,
                     long long budget, long long ram_pages, const char *dir, run_result *out) {
    const st_model_hparams *hp = st_model_get_hparams(m);
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.n_pages = (hp->n_ctx_train + kp.page_size - 1) / kp.page_size + 2;
    if (dir) {
        kp.spill_dir = dir;
        kp.instance_id = "bench-locality";
        kp.ram_pages = ram_pages;
    }
    st_kv *kv = NULL;
    st_runner *r = NULL;
    st_kv_seq_id seq = -1;
    st_runner_params rp = st_runner_default_params();
    st_kv_quest_params qp = st_kv_quest_default_params();
    qp.budget = budget;
    qp.dense_layers = 0;
    float *lg = malloc((size_t)hp->n_vocab * sizeof *lg);
    int rc = lg ? st_kv_create(ctx, &kp, &kv) : ST_E_NOMEM;
    if (!rc) rc = st_runner_create(ctx, m, kv, &rp, &r);
    if (!rc) rc = st_kv_seq_create(kv, &seq);
    st_batch b = {.n_tokens = n_prompt, .tokens = toks, .seq_single = seq};
    if (!rc) rc = st_runner_forward(r, &b, lg);
    if (!rc) rc = st_runner_set_quest(r, &qp, dir ? 0 : 4);
    st_kv_stats k0, k1;
    if (!rc) st_kv_get_stats(kv, &k0);
    for (int i = 0; i < n_steps && !rc; i++) {
        st_batch d = {.n_tokens = 1, .tokens = &toks[n_prompt + i], .seq_single = seq};
        rc = st_runner_forward(r, &d, lg);
    }
    if (!rc) {
        st_kv_get_stats(kv, &k1);
        st_runner_quest_stats qs;
        st_runner_get_quest_stats(r, &qs);
        if (dir) {
            out->mib_step = (double)(k1.tier_bytes_read - k0.tier_bytes_read) / 1048576.0 / n_steps;
            out->blocks_step = (double)(k1.tier_block_reads - k0.tier_block_reads) / n_steps;
            out->fetches_step = (double)(k1.tier_reads - k0.tier_reads) / n_steps;
            out->listed = qs.pages_total ? (double)qs.pages_listed / (double)qs.pages_total : 1;
        } else if (!qs.audits) {
            rc = st_seterr(ctx, ST_E_STATE, "locality: no audit sample");
        } else {
            out->mass_mean = qs.mass_mean;
            out->mass_min = qs.mass_min;
        }
    }
    st_runner_destroy(r);
    st_kv_destroy(kv);
    free(lg);
    return rc;
}

int main(int argc, char **argv) {
    long long budgets[MAX_BUDGETS] = {64, 128}, ram_pages = 12, n_prompt = 256, n_steps = 200,
              n_threads = 2;
    int n_budgets = 2;
    const char *spill_root = "/tmp";
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (ok && !strcmp(a, "--budget")) ok = (n_budgets = bench_parse_list(v, budgets, MAX_BUDGETS)) > 0;
        else if (ok && !strcmp(a, "--ram-pages")) ok = (ram_pages = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--prompt")) ok = (n_prompt = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--steps")) ok = (n_steps = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--spill-dir")) spill_root = v;
        else if (ok && !strcmp(a, "-t")) ok = (n_threads = atoll(v)) > 0;
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "usage: locality [--budget 64,128] [--ram-pages N] [--prompt N] "
                            "[--steps N] [--spill-dir DIR] [-t THREADS]\n");
            return 2;
        }
    }
    char model_path[4096], text_path[4096], dir[4096];
    snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", bench_shared_dir());
    snprintf(text_path, sizeof text_path, "%s/peers/stories-sampled.txt", bench_shared_dir());
    if (access(model_path, R_OK) || access(text_path, R_OK)) {
        printf("locality: SKIPPED: %s or %s is missing (set STRATA_SHARED)\n", model_path, text_path);
        return 0;
    }
    if (bench_make_spill_dir(spill_root, "locality", dir, sizeof dir)) return 1;
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = (int)n_threads;
    st_ctx *ctx = NULL;
    st_model *trained = NULL, *random = NULL;
    st_tok *tok = NULL;
    void *img = NULL;
    size_t img_size = 0, text_len = 0;
    int32_t *toks = NULL;
    int n_toks = 0;
    char *text = bench_read_file(text_path, &text_len);
    int rc = text ? st_ctx_create(&cp, &ctx) : -2;
    st_model_load_params lp = bench_model_load_params();
    if (!rc) rc = st_model_load(ctx, model_path, &lp, &trained);
    if (!rc) rc = st_tok_load(ctx, st_model_gguf(trained), NULL, &tok);
    if (!rc) rc = st_tok_encode_alloc(tok, text, text_len, true, false, &toks, &n_toks);
    const st_model_hparams *hp = trained ? st_model_get_hparams(trained) : NULL;
    if (!rc && n_prompt + n_steps > n_toks) {
        fprintf(stderr, "locality: the text has %d tokens, fewer than --prompt + --steps\n", n_toks);
        rc = ST_E_INVAL;
    }
    if (!rc && n_prompt + n_steps > hp->n_ctx_train) {
        fprintf(stderr, "locality: --prompt + --steps exceeds the model's context %d\n", hp->n_ctx_train);
        rc = ST_E_INVAL;
    }
    if (!rc) { /* the same shape, random weights (N(0, 0.02), seed 1) */
        st_synth_params sp = st_synth_default_params();
        sp.arch = hp->arch;
        sp.n_layer = hp->n_layer, sp.n_embd = hp->n_embd, sp.n_head = hp->n_head;
        sp.n_head_kv = hp->n_head_kv, sp.n_ff = hp->n_ff, sp.n_vocab = hp->n_vocab;
        sp.n_ctx = hp->n_ctx_train, sp.rope_base = hp->rope_base, sp.rms_eps = hp->rms_eps;
        sp.type = ST_TYPE_F32;
        sp.embd_type = ST_TYPE_F32;
        sp.vocab_from = model_path;
        rc = st_synth_write_memory(ctx, &sp, &img, &img_size);
        if (!rc) rc = st_model_load_memory(ctx, img, img_size, "random", &random);
    }
    run_result res[MAX_BUDGETS][2];
    memset(res, 0, sizeof res);
    for (int i = 0; i < n_budgets && !rc; i++)
        for (int k = 0; k < 2 && !rc; k++) {
            const st_model *m = k ? random : trained;
            rc = run_model(ctx, m, toks, (int)n_prompt, (int)n_steps, budgets[i], ram_pages, dir, &res[i][k]);
            if (!rc) rc = run_model(ctx, m, toks, (int)n_prompt, (int)n_steps, budgets[i], 0, NULL, &res[i][k]);
        }
    if (rc) {
        fprintf(stderr, "locality: %s (%s)\n", rc == -2 ? "cannot read the text" : st_strerror(rc),
                ctx ? st_ctx_error(ctx) : "");
    } else {
        printf("stories260K (trained) vs %s\nsame %lld tokens of stories-sampled.txt: %lld prefilled, "
               "%lld decoded (teacher-forced); every layer sparse; RAM pool %lld of %d pages (page 16)\n",
               st_model_desc(random), n_prompt + n_steps, n_prompt, n_steps, ram_pages,
               (hp->n_ctx_train + 15) / 16);
        printf("| budget | model | pages attended | spill MiB/step | blocks streamed/step | "
               "pages fetched/step | softmax mass captured (mean, min) |\n|---|---|---|---|---|---|---|\n");
        for (int i = 0; i < n_budgets; i++)
            for (int k = 0; k < 2; k++) {
                const run_result *x = &res[i][k];
                printf("| %lld | %s | %.1f%% | %.3f | %.2f | %.2f | %.4f, %.4f |\n", budgets[i],
                       k ? "random" : "trained", 100 * x->listed, x->mib_step, x->blocks_step,
                       x->fetches_step, x->mass_mean, x->mass_min);
            }
        for (int i = 0; i < n_budgets; i++)
            printf("budget %lld: the random model reads %.1fx the trained model's spill bytes per step\n",
                   budgets[i], res[i][0].mib_step > 0 ? res[i][1].mib_step / res[i][0].mib_step : 0.0);
    }
    if (rmdir(dir)) fprintf(stderr, "locality: could not remove %s\n", dir);
    free(toks);
    free(text);
    st_tok_destroy(tok);
    st_model_destroy(random);
    st_model_destroy(trained);
    free(img);
    st_ctx_destroy(ctx);
    return rc ? 1 : 0;
}
