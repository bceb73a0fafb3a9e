/* strata perplexity: chunks of CTX tokens as llama.cpp's perplexity tool cuts them (the text
 * tokenized once with BOS, each chunk's first token replaced by BOS, the second half of each
 * chunk scored), printing the running estimate after every chunk and the final value. */
#include "cli/cli_quest.h"
#include "cli/kv_flags.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/ppl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: strata perplexity -m FILE -f TEXT [-c CTX] [-t THREADS] [-b N_BATCH] [--chunks N]\n"
               "                         [--kv-page P] [--kv-type f16|bf16|f32|q8_0] [--kv-budget N ...]\n"
               "                         [--no-escape] [--mmap | --no-mmap]\n"
               "-t: default $STRATA_THREADS, else the CPUs this process may run on.\n"
               "TEXT is read as llama.cpp's tools read -f: one trailing newline dropped, and the escapes\n"
               "\\n \\r \\t \\' \\\" \\\\ \\xHH turned into the bytes they stand for unless --no-escape.\n"
               "With any --kv-* Quest flag every token is run as a decode step (token by token), so it\n"
               "is scored with exactly the attention sparse decode gives it (--kv-budget 0: dense).\n"
               ST_CLI_MMAP_USAGE ST_CLI_QUEST_USAGE ST_CLI_KV_FLAGS_USAGE);
}

int st_cmd_perplexity(int argc, char **argv) {
    const char *model = NULL, *file = NULL;
    long long n_ctx = 512, n_threads = 0, n_batch = 0, kv_page = 16, max_chunks = -1;
    int escape = 1, mmap = 0;
    st_type kv_type = ST_TYPE_F16;
    st_cli_quest quest;
    st_cli_quest_init(&quest);
    st_cli_kv_flags tier;
    st_cli_kv_flags_init(&tier);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL, qa = st_cli_quest_arg(&quest, a, v), ta = qa ? 0 : st_cli_kv_flags_arg(&tier, a, v);
        if (qa) {
            ok = qa > 0;
        } else if (ta == 2) {
            continue; /* --verbose: no value */
        } else if (ta) {
            ok = ta > 0;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--no-escape") || !strcmp(a, "-e") || !strcmp(a, "--escape")) {
            escape = !strcmp(a, "--no-escape") ? 0 : 1;
            continue; /* no value */
        } else if (!strcmp(a, "--mmap") || !strcmp(a, "--no-mmap")) {
            mmap = !strcmp(a, "--mmap") ? 1 : -1;
            continue; /* no value */
        } else if (!strcmp(a, "-m")) model = v;
        else if (!strcmp(a, "-f")) file = v;
        else if (!strcmp(a, "-c")) ok = !st_cli_int(v, 4, 1 << 24, &n_ctx);
        else if (!strcmp(a, "-t")) ok = !st_cli_int(v, 1, ST_THREADS_MAX, &n_threads);
        else if (!strcmp(a, "-b")) ok = !st_cli_int(v, 1, 1 << 16, &n_batch);
        else if (!strcmp(a, "--chunks")) ok = !st_cli_int(v, 1, 1 << 30, &max_chunks);
        else if (!strcmp(a, "--kv-page")) ok = !st_cli_int(v, 8, 256, &kv_page) && !(kv_page & (kv_page - 1));
        else if (!strcmp(a, "--kv-type")) ok = v && !st_cli_kv_type(v, &kv_type);
        else {
            fprintf(stderr, "strata perplexity: unknown option '%s' (strata perplexity --help lists them)\n", a);
            return ST_EXIT_INPUT;
        }
        if (!ok) {
            fprintf(stderr, "strata perplexity: bad value '%s' for %s\n", v ? v : "(missing)", a);
            return ST_EXIT_INPUT;
        }
        i++;
    }
    if (!model || !file) {
        fprintf(stderr, "strata perplexity: -m MODEL and -f TEXT are required (strata perplexity --help)\n");
        return ST_EXIT_INPUT;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = st_cli_read_file(file, &text, &len);
    if (rc) {
        fprintf(stderr, "strata perplexity: cannot read %s: %s\n", file, st_strerror(rc));
        return st_cli_exit_code(rc);
    }
    len = st_cli_prompt_text(text, len, 1, escape);
    st_cli_session_opts so = {.model_path = model, .n_threads = (int)n_threads, .n_ctx = (int32_t)n_ctx,
                              .n_seqs = 1, .page_size = (int)kv_page, .kv_type = kv_type,
                              .n_batch = (int32_t)(n_batch ? n_batch : n_ctx), .need_tok = 1,
                              .kv_flags = &tier, .mmap = mmap};
    st_cli_session s;
    if ((rc = st_cli_session_open("perplexity", &so, &s))) {
        free(text);
        return rc;
    }
    if (quest.given && (rc = st_cli_quest_apply(&quest, s.runner))) {
        fprintf(stderr, "strata perplexity: %s\n", st_ctx_error(s.ctx));
        free(text);
        st_cli_session_close(&s);
        return st_cli_exit_code(rc);
    }
    int32_t *tok = NULL;
    int n_tok = 0;
    rc = st_tok_encode_alloc(s.tok, text, len, true, false, &tok, &n_tok);
    free(text);
    const int nv = st_model_get_hparams(s.model)->n_vocab, C = (int)n_ctx, first = C / 2;
    int n_chunk = rc ? 0 : n_tok / C;
    if (max_chunks > 0 && n_chunk > max_chunks) n_chunk = (int)max_chunks;
    if (!rc && n_tok < 2 * C) {
        fprintf(stderr, "strata perplexity: %d tokens; need at least 2 * %d\n", n_tok, C);
        free(tok);
        st_cli_session_close(&s);
        return ST_EXIT_INPUT;
    }
    float *logits = malloc((size_t)C * nv * sizeof(float));
    int32_t *chunk = malloc((size_t)C * sizeof *chunk);
    uint8_t *want = malloc((size_t)C);
    if (!rc && (!logits || !chunk || !want)) rc = ST_E_NOMEM;
    fprintf(stderr, "perplexity: %d tokens, %d chunks of %d, scoring the last %d of each\n", n_tok, n_chunk, C,
            C - 1 - first);
    st_ppl_acc acc = {0};
    double t0 = st_time_now();
    int32_t bos = st_tok_bos(s.tok);
    for (int c = 0; c < n_chunk && !rc; c++) {
        memcpy(chunk, tok + (size_t)c * C, (size_t)C * sizeof *chunk);
        if (st_tok_add_bos(s.tok) && bos >= 0) chunk[0] = bos;
        memset(want, 0, (size_t)C);
        memset(want + first, 1, (size_t)(C - first));
        st_kv_seq_id seq;
        if ((rc = st_kv_seq_create(s.kv, &seq))) break;
        if (quest.given) { /* decode steps: the first `first` tokens need no logits */
            const uint8_t no = 0;
            for (int j = 0; j < C && !rc; j++) {
                st_batch b1 = {.n_tokens = 1, .tokens = chunk + j, .seq_single = seq,
                               .want_logits = j >= first ? NULL : &no};
                rc = st_runner_forward(s.runner, &b1, j >= first ? logits + (size_t)(j - first) * nv : NULL);
            }
        } else {
            st_batch b = {.n_tokens = C, .tokens = chunk, .seq_single = seq, .want_logits = want};
            rc = st_runner_forward(s.runner, &b, logits);
        }
        st_kv_seq_free(s.kv, seq);
        for (int j = 0; j < C - 1 - first && !rc; j++)
            st_ppl_add(&acc, st_ppl_nll(logits + (size_t)j * nv, nv, tok[(size_t)c * C + first + 1 + j]));
        if (!rc) printf("[%d]%.4f%s", c + 1, st_ppl_value(&acc), c + 1 < n_chunk ? "," : "\n");
        fflush(stdout);
    }
    if (!rc) {
        printf("Final estimate: PPL = %.4f +/- %.5f\n", st_ppl_value(&acc), st_ppl_uncertainty(&acc));
        fprintf(stderr, "%lld tokens scored in %.2f s (%.1f tok/s evaluated)\n", acc.count, st_time_now() - t0,
                (double)n_chunk * C / (st_time_now() - t0));
        rc = st_cli_quest_print(&quest, s.runner, stderr);
    } else {
        fprintf(stderr, "strata perplexity: %s\n", *st_ctx_error(s.ctx) ? st_ctx_error(s.ctx) : st_strerror(rc));
    }
    free(logits), free(chunk), free(want), free(tok);
    st_cli_session_close(&s);
    return rc ? st_cli_exit_code(rc) : 0;
}
