/* Block geometry of ggml's tensor types (values and sizes as ggml defines them). */
#include "strata/core.h"

struct type_geom {
    const char *name;
    int64_t blck;
    size_t size;
};

static const struct type_geom type_geoms[ST_TYPE_COUNT_] = {
    [ST_TYPE_F32] = {"f32", 1, 4},           [ST_TYPE_F16] = {"f16", 1, 2},
    [ST_TYPE_Q4_0] = {"q4_0", 32, 18},       [ST_TYPE_Q4_1] = {"q4_1", 32, 20},
    [ST_TYPE_Q5_0] = {"q5_0", 32, 22},       [ST_TYPE_Q5_1] = {"q5_1", 32, 24},
    [ST_TYPE_Q8_0] = {"q8_0", 32, 34},       [ST_TYPE_Q8_1] = {"q8_1", 32, 36},
    [ST_TYPE_Q2_K] = {"q2_K", 256, 84},      [ST_TYPE_Q3_K] = {"q3_K", 256, 110},
    [ST_TYPE_Q4_K] = {"q4_K", 256, 144},     [ST_TYPE_Q5_K] = {"q5_K", 256, 176},
    [ST_TYPE_Q6_K] = {"q6_K", 256, 210},     [ST_TYPE_Q8_K] = {"q8_K", 256, 292},
    [ST_TYPE_IQ2_XXS] = {"iq2_xxs", 256, 66}, [ST_TYPE_IQ2_XS] = {"iq2_xs", 256, 74},
    [ST_TYPE_IQ3_XXS] = {"iq3_xxs", 256, 98}, [ST_TYPE_IQ1_S] = {"iq1_s", 256, 50},
    [ST_TYPE_IQ4_NL] = {"iq4_nl", 32, 18},   [ST_TYPE_IQ3_S] = {"iq3_s", 256, 110},
    [ST_TYPE_IQ2_S] = {"iq2_s", 256, 82},    [ST_TYPE_IQ4_XS] = {"iq4_xs", 256, 136},
    [ST_TYPE_I8] = {"i8", 1, 1},             [ST_TYPE_I16] = {"i16", 1, 2},
    [ST_TYPE_I32] = {"i32", 1, 4},           [ST_TYPE_I64] = {"i64", 1, 8},
    [ST_TYPE_F64] = {"f64", 1, 8},           [ST_TYPE_IQ1_M] = {"iq1_m", 256, 56},
    [ST_TYPE_BF16] = {"bf16", 1, 2},         [ST_TYPE_TQ1_0] = {"tq1_0", 256, 54},
    [ST_TYPE_TQ2_0] = {"tq2_0", 256, 66},    [ST_TYPE_MXFP4] = {"mxfp4", 32, 17},
};

static const struct type_geom *geom(st_type t) {
    if ((unsigned)t >= ST_TYPE_COUNT_ || !type_geoms[t].name) return NULL;
    return &type_geoms[t];
}

int64_t st_type_block_size(st_type t) { return geom(t) ? geom(t)->blck : 0; }
size_t st_type_size(st_type t) { return geom(t) ? geom(t)->size : 0; }
const char *st_type_name(st_type t) { return geom(t) ? geom(t)->name : NULL; }

size_t st_row_bytes(st_type t, int64_t ne) {
    const struct type_geom *g = geom(t);
    if (!g || ne < 0 || ne % g->blck) return 0;
    return (size_t)(ne / g->blck) * g->size;
}
