/* Spill directories: DIR/instance-<id>/{lock,pid,spill.dat}.
 *
 * Liveness is the flock on "lock", never the pid file: the kernel drops a lock when its
 * process dies, however it dies, while a pid can be reused. The pid file only names the
 * holder in the refusal message.
 *
 * Race with gc: gc locks a stale instance's lock file, unlinks the files (lock last)
 * and removes the directory. An opener that raced it may end up holding a lock on an
 * unlinked inode, so after locking it checks that the path still names the inode it
 * locked, and starts again if not. */
#include "strata/tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_SPILL_PATH_MAX 4096
#define ST_SPILL_OPEN_RETRIES 8

struct st_spill_dir {
    int lock_fd;
    char path[ST_SPILL_PATH_MAX]; /* root/instance-<id> */
};

static int id_ok(const char *id) {
    size_t n = strlen(id);
    if (n == 0 || n > ST_SPILL_ID_MAX || !strcmp(id, ".") || !strcmp(id, "..")) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = id[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

static int mkdir_p(char *path) {
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        int rc = mkdir(path, 0755);
        *p = '/';
        if (rc && errno != EEXIST) return -errno;
    }
    if (mkdir(path, 0755) && errno != EEXIST) return -errno;
    return 0;
}

/* Reads "pid" of an instance dir; 0 when absent or unreadable. */
static long read_pid(const char *dir) {
    char p[ST_SPILL_PATH_MAX + 8], buf[32] = {0};
    snprintf(p, sizeof p, "%s/pid", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t r = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (r <= 0) return 0;
    return strtol(buf, NULL, 10);
}

static int write_pid(const char *dir) {
    char p[ST_SPILL_PATH_MAX + 8], buf[32];
    snprintf(p, sizeof p, "%s/pid", dir);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return -errno;
    int n = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    ssize_t w = write(fd, buf, (size_t)n);
    int rc = w == n ? 0 : (w < 0 ? -errno : ST_E_IO);
    if (close(fd) && !rc) rc = -errno;
    return rc;
}

/* Opens and locks dir/lock; 0 and *fd on success, 1 when the path changed under us
 * (retry), ST_E_BUSY, -errno. */
static int lock_once(const char *dir, int *fd_out) {
    char p[ST_SPILL_PATH_MAX + 8];
    snprintf(p, sizeof p, "%s/lock", dir);
    int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return errno == ENOENT ? 1 : -errno; /* dir removed by gc: retry */
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int e = errno;
        close(fd);
        return e == EWOULDBLOCK ? ST_E_BUSY : -e;
    }
    struct stat a, b;
    if (fstat(fd, &a) || stat(p, &b) || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
        close(fd);
        return 1;
    }
    *fd_out = fd;
    return 0;
}

int st_spill_dir_open(const char *root, const char *id, st_ctx *ctx, st_spill_dir **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (!root || !*root) return st_seterr(ctx, ST_E_INVAL, "spill: empty directory name");
    char idbuf[32];
    if (!id || !*id) {
        snprintf(idbuf, sizeof idbuf, "%ld", (long)getpid());
        id = idbuf;
    }
    if (!id_ok(id))
        return st_seterr(ctx, ST_E_INVAL,
                         "spill: instance id '%.80s' must be 1..%d characters of [A-Za-z0-9._-]",
                         id, ST_SPILL_ID_MAX);
    st_spill_dir *d = calloc(1, sizeof *d);
    if (!d) return ST_E_NOMEM;
    d->lock_fd = -1;
    int n = snprintf(d->path, sizeof d->path, "%s/instance-%s", root, id);
    if (n < 0 || (size_t)n >= sizeof d->path) {
        free(d);
        return st_seterr(ctx, ST_E_LIMIT, "spill: path too long: %.200s", root);
    }
    int rc = 1;
    for (int tries = 0; rc == 1 && tries < ST_SPILL_OPEN_RETRIES; tries++) {
        rc = mkdir_p(d->path);
        if (rc) break;
        rc = lock_once(d->path, &d->lock_fd);
    }
    if (rc == 1) {
        rc = st_seterr(ctx, ST_E_BUSY, "spill: %s keeps disappearing (gc racing?)", d->path);
    } else if (rc == ST_E_BUSY) {
        long pid = read_pid(d->path);
        rc = st_seterr(ctx, ST_E_BUSY, "spill: %s is in use by process %ld (its lock is held)",
                       d->path, pid);
    } else if (rc < 0 && rc > -4096) {
        rc = st_seterr(ctx, rc, "spill: %s: %s", d->path, st_strerror(rc));
    }
    if (!rc) {
        rc = write_pid(d->path);
        if (rc) st_seterr(ctx, rc, "spill: %s/pid: %s", d->path, st_strerror(rc));
    }
    if (rc) {
        if (d->lock_fd >= 0) close(d->lock_fd);
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

const char *st_spill_dir_path(const st_spill_dir *d) { return d->path; }

/* Unlinks every plain file of dir, "lock" last, then rmdir. Returns 0 or -errno. */
static int remove_instance(const char *dir) {
    DIR *dh = opendir(dir);
    if (!dh) return -errno;
    int rc = 0;
    char p[ST_SPILL_PATH_MAX + 300];
    struct dirent *e;
    while ((e = readdir(dh))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "lock"))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (unlink(p) && errno != ENOENT && !rc) rc = -errno;
    }
    closedir(dh);
    snprintf(p, sizeof p, "%s/lock", dir);
    if (unlink(p) && errno != ENOENT && !rc) rc = -errno;
    if (!rc && rmdir(dir) && errno != ENOENT) rc = -errno;
    return rc;
}

void st_spill_dir_close(st_spill_dir *d) {
    if (!d) return;
    remove_instance(d->path); /* best effort: gc cleans up what is left */
    close(d->lock_fd);
    free(d);
}

int st_spill_gc(const char *root, st_ctx *ctx, int *n_removed, int *n_live, int *n_failed) {
    int removed = 0, live = 0, failed = 0;
    if (n_removed) *n_removed = 0;
    if (n_live) *n_live = 0;
    if (n_failed) *n_failed = 0;
    if (!root) return ST_E_INVAL;
    DIR *dh = opendir(root);
    if (!dh) {
        if (errno == ENOENT) return 0;
        int e = -errno;
        return st_seterr(ctx, e, "spill gc: %s: %s", root, st_strerror(e));
    }
    char dir[ST_SPILL_PATH_MAX], lp[ST_SPILL_PATH_MAX + 8];
    struct dirent *e;
    while ((e = readdir(dh))) {
        if (strncmp(e->d_name, "instance-", 9) != 0) continue;
        int n = snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        if (n < 0 || (size_t)n >= sizeof dir) continue;
        struct stat st;
        if (lstat(dir, &st) || !S_ISDIR(st.st_mode)) continue;
        snprintf(lp, sizeof lp, "%s/lock", dir);
        int fd = open(lp, O_RDWR | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB)) {
            close(fd);
            if (errno == EWOULDBLOCK) {
                live++;
                continue;
            }
            fd = -2;
        }
        /* Unlocked (or no lock file at all: a crash between mkdir and lock): stale. */
        int rc = fd == -2 ? -EIO : remove_instance(dir);
        if (fd >= 0) close(fd);
        if (rc) {
            failed++;
            st_seterr(ctx, rc, "spill gc: cannot remove %s: %s", dir, st_strerror(rc));
        } else {
            removed++;
        }
    }
    closedir(dh);
    if (n_removed) *n_removed = removed;
    if (n_live) *n_live = live;
    if (n_failed) *n_failed = failed;
    return 0;
}
