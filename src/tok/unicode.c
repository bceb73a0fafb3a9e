/* UTF-8 helpers of the tokenizers: llama.cpp-compatible decoding of malformed input and
 * GPT-2's byte <-> printable code point table. */
#include "tok/tok_int.h"

#include <stdlib.h>
#include <string.h>

static size_t put_cp(char *o, uint32_t cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Decoding follows llama.cpp's unicode_cpt_from_utf8 (lenient about overlong forms, a bad
 * sequence costs one byte and yields U+FFFD); re-encoding is canonical. Surrogates and
 * code points past U+10FFFF, which llama.cpp would carry or throw on, become U+FFFD so
 * that the result is valid UTF-8 for PCRE2. */
int st_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len) {
    char *o = malloc(n * 3 + 1); /* a single bad byte may grow into 3 bytes */
    if (!o) return ST_E_NOMEM;
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, k = 0;
    while (i < n) {
        uint8_t c = u[i];
        uint32_t cp = 0xFFFD;
        size_t adv = 1;
        if (c < 0x80) {
            cp = c;
        } else if (!(c & 0x40)) {
            /* stray continuation byte */
        } else if (!(c & 0x20)) {
            if (i + 1 < n && (u[i + 1] & 0xC0) == 0x80) {
                cp = ((uint32_t)(c & 0x1F) << 6) | (u[i + 1] & 0x3F);
                adv = 2;
            }
        } else if (!(c & 0x10)) {
            if (i + 2 < n && (u[i + 1] & 0xC0) == 0x80 && (u[i + 2] & 0xC0) == 0x80) {
                cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(u[i + 1] & 0x3F) << 6) | (u[i + 2] & 0x3F);
                adv = 3;
            }
        } else if (!(c & 0x08)) {
            if (i + 3 < n && (u[i + 1] & 0xC0) == 0x80 && (u[i + 2] & 0xC0) == 0x80 && (u[i + 3] & 0xC0) == 0x80) {
                cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(u[i + 1] & 0x3F) << 12) |
                     ((uint32_t)(u[i + 2] & 0x3F) << 6) | (u[i + 3] & 0x3F);
                adv = 4;
            }
        }
        if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = 0xFFFD;
        k += put_cp(o + k, cp);
        i += adv;
    }
    o[k] = 0;
    *out = o;
    *out_len = k;
    return 0;
}

/* GPT-2 bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68
 * (0x00-0x20, 0x7F-0xA0, 0xAD) map to U+0100.. in byte order. */
static uint32_t byte_cp(uint8_t b) {
    if (b <= 0x20) return 256u + b;
    if (b >= 0x7F && b <= 0xA0) return 256u + 33u + (uint32_t)(b - 0x7F);
    if (b == 0xAD) return 256u + 67u;
    return b;
}

int st_bpe_byte_char(uint8_t b, char out[2]) {
    uint32_t cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int st_bpe_char_byte(uint32_t cp) {
    if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
    if (cp >= 256 && cp <= 256 + 32) return (int)(cp - 256);
    if (cp >= 256 + 33 && cp <= 256 + 66) return (int)(cp - 256 - 33 + 0x7F);
    if (cp == 256 + 67) return 0xAD;
    return -1;
}

int st_ids_push(st_ids *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        int32_t *v = realloc(o->v, cap * sizeof *v);
        if (!v) return ST_E_NOMEM;
        o->v = v;
        o->cap = cap;
    }
    o->v[o->n++] = id;
    return 0;
}
