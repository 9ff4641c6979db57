/*
 * compress.c - gzip and zstd compression: see compress.h.
 *
 * zlib and zstd call their allocators without the size on free, so their allocations
 * carry a 16-byte header with the size, to hand it to ppk_allocator.free.
 */
#include "compress.h"

#include <limits.h>
#include <string.h>
#include <zlib.h>
/* ZSTD_createCCtx_advanced (custom allocator) is in the stable ABI of libzstd 1.5 but
 * declared only under this macro. */
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>
#include <zstd_errors.h>

#define GZIP_DEFAULT_LEVEL 1
#define ZSTD_DEFAULT_LEVEL 1
#define HDR 16

static void *sized_alloc(const ppk_allocator *a, size_t n) {
    if (n > SIZE_MAX - HDR) return NULL;
    uint8_t *p = a->alloc(a->opaque, n + HDR);
    if (!p) return NULL;
    memcpy(p, &n, sizeof n);
    return p + HDR;
}

static void sized_free(const ppk_allocator *a, void *ptr) {
    if (!ptr) return;
    uint8_t *p = (uint8_t *)ptr - HDR;
    size_t n;
    memcpy(&n, p, sizeof n);
    a->free(a->opaque, p, n + HDR);
}

static voidpf z_alloc(voidpf opaque, uInt items, uInt size) {
    if (size && items > SIZE_MAX / size) return Z_NULL;
    return sized_alloc(opaque, (size_t)items * size);
}

static void z_free(voidpf opaque, voidpf ptr) { sized_free(opaque, ptr); }

static void *zs_alloc(void *opaque, size_t size) { return sized_alloc(opaque, size); }

static void zs_free(void *opaque, void *ptr) { sized_free(opaque, ptr); }

int ppk__compress_check(ppk_codec codec, int level) {
    switch (codec) {
    case PPK_CODEC_NONE:
        return level == 0 ? 0 : PPK_EINVAL;
    case PPK_CODEC_GZIP:
        return level >= 0 && level <= 9 ? 0 : PPK_EINVAL;
    case PPK_CODEC_ZSTD:
        return level >= 0 && level <= ZSTD_maxCLevel() ? 0 : PPK_EINVAL;
    }
    return PPK_EINVAL;
}

static int out_alloc(const ppk_allocator *a, size_t cap, ppk_bytes *out) {
    out->data = a->alloc(a->opaque, cap ? cap : 1);
    if (!out->data) return PPK_ENOMEM;
    out->cap_ = cap ? cap : 1;
    out->alloc_ = *a;
    return 0;
}

static int gzip(const ppk_allocator *a, int level, const uint8_t *in, size_t n,
                ppk_bytes *out) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    zs.zalloc = z_alloc;
    zs.zfree = z_free;
    zs.opaque = (voidpf)a;
    int zrc = deflateInit2(&zs, level ? level : GZIP_DEFAULT_LEVEL, Z_DEFLATED, 15 + 16, 8,
                           Z_DEFAULT_STRATEGY);
    if (zrc != Z_OK) return zrc == Z_MEM_ERROR ? PPK_ENOMEM : PPK_ECOMPRESS;
    /* deflateBound is exact for one deflate(Z_FINISH) over all the input. */
    size_t bound = deflateBound(&zs, (uLong)n);
    int rc = out_alloc(a, bound, out);
    if (rc) {
        deflateEnd(&zs);
        return rc;
    }
    /* zlib counts in uInt: feed input and output room in pieces of at most UINT_MAX. */
    size_t fed = 0, given = 0;
    zs.next_in = (Bytef *)(uintptr_t)in;
    zs.next_out = out->data;
    do {
        if (zs.avail_in == 0 && fed < n) {
            size_t k = n - fed < UINT_MAX ? n - fed : UINT_MAX;
            zs.avail_in = (uInt)k;
            fed += k;
        }
        if (zs.avail_out == 0 && given < bound) {
            size_t k = bound - given < UINT_MAX ? bound - given : UINT_MAX;
            zs.avail_out = (uInt)k;
            given += k;
        }
        zrc = deflate(&zs, fed == n ? Z_FINISH : Z_NO_FLUSH);
    } while (zrc == Z_OK);
    size_t len = zs.total_out;
    deflateEnd(&zs);
    if (zrc != Z_STREAM_END) {
        ppk_bytes_free(out);
        return zrc == Z_MEM_ERROR ? PPK_ENOMEM : PPK_ECOMPRESS;
    }
    out->len = len;
    return 0;
}

static int zstd(const ppk_allocator *a, int level, const uint8_t *in, size_t n,
                ppk_bytes *out) {
    ZSTD_customMem cm = {zs_alloc, zs_free, (void *)a};
    ZSTD_CCtx *cctx = ZSTD_createCCtx_advanced(cm);
    if (!cctx) return PPK_ENOMEM;
    size_t bound = ZSTD_compressBound(n);
    int rc = out_alloc(a, bound, out);
    if (!rc) {
        size_t r = ZSTD_compressCCtx(cctx, out->data, bound, in, n,
                                     level ? level : ZSTD_DEFAULT_LEVEL);
        if (ZSTD_isError(r)) {
            rc = ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? PPK_ENOMEM
                                                                       : PPK_ECOMPRESS;
            ppk_bytes_free(out);
        } else {
            out->len = r;
        }
    }
    ZSTD_freeCCtx(cctx);
    return rc;
}

int ppk__compress(const ppk_allocator *a, ppk_codec codec, int level, const uint8_t *in,
                  size_t n, ppk_bytes *out) {
    memset(out, 0, sizeof *out);
    switch (codec) {
    case PPK_CODEC_GZIP:
        return gzip(a, level, in, n, out);
    case PPK_CODEC_ZSTD:
        return zstd(a, level, in, n, out);
    case PPK_CODEC_NONE: {
        int rc = out_alloc(a, n, out);
        if (rc) return rc;
        if (n) memcpy(out->data, in, n);
        out->len = n;
        return 0;
    }
    }
    return PPK_EINVAL;
}
