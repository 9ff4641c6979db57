/*
 * bench_w3 - the reference workload W3 (deep stacks over 16,000 functions; bench/w3.h)
 * through the recorder's builder API, frames pushed by strings (ppk_sample_push_frame)
 * or by function id (ppk_sample_push_frame_id, each function interned once before the
 * add loop; --api ids: the stack's ids in one ppk_sample_push_frames_id), per sample: start, one push per frame, three numeric labels, the values, a
 * timestamp for every 4th, flush. An export (ppk_recorder_export) every 60,000 samples;
 * the 2,000 endpoints are registered at the start and after each export.
 *
 * One run = one API and one thread count, in its own process (peak RSS is the run's
 * own). With two threads the producers split the samples (even k, odd k), each on its
 * own shard, and the thread whose flush completes a window exports it.
 *
 * It checks its own work, outside the timed loop: every export is decompressed and
 * scanned twice (bench/pprof_scan.h: its own protobuf code, nothing shared with the
 * library; a few MB of memory, so rss_kb stays the library's and the workload's). Each
 * export must hold as many samples as its window took (every W3 sample is distinct: its
 * "span id" is new), each value summing to 10,000,000 times that, and every sample the
 * "trace endpoint" of its local root span id; over all exports, the samples, both values'
 * totals and the frames must be what was added, and the recorder must have dropped
 * nothing. Any failure is printed and the exit status is 1 ("checked": false).
 *
 * By id, a push or a flush refused with PPK_ESTALE (a function evicted: unused for
 * function_ttl_exports exports, which W3's windows, each using nearly every function,
 * should never cause) re-interns the functions and redoes the sample, counted in
 * stale_retries.
 *
 * Figures (one JSON object on stdout):
 *   add_ns            ns per sample of the add loop, the figure W3 defines: each producer's
 *                     loop time minus its exports, summed, over the samples;
 *   add_ns_net        the same net of the workload's own cost (the same loop drawing the
 *                     samples and reading their frames without any pprofkit call: by
 *                     strings their names' lengths, by id their ids and lines gathered
 *                     into an array as push_ids does);
 *   frames_per_sample mean stack depth; ns_per_frame = add_ns / frames_per_sample (and
 *                     ns_per_frame_net);
 *   intern_ns_new, intern_ns_known  (api id) ns per ppk_recorder_intern_function of the
 *                     16,000 functions, then of the same again;
 *   export_ms_total   median ms of a ppk_recorder_export call; export_ms_encode median of
 *                     its encode + compress; bytes median compressed size; rss_kb peak
 *                     RSS; total_s wall time of the run, of which check_s checking exports;
 *   stale_retries     see above; functions, functions_evicted, samples_dropped_stale
 *                     the recorder's counts; checked whether every check passed.
 * Usage: bench_w3 [--api string|id|ids] [--threads 1|2] [--samples N] [--codec zstd|gzip|none]
 */
#include <pprofkit.h>

#include "bench.h"
#include "pprof_scan.h"
#include "w3.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MAX_EXPORTS 64

static struct {
    ppk_recorder *rec;
    int by_id, batch, threads; /* batch: --api ids */
    uint64_t samples;
    _Atomic(ppk_function_id) ids[W3_FUNCTIONS]; /* by function index (api id) */
    atomic_uint_fast64_t flushed;
    pthread_mutex_t mu; /* the export figures and the sums below */
    int n_exports;
    double encode_ms[MAX_EXPORTS], total_ms[MAX_EXPORTS], bytes[MAX_EXPORTS];
    int64_t value_sum[2];
    uint64_t exported_samples, decoded_samples, decoded_frames, stale_retries;
    double check_s; /* time spent checking exports (in total_s, not in the figures) */
    atomic_int failed;
    pthread_barrier_t start;
} g;

typedef struct producer {
    int index;
    double loop_s, export_s, gen_s;
    uint64_t frames;
    pthread_t thread;
} producer;

static void fail(const char *what, int rc) {
    fprintf(stderr, "bench_w3: %s: %s\n", what, rc ? ppk_strerror(rc) : "failed");
    atomic_store(&g.failed, 1);
}

static void note_stale_retry(void) {
    pthread_mutex_lock(&g.mu);
    g.stale_retries++;
    pthread_mutex_unlock(&g.mu);
}

static void register_endpoints(void) {
    char name[64];
    for (uint64_t id = 1; id <= W3_SPANS; id++) {
        size_t n = w3_endpoint(id, name, sizeof name);
        int rc = ppk_recorder_set_endpoint(g.rec, id, (ppk_str){name, n});
        if (rc) fail("ppk_recorder_set_endpoint", rc);
    }
}

/* What the two scans of an export gather (see check_export). */
typedef struct scan {
    ps_strings strings;
    uint64_t max_location_id;
    uint64_t samples, frames, bad_locations, bad_endpoints;
    int64_t sum[2];
} scan;

/* First scan: the string table and the largest location id. */
static int scan_strings_locations(void *ctx, const ps_field *f) {
    scan *sc = ctx;
    if (f->number == 6) return ps_strings_add(&sc->strings, f);
    if (f->number != 4 || f->wire != 2) return 0;
    const uint8_t *p = f->bytes, *end = f->bytes + f->len;
    ps_field fl;
    while (p < end) {
        if (ps_field_next(&p, end, &fl) != 1) return -1;
        if (fl.number == 1 && fl.wire == 0 && fl.v > sc->max_location_id)
            sc->max_location_id = fl.v;
    }
    return 0;
}

/* One location id (field 1) or value (field 2) of a sample. */
static void scan_take(scan *sc, uint32_t number, uint64_t v, size_t *n_values) {
    if (number == 1) {
        sc->frames++;
        if (v == 0 || v > sc->max_location_id) sc->bad_locations++;
    } else if (*n_values < 2) {
        sc->sum[(*n_values)++] += (int64_t)v;
    }
}

/* Second scan: each sample's frames (location ids), values and labels. */
static int scan_samples(void *ctx, const ps_field *f) {
    scan *sc = ctx;
    if (f->number != 2) return 0;
    if (f->wire != 2) return -1;
    const uint8_t *p = f->bytes, *end = f->bytes + f->len;
    ps_field fl;
    size_t n_values = 0;
    int64_t span = 0;
    uint64_t endpoint = UINT64_MAX;
    while (p < end) {
        if (ps_field_next(&p, end, &fl) != 1) return -1;
        if ((fl.number == 1 || fl.number == 2) && fl.wire == 0) { /* location_id, value */
            scan_take(sc, fl.number, fl.v, &n_values);
        } else if (fl.number == 1 || fl.number == 2) { /* packed */
            const uint8_t *q = fl.bytes, *qend = fl.bytes + fl.len;
            uint64_t v;
            int n;
            if (fl.wire != 2) return -1;
            for (; q < qend; q += n) {
                if ((n = ps_varint(q, qend, &v)) <= 0) return -1;
                scan_take(sc, fl.number, v, &n_values);
            }
        } else if (fl.number == 3 && fl.wire == 2) { /* label {key, str, num, num_unit} */
            const uint8_t *q = fl.bytes, *qend = fl.bytes + fl.len;
            ps_field lf;
            uint64_t key = 0, str = 0, num = 0;
            while (q < qend) {
                if (ps_field_next(&q, qend, &lf) != 1) return -1;
                if (lf.number == 1) key = lf.v;
                if (lf.number == 2) str = lf.v;
                if (lf.number == 3) num = lf.v;
            }
            /* By the key's bytes: a sharded export may hold a string more than once. */
            if (ps_string_eq(&sc->strings, key, "local root span id", 18)) span = (int64_t)num;
            if (ps_string_eq(&sc->strings, key, "trace endpoint", 14)) endpoint = str;
        }
    }
    char want[64];
    size_t n = w3_endpoint((uint64_t)span, want, sizeof want);
    if (span < 1 || !ps_string_eq(&sc->strings, endpoint, want, n)) sc->bad_endpoints++;
    sc->samples++;
    return 0;
}

/* Checks an export (see the top): scanned twice, never held decoded (bench/pprof_scan.h;
 * tests/pprof_read.h would hold ~150 MB for a W3 window and make the peak RSS the
 * checker's), and adds its samples, values and frames to the totals. */
static void check_export(const ppk_export *e) {
    scan sc;
    memset(&sc, 0, sizeof sc);
    if (ps_scan(e->data.data, e->data.len, e->codec, scan_strings_locations, &sc) != 0 ||
        sc.strings.n == 0) {
        ps_strings_free(&sc.strings);
        fail("decoding an export", 0);
        return;
    }
    if (ps_scan(e->data.data, e->data.len, e->codec, scan_samples, &sc) != 0) {
        ps_strings_free(&sc.strings);
        fail("decoding an export's samples", 0);
        return;
    }
    ps_strings_free(&sc.strings);
    int64_t added = (int64_t)e->stats.samples_added;
    if ((int64_t)sc.samples != added || sc.sum[0] != added * W3_VALUE ||
        sc.sum[1] != added * W3_VALUE || sc.bad_endpoints || sc.bad_locations) {
        fprintf(stderr,
                "bench_w3: export %llu: %lld samples added, %llu decoded, values %lld, %lld "
                "(expected %lld each), %llu samples without their trace endpoint, %llu frames "
                "of an unknown location\n",
                (unsigned long long)e->seq, (long long)added, (unsigned long long)sc.samples,
                (long long)sc.sum[0], (long long)sc.sum[1], (long long)(added * W3_VALUE),
                (unsigned long long)sc.bad_endpoints, (unsigned long long)sc.bad_locations);
        atomic_store(&g.failed, 1);
    }
    pthread_mutex_lock(&g.mu);
    g.value_sum[0] += sc.sum[0];
    g.value_sum[1] += sc.sum[1];
    g.exported_samples += e->stats.samples_added;
    g.decoded_samples += sc.samples;
    g.decoded_frames += sc.frames;
    pthread_mutex_unlock(&g.mu);
}

static void do_export(producer *p) {
    double t0 = bench_now_ns();
    ppk_export e;
    int rc = ppk_recorder_export(g.rec, &e);
    p->export_s += (bench_now_ns() - t0) * 1e-9;
    if (rc) {
        fail("ppk_recorder_export", rc);
        return;
    }
    pthread_mutex_lock(&g.mu);
    if (g.n_exports < MAX_EXPORTS) {
        g.encode_ms[g.n_exports] = e.encode_ms;
        g.total_ms[g.n_exports] = (bench_now_ns() - t0) * 1e-6;
        g.bytes[g.n_exports] = (double)e.data.len;
        g.n_exports++;
    }
    pthread_mutex_unlock(&g.mu);
    double t1 = bench_now_ns();
    register_endpoints(); /* the next window's, first: the other producer adds to it */
    double t2 = bench_now_ns();
    check_export(&e); /* not the workload's: out of the figures */
    ppk_export_free(&e);
    double t3 = bench_now_ns();
    p->export_s += (t3 - t1) * 1e-9;
    pthread_mutex_lock(&g.mu);
    g.check_s += (t3 - t2) * 1e-9;
    pthread_mutex_unlock(&g.mu);
}

/* Interns function `fn` again (its id was refused with PPK_ESTALE) into g.ids. Interning
 * a live function returns its id, so two producers doing this at once agree. */
static int reintern(const struct w3 *w, uint16_t fn) {
    ppk_function f = {w->fn_name[fn], {NULL, 0}, w->fn_file[fn], 0};
    ppk_function_id id;
    int rc = ppk_recorder_intern_function(g.rec, &f, &id);
    if (!rc) atomic_store_explicit(&g.ids[fn], id, memory_order_relaxed);
    return rc;
}

/* One frame by id; a function evicted meanwhile is interned again, once. */
static inline __attribute__((always_inline)) int push_id(ppk_sample *s, const struct w3 *w,
                                                       uint16_t fn) {
    for (int attempt = 0;; attempt++) {
        ppk_function_id id = atomic_load_explicit(&g.ids[fn], memory_order_relaxed);
        int rc = ppk_sample_push_frame_id(s, id, w->fn_line[fn]);
        if (rc != PPK_ESTALE || attempt) return rc;
        if ((rc = reintern(w, fn))) return rc;
        note_stale_retry();
    }
}

/* The ids and lines of the stack's functions `fn` into fr, as a profiler that walks its
 * stack gathers them. */
static void gather(const struct w3 *w, const uint16_t *fn, uint32_t depth, ppk_id_frame *fr) {
    for (uint32_t f = 0; f < depth; f++)
        fr[f] = (ppk_id_frame){atomic_load_explicit(&g.ids[fn[f]], memory_order_relaxed),
                               w->fn_line[fn[f]]};
}

/* The whole stack by ppk_sample_push_frames_id (--api ids), its ids and lines gathered
 * into an array first (a stale id is refused by the flush: the sample is recorded
 * again after its functions are interned again). */
static int push_ids(ppk_sample *s, const struct w3 *w, const uint16_t *fn, uint32_t depth) {
    static _Thread_local ppk_id_frame fr[W3_MAX_DEPTH];
    gather(w, fn, depth, fr);
    return ppk_sample_push_frames_id(s, fr, depth);
}

/* One attempt at sample x: start, pushes, labels, values, timestamp, flush. */
static int record_once(ppk_sample *s, const struct w3 *w, const struct w3_sample *x) {
    uint32_t depth;
    const uint16_t *fn = w3_stack(w, x->stack, &depth);
    int rc = ppk_sample_start(s);
    if (!rc && g.batch) rc = push_ids(s, w, fn, depth);
    for (uint32_t f = 0; !rc && !g.batch && f < depth; f++)
        rc = g.by_id ? push_id(s, w, fn[f])
                     : ppk_sample_push_frame(s, w->fn_name[fn[f]], w->fn_file[fn[f]],
                                             w->fn_line[fn[f]], 0);
    if (!rc) rc = ppk_sample_push_label_num(s, PPK_STR("thread id"), x->thread_id, PPK_STR(""));
    if (!rc)
        rc = ppk_sample_push_label_num(s, PPK_STR("local root span id"), x->local_root_span_id,
                                       PPK_STR(""));
    if (!rc) rc = ppk_sample_push_label_num(s, PPK_STR("span id"), x->span_id, PPK_STR(""));
    int64_t values[2] = {W3_VALUE, W3_VALUE};
    if (!rc) rc = ppk_sample_set_values(s, values, 2);
    if (!rc && x->timestamp_ns) rc = ppk_sample_set_timestamp(s, x->timestamp_ns);
    if (rc) {
        ppk_sample_drop(s);
        return rc;
    }
    return ppk_sample_flush(s);
}

/* Records sample x. By id, a flush refused with PPK_ESTALE (a function evicted between
 * its push and the flush; the sample was dropped) re-interns the stack's functions and
 * records the sample again, once. */
static int record(ppk_sample *s, const struct w3 *w, const struct w3_sample *x) {
    int rc = record_once(s, w, x);
    if (rc != PPK_ESTALE || !g.by_id) return rc;
    uint32_t depth;
    const uint16_t *fn = w3_stack(w, x->stack, &depth);
    for (uint32_t f = 0; f < depth; f++)
        if ((rc = reintern(w, fn[f]))) return rc;
    note_stale_retry();
    return record_once(s, w, x);
}

static void *produce(void *arg) {
    producer *p = arg;
    static struct w3 ws[2];
    struct w3 *w = &ws[p->index];
    struct w3_sample x;
    ppk_sample *s = NULL;
    int rc = w3_init(w) ? PPK_ENOMEM : ppk_sample_create(g.rec, &s);
    if (rc) fail("setting up a producer", rc);
    /* The workload alone: the same draws and frame reads without pprofkit calls. */
    volatile size_t sink = 0;
    ppk_id_frame fr[W3_MAX_DEPTH];
    double t0 = bench_now_ns();
    for (uint64_t k = 0; !rc && k < g.samples; k++) {
        w3_next(w, &x);
        if ((int)(k % (uint64_t)g.threads) != p->index) continue;
        uint32_t depth;
        const uint16_t *fn = w3_stack(w, x.stack, &depth);
        if (g.by_id) {
            gather(w, fn, depth, fr);
            sink += (size_t)fr[depth - 1].function;
        } else {
            for (uint32_t f = 0; f < depth; f++)
                sink += w->fn_name[fn[f]].len + w->fn_file[fn[f]].len +
                        (size_t)w->fn_line[fn[f]];
        }
        p->frames += depth;
    }
    p->gen_s = (bench_now_ns() - t0) * 1e-9;
    w3_rewind(w);
    pthread_barrier_wait(&g.start);

    t0 = bench_now_ns();
    for (uint64_t k = 0; !rc && k < g.samples; k++) {
        w3_next(w, &x);
        if ((int)(k % (uint64_t)g.threads) != p->index) continue;
        if ((rc = record(s, w, &x))) {
            fail("recording a sample", rc);
            break;
        }
        if ((atomic_fetch_add(&g.flushed, 1) + 1) % W3_WINDOW == 0) do_export(p);
    }
    p->loop_s = (bench_now_ns() - t0) * 1e-9;
    ppk_sample_free(s);
    w3_free(w);
    return NULL;
}

/* ns per intern of every W3 function into g.ids (new), then again (known). */
static void intern_all(double *new_ns, double *known_ns) {
    struct w3 w;
    if (w3_init(&w)) {
        fail("w3_init", PPK_ENOMEM);
        return;
    }
    for (int pass = 0; pass < 2; pass++) {
        double t0 = bench_now_ns();
        for (uint32_t i = 0; i < W3_FUNCTIONS; i++) {
            ppk_function f = {w.fn_name[i], {NULL, 0}, w.fn_file[i], 0};
            ppk_function_id id;
            int rc = ppk_recorder_intern_function(g.rec, &f, &id);
            if (rc) fail("ppk_recorder_intern_function", rc);
            if (pass == 1 && id != atomic_load(&g.ids[i]))
                fail("a known function got another id", 0);
            atomic_store(&g.ids[i], id);
        }
        *(pass ? known_ns : new_ns) = (bench_now_ns() - t0) / W3_FUNCTIONS;
    }
    w3_free(&w);
}

int main(int argc, char **argv) {
    g.threads = 1;
    g.samples = W3_SAMPLES;
    ppk_codec codec = PPK_CODEC_ZSTD;
    const char *codec_name = "zstd-1";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--api") && i + 1 < argc) {
            const char *a = argv[++i];
            if (strcmp(a, "id") && strcmp(a, "ids") && strcmp(a, "string")) goto usage;
            g.batch = !strcmp(a, "ids");
            g.by_id = g.batch || !strcmp(a, "id");
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            g.threads = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--samples") && i + 1 < argc) {
            g.samples = strtoull(argv[++i], NULL, 10);
        } else if (!strcmp(argv[i], "--codec") && i + 1 < argc) {
            codec = bench_codec(argv[++i], &codec_name);
        } else {
            goto usage;
        }
    }
    if (g.threads < 1 || g.threads > 2) g.threads = 1;
    pthread_mutex_init(&g.mu, NULL);
    pthread_barrier_init(&g.start, NULL, (unsigned)g.threads);

    double start = bench_now_ns();
    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    w1_config(&cfg.profile);
    cfg.codec = codec;
    cfg.shards = (size_t)g.threads;
    if (cfg.max_functions < W3_FUNCTIONS) cfg.max_functions = W3_FUNCTIONS; /* 65,536 */
    int rc = ppk_recorder_create(&cfg, &g.rec);
    if (rc) {
        fprintf(stderr, "ppk_recorder_create: %s\n", ppk_strerror(rc));
        return 1;
    }
    double intern_new = 0, intern_known = 0;
    if (g.by_id) intern_all(&intern_new, &intern_known);
    register_endpoints();
    producer p[2];
    memset(p, 0, sizeof p);
    for (int i = 0; i < g.threads; i++) {
        p[i].index = i;
        pthread_create(&p[i].thread, NULL, produce, &p[i]);
    }
    for (int i = 0; i < g.threads; i++) pthread_join(p[i].thread, NULL);
    if (atomic_load(&g.flushed) % W3_WINDOW) do_export(&p[0]); /* the rest, if any */
    double total = (bench_now_ns() - start) * 1e-9;

    double add_s = 0, gen_s = 0;
    uint64_t frames = 0;
    for (int i = 0; i < g.threads; i++) {
        add_s += p[i].loop_s - p[i].export_s;
        gen_s += p[i].gen_s;
        frames += p[i].frames;
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(g.rec, &st);
    ppk_recorder_free(g.rec);

    /* Conservation: every sample, both values and every frame, in the decoded exports;
     * nothing dropped, truncated or lost by the recorder (but samples_dropped_stale:
     * those were recorded again, see record()). */
    int64_t want = (int64_t)g.samples * W3_VALUE;
    uint64_t dropped = st.samples_dropped_nomem + st.samples_dropped_closed +
                       st.samples_lost_export + st.stacks_truncated + st.values_saturated;
#define ADD(name, what) dropped += st.name;
    PPK_DEGRADATIONS(ADD)
#undef ADD
    if (g.exported_samples != g.samples || g.decoded_samples != g.samples ||
        g.value_sum[0] != want || g.value_sum[1] != want || g.decoded_frames != frames ||
        st.samples_flushed != g.samples || st.samples_exported != g.samples || dropped) {
        fprintf(stderr,
                "bench_w3: conservation: %llu samples, %llu flushed, %llu exported, %llu in "
                "the exports' stats, %llu decoded; values %lld, %lld (expected %lld each); "
                "frames %llu decoded of %llu; %llu dropped or truncated (stale, recorded again: "
                "%llu)\n",
                (unsigned long long)g.samples, (unsigned long long)st.samples_flushed,
                (unsigned long long)st.samples_exported,
                (unsigned long long)g.exported_samples, (unsigned long long)g.decoded_samples,
                (long long)g.value_sum[0], (long long)g.value_sum[1], (long long)want,
                (unsigned long long)g.decoded_frames, (unsigned long long)frames,
                (unsigned long long)dropped, (unsigned long long)st.samples_dropped_stale);
        atomic_store(&g.failed, 1);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double n = (double)g.samples, fps = (double)frames / n;
    double add_ns = add_s * 1e9 / n, net_ns = (add_s - gen_s) * 1e9 / n;
    int ok = !atomic_load(&g.failed);
    printf("w3 %-6s threads %d: add %.0f ns/sample (net %.0f), %.1f ns/frame (net %.1f) at "
           "%.1f frames/sample; intern new %.0f ns, known %.0f ns; export %.1f ms (%s), "
           "%.2f MB; peak RSS %.1f MB; %.2f s; %s\n",
           g.batch ? "ids" : g.by_id ? "id" : "string", g.threads, add_ns, net_ns, add_ns / fps, net_ns / fps,
           fps, intern_new, intern_known, bench_median(g.total_ms, (size_t)g.n_exports),
           codec_name, bench_median(g.bytes, (size_t)g.n_exports) / 1e6,
           (double)ru.ru_maxrss / 1024, total, ok ? "checked" : "CHECK FAILED");
    printf("{\"variant\": \"w3\", \"api\": \"%s\", \"threads\": %d, \"samples\": %llu, "
           "\"add_ns\": %.0f, \"add_ns_net\": %.0f, \"frames_per_sample\": %.1f, "
           "\"ns_per_frame\": %.2f, \"ns_per_frame_net\": %.2f, \"intern_ns_new\": %.0f, "
           "\"intern_ns_known\": %.0f, \"stale_retries\": %llu, \"export_ms_encode\": %.1f, "
           "\"export_ms_total\": %.1f, \"codec\": \"%s\", \"bytes\": %.0f, \"exports\": %d, "
           "\"rss_kb\": %ld, \"total_s\": %.2f, \"check_s\": %.2f, \"window_bytes_peak\": %llu, "
           "\"functions\": %llu, \"functions_evicted\": %llu, "
           "\"samples_dropped_stale\": %llu, \"checked\": %s}\n",
           g.batch ? "ids" : g.by_id ? "id" : "string", g.threads, (unsigned long long)g.samples, add_ns, net_ns,
           fps, add_ns / fps, net_ns / fps, intern_new, intern_known,
           (unsigned long long)g.stale_retries,
           bench_median(g.encode_ms, (size_t)g.n_exports),
           bench_median(g.total_ms, (size_t)g.n_exports), codec_name,
           bench_median(g.bytes, (size_t)g.n_exports), g.n_exports, ru.ru_maxrss, total,
           g.check_s, (unsigned long long)st.window_bytes_peak, (unsigned long long)st.functions,
           (unsigned long long)st.functions_evicted,
           (unsigned long long)st.samples_dropped_stale, ok ? "true" : "false");
    return ok ? 0 : 1;
usage:
    fprintf(stderr, "usage: bench_w3 [--api string|id|ids] [--threads 1|2] [--samples N] "
                    "[--codec zstd|gzip|none]\n");
    return 2;
}
