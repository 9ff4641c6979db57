/*
 * arena.h - chunked bump allocation for one window.
 *
 * Objects are carved from chunks of chunk_size bytes (a larger request gets a chunk of
 * its own) and are never freed one by one: ppk__arena_reset() drops them all at once.
 * Reset keeps up to keep_bytes of chunk memory on a free list for the next window,
 * because touching fresh pages costs a page fault each (about 10 us on the machines
 * pprofkit is measured on), and returns the rest to the allocator.
 *
 * ppk__arena_mark() and ppk__arena_rollback() undo every allocation made after the mark,
 * so a caller whose work fails halfway leaves the arena as it found it. Single-threaded.
 *
 * Allocations past the memory budget (mem->over_ok, for a window's few overflow records)
 * that the current chunk cannot hold go to a chunk of their own, the "over" chunk, never
 * used by ordinary allocations: otherwise ordinary records would fill a chunk allocated
 * past the budget and the next overflow record would need another one. So a window
 * holds at most one chunk past its budget.
 */
#ifndef PPK_ARENA_H
#define PPK_ARENA_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"

typedef struct ppk__chunk ppk__chunk;

typedef struct ppk__arena {
    ppk__mem *mem;
    size_t chunk_size;  /* default size of a chunk, header included */
    size_t keep_bytes;  /* chunk memory kept by reset */
    ppk__chunk *used;   /* chunks in use, the current one first */
    ppk__chunk *spare;  /* kept chunks, ready for reuse */
    uint8_t *pos, *end; /* free space of the current chunk */
    ppk__chunk *over;   /* chunks taken past the budget, the current one first */
    uint8_t *over_pos, *over_end;
    size_t chunk_bytes; /* bytes of all chunks held (used + spare) */
    size_t spare_bytes; /* of which spare */
    size_t alloc_bytes; /* bytes handed out since the last reset, padding included */
} ppk__arena;

typedef struct ppk__arena_mark {
    ppk__chunk *chunk, *over;
    uint8_t *pos, *over_pos;
    size_t alloc_bytes;
} ppk__arena_mark;

void ppk__arena_init(ppk__arena *a, ppk__mem *mem, size_t chunk_size, size_t keep_bytes);
void ppk__arena_destroy(ppk__arena *a);
/* `n` bytes aligned to `align` (a power of two <= 8); NULL when out of memory. */
void *ppk__arena_alloc(ppk__arena *a, size_t n, size_t align);
void *ppk__arena_dup(ppk__arena *a, const void *src, size_t n, size_t align);
void ppk__arena_reset(ppk__arena *a);
static inline ppk__arena_mark ppk__arena_get_mark(const ppk__arena *a) {
    ppk__arena_mark m = {a->used, a->over, a->pos, a->over_pos, a->alloc_bytes};
    return m;
}
/* Frees (for reuse) everything allocated since `m` was taken. */
void ppk__arena_rollback(ppk__arena *a, ppk__arena_mark m);
/* Checks internal invariants with assert(); for tests and debug builds. */
void ppk__arena_check(const ppk__arena *a);

#endif
