/* `strata bench` options: the prompt runs in batches of -b (any -p up to the context), the
 * context is sized from -p and -n for a model file too (its own limit refused with exit 2,
 * both numbers named), --kv-page takes a power of two in 8..256. */
#include "../test.h"
#include "chat_test_util.h"

TEST(test_bench_cli) {
    atexit(chat_cleanup);
    char *out = NULL, *err = NULL, args[512], model[256];
    CHECK_INT(chat_run("bench --preset tiny -p 40 -n 4 -b 16 --kv-page 32", "", &out, &err), 0);
    CHECK(out && strstr(out, "\npp40 ") && strstr(out, "\ntg4 "));
    free(out), free(err);

    CHECK_INT(chat_run("bench --preset tiny --kv-page 12", "", &out, &err), 2);
    CHECK(err && strstr(err, "bad value '12' for --kv-page"));
    free(out), free(err);

    snprintf(model, sizeof model, "%s/tiny-ctx256.gguf", chat_dir());
    snprintf(args, sizeof args, "mkmodel -o %s --preset tiny --ctx 256", model);
    REQUIRE(chat_run(args, "", &out, &err) == 0);
    free(out), free(err);
    /* 240 prompt + 15 decode steps (+ the token the last one samples) fill the model's 256 */
    snprintf(args, sizeof args, "bench -m %s -p 240 -n 15 -b 64", model);
    CHECK_INT(chat_run(args, "", &out, &err), 0);
    CHECK(out && strstr(out, "\npp240 ") && strstr(out, "\ntg15 "));
    free(out), free(err);
    snprintf(args, sizeof args, "bench -m %s -p 240 -n 16", model);
    CHECK_INT(chat_run(args, "", &out, &err), 2);
    CHECK(err && strstr(err, "context 257 is larger than the model's 256 tokens"));
    free(out), free(err);
}

TEST_MAIN(test_bench_cli)
