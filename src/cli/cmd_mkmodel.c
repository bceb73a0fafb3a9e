/* strata mkmodel: write a llama-family GGUF with random weights for a given shape. */
#include "cli/cli_util.h"
#include "cli/commands.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata mkmodel -o OUT.gguf [--preset 1b|small|tiny] [--arch llama|qwen2|qwen3]\n"
            "                      [--layers N] [--dim D] [--heads H] [--kv-heads K] [--ff F] [--vocab V]\n"
            "                      [--rope-base B] [--ctx C] [--type T] [--tied] [--vocab-from X.gguf]\n"
            "                      [--seed S] [-t THREADS]\n"
            "T: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m (default q8_0).\n"
            "q4_k_m mimics llama.cpp's mix: Q6_K for output.weight and for attn_v / ffn_down of the\n"
            "layers llama.cpp's use_more_bits picks (first and last eighth, every third between);\n"
            "Q4_K elsewhere, token_embd included. Weights N(0, 0.02), norms 1; deterministic from --seed.\n"
            "Without --vocab-from the tokenizer is a built-in byte-level SPM vocabulary (vocab >= 259).\n"
            "-t: default $STRATA_THREADS, else the CPUs this process may run on.\n");
}

int st_cmd_mkmodel(int argc, char **argv) {
    st_synth_params p = st_synth_default_params();
    const char *out = NULL;
    long long v, n_threads = 0;
    double d;
    int vocab_set = 0;
    /* presets first, so explicit options override them wherever they appear */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--preset") && st_synth_preset(argv[i + 1], &p)) {
            fprintf(stderr, "strata mkmodel: unknown preset '%s' (1b, small, tiny)\n", argv[i + 1]);
            return ST_EXIT_INPUT;
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = val != NULL, takes = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tied")) {
            p.tied_output = 1, takes = 0, ok = 1;
        } else if (!strcmp(a, "-o")) out = val;
        else if (!strcmp(a, "--preset")) ;
        else if (!strcmp(a, "--arch")) {
            int ar = val ? st_arch_parse(val) : -1;
            ok = ar >= 0;
            if (ok) p.arch = (st_arch)ar;
        } else if (!strcmp(a, "--type")) ok = val && !st_synth_parse_type(val, &p);
        else if (!strcmp(a, "--vocab-from")) p.vocab_from = val;
        else if (!strcmp(a, "--rope-base")) {
            ok = !st_cli_float(val, 1e-3, 1e12, &d);
            p.rope_base = (float)d;
        } else if (!strcmp(a, "--seed")) {
            ok = !st_cli_int(val, 0, (long long)(~0ull >> 1), &v);
            p.seed = (uint64_t)v;
        } else if (!strcmp(a, "-t")) ok = !st_cli_int(val, 1, ST_THREADS_MAX, &n_threads);
        else {
            int32_t *dst = !strcmp(a, "--layers") ? &p.n_layer : !strcmp(a, "--dim") ? &p.n_embd
                         : !strcmp(a, "--heads") ? &p.n_head : !strcmp(a, "--kv-heads") ? &p.n_head_kv
                         : !strcmp(a, "--ff") ? &p.n_ff : !strcmp(a, "--vocab") ? &p.n_vocab
                         : !strcmp(a, "--ctx") ? &p.n_ctx : NULL;
            if (!dst) {
                fprintf(stderr, "strata mkmodel: unknown option '%s' (strata mkmodel --help lists them)\n", a);
                return ST_EXIT_INPUT;
            }
            ok = !st_cli_int(val, 1, 1 << 24, &v);
            *dst = (int32_t)v;
            if (dst == &p.n_vocab) vocab_set = 1;
        }
        if (!ok) {
            fprintf(stderr, "strata mkmodel: bad value '%s' for %s\n", val ? val : "(missing)", a);
            return ST_EXIT_INPUT;
        }
        i += takes;
    }
    if (!out) {
        fprintf(stderr, "strata mkmodel: -o OUT.gguf is required (strata mkmodel --help)\n");
        return ST_EXIT_INPUT;
    }
    if (p.vocab_from && vocab_set) {
        fprintf(stderr, "strata mkmodel: --vocab and --vocab-from exclude each other (the vocabulary file "
                        "sets the size)\n");
        return ST_EXIT_INPUT;
    }
    st_ctx *ctx = NULL;
    int rc = st_cli_ctx_create("mkmodel", (int)n_threads, &ctx);
    if (rc) return rc;
    const double t0 = st_time_now();
    rc = st_synth_write(ctx, &p, out);
    return st_cli_report_written(ctx, "mkmodel", rc, out, t0);
}
