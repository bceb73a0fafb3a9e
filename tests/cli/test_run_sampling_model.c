/* `strata run` sampling end to end on ../shared/models/stories260K.gguf (label `model`):
 * --temp 0.8 --top-k 40 --top-p 0.9 --seed 42 -n 32 writes the same text twice, seed 43 (on
 * this model and prompt, checked to differ) another text, and --seed -1 runs and prints the
 * seed it drew on stderr, which repeats its text. --ignore-eos: on a copy of the model whose
 * EOS is ",", greedy stops at its first token without it and writes -n tokens, none of them
 * ",", with it. */
#include "../test.h"
#include "chat_test_util.h"
#include "strata/gguf.h"

#define SAMPLING "--temp 0.8 --top-k 40 --top-p 0.9 -n 32"

static char model[1024];

static int have_model(void) { return chat_stories_model(model, sizeof model); }

/* stdout of `run -m stories260K SAMPLING --seed SEED`; stderr into *err when err. */
static char *gen(const char *seed, char **err) {
    char args[2048], *out = NULL, *e = NULL;
    snprintf(args, sizeof args, "run -m %s " SAMPLING " --seed %s", model, seed);
    int rc = chat_run(args, "", &out, &e);
    CHECK_INT(rc, 0);
    if (rc) fprintf(stderr, "  run --seed %s: exit %d: %s\n", seed, rc, e ? e : "");
    if (err) *err = e;
    else free(e);
    return out;
}

TEST(test_seeded_sampling_reproducible) {
    atexit(chat_cleanup);
    if (!have_model()) return;
    char *a = gen("42", NULL), *b = gen("42", NULL), *c = gen("43", NULL);
    REQUIRE(a && b && c);
    CHECK(strlen(a) > 32); /* 32 tokens of story, not an empty line */
    CHECK_STR(b, a);
    CHECK(strcmp(c, a) != 0);
    fprintf(stderr, "  seed 42: %s  seed 43: %s", a, c);
    free(a), free(b), free(c);
}

TEST(test_random_seed_printed) {
    if (!have_model()) return;
    char *err = NULL, *out = gen("-1", &err);
    REQUIRE(out && err);
    const char *p = strstr(err, "sampler seed: ");
    CHECK(p != NULL);
    REQUIRE(p);
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", strtoull(p + strlen("sampler seed: "), NULL, 10));
    char *again = gen(seed, NULL);
    CHECK(again != NULL);
    if (again) CHECK_STR(again, out);
    free(out), free(err), free(again);
}

/* stories260K with tokenizer.ggml.eos_token_id set to the id of ",": path in the test dir. */
static const char *comma_eos_model(void) {
    static char path[256];
    snprintf(path, sizeof path, "%s/comma-eos.gguf", chat_dir());
    st_ctx *ctx = NULL;
    st_gguf *g = NULL;
    st_gguf_writer *w = NULL;
    st_tok *tok = NULL;
    int rc = st_ctx_create(NULL, &ctx);
    if (!rc) rc = st_gguf_open(ctx, model, &g);
    if (!rc) rc = st_tok_load(ctx, g, NULL, &tok);
    const int32_t comma = rc ? -1 : st_tok_find(tok, ",", 1);
    if (!rc) rc = comma < 0 ? ST_E_NOT_FOUND : st_gguf_writer_create(ctx, &w);
    for (int64_t i = 0; !rc && i < st_gguf_n_kv(g); i++) rc = st_gguf_writer_copy_kv(w, g, i);
    if (!rc) rc = st_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)comma);
    for (int64_t i = 0; !rc && i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        rc = st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    if (!rc) rc = st_gguf_writer_write(w, path);
    if (rc) fprintf(stderr, "  comma_eos_model: %s\n", st_ctx_error(ctx));
    st_gguf_writer_destroy(w);
    st_tok_destroy(tok);
    st_gguf_close(g);
    st_ctx_destroy(ctx);
    return rc ? NULL : path;
}

TEST(test_ignore_eos) {
    if (!have_model()) return;
    const char *m = comma_eos_model();
    REQUIRE(m);
    char args[2048], *out = NULL, *err = NULL;
    /* greedy stories260K: "Once upon a time, there was ..." */
    snprintf(args, sizeof args, "run -m %s -p 'Once upon a time' --temp 0 -n 20", m);
    CHECK_INT(chat_run(args, "", &out, &err), 0);
    CHECK(err && strstr(err, "generated tokens: 1 ") && strstr(err, "stopped: end of text"));
    free(out), free(err);
    snprintf(args, sizeof args, "run -m %s -p 'Once upon a time' --temp 0 -n 20 --ignore-eos", m);
    CHECK_INT(chat_run(args, "", &out, &err), 0);
    CHECK(err && strstr(err, "generated tokens: 20 ") && strstr(err, "stopped: -n reached"));
    CHECK(out && strlen(out) > 20 && !strchr(out, ','));
    free(out), free(err);
}

TEST_MAIN(test_ignore_eos, test_seeded_sampling_reproducible, test_random_seed_printed)
