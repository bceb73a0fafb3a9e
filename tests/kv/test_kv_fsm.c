/* Randomized state-machine test of the KV page library against an oracle.
 *
 * The oracle keeps, per sequence, plain arrays: K and V of every (position, layer), the
 * validity of every position and its token id. Tens of thousands of random operations
 * (append, batch append, per-layer write, fork, write after fork, truncate, remove, free,
 * prefix attach, pin/unpin, snapshot/restore) run against both; after EVERY step every
 * readable position must return exactly what was written (f32: bit-exact; f16/bf16:
 * exactly the oracle's value rounded the same way), every view must expose exactly the
 * valid slots with those values, the invariant checker (refcounts == table references,
 * state lists, counts) must pass, and at the end nothing may leak. An ST_E_POOL_FULL is
 * accepted only when the public stats show that the pool could not have met it.
 *
 * Keyed sequences (appended with token ids) hold "model-like" K/V: a deterministic function
 * of the token prefix, so pages found in the prefix cache have a known content. Anonymous
 * sequences (no token ids, never cached) receive arbitrary writes, which is what makes a
 * copy-on-write leak visible. Seeded and reproducible: `test_kv_fsm --slow` runs longer.
 *
 * Tiered worlds rerun the same machine with a hot pool of a few pages and a
 * spill directory, so most operations spill and fetch; the faulty ones open the spill file
 * through the fault-injecting backend and re-arm a random fault (failed or short writes,
 * EINTR storms, ENOSPC, EIO or corrupted reads) every few dozen steps. The property: every
 * live sequence equals the oracle, or it has been marked failed (st_kv_seq_error) by an
 * operation that returned an error; failed sequences are freed and forgotten. */
#include "strata/kv.h"
#include "kv/kv_int.h"
#include "../test.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

static int g_slow; /* test-only flag set from argv */

#define MAXS 6      /* oracle sequences at once */
#define MAXLEN 200  /* positions per sequence */
#define MAXL 4      /* layers */
#define NDOC 4
#define DOCLEN 1024

typedef struct rng { uint64_t s; } rng;
static uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
static uint64_t rnext(rng *r) { return r->s = mix(r->s); }
static int rint_(rng *r, int n) { return (int)(rnext(r) % (uint64_t)n); }
static float rfloat(rng *r) { return (float)((rnext(r) >> 40) * (1.0 / 16777216.0) * 4.0 - 2.0); }

typedef struct cfg {
    st_type type;
    int P, L, H, D, n_pages, steps;
    uint64_t seed;
    int ram;    /* > 0: tiered, hot pool of this many pages */
    int faults; /* tiered: inject faults */
    int ram_blocks; /* tiered: > 0: hot pool of this many layer blocks instead */
} cfg;

/* The hot pool in layer blocks (frames). */
static int cfg_frames(const cfg *c) { return c->ram_blocks ? c->ram_blocks : c->ram * c->L; }

typedef struct oseq {
    int live, keyed, doc;
    st_kv_seq_id id;
    int64_t len;
    float k[MAXLEN][MAXL][16], v[MAXLEN][MAXL][16]; /* [pos][layer][H*D <= 16] */
    uint8_t valid[MAXLEN];
    int32_t tok[MAXLEN];
    uint64_t ph[MAXLEN]; /* hash of tok[0..pos] */
} oseq;

typedef struct world {
    cfg c;
    rng r;
    st_ctx *ctx;
    st_kv *kv;
    oseq s[MAXS];
    int32_t doc[NDOC][DOCLEN];
    st_kv_page_id pins[64];
    int n_pins;
    int step, failed;
    long n_ok[16], n_err[16];
    long n_full_pages, n_full_hot; /* POOL_FULL answers checked against the stats */
    long n_restore_full, n_restore_limit;
    st_io *fault;  /* tiered + faults: the spill file's fault backend (owned by the store) */
    long n_seq_failed;
    char dir[64];
} world;

static int tiered(const world *w) { return w->c.ram > 0; }

/* An operation's error is acceptable when it changed nothing (POOL_FULL, a refused spill)
 * or failed the sequence; a failed sequence is then dropped. */
static int tier_err_ok(world *w, const oseq *o, int rc) {
    if (!tiered(w)) return 0;
    if (rc == ST_E_POOL_FULL || rc == ST_E_NOSPACE) return 1;
    return o && st_kv_seq_error(w->kv, o->id) != 0;
}

static float canon(uint64_t ph, int l, int i, int which) {
    uint64_t h = mix(ph ^ ((uint64_t)l << 48) ^ ((uint64_t)i << 8) ^ (uint64_t)which);
    return (float)((h >> 40) * (1.0 / 16777216.0) * 2.0 - 1.0);
}

/* What the library stores for x: the oracle's expectation after the element conversion. */
static float stored(const world *w, float x) {
    switch (w->c.type) {
    case ST_TYPE_F16: return st_fp16_to_fp32(st_fp32_to_fp16(x));
    case ST_TYPE_BF16: return st_bf16_to_fp32(st_fp32_to_bf16(x));
    default: return x;
    }
}

static int hd(const world *w) { return w->c.H * w->c.D; }

#define WCHECK(cond, ...)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "  FAIL step %d (seed %llu): ", w->step,                   \
                    (unsigned long long)w->c.seed);                                    \
            fprintf(stderr, __VA_ARGS__);                                              \
            fprintf(stderr, " [%s]\n", st_ctx_error(w->ctx));                          \
            test_failures_++;                                                          \
            w->failed = 1;                                                             \
            return;                                                                    \
        }                                                                              \
    } while (0)

/* An operation answered ST_E_POOL_FULL: the public stats must show that it could not have
 * been met. need = pages it had to allocate. The hot pool (tier) refuses only when nearly
 * every frame (layer block) is pinned: a write holds at most 2 blocks of its own (a COW
 * source and its copy), a pin needs the L blocks of its page at once, so
 * pinned blocks + L + 2 >= ram_blocks. */
static void check_full(world *w, int64_t need) {
    st_kv_stats st;
    st_kv_get_stats(w->kv, &st);
    if (tiered(w) && strstr(st_ctx_error(w->ctx), "RAM block")) {
        WCHECK(st.pages_pinned * w->c.L + w->c.L + 2 >= st.ram_blocks,
               "hot pool full with %lld of %lld blocks pinned",
               (long long)(st.pages_pinned * w->c.L), (long long)st.ram_blocks);
        w->n_full_hot++;
        return;
    }
    WCHECK(st.pages_free + st.pages_cached < need,
           "POOL_FULL for %lld page(s) with %lld free + %lld cached", (long long)need,
           (long long)st.pages_free, (long long)st.pages_cached);
    w->n_full_pages++;
}

/* Pages a write of [pos, pos+n) must copy first: those shared (refs > 1). */
static int64_t cow_need(world *w, const oseq *o, int64_t pos, int64_t n) {
    st_kv_page_id ids[MAXLEN];
    int np = 0, refs = 0;
    st_kv_seq_pages(w->kv, o->id, ids, MAXLEN, &np);
    int64_t need = 0;
    for (int64_t i = pos / w->c.P; i <= (pos + n - 1) / w->c.P && i < np; i++)
        if (ids[i] >= 0 && st_kv_page_info(w->kv, ids[i], &refs, NULL) == 0 && refs > 1) need++;
    return need;
}

/* Pages a reserve of n more tokens allocates: new entries, plus a copy of a partial tail
 * that is shared or was removed (st_kv_seq_reserve). */
static int64_t reserve_need(world *w, const oseq *o, int64_t n) {
    const int P = w->c.P;
    int64_t need = (o->len + n + P - 1) / P - (o->len + P - 1) / P;
    if (o->len % P) {
        st_kv_page_id ids[MAXLEN];
        int np = 0, refs = 0;
        st_kv_seq_pages(w->kv, o->id, ids, MAXLEN, &np);
        int32_t t = ids[np - 1];
        if (t < 0 || (st_kv_page_info(w->kv, t, &refs, NULL) == 0 && refs > 1)) need++;
    }
    return need;
}

static float view_elem(const world *w, const st_attn_page *pv, int isv, int h, int s, int d) {
    /* K^T [H][D][P], V [H][P][D] */
    const size_t idx = isv ? ((size_t)h * w->c.P + s) * w->c.D + d
                           : ((size_t)h * w->c.D + d) * w->c.P + s;
    const void *base = isv ? pv->v : pv->k;
    switch (w->c.type) {
    case ST_TYPE_F32: return ((const float *)base)[idx];
    case ST_TYPE_F16: return st_fp16_to_fp32(((const uint16_t *)base)[idx]);
    case ST_TYPE_BF16: return st_bf16_to_fp32(((const uint16_t *)base)[idx]);
    default: return (float)((const int8_t *)base)[idx] * (isv ? pv->v_scale : pv->k_scale)[h];
    }
}

static void check_seq(world *w, const oseq *o) {
    if (tiered(w) && st_kv_seq_error(w->kv, o->id)) return; /* dropped by check_all */
    int64_t len = -1;
    WCHECK(st_kv_seq_len(w->kv, o->id, &len) == 0 && len == o->len, "seq %lld len %lld vs %lld",
           (long long)o->id, (long long)len, (long long)o->len);
    float kb[16], vb[16];
    int32_t tok[MAXLEN];
    WCHECK(st_kv_seq_tokens(w->kv, o->id, 0, o->len, tok) == 0, "tokens");
    for (int64_t p = 0; p < o->len; p++) {
        int valid = -1;
        WCHECK(st_kv_seq_valid(w->kv, o->id, p, &valid) == 0 && valid == o->valid[p],
               "seq %lld pos %lld valid %d vs %d", (long long)o->id, (long long)p, valid, o->valid[p]);
        WCHECK(tok[p] == (o->keyed ? o->tok[p] : -1), "seq %lld pos %lld token %d vs %d", (long long)o->id,
               (long long)p, tok[p], o->tok[p]);
        for (int l = 0; l < w->c.L; l++) {
            int rc = st_kv_read(w->kv, o->id, l, p, 1, kb, vb);
            if (rc && o->valid[p] && tiered(w)) { /* a read fault: the sequence must fail */
                WCHECK(st_kv_seq_error(w->kv, o->id) == rc, "read rc %d but seq error %d", rc,
                       st_kv_seq_error(w->kv, o->id));
                return;
            }
            if (!o->valid[p]) {
                WCHECK(rc == ST_E_NOT_FOUND, "read of removed pos %lld: rc %d", (long long)p, rc);
                continue;
            }
            WCHECK(rc == 0, "read pos %lld rc %d", (long long)p, rc);
            for (int i = 0; i < hd(w); i++)
                WCHECK(kb[i] == stored(w, o->k[p][l][i]) && vb[i] == stored(w, o->v[p][l][i]),
                       "seq %lld pos %lld layer %d elem %d: K %.9g vs %.9g, V %.9g vs %.9g",
                       (long long)o->id, (long long)p, l, i, kb[i], stored(w, o->k[p][l][i]), vb[i],
                       stored(w, o->v[p][l][i]));
        }
    }
    /* views: exactly the valid slots, with the same values, in logical order */
    st_attn_page views[MAXLEN];
    int nv = -1, l = rint_(&w->r, w->c.L);
    int vrc = st_kv_seq_views(w->kv, o->id, l, views, MAXLEN, &nv);
    if (tiered(w) && vrc == ST_E_STATE) return; /* a page not in RAM: only attend reads it */
    WCHECK(vrc == 0, "views");
    int64_t seen = 0, last = -1;
    for (int j = 0; j < nv; j++) {
        const st_attn_page *pv = &views[j];
        WCHECK(pv->pos0 > last && pv->pos0 % w->c.P == 0 && pv->n_tokens >= 1 &&
                   pv->n_tokens <= w->c.P && pv->pos0 + pv->n_tokens <= o->len,
               "view %d pos0 %lld n_tokens %d", j, (long long)pv->pos0, pv->n_tokens);
        last = pv->pos0;
        for (int s = 0; s < pv->n_tokens; s++) {
            int64_t p = pv->pos0 + s;
            int bit = !pv->valid || ((pv->valid[s >> 6] >> (s & 63)) & 1);
            WCHECK(bit == o->valid[p], "view slot pos %lld valid %d vs %d", (long long)p, bit,
                   o->valid[p]);
            if (!bit) continue;
            seen++;
            for (int h = 0; h < w->c.H; h++)
                for (int d = 0; d < w->c.D; d++) {
                    int i = h * w->c.D + d;
                    WCHECK(view_elem(w, pv, 0, h, s, d) == stored(w, o->k[p][l][i]) &&
                               view_elem(w, pv, 1, h, s, d) == stored(w, o->v[p][l][i]),
                           "view value pos %lld layer %d elem %d", (long long)p, l, i);
                }
        }
    }
    int64_t n_valid = 0;
    for (int64_t p = 0; p < o->len; p++) n_valid += o->valid[p];
    WCHECK(seen == n_valid, "views expose %lld valid slots, oracle %lld", (long long)seen,
           (long long)n_valid);
}

static void drop_failed(world *w) {
    for (int j = 0; j < MAXS; j++) {
        oseq *o = &w->s[j];
        if (!o->live || !st_kv_seq_error(w->kv, o->id)) continue;
        WCHECK(tiered(w), "seq %lld failed without a tier", (long long)o->id);
        WCHECK(st_kv_seq_free(w->kv, o->id) == 0, "free of a failed seq");
        o->live = 0;
        w->n_seq_failed++;
    }
}

static void check_all(world *w) {
    char msg[256];
    drop_failed(w);
    WCHECK(kv_check(w->kv, msg, sizeof msg) == 0, "invariant: %s", msg);
    /* refcounts through the public API: refs == number of table entries naming the page */
    int32_t *refs = calloc((size_t)w->c.n_pages, sizeof *refs);
    for (int j = 0; j < MAXS; j++) {
        if (!w->s[j].live) continue;
        st_kv_page_id ids[MAXLEN];
        int n = 0;
        st_kv_seq_pages(w->kv, w->s[j].id, ids, MAXLEN, &n);
        for (int i = 0; i < n; i++)
            if (ids[i] >= 0) refs[ids[i]]++;
    }
    int bad = -1;
    for (int i = 0; i < w->c.n_pages; i++) {
        int r = -1;
        st_kv_page_info(w->kv, i, &r, NULL);
        if (r != refs[i]) bad = i;
    }
    free(refs);
    WCHECK(bad < 0, "page %d refcount differs from table references", bad);
    /* tiered: every cold position costs a disk read, so contents every 4th step (and the
     * invariants, above, every step) keep the test at seconds */
    if (tiered(w) && w->step % 4) return;
    for (int j = 0; j < MAXS && !w->failed; j++)
        if (w->s[j].live) check_seq(w, &w->s[j]);
}

static oseq *pick(world *w) {
    int n = 0, idx[MAXS];
    for (int j = 0; j < MAXS; j++)
        if (w->s[j].live) idx[n++] = j;
    return n ? &w->s[idx[rint_(&w->r, n)]] : NULL;
}
static oseq *free_slot(world *w) {
    for (int j = 0; j < MAXS; j++)
        if (!w->s[j].live) return &w->s[j];
    return NULL;
}

static void set_canon(world *w, oseq *o, int64_t p) {
    for (int l = 0; l < w->c.L; l++)
        for (int i = 0; i < hd(w); i++) {
            o->k[p][l][i] = canon(o->ph[p], l, i, 0);
            o->v[p][l][i] = canon(o->ph[p], l, i, 1);
        }
}

static void op_append(world *w, oseq *o) {
    int n = 1 + rint_(&w->r, rint_(&w->r, 4) == 0 ? 1 : 2 * w->c.P);
    if (o->len + n > MAXLEN) return;
    oseq t = *o; /* the would-be oracle */
    int32_t toks[MAXLEN];
    for (int j = 0; j < n; j++) {
        int64_t p = o->len + j;
        t.valid[p] = 1;
        if (o->keyed) {
            toks[j] = rint_(&w->r, 10) ? w->doc[o->doc][p] : 1000 + rint_(&w->r, 50);
            t.tok[p] = toks[j];
            t.ph[p] = mix((p ? t.ph[p - 1] : 77) ^ ((uint64_t)toks[j] + 1) * 0x100000001b3ull);
            set_canon(w, &t, p);
        } else {
            t.tok[p] = -1;
            for (int l = 0; l < w->c.L; l++)
                for (int i = 0; i < hd(w); i++) {
                    t.k[p][l][i] = rfloat(&w->r);
                    t.v[p][l][i] = rfloat(&w->r);
                }
        }
    }
    t.len = o->len + n;
    const int HD = hd(w);
    float *k = malloc(sizeof(float) * (size_t)w->c.L * n * HD);
    float *v = malloc(sizeof(float) * (size_t)w->c.L * n * HD);
    for (int l = 0; l < w->c.L; l++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < HD; i++) {
                k[((size_t)l * n + j) * HD + i] = t.k[o->len + j][l][i];
                v[((size_t)l * n + j) * HD + i] = t.v[o->len + j][l][i];
            }
    int rc;
    const int32_t *tk = o->keyed ? toks : NULL;
    const int64_t need = reserve_need(w, o, n);
    if (rint_(&w->r, 2)) {
        rc = st_kv_seq_append(w->kv, o->id, n, tk, k, v);
        if (rc == ST_E_POOL_FULL) check_full(w, need);
    } else { /* the model's way: reserve, then layer by layer (in chunks), then commit */
        int64_t p0 = -1;
        rc = st_kv_seq_reserve(w->kv, o->id, n, tk, &p0);
        if (rc == ST_E_POOL_FULL) check_full(w, need);
        if (rc == 0) {
            WCHECK(p0 == o->len, "reserve p0 %lld", (long long)p0);
            for (int l = 0; l < w->c.L; l++) {
                int a = rint_(&w->r, n + 1);
                const float *kl = k + (size_t)l * n * HD, *vl = v + (size_t)l * n * HD;
                int r1 = a ? st_kv_write(w->kv, o->id, l, p0, a, kl, vl) : 0;
                int r2 = a < n && !r1 ? st_kv_write(w->kv, o->id, l, p0 + a, n - a,
                                                    kl + (size_t)a * HD, vl + (size_t)a * HD) : 0;
                if ((r1 || r2) && tier_err_ok(w, o, r1 ? r1 : r2)) {
                    rc = r1 ? r1 : r2;
                    if (rc == ST_E_POOL_FULL) check_full(w, 0); /* reserved: the hot pool */
                    break;
                }
                WCHECK(r1 == 0 && r2 == 0, "write after reserve: %d %d", r1, r2);
            }
            if (!rc && (rc = st_kv_seq_commit(w->kv, o->id)) == ST_E_POOL_FULL) check_full(w, 0);
            /* the model's way of undoing a step (forward.c): back to the old length */
            if (rc && !st_kv_seq_error(w->kv, o->id))
                WCHECK(st_kv_seq_truncate(w->kv, o->id, p0) == 0, "undo truncate");
        }
    }
    free(k);
    free(v);
    if (rc == ST_E_POOL_FULL || (rc && tier_err_ok(w, o, rc))) {
        w->n_err[rc == ST_E_POOL_FULL ? 1 : 7]++;
        return;
    }
    WCHECK(rc == 0, "append rc %d", rc);
    w->n_ok[1]++;
    *o = t;
}

static void op_write(world *w, oseq *o) {
    if (o->len == 0) return;
    int64_t pos = rint_(&w->r, (int)o->len);
    int n = 1 + rint_(&w->r, w->c.P + 3);
    if (n > o->len - pos) n = (int)(o->len - pos);
    int l = rint_(&w->r, w->c.L), any_invalid = 0;
    float k[2 * 256 * 16] = {0}, v[2 * 256 * 16] = {0};
    float nk[MAXLEN][16], nv[MAXLEN][16];
    for (int j = 0; j < n; j++) {
        any_invalid |= !o->valid[pos + j];
        for (int i = 0; i < hd(w); i++) {
            nk[j][i] = o->keyed ? o->k[pos + j][l][i] : rfloat(&w->r);
            nv[j][i] = o->keyed ? o->v[pos + j][l][i] : rfloat(&w->r);
            k[j * hd(w) + i] = nk[j][i];
            v[j * hd(w) + i] = nv[j][i];
        }
    }
    const int64_t need = any_invalid ? 0 : cow_need(w, o, pos, n);
    int rc = st_kv_write(w->kv, o->id, l, pos, n, k, v);
    if (rc == ST_E_POOL_FULL) check_full(w, need);
    if (any_invalid) {
        WCHECK(rc == ST_E_NOT_FOUND, "write over removed position: rc %d", rc);
        return;
    }
    if (rc == ST_E_POOL_FULL || (rc && tier_err_ok(w, o, rc))) {
        w->n_err[2]++;
        return;
    }
    WCHECK(rc == 0, "write rc %d", rc);
    w->n_ok[2]++;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < hd(w); i++) {
            o->k[pos + j][l][i] = nk[j][i];
            o->v[pos + j][l][i] = nv[j][i];
        }
}

static void op_fork(world *w, oseq *o) {
    oseq *d = free_slot(w);
    if (!d) return;
    st_kv_seq_id id = -1;
    int rc = st_kv_seq_fork(w->kv, o->id, &id);
    if (rc && tier_err_ok(w, o, rc)) return;
    WCHECK(rc == 0, "fork rc %d", rc);
    *d = *o;
    d->id = id;
    w->n_ok[3]++;
}

static void op_attach(world *w) {
    oseq *o = free_slot(w);
    if (!o) return;
    int d = rint_(&w->r, NDOC), n = rint_(&w->r, MAXLEN + 1);
    st_kv_seq_id id;
    int rc = st_kv_seq_create(w->kv, &id);
    WCHECK(rc == 0, "create rc %d", rc);
    int64_t look = -1, att = -1;
    WCHECK(st_kv_prefix_lookup(w->kv, w->doc[d], n, &look) == 0, "lookup");
    WCHECK(st_kv_prefix_attach(w->kv, id, w->doc[d], n, &att) == 0, "attach");
    WCHECK(att == look && att % w->c.P == 0 && att <= n, "attach %lld lookup %lld n %d",
           (long long)att, (long long)look, n);
    memset(o, 0, sizeof *o);
    o->live = o->keyed = 1;
    o->doc = d;
    o->id = id;
    o->len = att;
    for (int64_t p = 0; p < att; p++) {
        o->valid[p] = 1;
        o->tok[p] = w->doc[d][p];
        o->ph[p] = mix((p ? o->ph[p - 1] : 77) ^ ((uint64_t)o->tok[p] + 1) * 0x100000001b3ull);
        set_canon(w, o, p);
    }
    int cov = -1;
    WCHECK(st_kv_prefix_covers(w->kv, id, w->doc[d], att, &cov) == 0 && cov == 1, "covers");
    if (att > 0) {
        int32_t t[MAXLEN];
        memcpy(t, w->doc[d], sizeof(int32_t) * (size_t)att);
        t[att - 1] ^= 1;
        WCHECK(st_kv_prefix_covers(w->kv, id, t, att, &cov) == 0 && cov == 0, "covers changed");
    }
    w->n_ok[att ? 4 : 5]++;
}

static void op_pin(world *w) {
    if (w->n_pins > 0 && (w->n_pins == 64 || rint_(&w->r, 2))) {
        int j = rint_(&w->r, w->n_pins);
        int rc = st_kv_unpin(w->kv, w->pins[j]);
        WCHECK(rc == 0, "unpin %d rc %d", w->pins[j], rc);
        w->pins[j] = w->pins[--w->n_pins];
        return;
    }
    /* a page nobody uses (free or cached) cannot be pinned; an unpinned one not unpinned */
    int id = rint_(&w->r, w->c.n_pages), refs, pins;
    st_kv_page_info(w->kv, id, &refs, &pins);
    if (refs == 0 && pins == 0) {
        WCHECK(st_kv_pin(w->kv, id) == ST_E_STATE, "pin of unused page %d accepted", id);
        WCHECK(st_kv_unpin(w->kv, id) == ST_E_STATE, "unpin of unpinned page %d accepted", id);
    }
    oseq *o = pick(w);
    if (!o) return;
    st_kv_page_id ids[MAXLEN];
    int n = 0;
    st_kv_seq_pages(w->kv, o->id, ids, MAXLEN, &n);
    if (n == 0) return;
    int32_t pg = ids[rint_(&w->r, n)];
    if (pg < 0) return;
    /* leave the hot pool room: a pin takes L frames, a write needs 2 */
    const int fr = cfg_frames(&w->c);
    if (tiered(w) && ((w->n_pins + 1) * w->c.L + 2 > fr || (w->n_pins && w->n_pins >= fr / (2 * w->c.L))))
        return;
    int rc = st_kv_pin(w->kv, pg);
    if (rc && tier_err_ok(w, o, rc)) return;
    WCHECK(rc == 0, "pin %d: rc %d", pg, rc);
    w->pins[w->n_pins++] = pg;
}

static void op_snapshot(world *w) {
    st_kv_seq_id ids[MAXS];
    oseq *os[MAXS];
    int n = 0;
    for (int j = 0; j < MAXS; j++)
        if (w->s[j].live && rint_(&w->r, 2)) {
            os[n] = &w->s[j];
            ids[n++] = w->s[j].id;
        }
    if (n == 0) return;
    int64_t maxp = rint_(&w->r, 3) ? -1 : rint_(&w->r, 12);
    st_kv_io io;
    st_kv_io_mem_writer(&io);
    int rc = st_kv_snapshot_write(w->kv, ids, n, maxp, &io);
    if (rc && tiered(w)) {
        int any_failed = 0;
        for (int j = 0; j < n; j++) any_failed |= st_kv_seq_error(w->kv, ids[j]) != 0;
        st_kv_io_mem_release(&io);
        WCHECK(rc == ST_E_POOL_FULL || rc == ST_E_NOSPACE || any_failed,
               "snapshot write rc %d without a failed sequence", rc);
        return;
    }
    WCHECK(rc == 0, "snapshot write rc %d", rc);
    /* The restored copies replace the originals. Mostly the originals are freed first, as
     * a server swapping a session out and back in does, so the restore has their room;
     * sometimes it must fit beside them (and may be refused). */
    const int free_first = rint_(&w->r, 4) != 0;
    if (free_first)
        for (int j = 0; j < n; j++) {
            WCHECK(st_kv_seq_free(w->kv, os[j]->id) == 0, "free original");
            os[j]->live = 0; /* until restored */
        }
    const uint32_t snap_pages = io.buf[68] | io.buf[69] << 8 | io.buf[70] << 16 |
                                (uint32_t)io.buf[71] << 24; /* header n_pages (FORMATS.md) */
    st_kv_stats st;
    st_kv_get_stats(w->kv, &st);
    st_kv_io in;
    st_kv_io_mem_reader(&in, io.buf, io.len);
    st_kv_seq_id out[MAXS];
    int nout = -1;
    rc = st_kv_snapshot_read(w->kv, &in, out, MAXS, &nout);
    st_kv_io_mem_release(&io);
    if (rc == ST_E_POOL_FULL) {
        WCHECK(snap_pages > st.pages_free + st.pages_cached,
               "restore of %u pages refused with %lld free + %lld cached", snap_pages,
               (long long)st.pages_free, (long long)st.pages_cached);
        w->n_restore_full++;
        return;
    }
    if (rc == ST_E_LIMIT) {
        WCHECK(n > 2 * MAXS - st.n_seqs, "restore of %d sequences refused with %lld live", n,
               (long long)st.n_seqs);
        w->n_restore_limit++;
        return;
    }
    WCHECK(rc == 0 && nout == n, "snapshot read rc %d n %d", rc, nout);
    w->n_ok[6]++;
    for (int j = 0; j < n; j++) {
        int64_t len = -1;
        st_kv_seq_len(w->kv, out[j], &len);
        WCHECK(len == os[j]->len || (maxp >= 0 && len < os[j]->len && len % w->c.P == 0),
               "restored len %lld of %lld", (long long)len, (long long)os[j]->len);
        if (!free_first) WCHECK(st_kv_seq_free(w->kv, os[j]->id) == 0, "free original");
        os[j]->live = 1;
        os[j]->id = out[j]; /* a restore that lost a page fails the copy: dropped later */
        os[j]->len = len;
    }
}

static void step(world *w) {
    drop_failed(w); /* a check's read may have failed a sequence after it was checked */
    if (w->failed) return;
    oseq *o = pick(w);
    int op = rint_(&w->r, 100);
    if (op < 6 || !o) {
        oseq *d = free_slot(w);
        if (!d) return;
        st_kv_seq_id id;
        WCHECK(st_kv_seq_create(w->kv, &id) == 0, "create");
        memset(d, 0, sizeof *d);
        d->live = 1;
        d->id = id;
        d->keyed = rint_(&w->r, 3) != 0;
        d->doc = rint_(&w->r, NDOC);
    } else if (op < 40) {
        op_append(w, o);
    } else if (op < 50) {
        op_write(w, o);
    } else if (op < 58) {
        op_fork(w, o);
    } else if (op < 65) {
        int64_t len = rint_(&w->r, (int)o->len + 1);
        WCHECK(st_kv_seq_truncate(w->kv, o->id, len) == 0, "truncate");
        o->len = len;
    } else if (op < 72) {
        int64_t p0 = rint_(&w->r, (int)o->len + 1), p1 = p0 + rint_(&w->r, 3 * w->c.P);
        WCHECK(st_kv_seq_remove(w->kv, o->id, p0, p1) == 0, "remove");
        for (int64_t p = p0; p < p1 && p < o->len; p++) o->valid[p] = 0;
    } else if (op < 78) {
        WCHECK(st_kv_seq_free(w->kv, o->id) == 0, "free");
        WCHECK(st_kv_seq_free(w->kv, o->id) == ST_E_STATE, "double free of a sequence");
        o->live = 0;
    } else if (op < 88) {
        op_attach(w);
    } else if (op < 97) {
        op_pin(w);
    } else {
        op_snapshot(w);
    }
}

static int fault_open(void *arg, const char *path, int direct, st_io **out) {
    world *w = arg;
    st_io *fd;
    int rc = st_io_fd_open(path, O_RDWR | O_CREAT | O_TRUNC, 0600, &fd);
    if (rc) return rc;
    st_io_fault_cfg none;
    memset(&none, 0, sizeof none);
    if ((rc = st_io_fault_create(fd, &none, out)) == 0) w->fault = *out;
    return rc;
}

/* A new random fault, armed a few calls ahead (counters are absolute). */
static void rearm(world *w) {
    st_kv_flush(w->kv); /* no I/O in flight while the rules change */
    st_io_fault_counts n = st_io_fault_get_counts(w->fault);
    st_io_fault_cfg f;
    memset(&f, 0, sizeof f);
    switch (rint_(&w->r, 7)) {
    case 0: f.fail_write_nth = n.writes + 1 + rint_(&w->r, 8); break;
    case 1: f.short_write_max = 512 + rint_(&w->r, 4096); f.short_read_max = 1000; break;
    case 2: f.eintr_storm = 3; break;
    case 3: f.eio_read_nth = n.reads + 1 + rint_(&w->r, 8); break;
    case 4: f.corrupt_read_nth = n.reads + 1 + rint_(&w->r, 8), f.corrupt_byte = rint_(&w->r, 5000); break;
    case 5: f.enospc_enabled = 1, f.enospc_after_bytes = n.bytes_written + rint_(&w->r, 40000); break;
    default: break; /* a quiet period */
    }
    st_io_fault_set(w->fault, &f);
}

static void run_world(cfg c) {
    REQUIRE(c.L <= MAXL && c.H * c.D <= 16);
    world *w = calloc(1, sizeof *w);
    w->c = c;
    w->r.s = c.seed;
    for (int d = 0; d < NDOC; d++)
        for (int i = 0; i < DOCLEN; i++) w->doc[d][i] = rint_(&w->r, 100);
    REQUIRE(st_ctx_create(NULL, &w->ctx) == 0);
    st_kv_params p = st_kv_default_params();
    p.n_layer = c.L;
    p.n_kv_head = c.H;
    p.head_dim = c.D;
    p.page_size = c.P;
    p.type = c.type;
    p.n_pages = c.n_pages;
    p.max_seqs = 2 * MAXS;
    p.fingerprint.b[0] = 42;
    if (c.ram) {
        snprintf(w->dir, sizeof w->dir, "/tmp/strata-fsm-XXXXXX");
        REQUIRE(mkdtemp(w->dir) != NULL);
        p.spill_dir = w->dir;
        p.ram_pages = c.ram;
        p.ram_blocks = c.ram_blocks;
        p.spill_no_direct = (int)(c.seed & 1); /* both I/O paths */
        if (c.faults) {
            p.spill_open = fault_open;
            p.spill_open_arg = w;
        }
    }
    if (st_kv_create(w->ctx, &p, &w->kv) != 0) {
        CHECK(0);
        st_ctx_destroy(w->ctx);
        free(w);
        return;
    }
    for (w->step = 0; w->step < c.steps && !w->failed; w->step++) {
        if (w->fault && w->step % 40 == 0) rearm(w);
        step(w);
        if (!w->failed) check_all(w);
    }
    if (w->fault) { /* quiet disk for the teardown checks */
        st_io_fault_cfg none;
        memset(&none, 0, sizeof none);
        st_kv_flush(w->kv);
        st_io_fault_set(w->fault, &none);
    }
    st_kv_stats st;
    st_kv_get_stats(w->kv, &st);
    fprintf(stderr, "  %s P=%d: %d steps, appends %ld (%ld full), writes %ld (%ld full), "
            "forks %lld, cow %lld, hits %lld misses %lld reused %lld, evictions %lld, "
            "restores %ld ok, %ld refused (%ld pool full, %ld limit); POOL_FULL checked "
            "against the stats: %ld pages, %ld hot pool\n", st_type_name(c.type), c.P, w->step,
            w->n_ok[1], w->n_err[1], w->n_ok[2], w->n_err[2], (long long)st.forks,
            (long long)st.cow_copies, (long long)st.prefix_hits, (long long)st.prefix_misses,
            (long long)st.prefix_tokens_reused, (long long)st.cache_evictions, w->n_ok[6],
            w->n_restore_full + w->n_restore_limit, w->n_restore_full, w->n_restore_limit,
            w->n_full_pages, w->n_full_hot);
    if (c.ram)
        fprintf(stderr, "    tier: ram %d blocks%s: %lld spills, %lld fetches, %lld blocks read, "
                "%lld drops, %lld pages lost, %ld sequences failed and dropped\n", cfg_frames(&c),
                c.faults ? " + faults" : "", (long long)st.tier_writes, (long long)st.tier_reads,
                (long long)st.tier_block_reads, (long long)st.tier_drops,
                (long long)st.tier_errors, w->n_seq_failed);
    if (!w->failed) { /* every path must have been exercised, or the test proves little */
        CHECK(st.forks > 0 && st.cow_copies > 0 && st.prefix_hits > 0 && st.prefix_misses > 0);
        /* (faulty worlds drop failed sequences so often that the pool rarely fills) */
        CHECK(st.cache_evictions > 0 && (w->n_err[1] > 0 || c.faults) && w->n_ok[6] > 0);
        if (c.ram) CHECK(st.tier_writes > 0 && st.tier_reads > 0 && st.tier_block_reads > 0);
        if (c.faults) CHECK(st.tier_errors > 0 && w->n_seq_failed > 0);
        CHECK_INT(st.tier_errors, st.tier_io_errors + st.tier_checksum_failures);
        if (c.ram && !c.faults) CHECK_INT(w->n_seq_failed, 0);
    }
    /* teardown: nothing may leak */
    while (w->n_pins) CHECK_OK(st_kv_unpin(w->kv, w->pins[--w->n_pins]));
    for (int j = 0; j < MAXS; j++)
        if (w->s[j].live) CHECK_OK(st_kv_seq_free(w->kv, w->s[j].id));
    st_kv_get_stats(w->kv, &st);
    CHECK_INT(st.pages_used, 0);
    CHECK_INT(st.pages_pinned, 0);
    CHECK_INT(st.pages_free + st.pages_cached, c.n_pages);
    /* every cached page is reclaimable: one sequence can take the whole pool */
    st_kv_seq_id id;
    CHECK_OK(st_kv_seq_create(w->kv, &id));
    CHECK_OK(st_kv_seq_reserve(w->kv, id, (int64_t)c.n_pages * c.P, NULL, NULL));
    CHECK_INT(st_kv_seq_reserve(w->kv, id, 1, NULL, NULL), ST_E_POOL_FULL);
    CHECK_OK(st_kv_seq_free(w->kv, id));
    st_kv_get_stats(w->kv, &st);
    CHECK_INT(st.pages_free, c.n_pages);
    char msg[256];
    CHECK_OK(kv_check(w->kv, msg, sizeof msg));
    st_kv_destroy(w->kv); /* removes the instance directory */
    if (c.ram) CHECK_INT(rmdir(w->dir), 0);
    st_ctx_destroy(w->ctx);
    free(w);
}

TEST(test_fsm_f32) {
    int steps = g_slow ? 200000 : 8000;
    run_world((cfg){ST_TYPE_F32, 8, 2, 2, 4, 32, steps, 1, 0, 0, 0});
    run_world((cfg){ST_TYPE_F32, 16, 1, 1, 3, 24, steps, 2, 0, 0, 0});
    if (g_slow)
        for (uint64_t s = 3; s < 13; s++) run_world((cfg){ST_TYPE_F32, 8, 2, 2, 8, 40, 50000, s, 0, 0, 0});
}

TEST(test_fsm_f16) {
    int steps = g_slow ? 200000 : 6000;
    run_world((cfg){ST_TYPE_F16, 8, 2, 2, 4, 32, steps, 11, 0, 0, 0});
    run_world((cfg){ST_TYPE_BF16, 8, 2, 1, 5, 40, steps / 2, 12, 0, 0, 0});
}

TEST(test_fsm_tiered) {
    int steps = g_slow ? 100000 : 2000;
    /* hot pool of 4-6 pages against 32-40 logical pages: most operations spill and fetch */
    run_world((cfg){ST_TYPE_F32, 8, 2, 2, 4, 32, steps, 21, 4, 0, 0});
    run_world((cfg){ST_TYPE_F16, 16, 1, 1, 3, 24, steps, 22, 6, 0, 0});
    run_world((cfg){ST_TYPE_BF16, 8, 2, 2, 8, 24, steps, 23, 5, 0, 0});
    /* residency by layer block: fewer frames than two pages' blocks (L = 4, 7 frames), so
     * single layers of one page evict each other */
    run_world((cfg){ST_TYPE_F32, 8, 4, 2, 4, 20, steps, 24, 2, 0, 7});
    run_world((cfg){ST_TYPE_F16, 8, 3, 1, 4, 32, steps, 25, 2, 0, 11});
}

TEST(test_fsm_tiered_faults) {
    int steps = g_slow ? 100000 : 2000;
    run_world((cfg){ST_TYPE_F32, 8, 2, 2, 4, 32, steps, 31, 4, 1, 0});
    run_world((cfg){ST_TYPE_BF16, 8, 2, 1, 5, 40, steps, 32, 6, 1, 0});
    run_world((cfg){ST_TYPE_F32, 8, 4, 2, 4, 32, steps, 33, 2, 1, 7});
}

int main(int argc, char **argv) {
    int j = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--slow") == 0) g_slow = 1;
        else argv[j++] = argv[i];
    }
    argc = j;
    test_fn_ fns[] = {test_fsm_f32, test_fsm_f16, test_fsm_tiered, test_fsm_tiered_faults};
    return test_run_all_("test_fsm_f32, test_fsm_f16, test_fsm_tiered, test_fsm_tiered_faults",
                         fns, 4, argc, argv);
}
