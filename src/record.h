/*
 * record.h - the record format: how a sample travels from its builder to a window.
 *
 * A builder (sbuf.h) serializes each pushed frame and label into one record, in a
 * buffer of its own; a window (insert.c) keys its caches on those records' bytes and
 * decodes a record only the first time it sees it. This file is all that the two
 * share: the layouts, the decoders, and ppk__recs, a complete sample as its records.
 *
 * A frame record is a ppk__frec header, then the name and the filename; a frame with
 * a system name, a start line or a mapping has the PPK__FREC_FULL bit in name_len and
 * a ppk__frec_ext (and a ppk__mrec when mapped) after the header, and its system name,
 * mapping filename and build id after the filename. A label record is a ppk__lrec
 * header, then the key and the value (or the unit). A frame pushed by function id
 * (fdict.h) is 16 bytes whatever the function's strings when it has no address and its
 * line is in 0..2^32-1: a ppk__idrec (kind PPK__FREC_ID16); else a ppk__frec whose
 * name_len is PPK__FREC_ID and filename_len 0, then the 8-byte id (32 bytes). The kinds
 * are name_len values no string has. Records start 8-byte aligned;
 * they are read with memcpy. The padding between records is zero, so that equal
 * records make equal spans of bytes (the stack hash, sbuf.h, is one hash of the span).
 * Kept small: a record is hashed at push and compared at every lookup.
 */
#ifndef PPK_RECORD_H
#define PPK_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include "pprofkit.h"
#include "utf8.h"

#define PPK__FREC_FULL 0x80000000u
/* name_len of a frame record by function id (strings are shorter: max_string_len is
 * at most 2^24). */
#define PPK__FREC_ID 0x40000000u
#define PPK__FREC_ID_BYTES (sizeof(ppk__frec) + sizeof(uint64_t))
#define PPK__FREC_ID16 0x40000001u

/* A frame by function id without an address, its line in 0..UINT32_MAX. */
typedef struct ppk__idrec {
    uint32_t kind; /* PPK__FREC_ID16, where a ppk__frec has name_len */
    uint32_t line;
    uint64_t id;
} ppk__idrec;

typedef struct ppk__frec {
    uint32_t name_len; /* | PPK__FREC_FULL */
    uint32_t filename_len;
    int64_t line;
    uint64_t address;
} ppk__frec;

typedef struct ppk__frec_ext {
    uint32_t system_name_len, has_mapping;
    int64_t start_line;
} ppk__frec_ext;

typedef struct ppk__mrec {
    uint64_t memory_start, memory_limit, file_offset;
    uint32_t filename_len, build_id_len;
} ppk__mrec;

typedef struct ppk__lrec {
    uint32_t key_len, value_len, is_num, pad_;
    int64_t num;
} ppk__lrec;

/* Where a record is in its buffer. */
typedef struct ppk__rec {
    size_t off;
    size_t len;
    uint64_t hash; /* labels only: set at push */
} ppk__rec;

/* A complete sample as records: what a builder hands to a window. Views into the
 * builder's memory, valid until it changes. */
typedef struct ppk__recs {
    const uint8_t *buf;
    const ppk__rec *frames; /* leaf first */
    size_t n_frames;
    size_t omitted;         /* frames cut at max_frames, or 0 */
    const ppk__rec *labels;
    size_t n_labels;
    const int64_t *values;  /* the window's n_types */
    int64_t timestamp_ns;   /* 0: aggregated */
    ppk__fit_counts fit;    /* string repairs made while building */
    /* The hash of the bytes from the first frame record to the end of the last one
     * (label records pushed in between included); 0 without frames. */
    uint64_t stack_hash;
    /* The label records' hashes combined in the order they were pushed; 0 without
     * labels. */
    uint64_t labels_hash;
    size_t span_len;      /* of those bytes; 0 without frames */
    int span_frames_only; /* no label record among them */
} ppk__recs;

/* Decodes a frame record into views of its strings (valid while the record is). A
 * record by function id gives only its line and address, and its id in *id (0 for the
 * others). */
void ppk__record_read_frame(const uint8_t *rec, ppk_frame *f, ppk_mapping *m, uint64_t *id);
/* Decodes a label record likewise. */
void ppk__record_read_label(const uint8_t *rec, ppk_label *l);

#endif
