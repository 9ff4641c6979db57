/*
 * dict.h - byte keys to dense ids, in insertion order.
 *
 * A ppk__dict interns byte strings: the first key gets id 0, the next new key id 1, and
 * so on; interning a known key returns its id and changes nothing. It stores strings and
 * also fixed-size records (a function, a location, a stack of location ids): anything
 * compared byte for byte.
 *
 * Layout: `ents` holds each key's pointer (into the arena; keys of up to 8 bytes are
 * kept in the entry instead), length and the low half of its 64-bit XXH3 hash, indexed
 * by id; `slots` is an open-addressing table (linear
 * probing, at most 7/8 full) of (high half of the hash << 32 | id + 1), 0 meaning empty.
 * A lookup compares the stored hash halves and the length before any byte compare, so
 * most mismatches never touch the key bytes. 7/8 rather than 3/4: the slots are a
 * third of a big window's bytes (a doubling at 3/4 leaves them 38% full), and a probe
 * past a 32-bit tag mismatch reads only the next 8 bytes of the same cache line.
 *
 * ppk__dict_truncate() forgets the keys added after a given count, so a caller whose
 * work fails halfway can undo its inserts (with an arena rollback for their bytes).
 * Single-threaded; keys live until ppk__dict_clear() (or the arena's reset).
 */
#ifndef PPK_DICT_H
#define PPK_DICT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "alloc.h"
#include "arena.h"

/* Keys of up to this many bytes are kept in the entry itself, zero-padded: no arena
 * copy, and a lookup compares them without reading the arena. */
#define PPK_DICT_INLINE 8

typedef struct ppk__dent {
    union {
        const uint8_t *ptr;         /* len > PPK_DICT_INLINE */
        uint64_t word;              /* len <= PPK_DICT_INLINE: the bytes */
        uint8_t bytes[PPK_DICT_INLINE];
    } key;
    uint32_t len;
    uint32_t hash_lo;
} ppk__dent;

typedef struct ppk__dict {
    ppk__mem *mem;
    ppk__arena *arena;
    ppk__dent *ents;
    uint64_t *slots;
    uint32_t n;        /* keys */
    uint32_t cap;      /* entries allocated */
    uint32_t mask;     /* slots - 1; 0 when no slots */
    size_t key_bytes;  /* sum of key lengths */
} ppk__dict;

#define PPK_DICT_NONE UINT32_MAX
#define PPK_DICT_HEADROOM 4

void ppk__dict_init(ppk__dict *d, ppk__mem *mem, ppk__arena *arena);
void ppk__dict_destroy(ppk__dict *d);
/* Forgets every key (their bytes are the arena's to reset); keeps the tables. */
void ppk__dict_clear(ppk__dict *d);
/* Clears, and gives back tables over four times what the keys needed (a burst). */
void ppk__dict_shrink(ppk__dict *d);
/* Room for `extra` more keys without allocating. 0 or PPK_ENOMEM. */
int ppk__dict_reserve(ppk__dict *d, size_t extra);
/* Forgets the keys with ids >= n (their bytes stay in the arena). Rare: O(n). */
void ppk__dict_truncate(ppk__dict *d, uint32_t n);
uint64_t ppk__hash(const void *key, size_t len);
/* The same hash with a seed: to chain a key of several parts. */
uint64_t ppk__hash_seeded(const void *key, size_t len, uint64_t seed);
/* `hash` arguments below must be ppk__hash(key, len): truncate recomputes it. */
/* The id of a key, or PPK_DICT_NONE. */
uint32_t ppk__dict_find(const ppk__dict *d, const void *key, size_t len, uint64_t hash);
/* The id of a key, inserting it when new (*is_new tells which; is_new may be NULL). A new
 * key is copied into the arena, aligned to `align` (1..8); align 0 stores the pointer
 * itself, for keys that outlive the dict. PPK_DICT_NONE when out of memory. */
uint32_t ppk__dict_intern(ppk__dict *d, const void *key, size_t len, uint64_t hash,
                          size_t align, int *is_new);
/* Bytes held by the tables (not the keys, which are in the arena). */
size_t ppk__dict_table_bytes(const ppk__dict *d);

/* The bytes of key `id`. A key of up to PPK_DICT_INLINE bytes is in the entry: the
 * pointer is valid until the next insert into this dict (which may move the entries). */
static inline const uint8_t *ppk__dict_key(const ppk__dict *d, uint32_t id, uint32_t *len) {
    const ppk__dent *e = &d->ents[id];
    *len = e->len;
    return e->len <= PPK_DICT_INLINE ? e->key.bytes : e->key.ptr;
}

/* Whether the 16 bytes at a and b are equal (two 8-byte words: a frame by id's record,
 * a numeric label). */
static inline int ppk__eq16(const void *a, const void *b) {
    uint64_t x[2], y[2];
    memcpy(x, a, sizeof x);
    memcpy(y, b, sizeof y);
    return ((x[0] ^ y[0]) | (x[1] ^ y[1])) == 0;
}

/* Whether the len bytes at a and b are equal; 16 of them compared inline. */
static inline int ppk__bytes_eq(const void *a, const void *b, size_t len) {
    return len == 16 ? ppk__eq16(a, b) : memcmp(a, b, len) == 0;
}

/* For a caller that keeps its own copy of each key by id and compares with it: the
 * ids whose stored hash matches `hash` in its high half, in probe order. *i starts at
 * ppk__dict_slot(d, hash); each call gives the next id, or PPK_DICT_NONE at the end.
 * The key must have been looked for with this hash (ppk__hash). */
static inline uint32_t ppk__dict_slot(const ppk__dict *d, uint64_t hash) {
    return (uint32_t)hash & d->mask;
}

static inline uint32_t ppk__dict_next_id(const ppk__dict *d, uint64_t hash, uint32_t *i) {
    uint64_t tag = hash & 0xffffffff00000000ull;
    for (uint64_t s; (s = d->slots[*i]) != 0;) {
        *i = (*i + 1) & d->mask;
        if ((s & 0xffffffff00000000ull) == tag) return (uint32_t)s - 1;
    }
    return PPK_DICT_NONE;
}

/* Starts fetching the slot where a lookup of `hash` begins (a hint; no effect on the
 * dict). */
static inline void ppk__dict_prefetch(const ppk__dict *d, uint64_t hash) {
    if (d->slots) __builtin_prefetch(&d->slots[(uint32_t)hash & d->mask]);
}

#endif
