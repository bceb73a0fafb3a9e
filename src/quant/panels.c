/* The panel weight layout (st_wlayout): long rows cut into panels of at most
 * ST_PANEL_MAX_COLS columns, each panel a row-major matrix, stored one after another (see
 * quant.h). Packing runs once per matrix at model load, through a copy of the matrix. */
#include "quant_int.h"

#include <stdlib.h>

int st_panels_count(st_type t, int64_t rows, int64_t cols) {
    if (rows < 1 || cols <= ST_PANEL_MAX_COLS || cols > INT32_MAX || cols % ST_PANEL_ALIGN ||
        st_type_vec_dot_type(t) == ST_TYPE_COUNT_ || !st_row_bytes(t, cols))
        return 0;
    for (int64_t np = 2; cols / np >= ST_PANEL_MIN_COLS; np++) {
        const int64_t w = cols / np;
        if (cols % np == 0 && w % ST_PANEL_ALIGN == 0 && w <= ST_PANEL_MAX_COLS) return (int)np;
    }
    return 0;
}

int st_pack_panels(st_type t, void *W, int64_t rows, int64_t cols) {
    const int np = W ? st_panels_count(t, rows, cols) : 0;
    if (!np) return ST_E_INVAL;
    const size_t rb = st_row_bytes(t, cols), pb = rb / (size_t)np, total = rb * (size_t)rows;
    uint8_t *tmp = malloc(total);
    if (!tmp) return ST_E_NOMEM;
    memcpy(tmp, W, total);
    uint8_t *dst = W;
    for (int p = 0; p < np; p++)
        for (int64_t r = 0; r < rows; r++, dst += pb) memcpy(dst, tmp + (size_t)r * rb + (size_t)p * pb, pb);
    free(tmp);
    return 0;
}

int st_panels_row(st_type t, const void *W, int64_t rows, int64_t cols, int64_t r, void *row) {
    const int np = W && row ? st_panels_count(t, rows, cols) : 0;
    if (!np || r < 0 || r >= rows) return ST_E_INVAL;
    const size_t pb = st_row_bytes(t, cols) / (size_t)np;
    for (int p = 0; p < np; p++)
        memcpy((uint8_t *)row + (size_t)p * pb, (const uint8_t *)W + ((size_t)p * (size_t)rows + (size_t)r) * pb, pb);
    return 0;
}
