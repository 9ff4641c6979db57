/*
 * sbuf.h - a sample being built: its frames and labels as hashed records.
 *
 * Between start and flush a sample lives here, in memory of its own: each pushed frame
 * or label is validated, its strings copied (repaired and cut to max_string_len as the
 * string table would), and serialized into one record whose 64-bit hash is computed
 * right away, outside any lock. At flush the window looks each record up by that hash
 * (profile.c); only records it has never seen are decoded and interned field by field.
 * Nothing here points into a window, and nothing in a window points here (G2).
 *
 * A frame record is a ppk__frec header, a ppk__mrec when the frame has a mapping, then
 * the strings (name, system name, filename, mapping filename, build id) back to back. A
 * label record is a ppk__lrec header, then the key and the value (or the unit).
 * Records start 8-byte aligned in `buf`; they are read with memcpy.
 *
 * One thread at a time. A failed push leaves the buffer as it was.
 */
#ifndef PPK_SBUF_H
#define PPK_SBUF_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "pprofkit.h"

typedef struct ppk__frec {
    uint32_t name_len, system_name_len, filename_len, has_mapping;
    int64_t start_line;
    int64_t line;
    uint64_t address;
} ppk__frec;

typedef struct ppk__mrec {
    uint64_t memory_start, memory_limit, file_offset;
    uint32_t filename_len, build_id_len;
} ppk__mrec;

typedef struct ppk__lrec {
    uint32_t key_len, value_len, is_num, pad_;
    int64_t num;
} ppk__lrec;

typedef struct ppk__rec {
    size_t off; /* in buf */
    size_t len;
    uint64_t hash;
} ppk__rec;

typedef struct ppk__sbuf {
    ppk__mem *mem;
    size_t max_string_len, max_frames, max_labels, n_types;
    uint8_t *buf;
    size_t len, cap;
    ppk__rec *frames; /* max_frames */
    size_t n_frames;
    size_t omitted;   /* frames past max_frames: n pushed - (max_frames - 1), or 0 */
    ppk__rec *labels; /* max_labels */
    size_t n_labels;
    int64_t values[PPK_MAX_SAMPLE_TYPES];
    int64_t timestamp_ns;
    uint64_t utf8_repaired, truncated; /* string repairs in this sample */
} ppk__sbuf;

/* Limits as in ppk_profile_config. 0 or PPK_ENOMEM. */
int ppk__sbuf_init(ppk__sbuf *sb, ppk__mem *mem, size_t max_string_len, size_t max_frames,
                   size_t max_labels, size_t n_types);
void ppk__sbuf_destroy(ppk__sbuf *sb);
/* Empties the sample; keeps at most keep_bytes of record buffer. */
void ppk__sbuf_clear(ppk__sbuf *sb, size_t keep_bytes);
/* Bytes the buffer holds from its ppk__mem. */
size_t ppk__sbuf_bytes(const ppk__sbuf *sb);

/* 0, PPK_ENULL, PPK_ENOMEM. */
int ppk__sbuf_push_frame(ppk__sbuf *sb, const ppk_frame *f);
/* 0, PPK_ENULL, PPK_EEMPTYKEY, PPK_ERESERVED, PPK_ESPANID, PPK_EDUPLABEL, PPK_ETOOMANY,
 * PPK_ENOMEM. */
int ppk__sbuf_push_label(ppk__sbuf *sb, const ppk_label *l);

/* Decodes a frame record into views of its strings (valid while the record is). */
void ppk__sbuf_read_frame(const uint8_t *rec, ppk_frame *f, ppk_mapping *m);
/* Decodes a label record likewise. */
void ppk__sbuf_read_label(const uint8_t *rec, ppk_label *l);

#endif
