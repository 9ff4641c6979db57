/*
 * keys.h - the pprofkit command's growable byte buffer (pk_buf) and numbered keys
 * (pk_keys): byte strings numbered 0, 1, 2... in the order first given, found again by
 * their bytes (an open-addressing hash table over the numbers). Iterating by number is
 * iterating in insertion order, so what is built from them is deterministic.
 *
 * A key's bytes are copied in; pk_key_at's pointer is valid until the next pk_key_id on
 * the same keys. Memory comes from pk_xrealloc (exits when out of memory). A zeroed
 * pk_buf or pk_keys is empty and ready; single-threaded.
 */
#ifndef PPK_KEYS_H
#define PPK_KEYS_H

#include <pprofkit.h>

#include <stddef.h>
#include <stdint.h>

typedef struct pk_buf {
    char *p;
    size_t len, cap;
} pk_buf;

void pk_put(pk_buf *b, const void *s, size_t n);
void pk_puts(pk_buf *b, const char *s);
void pk_put_u64(pk_buf *b, uint64_t v); /* in decimal */

typedef struct pk_keys {
    pk_buf bytes;   /* the keys back to back */
    size_t *end;    /* key i is bytes[i ? end[i - 1] : 0, end[i]) */
    uint32_t n;     /* the number of keys: below UINT32_MAX */
    size_t cap;     /* of end */
    uint32_t *slot; /* key number + 1; 0 is empty */
    size_t nslot;   /* a power of two, at least twice n */
} pk_keys;

/* The number of the key of n bytes at p, added if new. */
uint32_t pk_key_id(pk_keys *k, const void *p, size_t n);
/* Key id's bytes and *len. */
const void *pk_key_at(const pk_keys *k, uint32_t id, size_t *len);
/* Key id as a string. */
ppk_str pk_key_str(const pk_keys *k, uint32_t id);
void pk_keys_free(pk_keys *k);

/* Byte strings' order (a prefix first): for valid UTF-8, the order of code points. */
int pk_str_cmp(ppk_str a, ppk_str b);

#endif
