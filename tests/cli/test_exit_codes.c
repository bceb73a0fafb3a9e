/* The CLI's exit codes: 0 ok, 2 when the user's input is wrong, 1 for an internal failure.
 * The mapping table is checked code by code (exit_code.c is compiled in), then the binary
 * is run on a missing, a malformed and a directory "model" (2), a bad STRATA_ISA (2), a text
 * file given to `convert` as a llama2.c checkpoint and a missing option of it (2), and on
 * two failures that are not the input's fault: stdout on /dev/full (1), and a 2 GiB model
 * that cannot be mapped under `ulimit -v` (ENOMEM, 1; skipped under ASan, whose shadow
 * memory cannot live under that limit). */
#include "../test.h"
#include "chat_test_util.h"
#include "cli/exit_code.c"

#include <errno.h>

#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED_ 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED_ 1
#endif
#endif

TEST(test_exit_code_table) {
    const int input[] = {ST_E_INVAL,       ST_E_USAGE, ST_E_FORMAT, ST_E_VERSION, ST_E_TYPE,
                         ST_E_CORRUPT,     ST_E_NOT_FOUND, ST_E_LIMIT, ST_E_BUSY, ST_E_UNSUPPORTED,
                         -ENOENT, -ENOTDIR, -EISDIR, -EACCES, -EPERM, -ENAMETOOLONG, -ELOOP, -EINVAL};
    const int internal[] = {ST_E_NOMEM, ST_E_IO, ST_E_STATE, ST_E_POOL_FULL, ST_E_NOSPACE,
                            -ENOMEM, -EIO, -ENOSPC, -EMFILE, -EAGAIN, -EBADF, -1999};
    CHECK_INT(st_cli_exit_code(0), ST_EXIT_OK);
    for (size_t i = 0; i < sizeof input / sizeof *input; i++) {
        if (st_cli_exit_code(input[i]) != ST_EXIT_INPUT) fprintf(stderr, "  (%s)\n", st_errname(input[i]));
        CHECK_INT(st_cli_exit_code(input[i]), ST_EXIT_INPUT);
    }
    for (size_t i = 0; i < sizeof internal / sizeof *internal; i++) {
        if (st_cli_exit_code(internal[i]) != ST_EXIT_INTERNAL) fprintf(stderr, "  (%s)\n", st_errname(internal[i]));
        CHECK_INT(st_cli_exit_code(internal[i]), ST_EXIT_INTERNAL);
    }
}

/* `sh -c 'PRE; strata ARGS'` with stdout to `out` (a path); *err malloc'd. The exit status,
 * or -1 when it did not exit normally. */
static int sh_run(const char *pre, const char *args, const char *out, char **err) {
    char e[128], cmd[4096];
    snprintf(e, sizeof e, "%s/err", chat_dir());
    snprintf(cmd, sizeof cmd, "%s; %s %s </dev/null >%s 2>%s", pre, chat_bin(), args, out, e);
    int st = system(cmd);
    *err = test_slurp(e, NULL);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

TEST(test_exit_codes_cli) {
    atexit(chat_cleanup);
    char path[256], args[1024], *err = NULL;
    const char *dir = chat_dir();

    snprintf(args, sizeof args, "inspect %s/missing.gguf", dir);
    CHECK_INT(sh_run(":", args, "/dev/null", &err), 2);
    CHECK(err && strstr(err, "No such file"));
    free(err);

    snprintf(path, sizeof path, "%s/garbage.gguf", dir);
    FILE *f = fopen(path, "wb");
    REQUIRE(f);
    fputs("this is not a GGUF file, only text that is long enough to be read", f);
    fclose(f);
    snprintf(args, sizeof args, "inspect %s", path);
    CHECK_INT(sh_run(":", args, "/dev/null", &err), 2);
    CHECK(err && strstr(err, "header magic"));
    free(err);

    snprintf(args, sizeof args, "run -m %s -n 1", dir);
    CHECK_INT(sh_run(":", args, "/dev/null", &err), 2);
    free(err);

    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    snprintf(args, sizeof args, "mkmodel -o %s --preset tiny", path);
    CHECK_INT(sh_run("STRATA_ISA=bogus; export STRATA_ISA", args, "/dev/null", &err), 2);
    CHECK(err && strstr(err, "STRATA_ISA"));
    free(err);
    REQUIRE(sh_run(":", args, "/dev/null", &err) == 0);
    free(err);

    /* convert: a text file as a llama2.c checkpoint, and a missing option, are the input's fault */
    snprintf(path, sizeof path, "%s/garbage.gguf", dir);
    snprintf(args, sizeof args, "convert --llama2c %s --vocab %s -o %s/out.gguf", path, path, dir);
    CHECK_INT(sh_run(":", args, "/dev/null", &err), 2);
    CHECK(err && strstr(err, "garbage.gguf") && strstr(err, "dim"));
    free(err);
    snprintf(args, sizeof args, "%s/out.gguf", dir);
    CHECK(access(args, F_OK) != 0);
    snprintf(args, sizeof args, "convert --llama2c %s -o %s/out.gguf", path, dir);
    CHECK_INT(sh_run(":", args, "/dev/null", &err), 2);
    CHECK(err && strstr(err, "--vocab"));
    free(err);
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);

    /* the input is fine; the output cannot be written */
    snprintf(args, sizeof args, "inspect %s", path);
    CHECK_INT(sh_run(":", args, "/dev/full", &err), 1);
    CHECK(err && strstr(err, "error writing output"));
    free(err);

#ifndef SANITIZED_
    /* a valid model with 2 GiB of (sparse) padding: mapping it fails under a 1 GiB address
     * space with ENOMEM, which says nothing about the file */
    snprintf(path, sizeof path, "%s/big.gguf", dir);
    snprintf(args, sizeof args, "mkmodel -o %s --preset tiny", path);
    REQUIRE(sh_run(":", args, "/dev/null", &err) == 0);
    free(err);
    REQUIRE(truncate(path, (off_t)2 << 30) == 0);
    snprintf(args, sizeof args, "inspect %s", path);
    CHECK_INT(sh_run(":", args, "/dev/null", &err), 0);
    free(err);
    CHECK_INT(sh_run("ulimit -v 1048576", args, "/dev/null", &err), 1);
    CHECK(err && strstr(err, "Cannot allocate memory"));
    free(err);
#else
    test_untested("ASan build: the ulimit -v (out of memory) case needs the plain build");
#endif
}

TEST_MAIN(test_exit_code_table, test_exit_codes_cli)
