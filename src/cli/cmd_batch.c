/* strata batch: completes every prompt of a file (one a line) through the engine, -np of them
 * at once, as llama.cpp's llama-parallel does; prints each completion and throughput. */
#include "cli/cli_quest.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/kv_flags.h"
#include "strata/engine.h"

#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: strata batch -f PROMPTS.txt [-m FILE] [-np N] [-n N] [-c CTX] [-b N_BATCH] [-t THREADS]\n"
            "                    [--temp T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
            "                    [--repeat-last-n N] [--frequency-penalty F] [--presence-penalty P] [--seed S] [--ignore-eos]\n"
            "                    [--kv-page P] [--kv-type f16|bf16|f32|q8_0] [--no-escape] [--max-queue N]\n"
            "Completes each line of PROMPTS.txt (empty lines skipped; escapes such as \\n processed unless\n"
            "--no-escape), -np requests at a time (default 4) through one forward step per token: continuous\n"
            "batching, with every prompt's pages shared with earlier prompts that began alike. Completions\n"
            "go to stdout in the file's order, each as '[i] PROMPT' then the text; statistics to stderr.\n"
            "Request i samples with seed S + i. -c is the context of one request (default min(model, 4096));\n"
            "the KV pool holds -np of them. Without -m, the built-in synthetic model (noise text).\n" ST_CLI_QUEST_USAGE
                ST_CLI_KV_FLAGS_USAGE ST_CLI_SPEC_USAGE);
}

typedef struct batch_opts {
    const char *model, *file;
    long long n_parallel, n_predict, n_ctx, n_batch, n_threads, kv_page, max_queue;
    st_type kv_type;
    st_sampler_params sp;
    int no_escape, ignore_eos;
    st_cli_quest quest;
    st_cli_kv_flags tier;
    st_cli_spec spec;
} batch_opts;

static int bad(const char *opt, const char *val) {
    fprintf(stderr, "strata batch: bad value '%s' for %s\n", val ? val : "(missing)", opt);
    return ST_EXIT_INPUT;
}

static int parse(int argc, char **argv, batch_opts *o) {
    o->n_parallel = 4, o->n_predict = 64, o->kv_page = 16, o->kv_type = ST_TYPE_F16;
    o->sp = st_sampler_default_params();
    st_cli_quest_init(&o->quest);
    st_cli_kv_flags_init(&o->tier);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long n;
        int takes = 1, ea = st_cli_engine_arg(&o->quest, &o->sp, &o->tier, &o->spec, a, v);
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        }
        if (ea < 0) return bad(a, v);
        if (ea) takes = ea == 1;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = v;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->file = v;
        else if (!strcmp(a, "--no-escape")) o->no_escape = 1, takes = 0;
        else if (!strcmp(a, "-e") || !strcmp(a, "--escape")) o->no_escape = 0, takes = 0;
        else if (!strcmp(a, "--ignore-eos")) o->ignore_eos = 1, takes = 0;
        else if (!strcmp(a, "-np") || !strcmp(a, "--parallel")) {
            if (st_cli_int(v, 1, 4096, &o->n_parallel)) return bad(a, v);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
            if (st_cli_int(v, -1, 1 << 30, &o->n_predict)) return bad(a, v);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) {
            if (st_cli_int(v, 1, 1 << 30, &o->n_ctx)) return bad(a, v);
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch-size")) {
            if (st_cli_int(v, 1, 1 << 16, &o->n_batch)) return bad(a, v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (st_cli_int(v, 1, ST_THREADS_MAX, &o->n_threads)) return bad(a, v);
        } else if (!strcmp(a, "--max-queue")) {
            if (st_cli_int(v, 1, 1 << 20, &o->max_queue)) return bad(a, v);
        } else if (!strcmp(a, "--kv-page")) {
            if (st_cli_int(v, 8, 256, &o->kv_page) || (o->kv_page & (o->kv_page - 1))) return bad(a, v);
        } else if (!strcmp(a, "--kv-type") || !strcmp(a, "-ctk") || !strcmp(a, "-ctv")) {
            if (!v || st_cli_kv_type(v, &o->kv_type)) return bad(a, v);
        } else if (!strcmp(a, "--seed") || !strcmp(a, "-s")) {
            if (st_cli_int(v, 0, (long long)(~0ull >> 1), &n)) return bad(a, v);
            o->sp.seed = (uint64_t)n;
        } else {
            fprintf(stderr, "strata batch: unknown option '%s' (strata batch --help lists them)\n", a);
            return ST_EXIT_INPUT;
        }
        if (takes && !v) return bad(a, v);
        i += takes;
    }
    if (!o->file) {
        fprintf(stderr, "strata batch: -f PROMPTS.txt is required (one prompt a line)\n");
        return ST_EXIT_INPUT;
    }
    if (o->tier.given && !o->tier.spill_dir) {
        fprintf(stderr, "strata batch: --kv-ram, --kv-pool-pages, --kv-disk, --kv-cold-type and --instance-id "
                        "need --kv-spill DIR\n");
        return ST_EXIT_INPUT;
    }
    return 0;
}

typedef struct completion {
    char *prompt;
    char *text;
    size_t n_text, cap_text;
    st_finish fin;
    st_engine_req_stats st;
    char err[256];
} completion;

static int append(completion *c, const char *s, size_t n) {
    if (c->n_text + n + 1 > c->cap_text) {
        size_t cap = c->cap_text ? c->cap_text * 2 : 256;
        while (cap < c->n_text + n + 1) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return ST_E_NOMEM;
        c->text = t, c->cap_text = cap;
    }
    memcpy(c->text + c->n_text, s, n);
    c->n_text += n;
    c->text[c->n_text] = 0;
    return 0;
}

int st_cmd_batch(int argc, char **argv) {
    batch_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char *buf = NULL;
    size_t len = 0;
    if ((rc = st_cli_read_file(o.file, &buf, &len))) {
        fprintf(stderr, "strata batch: cannot read %s: %s\n", o.file, st_strerror(rc));
        return st_cli_exit_code(rc);
    }
    int n = 0, cap = 0;
    completion *cs = NULL;
    for (char *line = buf, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        size_t l = strlen(line);
        if (l && line[l - 1] == '\r') line[--l] = 0;
        if (!l) continue;
        l = st_cli_prompt_text(line, l, 0, !o.no_escape);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            completion *nc = realloc(cs, (size_t)cap * sizeof *nc);
            if (!nc) return st_cli_exit_code(ST_E_NOMEM);
            cs = nc;
        }
        memset(&cs[n], 0, sizeof cs[n]);
        cs[n++].prompt = line;
    }
    if (!n) {
        fprintf(stderr, "strata batch: %s holds no prompt\n", o.file);
        free(buf);
        return ST_EXIT_INPUT;
    }
    st_engine_params ep = st_engine_default_params();
    ep.model_path = o.model;
    ep.n_threads = (int)o.n_threads;
    ep.n_ctx = (int32_t)o.n_ctx;
    ep.n_parallel = (int32_t)o.n_parallel;
    ep.n_batch = o.n_batch ? (int32_t)o.n_batch : (ep.n_parallel > 256 ? ep.n_parallel : 256);
    ep.max_queue = o.max_queue ? (int32_t)o.max_queue : n;
    ep.page_size = (int)o.kv_page;
    ep.kv_type = o.kv_type;
    st_cli_spec_apply(&o.spec, &ep);
    ep.quest = o.quest.p;
    ep.spill_dir = o.tier.spill_dir;
    ep.instance_id = o.tier.instance_id;
    ep.ram_pages = o.tier.pool_pages;
    ep.ram_bytes = o.tier.ram_bytes;
    ep.disk_budget = (uint64_t)o.tier.disk_mib << 20;
    ep.cold = o.tier.cold;
    char why[512];
    st_engine *e = NULL;
    if (!o.model)
        fprintf(stderr, "strata batch: no -m given: the built-in synthetic model (random weights; noise text)\n");
    if ((rc = st_engine_create(&ep, &e, why, sizeof why))) {
        fprintf(stderr, "strata batch: %s\n", why);
        free(buf);
        free(cs);
        return st_cli_exit_code(rc);
    }
    fprintf(stderr, "model: %s\n", st_model_desc(st_engine_model(e)));
    const double t0 = st_time_now();
    int next = 0, left = n;
    while (left > 0) {
        /* keep the queue fed: submit while it takes more */
        while (next < n) {
            st_engine_req_params rp = st_engine_req_default_params();
            rp.text = cs[next].prompt, rp.text_len = strlen(cs[next].prompt);
            rp.sampling = o.sp;
            rp.sampling.seed = o.sp.seed + (uint64_t)next;
            rp.max_tokens = (int32_t)o.n_predict;
            rp.ignore_eos = o.ignore_eos;
            rp.user = &cs[next];
            st_req_id id;
            int src = st_engine_submit(e, &rp, &id);
            if (src == ST_E_QUEUE_FULL) break;
            if (src) {
                cs[next].fin = ST_FINISH_ERROR;
                snprintf(cs[next].err, sizeof cs[next].err, "%s", st_ctx_error(st_engine_ctx(e)));
                left--;
            }
            next++;
        }
        const st_engine_event *ev;
        int nev;
        if ((rc = st_engine_step(e, &ev, &nev)))
            fprintf(stderr, "strata batch: step: %s\n", st_ctx_error(st_engine_ctx(e)));
        for (int k = 0; k < nev; k++) {
            completion *c = ev[k].user;
            if (append(c, ev[k].text, ev[k].text_len)) rc = ST_E_NOMEM;
            if (ev[k].finish) {
                c->fin = ev[k].finish, c->st = ev[k].stats;
                snprintf(c->err, sizeof c->err, "%s", ev[k].error_msg);
                left--;
            }
        }
        if (rc == ST_E_NOMEM) break;
    }
    const double wall = st_time_now() - t0;
    long long gen = 0, prompt = 0, cached = 0, failed = 0;
    double ttft = 0;
    for (int i = 0; i < n; i++) {
        printf("[%d] %s\n%s\n", i, cs[i].prompt, cs[i].text ? cs[i].text : "");
        if (cs[i].fin == ST_FINISH_ERROR) {
            fprintf(stderr, "strata batch: prompt %d failed: %s\n", i, cs[i].err);
            failed++;
        }
        gen += cs[i].st.n_generated, prompt += cs[i].st.n_prompt, cached += cs[i].st.n_cached;
        ttft += cs[i].st.t_first;
        free(cs[i].text);
    }
    fflush(stdout);
    st_engine_stats es;
    st_engine_get_stats(e, &es);
    fprintf(stderr, "requests: %d (%lld failed), %lld at a time   prompt tokens: %lld (%lld from the prefix cache)\n", n,
            failed, o.n_parallel, prompt, cached);
    fprintf(stderr, "generated tokens: %lld in %.3f s: %.1f tok/s aggregate   steps: %lld   mean time to first "
            "token: %.3f s   preemptions: %lld\n", gen, wall, wall > 0 ? (double)gen / wall : 0.0,
            (long long)es.steps, n ? ttft / n : 0.0, (long long)es.preemptions);
    st_engine_destroy(e);
    free(buf);
    free(cs);
    if (rc) return st_cli_exit_code(rc);
    return failed ? ST_EXIT_INPUT : 0;
}
