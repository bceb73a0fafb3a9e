/*
 * Byte-level BPE (tokenizer.ggml.model = "gpt2"), following llama.cpp's
 * llm_tokenizer_bpe_session: every pre-tokenized word is byte-encoded (GPT-2 table), cut
 * into one symbol per byte, and the adjacent pair of lowest merge rank is merged until no
 * pair has a rank (ties: leftmost first). A final symbol that is no token is written as
 * single-byte tokens.
 *
 * Symbols are interned strings (ids < n_vocab are tokens; larger ids are strings that only
 * occur in merges), so a merge is a hash lookup on two integers and merging follows the
 * string semantics of llama.cpp exactly. Candidate pairs sit in a binary heap keyed by
 * (rank, left position) and are checked lazily when popped, so a word of n bytes costs
 * O(n log n), never O(n^2).
 */
#include "tok/tok_int.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static const st_bpe_merge_slot *merge_find(const st_tok *t, int32_t a, int32_t b) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    uint32_t m = t->merge_cap - 1;
    uint32_t h = (uint32_t)mix64(key) & m;
    for (;;) {
        const st_bpe_merge_slot *s = &t->merges[h];
        if (s->key == key) return s;
        if (s->key == ~0ULL) return NULL;
        h = (h + 1) & m;
    }
}

/* Interns s[0, n) as a symbol id (a token id when it is one). */
static int intern(st_tok *t, const char *s, size_t n, int32_t *id, int32_t *sym_cap) {
    int32_t got = st_tok_map_get(&t->map, s, n);
    if (got >= 0) {
        *id = got;
        return 0;
    }
    if (t->n_sym == *sym_cap) {
        int32_t cap = *sym_cap * 2;
        const char **text = realloc(t->text, (size_t)cap * sizeof *text);
        if (!text) return ST_E_NOMEM;
        t->text = text;
        uint32_t *len = realloc(t->text_len, (size_t)cap * sizeof *len);
        if (!len) return ST_E_NOMEM;
        t->text_len = len;
        *sym_cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return ST_E_NOMEM;
    memcpy(c, s, n);
    c[n] = 0;
    t->text[t->n_sym] = c;
    t->text_len[t->n_sym] = (uint32_t)n;
    int rc = st_tok_map_insert(&t->map, t->text, t->text_len, (uint32_t)t->n_sym);
    if (rc) {
        free(c);
        return rc;
    }
    *id = t->n_sym++;
    return 0;
}

int st_bpe_build_merges(st_ctx *ctx, st_tok *t, const char *const *merges, int32_t n_merges) {
    if (n_merges > ST_TOK_MAX_MERGES)
        return st_seterr(ctx, ST_E_LIMIT, "%d merges (limit ST_TOK_MAX_MERGES %d)", n_merges, ST_TOK_MAX_MERGES);
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)n_merges + 2u) cap <<= 1;
    t->merges = malloc(cap * sizeof *t->merges);
    if (!t->merges) return ST_E_NOMEM;
    for (uint32_t i = 0; i < cap; i++) t->merges[i].key = ~0ULL;
    t->merge_cap = cap;
    int32_t sym_cap = t->n_sym;
    char *buf = NULL;
    size_t buf_cap = 0;
    int rc = 0;
    /* every byte's stand-in must be a symbol, token or not */
    for (int b = 0; b < 256 && !rc; b++) {
        char u[2];
        int32_t id;
        rc = intern(t, u, (size_t)st_bpe_byte_char((uint8_t)b, u), &id, &sym_cap);
    }
    for (int32_t i = 0; i < n_merges && !rc; i++) {
        const char *m = merges[i];
        if (!m) {
            rc = st_seterr(ctx, ST_E_FORMAT, "tokenizer.ggml.merges[%d] is NULL", i);
            break;
        }
        size_t n = strlen(m);
        /* as llama.cpp: split at the first space after position 0; no space = ignored */
        const char *sp = n > 1 ? memchr(m + 1, ' ', n - 1) : NULL;
        if (!sp) continue;
        size_t la = (size_t)(sp - m), lb = n - la - 1;
        if (la + lb > buf_cap) {
            buf_cap = (la + lb) * 2 + 16;
            char *nb = realloc(buf, buf_cap);
            if (!nb) {
                rc = ST_E_NOMEM;
                break;
            }
            buf = nb;
        }
        int32_t a, b, r;
        if ((rc = intern(t, m, la, &a, &sym_cap))) break;
        if ((rc = intern(t, sp + 1, lb, &b, &sym_cap))) break;
        memcpy(buf, m, la);
        memcpy(buf + la, sp + 1, lb);
        if ((rc = intern(t, buf, la + lb, &r, &sym_cap))) break;
        uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
        uint32_t h = (uint32_t)mix64(key) & (cap - 1);
        while (t->merges[h].key != ~0ULL && t->merges[h].key != key) h = (h + 1) & (cap - 1);
        if (t->merges[h].key == key) continue; /* std::map::emplace keeps the first */
        t->merges[h].key = key;
        t->merges[h].rank = i;
        t->merges[h].result = r;
        t->n_merges++;
    }
    free(buf);
    return rc;
}

/* ---- encoding ---------------------------------------------------------------------- */

typedef struct bpe_cand {
    int32_t rank;
    int32_t left, right;     /* symbol positions */
    int32_t lsym, rsym;      /* their ids when queued: stale if either changed */
} bpe_cand;

typedef struct bpe_scratch {
    int32_t *sym, *prev, *next; /* (cap) per position */
    bpe_cand *heap;             /* (heap_cap) */
    size_t cap, heap_cap, heap_n;
    char *enc;                  /* byte-encoded word, for ignore_merges lookups */
    size_t enc_cap;
} bpe_scratch;

static bool cand_less(const bpe_cand *a, const bpe_cand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static int heap_push(bpe_scratch *s, bpe_cand c) {
    if (s->heap_n == s->heap_cap) {
        size_t cap = s->heap_cap ? s->heap_cap * 2 : 64;
        bpe_cand *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return ST_E_NOMEM;
        s->heap = h;
        s->heap_cap = cap;
    }
    size_t i = s->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
    return 0;
}

static bpe_cand heap_pop(bpe_scratch *s) {
    bpe_cand top = s->heap[0];
    bpe_cand last = s->heap[--s->heap_n];
    size_t i = 0, n = s->heap_n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t c = (l + 1 < n && cand_less(&s->heap[l + 1], &s->heap[l])) ? l + 1 : l;
        if (!cand_less(&s->heap[c], &last)) break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n) s->heap[i] = last;
    return top;
}

static int try_pair(const st_tok *t, bpe_scratch *s, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return 0;
    const st_bpe_merge_slot *m = merge_find(t, s->sym[l], s->sym[r]);
    if (!m) return 0;
    bpe_cand c = {m->rank, l, r, s->sym[l], s->sym[r]};
    return heap_push(s, c);
}

static int emit_symbol(const st_tok *t, int32_t sym, st_ids *out) {
    if (sym < t->n_vocab) return st_ids_push(out, sym);
    /* not a token: llama.cpp looks up every byte of the encoded text as a one-byte token */
    const char *p = t->text[sym];
    for (uint32_t i = 0; i < t->text_len[sym]; i++) {
        int32_t id = st_tok_map_get(&t->map, p + i, 1);
        if (id >= 0 && id < t->n_vocab) {
            int rc = st_ids_push(out, id);
            if (rc) return rc;
        }
    }
    return 0;
}

static int encode_word(const st_tok *t, bpe_scratch *s, const uint8_t *w, size_t n, st_ids *out) {
    int rc;
    if (n > s->cap) {
        size_t cap = n * 2;
        int32_t *a = realloc(s->sym, cap * sizeof *a);
        if (!a) return ST_E_NOMEM;
        s->sym = a;
        if (!(a = realloc(s->prev, cap * sizeof *a))) return ST_E_NOMEM;
        s->prev = a;
        if (!(a = realloc(s->next, cap * sizeof *a))) return ST_E_NOMEM;
        s->next = a;
        s->cap = cap;
    }
    if (t->ignore_merges) {
        if (2 * n > s->enc_cap) {
            char *e = realloc(s->enc, 2 * n + 16);
            if (!e) return ST_E_NOMEM;
            s->enc = e;
            s->enc_cap = 2 * n + 16;
        }
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += (size_t)st_bpe_byte_char(w[i], s->enc + k);
        int32_t id = st_tok_map_get(&t->map, s->enc, k);
        if (id >= 0 && id < t->n_vocab) return st_ids_push(out, id);
    }
    for (size_t i = 0; i < n; i++) {
        char u[2];
        int l = st_bpe_byte_char(w[i], u);
        s->sym[i] = st_tok_map_get(&t->map, u, (size_t)l); /* interned at load: never -1 */
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    s->heap_n = 0;
    for (size_t i = 1; i < n; i++)
        if ((rc = try_pair(t, s, (int32_t)i - 1, (int32_t)i))) return rc;
    while (s->heap_n) {
        bpe_cand c = heap_pop(s);
        if (s->sym[c.left] != c.lsym || s->sym[c.right] != c.rsym) continue; /* stale */
        const st_bpe_merge_slot *m = merge_find(t, c.lsym, c.rsym);
        s->sym[c.left] = m->result;
        s->sym[c.right] = -1;
        int32_t nx = s->next[c.right];
        s->next[c.left] = nx;
        if (nx >= 0) s->prev[nx] = c.left;
        if ((rc = try_pair(t, s, s->prev[c.left], c.left))) return rc;
        if ((rc = try_pair(t, s, c.left, nx))) return rc;
    }
    for (int32_t i = 0; i >= 0; i = s->next[i])
        if ((rc = emit_symbol(t, s->sym[i], out))) return rc;
    return 0;
}

int st_bpe_encode(const st_tok *t, const char *text, size_t n, st_ids *out) {
    if (n == 0) return 0;
    char *clean = NULL;
    size_t cn = 0;
    int rc = st_utf8_sanitize(text, n, &clean, &cn);
    if (rc) return rc;
    st_spans words = {0};
    bpe_scratch s = {0};
    rc = st_pretok_split(&t->pre, clean, cn, &words);
    size_t b = 0;
    for (size_t i = 0; i < words.n && !rc; i++) {
        rc = encode_word(t, &s, (const uint8_t *)clean + b, words.end[i] - b, out);
        b = words.end[i];
    }
    free(words.end);
    free(s.sym);
    free(s.prev);
    free(s.next);
    free(s.heap);
    free(s.enc);
    free(clean);
    return rc;
}
