/*
 * pyroscope_fix.c - an encoded profile made acceptable to Grafana Pyroscope's validation.
 *
 * Grafana Pyroscope refuses a whole profile (grafana/pyroscope, pkg/validation/validate.go)
 * when a sample type contains '-' ("sample type contains -": Datadog's "wall-time" and
 * "cpu-time"), and when a label with a string value has a key that is not a label name,
 * [a-zA-Z_][a-zA-Z0-9_]* once '.' is read as '_' ("thread name"): its distributor makes
 * every string-valued label of the samples a series label (pkg/model/pprofsplit) and
 * checks those as it checks the series' own (ValidateLabels). ppk__pyroscope_fix()
 * rewrites the profile.proto bytes so that neither happens, as Pyroscope itself does for
 * its .NET profiler's sample types (pkg/og/convert/pprof/profile.go, fixSampleTypes):
 *
 *   - a string used as a sample type's or the period type's type gets a copy with '_'
 *     for each '-';
 *   - a string used as the key of a string-valued label, when it is not a label name as
 *     above, gets a copy with '_' for each byte other than [A-Za-z0-9_.], and a '_' in
 *     front of a leading digit ("thread name" -> "thread_name", "9x" -> "_9x"). A key
 *     the server accepts is left alone ("span.kind": the server makes '.' '_' itself,
 *     or keeps it where it allows UTF-8 names). Numeric labels are never series labels;
 *   - a string used as the value of a string-valued label, when it is longer than
 *     PPK__PYROSCOPE_MAX_VALUE bytes (the server's default max_label_value_length,
 *     pkg/validation/limits.go), gets a copy cut there, at a character's start.
 *
 * The copies are appended to the string table (new fields 6 at the end of the message:
 * protobuf concatenates repeated fields, so their indexes follow the last string) and the
 * ValueType and Label messages that used the old strings are written again pointing at
 * them. Every other byte is copied as it is: values, the other strings, numeric labels
 * and the order of everything stay as they were, and a string used elsewhere too (a
 * function called "cpu-time") keeps its name there. Three passes over the input: count
 * and index the strings, mark the strings to copy, write. Runs on the uploader thread.
 */
#include "pyroscope_fix.h"

#include <string.h>

/* ---- reading ------------------------------------------------------------------------- */

/* A field: number, wire type, and where its bytes are: [start, end) from its tag, the
 * value at val (for wire type 2: the bytes, vlen of them; else the varint in v). */
typedef struct field {
    uint32_t num, wt;
    size_t start, end;
    size_t val, vlen;
    uint64_t v;
} field;

static int rd_varint(const uint8_t *b, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64 && *i < n; s += 7) {
        uint8_t c = b[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* The field at b[*i] (advanced past it). 1 when read, 0 at the end, -1 when malformed. */
static int rd_field(const uint8_t *b, size_t n, size_t *i, field *f) {
    if (*i >= n) return 0;
    uint64_t key;
    f->start = *i;
    if (rd_varint(b, n, i, &key) || key >> 32 || !(key >> 3)) return -1;
    f->num = (uint32_t)(key >> 3);
    f->wt = (uint32_t)(key & 7);
    f->v = 0;
    f->val = *i;
    f->vlen = 0;
    switch (f->wt) {
    case 0:
        if (rd_varint(b, n, i, &f->v)) return -1;
        break;
    case 1:
    case 5: {
        size_t k = f->wt == 1 ? 8 : 4;
        if (n - *i < k) return -1;
        *i += k;
        break;
    }
    case 2:
        if (rd_varint(b, n, i, &f->v) || f->v > n - *i) return -1;
        f->val = *i;
        f->vlen = (size_t)f->v;
        *i += f->vlen;
        break;
    default:
        return -1;
    }
    f->end = *i;
    return 1;
}

/* Profile (profile.proto) fields, and those of its ValueType, Sample and Label. */
enum { P_SAMPLE_TYPE = 1, P_SAMPLE = 2, P_STRING = 6, P_PERIOD_TYPE = 11 };
enum { VT_TYPE = 1, S_LABEL = 3, L_KEY = 1, L_STR = 2 };

/* ---- the names ------------------------------------------------------------------------ */

static int is_alnum(uint8_t c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

/* A label name for Pyroscope: [a-zA-Z_][a-zA-Z0-9_]* with '.' counted as '_'. */
static int label_name_ok(const uint8_t *s, size_t n) {
    if (!n || (s[0] >= '0' && s[0] <= '9')) return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_alnum(s[i]) && s[i] != '_' && s[i] != '.') return 0;
    return 1;
}

/* ---- writing ------------------------------------------------------------------------- */

static void put_varint(ppk__ubuf *b, uint64_t x) {
    uint8_t v[10];
    size_t k = 0;
    do {
        v[k++] = (uint8_t)((x & 0x7f) | (x >> 7 ? 0x80 : 0));
        x >>= 7;
    } while (x);
    ppk__ubuf_add(b, v, k);
}

/* A varint field: its tag and value. */
static void put_uint(ppk__ubuf *b, uint32_t num, uint64_t v) {
    put_varint(b, (uint64_t)num << 3);
    put_varint(b, v);
}

/* A length-delimited field holding the bytes of `body`. */
static void put_nested(ppk__ubuf *b, uint32_t num, const ppk__ubuf *body) {
    put_varint(b, (uint64_t)num << 3 | 2);
    put_varint(b, body->len);
    ppk__ubuf_add(b, body->p, body->len);
    if (body->failed) b->failed = 1;
}

enum { MARK_TYPE = 1, MARK_KEY = 2, MARK_VALUE = 3 };

/* The longest label value the server takes by default. */
#define PPK__PYROSCOPE_MAX_VALUE 2048

/* Appends the copy of the string at s (n bytes) as a string table entry (field 6): for a
 * type (MARK_TYPE) '_' for each '-'; for a key (MARK_KEY) '_' for each byte other than
 * [A-Za-z0-9_.], after a '_' when it is empty or starts with a digit; for a value
 * (MARK_VALUE) its first PPK__PYROSCOPE_MAX_VALUE bytes, less a cut character's. */
static void write_copy(ppk__ubuf *out, const uint8_t *s, size_t n, int kind) {
    if (kind == MARK_VALUE) {
        size_t k = PPK__PYROSCOPE_MAX_VALUE;
        while (k && (s[k] & 0xc0) == 0x80) k--; /* s[k] starts the first character left out */
        put_varint(out, (uint64_t)P_STRING << 3 | 2);
        put_varint(out, k);
        ppk__ubuf_add(out, s, k);
        return;
    }
    int prefix = kind == MARK_KEY && (!n || (s[0] >= '0' && s[0] <= '9'));
    put_varint(out, (uint64_t)P_STRING << 3 | 2);
    put_varint(out, n + (size_t)prefix);
    if (prefix) ppk__ubuf_add(out, "_", 1);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = s[i];
        if (kind == MARK_TYPE ? c == '-' : !is_alnum(c) && c != '_' && c != '.') c = '_';
        ppk__ubuf_add(out, &c, 1);
    }
}

typedef struct fixer {
    const uint8_t *raw;
    size_t n;
    size_t n_str;
    size_t *str_off, *str_len; /* each string's bytes in raw */
    uint64_t *tmap, *kmap, *vmap; /* marks, then the copy's index (0: none) */
} fixer;

/* A ValueType (sample or period type) with its type pointing at the copy, into out. */
static int write_value_type(const fixer *x, const field *f, ppk__ubuf *tmp, ppk__ubuf *out) {
    tmp->len = 0;
    size_t i = f->val, end = f->val + f->vlen;
    field g;
    int r;
    while ((r = rd_field(x->raw, end, &i, &g)) > 0) {
        if (g.num == VT_TYPE && g.wt == 0 && g.v < x->n_str && x->tmap[g.v])
            put_uint(tmp, VT_TYPE, x->tmap[g.v]);
        else
            ppk__ubuf_add(tmp, x->raw + g.start, g.end - g.start);
    }
    if (r < 0) return PPK_EFORMAT;
    put_nested(out, f->num, tmp);
    return 0;
}

/* A Sample whose string-valued labels point at their keys' copies, into out. */
static int write_sample(const fixer *x, const field *f, ppk__ubuf *tmp, ppk__ubuf *lab,
                        ppk__ubuf *out) {
    tmp->len = 0;
    size_t i = f->val, end = f->val + f->vlen;
    field g;
    int r;
    while ((r = rd_field(x->raw, end, &i, &g)) > 0) {
        if (g.num != S_LABEL || g.wt != 2) {
            ppk__ubuf_add(tmp, x->raw + g.start, g.end - g.start);
            continue;
        }
        /* A Label: its key and whether its value is a string (str set, not 0). */
        uint64_t key = 0, str = 0;
        size_t j = g.val, lend = g.val + g.vlen;
        field h;
        int q;
        while ((q = rd_field(x->raw, lend, &j, &h)) > 0) {
            if (h.num == L_KEY && h.wt == 0) key = h.v;
            if (h.num == L_STR && h.wt == 0) str = h.v;
        }
        if (q < 0) return PPK_EFORMAT;
        uint64_t new_key = str && key < x->n_str ? x->kmap[key] : 0;
        uint64_t new_str = str && str < x->n_str ? x->vmap[str] : 0;
        if (!new_key && !new_str) {
            ppk__ubuf_add(tmp, x->raw + g.start, g.end - g.start);
            continue;
        }
        lab->len = 0;
        j = g.val;
        while (rd_field(x->raw, lend, &j, &h) > 0) {
            if (new_key && h.num == L_KEY && h.wt == 0) put_uint(lab, L_KEY, new_key);
            else if (new_str && h.num == L_STR && h.wt == 0) put_uint(lab, L_STR, new_str);
            else ppk__ubuf_add(lab, x->raw + h.start, h.end - h.start);
        }
        put_nested(tmp, S_LABEL, lab);
    }
    if (r < 0) return PPK_EFORMAT;
    put_nested(out, P_SAMPLE, tmp);
    return 0;
}

/* Marks the strings to copy (pass 2). */
static int mark(fixer *x) {
    size_t i = 0;
    field f, g, h;
    int r;
    while ((r = rd_field(x->raw, x->n, &i, &f)) > 0) {
        if ((f.num == P_SAMPLE_TYPE || f.num == P_PERIOD_TYPE) && f.wt == 2) {
            size_t j = f.val, end = f.val + f.vlen;
            int q;
            while ((q = rd_field(x->raw, end, &j, &g)) > 0)
                if (g.num == VT_TYPE && g.wt == 0 && g.v < x->n_str &&
                    memchr(x->raw + x->str_off[g.v], '-', x->str_len[g.v]))
                    x->tmap[g.v] = 1;
            if (q < 0) return PPK_EFORMAT;
        } else if (f.num == P_SAMPLE && f.wt == 2) {
            size_t j = f.val, end = f.val + f.vlen;
            int q;
            while ((q = rd_field(x->raw, end, &j, &g)) > 0) {
                if (g.num != S_LABEL || g.wt != 2) continue;
                uint64_t key = 0, str = 0;
                size_t k = g.val, lend = g.val + g.vlen;
                int s;
                while ((s = rd_field(x->raw, lend, &k, &h)) > 0) {
                    if (h.num == L_KEY && h.wt == 0) key = h.v;
                    if (h.num == L_STR && h.wt == 0) str = h.v;
                }
                if (s < 0) return PPK_EFORMAT;
                if (str && key < x->n_str &&
                    !label_name_ok(x->raw + x->str_off[key], x->str_len[key]))
                    x->kmap[key] = 1;
                if (str && str < x->n_str && x->str_len[str] > PPK__PYROSCOPE_MAX_VALUE)
                    x->vmap[str] = 1;
            }
            if (q < 0) return PPK_EFORMAT;
        }
    }
    return r < 0 ? PPK_EFORMAT : 0;
}

/* Writes the profile with its copies (pass 3). */
static int write_all(fixer *x, ppk__ubuf *out, ppk__ubuf *tmp, ppk__ubuf *lab) {
    size_t i = 0;
    field f;
    int r, rc = 0;
    while (!rc && (r = rd_field(x->raw, x->n, &i, &f)) > 0) {
        if ((f.num == P_SAMPLE_TYPE || f.num == P_PERIOD_TYPE) && f.wt == 2)
            rc = write_value_type(x, &f, tmp, out);
        else if (f.num == P_SAMPLE && f.wt == 2)
            rc = write_sample(x, &f, tmp, lab, out);
        else
            ppk__ubuf_add(out, x->raw + f.start, f.end - f.start);
    }
    if (rc) return rc;
    for (size_t s = 0; s < x->n_str; s++)
        if (x->tmap[s]) write_copy(out, x->raw + x->str_off[s], x->str_len[s], MARK_TYPE);
    for (size_t s = 0; s < x->n_str; s++)
        if (x->kmap[s]) write_copy(out, x->raw + x->str_off[s], x->str_len[s], MARK_KEY);
    for (size_t s = 0; s < x->n_str; s++)
        if (x->vmap[s]) write_copy(out, x->raw + x->str_off[s], x->str_len[s], MARK_VALUE);
    return tmp->failed || lab->failed || out->failed ? PPK_ENOMEM : 0;
}

int ppk__pyroscope_fix(ppk__mem *m, const uint8_t *raw, size_t n, ppk__ubuf *out,
                       int *changed) {
    *changed = 0;
    fixer x = {.raw = raw, .n = n};
    /* Pass 1: the strings. */
    size_t i = 0;
    field f;
    int r;
    while ((r = rd_field(raw, n, &i, &f)) > 0) x.n_str += f.num == P_STRING && f.wt == 2;
    if (r < 0) return PPK_EFORMAT;
    if (!x.n_str) return 0;
    size_t *offs = ppk__mem_alloc_array(m, 2 * x.n_str, sizeof *offs);
    uint64_t *maps = ppk__mem_alloc_array(m, 3 * x.n_str, sizeof *maps);
    int rc = 0;
    if (!offs || !maps) {
        rc = PPK_ENOMEM;
        goto done;
    }
    x.str_off = offs;
    x.str_len = offs + x.n_str;
    x.tmap = maps;
    x.kmap = maps + x.n_str;
    x.vmap = maps + 2 * x.n_str;
    memset(maps, 0, 3 * x.n_str * sizeof *maps);
    size_t s = 0;
    i = 0;
    while (rd_field(raw, n, &i, &f) > 0)
        if (f.num == P_STRING && f.wt == 2) {
            x.str_off[s] = f.val;
            x.str_len[s++] = f.vlen;
        }
    /* Pass 2: what to copy, numbered after the last string: types, keys, values. */
    if ((rc = mark(&x))) goto done;
    uint64_t next = x.n_str;
    for (s = 0; s < x.n_str; s++)
        if (x.tmap[s]) x.tmap[s] = next++;
    for (s = 0; s < x.n_str; s++)
        if (x.kmap[s]) x.kmap[s] = next++;
    for (s = 0; s < x.n_str; s++)
        if (x.vmap[s]) x.vmap[s] = next++;
    if (next == x.n_str) goto done;
    /* Pass 3. */
    ppk__ubuf tmp, lab;
    ppk__ubuf_init(&tmp, m);
    ppk__ubuf_init(&lab, m);
    rc = write_all(&x, out, &tmp, &lab);
    ppk__ubuf_free(&tmp);
    ppk__ubuf_free(&lab);
    if (!rc) *changed = 1;
done:
    if (offs) ppk__mem_free(m, offs, 2 * x.n_str * sizeof *offs);
    if (maps) ppk__mem_free(m, maps, 3 * x.n_str * sizeof *maps);
    return rc;
}
