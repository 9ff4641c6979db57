/*
 * pprof_read.h - a minimal pprof reader for tests, independent of the library (header only).
 *
 * It decodes profile.proto's wire format with its own code, sharing nothing with src/, so
 * a C test can check what an export really holds. Bytes that start with the gzip magic are
 * gunzipped with zlib first. It keeps what tests look at: sample types, samples (location
 * ids, values, labels), locations (address, mapping, lines), functions, mappings, the
 * string table, time, duration and period. Parsing also validates: string_table[0] is "",
 * every string index is in range, every referenced location and function exists.
 *
 *   pr_profile p;
 *   if (pr_parse(bytes, len, &p) != 0) ... malformed ...
 *   pr_str task = pr_label_str(&p, &p.samples[i], "task name");
 *   pr_free(&p);
 *
 * pr_describe() prints a profile's samples in a canonical, sorted text form (frames as
 * name/file/line, labels sorted by key, values), so two exports can be compared for
 * equal content whatever their times and string order.
 *
 * The library has a reader of its own (ppk_pprof_read). This one stays separate from it
 * on purpose: it checks the encoder without trusting any of the library's code, and it is
 * what the library's reader is compared with (test_reader.c, test_fuzz_reader.c).
 */
#ifndef PPK_TESTS_PPROF_READ_H
#define PPK_TESTS_PPROF_READ_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

typedef struct pr_str {
    const char *ptr; /* into pr_profile.buf; not NUL-terminated */
    size_t len;
} pr_str;

typedef struct pr_label {
    int64_t key, str, num, num_unit; /* key, str, num_unit: string table indices */
} pr_label;

typedef struct pr_sample {
    uint64_t *loc;
    size_t nloc;
    int64_t *val;
    size_t nval;
    pr_label *lab;
    size_t nlab;
} pr_sample;

typedef struct pr_location {
    uint64_t id, mapping_id, address;
    uint64_t *fn; /* function id of each line */
    int64_t *line;
    size_t nline;
} pr_location;

typedef struct pr_function {
    uint64_t id;
    int64_t name, system_name, filename, start_line;
} pr_function;

typedef struct pr_mapping {
    uint64_t id, start, limit, offset;
    int64_t filename, build_id;
} pr_mapping;

typedef struct pr_profile {
    uint8_t *buf; /* the uncompressed protobuf */
    size_t len;
    pr_str *strings;
    size_t nstrings;
    int64_t (*sample_type)[2];
    size_t nsample_type;
    pr_sample *samples;
    size_t nsamples;
    pr_location *locs;
    size_t nlocs;
    pr_function *fns;
    size_t nfns;
    pr_mapping *maps;
    size_t nmaps;
    int64_t time_nanos, duration_nanos, period;
    int64_t period_type[2];
} pr_profile;

/* ---- growable arrays ---- */
static inline int pr_grow_(void **arr, size_t *n, size_t elem) {
    size_t cap = 1;
    while (cap <= *n) cap *= 2; /* capacity is the next power of two above n */
    if (*n == 0 || (*n & (*n - 1)) == 0) {
        void *p = realloc(*arr, cap * elem);
        if (!p) return -1;
        *arr = p;
    }
    memset((char *)*arr + *n * elem, 0, elem);
    (*n)++;
    return 0;
}
#define PR_PUSH(arr, n) (pr_grow_((void **)&(arr), &(n), sizeof *(arr)) == 0 ? &(arr)[(n)-1] : NULL)

/* ---- wire format ---- */
static inline int pr_varint_(const uint8_t **p, const uint8_t *end, uint64_t *v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) return -1;
        uint8_t b = *(*p)++;
        r |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return 0;
        }
    }
    return -1;
}

/* One field: number, wire type, varint value or [data, data + len). */
typedef struct pr_field_ {
    uint32_t num;
    int wt;
    uint64_t v;
    const uint8_t *data;
    size_t len;
} pr_field_;

static inline int pr_field_next_(const uint8_t **p, const uint8_t *end, pr_field_ *f) {
    uint64_t key;
    if (pr_varint_(p, end, &key) != 0) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wt = (int)(key & 7);
    f->data = NULL;
    f->len = 0;
    switch (f->wt) {
    case 0:
        return pr_varint_(p, end, &f->v);
    case 1:
        if (end - *p < 8) return -1;
        *p += 8;
        return 0;
    case 5:
        if (end - *p < 4) return -1;
        *p += 4;
        return 0;
    case 2:
        if (pr_varint_(p, end, &f->v) != 0 || f->v > (uint64_t)(end - *p)) return -1;
        f->data = *p;
        f->len = (size_t)f->v;
        *p += f->len;
        return 0;
    default:
        return -1;
    }
}

/* A repeated integer field, packed (wire type 2) or not (0). */
static inline int pr_ints_(const pr_field_ *f, uint64_t **arr, size_t *n) {
    if (f->wt == 0) {
        uint64_t *slot = PR_PUSH(*arr, *n);
        if (!slot) return -1;
        *slot = f->v;
        return 0;
    }
    if (f->wt != 2) return -1;
    const uint8_t *p = f->data, *end = f->data + f->len;
    while (p < end) {
        uint64_t v;
        if (pr_varint_(&p, end, &v) != 0) return -1;
        uint64_t *slot = PR_PUSH(*arr, *n);
        if (!slot) return -1;
        *slot = v;
    }
    return 0;
}

static inline int pr_value_type_(const pr_field_ *f, int64_t out[2]) {
    const uint8_t *p = f->data, *end = p + f->len;
    pr_field_ g;
    if (f->wt != 2) return -1;
    while (p < end) {
        if (pr_field_next_(&p, end, &g) != 0) return -1;
        if (g.num == 1 && g.wt == 0) out[0] = (int64_t)g.v;
        if (g.num == 2 && g.wt == 0) out[1] = (int64_t)g.v;
    }
    return 0;
}

static inline int pr_sample_(const pr_field_ *f, pr_sample *s) {
    const uint8_t *p = f->data, *end = p + f->len;
    pr_field_ g;
    if (f->wt != 2) return -1;
    while (p < end) {
        if (pr_field_next_(&p, end, &g) != 0) return -1;
        if (g.num == 1) {
            if (pr_ints_(&g, &s->loc, &s->nloc) != 0) return -1;
        } else if (g.num == 2) {
            if (pr_ints_(&g, (uint64_t **)&s->val, &s->nval) != 0) return -1;
        } else if (g.num == 3 && g.wt == 2) {
            pr_label *l = PR_PUSH(s->lab, s->nlab);
            if (!l) return -1;
            const uint8_t *q = g.data, *qend = q + g.len;
            pr_field_ h;
            while (q < qend) {
                if (pr_field_next_(&q, qend, &h) != 0 || h.wt != 0) return -1;
                if (h.num == 1) l->key = (int64_t)h.v;
                else if (h.num == 2) l->str = (int64_t)h.v;
                else if (h.num == 3) l->num = (int64_t)h.v;
                else if (h.num == 4) l->num_unit = (int64_t)h.v;
            }
        }
    }
    return 0;
}

static inline int pr_location_(const pr_field_ *f, pr_location *l) {
    const uint8_t *p = f->data, *end = p + f->len;
    pr_field_ g;
    if (f->wt != 2) return -1;
    while (p < end) {
        if (pr_field_next_(&p, end, &g) != 0) return -1;
        if (g.num == 1 && g.wt == 0) l->id = g.v;
        else if (g.num == 2 && g.wt == 0) l->mapping_id = g.v;
        else if (g.num == 3 && g.wt == 0) l->address = g.v;
        else if (g.num == 4 && g.wt == 2) {
            size_t n = l->nline;
            uint64_t *fn = PR_PUSH(l->fn, n);
            if (!fn) return -1;
            n = l->nline;
            int64_t *ln = PR_PUSH(l->line, n);
            if (!ln) return -1;
            l->nline = n;
            const uint8_t *q = g.data, *qend = q + g.len;
            pr_field_ h;
            while (q < qend) {
                if (pr_field_next_(&q, qend, &h) != 0) return -1;
                if (h.num == 1 && h.wt == 0) *fn = h.v;
                if (h.num == 2 && h.wt == 0) *ln = (int64_t)h.v;
            }
        }
    }
    return 0;
}

static inline void pr_free(pr_profile *pp) {
    if (!pp) return;
    for (size_t i = 0; i < pp->nsamples; i++) {
        free(pp->samples[i].loc);
        free(pp->samples[i].val);
        free(pp->samples[i].lab);
    }
    for (size_t i = 0; i < pp->nlocs; i++) {
        free(pp->locs[i].fn);
        free(pp->locs[i].line);
    }
    free(pp->samples);
    free(pp->locs);
    free(pp->fns);
    free(pp->maps);
    free(pp->strings);
    free(pp->sample_type);
    free(pp->buf);
    memset(pp, 0, sizeof *pp);
}

/* Gunzips [data, data + len) into a malloc'd buffer. @return 0 or -1. */
/* Reads a whole file into a malloc'ed buffer (the caller frees *data). 0 or -1. */
static inline int pr_read_file(const char *path, uint8_t **data, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0, got;
    uint8_t *buf = (uint8_t *)malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *nb = (uint8_t *)realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (!buf) return -1;
    *data = buf;
    *len = n;
    return 0;
}

/* Removes a directory of exported files (one level). 0 or -1. */
static inline int pr_rm_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        remove(path);
    }
    closedir(d);
    return rmdir(dir);
}

static inline int pr_gunzip(const uint8_t *data, size_t len, uint8_t **out, size_t *out_len) {
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) return -1;
    size_t cap = len * 4 + 1024, n = 0;
    uint8_t *buf = malloc(cap);
    int rc = Z_OK;
    zs.next_in = (Bytef *)data;
    zs.avail_in = (uInt)len;
    while (buf && rc != Z_STREAM_END) {
        if (n == cap) {
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        zs.next_out = buf + n;
        zs.avail_out = (uInt)(cap - n);
        rc = inflate(&zs, Z_NO_FLUSH);
        n = cap - zs.avail_out;
        if (rc != Z_OK && rc != Z_STREAM_END) break;
        if (rc == Z_OK && zs.avail_in == 0 && zs.avail_out != 0) break; /* truncated */
    }
    inflateEnd(&zs);
    if (rc != Z_STREAM_END) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_len = n;
    return 0;
}

static inline int pr_str_ok_(const pr_profile *pp, int64_t idx) {
    return idx >= 0 && (uint64_t)idx < pp->nstrings;
}

static inline const pr_location *pr_location_by_id(const pr_profile *pp, uint64_t id) {
    if (id >= 1 && id <= pp->nlocs && pp->locs[id - 1].id == id) return &pp->locs[id - 1];
    for (size_t i = 0; i < pp->nlocs; i++)
        if (pp->locs[i].id == id) return &pp->locs[i];
    return NULL;
}

static inline const pr_function *pr_function_by_id(const pr_profile *pp, uint64_t id) {
    if (id >= 1 && id <= pp->nfns && pp->fns[id - 1].id == id) return &pp->fns[id - 1];
    for (size_t i = 0; i < pp->nfns; i++)
        if (pp->fns[i].id == id) return &pp->fns[i];
    return NULL;
}

/*
 * Parses a pprof profile (raw or gzipped). The bytes are copied. @return 0, or -1 if the
 * input is malformed or inconsistent (pp is then freed).
 */
static inline int pr_parse(const uint8_t *data, size_t len, pr_profile *pp) {
    memset(pp, 0, sizeof *pp);
    if (len >= 2 && data[0] == 0x1f && data[1] == 0x8b) {
        if (pr_gunzip(data, len, &pp->buf, &pp->len) != 0) return -1;
    } else {
        pp->buf = malloc(len ? len : 1);
        if (!pp->buf) return -1;
        if (len) memcpy(pp->buf, data, len);
        pp->len = len;
    }
    const uint8_t *p = pp->buf, *end = pp->buf + pp->len;
    pr_field_ f;
    while (p < end) {
        if (pr_field_next_(&p, end, &f) != 0) goto bad;
        switch (f.num) {
        case 1: {
            int64_t(*vt)[2] = PR_PUSH(pp->sample_type, pp->nsample_type);
            if (!vt || pr_value_type_(&f, *vt) != 0) goto bad;
            break;
        }
        case 2: {
            pr_sample *s = PR_PUSH(pp->samples, pp->nsamples);
            if (!s || pr_sample_(&f, s) != 0) goto bad;
            break;
        }
        case 3: {
            pr_mapping *m = PR_PUSH(pp->maps, pp->nmaps);
            if (!m || f.wt != 2) goto bad;
            const uint8_t *q = f.data, *qend = q + f.len;
            pr_field_ g;
            while (q < qend) {
                if (pr_field_next_(&q, qend, &g) != 0) goto bad;
                if (g.wt != 0) continue;
                if (g.num == 1) m->id = g.v;
                else if (g.num == 2) m->start = g.v;
                else if (g.num == 3) m->limit = g.v;
                else if (g.num == 4) m->offset = g.v;
                else if (g.num == 5) m->filename = (int64_t)g.v;
                else if (g.num == 6) m->build_id = (int64_t)g.v;
            }
            break;
        }
        case 4: {
            pr_location *l = PR_PUSH(pp->locs, pp->nlocs);
            if (!l || pr_location_(&f, l) != 0) goto bad;
            break;
        }
        case 5: {
            pr_function *fn = PR_PUSH(pp->fns, pp->nfns);
            if (!fn || f.wt != 2) goto bad;
            const uint8_t *q = f.data, *qend = q + f.len;
            pr_field_ g;
            while (q < qend) {
                if (pr_field_next_(&q, qend, &g) != 0) goto bad;
                if (g.wt != 0) continue;
                if (g.num == 1) fn->id = g.v;
                else if (g.num == 2) fn->name = (int64_t)g.v;
                else if (g.num == 3) fn->system_name = (int64_t)g.v;
                else if (g.num == 4) fn->filename = (int64_t)g.v;
                else if (g.num == 5) fn->start_line = (int64_t)g.v;
            }
            break;
        }
        case 6: {
            pr_str *s = PR_PUSH(pp->strings, pp->nstrings);
            if (!s || f.wt != 2) goto bad;
            s->ptr = (const char *)f.data;
            s->len = f.len;
            break;
        }
        case 9:
            pp->time_nanos = (int64_t)f.v;
            break;
        case 10:
            pp->duration_nanos = (int64_t)f.v;
            break;
        case 11:
            if (pr_value_type_(&f, pp->period_type) != 0) goto bad;
            break;
        case 12:
            pp->period = (int64_t)f.v;
            break;
        default:
            break;
        }
    }
    /* Validation. */
    if (pp->nstrings == 0 || pp->strings[0].len != 0) goto bad;
    for (size_t i = 0; i < pp->nsample_type; i++)
        if (!pr_str_ok_(pp, pp->sample_type[i][0]) || !pr_str_ok_(pp, pp->sample_type[i][1]))
            goto bad;
    for (size_t i = 0; i < pp->nsamples; i++) {
        const pr_sample *s = &pp->samples[i];
        if (s->nval != pp->nsample_type) goto bad;
        for (size_t j = 0; j < s->nloc; j++)
            if (!pr_location_by_id(pp, s->loc[j])) goto bad;
        for (size_t j = 0; j < s->nlab; j++)
            if (!pr_str_ok_(pp, s->lab[j].key) || !pr_str_ok_(pp, s->lab[j].str) ||
                !pr_str_ok_(pp, s->lab[j].num_unit))
                goto bad;
    }
    for (size_t i = 0; i < pp->nlocs; i++)
        for (size_t j = 0; j < pp->locs[i].nline; j++)
            if (!pr_function_by_id(pp, pp->locs[i].fn[j])) goto bad;
    for (size_t i = 0; i < pp->nfns; i++)
        if (!pr_str_ok_(pp, pp->fns[i].name) || !pr_str_ok_(pp, pp->fns[i].system_name) ||
            !pr_str_ok_(pp, pp->fns[i].filename))
            goto bad;
    for (size_t i = 0; i < pp->nmaps; i++)
        if (!pr_str_ok_(pp, pp->maps[i].filename) || !pr_str_ok_(pp, pp->maps[i].build_id))
            goto bad;
    return 0;
bad:
    pr_free(pp);
    return -1;
}

static inline pr_str pr_string(const pr_profile *pp, int64_t idx) {
    return pr_str_ok_(pp, idx) ? pp->strings[idx] : (pr_str){"", 0};
}

static inline int pr_streq(pr_str s, const char *c) {
    return s.len == strlen(c) && memcmp(s.ptr, c, s.len) == 0;
}

/* The label with key `key` of a sample, or NULL. */
static inline const pr_label *pr_label_get(const pr_profile *pp, const pr_sample *s,
                                           const char *key) {
    for (size_t i = 0; i < s->nlab; i++)
        if (pr_streq(pr_string(pp, s->lab[i].key), key)) return &s->lab[i];
    return NULL;
}

/* A string label's value; ptr NULL if the sample has no such label. */
static inline pr_str pr_label_str(const pr_profile *pp, const pr_sample *s, const char *key) {
    const pr_label *l = pr_label_get(pp, s, key);
    return l ? pr_string(pp, l->str) : (pr_str){NULL, 0};
}

/* A numeric label's value, or `dflt` if the sample has no such label. */
static inline int64_t pr_label_num(const pr_profile *pp, const pr_sample *s, const char *key,
                                   int64_t dflt) {
    const pr_label *l = pr_label_get(pp, s, key);
    return l ? l->num : dflt;
}

/* Index of the sample type named `type`, or -1. */
static inline int pr_type_index(const pr_profile *pp, const char *type) {
    for (size_t i = 0; i < pp->nsample_type; i++)
        if (pr_streq(pr_string(pp, pp->sample_type[i][0]), type)) return (int)i;
    return -1;
}

/* The function of frame i of a sample (its location's first line), or NULL. */
static inline const pr_function *pr_frame_fn(const pr_profile *pp, const pr_sample *s,
                                             size_t i) {
    const pr_location *l = i < s->nloc ? pr_location_by_id(pp, s->loc[i]) : NULL;
    return l && l->nline ? pr_function_by_id(pp, l->fn[0]) : NULL;
}

/* ---- canonical description ---- */
typedef struct pr_buf_ {
    char *p;
    size_t len, cap;
} pr_buf_;

static inline void pr_put_(pr_buf_ *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) abort(); /* tests only */
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static inline void pr_putf_(pr_buf_ *b, const char *fmt, long long v) {
    char tmp[32];
    int n = snprintf(tmp, sizeof tmp, fmt, v);
    pr_put_(b, tmp, (size_t)n);
}
static inline void pr_puts_(pr_buf_ *b, pr_str s) { pr_put_(b, s.ptr, s.len); }

static inline int pr_cmp_str_(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct pr_labref_ {
    const pr_profile *pp;
    const pr_label *l;
} pr_labref_;

static inline int pr_cmp_label_(const void *a, const void *b) {
    const pr_labref_ *x = a, *y = b;
    pr_str kx = pr_string(x->pp, x->l->key), ky = pr_string(y->pp, y->l->key);
    size_t n = kx.len < ky.len ? kx.len : ky.len;
    int c = memcmp(kx.ptr, ky.ptr, n);
    return c ? c : (kx.len > ky.len) - (kx.len < ky.len);
}

/* One line per sample, sorted: "frames | labels | values". Caller frees. */
static inline char *pr_describe(const pr_profile *pp) {
    char **lines = calloc(pp->nsamples + 1, sizeof *lines);
    if (!lines) abort();
    for (size_t i = 0; i < pp->nsamples; i++) {
        const pr_sample *s = &pp->samples[i];
        pr_buf_ b = {0};
        pr_put_(&b, "", 0);
        for (size_t j = 0; j < s->nloc; j++) {
            const pr_location *l = pr_location_by_id(pp, s->loc[j]);
            pr_putf_(&b, "[0x%llx", (long long)l->address);
            for (size_t k = 0; k < l->nline; k++) {
                const pr_function *fn = pr_function_by_id(pp, l->fn[k]);
                pr_put_(&b, " ", 1);
                pr_puts_(&b, pr_string(pp, fn->name));
                pr_put_(&b, "/", 1);
                pr_puts_(&b, pr_string(pp, fn->system_name));
                pr_put_(&b, "@", 1);
                pr_puts_(&b, pr_string(pp, fn->filename));
                pr_putf_(&b, ":%lld", (long long)l->line[k]);
                pr_putf_(&b, "(%lld)", (long long)fn->start_line);
            }
            if (l->mapping_id) {
                for (size_t m = 0; m < pp->nmaps; m++) {
                    if (pp->maps[m].id != l->mapping_id) continue;
                    pr_put_(&b, " map=", 5);
                    pr_puts_(&b, pr_string(pp, pp->maps[m].filename));
                    pr_put_(&b, ",", 1);
                    pr_puts_(&b, pr_string(pp, pp->maps[m].build_id));
                    pr_putf_(&b, ",%llx", (long long)pp->maps[m].start);
                }
            }
            pr_put_(&b, "] ", 2);
        }
        pr_put_(&b, "|", 1);
        pr_labref_ *refs = calloc(s->nlab + 1, sizeof *refs);
        if (!refs) abort();
        for (size_t j = 0; j < s->nlab; j++) refs[j] = (pr_labref_){pp, &s->lab[j]};
        qsort(refs, s->nlab, sizeof *refs, pr_cmp_label_);
        for (size_t j = 0; j < s->nlab; j++) {
            const pr_label *l = refs[j].l;
            pr_put_(&b, " ", 1);
            pr_puts_(&b, pr_string(pp, l->key));
            if (l->str) {
                pr_put_(&b, "=\"", 2);
                pr_puts_(&b, pr_string(pp, l->str));
                pr_put_(&b, "\"", 1);
            } else {
                pr_putf_(&b, "=%lld", (long long)l->num);
                pr_puts_(&b, pr_string(pp, l->num_unit));
            }
        }
        free(refs);
        pr_put_(&b, " |", 2);
        for (size_t j = 0; j < s->nval; j++) pr_putf_(&b, " %lld", (long long)s->val[j]);
        lines[i] = b.p;
    }
    qsort(lines, pp->nsamples, sizeof *lines, pr_cmp_str_);
    pr_buf_ out = {0};
    pr_put_(&out, "", 0);
    for (size_t i = 0; i < pp->nsamples; i++) {
        pr_put_(&out, lines[i], strlen(lines[i]));
        pr_put_(&out, "\n", 1);
        free(lines[i]);
    }
    free(lines);
    return out.p;
}

#endif
