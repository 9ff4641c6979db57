/*
 * keys.c - a growable byte buffer and numbered keys for the pprofkit command: keys.h.
 */
#include "keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

void pk_put(pk_buf *b, const void *s, size_t n) {
    if (n > b->cap - b->len) {
        if (n > SIZE_MAX / 4 - b->len) {
            fprintf(stderr, "pprofkit %s: out of memory\n", pk_cmd);
            exit(1);
        }
        b->cap = 2 * (b->len + n) + 256;
        b->p = pk_xrealloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
}

void pk_puts(pk_buf *b, const char *s) { pk_put(b, s, strlen(s)); }

void pk_put_u64(pk_buf *b, uint64_t v) {
    char d[24];
    int n = snprintf(d, sizeof d, "%llu", (unsigned long long)v);
    pk_put(b, d, (size_t)n);
}

static uint64_t hash(const void *p, size_t n) {
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

const void *pk_key_at(const pk_keys *k, uint32_t id, size_t *len) {
    size_t start = id ? k->end[id - 1] : 0;
    *len = k->end[id] - start;
    return k->bytes.p ? k->bytes.p + start : ""; /* only empty keys so far: no bytes */
}

ppk_str pk_key_str(const pk_keys *k, uint32_t id) {
    size_t len;
    const char *p = pk_key_at(k, id, &len);
    return (ppk_str){p, len};
}

uint32_t pk_key_id(pk_keys *k, const void *p, size_t n) {
    if (2 * ((size_t)k->n + 1) > k->nslot) {
        size_t ns = k->nslot ? 2 * k->nslot : 256;
        uint32_t *sl = pk_xrealloc(NULL, ns * sizeof *sl);
        memset(sl, 0, ns * sizeof *sl);
        for (uint32_t i = 0; i < k->n; i++) {
            size_t len;
            const void *kp = pk_key_at(k, i, &len);
            size_t j = hash(kp, len) & (ns - 1);
            while (sl[j]) j = (j + 1) & (ns - 1);
            sl[j] = i + 1;
        }
        free(k->slot);
        k->slot = sl;
        k->nslot = ns;
    }
    size_t j = hash(p, n) & (k->nslot - 1);
    for (; k->slot[j]; j = (j + 1) & (k->nslot - 1)) {
        size_t len;
        const void *kp = pk_key_at(k, k->slot[j] - 1, &len);
        if (len == n && (n == 0 || memcmp(kp, p, n) == 0)) return k->slot[j] - 1;
    }
    if (k->n == UINT32_MAX - 1) {
        fprintf(stderr, "pprofkit %s: more than %u distinct keys\n", pk_cmd, UINT32_MAX - 2);
        exit(1);
    }
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 256;
        k->end = pk_xrealloc(k->end, k->cap * sizeof *k->end);
    }
    pk_put(&k->bytes, p, n);
    k->end[k->n] = k->bytes.len;
    k->slot[j] = ++k->n;
    return k->n - 1;
}

void pk_keys_free(pk_keys *k) {
    free(k->bytes.p);
    free(k->end);
    free(k->slot);
}

int pk_str_cmp(ppk_str a, ppk_str b) {
    size_t n = a.len < b.len ? a.len : b.len;
    int c = n ? memcmp(a.ptr, b.ptr, n) : 0;
    return c ? c : (a.len > b.len) - (a.len < b.len);
}
