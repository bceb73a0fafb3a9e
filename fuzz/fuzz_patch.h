/* The 'P' inputs of the fuzz targets that start from a valid file: a list of edits to it.
 * Each 3 bytes (offset low, offset high, mask) XOR one byte at offset mod len; a byte left
 * over cuts the file to len * byte / 256. Returns the file's new length. */
#ifndef STRATA_FUZZ_PATCH_H
#define STRATA_FUZZ_PATCH_H

#include <stddef.h>
#include <stdint.h>

static size_t fuzz_patch(uint8_t *buf, size_t len, const uint8_t *e, size_t ne) {
    if (!len) return 0;
    for (; ne >= 3; e += 3, ne -= 3) buf[(e[0] | (size_t)e[1] << 8) % len] ^= e[2];
    return ne ? len * e[0] / 256 : len;
}

#endif
