/* The SSD tier of the page pool: residency by (page, layer) block. Frames of the hot pool
 * (one layer block each), the hot LRU of blocks, the attention ledger that ranks them for
 * eviction, eviction (a dirty block writes its page's slab behind), fetch on miss, cold
 * layer-block reads, failure propagation, and the tier counters. The state machine and its
 * invariants are in the essay at the top of kv_pool.c (residency half); the spill store's
 * own (slot) states are in src/tier/spill.c. The tier's public queries and its invariant
 * check are in kv_tier_check.c.
 *
 * Without a spill directory kv->spill and kv->blk are NULL and every function here reduces
 * to "a page has the frame of its own id", which is exactly the pool before the tier
 * existed. */
#include "kv_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hot LRU and frames ------------------------------------------------------------------ */

static int32_t blk_id(const st_kv *kv, int32_t page, int layer) {
    return page * kv->p.n_layer + layer;
}

static void res_push(st_kv *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    k->rnext = -1;
    k->rprev = kv->res_tail;
    if (kv->res_tail >= 0) kv->blk[kv->res_tail].rnext = b;
    else kv->res_head = b;
    kv->res_tail = b;
}

static void res_remove(st_kv *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    if (k->rprev >= 0) kv->blk[k->rprev].rnext = k->rnext;
    else kv->res_head = k->rnext;
    if (k->rnext >= 0) kv->blk[k->rnext].rprev = k->rprev;
    else kv->res_tail = k->rprev;
    k->rprev = k->rnext = -1;
}

static void blk_to_tail(st_kv *kv, int32_t b) {
    if (kv->blk[b].res != KV_RES_RAM || kv->res_tail == b) return;
    res_remove(kv, b);
    res_push(kv, b);
}

void kv_touch(st_kv *kv, int32_t id, int layer) {
    kv->pages[id].last_use = ++kv->tick;
    if (kv->spill) blk_to_tail(kv, blk_id(kv, id, layer));
}

/* Block b gives its frame back (RAM -> no frame); the caller sets the new residency. */
static void frame_release(st_kv *kv, int32_t b) {
    kv_block *k = &kv->blk[b];
    ST_ASSERT(k->res == KV_RES_RAM && k->frame >= 0);
    res_remove(kv, b);
    kv->frame_free[kv->n_frame_free++] = k->frame;
    k->frame = -1;
    k->dirty = 0;
    k->ahead = 0;
    kv->n_hot--;
}

/* Gives block b a frame (popped by the caller) and makes it RAM. */
static void frame_attach(st_kv *kv, int32_t b, int32_t frame, int dirty) {
    kv_block *k = &kv->blk[b];
    k->frame = frame;
    k->res = KV_RES_RAM;
    k->dirty = (uint8_t)dirty;
    res_push(kv, b);
    kv->n_hot++;
}

static int blk_can_evict(const st_kv *kv, int32_t b, int mode, uint32_t step);

static int blk_evictable(const st_kv *kv, int32_t b) {
    const kv_page *pg = &kv->pages[b / kv->p.n_layer];
    return !pg->pins && !pg->hold && !kv->blk[b].hold;
}

int kv_hot_full(st_kv *kv, int64_t need, const char *what) {
    int64_t pinned = 0, held = 0;
    for (int32_t b = kv->res_head; b >= 0; b = kv->blk[b].rnext) {
        const kv_page *pg = &kv->pages[b / kv->p.n_layer];
        pinned += pg->pins > 0;
        held += !pg->pins && (pg->hold || kv->blk[b].hold);
    }
    return st_seterr(kv->ctx, ST_E_POOL_FULL,
                     "kv: %s needs %lld RAM block(s) but only %lld of the hot pool's %d are "
                     "obtainable (%d free); %lld pinned, %lld held by this operation",
                     what, (long long)need, (long long)kv_frames_obtainable(kv, INT64_MAX),
                     kv->n_frames, kv->n_frame_free, (long long)pinned, (long long)held);
}

int64_t kv_frames_obtainable(const st_kv *kv, int64_t cap) {
    if (!kv->spill) return kv->n_free + kv->n_cached; /* a frame per page: pages limit */
    int64_t n = kv->n_frame_free;
    for (int32_t b = kv->res_head; b >= 0 && n < cap; b = kv->blk[b].rnext)
        n += blk_can_evict(kv, b, 0, 0);
    return n;
}

/* Decode steps are counted so that a layer's fetches never evict a block an earlier layer
 * of the same token used (it would be read again at once, on the next token); blocks of
 * earlier steps are ranked by their attention score (kv_blk_score). */
void kv_tier_step(st_kv *kv, int layer) {
    if (layer <= kv->att_layer || !kv->att_step) {
        kv->att_step++;
        if (!(uint32_t)kv->att_step) kv->att_step++; /* 0 means "never" in the blocks */
    }
    kv->att_layer = layer;
}

/* Per decode step the score keeps KV_SCORE_DECAY of itself: a block no head selected for
 * ~7 steps counts half, so eviction follows what attention reads now, not at the start. */
#define KV_SCORE_DECAY 0.9f

float kv_blk_score(const st_kv *kv, const kv_block *k) {
    if (k->score == 0.0f) return 0.0f;
    uint32_t age = (uint32_t)kv->att_step - k->score_step;
    if (age > 200) return 0.0f;
    float s = k->score;
    for (uint32_t i = 0; i < age; i++) s *= KV_SCORE_DECAY;
    return s;
}

void kv_tier_use(st_kv *kv, int32_t id, int layer, float w) {
    if (!kv->spill) return;
    const int32_t b = blk_id(kv, id, layer);
    kv_block *k = &kv->blk[b];
    const uint32_t step = (uint32_t)kv->att_step;
    if (k->ahead) k->ahead = 0, kv->ahead_used++;
    if (k->att_step != step || k->score_step != step) {
        k->score = kv_blk_score(kv, k) + w;
        k->score_step = step;
    }
    k->att_step = step;
    blk_to_tail(kv, b);
}

int64_t kv_frames_spare(const st_kv *kv, int64_t cap) {
    if (!kv->spill) return kv_frames_obtainable(kv, cap);
    int64_t n = kv->n_frame_free;
    const uint32_t step = (uint32_t)kv->att_step;
    for (int32_t b = kv->res_head; b >= 0 && n < cap; b = kv->blk[b].rnext)
        n += blk_can_evict(kv, b, KV_EVICT_PROTECT, step);
    return n;
}

/* ---- open / close ------------------------------------------------------------------------- */

int kv_tier_open(st_kv *kv) {
    if (!kv->p.spill_dir) return 0;
    const size_t nb = (size_t)kv->n_pages * (size_t)kv->p.n_layer;
    kv->blk = malloc(nb * sizeof *kv->blk);
    kv->frame_free = malloc((size_t)kv->n_frames * sizeof *kv->frame_free);
    kv->zero_blk = st_alloc_aligned(kv->g.layer_bytes, ST_KV_LAYER_ALIGN);
    kv->rd_blk = st_alloc_aligned(kv->g.layer_bytes, ST_KV_LAYER_ALIGN);
    kv->pg_buf = st_alloc_aligned(kv->g.page_bytes, ST_KV_LAYER_ALIGN);
    kv->last_sel = calloc((size_t)kv->p.n_layer, sizeof *kv->last_sel);
    kv->last_n = calloc((size_t)kv->p.n_layer, sizeof *kv->last_n);
    kv->last_cap = calloc((size_t)kv->p.n_layer, sizeof *kv->last_cap);
    if (!kv->blk || !kv->frame_free || !kv->zero_blk || !kv->rd_blk || !kv->pg_buf ||
        !kv->last_sel || !kv->last_n || !kv->last_cap)
        return st_seterr(kv->ctx, ST_E_NOMEM, "kv: out of memory for the tier");
    for (size_t i = 0; i < nb; i++)
        kv->blk[i] = (kv_block){.frame = -1, .rprev = -1, .rnext = -1, .res = KV_RES_NONE};
    memset(kv->zero_blk, 0, kv->g.layer_bytes);
    for (int32_t i = 0; i < kv->n_frames; i++) kv->frame_free[i] = kv->n_frames - 1 - i;
    kv->n_frame_free = kv->n_frames;
    int rc = st_spill_dir_open(kv->p.spill_dir, kv->p.instance_id, kv->ctx, &kv->spill_dir);
    if (rc) return rc;
    st_spill_params sp = st_spill_default_params(kv->g.page_bytes);
    sp.disk_budget = kv->p.disk_budget;
    sp.cold = kv->p.cold;
    sp.no_direct = kv->p.spill_no_direct;
    sp.open_fn = kv->p.spill_open;
    sp.open_arg = kv->p.spill_open_arg;
    sp.n_parts = (uint32_t)kv->p.n_layer; /* a layer block is readable alone */
    sp.uring_entries = 256;
    /* Streaming a layer reads the same part of consecutive slots, adjacent in the file
     * (part-major extents): 2 MiB windows go out as two 1 MiB reads in flight together. */
    sp.max_read_bytes = (size_t)1 << 20;
    return st_spill_open(kv->spill_dir, &sp, kv->ctx, &kv->spill);
}

void kv_tier_close(st_kv *kv) {
    st_spill_close(kv->spill);
    st_spill_dir_close(kv->spill_dir);
    kv->spill = NULL;
    kv->spill_dir = NULL;
    free(kv->blk);
    kv->blk = NULL;
    for (int l = 0; kv->last_sel && l < kv->p.n_layer; l++) free(kv->last_sel[l]);
    free(kv->last_sel);
    free(kv->last_n);
    free(kv->last_cap);
    kv->last_sel = NULL;
    free(kv->frame_free);
    st_free_aligned(kv->zero_blk);
    st_free_aligned(kv->rd_blk);
    st_free_aligned(kv->pg_buf);
}

/* ---- page lifecycle hooks ------------------------------------------------------------------ */

void kv_tier_new_page(st_kv *kv, int32_t id, int zero) {
    kv_page *pg = &kv->pages[id];
    pg->slot = ST_SLOT_NONE;
    pg->err = 0;
    ST_ASSERT(pg->hold == 0 && pg->frame < 0);
    if (!kv->spill) {
        pg->frame = id;
        pg->resident = KV_RES_RAM;
        if (zero) memset(kv->data + (size_t)id * kv->g.page_bytes, 0, kv->g.page_bytes);
        return;
    }
    ST_ASSERT(zero); /* frames move between blocks here: a free page has no contents */
    pg->resident = KV_RES_BLOCKS;
    /* Blocks take frames when first touched: a page most layers never select costs none. */
    for (int l = 0; l < kv->p.n_layer; l++) {
        kv_block *k = kv_blk(kv, id, l);
        ST_ASSERT(k->res == KV_RES_NONE && k->hold == 0);
        *k = (kv_block){.frame = -1, .rprev = -1, .rnext = -1, .res = KV_RES_ZERO};
    }
}

uint8_t *kv_free_frame(const st_kv *kv, int32_t id) {
    ST_ASSERT(kv->pages[id].state == KV_PAGE_FREE);
    return kv->spill ? NULL : kv->data + (size_t)id * kv->g.page_bytes;
}

static void slot_drop(st_kv *kv, kv_page *pg) {
    if (pg->slot == ST_SLOT_NONE) return;
    int rc = st_spill_release(kv->spill, pg->slot, 0);
    ST_ASSERT(rc == 0); /* our own live slot, and no read in flight between operations */
    pg->slot = ST_SLOT_NONE;
}

/* Every block of page id gives up its storage and goes to `res`. */
static void blocks_clear(st_kv *kv, int32_t id, uint8_t res) {
    for (int l = 0; l < kv->p.n_layer; l++) {
        const int32_t b = blk_id(kv, id, l);
        kv_block *k = &kv->blk[b]; /* a hold, if any, is its holder's to drop */
        if (k->res == KV_RES_RAM) frame_release(kv, b);
        if (k->res == KV_RES_DISK) kv->n_cold--;
        k->res = res;
        k->dirty = 0;
        k->att_step = 0;
        k->score = 0.0f;
    }
}

void kv_tier_forget(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->hold == 0);
    if (!kv->spill) {
        pg->frame = -1;
        pg->resident = KV_RES_NONE;
        return;
    }
    if (pg->resident == KV_RES_BLOCKS) blocks_clear(kv, id, KV_RES_NONE);
    slot_drop(kv, pg);
    pg->resident = KV_RES_NONE;
    pg->err = 0;
}

void kv_dirty(st_kv *kv, int32_t id, int layer) {
    if (!kv->spill) return;
    kv_block *k = kv_blk(kv, id, layer);
    ST_ASSERT(k->res == KV_RES_RAM);
    k->dirty = 1; /* the slot (if any) still holds the other blocks */
}

int kv_page_in_ram(const st_kv *kv, int32_t id) {
    if (!kv->spill) return kv->pages[id].resident == KV_RES_RAM;
    if (kv->pages[id].resident != KV_RES_BLOCKS) return 0;
    for (int l = 0; l < kv->p.n_layer; l++)
        if (kv_blk(kv, id, l)->res != KV_RES_RAM) return 0;
    return 1;
}

int kv_seq_fail(st_kv *kv, kv_seq *s, int rc) {
    if (!s->err) {
        s->err = rc;
        kv->st.seqs_failed++;
    }
    return rc;
}

void kv_page_fail(st_kv *kv, int32_t id, int rc) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state == KV_PAGE_USED);
    if (pg->resident == KV_RES_BLOCKS) blocks_clear(kv, id, KV_RES_NONE);
    slot_drop(kv, pg);
    pg->resident = KV_RES_ERROR;
    pg->err = rc;
    if (pg->registered) kv_index_remove(kv, id); /* nobody may attach lost data */
    kv->st.tier_errors++;
    if (rc == ST_E_CORRUPT) kv->st.tier_checksum_failures++;
    else kv->st.tier_io_errors++;
    for (int i = 0; i < kv->p.max_seqs; i++) {
        kv_seq *s = kv->seqs[i];
        if (!s) continue;
        for (int64_t j = 0; j < s->n_ent; j++)
            if (s->ent[j].page == id) {
                kv_seq_fail(kv, s, rc);
                break;
            }
    }
}

/* ---- eviction ------------------------------------------------------------------------------ */

static int page_any_held(const st_kv *kv, int32_t id) {
    if (kv->pages[id].hold) return 1;
    for (int l = 0; l < kv->p.n_layer; l++)
        if (kv_blk(kv, id, l)->hold) return 1;
    return 0;
}

static int page_has_disk(const st_kv *kv, int32_t id) {
    for (int l = 0; l < kv->p.n_layer; l++)
        if (kv_blk(kv, id, l)->res == KV_RES_DISK) return 1;
    return 0;
}

/* Block b may be evicted now (mode: KV_EVICT_PROTECT, KV_EVICT_CLEAN). A dirty block of a
 * page with blocks on disk rewrites the page reading those back, and a failed re-read fails
 * the page, all its blocks, held ones too: the operations that hold blocks check their
 * pages afterwards (a fetch, a COW, attention's prepare), and KV_EVICT_CLEAN (the
 * read-ahead, whose call's views point into unheld blocks) never evicts such a block. */
static int blk_can_evict(const st_kv *kv, int32_t b, int mode, uint32_t step) {
    if (!blk_evictable(kv, b) || ((mode & KV_EVICT_PROTECT) && kv->blk[b].att_step == step))
        return 0;
    const int32_t id = b / kv->p.n_layer;
    return !(mode & KV_EVICT_CLEAN) || !kv->blk[b].dirty || kv->pages[id].slot == ST_SLOT_NONE ||
           !page_has_disk(kv, id);
}

/* The page's slot copy goes (only for a page with no block on disk): its RAM blocks are
 * the only copy again. */
static void slot_unshare(st_kv *kv, int32_t id) {
    for (int l = 0; l < kv->p.n_layer; l++) {
        kv_block *k = kv_blk(kv, id, l);
        if (k->res == KV_RES_RAM) k->dirty = 1;
    }
    slot_drop(kv, &kv->pages[id]);
}

/* Disk full: frees one slot. Oldest unreferenced cached page first (dropped if some of it
 * is only on disk, else just its copy), then the copy of a resident page with no block on
 * disk. Never the page `keep` (the one being written). */
static int make_disk_room(st_kv *kv, int32_t keep) {
    for (int32_t id = kv->lru_head; id >= 0; id = kv->pages[id].next) {
        kv_page *pg = &kv->pages[id];
        if (pg->slot == ST_SLOT_NONE || id == keep || page_any_held(kv, id)) continue;
        if (page_has_disk(kv, id)) {
            kv_cache_drop(kv, id);
            kv->st.tier_drops++;
        } else {
            slot_unshare(kv, id);
        }
        return 0;
    }
    for (int32_t id = 0; id < kv->n_pages; id++) {
        const kv_page *pg = &kv->pages[id];
        if (pg->slot != ST_SLOT_NONE && id != keep && pg->resident == KV_RES_BLOCKS &&
            !page_has_disk(kv, id)) {
            slot_unshare(kv, id);
            return 0;
        }
    }
    return ST_E_NOSPACE;
}

/* Writes page id whole to a fresh slot: its RAM blocks, zeros for never-touched ones and,
 * read back from the old slot, the blocks only on disk (a dirty block of a partly spilled
 * page). Every RAM block is clean afterwards. The page is held by the caller. */
static int page_write(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    const int L = kv->p.n_layer;
    const size_t lb = kv->g.layer_bytes;
    st_spill_rd *rd = NULL;
    int n_rd = 0, rc = 0;
    for (int l = 0; l < L; l++) {
        const kv_block *k = kv_blk(kv, id, l);
        uint8_t *dst = kv->pg_buf + (size_t)l * lb;
        if (k->res == KV_RES_RAM) {
            memcpy(dst, kv_frame_data(kv, k->frame), lb);
        } else if (k->res == KV_RES_ZERO) {
            memset(dst, 0, lb);
        } else {
            if (!rd && !(rd = malloc((size_t)L * sizeof *rd)))
                return st_seterr(kv->ctx, ST_E_NOMEM, "kv: out of memory for a spill");
            rd[n_rd++] = (st_spill_rd){.slot = pg->slot, .key = (uint64_t)id, .gen = pg->gen,
                                       .buf = dst, .len = lb, .part_first = (uint32_t)l,
                                       .part_count = 1};
        }
    }
    if (n_rd) {
        kv->st.fetch_stalls++;
        rc = st_spill_read_batch(kv->spill, rd, n_rd, kv->ctx);
        free(rd);
        if (rc) {
            kv_page_fail(kv, id, rc);
            return st_seterr(kv->ctx, rc, "kv: re-reading page %d to spill it: %s", id,
                             st_strerror(rc));
        }
        kv->st.tier_bytes_read += (int64_t)n_rd * (int64_t)lb;
    }
    st_spill_page sp = {.data = kv->pg_buf, .len = kv->g.page_bytes, .type = kv->p.type,
                        .key = (uint64_t)id, .gen = ++kv->spill_gen};
    st_slot slot;
    /* the old slot (if any) stays until the new one is written: its blocks were read above */
    while ((rc = st_spill_write(kv->spill, &sp, 0, &slot, kv->ctx)) == ST_E_NOSPACE &&
           make_disk_room(kv, id) == 0) {
    }
    if (rc == ST_E_NOSPACE)
        return st_seterr(kv->ctx, rc, "kv: the spill area is full (%lld live blocks on disk, "
                         "budget %llu bytes) and a block of page %d must leave RAM",
                         (long long)kv->n_cold, (unsigned long long)kv->p.disk_budget, id);
    if (rc) return rc;
    slot_drop(kv, pg);
    pg->slot = slot;
    pg->gen = sp.gen;
    for (int l = 0; l < L; l++) kv_blk(kv, id, l)->dirty = 0;
    kv->st.tier_writes++;
    kv->st.tier_bytes_written += (int64_t)kv->g.page_bytes;
    return 0;
}

/* RAM -> DISK for block b: a clean block just lets its frame go; a dirty one has its page
 * written behind first (which cleans the page's other RAM blocks too). */
static int spill_block(st_kv *kv, int32_t b) {
    const int32_t id = b / kv->p.n_layer;
    kv_block *k = &kv->blk[b];
    if (k->dirty) {
        kv_hold(kv, id); /* make_disk_room must not drop it */
        int rc = page_write(kv, id);
        kv_unhold(kv, id);
        /* a page lost to its re-read fails its own sequences, not the caller's operation:
         * its frames came free all the same */
        if (kv->pages[id].resident != KV_RES_BLOCKS) return 0;
        if (rc) return rc;
    }
    frame_release(kv, b);
    k->res = KV_RES_DISK;
    kv->n_cold++;
    return 0;
}

/* How many evictable blocks, from the LRU head, compete on attention score. */
#define KV_EVICT_SAMPLE 8

/* One frame comes free: a cached page holding RAM is dropped first (all its frames), else
 * of the KV_EVICT_SAMPLE least recently used evictable blocks (not pinned, not held, and
 * while a decode step fetches, not used by this step) the one with the least attention
 * score is spilled. Never waits for a frame that only the caller holds. */
static int evict_one(st_kv *kv, int protect, const char *what) {
    for (int32_t id = kv->lru_head; id >= 0; id = kv->pages[id].next) {
        const kv_page *pg = &kv->pages[id];
        if (pg->resident != KV_RES_BLOCKS || page_any_held(kv, id)) continue;
        int any = 0;
        for (int l = 0; l < kv->p.n_layer; l++) any |= kv_blk(kv, id, l)->res == KV_RES_RAM;
        if (any) {
            kv_cache_drop(kv, id);
            kv->st.tier_drops++;
            return 0;
        }
    }
    const uint32_t step = (uint32_t)kv->att_step;
    int32_t best = -1;
    float best_score = 0.0f;
    int seen = 0;
    for (int32_t b = kv->res_head; b >= 0 && seen < KV_EVICT_SAMPLE; b = kv->blk[b].rnext) {
        if (!blk_can_evict(kv, b, protect, step)) continue;
        const float sc = kv_blk_score(kv, &kv->blk[b]);
        if (best < 0 || sc < best_score) best = b, best_score = sc;
        seen++;
    }
    if (best >= 0) return spill_block(kv, best);
    return kv_hot_full(kv, 1, what);
}

static int frame_get(st_kv *kv, int32_t *frame, int protect, const char *what) {
    while (!kv->n_frame_free) { /* an eviction whose page failed frees frames too */
        int rc = evict_one(kv, protect, what);
        if (rc) return rc;
    }
    *frame = kv->frame_free[--kv->n_frame_free];
    return 0;
}

/* ---- fetch --------------------------------------------------------------------------------- */

static int lost(st_kv *kv, int32_t id) {
    const kv_page *pg = &kv->pages[id];
    return st_seterr(kv->ctx, pg->err, "kv: page %d was lost earlier: %s", id, st_strerror(pg->err));
}

int kv_fetch_blk(st_kv *kv, int32_t id, int layer) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state != KV_PAGE_FREE);
    if (!kv->spill) {
        kv_touch(kv, id, layer);
        return 0;
    }
    if (pg->resident == KV_RES_ERROR) return lost(kv, id);
    const int32_t b = blk_id(kv, id, layer);
    kv_block *k = &kv->blk[b];
    int rc;
    int32_t frame;
    switch (k->res) {
    case KV_RES_RAM: kv_touch(kv, id, layer); return 0;
    case KV_RES_ZERO:
        k->hold++;
        rc = frame_get(kv, &frame, 0, "materializing a block");
        k->hold--;
        if (rc) return rc;
        if (pg->resident != KV_RES_BLOCKS) { /* an eviction re-read failed this page */
            kv->frame_free[kv->n_frame_free++] = frame;
            return lost(kv, id);
        }
        memset(kv_frame_data(kv, frame), 0, kv->g.layer_bytes);
        frame_attach(kv, b, frame, pg->slot == ST_SLOT_NONE); /* a slot holds zeros for it */
        kv_touch(kv, id, layer);
        return 0;
    case KV_RES_DISK: break;
    default: ST_ASSERT(0 && "kv: fetch of a block in no state");
    }
    k->hold++; /* eviction must not drop its page while we make room */
    rc = frame_get(kv, &frame, 0, "a fetch");
    k->hold--;
    if (rc) return rc;
    if (pg->resident != KV_RES_BLOCKS) { /* an eviction re-read failed this page */
        kv->frame_free[kv->n_frame_free++] = frame;
        return lost(kv, id);
    }
    st_spill_rd rd = {.slot = pg->slot, .key = (uint64_t)id, .gen = pg->gen,
                      .buf = kv_frame_data(kv, frame), .len = kv->g.layer_bytes,
                      .part_first = (uint32_t)layer, .part_count = 1};
    kv->st.fetch_stalls++;
    rc = st_spill_read_batch(kv->spill, &rd, 1, kv->ctx);
    if (rc) {
        kv->frame_free[kv->n_frame_free++] = frame;
        kv_page_fail(kv, id, rc);
        return st_seterr(kv->ctx, rc, "kv: fetching layer %d of page %d from the spill file: %s",
                         layer, id, st_strerror(rc));
    }
    kv->n_cold--;
    frame_attach(kv, b, frame, 0);
    kv_touch(kv, id, layer);
    kv->st.tier_reads++;
    kv->st.tier_bytes_read += (int64_t)kv->g.layer_bytes;
    return 0;
}

int kv_fetch(st_kv *kv, int32_t id) {
    if (!kv->spill) return kv_fetch_blk(kv, id, 0);
    if (kv->pages[id].resident == KV_RES_ERROR) return lost(kv, id);
    kv_hold(kv, id); /* a later layer's fetch must not evict an earlier one's */
    int rc = 0;
    for (int l = 0; l < kv->p.n_layer && !rc; l++) rc = kv_fetch_blk(kv, id, l);
    kv_unhold(kv, id);
    return rc;
}

int kv_fetch_frame(st_kv *kv, int32_t id, int layer, int protect, int32_t *frame) {
    ST_ASSERT(kv_blk(kv, id, layer)->res == KV_RES_DISK && kv_blk(kv, id, layer)->hold > 0);
    return frame_get(kv, frame, protect, "a batch fetch");
}

void kv_fetch_done(st_kv *kv, int32_t id, int layer, int32_t frame, int rc) {
    if (rc || kv->pages[id].resident != KV_RES_BLOCKS) {
        kv->frame_free[kv->n_frame_free++] = frame;
        if (rc && rc != ST_E_NOMEM && kv->pages[id].resident == KV_RES_BLOCKS)
            kv_page_fail(kv, id, rc);
        return;
    }
    kv->n_cold--;
    frame_attach(kv, blk_id(kv, id, layer), frame, 0);
    kv_touch(kv, id, layer);
    kv->st.tier_reads++;
    kv->st.tier_bytes_read += (int64_t)kv->g.layer_bytes;
}

int kv_read_block(st_kv *kv, int32_t id, int layer, uint8_t *buf) {
    kv_page *pg = &kv->pages[id];
    if (pg->resident == KV_RES_ERROR) return lost(kv, id);
    if (kv_blk_ram(kv, id, layer)) {
        memcpy(buf, kv_layer_data(kv, id, layer), kv->g.layer_bytes);
        return 0;
    }
    if (kv_blk(kv, id, layer)->res == KV_RES_ZERO) {
        memset(buf, 0, kv->g.layer_bytes);
        return 0;
    }
    st_spill_rd rd = {.slot = pg->slot, .key = (uint64_t)id, .gen = pg->gen, .buf = buf,
                      .len = kv->g.layer_bytes, .part_first = (uint32_t)layer, .part_count = 1};
    kv->st.fetch_stalls++;
    int rc = st_spill_read_batch(kv->spill, &rd, 1, kv->ctx);
    if (rc) {
        kv_page_fail(kv, id, rc);
        return st_seterr(kv->ctx, rc, "kv: reading layer %d of page %d: %s", layer, id,
                         st_strerror(rc));
    }
    kv->st.tier_block_reads++;
    kv->st.tier_bytes_read += (int64_t)kv->g.layer_bytes;
    return 0;
}

int kv_block_bytes(st_kv *kv, int32_t id, int layer, uint8_t *buf, const uint8_t **out) {
    *out = NULL;
    if (kv->pages[id].resident != KV_RES_ERROR && kv_blk_ram(kv, id, layer)) {
        *out = kv_layer_data(kv, id, layer);
        return 0;
    }
    if (kv->blk && kv->pages[id].resident == KV_RES_BLOCKS &&
        kv_blk(kv, id, layer)->res == KV_RES_ZERO) {
        *out = kv->zero_blk;
        return 0;
    }
    int rc = kv_read_block(kv, id, layer, buf);
    if (!rc) *out = buf;
    return rc;
}
