/* The reader on real files from ../shared: stories260K.gguf (metadata, tensor table and
 * data values known from an independent parse) and every vocab GGUF; each one copied
 * through the writer comes out byte-identical; `strata inspect` reads them all.
 * Skips (exit 77: ctest's Skipped) when ../shared is absent. */
#include "strata/gguf.h"
#include "../test.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

static st_ctx *new_ctx(void) {
    st_ctx_params p = st_ctx_default_params();
    p.n_threads = 1;
    st_ctx *ctx = NULL;
    if (st_ctx_create(&p, &ctx)) abort();
    return ctx;
}

static float f32_at(const st_gguf_tensor *t, int64_t i) {
    float v;
    memcpy(&v, (const uint8_t *)t->data + 4 * i, 4);
    return v;
}

/* Every key and tensor of g copied into a writer gives back the file's exact bytes
 * (when the file was laid out as our writer lays files out, as these are). */
static void check_copy_identical(st_ctx *ctx, st_gguf *g, const char *path) {
    st_gguf_writer *w = NULL;
    CHECK_OK(st_gguf_writer_create(ctx, &w));
    for (int64_t i = 0; i < st_gguf_n_kv(g); i++) CHECK_OK(st_gguf_writer_copy_kv(w, g, i));
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, i);
        CHECK_OK(st_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data));
    }
    void *buf = NULL;
    size_t size = 0;
    CHECK_OK(st_gguf_writer_write_memory(w, &buf, &size));
    FILE *f = fopen(path, "rb");
    uint8_t *orig = malloc(size + 1);
    size_t n = f && orig ? fread(orig, 1, size + 1, f) : 0;
    if (f) fclose(f);
    CHECK_INT(n, size);
    CHECK(n == size && memcmp(orig, buf, size) == 0);
    free(orig);
    free(buf);
    st_gguf_writer_destroy(w);
}

TEST(test_stories260k) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    if (access(path, R_OK) != 0) {
        test_skip("stories260K.gguf not found under the shared dir (set STRATA_SHARED)");
        return;
    }
    st_ctx *ctx = new_ctx();
    st_gguf *g = NULL;
    CHECK_OK(st_gguf_open(ctx, path, &g));
    if (!g) fprintf(stderr, "  %s\n", st_ctx_error(ctx));
    REQUIRE(g);
    CHECK_INT(st_gguf_version(g), 3);
    CHECK_INT(st_gguf_alignment(g), 32);
    CHECK_INT(st_gguf_file_size(g), 1185376);
    CHECK_INT(st_gguf_data_offset(g), 14176);
    CHECK_INT(st_gguf_n_kv(g), 19);
    CHECK_INT(st_gguf_n_tensors(g), 48);
    char *arch = NULL;
    CHECK_OK(st_gguf_get_str_dup(g, "general.architecture", &arch));
    CHECK_STR(arch, "llama");
    free(arch);
    static const struct { const char *key; uint32_t v; } u32s[] = {
        {"llama.block_count", 5},          {"llama.embedding_length", 64},
        {"llama.attention.head_count", 8}, {"llama.attention.head_count_kv", 4},
        {"llama.context_length", 512},     {"llama.feed_forward_length", 172},
        {"llama.rope.dimension_count", 8}, {"tokenizer.ggml.bos_token_id", 1},
        {"tokenizer.ggml.eos_token_id", 2}, {"tokenizer.ggml.seperator_token_id", 4294967295u},
    };
    for (size_t i = 0; i < sizeof u32s / sizeof u32s[0]; i++) {
        uint32_t v = 0;
        CHECK_OK(st_gguf_get_u32(g, u32s[i].key, &v));
        CHECK_INT(v, u32s[i].v);
    }
    int32_t i32;
    CHECK_INT(st_gguf_get_i32(g, "tokenizer.ggml.seperator_token_id", &i32), ST_E_TYPE);
    float eps = 0;
    CHECK_OK(st_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &eps));
    CHECK(eps == 1e-5f);
    st_gguf_vtype et;
    uint64_t n;
    const void *data;
    CHECK_OK(st_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data));
    CHECK(et == ST_GGUF_STRING && n == 512);
    static const char *const first[] = {"<unk>", "<s>", "</s>", "<0x00>", "<0x01>"};
    for (int i = 0; i < 5; i++) {
        const char *s;
        size_t len;
        CHECK_OK(st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", (uint64_t)i, &s, &len));
        CHECK(len == strlen(first[i]) && memcmp(s, first[i], len) == 0);
    }
    CHECK_OK(st_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data));
    CHECK(et == ST_GGUF_INT32 && n == 512);
    int32_t tt[5];
    memcpy(tt, data, sizeof tt);
    CHECK(tt[0] == 2 && tt[1] == 3 && tt[2] == 3 && tt[3] == 6 && tt[4] == 6);
    CHECK_OK(st_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data));
    CHECK(et == ST_GGUF_FLOAT32 && n == 512);

    const st_gguf_tensor *t = st_gguf_find_tensor(g, "token_embd.weight");
    REQUIRE(t);
    CHECK(t->type == ST_TYPE_F32 && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512);
    CHECK(t->offset == 0 && t->nbytes == 131072);
    CHECK_NEAR(f32_at(t, 0), -0.29474878311157227, 0);
    CHECK_NEAR(f32_at(t, 3), 0.34057360887527466, 0);
    t = st_gguf_find_tensor(g, "output_norm.weight");
    REQUIRE(t);
    CHECK(t->n_dims == 1 && t->ne[0] == 64 && t->offset == 131072);
    CHECK_NEAR(f32_at(t, 0), 2.4583089351654053, 0);
    t = st_gguf_find_tensor(g, "blk.0.ffn_down.weight");
    REQUIRE(t);
    CHECK(t->ne[0] == 172 && t->ne[1] == 64 && t->offset == 355840);
    t = st_gguf_find_tensor(g, "blk.4.ffn_norm.weight");
    REQUIRE(t);
    CHECK(t->offset == 1170944 && t == st_gguf_tensor_at(g, 47));
    CHECK_NEAR(f32_at(t, 63), 1.234261155128479, 0);
    uint64_t params = 0, bytes = 0;
    for (int64_t i = 0; i < st_gguf_n_tensors(g); i++) {
        const st_gguf_tensor *ti = st_gguf_tensor_at(g, i);
        params += (uint64_t)(ti->ne[0] * ti->ne[1] * ti->ne[2] * ti->ne[3]);
        bytes += ti->nbytes;
    }
    CHECK_INT(params, 292800);
    CHECK_INT(bytes, st_gguf_file_size(g) - st_gguf_data_offset(g));
    check_copy_identical(ctx, g, path);
    st_gguf_close(g);
    st_ctx_destroy(ctx);
}

static int inspect_ok(const char *path) {
    const char *bin = getenv("STRATA_BIN");
    if (!bin || access(bin, X_OK) != 0) return -1;
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' inspect '%s' >/dev/null", bin, path);
    int st = system(cmd);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

TEST(test_vocab_files) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/vocab", test_shared_dir());
    DIR *d = opendir(dir);
    if (!d) {
        test_skip("shared models/vocab directory not found (set STRATA_SHARED)");
        return;
    }
    st_ctx *ctx = new_ctx();
    int n_files = 0, inspected = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 5, ".gguf") != 0) continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        n_files++;
        st_gguf *g = NULL;
        int rc = st_gguf_open(ctx, path, &g);
        if (rc) fprintf(stderr, "  %s: %s\n", e->d_name, st_ctx_error(ctx));
        CHECK_OK(rc);
        if (!g) continue;
        CHECK_INT(st_gguf_n_tensors(g), 0);
        st_gguf_vtype et, et2;
        uint64_t n = 0, n2 = 0;
        const void *data;
        CHECK_OK(st_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data));
        CHECK(et == ST_GGUF_STRING && n >= 30000);
        CHECK_OK(st_gguf_get_arr(g, "tokenizer.ggml.token_type", &et2, &n2, &data));
        CHECK_INT(n2, n);
        uint64_t total = 0;
        for (uint64_t i = 0; i < n; i++) {
            const char *s;
            size_t len;
            if (st_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &s, &len)) break;
            total += len;
        }
        CHECK(total > n);
        check_copy_identical(ctx, g, path);
        st_gguf_close(g);
        int ok = inspect_ok(path);
        if (ok >= 0) {
            inspected++;
            if (!ok) fprintf(stderr, "  strata inspect %s failed\n", e->d_name);
            CHECK(ok);
        }
    }
    closedir(d);
    fprintf(stderr, "  %d vocab GGUFs read, %d inspected\n", n_files, inspected);
    CHECK(n_files >= 10);
    if (!inspected) test_untested("STRATA_BIN not set: `strata inspect` not run on the vocab files");
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    if (access(path, R_OK) == 0 && inspect_ok(path) >= 0) CHECK(inspect_ok(path) == 1);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_stories260k, test_vocab_files)
