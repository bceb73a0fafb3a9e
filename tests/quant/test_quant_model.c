/* Real tensors: every 2-D f32 tensor of ../shared/models/stories260K.gguf quantized to
 * each type, dequantized (error vs the original within the type's threshold) and
 * multiplied (st_matvec with a real embedding row as the input, against the f64
 * product of the original f32 tensors). */
#include "strata/gguf.h"
#include "strata/quant.h"
#include "../test.h"
#include "quant_test_util.h"

/* Real weights are not uniform: outliers stretch a block's scale, so the round-trip
 * error relative to the RMS is larger than on uniform data. */
#define MODEL_RMSE_FACTOR 2.0
/* Products of real tensors: relative to sum |w x| as for test_quant's dots; K-quants
 * on 64-wide rows are quantized as flattened 256-element super-blocks. */
#define MODEL_DOT_FACTOR 2.0

TEST(test_stories260K_tensors) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    FILE *probe = fopen(path, "rb");
    if (!probe) {
        test_skip("stories260K.gguf is absent: real-tensor quantization untested");
        return;
    }
    fclose(probe);
    st_ctx *ctx = NULL;
    st_gguf *g = NULL;
    CHECK_OK(st_ctx_create(NULL, &ctx));
    REQUIRE(ctx);
    CHECK_OK(st_gguf_open(ctx, path, &g));
    REQUIRE(g);
    const st_gguf_tensor *emb = st_gguf_find_tensor(g, "token_embd.weight");
    REQUIRE(emb && emb->type == ST_TYPE_F32 && emb->ne[0] == 64);
    const float *x = (const float *)emb->data + 1 * 64; /* embedding of token 1 as input */
    const st_kernels *k = st_kernels_get(st_ctx_isa(ctx));
    st_threadpool *tp = st_ctx_threadpool(ctx);
    int n_tensors = 0, n_products = 0;
    for (int64_t ti = 0; ti < st_gguf_n_tensors(g); ti++) {
        const st_gguf_tensor *t = st_gguf_tensor_at(g, ti);
        if (t->type != ST_TYPE_F32 || t->n_dims != 2) continue;
        const int64_t cols = t->ne[0], rows = t->ne[1], nel = cols * rows;
        const float *w = t->data;
        n_tensors++;
        float *deq = malloc(sizeof(float) * nel), *y = malloc(sizeof(float) * rows);
        uint8_t *q = malloc((size_t)nel * 4 + 64), *xq = malloc(64 * 4 + 64);
        REQUIRE(deq && y && q && xq);
        for (int i = 0; i < QT_N_TYPES; i++) {
            const st_type ty = QT_TYPES[i].t;
            /* flattened round trip over whole blocks */
            const int64_t n = nel / st_type_block_size(ty) * st_type_block_size(ty);
            CHECK_OK(st_quantize_row(ty, w, q, n));
            CHECK_OK(st_dequantize_row(ty, q, deq, n));
            double se = 0, sw = 0;
            for (int64_t j = 0; j < n; j++) {
                se += (double)(w[j] - deq[j]) * (w[j] - deq[j]);
                sw += (double)w[j] * w[j];
            }
            const double rel = sqrt(se / sw), lim = QT_TYPES[i].max_rel_rmse * MODEL_RMSE_FACTOR;
            if (!(rel <= lim)) fprintf(stderr, "  %s %s: relative RMSE %.5f > %.5f\n", t->name, st_type_name(ty), rel, lim);
            CHECK(rel <= lim);
            /* product y = W x for row widths this type can hold */
            if (cols != 64 || cols % st_type_block_size(ty)) continue;
            const size_t rb = st_row_bytes(ty, cols);
            for (int64_t r = 0; r < rows; r++) CHECK_OK(st_quantize_row(ty, w + r * cols, q + r * rb, cols));
            CHECK_OK(st_quantize_act(k, ty, x, xq, cols));
            CHECK_OK(st_matvec(tp, k, ty, q, rows, cols, xq, y));
            double worst = 0;
            for (int64_t r = 0; r < rows; r++) {
                double abs_sum;
                const double exact = qt_dot64(w + r * cols, x, cols, &abs_sum);
                const double e = fabs(y[r] - exact) / (abs_sum + 1e-30);
                if (e > worst) worst = e;
            }
            const double dlim = QT_TYPES[i].max_dot_rel * MODEL_DOT_FACTOR;
            if (!(worst <= dlim)) fprintf(stderr, "  %s %s: product error %.5f > %.5f\n", t->name, st_type_name(ty), worst, dlim);
            CHECK(worst <= dlim);
            n_products++;
        }
        free(deq), free(y), free(q), free(xq);
    }
    fprintf(stderr, "  %d tensors, %d products checked (%s kernels)\n", n_tensors, n_products, st_isa_name(k->isa));
    CHECK(n_tensors >= 30);
    CHECK(n_products >= 100);
    st_gguf_close(g);
    st_ctx_destroy(ctx);
}

TEST_MAIN(test_stories260K_tensors)
