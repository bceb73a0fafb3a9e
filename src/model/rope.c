/* Rotary position embedding, computed the way ggml does (float arithmetic, theta stepped by
 * repeated multiplication), so positions rotate bit-for-bit like llama.cpp's. */
#include "model/model_int.h"

#include <math.h>

/* YaRN ramp between the extrapolated and interpolated angle, per pair index i0/2. */
static float yarn_ramp(float low, float high, int i0) {
    float y = ((float)i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1 - fminf(1, fmaxf(0, y));
}

static float yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return (float)n_dims * logf((float)n_ctx_orig / (n_rot * 2 * (float)M_PI)) / (2 * logf(base));
}

void st_rope_cache(const st_model_hparams *hp, const float *freq_factors, int64_t pos, float *cs) {
    const int n_dims = hp->n_rot;
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)n_dims);
    const float freq_scale = hp->rope_freq_scale, ext_factor = hp->yarn_ext_factor;
    float mscale = hp->yarn_attn_factor;
    float corr0 = 0, corr1 = 0;
    if (ext_factor != 0) {
        corr0 = floorf(yarn_corr_dim(n_dims, hp->rope_n_ctx_orig, hp->yarn_beta_fast, hp->rope_base));
        corr1 = ceilf(yarn_corr_dim(n_dims, hp->rope_n_ctx_orig, hp->yarn_beta_slow, hp->rope_base));
        corr0 = fmaxf(0, corr0);
        corr1 = fminf((float)(n_dims - 1), corr1);
        mscale *= 1.0f + 0.1f * logf(1.0f / freq_scale);
    }
    float theta = (float)pos;
    for (int i0 = 0; i0 < n_dims; i0 += 2) {
        const float ff = freq_factors ? freq_factors[i0 / 2] : 1.0f;
        const float theta_extrap = theta / ff;
        float th = freq_scale * theta_extrap;
        if (ext_factor != 0) {
            float mix = yarn_ramp(corr0, corr1, i0) * ext_factor;
            th = th * (1 - mix) + theta_extrap * mix;
        }
        cs[i0] = cosf(th) * mscale;
        cs[i0 + 1] = sinf(th) * mscale;
        theta *= theta_scale;
    }
}

void st_rope_apply(const st_model_hparams *hp, const float *cs, float *x, int n_heads) {
    const int n_dims = hp->n_rot, hd = hp->head_dim;
    for (int h = 0; h < n_heads; h++) {
        float *v = x + (size_t)h * hd;
        if (!hp->rope_neox) {
            for (int i0 = 0; i0 < n_dims; i0 += 2) {
                const float c = cs[i0], s = cs[i0 + 1], a = v[i0], b = v[i0 + 1];
                v[i0] = a * c - b * s;
                v[i0 + 1] = a * s + b * c;
            }
        } else {
            const int half = n_dims / 2;
            for (int i = 0; i < half; i++) {
                const float c = cs[2 * i], s = cs[2 * i + 1], a = v[i], b = v[i + half];
                v[i] = a * c - b * s;
                v[i + half] = a * s + b * c;
            }
        }
    }
}
