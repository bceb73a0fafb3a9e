/* `strata run --prompt-cache FILE` end to end on the built-in synthetic model (byte-level
 * vocabulary, so a prompt's tokens start with those of any prefix of it): the first run saves the prompt's KV,
 * a second run restores it and computes only the last token, a longer prompt reuses the
 * shared prefix and updates the file, each giving the same greedy text as a run without the
 * cache; -ro never writes; -all saves the generated tokens too; a file of another KV
 * configuration or a truncated one is refused (exit 2, the file named) and left as it was. */
#include "../test.h"
#include "chat_test_util.h"

static const char *P1 = "Once upon a time there was a cat";
static const char *P2 = "Once upon a time there was a dog who liked to run";

/* `run -p PROMPT -n 24 --temp 0 EXTRA`: exit status; stdout into *out, stderr into *err. */
static int run(const char *prompt, const char *extra, char **out, char **err) {
    char args[2048];
    snprintf(args, sizeof args, "run -p '%s' -n 24 --temp 0 %s", prompt, extra);
    return chat_run(args, "", out, err);
}

/* The "R of the N prompt tokens reused" figures of stderr (-1 when absent). */
static int reused(const char *err, int *n_prompt) {
    const char *p = err ? strstr(err, " of the ") : NULL;
    int r = -1;
    *n_prompt = -1;
    if (p) {
        while (p > err && p[-1] != ' ') p--;
        if (sscanf(p, "%d of the %d prompt tokens reused", &r, n_prompt) != 2) r = -1;
    }
    return r;
}

/* Tokens of a prompt, as `run` counts them ("prompt tokens: N"), or -1. */
static int n_tokens(const char *prompt) {
    char *out = NULL, *err = NULL;
    int n = -1;
    char args[1024];
    snprintf(args, sizeof args, "run -p '%s' -n 1 --temp 0", prompt);
    const char *p;
    if (chat_run(args, "", &out, &err) == 0 && err && (p = strstr(err, "prompt tokens: ")))
        n = atoi(p + strlen("prompt tokens: "));
    free(out);
    free(err);
    return n;
}

/* Copies path to path.before (into copy[cap]) to compare with later. */
static void backup(const char *path, char *copy, size_t cap) {
    char cmd[1300];
    snprintf(copy, cap, "%s.before", path);
    snprintf(cmd, sizeof cmd, "cp %s %s", path, copy);
    REQUIRE(system(cmd) == 0);
}

static int same_file(const char *a, const char *b) {
    char *x = test_slurp(a, NULL), *y = test_slurp(b, NULL);
    struct stat sa, sb;
    int same = x && y && !stat(a, &sa) && !stat(b, &sb) && sa.st_size == sb.st_size &&
               !memcmp(x, y, (size_t)sa.st_size);
    free(x);
    free(y);
    return same;
}

TEST(test_prompt_cache) {
    char cache[256], extra[512], copy[600];
    snprintf(cache, sizeof cache, "%s/prompt.kv", chat_dir());
    atexit(chat_cleanup);
    char *ref1 = NULL, *ref2 = NULL, *out = NULL, *err = NULL;
    CHECK_INT(run(P1, "", &ref1, &err), 0);
    free(err);
    CHECK_INT(run(P2, "", &ref2, &err), 0);
    free(err);
    REQUIRE(ref1 && ref2 && strlen(ref1) > 2);

    /* 1. no file yet: computed and saved */
    snprintf(extra, sizeof extra, "--prompt-cache %s", cache);
    CHECK_INT(run(P1, extra, &out, &err), 0);
    CHECK(out && !strcmp(out, ref1));
    CHECK(err && strstr(err, "saved to"));
    CHECK(access(cache, R_OK) == 0);
    free(out), free(err);

    /* 2. the same prompt: all but its last token restored */
    int n = 0;
    const int n1 = n_tokens(P1), n2 = n_tokens(P2), shared = n_tokens("Once upon a time there was a ");
    REQUIRE(n1 > shared && n2 > shared && shared > 1);
    CHECK_INT(run(P1, extra, &out, &err), 0);
    CHECK(out && !strcmp(out, ref1));
    CHECK_INT(reused(err, &n), n1 - 1);
    CHECK_INT(n, n1);
    CHECK(err && !strstr(err, "saved to")); /* nothing new to save */
    free(out), free(err);

    /* 3. -ro with a longer prompt: the shared prefix reused, the file untouched */
    backup(cache, copy, sizeof copy);
    snprintf(extra, sizeof extra, "--prompt-cache %s --prompt-cache-ro", cache);
    CHECK_INT(run(P2, extra, &out, &err), 0);
    CHECK(out && !strcmp(out, ref2));
    CHECK_INT(reused(err, &n), shared);
    CHECK(same_file(cache, copy));
    free(out), free(err);

    /* 4. the longer prompt again, writable: reused as far as shared, then saved */
    snprintf(extra, sizeof extra, "--prompt-cache %s", cache);
    CHECK_INT(run(P2, extra, &out, &err), 0);
    CHECK(out && !strcmp(out, ref2));
    CHECK_INT(reused(err, &n), shared);
    CHECK(err && strstr(err, "saved to"));
    CHECK(!same_file(cache, copy));
    free(out), free(err);
    CHECK_INT(run(P2, extra, &out, &err), 0);
    CHECK_INT(reused(err, &n), n2 - 1);
    CHECK(out && !strcmp(out, ref2));
    free(out), free(err);

    /* 5. another KV configuration, a truncated file: refused, named, nothing written */
    backup(cache, copy, sizeof copy);
    snprintf(extra, sizeof extra, "--prompt-cache %s --kv-type q8_0", cache);
    CHECK_INT(run(P2, extra, &out, &err), 2);
    CHECK(err && strstr(err, cache) && strstr(err, "element type"));
    CHECK(same_file(cache, copy));
    free(out), free(err);
    char trunc[600];
    snprintf(trunc, sizeof trunc, "head -c 3000 %s > %s.cut", cache, cache);
    REQUIRE(system(trunc) == 0);
    snprintf(extra, sizeof extra, "--prompt-cache %s.cut", cache);
    CHECK_INT(run(P2, extra, &out, &err), 2);
    CHECK(err && strstr(err, "truncated at byte"));
    free(out), free(err);

    /* 6. -all: saved after the generation, with every generated token but the last (which
     * was sampled, never computed) */
    snprintf(extra, sizeof extra, "--prompt-cache %s.all --prompt-cache-all", cache);
    CHECK_INT(run(P1, extra, &out, &err), 0);
    CHECK(out && !strcmp(out, ref1));
    const char *gen = err ? strstr(err, "generated tokens: ") : NULL, *saved = err ? strstr(err, "tokens (") : NULL;
    REQUIRE(gen && saved);
    while (saved > err && saved[-1] == ' ') saved--;
    while (saved > err && saved[-1] != ' ') saved--;
    CHECK_INT(atoi(saved), n1 + atoi(gen + strlen("generated tokens: ")) - 1);
    free(out), free(err);
    free(ref1);
    free(ref2);
}

/* Options that need --prompt-cache, or contradict each other, are refused. */
TEST(test_prompt_cache_options) {
    char *out = NULL, *err = NULL;
    CHECK_INT(run(P1, "--prompt-cache-ro", &out, &err), 2);
    CHECK(err && strstr(err, "need --prompt-cache FILE"));
    free(out), free(err);
    CHECK_INT(run(P1, "--prompt-cache x --prompt-cache-ro --prompt-cache-all", &out, &err), 2);
    free(out), free(err);
}

TEST_MAIN(test_prompt_cache, test_prompt_cache_options)
