/* bench/spec: speculative decoding by prompt lookup (engine spec_ngram) and by a draft model
 * (engine draft_model_path) against plain decode,
 * side by side in one run, one request at a time, greedy, 2 threads.
 *
 * Tasks:
 *   copy  the model is given a passage and the same passage again up to its middle, so the
 *         text to write next is the rest of the passage (what an edit or a repeat request
 *         looks like to a model): prompt lookup drafts it from the prompt.
 *   free  plain continuation of a short prompt.
 * Models: the built-in synthetic model (random weights: it does not copy, but falls into
 * loops the lookup catches), stories260K and tiny-long from ../shared/models when present.
 * For each: decode tok/s (generated tokens after the first / the time since the first),
 * plain and with drafting, the ratio, the acceptance rate (accepted / drafted), rounds, the
 * steps the engine's cost check held drafting back (verify steps had cost more per token), and
 * whether the two token streams are identical (they must be). Plain and speculative runs
 * alternate and the best of --reps runs of each is printed.
 *
 * With both trained models present, each also drafts for the other (their vocabularies are
 * the same): rows for the draft model alone and for lookup with the draft model behind it,
 * each against the same plain runs.
 *
 * --cpu-time times runs by the process's CPU seconds (for a loaded machine, at -t 1).
 * -m MODEL.gguf (repeatable) adds a model's lookup rows, at its own context (min(its, 4096)):
 * a trained model of another vocabulary, such as a llama2.c checkpoint made GGUF by
 * `strata convert`.
 *
 * usage: spec [-t THREADS] [-n TOKENS] [--ngram N] [--draft-max M] [--draft-p-min P] [--reps R]
 *             [--cpu-time] [--synth none|small|1b|both] [--models DIR] [-m MODEL.gguf ...] */
#include "bench_common.h"
#include "strata/engine.h"

#include <time.h>
#include <unistd.h>

static int n_threads = 2, n_gen = 128, ngram = 3, draft_max = 8, reps = 3;
static float p_min = ST_ENGINE_DRAFT_P_MIN_DEFAULT;
static int cpu_clock; /* --cpu-time: the process's CPU seconds instead of wall seconds */

/* With --cpu-time a run is timed by the CPU it used (every thread of the process), which
 * other processes on a loaded machine do not inflate the way they inflate wall time; at one
 * thread it is the work done. */
static double now_s(void) {
    if (!cpu_clock) return st_time_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct res {
    double tps;
    int32_t toks[1024];
    int n;
    st_engine_stats es;
} res;

/* One way of drafting: prompt lookup (ngram > 0), a draft model (draft: its path), or both. */
typedef struct src {
    const char *name;
    int ngram;
    const char *draft;
} src;

static int run_one(st_engine *e, const char *prompt, const src *sc, res *r) {
    st_engine_req_params rp = st_engine_req_default_params();
    rp.text = prompt, rp.text_len = strlen(prompt);
    rp.sampling.temp = 0;
    rp.max_tokens = n_gen;
    rp.ignore_eos = 1;
    rp.spec_ngram = sc ? sc->ngram : 0;
    rp.spec_draft = sc && sc->draft;
    rp.draft_max = draft_max;
    st_req_id id;
    if (st_engine_submit(e, &rp, &id)) return -1;
    r->n = 0;
    double t_first = 0, t_end = 0;
    for (int done = 0; !done;) {
        const st_engine_event *ev;
        int nev;
        if (st_engine_step(e, &ev, &nev)) return -1;
        const double now = now_s();
        for (int k = 0; k < nev; k++) {
            if (ev[k].token >= 0 && r->n < 1024) {
                if (!r->n) t_first = now;
                r->toks[r->n++] = ev[k].token;
            }
            if (ev[k].finish) done = 1, t_end = now;
        }
    }
    r->tps = t_end > t_first && r->n > 1 ? (r->n - 1) / (t_end - t_first) : 0;
    return 0;
}

/* one run on a fresh engine (nothing cached); sc NULL: plain decode */
static int measure(const st_engine_params *p, const char *prompt, const src *sc, res *r) {
    st_engine *e = NULL;
    char why[512];
    st_engine_params q = *p;
    q.draft_model_path = sc ? sc->draft : NULL;
    if (st_engine_create(&q, &e, why, sizeof why)) {
        fprintf(stderr, "spec: %s\n", why);
        return -1;
    }
    int rc = run_one(e, prompt, sc, r);
    st_engine_get_stats(e, &r->es);
    st_engine_destroy(e);
    return rc;
}

#define MAX_SRC 4

/* Plain decode and each drafting source in turn, alternating, so all see the machine's load
 * alike; the best of each is kept and every source's row is its ratio to the same plain. */
static void rows(const char *model, const char *task, const st_engine_params *p, const char *prompt, const src *sc,
                 int n_src) {
    static res best[MAX_SRC + 1], r;
    for (int j = 0; j <= n_src; j++) best[j].tps = 0;
    for (int i = 0; i < reps; i++)
        for (int j = 0; j <= n_src; j++) {
            if (measure(p, prompt, j ? &sc[j - 1] : NULL, &r)) {
                printf("| %s | %s | %s | error | | | | | | |\n", model, j ? sc[j - 1].name : "plain", task);
                return;
            }
            if (r.tps > best[j].tps) best[j] = r;
        }
    const res *a = &best[0];
    for (int j = 1; j <= n_src; j++) {
        const res *b = &best[j];
        const int same = a->n == b->n && !memcmp(a->toks, b->toks, sizeof(int32_t) * (size_t)a->n);
        printf("| %s | %s | %s | %.1f | %.1f | %.2fx | %.0f%% (%lld/%lld) | %lld | %lld | %s |\n", model, sc[j - 1].name,
               task, a->tps, b->tps, a->tps > 0 ? b->tps / a->tps : 0.0,
               b->es.spec_drafted ? 100.0 * (double)b->es.spec_accepted / (double)b->es.spec_drafted : 0.0,
               (long long)b->es.spec_accepted, (long long)b->es.spec_drafted, (long long)b->es.spec_drafts,
               (long long)b->es.spec_paused_steps, same ? "yes" : "NO");
    }
    fflush(stdout);
}

static void row(const char *model, const char *task, const st_engine_params *p, const char *prompt) {
    const src lookup = {"lookup", ngram, NULL};
    rows(model, task, p, prompt, &lookup, 1);
}

static const char *passage =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park. She ran to the ball and kicked it very high. "
    "The ball flew over the tree and landed in the pond. Lily was sad, but her friend Tom came "
    "to help her. Tom found a long stick and pulled the ball out of the water. Lily said thank "
    "you to Tom, and they played with the ball together all day long. They were very happy.";

int main(int argc, char **argv) {
    const char *synth = "none", *models_dir = "/tmp/strata-bench", *extra[8];
    int n_extra = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "-t")) n_threads = atoi(v), i++;
        else if (!strcmp(a, "-n")) n_gen = atoi(v), i++;
        else if (!strcmp(a, "--ngram")) ngram = atoi(v), i++;
        else if (!strcmp(a, "--draft-max")) draft_max = atoi(v), i++;
        else if (!strcmp(a, "--reps")) reps = atoi(v), i++;
        else if (!strcmp(a, "--draft-p-min")) p_min = (float)atof(v), i++;
        else if (!strcmp(a, "--cpu-time")) cpu_clock = 1;
        else if (!strcmp(a, "--synth")) synth = v, i++;
        else if (!strcmp(a, "--models")) models_dir = v, i++;
        else if (!strcmp(a, "-m") && n_extra < 8 && *v) extra[n_extra++] = v, i++;
        else {
            fprintf(stderr, "usage: spec [-t THREADS] [-n TOKENS] [--ngram N] [--draft-max M] [--draft-p-min P] [--reps R] [--cpu-time] "
                            "[--synth none|small|1b|both] [--models DIR] [-m MODEL.gguf ...]\n");
            return 2;
        }
    }
    if (n_gen < 2 || n_gen > 1000 || reps < 1) return 2;
    /* copy: the passage, then the passage again cut in the middle of a sentence */
    static char copy[4096];
    const size_t half = strlen(passage) / 3;
    snprintf(copy, sizeof copy, "%s\n\n%.*s", passage, (int)half, passage);
    const char *free_prompt = "Once upon a time";
    printf("bench/spec: %d threads, %d generated tokens, greedy, --spec-ngram %d --draft-max %d --draft-p-min %.2f, "
           "best of %d, %s time\n\n", n_threads, n_gen, ngram, draft_max, p_min, reps, cpu_clock ? "CPU" : "wall");
    printf("| model | drafts by | task | plain tok/s | spec tok/s | speed-up | accepted | rounds | paused steps | identical |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    st_engine_params p = st_engine_default_params();
    p.n_threads = n_threads;
    p.n_parallel = 1;
    p.draft_p_min = p_min;
    p.n_ctx = 1024;
    row("built-in synthetic", "copy", &p, copy);
    row("built-in synthetic", "free", &p, free_prompt);
    /* the trained pair shares one vocabulary: each drafts for the other */
    const char *models[2] = {"stories260K.gguf", "tiny-long.gguf"};
    char paths[2][1024];
    int have[2];
    for (int m = 0; m < 2; m++) {
        snprintf(paths[m], sizeof paths[m], "%s/models/%s", bench_shared_dir(), models[m]);
        if ((have[m] = !access(paths[m], R_OK))) continue;
        snprintf(paths[m], sizeof paths[m], "%s/../../shared/models/%s", STRATA_SOURCE_DIR, models[m]);
        have[m] = !access(paths[m], R_OK);
    }
    for (int m = 0; m < 2; m++) {
        if (!have[m]) {
            printf("| %s | | (absent) | | | | | | |\n", models[m]);
            continue;
        }
        st_engine_params q = p;
        q.model_path = paths[m];
        q.n_ctx = 512;
        char dm[64], both[80];
        snprintf(dm, sizeof dm, "draft %.*s", (int)(strlen(models[!m]) - 5), models[!m]);
        snprintf(both, sizeof both, "lookup + %s", dm);
        const src sc[3] = {{"lookup", ngram, NULL}, {dm, 0, paths[!m]}, {both, ngram, paths[!m]}};
        const int n_src = have[!m] ? 3 : 1;
        rows(models[m], "copy", &q, copy, sc, n_src);
        rows(models[m], "free", &q, free_prompt, sc, n_src);
    }
    for (int m = 0; m < n_extra; m++) {
        st_engine_params q = p;
        q.model_path = extra[m];
        q.n_ctx = 0;
        const char *base = strrchr(extra[m], '/');
        row(base ? base + 1 : extra[m], "copy", &q, copy);
        row(base ? base + 1 : extra[m], "free", &q, free_prompt);
    }
    /* the synthetic models of bench/batch: random weights (their text loops, which the lookup
     * catches), but sizes where a step's cost is the weights' read (1b: from DRAM) */
    const int small = !strcmp(synth, "small") || !strcmp(synth, "both"), big = !strcmp(synth, "1b") || !strcmp(synth, "both");
    if (small || big) {
        st_ctx *ctx = NULL;
        st_ctx_params cp = st_ctx_default_params();
        if (st_ctx_create(&cp, &ctx)) return 1;
        const char *names[2] = {"small-q8_0", "1b-q4_k_m"}, *presets[2] = {"small", "1b"}, *types[2] = {"q8_0", "q4_k_m"};
        for (int m = 0; m < 2; m++) {
            if (!(m ? big : small)) continue;
            char path[1024];
            if (bench_ensure_model(ctx, "spec", names[m], presets[m], types[m], bench_shared_dir(), models_dir, path,
                                   sizeof path))
                continue;
            st_engine_params q = p;
            q.model_path = path;
            q.n_ctx = 1024;
            row(names[m], "copy", &q, copy);
            row(names[m], "free", &q, free_prompt);
        }
        st_ctx_destroy(ctx);
    }
    return 0;
}
