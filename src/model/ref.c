/* Naive reference forward: one sequence, token by token, contiguous K/V arrays, f64
 * accumulators, weights dequantized row by row. Shares no code with forward.c, rope.c or the
 * attention kernels; used by tests to check the paged, threaded, chunked forward.
 *
 * Two roundings are modelled because they are part of what the engine is defined to compute
 * (ggml does the same): activations entering a product are rounded through the weight's
 * activation format (Q8_0 / Q8_1 / Q8_K, with the quantizer of the ISA the engine uses, since
 * SIMD quantizers may round ties differently) when emulate_act is set, and K/V are rounded to the
 * KV element type when it is f16 or bf16. Everything else is exact up to f64.
 *
 * Rounding an activation is discontinuous: where an element's exact value lies on a
 * boundary (within a few f32 ulps), the f32 engine and the f64 reference land on either side by
 * the last bits of their sums, and the flip propagates (a 1e-6 nudge of the activations moved
 * these logits by up to 3e-2). Given the engine's quantized rows (st_ref_opts.engine_act),
 * the reference takes the engine's block where, and only where, the two differ in such ties
 * (block_ok), so the comparison holds to 1e-3 everywhere; a block that differs anywhere
 * else keeps the reference's own rounding and shows as an error. */
#include "model/model_int.h"
#include "strata/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct ref {
    const st_model *m;
    int emulate_act;
    const st_kernels *kern; /* whose activation quantizer to emulate */
    float *row;   /* [max width] dequantized weight row */
    float *act;   /* [max width] activation as the product sees it */
    void *qbuf;   /* quantized activation scratch */
    void *wrow;   /* [max width] bytes of a weight row taken out of the quad layout */
    double *xin;  /* [max width] the activation in f64, as quantized */
    const st_ref_opts *o;
    int layer;    /* where the product in flight reads its input (engine_act's key) */
    st_act_site site;
    int64_t pos;
};

/* ---- the engine's rounding where the reference sits on a boundary ------------------------ */

/* q_e is round(u) or, with u within tol of the midpoint between them, its neighbour. */
static int q_ok(int q_e, double u, double tol, int lo, int hi) {
    double r = nearbyint(u);
    r = r < lo ? lo : r > hi ? hi : r;
    if (q_e == (int)r) return 1;
    return fabs((double)q_e - r) == 1.0 && fabs(u - 0.5 * ((double)q_e + r)) <= tol;
}

/* Two fp16 scales: the same, or neighbours with the exact scale within tol (relative) of
 * the midpoint between them. */
static int fp16_scale_ok(uint16_t e, uint16_t r, double exact, double tol) {
    if (e == r) return 1;
    const double de = st_fp16_to_fp32(e), dr = st_fp16_to_fp32(r);
    return (e == r + 1 || r == e + 1) && fabs(exact - 0.5 * (de + dr)) <= tol * fabs(exact);
}

/* Whether the engine's block eb of activation type t (n values x, reference block rb) is
 * another right rounding of x: its scale and every element agree with the reference, or
 * differ only where x lies within tol of a rounding boundary (tol relative to the block's
 * largest magnitude: 127 quantization steps). Derived fields (q8_1's s, q8_K's bsums) must
 * be what the engine's own elements give. */
static int block_ok(st_type t, const double *x, const uint8_t *eb, const uint8_t *rb, double tol) {
    double amax = 0;
    int n = t == ST_TYPE_Q8_K ? 256 : 32;
    if (t == ST_TYPE_F16) {
        uint16_t e, r;
        memcpy(&e, eb, 2), memcpy(&r, rb, 2);
        if (e == r) return 1;
        const double fe = st_fp16_to_fp32(e), fr = st_fp16_to_fp32(r);
        return (e == r + 1 || r == e + 1) && fabs(x[0] - 0.5 * (fe + fr)) <= tol * fabs(x[0]);
    }
    for (int j = 0; j < n; j++) amax = fmax(amax, fabs(x[j]));
    const double step = amax / 127; /* ggml's scale before it is stored */
    double scale = step;            /* signed, as the elements were divided by it */
    const int8_t *qe;
    if (t == ST_TYPE_Q8_K) {
        float de, dr;
        memcpy(&de, eb, 4), memcpy(&dr, rb, 4);
        /* a float scale: equal up to the f32 noise of its input, or of the other sign when
         * two elements of opposite sign tie for the largest magnitude */
        if (fabs(fabs((double)de) - step) > tol * step) return 0;
        if ((de < 0) != (dr < 0)) {
            int near_tie = 0;
            for (int j = 0; j < n; j++)
                near_tie |= (x[j] < 0) == (dr < 0) && amax - fabs(x[j]) <= tol * amax && fabs(x[j]) > 0;
            if (!near_tie) return 0;
        }
        scale = de;
        qe = (const int8_t *)eb + 4;
    } else {
        uint16_t de, dr;
        memcpy(&de, eb, 2), memcpy(&dr, rb, 2);
        if (!fp16_scale_ok(de, dr, step, tol)) return 0;
        const size_t off = t == ST_TYPE_Q8_1 ? 4 : 2;
        qe = (const int8_t *)eb + off;
    }
    int sum = 0;
    for (int j = 0; j < n; j++) {
        if (scale == 0 ? qe[j] != 0 : !q_ok(qe[j], x[j] / scale, 127 * tol, -127, 127)) return 0;
        sum += qe[j];
    }
    if (t == ST_TYPE_Q8_1) {
        uint16_t d16, s16;
        memcpy(&d16, eb, 2), memcpy(&s16, eb + 2, 2);
        /* s = fp16(sum * d) with the engine's float d, which its fp16 d rounds */
        const double want = (double)sum * st_fp16_to_fp32(d16), got = st_fp16_to_fp32(s16);
        if (fabs(got - want) > 2e-3 * fabs(want) + 1e-7) return 0;
    }
    if (t == ST_TYPE_Q8_K)
        for (int g = 0; g < 16; g++) {
            int16_t bs;
            int gs = 0;
            memcpy(&bs, eb + 4 + 256 + 2 * g, 2);
            for (int l = 0; l < 16; l++) gs += qe[16 * g + l];
            if (bs != gs) return 0;
        }
    return 1;
}

/* Takes the engine's blocks of the activation in R->qbuf (type t, n values) where they are
 * another right rounding of R->xin (block_ok). */
static void adopt_engine(struct ref *R, st_type t, int64_t n) {
    const st_ref_opts *o = R->o;
    const uint8_t *e = o->engine_act(o->engine_user, R->layer, R->site, R->pos, t);
    if (!e) return;
    const int64_t bs = st_type_block_size(t);
    const size_t bb = st_row_bytes(t, bs);
    uint8_t *q = R->qbuf;
    for (int64_t b = 0; b < n / bs; b++) {
        if (o->n_blocks) ++*o->n_blocks;
        /* a q8_K scale is a float whose last bits follow the input's: only its elements
         * make a block another rounding */
        const size_t skip = t == ST_TYPE_Q8_K ? 4 : 0;
        if (!memcmp(q + b * bb + skip, e + b * bb + skip, bb - skip)) continue;
        if (!block_ok(t, R->xin + b * bs, e + b * bb, q + b * bb, o->tie_tol)) continue;
        memcpy(q + b * bb, e + b * bb, bb);
        if (o->n_adopted) ++*o->n_adopted;
    }
}

/* The min of each 32-block of a q4_1 / q5_1 row (0 for other types). */
static double block_min(const st_wt *w, const uint8_t *row, int64_t b) {
    if (w->type == ST_TYPE_Q4_1) return st_fp16_to_fp32(((const st_block_q4_1 *)row)[b].m);
    if (w->type == ST_TYPE_Q5_1) return st_fp16_to_fp32(((const st_block_q5_1 *)row)[b].m);
    return 0;
}

/* y[r] = sum_j W[r][j] * x[j] in f64 (x rounded through the activation format first). With
 * Q8_1 activations the weight's block min multiplies the block's stored fp16 sum s (as ggml's
 * q4_1 / q5_1 dots define it), not the exact sum of the dequantized activations. */
static int ref_matvec(struct ref *R, const st_wt *w, const double *x, double *y) {
    const int64_t n = w->ne0;
    for (int64_t j = 0; j < n; j++) {
        R->xin[j] = x[j];
        R->act[j] = (float)R->xin[j];
    }
    st_type vdt = st_type_vec_dot_type(w->type);
    const int q81 = R->emulate_act && vdt == ST_TYPE_Q8_1;
    if (R->emulate_act && vdt != ST_TYPE_F32) {
        int rc = st_quantize_act(R->kern, w->type, R->act, R->qbuf, n);
        if (!rc && R->o->engine_act) adopt_engine(R, vdt, n);
        if (!rc) rc = st_dequantize_row(vdt, R->qbuf, R->act, n);
        if (rc) return rc;
    }
    for (int64_t r = 0; r < w->ne1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        if (w->layout != ST_WLAYOUT_ROWS) { /* the row as the file holds it */
            int rc = w->layout == ST_WLAYOUT_QUADS ? st_quads_row(w->type, w->data, w->ne1, w->ne0, r, R->wrow)
                                                   : st_panels_row(w->type, w->data, w->ne1, w->ne0, r, R->wrow);
            if (rc) return rc;
            row = R->wrow;
        }
        int rc = st_dequantize_row(w->type, row, R->row, n);
        if (rc) return rc;
        double s = 0;
        for (int64_t j = 0; j < n; j++) s += (double)R->row[j] * (double)R->act[j];
        for (int64_t b = 0; q81 && b < n / 32; b++) {
            const st_block_q8_1 *a = (const st_block_q8_1 *)R->qbuf + b;
            double exact = 0;
            for (int j = 0; j < 32; j++) exact += (double)R->act[b * 32 + j];
            s += block_min(w, row, b) * ((double)st_fp16_to_fp32(a->s) - exact);
        }
        y[r] = s;
    }
    return 0;
}

static void ref_rmsnorm(double *y, const double *x, const float *w, int64_t n, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
    double sc = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++) y[i] = x[i] * sc * (double)w[i];
}

static double round_kv(st_type t, double v) {
    if (t == ST_TYPE_F16) return st_fp16_to_fp32(st_fp32_to_fp16((float)v));
    if (t == ST_TYPE_BF16) return st_bf16_to_fp32(st_fp32_to_bf16((float)v));
    return (float)v;
}

/* Angle and magnitude of rotary pair i at pos, from the definitions (ggml's rope_yarn). */
static void ref_rope_angle(const st_model *m, int64_t pos, int i, double *ang, double *mag) {
    const st_model_hparams *hp = &m->hp;
    double extrap = (double)pos * pow(hp->rope_base, -2.0 * i / hp->n_rot);
    if (m->rope_freqs.data) extrap /= ((const float *)m->rope_freqs.data)[i];
    double th = hp->rope_freq_scale * extrap, ms = hp->yarn_attn_factor;
    if (hp->yarn_ext_factor != 0) {
        double b = 2 * log(hp->rope_base), n = hp->rope_n_ctx_orig;
        double lo = floor(hp->n_rot * log(n / (hp->yarn_beta_fast * 2 * M_PI)) / b);
        double hi = ceil(hp->n_rot * log(n / (hp->yarn_beta_slow * 2 * M_PI)) / b);
        lo = lo < 0 ? 0 : lo;
        hi = hi > hp->n_rot - 1 ? hp->n_rot - 1 : hi;
        double y = (i - lo) / fmax(0.001, hi - lo);
        double mix = (1 - fmin(1, fmax(0, y))) * hp->yarn_ext_factor;
        th = th * (1 - mix) + extrap * mix;
        ms *= 1 + 0.1 * log(1 / hp->rope_freq_scale);
    }
    *ang = th;
    *mag = ms;
}

static void ref_rope(const st_model *m, int64_t pos, double *x, int n_heads) {
    const st_model_hparams *hp = &m->hp;
    for (int h = 0; h < n_heads; h++) {
        double *v = x + (size_t)h * hp->head_dim;
        for (int i = 0; i < hp->n_rot / 2; i++) {
            double a, mag;
            ref_rope_angle(m, pos, i, &a, &mag);
            int i0 = hp->rope_neox ? i : 2 * i, i1 = hp->rope_neox ? i + hp->n_rot / 2 : 2 * i + 1;
            double c = cos(a) * mag, s = sin(a) * mag, x0 = v[i0], x1 = v[i1];
            v[i0] = x0 * c - x1 * s;
            v[i1] = x0 * s + x1 * c;
        }
    }
}

static void ref_bias(double *y, const st_wt *b) {
    if (!b->data)
        return;
    for (int64_t i = 0; i < b->ne0; i++) y[i] += ((const float *)b->data)[i];
}

int st_model_ref_forward(const st_model *m, const st_ref_opts *o, const int32_t *tokens, int n, float *logits) {
    const st_type kv_type = o->kv_type;
    const st_model_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, hd = hp->head_dim, HQ = hd * hp->n_head, HK = hd * hp->n_head_kv, F = hp->n_ff;
    const int64_t W = (E > F ? E : F) > HQ ? (E > F ? E : F) : HQ;
    struct ref R = {.m = m, .emulate_act = o->emulate_act, .kern = st_kernels_get(o->isa), .o = o};
    R.row = malloc((size_t)W * sizeof(float));
    R.act = malloc((size_t)W * sizeof(float));
    R.qbuf = malloc((size_t)W * 4 + 4096);
    R.wrow = malloc((size_t)W * 4 + 4096); /* a row of any type is at most 4 bytes an element */
    R.xin = malloc((size_t)W * sizeof(double));
    double *x = malloc((size_t)E * 8), *xn = malloc((size_t)W * 8), *q = malloc((size_t)HQ * 8);
    double *att = malloc((size_t)HQ * 8), *tmp = malloc((size_t)W * 8), *g = malloc((size_t)F * 8);
    double *u = malloc((size_t)F * 8), *lg = malloc((size_t)hp->n_vocab * 8), *sc = malloc((size_t)n * 8);
    double *K = malloc((size_t)hp->n_layer * n * HK * 8), *V = malloc((size_t)hp->n_layer * n * HK * 8);
    int rc = 0;
    if (!R.row || !R.act || !R.qbuf || !R.wrow || !R.xin || !x || !xn || !q || !att || !tmp || !g || !u || !lg || !sc || !K || !V) {
        rc = ST_E_NOMEM;
        goto done;
    }
    for (int t = 0; t < n && !rc; t++) {
        const st_wt *e = &m->tok_embd;
        if ((rc = st_dequantize_row(e->type, (const uint8_t *)e->data + (size_t)tokens[t] * e->row_bytes, R.row, E)))
            break;
        for (int64_t i = 0; i < E; i++) x[i] = R.row[i];
        for (int il = 0; il < hp->n_layer && !rc; il++) {
            const st_layer *ly = &m->layers[il];
            double *Kl = K + (size_t)il * n * HK, *Vl = V + (size_t)il * n * HK;
            double *kt = Kl + (size_t)t * HK, *vt = Vl + (size_t)t * HK;
            ref_rmsnorm(xn, x, ly->attn_norm.data, E, hp->rms_eps);
            R.layer = il, R.pos = t, R.site = ST_ACT_ATTN_IN;
            if ((rc = ref_matvec(&R, &ly->wq, xn, q)) || (rc = ref_matvec(&R, &ly->wk, xn, kt)) ||
                (rc = ref_matvec(&R, &ly->wv, xn, vt)))
                break;
            ref_bias(q, &ly->bq);
            ref_bias(kt, &ly->bk);
            ref_bias(vt, &ly->bv);
            if (ly->q_norm.data) {
                for (int h = 0; h < hp->n_head; h++) ref_rmsnorm(q + h * hd, q + h * hd, ly->q_norm.data, hd, hp->rms_eps);
                for (int h = 0; h < hp->n_head_kv; h++)
                    ref_rmsnorm(kt + h * hd, kt + h * hd, ly->k_norm.data, hd, hp->rms_eps);
            }
            ref_rope(m, t, q, hp->n_head);
            ref_rope(m, t, kt, hp->n_head_kv);
            for (int64_t i = 0; i < HK; i++) {
                kt[i] = round_kv(kv_type, kt[i]);
                vt[i] = round_kv(kv_type, vt[i]);
            }
            const int grp = hp->n_head / hp->n_head_kv;
            for (int h = 0; h < hp->n_head; h++) {
                const double *qh = q + h * hd;
                const int64_t ko = (int64_t)(h / grp) * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int64_t d = 0; d < hd; d++) s += qh[d] * Kl[(size_t)j * HK + ko + d];
                    sc[j] = s / sqrt((double)hd);
                    if (sc[j] > mx) mx = sc[j];
                }
                for (int j = 0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
                for (int64_t d = 0; d < hd; d++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++) o += sc[j] * Vl[(size_t)j * HK + ko + d];
                    att[h * hd + d] = o / sum;
                }
            }
            R.site = ST_ACT_ATTN_OUT;
            if ((rc = ref_matvec(&R, &ly->wo, att, tmp))) break;
            ref_bias(tmp, &ly->bo);
            for (int64_t i = 0; i < E; i++) x[i] += tmp[i];
            ref_rmsnorm(xn, x, ly->ffn_norm.data, E, hp->rms_eps);
            R.site = ST_ACT_FFN_IN;
            if ((rc = ref_matvec(&R, &ly->w_gate, xn, g)) || (rc = ref_matvec(&R, &ly->w_up, xn, u))) break;
            for (int64_t i = 0; i < F; i++) g[i] = g[i] / (1 + exp(-g[i])) * u[i];
            R.site = ST_ACT_FFN_MID;
            if ((rc = ref_matvec(&R, &ly->w_down, g, tmp))) break;
            for (int64_t i = 0; i < E; i++) x[i] += tmp[i];
        }
        if (rc) break;
        ref_rmsnorm(xn, x, m->output_norm.data, E, hp->rms_eps);
        R.layer = hp->n_layer, R.pos = t, R.site = ST_ACT_OUTPUT;
        if ((rc = ref_matvec(&R, &m->output, xn, lg))) break;
        for (int64_t i = 0; i < hp->n_vocab; i++) logits[(size_t)t * hp->n_vocab + i] = (float)lg[i];
    }
done:
    free(R.row), free(R.act), free(R.qbuf), free(R.wrow), free(R.xin), free(x), free(xn), free(q), free(att), free(tmp), free(g), free(u);
    free(lg), free(sc), free(K), free(V);
    return rc;
}
