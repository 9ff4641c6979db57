/*
 * alloc.c - the internal allocator: see alloc.h.
 */
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#include "alloc.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PPK_PLAIN_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define PPK_PLAIN_MALLOC 1
#endif
#endif

#define MMAP_MIN ((size_t)128 * 1024)

static void *libc_alloc(void *opaque, size_t size) {
    (void)opaque;
#ifndef PPK_PLAIN_MALLOC
    if (size >= MMAP_MIN) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
#endif
    return malloc(size);
}

static void libc_free(void *opaque, void *ptr, size_t size) {
    (void)opaque;
    (void)size;
#ifndef PPK_PLAIN_MALLOC
    if (size >= MMAP_MIN) {
        munmap(ptr, size);
        return;
    }
#endif
    free(ptr);
}

static void *plain_alloc(void *opaque, size_t size) {
    (void)opaque;
    return malloc(size);
}

static void plain_free(void *opaque, void *ptr, size_t size) {
    (void)opaque;
    (void)size;
    free(ptr);
}

void ppk__transient_allocator(ppk_allocator *out, const ppk_allocator *in) {
    if (in->alloc == libc_alloc) {
        out->alloc = plain_alloc;
        out->free = plain_free;
        out->opaque = NULL;
    } else {
        *out = *in;
    }
}

typedef struct bytes_head {
    ppk_allocator a;
    size_t size; /* of the block, header included */
} bytes_head;

_Static_assert(sizeof(bytes_head) % _Alignof(max_align_t) == 0,
               "the data after the header must be aligned for any type");

uint8_t *ppk__bytes_alloc(const ppk_allocator *a, size_t n) {
    ppk_allocator t;
    ppk__transient_allocator(&t, a);
    if (n > SIZE_MAX - sizeof(bytes_head)) return NULL;
    size_t size = sizeof(bytes_head) + n;
    bytes_head *h = t.alloc(t.opaque, size);
    if (!h) return NULL;
    h->a = t;
    h->size = size;
    return (uint8_t *)(h + 1);
}

void ppk__bytes_release(uint8_t *data) {
    bytes_head *h = (bytes_head *)(void *)data - 1;
    ppk_allocator a = h->a;
    a.free(a.opaque, h, h->size);
}

void ppk__fill_allocator(ppk_allocator *out, const ppk_allocator *in) {
    if (in && in->alloc && in->free) {
        *out = *in;
    } else {
        out->alloc = libc_alloc;
        out->free = libc_free;
        out->opaque = NULL;
    }
}

void ppk__mem_init(ppk__mem *m, const ppk_allocator *a) {
    ppk__fill_allocator(&m->a, a);
    atomic_init(&m->bytes, 0);
    atomic_init(&m->peak, 0);
    m->limit = SIZE_MAX;
    m->over_ok = 0;
    m->limited = 0;
}

void *ppk__mem_alloc(ppk__mem *m, size_t size) {
    if (size == 0) size = 1;
    /* The bytes are counted before the allocator is asked, so that concurrent users
     * cannot pass the limit together; a failure gives them back. */
    size_t now = atomic_load_explicit(&m->bytes, memory_order_relaxed);
    do {
        if (!m->over_ok && (now > m->limit || size > m->limit - now)) {
            m->limited = 1;
            return NULL;
        }
    } while (!atomic_compare_exchange_weak_explicit(&m->bytes, &now, now + size,
                                                    memory_order_relaxed, memory_order_relaxed));
    void *p = m->a.alloc(m->a.opaque, size);
    if (!p) {
        atomic_fetch_sub_explicit(&m->bytes, size, memory_order_relaxed);
        return NULL;
    }
    now += size;
    size_t peak = atomic_load_explicit(&m->peak, memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&m->peak, &peak, now,
                                                                memory_order_relaxed,
                                                                memory_order_relaxed)) {
    }
    return p;
}

void *ppk__mem_alloc_array(ppk__mem *m, size_t n, size_t size) {
    if (size && n > SIZE_MAX / size) return NULL;
    return ppk__mem_alloc(m, n * size);
}

void ppk__mem_free(ppk__mem *m, void *ptr, size_t size) {
    if (!ptr) return;
    if (size == 0) size = 1;
    atomic_fetch_sub_explicit(&m->bytes, size, memory_order_relaxed);
    m->a.free(m->a.opaque, ptr, size);
}

void *ppk__mem_resize(ppk__mem *m, void *ptr, size_t old_cap, size_t used, size_t new_cap,
                      size_t size) {
    void *q = ppk__mem_alloc_array(m, new_cap, size);
    if (!q) return NULL;
    if (ptr) {
        if (used) memcpy(q, ptr, used * size);
        ppk__mem_free(m, ptr, old_cap * size);
    }
    return q;
}

int ppk__grow(ppk__mem *m, void **arr, size_t *cap, size_t used, size_t need, size_t size) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) {
        if (c > SIZE_MAX / 2) return PPK_ENOMEM;
        c *= 2;
    }
    void *q = ppk__mem_resize(m, *arr, *cap, used, c, size);
    if (!q) return PPK_ENOMEM;
    *arr = q;
    *cap = c;
    return 0;
}

void *ppk__mem_new(const ppk_allocator *a, size_t size, size_t mem_off) {
    ppk__mem mem;
    ppk__mem_init(&mem, a);
    uint8_t *obj = ppk__mem_alloc(&mem, size);
    if (!obj) return NULL;
    memset(obj, 0, size);
    memcpy(obj + mem_off, &mem, sizeof mem);
    return obj;
}

static void *mem_alloc_cb(void *m, size_t size) { return ppk__mem_alloc(m, size); }
static void mem_free_cb(void *m, void *ptr, size_t size) { ppk__mem_free(m, ptr, size); }

ppk_allocator ppk__mem_allocator(ppk__mem *m) {
    return (ppk_allocator){mem_alloc_cb, mem_free_cb, m};
}

void ppk__mem_delete(void *obj, size_t size, size_t mem_off) {
    if (!obj) return;
    ppk__mem mem;
    memcpy(&mem, (uint8_t *)obj + mem_off, sizeof mem);
    ppk__mem_free(&mem, obj, size);
    assert(mem.bytes == 0); /* the object's other memory went first */
}
