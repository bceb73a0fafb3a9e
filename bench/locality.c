/* bench/locality: what the SSD tier reads per Quest decode step for a trained model against a
 * random-weight model of the same shape, side by side in one run.
 *
 * A tiered pool can only serve sparse decode from RAM if consecutive steps select mostly the
 * same pages. A random-weight model's attention has no structure: its selection changes
 * almost completely from step to step. This program measures how much that matters on a
 * trained model: by default ../shared/models/stories260K.gguf (5 layers, 8/4 heads, head_dim
 * 8, context 512) reading its tokenization of ../shared/peers/stories-sampled.txt; with
 * -m MODEL that model (e.g. ../shared/models/tiny-long.gguf, context 32768) reading the
 * project's own docs and sources (bench_text.h). Beside it, its random twin (bench_text.h:
 * the synthetic writer, the same shape and weight type). Both read the same tokens: a
 * prefill (chunked, by the model) of each --prompt length, then --steps single-token decode
 * steps fed the text's next tokens (teacher forcing, so the inputs are identical), with Quest
 * at each --budget, every layer sparse, and a RAM pool of --ram-pages pages, or with
 * --ram-frac N 1/N of the pages the run fills (the rest spilled under --spill-dir). A prompt
 * longer than the model's context less --steps is cut to fit. Per model it prints the spill
 * bytes read per step, the cold layer blocks streamed and pages fetched per step, and the
 * fraction of the dense softmax mass the selection captured (audited every 4th step of a
 * second, all-in-RAM run: the audit needs every key in RAM); then the ratio of the random
 * model's reads to the trained one's.
 *
 *   build/bench/locality [-m MODEL] [--prompt 256[,4k,...]] [--budget 64,128] [--ram-pages 12 |
 *                        --ram-frac 8] [--steps 200] [--spill-dir /tmp] [-t THREADS]
 *
 * ../shared is $STRATA_SHARED or ../shared beside the source tree; without the default model
 * or text the program says SKIPPED and exits 0. */
#include "bench_common.h"
#include "bench_text.h"
#include "strata/kv.h"
#include "strata/model.h"
#include "strata/quest.h"
#include "strata/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BUDGETS 8
#define MAX_PROMPTS 8

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
    kp.n_pages = (n_prompt + n_steps + kp.page_size - 1) / kp.page_size + 2;
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
    long long budgets[MAX_BUDGETS] = {64, 128}, prompts[MAX_PROMPTS] = {256}, ram_pages = 12, ram_frac = 0,
              n_steps = 200, n_threads = 2;
    int n_budgets = 2, n_prompts = 1;
    const char *spill_root = "/tmp", *model_arg = NULL;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (ok && !strcmp(a, "--budget")) ok = (n_budgets = bench_parse_list(v, budgets, MAX_BUDGETS)) > 0;
        else if (ok && !strcmp(a, "--ram-pages")) ok = (ram_pages = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--ram-frac")) ok = (ram_frac = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--prompt")) ok = (n_prompts = bench_parse_list(v, prompts, MAX_PROMPTS)) > 0;
        else if (ok && !strcmp(a, "--steps")) ok = (n_steps = atoll(v)) > 0;
        else if (ok && !strcmp(a, "--spill-dir")) spill_root = v;
        else if (ok && !strcmp(a, "-m")) model_arg = v;
        else if (ok && !strcmp(a, "-t")) ok = (n_threads = atoll(v)) > 0;
        else ok = 0;
        if (!ok) {
            fprintf(stderr, "usage: locality [-m MODEL] [--prompt N[,N...]] [--budget 64,128] [--ram-pages N | "
                            "--ram-frac N] [--steps N] [--spill-dir DIR] [-t THREADS]\n");
            return 2;
        }
    }
    char model_path[4096], text_path[4096], dir[4096];
    snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", bench_shared_dir());
    snprintf(text_path, sizeof text_path, "%s/peers/stories-sampled.txt", bench_shared_dir());
    if (model_arg) {
        snprintf(model_path, sizeof model_path, "%s", model_arg);
    } else if (access(model_path, R_OK) || access(text_path, R_OK)) {
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
    int n_toks = 0, n_files = 0;
    long long max_prompt = 0;
    for (int i = 0; i < n_prompts; i++) max_prompt = prompts[i] > max_prompt ? prompts[i] : max_prompt;
    char *text = model_arg ? NULL : bench_read_file(text_path, &text_len);
    int rc = text || model_arg ? st_ctx_create(&cp, &ctx) : -2;
    st_model_load_params lp = bench_model_load_params();
    if (!rc) rc = st_model_load(ctx, model_path, &lp, &trained);
    if (!rc) rc = st_tok_load(ctx, st_model_gguf(trained), NULL, &tok);
    const st_model_hparams *hp = trained ? st_model_get_hparams(trained) : NULL;
    if (!rc && model_arg) {
        const long long want = max_prompt + n_steps < hp->n_ctx_train ? max_prompt + n_steps : hp->n_ctx_train;
        if (bench_text_tokens(tok, want, &toks, &n_toks, &n_files)) rc = ST_E_INVAL;
    } else if (!rc) {
        rc = st_tok_encode_alloc(tok, text, text_len, true, false, &toks, &n_toks);
    }
    for (int i = 0; i < n_prompts && !rc; i++) {
        if (prompts[i] + n_steps > hp->n_ctx_train) prompts[i] = hp->n_ctx_train - n_steps;
        if (prompts[i] < 1 || prompts[i] + n_steps > n_toks) {
            fprintf(stderr, "locality: the text has %d tokens and the model's context is %d: --prompt %lld "
                            "+ --steps does not fit\n", n_toks, hp->n_ctx_train, prompts[i]);
            rc = ST_E_INVAL;
        }
    }
    if (!rc) rc = bench_text_twin(ctx, trained, model_path, &img, &img_size, &random);
    static run_result res[MAX_PROMPTS][MAX_BUDGETS][2];
    long long ram[MAX_PROMPTS];
    for (int pi = 0; pi < n_prompts && !rc; pi++) {
        const long long pages = (prompts[pi] + n_steps + 15) / 16;
        ram[pi] = ram_frac ? (pages / ram_frac > 2 ? pages / ram_frac : 2) : ram_pages;
        for (int i = 0; i < n_budgets && !rc; i++)
            for (int k = 0; k < 2 && !rc; k++) {
                const st_model *m = k ? random : trained;
                run_result *x = &res[pi][i][k];
                rc = run_model(ctx, m, toks, (int)prompts[pi], (int)n_steps, budgets[i], ram[pi], dir, x);
                if (!rc) rc = run_model(ctx, m, toks, (int)prompts[pi], (int)n_steps, budgets[i], 0, NULL, x);
                if (!rc)
                    fprintf(stderr, "  prompt %lld budget %lld %s: %.3f MiB/step\n", prompts[pi], budgets[i],
                            k ? "random" : "trained", x->mib_step);
            }
    }
    if (rc) {
        fprintf(stderr, "locality: %s (%s)\n", rc == -2 ? "cannot read the text" : st_strerror(rc),
                ctx ? st_ctx_error(ctx) : "");
    } else {
        if (model_arg)
            printf("%s (trained) vs %s\ntext: %d files of %s (docs, include/strata, src/*), %d tokens\n",
                   model_path, st_model_desc(random), n_files, STRATA_SOURCE_DIR, n_toks);
        else
            printf("stories260K (trained) vs %s\ntext: stories-sampled.txt, %d tokens\n", st_model_desc(random),
                   n_toks);
        printf("each run: a prefill of the prompt, %lld decoded (teacher-forced); every layer sparse; page 16\n",
               n_steps);
        printf("| prompt | budget | model | RAM pages / pages | pages attended | spill MiB/step | "
               "blocks streamed/step | pages fetched/step | softmax mass captured (mean, min) |\n"
               "|---|---|---|---|---|---|---|---|---|\n");
        for (int pi = 0; pi < n_prompts; pi++)
            for (int i = 0; i < n_budgets; i++)
                for (int k = 0; k < 2; k++) {
                    const run_result *x = &res[pi][i][k];
                    printf("| %lld | %lld | %s | %lld / %lld | %.1f%% | %.3f | %.2f | %.2f | %.4f, %.4f |\n",
                           prompts[pi], budgets[i], k ? "random" : "trained", ram[pi],
                           (prompts[pi] + n_steps + 15) / 16, 100 * x->listed, x->mib_step, x->blocks_step,
                           x->fetches_step, x->mass_mean, x->mass_min);
                }
        for (int pi = 0; pi < n_prompts; pi++)
            for (int i = 0; i < n_budgets; i++)
                printf("prompt %lld, budget %lld: the random model reads %.1fx the trained model's spill bytes "
                       "per step\n", prompts[pi], budgets[i],
                       res[pi][i][0].mib_step > 0 ? res[pi][i][1].mib_step / res[pi][i][0].mib_step : 0.0);
        double l[3] = {0};
        FILE *f = fopen("/proc/loadavg", "r");
        if (f && fscanf(f, "%lf %lf %lf", &l[0], &l[1], &l[2]) == 3)
            printf("load average at end: %.2f %.2f %.2f\n", l[0], l[1], l[2]);
        if (f) fclose(f);
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
