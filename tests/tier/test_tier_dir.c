/* Spill directories: lock refusal across processes, pid file, gc of stale instances,
 * and the `strata spill gc` command. */
#include "strata/tier.h"
#include "../test.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int exists(const char *root, const char *name) {
    char p[512];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", root, name);
    return stat(p, &st) == 0;
}

static char *mkroot(char *buf, size_t n) {
    snprintf(buf, n, "/tmp/strata-tier-dir-XXXXXX");
    return mkdtemp(buf);
}

/* A child that opens instance `id`, reports 'y' or 'n' on the pipe, then waits until
 * its stdin-like pipe closes and exits WITHOUT cleaning up (like a crash). */
static pid_t spawn_holder(const char *root, const char *id, int *report_fd, int *hold_fd) {
    int rep[2], hold[2];
    if (pipe(rep) || pipe(hold)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(rep[0]);
        close(hold[1]);
        st_spill_dir *d = NULL;
        int rc = st_spill_dir_open(root, id, NULL, &d);
        char c = rc ? 'n' : 'y';
        if (write(rep[1], &c, 1) != 1) _exit(3);
        char x;
        while (read(hold[0], &x, 1) > 0) {
        }
        _exit(0); /* no st_spill_dir_close: the directory is left stale */
    }
    close(rep[1]);
    close(hold[0]);
    *report_fd = rep[0];
    *hold_fd = hold[1];
    return pid;
}

TEST(test_dir_open_close_pid) {
    char root[64];
    REQUIRE(mkroot(root, sizeof root));
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    st_spill_dir *d = NULL;
    CHECK_OK(st_spill_dir_open(root, "a1", ctx, &d));
    REQUIRE(d);
    CHECK(exists(root, "instance-a1/lock"));
    CHECK(exists(root, "instance-a1/pid"));
    char p[512], buf[32] = {0};
    snprintf(p, sizeof p, "%s/pid", st_spill_dir_path(d));
    FILE *f = fopen(p, "r");
    REQUIRE(f);
    CHECK(fgets(buf, sizeof buf, f) != NULL);
    fclose(f);
    CHECK_INT(atol(buf), getpid());
    /* a second open in the same process is refused too (flock is per open file) */
    st_spill_dir *d2 = NULL;
    CHECK_INT(st_spill_dir_open(root, "a1", ctx, &d2), ST_E_BUSY);
    CHECK(d2 == NULL);
    st_spill_dir_close(d);
    CHECK(!exists(root, "instance-a1"));
    /* default id: the pid */
    CHECK_OK(st_spill_dir_open(root, NULL, ctx, &d));
    snprintf(buf, sizeof buf, "instance-%ld", (long)getpid());
    CHECK(exists(root, buf));
    st_spill_dir_close(d);
    st_spill_dir_close(NULL);
    static const char *bad[] = {"", "..", ".", "a/b", "x y", "0123456789012345678901234567890123456789012345678901234567890123456789"};
    for (int i = 1; i < 6; i++) {
        CHECK_INT(st_spill_dir_open(root, bad[i], ctx, &d), ST_E_INVAL);
        CHECK(d == NULL);
    }
    st_ctx_destroy(ctx);
    rmdir(root);
}

TEST(test_dir_lock_refused_across_processes_and_gc) {
    char root[64];
    REQUIRE(mkroot(root, sizeof root));
    st_ctx *ctx = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    int rep, hold;
    pid_t child = spawn_holder(root, "shared", &rep, &hold);
    REQUIRE(child > 0);
    char c = 0;
    CHECK_INT(read(rep, &c, 1), 1);
    CHECK_INT(c, 'y');

    st_spill_dir *d = NULL;
    CHECK_INT(st_spill_dir_open(root, "shared", ctx, &d), ST_E_BUSY);
    CHECK(d == NULL);
    char want[64];
    snprintf(want, sizeof want, "process %ld", (long)child);
    CHECK(strstr(st_ctx_error(ctx), want) != NULL);
    fprintf(stderr, "  refusal: %s\n", st_ctx_error(ctx));

    /* a stale instance beside the live one: made by a child that exited */
    int rep2, hold2;
    pid_t dead = spawn_holder(root, "dead", &rep2, &hold2);
    REQUIRE(dead > 0);
    CHECK_INT(read(rep2, &c, 1), 1);
    close(hold2);
    waitpid(dead, NULL, 0);
    close(rep2);
    CHECK(exists(root, "instance-dead/pid"));
    char other[128];
    snprintf(other, sizeof other, "%s/not-an-instance", root);
    CHECK_INT(mkdir(other, 0755), 0); /* gc ignores names other than instance-* */

    int removed = -1, live = -1, failed = -1;
    CHECK_OK(st_spill_gc(root, ctx, &removed, &live, &failed));
    CHECK_INT(removed, 1);
    CHECK_INT(live, 1);
    CHECK_INT(failed, 0);
    CHECK(!exists(root, "instance-dead"));
    CHECK(exists(root, "instance-shared/lock"));
    CHECK(exists(root, "not-an-instance"));
    rmdir(other);

    /* the holder dies: its lock goes with it; the id can be taken, and gc reclaims it */
    close(hold);
    waitpid(child, NULL, 0);
    close(rep);
    CHECK_OK(st_spill_dir_open(root, "shared", ctx, &d));
    st_spill_dir_close(d);
    CHECK_OK(st_spill_gc(root, ctx, &removed, &live, &failed));
    CHECK_INT(removed + live, 0);
    CHECK_OK(st_spill_gc("/tmp/strata-tier-no-such-root", ctx, &removed, &live, &failed));
    st_ctx_destroy(ctx);
    CHECK_INT(rmdir(root), 0);
}

TEST(test_cmd_spill_gc) {
    const char *bin = getenv("STRATA_BIN");
    if (!bin || access(bin, X_OK)) {
        test_skip("STRATA_BIN not set or not executable: `strata spill gc` not exercised");
        return;
    }
    char root[64];
    REQUIRE(mkroot(root, sizeof root));
    int rep, hold, rep2, hold2;
    char c;
    pid_t live = spawn_holder(root, "live", &rep, &hold);
    pid_t dead = spawn_holder(root, "stale", &rep2, &hold2);
    REQUIRE(live > 0 && dead > 0);
    CHECK_INT(read(rep, &c, 1), 1);
    CHECK_INT(read(rep2, &c, 1), 1);
    close(hold2);
    waitpid(dead, NULL, 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s spill gc %s", bin, root);
    int st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(!exists(root, "instance-stale"));
    CHECK(exists(root, "instance-live/lock"));
    snprintf(cmd, sizeof cmd, "%s spill frobnicate %s 2>/dev/null", bin, root);
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 2);
    close(hold);
    waitpid(live, NULL, 0);
    close(rep), close(rep2);
    snprintf(cmd, sizeof cmd, "%s spill gc %s >/dev/null", bin, root);
    st = system(cmd);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(!exists(root, "instance-live"));
    CHECK_INT(rmdir(root), 0);
}

TEST_MAIN(test_dir_open_close_pid, test_dir_lock_refused_across_processes_and_gc, test_cmd_spill_gc)
