/*
 * fdict.h - the recorder's function dictionary: functions named once, pushed by id.
 *
 * An entry holds a function's strings, fitted for pprof at intern (repaired and cut as
 * the string table would), and its start line. Entries live in chunks of
 * PPK__FD_CHUNK slots, allocated when first needed and kept until the dictionary is
 * freed, so a slot never moves: a push checks its id with two atomic loads and no lock
 * (ppk__fdict_check). A chunk keeps what pushes read, each slot's live generation and
 * last use, in two arrays of its own (8 KiB), apart from the entries (56 KiB), so that
 * a push's check stays in cache when the dictionary no longer does. Everything else takes the dictionary's lock: interning, a window
 * resolving an id it has not seen (ppk__fdict_get_locked), and eviction.
 *
 * An id is tag (16 bits, the dictionary's) | generation (24 bits, the slot's) | slot + 1
 * (24 bits). A slot's `live` is the generation of its live entry, 0 when free; eviction
 * frees it and reuse takes the next generation; a slot whose generations are used up is
 * not reused.
 * So an id names at most one function ever: a stale id is refused, never resolved to
 * another function. The tag tells dictionaries apart (a recorder's id given to another).
 *
 * Use: a push or an intern stores the current epoch (exports so far) in the entry's
 * last_used when it differs; ppk__fdict_end_epoch (at each export) evicts the entries
 * whose last use is ttl epochs old.
 *
 * Bounds: at most max_entries live entries and max_bytes of entry bytes (strings plus
 * PPK__FD_ENTRY_BYTES each); slots (56 bytes, allocated 1,024 at a time) and the index
 * (up to 32 bytes an entry) add up to ~88 bytes per slot ever used. Past a bound,
 * interning a new function is refused (PPK_EFULL).
 */
#ifndef PPK_FDICT_H
#define PPK_FDICT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "utf8.h"
#include "pprofkit.h"

#define PPK__FD_CHUNK 1024
#define PPK__FD_MAX_ENTRIES ((size_t)0xffffff)
/* What an entry costs besides its strings, as the bound counts it. */
#define PPK__FD_ENTRY_BYTES 64

typedef struct ppk__fentry {
    uint32_t gen;                /* generation of the slot's current or last entry */
    uint32_t next_free;          /* slot + 1 of the next free slot (free slots only) */
    uint32_t name_len, system_name_len, filename_len;
    int64_t start_line;
    char *strs;                  /* name, system name, filename */
    uint64_t hash;
} ppk__fentry;

typedef struct ppk__fchunk {
    _Atomic uint32_t live[PPK__FD_CHUNK];      /* the live entry's generation; 0: free */
    _Atomic uint32_t last_used[PPK__FD_CHUNK]; /* epoch of its last push or intern */
    ppk__fentry e[PPK__FD_CHUNK];
} ppk__fchunk;

typedef struct ppk__fdict {
    pthread_mutex_t lock;
    ppk__mem mem;                     /* under the lock */
    _Atomic(ppk__fchunk *) *chunks;   /* max_entries / PPK__FD_CHUNK, rounded up */
    size_t n_chunks;                  /* of `chunks` */
    size_t max_entries, max_bytes, max_string_len;
    uint32_t ttl;
    uint64_t tag;                     /* already shifted into place */
    _Atomic uint32_t epoch;
    uint32_t free_head;               /* slot + 1, or 0 */
    size_t slots_used;                /* slots ever handed out: the rest are untouched */
    size_t n, bytes;                  /* live entries, their bytes */
    uint64_t *index;                  /* slot + 1 by hash, linear probing (fdict.c) */
    size_t index_cap;                 /* a power of two, or 0 */
    size_t tombs;                     /* buckets of evicted entries (fdict.c) */
    uint64_t evicted, refused;
    ppk__fit_counts fit;              /* repairs of the strings interned */
} ppk__fdict;

/* 0, PPK_EINVAL (max_entries 0 or above PPK__FD_MAX_ENTRIES, ttl 0), PPK_ENOMEM,
 * PPK_ESYS. */
int ppk__fdict_init(ppk__fdict *d, const ppk_allocator *a, size_t max_entries,
                    size_t max_bytes, size_t max_string_len, uint32_t ttl);
void ppk__fdict_destroy(ppk__fdict *d);

/* 0, PPK_EINVAL, PPK_ENULL, PPK_EFULL, PPK_ENOMEM; *id is 0 on error. */
int ppk__fdict_intern(ppk__fdict *d, const ppk_function *f, ppk_function_id *id);

/* The chunk of `id` if its tag is this dictionary's and its slot allocated, else NULL;
 * *i its index in the chunk. No lock. */
static inline ppk__fchunk *ppk__fdict_chunk(ppk__fdict *d, ppk_function_id id, size_t *i) {
    if ((id & 0xffff000000000000u) != d->tag) return NULL;
    size_t slot = (size_t)(id & 0xffffff);
    if (slot == 0 || --slot / PPK__FD_CHUNK >= d->n_chunks) return NULL;
    *i = slot % PPK__FD_CHUNK;
    return atomic_load_explicit(&d->chunks[slot / PPK__FD_CHUNK], memory_order_acquire);
}

/* The generation an id carries. */
static inline uint32_t ppk__fdict_gen(ppk_function_id id) {
    return (uint32_t)(id >> 24) & 0xffffff;
}

/* 0 if `id` is live, and marks it used in this epoch; PPK_ESTALE if not. No lock: an
 * eviction may still come between this and the window's resolution of the id, which
 * then refuses it (ppk__fdict_get_locked). */
static inline int ppk__fdict_check_at(ppk__fdict *d, ppk_function_id id, uint32_t epoch) {
    size_t i;
    ppk__fchunk *c = ppk__fdict_chunk(d, id, &i);
    uint32_t gen = ppk__fdict_gen(id); /* 0 is no generation: a free slot's */
    if (!c || !gen || atomic_load_explicit(&c->live[i], memory_order_relaxed) != gen)
        return PPK_ESTALE;
    /* Written only when it changes: the line is read by every pushing thread. */
    if (atomic_load_explicit(&c->last_used[i], memory_order_relaxed) != epoch)
        atomic_store_explicit(&c->last_used[i], epoch, memory_order_relaxed);
    return 0;
}

/* The epoch that pushes mark their ids with. */
static inline uint32_t ppk__fdict_epoch(ppk__fdict *d) {
    return atomic_load_explicit(&d->epoch, memory_order_relaxed);
}

static inline int ppk__fdict_check(ppk__fdict *d, ppk_function_id id) {
    return ppk__fdict_check_at(d, id, ppk__fdict_epoch(d));
}

void ppk__fdict_lock(ppk__fdict *d);
void ppk__fdict_unlock(ppk__fdict *d);
/* With the lock held: the function of `id` into f's name, system_name, filename and
 * start_line (views valid while the lock is held), or PPK_ESTALE. */
int ppk__fdict_get_locked(ppk__fdict *d, ppk_function_id id, ppk_frame *f);

/* Ends the current epoch (an export): evicts what was not used for ttl epochs. */
void ppk__fdict_end_epoch(ppk__fdict *d);

/* Adds the dictionary's figures to `st` (functions ... functions_refused). */
void ppk__fdict_stats(ppk__fdict *d, ppk_recorder_stats *st);

#endif
