/* The prefix cache to and from a stream: st_kv_prefix_export / st_kv_prefix_import.
 *
 * The cache is a forest of registered pages linked by parent key. Export walks it into
 * chains, one per leaf (a registered page that is no registered page's parent): root ..
 * leaf. Each chain becomes a temporary sequence by st_kv_prefix_attach with the chain's
 * concatenated tokens, which looks every page up by content exactly as a request would (so
 * what is written is what a request could have attached), and the sequences go out as KV
 * snapshots (kv_snapshot.c: each shared page once per snapshot, with its key, tokens and
 * checksums). There are at most as many sequences per snapshot as the pool has free
 * sequence slots, so a large cache is several snapshots in a container (docs/FORMATS.md,
 * "Prefix-cache file"). Afterwards the temporary sequences are freed and what attach
 * disturbed (the pages' scores, the cache's LRU order, the prefix counters) is put back, so
 * exporting leaves the pool as it was.
 *
 * Import reads the snapshots one by one (each validated whole before it changes anything),
 * frees their sequences at once so that their full keyed pages become CACHED pages of the
 * index (kv_page_release: registered -> CACHED; a page already in the index is a duplicate
 * and goes back to FREE), and checks that each sequence is a chain the prefix cache could
 * serve. Restored pages come from the free list only (kv_snapshot_read's free_only), so
 * when a later part fails the import is undone exactly by dropping the pages it added. */
#include "kv_int.h"

#include <stdlib.h>

#define PFX_MAGIC "STKVPREF"
#define PFX_VERSION 1u
#define PFX_HEADER_BYTES 40u

static int key_cmp(const st_kv_key *a, const st_kv_key *b) { return memcmp(a->b, b->b, 16); }
static int key_zero(const st_kv_key *k) {
    static const st_kv_key z;
    return key_cmp(k, &z) == 0;
}

/* qsort over registered page ids by key (no context argument in qsort: the keys are
 * copied next to the ids). */
typedef struct keyed {
    st_kv_key key;
    int32_t page;
} keyed;
static int keyed_cmp(const void *a, const void *b) {
    int c = key_cmp(&((const keyed *)a)->key, &((const keyed *)b)->key);
    if (c) return c;
    return ((const keyed *)a)->page - ((const keyed *)b)->page;
}
static int32_t find_key(const keyed *k, int32_t n, const st_kv_key *key) {
    int32_t lo = 0, hi = n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (key_cmp(&k[mid].key, key) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && key_cmp(&k[lo].key, key) == 0 ? lo : -1;
}

/* A chain: indices into the sorted keyed array, root first. */
typedef struct chain {
    int32_t *idx;
    int32_t n;
    uint64_t use; /* the leaf's last_use: recent chains win a page budget */
} chain;

typedef struct forest {
    keyed *k;       /* [n] registered pages sorted by key */
    int32_t n;
    int32_t *up;    /* [n] parent's index, -1 root, -2 unreachable (parent not registered) */
    chain *ch;      /* [n_ch] */
    int32_t n_ch;
} forest;

static void forest_free(forest *f) {
    for (int32_t i = 0; f->ch && i < f->n_ch; i++) free(f->ch[i].idx);
    free(f->ch);
    free(f->up);
    free(f->k);
}

static int chain_cmp(const void *a, const void *b) {
    const chain *x = a, *y = b;
    for (int32_t i = 0; i < x->n && i < y->n; i++)
        if (x->idx[i] != y->idx[i]) return x->idx[i] < y->idx[i] ? -1 : 1;
    return (x->n > y->n) - (x->n < y->n);
}
static int chain_use_cmp(const void *a, const void *b) {
    const chain *x = a, *y = b;
    return (x->use < y->use) - (x->use > y->use); /* most recent first */
}

/* Builds the forest's chains. Pages whose ancestry leaves the index are unreachable by any
 * attach (it walks from the root) and are left out. Returns 0 or ST_E_NOMEM. */
static int forest_build(const st_kv *kv, forest *f) {
    memset(f, 0, sizeof *f);
    int32_t n = 0;
    for (int32_t i = 0; i < kv->n_pages; i++) n += kv->pages[i].registered;
    f->k = malloc(((size_t)n + 1) * sizeof *f->k);
    f->up = malloc(((size_t)n + 1) * sizeof *f->up);
    int32_t *depth = malloc(((size_t)n + 1) * sizeof *depth);
    uint8_t *child = calloc((size_t)n + 1, 1);
    f->ch = calloc((size_t)n + 1, sizeof *f->ch);
    int rc = 0;
    if (!f->k || !f->up || !depth || !child || !f->ch) {
        rc = ST_E_NOMEM;
        goto out;
    }
    for (int32_t i = 0; i < kv->n_pages; i++)
        if (kv->pages[i].registered) {
            f->k[f->n].key = kv->pages[i].key;
            f->k[f->n++].page = i;
        }
    qsort(f->k, (size_t)n, sizeof *f->k, keyed_cmp);
    for (int32_t i = 0; i < n; i++) {
        const st_kv_key *par = &kv->pages[f->k[i].page].parent;
        f->up[i] = key_zero(par) ? -1 : find_key(f->k, n, par);
        if (f->up[i] == -1 && !key_zero(par)) f->up[i] = -2;
        depth[i] = 0; /* unknown */
    }
    /* depth: 1 + the parent's; -1 unreachable. A walk longer than n is a cycle (only a hash
     * collision could make one) and counts as unreachable. */
    for (int32_t i = 0; i < n; i++) {
        int32_t j = i, steps = 0;
        while (depth[j] == 0 && f->up[j] >= 0 && steps <= n) {
            j = f->up[j];
            steps++;
        }
        int32_t d = depth[j] != 0 ? depth[j] : f->up[j] == -1 ? 1 : -1;
        if (steps > n) d = -1;
        /* second walk assigns along the path (top-down values from the bottom up) */
        int32_t base = d, len = steps;
        for (int32_t t = i, s = 0; s < len; t = f->up[t], s++)
            depth[t] = base < 0 ? -1 : base + (len - s);
        if (depth[j] == 0) depth[j] = d;
    }
    for (int32_t i = 0; i < n; i++)
        if (depth[i] > 0 && f->up[i] >= 0) child[f->up[i]] = 1;
    for (int32_t i = 0; i < n; i++) {
        if (depth[i] <= 0 || child[i]) continue;
        chain *c = &f->ch[f->n_ch];
        c->idx = malloc((size_t)depth[i] * sizeof *c->idx);
        if (!c->idx) {
            rc = ST_E_NOMEM;
            goto out;
        }
        c->n = depth[i];
        c->use = kv->pages[f->k[i].page].last_use;
        for (int32_t t = i, s = depth[i] - 1; s >= 0; t = f->up[t], s--) c->idx[s] = t;
        f->n_ch++;
    }
out:
    free(depth);
    free(child);
    return rc;
}

/* What attach and the temporary sequences disturb, kept to be put back. */
typedef struct saved {
    int32_t *lru;      /* [n_lru] the CACHED pages in LRU order */
    int64_t n_lru;
    uint64_t *use;     /* [n] last_use of the forest's pages (forest order) */
    st_kv_stats st;
} saved;

static int save_state(const st_kv *kv, const forest *f, saved *sv) {
    sv->lru = malloc(((size_t)kv->n_cached + 1) * sizeof *sv->lru);
    sv->use = malloc(((size_t)f->n + 1) * sizeof *sv->use);
    if (!sv->lru || !sv->use) return ST_E_NOMEM;
    sv->n_lru = 0;
    for (int32_t i = kv->lru_head; i >= 0; i = kv->pages[i].next) sv->lru[sv->n_lru++] = i;
    for (int32_t i = 0; i < f->n; i++) sv->use[i] = kv->pages[f->k[i].page].last_use;
    sv->st = kv->st;
    return 0;
}
static void restore_use(st_kv *kv, const forest *f, const saved *sv) {
    for (int32_t i = 0; i < f->n; i++) kv->pages[f->k[i].page].last_use = sv->use[i];
}
static void restore_state(st_kv *kv, const forest *f, const saved *sv) {
    restore_use(kv, f, sv);
    /* Every page of the saved LRU is CACHED again (attach's references are gone), and no
     * other page became CACHED: the list is rebuilt in its old order. */
    kv->lru_head = kv->lru_tail = -1;
    for (int64_t i = 0; i < sv->n_lru; i++) {
        ST_ASSERT(kv->pages[sv->lru[i]].state == KV_PAGE_CACHED);
        kv_lru_push(kv, sv->lru[i]);
    }
    kv->st.prefix_hits = sv->st.prefix_hits;
    kv->st.prefix_misses = sv->st.prefix_misses;
    kv->st.prefix_tokens_queried = sv->st.prefix_tokens_queried;
    kv->st.prefix_tokens_reused = sv->st.prefix_tokens_reused;
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* One part: chains ch[0..n) as temporary sequences, one snapshot. */
static int write_part(st_kv *kv, const forest *f, const saved *sv, const chain *ch, int n,
                      st_kv_io *io, int32_t *tok, st_kv_seq_id *seqs) {
    const int P = kv->p.page_size;
    int rc = 0, made = 0;
    for (; made < n; made++) {
        const chain *c = &ch[made];
        for (int32_t i = 0; i < c->n; i++)
            memcpy(tok + (size_t)i * P, kv->page_tokens + (size_t)f->k[c->idx[i]].page * P,
                   (size_t)P * sizeof *tok);
        kv_seq *s;
        if ((rc = kv_seq_new(kv, &s)) != 0) break;
        seqs[made] = s->id;
        int64_t got = 0;
        if ((rc = st_kv_prefix_attach(kv, s->id, tok, (int64_t)c->n * P, &got)) != 0) {
            made++;
            break;
        }
        if (got != (int64_t)c->n * P) {
            made++;
            rc = st_seterr(kv->ctx, ST_E_STATE, "kv prefix export: a chain of %d pages "
                           "attached only %lld tokens", c->n, (long long)got);
            break;
        }
    }
    /* the ledger records each page's score as it was before attach touched it */
    if (!rc) {
        restore_use(kv, f, sv);
        rc = st_kv_snapshot_write(kv, seqs, n, -1, io);
    }
    for (int i = 0; i < made; i++) st_kv_seq_free(kv, seqs[i]);
    return rc;
}

int st_kv_prefix_export(st_kv *kv, st_kv_io *io, int64_t max_pages, st_kv_prefix_counts *out) {
    KV_CHECK_ON_RETURN(kv);
    if (out) memset(out, 0, sizeof *out);
    if (!io || !io->write)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv prefix export: io has no write");
    const int P = kv->p.page_size;
    forest f;
    saved sv;
    memset(&sv, 0, sizeof sv);
    int32_t *tok = NULL;
    uint8_t *mark = NULL;
    st_kv_seq_id *seqs = NULL;
    int rc = forest_build(kv, &f);
    if (!rc) rc = save_state(kv, &f, &sv);
    if (rc) {
        rc = st_seterr(kv->ctx, ST_E_NOMEM, "kv prefix export: out of memory");
        goto out;
    }
    /* The budget: most recently used chains first, each cut to the pages still fitting;
     * then chains sharing a prefix are put next to each other so a part holds them
     * together (a page shared across parts is written once per part). */
    qsort(f.ch, (size_t)f.n_ch, sizeof *f.ch, chain_use_cmp);
    mark = calloc((size_t)f.n + 1, 1);
    if (!mark) {
        rc = st_seterr(kv->ctx, ST_E_NOMEM, "kv prefix export: out of memory");
        goto out;
    }
    int64_t pages = 0;
    int32_t kept = 0, longest = 0;
    for (int32_t c = 0; c < f.n_ch; c++) {
        chain *ch = &f.ch[c];
        int32_t fresh = 0;
        for (int32_t i = 0; i < ch->n; i++) fresh += !mark[ch->idx[i]];
        if (max_pages >= 0 && pages + fresh > max_pages) {
            ch->n -= (int32_t)(pages + fresh - max_pages); /* fresh pages are a suffix */
            fresh = (int32_t)(max_pages - pages);
        }
        if (fresh <= 0) continue;
        for (int32_t i = 0; i < ch->n; i++) mark[ch->idx[i]] = 1;
        pages += fresh;
        if (ch->n > longest) longest = ch->n;
        chain t = f.ch[kept];
        f.ch[kept++] = *ch;
        *ch = t;
    }
    qsort(f.ch, (size_t)kept, sizeof *f.ch, chain_cmp);
    const int slots = kv->p.max_seqs - kv->n_seqs;
    if (kept > 0 && slots < 1) {
        rc = st_seterr(kv->ctx, ST_E_LIMIT, "kv prefix export: no free sequence slot "
                       "(%d live, max_seqs %d)", kv->n_seqs, kv->p.max_seqs);
        goto out;
    }
    const uint32_t n_parts = kept ? (uint32_t)((kept + slots - 1) / slots) : 0;
    /* The header's page count is the sum of the parts' own page counts. */
    uint64_t part_pages = 0;
    for (uint32_t p = 0; p < n_parts; p++) {
        memset(mark, 0, (size_t)f.n);
        for (int32_t c = (int32_t)p * slots; c < kept && c < ((int32_t)p + 1) * slots; c++)
            for (int32_t i = 0; i < f.ch[c].n; i++)
                if (!mark[f.ch[c].idx[i]]) {
                    mark[f.ch[c].idx[i]] = 1;
                    part_pages++;
                }
    }
    uint8_t h[PFX_HEADER_BYTES];
    memcpy(h, PFX_MAGIC, 8);
    put_u32(h + 8, PFX_VERSION);
    put_u32(h + 12, n_parts);
    put_u64(h + 16, part_pages);
    put_u64(h + 24, (uint64_t)kept);
    put_u64(h + 32, XXH3_64bits(h, 32));
    if ((rc = io->write(io, h, sizeof h)) != 0) {
        rc = st_seterr(kv->ctx, rc, "kv prefix export: write failed: %s", st_strerror(rc));
        goto out;
    }
    tok = malloc(((size_t)longest * P + 1) * sizeof *tok);
    seqs = malloc(((size_t)slots + 1) * sizeof *seqs);
    if (!tok || !seqs) {
        rc = st_seterr(kv->ctx, ST_E_NOMEM, "kv prefix export: out of memory");
        goto out;
    }
    for (uint32_t p = 0; p < n_parts && !rc; p++) {
        int32_t c0 = (int32_t)p * slots, n = kept - c0 < slots ? kept - c0 : slots;
        rc = write_part(kv, &f, &sv, f.ch + c0, n, io, tok, seqs);
    }
    restore_state(kv, &f, &sv);
    if (!rc && out) {
        out->pages = pages;
        out->tokens = pages * P;
        out->chains = kept;
        out->parts = n_parts;
    }
out:
    free(seqs);
    free(tok);
    free(mark);
    free(sv.lru);
    free(sv.use);
    forest_free(&f);
    return rc;
}

/* ---- import ------------------------------------------------------------------------------ */

typedef struct added {
    int32_t *page; /* pages this import registered, still CACHED unless taken since */
    int64_t n;
} added;

/* Checks that restored sequence s is a chain the prefix cache serves (full keyed pages,
 * no holes or masks, each page's parent the previous page's key), then frees it, noting
 * the pages it registered. */
static int take_chain(st_kv *kv, st_kv_seq_id id, uint32_t part, int j, added *ad,
                      int64_t *dups, int64_t *n_tok) {
    kv_seq *s;
    int rc = kv_seq_get(kv, id, &s);
    ST_ASSERT(rc == 0);
    const int P = kv->p.page_size;
    if (s->len == 0 || s->len % P != 0)
        rc = st_seterr(kv->ctx, ST_E_FORMAT, "kv prefix import: part %u sequence %d: length "
                       "%lld is not a positive number of whole pages", part, j,
                       (long long)s->len);
    for (int64_t i = 0; !rc && i < s->n_ent; i++) {
        const kv_entry *e = &s->ent[i];
        const kv_page *pg = e->page >= 0 ? &kv->pages[e->page] : NULL;
        const kv_page *prev = i > 0 ? &kv->pages[s->ent[i - 1].page] : NULL;
        if (!pg || e->has_mask || !pg->has_key || !pg->sealed ||
            (prev ? key_cmp(&pg->parent, &prev->key) != 0 : !key_zero(&pg->parent)))
            rc = st_seterr(kv->ctx, ST_E_FORMAT, "kv prefix import: part %u sequence %d page "
                           "%lld is not a keyed page of a prefix chain", part, j,
                           (long long)i);
    }
    if (!rc) {
        for (int64_t i = 0; i < s->n_ent; i++) {
            int32_t pid = s->ent[i].page;
            kv_page *pg = &kv->pages[pid];
            if (pg->refs != 1) continue; /* shared in this part: counted once, at its last */
            if (pg->registered) ad->page[ad->n++] = pid;
            else (*dups)++;
        }
        *n_tok += s->len;
    } else {
        /* what a refused chain registered is undone with the rest */
        for (int64_t i = 0; i < s->n_ent; i++) {
            int32_t pid = s->ent[i].page;
            if (pid >= 0 && kv->pages[pid].refs == 1 && kv->pages[pid].registered)
                ad->page[ad->n++] = pid;
        }
    }
    st_kv_seq_free(kv, id);
    return rc;
}

/* The added pages go to the LRU's tail in their ledger order of use (last_use, which the
 * snapshot reader rebased after the pool's own), instead of the order their chains were
 * freed in (root first: roots would be evicted before the pages that need them). */
typedef struct used {
    uint64_t use;
    int32_t page;
} used;
static int used_cmp(const void *a, const void *b) {
    uint64_t x = ((const used *)a)->use, y = ((const used *)b)->use;
    return (x > y) - (x < y);
}
/* Without memory for the sort the release order stays: a worse eviction order, no error. */
static void order_lru(st_kv *kv, const added *ad) {
    used *u = malloc(((size_t)ad->n + 1) * sizeof *u);
    if (!u) return;
    for (int64_t i = 0; i < ad->n; i++) {
        u[i].use = kv->pages[ad->page[i]].last_use;
        u[i].page = ad->page[i];
        kv_lru_remove(kv, ad->page[i]);
    }
    qsort(u, (size_t)ad->n, sizeof *u, used_cmp);
    for (int64_t i = 0; i < ad->n; i++) kv_lru_push(kv, u[i].page);
    free(u);
}

static void undo(st_kv *kv, const added *ad, int64_t evictions) {
    for (int64_t i = 0; i < ad->n; i++)
        if (kv->pages[ad->page[i]].state == KV_PAGE_CACHED) kv_cache_drop(kv, ad->page[i]);
    kv->st.cache_evictions = evictions;
}

int st_kv_prefix_import(st_kv *kv, st_kv_io *io, st_kv_prefix_counts *out) {
    KV_CHECK_ON_RETURN(kv);
    if (out) memset(out, 0, sizeof *out);
    if (!io || !io->read)
        return st_seterr(kv->ctx, ST_E_INVAL, "kv prefix import: io has no read");
    uint8_t h[PFX_HEADER_BYTES];
    int64_t got = io->read(io, h, sizeof h);
    if (got < 0) return st_seterr(kv->ctx, (int)got, "kv prefix import: read failed: %s",
                                  st_strerror((int)got));
    if (got < (int64_t)sizeof h)
        return st_seterr(kv->ctx, ST_E_FORMAT, "kv prefix import: truncated header (%lld of "
                         "%u bytes)", (long long)got, PFX_HEADER_BYTES);
    if (memcmp(h, PFX_MAGIC, 8) != 0)
        return st_seterr(kv->ctx, ST_E_FORMAT, "kv prefix import: bad magic at byte 0 (not a "
                         "prefix-cache file)");
    if (get_u32(h + 8) != PFX_VERSION)
        return st_seterr(kv->ctx, ST_E_VERSION, "kv prefix import: version %u at byte 8 "
                         "(this build reads %u)", get_u32(h + 8), PFX_VERSION);
    if (get_u64(h + 32) != XXH3_64bits(h, 32))
        return st_seterr(kv->ctx, ST_E_CORRUPT, "kv prefix import: header checksum at byte "
                         "32 does not match");
    const uint32_t n_parts = get_u32(h + 12);
    const uint64_t n_pages = get_u64(h + 16), n_chains = get_u64(h + 24);
    if (n_pages > (uint64_t)ST_KV_MAX_PAGES || n_chains > n_pages || n_parts > n_chains ||
        (n_chains > 0 && n_parts == 0))
        return st_seterr(kv->ctx, ST_E_FORMAT, "kv prefix import: header counts inconsistent "
                         "(%u parts, %llu chains, %llu pages)", n_parts,
                         (unsigned long long)n_chains, (unsigned long long)n_pages);
    if ((int64_t)n_pages > kv->n_free)
        return st_seterr(kv->ctx, ST_E_POOL_FULL, "kv prefix import: %llu pages but only %lld "
                         "free of %d", (unsigned long long)n_pages, (long long)kv->n_free,
                         kv->n_pages);
    const int slots = kv->p.max_seqs - kv->n_seqs;
    /* a lying header cannot overrun it: at most every page of the pool is registered */
    added ad = {malloc((size_t)kv->n_pages * sizeof(int32_t) + 1), 0};
    st_kv_seq_id *seqs = malloc(((size_t)(slots > 0 ? slots : 0) + 1) * sizeof *seqs);
    if (!ad.page || !seqs) {
        free(ad.page);
        free(seqs);
        return st_seterr(kv->ctx, ST_E_NOMEM, "kv prefix import: out of memory");
    }
    const int64_t evictions = kv->st.cache_evictions;
    int64_t dups = 0, n_tok = 0, chains = 0;
    int rc = 0;
    for (uint32_t p = 0; p < n_parts && !rc; p++) {
        int n = 0;
        if ((rc = kv_snapshot_read(kv, io, seqs, slots, &n, 1)) != 0) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", st_ctx_error(kv->ctx));
            rc = st_seterr(kv->ctx, rc, "kv prefix import: part %u of %u: %s", p + 1, n_parts,
                           msg);
            break;
        }
        for (int j = 0; j < n; j++) {
            int r2 = take_chain(kv, seqs[j], p + 1, j, &ad, &dups, &n_tok);
            if (r2 && !rc) rc = r2;
        }
        chains += n;
    }
    if (!rc) {
        uint8_t extra;
        got = io->read(io, &extra, 1);
        if (got < 0) rc = st_seterr(kv->ctx, (int)got, "kv prefix import: read failed: %s",
                                    st_strerror((int)got));
        else if (got > 0)
            rc = st_seterr(kv->ctx, ST_E_FORMAT, "kv prefix import: bytes after the last of "
                           "%u parts", n_parts);
    }
    if (!rc && ((uint64_t)(ad.n + dups) != n_pages || (uint64_t)chains != n_chains))
        rc = st_seterr(kv->ctx, ST_E_FORMAT, "kv prefix import: the parts hold %lld pages in "
                       "%lld chains, the header says %llu in %llu", (long long)(ad.n + dups),
                       (long long)chains, (unsigned long long)n_pages,
                       (unsigned long long)n_chains);
    if (rc) {
        undo(kv, &ad, evictions);
    } else {
        order_lru(kv, &ad);
    }
    if (!rc && out) {
        out->pages = ad.n;
        out->tokens = ad.n * kv->p.page_size;
        out->chains = chains;
        out->parts = n_parts;
        out->duplicates = dups;
        out->tokens_in_chains = n_tok;
    }
    free(ad.page);
    free(seqs);
    return rc;
}
