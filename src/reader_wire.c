/*
 * reader_wire.c - the pprof reader's cold helpers (reader.h): error messages, the id
 * indexes, the sizes of the tables' block.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "reader.h"

int ppk__rd_fail(dec *d, int rc, const msgdesc *m, uint32_t num, size_t at, const char *fmt,
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

static int ent_cmp(const void *a, const void *b) {
    const ent *x = a, *y = b;
    if (x->id != y->id) return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Makes the index searchable; an id twice is an error (at the later of the two). */
int ppk__rd_index_build(dec *d, index *ix, const msgdesc *field_of) {
    ix->dense = 1;
    for (size_t i = 0; i < ix->n && ix->dense; i++) ix->dense = ix->e[i].id == i + 1;
    if (ix->dense) return 0;
    qsort(ix->e, ix->n, sizeof *ix->e, ent_cmp);
    for (size_t i = 1; i < ix->n; i++)
        if (ix->e[i].id == ix->e[i - 1].id)
            return ppk__rd_fail(d, PPK_EFORMAT, field_of, 1, ix->e[i].at,
                        "id %llu appears twice (also at byte %zu)",
                        (unsigned long long)ix->e[i].id, ix->e[i - 1].at);
    return 0;
}

/* Round up to the alignment of any type; SIZE_MAX on overflow. */
size_t ppk__rd_aligned(size_t n) {
    size_t a = _Alignof(max_align_t);
    return n > SIZE_MAX - a ? SIZE_MAX : (n + a - 1) / a * a;
}

/* Adds n elements of `size` bytes to *total (saturating at SIZE_MAX). */
void ppk__rd_add_size(size_t *total, size_t n, size_t size) {
    size_t bytes = size && n > SIZE_MAX / size ? SIZE_MAX : ppk__rd_aligned(n * size);
    *total = *total > SIZE_MAX - bytes ? SIZE_MAX : *total + bytes;
}

void *ppk__rd_carve(uint8_t **at, size_t n, size_t size) {
    void *p = *at;
    *at += ppk__rd_aligned(n * size);
    return p;
}

int ppk__rd_plain(dec *d, int rc, const char *fmt, ...) {
    if (d->err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(d->err, d->err_len, fmt, ap);
        va_end(ap);
    }
    return rc;
}

int ppk__rd_out_of_memory(dec *d, const ppk__mem *m, size_t bytes) {
    if (m->limited || bytes > m->limit - (m->bytes < m->limit ? m->bytes : m->limit))
        return ppk__rd_plain(d, PPK_ETOOBIG, "%zu more bytes would pass max_memory (%zu bytes, %zu "
                     "in use)", bytes, m->limit, m->bytes);
    return ppk__rd_plain(d, PPK_ENOMEM, "out of memory (%zu bytes)", bytes);
}

