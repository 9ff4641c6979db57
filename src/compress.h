/*
 * compress.h - gzip (zlib) and zstd (libzstd) compression of an encoded profile.
 *
 * One call compresses a whole buffer into a new ppk_bytes. Every allocation, the codecs'
 * own state included, goes through the given allocator. Any thread; no shared state.
 */
#ifndef PPK_COMPRESS_H
#define PPK_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "pprofkit.h"

/* 0 when the codec and level are valid (level 0: the default), else PPK_EINVAL. */
int ppk__compress_check(ppk_codec codec, int level);
/* Compresses (or, for PPK_CODEC_NONE, copies) n bytes into *out, which is zeroed first.
 * 0, PPK_ENOMEM or PPK_ECOMPRESS. */
int ppk__compress(const ppk_allocator *a, ppk_codec codec, int level, const uint8_t *in,
                  size_t n, ppk_bytes *out);

#endif
