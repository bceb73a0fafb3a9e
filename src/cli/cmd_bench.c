/* strata bench: prefill and decode speed of one model (a file, or a synthetic preset made in
 * memory), with the bandwidth roofline probed in the same run. bench/e2e runs the set of shapes
 * llama.cpp was measured on. */
#include "cli/cli_quest.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "core/membw.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: strata bench [-m FILE | --preset small|1b|tiny [--type T]] [-p N_PROMPT] [-n N_GEN]\n"
               "                    [-t THREADS] [-b N_BATCH] [--kv-type f16|bf16|f32|q8_0] [--kv-page P]\n"
               "Prints prefill tok/s (N_PROMPT tokens, default 512, in batches of N_BATCH, default 512),\n"
               "decode tok/s (N_GEN steps, default 128, after the prompt: -p sets the depth decode runs\n"
               "at, as llama-bench's -d; the forward calls are timed, not the choice of each next\n"
               "token, as llama-bench) and decode's fraction of the read-bandwidth roofline. The\n"
               "context is N_PROMPT + N_GEN (a model file's own limit applies). THREADS: default\n"
               "$STRATA_THREADS, else the CPUs this process may run on.\n" ST_CLI_QUEST_USAGE);
}

/* The next token of the timed decode loop: the first largest logit, as --temp 0 picks it. */
static int32_t greedy(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

int st_cmd_bench(int argc, char **argv) {
    const char *model = NULL, *preset = "small";
    st_synth_params sp = st_synth_default_params();
    long long n_pp = 512, n_tg = 128, n_threads = 0, n_batch = 512, kv_page = 16;
    st_type kv_type = ST_TYPE_F16;
    st_cli_quest quest;
    st_cli_quest_init(&quest);
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "--type")) ok = v && !st_synth_parse_type(v, &sp);
        else if (!strcmp(a, "-p")) ok = !st_cli_int(v, 1, 1 << 20, &n_pp);
        else if (!strcmp(a, "-n")) ok = !st_cli_int(v, 1, 1 << 20, &n_tg);
        else if (!strcmp(a, "-t")) ok = !st_cli_int(v, 1, ST_THREADS_MAX, &n_threads);
        else if (!strcmp(a, "-b")) ok = !st_cli_int(v, 1, 1 << 16, &n_batch);
        else if (!strcmp(a, "--kv-page")) ok = !st_cli_int(v, 8, 256, &kv_page) && !(kv_page & (kv_page - 1));
        else if (!strcmp(a, "--kv-type")) ok = v && !st_cli_kv_type(v, &kv_type);
        else if ((ok = st_cli_quest_arg(&quest, a, v)) != 0) ok = ok > 0;
        else {
            fprintf(stderr, "strata bench: unknown option '%s' (strata bench --help lists them)\n", a);
            return ST_EXIT_INPUT;
        }
        if (!ok) {
            fprintf(stderr, "strata bench: bad value '%s' for %s\n", v ? v : "(missing)", a);
            return ST_EXIT_INPUT;
        }
    }
    if (!model && st_synth_preset(preset, &sp)) {
        fprintf(stderr, "strata bench: unknown preset '%s' (1b, small, tiny)\n", preset);
        return ST_EXIT_INPUT;
    }
    if (n_batch > n_pp) n_batch = n_pp;
    /* the prompt, the decode steps and the token the last step samples; a preset is made
     * with exactly that context, a model file must allow it */
    sp.n_ctx = (int32_t)(n_pp + n_tg + 1);
    st_cli_session_opts so = {.model_path = model, .synth = &sp, .n_threads = (int)n_threads,
                              .n_ctx = sp.n_ctx, .n_seqs = 1, .page_size = (int)kv_page, .kv_type = kv_type,
                              .n_batch = (int32_t)n_batch};
    st_cli_session s;
    int rc = st_cli_session_open("bench", &so, &s);
    if (rc) return rc;
    const st_model_hparams *hp = st_model_get_hparams(s.model);
    if (n_pp + n_tg + 1 > s.n_ctx) {
        fprintf(stderr, "strata bench: %lld + %lld tokens exceed the context of %d\n", n_pp, n_tg, s.n_ctx);
        st_cli_session_close(&s);
        return ST_EXIT_INPUT;
    }
    if (quest.given && (rc = st_cli_quest_apply(&quest, s.runner))) {
        fprintf(stderr, "strata bench: %s\n", st_ctx_error(s.ctx));
        st_cli_session_close(&s);
        return st_cli_exit_code(rc);
    }
    double bw = st_membw_read(st_ctx_threadpool(s.ctx), 0, 3);
    int32_t *tok = malloc((size_t)n_pp * sizeof *tok);
    float *lg = malloc((size_t)hp->n_vocab * sizeof(float));
    rc = !tok || !lg ? ST_E_NOMEM : 0;
    for (long long i = 0; i < n_pp && !rc; i++) tok[i] = (int32_t)((i * 7919 + 13) % hp->n_vocab);
    st_kv_seq_id seq = 0;
    if (!rc) rc = st_kv_seq_create(s.kv, &seq);
    double t0 = st_time_now();
    for (long long i = 0; i < n_pp && !rc; i += n_batch) {
        st_batch b = {.n_tokens = (int32_t)(n_pp - i < n_batch ? n_pp - i : n_batch), .tokens = tok + i,
                      .seq_single = seq};
        rc = st_runner_forward(s.runner, &b, lg);
    }
    double t_pp = st_time_now() - t0;
    int32_t t = 0;
    st_batch d = {.n_tokens = 1, .tokens = &t, .seq_single = seq};
    double t_tg = 0; /* the forward calls only: choosing the next token is not timed (llama-bench
                        samples nothing) */
    for (long long i = 0; i < n_tg && !rc; i++) {
        t = greedy(lg, hp->n_vocab);
        t0 = st_time_now();
        rc = st_runner_forward(s.runner, &d, lg);
        t_tg += st_time_now() - t0;
    }
    if (rc) {
        const char *e = st_ctx_error(s.ctx);
        fprintf(stderr, "strata bench: %s\n", *e ? e : st_strerror(rc));
    } else {
        /* KV read per step: n_pp + n_tg/2 positions on average, every layer's K and V */
        const st_kv_geometry *g = st_kv_get_geometry(s.kv);
        double kv = (n_pp + n_tg / 2.0) * hp->n_layer * 2.0 * hp->n_head_kv * hp->head_dim * (double)g->elem_bytes;
        double bytes = (double)st_model_weight_bytes(s.model) + kv, tg = n_tg / t_tg;
        printf("%s\nthreads %lld, read bandwidth %.1f GB/s\npp%lld %.1f tok/s\ntg%lld %.1f tok/s "
               "(%.0f MB/token at depth %lld: %.0f%% of roofline)\n",
               st_model_desc(s.model), (long long)st_threadpool_n_threads(st_ctx_threadpool(s.ctx)), bw, n_pp, n_pp / t_pp, n_tg, tg, bytes / 1e6, n_pp,
               100 * bytes * tg / (bw * 1e9));
        rc = st_cli_quest_print(&quest, s.runner, stderr);
    }
    free(tok);
    free(lg);
    st_cli_session_close(&s);
    return rc ? st_cli_exit_code(rc) : 0;
}
