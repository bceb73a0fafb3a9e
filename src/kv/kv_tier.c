/* The SSD tier of the page pool: frames of the hot pool, the hot LRU, eviction (spill,
 * write-behind), fetch on miss, cold layer-block reads, failure propagation, and the tier
 * counters. The state machine and its invariants are in the essay at the top of kv_pool.c
 * (residency half); the spill store's own (slot) states are in src/tier/spill.c.
 *
 * Without a spill directory kv->spill is NULL and every function here reduces to "a page
 * has the frame of its own id", which is exactly the pool before the tier existed. */
#include "kv_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- hot LRU and frames ------------------------------------------------------------------ */

static void res_push(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    pg->rnext = -1;
    pg->rprev = kv->res_tail;
    if (kv->res_tail >= 0) kv->pages[kv->res_tail].rnext = id;
    else kv->res_head = id;
    kv->res_tail = id;
}

static void res_remove(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    if (pg->rprev >= 0) kv->pages[pg->rprev].rnext = pg->rnext;
    else kv->res_head = pg->rnext;
    if (pg->rnext >= 0) kv->pages[pg->rnext].rprev = pg->rprev;
    else kv->res_tail = pg->rprev;
    pg->rprev = pg->rnext = -1;
}

void kv_touch(st_kv *kv, int32_t id) {
    kv->pages[id].last_use = ++kv->tick;
    if (!kv->spill || kv->pages[id].resident != KV_RES_RAM || kv->res_tail == id) return;
    res_remove(kv, id);
    res_push(kv, id);
}

/* The page gives its frame back (RAM -> no frame); the caller sets the new residency. */
static void frame_release(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->resident == KV_RES_RAM && pg->frame >= 0);
    res_remove(kv, id);
    kv->frame_free[kv->n_frame_free++] = pg->frame;
    pg->frame = -1;
    kv->n_hot--;
}

/* Gives page id a frame (popped by the caller) and makes it RAM. */
static void frame_attach(st_kv *kv, int32_t id, int32_t frame) {
    kv_page *pg = &kv->pages[id];
    pg->frame = frame;
    pg->resident = KV_RES_RAM;
    res_push(kv, id);
    kv->n_hot++;
}

int kv_hot_full(st_kv *kv, int64_t need, const char *what) {
    int64_t pinned = 0, held = 0;
    for (int32_t id = kv->res_head; id >= 0; id = kv->pages[id].rnext) {
        pinned += kv->pages[id].pins > 0;
        held += !kv->pages[id].pins && kv->pages[id].hold;
    }
    return st_seterr(kv->ctx, ST_E_POOL_FULL,
                     "kv: %s needs %lld RAM page(s) but only %lld of the hot pool's %d are "
                     "obtainable (%d free); %lld pinned, %lld held by this operation",
                     what, (long long)need, (long long)kv_frames_obtainable(kv), kv->n_frames,
                     kv->n_frame_free, (long long)pinned, (long long)held);
}

int64_t kv_frames_obtainable(const st_kv *kv) {
    if (!kv->spill) return kv->n_free + kv->n_cached; /* a frame per page: pages limit */
    int64_t n = kv->n_frame_free;
    for (int32_t id = kv->res_head; id >= 0; id = kv->pages[id].rnext)
        n += !kv->pages[id].pins && !kv->pages[id].hold;
    return n;
}

/* Layers select different pages, so a whole-page fetch for one layer must not evict what
 * any decode step has used: the next token needs nearly the same pages, and every fetch
 * reads all n_layer blocks of a page (evicting the last step's pages too measured worse). */
void kv_tier_step(st_kv *kv, int layer) {
    if (layer <= kv->att_layer || !kv->att_step) kv->att_step++;
    kv->att_layer = layer;
}

void kv_tier_use(st_kv *kv, int32_t id) {
    kv->pages[id].att_step = kv->att_step;
    if (!kv->spill || kv->pages[id].resident != KV_RES_RAM || kv->res_tail == id) return;
    res_remove(kv, id);
    res_push(kv, id);
}

int64_t kv_frames_spare(const st_kv *kv) {
    if (!kv->spill) return kv_frames_obtainable(kv);
    int64_t n = kv->n_frame_free;
    for (int32_t id = kv->res_head; id >= 0; id = kv->pages[id].rnext) {
        const kv_page *pg = &kv->pages[id];
        n += !pg->pins && !pg->hold && !pg->att_step;
    }
    return n;
}

/* ---- open / close ------------------------------------------------------------------------- */

int kv_tier_open(st_kv *kv) {
    if (!kv->p.spill_dir) return 0;
    kv->frame_free = malloc((size_t)kv->n_frames * sizeof *kv->frame_free);
    kv->zero_blk = st_alloc_aligned(kv->g.layer_bytes, ST_KV_LAYER_ALIGN);
    kv->rd_blk = st_alloc_aligned(kv->g.layer_bytes, ST_KV_LAYER_ALIGN);
    if (!kv->frame_free || !kv->zero_blk || !kv->rd_blk)
        return st_seterr(kv->ctx, ST_E_NOMEM, "kv: out of memory for the tier");
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
    free(kv->frame_free);
    st_free_aligned(kv->zero_blk);
    st_free_aligned(kv->rd_blk);
}

/* ---- page lifecycle hooks ------------------------------------------------------------------ */

void kv_tier_new_page(st_kv *kv, int32_t id, int zero) {
    kv_page *pg = &kv->pages[id];
    pg->slot = ST_SLOT_NONE;
    pg->err = 0;
    pg->att_step = 0;
    ST_ASSERT(pg->hold == 0 && pg->frame < 0);
    if (!kv->spill) {
        pg->frame = id;
        pg->resident = KV_RES_RAM;
        if (zero) memset(kv_page_data(kv, id), 0, kv->g.page_bytes);
        return;
    }
    ST_ASSERT(zero); /* frames move between pages here: a free page has no contents */
    if (kv->n_frame_free) { /* free RAM costs nothing; otherwise the page stays virtual */
        frame_attach(kv, id, kv->frame_free[--kv->n_frame_free]);
        memset(kv_page_data(kv, id), 0, kv->g.page_bytes);
    } else {
        pg->resident = KV_RES_ZERO;
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

void kv_tier_forget(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->hold == 0);
    if (!kv->spill) {
        pg->frame = -1;
        pg->resident = KV_RES_NONE;
        return;
    }
    if (pg->resident == KV_RES_RAM) frame_release(kv, id);
    if (pg->resident == KV_RES_DISK) kv->n_cold--;
    slot_drop(kv, pg);
    pg->resident = KV_RES_NONE;
    pg->err = 0;
}

void kv_dirty(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->resident == KV_RES_RAM);
    if (kv->spill) slot_drop(kv, pg);
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
    if (pg->resident == KV_RES_RAM) frame_release(kv, id);
    if (pg->resident == KV_RES_DISK) kv->n_cold--;
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

/* Disk full: frees one slot. Oldest unreferenced cached page first (dropped if its only
 * copy is on disk, else just its copy), then the clean copy of a resident page. */
static int make_disk_room(st_kv *kv) {
    for (int32_t id = kv->lru_head; id >= 0; id = kv->pages[id].next) {
        kv_page *pg = &kv->pages[id];
        if (pg->slot == ST_SLOT_NONE || pg->hold) continue;
        if (pg->resident == KV_RES_DISK) {
            kv_cache_drop(kv, id);
            kv->st.tier_drops++;
        } else {
            slot_drop(kv, pg);
        }
        return 0;
    }
    for (int32_t id = kv->res_head; id >= 0; id = kv->pages[id].rnext)
        if (kv->pages[id].slot != ST_SLOT_NONE) {
            slot_drop(kv, &kv->pages[id]);
            return 0;
        }
    return ST_E_NOSPACE;
}

/* RAM -> DISK: a clean page just lets its frame go; a dirty one is written behind first. */
static int spill_page(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    if (pg->slot == ST_SLOT_NONE) {
        st_spill_page sp = {.data = kv_page_data(kv, id), .len = kv->g.page_bytes,
                            .type = kv->p.type, .key = (uint64_t)id, .gen = ++kv->spill_gen};
        st_slot slot;
        int rc;
        while ((rc = st_spill_write(kv->spill, &sp, 0, &slot, kv->ctx)) == ST_E_NOSPACE &&
               make_disk_room(kv) == 0) {
        }
        if (rc == ST_E_NOSPACE)
            return st_seterr(kv->ctx, rc, "kv: the spill area is full (%lld live pages on disk, "
                             "budget %llu bytes) and page %d must leave RAM",
                             (long long)kv->n_cold, (unsigned long long)kv->p.disk_budget, id);
        if (rc) return rc;
        pg->slot = slot;
        pg->gen = sp.gen;
        kv->st.tier_writes++;
        kv->st.tier_bytes_written += (int64_t)kv->g.page_bytes;
    }
    frame_release(kv, id);
    pg->resident = KV_RES_DISK;
    kv->n_cold++;
    return 0;
}

/* One frame comes free: a cached page's is dropped first, else the least recently used
 * unpinned, unheld page is spilled. Never waits for a frame that only the caller holds. */
static int evict_one(st_kv *kv, const char *what) {
    for (int32_t id = kv->lru_head; id >= 0; id = kv->pages[id].next) {
        const kv_page *pg = &kv->pages[id];
        if (pg->resident == KV_RES_RAM && !pg->hold) {
            kv_cache_drop(kv, id);
            kv->st.tier_drops++;
            return 0;
        }
    }
    for (int32_t id = kv->res_head; id >= 0; id = kv->pages[id].rnext) {
        const kv_page *pg = &kv->pages[id];
        if (pg->pins || pg->hold) continue;
        ST_ASSERT(pg->state == KV_PAGE_USED);
        return spill_page(kv, id);
    }
    return kv_hot_full(kv, 1, what);
}

static int frame_get(st_kv *kv, int32_t *frame, const char *what) {
    if (!kv->n_frame_free) {
        int rc = evict_one(kv, what);
        if (rc) return rc;
    }
    ST_ASSERT(kv->n_frame_free > 0);
    *frame = kv->frame_free[--kv->n_frame_free];
    return 0;
}

/* ---- fetch --------------------------------------------------------------------------------- */

int kv_fetch(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state != KV_PAGE_FREE);
    int rc;
    int32_t frame;
    switch (pg->resident) {
    case KV_RES_RAM: kv_touch(kv, id); return 0;
    case KV_RES_ERROR:
        return st_seterr(kv->ctx, pg->err, "kv: page %d was lost earlier: %s", id,
                         st_strerror(pg->err));
    case KV_RES_ZERO:
        if ((rc = frame_get(kv, &frame, "materializing a page")) != 0) return rc;
        frame_attach(kv, id, frame);
        memset(kv_page_data(kv, id), 0, kv->g.page_bytes);
        kv_touch(kv, id);
        return 0;
    case KV_RES_DISK: break;
    default: ST_ASSERT(0 && "kv: fetch of a page in no state");
    }
    kv_hold(kv, id); /* make_disk_room must not drop it while we make room */
    rc = frame_get(kv, &frame, "a fetch");
    if (rc) {
        kv_unhold(kv, id);
        return rc;
    }
    uint8_t *dst = kv->data + (size_t)frame * kv->g.page_bytes;
    kv->st.fetch_stalls++;
    rc = st_spill_read(kv->spill, pg->slot, (uint64_t)id, pg->gen, dst, kv->g.page_bytes, kv->ctx);
    kv_unhold(kv, id);
    if (rc) {
        kv->frame_free[kv->n_frame_free++] = frame;
        kv_page_fail(kv, id, rc);
        return st_seterr(kv->ctx, rc, "kv: fetching page %d from the spill file: %s", id,
                         st_strerror(rc));
    }
    kv->n_cold--;
    frame_attach(kv, id, frame);
    kv_touch(kv, id);
    kv->st.tier_reads++;
    kv->st.tier_bytes_read += (int64_t)kv->g.page_bytes;
    return 0;
}

int kv_fetch_frame(st_kv *kv, int32_t id, int32_t *frame) {
    ST_ASSERT(kv->pages[id].resident == KV_RES_DISK && kv->pages[id].hold > 0);
    return frame_get(kv, frame, "a batch fetch");
}

void kv_fetch_done(st_kv *kv, int32_t id, int32_t frame, int rc) {
    if (rc) {
        kv->frame_free[kv->n_frame_free++] = frame;
        if (rc != ST_E_NOMEM) kv_page_fail(kv, id, rc);
        return;
    }
    kv->n_cold--;
    frame_attach(kv, id, frame);
    kv_touch(kv, id);
    kv->st.tier_reads++;
    kv->st.tier_bytes_read += (int64_t)kv->g.page_bytes;
}

int kv_read_block(st_kv *kv, int32_t id, int layer, uint8_t *buf) {
    kv_page *pg = &kv->pages[id];
    switch (pg->resident) {
    case KV_RES_RAM:
        memcpy(buf, kv_layer_data(kv, id, layer), kv->g.layer_bytes);
        return 0;
    case KV_RES_ZERO: memset(buf, 0, kv->g.layer_bytes); return 0;
    case KV_RES_ERROR:
        return st_seterr(kv->ctx, pg->err, "kv: page %d was lost earlier: %s", id,
                         st_strerror(pg->err));
    default: break;
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

/* ---- public tier functions ------------------------------------------------------------------ */

int st_kv_flush(st_kv *kv) {
    KV_CHECK_ON_RETURN(kv);
    if (!kv || !kv->spill) return 0;
    return st_spill_flush(kv->spill, 0, kv->ctx);
}

int st_kv_seq_error(const st_kv *kv, st_kv_seq_id seq) {
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    return rc ? rc : s->err;
}

int st_kv_seq_residency(const st_kv *kv, st_kv_seq_id seq, int64_t *hot, int64_t *cold) {
    if (hot) *hot = 0;
    if (cold) *cold = 0;
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    int64_t h = 0, c = 0;
    for (int64_t i = 0; i < s->n_ent; i++) {
        int32_t p = s->ent[i].page;
        if (p < 0) continue;
        h += kv->pages[p].resident == KV_RES_RAM;
        c += kv->pages[p].resident == KV_RES_DISK;
    }
    if (hot) *hot = h;
    if (cold) *cold = c;
    return 0;
}

int st_kv_seq_page_map(const st_kv *kv, st_kv_seq_id seq, uint8_t *out, int64_t max,
                       int64_t *n_out) {
    if (n_out) *n_out = 0;
    if (max < 0 || (max > 0 && !out) || !n_out)
        return kv ? st_seterr(kv->ctx, ST_E_INVAL, "kv: seq_page_map: bad out/max") : ST_E_INVAL;
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    *n_out = s->n_ent;
    if (s->n_ent > max)
        return st_seterr(kv->ctx, ST_E_LIMIT, "kv: seq_page_map: %lld pages, room for %lld",
                         (long long)s->n_ent, (long long)max);
    for (int64_t i = 0; i < s->n_ent; i++) {
        const int32_t p = s->ent[i].page;
        uint8_t f = 0;
        if (p >= 0) {
            const kv_page *pg = &kv->pages[p];
            f = pg->resident == KV_RES_RAM    ? ST_KV_PAGE_IN_RAM
                : pg->resident == KV_RES_DISK ? ST_KV_PAGE_ON_DISK
                : pg->resident == KV_RES_ERROR ? ST_KV_PAGE_LOST
                                               : 0;
            if (f && pg->refs > 1) f |= ST_KV_PAGE_SHARED;
        }
        out[i] = f;
    }
    return 0;
}

int st_kv_stats_line(const st_kv_stats *a, const st_kv_stats *b, char *buf, size_t cap) {
    if (!buf || !cap) return 0;
    buf[0] = 0;
    if (!a || !b) return 0;
    const int64_t w = b->tier_writes - a->tier_writes, r = b->tier_reads - a->tier_reads,
                  bl = b->tier_block_reads - a->tier_block_reads, d = b->tier_drops - a->tier_drops,
                  e = b->tier_errors - a->tier_errors, st = b->fetch_stalls - a->fetch_stalls;
    if (!w && !r && !bl && !d && !e) return 0;
    int n = snprintf(buf, cap,
                     "kv tier: +%" PRId64 " spilled, +%" PRId64 " fetched, +%" PRId64
                     " blocks streamed (%.1f KiB in, %.1f KiB out), %" PRId64 " stalls, +%" PRId64
                     " dropped, +%" PRId64 " lost; hot %" PRId64 "/%" PRId64 ", cold %" PRId64,
                     w, r, bl, (double)(b->tier_bytes_read - a->tier_bytes_read) / 1024.0,
                     (double)(b->tier_bytes_written - a->tier_bytes_written) / 1024.0, st, d, e,
                     b->pages_hot, b->ram_pages, b->pages_cold);
    return n < 0 ? 0 : (size_t)n >= cap ? (int)cap - 1 : n;
}

/* ---- invariants ------------------------------------------------------------------------------ */

#define TFAIL(...)                                                                            \
    do {                                                                                      \
        snprintf(msg, cap, __VA_ARGS__);                                                      \
        free(seen);                                                                           \
        return ST_E_STATE;                                                                    \
    } while (0)

int kv_tier_check(const st_kv *kv, char *msg, size_t cap) {
    uint8_t *seen = NULL;
    if (!kv->spill) {
        for (int32_t i = 0; i < kv->n_pages; i++) {
            const kv_page *pg = &kv->pages[i];
            int used = pg->state != KV_PAGE_FREE;
            if (pg->hold) TFAIL("page %d held between operations", i);
            if (used ? (pg->resident != KV_RES_RAM || pg->frame != i)
                     : (pg->resident != KV_RES_NONE || pg->frame != -1))
                TFAIL("page %d (state %d): residency %d frame %d without a tier", i, pg->state,
                      pg->resident, pg->frame);
        }
        return 0;
    }
    seen = calloc((size_t)kv->n_frames, 1);
    if (!seen) return ST_E_NOMEM;
    int64_t hot = 0, cold = 0, n_res = 0;
    for (int32_t i = 0; i < kv->n_frame_free; i++) {
        int32_t f = kv->frame_free[i];
        if (f < 0 || f >= kv->n_frames || seen[f]) TFAIL("free frame %d bad or twice", f);
        seen[f] = 1;
    }
    for (int32_t id = kv->res_head; id >= 0; id = kv->pages[id].rnext) {
        if (kv->pages[id].resident != KV_RES_RAM) TFAIL("hot LRU holds page %d not in RAM", id);
        if (++n_res > kv->n_frames) TFAIL("hot LRU loops");
    }
    for (int32_t i = 0; i < kv->n_pages; i++) {
        const kv_page *pg = &kv->pages[i];
        if (pg->hold) TFAIL("page %d held between operations", i);
        if (pg->state == KV_PAGE_FREE) {
            if (pg->resident != KV_RES_NONE || pg->frame != -1 || pg->slot != ST_SLOT_NONE)
                TFAIL("free page %d: residency %d frame %d slot %u", i, pg->resident, pg->frame,
                      pg->slot);
            continue;
        }
        switch (pg->resident) {
        case KV_RES_RAM:
            hot++;
            if (pg->frame < 0 || pg->frame >= kv->n_frames || seen[pg->frame])
                TFAIL("page %d: frame %d bad or shared", i, pg->frame);
            seen[pg->frame] = 1;
            break;
        case KV_RES_DISK:
            cold++;
            if (pg->slot == ST_SLOT_NONE || pg->frame != -1) TFAIL("cold page %d without slot", i);
            break;
        case KV_RES_ZERO:
            if (pg->slot != ST_SLOT_NONE || pg->frame != -1) TFAIL("zero page %d holds storage", i);
            break;
        case KV_RES_ERROR:
            if (pg->state != KV_PAGE_USED || pg->registered || pg->frame != -1 ||
                pg->slot != ST_SLOT_NONE)
                TFAIL("lost page %d: state %d registered %d", i, pg->state, pg->registered);
            break;
        default: TFAIL("page %d: residency %d", i, pg->resident);
        }
        if (pg->pins && pg->resident != KV_RES_RAM) TFAIL("pinned page %d not in RAM", i);
    }
    if (hot != kv->n_hot || cold != kv->n_cold || hot != n_res ||
        hot + kv->n_frame_free != kv->n_frames)
        TFAIL("tier counts: hot %lld/%lld (LRU %lld) cold %lld/%lld, %d free frames of %d",
              (long long)hot, (long long)kv->n_hot, (long long)n_res, (long long)cold,
              (long long)kv->n_cold, kv->n_frame_free, kv->n_frames);
    free(seen);
    return 0;
}
