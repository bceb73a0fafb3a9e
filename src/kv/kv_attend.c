/* Attention through the tiers: st_kv_attend_decode / st_kv_attend_chunk (the STREAM path
 * below lives in kv_stream.c).
 *
 * Three paths, chosen per call from what the needed pages (dense: all of a sequence's
 * pages; Quest: the union of the selected ones; selection itself never touches disk) are:
 *
 *   in RAM        views point into the hot pool; one st_attn_decode_batch / st_attn_chunk.
 *   fit in RAM    the layer's cold blocks are fetched in ONE coalesced batch of ranged reads
 *                 (st_spill_read_batch: layer l of consecutive slots is contiguous in the
 *                 part-major file) into frames freed by evicting blocks this call does not
 *                 need (the needed ones are held), then as above. Decode fetches only into
 *                 frames not used by an earlier layer of the same step (as many as there
 *                 are) and streams the rest: evicting those would read them again on the
 *                 next token. The step feeds each block's attention score (kv_tier_use).
 *   do not fit    STREAM: only this layer's block of each cold page is read (a ranged,
 *                 checksummed read of one part of the slot), a window at a time, into two
 *                 buffers: window w+1's reads are in flight on the I/O thread while window
 *                 w computes. Nothing is evicted and nothing moves into the hot pool.
 *
 * Exactness. Decode: windows are whole runs of st_attn_pages_per_run(P, n_list) list entries
 * (per KV head, for a selection), st_attn_decode_runs leaves each run's partial softmax
 * state exactly as the in-RAM kernel does, and st_attn_merge_runs merges them in run order
 * with the kernel's own formula, so the output is bit-identical to the all-in-RAM call.
 * Chunk: the online state of every (KV head, query tile) is kept across windows
 * (st_attn_chunk_fold), which folds the same blocks in the same order. A never-touched page
 * (KV_RES_ZERO) is read as a zero block, which is what its RAM copy would hold.
 *
 * Failure: a read that fails or does not match its checksum fails the page and every
 * sequence naming it (kv_page_fail); the call returns that error; no output is computed
 * from the buffer (it is zeroed by the store anyway). Tickets in flight are always waited
 * for before returning, so the store never writes into freed memory. */
#include "kv_int.h"

#include "strata/quest.h"

#include <stdlib.h>
#include <string.h>

static int geom_check(const st_kv *kv, st_ctx *ctx, const st_attn_geom *g, int layer) {
    if (!g) return st_seterr(ctx, ST_E_INVAL, "kv: attend: geometry is NULL");
    if (g->n_kv_head != kv->p.n_kv_head || g->head_dim != kv->p.head_dim ||
        g->page_size != kv->p.page_size || g->type != kv->p.type)
        return st_seterr(ctx, ST_E_INVAL, "kv: attend: geometry (%d kv heads, dim %d, P %d, %s) "
                         "is not the pool's (%d, %d, %d, %s)", g->n_kv_head, g->head_dim,
                         g->page_size, st_type_name(g->type), kv->p.n_kv_head, kv->p.head_dim,
                         kv->p.page_size, st_type_name(kv->p.type));
    if (layer < 0 || layer >= kv->p.n_layer)
        return st_seterr(ctx, ST_E_INVAL, "kv: attend: layer %d outside [0, %d)", layer,
                         kv->p.n_layer);
    return 0;
}

/* The view of entry i of s (a RAM page in place, a never-touched or cold one as the zero
 * block); *cold says whether it is on disk (its view is a placeholder until read). */
static void entry_view(const st_kv *kv, const kv_seq *s, int64_t i, int layer, int64_t lim,
                       st_attn_page *v, uint8_t *cold) {
    const kv_entry *e = &s->ent[i];
    const kv_page *pg = &kv->pages[e->page];
    const int ram = pg->resident != KV_RES_ERROR && kv_blk_ram(kv, e->page, layer);
    *cold = !ram && (pg->resident == KV_RES_ERROR || kv_blk(kv, e->page, layer)->res != KV_RES_ZERO);
    kv_block_view(kv, ram ? kv_layer_data(kv, e->page, layer) : kv->zero_blk, e, i, lim, v);
}

/* sv's arrays for n views and, with n_sel > 0, the n_sel entries of the per-head lists. */
static int alloc_views(st_ctx *ctx, seq_views *sv, size_t n, size_t n_sel) {
    if (!n) n = 1;
    sv->v = malloc(n * sizeof *sv->v);
    sv->page = malloc(n * sizeof *sv->page);
    sv->cold = malloc(n);
    if (n_sel) sv->sel_idx = malloc(n_sel * sizeof *sv->sel_idx);
    if (!sv->v || !sv->page || !sv->cold || (n_sel && !sv->sel_idx))
        return st_seterr(ctx, ST_E_NOMEM, "kv: attend: out of memory for %zu views", n);
    return 0;
}

/* With a selection only the selected pages get a view: at long contexts Quest reads a few
 * percent of the pages, and a pass over the page table per layer and step was serial work
 * the size of the context. The views are the union of the heads' ascending lists (a
 * merge), reached through the entries the selection recorded; each recorded entry must
 * still hold the page it held, and the table its length, else the selection is stale. */
static int gather_selected(st_kv *kv, st_ctx *ctx, kv_seq *s, int layer, seq_views *sv) {
    const int32_t H = kv->p.n_kv_head, nv = st_kv_select_n_views(sv->sel);
    const int32_t *ent, *phys;
    int64_t n_ent;
    kv_select_views(sv->sel, &ent, &phys, &n_ent);
    if (st_kv_select_n_kv_head(sv->sel) != H || n_ent != s->n_ent)
        return st_seterr(ctx, ST_E_INVAL, "kv: attend: selection made for %lld entries / %d "
                         "heads, sequence %lld has %lld / %d", (long long)n_ent,
                         st_kv_select_n_kv_head(sv->sel), (long long)s->id, (long long)s->n_ent, H);
    sv->s = s;
    sv->n = 0;
    const int32_t **list = malloc((size_t)H * sizeof *list);
    int32_t *at = calloc((size_t)H, sizeof *at);
    sv->sel_n = malloc((size_t)H * sizeof *sv->sel_n);
    if (!list || !at || !sv->sel_n) {
        free(list);
        free(at);
        return st_seterr(ctx, ST_E_NOMEM, "kv: attend: out of memory");
    }
    int32_t stride = 1;
    int64_t total = 0;
    for (int32_t h = 0; h < H; h++) {
        st_kv_select_head(sv->sel, h, &list[h], &sv->sel_n[h]);
        if (sv->sel_n[h] > stride) stride = sv->sel_n[h];
        total += sv->sel_n[h];
    }
    const int64_t n_uni = total < nv ? total : nv; /* ascending lists: at most nv views */
    int rc = alloc_views(ctx, sv, (size_t)n_uni, (size_t)H * (size_t)stride);
    sv->sel_stride = stride;
    for (int32_t c = 0; !rc; c++) {
        int32_t v = INT32_MAX;
        for (int32_t h = 0; h < H; h++)
            if (at[h] < sv->sel_n[h] && list[h][at[h]] < v) v = list[h][at[h]];
        if (v == INT32_MAX) break;
        if (v < 0 || v >= nv || c >= n_uni || ent[v] < 0 || ent[v] >= s->n_ent ||
            s->ent[ent[v]].page != phys[v]) {
            rc = st_seterr(ctx, ST_E_INVAL, "kv: attend: bad or stale selection (view %d of "
                           "%d) for sequence %lld", v, nv, (long long)s->id);
            break;
        }
        for (int32_t h = 0; h < H; h++)
            if (at[h] < sv->sel_n[h] && list[h][at[h]] == v)
                sv->sel_idx[(size_t)h * stride + at[h]++] = c;
        sv->page[c] = phys[v];
        entry_view(kv, s, ent[v], layer, 0, &sv->v[c], &sv->cold[c]);
        sv->n = c + 1;
    }
    free(list);
    free(at);
    return rc;
}

/* The views of s at `layer` (sv->sel already set): RAM pages in place, never-touched ones as
 * the zero block, cold ones marked (their view is the zero block, replaced by a buffer when
 * read). */
static int gather(st_kv *kv, st_ctx *ctx, kv_seq *s, int layer, seq_views *sv) {
    if (sv->sel) return gather_selected(kv, ctx, s, layer, sv);
    if (s->n_ent > INT32_MAX)
        return st_seterr(ctx, ST_E_LIMIT, "kv: attend: %lld pages", (long long)s->n_ent);
    sv->s = s;
    int rc = alloc_views(ctx, sv, (size_t)s->n_ent, 0); /* holes leave some unused */
    if (rc) return rc;
    int32_t c = 0;
    const int64_t n_ent = sv->lim > 0 ? (sv->lim + kv->p.page_size - 1) / kv->p.page_size : s->n_ent;
    for (int64_t i = 0; i < n_ent; i++) {
        if (s->ent[i].page < 0) continue;
        sv->page[c] = s->ent[i].page;
        entry_view(kv, s, i, layer, sv->lim, &sv->v[c], &sv->cold[c]);
        c++;
    }
    sv->n = c;
    return 0;
}

static void refresh(st_kv *kv, seq_views *sv, int layer) {
    for (int32_t j = 0; j < sv->n; j++) {
        const kv_page *pg = &kv->pages[sv->page[j]];
        if (sv->cold[j] && pg->resident == KV_RES_BLOCKS && kv_blk_ram(kv, sv->page[j], layer))
            entry_view(kv, sv->s, sv->v[j].pos0 / kv->p.page_size, layer, sv->lim, &sv->v[j], &sv->cold[j]);
    }
}

/* ---- fetch ------------------------------------------------------------------------------------ */

/* Fetches layer `layer` of pages[n] (cold blocks, held by the caller) into frames in one
 * coalesced batch of ranged reads. Returns 0 or the first error (failed pages are marked). */
static int fetch_batch(st_kv *kv, int layer, int protect, const int32_t *pages, int32_t n) {
    if (!n) return 0;
    st_spill_rd *rd = malloc((size_t)n * sizeof *rd);
    int32_t *frames = malloc((size_t)n * sizeof *frames);
    if (!rd || !frames) {
        free(rd);
        free(frames);
        return st_seterr(kv->ctx, ST_E_NOMEM, "kv: attend: out of memory");
    }
    int rc = 0;
    int32_t got = 0;
    for (; got < n; got++) {
        /* kv_fetch_blk would read one block at a time: here the frames come first, then one
         * coalesced batch (layer l of consecutive slots is contiguous in the file). */
        int32_t id = pages[got];
        if ((rc = kv_fetch_frame(kv, id, layer, protect, &frames[got])) != 0) break;
        if (kv->pages[id].resident != KV_RES_BLOCKS) { /* an eviction failed its page */
            kv->frame_free[kv->n_frame_free++] = frames[got];
            rc = st_seterr(kv->ctx, kv->pages[id].err, "kv: attend: page %d was lost: %s", id,
                           st_strerror(kv->pages[id].err));
            break;
        }
    }
    for (int32_t i = 0; i < got; i++) {
        const kv_page *pg = &kv->pages[pages[i]];
        rd[i] = (st_spill_rd){.slot = pg->slot, .key = (uint64_t)pages[i], .gen = pg->gen,
                              .buf = kv_frame_data(kv, frames[i]), .len = kv->g.layer_bytes,
                              .part_first = (uint32_t)layer, .part_count = 1};
    }
    int rrc = got ? st_spill_read_batch(kv->spill, rd, got, kv->ctx) : 0;
    kv->st.fetch_stalls += got > 0;
    for (int32_t i = 0; i < got; i++) kv_fetch_done(kv, pages[i], layer, frames[i], rd[i].rc);
    free(frames);
    free(rd);
    return rc ? rc : rrc;
}

/* ---- entry points ------------------------------------------------------------------------------ */

/* Each view's share of the KV heads that selected it (1 for dense attention): what the
 * block's attention score gains this step. w[n] */
static void view_weights(const st_kv *kv, const seq_views *sv, float *w) {
    if (!sv->sel) {
        for (int32_t j = 0; j < sv->n; j++) w[j] = 1.0f;
        return;
    }
    for (int32_t j = 0; j < sv->n; j++) w[j] = 0.0f;
    const float inc = 1.0f / (float)kv->p.n_kv_head;
    for (int32_t h = 0; h < kv->p.n_kv_head; h++)
        for (int32_t i = 0; i < sv->sel_n[h]; i++) w[sv->sel_idx[(size_t)h * sv->sel_stride + i]] += inc;
}

/* The batch's blocks of `layer`, cold ones fetched when they fit (decode: as many as there
 * are frames not used by this step, kv_frames_spare); *stream = 1 when some stay cold.
 * Decode marks the needed blocks used and feeds their attention scores. */
static int prepare(st_kv *kv, st_ctx *ctx, int layer, seq_views *sv, int n_seq, int decode,
                   int *stream) {
    *stream = 0;
    if (decode) kv_tier_step(kv, layer);
    /* Without the SSD tier every page is in RAM and none can fail (a failure is an I/O
     * one), and the decode-use stamps only steer which frames the tier fetches into: the
     * pass below would change nothing, at a cost per page per layer. */
    if (!kv->spill && !kv->st.tier_errors) return 0;
    int64_t n_tot = 0;
    for (int i = 0; i < n_seq; i++) n_tot += sv[i].n;
    int32_t *cold = malloc((size_t)(n_tot ? n_tot : 1) * sizeof *cold), n_cold = 0;
    int32_t *held = malloc((size_t)(n_tot ? n_tot : 1) * sizeof *held), n_held = 0;
    float *wt = malloc((size_t)(n_tot ? n_tot : 1) * sizeof *wt), *hw = NULL;
    if (wt) hw = malloc((size_t)(n_tot ? n_tot : 1) * sizeof *hw);
    int rc = cold && held && wt && hw ? 0 : st_seterr(ctx, ST_E_NOMEM, "kv: attend: out of memory");
    for (int i = 0; i < n_seq && !rc; i++) {
        if (kv->spill && decode) view_weights(kv, &sv[i], wt);
        for (int32_t j = 0; j < sv[i].n && !rc; j++) {
            const int32_t id = sv[i].page[j];
            kv_page *pg = &kv->pages[id];
            if (pg->resident == KV_RES_ERROR) {
                kv_seq_fail(kv, sv[i].s, pg->err);
                rc = st_seterr(ctx, pg->err, "kv: attend: page %d of seq %lld was lost: %s",
                               id, (long long)sv[i].s->id, st_strerror(pg->err));
                continue;
            }
            if (!kv->spill) continue;
            kv_block *k = kv_blk(kv, id, layer);
            if (k->hold) continue; /* dedupe across forks sharing pages */
            if (k->res == KV_RES_DISK) cold[n_cold++] = id;
            else if (k->res != KV_RES_RAM) continue;
            k->hold++;
            hw[n_held] = decode ? wt[j] : 0.0f;
            held[n_held++] = id;
        }
    }
    if (!rc && n_cold) {
        /* Decode: blocks this step used (earlier layers of this token) are not evicted for
         * this layer's: the next token needs them again. Whatever does not fit streams. */
        int64_t room = decode ? kv_frames_spare(kv, n_cold) : kv_frames_obtainable(kv, n_cold);
        int32_t k = n_cold <= room ? n_cold : decode ? (int32_t)room : 0;
        rc = fetch_batch(kv, layer, decode, cold, k);
        /* a page lost making room (a failed re-read) may have held a view's block: its
         * sequences failed, and the call does not compute from it */
        for (int i = 0; i < n_seq && !rc; i++)
            if (sv[i].s->err)
                rc = st_seterr(ctx, sv[i].s->err, "kv: attend: sequence %lld failed while its "
                               "blocks were fetched: %s", (long long)sv[i].s->id,
                               st_strerror(sv[i].s->err));
        for (int i = 0; i < n_seq && !rc && k; i++) refresh(kv, &sv[i], layer);
        *stream = k < n_cold;
    }
    for (int32_t i = 0; i < n_held && !rc && decode; i++)
        if (kv->pages[held[i]].resident == KV_RES_BLOCKS) kv_tier_use(kv, held[i], layer, hw[i]);
    if (kv->spill && decode && !rc) { /* what the next step's prefetch of this layer reads */
        if (n_held > kv->last_cap[layer]) {
            int32_t *nb = realloc(kv->last_sel[layer], (size_t)n_held * sizeof *nb);
            if (nb) kv->last_sel[layer] = nb, kv->last_cap[layer] = n_held;
        }
        kv->last_n[layer] = n_held <= kv->last_cap[layer] ? n_held : 0;
        if (kv->last_n[layer]) memcpy(kv->last_sel[layer], held, (size_t)n_held * sizeof *held);
    }
    for (int32_t i = 0; i < n_held; i++) kv_blk(kv, held[i], layer)->hold--;
    free(cold);
    free(held);
    free(wt);
    free(hw);
    return rc;
}

static int begin(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, int layer,
                 const st_kv_seq_id *seqs, const int64_t *lens, int n_seq,
                 const st_kv_select *const *sel, seq_views *sv) {
    int rc = geom_check(kv, ctx, g, layer);
    if (rc) return rc;
    if (!ws) return st_seterr(ctx, ST_E_INVAL, "kv: attend: workspace is NULL");
    for (int i = 0; i < n_seq; i++) {
        kv_seq *s;
        if ((rc = kv_seq_get_ok(kv, seqs[i], &s)) != 0) return rc;
        sv[i].sel = sel && sel[i] && !st_kv_select_dense(sel[i]) ? sel[i] : NULL;
        sv[i].lim = lens && lens[i] > 0 ? lens[i] : 0;
        if (sv[i].lim && (sv[i].sel || sv[i].lim > s->len))
            return st_seterr(ctx, ST_E_INVAL, "kv: attend: a length limit of %lld for sequence %lld "
                             "(length %lld)%s", (long long)sv[i].lim, (long long)s->id,
                             (long long)s->len, sv[i].sel ? " with a sparse selection" : "");
        if ((rc = gather(kv, ctx, s, layer, &sv[i])) != 0) return rc;
        if (!sv[i].lim && sel && sel[i] && st_kv_select_dense(sel[i]) && st_kv_select_n_views(sel[i]) != sv[i].n)
            return st_seterr(ctx, ST_E_INVAL, "kv: attend: selection for %d views, seq has %d",
                             st_kv_select_n_views(sel[i]), sv[i].n);
    }
    return 0;
}

static void end(seq_views *sv, int n_seq) {
    for (int i = 0; i < n_seq; i++) {
        free(sv[i].v);
        free(sv[i].page);
        free(sv[i].cold);
        free(sv[i].sel_idx);
        free(sv[i].sel_n);
    }
    free(sv);
}

/* Views with the selection applied, for the in-RAM kernels. */
static void as_attn_seq(const seq_views *sv, st_attn_seq *a) {
    memset(a, 0, sizeof *a);
    a->pages = sv->v;
    a->n_pages = sv->n;
    if (sv->sel) {
        a->sel = sv->sel_idx;
        a->n_sel = sv->sel_n;
        a->sel_stride = sv->sel_stride;
    }
}

/* ---- prefetch ------------------------------------------------------------------------------------ */

/* Read-ahead of the next layer's blocks while this layer's attention computes: the blocks
 * layer + 1 used on the previous step (its selection then is the best guess of its
 * selection now) that are on disk, into frames no block of this step holds (so no view of
 * this call moves, and by no eviction that could lose a page), through the store's
 * asynchronous reads. Begun after prepare and ended
 * before the call returns, so no state survives the call: the blocks stay DISK and held
 * meanwhile, and end attaches them or, on a failed read, fails their page. */
typedef struct prefetch {
    st_spill_rd *rd;
    int32_t *page, *frame, n;
    int layer;
    st_spill_ticket *ticket;
} prefetch;

static void prefetch_begin(st_kv *kv, int layer, prefetch *pf) {
    memset(pf, 0, sizeof *pf);
    const int nl = layer + 1;
    if (!kv->spill || !kv->p.prefetch || nl >= kv->p.n_layer || !kv->last_n[nl]) return;
    /* Worth it only while the next layer keeps selecting what it did (a trained model's
     * attention; a random one's changes every step): below half of the read-ahead blocks
     * used, it runs one step in 16 only, to notice when that changes. The counts halve as
     * they grow, so they follow the recent steps. */
    if (kv->ahead_read > 64 && 2 * kv->ahead_used < kv->ahead_read && kv->att_step % 16) return;
    if (kv->ahead_read > 4096) kv->ahead_read /= 2, kv->ahead_used /= 2;
    const int32_t n = kv->last_n[nl];
    int32_t n_cold = 0;
    for (int32_t i = 0; i < n; i++) {
        const int32_t id = kv->last_sel[nl][i];
        n_cold += kv->pages[id].resident == KV_RES_BLOCKS && kv_blk(kv, id, nl)->res == KV_RES_DISK;
    }
    if (!n_cold) return;
    int64_t room = kv_frames_spare(kv, n_cold);
    if (room <= 0) return;
    pf->rd = malloc((size_t)n_cold * sizeof *pf->rd);
    pf->page = malloc((size_t)n_cold * sizeof *pf->page);
    pf->frame = malloc((size_t)n_cold * sizeof *pf->frame);
    if (!pf->rd || !pf->page || !pf->frame) goto none;
    pf->layer = nl;
    for (int32_t i = 0; i < n && pf->n < room; i++) {
        const int32_t id = kv->last_sel[nl][i];
        kv_block *k = kv_blk(kv, id, nl);
        if (kv->pages[id].resident != KV_RES_BLOCKS || k->res != KV_RES_DISK || k->hold) continue;
        k->hold++;
        int32_t fr;
        /* no eviction that re-reads a page: a failed re-read would fail that page and take
         * a block this call's views point into with it */
        if (kv_fetch_frame(kv, id, nl, KV_EVICT_PROTECT | KV_EVICT_CLEAN, &fr) != 0) {
            k->hold--;
            break; /* no clean frame: read less */
        }
        pf->page[pf->n] = id;
        pf->frame[pf->n++] = fr;
    }
    for (int32_t i = 0; i < pf->n; i++) {
        const kv_page *pg = &kv->pages[pf->page[i]];
        pf->rd[i] = (st_spill_rd){.slot = pg->slot, .key = (uint64_t)pf->page[i], .gen = pg->gen,
                                  .buf = kv_frame_data(kv, pf->frame[i]), .len = kv->g.layer_bytes,
                                  .part_first = (uint32_t)nl, .part_count = 1};
    }
    if (pf->n && st_spill_read_submit(kv->spill, pf->rd, pf->n, &pf->ticket) != 0) {
        for (int32_t i = 0; i < pf->n; i++) {
            kv_blk(kv, pf->page[i], nl)->hold--;
            kv->frame_free[kv->n_frame_free++] = pf->frame[i];
        }
        pf->n = 0;
    }
    if (pf->n) return;
none:
    free(pf->rd);
    free(pf->page);
    free(pf->frame);
    memset(pf, 0, sizeof *pf);
}

/* Waits for the read-ahead and attaches its blocks (a failed read fails its page, as a
 * fetch would; the call's own result is not affected). */
static void prefetch_end(st_kv *kv, prefetch *pf) {
    if (!pf->n) return;
    st_spill_read_wait(kv->spill, pf->ticket, NULL);
    for (int32_t i = 0; i < pf->n; i++) {
        kv_blk(kv, pf->page[i], pf->layer)->hold--;
        kv_fetch_done(kv, pf->page[i], pf->layer, pf->frame[i], pf->rd[i].rc);
        if (pf->rd[i].rc || kv->pages[pf->page[i]].resident != KV_RES_BLOCKS) continue;
        kv->st.tier_prefetches++;
        kv->ahead_read++;
        kv_blk(kv, pf->page[i], pf->layer)->ahead = 1;
    }
    free(pf->rd);
    free(pf->page);
    free(pf->frame);
    memset(pf, 0, sizeof *pf);
}

int st_kv_attend_decode(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                        int layer, const st_kv_seq_id *seqs, int n_seq,
                        const st_kv_select *const *sel, const float *q, float *out) {
    return st_kv_attend_decode_at(kv, ctx, ws, g, layer, seqs, NULL, n_seq, sel, q, out);
}

int st_kv_attend_decode_at(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                           int layer, const st_kv_seq_id *seqs, const int64_t *lens, int n_seq,
                           const st_kv_select *const *sel, const float *q, float *out) {
    KV_CHECK_ON_RETURN(kv);
    if (!kv) return ST_E_INVAL;
    if (n_seq < 0 || (n_seq > 0 && (!seqs || !q || !out)))
        return st_seterr(ctx, ST_E_INVAL, "kv: attend_decode: NULL argument or n_seq %d", n_seq);
    if (n_seq == 0) return geom_check(kv, ctx, g, layer);
    seq_views *sv = calloc((size_t)n_seq, sizeof *sv);
    st_attn_seq *as = calloc((size_t)n_seq, sizeof *as);
    int rc = sv && as ? 0 : st_seterr(ctx, ST_E_NOMEM, "kv: attend: out of memory");
    int stream = 0;
    if (!rc) rc = begin(kv, ctx, ws, g, layer, seqs, lens, n_seq, sel, sv);
    if (!rc) rc = prepare(kv, ctx, layer, sv, n_seq, 1, &stream);
    prefetch pf = {0};
    if (!rc) prefetch_begin(kv, layer, &pf);
    const size_t row = (size_t)g->n_head * (size_t)g->head_dim;
    if (!rc && !stream) {
        for (int i = 0; i < n_seq; i++) as_attn_seq(&sv[i], &as[i]);
        rc = st_attn_decode_batch(ctx, ws, g, as, n_seq, q, out);
    } else if (!rc) {
        /* One sequence at a time: st_attn_decode_batch's output for a sequence equals
         * st_attn_decode of it alone, so this changes no bit. */
        for (int i = 0; i < n_seq && !rc; i++) {
            int any_cold = 0;
            for (int32_t j = 0; j < sv[i].n; j++) any_cold |= sv[i].cold[j];
            if (!any_cold) {
                as_attn_seq(&sv[i], &as[i]);
                rc = st_attn_decode(ctx, ws, g, &as[i], q + i * row, out + i * row);
            } else {
                rc = kv_stream_one(kv, ctx, ws, g, layer, &sv[i], 0, q + i * row, 1, 0, out + i * row);
            }
        }
    }
    prefetch_end(kv, &pf);
    if (sv) end(sv, n_seq);
    free(as);
    return rc;
}

int st_kv_attend_chunk(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g,
                       int layer, st_kv_seq_id seq, const float *q, int32_t n_q,
                       int64_t pos0_q, float *out) {
    KV_CHECK_ON_RETURN(kv);
    if (!kv) return ST_E_INVAL;
    if (n_q < 0 || (n_q > 0 && (!q || !out)))
        return st_seterr(ctx, ST_E_INVAL, "kv: attend_chunk: NULL argument or n_q %d", n_q);
    seq_views *sv = calloc(1, sizeof *sv);
    int rc = sv ? 0 : st_seterr(ctx, ST_E_NOMEM, "kv: attend: out of memory");
    int stream = 0;
    if (!rc) rc = begin(kv, ctx, ws, g, layer, &seq, NULL, 1, NULL, sv);
    if (!rc && n_q == 0) {
        end(sv, 1);
        return 0;
    }
    if (!rc) rc = prepare(kv, ctx, layer, sv, 1, 0, &stream);
    if (!rc && !stream) {
        st_attn_seq a;
        as_attn_seq(sv, &a);
        rc = st_attn_chunk(ctx, ws, g, &a, q, n_q, pos0_q, out);
    } else if (!rc) {
        rc = kv_stream_one(kv, ctx, ws, g, layer, sv, 1, q, n_q, pos0_q, out);
    }
    if (sv) end(sv, 1);
    return rc;
}
