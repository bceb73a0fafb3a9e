/*
 * Streaming detokenization. Byte tokens (<0x..> of SPM, single bytes of byte-level BPE)
 * deliver a multi-byte character in parts; printing each part would show replacement
 * characters. The stream keeps the unfinished tail of a character (at most 3 bytes) and
 * releases only complete characters.
 *
 * Invariant: `held` is empty or a proper prefix of one well-formed UTF-8 sequence. Bytes
 * that can never start or continue a valid sequence are released as they are, so the
 * stream never stalls on garbage.
 */
#include "tok/tok_int.h"

#include <stdlib.h>
#include <string.h>

struct st_detok {
    const st_tok *tok;
    unsigned flags;
    bool started;      /* a piece was emitted since the reset (for the leading space) */
    uint8_t held[4];
    int n_held;
    char *out;         /* (cap) bytes handed back by the last call */
    size_t cap;
};

int st_detok_create(const st_tok *tok, unsigned flags, st_detok **out) {
    if (!out) return ST_E_INVAL;
    *out = NULL;
    if (!tok) return ST_E_INVAL;
    st_detok *d = calloc(1, sizeof *d);
    if (!d) return ST_E_NOMEM;
    d->tok = tok;
    d->flags = flags;
    *out = d;
    return 0;
}

void st_detok_destroy(st_detok *d) {
    if (!d) return;
    free(d->out);
    free(d);
}

void st_detok_reset(st_detok *d) {
    d->started = false;
    d->n_held = 0;
}

/* Length a lead byte announces, 0 when it cannot start a sequence. */
static int lead_len(uint8_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* True when b can be byte i (>= 1) of the sequence led by c (RFC 3629 ranges). */
static bool cont_ok(uint8_t c, int i, uint8_t b) {
    if ((b & 0xC0) != 0x80) return false;
    if (i != 1) return true;
    if (c == 0xE0) return b >= 0xA0;
    if (c == 0xED) return b <= 0x9F;
    if (c == 0xF0) return b >= 0x90;
    if (c == 0xF4) return b <= 0x8F;
    return true;
}

static int ensure(st_detok *d, size_t n) {
    if (n <= d->cap) return 0;
    size_t cap = n * 2 + 64;
    char *o = realloc(d->out, cap);
    if (!o) return ST_E_NOMEM;
    d->out = o;
    d->cap = cap;
    return 0;
}

/* Moves the complete prefix of buf[0, n) to d->out (from offset 0), keeps the tail. */
static size_t settle(st_detok *d, const uint8_t *buf, size_t n) {
    size_t i = 0, k = 0;
    while (i < n) {
        int l = lead_len(buf[i]);
        if (l == 0) { /* never valid: release the byte */
            d->out[k++] = (char)buf[i++];
            continue;
        }
        int j = 1;
        while (j < l && i + (size_t)j < n && cont_ok(buf[i], j, buf[i + (size_t)j])) j++;
        if (j == l) {
            memcpy(d->out + k, buf + i, (size_t)l);
            k += (size_t)l, i += (size_t)l;
        } else if (i + (size_t)j == n) { /* a valid prefix cut by the end: hold it */
            memcpy(d->held, buf + i, (size_t)j);
            d->n_held = j;
            return k;
        } else { /* broken sequence: release its lead byte, rescan the rest */
            d->out[k++] = (char)buf[i++];
        }
    }
    d->n_held = 0;
    return k;
}

int st_detok_feed(st_detok *d, int32_t id, const char **out, size_t *n_out) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!d || !out || !n_out) return ST_E_INVAL;
    const st_tok *t = d->tok;
    if (id < 0 || id >= t->n_vocab) return ST_E_INVAL;
    const char *p = "";
    size_t l = 0;
    bool hide = !(d->flags & ST_DETOK_RENDER_SPECIAL) && (t->attr[id] & (ST_ATTR_UNKNOWN | ST_ATTR_CONTROL));
    if (!hide) {
        p = t->piece_arena + t->piece_off[id];
        l = t->piece_off[id + 1] - t->piece_off[id];
        if (!d->started && (d->flags & ST_DETOK_STRIP_LEADING_SPACE) && l && *p == ' ') p++, l--;
    }
    d->started = true;
    size_t n = (size_t)d->n_held + l;
    uint8_t small[64];
    uint8_t *buf = n <= sizeof small ? small : malloc(n);
    if (!buf) return ST_E_NOMEM;
    memcpy(buf, d->held, (size_t)d->n_held);
    if (l) memcpy(buf + d->n_held, p, l);
    int rc = ensure(d, n + 1);
    if (rc) {
        if (buf != small) free(buf);
        return rc;
    }
    *n_out = settle(d, buf, n);
    *out = d->out;
    if (buf != small) free(buf);
    return 0;
}

int st_detok_flush(st_detok *d, const char **out, size_t *n_out) {
    if (out) *out = NULL;
    if (n_out) *n_out = 0;
    if (!d || !out || !n_out) return ST_E_INVAL;
    int rc = ensure(d, 4);
    if (rc) return rc;
    memcpy(d->out, d->held, (size_t)d->n_held);
    *n_out = (size_t)d->n_held;
    *out = d->out;
    d->n_held = 0;
    return 0;
}
