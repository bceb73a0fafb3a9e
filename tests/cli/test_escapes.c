/* Prompt escapes as llama.cpp's string_process_escapes gives them (common.cpp), case by case,
 * and `strata tokenize` applying them as llama-tokenize does: to TEXT and to -f files, on by
 * default (-e), off with --no-escape. The tokenizer runs on a tiny model made with mkmodel
 * (byte-level vocabulary), so each id stands for one byte and equal ids mean equal bytes. */
#include "../test.h"
#include "chat_test_util.h"
#include "cli/cli_util.c"
#include "cli/exit_code.c"
#include "cli/cli_quest.c"
#include "cli/kv_flags.c"

/* One case: in[0, n_in) escaped must give want[0, n_want). */
static void check_esc(const char *in, size_t n_in, const char *want, size_t n_want) {
    char buf[64];
    REQUIRE(n_in < sizeof buf);
    memcpy(buf, in, n_in);
    buf[n_in] = 0;
    size_t n = st_cli_process_escapes(buf, n_in);
    CHECK_INT(n, n_want);
    CHECK(n == n_want && memcmp(buf, want, n) == 0);
    CHECK_INT(buf[n], 0);
    if (n != n_want || memcmp(buf, want, n)) fprintf(stderr, "  (input \"%s\")\n", in);
}
#define ESC(in, want) check_esc(in, sizeof in - 1, want, sizeof want - 1)

TEST(test_escapes_as_llama_cpp) {
    ESC("a\\nb", "a\nb");
    ESC("\\r\\t", "\r\t");
    ESC("\\'\\\"", "'\"");
    ESC("\\\\n", "\\n");     /* an escaped backslash, then a plain n */
    ESC("\\\\\\n", "\\\n");  /* an escaped backslash, then a newline */
    ESC("\\\\x41", "\\x41"); /* the x belongs to no escape */
    ESC("\\x41", "A");
    ESC("\\x4a\\x4A", "JJ");
    ESC("\\x41\\x42C", "ABC"); /* two hex digits at most */
    ESC("\\x00z", "\0z");      /* a NUL byte, counted in the length */
    ESC("\\xff", "\xff");
    ESC("plain text", "plain text");
    ESC("", "");
}

TEST(test_escapes_kept_as_written) {
    ESC("a\\", "a\\");       /* a trailing backslash */
    ESC("\\", "\\");
    ESC("\\x", "\\x");       /* \x with nothing after it */
    ESC("\\x4", "\\x4");     /* one hex digit, at the end */
    ESC("\\x4g", "\\x4g");   /* one hex digit, then a non-digit */
    ESC("\\xg4", "\\xg4");
    ESC("\\xzz!", "\\xzz!"); /* no hex digit */
    ESC("\\q\\a\\0\\e", "\\q\\a\\0\\e"); /* unknown escapes: backslash and letter kept */
    ESC("\\u00e9", "\\u00e9");
    ESC("\\ ", "\\ ");
}

/* llama.cpp hands the two bytes after \x to strtol, which skips a leading space and takes a
 * sign: the same command line must give the same bytes here. */
TEST(test_escapes_strtol_quirks_as_llama_cpp) {
    ESC("\\x 5", "\x05");
    ESC("\\x+f", "\x0f");
    ESC("\\x-1", "\xff");
    ESC("\\x-f", "\xf1");
    ESC("\\x  ", "\\x  "); /* spaces only: no number */
}

TEST(test_prompt_text_file_newline_then_escapes) {
    char a[] = "x\\n\n";
    CHECK_INT(st_cli_prompt_text(a, sizeof a - 1, 1, 1), 2); /* the file's own newline dropped */
    CHECK(!memcmp(a, "x\n", 3));
    char b[] = "x\\n\n";
    CHECK_INT(st_cli_prompt_text(b, sizeof b - 1, 1, 0), 3);
    CHECK(!memcmp(b, "x\\n", 4));
    char c[] = "x\\n\n";
    CHECK_INT(st_cli_prompt_text(c, sizeof c - 1, 0, 1), 3); /* not from a file: all kept */
    CHECK(!memcmp(c, "x\n\n", 4));
}

static const char *g_model;

/* `strata tokenize --ids --no-bos -m tiny OPTS`'s stdout (malloc'd), NULL when it fails. */
static char *ids(const char *opts) {
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "tokenize --ids --no-bos -m %s %s", g_model, opts);
    int rc = chat_run(args, "", &out, &err);
    CHECK_INT(rc, 0);
    if (rc) {
        fprintf(stderr, "  tokenize %s: exit %d: %s\n", opts, rc, err ? err : "");
        free(out);
        out = NULL;
    }
    free(err);
    return out;
}

static const char *file_with(const char *name, const char *s) { return chat_file_with(name, s, strlen(s)); }

TEST(test_tokenize_escapes) {
    REQUIRE((g_model = chat_tiny_model()) != NULL);
    char opt[512];
    char *esc = ids("'a\\nb'");                   /* a, backslash-n, b: escaped */
    char *real = ids("\"$(printf 'a\\nb')\"");    /* an actual newline */
    char *dash_e = ids("-e 'a\\nb'");
    snprintf(opt, sizeof opt, "-f %s", file_with("real", "a\nb"));
    char *file_real = ids(opt);
    snprintf(opt, sizeof opt, "-f %s", file_with("esc", "a\\nb"));
    char *file_esc = ids(opt);
    char *raw = ids("--no-escape 'a\\nb'");      /* the backslash kept */
    char *dbl = ids("'a\\\\nb'");                 /* \\ is one backslash: the same bytes */
    snprintf(opt, sizeof opt, "--no-escape -f %s", file_with("esc2", "a\\nb"));
    char *file_raw = ids(opt);
    REQUIRE(esc && real && dash_e && file_real && file_esc && raw && dbl && file_raw);
    CHECK_STR(esc, real);
    CHECK_STR(dash_e, real);
    CHECK_STR(file_real, real);
    CHECK_STR(file_esc, real); /* llama-tokenize escapes -f files too */
    CHECK_STR(raw, dbl);
    CHECK_STR(file_raw, dbl);
    CHECK(strcmp(raw, real) != 0);
    /* byte-level, after the three bytes of SPM's leading space: a, \n, b is 6 ids, a, \, n, b 7 */
    int commas_real = 0, commas_raw = 0;
    for (const char *p = real; *p; p++) commas_real += *p == ',';
    for (const char *p = raw; *p; p++) commas_raw += *p == ',';
    CHECK_INT(commas_real, 5);
    CHECK_INT(commas_raw, 6);
    CHECK(strstr(real, ", 13, ") != NULL); /* the newline's byte token */
    free(esc), free(real), free(dash_e), free(file_real), free(file_esc), free(raw), free(dbl), free(file_raw);

    /* the pieces: --no-escape shows a backslash piece, the default a tab */
    char args[512], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "tokenize --no-bos -m %s --no-escape 'x\\ty'", g_model);
    CHECK_INT(chat_run(args, "", &out, &err), 0);
    CHECK(out && strstr(out, "'\\'") != NULL);
    free(out), free(err);
    snprintf(args, sizeof args, "tokenize --no-bos -m %s 'x\\ty'", g_model);
    CHECK_INT(chat_run(args, "", &out, &err), 0);
    CHECK(out && strstr(out, "'\\'") == NULL && strstr(out, "'\t'") != NULL);
    free(out), free(err);
}

TEST_MAIN(test_escapes_as_llama_cpp, test_escapes_kept_as_written, test_escapes_strtol_quirks_as_llama_cpp,
          test_prompt_text_file_newline_then_escapes, test_tokenize_escapes)
