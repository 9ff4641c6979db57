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
    free_list(a, a->over);
    free_list(a, a->spare);
    a->used = a->over = a->spare = NULL;
    a->pos = a->end = a->over_pos = a->over_end = NULL;
    a->spare_bytes = 0;
    assert(a->chunk_bytes == 0);
}

/* Makes a chunk with at least `n` free bytes the current one of the list `*used`
 * (a->used or a->over), its free space in *pos, *end. */
static int next_chunk(ppk__arena *a, size_t n, ppk__chunk **used, uint8_t **pos,
                      uint8_t **end) {
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
    c->next = *used;
    *used = c;
    *pos = chunk_data(c);
    *end = chunk_end(c);
    return 0;
}

/* Moves the chunks of `*used` down to `upto` to the spare list. */
static void unuse(ppk__arena *a, ppk__chunk **used, const ppk__chunk *upto) {
    while (*used != upto) {
        ppk__chunk *c = *used;
        *used = c->next;
        POISON(chunk_data(c), c->size - sizeof(ppk__chunk));
        c->next = a->spare;
        a->spare = c;
        a->spare_bytes += c->size;
    }
}

void ppk__arena_rollback(ppk__arena *a, ppk__arena_mark m) {
    unuse(a, &a->used, m.chunk);
    a->pos = m.pos;
    a->end = m.chunk ? chunk_end(m.chunk) : NULL;
    if (m.chunk) POISON(m.pos, (size_t)(a->end - m.pos));
    unuse(a, &a->over, m.over);
    a->over_pos = m.over_pos;
    a->over_end = m.over ? chunk_end(m.over) : NULL;
    if (m.over) POISON(m.over_pos, (size_t)(a->over_end - m.over_pos));
    a->alloc_bytes = m.alloc_bytes;
}

/* n bytes aligned to `align` from the free space *pos..end, or NULL if they do not fit. */
static uint8_t *carve(uint8_t **pos, const uint8_t *end, size_t n, size_t align) {
    if (!*pos) return NULL;
    size_t pad = (size_t)(-(uintptr_t)*pos & (align - 1));
    if ((size_t)(end - *pos) < n || (size_t)(end - *pos) - n < pad) return NULL;
    uint8_t *p = *pos + pad;
    *pos = p + n;
    return p;
}

void *ppk__arena_alloc(ppk__arena *a, size_t n, size_t align) {
    assert(align && align <= 8 && (align & (align - 1)) == 0);
    if (n > SIZE_MAX / 2) return NULL; /* no such chunk; and n + pad cannot wrap below */
    uint8_t *start = a->pos;
    uint8_t *p = carve(&a->pos, a->end, n, align);
    if (!p) {
        ppk__mem *m = a->mem;
        int over_ok = m->over_ok;
        /* A new chunk within the budget first, even past it (over_ok). */
        m->over_ok = 0;
        int rc = next_chunk(a, n + 8, &a->used, &a->pos, &a->end);
        m->over_ok = over_ok;
        if (rc == 0) {
            start = a->pos;
            p = carve(&a->pos, a->end, n, align);
        } else if (over_ok && m->limited) {
            m->limited = 0;
            start = a->over_pos;
            p = carve(&a->over_pos, a->over_end, n, align);
            if (!p && next_chunk(a, n + 8, &a->over, &a->over_pos, &a->over_end) == 0) {
                start = a->over_pos;
                p = carve(&a->over_pos, a->over_end, n, align);
            }
        }
        if (!p) return NULL;
    }
    a->alloc_bytes += (size_t)(p + n - start);
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
     * keeping standard-size chunks first: they fit any ordinary request. Spare chunks
     * are taken without asking the budget, so no more are kept than it holds beside
     * what the rest of the window holds: a window that took a chunk past the budget
     * would otherwise start past it, and take one more. */
    unuse(a, &a->used, NULL);
    unuse(a, &a->over, NULL);
    a->pos = a->end = a->over_pos = a->over_end = NULL;
    a->alloc_bytes = 0;
    size_t others = a->mem->bytes - a->chunk_bytes;
    size_t room = a->mem->limit > others ? a->mem->limit - others : 0;
    size_t keep_bytes = room < a->keep_bytes ? room : a->keep_bytes;
    ppk__chunk *c;

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
            if (kept + c->size <= keep_bytes) {
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
    for (const ppk__chunk *c = a->over; c; c = c->next) total += c->size;
    for (const ppk__chunk *c = a->spare; c; c = c->next) spare += c->size;
    (void)total;
    (void)spare;
    assert(total + spare == a->chunk_bytes);
    assert(spare == a->spare_bytes);
    assert((a->pos == NULL) == (a->used == NULL));
    assert(!a->used || (a->pos >= chunk_data(a->used) && a->pos <= a->end &&
                        a->end == chunk_end(a->used)));
    assert((a->over_pos == NULL) == (a->over == NULL));
    assert(!a->over || (a->over_pos >= chunk_data(a->over) && a->over_pos <= a->over_end &&
                        a->over_end == chunk_end(a->over)));
}
