/*
 * ppk-demo - profiles a simulated multi-threaded Python process and exports pprof files.
 *
 * The samples come from the reference workload W1 (bench/w1.h): 2000 Python functions,
 * 5000 stacks, eight threads told apart by their "thread id" and "thread name" labels,
 * and a "task name" label that repeats (steady) or is new for every sample (storm: the
 * case that made an unbounded string table grow without end). Every --window samples
 * the profile is encoded, written to OUT/demo.<pid>.<seq>.pb.gz (or .pb.zst) through a
 * temporary name and a rename, and reset; its memory is reused by the next window.
 *
 * Usage: ppk-demo [--steady|--storm] [--samples N] [--window N] [--out DIR]
 *                 [--codec gzip|zstd]
 * Open a result with: go tool pprof -top -tags OUT/demo.<pid>.1.pb.gz
 */
#include <pprofkit.h>

#include "../bench/w1.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(FILE *f) {
    fprintf(f, "usage: ppk-demo [--steady|--storm] [--samples N] [--window N] [--out DIR]\n"
               "                [--codec gzip|zstd]\n"
               "Defaults: --steady --samples 300000 --window 100000 --out ./demo-out "
               "--codec gzip\n");
}

static int parse_count(const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || !end || *end || !*s || s[0] == '-' || v == 0) return -1;
    *out = v;
    return 0;
}

static int write_atomic(const char *dir, const char *name, const ppk_bytes *b) {
    char tmp[4096], path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s/.%s.tmp", dir, name);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        fprintf(stderr, "ppk-demo: %s: %s\n", tmp, strerror(errno));
        return -1;
    }
    int ok = fwrite(b->data, 1, b->len, f) == b->len;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "ppk-demo: writing %s: %s\n", path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    enum w1_variant variant = W1_STEADY;
    uint64_t n_samples = 300000, window = 100000;
    const char *outdir = "./demo-out";
    ppk_codec codec = PPK_CODEC_GZIP;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--steady")) {
            variant = W1_STEADY;
        } else if (!strcmp(a, "--storm")) {
            variant = W1_STORM;
        } else if (!strcmp(a, "--samples") && v) {
            if (parse_count(v, &n_samples)) goto bad;
            i++;
        } else if (!strcmp(a, "--window") && v) {
            if (parse_count(v, &window)) goto bad;
            i++;
        } else if (!strcmp(a, "--out") && v) {
            outdir = v;
            i++;
        } else if (!strcmp(a, "--codec") && v) {
            if (!strcmp(v, "gzip")) codec = PPK_CODEC_GZIP;
            else if (!strcmp(v, "zstd")) codec = PPK_CODEC_ZSTD;
            else goto bad;
            i++;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            goto bad;
        }
        continue;
    bad:
        fprintf(stderr, "ppk-demo: bad argument: %s%s%s\n", a, v ? " " : "", v ? v : "");
        usage(stderr);
        return 2;
    }

    if (mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "ppk-demo: mkdir %s: %s\n", outdir, strerror(errno));
        return 1;
    }

    struct w1 w;
    if (w1_init(&w) != 0) {
        fprintf(stderr, "ppk-demo: out of memory building W1\n");
        return 1;
    }
    ppk_profile_config cfg;
    w1_config(&cfg);
    ppk_profile *p = NULL;
    int rc = ppk_profile_create(&cfg, &p);
    if (rc != 0) {
        fprintf(stderr, "ppk-demo: ppk_profile_create: %s\n", ppk_strerror(rc));
        w1_free(&w);
        return 1;
    }

    const char *ext = codec == PPK_CODEC_ZSTD ? "pb.zst" : "pb.gz";
    printf("ppk-demo: W1 %s, %" PRIu64 " samples on 8 threads, export every %" PRIu64
           " samples (%s) to %s\n",
           variant == W1_STORM ? "storm" : "steady", n_samples, window,
           codec == PPK_CODEC_ZSTD ? "zstd" : "gzip", outdir);
    printf("%6s %9s %9s %12s %12s %9s  %s\n", "window", "samples", "strings", "memory",
           "encoded", "encode", "file");

    double t_start = now_s(), add_s = 0, encode_s = 0;
    uint64_t exported_bytes = 0, exported_samples = 0, seq = 0, peak = 0;
    int64_t window_start = ppk_now_ns();
    struct w1_sample s;
    uint64_t k = 0;
    int status = 0;
    ppk_profile_reset(p, window_start);
    while (k < n_samples) {
        uint64_t n = n_samples - k < window ? n_samples - k : window;
        double t0 = now_s();
        for (uint64_t i = 0; i < n; i++, k++) {
            rc = ppk_profile_add(p, w1_next(&w, variant, &s));
            if (rc != 0) {
                fprintf(stderr, "ppk-demo: ppk_profile_add (sample %" PRIu64 "): %s\n", k,
                        ppk_strerror(rc));
                status = 1;
                goto out;
            }
        }
        add_s += now_s() - t0;

        ppk_profile_stats st;
        ppk_profile_stats_get(p, &st);
        ppk_encode_options opt = {codec, 0, window_start, 0};
        ppk_bytes out = {0};
        double t1 = now_s();
        rc = ppk_profile_encode(p, &opt, &out);
        double enc = now_s() - t1;
        if (rc != 0) {
            fprintf(stderr, "ppk-demo: ppk_profile_encode: %s\n", ppk_strerror(rc));
            status = 1;
            goto out;
        }
        encode_s += enc;
        seq++;
        char name[256];
        snprintf(name, sizeof name, "demo.%ld.%" PRIu64 ".%s", (long)getpid(), seq, ext);
        if (write_atomic(outdir, name, &out) != 0) {
            ppk_bytes_free(&out);
            status = 1;
            goto out;
        }
        printf("%6" PRIu64 " %9" PRIu64 " %9" PRIu64 " %12" PRIu64 " %12zu %7.1fms  %s/%s\n",
               seq, st.samples_added, st.strings, st.memory_bytes, out.len, enc * 1e3,
               outdir, name);
        fflush(stdout);
        exported_bytes += out.len;
        exported_samples += st.samples_added;
        if (st.memory_peak_bytes > peak) peak = st.memory_peak_bytes;
        ppk_bytes_free(&out);
        window_start = ppk_now_ns();
        ppk_profile_reset(p, window_start);
    }

    double total = now_s() - t_start;
    printf("summary: %" PRIu64 " samples in %" PRIu64 " exports, %.3f s; add %.0f ns/sample; "
           "encode %.1f ms/export; %" PRIu64 " bytes written; peak profile memory %" PRIu64
           " bytes\n",
           k, seq, total, k ? add_s * 1e9 / (double)k : 0.0,
           seq ? encode_s * 1e3 / (double)seq : 0.0, exported_bytes, peak);
    if (exported_samples != k) {
        fprintf(stderr, "ppk-demo: the exports hold %" PRIu64 " samples, %" PRIu64 " were added\n",
                exported_samples, k);
        status = 1;
    }
    printf("open one with: go tool pprof -top -tags %s/demo.%ld.1.%s\n", outdir,
           (long)getpid(), ext);
out:
    ppk_profile_free(p);
    w1_free(&w);
    return status;
}
