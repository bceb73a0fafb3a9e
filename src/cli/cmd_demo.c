/* strata demo: what the engine is for, on a synthetic model and nothing downloaded. One prompt
 * is decoded after a short context and after a long one, with a hot KV pool far smaller than
 * the long context's KV (the rest spills to a temporary directory) and a Quest budget, so the
 * long run's decode reads a bounded amount of KV per token whatever the context. */
#include "cli/cli_quest.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/kv_flags.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DEMO_PROMPT "Once upon a time"
#define DEMO_PROMPT_ROOM 256
#define DEMO_ROUNDS 4

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata demo [--long N] [--short N] [-n N_GEN] [--kv-budget N] [--ram-frac F]\n"
            "                   [--kv-dense-layers N] [-t THREADS] [--tmp DIR]\n"
            "Decodes the prompt \"" DEMO_PROMPT "\" after a context of --short tokens (default 256)\n"
            "and again after --long tokens (default 16384) on a built-in synthetic model (random\n"
            "weights: the text is noise, the speeds and KV traffic are real). The context is real\n"
            "tokens prefilled through the model. The hot KV pool holds --ram-frac (default 0.125) of\n"
            "the long context's KV; the rest spills to a directory made under --tmp (default\n"
            "$TMPDIR or /tmp) and removed at the end. Decode attends --kv-budget tokens (default\n"
            "1024) per KV head (Quest) at every layer from --kv-dense-layers (default 0) on. Prints\n"
            "decode tok/s at both lengths and their ratio, pages in RAM and on disk, and the tier\n"
            "traffic. -n decode steps each (default 64), timed in 4 rounds (one below 16 steps):\n"
            "the speed is the fastest round's, the mean is printed too, the ratio compares the\n"
            "fastest. The default --long keeps the whole run under a minute on two cores: prefill\n"
            "grows with the square of the context, and 32768 takes several times longer.\n");
}

/* Shallow but wide enough that attention, not the weights, dominates a dense long decode:
 * the point of the demo is what the KV costs as the context grows. */
static st_synth_params demo_model(int32_t n_ctx) {
    st_synth_params p = st_synth_default_params();
    p.n_layer = 4, p.n_embd = 256, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 768, p.n_vocab = 512;
    p.n_ctx = n_ctx, p.rope_base = 10000.0f, p.type = ST_TYPE_Q8_0, p.seed = 42;
    return p;
}

typedef struct demo_result {
    double prefill_s, decode_tps, decode_mean_tps;
    int round_steps;
    st_kv_stats before, after; /* around the decode steps */
    st_kv_stats filled;        /* after the prefill */
    int64_t seq_hot, seq_cold; /* the sequence's pages at the end */
    st_runner_quest_stats quest;
} demo_result;

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* n_fill context tokens (the filler text's bytes, cycled), then the prompt, then n_gen greedy
 * decode steps, each timed alone. */
static int run_one(st_cli_session *s, const int32_t *fill, int n_fill, const int32_t *prompt, int n_prompt,
                   int n_gen, demo_result *r) {
    const st_model_hparams *hp = st_model_get_hparams(s->model);
    float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
    int32_t *ids = malloc((size_t)(n_fill + n_prompt) * sizeof *ids);
    if (!logits || !ids) {
        free(logits), free(ids);
        return ST_E_NOMEM;
    }
    memcpy(ids, fill, (size_t)n_fill * sizeof *ids);
    memcpy(ids + n_fill, prompt, (size_t)n_prompt * sizeof *ids);
    st_kv_seq_id seq;
    int rc = st_kv_seq_create(s->kv, &seq);
    st_cli_progress pb;
    st_cli_progress_begin(&pb, "prefill");
    double t0 = st_time_now();
    if (!rc) {
        st_batch b = {.n_tokens = n_fill + n_prompt, .tokens = ids, .seq_single = seq};
        st_cli_progress_attach(&pb, s->runner, b.n_tokens);
        rc = st_runner_forward(s->runner, &b, logits);
    }
    st_cli_progress_end(&pb);
    r->prefill_s = st_time_now() - t0;
    st_kv_get_stats(s->kv, &r->filled);
    r->before = r->filled;
    st_runner_quest_stats q0;
    st_runner_get_quest_stats(s->runner, &q0);
    /* the steps run in rounds and the fastest round gives the speed: on a shared machine other
     * processes stretch some rounds, and a sub-millisecond short-context step is the most
     * exposed, which would make the long/short ratio report the neighbours; the mean of all
     * steps is printed too */
    double t_dec = 0, best = 0;
    int round_steps = n_gen >= 4 * DEMO_ROUNDS ? n_gen / DEMO_ROUNDS : n_gen, in_round = 0;
    double t_round = 0;
    for (int i = 0; i < n_gen && !rc; i++) {
        int32_t t = argmax(logits, hp->n_vocab);
        st_batch b = {.n_tokens = 1, .tokens = &t, .seq_single = seq};
        double t1 = st_time_now();
        rc = st_runner_forward(s->runner, &b, logits);
        const double dt = st_time_now() - t1;
        t_dec += dt, t_round += dt;
        if (++in_round == round_steps) {
            const double tps = t_round > 0 ? round_steps / t_round : 0;
            if (tps > best) best = tps;
            in_round = 0, t_round = 0;
        }
    }
    r->decode_tps = best;
    r->decode_mean_tps = t_dec > 0 ? n_gen / t_dec : 0;
    r->round_steps = round_steps;
    st_kv_get_stats(s->kv, &r->after);
    st_runner_get_quest_stats(s->runner, &r->quest);
    r->quest.steps -= q0.steps, r->quest.pages_listed -= q0.pages_listed, r->quest.pages_total -= q0.pages_total;
    if (!rc) rc = st_kv_seq_residency(s->kv, seq, &r->seq_hot, &r->seq_cold);
    st_kv_seq_free(s->kv, seq);
    free(logits), free(ids);
    return rc;
}

static void print_one(const char *label, int n_ctx, int n_gen, const demo_result *r) {
    const st_kv_stats *a = &r->before, *b = &r->after;
    printf("%s context %d tokens: prefill %.2f s (%.0f tok/s), decode %.1f tok/s (fastest of %d rounds of "
           "%d steps; mean %.1f)\n", label, n_ctx, r->prefill_s, r->prefill_s > 0 ? n_ctx / r->prefill_s : 0.0,
           r->decode_tps, n_gen / r->round_steps, r->round_steps, r->decode_mean_tps);
    printf("  KV pages: %lld in RAM, %lld on disk (hot pool %lld pages)\n", (long long)r->seq_hot,
           (long long)r->seq_cold, (long long)b->ram_pages);
    printf("  tier traffic: prefill spilled %lld pages (%.1f MiB); decode spilled %lld, fetched %lld pages, "
           "streamed %lld blocks (%.1f MiB read), %lld stalls\n",
           (long long)r->filled.tier_writes, (double)r->filled.tier_bytes_written / 1048576.0,
           (long long)(b->tier_writes - a->tier_writes), (long long)(b->tier_reads - a->tier_reads),
           (long long)(b->tier_block_reads - a->tier_block_reads),
           (double)(b->tier_bytes_read - a->tier_bytes_read) / 1048576.0,
           (long long)(b->fetch_stalls - a->fetch_stalls));
    if (r->quest.steps)
        printf("  quest: %.1f%% of the pages attended at sparse layers\n",
               r->quest.pages_total ? 100.0 * (double)r->quest.pages_listed / (double)r->quest.pages_total : 100.0);
}

/* rm -r of the demo's own directory: the KV's instance directory is removed when the pool is
 * destroyed, so what is left is at most empty directories. */
static void remove_dir(const char *dir) {
    if (rmdir(dir) && errno != ENOENT) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
        if (system(cmd)) fprintf(stderr, "strata demo: could not remove %s\n", dir);
    }
}

int st_cmd_demo(int argc, char **argv) {
    long long n_long = 16384, n_short = 256, n_gen = 64, n_threads = 0;
    double ram_frac = 0.125;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    st_cli_quest quest;
    st_cli_quest_init(&quest);
    quest.p.budget = 1024;
    /* Quest's usual two dense layers would be half of this model's four, and a dense layer
     * reads the whole spilled context back every step; a random model has no accuracy for
     * them to protect (--kv-dense-layers puts them back) */
    quest.p.dense_layers = 0;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = v != NULL;
        int qa = st_cli_quest_arg(&quest, a, v);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (qa) ok = qa > 0;
        else if (!strcmp(a, "--long")) ok = !st_cli_int(v, 64, 1 << 20, &n_long);
        else if (!strcmp(a, "--short")) ok = !st_cli_int(v, 16, 1 << 20, &n_short);
        else if (!strcmp(a, "-n")) ok = !st_cli_int(v, 1, 1 << 16, &n_gen);
        else if (!strcmp(a, "-t")) ok = !st_cli_int(v, 1, ST_THREADS_MAX, &n_threads);
        else if (!strcmp(a, "--ram-frac")) ok = !st_cli_float(v, 1e-6, 1, &ram_frac);
        else if (!strcmp(a, "--tmp")) tmp = v;
        else {
            fprintf(stderr, "strata demo: unknown option '%s' (strata demo --help lists them)\n", a);
            return ST_EXIT_INPUT;
        }
        if (!ok) {
            fprintf(stderr, "strata demo: bad value '%s' for %s\n", v ? v : "(missing)", a);
            return ST_EXIT_INPUT;
        }
    }
    if (n_short >= n_long) {
        fprintf(stderr, "strata demo: --short %lld must be less than --long %lld\n", n_short, n_long);
        return ST_EXIT_INPUT;
    }
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s/strata-demo-XXXXXX", tmp) >= (int)sizeof dir || !mkdtemp(dir)) {
        fprintf(stderr, "strata demo: cannot make a spill directory under %s: %s\n", tmp, strerror(errno));
        return ST_EXIT_INPUT;
    }
    /* the prompt's tokens are not known before the tokenizer is loaded: room for it, the
     * decode steps and the token the last step's logits choose */
    const int32_t n_ctx = (int32_t)(n_long + DEMO_PROMPT_ROOM + n_gen + 1);
    st_synth_params sp = demo_model(n_ctx);
    const int page = 16;
    const long long long_pages = (n_ctx + page - 1) / page; /* --ram-frac 1: all of it fits */
    st_cli_kv_flags kvf;
    st_cli_kv_flags_init(&kvf);
    kvf.spill_dir = dir, kvf.given = 1;
    kvf.pool_pages = (long long)(long_pages * ram_frac);
    if (kvf.pool_pages < 2) kvf.pool_pages = 2;
    st_cli_session_opts so = {.synth = &sp, .n_threads = (int)n_threads, .n_ctx = n_ctx, .n_seqs = 1,
                              .page_size = page, .kv_type = ST_TYPE_F16, .need_tok = 1, .kv_flags = &kvf};
    st_cli_session s;
    int rc = st_cli_session_open("demo", &so, &s);
    if (rc) {
        remove_dir(dir);
        return rc;
    }
    int32_t *prompt = NULL, *fill = NULL;
    int n_prompt = 0;
    demo_result rs, rl;
    memset(&rs, 0, sizeof rs), memset(&rl, 0, sizeof rl);
    rc = st_tok_encode_alloc(s.tok, DEMO_PROMPT, strlen(DEMO_PROMPT), true, true, &prompt, &n_prompt);
    if (!rc && n_prompt > DEMO_PROMPT_ROOM) rc = st_seterr(s.ctx, ST_E_LIMIT, "the prompt is %d tokens", n_prompt);
    if (!rc && !(fill = malloc((size_t)n_long * sizeof *fill))) rc = ST_E_NOMEM;
    if (!rc) {
        /* filler is text the tokenizer made, so every context position holds an ordinary token */
        static const char text[] = "The quick brown fox jumps over the lazy dog while the engine keeps "
                                   "every page of its cache where it fits best. ";
        int32_t *t = NULL;
        int nt = 0;
        rc = st_tok_encode_alloc(s.tok, text, strlen(text), false, false, &t, &nt);
        for (long long i = 0; !rc && i < n_long; i++) fill[i] = t[i % nt];
        free(t);
    }
    if (!rc) rc = st_cli_quest_apply(&quest, s.runner);
    const st_kv_geometry *g = st_kv_get_geometry(s.kv);
    const double page_mib = (double)st_kv_page_bytes(st_kv_get_params(s.kv)) / 1048576.0;
    if (!rc) {
        printf("strata demo: %s\n", st_model_desc(s.model));
        printf("KV: %d-token pages of %.2f MiB (%s); hot pool %lld pages (%.1f MiB), the long context needs "
               "%lld; spill to %s; Quest budget %lld tokens\n",
               g->page_size, page_mib, st_type_name(g->type), (long long)kvf.pool_pages,
               (double)kvf.pool_pages * page_mib, (n_long + n_prompt + n_gen + page - 1) / page, dir,
               (long long)quest.p.budget);
        fflush(stdout);
        rc = run_one(&s, fill, (int)n_short, prompt, n_prompt, (int)n_gen, &rs);
    }
    if (!rc) {
        print_one("short", (int)n_short + n_prompt, (int)n_gen, &rs);
        fflush(stdout);
        rc = run_one(&s, fill, (int)n_long, prompt, n_prompt, (int)n_gen, &rl);
    }
    if (!rc) {
        print_one("long ", (int)n_long + n_prompt, (int)n_gen, &rl);
        printf("decode speed long/short: %.2f (context %.0fx longer)\n",
               rs.decode_tps > 0 ? rl.decode_tps / rs.decode_tps : 0.0,
               (double)(n_long + n_prompt) / (double)(n_short + n_prompt));
    } else {
        fprintf(stderr, "strata demo: %s\n", *st_ctx_error(s.ctx) ? st_ctx_error(s.ctx) : st_strerror(rc));
    }
    free(prompt), free(fill);
    st_cli_session_close(&s);
    remove_dir(dir);
    if (!rc) printf("spill directory removed\n");
    return rc ? st_cli_exit_code(rc) : 0;
}
