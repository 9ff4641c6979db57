/*
 * fdict.h - the recorder's function dictionary: functions named once, pushed by id.
 *
 * An entry holds a function's strings, fitted for pprof at intern (repaired and cut as
 * the string table would), and its start line. Entries live in chunks of
 * PPK__FD_CHUNK slots, allocated when first needed and kept until the dictionary is
 * freed, so a slot never moves: an id is checked with two atomic loads (its chunk, its
 * slot's word) and no lock (ppk__fdict_check). A chunk keeps what checks read, each
 * slot's live generation and last use, in one 64-bit word a slot (8 KiB a chunk),
 * apart from the entries (48 KiB), so that a check stays in cache when the dictionary
 * no longer does, and is one compare when the id was already used in the current
 * epoch. A check is made by ppk_sample_push_frame_id, and by a window when it first
 * meets a frame by id (insert.c; ppk_sample_push_frames_id leaves its ids to that:
 * a window that has met the frame compares records, and no eviction comes before the
 * window is retired). Everything else takes the dictionary's lock: interning, a window
 * resolving an id it has not seen (ppk__fdict_get_locked), and eviction.
 *
 * An id is tag (16 bits, the dictionary's) | generation (24 bits, the slot's) | slot + 1
 * (24 bits). A slot's word is the generation of its live entry (high half; 0 when
 * free: PPK__FD_FREE) and the epoch of its last use (low half); eviction frees it and
 * reuse takes the next generation; a slot whose generations are used up is not
 * reused. A check marks its use with a compare-and-swap that keeps the generation and
 * only moves the last use forward (a check whose epoch was read before an export does
 * not take back a later one's mark), and eviction frees a slot with one that expects
 * the last use it judged by: neither undoes the other.
 * So an id names at most one function ever: a stale id is refused, never resolved to
 * another function. The tag tells dictionaries apart (a recorder's id given to another):
 * no two live dictionaries have the same, and a freed one's comes back only after the
 * 65,535 others were handed out (fdict.c).
 *
 * Use: a check or an intern stores the current epoch (exports so far) in the slot's
 * last use when it differs; ppk__fdict_end_epoch (at each export, after the windows
 * are swapped) evicts the entries whose last use is ttl epochs old.
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
    /* PPK__FD_WORD(the live entry's generation, the epoch of its last check or intern),
     * or PPK__FD_FREE */
    _Atomic uint64_t state[PPK__FD_CHUNK];
    ppk__fentry e[PPK__FD_CHUNK];
} ppk__fchunk;

#define PPK__FD_WORD(gen, epoch) ((uint64_t)(gen) << 32 | (uint32_t)(epoch))
#define PPK__FD_GEN(word) ((uint32_t)((word) >> 32))
/* A free slot's word: generation 0 and a last use no check expects (a check of an id with
 * generation 0 expects PPK__FD_WORD(0, epoch), and the epoch skips 2^32 - 1). */
#define PPK__FD_FREE ((uint64_t)UINT32_MAX)

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

/* 0, PPK_EINVAL (max_entries 0 or above PPK__FD_MAX_ENTRIES, ttl 0), PPK_ENOMEM (also
 * when 65,536 dictionaries are live), PPK_ESYS. */
int ppk__fdict_init(ppk__fdict *d, const ppk_allocator *a, size_t max_entries,
                    size_t max_bytes, size_t max_string_len, uint32_t ttl);
void ppk__fdict_destroy(ppk__fdict *d);

/* 0, PPK_EINVAL, PPK_ENULL, PPK_EFULL, PPK_ENOMEM; *id is 0 on error. */
int ppk__fdict_intern(ppk__fdict *d, const ppk_function *f, ppk_function_id *id);

/* What a check reads of the dictionary, read once for a run of checks: fields that
 * never change after init, and the current epoch. */
typedef struct ppk__fdict_view {
    uint64_t tag;
    size_t n_chunks;
    _Atomic(ppk__fchunk *) *chunks;
    uint32_t epoch;
} ppk__fdict_view;

static inline ppk__fdict_view ppk__fdict_view_of(ppk__fdict *d) {
    ppk__fdict_view v = {d->tag, d->n_chunks, d->chunks,
                         atomic_load_explicit(&d->epoch, memory_order_relaxed)};
    return v;
}

/* The word of `id`'s slot if its tag is this dictionary's and its slot allocated, else
 * NULL. No lock. */
static inline _Atomic uint64_t *ppk__fdict_word(const ppk__fdict_view *v, ppk_function_id id) {
    if ((id ^ v->tag) >> 48) return NULL;
    size_t slot = (size_t)(id & 0xffffff) - 1; /* slot 0, none, wraps past n_chunks */
    if (slot / PPK__FD_CHUNK >= v->n_chunks) return NULL;
    ppk__fchunk *c = atomic_load_explicit(&v->chunks[slot / PPK__FD_CHUNK], memory_order_acquire);
    return c ? &c->state[slot % PPK__FD_CHUNK] : NULL;
}

/* The generation an id carries. */
static inline uint32_t ppk__fdict_gen(ppk_function_id id) {
    return (uint32_t)(id >> 24) & 0xffffff;
}

/* Marks a slot whose word is `w` used in `epoch`, as long as its generation is `gen`
 * (not 0): 0, or PPK_ESTALE if it is not (or no longer) that generation's. A word
 * marked in `epoch` or a later one is left as it is. */
static inline int ppk__fdict_mark(_Atomic uint64_t *state, uint64_t w, uint32_t gen,
                                  uint32_t epoch) {
    while (gen && PPK__FD_GEN(w) == gen) {
        if ((int32_t)((uint32_t)w - epoch) >= 0) return 0;
        if (atomic_compare_exchange_weak_explicit(state, &w, PPK__FD_WORD(gen, epoch),
                                                  memory_order_relaxed, memory_order_relaxed))
            return 0;
    }
    return PPK_ESTALE;
}

/* 0 if `id` is live, and marks it used in the view's epoch; PPK_ESTALE if not. No
 * lock: an eviction may still come between this and the window's resolution of the
 * id, which then refuses it (ppk__fdict_get_locked). */
static inline int ppk__fdict_check_in(const ppk__fdict_view *v, ppk_function_id id) {
    _Atomic uint64_t *st = ppk__fdict_word(v, id);
    if (!st) return PPK_ESTALE;
    uint64_t w = atomic_load_explicit(st, memory_order_relaxed);
    uint32_t gen = ppk__fdict_gen(id);
    return w == PPK__FD_WORD(gen, v->epoch) ? 0 : ppk__fdict_mark(st, w, gen, v->epoch);
}

static inline int ppk__fdict_check(ppk__fdict *d, ppk_function_id id) {
    ppk__fdict_view v = ppk__fdict_view_of(d);
    return ppk__fdict_check_in(&v, id);
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
