/*
 * compress.h - gzip (zlib) and zstd (libzstd) compression of an encoded profile.
 *
 * A ppk__cstream compresses a profile as it is encoded, in pieces: begin, write the
 * protobuf's bytes as they come (pb.c hands over its buffer whenever it fills), end.
 * The compressed bytes collect in a list of chunks (16 KiB doubling to 256 KiB), copied
 * once at the end into an exactly sized ppk_bytes, each chunk freed as soon as it is
 * copied: neither the whole protobuf nor a bound-sized output buffer is ever held. The
 * codec's context (zstd's CCtx, zlib's deflate state) is kept and reset for the next
 * stream, so its memory is not allocated (and faulted in) again on every export.
 * PPK_CODEC_NONE just collects the bytes.
 *
 * zstd level 1 (the default) runs with a 2 MiB window and a 2^17 hash table instead of
 * its 512 KiB / 2^13: a window's stacks and labels repeat from far apart, and level 1's
 * own table forgets them (W1: 3.6x smaller output at the same speed, docs/performance.md).
 *
 * Every allocation, the codecs' own state included, goes through the given ppk__mem
 * (chunks, contexts) or ppk_allocator (the result). Output is deterministic: the same
 * bytes written in the same pieces give the same compressed bytes. One thread at a time.
 */
#ifndef PPK_COMPRESS_H
#define PPK_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "pprofkit.h"

typedef struct ppk__cchunk {
    uint8_t *p;
    size_t cap, len;
} ppk__cchunk;

typedef struct ppk__cstream {
    ppk__mem *mem;          /* the codec contexts */
    ppk__mem out;           /* the output chunks: transient blocks (see alloc.h) */
    ppk_codec codec;        /* of the stream in progress */
    int level;
    void *zstd;             /* ZSTD_CCtx, kept across streams */
    void *zlib;             /* z_stream with its deflate state, kept across streams */
    int zlib_level;         /* the level zlib's state was made with */
    ppk__cchunk *chunks;    /* the compressed output so far */
    size_t n_chunks, chunks_cap;
    size_t total;           /* bytes in the chunks */
} ppk__cstream;

/* 0 when the codec and level are valid (level 0: the default), else PPK_EINVAL. */
int ppk__compress_check(ppk_codec codec, int level);

void ppk__cstream_init(ppk__cstream *cs, ppk__mem *mem);
/* Frees the contexts and any output. Accepts a stream that never began. */
void ppk__cstream_destroy(ppk__cstream *cs);
/* Starts a stream (codec and level already checked). 0, PPK_ENOMEM or PPK_ECOMPRESS. */
int ppk__cstream_begin(ppk__cstream *cs, ppk_codec codec, int level);
/* Compresses n more bytes. 0, PPK_ENOMEM or PPK_ECOMPRESS; after an error, abort. */
int ppk__cstream_write(ppk__cstream *cs, const uint8_t *in, size_t n);
/* Finishes the stream into *out (zeroed first), allocated with `a` (its transient form,
 * see alloc.h). 0, PPK_ENOMEM or
 * PPK_ECOMPRESS; on error *out stays zeroed and the stream is aborted. */
int ppk__cstream_end(ppk__cstream *cs, const ppk_allocator *a, ppk_bytes *out);
/* Drops a stream's output after a failure; the contexts are kept. */
void ppk__cstream_abort(ppk__cstream *cs);

/* The codecs' allocation functions (zlib's zalloc and zfree, zstd's customMem) over the
 * ppk__mem given as their opaque pointer: a block carries its size for the free. */
void *ppk__zlib_alloc(void *mem, unsigned int items, unsigned int size);
void *ppk__zstd_alloc(void *mem, size_t size);
void ppk__codec_free(void *mem, void *ptr);

/* A copy of n bytes as a ppk_bytes, allocated with `a`'s transient form (alloc.h).
 * 0 or PPK_ENOMEM (*out zeroed). */
int ppk__bytes_copy(const ppk_allocator *a, const uint8_t *in, size_t n, ppk_bytes *out);

#endif
