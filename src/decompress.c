/*
 * decompress.c - gzip and zstd decompression for the reader: see decompress.h.
 *
 * zlib and zstd free without giving the size, so their blocks carry a 16-byte header
 * holding it, to hand back to ppk__mem_free. zlib counts its input and output in
 * 32 bits: both are fed in pieces of at most UINT_MAX bytes.
 */
#include "decompress.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <zlib.h>
/* ZSTD_createDCtx_advanced (custom allocator) is in the stable ABI of libzstd 1.5 but
 * declared only under this macro. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#include "compress.h"

#define WINDOW_LOG_MAX 27 /* zstd's own default limit for decompression: 128 MiB */

typedef struct dstate {
    ppk__mem *mem;
    ppk__dbuf *out;
    size_t max_out;
    const char *codec;
    char *err;
    size_t err_len;
} dstate;

static int fail(dstate *d, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(dstate *d, int rc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(d->err, d->err_len, "%s", d->codec);
    if (k >= 0 && (size_t)k < d->err_len) vsnprintf(d->err + k, d->err_len - (size_t)k, fmt, ap);
    va_end(ap);
    return rc;
}

/* An allocation failed: the allocator's failure, or max_memory's (mem->limit). */
static int no_memory(dstate *d, const char *what) {
    if (d->mem->limited)
        return fail(d, PPK_ETOOBIG, ": %s would pass max_memory (%zu bytes, %zu in use)",
                    what, d->mem->limit, d->mem->bytes);
    return fail(d, PPK_ENOMEM, ": out of memory for %s", what);
}

/* Room for more output: the buffer doubles, up to max_out + 1 bytes. */
static int grow(dstate *d) {
    ppk__dbuf *b = d->out;
    size_t limit = d->max_out + 1;
    if (b->cap >= limit)
        return fail(d, PPK_ETOOBIG, ": the profile decompresses to more than %zu bytes "
                                    "(max_decoded_bytes)", d->max_out);
    size_t cap = b->cap > limit / 2 ? limit : b->cap * 2;
    uint8_t *p = ppk__mem_resize(d->mem, b->p, b->cap, b->len, cap, 1);
    if (!p) return no_memory(d, "the output");
    b->p = p;
    b->cap = cap;
    return 0;
}

/* The first buffer: the size hint if the stream gives one, else 4 times the input;
 * at most 64 times the input plus 64 KiB (a hint is not trusted) and max_out + 1. */
static int first_buffer(dstate *d, size_t n, uint64_t hint) {
    size_t cap = hint ? (hint < SIZE_MAX ? (size_t)hint + 1 : SIZE_MAX)
                      : (n < SIZE_MAX / 4 ? n * 4 : SIZE_MAX);
    size_t most = n < (SIZE_MAX - 65536) / 64 ? n * 64 + 65536 : SIZE_MAX;
    if (cap > most) cap = most;
    if (cap > d->max_out + 1) cap = d->max_out + 1;
    if (cap < 64) cap = 64;
    d->out->p = ppk__mem_alloc(d->mem, cap);
    if (!d->out->p) return no_memory(d, "the output");
    d->out->cap = cap;
    return 0;
}

static int gunzip(dstate *d, const uint8_t *in, size_t n) {
    /* ISIZE, the last member's size modulo 2^32: a hint for one member. */
    uint64_t hint = 0;
    if (n >= 18)
        hint = (uint64_t)in[n - 4] | (uint64_t)in[n - 3] << 8 | (uint64_t)in[n - 2] << 16 |
               (uint64_t)in[n - 1] << 24;
    int rc = first_buffer(d, n, hint);
    if (rc) return rc;
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    zs.zalloc = ppk__zlib_alloc;
    zs.zfree = ppk__codec_free;
    zs.opaque = (voidpf)d->mem;
    int zrc = inflateInit2(&zs, 16 + MAX_WBITS); /* gzip only */
    if (zrc != Z_OK) return no_memory(d, "the inflate state");
    size_t pos = 0; /* input consumed */
    int ended = 0;  /* the last member is complete */
    for (;;) {
        if (d->out->len == d->out->cap && (rc = grow(d))) break;
        size_t in_piece = n - pos < UINT_MAX ? n - pos : UINT_MAX;
        size_t room = d->out->cap - d->out->len;
        size_t out_piece = room < UINT_MAX ? room : UINT_MAX;
        zs.next_in = (Bytef *)(uintptr_t)(in + pos);
        zs.avail_in = (uInt)in_piece;
        zs.next_out = d->out->p + d->out->len;
        zs.avail_out = (uInt)out_piece;
        zrc = inflate(&zs, Z_NO_FLUSH);
        pos += in_piece - zs.avail_in;
        d->out->len += out_piece - zs.avail_out;
        if (zrc == Z_STREAM_END) {
            ended = 1;
            if (pos == n) break;
            /* Another member follows. */
            if (inflateReset(&zs) != Z_OK) {
                rc = fail(d, PPK_EFORMAT, " at byte %zu: cannot start the next member", pos);
                break;
            }
            ended = 0;
            continue;
        }
        if (zrc == Z_MEM_ERROR) {
            rc = no_memory(d, "the inflate state");
            break;
        }
        if (zrc == Z_DATA_ERROR || zrc == Z_NEED_DICT || zrc == Z_STREAM_ERROR) {
            rc = fail(d, PPK_EFORMAT, " at byte %zu: %s", pos,
                      zs.msg ? zs.msg : "corrupt stream");
            break;
        }
        /* Z_OK or Z_BUF_ERROR: more input or more room is needed. */
        int stuck = zs.avail_in == in_piece && zs.avail_out == out_piece;
        if ((pos == n || stuck) && zs.avail_out != 0) {
            rc = fail(d, PPK_EFORMAT, ": the input ends inside the stream (after %zu bytes)",
                      n);
            break;
        }
    }
    inflateEnd(&zs);
    if (!rc && !ended)
        rc = fail(d, PPK_EFORMAT, ": the input ends inside the stream (after %zu bytes)", n);
    return rc;
}

static int unzstd(dstate *d, const uint8_t *in, size_t n) {
    unsigned long long size = ZSTD_getFrameContentSize(in, n);
    uint64_t hint = size == ZSTD_CONTENTSIZE_UNKNOWN || size == ZSTD_CONTENTSIZE_ERROR
                        ? 0 : (uint64_t)size;
    int rc = first_buffer(d, n, hint);
    if (rc) return rc;
    ZSTD_customMem cm = {ppk__zstd_alloc, ppk__codec_free, d->mem};
    ZSTD_DCtx *dc = ZSTD_createDCtx_advanced(cm);
    if (!dc) return no_memory(d, "the decompression context");
    ZSTD_DCtx_setParameter(dc, ZSTD_d_windowLogMax, WINDOW_LOG_MAX);
    ZSTD_inBuffer ib = {in, n, 0};
    size_t zr = 1; /* 0 once a frame is complete */
    for (;;) {
        if (d->out->len == d->out->cap && (rc = grow(d))) break;
        ZSTD_outBuffer ob = {d->out->p + d->out->len, d->out->cap - d->out->len, 0};
        size_t in_before = ib.pos;
        zr = ZSTD_decompressStream(dc, &ob, &ib);
        d->out->len += ob.pos;
        if (ZSTD_isError(zr)) {
            if (ZSTD_getErrorCode(zr) == ZSTD_error_memory_allocation)
                rc = no_memory(d, "the decompression window");
            else
                rc = fail(d, PPK_EFORMAT, " at byte %zu: %s", ib.pos, ZSTD_getErrorName(zr));
            break;
        }
        if (ib.pos == ib.size && (zr == 0 || ob.pos < ob.size)) break;
        if (ib.pos == in_before && ob.pos == 0) { /* no progress: cannot happen, but bound it */
            rc = fail(d, PPK_EFORMAT, " at byte %zu: the stream makes no progress", ib.pos);
            break;
        }
    }
    ZSTD_freeDCtx(dc);
    if (!rc && zr != 0)
        rc = fail(d, PPK_EFORMAT, ": the input ends inside a frame (after %zu bytes)", n);
    return rc;
}

int ppk__decompress(ppk__mem *mem, ppk_codec codec, const uint8_t *in, size_t n,
                    size_t max_out, ppk__dbuf *out, char *err, size_t err_len) {
    memset(out, 0, sizeof *out);
    dstate d = {mem, out, max_out, codec == PPK_CODEC_ZSTD ? "zstd" : "gzip", err, err_len};
    int rc = codec == PPK_CODEC_ZSTD ? unzstd(&d, in, n) : gunzip(&d, in, n);
    if (rc) {
        ppk__mem_free(mem, out->p, out->cap);
        memset(out, 0, sizeof *out);
    }
    return rc;
}
