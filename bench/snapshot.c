/* bench/snapshot: KV snapshot write and restore speed against a plain
 * read of the same file, measured side by side in one run.
 *
 * KV-ONLY benchmark: a pool with the KV geometry of Llama-3.2-1B (16 layers, 8 KV heads of
 * dim 64, f16, pages of 16 tokens) holds one sequence of C tokens of random K/V with token
 * ids (so its full pages carry prefix keys, as a prompt's do). It is written to DIR through
 * the fd backend, then restored, alternating with probe passes, in 3 rounds:
 *   probe        read() of the whole snapshot file in 1 MiB calls into a buffer already
 *                faulted in: what the page cache gives a reader (the file stays cached, so
 *                this is memory speed, not disk speed: restore is CPU and memory bound)
 *   fresh pool   st_kv_snapshot_read into a pool created just before (its frames never
 *                touched: a process restoring a session after a restart)
 *   used pool    into a pool whose free frames were used before (a server restoring one
 *                session after others ended)
 *   full cache   into a pool whose every page is held by the prefix cache, so each restored
 *                page evicts a cached one (the reader stages such pages in private memory)
 * Every restore is checked against the original (every token's K/V of three layers). Figures
 * are GB/s of snapshot bytes and the ratio of each restore to the mean of the probes around
 * it.
 *
 *   usage: snapshot [DIR] [contexts...]     default DIR /tmp, contexts 8192 */
#include "strata/kv.h"

#include "bench_common.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

enum { L = 16, H = 8, D = 64, P = 16, ROUNDS = 3, CHUNK = 256 };

static st_kv *make_pool(st_ctx *ctx, int64_t n_pages) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.page_size = P;
    p.type = ST_TYPE_F16;
    p.n_pages = n_pages;
    st_kv *kv = NULL;
    int rc = st_kv_create(ctx, &p, &kv);
    if (rc) fprintf(stderr, "snapshot: st_kv_create: %s\n", st_ctx_error(ctx));
    return kv;
}

/* One sequence of n tokens of random K/V (values in [-1, 1)), token ids i % 32000 when
 * with_tokens (full pages then carry prefix keys and stay cached when freed). */
static int fill(st_kv *kv, int64_t n, int with_tokens, st_kv_seq_id *seq) {
    float *k = malloc(sizeof(float) * L * CHUNK * H * D), *v = malloc(sizeof(float) * L * CHUNK * H * D);
    int32_t tok[CHUNK];
    uint64_t r = 0x9e3779b97f4a7c15ull;
    int rc = k && v ? st_kv_seq_create(kv, seq) : ST_E_NOMEM;
    for (int64_t p0 = 0; !rc && p0 < n; p0 += CHUNK) {
        const int64_t c = n - p0 < CHUNK ? n - p0 : CHUNK;
        for (int64_t i = 0; i < (int64_t)L * CHUNK * H * D; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            k[i] = (float)((int32_t)(r >> 32)) / 2147483648.0f;
            v[i] = (float)((int32_t)(r >> 16 & 0xffffffff)) / 2147483648.0f;
        }
        for (int64_t i = 0; i < c; i++) tok[i] = (int32_t)((p0 + i) % 32000);
        /* layer-major [L][c][H][D]: the CHUNK-sized buffers hold each layer's c rows first */
        for (int l = 1; l < L && c < CHUNK; l++) {
            memmove(k + (size_t)l * c * H * D, k + (size_t)l * CHUNK * H * D, sizeof(float) * c * H * D);
            memmove(v + (size_t)l * c * H * D, v + (size_t)l * CHUNK * H * D, sizeof(float) * c * H * D);
        }
        rc = st_kv_seq_append(kv, *seq, c, with_tokens ? tok : NULL, k, v);
    }
    free(k);
    free(v);
    return rc;
}

/* Every token of layers 0, L/2 and L-1 of b's seq equals a's. */
static int same(const st_kv *a, st_kv_seq_id sa, const st_kv *b, st_kv_seq_id sb, int64_t n) {
    float *ka = malloc(sizeof(float) * n * H * D), *kb = malloc(sizeof(float) * n * H * D);
    float *va = malloc(sizeof(float) * n * H * D), *vb = malloc(sizeof(float) * n * H * D);
    int ok = ka && kb && va && vb;
    const int layers[3] = {0, L / 2, L - 1};
    for (int i = 0; ok && i < 3; i++)
        ok = !st_kv_read(a, sa, layers[i], 0, n, ka, va) && !st_kv_read(b, sb, layers[i], 0, n, kb, vb) &&
             !memcmp(ka, kb, sizeof(float) * n * H * D) && !memcmp(va, vb, sizeof(float) * n * H * D);
    free(ka), free(kb), free(va), free(vb);
    return ok;
}

static double probe_pass(int fd, uint8_t *buf, size_t bytes) {
    const size_t chunk = (size_t)1 << 20;
    const double t0 = st_time_now();
    size_t got = 0;
    for (size_t off = 0; off < bytes; off += chunk) {
        ssize_t r = pread(fd, buf + off, bytes - off < chunk ? bytes - off : chunk, (off_t)off);
        if (r <= 0) return 0;
        got += (size_t)r;
    }
    return (double)got / (st_time_now() - t0) / 1e9;
}

/* Restores the file into kv; GB/s, or 0 on error (message printed). Checks it against the
 * original, then frees the restored sequence. */
static double restore(st_ctx *ctx, st_kv *kv, int fd, size_t bytes, const st_kv *orig, st_kv_seq_id so,
                      int64_t n) {
    if (lseek(fd, 0, SEEK_SET) != 0) return 0;
    st_kv_io io;
    st_kv_io_fd(&io, fd);
    st_kv_seq_id seq;
    int n_out = 0;
    const double t0 = st_time_now();
    int rc = st_kv_snapshot_read(kv, &io, &seq, 1, &n_out);
    const double t = st_time_now() - t0;
    if (rc || n_out != 1) {
        fprintf(stderr, "snapshot: restore failed: %s\n", st_ctx_error(ctx));
        return 0;
    }
    if (!same(orig, so, kv, seq, n)) {
        fprintf(stderr, "snapshot: restored K/V differ from the original\n");
        return 0;
    }
    st_kv_seq_free(kv, seq);
    return (double)bytes / t / 1e9;
}

static int run(st_ctx *ctx, const char *dir, int64_t n) {
    const int64_t n_pages = (n + P - 1) / P + 1;
    st_kv *orig = make_pool(ctx, n_pages), *full = make_pool(ctx, n_pages);
    st_kv_seq_id so, sf;
    if (!orig || !full || fill(orig, n, 1, &so) || fill(full, n, 1, &sf) || st_kv_seq_free(full, sf)) {
        fprintf(stderr, "snapshot: filling the pools failed: %s\n", st_ctx_error(ctx));
        return 1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/strata-bench-snapshot-XXXXXX", dir);
    int fd = mkstemp(path);
    if (fd < 0) {
        fprintf(stderr, "snapshot: cannot create a file in %s\n", dir);
        return 1;
    }
    unlink(path);
    st_kv_io io;
    st_kv_io_fd(&io, fd);
    double t0 = st_time_now();
    int rc = st_kv_snapshot_write(orig, &so, 1, -1, &io);
    const double t_write = st_time_now() - t0;
    struct stat sb;
    if (rc || fstat(fd, &sb)) {
        fprintf(stderr, "snapshot: write failed: %s\n", st_ctx_error(ctx));
        return 1;
    }
    const size_t bytes = (size_t)sb.st_size;
    uint8_t *buf = malloc(bytes);
    if (!buf) return 1;
    memset(buf, 1, bytes);
    enum { FRESH, USED, FULL, KINDS };
    static const char *const kind[KINDS] = {"fresh pool", "used pool", "full cache"};
    double probe[KINDS * ROUNDS + 1], got[ROUNDS][KINDS];
    int k = 0, bad = 0;
    (void)probe_pass(fd, buf, bytes); /* warm-up: the file is in the page cache after this */
    for (int r = 0; r < ROUNDS; r++)
        for (int c = 0; c < KINDS; c++) {
            probe[k++] = probe_pass(fd, buf, bytes);
            st_kv *kv = c == FULL ? full : make_pool(ctx, n_pages);
            st_kv_seq_id su;
            if (c == USED && (!kv || fill(kv, n, 0, &su) || st_kv_seq_free(kv, su))) {
                fprintf(stderr, "snapshot: filling a pool failed: %s\n", st_ctx_error(ctx));
                st_kv_destroy(kv);
                kv = NULL;
            }
            got[r][c] = kv ? restore(ctx, kv, fd, bytes, orig, so, n) : 0;
            if (c != FULL) st_kv_destroy(kv);
            bad |= got[r][c] == 0;
        }
    probe[k] = probe_pass(fd, buf, bytes);
    printf("%6lld tokens  %7.1f MB  write %5.2f GB/s (into the page cache)\n", (long long)n,
           (double)bytes / 1e6, (double)bytes / t_write / 1e9);
    for (int r = 0; r < ROUNDS; r++) {
        printf("  round %d:", r + 1);
        for (int c = 0; c < KINDS; c++) {
            const double pr = 0.5 * (probe[r * KINDS + c] + probe[r * KINDS + c + 1]);
            printf(" | probe %4.2f, %s %4.2f GB/s = %.2f", pr, kind[c], got[r][c], got[r][c] / pr);
        }
        printf("\n");
    }
    free(buf);
    close(fd);
    st_kv_destroy(orig);
    st_kv_destroy(full);
    return bad;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    long long ctxs[16] = {8192};
    int n_ctx = 1;
    if (argc > 2 && (n_ctx = bench_parse_list(argv[2], ctxs, 16)) < 1) {
        fprintf(stderr, "usage: snapshot [DIR] [contexts, e.g. 8k,32k]\n");
        return 2;
    }
    st_ctx *ctx = NULL;
    if (st_ctx_create(NULL, &ctx)) return 1;
    printf("snapshot bench: 1B-shaped KV (%d layers, %d KV heads x %d, f16, pages of %d), file in %s\n", L, H,
           D, P, dir);
    int bad = 0;
    for (int i = 0; i < n_ctx; i++) bad |= run(ctx, dir, ctxs[i]);
    st_ctx_destroy(ctx);
    return bad;
}
