/* The prefix cache to and from a file (st_kv_prefix_export / st_kv_prefix_import): round
 * trip (pages, refcounts, keys, order of use, K/V, lookups), an export that leaves the pool
 * as it was, more chains than free sequence slots (a multi-part file), an import through an
 * SSD tier whose hot pool is smaller than the file, and every truncation, every flipped byte
 * and another model's file refused with the pool unchanged. */
#include "strata/kv.h"
#include "kv/kv_int.h"
#include "../test.h"

#include <unistd.h>

#define P 8
#define NT 40

static st_kv *mk(st_ctx *ctx, int n_pages, int max_seqs, uint8_t fp, const char *dir,
                 int ram_pages) {
    st_kv_params p = st_kv_default_params();
    p.n_layer = 2;
    p.n_kv_head = 1;
    p.head_dim = 4;
    p.page_size = P;
    p.type = ST_TYPE_F16;
    p.n_pages = n_pages;
    p.max_seqs = max_seqs;
    p.fingerprint.b[3] = fp;
    p.spill_dir = dir;
    p.ram_pages = ram_pages;
    st_kv *kv = NULL;
    CHECK_OK(st_kv_create(ctx, &p, &kv));
    return kv;
}

/* K/V a function of the token and its position, as a model's would be. */
static void fill(st_kv *kv, st_kv_seq_id s, int64_t pos0, int n, const int32_t *toks) {
    float k[2 * (NT + 8) * 4], v[2 * (NT + 8) * 4];
    for (int l = 0; l < 2; l++)
        for (int j = 0; j < n; j++)
            for (int d = 0; d < 4; d++) {
                k[(l * n + j) * 4 + d] = (float)toks[j] * 0.25f + (float)(pos0 + j) + d + 10 * l;
                v[(l * n + j) * 4 + d] = -(float)toks[j] * 0.5f - d - 10 * l;
            }
    CHECK_OK(st_kv_seq_append(kv, s, n, toks, k, v));
}

/* The prompts: A 40 tokens; B shares A's first 2 pages, C its first 3; D unrelated (16
 * tokens); E (the importing pool's own) unrelated. Each ends in a partial page. */
static int32_t prompt[5][NT + 3];
static void prompts(void) {
    for (int i = 0; i < NT + 3; i++) {
        prompt[0][i] = 7 * i + 1;
        prompt[1][i] = i < 16 ? prompt[0][i] : 1000 + i;
        prompt[2][i] = i < 24 ? prompt[0][i] : 2000 + i;
        prompt[3][i] = 3000 + i;
        prompt[4][i] = 4000 + 3 * i;
    }
}
static const int plen[5] = {NT + 3, NT + 3, NT + 3, 16 + 3, NT + 3};

/* Runs prompt w as a request would: attach what is cached, append the rest, free. keep:
 * the sequence is returned live instead. */
static st_kv_seq_id run(st_kv *kv, int w, int keep) {
    st_kv_seq_id s;
    CHECK_OK(st_kv_seq_create(kv, &s));
    int64_t got = 0;
    CHECK_OK(st_kv_prefix_attach(kv, s, prompt[w], plen[w], &got));
    fill(kv, s, got, (int)(plen[w] - got), prompt[w] + got);
    if (keep) return s;
    CHECK_OK(st_kv_seq_free(kv, s));
    return -1;
}

/* Everything export may not change and import's refusal may not change. */
typedef struct view {
    st_kv_stats st;
    uint8_t state[128], reg[128];
    int32_t refs[128];
    uint64_t use[128];
    int32_t lru[128];
    int n_lru;
} view;
static void look(const st_kv *kv, view *v) {
    memset(v, 0, sizeof *v);
    st_kv_get_stats(kv, &v->st);
    REQUIRE(kv->n_pages <= 128);
    for (int i = 0; i < kv->n_pages; i++) {
        v->state[i] = kv->pages[i].state;
        v->reg[i] = kv->pages[i].registered;
        v->refs[i] = kv->pages[i].refs;
        v->use[i] = kv->pages[i].state == KV_PAGE_FREE ? 0 : kv->pages[i].last_use;
    }
    for (int32_t i = kv->lru_head; i >= 0; i = kv->pages[i].next) v->lru[v->n_lru++] = i;
}
static void same_view(const view *a, const view *b, int scores) {
    CHECK(memcmp(&a->st, &b->st, sizeof a->st) == 0);
    CHECK(memcmp(a->state, b->state, sizeof a->state) == 0);
    CHECK(memcmp(a->reg, b->reg, sizeof a->reg) == 0);
    CHECK(memcmp(a->refs, b->refs, sizeof a->refs) == 0);
    if (scores) CHECK(memcmp(a->use, b->use, sizeof a->use) == 0);
    CHECK_INT(a->n_lru, b->n_lru);
    CHECK(memcmp(a->lru, b->lru, sizeof a->lru) == 0);
}

static void checked(const st_kv *kv) {
    char msg[256];
    int rc = kv_check(kv, msg, sizeof msg);
    if (rc) fprintf(stderr, "kv_check: %s\n", msg);
    CHECK_OK(rc);
}

static int64_t lookup(const st_kv *kv, int w) {
    int64_t n = -1;
    CHECK_OK(st_kv_prefix_lookup(kv, prompt[w], plen[w], &n));
    return n;
}

/* Attaches prompt w in both pools: the same tokens attached and the same K/V read back. */
static void same_attach(st_kv *a, st_kv *b, int w) {
    st_kv_seq_id sa, sb;
    int64_t na, nb;
    CHECK_OK(st_kv_seq_create(a, &sa));
    CHECK_OK(st_kv_seq_create(b, &sb));
    CHECK_OK(st_kv_prefix_attach(a, sa, prompt[w], plen[w], &na));
    CHECK_OK(st_kv_prefix_attach(b, sb, prompt[w], plen[w], &nb));
    CHECK_INT(nb, na);
    for (int l = 0; l < 2; l++) {
        float ka[NT * 4], kb[NT * 4], va[NT * 4], vb[NT * 4];
        CHECK_OK(st_kv_read(a, sa, l, 0, na, ka, va));
        CHECK_OK(st_kv_read(b, sb, l, 0, nb, kb, vb));
        CHECK(memcmp(ka, kb, sizeof(float) * 4 * (size_t)na) == 0);
        CHECK(memcmp(va, vb, sizeof(float) * 4 * (size_t)na) == 0);
    }
    CHECK_OK(st_kv_seq_free(a, sa));
    CHECK_OK(st_kv_seq_free(b, sb));
}

/* Pool a with A..D cached (12 registered pages: A 5, B 3, C 2, D 2); keep_d: D still live. */
static st_kv *source(st_ctx *ctx, int max_seqs, st_kv_seq_id *live_d) {
    st_kv *a = mk(ctx, 64, max_seqs, 1, NULL, 0);
    for (int w = 0; w < 4; w++) {
        st_kv_seq_id s = run(a, w, live_d && w == 3);
        if (live_d && w == 3) *live_d = s;
    }
    return a;
}

static void export_to(st_kv *a, st_kv_io *io, st_kv_prefix_counts *c) {
    st_kv_io_mem_writer(io);
    CHECK_OK(st_kv_prefix_export(a, io, -1, c));
}

TEST(test_roundtrip) {
    prompts();
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = source(ctx, 8, NULL);
    view before, after;
    look(a, &before);
    CHECK_INT(before.st.pages_cached, 12);
    st_kv_io io;
    st_kv_prefix_counts c;
    export_to(a, &io, &c);
    CHECK_INT(c.pages, 12);
    CHECK_INT(c.tokens, 12 * P);
    CHECK_INT(c.chains, 4);
    CHECK_INT(c.parts, 1);
    look(a, &after);
    same_view(&before, &after, 1); /* the pool exactly as it was, LRU order and scores too */
    checked(a);

    st_kv *b = mk(ctx, 64, 8, 1, NULL, 0);
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    st_kv_prefix_counts r;
    CHECK_OK(st_kv_prefix_import(b, &in, &r));
    CHECK_INT(r.pages, 12);
    CHECK_INT(r.chains, 4);
    CHECK_INT(r.duplicates, 0);
    CHECK_INT(in.pos, io.len);
    checked(b);
    st_kv_stats sb;
    st_kv_get_stats(b, &sb);
    CHECK_INT(sb.pages_cached, 12);
    CHECK_INT(sb.pages_used, 0);
    CHECK_INT(sb.n_seqs, 0);
    /* every imported page: CACHED, unreferenced, registered under a key a holds with the
     * same parent and tokens */
    for (int i = 0; i < b->n_pages; i++) {
        const kv_page *pg = &b->pages[i];
        if (pg->state == KV_PAGE_FREE) continue;
        CHECK_INT(pg->state, KV_PAGE_CACHED);
        CHECK_INT(pg->refs, 0);
        CHECK(pg->registered);
        int32_t ia = kv_index_find(a, &pg->key, &pg->parent, b->page_tokens + (size_t)i * P);
        CHECK(ia >= 0);
    }
    /* the LRU order of b is a's order of use */
    int32_t ia_prev = -1;
    for (int32_t i = b->lru_head; i >= 0; i = b->pages[i].next) {
        int32_t ia = kv_index_find(a, &b->pages[i].key, &b->pages[i].parent,
                                   b->page_tokens + (size_t)i * P);
        if (ia_prev >= 0) CHECK(a->pages[ia].last_use > a->pages[ia_prev].last_use);
        ia_prev = ia;
    }
    for (int w = 0; w < 4; w++) {
        CHECK_INT(lookup(b, w), lookup(a, w));
        CHECK_INT(lookup(b, w), w == 3 ? 16 : NT);
        same_attach(a, b, w);
    }
    CHECK_INT(lookup(b, 4), 0);
    /* importing the same file again: every page a duplicate, nothing added */
    st_kv_io_mem_reader(&in, io.buf, io.len);
    CHECK_OK(st_kv_prefix_import(b, &in, &r));
    CHECK_INT(r.pages, 0);
    CHECK_INT(r.duplicates, 12);
    st_kv_get_stats(b, &sb);
    CHECK_INT(sb.pages_cached, 12);
    checked(b);
    /* an empty cache writes a file that imports nothing */
    st_kv *e = mk(ctx, 16, 8, 1, NULL, 0);
    st_kv_io eo;
    export_to(e, &eo, &c);
    CHECK_INT(c.pages, 0);
    CHECK_INT(eo.len, 40);
    st_kv_io_mem_reader(&in, eo.buf, eo.len);
    CHECK_OK(st_kv_prefix_import(b, &in, &r));
    CHECK_INT(r.pages, 0);
    st_kv_io_mem_release(&eo);
    st_kv_destroy(e);
    st_kv_io_mem_release(&io);
    st_kv_destroy(a);
    st_kv_destroy(b);
    st_ctx_destroy(ctx);
}

TEST(test_budget_cuts_least_recent) {
    prompts();
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = source(ctx, 8, NULL);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    st_kv_prefix_counts c;
    CHECK_OK(st_kv_prefix_export(a, &io, 4, &c)); /* D (2 pages, newest) + 2 of C's chain */
    CHECK_INT(c.pages, 4);
    st_kv *b = mk(ctx, 64, 8, 1, NULL, 0);
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    CHECK_OK(st_kv_prefix_import(b, &in, &c));
    CHECK_INT(c.pages, 4);
    CHECK_INT(lookup(b, 3), 16);
    CHECK_INT(lookup(b, 2), 16);
    checked(b);
    st_kv_io_mem_release(&io);
    st_kv_destroy(a);
    st_kv_destroy(b);
    st_ctx_destroy(ctx);
}

/* max_seqs 3 with D live: 2 free slots for 4 chains, so 2 parts; D's pages (registered,
 * USED) are written too. */
static void multipart(st_kv **pa, st_kv_io *io) {
    st_kv_seq_id d;
    *pa = source(NULL, 3, &d);
    view before, after;
    look(*pa, &before);
    st_kv_prefix_counts c;
    export_to(*pa, io, &c);
    CHECK_INT(c.parts, 2);
    CHECK_INT(c.chains, 4);
    CHECK_INT(c.pages, 12);
    look(*pa, &after);
    same_view(&before, &after, 1);
    checked(*pa);
}

TEST(test_more_chains_than_slots) {
    prompts();
    st_kv *a;
    st_kv_io io;
    multipart(&a, &io);
    st_kv *b = mk(NULL, 64, 3, 1, NULL, 0);
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    st_kv_prefix_counts r;
    CHECK_OK(st_kv_prefix_import(b, &in, &r));
    CHECK_INT(r.parts, 2);
    CHECK_INT(r.pages, 12);
    checked(b);
    for (int w = 0; w < 4; w++) {
        CHECK_INT(lookup(b, w), lookup(a, w));
        same_attach(a, b, w);
    }
    st_kv_io_mem_release(&io);
    st_kv_destroy(a);
    st_kv_destroy(b);
}

TEST(test_import_through_small_hot_pool) {
    prompts();
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *a = source(ctx, 8, NULL);
    st_kv_io io;
    st_kv_prefix_counts c;
    export_to(a, &io, &c);
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/strata-pfx-XXXXXX");
    REQUIRE(mkdtemp(dir) != NULL);
    st_kv *b = mk(ctx, 64, 8, 1, dir, 3); /* 12 pages through 3 frames */
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    st_kv_prefix_counts r;
    CHECK_OK(st_kv_prefix_import(b, &in, &r));
    CHECK_INT(r.pages, 12);
    CHECK_OK(st_kv_flush(b));
    st_kv_stats sb;
    st_kv_get_stats(b, &sb);
    CHECK_INT(sb.pages_cached, 12);
    CHECK(sb.pages_hot <= 3);
    CHECK(sb.pages_cold >= 9);
    CHECK(sb.tier_writes >= 9);
    checked(b);
    for (int w = 0; w < 4; w++) {
        CHECK_INT(lookup(b, w), lookup(a, w));
        same_attach(a, b, w); /* the cold pages read back from the spill file */
    }
    /* and back out of the tiered pool: its cold pages export without moving */
    st_kv_io io2;
    st_kv_get_stats(b, &sb);
    export_to(b, &io2, &c);
    CHECK_INT(c.pages, 12);
    st_kv_stats sb2;
    st_kv_get_stats(b, &sb2);
    CHECK_INT(sb2.pages_cold, sb.pages_cold);
    CHECK_INT(sb2.tier_reads, sb.tier_reads);
    checked(b);
    st_kv *b2 = mk(ctx, 64, 8, 1, NULL, 0);
    st_kv_io_mem_reader(&in, io2.buf, io2.len);
    CHECK_OK(st_kv_prefix_import(b2, &in, &r));
    CHECK_INT(r.pages, 12);
    for (int w = 0; w < 4; w++) same_attach(a, b2, w);
    st_kv_io_mem_release(&io2);
    st_kv_destroy(b2);
    st_kv_io_mem_release(&io);
    st_kv_destroy(a);
    st_kv_destroy(b);
    st_ctx_destroy(ctx);
    CHECK_INT(rmdir(dir), 0);
}

/* Imports buf[n] into b, which must refuse it and stay as it was. */
static int refused(st_kv *b, const view *v0, const uint8_t *buf, size_t n) {
    st_kv_io in;
    st_kv_io_mem_reader(&in, buf, n);
    st_kv_prefix_counts r;
    int rc = st_kv_prefix_import(b, &in, &r);
    if (rc == 0) return 0;
    view v;
    look(b, &v);
    /* the undo drops what it added (free-list order may differ; counts, states, index,
     * LRU and scores of the pool's own pages may not) */
    v.st.cache_evictions = v0->st.cache_evictions;
    same_view(v0, &v, 1);
    CHECK_INT(r.pages, 0);
    return rc;
}

TEST(test_bad_files_refused_pool_unchanged) {
    prompts();
    st_kv *a;
    st_kv_io io;
    multipart(&a, &io);
    st_kv *b = mk(NULL, 64, 3, 1, NULL, 0);
    run(b, 4, 0); /* b's own cached prompt E */
    view v0;
    look(b, &v0);
    /* every truncation point */
    int n_trunc = 0;
    for (size_t n = 0; n < io.len; n++) n_trunc += refused(b, &v0, io.buf, n) != 0;
    CHECK_INT(n_trunc, (int)io.len);
    /* every flipped byte (a bit each; the byte's index picks which) */
    uint8_t *cp = malloc(io.len + 1);
    REQUIRE(cp);
    int n_flip = 0;
    for (size_t i = 0; i < io.len; i++) {
        memcpy(cp, io.buf, io.len);
        cp[i] ^= (uint8_t)(1u << (i % 8));
        n_flip += refused(b, &v0, cp, io.len) != 0;
    }
    CHECK_INT(n_flip, (int)io.len);
    /* a byte past the end */
    memcpy(cp, io.buf, io.len);
    uint8_t *more = realloc(cp, io.len + 1);
    REQUIRE(more);
    more[io.len] = 0;
    CHECK_INT(refused(b, &v0, more, io.len + 1), ST_E_FORMAT);
    free(more);
    checked(b);
    CHECK_INT(lookup(b, 4), NT);
    CHECK_INT(lookup(b, 0), 0);
    /* another model's file: refused naming the fingerprint */
    st_ctx *ctx;
    REQUIRE(st_ctx_create(NULL, &ctx) == 0);
    st_kv *o = mk(ctx, 64, 3, 2, NULL, 0);
    run(o, 4, 0);
    view vo;
    look(o, &vo);
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    CHECK_INT(st_kv_prefix_import(o, &in, NULL), ST_E_FORMAT);
    CHECK(strstr(st_ctx_error(ctx), "fingerprint") != NULL);
    CHECK(strstr(st_ctx_error(ctx), "part 1 of 2") != NULL);
    view vo2;
    look(o, &vo2);
    same_view(&vo, &vo2, 1);
    /* a pool without room: refused before anything is read past the header */
    st_kv *small = mk(ctx, 8, 3, 1, NULL, 0);
    st_kv_io_mem_reader(&in, io.buf, io.len);
    CHECK_INT(st_kv_prefix_import(small, &in, NULL), ST_E_POOL_FULL);
    st_kv_destroy(small);
    st_kv_destroy(o);
    st_ctx_destroy(ctx);
    st_kv_io_mem_release(&io);
    st_kv_destroy(a);
    st_kv_destroy(b);
}

TEST_MAIN(test_roundtrip, test_budget_cuts_least_recent, test_more_chains_than_slots,
          test_import_through_small_hot_pool, test_bad_files_refused_pool_unchanged)
