/*
 * fdict.c - the recorder's function dictionary: see fdict.h.
 */
#include "fdict.h"

#include <string.h>

#include "dict.h"
#include "sync.h"
#include "utf8.h"

#define GEN_MAX 0xffffffu

/* A dictionary's tag (16 bits) is one no other live dictionary has: a bit set in
 * g_tags while it is taken. Tags are handed out in turn from g_tag_next, so a freed
 * dictionary's tag comes back only after the 65,535 others were handed out since (its
 * ids are refused by the dictionaries made until then). Atomics only: no lock that a
 * fork could leave taken. */
#define N_TAGS 65536
static _Atomic uint64_t g_tags[N_TAGS / 64];
static atomic_uint g_tag_next;

/* A free tag, now taken; -1 if all are taken. */
static long take_tag(void) {
    unsigned start = atomic_fetch_add(&g_tag_next, 1);
    for (unsigned k = 0; k < N_TAGS; k++) {
        unsigned t = (start + k) % N_TAGS;
        _Atomic uint64_t *w = &g_tags[t / 64];
        uint64_t bit = (uint64_t)1 << (t % 64), old = atomic_load(w);
        while (!(old & bit))
            if (atomic_compare_exchange_weak(w, &old, old | bit)) {
                /* The next search begins after it (unless others moved on meanwhile). */
                unsigned want = start + 1;
                atomic_compare_exchange_strong(&g_tag_next, &want, start + k + 1);
                return (long)t;
            }
    }
    return -1;
}

static void give_tag(uint64_t tag) {
    unsigned t = (unsigned)(tag >> 48);
    atomic_fetch_and(&g_tags[t / 64], ~((uint64_t)1 << (t % 64)));
}

int ppk__fdict_init(ppk__fdict *d, const ppk_allocator *a, size_t max_entries,
                    size_t max_bytes, size_t max_string_len, uint32_t ttl) {
    memset(d, 0, sizeof *d);
    if (max_entries == 0 || max_entries > PPK__FD_MAX_ENTRIES || ttl == 0) return PPK_EINVAL;
    ppk__mem_init(&d->mem, a);
    d->n_chunks = (max_entries + PPK__FD_CHUNK - 1) / PPK__FD_CHUNK;
    d->chunks = ppk__mem_alloc_array(&d->mem, d->n_chunks, sizeof *d->chunks);
    if (!d->chunks) return PPK_ENOMEM;
    for (size_t i = 0; i < d->n_chunks; i++) atomic_init(&d->chunks[i], NULL);
    d->max_entries = max_entries;
    d->max_bytes = max_bytes;
    d->max_string_len = max_string_len;
    d->ttl = ttl;
    atomic_init(&d->epoch, 0);
    long tag = take_tag();
    int rc = tag < 0 ? PPK_ENOMEM : ppk__mutex_init(&d->lock, 1);
    if (rc) {
        if (tag >= 0) give_tag((uint64_t)tag << 48);
        ppk__mem_free(&d->mem, d->chunks, d->n_chunks * sizeof *d->chunks);
        d->chunks = NULL;
        return rc;
    }
    d->tag = (uint64_t)tag << 48;
    return 0;
}

static size_t entry_strs(const ppk__fentry *e) {
    return (size_t)e->name_len + e->system_name_len + e->filename_len;
}

/* An entry's strings take one block, of at least a byte. */
static size_t alloc_size(size_t strs) { return strs ? strs : 1; }

void ppk__fdict_destroy(ppk__fdict *d) {
    if (!d->chunks) return;
    for (size_t c = 0; c < d->n_chunks; c++) {
        ppk__fchunk *chunk = atomic_load(&d->chunks[c]);
        if (!chunk) continue;
        for (size_t i = 0; i < PPK__FD_CHUNK; i++)
            if (PPK__FD_GEN(atomic_load(&chunk->state[i])))
                ppk__mem_free(&d->mem, chunk->e[i].strs, alloc_size(entry_strs(&chunk->e[i])));
        ppk__mem_free(&d->mem, chunk, sizeof *chunk);
    }
    ppk__mem_free(&d->mem, d->chunks, d->n_chunks * sizeof *d->chunks);
    ppk__mem_free(&d->mem, d->index, d->index_cap * sizeof *d->index);
    pthread_mutex_destroy(&d->lock);
    give_tag(d->tag);
    memset(d, 0, sizeof *d);
}

void ppk__fdict_lock(ppk__fdict *d) { pthread_mutex_lock(&d->lock); }
void ppk__fdict_unlock(ppk__fdict *d) { pthread_mutex_unlock(&d->lock); }

/* The chunk of `slot`, which exists (under the lock). */
static ppk__fchunk *chunk_of(ppk__fdict *d, size_t slot) {
    return atomic_load_explicit(&d->chunks[slot / PPK__FD_CHUNK], memory_order_relaxed);
}

/* The entry in `slot`, which exists (under the lock). */
static ppk__fentry *entry(ppk__fdict *d, size_t slot) {
    return &chunk_of(d, slot)->e[slot % PPK__FD_CHUNK];
}

/* The word of `slot`, whose chunk exists (under the lock). */
static _Atomic uint64_t *state_of(ppk__fdict *d, size_t slot) {
    return &chunk_of(d, slot)->state[slot % PPK__FD_CHUNK];
}

/* Whether the entry in `slot` is live (under the lock). */
static int live(ppk__fdict *d, size_t slot) {
    return PPK__FD_GEN(atomic_load_explicit(state_of(d, slot), memory_order_relaxed)) != 0;
}

/* Marks the live entry in `slot` used in the current epoch (under the lock: nothing
 * else frees it meanwhile). */
static void mark_used(ppk__fdict *d, size_t slot) {
    _Atomic uint64_t *st = state_of(d, slot);
    uint32_t epoch = atomic_load_explicit(&d->epoch, memory_order_relaxed);
    uint64_t w = atomic_load_explicit(st, memory_order_relaxed);
    if ((uint32_t)w != epoch) ppk__fdict_mark(st, w, PPK__FD_GEN(w), epoch);
}

/* ---- interning ------------------------------------------------------------------- */

/* A function's strings as they are stored: fitted for pprof. `buf` receives those that
 * need a repair or a cut (room for 3 * max_string_len bytes when given, the repairs then
 * counted in d->fit: under the lock; NULL when the caller only wants to know whether one
 * does). Returns 1 if one needs it. */
static int fit(ppk__fdict *d, const ppk_function *f, ppk_str out[3], char *buf) {
    const ppk_str in[3] = {f->name, f->system_name, f->filename};
    int needs = 0;
    for (int i = 0; i < 3; i++) {
        out[i] = in[i];
        if (!out[i].ptr) out[i].ptr = ""; /* empty (checked by the caller) */
        const uint8_t *s = (const uint8_t *)out[i].ptr;
        if (in[i].len <= d->max_string_len && ppk__utf8_valid(s, in[i].len)) continue;
        needs = 1;
        if (!buf) continue;
        size_t n = in[i].len;
        ppk__utf8_fit(s, &n, d->max_string_len, (uint8_t *)buf, &d->fit);
        out[i] = (ppk_str){buf, n};
        buf += n;
    }
    return needs;
}

/* The strings hashed in a chain, each seeded with the hash so far; a system name only
 * when there is one (most callers give none). */
static uint64_t fn_hash(const ppk_str s[3], int64_t start_line) {
    uint64_t h = ppk__hash_seeded(s[2].ptr, s[2].len, (uint64_t)start_line);
    h = ppk__hash_seeded(s[0].ptr, s[0].len, h);
    return s[1].len ? ppk__hash_seeded(s[1].ptr, s[1].len, h ^ 0x9e3779b97f4a7c15u) : h;
}

static int same(const ppk__fentry *e, const ppk_str s[3], int64_t start_line) {
    return e->start_line == start_line && e->name_len == s[0].len &&
           e->system_name_len == s[1].len && e->filename_len == s[2].len &&
           memcmp(e->strs, s[0].ptr, s[0].len) == 0 &&
           (!s[1].len || memcmp(e->strs + s[0].len, s[1].ptr, s[1].len) == 0) &&
           memcmp(e->strs + s[0].len + s[1].len, s[2].ptr, s[2].len) == 0;
}

/* An index bucket is the entry's slot + 1 (0: empty; TOMB: its entry was evicted, and
 * probes go on past it) and, above, the high half of its hash: a probe compares that
 * before it reads an entry (a cache miss once the dictionary outgrows the cache). */
#define TOMB UINT32_MAX
#define BUCKET(slot, hash) ((uint64_t)(slot) | ((hash) & 0xffffffff00000000u))
#define B_SLOT(b) ((uint32_t)(b))

/* The index bucket holding the entry equal to s, or the empty one where it would go. */
static uint64_t *bucket(ppk__fdict *d, uint64_t hash, const ppk_str s[3], int64_t start_line) {
    size_t mask = d->index_cap - 1;
    uint64_t tag = hash & 0xffffffff00000000u;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint64_t *b = &d->index[i];
        if (!*b) return b;
        if (B_SLOT(*b) == TOMB || (*b & 0xffffffff00000000u) != tag) continue;
        const ppk__fentry *e = entry(d, B_SLOT(*b) - 1);
        if (e->hash == hash && same(e, s, start_line)) return b;
    }
}

/* Rebuilds the index with `cap` buckets (a power of two above 2 * n), without
 * tombstones: 0 or PPK_ENOMEM (the old one stays). */
static int reindex(ppk__fdict *d, size_t cap) {
    uint64_t *fresh = ppk__mem_alloc_array(&d->mem, cap, sizeof *fresh);
    if (!fresh) return PPK_ENOMEM;
    memset(fresh, 0, cap * sizeof *fresh);
    for (size_t slot = 0; slot < d->slots_used; slot++) {
        if (!live(d, slot)) continue;
        const ppk__fentry *e = entry(d, slot);
        size_t i = e->hash & (cap - 1);
        while (fresh[i]) i = (i + 1) & (cap - 1);
        fresh[i] = BUCKET(slot + 1, e->hash);
    }
    ppk__mem_free(&d->mem, d->index, d->index_cap * sizeof *d->index);
    d->index = fresh;
    d->index_cap = cap;
    d->tombs = 0;
    return 0;
}

/* Buckets for n entries: a power of two, at least 256, at least twice n. */
static size_t index_cap_for(size_t n) {
    size_t cap = 256;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* A free slot: a freed one, or the next untouched one (allocating its chunk).
 * Returns slot + 1, or 0 (PPK_ENOMEM). */
static uint32_t take_slot(ppk__fdict *d) {
    if (d->free_head) {
        uint32_t s = d->free_head;
        d->free_head = entry(d, s - 1)->next_free;
        return s;
    }
    if (d->slots_used == d->n_chunks * PPK__FD_CHUNK) return 0;
    size_t c = d->slots_used / PPK__FD_CHUNK;
    if (!atomic_load_explicit(&d->chunks[c], memory_order_relaxed)) {
        ppk__fchunk *chunk = ppk__mem_alloc(&d->mem, sizeof *chunk);
        if (!chunk) return 0;
        memset(chunk, 0, sizeof *chunk);
        for (size_t i = 0; i < PPK__FD_CHUNK; i++) atomic_init(&chunk->state[i], PPK__FD_FREE);
        atomic_store_explicit(&d->chunks[c], chunk, memory_order_release);
    }
    return (uint32_t)++d->slots_used;
}

/* Adds the fitted function s; the lock held. */
static int add_locked(ppk__fdict *d, const ppk_str s[3], int64_t start_line, uint64_t hash,
                      uint64_t *b, ppk_function_id *id) {
    size_t strs = s[0].len + s[1].len + s[2].len;
    if (d->n >= d->max_entries || strs + PPK__FD_ENTRY_BYTES > d->max_bytes - d->bytes) {
        d->refused++;
        return PPK_EFULL;
    }
    if ((d->n + d->tombs + 1) * 2 > d->index_cap) {
        if (reindex(d, index_cap_for(d->n + 1))) return PPK_ENOMEM;
        b = bucket(d, hash, s, start_line);
    }
    char *copy = ppk__mem_alloc(&d->mem, alloc_size(strs));
    if (!copy) return PPK_ENOMEM;
    uint32_t slot = take_slot(d);
    if (!slot) {
        ppk__mem_free(&d->mem, copy, alloc_size(strs));
        return PPK_ENOMEM;
    }
    ppk__fentry *e = entry(d, slot - 1);
    memcpy(copy, s[0].ptr, s[0].len);
    memcpy(copy + s[0].len, s[1].ptr, s[1].len);
    memcpy(copy + s[0].len + s[1].len, s[2].ptr, s[2].len);
    e->strs = copy;
    e->name_len = (uint32_t)s[0].len;
    e->system_name_len = (uint32_t)s[1].len;
    e->filename_len = (uint32_t)s[2].len;
    e->start_line = start_line;
    e->hash = hash;
    e->gen++;
    *id = d->tag | (uint64_t)e->gen << 24 | slot;
    uint32_t epoch = atomic_load_explicit(&d->epoch, memory_order_relaxed);
    atomic_store_explicit(state_of(d, slot - 1), PPK__FD_WORD(e->gen, epoch),
                          memory_order_relaxed);
    *b = BUCKET(slot, hash);
    d->n++;
    d->bytes += strs + PPK__FD_ENTRY_BYTES;
    return 0;
}

int ppk__fdict_intern(ppk__fdict *d, const ppk_function *f, ppk_function_id *id) {
    if (id) *id = 0;
    if (!f || !id) return PPK_EINVAL;
    if ((!f->name.ptr && f->name.len) || (!f->system_name.ptr && f->system_name.len) ||
        (!f->filename.ptr && f->filename.len))
        return PPK_ENULL;
    /* Looked up as given first (hashed outside the lock): an entry's strings are valid
     * UTF-8 within max_string_len, so bytes equal to them need no repair or cut, and a
     * function interned before is found without checking its strings again. */
    ppk_str s[3] = {f->name, f->system_name, f->filename};
    for (int i = 0; i < 3; i++)
        if (!s[i].ptr) s[i].ptr = ""; /* empty (checked above) */
    uint64_t hash = fn_hash(s, f->start_line);
    char *buf = NULL;
    size_t buf_len = 3 * d->max_string_len;
    pthread_mutex_lock(&d->lock);
    uint64_t *b = d->index_cap ? bucket(d, hash, s, f->start_line) : NULL;
    if (!(b && *b) && fit(d, f, s, NULL)) {
        /* New, and a string needs a repair or a cut (into memory of the dictionary's):
         * the fitted function may be known. */
        buf = ppk__mem_alloc(&d->mem, buf_len);
        if (!buf) {
            pthread_mutex_unlock(&d->lock);
            return PPK_ENOMEM;
        }
        fit(d, f, s, buf);
        hash = fn_hash(s, f->start_line);
        b = d->index_cap ? bucket(d, hash, s, f->start_line) : NULL;
    }
    int rc = 0;
    if (b && *b) {
        size_t slot = B_SLOT(*b) - 1;
        *id = d->tag | (uint64_t)entry(d, slot)->gen << 24 | (slot + 1);
        mark_used(d, slot);
    } else {
        rc = add_locked(d, s, f->start_line, hash, b, id);
    }
    if (buf) ppk__mem_free(&d->mem, buf, buf_len);
    pthread_mutex_unlock(&d->lock);
    return rc;
}

/* ---- resolution, eviction, figures ----------------------------------------------- */

int ppk__fdict_get_locked(ppk__fdict *d, ppk_function_id id, ppk_frame *f) {
    ppk__fdict_view v = ppk__fdict_view_of(d);
    _Atomic uint64_t *st = ppk__fdict_word(&v, id);
    uint32_t gen = ppk__fdict_gen(id);
    if (!st || !gen || PPK__FD_GEN(atomic_load_explicit(st, memory_order_relaxed)) != gen)
        return PPK_ESTALE;
    const ppk__fentry *e = entry(d, (size_t)(id & 0xffffff) - 1);
    f->name = (ppk_str){e->strs, e->name_len};
    f->system_name = (ppk_str){e->strs + e->name_len, e->system_name_len};
    f->filename = (ppk_str){e->strs + e->name_len + e->system_name_len, e->filename_len};
    f->start_line = e->start_line;
    return 0;
}

/* Frees the entry in `slot`, whose word was just cleared; the lock held. */
static void evict(ppk__fdict *d, size_t slot) {
    ppk__fentry *e = entry(d, slot);
    size_t mask = d->index_cap - 1;
    size_t i = e->hash & mask;
    while (B_SLOT(d->index[i]) != slot + 1) i = (i + 1) & mask;
    d->index[i] = TOMB;
    d->tombs++;
    ppk__mem_free(&d->mem, e->strs, alloc_size(entry_strs(e)));
    e->strs = NULL;
    d->bytes -= entry_strs(e) + PPK__FD_ENTRY_BYTES;
    d->n--;
    d->evicted++;
    if (e->gen == GEN_MAX) return; /* every id of this slot was given: retired */
    e->next_free = d->free_head;
    d->free_head = (uint32_t)slot + 1;
}

void ppk__fdict_end_epoch(ppk__fdict *d) {
    pthread_mutex_lock(&d->lock);
    uint32_t epoch = atomic_load_explicit(&d->epoch, memory_order_relaxed);
    for (size_t slot = 0; slot < d->slots_used; slot++) {
        _Atomic uint64_t *st = state_of(d, slot);
        uint64_t w = atomic_load_explicit(st, memory_order_relaxed);
        /* Evicted when unused during epochs last use + 1 .. epoch (which ends now),
         * unless a push marks it used meanwhile (the exchange then fails). */
        if (PPK__FD_GEN(w) && epoch - (uint32_t)w >= d->ttl &&
            atomic_compare_exchange_strong_explicit(st, &w, PPK__FD_FREE, memory_order_relaxed,
                                                    memory_order_relaxed))
            evict(d, slot);
    }
    /* 2^32 - 1 is skipped: it is the free word's (PPK__FD_FREE). */
    atomic_store_explicit(&d->epoch, epoch + 1 == UINT32_MAX ? 0 : epoch + 1,
                          memory_order_relaxed);
    /* Without tombstones, and smaller when most entries went (if that fails, the
     * tombstones stay: they cost probes, not correctness). */
    if (d->tombs && index_cap_for(d->n) * 4 <= d->index_cap) reindex(d, index_cap_for(d->n));
    pthread_mutex_unlock(&d->lock);
}

void ppk__fdict_stats(ppk__fdict *d, ppk_recorder_stats *st) {
    pthread_mutex_lock(&d->lock);
    st->functions += d->n;
    st->function_bytes += d->bytes;
    st->functions_evicted += d->evicted;
    st->functions_refused += d->refused;
    st->strings_utf8_repaired += d->fit.repaired;
    st->strings_truncated += d->fit.truncated;
    pthread_mutex_unlock(&d->lock);
}
