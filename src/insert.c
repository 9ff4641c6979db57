/*
 * insert.c - adding a sample to a window: record caches, interning, aggregation, and
 * what happens when the window's memory budget is reached.
 *
 * A sample arrives as records (record.h). A known stack is found whole in the stack
 * cache (stack_cache.h); otherwise each frame record is looked up
 * in the window's frame cache (one probe and one compare when known); an unknown one is
 * decoded and interned field by field: strings, mapping, function, location (a frame
 * pushed by function id takes its strings from the recorder's dictionary, fdict.h, and
 * fails with PPK_ESTALE if the id was evicted since its push). Labels go
 * the same way through the label cache. Then the stack (location ids), the label set
 * (sorted label ids) and the sample (stack, label set) are interned, and the values
 * added (saturating).
 *
 * Two kinds of failure, kept apart:
 *   - The allocator fails (PPK_ENOMEM): every table is truncated back and the arena
 *     rolled back to where they were, so the call leaves the window unchanged (G7).
 *   - The budget says no (mem.limited, see alloc.h): detail degrades, totals stay (G4).
 *     A new string becomes the placeholder "[pprofkit: memory limit]"; a label that
 *     cannot be added is left out, a label set that cannot be added becomes the empty
 *     one; a stack that cannot be resolved becomes the one-frame overflow stack; a
 *     sample that cannot be added gives its values to the overflow sample (overflow
 *     stack, no labels); a timestamped sample that cannot be kept is aggregated. Each
 *     is counted by reason. The overflow stack and sample are made at most once per
 *     window, allowed past the budget (one chunk and 4 KiB at most).
 *
 * Not thread safe: the caller (or the recorder's lock) serializes calls on a window.
 */
#include <stdio.h>
#include <string.h>

#include "fdict.h"
#include "profile.h"

static const char END_TS_KEY[] = "end_timestamp_ns";

/* Internal result: the budget refused; the caller degrades. */
#define LIMIT 1

/* After a failed allocation: LIMIT if the budget refused it, else PPK_ENOMEM. */
static int why(ppk_profile *p) {
    if (!p->mem.limited) return PPK_ENOMEM;
    p->mem.limited = 0;
    return LIMIT;
}

/* A string id; over budget, the placeholder's. */
static int str_id(ppk_profile *p, ppk__degraded *dg, ppk_str s, uint32_t *id) {
    *id = ppk__strtab_intern(&p->strings, s.ptr, s.len);
    if (*id != PPK_DICT_NONE) return 0;
    int rc = why(p);
    if (rc != LIMIT) return rc;
    dg->strings_dropped++;
    if (p->ids.placeholder == PPK_DICT_NONE) {
        p->mem.over_ok = 1;
        p->ids.placeholder = ppk__strtab_intern(&p->strings, PPK__PLACEHOLDER,
                                            sizeof PPK__PLACEHOLDER - 1);
        p->mem.over_ok = 0;
        if (p->ids.placeholder == PPK_DICT_NONE) return PPK_ENOMEM;
    }
    *id = p->ids.placeholder;
    return 0;
}

/* The id of record `rec` in d: 0, LIMIT or PPK_ENOMEM; *is_new (may be NULL) tells
 * whether d had it before. */
static int rec_id_new(ppk_profile *p, ppk__dict *d, const void *rec, size_t len,
                      size_t align, uint32_t *id, int *is_new) {
    *id = ppk__dict_intern(d, rec, len, ppk__hash(rec, len), align, is_new);
    return *id == PPK_DICT_NONE ? why(p) : 0;
}

static int rec_id(ppk_profile *p, ppk__dict *d, const void *rec, size_t len, size_t align,
                  uint32_t *id) {
    return rec_id_new(p, d, rec, len, align, id, NULL);
}

/* The location of a frame: 0, LIMIT or PPK_ENOMEM. */
static int frame_id(ppk_profile *p, ppk__degraded *dg, const ppk_frame *f, uint32_t *loc) {
    ppk__location_rec lr;
    memset(&lr, 0, sizeof lr);
    uint32_t id;
    int rc;
    if (f->mapping) {
        const ppk_mapping *m = f->mapping;
        ppk__mapping_rec mr;
        memset(&mr, 0, sizeof mr);
        mr.memory_start = m->memory_start;
        mr.memory_limit = m->memory_limit;
        mr.file_offset = m->file_offset;
        if ((rc = str_id(p, dg, m->filename, &mr.filename)) ||
            (rc = str_id(p, dg, m->build_id, &mr.build_id)) ||
            (rc = rec_id(p, &p->mappings, &mr, sizeof mr, 8, &id)))
            return rc;
        lr.mapping = id + 1;
    }
    if (f->name.len || f->system_name.len || f->filename.len || f->start_line) {
        ppk__function_rec fr;
        memset(&fr, 0, sizeof fr);
        fr.start_line = f->start_line;
        if ((rc = str_id(p, dg, f->name, &fr.name)) ||
            (rc = str_id(p, dg, f->system_name, &fr.system_name)) ||
            (rc = str_id(p, dg, f->filename, &fr.filename)) ||
            (rc = rec_id(p, &p->functions, &fr, sizeof fr, 8, &id)))
            return rc;
        lr.function = id + 1;
    }
    lr.address = f->address;
    lr.line = f->line;
    return rec_id(p, &p->locations, &lr, sizeof lr, 8, loc);
}

/* Remembers that record `rec` resolves to `value` (`size` bytes) in cache `d`, whose
 * values by id are an array at the pointer `values` points to; *cached is its id there.
 * Over budget the record is simply not cached (*cached PPK_DICT_NONE). */
static int cache(ppk_profile *p, ppk__dict *d, void *values, size_t *cap, size_t size,
                 const uint8_t *rec, size_t len, uint64_t hash, const void *value,
                 uint32_t *cached) {
    *cached = PPK_DICT_NONE;
    void *arr;
    memcpy(&arr, values, sizeof arr); /* the array's own pointer type, read as void * */
    if (ppk__grow(&p->mem, &arr, cap, d->n, (size_t)d->n + 1, size))
        return why(p) == LIMIT ? 0 : PPK_ENOMEM;
    memcpy(values, &arr, sizeof arr);
    uint32_t id = ppk__dict_intern(d, rec, len, hash, 8, NULL);
    if (id == PPK_DICT_NONE) return why(p) == LIMIT ? 0 : PPK_ENOMEM;
    memcpy((uint8_t *)arr + (size_t)id * size, value, size);
    *cached = id;
    return 0;
}

/* Whether `rec` (len bytes) is a 16-byte record by id. */
static int is_id16(const uint8_t *rec, size_t len) {
    uint32_t kind;
    memcpy(&kind, rec, sizeof kind);
    return len == sizeof(ppk__idrec) && kind == PPK__FREC_ID16;
}

/* The frame_recs id of record `rec` (ppk__hash `hash`), or PPK_DICT_NONE. A 16-byte
 * record by id is compared with the dense copy beside its location (one read, where
 * the dict would read its entry and then the key it points to). */
static uint32_t frame_rec_find(const ppk_profile *p, const uint8_t *rec, size_t len,
                               uint64_t hash) {
    if (!is_id16(rec, len) || !p->frame_recs.slots)
        return ppk__dict_find(&p->frame_recs, rec, len, hash);
    uint32_t i = ppk__dict_slot(&p->frame_recs, hash), id;
    while ((id = ppk__dict_next_id(&p->frame_recs, hash, &i)) != PPK_DICT_NONE)
        if (ppk__eq16(rec, p->frame_val[id].id16)) break;
    return id;
}

/* The location of a frame record whose ppk__hash is `hash`; *rid its frame_recs id, or
 * PPK_DICT_NONE if it could not be cached. */
static int frame_rec_loc(ppk_profile *p, ppk__degraded *dg, const uint8_t *rec, size_t len,
                         uint64_t hash, uint32_t *loc, uint32_t *rid) {
    uint32_t id = frame_rec_find(p, rec, len, hash);
    if (id != PPK_DICT_NONE) {
        *loc = p->frame_val[id].loc;
        *rid = id;
        return 0;
    }
    ppk_frame f;
    ppk_mapping m;
    uint64_t fid;
    ppk__record_read_frame(rec, &f, &m, &fid);
    int rc;
    if (fid) {
        /* The function's strings are the dictionary's while its lock is held. */
        if (!p->fdict) return PPK_ESTALE;
        ppk__fdict_lock(p->fdict);
        /* A window checks an id (and marks its function used in the epoch) when it
         * first meets the frame: ppk_sample_push_frames_id leaves that to it. */
        rc = ppk__fdict_check(p->fdict, fid);
        if (!rc) rc = ppk__fdict_get_locked(p->fdict, fid, &f);
        if (!rc) rc = frame_id(p, dg, &f, loc);
        ppk__fdict_unlock(p->fdict);
    } else {
        rc = frame_id(p, dg, &f, loc);
    }
    if (rc) return rc;
    ppk__frame_val v;
    memset(&v, 0, sizeof v);
    if (is_id16(rec, len)) memcpy(v.id16, rec, len);
    v.loc = *loc;
    return cache(p, &p->frame_recs, &p->frame_val, &p->frame_val_cap, sizeof v, rec,
                 len, hash, &v, rid);
}

/* The one-frame stack "[pprofkit: memory limit]", made once per window past budget. */
static int overflow_stack(ppk_profile *p, ppk__degraded *dg, uint32_t *stack) {
    if (p->ids.overflow_stack == PPK_DICT_NONE) {
        ppk_frame f;
        memset(&f, 0, sizeof f);
        f.name.ptr = PPK__PLACEHOLDER;
        f.name.len = sizeof PPK__PLACEHOLDER - 1;
        uint32_t loc;
        p->mem.over_ok = 1;
        int rc = frame_id(p, dg, &f, &loc);
        if (!rc) rc = rec_id(p, &p->stacks, &loc, sizeof loc, 4, &p->ids.overflow_stack);
        p->mem.over_ok = 0;
        if (rc) return PPK_ENOMEM;
    }
    *stack = p->ids.overflow_stack;
    return 0;
}

#define FRAME_BLOCK 16

/* The sample's stack, frame by frame (not found in the stack cache). *cacheable tells
 * whether it may be put in the cache (every frame record cached, nothing omitted). */
static int stack_id(ppk_profile *p, ppk__degraded *dg, const ppk__recs *r, uint32_t *stack,
                    int *cacheable) {
    size_t n = r->n_frames;
    *cacheable = 0;
    int all = n && !r->omitted, rc = 0;
    /* A block of frames at a time: their hashes first and their slots in frame_recs
     * fetched together, so that the lookups' cache misses overlap. */
    for (size_t b = 0; !rc && b < n; b += FRAME_BLOCK) {
        size_t m = n - b < FRAME_BLOCK ? n - b : FRAME_BLOCK;
        uint64_t h[FRAME_BLOCK];
        for (size_t j = 0; j < m; j++) {
            h[j] = ppk__hash(r->buf + r->frames[b + j].off, r->frames[b + j].len);
            ppk__dict_prefetch(&p->frame_recs, h[j]);
        }
        for (size_t i = b; !rc && i < b + m; i++) {
            rc = frame_rec_loc(p, dg, r->buf + r->frames[i].off, r->frames[i].len, h[i - b],
                               &p->stack_buf[i], &p->rec_buf[i]);
            all &= p->rec_buf[i] != PPK_DICT_NONE;
        }
    }
    if (!rc && r->omitted) {
        char name[64];
        ppk_frame f;
        memset(&f, 0, sizeof f);
        f.name.ptr = name;
        f.name.len = (size_t)snprintf(name, sizeof name, "<%zu frames omitted>", r->omitted);
        /* ASCII: cut at any byte, as every string is cut at max_string_len. */
        if (f.name.len > p->strings.max_len) f.name.len = p->strings.max_len;
        rc = frame_id(p, dg, &f, &p->stack_buf[n++]);
    }
    if (!rc) rc = rec_id(p, &p->stacks, p->stack_buf, n * sizeof(uint32_t), 4, stack);
    if (!rc) *cacheable = all;
    if (rc != LIMIT) return rc;
    dg->stacks_dropped++;
    return overflow_stack(p, dg, stack);
}

/* The label id of `l` (stored as a ppk__label_key); *is_new tells whether the window
 * had it before. */
static int label_id(ppk_profile *p, ppk__degraded *dg, const ppk_label *l, uint32_t *id,
                    int *is_new) {
    ppk__label_key lk;
    memset(&lk, 0, sizeof lk);
    size_t len = PPK__LABEL_STR_BYTES;
    int rc = str_id(p, dg, l->key, &lk.key);
    if (rc) return rc;
    if (l->is_num) {
        len = PPK__LABEL_NUM_BYTES;
        lk.num = l->num;
        rc = str_id(p, dg, l->num_unit, &lk.str);
    } else {
        rc = str_id(p, dg, l->str, &lk.str);
    }
    if (rc) return rc;
    size_t align = len == PPK__LABEL_STR_BYTES ? 4 : 8;
    *id = ppk__dict_intern(&p->labels, &lk, len, ppk__hash(&lk, len), align, is_new);
    return *id == PPK_DICT_NONE ? why(p) : 0;
}

/* A label record is cached on its second sighting only: when its label is already in
 * the window. A label seen once (a unique task name, a request id) would otherwise
 * leave a copy of its record and a cache entry that nothing ever hits (a third of a W1
 * storm window); a label seen twice costs one more uncached lookup. *rid is the
 * record's label_recs id, or PPK_DICT_NONE if it is not cached. */
static int label_rec_id(ppk_profile *p, ppk__degraded *dg, const uint8_t *rec,
                        const ppk__rec *r, uint32_t *out, uint32_t *rid) {
    *rid = ppk__dict_find(&p->label_recs, rec, r->len, r->hash);
    if (*rid != PPK_DICT_NONE) {
        *out = p->label_of[*rid];
        return 0;
    }
    ppk_label l;
    ppk__record_read_label(rec, &l);
    int is_new = 0;
    int rc = label_id(p, dg, &l, out, &is_new);
    if (rc || is_new) return rc;
    return cache(p, &p->label_recs, &p->label_of, &p->label_of_cap, sizeof *out, rec,
                 r->len, r->hash, out, rid);
}

/* Whether label `id` has the placeholder as its key. */
static int placeholder_key(const ppk_profile *p, uint32_t id) {
    return p->ids.placeholder != PPK_DICT_NONE &&
           ppk__label_get(p, id).key == p->ids.placeholder;
}

/* Label set cache entries a window keeps, at most, per label set it holds: a set is
 * cached under the order its labels were pushed in, so a program that pushes one set's
 * labels in many orders would otherwise fill the window's budget with entries. */
#define SETC_PER_SET 2

/* The sample's label set: from the set cache, or label by label. *cacheable tells
 * whether the set may be put in the cache: it has labels, every label record is cached
 * and none was left out, the window had the set before (a set seen once, such as one
 * with a unique task name's label whose record is cached, would leave an entry that
 * nothing hits), and the cache is within SETC_PER_SET entries a set. */
static int label_set_id(ppk_profile *p, ppk__degraded *dg, const ppk__recs *r,
                        uint32_t *set, int *cacheable) {
    *cacheable = 0;
    const uint32_t *e = r->n_labels ? ppk__stack_cache_find(&p->setc, r->labels_hash) : NULL;
    if (e && (*set = ppk__set_cache_match(e, &p->label_recs, r)) != PPK_DICT_NONE) return 0;
    uint32_t *b = p->label_buf;
    size_t n = 0;
    int placeholder_seen = 0, all = 1;
    for (size_t i = 0; i < r->n_labels; i++) {
        int rc = label_rec_id(p, dg, r->buf + r->labels[i].off, &r->labels[i], &b[n],
                              &p->lrec_buf[i]);
        all &= p->lrec_buf[i] != PPK_DICT_NONE;
        if (rc && rc != LIMIT) return rc;
        /* Keys are distinct, but two new ones past the budget both become the
         * placeholder: the second is left out, so no key appears twice. */
        if (!rc && placeholder_key(p, b[n]) && placeholder_seen++) rc = LIMIT;
        if (rc == LIMIT)
            dg->labels_dropped++;
        else
            n++;
    }
    /* Sorted label ids: the same labels in any order make the same set. */
    for (size_t i = 1; i < n; i++) {
        uint32_t v = b[i];
        size_t j = i;
        for (; j > 0 && b[j - 1] > v; j--) b[j] = b[j - 1];
        b[j] = v;
    }
    int is_new = 1;
    int rc = rec_id_new(p, &p->label_sets, b, n * sizeof(uint32_t), 4, set, &is_new);
    if (rc != LIMIT) {
        *cacheable = !rc && all && n && n == r->n_labels && !is_new &&
                     p->setc.n < SETC_PER_SET * (size_t)p->label_sets.n;
        return rc;
    }
    dg->label_sets_dropped++;
    if (p->ids.empty_set == PPK_DICT_NONE) {
        p->mem.over_ok = 1;
        rc = rec_id(p, &p->label_sets, "", 0, 4, &p->ids.empty_set);
        p->mem.over_ok = 0;
        if (rc) return PPK_ENOMEM;
    }
    *set = p->ids.empty_set;
    return 0;
}

static uint64_t sample_hash(uint32_t stack, uint32_t set) {
    ppk__sample_rec sr = {stack, set};
    return ppk__hash(&sr, sizeof sr);
}

/* The aggregated sample (stack, set), whose sample_hash() is `hash`: 0, LIMIT or
 * PPK_ENOMEM. */
static int sample_id(ppk_profile *p, uint32_t stack, uint32_t set, uint64_t hash,
                     uint32_t *id) {
    size_t nt = p->n_types;
    size_t headroom = p->mem.over_ok ? 0 : PPK_DICT_HEADROOM; /* as the samples dict's */
    size_t need = (size_t)p->samples.n + 1 + headroom;
    if (need > p->values_cap) {
        void *arr = p->values;
        if (ppk__grow(&p->mem, &arr, &p->values_cap, p->samples.n, need, nt * sizeof(int64_t)))
            return why(p);
        p->values = arr;
    }
    ppk__sample_rec sr = {stack, set};
    int is_new;
    *id = ppk__dict_intern(&p->samples, &sr, sizeof sr, hash, 4, &is_new);
    if (*id == PPK_DICT_NONE) return why(p);
    if (is_new) memset(&p->values[(size_t)*id * nt], 0, nt * sizeof(int64_t));
    return 0;
}

/* Keeps a timestamped sample on its own: 0, LIMIT or PPK_ENOMEM. */
static int keep_timestamped(ppk_profile *p, const ppk__recs *r, uint32_t stack, uint32_t set) {
    size_t nt = p->n_types;
    if (!p->ids.end_ts_key &&
        ppk__profile_key(p, END_TS_KEY, sizeof END_TS_KEY - 1, &p->ids.end_ts_key))
        return PPK_ENOMEM;
    void *ts = p->ts, *tv = p->ts_values;
    int fail = ppk__grow(&p->mem, &ts, &p->ts_cap, p->ts_n, p->ts_n + 1, sizeof *p->ts);
    p->ts = ts;
    if (!fail)
        fail = ppk__grow(&p->mem, &tv, &p->ts_values_cap, p->ts_n, p->ts_n + 1,
                         nt * sizeof(int64_t));
    p->ts_values = tv;
    if (fail) return why(p);
    ppk__ts_sample *t = &p->ts[p->ts_n];
    t->stack = stack;
    t->label_set = set;
    t->timestamp_ns = r->timestamp_ns;
    memcpy(&p->ts_values[p->ts_n * nt], r->values, nt * sizeof(int64_t));
    p->ts_n++;
    return 0;
}

/* The sample's stack and label set. A stack the cache may hold is matched after the
 * labels: its entry is fetched while they are resolved, and the sample map's slot for
 * (its stack, the set) while its frames are compared (all likely cache misses; the
 * caller fetched the caches' slots). A stack not cached is resolved first, so that its
 * strings are interned before the labels'. *stack_new and *set_new tell which of them
 * may be put in their caches. */
static int stack_and_set(ppk_profile *p, ppk__degraded *dg, const ppk__recs *r,
                         uint32_t *stack, uint32_t *set, int *stack_new, int *set_new,
                         uint64_t *hash) {
    const ppk__stack_slot *s =
        r->n_frames && !r->omitted ? ppk__stack_cache_slot(&p->sc, r->stack_hash) : NULL;
    const uint32_t *e = s ? s->recs : NULL;
    int rc;
    *stack = PPK_DICT_NONE;
    *stack_new = 0;
    if (e) {
        ppk__stack_entry_prefetch(e, r->n_frames);
        if ((rc = label_set_id(p, dg, r, set, set_new))) return rc;
        *hash = sample_hash(s->stack, *set);
        ppk__dict_prefetch(&p->samples, *hash);
        *stack = ppk__stack_cache_match(e, &p->frame_recs, p->frame_val, r);
        if (*stack != s->stack) *hash = 0;
    }
    if (*stack == PPK_DICT_NONE && (rc = stack_id(p, dg, r, stack, stack_new))) return rc;
    return e ? 0 : label_set_id(p, dg, r, set, set_new);
}

static int insert(ppk_profile *p, ppk__degraded *dg, const ppk__recs *r) {
    uint32_t stack, set, id;
    int rc, stack_new, set_new;
    uint64_t hash = 0; /* sample_hash(stack, set), when stack_and_set computed it */
    if ((rc = stack_and_set(p, dg, r, &stack, &set, &stack_new, &set_new, &hash))) return rc;
    uint32_t resolved = stack;
    if (r->timestamp_ns) {
        rc = keep_timestamped(p, r, stack, set);
        if (rc != LIMIT) return rc;
        dg->timestamps_dropped++; /* aggregated instead */
    }
    rc = sample_id(p, stack, set, hash ? hash : sample_hash(stack, set), &id);
    if (rc == LIMIT) {
        dg->samples_overflowed++;
        if ((rc = overflow_stack(p, dg, &stack))) return rc;
        if (p->ids.overflow_sample == PPK_DICT_NONE) {
            p->mem.over_ok = 1;
            if (p->ids.empty_set == PPK_DICT_NONE)
                rc = rec_id(p, &p->label_sets, "", 0, 4, &p->ids.empty_set);
            if (!rc)
                rc = sample_id(p, stack, p->ids.empty_set, sample_hash(stack, p->ids.empty_set),
                               &p->ids.overflow_sample);
            p->mem.over_ok = 0;
            if (rc) return PPK_ENOMEM;
        }
        id = p->ids.overflow_sample;
    } else if (rc) {
        return rc;
    }
    /* Nothing below can fail: the values are added only once the sample exists. */
    int64_t *v = &p->values[(size_t)id * p->n_types];
    for (size_t i = 0; i < p->n_types; i++)
        v[i] = ppk__sat_add(v[i], r->values[i], &dg->values_saturated);
    /* Not cached (no room, the hash taken): the next sample of this stack resolves it
     * frame by frame, of this set label by label. */
    if (stack_new && ppk__stack_cache_put(&p->sc, &p->mem, &p->arena, r->stack_hash, p->rec_buf,
                                          r->n_frames, resolved))
        p->mem.limited = 0;
    if (set_new && ppk__stack_cache_put(&p->setc, &p->mem, &p->arena, r->labels_hash,
                                        p->lrec_buf, r->n_labels, set))
        p->mem.limited = 0;
    return 0;
}

int ppk__profile_add_recs(ppk_profile *p, const ppk__recs *r) {
    /* The caches' slots, likely cache misses, fetched while the undo record is made. */
    ppk__stack_cache_prefetch(&p->sc, r->stack_hash);
    ppk__stack_cache_prefetch(&p->setc, r->labels_hash);
    ppk__undo u;
    ppk__undo_save(p, &u);
    ppk__degraded dg;
    memset(&dg, 0, sizeof dg);
    /* Written only when they change: with several threads the window's lines move
     * between cores at every write. */
    if (p->mem.limited) p->mem.limited = 0;
    int rc = insert(p, &dg, r);
    if (rc) {
        ppk__undo_restore(p, &u);
        return rc;
    }
    p->samples_added++;
    dg.stacks_truncated = r->omitted != 0;
    dg.strings_utf8_repaired = r->fit.repaired;
    dg.strings_truncated = r->fit.truncated;
    static const ppk__degraded none;
    if (memcmp(&dg, &none, sizeof dg) != 0) ppk__degraded_add(&p->deg, &dg);
    return 0;
}
