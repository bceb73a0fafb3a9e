/* strata's llama2.c converter against llama.cpp's on the same checkpoint: ../shared's
 * stories260K.bin + tok512.bin converted here hold every tensor, byte for byte, and every
 * token, score and type of stories260K.gguf (which llama.cpp's converter made), and the
 * same shape keys. */
#include "strata/gguf.h"
#include "strata/model.h"
#include "../test.h"

#include <unistd.h>

static int same_arr(st_gguf *a, st_gguf *b, const char *key) {
    st_gguf_vtype ta, tb;
    uint64_t na, nb;
    const void *da, *db;
    if (st_gguf_get_arr(a, key, &ta, &na, &da) || st_gguf_get_arr(b, key, &tb, &nb, &db) || ta != tb || na != nb)
        return 0;
    if (ta != ST_GGUF_STRING) return !memcmp(da, db, na * st_gguf_vtype_size(ta));
    for (uint64_t i = 0; i < na; i++) {
        const char *sa, *sb;
        size_t la, lb;
        if (st_gguf_get_arr_str(a, key, i, &sa, &la) || st_gguf_get_arr_str(b, key, i, &sb, &lb) || la != lb ||
            memcmp(sa, sb, la)) {
            fprintf(stderr, "  %s[%llu] differs\n", key, (unsigned long long)i);
            return 0;
        }
    }
    return 1;
}

TEST(test_stories260K_as_llama_cpp_converts_it) {
    char bin[1024], tok[1024], ref[1024], out[1100];
    snprintf(bin, sizeof bin, "%s/models/stories260K.bin", test_shared_dir());
    snprintf(tok, sizeof tok, "%s/models/tok512.bin", test_shared_dir());
    snprintf(ref, sizeof ref, "%s/models/stories260K.gguf", test_shared_dir());
    if (access(bin, R_OK) || access(tok, R_OK) || access(ref, R_OK)) {
        test_skip("../shared/models/stories260K.{bin,gguf} or tok512.bin not found");
        return;
    }
    snprintf(out, sizeof out, "/tmp/strata-test-llama2c-%d.gguf", (int)getpid());
    st_ctx *ctx = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_llama2c_params p = {.type = ST_TYPE_F32};
    REQUIRE(st_llama2c_convert(ctx, bin, tok, &p, out) == 0);
    st_gguf *a = NULL, *b = NULL;
    REQUIRE(st_gguf_open(ctx, out, &a) == 0);
    REQUIRE(st_gguf_open(ctx, ref, &b) == 0);
    CHECK_INT(st_gguf_n_tensors(a), st_gguf_n_tensors(b));
    for (int64_t i = 0; i < st_gguf_n_tensors(b); i++) {
        const st_gguf_tensor *tb = st_gguf_tensor_at(b, i), *ta = st_gguf_find_tensor(a, tb->name);
        if (!ta || ta->type != tb->type || memcmp(ta->ne, tb->ne, sizeof ta->ne) || ta->nbytes != tb->nbytes ||
            memcmp(ta->data, tb->data, tb->nbytes)) {
            fprintf(stderr, "  tensor %s differs\n", tb->name);
            CHECK(0);
        }
    }
    CHECK(same_arr(a, b, "tokenizer.ggml.tokens"));
    CHECK(same_arr(a, b, "tokenizer.ggml.scores"));
    CHECK(same_arr(a, b, "tokenizer.ggml.token_type"));
    static const char *const keys[] = {"llama.context_length", "llama.embedding_length", "llama.feed_forward_length",
                                       "llama.attention.head_count", "llama.attention.head_count_kv",
                                       "llama.block_count", "llama.rope.dimension_count",
                                       "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        uint32_t va = 0, vb = 1;
        CHECK(st_gguf_get_u32(a, keys[i], &va) == 0 && st_gguf_get_u32(b, keys[i], &vb) == 0 && va == vb);
    }
    float ea = 0, eb = 1;
    CHECK(st_gguf_get_f32(a, "llama.attention.layer_norm_rms_epsilon", &ea) == 0 &&
          st_gguf_get_f32(b, "llama.attention.layer_norm_rms_epsilon", &eb) == 0 && ea == eb);
    st_gguf_close(a);
    st_gguf_close(b);
    /* a missing tokenizer is named and leaves no file */
    unlink(out);
    CHECK(st_llama2c_convert(ctx, bin, "/nonexistent/tok.bin", &p, out) < 0);
    CHECK(strstr(st_ctx_error(ctx), "/nonexistent/tok.bin") != NULL);
    CHECK(access(out, F_OK) != 0);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_stories260K_as_llama_cpp_converts_it)
