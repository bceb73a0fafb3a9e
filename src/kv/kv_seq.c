/* Sequences: page tables, reserve/write/commit, read, truncate, remove, fork, views.
 * The state machine these functions drive, and its invariants, are described at the top
 * of kv_pool.c. Every mutating function validates its arguments and obtains every page it
 * will need (kv_need) before it changes anything, so an error leaves no trace. */
#include "kv_int.h"

#include <stdlib.h>

int kv_seq_grow(kv_seq *s, int64_t n_ent, int64_t len) {
    if (n_ent > s->cap_ent) {
        int64_t cap = s->cap_ent ? s->cap_ent : 4;
        while (cap < n_ent) cap *= 2;
        kv_entry *e = realloc(s->ent, (size_t)cap * sizeof *e);
        if (!e) return ST_E_NOMEM;
        s->ent = e;
        s->cap_ent = cap;
    }
    if (len > s->cap_tok) {
        int64_t cap = s->cap_tok ? s->cap_tok : 64;
        while (cap < len) cap *= 2;
        int32_t *t = realloc(s->tokens, (size_t)cap * sizeof *t);
        if (!t) return ST_E_NOMEM;
        s->tokens = t;
        s->cap_tok = cap;
    }
    return 0;
}

int kv_seq_new(st_kv *kv, kv_seq **out) {
    *out = NULL;
    if (kv->n_seqs >= kv->p.max_seqs)
        return st_seterr(kv->ctx, ST_E_LIMIT, "kv: %d sequences live, the limit (max_seqs)",
                         kv->n_seqs);
    kv_seq *s = calloc(1, sizeof *s);
    if (!s) return st_seterr(kv->ctx, ST_E_NOMEM, "kv: out of memory for a sequence");
    int slot = 0;
    while (kv->seqs[slot]) slot++;
    s->id = (st_kv_seq_id)slot | (st_kv_seq_id)kv->gen[slot] << 16;
    kv->seqs[slot] = s;
    kv->n_seqs++;
    *out = s;
    return 0;
}

void kv_seq_release_entry(st_kv *kv, kv_entry *e) {
    if (e->page >= 0) kv_page_unref(kv, e->page);
    e->page = -1;
    e->has_mask = 0;
    memset(e->mask, 0, sizeof e->mask);
}

int st_kv_seq_create(st_kv *kv, st_kv_seq_id *out) {
    KV_CHECK_ON_RETURN(kv);
    if (!out) return st_seterr(kv->ctx, ST_E_INVAL, "kv: seq_create: out is NULL");
    *out = -1;
    kv_seq *s;
    int rc = kv_seq_new(kv, &s);
    if (rc) return rc;
    *out = s->id;
    return 0;
}

int st_kv_seq_free(st_kv *kv, st_kv_seq_id seq) {
    KV_CHECK_ON_RETURN(kv);
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    for (int64_t i = 0; i < s->n_ent; i++) kv_seq_release_entry(kv, &s->ent[i]);
    int slot = KV_SEQ_SLOT(seq);
    kv->seqs[slot] = NULL;
    kv->gen[slot]++; /* uint32_t: wraps after 2^32 frees of this slot */
    kv->n_seqs--;
    free(s->ent);
    free(s->tokens);
    free(s);
    return 0;
}

int st_kv_seq_fork(st_kv *kv, st_kv_seq_id src, st_kv_seq_id *dst) {
    KV_CHECK_ON_RETURN(kv);
    if (!dst) return st_seterr(kv->ctx, ST_E_INVAL, "kv: fork: dst is NULL");
    *dst = -1;
    kv_seq *s, *d;
    int rc = kv_seq_get_ok(kv, src, &s);
    if (rc) return rc;
    if ((rc = kv_seq_new(kv, &d)) != 0) return rc;
    if (kv_seq_grow(d, s->n_ent, s->len)) {
        st_kv_seq_free(kv, d->id);
        return st_seterr(kv->ctx, ST_E_NOMEM, "kv: fork: out of memory");
    }
    if (s->n_ent) memcpy(d->ent, s->ent, (size_t)s->n_ent * sizeof *d->ent);
    if (s->len) memcpy(d->tokens, s->tokens, (size_t)s->len * sizeof *d->tokens);
    for (int64_t i = 0; i < s->n_ent; i++)
        if (d->ent[i].page >= 0) kv_page_ref(kv, d->ent[i].page);
    d->n_ent = s->n_ent;
    d->len = s->len;
    d->seal_from = s->seal_from;
    kv->st.forks++;
    *dst = d->id;
    return 0;
}

int st_kv_seq_len(const st_kv *kv, st_kv_seq_id seq, int64_t *len) {
    if (!len) return st_seterr(kv->ctx, ST_E_INVAL, "kv: seq_len: len is NULL");
    *len = 0;
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    *len = s->len;
    return 0;
}

static int pos_valid(const st_kv *kv, const kv_seq *s, int64_t pos) {
    const kv_entry *e = &s->ent[pos / kv->p.page_size];
    return e->page >= 0 && kv_mask_get(e, (int)(pos % kv->p.page_size));
}

int st_kv_seq_valid(const st_kv *kv, st_kv_seq_id seq, int64_t pos, int *valid) {
    if (!valid) return st_seterr(kv->ctx, ST_E_INVAL, "kv: seq_valid: valid is NULL");
    *valid = 0;
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    if (pos < 0) return st_seterr(kv->ctx, ST_E_INVAL, "kv: seq_valid: position %lld",
                                  (long long)pos);
    *valid = pos < s->len && pos_valid(kv, s, pos);
    return 0;
}

/* Makes entry i's page exclusive and mutable (I5), its block of `layer` (>= 0) resident
 * and dirty (it is about to change): copy a shared page (COW), or take a sole page out of
 * the prefix index and unseal it. The caller checked kv_need. Returns 0 or a fetch error,
 * in which case nothing visible changed. */
static int make_writable(st_kv *kv, kv_seq *s, int64_t i, int layer) {
    kv_entry *e = &s->ent[i];
    ST_ASSERT(e->page >= 0);
    int rc;
    if (kv->pages[e->page].resident == KV_RES_ERROR)
        return st_seterr(kv->ctx, kv->pages[e->page].err, "kv: page %d was lost earlier: %s",
                         e->page, st_strerror(kv->pages[e->page].err));
    if (kv->pages[e->page].refs > 1) {
        int32_t np;
        if ((rc = kv_page_copy(kv, e->page, &np)) != 0) return rc;
        kv_page_unref(kv, e->page);
        e->page = np;
    } else {
        kv_page *pg = &kv->pages[e->page];
        if (pg->registered) kv_index_remove(kv, e->page);
        pg->has_key = 0;
        kv_unseal(kv, e->page);
    }
    if (i < s->seal_from) s->seal_from = i;
    if (layer < 0) return 0;
    if ((rc = kv_fetch_blk(kv, e->page, layer)) != 0) return rc;
    kv_dirty(kv, e->page, layer);
    return 0;
}

int kv_seq_get_ok(const st_kv *kv, st_kv_seq_id id, kv_seq **out) {
    int rc = kv_seq_get(kv, id, out);
    if (rc || !(*out)->err) return rc;
    rc = (*out)->err;
    *out = NULL;
    return st_seterr(kv->ctx, rc, "kv: sequence %lld failed earlier (%s); free it", (long long)id,
                     st_strerror(rc));
}

static int needs_copy(const st_kv *kv, const kv_entry *e) {
    return e->page < 0 || kv->pages[e->page].refs > 1;
}

int st_kv_seq_reserve(st_kv *kv, st_kv_seq_id seq, int64_t n, const int32_t *tokens,
                      int64_t *pos0) {
    KV_CHECK_ON_RETURN(kv);
    if (pos0) *pos0 = 0;
    kv_seq *s;
    int rc = kv_seq_get_ok(kv, seq, &s);
    if (rc) return rc;
    const int P = kv->p.page_size;
    const int64_t max_len = (int64_t)ST_KV_MAX_PAGES * P;
    if (n < 1 || n > max_len - s->len)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: reserve of %lld tokens at length %lld "
                         "(limit %lld)", (long long)n, (long long)s->len, (long long)max_len);
    const int64_t len0 = s->len, len1 = len0 + n;
    const int64_t n_ent0 = s->n_ent, n_ent1 = (len1 + P - 1) / P;
    const int tail_partial = (len0 % P) != 0;
    int64_t need = n_ent1 - n_ent0;
    if (tail_partial && needs_copy(kv, &s->ent[n_ent0 - 1])) need++;
    if ((rc = kv_need(kv, need, "reserve")) != 0) return rc;
    if (kv_seq_grow(s, n_ent1, len1))
        return st_seterr(kv->ctx, ST_E_NOMEM, "kv: reserve: out of memory");
    /* The tail's new slots are zeroed: it must be exclusive and in RAM (the only step that
     * can fail: a fetch; the content of the page is unchanged until it succeeded). */
    if (tail_partial && s->ent[n_ent0 - 1].page >= 0) {
        kv_entry *e = &s->ent[n_ent0 - 1];
        if ((rc = make_writable(kv, s, n_ent0 - 1, -1)) != 0) return rc;
        /* With the tier the new slots are zeroed block by block as each is fetched; a
         * failure half-way leaves zeros only in slots past n_tokens, which nothing reads. */
        const int s1 = (int)(len1 - (n_ent0 - 1) * P < P ? len1 - (n_ent0 - 1) * P : P);
        for (int l = 0; kv->blk && l < kv->p.n_layer; l++) {
            if (kv_blk(kv, e->page, l)->res == KV_RES_ZERO) continue; /* zeros already */
            if ((rc = kv_fetch_blk(kv, e->page, l)) != 0) return rc;
            kv_dirty(kv, e->page, l);
            kv_zero_slots(kv, e->page, l, e->n_tokens, s1);
        }
    }
    /* From here on nothing can fail. */
    if (tail_partial) {
        kv_entry *e = &s->ent[n_ent0 - 1];
        int s1 = (int)(len1 - (n_ent0 - 1) * P < P ? len1 - (n_ent0 - 1) * P : P);
        if (e->page < 0) { /* the tail was removed: a fresh page, old slots stay invalid */
            e->page = kv_page_alloc(kv);
            e->has_mask = 1;
            memset(e->mask, 0, sizeof e->mask);
            if (n_ent0 - 1 < s->seal_from) s->seal_from = n_ent0 - 1;
        } else if (!kv->blk) {
            for (int l = 0; l < kv->p.n_layer; l++) kv_zero_slots(kv, e->page, l, e->n_tokens, s1);
        }
        if (e->has_mask)
            for (int b = e->n_tokens; b < s1; b++) e->mask[b >> 6] |= 1ull << (b & 63);
        e->n_tokens = s1;
    }
    for (int64_t i = n_ent0; i < n_ent1; i++) {
        kv_entry *e = &s->ent[i];
        memset(e, 0, sizeof *e);
        e->page = kv_page_alloc(kv);
        e->n_tokens = (int32_t)(len1 - i * P < P ? len1 - i * P : P);
    }
    for (int64_t j = 0; j < n; j++) s->tokens[len0 + j] = tokens && tokens[j] >= 0 ? tokens[j] : -1;
    s->n_ent = n_ent1;
    s->len = len1;
    if (pos0) *pos0 = len0;
    return 0;
}

static int check_range(const st_kv *kv, const kv_seq *s, int layer, int64_t pos, int64_t n,
                       const char *fn) {
    if (layer < 0 || layer >= kv->p.n_layer)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: %s: layer %d outside [0, %d)", fn, layer,
                         kv->p.n_layer);
    if (pos < 0 || n < 0 || n > s->len - pos)
        return st_seterr(kv->ctx, ST_E_INVAL,
                         "kv: %s: positions [%lld, %lld + %lld) outside [0, %lld) of seq %lld",
                         fn, (long long)pos, (long long)pos, (long long)n, (long long)s->len,
                         (long long)s->id);
    for (int64_t p = pos; p < pos + n; p++)
        if (!pos_valid(kv, s, p))
            return st_seterr(kv->ctx, ST_E_NOT_FOUND, "kv: %s: position %lld of seq %lld was "
                             "removed", fn, (long long)p, (long long)s->id);
    return 0;
}

int st_kv_write(st_kv *kv, st_kv_seq_id seq, int layer, int64_t pos, int64_t n,
                const float *k, const float *v) {
    KV_CHECK_ON_RETURN(kv);
    kv_seq *s;
    int rc = kv_seq_get_ok(kv, seq, &s);
    if (rc) return rc;
    if (n > 0 && (!k || !v)) return st_seterr(kv->ctx, ST_E_INVAL, "kv: write: k or v NULL");
    if ((rc = check_range(kv, s, layer, pos, n, "write")) != 0 || n == 0) return rc;
    const int P = kv->p.page_size;
    const int64_t i0 = pos / P, i1 = (pos + n - 1) / P;
    int64_t need = 0;
    for (int64_t i = i0; i <= i1; i++) need += needs_copy(kv, &s->ent[i]);
    if ((rc = kv_need(kv, need, "copy-on-write")) != 0) return rc;
    /* Page by page (a range may be larger than the hot pool): a page and the source of its
     * copy are held at once, so two obtainable frames mean no POOL_FULL half-way. */
    if (kv->spill && kv_frames_obtainable(kv, 2) < (need ? 2 : 1))
        return kv_hot_full(kv, need ? 2 : 1, need ? "write (copy-on-write)" : "write");
    const size_t row = (size_t)kv->p.n_kv_head * kv->p.head_dim;
    for (int64_t i = i0; i <= i1; i++) {
        if ((rc = make_writable(kv, s, i, layer)) != 0) /* half done: the sequence is not sound */
            return i > i0 ? kv_seq_fail(kv, s, rc) : rc;
        const int32_t page = s->ent[i].page;
        uint8_t *blk = kv_layer_data(kv, page, layer);
        const int64_t p0 = i * P > pos ? i * P : pos;
        const int64_t p1 = (i + 1) * P < pos + n ? (i + 1) * P : pos + n;
        for (int64_t p = p0; p < p1; p++)
            kv_store_token(kv, blk, (int)(p % P), k + (p - pos) * row, v + (p - pos) * row);
    }
    return 0;
}

int st_kv_seq_commit(st_kv *kv, st_kv_seq_id seq) {
    KV_CHECK_ON_RETURN(kv);
    kv_seq *s;
    int rc = kv_seq_get_ok(kv, seq, &s);
    if (rc) return rc;
    const int P = kv->p.page_size;
    for (int64_t i = s->seal_from; i < s->n_ent; i++) {
        const kv_entry *e = &s->ent[i];
        if (e->n_tokens < P) break;
        if (e->page < 0 || kv->pages[e->page].sealed) continue;
        /* Sealing reads the page (the Quest boxes) layer by layer, cold blocks without
         * fetching them. A failure leaves seal_from where it was, so a later commit resumes
         * here. */
        if (kv->pages[e->page].resident == KV_RES_ERROR)
            return st_seterr(kv->ctx, kv->pages[e->page].err, "kv: page %d was lost earlier: %s",
                             e->page, st_strerror(kv->pages[e->page].err));
        kv_hold(kv, e->page);
        rc = kv_seal_page(kv, s, i);
        kv_unhold(kv, e->page);
        if (rc) return rc;
    }
    s->seal_from = (s->len % P) ? s->n_ent - 1 : s->n_ent;
    return 0;
}

int st_kv_seq_append(st_kv *kv, st_kv_seq_id seq, int64_t n, const int32_t *tokens,
                     const float *k, const float *v) {
    KV_CHECK_ON_RETURN(kv);
    if (!k || !v) return st_seterr(kv->ctx, ST_E_INVAL, "kv: append: k or v NULL");
    int64_t p0;
    int rc = st_kv_seq_reserve(kv, seq, n, tokens, &p0);
    if (rc) return rc;
    const size_t layer_stride = (size_t)n * kv->p.n_kv_head * kv->p.head_dim;
    /* Reserve made every target page exclusive, so without the SSD tier nothing below can
     * fail; with it a fetch or a spill can: the reservation is then undone (unless the
     * sequence failed outright), so on error nothing changed. */
    for (int l = 0; l < kv->p.n_layer && !rc; l++)
        rc = st_kv_write(kv, seq, l, p0, n, k + l * layer_stride, v + l * layer_stride);
    ST_ASSERT(rc == 0 || kv->spill);
    if (!rc) rc = st_kv_seq_commit(kv, seq);
    if (rc && st_kv_seq_error(kv, seq) == 0) {
        int trc = st_kv_seq_truncate(kv, seq, p0);
        ST_ASSERT(trc == 0);
    }
    return rc;
}

int st_kv_read(const st_kv *kv, st_kv_seq_id seq, int layer, int64_t pos, int64_t n,
               float *k, float *v) {
    KV_CHECK_ON_RETURN(kv);
    kv_seq *s;
    int rc = kv_seq_get_ok(kv, seq, &s);
    if (rc) return rc;
    if ((rc = check_range(kv, s, layer, pos, n, "read")) != 0) return rc;
    const int P = kv->p.page_size;
    const size_t row = (size_t)kv->p.n_kv_head * kv->p.head_dim;
    /* A cold page is read one layer block at a time into kv->rd_blk without changing its
     * residency; only the counters and, on a failed read, the failure marks change. */
    st_kv *mkv = (st_kv *)kv;
    int32_t in_buf = -1;
    for (int64_t j = 0; j < n; j++) {
        int64_t p = pos + j;
        const kv_entry *e = &s->ent[p / P];
        const uint8_t *blk;
        if (kv->pages[e->page].resident != KV_RES_ERROR && kv_blk_ram(kv, e->page, layer)) {
            blk = kv_layer_data(kv, e->page, layer);
        } else {
            if (in_buf != e->page) {
                if ((rc = kv_read_block(mkv, e->page, layer, kv->rd_blk)) != 0) return rc;
                in_buf = e->page;
            }
            blk = kv->rd_blk;
        }
        kv_load_token(kv, blk, (int)(p % P), k ? k + j * row : NULL, v ? v + j * row : NULL);
    }
    return 0;
}

int st_kv_seq_tokens(const st_kv *kv, st_kv_seq_id seq, int64_t pos, int64_t n,
                     int32_t *tokens) {
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    if (pos < 0 || n < 0 || n > s->len - pos || (n > 0 && !tokens))
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: seq_tokens: [%lld, +%lld) outside [0, %lld)",
                         (long long)pos, (long long)n, (long long)s->len);
    if (n) memcpy(tokens, s->tokens + pos, (size_t)n * sizeof *tokens);
    return 0;
}

/* Clears mask bits >= n_tokens and drops a mask that marks every reserved slot valid. */
static void normalize_mask(kv_entry *e) {
    if (!e->has_mask) return;
    int all = 1;
    for (int b = 0; b < ST_KV_PAGE_SIZE_MAX; b++) {
        uint64_t bit = 1ull << (b & 63);
        if (b >= e->n_tokens) e->mask[b >> 6] &= ~bit;
        else if (!(e->mask[b >> 6] & bit)) all = 0;
    }
    if (all) {
        e->has_mask = 0;
        memset(e->mask, 0, sizeof e->mask);
    }
}

int st_kv_seq_truncate(st_kv *kv, st_kv_seq_id seq, int64_t len) {
    KV_CHECK_ON_RETURN(kv);
    kv_seq *s;
    int rc = kv_seq_get_ok(kv, seq, &s);
    if (rc) return rc;
    if (len < 0 || len > s->len)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: truncate of seq %lld to %lld (length %lld)",
                         (long long)seq, (long long)len, (long long)s->len);
    const int P = kv->p.page_size;
    const int64_t n_ent = (len + P - 1) / P;
    for (int64_t i = n_ent; i < s->n_ent; i++) kv_seq_release_entry(kv, &s->ent[i]);
    s->n_ent = n_ent;
    s->len = len;
    if (len % P) {
        kv_entry *e = &s->ent[n_ent - 1];
        e->n_tokens = (int32_t)(len % P);
        normalize_mask(e);
    }
    int64_t sf = (len % P) ? n_ent - 1 : n_ent;
    if (sf < s->seal_from) s->seal_from = sf;
    return 0;
}

int st_kv_seq_rewind(st_kv *kv, st_kv_seq_id seq, int64_t len) {
    KV_CHECK_ON_RETURN(kv);
    kv_seq *s;
    int rc = kv_seq_get_ok(kv, seq, &s);
    if (rc) return rc;
    if (len < 0 || len > s->len)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: rewind of seq %lld to %lld (length %lld)",
                         (long long)seq, (long long)len, (long long)s->len);
    /* the pages only this sequence holds were sealed by its own appends: their keys name
     * tokens that are going away */
    for (int64_t i = len / kv->p.page_size; i < s->n_ent; i++) {
        const int32_t id = s->ent[i].page;
        if (id < 0) continue;
        kv_page *pg = &kv->pages[id];
        if (pg->refs != 1 || pg->pins) continue;
        if (pg->registered) kv_index_remove(kv, id);
        pg->has_key = 0;
        kv_unseal(kv, id);
    }
    return st_kv_seq_truncate(kv, seq, len);
}

int st_kv_seq_remove(st_kv *kv, st_kv_seq_id seq, int64_t p0, int64_t p1) {
    KV_CHECK_ON_RETURN(kv);
    kv_seq *s;
    int rc = kv_seq_get_ok(kv, seq, &s);
    if (rc) return rc;
    if (p0 < 0 || p1 < p0)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: remove [%lld, %lld) from seq %lld",
                         (long long)p0, (long long)p1, (long long)seq);
    if (p1 > s->len) p1 = s->len;
    const int P = kv->p.page_size;
    for (int64_t i = p0 / P; p0 < p1 && i <= (p1 - 1) / P; i++) {
        kv_entry *e = &s->ent[i];
        if (e->page < 0) continue;
        int64_t lo = p0 > i * P ? p0 - i * P : 0;
        int64_t hi = p1 < (i + 1) * P ? p1 - i * P : P;
        if (!e->has_mask) {
            e->has_mask = 1;
            memset(e->mask, 0, sizeof e->mask);
            for (int b = 0; b < e->n_tokens; b++) e->mask[b >> 6] |= 1ull << (b & 63);
        }
        for (int64_t b = lo; b < hi; b++) e->mask[b >> 6] &= ~(1ull << (b & 63));
        int any = 0;
        for (int w = 0; w < ST_KV_MASK_WORDS; w++) any |= e->mask[w] != 0;
        if (!any && e->n_tokens == P) kv_seq_release_entry(kv, e); /* a hole */
    }
    return 0;
}

int st_kv_seq_views(const st_kv *kv, st_kv_seq_id seq, int layer, st_attn_page *out, int max,
                    int *n_out) {
    if (!n_out) return st_seterr(kv->ctx, ST_E_INVAL, "kv: views: n_out is NULL");
    *n_out = 0;
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    if (layer < 0 || layer >= kv->p.n_layer)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv: views: layer %d outside [0, %d)", layer,
                         kv->p.n_layer);
    int64_t n = 0;
    for (int64_t i = 0; i < s->n_ent; i++) n += s->ent[i].page >= 0;
    if (n > INT32_MAX) return st_seterr(kv->ctx, ST_E_LIMIT, "kv: views: %lld pages", (long long)n);
    *n_out = (int)n;
    if (n > max || (n > 0 && !out))
        return st_seterr(kv->ctx, ST_E_LIMIT, "kv: views: %lld pages, room for %d",
                         (long long)n, max);
    if (s->err) return kv_seq_get_ok(kv, seq, &s);
    for (int64_t i = 0; i < s->n_ent; i++)
        if (s->ent[i].page >= 0 && (kv->pages[s->ent[i].page].resident == KV_RES_ERROR ||
                                    !kv_blk_ram(kv, s->ent[i].page, layer)))
            return st_seterr(kv->ctx, ST_E_STATE, "kv: views: page %lld of seq %lld is not in "
                             "RAM (use st_kv_attend_* or pin it)", (long long)i, (long long)seq);
    int j = 0;
    for (int64_t i = 0; i < s->n_ent; i++) {
        const kv_entry *e = &s->ent[i];
        if (e->page < 0) continue;
        const uint8_t *blk = kv_layer_data(kv, e->page, layer);
        st_attn_page *v = &out[j++];
        v->k = blk;
        v->v = blk + kv->g.v_offset;
        v->k_scale = v->v_scale = NULL;
        if (kv->p.type == ST_TYPE_Q8_0) {
            v->k_scale = (const float *)(blk + kv->g.scale_offset);
            v->v_scale = v->k_scale + kv->p.n_kv_head;
        }
        v->valid = e->has_mask ? e->mask : NULL;
        v->n_tokens = e->n_tokens;
        v->pos0 = i * kv->p.page_size;
    }
    return 0;
}

int st_kv_seq_pages(const st_kv *kv, st_kv_seq_id seq, st_kv_page_id *out, int max,
                    int *n_out) {
    if (!n_out) return st_seterr(kv->ctx, ST_E_INVAL, "kv: seq_pages: n_out is NULL");
    *n_out = 0;
    kv_seq *s;
    int rc = kv_seq_get(kv, seq, &s);
    if (rc) return rc;
    if (s->n_ent > INT32_MAX) return st_seterr(kv->ctx, ST_E_LIMIT, "kv: seq_pages: too many");
    *n_out = (int)s->n_ent;
    if (s->n_ent > max || (s->n_ent > 0 && !out))
        return st_seterr(kv->ctx, ST_E_LIMIT, "kv: seq_pages: %lld pages, room for %d",
                         (long long)s->n_ent, max);
    for (int64_t i = 0; i < s->n_ent; i++) out[i] = s->ent[i].page;
    return 0;
}
