/*
 * sbuf.c - a sample being built, as hashed records: see sbuf.h.
 */
#include "sbuf.h"

#include <string.h>

#include "dict.h"
#include "utf8.h"

/* libxxhash's XXH3 with run-time dispatch to AVX2/AVX-512 (the inline one in dict.c is
 * built for baseline x86-64, SSE2): the same hash, several times faster on a stack of
 * a few KB. */
#define XXH_DISPATCH_DISABLE_REPLACE
#include <xxh_x86dispatch.h>

static const char END_TS_KEY[] = "end_timestamp_ns";
static const char SPAN_KEY[] = "local root span id";

int ppk__sbuf_init(ppk__sbuf *sb, ppk__mem *mem, size_t max_string_len, size_t max_frames,
                   size_t max_labels, size_t n_types) {
    memset(sb, 0, sizeof *sb);
    sb->mem = mem;
    sb->max_string_len = max_string_len;
    sb->third = max_string_len / 3;
    sb->max_frames = max_frames;
    sb->max_labels = max_labels;
    sb->n_types = n_types;
    sb->max_bytes = SIZE_MAX;
    sb->frames = ppk__mem_alloc_array(mem, sb->max_frames, sizeof *sb->frames);
    sb->labels = ppk__mem_alloc_array(mem, sb->max_labels, sizeof *sb->labels);
    if (!sb->frames || !sb->labels) {
        ppk__sbuf_destroy(sb);
        return PPK_ENOMEM;
    }
    return 0;
}

void ppk__sbuf_destroy(ppk__sbuf *sb) {
    if (!sb->mem) return;
    ppk__mem_free(sb->mem, sb->frames, sb->max_frames * sizeof *sb->frames);
    ppk__mem_free(sb->mem, sb->labels, sb->max_labels * sizeof *sb->labels);
    ppk__mem_free(sb->mem, sb->buf, sb->cap);
    sb->frames = sb->labels = NULL;
    sb->buf = NULL;
    sb->cap = sb->len = 0;
}

void ppk__sbuf_clear(ppk__sbuf *sb, size_t keep_bytes) {
    sb->len = 0;
    sb->n_frames = sb->n_labels = sb->omitted = 0;
    memset(sb->values, 0, sb->n_types * sizeof *sb->values); /* the rest stay 0 */
    sb->timestamp_ns = 0;
    sb->fit = (ppk__fit_counts){0, 0};
    if (sb->cap > keep_bytes) {
        ppk__mem_free(sb->mem, sb->buf, sb->cap);
        sb->buf = NULL;
        sb->cap = 0;
    }
}

static int str_ok(ppk_str s) { return s.ptr != NULL || s.len == 0; }

/* reserve(): the record would pass max_bytes. */
#define FULL 1

/* Bytes a string may take once fitted: a repair can triple it, the cut bounds it. */
static size_t bound(const ppk__sbuf *sb, ppk_str s) {
    return s.len > sb->third ? sb->max_string_len : 3 * s.len;
}

/* Makes room for a record of up to n bytes at an 8-aligned offset, returned in *off,
 * and zeroes the padding before it. */
static int reserve(ppk__sbuf *sb, size_t n, size_t *off) {
    size_t start = (sb->len + 7) & ~(size_t)7;
    if (n > SIZE_MAX / 4 - start) return PPK_ENOMEM;
    if (start + n > sb->cap) {
        if (start + n > sb->max_bytes) return FULL;
        size_t cap = sb->cap ? sb->cap : 1024;
        while (cap < start + n) cap *= 2;
        if (cap > sb->max_bytes) cap = sb->max_bytes;
        uint8_t *b = ppk__mem_resize(sb->mem, sb->buf, sb->cap, sb->len, cap, 1);
        if (!b) return PPK_ENOMEM;
        sb->buf = b;
        sb->cap = cap;
    }
    if (start > sb->len) memset(sb->buf + sb->len, 0, start - sb->len);
    *off = start;
    return 0;
}

/* Copies s to dst (room for max_string_len bytes), fitted for pprof (utf8.h); returns
 * the length written. */
static uint32_t put(ppk__sbuf *sb, uint8_t *dst, ppk_str s) {
    size_t n = s.len;
    const uint8_t *f = ppk__utf8_fit((const uint8_t *)s.ptr, &n, sb->max_string_len, dst, &sb->fit);
    if (f != dst && n) memcpy(dst, f, n);
    return (uint32_t)n;
}

/* Appends the frame record of `len` bytes at `off`. */
static void commit_frame(ppk__sbuf *sb, size_t off, size_t len) {
    ppk__rec *r = &sb->frames[sb->n_frames++];
    r->off = off;
    r->len = len;
    sb->len = off + len;
}

/* Frames past the limit: the leaf-most max_frames - 1 frames stay, the rest are counted
 * and become one "<N frames omitted>" frame at flush. Returns 1 if the frame is one. */
static int over_limit(ppk__sbuf *sb) {
    if (!sb->omitted && sb->n_frames < sb->max_frames) return 0;
    if (!sb->omitted) {
        sb->n_frames--;
        sb->omitted = 1;
    }
    sb->omitted++;
    return 1;
}

void ppk__sbuf_omit(ppk__sbuf *sb, uint64_t n) {
    if (!n) return;
    /* As n frames past the limit (over_limit): at the limit, the last frame pushed
     * makes room for the "<N frames omitted>" one and is counted in it. */
    if (!sb->omitted && sb->n_frames == sb->max_frames) {
        sb->n_frames--;
        sb->omitted = 1;
    }
    sb->omitted = n > SIZE_MAX - sb->omitted ? SIZE_MAX : sb->omitted + (size_t)n;
}

/* A frame that does not fit in max_bytes is omitted like one past max_frames: it and
 * the ones after it become the "<N frames omitted>" frame. */
static int scratch_full(ppk__sbuf *sb) {
    sb->omitted++;
    return 0;
}

int ppk__sbuf_push_simple_slow(ppk__sbuf *sb, ppk_str name, ppk_str filename,
                               uint64_t address, int64_t line) {
    if (!str_ok(name) || !str_ok(filename)) return PPK_ENULL;
    if (over_limit(sb)) return 0;
    size_t off;
    int rc = reserve(sb, sizeof(ppk__frec) + bound(sb, name) + bound(sb, filename), &off);
    if (rc) return rc == FULL ? scratch_full(sb) : rc;
    uint8_t *rec = sb->buf + off, *p = rec + sizeof(ppk__frec);
    ppk__frec h;
    h.line = line;
    h.address = address;
    h.name_len = put(sb, p, name);
    h.filename_len = put(sb, p + h.name_len, filename);
    memcpy(rec, &h, sizeof h);
    commit_frame(sb, off, sizeof h + h.name_len + h.filename_len);
    return 0;
}

int ppk__sbuf_push_id_slow(ppk__sbuf *sb, uint64_t id, uint64_t address, int64_t line) {
    if (over_limit(sb)) return 0;
    size_t off, n = ppk__id_rec_bytes(address, line);
    int rc = reserve(sb, n, &off);
    if (rc) return rc == FULL ? scratch_full(sb) : rc;
    ppk__put_id_rec(sb->buf + off, id, address, line);
    commit_frame(sb, off, n);
    return 0;
}

int ppk__sbuf_push_ids(ppk__sbuf *sb, const ppk_id_frame *frames, size_t n) {
    size_t room = sb->omitted ? 0 : sb->max_frames - sb->n_frames, off;
    if (n <= room && reserve(sb, n * PPK__FREC_ID_BYTES, &off) == 0) {
        /* Room for all of them: each record where the last one ended (records are
         * multiples of 8 bytes), written without a check. Through locals: a write
         * through the byte buffer could alias the builder's fields. */
        uint8_t *buf = sb->buf;
        ppk__rec *r = sb->frames + sb->n_frames;
        size_t at = off;
        for (size_t i = 0; i < n; i++) {
            size_t len = ppk__id_rec_bytes(0, frames[i].line);
            ppk__put_id_rec(buf + at, frames[i].function, 0, frames[i].line);
            r[i].off = at;
            r[i].len = len;
            at += len;
        }
        sb->n_frames += n;
        sb->len = at;
        return 0;
    }
    /* Past max_frames or max_bytes, or out of memory: one at a time, undone on error. */
    size_t len = sb->len, n_frames = sb->n_frames, omitted = sb->omitted;
    for (size_t i = 0; i < n; i++) {
        if (ppk__sbuf_push_id(sb, frames[i].function, 0, frames[i].line)) {
            sb->len = len;
            sb->n_frames = n_frames;
            sb->omitted = omitted;
            return PPK_ENOMEM;
        }
    }
    return 0;
}

int ppk__sbuf_push_frame(ppk__sbuf *sb, const ppk_frame *f) {
    if (!f) return PPK_EINVAL;
    const ppk_mapping *m = f->mapping;
    if (!m && !f->system_name.len && !f->start_line)
        return ppk__sbuf_push_simple_frame(sb, f->name, f->filename, f->address, f->line);
    if (!str_ok(f->name) || !str_ok(f->system_name) || !str_ok(f->filename) ||
        (m && (!str_ok(m->filename) || !str_ok(m->build_id))))
        return PPK_ENULL;
    if (over_limit(sb)) return 0;
    size_t n = sizeof(ppk__frec) + sizeof(ppk__frec_ext) + bound(sb, f->name) +
               bound(sb, f->system_name) + bound(sb, f->filename);
    if (m) n += sizeof(ppk__mrec) + bound(sb, m->filename) + bound(sb, m->build_id);
    size_t off;
    int rc = reserve(sb, n, &off);
    if (rc) return rc == FULL ? scratch_full(sb) : rc;

    uint8_t *rec = sb->buf + off;
    uint8_t *p = rec + sizeof(ppk__frec) + sizeof(ppk__frec_ext) + (m ? sizeof(ppk__mrec) : 0);
    ppk__frec h;
    ppk__frec_ext x;
    ppk__mrec mr;
    memset(&x, 0, sizeof x);
    memset(&mr, 0, sizeof mr);
    h.name_len = put(sb, p, f->name);
    p += h.name_len;
    h.filename_len = put(sb, p, f->filename);
    p += h.filename_len;
    x.system_name_len = put(sb, p, f->system_name);
    p += x.system_name_len;
    h.name_len |= PPK__FREC_FULL;
    h.line = f->line;
    h.address = f->address;
    x.has_mapping = m != NULL;
    x.start_line = f->start_line;
    if (m) {
        mr.memory_start = m->memory_start;
        mr.memory_limit = m->memory_limit;
        mr.file_offset = m->file_offset;
        mr.filename_len = put(sb, p, m->filename);
        p += mr.filename_len;
        mr.build_id_len = put(sb, p, m->build_id);
        p += mr.build_id_len;
        memcpy(rec + sizeof h + sizeof x, &mr, sizeof mr);
    }
    memcpy(rec, &h, sizeof h);
    memcpy(rec + sizeof h, &x, sizeof x);
    commit_frame(sb, off, (size_t)(p - rec));
    return 0;
}

static int key_is(const uint8_t *k, size_t len, const char *lit, size_t n) {
    return len == n && memcmp(k, lit, n) == 0;
}

/* Whether a label of the sample has the key `key` (len bytes, as stored). Keys of
 * equal length are told apart by their last byte before a call compares them ("thread
 * id" and "task name"). */
static inline int has_key(const ppk__sbuf *sb, const uint8_t *key, size_t len) {
    for (size_t i = 0; i < sb->n_labels; i++) {
        const uint8_t *rec = sb->buf + sb->labels[i].off;
        ppk__lrec o;
        memcpy(&o, rec, sizeof o);
        if (o.key_len == len && (!len || rec[sizeof o + len - 1] == key[len - 1]) &&
            memcmp(rec + sizeof o, key, len) == 0)
            return 1;
    }
    return 0;
}

/* Appends the label record of `len` bytes written at `off`. */
static inline void add_label(ppk__sbuf *sb, size_t off, size_t len, uint64_t hash) {
    ppk__rec *r = &sb->labels[sb->n_labels++];
    r->off = off;
    r->len = len;
    r->hash = hash;
    sb->len = off + len;
}

int ppk__sbuf_push_label(ppk__sbuf *sb, const ppk_label *l) {
    if (!l) return PPK_EINVAL;
    ppk_str value = l->is_num ? l->num_unit : l->str;
    if (!str_ok(l->key) || !str_ok(value)) return PPK_ENULL;
    if (l->key.len == 0) return PPK_EEMPTYKEY;
    /* Reserved keys as given (checked again as stored, below: a cut may make one). */
    const uint8_t *given = (const uint8_t *)l->key.ptr;
    if (key_is(given, l->key.len, END_TS_KEY, sizeof END_TS_KEY - 1)) return PPK_ERESERVED;
    if (key_is(given, l->key.len, SPAN_KEY, sizeof SPAN_KEY - 1) && (!l->is_num || !l->num))
        return PPK_ESPANID;
    if (sb->n_labels == sb->max_labels) return PPK_ETOOMANY;
    ppk__fit_counts fit = sb->fit;
    ppk__lrec h = {0, 0, 0, 0, 0};
    /* The common case first, as for frames: ASCII within the limit, room in the buffer. */
    size_t off = (sb->len + 7) & ~(size_t)7;
    size_t exact = sizeof h + l->key.len + value.len;
    uint8_t *key = sb->buf ? sb->buf + off + sizeof h : NULL;
    if (key && l->key.len <= sb->max_string_len && value.len <= sb->max_string_len &&
        off <= sb->cap && exact <= sb->cap - off &&
        ppk__copy_ascii(key, l->key.ptr, l->key.len) &
            ppk__copy_ascii(key + l->key.len, value.ptr, value.len)) {
        /* Zero padding: 8 bytes from the end of the last record, within this one's
         * header (written below). */
        memset(sb->buf + sb->len, 0, 8);
        h.key_len = (uint32_t)l->key.len;
        h.value_len = (uint32_t)value.len;
    } else {
        if (reserve(sb, sizeof h + bound(sb, l->key) + bound(sb, value), &off))
            return PPK_ENOMEM; /* out of memory, or of the builder's max_bytes */
        key = sb->buf + off + sizeof h;
        h.key_len = put(sb, key, l->key);
        h.value_len = put(sb, key + h.key_len, value);
    }
    uint8_t *rec = sb->buf + off;
    h.is_num = l->is_num != 0;
    h.num = l->is_num ? l->num : 0;
    /* A key at most once per sample, compared as stored (after repair and cut). A key
     * the cut shortened may have become a reserved one (the key as given was checked
     * above; a repair leaves non-ASCII bytes, so never makes one). */
    int rc = 0;
    if (h.key_len < l->key.len) {
        if (key_is(key, h.key_len, END_TS_KEY, sizeof END_TS_KEY - 1))
            rc = PPK_ERESERVED;
        else if (key_is(key, h.key_len, SPAN_KEY, sizeof SPAN_KEY - 1) && (!h.is_num || !h.num))
            rc = PPK_ESPANID;
    }
    if (!rc && has_key(sb, key, h.key_len)) rc = PPK_EDUPLABEL;
    if (rc) {
        sb->fit = fit;
        return rc;
    }
    memcpy(rec, &h, sizeof h);
    size_t len = sizeof h + h.key_len + h.value_len;
    add_label(sb, off, len, ppk__hash(rec, len));
    return 0;
}

int ppk__sbuf_push_label_rec(ppk__sbuf *sb, const uint8_t *rec, size_t len, uint64_t hash,
                             ppk__fit_counts fit) {
    if (sb->n_labels == sb->max_labels) return PPK_ETOOMANY;
    ppk__lrec h;
    memcpy(&h, rec, sizeof h);
    if (has_key(sb, rec + sizeof h, h.key_len)) return PPK_EDUPLABEL;
    size_t off = (sb->len + 7) & ~(size_t)7;
    if (sb->buf && off <= sb->cap && len <= sb->cap - off)
        memset(sb->buf + sb->len, 0, 8); /* padding, as above */
    else if (reserve(sb, len, &off))
        return PPK_ENOMEM;
    memcpy(sb->buf + off, rec, len);
    add_label(sb, off, len, hash);
    sb->fit.repaired += fit.repaired;
    sb->fit.truncated += fit.truncated;
    return 0;
}

void ppk__sbuf_seal(const ppk__sbuf *sb, ppk__recs *out) {
    out->buf = sb->buf;
    out->frames = sb->frames;
    out->n_frames = sb->n_frames;
    out->omitted = sb->omitted;
    out->labels = sb->labels;
    out->n_labels = sb->n_labels;
    out->values = sb->values;
    out->timestamp_ns = sb->timestamp_ns;
    out->fit = sb->fit;
    size_t start = 0, len = 0; /* the frames' span: none without frames */
    if (sb->n_frames) {
        const ppk__rec *last = &sb->frames[sb->n_frames - 1];
        start = sb->frames[0].off;
        len = last->off + last->len - start;
    }
    out->span_len = len;
    out->span_frames_only = 1;
    uint64_t lh = 0;
    for (size_t i = 0; i < sb->n_labels; i++) {
        lh = (lh ^ sb->labels[i].hash) * 0x9E3779B97F4A7C15u + i;
        if (sb->labels[i].off > start && sb->labels[i].off < start + len)
            out->span_frames_only = 0;
    }
    out->labels_hash = lh;
    /* XXH3 uses its vector code only past 240 bytes. */
    out->stack_hash = !len       ? 0
                      : len > 240 ? XXH3_64bits_dispatch(sb->buf + start, len)
                                  : ppk__hash(sb->buf + start, len);
}
