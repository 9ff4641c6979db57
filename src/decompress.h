/*
 * decompress.h - gzip and zstd decompression for the reader, bounded.
 *
 * The output grows in one buffer from the caller's ppk__mem, from a first guess (what
 * the stream says its size is, or 4 times the input, but never more than 64 times the
 * input plus 64 KiB, whatever the stream claims) doubling as the output really appears,
 * and never past max_out + 1 bytes: the byte after max_out is PPK_ETOOBIG. So a "zip
 * bomb" costs at most max_out bytes and the time to inflate them. Concatenated gzip
 * members, and concatenated zstd frames, are read as one stream, as gzip -d and zstd -d
 * do; anything else after the last one is an error. The codecs' own state is allocated
 * through the same ppk__mem. Any thread; nothing is shared between calls.
 */
#ifndef PPK_DECOMPRESS_H
#define PPK_DECOMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "pprofkit.h"

/* A buffer of `cap` bytes from a ppk__mem, `len` of them used. */
typedef struct ppk__dbuf {
    uint8_t *p;
    size_t len, cap;
} ppk__dbuf;

/*
 * Decompresses the n bytes at `in` (codec gzip or zstd) into *out (zeroed first; the
 * caller frees out->p, out->cap bytes, from `mem`). max_out must be below SIZE_MAX.
 * @return 0; PPK_EFORMAT (corrupt or truncated stream), PPK_ETOOBIG (more than max_out
 *         bytes), PPK_ENOMEM, each with a message in err (err_len > 0). On error *out
 *         is zeroed and nothing is left allocated.
 */
int ppk__decompress(ppk__mem *mem, ppk_codec codec, const uint8_t *in, size_t n,
                    size_t max_out, ppk__dbuf *out, char *err, size_t err_len);

#endif
