/*
 * arena.c - chunked bump allocation: see arena.h.
 *
 * A chunk is a header followed by its bytes. The current chunk is the head of `used`;
 * when it cannot satisfy a request, a spare chunk large enough is reused, or a new one
 * is allocated. Under AddressSanitizer the free part of each chunk is poisoned, so a
 * read past an object or into a reset window is reported.
 */
#include "arena.h"

#include <assert.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define PPK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PPK_ASAN 1
#endif
#endif

#ifdef PPK_ASAN
#include <sanitizer/asan_interface.h>
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct ppk__chunk {
    ppk__chunk *next;
    size_t size; /* whole chunk, header included */
    /* aligned to 16 bytes so the data that follows is too */
    uint64_t pad_;
    uint64_t pad2_;
};

static uint8_t *chunk_data(ppk__chunk *c) { return (uint8_t *)(c + 1); }
static uint8_t *chunk_end(ppk__chunk *c) { return (uint8_t *)c + c->size; }

void ppk__arena_init(ppk__arena *a, ppk__mem *mem, size_t chunk_size, size_t keep_bytes) {
    memset(a, 0, sizeof *a);
    a->mem = mem;
    if (chunk_size < 4096) chunk_size = 4096;
    a->chunk_size = chunk_size;
    a->keep_bytes = keep_bytes;
}

static void free_list(ppk__arena *a, ppk__chunk *c) {
    while (c) {
        ppk__chunk *next = c->next;
        a->chunk_bytes -= c->size;
        UNPOISON(c, c->size);
        ppk__mem_free(a->mem, c, c->size);
        c = next;
    }
}

void ppk__arena_destroy(ppk__arena *a) {
    if (!a->mem) return;
    free_list(a, a->used);
    free_list(a, a->spare);
    a->used = a->spare = NULL;
    a->pos = a->end = NULL;
    a->spare_bytes = 0;
    assert(a->chunk_bytes == 0);
}

/* Makes a chunk with at least `n` free bytes the current one. */
static int next_chunk(ppk__arena *a, size_t n) {
    ppk__chunk **pp = &a->spare;
    while (*pp && (*pp)->size - sizeof(ppk__chunk) < n) pp = &(*pp)->next;
    ppk__chunk *c = *pp;
    if (c) {
        *pp = c->next;
        a->spare_bytes -= c->size;
    } else {
        size_t size = a->chunk_size;
        if (n > size - sizeof(ppk__chunk)) {
            if (n > SIZE_MAX - sizeof(ppk__chunk)) return PPK_ENOMEM;
            size = n + sizeof(ppk__chunk);
        }
        c = ppk__mem_alloc(a->mem, size);
        if (!c) return PPK_ENOMEM;
        c->size = size;
        a->chunk_bytes += size;
        POISON(chunk_data(c), size - sizeof(ppk__chunk));
    }
    c->next = a->used;
    a->used = c;
    a->pos = chunk_data(c);
    a->end = chunk_end(c);
    return 0;
}

ppk__arena_mark ppk__arena_get_mark(const ppk__arena *a) {
    ppk__arena_mark m = {a->used, a->pos, a->alloc_bytes};
    return m;
}

void ppk__arena_rollback(ppk__arena *a, ppk__arena_mark m) {
    while (a->used != m.chunk) {
        ppk__chunk *c = a->used;
        a->used = c->next;
        POISON(chunk_data(c), c->size - sizeof(ppk__chunk));
        c->next = a->spare;
        a->spare = c;
        a->spare_bytes += c->size;
    }
    a->pos = m.pos;
    a->end = m.chunk ? chunk_end(m.chunk) : NULL;
    if (m.chunk) POISON(m.pos, (size_t)(a->end - m.pos));
    a->alloc_bytes = m.alloc_bytes;
}

void *ppk__arena_alloc(ppk__arena *a, size_t n, size_t align) {
    assert(align && align <= 8 && (align & (align - 1)) == 0);
    if (n > SIZE_MAX / 2) return NULL; /* no such chunk; and n + pad cannot wrap below */
    uintptr_t pos = (uintptr_t)a->pos;
    size_t pad = (size_t)(-pos & (align - 1));
    if (!a->pos || (size_t)(a->end - a->pos) < n + pad) {
        if (next_chunk(a, n + 8) != 0) return NULL;
        pos = (uintptr_t)a->pos;
        pad = (size_t)(-pos & (align - 1));
    }
    uint8_t *p = a->pos + pad;
    a->pos = p + n;
    a->alloc_bytes += n + pad;
    UNPOISON(p, n);
    return p;
}

void *ppk__arena_dup(ppk__arena *a, const void *src, size_t n, size_t align) {
    void *p = ppk__arena_alloc(a, n, align);
    if (p && n) memcpy(p, src, n);
    return p;
}

void ppk__arena_reset(ppk__arena *a) {
    /* Every used chunk goes to the spare list, then the list is trimmed to keep_bytes,
     * keeping standard-size chunks first: they fit any ordinary request. */
    ppk__chunk *c = a->used;
    while (c) {
        ppk__chunk *next = c->next;
        POISON(chunk_data(c), c->size - sizeof(ppk__chunk));
        c->next = a->spare;
        a->spare = c;
        a->spare_bytes += c->size;
        c = next;
    }
    a->used = NULL;
    a->pos = a->end = NULL;
    a->alloc_bytes = 0;

    ppk__chunk *keep = NULL, *drop = NULL;
    size_t kept = 0;
    for (int pass = 0; pass < 2; pass++) {
        ppk__chunk **pp = &a->spare;
        while (*pp) {
            c = *pp;
            int standard = c->size == a->chunk_size;
            if ((pass == 0) != standard) {
                pp = &c->next;
                continue;
            }
            *pp = c->next;
            if (kept + c->size <= a->keep_bytes) {
                kept += c->size;
                c->next = keep;
                keep = c;
            } else {
                c->next = drop;
                drop = c;
            }
        }
    }
    a->spare = keep;
    a->spare_bytes = kept;
    free_list(a, drop);
}

void ppk__arena_check(const ppk__arena *a) {
    size_t total = 0, spare = 0; /* spare may pass keep_bytes after a rollback */
    for (const ppk__chunk *c = a->used; c; c = c->next) total += c->size;
    for (const ppk__chunk *c = a->spare; c; c = c->next) spare += c->size;
    (void)total;
    (void)spare;
    assert(total + spare == a->chunk_bytes);
    assert(spare == a->spare_bytes);
    assert((a->pos == NULL) == (a->used == NULL));
    assert(!a->used || (a->pos >= chunk_data(a->used) && a->pos <= a->end &&
                        a->end == chunk_end(a->used)));
}
