/*
 * strtab.c - the string table of one window: see strtab.h.
 */
#include "strtab.h"

#include <assert.h>

#include "utf8.h"

int ppk__strtab_init(ppk__strtab *st, ppk__mem *mem, ppk__arena *arena, size_t max_len) {
    assert(max_len >= 4);
    ppk__dict_init(&st->d, mem, arena);
    st->max_len = max_len;
    st->fit = (ppk__fit_counts){0, 0};
    st->scratch = ppk__mem_alloc(mem, max_len);
    if (!st->scratch || ppk__dict_reserve(&st->d, 1) != 0) {
        ppk__strtab_destroy(st);
        return PPK_ENOMEM;
    }
    ppk__dict_intern(&st->d, "", 0, ppk__hash("", 0), 1, NULL);
    return 0;
}

void ppk__strtab_destroy(ppk__strtab *st) {
    if (st->scratch) ppk__mem_free(st->d.mem, st->scratch, st->max_len);
    st->scratch = NULL;
    ppk__dict_destroy(&st->d);
}

void ppk__strtab_clear(ppk__strtab *st) {
    ppk__dict_clear(&st->d);
    ppk__dict_intern(&st->d, "", 0, ppk__hash("", 0), 1, NULL);
    st->fit = (ppk__fit_counts){0, 0};
}

const char *ppk__strtab_fit(ppk__strtab *st, const char *s, size_t *len) {
    return (const char *)ppk__utf8_fit((const uint8_t *)s, len, st->max_len, st->scratch,
                                       &st->fit);
}

uint32_t ppk__strtab_intern(ppk__strtab *st, const char *s, size_t len) {
    if (len == 0) return 0;
    return ppk__dict_intern(&st->d, s, len, ppk__hash(s, len), 1, NULL);
}

uint32_t ppk__strtab_intern_stable(ppk__strtab *st, const char *s, size_t len) {
    return ppk__dict_intern(&st->d, s, len, ppk__hash(s, len), 0, NULL);
}

uint32_t ppk__strtab_find(const ppk__strtab *st, const char *s, size_t len) {
    return ppk__dict_find(&st->d, s, len, ppk__hash(s, len));
}
