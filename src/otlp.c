/*
 * otlp.c - a decoded pprof profile as an OTLP profiles request (ppk_otlp_encode).
 *
 * Field numbers are those of opentelemetry-proto 1.9.0 (profiles/v1development and its
 * collector service; common/v1, resource/v1), named below. The work is in two passes:
 *
 *   1. Tables. Strings, mappings, functions, locations, stacks, attributes and sample
 *      identities are interned in ppk__dicts (dict.h) as fixed records of indices, so
 *      that each table holds every value once (a producer's duplicates merge, an
 *      all-zero element is the zero value) and an index is a dict id; where index 0 is
 *      the table's zero value it is interned first (strings, mappings, functions,
 *      locations) or the index is the id + 1 (stacks, attributes). The pprof's mapping,
 *      function and location i map to an index through map_ix, fn_ix and loc_ix.
 *      Each sample gets its stack, its sorted attribute indices, its timestamp (the
 *      "end_timestamp_ns" label) and its group: the samples of one group have the same
 *      stack, attributes and shape (timestamped or not) and become one OTLP Sample.
 *   2. Writing (otlp_write.c). The request is written with the protobuf writer (pb.h)
 *      into one buffer: the resource, the scope, one Profile per sample type (its
 *      samples walked group by group), then the dictionary. Every write is preceded by a
 *      reserve of its bound.
 *
 * Memory: the scratch (dicts, per-sample arrays, the buffer) goes through one ppk__mem
 * over the caller's allocator and is freed before returning; the result is a ppk_bytes
 * of exactly the encoded size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress.h"
#include "kvlist.h"
#include "otlp.h"
#include "utf8.h"

/* Scratch arrays live until the end of the encode. */
static void *array(enc *e, size_t n, size_t size) {
    if (!n) n = 1;
    if (e->n_arrays == sizeof e->arrays / sizeof *e->arrays || n > SIZE_MAX / size) return NULL;
    void *p = ppk__mem_alloc_array(&e->mem, n, size);
    if (p) {
        e->arrays[e->n_arrays].p = p;
        e->arrays[e->n_arrays++].bytes = n * size;
    }
    return p;
}
#define ALLOC_ARRAY(e, ptr, n) ((ptr) = array((e), (n), sizeof *(ptr)))

int ppk__otlp_fail(enc *e, int rc, const char *what) {
    if (!e->rc) {
        e->rc = rc;
        if (e->err && e->err_len) snprintf(e->err, e->err_len, "ppk_otlp_encode: %s", what);
    }
    return rc;
}

/* ---- pass 1: tables ------------------------------------------------------------------ */

/* s itself when it is valid UTF-8, else its repair (in e->fix, valid until the next
 * call); s.ptr NULL on failure, with e->rc set. */
ppk_str ppk__otlp_valid_utf8(enc *e, ppk_str s) {
    if (!s.len || ppk__utf8_valid((const uint8_t *)s.ptr, s.len)) return s;
    if (s.len > SIZE_MAX / 3) return ppk__otlp_fail(e, PPK_ENOMEM, "string too long"), (ppk_str){0};
    size_t need = 3 * s.len; /* each bad byte becomes 3 */
    if (need > e->fix_cap) {
        uint8_t *f = ppk__mem_resize(&e->mem, e->fix, e->fix_cap, 0, need, 1);
        if (!f) return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory"), (ppk_str){0};
        e->fix = f;
        e->fix_cap = need;
    }
    int rep, cut;
    size_t n = ppk__utf8_repair((const uint8_t *)s.ptr, s.len, e->fix, need, &rep, &cut);
    return (ppk_str){(const char *)e->fix, n};
}

/* The index of s in dict d (repaired when it is not valid UTF-8); UINT32_MAX on failure
 * with e->rc set. */
static uint32_t intern_str(enc *e, ppk__dict *d, ppk_str s) {
    s = ppk__otlp_valid_utf8(e, s);
    if (!s.ptr && s.len) return UINT32_MAX;
    if (e->rc) return UINT32_MAX;
    if (s.len > UINT32_MAX)
        return ppk__otlp_fail(e, PPK_ETOOBIG, "a string over 4 GiB"), UINT32_MAX;
    uint32_t id = ppk__dict_intern(d, s.ptr, s.len, ppk__hash(s.ptr, s.len), 1, NULL);
    if (id == PPK_DICT_NONE) return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory"), UINT32_MAX;
    if (id >= MAX_INDEX) return ppk__otlp_fail(e, PPK_ETOOBIG, "over 2^31 - 1 strings"), UINT32_MAX;
    return id;
}

static uint32_t str_ix(enc *e, ppk_str s) { return intern_str(e, &e->strs, s); }

/* A record's id in d (its index where the table's zero value was interned first); 0 on
 * failure with e->rc set. */
static uint32_t intern_rec(enc *e, ppk__dict *d, const void *rec, size_t n, const char *what) {
    uint32_t id = ppk__dict_intern(d, rec, n, ppk__hash(rec, n), 8, NULL);
    if (id == PPK_DICT_NONE) return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory"), 0;
    if (id >= MAX_INDEX - 1) return ppk__otlp_fail(e, PPK_ETOOBIG, what), 0;
    return id;
}

/* A record's index in a table whose zero value is not interned: id + 1; 0 on failure. */
static uint32_t intern_words(enc *e, ppk__dict *d, const void *w, size_t n, const char *what) {
    uint32_t id = intern_rec(e, d, w, n, what);
    return e->rc ? 0 : id + 1;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Mappings, functions and locations (their records and indices), and the types. */
static int intern_elements(enc *e) {
    const ppk_pprof *p = e->p;
    size_t max_lines = 0;
    for (size_t i = 0; i < p->n_locations; i++)
        if (p->locations[i].n_lines > max_lines) max_lines = p->locations[i].n_lines;
    /* A location's record (its lines) is a dict key: under 4 GiB. */
    if (max_lines > (UINT32_MAX - sizeof(loc_rec)) / sizeof(line_rec))
        return ppk__otlp_fail(e, PPK_ETOOBIG, "a location with over 2^28 lines");
    if (str_ix(e, PPK_STR("")) != 0)
        return e->rc ? e->rc : ppk__otlp_fail(e, PPK_ENOMEM, "strings");
    if (!ALLOC_ARRAY(e, e->map_ix, p->n_mappings) || !ALLOC_ARRAY(e, e->fn_ix, p->n_functions) ||
        !ALLOC_ARRAY(e, e->loc_ix, p->n_locations) ||
        !ALLOC_ARRAY(e, e->rec, sizeof(loc_rec) + max_lines * sizeof(line_rec)) ||
        !ALLOC_ARRAY(e, e->type_strs, 2 * p->n_sample_types + 2))
        return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory");
    map_rec m = {0};
    fn_rec f = {0};
    loc_rec l = {0};
    intern_rec(e, &e->maps, &m, sizeof m, "");
    intern_rec(e, &e->fns, &f, sizeof f, "");
    intern_rec(e, &e->locs, &l, sizeof l, "");
    for (size_t i = 0; i < p->n_mappings && !e->rc; i++) {
        const ppk_pprof_mapping *pm = &p->mappings[i];
        m = (map_rec){pm->memory_start, pm->memory_limit, pm->file_offset, 0, 0};
        m.file = str_ix(e, pm->filename);
        if (!e->rc) e->map_ix[i] = intern_rec(e, &e->maps, &m, sizeof m, "over 2^31 - 1 mappings");
    }
    for (size_t i = 0; i < p->n_functions && !e->rc; i++) {
        const ppk_pprof_function *pf = &p->functions[i];
        f.name = str_ix(e, pf->name);
        f.system_name = str_ix(e, pf->system_name);
        f.file = str_ix(e, pf->filename);
        f.start_line = pf->start_line;
        if (!e->rc) e->fn_ix[i] = intern_rec(e, &e->fns, &f, sizeof f, "over 2^31 - 1 functions");
    }
    for (size_t i = 0; i < p->n_locations && !e->rc; i++) {
        const ppk_pprof_location *pl = &p->locations[i];
        l = (loc_rec){pl->mapping ? e->map_ix[pl->mapping - p->mappings] : 0,
                      (uint32_t)pl->n_lines, pl->address};
        memcpy(e->rec, &l, sizeof l);
        for (size_t k = 0; k < pl->n_lines; k++) {
            const ppk_pprof_line *pn = &pl->lines[k];
            line_rec r = {pn->function ? e->fn_ix[pn->function - p->functions] : 0, 0, pn->line};
            memcpy(e->rec + sizeof l + k * sizeof r, &r, sizeof r);
        }
        e->loc_ix[i] = intern_rec(e, &e->locs, e->rec, sizeof l + pl->n_lines * sizeof(line_rec),
                                  "over 2^31 - 1 locations");
    }
    for (size_t i = 0; i < p->n_sample_types && !e->rc; i++) {
        e->type_strs[2 * i] = str_ix(e, p->sample_types[i].type);
        e->type_strs[2 * i + 1] = str_ix(e, p->sample_types[i].unit);
    }
    if (!e->rc) {
        e->type_strs[2 * p->n_sample_types] = str_ix(e, p->period_type.type);
        e->type_strs[2 * p->n_sample_types + 1] = str_ix(e, p->period_type.unit);
    }
    return e->rc;
}

/* A sample's attributes (sorted, keys unique) into attr_ix, and its timestamp. */
static int sample_attrs(enc *e, size_t i) {
    const ppk_pprof_sample *s = &e->p->samples[i];
    size_t first = e->n_attr_ix;
    e->s_attr_off[i] = (uint32_t)first;
    e->s_has_ts[i] = 0;
    e->s_ts[i] = 0;
    e->s_dropped[i] = 0;
    for (size_t k = 0; k < s->n_labels; k++) {
        const ppk_pprof_label *lb = &s->labels[k];
        int numeric = !lb->str.len;
        if (lb->key.len == 16 && !memcmp(lb->key.ptr, "end_timestamp_ns", 16)) {
            /* The timestamp: the first numeric one; another is a key given twice. */
            if (numeric && !e->s_has_ts[i]) {
                e->s_has_ts[i] = 1;
                e->s_ts[i] = lb->num;
            } else {
                e->s_dropped[i]++;
            }
            continue;
        }
        if (!lb->key.len) { /* OTLP attributes have a key */
            e->s_dropped[i]++;
            continue;
        }
        attr_rec a = {0};
        a.key = str_ix(e, lb->key);
        if (e->rc) return e->rc;
        /* A key given twice in one sample: OTLP keys are unique, the first one stays. */
        int dup = 0;
        for (size_t j = first; j < e->n_attr_ix && !dup; j++) {
            const attr_rec *o = ppk__otlp_key(&e->attrs, e->attr_ix[j] - 1);
            dup = o->key == a.key;
        }
        if (dup) {
            e->s_dropped[i]++;
            continue;
        }
        a.kind = numeric ? AV_INT : AV_STRING;
        a.value = numeric ? (uint64_t)lb->num : intern_str(e, &e->lvals, lb->str);
        a.unit = numeric ? str_ix(e, lb->num_unit) : 0;
        if (e->rc) return e->rc;
        uint32_t ix = intern_words(e, &e->attrs, &a, sizeof a, "over 2^31 - 2 attributes");
        if (!ix) return e->rc;
        e->attr_ix[e->n_attr_ix++] = ix;
    }
    qsort(e->attr_ix + first, e->n_attr_ix - first, sizeof *e->attr_ix, cmp_u32);
    return 0;
}

/* Each sample's stack, attributes, timestamp and group. */
static int intern_samples(enc *e) {
    const ppk_pprof *p = e->p;
    size_t n = p->n_samples, labels = 0, depth = 0;
    for (size_t i = 0; i < n; i++) {
        labels += p->samples[i].n_labels;
        if (p->samples[i].n_locations > depth) depth = p->samples[i].n_locations;
    }
    if (depth < 3) depth = 3;
    if (labels + 3 > depth) depth = labels + 3;
    if (!ALLOC_ARRAY(e, e->s_stack, n) || !ALLOC_ARRAY(e, e->s_group, n) ||
        !ALLOC_ARRAY(e, e->s_has_ts, n) || !ALLOC_ARRAY(e, e->s_ts, n) ||
        !ALLOC_ARRAY(e, e->s_dropped, n) ||
        !ALLOC_ARRAY(e, e->s_attr_off, n + 1) || !ALLOC_ARRAY(e, e->attr_ix, labels) ||
        !ALLOC_ARRAY(e, e->scratch, depth > n ? depth : n))
        return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const ppk_pprof_sample *s = &p->samples[i];
        /* The stack: location indices, leaf first; 0 for no frames. */
        uint32_t st = 0;
        if (s->n_locations) {
            for (size_t k = 0; k < s->n_locations; k++)
                e->scratch[k] = e->loc_ix[s->locations[k] - p->locations];
            st = intern_words(e, &e->stacks, e->scratch, s->n_locations * sizeof(uint32_t),
                              "over 2^31 - 2 stacks");
            if (!st) return e->rc;
        }
        e->s_stack[i] = st;
        if (sample_attrs(e, i)) return e->rc;
        /* The group: stack, shape, attributes. */
        uint32_t na = (uint32_t)(e->n_attr_ix - e->s_attr_off[i]);
        e->scratch[0] = st;
        e->scratch[1] = e->s_has_ts[i];
        e->scratch[2] = na;
        memcpy(e->scratch + 3, e->attr_ix + e->s_attr_off[i], na * sizeof(uint32_t));
        uint32_t g = intern_words(e, &e->groups, e->scratch, (3 + na) * sizeof(uint32_t),
                                  "too many samples");
        if (!g) return e->rc;
        e->s_group[i] = g - 1;
    }
    e->s_attr_off[n] = (uint32_t)e->n_attr_ix;
    /* Members of each group, in sample order (a counting sort). */
    e->n_groups = e->groups.n;
    if (!ALLOC_ARRAY(e, e->g_first, e->n_groups + 1) || !ALLOC_ARRAY(e, e->members, n))
        return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory");
    memset(e->g_first, 0, (e->n_groups + 1) * sizeof *e->g_first);
    for (size_t i = 0; i < n; i++) e->g_first[e->s_group[i] + 1]++;
    for (size_t g = 0; g < e->n_groups; g++) e->g_first[g + 1] += e->g_first[g];
    memcpy(e->scratch, e->g_first, e->n_groups * sizeof *e->scratch);
    for (size_t i = 0; i < n; i++) e->members[e->scratch[e->s_group[i]]++] = (uint32_t)i;
    return 0;
}

static int encode(enc *e, const ppk_otlp_resource *res) {
    const ppk_pprof *p = e->p;
    if (p->n_mappings >= MAX_INDEX || p->n_locations >= MAX_INDEX ||
        p->n_functions >= MAX_INDEX || p->n_samples >= MAX_INDEX)
        return ppk__otlp_fail(e, PPK_ETOOBIG, "a table over 2^31 - 2 entries");
    if (intern_elements(e) || intern_samples(e)) return e->rc;
    return ppk__otlp_write(e, res);
}

int ppk_otlp_encode(const ppk_pprof *p, const ppk_otlp_resource *res, const ppk_allocator *a,
                    ppk_bytes *out, char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    if (out) memset(out, 0, sizeof *out);
    if (!p || !res || !out) return PPK_EINVAL;
    const ppk_str *strs[] = {&res->service_name, &res->service_version, &res->environment,
                             &res->host_name, &res->sdk_language, &res->attributes};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++)
        if (!strs[i]->ptr && strs[i]->len) return PPK_ENULL;
    int rc = ppk__kv_check(res->attributes, "resource attributes", err, err_len);
    if (rc) return rc;

    if (a && !a->alloc != !a->free) return PPK_EINVAL;
    enc *e = PPK_MEM_NEW(a, enc, mem);
    if (!e) return PPK_ENOMEM;
    e->p = p;
    e->err = err;
    e->err_len = err_len;
    ppk__arena_init(&e->arena, &e->mem, 64 << 10, 0);
    ppk__dict_init(&e->strs, &e->mem, &e->arena);
    ppk__dict_init(&e->lvals, &e->mem, &e->arena);
    ppk__dict_init(&e->maps, &e->mem, &e->arena);
    ppk__dict_init(&e->fns, &e->mem, &e->arena);
    ppk__dict_init(&e->locs, &e->mem, &e->arena);
    ppk__dict_init(&e->stacks, &e->mem, &e->arena);
    ppk__dict_init(&e->attrs, &e->mem, &e->arena);
    ppk__dict_init(&e->groups, &e->mem, &e->arena);
    ppk__pb_init(&e->pb, &e->mem);

    rc = encode(e, res);
    if (!rc && ppk__bytes_copy(&e->mem.a, e->pb.buf, e->pb.len, out))
        rc = ppk__otlp_fail(e, PPK_ENOMEM, "out of memory");

    for (size_t i = 0; i < e->n_arrays; i++)
        ppk__mem_free(&e->mem, e->arrays[i].p, e->arrays[i].bytes);
    if (e->fix) ppk__mem_free(&e->mem, e->fix, e->fix_cap);
    ppk__pb_destroy(&e->pb);
    ppk__dict_destroy(&e->strs);
    ppk__dict_destroy(&e->lvals);
    ppk__dict_destroy(&e->maps);
    ppk__dict_destroy(&e->fns);
    ppk__dict_destroy(&e->locs);
    ppk__dict_destroy(&e->stacks);
    ppk__dict_destroy(&e->attrs);
    ppk__dict_destroy(&e->groups);
    ppk__arena_destroy(&e->arena);
    PPK_MEM_DELETE(e, enc, mem);
    return rc;
}
