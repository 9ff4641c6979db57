/*
 * reader_check.h - what the reader's tests share: a ppk_pprof described in the canonical
 * text of pprof_read.h's pr_describe() (so that the library's reader and that independent
 * decoder can be compared on the same bytes), and rc_check_invariants(), the promises of
 * a ppk_pprof that ppk_pprof_read returned (every pointer into its own tables, string 0
 * empty). Header only, for tests.
 */
#ifndef PPK_TESTS_READER_CHECK_H
#define PPK_TESTS_READER_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pprofkit.h"

/* ---- pr_describe's canonical text, from a ppk_pprof -------------------------------- */
typedef struct sbuf_ {
    char *p;
    size_t len, cap;
} sbuf_;

static inline void sput(sbuf_ *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static inline void sputs(sbuf_ *b, ppk_str s) { sput(b, s.ptr, s.len); }
static inline void sputf(sbuf_ *b, const char *fmt, long long v) {
    char t[40];
    int n = snprintf(t, sizeof t, fmt, v);
    sput(b, t, (size_t)n);
}

static inline int cmp_cstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}
static inline int cmp_label(const void *a, const void *b) {
    ppk_str x = (*(const ppk_pprof_label *const *)a)->key;
    ppk_str y = (*(const ppk_pprof_label *const *)b)->key;
    size_t n = x.len < y.len ? x.len : y.len;
    int c = n ? memcmp(x.ptr, y.ptr, n) : 0;
    return c ? c : (x.len > y.len) - (x.len < y.len);
}

/* One line per sample, sorted: "frames | labels | values", as pr_describe() writes it.
 * The caller frees. */
static inline char *describe(const ppk_pprof *p) {
    char **lines = calloc(p->n_samples + 1, sizeof *lines);
    if (!lines) abort();
    for (size_t i = 0; i < p->n_samples; i++) {
        const ppk_pprof_sample *s = &p->samples[i];
        sbuf_ b = {0};
        sput(&b, "", 0);
        for (size_t j = 0; j < s->n_locations; j++) {
            const ppk_pprof_location *l = s->locations[j];
            sputf(&b, "[0x%llx", (long long)l->address);
            for (size_t k = 0; k < l->n_lines; k++) {
                const ppk_pprof_function *fn = l->lines[k].function;
                sput(&b, " ", 1);
                if (!fn) { /* function_id 0 */
                    sputf(&b, "-:%lld", (long long)l->lines[k].line);
                    continue;
                }
                sputs(&b, fn->name);
                sput(&b, "/", 1);
                sputs(&b, fn->system_name);
                sput(&b, "@", 1);
                sputs(&b, fn->filename);
                sputf(&b, ":%lld", (long long)l->lines[k].line);
                sputf(&b, "(%lld)", (long long)fn->start_line);
            }
            if (l->mapping) {
                sput(&b, " map=", 5);
                sputs(&b, l->mapping->filename);
                sput(&b, ",", 1);
                sputs(&b, l->mapping->build_id);
                sputf(&b, ",%llx", (long long)l->mapping->memory_start);
            }
            sput(&b, "] ", 2);
        }
        sput(&b, "|", 1);
        const ppk_pprof_label **labs = calloc(s->n_labels + 1, sizeof *labs);
        if (!labs) abort();
        for (size_t j = 0; j < s->n_labels; j++) labs[j] = &s->labels[j];
        qsort(labs, s->n_labels, sizeof *labs, cmp_label);
        for (size_t j = 0; j < s->n_labels; j++) {
            sput(&b, " ", 1);
            sputs(&b, labs[j]->key);
            if (labs[j]->str.ptr != p->strings[0].ptr) { /* a string index other than 0 */
                sput(&b, "=\"", 2);
                sputs(&b, labs[j]->str);
                sput(&b, "\"", 1);
            } else {
                sputf(&b, "=%lld", (long long)labs[j]->num);
                sputs(&b, labs[j]->num_unit);
            }
        }
        free(labs);
        sput(&b, " |", 2);
        for (size_t j = 0; j < p->n_sample_types; j++) sputf(&b, " %lld", (long long)s->values[j]);
        lines[i] = b.p;
    }
    qsort(lines, p->n_samples, sizeof *lines, cmp_cstr);
    sbuf_ out = {0};
    sput(&out, "", 0);
    for (size_t i = 0; i < p->n_samples; i++) {
        sput(&out, lines[i], strlen(lines[i]));
        sput(&out, "\n", 1);
        free(lines[i]);
    }
    free(lines);
    return out.p;
}

/* A string of p: its bytes are readable (AddressSanitizer checks the read). */
static inline unsigned rc_touch_(ppk_str s) {
    unsigned x = 0;
    for (size_t i = 0; i < s.len; i++) x += (unsigned char)s.ptr[i];
    return x;
}

/* Returns NULL, or what is wrong. */
static inline const char *rc_check_invariants(const ppk_pprof *p) {
    volatile unsigned sink = 0;
    if (p->n_strings == 0 || p->strings[0].len != 0) return "string_table[0] is not empty";
    for (size_t i = 0; i < p->n_strings; i++) sink += rc_touch_(p->strings[i]);
    for (size_t i = 0; i < p->n_comments; i++) sink += rc_touch_(p->comments[i]);
    for (size_t i = 0; i < p->n_sample_types; i++)
        sink += rc_touch_(p->sample_types[i].type) + rc_touch_(p->sample_types[i].unit);
    for (size_t i = 0; i < p->n_functions; i++) {
        const ppk_pprof_function *f = &p->functions[i];
        if (f->id == 0) return "a function with id 0";
        sink += rc_touch_(f->name) + rc_touch_(f->system_name) + rc_touch_(f->filename);
    }
    for (size_t i = 0; i < p->n_mappings; i++) {
        if (p->mappings[i].id == 0) return "a mapping with id 0";
        sink += rc_touch_(p->mappings[i].filename) + rc_touch_(p->mappings[i].build_id);
    }
    for (size_t i = 0; i < p->n_locations; i++) {
        const ppk_pprof_location *l = &p->locations[i];
        if (l->id == 0) return "a location with id 0";
        if (l->mapping && (l->mapping < p->mappings || l->mapping >= p->mappings + p->n_mappings))
            return "a location's mapping is not in the table";
        for (size_t k = 0; k < l->n_lines; k++) {
            const ppk_pprof_function *f = l->lines[k].function;
            if (f && (f < p->functions || f >= p->functions + p->n_functions))
                return "a line's function is not in the table";
        }
    }
    for (size_t i = 0; i < p->n_samples; i++) {
        const ppk_pprof_sample *s = &p->samples[i];
        for (size_t k = 0; k < s->n_locations; k++)
            if (s->locations[k] < p->locations ||
                s->locations[k] >= p->locations + p->n_locations)
                return "a sample's location is not in the table";
        for (size_t k = 0; k < p->n_sample_types; k++) sink += (unsigned)s->values[k];
        for (size_t k = 0; k < s->n_labels; k++)
            sink += rc_touch_(s->labels[k].key) + rc_touch_(s->labels[k].str) +
                    rc_touch_(s->labels[k].num_unit);
    }
    (void)sink;
    return NULL;
}

#endif
