/*
 * Vocabulary: token texts, scores, types, the text -> id map, special-token ids, the
 * attributes llama.cpp derives from token texts (EOG, FIM, "unused", phi-3 rstrip), and
 * the rendered piece of every token.
 *
 * Defaults follow llama.cpp's llama_vocab::impl::load: SPM vocabularies add BOS and a
 * leading space, BPE ones take their flags from the pre-tokenizer; ids from the metadata
 * override the defaults when they are in range.
 */
#include "tok/tok_int.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---- string -> id map ---------------------------------------------------------- */

static uint32_t map_hash(const char *s, size_t n) { return (uint32_t)XXH3_64bits(s, n); }

int st_tok_map_build(st_tok_map *m, const char *const *keys, const uint32_t *lens, uint32_t n) {
    uint32_t cap = 16;
    while (cap < 2u * n + 2u) cap <<= 1;
    m->slots = calloc(cap, sizeof *m->slots);
    if (!m->slots) return ST_E_NOMEM;
    m->cap = cap;
    m->count = 0;
    m->keys = keys;
    m->lens = lens;
    for (uint32_t id = 0; id < n; id++) {
        uint32_t h = map_hash(keys[id], lens[id]) & (cap - 1);
        for (;;) {
            uint32_t s = m->slots[h];
            if (!s) {
                m->slots[h] = id + 1;
                m->count++;
                break;
            }
            if (lens[s - 1] == lens[id] && !memcmp(keys[s - 1], keys[id], lens[id])) return ST_E_FORMAT;
            h = (h + 1) & (cap - 1);
        }
    }
    return 0;
}

int st_tok_map_insert(st_tok_map *m, const char *const *keys, const uint32_t *lens, uint32_t id) {
    m->keys = keys;
    m->lens = lens;
    if (2u * (m->count + 1) > m->cap) {
        uint32_t cap = m->cap * 2;
        uint32_t *slots = calloc(cap, sizeof *slots);
        if (!slots) return ST_E_NOMEM;
        for (uint32_t i = 0; i < m->cap; i++) {
            uint32_t v = m->slots[i];
            if (!v) continue;
            uint32_t h = map_hash(keys[v - 1], lens[v - 1]) & (cap - 1);
            while (slots[h]) h = (h + 1) & (cap - 1);
            slots[h] = v;
        }
        free(m->slots);
        m->slots = slots;
        m->cap = cap;
    }
    uint32_t h = map_hash(keys[id], lens[id]) & (m->cap - 1);
    while (m->slots[h]) h = (h + 1) & (m->cap - 1);
    m->slots[h] = id + 1;
    m->count++;
    return 0;
}

void st_tok_map_free(st_tok_map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

int32_t st_tok_map_get(const st_tok_map *m, const char *s, size_t len) {
    if (!m->slots) return -1;
    uint32_t h = map_hash(s, len) & (m->cap - 1);
    for (;;) {
        uint32_t v = m->slots[h];
        if (!v) return -1;
        if (m->lens[v - 1] == len && !memcmp(m->keys[v - 1], s, len)) return (int32_t)(v - 1);
        h = (h + 1) & (m->cap - 1);
    }
}

/* ---- piece rendering ------------------------------------------------------------ */

/* Appends the piece of token id (llama.cpp token_to_piece with special = true). */
static size_t render_piece(const st_tok *t, int32_t id, char *dst) {
    const char *s = t->text[id];
    size_t n = t->text_len[id];
    uint16_t a = t->attr[id];
    if (a & (ST_ATTR_UNKNOWN | ST_ATTR_CONTROL | ST_ATTR_USER_DEFINED)) {
        memcpy(dst, s, n);
        return n;
    }
    if (a & ST_ATTR_NORMAL) {
        size_t o = 0;
        if (t->kind == ST_TOK_SPM) {
            for (size_t i = 0; i < n; i++) {
                if (i + 2 < n && (uint8_t)s[i] == 0xE2 && (uint8_t)s[i + 1] == 0x96 && (uint8_t)s[i + 2] == 0x81) {
                    dst[o++] = ' ';
                    i += 2;
                } else {
                    dst[o++] = s[i];
                }
            }
            return o;
        }
        /* byte-level BPE: every code point stands for one byte */
        for (size_t i = 0; i < n;) {
            uint8_t c = (uint8_t)s[i];
            uint32_t cp = c;
            int l = 1;
            if (c >= 0xC0 && c < 0xE0 && i + 1 < n) {
                cp = ((uint32_t)(c & 0x1F) << 6) | ((uint8_t)s[i + 1] & 0x3F);
                l = 2;
            } else if (c >= 0xE0) {
                l = st_utf8_len(c);
                if (i + (size_t)l > n) l = (int)(n - i);
                cp = 0xFFFFFFFF;
            }
            int b = st_bpe_char_byte(cp);
            if (b >= 0) {
                dst[o++] = (char)b;
            } else {
                /* llama.cpp writes "[UNK_BYTE_0x..]"; we keep the raw bytes instead */
                memcpy(dst + o, s + i, (size_t)l);
                o += (size_t)l;
            }
            i += (size_t)l;
        }
        return o;
    }
    if (a & ST_ATTR_BYTE) {
        if (n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && isxdigit((uint8_t)s[3]) &&
            isxdigit((uint8_t)s[4])) {
            char hex[3] = {s[3], s[4], 0};
            dst[0] = (char)strtol(hex, NULL, 16);
            return 1;
        }
        memcpy(dst, s, n);
        return n;
    }
    return 0; /* unused / undefined tokens render as nothing, as in llama.cpp */
}

static int build_pieces(st_tok *t) {
    size_t total = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) total += t->text_len[i] + 1;
    t->piece_arena = malloc(total ? total : 1);
    t->piece_off = malloc(((size_t)t->n_vocab + 1) * sizeof *t->piece_off);
    if (!t->piece_arena || !t->piece_off) return ST_E_NOMEM;
    size_t o = 0;
    for (int32_t i = 0; i < t->n_vocab; i++) {
        t->piece_off[i] = (uint32_t)o;
        o += render_piece(t, i, t->piece_arena + o);
    }
    t->piece_off[t->n_vocab] = (uint32_t)o;
    return 0;
}

/* ---- derived attributes ----------------------------------------------------------- */

static bool text_is(const st_tok *t, int32_t id, const char *const *list) {
    for (; *list; list++)
        if (strlen(*list) == t->text_len[id] && !memcmp(*list, t->text[id], t->text_len[id])) return true;
    return false;
}

static const char *const k_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xe2\x96\x81<PRE>",
    "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xe2\x96\x81<SUF>",
    "<|code_suffix|>", "<|suffix|>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xe2\x96\x81<MID>",
    "<|code_middle|>", "<|middle|>", "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>",
    "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", NULL};
static const char *const k_fim_eog_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>", NULL};
static const char *const k_eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
    "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]",
    "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

static int cmp_special(const void *a, const void *b, void *arg) {
    const st_tok *t = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->text_len[x] != t->text_len[y]) return t->text_len[x] > t->text_len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static bool name_has_phi3(const char *name) {
    if (!name) return false;
    char low[256];
    size_t n = strlen(name);
    if (n >= sizeof low) n = sizeof low - 1;
    for (size_t i = 0; i < n; i++) low[i] = (char)tolower((uint8_t)name[i]);
    low[n] = 0;
    return strstr(low, "phi-3") || strstr(low, "phi3");
}

static int derive_attrs(st_tok *t, const char *name) {
    int32_t n = t->n_vocab;
    /* EOT / EOM / FIM detection by text (ids are walked in order; llama.cpp walks a hash
     * map, so when several texts match, which one becomes EOT may differ: EOG is the same) */
    for (int32_t i = 0; i < n; i++) {
        if (t->eot < 0 && text_is(t, i, k_eot_texts)) {
            t->eot = i;
            t->attr[i] |= ST_ATTR_CONTROL;
        }
        if (t->eom < 0 && text_is(t, i, k_eom_texts)) {
            t->eom = i;
            t->attr[i] |= ST_ATTR_CONTROL;
        }
        if (text_is(t, i, k_fim_texts)) t->attr[i] |= ST_ATTR_CONTROL;
    }
    for (int32_t i = 0; i < n; i++)
        if ((t->attr[i] & ST_ATTR_CONTROL) && memmem(t->text[i], t->text_len[i], "unused", 6))
            t->attr[i] |= ST_ATTR_UNUSED;
    t->is_eog = calloc((size_t)(uint32_t)n + 1, 1);
    if (!t->is_eog) return ST_E_NOMEM;
    for (int32_t i = 0; i < n; i++) {
        if (text_is(t, i, k_eog_texts) || text_is(t, i, k_fim_eog_texts)) {
            t->is_eog[i] = 1;
            t->attr[i] |= ST_ATTR_CONTROL;
        }
    }
    if (t->eos >= 0) t->is_eog[t->eos] = 1;
    if (t->eot >= 0) t->is_eog[t->eot] = 1;
    if (t->eom >= 0) t->is_eog[t->eom] = 1;

    int32_t ns = 0;
    for (int32_t i = 0; i < n; i++)
        if (t->attr[i] & (ST_ATTR_CONTROL | ST_ATTR_USER_DEFINED | ST_ATTR_UNKNOWN)) ns++;
    t->special = malloc((size_t)(ns ? ns : 1) * sizeof *t->special);
    if (!t->special) return ST_E_NOMEM;
    t->n_special = 0;
    for (int32_t i = 0; i < n; i++)
        if (t->attr[i] & (ST_ATTR_CONTROL | ST_ATTR_USER_DEFINED | ST_ATTR_UNKNOWN)) t->special[t->n_special++] = i;
    /* llama.cpp sorts by length only (std::sort, unstable); ties broken by id here */
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);

    int rc = build_pieces(t);
    if (rc) return rc;

    if (name_has_phi3(name)) {
        for (int32_t k = 0; k < t->n_special; k++) t->attr[t->special[k]] |= ST_ATTR_RSTRIP;
        static const char *const rs_on[] = {"</s>", NULL};
        static const char *const rs_off[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
        for (int32_t i = 0; i < n; i++) {
            if (text_is(t, i, rs_on)) t->attr[i] |= ST_ATTR_RSTRIP;
            if (text_is(t, i, rs_off)) t->attr[i] &= (uint16_t)~ST_ATTR_RSTRIP;
        }
    }
    return 0;
}

/* ---- construction --------------------------------------------------------------- */

st_tok_params st_tok_default_params(void) {
    st_tok_params p = {0};
    return p;
}

st_tok_vocab_desc st_tok_vocab_desc_init(void) {
    st_tok_vocab_desc d;
    memset(&d, 0, sizeof d);
    d.bos_id = d.eos_id = d.unk_id = d.eot_id = d.eom_id = d.pad_id = d.sep_id = -1;
    d.add_bos = d.add_eos = d.add_space_prefix = -1;
    return d;
}

static uint16_t attr_of_type(int32_t ty) {
    switch (ty) {
    case ST_TOK_TYPE_NORMAL: return ST_ATTR_NORMAL;
    case ST_TOK_TYPE_UNKNOWN: return ST_ATTR_UNKNOWN;
    case ST_TOK_TYPE_CONTROL: return ST_ATTR_CONTROL;
    case ST_TOK_TYPE_USER_DEFINED: return ST_ATTR_USER_DEFINED;
    case ST_TOK_TYPE_UNUSED: return ST_ATTR_UNUSED;
    case ST_TOK_TYPE_BYTE: return ST_ATTR_BYTE;
    default: return 0;
    }
}

static int pick_id(st_ctx *ctx, const char *what, int32_t dflt, int32_t given, int32_t n_vocab, int32_t *out) {
    int32_t id = dflt >= 0 && dflt < n_vocab ? dflt : -1;
    if (given >= 0) {
        if (given >= n_vocab)
            return st_seterr(ctx, ST_E_FORMAT, "tokenizer.ggml.%s_token_id = %d is outside the vocabulary (%d tokens)",
                             what, given, n_vocab);
        id = given;
    }
    *out = id;
    return 0;
}

static int load_texts(st_ctx *ctx, st_tok *t, const st_tok_vocab_desc *d) {
    const uint32_t n = (uint32_t)d->n_tokens; /* 1..ST_TOK_MAX_VOCAB, checked by the caller */
    size_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (!d->tokens[i]) return st_seterr(ctx, ST_E_INVAL, "token %u has no text", i);
        size_t l = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        if (l > ST_TOK_MAX_TOKEN_BYTES)
            return st_seterr(ctx, ST_E_LIMIT, "token %u is %zu bytes (limit ST_TOK_MAX_TOKEN_BYTES %d)", i, l,
                             ST_TOK_MAX_TOKEN_BYTES);
        total += (l ? l : 24) + 1;
    }
    t->arena = malloc(total ? total : 1);
    t->text = malloc((size_t)n * sizeof *t->text);
    t->text_len = malloc((size_t)n * sizeof *t->text_len);
    t->score = malloc((size_t)n * sizeof *t->score);
    t->type = malloc((size_t)n);
    t->attr = malloc((size_t)n * sizeof *t->attr);
    if (!t->arena || !t->text || !t->text_len || !t->score || !t->type || !t->attr) return ST_E_NOMEM;
    char *p = t->arena;
    for (uint32_t i = 0; i < n; i++) {
        size_t l = d->token_lens ? d->token_lens[i] : strlen(d->tokens[i]);
        if (l == 0) {
            l = (size_t)snprintf(p, 25, "[EMPTY_%u]", i); /* as llama.cpp names empty tokens */
        } else {
            memcpy(p, d->tokens[i], l);
        }
        p[l] = 0;
        t->text[i] = p;
        t->text_len[i] = (uint32_t)l;
        p += l + 1;
        t->score[i] = d->scores ? d->scores[i] : 0.0f;
        int32_t ty = d->types ? d->types[i] : ST_TOK_TYPE_NORMAL;
        t->type[i] = (uint8_t)(ty >= 0 && ty < 256 ? ty : 0);
        t->attr[i] = d->types ? attr_of_type(ty) : ST_ATTR_NORMAL;
    }
    t->n_vocab = t->n_sym = (int32_t)n;
    int rc = st_tok_map_build(&t->map, t->text, t->text_len, n);
    if (rc == ST_E_FORMAT) {
        for (int32_t i = 1; i < (int32_t)n; i++) {
            int32_t j = st_tok_map_get(&t->map, t->text[i], t->text_len[i]);
            if (j >= 0 && j != i) return st_seterr(ctx, ST_E_FORMAT, "duplicate token in vocabulary: '%s' has ids %d and %d",
                                                 t->text[i], j < i ? j : i, j < i ? i : j);
        }
        return st_seterr(ctx, ST_E_FORMAT, "duplicate token in vocabulary");
    }
    return rc;
}

static void find_byte_tokens(st_tok *t) {
    for (int b = 0; b < 256; b++) {
        int32_t id = -1;
        if (t->kind == ST_TOK_SPM) {
            char hex[8];
            snprintf(hex, sizeof hex, "<0x%02X>", b);
            id = st_tok_map_get(&t->map, hex, 6);
            if (id < 0) {
                char c = (char)b;
                id = st_tok_map_get(&t->map, &c, 1);
            }
        } else {
            char u[2];
            int l = st_bpe_byte_char((uint8_t)b, u);
            id = st_tok_map_get(&t->map, u, (size_t)l);
        }
        t->byte_tok[b] = id;
    }
}

static int setup_flags(st_ctx *ctx, st_tok *t, const st_tok_vocab_desc *d, const st_tok_params *p) {
    int32_t dbos, deos, dunk;
    bool add_bos = false, add_eos = false, add_space = false;
    if (t->kind == ST_TOK_SPM) {
        dbos = 1, deos = 2, dunk = 0;
        add_bos = true, add_space = true;
        t->clean_spaces = false;
        snprintf(t->pre_name, sizeof t->pre_name, "spm");
    } else {
        dbos = 11, deos = 11, dunk = -1;
        const char *pre = p && p->pre_override ? p->pre_override : d->pre;
        bool im = false, cs = true, ab = false;
        const char *canon = pre ? st_pretok_canonical(pre, &im, &cs, &ab) : "default";
        if (!canon) {
            if (!(p && p->force_default_pre))
                return st_seterr(ctx, ST_E_UNSUPPORTED,
                                 "unknown pre-tokenizer type: '%s' (tokenizer.ggml.pre); force the default one "
                                 "to tokenize anyway (quality may suffer)", pre);
            canon = "default";
            im = false, cs = true, ab = false;
        }
        t->ignore_merges = im;
        t->clean_spaces = cs;
        add_bos = ab;
        int rc = st_pretok_init(ctx, &t->pre, canon);
        if (rc) return rc;
        snprintf(t->pre_name, sizeof t->pre_name, "%s", canon);
    }
    int rc;
    if ((rc = pick_id(ctx, "bos", dbos, d->bos_id, t->n_vocab, &t->bos))) return rc;
    if ((rc = pick_id(ctx, "eos", deos, d->eos_id, t->n_vocab, &t->eos))) return rc;
    if ((rc = pick_id(ctx, "unknown", dunk, d->unk_id, t->n_vocab, &t->unk))) return rc;
    if ((rc = pick_id(ctx, "eot", -1, d->eot_id, t->n_vocab, &t->eot))) return rc;
    if ((rc = pick_id(ctx, "eom", -1, d->eom_id, t->n_vocab, &t->eom))) return rc;
    if ((rc = pick_id(ctx, "padding", -1, d->pad_id, t->n_vocab, &t->pad))) return rc;
    if ((rc = pick_id(ctx, "seperator", -1, d->sep_id, t->n_vocab, &t->sep))) return rc;
    if (d->add_space_prefix >= 0) add_space = d->add_space_prefix != 0;
    if (d->add_bos >= 0) add_bos = d->add_bos != 0;
    if (d->add_eos >= 0) add_eos = d->add_eos != 0;
    if (add_bos && t->bos < 0) return st_seterr(ctx, ST_E_FORMAT, "tokenizer.ggml.add_bos_token is true, but no BOS id");
    if (add_eos && t->eos < 0) return st_seterr(ctx, ST_E_FORMAT, "tokenizer.ggml.add_eos_token is true, but no EOS id");
    t->add_bos = add_bos, t->add_eos = add_eos, t->add_space_prefix = add_space;
    return 0;
}

int st_tok_create(st_ctx *ctx, const st_tok_vocab_desc *d, const st_tok_params *p, st_tok **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (!d || !d->model || (d->n_tokens > 0 && !d->tokens)) return st_seterr(ctx, ST_E_INVAL, "bad vocabulary description");
    if (d->n_tokens <= 0 || d->n_tokens > ST_TOK_MAX_VOCAB)
        return st_seterr(ctx, ST_E_LIMIT, "vocabulary of %d tokens (limit 1..ST_TOK_MAX_VOCAB %d)", d->n_tokens,
                         ST_TOK_MAX_VOCAB);
    st_tok *t = calloc(1, sizeof *t);
    if (!t) return ST_E_NOMEM;
    int rc;
    if (!strcmp(d->model, "llama")) {
        t->kind = ST_TOK_SPM;
    } else if (!strcmp(d->model, "gpt2")) {
        t->kind = ST_TOK_BPE;
    } else {
        rc = st_seterr(ctx, ST_E_UNSUPPORTED, "unsupported tokenizer model '%s' (tokenizer.ggml.model; strata reads "
                       "'llama' (SPM) and 'gpt2' (BPE))", d->model);
        goto fail;
    }
    if ((rc = load_texts(ctx, t, d))) goto fail;
    if ((rc = setup_flags(ctx, t, d, p))) goto fail;
    if (t->kind == ST_TOK_BPE) {
        if (!d->merges || d->n_merges <= 0) {
            rc = st_seterr(ctx, ST_E_NOT_FOUND, "BPE vocabulary without tokenizer.ggml.merges");
            goto fail;
        }
        if ((rc = st_bpe_build_merges(ctx, t, d->merges, d->n_merges))) goto fail;
    }
    find_byte_tokens(t);
    if ((rc = derive_attrs(t, d->name))) goto fail;
    if (d->chat_template && !(t->chat_template = strdup(d->chat_template))) {
        rc = ST_E_NOMEM;
        goto fail;
    }
    *out = t;
    return 0;
fail:
    if (rc == ST_E_NOMEM) st_seterr(ctx, rc, "out of memory building the tokenizer");
    st_tok_destroy(t);
    return rc;
}

void st_tok_destroy(st_tok *t) {
    if (!t) return;
    for (int32_t i = t->n_vocab; i < t->n_sym; i++) free((void *)t->text[i]);
    free(t->arena);
    free(t->text);
    free(t->text_len);
    free(t->score);
    free(t->type);
    free(t->attr);
    free(t->is_eog);
    free(t->piece_arena);
    free(t->piece_off);
    st_tok_map_free(&t->map);
    free(t->special);
    free(t->merges);
    st_pretok_free(&t->pre);
    free(t->chat_template);
    free(t);
}

/* ---- accessors ----------------------------------------------------------------- */

int st_tok_piece(const st_tok *t, int32_t id, const char **p, size_t *len) {
    if (p) *p = NULL;
    if (len) *len = 0;
    if (!t || !p || !len || id < 0 || id >= t->n_vocab) return ST_E_INVAL;
    *p = t->piece_arena + t->piece_off[id];
    *len = t->piece_off[id + 1] - t->piece_off[id];
    return 0;
}

int st_tok_text(const st_tok *t, int32_t id, const char **p, size_t *len) {
    if (p) *p = NULL;
    if (len) *len = 0;
    if (!t || !p || !len || id < 0 || id >= t->n_vocab) return ST_E_INVAL;
    *p = t->text[id];
    *len = t->text_len[id];
    return 0;
}

int32_t st_tok_n_vocab(const st_tok *t) { return t->n_vocab; }
st_tok_kind st_tok_get_kind(const st_tok *t) { return t->kind; }
const char *st_tok_pre_name(const st_tok *t) { return t->pre_name; }
int32_t st_tok_bos(const st_tok *t) { return t->bos; }
int32_t st_tok_eos(const st_tok *t) { return t->eos; }
int32_t st_tok_eot(const st_tok *t) { return t->eot; }
bool st_tok_add_bos(const st_tok *t) { return t->add_bos; }
bool st_tok_add_eos(const st_tok *t) { return t->add_eos; }
bool st_tok_is_eog(const st_tok *t, int32_t id) { return id >= 0 && id < t->n_vocab && t->is_eog[id]; }
int st_tok_type_of(const st_tok *t, int32_t id) { return id >= 0 && id < t->n_vocab ? t->type[id] : 0; }
int32_t st_tok_find(const st_tok *t, const char *s, size_t len) {
    int32_t id = st_tok_map_get(&t->map, s, len);
    return id < t->n_vocab ? id : -1;
}
const char *st_tok_chat_template(const st_tok *t) { return t->chat_template; }
