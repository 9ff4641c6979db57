/*
 * pb.h - a small protocol buffers writer.
 *
 * Just what profile.proto needs: varints, tags, length-delimited fields (strings,
 * packed repeated varints, nested messages). It sits on the export path, so writes are
 * inline stores, unchecked in release builds: the caller first makes room with
 * ppk__pb_room() (or ppk__pb_reserve()) for an upper bound of what it will write, summed
 * from the named bounds below (PPK_PB_UINT_MAX per varint field, PPK_PB_VARINT_MAX per
 * bare varint, PPK_PB_NEST_MAX per nested message or packed array, the bytes of a
 * string), then writes. Debug builds record where that room ends and assert that every
 * store stays within it, so a bound that is too small fails the tests (the fuzz targets
 * write the largest values) instead of writing past the buffer. A nested message
 * reserves one byte for its length and ppk__pb_end() moves the body forward in the rare
 * case the length needs more.
 *
 * Streaming: between ppk__pb_stream_begin() and ppk__pb_stream_end() the buffer is
 * bounded (PPK_PB_BUF bytes). Before each top-level field the caller asks for room with
 * ppk__pb_room(); when the field does not fit, the bytes buffered so far go to the
 * compressor (compress.h) and the buffer starts over, so a whole message is never held.
 * Nested messages stay within the buffer; a top-level field larger than it grows it.
 * Outside a stream, ppk__pb_room() is ppk__pb_reserve(): everything stays in `buf`.
 * Single-threaded; the buffer and the compressor's context are reused across encodes.
 */
#ifndef PPK_PB_H
#define PPK_PB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "compress.h"

#include <assert.h>

#define PPK_PB_VARINT_MAX 10
/* A tag: field numbers go up to 2^29 - 1. */
#define PPK_PB_TAG_MAX 5
/* A varint field: its tag and its value. */
#define PPK_PB_UINT_MAX (PPK_PB_TAG_MAX + PPK_PB_VARINT_MAX)
/* Tag and length of a nested message or packed array (a length below 2^35). */
#define PPK_PB_NEST_MAX (PPK_PB_TAG_MAX + 5)
/* The streaming buffer's size. */
#define PPK_PB_BUF (256u << 10)

enum { PPK_PB_VARINT = 0, PPK_PB_I64 = 1, PPK_PB_LEN = 2 };

typedef struct ppk__pb {
    ppk__mem *mem;
    uint8_t *buf;
    size_t len;
    size_t cap;
    int streaming;      /* between stream_begin and stream_end */
    ppk__cstream cs;    /* where a stream's bytes go */
    size_t limit;       /* where the room last asked for ends (checked in debug builds) */
} ppk__pb;

/* Debug builds: the next k bytes are within the room asked for. */
#define PPK_PB_CHECK(pb, k) assert((pb)->len + (k) <= (pb)->limit && (pb)->limit <= (pb)->cap)

void ppk__pb_init(ppk__pb *pb, ppk__mem *mem);
void ppk__pb_destroy(ppk__pb *pb);
/* Room for `n` more bytes. 0 or PPK_ENOMEM. */
int ppk__pb_reserve(ppk__pb *pb, size_t n);
/* Gives back a buffer over four times larger than `used` bytes needed (a burst), but
 * keeps PPK_PB_BUF for the next stream. */
void ppk__pb_shrink(ppk__pb *pb, size_t used);

/* Starts an encode whose bytes are compressed with `codec` and `level` (checked by
 * ppk__compress_check) as they are written. len is set to 0. 0 or PPK_ENOMEM,
 * PPK_ECOMPRESS. */
int ppk__pb_stream_begin(ppk__pb *pb, ppk_codec codec, int level);
/* Compresses what is left and puts the whole output into *out (allocated with `a`).
 * On error (PPK_ENOMEM, PPK_ECOMPRESS) *out is zeroed and the stream is dropped. */
int ppk__pb_stream_end(ppk__pb *pb, const ppk_allocator *a, ppk_bytes *out);
/* Drops a stream after a failure (its output freed; buffer and context kept). */
void ppk__pb_stream_abort(ppk__pb *pb);
int ppk__pb_room_slow(ppk__pb *pb, size_t n);

/* Room for a top-level field of at most `n` bytes: see the top of this file.
 * 0, PPK_ENOMEM or PPK_ECOMPRESS. */
static inline int ppk__pb_room(ppk__pb *pb, size_t n) {
    int rc = n <= pb->cap - pb->len ? 0 : ppk__pb_room_slow(pb, n);
    if (!rc) pb->limit = pb->len + n;
    return rc;
}
/* Closes the nested message opened at `start` (what ppk__pb_begin returned). */
void ppk__pb_end(ppk__pb *pb, size_t start);

static inline size_t ppk__pb_varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline void ppk__pb_varint(ppk__pb *pb, uint64_t v) {
    PPK_PB_CHECK(pb, ppk__pb_varint_size(v));
    uint8_t *p = pb->buf + pb->len;
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    pb->len = (size_t)(p - pb->buf);
}

static inline void ppk__pb_tag(ppk__pb *pb, uint32_t field, uint32_t wire_type) {
    ppk__pb_varint(pb, ((uint64_t)field << 3) | wire_type);
}

/* A varint field, written even when 0. int64 values are written as their two's
 * complement (10 bytes when negative), as protobuf's int64 requires. */
static inline void ppk__pb_uint(ppk__pb *pb, uint32_t field, uint64_t v) {
    ppk__pb_tag(pb, field, PPK_PB_VARINT);
    ppk__pb_varint(pb, v);
}

/* A varint field, omitted when 0 (proto3's default). */
static inline void ppk__pb_uint_nz(ppk__pb *pb, uint32_t field, uint64_t v) {
    if (v) ppk__pb_uint(pb, field, v);
}

static inline void ppk__pb_bytes(ppk__pb *pb, uint32_t field, const void *p, size_t n) {
    ppk__pb_tag(pb, field, PPK_PB_LEN);
    ppk__pb_varint(pb, n);
    PPK_PB_CHECK(pb, n);
    if (n) memcpy(pb->buf + pb->len, p, n);
    pb->len += n;
}

/* Opens a length-delimited field (a nested message or a packed array). */
static inline size_t ppk__pb_begin(ppk__pb *pb, uint32_t field) {
    ppk__pb_tag(pb, field, PPK_PB_LEN);
    PPK_PB_CHECK(pb, 1);
    pb->len++; /* the length, usually one byte */
    return pb->len;
}

#endif
