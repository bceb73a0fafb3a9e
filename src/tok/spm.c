/*
 * SentencePiece-style tokenizer of llama vocabularies (tokenizer.ggml.model = "llama"), as
 * llama.cpp's llm_tokenizer_spm_session does it: the text (spaces already escaped to
 * U+2581) is cut into UTF-8 characters; the adjacent pair whose concatenation is a token of
 * highest score is merged (ties: leftmost), until no pair forms a token. A final symbol
 * that is no token (a character outside the vocabulary) is written byte by byte through
 * the <0xXX> byte tokens.
 *
 * Candidates sit in a binary heap keyed by (score desc, left asc), validated lazily by
 * the symbol lengths they were queued with (a symbol only grows by absorbing its right
 * neighbour, which then becomes empty), so a text of n characters costs O(n log n).
 */
#include "tok/tok_int.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_sym {
    int32_t prev, next;
    uint32_t off, n; /* bytes of text; n == 0 once merged away */
} spm_sym;

typedef struct spm_cand {
    float score;
    int32_t left, right;
    uint32_t size; /* left.n + right.n when queued */
} spm_cand;

static bool cand_before(const spm_cand *a, const spm_cand *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct spm_heap {
    spm_cand *v;
    size_t n, cap;
} spm_heap;

static int heap_push(spm_heap *h, spm_cand c) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        spm_cand *v = realloc(h->v, cap * sizeof *v);
        if (!v) return ST_E_NOMEM;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_before(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
    return 0;
}

static spm_cand heap_pop(spm_heap *h) {
    spm_cand top = h->v[0], last = h->v[--h->n];
    size_t i = 0, n = h->n;
    for (;;) {
        size_t l = 2 * i + 1;
        if (l >= n) break;
        size_t c = (l + 1 < n && cand_before(&h->v[l + 1], &h->v[l])) ? l + 1 : l;
        if (!cand_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (n) h->v[i] = last;
    return top;
}

static int try_bigram(const st_tok *t, const char *text, const spm_sym *s, int32_t l, int32_t r, spm_heap *h) {
    if (l < 0 || r < 0) return 0;
    uint32_t size = s[l].n + s[r].n;
    int32_t id = st_tok_map_get(&t->map, text + s[l].off, size);
    if (id < 0 || id >= t->n_vocab) return 0;
    spm_cand c = {t->score[id], l, r, size};
    return heap_push(h, c);
}

int st_spm_encode(const st_tok *t, const char *text, size_t n, st_ids *out) {
    if (n == 0) return 0;
    spm_sym *s = malloc(n * sizeof *s);
    if (!s) return ST_E_NOMEM;
    int32_t ns = 0;
    for (size_t off = 0; off < n;) {
        size_t l = (size_t)st_utf8_len((uint8_t)text[off]);
        if (l > n - off) l = n - off;
        s[ns].off = (uint32_t)off;
        s[ns].n = (uint32_t)l;
        s[ns].prev = ns - 1;
        off += l;
        s[ns].next = off == n ? -1 : ns + 1;
        ns++;
    }
    spm_heap h = {0};
    int rc = 0;
    for (int32_t i = 1; i < ns && !rc; i++) rc = try_bigram(t, text, s, i - 1, i, &h);
    while (h.n && !rc) {
        spm_cand c = heap_pop(&h);
        spm_sym *L = &s[c.left], *R = &s[c.right];
        if (L->n == 0 || R->n == 0 || L->n + R->n != c.size) continue;
        L->n += R->n;
        R->n = 0;
        L->next = R->next;
        if (R->next >= 0) s[R->next].prev = c.left;
        rc = try_bigram(t, text, s, L->prev, c.left, &h);
        if (!rc) rc = try_bigram(t, text, s, c.left, L->next, &h);
    }
    for (int32_t i = 0; i >= 0 && !rc; i = s[i].next) {
        int32_t id = st_tok_map_get(&t->map, text + s[i].off, s[i].n);
        if (id >= 0 && id < t->n_vocab) {
            rc = st_ids_push(out, id);
            continue;
        }
        for (uint32_t j = 0; j < s[i].n && !rc; j++) {
            int32_t b = t->byte_tok[(uint8_t)text[s[i].off + j]];
            /* llama.cpp aborts (map::at) on a vocabulary without byte tokens; we use <unk> */
            if (b < 0) b = t->unk;
            if (b >= 0) rc = st_ids_push(out, b);
        }
    }
    free(h.v);
    free(s);
    return rc;
}
