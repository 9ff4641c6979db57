/*
 * flame.c - `pprofkit flame`: the flame graph page of `python -m pprofkit flame`.
 *
 * The page is the Python package's template, python/pprofkit/flame.html (compiled in as
 * ppk_flame_html: see CMakeLists.txt), with its title and its data filled in. The data
 * is what python/pprofkit/flame.py's data() computes from the same files, byte for byte
 * (its opening comment describes the fields; tests/test_pprofkit_cmd.sh compares the two
 * commands' pages). To come out the same, this file reads a profile as
 * python/pprofkit/view.py does, which differs from the other subcommands here:
 *   - a string is decoded as Python's bytes.decode("utf-8", "replace") decodes it: each
 *     maximal ill-formed subsequence (Unicode's "maximal subpart") becomes one U+FFFD.
 *     Strings are compared once decoded, so byte strings that decode alike are one;
 *   - a frame is a (function name, filename) pair, one per line of a location (inlined
 *     functions first); a frame without a function name (an unsymbolized address: a
 *     location without lines; or a function whose name is empty) is (pk_frame_name's
 *     "[libc.so.6]" or "<unknown>", "");
 *   - a label whose str index is not 0 is a string label (even if that string is ""),
 *     any other a numeric one, written in decimal; of two labels of a sample with the
 *     same key, the later one counts. A key's values are counted apart by kind (the
 *     string "5" and the number 5 are two values), as Python's set of str and int does;
 *   - sums are exact, as Python's integers are: 128 bits (two 64-bit halves) hold the
 *     sum of any number of int64 values a profile can hold.
 * The orders are flame.py's: frames by (name, file), stacks lexicographically by their
 * frames' numbers, label sets and samples in the order first seen, the string table
 * filled as the frames, then the label sets, are written. Strings compare as byte
 * strings: for valid UTF-8, that is the order of code points, Python's order.
 *
 * The JSON is Python's json.dumps(..., ensure_ascii=False, separators=(",", ":")) with
 * every "<" written \u003c: the data sits in a <script> element, which "</script>" in a
 * function name would end; "<" occurs only inside strings, where \u003c means the same.
 * The title is HTML-escaped (& < > ") and substituted, as the data is, in one pass over
 * the template, so neither can bring in a marker of the other.
 *
 * How: one pass over every sample of every file numbers the distinct strings, frames,
 * stacks and (key, value) pairs (insertion-ordered hash tables of byte keys) and keeps
 * each sample's stack and sorted labels; the high-cardinality keys are known after it.
 * A second pass over the kept samples numbers the label sets and sums the values per
 * (stack, label set). Then the frames and stacks are sorted and the page written to
 * OUT.PID.tmp, which is renamed over OUT. The profiles stay loaded until the end: the
 * samples' values are read in the second pass. Memory comes from pk_xrealloc (exits when
 * out of memory); single-threaded.
 */
#include "cmd.h"
#include "keys.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The template (generated from python/pprofkit/flame.html by cmake/embed_file.cmake). */
extern const unsigned char ppk_flame_html[];
extern const size_t ppk_flame_html_len;

#define DATA_MARK "/*PPROFKIT-FLAME-DATA*/"
#define TITLE_MARK "<!--PPROFKIT-FLAME-TITLE-->"
/* flame.py's MAX_LABEL_VALUES: a key with more values than this, and more than half as
 * many values as there are samples, is left out. */
#define MAX_LABEL_VALUES 1000
#define NONE UINT32_MAX /* no number */

/* ---- strings: Python's decode("utf-8", "replace") ---------------------------------- */
/* The length of the ill-formed subsequence or well-formed character at s[0..n): *ok
 * tells which. A lead byte and the continuation bytes that could still complete it
 * (Table 3-7 of the Unicode standard) form one ill-formed subsequence. */
static size_t utf8_step(const uint8_t *s, size_t n, int *ok) {
    uint8_t c = s[0];
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the range of the second byte */
    *ok = 1;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;      /* overlong */
        else if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;      /* overlong */
        else if (c == 0xF4) hi = 0x8F; /* above U+10FFFF */
    } else {
        *ok = 0; /* a continuation byte, C0, C1, F5..FF: never in a character */
        return 1;
    }
    size_t k = 1;
    if (k < n && s[k] >= lo && s[k] <= hi) {
        k++;
        while (k < need && k < n && (s[k] & 0xC0) == 0x80) k++;
    }
    *ok = k == need;
    return k;
}

/* s as valid UTF-8: s itself, or its repair written to *scratch. */
static ppk_str decoded(ppk_str s, pk_buf *scratch) {
    const uint8_t *u = (const uint8_t *)s.ptr;
    size_t i = 0;
    int ok = 1;
    while (i < s.len) {
        size_t k = utf8_step(u + i, s.len - i, &ok);
        if (!ok) break;
        i += k;
    }
    if (ok) return s;
    scratch->len = 0;
    pk_put(scratch, s.ptr, i);
    while (i < s.len) {
        size_t k = utf8_step(u + i, s.len - i, &ok);
        if (ok) pk_put(scratch, u + i, k);
        else pk_put(scratch, "\xEF\xBF\xBD", 3);
        i += k;
    }
    return (ppk_str){scratch->p, scratch->len};
}

/* ---- the data ----------------------------------------------------------------------- */
typedef struct u128 {
    uint64_t lo, hi;
} u128;

/* A label of a kept sample: its key's and value's string numbers; num: a numeric one. */
typedef struct label {
    uint32_t key, value, num, at;
} label;

/* A kept sample: its stack's number, its labels (sorted by key, one per key) in the
 * `labels` array, its values (in its profile). */
typedef struct kept {
    uint32_t stack;
    size_t label0, n_labels;
    const int64_t *values;
} kept;

typedef struct flame {
    pk_keys strs;      /* decoded strings; number 0 is "" */
    pk_keys frames;    /* {name, file} string numbers */
    pk_keys stacks;    /* frame numbers, the root first */
    pk_keys pairs;     /* {key, num, value}: the distinct values of each key */
    pk_keys labelsets; /* {key, value, key, value...} string numbers; number 0 is {} */
    pk_keys groups;    /* {stack, label set}: one per group of samples summed */
    uint32_t *n_values; /* by key's string number: its distinct values */
    uint32_t n_values_cap;
    label *labels;
    size_t n_labels, labels_cap;
    kept *kept;
    size_t n_kept, kept_cap;
    u128 *sums; /* nvalues per group */
    size_t nvalues;
    pk_buf scratch;
    uint32_t *ids; /* a stack being built */
    size_t ids_cap;
} flame;

static uint32_t sid(flame *f, ppk_str s) {
    ppk_str d = decoded(s, &f->scratch);
    return pk_key_id(&f->strs, d.ptr, d.len);
}

static uint32_t frame_of(flame *f, ppk_str name, ppk_str file) {
    uint32_t k[2] = {sid(f, name), sid(f, file)};
    return pk_key_id(&f->frames, k, sizeof k);
}

static void push_id(flame *f, size_t *n, uint32_t id) {
    if (*n == f->ids_cap) {
        f->ids_cap = f->ids_cap ? 2 * f->ids_cap : 64;
        f->ids = pk_xrealloc(f->ids, f->ids_cap * sizeof *f->ids);
    }
    f->ids[(*n)++] = id;
}

static const pk_keys *g_sort_strs; /* the strings the qsort comparators below read */

static int label_cmp(const void *x, const void *y) {
    const label *a = x, *b = y;
    if (a->key != b->key) {
        int c = pk_str_cmp(pk_key_str(g_sort_strs, a->key), pk_key_str(g_sort_strs, b->key));
        if (c) return c;
    }
    return (a->at > b->at) - (a->at < b->at);
}

/* The first pass over profile p: each sample's stack and labels kept, the distinct
 * values of each label key counted. */
static void first_pass(flame *f, const ppk_pprof *p) {
    uint32_t *fn_frame = pk_xrealloc(NULL, (p->n_functions + 1) * sizeof *fn_frame);
    for (size_t i = 0; i < p->n_functions; i++) fn_frame[i] = NONE;
    for (size_t i = 0; i < p->n_samples; i++) {
        const ppk_pprof_sample *s = &p->samples[i];
        size_t n = 0;
        for (size_t k = 0; k < s->n_locations; k++) {
            const ppk_pprof_location *l = s->locations[k];
            for (size_t j = 0; j < (l->n_lines ? l->n_lines : 1); j++) {
                const ppk_pprof_function *fn = j < l->n_lines ? l->lines[j].function : NULL;
                uint32_t id;
                if (!fn || !fn->name.len) {
                    char buf[4096];
                    id = frame_of(f, pk_frame_name(l, j, buf, sizeof buf), PPK_STR(""));
                } else {
                    size_t at = (size_t)(fn - p->functions); /* it points into them */
                    if (fn_frame[at] == NONE)
                        fn_frame[at] = frame_of(f, fn->name, fn->filename);
                    id = fn_frame[at];
                }
                push_id(f, &n, id);
            }
        }
        for (size_t a = 0, b = n; a + 1 < b; a++, b--) { /* the root first */
            uint32_t t = f->ids[a];
            f->ids[a] = f->ids[b - 1];
            f->ids[b - 1] = t;
        }
        uint32_t stack = pk_key_id(&f->stacks, f->ids, n * sizeof *f->ids);

        /* The labels, sorted by key, the last of each key kept. */
        if (s->n_labels > f->labels_cap - f->n_labels) {
            f->labels_cap = 2 * (f->n_labels + s->n_labels) + 256;
            f->labels = pk_xrealloc(f->labels, f->labels_cap * sizeof *f->labels);
        }
        label *ls = f->labels + f->n_labels;
        for (size_t k = 0; k < s->n_labels; k++) {
            const ppk_pprof_label *l = &s->labels[k];
            label *o = &ls[k];
            o->key = sid(f, l->key);
            o->at = (uint32_t)k;
            /* Index 0 gives strings[0] itself; any other index, a string label. */
            o->num = l->str.len == 0 && l->str.ptr == p->strings[0].ptr;
            if (o->num) {
                char d[24];
                int len = snprintf(d, sizeof d, "%lld", (long long)l->num);
                o->value = pk_key_id(&f->strs, d, (size_t)len);
            } else {
                o->value = sid(f, l->str);
            }
        }
        g_sort_strs = &f->strs;
        if (s->n_labels > 1) /* with none, ls may be NULL */
            qsort(ls, s->n_labels, sizeof *ls, label_cmp);
        size_t m = 0;
        for (size_t k = 0; k < s->n_labels; k++) {
            if (k + 1 < s->n_labels && ls[k + 1].key == ls[k].key) continue;
            ls[m++] = ls[k];
        }
        for (size_t k = 0; k < m; k++) {
            uint32_t pair[3] = {ls[k].key, ls[k].num, ls[k].value};
            uint32_t before = f->pairs.n;
            pk_key_id(&f->pairs, pair, sizeof pair);
            if (f->pairs.n == before) continue;
            if (ls[k].key >= f->n_values_cap) {
                uint32_t cap = f->strs.n;
                f->n_values = pk_xrealloc(f->n_values, (size_t)cap * sizeof *f->n_values);
                memset(f->n_values + f->n_values_cap, 0,
                       (size_t)(cap - f->n_values_cap) * sizeof *f->n_values);
                f->n_values_cap = cap;
            }
            f->n_values[ls[k].key]++;
        }
        if (f->n_kept == f->kept_cap) {
            f->kept_cap = f->kept_cap ? 2 * f->kept_cap : 1024;
            f->kept = pk_xrealloc(f->kept, f->kept_cap * sizeof *f->kept);
        }
        f->kept[f->n_kept++] = (kept){stack, f->n_labels, m, s->values};
        f->n_labels += m;
    }
    free(fn_frame);
}

/* The second pass: the label sets without the omitted keys, the sums per group. */
static void second_pass(flame *f, const uint8_t *omit) {
    pk_key_id(&f->labelsets, "", 0); /* number 0: no labels */
    for (size_t i = 0; i < f->n_kept; i++) {
        const kept *k = &f->kept[i];
        size_t n = 0;
        for (size_t j = 0; j < k->n_labels; j++) {
            const label *l = &f->labels[k->label0 + j];
            if (omit[l->key]) continue;
            push_id(f, &n, l->key);
            push_id(f, &n, l->value);
        }
        uint32_t group[2] = {k->stack, pk_key_id(&f->labelsets, f->ids, n * sizeof *f->ids)};
        uint32_t before = f->groups.n;
        uint32_t g = pk_key_id(&f->groups, group, sizeof group);
        if (f->groups.n != before) {
            if (g % 1024 == 0) /* room for 1024 more groups */
                f->sums = pk_xrealloc(f->sums,
                                      ((size_t)g + 1024) * f->nvalues * sizeof *f->sums);
            memset(f->sums + (size_t)g * f->nvalues, 0, f->nvalues * sizeof *f->sums);
        }
        u128 *sum = f->sums + (size_t)g * f->nvalues;
        for (size_t t = 0; t < f->nvalues; t++) {
            if (k->values[t] <= 0) continue; /* a width cannot be negative */
            uint64_t v = (uint64_t)k->values[t];
            sum[t].lo += v;
            sum[t].hi += sum[t].lo < v;
        }
    }
}

/* ---- the JSON ----------------------------------------------------------------------- */
/* A JSON string of valid UTF-8, as Python's json.dumps(ensure_ascii=False) writes it,
 * "<" as \u003c. */
static void put_json_str(pk_buf *b, ppk_str s) {
    pk_put(b, "\"", 1);
    size_t run = 0;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '<': esc = "\\u003c"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) continue;
        pk_put(b, s.ptr + run, i - run);
        pk_puts(b, esc);
        run = i + 1;
    }
    pk_put(b, s.ptr + run, s.len - run);
    pk_put(b, "\"", 1);
}

static void put_u128(pk_buf *b, u128 v) {
    if (!v.hi) {
        pk_put_u64(b, v.lo);
        return;
    }
    uint32_t limb[4] = {(uint32_t)(v.hi >> 32), (uint32_t)v.hi, (uint32_t)(v.lo >> 32),
                        (uint32_t)v.lo};
    char d[40];
    size_t n = 0;
    for (int nonzero = 1; nonzero;) { /* divide by 10 until nothing is left */
        uint64_t rem = 0;
        nonzero = 0;
        for (int i = 0; i < 4; i++) {
            uint64_t cur = (rem << 32) | limb[i];
            limb[i] = (uint32_t)(cur / 10);
            rem = cur % 10;
            nonzero |= limb[i] != 0;
        }
        d[n++] = (char)('0' + rem);
    }
    while (n) pk_put(b, &d[--n], 1);
}

/* The last component of a path, as Python's os.path.basename gives it. */
static ppk_str base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return ppk_cstr(slash ? slash + 1 : path);
}

static uint32_t *g_rank_frames;   /* frame number -> its place in name order */
static const pk_keys *g_sort_frames; /* for frame_cmp */
static const pk_keys *g_sort_stacks; /* for stack_cmp */

static int frame_cmp(const void *x, const void *y) {
    size_t len;
    const uint32_t *a = pk_key_at(g_sort_frames, *(const uint32_t *)x, &len);
    const uint32_t *b = pk_key_at(g_sort_frames, *(const uint32_t *)y, &len);
    int c = pk_str_cmp(pk_key_str(g_sort_strs, a[0]), pk_key_str(g_sort_strs, b[0]));
    return c ? c : pk_str_cmp(pk_key_str(g_sort_strs, a[1]), pk_key_str(g_sort_strs, b[1]));
}

static int stack_cmp(const void *x, const void *y) {
    size_t na, nb;
    const uint32_t *a = pk_key_at(g_sort_stacks, *(const uint32_t *)x, &na);
    const uint32_t *b = pk_key_at(g_sort_stacks, *(const uint32_t *)y, &nb);
    na /= sizeof *a;
    nb /= sizeof *b;
    for (size_t i = 0; i < na && i < nb; i++) {
        uint32_t ra = g_rank_frames[a[i]], rb = g_rank_frames[b[i]];
        if (ra != rb) return ra < rb ? -1 : 1;
    }
    return (na > nb) - (na < nb);
}

static int sid_cmp(const void *x, const void *y) {
    return pk_str_cmp(pk_key_str(g_sort_strs, *(const uint32_t *)x),
                   pk_key_str(g_sort_strs, *(const uint32_t *)y));
}

/* The output string table: string number -> its index there, assigned on first use. */
typedef struct outstr {
    uint32_t *index; /* by string number; NONE until used */
    uint32_t *order; /* the table: string numbers */
    uint32_t n;
} outstr;

static uint32_t out_sid(outstr *o, uint32_t s) {
    if (o->index[s] == NONE) {
        o->index[s] = o->n;
        o->order[o->n++] = s;
    }
    return o->index[s];
}

static void put_list_sep(pk_buf *b, size_t i) {
    if (i) pk_put(b, ",", 1);
}

/* The data as JSON: flame.py's data() of the files named names. */
static void put_data(pk_buf *b, flame *f, const ppk_pprof *first, size_t type,
                     const char **files, size_t n_files, const uint8_t *omit) {
    pk_buf *scratch = &f->scratch;
    g_sort_strs = &f->strs;

    /* Frames in name order; stacks in the order of their frames' places. */
    uint32_t nf = f->frames.n, ns = f->stacks.n;
    uint32_t *frame_order = pk_xrealloc(NULL, (size_t)nf * sizeof *frame_order);
    uint32_t *rank = pk_xrealloc(NULL, (size_t)nf * sizeof *rank);
    for (uint32_t i = 0; i < nf; i++) frame_order[i] = i;
    g_sort_frames = &f->frames;
    qsort(frame_order, nf, sizeof *frame_order, frame_cmp);
    for (uint32_t i = 0; i < nf; i++) rank[frame_order[i]] = i;
    uint32_t *stack_order = pk_xrealloc(NULL, (size_t)ns * sizeof *stack_order);
    uint32_t *stack_rank = pk_xrealloc(NULL, (size_t)ns * sizeof *stack_rank);
    for (uint32_t i = 0; i < ns; i++) stack_order[i] = i;
    g_rank_frames = rank;
    g_sort_stacks = &f->stacks;
    qsort(stack_order, ns, sizeof *stack_order, stack_cmp);
    for (uint32_t i = 0; i < ns; i++) stack_rank[stack_order[i]] = i;

    /* The string table: "", the frames' strings, then the label sets'. */
    outstr o = {pk_xrealloc(NULL, (size_t)f->strs.n * sizeof *o.index),
                pk_xrealloc(NULL, (size_t)f->strs.n * sizeof *o.order), 0};
    for (uint32_t i = 0; i < f->strs.n; i++) o.index[i] = NONE;
    out_sid(&o, 0);

    pk_puts(b, "{\"names\":[");
    for (size_t i = 0; i < n_files; i++) {
        put_list_sep(b, i);
        put_json_str(b, decoded(base_name(files[i]), scratch));
    }
    pk_puts(b, "],\"types\":[");
    for (size_t i = 0; i < first->n_sample_types; i++) {
        put_list_sep(b, i);
        pk_put(b, "[", 1);
        put_json_str(b, decoded(first->sample_types[i].type, scratch));
        pk_put(b, ",", 1);
        put_json_str(b, decoded(first->sample_types[i].unit, scratch));
        pk_put(b, "]", 1);
    }
    pk_puts(b, "],\"default\":");
    pk_put_u64(b, type);
    /* The frames' and label sets' string indices first, the table then. */
    pk_buf rest = {0};
    pk_puts(&rest, ",\"frames\":[");
    for (uint32_t i = 0; i < nf; i++) {
        size_t len;
        const uint32_t *fr = pk_key_at(&f->frames, frame_order[i], &len);
        put_list_sep(&rest, i);
        pk_put_u64(&rest, out_sid(&o, fr[0]));
        pk_put(&rest, ",", 1);
        pk_put_u64(&rest, out_sid(&o, fr[1]));
    }
    pk_puts(&rest, "],\"stacks\":[");
    for (uint32_t i = 0; i < ns; i++) {
        size_t len;
        const uint32_t *st = pk_key_at(&f->stacks, stack_order[i], &len);
        put_list_sep(&rest, i);
        pk_put(&rest, "[", 1);
        for (size_t k = 0; k < len / sizeof *st; k++) {
            put_list_sep(&rest, k);
            pk_put_u64(&rest, rank[st[k]]);
        }
        pk_put(&rest, "]", 1);
    }
    pk_puts(&rest, "],\"labelsets\":[");
    for (uint32_t i = 0; i < f->labelsets.n; i++) {
        size_t len;
        const uint32_t *ls = pk_key_at(&f->labelsets, i, &len);
        put_list_sep(&rest, i);
        pk_put(&rest, "[", 1);
        for (size_t k = 0; k < len / sizeof *ls; k++) {
            put_list_sep(&rest, k);
            pk_put_u64(&rest, out_sid(&o, ls[k]));
        }
        pk_put(&rest, "]", 1);
    }
    pk_puts(&rest, "],\"samples\":[");
    for (uint32_t g = 0; g < f->groups.n; g++) {
        size_t len;
        const uint32_t *grp = pk_key_at(&f->groups, g, &len);
        put_list_sep(&rest, g);
        pk_put_u64(&rest, stack_rank[grp[0]]);
        pk_put(&rest, ",", 1);
        pk_put_u64(&rest, grp[1]);
        for (size_t t = 0; t < f->nvalues; t++) {
            pk_put(&rest, ",", 1);
            put_u128(&rest, f->sums[(size_t)g * f->nvalues + t]);
        }
    }
    pk_puts(&rest, "],\"nvalues\":");
    pk_put_u64(&rest, f->nvalues);
    pk_puts(&rest, ",\"omitted\":[");
    uint32_t *omitted = pk_xrealloc(NULL, (size_t)f->strs.n * sizeof *omitted);
    uint32_t n_omitted = 0;
    for (uint32_t i = 0; i < f->strs.n; i++)
        if (omit[i]) omitted[n_omitted++] = i;
    qsort(omitted, n_omitted, sizeof *omitted, sid_cmp);
    for (uint32_t i = 0; i < n_omitted; i++) {
        put_list_sep(&rest, i);
        put_json_str(&rest, pk_key_str(&f->strs, omitted[i]));
    }
    pk_puts(&rest, "]}");

    pk_puts(b, ",\"strings\":[");
    for (uint32_t i = 0; i < o.n; i++) {
        put_list_sep(b, i);
        put_json_str(b, pk_key_str(&f->strs, o.order[i]));
    }
    pk_put(b, "]", 1);
    pk_put(b, rest.p, rest.len);

    free(rest.p);
    free(omitted);
    free(o.index);
    free(o.order);
    free(frame_order);
    free(rank);
    free(stack_order);
    free(stack_rank);
}

/* ---- the page ----------------------------------------------------------------------- */
static void put_html_escaped(pk_buf *b, ppk_str s) {
    size_t run = 0;
    for (size_t i = 0; i < s.len; i++) {
        const char *esc = s.ptr[i] == '&'   ? "&amp;"
                          : s.ptr[i] == '<' ? "&lt;"
                          : s.ptr[i] == '>' ? "&gt;"
                          : s.ptr[i] == '"' ? "&quot;"
                                            : NULL;
        if (!esc) continue;
        pk_put(b, s.ptr + run, i - run);
        pk_puts(b, esc);
        run = i + 1;
    }
    pk_put(b, s.ptr + run, s.len - run);
}

static const ppk_str marks[2] = {{DATA_MARK, sizeof DATA_MARK - 1},
                                 {TITLE_MARK, sizeof TITLE_MARK - 1}};

/* Where the first marker is in t[from, n): its offset (n if none), and *which. */
static size_t find_mark(const char *t, size_t n, size_t from, int *which) {
    for (size_t i = from; i < n; i++)
        for (int m = 0; m < 2; m++)
            if (t[i] == marks[m].ptr[0] && marks[m].len <= n - i &&
                memcmp(t + i, marks[m].ptr, marks[m].len) == 0) {
                *which = m;
                return i;
            }
    return n;
}

static void write_page(const char *out, const pk_buf *page) {
    size_t n = strlen(out) + 32;
    char *tmp = pk_xrealloc(NULL, n);
    snprintf(tmp, n, "%s.%ld.tmp", out, (long)getpid());
    FILE *fp = fopen(tmp, "wb");
    int err = fp ? 0 : errno;
    if (fp) {
        errno = 0;
        if (fwrite(page->p, 1, page->len, fp) != page->len) err = errno ? errno : EIO;
        if (fclose(fp) != 0 && !err) err = errno ? errno : EIO;
        if (!err && rename(tmp, out) != 0) err = errno;
        if (err) unlink(tmp);
    }
    free(tmp);
    if (err) {
        fprintf(stderr, "pprofkit flame: %s: %s\n", out, strerror(err));
        exit(1);
    }
}

int pk_flame(const char **files, size_t n_files, const char *sample_type, const char *title,
             const char *out) {
    /* Every file read first: an error in any writes nothing. */
    ppk_pprof **p = pk_xrealloc(NULL, n_files * sizeof *p);
    for (size_t i = 0; i < n_files; i++) p[i] = pk_load(files[i]);
    size_t type = pk_type_index(p[0], files[0], sample_type);
    for (size_t i = 1; i < n_files; i++)
        if (!pk_same_types(p[0], p[i])) {
            fprintf(stderr, "pprofkit flame: %s: its sample types differ from %s's\n",
                    files[i], files[0]);
            exit(1);
        }

    flame f;
    memset(&f, 0, sizeof f);
    f.nvalues = p[0]->n_sample_types;
    pk_key_id(&f.strs, "", 0); /* string number 0 */
    size_t n_samples = 0;
    for (size_t i = 0; i < n_files; i++) {
        first_pass(&f, p[i]);
        n_samples += p[i]->n_samples;
    }
    uint8_t *omit = pk_xrealloc(NULL, f.strs.n);
    for (uint32_t i = 0; i < f.strs.n; i++) {
        uint32_t nv = i < f.n_values_cap ? f.n_values[i] : 0;
        omit[i] = nv > MAX_LABEL_VALUES && 2 * (size_t)nv > n_samples;
    }
    second_pass(&f, omit);

    pk_buf data = {0}, page = {0};
    put_data(&data, &f, p[0], type, files, n_files, omit);

    /* The title: the one given, else the files' names. */
    pk_buf t = {0};
    if (title && *title) {
        pk_puts(&t, title);
    } else {
        pk_puts(&t, "pprofkit flame graph: ");
        for (size_t i = 0; i < n_files; i++) {
            if (i) pk_puts(&t, ", ");
            ppk_str name = base_name(files[i]);
            pk_put(&t, name.ptr, name.len);
        }
    }
    ppk_str title_text = decoded((ppk_str){t.p, t.len}, &f.scratch);

    const char *tpl = (const char *)ppk_flame_html;
    size_t at = 0, n = ppk_flame_html_len;
    for (;;) {
        int which = 0;
        size_t m = find_mark(tpl, n, at, &which);
        pk_put(&page, tpl + at, m - at);
        if (m == n) break;
        if (which == 0) pk_put(&page, data.p, data.len);
        else put_html_escaped(&page, title_text);
        at = m + marks[which].len;
    }
    write_page(out, &page);

    free(page.p);
    free(data.p);
    free(t.p);
    free(omit);
    pk_keys_free(&f.strs);
    pk_keys_free(&f.frames);
    pk_keys_free(&f.stacks);
    pk_keys_free(&f.pairs);
    pk_keys_free(&f.labelsets);
    pk_keys_free(&f.groups);
    free(f.n_values);
    free(f.labels);
    free(f.kept);
    free(f.sums);
    free(f.scratch.p);
    free(f.ids);
    for (size_t i = 0; i < n_files; i++) ppk_pprof_free(p[i]);
    free(p);
    return 0;
}
