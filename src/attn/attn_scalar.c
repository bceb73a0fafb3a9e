/* Scalar reference kernels: the twins every SIMD kernel is tested against. Plain C, f32
 * accumulators, libm expf; written for clarity, not speed. */
#include "attn_int.h"

#include <math.h>

static void block_scalar(const attn_blk *b) {
    const attn_tile *t = b->t;
    const int D = t->D;
    uint32_t any = 0;
    for (int r = 0; r < t->R; r++) {
        uint32_t rm = attn_row_mask(t, b, r);
        t->rm[r] = rm;
        any |= rm;
        float bmax = -INFINITY;
        const float *q = t->q + (size_t)r * D;
        for (uint32_t u = rm; u; u &= u - 1) {
            int j = __builtin_ctz(u);
            float s = 0;
            for (int d = 0; d < D; d++) s += q[d] * attn_elem(t->type, b->k, (size_t)d * b->kstride + j);
            s *= b->ks;
            t->p[r * ATTN_BLK + j] = s;
            if (s > bmax) bmax = s;
        }
        t->bm[r] = bmax;
    }
    if (!any) return;
    for (int r = 0; r < t->R; r++) {
        uint32_t rm = t->rm[r];
        if (!rm) continue;
        float m_new = t->m[r] > t->bm[r] ? t->m[r] : t->bm[r];
        float alpha = t->m[r] == -INFINITY ? 0.0f : expf(t->m[r] - m_new);
        float *p = t->p + r * ATTN_BLK;
        float sum = 0;
        for (uint32_t u = rm; u; u &= u - 1) {
            int j = __builtin_ctz(u);
            p[j] = expf(p[j] - m_new);
            sum += p[j];
        }
        t->m[r] = m_new;
        t->l[(size_t)r * ATTN_BLK] = t->l[(size_t)r * ATTN_BLK] * alpha + sum;
        float *acc = t->acc + (size_t)r * D;
        for (int d = 0; d < D; d++) acc[d] *= alpha;
        for (uint32_t u = rm; u; u &= u - 1) {
            int j = __builtin_ctz(u);
            float w = p[j] * b->vs;
            for (int d = 0; d < D; d++) acc[d] += w * attn_elem(t->type, b->v, (size_t)j * D + d);
        }
    }
}

static void blocks_scalar(const attn_blk *b, int n, int n_ahead) {
    (void)n_ahead;
    for (int i = 0; i < n; i++) block_scalar(&b[i]);
}

static void quest_scalar(int D, int G, const float *q, const uint16_t *box, int64_t stride,
                         int32_t n_pages, float *bound) {
    for (int32_t p = 0; p < n_pages; p++) {
        const uint16_t *mn = box + p * stride, *mx = mn + D;
        float best = -INFINITY;
        for (int g = 0; g < G; g++) {
            const float *qg = q + (size_t)g * D;
            float s = 0;
            for (int d = 0; d < D; d++) {
                s += attn_quest_term(qg[d], st_fp16_to_fp32(mn[d]), st_fp16_to_fp32(mx[d]));
            }
            best = attn_quest_max(best, s);
        }
        bound[p] = best;
    }
}

const st_attn_kernels st_attn_kernels_scalar_ = {
    .isa = ST_ISA_SCALAR,
    .d_mult = 1,
    .chunk_rows = 32,
    .blocks = blocks_scalar,
    .quest = quest_scalar,
};
