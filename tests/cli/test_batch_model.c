/* `strata batch` end to end on ../shared/models/stories260K.gguf (label `model`): greedy
 * completions of a prompt file, 3 at a time, are llama.cpp's text for the prompt it has a
 * reference for and each equal to the same prompt completed alone (-np 1); the statistics
 * count every prompt and token; a missing file and an empty one are refused with exit 2. */
#include "../test.h"
#include "chat_test_util.h"

static char model[1024];

static int have_model(void) { return chat_stories_model(model, sizeof model); }

static const char *prompts = "Once upon a time\nThe cat sat\n\nOnce upon a time there was\nTom had a\\nball\n";

/* The completion printed for prompt i ("[i] PROMPT" line, then the text line). */
static char *completion(const char *out, int i) {
    char tag[16];
    snprintf(tag, sizeof tag, "[%d] ", i);
    const char *p = strstr(out, tag);
    if (!p || !(p = strchr(p, '\n'))) return NULL;
    p++;
    /* "Tom had a\nball" spans two lines: its text is after the prompt's second line */
    if (i == 3 && (p = strchr(p, '\n'))) p++;
    if (!p) return NULL;
    const char *e = strchr(p, '\n');
    return strndup(p, e ? (size_t)(e - p) : strlen(p));
}

TEST(test_batch_equals_alone_and_llama) {
    atexit(chat_cleanup);
    if (!have_model()) return;
    const char *f = chat_file_with("prompts.txt", prompts, strlen(prompts));
    char args[2048], *out3 = NULL, *out1 = NULL, *err = NULL;
    snprintf(args, sizeof args, "batch -m %s -f %s -np 3 -n 24 --temp 0 -b 8", model, f);
    CHECK_INT(chat_run(args, "", &out3, &err), 0);
    REQUIRE(out3 && err);
    CHECK(strstr(err, "requests: 4 (0 failed), 3 at a time") != NULL);
    CHECK(strstr(err, "generated tokens: 96 ") != NULL);
    free(err);
    snprintf(args, sizeof args, "batch -m %s -f %s -np 1 -n 24 --temp 0", model, f);
    CHECK_INT(chat_run(args, "", &out1, &err), 0);
    REQUIRE(out1);
    for (int i = 0; i < 4; i++) {
        char *a = completion(out3, i), *b = completion(out1, i);
        CHECK(a && b && strlen(a) > 24);
        if (a && b) CHECK_STR(a, b);
        free(a), free(b);
    }
    /* llama.cpp's greedy text for "Once upon a time" (the file echoes " Once upon a time") */
    char path[1200];
    snprintf(path, sizeof path, "%s/peers/stories260K-greedy.txt", test_shared_dir());
    char *want = test_slurp(path, NULL), *got = completion(out3, 0);
    REQUIRE(want && got);
    CHECK(strlen(want) > 17 + strlen(got) && !strncmp(want + 17, got, strlen(got)));
    free(want), free(got), free(out3), free(out1), free(err);
}

TEST(test_batch_bad_input) {
    if (!have_model()) return;
    char args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "batch -m %s -f /nonexistent/prompts.txt", model);
    CHECK_INT(chat_run(args, "", &out, &err), 2);
    CHECK(err && strstr(err, "cannot read /nonexistent/prompts.txt") != NULL);
    free(out), free(err);
    const char *f = chat_file_with("empty.txt", "\n\n", 2);
    snprintf(args, sizeof args, "batch -m %s -f %s", model, f);
    CHECK_INT(chat_run(args, "", &out, &err), 2);
    CHECK(err && strstr(err, "holds no prompt") != NULL);
    free(out), free(err);
    snprintf(args, sizeof args, "batch -m %s", model);
    CHECK_INT(chat_run(args, "", &out, &err), 2);
    free(out), free(err);
}

TEST_MAIN(test_batch_equals_alone_and_llama, test_batch_bad_input)
