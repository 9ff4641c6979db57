/*
 * stack_cache.h - a window's cache from a sample's frame records to its stack id, and
 * the same kind of table from its label records to its label set.
 *
 * A sample's frames arrive as records with one hash over all of them (stack_hash,
 * record.h). The cache maps that hash to the stack id and to the frame-record ids
 * (the window's frame_recs dict) the stack was made from; a hit is confirmed by
 * comparing each frame record byte for byte with the cached one, so the hash is only
 * a hint: two stacks that share a hash never get each other's id (the second is simply
 * not cached). A known stack then costs one probe and n compares instead of n lookups.
 * When every frame is a 16-byte record by id laid out back to back (the common case,
 * ppk_sample_push_frames_id), each is compared with the copy that the window keeps of
 * it in a dense array by frame_recs id (ppk__frame_val): one read of 16 bytes a frame
 * from a small array, not a dict entry and then the key it points to.
 *
 * A window keeps a second such table for label sets (labels_hash, record.h): entries
 * of the label_recs ids a set was made from, each confirmed against its label record
 * (ppk__set_cache_match). A known set then costs one probe and n compares, instead of
 * n lookups, a sort and a lookup of the set.
 *
 * Open addressing with linear probing, at most 3/4 full; the entries' ids live in the
 * window's arena, so they go with it at reset. Nothing is ever required to be cached:
 * out of memory or over budget, a stack is just not put in. Single-threaded, like the
 * window.
 */
#ifndef PPK_STACK_CACHE_H
#define PPK_STACK_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "arena.h"
#include "dict.h"
#include "record.h"

/* What a window keeps for each of its frame_recs ids: the location, and the record
 * itself when it is a 16-byte frame by id (zero otherwise, which no such record is). */
typedef struct ppk__frame_val {
    uint64_t id16[2];
    uint32_t loc;
} ppk__frame_val;

typedef struct ppk__stack_slot {
    uint64_t hash;
    const uint32_t *recs; /* [0] n, [1] stack, [2..] n frame_recs ids; NULL: empty */
    uint32_t stack;       /* recs[1], here too: known before the entry is read */
} ppk__stack_slot;

typedef struct ppk__stack_cache {
    ppk__stack_slot *slots;
    uint32_t mask; /* slots - 1; 0 when no slots */
    uint32_t n;    /* stacks cached */
} ppk__stack_cache;

static inline size_t ppk__stack_cache_slots(const ppk__stack_cache *c) {
    return c->slots ? (size_t)c->mask + 1 : 0;
}

/* The slot for `hash`: the one holding it, or the empty one where it would go. */
static inline ppk__stack_slot *ppk__stack_slot_of(ppk__stack_slot *slots, uint32_t mask,
                                                  uint64_t hash) {
    size_t i = hash & mask;
    while (slots[i].recs && slots[i].hash != hash) i = (i + 1) & mask;
    return &slots[i];
}


/* Whether the sample's n frame records are 16-byte records by id, back to back, equal
 * to those of frame_recs ids `ids` (in vals). */
static inline int ppk__id16_run_eq(const ppk__frame_val *vals, const uint32_t *ids,
                                   const uint8_t *run, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!ppk__eq16(run + i * sizeof(ppk__idrec), vals[ids[i]].id16)) return 0;
    return 1;
}

/* Starts fetching the slot where a lookup of `hash` begins (a hint). */
static inline void ppk__stack_cache_prefetch(const ppk__stack_cache *c, uint64_t hash) {
    if (c->slots) __builtin_prefetch(&c->slots[hash & c->mask]);
}

/* The slot of the entry cached under `hash`, or NULL; the entry is not read (see
 * ppk__stack_cache_match), so that the caller may fetch it while doing other work. */
static inline const ppk__stack_slot *ppk__stack_cache_slot(const ppk__stack_cache *c,
                                                           uint64_t hash) {
    if (!c->slots) return NULL;
    const ppk__stack_slot *s = ppk__stack_slot_of(c->slots, c->mask, hash);
    return s->recs ? s : NULL;
}

/* The entry cached under `hash`, or NULL; not read yet. */
static inline const uint32_t *ppk__stack_cache_find(const ppk__stack_cache *c, uint64_t hash) {
    const ppk__stack_slot *s = ppk__stack_cache_slot(c, hash);
    return s ? s->recs : NULL;
}

/* Starts fetching entry `recs` of n ids (a hint). */
static inline void ppk__stack_entry_prefetch(const uint32_t *recs, size_t n) {
    const char *p = (const char *)recs, *end = (const char *)(recs + 2 + n);
    for (; p < end; p += 64) __builtin_prefetch(p);
    __builtin_prefetch(end - 1);
}

/* The stack of sample `r` (with frames) if entry `recs` holds it: every frame record
 * equal to the cached record of the same position in `frame_recs`. Else PPK_DICT_NONE.
 * Inline: it runs at every flush, under the shard's lock. */
static inline uint32_t ppk__stack_cache_match(const uint32_t *recs, const ppk__dict *frame_recs,
                                              const ppk__frame_val *vals, const ppk__recs *r) {
    if (recs[0] != r->n_frames) return PPK_DICT_NONE;
    /* Records are at least 16 bytes, so a run of n in 16n bytes is all 16-byte ones. */
    if (r->span_frames_only && r->span_len == r->n_frames * sizeof(ppk__idrec))
        return ppk__id16_run_eq(vals, recs + 2, r->buf + r->frames[0].off, r->n_frames)
                   ? recs[1]
                   : PPK_DICT_NONE;
    for (size_t i = 0; i < r->n_frames; i++) {
        uint32_t len;
        const uint8_t *rec = ppk__dict_key(frame_recs, recs[2 + i], &len);
        if (len != r->frames[i].len || !ppk__bytes_eq(rec, r->buf + r->frames[i].off, len))
            return PPK_DICT_NONE;
    }
    return recs[1];
}

/* The label set of sample `r` if entry `recs` of a label set cache holds it: every
 * label record equal to the label_recs key of the same position. Else PPK_DICT_NONE. */
static inline uint32_t ppk__set_cache_match(const uint32_t *recs, const ppk__dict *label_recs,
                                            const ppk__recs *r) {
    if (recs[0] != r->n_labels) return PPK_DICT_NONE;
    for (size_t i = 0; i < r->n_labels; i++) {
        uint32_t len;
        const uint8_t *rec = ppk__dict_key(label_recs, recs[2 + i], &len);
        if (len != r->labels[i].len || memcmp(rec, r->buf + r->labels[i].off, len) != 0)
            return PPK_DICT_NONE;
    }
    return recs[1];
}

/* Caches `stack` for the sample with stack_hash `hash` made of frame records `rec_ids`
 * (n of them): 0, or nonzero when it was not cached (no memory, over budget, the hash
 * taken by another stack). */
int ppk__stack_cache_put(ppk__stack_cache *c, ppk__mem *mem, ppk__arena *arena, uint64_t hash,
                         const uint32_t *rec_ids, size_t n, uint32_t stack);

/* Empties the cache (its entries' arena is being reset); keeps the slots unless they
 * are over four times what `used` stacks need. */
void ppk__stack_cache_reset(ppk__stack_cache *c, ppk__mem *mem, size_t used);

void ppk__stack_cache_destroy(ppk__stack_cache *c, ppk__mem *mem);

#endif
