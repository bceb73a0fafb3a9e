/* The engine's requests: the request table, admission and preemption, and the step (one
 * forward over every running request, then sampling). Opening it is engine_open.c's.
 *
 * Page accounting. A request may end with pages_for(n_prompt + max_gen) pages; admission
 * counts that whole claim (plus one page for a copy-on-write of a shared tail) against the
 * pool's capacity less the pages in use and the claims the admitted requests have not yet
 * allocated, so an admitted request never runs out of pages mid-generation. The capacity is
 * the pool's logical size, bounded with a spill directory by RAM plus the disk budget. RAM
 * itself is checked per step: the hot pool must hold every running request's pages plus a
 * page of growth each, else the newest running request is preempted (its pages spill as the
 * others allocate) until it does; a preempted or new request is (re)admitted only when its
 * pages fit in RAM beside the running ones. Without a spill directory RAM is the pool, so
 * the admission claim already covers it and nothing is ever preempted. */
#include "engine/engine_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static en_req *find(const st_engine *e, st_req_id id) {
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->id == id) return e->reqs[i];
    return NULL;
}

static int n_in(const st_engine *e, st_req_state s) {
    int n = 0;
    for (int i = 0; i < e->n_reqs; i++) n += e->reqs[i]->state == s;
    return n;
}

static int running(const en_req *q) { return q->state == ST_REQ_PREFILL || q->state == ST_REQ_DECODE; }

static int n_running(const st_engine *e) {
    int n = 0;
    for (int i = 0; i < e->n_reqs; i++) n += running(e->reqs[i]);
    return n;
}

int st_engine_n_active(const st_engine *e) { return e->n_reqs; }

int st_engine_submit(st_engine *e, const st_engine_req_params *p, st_req_id *id) {
    if (id) *id = 0;
    if (!e || !p || !id) return ST_E_INVAL;
    if (n_in(e, ST_REQ_WAITING) >= e->p.max_queue) {
        e->st.rejected_queue_full++;
        return st_seterr(e->ctx, ST_E_QUEUE_FULL, "%d requests are waiting already (the queue's limit)", e->p.max_queue);
    }
    en_req *q = calloc(1, sizeof *q);
    if (!q) return ST_E_NOMEM;
    int rc = 0;
    if (p->tokens) {
        if (p->n_tokens > 0 && (q->prompt = malloc((size_t)p->n_tokens * sizeof *q->prompt)))
            memcpy(q->prompt, p->tokens, (size_t)p->n_tokens * sizeof *q->prompt);
        q->n_prompt = p->n_tokens;
        if (p->n_tokens > 0 && !q->prompt) rc = ST_E_NOMEM;
        for (int32_t i = 0; !rc && i < q->n_prompt; i++)
            if (q->prompt[i] < 0 || q->prompt[i] >= e->n_vocab)
                rc = st_seterr(e->ctx, ST_E_INVAL, "prompt token %d at %d is outside the vocabulary [0, %d)",
                               q->prompt[i], i, e->n_vocab);
    } else if (p->text) {
        int n = 0;
        rc = st_tok_encode_alloc(e->tok, p->text, p->text_len, true, true, &q->prompt, &n);
        if (rc) rc = st_seterr(e->ctx, rc, "tokenizing the prompt: %s", st_strerror(rc));
        q->n_prompt = n;
    } else {
        rc = st_seterr(e->ctx, ST_E_INVAL, "a request needs a prompt (tokens or text)");
    }
    if (!rc && q->n_prompt < 1) rc = st_seterr(e->ctx, ST_E_INVAL, "the prompt is empty");
    if (!rc && p->seq >= 0) {
        for (int i = 0; i < e->n_reqs && !rc; i++)
            if (e->reqs[i]->seq == p->seq) rc = st_seterr(e->ctx, ST_E_INVAL, "sequence %lld belongs to request %lld",
                                                          (long long)p->seq, (long long)e->reqs[i]->id);
        if (!rc && st_kv_seq_len(e->kv, p->seq, &q->len0))
            rc = st_seterr(e->ctx, ST_E_INVAL, "sequence %lld is not a live sequence of the engine's KV cache",
                           (long long)p->seq);
    }
    /* a prompt leaves room for a token to generate, unless none is asked for */
    if (!rc && q->len0 + q->n_prompt + (p->max_tokens != 0) > e->n_ctx)
        rc = st_seterr(e->ctx, ST_E_LIMIT, "the prompt is %lld tokens, the context %d: no room to generate",
                       (long long)(q->len0 + q->n_prompt), e->n_ctx);
    if (!rc && p->quest_budget < -1) rc = st_seterr(e->ctx, ST_E_INVAL, "quest_budget %lld", (long long)p->quest_budget);
    if (!rc && !(p->quest_epsilon < 0 || p->quest_epsilon <= 1))
        rc = st_seterr(e->ctx, ST_E_INVAL, "quest_epsilon %g (< 0 for the engine's, else in [0, 1])", p->quest_epsilon);
    if (!rc && (p->spec_ngram < -1 || p->spec_ngram > ST_ENGINE_MAX_NGRAM))
        rc = st_seterr(e->ctx, ST_E_INVAL, "spec_ngram %d (-1 for the engine's, 0 off, up to %d)", p->spec_ngram,
                       ST_ENGINE_MAX_NGRAM);
    if (!rc && (p->spec_draft < -1 || p->spec_draft > 1))
        rc = st_seterr(e->ctx, ST_E_INVAL, "spec_draft %d (-1 for the engine's, 0 off, 1 on)", p->spec_draft);
    if (!rc && (p->draft_max < 0 || p->draft_max > ST_ENGINE_MAX_DRAFT))
        rc = st_seterr(e->ctx, ST_E_INVAL, "draft_max %d (0 for the engine's, up to %d)", p->draft_max,
                       ST_ENGINE_MAX_DRAFT);
    if (!rc) rc = en_req_init(q, e->ctx, e->tok, e->n_vocab, p);
    if (!rc) {
        const int64_t room = e->n_ctx - q->len0 - q->n_prompt;
        q->max_is_ctx = p->max_tokens < 0 || p->max_tokens > room;
        q->max_gen = (int32_t)(q->max_is_ctx ? room : p->max_tokens);
        /* the last sampled token is never fed back, so n_prompt + max_gen - 1 positions */
        const int64_t need = pages_for(e, q->len0 + q->n_prompt + q->max_gen) + 1;
        if (need > e->cap_pages)
            rc = st_seterr(e->ctx, ST_E_LIMIT, "the request may need %lld KV pages (%lld prompt + %d new tokens), "
                           "more than the pool's %lld", (long long)need, (long long)(q->len0 + q->n_prompt),
                           q->max_gen, (long long)e->cap_pages);
    }
    if (!rc && e->n_reqs == e->cap_reqs) {
        int c = e->cap_reqs ? 2 * e->cap_reqs : 16;
        en_req **nr = realloc(e->reqs, (size_t)c * sizeof *nr);
        if (!nr) rc = ST_E_NOMEM;
        else e->reqs = nr, e->cap_reqs = c;
    }
    if (rc) {
        en_req_free(q);
        free(q);
        return rc;
    }
    /* the penalties' history: what the given sequence holds (where its tokens are known),
     * then the prompt */
    for (int64_t i = 0; i < q->len0; i++) {
        int32_t t = -1;
        if (st_kv_seq_tokens(e->kv, p->seq, i, 1, &t) == 0 && t >= 0) st_sampler_accept(q->smp, t);
    }
    for (int32_t i = 0; i < q->n_prompt; i++) st_sampler_accept(q->smp, q->prompt[i]);
    q->id = e->next_id++;
    q->user = p->user;
    q->seq = p->seq >= 0 ? p->seq : -1;
    q->keep_seq = p->keep_seq;
    q->st.n_cached = (int32_t)q->len0;
    q->budget = p->quest_budget;
    q->eps = p->quest_epsilon < 0 ? -1 : p->quest_epsilon;
    q->kv_keep = -1;
    /* Drafting is exact only over a KV type whose stored tokens do not depend on later
     * tokens of their page (q8_0 rescales a page for a larger value) */
    q->spec_ngram = p->spec_ngram < 0 ? e->p.spec_ngram : p->spec_ngram;
    q->draft_max = p->draft_max > 0 ? p->draft_max : e->p.draft_max;
    /* the first round drafts 2: a model that does not copy then pays a short verify for
     * nothing, and one that does reaches draft_max after a few doublings */
    q->spec_len = q->draft_max < 2 ? q->draft_max : 2;
    /* the draft model knows the prompt and what follows, not a given sequence's tokens */
    q->dseq = -1;
    q->use_dm = e->dkv && (p->spec_draft < 0 ? e->p.spec_draft : p->spec_draft) && q->len0 == 0;
    if (e->p.kv_type == ST_TYPE_Q8_0) q->spec_ngram = 0, q->use_dm = 0;
    if ((q->spec_ngram || q->use_dm) && !(q->draft = malloc((size_t)q->draft_max * sizeof *q->draft))) {
        en_req_free(q);
        free(q);
        return ST_E_NOMEM;
    }
    q->state = ST_REQ_WAITING;
    q->st.n_prompt = q->n_prompt;
    q->t_submit = st_time_now();
    e->reqs[e->n_reqs++] = q;
    e->st.submitted++;
    *id = q->id;
    return 0;
}

int st_engine_cancel(st_engine *e, st_req_id id) {
    en_req *q = e ? find(e, id) : NULL;
    if (!q) return ST_E_NOT_FOUND;
    q->cancel = 1;
    return 0;
}

static void stats_now(const en_req *q, st_engine_req_stats *out) {
    *out = q->st;
    out->t_total = st_time_now() - q->t_submit;
}

int st_engine_req_get_info(const st_engine *e, st_req_id id, st_engine_req_info *out) {
    const en_req *q = find(e, id);
    if (!q) return ST_E_NOT_FOUND;
    memset(out, 0, sizeof *out);
    out->id = q->id;
    out->state = q->state;
    out->seq = q->seq;
    if (q->seq >= 0) {
        st_kv_seq_len(e->kv, q->seq, &out->n_tokens);
        st_kv_seq_residency(e->kv, q->seq, &out->pages_hot, &out->pages_cold);
    }
    stats_now(q, &out->stats);
    return 0;
}

void st_engine_get_stats(const st_engine *e, st_engine_stats *out) {
    *out = e->st;
    out->running = n_running(e);
    out->waiting = e->n_reqs - out->running;
}

/* ---- events ---------------------------------------------------------------------------------- */

/* Adds an event; text is taken from the step's text buffer at [t0, n_text). Event text
 * pointers are fixed up when the step ends (the buffer may move while it grows). */
static int push_event(st_engine *e, const en_req *q, int32_t token, size_t t0, st_finish fin, int err,
                      const char *msg) {
    if (e->n_ev == e->cap_ev) {
        int c = e->cap_ev ? 2 * e->cap_ev : 64;
        st_engine_event *n = realloc(e->ev, (size_t)c * sizeof *n);
        if (!n) return ST_E_NOMEM;
        e->ev = n, e->cap_ev = c;
    }
    st_engine_event *ev = &e->ev[e->n_ev++];
    memset(ev, 0, sizeof *ev);
    ev->req = q->id;
    ev->user = q->user;
    ev->token = token;
    ev->text = (const char *)(uintptr_t)t0; /* offset until the fix-up */
    ev->text_len = e->n_text - t0;
    ev->finish = fin;
    ev->error = err;
    ev->seq = -1;
    /* the message goes into the text buffer too, after the text, NUL-terminated */
    size_t m0 = e->n_text;
    const char nul = 0;
    if (msg && *msg && en_buf_append(&e->text, &e->n_text, &e->cap_text, msg, strlen(msg))) return ST_E_NOMEM;
    if (en_buf_append(&e->text, &e->n_text, &e->cap_text, &nul, 1)) return ST_E_NOMEM;
    ev->error_msg = (const char *)(uintptr_t)m0;
    if (token >= 0 && q->n_logprobs >= 0) {
        ev->has_logprob = 1;
        ev->logprob = q->logprob;
        ev->n_top = q->n_top;
        memcpy(ev->top, q->top, (size_t)q->n_top * sizeof *q->top);
    }
    stats_now(q, &ev->stats);
    return 0;
}

/* Drops a request from the table (its pages go back to the pool; keyed full pages stay in
 * the prefix cache for later requests). */
static void retire(st_engine *e, en_req *q, st_finish fin) {
    if (q->seq >= 0 && !q->keep_seq) st_kv_seq_free(e->kv, q->seq);
    en_draft_release(e, q);
    e->st.finished++;
    e->st.finished_by[fin]++;
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i] == q) {
            memmove(e->reqs + i, e->reqs + i + 1, (size_t)(e->n_reqs - i - 1) * sizeof *e->reqs);
            e->n_reqs--;
            break;
        }
    en_req_free(q);
    free(q);
}

static int finish(st_engine *e, en_req *q, int32_t token, size_t t0, st_finish fin, int err, const char *msg) {
    int64_t len = 0;
    /* a finish inside a verify round: the drafted tokens after it leave the KV */
    if (q->kv_keep >= 0 && q->seq >= 0 && st_kv_seq_len(e->kv, q->seq, &len) == 0 && len > q->kv_keep)
        st_kv_seq_rewind(e->kv, q->seq, q->kv_keep);
    int rc = push_event(e, q, token, t0, fin, err, msg);
    if (!rc && q->keep_seq) e->ev[e->n_ev - 1].seq = q->seq;
    retire(e, q, fin);
    return rc;
}

static int fail_req(st_engine *e, en_req *q, int err) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", *st_ctx_error(e->ctx) ? st_ctx_error(e->ctx) : st_strerror(err));
    return finish(e, q, -1, e->n_text, ST_FINISH_ERROR, err, msg);
}

/* ---- admission and preemption ------------------------------------------------------------------ */

static int64_t seq_len(const st_engine *e, const en_req *q) {
    int64_t len = 0;
    if (q->seq >= 0) st_kv_seq_len(e->kv, q->seq, &len);
    return len;
}

/* Pages an admitted request may still allocate: its whole claim less what it holds. */
static int64_t claim_left(const st_engine *e, const en_req *q) {
    const int64_t left = pages_for(e, q->len0 + q->n_prompt + q->max_gen) + 1 - pages_for(e, seq_len(e, q));
    return left > 0 ? left : 0;
}

/* RAM the running requests need for the next step: their pages plus one page of growth. */
static int64_t ram_need(const st_engine *e, const en_req *q) {
    const int64_t len = q->seq >= 0 && q->state != ST_REQ_WAITING ? seq_len(e, q) : q->len0 + q->n_prompt;
    return pages_for(e, len) + 1;
}

static int admissible(st_engine *e, const en_req *q) {
    if (n_running(e) >= e->p.n_parallel) return 0;
    int64_t ram = 0;
    for (int i = 0; i < e->n_reqs; i++)
        if (running(e->reqs[i])) ram += ram_need(e, e->reqs[i]);
    if (e->tier && n_running(e) > 0 && ram + ram_need(e, q) > e->ram_pages) return 0;
    if (q->state == ST_REQ_PREEMPTED) return 1; /* its claim is counted already */
    st_kv_stats ks;
    st_kv_get_stats(e->kv, &ks);
    int64_t claims = 0;
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->seq >= 0 && e->reqs[i] != q) claims += claim_left(e, e->reqs[i]);
    return claim_left(e, q) + claims <= e->cap_pages - ks.pages_used;
}

static int admit(st_engine *e, en_req *q) {
    if (q->state == ST_REQ_PREEMPTED) {
        q->state = q->n_done < q->n_prompt ? ST_REQ_PREFILL : ST_REQ_DECODE;
        q->st.t_queued = st_time_now() - q->t_submit;
        return 0;
    }
    int64_t att = 0;
    if (q->seq < 0) {
        int rc = st_kv_seq_create(e->kv, &q->seq);
        if (rc) return rc;
        if ((rc = st_kv_prefix_attach(e->kv, q->seq, q->prompt, q->n_prompt, &att))) return rc;
        /* the last prompt token is always computed: its logits draw the first new token */
        if (att >= q->n_prompt && (rc = st_kv_seq_truncate(e->kv, q->seq, att = q->n_prompt - 1))) return rc;
        q->st.n_cached = (int32_t)att;
    }
    q->n_done = (int32_t)att;
    q->state = ST_REQ_PREFILL;
    q->st.t_queued = st_time_now() - q->t_submit;
    e->st.tokens_prompt += q->n_prompt;
    e->st.tokens_cached += q->st.n_cached;
    return 0;
}

static void preempt(st_engine *e, en_req *q) {
    en_draft_release(e, q);
    q->state = ST_REQ_PREEMPTED;
    q->st.n_preempted++;
    e->st.preemptions++;
}

/* Preempts the newest running requests while the hot pool cannot hold the running ones'
 * next step (only with a tier; one request always keeps running: the tier streams what does
 * not fit, exactly). */
static void preempt_for_ram(st_engine *e) {
    if (!e->tier) return;
    for (;;) {
        int64_t ram = 0;
        en_req *newest = NULL;
        int n = 0;
        for (int i = 0; i < e->n_reqs; i++)
            if (running(e->reqs[i])) ram += ram_need(e, e->reqs[i]), newest = e->reqs[i], n++;
        if (n <= 1 || ram <= e->ram_pages) return;
        preempt(e, newest);
    }
}

/* FIFO: the oldest waiting or preempted request first; a request that cannot be admitted
 * blocks the ones behind it, so a large request is never starved by small ones. */
static int admit_waiting(st_engine *e) {
    for (int i = 0; i < e->n_reqs; i++) {
        en_req *q = e->reqs[i];
        if (q->state != ST_REQ_WAITING && q->state != ST_REQ_PREEMPTED) continue;
        if (!admissible(e, q)) return 0;
        int rc = admit(e, q);
        if (rc) {
            if (rc == ST_E_NOMEM) return rc;
            if ((rc = fail_req(e, q, rc))) return rc;
            i--; /* the table moved down */
        }
    }
    return 0;
}

/* ---- the step ------------------------------------------------------------------------------------- */

/* Each decoding request's draft for this step: its room (the batch's tokens left after one
 * of every decoding request, counted in order), then prompt lookup, else the draft model
 * (en_draft_run, for every request that wants it at once); a draft under draft_min is
 * dropped. Returns 0 or ST_E_NOMEM. */
static int plan_drafts(st_engine *e, int32_t n_dec) {
    int32_t n = 0, placed = 0, held = 0;
    for (int i = 0; i < e->n_reqs; i++) {
        en_req *q = e->reqs[i];
        q->step_n = 0, q->step_row = -1, q->step_draft = 0, q->dm_want = 0, q->step_src = 0;
        if (q->state != ST_REQ_DECODE) continue;
        q->step_len0 = seq_len(e, q);
        /* a certified selection may skip pages at any length, so it never drafts */
        const int certified = q->eps > 0 || (q->eps < 0 && e->p.quest.certify && e->p.quest.epsilon > 0);
        int32_t d = (q->spec_ngram || q->use_dm) && !certified
                        ? en_spec_room(q, e->page, e->p.quest.budget, q->step_len0, e->p.n_batch - n - n_dec + placed)
                        : 0;
        placed++;
        if (d > 0 && q->spec_cool > 0) q->spec_cool--, d = 0;
        if (d > 0 && e->spec_cost.pause > 0) held = 1, d = 0;
        if (d > 0 && q->spec_ngram) q->step_draft = en_spec_draft(q, d);
        if (d > 0 && !q->step_draft && q->use_dm && d >= e->p.draft_min && !en_draft_in_debt(q)) q->dm_want = d;
        n += 1 + (q->step_draft ? q->step_draft : q->dm_want);
    }
    e->step_held = held;
    int rc = en_draft_run(e);
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->step_draft < e->p.draft_min) e->reqs[i]->step_draft = 0;
    return rc;
}

/* Lays out this step's batch: a token of every decoding request with its draft, then prompt
 * pieces in request order within the n_batch budget. Returns the token count, -1 for no
 * memory. */
static int32_t build_batch(st_engine *e) {
    int32_t n = 0, n_dec = 0;
    for (int i = 0; i < e->n_reqs; i++) n_dec += e->reqs[i]->state == ST_REQ_DECODE;
    if (plan_drafts(e, n_dec)) return -1;
    for (int i = 0; i < e->n_reqs; i++) {
        en_req *q = e->reqs[i];
        if (q->state != ST_REQ_DECODE) continue;
        e->b_tok[n] = q->last, e->b_seq[n] = q->seq, e->b_want[n] = 1, e->b_prefill[n] = 0;
        e->b_budget[n] = q->budget;
        e->b_eps[n] = q->eps;
        const int32_t k = q->step_draft;
        e->b_verify[n] = k > 0;
        for (int32_t j = 0; j < k; j++) {
            e->b_tok[n + 1 + j] = q->draft[j], e->b_seq[n + 1 + j] = q->seq, e->b_want[n + 1 + j] = 1;
            e->b_prefill[n + 1 + j] = 0, e->b_budget[n + 1 + j] = q->budget, e->b_verify[n + 1 + j] = 1;
            e->b_eps[n + 1 + j] = -1;
        }
        q->step_n = 1 + k;
        n += 1 + k;
    }
    /* while streams decode, prompts get a smaller share of the step (its time is their gap) */
    const int32_t budget = n ? n + e->p.n_batch_busy : e->p.n_batch;
    for (int i = 0; i < e->n_reqs && n < budget && n < e->p.n_batch; i++) {
        en_req *q = e->reqs[i];
        if (q->state != ST_REQ_PREFILL) continue;
        int32_t k = q->n_prompt - q->n_done;
        const int32_t room = (budget < e->p.n_batch ? budget : e->p.n_batch) - n;
        if (k > room) k = room;
        for (int32_t t = 0; t < k; t++) {
            e->b_tok[n + t] = q->prompt[q->n_done + t], e->b_seq[n + t] = q->seq;
            e->b_want[n + t] = q->n_done + k == q->n_prompt && t == k - 1;
            e->b_prefill[n + t] = 1, e->b_budget[n + t] = -1, e->b_verify[n + t] = 0;
            e->b_eps[n + t] = -1;
        }
        q->step_n = k;
        n += k;
    }
    /* logits rows in batch order: requests appear in table order within each half */
    int32_t row = 0;
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->state == ST_REQ_DECODE && e->reqs[i]->step_n)
            e->reqs[i]->step_row = row, row += e->reqs[i]->step_n;
    for (int i = 0; i < e->n_reqs; i++) {
        en_req *q = e->reqs[i];
        if (q->state == ST_REQ_PREFILL && q->step_n && q->n_done + q->step_n == q->n_prompt) q->step_row = row++;
    }
    if (row > e->cap_rows) {
        float *l = realloc(e->logits, (size_t)row * (size_t)e->n_vocab * sizeof *l);
        if (!l) return -1;
        e->logits = l, e->cap_rows = row;
    }
    return n;
}

static en_req *by_seq(const st_engine *e, st_kv_seq_id seq) {
    for (int i = 0; i < e->n_reqs; i++)
        if (e->reqs[i]->seq == seq) return e->reqs[i];
    return NULL;
}

/* A token was drawn for q: its event, and the finish it may cause. */
static int on_token(st_engine *e, en_req *q, int32_t t) {
    const size_t t0 = e->n_text;
    q->st.n_generated++;
    e->st.tokens_generated++;
    if (q->st.n_generated == 1) q->st.t_first = st_time_now() - q->t_submit;
    if ((q->spec_ngram || q->use_dm) && en_spec_push(q, t)) return ST_E_NOMEM;
    if (st_tok_is_eog(e->tok, t)) {
        int rc = en_req_text_flush(q, &e->text, &e->n_text, &e->cap_text);
        return rc ? rc : finish(e, q, t, t0, ST_FINISH_EOS, 0, NULL);
    }
    int stopped = 0;
    int rc = en_req_text(q, t, &e->text, &e->n_text, &e->cap_text, &stopped);
    if (rc) return rc;
    if (stopped) return finish(e, q, t, t0, ST_FINISH_STOP, 0, NULL);
    if (q->st.n_generated >= q->max_gen) {
        if ((rc = en_req_text_flush(q, &e->text, &e->n_text, &e->cap_text))) return rc;
        return finish(e, q, t, t0, q->max_is_ctx ? ST_FINISH_CONTEXT : ST_FINISH_LENGTH, 0, NULL);
    }
    q->last = t;
    return push_event(e, q, t, t0, ST_FINISH_NONE, 0, NULL);
}

/* The verify round of a request whose last token ran with a draft: row + i holds the logits
 * after the draft's first i tokens. Tokens are drawn in order over the distribution plain
 * decode draws from (the same sampler, history, biases and logprobs over the same logits:
 * the verify run's logits are decode's, model.h); at a drafted position by the speculative
 * rule (st_sampler_sample_draft: greedy takes the argmax, sampling accepts the draft with
 * its probability, else draws from the rest), and emitted while the draft is accepted; the
 * first token that is not, or the one after the whole draft, ends the round. A finish
 * (stop string, limit, end of generation) cuts the round where plain decode would stop.
 * The KV keeps the tokens fed before the last one drawn (st_kv_seq_rewind drops the rest). */
static int spec_round(st_engine *e, en_req *q, int32_t row) {
    const int64_t len0 = q->step_len0;
    const int32_t k = q->step_draft;
    int32_t acc = 0;
    const int model = q->step_src;
    e->st.spec_drafts++;
    e->st.spec_drafted += k;
    e->st.spec_model_drafts += model;
    e->st.spec_model_drafted += model ? k : 0;
    for (int32_t i = 0; i <= k; i++) {
        int taken = 0;
        const int32_t t = en_req_sample(q, e->eog, e->n_eog, e->logits + (size_t)(row + i) * e->n_vocab, e->n_vocab,
                                        i < k ? q->draft[i] : -1, &taken);
        const int more = i < k && taken;
        q->kv_keep = len0 + i + 1;
        if (more) acc++, e->st.spec_accepted++, e->st.spec_model_accepted += model, q->dm_gain += model * e->t_step;
        if (!more) {
            int rc = st_kv_seq_rewind(e->kv, q->seq, q->kv_keep);
            if (rc) return fail_req(e, q, rc);
        }
        const int before = e->n_reqs;
        int rc = on_token(e, q, t);
        if (rc || e->n_reqs != before) return rc; /* finished: q is gone */
        if (!more) break;
    }
    q->kv_keep = -1;
    if (model) en_draft_after(e, q, acc), en_draft_record(e, q, acc > 0);
    en_spec_after(q, k, acc);
    return 0;
}

int st_engine_step(st_engine *e, const st_engine_event **events, int *n_events) {
    *events = NULL;
    *n_events = 0;
    e->n_ev = 0;
    e->n_text = 0;
    e->t_dstep = 0;
    int rc = 0;
    for (int i = 0; i < e->n_reqs && !rc; i++)
        if (e->reqs[i]->cancel) {
            rc = finish(e, e->reqs[i], -1, e->n_text, ST_FINISH_CANCELLED, 0, NULL);
            i--;
        }
    if (!rc) preempt_for_ram(e);
    if (!rc) rc = admit_waiting(e);
    int32_t n = 0;
    int prefill = 0, verify = 0;
    double t_fwd = 0;
    while (!rc) {
        if (!(n = build_batch(e))) break;
        if (n < 0) {
            rc = ST_E_NOMEM;
            n = 0;
            break;
        }
        st_batch b = {.n_tokens = n, .tokens = e->b_tok, .seq = e->b_seq, .want_logits = e->b_want,
                      .prefill = e->b_prefill, .quest_budget = e->b_budget, .quest_epsilon = e->b_eps, .verify = e->b_verify};
        int frc = st_runner_forward(e->runner, &b, e->logits);
        if (!frc) {
            for (int32_t j = 0; j < n; j++) prefill |= e->b_prefill[j], verify |= e->b_verify[j];
            t_fwd = st_runner_last_seconds(e->runner);
            if (!prefill) e->t_step = e->t_step > 0 ? 0.8 * e->t_step + 0.2 * t_fwd : t_fwd;
            break;
        }
        en_req *bad = by_seq(e, st_runner_failed_seq(e->runner));
        e->st.retries++;
        if (!bad) {
            /* not one request's error: every request of the step fails with it */
            for (int i = 0; i < e->n_reqs && !rc; i++)
                if (e->reqs[i]->step_n) rc = fail_req(e, e->reqs[i], frc), i--;
            if (!rc) rc = frc;
            n = 0;
            break;
        }
        if (frc == ST_E_POOL_FULL && e->tier && n_running(e) > 1) preempt(e, bad);
        else rc = fail_req(e, bad, frc);
    }
    const int64_t gen0 = e->st.tokens_generated;
    if (n > 0) {
        e->st.steps++;
        e->st.spec_paused_steps += e->step_held; /* once per step, not per retried batch */
        /* sample in table order; a finish removes the entry, so i moves on only when none did */
        for (int i = 0; i < e->n_reqs && !rc;) {
            en_req *q = e->reqs[i];
            const int32_t step_n = q->step_n, row = q->step_row;
            const int was_prefill = q->state == ST_REQ_PREFILL;
            q->step_n = 0;
            if (step_n && was_prefill) {
                q->n_done += step_n;
                e->st.tokens_prefilled += step_n;
            }
            if (!step_n || row < 0) {
                i++;
                continue;
            }
            if (was_prefill) q->state = ST_REQ_DECODE;
            const int before = e->n_reqs;
            if (was_prefill && q->max_gen == 0) {
                /* max_tokens 0: the request ends as soon as its prompt is read */
                rc = finish(e, q, -1, e->n_text, ST_FINISH_LENGTH, 0, NULL);
            } else if (q->step_draft > 0) {
                rc = spec_round(e, q, row);
            } else {
                int32_t t = en_req_sample(q, e->eog, e->n_eog, e->logits + (size_t)row * e->n_vocab, e->n_vocab, -1, NULL);
                rc = on_token(e, q, t);
            }
            if (e->n_reqs == before) i++;
        }
    }
    if (!rc && n > 0) rc = en_draft_follow(e);
    if (!rc && n > 0 && !prefill)
        en_spec_cost_record(&e->spec_cost, t_fwd + e->t_dstep, e->st.tokens_generated - gen0, verify);
    for (int i = 0; i < e->n_ev; i++) {
        e->ev[i].text = e->text ? e->text + (uintptr_t)e->ev[i].text : "";
        e->ev[i].error_msg = e->text ? e->text + (uintptr_t)e->ev[i].error_msg : "";
    }
    *events = e->ev;
    *n_events = e->n_ev;
    return rc;
}
