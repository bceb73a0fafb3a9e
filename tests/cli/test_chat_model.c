/* `strata run --chat` with real vocabularies from ../shared: the phi-3 vocabulary carries a
 * chat template (detected, suffix mode: turn 2 prefills only its own text), and the llama-spm
 * vocabulary with --chat-template llama2 exercises the re-tokenizing path of the [INST]
 * families (turn 2 keeps at least the part of turn 1's prompt before the reply). */
#include "../test.h"
#include "chat_test_util.h"

static int make_model(const char *vocab, const char *out) {
    char args[1024], *o = NULL, *e = NULL;
    snprintf(args, sizeof args, "mkmodel -o %s --preset tiny --vocab-from %s --seed 3", out, vocab);
    int rc = chat_run(args, "", &o, &e);
    if (rc) fprintf(stderr, "  mkmodel failed (%d): %s\n", rc, e ? e : "");
    free(o);
    free(e);
    return rc;
}

static int vocab_path(const char *name, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/models/vocab/%s", test_shared_dir(), name);
    if (access(buf, R_OK) == 0) return 0;
    char why[600];
    snprintf(why, sizeof why, "%s not found (needs ../shared)", buf);
    test_skip(why);
    return -1;
}

TEST(test_phi3_detected_suffix_mode) {
    char vocab[512], model[256];
    if (vocab_path("ggml-vocab-phi-3.gguf", vocab, sizeof vocab)) return;
    snprintf(model, sizeof model, "%s/phi3.gguf", chat_dir());
    REQUIRE(make_model(vocab, model) == 0);
    const char *u1 = "What is the capital of France?", *u2 = "And of Spain?";
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m %s --chat -n 10 --temp 0", model);
    char input[256];
    snprintf(input, sizeof input, "%s\n%s\n", u1, u2);
    CHECK_INT(chat_run(args, input, &out, &err), 0);
    REQUIRE(out && err);
    CHECK(strstr(err, "template phi3") != NULL);
    chat_turn t[4];
    int n = chat_parse_turns(err, t, 4);
    CHECK_INT(n, 2);
    if (n != 2) fprintf(stderr, "  stderr:\n%s\n", err);
    REQUIRE(n == 2);
    st_ctx *ctx = NULL;
    st_model *m = NULL;
    st_tok *tok = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    REQUIRE(chat_load_tok(ctx, model, &m, &tok) == 0);
    CHECK_INT(t[0].prefill, chat_turn1(tok, ST_CHAT_PHI3, NULL, u1));
    CHECK_INT(t[1].reused, t[0].prefill + t[0].generated);
    CHECK_INT(t[1].prefill, chat_turn2_suffix(tok, ST_CHAT_PHI3, NULL, u1, u2));
    st_tok_destroy(tok);
    st_model_destroy(m);
    st_ctx_destroy(ctx);
    free(out);
    free(err);
}

TEST(test_llama2_retokenized) {
    char vocab[512], model[256];
    if (vocab_path("ggml-vocab-llama-spm.gguf", vocab, sizeof vocab)) return;
    snprintf(model, sizeof model, "%s/spm.gguf", chat_dir());
    REQUIRE(make_model(vocab, model) == 0);
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m %s --chat --chat-template llama2 -n 8 --temp 0", model);
    CHECK_INT(chat_run(args, "Tell me a story.\nA shorter one.\n", &out, &err), 0);
    REQUIRE(out && err);
    CHECK(strstr(err, "retokenized") != NULL);
    chat_turn t[4];
    int n = chat_parse_turns(err, t, 4);
    CHECK_INT(n, 2);
    if (n != 2) fprintf(stderr, "  stderr:\n%s\n", err);
    REQUIRE(n == 2);
    /* the common prefix reaches at least into turn 1's prompt (its last piece may merge
     * with the reply's first) and never past turn 1's tokens */
    CHECK(t[1].reused >= t[0].prefill - 2);
    CHECK(t[1].reused <= t[0].prefill + t[0].generated);
    CHECK(t[1].prefill > 0);
    free(out);
    free(err);
    chat_cleanup();
}

TEST_MAIN(test_phi3_detected_suffix_mode, test_llama2_retokenized)
