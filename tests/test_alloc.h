/*
 * test_alloc.h - an allocator for tests: it counts allocations and the bytes held, and
 * can fail the Nth allocation (or, sticky, every one from the Nth on).
 *
 *   test_alloc t = {.fail_at = 3};
 *   cfg.allocator = test_allocator(&t);   ...   CHECK(t.outstanding == 0);
 */
#ifndef PPK_TEST_ALLOC_H
#define PPK_TEST_ALLOC_H

#include <stdlib.h>

#include "pprofkit.h"

typedef struct test_alloc {
    long count;            /* allocations asked for so far */
    long fail_at;          /* 0: never fail */
    int sticky;            /* fail every allocation from fail_at on */
    long failures;         /* allocations refused */
    long long outstanding; /* bytes allocated and not freed */
} test_alloc;

static inline void *test_alloc_alloc(void *opaque, size_t size) {
    test_alloc *t = opaque;
    t->count++;
    if (t->fail_at && (t->count == t->fail_at || (t->sticky && t->count > t->fail_at))) {
        t->failures++;
        return NULL;
    }
    void *p = malloc(size);
    if (p) t->outstanding += (long long)size;
    return p;
}

static inline void test_alloc_free(void *opaque, void *ptr, size_t size) {
    ((test_alloc *)opaque)->outstanding -= (long long)size;
    free(ptr);
}

static inline ppk_allocator test_allocator(test_alloc *t) {
    return (ppk_allocator){test_alloc_alloc, test_alloc_free, t};
}

#endif
