/*
 * compress.c - gzip and zstd compression, in pieces: see compress.h.
 *
 * zlib and zstd call their allocators without the size on free, so their allocations
 * carry a 16-byte header with the size, to hand it back to ppk__mem_free.
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
/* Level 1's window and hash table (see compress.h). */
#define ZSTD_L1_WINDOW_LOG 21
#define ZSTD_L1_HASH_LOG 17
#define HDR 16
#define CHUNK_MIN (16u << 10)
#define CHUNK_MAX (256u << 10)

static void *sized_alloc(ppk__mem *m, size_t n) {
    if (n > SIZE_MAX - HDR) return NULL;
    uint8_t *p = ppk__mem_alloc(m, n + HDR);
    if (!p) return NULL;
    memcpy(p, &n, sizeof n);
    return p + HDR;
}

static void sized_free(ppk__mem *m, void *ptr) {
    if (!ptr) return;
    uint8_t *p = (uint8_t *)ptr - HDR;
    size_t n;
    memcpy(&n, p, sizeof n);
    ppk__mem_free(m, p, n + HDR);
}

void *ppk__zlib_alloc(void *mem, unsigned int items, unsigned int size) {
    if (size && items > SIZE_MAX / size) return NULL;
    return sized_alloc(mem, (size_t)items * size);
}

void *ppk__zstd_alloc(void *mem, size_t size) { return sized_alloc(mem, size); }

void ppk__codec_free(void *mem, void *ptr) { sized_free(mem, ptr); }

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

static int zlib_error(int zrc) { return zrc == Z_MEM_ERROR ? PPK_ENOMEM : PPK_ECOMPRESS; }

static int zstd_error(size_t r) {
    return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? PPK_ENOMEM : PPK_ECOMPRESS;
}

void ppk__cstream_init(ppk__cstream *cs, ppk__mem *mem) {
    memset(cs, 0, sizeof *cs);
    cs->mem = mem;
    ppk_allocator t;
    ppk__transient_allocator(&t, &mem->a);
    ppk__mem_init(&cs->out, &t);
}

static void zlib_free(ppk__cstream *cs) {
    if (!cs->zlib) return;
    deflateEnd(cs->zlib);
    ppk__mem_free(cs->mem, cs->zlib, sizeof(z_stream));
    cs->zlib = NULL;
}

void ppk__cstream_abort(ppk__cstream *cs) {
    for (size_t i = 0; i < cs->n_chunks; i++)
        ppk__mem_free(&cs->out, cs->chunks[i].p, cs->chunks[i].cap);
    cs->n_chunks = 0;
    cs->total = 0;
}

void ppk__cstream_destroy(ppk__cstream *cs) {
    ppk__cstream_abort(cs);
    ppk__mem_free(cs->mem, cs->chunks, cs->chunks_cap * sizeof *cs->chunks);
    cs->chunks = NULL;
    cs->chunks_cap = 0;
    ZSTD_freeCCtx(cs->zstd);
    cs->zstd = NULL;
    zlib_free(cs);
}

static int zlib_begin(ppk__cstream *cs, int level) {
    if (cs->zlib && cs->zlib_level == level)
        return deflateReset(cs->zlib) == Z_OK ? 0 : PPK_ECOMPRESS;
    zlib_free(cs);
    z_stream *zs = ppk__mem_alloc(cs->mem, sizeof *zs);
    if (!zs) return PPK_ENOMEM;
    memset(zs, 0, sizeof *zs);
    zs->zalloc = ppk__zlib_alloc;
    zs->zfree = ppk__codec_free;
    zs->opaque = (voidpf)cs->mem;
    /* windowBits 15 + 16: a gzip header and trailer. On failure zlib frees its state. */
    int zrc = deflateInit2(zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    if (zrc != Z_OK) {
        ppk__mem_free(cs->mem, zs, sizeof *zs);
        return zlib_error(zrc);
    }
    cs->zlib = zs;
    cs->zlib_level = level;
    return 0;
}

static int zstd_begin(ppk__cstream *cs, int level) {
    if (!cs->zstd) {
        ZSTD_customMem cm = {ppk__zstd_alloc, ppk__codec_free, cs->mem};
        cs->zstd = ZSTD_createCCtx_advanced(cm);
        if (!cs->zstd) return PPK_ENOMEM;
    }
    ZSTD_CCtx *c = cs->zstd;
    size_t r = ZSTD_CCtx_reset(c, ZSTD_reset_session_and_parameters);
    if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level);
    if (!ZSTD_isError(r) && level == 1) {
        r = ZSTD_CCtx_setParameter(c, ZSTD_c_windowLog, ZSTD_L1_WINDOW_LOG);
        if (!ZSTD_isError(r)) r = ZSTD_CCtx_setParameter(c, ZSTD_c_hashLog, ZSTD_L1_HASH_LOG);
    }
    return ZSTD_isError(r) ? zstd_error(r) : 0;
}

int ppk__cstream_begin(ppk__cstream *cs, ppk_codec codec, int level) {
    ppk__cstream_abort(cs);
    cs->codec = codec;
    switch (codec) {
    case PPK_CODEC_GZIP:
        cs->level = level ? level : GZIP_DEFAULT_LEVEL;
        return zlib_begin(cs, cs->level);
    case PPK_CODEC_ZSTD:
        cs->level = level ? level : ZSTD_DEFAULT_LEVEL;
        return zstd_begin(cs, cs->level);
    case PPK_CODEC_NONE:
        cs->level = 0;
        return 0;
    }
    return PPK_EINVAL;
}

/* The last chunk, with room for at least one byte. */
static ppk__cchunk *room(ppk__cstream *cs) {
    if (cs->n_chunks && cs->chunks[cs->n_chunks - 1].len < cs->chunks[cs->n_chunks - 1].cap)
        return &cs->chunks[cs->n_chunks - 1];
    if (ppk__grow(cs->mem, (void **)&cs->chunks, &cs->chunks_cap, cs->n_chunks,
                  cs->n_chunks + 1, sizeof *cs->chunks))
        return NULL;
    /* 16, 16, 32, 64, 128, 256, 256... KiB: small profiles stay small, big ones take
     * few allocations. */
    size_t cap = cs->total < CHUNK_MIN ? CHUNK_MIN : cs->total > CHUNK_MAX ? CHUNK_MAX : cs->total;
    uint8_t *p = ppk__mem_alloc(&cs->out, cap);
    if (!p) return NULL;
    ppk__cchunk *c = &cs->chunks[cs->n_chunks++];
    c->p = p;
    c->cap = cap;
    c->len = 0;
    return c;
}

static int append(ppk__cstream *cs, const uint8_t *in, size_t n) {
    while (n) {
        ppk__cchunk *c = room(cs);
        if (!c) return PPK_ENOMEM;
        size_t k = c->cap - c->len < n ? c->cap - c->len : n;
        memcpy(c->p + c->len, in, k);
        c->len += k;
        cs->total += k;
        in += k;
        n -= k;
    }
    return 0;
}

/* Runs deflate over n bytes (n may be 0 with Z_FINISH) until it has taken them all
 * (Z_NO_FLUSH) or ended the stream (Z_FINISH). */
static int zlib_run(ppk__cstream *cs, const uint8_t *in, size_t n, int flush) {
    z_stream *zs = cs->zlib;
    zs->next_in = (Bytef *)(uintptr_t)in;
    zs->avail_in = 0;
    for (;;) {
        if (zs->avail_in == 0 && n) {
            /* zlib counts in uInt: feed at most UINT_MAX at a time. */
            size_t k = n < UINT_MAX ? n : UINT_MAX;
            zs->avail_in = (uInt)k;
            n -= k;
        }
        if (flush == Z_NO_FLUSH && zs->avail_in == 0) return 0;
        ppk__cchunk *c = room(cs);
        if (!c) return PPK_ENOMEM;
        size_t free_ = c->cap - c->len; /* at most CHUNK_MAX: fits a uInt */
        zs->next_out = c->p + c->len;
        zs->avail_out = (uInt)free_;
        int zrc = deflate(zs, n ? Z_NO_FLUSH : flush);
        size_t wrote = free_ - zs->avail_out;
        c->len += wrote;
        cs->total += wrote;
        if (zrc == Z_STREAM_END) return 0;
        if (zrc != Z_OK && !(zrc == Z_BUF_ERROR && wrote)) return zlib_error(zrc);
    }
}

/* Runs zstd over n bytes with `op` (continue: until all taken; end: until the frame is
 * complete). */
static int zstd_run(ppk__cstream *cs, const uint8_t *in, size_t n, ZSTD_EndDirective op) {
    ZSTD_inBuffer ib = {in, n, 0};
    for (;;) {
        if (op == ZSTD_e_continue && ib.pos == ib.size) return 0;
        ppk__cchunk *c = room(cs);
        if (!c) return PPK_ENOMEM;
        ZSTD_outBuffer ob = {c->p, c->cap, c->len};
        size_t r = ZSTD_compressStream2(cs->zstd, &ob, &ib, op);
        cs->total += ob.pos - c->len;
        c->len = ob.pos;
        if (ZSTD_isError(r)) return zstd_error(r);
        if (op == ZSTD_e_end && r == 0) return 0;
    }
}

int ppk__cstream_write(ppk__cstream *cs, const uint8_t *in, size_t n) {
    if (!n) return 0;
    switch (cs->codec) {
    case PPK_CODEC_GZIP:
        return zlib_run(cs, in, n, Z_NO_FLUSH);
    case PPK_CODEC_ZSTD:
        return zstd_run(cs, in, n, ZSTD_e_continue);
    case PPK_CODEC_NONE:
        return append(cs, in, n);
    }
    return PPK_EINVAL;
}

int ppk__cstream_end(ppk__cstream *cs, const ppk_allocator *a, ppk_bytes *out) {
    memset(out, 0, sizeof *out);
    int rc = 0;
    if (cs->codec == PPK_CODEC_GZIP)
        rc = zlib_run(cs, NULL, 0, Z_FINISH);
    else if (cs->codec == PPK_CODEC_ZSTD)
        rc = zstd_run(cs, NULL, 0, ZSTD_e_end);
    if (!rc) {
        out->data = ppk__bytes_alloc(a, cs->total);
        if (!out->data) rc = PPK_ENOMEM;
    }
    if (rc) {
        memset(out, 0, sizeof *out);
        ppk__cstream_abort(cs);
        return rc;
    }
    /* One copy; each chunk goes back as soon as it is copied, so the peak is the
     * output plus one chunk. */
    for (size_t i = 0; i < cs->n_chunks; i++) {
        ppk__cchunk *c = &cs->chunks[i];
        memcpy(out->data + out->len, c->p, c->len);
        out->len += c->len;
        ppk__mem_free(&cs->out, c->p, c->cap);
    }
    cs->n_chunks = 0;
    cs->total = 0;
    return 0;
}

int ppk__bytes_copy(const ppk_allocator *a, const uint8_t *in, size_t n, ppk_bytes *out) {
    memset(out, 0, sizeof *out);
    out->data = ppk__bytes_alloc(a, n);
    if (!out->data) return PPK_ENOMEM;
    if (n) memcpy(out->data, in, n);
    out->len = n;
    return 0;
}

