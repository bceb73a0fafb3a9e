/* The SSD tier's read-only side: its public queries (sequence errors and residency, the page
 * map, the counters' one-line summary, flush) and the tier half of the invariant check
 * (kv_tier_check). The state machine that these observe is in kv_tier.c. */
#include "kv_int.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A page's residency as one flag: RAM when any block holds a frame, else DISK when any is
 * only on disk, LOST, or 0 (never touched). */
static uint8_t page_flag(const st_kv *kv, int32_t p) {
    const kv_page *pg = &kv->pages[p];
    if (pg->resident == KV_RES_ERROR) return ST_KV_PAGE_LOST;
    if (!kv->spill) return pg->resident == KV_RES_RAM ? ST_KV_PAGE_IN_RAM : 0;
    uint8_t f = 0;
    for (int l = 0; l < kv->p.n_layer; l++) {
        const uint8_t r = kv_blk(kv, p, l)->res;
        if (r == KV_RES_RAM) return ST_KV_PAGE_IN_RAM;
        if (r == KV_RES_DISK) f = ST_KV_PAGE_ON_DISK;
    }
    return f;
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
        const uint8_t f = page_flag(kv, p);
        h += f == ST_KV_PAGE_IN_RAM;
        c += f == ST_KV_PAGE_ON_DISK;
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
            f = page_flag(kv, p);
            if (f && kv->pages[p].refs > 1) f |= ST_KV_PAGE_SHARED;
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
                     " dropped, +%" PRId64 " lost; hot %" PRId64 "/%" PRId64 " blocks, cold %" PRId64,
                     w, r, bl, (double)(b->tier_bytes_read - a->tier_bytes_read) / 1024.0,
                     (double)(b->tier_bytes_written - a->tier_bytes_written) / 1024.0, st, d, e,
                     b->blocks_hot, b->ram_blocks, b->blocks_cold);
    return n < 0 ? 0 : (size_t)n >= cap ? (int)cap - 1 : n;
}

/* ---- invariants ------------------------------------------------------------------------------ */

#define TFAIL(...)                                                                            \
    do {                                                                                      \
        snprintf(msg, cap, __VA_ARGS__);                                                      \
        free(seen);                                                                           \
        return ST_E_STATE;                                                                    \
    } while (0)

/* Hot pools up to this many frames have T3 checked on the bytes (a read per clean block). */
#define KV_CHECK_BYTES_FRAMES 16

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
    const int L = kv->p.n_layer;
    int64_t hot = 0, cold = 0, n_res = 0;
    for (int32_t i = 0; i < kv->n_frame_free; i++) {
        int32_t f = kv->frame_free[i];
        if (f < 0 || f >= kv->n_frames || seen[f]) TFAIL("free frame %d bad or twice", f);
        seen[f] = 1;
    }
    for (int32_t b = kv->res_head; b >= 0; b = kv->blk[b].rnext) {
        if (kv->blk[b].res != KV_RES_RAM)
            TFAIL("hot LRU holds block %d/%d not in RAM", b / L, b % L);
        if (++n_res > kv->n_frames) TFAIL("hot LRU loops");
    }
    for (int32_t i = 0; i < kv->n_pages; i++) {
        const kv_page *pg = &kv->pages[i];
        if (pg->hold) TFAIL("page %d held between operations", i);
        if (pg->frame != -1) TFAIL("page %d: a page frame %d with a tier", i, pg->frame);
        const int live = pg->state != KV_PAGE_FREE && pg->resident == KV_RES_BLOCKS;
        if (pg->state == KV_PAGE_FREE && (pg->resident != KV_RES_NONE || pg->slot != ST_SLOT_NONE))
            TFAIL("free page %d: residency %d slot %u", i, pg->resident, pg->slot);
        if (pg->state != KV_PAGE_FREE && !live && pg->resident != KV_RES_ERROR)
            TFAIL("page %d: residency %d", i, pg->resident);
        if (pg->resident == KV_RES_ERROR &&
            (pg->state != KV_PAGE_USED || pg->registered || pg->slot != ST_SLOT_NONE))
            TFAIL("lost page %d: state %d registered %d", i, pg->state, pg->registered);
        for (int l = 0; l < L; l++) {
            const kv_block *k = kv_blk(kv, i, l);
            if (k->hold) TFAIL("block %d/%d held between operations", i, l);
            if (!live) {
                if (k->res != KV_RES_NONE || k->frame != -1)
                    TFAIL("block %d/%d of a page without data: residency %d frame %d", i, l,
                          k->res, k->frame);
                continue;
            }
            switch (k->res) {
            case KV_RES_RAM:
                hot++;
                if (k->frame < 0 || k->frame >= kv->n_frames || seen[k->frame])
                    TFAIL("block %d/%d: frame %d bad or shared", i, l, k->frame);
                seen[k->frame] = 1;
                if (pg->slot == ST_SLOT_NONE && !k->dirty)
                    TFAIL("block %d/%d clean without a slot", i, l);
                if (!k->dirty && kv->n_frames <= KV_CHECK_BYTES_FRAMES) {
                    /* T3 on the bytes: a clean block is what its slot holds */
                    uint8_t *tmp = st_alloc_aligned(kv->g.layer_bytes, ST_KV_LAYER_ALIGN);
                    st_spill_rd rd = {.slot = pg->slot, .key = (uint64_t)i, .gen = pg->gen,
                                      .buf = tmp, .len = kv->g.layer_bytes,
                                      .part_first = (uint32_t)l, .part_count = 1};
                    int rrc = tmp ? st_spill_read_batch(kv->spill, &rd, 1, NULL) : ST_E_NOMEM;
                    int same = !rrc && !memcmp(tmp, kv_frame_data(kv, k->frame), kv->g.layer_bytes);
                    st_free_aligned(tmp);
                    if (!rrc && !same) TFAIL("clean block %d/%d differs from its slot", i, l);
                }
                break;
            case KV_RES_DISK:
                cold++;
                if (pg->slot == ST_SLOT_NONE || k->frame != -1)
                    TFAIL("cold block %d/%d without a slot", i, l);
                break;
            case KV_RES_ZERO:
                if (k->frame != -1) TFAIL("zero block %d/%d holds a frame", i, l);
                break;
            default: TFAIL("block %d/%d: residency %d", i, l, k->res);
            }
            if (pg->pins && k->res != KV_RES_RAM) TFAIL("pinned page %d: block %d not in RAM", i, l);
        }
    }
    if (hot != kv->n_hot || cold != kv->n_cold || hot != n_res ||
        hot + kv->n_frame_free != kv->n_frames)
        TFAIL("tier counts: hot %lld/%lld (LRU %lld) cold %lld/%lld, %d free frames of %d",
              (long long)hot, (long long)kv->n_hot, (long long)n_res, (long long)cold,
              (long long)kv->n_cold, kv->n_frame_free, kv->n_frames);
    free(seen);
    return 0;
}
