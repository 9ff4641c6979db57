/*
 * reader.h - what the pprof reader's two files share: reader.c decodes the messages
 * (the passes, the tables, ppk_pprof_read); reader_wire.c has the cold helpers (error
 * messages, id indexes, the tables' sizes). The wire primitives below are inline: they
 * run for every field of the input.
 */
#ifndef PPK_READER_H
#define PPK_READER_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "decompress.h"
#include "pprofkit.h"

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };


/* A message's name and its fields' names, for the error messages. */
typedef struct msgdesc {
    const char *name;
    const char *const *fields; /* by field number */
    uint32_t n;
} msgdesc;

/* What ppk_pprof_read returns: the public part first. */
typedef struct reader {
    ppk_pprof pub;
    ppk__mem mem; /* everything below, and this struct */
    ppk__dbuf buf;
    void *tables;
    size_t tables_size;
} reader;

/* Element counts (first pass), then fill cursors (second pass). */
typedef struct counts {
    size_t types, samples, mappings, locations, functions, strings, comments;
    size_t locrefs, values, labels, lines;
} counts;

/* An index entry: an element's id, its position, the byte offset of its message. */
typedef struct ent {
    uint64_t id;
    size_t pos, at;
} ent;

typedef struct index {
    ent *e;
    size_t n;
    int dense; /* e[i].id == i + 1 for every i: no sort, no search */
} index;

enum { SW_COUNT, SW_STRINGS, SW_TABLES, SW_LOCATIONS, SW_SAMPLES };

typedef struct dec {
    reader *r;
    const uint8_t *b; /* the protobuf */
    size_t n;
    int sweep;
    counts cnt, cur;
    /* The tables (second pass). */
    ppk_value_type *types;
    ppk_pprof_sample *samples;
    ppk_pprof_mapping *mappings;
    ppk_pprof_location *locations;
    ppk_pprof_function *functions;
    ppk_str *strings, *comments;
    const ppk_pprof_location **locrefs;
    int64_t *values;
    ppk_pprof_label *labels;
    ppk_pprof_line *lines;
    index ix_map, ix_fn, ix_loc;
    char *err;
    size_t err_len;
} dec;

/* One field: number, wire type, value (the length for wire type 2), where it is. */
typedef struct fld {
    uint32_t num, wt;
    uint64_t v;
    size_t at;   /* the tag's offset */
    size_t data; /* wire type 2: where the bytes start */
} fld;

/* Writes "Message.field at byte N: " and the formatted text into d->err; returns rc. */
int ppk__rd_fail(dec *d, int rc, const msgdesc *m, uint32_t num, size_t at, const char *fmt,
                 ...) __attribute__((format(printf, 6, 7)));
/* A message without a field and offset. */
int ppk__rd_plain(dec *d, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An allocation of `bytes` failed or would pass max_memory. */
int ppk__rd_out_of_memory(dec *d, const ppk__mem *m, size_t bytes);
/* Makes the index searchable; an id twice is an error (at the later of the two). */
int ppk__rd_index_build(dec *d, index *ix, const msgdesc *field_of);
/* The tables' block: n rounded up to any type's alignment (SIZE_MAX on overflow); n
 * elements of `size` added to *total (saturating); the next n elements at *at, which
 * moves past them. */
size_t ppk__rd_aligned(size_t n);
void ppk__rd_add_size(size_t *total, size_t n, size_t size);
void *ppk__rd_carve(uint8_t **at, size_t n, size_t size);

static inline int ppk__rd_varint(dec *d, size_t *pos, size_t end, uint64_t *v, const msgdesc *m,
                      uint32_t num) {
    size_t p = *pos;
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return ppk__rd_fail(d, PPK_EFORMAT, m, num, *pos,
                                "a varint runs past the end of the %s", m->name);
        uint8_t b = d->b[p++];
        if (i == 9 && b > 1)
            return ppk__rd_fail(d, PPK_EFORMAT, m, num, *pos, "%s", b & 0x80 ?
                        "a varint longer than 10 bytes" : "a varint above 2^64 - 1");
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            *pos = p;
            return 0;
        }
    }
    return 0; /* not reached: the tenth byte ends the varint or fails */
}

/* The field at *pos (< end) of message m; *pos moves past it. */
static inline int ppk__rd_field(dec *d, size_t *pos, size_t end, const msgdesc *m, fld *f) {
    uint64_t key = 0;
    f->at = *pos;
    int rc = ppk__rd_varint(d, pos, end, &key, m, 0);
    if (rc) return rc;
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return ppk__rd_fail(d, PPK_EFORMAT, m, 0, f->at, "field number %llu is invalid",
                    (unsigned long long)(key >> 3));
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    switch (f->wt) {
    case WT_VARINT:
        return ppk__rd_varint(d, pos, end, &f->v, m, f->num);
    case WT_I64:
    case WT_I32: {
        size_t w = f->wt == WT_I64 ? 8 : 4;
        if (end - *pos < w)
            return ppk__rd_fail(d, PPK_EFORMAT, m, f->num, f->at,
                        "a %zu-byte value runs past the end of the %s", w, m->name);
        f->v = 0;
        for (size_t i = 0; i < w; i++) f->v |= (uint64_t)d->b[*pos + i] << (8 * i);
        *pos += w;
        return 0;
    }
    case WT_LEN:
        if ((rc = ppk__rd_varint(d, pos, end, &f->v, m, f->num))) return rc;
        if (f->v > end - *pos)
            return ppk__rd_fail(d, PPK_EFORMAT, m, f->num, f->at,
                        "length %llu runs past the end of the %s (%zu bytes left)",
                        (unsigned long long)f->v, m->name, end - *pos);
        f->data = *pos;
        *pos += (size_t)f->v;
        return 0;
    default:
        return ppk__rd_fail(d, PPK_EFORMAT, m, f->num, f->at, "wire type %u is not supported",
                    f->wt);
    }
}

static inline int ppk__rd_want(dec *d, const msgdesc *m, const fld *f, uint32_t wt) {
    if (f->wt == wt) return 0;
    return ppk__rd_fail(d, PPK_EFORMAT, m, f->num, f->at, "wire type %u, expected %u (%s)", f->wt,
                        wt, wt == WT_LEN ? "length-delimited" : "varint");
}

/* The integers of a repeated scalar field: packed (wire type 2) or one (wire type 0).
 * Calls fn for each, with its byte offset; fn NULL only counts them into *n. */
typedef int (*ppk__rd_int_fn)(dec *d, void *ctx, uint64_t v, size_t at);

static inline int ppk__rd_ints(dec *d, const msgdesc *m, const fld *f, ppk__rd_int_fn fn, void *ctx,
                               size_t *n) {
    if (f->wt == WT_VARINT) {
        (*n)++;
        return fn ? fn(d, ctx, f->v, f->at) : 0;
    }
    if (f->wt != WT_LEN)
        return ppk__rd_fail(d, PPK_EFORMAT, m, f->num, f->at,
                    "wire type %u, expected 0 (varint) or 2 (packed)", f->wt);
    size_t pos = f->data, end = f->data + (size_t)f->v;
    while (pos < end) {
        size_t at = pos;
        uint64_t v = 0;
        int rc = ppk__rd_varint(d, &pos, end, &v, m, f->num);
        if (rc) return rc;
        (*n)++;
        if (fn && (rc = fn(d, ctx, v, at))) return rc;
    }
    return 0;
}

/* A string index of field num of m (found at `at`) into *out; not checked when counting. */
static inline int ppk__rd_string_at(dec *d, const msgdesc *m, uint32_t num, size_t at, uint64_t idx,
                     ppk_str *out) {
    if (d->sweep == SW_COUNT) return 0;
    if (idx >= d->cnt.strings)
        return ppk__rd_fail(d, PPK_EFORMAT, m, num, at,
                    "string index %lld out of range (string_table has %zu strings)",
                    (long long)idx, d->cnt.strings);
    *out = d->strings[idx];
    return 0;
}

/* A field holding a string index. */
static inline int ppk__rd_string(dec *d, const msgdesc *m, const fld *f, ppk_str *out) {
    int rc = ppk__rd_want(d, m, f, WT_VARINT);
    return rc ? rc : ppk__rd_string_at(d, m, f->num, f->at, f->v, out);
}

/* A varint field's value (int64 and uint64 fields; bools are v != 0). */
static inline int ppk__rd_uint(dec *d, const msgdesc *m, const fld *f, uint64_t *out) {
    int rc = ppk__rd_want(d, m, f, WT_VARINT);
    if (!rc) *out = f->v;
    return rc;
}

/* Lookups: the position of id in the index, or SIZE_MAX. */
static inline size_t ppk__rd_find(const index *ix, uint64_t id) {
    if (ix->dense) return id >= 1 && id <= ix->n ? (size_t)(id - 1) : SIZE_MAX;
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->e[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < ix->n && ix->e[lo].id == id ? ix->e[lo].pos : SIZE_MAX;
}

#endif
