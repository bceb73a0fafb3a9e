/* bench/tokenize: tokenize 1 MB of English text (../shared/peers/stories-sampled.txt repeated)
 * with BPE and SPM vocabularies from ../shared/models/vocab; prints seconds and MB/s (best of
 * 3) and the decode speed. Target: a BPE vocabulary under 1 s per MB.
 * usage: tokenize [MB] [SHARED_DIR]   (SHARED_DIR: default $STRATA_SHARED, else ../shared) */
#include "bench_common.h"
#include "strata/gguf.h"
#include "strata/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    double mb = argc > 1 ? atof(argv[1]) : 1.0;
    const char *shared = argc > 2 ? argv[2] : bench_shared_dir();
    char path[1024];
    snprintf(path, sizeof path, "%s/peers/stories-sampled.txt", shared);
    size_t sn = 0;
    char *sample = bench_read_file(path, &sn);
    if (!sample || !sn) {
        fprintf(stderr, "tokenize bench: SKIPPED: %s is absent\n", path);
        return 0;
    }
    size_t len = (size_t)(mb * 1e6);
    char *text = malloc(len);
    for (size_t k = 0; k < len; k += sn) memcpy(text + k, sample, k + sn <= len ? sn : len - k);
    st_ctx *ctx = NULL;
    st_ctx_create(NULL, &ctx);
    static const char *vocabs[] = {"gpt-2", "deepseek-llm", "starcoder", "llama-spm"};
    printf("%-14s %-5s %10s %9s %9s %10s %10s\n", "vocab", "kind", "bytes", "tokens", "encode_s", "enc_MB/s", "dec_MB/s");
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++) {
        snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-%s.gguf", shared, vocabs[v]);
        st_gguf *g = NULL;
        st_tok *tok = NULL;
        if (st_gguf_open(ctx, path, &g) || st_tok_load(ctx, g, NULL, &tok)) {
            printf("%-14s SKIPPED (%s)\n", vocabs[v], st_ctx_error(ctx));
            st_gguf_close(g);
            continue;
        }
        st_gguf_close(g);
        double best = 1e30, best_dec = 1e30;
        int n = 0;
        for (int r = 0; r < 3; r++) {
            int32_t *ids = NULL;
            double t0 = st_time_now();
            int rc = st_tok_encode_alloc(tok, text, len, false, false, &ids, &n);
            double t1 = st_time_now();
            if (rc) {
                printf("%-14s encode failed: %s\n", vocabs[v], st_errname(rc));
                break;
            }
            if (t1 - t0 < best) best = t1 - t0;
            char *out = malloc(len * 2 + 64);
            size_t nd = 0;
            t0 = st_time_now();
            st_tok_decode(tok, ids, n, 0, out, len * 2 + 64, &nd);
            t1 = st_time_now();
            if (t1 - t0 < best_dec) best_dec = t1 - t0;
            free(out);
            free(ids);
        }
        printf("%-14s %-5s %10zu %9d %9.3f %10.2f %10.1f%s\n", vocabs[v],
               st_tok_get_kind(tok) == ST_TOK_BPE ? "BPE" : "SPM", len, n, best, len / best / 1e6,
               len / best_dec / 1e6,
               st_tok_get_kind(tok) == ST_TOK_BPE ? (best * 1e6 / len < 1.0 ? "  (target <1 s/MB: met)"
                                                                          : "  (target <1 s/MB: MISSED)")
                                                  : "");
        st_tok_destroy(tok);
    }
    st_ctx_destroy(ctx);
    free(text);
    free(sample);
    return 0;
}
