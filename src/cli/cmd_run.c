/* strata run: generate text from a GGUF model (or the built-in synthetic one).
 * Only the generated text goes to stdout; statistics and messages go to stderr. */
#include "cli/chat.h"
#include "cli/cli_quest.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/kv_flags.h"
#include "cli/prompt_cache.h"
#include "strata/engine.h"
#include "strata/sample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata run [-m FILE] [-p PROMPT | -f FILE] [-n N] [-c CTX] [-t THREADS] [--temp T]\n"
            "                  [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--repeat-last-n N]\n"
            "                  [--frequency-penalty F] [--presence-penalty P]\n"
            "                  [--seed S] [--kv-page P] [--kv-type f16|bf16|f32|q8_0] [-b N_BATCH]\n"
            "                  [--chat [--chat-template NAME] [--system TEXT]]\n"
            "                  [--prompt-cache FILE [--prompt-cache-ro | --prompt-cache-all]]\n"
            "                  [--no-escape] [--ignore-eos] [-l ID+BIAS | -l ID-BIAS ...] [--mmap | --no-mmap]\n"
            "                  [--spec-ngram N] [-md DRAFT.gguf] [--draft-max M] [--draft-min M] [--draft-p-min P]\n"
            "--chat: interactive chat on stdin (one message a line; /reset, /exit); the KV is kept\n"
            "between turns. The template comes from the GGUF unless --chat-template names one.\n"
            "Without -m, runs a built-in synthetic model (random weights, byte-level tokenizer).\n"
            "-n -1 (or -2): until the end of the text or a full context. As in llama.cpp, these\n"
            "turn a sampler stage off: --temp 0 or below (greedy), --top-k 0 or below,\n"
            "--top-p 1, --min-p 0, --repeat-penalty 1. --seed -1 draws a random seed and prints\n"
            "it on stderr (--seed with that number repeats the run).\n"
            "The prompt is read as llama.cpp reads it: -f drops one trailing newline, and the escapes\n"
            "\\n \\r \\t \\' \\\" \\\\ \\xHH of -p, -f and --chat lines become the bytes they stand for\n"
            "(-e, the default; --no-escape keeps them); --system is taken as written, as llama-cli\n"
            "takes -sys. --ignore-eos never samples an end-of-generation token; -l / --logit-bias ID+B or ID-B adds B (a number or inf) to token ID's\n"
            "logit before every draw. llama.cpp's spellings are taken too: -ctk/-ctv TYPE (one type for K\n"
            "and V: --kv-type), -sys/--system-prompt (--system), -cnv/--conversation (--chat), and\n"
            "-ngl N, which is ignored (every layer runs on the CPU).\n"
            "Defaults: -n 128, -c min(model, 4096), -t $STRATA_THREADS or the CPUs this process may\n"
            "run on, --temp 0.8, --top-k 40, --top-p 0.95, --min-p 0.05, --repeat-penalty 1.0,\n"
            "--frequency-penalty 0, --presence-penalty 0 (both over the last --repeat-last-n tokens),\n"
            "--repeat-last-n 64, --seed 12648430 (0xC0FFEE),\n"
            "--kv-page 16, --kv-type f16.\n"
            ST_CLI_MMAP_USAGE
            "--prompt-cache FILE: restore the KV of the longest prefix this prompt shares with FILE\n"
            "(a KV snapshot of an earlier run of the same model and KV settings) and save this\n"
            "prompt's KV there when it went further; -ro: never write FILE; -all: save after the\n"
            "generation, with the generated tokens.\n"
            ST_CLI_QUEST_USAGE ST_CLI_KV_FLAGS_USAGE ST_CLI_SPEC_USAGE);
}

/* -l ID+BIAS / ID-BIAS: added to token ID's logit before every draw, as llama.cpp's
 * --logit-bias; -inf bans the token. */
typedef struct st_cli_bias {
    int32_t id;
    float bias;
} st_cli_bias;

/* Parses "ID+BIAS" / "ID-BIAS" (BIAS a number or inf). 0 or -1. */
static int parse_bias(const char *v, st_cli_bias *out) {
    if (!v) return -1;
    char *end;
    errno = 0;
    long id = strtol(v, &end, 10);
    if (errno || end == v || id < 0 || id > INT32_MAX || (*end != '+' && *end != '-')) return -1;
    const char sign = *end++;
    if (*end == '+' || *end == '-') return -1; /* one sign only */
    const char *num = end;
    errno = 0;
    float b = strtof(num, &end);
    if (errno || end == num || *end || b != b) return -1;
    out->id = (int32_t)id;
    out->bias = sign == '-' ? -b : b;
    return 0;
}

#define RUN_MAX_BIAS 256

typedef struct run_opts {
    const char *model, *prompt, *prompt_file;
    long long n_predict, n_ctx, n_threads, kv_page, n_batch;
    st_type kv_type;
    st_sampler_params sp;
    int chat;
    int seed_random; /* --seed -1 */
    int no_escape, ignore_eos;
    int mmap; /* 1 --mmap, -1 --no-mmap, 0 not given ($STRATA_MMAP) */
    st_cli_bias bias[RUN_MAX_BIAS]; /* -l: logit biases, in the order given */
    int n_bias;
    st_type kv_type_k, kv_type_v; /* -ctk / -ctv (llama.cpp's --kv-type); ST_TYPE_COUNT_: not given */
    const char *chat_template, *system;
    const char *prompt_cache;
    int prompt_cache_ro, prompt_cache_all;
    st_cli_quest quest;
    st_cli_kv_flags tier;
    st_cli_spec spec;
} run_opts;

static int bad(const char *opt, const char *val) {
    fprintf(stderr, "strata run: bad value '%s' for %s\n", val ? val : "(missing)", opt);
    return ST_EXIT_INPUT;
}

static int parse(int argc, char **argv, run_opts *o) {
    o->n_predict = 128, o->kv_page = 16, o->kv_type = ST_TYPE_F16;
    o->kv_type_k = o->kv_type_v = ST_TYPE_COUNT_;
    o->sp = st_sampler_default_params();
    st_cli_quest_init(&o->quest);
    st_cli_kv_flags_init(&o->tier);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        int takes = 1, ea = st_cli_engine_arg(&o->quest, &o->sp, &o->tier, &o->spec, a, v);
        if (ea < 0) return bad(a, v);
        if (ea) takes = ea == 1;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) o->prompt = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->prompt_file = v;
        else if (!strcmp(a, "--chat") || !strcmp(a, "-cnv") || !strcmp(a, "--conversation")) o->chat = 1, takes = 0;
        else if (!strcmp(a, "--chat-template")) o->chat_template = v;
        else if (!strcmp(a, "--system") || !strcmp(a, "-sys") || !strcmp(a, "--system-prompt")) o->system = v;
        else if (!strcmp(a, "-e") || !strcmp(a, "--escape")) o->no_escape = 0, takes = 0;
        else if (!strcmp(a, "--no-escape")) o->no_escape = 1, takes = 0;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1, takes = 0;
        else if (!strcmp(a, "--mmap")) o->mmap = 1, takes = 0;
        else if (!strcmp(a, "--no-mmap")) o->mmap = -1, takes = 0;
        else if (!strcmp(a, "-l") || !strcmp(a, "--logit-bias")) {
            if (o->n_bias == RUN_MAX_BIAS) {
                fprintf(stderr, "strata run: more than %d -l / --logit-bias\n", RUN_MAX_BIAS);
                return ST_EXIT_INPUT;
            }
            if (parse_bias(v, &o->bias[o->n_bias])) return bad(a, v);
            o->n_bias++;
        } else if (!strcmp(a, "-ctk") || !strcmp(a, "--cache-type-k") || !strcmp(a, "-ctv") ||
                   !strcmp(a, "--cache-type-v")) {
            const int is_v = a[strlen(a) - 1] == 'v';
            if (!v || st_cli_kv_type(v, &o->kv_type)) return bad(a, v);
            *(is_v ? &o->kv_type_v : &o->kv_type_k) = o->kv_type;
        } else if (!strcmp(a, "-ngl") || !strcmp(a, "--n-gpu-layers") || !strcmp(a, "--gpu-layers")) {
            if (st_cli_int(v, -1, 1 << 20, &n) && (!v || (strcmp(v, "auto") && strcmp(v, "all")))) return bad(a, v);
            fprintf(stderr, "strata run: %s %s ignored: strata runs every layer on the CPU\n", a, v);
        } else if (!strcmp(a, "--prompt-cache")) o->prompt_cache = v;
        else if (!strcmp(a, "--prompt-cache-ro")) o->prompt_cache_ro = 1, takes = 0;
        else if (!strcmp(a, "--prompt-cache-all")) o->prompt_cache_all = 1, takes = 0;
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (st_cli_int(v, -2, 1 << 30, &o->n_predict)) return bad(a, v);
            if (o->n_predict < 0) o->n_predict = N_PREDICT_UNTIL_FULL; /* llama.cpp's -1 and -2 */
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (st_cli_int(v, 1, 1 << 30, &o->n_ctx)) return bad(a, v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (st_cli_int(v, 1, ST_THREADS_MAX, &o->n_threads)) return bad(a, v);
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (st_cli_int(v, 1, 1 << 16, &o->n_batch)) return bad(a, v);
        } else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
            if (st_cli_int(v, -1, (long long)(~0ull >> 1), &n)) return bad(a, v);
            o->seed_random = n < 0;
            o->sp.seed = n < 0 ? 0 : (uint64_t)n;
        } else if (!strcmp(a, "--kv-page")) {
            if (st_cli_int(v, 8, 256, &o->kv_page) || (o->kv_page & (o->kv_page - 1))) return bad(a, v);
        } else if (!strcmp(a, "--kv-type")) {
            if (!v || st_cli_kv_type(v, &o->kv_type)) return bad(a, v);
        } else {
            fprintf(stderr, "strata run: unknown option '%s' (strata run --help lists them)\n", a);
            return ST_EXIT_INPUT;
        }
        if (takes && !v) return bad(a, v);
        i += takes;
    }
    if (o->prompt && o->prompt_file) {
        fprintf(stderr, "strata run: give -p or -f, not both\n");
        return ST_EXIT_INPUT;
    }
    if (o->kv_type_k != ST_TYPE_COUNT_ && o->kv_type_v != ST_TYPE_COUNT_ && o->kv_type_k != o->kv_type_v) {
        fprintf(stderr, "strata run: -ctk %s and -ctv %s differ: strata keeps K and V in one type (--kv-type)\n",
                st_type_name(o->kv_type_k), st_type_name(o->kv_type_v));
        return ST_EXIT_INPUT;
    }
    if ((o->prompt_cache_ro || o->prompt_cache_all) && !o->prompt_cache) {
        fprintf(stderr, "strata run: --prompt-cache-ro and --prompt-cache-all need --prompt-cache FILE\n");
        return ST_EXIT_INPUT;
    }
    if (o->prompt_cache_ro && o->prompt_cache_all) {
        fprintf(stderr, "strata run: --prompt-cache-ro never writes the cache: not with --prompt-cache-all\n");
        return ST_EXIT_INPUT;
    }
    if (o->chat && (o->n_bias || o->ignore_eos)) {
        fprintf(stderr, "strata run: -l and --ignore-eos shape one generation; --chat does not take them\n");
        return ST_EXIT_INPUT;
    }
    if (o->chat && o->prompt_cache) {
        fprintf(stderr, "strata run: --prompt-cache is for one prompt, not --chat\n");
        return ST_EXIT_INPUT;
    }
    if (o->chat ? o->prompt || o->prompt_file : o->chat_template || o->system) {
        fprintf(stderr, "strata run: --chat reads the conversation from stdin: it takes --chat-template and "
                        "--system, not -p or -f\n");
        return ST_EXIT_INPUT;
    }
    return 0;
}

/* --seed -1: a seed from the kernel's entropy (the clock and pid when that fails), 32 bits as
 * llama.cpp's, so it is short to type back. */
static uint64_t random_seed(void) {
    uint32_t v;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v) return v;
    return (uint32_t)((uint64_t)(st_time_now() * 1e9) ^ ((uint64_t)getpid() << 16));
}

/* The generation is one engine request; this loop only streams its events and times them. */
static int generate(st_engine *e, st_cli_session *s, const run_opts *o, const int32_t *prompt, int n_prompt) {
    st_kv_seq_id seq = -1;
    int n_reused = 0, n_common = 0, exit_code = 0;
    if (o->prompt_cache &&
        (exit_code = st_cli_prompt_cache_load(s, o->prompt_cache, prompt, n_prompt, &seq, &n_reused, &n_common)))
        return exit_code;
    const int save = o->prompt_cache && !o->prompt_cache_ro && (n_common < n_prompt || o->prompt_cache_all);
    st_engine_bias bias[RUN_MAX_BIAS];
    for (int i = 0; i < o->n_bias; i++) bias[i] = (st_engine_bias){o->bias[i].id, o->bias[i].bias};
    st_engine_req_params rp = st_engine_req_default_params();
    rp.tokens = prompt + n_reused, rp.n_tokens = n_prompt - n_reused;
    rp.seq = seq, rp.keep_seq = save;
    rp.sampling = o->sp;
    rp.max_tokens = o->n_predict >= N_PREDICT_UNTIL_FULL ? -1 : (int32_t)o->n_predict;
    rp.bias = bias, rp.n_bias = o->n_bias;
    rp.ignore_eos = o->ignore_eos;
    st_req_id id;
    int rc = st_engine_submit(e, &rp, &id);
    if (rc) {
        if (seq >= 0) st_kv_seq_free(s->kv, seq);
        fprintf(stderr, "strata run: %s\n", st_ctx_error(s->ctx));
        return st_cli_exit_code(rc);
    }
    st_cli_progress pb;
    st_cli_progress_begin(&pb, "prefill");
    st_cli_progress_attach(&pb, s->runner, n_prompt - n_reused);
    const double t0 = st_time_now();
    double t_first = 0;
    st_engine_event fin;
    memset(&fin, 0, sizeof fin);
    int err_gen = 0;
    while (!fin.finish) {
        st_engine_req_info info;
        if (st_engine_req_get_info(e, id, &info) == 0) st_cli_progress_step(&pb, info.n_tokens - n_reused, st_engine_get_params(e)->n_batch);
        st_kv_stats k0, k1;
        if (o->tier.verbose) st_kv_get_stats(s->kv, &k0);
        const st_engine_event *ev;
        int nev;
        if ((rc = st_engine_step(e, &ev, &nev))) err_gen = rc;
        for (int k = 0; k < nev; k++) {
            if (ev[k].token >= 0 && !t_first) {
                t_first = st_time_now();
                st_cli_progress_end(&pb);
            }
            if (ev[k].text_len) {
                fwrite(ev[k].text, 1, ev[k].text_len, stdout);
                fflush(stdout);
            }
            if (ev[k].finish) fin = ev[k];
        }
        char line[256];
        if (o->tier.verbose && (st_kv_get_stats(s->kv, &k1), st_kv_stats_line(&k0, &k1, line, sizeof line)))
            fprintf(stderr, "[step %d] %s\n", fin.finish ? fin.stats.n_generated : nev ? ev[nev - 1].stats.n_generated : 0,
                    line);
        if (err_gen && !fin.finish) break;
    }
    st_cli_progress_end(&pb);
    const double t_end = st_time_now();
    const double t_prefill = (t_first ? t_first : t_end) - t0, t_decode = t_first ? t_end - t_first : 0;
    const int ok = fin.finish && fin.finish != ST_FINISH_ERROR;
    if (ok) printf("\n"); /* ends the text as llama.cpp does, only when the generation did */
    fflush(stdout);
    if (ok && save && fin.seq >= 0) {
        /* without --prompt-cache-all the file keeps the prompt's KV alone */
        if (!o->prompt_cache_all) rc = st_kv_seq_truncate(s->kv, fin.seq, n_prompt);
        exit_code = rc ? st_cli_exit_code(rc) : st_cli_prompt_cache_save(s, o->prompt_cache, fin.seq);
    }
    if (fin.seq >= 0) st_kv_seq_free(s->kv, fin.seq);
    if (!ok) {
        const int code = fin.finish ? fin.error : err_gen;
        fprintf(stderr, "strata run: %s\n", fin.finish && *fin.error_msg ? fin.error_msg
                                            : *st_ctx_error(s->ctx)     ? st_ctx_error(s->ctx)
                                                                        : st_strerror(code));
        return st_cli_exit_code(code ? code : ST_E_STATE);
    }
    const long long n_gen = fin.stats.n_generated;
    st_kv_stats ks;
    st_kv_get_stats(s->kv, &ks);
    if (n_reused)
        fprintf(stderr, "prompt tokens: %d (%d from the prompt cache)   prefill of %d: %.1f tok/s (%.3f s)\n", n_prompt,
                n_reused, n_prompt - n_reused, t_prefill > 0 ? (n_prompt - n_reused) / t_prefill : 0.0, t_prefill);
    else
        fprintf(stderr, "prompt tokens: %d   prefill: %.1f tok/s (%.3f s)\n", n_prompt,
                t_prefill > 0 ? n_prompt / t_prefill : 0.0, t_prefill);
    const int full = fin.finish == ST_FINISH_CONTEXT;
    fprintf(stderr, "generated tokens: %lld   decode: %.1f tok/s (%.3f s)   stopped: %s", n_gen,
            t_decode > 0 ? (n_gen - 1) / t_decode : 0.0, t_decode,
            fin.finish == ST_FINISH_EOS ? "end of text" : full ? "context full" : o->n_predict ? "-n reached" : "-n 0");
    if (full)
        fprintf(stderr, " (%d tokens; -c sets it, up to the model's %d)", s->n_ctx,
                st_model_get_hparams(s->model)->n_ctx_train);
    fprintf(stderr, "\n");
    fprintf(stderr, "KV pages: %lld in use, %lld cached for reuse, of %lld (page %d tokens, %s)\n",
            (long long)ks.pages_used, (long long)ks.pages_cached, (long long)ks.n_pages,
            st_kv_get_geometry(s->kv)->page_size, st_type_name(st_kv_get_geometry(s->kv)->type));
    if (st_cli_quest_print(&o->quest, s->runner, stderr) && !exit_code) exit_code = st_cli_exit_code(ST_E_CORRUPT);
    st_engine_stats es;
    st_engine_get_stats(e, &es);
    if (es.spec_drafts)
        fprintf(stderr, "speculative: %lld rounds, %lld tokens drafted, %lld accepted (%.1f%%), %lld steps paused\n",
                (long long)es.spec_drafts, (long long)es.spec_drafted, (long long)es.spec_accepted,
                es.spec_drafted ? 100.0 * (double)es.spec_accepted / (double)es.spec_drafted : 0.0,
                (long long)es.spec_paused_steps);
    if (es.spec_model_steps)
        fprintf(stderr, "draft model: %lld forwards, %lld rounds, %lld tokens drafted, %lld accepted\n",
                (long long)es.spec_model_steps, (long long)es.spec_model_drafts, (long long)es.spec_model_drafted,
                (long long)es.spec_model_accepted);
    if (ks.ram_pages)
        fprintf(stderr, "KV tier: hot pool %lld layer blocks; %lld spilled, %lld fetched (%lld read ahead), "
                "%lld blocks streamed, %.1f MiB read, %lld stalls, %lld dropped\n", (long long)ks.ram_blocks,
                (long long)ks.tier_writes, (long long)ks.tier_reads, (long long)ks.tier_prefetches,
                (long long)ks.tier_block_reads,
                (double)ks.tier_bytes_read / 1048576.0, (long long)ks.fetch_stalls, (long long)ks.tier_drops);
    return exit_code;
}

int st_cmd_run(int argc, char **argv) {
    run_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    if (o.seed_random) {
        o.sp.seed = random_seed();
        fprintf(stderr, "sampler seed: %llu (--seed %llu repeats this run)\n", (unsigned long long)o.sp.seed,
                (unsigned long long)o.sp.seed);
    }
    char *text = NULL;
    size_t text_len = 0;
    if (o.prompt_file && (rc = st_cli_read_file(o.prompt_file, &text, &text_len))) {
        fprintf(stderr, "strata run: cannot read %s: %s\n", o.prompt_file, st_strerror(rc));
        return st_cli_exit_code(rc);
    }
    if (!text && o.prompt) {
        text_len = strlen(o.prompt);
        if (!(text = strdup(o.prompt))) return st_cli_exit_code(ST_E_NOMEM);
    }
    if (text) text_len = st_cli_prompt_text(text, text_len, o.prompt_file != NULL, !o.no_escape);
    st_engine_params ep = st_engine_default_params();
    st_model_load_params lp = st_cli_model_load_params(o.mmap);
    ep.model_path = o.model;
    ep.use_mmap = lp.use_mmap;
    ep.weight_rows = lp.layout == ST_WEIGHT_LAYOUT_ROWS;
    ep.n_threads = (int)o.n_threads;
    ep.n_ctx = (int32_t)o.n_ctx;
    ep.n_batch = o.n_batch ? (int32_t)o.n_batch : 256;
    ep.n_parallel = 1;
    ep.page_size = (int)o.kv_page;
    ep.kv_type = o.kv_type;
    ep.mem_limit = st_cli_mem_available();
    ep.quest = o.quest.p; /* the engine's drafting gate reads the budget (the runner gets it too) */
    st_cli_spec_apply(&o.spec, &ep);
    if ((rc = st_cli_kv_flags_engine(&o.tier, &ep, "run"))) {
        free(text);
        return st_cli_exit_code(rc);
    }
    if (!o.model)
        fprintf(stderr, "strata run: no -m given: running the built-in synthetic model (random weights, "
                        "byte-level tokenizer; the text it writes is noise)\n");
    st_engine *e = NULL;
    char why[768];
    if ((rc = st_engine_create(&ep, &e, why, sizeof why))) {
        fprintf(stderr, "strata run: %s\n", why);
        free(text);
        return st_cli_exit_code(rc);
    }
    /* the parts, borrowed, for the prompt cache, the chat and the statistics */
    st_cli_session s = {.ctx = st_engine_ctx(e), .model = (st_model *)st_engine_model(e),
                        .tok = (st_tok *)st_engine_tok(e), .kv = st_engine_kv(e), .runner = st_engine_runner(e),
                        .n_ctx = st_engine_n_ctx(e)};
    if (!o.model) fprintf(stderr, "model: %s\n", st_model_desc(s.model));
    for (int i = 0; i < o.n_bias; i++)
        if (o.bias[i].id >= st_model_get_hparams(s.model)->n_vocab) {
            fprintf(stderr, "strata run: -l: token %d is outside the vocabulary (%d tokens)\n", o.bias[i].id,
                    st_model_get_hparams(s.model)->n_vocab);
            free(text);
            st_engine_destroy(e);
            return ST_EXIT_INPUT;
        }
    if (o.quest.given && (rc = st_cli_quest_apply(&o.quest, s.runner))) {
        fprintf(stderr, "strata run: %s\n", st_ctx_error(s.ctx));
        free(text);
        st_engine_destroy(e);
        return st_cli_exit_code(rc);
    }
    if (o.chat) {
        st_cli_chat_opts co = {.template_name = o.chat_template, .system = o.system, .n_predict = o.n_predict,
                               .n_batch = (int32_t)o.n_batch, .sp = o.sp, .in = stdin, .escape = !o.no_escape,
                               .engine = e};
        rc = st_cli_chat(&s, &co);
        st_engine_destroy(e);
        return rc;
    }
    const char *prompt = text ? text : "Once upon a time";
    int32_t *ids = NULL;
    int n_ids = 0;
    rc = st_tok_encode_alloc(s.tok, prompt, text ? text_len : strlen(prompt), true, true, &ids, &n_ids);
    free(text);
    if (rc) {
        fprintf(stderr, "strata run: tokenizing the prompt: %s\n", st_strerror(rc));
        st_engine_destroy(e);
        return st_cli_exit_code(rc);
    }
    if (n_ids == 0 || n_ids >= s.n_ctx) {
        fprintf(stderr, "strata run: the prompt is %d tokens, %s the context of %d tokens\n", n_ids,
                n_ids ? "longer than (or as long as)" : "empty: no room in", s.n_ctx);
        free(ids);
        st_engine_destroy(e);
        return ST_EXIT_INPUT;
    }
    rc = generate(e, &s, &o, ids, n_ids);
    free(ids);
    st_engine_destroy(e);
    return rc;
}
