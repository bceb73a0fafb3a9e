/* AVX2 + FMA + F16C kernels for the 32-element block types and f32/f16/bf16.
 *
 * One block (32 bytes) per ymm. maddubs multiplies unsigned by signed bytes into
 * saturating 16-bit pairs, so: signed weights (q4_0 and q5_0 after removing their
 * offset, q8_0) use the sign trick |x| * sign(y, x) (at most 2 * 127 * 127, no
 * saturation); unsigned weights of the _1 types go straight in (at most 2 * 31 * 127).
 * Integer block sums are exact; only the float accumulation order differs from the
 * scalar reference. Tiles (prefill) reuse each decoded weight block for up to 4
 * activation rows. No software prefetch: rows are single sequential streams, which the
 * hardware prefetcher follows better alone (bench/matvec). */
#include "quant_int.h"

#include <immintrin.h>
#include <stddef.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* F16C conversions (the scalar st_fp16_* helpers are bit-exact but slow) */
#define H2F(h) _cvtsh_ss(h)
#define F2H(f) ((uint16_t)_cvtss_sh((f), _MM_FROUND_TO_NEAREST_INT))

ALWAYS_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 nibble bytes -> 32 bytes (lo nibbles then hi nibbles), values 0..15 */
ALWAYS_INLINE __m256i nibbles(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}

/* bit j of x -> 0x10 in byte j */
ALWAYS_INLINE __m256i high_bits(uint32_t x) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000LL, 0x0101010101010101LL,
                                            0x0202020202020202LL, 0x0303030303030303LL);
    __m256i r = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x), shuf);
    r = _mm256_or_si256(r, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL));
    r = _mm256_cmpeq_epi8(r, _mm256_set1_epi64x(-1));
    return _mm256_and_si256(r, _mm256_set1_epi8(0x10));
}

/* ---- tiles: NR weight rows x NC activation rows, vec_dot the 1 x 1 instance -----------
 * Per block each weight row is decoded (and, for the signed kinds, made absolute) once
 * and each activation block loaded once; every (row, activation) pair then runs exactly
 * the operations of the single dot in the same order, so a tile element equals vec_dot
 * bit for bit. Instances are at most 2 x 4 (8 accumulators of 16 ymm registers); the
 * entry point covers up to 4 x 4 with them. */

/* One block's quants: signed values (q4_0, q5_0 after their offset, q8_0) or the
 * unsigned q of the _1 kinds. */
ALWAYS_INLINE __m256i load_wq(int kind, const uint8_t *p) {
    switch (kind) {
    case W_Q4_0: return _mm256_sub_epi8(nibbles(p + offsetof(st_block_q4_0, qs)), _mm256_set1_epi8(8));
    case W_Q4_1: return nibbles(p + offsetof(st_block_q4_1, qs));
    case W_Q5_0:
        return _mm256_sub_epi8(_mm256_or_si256(nibbles(p + offsetof(st_block_q5_0, qs)),
                                               high_bits(ld32(p + offsetof(st_block_q5_0, qh)))),
                               _mm256_set1_epi8(16));
    case W_Q5_1:
        return _mm256_or_si256(nibbles(p + offsetof(st_block_q5_1, qs)), high_bits(ld32(p + offsetof(st_block_q5_1, qh))));
    default: return _mm256_loadu_si256((const __m256i *)(p + offsetof(st_block_q8_0, qs)));
    }
}

/* Weight row r's block i is at x + r * bx + i * bstep: bstep is the block size in a plain
 * row, 4 block sizes in a quad (st_tile4_fn), where bx is one block size. NR x NC <= 8,
 * or 4 x 1 (a quad in a matrix-vector product). */
ALWAYS_INLINE void tile_impl(int kind, int NR, int NC, int n, float *s, size_t bs, const void *vx,
                             size_t bx, size_t bstep, const void *vy, size_t by) {
    const uint8_t *x = vx, *y = vy;
    const int mn = wk_has_min(kind);
    const size_t asz = mn ? sizeof(st_block_q8_1) : sizeof(st_block_q8_0);
    const size_t aqs = mn ? offsetof(st_block_q8_1, qs) : offsetof(st_block_q8_0, qs);
    __m256 acc[4][4];
    float summs[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) acc[r][c] = _mm256_setzero_ps(), summs[r][c] = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        __m256i w[4], wabs[4];
        float dx[4], mx[4];
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            const uint8_t *p = x + (size_t)r * bx + (size_t)i * bstep;
            w[r] = load_wq(kind, p);
            if (!mn) wabs[r] = _mm256_sign_epi8(w[r], w[r]);
            dx[r] = H2F(ld16(p));
            if (mn) mx[r] = H2F(ld16(p + 2)); /* the _1 blocks' m */
        }
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const uint8_t *q = y + (size_t)c * by + (size_t)i * asz;
            const __m256i a = _mm256_loadu_si256((const __m256i *)(q + aqs));
            const float dy = H2F(ld16(q));
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                /* dot_ss / dot_us, spelled out so |w| is computed once per row */
                const __m256i pr = mn ? _mm256_maddubs_epi16(w[r], a)
                                      : _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(a, w[r]));
                const __m256 d = _mm256_cvtepi32_ps(_mm256_madd_epi16(pr, _mm256_set1_epi16(1)));
                acc[r][c] = _mm256_fmadd_ps(d, _mm256_set1_ps(dx[r] * dy), acc[r][c]);
                if (mn) summs[r][c] += mx[r] * H2F(ld16(q + 2)); /* q8_1's s */
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) s[(size_t)c * bs + r] = mn ? hsum8(acc[r][c]) + summs[r][c] : hsum8(acc[r][c]);
}

/* vec_dot and the tile entry point of one kind from a tile template `impl` (tile_impl or
 * ftile_impl below): instances of at most 2 x 4 cover up to ST_TILE_MAX x ST_TILE_MAX.
 * The variadic part is tile_impl's bstep argument followed by a comma (empty for ftile_impl). */
#define ST_TILE_LOOP_(impl, kind, x, bx, ...)                                                  \
    ST_ASSERT(nr >= 1 && nr <= ST_TILE_MAX && nc >= 1 && nc <= ST_TILE_MAX);                    \
    for (int r0 = 0; r0 < nr; r0 += 2) {                                                        \
        const uint8_t *xr = (const uint8_t *)x + (size_t)r0 * bx;                               \
        switch ((nr - r0 >= 2) * 4 + nc - 1) {                                                  \
        case 0: impl(kind, 1, 1, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;              \
        case 1: impl(kind, 1, 2, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;              \
        case 2: impl(kind, 1, 3, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;              \
        case 3: impl(kind, 1, 4, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;              \
        case 4: impl(kind, 2, 1, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;              \
        case 5: impl(kind, 2, 2, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;              \
        case 6: impl(kind, 2, 3, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;              \
        default: impl(kind, 2, 4, n, s + r0, bs, xr, bx, __VA_ARGS__ y, by); break;             \
        }                                                                                       \
    }
#define ST_DEF_TILES_(name, impl, kind, ...)                                                   \
    void st_vec_dot_##name##_avx2(int n, float *s, const void *x, const void *y) {             \
        impl(kind, 1, 1, n, s, 1, x, 0, __VA_ARGS__ y, 0);                                      \
    }                                                                                           \
    void st_tile_##name##_avx2(int n, float *s, size_t bs, const void *x, size_t bx,           \
                               const void *y, size_t by, int nr, int nc) {                      \
        ST_TILE_LOOP_(impl, kind, x, bx, __VA_ARGS__)                                           \
    }
/* The block kinds over a quad (st_tile4_fn): a row's blocks are 4 blocks apart. A matvec's
 * 4 x 1 is one instance (the activation block loaded and converted once for 4 rows);
 * wider tiles (prefill) run the 2-row instances over the quad. */
#define ST_DEF_QUAD_(name, kind)                                                               \
    void st_tile4_##name##_avx2(int n, float *s, size_t bs, const void *x, const void *y,      \
                                size_t by, int nr, int nc) {                                    \
        const size_t bx = wk_bytes(kind);                                                       \
        if (nr == 4 && nc == 1) {                                                               \
            tile_impl(kind, 4, 1, n, s, bs, x, bx, 4 * bx, y, by);                              \
            return;                                                                             \
        }                                                                                       \
        ST_TILE_LOOP_(tile_impl, kind, x, bx, 4 * bx,)                                          \
    }
#define ST_DEF_KIND_(name, kind) ST_DEF_TILES_(name, tile_impl, kind, wk_bytes(kind),)

ST_DEF_KIND_(q4_0_q8_0, W_Q4_0)
ST_DEF_KIND_(q4_1_q8_1, W_Q4_1)
ST_DEF_KIND_(q5_0_q8_0, W_Q5_0)
ST_DEF_KIND_(q5_1_q8_1, W_Q5_1)
ST_DEF_KIND_(q8_0_q8_0, W_Q8_0)
ST_DEF_QUAD_(q4_0_q8_0, W_Q4_0)
ST_DEF_QUAD_(q4_1_q8_1, W_Q4_1)
ST_DEF_QUAD_(q5_0_q8_0, W_Q5_0)
ST_DEF_QUAD_(q5_1_q8_1, W_Q5_1)

/* ---- float weights . f32 activations ---- */
ALWAYS_INLINE __m256 ld_f32(const void *p, int64_t i) { return _mm256_loadu_ps((const float *)p + i); }
ALWAYS_INLINE __m256 ld_f16(const void *p, int64_t i) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
}
ALWAYS_INLINE __m256 ld_bf16(const void *p, int64_t i) {
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline float ld1_f32(const void *p, int64_t i) { return ((const float *)p)[i]; }
static inline float ld1_f16(const void *p, int64_t i) { return H2F(((const uint16_t *)p)[i]); }
static inline float ld1_bf16(const void *p, int64_t i) { return st_bf16_to_fp32(((const uint16_t *)p)[i]); }

/* Float weights: kind 0 f32, 1 f16, 2 bf16; the activations are f16 for f16 weights
 * (st_vec_dot_f16_f16) and f32 otherwise. A pair's dot keeps 4 accumulators: accumulator
 * k takes elements [i + 8k, i + 8k + 8) of every 32-element step i, then the 8-element
 * tail goes into accumulator 0 and the last elements into a scalar sum.
 *
 * A tile of NR x NC pairs cannot hold 4 accumulators per pair in 16 ymm registers, but
 * the accumulators are independent: a tile runs KP of them per pass over the rows (k-major),
 * so KP x NR x NC accumulators are live and each converted weight or activation chunk of
 * a pass serves all pairs. Every accumulator sees the FMAs of vec_dot in vec_dot's order,
 * so a tile element equals vec_dot bit for bit. KP is chosen so at least 8 accumulators
 * are in flight (the FMA latency times its throughput); 1 x 1 is vec_dot itself. */
ALWAYS_INLINE __m256 ld_w(int kind, const void *p, int64_t i) {
    return kind == 0 ? ld_f32(p, i) : kind == 1 ? ld_f16(p, i) : ld_bf16(p, i);
}
ALWAYS_INLINE __m256 ld_a(int kind, const void *p, int64_t i) { return kind == 1 ? ld_f16(p, i) : ld_f32(p, i); }
ALWAYS_INLINE float ld1_w(int kind, const void *p, int64_t i) {
    return kind == 0 ? ld1_f32(p, i) : kind == 1 ? ld1_f16(p, i) : ld1_bf16(p, i);
}
ALWAYS_INLINE float ld1_a(int kind, const void *p, int64_t i) { return kind == 1 ? ld1_f16(p, i) : ld1_f32(p, i); }

/* Elements [e, e + 8) of every pair into its accumulator acc[r][c]. */
ALWAYS_INLINE void fstep(int kind, int NR, int NC, const uint8_t *x, size_t bx, const uint8_t *y,
                         size_t by, int64_t e, __m256 acc[2][4]) {
    __m256 w[2];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++) w[r] = ld_w(kind, x + (size_t)r * bx, e);
#pragma GCC unroll 4
    for (int c = 0; c < NC; c++) {
        const __m256 av = ld_a(kind, y + (size_t)c * by, e);
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) acc[r][c] = _mm256_fmadd_ps(w[r], av, acc[r][c]);
    }
}

ALWAYS_INLINE void ftile_impl(int kind, int NR, int NC, int n, float *s, size_t bs, const void *vx,
                              size_t bx, const void *vy, size_t by) {
    const uint8_t *x = vx, *y = vy;
    const int P = NR * NC, KP = P >= 8 ? 1 : P >= 4 ? 2 : 4;
    const int64_t n32 = (int64_t)n & ~(int64_t)31;
    __m256 acc[4][2][4]; /* [k][r][c], finished ones parked here between passes */
    for (int k0 = 0; k0 < 4; k0 += KP) {
        __m256 a[4][2][4];
#pragma GCC unroll 4
        for (int k = 0; k < KP; k++)
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
                for (int c = 0; c < NC; c++) a[k][r][c] = _mm256_setzero_ps();
        for (int64_t i = 0; i < n32; i += 32) {
#pragma GCC unroll 4
            for (int k = 0; k < KP; k++) fstep(kind, NR, NC, x, bx, y, by, i + 8 * (k0 + k), a[k]);
        }
        if (k0 == 0)
            for (int64_t i = n32; i + 8 <= n; i += 8) fstep(kind, NR, NC, x, bx, y, by, i, a[0]);
#pragma GCC unroll 4
        for (int k = 0; k < KP; k++)
#pragma GCC unroll 2
            for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
                for (int c = 0; c < NC; c++) acc[k0 + k][r][c] = a[k][r][c];
    }
    const int64_t t0 = (int64_t)n & ~(int64_t)7; /* after the 8-element tail */
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int c = 0; c < NC; c++) {
            const uint8_t *xr = x + (size_t)r * bx, *yc = y + (size_t)c * by;
            float sum = hsum8(_mm256_add_ps(_mm256_add_ps(acc[0][r][c], acc[1][r][c]),
                                            _mm256_add_ps(acc[2][r][c], acc[3][r][c])));
            for (int64_t i = t0; i < n; i++) sum += ld1_w(kind, xr, i) * ld1_a(kind, yc, i);
            s[(size_t)c * bs + r] = sum;
        }
}

#define ST_DEF_FKIND_(name, kind) ST_DEF_TILES_(name, ftile_impl, kind, )

ST_DEF_FKIND_(f32_f32, 0)
ST_DEF_FKIND_(bf16_f32, 2)
ST_DEF_FKIND_(f16_f16, 1)

void st_quantize_row_f16_avx2(const float *x, void *vy, int64_t k) {
    uint16_t *y = vy;
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm_storeu_si128((__m128i *)(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < k; i++) y[i] = F2H(x[i]);
}

void st_dequantize_row_f16_avx2(const void *x, float *y, int64_t k) {
    int64_t i = 0;
    for (; i + 8 <= k; i += 8) _mm256_storeu_ps(y + i, ld_f16(x, i));
    for (; i < k; i++) y[i] = ld1_f16(x, i);
}

/* ---- activation quantizers ---- */
ALWAYS_INLINE __m256i q8_block(const float *x, int8_t *qs, float *d_out) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 v[4];
    __m256 mx = _mm256_setzero_ps();
    for (int j = 0; j < 4; j++) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        mx = _mm256_max_ps(mx, _mm256_andnot_ps(sign, v[j]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    const __m256 id = _mm256_set1_ps(d ? 1.0f / d : 0.0f);
    __m256i i[4];
    for (int j = 0; j < 4; j++) i[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id));
    const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
    __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256((__m256i *)qs, b);
    *d_out = d;
    return sum;
}

void st_quantize_row_q8_0_avx2(const float *x, void *vy, int64_t k) {
    st_block_q8_0 *y = vy;
    for (int64_t i = 0; i < k / 32; i++) {
        float d;
        (void)q8_block(x + 32 * i, y[i].qs, &d);
        y[i].d = F2H(d);
    }
}

void st_quantize_row_q8_1_avx2(const float *x, void *vy, int64_t k) {
    st_block_q8_1 *y = vy;
    for (int64_t i = 0; i < k / 32; i++) {
        float d;
        const __m256i s8 = q8_block(x + 32 * i, y[i].qs, &d);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        y[i].d = F2H(d);
        y[i].s = F2H((float)_mm_cvtsi128_si32(s4) * d);
    }
}
