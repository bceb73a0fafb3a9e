/* bench/batch: the engine (continuous batching, include/strata/engine.h) under concurrent
 * requests, on synthetic models (strata's synthetic writer, as bench/e2e), 2 threads.
 *
 *   1. throughput: N concurrent requests (N = 1, 4, 16, 64 on the small model, Q8_0), all
 *      submitted at once, each a different 128-token prompt and exactly 128 generated tokens
 *      (greedy, ignore_eos). n_parallel N, n_batch max(256, N), n_ctx 512. Three figures,
 *      all "generated tokens / wall seconds" with the clock read after each st_engine_step:
 *        e2e     all generated tokens / (last finish - submit): prefill included
 *        decode  tokens generated after the last request's first token / (last finish - that
 *                moment): every prompt has been read; the tail, where early requests have
 *                finished and fewer streams run, is included
 *        steady  tokens generated after the last first token up to and including the first
 *                finish / that span: all N streams decode in every step counted
 *   2. time to first token (stats.t_first: submit to first token) of a 512-token prompt
 *      submitted while 16 requests decode (n_parallel 17, n_batch 256, n_ctx 1024), against
 *      the same-length prompt on the idle engine; medians of 3 (different prompts, nothing
 *      cached).
 *   3. a 2048-token prefix + 64-token suffix: TTFT after another request with the same prefix
 *      ran and finished (its pages in the prefix cache; median of 3 suffixes) against the same
 *      request on a fresh engine (cold). n_ctx 4096, n_batch 256. stats.n_cached printed.
 *   4. targets, and strata / llama-server ratios with the llama-server figures parsed from
 *      ../shared/peers/llama-bench.md (a run made elsewhere, not in this one).
 *
 * usage: batch [--model small|1b|both] [--1b] [--quick] [--n 1,4,16,64] [--models DIR] [-t THREADS]
 *   --n: the small model's request counts (at most 8, each <= 256) instead of 1,4,16,64.
 *   --1b (= --model both): the 1b preset (Q4_K_M) too, at 1 and 16 requests, 64-token prompts
 *   and 32 generated tokens each (it decodes at ~10-20 tok/s single-stream here).
 *   --quick: small at 1, 4, 16 only, 64 generated tokens, one run per N and one rep in sections 2 and 3.
 * Each small-model N runs twice (a fresh engine each time) and the run with the better steady
 * figure is printed with the range: on this shared VM one configuration measured 100-600 tok/s
 * from run to run.
 * Models are made in DIR (default /tmp/strata-bench) when missing, named as bench/e2e names
 * them, so either bench reuses the other's files. */
#include "bench_common.h"
#include "bench_peer.h"
#include "strata/engine.h"
#include "strata/model.h"

#include <sys/stat.h>
#include <unistd.h>

static int n_threads = 2;

/* ../shared: bench_shared_dir() ($STRATA_SHARED, else beside the source tree); a git worktree
 * at W/wt/NAME has it two levels up (W/shared), so that is tried when the first has no peers/. */
static const char *shared_dir(void) {
    static char buf[1024];
    const char *d = bench_shared_dir();
    snprintf(buf, sizeof buf, "%s/peers", d);
    if (getenv("STRATA_SHARED") || access(buf, R_OK) == 0) return d;
    snprintf(buf, sizeof buf, "%s/../../shared/peers", STRATA_SOURCE_DIR);
    if (access(buf, R_OK) == 0) {
        snprintf(buf, sizeof buf, "%s/../../shared", STRATA_SOURCE_DIR);
        return buf;
    }
    return d;
}

/* ---- the engine ---------------------------------------------------------------------------- */

static st_engine *open_engine(const char *path, int n_parallel, int n_batch, int n_ctx) {
    st_engine_params p = st_engine_default_params();
    p.model_path = path;
    p.use_mmap = bench_model_load_params().use_mmap; /* as the CLI: read (quads) unless STRATA_MMAP=1 */
    p.n_threads = n_threads;
    p.n_parallel = n_parallel;
    p.n_batch = n_batch;
    p.n_ctx = n_ctx;
    p.max_queue = 4 * n_parallel + 8;
    st_engine *e = NULL;
    char why[512] = "";
    if (st_engine_create(&p, &e, why, sizeof why)) {
        fprintf(stderr, "batch: engine: %s\n", why);
        return NULL;
    }
    return e;
}

/* ---- driving ------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static int32_t rnd_token(int32_t n_vocab) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return 3 + (int32_t)((rng_state >> 33) % (uint64_t)(n_vocab - 3));
}
static void rnd_prompt(int32_t *t, int n, int32_t n_vocab) {
    for (int i = 0; i < n; i++) t[i] = rnd_token(n_vocab);
    t[0] = 1; /* BOS */
}

static int submit(st_engine *e, const int32_t *tok, int n, int max_tokens, st_req_id *id) {
    st_engine_req_params rp = st_engine_req_default_params();
    rp.tokens = tok, rp.n_tokens = n;
    rp.sampling.temp = 0; /* greedy */
    rp.max_tokens = max_tokens;
    rp.ignore_eos = 1;
    int rc = st_engine_submit(e, &rp, id);
    if (rc) fprintf(stderr, "batch: submit: %s\n", st_ctx_error(st_engine_ctx(e)));
    return rc;
}

/* One step; *t the clock after it. Returns the engine's rc. */
static int step(st_engine *e, const st_engine_event **ev, int *nev, double *t) {
    int rc = st_engine_step(e, ev, nev);
    *t = st_time_now();
    if (rc) fprintf(stderr, "batch: step: %s\n", st_ctx_error(st_engine_ctx(e)));
    return rc;
}

/* Runs until no request is active; the finish event of `watch` (if nonzero) into *out. */
static int drain(st_engine *e, st_req_id watch, st_engine_event *out) {
    while (st_engine_n_active(e) > 0) {
        const st_engine_event *ev;
        int nev;
        double t;
        if (step(e, &ev, &nev, &t)) return -1;
        for (int k = 0; k < nev; k++)
            if (ev[k].finish && ev[k].req == watch && out) *out = ev[k];
    }
    return 0;
}

/* A short request run to its end: thread pool and pages warmed. */
static int warm_up(st_engine *e) {
    int32_t t[16];
    rnd_prompt(t, 16, st_model_get_hparams(st_engine_model(e))->n_vocab);
    st_req_id id;
    if (submit(e, t, 16, 4, &id)) return -1;
    return drain(e, 0, NULL);
}

/* ---- 1. throughput ------------------------------------------------------------------------ */

typedef struct tput {
    int n, n_prompt, n_gen;
    double e2e, decode, steady; /* tok/s */
    double t_prefilled;         /* seconds from submit to the last first token */
    double wall;
    int ok;
} tput;

static int bench_tput(const char *path, int n, int n_prompt, int n_gen, tput *r) {
    memset(r, 0, sizeof *r);
    r->n = n, r->n_prompt = n_prompt, r->n_gen = n_gen;
    const int n_batch = n > 256 ? n : 256;
    st_engine *e = open_engine(path, n, n_batch, 512);
    if (!e) return -1;
    int rc = warm_up(e);
    const int32_t nv = st_model_get_hparams(st_engine_model(e))->n_vocab;
    int32_t *prompts = malloc(sizeof(int32_t) * (size_t)n * (size_t)n_prompt);
    st_req_id *ids = calloc((size_t)n, sizeof *ids);
    double *first = calloc((size_t)n, sizeof *first), *fin = calloc((size_t)n, sizeof *fin);
    int *gen = calloc((size_t)n, sizeof *gen);
    int cap = 1 << 14, ns = 0;
    double *st = malloc(sizeof(double) * (size_t)cap);
    int *stok = malloc(sizeof(int) * (size_t)cap);
    for (int i = 0; i < n; i++) rnd_prompt(prompts + (size_t)i * n_prompt, n_prompt, nv);
    const double t0 = st_time_now();
    for (int i = 0; i < n && !rc; i++) rc = submit(e, prompts + (size_t)i * n_prompt, n_prompt, n_gen, &ids[i]);
    int bad = 0;
    while (!rc && st_engine_n_active(e) > 0) {
        const st_engine_event *ev;
        int nev;
        double t;
        if ((rc = step(e, &ev, &nev, &t))) break;
        int ntok = 0;
        for (int k = 0; k < nev; k++) {
            int i = (int)(ev[k].req - ids[0]);
            if (i < 0 || i >= n || ids[i] != ev[k].req)
                for (i = 0; i < n && ids[i] != ev[k].req; i++) {}
            if (i == n) continue;
            if (ev[k].token >= 0) {
                ntok++;
                if (gen[i]++ == 0) first[i] = t;
            }
            if (ev[k].finish) {
                fin[i] = t;
                if (ev[k].finish != ST_FINISH_LENGTH || ev[k].stats.n_generated != n_gen) bad++;
            }
        }
        if (ns == cap) {
            cap *= 2;
            st = realloc(st, sizeof(double) * (size_t)cap);
            stok = realloc(stok, sizeof(int) * (size_t)cap);
        }
        st[ns] = t, stok[ns++] = ntok;
    }
    if (!rc) {
        double all_first = 0, first_fin = 1e300, last = 0;
        long total = 0;
        for (int i = 0; i < n; i++) {
            if (first[i] > all_first) all_first = first[i];
            if (fin[i] < first_fin) first_fin = fin[i];
            if (fin[i] > last) last = fin[i];
            total += gen[i];
            if (gen[i] != n_gen) bad++;
        }
        long dec = 0, stdy = 0;
        for (int s = 0; s < ns; s++) {
            if (st[s] <= all_first) continue;
            dec += stok[s];
            if (st[s] <= first_fin) stdy += stok[s];
        }
        r->e2e = total / (last - t0);
        r->decode = last > all_first ? dec / (last - all_first) : 0;
        r->steady = first_fin > all_first ? stdy / (first_fin - all_first) : r->decode;
        r->t_prefilled = all_first - t0;
        r->wall = last - t0;
        r->ok = !bad;
        if (bad) fprintf(stderr, "batch: %d requests did not generate exactly %d tokens\n", bad, n_gen);
    }
    free(prompts), free(ids), free(first), free(fin), free(gen), free(st), free(stok);
    st_engine_destroy(e);
    return rc;
}

/* ---- 2. TTFT under load ------------------------------------------------------------------- */

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct ttft {
    double idle, busy;       /* medians, seconds */
    double busy_step_max;    /* longest step while a probe was being read (decoders' stall) */
    double idle_step_decode; /* median step time of the 16 decoders with no probe */
    int reps, cached;
} ttft;

#define N_BG 16
#define PROBE 512

static int bench_ttft(const char *path, int reps, ttft *r) {
    memset(r, 0, sizeof *r);
    r->reps = reps;
    st_engine *e = open_engine(path, N_BG + 1, 256, 1024);
    if (!e) return -1;
    int rc = warm_up(e);
    const int32_t nv = st_model_get_hparams(st_engine_model(e))->n_vocab;
    static int32_t bg[N_BG][128], probe[PROBE];
    st_req_id bid[N_BG];
    double busy[8], idle[8], dstep[64];
    int nd = 0;
    for (int i = 0; i < N_BG && !rc; i++) {
        rnd_prompt(bg[i], 128, nv);
        rc = submit(e, bg[i], 128, 1024 - 128 - 8, &bid[i]);
    }
    /* until every background request decodes, then 8 more steps (timed: the decode step) */
    int decoding = 0, after = 0;
    double tprev = st_time_now();
    while (!rc && after < 8) {
        const st_engine_event *ev;
        int nev;
        double t;
        if ((rc = step(e, &ev, &nev, &t))) break;
        if (decoding == N_BG) {
            if (nd < 64) dstep[nd++] = t - tprev;
            after++;
        }
        for (int k = 0; k < nev; k++)
            if (ev[k].token >= 0 && ev[k].stats.n_generated == 1) decoding++;
        tprev = t;
    }
    r->idle_step_decode = nd ? median(dstep, nd) : 0;
    for (int rep = 0; rep < reps && !rc; rep++) {
        rnd_prompt(probe, PROBE, nv);
        st_req_id pid;
        if ((rc = submit(e, probe, PROBE, 1, &pid))) break;
        int done = 0;
        tprev = st_time_now();
        while (!rc && !done) {
            const st_engine_event *ev;
            int nev;
            double t;
            if ((rc = step(e, &ev, &nev, &t))) break;
            if (t - tprev > r->busy_step_max) r->busy_step_max = t - tprev;
            tprev = t;
            for (int k = 0; k < nev; k++)
                if (ev[k].req == pid && ev[k].finish) {
                    busy[rep] = ev[k].stats.t_first;
                    r->cached += ev[k].stats.n_cached;
                    done = 1;
                }
        }
        if (st_engine_n_active(e) != N_BG) {
            fprintf(stderr, "batch: a background request finished early\n");
            rc = -1;
        }
    }
    for (int i = 0; i < N_BG && !rc; i++) st_engine_cancel(e, bid[i]);
    if (!rc) rc = drain(e, 0, NULL);
    for (int rep = 0; rep < reps && !rc; rep++) {
        rnd_prompt(probe, PROBE, nv);
        st_req_id pid;
        st_engine_event fe = {0};
        if ((rc = submit(e, probe, PROBE, 1, &pid))) break;
        rc = drain(e, pid, &fe);
        idle[rep] = fe.stats.t_first;
        r->cached += fe.stats.n_cached;
    }
    if (!rc) r->busy = median(busy, reps), r->idle = median(idle, reps);
    st_engine_destroy(e);
    return rc;
}

/* ---- 3. cached prefix --------------------------------------------------------------------- */

#define PREFIX 2048
#define SUFFIX 64

typedef struct pcache {
    double cold, warm; /* seconds; warm: median */
    int cached_cold, cached_warm, reps;
} pcache;

static int run_one(st_engine *e, const int32_t *tok, int n, st_engine_event *fe) {
    st_req_id id;
    int rc = submit(e, tok, n, 1, &id);
    if (!rc) rc = drain(e, id, fe);
    return rc;
}

static int bench_prefix(const char *path, int reps, pcache *r) {
    memset(r, 0, sizeof *r);
    r->reps = reps;
    static int32_t a[PREFIX + SUFFIX], b[8][PREFIX + SUFFIX];
    st_engine *e = open_engine(path, 2, 256, 4096);
    if (!e) return -1;
    const int32_t nv = st_model_get_hparams(st_engine_model(e))->n_vocab;
    rnd_prompt(a, PREFIX + SUFFIX, nv);
    for (int i = 0; i < reps; i++) {
        memcpy(b[i], a, sizeof(int32_t) * PREFIX);
        for (int t = PREFIX; t < PREFIX + SUFFIX; t++) b[i][t] = rnd_token(nv);
    }
    double warm[8];
    st_engine_event fe = {0};
    int rc = warm_up(e);
    if (!rc) rc = run_one(e, a, PREFIX + SUFFIX, &fe); /* puts the prefix's pages in the cache */
    for (int i = 0; i < reps && !rc; i++) {
        rc = run_one(e, b[i], PREFIX + SUFFIX, &fe);
        warm[i] = fe.stats.t_first;
        r->cached_warm = fe.stats.n_cached;
    }
    st_engine_destroy(e);
    if (rc) return rc;
    e = open_engine(path, 2, 256, 4096); /* fresh: nothing cached */
    if (!e) return -1;
    rc = warm_up(e);
    if (!rc) rc = run_one(e, b[0], PREFIX + SUFFIX, &fe);
    r->cold = fe.stats.t_first;
    r->cached_cold = fe.stats.n_cached;
    r->warm = median(warm, reps);
    st_engine_destroy(e);
    return rc;
}

/* ---- 4. the peer's figures ---------------------------------------------------------------- */


static int on_path(const char *name) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char buf[4096];
    while (*path) {
        const char *e = strchr(path, ':');
        size_t n = e ? (size_t)(e - path) : strlen(path);
        snprintf(buf, sizeof buf, "%.*s/%s", (int)n, path, name);
        if (n && access(buf, X_OK) == 0) return 1;
        path += n + (e != NULL);
    }
    return 0;
}

static const char *pass(int ok) {
    return ok ? "PASS" : "MISS";
}

int main(int argc, char **argv) {
    const char *dir = "/tmp/strata-bench", *which = "small";
    int quick = 0, n_user = 0;
    long long user_ns[8];
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--1b")) which = "both";
        else if (v && !strcmp(argv[i], "--model")) which = v, i++;
        else if (v && !strcmp(argv[i], "--models")) dir = v, i++;
        else if (v && !strcmp(argv[i], "--n") && (n_user = bench_parse_list(v, user_ns, 8)) > 0) i++;
        else if (v && !strcmp(argv[i], "-t")) n_threads = atoi(v), i++;
        else {
            fprintf(stderr, "usage: batch [--model small|1b|both] [--1b] [--quick] [--n 1,4,16,64] [--models DIR] [-t THREADS]\n");
            return 2;
        }
    }
    const int do_small = !strcmp(which, "small") || !strcmp(which, "both");
    const int do_1b = !strcmp(which, "1b") || !strcmp(which, "both");
    if (!do_small && !do_1b) {
        fprintf(stderr, "batch: --model small|1b|both\n");
        return 2;
    }
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = n_threads;
    st_ctx *ctx = NULL;
    if (st_ctx_create(&cp, &ctx)) return 1;
    char kname[64], small[1024], big[1024];
    printf("kernels: %s, %d threads\n", bench_kernels_name(st_kernels_get_ex(st_ctx_isa(ctx), st_ctx_amx(ctx)), kname, sizeof kname),
           n_threads);
    /* how much of the machine this run has: a starved VM reads far below its ~21-23 GB/s */
    double bw = st_membw_read(st_ctx_threadpool(ctx), (size_t)256 << 20, 3);
    char la[64] = "?";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (!fgets(la, sizeof la, lf)) snprintf(la, sizeof la, "?");
        la[strcspn(la, "\n")] = 0;
        fclose(lf);
    }
    printf("read bandwidth probe (%d threads, 256 MiB, best of 3): %.1f GB/s; /proc/loadavg: %s\n", n_threads, bw,
           la);
    int rc = 0;
    if (do_small && bench_ensure_model(ctx, "batch", "small-q8_0", "small", "q8_0", shared_dir(), dir, small, sizeof small)) rc = 1;
    if (do_1b && bench_ensure_model(ctx, "batch", "1b-q4_k_m", "1b", "q4_k_m", shared_dir(), dir, big, sizeof big)) rc = 1;
    st_ctx_destroy(ctx);
    if (rc) return 1;

    /* the peer */
    char mdpath[1024];
    snprintf(mdpath, sizeof mdpath, "%s/peers/llama-bench.md", shared_dir());
    size_t mdn = 0;
    char *md = bench_read_file(mdpath, &mdn);
    double peer_small[3] = {0}, peer_1b[3] = {0};
    int have_peer_small = md && !bench_peer_server_row(md, "small Q8_0", peer_small);
    int have_peer_1b = md && !bench_peer_server_row(md, "1B Q4_K_M", peer_1b);
    free(md);

    const double t_start = st_time_now();
    tput ts[8], tb[2];
    int nts = 0, ntb = 0;
    static const int ns_full[] = {1, 4, 16, 64}, ns_quick[] = {1, 4, 16};
    int ns_user[8];
    for (int k = 0; k < n_user; k++) ns_user[k] = user_ns[k] > 256 ? 256 : (int)user_ns[k];
    const int *ns = n_user ? ns_user : quick ? ns_quick : ns_full;
    const int nns = n_user ? n_user : quick ? 3 : 4;
    const int small_gen = quick ? 64 : 128;
    const int tp_reps = quick ? 1 : 2; /* runs per N; the one with the best steady figure is printed */
    if (do_small) {
        printf("\n1. throughput, small Q8_0: N concurrent requests, 128-token prompts (different), %d generated "
               "tokens each (greedy, ignore_eos); n_batch max(256, N), n_ctx 512; best of %d runs\n"
               "   e2e: all tokens / (submit -> last finish); decode: tokens after the last first token / (that -> "
               "last finish); steady: the same up to the first finish (all N streams decode)\n",
               small_gen, tp_reps);
        printf("   %4s %10s %10s %10s %10s %10s %s\n", "N", "e2e tok/s", "decode", "steady", "prefilled", "wall",
               "check");
        for (int k = 0; k < nns && !rc; k++) {
            tput *r = &ts[nts], t;
            double lo = 1e300, hi = 0;
            for (int rep = 0; rep < tp_reps && !rc; rep++) {
                if (bench_tput(small, ns[k], 128, small_gen, &t)) rc = 1;
                else {
                    if (t.steady < lo) lo = t.steady;
                    if (t.steady > hi) hi = t.steady;
                    if (!rep || t.steady > r->steady) *r = t;
                    if (!t.ok) r->ok = 0;
                }
            }
            if (rc) break;
            nts++;
            printf("   %4d %10.1f %10.1f %10.1f %9.2fs %9.2fs %s (steady over %d runs %.1f-%.1f)\n", r->n, r->e2e,
                   r->decode, r->steady, r->t_prefilled, r->wall, r->ok ? "ok" : "WRONG TOKEN COUNT", tp_reps, lo,
                   hi);
            fflush(stdout);
        }
    }
    if (do_1b && !rc) {
        printf("\n1b. throughput, 1b Q4_K_M: 64-token prompts, 32 generated tokens each, N = 1 and 16\n");
        printf("   %4s %10s %10s %10s %10s %10s %s\n", "N", "e2e tok/s", "decode", "steady", "prefilled", "wall",
               "check");
        static const int nb[] = {1, 16};
        for (int k = 0; k < 2 && !rc; k++) {
            tput *r = &tb[ntb];
            if (bench_tput(big, nb[k], 64, 32, r)) {
                rc = 1;
                break;
            }
            ntb++;
            printf("   %4d %10.1f %10.1f %10.1f %9.2fs %9.2fs %s\n", r->n, r->e2e, r->decode, r->steady,
                   r->t_prefilled, r->wall, r->ok ? "ok" : "WRONG TOKEN COUNT");
            fflush(stdout);
        }
    }
    ttft tt = {0};
    pcache pc = {0};
    int have_tt = 0, have_pc = 0;
    const int reps = quick ? 1 : 3;
    if (do_small && !rc) {
        printf("\n2. time to first token, small Q8_0: a %d-token prompt (1 token generated) submitted while %d "
               "requests decode, vs on the idle engine; n_parallel 17, n_batch 256; median of %d\n",
               PROBE, N_BG, reps);
        if (bench_ttft(small, reps, &tt)) rc = 1;
        else {
            have_tt = 1;
            printf("   idle %.1f ms, under load %.1f ms: %.2fx; the 16 decoders' step %.1f ms alone, longest step "
                   "while a prompt was read %.1f ms; cached tokens of the probes %d\n",
                   1e3 * tt.idle, 1e3 * tt.busy, tt.busy / tt.idle, 1e3 * tt.idle_step_decode,
                   1e3 * tt.busy_step_max, tt.cached);
        }
        fflush(stdout);
    }
    if (do_small && !rc) {
        printf("\n3. cached prefix, small Q8_0: %d-token prefix + %d-token suffix (1 token generated), after a "
               "request with the same prefix finished vs cold (fresh engine); n_ctx 4096, n_batch 256\n",
               PREFIX, SUFFIX);
        if (bench_prefix(small, reps, &pc)) rc = 1;
        else {
            have_pc = 1;
            printf("   cold %.1f ms (n_cached %d), cached %.1f ms (n_cached %d, median of %d): %.1fx sooner\n",
                   1e3 * pc.cold, pc.cached_cold, 1e3 * pc.warm, pc.cached_warm, pc.reps, pc.cold / pc.warm);
        }
        fflush(stdout);
    }

    printf("\ntargets (small Q8_0):\n");
    const tput *s1 = NULL, *s16 = NULL, *s4 = NULL;
    for (int i = 0; i < nts; i++) {
        if (ts[i].n == 1) s1 = &ts[i];
        if (ts[i].n == 4) s4 = &ts[i];
        if (ts[i].n == 16) s16 = &ts[i];
    }
    if (s1 && s16) {
        double rs = s16->steady / s1->steady, re = s16->e2e / s1->e2e;
        printf("   16 concurrent >= 4x single-stream tok/s   steady decode %.2fx %s   (e2e %.2fx %s)\n", rs,
               pass(rs >= 4), re, pass(re >= 4));
    }
    if (have_tt)
        printf("   TTFT of a 512-token prompt under 16 decoding <= 2x idle   %.2fx %s\n", tt.busy / tt.idle,
               pass(tt.busy / tt.idle <= 2));
    if (have_pc)
        printf("   2k cached prefix TTFT >= 10x sooner than cold   %.1fx %s\n", pc.cold / pc.warm,
               pass(pc.cold / pc.warm >= 10));

    printf("\npeer: llama-server -np 16 -c 8192 -t 2, N streaming clients, aggregate generated tok/s, from %s "
           "(measured there, not in this run; its clients made 64 new tokens (small) / 32 (1B))\n",
           mdpath);
    if (!have_peer_small) printf("   small Q8_0: no figures found in that file\n");
    else {
        const tput *mine[3] = {s1, s4, s16};
        const char *lab[3] = {"1", "4", "16"};
        for (int k = 0; k < 3; k++) {
            if (!mine[k] || peer_small[k] <= 0) continue;
            printf("   small Q8_0 %2s client%s: llama-server %6.1f, strata e2e %7.1f (%.2fx), decode %7.1f "
                   "(%.2fx)\n",
                   lab[k], k ? "s" : " ", peer_small[k], mine[k]->e2e, mine[k]->e2e / peer_small[k],
                   mine[k]->decode, mine[k]->decode / peer_small[k]);
        }
    }
    if (ntb) {
        if (!have_peer_1b) printf("   1B Q4_K_M: no figures found in that file\n");
        for (int i = 0; i < ntb && have_peer_1b; i++) {
            const double pv = tb[i].n == 1 ? peer_1b[0] : tb[i].n == 16 ? peer_1b[2] : 0;
            if (pv > 0)
                printf("   1B Q4_K_M %2d client%s: llama-server %6.1f, strata e2e %7.1f (%.2fx), decode %7.1f "
                       "(%.2fx)\n",
                       tb[i].n, tb[i].n > 1 ? "s" : " ", pv, tb[i].e2e, tb[i].e2e / pv, tb[i].decode,
                       tb[i].decode / pv);
        }
    }
    const int ls = on_path("llama-server"), lb = on_path("llama-batched-bench");
    printf("   llama-server on PATH: %s; llama-batched-bench on PATH: %s (not run by this bench)\n",
           ls ? "yes" : "no", lb ? "yes" : "no");
    printf("total %.0f s\n", st_time_now() - t_start);
    return rc;
}
