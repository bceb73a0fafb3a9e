/* Private layout of the KV page library (shared by kv_pool.c, kv_seq.c, kv_prefix.c,
 * kv_snapshot.c and, later, the SSD tier). The design essay is at the top of kv_pool.c. */
#ifndef STRATA_KV_INT_H
#define STRATA_KV_INT_H

#include "strata/kv.h"

#include <xxhash.h>

/* Page states (see the essay in kv_pool.c). The tier (issue 6) splits USED and CACHED by
 * residency; the values below 16 are reserved for this library. */
enum kv_page_state {
    KV_PAGE_FREE = 0,   /* on the free list */
    KV_PAGE_USED = 1,   /* referenced by >= 1 page table entry, or pinned */
    KV_PAGE_CACHED = 2, /* refs == pins == 0, registered in the prefix index, on the LRU */
};

typedef struct kv_page {
    int32_t refs;        /* page-table entries naming this page */
    int32_t pins;        /* st_kv_pin count */
    uint8_t state;       /* enum kv_page_state */
    uint8_t sealed;      /* full and committed: contents frozen while sealed */
    uint8_t has_key;     /* key/parent valid; tokens in kv->page_tokens */
    uint8_t registered;  /* in the prefix index (implies has_key) */
    uint8_t resident;    /* always 1 until the tier exists */
    int32_t prev, next;  /* LRU links (CACHED) or free list link (FREE: next only) */
    int32_t hnext;       /* prefix index chain (registered) */
    uint64_t last_use;   /* kv->tick when last referenced: the residency score */
    st_kv_key key;       /* XXH3-128(parent, tokens, fingerprint) */
    st_kv_key parent;    /* key of the page before it (zero for the first page) */
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
} kv_seq;

struct st_kv {
    st_ctx *ctx; /* borrowed, for error messages */
    st_kv_params p;
    st_kv_geometry g;
    uint8_t *data;        /* [n_pages][page_bytes], 4096-aligned */
    kv_page *pages;       /* [n_pages] */
    int32_t *page_tokens; /* [n_pages][P] token ids of keyed pages */
    int32_t n_pages;
    int32_t free_head;    /* singly linked through kv_page.next */
    int32_t lru_head, lru_tail; /* least recently used first */
    int64_t n_free, n_cached, n_used, n_pinned;
    int32_t *buckets;     /* [hash_mask + 1] prefix index heads */
    uint64_t hash_mask;
    kv_seq **seqs;        /* [max_seqs] by slot */
    uint16_t *gen;        /* [max_seqs] generation of each slot */
    int n_seqs;
    uint64_t tick;
    st_kv_stats st;       /* the counters (page counts filled on demand) */
    /* Quest key boxes (kv_quest.c), in RAM whatever a page's residency. A page's box is
     * valid iff pg->sealed && qbox_ok[page]: every path that clears `sealed` thereby
     * invalidates it, and kv_quest_seal (from kv_seal_page) recomputes it. */
    float *qbox;          /* [n_layer][n_kv_head][n_pages][2][head_dim]: kmin then kmax */
    uint8_t *qbox_ok;     /* [n_pages] box computed at the page's last seal */
};

#define KV_SEQ_SLOT(id) ((int)((id) & 0xffff))
#define KV_SEQ_GEN(id) ((int)(((id) >> 16) & 0x7fff))

static inline uint8_t *kv_page_data(const st_kv *kv, int32_t page) {
    return kv->data + (size_t)page * kv->g.page_bytes;
}
static inline uint8_t *kv_layer_data(const st_kv *kv, int32_t page, int layer) {
    return kv_page_data(kv, page) + (size_t)layer * kv->g.layer_bytes;
}
static inline int kv_mask_get(const kv_entry *e, int s) {
    return !e->has_mask || ((e->mask[s >> 6] >> (s & 63)) & 1);
}

/* kv_pool.c */
int kv_need(st_kv *kv, int64_t n_pages, const char *what);
int32_t kv_page_alloc(st_kv *kv); /* zeroed, USED, refs 1; ST_ASSERT on empty: kv_need first */
void kv_page_ref(st_kv *kv, int32_t page);
void kv_page_unref(st_kv *kv, int32_t page);
int32_t kv_page_copy(st_kv *kv, int32_t src); /* new exclusive page with src's bytes */
int kv_seq_get(const st_kv *kv, st_kv_seq_id id, kv_seq **out);
/* Full invariant check (tests, debug): 0 or ST_E_STATE with the first violation in msg. */
int kv_check(const st_kv *kv, char *msg, size_t cap);

/* kv_convert.c: element conversion into / out of a page's layer block */
void kv_store_token(st_kv *kv, uint8_t *layer_block, int slot, const float *k, const float *v);
void kv_load_token(const st_kv *kv, const uint8_t *layer_block, int slot, float *k, float *v);
void kv_zero_slots(st_kv *kv, int32_t page, int s0, int s1);

/* kv_prefix.c */
st_kv_key kv_key_compute(const st_kv *kv, const st_kv_key *parent, const int32_t *tokens);
int32_t kv_index_find(const st_kv *kv, const st_kv_key *key, const st_kv_key *parent,
                      const int32_t *tokens);
void kv_index_insert(st_kv *kv, int32_t page);
void kv_index_remove(st_kv *kv, int32_t page);
void kv_lru_remove(st_kv *kv, int32_t page);
void kv_lru_push(st_kv *kv, int32_t page);
/* Seals page `page` (entry index i of seq): key when tokens and parent are known. */
void kv_seal_page(st_kv *kv, kv_seq *s, int64_t i);

/* kv_quest.c: the Quest key boxes */
int kv_quest_alloc(st_kv *kv);  /* at create: ST_E_NOMEM */
void kv_quest_free(st_kv *kv);
/* At seal: the box of `page` over entry e's valid slots (all P when no mask). */
void kv_quest_seal(st_kv *kv, int32_t page, const kv_entry *e);
static inline float *kv_qbox(const st_kv *kv, int layer, int head, int32_t page) {
    return kv->qbox +
           ((((size_t)layer * kv->p.n_kv_head + head) * kv->n_pages + page) * 2 *
            kv->p.head_dim);
}

/* kv_seq.c */
int kv_seq_new(st_kv *kv, kv_seq **out);         /* registers a new empty sequence */
int kv_seq_grow(kv_seq *s, int64_t n_ent, int64_t len); /* capacity only, no state change */
void kv_seq_release_entry(st_kv *kv, kv_entry *e);

#endif
