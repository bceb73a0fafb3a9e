/* Prefix cache: content keys of sealed full pages, the index from key to page, the LRU of
 * unreferenced cached pages, and lookup / attach / covers.
 *
 * key(page i) = XXH3-128(key(page i-1) [zero for i = 0], the page's P token ids as int32
 * little-endian, the caller's model fingerprint). A page is found only when its key, its
 * stored parent key AND its stored tokens all match, so a hash collision can never attach
 * a page computed from other tokens: the tokens of every page of the run are compared. */
#include "kv_int.h"

#include <stdlib.h>

st_kv_key kv_key_compute(const st_kv *kv, const st_kv_key *parent, const int32_t *tokens) {
    /* parent (16) | tokens (4 * P, little-endian) | fingerprint (16), hashed in one call */
    uint8_t buf[16 + 4 * ST_KV_PAGE_SIZE_MAX + 16];
    const int P = kv->p.page_size;
    memcpy(buf, parent->b, 16);
    for (int i = 0; i < P; i++) {
        uint32_t t = (uint32_t)tokens[i];
        uint8_t *o = buf + 16 + 4 * i;
        o[0] = (uint8_t)t;
        o[1] = (uint8_t)(t >> 8);
        o[2] = (uint8_t)(t >> 16);
        o[3] = (uint8_t)(t >> 24);
    }
    memcpy(buf + 16 + 4 * P, kv->p.fingerprint.b, 16);
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits(buf, (size_t)(32 + 4 * P)));
    st_kv_key k;
    memcpy(k.b, c.digest, sizeof k.b);
    return k;
}

static uint64_t bucket_of(const st_kv *kv, const st_kv_key *key) {
    uint64_t h;
    memcpy(&h, key->b, sizeof h);
    return h & kv->hash_mask;
}

int32_t kv_index_find(const st_kv *kv, const st_kv_key *key, const st_kv_key *parent,
                      const int32_t *tokens) {
    const size_t P = (size_t)kv->p.page_size;
    for (int32_t i = kv->buckets[bucket_of(kv, key)]; i >= 0; i = kv->pages[i].hnext) {
        const kv_page *pg = &kv->pages[i];
        if (memcmp(&pg->key, key, sizeof *key) == 0 &&
            memcmp(&pg->parent, parent, sizeof *parent) == 0 &&
            memcmp(kv->page_tokens + (size_t)i * P, tokens, P * sizeof(int32_t)) == 0)
            return i;
    }
    return -1;
}

void kv_index_insert(st_kv *kv, int32_t page) {
    kv_page *pg = &kv->pages[page];
    ST_ASSERT(pg->has_key && !pg->registered);
    uint64_t b = bucket_of(kv, &pg->key);
    pg->hnext = kv->buckets[b];
    kv->buckets[b] = page;
    pg->registered = 1;
}

void kv_index_remove(st_kv *kv, int32_t page) {
    kv_page *pg = &kv->pages[page];
    ST_ASSERT(pg->registered);
    int32_t *link = &kv->buckets[bucket_of(kv, &pg->key)];
    while (*link != page) {
        ST_ASSERT(*link >= 0);
        link = &kv->pages[*link].hnext;
    }
    *link = pg->hnext;
    pg->hnext = -1;
    pg->registered = 0;
}

void kv_lru_remove(st_kv *kv, int32_t page) {
    kv_page *pg = &kv->pages[page];
    if (pg->prev >= 0) kv->pages[pg->prev].next = pg->next;
    else kv->lru_head = pg->next;
    if (pg->next >= 0) kv->pages[pg->next].prev = pg->prev;
    else kv->lru_tail = pg->prev;
    pg->prev = pg->next = -1;
}

void kv_lru_push(st_kv *kv, int32_t page) {
    kv_page *pg = &kv->pages[page];
    pg->next = -1;
    pg->prev = kv->lru_tail;
    if (kv->lru_tail >= 0) kv->pages[kv->lru_tail].next = page;
    else kv->lru_head = page;
    kv->lru_tail = page;
}

int kv_seal_page(st_kv *kv, kv_seq *s, int64_t i) {
    const int P = kv->p.page_size;
    kv_entry *e = &s->ent[i];
    kv_page *pg = &kv->pages[e->page];
    ST_ASSERT(e->n_tokens == P && !pg->sealed);
    pg->sealed = 1;
    int rc = kv_quest_seal(kv, e->page); /* Quest: the per-head key boxes */
    if (rc) {
        kv_unseal(kv, e->page);
        return rc;
    }
    /* A page sealed with removed slots may lack their K/V (a removed tail refilled on a
     * fresh page), so only a page whose every slot is present gets a content key. */
    if (e->has_mask) return 0;
    const int32_t *tok = s->tokens + i * P;
    for (int j = 0; j < P; j++)
        if (tok[j] < 0) return 0;
    st_kv_key parent;
    memset(&parent, 0, sizeof parent);
    if (i > 0) {
        const kv_entry *pe = &s->ent[i - 1];
        if (pe->page < 0 || !kv->pages[pe->page].has_key) return 0;
        parent = kv->pages[pe->page].key;
    }
    pg->key = kv_key_compute(kv, &parent, tok);
    pg->parent = parent;
    pg->has_key = 1;
    memcpy(kv->page_tokens + (size_t)e->page * P, tok, (size_t)P * sizeof(int32_t));
    /* One page per content: a duplicate stays keyed (its children can chain from it) but
     * unregistered, and goes straight back to FREE when released. */
    if (kv_index_find(kv, &pg->key, &pg->parent, tok) < 0) kv_index_insert(kv, e->page);
    return 0;
}

/* The run of cached pages for tokens[n]: ids into pages[max_pages], count returned. */
static int64_t find_run(const st_kv *kv, const int32_t *tokens, int64_t n, int32_t *pages) {
    const int P = kv->p.page_size;
    st_kv_key parent;
    memset(&parent, 0, sizeof parent);
    int64_t k = 0;
    for (; (k + 1) * P <= n; k++) {
        const int32_t *tok = tokens + k * P;
        int j = 0;
        while (j < P && tok[j] >= 0) j++;
        if (j < P) break;
        st_kv_key key = kv_key_compute(kv, &parent, tok);
        int32_t id = kv_index_find(kv, &key, &parent, tok);
        if (id < 0) break;
        if (pages) pages[k] = id;
        parent = key;
    }
    return k;
}

int st_kv_prefix_lookup(const st_kv *kv, const int32_t *tokens, int64_t n, int64_t *n_cached) {
    if (!n_cached) return st_seterr(kv->ctx, ST_E_INVAL, "kv: prefix_lookup: n_cached NULL");
    *n_cached = 0;
    if (n < 0 || (n > 0 && !tokens))
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: prefix_lookup: bad tokens/n");
    *n_cached = find_run(kv, tokens, n, NULL) * kv->p.page_size;
    return 0;
}

int st_kv_prefix_attach(st_kv *kv, st_kv_seq_id seq, const int32_t *tokens, int64_t n,
                        int64_t *n_attached) {
    KV_CHECK_ON_RETURN(kv);
    if (n_attached) *n_attached = 0;
    if (n < 0 || (n > 0 && !tokens))
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: prefix_attach: bad tokens/n");
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    if (s->len != 0)
        return st_seterr(kv->ctx, ST_E_STATE,
                         "kv: prefix_attach: sequence %lld is not empty (length %lld)", (long long)seq,
                         (long long)s->len);
    const int P = kv->p.page_size;
    int32_t *pages = malloc((size_t)(n / P + 1) * sizeof *pages);
    if (!pages) return st_seterr(kv->ctx, ST_E_NOMEM, "kv: prefix_attach: out of memory");
    int64_t k = find_run(kv, tokens, n, pages);
    if (k > 0 && (rc = kv_seq_grow(s, k, k * P)) != 0) {
        free(pages);
        return st_seterr(kv->ctx, rc, "kv: prefix_attach: out of memory");
    }
    for (int64_t i = 0; i < k; i++) {
        kv_page_ref(kv, pages[i]);
        kv_entry *e = &s->ent[i];
        memset(e, 0, sizeof *e);
        e->page = pages[i];
        e->n_tokens = P;
    }
    if (k > 0) memcpy(s->tokens, tokens, (size_t)(k * P) * sizeof(int32_t));
    s->n_ent = k;
    s->len = k * P;
    s->seal_from = k;
    free(pages);
    if (k > 0) kv->st.prefix_hits++;
    else kv->st.prefix_misses++;
    kv->st.prefix_tokens_queried += n;
    kv->st.prefix_tokens_reused += k * P;
    if (n_attached) *n_attached = k * P;
    return 0;
}

int st_kv_prefix_covers(const st_kv *kv, st_kv_seq_id seq, const int32_t *tokens, int64_t n,
                        int *covers) {
    if (!covers) return st_seterr(kv->ctx, ST_E_INVAL, "kv: prefix_covers: covers NULL");
    *covers = 0;
    if (n < 0 || (n > 0 && !tokens))
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: prefix_covers: bad tokens/n");
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    if (n > s->len) return 0;
    const int P = kv->p.page_size;
    for (int64_t pos = 0; pos < n; pos++) {
        const kv_entry *e = &s->ent[pos / P];
        if (e->page < 0 || !kv_mask_get(e, (int)(pos % P)) || s->tokens[pos] < 0 ||
            s->tokens[pos] != tokens[pos])
            return 0;
    }
    *covers = 1;
    return 0;
}
