/*
 * bench_encode - how long it takes to encode one 100,000-sample W1 window, without and
 * with compression, and what adding the samples cost.
 *
 * For each W1 variant (steady, storm) the first 100,000 samples are added to a fresh
 * window (ppk_profile_add; repeated, window reset in between), then the same window is
 * encoded REPS times with each codec. Figures are medians over the repetitions, measured
 * with CLOCK_MONOTONIC:
 *   add ns/sample  time of a loop that builds and adds each sample, minus the time of the
 *                  same loop that only builds them (the workload's own snprintf);
 *   encode ms      one ppk_profile_encode() of the whole window, per codec and level;
 *   bytes          the encoded size.
 * Nothing is asserted: this prints figures. Usage: bench_encode [REPS] (default 7).
 */
#include <pprofkit.h>

#include "w1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 100000u
#define MAX_REPS 64

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void fail(const char *what, int rc) {
    fprintf(stderr, "bench_encode: %s: %s (%d)\n", what, ppk_strerror(rc), rc);
    exit(1);
}

/* Time of building WINDOW samples without adding them: the workload's own cost. */
static double gen_ms(struct w1 *w, enum w1_variant variant) {
    struct w1_sample s;
    volatile size_t sink = 0;
    w1_rewind(w);
    double t0 = now_ms();
    for (uint32_t i = 0; i < WINDOW; i++) sink += w1_next(w, variant, &s)->n_frames;
    (void)sink;
    return now_ms() - t0;
}

static double add_ms(ppk_profile *p, struct w1 *w, enum w1_variant variant) {
    struct w1_sample s;
    ppk_profile_reset(p, 0);
    w1_rewind(w);
    double t0 = now_ms();
    for (uint32_t i = 0; i < WINDOW; i++) {
        int rc = ppk_profile_add(p, w1_next(w, variant, &s));
        if (rc) fail("ppk_profile_add", rc);
    }
    return now_ms() - t0;
}

struct codec_case {
    const char *name;
    ppk_codec codec;
    int level;
};

static const struct codec_case cases[] = {
    {"none", PPK_CODEC_NONE, 0},
    {"gzip-1 (default)", PPK_CODEC_GZIP, 0},
    {"gzip-6", PPK_CODEC_GZIP, 6},
    {"zstd-1 (default)", PPK_CODEC_ZSTD, 0},
    {"zstd-3", PPK_CODEC_ZSTD, 3},
};

static void run(struct w1 *w, enum w1_variant variant, int reps) {
    const char *vname = variant == W1_STORM ? "storm" : "steady";
    ppk_profile_config cfg;
    w1_config(&cfg);
    ppk_profile *p = NULL;
    int rc = ppk_profile_create(&cfg, &p);
    if (rc) fail("ppk_profile_create", rc);

    double gen[MAX_REPS], add[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        gen[r] = gen_ms(w, variant);
        add[r] = add_ms(p, w, variant); /* the last one leaves the window filled */
    }
    double g = median(gen, reps), a = median(add, reps);
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    printf("\nW1 %s, one window of %u samples: %llu distinct samples, %llu strings "
           "(%llu bytes), %llu locations, %llu stacks, memory %.1f MiB (peak %.1f MiB)\n",
           vname, WINDOW, (unsigned long long)st.samples_aggregated,
           (unsigned long long)st.strings, (unsigned long long)st.string_bytes,
           (unsigned long long)st.locations, (unsigned long long)st.stacks,
           (double)st.memory_bytes / 1048576.0, (double)st.memory_peak_bytes / 1048576.0);
    printf("  add: %.0f ns/sample (loop %.1f ms, of which building the samples %.1f ms)\n",
           (a - g) * 1e6 / WINDOW, a, g);
    printf("  %-18s %10s %10s %10s %12s\n", "codec", "median ms", "min ms", "max ms",
           "bytes");

    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double t[MAX_REPS];
        size_t bytes = 0;
        for (int r = 0; r < reps; r++) {
            ppk_encode_options opt = {cases[c].codec, cases[c].level, 0, 0};
            ppk_bytes out = {0};
            double t0 = now_ms();
            rc = ppk_profile_encode(p, &opt, &out);
            t[r] = now_ms() - t0;
            if (rc) fail("ppk_profile_encode", rc);
            bytes = out.len;
            ppk_bytes_free(&out);
        }
        double med = median(t, reps);
        printf("  %-18s %10.1f %10.1f %10.1f %12zu\n", cases[c].name, med, t[0],
               t[reps - 1], bytes);
    }

    double rs[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        add_ms(p, w, variant);
        double t0 = now_ms();
        ppk_profile_reset(p, 0);
        rs[r] = now_ms() - t0;
    }
    printf("  reset: %.2f ms\n", median(rs, reps));
    ppk_profile_free(p);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 7;
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_encode [REPS 1..%d]\n", MAX_REPS);
        return 2;
    }
    struct w1 w;
    if (w1_init(&w) != 0) {
        fprintf(stderr, "bench_encode: out of memory\n");
        return 1;
    }
    printf("bench_encode: W1 windows of %u samples, medians of %d repetitions\n", WINDOW,
           reps);
    run(&w, W1_STEADY, reps);
    run(&w, W1_STORM, reps);
    w1_free(&w);
    return 0;
}
