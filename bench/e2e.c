/* bench/e2e: end-to-end prefill and decode speed of the model runtime on synthetic models
 * shaped like those llama.cpp was measured on (../shared/peers/llama-bench.md), 2 threads.
 *
 *   prefill: one 512-token prompt (pp512), tok/s, best of 2
 *   decode:  128 single-token steps from an empty sequence (tg128), tok/s of the forward calls
 *            (choosing each next token is not timed: llama-bench samples nothing); and the fraction of
 *            the bandwidth roofline: (weight bytes + KV bytes read) per token / time / read
 *            bandwidth. The steps run in rounds (8 of 16 steps), each between two short read
 *            probes (256 MiB), and a round's bandwidth is rated against the mean of the probes
 *            around it: the VM's bandwidth drifts 40-60 GB/s minute to minute, so a probe
 *            taken once says little about a measurement made a minute later. The median
 *            round is printed with the range; nothing is discarded. The small model's weights
 *            (43 MB) partly stay in a 32 MB L3 between steps, so its ratio is not a pure DRAM
 *            figure and can pass 100%.
 * Ratios to llama.cpp's figures (its better of fa=0 / fa=1) are printed beside each: measured
 * by llama-bench on the same model file when it is on PATH, else read from
 * ../shared/peers/llama-bench.md (bench_peer.h), with a line saying which.
 *
 * usage: e2e [--models DIR] [--only 1b-q8_0,1b-q4_k_m,small-q8_0] [-t THREADS] [--tg N] [--prepare]
 * Missing models are made in DIR (default /tmp/strata-bench) with strata's synthetic writer,
 * tokenizer from ../shared/models/vocab/ggml-vocab-llama-spm.gguf when present ($STRATA_SHARED
 * overrides ../shared); a cached one that is not what its preset makes (shape, vocabulary,
 * tensor types) is made again. --prepare makes or checks the models and measures nothing. */
#include "bench_common.h"
#include "bench_peer.h"
#include "strata/kv.h"
#include "strata/model.h"

#include <sys/stat.h>
#include <unistd.h>

struct bmodel {
    const char *name, *preset, *type;
    const char *peer_row; /* its row in the peers file's pp512 / tg128 table */
};

static const struct bmodel models[] = {
    {"1b-q8_0", "1b", "q8_0", "1B Q8_0"},
    {"1b-q4_k_m", "1b", "q4_k_m", "1B Q4_K_M"},
    {"small-q8_0", "small", "q8_0", "small Q8_0"},
};

/* llama.cpp's t/s for one test of this model: llama-bench on the same file, else the peers
 * file's row (column "pp512" or "tgN"). */
static void peer(const struct bmodel *bm, const char *path, int n_threads, int n_prompt, int n_gen, bench_peer *p) {
    char args[64], col[32];
    snprintf(args, sizeof args, "-p %d -n %d -r 3", n_prompt, n_gen);
    if (n_prompt) snprintf(col, sizeof col, "pp%d", n_prompt);
    else snprintf(col, sizeof col, "tg%d", n_gen);
    bench_peer_get(path, n_threads, args, n_prompt, n_gen, "| model | pp512", &bm->peer_row, 1, col, p);
}

/* " (1.23x llama.cpp 45.6)", or " (no llama.cpp figure)" */
static const char *vs_peer(double tps, const bench_peer *p, char *buf, size_t cap) {
    if (p->tps > 0) snprintf(buf, cap, " (%.2fx llama.cpp %.1f)", tps / p->tps, p->tps);
    else snprintf(buf, cap, " (no llama.cpp figure)");
    return buf;
}

#define TG_ROUNDS 8

static int bench_one(st_ctx *ctx, const struct bmodel *bm, const char *path, st_membw_probe *probe,
                     int n_tg) {
    st_model *m = NULL;
    st_kv *kv = NULL;
    st_runner *r = NULL;
    st_model_load_params lp = bench_model_load_params();
    int rc = st_model_load(ctx, path, &lp, &m);
    if (rc) {
        fprintf(stderr, "e2e: %s\n", st_ctx_error(ctx));
        return rc;
    }
    const st_model_hparams *hp = st_model_get_hparams(m);
    const int n_pp = 512;
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.type = ST_TYPE_F16, kp.n_pages = (n_pp + n_tg) / 16 + 8;
    st_model_fingerprint(m, kp.fingerprint.b);
    st_runner_params rp = st_runner_default_params();
    rp.n_batch = n_pp;
    if (!rc) rc = st_kv_create(ctx, &kp, &kv);
    if (!rc) rc = st_runner_create(ctx, m, kv, &rp, &r);
    int32_t *tok = malloc(n_pp * sizeof *tok);
    float *lg = malloc((size_t)hp->n_vocab * sizeof(float));
    for (int i = 0; i < n_pp; i++) tok[i] = (int32_t)((i * 7919u + 13u) % (unsigned)hp->n_vocab);
    double pp_best = 0, tg_s = 0;
    for (int rep = 0; rep < 2 && !rc; rep++) {
        st_kv_seq_id s;
        rc = st_kv_seq_create(kv, &s);
        double t0 = st_time_now();
        st_batch b = {.n_tokens = n_pp, .tokens = tok, .seq_single = s};
        if (!rc) rc = st_runner_forward(r, &b, lg);
        double pp = n_pp / (st_time_now() - t0);
        if (pp > pp_best) pp_best = pp;
        st_kv_seq_free(kv, s);
    }
    /* decode from an empty sequence: one warm-up step, then n_tg timed steps in rounds */
    st_kv_seq_id s = 0;
    if (!rc) rc = st_kv_seq_create(kv, &s);
    int32_t t = 1;
    st_batch d = {.n_tokens = 1, .tokens = &t, .seq_single = s};
    if (!rc) rc = st_runner_forward(r, &d, lg);
    const double kv_tok = hp->n_layer * 2.0 * hp->n_head_kv * hp->head_dim * 2.0; /* f16 K+V */
    const double wbytes = (double)st_model_weight_bytes(m);
    double ratio[TG_ROUNDS], probes[TG_ROUNDS + 1], bytes_all = 0;
    int done = 0, n_rounds = 0;
    probes[0] = st_membw_probe_run(st_ctx_threadpool(ctx), probe);
    for (int k = 0; k < TG_ROUNDS && !rc; k++) {
        const int n = (n_tg * (k + 1)) / TG_ROUNDS - done;
        double bytes = 0, dt = 0; /* dt: the forward calls only (bench_argmax) */
        for (int i = 0; i < n && !rc; i++) {
            t = bench_argmax(lg, hp->n_vocab);
            bytes += wbytes + kv_tok * (double)(1 + done + i + 1); /* KV read: positions so far */
            const double t0 = st_time_now();
            rc = st_runner_forward(r, &d, lg);
            dt += st_time_now() - t0;
        }
        tg_s += dt;
        bytes_all += bytes;
        done += n;
        probes[k + 1] = st_membw_probe_run(st_ctx_threadpool(ctx), probe);
        ratio[n_rounds++] = bytes / dt / 1e9 / (0.5 * (probes[k] + probes[k + 1]));
    }
    if (rc) {
        fprintf(stderr, "e2e: %s: %s\n", bm->name, st_ctx_error(ctx));
    } else {
        double tg = n_tg / tg_s;
        double pmed = bench_median_(probes, n_rounds + 1);
        double rmed = bench_median_(ratio, n_rounds);
        /* llama.cpp after strata's own runs, so neither loads the machine while the other runs */
        const int n_threads = st_threadpool_n_threads(st_ctx_threadpool(ctx));
        bench_peer ppp, tgp;
        peer(bm, path, n_threads, n_pp, 0, &ppp);
        peer(bm, path, n_threads, 0, n_tg, &tgp);
        char vp[64], vt[64];
        printf("%-11s pp512 %8.1f tok/s%s   tg%d %7.1f tok/s%s  "
               "%.0f MB/token, %.1f GB/s = %.0f%% of roofline (median of %d rounds, %.0f-%.0f%%; "
               "probe median %.1f GB/s)\n",
               bm->name, pp_best, vs_peer(pp_best, &ppp, vp, sizeof vp), n_tg, tg, vs_peer(tg, &tgp, vt, sizeof vt),
               bytes_all / n_tg / 1e6, bytes_all / tg_s / 1e9, 100 * rmed, n_rounds, 100 * ratio[0],
               100 * ratio[n_rounds - 1], pmed);
        bench_peer_print("pp512", &ppp);
        char what[32];
        snprintf(what, sizeof what, "tg%d", n_tg);
        bench_peer_print(what, &tgp);
        fflush(stdout);
    }
    free(tok);
    free(lg);
    st_runner_destroy(r);
    st_kv_destroy(kv);
    st_model_destroy(m);
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/strata-bench", *only = NULL;
    int n_threads = 2, n_tg = 128, prepare = 0;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--prepare")) prepare = 1;
        else if (v && !strcmp(argv[i], "--models")) dir = v, i++;
        else if (v && !strcmp(argv[i], "--only")) only = v, i++;
        else if (v && !strcmp(argv[i], "-t")) n_threads = atoi(v), i++;
        else if (v && !strcmp(argv[i], "--tg")) n_tg = atoi(v), i++;
        else {
            fprintf(stderr, "usage: e2e [--models DIR] [--only NAME,...] [-t THREADS] [--tg N] [--prepare]\n");
            return 2;
        }
    }
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = n_threads;
    st_ctx *ctx = NULL;
    if (st_ctx_create(&cp, &ctx)) return 1;
    if (prepare) { /* make or check the models, measure nothing */
        int rc = 0;
        for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
            if (only && !strstr(only, models[i].name)) continue;
            char path[1024];
            if (bench_ensure_model(ctx, "e2e", models[i].name, models[i].preset, models[i].type, bench_shared_dir(), dir, path, sizeof path)) rc = 1;
            else printf("%s: ready\n", path);
        }
        st_ctx_destroy(ctx);
        return rc;
    }
    char kname[64];
    printf("kernels: %s\n", bench_kernels_name(st_kernels_get_ex(st_ctx_isa(ctx), st_ctx_amx(ctx)), kname, sizeof kname));
    double bw = st_membw_read(st_ctx_threadpool(ctx), 0, 5);
    printf("read bandwidth probe (%d threads, 1 GiB, best of 5): %.1f GB/s (for reference; the "
           "roofline uses the probes around each decode round)\n", n_threads, bw);
    st_membw_probe probe;
    if (st_membw_probe_init(&probe, (size_t)256 << 20)) {
        fprintf(stderr, "e2e: out of memory for the probe\n");
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        if (only && !strstr(only, models[i].name)) continue;
        char path[1024];
        if (bench_ensure_model(ctx, "e2e", models[i].name, models[i].preset, models[i].type, bench_shared_dir(), dir, path, sizeof path)) {
            rc = 1;
            continue;
        }
        if (bench_one(ctx, &models[i], path, &probe, n_tg)) rc = 1;
    }
    printf("targets: decode >= 1.1x llama.cpp and >= 85%% of roofline; prefill >= 0.8x llama.cpp pp512\n");
    st_membw_probe_free(&probe);
    st_ctx_destroy(ctx);
    return rc;
}
