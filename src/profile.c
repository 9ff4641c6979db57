/*
 * profile.c - one aggregation window: creating it, adding samples, endpoints, upscaling
 * rules, reset and statistics. The record layout is described in profile.h; encoding
 * is in pprof.c.
 *
 * Adding a sample validates everything first (no change on bad input), then interns
 * strings, mappings, functions, locations, the stack, the labels and the label set, and
 * finally adds the values. When memory runs out halfway, every table is truncated back
 * to the counts it had before the call and the arena is rolled back to its mark, so a
 * failed call leaves the window exactly as it was (G7).
 *
 * Not thread safe: the caller (or the recorder) serializes calls on one profile.
 */
#include "profile.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

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

static const char END_TS_KEY[] = "end_timestamp_ns";
static const char ENDPOINT_KEY[] = "trace endpoint";

#define MAX_STRING_LIMIT ((size_t)1 << 24)
#define MAX_FRAMES_LIMIT ((size_t)1 << 16)
#define MAX_LABELS_LIMIT ((size_t)1024)

void ppk_profile_config_init(ppk_profile_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->max_string_len = 4096;
    cfg->max_frames = 512;
    cfg->max_labels = 32;
    cfg->chunk_size = 256 * 1024;
    cfg->keep_bytes = 8 * 1024 * 1024;
}

static int str_ok(ppk_str s) { return s.ptr != NULL || s.len == 0; }

/* Every table but the string table (which strtab.c manages), in a fixed order. */
#define N_TABLES 11
static void tables(ppk_profile *p, ppk__dict *t[N_TABLES]) {
    ppk__dict *all[N_TABLES] = {&p->mappings,   &p->functions,  &p->locations, &p->stacks,
                                &p->labels,     &p->label_sets, &p->samples,   &p->endpoints,
                                &p->endpoint_names, &p->frame_recs, &p->label_recs};
    memcpy(t, all, sizeof all);
}

/* Config strings must be valid and short enough: they are interned without repair. */
static int cfg_str_check(ppk_str s, size_t max_len) {
    if (!str_ok(s)) return PPK_ENULL;
    if (s.len > max_len || !ppk__utf8_valid((const uint8_t *)s.ptr, s.len)) return PPK_EINVAL;
    return 0;
}

/* Interns the strings every window starts with, in a fixed order. The table has room
 * for them from create on, so this cannot fail. */
static void intern_fixed(ppk_profile *p) {
    for (size_t i = 0; i < p->n_types; i++) {
        p->type_ids[i] = ppk__strtab_intern_stable(&p->strings, p->cfg.sample_types[i].type.ptr,
                                                   p->cfg.sample_types[i].type.len);
        p->unit_ids[i] = ppk__strtab_intern_stable(&p->strings, p->cfg.sample_types[i].unit.ptr,
                                                   p->cfg.sample_types[i].unit.len);
    }
    p->period_type_id = ppk__strtab_intern_stable(&p->strings, p->cfg.period_type.type.ptr,
                                                  p->cfg.period_type.type.len);
    p->period_unit_id = ppk__strtab_intern_stable(&p->strings, p->cfg.period_type.unit.ptr,
                                                  p->cfg.period_type.unit.len);
    assert(p->period_unit_id != PPK_DICT_NONE);
}

/* Copies `s` into the config text at *pos. */
static ppk_str cfg_copy(ppk_profile *p, size_t *pos, ppk_str s) {
    ppk_str out = {p->cfg_text + *pos, s.len};
    if (s.len) memcpy(p->cfg_text + *pos, s.ptr, s.len);
    *pos += s.len;
    return out;
}

int ppk_profile_create(const ppk_profile_config *cfg, ppk_profile **out) {
    if (!out) return PPK_EINVAL;
    *out = NULL;
    if (!cfg || cfg->n_sample_types < 1 || cfg->n_sample_types > PPK_MAX_SAMPLE_TYPES)
        return PPK_EINVAL;
    if (cfg->max_string_len < 4 || cfg->max_string_len > MAX_STRING_LIMIT ||
        cfg->max_frames < 2 || cfg->max_frames > MAX_FRAMES_LIMIT || cfg->max_labels < 1 ||
        cfg->max_labels > MAX_LABELS_LIMIT || cfg->period < 0 ||
        (cfg->allocator.alloc == NULL) != (cfg->allocator.free == NULL))
        return PPK_EINVAL;
    size_t text = 0;
    for (size_t i = 0; i <= cfg->n_sample_types; i++) {
        const ppk_value_type *vt =
            i < cfg->n_sample_types ? &cfg->sample_types[i] : &cfg->period_type;
        int rc = cfg_str_check(vt->type, cfg->max_string_len);
        if (!rc) rc = cfg_str_check(vt->unit, cfg->max_string_len);
        if (rc) return rc;
        text += vt->type.len + vt->unit.len;
    }

    ppk__mem mem;
    ppk__mem_init(&mem, &cfg->allocator);
    ppk_profile *p = ppk__mem_alloc(&mem, sizeof *p);
    if (!p) return PPK_ENOMEM;
    memset(p, 0, sizeof *p);
    p->mem = mem;
    ppk__arena_init(&p->arena, &p->mem, cfg->chunk_size, cfg->keep_bytes);
    ppk__dict *t[N_TABLES];
    tables(p, t);
    for (size_t i = 0; i < N_TABLES; i++) ppk__dict_init(t[i], &p->mem, &p->arena);
    ppk__dict_init(&p->strings.d, &p->mem, &p->arena);
    ppk__pb_init(&p->pb, &p->mem);
    p->n_types = cfg->n_sample_types;
    p->cfg = *cfg;
    p->max_frames = cfg->max_frames;
    p->max_labels = cfg->max_labels;

    p->cfg_text_len = text;
    p->cfg_text = ppk__mem_alloc(&p->mem, text);
    p->stack_buf = ppk__mem_alloc_array(&p->mem, p->max_frames, sizeof(uint32_t));
    p->label_buf = ppk__mem_alloc_array(&p->mem, p->max_labels, sizeof(uint32_t));
    if (!p->cfg_text || !p->stack_buf || !p->label_buf ||
        ppk__strtab_init(&p->strings, &p->mem, &p->arena, cfg->max_string_len) != 0 ||
        ppk__dict_reserve(&p->strings.d, 2 * p->n_types + 3) != 0) {
        ppk_profile_free(p);
        return PPK_ENOMEM;
    }
    size_t pos = 0;
    for (size_t i = 0; i < p->n_types; i++) {
        p->cfg.sample_types[i].type = cfg_copy(p, &pos, cfg->sample_types[i].type);
        p->cfg.sample_types[i].unit = cfg_copy(p, &pos, cfg->sample_types[i].unit);
    }
    p->cfg.period_type.type = cfg_copy(p, &pos, cfg->period_type.type);
    p->cfg.period_type.unit = cfg_copy(p, &pos, cfg->period_type.unit);
    intern_fixed(p);
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
        ppk__mem_free(&p->mem, p->sbuf, sizeof *p->sbuf);
    }
    ppk__mem_free(&p->mem, p->frame_loc, p->frame_loc_cap * sizeof *p->frame_loc);
    ppk__mem_free(&p->mem, p->label_of, p->label_of_cap * sizeof *p->label_of);
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
    ppk__mem_free(&p->mem, p->stack_buf, p->max_frames * sizeof(uint32_t));
    ppk__mem_free(&p->mem, p->label_buf, p->max_labels * sizeof(uint32_t));
    ppk__mem mem = p->mem;
    ppk__mem_free(&mem, p, sizeof *p);
    assert(mem.bytes == 0);
}

/* ---- undo: what a failed call puts back ---------------------------------------- */

typedef struct undo {
    ppk__arena_mark arena;
    uint32_t n[N_TABLES + 1];
    uint64_t repaired, truncated;
    size_t ts_n;
    uint32_t end_ts_key, endpoint_key;
} undo;

static void undo_save(ppk_profile *p, undo *u) {
    ppk__dict *t[N_TABLES];
    tables(p, t);
    for (int i = 0; i < N_TABLES; i++) u->n[i] = t[i]->n;
    u->n[N_TABLES] = p->strings.d.n;
    u->arena = ppk__arena_get_mark(&p->arena);
    u->repaired = p->strings.utf8_repaired;
    u->truncated = p->strings.truncated;
    u->ts_n = p->ts_n;
    u->end_ts_key = p->end_ts_key;
    u->endpoint_key = p->endpoint_key;
}

static void undo_restore(ppk_profile *p, const undo *u) {
    ppk__dict *t[N_TABLES];
    tables(p, t);
    for (int i = 0; i < N_TABLES; i++) ppk__dict_truncate(t[i], u->n[i]);
    ppk__dict_truncate(&p->strings.d, u->n[N_TABLES]);
    ppk__arena_rollback(&p->arena, u->arena);
    p->strings.utf8_repaired = u->repaired;
    p->strings.truncated = u->truncated;
    p->ts_n = u->ts_n;
    p->end_ts_key = u->end_ts_key;
    p->endpoint_key = u->endpoint_key;
}

/* ---- adding a sample -------------------------------------------------------------- */

static int str_id(ppk_profile *p, ppk_str s, uint32_t *id) {
    *id = ppk__strtab_intern(&p->strings, s.ptr, s.len);
    return *id == PPK_DICT_NONE ? PPK_ENOMEM : 0;
}

static int rec_id(ppk__dict *d, const void *rec, size_t len, size_t align, uint32_t *id) {
    *id = ppk__dict_intern(d, rec, len, ppk__hash(rec, len), align, NULL);
    return *id == PPK_DICT_NONE ? PPK_ENOMEM : 0;
}

static int frame_id(ppk_profile *p, const ppk_frame *f, uint32_t *loc) {
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
        if ((rc = str_id(p, m->filename, &mr.filename)) ||
            (rc = str_id(p, m->build_id, &mr.build_id)) ||
            (rc = rec_id(&p->mappings, &mr, sizeof mr, 8, &id)))
            return rc;
        lr.mapping = id + 1;
    }
    if (f->name.len || f->system_name.len || f->filename.len || f->start_line) {
        ppk__function_rec fr;
        memset(&fr, 0, sizeof fr);
        fr.start_line = f->start_line;
        if ((rc = str_id(p, f->name, &fr.name)) ||
            (rc = str_id(p, f->system_name, &fr.system_name)) ||
            (rc = str_id(p, f->filename, &fr.filename)) ||
            (rc = rec_id(&p->functions, &fr, sizeof fr, 8, &id)))
            return rc;
        lr.function = id + 1;
    }
    lr.address = f->address;
    lr.line = f->line;
    return rec_id(&p->locations, &lr, sizeof lr, 8, loc);
}

/* The location of a frame record: one lookup when the window has seen the record. */
static int frame_rec_loc(ppk_profile *p, const uint8_t *rec, const ppk__rec *r, uint32_t *loc) {
    uint32_t id = ppk__dict_find(&p->frame_recs, rec, r->len, r->hash);
    if (id != PPK_DICT_NONE) {
        *loc = p->frame_loc[id];
        return 0;
    }
    ppk_frame f;
    ppk_mapping m;
    ppk__sbuf_read_frame(rec, &f, &m);
    int rc = frame_id(p, &f, loc);
    if (!rc)
        rc = PPK_GROW(&p->mem, p->frame_loc, p->frame_loc_cap, p->frame_recs.n,
                      (size_t)p->frame_recs.n + 1);
    if (!rc) rc = rec_id(&p->frame_recs, rec, r->len, 8, &id);
    if (!rc) p->frame_loc[id] = *loc;
    return rc;
}

static int stack_id(ppk_profile *p, const ppk__sbuf *sb, uint32_t *stack) {
    size_t n = sb->n_frames;
    int rc;
    for (size_t i = 0; i < n; i++)
        if ((rc = frame_rec_loc(p, sb->buf + sb->frames[i].off, &sb->frames[i],
                                &p->stack_buf[i])))
            return rc;
    if (sb->omitted) {
        char name[64];
        ppk_frame f;
        memset(&f, 0, sizeof f);
        f.name.ptr = name;
        f.name.len = (size_t)snprintf(name, sizeof name, "<%zu frames omitted>", sb->omitted);
        if ((rc = frame_id(p, &f, &p->stack_buf[n++]))) return rc;
    }
    return rec_id(&p->stacks, p->stack_buf, n * sizeof(uint32_t), 4, stack);
}

static int label_id(ppk_profile *p, const ppk_label *l, uint32_t *id) {
    ppk__label_rec lr;
    memset(&lr, 0, sizeof lr);
    int rc = str_id(p, l->key, &lr.key);
    if (rc) return rc;
    if (l->is_num) {
        lr.is_num = 1;
        lr.num = l->num;
        rc = str_id(p, l->num_unit, &lr.num_unit);
    } else {
        rc = str_id(p, l->str, &lr.str);
    }
    return rc ? rc : rec_id(&p->labels, &lr, sizeof lr, 8, id);
}

static int label_rec_id(ppk_profile *p, const uint8_t *rec, const ppk__rec *r, uint32_t *out) {
    uint32_t id = ppk__dict_find(&p->label_recs, rec, r->len, r->hash);
    if (id != PPK_DICT_NONE) {
        *out = p->label_of[id];
        return 0;
    }
    ppk_label l;
    ppk__sbuf_read_label(rec, &l);
    int rc = label_id(p, &l, out);
    if (!rc)
        rc = PPK_GROW(&p->mem, p->label_of, p->label_of_cap, p->label_recs.n,
                      (size_t)p->label_recs.n + 1);
    if (!rc) rc = rec_id(&p->label_recs, rec, r->len, 8, &id);
    if (!rc) p->label_of[id] = *out;
    return rc;
}

static int label_set_id(ppk_profile *p, const ppk__sbuf *sb, uint32_t *set) {
    int rc;
    uint32_t *b = p->label_buf;
    size_t n = sb->n_labels;
    for (size_t i = 0; i < n; i++)
        if ((rc = label_rec_id(p, sb->buf + sb->labels[i].off, &sb->labels[i], &b[i])))
            return rc;
    /* Sorted label ids: the same labels in any order make the same set. */
    for (size_t i = 1; i < n; i++) {
        uint32_t v = b[i];
        size_t j = i;
        for (; j > 0 && b[j - 1] > v; j--) b[j] = b[j - 1];
        b[j] = v;
    }
    return rec_id(&p->label_sets, b, n * sizeof(uint32_t), 4, set);
}

static int64_t sat_add(int64_t a, int64_t b, uint64_t *saturated) {
    int64_t r;
    if (!__builtin_add_overflow(a, b, &r)) return r;
    (*saturated)++;
    return b > 0 ? INT64_MAX : INT64_MIN;
}

static int insert(ppk_profile *p, const ppk__sbuf *sb) {
    uint32_t stack, set;
    int rc;
    if ((rc = stack_id(p, sb, &stack)) || (rc = label_set_id(p, sb, &set))) return rc;
    size_t nt = p->n_types;
    if (sb->timestamp_ns) {
        if (!p->end_ts_key) {
            if (ppk__dict_reserve(&p->strings.d, 1)) return PPK_ENOMEM;
            p->end_ts_key =
                ppk__strtab_intern_stable(&p->strings, END_TS_KEY, sizeof END_TS_KEY - 1);
        }
        if (PPK_GROW(&p->mem, p->ts, p->ts_cap, p->ts_n, p->ts_n + 1) ||
            grow_(&p->mem, (void **)&p->ts_values, nt * sizeof(int64_t), &p->ts_values_cap,
                  p->ts_n, p->ts_n + 1))
            return PPK_ENOMEM;
        ppk__ts_sample *t = &p->ts[p->ts_n];
        t->stack = stack;
        t->label_set = set;
        t->timestamp_ns = sb->timestamp_ns;
        memcpy(&p->ts_values[p->ts_n * nt], sb->values, nt * sizeof(int64_t));
        p->ts_n++;
        return 0;
    }
    if (grow_(&p->mem, (void **)&p->values, nt * sizeof(int64_t), &p->values_cap,
              p->samples.n, (size_t)p->samples.n + 1))
        return PPK_ENOMEM;
    ppk__sample_rec sr = {stack, set};
    int is_new;
    uint32_t id =
        ppk__dict_intern(&p->samples, &sr, sizeof sr, ppk__hash(&sr, sizeof sr), 4, &is_new);
    if (id == PPK_DICT_NONE) return PPK_ENOMEM;
    int64_t *v = &p->values[(size_t)id * nt];
    if (is_new) memset(v, 0, nt * sizeof(int64_t));
    /* Nothing below can fail: the values are added only once the sample exists. */
    for (size_t i = 0; i < nt; i++) v[i] = sat_add(v[i], sb->values[i], &p->values_saturated);
    return 0;
}

int ppk__profile_add_sbuf(ppk_profile *p, const ppk__sbuf *sb) {
    undo u;
    undo_save(p, &u);
    int rc = insert(p, sb);
    if (rc) {
        undo_restore(p, &u);
        return rc;
    }
    p->samples_added++;
    p->stacks_truncated += sb->omitted != 0;
    p->strings.utf8_repaired += sb->utf8_repaired;
    p->strings.truncated += sb->truncated;
    return 0;
}

/* ppk_profile_add's sample buffer keeps this much between calls. */
#define ADD_KEEP_BYTES (64 * 1024)

int ppk_profile_add(ppk_profile *p, const ppk_sample_data *s) {
    if (!p || !s) return PPK_EINVAL;
    if (s->n_values != p->n_types) return PPK_EVALUES;
    if (!s->values || (s->n_frames && !s->frames) || (s->n_labels && !s->labels))
        return PPK_ENULL;
    if (s->n_labels > p->max_labels) return PPK_ETOOMANY;
    if (s->timestamp_ns < 0) return PPK_EINVAL;
    if (!p->sbuf) {
        ppk__sbuf *sb = ppk__mem_alloc(&p->mem, sizeof *sb);
        if (!sb) return PPK_ENOMEM;
        if (ppk__sbuf_init(sb, &p->mem, p->strings.max_len, p->max_frames, p->max_labels,
                           p->n_types)) {
            ppk__mem_free(&p->mem, sb, sizeof *sb);
            return PPK_ENOMEM;
        }
        p->sbuf = sb;
    }
    ppk__sbuf *sb = p->sbuf;
    ppk__sbuf_clear(sb, ADD_KEEP_BYTES);
    int rc = 0;
    for (size_t i = 0; !rc && i < s->n_frames; i++) rc = ppk__sbuf_push_frame(sb, &s->frames[i]);
    for (size_t i = 0; !rc && i < s->n_labels; i++) rc = ppk__sbuf_push_label(sb, &s->labels[i]);
    if (!rc) {
        memcpy(sb->values, s->values, p->n_types * sizeof(int64_t));
        sb->timestamp_ns = s->timestamp_ns;
        rc = ppk__profile_add_sbuf(p, sb);
    }
    return rc;
}

/* ---- reset, endpoints, rules, statistics ------------------------------------------ */

void ppk_profile_reset(ppk_profile *p, int64_t start_ns) {
    if (!p) return;
    ppk__dict *t[N_TABLES];
    tables(p, t);
    for (size_t i = 0; i < N_TABLES; i++) ppk__dict_clear(t[i]);
    ppk__strtab_clear(&p->strings);
    ppk__arena_reset(&p->arena);
    intern_fixed(p);
    p->ts_n = 0;
    p->end_ts_key = p->endpoint_key = 0;
    p->samples_added = p->stacks_truncated = p->values_saturated = 0;
    p->start_ns = start_ns ? start_ns : ppk_now_ns();
}

int ppk_profile_set_endpoint(ppk_profile *p, uint64_t local_root_span_id, ppk_str endpoint) {
    if (!p || local_root_span_id == 0) return PPK_EINVAL;
    if (!str_ok(endpoint)) return PPK_ENULL;
    undo u;
    undo_save(p, &u);
    uint32_t sid, id;
    int rc = str_id(p, endpoint, &sid);
    if (!rc && !p->endpoint_key) {
        rc = ppk__dict_reserve(&p->strings.d, 1);
        if (!rc)
            p->endpoint_key = ppk__strtab_intern_stable(&p->strings, ENDPOINT_KEY,
                                                        sizeof ENDPOINT_KEY - 1);
    }
    if (!rc)
        rc = PPK_GROW(&p->mem, p->endpoint_str, p->endpoint_str_cap, p->endpoints.n,
                      (size_t)p->endpoints.n + 1);
    if (!rc)
        rc = rec_id(&p->endpoints, &local_root_span_id, sizeof local_root_span_id, 8, &id);
    if (rc) {
        undo_restore(p, &u);
        return rc;
    }
    p->endpoint_str[id] = sid;
    return 0;
}

int ppk_profile_add_endpoint_count(ppk_profile *p, ppk_str endpoint, int64_t count) {
    if (!p || count < 0) return PPK_EINVAL;
    if (!str_ok(endpoint)) return PPK_ENULL;
    undo u;
    undo_save(p, &u);
    uint32_t id = PPK_DICT_NONE;
    int is_new = 0;
    size_t len = endpoint.len;
    const char *name = ppk__strtab_fit(&p->strings, endpoint.ptr, &len);
    if (!PPK_GROW(&p->mem, p->endpoint_counts, p->endpoint_counts_cap, p->endpoint_names.n,
                  (size_t)p->endpoint_names.n + 1))
        id = ppk__dict_intern(&p->endpoint_names, name, len, ppk__hash(name, len), 1, &is_new);
    if (id == PPK_DICT_NONE) {
        undo_restore(p, &u);
        return PPK_ENOMEM;
    }
    if (is_new) p->endpoint_counts[id] = 0;
    uint64_t ignored = 0;
    p->endpoint_counts[id] = sat_add(p->endpoint_counts[id], count, &ignored);
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
    st->strings_utf8_repaired = p->strings.utf8_repaired;
    st->strings_truncated = p->strings.truncated;
    st->stacks_truncated = p->stacks_truncated;
    st->values_saturated = p->values_saturated;
    st->memory_bytes = p->mem.bytes;
    st->memory_peak_bytes = p->mem.peak;
}
