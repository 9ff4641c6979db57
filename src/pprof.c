/*
 * pprof.c - encodes a window as a pprof Profile message (profile.proto).
 *
 * One function per message, written in the order of profile.proto's fields:
 * sample_type, sample, mapping, location, function, string_table, time_nanos,
 * duration_nanos, period_type, period. Tables are walked in id order, so the same
 * window gives the same bytes. pprof ids are dict ids + 1. Zero scalars are omitted
 * (proto3 defaults). The protobuf is streamed into the compressor (compress.c) through
 * the profile's reusable, bounded buffer (pb.h): each top-level field first asks for
 * room for an upper bound of its size with ppk__pb_room(), which hands the buffer to
 * the compressor when it is full. So the whole protobuf is never held in memory.
 *
 * At encode time, and only here, three things are added to what the window holds:
 * upscaling (values scaled by the profile's rules), the "trace endpoint" label of
 * samples whose "local root span id" has a registered endpoint, and the
 * "end_timestamp_ns" label of timestamped samples. The window itself is not changed.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "compress.h"
#include "profile.h"

/* Profile field numbers. */
enum {
    F_SAMPLE_TYPE = 1, F_SAMPLE = 2, F_MAPPING = 3, F_LOCATION = 4, F_FUNCTION = 5,
    F_STRING_TABLE = 6, F_TIME_NANOS = 9, F_DURATION_NANOS = 10, F_PERIOD_TYPE = 11,
    F_PERIOD = 12, F_COMMENT = 13
};

/* A rule with its label resolved to string ids for this window. */
typedef struct rule_ids {
    const ppk__rule *r;
    int any;         /* matches every sample */
    int never;       /* its label is not in this window */
    uint32_t key, value;
} rule_ids;

typedef struct enc {
    ppk_profile *p;       /* the window being written */
    ppk__pb *pb;
    rule_ids *rules;
    uint32_t span_key;    /* "local root span id", or PPK_DICT_NONE */
    uint32_t ep_key;      /* "trace endpoint" in this window, or PPK_DICT_NONE */
    int64_t *scaled;      /* n_types values */
    /* Several windows make one profile (a sharded recorder): each window's ids are
     * offset by what the windows before it hold. Endpoints are the first window's. */
    uint64_t str_off, loc_off, fn_off, map_off;
    const ppk_profile *ep;
} enc;

/* A string id of the window in the profile; 0 (unset, "") stays 0. */
static uint64_t str_at(const enc *e, uint32_t id) { return id ? id + e->str_off : 0; }


static const uint32_t *id_array(const ppk__dict *d, uint32_t id, size_t *n) {
    uint32_t len;
    const uint8_t *k = ppk__dict_key(d, id, &len);
    *n = len / sizeof(uint32_t);
    return (const uint32_t *)(const void *)k;
}

static int has_string_label(const ppk_profile *p, const uint32_t *set, size_t n, uint32_t key,
                            uint32_t value) {
    for (size_t i = 0; i < n; i++) {
        const ppk__label_rec l = ppk__label_get(p, set[i]);
        if (l.key == key && !l.is_num && l.str == value) return 1;
    }
    return 0;
}

static int64_t scale_value(int64_t v, double f) {
    double r = (double)v * f;
    if (isnan(r)) return 0; /* 0 * inf */
    if (r >= 9.2233720368547758e18) return INT64_MAX;
    if (r <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)llround(r);
}

/* Applies the upscaling rules to one sample's values, into e->scaled. */
static const int64_t *upscale(enc *e, const uint32_t *set, size_t n_set, const int64_t *v) {
    const ppk_profile *p = e->p;
    if (!p->n_rules) return v;
    memcpy(e->scaled, v, p->n_types * sizeof(int64_t));
    uint32_t done = 0;
    for (size_t k = 0; k < p->n_rules; k++) {
        const rule_ids *ri = &e->rules[k];
        uint32_t mask = ri->r->value_mask & ~done;
        if (!mask || ri->never ||
            (!ri->any && !has_string_label(p, set, n_set, ri->key, ri->value)))
            continue;
        done |= mask;
        double f = ri->r->scale;
        if (ri->r->kind == PPK__RULE_POISSON) {
            int64_t sum = v[ri->r->sum_idx], count = v[ri->r->count_idx];
            if (count <= 0 || sum <= 0) continue;
            double avg = (double)sum / (double)count;
            /* 1 / (1 - e^-x); expm1 keeps a tiny x from rounding the divisor to 0. */
            f = 1.0 / -expm1(-avg / (double)ri->r->sampling_distance);
        }
        for (size_t i = 0; i < p->n_types; i++)
            if (mask & (1u << i)) e->scaled[i] = scale_value(v[i], f);
    }
    return e->scaled;
}

/* The endpoint string id (of the endpoints' window, e->ep) for a sample's label set,
 * or 0. */
static uint32_t endpoint_for(const enc *e, const uint32_t *set, size_t n) {
    const ppk_profile *p = e->p, *ep = e->ep;
    uint32_t found = 0;
    for (size_t i = 0; i < n; i++) {
        const ppk__label_rec l = ppk__label_get(p, set[i]);
        if (l.key == e->ep_key) return 0; /* the sample has its own */
        if (l.key == e->span_key && l.is_num) {
            uint64_t span = (uint64_t)l.num;
            uint32_t id = ppk__dict_find(&ep->endpoints, &span, sizeof span,
                                         ppk__hash(&span, sizeof span));
            if (id != PPK_DICT_NONE) found = ep->endpoint_str[id];
        }
    }
    return found;
}

static void label(ppk__pb *pb, uint64_t key, uint64_t str, int64_t num, uint64_t unit) {
    size_t b = ppk__pb_begin(pb, 3);
    ppk__pb_uint_nz(pb, 1, key);
    ppk__pb_uint_nz(pb, 2, str);
    ppk__pb_uint_nz(pb, 3, (uint64_t)num);
    ppk__pb_uint_nz(pb, 4, unit);
    ppk__pb_end(pb, b);
}

static int sample(enc *e, uint32_t stack, uint32_t set_id, const int64_t *values, int64_t ts) {
    const ppk_profile *p = e->p;
    ppk__pb *pb = e->pb;
    size_t n_loc, n_set;
    const uint32_t *locs = id_array(&p->stacks, stack, &n_loc);
    const uint32_t *set = id_array(&p->label_sets, set_id, &n_set);
    /* The sample, its packed locations and values, and its labels (with the endpoint's
     * and the timestamp's): each a nested message of up to four varint fields. */
    size_t bound = 3 * PPK_PB_NEST_MAX + (n_loc + p->n_types) * PPK_PB_VARINT_MAX +
                   (n_set + 2) * (PPK_PB_NEST_MAX + 4 * PPK_PB_UINT_MAX);
    int rc = ppk__pb_room(pb, bound);
    if (rc) return rc;
    const int64_t *v = upscale(e, set, n_set, values);

    size_t b = ppk__pb_begin(pb, F_SAMPLE);
    if (n_loc) {
        size_t l = ppk__pb_begin(pb, 1);
        for (size_t i = 0; i < n_loc; i++) ppk__pb_varint(pb, (uint64_t)locs[i] + 1 + e->loc_off);
        ppk__pb_end(pb, l);
    }
    size_t vb = ppk__pb_begin(pb, 2);
    for (size_t i = 0; i < p->n_types; i++) ppk__pb_varint(pb, (uint64_t)v[i]);
    ppk__pb_end(pb, vb);
    for (size_t i = 0; i < n_set; i++) {
        const ppk__label_rec l = ppk__label_get(p, set[i]);
        if (l.is_num)
            label(pb, str_at(e, l.key), 0, l.num, str_at(e, l.num_unit));
        else
            label(pb, str_at(e, l.key), str_at(e, l.str), 0, 0);
    }
    if (e->ep->endpoints.n) {
        uint32_t ep = endpoint_for(e, set, n_set);
        if (ep) label(pb, e->ep->ids.endpoint_key, ep, 0, 0); /* the first window's ids */
    }
    if (ts) label(pb, str_at(e, p->ids.end_ts_key), 0, ts, 0);
    ppk__pb_end(pb, b);
    return 0;
}

static void value_type(ppk__pb *pb, uint32_t field, uint32_t type, uint32_t unit) {
    size_t b = ppk__pb_begin(pb, field);
    ppk__pb_uint_nz(pb, 1, type);
    ppk__pb_uint_nz(pb, 2, unit);
    ppk__pb_end(pb, b);
}

static int mappings(enc *e) {
    const ppk_profile *p = e->p;
    ppk__pb *pb = e->pb;
    if (!p->mappings.n) return 0;
    /* has_functions: whether any location in the mapping is symbolized. */
    uint8_t *has_fn = ppk__mem_alloc(&e->p->aux, p->mappings.n);
    if (!has_fn) return PPK_ENOMEM;
    memset(has_fn, 0, p->mappings.n);
    for (uint32_t i = 0; i < p->locations.n; i++) {
        uint32_t len;
        const ppk__location_rec *l =
            (const void *)ppk__dict_key(&p->locations, i, &len);
        if (l->mapping && l->function) has_fn[l->mapping - 1] = 1;
    }
    int rc = 0;
    for (uint32_t i = 0; i < p->mappings.n; i++) {
        uint32_t len;
        const ppk__mapping_rec *m = (const void *)ppk__dict_key(&p->mappings, i, &len);
        if ((rc = ppk__pb_room(pb, PPK_PB_NEST_MAX + 7 * PPK_PB_UINT_MAX))) break;
        size_t b = ppk__pb_begin(pb, F_MAPPING);
        ppk__pb_uint(pb, 1, (uint64_t)i + 1 + e->map_off);
        ppk__pb_uint_nz(pb, 2, m->memory_start);
        ppk__pb_uint_nz(pb, 3, m->memory_limit);
        ppk__pb_uint_nz(pb, 4, m->file_offset);
        ppk__pb_uint_nz(pb, 5, str_at(e, m->filename));
        ppk__pb_uint_nz(pb, 6, str_at(e, m->build_id));
        ppk__pb_uint_nz(pb, 7, has_fn[i]);
        ppk__pb_end(pb, b);
    }
    ppk__mem_free(&e->p->aux, has_fn, p->mappings.n);
    return rc;
}

static int locations(enc *e) {
    const ppk_profile *p = e->p;
    ppk__pb *pb = e->pb;
    for (uint32_t i = 0; i < p->locations.n; i++) {
        int rc = ppk__pb_room(pb, 2 * PPK_PB_NEST_MAX + 5 * PPK_PB_UINT_MAX);
        if (rc) return rc;
        uint32_t len;
        const ppk__location_rec *l = (const void *)ppk__dict_key(&p->locations, i, &len);
        size_t b = ppk__pb_begin(pb, F_LOCATION);
        ppk__pb_uint(pb, 1, (uint64_t)i + 1 + e->loc_off);
        ppk__pb_uint_nz(pb, 2, l->mapping ? l->mapping + e->map_off : 0);
        ppk__pb_uint_nz(pb, 3, l->address);
        if (l->function) {
            size_t lb = ppk__pb_begin(pb, 4);
            ppk__pb_uint(pb, 1, l->function + e->fn_off);
            ppk__pb_uint_nz(pb, 2, (uint64_t)l->line);
            ppk__pb_end(pb, lb);
        }
        ppk__pb_end(pb, b);
    }
    return 0;
}

static int functions(enc *e) {
    const ppk_profile *p = e->p;
    ppk__pb *pb = e->pb;
    for (uint32_t i = 0; i < p->functions.n; i++) {
        int rc = ppk__pb_room(pb, PPK_PB_NEST_MAX + 5 * PPK_PB_UINT_MAX);
        if (rc) return rc;
        uint32_t len;
        const ppk__function_rec *f = (const void *)ppk__dict_key(&p->functions, i, &len);
        size_t b = ppk__pb_begin(pb, F_FUNCTION);
        ppk__pb_uint(pb, 1, (uint64_t)i + 1 + e->fn_off);
        ppk__pb_uint_nz(pb, 2, str_at(e, f->name));
        ppk__pb_uint_nz(pb, 3, str_at(e, f->system_name));
        ppk__pb_uint_nz(pb, 4, str_at(e, f->filename));
        ppk__pb_uint_nz(pb, 5, (uint64_t)f->start_line);
        ppk__pb_end(pb, b);
    }
    return 0;
}

/* The degradations of the window, as comments a reader of the profile sees
 * (`go tool pprof -comments`). Their strings follow the window's in string_table. */
typedef struct comments {
    char text[16][96];
    size_t len[16];
    size_t n;
} comments;

static void make_comments(ppk_profile *const *ws, size_t n_ws, comments *c) {
    ppk__degraded sum;
    memset(&sum, 0, sizeof sum);
    for (size_t i = 0; i < n_ws; i++) {
        ppk__degraded_add(&sum, &ws[i]->deg);
        /* The repairs of what the window fitted itself (config, endpoints). */
        sum.strings_utf8_repaired += ws[i]->strings.fit.repaired;
        sum.strings_truncated += ws[i]->strings.fit.truncated;
    }
    const struct {
        uint64_t n;
        const char *what;
    } reasons[] = {
#define REASON(name, what) {sum.name, what},
        PPK_REPAIRS(REASON) PPK_DEGRADATIONS(REASON)
#undef REASON
    };
    c->n = 0;
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++) {
        if (!reasons[i].n) continue;
        int k = snprintf(c->text[c->n], sizeof c->text[0], "pprofkit: %llu %s",
                         (unsigned long long)reasons[i].n, reasons[i].what);
        c->len[c->n++] = k < 0 ? 0 : (size_t)k < sizeof c->text[0] ? (size_t)k : sizeof c->text[0] - 1;
    }
}

/* The window's strings into string_table. */
static int strings(enc *e) {
    const ppk__strtab *st = &e->p->strings;
    ppk__pb *pb = e->pb;
    uint32_t n = ppk__strtab_count(st);
    int rc = 0;
    for (uint32_t i = 0; !rc && i < n; i++) {
        size_t len;
        const char *s = ppk__strtab_get(st, i, &len);
        if (!(rc = ppk__pb_room(pb, PPK_PB_TAG_MAX + PPK_PB_VARINT_MAX + len)))
            ppk__pb_bytes(pb, F_STRING_TABLE, s, len);
    }
    return rc;
}

/* The comments, after every window's strings (`n` of them). */
static int comment_strings(ppk__pb *pb, const comments *c, uint64_t n) {
    /* Each: its string (tag, length, text) and its comment field. */
    int rc = ppk__pb_room(pb, c->n * (PPK_PB_TAG_MAX + PPK_PB_VARINT_MAX + sizeof c->text[0] +
                                      PPK_PB_UINT_MAX));
    if (rc) return rc;
    for (size_t i = 0; i < c->n; i++) ppk__pb_bytes(pb, F_STRING_TABLE, c->text[i], c->len[i]);
    for (size_t i = 0; i < c->n; i++) ppk__pb_uint(pb, F_COMMENT, n + i);
    return 0;
}

/* Resolves the window's rules and span key for e->p; e->rules from p->aux. */
static int enc_window(enc *e) {
    ppk_profile *p = e->p;
    e->rules = NULL;
    e->span_key = e->ep_key = PPK_DICT_NONE;
    if (p->n_rules) {
        e->rules = ppk__mem_alloc_array(&p->aux, p->n_rules, sizeof *e->rules);
        if (!e->rules) return PPK_ENOMEM;
        for (size_t i = 0; i < p->n_rules; i++) {
            const ppk__rule *r = &p->rules[i];
            rule_ids *ri = &e->rules[i];
            ri->r = r;
            ri->any = r->label_key_len == 0;
            ri->key = ppk__strtab_find(&p->strings, r->label_key, r->label_key_len);
            ri->value = ppk__strtab_find(&p->strings, r->label_value, r->label_value_len);
            ri->never = !ri->any && (ri->key == PPK_DICT_NONE || ri->value == PPK_DICT_NONE);
        }
    }
    if (e->ep->endpoints.n) {
        static const char span_key[] = "local root span id", ep_key[] = "trace endpoint";
        e->span_key = ppk__strtab_find(&p->strings, span_key, sizeof span_key - 1);
        e->ep_key = ppk__strtab_find(&p->strings, ep_key, sizeof ep_key - 1);
    }
    return 0;
}

static void enc_window_done(enc *e) {
    if (e->rules) ppk__mem_free(&e->p->aux, e->rules, e->p->n_rules * sizeof *e->rules);
    e->rules = NULL;
}

/* Walks the windows, setting e->p and the offsets, calling `part` for each. */
static int each_window(enc *e, ppk_profile *const *ws, size_t n_ws, int (*part)(enc *)) {
    e->str_off = e->loc_off = e->fn_off = e->map_off = 0;
    int rc = 0;
    for (size_t i = 0; !rc && i < n_ws; i++) {
        e->p = ws[i];
        rc = part(e);
        e->str_off += ppk__strtab_count(&ws[i]->strings);
        e->loc_off += ws[i]->locations.n;
        e->fn_off += ws[i]->functions.n;
        e->map_off += ws[i]->mappings.n;
    }
    return rc;
}

static int window_samples(enc *e) {
    ppk_profile *p = e->p;
    int rc = enc_window(e);
    for (uint32_t i = 0; !rc && i < p->samples.n; i++) {
        uint32_t len;
        const ppk__sample_rec *s = (const void *)ppk__dict_key(&p->samples, i, &len);
        rc = sample(e, s->stack, s->label_set, &p->values[(size_t)i * p->n_types], 0);
    }
    for (size_t i = 0; !rc && i < p->ts_n; i++)
        rc = sample(e, p->ts[i].stack, p->ts[i].label_set, &p->ts_values[i * p->n_types],
                    p->ts[i].timestamp_ns);
    enc_window_done(e);
    return rc;
}

/* The windows `ws` (the first one's types, period and endpoints) as one Profile. */
static int encode_pb(ppk_profile *const *ws, size_t n_ws, ppk__pb *pb, int64_t start_ns,
                     int64_t end_ns) {
    const ppk_profile *p = ws[0];
    enc e;
    memset(&e, 0, sizeof e);
    int64_t scaled[PPK_MAX_SAMPLE_TYPES];
    e.pb = pb;
    e.scaled = scaled;
    e.ep = p;
    int rc = ppk__pb_room(pb, p->n_types * (PPK_PB_NEST_MAX + 2 * PPK_PB_UINT_MAX));
    for (size_t i = 0; !rc && i < p->n_types; i++)
        value_type(pb, F_SAMPLE_TYPE, p->type_ids[i], p->unit_ids[i]);
    if (!rc) rc = each_window(&e, ws, n_ws, window_samples);
    if (!rc) rc = each_window(&e, ws, n_ws, mappings);
    if (!rc) rc = each_window(&e, ws, n_ws, locations);
    if (!rc) rc = each_window(&e, ws, n_ws, functions);
    if (!rc) rc = each_window(&e, ws, n_ws, strings);
    comments c;
    make_comments(ws, n_ws, &c);
    if (!rc) rc = comment_strings(pb, &c, e.str_off);
    if (!rc) rc = ppk__pb_room(pb, 3 * PPK_PB_UINT_MAX + PPK_PB_NEST_MAX + 2 * PPK_PB_UINT_MAX);
    if (!rc) {
        ppk__pb_uint_nz(pb, F_TIME_NANOS, (uint64_t)start_ns);
        ppk__pb_uint_nz(pb, F_DURATION_NANOS, (uint64_t)(end_ns - start_ns));
        if (p->period_type_id || p->period_unit_id)
            value_type(pb, F_PERIOD_TYPE, p->period_type_id, p->period_unit_id);
        ppk__pb_uint_nz(pb, F_PERIOD, (uint64_t)p->cfg.period);
    }
    return rc;
}

int ppk__profile_encode_with(ppk_profile *p, ppk__pb *pb, const ppk_encode_options *opt,
                             ppk_bytes *out) {
    return ppk__profile_encode_many(&p, p ? 1 : 0, pb, opt, out);
}

int ppk__profile_encode_many(ppk_profile *const *ws, size_t n_ws, ppk__pb *pb,
                             const ppk_encode_options *opt, ppk_bytes *out) {
    if (!out) return PPK_EINVAL;
    memset(out, 0, sizeof *out);
    if (!n_ws || !ws[0]) return PPK_EINVAL;
    ppk_profile *p = ws[0];
    ppk_encode_options o;
    memset(&o, 0, sizeof o);
    if (opt) o = *opt;
    if (o.start_ns < 0 || o.end_ns < 0) return PPK_EINVAL;
    int64_t start = o.start_ns ? o.start_ns : p->start_ns;
    if (o.end_ns && o.end_ns < start) return PPK_EINVAL;
    int64_t end = o.end_ns ? o.end_ns : ppk_now_ns();
    if (end < start) end = start; /* the wall clock stepped back since the start */
    int rc = ppk__compress_check(o.codec, o.level);
    if (rc) return rc;
    if (o.codec == PPK_CODEC_NONE) {
        /* Uncompressed, the output is the whole protobuf anyway: build it in the
         * (reused) buffer and copy it once, rather than through the stream's chunks. */
        pb->len = 0;
        rc = encode_pb(ws, n_ws, pb, start, end);
        return rc ? rc : ppk__bytes_copy(&p->mem.a, pb->buf, pb->len, out);
    }
    rc = ppk__pb_stream_begin(pb, o.codec, o.level);
    if (!rc) rc = encode_pb(ws, n_ws, pb, start, end);
    if (rc) {
        ppk__pb_stream_abort(pb);
        return rc;
    }
    return ppk__pb_stream_end(pb, &p->mem.a, out);
}

int ppk_profile_encode(ppk_profile *p, const ppk_encode_options *opt, ppk_bytes *out) {
    int rc = ppk__profile_encode_with(p, p ? &p->pb : NULL, opt, out);
    if (p) p->pb_used = p->pb.len;
    return rc;
}
