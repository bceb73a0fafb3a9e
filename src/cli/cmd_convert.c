/* strata convert: another project's model format written as GGUF (llama2.c's checkpoints). */
#include "cli/cli_util.h"
#include "cli/commands.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata convert --llama2c MODEL.bin --vocab TOKENIZER.bin -o OUT.gguf [--type T] [--name NAME]\n"
            "A llama2.c checkpoint (run.c's legacy format, e.g. stories15M.bin) and its tokenizer.bin as a\n"
            "llama GGUF that every strata command runs. T: f32 (default: as stored), f16, bf16, q8_0, q4_0,\n"
            "q4_1, q5_0, q5_1, q2_k ... q6_k: the matrices' type (norms stay f32). NAME: general.name.\n");
}

int st_cmd_convert(int argc, char **argv) {
    const char *model = NULL, *vocab = NULL, *out = NULL, *type = "f32";
    st_llama2c_params p = {.type = ST_TYPE_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        const char **dst = !strcmp(a, "--llama2c") ? &model : !strcmp(a, "--vocab") ? &vocab
                         : !strcmp(a, "-o") ? &out : !strcmp(a, "--type") ? &type : !strcmp(a, "--name") ? &p.name
                         : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        }
        if (!dst) {
            fprintf(stderr, "strata convert: unknown option '%s' (strata convert --help lists them)\n", a);
            return ST_EXIT_INPUT;
        }
        if (!val) {
            fprintf(stderr, "strata convert: %s needs a value\n", a);
            return ST_EXIT_INPUT;
        }
        *dst = val;
        i++;
    }
    if (!model || !vocab || !out) {
        fprintf(stderr, "strata convert: --llama2c MODEL.bin, --vocab TOKENIZER.bin and -o OUT.gguf are required "
                        "(strata convert --help)\n");
        return ST_EXIT_INPUT;
    }
    st_synth_params tp = st_synth_default_params();
    if (st_synth_parse_type(type, &tp) || tp.q4_k_m) {
        fprintf(stderr, "strata convert: unknown --type '%s' (strata convert --help lists them)\n", type);
        return ST_EXIT_INPUT;
    }
    p.type = tp.type;
    st_ctx *ctx = NULL;
    int rc = st_cli_ctx_create("convert", 1, &ctx);
    if (rc) return rc;
    const double t0 = st_time_now();
    rc = st_llama2c_convert(ctx, model, vocab, &p, out);
    return st_cli_report_written(ctx, "convert", rc, out, t0);
}
