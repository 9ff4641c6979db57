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
 *   2. Writing. The request is written with the protobuf writer (pb.h) into one buffer:
 *      the resource, the scope, one Profile per sample type (its samples walked group by
 *      group), then the dictionary. Every write is preceded by a reserve of its bound.
 *
 * Memory: the scratch (dicts, per-sample arrays, the buffer) goes through one ppk__mem
 * over the caller's allocator and is freed before returning; the result is a ppk_bytes
 * of exactly the encoded size.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "arena.h"
#include "compress.h"
#include "dict.h"
#include "kvlist.h"
#include "pb.h"
#include "utf8.h"

/* ExportProfilesServiceRequest */
enum { REQ_RESOURCE_PROFILES = 1, REQ_DICTIONARY = 2 };
/* ResourceProfiles, ScopeProfiles, Resource, InstrumentationScope */
enum { RP_RESOURCE = 1, RP_SCOPE_PROFILES = 2, SP_SCOPE = 1, SP_PROFILES = 2 };
enum { RES_ATTRIBUTES = 1, SCOPE_NAME = 1, SCOPE_VERSION = 2 };
/* KeyValue, AnyValue */
enum { KV_KEY = 1, KV_VALUE = 2, AV_STRING = 1, AV_INT = 3 };
/* Profile */
enum {
    PR_SAMPLE_TYPE = 1, PR_SAMPLES = 2, PR_TIME = 3, PR_DURATION = 4, PR_PERIOD_TYPE = 5,
    PR_PERIOD = 6, PR_ID = 7, PR_DROPPED_ATTRIBUTES = 8
};
/* ValueType, Sample */
enum { VT_TYPE = 1, VT_UNIT = 2 };
enum { SM_STACK = 1, SM_ATTRIBUTES = 2, SM_VALUES = 4, SM_TIMESTAMPS = 5 };
/* ProfilesDictionary */
enum {
    DI_MAPPINGS = 1, DI_LOCATIONS = 2, DI_FUNCTIONS = 3, DI_LINKS = 4, DI_STRINGS = 5,
    DI_ATTRIBUTES = 6, DI_STACKS = 7
};
/* Mapping, Location, Line, Function, Stack, KeyValueAndUnit */
enum { MA_START = 1, MA_LIMIT = 2, MA_OFFSET = 3, MA_FILENAME = 4 };
enum { LO_MAPPING = 1, LO_ADDRESS = 2, LO_LINES = 3, LI_FUNCTION = 1, LI_LINE = 2 };
enum { FN_NAME = 1, FN_SYSTEM_NAME = 2, FN_FILENAME = 3, FN_START_LINE = 4 };
enum { ST_LOCATIONS = 1, KU_KEY = 1, KU_VALUE = 2, KU_UNIT = 3 };

/* The largest OTLP index (int32). */
#define MAX_INDEX 0x7fffffffu

/* The interned records: a mapping, a function, a location (followed by its lines). */
typedef struct map_rec {
    uint64_t start, limit, offset;
    uint32_t file, pad;
} map_rec;
typedef struct fn_rec {
    uint32_t name, system_name, file, pad;
    int64_t start_line;
} fn_rec;
typedef struct loc_rec {
    uint32_t mapping, n_lines;
    uint64_t address;
} loc_rec;
typedef struct line_rec {
    uint32_t function, pad;
    int64_t line;
} line_rec;

/* One attribute, as interned: a string value is a string index. */
typedef struct attr_rec {
    uint32_t key, unit;
    uint32_t kind; /* AV_STRING or AV_INT */
    uint32_t pad;
    uint64_t value;
} attr_rec;

typedef struct enc {
    ppk__mem mem;
    ppk__arena arena;
    ppk__dict strs;   /* the string table */
    ppk__dict lvals;  /* string label values (inline in AnyValue): ids for attributes */
    ppk__dict maps, fns, locs, stacks, attrs, groups;
    ppk__pb pb;
    const ppk_pprof *p;
    uint8_t *fix;          /* room to repair one string */
    size_t fix_cap;
    uint32_t *map_ix, *fn_ix, *loc_ix; /* per pprof element: its OTLP index */
    uint8_t *rec;          /* room for one location record */
    uint32_t *type_strs;   /* per sample type: type, unit; then the period type's */
    uint32_t *s_stack;     /* per sample */
    uint32_t *s_group;
    uint8_t *s_has_ts;
    int64_t *s_ts;
    uint32_t *s_dropped;   /* per sample: labels left out (a key again, an empty key) */
    uint32_t *s_attr_off;  /* per sample + 1: its attributes in attr_ix */
    uint32_t *attr_ix;
    uint32_t *scratch;     /* per sample: a key being built, then the group members */
    uint32_t *g_first;     /* per group + 1: its members in `members` */
    uint32_t *members;
    size_t n_attr_ix, n_groups;
    struct { void *p; size_t bytes; } arrays[16]; /* freed at the end */
    size_t n_arrays;
    int rc;
    char *err;
    size_t err_len;
} enc;

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

static int fail(enc *e, int rc, const char *what) {
    if (!e->rc) {
        e->rc = rc;
        if (e->err && e->err_len) snprintf(e->err, e->err_len, "ppk_otlp_encode: %s", what);
    }
    return rc;
}

/* A dict's key bytes. */
static const void *key_of(const ppk__dict *d, uint32_t id) {
    const ppk__dent *x = &d->ents[id];
    return x->len <= PPK_DICT_INLINE ? (const void *)x->key.bytes : (const void *)x->key.ptr;
}

/* ---- pass 1: tables ------------------------------------------------------------------ */

/* s itself when it is valid UTF-8, else its repair (in e->fix, valid until the next
 * call); s.ptr NULL on failure, with e->rc set. */
static ppk_str valid_utf8(enc *e, ppk_str s) {
    if (!s.len || ppk__utf8_valid((const uint8_t *)s.ptr, s.len)) return s;
    if (s.len > SIZE_MAX / 3) return fail(e, PPK_ENOMEM, "string too long"), (ppk_str){0};
    size_t need = 3 * s.len; /* each bad byte becomes 3 */
    if (need > e->fix_cap) {
        uint8_t *f = ppk__mem_resize(&e->mem, e->fix, e->fix_cap, 0, need, 1);
        if (!f) return fail(e, PPK_ENOMEM, "out of memory"), (ppk_str){0};
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
    s = valid_utf8(e, s);
    if (!s.ptr && s.len) return UINT32_MAX;
    if (e->rc) return UINT32_MAX;
    if (s.len > UINT32_MAX) return fail(e, PPK_ETOOBIG, "a string over 4 GiB"), UINT32_MAX;
    uint32_t id = ppk__dict_intern(d, s.ptr, s.len, ppk__hash(s.ptr, s.len), 1, NULL);
    if (id == PPK_DICT_NONE) return fail(e, PPK_ENOMEM, "out of memory"), UINT32_MAX;
    if (id >= MAX_INDEX) return fail(e, PPK_ETOOBIG, "over 2^31 - 1 strings"), UINT32_MAX;
    return id;
}

static uint32_t str_ix(enc *e, ppk_str s) { return intern_str(e, &e->strs, s); }

/* Interns `n` words as a key of dict d; returns id + 1 (0 for none); 0 on failure with
 * e->rc set. */
static uint32_t intern_words(enc *e, ppk__dict *d, const void *w, size_t bytes,
                             const char *what) {
    uint32_t id = ppk__dict_intern(d, w, bytes, ppk__hash(w, bytes), 8, NULL);
    if (id == PPK_DICT_NONE) return fail(e, PPK_ENOMEM, "out of memory"), 0;
    if (id >= MAX_INDEX - 1) return fail(e, PPK_ETOOBIG, what), 0;
    return id + 1;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* A record's index in d; the zero value (all bytes 0) must be interned first. */
static uint32_t intern_rec(enc *e, ppk__dict *d, const void *rec, size_t n, const char *what) {
    uint32_t id = ppk__dict_intern(d, rec, n, ppk__hash(rec, n), 8, NULL);
    if (id == PPK_DICT_NONE) return fail(e, PPK_ENOMEM, "out of memory"), 0;
    if (id >= MAX_INDEX) return fail(e, PPK_ETOOBIG, what), 0;
    return id;
}

/* Mappings, functions and locations (their records and indices), and the types. */
static int intern_elements(enc *e) {
    const ppk_pprof *p = e->p;
    size_t max_lines = 0;
    for (size_t i = 0; i < p->n_locations; i++)
        if (p->locations[i].n_lines > max_lines) max_lines = p->locations[i].n_lines;
    /* A location's record (its lines) is a dict key: under 4 GiB. */
    if (max_lines > (UINT32_MAX - sizeof(loc_rec)) / sizeof(line_rec))
        return fail(e, PPK_ETOOBIG, "a location with over 2^28 lines");
    if (str_ix(e, PPK_STR("")) != 0) return e->rc ? e->rc : fail(e, PPK_ENOMEM, "strings");
    if (!ALLOC_ARRAY(e, e->map_ix, p->n_mappings) || !ALLOC_ARRAY(e, e->fn_ix, p->n_functions) ||
        !ALLOC_ARRAY(e, e->loc_ix, p->n_locations) ||
        !ALLOC_ARRAY(e, e->rec, sizeof(loc_rec) + max_lines * sizeof(line_rec)) ||
        !ALLOC_ARRAY(e, e->type_strs, 2 * p->n_sample_types + 2))
        return fail(e, PPK_ENOMEM, "out of memory");
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
            const attr_rec *o = key_of(&e->attrs, e->attr_ix[j] - 1);
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
        return fail(e, PPK_ENOMEM, "out of memory");
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
        return fail(e, PPK_ENOMEM, "out of memory");
    memset(e->g_first, 0, (e->n_groups + 1) * sizeof *e->g_first);
    for (size_t i = 0; i < n; i++) e->g_first[e->s_group[i] + 1]++;
    for (size_t g = 0; g < e->n_groups; g++) e->g_first[g + 1] += e->g_first[g];
    memcpy(e->scratch, e->g_first, e->n_groups * sizeof *e->scratch);
    for (size_t i = 0; i < n; i++) e->members[e->scratch[e->s_group[i]]++] = (uint32_t)i;
    return 0;
}

/* ---- pass 2: writing ----------------------------------------------------------------- */

static int room(enc *e, size_t n) {
    if (e->rc) return e->rc;
    if (ppk__pb_reserve(&e->pb, n)) return fail(e, PPK_ENOMEM, "out of memory");
    return 0;
}

/* Closes a nested message: room for its length's extra bytes first. */
static int close_msg(enc *e, size_t start) {
    if (room(e, PPK_PB_NEST_MAX)) return e->rc;
    ppk__pb_end(&e->pb, start);
    return 0;
}

/* Eight little-endian bytes (a fixed64 value), and the same as a field. */
static void put_le64(ppk__pb *pb, uint64_t v) {
    PPK_PB_CHECK(pb, 8);
    for (int i = 0; i < 8; i++) pb->buf[pb->len++] = (uint8_t)(v >> (8 * i));
}

static void put_fixed64(ppk__pb *pb, uint32_t field, uint64_t v) {
    ppk__pb_tag(pb, field, PPK_PB_I64);
    put_le64(pb, v);
}

/* A KeyValue with a string or an int value. */
static int put_kv(enc *e, uint32_t field, ppk_str key, const ppk_str *sval, int64_t ival) {
    if (room(e, 4 * PPK_PB_NEST_MAX + key.len + (sval ? sval->len : PPK_PB_UINT_MAX)))
        return e->rc;
    size_t kv = ppk__pb_begin(&e->pb, field);
    ppk__pb_bytes(&e->pb, KV_KEY, key.ptr, key.len);
    size_t av = ppk__pb_begin(&e->pb, KV_VALUE);
    if (sval)
        ppk__pb_bytes(&e->pb, AV_STRING, sval->ptr, sval->len);
    else
        ppk__pb_uint(&e->pb, AV_INT, (uint64_t)ival);
    ppk__pb_end(&e->pb, av);
    ppk__pb_end(&e->pb, kv);
    return 0;
}

/* A resource attribute with a string value (repaired: protobuf strings are UTF-8). */
static int put_str_kv(enc *e, ppk_str key, ppk_str val) {
    val = valid_utf8(e, val);
    return e->rc ? e->rc : put_kv(e, RES_ATTRIBUTES, key, &val, 0);
}

/* 1 when key is one of the n keys in `keys`. */
static int key_in(ppk_str key, const ppk_str *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == key.len && !memcmp(keys[i].ptr, key.ptr, key.len)) return 1;
    return 0;
}

/* The resource: the fields that are set, pprofkit's telemetry.sdk.*, the user's
 * attributes (a key written already, or earlier in the list, is skipped: the fields win,
 * then the first), and service.name "unknown_service" when nobody set it (OTel's rule). */
static int put_resource(enc *e, const ppk_otlp_resource *r) {
    if (room(e, PPK_PB_NEST_MAX)) return e->rc;
    size_t res = ppk__pb_begin(&e->pb, RP_RESOURCE);
    const struct {
        ppk_str key, value;
    } fixed[] = {
        {PPK_STR("service.name"), r->service_name},
        {PPK_STR("service.version"), r->service_version},
        {PPK_STR("deployment.environment.name"), r->environment},
        {PPK_STR("host.name"), r->host_name},
        {PPK_STR("telemetry.sdk.name"), PPK_STR("pprofkit")},
        {PPK_STR("telemetry.sdk.language"), r->sdk_language.len ? r->sdk_language : PPK_STR("cpp")},
        {PPK_STR("telemetry.sdk.version"), PPK_STR(PPK_VERSION_STRING)},
    };
    enum { N_FIXED = sizeof fixed / sizeof *fixed };
    ppk_str written[N_FIXED + 1];
    size_t n_written = 0;
    for (size_t i = 0; i < N_FIXED; i++) {
        if (!fixed[i].value.len) continue;
        put_str_kv(e, fixed[i].key, fixed[i].value);
        written[n_written++] = fixed[i].key;
    }
    if (r->pid) {
        put_kv(e, RES_ATTRIBUTES, PPK_STR("process.pid"), NULL, r->pid);
        written[n_written++] = PPK_STR("process.pid");
    }
    int has_service = r->service_name.len != 0;
    ppk_str rest = r->attributes, key, val;
    while (!e->rc && ppk__kv_next(&rest, &key, &val) == 1) {
        int seen = key_in(key, written, n_written);
        for (ppk_str r2 = r->attributes, k2, v2;
             !seen && ppk__kv_next(&r2, &k2, &v2) == 1 && k2.ptr != key.ptr;)
            seen = k2.len == key.len && !memcmp(k2.ptr, key.ptr, key.len);
        if (seen) continue;
        has_service |= key_in(key, &fixed[0].key, 1); /* service.name */
        char *dec = ppk__arena_alloc(&e->arena, val.len ? val.len : 1, 1);
        if (!dec) return fail(e, PPK_ENOMEM, "out of memory");
        put_kv(e, RES_ATTRIBUTES, key, &(ppk_str){dec, ppk__pct_decode(val, dec)}, 0);
    }
    if (!has_service) put_str_kv(e, PPK_STR("service.name"), PPK_STR("unknown_service"));
    return close_msg(e, res);
}

static void random_bytes(uint8_t *out, size_t n) {
    if (getrandom(out, n, GRND_NONBLOCK) == (ssize_t)n) return;
    uint64_t x = (uint64_t)ppk_now_ns() ^ (uint64_t)(uintptr_t)out;
    for (size_t i = 0; i < n; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        out[i] = (uint8_t)(x >> 56);
    }
}

static int64_t sat_add(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* One Profile: sample type t's samples, group by group. */
static int put_profile(enc *e, size_t t) {
    const ppk_pprof *p = e->p;
    if (room(e, 5 * PPK_PB_NEST_MAX + 6 * PPK_PB_UINT_MAX + 8 + 16)) return e->rc;
    size_t prof = ppk__pb_begin(&e->pb, SP_PROFILES);
    size_t vt = ppk__pb_begin(&e->pb, PR_SAMPLE_TYPE);
    ppk__pb_uint_nz(&e->pb, VT_TYPE, e->type_strs[2 * t]);
    ppk__pb_uint_nz(&e->pb, VT_UNIT, e->type_strs[2 * t + 1]);
    ppk__pb_end(&e->pb, vt);
    uint64_t dropped = 0; /* labels left out of this Profile's samples */
    for (size_t g = 0; g < e->n_groups && !e->rc; g++) {
        const uint32_t *m = e->members + e->g_first[g];
        size_t nm = e->g_first[g + 1] - e->g_first[g], nz = 0;
        int64_t sum = 0;
        uint64_t drop = 0;
        for (size_t k = 0; k < nm; k++) {
            int64_t v = p->samples[m[k]].values[t];
            nz += v != 0;
            sum = sat_add(sum, v);
            drop += v ? e->s_dropped[m[k]] : 0;
        }
        uint32_t first = m[0];
        int ts = e->s_has_ts[first];
        if (ts ? !nz : !sum) continue; /* nothing of this type */
        dropped += drop;
        size_t na = e->s_attr_off[first + 1] - e->s_attr_off[first];
        if (room(e, 4 * PPK_PB_NEST_MAX + PPK_PB_UINT_MAX + na * PPK_PB_VARINT_MAX +
                        (ts ? nz * (PPK_PB_VARINT_MAX + 8) : PPK_PB_VARINT_MAX)))
            break;
        size_t sm = ppk__pb_begin(&e->pb, PR_SAMPLES);
        ppk__pb_uint_nz(&e->pb, SM_STACK, e->s_stack[first]);
        if (na) {
            size_t a = ppk__pb_begin(&e->pb, SM_ATTRIBUTES);
            for (size_t k = 0; k < na; k++)
                ppk__pb_varint(&e->pb, e->attr_ix[e->s_attr_off[first] + k]);
            ppk__pb_end(&e->pb, a);
        }
        size_t vs = ppk__pb_begin(&e->pb, SM_VALUES);
        if (!ts) {
            ppk__pb_varint(&e->pb, (uint64_t)sum);
        } else {
            for (size_t k = 0; k < nm; k++) {
                int64_t v = p->samples[m[k]].values[t];
                if (v) ppk__pb_varint(&e->pb, (uint64_t)v);
            }
        }
        ppk__pb_end(&e->pb, vs);
        if (ts) {
            size_t tsf = ppk__pb_begin(&e->pb, SM_TIMESTAMPS);
            for (size_t k = 0; k < nm; k++)
                if (p->samples[m[k]].values[t]) put_le64(&e->pb, (uint64_t)e->s_ts[m[k]]);
            ppk__pb_end(&e->pb, tsf);
        }
        if (close_msg(e, sm)) break;
    }
    if (room(e, 2 * PPK_PB_NEST_MAX + 6 * PPK_PB_UINT_MAX + 16 + 8)) return e->rc;
    put_fixed64(&e->pb, PR_TIME, (uint64_t)p->time_nanos);
    ppk__pb_uint_nz(&e->pb, PR_DURATION, (uint64_t)p->duration_nanos);
    if (p->period_type.type.len || p->period_type.unit.len) {
        size_t pt = ppk__pb_begin(&e->pb, PR_PERIOD_TYPE);
        ppk__pb_uint_nz(&e->pb, VT_TYPE, e->type_strs[2 * p->n_sample_types]);
        ppk__pb_uint_nz(&e->pb, VT_UNIT, e->type_strs[2 * p->n_sample_types + 1]);
        ppk__pb_end(&e->pb, pt);
    }
    ppk__pb_uint_nz(&e->pb, PR_PERIOD, (uint64_t)p->period);
    uint8_t id[16];
    do random_bytes(id, sizeof id);
    while (!memcmp(id, (uint8_t[16]){0}, sizeof id));
    ppk__pb_bytes(&e->pb, PR_ID, id, sizeof id);
    ppk__pb_uint_nz(&e->pb, PR_DROPPED_ATTRIBUTES, dropped > UINT32_MAX ? UINT32_MAX : dropped);
    return close_msg(e, prof);
}

/* An empty element: a table's zero value at index 0. */
static int put_zero(enc *e, uint32_t field) {
    if (room(e, PPK_PB_NEST_MAX)) return e->rc;
    ppk__pb_end(&e->pb, ppk__pb_begin(&e->pb, field));
    return 0;
}

static int put_dictionary(enc *e) {
    if (room(e, PPK_PB_NEST_MAX)) return e->rc;
    size_t dict = ppk__pb_begin(&e->pb, REQ_DICTIONARY);
    /* Index 0 of mappings, functions and locations is their zero record. */
    for (uint32_t i = 0; i < e->maps.n && !room(e, PPK_PB_NEST_MAX + 4 * PPK_PB_UINT_MAX); i++) {
        const map_rec *m = key_of(&e->maps, i);
        size_t b = ppk__pb_begin(&e->pb, DI_MAPPINGS);
        ppk__pb_uint_nz(&e->pb, MA_START, m->start);
        ppk__pb_uint_nz(&e->pb, MA_LIMIT, m->limit);
        ppk__pb_uint_nz(&e->pb, MA_OFFSET, m->offset);
        ppk__pb_uint_nz(&e->pb, MA_FILENAME, m->file);
        ppk__pb_end(&e->pb, b);
    }
    for (uint32_t i = 0; i < e->locs.n && !e->rc; i++) {
        const loc_rec *l = key_of(&e->locs, i);
        const line_rec *lines = (const line_rec *)(l + 1);
        if (room(e, PPK_PB_NEST_MAX + 2 * PPK_PB_UINT_MAX +
                        (size_t)l->n_lines * (PPK_PB_NEST_MAX + 2 * PPK_PB_UINT_MAX)))
            break;
        size_t b = ppk__pb_begin(&e->pb, DI_LOCATIONS);
        ppk__pb_uint_nz(&e->pb, LO_MAPPING, l->mapping);
        ppk__pb_uint_nz(&e->pb, LO_ADDRESS, l->address);
        for (size_t k = 0; k < l->n_lines; k++) {
            size_t ln = ppk__pb_begin(&e->pb, LO_LINES);
            ppk__pb_uint_nz(&e->pb, LI_FUNCTION, lines[k].function);
            ppk__pb_uint_nz(&e->pb, LI_LINE, (uint64_t)lines[k].line);
            ppk__pb_end(&e->pb, ln);
        }
        ppk__pb_end(&e->pb, b);
    }
    for (uint32_t i = 0; i < e->fns.n && !room(e, PPK_PB_NEST_MAX + 4 * PPK_PB_UINT_MAX); i++) {
        const fn_rec *f = key_of(&e->fns, i);
        size_t b = ppk__pb_begin(&e->pb, DI_FUNCTIONS);
        ppk__pb_uint_nz(&e->pb, FN_NAME, f->name);
        ppk__pb_uint_nz(&e->pb, FN_SYSTEM_NAME, f->system_name);
        ppk__pb_uint_nz(&e->pb, FN_FILENAME, f->file);
        ppk__pb_uint_nz(&e->pb, FN_START_LINE, (uint64_t)f->start_line);
        ppk__pb_end(&e->pb, b);
    }
    put_zero(e, DI_LINKS);
    for (uint32_t i = 0; i < e->strs.n && !e->rc; i++) {
        size_t n = e->strs.ents[i].len;
        if (room(e, PPK_PB_NEST_MAX + n)) break;
        ppk__pb_bytes(&e->pb, DI_STRINGS, key_of(&e->strs, i), n);
    }
    put_zero(e, DI_ATTRIBUTES);
    for (uint32_t i = 0; i < e->attrs.n && !room(e, 2 * PPK_PB_NEST_MAX + 3 * PPK_PB_UINT_MAX);
         i++) {
        const attr_rec *a = key_of(&e->attrs, i);
        size_t b = ppk__pb_begin(&e->pb, DI_ATTRIBUTES);
        ppk__pb_uint_nz(&e->pb, KU_KEY, a->key);
        size_t v = ppk__pb_begin(&e->pb, KU_VALUE);
        if (a->kind == AV_INT) {
            ppk__pb_uint(&e->pb, AV_INT, a->value);
        } else {
            size_t n = e->lvals.ents[a->value].len;
            if (room(e, 2 * PPK_PB_NEST_MAX + PPK_PB_UINT_MAX + n)) break;
            ppk__pb_bytes(&e->pb, AV_STRING, key_of(&e->lvals, (uint32_t)a->value), n);
        }
        ppk__pb_end(&e->pb, v);
        ppk__pb_uint_nz(&e->pb, KU_UNIT, a->unit);
        ppk__pb_end(&e->pb, b);
    }
    put_zero(e, DI_STACKS);
    for (uint32_t i = 0; i < e->stacks.n && !e->rc; i++) {
        size_t n = e->stacks.ents[i].len / sizeof(uint32_t);
        if (room(e, 2 * PPK_PB_NEST_MAX + n * PPK_PB_VARINT_MAX)) break;
        const uint32_t *locs = key_of(&e->stacks, i);
        size_t b = ppk__pb_begin(&e->pb, DI_STACKS);
        size_t l = ppk__pb_begin(&e->pb, ST_LOCATIONS);
        for (size_t k = 0; k < n; k++) ppk__pb_varint(&e->pb, locs[k]);
        ppk__pb_end(&e->pb, l);
        ppk__pb_end(&e->pb, b);
    }
    return e->rc ? e->rc : close_msg(e, dict);
}

static int encode(enc *e, const ppk_otlp_resource *res) {
    const ppk_pprof *p = e->p;
    if (p->n_mappings >= MAX_INDEX || p->n_locations >= MAX_INDEX ||
        p->n_functions >= MAX_INDEX || p->n_samples >= MAX_INDEX)
        return fail(e, PPK_ETOOBIG, "a table over 2^31 - 2 entries");
    if (intern_elements(e) || intern_samples(e)) return e->rc;
    if (room(e, 2 * PPK_PB_NEST_MAX)) return e->rc;
    size_t rp = ppk__pb_begin(&e->pb, REQ_RESOURCE_PROFILES);
    if (put_resource(e, res)) return e->rc;
    if (room(e, 2 * PPK_PB_NEST_MAX + 2 * PPK_PB_NEST_MAX + 8 + sizeof PPK_VERSION_STRING))
        return e->rc;
    size_t sp = ppk__pb_begin(&e->pb, RP_SCOPE_PROFILES);
    size_t sc = ppk__pb_begin(&e->pb, SP_SCOPE);
    ppk__pb_bytes(&e->pb, SCOPE_NAME, "pprofkit", 8);
    ppk__pb_bytes(&e->pb, SCOPE_VERSION, PPK_VERSION_STRING, sizeof PPK_VERSION_STRING - 1);
    ppk__pb_end(&e->pb, sc);
    for (size_t t = 0; t < p->n_sample_types; t++)
        if (put_profile(e, t)) return e->rc;
    if (close_msg(e, sp) || close_msg(e, rp)) return e->rc;
    return put_dictionary(e);
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

    enc *e;
    ppk__mem mem;
    ppk_allocator al = {0};
    if (a) al = *a;
    if (!al.alloc != !al.free) return PPK_EINVAL;
    ppk__mem_init(&mem, &al);
    e = ppk__mem_alloc(&mem, sizeof *e);
    if (!e) return PPK_ENOMEM;
    memset(e, 0, sizeof *e);
    e->mem = mem;
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
        rc = fail(e, PPK_ENOMEM, "out of memory");

    for (size_t i = 0; i < e->n_arrays; i++) ppk__mem_free(&e->mem, e->arrays[i].p, e->arrays[i].bytes);
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
    mem = e->mem;
    ppk__mem_free(&mem, e, sizeof *e);
    return rc;
}
