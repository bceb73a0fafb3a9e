/* Quest sparse decode for the forward pass: per-span page selection, the certified mode's
 * bound, the sampled mass audit and the runner's Quest statistics. */
#include "model/forward_int.h"

#include <stdlib.h>

int st_fwd_quest_alloc(st_runner *r) {
    if (r->qsel) return 0;
    r->qsel = calloc((size_t)r->n_batch, sizeof *r->qsel);
    r->qfrac = malloc((size_t)r->ag.n_head * sizeof *r->qfrac);
    r->qbound = malloc((size_t)r->ag.n_head * sizeof *r->qbound);
    r->qskip = malloc((size_t)r->ag.n_head * sizeof *r->qskip);
    return r->qsel && r->qfrac && r->qbound && r->qskip ? 0 : ST_E_NOMEM;
}

int st_runner_set_quest(st_runner *r, const st_kv_quest_params *p, int32_t audit_every) {
    st_kv_quest_params q = p ? *p : st_kv_quest_default_params();
    if (q.budget < 0 || audit_every < 0 || (q.certify && !(q.epsilon >= 0 && q.epsilon <= 1)))
        return st_seterr(r->ctx, ST_E_INVAL, "quest: budget %lld / audit %d / epsilon %g", (long long)q.budget,
                         audit_every, q.certify ? q.epsilon : 0.0);
    if ((q.budget > 0 || q.certify) && st_fwd_quest_alloc(r)) return ST_E_NOMEM;
    r->quest = q;
    r->audit_every = audit_every;
    return 0;
}

void st_runner_get_quest_stats(const st_runner *r, st_runner_quest_stats *out) {
    *out = r->qst;
    if (out->audits) out->mass_mean = r->mass_sum / (double)out->audits;
    if (out->cert_bounds) out->bound_mean = r->bound_sum / (double)out->cert_bounds;
}

/* A decode span's Quest parameters: the runner's, with the batch's per-sequence budget and
 * epsilon (a request's epsilon turns certified mode on). */
static st_kv_quest_params span_quest(const st_runner *r, const span *sp) {
    st_kv_quest_params qp = r->quest;
    if (sp->budget >= 0) qp.budget = sp->budget;
    if (sp->eps >= 0) qp.certify = 1, qp.epsilon = sp->eps;
    qp.score_scale = r->ag.scale;
    return qp;
}

int st_fwd_span_sparse(const st_runner *r, const span *sp) {
    const st_kv_quest_params qp = span_quest(r, sp);
    return !sp->verify && (qp.certify || qp.budget > 0);
}

static int fetch_views(st_runner *r, st_kv_seq_id seq, int layer, int off, int *nv) {
    for (;;) {
        int rc = st_kv_seq_views(r->kv, seq, layer, r->views + off, r->views_cap - off, nv);
        if (rc == 0) return 0;
        if (rc != ST_E_LIMIT) return rc;
        int cap = r->views_cap * 2 > off + *nv ? r->views_cap * 2 : off + *nv + 64;
        st_attn_page *nvw = realloc(r->views, (size_t)cap * sizeof *nvw);
        if (!nvw) return ST_E_NOMEM;
        r->views = nvw;
        r->views_cap = cap;
    }
}

/* Quest: each decode span's pages per KV head, chosen from its query (after RoPE) using only
 * the page tables and key boxes (in RAM for every page, hot or cold), so selection never
 * touches disk; st_kv_attend_decode then reads, fetches or streams only the selected pages.
 * Sampled steps also audit the captured softmax mass, which needs every key of the layer:
 * the audit runs only when the sequence's pages are all in RAM (st_kv_seq_views) and skips
 * the sample otherwise, so a tiered run never faults the whole past in for a statistic. */
int st_fwd_quest_select(st_runner *r, int layer, const span *sp, int n_sp) {
    if (layer == 0) r->qst.steps++;
    const int audit = r->audit_every > 0 && (r->qst.steps - 1) % r->audit_every == 0;
    for (int s = 0; s < n_sp; s++) {
        if (sp[s].verify) continue; /* dense */
        if (!r->qsel[s] && st_kv_select_create(&r->qsel[s])) return ST_E_NOMEM;
        st_kv_select *sel = r->qsel[s];
        st_kv_quest_params qp = span_quest(r, &sp[s]);
        const float *q = r->q + (size_t)sp[s].i0 * r->HQ;
        /* budget 0 makes a dense selection, so every decode span has one and the attend call
         * below can take the array as it is */
        int rc = st_kv_quest_select(r->kv, sp[s].seq, layer, r->ws, q, r->ag.n_head, &qp, sel);
        if (rc) {
            r->failed_seq = sp[s].seq;
            return st_seterr(r->ctx, rc, "Quest selection (layer %d): %s", layer, st_strerror(rc));
        }
        const int cert = qp.certify && layer >= (qp.dense_layers < 0 ? 2 : qp.dense_layers);
        int have_views = 0, nv = 0;
        if (cert && !st_kv_select_dense(sel)) {
            /* the certificate reads the selected keys: with a page on disk the step goes
             * dense rather than fault the past in for a bound */
            rc = fetch_views(r, sp[s].seq, layer, 0, &nv);
            if (rc == ST_E_STATE) {
                st_kv_quest_params dq = qp;
                dq.epsilon = 0;
                rc = st_kv_quest_select(r->kv, sp[s].seq, layer, r->ws, q, r->ag.n_head, &dq, sel);
                r->qst.cert_dense++;
            } else if (!rc) {
                have_views = 1;
                rc = st_kv_quest_certify(r->kv, r->views, nv, q, r->ag.n_head, r->ag.scale, qp.epsilon, sel,
                                         r->qbound);
            }
            if (rc) {
                r->failed_seq = sp[s].seq;
                return st_seterr(r->ctx, rc, "Quest certificate (layer %d): %s", layer, st_strerror(rc));
            }
        }
        if (cert) {
            st_kv_select_stats ss;
            st_kv_select_get_stats(sel, &ss);
            const int dense = st_kv_select_dense(sel);
            r->qst.selects++;
            r->qst.cert_selects++;
            r->qst.pages_listed += dense ? (int64_t)st_kv_select_n_views(sel) * r->ag.n_kv_head : ss.n_listed;
            r->qst.pages_total += (int64_t)st_kv_select_n_views(sel) * r->ag.n_kv_head;
            r->qst.pages_grown += ss.n_grown;
            r->qst.boxes_ranked += ss.n_ranked;
            r->qst.boxes_scored += ss.n_scored;
            for (int h = 0; h < r->ag.n_head; h++) {
                const double b = have_views ? r->qbound[h] : 0;
                r->bound_sum += b;
                if (b > r->qst.bound_max) r->qst.bound_max = b;
                r->qst.cert_bounds++;
            }
            if (dense || !audit) continue;
        } else {
            if (st_kv_select_dense(sel)) continue;
            st_kv_select_stats ss;
            st_kv_select_get_stats(sel, &ss);
            r->qst.selects++;
            r->qst.pages_listed += ss.n_listed;
            r->qst.pages_total += (int64_t)st_kv_select_n_views(sel) * r->ag.n_kv_head;
            r->qst.boxes_ranked += ss.n_ranked;
            r->qst.boxes_scored += ss.n_scored;
            if (!audit) continue;
            rc = fetch_views(r, sp[s].seq, layer, 0, &nv);
            if (rc == ST_E_STATE) continue; /* some page is on disk: skip this sample */
            if (rc) return st_seterr(r->ctx, rc, "Quest audit: KV views: %s", st_strerror(rc));
        }
        rc = st_kv_quest_mass_skip(r->kv, r->views, nv, sel, q, r->ag.n_head, r->ag.scale, r->qfrac,
                                   cert ? r->qskip : NULL);
        if (rc) return st_seterr(r->ctx, rc, "Quest audit: %s", st_strerror(rc));
        for (int h = 0; h < r->ag.n_head; h++) {
            r->mass_sum += r->qfrac[h];
            if (r->qfrac[h] < r->qst.mass_min) r->qst.mass_min = r->qfrac[h];
            r->qst.audits++;
        }
        for (int h = 0; cert && h < r->ag.n_head; h++) {
            const int32_t *idx;
            int32_t n_sel;
            st_kv_select_head(sel, h / (r->ag.n_head / r->ag.n_kv_head), &idx, &n_sel);
            r->qst.cert_audits++;
            r->qst.cert_audits_skipping += n_sel < nv;
            if (r->qskip[h] > r->qst.skip_max) r->qst.skip_max = r->qskip[h];
            /* NaN compares false: a NaN mass (NaN keys) is no evidence either way */
            if (r->qskip[h] > r->qbound[h]) {
                if (!r->qst.cert_violations++) {
                    r->qst.viol_step = r->qst.steps, r->qst.viol_layer = layer, r->qst.viol_head = h;
                    r->qst.viol_skip = r->qskip[h], r->qst.viol_bound = r->qbound[h];
                }
            }
        }
    }
    return 0;
}
