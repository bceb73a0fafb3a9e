/*
 * The K-quant dots of kquants_avx2.h compiled with AVX-VNNI (VEX vpdpbusd / vpdpwssd):
 * the AVX2 table's K-quants on CPUs that have it without AVX-512 (Alder Lake and newer)
 * or where AVX2 is forced (STRATA_ISA=avx2 on Zen 5). Dispatch picks them when
 * st_cpu_has_avxvnni().
 */
#include "quant/kquants_avx2.h"

#ifndef __AVXVNNI__
#error "kquants_avx2vnni.c must be compiled with -mavxvnni (CMakeLists.txt: *_avx2vnni.c)"
#endif

ST_KQ_DEF_DOT_TILE_(q4_K_q8_K, avx2vnni, st_block_q4_K, KQ_Q4K_ROW_)
ST_KQ_DEF_DOT_TILE_(q5_K_q8_K, avx2vnni, st_block_q5_K, KQ_Q5K_ROW_)
ST_KQ_DEF_DOT_TILE_(q6_K_q8_K, avx2vnni, st_block_q6_K, q6k_row)
ST_KQ_DEF_Q4K_QUAD_AVX2_(avx2vnni)
