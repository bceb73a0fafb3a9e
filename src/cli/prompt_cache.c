/* strata run --prompt-cache: see prompt_cache.h. */
#include "cli/prompt_cache.h"
#include "cli/commands.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fail(st_cli_session *s, const char *path, int rc, const char *what) {
    const char *msg = *st_ctx_error(s->ctx) ? st_ctx_error(s->ctx) : st_strerror(rc);
    fprintf(stderr, "strata run: --prompt-cache %s: %s: %s\n", path, what, msg);
    return st_cli_exit_code(rc);
}

int st_cli_prompt_cache_load(st_cli_session *s, const char *path, const int32_t *prompt, int n,
                             st_kv_seq_id *seq, int *n_reused, int *n_common) {
    *n_reused = *n_common = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {
        fprintf(stderr, "prompt cache: %s does not exist yet: the prompt's KV will be saved there\n", path);
        int rc = st_kv_seq_create(s->kv, seq);
        return rc ? fail(s, path, rc, "creating a sequence") : 0;
    }
    if (fd < 0) return fail(s, path, -errno, "cannot open");
    st_kv_io io;
    st_kv_io_fd(&io, fd);
    int n_seqs = 0;
    const double t0 = st_time_now();
    int rc = st_kv_snapshot_read(s->kv, &io, seq, 1, &n_seqs);
    const double t = st_time_now() - t0;
    const off_t bytes = lseek(fd, 0, SEEK_CUR);
    close(fd);
    if (rc) return fail(s, path, rc, "not restored");
    if (n_seqs != 1) {
        fprintf(stderr, "strata run: --prompt-cache %s: holds %d sequences, a prompt cache holds one\n", path, n_seqs);
        return ST_EXIT_INPUT;
    }
    int64_t len = 0;
    st_kv_seq_len(s->kv, *seq, &len);
    int32_t *stored = malloc(((size_t)len + 1) * sizeof *stored);
    if (!stored) return fail(s, path, ST_E_NOMEM, "reading its tokens");
    st_kv_seq_tokens(s->kv, *seq, 0, len, stored);
    int common = 0, valid = 1;
    while (common < n && common < len && stored[common] == prompt[common] &&
           !st_kv_seq_valid(s->kv, *seq, common, &valid) && valid)
        common++;
    free(stored);
    const int keep = common < n ? common : n - 1;
    if ((rc = st_kv_seq_truncate(s->kv, *seq, keep)) != 0) return fail(s, path, rc, "cutting it to the prompt");
    *n_reused = keep;
    *n_common = common;
    fprintf(stderr, "prompt cache: %s: %lld tokens (%.1f MB) restored in %.3f s; %d of the %d prompt tokens reused\n",
            path, (long long)len, (double)bytes / 1e6, t, keep, n);
    return 0;
}

int st_cli_prompt_cache_save(st_cli_session *s, const char *path, st_kv_seq_id seq) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (!tmp) return fail(s, path, ST_E_NOMEM, "not saved");
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int rc = fd < 0 ? -errno : 0;
    const double t0 = st_time_now();
    if (!rc) {
        st_kv_io io;
        st_kv_io_fd(&io, fd);
        rc = st_kv_snapshot_write(s->kv, &seq, 1, -1, &io);
        if (!rc && fsync(fd)) rc = -errno;
    }
    const off_t bytes = fd >= 0 ? lseek(fd, 0, SEEK_CUR) : 0;
    if (fd >= 0 && close(fd) && !rc) rc = -errno;
    if (!rc && rename(tmp, path)) rc = -errno;
    if (rc) {
        unlink(tmp);
        free(tmp);
        return fail(s, path, rc, "not saved");
    }
    free(tmp);
    int64_t len = 0;
    st_kv_seq_len(s->kv, seq, &len);
    fprintf(stderr, "prompt cache: %lld tokens (%.1f MB) saved to %s in %.3f s\n", (long long)len,
            (double)bytes / 1e6, path, st_time_now() - t0);
    return 0;
}
