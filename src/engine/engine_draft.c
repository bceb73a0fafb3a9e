/* The draft model of speculative decoding (llama.cpp's -md): opening it beside the target
 * (the vocabulary check, its own KV cache and runner), and the step's draft phase.
 *
 * A request that drafts with it owns a sequence of the draft KV (dseq) whose first dm_len
 * tokens are the first dm_len tokens of the request's history (prompt + generated); tokens
 * past dm_len are a draft's and are rewound before the sequence is used again. So the
 * invariant the phase keeps is only "dseq[0, dm_len) == history[0, dm_len)": catching up is
 * feeding history[dm_len, n), wherever the sequence was left (after a round, a rejected
 * draft, a retried step, a preemption that freed it). The draft model's output never
 * reaches a stream except through the target's verify round, so nothing here touches
 * exactness: a wrong or missing draft only costs speed.
 */
#include "engine/engine_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The first difference between the two vocabularies, in msg; 0 when they are the same. */
static int vocab_diff(const st_tok *a, const st_tok *b, char *msg, size_t cap) {
    const int32_t na = st_tok_n_vocab(a), nb = st_tok_n_vocab(b);
    if (na != nb) return snprintf(msg, cap, "the draft model has %d tokens, the target %d", nb, na), 1;
    for (int32_t i = 0; i < na; i++) {
        const char *ta = NULL, *tb = NULL;
        size_t la = 0, lb = 0;
        st_tok_text(a, i, &ta, &la);
        st_tok_text(b, i, &tb, &lb);
        if (la != lb || (la && memcmp(ta, tb, la)))
            return snprintf(msg, cap, "token %d is \"%.*s\" in the draft model, \"%.*s\" in the target", i,
                            (int)(lb > 40 ? 40 : lb), tb ? tb : "", (int)(la > 40 ? 40 : la), ta ? ta : ""), 1;
        if (st_tok_type_of(a, i) != st_tok_type_of(b, i))
            return snprintf(msg, cap, "token %d has type %d in the draft model, %d in the target", i,
                            st_tok_type_of(b, i), st_tok_type_of(a, i)), 1;
    }
    if (st_tok_bos(a) != st_tok_bos(b))
        return snprintf(msg, cap, "BOS is %d in the draft model, %d in the target", st_tok_bos(b), st_tok_bos(a)), 1;
    if (st_tok_eos(a) != st_tok_eos(b))
        return snprintf(msg, cap, "EOS is %d in the draft model, %d in the target", st_tok_eos(b), st_tok_eos(a)), 1;
    return 0;
}

/* "draft model: WHAT: the reason" (what NULL: the reason names the file already). */
static int draft_fail(st_engine *e, int rc, char *why, size_t why_len, const char *what) {
    const char *msg = *st_ctx_error(e->ctx) ? st_ctx_error(e->ctx) : st_strerror(rc);
    if (why && why_len) snprintf(why, why_len, "draft model: %s%s%s", what ? what : "", what ? ": " : "", msg);
    return rc;
}

int en_draft_open(st_engine *e, const st_engine_params *params, char *why, size_t why_len) {
    const st_engine_params *p = &e->p;
    const int32_t asked = p->spec_draft;
    if (asked < 0) e->p.spec_draft = 0;
    if (!p->draft_model_path && !(params && params->draft_synth)) return 0;
    const char *name = p->draft_model_path ? p->draft_model_path : "(synthetic draft model)";
    int rc;
    if (p->draft_model_path) {
        st_model_load_params lp = st_model_load_default_params();
        lp.use_mmap = p->use_mmap;
        lp.layout = p->weight_rows ? ST_WEIGHT_LAYOUT_ROWS : ST_WEIGHT_LAYOUT_AUTO;
        rc = st_model_load(e->ctx, p->draft_model_path, &lp, &e->dmodel);
    } else {
        size_t n = 0;
        rc = st_synth_write_memory(e->ctx, params->draft_synth, &e->dsynth_buf, &n);
        if (!rc) rc = st_model_load_memory(e->ctx, e->dsynth_buf, n, name, &e->dmodel);
    }
    if (rc) return draft_fail(e, rc, why, why_len, p->draft_model_path ? NULL : name);
    st_tok *dtok = NULL;
    if ((rc = st_tok_load(e->ctx, st_model_gguf(e->dmodel), NULL, &dtok))) return draft_fail(e, rc, why, why_len, "tokenizer");
    char diff[256];
    const int differs = vocab_diff(e->tok, dtok, diff, sizeof diff);
    st_tok_destroy(dtok);
    const st_model_hparams *hp = st_model_get_hparams(e->dmodel);
    if (!differs && hp->n_vocab != e->n_vocab)
        snprintf(diff, sizeof diff, "the draft model has %d logits, the target %d", hp->n_vocab, e->n_vocab);
    if (differs || hp->n_vocab != e->n_vocab) {
        st_seterr(e->ctx, ST_E_INVAL, "its vocabulary is not the target's: %s", diff);
        return draft_fail(e, ST_E_INVAL, why, why_len, name);
    }
    e->dn_ctx = e->n_ctx < hp->n_ctx_train ? e->n_ctx : hp->n_ctx_train;
    st_kv_params kp = st_kv_default_params();
    kp.n_layer = hp->n_layer, kp.n_kv_head = hp->n_head_kv, kp.head_dim = hp->head_dim;
    kp.page_size = p->page_size;
    kp.type = ST_TYPE_F16;
    kp.max_seqs = p->n_parallel + 1;
    /* a draft sequence holds its history and a draft less its last token: within dn_ctx plus
     * a page of the draft */
    kp.n_pages = ((int64_t)e->dn_ctx / p->page_size + 3) * p->n_parallel;
    st_model_fingerprint(e->dmodel, kp.fingerprint.b);
    if ((rc = st_kv_create(e->ctx, &kp, &e->dkv))) return draft_fail(e, rc, why, why_len, "KV cache");
    st_runner_params rp = st_runner_default_params();
    rp.n_ctx = e->dn_ctx;
    rp.n_batch = p->n_batch;
    if ((rc = st_runner_create(e->ctx, e->dmodel, e->dkv, &rp, &e->drunner))) return draft_fail(e, rc, why, why_len, "runner");
    e->dlogits = malloc((size_t)p->n_parallel * (size_t)e->n_vocab * sizeof *e->dlogits);
    e->drows = malloc((size_t)p->n_parallel * sizeof *e->drows);
    if (!e->dlogits || !e->drows) return draft_fail(e, ST_E_NOMEM, why, why_len, "buffers");
    if (asked < 0) e->p.spec_draft = 1;
    return 0;
}

void en_draft_close(st_engine *e) {
    st_runner_destroy(e->drunner);
    st_kv_destroy(e->dkv);
    st_model_destroy(e->dmodel);
    free(e->dsynth_buf);
    free(e->db_tok);
    free(e->db_seq);
    free(e->db_want);
    free(e->dlogits);
    free(e->drows);
}

void en_draft_release(st_engine *e, en_req *q) {
    if (q->dseq >= 0) st_kv_seq_free(e->dkv, q->dseq);
    q->dseq = -1;
    q->dm_len = 0;
}

void en_draft_after(st_engine *e, en_req *q, int32_t accepted) {
    int64_t len = 0;
    if (q->dseq < 0 || st_kv_seq_len(e->dkv, q->dseq, &len)) return;
    const int64_t keep = q->dm_len + accepted < len ? q->dm_len + accepted : len;
    if (keep < len && st_kv_seq_rewind(e->dkv, q->dseq, keep)) {
        en_draft_release(e, q);
        return;
    }
    q->dm_len = keep;
}

static int db_reserve(st_engine *e, int64_t n) {
    if (n <= e->cap_db) return 0;
    int32_t c = e->cap_db ? e->cap_db : 256;
    while (c < n) c *= 2;
    int32_t *t = realloc(e->db_tok, (size_t)c * sizeof *t);
    if (t) e->db_tok = t;
    st_kv_seq_id *s = realloc(e->db_seq, (size_t)c * sizeof *s);
    if (s) e->db_seq = s;
    uint8_t *w = realloc(e->db_want, (size_t)c);
    if (w) e->db_want = w;
    if (!t || !s || !w) return ST_E_NOMEM;
    e->cap_db = c;
    return 0;
}

/* A failed draft forward: the draft model is off for its requests (they go on without). */
static void drop_batch(st_engine *e, int32_t n) {
    for (int i = 0; i < e->n_reqs; i++) {
        en_req *q = e->reqs[i];
        if (q->dseq < 0) continue;
        for (int32_t j = 0; j < n; j++)
            if (e->db_seq[j] == q->dseq) {
                en_draft_release(e, q);
                q->use_dm = 0, q->dm_want = 0;
                break;
            }
    }
}

/* A draft forward of n tokens; its time is charged to the n_rows drafting requests of
 * e->drows (none for the prompt read beside the prefill: paid once, not per draft). */
static int dforward(st_engine *e, int32_t n, int32_t n_rows) {
    st_batch b = {.n_tokens = n, .tokens = e->db_tok, .seq = e->db_seq, .want_logits = e->db_want};
    e->st.spec_model_steps++;
    int rc = st_runner_forward(e->drunner, &b, e->dlogits);
    if (rc) {
        drop_batch(e, n);
        return rc;
    }
    const double s = st_runner_last_seconds(e->drunner);
    e->t_dstep += s;
    for (int32_t r = 0; r < n_rows; r++) e->drows[r]->dm_cost += s / n_rows;
    return 0;
}

void en_draft_record(st_engine *e, en_req *q, int ok) {
    if (ok) {
        q->dm_fails = 0;
        return;
    }
    if (++q->dm_fails < EN_DRAFT_MAX_FAILS) return;
    en_draft_release(e, q);
    q->use_dm = 0;
}

int en_draft_in_debt(en_req *q) {
    if (q->dm_cost <= q->dm_gain) return 0;
    q->dm_cost = q->dm_gain;
    en_spec_miss(q);
    return 1;
}

/* The draft model's pick from a logits row: its argmax (the lower id on a tie), and the
 * probability the softmax gives it. */
static int32_t argmax_p(const float *l, int32_t n, float *p) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (l[i] > l[best]) best = i;
    double s = 0;
    for (int32_t i = 0; i < n; i++) s += exp((double)l[i] - (double)l[best]);
    *p = (float)(1.0 / s);
    return best;
}

/* Whether q's draft sequence reads in this catch-up, and up to which history length (*to).
 * follow (the end of a step): a running request's prompt, as far as the target has read it,
 * within the draft context; the prompt is then read beside the target's prefill rather than
 * in the first decode step. Else (the draft phase): a request that drafts now, all of its
 * history; its generated tokens are read only then, in one piece after a pause in drafting. */
static int catch_up_to(st_engine *e, en_req *q, int follow, int64_t *to) {
    if (!q->use_dm || (q->state != ST_REQ_PREFILL && q->state != ST_REQ_DECODE)) return 0;
    if (follow) {
        *to = q->state == ST_REQ_PREFILL ? q->n_done : q->n_prompt;
        if (*to > e->dn_ctx - 1) *to = e->dn_ctx - 1;
        return *to > q->dm_len;
    }
    if (q->state != ST_REQ_DECODE || q->dm_want <= 0) return 0;
    *to = (int64_t)q->n_prompt + q->n_gen;
    if (*to + q->dm_want > e->dn_ctx) q->dm_want = (int32_t)(e->dn_ctx - *to);
    if (q->dm_want > 0) return 1;
    q->dm_want = 0;
    return 0;
}

/* Each chosen request's draft sequence reads the history it lacks (catch_up_to); in the
 * draft phase the last token's logits are wanted. Returns the logits rows (the drafting
 * requests, in e->drows), or -1 for no memory. */
static int32_t catch_up(st_engine *e, int follow) {
    int64_t need = 0, to = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        en_req *q = e->reqs[i];
        if (!catch_up_to(e, q, follow, &to)) continue;
        if (q->dseq < 0) {
            if (to <= 0 || st_kv_seq_create(e->dkv, &q->dseq)) {
                q->dm_want = 0;
                continue;
            }
            q->dm_len = 0;
        }
        /* logits of the last history token are needed: re-read it when it was read already */
        if (!follow && q->dm_len >= to) q->dm_len = to - 1;
        int64_t len = 0;
        if (st_kv_seq_len(e->dkv, q->dseq, &len) || (len > q->dm_len && st_kv_seq_rewind(e->dkv, q->dseq, q->dm_len))) {
            en_draft_release(e, q);
            q->use_dm = 0, q->dm_want = 0;
            continue;
        }
        need += to - q->dm_len;
    }
    if (!need) return 0;
    if (db_reserve(e, need)) return -1;
    int32_t n = 0, rows = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        en_req *q = e->reqs[i];
        if (q->dseq < 0 || !catch_up_to(e, q, follow, &to)) continue;
        for (int64_t t = q->dm_len; t < to; t++) {
            e->db_tok[n] = en_hist_at(q, t), e->db_seq[n] = q->dseq;
            e->db_want[n++] = !follow && t == to - 1;
        }
        if (!follow) e->drows[rows++] = q;
        q->dm_len = to;
    }
    if (n && dforward(e, n, rows)) return 0;
    return rows;
}

int en_draft_follow(st_engine *e) {
    if (!e->drunner) return 0;
    return catch_up(e, 1) < 0 ? ST_E_NOMEM : 0;
}

int en_draft_run(st_engine *e) {
    if (!e->drunner) return 0;
    int32_t rows = catch_up(e, 0);
    if (rows < 0) return ST_E_NOMEM;
    for (int i = 0; i < rows; i++) e->drows[i]->step_draft = 0, e->drows[i]->step_src = 1;
    /* greedy drafting, one draft-model decode step per token, every drafting request at once */
    while (rows > 0) {
        int32_t n = 0;
        for (int32_t r = 0; r < rows; r++) {
            en_req *q = e->drows[r];
            float p = 0;
            const int32_t t = argmax_p(e->dlogits + (size_t)r * e->n_vocab, e->n_vocab, &p);
            if (p < e->p.draft_p_min) continue;
            q->draft[q->step_draft++] = t;
            if (q->step_draft >= q->dm_want) continue;
            e->db_tok[n] = t, e->db_seq[n] = q->dseq, e->db_want[n] = 1;
            e->drows[n++] = q;
        }
        if (!n) break;
        if (dforward(e, n, n)) {
            for (int32_t r = 0; r < n; r++) e->drows[r]->step_draft = 0;
            break;
        }
        rows = n;
    }
    /* a draft model that proposes nothing (or too little) this step pauses like a round that
     * took nothing: its forwards cost without a verify to share them */
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->step_src && e->reqs[i]->step_draft < (e->p.draft_min > 1 ? e->p.draft_min : 1)) {
            en_spec_miss(e->reqs[i]);
            en_draft_record(e, e->reqs[i], 0);
        }
    return 0;
}
