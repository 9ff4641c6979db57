/*
 * test_arena.c - the chunked bump allocator (src/arena.h).
 *
 * Every case runs on a counting allocator that records each live block with its size,
 * checks that frees pass back the size that was allocated, and refuses absurd sizes (so
 * a huge request fails cleanly instead of reaching malloc). Each case ends with
 * ppk__arena_destroy() and checks that nothing is outstanding.
 *
 * Memory is checked through a->chunk_bytes / a->spare_bytes and the ppk__mem byte
 * counter; ppk__arena_check() asserts the internal invariants (it is active in Debug
 * builds, where assert() is on).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena.h"
#include "check.h"

/* ---- counting allocator ------------------------------------------------------------ */

typedef struct counting {
    long live;         /* blocks not yet freed */
    long allocs;       /* allocations ever */
    size_t bytes;      /* bytes not yet freed */
    long size_errors;  /* frees whose size differs from the allocation's */
} counting;

/* A block is preceded by a 16-byte header holding its size. */
static void *c_alloc(void *opaque, size_t size) {
    counting *c = opaque;
    if (size > ((size_t)1 << 32)) return NULL; /* no test needs 4 GiB: refuse */
    uint8_t *p = malloc(size + 16);
    if (!p) return NULL;
    memcpy(p, &size, sizeof size);
    c->live++;
    c->allocs++;
    c->bytes += size;
    return p + 16;
}

static void c_free(void *opaque, void *ptr, size_t size) {
    counting *c = opaque;
    if (!ptr) return;
    uint8_t *p = (uint8_t *)ptr - 16;
    size_t was;
    memcpy(&was, p, sizeof was);
    if (was != size) c->size_errors++;
    c->live--;
    c->bytes -= was;
    free(p);
}

typedef struct env {
    counting cnt;
    ppk__mem mem;
    ppk__arena a;
} env;

static void env_init(env *e, size_t chunk_size, size_t keep_bytes) {
    memset(&e->cnt, 0, sizeof e->cnt);
    ppk_allocator al = {c_alloc, c_free, &e->cnt};
    ppk__mem_init(&e->mem, &al);
    ppk__arena_init(&e->a, &e->mem, chunk_size, keep_bytes);
}

/* Destroys the arena and checks that everything went back to the allocator. */
static void env_done(env *e) {
    ppk__arena_destroy(&e->a);
    CHECK_EQ_U64(e->mem.bytes, 0);
    CHECK_EQ_U64(e->a.chunk_bytes, 0);
    CHECK_EQ_U64(e->a.spare_bytes, 0);
    CHECK_EQ_INT(e->cnt.live, 0);
    CHECK_EQ_U64(e->cnt.bytes, 0);
    CHECK_EQ_INT(e->cnt.size_errors, 0);
}

/* Chunk bytes held by the used list, computed from the two counters. */
static size_t used_bytes(const ppk__arena *a) { return a->chunk_bytes - a->spare_bytes; }

/* ---- cases -------------------------------------------------------------------------- */

typedef struct block {
    uint8_t *p;
    size_t n;
    uint8_t fill;
} block;

/* Allocations of every alignment and many sizes are aligned, and none overlaps another:
 * each is filled with its own byte, then all are verified. */
static void test_alignment_and_no_overlap(void) {
    env e;
    env_init(&e, 4096, 0);
    enum { N = 3000 };
    static block b[N];
    static const size_t aligns[4] = {1, 2, 4, 8};
    uint32_t x = 12345;
    int misaligned = 0, nulls = 0;
    for (int i = 0; i < N; i++) {
        x = x * 1103515245u + 12345u;
        size_t n = 1 + (x >> 16) % 61; /* 1..61 bytes: odd sizes misalign the next */
        size_t al = aligns[i % 4];
        uint8_t *p = ppk__arena_alloc(&e.a, n, al);
        if (!p) {
            nulls++;
            b[i].p = NULL;
            continue;
        }
        if ((uintptr_t)p % al != 0) misaligned++;
        b[i].p = p;
        b[i].n = n;
        b[i].fill = (uint8_t)(i * 7 + 1);
        memset(p, b[i].fill, n);
    }
    CHECK_EQ_INT(nulls, 0);
    CHECK_EQ_INT(misaligned, 0);
    int corrupted = 0;
    for (int i = 0; i < N; i++) {
        if (!b[i].p) continue;
        for (size_t k = 0; k < b[i].n; k++)
            if (b[i].p[k] != b[i].fill) {
                corrupted++;
                break;
            }
    }
    CHECK_EQ_INT(corrupted, 0);
    /* Several chunks were needed, and all the memory held is the arena's chunks. */
    CHECK(e.a.chunk_bytes > 4096);
    CHECK_EQ_U64(e.mem.bytes, e.a.chunk_bytes);
    CHECK(e.a.alloc_bytes >= 3000);
    ppk__arena_check(&e.a);
    env_done(&e);
}

/* Each alignment after a 1-byte allocation: the padding is exactly what the alignment
 * needs, and alloc_bytes counts it. */
static void test_padding_is_minimal(void) {
    static const size_t aligns[4] = {1, 2, 4, 8};
    for (int i = 0; i < 4; i++) {
        env e;
        env_init(&e, 4096, 0);
        uint8_t *first = ppk__arena_alloc(&e.a, 1, 8);
        CHECK(first != NULL);
        CHECK_EQ_U64((uintptr_t)first % 8, 0);
        uint8_t *p = ppk__arena_alloc(&e.a, 3, aligns[i]);
        CHECK(p != NULL);
        /* first is 8-aligned, so the next free byte is first + 1. */
        uint8_t *want = first + aligns[i];
        if (aligns[i] == 1) want = first + 1;
        CHECK(p == want);
        CHECK_EQ_U64(e.a.alloc_bytes, 1 + (size_t)(want - (first + 1)) + 3);
        ppk__arena_check(&e.a);
        env_done(&e);
    }
}

/* ppk__arena_dup copies, at the requested alignment. */
static void test_dup(void) {
    env e;
    env_init(&e, 4096, 0);
    ppk__arena_alloc(&e.a, 1, 1);
    const char src[] = "hello, arena";
    char *d = ppk__arena_dup(&e.a, src, sizeof src, 8);
    CHECK(d != NULL);
    CHECK(d != src);
    CHECK_EQ_U64((uintptr_t)d % 8, 0);
    CHECK_MEM(d, src, sizeof src);
    env_done(&e);
}

/* A request larger than a chunk gets a chunk of its own, which works; ordinary requests
 * keep being served. */
static void test_large_request(void) {
    env e;
    env_init(&e, 4096, 0);
    uint8_t *small1 = ppk__arena_alloc(&e.a, 100, 8);
    CHECK(small1 != NULL);
    memset(small1, 0x11, 100);
    size_t before = e.a.chunk_bytes;
    CHECK_EQ_U64(before, 4096);

    size_t big = 3 * 4096 + 5;
    uint8_t *p = ppk__arena_alloc(&e.a, big, 8);
    CHECK(p != NULL);
    if (p) {
        CHECK_EQ_U64((uintptr_t)p % 8, 0);
        memset(p, 0xAB, big);
        CHECK(p[0] == 0xAB && p[big - 1] == 0xAB);
    }
    /* The new chunk holds at least the request, and not wildly more. */
    size_t grown = e.a.chunk_bytes - before;
    CHECK(grown >= big);
    CHECK(grown <= big + 64);
    CHECK_EQ_U64(e.mem.bytes, e.a.chunk_bytes);

    uint8_t *small2 = ppk__arena_alloc(&e.a, 100, 8);
    CHECK(small2 != NULL);
    if (small2) memset(small2, 0x22, 100);
    CHECK(small1[0] == 0x11 && small1[99] == 0x11);
    if (p) CHECK(p[0] == 0xAB && p[big - 1] == 0xAB);
    ppk__arena_check(&e.a);
    env_done(&e);
}

/* A request that cannot be met returns NULL and leaves the arena usable, even when the
 * alignment padding would make the size wrap around. */
static void test_huge_request_fails_cleanly(void) {
    env e;
    env_init(&e, 4096, 0);
    uint8_t *one = ppk__arena_alloc(&e.a, 1, 1); /* the next byte is not 8-aligned */
    CHECK(one != NULL);
    uint8_t *pos = e.a.pos;
    size_t alloc_bytes = e.a.alloc_bytes;

    CHECK(ppk__arena_alloc(&e.a, SIZE_MAX, 1) == NULL);
    CHECK(ppk__arena_alloc(&e.a, SIZE_MAX - 8, 1) == NULL);
    CHECK(ppk__arena_alloc(&e.a, (size_t)1 << 40, 8) == NULL); /* the allocator refuses */
    CHECK(e.a.pos == pos);
    CHECK_EQ_U64(e.a.alloc_bytes, alloc_bytes);
    CHECK_EQ_U64(e.mem.bytes, e.a.chunk_bytes);

    uint8_t *p = ppk__arena_alloc(&e.a, 16, 8);
    CHECK(p != NULL);
    ppk__arena_check(&e.a);
    env_done(&e);
}

/* Same, with a size that overflows only once the alignment padding (7 bytes here) is
 * added: n + pad wraps to a small number. */
static void test_huge_request_with_padding_fails(void) {
    env e;
    env_init(&e, 4096, 0);
    uint8_t *one = ppk__arena_alloc(&e.a, 1, 8); /* pos is now 8k + 1: padding 7 for 8 */
    CHECK(one != NULL);
    uint8_t *pos = e.a.pos;
    size_t alloc_bytes = e.a.alloc_bytes;
    /* Compare addresses as integers: a broken arena may hand out a wrapped pointer. */
    uintptr_t got = (uintptr_t)ppk__arena_alloc(&e.a, SIZE_MAX - 3, 8);
    CHECK_EQ_U64(got, 0);
    CHECK((uintptr_t)e.a.pos == (uintptr_t)pos);
    CHECK_EQ_U64(e.a.alloc_bytes, alloc_bytes);
    if ((uintptr_t)e.a.pos != (uintptr_t)pos) {
        /* Put the arena back so destroy and the next cases are not affected. */
        e.a.pos = pos;
        e.a.alloc_bytes = alloc_bytes;
    }
    env_done(&e);
}

/* Runs a case in a child process, so that a broken arena that crashes (or trips a
 * sanitizer) fails that case only. The child exits 0 when its checks passed. */
static void run_isolated(void (*fn)(void), const char *name) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        fflush(stderr);
        _exit(check_failures_ ? 1 : 0);
    }
    CHECK(pid > 0);
    if (pid < 0) return;
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status)) fprintf(stderr, "  %s: killed by signal %d\n", name, WTERMSIG(status));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_huge_request_with_padding_isolated(void) {
    run_isolated(test_huge_request_with_padding_fails, "test_huge_request_with_padding_fails");
}

/* Reset keeps at most keep_bytes of chunk memory; the kept chunks are reused before
 * anything new is allocated. */
static void test_reset_keeps_bounded_memory(void) {
    enum { CHUNK = 8192 };
    env e;
    env_init(&e, CHUNK, 3 * CHUNK);
    /* Ten chunks' worth: each 4000-byte object fills about half a chunk. */
    for (int i = 0; i < 20; i++) {
        uint8_t *p = ppk__arena_alloc(&e.a, 4000, 8);
        CHECK(p != NULL);
        if (p) memset(p, i, 4000);
    }
    CHECK_EQ_U64(e.a.chunk_bytes, 10 * CHUNK);
    CHECK_EQ_U64(e.mem.bytes, 10 * CHUNK);
    long allocs_before = e.cnt.allocs;
    ppk__arena_check(&e.a);

    ppk__arena_reset(&e.a);
    ppk__arena_check(&e.a);
    CHECK_EQ_U64(e.a.chunk_bytes, 3 * CHUNK);
    CHECK_EQ_U64(e.a.spare_bytes, 3 * CHUNK);
    CHECK_EQ_U64(e.mem.bytes, 3 * CHUNK);
    CHECK_EQ_U64(e.cnt.bytes, 3 * CHUNK);
    CHECK_EQ_U64(e.a.alloc_bytes, 0);
    CHECK(e.a.pos == NULL);

    /* Six objects fill the three kept chunks: no new memory. */
    for (int i = 0; i < 6; i++) {
        uint8_t *p = ppk__arena_alloc(&e.a, 4000, 8);
        CHECK(p != NULL);
        if (p) memset(p, 0x5A, 4000);
        CHECK_EQ_U64(e.mem.bytes, 3 * CHUNK);
        CHECK_EQ_INT(e.cnt.allocs, allocs_before);
    }
    CHECK_EQ_U64(e.a.spare_bytes, 0);
    CHECK_EQ_U64(used_bytes(&e.a), 3 * CHUNK);
    /* The seventh needs a fourth chunk. */
    CHECK(ppk__arena_alloc(&e.a, 4000, 8) != NULL);
    CHECK_EQ_U64(e.mem.bytes, 4 * CHUNK);
    CHECK_EQ_INT(e.cnt.allocs, allocs_before + 1);
    ppk__arena_check(&e.a);
    env_done(&e);
}

/* keep_bytes below one chunk (0 included) returns every chunk on reset. */
static void test_reset_keep_zero_returns_all(void) {
    static const size_t keeps[3] = {0, 1, 4095};
    for (int k = 0; k < 3; k++) {
        env e;
        env_init(&e, 4096, keeps[k]);
        for (int i = 0; i < 10; i++) CHECK(ppk__arena_alloc(&e.a, 3000, 4) != NULL);
        CHECK(e.mem.bytes >= 10 * 3000);
        ppk__arena_reset(&e.a);
        ppk__arena_check(&e.a);
        CHECK_EQ_U64(e.mem.bytes, 0);
        CHECK_EQ_U64(e.a.chunk_bytes, 0);
        CHECK_EQ_U64(e.a.spare_bytes, 0);
        CHECK_EQ_INT(e.cnt.live, 0);
        /* And the arena works after it. */
        uint8_t *p = ppk__arena_alloc(&e.a, 10, 8);
        CHECK(p != NULL);
        CHECK_EQ_U64(e.mem.bytes, 4096);
        env_done(&e);
    }
}

/* Reset prefers standard chunks; an oversized one is kept only if it fits the budget. */
static void test_reset_with_oversized_chunk(void) {
    enum { CHUNK = 4096 };
    env e;
    env_init(&e, CHUNK, 2 * CHUNK);
    CHECK(ppk__arena_alloc(&e.a, 100, 8) != NULL);
    CHECK(ppk__arena_alloc(&e.a, 3 * CHUNK, 8) != NULL); /* its own, larger chunk */
    CHECK(ppk__arena_alloc(&e.a, 4000, 8) != NULL);      /* a second standard chunk */
    CHECK(e.a.chunk_bytes > 5 * CHUNK);
    ppk__arena_reset(&e.a);
    ppk__arena_check(&e.a);
    CHECK_EQ_U64(e.a.chunk_bytes, 2 * CHUNK);
    CHECK_EQ_U64(e.a.spare_bytes, 2 * CHUNK);
    CHECK_EQ_U64(e.mem.bytes, 2 * CHUNK);
    /* Reset with nothing allocated changes nothing. */
    ppk__arena_reset(&e.a);
    CHECK_EQ_U64(e.mem.bytes, 2 * CHUNK);
    env_done(&e);
}

/* Rollback restores pos and alloc_bytes; chunks taken after the mark become spares that
 * the next allocations reuse. Earlier objects are untouched. */
static void test_mark_rollback(void) {
    enum { CHUNK = 4096 };
    env e;
    env_init(&e, CHUNK, 0);
    uint8_t *keep = ppk__arena_alloc(&e.a, 1000, 8);
    CHECK(keep != NULL);
    if (keep) memset(keep, 0x77, 1000);
    ppk__arena_mark m = ppk__arena_get_mark(&e.a);
    uint8_t *pos = e.a.pos;
    size_t alloc_bytes = e.a.alloc_bytes;
    size_t held = e.mem.bytes;

    for (int i = 0; i < 8; i++) CHECK(ppk__arena_alloc(&e.a, 3000, 8) != NULL);
    CHECK(e.mem.bytes > held);
    size_t held_after = e.mem.bytes;
    size_t extra = held_after - held;

    ppk__arena_rollback(&e.a, m);
    ppk__arena_check(&e.a);
    CHECK(e.a.pos == pos);
    CHECK_EQ_U64(e.a.alloc_bytes, alloc_bytes);
    CHECK_EQ_U64(e.a.spare_bytes, extra); /* every chunk taken since the mark */
    CHECK_EQ_U64(used_bytes(&e.a), held);
    CHECK_EQ_U64(e.mem.bytes, held_after); /* kept for reuse, not freed */
    int first_byte_ok = 1;
    for (int i = 0; i < 1000; i++)
        if (keep && keep[i] != 0x77) first_byte_ok = 0;
    CHECK(first_byte_ok);

    /* The next allocation continues right where the mark was. */
    uint8_t *p = ppk__arena_alloc(&e.a, 8, 8);
    CHECK(p == pos);
    /* Doing the same work again reuses the spares: no new memory. */
    long allocs = e.cnt.allocs;
    for (int i = 0; i < 8; i++) CHECK(ppk__arena_alloc(&e.a, 3000, 8) != NULL);
    CHECK_EQ_U64(e.mem.bytes, held_after);
    CHECK_EQ_INT(e.cnt.allocs, allocs);
    ppk__arena_check(&e.a);
    env_done(&e);
}

/* A mark taken on an empty arena rolls back to empty. */
static void test_rollback_to_empty(void) {
    env e;
    env_init(&e, 4096, 0);
    ppk__arena_mark m = ppk__arena_get_mark(&e.a);
    for (int i = 0; i < 5; i++) CHECK(ppk__arena_alloc(&e.a, 2000, 1) != NULL);
    size_t held = e.mem.bytes;
    ppk__arena_rollback(&e.a, m);
    ppk__arena_check(&e.a);
    CHECK(e.a.pos == NULL);
    CHECK_EQ_U64(e.a.alloc_bytes, 0);
    CHECK_EQ_U64(e.a.spare_bytes, held);
    CHECK_EQ_U64(used_bytes(&e.a), 0);
    /* The spares are reused, and a reset with keep 0 then returns them all. */
    CHECK(ppk__arena_alloc(&e.a, 2000, 1) != NULL);
    CHECK_EQ_U64(e.mem.bytes, held);
    ppk__arena_reset(&e.a);
    CHECK_EQ_U64(e.mem.bytes, 0);
    env_done(&e);
}

/* A rollback to a mark within the same chunk frees nothing and restores pos. */
static void test_rollback_same_chunk(void) {
    env e;
    env_init(&e, 4096, 0);
    CHECK(ppk__arena_alloc(&e.a, 10, 1) != NULL);
    ppk__arena_mark m = ppk__arena_get_mark(&e.a);
    uint8_t *pos = e.a.pos;
    CHECK(ppk__arena_alloc(&e.a, 100, 8) != NULL);
    CHECK(ppk__arena_alloc(&e.a, 7, 2) != NULL);
    ppk__arena_rollback(&e.a, m);
    ppk__arena_check(&e.a);
    CHECK(e.a.pos == pos);
    CHECK_EQ_U64(e.a.alloc_bytes, 10);
    CHECK_EQ_U64(e.a.spare_bytes, 0);
    CHECK_EQ_U64(e.mem.bytes, 4096);
    env_done(&e);
}

/* Destroy returns everything, kept spares included; destroying twice is harmless, and
 * so is destroying an arena that never allocated. */
static void test_destroy(void) {
    env e;
    env_init(&e, 4096, 1 << 20);
    for (int i = 0; i < 10; i++) CHECK(ppk__arena_alloc(&e.a, 3000, 8) != NULL);
    ppk__arena_reset(&e.a);
    CHECK_EQ_U64(e.a.spare_bytes, 10 * 4096); /* all kept: within keep_bytes */
    CHECK(ppk__arena_alloc(&e.a, 100, 8) != NULL);
    env_done(&e);
    ppk__arena_destroy(&e.a);
    CHECK_EQ_U64(e.mem.bytes, 0);

    env e2;
    env_init(&e2, 4096, 0);
    env_done(&e2);
}

/* A chunk size below the minimum is raised to it (4096). */
/* Past the budget (over_ok), a request the current chunk cannot hold gets the "over"
 * chunk, which ordinary requests never use: however the two interleave, the arena holds
 * at most one chunk past the limit. */
static void test_over_budget_chunk(void) {
    env e;
    env_init(&e, 4096, 0);
    e.mem.limit = 3 * 4096;
    /* Fill the budget: three chunks, then ordinary requests are refused. */
    while (ppk__arena_alloc(&e.a, 1000, 8)) {
    }
    CHECK(e.mem.limited);
    e.mem.limited = 0;
    CHECK_EQ_U64(e.a.chunk_bytes, 3 * 4096);
    for (int round = 0; round < 20; round++) {
        e.mem.over_ok = 1;
        uint8_t *p = ppk__arena_alloc(&e.a, 64, 8);
        e.mem.over_ok = 0;
        CHECK(p != NULL);
        CHECK(!e.mem.limited);
        memset(p, round, 64);
        /* An ordinary request past the budget still fails: it may not take the rest of
         * the over chunk. */
        CHECK(ppk__arena_alloc(&e.a, 16, 8) == NULL);
        CHECK(e.mem.limited);
        e.mem.limited = 0;
        ppk__arena_check(&e.a);
    }
    CHECK_EQ_U64(e.a.chunk_bytes, 4 * 4096);
    CHECK(e.mem.bytes <= e.mem.limit + 4096);
    /* A rollback forgets over-budget allocations too; reset makes the chunk spare. */
    ppk__arena_mark m = ppk__arena_get_mark(&e.a);
    e.mem.over_ok = 1;
    CHECK(ppk__arena_alloc(&e.a, 64, 8) != NULL);
    e.mem.over_ok = 0;
    ppk__arena_rollback(&e.a, m);
    CHECK(e.a.over_pos == m.over_pos);
    ppk__arena_check(&e.a);
    ppk__arena_reset(&e.a);
    CHECK(e.a.over == NULL);
    ppk__arena_check(&e.a);
    env_done(&e);
}

/* One window over the budget: ordinary chunks up to it, then one over chunk. */
static void fill_window(env *e) {
    while (ppk__arena_alloc(&e->a, 1000, 8)) {
    }
    CHECK(e->mem.limited);
    e->mem.limited = 0;
    e->mem.over_ok = 1;
    for (int i = 0; i < 3; i++) CHECK(ppk__arena_alloc(&e->a, 1000, 8) != NULL);
    e->mem.over_ok = 0;
}

/* keep_bytes above the budget (a small memory_limit with the default keep_bytes): a
 * reset keeps no more chunks than the budget holds, else the next window would start
 * past it with the old over chunk and take a second one. */
static void test_reset_keeps_within_budget(void) {
    env e;
    env_init(&e, 4096, 1 << 20);
    e.mem.limit = 3 * 4096 + 100; /* 100 bytes held by others: tables, say */
    e.mem.bytes += 100;
    for (int w = 0; w < 3; w++) {
        fill_window(&e);
        CHECK(e.mem.bytes <= e.mem.limit + 4096);
        if (e.mem.bytes > e.mem.limit + 4096)
            fprintf(stderr, "window %d holds %zu\n", w, e.mem.bytes);
        ppk__arena_reset(&e.a);
        CHECK(e.mem.bytes <= e.mem.limit);
        ppk__arena_check(&e.a);
    }
    e.mem.bytes -= 100;
    env_done(&e);
}

static void test_min_chunk_size(void) {
    env e;
    env_init(&e, 16, 0);
    CHECK_EQ_U64(e.a.chunk_size, 4096);
    CHECK(ppk__arena_alloc(&e.a, 1, 1) != NULL);
    CHECK_EQ_U64(e.mem.bytes, 4096);
    env_done(&e);
}

int main(void) {
    RUN(test_alignment_and_no_overlap);
    RUN(test_padding_is_minimal);
    RUN(test_dup);
    RUN(test_large_request);
    RUN(test_huge_request_fails_cleanly);
    RUN(test_huge_request_with_padding_isolated);
    RUN(test_reset_keeps_bounded_memory);
    RUN(test_reset_keep_zero_returns_all);
    RUN(test_reset_with_oversized_chunk);
    RUN(test_mark_rollback);
    RUN(test_rollback_to_empty);
    RUN(test_rollback_same_chunk);
    RUN(test_destroy);
    RUN(test_min_chunk_size);
    RUN(test_over_budget_chunk);
    RUN(test_reset_keeps_within_budget);
    return check_summary();
}
