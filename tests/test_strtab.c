/*
 * test_strtab.c - the string table of one window (src/strtab.h).
 *
 * Each case builds a table on an arena on a ppk__mem and ends by destroying both and
 * checking that the ppk__mem holds no byte. Expected repairs are written out byte for
 * byte (U+FFFD is EF BF BD).
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "strtab.h"

typedef struct env {
    ppk__mem mem;
    ppk__arena a;
    ppk__strtab st;
} env;

static void env_init(env *e, size_t max_len) {
    ppk__mem_init(&e->mem, NULL);
    ppk__arena_init(&e->a, &e->mem, 4096, 0);
    CHECK_EQ_INT(ppk__strtab_init(&e->st, &e->mem, &e->a, max_len), 0);
}

static void env_done(env *e) {
    ppk__strtab_destroy(&e->st);
    ppk__arena_destroy(&e->a);
    CHECK_EQ_U64(e->mem.bytes, 0);
}

/* A string as it enters the library: fitted (repaired, cut), then interned. */
static uint32_t intern(env *e, const char *s) {
    size_t len = strlen(s);
    const char *f = ppk__strtab_fit(&e->st, s, &len);
    return ppk__strtab_intern(&e->st, f, len);
}

/* Checks that string `id` is exactly the C string `s`. */
#define CHECK_ID_IS(e, id, s)                                                              \
    do {                                                                                   \
        size_t got_len_;                                                                   \
        const char *got_ = ppk__strtab_get(&(e)->st, (id), &got_len_);                     \
        CHECK_STR(got_, got_len_, (s));                                                    \
    } while (0)

/* ---- cases -------------------------------------------------------------------------- */

static void test_empty_string_is_id_zero(void) {
    env e;
    env_init(&e, 64);
    CHECK_EQ_U64(ppk__strtab_count(&e.st), 1);
    CHECK_EQ_U64(ppk__strtab_bytes(&e.st), 0);
    CHECK_ID_IS(&e, 0, "");
    CHECK_EQ_U64(ppk__strtab_intern(&e.st, "", 0), 0);
    CHECK_EQ_U64(ppk__strtab_intern(&e.st, NULL, 0), 0);
    CHECK_EQ_U64(ppk__strtab_intern(&e.st, "abc", 0), 0); /* zero length: empty */
    CHECK_EQ_U64(ppk__strtab_find(&e.st, "", 0), 0);
    CHECK_EQ_U64(ppk__strtab_count(&e.st), 1);
    env_done(&e);
}

static void test_insertion_order_count_bytes(void) {
    env e;
    env_init(&e, 64);
    const char *s[] = {"samples", "count", "cpu", "nanoseconds", "main", "héllo"};
    size_t bytes = 0;
    for (uint32_t i = 0; i < 6; i++) {
        CHECK_EQ_U64(intern(&e, s[i]), i + 1);
        bytes += strlen(s[i]);
        CHECK_EQ_U64(ppk__strtab_count(&e.st), i + 2);
        CHECK_EQ_U64(ppk__strtab_bytes(&e.st), bytes);
    }
    for (uint32_t i = 0; i < 6; i++) {
        CHECK_ID_IS(&e, i + 1, s[i]);
        CHECK_EQ_U64(ppk__strtab_find(&e.st, s[i], strlen(s[i])), i + 1);
    }
    CHECK_EQ_U64(ppk__strtab_find(&e.st, "absent", 6), PPK_DICT_NONE);
    CHECK_EQ_U64(e.st.fit.repaired, 0);
    CHECK_EQ_U64(e.st.fit.truncated, 0);
    /* The table keeps a copy. */
    char buf[8] = "scratch";
    uint32_t id = ppk__strtab_intern(&e.st, buf, 7);
    memset(buf, '-', 7);
    CHECK_ID_IS(&e, id, "scratch");
    env_done(&e);
}

/* A known string returns its id: count, bytes and memory unchanged, at every table size
 * (the dict's growth points included). */
static void test_known_string_no_growth(void) {
    env e;
    env_init(&e, 64);
    char buf[32];
    int bad_id = 0, grew = 0, first_growth = -1;
    for (uint32_t i = 1; i <= 100; i++) {
        int len = snprintf(buf, sizeof buf, "fn_%u", (unsigned)i);
        CHECK_EQ_U64(ppk__strtab_intern(&e.st, buf, (size_t)len), i);
        uint32_t count = ppk__strtab_count(&e.st);
        size_t bytes = ppk__strtab_bytes(&e.st), mem = e.mem.bytes;
        if (ppk__strtab_intern(&e.st, buf, (size_t)len) != i) bad_id++;
        if (ppk__strtab_intern(&e.st, "fn_1", 4) != 1) bad_id++;
        if (ppk__strtab_intern(&e.st, "", 0) != 0) bad_id++;
        CHECK_EQ_U64(ppk__strtab_count(&e.st), count);
        CHECK_EQ_U64(ppk__strtab_bytes(&e.st), bytes);
        if (e.mem.bytes != mem) {
            grew++;
            if (first_growth < 0) first_growth = (int)count;
        }
    }
    CHECK_EQ_INT(bad_id, 0);
    CHECK_EQ_INT(grew, 0);
    if (grew) fprintf(stderr, "  memory grew on a known string with %d strings\n", first_growth);
    env_done(&e);
}

/* Each invalid byte becomes U+FFFD; a repaired string counts once. */
static void test_utf8_repair(void) {
    env e;
    env_init(&e, 64);
    uint32_t id = intern(&e, "a\xff" "b");
    CHECK_EQ_U64(id, 1);
    CHECK_ID_IS(&e, id, "a\xEF\xBF\xBD" "b");
    CHECK_EQ_U64(e.st.fit.repaired, 1);
    CHECK_EQ_U64(e.st.fit.truncated, 0);

    /* Two bad bytes: two replacements. A truncated 3-byte sequence: one per byte. */
    id = intern(&e, "\xC0\x80x");
    CHECK_ID_IS(&e, id, "\xEF\xBF\xBD\xEF\xBF\xBDx");
    id = intern(&e, "x\xE2\x82");
    CHECK_ID_IS(&e, id, "x\xEF\xBF\xBD\xEF\xBF\xBD");
    /* A surrogate, encoded: three bad bytes. */
    id = intern(&e, "\xED\xA0\x80");
    CHECK_ID_IS(&e, id, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK_EQ_U64(e.st.fit.repaired, 4);
    CHECK_EQ_U64(ppk__strtab_count(&e.st), 5);

    /* Repaired strings are interned as repaired: the repaired form finds them, and
     * another invalid input with the same repair gets the same id. */
    CHECK_EQ_U64(ppk__strtab_find(&e.st, "a\xEF\xBF\xBD" "b", 5), 1);
    CHECK_EQ_U64(intern(&e, "a\xfe" "b"), 1);
    CHECK_EQ_U64(intern(&e, "a\xEF\xBF\xBD" "b"), 1); /* valid: no repair counted */
    CHECK_EQ_U64(e.st.fit.repaired, 5);
    /* find takes strings as given, without repair. */
    CHECK_EQ_U64(ppk__strtab_find(&e.st, "a\xff" "b", 3), PPK_DICT_NONE);
    /* Valid multi-byte text is left alone. */
    id = intern(&e, "\xE2\x82\xAC \xF0\x9F\x98\x80");
    CHECK_ID_IS(&e, id, "\xE2\x82\xAC \xF0\x9F\x98\x80");
    CHECK_EQ_U64(e.st.fit.repaired, 5);
    env_done(&e);
}

/* A string longer than max_len is cut at a character boundary, never inside one. */
static void test_truncation_at_char_boundary(void) {
    env e;
    env_init(&e, 8);
    /* ASCII: cut at exactly 8. */
    uint32_t id = intern(&e, "0123456789");
    CHECK_ID_IS(&e, id, "01234567");
    CHECK_EQ_U64(e.st.fit.truncated, 1);
    CHECK_EQ_U64(e.st.fit.repaired, 0);
    /* Exactly max_len: kept whole. */
    id = intern(&e, "abcdefgh");
    CHECK_ID_IS(&e, id, "abcdefgh");
    CHECK_EQ_U64(e.st.fit.truncated, 1);
    /* A 3-byte char straddling byte 8: "abcdef" + euro (6..8) -> cut to 6. */
    id = intern(&e, "abcdef\xE2\x82\xAC");
    CHECK_ID_IS(&e, id, "abcdef");
    /* A 4-byte char straddling: "abcde" + emoji (5..8) -> 5. */
    id = intern(&e, "abcde\xF0\x9F\x98\x80z");
    CHECK_ID_IS(&e, id, "abcde");
    /* 2-byte chars: four of them fit exactly. */
    id = intern(&e, "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9");
    CHECK_ID_IS(&e, id, "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9");
    /* 3-byte chars: two fit (6 bytes), the third would end at 9. */
    id = intern(&e, "\xE2\x82\xAC\xE2\x82\xAC\xE2\x82\xAC");
    CHECK_ID_IS(&e, id, "\xE2\x82\xAC\xE2\x82\xAC");
    CHECK_EQ_U64(e.st.fit.truncated, 5);
    CHECK_EQ_U64(e.st.fit.repaired, 0);
    /* Both: "ab\xff" "cdefgh" -> "ab" FFFD "cde" (8 bytes). */
    id = intern(&e, "ab\xff" "cdefgh");
    CHECK_ID_IS(&e, id, "ab\xEF\xBF\xBD" "cde");
    CHECK_EQ_U64(e.st.fit.truncated, 6);
    CHECK_EQ_U64(e.st.fit.repaired, 1);
    /* A repair that grows past max_len: "abcdef\xff" (7 bytes) -> "abcdef" + EF BF BD
     * would be 9 > 8, so the replacement is cut. (Whether that also counts as a repair
     * is left open: nothing repaired remains in the output.) */
    id = intern(&e, "abcdef\xff");
    CHECK_ID_IS(&e, id, "abcdef");
    CHECK_EQ_U64(e.st.fit.truncated, 7);
    /* Every stored string is at most max_len bytes. */
    for (uint32_t i = 0; i < ppk__strtab_count(&e.st); i++) {
        size_t len;
        ppk__strtab_get(&e.st, i, &len);
        CHECK(len <= 8);
    }
    env_done(&e);
}

/* clear forgets all but "" and zeroes the counters. */
static void test_clear(void) {
    env e;
    env_init(&e, 8);
    intern(&e, "one");
    intern(&e, "two\xff");
    intern(&e, "three-and-more");
    CHECK_EQ_U64(ppk__strtab_count(&e.st), 4);
    CHECK(e.st.fit.repaired > 0);
    CHECK(e.st.fit.truncated > 0);
    ppk__strtab_clear(&e.st);
    CHECK_EQ_U64(ppk__strtab_count(&e.st), 1);
    CHECK_EQ_U64(ppk__strtab_bytes(&e.st), 0);
    CHECK_EQ_U64(e.st.fit.repaired, 0);
    CHECK_EQ_U64(e.st.fit.truncated, 0);
    CHECK_ID_IS(&e, 0, "");
    CHECK_EQ_U64(ppk__strtab_find(&e.st, "", 0), 0);
    CHECK_EQ_U64(ppk__strtab_find(&e.st, "one", 3), PPK_DICT_NONE);
    ppk__arena_reset(&e.a);
    /* Fresh ids from 1, in the new order. */
    CHECK_EQ_U64(intern(&e, "two"), 1);
    CHECK_EQ_U64(intern(&e, "one"), 2);
    CHECK_EQ_U64(intern(&e, ""), 0);
    CHECK_ID_IS(&e, 1, "two");
    CHECK_ID_IS(&e, 2, "one");
    env_done(&e);
}

/* intern_stable keeps the caller's pointer, and the regular intern then finds it. */
static void test_intern_stable_no_copy(void) {
    env e;
    env_init(&e, 64);
    static const char name[] = "runtime.mallocgc";
    size_t n = sizeof name - 1;
    size_t arena = e.a.alloc_bytes;
    uint32_t id = ppk__strtab_intern_stable(&e.st, name, n);
    CHECK_EQ_U64(id, 1);
    size_t len;
    CHECK(ppk__strtab_get(&e.st, id, &len) == name);
    CHECK_EQ_U64(len, n);
    CHECK_EQ_U64(e.a.alloc_bytes, arena);
    CHECK_EQ_U64(ppk__strtab_bytes(&e.st), n);
    char copy[32];
    memcpy(copy, name, n);
    CHECK_EQ_U64(ppk__strtab_intern(&e.st, copy, n), 1);
    CHECK_EQ_U64(ppk__strtab_intern_stable(&e.st, copy, n), 1);
    CHECK(ppk__strtab_get(&e.st, id, &len) == name);
    CHECK_EQ_U64(ppk__strtab_count(&e.st), 2);
    env_done(&e);
}

/* fit: the input itself when it is valid and short enough (no copy, nothing counted);
 * otherwise the repaired, cut copy, counted. */
static void test_fit(void) {
    env e;
    env_init(&e, 8);
    const char *ok = "valid\xC3\xA9";
    size_t len = 7;
    CHECK(ppk__strtab_fit(&e.st, ok, &len) == ok);
    CHECK_EQ_U64(len, 7);
    CHECK_EQ_U64(e.st.fit.repaired + e.st.fit.truncated, 0);

    const char *bad = "x\xffy";
    len = 3;
    const char *got = ppk__strtab_fit(&e.st, bad, &len);
    CHECK(got != bad);
    CHECK_STR(got, len, "x\xEF\xBF\xBDy");
    CHECK_EQ_U64(e.st.fit.repaired, 1);

    const char *longer = "abcdefg\xC3\xA9";
    len = 9;
    got = ppk__strtab_fit(&e.st, longer, &len);
    CHECK_STR(got, len, "abcdefg");
    CHECK_EQ_U64(e.st.fit.truncated, 1);
    CHECK_EQ_U64(ppk__strtab_count(&e.st), 1); /* fit interns nothing */
    env_done(&e);
}

int main(void) {
    RUN(test_empty_string_is_id_zero);
    RUN(test_insertion_order_count_bytes);
    RUN(test_known_string_no_growth);
    RUN(test_utf8_repair);
    RUN(test_truncation_at_char_boundary);
    RUN(test_clear);
    RUN(test_intern_stable_no_copy);
    RUN(test_fit);
    return check_summary();
}
