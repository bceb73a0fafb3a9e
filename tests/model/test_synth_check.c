/* st_synth_check, which keeps bench/e2e from measuring a cached model of another shape or
 * type: a synthetic model passes against its own parameters (whatever the seed) and fails,
 * naming the key or tensor, against parameters that differ in one thing. */
#include "strata/model.h"
#include "../test.h"

static st_synth_params params(void) {
    st_synth_params p = st_synth_default_params();
    p.n_layer = 3, p.n_embd = 256, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 512, p.n_vocab = 300, p.n_ctx = 128;
    return p;
}

TEST(test_synth_check) {
    st_ctx *ctx = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    for (int mix = 0; mix < 2; mix++) {
        st_synth_params p = params();
        REQUIRE(st_synth_parse_type(mix ? "q4_k_m" : "q8_0", &p) == 0);
        void *buf = NULL;
        size_t n = 0;
        st_gguf *g = NULL;
        REQUIRE(st_synth_write_memory(ctx, &p, &buf, &n) == 0);
        REQUIRE(st_gguf_open_memory(ctx, buf, n, "made", &g) == 0);
        CHECK_OK(st_synth_check(ctx, &p, g));
        st_synth_params q = p;
        q.seed = 99; /* values are not compared */
        CHECK_OK(st_synth_check(ctx, &q, g));
        struct {
            const char *what, *needle;
            st_synth_params q;
        } cases[] = {
            {"layers", "llama.block_count", p}, {"dim", "llama.embedding_length", p},
            {"heads", "llama.attention.head_count", p}, {"kv heads", "llama.attention.head_count_kv", p},
            {"ff", "llama.feed_forward_length", p}, {"vocab", "vocabulary has 300 tokens", p},
            {"type", "token_embd.weight", p}, {"tied", "tensors", p},
        };
        cases[0].q.n_layer = 4, cases[1].q.n_embd = 512, cases[2].q.n_head = 8, cases[3].q.n_head_kv = 1;
        cases[4].q.n_ff = 768, cases[5].q.n_vocab = 320, cases[7].q.tied_output = 1;
        /* the Q4_K_M mix against plain Q4_K differs first in the output (Q6_K in the mix);
         * plain q8_0 against q4_0 in the embeddings */
        if (mix) cases[6].q.q4_k_m = 0, cases[6].needle = "output.weight";
        else REQUIRE(st_synth_parse_type("q4_0", &cases[6].q) == 0);
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            int rc = st_synth_check(ctx, &cases[i].q, g);
            CHECK_INT(rc, ST_E_FORMAT);
            const char *msg = st_ctx_error(ctx);
            if (!strstr(msg, cases[i].needle))
                fprintf(stderr, "  %s (%s): '%s' lacks '%s'\n", cases[i].what, mix ? "q4_k_m" : "q8_0", msg,
                        cases[i].needle);
            CHECK(strstr(msg, cases[i].needle) != NULL);
        }
        st_gguf_close(g);
        free(buf);
    }
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_synth_check)
