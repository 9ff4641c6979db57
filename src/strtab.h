/*
 * strtab.h - the string table of one window.
 *
 * Interns text into dense uint32 ids in insertion order; id 0 is always "", as pprof's
 * string_table requires. Interning a known string returns its id and allocates nothing.
 * What goes in is already fit for pprof (valid UTF-8, at most max_len bytes): strings are
 * fitted once, where they enter the library (ppk__utf8_fit: a builder's record, the
 * function dictionary; ppk__strtab_fit for the profile's own calls, its repairs counted
 * here), and the window trusts them. A thin layer over ppk__dict (bytes in the window's
 * arena). Single-threaded.
 */
#ifndef PPK_STRTAB_H
#define PPK_STRTAB_H

#include "dict.h"
#include "utf8.h"

typedef struct ppk__strtab {
    ppk__dict d;
    size_t max_len;
    uint8_t *scratch; /* max_len bytes for repairs */
    ppk__fit_counts fit; /* repairs by ppk__strtab_fit */
} ppk__strtab;

/* 0 or PPK_ENOMEM. max_len >= 4. */
int ppk__strtab_init(ppk__strtab *st, ppk__mem *mem, ppk__arena *arena, size_t max_len);
void ppk__strtab_destroy(ppk__strtab *st);
/* Forgets every string but "" and zeroes the repair counters. Cannot fail. */
void ppk__strtab_clear(ppk__strtab *st);

/* The string made fit for pprof: `s` itself when valid and short enough, else its
 * repaired, cut copy in the table's scratch buffer (valid until the next call); *len is
 * updated and the repair counted. */
const char *ppk__strtab_fit(ppk__strtab *st, const char *s, size_t *len);
/* The id of a string already fit for pprof (every string is, where it enters the
 * library: a builder's record, the function dictionary, ppk__strtab_fit); PPK_DICT_NONE
 * when out of memory. */
uint32_t ppk__strtab_intern(ppk__strtab *st, const char *s, size_t len);
/* Interns a valid string of at most max_len bytes that outlives the table, without
 * copying it. Cannot fail while the table has room for it (see ppk__dict_reserve). */
uint32_t ppk__strtab_intern_stable(ppk__strtab *st, const char *s, size_t len);
/* The id of a string already in the table (as given: no repair), or PPK_DICT_NONE. */
uint32_t ppk__strtab_find(const ppk__strtab *st, const char *s, size_t len);

static inline const char *ppk__strtab_get(const ppk__strtab *st, uint32_t id, size_t *len) {
    uint32_t l;
    const uint8_t *k = ppk__dict_key(&st->d, id, &l);
    *len = l;
    return (const char *)k;
}
static inline uint32_t ppk__strtab_count(const ppk__strtab *st) { return st->d.n; }
static inline size_t ppk__strtab_bytes(const ppk__strtab *st) { return st->d.key_bytes; }

#endif
