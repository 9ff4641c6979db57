/*
 * otlp_write.c - writing the OTLP request (pass 2 of ppk_otlp_encode, see otlp.c): the
 * resource, the scope, one Profile per sample type, then the dictionary, with the
 * protobuf writer (pb.h). Its stores are unchecked in release builds: every write is
 * preceded by room() for an upper bound of what it writes (sizes in size_t), and a
 * nested message is closed with close_msg(), which makes room for its length's bytes.
 */
#include <string.h>
#include <sys/random.h>

#include "kvlist.h"
#include "otlp.h"

static int room(enc *e, size_t n) {
    if (e->rc) return e->rc;
    if (ppk__pb_reserve(&e->pb, n)) return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory");
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
    val = ppk__otlp_valid_utf8(e, val);
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
        if (!dec) return ppk__otlp_fail(e, PPK_ENOMEM, "out of memory");
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
        const map_rec *m = ppk__otlp_key(&e->maps, i);
        size_t b = ppk__pb_begin(&e->pb, DI_MAPPINGS);
        ppk__pb_uint_nz(&e->pb, MA_START, m->start);
        ppk__pb_uint_nz(&e->pb, MA_LIMIT, m->limit);
        ppk__pb_uint_nz(&e->pb, MA_OFFSET, m->offset);
        ppk__pb_uint_nz(&e->pb, MA_FILENAME, m->file);
        ppk__pb_end(&e->pb, b);
    }
    for (uint32_t i = 0; i < e->locs.n && !e->rc; i++) {
        const loc_rec *l = ppk__otlp_key(&e->locs, i);
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
        const fn_rec *f = ppk__otlp_key(&e->fns, i);
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
        ppk__pb_bytes(&e->pb, DI_STRINGS, ppk__otlp_key(&e->strs, i), n);
    }
    put_zero(e, DI_ATTRIBUTES);
    for (uint32_t i = 0; i < e->attrs.n && !room(e, 2 * PPK_PB_NEST_MAX + 3 * PPK_PB_UINT_MAX);
         i++) {
        const attr_rec *a = ppk__otlp_key(&e->attrs, i);
        size_t b = ppk__pb_begin(&e->pb, DI_ATTRIBUTES);
        ppk__pb_uint_nz(&e->pb, KU_KEY, a->key);
        size_t v = ppk__pb_begin(&e->pb, KU_VALUE);
        if (a->kind == AV_INT) {
            ppk__pb_uint(&e->pb, AV_INT, a->value);
        } else {
            size_t n = e->lvals.ents[a->value].len;
            if (room(e, 2 * PPK_PB_NEST_MAX + PPK_PB_UINT_MAX + n)) break;
            ppk__pb_bytes(&e->pb, AV_STRING, ppk__otlp_key(&e->lvals, (uint32_t)a->value), n);
        }
        ppk__pb_end(&e->pb, v);
        ppk__pb_uint_nz(&e->pb, KU_UNIT, a->unit);
        ppk__pb_end(&e->pb, b);
    }
    put_zero(e, DI_STACKS);
    for (uint32_t i = 0; i < e->stacks.n && !e->rc; i++) {
        size_t n = e->stacks.ents[i].len / sizeof(uint32_t);
        if (room(e, 2 * PPK_PB_NEST_MAX + n * PPK_PB_VARINT_MAX)) break;
        const uint32_t *locs = ppk__otlp_key(&e->stacks, i);
        size_t b = ppk__pb_begin(&e->pb, DI_STACKS);
        size_t l = ppk__pb_begin(&e->pb, ST_LOCATIONS);
        for (size_t k = 0; k < n; k++) ppk__pb_varint(&e->pb, locs[k]);
        ppk__pb_end(&e->pb, l);
        ppk__pb_end(&e->pb, b);
    }
    return e->rc ? e->rc : close_msg(e, dict);
}

int ppk__otlp_write(enc *e, const ppk_otlp_resource *res) {
    const ppk_pprof *p = e->p;
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
