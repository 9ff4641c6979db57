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
 *   encode ms      one ppk_profile_encode() of the whole window, per codec and level
 *                  (the row "none" is the protobuf encoding alone), and the same per
 *                  sample of the window in ns;
 *   compress ms    compression alone: the "none" bytes through one compression stream
 *                  (src/compress.h, what ppk_profile_encode writes through), per codec;
 *   bytes          the encoded (compressed) size.
 * Nothing is asserted: this prints figures. Usage: bench_encode [REPS] (default 7).
 */
#include <pprofkit.h>

#include "alloc.h"
#include "compress.h"

#include "bench.h"
#include "w1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW 100000u
#define MAX_REPS 64

static void fail(const char *what, int rc) {
    fprintf(stderr, "bench_encode: %s: %s (%d)\n", what, ppk_strerror(rc), rc);
    exit(1);
}

static double add_ms(ppk_profile *p, struct w1 *w, enum w1_variant variant) {
    struct w1_sample s;
    ppk_profile_reset(p, 0);
    w1_rewind(w);
    double t0 = bench_now_ms();
    for (uint32_t i = 0; i < WINDOW; i++) {
        int rc = ppk_profile_add(p, w1_next(w, variant, &s));
        if (rc) fail("ppk_profile_add", rc);
    }
    return bench_now_ms() - t0;
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

/* One row of a codec table: median, min, max of reps timings (ms), per sample, bytes. */
static void print_row(const char *name, double *t, int reps, size_t bytes) {
    double med = bench_median(t, (size_t)reps);
    printf("  %-18s %10.1f %10.1f %10.1f %10.0f %12zu\n", name, med, t[0], t[reps - 1],
           med * 1e6 / WINDOW, bytes);
}

/* Compression alone: the window encoded once without a codec, then that buffer
 * compressed REPS times per codec, as ppk_profile_encode does after encoding. */
/* `in` compressed into *out in one stream. 0 or an error code. */
static int compress(ppk__mem *mem, ppk_codec codec, int level, const ppk_bytes *in,
                    ppk_bytes *out) {
    ppk__cstream cs;
    ppk__cstream_init(&cs, mem);
    int rc = ppk__cstream_begin(&cs, codec, level);
    if (!rc) rc = ppk__cstream_write(&cs, in->data, in->len);
    if (!rc) rc = ppk__cstream_end(&cs, &mem->a, out);
    ppk__cstream_destroy(&cs);
    return rc;
}

static void compress_only(ppk_profile *p, int reps) {
    ppk_encode_options none = {PPK_CODEC_NONE, 0, 0, 0};
    ppk_bytes raw = {0};
    int rc = ppk_profile_encode(p, &none, &raw);
    if (rc) fail("ppk_profile_encode", rc);
    ppk__mem mem;
    ppk__mem_init(&mem, NULL);
    printf("  %-18s %10s %10s %10s %10s %12s\n", "compress only", "median ms", "min ms",
           "max ms", "ns/sample", "bytes");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        if (cases[c].codec == PPK_CODEC_NONE) continue;
        double t[MAX_REPS];
        size_t bytes = 0;
        for (int r = 0; r < reps; r++) {
            ppk_bytes out = {0};
            double t0 = bench_now_ms();
            rc = compress(&mem, cases[c].codec, cases[c].level, &raw, &out);
            t[r] = bench_now_ms() - t0;
            if (rc) fail("compress", rc);
            bytes = out.len;
            ppk_bytes_free(&out);
        }
        print_row(cases[c].name, t, reps, bytes);
    }
    ppk_bytes_free(&raw);
}

static void run(struct w1 *w, enum w1_variant variant, int reps) {
    const char *vname = variant == W1_STORM ? "storm" : "steady";
    ppk_profile_config cfg;
    w1_config(&cfg);
    ppk_profile *p = NULL;
    int rc = ppk_profile_create(&cfg, &p);
    if (rc) fail("ppk_profile_create", rc);

    double gen[MAX_REPS], add[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        gen[r] = bench_w1_gen_ns(w, variant, WINDOW) * 1e-6;
        add[r] = add_ms(p, w, variant); /* the last one leaves the window filled */
    }
    double g = bench_median(gen, (size_t)reps), a = bench_median(add, (size_t)reps);
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
    printf("  %-18s %10s %10s %10s %10s %12s\n", "encode", "median ms", "min ms", "max ms",
           "ns/sample", "bytes");

    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double t[MAX_REPS];
        size_t bytes = 0;
        for (int r = 0; r < reps; r++) {
            ppk_encode_options opt = {cases[c].codec, cases[c].level, 0, 0};
            ppk_bytes out = {0};
            double t0 = bench_now_ms();
            rc = ppk_profile_encode(p, &opt, &out);
            t[r] = bench_now_ms() - t0;
            if (rc) fail("ppk_profile_encode", rc);
            bytes = out.len;
            ppk_bytes_free(&out);
        }
        print_row(cases[c].name, t, reps, bytes);
    }
    compress_only(p, reps);

    double rs[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        add_ms(p, w, variant);
        double t0 = bench_now_ms();
        ppk_profile_reset(p, 0);
        rs[r] = bench_now_ms() - t0;
    }
    printf("  reset: %.2f ms\n", bench_median(rs, (size_t)reps));
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
