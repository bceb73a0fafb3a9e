/* Streaming attention over cold layer blocks: the "do not fit" path of the essay at the top
 * of kv_attend.c (windows of cold blocks read into two buffers, window w+1 in flight while
 * window w computes; nothing evicted, output bit-identical to the all-in-RAM call). */
#include "kv_int.h"

#include <stdlib.h>
#include <string.h>

#define KV_STREAM_BYTES ((size_t)2 << 20) /* per stream buffer; at least one run's blocks */

void kv_attend_free(st_kv *kv) {
    for (int b = 0; b < 2; b++) {
        st_free_aligned(kv->stream_buf[b]);
        kv->stream_buf[b] = NULL;
    }
    kv->stream_cap = 0;
}

/* ---- streaming ------------------------------------------------------------------------------ */

typedef struct window {
    int32_t c0, c1;     /* decode: runs [c0, c1); chunk: views [c0, c1) */
    int32_t *uni;       /* [n_uni] view indices, in first-use order */
    int32_t n_uni;
    int32_t *sub_sel, *sub_nsel, stride; /* decode with a selection */
    st_spill_rd *rd;    /* [n_rd] this window's cold reads */
    int32_t n_rd;
    int32_t *rd_of;     /* [n_uni] index into rd, or -1 */
    st_spill_ticket *ticket;
} window;

typedef struct streamer {
    st_kv *kv;
    int layer;
    seq_views *sv;
    int32_t pps;         /* list entries per run (decode) */
    int32_t n_list;      /* the longest list: every view, or the longest head's selection */
    const int32_t **list;/* [H] per-head lists (decode with a selection) */
    int32_t *len;        /* [H] */
    int32_t *stamp, *pos;/* [n views] scratch for unions */
    uint8_t *buf[2];
    int64_t cap;         /* blocks per buffer */
    window w[2];
} streamer;

static int32_t list_at(const streamer *st, int32_t h, int32_t i) {
    return st->list ? st->list[h][i] : i;
}

/* The union of views of window [c0, c1) (decode: runs, chunk: views) into w; counts cold. */
static int32_t window_union(streamer *st, int chunk, int32_t c0, int32_t c1, int32_t id,
                            window *w) {
    const seq_views *sv = st->sv;
    int32_t n_cold = 0;
    w->n_uni = 0;
    if (chunk || !st->list) {
        int32_t v0 = chunk ? c0 : c0 * st->pps, v1 = chunk ? c1 : c1 * st->pps;
        if (v1 > sv->n) v1 = sv->n;
        for (int32_t j = v0; j < v1; j++) {
            w->uni[w->n_uni++] = j;
            n_cold += sv->cold[j];
        }
        return n_cold;
    }
    for (int32_t h = 0; h < st->kv->p.n_kv_head; h++) {
        int32_t i1 = c1 * st->pps < st->len[h] ? c1 * st->pps : st->len[h];
        for (int32_t i = c0 * st->pps; i < i1; i++) {
            int32_t j = list_at(st, h, i);
            if (st->stamp[j] == id) continue;
            st->stamp[j] = id;
            st->pos[j] = w->n_uni;
            w->uni[w->n_uni++] = j;
            n_cold += sv->cold[j];
        }
    }
    return n_cold;
}

/* Plans window [c0, c1) into buffer b and submits its reads. */
static int window_submit(streamer *st, int chunk, int32_t c0, int32_t c1, int32_t id, int b) {
    st_kv *kv = st->kv;
    window *w = &st->w[b];
    w->c0 = c0, w->c1 = c1;
    window_union(st, chunk, c0, c1, id, w);
    w->n_rd = 0;
    for (int32_t u = 0; u < w->n_uni; u++) {
        int32_t j = w->uni[u];
        w->rd_of[u] = -1;
        if (!st->sv->cold[j]) continue;
        const int32_t page = st->sv->page[j];
        const kv_page *pg = &kv->pages[page];
        ST_ASSERT(kv_blk(kv, page, st->layer)->res == KV_RES_DISK && w->n_rd < st->cap);
        const int32_t r = w->n_rd++;
        w->rd_of[u] = r;
        w->rd[r] = (st_spill_rd){.slot = pg->slot, .key = (uint64_t)page, .gen = pg->gen,
                                 .buf = st->buf[b] + (size_t)r * kv->g.layer_bytes,
                                 .len = kv->g.layer_bytes, .part_first = (uint32_t)st->layer,
                                 .part_count = 1};
    }
    if (!chunk && st->list) {
        const int32_t H = kv->p.n_kv_head;
        w->stride = (c1 - c0) * st->pps;
        for (int32_t h = 0; h < H; h++) {
            int32_t i0 = c0 * st->pps, i1 = c1 * st->pps < st->len[h] ? c1 * st->pps : st->len[h];
            w->sub_nsel[h] = i1 > i0 ? i1 - i0 : 0;
            for (int32_t i = i0; i < i1; i++)
                w->sub_sel[(size_t)h * w->stride + (i - i0)] = st->pos[list_at(st, h, i)];
        }
    }
    w->ticket = NULL;
    if (!w->n_rd) return 0;
    kv->st.tier_block_reads += w->n_rd;
    kv->st.tier_bytes_read += (int64_t)w->n_rd * (int64_t)kv->g.layer_bytes;
    return st_spill_read_submit(kv->spill, w->rd, w->n_rd, &w->ticket);
}

/* Waits for buffer b's reads; a failed read fails its page (and sequences). */
static int window_wait(streamer *st, st_ctx *ctx, int b) {
    window *w = &st->w[b];
    if (!w->ticket) return 0;
    st_spill_stats s0 = st_spill_get_stats(st->kv->spill);
    int rc = st_spill_read_wait(st->kv->spill, w->ticket, ctx);
    st_spill_stats s1 = st_spill_get_stats(st->kv->spill);
    st->kv->st.fetch_stalls += (int64_t)(s1.read_stalls - s0.read_stalls);
    w->ticket = NULL;
    if (rc)
        for (int32_t i = 0; i < w->n_rd; i++)
            if (w->rd[i].rc && st->kv->pages[w->rd[i].key].resident == KV_RES_BLOCKS)
                kv_page_fail(st->kv, (int32_t)w->rd[i].key, w->rd[i].rc);
    return rc;
}

/* The window's page list as attention views (cold ones pointing into buffer b). */
static void window_views(const streamer *st, int b, st_attn_page *out) {
    const window *w = &st->w[b];
    for (int32_t u = 0; u < w->n_uni; u++) {
        out[u] = st->sv->v[w->uni[u]];
        if (w->rd_of[u] >= 0) {
            const uint8_t *blk = st->buf[b] + (size_t)w->rd_of[u] * st->kv->g.layer_bytes;
            const int64_t i = out[u].pos0 / st->kv->p.page_size;
            kv_block_view(st->kv, blk, &st->sv->s->ent[i], i, st->sv->lim, &out[u]);
        }
    }
}

static void streamer_free(streamer *st) {
    for (int b = 0; b < 2; b++) {
        free(st->w[b].uni);
        free(st->w[b].rd);
        free(st->w[b].rd_of);
        free(st->w[b].sub_sel);
        free(st->w[b].sub_nsel);
    }
    free(st->stamp);
    free(st->pos);
    free(st->list);
    free(st->len);
}

/* Plans the windows: bounds[n_win + 1] (runs or views), each with <= cap cold blocks
 * (cap grows to the largest single step). Returns the window count or a negative error. */
static int32_t plan(streamer *st, int chunk, int32_t n_steps, int32_t **bounds_out) {
    int32_t *bounds = malloc((size_t)(n_steps + 1) * sizeof *bounds);
    window tmp = {.uni = malloc((size_t)(st->sv->n ? st->sv->n : 1) * sizeof(int32_t))};
    if (!bounds || !tmp.uni) {
        free(bounds);
        free(tmp.uni);
        return ST_E_NOMEM;
    }
    int32_t stamp = 1 << 30, n_win = 0, c = 0;
    for (int32_t j = 0; j < st->sv->n; j++) st->stamp[j] = -1;
    int64_t one_max = 0;
    for (int32_t i = 0; i < n_steps; i++) {
        int64_t k = window_union(st, chunk, i, i + 1, --stamp, &tmp);
        if (k > one_max) one_max = k;
    }
    if (one_max > st->cap) st->cap = one_max;
    bounds[n_win++] = 0;
    while (c < n_steps) {
        int32_t c1 = c + 1;
        while (c1 < n_steps && window_union(st, chunk, c, c1 + 1, --stamp, &tmp) <= st->cap) c1++;
        bounds[n_win++] = c1;
        c = c1;
    }
    free(tmp.uni);
    *bounds_out = bounds;
    return n_win - 1;
}

static int streamer_init(streamer *st, st_kv *kv, int layer, seq_views *sv, int chunk) {
    memset(st, 0, sizeof *st);
    st->kv = kv;
    st->layer = layer;
    st->sv = sv;
    st->cap = (int64_t)(KV_STREAM_BYTES / kv->g.layer_bytes);
    if (st->cap < 1) st->cap = 1;
    const size_t nv = (size_t)(sv->n ? sv->n : 1);
    st->stamp = malloc(nv * sizeof *st->stamp);
    st->pos = malloc(nv * sizeof *st->pos);
    if (!st->stamp || !st->pos) return ST_E_NOMEM;
    st->n_list = sv->n; /* st_attn_decode cuts runs by the longest per-head list */
    if (!chunk && sv->sel) {
        const int32_t H = kv->p.n_kv_head;
        st->list = malloc((size_t)H * sizeof *st->list);
        st->len = malloc((size_t)H * sizeof *st->len);
        if (!st->list || !st->len) return ST_E_NOMEM;
        st->n_list = 0;
        for (int32_t h = 0; h < H; h++) {
            st->list[h] = sv->sel_idx + (size_t)h * sv->sel_stride, st->len[h] = sv->sel_n[h];
            if (st->len[h] > st->n_list) st->n_list = st->len[h];
        }
    }
    st->pps = st_attn_pages_per_run(kv->p.page_size, st->n_list);
    return 0;
}

static int streamer_buffers(streamer *st, int chunk, int32_t max_steps) {
    const size_t nv = (size_t)(st->sv->n ? st->sv->n : 1);
    const int32_t H = st->kv->p.n_kv_head;
    st_kv *kv = st->kv;
    const size_t need = (size_t)st->cap * kv->g.layer_bytes;
    if (need > kv->stream_cap) {
        kv_attend_free(kv);
        for (int b = 0; b < 2; b++)
            if (!(kv->stream_buf[b] = st_alloc_aligned(need, ST_KV_LAYER_ALIGN))) {
                kv_attend_free(kv);
                return ST_E_NOMEM;
            }
        kv->stream_cap = need;
    }
    for (int b = 0; b < 2; b++) {
        window *w = &st->w[b];
        st->buf[b] = kv->stream_buf[b];
        w->uni = malloc(nv * sizeof *w->uni);
        w->rd_of = malloc(nv * sizeof *w->rd_of);
        w->rd = malloc((size_t)st->cap * sizeof *w->rd);
        if (!st->buf[b] || !w->uni || !w->rd_of || !w->rd) return ST_E_NOMEM;
        if (!chunk && st->list) {
            w->sub_sel = malloc((size_t)H * (size_t)max_steps * (size_t)st->pps * sizeof(int32_t) + 4);
            w->sub_nsel = malloc((size_t)H * sizeof(int32_t));
            if (!w->sub_sel || !w->sub_nsel) return ST_E_NOMEM;
        }
    }
    return 0;
}

/* Streams one sequence: decode (q -> out via partials) or chunk (q[n_q] -> out). */
int kv_stream_one(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, int layer,
                  seq_views *sv, int chunk, const float *q, int32_t n_q, int64_t pos0_q,
                  float *out) {
    streamer st;
    int32_t *bounds = NULL;
    float *acc = NULL;
    st_attn_page *views = malloc((size_t)(sv->n ? sv->n : 1) * sizeof *views);
    int rc = views ? streamer_init(&st, kv, layer, sv, chunk) : ST_E_NOMEM;
    int32_t n_steps = 0;
    if (!rc && !chunk) {
        n_steps = (st.n_list + st.pps - 1) / st.pps;
        if (n_steps < 1) n_steps = 1;
    } else {
        n_steps = sv->n;
    }
    int32_t n_win = 0;
    if (!rc) {
        n_win = plan(&st, chunk, n_steps, &bounds);
        if (n_win < 0) rc = n_win;
    }
    int32_t max_steps = 1;
    for (int32_t i = 0; !rc && i < n_win; i++)
        if (bounds[i + 1] - bounds[i] > max_steps) max_steps = bounds[i + 1] - bounds[i];
    if (!rc) rc = streamer_buffers(&st, chunk, max_steps);
    size_t acc_n = chunk ? st_attn_chunk_state_floats(g, n_q)
                         : (size_t)n_steps * (size_t)g->n_head * ST_ATTN_PART_FLOATS(g->head_dim);
    if (!rc && !(acc = st_alloc_aligned((acc_n ? acc_n : 1) * sizeof(float), 64))) rc = ST_E_NOMEM;
    if (rc) {
        rc = st_seterr(ctx, rc, "kv: attend: cannot set up streaming (%s)", st_strerror(rc));
        goto out;
    }
    for (int32_t j = 0; j < sv->n; j++) st.stamp[j] = -1;
    if (chunk) st_attn_chunk_begin(g, n_q, acc);
    if (n_win > 0) rc = window_submit(&st, chunk, bounds[0], bounds[1], 1, 0);
    int err = rc;
    for (int32_t wi = 0; wi < n_win; wi++) {
        const int b = wi & 1;
        if (!err && wi + 1 < n_win)
            err = window_submit(&st, chunk, bounds[wi + 1], bounds[wi + 2], wi + 2, b ^ 1);
        int wrc = window_wait(&st, ctx, b);
        if (!err) err = wrc;
        if (err) continue; /* keep draining: every ticket must be waited for */
        const window *w = &st.w[b];
        window_views(&st, b, views);
        st_attn_seq a = {.pages = views, .n_pages = w->n_uni};
        if (chunk) {
            err = st_attn_chunk_fold(ctx, ws, g, &a, q, n_q, pos0_q, acc);
        } else {
            a.run_pages = st.pps; /* the whole list's runs, whatever the window's length */
            if (st.list) {
                a.sel = w->sub_sel;
                a.n_sel = w->sub_nsel;
                a.sel_stride = w->stride;
            }
            int32_t nr = 0;
            err = st_attn_decode_runs(ctx, ws, g, &a, q,
                                      acc + (size_t)w->c0 * g->n_head * ST_ATTN_PART_FLOATS(g->head_dim),
                                      &nr);
            ST_ASSERT(err || nr == w->c1 - w->c0);
        }
    }
    if (err && n_win > 1 && st.w[n_win & 1].ticket) window_wait(&st, ctx, n_win & 1);
    rc = err;
    if (!rc) rc = chunk ? st_attn_chunk_end(g, n_q, acc, out) : st_attn_merge_runs(g, acc, n_steps, out);
out:
    if (rc && sv->s && kv->spill) { /* a lost page already failed the sequence */ }
    streamer_free(&st);
    free(bounds);
    free(views);
    st_free_aligned(acc);
    return rc;
}
