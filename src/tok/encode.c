/*
 * Text <-> ids, as llama.cpp's llama_vocab::impl::tokenize / detokenize:
 *   1. special tokens are cut out of the text first, longest first (user-defined ones
 *      always, control and unknown ones only with parse_special), honouring the lstrip /
 *      rstrip attributes;
 *   2. each remaining raw fragment goes to the SPM or BPE tokenizer (SPM: a space is put
 *      in front of a fragment that starts the text or follows a special token, then spaces
 *      become U+2581);
 *   3. BOS / EOS as the vocabulary asks when add_special.
 */
#include "tok/tok_int.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

typedef struct frag {
    int32_t token;    /* >= 0: a special token; -1: raw text */
    uint32_t off, len;
} frag;

typedef struct frag_vec {
    frag *v;
    size_t n, cap;
} frag_vec;

static int frag_push(frag_vec *f, int32_t token, size_t off, size_t len) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) return ST_E_NOMEM;
        f->v = v;
        f->cap = cap;
    }
    f->v[f->n++] = (frag){token, (uint32_t)off, (uint32_t)len};
    return 0;
}

/* Cuts every occurrence of special token id out of the raw fragments of *in. */
static int cut_token(const st_tok *t, int32_t id, const char *text, frag_vec *in, frag_vec *out) {
    const char *tt = t->text[id];
    size_t tl = t->text_len[id];
    uint16_t a = t->attr[id];
    int rc = 0;
    out->n = 0;
    for (size_t i = 0; i < in->n && !rc; i++) {
        frag f = in->v[i];
        if (f.token >= 0) {
            rc = frag_push(out, f.token, 0, 0);
            continue;
        }
        size_t b = f.off, e = (size_t)f.off + f.len;
        while (b < e && !rc) {
            const char *m = memmem(text + b, e - b, tt, tl);
            if (!m) {
                rc = frag_push(out, -1, b, e - b);
                break;
            }
            size_t ms = (size_t)(m - text);
            size_t left_len = ms - b;
            if ((a & ST_ATTR_LSTRIP))
                while (left_len > 0 && isspace((uint8_t)text[b + left_len - 1])) left_len--;
            if (left_len > 0 && (rc = frag_push(out, -1, b, left_len))) break;
            if ((rc = frag_push(out, id, 0, 0))) break;
            b = ms + tl;
            if (a & ST_ATTR_RSTRIP)
                while (b < e && isspace((uint8_t)text[b])) b++;
        }
    }
    return rc;
}

static int partition(const st_tok *t, const char *text, size_t len, bool parse_special, frag_vec *frags) {
    frag_vec tmp = {0};
    int rc = frag_push(frags, -1, 0, len);
    /* which byte pairs occur at all: most special tokens (thousands in some vocabularies)
     * are then ruled out without scanning the text once per token */
    uint64_t *pairs = NULL;
    if (t->n_special > 8 && len > 4096 && (pairs = calloc(1024, sizeof *pairs)))
        for (size_t i = 0; i + 1 < len; i++) {
            unsigned v = ((unsigned)(uint8_t)text[i] << 8) | (uint8_t)text[i + 1];
            pairs[v >> 6] |= 1ULL << (v & 63);
        }
    for (int32_t k = 0; k < t->n_special && !rc; k++) {
        int32_t id = t->special[k];
        if (!parse_special && (t->attr[id] & (ST_ATTR_CONTROL | ST_ATTR_UNKNOWN))) continue;
        const uint8_t *tt = (const uint8_t *)t->text[id];
        if (pairs && t->text_len[id] >= 2) {
            unsigned v = ((unsigned)tt[0] << 8) | tt[1];
            if (!(pairs[v >> 6] >> (v & 63) & 1)) continue;
        }
        if (t->text_len[id] == 0 || !memmem(text, len, t->text[id], t->text_len[id])) continue;
        rc = cut_token(t, id, text, frags, &tmp);
        frag_vec sw = *frags;
        *frags = tmp;
        tmp = sw;
    }
    free(pairs);
    free(tmp.v);
    return rc;
}

static int spm_fragment(const st_tok *t, const char *text, size_t len, bool space_prefix, st_ids *out) {
    size_t n_sp = space_prefix ? 1 : 0;
    for (size_t i = 0; i < len; i++) n_sp += text[i] == ' ';
    char *buf = malloc(len + 2 * n_sp + 4);
    if (!buf) return ST_E_NOMEM;
    size_t k = 0;
    static const char esc[3] = {(char)0xE2, (char)0x96, (char)0x81};
    if (space_prefix) {
        memcpy(buf, esc, 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(buf + k, esc, 3);
            k += 3;
        } else {
            buf[k++] = text[i];
        }
    }
    int rc = st_spm_encode(t, buf, k, out);
    free(buf);
    return rc;
}

static int encode_ids(const st_tok *t, const char *text, size_t len, bool add_special, bool parse_special,
                      st_ids *out) {
    frag_vec frags = {0};
    int rc = 0;
    if (len > 0) rc = partition(t, text, len, parse_special, &frags);
    if (!rc && add_special && t->add_bos) rc = st_ids_push(out, t->bos);
    bool prev_special = true;
    for (size_t i = 0; i < frags.n && !rc; i++) {
        frag f = frags.v[i];
        if (f.token >= 0) {
            rc = st_ids_push(out, f.token);
            prev_special = true;
            continue;
        }
        if (t->kind == ST_TOK_SPM) {
            rc = spm_fragment(t, text + f.off, f.len, t->add_space_prefix && prev_special, out);
        } else {
            rc = st_bpe_encode(t, text + f.off, f.len, out);
        }
        prev_special = false;
    }
    if (!rc && add_special && t->add_eos) rc = st_ids_push(out, t->eos);
    free(frags.v);
    return rc;
}

int st_tok_encode(const st_tok *t, const char *text, size_t len, bool add_special, bool parse_special, int32_t *ids,
                  int max, int *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (!text && len) || (max > 0 && !ids) || max < 0) return ST_E_INVAL;
    if (len > (size_t)INT32_MAX / 4) return ST_E_LIMIT; /* offsets are 32-bit, ids count int */
    st_ids out = {0};
    int rc = encode_ids(t, text, len, add_special, parse_special, &out);
    if (!rc) {
        if (out.n > (size_t)max) {
            *n_out = (int)out.n;
            rc = ST_E_LIMIT;
        } else {
            if (out.n) memcpy(ids, out.v, out.n * sizeof *ids);
            *n_out = (int)out.n;
        }
    }
    free(out.v);
    return rc;
}

int st_tok_encode_alloc(const st_tok *t, const char *text, size_t len, bool add_special, bool parse_special,
                        int32_t **ids, int *n_out) {
    if (ids) *ids = NULL;
    if (n_out) *n_out = 0;
    if (!t || !ids || !n_out || (!text && len)) return ST_E_INVAL;
    if (len > (size_t)INT32_MAX / 4) return ST_E_LIMIT;
    st_ids out = {0};
    int rc = encode_ids(t, text, len, add_special, parse_special, &out);
    if (rc) {
        free(out.v);
        return rc;
    }
    if (!out.v && !(out.v = malloc(sizeof *out.v))) return ST_E_NOMEM;
    *ids = out.v;
    *n_out = (int)out.n;
    return 0;
}

/* llama.cpp's clean_up_tokenization_spaces passes, in place; returns the new length. */
static size_t clean_spaces(char *s, size_t n) {
    if (n == 0) return 0;
    size_t k = 1;
    for (size_t i = 1; i < n; i++) { /* " ?", " !", " .", " ," */
        char x = s[i];
        if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) k--;
        s[k++] = x;
    }
    n = k, k = 1;
    for (size_t i = 1; i < n; i++) { /* " ' " -> "'" */
        char x = s[i];
        if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
            k--;
            s[++i] = 0;
        }
        s[k++] = x;
    }
    n = k, k = 1;
    for (size_t i = 1; i < n; i++) { /* " 's", " 'm", " 're", " 've" */
        char x = s[i];
        if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
            char x1 = s[i + 1];
            if (x1 == 's' || x1 == 'm') k--;
            else if (i + 2 < n && ((x1 == 'r' && s[i + 2] == 'e') || (x1 == 'v' && s[i + 2] == 'e'))) k--;
        }
        s[k++] = x;
    }
    return k;
}

int st_tok_decode(const st_tok *t, const int32_t *ids, int n, unsigned flags, char *buf, size_t cap, size_t *n_out) {
    if (n_out) *n_out = 0;
    if (!t || !n_out || (n > 0 && !ids) || n < 0 || (cap && !buf)) return ST_E_INVAL;
    bool remove_space = t->add_space_prefix;
    if ((flags & ST_DETOK_REMOVE_SPECIAL) && t->add_bos && n > 0 && ids[0] == t->bos) {
        remove_space = false;
        ids++, n--;
    }
    if ((flags & ST_DETOK_REMOVE_SPECIAL) && t->add_eos && n > 0 && ids[n - 1] == t->eos) n--;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab) return ST_E_INVAL;
        total += t->piece_off[ids[i] + 1] - t->piece_off[ids[i]];
    }
    char *tmp = malloc(total + 1);
    if (!tmp) return ST_E_NOMEM;
    size_t k = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        bool hide = !(flags & ST_DETOK_RENDER_SPECIAL) && (t->attr[id] & (ST_ATTR_UNKNOWN | ST_ATTR_CONTROL));
        if (!hide) {
            const char *p = t->piece_arena + t->piece_off[id];
            size_t l = t->piece_off[id + 1] - t->piece_off[id];
            if (remove_space && l && *p == ' ') p++, l--;
            memcpy(tmp + k, p, l);
            k += l;
        }
        remove_space = false;
    }
    if (t->clean_spaces) k = clean_spaces(tmp, k);
    *n_out = k;
    if (k > cap) {
        free(tmp);
        return ST_E_LIMIT;
    }
    if (k) memcpy(buf, tmp, k);
    free(tmp);
    return 0;
}
