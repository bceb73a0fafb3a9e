/* The prefix cache across a restart: st_engine_prefix_save / st_engine_prefix_load, a
 * prefix-cache file (st_kv_prefix_export / import, docs/FORMATS.md) written atomically.
 *
 * Atomic: the file is written to a temporary in the same directory, fsynced, renamed over
 * the old one and the directory fsynced, so after a crash at any point the path holds
 * either the old complete file or the new complete one, never a torn one. What a file holds
 * is content-keyed (tokens and the model's fingerprint), so an older file stays correct
 * whatever the engine did since it was written. */
#include "strata/engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int idle(st_engine *e, const char *what) {
    if (st_engine_n_active(e) == 0) return 0;
    return st_seterr(st_engine_ctx(e), ST_E_STATE, "engine: %s: %d requests are active", what,
                     st_engine_n_active(e));
}

static int fsync_dir(const char *path) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -errno;
    int rc = fsync(fd) ? -errno : 0;
    close(fd);
    return rc;
}

int st_engine_prefix_save(st_engine *e, const char *path, st_kv_prefix_counts *out) {
    if (out) memset(out, 0, sizeof *out);
    st_ctx *ctx = st_engine_ctx(e);
    if (!path || !*path) return st_seterr(ctx, ST_E_INVAL, "engine: prefix save: no path");
    int rc = idle(e, "prefix save");
    if (rc) return rc;
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp)
        return st_seterr(ctx, ST_E_INVAL, "engine: prefix save: path too long");
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        return st_seterr(ctx, rc, "engine: prefix save: cannot create %s: %s", tmp,
                         strerror(-rc));
    }
    FILE *fp = fdopen(fd, "wb");
    if (!fp) {
        rc = -errno;
        close(fd);
        unlink(tmp);
        return st_seterr(ctx, rc, "engine: prefix save: %s", strerror(-rc));
    }
    st_kv_io io;
    st_kv_io_file(&io, fp);
    st_kv_prefix_counts c;
    rc = st_kv_prefix_export(st_engine_kv(e), &io, -1, &c);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_ctx_error(ctx));
        fclose(fp);
        unlink(tmp);
        return st_seterr(ctx, rc, "engine: prefix save: %s", msg);
    }
    const char *step = "write";
    if (fflush(fp) != 0 || (step = "fsync", fsync(fd) != 0)) {
        rc = -errno;
        fclose(fp);
        unlink(tmp);
        return st_seterr(ctx, rc, "engine: prefix save: %s of %s: %s", step, tmp,
                         strerror(-rc));
    }
    if (fclose(fp) != 0) {
        rc = -errno;
        unlink(tmp);
        return st_seterr(ctx, rc, "engine: prefix save: close of %s: %s", tmp, strerror(-rc));
    }
    if (rename(tmp, path) != 0) {
        rc = -errno;
        unlink(tmp);
        return st_seterr(ctx, rc, "engine: prefix save: rename to %s: %s", path,
                         strerror(-rc));
    }
    if ((rc = fsync_dir(path)) != 0)
        return st_seterr(ctx, rc, "engine: prefix save: fsync of %s's directory: %s", path,
                         strerror(-rc));
    if (out) *out = c;
    return 0;
}

int st_engine_prefix_load(st_engine *e, const char *path, st_kv_prefix_counts *out) {
    if (out) memset(out, 0, sizeof *out);
    st_ctx *ctx = st_engine_ctx(e);
    if (!path || !*path) return st_seterr(ctx, ST_E_INVAL, "engine: prefix load: no path");
    int rc = idle(e, "prefix load");
    if (rc) return rc;
    FILE *fp = fopen(path, "rbe");
    if (!fp) {
        if (errno == ENOENT) return 0; /* nothing saved yet */
        rc = -errno;
        return st_seterr(ctx, rc, "engine: prefix load: cannot open %s: %s", path,
                         strerror(-rc));
    }
    st_kv_io io;
    st_kv_io_file(&io, fp);
    rc = st_kv_prefix_import(st_engine_kv(e), &io, out);
    fclose(fp);
    if (rc) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", st_ctx_error(ctx));
        return st_seterr(ctx, rc, "engine: prefix load: %s: %s", path, msg);
    }
    return 0;
}
