/*
 * stack_cache.c - a window's cache from frame records to stacks: see stack_cache.h.
 */
#include "stack_cache.h"

#include <string.h>

/* Room for one more stack: 0 or PPK_ENOMEM. */
static int room(ppk__stack_cache *c, ppk__mem *mem) {
    size_t slots = ppk__stack_cache_slots(c);
    if (((size_t)c->n + 1) * 4 <= slots * 3) return 0;
    size_t ns = slots ? 2 * slots : 32;
    ppk__stack_slot *fresh = ppk__mem_alloc_array(mem, ns, sizeof *fresh);
    if (!fresh) return PPK_ENOMEM;
    memset(fresh, 0, ns * sizeof *fresh);
    for (size_t i = 0; i < slots; i++)
        if (c->slots[i].recs)
            *ppk__stack_slot_of(fresh, (uint32_t)(ns - 1), c->slots[i].hash) = c->slots[i];
    ppk__mem_free(mem, c->slots, slots * sizeof *fresh);
    c->slots = fresh;
    c->mask = (uint32_t)(ns - 1);
    return 0;
}

int ppk__stack_cache_put(ppk__stack_cache *c, ppk__mem *mem, ppk__arena *arena, uint64_t hash,
                         const uint32_t *rec_ids, size_t n, uint32_t stack) {
    if (room(c, mem)) return PPK_ENOMEM;
    ppk__stack_slot *s = ppk__stack_slot_of(c->slots, c->mask, hash);
    if (s->recs) return PPK_EINVAL; /* another stack with this hash */
    uint32_t *recs = ppk__arena_alloc(arena, (n + 2) * sizeof *recs, 4);
    if (!recs) return PPK_ENOMEM;
    recs[0] = (uint32_t)n;
    recs[1] = stack;
    memcpy(recs + 2, rec_ids, n * sizeof *recs);
    s->hash = hash;
    s->recs = recs;
    s->stack = stack;
    c->n++;
    return 0;
}

void ppk__stack_cache_reset(ppk__stack_cache *c, ppk__mem *mem, size_t used) {
    size_t want = 32;
    while (want * 3 < 2 * used * 4) want *= 2; /* room for twice as many */
    if (ppk__stack_cache_slots(c) > 4 * want) {
        ppk__stack_cache_destroy(c, mem);
    } else if (c->slots) {
        memset(c->slots, 0, ppk__stack_cache_slots(c) * sizeof *c->slots);
    }
    c->n = 0;
}

void ppk__stack_cache_destroy(ppk__stack_cache *c, ppk__mem *mem) {
    ppk__mem_free(mem, c->slots, ppk__stack_cache_slots(c) * sizeof *c->slots);
    c->slots = NULL;
    c->mask = 0;
    c->n = 0;
}
