/* The engine's opening: parameters and their defaults, the model, tokenizer, KV cache and
 * runner it owns, and its teardown; the accessors of its parts. */
#include "engine/engine_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *st_finish_name(st_finish f) {
    static const char *const names[] = {"", "stop", "length", "eos", "cancelled", "context", "error"};
    return (unsigned)f < sizeof names / sizeof names[0] ? names[f] : "?";
}

st_engine_params st_engine_default_params(void) {
    st_engine_params p;
    memset(&p, 0, sizeof p);
    p.n_batch = 256;
    p.n_parallel = 4;
    p.page_size = ST_KV_PAGE_SIZE_DEFAULT;
    p.kv_type = ST_TYPE_F16;
    p.quest = st_kv_quest_default_params();
    p.draft_max = ST_ENGINE_DRAFT_MAX_DEFAULT;
    p.spec_draft = -1;
    p.draft_p_min = ST_ENGINE_DRAFT_P_MIN_DEFAULT;
    return p;
}

st_synth_params st_engine_builtin_model(void) {
    st_synth_params p = st_synth_default_params();
    p.n_layer = 4, p.n_embd = 256, p.n_head = 4, p.n_head_kv = 2, p.n_ff = 768, p.n_vocab = 512;
    p.n_ctx = 2048, p.rope_base = 10000.0f, p.type = ST_TYPE_Q8_0, p.seed = 42;
    return p;
}

st_engine_req_params st_engine_req_default_params(void) {
    st_engine_req_params p;
    memset(&p, 0, sizeof p);
    p.sampling = st_sampler_default_params();
    p.max_tokens = 128;
    p.quest_budget = -1;
    p.quest_epsilon = -1;
    p.seq = -1;
    p.n_logprobs = -1;
    p.spec_ngram = -1;
    p.spec_draft = -1;
    return p;
}

/* "96.0 KiB", "3.2 MiB", "1.5 GiB": sizes in messages, legible at any scale. */
static const char *size_str(uint64_t n, char *buf, size_t cap) {
    if (n >= (1ull << 30)) snprintf(buf, cap, "%.1f GiB", (double)n / (1ull << 30));
    else if (n >= (1ull << 20)) snprintf(buf, cap, "%.1f MiB", (double)n / (1ull << 20));
    else snprintf(buf, cap, "%.1f KiB", (double)n / 1024);
    return buf;
}

void st_engine_destroy(st_engine *e) {
    if (!e) return;
    for (int i = 0; i < e->n_reqs; i++) {
        en_req_free(e->reqs[i]);
        free(e->reqs[i]);
    }
    free(e->reqs);
    en_draft_close(e);
    st_runner_destroy(e->runner);
    st_kv_destroy(e->kv);
    st_tok_destroy(e->tok);
    st_model_destroy(e->model);
    free(e->synth_buf);
    st_ctx_destroy(e->ctx);
    free(e->model_path);
    free(e->spill_dir);
    free(e->instance_id);
    free(e->draft_path);
    free(e->b_tok);
    free(e->b_seq);
    free(e->b_want);
    free(e->b_prefill);
    free(e->b_budget);
    free(e->b_eps);
    free(e->b_verify);
    free(e->logits);
    free(e->eog);
    free(e->ev);
    free(e->text);
    free(e);
}

static int open_fail(st_engine *e, int rc, char *why, size_t why_len, const char *what) {
    if (why && why_len)
        snprintf(why, why_len, "%s: %s", what, e && e->ctx && *st_ctx_error(e->ctx) ? st_ctx_error(e->ctx) : st_strerror(rc));
    st_engine_destroy(e);
    return rc;
}

static char *dup_opt(const char *s, int *oom) {
    if (!s) return NULL;
    char *d = strdup(s);
    if (!d) *oom = 1;
    return d;
}

int st_engine_create(const st_engine_params *params, st_engine **out, char *why, size_t why_len) {
    if (why && why_len) *why = 0;
    if (!out) return ST_E_INVAL;
    *out = NULL;
    st_engine *e = calloc(1, sizeof *e);
    if (!e) return open_fail(NULL, ST_E_NOMEM, why, why_len, "engine");
    e->p = params ? *params : st_engine_default_params();
    st_engine_params *p = &e->p;
    int oom = 0;
    p->model_path = e->model_path = dup_opt(p->model_path, &oom);
    p->spill_dir = e->spill_dir = dup_opt(p->spill_dir, &oom);
    p->instance_id = e->instance_id = dup_opt(p->instance_id, &oom);
    p->draft_model_path = e->draft_path = dup_opt(p->draft_model_path, &oom);
    if (oom) return open_fail(e, ST_E_NOMEM, why, why_len, "engine");
    if (!p->n_batch) p->n_batch = 256;
    if (!p->n_batch_busy) p->n_batch_busy = p->n_batch / 4 > 0 ? p->n_batch / 4 : 1;
    if (!p->n_parallel) p->n_parallel = 4;
    if (!p->max_queue) p->max_queue = 4 * p->n_parallel;
    if (!p->page_size) p->page_size = ST_KV_PAGE_SIZE_DEFAULT;
    if (!p->draft_max) p->draft_max = ST_ENGINE_DRAFT_MAX_DEFAULT;
    p->synth = p->draft_synth = NULL; /* borrowed: only for the open below */
    const char *bad = p->n_batch < 1 || p->n_batch > (1 << 16)           ? "n_batch (1..65536)"
                      : p->n_parallel < 1 || p->n_parallel > p->n_batch ? "n_parallel (1..n_batch)"
                      : p->n_batch_busy < 1 || p->n_batch_busy > p->n_batch ? "n_batch_busy (1..n_batch)"
                      : p->max_queue < 1                                 ? "max_queue (>= 1)"
                      : p->n_ctx < 0                                     ? "n_ctx (>= 0)"
                      : p->kv_pages < 0 || p->ram_pages < 0              ? "kv_pages / ram_pages (>= 0)"
                      : p->n_threads < 0                                 ? "n_threads (>= 0)"
                      : p->spec_ngram < 0 || p->spec_ngram > ST_ENGINE_MAX_NGRAM ? "spec_ngram (0..64)"
                      : p->draft_max < 0 || p->draft_max > ST_ENGINE_MAX_DRAFT ? "draft_max (0..64)"
                      : p->draft_min < 0 || p->draft_min > ST_ENGINE_MAX_DRAFT ? "draft_min (0..64)"
                      : !(p->draft_p_min >= 0 && p->draft_p_min <= 1)          ? "draft_p_min (0..1)"
                      : p->spec_draft < -1 || p->spec_draft > 1                ? "spec_draft (-1, 0, 1)"
                                                                         : NULL;
    if (bad) {
        if (why && why_len) snprintf(why, why_len, "engine parameter out of range: %s", bad);
        st_engine_destroy(e);
        return ST_E_INVAL;
    }
    st_ctx_params cp = st_ctx_default_params();
    cp.n_threads = p->n_threads;
    int rc = st_ctx_create_msg(&cp, &e->ctx, why, why_len);
    if (rc) {
        st_engine_destroy(e);
        return rc;
    }
    if (p->model_path) {
        st_model_load_params lp = st_model_load_default_params();
        lp.use_mmap = p->use_mmap;
        lp.layout = p->weight_rows ? ST_WEIGHT_LAYOUT_ROWS : ST_WEIGHT_LAYOUT_AUTO;
        rc = st_model_load(e->ctx, p->model_path, &lp, &e->model);
    } else {
        const st_synth_params sp = params && params->synth ? *params->synth : st_engine_builtin_model();
        size_t n = 0;
        rc = st_synth_write_memory(e->ctx, &sp, &e->synth_buf, &n);
        if (!rc) rc = st_model_load_memory(e->ctx, e->synth_buf, n, "(built-in synthetic model)", &e->model);
    }
    if (rc) return open_fail(e, rc, why, why_len, p->model_path ? p->model_path : "synthetic model");
    const st_model_hparams *hp = st_model_get_hparams(e->model);
    e->n_vocab = hp->n_vocab;
    e->n_ctx = p->n_ctx ? p->n_ctx : (hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096);
    if (e->n_ctx > hp->n_ctx_train) {
        st_seterr(e->ctx, ST_E_LIMIT, "context %d is larger than the model's %d tokens", e->n_ctx, hp->n_ctx_train);
        return open_fail(e, ST_E_LIMIT, why, why_len, "context");
    }
    p->n_ctx = e->n_ctx;
    if ((rc = st_tok_load(e->ctx, st_model_gguf(e->model), NULL, &e->tok)))
        return open_fail(e, rc, why, why_len, "tokenizer");
    if ((rc = en_draft_open(e, params, why, why_len))) {
        st_engine_destroy(e);
        return rc;
    }
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.page_size = e->page = p->page_size;
    kp.type = p->kv_type;
    kp.max_seqs = p->n_parallel + p->max_queue + 1;
    kp.n_pages = p->kv_pages ? p->kv_pages : ((int64_t)e->n_ctx + e->page - 1) / e->page * p->n_parallel + p->n_parallel;
    st_model_fingerprint(e->model, kp.fingerprint.b);
    if (p->spill_dir) {
        kp.spill_dir = p->spill_dir;
        kp.instance_id = p->instance_id;
        int64_t ram = p->ram_pages ? p->ram_pages : p->ram_bytes ? (int64_t)(p->ram_bytes / st_kv_page_bytes(&kp)) : 0;
        uint64_t ram_left = 0;
        if (!ram && p->ram_auto && p->mem_limit) {
            /* what the weights leave, less a quarter for activations, the page cache and the
             * rest of the machine: a pool sized to all of it would be evicted by the OS */
            const uint64_t w = st_model_weight_bytes(e->model);
            const uint64_t left = p->mem_limit > w ? (p->mem_limit - w) / 4 * 3 : 0;
            ram = (int64_t)(left / st_kv_page_bytes(&kp));
            ram_left = left;
            if (ram < 2) {
                char b1[32], b2[32], b3[32];
                st_seterr(e->ctx, ST_E_LIMIT, "the weights (%s) leave %s of the %s available for the KV cache: "
                          "too little for a hot pool of 2 pages", size_str(w, b1, sizeof b1),
                          size_str(left, b2, sizeof b2), size_str(p->mem_limit, b3, sizeof b3));
                return open_fail(e, ST_E_LIMIT, why, why_len, "KV cache");
            }
        }
        if ((p->ram_pages || p->ram_bytes) && ram < 2) {
            st_seterr(e->ctx, ST_E_INVAL, "a hot KV pool of %lld pages (%zu bytes each): at least 2 are needed",
                      (long long)ram, st_kv_page_bytes(&kp));
            return open_fail(e, ST_E_INVAL, why, why_len, "KV cache");
        }
        kp.ram_pages = ram && ram < kp.n_pages ? ram : kp.n_pages;
        /* RAM residency is per layer block: a byte budget holds bytes / block size blocks */
        const uint64_t rb = p->ram_pages ? 0 : p->ram_bytes ? p->ram_bytes : ram_left;
        const uint64_t lb = st_kv_page_bytes(&kp) / (uint64_t)kp.n_layer;
        if (rb && ram && ram < kp.n_pages) kp.ram_blocks = (int64_t)(rb / lb);
        kp.disk_budget = p->disk_budget;
        kp.cold = p->cold;
    } else if (p->ram_pages || p->ram_bytes || p->disk_budget) {
        st_seterr(e->ctx, ST_E_INVAL, "a RAM pool or disk budget needs a spill directory");
        return open_fail(e, ST_E_INVAL, why, why_len, "KV cache");
    }
    /* refuse a pool that cannot fit in memory before allocating it (with the SSD tier only
     * ram_pages of the n_pages hold RAM) */
    const uint64_t hot = (uint64_t)(kp.ram_pages ? kp.ram_pages : kp.n_pages) * st_kv_page_bytes(&kp);
    const uint64_t wbytes = st_model_weight_bytes(e->model) + (e->dmodel ? st_model_weight_bytes(e->dmodel) : 0);
    const uint64_t room = p->mem_limit > wbytes ? p->mem_limit - wbytes : 0;
    if (p->mem_limit && hot > room) {
        char b1[32], b2[32], b3[32];
        st_seterr(e->ctx, ST_E_LIMIT, "context %d needs %s of KV cache, more than the %s of memory available "
                  "after the %s of weights", e->n_ctx, size_str(hot, b1, sizeof b1), size_str(room, b2, sizeof b2),
                  size_str(wbytes, b3, sizeof b3));
        return open_fail(e, ST_E_LIMIT, why, why_len, "context");
    }
    if ((rc = st_kv_create(e->ctx, &kp, &e->kv))) return open_fail(e, rc, why, why_len, "KV cache");
    p->kv_pages = kp.n_pages;
    e->tier = p->spill_dir != NULL;
    e->ram_pages = e->tier ? kp.ram_pages : kp.n_pages;
    e->cap_pages = kp.n_pages;
    if (e->tier && kp.disk_budget) {
        const int64_t disk = (int64_t)(kp.disk_budget / st_kv_page_bytes(&kp));
        if (e->ram_pages + disk < e->cap_pages) e->cap_pages = e->ram_pages + disk;
    }
    st_runner_params rp = st_runner_default_params();
    rp.n_ctx = e->n_ctx;
    rp.n_batch = p->n_batch;
    if ((rc = st_runner_create(e->ctx, e->model, e->kv, &rp, &e->runner))) return open_fail(e, rc, why, why_len, "runner");
    if ((p->quest.budget || p->quest.certify) && (rc = st_runner_set_quest(e->runner, &p->quest, 0)))
        return open_fail(e, rc, why, why_len, "sparse decode");
    const size_t nb = (size_t)p->n_batch + (size_t)p->n_parallel;
    e->b_tok = malloc(nb * sizeof *e->b_tok);
    e->b_seq = malloc(nb * sizeof *e->b_seq);
    e->b_want = malloc(nb);
    e->b_prefill = malloc(nb);
    e->b_budget = malloc(nb * sizeof *e->b_budget);
    e->b_eps = malloc(nb * sizeof *e->b_eps);
    e->b_verify = malloc(nb);
    e->cap_rows = p->n_parallel;
    e->logits = malloc((size_t)p->n_parallel * (size_t)e->n_vocab * sizeof *e->logits);
    e->eog = malloc((size_t)e->n_vocab * sizeof *e->eog);
    if (!e->b_tok || !e->b_seq || !e->b_want || !e->b_prefill || !e->b_budget || !e->b_eps || !e->b_verify || !e->logits || !e->eog)
        return open_fail(e, ST_E_NOMEM, why, why_len, "engine");
    for (int32_t id = 0; id < e->n_vocab; id++)
        if (st_tok_is_eog(e->tok, id)) e->eog[e->n_eog++] = id;
    e->next_id = 1;
    *out = e;
    return 0;
}

st_ctx *st_engine_ctx(st_engine *e) { return e->ctx; }
st_runner *st_engine_runner(st_engine *e) { return e->runner; }
const st_model *st_engine_model(const st_engine *e) { return e->model; }
const st_tok *st_engine_tok(const st_engine *e) { return e->tok; }
st_kv *st_engine_kv(st_engine *e) { return e->kv; }
st_kv *st_engine_draft_kv(st_engine *e) { return e->dkv; }
int32_t st_engine_n_ctx(const st_engine *e) { return e->n_ctx; }
const st_engine_params *st_engine_get_params(const st_engine *e) { return &e->p; }

/* ---- the request table --------------------------------------------------------------------- */
