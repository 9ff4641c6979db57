/*
 * dict.c - byte keys to dense ids: see dict.h.
 */
#include "dict.h"

#include <assert.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t ppk__hash(const void *key, size_t len) { return XXH3_64bits(key, len); }

uint64_t ppk__hash_seeded(const void *key, size_t len, uint64_t seed) {
    return XXH3_64bits_withSeed(key, len, seed);
}

void ppk__dict_init(ppk__dict *d, ppk__mem *mem, ppk__arena *arena) {
    memset(d, 0, sizeof *d);
    d->mem = mem;
    d->arena = arena;
}

static size_t slot_count(const ppk__dict *d) { return d->slots ? (size_t)d->mask + 1 : 0; }

/* Whether n keys overfill `slots` slots: the table is kept at most 7/8 full. */
static int overfull(size_t n, size_t slots) { return n * 8 > slots * 7; }

size_t ppk__dict_table_bytes(const ppk__dict *d) {
    return (size_t)d->cap * sizeof(ppk__dent) + slot_count(d) * sizeof(uint64_t);
}

void ppk__dict_destroy(ppk__dict *d) {
    ppk__mem_free(d->mem, d->ents, (size_t)d->cap * sizeof(ppk__dent));
    ppk__mem_free(d->mem, d->slots, slot_count(d) * sizeof(uint64_t));
    d->ents = NULL;
    d->slots = NULL;
    d->n = d->cap = d->mask = 0;
    d->key_bytes = 0;
}

void ppk__dict_clear(ppk__dict *d) {
    if (d->slots) memset(d->slots, 0, slot_count(d) * sizeof(uint64_t));
    d->n = 0;
    d->key_bytes = 0;
}

static void place(uint64_t *slots, uint32_t mask, uint32_t hash_lo, uint64_t slot) {
    uint32_t i = hash_lo & mask;
    while (slots[i]) i = (i + 1) & mask;
    slots[i] = slot;
}

int ppk__dict_reserve(ppk__dict *d, size_t extra) {
    if (extra > (size_t)(UINT32_MAX / 2) - d->n) return PPK_ENOMEM;
    size_t need = (size_t)d->n + extra;
    if (need > d->cap) {
        size_t cap = d->cap ? (size_t)d->cap * 2 : 16;
        while (cap < need) cap *= 2;
        ppk__dent *e = ppk__mem_resize(d->mem, d->ents, d->cap, d->n, cap, sizeof(ppk__dent));
        if (!e) return PPK_ENOMEM;
        d->ents = e;
        d->cap = (uint32_t)cap;
    }
    size_t nslots = slot_count(d);
    if (overfull(need, nslots)) {
        size_t ns = nslots ? nslots * 2 : 32;
        while (overfull(need, ns)) ns *= 2;
        uint64_t *s = ppk__mem_alloc_array(d->mem, ns, sizeof(uint64_t));
        if (!s) return PPK_ENOMEM;
        memset(s, 0, ns * sizeof(uint64_t));
        uint32_t mask = (uint32_t)(ns - 1);
        for (size_t i = 0; i < nslots; i++) {
            if (d->slots[i]) {
                uint32_t id = (uint32_t)d->slots[i] - 1;
                place(s, mask, d->ents[id].hash_lo, d->slots[i]);
            }
        }
        ppk__mem_free(d->mem, d->slots, nslots * sizeof(uint64_t));
        d->slots = s;
        d->mask = mask;
    }
    return 0;
}

/* The slot holding the key, or the empty slot where it would go. */
/* A key of up to PPK_DICT_INLINE bytes as the entry holds it. */
static uint64_t inline_word(const void *key, size_t len) {
    uint64_t w = 0;
    if (len == sizeof w) /* the samples' keys: a copy without a call */
        memcpy(&w, key, sizeof w);
    else if (len)
        memcpy(&w, key, len);
    return w;
}

static uint32_t probe(const ppk__dict *d, const void *key, size_t len, uint64_t hash) {
    uint32_t lo = (uint32_t)hash;
    uint64_t tag = hash & 0xffffffff00000000ull;
    uint32_t i = lo & d->mask;
    int small = len <= PPK_DICT_INLINE;
    uint64_t word = small ? inline_word(key, len) : 0;
    for (;;) {
        uint64_t s = d->slots[i];
        if (!s) return i;
        if ((s & 0xffffffff00000000ull) == tag) {
            const ppk__dent *e = &d->ents[(uint32_t)s - 1];
            if (e->len == len && e->hash_lo == lo &&
                (small ? e->key.word == word : ppk__bytes_eq(e->key.ptr, key, len)))
                return i;
        }
        i = (i + 1) & d->mask;
    }
}

uint32_t ppk__dict_find(const ppk__dict *d, const void *key, size_t len, uint64_t hash) {
    if (!d->slots) return PPK_DICT_NONE;
    uint64_t s = d->slots[probe(d, key, len, hash)];
    return s ? (uint32_t)s - 1 : PPK_DICT_NONE;
}

uint32_t ppk__dict_intern(ppk__dict *d, const void *key, size_t len, uint64_t hash,
                          size_t align, int *is_new) {
    assert(len <= UINT32_MAX);
    uint32_t i = 0;
    if (d->slots) {
        i = probe(d, key, len, hash);
        if (d->slots[i]) {
            if (is_new) *is_new = 0;
            return (uint32_t)d->slots[i] - 1;
        }
    }
    /* A new key: make room first (a known key never allocates), then find its slot in
     * the possibly regrown table. */
    /* Growth keeps PPK_DICT_HEADROOM entries spare, which inserts made past the memory
     * budget (over_ok: the few overflow records of a window) then use without growing
     * a table, since doubling a big one would pass the budget by far. */
    size_t headroom = d->mem->over_ok ? 0 : PPK_DICT_HEADROOM;
    size_t need = (size_t)d->n + 1 + headroom;
    if (need > d->cap || overfull(need, slot_count(d))) {
        if (ppk__dict_reserve(d, 1 + headroom) != 0) return PPK_DICT_NONE;
        i = probe(d, key, len, hash);
    }
    /* A short key is kept in the entry; a longer one is copied into the arena (or, with
     * align 0, its pointer kept). */
    ppk__dent e;
    if (len <= PPK_DICT_INLINE) {
        e.key.word = inline_word(key, len);
    } else if (align) {
        e.key.ptr = ppk__arena_dup(d->arena, key, len, align);
        if (!e.key.ptr) return PPK_DICT_NONE;
    } else {
        e.key.ptr = key;
    }
    uint32_t id = d->n++;
    d->ents[id].key = e.key;
    d->ents[id].len = (uint32_t)len;
    d->ents[id].hash_lo = (uint32_t)hash;
    d->slots[i] = (hash & 0xffffffff00000000ull) | (uint64_t)(id + 1);
    d->key_bytes += len;
    if (is_new) *is_new = 1;
    return id;
}

void ppk__dict_truncate(ppk__dict *d, uint32_t n) {
    if (n >= d->n) return;
    /* Rebuild the slots from the surviving keys: simple, and only failures come here. */
    memset(d->slots, 0, slot_count(d) * sizeof(uint64_t));
    d->n = n;
    d->key_bytes = 0;
    for (uint32_t id = 0; id < n; id++) {
        const ppk__dent *e = &d->ents[id];
        uint32_t len;
        const uint8_t *key = ppk__dict_key(d, id, &len);
        uint64_t h = ppk__hash(key, len);
        place(d->slots, d->mask, e->hash_lo, (h & 0xffffffff00000000ull) | (uint64_t)(id + 1));
        d->key_bytes += e->len;
    }
}

void ppk__dict_shrink(ppk__dict *d) {
    size_t want = d->n < 8 ? 16 : 2 * (size_t)d->n;
    if (d->cap > 2 * want) {
        ppk__dent *e = ppk__mem_alloc_array(d->mem, want, sizeof *e);
        if (e) {
            ppk__mem_free(d->mem, d->ents, (size_t)d->cap * sizeof *e);
            d->ents = e;
            d->cap = (uint32_t)want;
        }
    }
    size_t ns = 32;
    while (overfull(want, ns)) ns *= 2;
    if (slot_count(d) > 2 * ns) {
        uint64_t *sl = ppk__mem_alloc_array(d->mem, ns, sizeof *sl);
        if (sl) {
            ppk__mem_free(d->mem, d->slots, slot_count(d) * sizeof *sl);
            d->slots = sl;
            d->mask = (uint32_t)(ns - 1);
        }
    }
    ppk__dict_clear(d);
}
