/* bench/tiered: dense decode attention through the SSD tier.
 *
 * KV-ONLY benchmark (honest label): no model weights run. A pool with the KV geometry of
 * the built-in small synthetic model (4 layers, 2 KV heads of dim 64, 4 query heads, f16,
 * pages of 16 tokens) holds one sequence of C tokens of random K/V; its hot pool is 1/8 of
 * the KV, so each decode step streams 7/8 of every layer from the spill file (O_DIRECT when
 * the filesystem allows). A step = st_kv_attend_decode for every layer, i.e. what one
 * generated token costs in attention. Printed per context: steps/s, the bytes streamed per
 * step, the disk read bandwidth achieved, and that bandwidth as a fraction of a sequential
 * O_DIRECT read probe (1 MiB reads of a file of the KV's size, at most 256 MiB, in the same
 * directory). Probe passes and decode steps alternate in 5 rounds, so both see the same
 * disk and the same neighbours; "ratio" is total over total, "per round" its range.
 * Target: >= 0.70.
 *
 * With -m MODEL the pool takes that model's KV geometry and its content is real: the model
 * (a trained one) and then its random twin of the same shape (bench_text.h) each prefill C
 * tokens of the project's own text (chunked prefill, through the tier) and the same steps are
 * timed on each, one row per model. Dense attention reads every page whatever the weights,
 * so the two rows should agree: a check that the random-K/V figures stand for a real cache.
 * Contexts beyond the model's are cut to fit.
 *
 *   usage: tiered [-m MODEL] [DIR] [contexts...]     default DIR ".", contexts 8192 32768 */
#include "bench_text.h"
#include "strata/attn.h"
#include "strata/kv.h"
#include "strata/model.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int L = 4, H = 2, NH = 4, D = 64;
static int P = 16; /* TIERED_PAGE=64 etc.: larger pages, larger layer blocks per read */

/* The probe file: `bytes` of data in dir, opened O_DIRECT when the filesystem allows. */
static int probe_open(const char *dir, size_t bytes, int *direct) {
    char path[4200];
    snprintf(path, sizeof path, "%s/tiered-probe.dat", dir);
    *direct = 1;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
    if (fd < 0) {
        *direct = 0;
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    }
    if (fd < 0) return -1;
    unlink(path);
    const size_t chunk = (size_t)1 << 20;
    uint8_t *buf = st_alloc_aligned(chunk, 4096);
    memset(buf, 0x5a, chunk);
    for (size_t off = 0; off < bytes; off += chunk)
        if (pwrite(fd, buf, chunk, (off_t)off) != (ssize_t)chunk) break;
    fdatasync(fd);
    st_free_aligned(buf);
    return fd;
}

/* One sequential pass of 1 MiB reads; adds its bytes and seconds. */
static void probe_pass(int fd, int direct, size_t bytes, double *got, double *secs) {
    const size_t chunk = (size_t)1 << 20;
    uint8_t *buf = st_alloc_aligned(chunk, 4096);
    if (!direct) posix_fadvise(fd, 0, (off_t)bytes, POSIX_FADV_DONTNEED);
    double t0 = st_time_now();
    for (size_t off = 0; off < bytes; off += chunk) {
        ssize_t n = pread(fd, buf, chunk, (off_t)off);
        if (n <= 0) break;
        *got += (double)n;
    }
    *secs += st_time_now() - t0;
    st_free_aligned(buf);
}

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

/* Fills kv's sequence with C tokens: random K/V, or (m set) the model's prefill of toks. */
static int fill(st_ctx *ctx, st_kv *kv, st_kv_seq_id seq, int64_t C, const st_model *m, const int32_t *toks) {
    if (m) {
        st_runner_params rp = st_runner_default_params();
        st_runner *r = NULL;
        float *lg = malloc((size_t)st_model_get_hparams(m)->n_vocab * sizeof *lg);
        int rc = lg ? st_runner_create(ctx, m, kv, &rp, &r) : ST_E_NOMEM;
        st_batch b = {.n_tokens = (int32_t)C, .tokens = toks, .seq_single = seq};
        if (!rc) rc = st_runner_forward(r, &b, lg);
        st_runner_destroy(r);
        free(lg);
        return rc;
    }
    const int chunk = 256;
    float *k = malloc(sizeof(float) * L * chunk * H * D), *v = malloc(sizeof(float) * L * chunk * H * D);
    uint64_t s = 1;
    int rc = k && v ? 0 : ST_E_NOMEM;
    for (int64_t t = 0; t < C && !rc; t += chunk) {
        for (size_t i = 0; i < (size_t)L * chunk * H * D; i++) k[i] = frand(&s), v[i] = frand(&s);
        rc = st_kv_seq_append(kv, seq, chunk, NULL, k, v);
    }
    free(k);
    free(v);
    return rc;
}

static int bench_ctx(st_ctx *ctx, st_attn_ws *ws, const char *dir, int64_t C, const st_model *m,
                     const int32_t *toks, const char *name) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = L, p.n_kv_head = H, p.head_dim = D, p.page_size = P, p.type = ST_TYPE_F16;
    p.n_pages = C / P + 2;
    p.ram_pages = p.n_pages / 8;
    p.spill_dir = dir;
    p.instance_id = "bench-tiered";
    st_kv *kv;
    int rc = st_kv_create(ctx, &p, &kv);
    if (rc) {
        fprintf(stderr, "kv: %s\n", st_ctx_error(ctx));
        return rc;
    }
    st_kv_seq_id seq;
    st_kv_seq_create(kv, &seq);
    uint64_t s = 1;
    rc = fill(ctx, kv, seq, C, m, toks);
    if (rc || (rc = st_kv_flush(kv))) {
        fprintf(stderr, "fill: %s\n", st_ctx_error(ctx));
        st_kv_destroy(kv);
        return rc;
    }
    const size_t kv_bytes = (size_t)(C / P) * st_kv_get_geometry(kv)->page_bytes;
    const size_t probe_bytes = kv_bytes < ((size_t)256 << 20) ? kv_bytes : (size_t)256 << 20;
    int direct = 0;
    int pfd = probe_open(dir, probe_bytes, &direct);
    st_attn_geom g = {.n_head = NH, .n_kv_head = H, .head_dim = D, .page_size = P, .type = ST_TYPE_F16};
    float *q = malloc(sizeof(float) * NH * D), *out = malloc(sizeof(float) * NH * D);
    if (!q || !out) rc = ST_E_NOMEM;
    for (int i = 0; q && i < NH * D; i++) q[i] = frand(&s);
    /* warm-up step (workspace growth), then timed steps */
    for (int l = 0; l < L && !rc; l++) rc = st_kv_attend_decode(kv, ctx, ws, &g, l, &seq, 1, NULL, q, out);
    /* Rounds of (probe pass, decode steps), so that both see the same disk and the same
     * neighbours: the machine is shared and its disk bandwidth drifts by 2x. */
    enum { ROUNDS = 5 };
    const int steps = C >= 32768 ? 2 : 4;
    st_kv_stats a, b, a0;
    st_kv_get_stats(kv, &a0);
    double dt = 0, bytes = 0, pbytes = 0, psecs = 0, rmin = 1e9, rmax = 0;
    for (int r = 0; r < ROUNDS && !rc; r++) {
        double pb = 0, ps = 0;
        if (pfd >= 0) probe_pass(pfd, direct, probe_bytes, &pb, &ps);
        st_kv_get_stats(kv, &a);
        double t0 = st_time_now();
        for (int i = 0; i < steps && !rc; i++)
            for (int l = 0; l < L && !rc; l++) rc = st_kv_attend_decode(kv, ctx, ws, &g, l, &seq, 1, NULL, q, out);
        const double t = st_time_now() - t0;
        st_kv_get_stats(kv, &b);
        const double by = (double)(b.tier_bytes_read - a.tier_bytes_read);
        const double ratio = ps > 0 && pb > 0 ? (by / t) / (pb / ps) : 0;
        rmin = ratio < rmin ? ratio : rmin;
        rmax = ratio > rmax ? ratio : rmax;
        dt += t, bytes += by, pbytes += pb, psecs += ps;
    }
    if (pfd >= 0) close(pfd);
    free(q);
    free(out);
    if (rc) fprintf(stderr, "attend: %s\n", st_ctx_error(ctx));
    if (getenv("TIERED_STATS")) {
        char line[512];
        st_kv_stats_line(&a0, &b, line, sizeof line);
        fprintf(stderr, "# %s\n", line);
    }
    const double gbs = bytes / dt / 1e9, probe = psecs > 0 ? pbytes / psecs / 1e9 : 0;
    printf("%-8s %6lld  %9.2f  %10.1f  %8.3f  %8.3f  %6.2f  %5.2f-%-5.2f  %s\n", name, (long long)C,
           ROUNDS * steps / dt, bytes / (ROUNDS * steps) / 1048576.0, gbs, probe,
           probe > 0 ? gbs / probe : 0.0, rmin, rmax, direct ? "O_DIRECT" : "buffered");
    st_kv_destroy(kv);
    return rc;
}

int main(int argc, char **argv) {
    const char *model_path = NULL;
    int ai = 1;
    if (argc > 2 && !strcmp(argv[1], "-m")) model_path = argv[2], ai = 3;
    const char *dir = argc > ai ? argv[ai] : ".";
    if (getenv("TIERED_PAGE")) P = atoi(getenv("TIERED_PAGE"));
    int64_t ctxs[16] = {8192, 32768};
    int n_ctx = 2;
    if (argc > ai + 1) {
        n_ctx = 0;
        for (int i = ai + 1; i < argc && n_ctx < 16; i++) ctxs[n_ctx++] = atoll(argv[i]);
    }
    st_ctx *ctx;
    if (st_ctx_create(NULL, &ctx)) return 1;
    st_attn_ws *ws;
    if (st_attn_ws_create(st_ctx_isa(ctx), &ws)) return 1;
    st_model *mods[2] = {NULL, NULL};
    void *img = NULL;
    size_t img_size = 0;
    st_tok *tok = NULL;
    int32_t *toks = NULL;
    int n_toks = 0, n_files = 0, rc = 0;
    if (model_path) {
        st_model_load_params lp = bench_model_load_params();
        rc = st_model_load(ctx, model_path, &lp, &mods[0]);
        if (!rc) rc = bench_text_twin(ctx, mods[0], model_path, &img, &img_size, &mods[1]);
        if (!rc) rc = st_tok_load(ctx, st_model_gguf(mods[0]), NULL, &tok);
        const st_model_hparams *hp = mods[0] ? st_model_get_hparams(mods[0]) : NULL;
        for (int i = 0; i < n_ctx && hp; i++)
            if (ctxs[i] > hp->n_ctx_train) ctxs[i] = hp->n_ctx_train;
        int64_t mx = 0;
        for (int i = 0; i < n_ctx; i++) mx = ctxs[i] > mx ? ctxs[i] : mx;
        if (!rc && bench_text_tokens(tok, mx, &toks, &n_toks, &n_files)) rc = ST_E_INVAL;
        if (!rc) {
            L = hp->n_layer, H = hp->n_head_kv, NH = hp->n_head, D = hp->head_dim;
            if (NH > ST_ATTN_MAX_HEADS || D > ST_ATTN_MAX_HEAD_DIM) rc = ST_E_LIMIT;
        }
        if (rc) fprintf(stderr, "tiered: %s: %s\n", model_path, st_ctx_error(ctx));
    }
    if (!rc) {
        printf("# KV-only: dense decode attention (%d layers, %d/%d heads of %d, f16, P=%d), hot pool = 1/8 of "
               "the KV,\n# spill in %s. bw = disk bytes streamed / time; probe = sequential 1 MiB reads,\n"
               "# alternating with the decode steps.\n", L, NH, H, D, P, dir);
        if (model_path)
            printf("# KV content: %s (trained) and its random twin prefilling %d files of the source tree\n",
                   model_path, n_files);
        printf("%-8s %6s  %9s  %10s  %8s  %8s  %6s  %11s\n", "KV", "ctx", "steps/s", "MiB/step", "bw GB/s",
               "probe", "ratio", "per round");
    }
    for (int i = 0; i < n_ctx && !rc; i++)
        for (int k = 0; k < (model_path ? 2 : 1) && !rc; k++)
            rc = bench_ctx(ctx, ws, dir, ctxs[i], mods[k], toks, !model_path ? "random" : k ? "twin" : "trained");
    free(toks);
    st_tok_destroy(tok);
    st_model_destroy(mods[0]);
    st_model_destroy(mods[1]);
    free(img);
    st_attn_ws_destroy(ws);
    st_ctx_destroy(ctx);
    return rc ? 1 : 0;
}
