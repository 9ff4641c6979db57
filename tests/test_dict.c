/*
 * test_dict.c - byte keys to dense ids (src/dict.h).
 *
 * Each case builds a dict on an arena on a ppk__mem, and ends by destroying both and
 * checking that the ppk__mem holds no byte. Keys are hashed with ppk__hash() except in
 * the collision case, which passes one hash for different keys on purpose.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "dict.h"

typedef struct env {
    ppk__mem mem;
    ppk__arena a;
    ppk__dict d;
} env;

static void env_init(env *e) {
    ppk__mem_init(&e->mem, NULL);
    ppk__arena_init(&e->a, &e->mem, 4096, 0);
    ppk__dict_init(&e->d, &e->mem, &e->a);
}

static void env_done(env *e) {
    ppk__dict_destroy(&e->d);
    ppk__arena_destroy(&e->a);
    CHECK_EQ_U64(e->mem.bytes, 0);
}

static uint32_t intern(env *e, const void *k, size_t n, int *is_new) {
    return ppk__dict_intern(&e->d, k, n, ppk__hash(k, n), 1, is_new);
}

static uint32_t find(env *e, const void *k, size_t n) {
    return ppk__dict_find(&e->d, k, n, ppk__hash(k, n));
}

/* Checks that id holds exactly the `n` bytes at `k`. */
#define CHECK_KEY(e, id, k, n)                                                             \
    do {                                                                                   \
        uint32_t len_;                                                                     \
        const uint8_t *p_ = ppk__dict_key(&(e)->d, (id), &len_);                           \
        CHECK_EQ_U64(len_, (n));                                                           \
        if (len_ == (n) && (n)) CHECK_MEM(p_, (k), (n));                                   \
    } while (0)

static int key_of(char *buf, size_t cap, uint32_t i) {
    return snprintf(buf, cap, "key-%u", (unsigned)i);
}

/* ---- cases -------------------------------------------------------------------------- */

static void test_dense_ids_in_insertion_order(void) {
    env e;
    env_init(&e);
    const char *words[] = {"main", "foo", "bar", "baz", "qux"};
    for (uint32_t i = 0; i < 5; i++) {
        int is_new = -1;
        uint32_t id = intern(&e, words[i], strlen(words[i]), &is_new);
        CHECK_EQ_U64(id, i);
        CHECK_EQ_INT(is_new, 1);
    }
    CHECK_EQ_U64(e.d.n, 5);
    CHECK_EQ_U64(e.d.key_bytes, 4 + 3 + 3 + 3 + 3);
    for (uint32_t i = 0; i < 5; i++) {
        CHECK_KEY(&e, i, words[i], strlen(words[i]));
        CHECK_EQ_U64(find(&e, words[i], strlen(words[i])), i);
    }
    /* The key is a copy: changing the caller's buffer changes nothing. */
    char buf[8] = "mutable";
    uint32_t id = intern(&e, buf, 7, NULL);
    CHECK_EQ_U64(id, 5);
    uint32_t len;
    CHECK(ppk__dict_key(&e.d, id, &len) != (const uint8_t *)buf);
    memset(buf, 'x', 7);
    CHECK_KEY(&e, id, "mutable", 7);
    env_done(&e);
}

/* Re-interning a known key returns its id with is_new 0 and allocates nothing, whatever
 * the number of keys in the table (table growth is driven by new keys only). */
static void test_reintern_allocates_nothing(void) {
    env e;
    env_init(&e);
    char buf[32];
    int bad_id = 0, bad_new = 0, grew_mem = 0, grew_arena = 0, first_bad = -1;
    for (uint32_t n = 1; n <= 200; n++) {
        int len = key_of(buf, sizeof buf, n - 1);
        CHECK_EQ_U64(intern(&e, buf, (size_t)len, NULL), n - 1);
        /* Now n keys: re-intern each of a few of them. */
        size_t mem = e.mem.bytes, arena = e.a.alloc_bytes, table = ppk__dict_table_bytes(&e.d);
        uint32_t probes[3] = {0, (n - 1) / 2, n - 1};
        for (int k = 0; k < 3; k++) {
            len = key_of(buf, sizeof buf, probes[k]);
            int is_new = -1;
            uint32_t id = intern(&e, buf, (size_t)len, &is_new);
            if (id != probes[k]) bad_id++;
            if (is_new != 0) bad_new++;
            if (e.mem.bytes != mem || ppk__dict_table_bytes(&e.d) != table) {
                grew_mem++;
                if (first_bad < 0) first_bad = (int)n;
            }
            if (e.a.alloc_bytes != arena) grew_arena++;
        }
        CHECK_EQ_U64(e.d.n, n);
    }
    CHECK_EQ_INT(bad_id, 0);
    CHECK_EQ_INT(bad_new, 0);
    CHECK_EQ_INT(grew_mem, 0);
    if (grew_mem) fprintf(stderr, "  first growth on a known key with %d keys\n", first_bad);
    CHECK_EQ_INT(grew_arena, 0);
    env_done(&e);
}

/* 100k keys: the tables grow many times; every id stays right. */
static void test_many_keys(void) {
    env e;
    env_init(&e);
    enum { N = 100000 };
    char buf[32];
    int bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        int len = key_of(buf, sizeof buf, i);
        int is_new = 0;
        if (intern(&e, buf, (size_t)len, &is_new) != i || !is_new) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_U64(e.d.n, N);
    /* The slot table stays at most 7/8 full. */
    CHECK((uint64_t)(e.d.mask + 1) * 7 >= (uint64_t)N * 8);
    bad = 0;
    for (uint32_t i = 0; i < N; i++) {
        int len = key_of(buf, sizeof buf, i);
        if (find(&e, buf, (size_t)len) != i) bad++;
        uint32_t kl;
        const uint8_t *k = ppk__dict_key(&e.d, i, &kl);
        if (kl != (uint32_t)len || memcmp(k, buf, kl) != 0) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* Keys never added are absent. */
    bad = 0;
    for (uint32_t i = N; i < N + 1000; i++) {
        int len = key_of(buf, sizeof buf, i);
        if (find(&e, buf, (size_t)len) != PPK_DICT_NONE) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    env_done(&e);
}

/* Keys that are prefixes of one another, of different lengths, binary with NULs, and the
 * empty key, are all distinct. */
static void test_prefixes_lengths_empty(void) {
    env e;
    env_init(&e);
    const char *k = "abcdefghijklmnopqrstuvwxyz";
    for (uint32_t n = 1; n <= 26; n++) CHECK_EQ_U64(intern(&e, k, n, NULL), n - 1);
    int is_new = -1;
    uint32_t empty = intern(&e, "", 0, &is_new);
    CHECK_EQ_U64(empty, 26);
    CHECK_EQ_INT(is_new, 1);
    CHECK_KEY(&e, empty, "", 0);
    CHECK_EQ_U64(intern(&e, "", 0, &is_new), 26);
    CHECK_EQ_INT(is_new, 0);
    /* Empty with a non-NULL pointer to other bytes is the same empty key. */
    CHECK_EQ_U64(intern(&e, k, 0, &is_new), 26);
    CHECK_EQ_INT(is_new, 0);

    static const uint8_t bin1[4] = {0, 0, 0, 0};
    static const uint8_t bin2[5] = {0, 0, 0, 0, 0};
    static const uint8_t bin3[4] = {0, 0, 0, 1};
    CHECK_EQ_U64(intern(&e, bin1, 4, NULL), 27);
    CHECK_EQ_U64(intern(&e, bin2, 5, NULL), 28);
    CHECK_EQ_U64(intern(&e, bin3, 4, NULL), 29);
    CHECK_EQ_U64(intern(&e, bin2, 3, NULL), 30);

    for (uint32_t n = 1; n <= 26; n++) {
        CHECK_EQ_U64(find(&e, k, n), n - 1);
        CHECK_KEY(&e, n - 1, k, n);
    }
    CHECK_EQ_U64(find(&e, "", 0), 26);
    CHECK_EQ_U64(find(&e, bin1, 4), 27);
    CHECK_EQ_U64(find(&e, bin2, 5), 28);
    CHECK_EQ_U64(find(&e, bin3, 4), 29);
    CHECK_EQ_U64(find(&e, bin2, 3), 30);
    CHECK_EQ_U64(e.d.key_bytes, 26 * 27 / 2 + 4 + 5 + 4 + 3);
    env_done(&e);
}

static void test_find_absent(void) {
    env e;
    env_init(&e);
    /* On an empty dict, before any table exists. */
    CHECK_EQ_U64(find(&e, "x", 1), PPK_DICT_NONE);
    CHECK_EQ_U64(find(&e, "", 0), PPK_DICT_NONE);
    intern(&e, "abc", 3, NULL);
    CHECK_EQ_U64(find(&e, "ab", 2), PPK_DICT_NONE);
    CHECK_EQ_U64(find(&e, "abcd", 4), PPK_DICT_NONE);
    CHECK_EQ_U64(find(&e, "abd", 3), PPK_DICT_NONE);
    CHECK_EQ_U64(find(&e, "", 0), PPK_DICT_NONE);
    /* find never inserts. */
    CHECK_EQ_U64(e.d.n, 1);
    env_done(&e);
}

/* truncate(n) forgets ids >= n; re-adding them gives the same ids; older keys stay. */
static void test_truncate(void) {
    env e;
    env_init(&e);
    char buf[32];
    for (uint32_t i = 0; i < 100; i++) {
        int len = key_of(buf, sizeof buf, i);
        intern(&e, buf, (size_t)len, NULL);
    }
    size_t bytes_40 = 0;
    for (uint32_t i = 0; i < 40; i++) bytes_40 += (size_t)key_of(buf, sizeof buf, i);

    ppk__dict_truncate(&e.d, 40);
    CHECK_EQ_U64(e.d.n, 40);
    CHECK_EQ_U64(e.d.key_bytes, bytes_40);
    int bad = 0;
    for (uint32_t i = 0; i < 100; i++) {
        int len = key_of(buf, sizeof buf, i);
        uint32_t want = i < 40 ? i : PPK_DICT_NONE;
        if (find(&e, buf, (size_t)len) != want) bad++;
    }
    CHECK_EQ_INT(bad, 0);

    /* Re-added in the same order, they get the same ids, as new keys. */
    bad = 0;
    for (uint32_t i = 40; i < 100; i++) {
        int len = key_of(buf, sizeof buf, i);
        int is_new = 0;
        if (intern(&e, buf, (size_t)len, &is_new) != i || !is_new) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    /* A different key takes the first free id. */
    ppk__dict_truncate(&e.d, 50);
    CHECK_EQ_U64(intern(&e, "other", 5, NULL), 50);
    CHECK_EQ_U64(find(&e, "key-49", 6), 49);
    CHECK_EQ_U64(find(&e, "key-50", 6), PPK_DICT_NONE);
    /* Truncating to the current size or more changes nothing. */
    ppk__dict_truncate(&e.d, 51);
    ppk__dict_truncate(&e.d, 1000);
    CHECK_EQ_U64(e.d.n, 51);
    CHECK_EQ_U64(find(&e, "other", 5), 50);
    /* To zero: everything is forgotten. */
    ppk__dict_truncate(&e.d, 0);
    CHECK_EQ_U64(e.d.n, 0);
    CHECK_EQ_U64(e.d.key_bytes, 0);
    CHECK_EQ_U64(find(&e, "key-0", 5), PPK_DICT_NONE);
    CHECK_EQ_U64(intern(&e, "key-7", 5, NULL), 0);
    env_done(&e);
}

/* clear forgets every key but keeps the tables: re-adding allocates no table memory. */
static void test_clear_keeps_tables(void) {
    env e;
    env_init(&e);
    char buf[32];
    for (uint32_t i = 0; i < 1000; i++) {
        int len = key_of(buf, sizeof buf, i);
        intern(&e, buf, (size_t)len, NULL);
    }
    size_t table = ppk__dict_table_bytes(&e.d);
    CHECK(table > 0);
    ppk__dict_clear(&e.d);
    CHECK_EQ_U64(e.d.n, 0);
    CHECK_EQ_U64(e.d.key_bytes, 0);
    CHECK_EQ_U64(ppk__dict_table_bytes(&e.d), table);
    CHECK_EQ_U64(find(&e, "key-0", 5), PPK_DICT_NONE);
    CHECK_EQ_U64(find(&e, "key-999", 7), PPK_DICT_NONE);

    ppk__arena_reset(&e.a); /* the keys' bytes go with the window */
    CHECK_EQ_U64(e.mem.bytes, table);
    int bad = 0;
    for (uint32_t i = 0; i < 1000; i++) {
        int len = key_of(buf, sizeof buf, 999 - i); /* reverse order: new ids */
        if (intern(&e, buf, (size_t)len, NULL) != i) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_U64(ppk__dict_table_bytes(&e.d), table);
    /* Only the arena grew (for the key bytes), not the tables. */
    CHECK_EQ_U64(e.mem.bytes - e.a.chunk_bytes, table);
    CHECK_EQ_U64(find(&e, "key-999", 7), 0);
    env_done(&e);
}

/* align 0 keeps the caller's pointer and copies nothing into the arena. */
static void test_align_zero_no_copy(void) {
    env e;
    env_init(&e);
    static const char stable[] = "a string that outlives the dict";
    size_t n = sizeof stable - 1;
    int is_new = 0;
    uint32_t id = ppk__dict_intern(&e.d, stable, n, ppk__hash(stable, n), 0, &is_new);
    CHECK_EQ_U64(id, 0);
    CHECK_EQ_INT(is_new, 1);
    uint32_t len;
    CHECK(ppk__dict_key(&e.d, id, &len) == (const uint8_t *)stable);
    CHECK_EQ_U64(len, n);
    CHECK_EQ_U64(e.a.alloc_bytes, 0);
    CHECK_EQ_U64(e.a.chunk_bytes, 0);
    /* A copy of the same bytes finds it. */
    char copy[64];
    memcpy(copy, stable, n);
    CHECK_EQ_U64(find(&e, copy, n), 0);
    CHECK_EQ_U64(intern(&e, copy, n, &is_new), 0);
    CHECK_EQ_INT(is_new, 0);
    env_done(&e);
}

/* Keys are copied at the alignment asked for (records of uint32/uint64 rely on it). */
static void test_key_alignment(void) {
    env e;
    env_init(&e);
    intern(&e, "x", 1, NULL); /* misaligns the arena */
    uint64_t rec[2] = {1, 2};
    uint32_t id = ppk__dict_intern(&e.d, rec, sizeof rec, ppk__hash(rec, sizeof rec), 8, NULL);
    uint32_t len;
    const uint8_t *k = ppk__dict_key(&e.d, id, &len);
    CHECK_EQ_U64((uintptr_t)k % 8, 0);
    CHECK_KEY(&e, id, rec, sizeof rec);
    intern(&e, "y", 1, NULL);
    uint32_t r4[3] = {7, 8, 9};
    id = ppk__dict_intern(&e.d, r4, sizeof r4, ppk__hash(r4, sizeof r4), 4, NULL);
    k = ppk__dict_key(&e.d, id, &len);
    CHECK_EQ_U64((uintptr_t)k % 4, 0);
    CHECK_KEY(&e, id, r4, sizeof r4);
    env_done(&e);
}

/* Different keys given the very same 64-bit hash stay distinct and are both found; so
 * are keys whose hashes share only the low or only the high half. */
static void test_forced_hash_collision(void) {
    env e;
    env_init(&e);
    const uint64_t h = 0x0123456789abcdefull;
    int is_new = -1;
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "alpha", 5, h, 1, &is_new), 0);
    CHECK_EQ_INT(is_new, 1);
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "bravo", 5, h, 1, &is_new), 1);
    CHECK_EQ_INT(is_new, 1);
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "alph", 4, h, 1, &is_new), 2); /* length differs */
    CHECK_EQ_INT(is_new, 1);
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "", 0, h, 1, &is_new), 3);
    CHECK_EQ_INT(is_new, 1);
    /* Same low half, other high half; same high half, other low half. */
    uint64_t h_lo = (h & 0xffffffffull) | 0xdead000000000000ull;
    uint64_t h_hi = (h & 0xffffffff00000000ull) | 0x0000beefull;
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "charlie", 7, h_lo, 1, &is_new), 4);
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "delta", 5, h_hi, 1, &is_new), 5);

    CHECK_EQ_U64(ppk__dict_find(&e.d, "alpha", 5, h), 0);
    CHECK_EQ_U64(ppk__dict_find(&e.d, "bravo", 5, h), 1);
    CHECK_EQ_U64(ppk__dict_find(&e.d, "alph", 4, h), 2);
    CHECK_EQ_U64(ppk__dict_find(&e.d, "", 0, h), 3);
    CHECK_EQ_U64(ppk__dict_find(&e.d, "charlie", 7, h_lo), 4);
    CHECK_EQ_U64(ppk__dict_find(&e.d, "delta", 5, h_hi), 5);
    CHECK_EQ_U64(ppk__dict_find(&e.d, "zulu", 4, h), PPK_DICT_NONE);
    /* Re-interning under the colliding hash finds the right one. */
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "bravo", 5, h, 1, &is_new), 1);
    CHECK_EQ_INT(is_new, 0);
    CHECK_EQ_U64(ppk__dict_intern(&e.d, "alpha", 5, h, 1, &is_new), 0);
    CHECK_EQ_INT(is_new, 0);
    CHECK_KEY(&e, 0, "alpha", 5);
    CHECK_KEY(&e, 1, "bravo", 5);

    /* Many keys on one hash: a long probe run, across table growth. */
    char buf[32];
    int bad = 0;
    for (uint32_t i = 0; i < 300; i++) {
        int len = key_of(buf, sizeof buf, i);
        if (ppk__dict_intern(&e.d, buf, (size_t)len, h, 1, NULL) != 6 + i) bad++;
    }
    for (uint32_t i = 0; i < 300; i++) {
        int len = key_of(buf, sizeof buf, i);
        if (ppk__dict_find(&e.d, buf, (size_t)len, h) != 6 + i) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK_EQ_U64(ppk__dict_find(&e.d, "alpha", 5, h), 0);
    env_done(&e);
}

/* ppk__dict_next_id: the ids stored with a hash's high half, from where its probe
 * starts to the empty slot that ends the run, in insertion order for one hash; none
 * with another high half. */
static void test_next_id(void) {
    env e;
    env_init(&e);
    const uint64_t h = 0x0123456789abcdefull;
    uint64_t h_lo = (h & 0xffffffffull) | 0xdead000000000000ull; /* other high half */
    const char *keys[] = {"alpha", "bravo", "charlie", "delta"};
    uint64_t hashes[] = {h, h, h_lo, h};
    for (uint32_t k = 0; k < 4; k++)
        CHECK_EQ_U64(ppk__dict_intern(&e.d, keys[k], strlen(keys[k]), hashes[k], 1, NULL), k);
    uint32_t i = ppk__dict_slot(&e.d, h), got[8], n = 0, id;
    while (n < 8 && (id = ppk__dict_next_id(&e.d, h, &i)) != PPK_DICT_NONE) got[n++] = id;
    CHECK_EQ_U64(n, 3);
    CHECK_EQ_U64(got[0], 0);
    CHECK_EQ_U64(got[1], 1);
    CHECK_EQ_U64(got[2], 3);
    i = ppk__dict_slot(&e.d, h_lo);
    CHECK_EQ_U64(ppk__dict_next_id(&e.d, h_lo, &i), 2);
    CHECK_EQ_U64(ppk__dict_next_id(&e.d, h_lo, &i), PPK_DICT_NONE);
    uint64_t absent = 0x7777777700000000ull | (h & 0xffffffffull);
    i = ppk__dict_slot(&e.d, absent);
    CHECK_EQ_U64(ppk__dict_next_id(&e.d, absent, &i), PPK_DICT_NONE);
    env_done(&e);
}

/* reserve makes room: the next `extra` new keys allocate no table memory. */
static void test_reserve(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__dict_reserve(&e.d, 500), 0);
    size_t table = ppk__dict_table_bytes(&e.d);
    CHECK(table > 0);
    char buf[32];
    for (uint32_t i = 0; i < 500; i++) {
        int len = key_of(buf, sizeof buf, i);
        CHECK_EQ_U64(intern(&e, buf, (size_t)len, NULL), i);
    }
    CHECK_EQ_U64(ppk__dict_table_bytes(&e.d), table);
    /* An absurd reservation fails cleanly and changes nothing. */
    CHECK_EQ_INT(ppk__dict_reserve(&e.d, (size_t)UINT32_MAX), PPK_ENOMEM);
    CHECK_EQ_U64(ppk__dict_table_bytes(&e.d), table);
    CHECK_EQ_U64(find(&e, "key-499", 7), 499);
    env_done(&e);
}

/* Destroy accepts a dict that never allocated, and destroying twice is harmless. */
static void test_destroy_empty(void) {
    env e;
    env_init(&e);
    ppk__dict_destroy(&e.d);
    env_done(&e);
}

int main(void) {
    RUN(test_dense_ids_in_insertion_order);
    RUN(test_reintern_allocates_nothing);
    RUN(test_many_keys);
    RUN(test_prefixes_lengths_empty);
    RUN(test_find_absent);
    RUN(test_truncate);
    RUN(test_clear_keeps_tables);
    RUN(test_align_zero_no_copy);
    RUN(test_key_alignment);
    RUN(test_forced_hash_collision);
    RUN(test_next_id);
    RUN(test_reserve);
    RUN(test_destroy_empty);
    return check_summary();
}
