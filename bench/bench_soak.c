/*
 * bench_soak - memory over a long run: RSS after windows 10, 100 and 1,000 of a
 * taskstorm-like load (W1 stacks, a new task name on every sample), and the peak window
 * bytes against the limit.
 *
 * One producer thread builds samples through the builder API exactly as taskstorm does;
 * every --window samples the window is exported (swap, encode with zstd-1, reset) and
 * the bytes thrown away. RSS is read from /proc/self/status after each export. With a
 * memory limit below what a window would need, every window degrades (counted), so the
 * run shows both that memory stays flat and that the limit holds.
 * With --burst W, window W gets ten times the samples: RSS right after it and ten
 * windows later show memory that grew for the burst going back.
 * Nothing is asserted. Usage: bench_soak [--windows N] [--window SAMPLES]
 *                                        [--memory-limit BYTES] [--burst W]
 */
#include <pprofkit.h>

#include "bench.h"
#include "w1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    long windows = 1000, window = 10000, burst = 0;
    size_t limit = 4u << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--windows") && i + 1 < argc)
            windows = atol(argv[++i]);
        else if (!strcmp(argv[i], "--window") && i + 1 < argc)
            window = atol(argv[++i]);
        else if (!strcmp(argv[i], "--burst") && i + 1 < argc)
            burst = atol(argv[++i]);
        else if (!strcmp(argv[i], "--memory-limit") && i + 1 < argc)
            limit = (size_t)strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: bench_soak [--windows N] [--window SAMPLES] "
                            "[--memory-limit BYTES] [--burst W]\n");
            return 2;
        }
    }
    struct w1 w;
    struct w1_sample ws;
    if (w1_init(&w)) return 1;
    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    w1_config(&cfg.profile);
    cfg.profile.memory_limit = limit;
    cfg.codec = PPK_CODEC_ZSTD;
    ppk_recorder *r = NULL;
    ppk_sample *s = NULL;
    int rc = ppk_recorder_create(&cfg, &r);
    if (!rc) rc = ppk_sample_create(r, &s);
    if (rc) {
        fprintf(stderr, "setup: %s\n", ppk_strerror(rc));
        return 1;
    }
    long rss_start = rss_kb(), rss10 = -1, rss100 = -1, rss_last = -1, rss_max = 0;
    long rss_before_burst = -1, rss_burst = -1, rss_after_burst = -1;
    uint64_t peak = 0, bytes_last = 0;
    double t0 = now_s();
    printf("window  rss_kb  window_bytes  strings_dropped  samples_overflowed\n");
    for (long win = 1; win <= windows; win++) {
        long n = win == burst ? 10 * window : window;
        for (long k = 0; k < n; k++) {
            if (w.k >= W1_SAMPLES) w1_rewind(&w); /* task names repeat only after 1M */
            const ppk_sample_data *d = w1_next(&w, W1_STORM, &ws);
            rc = bench_record(s, d);
            if (rc) {
                fprintf(stderr, "sample: %s\n", ppk_strerror(rc));
                return 1;
            }
        }
        ppk_export e;
        rc = ppk_recorder_export(r, &e);
        if (rc) {
            fprintf(stderr, "export: %s\n", ppk_strerror(rc));
            return 1;
        }
        if (e.stats.memory_peak_bytes > peak) peak = e.stats.memory_peak_bytes;
        bytes_last = e.data.len;
        long rss = rss_kb();
        if (rss > rss_max) rss_max = rss;
        if (win == 10) rss10 = rss;
        if (win == 100) rss100 = rss;
        if (win == burst - 1) rss_before_burst = rss;
        if (win == burst) rss_burst = rss;
        if (win == burst + 10) rss_after_burst = rss;
        rss_last = rss;
        if (win == 1 || win == 10 || win == 100 || win % 100 == 0 || win == windows ||
            (burst && win >= burst - 1 && win <= burst + 10))
            printf("%6ld  %6ld  %12llu  %15llu  %18llu\n", win, rss,
                   (unsigned long long)e.stats.memory_bytes,
                   (unsigned long long)e.stats.strings_dropped,
                   (unsigned long long)e.stats.samples_overflowed);
        ppk_export_free(&e);
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    printf("{\"windows\": %ld, \"window_samples\": %ld, \"memory_limit\": %zu, "
           "\"window_bytes_peak\": %llu, \"rss_kb_start\": %ld, \"rss_kb_10\": %ld, "
           "\"rss_kb_100\": %ld, \"rss_kb_last\": %ld, \"rss_kb_max\": %ld, "
           "\"last_window_bytes\": %llu, \"samples_exported\": %llu, \"strings_dropped\": %llu, "
           "\"samples_overflowed\": %llu, \"rss_kb_before_burst\": %ld, \"rss_kb_burst\": %ld, "
           "\"rss_kb_after_burst\": %ld, \"seconds\": %.1f}\n",
           windows, window, limit, (unsigned long long)peak, rss_start, rss10, rss100,
           rss_last, rss_max, (unsigned long long)bytes_last,
           (unsigned long long)st.samples_exported, (unsigned long long)st.strings_dropped,
           (unsigned long long)st.samples_overflowed, rss_before_burst, rss_burst,
           rss_after_burst, now_s() - t0);
    ppk_sample_free(s);
    ppk_recorder_free(r);
    w1_free(&w);
    return 0;
}
