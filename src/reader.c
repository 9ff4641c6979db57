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

#include "reader.h"

#define DEFAULT_MAX_DECODED ((size_t)256 << 20)
#define DEFAULT_MAX_MEMORY ((size_t)2 << 30)

/* A message's name and its fields' names, for the error messages. */
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

/* A ValueType into *vt. A message field given twice is merged (protobuf's rule): with
 * `merge`, what *vt holds is the start (period_type); else "" (a new sample_type). */
static int value_type(dec *d, const fld *outer, ppk_value_type *vt, int merge) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v;
    ppk_str empty = d->strings ? d->strings[0] : (ppk_str){NULL, 0};
    ppk_value_type t = merge && vt ? *vt : (ppk_value_type){empty, empty};
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = ppk__rd_field(d, &pos, end, &M_VALUE_TYPE, &f))) {
        if (f.num == 1) rc = ppk__rd_string(d, &M_VALUE_TYPE, &f, &t.type);
        else if (f.num == 2) rc = ppk__rd_string(d, &M_VALUE_TYPE, &f, &t.unit);
    }
    if (!rc && vt) *vt = t;
    return rc;
}

/* An element's id field: 0 (or absent) is reserved. */
static int check_id(dec *d, const msgdesc *m, const fld *outer, uint64_t id, size_t id_at) {
    if (id) return 0;
    return ppk__rd_fail(d, PPK_EFORMAT, m, 1, id_at ? id_at : outer->at, "%s",
                id_at ? "id 0 is reserved" : "no id (0 is reserved)");
}

static int label(dec *d, const fld *outer, ppk_pprof_label *out) {
    size_t pos = outer->data, end = outer->data + (size_t)outer->v;
    ppk_pprof_label l;
    memset(&l, 0, sizeof l);
    if (d->strings) l.key = l.str = l.num_unit = d->strings[0];
    fld f;
    int rc = 0;
    while (!rc && pos < end && !(rc = ppk__rd_field(d, &pos, end, &M_LABEL, &f))) {
        uint64_t v;
        if (f.num == 1) rc = ppk__rd_string(d, &M_LABEL, &f, &l.key);
        else if (f.num == 2) rc = ppk__rd_string(d, &M_LABEL, &f, &l.str);
        else if (f.num == 4) rc = ppk__rd_string(d, &M_LABEL, &f, &l.num_unit);
        else if (f.num == 3 && !(rc = ppk__rd_uint(d, &M_LABEL, &f, &v))) l.num = (int64_t)v;
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
    size_t i = ppk__rd_find(&d->ix_loc, v);
    if (i == SIZE_MAX)
        return ppk__rd_fail(d, PPK_EFORMAT, &M_SAMPLE, 1, at,
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
    while (!rc && pos < end && !(rc = ppk__rd_field(d, &pos, end, &M_SAMPLE, &f))) {
        if (f.num == 1) {
            size_t n = 0;
            rc = ppk__rd_ints(d, &M_SAMPLE, &f, filling ? add_locref : NULL, NULL, &n);
            if (!filling) c->locrefs += n;
        } else if (f.num == 2) {
            size_t n = 0;
            rc = ppk__rd_ints(d, &M_SAMPLE, &f, filling ? add_value : NULL, NULL, &n);
            if (!filling) c->values += n;
        } else if (f.num == 3) {
            if (!(rc = ppk__rd_want(d, &M_SAMPLE, &f, WT_LEN)))
                rc = label(d, &f, filling ? &d->labels[c->labels] : NULL);
            c->labels++;
        }
    }
    if (rc || !filling) return rc;
    size_t nv = c->values - vals0;
    if (nv != d->cnt.types)
        return ppk__rd_fail(d, PPK_EFORMAT, &M_PROFILE, 2, outer->at,
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
    while (!rc && pos < end && !(rc = ppk__rd_field(d, &pos, end, &M_MAPPING, &f))) {
        uint64_t v = 0;
        switch (f.num) {
        case 5: rc = ppk__rd_string(d, &M_MAPPING, &f, &m.filename); break;
        case 6: rc = ppk__rd_string(d, &M_MAPPING, &f, &m.build_id); break;
        case 1: case 2: case 3: case 4: case 7: case 8: case 9: case 10:
            if ((rc = ppk__rd_uint(d, &M_MAPPING, &f, &v))) break;
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
    while (!rc && pos < end && !(rc = ppk__rd_field(d, &pos, end, &M_FUNCTION, &f))) {
        uint64_t v = 0;
        if (f.num == 2) rc = ppk__rd_string(d, &M_FUNCTION, &f, &fn.name);
        else if (f.num == 3) rc = ppk__rd_string(d, &M_FUNCTION, &f, &fn.system_name);
        else if (f.num == 4) rc = ppk__rd_string(d, &M_FUNCTION, &f, &fn.filename);
        else if (f.num == 1 && !(rc = ppk__rd_uint(d, &M_FUNCTION, &f, &v)))
            fn.id = v, id_at = f.at;
        else if (f.num == 5 && !(rc = ppk__rd_uint(d, &M_FUNCTION, &f, &v)))
            fn.start_line = (int64_t)v;
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
    while (!rc && pos < end && !(rc = ppk__rd_field(d, &pos, end, &M_LINE, &f))) {
        if (f.num == 1 && !(rc = ppk__rd_uint(d, &M_LINE, &f, &fn_id))) fn_at = f.at;
        else if (f.num == 2 && !(rc = ppk__rd_uint(d, &M_LINE, &f, &v))) ln = (int64_t)v;
    }
    if (rc || !out) return rc;
    out->line = ln;
    out->function = NULL;
    if (fn_id) {
        size_t i = ppk__rd_find(&d->ix_fn, fn_id);
        if (i == SIZE_MAX)
            return ppk__rd_fail(d, PPK_EFORMAT, &M_LINE, 1, fn_at,
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
    while (!rc && pos < end && !(rc = ppk__rd_field(d, &pos, end, &M_LOCATION, &f))) {
        if (f.num == 4) {
            if (!(rc = ppk__rd_want(d, &M_LOCATION, &f, WT_LEN)))
                rc = line(d, &f, filling ? &d->lines[c->lines] : NULL);
            c->lines++;
        } else if (f.num >= 1 && f.num <= 5 && !(rc = ppk__rd_uint(d, &M_LOCATION, &f, &v))) {
            if (f.num == 1) l.id = v, id_at = f.at;
            else if (f.num == 2) map_id = v, map_at = f.at;
            else if (f.num == 3) l.address = v;
            else l.is_folded = v != 0;
        }
    }
    if (rc || !filling) return rc;
    if ((rc = check_id(d, &M_LOCATION, outer, l.id, id_at))) return rc;
    if (map_id) {
        size_t m = ppk__rd_find(&d->ix_map, map_id);
        if (m == SIZE_MAX)
            return ppk__rd_fail(d, PPK_EFORMAT, &M_LOCATION, 2, map_at,
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
    return ppk__rd_string_at(d, &M_PROFILE, 13, at, v, &d->comments[d->cur.comments++]);
}

/* One sweep over the top-level fields; see the top of the file. */
static int sweep(dec *d, int which) {
    ppk_pprof *p = &d->r->pub;
    size_t pos = 0;
    d->sweep = which;
    int count = which == SW_COUNT, tables = which == SW_TABLES;
    fld f;
    int rc = 0;
    while (!rc && pos < d->n && !(rc = ppk__rd_field(d, &pos, d->n, &M_PROFILE, &f))) {
        uint64_t v;
        switch (f.num) {
        case 1: /* sample_type */
            if (count && !(rc = ppk__rd_want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.types++;
            if (count || tables)
                rc = rc ? rc : value_type(d, &f, tables ? &d->types[d->cur.types++] : NULL, 0);
            break;
        case 2:
            if (count && !(rc = ppk__rd_want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.samples++;
            if (!rc && (count || which == SW_SAMPLES)) rc = sample(d, &f);
            break;
        case 3:
            if (count && !(rc = ppk__rd_want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.mappings++;
            if (!rc && (count || tables)) rc = mapping(d, &f);
            break;
        case 4:
            if (count && !(rc = ppk__rd_want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.locations++;
            if (!rc && (count || which == SW_LOCATIONS)) rc = location(d, &f);
            break;
        case 5:
            if (count && !(rc = ppk__rd_want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.functions++;
            if (!rc && (count || tables)) rc = function(d, &f);
            break;
        case 6:
            if (count && !(rc = ppk__rd_want(d, &M_PROFILE, &f, WT_LEN))) d->cnt.strings++;
            if (which == SW_STRINGS) {
                size_t i = d->cur.strings++;
                d->strings[i] = (ppk_str){(const char *)d->b + f.data, (size_t)f.v};
                if (i == 0 && f.v != 0)
                    return ppk__rd_fail(d, PPK_EFORMAT, &M_PROFILE, 6, f.at,
                                "string_table[0] must be \"\" (it has %llu bytes)",
                                (unsigned long long)f.v);
            }
            break;
        case 7: case 8: case 14:
            if (count) rc = ppk__rd_want(d, &M_PROFILE, &f, WT_VARINT);
            else if (tables)
                rc = ppk__rd_string(d, &M_PROFILE, &f, f.num == 7 ? &p->drop_frames
                                                     : f.num == 8 ? &p->keep_frames
                                                                  : &p->default_sample_type);
            break;
        case 9: case 10: case 12:
            if (!(rc = ppk__rd_uint(d, &M_PROFILE, &f, &v)) && tables) {
                if (f.num == 9) p->time_nanos = (int64_t)v;
                else if (f.num == 10) p->duration_nanos = (int64_t)v;
                else p->period = (int64_t)v;
            }
            break;
        case 11:
            if (!(rc = ppk__rd_want(d, &M_PROFILE, &f, WT_LEN)) && (count || tables))
                rc = value_type(d, &f, tables ? &p->period_type : NULL, 1);
            break;
        case 13:
            if (count) rc = ppk__rd_ints(d, &M_PROFILE, &f, NULL, NULL, &d->cnt.comments);
            else if (tables) {
                size_t n = 0;
                rc = ppk__rd_ints(d, &M_PROFILE, &f, add_comment, NULL, &n);
            }
            break;
        default: /* unknown: skipped */
            break;
        }
    }
    return rc;
}

/* The two passes over d->b (d->r's buffer). */
static int decode(dec *d) {
    reader *r = d->r;
    int rc = sweep(d, SW_COUNT);
    if (rc) return rc;
    const counts *c = &d->cnt;
    if (c->strings == 0)
        return ppk__rd_fail(d, PPK_EFORMAT, &M_PROFILE, 6, d->n,
                    "no string_table (string_table[0] must be \"\")");
    size_t size = 0, scratch = 0;
    ppk__rd_add_size(&size, c->types, sizeof(ppk_value_type));
    ppk__rd_add_size(&size, c->samples, sizeof(ppk_pprof_sample));
    ppk__rd_add_size(&size, c->mappings, sizeof(ppk_pprof_mapping));
    ppk__rd_add_size(&size, c->locations, sizeof(ppk_pprof_location));
    ppk__rd_add_size(&size, c->functions, sizeof(ppk_pprof_function));
    ppk__rd_add_size(&size, c->strings, sizeof(ppk_str));
    ppk__rd_add_size(&size, c->comments, sizeof(ppk_str));
    ppk__rd_add_size(&size, c->locrefs, sizeof(ppk_pprof_location *));
    ppk__rd_add_size(&size, c->values, sizeof(int64_t));
    ppk__rd_add_size(&size, c->labels, sizeof(ppk_pprof_label));
    ppk__rd_add_size(&size, c->lines, sizeof(ppk_pprof_line));
    ppk__rd_add_size(&scratch, c->mappings, sizeof(ent));
    ppk__rd_add_size(&scratch, c->functions, sizeof(ent));
    ppk__rd_add_size(&scratch, c->locations, sizeof(ent));
    if (size == SIZE_MAX || scratch == SIZE_MAX || size > SIZE_MAX - scratch)
        return ppk__rd_out_of_memory(d, &r->mem, SIZE_MAX);
    ppk__mem *m = &r->mem;
    if (size + scratch > m->limit - (m->bytes < m->limit ? m->bytes : m->limit))
        return ppk__rd_out_of_memory(d, m, size + scratch);
    uint8_t *t = ppk__mem_alloc(m, size);
    if (!t) return ppk__rd_out_of_memory(d, m, size);
    r->tables = t;
    r->tables_size = size;
    uint8_t *s = ppk__mem_alloc(m, scratch);
    if (!s) return ppk__rd_out_of_memory(d, m, scratch);
    d->types = ppk__rd_carve(&t, c->types, sizeof *d->types);
    d->samples = ppk__rd_carve(&t, c->samples, sizeof *d->samples);
    d->mappings = ppk__rd_carve(&t, c->mappings, sizeof *d->mappings);
    d->locations = ppk__rd_carve(&t, c->locations, sizeof *d->locations);
    d->functions = ppk__rd_carve(&t, c->functions, sizeof *d->functions);
    d->strings = ppk__rd_carve(&t, c->strings, sizeof *d->strings);
    d->comments = ppk__rd_carve(&t, c->comments, sizeof *d->comments);
    d->locrefs = ppk__rd_carve(&t, c->locrefs, sizeof *d->locrefs);
    d->values = ppk__rd_carve(&t, c->values, sizeof *d->values);
    d->labels = ppk__rd_carve(&t, c->labels, sizeof *d->labels);
    d->lines = ppk__rd_carve(&t, c->lines, sizeof *d->lines);
    uint8_t *s0 = s;
    d->ix_map = (index){ppk__rd_carve(&s, c->mappings, sizeof(ent)), c->mappings, 0};
    d->ix_fn = (index){ppk__rd_carve(&s, c->functions, sizeof(ent)), c->functions, 0};
    d->ix_loc = (index){ppk__rd_carve(&s, c->locations, sizeof(ent)), c->locations, 0};

    ppk_pprof *p = &r->pub;
    rc = sweep(d, SW_STRINGS);
    if (!rc) {
        p->drop_frames = p->keep_frames = p->default_sample_type = d->strings[0];
        p->period_type.type = p->period_type.unit = d->strings[0];
        rc = sweep(d, SW_TABLES);
    }
    if (!rc) rc = ppk__rd_index_build(d, &d->ix_map, &M_MAPPING);
    if (!rc) rc = ppk__rd_index_build(d, &d->ix_fn, &M_FUNCTION);
    if (!rc) rc = sweep(d, SW_LOCATIONS);
    if (!rc) rc = ppk__rd_index_build(d, &d->ix_loc, &M_LOCATION);
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
    if (!r) return ppk__rd_out_of_memory(&d, &m, sizeof *r);
    memset(r, 0, sizeof *r);
    r->mem = m;
    d.r = r;
    const uint8_t *in = data;
    int rc;
    if (len == 0) {
        rc = ppk__rd_plain(&d, PPK_EFORMAT, "empty input (0 bytes)");
    } else if (len >= 2 && in[0] == 0x1f && in[1] == 0x8b) {
        r->pub.codec = PPK_CODEC_GZIP;
        rc = ppk__decompress(&r->mem, PPK_CODEC_GZIP, in, len, o.max_decoded_bytes, &r->buf,
                             err, err_len);
    } else if (len >= 4 && in[0] == 0x28 && in[1] == 0xb5 && in[2] == 0x2f && in[3] == 0xfd) {
        r->pub.codec = PPK_CODEC_ZSTD;
        rc = ppk__decompress(&r->mem, PPK_CODEC_ZSTD, in, len, o.max_decoded_bytes, &r->buf, err,
                             err_len);
    } else if (len > o.max_decoded_bytes) {
        rc = ppk__rd_plain(&d, PPK_ETOOBIG,
                           "the profile has %zu bytes, over max_decoded_bytes (%zu)", len,
                           o.max_decoded_bytes);
    } else {
        r->pub.codec = PPK_CODEC_NONE;
        r->buf.p = ppk__mem_alloc(&r->mem, len);
        rc = r->buf.p ? 0 : ppk__rd_out_of_memory(&d, &r->mem, len);
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
