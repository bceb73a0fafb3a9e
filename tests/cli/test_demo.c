/* `strata demo`, made small: both decodes run and report a speed, the long context outgrows
 * the hot pool so pages really sit on disk, the short one fits, the long/short ratio is
 * printed, and the spill directory is gone afterwards. */
#include "../test.h"
#include "chat_test_util.h"

#include <dirent.h>

/* The number after `key` in the first line of s starting with `line`, or -1. */
static double num_after(const char *s, const char *line, const char *key) {
    const char *p = s ? strstr(s, line) : NULL;
    const char *k = p ? strstr(p, key) : NULL;
    return k ? atof(k + strlen(key)) : -1;
}

/* entries of dir other than . and .. (-1 when it cannot be opened) */
static int n_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

TEST(test_demo_small) {
    atexit(chat_cleanup);
    char args[512], *out = NULL, *err = NULL;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s/tmp", chat_dir());
    mkdir(tmp, 0700);
    snprintf(args, sizeof args, "demo --long 2048 --short 128 -n 8 --kv-budget 256 --tmp %s", tmp);
    CHECK_INT(chat_run(args, "", &out, &err), 0);
    if (err && *err) fprintf(stderr, "%s", err);
    REQUIRE(out != NULL);
    fprintf(stderr, "%s", out);
    CHECK(num_after(out, "short context", "decode ") > 0);
    CHECK(num_after(out, "long  context", "decode ") > 0);
    /* the hot pool is an eighth of the long context: the short one fits in RAM */
    const char *s_kv = strstr(out, "short context");
    CHECK(num_after(s_kv, "KV pages:", "in RAM, ") == 0);
    const char *l_kv = strstr(out, "long  context");
    CHECK(num_after(l_kv, "KV pages:", "in RAM, ") > 0);
    CHECK(num_after(l_kv, "tier traffic:", "prefill spilled ") > 0);
    CHECK(num_after(out, "decode speed long/short:", ": ") > 0);
    CHECK(strstr(out, "spill directory removed") != NULL);
    CHECK_INT(n_entries(tmp), 0);
    free(out), free(err);

    CHECK_INT(chat_run("demo --long 256 --short 256", "", &out, &err), 2);
    CHECK(err && strstr(err, "must be less than"));
    free(out), free(err);
}

TEST_MAIN(test_demo_small)
