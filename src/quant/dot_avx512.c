/* AVX-512 (F/BW/VL/DQ + VNNI) kernels for the 32-element block types and f32/f16/bf16.
 *
 * One template computes a tile of NR weight rows x NC activation rows; vec_dot is its
 * 1 x 1 instance, so a product computed alone (matvec) or inside a tile (matmul) runs
 * the same operations in the same order and is bit-identical.
 *
 * Integer part. vpdpbusd multiplies unsigned bytes by signed bytes. Every weight type
 * is first brought to unsigned bytes u with an offset: q4_0 u = q (value q - 8), q5_0
 * u = q (value q - 16), q8_0 u = q ^ 0x80 (value u - 128), q4_1/q5_1 u = q (value
 * d*q + m). The offset is removed exactly by starting the accumulator at
 * -dpbusd(offset bytes, y) per lane, so each 32-bit lane holds the exact integer dot of
 * its 4 bytes. Two blocks (64 bytes) fill one zmm: lanes 0-7 block i, lanes 8-15 block
 * i+1; an odd last block runs with the upper half zero.
 *
 * Float part, per step: acc = fma(float(isum), dx * dy, acc) lane-wise (and for the
 * _1 types acc = fma(m, s, acc) on lanes 0 and 8), then one horizontal sum at the end. */
#include "quant_int.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

ALWAYS_INLINE int wk_offset(int kind) {
    return kind == W_Q4_0 ? 8 : kind == W_Q5_0 ? 16 : kind == W_Q8_0 ? 128 : 0;
}

/* lanes 0-7 = half h0, lanes 8-15 = half h1 */
ALWAYS_INLINE __m512 scale2(uint16_t h0, uint16_t h1) {
    const __m256i v = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi16((short)h0)),
                                              _mm_set1_epi16((short)h1), 1);
    return _mm512_cvtph_ps(v);
}

/* 16 + 16 nibble bytes of two blocks -> 64 bytes in element order (lo nibbles of block
 * i, hi nibbles of block i, lo of i+1, hi of i+1). */
ALWAYS_INLINE __m512i unpack_nibbles(__m128i q0, __m128i q1) {
    const __m512i t = _mm512_permutexvar_epi64(
        _mm512_set_epi64(3, 2, 3, 2, 1, 0, 1, 0),
        _mm512_zextsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1)));
    return _mm512_and_si512(_mm512_mask_srli_epi16(t, 0xFF00FF00u, t, 4), _mm512_set1_epi8(0x0F));
}

struct wv {
    __m512i u; /* 64 unsigned bytes */
    __m512 d;  /* per-lane weight scale */
    __m512 m;  /* per-block min on lanes 0 and 8 (the _1 types), else unused */
};

/* Weight blocks b at p and b+1 at p1 (HALF: block b only). */
ALWAYS_INLINE struct wv load_w(int kind, const uint8_t *p, const uint8_t *p1, int half) {
    struct wv w;
    w.m = _mm512_setzero_ps();
    if (kind == W_Q8_0) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)(p + 2));
        __m512i u = half ? _mm512_zextsi256_si512(q0)
                         : _mm512_inserti64x4(_mm512_castsi256_si512(q0),
                                              _mm256_loadu_si256((const __m256i *)(p1 + 2)), 1);
        w.u = _mm512_xor_si512(u, _mm512_set1_epi8((char)0x80));
        w.d = scale2(ld16(p), half ? 0 : ld16(p1));
        return w;
    }
    const int qs_off = kind == W_Q4_0 ? 2 : kind == W_Q4_1 ? 4 : kind == W_Q5_0 ? 6 : 8;
    const __m128i q0 = _mm_loadu_si128((const __m128i *)(p + qs_off));
    const __m128i q1 = half ? _mm_setzero_si128() : _mm_loadu_si128((const __m128i *)(p1 + qs_off));
    w.u = unpack_nibbles(q0, q1);
    if (kind == W_Q5_0 || kind == W_Q5_1) {
        const int qh_off = kind == W_Q5_0 ? 2 : 4;
        const uint64_t bits = (uint64_t)ld32(p + qh_off) | (half ? 0 : (uint64_t)ld32(p1 + qh_off) << 32);
        w.u = _mm512_mask_add_epi8(w.u, (__mmask64)bits, w.u, _mm512_set1_epi8(0x10));
    }
    w.d = scale2(ld16(p), half ? 0 : ld16(p1));
    if (wk_has_min(kind))
        w.m = _mm512_maskz_mov_ps(0x0101, scale2(ld16(p + 2), half ? 0 : ld16(p1 + 2)));
    return w;
}

struct av {
    __m512i q;    /* 64 signed bytes */
    __m512 d;     /* per-lane activation scale */
    __m512 s;     /* q8_1: per-lane block sum d * sum(q) */
    __m512i corr; /* -offset * sum of each lane's 4 bytes */
};

/* Activation blocks b, b+1 at p: q8_1 when `q81`, else q8_0. */
ALWAYS_INLINE struct av load_a(int kind, const uint8_t *p, int half) {
    const int q81 = wk_has_min(kind);
    const size_t sz = q81 ? sizeof(st_block_q8_1) : sizeof(st_block_q8_0);
    const int qo = q81 ? 4 : 2;
    const uint8_t *p1 = p + sz;
    struct av a;
    const __m256i q0 = _mm256_loadu_si256((const __m256i *)(p + qo));
    a.q = half ? _mm512_zextsi256_si512(q0)
               : _mm512_inserti64x4(_mm512_castsi256_si512(q0),
                                    _mm256_loadu_si256((const __m256i *)(p1 + qo)), 1);
    a.d = scale2(ld16(p), half ? 0 : ld16(p1));
    a.s = q81 ? scale2(ld16(p + 2), half ? 0 : ld16(p1 + 2)) : _mm512_setzero_ps();
    const int off = wk_offset(kind);
    a.corr = off ? _mm512_sub_epi32(_mm512_setzero_si512(),
                                    _mm512_dpbusd_epi32(_mm512_setzero_si512(),
                                                        _mm512_set1_epi8((char)off), a.q))
                 : _mm512_setzero_si512();
    return a;
}

/* One weight pair into one accumulator: the arithmetic of every product element, whether a
 * tile (tile_step) or a matvec row over a stored activation (rows_impl) computes it. */
ALWAYS_INLINE __m512 fold(int kind, __m512 acc, const struct wv *w, const struct av *a) {
    const __m512i isum = _mm512_dpbusd_epi32(a->corr, w->u, a->q);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(w->d, a->d), acc);
    if (wk_has_min(kind)) acc = _mm512_fmadd_ps(w->m, a->s, acc);
    return acc;
}

/* Weight row r's block b is at x + r * bx + b * bstep: bstep is the block size in a plain
 * row, 4 block sizes in a quad (st_tile4_fn), where bx is one block size. */
ALWAYS_INLINE void tile_step(int kind, int NR, int NC, __m512 acc[ST_TILE_MAX][ST_TILE_MAX],
                             const uint8_t *x, size_t bx, size_t bstep, const uint8_t *y, size_t by,
                             int b, int half) {
    const size_t asz = wk_has_min(kind) ? sizeof(st_block_q8_1) : sizeof(st_block_q8_0);
    struct wv w[ST_TILE_MAX];
    struct av a[ST_TILE_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++) {
        const uint8_t *p = x + r * bx + (size_t)b * bstep;
        w[r] = load_w(kind, p, p + bstep, half);
    }
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) {
        a[c] = load_a(kind, y + c * by + (size_t)b * asz, half);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) acc[r][c] = fold(kind, acc[r][c], &w[r], &a[c]);
    }
}

ALWAYS_INLINE void tile_impl(int kind, int NR, int NC, int n, float *s, size_t bs, const void *vx,
                             size_t bx, size_t bstep, const void *vy, size_t by) {
    const uint8_t *x = vx, *y = vy;
    const int nb = n / 32;
    __m512 acc[ST_TILE_MAX][ST_TILE_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) acc[r][c] = _mm512_setzero_ps();
    int b = 0;
    for (; b + 1 < nb; b += 2) {
        tile_step(kind, NR, NC, acc, x, bx, bstep, y, by, b, 0);
    }
    if (b < nb) tile_step(kind, NR, NC, acc, x, bx, bstep, y, by, b, 1);
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) s[c * bs + r] = _mm512_reduce_add_ps(acc[r][c]);
}

/* nr x nc instances (constant sizes) of tile_impl for one weight kind. */
#define ST_TILE_SWITCH_(kind, x, bx, bstep)                                                 \
    switch ((nr - 1) * 4 + (nc - 1)) {                                                      \
    case 0: tile_impl(kind, 1, 1, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 1: tile_impl(kind, 1, 2, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 2: tile_impl(kind, 1, 3, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 3: tile_impl(kind, 1, 4, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 4: tile_impl(kind, 2, 1, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 5: tile_impl(kind, 2, 2, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 6: tile_impl(kind, 2, 3, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 7: tile_impl(kind, 2, 4, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 8: tile_impl(kind, 3, 1, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 9: tile_impl(kind, 3, 2, n, s, bs, x, bx, bstep, y, by); break;                    \
    case 10: tile_impl(kind, 3, 3, n, s, bs, x, bx, bstep, y, by); break;                   \
    case 11: tile_impl(kind, 3, 4, n, s, bs, x, bx, bstep, y, by); break;                   \
    case 12: tile_impl(kind, 4, 1, n, s, bs, x, bx, bstep, y, by); break;                   \
    case 13: tile_impl(kind, 4, 2, n, s, bs, x, bx, bstep, y, by); break;                   \
    case 14: tile_impl(kind, 4, 3, n, s, bs, x, bx, bstep, y, by); break;                   \
    case 15: tile_impl(kind, 4, 4, n, s, bs, x, bx, bstep, y, by); break;                   \
    default: ST_ASSERT(!"tile size out of range");                                          \
    }

/* vec_dot and the tile entry point for one weight kind. */
#define ST_DEF_KIND_(name, kind)                                                           \
    void st_vec_dot_##name##_avx512(int n, float *s, const void *x, const void *y) {       \
        tile_impl(kind, 1, 1, n, s, 1, x, 0, wk_bytes(kind), y, 0);                         \
    }                                                                                       \
    void st_tile_##name##_avx512(int n, float *s, size_t bs, const void *x, size_t bx,     \
                                 const void *y, size_t by, int nr, int nc) {                \
        ST_TILE_SWITCH_(kind, x, bx, wk_bytes(kind))                                        \
    }

/* The same over a quad (st_tile4_fn): a row's blocks are 4 blocks apart. */
#define ST_DEF_QUAD_(name, kind)                                                           \
    void st_tile4_##name##_avx512(int n, float *s, size_t bs, const void *x, const void *y, \
                                  size_t by, int nr, int nc) {                              \
        ST_TILE_SWITCH_(kind, x, wk_bytes(kind), 4 * wk_bytes(kind))                        \
    }

/* ---- matvec rows (st_rows_fn): tile_step's activation half done once per product ---- */

/* xe holds load_a's result for each pair of blocks: st_act_x_bytes counts 256 bytes a pair */
_Static_assert(sizeof(struct av) == 256, "st_act_x_bytes assumes 256 bytes per stored pair");

ALWAYS_INLINE void expand_impl(int kind, int n, const void *vy, void *xe) {
    const size_t asz = wk_has_min(kind) ? sizeof(st_block_q8_1) : sizeof(st_block_q8_0);
    const uint8_t *y = vy;
    struct av *X = xe;
    const int nb = n / 32;
    for (int b = 0; b < nb; b += 2) X[b / 2] = load_a(kind, y + (size_t)b * asz, b + 1 >= nb);
}

/* tile_step for one row against the stored pair a */
ALWAYS_INLINE __m512 rows_step(int kind, __m512 acc, const uint8_t *p, size_t bw, const struct av *a,
                               int half) {
    const struct wv w = load_w(kind, p, p + bw, half);
    return fold(kind, acc, &w, a);
}

ALWAYS_INLINE void rows_impl(int kind, int n, int64_t n_rows, float *s, const void *vx, size_t bx,
                             const void *xe) {
    const struct av *X = xe;
    const size_t bw = wk_bytes(kind);
    const int nb = n / 32;
    for (int64_t r = 0; r < n_rows; r++) {
        const uint8_t *x = (const uint8_t *)vx + (size_t)r * bx;
        __m512 acc = _mm512_setzero_ps();
        int b = 0;
        for (; b + 1 < nb; b += 2) acc = rows_step(kind, acc, x + (size_t)b * bw, bw, &X[b / 2], 0);
        if (b < nb) acc = rows_step(kind, acc, x + (size_t)b * bw, bw, &X[b / 2], 1);
        s[r] = _mm512_reduce_add_ps(acc);
    }
}

#define ST_DEF_ROWS_(name, kind)                                                            \
    void st_act_expand_##name##_avx512(int n, const void *y, void *xe) {                    \
        expand_impl(kind, n, y, xe);                                                        \
    }                                                                                       \
    void st_rows_##name##_avx512(int n, int64_t n_rows, float *s, const void *x, size_t bx, \
                                 const void *xe) {                                          \
        rows_impl(kind, n, n_rows, s, x, bx, xe);                                           \
    }

ST_DEF_KIND_(q4_0_q8_0, W_Q4_0)
ST_DEF_KIND_(q4_1_q8_1, W_Q4_1)
ST_DEF_KIND_(q5_0_q8_0, W_Q5_0)
ST_DEF_KIND_(q5_1_q8_1, W_Q5_1)
ST_DEF_KIND_(q8_0_q8_0, W_Q8_0)
ST_DEF_QUAD_(q4_0_q8_0, W_Q4_0)
ST_DEF_QUAD_(q4_1_q8_1, W_Q4_1)
ST_DEF_QUAD_(q5_0_q8_0, W_Q5_0)
ST_DEF_QUAD_(q5_1_q8_1, W_Q5_1)
ST_DEF_ROWS_(q4_0_q8_0, W_Q4_0)
ST_DEF_ROWS_(q4_1_q8_1, W_Q4_1)
ST_DEF_ROWS_(q5_0_q8_0, W_Q5_0)
ST_DEF_ROWS_(q5_1_q8_1, W_Q5_1)
ST_DEF_ROWS_(q8_0_q8_0, W_Q8_0)

/* ---- f32 / bf16 weights . f32 activations: 4 independent accumulators, masked tail ---- */
ALWAYS_INLINE __m512 ld_f16(const void *p, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
}
ALWAYS_INLINE __m512 ld_bf16(const void *p, int64_t i) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
ALWAYS_INLINE __m512 ld_f32(const void *p, int64_t i) { return _mm512_loadu_ps((const float *)p + i); }

ALWAYS_INLINE __m512 ld_tail(int kind, const void *p, int64_t i, __mmask16 m) {
    if (kind == 0) return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    const __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i);
    if (kind == 1) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Float weights: kind 0 f32, 1 f16, 2 bf16 (ld_tail's codes); the activations are f16 for
 * f16 weights (st_vec_dot_f16_f16) and f32 otherwise. A pair's dot keeps 4 accumulators over
 * 64-element steps, then a masked 16-element tail into the first; a tile of up to 2 x 2
 * pairs (16 accumulators) converts each 16-element chunk of a weight or activation row
 * once for the pairs that use it, and every pair runs vec_dot's operations in its order. */
ALWAYS_INLINE __m512 ld_w(int kind, const void *p, int64_t i) {
    return kind == 0 ? ld_f32(p, i) : kind == 1 ? ld_f16(p, i) : ld_bf16(p, i);
}
ALWAYS_INLINE __m512 ld_a(int kind, const void *p, int64_t i) { return kind == 1 ? ld_f16(p, i) : ld_f32(p, i); }

ALWAYS_INLINE void ftile_impl(int kind, int NR, int NC, int n, float *s, size_t bs, const void *vx,
                              size_t bx, const void *vy, size_t by) {
    const uint8_t *x = vx, *y = vy;
    __m512 acc[2][2][4];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int c = 0; c < NC; c++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) acc[r][c][k] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            __m512 w[2], a[2];
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++) w[r] = ld_w(kind, x + (size_t)r * bx, i + 16 * k);
#pragma GCC unroll 2
            for (int c = 0; c < NC; c++) a[c] = ld_a(kind, y + (size_t)c * by, i + 16 * k);
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
                for (int c = 0; c < NC; c++) acc[r][c][k] = _mm512_fmadd_ps(w[r], a[c], acc[r][c][k]);
        }
    }
    for (; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xFFFF : (__mmask16)((1u << (n - i)) - 1);
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            const __m512 w = ld_tail(kind, x + (size_t)r * bx, i, m);
#pragma GCC unroll 2
            for (int c = 0; c < NC; c++)
                acc[r][c][0] = _mm512_fmadd_ps(w, ld_tail(kind == 1 ? 1 : 0, y + (size_t)c * by, i, m), acc[r][c][0]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int c = 0; c < NC; c++)
            s[(size_t)c * bs + r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(acc[r][c][0], acc[r][c][1]),
                                                                       _mm512_add_ps(acc[r][c][2], acc[r][c][3])));
}

#define ST_DEF_FKIND_(name, kind)                                                              \
    void st_vec_dot_##name##_avx512(int n, float *s, const void *x, const void *y) {           \
        ftile_impl(kind, 1, 1, n, s, 1, x, 0, y, 0);                                            \
    }                                                                                           \
    void st_tile_##name##_avx512(int n, float *s, size_t bs, const void *x, size_t bx,         \
                                 const void *y, size_t by, int nr, int nc) {                    \
        ST_ASSERT(nr >= 1 && nr <= ST_TILE_MAX && nc >= 1 && nc <= ST_TILE_MAX);                \
        for (int r0 = 0; r0 < nr; r0 += 2)                                                      \
            for (int c0 = 0; c0 < nc; c0 += 2) {                                                \
                const uint8_t *xr = (const uint8_t *)x + (size_t)r0 * bx;                       \
                const uint8_t *yc = (const uint8_t *)y + (size_t)c0 * by;                       \
                float *sc = s + (size_t)c0 * bs + r0;                                           \
                switch ((nr - r0 >= 2) * 2 + (nc - c0 >= 2)) {                                  \
                case 0: ftile_impl(kind, 1, 1, n, sc, bs, xr, bx, yc, by); break;               \
                case 1: ftile_impl(kind, 1, 2, n, sc, bs, xr, bx, yc, by); break;               \
                case 2: ftile_impl(kind, 2, 1, n, sc, bs, xr, bx, yc, by); break;               \
                default: ftile_impl(kind, 2, 2, n, sc, bs, xr, bx, yc, by); break;              \
                }                                                                               \
            }                                                                                   \
    }

ST_DEF_FKIND_(f32_f32, 0)
ST_DEF_FKIND_(bf16_f32, 2)
ST_DEF_FKIND_(f16_f16, 1)

/* ---- activation quantizers ---- */
ALWAYS_INLINE void q8_block(const float *x, int8_t *qs, float *d_out, int *sum_out) {
    const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    const float d = amax / 127.0f;
    const float id = d ? 1.0f / d : 0.0f;
    const __m512 vid = _mm512_set1_ps(id);
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vid));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vid));
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtsepi32_epi8(i0));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtsepi32_epi8(i1));
    *d_out = d;
    if (sum_out) *sum_out = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
}

void st_quantize_row_q8_0_avx512(const float *x, void *vy, int64_t k) {
    st_block_q8_0 *y = vy;
    for (int64_t i = 0; i < k / ST_QK8_0; i++) {
        float d;
        q8_block(x + i * ST_QK8_0, y[i].qs, &d, NULL);
        y[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    }
}

void st_quantize_row_q8_1_avx512(const float *x, void *vy, int64_t k) {
    st_block_q8_1 *y = vy;
    for (int64_t i = 0; i < k / ST_QK8_1; i++) {
        float d;
        int sum;
        q8_block(x + i * ST_QK8_1, y[i].qs, &d, &sum);
        y[i].d = (uint16_t)_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
        y[i].s = (uint16_t)_cvtss_sh((float)sum * d, _MM_FROUND_TO_NEAREST_INT);
    }
}
