/*
 * pprof_scan.h - walks an export (zstd, gzip or uncompressed pprof) one top-level field at
 * a time, without holding it decoded, for benchmarks that check their own exports; header
 * only, its own protobuf code (nothing shared with src/).
 *
 * Why not tests/pprof_read.h, nor the library's ppk_pprof_read: both keep the whole
 * profile decoded (the decompressed bytes and tables: every sample's location ids as
 * uint64 for the first, about 150 MB for one W3 window; 3 to 5 bytes per byte of
 * protobuf for the second), so a benchmark checking its exports with them would report mostly
 * its checker's peak RSS. Here the
 * compressed bytes are decompressed in pieces into a buffer of 1 MiB (grown only for a
 * field larger than that), and each complete top-level field is handed to a callback:
 * its number, wire type, and its bytes (wire type 2) or value (varint, fixed). A pprof
 * Profile writes its string table after its samples, so a check that needs strings scans
 * twice (decompressing twice): first the strings (ps_strings_collect, or ps_strings_add
 * from a callback of its own), then the samples. A sharded export may hold the same
 * string at several indices: compare strings by their bytes (ps_string_eq), not index.
 *
 *   ps_scan(bytes, len, codec, on_field, ctx)     @return 0, or -1: malformed, truncated,
 *                                                  out of memory, or on_field returned -1
 *   ps_field_next(&p, end, &f)                     one field of a message held in memory
 *   ps_varint(p, end, &v)                          one varint (packed repeated fields)
 *
 * Not thread safe per call; calls on different exports may run at once.
 */
#ifndef PPK_BENCH_PPROF_SCAN_H
#define PPK_BENCH_PPROF_SCAN_H

#include <pprofkit.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

typedef struct ps_field {
    uint32_t number;
    uint32_t wire;        /* 0 varint, 1 fixed64, 2 bytes, 5 fixed32 */
    uint64_t v;           /* wire types 0, 1, 5 */
    const uint8_t *bytes; /* wire type 2 */
    size_t len;
} ps_field;

/* Reads a varint. @return bytes read, 0 if more input is needed, -1 if malformed. */
static inline int ps_varint(const uint8_t *p, const uint8_t *end, uint64_t *v) {
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p + i >= end) return 0;
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return -1;
}

/* The field at *p. @return 1 (read; *p advanced), 0 (incomplete), -1 (malformed). */
static inline int ps_field_next(const uint8_t **p, const uint8_t *end, ps_field *f) {
    const uint8_t *q = *p;
    uint64_t key;
    int n = ps_varint(q, end, &key);
    if (n <= 0) return n;
    q += n;
    f->number = (uint32_t)(key >> 3);
    f->wire = (uint32_t)(key & 7);
    f->bytes = NULL;
    f->len = 0;
    switch (f->wire) {
    case 0:
        if ((n = ps_varint(q, end, &f->v)) <= 0) return n;
        q += n;
        break;
    case 1:
    case 5: {
        size_t w = f->wire == 1 ? 8 : 4;
        if ((size_t)(end - q) < w) return 0;
        f->v = 0;
        for (size_t i = 0; i < w; i++) f->v |= (uint64_t)q[i] << (8 * i);
        q += w;
        break;
    }
    case 2: {
        uint64_t len;
        if ((n = ps_varint(q, end, &len)) <= 0) return n;
        q += n;
        if (len > (uint64_t)(end - q)) return 0;
        f->bytes = q;
        f->len = (size_t)len;
        q += len;
        break;
    }
    default:
        return -1;
    }
    *p = q;
    return 1;
}

/* Calls fn(ctx, field) for each top-level field; the field's bytes are valid during the
 * call only. @return 0 or -1 (see the top). */
typedef int (*ps_field_fn)(void *ctx, const ps_field *f);

static inline int ps_scan(const uint8_t *data, size_t len, ppk_codec codec, ps_field_fn fn,
                          void *ctx) {
    if (codec == PPK_CODEC_NONE) {
        const uint8_t *p = data, *end = data + len;
        ps_field f;
        int rc;
        while (p < end)
            if ((rc = ps_field_next(&p, end, &f)) != 1 || fn(ctx, &f) != 0) return -1;
        return 0;
    }
    size_t cap = (size_t)1 << 20, have = 0;
    uint8_t *buf = malloc(cap);
    ZSTD_DStream *zd = NULL;
    z_stream zs;
    int zs_open = 0, rc = -1, eof = 0;
    if (!buf) return -1;
    if (codec == PPK_CODEC_ZSTD) {
        if (!(zd = ZSTD_createDStream()) || ZSTD_isError(ZSTD_initDStream(zd))) goto out;
    } else {
        memset(&zs, 0, sizeof zs);
        if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) goto out;
        zs_open = 1;
        zs.next_in = (Bytef *)data;
        zs.avail_in = (uInt)len; /* exports are far below 4 GiB */
    }
    ZSTD_inBuffer in = {data, len, 0};
    size_t zret = 1; /* zstd: 0 once a frame is complete */
    for (;;) {
        /* Every complete field in the buffer. */
        const uint8_t *p = buf, *end = buf + have;
        ps_field f;
        int r = 1;
        while (p < end && (r = ps_field_next(&p, end, &f)) == 1)
            if (fn(ctx, &f) != 0) goto out;
        if (p < end && r < 0) goto out;
        memmove(buf, p, (size_t)(end - p));
        have = (size_t)(end - p);
        if (eof) {
            if (have == 0) rc = 0; /* else truncated */
            goto out;
        }
        if (have == cap) { /* one field larger than the buffer */
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) goto out;
            buf = nb;
            cap *= 2;
        }
        size_t before = have, in_before = zd ? in.pos : len - zs.avail_in;
        if (zd) {
            ZSTD_outBuffer out = {buf + have, cap - have, 0};
            zret = ZSTD_decompressStream(zd, &out, &in);
            if (ZSTD_isError(zret)) goto out;
            have += out.pos;
            if (in.pos == in.size && out.pos < out.size) {
                if (zret != 0) goto out; /* truncated frame */
                eof = 1;
            }
        } else {
            zs.next_out = buf + have;
            zs.avail_out = (uInt)(cap - have);
            int z = inflate(&zs, Z_NO_FLUSH);
            if (z != Z_OK && z != Z_STREAM_END && z != Z_BUF_ERROR) goto out;
            have = cap - zs.avail_out;
            if (z == Z_STREAM_END) eof = 1;
        }
        size_t in_now = zd ? in.pos : len - zs.avail_in;
        if (have == before && in_now == in_before && !eof) goto out; /* truncated */
    }
out:
    if (zd) ZSTD_freeDStream(zd);
    if (zs_open) inflateEnd(&zs);
    free(buf);
    return rc;
}

/* The string table of a profile, copied (a few MB at most for the benchmarks' exports). */
typedef struct ps_strings {
    char *bytes;
    size_t used, cap;
    size_t *off; /* string i is bytes[off[i]] .. bytes[off[i + 1]] */
    size_t n, n_cap;
} ps_strings;

/* A ps_field_fn (ctx: a zeroed ps_strings) that copies the string table's entries (field
 * 6) and ignores the other fields; callable from a callback that looks at more. */
static inline int ps_strings_add(void *ctx, const ps_field *f) {
    ps_strings *s = ctx;
    if (f->number != 6) return 0;
    if (f->wire != 2) return -1;
    if (s->used + f->len > s->cap) {
        size_t cap = s->cap ? s->cap : 1 << 16;
        while (s->used + f->len > cap) cap *= 2;
        char *nb = realloc(s->bytes, cap);
        if (!nb) return -1;
        s->bytes = nb;
        s->cap = cap;
    }
    if (s->n + 2 > s->n_cap) {
        size_t cap = s->n_cap ? s->n_cap * 2 : 1024;
        size_t *no = realloc(s->off, cap * sizeof *no);
        if (!no) return -1;
        s->off = no;
        s->n_cap = cap;
    }
    if (s->n == 0) s->off[0] = 0;
    if (f->len) memcpy(s->bytes + s->used, f->bytes, f->len);
    s->used += f->len;
    s->off[++s->n] = s->used;
    return 0;
}

static inline void ps_strings_free(ps_strings *s) {
    free(s->bytes);
    free(s->off);
    memset(s, 0, sizeof *s);
}

/* Collects the string table of an export into *s (zeroed first). @return 0 or -1. */
static inline int ps_strings_collect(const uint8_t *data, size_t len, ppk_codec codec,
                                     ps_strings *s) {
    memset(s, 0, sizeof *s);
    if (ps_scan(data, len, codec, ps_strings_add, s) == 0 && s->n > 0) return 0;
    ps_strings_free(s);
    return -1;
}

/* Whether string `idx` exists and equals the `n` bytes at `c`. */
static inline int ps_string_eq(const ps_strings *s, uint64_t idx, const char *c, size_t n) {
    return idx < s->n && s->off[idx + 1] - s->off[idx] == n &&
           memcmp(s->bytes + s->off[idx], c, n) == 0;
}

#endif
