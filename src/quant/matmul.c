/* Threaded matrix-vector and matrix-matrix products over the kernel tables.
 *
 * Work split: matmul divides weight rows statically over the pool's threads
 * (st_split_range). Matvec starts from the same split in 64 KiB chunks, and a thread done
 * with its share takes chunks off the end of the other's (st_threadpool_run_range): on
 * a shared VM one thread often runs slower than the other, and with compute-heavy weights
 * (Q4_K) the static split left the faster thread waiting for a good part of decode
 * (docs/PERFORMANCE.md, quantized matvec). Every output element is one call of the table's
 * tile kernel (or vec_dot), whose per-element arithmetic depends neither on the tile shape
 * nor on the thread that runs it, so results are bit-identical for any thread count and
 * for st_matvec vs st_matmul.
 *
 * Matmul blocking (prefill): a thread walks its rows in quads; for each block of TB
 * tokens (sized so the block's activations stay in L2) it runs 4x4 tiles across the
 * block, so the 4 weight rows of a quad stay in L1 while the activations stream from
 * L2. Weights are read from memory once per token block. A Q8_0 matrix in groups of 16
 * rows instead hands the group tile runs of groups that stay in L2 with all the block's
 * tokens at once (mm_task_groups). */
#include "quant_int.h"

#include <limits.h>
#include <stdlib.h>

#define MM_ACT_L2_BYTES (256 * 1024) /* activation block budget per token block */
/* Matvec work-sharing grain, in weight bytes: MV_CHUNK_BYTES, or less for a product under
 * MV_CHUNKS_PER_THREAD such chunks per thread (never under MV_CHUNK_MIN_BYTES). Smaller
 * chunks everywhere spend the gain in the claim loop; larger ones leave a small model's
 * matrices a chunk or two per thread. A product ends when its last chunk does, so the chunk
 * is the imbalance left at the end of every dispatch: the small model's attention matrices,
 * a few 64 KiB chunks in all, left the main thread waiting on the worker, and at least 8
 * chunks per thread halved that wait (figures in docs/PERFORMANCE.md, end to end). Matrices
 * of 1 MiB and more keep 64 KiB chunks. */
#define MV_CHUNK_BYTES (64 * 1024)
/* Rows up to this many columns go through the table's rows kernel (the activation expanded
 * once, 256 bytes per 64 columns, read by every row): its 8 KiB stay in L1 beside the weight
 * stream. Past 2048 columns (16 KiB and more of expanded activation) it ran slower than a
 * vec_dot per row from DRAM, the expanded activation and the weight stream evicting each
 * other from L1 (docs/PERFORMANCE.md, quantized matvec). */
#define MV_ROWS_MAX_COLS 2048
#define MV_CHUNKS_PER_THREAD 8
#define MV_CHUNK_MIN_BYTES (8 * 1024)

static int check_args(const st_kernels *k, st_type wtype, int64_t rows, int64_t cols) {
    if (!k) return ST_E_INVAL;
    if (st_type_vec_dot_type(wtype) == ST_TYPE_COUNT_) return ST_E_UNSUPPORTED;
    if (rows < 0 || cols <= 0 || cols > INT_MAX || !st_act_bytes(wtype, cols)) return ST_E_INVAL;
    return 0;
}

/* y[r0..r1) of one matrix, one row at a time: a single sequential stream per thread keeps
 * the hardware prefetcher locked on, while reading 2 or 4 rows in parallel (tiles) streamed
 * slower, with or without software prefetch (docs/PERFORMANCE.md, quantized matvec). */
static void mv_rows(const st_type_kernels *tk, const uint8_t *W, size_t rb, int64_t r0, int64_t r1,
                    int cols, const void *xq, const void *xe, float *y) {
    if (xe) {
        tk->rows(cols, r1 - r0, y + r0, W + (size_t)r0 * rb, rb, xe);
        return;
    }
    for (int64_t r = r0; r < r1; r++) tk->vec_dot(cols, y + r, W + (size_t)r * rb, xq);
}

struct mv_job {
    const st_type_kernels *tk;
    st_type wtype;
    st_wlayout layout;
    int unit;         /* rows per unit: 1, or a quad's 4 / a group's 16 in the quad layout */
    uint8_t *scratch; /* quads without their tile kernel: [n_threads][unit rows], each unpacked */
    int n_mat;
    const void *const *W;
    const int64_t *rows;
    size_t rb;      /* bytes per row (per panel row in the panel layout) */
    int cols;       /* columns of a row (of a panel row) */
    const void *xq;
    const void *xe; /* xq expanded for tk->rows (row layout), else NULL */
    float *const *y;
    /* panel layout: np panels (1 otherwise); panel p's activation slice at xq + p * abp;
     * its partial sums for p >= 1 at part[(p - 1) * total + concatenated row] */
    int np;
    size_t abp;
    int64_t total;
    float *part;
};

/* Whether tk runs the quad layout of type t in its own tile kernel (else each unit is
 * unpacked into rows). */
static bool quads_native(const st_type_kernels *tk, st_type t) {
    return st_quads_unit(t) == ST_QUAD_GROUP_ROWS ? tk->tilex != NULL : tk->tile4 != NULL;
}

/* Units [q0, q1) of a matrix in the quad layout: the group tile over all of them at once, or
 * a 4 x 1 tile per quad (or, for a table without the type's tile kernel, each unit unpacked
 * into scratch and its rows done as in the row layout). */
static void mv_quads(const struct mv_job *j, const uint8_t *W, int64_t q0, int64_t q1, float *y, int ith) {
    const size_t ub = (size_t)j->unit * j->rb;
    const bool native = quads_native(j->tk, j->wtype);
    if (native && j->unit == ST_QUAD_GROUP_ROWS) {
        j->tk->tilex(j->cols, y + (size_t)j->unit * (size_t)q0, 0, W + (size_t)q0 * ub, (int)(q1 - q0), j->xq, 0, 1);
        return;
    }
    for (int64_t q = q0; q < q1; q++) {
        const uint8_t *quad = W + (size_t)q * ub;
        if (native) {
            j->tk->tile4(j->cols, y + 4 * q, 1, quad, j->xq, 0, 4, 1);
        } else {
            uint8_t *rows = j->scratch + (size_t)ith * ub;
            st_quads_unpack(j->wtype, quad, j->cols, rows);
            mv_rows(j->tk, rows, j->rb, 0, j->unit, j->cols, j->xq, NULL, y + (size_t)j->unit * (size_t)q);
        }
    }
}

/* Units [a, b) of panel p's concatenated units (p = 0 outside the panel layout): rows, or
 * quads in the quad layout. */
static void mv_span(const struct mv_job *j, int p, int64_t a, int64_t b, int ith) {
    const int64_t per = j->unit;
    const void *xq = (const uint8_t *)j->xq + (size_t)p * j->abp;
    int64_t base = 0;
    for (int m = 0; m < j->n_mat && base < b; base += j->rows[m] / per, m++) {
        const int64_t lo = a > base ? a - base : 0;
        const int64_t hi = b - base < j->rows[m] / per ? b - base : j->rows[m] / per;
        if (lo >= hi) continue;
        const uint8_t *W = (const uint8_t *)j->W[m] + (size_t)p * (size_t)j->rows[m] * j->rb;
        float *y = p ? j->part + (size_t)(p - 1) * (size_t)j->total + (size_t)base : j->y[m];
        if (j->layout == ST_WLAYOUT_QUADS) mv_quads(j, W, lo, hi, y, ith);
        else mv_rows(j->tk, W, j->rb, lo, hi, j->cols, xq, j->xe, y);
    }
}

/* Units [a, b) of every panel's units, panel after panel (one panel outside that layout). */
static void mv_range(void *arg, int64_t a, int64_t b, int ith) {
    const struct mv_job *j = arg;
    const int64_t n = j->total / j->unit;
    for (int64_t p = a / n; p < j->np && p * n < b; p++)
        mv_span(j, (int)p, a > p * n ? a - p * n : 0, b - p * n < n ? b - p * n : n, ith);
}

/* Scratch for quad products on a table without the type's tile kernel (NULL when none is
 * needed): a unit's rows per thread. 0 or ST_E_NOMEM. */
static int quad_scratch(const st_type_kernels *tk, st_type t, st_wlayout layout, st_threadpool *tp, size_t rb,
                        uint8_t **out) {
    *out = NULL;
    if (layout != ST_WLAYOUT_QUADS || quads_native(tk, t)) return 0;
    *out = malloc((size_t)st_threadpool_n_threads(tp) * (size_t)st_quads_unit(t) * rb);
    return *out ? 0 : ST_E_NOMEM;
}

static int check_layout(st_wlayout layout, st_type wtype, int64_t rows, int64_t cols) {
    if (layout == ST_WLAYOUT_ROWS) return 0;
    if (layout == ST_WLAYOUT_PANELS) return !rows || st_panels_count(wtype, rows, cols) ? 0 : ST_E_INVAL;
    if (layout != ST_WLAYOUT_QUADS) return ST_E_INVAL;
    return st_quads_shape(wtype, rows, cols) ? 0 : ST_E_INVAL;
}

/* Panels of a product in `layout` over cols columns (1 outside the panel layout). */
static int panels_of(st_wlayout layout, st_type wtype, int64_t cols) {
    return layout == ST_WLAYOUT_PANELS ? st_panels_count(wtype, 1, cols) : 1;
}

int st_matvec_multi_l(st_threadpool *tp, const st_kernels *k, st_type wtype, st_wlayout layout,
                      int n_mat, const void *const *W, const int64_t *rows, int64_t cols,
                      const void *xq, float *const *y) {
    int rc = check_args(k, wtype, 0, cols);
    if (rc) return rc;
    if (n_mat < 0 || (n_mat && (!W || !rows || !y)) || !xq) return ST_E_INVAL;
    int64_t total = 0;
    for (int m = 0; m < n_mat; m++) {
        if (rows[m] < 0 || (rows[m] && (!W[m] || !y[m])) || check_layout(layout, wtype, rows[m], cols))
            return ST_E_INVAL;
        total += rows[m];
    }
    const int np = panels_of(layout, wtype, cols);
    const int unit = layout == ST_WLAYOUT_QUADS ? st_quads_unit(wtype) : 1;
    struct mv_job j = {&k->type[wtype], wtype, layout, unit, NULL, n_mat, W, rows, st_row_bytes(wtype, cols / np),
                       (int)(cols / np), xq, NULL, y, np, st_act_bytes(wtype, cols / np), total, NULL};
    if ((rc = quad_scratch(j.tk, wtype, layout, tp, j.rb, &j.scratch))) return rc;
    if (np > 1 && total && !(j.part = malloc((size_t)(np - 1) * (size_t)total * sizeof(float)))) return ST_E_NOMEM;
    void *xe = NULL; /* the activation expanded once for every row */
    if (layout == ST_WLAYOUT_ROWS && j.tk->rows && total && cols <= MV_ROWS_MAX_COLS) {
        if (!(xe = st_alloc_aligned(st_act_x_bytes(cols), 64))) {
            free(j.scratch);
            return ST_E_NOMEM;
        }
        j.tk->act_expand((int)cols, xq, xe);
        j.xe = xe;
    }
    /* work units: rows (of each panel in turn in the panel layout), or quads / groups */
    const size_t ub = (size_t)unit * j.rb;
    const int64_t units = total / unit * np;
    size_t chunk = (size_t)units * ub / ((size_t)MV_CHUNKS_PER_THREAD * (size_t)st_threadpool_n_threads(tp));
    if (chunk > MV_CHUNK_BYTES) chunk = MV_CHUNK_BYTES;
    if (chunk < MV_CHUNK_MIN_BYTES) chunk = MV_CHUNK_MIN_BYTES;
    const int64_t grain = ub >= chunk ? 1 : (int64_t)(chunk / ub);
    if (units) st_threadpool_run_range(tp, units, grain, mv_range, &j);
    /* the panels' partial sums, added in panel order (st_matmul adds them the same way) */
    for (int p = 1; p < np; p++) {
        int64_t base = 0;
        for (int m = 0; m < n_mat; base += rows[m], m++) {
            const float *part = j.part + (size_t)(p - 1) * (size_t)total + (size_t)base;
            for (int64_t r = 0; r < rows[m]; r++) y[m][r] += part[r];
        }
    }
    free(j.part);
    free(j.scratch);
    st_free_aligned(xe);
    return 0;
}

int st_matvec_multi(st_threadpool *tp, const st_kernels *k, st_type wtype, int n_mat,
                    const void *const *W, const int64_t *rows, int64_t cols, const void *xq,
                    float *const *y) {
    return st_matvec_multi_l(tp, k, wtype, ST_WLAYOUT_ROWS, n_mat, W, rows, cols, xq, y);
}

int st_matvec(st_threadpool *tp, const st_kernels *k, st_type wtype, const void *W, int64_t rows,
              int64_t cols, const void *xq, float *y) {
    int rc = check_args(k, wtype, rows, cols);
    if (rc) return rc;
    if (rows && (!W || !y)) return ST_E_INVAL;
    return st_matvec_multi(tp, k, wtype, 1, &W, &rows, cols, xq, &y);
}

struct mm_job {
    const st_type_kernels *tk;
    st_type wtype;
    st_wlayout layout;
    uint8_t *scratch; /* as mv_job's */
    const uint8_t *W;
    size_t rb; /* bytes per weight row */
    int64_t rows;
    int cols;
    int64_t n_tok;
    const uint8_t *X;
    size_t ab; /* bytes per activation row */
    float *Y;
    int64_t ldy;
    int64_t tb; /* tokens per block */
    int np;     /* panels (1 outside the panel layout); rb, cols are a panel row's */
    size_t abp; /* bytes of a panel's slice of an activation row */
};

/* Tile (rows [r, r + nr), tokens [t, t + nc)) of panel p into y (row stride ldy). */
static void mm_tile(const struct mm_job *j, int p, const uint8_t *w, int64_t t, int nr, int nc, float *y,
                    size_t ldy, bool quad_tile) {
    const st_type_kernels *tk = j->tk;
    const uint8_t *x = j->X + (size_t)t * j->ab + (size_t)p * j->abp;
    if (quad_tile) {
        tk->tile4(j->cols, y, ldy, w, x, j->ab, nr, nc);
    } else if (tk->tile) {
        tk->tile(j->cols, y, ldy, w, j->rb, x, j->ab, nr, nc);
    } else {
        for (int c = 0; c < nc; c++)
            for (int i = 0; i < nr; i++)
                tk->vec_dot(j->cols, y + c * ldy + i, w + (size_t)i * j->rb, x + (size_t)c * j->ab);
    }
}

/* Rows [r0, r1) (whole groups) of a matrix in the group layout (Q8_0): for each token block,
 * runs of groups whose weights stay in L2 against all the block's tokens in one call of the
 * group tile (which takes the tokens 16 at a time on AMX, 4 on VNNI). */
#define MM_GROUP_L2_BYTES (128 * 1024)
static void mm_task_groups(const struct mm_job *j, int64_t r0, int64_t r1) {
    const size_t gb = ST_QUAD_GROUP_ROWS * j->rb;
    const int64_t run = gb >= MM_GROUP_L2_BYTES ? 1 : (int64_t)(MM_GROUP_L2_BYTES / gb);
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += j->tb) {
        const int64_t t1 = t0 + j->tb < j->n_tok ? t0 + j->tb : j->n_tok;
        for (int64_t r = r0; r < r1; r += run * ST_QUAD_GROUP_ROWS) {
            const int64_t ng = (r1 - r) / ST_QUAD_GROUP_ROWS < run ? (r1 - r) / ST_QUAD_GROUP_ROWS : run;
            j->tk->tilex(j->cols, j->Y + t0 * j->ldy + r, (size_t)j->ldy, j->W + (size_t)r * j->rb, (int)ng,
                         j->X + (size_t)t0 * j->ab, j->ab, (int)(t1 - t0));
        }
    }
}

static void mm_task(void *arg, int ith, int nth) {
    const struct mm_job *j = arg;
    int64_t r0, r1;
    const int quads = j->layout == ST_WLAYOUT_QUADS;
    const int unit = quads ? st_quads_unit(j->wtype) : 1;
    /* a quad matrix splits by units, so every tile is within one whole quad or group */
    st_split_range(j->rows / unit, ith, nth, &r0, &r1);
    r0 *= unit, r1 *= unit;
    const st_type_kernels *tk = j->tk;
    const bool native = quads && quads_native(tk, j->wtype);
    if (native && unit == ST_QUAD_GROUP_ROWS) {
        mm_task_groups(j, r0, r1);
        return;
    }
    for (int64_t t0 = 0; t0 < j->n_tok; t0 += j->tb) {
        const int64_t t1 = t0 + j->tb < j->n_tok ? t0 + j->tb : j->n_tok;
        /* rows a unit at a time in the quad layout (one unpack each without its kernel), else
         * a tile's rows */
        const int step = quads ? unit : ST_TILE_MAX;
        for (int64_t ru = r0; ru < r1; ru += step) {
            const uint8_t *wu = j->W + (size_t)ru * j->rb;
            if (quads && !native) { /* rows of the unit, then as the row layout */
                uint8_t *rows = j->scratch + (size_t)ith * (size_t)unit * j->rb;
                st_quads_unpack(j->wtype, wu, j->cols, rows);
                wu = rows;
            }
            for (int64_t r = ru; r < ru + step && r < r1; r += ST_TILE_MAX) {
                const int nr = r1 - r < ST_TILE_MAX ? (int)(r1 - r) : ST_TILE_MAX;
                const uint8_t *w = wu + (size_t)(r - ru) * j->rb;
                for (int64_t t = t0; t < t1; t += ST_TILE_MAX) {
                    const int nc = t1 - t < ST_TILE_MAX ? (int)(t1 - t) : ST_TILE_MAX;
                    float *y = j->Y + t * j->ldy + r;
                    mm_tile(j, 0, w, t, nr, nc, y, (size_t)j->ldy, native);
                    /* later panels: into a tile of their own, then added in panel order */
                    for (int p = 1; p < j->np; p++) {
                        float part[ST_TILE_MAX * ST_TILE_MAX];
                        mm_tile(j, p, w + (size_t)p * (size_t)j->rows * j->rb, t, nr, nc, part, ST_TILE_MAX, native);
                        for (int c = 0; c < nc; c++)
                            for (int i = 0; i < nr; i++) y[c * j->ldy + i] += part[c * ST_TILE_MAX + i];
                    }
                }
            }
        }
    }
}

int st_matmul_l(st_threadpool *tp, const st_kernels *k, st_type wtype, st_wlayout layout,
                const void *W, int64_t rows, int64_t cols, int64_t n_tok, const void *Xq, float *Y,
                int64_t ldy) {
    int rc = check_args(k, wtype, rows, cols);
    if (rc) return rc;
    if (n_tok < 0 || ldy < rows || check_layout(layout, wtype, rows, cols)) return ST_E_INVAL;
    if (!rows || !n_tok) return 0;
    if (!W || !Xq || !Y) return ST_E_INVAL;
    const size_t ab = st_act_bytes(wtype, cols);
    int64_t tb = (int64_t)(MM_ACT_L2_BYTES / ab) / ST_TILE_MAX * ST_TILE_MAX;
    if (tb < ST_TILE_MAX) tb = ST_TILE_MAX;
    const int np = panels_of(layout, wtype, cols);
    struct mm_job j = {&k->type[wtype], wtype, layout, NULL, W, st_row_bytes(wtype, cols / np), rows,
                       (int)(cols / np), n_tok, Xq, ab, Y, ldy, tb, np, st_act_bytes(wtype, cols / np)};
    if ((rc = quad_scratch(j.tk, wtype, layout, tp, j.rb, &j.scratch))) return rc;
    st_threadpool_run(tp, mm_task, &j);
    free(j.scratch);
    return 0;
}

int st_matmul(st_threadpool *tp, const st_kernels *k, st_type wtype, const void *W, int64_t rows,
              int64_t cols, int64_t n_tok, const void *Xq, float *Y, int64_t ldy) {
    return st_matmul_l(tp, k, wtype, ST_WLAYOUT_ROWS, W, rows, cols, n_tok, Xq, Y, ldy);
}

struct qa_job {
    const st_from_float_fn fn;
    const float *X;
    int64_t ldx, n_rows, cols;
    uint8_t *Xq;
    size_t ab;
};

static void qa_task(void *arg, int ith, int nth) {
    const struct qa_job *j = arg;
    int64_t a, b;
    st_split_range(j->n_rows, ith, nth, &a, &b);
    for (int64_t i = a; i < b; i++) j->fn(j->X + i * j->ldx, j->Xq + (size_t)i * j->ab, j->cols);
}

int st_quantize_act_rows(st_threadpool *tp, const st_kernels *k, st_type wtype, const float *X,
                         int64_t ldx, int64_t n_rows, int64_t cols, void *Xq) {
    if (!k) return ST_E_INVAL;
    if (st_type_vec_dot_type(wtype) == ST_TYPE_COUNT_) return ST_E_UNSUPPORTED;
    const size_t ab = st_act_bytes(wtype, cols);
    if (!ab || n_rows < 0 || ldx < cols) return ST_E_INVAL;
    if (!n_rows) return 0;
    if (!X || !Xq) return ST_E_INVAL;
    struct qa_job j = {k->type[k->type[wtype].vec_dot_type].from_float, X, ldx, n_rows, cols, Xq, ab};
    st_threadpool_run(tp, qa_task, &j);
    return 0;
}
