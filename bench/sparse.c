/* Quest sparse decode against dense decode, side by side in one run.
 * Three modes per context length:
 *   dense    all KV in RAM, every page read;
 *   sparse   all KV in RAM, Quest budget --budget tokens;
 *   tiered   Quest as above, KV pool with a RAM budget of 1/8 of the context's KV pages and
 *            the rest spilled to a temporary directory under --spill-dir (O_DIRECT where the
 *            filesystem allows): only the selected pages are fetched.
 * Models: by default one synthetic model of --preset, fed a fixed synthetic token sequence.
 * With -m MODEL: that (trained) model and its random-weight twin of the same shape
 * (bench_text.h), both fed the same real text (the project's own docs and sources, tokenized
 * by the model's tokenizer): each prefix is prefilled by the model itself (chunked prefill)
 * and the decode steps are fed the text's next tokens (teacher forcing), so both models see
 * identical inputs; the models are interleaved context by context. A context beyond the
 * model's (its n_ctx_train, less the decode steps) is cut to fit and printed as measured.
 * The RAM sequence is prefilled up to each length in turn; the tiered one (its own pool,
 * sized for that length) is prefilled from 0 through the tier. Prefill speeds are reported
 * separately and never enter the decode figures. Each decode figure is the best of --reps
 * timed runs of N_GEN steps (after 2 untimed warm-up steps; the sequence rewound after each
 * run), the modes interleaved run by run, so a burst of load from other processes hits all
 * modes alike; the load average is printed, since on a shared 2-core machine another
 * process's threads can cut a spinning thread pool's speed several-fold.
 *
 *   build/bench/sparse [--context 1k,4k,8k,16k,32k] [-n N_GEN] [--reps R] [--budget 2048]
 *                      [--page 16] [--preset small | -m MODEL] [--dense-layers 2]
 *                      [--svg FILE] [-t THREADS] [--spill-dir DIR] [--no-tiered] [--no-dense]
 *                      [--quest-group G] [--compare-flat] [--epsilon E] [--resident-bonus B]
 *
 * --resident-bonus B gives the tiered mode Quest's residency bonus (quest.h): a page whose
 * layer block is in RAM ranks as if its bound were B nats higher. With real text (-m) every
 * mode's decode loss on the text's next tokens is printed too, which is what the bonus's
 * different page choices cost.
 * --epsilon E adds certified sparse decode (quest.h, certificates): the same budget as the
 * starting selection, grown until the skipped softmax mass is provably <= E for every query
 * head; its rows give the speed, the pages it read and the largest bound.
 * --quest-group G sets the pools' Quest group size (st_kv_params.quest_group; 1 = the flat
 * ranking). --compare-flat adds a mode: sparse decode on a copy of the RAM sequence (a
 * snapshot read into a pool with quest_group 1), interleaved with the others, so the
 * two-level and the flat ranking, which select the same pages, are timed side by side.
 *
 * Targets: sparse at 32k >= 10x llama.cpp's decode at that depth (bench_peer.h: llama-bench
 * run now when it is on PATH, else ../shared/peers/llama-bench.md) and >= 0.7x this run's own
 * sparse speed at the smallest context; tiered sparse at 32k >= 0.8x the all-in-RAM sparse
 * speed. */
#include "bench_common.h"
#include "bench_peer.h"
#include "bench_text.h"
#include "cli/ppl.h"
#include "strata/model.h"
#include "strata/quest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_POINTS 16

typedef struct point {
    long long want, ctx;            /* asked for; measured at (cut to the model's context) */
    double pp_tps, pp_tiered_tps;   /* prefill: RAM segment, tiered from 0 */
    double dense_tps, sparse_tps, tiered_tps;
    double dense_nll, sparse_nll, tiered_nll; /* real text: mean loss of the decode steps */
    double flat_tps;                /* --compare-flat: sparse on a copy of the pool, flat ranking */
    double listed_frac;             /* pages read / pages present, sparse layers */
    double scored_frac;             /* page boxes scored / ranked (two-level ranking < 1) */
    double tier_mib_step;           /* MiB read from the spill file per tiered step */
    long long ram_pages, kv_pages;  /* tiered pool */
    double cert_tps, cert_frac, cert_bound_max, cert_bound_mean; /* --epsilon mode */
    long long cert_listed, cert_total; /* its pages, to keep them out of the sparse share */
    long long cert_ranked, cert_scored; /* its boxes, likewise */
    double cert_bsum;                  /* its bounds: sum and count */
    long long cert_nb;
} point;

static double mode_tps(const point *p, int mode) {
    return mode == 0 ? p->dense_tps : mode == 1 ? p->sparse_tps : p->tiered_tps;
}

static double loadavg(void) {
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1) l = -1;
        fclose(f);
    }
    return l;
}

/* n timed decode steps (after 2 untimed ones), then the sequence is rewound. tok/s. nll not
 * NULL: *nll gets the mean loss of the text's next token over the timed steps (scored
 * outside the timed part), which shows what a mode's page choices cost in quality. */
static double decode_steps(st_runner *r, st_kv *kv, st_kv_seq_id seq, int n, const int32_t *toks,
                           float *lg, int n_vocab, double *nll, int *rc) {
    int64_t len;
    st_kv_seq_len(kv, seq, &len);
    for (int i = 0; i < 2 && !*rc; i++) {
        st_batch b = {.n_tokens = 1, .tokens = &toks[i], .seq_single = seq};
        *rc = st_runner_forward(r, &b, lg);
    }
    double dt = 0, loss = 0;
    for (int i = 0; i < n && !*rc; i++) {
        st_batch b = {.n_tokens = 1, .tokens = &toks[2 + i], .seq_single = seq};
        const double t0 = st_time_now();
        *rc = st_runner_forward(r, &b, lg);
        dt += st_time_now() - t0;
        if (nll && !*rc) loss += st_ppl_nll(lg, n_vocab, toks[3 + i]);
    }
    if (nll) *nll = loss / n;
    if (!*rc) *rc = st_kv_seq_truncate(kv, seq, len);
    return dt > 0 ? n / dt : 0;
}

/* A pool for `pages` pages of the model's geometry; ram_pages > 0: tiered under dir. */
static int quest_group; /* --quest-group: st_kv_params.quest_group of every pool (0 = default) */

static int make_kv(st_ctx *ctx, const st_model_hparams *hp, long long page, long long pages,
                   long long ram_pages, const char *dir, st_kv **kv) {
    st_kv_params kp = st_kv_default_params();
    kp.quest_group = quest_group;
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.page_size = (int)page;
    kp.n_pages = pages;
    if (ram_pages > 0) {
        kp.spill_dir = dir;
        kp.instance_id = "bench-sparse";
        kp.ram_pages = ram_pages;
    }
    return st_kv_create(ctx, &kp, kv);
}

typedef struct bench {
    st_ctx *ctx;
    const st_model *m;
    st_runner_params rp;
    st_kv_quest_params dense, sparse, cert; /* cert.certify 0: no certified mode */
    const int32_t *toks;
    int text;        /* toks is real text: decode is fed the tokens after the prefix */
    float *lg;
    long long page, n_gen, reps;
    int with_dense, compare_flat;
    const char *dir; /* NULL: no tiered mode */
} bench;

/* The tiered mode at p->ctx: a fresh pool with 1/8 of the context's pages in RAM, prefilled
 * through the tier, then measured interleaved with the RAM modes by run_point. */
static int tiered_setup(const bench *B, point *p, st_kv **kv, st_runner **r, st_kv_seq_id *seq) {
    const st_model_hparams *hp = st_model_get_hparams(B->m);
    const long long ctx_pages = (p->ctx + B->page - 1) / B->page;
    p->kv_pages = ctx_pages;
    p->ram_pages = ctx_pages / 8 > 2 ? ctx_pages / 8 : 2;
    int rc = make_kv(B->ctx, hp, B->page, ctx_pages + (B->n_gen + 4) / B->page + 4, p->ram_pages, B->dir, kv);
    if (!rc) rc = st_runner_create(B->ctx, B->m, *kv, &B->rp, r);
    if (!rc) rc = st_runner_set_quest(*r, &B->sparse, 0);
    if (!rc) rc = st_kv_seq_create(*kv, seq);
    double t0 = st_time_now();
    st_batch b = {.n_tokens = (int32_t)p->ctx, .tokens = B->toks, .seq_single = *seq};
    if (!rc) rc = st_runner_forward(*r, &b, B->lg);
    p->pp_tiered_tps = p->ctx / (st_time_now() - t0);
    return rc;
}

/* --compare-flat: a copy of the RAM sequence (through a snapshot in memory) in a pool whose
 * Quest ranking is flat (quest_group 1), with its own runner: the same keys and boxes, so
 * the same selections, ranked the other way. */
static int flat_setup(const bench *B, st_kv *kv, st_kv_seq_id seq, st_kv **fkv, st_runner **fr,
                      st_kv_seq_id *fseq) {
    const st_model_hparams *hp = st_model_get_hparams(B->m);
    const int saved = quest_group;
    quest_group = 1;
    int rc = make_kv(B->ctx, hp, B->page, st_kv_get_params(kv)->n_pages, 0, NULL, fkv);
    quest_group = saved;
    st_kv_io w, rd;
    st_kv_io_mem_writer(&w);
    int n = 0;
    if (!rc) rc = st_kv_snapshot_write(kv, &seq, 1, -1, &w);
    if (!rc) {
        st_kv_io_mem_reader(&rd, w.buf, w.len);
        rc = st_kv_snapshot_read(*fkv, &rd, fseq, 1, &n);
    }
    st_kv_io_mem_release(&w);
    if (!rc) rc = st_runner_create(B->ctx, B->m, *fkv, &B->rp, fr);
    if (!rc) rc = st_runner_set_quest(*fr, &B->sparse, 0);
    return rc;
}

/* One timed certified run (interleaved with the others by run_point), its share of pages
 * read and its bounds from the runner's counters around it. */
static int cert_run(const bench *B, st_runner *r, st_kv *kv, st_kv_seq_id seq, const int32_t *dt, point *p) {
    st_runner_quest_stats a, b;
    int rc = st_runner_set_quest(r, &B->cert, 0);
    if (rc) return rc;
    st_runner_get_quest_stats(r, &a);
    const double v = decode_steps(r, kv, seq, (int)B->n_gen, dt, B->lg, 0, NULL, &rc);
    st_runner_get_quest_stats(r, &b);
    if (rc) return rc;
    if (v > p->cert_tps) p->cert_tps = v;
    p->cert_listed += b.pages_listed - a.pages_listed;
    p->cert_total += b.pages_total - a.pages_total;
    p->cert_ranked += b.boxes_ranked - a.boxes_ranked;
    p->cert_scored += b.boxes_scored - a.boxes_scored;
    p->cert_frac = p->cert_total ? (double)p->cert_listed / (double)p->cert_total : 1;
    if (b.bound_max > p->cert_bound_max) p->cert_bound_max = b.bound_max; /* over the whole run */
    p->cert_bsum += b.bound_mean * (double)b.cert_bounds - a.bound_mean * (double)a.cert_bounds;
    p->cert_nb += b.cert_bounds - a.cert_bounds;
    p->cert_bound_mean = p->cert_nb ? p->cert_bsum / (double)p->cert_nb : 0;
    return 0;
}

static void print_cert_table(const point *pts, int np, double eps) {
    printf("\ncertified sparse decode, epsilon %g (bound on the skipped softmax mass per query head):\n"
           "| context | dense tok/s | sparse tok/s | certified tok/s | certified/dense | certified/sparse | "
           "pages read: sparse | pages read: certified | bound max (this and smaller contexts) | bound mean |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n", eps);
    for (int i = 0; i < np; i++) {
        const point *p = &pts[i];
        printf("| %lld | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f%% | %.1f%% | %.3g | %.3g |\n", p->ctx, p->dense_tps,
               p->sparse_tps, p->cert_tps, p->cert_tps / p->dense_tps, p->cert_tps / p->sparse_tps,
               100 * p->listed_frac, 100 * p->cert_frac, p->cert_bound_max, p->cert_bound_mean);
    }
}

static int run_point(const bench *B, st_runner *r, st_kv *kv, st_kv_seq_id seq, point *p) {
    st_kv *tkv = NULL, *fkv = NULL;
    st_runner *tr = NULL, *fr = NULL;
    st_kv_seq_id tseq = -1, fseq = -1;
    int rc = B->dir ? tiered_setup(B, p, &tkv, &tr, &tseq) : 0;
    if (!rc && B->compare_flat) rc = flat_setup(B, kv, seq, &fkv, &fr, &fseq);
    st_runner_quest_stats s0, s1;
    st_runner_get_quest_stats(r, &s0);
    st_kv_stats k0, k1;
    if (tkv) st_kv_get_stats(tkv, &k0);
    const int32_t *dt = B->text ? B->toks + p->ctx : B->toks + 100;
    const int nv = st_model_get_hparams(B->m)->n_vocab;
    /* the loss is the same in every rep (the same tokens): the last rep's is kept */
    double *dn = B->text ? &p->dense_nll : NULL, *sn = B->text ? &p->sparse_nll : NULL;
    double *tn = B->text ? &p->tiered_nll : NULL;
    for (long long i = 0; i < B->reps && !rc; i++) {
        double v = 0;
        if (B->with_dense && !(rc = st_runner_set_quest(r, &B->dense, 0)))
            v = decode_steps(r, kv, seq, (int)B->n_gen, dt, B->lg, nv, dn, &rc);
        if (!rc && v > p->dense_tps) p->dense_tps = v;
        if (!rc && !(rc = st_runner_set_quest(r, &B->sparse, 0)))
            v = decode_steps(r, kv, seq, (int)B->n_gen, dt, B->lg, nv, sn, &rc);
        if (!rc && v > p->sparse_tps) p->sparse_tps = v;
        if (!rc && tr) v = decode_steps(tr, tkv, tseq, (int)B->n_gen, dt, B->lg, nv, tn, &rc);
        if (!rc && tr && v > p->tiered_tps) p->tiered_tps = v;
        if (!rc && fr) v = decode_steps(fr, fkv, fseq, (int)B->n_gen, dt, B->lg, 0, NULL, &rc);
        if (!rc && fr && v > p->flat_tps) p->flat_tps = v;
        if (!rc && B->cert.certify) rc = cert_run(B, r, kv, seq, dt, p);
    }
    st_runner_get_quest_stats(r, &s1);
    s1.pages_listed -= p->cert_listed, s1.pages_total -= p->cert_total;
    s1.boxes_ranked -= p->cert_ranked, s1.boxes_scored -= p->cert_scored;
    p->listed_frac = s1.pages_total > s0.pages_total
                         ? (double)(s1.pages_listed - s0.pages_listed) / (double)(s1.pages_total - s0.pages_total)
                         : 1;
    p->scored_frac = s1.boxes_ranked > s0.boxes_ranked ? (double)(s1.boxes_scored - s0.boxes_scored) /
                                                             (double)(s1.boxes_ranked - s0.boxes_ranked)
                                                       : 0;
    if (tkv) {
        st_kv_get_stats(tkv, &k1);
        p->tier_mib_step = (double)(k1.tier_bytes_read - k0.tier_bytes_read) / 1048576.0 /
                           (double)(B->reps * (B->n_gen + 2));
    }
    st_runner_destroy(tr);
    st_kv_destroy(tkv);
    st_runner_destroy(fr);
    st_kv_destroy(fkv);
    return rc;
}

/* llama.cpp's decode at the depth of the largest context: llama-bench on this run's model
 * (written to a file for it) when it is on PATH, else the peers file's depth table, which
 * holds small Q8_0 only. */
static void peer_at_depth(const char *file, const void *gguf, size_t size, const char *preset,
                          const st_synth_params *sp, long long depth, long long n_gen, long long reps,
                          int n_threads, bench_peer *p) {
    char exe[4096], path[] = "/tmp/strata-bench-sparse-peer-XXXXXX.gguf";
    int have_file = 0;
    if (!file && !bench_peer_find_exe(exe, sizeof exe)) {
        const int fd = mkstemps(path, 5);
        FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        have_file = f && fwrite(gguf, 1, size, f) == size;
        if (f) have_file = !fclose(f) && have_file;
        else if (fd >= 0) close(fd);
        if (fd >= 0 && !have_file) unlink(path);
    }
    char args[128], col[64];
    snprintf(args, sizeof args, "-p 0 -n %lld -d %lld -r %lld", n_gen, depth, reps);
    snprintf(col, sizeof col, "d %lld", depth);
    static const char *const fa[2] = {"0", "1"};
    const int small_q8_0 = !file && !strcasecmp(preset, "small") && sp->type == ST_TYPE_Q8_0 && !sp->q4_k_m;
    bench_peer_get(file ? file : have_file ? path : NULL, n_threads, args, 0, n_gen, "Decode with the KV cache filled to a depth",
                   fa, small_q8_0 ? 2 : 0, col, p);
    if (have_file) unlink(path);
}

static void print_table(const point *pts, int np, int tiered, int flat, const bench_peer *peer) {
    printf("| context | prefill tok/s (RAM, segment) | dense tok/s | sparse tok/s | sparse/dense | "
           "pages read (sparse layers) | boxes scored / ranked |");
    if (flat) printf(" sparse, flat ranking tok/s | two-level/flat |");
    if (tiered)
        printf(" tiered sparse tok/s | tiered/sparse | RAM pages / KV pages | spill MiB/step | "
               "tiered prefill tok/s (from 0) |");
    printf("\n|---|---|---|---|---|---|---|%s%s\n", flat ? "---|---|" : "", tiered ? "---|---|---|---|---|" : "");
    for (int i = 0; i < np; i++) {
        const point *p = &pts[i];
        printf("| %lld | %.0f | %.1f | %.1f | %.2f | %.1f%% | %.1f%% |", p->ctx, p->pp_tps, p->dense_tps,
               p->sparse_tps, p->sparse_tps / p->dense_tps, 100 * p->listed_frac, 100 * p->scored_frac);
        if (flat) printf(" %.1f | %.3f |", p->flat_tps, p->sparse_tps / p->flat_tps);
        if (tiered)
            printf(" %.1f | %.2f | %lld / %lld | %.2f | %.0f |", p->tiered_tps, p->tiered_tps / p->sparse_tps,
                   p->ram_pages, p->kv_pages, p->tier_mib_step, p->pp_tiered_tps);
        printf("\n");
    }
    const point *lo = &pts[0], *hi = &pts[np - 1];
    /* three decimals and an explicit verdict: 0.696 printed as "0.70" read as a pass */
    const double flat_r = hi->sparse_tps / lo->sparse_tps;
    printf("sparse at %lld / sparse at %lld: %.3f (target >= 0.7 at 32k over 1k%s)\n", hi->ctx,
           lo->ctx, flat_r, hi->want != 32768 || lo->want != 1024 ? "" : flat_r >= 0.7 ? ": met" : ": not met");
    if (flat)
        printf("flat ranking: sparse at %lld / sparse at %lld: %.3f\n", hi->ctx, lo->ctx,
               hi->flat_tps / lo->flat_tps);
    char what[64];
    snprintf(what, sizeof what, "decode at depth %lld", hi->ctx);
    bench_peer_print(what, peer);
    if (peer->tps > 0)
        printf("sparse at %lld / llama.cpp's %.1f tok/s: %.1fx%s\n", hi->ctx, peer->tps, hi->sparse_tps / peer->tps,
               hi->want == 32768 ? " (target >= 10)" : "");
    if (tiered)
        printf("tiered sparse at %lld / all-in-RAM sparse: %.3f (target >= 0.8 at 32k: %s)\n",
               hi->ctx, hi->tiered_tps / hi->sparse_tps,
               hi->want != 32768 ? "-" : hi->tiered_tps >= 0.8 * hi->sparse_tps ? "met" : "not met");
}

/* Real text only: the mean loss of the decode steps' next tokens, per mode (teacher-forced on
 * the same tokens, so the modes differ only in the pages attended). */
static void print_loss(const point *pts, int np, int tiered, int with_dense, double bonus) {
    printf("decode loss, nats per token (the text's next token at each timed step):\n"
           "| context |%s sparse |%s\n|---|%s---|%s\n", with_dense ? " dense |" : "",
           tiered ? " tiered sparse | tiered - sparse |" : "", with_dense ? "---|" : "", tiered ? "---|---|" : "");
    for (int i = 0; i < np; i++) {
        const point *p = &pts[i];
        printf("| %lld |", p->ctx);
        if (with_dense) printf(" %.4f |", p->dense_nll);
        printf(" %.4f |", p->sparse_nll);
        if (tiered) printf(" %.4f | %+.4f |", p->tiered_nll, p->tiered_nll - p->sparse_nll);
        printf("\n");
    }
    if (tiered)
        printf("tiered residency bonus %g nats%s\n", bonus,
               bonus > 0 ? " (tiered and all-in-RAM sparse may attend different pages)"
                         : " (tiered attends the pages all-in-RAM sparse does: the losses must be equal)");
}

static void write_svg(const char *path, const point *p, int np, long long budget, int tiered, double peer_tps) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "sparse: cannot write %s\n", path);
        return;
    }
    const double W = 640, H = 400, x0 = 70, y0 = 340, xw = 520, yh = 290;
    double ymax = 0;
    for (int i = 0; i < np; i++) {
        if (p[i].dense_tps > ymax) ymax = p[i].dense_tps;
        if (p[i].sparse_tps > ymax) ymax = p[i].sparse_tps;
        if (p[i].tiered_tps > ymax) ymax = p[i].tiered_tps;
    }
    ymax = ymax > 0 ? ceil(ymax / 100) * 100 : 100;
    const double lx0 = log2((double)p[0].ctx), lx1 = log2((double)p[np - 1].ctx);
#define XP(c) (x0 + (lx1 > lx0 ? (log2((double)(c)) - lx0) / (lx1 - lx0) : 0.5) * xw)
#define YP(v) (y0 - (v) / ymax * yh)
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            W, H);
    fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">Decode speed vs context (Quest budget %lld tokens)</text>\n",
            x0, budget);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", x0, y0, x0 + xw, y0);
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"black\"/>\n", x0, y0, x0, y0 - yh);
    for (int k = 0; k <= 5; k++) {
        double v = ymax * k / 5;
        fprintf(f, "<line x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">%.0f</text>\n",
                x0, YP(v), x0 + xw, YP(v), x0 - 6, YP(v) + 4, v);
    }
    for (int i = 0; i < np; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">%lldk</text>\n", XP(p[i].ctx), y0 + 18,
                (p[i].ctx + 512) / 1024);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">context (tokens, log scale)</text>\n",
            x0 + xw / 2, y0 + 40);
    fprintf(f, "<text x=\"18\" y=\"%.0f\" transform=\"rotate(-90 18 %.0f)\" text-anchor=\"middle\">decode tok/s</text>\n",
            y0 - yh / 2, y0 - yh / 2);
    static const char *const color[3] = {"#c0392b", "#2471a3", "#27ae60"};
    static const char *const name[3] = {"dense", "sparse (Quest)", "sparse, RAM 1/8 + SSD"};
    for (int s = 0; s < (tiered ? 3 : 2); s++) {
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color[s]);
        for (int i = 0; i < np; i++)
            fprintf(f, "%.1f,%.1f ", XP(p[i].ctx), YP(mode_tps(&p[i], s)));
        fprintf(f, "\"/>\n");
        for (int i = 0; i < np; i++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n", XP(p[i].ctx),
                    YP(mode_tps(&p[i], s)), color[s]);
        fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"3\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                x0 + xw - 170, 48.0 + 16 * s, color[s], x0 + xw - 150, 53.0 + 16 * s, name[s]);
    }
    const long long top = p[np - 1].ctx;
    if (peer_tps > 0 && peer_tps <= ymax)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"none\" stroke=\"black\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">llama.cpp %lldk: %.1f</text>\n",
                XP(top), YP(peer_tps), XP(top) - 8, YP(peer_tps) - 6, (top + 512) / 1024, peer_tps);
    fprintf(f, "</svg>\n");
    fclose(f);
#undef XP
#undef YP
}

/* One model under test: its RAM pool, runner and sequence, and its points. */
typedef struct model_run {
    const char *name;
    st_model *m;
    const void *img; /* GGUF image of a model made in memory, else NULL */
    size_t img_size;
    const char *file; /* the model file, else NULL */
    st_kv *kv;
    st_runner *r;
    st_kv_seq_id seq;
    long long len;
    point pts[MAX_POINTS];
    int np;
} model_run;

static int model_run_open(st_ctx *ctx, bench *B, model_run *mr, long long max_len) {
    const st_model_hparams *hp = st_model_get_hparams(mr->m);
    int rc = make_kv(ctx, hp, B->page, max_len / B->page + 4, 0, NULL, &mr->kv);
    if (!rc) rc = st_runner_create(ctx, mr->m, mr->kv, &B->rp, &mr->r);
    if (!rc) rc = st_kv_seq_create(mr->kv, &mr->seq);
    return rc;
}

/* Prefills mr's RAM sequence up to ctx and measures the point there. */
static int model_run_point(bench *B, model_run *mr, long long want, long long ctx) {
    point *p = &mr->pts[mr->np];
    memset(p, 0, sizeof *p);
    p->want = want, p->ctx = ctx;
    B->m = mr->m;
    int rc = st_runner_set_quest(mr->r, &B->dense, 0); /* prefill is dense anyway; be explicit */
    double t0 = st_time_now();
    st_batch b = {.n_tokens = (int32_t)(ctx - mr->len), .tokens = B->toks + mr->len, .seq_single = mr->seq};
    if (!rc) rc = st_runner_forward(mr->r, &b, B->lg);
    p->pp_tps = (ctx - mr->len) / (st_time_now() - t0);
    mr->len = ctx;
    if (!rc) rc = run_point(B, mr->r, mr->kv, mr->seq, p);
    if (!rc) {
        fprintf(stderr, "  %s %lld: prefill %.0f tok/s, dense %.1f, sparse %.1f, tiered %.1f, flat-ranked %.1f tok/s\n",
                mr->name, p->ctx, p->pp_tps, p->dense_tps, p->sparse_tps, p->tiered_tps, p->flat_tps);
        mr->np++;
    }
    return rc;
}

int main(int argc, char **argv) {
    long long ctxs[MAX_POINTS] = {1024, 4096, 8192, 16384, 32768};
    int n_ctx = 5, tiered = 1, with_dense = 1, compare_flat = 0;
    double resident_bonus = 0;
    long long n_gen = 32, reps = 3, budget = 2048, page = 16, dense_layers = 2, n_threads = 0;
    double epsilon = -1; /* --epsilon: < 0 no certified mode */
    const char *svg = "sparse.svg", *preset = "small", *spill_root = "/tmp", *model_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-tiered") || !strcmp(a, "--no-dense")) {
            *(a[5] == 't' ? &tiered : &with_dense) = 0;
            continue;
        }
        if (!strcmp(a, "--compare-flat")) {
            compare_flat = 1;
            continue;
        }
        if (!v) {
            n_ctx = -1;
            break;
        }
        i++;
        if (!strcmp(a, "--context")) n_ctx = bench_parse_list(v, ctxs, MAX_POINTS);
        else if (!strcmp(a, "-n")) n_gen = atoll(v);
        else if (!strcmp(a, "--reps")) reps = atoll(v);
        else if (!strcmp(a, "--budget")) budget = atoll(v);
        else if (!strcmp(a, "--resident-bonus")) resident_bonus = atof(v);
        else if (!strcmp(a, "--page")) page = atoll(v);
        else if (!strcmp(a, "--dense-layers")) dense_layers = atoll(v);
        else if (!strcmp(a, "--svg")) svg = v;
        else if (!strcmp(a, "--preset")) preset = v;
        else if (!strcmp(a, "-m")) model_path = v;
        else if (!strcmp(a, "--quest-group")) quest_group = atoi(v);
        else if (!strcmp(a, "-t")) n_threads = atoll(v);
        else if (!strcmp(a, "--spill-dir")) spill_root = v;
        else if (!strcmp(a, "--epsilon")) epsilon = atof(v);
        else n_ctx = -1;
    }
    if (n_ctx < 1 || n_gen < 1 || reps < 1 || budget < 1 || page < 8 || epsilon > 1 || !(resident_bonus >= 0)) {
        fprintf(stderr, "usage: sparse [--context 1k,4k,...] [-n N_GEN] [--reps R] [--budget N] [--page P] "
                        "[--dense-layers N] [--preset small | -m MODEL] [--svg FILE] [-t THREADS] "
                        "[--spill-dir DIR] [--no-tiered] [--no-dense] [--quest-group G] [--compare-flat] [--epsilon E] "
                        "[--resident-bonus B]\n");
        return 2;
    }
    for (int i = 1; i < n_ctx; i++)
        if (ctxs[i] <= ctxs[i - 1]) {
            fprintf(stderr, "sparse: contexts must increase\n");
            return 2;
        }
    char dir[4096] = "";
    if (tiered) {
        if (bench_make_spill_dir(spill_root, "sparse", dir, sizeof dir)) return 1;
    }
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = (int)n_threads;
    st_ctx *ctx = NULL;
    model_run mr[2];
    memset(mr, 0, sizeof mr);
    int n_models = model_path ? 2 : 1;
    void *buf = NULL;
    size_t size = 0;
    long long max_len = ctxs[n_ctx - 1] + n_gen + 4;
    st_synth_params sp = st_synth_default_params();
    st_tok *tok = NULL;
    int32_t *toks = NULL;
    int n_toks = 0, n_files = 0;
    int rc = st_ctx_create(&cp, &ctx);
    if (!rc && model_path) {
        st_model_load_params lp = bench_model_load_params();
        rc = st_model_load(ctx, model_path, &lp, &mr[0].m);
        if (!rc) {
            const int32_t n_ctx_train = st_model_get_hparams(mr[0].m)->n_ctx_train;
            if (max_len > n_ctx_train) max_len = n_ctx_train;
            mr[0].name = "trained", mr[0].file = model_path;
            rc = bench_text_twin(ctx, mr[0].m, model_path, &buf, &size, &mr[1].m);
            mr[1].name = "random", mr[1].img = buf, mr[1].img_size = size;
        }
        if (!rc) rc = st_tok_load(ctx, st_model_gguf(mr[0].m), NULL, &tok);
        if (!rc && bench_text_tokens(tok, max_len, &toks, &n_toks, &n_files)) rc = ST_E_INVAL;
    } else if (!rc) {
        rc = st_synth_preset(preset, &sp);
        sp.n_ctx = (int32_t)max_len;
        if (!rc) rc = st_synth_write_memory(ctx, &sp, &buf, &size);
        if (!rc) rc = st_model_load_memory(ctx, buf, size, preset, &mr[0].m);
        mr[0].name = preset, mr[0].img = buf, mr[0].img_size = size;
        toks = malloc((size_t)max_len * sizeof *toks);
        if (!toks) rc = rc ? rc : ST_E_NOMEM;
        const int32_t nv = mr[0].m ? st_model_get_hparams(mr[0].m)->n_vocab : 1;
        for (long long i = 0; !rc && i < max_len; i++) toks[i] = (int32_t)((i * 7919 + 13) % nv);
    }
    const st_model_hparams *hp = mr[0].m ? st_model_get_hparams(mr[0].m) : NULL;
    bench B = {.ctx = ctx, .rp = st_runner_default_params(), .page = page, .n_gen = n_gen, .reps = reps,
               .with_dense = with_dense, .compare_flat = compare_flat, .dir = tiered ? dir : NULL, .toks = toks, .text = model_path != NULL};
    B.rp.n_batch = 512;
    B.rp.n_ctx = (int32_t)max_len;
    B.dense = B.sparse = st_kv_quest_default_params();
    B.sparse.budget = budget;
    B.sparse.dense_layers = (int32_t)dense_layers;
    B.sparse.resident_bonus = resident_bonus;
    B.cert = B.sparse;
    B.cert.certify = epsilon >= 0;
    B.cert.epsilon = epsilon >= 0 ? epsilon : 0;
    for (int k = 0; k < n_models && !rc; k++) rc = model_run_open(ctx, &B, &mr[k], max_len);
    float *lg = malloc((size_t)(hp ? hp->n_vocab : 1) * sizeof *lg);
    if (!rc && !lg) rc = ST_E_NOMEM;
    B.lg = lg;
    const double load0 = loadavg();
    if (!rc) {
        for (int k = 0; k < n_models; k++)
            printf("%s: %s\n", mr[k].name, st_model_desc(mr[k].m));
        if (model_path)
            printf("text: %d files of %s (docs, include/strata, src/*), %d tokens; decode fed the text's next "
                   "tokens\n", n_files, STRATA_SOURCE_DIR, n_toks);
        printf("KV f16, page %lld; %d threads; best of %lld runs of %lld decode steps per point; "
               "Quest budget %lld tokens, %lld dense layers, group %d pages%s%s\n", page,
               st_threadpool_n_threads(st_ctx_threadpool(ctx)), reps, n_gen, budget, dense_layers,
               quest_group > 1 ? quest_group : 1,
               tiered ? "; spill dir " : "", tiered ? dir : "");
    }
    for (int i = 0; i < n_ctx && !rc; i++) {
        long long c = ctxs[i];
        if (c + n_gen + 4 > max_len) c = max_len - n_gen - 4;
        if (c < 1 || (i > 0 && c <= mr[0].pts[mr[0].np - 1].ctx)) {
            fprintf(stderr, "sparse: context %lld does not fit the model's %lld\n", ctxs[i], max_len);
            rc = ST_E_INVAL;
        }
        for (int k = 0; k < n_models && !rc; k++) rc = model_run_point(&B, &mr[k], ctxs[i], c);
    }
    if (rc) {
        fprintf(stderr, "sparse: %s (%s)\n", st_strerror(rc), ctx ? st_ctx_error(ctx) : "");
    } else {
        const double load1 = loadavg(); /* before llama-bench, which loads the machine itself */
        for (int k = 0; k < n_models; k++) {
            bench_peer peer;
            const point *top = &mr[k].pts[mr[k].np - 1];
            peer_at_depth(mr[k].file, mr[k].img, mr[k].img_size, preset, &sp, top->ctx, n_gen, reps,
                          st_threadpool_n_threads(st_ctx_threadpool(ctx)), &peer);
            printf("\n%s (%s):\n", mr[k].name, st_model_desc(mr[k].m));
            print_table(mr[k].pts, mr[k].np, tiered, B.compare_flat, &peer);
            if (B.text) print_loss(mr[k].pts, mr[k].np, tiered, B.with_dense, resident_bonus);
            if (B.cert.certify) print_cert_table(mr[k].pts, mr[k].np, epsilon);
            if (k == 0) write_svg(svg, mr[k].pts, mr[k].np, budget, tiered, peer.tps);
        }
        if (n_models == 2) {
            const point *a = &mr[0].pts[mr[0].np - 1], *b = &mr[1].pts[mr[1].np - 1];
            printf("\nat %lld: trained / random sparse tok/s %.3f", a->ctx, a->sparse_tps / b->sparse_tps);
            if (tiered)
                printf(", tiered %.3f; spill MiB/step trained %.3f, random %.3f", a->tiered_tps / b->tiered_tps,
                       a->tier_mib_step, b->tier_mib_step);
            printf("\n");
        }
        printf("load average (1 min) at start %.2f, at end %.2f%s\n", load0, load1,
               load0 > 1.0 ? " -- other processes were running: figures are low" : "");
        printf("plot: %s\n", svg);
    }
    if (tiered && rmdir(dir)) fprintf(stderr, "sparse: could not remove %s\n", dir);
    free(toks);
    free(lg);
    for (int k = 0; k < 2; k++) {
        st_runner_destroy(mr[k].r);
        st_kv_destroy(mr[k].kv);
        st_model_destroy(mr[k].m);
    }
    st_tok_destroy(tok);
    free(buf);
    st_ctx_destroy(ctx);
    return rc ? 1 : 0;
}
