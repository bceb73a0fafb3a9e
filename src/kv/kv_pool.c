/*
 * KV page pool: design
 * ====================
 *
 * The pool is one slab of n_pages physical pages, allocated once (4096-aligned; each page
 * holds P token slots of EVERY layer as n_layer 4096-padded layer blocks, see kv.h), plus a
 * kv_page record per page. Sequences own page tables (kv_seq.ent: logical page -> physical
 * page, with a per-entry slot count and optional validity mask). The prefix cache is an
 * index from content key to page over the same pages; nothing is ever allocated per token.
 *
 * Page states and transitions:
 *
 *                       (1) kv_page_alloc
 *        +--------+ ------------------------> +--------+
 *        |  FREE  |                           |  USED  | <---+ (4) kv_page_ref, st_kv_pin
 *        +--------+ <------------------------ +--------+ ----+
 *          ^      (2) kv_page_unref/st_kv_unpin   |  ^
 *          |          refs = pins = 0,            |  | (5) st_kv_prefix_attach
 *          |          not registered              |  |     (kv_page_ref: leaves the LRU)
 *          |                       (3) kv_page_unref/st_kv_unpin
 *          |                           refs = pins = 0, registered
 *          |                                      v  |
 *          |  (6) kv_page_alloc, free list     +--------+
 *          +---------------------------------- | CACHED |
 *          empty: kv_cache_drop (LRU head)      +--------+
 *
 *   transition                         function                        counters
 *   (1) FREE -> USED                   kv_page_alloc                   n_free--, n_used++
 *   (2) USED -> FREE                   kv_page_release                 n_used--, n_free++
 *   (3) USED -> CACHED                 kv_page_release                 n_used--, n_cached++
 *   (4) USED -> USED (ref/pin)         kv_page_ref, st_kv_pin          n_pinned on 0->1
 *   (5) CACHED -> USED                 kv_page_ref (from attach)       n_cached--, n_used++
 *   (6) CACHED -> FREE (-> USED)       kv_cache_drop (in kv_page_alloc) cache_evictions++
 *   seal (USED, flag)                  kv_seal_page (st_kv_seq_commit)
 *   unseal (USED, flag)                make_writable (kv_seq.c) before a write
 *
 * Invariants (kv_check verifies every one; the randomized test calls it after each step, and
 * a STRATA_CHECK build after every public call that may change the pool: KV_CHECK_ON_RETURN):
 *   I1. Every page is in exactly one state. FREE pages are exactly the free list, CACHED
 *       pages exactly the LRU list; n_free + n_used + n_cached == n_pages.
 *   I2. refs(page) == the number of page-table entries, over all live sequences, naming it.
 *   I3. FREE   => refs == pins == 0, and no flag (sealed, has_key, registered) is set.
 *       CACHED => refs == pins == 0, registered.
 *       USED   => refs > 0 or pins > 0.
 *   I4. registered => has_key => sealed. The prefix index holds exactly the registered pages,
 *       at most one page per (key, parent, tokens).
 *   I5. A page's bytes change only while it is exclusive: refs == 1, not registered, not
 *       sealed (make_writable, kv_seq.c, establishes this, copying a shared page first:
 *       COW). So a sealed or shared page is immutable, which is what lets forks and the
 *       cache share it.
 *   I6. Per sequence: n_ent == ceil(len / P); every entry but the last has n_tokens == P;
 *       the last has n_tokens == len - (n_ent - 1) * P; mask bits >= n_tokens are 0; an
 *       entry whose mask is all zero is a hole (page -1) unless it is the tail entry.
 *   I7. An allocation is checked for the whole operation up front (kv_need): an operation
 *       either gets every page it needs or returns ST_E_POOL_FULL having changed nothing.
 *       Pinned and referenced pages are never taken, so a full pool fails at once rather
 *       than waiting for pages that the caller itself holds (the deadlock guard).
 *
 * The SSD tier (kv_tier.c, kv_attend.c, kv_stream.c). The unit of RAM residency is the (page, layer)
 * BLOCK: decode selects pages per layer (Quest) and real models select differently in each
 * layer, so a frame holds one layer block (layer_bytes) and each layer's selection fetches
 * and evicts only its own blocks; a hot pool of B bytes is B / layer_bytes frames. Page ids
 * stay logical ([0, n_pages), what page tables, the prefix index and the Quest boxes are
 * indexed by). A live page is KV_RES_BLOCKS (or ERROR) and owns at most one spill slot,
 * which holds a copy of ALL its layer blocks (the spill file is part-major, one part per
 * layer: any one block reads alone); each of its blocks (kv_block) is RAM (a frame; clean
 * when its slot part holds the same bytes, else dirty), ZERO (never touched: no frame, all
 * zero) or DISK (only the slot part holds it):
 *
 *            kv_tier_new_page: every block            kv_dirty (a write, zeroing):
 *      (alloc) ---------------> ZERO                  RAM clean -------> RAM dirty
 *                                 | kv_fetch_blk: frame, memset         |    ^
 *                                 v  (clean iff the page has a slot)    |    | kv_dirty
 *                 +---------> RAM clean / dirty <----------------------+    |
 *                 |            |        |   evict_one -> spill_block:       |
 *   kv_fetch_blk, |  clean:    |        |   dirty: page_write (the page's   |
 *   kv_fetch_done |  no I/O    v        v   blocks gathered, DISK ones read |
 *   (ranged read  |          DISK <-----+   back from the old slot, to a    |
 *    of part l)   +--------- (slot)         new slot: every RAM block clean)
 *                              | a read or checksum fails (page_write's re-read too)
 *                              v
 *                ERROR (page-level, sticky: data lost; every sequence naming the page
 *                       fails; FREE when its last ref goes)
 *
 *   transition                     function                            counters
 *   alloc -> blocks ZERO           kv_tier_new_page (kv_page_alloc)    -
 *   ZERO -> RAM                    kv_fetch_blk                        -
 *   RAM dirty -> DISK              evict_one -> spill_block, page_write tier_writes, bytes
 *   RAM clean -> DISK              evict_one -> spill_block (no I/O)   -
 *   DISK -> RAM clean              kv_fetch_blk, kv_fetch_done (batch) tier_reads, fetch_stalls
 *   RAM clean -> RAM dirty         kv_dirty (the slot keeps the rest)  -
 *   CACHED page with RAM -> FREE   evict_one (cached dropped first)    tier_drops
 *   CACHED page on disk -> FREE    make_disk_room (disk full)          tier_drops
 *   page -> ERROR                  kv_page_fail                        tier_errors (+ io or checksum), seqs_failed
 *   any -> (FREE)                  kv_tier_forget (frames, slot back)  -
 *   attention on DISK blocks       kv_stream.c streams layer blocks    tier_block_reads
 *                                  (no state change)
 *
 * Invariants of the tier (kv_tier_check, called by kv_check):
 *   T1. Without a spill directory every non-FREE page is RAM with frame == its id and a
 *       frame is a whole page slab: the pool is exactly the pre-tier pool (no kv_block).
 *   T2. Frames: the free-frame stack and the frames of RAM blocks partition [0, ram_blocks);
 *       the hot LRU holds exactly the RAM blocks; n_hot / n_cold count RAM / DISK blocks.
 *       Blocks of FREE and ERROR pages are NONE, without a frame.
 *   T3. A DISK block's page has a slot; a page without a slot has every RAM block dirty;
 *       a clean RAM block is what its slot part holds (every mutation goes through kv_dirty
 *       first; kv_check compares the bytes when the hot pool is small). ZERO blocks have no
 *       frame (a slot written since holds zeros for them).
 *   T4. A pinned page has every block RAM (st_kv_pin fetches all n_layer first) and none is
 *       evicted; neither are held blocks (kv_block.hold: a fetch's target, a COW's source
 *       block, attention's blocks of its layer) nor blocks of held pages (kv_hold: every
 *       block, e.g. a page being written to its slot or fetched whole). No hold survives an
 *       operation. So an operation never evicts what it itself needs, and when every frame
 *       is pinned or held the answer is ST_E_POOL_FULL at once, never a wait: a write needs
 *       at most 2 frames at once (a COW copies block by block), a pin n_layer.
 *   T5. ERROR pages are USED, unregistered, without frames or slot; their sequences carry
 *       the error (kv_seq.err) and every later operation on them except free returns it.
 *       An operation that stops half-way on an I/O or disk-space error fails its sequence
 *       too (st_kv_write of several pages, a restore that could not place a page), so a
 *       live sequence never holds a hole or garbage. A page lost while being written for
 *       another operation's eviction (its disk-only blocks re-read) fails its own
 *       sequences, not that operation, unless the operation held one of its blocks: a COW
 *       of it or attention over it then fails too, without computing from it.
 *   T6. Eviction order: unreferenced cached pages holding RAM are dropped first (prefix
 *       LRU), then of the KV_EVICT_SAMPLE least recently used evictable blocks the one with
 *       the least attention score is spilled (the ledger below); while a decode step
 *       fetches, blocks an earlier layer of the same step used are not evictable (the next
 *       token needs them again). Disk full: the oldest cached page with a slot is dropped
 *       (or just its copy, with no block on disk), else the copy of a resident page with no
 *       block on disk is released; when only live blocks remain the spill fails with
 *       ST_E_NOSPACE (nothing lost).
 * The attention ledger: each block's score is the share of KV heads that selected it (1 for
 * dense attention) summed over decode steps, decayed by KV_SCORE_DECAY per step, so the
 * blocks attention keeps reading stay and one-off selections leave first; snapshots save it
 * (docs/FORMATS.md) and a restore sets it as of now. The read-ahead (st_kv_params.prefetch,
 * kv_attend.c) moves blocks DISK -> RAM clean within one decode call, holding them while
 * their reads are in flight, so it adds no state between operations. Sealing reads each layer's block (the
 * Quest boxes) where it is, without fetching: the boxes live in RAM for every page whatever
 * its residency.
 */
#include "kv_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

st_kv_params st_kv_default_params(void) {
    st_kv_params p;
    memset(&p, 0, sizeof p);
    p.page_size = ST_KV_PAGE_SIZE_DEFAULT;
    p.type = ST_TYPE_F16;
    p.max_seqs = 256;
    return p;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static int check_params(st_ctx *ctx, st_kv_params *p) {
    if (p->page_size == 0) p->page_size = ST_KV_PAGE_SIZE_DEFAULT;
    if (p->max_seqs == 0) p->max_seqs = 256;
#define RANGE(field, lo, hi)                                                              \
    if (p->field < (lo) || p->field > (hi))                                               \
        return st_seterr(ctx, ST_E_INVAL, "kv: " #field " = %lld outside [%lld, %lld]",   \
                         (long long)p->field, (long long)(lo), (long long)(hi));
    RANGE(n_layer, 1, ST_KV_MAX_LAYERS)
    RANGE(n_kv_head, 1, ST_KV_MAX_HEADS)
    RANGE(head_dim, 1, ST_KV_MAX_HEAD_DIM)
    RANGE(page_size, ST_KV_PAGE_SIZE_MIN, ST_KV_PAGE_SIZE_MAX)
    RANGE(n_pages, 1, ST_KV_MAX_PAGES)
    RANGE(n_reserve, 0, p->n_pages)
    RANGE(max_seqs, 1, ST_KV_MAX_SEQS)
    if (p->quest_group == 0) p->quest_group = 1;
    RANGE(quest_group, 1, 256)
    if (p->quest_group & (p->quest_group - 1))
        return st_seterr(ctx, ST_E_INVAL, "kv: quest_group = %d is not a power of two", p->quest_group);
    if (p->ram_pages == 0) p->ram_pages = p->n_pages;
    if (p->spill_dir) {
        RANGE(ram_pages, 2, p->n_pages)
        if (p->n_pages * p->n_layer > INT32_MAX)
            return st_seterr(ctx, ST_E_LIMIT, "kv: %lld pages of %d layers: more than 2^31 "
                             "layer blocks for the SSD tier", (long long)p->n_pages, p->n_layer);
        if (p->ram_blocks == 0) p->ram_blocks = p->ram_pages * p->n_layer;
        RANGE(ram_blocks, 2, p->n_pages * p->n_layer)
    } else if (p->ram_blocks) {
        return st_seterr(ctx, ST_E_INVAL, "kv: ram_blocks needs a spill directory");
    } else if (p->ram_pages != p->n_pages) {
        return st_seterr(ctx, ST_E_INVAL, "kv: ram_pages = %lld < n_pages = %lld needs a spill "
                         "directory", (long long)p->ram_pages, (long long)p->n_pages);
    }
    if ((unsigned)p->cold > ST_COLD_Q4)
        return st_seterr(ctx, ST_E_INVAL, "kv: cold type %d unknown", (int)p->cold);
#undef RANGE
    if (p->page_size & (p->page_size - 1))
        return st_seterr(ctx, ST_E_INVAL, "kv: page_size = %d is not a power of two",
                         p->page_size);
    if (p->type != ST_TYPE_F32 && p->type != ST_TYPE_F16 && p->type != ST_TYPE_BF16 &&
        p->type != ST_TYPE_Q8_0)
        return st_seterr(ctx, ST_E_UNSUPPORTED,
                         "kv: element type %d (%s) not supported: f32, f16, bf16 or q8_0",
                         (int)p->type, st_type_name(p->type) ? st_type_name(p->type) : "?");
    return 0;
}

static void make_geometry(const st_kv_params *p, st_kv_geometry *g) {
    memset(g, 0, sizeof *g);
    g->n_layer = p->n_layer;
    g->n_kv_head = p->n_kv_head;
    g->head_dim = p->head_dim;
    g->page_size = p->page_size;
    g->type = p->type;
    g->elem_bytes = p->type == ST_TYPE_F32 ? 4 : p->type == ST_TYPE_Q8_0 ? 1 : 2;
    g->kv_bytes = (size_t)p->n_kv_head * p->page_size * p->head_dim * g->elem_bytes;
    g->v_offset = round_up(g->kv_bytes, 64);
    size_t end = g->v_offset + round_up(g->kv_bytes, 64);
    if (p->type == ST_TYPE_Q8_0) {
        g->scale_offset = end;
        end += 2 * sizeof(float) * (size_t)p->n_kv_head;
    }
    g->layer_bytes = round_up(end, ST_KV_LAYER_ALIGN);
    g->page_bytes = g->layer_bytes * (size_t)p->n_layer;
}

size_t st_kv_page_bytes(const st_kv_params *params) {
    if (!params) return 0;
    st_kv_params p = *params;
    p.n_pages = p.n_pages > 0 ? p.n_pages : 1;
    p.ram_pages = 0;
    p.spill_dir = NULL;
    if (check_params(NULL, &p)) return 0;
    st_kv_geometry g;
    make_geometry(&p, &g);
    return g.page_bytes;
}

int st_kv_create(st_ctx *ctx, const st_kv_params *params, st_kv **out) {
    if (!out) return st_seterr(ctx, ST_E_INVAL, "kv: out is NULL");
    *out = NULL;
    if (!params) return st_seterr(ctx, ST_E_INVAL, "kv: params is NULL");
    st_kv_params p = *params;
    int rc = check_params(ctx, &p);
    if (rc) return rc;
    st_kv *kv = calloc(1, sizeof *kv);
    if (!kv) return st_seterr(ctx, ST_E_NOMEM, "kv: out of memory");
    kv->ctx = ctx;
    kv->p = p;
    make_geometry(&p, &kv->g);
    kv->n_pages = (int32_t)p.n_pages;
    uint64_t slab;
    uint64_t nb = 16;
    while (nb < (uint64_t)p.n_pages) nb <<= 1;
    kv->hash_mask = nb - 1;
    /* without a tier a frame is a page slab (frame == page); with one, a layer block */
    kv->n_frames = (int32_t)(p.spill_dir ? p.ram_blocks : p.ram_pages);
    kv->frame_bytes = p.spill_dir ? kv->g.layer_bytes : kv->g.page_bytes;
    if (st_mul_overflow_u64((uint64_t)kv->n_frames, kv->frame_bytes, &slab) || slab > SIZE_MAX)
        goto nomem;
    /* Huge pages: decode walks page slabs in table order, which is scattered in memory, so
     * with 4 KiB pages each slab would cost its own TLB walks (bench/attn measures it). */
    kv->data = slab ? st_alloc_huge((size_t)slab) : NULL;
    kv->pages = calloc((size_t)p.n_pages, sizeof *kv->pages);
    kv->page_tokens = calloc((size_t)p.n_pages * p.page_size, sizeof(int32_t));
    kv->buckets = malloc(nb * sizeof(int32_t));
    kv->seqs = calloc((size_t)p.max_seqs, sizeof *kv->seqs);
    kv->gen = calloc((size_t)p.max_seqs, sizeof *kv->gen);
    if (!kv->data || !kv->pages || !kv->page_tokens || !kv->buckets || !kv->seqs || !kv->gen ||
        kv_quest_alloc(kv))
        goto nomem;
    for (uint64_t i = 0; i < nb; i++) kv->buckets[i] = -1;
    /* Free list in ascending order, so a fresh pool hands out pages 0, 1, 2, ... */
    for (int32_t i = 0; i < kv->n_pages; i++) {
        kv_page *pg = &kv->pages[i];
        pg->state = KV_PAGE_FREE;
        pg->next = i + 1 < kv->n_pages ? i + 1 : -1;
        pg->prev = pg->hnext = -1;
        pg->resident = KV_RES_NONE;
        pg->frame = -1;
        pg->slot = ST_SLOT_NONE;
    }
    kv->free_head = 0;
    kv->n_free = kv->n_pages;
    kv->lru_head = kv->lru_tail = -1;
    kv->res_head = kv->res_tail = -1;
    if ((rc = kv_tier_open(kv)) != 0) {
        st_kv_destroy(kv);
        return rc;
    }
    /* borrowed for creation only (documented in kv.h) */
    kv->p.spill_dir = kv->p.instance_id = NULL;
    kv->p.spill_open = NULL;
    kv->p.spill_open_arg = NULL;
    KV_CHECK(kv, "st_kv_create");
    *out = kv;
    return 0;
nomem:
    st_kv_destroy(kv);
    return st_seterr(ctx, ST_E_NOMEM, "kv: cannot allocate a pool of %lld pages of %zu bytes",
                     (long long)p.n_pages, kv->g.page_bytes);
}

void st_kv_destroy(st_kv *kv) {
    if (!kv) return;
    if (kv->seqs) {
        for (int i = 0; i < kv->p.max_seqs; i++) {
            kv_seq *s = kv->seqs[i];
            if (!s) continue;
            free(s->ent);
            free(s->tokens);
            free(s);
        }
    }
    kv_attend_free(kv);
    kv_tier_close(kv);
    if (kv->data) st_free_huge(kv->data, (size_t)kv->n_frames * kv->frame_bytes);
    free(kv->pages);
    free(kv->page_tokens);
    free(kv->buckets);
    free(kv->seqs);
    free(kv->gen);
    kv_quest_free(kv);
    free(kv);
}

const st_kv_geometry *st_kv_get_geometry(const st_kv *kv) { return &kv->g; }
const st_kv_params *st_kv_get_params(const st_kv *kv) { return &kv->p; }

void st_kv_get_stats(const st_kv *kv, st_kv_stats *out) {
    *out = kv->st;
    out->n_pages = kv->n_pages;
    out->pages_used = kv->n_used;
    out->pages_free = kv->n_free;
    out->pages_cached = kv->n_cached;
    out->pages_pinned = kv->n_pinned;
    out->n_seqs = kv->n_seqs;
    if (kv->spill) {
        const int64_t L = kv->p.n_layer;
        out->ram_blocks = kv->n_frames;
        out->blocks_hot = kv->n_hot;
        out->blocks_cold = kv->n_cold;
        out->ram_pages = (kv->n_frames + L - 1) / L;
        out->pages_hot = (kv->n_hot + L - 1) / L;
        out->pages_cold = (kv->n_cold + L - 1) / L;
    }
}

static int pool_full(st_kv *kv, int64_t need, int64_t reserve, const char *what) {
    return st_seterr(kv->ctx, ST_E_POOL_FULL,
                     "kv: %s needs %lld page(s)%s but only %lld are obtainable "
                     "(%lld free + %lld cached) of %d; %lld in use, %lld pinned",
                     what, (long long)need, reserve ? " beyond the reserve" : "",
                     (long long)(kv->n_free + kv->n_cached), (long long)kv->n_free,
                     (long long)kv->n_cached, kv->n_pages, (long long)kv->n_used,
                     (long long)kv->n_pinned);
}

int kv_need(st_kv *kv, int64_t n_pages, const char *what) {
    if (n_pages <= kv->n_free + kv->n_cached) return 0;
    return pool_full(kv, n_pages, 0, what);
}

int st_kv_admit(st_kv *kv, int64_t n_tokens) {
    if (n_tokens < 0) return st_seterr(kv->ctx, ST_E_INVAL, "kv: admit of %lld tokens",
                                       (long long)n_tokens);
    int64_t need = (n_tokens + kv->p.page_size - 1) / kv->p.page_size;
    if (need + kv->p.n_reserve <= kv->n_free + kv->n_cached) return 0;
    return pool_full(kv, need, kv->p.n_reserve, "admission");
}

/* (6): a cached page goes back to FREE (kv_page_alloc: the least recently used one; the
 * tier: the oldest one holding RAM or disk space it needs). */
void kv_cache_drop(st_kv *kv, int32_t id) {
    ST_ASSERT(id >= 0);
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state == KV_PAGE_CACHED && pg->refs == 0 && pg->pins == 0);
    kv_lru_remove(kv, id);
    kv_index_remove(kv, id);
    kv_tier_forget(kv, id);
    pg->registered = pg->has_key = 0;
    kv_unseal(kv, id);
    pg->state = KV_PAGE_FREE;
    pg->next = kv->free_head;
    kv->free_head = id;
    kv->n_cached--;
    kv->n_free++;
    kv->st.cache_evictions++;
}

static int32_t page_alloc(st_kv *kv, int zero) {
    if (kv->free_head < 0) kv_cache_drop(kv, kv->lru_head);
    int32_t id = kv->free_head;
    ST_ASSERT(id >= 0);
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state == KV_PAGE_FREE && pg->refs == 0 && pg->pins == 0);
    kv->free_head = pg->next;
    kv->n_free--;
    pg->next = pg->prev = pg->hnext = -1;
    pg->state = KV_PAGE_USED;
    pg->refs = 1;
    pg->has_key = pg->registered = 0;
    kv_unseal(kv, id);
    pg->last_use = ++kv->tick;
    kv->n_used++;
    kv_tier_new_page(kv, id, zero);
    return id;
}

int32_t kv_page_alloc(st_kv *kv) { return page_alloc(kv, 1); }
int32_t kv_page_alloc_filled(st_kv *kv) { return page_alloc(kv, 0); }

int kv_page_copy(st_kv *kv, int32_t src, int32_t *out) {
    *out = -1;
    if (kv->pages[src].resident == KV_RES_ERROR)
        return st_seterr(kv->ctx, kv->pages[src].err, "kv: page %d was lost earlier: %s", src,
                         st_strerror(kv->pages[src].err));
    int32_t id = kv_page_alloc(kv);
    int rc = 0;
    /* block by block: two frames at a time, whatever the number of layers; never-touched
     * blocks stay never-touched */
    for (int l = 0; l < kv->p.n_layer && !rc; l++) {
        if (kv->blk && kv_blk(kv, src, l)->res == KV_RES_ZERO) continue;
        if ((rc = kv_fetch_blk(kv, src, l)) != 0) break;
        if (kv->blk) kv_blk(kv, src, l)->hold++;
        rc = kv_fetch_blk(kv, id, l);
        if (kv->blk) kv_blk(kv, src, l)->hold--;
        if (!rc && kv->pages[src].resident == KV_RES_ERROR) /* lost making room */
            rc = st_seterr(kv->ctx, kv->pages[src].err, "kv: page %d was lost copying it: %s",
                           src, st_strerror(kv->pages[src].err));
        if (rc) break;
        memcpy(kv_layer_data(kv, id, l), kv_layer_data(kv, src, l), kv->g.layer_bytes);
        kv_dirty(kv, id, l);
    }
    if (rc) {
        kv_page_unref(kv, id);
        return rc;
    }
    kv->st.cow_copies++;
    *out = id;
    return 0;
}

void kv_page_ref(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state != KV_PAGE_FREE);
    if (pg->state == KV_PAGE_CACHED) { /* (5) */
        kv_lru_remove(kv, id);
        pg->state = KV_PAGE_USED;
        kv->n_cached--;
        kv->n_used++;
    }
    pg->refs++;
    pg->last_use = ++kv->tick;
}

/* (2) / (3): called when refs and pins have both reached zero. */
static void kv_page_release(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state == KV_PAGE_USED && pg->refs == 0 && pg->pins == 0);
    kv->n_used--;
    if (pg->registered) {
        pg->state = KV_PAGE_CACHED;
        kv_lru_push(kv, id);
        kv->n_cached++;
    } else {
        kv_tier_forget(kv, id);
        pg->state = KV_PAGE_FREE;
        pg->has_key = 0;
        kv_unseal(kv, id);
        pg->next = kv->free_head;
        kv->free_head = id;
        kv->n_free++;
    }
}

void kv_page_unref(st_kv *kv, int32_t id) {
    kv_page *pg = &kv->pages[id];
    /* A page-table entry names only USED pages (I2, I3): anything else is a double free. */
    ST_ASSERT(pg->state == KV_PAGE_USED && pg->refs > 0);
    if (--pg->refs == 0 && pg->pins == 0) kv_page_release(kv, id);
}

static int page_arg(const st_kv *kv, st_kv_page_id page, const char *fn) {
    if (page < 0 || page >= kv->n_pages)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: %s: page %d outside [0, %d)", fn, page,
                         kv->n_pages);
    return 0;
}

int st_kv_pin(st_kv *kv, st_kv_page_id page) {
    KV_CHECK_ON_RETURN(kv);
    int rc = page_arg(kv, page, "pin");
    if (rc) return rc;
    kv_page *pg = &kv->pages[page];
    if (pg->state != KV_PAGE_USED)
        return st_seterr(kv->ctx, ST_E_STATE, "kv: pin of page %d, which is %s (not in use)",
                         page, pg->state == KV_PAGE_FREE ? "free" : "only cached");
    /* Pinned pages stay in RAM and never move: a cold page is fetched first. */
    if ((rc = kv_fetch(kv, page)) != 0) return rc;
    if (pg->pins++ == 0) kv->n_pinned++;
    return 0;
}

int st_kv_unpin(st_kv *kv, st_kv_page_id page) {
    KV_CHECK_ON_RETURN(kv);
    int rc = page_arg(kv, page, "unpin");
    if (rc) return rc;
    kv_page *pg = &kv->pages[page];
    if (pg->state != KV_PAGE_USED || pg->pins == 0)
        return st_seterr(kv->ctx, ST_E_STATE, "kv: unpin of page %d, which is not pinned",
                         page);
    if (--pg->pins == 0) {
        kv->n_pinned--;
        if (pg->refs == 0) kv_page_release(kv, page);
    }
    return 0;
}

int st_kv_page_info(const st_kv *kv, st_kv_page_id page, int *refs, int *pins) {
    if (refs) *refs = 0;
    if (pins) *pins = 0;
    int rc = page_arg(kv, page, "page_info");
    if (rc) return rc;
    if (refs) *refs = kv->pages[page].refs;
    if (pins) *pins = kv->pages[page].pins;
    return 0;
}

int kv_seq_get(const st_kv *kv, st_kv_seq_id id, kv_seq **out) {
    *out = NULL;
    if (id < 0 || KV_SEQ_SLOT(id) >= kv->p.max_seqs)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: sequence id %lld is not a valid id",
                           (long long)id);
    kv_seq *s = kv->seqs[KV_SEQ_SLOT(id)];
    if (!s || s->id != id)
        return st_seterr(kv->ctx, ST_E_STATE, "kv: sequence id %lld is stale (freed)",
                           (long long)id);
    *out = s;
    return 0;
}

/* ---- invariant check ----------------------------------------------------------------- */

#define FAIL(...)                                        \
    do {                                                 \
        snprintf(msg, cap, __VA_ARGS__);                 \
        free(refs);                                      \
        return ST_E_STATE;                               \
    } while (0)

#define SFAIL(...)                                       \
    do {                                                 \
        snprintf(msg, cap, __VA_ARGS__);                 \
        return ST_E_STATE;                               \
    } while (0)

static int check_seq(const st_kv *kv, const kv_seq *s, int32_t *refs, char *msg, size_t cap) {
    const int P = kv->p.page_size;
    if (s->n_ent != (s->len + P - 1) / P) SFAIL("seq %lld: n_ent %lld for len %lld", (long long)s->id,
                                               (long long)s->n_ent, (long long)s->len);
    for (int64_t i = 0; i < s->n_ent; i++) {
        const kv_entry *e = &s->ent[i];
        int64_t want = i + 1 < s->n_ent ? P : s->len - i * P;
        if (e->n_tokens != want) SFAIL("seq %lld entry %lld: n_tokens %d, want %lld", (long long)s->id,
                                      (long long)i, e->n_tokens, (long long)want);
        int any = 0;
        for (int b = 0; b < P; b++) {
            int bit = (int)((e->mask[b >> 6] >> (b & 63)) & 1);
            if (e->has_mask && b >= e->n_tokens && bit)
                SFAIL("seq %lld entry %lld: mask bit %d past n_tokens", (long long)s->id,
                      (long long)i, b);
            any |= bit;
        }
        if (e->page < 0) continue;
        if (e->page >= kv->n_pages) SFAIL("seq %lld entry %lld: page %d", (long long)s->id, (long long)i,
                                         e->page);
        if (e->has_mask && !any && i + 1 < s->n_ent)
            SFAIL("seq %lld entry %lld: all-removed page %d not a hole", (long long)s->id,
                  (long long)i,
                 e->page);
        refs[e->page]++;
    }
    return 0;
}

#ifdef STRATA_CHECK
void kv_check_or_abort(const st_kv *kv, const char *call) {
    if (!kv) return;
    char msg[512];
    int rc = kv_check(kv, msg, sizeof msg);
    if (rc != ST_E_STATE) return; /* 0, or no memory to check with */
    fprintf(stderr, "strata: STRATA_CHECK: KV invariant broken after %s: %s\n", call, msg);
    fflush(stderr);
    abort();
}

void kv_check_scope_end(const kv_check_scope *s) { kv_check_or_abort(s->kv, s->call); }
#endif

int kv_check(const st_kv *kv, char *msg, size_t cap) {
    int32_t *refs = calloc((size_t)kv->n_pages, sizeof *refs);
    if (!refs) return ST_E_NOMEM;
    int64_t n_free = 0, n_cached = 0, n_used = 0, n_pinned = 0, n_reg = 0;
    for (int i = 0; i < kv->p.max_seqs; i++)
        if (kv->seqs[i] && check_seq(kv, kv->seqs[i], refs, msg, cap)) {
            free(refs);
            return ST_E_STATE;
        }
    for (int32_t i = 0, n = 0; i >= 0 && n <= kv->n_pages; n++) {
        i = n == 0 ? kv->free_head : kv->pages[i].next;
        if (i < 0) break;
        if (kv->pages[i].state != KV_PAGE_FREE) FAIL("free list holds non-free page %d", i);
        n_free++;
    }
    for (int32_t i = kv->lru_head; i >= 0; i = kv->pages[i].next) {
        if (kv->pages[i].state != KV_PAGE_CACHED) FAIL("LRU holds non-cached page %d", i);
        if (++n_cached > kv->n_pages) FAIL("LRU list loops");
    }
    for (int32_t i = 0; i < kv->n_pages; i++) {
        const kv_page *pg = &kv->pages[i];
        if (pg->refs != refs[i]) FAIL("page %d: refs %d but %d table entries", i, pg->refs,
                                      refs[i]);
        if (pg->pins) n_pinned++;
        if (pg->registered) {
            n_reg++;
            if (!pg->has_key || !pg->sealed) FAIL("page %d registered without key/seal", i);
            if (kv_index_find(kv, &pg->key, &pg->parent, kv->page_tokens + (size_t)i *
                              kv->p.page_size) != i)
                FAIL("page %d registered but not found in the index", i);
        }
        if (pg->has_key && !pg->sealed) FAIL("page %d keyed but not sealed", i);
        if (kv->qbox_ok[i] && !pg->sealed) FAIL("page %d has a Quest box but is not sealed", i);
        switch (pg->state) {
        case KV_PAGE_FREE:
            if (pg->refs || pg->pins || pg->sealed || pg->has_key || pg->registered)
                FAIL("free page %d: refs %d pins %d flags %d%d%d", i, pg->refs, pg->pins,
                     pg->sealed, pg->has_key, pg->registered);
            break;
        case KV_PAGE_CACHED:
            if (pg->refs || pg->pins || !pg->registered) FAIL("cached page %d bad", i);
            break;
        case KV_PAGE_USED:
            n_used++;
            if (!pg->refs && !pg->pins) FAIL("used page %d has no refs or pins", i);
            break;
        default: FAIL("page %d: state %d", i, pg->state);
        }
    }
    int64_t n_idx = 0;
    for (uint64_t b = 0; b <= kv->hash_mask; b++)
        for (int32_t i = kv->buckets[b]; i >= 0; i = kv->pages[i].hnext)
            if (++n_idx > kv->n_pages) FAIL("prefix index loops");
    if (n_idx != n_reg) FAIL("index holds %lld pages, %lld registered", (long long)n_idx,
                             (long long)n_reg);
    if (n_free != kv->n_free || n_cached != kv->n_cached || n_used != kv->n_used ||
        n_pinned != kv->n_pinned || n_free + n_cached + n_used != kv->n_pages)
        FAIL("counts: free %lld/%lld cached %lld/%lld used %lld/%lld pinned %lld/%lld",
             (long long)n_free, (long long)kv->n_free, (long long)n_cached,
             (long long)kv->n_cached, (long long)n_used, (long long)kv->n_used,
             (long long)n_pinned, (long long)kv->n_pinned);
    free(refs);
    if (kv_quest_tree_check(kv, msg, cap)) return ST_E_STATE;
    return kv_tier_check(kv, msg, cap);
}
