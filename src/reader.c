/*
 * reader.c - decodes a pprof profile (profile.proto) into a ppk_pprof; what it checks is
 * listed in pprofkit.h, section 6.
 *
 * The input is decompressed (decompress.c) or copied into one buffer that the ppk_pprof
 * keeps: every string points into it. Then two passes over the protobuf. The first checks
 * the wire format of every field, nested messages included, and counts each kind of
 * element; the tables (every array of the ppk_pprof) are then allocated as one block of
 * exactly the size counted, once it is known to fit max_memory. The second pass fills
 * them in four sweeps over the top-level fields, each skipping the fields of the others
 * (a length-prefixed field is skipped in O(1)), so that what an element refers to is
 * known when it is filled: the strings; then sample types, mappings, functions and the
 * scalars; then locations (their mapping and function ids resolved); then samples (their
 * location ids resolved). An id is looked up directly when element i has id i + 1, as in
 * pprofkit's and Go's profiles, else in a sorted index, scratch freed before returning.
 * Every error names the field and the byte offset where it was found.
 *
 * Memory: the ppk_pprof itself (with its ppk__mem), the protobuf, the tables and the
 * index scratch: four blocks from the caller's allocator, all within max_memory. A call
 * shares nothing with another: any number may run at once.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "decompress.h"

#define DEFAULT_MAX_DECODED ((size_t)256 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)2 << 30)

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

/* A message's name and its fields' names, for the error messages. */
typedef struct msgdesc {
    const char *name;
    const char *const *fields; /* by field number */
    uint32_t n;
} msgdesc;

static const char *const profile_f[] = {
    NULL, "sample_type", "sample", "mapping", "location", "function", "string_table",
    "drop_frames", "keep_frames", "time_nanos", "duration_nanos", "period_type", "period",
    "comment", "default_sample_type"};
static const char *const value_type_f[] = {NULL, "type", "unit"};
static const char *const sample_f[] = {NULL, "location_id", "value", "label"};
static const char *const label_f[] = {NULL, "key", "str", "num", "num_unit"};
static const char *const mapping_f[] = {
    NULL, "id", "memory_start", "memory_limit", "file_offset", "filename", "build_id",
    "has_functions", "has_filenames", "has_line_numbers", "has_inline_frames"};
static const char *const location_f[] = {NULL, "id", "mapping_id", "address", "line",
                                         "is_folded"};
static const char *const line_f[] = {NULL, "function_id", "line"};
static const char *const function_f[] = {NULL, "id", "name", "system_name", "filename",
                                         "start_line"};

#define DESC(name, f) {name, f, sizeof f / sizeof f[0]}
static const msgdesc M_PROFILE = DESC("Profile", profile_f);
static const msgdesc M_VALUE_TYPE = DESC("ValueType", value_type_f);
static const msgdesc M_SAMPLE = DESC("Sample", sample_f);
static const msgdesc M_LABEL = DESC("Label", label_f);
static const msgdesc M_MAPPING = DESC("Mapping", mapping_f);
static const msgdesc M_LOCATION = DESC("Location", location_f);
static const msgdesc M_LINE = DESC("Line", line_f);
static const msgdesc M_FUNCTION = DESC("Function", function_f);

/* What ppk_pprof_read returns: the public part first. */
typedef struct reader {
    ppk_pprof pub;
    ppk__mem mem; /* everything below, and this struct */
    ppk__dbuf buf;
    void *tables;
    size_t tables_size;
} reader;

/* Element counts (first pass), then fill cursors (second pass). */
typedef struct counts {
    size_t types, samples, mappings, locations, functions, strings, comments;
    size_t locrefs, values, labels, lines;
} counts;

/* An index entry: an element's id, its position, the byte offset of its message. */
typedef struct ent {
    uint64_t id;
    size_t pos, at;
} ent;

typedef struct index {
    ent *e;
    size_t n;
    int dense; /* e[i].id == i + 1 for every i: no sort, no search */
} index;

enum { SW_COUNT, SW_STRINGS, SW_TABLES, SW_LOCATIONS, SW_SAMPLES };

typedef struct dec {
    reader *r;
    const uint8_t *b; /* the protobuf */
    size_t n;
    int sweep;
    counts cnt, cur;
    /* The tables (second pass). */
    ppk_value_type *types;
    ppk_pprof_sample *samples;
    ppk_pprof_mapping *mappings;
    ppk_pprof_location *locations;
    ppk_pprof_function *functions;
    ppk_str *strings, *comments;
    const ppk_pprof_location **locrefs;
    int64_t *values;
    ppk_pprof_label *labels;
    ppk_pprof_line *lines;
    index ix_map, ix_fn, ix_loc;
    char *err;
    size_t err_len;
} dec;

/* One field: number, wire type, value (the length for wire type 2), where it is. */
typedef struct fld {
    uint32_t num, wt;
    uint64_t v;
    size_t at;   /* the tag's offset */
    size_t data; /* wire type 2: where the bytes start */
} fld;

static int fail(dec *d, int rc, const msgdesc *m, uint32_t num, size_t at, const char *fmt,
                ...) __attribute__((format(printf, 6, 7)));
static int fail(dec *d, int rc, const msgdesc *m, uint32_t num, size_t at, const char *fmt,
                ...) {
    if (!d->err_len) return rc;
    int k;
    if (num == 0)
        k = snprintf(d->err, d->err_len, "%s at byte %zu: ", m->name, at);
    else if (num < m->n && m->fields[num])
        k = snprintf(d->err, d->err_len, "%s.%s at byte %zu: ", m->name, m->fields[num], at);
    else
        k = snprintf(d->err, d->err_len, "%s field %u at byte %zu: ", m->name, num, at);
    if (k >= 0 && (size_t)k < d->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err + k, d->err_len - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return rc;
}

static int get_varint(dec *d, size_t *pos, size_t end, uint64_t *v, const msgdesc *m,
                      uint32_t num) {
    size_t p = *pos;
    uint64_t x = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return fail(d, PPK_EFORMAT, m, num, *pos, "a varint runs past the end of the %s",
                        m->name);
        uint8_t b = d->b[p++];
        if (i == 9 && b > 1)
            return fail(d, PPK_EFORMAT, m, num, *pos, "%s", b & 0x80 ?
                        "a varint longer than 10 bytes" : "a varint above 2^64 - 1");
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *v = x;
            *pos = p;
            return 0;
        }
    }
    return 0; /* not reached: the tenth byte ends the varint or fails */
}

/* The field at *pos (< end) of message m; *pos moves past it. */
static int next_field(dec *d, size_t *pos, size_t end, const msgdesc *m, fld *f) {
    uint64_t key;
    f->at = *pos;
    int rc = get_varint(d, pos, end, &key, m, 0);
    if (rc) return rc;
    if ((key >> 3) == 0 || (key >> 3) > 0x1fffffff)
        return fail(d, PPK_EFORMAT, m, 0, f->at, "field number %llu is invalid",
                    (unsigned long long)(key >> 3));
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    switch (f->wt) {
    case WT_VARINT:
        return get_varint(d, pos, end, &f->v, m, f->num);
    case WT_I64:
    case WT_I32: {
        size_t w = f->wt == WT_I64 ? 8 : 4;
        if (end - *pos < w)
            return fail(d, PPK_EFORMAT, m, f->num, f->at,
                        "a %zu-byte value runs past the end of the %s", w, m->name);
        f->v = 0;
        for (size_t i = 0; i < w; i++) f->v |= (uint64_t)d->b[*pos + i] << (8 * i);
        *pos += w;
        return 0;
    }
    case WT_LEN:
        if ((rc = get_varint(d, pos, end, &f->v, m, f->num))) return rc;
        if (f->v > end - *pos)
            return fail(d, PPK_EFORMAT, m, f->num, f->at,
                        "length %llu runs past the end of the %s (%zu bytes left)",
                        (unsigned long long)f->v, m->name, end - *pos);
        f->data = *pos;
        *pos += (size_t)f->v;
        return 0;
    default:
        return fail(d, PPK_EFORMAT, m, f->num, f->at, "wire type %u is not supported",
                    f->wt);
    }
}

static int want(dec *d, const msgdesc *m, const fld *f, uint32_t wt) {
    if (f->wt == wt) return 0;
    return fail(d, PPK_EFORMAT, m, f->num, f->at, "wire type %u, expected %u (%s)", f->wt, wt,
                wt == WT_LEN ? "length-delimited" : "varint");
}

/* The integers of a repeated scalar field: packed (wire type 2) or one (wire type 0).
 * Calls fn for each, with its byte offset; fn NULL only counts them into *n. */
typedef int (*int_fn)(dec *d, void *ctx, uint64_t v, size_t at);

static int each_int(dec *d, const msgdesc *m, const fld *f, int_fn fn, void *ctx, size_t *n) {
    if (f->wt == WT_VARINT) {
        (*n)++;
        return fn ? fn(d, ctx, f->v, f->at) : 0;
    }
    if (f->wt != WT_LEN)
        return fail(d, PPK_EFORMAT, m, f->num, f->at,
                    "wire type %u, expected 0 (varint) or 2 (packed)", f->wt);
    size_t pos = f->data, end = f->data + (size_t)f->v;
    while (pos < end) {
        size_t at = pos;
        uint64_t v;
        int rc = get_varint(d, &pos, end, &v, m, f->num);
        if (rc) return rc;
        (*n)++;
        if (fn && (rc = fn(d, ctx, v, at))) return rc;
    }
    return 0;
}

/* A string index of field num of m (found at `at`) into *out; not checked when counting. */
static int string_at(dec *d, const msgdesc *m, uint32_t num, size_t at, uint64_t idx,
                     ppk_str *out) {
    if (d->sweep == SW_COUNT) return 0;
    if (idx >= d->cnt.strings)
        return fail(d, PPK_EFORMAT, m, num, at,
                    "string index %lld out of range (string_table has %zu strings)",
                    (long long)idx, d->cnt.strings);
    *out = d->strings[idx];
    return 0;
}

/* A field holding a string index. */
static int string_field(dec *d, const msgdesc *m, const fld *f, ppk_str *out) {
    int rc = want(d, m, f, WT_VARINT);
    return rc ? rc : string_at(d, m, f->num, f->at, f->v, out);
}

/* A varint field's value (int64 and uint64 fields; bools are v != 0). */
static int varint_field(dec *d, const msgdesc *m, const fld *f, uint64_t *out) {
    int rc = want(d, m, f, WT_VARINT);
    if (!rc) *out = f->v;
    return rc;
}

/* A ValueType into *vt. A message field given twice is merged (protobuf's rule): with
 * `merge`, what *vt holds is the start (period_type); else "" (a new sample_type). */
static int value_type(dec *d, const fld *outer, ppk_value_type *vt, int merge) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v;
    ppk_str empty = d->strings ? d->strings[0] : (ppk_str){NULL, 0};
    ppk_value_type t = merge && vt ? *vt : (ppk_value_type){empty, empty};
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = next_field(d, &pos, end, &M_VALUE_TYPE, &f))) {
        if (f.num == 1) rc = string_field(d, &M_VALUE_TYPE, &f, &t.type);
        else if (f.num == 2) rc = string_field(d, &M_VALUE_TYPE, &f, &t.unit);
    }
    if (!rc && vt) *vt = t;
    return rc;
}

/* Lookups: the position of id in the index, or SIZE_MAX. */
static size_t find(const index *ix, uint64_t id) {
    if (ix->dense) return id >= 1 && id <= ix->n ? (size_t)(id - 1) : SIZE_MAX;
    size_t lo = 0, hi = ix->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ix->e[mid].id < id) lo = mid + 1;
        else hi = mid;
    }
    return lo < ix->n && ix->e[lo].id == id ? ix->e[lo].pos : SIZE_MAX;
}

static int ent_cmp(const void *a, const void *b) {
    const ent *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Makes the index searchable; an id twice is an error (at the later of the two). */
static int index_build(dec *d, index *ix, const msgdesc *field_of) {
    ix->dense = 1;
    for (size_t i = 0; i < ix->n && ix->dense; i++) ix->dense = ix->e[i].id == i + 1;
    if (ix->dense) return 0;
    qsort(ix->e, ix->n, sizeof *ix->e, ent_cmp);
    for (size_t i = 1; i < ix->n; i++)
        if (ix->e[i].id == ix->e[i - 1].id)
            return fail(d, PPK_EFORMAT, field_of, 1, ix->e[i].at,
                        "id %llu appears twice (also at byte %zu)",
                        (unsigned long long)ix->e[i].id, ix->e[i - 1].at);
    return 0;
}

/* An element's id field: 0 (or absent) is reserved. */
static int check_id(dec *d, const msgdesc *m, const fld *outer, uint64_t id, size_t id_at) {
    if (id) return 0;
    return fail(d, PPK_EFORMAT, m, 1, id_at ? id_at : outer->at, "%s",
                id_at ? "id 0 is reserved" : "no id (0 is reserved)");
}

static int label(dec *d, const fld *outer, ppk_pprof_label *out) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v;
    ppk_pprof_label l;
    memset(&l, 0, sizeof l);
    if (d->strings) l.key = l.str = l.num_unit = d->strings[0];
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = next_field(d, &pos, end, &M_LABEL, &f))) {
        uint64_t v;
        if (f.num == 1) rc = string_field(d, &M_LABEL, &f, &l.key);
        else if (f.num == 2) rc = string_field(d, &M_LABEL, &f, &l.str);
        else if (f.num == 4) rc = string_field(d, &M_LABEL, &f, &l.num_unit);
        else if (f.num == 3 && !(rc = varint_field(d, &M_LABEL, &f, &v))) l.num = (int64_t)v;
    }
    if (!rc && out) *out = l;
    return rc;
}

static int add_value(dec *d, void *ctx, uint64_t v, size_t at) {
    (void)ctx;
    (void)at;
    d->values[d->cur.values++] = (int64_t)v;
    return 0;
}

static int add_locref(dec *d, void *ctx, uint64_t v, size_t at) {
    (void)ctx;
    size_t i = find(&d->ix_loc, v);
    if (i == SIZE_MAX)
        return fail(d, PPK_EFORMAT, &M_SAMPLE, 1, at,
                    "location id %llu is not in Profile.location", (unsigned long long)v);
    d->locrefs[d->cur.locrefs++] = &d->locations[i];
    return 0;
}

static int sample(dec *d, const fld *outer) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v;
    int filling = d->sweep == SW_SAMPLES;
    counts *c = filling ? &d->cur : &d->cnt;
    size_t locs0 = c->locrefs, vals0 = c->values, labs0 = c->labels;
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = next_field(d, &pos, end, &M_SAMPLE, &f))) {
        if (f.num == 1) {
            size_t n = 0;
            rc = each_int(d, &M_SAMPLE, &f, filling ? add_locref : NULL, NULL, &n);
            if (!filling) c->locrefs += n;
        } else if (f.num == 2) {
            size_t n = 0;
            rc = each_int(d, &M_SAMPLE, &f, filling ? add_value : NULL, NULL, &n);
            if (!filling) c->values += n;
        } else if (f.num == 3) {
            if (!(rc = want(d, &M_SAMPLE, &f, WT_LEN)))
                rc = label(d, &f, filling ? &d->labels[c->labels] : NULL);
            c->labels++;
        }
    }
    if (rc || !filling) return rc;
    size_t nv = c->values - vals0;
    if (nv != d->cnt.types)
        return fail(d, PPK_EFORMAT, &M_PROFILE, 2, outer->at,
                    "%zu values for %zu sample types", nv, d->cnt.types);
    ppk_pprof_sample *s = &d->samples[c->samples++];
    s->locations = d->locrefs + locs0;
    s->n_locations = c->locrefs - locs0;
    s->values = d->values + vals0;
    s->labels = d->labels + labs0;
    s->n_labels = c->labels - labs0;
    return 0;
}

static int mapping(dec *d, const fld *outer) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v, id_at = 0;
    ppk_pprof_mapping m;
    memset(&m, 0, sizeof m);
    if (d->strings) m.filename = m.build_id = d->strings[0];
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = next_field(d, &pos, end, &M_MAPPING, &f))) {
        uint64_t v = 0;
        switch (f.num) {
        case 5: rc = string_field(d, &M_MAPPING, &f, &m.filename); break;
        case 6: rc = string_field(d, &M_MAPPING, &f, &m.build_id); break;
        case 1: case 2: case 3: case 4: case 7: case 8: case 9: case 10:
            if ((rc = varint_field(d, &M_MAPPING, &f, &v))) break;
            if (f.num == 1) m.id = v, id_at = f.at;
            else if (f.num == 2) m.memory_start = v;
            else if (f.num == 3) m.memory_limit = v;
            else if (f.num == 4) m.file_offset = v;
            else if (f.num == 7) m.has_functions = v != 0;
            else if (f.num == 8) m.has_filenames = v != 0;
            else if (f.num == 9) m.has_line_numbers = v != 0;
            else m.has_inline_frames = v != 0;
            break;
        }
    }
    if (rc || d->sweep != SW_TABLES) return rc;
    if ((rc = check_id(d, &M_MAPPING, outer, m.id, id_at))) return rc;
    size_t i = d->cur.mappings++;
    d->mappings[i] = m;
    d->ix_map.e[i] = (ent){m.id, i, outer->at};
    return 0;
}

static int function(dec *d, const fld *outer) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v, id_at = 0;
    ppk_pprof_function fn;
    memset(&fn, 0, sizeof fn);
    if (d->strings) fn.name = fn.system_name = fn.filename = d->strings[0];
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = next_field(d, &pos, end, &M_FUNCTION, &f))) {
        uint64_t v = 0;
        if (f.num == 2) rc = string_field(d, &M_FUNCTION, &f, &fn.name);
        else if (f.num == 3) rc = string_field(d, &M_FUNCTION, &f, &fn.system_name);
        else if (f.num == 4) rc = string_field(d, &M_FUNCTION, &f, &fn.filename);
        else if (f.num == 1 && !(rc = varint_field(d, &M_FUNCTION, &f, &v))) fn.id = v, id_at = f.at;
        else if (f.num == 5 && !(rc = varint_field(d, &M_FUNCTION, &f, &v))) fn.start_line = (int64_t)v;
    }
    if (rc || d->sweep != SW_TABLES) return rc;
    if ((rc = check_id(d, &M_FUNCTION, outer, fn.id, id_at))) return rc;
    size_t i = d->cur.functions++;
    d->functions[i] = fn;
    d->ix_fn.e[i] = (ent){fn.id, i, outer->at};
    return 0;
}

static int line(dec *d, const fld *outer, ppk_pprof_line *out) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v;
    uint64_t fn_id = 0, v;
    size_t fn_at = outer->at;
    int64_t ln = 0;
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = next_field(d, &pos, end, &M_LINE, &f))) {
        if (f.num == 1 && !(rc = varint_field(d, &M_LINE, &f, &fn_id))) fn_at = f.at;
        else if (f.num == 2 && !(rc = varint_field(d, &M_LINE, &f, &v))) ln = (int64_t)v;
    }
    if (rc || !out) return rc;
    out->line = ln;
    out->function = NULL;
    if (fn_id) {
        size_t i = find(&d->ix_fn, fn_id);
        if (i == SIZE_MAX)
            return fail(d, PPK_EFORMAT, &M_LINE, 1, fn_at,
                        "function id %llu is not in Profile.function",
                        (unsigned long long)fn_id);
        out->function = &d->functions[i];
    }
    return 0;
}

static int location(dec *d, const fld *outer) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v, id_at = 0, map_at = 0;
    int filling = d->sweep == SW_LOCATIONS;
    counts *c = filling ? &d->cur : &d->cnt;
    size_t lines0 = c->lines;
    ppk_pprof_location l;
    memset(&l, 0, sizeof l);
    uint64_t map_id = 0, v;
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = next_field(d, &pos, end, &M_LOCATION, &f))) {
        if (f.num == 4) {
            if (!(rc = want(d, &M_LOCATION, &f, WT_LEN)))
                rc = line(d, &f, filling ? &d->lines[c->lines] : NULL);
            c->lines++;
        } else if (f.num >= 1 && f.num <= 5 && !(rc = varint_field(d, &M_LOCATION, &f, &v))) {
            if (f.num == 1) l.id = v, id_at = f.at;
            else if (f.num == 2) map_id = v, map_at = f.at;
            else if (f.num == 3) l.address = v;
            else l.is_folded = v != 0;
        }
    }
    if (rc || !filling) return rc;
    if ((rc = check_id(d, &M_LOCATION, outer, l.id, id_at))) return rc;
    if (map_id) {
        size_t m = find(&d->ix_map, map_id);
        if (m == SIZE_MAX)
            return fail(d, PPK_EFORMAT, &M_LOCATION, 2, map_at,
                        "mapping id %llu is not in Profile.mapping", (unsigned long long)map_id);
        l.mapping = &d->mappings[m];
    }
    l.lines = d->lines + lines0;
    l.n_lines = c->lines - lines0;
    size_t i = c->locations++;
    d->locations[i] = l;
    d->ix_loc.e[i] = (ent){l.id, i, outer->at};
    return 0;
}

static int add_comment(dec *d, void *ctx, uint64_t v, size_t at) {
    (void)ctx;
    return string_at(d, &M_PROFILE, 13, at, v, &d->comments[d->cur.comments++]);
}

/* One sweep over the top-level fields; see the top of the file. */
static int sweep(dec *d, int which) {
    ppk_pprof *p = &d->r->pub;
    size_t pos = 0;
    d->sweep = which;
    int count = which == SW_COUNT, tables = which == SW_TABLES;
    fld f;
    int rc = 0;
    while (!rc && pos < d->n && !(rc = next_field(d, &pos, d->n, &M_PROFILE, &f))) {
        uint64_t v;
        switch (f.num) {
        case 1: /* sample_type */
            if (count && !(rc = want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.types++;
            if (count || tables)
                rc = rc ? rc : value_type(d, &f, tables ? &d->types[d->cur.types++] : NULL, 0);
            break;
        case 2:
            if (count && !(rc = want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.samples++;
            if (!rc && (count || which == SW_SAMPLES)) rc = sample(d, &f);
            break;
        case 3:
            if (count && !(rc = want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.mappings++;
            if (!rc && (count || tables)) rc = mapping(d, &f);
            break;
        case 4:
            if (count && !(rc = want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.locations++;
            if (!rc && (count || which == SW_LOCATIONS)) rc = location(d, &f);
            break;
        case 5:
            if (count && !(rc = want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.functions++;
            if (!rc && (count || tables)) rc = function(d, &f);
            break;
        case 6:
            if (count && !(rc = want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.strings++;
            if (which == SW_STRINGS) {
                size_t i = d->cur.strings++;
                d->strings[i] = (ppk_str){(const char *)d->b + f.data, (size_t)f.v};
                if (i == 0 && f.v != 0)
                    return fail(d, PPK_EFORMAT, &M_PROFILE, 6, f.at,
                                "string_table[0] must be \"\" (it has %llu bytes)",
                                (unsigned long long)f.v);
            }
            break;
        case 7: case 8: case 14:
            if (count) rc = want(d, &M_PROFILE, &f, WT_VARINT);
            else if (tables)
                rc = string_field(d, &M_PROFILE, &f, f.num == 7 ? &p->drop_frames
                                                     : f.num == 8 ? &p->keep_frames
                                                                  : &p->default_sample_type);
            break;
        case 9: case 10: case 12:
            if (!(rc = varint_field(d, &M_PROFILE, &f, &v)) && tables) {
                if (f.num == 9) p->time_nanos = (int64_t)v;
                else if (f.num == 10) p->duration_nanos = (int64_t)v;
                else p->period = (int64_t)v;
            }
            break;
        case 11:
            if (!(rc = want(d, &M_PROFILE, &f, WT_LEN)) && (count || tables))
                rc = value_type(d, &f, tables ? &p->period_type : NULL, 1);
            break;
        case 13:
            if (count) rc = each_int(d, &M_PROFILE, &f, NULL, NULL, &d->cnt.comments);
            else if (tables) {
                size_t n = 0;
                rc = each_int(d, &M_PROFILE, &f, add_comment, NULL, &n);
            }
            break;
        default: /* unknown: skipped */
            break;
        }
    }
    return rc;
}

/* Round up to the alignment of any type; SIZE_MAX on overflow. */
static size_t aligned(size_t n) {
    size_t a = _Alignof(max_align_t);
    return n > SIZE_MAX - a ? SIZE_MAX : (n + a - 1) / a * a;
}

/* Adds n elements of `size` bytes to *total (saturating at SIZE_MAX). */
static void add_size(size_t *total, size_t n, size_t size) {
    size_t bytes = size && n > SIZE_MAX / size ? SIZE_MAX : aligned(n * size);
    *total = *total > SIZE_MAX - bytes ? SIZE_MAX : *total + bytes;
}

static void *carve(uint8_t **at, size_t n, size_t size) {
    void *p = *at;
    *at += aligned(n * size);
    return p;
}

/* A message without a field and offset. */
static int plain(dec *d, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int plain(dec *d, int rc, const char *fmt, ...) {
    if (d->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err, d->err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

/* An allocation of `bytes` failed or would pass max_memory. */
static int out_of_memory(dec *d, const ppk__mem *m, size_t bytes) {
    if (m->limited || bytes > m->limit - (m->bytes < m->limit ? m->bytes : m->limit))
        return plain(d, PPK_ETOOBIG, "%zu more bytes would pass max_memory (%zu bytes, %zu "
                     "in use)", bytes, m->limit, m->bytes);
    return plain(d, PPK_ENOMEM, "out of memory (%zu bytes)", bytes);
}

/* The two passes over d->b (d->r's buffer). */
static int decode(dec *d) {
    reader *r = d->r;
    int rc = sweep(d, SW_COUNT);
    if (rc) return rc;
    const counts *c = &d->cnt;
    if (c->strings == 0)
        return fail(d, PPK_EFORMAT, &M_PROFILE, 6, d->n,
                    "no string_table (string_table[0] must be \"\")");
    size_t size = 0, scratch = 0;
    add_size(&size, c->types, sizeof(ppk_value_type));
    add_size(&size, c->samples, sizeof(ppk_pprof_sample));
    add_size(&size, c->mappings, sizeof(ppk_pprof_mapping));
    add_size(&size, c->locations, sizeof(ppk_pprof_location));
    add_size(&size, c->functions, sizeof(ppk_pprof_function));
    add_size(&size, c->strings, sizeof(ppk_str));
    add_size(&size, c->comments, sizeof(ppk_str));
    add_size(&size, c->locrefs, sizeof(ppk_pprof_location *));
    add_size(&size, c->values, sizeof(int64_t));
    add_size(&size, c->labels, sizeof(ppk_pprof_label));
    add_size(&size, c->lines, sizeof(ppk_pprof_line));
    add_size(&scratch, c->mappings, sizeof(ent));
    add_size(&scratch, c->functions, sizeof(ent));
    add_size(&scratch, c->locations, sizeof(ent));
    if (size == SIZE_MAX || scratch == SIZE_MAX || size > SIZE_MAX - scratch)
        return out_of_memory(d, &r->mem, SIZE_MAX);
    ppk__mem *m = &r->mem;
    if (size + scratch > m->limit - (m->bytes < m->limit ? m->bytes : m->limit))
        return out_of_memory(d, m, size + scratch);
    uint8_t *t = ppk__mem_alloc(m, size);
    if (!t) return out_of_memory(d, m, size);
    r->tables = t;
    r->tables_size = size;
    uint8_t *s = ppk__mem_alloc(m, scratch);
    if (!s) return out_of_memory(d, m, scratch);
    d->types = carve(&t, c->types, sizeof *d->types);
    d->samples = carve(&t, c->samples, sizeof *d->samples);
    d->mappings = carve(&t, c->mappings, sizeof *d->mappings);
    d->locations = carve(&t, c->locations, sizeof *d->locations);
    d->functions = carve(&t, c->functions, sizeof *d->functions);
    d->strings = carve(&t, c->strings, sizeof *d->strings);
    d->comments = carve(&t, c->comments, sizeof *d->comments);
    d->locrefs = carve(&t, c->locrefs, sizeof *d->locrefs);
    d->values = carve(&t, c->values, sizeof *d->values);
    d->labels = carve(&t, c->labels, sizeof *d->labels);
    d->lines = carve(&t, c->lines, sizeof *d->lines);
    uint8_t *s0 = s;
    d->ix_map = (index){carve(&s, c->mappings, sizeof(ent)), c->mappings, 0};
    d->ix_fn = (index){carve(&s, c->functions, sizeof(ent)), c->functions, 0};
    d->ix_loc = (index){carve(&s, c->locations, sizeof(ent)), c->locations, 0};

    ppk_pprof *p = &r->pub;
    rc = sweep(d, SW_STRINGS);
    if (!rc) {
        p->drop_frames = p->keep_frames = p->default_sample_type = d->strings[0];
        p->period_type.type = p->period_type.unit = d->strings[0];
        rc = sweep(d, SW_TABLES);
    }
    if (!rc) rc = index_build(d, &d->ix_map, &M_MAPPING);
    if (!rc) rc = index_build(d, &d->ix_fn, &M_FUNCTION);
    if (!rc) rc = sweep(d, SW_LOCATIONS);
    if (!rc) rc = index_build(d, &d->ix_loc, &M_LOCATION);
    if (!rc) rc = sweep(d, SW_SAMPLES);
    ppk__mem_free(m, s0, scratch);
    if (rc) return rc;
    p->sample_types = d->types;
    p->n_sample_types = c->types;
    p->samples = d->samples;
    p->n_samples = c->samples;
    p->mappings = d->mappings;
    p->n_mappings = c->mappings;
    p->locations = d->locations;
    p->n_locations = c->locations;
    p->functions = d->functions;
    p->n_functions = c->functions;
    p->strings = d->strings;
    p->n_strings = c->strings;
    p->comments = d->comments;
    p->n_comments = c->comments;
    return 0;
}

void ppk_pprof_free(ppk_pprof *p) {
    if (!p) return;
    reader *r = (reader *)(void *)p;
    ppk__mem m = r->mem;
    ppk__mem_free(&m, r->tables, r->tables_size);
    ppk__mem_free(&m, r->buf.p, r->buf.cap);
    ppk__mem_free(&m, r, sizeof *r);
}

int ppk_pprof_read(const void *data, size_t len, const ppk_read_options *opt, ppk_pprof **out,
                   char *err, size_t err_len) {
    if (err && err_len) err[0] = 0;
    else err_len = 0;
    if (!out) return PPK_EINVAL;
    *out = NULL;
    if (!data && len) return PPK_ENULL;
    ppk_read_options o;
    if (opt) o = *opt;
    else memset(&o, 0, sizeof o);
    if (!o.allocator.alloc != !o.allocator.free) return PPK_EINVAL;
    if (!o.max_decoded_bytes) o.max_decoded_bytes = DEFAULT_MAX_DECODED;
    if (o.max_decoded_bytes == SIZE_MAX) o.max_decoded_bytes--;
    if (!o.max_memory) o.max_memory = DEFAULT_MAX_MEMORY;

    ppk__mem m;
    ppk__mem_init(&m, &o.allocator);
    m.limit = o.max_memory;
    reader *r = ppk__mem_alloc(&m, sizeof *r);
    dec d;
    memset(&d, 0, sizeof d);
    d.err = err;
    d.err_len = err_len;
    if (!r) return out_of_memory(&d, &m, sizeof *r);
    memset(r, 0, sizeof *r);
    r->mem = m;
    d.r = r;
    const uint8_t *in = data;
    int rc;
    if (len == 0) {
        rc = plain(&d, PPK_EFORMAT, "empty input (0 bytes)");
    } else if (len >= 2 && in[0] == 0x1f && in[1] == 0x8b) {
        r->pub.codec = PPK_CODEC_GZIP;
        rc = ppk__decompress(&r->mem, PPK_CODEC_GZIP, in, len, o.max_decoded_bytes, &r->buf,
                             err, err_len);
    } else if (len >= 4 && in[0] == 0x28 && in[1] == 0xb5 && in[2] == 0x2f && in[3] == 0xfd) {
        r->pub.codec = PPK_CODEC_ZSTD;
        rc = ppk__decompress(&r->mem, PPK_CODEC_ZSTD, in, len, o.max_decoded_bytes, &r->buf,
                             err, err_len);
    } else if (len > o.max_decoded_bytes) {
        rc = plain(&d, PPK_ETOOBIG, "the profile has %zu bytes, over max_decoded_bytes (%zu)",
                   len, o.max_decoded_bytes);
    } else {
        r->pub.codec = PPK_CODEC_NONE;
        r->buf.p = ppk__mem_alloc(&r->mem, len);
        rc = r->buf.p ? 0 : out_of_memory(&d, &r->mem, len);
        if (!rc) {
            memcpy(r->buf.p, in, len);
            r->buf.len = r->buf.cap = len;
        }
    }
    if (!rc) {
        d.b = r->buf.p;
        d.n = r->buf.len;
        r->pub.decoded_bytes = d.n;
        rc = decode(&d);
    }
    if (rc) {
        ppk_pprof_free(&r->pub);
        return rc;
    }
    *out = &r->pub;
    return 0;
}
