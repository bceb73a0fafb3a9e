/* Private layout of the KV page library (shared by kv_pool.c, kv_seq.c, kv_prefix.c,
 * kv_snapshot.c and, later, the SSD tier). The design essay is at the top of kv_pool.c. */
#ifndef STRATA_KV_INT_H
#define STRATA_KV_INT_H

#include "strata/kv.h"

#include <xxhash.h>

/* Page states (see the essay in kv_pool.c). The SSD tier splits USED and CACHED by
 * residency; the values below 16 are reserved for this library. */
enum kv_page_state {
    KV_PAGE_FREE = 0,   /* on the free list */
    KV_PAGE_USED = 1,   /* referenced by >= 1 page table entry, or pinned */
    KV_PAGE_CACHED = 2, /* refs == pins == 0, registered in the prefix index, on the LRU */
};

/* Residency of a USED or CACHED page (kv_page.resident; the SSD tier, see kv_pool.c).
 * KV_RES_RAM is 1 so that the byte keeps meaning "resident" for snapshots. */
enum kv_residency {
    KV_RES_NONE = 0,  /* FREE pages */
    KV_RES_RAM = 1,   /* holds a frame; clean when it also holds a slot, else dirty */
    KV_RES_ZERO = 2,  /* never touched since allocation: all zero, no frame, no slot */
    KV_RES_DISK = 3,  /* only the slot holds the data (maybe still being written behind) */
    KV_RES_ERROR = 4, /* its data is lost (err); the sequences naming it are failed */
    KV_RES_BLOCKS = 5, /* with a tier: live, each layer block has its own residency */
};

/* One (page, layer) block of a pool with an SSD tier: the unit of RAM residency (a frame
 * holds one layer block). Block b of page p is kv->blk[p * n_layer + l]. res is KV_RES_RAM,
 * KV_RES_ZERO or KV_RES_DISK while the page is live (KV_RES_BLOCKS), KV_RES_NONE otherwise. */
typedef struct kv_block {
    int32_t frame;        /* RAM: its frame, else -1 */
    int32_t rprev, rnext; /* hot LRU of blocks, least recently used first */
    int32_t hold;         /* operation-scoped pins of this block alone */
    uint8_t res;          /* enum kv_residency */
    uint8_t dirty;        /* RAM and not what the page's slot holds (always, without a slot) */
    uint8_t ahead;        /* read ahead and not used since (kv_attend.c's prefetch) */
    uint8_t pad_;
    uint32_t att_step;    /* low bits of the last decode step that used it; 0 = none */
    float score;          /* attention ledger: decayed share of heads that selected it ... */
    uint32_t score_step;  /* ... as of this decode step */
} kv_block;

typedef struct kv_page {
    int32_t refs;        /* page-table entries naming this page */
    int32_t pins;        /* st_kv_pin count */
    uint8_t state;       /* enum kv_page_state */
    uint8_t sealed;      /* full and committed: contents frozen while sealed */
    uint8_t has_key;     /* key/parent valid; tokens in kv->page_tokens */
    uint8_t registered;  /* in the prefix index (implies has_key) */
    uint8_t resident;    /* enum kv_residency */
    int32_t prev, next;  /* LRU links (CACHED) or free list link (FREE: next only) */
    int32_t hnext;       /* prefix index chain (registered) */
    uint64_t last_use;   /* kv->tick when last referenced: the residency score */
    st_kv_key key;       /* XXH3-128(parent, tokens, fingerprint) */
    st_kv_key parent;    /* key of the page before it (zero for the first page) */
    /* SSD tier */
    int32_t frame;       /* without a tier: its own id (live) or -1; with one: -1 (kv_block) */
    st_slot slot;        /* spill slot holding a copy of every layer block, else ST_SLOT_NONE */
    int32_t hold;        /* operation-scoped pins of every block: never evicted while > 0 */
    int32_t err;         /* KV_RES_ERROR: why */
    uint64_t gen;        /* spill generation: identity of the slot's contents */
} kv_page;

typedef struct kv_entry {
    int32_t page;     /* physical page, -1 = hole (whole page removed) */
    int32_t n_tokens; /* slots [0, n_tokens) reserved; P except in the tail entry */
    int32_t has_mask; /* 0: every reserved slot valid; 1: mask says which */
    int32_t pad_;
    uint64_t mask[ST_KV_MASK_WORDS]; /* bit s = slot s valid; bits >= n_tokens are 0 */
} kv_entry;

typedef struct kv_seq {
    st_kv_seq_id id;
    int64_t len;       /* positions [0, len) reserved */
    kv_entry *ent;     /* [n_ent] page table, n_ent == ceil(len / P) */
    int64_t n_ent, cap_ent;
    int32_t *tokens;   /* [len] token ids recorded at reserve, -1 unknown */
    int64_t cap_tok;
    int64_t seal_from; /* entries before it are sealed or holes (commit starts here) */
    int err;           /* sticky failure (I/O, checksum, half-done operation); 0 = fine */
} kv_seq;

struct st_kv {
    st_ctx *ctx; /* borrowed, for error messages */
    st_kv_params p;
    st_kv_geometry g;
    uint8_t *data;        /* the hot pool, 4096-aligned: without a tier [n_pages][page_bytes]
                             (frame == page), with one [n_frames][layer_bytes] */
    kv_page *pages;       /* [n_pages] */
    int32_t *page_tokens; /* [n_pages][P] token ids of keyed pages */
    int32_t n_pages;
    int32_t free_head;    /* singly linked through kv_page.next */
    int32_t lru_head, lru_tail; /* least recently used first */
    int64_t n_free, n_cached, n_used, n_pinned;
    int32_t *buckets;     /* [hash_mask + 1] prefix index heads */
    uint64_t hash_mask;
    kv_seq **seqs;        /* [max_seqs] by slot */
    uint32_t *gen;        /* [max_seqs] generation of each slot (wraps after 2^32 frees) */
    int n_seqs;
    uint64_t tick;
    st_kv_stats st;       /* the counters (page counts filled on demand) */
    /* Quest key boxes (kv_quest.c), in RAM whatever a page's residency. A page's box is
     * valid iff pg->sealed && qbox_ok[page]: every path that clears `sealed` thereby
     * invalidates it, and kv_quest_seal (from kv_seal_page) recomputes it. */
    uint16_t *qbox;       /* [n_layer][n_kv_head][n_pages][2][head_dim] f16: kmin then kmax,
                             rounded outward (st_attn_box_to_f16) */
    uint8_t *qbox_ok;     /* [n_pages] box computed at the page's last seal; implies sealed
                             (kv_unseal clears both) */
    st_attn_ws *qbox_ws;  /* the box kernels of the ctx's ISA (scalar without a ctx) */
    /* Quest group boxes (kv_quest_tree.c): the union of the valid boxes of each group of
     * qgroup consecutive physical pages; NULL when qgroup is 1 (flat ranking only) */
    int32_t qgroup, n_qgroups;
    uint16_t *qgbox;      /* [n_layer][n_kv_head][n_qgroups][2][head_dim] f16 */
    /* SSD tier (kv_tier.c); spill == NULL: no tier, frame == page id for every page */
    st_spill_dir *spill_dir;
    st_spill *spill;
    int32_t n_frames;     /* hot pool capacity: pages without a tier, layer blocks with one */
    size_t frame_bytes;   /* page_bytes without a tier, layer_bytes with one */
    kv_block *blk;        /* [n_pages * n_layer] with a tier, else NULL */
    int32_t *frame_free;  /* [n_frames] stack of free frames */
    int32_t n_frame_free;
    int32_t res_head, res_tail; /* hot LRU of blocks through kv_block.rprev/rnext */
    int64_t n_hot, n_cold; /* RAM / DISK blocks */
    uint64_t spill_gen;
    uint8_t *zero_blk;    /* [layer_bytes] zeros: the view of a never-touched block */
    uint8_t *rd_blk;      /* [layer_bytes] st_kv_read's buffer for a cold layer block */
    uint8_t *pg_buf;      /* [page_bytes] a page gathered from its blocks for a spill write */
    uint8_t *stream_buf[2]; /* [stream_cap] attention's streaming windows, kept across calls
                             * (fresh buffers per call cost a page fault per 4 KiB) */
    size_t stream_cap;
    struct kv_stream *stream; /* kv_stream.c: buffers reused across calls */
    uint64_t att_step;    /* decode attention steps: passes over the layers (kv_tier_step) */
    int att_layer;        /* layer of the last decode attention call */
    int32_t **last_sel;   /* [n_layer] the pages each layer's last decode call used (tier) */
    int32_t *last_n, *last_cap; /* [n_layer] */
    int64_t ahead_read, ahead_used; /* read-ahead blocks and those a decode step then used */
};

#define KV_SEQ_SLOT(id) ((int)((id) & 0xffff))
#define KV_SEQ_GEN(id) ((uint32_t)((id) >> 16))

/* Clears a page's sealed flag and with it its Quest box: qbox_ok[page] implies sealed
 * (kv_check), so selection, which tests a box per page of the context per layer, reads one
 * byte array instead of a kv_page each (a cache miss apiece at long contexts). */
void kv_quest_tree_withdraw(st_kv *kv, int32_t page);
static inline void kv_unseal(st_kv *kv, int32_t page) {
    kv->pages[page].sealed = 0;
    if (kv->qbox_ok[page]) kv_quest_tree_withdraw(kv, page); /* clears qbox_ok, shrinks its group */
}

static inline kv_block *kv_blk(const st_kv *kv, int32_t page, int layer) {
    return &kv->blk[(size_t)page * kv->p.n_layer + layer];
}
/* Block (page, layer) holds a frame (without a tier: the page is live). */
static inline int kv_blk_ram(const st_kv *kv, int32_t page, int layer) {
    return kv->blk ? kv_blk(kv, page, layer)->res == KV_RES_RAM
                   : kv->pages[page].resident == KV_RES_RAM;
}
static inline uint8_t *kv_layer_data(const st_kv *kv, int32_t page, int layer) {
    ST_ASSERT(kv_blk_ram(kv, page, layer));
    if (!kv->blk) return kv->data + (size_t)page * kv->g.page_bytes + (size_t)layer * kv->g.layer_bytes;
    return kv->data + (size_t)kv_blk(kv, page, layer)->frame * kv->g.layer_bytes;
}
static inline int kv_mask_get(const kv_entry *e, int s) {
    return !e->has_mask || ((e->mask[s >> 6] >> (s & 63)) & 1);
}

/* kv_pool.c */
int kv_need(st_kv *kv, int64_t n_pages, const char *what);
int32_t kv_page_alloc(st_kv *kv); /* zeroed, USED, refs 1; ST_ASSERT on empty: kv_need first */
/* kv_page_alloc keeping what the frame holds (kv_free_frame); no tier only. */
int32_t kv_page_alloc_filled(st_kv *kv);
void kv_page_ref(st_kv *kv, int32_t page);
void kv_page_unref(st_kv *kv, int32_t page);
/* A new exclusive page with src's bytes in *out (refs 1): 0, or a fetch error (nothing
 * changed). Needs one page from kv_need and up to two frames. */
int kv_page_copy(st_kv *kv, int32_t src, int32_t *out);
int kv_seq_get(const st_kv *kv, st_kv_seq_id id, kv_seq **out);
/* kv_seq_get, then the sequence's sticky error (with a message) if it failed. */
int kv_seq_get_ok(const st_kv *kv, st_kv_seq_id id, kv_seq **out);
void kv_cache_drop(st_kv *kv, int32_t page); /* CACHED -> FREE (unreferenced, unpinned) */
/* Full invariant check (tests, debug): 0 or ST_E_STATE with the first violation in msg. */
int kv_check(const st_kv *kv, char *msg, size_t cap);

/* STRATA_CHECK builds (cmake -DSTRATA_CHECK=ON; make test-asan) run kv_check when a public
 * call that may change kv returns, and abort naming the call and the broken invariant, so
 * a violation is reported by the call that made it rather than by whatever trips over it
 * later. KV_CHECK_ON_RETURN(kv), the first statement of such a function, checks as the
 * function's scope ends (the cleanup attribute: after the return value is computed, on
 * every return path, error paths included, since "on error nothing changed" must leave the
 * invariants whole too). KV_CHECK(kv, call) checks at that point (kv NULL: nothing). A
 * check that cannot allocate its scratch is skipped. Both compile to nothing without
 * STRATA_CHECK. */
#ifdef STRATA_CHECK
void kv_check_or_abort(const st_kv *kv, const char *call);
typedef struct kv_check_scope {
    const st_kv *kv;
    const char *call;
} kv_check_scope;
void kv_check_scope_end(const kv_check_scope *s);
#define KV_CHECK(kv, call) kv_check_or_abort((kv), (call))
#define KV_CHECK_ON_RETURN(kv)                                                                  \
    const kv_check_scope kv_check_scope_ __attribute__((cleanup(kv_check_scope_end), unused)) = \
        {(kv), __func__}
#else
#define KV_CHECK(kv, call) ((void)0)
#define KV_CHECK_ON_RETURN(kv) ((void)0)
#endif

/* kv_convert.c: element conversion into / out of a page's layer block */
void kv_store_token(st_kv *kv, uint8_t *layer_block, int slot, const float *k, const float *v);
void kv_load_token(const st_kv *kv, const uint8_t *layer_block, int slot, float *k, float *v);
void kv_zero_slots(st_kv *kv, int32_t page, int layer, int s0, int s1);

/* kv_prefix.c */
st_kv_key kv_key_compute(const st_kv *kv, const st_kv_key *parent, const int32_t *tokens);
int32_t kv_index_find(const st_kv *kv, const st_kv_key *key, const st_kv_key *parent,
                      const int32_t *tokens);
void kv_index_insert(st_kv *kv, int32_t page);
void kv_index_remove(st_kv *kv, int32_t page);
void kv_lru_remove(st_kv *kv, int32_t page);
void kv_lru_push(st_kv *kv, int32_t page);
/* Seals page `page` (entry index i of seq): key when tokens and parent are known. */
int kv_seal_page(st_kv *kv, kv_seq *s, int64_t i); /* 0 or a cold block's read error */

/* kv_quest.c: the Quest key boxes */
int kv_quest_alloc(st_kv *kv);  /* at create: ST_E_NOMEM */
/* A sparse selection's views: the page-table entry and physical page of each view, and
 * the sequence's entry count when it was made (so a stale selection is caught). */
void kv_select_views(const st_kv_select *s, const int32_t **ent, const int32_t **phys,
                     int64_t *n_ent);
void kv_quest_free(st_kv *kv);
/* At seal: the boxes of the full page `page` over all its P slots. */
int kv_quest_seal(st_kv *kv, int32_t page); /* 0, or a cold block's read error (tier) */
/* Snapshots: a page's boxes as [n_layer][n_kv_head][2][head_dim] f32 (kv_quest_box_bytes).
 * get: 1 and the boxes, or 0 and zeros (no box). set: src NULL = no box. check: every key
 * of the staged layer data (layer_stride apart; all P slots) lies inside the boxes:
 * 0 or ST_E_CORRUPT (msg). */
size_t kv_quest_box_bytes(const st_kv *kv);
int kv_quest_get_box(const st_kv *kv, int32_t page, uint8_t *dst);
void kv_quest_set_box(st_kv *kv, int32_t page, const uint8_t *src);
int kv_quest_check_box(const st_kv *kv, const uint8_t *data, size_t layer_stride,
                       const uint8_t *box, char *msg, size_t cap);
/* The k-th largest of v[0, n) (1 <= k <= n); w0, w1: n floats of scratch. */
float kv_quest_kth_largest(const float *v, float *w0, float *w1, int32_t n, int32_t k);

/* kv_quest_tree.c: the group boxes and the two-level ranking (its essay) */
int kv_quest_tree_alloc(st_kv *kv); /* at create (after qbox): 0 or ST_E_NOMEM */
void kv_quest_tree_free(st_kv *kv);
/* A page's box was just set (qbox_ok 1); had_box: it had one already (no unseal between). */
void kv_quest_tree_add(st_kv *kv, int32_t page, int had_box);
int kv_quest_tree_check(const st_kv *kv, char *msg, size_t cap); /* T1: 0 or ST_E_CORRUPT */
typedef struct kv_qtree_ws kv_qtree_ws;
void kv_quest_tree_ws_free(kv_qtree_ws *t);
/* Cuts the candidates (physical page phys[cand[c]] for c < n_cand, in view order) into runs
 * of one group each, in *t (made on first use). Returns the run count (0 without group
 * boxes), or ST_E_NOMEM. */
int kv_quest_tree_runs(const st_kv *kv, kv_qtree_ws **t, const int32_t *phys, const int32_t *cand,
                       int32_t n_cand, int32_t H);
/* KV head h's two-level ranking over the runs of the last kv_quest_tree_runs (0 < k < n_cand):
 * scores candidates into bound[c] (by candidate position); *pos: the scored positions,
 * ascending, *cb their bounds in that order (both owned by t, valid until its next use for
 * h); returns their count. Every candidate the flat ranking could choose is among them, with
 * all ties at the k-th bound (kv_quest_tree.c). *pos NULL: every candidate was scored
 * (returns n_cand). Heads may run on different threads. */
int32_t kv_quest_tree_head(const st_kv *kv, kv_qtree_ws *t, int layer, int h, const st_attn_ws *ws,
                           const float *qg, int32_t Gq, int32_t n_cand, int64_t k, float *bound,
                           const int32_t **pos, const float **cb);
static inline uint16_t *kv_qgbox(const st_kv *kv, int layer, int head, int32_t group) {
    return kv->qgbox +
           ((((size_t)layer * kv->p.n_kv_head + head) * kv->n_qgroups + group) * 2 * kv->p.head_dim);
}
static inline uint16_t *kv_qbox(const st_kv *kv, int layer, int head, int32_t page) {
    return kv->qbox +
           ((((size_t)layer * kv->p.n_kv_head + head) * kv->n_pages + page) * 2 *
            kv->p.head_dim);
}

/* kv_tier.c: residency by (page, layer) block (the tier half of the essay in kv_pool.c) */
int kv_tier_open(st_kv *kv);   /* at create (no-op without spill_dir): 0 or an error */
void kv_tier_close(st_kv *kv);
/* A new page's storage: without a tier its own frame (zeroed unless zero is 0, which only a
 * pool without a tier allows); with one every block starts KV_RES_ZERO (no frame). */
void kv_tier_new_page(st_kv *kv, int32_t page, int zero);
/* Without a tier every page owns its frame, free or not, so the frame of a FREE page is
 * scratch until the page is allocated: the snapshot reader stages records there and
 * allocates the page with kv_page_alloc_filled only once everything checked out. NULL with
 * a tier (frames move between blocks there). */
uint8_t *kv_free_frame(const st_kv *kv, int32_t page);
/* The page goes FREE (or is dropped): its frames and slot are released. */
void kv_tier_forget(st_kv *kv, int32_t page);
/* Makes block (page, layer) resident (fetching or materializing it; may evict other
 * blocks). Returns 0, ST_E_POOL_FULL (every frame pinned or held), ST_E_NOSPACE (eviction
 * could not spill), the page's sticky error, or the read error (the page and its sequences
 * then fail). kv_fetch: every block of the page (st_kv_pin), the page held meanwhile. */
int kv_fetch_blk(st_kv *kv, int32_t page, int layer);
int kv_fetch(st_kv *kv, int32_t page);
/* Batch fetch (kv_attend.c): a frame for cold block (page, layer) (which stays DISK; the
 * caller holds it; protect: KV_EVICT_PROTECT evicts no block this decode step used,
 * KV_EVICT_CLEAN no dirty one), then, after the caller's batch read, done attaches it
 * (rc 0) or fails the page. */
#define KV_EVICT_PROTECT 1
#define KV_EVICT_CLEAN 2
int kv_fetch_frame(st_kv *kv, int32_t page, int layer, int protect, int32_t *frame);
void kv_fetch_done(st_kv *kv, int32_t page, int layer, int32_t frame, int rc);
static inline uint8_t *kv_frame_data(const st_kv *kv, int32_t frame) {
    return kv->data + (size_t)frame * kv->g.layer_bytes;
}
/* Frames obtainable now without touching held or pinned blocks (counting stops at cap). */
int64_t kv_frames_obtainable(const st_kv *kv, int64_t cap);
/* ST_E_POOL_FULL for an operation that needs `need` frames of the hot pool at once, with
 * the counts (needed, obtainable, hot pool size, free frames, pinned, held) in the message. */
int kv_hot_full(st_kv *kv, int64_t need, const char *what);
/* Decode attention: step notes the layer (a layer at or below the last one starts a new
 * step); use marks a block the step needs, moves it to the hot LRU tail and adds w (the
 * share of KV heads that selected it) to its attention score; spare counts the frames
 * obtainable without evicting a held or pinned block or one this step used (counting stops
 * at cap). kv_protect_step: while set, eviction skips blocks this step used. */
void kv_tier_step(st_kv *kv, int layer);
void kv_tier_use(st_kv *kv, int32_t page, int layer, float w);
int64_t kv_frames_spare(const st_kv *kv, int64_t cap);
/* A block's decayed attention score now (the eviction rank; 0 without a tier). */
float kv_blk_score(const st_kv *kv, const kv_block *b);
/* Contents of block (page, layer) are about to change (it is RAM): it becomes dirty. */
void kv_dirty(st_kv *kv, int32_t page, int layer);
void kv_touch(st_kv *kv, int32_t page, int layer); /* most recently used */
static inline void kv_hold(st_kv *kv, int32_t page) { kv->pages[page].hold++; }
static inline void kv_unhold(st_kv *kv, int32_t page) {
    ST_ASSERT(kv->pages[page].hold > 0);
    kv->pages[page].hold--;
}
/* The page's data is lost with rc: ERROR, unregistered, every sequence naming it fails. */
void kv_page_fail(st_kv *kv, int32_t page, int rc);
/* Marks s failed with rc (first error wins); returns rc. */
int kv_seq_fail(st_kv *kv, kv_seq *s, int rc);
/* Reads layer `layer` of a page into buf[layer_bytes] (zeros for a never-touched block)
 * without changing its residency. Returns 0 or the error (the page fails). */
int kv_read_block(st_kv *kv, int32_t page, int layer, uint8_t *buf);
/* The bytes of block (page, layer): its frame when resident, else read into buf as
 * kv_read_block does. *out NULL on error. */
int kv_block_bytes(st_kv *kv, int32_t page, int layer, uint8_t *buf, const uint8_t **out);
/* Every block of the page is RAM (always, for a live page without a tier). */
int kv_page_in_ram(const st_kv *kv, int32_t page);
/* kv_tier_check.c: kv_check's tier part: 0 or ST_E_STATE with msg. */
int kv_tier_check(const st_kv *kv, char *msg, size_t cap);
/* kv_attend.c, kv_stream.c: attention through the tiers */
/* One sequence's view list for a layer: every page (dense), or with a selection only the
 * pages some head selected, in logical order, with the selection renumbered to match. */
typedef struct seq_views {
    kv_seq *s;
    st_attn_page *v;   /* [n] views; cold pages point at the zero block until read */
    int32_t *page;     /* [n] physical page of each view */
    uint8_t *cold;     /* [n] 1: the page is on disk (its view is a placeholder until read) */
    int32_t n;
    const st_kv_select *sel; /* NULL = dense */
    int32_t *sel_idx;  /* [H][sel_stride] per KV head, the selected views as indices into v */
    int32_t *sel_n;    /* [H] */
    int32_t sel_stride;
    int64_t lim;       /* > 0: only positions < lim are attended (dense only) */
} seq_views;

/* The attention view of block blk (NULL: none) of entry i, positions limited to lim (> 0).
 * Views are written field by field in place: they are rebuilt for every layer of every
 * decode step over the whole table (500 pages at 8k tokens), serial between two dispatches,
 * where a memset plus a returned copy per view doubled the time (docs/PERFORMANCE.md, KV
 * cache). */
static inline void kv_block_view(const st_kv *kv, const uint8_t *blk, const kv_entry *e, int64_t i,
                                 int64_t lim, st_attn_page *v) {
    const int q8 = blk && kv->p.type == ST_TYPE_Q8_0;
    v->k = blk;
    v->v = blk ? blk + kv->g.v_offset : NULL;
    v->k_scale = q8 ? (const float *)(blk + kv->g.scale_offset) : NULL;
    v->v_scale = q8 ? v->k_scale + kv->p.n_kv_head : NULL;
    v->valid = e->has_mask ? e->mask : NULL;
    v->n_tokens = e->n_tokens;
    v->pos0 = i * kv->p.page_size;
    /* a length limit (st_kv_attend_decode_at): slots at or past it are not attended */
    if (lim > 0 && v->pos0 + v->n_tokens > lim) v->n_tokens = (int32_t)(lim - v->pos0);
}

/* kv_stream.c: attends one sequence by streaming its cold blocks of `layer` a window at a
 * time through the two stream buffers, nothing evicted: decode (q -> out via partials) or
 * chunk (q[n_q] from position pos0_q -> out). 0 or an error set on ctx (a failed read
 * fails its page and sequences). */
int kv_stream_one(st_kv *kv, st_ctx *ctx, st_attn_ws *ws, const st_attn_geom *g, int layer,
                  seq_views *sv, int chunk, const float *q, int32_t n_q, int64_t pos0_q,
                  float *out);
void kv_attend_free(st_kv *kv); /* kv_stream.c: the stream buffers */

/* kv_snapshot.c: st_kv_snapshot_read; free_only: the snapshot's pages must all come from
 * the free list (ST_E_POOL_FULL otherwise), so that no cached page is evicted for it and a
 * caller can undo the restore exactly (st_kv_prefix_import's multi-part rollback). */
int kv_snapshot_read(st_kv *kv, st_kv_io *io, st_kv_seq_id *out_seqs, int max_seqs,
                     int *n_out, int free_only);

/* kv_seq.c */
int kv_seq_new(st_kv *kv, kv_seq **out);         /* registers a new empty sequence */
int kv_seq_grow(kv_seq *s, int64_t n_ent, int64_t len); /* capacity only, no state change */
void kv_seq_release_entry(st_kv *kv, kv_entry *e);

#endif
