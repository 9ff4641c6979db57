/*
 * alloc.h - the one internal allocator, with exact accounting.
 *
 * Every byte a profile allocates goes through a ppk__mem: it wraps the user's
 * ppk_allocator (or the default one), checks sizes for overflow and counts the bytes
 * held now and at the peak. Frees pass the size back, so the count is exact. A limit
 * turns the count into a budget: an allocation that would pass it fails, and `limited`
 * tells the caller that the budget, not the system, said no (see profile.c for what it
 * does then).
 *
 * The byte counts are atomic, so one ppk__mem may serve several threads at once: an
 * upload sink's is used by the exporting thread (queueing a copy) and by its uploader
 * thread (building a request). The budget (`limit`, `over_ok`, `limited`) is for a
 * ppk__mem with one owner at a time, a window's: only that owner sets them.
 *
 * The default allocator takes blocks of 128 KiB and more (arena chunks, big tables)
 * straight from mmap, so that freeing them returns them to the operating system at once
 * (malloc may keep them); smaller ones come from malloc. Sanitizer builds use malloc
 * for everything, so every block is checked.
 */
#ifndef PPK_ALLOC_H
#define PPK_ALLOC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pprofkit.h"

typedef struct ppk__mem {
    ppk_allocator a; /* always filled: the defaults replace a NULL alloc */
    _Atomic size_t bytes; /* held now */
    _Atomic size_t peak;  /* most ever held */
    size_t limit;    /* an allocation that would pass it is refused (SIZE_MAX: none) */
    int over_ok;     /* while set, the limit is not enforced */
    int limited;     /* set when an allocation is refused for the limit, not the allocator */
} ppk__mem;

void ppk__mem_init(ppk__mem *m, const ppk_allocator *a);
void *ppk__mem_alloc(ppk__mem *m, size_t size);
/* n * size bytes, NULL on overflow or failure; not zeroed. */
void *ppk__mem_alloc_array(ppk__mem *m, size_t n, size_t size);
void ppk__mem_free(ppk__mem *m, void *ptr, size_t size);
/* Replaces an array of old_cap elements, of which `used` are in use, by one of new_cap
 * (>= used) elements holding a copy of them. On failure returns NULL and leaves the old
 * array alone. */
void *ppk__mem_resize(ppk__mem *m, void *ptr, size_t old_cap, size_t used, size_t new_cap,
                      size_t size);
/* Makes the array *arr (of *cap elements of `size` bytes, `used` of them in use) hold at
 * least `need` elements, doubling. 0 or PPK_ENOMEM (the array is then unchanged). */
int ppk__grow(ppk__mem *m, void **arr, size_t *cap, size_t used, size_t need, size_t size);

/* For short-lived blocks handed over every export (the encoded output): the default
 * allocator's blocks come from malloc, which keeps freed blocks for the next export
 * instead of faulting fresh pages in each time; a user's allocator is used as it is.
 * `in` is a filled allocator (see ppk__fill_allocator). */
void ppk__transient_allocator(ppk_allocator *out, const ppk_allocator *in);

/* The memory of a ppk_bytes: a block of `n` bytes from `a`'s transient form, after a
 * header that keeps how to free it (ppk_bytes holds only data and len). The data is
 * aligned for any type. NULL on failure. */
uint8_t *ppk__bytes_alloc(const ppk_allocator *a, size_t n);
/* Frees what ppk__bytes_alloc returned. */
void ppk__bytes_release(uint8_t *data);

/* An object that owns its ppk__mem, the object itself counted in it: `size` zeroed
 * bytes from allocator `a` (NULL: the default), with a ppk__mem over `a` moved into the
 * object at offset mem_off. NULL when out of memory. Freed with ppk__mem_delete. */
void *ppk__mem_new(const ppk_allocator *a, size_t size, size_t mem_off);
/* Frees an object made by ppk__mem_new (its other memory already freed). Accepts NULL. */
void ppk__mem_delete(void *obj, size_t size, size_t mem_off);
#define PPK_MEM_NEW(a, type, field) ((type *)ppk__mem_new((a), sizeof(type), offsetof(type, field)))
#define PPK_MEM_DELETE(obj, type, field) ppk__mem_delete((obj), sizeof(type), offsetof(type, field))

/* `m` as a ppk_allocator, for the functions that take one (the reader and the OTLP
 * encoder on an uploader's thread): what they allocate is counted in `m`. */
ppk_allocator ppk__mem_allocator(ppk__mem *m);

/* The default allocator's functions, for the callers that need a ppk_allocator. */
void ppk__fill_allocator(ppk_allocator *out, const ppk_allocator *in);

#endif
