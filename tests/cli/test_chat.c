/* `strata run --chat` end to end on a tiny random model (built-in byte-level vocabulary, so the
 * template is forced with --chat-template chatml): replies per turn, the KV kept between turns
 * (turn 2 prefills exactly the tokens of the text it adds), /reset, a turn that would overflow
 * the context refused without ending the chat, and an unknown template named in the error. */
#include "../test.h"
#include "chat_test_util.h"

static const char *g_model;

static int model_path(void) { return (g_model = chat_tiny_model()) ? 0 : -1; }


TEST(test_two_turns_keep_kv) {
    REQUIRE(model_path() == 0);
    const char *sys = "Be brief.", *u1 = "Hello there", *u2 = "How are you?";
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m %s --chat --chat-template chatml -n 12 --temp 0 --system '%s'", g_model, sys);
    int rc = chat_run(args, "Hello there\nHow are you?\n", &out, &err); /* EOF ends it: no /exit */
    CHECK_INT(rc, 0);
    REQUIRE(out && err);
    chat_turn t[4];
    int n = chat_parse_turns(err, t, 4);
    CHECK_INT(n, 2);
    CHECK(strlen(out) > 2 && out[strlen(out) - 1] == '\n'); /* the replies, each ended by a newline */
    if (n != 2) fprintf(stderr, "  stderr:\n%s\n", err);
    REQUIRE(n == 2);

    st_ctx *ctx = NULL;
    st_model *m = NULL;
    st_tok *tok = NULL;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    REQUIRE(chat_load_tok(ctx, g_model, &m, &tok) == 0);
    int want1 = chat_turn1(tok, ST_CHAT_CHATML, sys, u1);
    int want2 = chat_turn2_suffix(tok, ST_CHAT_CHATML, sys, u1, u2);
    CHECK(want1 > 0 && want2 > 0);
    CHECK_INT(t[0].reused, 0);
    CHECK_INT(t[0].prefill, want1);
    CHECK(t[0].generated > 0 && t[0].generated <= 12);
    /* the KV kept all of turn 1 (prompt and reply), and only the new text was prefilled */
    CHECK_INT(t[1].reused, t[0].prefill + t[0].generated);
    CHECK_INT(t[1].prefill, want2);
    st_tok_destroy(tok);
    st_model_destroy(m);
    st_ctx_destroy(ctx);
    free(out);
    free(err);
}

TEST(test_same_replies_as_fresh_runs) {
    /* Greedy turn 1 is the same whatever follows; /reset really starts over: the turn after
     * it reuses nothing and answers as the first turn did. */
    REQUIRE(model_path() == 0);
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m %s --chat --chat-template chatml -n 6 --temp 0", g_model);
    CHECK_INT(chat_run(args, "ping\nsecond\n/reset\nping\n/exit\nnever sent\n", &out, &err), 0);
    REQUIRE(out && err);
    chat_turn t[4];
    CHECK_INT(chat_parse_turns(err, t, 4), 3);
    CHECK_INT(t[2].reused, 0);
    CHECK_INT(t[2].prefill, t[0].prefill);
    CHECK(strstr(err, "conversation cleared") != NULL);
    /* a fresh run with the first line only: its output (the reply, raw bytes of a random
     * model, maybe with newlines inside) starts and ends the 3-turn output */
    char *out1 = NULL, *err1 = NULL;
    CHECK_INT(chat_run(args, "ping\n", &out1, &err1), 0);
    REQUIRE(out1);
    size_t n = strlen(out), n1 = strlen(out1);
    CHECK(n1 > 1 && n > 2 * n1);
    CHECK(n >= n1 && !memcmp(out, out1, n1));
    CHECK(n >= n1 && !memcmp(out + n - n1, out1, n1));
    free(out);
    free(err);
    free(out1);
    free(err1);
}

TEST(test_overflow_refused_chat_goes_on) {
    REQUIRE(model_path() == 0);
    char input[4096] = "hi\n", args[512], *out = NULL, *err = NULL;
    for (int i = 0; i < 60; i++) strcat(input, "long words ");
    strcat(input, "\nok\n");
    snprintf(args, sizeof args, "run -m %s --chat --chat-template chatml -n 4 --temp 0 -c 128", g_model);
    CHECK_INT(chat_run(args, input, &out, &err), 0);
    REQUIRE(out && err);
    CHECK(strstr(err, "context holds 128") != NULL);
    chat_turn t[4];
    CHECK_INT(chat_parse_turns(err, t, 4), 2);
    CHECK_INT(t[1].reused, t[0].prefill + t[0].generated); /* the refused turn left the KV alone */
    free(out);
    free(err);
}

TEST(test_unknown_template) {
    REQUIRE(model_path() == 0);
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "run -m %s --chat --chat-template no-such-tmpl", g_model);
    CHECK_INT(chat_run(args, "hi\n", &out, &err), 2);
    CHECK(err && strstr(err, "no-such-tmpl") != NULL);
    free(out);
    free(err);
    /* the built-in vocabulary has no template: a clear error, not a guess */
    snprintf(args, sizeof args, "run -m %s --chat", g_model);
    CHECK_INT(chat_run(args, "hi\n", &out, &err), 2);
    CHECK(err && strstr(err, "--chat-template") != NULL);
    free(out);
    free(err);
    /* --chat-template without --chat, and -p with --chat, are usage errors */
    snprintf(args, sizeof args, "run -m %s --chat -p hello", g_model);
    CHECK_INT(chat_run(args, "", &out, &err), 2);
    free(out);
    free(err);
}

TEST_MAIN(test_two_turns_keep_kv, test_same_replies_as_fresh_runs, test_overflow_refused_chat_goes_on,
          test_unknown_template)
