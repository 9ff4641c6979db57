/*
 * bench.h - what the benchmarks of bench/ share, header only: a monotonic clock, medians
 * and percentiles of a set of timings, one W1 sample recorded through the builder API
 * exactly as a profiler does it (start, one push per frame, three labels, values, flush),
 * and the time of producing W1 samples alone (subtracted from the time of adding them).
 *
 * Timings are CLOCK_MONOTONIC. median() and percentile() sort their array in place.
 * Nothing here is thread safe beyond what the library calls are.
 */
#ifndef PPK_BENCH_H
#define PPK_BENCH_H

#include <pprofkit.h>

#include "w1.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline double bench_now_ms(void) { return bench_now_ns() * 1e-6; }

static int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static inline void bench_sort(double *v, size_t n) {
    qsort(v, n, sizeof *v, bench_cmp_double);
}

/* The median of n values (0 when n is 0); sorts v. */
static inline double bench_median(double *v, size_t n) {
    if (n == 0) return 0;
    bench_sort(v, n);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The nearest-rank q-th percentile (0 < q <= 100) of n values already sorted. */
static inline double bench_percentile_sorted(const double *v, size_t n, double q) {
    if (n == 0) return 0;
    size_t rank = (size_t)((q / 100.0) * (double)n + 0.999999);
    if (rank < 1) rank = 1;
    if (rank > n) rank = n;
    return v[rank - 1];
}

/* The codec of a --codec option ("gzip", "none"; anything else zstd) and its label as
 * the results show it ("gzip-1", "none", "zstd-1": the default levels). */
static inline ppk_codec bench_codec(const char *arg, const char **label) {
    ppk_codec c = !strcmp(arg, "gzip") ? PPK_CODEC_GZIP
                  : !strcmp(arg, "none") ? PPK_CODEC_NONE
                                         : PPK_CODEC_ZSTD;
    *label = c == PPK_CODEC_GZIP ? "gzip-1" : c == PPK_CODEC_NONE ? "none" : "zstd-1";
    return c;
}

/* Builds one sample (as made by w1_next) in the builder, all but the flush: start, one
 * push per frame, three labels, values. @return 0 or the first error. */
static inline int bench_build(ppk_sample *s, const ppk_sample_data *d) {
    int rc = ppk_sample_start(s);
    for (size_t i = 0; !rc && i < d->n_frames; i++)
        rc = ppk_sample_push_frame(s, d->frames[i].name, d->frames[i].filename,
                                   d->frames[i].line, 0);
    const ppk_label *l = d->labels;
    if (!rc) rc = ppk_sample_push_label_num(s, l[0].key, l[0].num, l[0].num_unit);
    if (!rc) rc = ppk_sample_push_label_str(s, l[1].key, l[1].str);
    if (!rc) rc = ppk_sample_push_label_str(s, l[2].key, l[2].str);
    if (!rc) rc = ppk_sample_set_values(s, d->values, d->n_values);
    return rc;
}

/* Records one sample through the builder, flush included: what bench_w1 does per
 * sample. @return 0 or the first error. */
static inline int bench_record(ppk_sample *s, const ppk_sample_data *d) {
    int rc = bench_build(s, d);
    return rc ? rc : ppk_sample_flush(s);
}

/* ns of producing the first n samples of a variant without adding them: the workload's
 * own cost (one snprintf per sample). Rewinds w before and leaves it after sample n. */
static inline double bench_w1_gen_ns(struct w1 *w, enum w1_variant v, uint32_t n) {
    struct w1_sample s;
    volatile size_t sink = 0;
    w1_rewind(w);
    double t0 = bench_now_ns();
    for (uint32_t i = 0; i < n; i++) sink += w1_next(w, v, &s)->n_frames;
    (void)sink;
    return bench_now_ns() - t0;
}

#endif
