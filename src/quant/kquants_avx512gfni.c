/*
 * The K-quant dots of kquants_avx512.h compiled with GFNI (one affine instruction takes
 * a nibble of 64 weights). Same arithmetic and bits as the _avx512 versions;
 * dispatch picks these when st_cpu_has_gfni() as well as VNNI (Ice Lake, Zen 4 and
 * newer; Cascade Lake has VNNI without GFNI).
 */
#include "quant/kquants_avx512.h"

#ifndef __GFNI__
#error "kquants_avx512gfni.c must be compiled with -mgfni (CMakeLists.txt: *_avx512gfni.c)"
#endif

ST_KQ_DEF_DOT_TILE_(q4_K_q8_K, avx512gfni, st_block_q4_K, KQ_Q4K_ROW_)
ST_KQ_DEF_DOT_TILE_(q5_K_q8_K, avx512gfni, st_block_q5_K, KQ_Q5K_ROW_)
ST_KQ_DEF_DOT_TILE_(q6_K_q8_K, avx512gfni, st_block_q6_K, q6k_row)
ST_KQ_DEF_QUAD_(q4_K_q8_K, avx512gfni, KQ_Q4K_QUAD_ROWS_, 0)
ST_KQ_DEF_QUAD_(q5_K_q8_K, avx512gfni, KQ_Q5K_QUAD_ROWS_, 0)
ST_KQ_DEF_QUAD_(q6_K_q8_K, avx512gfni, q6k_quad_rows, 8 * (size_t)nb)
