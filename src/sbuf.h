/*
 * sbuf.h - a sample being built: its frames and labels as hashed records.
 *
 * Between start and flush a sample lives here, in memory of its own: each pushed frame
 * or label is validated, its strings copied (repaired and cut to max_string_len as the
 * string table would), and serialized into one record whose 64-bit hash is computed
 * right away, outside any lock. At flush the window looks each record up by that hash
 * (insert.c); only records it has never seen are decoded and interned field by field.
 * Nothing here points into a window, and nothing in a window points here (G2).
 *
 * Frame records are not hashed one by one at push: ppk__sbuf_seal() hashes the span of
 * buffer they occupy once, at flush (`stack_hash`), and the window finds a known stack
 * by that hash (stack_cache.h); a record's own hash is computed only when its stack is
 * new. The record layouts are record.h's.
 *
 * One thread at a time. A failed push leaves the buffer as it was.
 */
#ifndef PPK_SBUF_H
#define PPK_SBUF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "alloc.h"
#include "pprofkit.h"
#include "record.h"
#include "utf8.h"

typedef struct ppk__sbuf {
    ppk__mem *mem;
    size_t max_string_len, max_frames, max_labels, n_types;
    size_t third;     /* max_string_len / 3: longer strings may fill max_string_len */
    size_t max_bytes; /* of `buf` (SIZE_MAX unless set after init) */
    uint8_t *buf;
    size_t len, cap;
    ppk__rec *frames; /* max_frames */
    size_t n_frames;
    size_t omitted;   /* frames past max_frames: n pushed - (max_frames - 1), or 0 */
    ppk__rec *labels; /* max_labels */
    size_t n_labels;
    int64_t values[PPK_MAX_SAMPLE_TYPES];
    int64_t timestamp_ns;
    ppk__fit_counts fit; /* string repairs in this sample */
} ppk__sbuf;

/* Limits as in ppk_profile_config. 0 or PPK_ENOMEM. */
int ppk__sbuf_init(ppk__sbuf *sb, ppk__mem *mem, size_t max_string_len, size_t max_frames,
                   size_t max_labels, size_t n_types);
void ppk__sbuf_destroy(ppk__sbuf *sb);
/* Empties the sample; keeps at most keep_bytes of record buffer. */
void ppk__sbuf_clear(ppk__sbuf *sb, size_t keep_bytes);

/* 0, PPK_ENULL, PPK_ENOMEM. */
int ppk__sbuf_push_frame(ppk__sbuf *sb, const ppk_frame *f);
/* ppk__sbuf_push_simple_frame() for every case (below: the common one, inline). */
int ppk__sbuf_push_simple_slow(ppk__sbuf *sb, ppk_str name, ppk_str filename,
                               uint64_t address, int64_t line);

/* Copies n bytes and tells whether they were all ASCII (then they are valid UTF-8 and
 * need no repair): 16 bytes at a time, the last 16 overlapping what was copied. */
static inline int ppk__copy_ascii(uint8_t *dst, const char *src, size_t n) {
#if defined(__SSE2__)
    if (n >= 16) {
        __m128i acc = _mm_setzero_si128(), v;
        for (size_t i = 0; i + 16 < n; i += 16) {
            v = _mm_loadu_si128((const __m128i *)(const void *)(src + i));
            _mm_storeu_si128((__m128i *)(void *)(dst + i), v);
            acc = _mm_or_si128(acc, v);
        }
        v = _mm_loadu_si128((const __m128i *)(const void *)(src + n - 16));
        _mm_storeu_si128((__m128i *)(void *)(dst + n - 16), v);
        return _mm_movemask_epi8(_mm_or_si128(acc, v)) == 0;
    }
#endif
    uint64_t acc = 0, w;
    if (n >= 8) {
        for (size_t i = 0; i + 8 < n; i += 8) {
            memcpy(&w, src + i, 8);
            memcpy(dst + i, &w, 8);
            acc |= w;
        }
        memcpy(&w, src + n - 8, 8);
        memcpy(dst + n - 8, &w, 8);
        acc |= w;
    } else {
        for (size_t i = 0; i < n; i++) {
            dst[i] = (uint8_t)src[i];
            acc |= (uint8_t)src[i];
        }
    }
    return !(acc & 0x8080808080808080ull);
}

/* A frame with only a name, a filename, an address and a line: 0, PPK_ENULL,
 * PPK_ENOMEM. Inline for the common case (ASCII strings within the limits, room in the
 * buffer); anything else goes to ppk__sbuf_push_simple_slow(). */
static inline int ppk__sbuf_push_simple_frame(ppk__sbuf *sb, ppk_str name, ppk_str filename,
                                              uint64_t address, int64_t line) {
    size_t off = (sb->len + 7) & ~(size_t)7;
    size_t n = sizeof(ppk__frec) + name.len + filename.len;
    if (name.ptr && filename.ptr && sb->n_frames < sb->max_frames && !sb->omitted &&
        name.len <= sb->max_string_len && filename.len <= sb->max_string_len &&
        off <= sb->cap && n <= sb->cap - off) {
        /* Zero padding: 8 bytes from the end of the last record, within this one. */
        memset(sb->buf + sb->len, 0, 8);
        uint8_t *rec = sb->buf + off, *p = rec + sizeof(ppk__frec);
        if (ppk__copy_ascii(p, name.ptr, name.len) &
            ppk__copy_ascii(p + name.len, filename.ptr, filename.len)) {
            ppk__frec h;
            h.name_len = (uint32_t)name.len;
            h.filename_len = (uint32_t)filename.len;
            h.line = line;
            h.address = address;
            memcpy(rec, &h, sizeof h);
            ppk__rec *r = &sb->frames[sb->n_frames++];
            r->off = off;
            r->len = n;
            sb->len = off + n;
            return 0;
        }
    }
    return ppk__sbuf_push_simple_slow(sb, name, filename, address, line);
}
int ppk__sbuf_push_id_slow(ppk__sbuf *sb, uint64_t id, uint64_t address, int64_t line);

/* The size of the record of a frame by function id (record.h). */
static inline size_t ppk__id_rec_bytes(uint64_t address, int64_t line) {
    return !address && line >= 0 && line <= (int64_t)UINT32_MAX ? sizeof(ppk__idrec)
                                                                 : PPK__FREC_ID_BYTES;
}

/* Writes that record at rec (ppk__id_rec_bytes(address, line) bytes). */
static inline void ppk__put_id_rec(uint8_t *rec, uint64_t id, uint64_t address, int64_t line) {
    if (ppk__id_rec_bytes(address, line) == sizeof(ppk__idrec)) {
        ppk__idrec r = {PPK__FREC_ID16, (uint32_t)line, id};
        memcpy(rec, &r, sizeof r);
    } else {
        ppk__frec h = {PPK__FREC_ID, 0, line, address};
        memcpy(rec, &h, sizeof h);
        memcpy(rec + sizeof h, &id, sizeof id);
    }
}

/* A frame by function id (checked by the caller): 0 or PPK_ENOMEM. Inline for the
 * common case, like ppk__sbuf_push_simple_frame(). */
static inline int ppk__sbuf_push_id(ppk__sbuf *sb, uint64_t id, uint64_t address,
                                    int64_t line) {
    size_t off = (sb->len + 7) & ~(size_t)7, n = ppk__id_rec_bytes(address, line);
    if (sb->n_frames < sb->max_frames && !sb->omitted && off <= sb->cap &&
        n <= sb->cap - off) {
        memset(sb->buf + sb->len, 0, 8); /* padding, as above */
        ppk__put_id_rec(sb->buf + off, id, address, line);
        ppk__rec *r = &sb->frames[sb->n_frames++];
        r->off = off;
        r->len = n;
        sb->len = off + n;
        return 0;
    }
    return ppk__sbuf_push_id_slow(sb, id, address, line);
}

/* Where n 16-byte records by id (ppk__idrec, written by the caller) go at the end of
 * the sample, if they fit in the buffer and within max_frames (none omitted so far);
 * else NULL: ppk__sbuf_push_ids() then. Nothing changes until ppk__sbuf_id16_commit(). */
static inline uint8_t *ppk__sbuf_id16_room(ppk__sbuf *sb, size_t n) {
    size_t off = (sb->len + 7) & ~(size_t)7;
    if (!n || sb->omitted || n > sb->max_frames - sb->n_frames || off > sb->cap ||
        n > (sb->cap - off) / sizeof(ppk__idrec))
        return NULL;
    memset(sb->buf + sb->len, 0, 8); /* padding, as ppk__sbuf_push_id() */
    return sb->buf + off;
}

/* Makes the n records written where ppk__sbuf_id16_room() said, their places written in
 * sb->frames from sb->n_frames on, the sample's frames. */
static inline void ppk__sbuf_id16_commit(ppk__sbuf *sb, size_t n) {
    sb->len = ((sb->len + 7) & ~(size_t)7) + n * sizeof(ppk__idrec);
    sb->n_frames += n;
}

/* n frames, root side of those pushed, counted as omitted (ppk_sample_omit_frames). */
void ppk__sbuf_omit(ppk__sbuf *sb, uint64_t n);

/* n frames by function id (checked by the caller), as n ppk__sbuf_push_id() calls: 0,
 * or PPK_ENOMEM with the sample as it was. */
int ppk__sbuf_push_ids(ppk__sbuf *sb, const ppk_id_frame *frames, size_t n);

/* 0, PPK_ENULL, PPK_EEMPTYKEY, PPK_ERESERVED, PPK_ESPANID, PPK_EDUPLABEL, PPK_ETOOMANY,
 * PPK_ENOMEM. */
int ppk__sbuf_push_label(ppk__sbuf *sb, const ppk_label *l);
/* A label record that ppk__sbuf_push_label() made (in a builder with the same
 * max_string_len), `len` bytes with its hash, and the repairs made then: 0,
 * PPK_EDUPLABEL, PPK_ETOOMANY, PPK_ENOMEM. */
int ppk__sbuf_push_label_rec(ppk__sbuf *sb, const uint8_t *rec, size_t len, uint64_t hash,
                             ppk__fit_counts fit);

/* Once the sample is complete: the sample as records, for a window (record.h), its
 * stack_hash computed here, outside any lock. *out is valid until the next change. */
void ppk__sbuf_seal(const ppk__sbuf *sb, ppk__recs *out);

#endif
