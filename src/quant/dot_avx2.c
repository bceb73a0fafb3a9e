/* AVX2 + FMA + F16C kernels for the 32-element block types and f32/f16/bf16.
 *
 * One block (32 bytes) per ymm. maddubs multiplies unsigned by signed bytes into
 * saturating 16-bit pairs, so: signed weights (q4_0 and q5_0 after removing their
 * offset, q8_0) use the sign trick |x| * sign(y, x) (at most 2 * 127 * 127, no
 * saturation); unsigned weights of the _1 types go straight in (at most 2 * 31 * 127).
 * Integer block sums are exact; only the float accumulation order differs from the
 * scalar reference. No tile kernels here: products loop over vec_dot. No software
 * prefetch: rows are single sequential streams, which the hardware prefetcher follows
 * better alone (bench/matvec). */
#include "quant_int.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* F16C conversions (the scalar st_fp16_* helpers are bit-exact but slow) */
#define H2F(h) _cvtsh_ss(h)
#define F2H(f) ((uint16_t)_cvtss_sh((f), _MM_FROUND_TO_NEAREST_INT))

static inline uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }

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

/* 8 int32 partial sums of signed x . signed y */
ALWAYS_INLINE __m256 dot_ss(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}
/* unsigned x . signed y */
ALWAYS_INLINE __m256 dot_us(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(x, y);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

ALWAYS_INLINE __m256 dscale(uint16_t a, uint16_t b) {
    return _mm256_set1_ps(H2F(a) * H2F(b));
}

void st_vec_dot_q8_0_q8_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const st_block_q8_0 *x = vx, *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / 32; i++) {
        const __m256i qx = _mm256_loadu_si256((const __m256i *)x[i].qs);
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(dot_ss(qx, qy), dscale(x[i].d, y[i].d), acc);
    }
    *s = hsum8(acc);
}

void st_vec_dot_q4_0_q8_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const st_block_q4_0 *x = vx;
    const st_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / 32; i++) {
        const __m256i qx = _mm256_sub_epi8(nibbles(x[i].qs), _mm256_set1_epi8(8));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(dot_ss(qx, qy), dscale(x[i].d, y[i].d), acc);
    }
    *s = hsum8(acc);
}

void st_vec_dot_q5_0_q8_0_avx2(int n, float *s, const void *vx, const void *vy) {
    const st_block_q5_0 *x = vx;
    const st_block_q8_0 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < n / 32; i++) {
        __m256i qx = _mm256_or_si256(nibbles(x[i].qs), high_bits(ld32(x[i].qh)));
        qx = _mm256_sub_epi8(qx, _mm256_set1_epi8(16));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(dot_ss(qx, qy), dscale(x[i].d, y[i].d), acc);
    }
    *s = hsum8(acc);
}

void st_vec_dot_q4_1_q8_1_avx2(int n, float *s, const void *vx, const void *vy) {
    const st_block_q4_1 *x = vx;
    const st_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(dot_us(nibbles(x[i].qs), qy), dscale(x[i].d, y[i].d), acc);
        summs += H2F(x[i].m) * H2F(y[i].s);
    }
    *s = hsum8(acc) + summs;
}

void st_vec_dot_q5_1_q8_1_avx2(int n, float *s, const void *vx, const void *vy) {
    const st_block_q5_1 *x = vx;
    const st_block_q8_1 *y = vy;
    __m256 acc = _mm256_setzero_ps();
    float summs = 0.0f;
    for (int i = 0; i < n / 32; i++) {
        const __m256i qx = _mm256_or_si256(nibbles(x[i].qs), high_bits(ld32(x[i].qh)));
        const __m256i qy = _mm256_loadu_si256((const __m256i *)y[i].qs);
        acc = _mm256_fmadd_ps(dot_us(qx, qy), dscale(x[i].d, y[i].d), acc);
        summs += H2F(x[i].m) * H2F(y[i].s);
    }
    *s = hsum8(acc) + summs;
}

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

#define ST_DEF_FDOT_(name, ld, ld1)                                                   \
    void st_vec_dot_##name##_f32_avx2(int n, float *s, const void *x, const void *vy) {    \
        const float *y = vy;                                                                \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                         \
        int64_t i = 0;                                                                      \
        for (; i + 32 <= n; i += 32) {                                                      \
            a0 = _mm256_fmadd_ps(ld(x, i), _mm256_loadu_ps(y + i), a0);                     \
            a1 = _mm256_fmadd_ps(ld(x, i + 8), _mm256_loadu_ps(y + i + 8), a1);             \
            a2 = _mm256_fmadd_ps(ld(x, i + 16), _mm256_loadu_ps(y + i + 16), a2);           \
            a3 = _mm256_fmadd_ps(ld(x, i + 24), _mm256_loadu_ps(y + i + 24), a3);           \
        }                                                                                   \
        for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(ld(x, i), _mm256_loadu_ps(y + i), a0); \
        float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));     \
        for (; i < n; i++) sum += ld1(x, i) * y[i];                                          \
        *s = sum;                                                                           \
    }

ST_DEF_FDOT_(f32, ld_f32, ld1_f32)
ST_DEF_FDOT_(bf16, ld_bf16, ld1_bf16)

/* f16 . f16: both sides converted with vcvtph2ps, FMA in f32. The activation row is half
 * the bytes of an f32 one, which frees load and cache bandwidth for the weight stream. */
void st_vec_dot_f16_f16_avx2(int n, float *s, const void *x, const void *y) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a0 = _mm256_fmadd_ps(ld_f16(x, i), ld_f16(y, i), a0);
        a1 = _mm256_fmadd_ps(ld_f16(x, i + 8), ld_f16(y, i + 8), a1);
        a2 = _mm256_fmadd_ps(ld_f16(x, i + 16), ld_f16(y, i + 16), a2);
        a3 = _mm256_fmadd_ps(ld_f16(x, i + 24), ld_f16(y, i + 24), a3);
    }
    for (; i + 8 <= n; i += 8) a0 = _mm256_fmadd_ps(ld_f16(x, i), ld_f16(y, i), a0);
    float sum = hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    for (; i < n; i++) sum += ld1_f16(x, i) * ld1_f16(y, i);
    *s = sum;
}

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
