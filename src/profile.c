/*
 * profile.c - one aggregation window: creating it, ppk_profile_add, undo, reset,
 * endpoints, upscaling rules and statistics. The window's tables are described in
 * profile.h; inserting a sample is insert.c; encoding is pprof.c.
 *
 * ppk_profile_add checks the sample and builds it as records with a builder of the
 * window's own (sbuf.h), which validates and copies every frame and label (no change
 * on bad input); insert.c then adds the records. When memory runs out halfway, every
 * table is truncated back to the counts it had before the call and the arena is rolled
 * back to its mark (the undo below), so a failed call leaves the window exactly as it
 * was (G7).
 *
 * Not thread safe: the caller (or the recorder) serializes calls on one profile.
 */
#include "profile.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sbuf.h"
#include "utf8.h"

#define PPK_GROW(m, arr, cap, used, need)                                                  \
    grow_((m), (void **)&(arr), sizeof *(arr), &(cap), (used), (need))

/* A wrapper that keeps the typed pointer the only lvalue of its type. */
static int grow_(ppk__mem *m, void **arr, size_t size, size_t *cap, size_t used, size_t need) {
    void *tmp;
    memcpy(&tmp, arr, sizeof tmp);
    int rc = ppk__grow(m, &tmp, cap, used, need, size);
    memcpy(arr, &tmp, sizeof tmp);
    return rc;
}

static const char ENDPOINT_KEY[] = "trace endpoint";

#define MAX_STRING_LIMIT ((size_t)1 << 24)
#define MAX_FRAMES_LIMIT ((size_t)1 << 16)
#define MAX_LABELS_LIMIT ((size_t)1024)
#define MIN_MEMORY_LIMIT ((size_t)64 * 1024)
#define MAX_CHUNK_SIZE ((size_t)1 << 30)

void ppk_profile_config_init(ppk_profile_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->max_string_len = 4096;
    cfg->max_frames = 512;
    cfg->max_labels = 32;
    cfg->chunk_size = 256 * 1024;
    cfg->keep_bytes = 8 * 1024 * 1024;
    cfg->memory_limit = 64 * 1024 * 1024;
}

static int str_ok(ppk_str s) { return s.ptr != NULL || s.len == 0; }

/* Every table but the string table (which strtab.c manages), in a fixed order. */
#define COUNT(table) +1
#define N_TABLES (0 PPK__TABLES(COUNT))
_Static_assert(N_TABLES + 1 == sizeof ((ppk__undo *)0)->n / sizeof(uint32_t),
               "an undo record counts every table and the string table");
static void tables(ppk_profile *p, ppk__dict *t[N_TABLES]) {
#define ADDRESS(table) &p->table,
    ppk__dict *all[N_TABLES] = {PPK__TABLES(ADDRESS)};
#undef ADDRESS
    memcpy(t, all, sizeof all);
}

/* Config strings must be valid and short enough: they are interned without repair. */
/* The room a config string takes once fitted for pprof, as every string is (repaired,
 * cut to max_len): at most max_len. */
static size_t cfg_fit_room(ppk_str s, size_t max_len) {
    return s.len <= max_len && ppk__utf8_valid((const uint8_t *)s.ptr, s.len) ? s.len : max_len;
}

/* Interns the strings every window starts with, in a fixed order: stable strings (no
 * arena), past the budget if need be. The string table has room for them from create
 * on and never shrinks below it, so after a reset this cannot fail. Returns 0, or
 * PPK_ENOMEM at create. */
static int intern_fixed(ppk_profile *p) {
    ppk__strtab *st = &p->strings;
    p->mem.over_ok = 1;
    uint32_t bad = 0;
    for (size_t i = 0; i < p->n_types; i++) {
        const ppk_value_type *t = &p->cfg.sample_types[i];
        bad |= (p->type_ids[i] = ppk__strtab_intern_stable(st, t->type.ptr, t->type.len)) ==
               PPK_DICT_NONE;
        bad |= (p->unit_ids[i] = ppk__strtab_intern_stable(st, t->unit.ptr, t->unit.len)) ==
               PPK_DICT_NONE;
    }
    const ppk_value_type *pt = &p->cfg.period_type;
    bad |= (p->period_type_id = ppk__strtab_intern_stable(st, pt->type.ptr, pt->type.len)) ==
           PPK_DICT_NONE;
    bad |= (p->period_unit_id = ppk__strtab_intern_stable(st, pt->unit.ptr, pt->unit.len)) ==
           PPK_DICT_NONE;
    p->mem.over_ok = 0;
    p->ids.end_ts_key = p->ids.endpoint_key = 0;
    p->ids.placeholder = p->ids.empty_set = PPK_DICT_NONE;
    p->ids.overflow_stack = p->ids.overflow_sample = PPK_DICT_NONE;
    return bad ? PPK_ENOMEM : 0;
}

int ppk__profile_key(ppk_profile *p, const char *key, size_t len, uint32_t *id) {
    p->mem.over_ok = 1;
    *id = ppk__strtab_intern_stable(&p->strings, key, len);
    p->mem.over_ok = 0;
    return *id == PPK_DICT_NONE ? PPK_ENOMEM : 0;
}

/* Copies `s`, fitted for pprof (the repairs counted like any string's), into the config
 * text at *pos. */
static ppk_str cfg_copy(ppk_profile *p, size_t *pos, ppk_str s) {
    uint8_t *to = (uint8_t *)p->cfg_text + *pos;
    size_t n = s.len;
    const uint8_t *f = ppk__utf8_fit((const uint8_t *)s.ptr, &n, p->strings.max_len, to,
                                     &p->strings.fit);
    if (f != to && n) memcpy(to, f, n);
    *pos += n;
    return (ppk_str){(const char *)to, n};
}

int ppk_profile_create(const ppk_profile_config *cfg, ppk_profile **out) {
    if (!out) return PPK_EINVAL;
    *out = NULL;
    if (!cfg || cfg->n_sample_types < 1 || cfg->n_sample_types > PPK_MAX_SAMPLE_TYPES)
        return PPK_EINVAL;
    if (cfg->max_string_len < 4 || cfg->max_string_len > MAX_STRING_LIMIT ||
        cfg->max_frames < 2 || cfg->max_frames > MAX_FRAMES_LIMIT || cfg->max_labels < 1 ||
        cfg->max_labels > MAX_LABELS_LIMIT || cfg->period < 0 ||
        cfg->memory_limit < MIN_MEMORY_LIMIT || cfg->chunk_size < 4096 ||
        cfg->chunk_size > MAX_CHUNK_SIZE || cfg->memory_limit / 4 < cfg->chunk_size ||
        (cfg->allocator.alloc == NULL) != (cfg->allocator.free == NULL))
        return PPK_EINVAL;
    size_t text = 0;
    for (size_t i = 0; i <= cfg->n_sample_types; i++) {
        const ppk_value_type *vt =
            i < cfg->n_sample_types ? &cfg->sample_types[i] : &cfg->period_type;
        if (!str_ok(vt->type) || !str_ok(vt->unit)) return PPK_ENULL;
        text += cfg_fit_room(vt->type, cfg->max_string_len) +
                cfg_fit_room(vt->unit, cfg->max_string_len);
    }

    ppk_profile *p = PPK_MEM_NEW(&cfg->allocator, ppk_profile, mem);
    if (!p) return PPK_ENOMEM;
    p->mem.limit = cfg->memory_limit; /* the profile struct itself is within it */
    ppk__mem_init(&p->aux, &cfg->allocator);
    ppk__arena_init(&p->arena, &p->mem, cfg->chunk_size, cfg->keep_bytes);
    ppk__dict *t[N_TABLES];
    tables(p, t);
    for (size_t i = 0; i < N_TABLES; i++) ppk__dict_init(t[i], &p->mem, &p->arena);
    ppk__dict_init(&p->strings.d, &p->mem, &p->arena);
    ppk__pb_init(&p->pb, &p->aux);
    p->n_types = cfg->n_sample_types;
    p->cfg = *cfg;
    p->max_frames = cfg->max_frames;
    p->max_labels = cfg->max_labels;

    p->cfg_text_len = text;
    p->cfg_text = ppk__mem_alloc(&p->mem, text);
    p->stack_buf = ppk__mem_alloc_array(&p->mem, 2 * p->max_frames, sizeof(uint32_t));
    p->rec_buf = p->stack_buf ? p->stack_buf + p->max_frames : NULL;
    p->label_buf = ppk__mem_alloc_array(&p->mem, 2 * p->max_labels, sizeof(uint32_t));
    p->lrec_buf = p->label_buf ? p->label_buf + p->max_labels : NULL;
    if (!p->cfg_text || !p->stack_buf || !p->label_buf ||
        ppk__strtab_init(&p->strings, &p->mem, &p->arena, cfg->max_string_len) != 0 ||
        ppk__dict_reserve(&p->strings.d, 2 * p->n_types + 3 + PPK_DICT_HEADROOM) != 0) {
        int limited = p->mem.limited;
        ppk_profile_free(p);
        return limited ? PPK_EINVAL : PPK_ENOMEM; /* a limit below the fixed part */
    }
    size_t pos = 0;
    for (size_t i = 0; i < p->n_types; i++) {
        p->cfg.sample_types[i].type = cfg_copy(p, &pos, cfg->sample_types[i].type);
        p->cfg.sample_types[i].unit = cfg_copy(p, &pos, cfg->sample_types[i].unit);
    }
    p->cfg.period_type.type = cfg_copy(p, &pos, cfg->period_type.type);
    p->cfg.period_type.unit = cfg_copy(p, &pos, cfg->period_type.unit);
    /* Only the configured types: nothing may point into the caller's config. */
    for (size_t i = p->n_types; i < PPK_MAX_SAMPLE_TYPES; i++)
        memset(&p->cfg.sample_types[i], 0, sizeof p->cfg.sample_types[i]);
    if (intern_fixed(p)) {
        ppk_profile_free(p);
        return PPK_ENOMEM;
    }
    p->start_ns = ppk_now_ns();
    *out = p;
    return 0;
}

static void free_rules(ppk_profile *p) {
    for (size_t i = 0; i < p->n_rules; i++) {
        ppk__mem_free(&p->mem, p->rules[i].label_key, p->rules[i].label_key_len);
        ppk__mem_free(&p->mem, p->rules[i].label_value, p->rules[i].label_value_len);
    }
    ppk__mem_free(&p->mem, p->rules, p->rules_cap * sizeof *p->rules);
}

void ppk_profile_free(ppk_profile *p) {
    if (!p) return;
    ppk__dict *t[N_TABLES];
    tables(p, t);
    for (size_t i = 0; i < N_TABLES; i++) ppk__dict_destroy(t[i]);
    ppk__strtab_destroy(&p->strings);
    if (p->sbuf) {
        ppk__sbuf_destroy(p->sbuf);
        ppk__mem_free(&p->aux, p->sbuf, sizeof *p->sbuf);
    }
    ppk__mem_free(&p->mem, p->frame_val, p->frame_val_cap * sizeof *p->frame_val);
    ppk__mem_free(&p->mem, p->label_of, p->label_of_cap * sizeof *p->label_of);
    ppk__stack_cache_destroy(&p->sc, &p->mem);
    ppk__stack_cache_destroy(&p->setc, &p->mem);
    ppk__pb_destroy(&p->pb);
    ppk__arena_destroy(&p->arena);
    free_rules(p);
    ppk__mem_free(&p->mem, p->values, p->values_cap * p->n_types * sizeof(int64_t));
    ppk__mem_free(&p->mem, p->ts, p->ts_cap * sizeof *p->ts);
    ppk__mem_free(&p->mem, p->ts_values, p->ts_values_cap * p->n_types * sizeof(int64_t));
    ppk__mem_free(&p->mem, p->endpoint_str, p->endpoint_str_cap * sizeof *p->endpoint_str);
    ppk__mem_free(&p->mem, p->endpoint_counts,
                  p->endpoint_counts_cap * sizeof *p->endpoint_counts);
    ppk__mem_free(&p->mem, p->cfg_text, p->cfg_text_len);
    ppk__mem_free(&p->mem, p->stack_buf, 2 * p->max_frames * sizeof(uint32_t));
    ppk__mem_free(&p->mem, p->label_buf, 2 * p->max_labels * sizeof(uint32_t));
    assert(p->aux.bytes == 0);
    PPK_MEM_DELETE(p, ppk_profile, mem);
}

/* ---- adding a sample ------------------------------------------------------------ */

/* ppk_profile_add's sample buffer keeps this much between calls: each add clears it
 * when done, so a buffer a large sample grew is given back at once. */
#define ADD_KEEP_BYTES (64 * 1024)

int ppk_profile_add(ppk_profile *p, const ppk_sample_data *s) {
    if (!p || !s) return PPK_EINVAL;
    if (s->n_values > p->n_types) return PPK_EVALUES;
    if ((s->n_values && !s->values) || (s->n_frames && !s->frames) ||
        (s->n_labels && !s->labels))
        return PPK_ENULL;
    if (s->n_labels > p->max_labels) return PPK_ETOOMANY;
    if (s->timestamp_ns < 0) return PPK_EINVAL;
    if (!p->sbuf) {
        /* Outside the window's budget, like the encoder's buffer: it is not the
         * window's content. */
        ppk__sbuf *sb = ppk__mem_alloc(&p->aux, sizeof *sb);
        if (!sb) return PPK_ENOMEM;
        if (ppk__sbuf_init(sb, &p->aux, p->strings.max_len, p->max_frames, p->max_labels,
                           p->n_types)) {
            ppk__mem_free(&p->aux, sb, sizeof *sb);
            return PPK_ENOMEM;
        }
        p->sbuf = sb;
    }
    ppk__sbuf *sb = p->sbuf;
    int rc = 0;
    for (size_t i = 0; !rc && i < s->n_frames; i++) rc = ppk__sbuf_push_frame(sb, &s->frames[i]);
    for (size_t i = 0; !rc && i < s->n_labels; i++) rc = ppk__sbuf_push_label(sb, &s->labels[i]);
    if (!rc) {
        if (s->n_values) memcpy(sb->values, s->values, s->n_values * sizeof(int64_t));
        sb->timestamp_ns = s->timestamp_ns;
        ppk__recs r;
        ppk__sbuf_seal(sb, &r);
        rc = ppk__profile_add_recs(p, &r);
    }
    ppk__sbuf_clear(sb, ADD_KEEP_BYTES);
    return rc;
}

/* ---- undo: what a failed call puts back ---------------------------------------- */

void ppk__undo_restore(ppk_profile *p, const ppk__undo *u) {
    ppk__dict *t[N_TABLES];
    tables(p, t);
    for (int i = 0; i < N_TABLES; i++) ppk__dict_truncate(t[i], u->n[i]);
    ppk__dict_truncate(&p->strings.d, u->n[N_TABLES]);
    ppk__arena_rollback(&p->arena, u->arena);
    p->strings.fit = u->fit;
    p->ts_n = u->ts_n;
    p->ids = u->ids;
    p->mem.limited = 0;
}

void ppk__degraded_add(ppk__degraded *to, const ppk__degraded *d) {
#define ADD(name, what) to->name += d->name;
    PPK_REPAIRS(ADD)
    PPK_DEGRADATIONS(ADD)
#undef ADD
}

/* ---- reset, endpoints, rules, statistics ------------------------------------------ */

/* The id of a string given to the profile's own calls (endpoints), fitted first. */
static int str_id(ppk_profile *p, ppk_str s, uint32_t *id) {
    size_t len = s.len;
    const char *f = ppk__strtab_fit(&p->strings, s.ptr, &len);
    *id = ppk__strtab_intern(&p->strings, f, len);
    return *id == PPK_DICT_NONE ? PPK_ENOMEM : 0;
}

static int rec_id(ppk__dict *d, const void *rec, size_t len, size_t align, uint32_t *id) {
    *id = ppk__dict_intern(d, rec, len, ppk__hash(rec, len), align, NULL);
    return *id == PPK_DICT_NONE ? PPK_ENOMEM : 0;
}

/* An array whose capacity is over four times what the window used gets twice that
 * (at least 16 elements); the contents are not kept. */
static void shrink(ppk__mem *m, void **arr, size_t *cap, size_t used, size_t size) {
    size_t want = used < 8 ? 16 : 2 * used;
    if (*cap <= 2 * want) return;
    void *fresh = ppk__mem_alloc_array(m, want, size);
    if (!fresh) return;
    void *old;
    memcpy(&old, arr, sizeof old);
    ppk__mem_free(m, old, *cap * size);
    memcpy(arr, &fresh, sizeof fresh);
    *cap = want;
}

void ppk_profile_reset(ppk_profile *p, int64_t start_ns) {
    if (!p) return;
    ppk__dict *t[N_TABLES];
    tables(p, t);
    /* The arena keeps up to keep_bytes of chunks and returns the rest; then tables and
     * arrays that grew for a burst shrink back (G4), each within the budget or not now. */
    ppk__arena_reset(&p->arena);
    size_t samples = p->samples.n, frames = p->frame_recs.n, labels = p->label_recs.n;
    size_t stacks = p->sc.n, sets = p->setc.n;
    size_t endpoints = p->endpoints.n, counts = p->endpoint_names.n;
    for (size_t i = 0; i < N_TABLES; i++) ppk__dict_shrink(t[i]);
    ppk__dict_shrink(&p->strings.d);
    shrink(&p->mem, (void **)&p->values, &p->values_cap, samples, p->n_types * sizeof(int64_t));
    shrink(&p->mem, (void **)&p->frame_val, &p->frame_val_cap, frames, sizeof *p->frame_val);
    shrink(&p->mem, (void **)&p->label_of, &p->label_of_cap, labels, sizeof *p->label_of);
    ppk__stack_cache_reset(&p->sc, &p->mem, stacks);
    ppk__stack_cache_reset(&p->setc, &p->mem, sets);
    shrink(&p->mem, (void **)&p->ts, &p->ts_cap, p->ts_n, sizeof *p->ts);
    shrink(&p->mem, (void **)&p->ts_values, &p->ts_values_cap, p->ts_n,
           p->n_types * sizeof(int64_t));
    shrink(&p->mem, (void **)&p->endpoint_str, &p->endpoint_str_cap, endpoints,
           sizeof *p->endpoint_str);
    shrink(&p->mem, (void **)&p->endpoint_counts, &p->endpoint_counts_cap, counts,
           sizeof *p->endpoint_counts);
    ppk__pb_shrink(&p->pb, p->pb_used);
    p->pb_used = 0;
    p->mem.limited = 0;
    ppk__strtab_clear(&p->strings);
    int rc = intern_fixed(p);
    assert(rc == 0); /* the table kept room for them */
    (void)rc;
    p->ts_n = 0;
    p->samples_added = 0;
    memset(&p->deg, 0, sizeof p->deg);
    p->start_ns = start_ns > 0 ? start_ns : ppk_now_ns();
}

int ppk_profile_set_endpoint(ppk_profile *p, uint64_t local_root_span_id, ppk_str endpoint) {
    if (!p || local_root_span_id == 0) return PPK_EINVAL;
    if (!str_ok(endpoint)) return PPK_ENULL;
    ppk__undo u;
    ppk__undo_save(p, &u);
    uint32_t sid, id;
    p->mem.limited = 0;
    int rc = str_id(p, endpoint, &sid);
    if (!rc && !p->ids.endpoint_key)
        rc = ppk__profile_key(p, ENDPOINT_KEY, sizeof ENDPOINT_KEY - 1, &p->ids.endpoint_key);
    if (!rc)
        rc = PPK_GROW(&p->mem, p->endpoint_str, p->endpoint_str_cap, p->endpoints.n,
                      (size_t)p->endpoints.n + 1);
    if (!rc)
        rc = rec_id(&p->endpoints, &local_root_span_id, sizeof local_root_span_id, 8, &id);
    if (rc) {
        int limited = p->mem.limited;
        ppk__undo_restore(p, &u);
        if (!limited) return rc;
        p->deg.endpoints_dropped++; /* the budget: counted, not an error */
        return 0;
    }
    p->endpoint_str[id] = sid;
    return 0;
}

int ppk_profile_add_endpoint_count(ppk_profile *p, ppk_str endpoint, int64_t count) {
    if (!p || count < 0) return PPK_EINVAL;
    if (!str_ok(endpoint)) return PPK_ENULL;
    ppk__undo u;
    ppk__undo_save(p, &u);
    p->mem.limited = 0;
    uint32_t id = PPK_DICT_NONE;
    int is_new = 0;
    size_t len = endpoint.len;
    const char *name = ppk__strtab_fit(&p->strings, endpoint.ptr, &len);
    if (!PPK_GROW(&p->mem, p->endpoint_counts, p->endpoint_counts_cap, p->endpoint_names.n,
                  (size_t)p->endpoint_names.n + 1))
        id = ppk__dict_intern(&p->endpoint_names, name, len, ppk__hash(name, len), 1, &is_new);
    if (id == PPK_DICT_NONE) {
        int limited = p->mem.limited;
        ppk__undo_restore(p, &u);
        if (!limited) return PPK_ENOMEM;
        p->deg.endpoints_dropped++;
        return 0;
    }
    if (is_new) p->endpoint_counts[id] = 0;
    uint64_t ignored = 0;
    p->endpoint_counts[id] = ppk__sat_add(p->endpoint_counts[id], count, &ignored);
    return 0;
}

void ppk_profile_foreach_endpoint_count(const ppk_profile *p,
                                        void (*fn)(void *, ppk_str, int64_t), void *opaque) {
    if (!p || !fn) return;
    for (uint32_t i = 0; i < p->endpoint_names.n; i++) {
        uint32_t len;
        const uint8_t *name = ppk__dict_key(&p->endpoint_names, i, &len);
        ppk_str s = {(const char *)name, len};
        fn(opaque, s, p->endpoint_counts[i]);
    }
}

static int add_rule(ppk_profile *p, ppk__rule *r, const size_t *idx, size_t n_idx,
                    ppk_str key, ppk_str value) {
    if (!p || n_idx == 0) return PPK_EINVAL;
    if (!idx || !str_ok(key) || !str_ok(value)) return PPK_ENULL;
    for (size_t i = 0; i < n_idx; i++) {
        if (idx[i] >= p->n_types) return PPK_EINVAL;
        r->value_mask |= 1u << idx[i];
    }
    if (!ppk__utf8_valid((const uint8_t *)key.ptr, key.len) ||
        !ppk__utf8_valid((const uint8_t *)value.ptr, value.len))
        return PPK_EINVAL;
    if (PPK_GROW(&p->mem, p->rules, p->rules_cap, p->n_rules, p->n_rules + 1))
        return PPK_ENOMEM;
    r->label_key_len = key.len;
    r->label_value_len = value.len;
    r->label_key = ppk__mem_alloc(&p->mem, key.len);
    r->label_value = ppk__mem_alloc(&p->mem, value.len);
    if (!r->label_key || !r->label_value) {
        ppk__mem_free(&p->mem, r->label_key, key.len);
        ppk__mem_free(&p->mem, r->label_value, value.len);
        return PPK_ENOMEM;
    }
    if (key.len) memcpy(r->label_key, key.ptr, key.len);
    if (value.len) memcpy(r->label_value, value.ptr, value.len);
    p->rules[p->n_rules++] = *r;
    return 0;
}

int ppk_profile_add_upscaling_proportional(ppk_profile *p, const size_t *value_idx,
                                           size_t n_idx, ppk_str label_key,
                                           ppk_str label_value, uint64_t total_sampled,
                                           uint64_t total_real) {
    if (total_sampled == 0) return PPK_EINVAL;
    ppk__rule r;
    memset(&r, 0, sizeof r);
    r.kind = PPK__RULE_PROPORTIONAL;
    r.scale = (double)total_real / (double)total_sampled;
    return add_rule(p, &r, value_idx, n_idx, label_key, label_value);
}

int ppk_profile_add_upscaling_poisson(ppk_profile *p, const size_t *value_idx, size_t n_idx,
                                      ppk_str label_key, ppk_str label_value, size_t sum_idx,
                                      size_t count_idx, uint64_t sampling_distance) {
    if (!p || sampling_distance == 0 || sum_idx >= p->n_types || count_idx >= p->n_types)
        return PPK_EINVAL;
    ppk__rule r;
    memset(&r, 0, sizeof r);
    r.kind = PPK__RULE_POISSON;
    r.sum_idx = sum_idx;
    r.count_idx = count_idx;
    r.sampling_distance = sampling_distance;
    return add_rule(p, &r, value_idx, n_idx, label_key, label_value);
}

void ppk_profile_stats_get(const ppk_profile *p, ppk_profile_stats *st) {
    if (!st) return;
    memset(st, 0, sizeof *st);
    if (!p) return;
    st->samples_added = p->samples_added;
    st->samples_aggregated = p->samples.n;
    st->samples_timestamped = p->ts_n;
    st->strings = ppk__strtab_count(&p->strings);
    st->string_bytes = ppk__strtab_bytes(&p->strings);
    st->functions = p->functions.n;
    st->mappings = p->mappings.n;
    st->locations = p->locations.n;
    st->stacks = p->stacks.n;
    st->labels = p->labels.n;
    st->label_sets = p->label_sets.n;
    st->endpoints = p->endpoints.n;
#define COPY(name, what) st->name = p->deg.name;
    PPK_REPAIRS(COPY)
    PPK_DEGRADATIONS(COPY)
#undef COPY
    /* The repairs of what the profile fitted itself (config, endpoints). */
    st->strings_utf8_repaired += p->strings.fit.repaired;
    st->strings_truncated += p->strings.fit.truncated;
    st->memory_bytes = p->mem.bytes;
    st->memory_peak_bytes = p->mem.peak;
    st->memory_limit = p->mem.limit;
    st->scratch_bytes = p->aux.bytes;
}
