/*
 * endpoints.c - a recorder's endpoint registrations, kept across windows (endpoints.h).
 */
#include "endpoints.h"

#include <string.h>

#include "dict.h"
#include "profile.h"
#include "sync.h"
#include "utf8.h"

/* What a registration costs against max_bytes besides its string. */
#define ENTRY_BYTES 32

struct ppk__ep {
    uint64_t span; /* 0: an empty slot (span ids are never 0) */
    char *str;
    size_t len;
    uint64_t last_used; /* the epoch it was last set in, or carried by a sample of */
    uint64_t carried;   /* 1 + the last epoch a sample carried it in; 0: none */
};

static const char SPAN_KEY[] = "local root span id";

int ppk__endpoints_init(ppk__endpoints *eps, const ppk_allocator *a, size_t max_n,
                        size_t max_bytes, uint32_t ttl, size_t max_len) {
    memset(eps, 0, sizeof *eps);
    ppk__mem_init(&eps->mem, a);
    eps->max_len = max_len;
    eps->max_n = max_n;
    eps->max_bytes = max_bytes;
    eps->ttl = ttl;
    return ppk__mutex_init(&eps->lock, 0);
}

static void free_slots(ppk__endpoints *eps, ppk__ep *slots, size_t cap) {
    for (size_t i = 0; i < cap; i++)
        if (slots[i].span) ppk__mem_free(&eps->mem, slots[i].str, slots[i].len ? slots[i].len : 1);
    ppk__mem_free(&eps->mem, slots, cap * sizeof *slots);
}

void ppk__endpoints_destroy(ppk__endpoints *eps) {
    if (eps->slots) free_slots(eps, eps->slots, eps->cap);
    eps->slots = NULL;
    pthread_mutex_destroy(&eps->lock);
}

static ppk__ep *find(ppk__ep *slots, size_t cap, uint64_t span) {
    size_t mask = cap - 1;
    for (size_t i = (size_t)ppk__hash(&span, sizeof span) & mask;; i = (i + 1) & mask)
        if (slots[i].span == span || !slots[i].span) return &slots[i];
}

/* Moves the live entries into a table of `cap` slots (a power of two, more than twice
 * their number). -1: no memory (nothing changed). */
static int rehash(ppk__endpoints *eps, size_t cap) {
    ppk__ep *fresh = ppk__mem_alloc_array(&eps->mem, cap, sizeof *fresh);
    if (!fresh) return -1;
    memset(fresh, 0, cap * sizeof *fresh);
    for (size_t i = 0; i < eps->cap; i++)
        if (eps->slots[i].span) *find(fresh, cap, eps->slots[i].span) = eps->slots[i];
    ppk__mem_free(&eps->mem, eps->slots, eps->cap * sizeof *eps->slots);
    eps->slots = fresh;
    eps->cap = cap;
    return 0;
}

int ppk__endpoints_set(ppk__endpoints *eps, uint64_t span, ppk_str endpoint) {
    /* Kept fitted for pprof (repaired, then cut at a character boundary) as a window
     * fits it: no need to keep more, and the window gets the same string as from
     * ppk_profile_set_endpoint. `fitted` (max_len bytes) only when that changes it. */
    const uint8_t *f = (const uint8_t *)endpoint.ptr;
    size_t len = endpoint.len;
    uint8_t *fitted = NULL;
    ppk__fit_counts fit = {0, 0};
    if (len > eps->max_len || !ppk__utf8_valid(f, len)) {
        fitted = ppk__mem_alloc(&eps->mem, eps->max_len);
        if (!fitted) return PPK_ENOMEM;
        f = ppk__utf8_fit(f, &len, eps->max_len, fitted, &fit);
    }
    int rc = 0;
    pthread_mutex_lock(&eps->lock);
    ppk__ep *e = eps->cap ? find(eps->slots, eps->cap, span) : NULL;
    int is_new = !e || !e->span;
    size_t old = is_new ? 0 : e->len + ENTRY_BYTES;
    if ((is_new && eps->n == eps->max_n) ||
        eps->bytes - old + len + ENTRY_BYTES > eps->max_bytes) {
        eps->dropped++;
        goto out;
    }
    char *s = ppk__mem_alloc(&eps->mem, len ? len : 1);
    if (!s || (is_new && (eps->n + 1) * 2 > eps->cap &&
               rehash(eps, eps->cap ? 2 * eps->cap : 64))) {
        if (s) ppk__mem_free(&eps->mem, s, len ? len : 1);
        rc = PPK_ENOMEM;
        goto out;
    }
    if (len) memcpy(s, f, len);
    eps->fit.repaired += fit.repaired;
    eps->fit.truncated += fit.truncated;
    e = find(eps->slots, eps->cap, span);
    if (e->span) {
        ppk__mem_free(&eps->mem, e->str, e->len ? e->len : 1);
        eps->bytes -= e->len + ENTRY_BYTES;
    } else {
        eps->n++;
    }
    *e = (ppk__ep){span, s, len, eps->epoch, 0};
    eps->bytes += len + ENTRY_BYTES;
out:
    pthread_mutex_unlock(&eps->lock);
    if (fitted) ppk__mem_free(&eps->mem, fitted, eps->max_len);
    return rc;
}

/* Marks the registrations the samples of ws[0..n) carry as used in this epoch. */
static void mark_used(ppk__endpoints *eps, ppk_profile *const *ws, size_t n) {
    for (size_t k = 0; k < n && eps->n; k++) {
        const ppk_profile *w = ws[k];
        uint32_t key = ppk__strtab_find(&w->strings, SPAN_KEY, sizeof SPAN_KEY - 1);
        if (key == PPK_DICT_NONE) continue;
        for (uint32_t id = 0; id < w->labels.n; id++) {
            ppk__label_rec l = ppk__label_get(w, id);
            if (l.key != key || !l.is_num || !l.num) continue;
            ppk__ep *e = find(eps->slots, eps->cap, (uint64_t)l.num);
            if (e->span) {
                e->last_used = eps->epoch;
                e->carried = eps->epoch + 1;
            }
        }
    }
}

void ppk__endpoints_to_windows(ppk__endpoints *eps, ppk_profile *const *ws, size_t n,
                               int copy) {
    pthread_mutex_lock(&eps->lock);
    mark_used(eps, ws, n);
    for (size_t i = 0; copy && i < eps->cap; i++) {
        const ppk__ep *e = &eps->slots[i];
        /* Only those a sample carries: the others would only add strings to the
         * profile. Past the window's budget, the window counts it (endpoints_dropped). */
        if (e->span && e->carried == eps->epoch + 1)
            ppk_profile_set_endpoint(ws[0], e->span, (ppk_str){e->str, e->len});
    }
    pthread_mutex_unlock(&eps->lock);
}

/* Neither set nor carried by a sample in the last ttl windows (the one ending now
 * included): last_used is the epoch of the last window it was set or used in. */
static int stale(const ppk__endpoints *eps, const ppk__ep *e) {
    return eps->epoch - e->last_used >= eps->ttl;
}

void ppk__endpoints_end_epoch(ppk__endpoints *eps) {
    pthread_mutex_lock(&eps->lock);
    /* The unused ones go; the others move to a new table (linear probing cannot leave
     * holes in a chain). Without memory for it, none goes this time. */
    size_t keep = 0;
    for (size_t i = 0; i < eps->cap; i++)
        keep += eps->slots[i].span && !stale(eps, &eps->slots[i]);
    if (keep < eps->n) {
        size_t cap = 64;
        while (cap < keep * 2 + 2) cap *= 2;
        ppk__ep *fresh = ppk__mem_alloc_array(&eps->mem, cap, sizeof *fresh);
        if (fresh) {
            memset(fresh, 0, cap * sizeof *fresh);
            for (size_t i = 0; i < eps->cap; i++) {
                ppk__ep *e = &eps->slots[i];
                if (!e->span) continue;
                if (!stale(eps, e)) {
                    *find(fresh, cap, e->span) = *e;
                    continue;
                }
                ppk__mem_free(&eps->mem, e->str, e->len ? e->len : 1);
                eps->bytes -= e->len + ENTRY_BYTES;
            }
            ppk__mem_free(&eps->mem, eps->slots, eps->cap * sizeof *eps->slots);
            eps->slots = fresh;
            eps->cap = cap;
            eps->n = keep;
        }
    }
    eps->epoch++;
    pthread_mutex_unlock(&eps->lock);
}

void ppk__endpoints_stats(ppk__endpoints *eps, ppk_recorder_stats *st) {
    pthread_mutex_lock(&eps->lock);
    st->endpoints = eps->n;
    st->endpoints_dropped += eps->dropped;
    st->strings_utf8_repaired += eps->fit.repaired;
    st->strings_truncated += eps->fit.truncated;
    pthread_mutex_unlock(&eps->lock);
}

/* ---- endpoint counts, for the export ----------------------------------------------- */

typedef struct count_copy {
    ppk_endpoint_count *at;
    char *text;
    size_t n, bytes;
} count_copy;

static void measure_count(void *opaque, ppk_str endpoint, int64_t count) {
    (void)count;
    count_copy *c = opaque;
    c->n++;
    c->bytes += endpoint.len;
}

static void copy_count(void *opaque, ppk_str endpoint, int64_t count) {
    count_copy *c = opaque;
    if (endpoint.len) memcpy(c->text, endpoint.ptr, endpoint.len);
    *c->at++ = (ppk_endpoint_count){{c->text, endpoint.len}, count};
    c->text += endpoint.len;
}

uint64_t ppk__endpoint_counts_copy(const ppk_profile *w, const ppk_allocator *a, ppk_export *e) {
    count_copy c = {0};
    ppk_profile_foreach_endpoint_count(w, measure_count, &c);
    if (!c.n) return 0;
    size_t n = c.n;
    uint8_t *block = ppk__bytes_alloc(a, n * sizeof(ppk_endpoint_count) + c.bytes);
    if (!block) return n;
    c.at = (ppk_endpoint_count *)(void *)block;
    c.text = (char *)block + n * sizeof(ppk_endpoint_count);
    ppk_profile_foreach_endpoint_count(w, copy_count, &c);
    e->endpoint_counts = (const ppk_endpoint_count *)(void *)block;
    e->n_endpoint_counts = n;
    return 0;
}
