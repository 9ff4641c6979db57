/*
 * bench_latency - how long ppk_sample_flush() takes, and a whole sample, while nothing
 * else happens and while another thread exports.
 *
 * One producer (the main thread) records W1 samples through the builder API as bench_w1
 * does, timing each with CLOCK_MONOTONIC: `flush` is the ppk_sample_flush() call alone,
 * `sample` is ppk_sample_start() .. the end of the flush (36 frame pushes on average,
 * three labels, values, flush). Three situations, ROUNDS rounds each (default 5); every
 * round first tops the active window up to 100,000 samples (untimed), then:
 *   idle     exports it on the producer's thread (untimed), so the window is empty
 *            again, then times 20,000 samples with no export running;
 *   encode   starts a thread that calls ppk_recorder_export(r, &e): swap, encode, zstd-1,
 *            reset of the 100,000-sample window; times every sample while it runs;
 *   slowsink starts a thread that calls ppk_recorder_export(r, NULL), as the background
 *            exporter does: the same, then the sink's write(), which sleeps 200 ms;
 *            times every sample while it runs.
 *   forks    exports to the sinks (untimed), which also hands the window to a Datadog
 *            upload sink whose server (a listening socket in this process that never
 *            accepts) never answers, so its transfer hangs; then a thread forks 24
 *            times, 3 ms apart (each child exits at once), handing the upload sink a new
 *            export every third fork (a transfer aborted by four forks in a row is
 *            dropped); times every sample while it runs. Its "export ms" column is the
 *            median time of one fork() call. With --no-upload there is no upload sink:
 *            the same forks without a transfer to abort.
 * In each situation the timed samples go into a window that an export has just emptied,
 * so the three differ only in what the other thread does. Percentiles are nearest-rank
 * over every timed sample of the situation; `timer` is the median cost of one
 * clock_gettime pair, included in every figure; ">1ms" counts the flushes that took
 * longer than 1 ms (on a busy 2-vCPU VM, mostly the producer being descheduled).
 * Prints a table and one JSON line. Nothing is asserted.
 * Usage: bench_latency [--storm] [--rounds N] [--sink-ms MS] [--no-upload]
 */
#include <pprofkit.h>

#include "bench.h"
#include "w1.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IDLE_SAMPLES 20000u
#define FORKS_PER_ROUND 24

enum situation { IDLE, ENCODE, SLOWSINK, FORKS, N_SITUATIONS };
static const char *const situation_name[N_SITUATIONS] = {"idle", "encode", "slowsink",
                                                         "forks"};

typedef struct series {
    double *v;
    size_t n, cap;
} series;

static struct {
    ppk_recorder *rec;
    ppk_sample *s;
    struct w1 w;
    struct w1_sample ws;
    enum w1_variant variant;
    uint64_t in_window; /* samples flushed into the active window */
    long sink_ms;
    atomic_int exporting;
    int export_rc;
    ppk_sink upload; /* to a server that never answers (write NULL: --no-upload) */
    series flush[N_SITUATIONS], sample[N_SITUATIONS], export_ms[N_SITUATIONS];
} g;

static void fail(const char *what, int rc) {
    fprintf(stderr, "bench_latency: %s: %s (%d)\n", what, ppk_strerror(rc), rc);
    exit(1);
}

static void push(series *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 65536;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
        if (!s->v) fail("realloc", PPK_ENOMEM);
    }
    s->v[s->n++] = x;
}

/* The next W1 sample, recorded; timed into situation `sit` unless sit < 0. */
static void record_one(int sit) {
    if (g.w.k >= W1_SAMPLES) w1_rewind(&g.w);
    const ppk_sample_data *d = w1_next(&g.w, g.variant, &g.ws);
    double t0 = bench_now_ns();
    int rc = bench_build(g.s, d);
    double t1 = bench_now_ns();
    if (!rc) rc = ppk_sample_flush(g.s);
    double t2 = bench_now_ns();
    if (rc) fail("sample", rc);
    g.in_window++;
    if (sit >= 0) {
        push(&g.flush[sit], t2 - t1);
        push(&g.sample[sit], t2 - t0);
    }
}

static int slow_write(void *opaque, const ppk_export *e) {
    (void)opaque;
    (void)e;
    struct timespec ts = {g.sink_ms / 1000, (g.sink_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
}

static void *exporter(void *arg) {
    int to_sinks = *(int *)arg;
    ppk_export e;
    g.export_rc = ppk_recorder_export(g.rec, to_sinks ? NULL : &e);
    if (!g.export_rc && !to_sinks) ppk_export_free(&e);
    atomic_store(&g.exporting, 0);
    return NULL;
}

/* Forks FORKS_PER_ROUND times while the upload sink has a transfer in flight. */
static void *forker(void *arg) {
    (void)arg;
    static uint8_t bytes[64];
    for (int i = 0; i < FORKS_PER_ROUND; i++) {
        if (i % 3 == 0 && g.upload.write) {
            ppk_export e = {.data = {bytes, sizeof bytes}, .codec = PPK_CODEC_ZSTD, .seq = 1};
            g.upload.write(g.upload.opaque, &e);
        }
        struct timespec gap = {0, 3000000};
        nanosleep(&gap, NULL); /* the transfer connects and sends */
        double t0 = bench_now_ns();
        pid_t child = fork();
        if (child == 0) _exit(0);
        push(&g.export_ms[FORKS], (bench_now_ns() - t0) * 1e-6);
        if (child > 0) waitpid(child, NULL, 0);
    }
    atomic_store(&g.exporting, 0);
    return NULL;
}

static void round_of(enum situation sit) {
    while (g.in_window < W1_WINDOW) record_one(-1);
    if (sit == FORKS) {
        int rc = ppk_recorder_export(g.rec, NULL);
        if (rc) fail("ppk_recorder_export", rc);
        g.in_window = 0;
        pthread_t t;
        atomic_store(&g.exporting, 1);
        if (pthread_create(&t, NULL, forker, NULL)) fail("pthread_create", PPK_ESYS);
        while (atomic_load(&g.exporting)) record_one((int)sit);
        pthread_join(t, NULL);
        return;
    }
    if (sit == IDLE) {
        ppk_export e;
        double t0 = bench_now_ns();
        int rc = ppk_recorder_export(g.rec, &e);
        if (rc) fail("ppk_recorder_export", rc);
        push(&g.export_ms[sit], (bench_now_ns() - t0) * 1e-6);
        ppk_export_free(&e);
        g.in_window = 0;
        for (uint32_t i = 0; i < IDLE_SAMPLES; i++) record_one(sit);
        return;
    }
    static int to_sinks;
    to_sinks = sit == SLOWSINK;
    pthread_t t;
    atomic_store(&g.exporting, 1);
    double t0 = bench_now_ns();
    if (pthread_create(&t, NULL, exporter, &to_sinks)) fail("pthread_create", PPK_ESYS);
    /* The swap happens at the start of the export: whatever is flushed from here on
     * goes into the new window, so it is counted from zero. */
    g.in_window = 0;
    while (atomic_load(&g.exporting)) record_one((int)sit);
    pthread_join(t, NULL);
    push(&g.export_ms[sit], (bench_now_ns() - t0) * 1e-6);
    if (g.export_rc) fail("ppk_recorder_export", g.export_rc);
}

/* Median ns of one clock_gettime pair, which every figure includes. */
static double timer_ns(void) {
    double v[1001];
    for (int i = 0; i < 1001; i++) {
        double a = bench_now_ns();
        v[i] = bench_now_ns() - a;
    }
    return bench_median(v, 1001);
}

typedef struct figures {
    double p50, p99, p999, max;
    size_t over_1ms;
} figures;

static figures figures_of(series *s) {
    bench_sort(s->v, s->n);
    figures f = {bench_percentile_sorted(s->v, s->n, 50), bench_percentile_sorted(s->v, s->n, 99),
                 bench_percentile_sorted(s->v, s->n, 99.9), s->n ? s->v[s->n - 1] : 0, 0};
    for (size_t i = s->n; i > 0 && s->v[i - 1] > 1e6; i--) f.over_1ms++;
    return f;
}

int main(int argc, char **argv) {
    int rounds = 5, no_upload = 0;
    g.sink_ms = 200;
    g.variant = W1_STEADY;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--storm"))
            g.variant = W1_STORM;
        else if (!strcmp(argv[i], "--steady"))
            g.variant = W1_STEADY;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--sink-ms") && i + 1 < argc)
            g.sink_ms = atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-upload"))
            no_upload = 1;
        else {
            fprintf(stderr, "usage: bench_latency [--storm|--steady] [--rounds N] "
                            "[--sink-ms MS] [--no-upload]\n");
            return 2;
        }
    }
    if (rounds < 1) rounds = 1;
    if (g.sink_ms < 0) g.sink_ms = 0;

    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    w1_config(&cfg.profile);
    cfg.codec = PPK_CODEC_ZSTD;
    int rc = ppk_recorder_create(&cfg, &g.rec);
    ppk_sink sink = {slow_write, NULL, NULL};
    if (!rc) rc = ppk_recorder_add_sink(g.rec, &sink);
    /* The server that never answers: connections wait in the listen backlog. */
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 64) ||
        getsockname(lfd, (struct sockaddr *)&a, &al))
        fail("listening socket", PPK_ESYS);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d", ntohs(a.sin_port));
    ppk_datadog_config dd;
    ppk_datadog_config_init(&dd);
    dd.agent_url = ppk_cstr(url);
    dd.upload.timeout_ms = 3600000;
    dd.upload.fork_timeout_ms = 5000;
    char err[256] = "";
    if (!rc && !no_upload) {
        if (ppk_sink_datadog(&dd, &g.upload, err, sizeof err)) fail(err, PPK_EINVAL);
        rc = ppk_recorder_add_sink(g.rec, &g.upload);
    }
    if (!rc) rc = ppk_sample_create(g.rec, &g.s);
    if (rc) fail("setup", rc);
    if (w1_init(&g.w)) fail("w1_init", PPK_ENOMEM);

    double timer = timer_ns();
    for (int r = 0; r < rounds; r++)
        for (int sit = 0; sit < N_SITUATIONS; sit++) round_of((enum situation)sit);

    const char *vname = g.variant == W1_STORM ? "storm" : "steady";
    printf("bench_latency: W1 %s, zstd-1, %d rounds, sink write %ld ms, timer %.0f ns "
           "(included)\n",
           vname, rounds, g.sink_ms, timer);
    printf("  %-9s %8s %9s | %9s %9s %9s %9s %6s | %10s %9s %9s\n", "situation", "samples",
           "export ms", "flush p50", "p99", "p99.9", "max", ">1ms", "sample p50", "p99", "max");
    figures ff[N_SITUATIONS], fs[N_SITUATIONS];
    double em[N_SITUATIONS];
    size_t n[N_SITUATIONS];
    for (int sit = 0; sit < N_SITUATIONS; sit++) {
        n[sit] = g.flush[sit].n;
        ff[sit] = figures_of(&g.flush[sit]);
        fs[sit] = figures_of(&g.sample[sit]);
        em[sit] = bench_median(g.export_ms[sit].v, g.export_ms[sit].n);
        printf("  %-9s %8zu %9.1f | %7.2fus %7.2fus %7.2fus %7.0fus %6zu | %8.2fus %7.2fus "
               "%7.0fus\n",
               situation_name[sit], n[sit], em[sit], ff[sit].p50 / 1e3, ff[sit].p99 / 1e3,
               ff[sit].p999 / 1e3, ff[sit].max / 1e3, ff[sit].over_1ms, fs[sit].p50 / 1e3,
               fs[sit].p99 / 1e3, fs[sit].max / 1e3);
    }
    printf("  (export ms: median time of the export call of each round; for idle it ran "
           "alone, before the timed samples; for forks, of one fork() call)\n");
    ppk_upload_stats us;
    if (ppk_sink_upload_stats(&g.upload, &us) == 0)
        printf("  upload sink: %llu transfers aborted by a fork and sent again, %llu dropped "
               "after four\n",
               (unsigned long long)us.fork_restarts, (unsigned long long)us.dropped_failed);
    else
        printf("  no upload sink (--no-upload)\n");
    printf("{\"bench\": \"latency\", \"variant\": \"%s\", \"rounds\": %d, \"sink_ms\": %ld, "
           "\"upload\": %s, \"timer_ns\": %.0f",
           vname, rounds, g.sink_ms, no_upload ? "false" : "true", timer);
    for (int sit = 0; sit < N_SITUATIONS; sit++)
        printf(", \"%s\": {\"samples\": %zu, \"export_ms\": %.1f, \"flush_p50_ns\": %.0f, "
               "\"flush_p99_ns\": %.0f, \"flush_p999_ns\": %.0f, \"flush_max_ns\": %.0f, "
               "\"flush_over_1ms\": %zu, "
               "\"sample_p50_ns\": %.0f, \"sample_p99_ns\": %.0f, \"sample_max_ns\": %.0f}",
               situation_name[sit], n[sit], em[sit], ff[sit].p50, ff[sit].p99, ff[sit].p999,
               ff[sit].max, ff[sit].over_1ms, fs[sit].p50, fs[sit].p99, fs[sit].max);
    printf("}\n");

    ppk_sample_free(g.s);
    ppk_recorder_free(g.rec);
    close(lfd);
    w1_free(&g.w);
    for (int sit = 0; sit < N_SITUATIONS; sit++) {
        free(g.flush[sit].v);
        free(g.sample[sit].v);
        free(g.export_ms[sit].v);
    }
    return 0;
}
