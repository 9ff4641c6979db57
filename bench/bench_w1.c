/*
 * bench_w1 - the reference workload W1 through the public recorder API, exactly as a
 * profiler uses it: per sample ppk_sample_start, one ppk_sample_push_frame per frame
 * (with --api id: ppk_sample_push_frame_id, each of the 2,000 functions interned once
 * before the add loop; with --api ids: the stack's ids gathered into an array and
 * pushed by one ppk_sample_push_frames_id), three label pushes, ppk_sample_set_values, ppk_sample_flush; an
 * export (ppk_recorder_export: swap, encode, compress, reset) every 100,000 samples, and
 * one of the rest at the end when --samples is not a multiple of 100,000.
 *
 * One run = one variant and one thread count, in its own process so the peak RSS is the
 * run's own. With two threads, the producers split the samples (even k, odd k) and the
 * thread whose flush completes a window of 100,000 exports it while the other goes on.
 *
 * Figures (JSON, one object on stdout):
 *   add_ns           mean ns per sample of the add loop, the figure W1 defines: each
 *                    producer's loop time minus the time it spent exporting, summed over
 *                    producers, divided by the samples;
 *   add_ns_net       the same minus the time of the same loop producing the samples
 *                    without any pprofkit call;
 *   frames_per_sample, ns_per_frame (add_ns over it);
 *   intern_ns_new, intern_ns_known  (--api id) ns per intern of the 2,000 functions, and
 *                    of the same again;
 *   export_ms_encode median ms of encode + compress per export (ppk_export.encode_ms);
 *   export_ms_total  median ms of the whole ppk_recorder_export call;
 *   bytes            median compressed bytes per export; rss_kb peak RSS; total_s wall;
 *   stale_retries    (--api id) pushes and flushes refused with PPK_ESTALE (a function
 *                    evicted, unused for function_ttl_exports exports: not expected in
 *                    W1, whose windows use every function), after which the function or
 *                    the sample's functions were interned again and the push or the
 *                    sample redone;
 *   checked          the recorder's own counts add up: every sample flushed and
 *                    exported, the exports' windows took them all, nothing dropped (the
 *                    exports are not decoded here; bench_w3 decodes its own). The exit
 *                    status is 1 when they do not.
 * With two threads the recorder has two shards (one per producer) unless --shards says
 * otherwise. Nothing is asserted about time.
 * Usage: bench_w1 [--storm] [--threads 1|2] [--samples N] [--shards N]
 *                 [--codec zstd|gzip|none] [--api string|id|ids] [--labels strings|prepared]
 * --labels prepared (with --api id or ids): the thread id, thread name and steady task
 * name labels pushed as labels prepared before the loop (ppk_label_prepare), the storm's
 * task names still by their strings; the row's "labels" says which.
 */
#include <pprofkit.h>

#include "bench.h"
#include "w1.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_EXPORTS 64

static struct {
    ppk_recorder *rec;
    int by_id;
    int batch; /* --api ids: by id, a stack in one call */
    int prepared; /* --labels prepared (with --api id or ids) */
    ppk_function_id ids[W1_FUNCTIONS]; /* --api id: by function index, before the adds */
    enum w1_variant variant;
    int threads;
    uint64_t samples;
    atomic_uint_fast64_t flushed;
    pthread_mutex_t mu; /* guards the export figures */
    int n_exports;
    double encode_ms[MAX_EXPORTS], total_ms[MAX_EXPORTS], bytes[MAX_EXPORTS];
    uint64_t exported_samples; /* sum of the exports' samples_added */
    atomic_uint_fast64_t stale_retries;
    atomic_int failed;
    pthread_barrier_t start;
} g;

typedef struct producer {
    int index;
    double loop_s, export_s, gen_s;
    uint64_t frames;
    pthread_t thread;
} producer;

/* --api id: each producer's copy of g.ids, as a profiler keeps the ids it learnt
 * beside its frames (no atomic loads: the compiler can keep the gather tight). */
static _Thread_local ppk_function_id t_ids[W1_FUNCTIONS];

/* --labels prepared: each producer's prepared labels (prepare_labels). */
static _Thread_local struct {
    ppk_prepared_label *thread_id[W1_THREADS], *thread_name[W1_THREADS];
    ppk_prepared_label *task[W1_STEADY_TASKS];
} t_labels;

/* Prepares the labels of the W1 threads and steady tasks into t_labels (the first
 * W1_STEADY_TASKS samples of a steady stream have them all), as a profiler prepares a
 * thread's or a task's labels when it first meets it. */
static int prepare_labels(ppk_sample *s, struct w1 *w) {
    struct w1_sample ws;
    int rc = 0;
    for (uint64_t k = 0; k < W1_STEADY_TASKS && !rc; k++) {
        const ppk_label *l = w1_next_labels(w, W1_STEADY, &ws)->labels;
        if (k < W1_THREADS &&
            ((rc = ppk_label_prepare(s, &l[0], &t_labels.thread_id[k])) ||
             (rc = ppk_label_prepare(s, &l[1], &t_labels.thread_name[k]))))
            break;
        rc = ppk_label_prepare(s, &l[2], &t_labels.task[k]);
    }
    w1_rewind(w);
    return rc;
}

static void free_labels(void) {
    for (size_t i = 0; i < W1_THREADS; i++) {
        ppk_prepared_label_free(t_labels.thread_id[i]);
        ppk_prepared_label_free(t_labels.thread_name[i]);
    }
    for (size_t i = 0; i < W1_STEADY_TASKS; i++) ppk_prepared_label_free(t_labels.task[i]);
}

/* Interns function `fn` again (its id was refused with PPK_ESTALE) into t_ids. Interning
 * a live function returns its id, so two producers doing this at once agree. */
static int reintern(const struct w1 *w, uint16_t fn) {
    ppk_function f = {w->fn_name[fn], {NULL, 0}, w->fn_file[fn], 0};
    ppk_function_id id;
    int rc = ppk_recorder_intern_function(g.rec, &f, &id);
    if (!rc) t_ids[fn] = id;
    atomic_fetch_add(&g.stale_retries, 1);
    return rc;
}

/* One frame by id; a function evicted meanwhile is interned again, once. */
static inline __attribute__((always_inline)) int push_id(ppk_sample *s, const struct w1 *w,
                                                       uint16_t fn) {
    int rc = ppk_sample_push_frame_id(
        s, t_ids[fn], w->fn_line[fn]);
    if (rc != PPK_ESTALE || (rc = reintern(w, fn))) return rc;
    return ppk_sample_push_frame_id(s, t_ids[fn], w->fn_line[fn]);
}

/* The ids and lines of the stack's n functions `fn` into fr, as a profiler that walks
 * its stack gathers them. */
static void gather(const struct w1 *w, const uint16_t *fn, size_t n, ppk_id_frame *fr) {
    for (size_t i = 0; i < n; i++)
        fr[i] = (ppk_id_frame){t_ids[fn[i]], w->fn_line[fn[i]]};
}

/* The whole stack by ppk_sample_push_frames_id (--api ids): the ids and lines gathered
 * into an array first (a stale id is refused by the flush: record_by_id). */
static int push_ids(ppk_sample *s, const struct w1 *w, const uint16_t *fn, size_t n) {
    static _Thread_local ppk_id_frame fr[W1_MAX_DEPTH];
    gather(w, fn, n, fr);
    return ppk_sample_push_frames_id(s, fr, n);
}

/* The sample's three labels: by their strings, or (--labels prepared) the thread's and a
 * steady task name's prepared before the loop; a storm's task name is new each sample:
 * by its strings. */
static int push_labels(ppk_sample *s, const struct w1_sample *ws) {
    const ppk_label *l = ws->data.labels;
    if (!t_labels.thread_id[0]) {
        int rc = ppk_sample_push_label_num(s, l[0].key, l[0].num, l[0].num_unit);
        if (!rc) rc = ppk_sample_push_label_str(s, l[1].key, l[1].str);
        return rc ? rc : ppk_sample_push_label_str(s, l[2].key, l[2].str);
    }
    int rc = ppk_sample_push_prepared_label(s, t_labels.thread_id[ws->thread]);
    if (!rc) rc = ppk_sample_push_prepared_label(s, t_labels.thread_name[ws->thread]);
    if (rc) return rc;
    return g.variant == W1_STORM
               ? ppk_sample_push_label_str(s, l[2].key, l[2].str)
               : ppk_sample_push_prepared_label(s, t_labels.task[ws->k % W1_STEADY_TASKS]);
}

/* bench_record by function id: the stack's functions from the workload's tables. */
static int record_by_id_once(ppk_sample *s, const struct w1 *w, const struct w1_sample *ws) {
    const ppk_sample_data *d = &ws->data;
    const uint16_t *fn = w->stack_fn + w->stack_off[ws->stack];
    int rc = ppk_sample_start(s);
    if (g.batch) {
        if (!rc) rc = push_ids(s, w, fn, d->n_frames);
    } else {
        for (size_t i = 0; !rc && i < d->n_frames; i++) rc = push_id(s, w, fn[i]);
    }
    if (!rc) rc = push_labels(s, ws);
    if (!rc) rc = ppk_sample_set_values(s, d->values, d->n_values);
    if (rc) {
        ppk_sample_drop(s);
        return rc;
    }
    return ppk_sample_flush(s);
}

/* A flush refused with PPK_ESTALE (a function evicted between its push and the flush;
 * the sample was dropped): the stack's functions are interned again and the sample
 * recorded again, once. */
static int record_by_id(ppk_sample *s, const struct w1 *w, const struct w1_sample *ws) {
    int rc = record_by_id_once(s, w, ws);
    if (rc != PPK_ESTALE) return rc;
    const uint16_t *fn = w->stack_fn + w->stack_off[ws->stack];
    for (size_t i = 0; i < ws->data.n_frames; i++)
        if ((rc = reintern(w, fn[i]))) return rc;
    return record_by_id_once(s, w, ws);
}

/* ns per intern of the W1 functions into g.ids (new), then of the same again (known). */
static int intern_all(double *new_ns, double *known_ns) {
    struct w1 w;
    if (w1_init(&w)) return PPK_ENOMEM;
    int rc = 0;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        double t0 = bench_now_ns();
        for (uint32_t i = 0; i < W1_FUNCTIONS && !rc; i++) {
            ppk_function f = {w.fn_name[i], {NULL, 0}, w.fn_file[i], 0};
            ppk_function_id id;
            rc = ppk_recorder_intern_function(g.rec, &f, &id);
            if (!rc && pass && id != g.ids[i]) {
                fprintf(stderr, "bench_w1: function %u interned again got another id\n", i);
                atomic_store(&g.failed, 1);
            }
            g.ids[i] = id;
        }
        *(pass ? known_ns : new_ns) = (bench_now_ns() - t0) / W1_FUNCTIONS;
    }
    w1_free(&w);
    return rc;
}

static void do_export(producer *p) {
    double t0 = (bench_now_ns() * 1e-9);
    ppk_export e;
    int rc = ppk_recorder_export(g.rec, &e);
    double dt = (bench_now_ns() * 1e-9) - t0;
    p->export_s += dt;
    if (rc) {
        fprintf(stderr, "export: %s\n", ppk_strerror(rc));
        atomic_store(&g.failed, 1);
        return;
    }
    pthread_mutex_lock(&g.mu);
    if (g.n_exports < MAX_EXPORTS) {
        g.encode_ms[g.n_exports] = e.encode_ms;
        g.total_ms[g.n_exports] = dt * 1e3;
        g.bytes[g.n_exports] = (double)e.data.len;
        g.n_exports++;
    }
    g.exported_samples += e.stats.samples_added;
    pthread_mutex_unlock(&g.mu);
    ppk_export_free(&e);
}

/* The next sample of the run's variant; by id without its frames (pushed from the
 * stack's function indices). */
static const ppk_sample_data *next(struct w1 *w, struct w1_sample *ws) {
    return g.by_id ? w1_next_labels(w, g.variant, ws) : w1_next(w, g.variant, ws);
}

static void *produce(void *arg) {
    producer *p = arg;
    struct w1 w;
    struct w1_sample ws;
    ppk_sample *s = NULL;
    if (w1_init(&w) || ppk_sample_create(g.rec, &s) ||
        (g.prepared && prepare_labels(s, &w))) {
        free_labels();
        ppk_sample_free(s);
        atomic_store(&g.failed, 1);
        pthread_barrier_wait(&g.start); /* the other producer waits there */
        return NULL;
    }
    memcpy(t_ids, g.ids, sizeof t_ids); /* interned before the producers start */
    /* The workload alone: the same loop without pprofkit calls (by id: the samples
     * without their frames, the stack's ids gathered as push_ids does). */
    volatile size_t sink = 0;
    ppk_id_frame fr[W1_MAX_DEPTH];
    double t0 = (bench_now_ns() * 1e-9);
    for (uint64_t k = 0; k < g.samples; k++) {
        if ((int)(k % (uint64_t)g.threads) != p->index) {
            w1_skip(&w);
            continue;
        }
        const ppk_sample_data *d = next(&w, &ws);
        if (g.by_id) {
            gather(&w, w.stack_fn + w.stack_off[ws.stack], d->n_frames, fr);
            sink += (size_t)fr[d->n_frames - 1].function;
        }
        sink += d->n_frames;
        p->frames += d->n_frames;
    }
    p->gen_s = (bench_now_ns() * 1e-9) - t0;
    w1_rewind(&w);
    /* The producers start adding together: else the first to arrive fills the first
     * window alone (with shards, one shard's window gets twice its share). */
    pthread_barrier_wait(&g.start);

    t0 = (bench_now_ns() * 1e-9);
    for (uint64_t k = 0; k < g.samples; k++) {
        if ((int)(k % (uint64_t)g.threads) != p->index) {
            w1_skip(&w);
            continue;
        }
        const ppk_sample_data *d = next(&w, &ws);
        int rc = g.by_id ? record_by_id(s, &w, &ws) : bench_record(s, d);
        if (rc) {
            fprintf(stderr, "sample %llu: %s\n", (unsigned long long)k, ppk_strerror(rc));
            atomic_store(&g.failed, 1);
            break;
        }
        if ((atomic_fetch_add(&g.flushed, 1) + 1) % W1_WINDOW == 0) do_export(p);
    }
    p->loop_s = (bench_now_ns() * 1e-9) - t0;
    free_labels();
    ppk_sample_free(s);
    w1_free(&w);
    return NULL;
}

int main(int argc, char **argv) {
    g.variant = W1_STEADY;
    g.threads = 1;
    g.samples = W1_SAMPLES;
    ppk_codec codec = PPK_CODEC_ZSTD;
    const char *codec_name = "zstd-1";
    int shards = 0; /* 0: one per producer thread */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--storm")) {
            g.variant = W1_STORM;
        } else if (!strcmp(argv[i], "--steady")) {
            g.variant = W1_STEADY;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            g.threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--api") && i + 1 < argc) {
            i++;
            g.batch = !strcmp(argv[i], "ids");
            g.by_id = g.batch || !strcmp(argv[i], "id");
        } else if (!strcmp(argv[i], "--labels") && i + 1 < argc) {
            g.prepared = !strcmp(argv[++i], "prepared");
        } else if (!strcmp(argv[i], "--shards") && i + 1 < argc) {
            shards = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
            g.samples = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--codec") && i + 1 < argc) {
            codec = bench_codec(argv[++i], &codec_name);
        } else {
            fprintf(stderr, "usage: bench_w1 [--storm|--steady] [--threads 1|2] [--samples N] "
                            "[--codec zstd|gzip|none] [--shards N] [--api string|id|ids] "
                            "[--labels strings|prepared]\n");
            return 2;
        }
    }
    if (g.prepared && !g.by_id) {
        fprintf(stderr, "bench_w1: --labels prepared needs --api id or ids\n");
        return 2;
    }
    if (g.threads < 1 || g.threads > 2) g.threads = 1;
    if (shards < 1 || shards > 64) shards = g.threads;
    pthread_mutex_init(&g.mu, NULL);
    pthread_barrier_init(&g.start, NULL, (unsigned)g.threads);

    double start = (bench_now_ns() * 1e-9);
    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    w1_config(&cfg.profile);
    cfg.codec = codec;
    cfg.shards = (size_t)shards;
    if (cfg.max_functions < W1_FUNCTIONS) cfg.max_functions = W1_FUNCTIONS; /* 65,536 */
    int rc = ppk_recorder_create(&cfg, &g.rec);
    if (rc) {
        fprintf(stderr, "ppk_recorder_create: %s\n", ppk_strerror(rc));
        return 1;
    }
    double intern_new = 0, intern_known = 0;
    if (g.by_id && (rc = intern_all(&intern_new, &intern_known))) {
        fprintf(stderr, "ppk_recorder_intern_function: %s\n", ppk_strerror(rc));
        return 1;
    }
    producer p[2];
    memset(p, 0, sizeof p);
    for (int i = 0; i < g.threads; i++) {
        p[i].index = i;
        pthread_create(&p[i].thread, NULL, produce, &p[i]);
    }
    for (int i = 0; i < g.threads; i++) pthread_join(p[i].thread, NULL);
    if (atomic_load(&g.flushed) % W1_WINDOW) do_export(&p[0]); /* the rest (--samples) */
    double total = (bench_now_ns() * 1e-9) - start;

    double add_s = 0, gen_s = 0;
    uint64_t frames = 0;
    for (int i = 0; i < g.threads; i++) {
        add_s += p[i].loop_s - p[i].export_s;
        gen_s += p[i].gen_s;
        frames += p[i].frames;
    }
    double n = (double)g.samples, fps = (double)frames / n;
    ppk_recorder_stats st;
    ppk_recorder_stats_get(g.rec, &st);
    ppk_recorder_free(g.rec);
    /* The recorder's counts (samples_dropped_stale: those were recorded again). */
    uint64_t dropped = st.samples_dropped_nomem + st.samples_dropped_closed +
                       st.samples_lost_export + st.stacks_truncated + st.values_saturated;
#define ADD(name, what) dropped += st.name;
    PPK_DEGRADATIONS(ADD)
#undef ADD
    if (st.samples_flushed != g.samples || st.samples_exported != g.samples ||
        g.exported_samples != g.samples || dropped) {
        fprintf(stderr,
                "bench_w1: %llu samples, %llu flushed, %llu exported, %llu in the exports' "
                "stats, %llu dropped or degraded\n",
                (unsigned long long)g.samples, (unsigned long long)st.samples_flushed,
                (unsigned long long)st.samples_exported,
                (unsigned long long)g.exported_samples, (unsigned long long)dropped);
        atomic_store(&g.failed, 1);
    }
    int ok = !atomic_load(&g.failed);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"variant\": \"%s\", \"api\": \"%s\", \"labels\": \"%s\", \"threads\": %d, \"shards\": %d, "
           "\"samples\": %llu, \"add_ns\": %.0f, \"add_ns_net\": %.0f, "
           "\"frames_per_sample\": %.1f, \"ns_per_frame\": %.2f, \"intern_ns_new\": %.0f, "
           "\"intern_ns_known\": %.0f, \"stale_retries\": %llu, "
           "\"export_ms_encode\": %.1f, \"export_ms_total\": %.1f, \"codec\": \"%s\", "
           "\"bytes\": %.0f, \"exports\": %d, \"rss_kb\": %ld, \"total_s\": %.2f, "
           "\"window_bytes_peak\": %llu, \"checked\": %s}\n",
           g.variant == W1_STORM ? "storm" : "steady", g.batch ? "ids" : g.by_id ? "id" : "string",
           g.prepared ? "prepared" : "strings", g.threads,
           shards, (unsigned long long)g.samples, add_s * 1e9 / n, (add_s - gen_s) * 1e9 / n,
           fps, add_s * 1e9 / n / fps, intern_new, intern_known,
           (unsigned long long)atomic_load(&g.stale_retries),
           bench_median(g.encode_ms, (size_t)g.n_exports),
           bench_median(g.total_ms, (size_t)g.n_exports), codec_name,
           bench_median(g.bytes, (size_t)g.n_exports), g.n_exports, ru.ru_maxrss, total,
           (unsigned long long)st.window_bytes_peak, ok ? "true" : "false");
    return ok ? 0 : 1;
}
