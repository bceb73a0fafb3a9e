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
 * Page states and transitions (issue 3):
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
 *               empty: kv_evict (LRU head)      +--------+
 *
 *   transition                         function                        counters
 *   (1) FREE -> USED                   kv_page_alloc                   n_free--, n_used++
 *   (2) USED -> FREE                   kv_page_release                 n_used--, n_free++
 *   (3) USED -> CACHED                 kv_page_release                 n_used--, n_cached++
 *   (4) USED -> USED (ref/pin)         kv_page_ref, st_kv_pin          n_pinned on 0->1
 *   (5) CACHED -> USED                 kv_page_ref (from attach)       n_cached--, n_used++
 *   (6) CACHED -> FREE (-> USED)       kv_evict (inside kv_page_alloc) cache_evictions++
 *   seal (USED, flag)                  kv_seal_page (st_kv_seq_commit)
 *   unseal (USED, flag)                kv_make_writable (kv_seq.c) before a write
 *
 * Invariants (kv_check verifies every one; the randomized test calls it after each step):
 *   I1. Every page is in exactly one state. FREE pages are exactly the free list, CACHED
 *       pages exactly the LRU list; n_free + n_used + n_cached == n_pages.
 *   I2. refs(page) == the number of page-table entries, over all live sequences, naming it.
 *   I3. FREE   => refs == pins == 0, and no flag (sealed, has_key, registered) is set.
 *       CACHED => refs == pins == 0, registered.
 *       USED   => refs > 0 or pins > 0.
 *   I4. registered => has_key => sealed. The prefix index holds exactly the registered pages,
 *       at most one page per (key, parent, tokens).
 *   I5. A page's bytes change only while it is exclusive: refs == 1, not registered, not
 *       sealed (kv_make_writable establishes this, copying a shared page first: COW). So a
 *       sealed or shared page is immutable, which is what lets forks and the cache share it.
 *   I6. Per sequence: n_ent == ceil(len / P); every entry but the last has n_tokens == P;
 *       the last has n_tokens == len - (n_ent - 1) * P; mask bits >= n_tokens are 0; an
 *       entry whose mask is all zero is a hole (page -1) unless it is the tail entry.
 *   I7. An allocation is checked for the whole operation up front (kv_need): an operation
 *       either gets every page it needs or returns ST_E_POOL_FULL having changed nothing.
 *       Pinned and referenced pages are never taken, so a full pool fails at once rather
 *       than waiting for pages that the caller itself holds (the deadlock guard).
 *
 * Room for the tiers (issue 6). USED and CACHED gain a residency dimension:
 *
 *      RESIDENT --write--> DIRTY --writeback--> WRITING --I/O ok--> ON_DISK
 *         ^                                        | I/O error          |
 *         +------ LOADING <------- fetch ----------+--------------------+
 *                    | checksum mismatch / I/O error -> ERROR (sticky, per page; the
 *                    v                                  owning sequences fail cleanly)
 * Pinned pages are never written back; pinning an ON_DISK page fetches it first; the
 * eviction order is the LRU of kv_page.last_use (the ledger's "residency score"); sealing
 * is where issue 7 computes the per-page, per-head min/max key metadata, kept in RAM for
 * every page whatever its residency. The state byte's values below 16 are this file's.
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
    if (st_mul_overflow_u64((uint64_t)p.n_pages, kv->g.page_bytes, &slab) || slab > SIZE_MAX)
        goto nomem;
    kv->data = st_alloc_aligned((size_t)slab, ST_KV_LAYER_ALIGN);
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
        pg->resident = 1;
    }
    kv->free_head = 0;
    kv->n_free = kv->n_pages;
    kv->lru_head = kv->lru_tail = -1;
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
    st_free_aligned(kv->data);
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

/* (6): the least recently used cached page goes back to FREE. */
static void kv_evict(st_kv *kv) {
    int32_t id = kv->lru_head;
    ST_ASSERT(id >= 0);
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state == KV_PAGE_CACHED && pg->refs == 0 && pg->pins == 0);
    kv_lru_remove(kv, id);
    kv_index_remove(kv, id);
    pg->registered = pg->has_key = pg->sealed = 0;
    pg->state = KV_PAGE_FREE;
    pg->next = kv->free_head;
    kv->free_head = id;
    kv->n_cached--;
    kv->n_free++;
    kv->st.cache_evictions++;
}

int32_t kv_page_alloc(st_kv *kv) {
    if (kv->free_head < 0) kv_evict(kv);
    int32_t id = kv->free_head;
    ST_ASSERT(id >= 0);
    kv_page *pg = &kv->pages[id];
    ST_ASSERT(pg->state == KV_PAGE_FREE && pg->refs == 0 && pg->pins == 0);
    kv->free_head = pg->next;
    kv->n_free--;
    pg->next = pg->prev = pg->hnext = -1;
    pg->state = KV_PAGE_USED;
    pg->refs = 1;
    pg->sealed = pg->has_key = pg->registered = 0;
    pg->last_use = ++kv->tick;
    kv->n_used++;
    memset(kv_page_data(kv, id), 0, kv->g.page_bytes);
    return id;
}

int32_t kv_page_copy(st_kv *kv, int32_t src) {
    int32_t id = kv_page_alloc(kv);
    memcpy(kv_page_data(kv, id), kv_page_data(kv, src), kv->g.page_bytes);
    kv->st.cow_copies++;
    return id;
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
        pg->state = KV_PAGE_FREE;
        pg->sealed = pg->has_key = 0;
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
    int rc = page_arg(kv, page, "pin");
    if (rc) return rc;
    kv_page *pg = &kv->pages[page];
    if (pg->state != KV_PAGE_USED)
        return st_seterr(kv->ctx, ST_E_STATE, "kv: pin of page %d, which is %s (not in use)",
                         page, pg->state == KV_PAGE_FREE ? "free" : "only cached");
    if (pg->pins++ == 0) kv->n_pinned++;
    return 0;
}

int st_kv_unpin(st_kv *kv, st_kv_page_id page) {
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
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: sequence id %d is not a valid id", id);
    kv_seq *s = kv->seqs[KV_SEQ_SLOT(id)];
    if (!s || s->id != id)
        return st_seterr(kv->ctx, ST_E_STATE, "kv: sequence id %d is stale (freed)", id);
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
    if (s->n_ent != (s->len + P - 1) / P) SFAIL("seq %d: n_ent %lld for len %lld", s->id,
                                               (long long)s->n_ent, (long long)s->len);
    for (int64_t i = 0; i < s->n_ent; i++) {
        const kv_entry *e = &s->ent[i];
        int64_t want = i + 1 < s->n_ent ? P : s->len - i * P;
        if (e->n_tokens != want) SFAIL("seq %d entry %lld: n_tokens %d, want %lld", s->id,
                                      (long long)i, e->n_tokens, (long long)want);
        int any = 0;
        for (int b = 0; b < P; b++) {
            int bit = (int)((e->mask[b >> 6] >> (b & 63)) & 1);
            if (e->has_mask && b >= e->n_tokens && bit)
                SFAIL("seq %d entry %lld: mask bit %d past n_tokens", s->id, (long long)i, b);
            any |= bit;
        }
        if (e->page < 0) continue;
        if (e->page >= kv->n_pages) SFAIL("seq %d entry %lld: page %d", s->id, (long long)i,
                                         e->page);
        if (e->has_mask && !any && i + 1 < s->n_ent)
            SFAIL("seq %d entry %lld: all-removed page %d not a hole", s->id, (long long)i,
                 e->page);
        refs[e->page]++;
    }
    return 0;
}

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
    return 0;
}
