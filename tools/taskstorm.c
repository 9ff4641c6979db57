/*
 * taskstorm - a Python-like process whose every sample names a new asyncio task, recorded
 * by pprofkit's concurrent recorder and exported to files while it runs.
 *
 * T threads each build samples with the sample builder (ppk_sample_start, one
 * ppk_sample_push_frame per frame, three labels, two values, ppk_sample_flush) as a
 * Python profiler's sampler would. Stacks and function names are those of the reference
 * workload W1 (bench/w1.h: 2000 functions, 5000 stacks of 8..64 frames), each thread
 * drawing stacks with its own generator. Labels: "thread id" (the thread's kernel id),
 * "thread name" ("Thread-N") and "task name": with --unique-tasks (the default) a new
 * "Task-<n>" on every sample, from one process-wide counter as asyncio names tasks; with
 * --steady-tasks one of 100 names. Sample types ("samples","count") = 1 and
 * ("wall-time","nanoseconds") = the time since the thread's previous sample.
 *
 * The background exporter exports every --export-ms milliseconds to a file sink
 * (OUT/taskstorm.PID.SEQ.pb.gz) and to a sink of this program that prints one line per
 * export: window seq, samples, strings, window bytes, encoded bytes, encode time, RSS.
 * At the end (ppk_recorder_stop exports the last window) the run is checked: the flushes
 * that returned 0 equal samples_flushed, which equals samples_exported and the samples the
 * sinks received; every export wrote one file; no export or sink failed. The LAST line of
 * stdout is one JSON object with the figures; the exit status is non-zero if a check
 * failed.
 *
 * Usage: taskstorm [--threads N] [--seconds S] [--rate HZ] [--export-ms M] [--out DIR]
 *                  [--unique-tasks|--steady-tasks] [--codec gzip|zstd|none]
 *                  [--agent-url URL] [--pyroscope-url URL] [--otlp-url URL]
 *                  [--memory-limit BYTES] [--shards N] [--function-ids]
 * --memory-limit sets each window's memory budget (see docs/memory.md); --shards the
 * recorder's shards (ppk_recorder_config.shards; default 1). --function-ids pushes frames
 * by function id (ppk_sample_push_frame_id): each thread interns a function the first
 * time it pushes it and keeps the id, interning again when an id comes back stale.
 * --agent-url also sends each export to a Datadog agent (http://host:port or
 * unix:///path; DD_SERVICE, DD_ENV, DD_TAGS... apply), --pyroscope-url to a Pyroscope
 * server (application "taskstorm"), --otlp-url to an OpenTelemetry collector (OTLP
 * profiles at URL/v1development/profiles, gzip, service.name "taskstorm"; OTEL_* variables
 * apply); their upload counters go to stderr at the end.
 * Open a result with: go tool pprof -top OUT/taskstorm.PID.SEQ.pb.gz
 */
#define _GNU_SOURCE /* gettid() */
#include <pprofkit.h>

#include "../bench/w1.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_THREADS 256

static struct {
    int threads;
    double seconds;
    double rate; /* samples per second per thread; 0: as fast as possible */
    long export_ms;
    const char *out;
    int unique;
    ppk_codec codec;
    const char *agent_url, *pyroscope_url, *otlp_url;
    double memory_limit; /* bytes; 0: the library's default */
    int shards;
    int function_ids;
} opt = {4, 10.0, 1000.0, 1000, "taskstorm-out", 1, PPK_CODEC_GZIP, NULL, NULL, NULL, 0, 1, 0};

static struct w1 w;                 /* read-only once built: shared by the threads */
static atomic_uint_fast64_t task_counter;
static int64_t t_end_ns;            /* CLOCK_MONOTONIC deadline */

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* A field of /proc/self/status in kB (VmRSS, VmHWM), or -1. */
static long proc_status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') {
            kb = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* ---------------------------------------------------------------------------------- */
/* the sink that prints a line per export                                             */

static struct {
    pthread_mutex_t mu;
    uint64_t exports, samples, bytes, window_bytes_max, last_seq, bad_seq;
} rep = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0, 0, 0, 0};

static int report_write(void *opaque, const ppk_export *e) {
    (void)opaque;
    long rss = proc_status_kb("VmRSS");
    pthread_mutex_lock(&rep.mu);
    rep.exports++;
    rep.samples += e->stats.samples_added;
    rep.bytes += e->data.len;
    if (e->stats.memory_bytes > rep.window_bytes_max) rep.window_bytes_max = e->stats.memory_bytes;
    if (e->seq != rep.last_seq + 1) rep.bad_seq++;
    rep.last_seq = e->seq;
    printf("export %4" PRIu64 ": %8" PRIu64 " samples %8" PRIu64 " strings  window %8.2f MiB"
           "  encoded %8.2f MiB in %7.1f ms  rss %7ld kB\n",
           e->seq, e->stats.samples_added, e->stats.strings,
           (double)e->stats.memory_bytes / 1048576.0, (double)e->data.len / 1048576.0,
           e->encode_ms, rss);
    fflush(stdout);
    pthread_mutex_unlock(&rep.mu);
    return 0;
}

/* ---------------------------------------------------------------------------------- */
/* the sampling threads                                                               */

typedef struct worker {
    pthread_t tid;
    ppk_recorder *r;
    int idx;
    uint64_t flushed;   /* flushes that returned 0 */
    uint64_t refused;   /* flushes that returned an error (counted by the recorder) */
    uint64_t interns;   /* with --function-ids: functions interned (again when stale) */
    uint64_t errors;    /* any other call that failed */
    int first_error;
} worker;

/* Pushes W1 function `fn` at its line: by id (interned on first use, and again when
 * stale; `ids` is the thread's cache) or by strings. */
static int push_frame(worker *wk, ppk_sample *s, ppk_function_id *ids, uint16_t fn) {
    if (!ids)
        return ppk_sample_push_frame(s, w.fn_name[fn], w.fn_file[fn], w.fn_line[fn], 0);
    for (;;) {
        if (!ids[fn]) {
            ppk_function f = {w.fn_name[fn], PPK_STR(""), w.fn_file[fn], 0};
            int rc = ppk_recorder_intern_function(wk->r, &f, &ids[fn]);
            if (rc) return rc;
            wk->interns++;
        }
        int rc = ppk_sample_push_frame_id(s, ids[fn], w.fn_line[fn]);
        if (rc != PPK_ESTALE) return rc;
        ids[fn] = 0;
    }
}

static void *work(void *arg) {
    worker *wk = arg;
    ppk_function_id *ids = opt.function_ids ? calloc(W1_FUNCTIONS, sizeof *ids) : NULL;
    if (opt.function_ids && !ids) {
        wk->errors++;
        wk->first_error = PPK_ENOMEM;
        return NULL;
    }
    ppk_sample *s = NULL;
    int rc = ppk_sample_create(wk->r, &s);
    if (rc != 0) {
        wk->errors++;
        wk->first_error = rc;
        free(ids);
        return NULL;
    }
    uint64_t rng = W1_SEED + 0x1000u * (uint64_t)(wk->idx + 1);
    char thread_name[32], task[32];
    int tn_len = snprintf(thread_name, sizeof thread_name, "Thread-%d", wk->idx + 1);
    int64_t tid = (int64_t)gettid();
    int64_t period_ns = opt.rate > 0 ? (int64_t)(1e9 / opt.rate) : 0;
    int64_t prev = mono_ns(), next = prev;

#define CALL(expr)                                                                         \
    do {                                                                                   \
        int rc_ = (expr);                                                                  \
        if (rc_ != 0 && !wk->errors++) wk->first_error = rc_;                              \
    } while (0)

    for (;;) {
        int64_t now = mono_ns();
        if (now >= t_end_ns) break;
        if (period_ns) {
            next += period_ns;
            if (next < now - 1000000000) next = now; /* far behind: do not burst */
            if (next > now) {
                struct timespec ts = {(time_t)(next / 1000000000), (long)(next % 1000000000)};
                clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
                now = mono_ns();
            }
        }
        uint32_t j = (uint32_t)(w1_splitmix64(&rng) % W1_STACKS);
        const uint16_t *fn = w.stack_fn + w.stack_off[j];
        uint64_t k = atomic_fetch_add(&task_counter, 1);
        int task_len = snprintf(task, sizeof task, "Task-%" PRIu64,
                                opt.unique ? k + 1 : k % W1_STEADY_TASKS + 1);

        CALL(ppk_sample_start(s));
        for (uint32_t f = 0; f < w.stack_depth[j]; f++) CALL(push_frame(wk, s, ids, fn[f]));
        CALL(ppk_sample_push_label_num(s, PPK_STR("thread id"), tid, PPK_STR("")));
        CALL(ppk_sample_push_label_str(s, PPK_STR("thread name"),
                                       (ppk_str){thread_name, (size_t)tn_len}));
        CALL(ppk_sample_push_label_str(s, PPK_STR("task name"),
                                       (ppk_str){task, (size_t)task_len}));
        CALL(ppk_sample_set_value(s, 0, 1));
        CALL(ppk_sample_set_value(s, 1, now - prev));
        if (ppk_sample_flush(s) == 0)
            wk->flushed++;
        else
            wk->refused++;
        prev = now;
    }
#undef CALL
    ppk_sample_free(s);
    free(ids);
    return NULL;
}

/* ---------------------------------------------------------------------------------- */

static void usage(FILE *f) {
    fprintf(f,
            "usage: taskstorm [--threads N] [--seconds S] [--rate HZ] [--export-ms M]\n"
            "                 [--out DIR] [--unique-tasks|--steady-tasks]\n"
            "                 [--codec gzip|zstd|none] [--agent-url URL] [--pyroscope-url URL]\n"
            "                 [--otlp-url URL] [--memory-limit BYTES] [--shards N]\n"
            "                 [--function-ids]\n"
            "  --rate HZ: samples per second per thread, 0 = as fast as possible\n"
            "Defaults: --threads 4 --seconds 10 --rate 1000 --export-ms 1000 "
            "--out taskstorm-out --unique-tasks --codec gzip\n");
}

static int parse_double(const char *s, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || !end || *end || !*s || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* `s` as the body of a JSON string, into out[cap]. */
static void json_escape(const char *s, char *out, size_t cap) {
    size_t n = 0;
    for (; *s && n + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[n++] = '\\';
            out[n++] = (char)c;
        } else if (c < 0x20) {
            n += (size_t)snprintf(out + n, cap - n, "\\u%04x", c);
        } else {
            out[n++] = (char)c;
        }
    }
    out[n] = 0;
}

/* Files OUT/taskstorm.PID.*.EXT, and any other file with our pid (a temporary). */
static void count_files(const char *dir, const char *ext, long *ours, long *other) {
    char prefix[64];
    int np = snprintf(prefix, sizeof prefix, "taskstorm.%ld.", (long)getpid());
    char pid_s[32];
    snprintf(pid_s, sizeof pid_s, "%ld", (long)getpid());
    *ours = *other = 0;
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    size_t el = strlen(ext);
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (!strncmp(de->d_name, prefix, (size_t)np) && l > el &&
            !strcmp(de->d_name + l - el, ext))
            (*ours)++;
        else if (strstr(de->d_name, pid_s))
            (*other)++;
    }
    closedir(d);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        double x;
        if (!strcmp(a, "--unique-tasks")) {
            opt.unique = 1;
        } else if (!strcmp(a, "--steady-tasks")) {
            opt.unique = 0;
        } else if (!strcmp(a, "--function-ids")) {
            opt.function_ids = 1;
        } else if (!strcmp(a, "--threads") && v) {
            if (parse_double(v, 1, MAX_THREADS, &x) || x != (int)x) goto bad;
            opt.threads = (int)x;
            i++;
        } else if (!strcmp(a, "--seconds") && v) {
            if (parse_double(v, 0.001, 1e6, &x)) goto bad;
            opt.seconds = x;
            i++;
        } else if (!strcmp(a, "--rate") && v) {
            if (parse_double(v, 0, 1e9, &x)) goto bad;
            opt.rate = x;
            i++;
        } else if (!strcmp(a, "--export-ms") && v) {
            if (parse_double(v, 1, 1e9, &x) || x != (long)x) goto bad;
            opt.export_ms = (long)x;
            i++;
        } else if (!strcmp(a, "--out") && v) {
            opt.out = v;
            i++;
        } else if (!strcmp(a, "--memory-limit") && v) {
            if (parse_double(v, 65536, 1e15, &x) || x != (double)(uint64_t)x) goto bad;
            opt.memory_limit = x;
            i++;
        } else if (!strcmp(a, "--shards") && v) {
            if (parse_double(v, 1, 64, &x) || x != (int)x) goto bad;
            opt.shards = (int)x;
            i++;
        } else if (!strcmp(a, "--agent-url") && v) {
            opt.agent_url = v;
            i++;
        } else if (!strcmp(a, "--pyroscope-url") && v) {
            opt.pyroscope_url = v;
            i++;
        } else if (!strcmp(a, "--otlp-url") && v) {
            opt.otlp_url = v;
            i++;
        } else if (!strcmp(a, "--codec") && v) {
            if (!strcmp(v, "gzip")) opt.codec = PPK_CODEC_GZIP;
            else if (!strcmp(v, "zstd")) opt.codec = PPK_CODEC_ZSTD;
            else if (!strcmp(v, "none")) opt.codec = PPK_CODEC_NONE;
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
        fprintf(stderr, "taskstorm: bad argument: %s%s%s\n", a, v ? " " : "", v ? v : "");
        usage(stderr);
        return 2;
    }

    long rss_start = proc_status_kb("VmRSS");
    if (mkdir(opt.out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "taskstorm: mkdir %s: %s\n", opt.out, strerror(errno));
        return 1;
    }
    if (w1_init(&w) != 0) {
        fprintf(stderr, "taskstorm: out of memory building the W1 stacks\n");
        return 1;
    }

    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    cfg.profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.profile.sample_types[1] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.profile.n_sample_types = 2;
    cfg.profile.period_type = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.profile.period = opt.rate > 0 ? (int64_t)(1e9 / opt.rate) : 1;
    cfg.codec = opt.codec;
    if (opt.memory_limit > 0) cfg.profile.memory_limit = (size_t)opt.memory_limit;
    cfg.shards = (size_t)opt.shards;
    cfg.export_period_ms = opt.export_ms;
    cfg.out_dir = ppk_cstr(opt.out);
    cfg.name = PPK_STR("taskstorm");
    const char *ext = opt.codec == PPK_CODEC_ZSTD ? ".pb.zst"
                      : opt.codec == PPK_CODEC_NONE ? ".pb" : ".pb.gz";

    ppk_recorder *r = NULL;
    int rc = ppk_recorder_create(&cfg, &r);
    ppk_sink report = {report_write, NULL, NULL};
    if (rc == 0) rc = ppk_recorder_add_sink(r, &report);
    ppk_sink up[3];
    const char *up_name[3];
    int n_up = 0;
    char uerr[256] = "";
    if (rc == 0 && opt.agent_url) {
        ppk_datadog_config dc;
        ppk_datadog_config_init(&dc);
        rc = ppk_datadog_config_from_env(&dc, uerr, sizeof uerr);
        dc.agent_url = ppk_cstr(opt.agent_url);
        if (!dc.service.len) dc.service = PPK_STR("taskstorm");
        if (rc == 0) rc = ppk_sink_datadog(&dc, &up[n_up], uerr, sizeof uerr);
        if (rc == 0) rc = ppk_recorder_add_sink(r, &up[n_up]);
        up_name[n_up++] = "datadog";
    }
    if (rc == 0 && opt.pyroscope_url) {
        ppk_pyroscope_config pc;
        ppk_pyroscope_config_init(&pc);
        pc.server_address = ppk_cstr(opt.pyroscope_url);
        pc.application_name = PPK_STR("taskstorm");
        pc.sample_rate = opt.rate > 0 ? (int64_t)opt.rate : 100;
        rc = ppk_sink_pyroscope(&pc, &up[n_up], uerr, sizeof uerr);
        if (rc == 0) rc = ppk_recorder_add_sink(r, &up[n_up]);
        up_name[n_up++] = "pyroscope";
    }
    if (rc == 0 && opt.otlp_url) {
        ppk_otlp_config oc;
        ppk_otlp_config_init(&oc);
        oc.gzip = 1;
        rc = ppk_otlp_config_from_env(&oc, uerr, sizeof uerr);
        oc.endpoint = ppk_cstr(opt.otlp_url);
        oc.profiles_endpoint = PPK_STR("");
        if (!oc.resource.service_name.len) oc.resource.service_name = PPK_STR("taskstorm");
        if (rc == 0) rc = ppk_sink_otlp(&oc, &up[n_up], uerr, sizeof uerr);
        if (rc == 0) rc = ppk_recorder_add_sink(r, &up[n_up]);
        up_name[n_up++] = "otlp";
    }
    if (uerr[0]) fprintf(stderr, "taskstorm: upload sink: %s\n", uerr);
    if (rc != 0) {
        fprintf(stderr, "taskstorm: creating the recorder: %s\n", ppk_strerror(rc));
        ppk_recorder_free(r);
        w1_free(&w);
        return 1;
    }

    printf("taskstorm: %d threads, %.3g s, %s, %s task names, export every %ld ms to "
           "%s/taskstorm.%ld.SEQ%s\n",
           opt.threads, opt.seconds,
           opt.rate > 0 ? "rate-limited" : "as fast as possible",
           opt.unique ? "unique" : "steady", opt.export_ms, opt.out, (long)getpid(), ext);
    if (opt.rate > 0) printf("taskstorm: %.0f samples/s per thread\n", opt.rate);
    fflush(stdout);

    int status = 0;
    worker workers[MAX_THREADS];
    memset(workers, 0, sizeof workers);
    int64_t t0 = mono_ns();
    t_end_ns = t0 + (int64_t)(opt.seconds * 1e9);
    rc = ppk_recorder_start(r);
    if (rc != 0) {
        fprintf(stderr, "taskstorm: ppk_recorder_start: %s\n", ppk_strerror(rc));
        status = 1;
    }
    int started = 0;
    for (int i = 0; i < opt.threads && status == 0; i++) {
        workers[i].r = r;
        workers[i].idx = i;
        if (pthread_create(&workers[i].tid, NULL, work, &workers[i]) != 0) {
            fprintf(stderr, "taskstorm: pthread_create failed\n");
            status = 1;
            break;
        }
        started++;
    }
    uint64_t flushed = 0, refused = 0, errors = 0, interns = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(workers[i].tid, NULL);
        flushed += workers[i].flushed;
        refused += workers[i].refused;
        errors += workers[i].errors;
        interns += workers[i].interns;
        if (workers[i].errors)
            fprintf(stderr, "taskstorm: thread %d: %" PRIu64 " calls failed, the first: %s\n",
                    i, workers[i].errors, ppk_strerror(workers[i].first_error));
    }
    double run_s = (double)(mono_ns() - t0) * 1e-9;

    ppk_recorder_stop(r); /* exports the last window */
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    long rss_end = proc_status_kb("VmRSS");
    for (int i = 0; i < n_up; i++) {
        ppk_upload_stats us;
        ppk_sink_upload_flush(&up[i], 5000);
        ppk_sink_upload_stats(&up[i], &us);
        fprintf(stderr,
                "taskstorm: %s uploads: %" PRIu64 " queued, %" PRIu64 " sent (%" PRIu64
                " bytes), %" PRIu64 " retries, dropped %" PRIu64 " queue full, %" PRIu64
                " failed; last HTTP status %d\n",
                up_name[i], us.queued, us.sent, us.bytes_sent, us.retries,
                us.dropped_queue_full, us.dropped_failed, us.last_http_status);
    }
    ppk_recorder_free(r);
    long rss_peak = proc_status_kb("VmHWM");
    if (rss_peak < rss_end) rss_peak = rss_end; /* the kernel updates VmHWM lazily */
    w1_free(&w);

    long files = 0, stray = 0;
    count_files(opt.out, ext, &files, &stray);

    /* The checks. */
#define EXPECT(cond, ...)                                                                  \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            fprintf(stderr, "taskstorm: check failed: " __VA_ARGS__);                      \
            fprintf(stderr, "\n");                                                         \
            status = 1;                                                                    \
        }                                                                                  \
    } while (0)
    pthread_mutex_lock(&rep.mu);
    EXPECT(errors == 0, "%" PRIu64 " builder calls failed", errors);
    EXPECT(st.samples_flushed == flushed,
           "samples_flushed %" PRIu64 " but %" PRIu64 " flushes returned 0", st.samples_flushed,
           flushed);
    EXPECT(st.samples_exported == st.samples_flushed,
           "samples_exported %" PRIu64 " != samples_flushed %" PRIu64, st.samples_exported,
           st.samples_flushed);
    EXPECT(rep.samples == flushed,
           "the sinks received %" PRIu64 " samples, %" PRIu64 " were flushed", rep.samples,
           flushed);
    EXPECT(rep.exports >= st.windows_exported && st.windows_exported > 0,
           "%" PRIu64 " exports reached the sink, windows_exported %" PRIu64, rep.exports,
           st.windows_exported);
    EXPECT(rep.bad_seq == 0, "export seq numbers are not 1, 2, 3, ...");
    EXPECT((uint64_t)files == rep.exports,
           "%ld files %s/taskstorm.%ld.*%s for %" PRIu64 " exports", files, opt.out,
           (long)getpid(), ext, rep.exports);
    EXPECT(stray == 0, "%ld other files with this pid in %s (temporaries?)", stray, opt.out);
    EXPECT(st.export_failures == 0 && st.samples_lost_export == 0,
           "%" PRIu64 " exports failed, %" PRIu64 " samples lost", st.export_failures,
           st.samples_lost_export);
    EXPECT(st.sink_failures == 0, "%" PRIu64 " sink writes failed", st.sink_failures);
    EXPECT(refused == st.samples_dropped_nomem + st.samples_dropped_closed +
                          st.samples_dropped_stale,
           "%" PRIu64 " flushes refused, the recorder counted %" PRIu64, refused,
           st.samples_dropped_nomem + st.samples_dropped_closed + st.samples_dropped_stale);
    EXPECT(flushed > 0, "no sample was flushed");
#undef EXPECT

    char out_json[2048];
    json_escape(opt.out, out_json, sizeof out_json);
    printf("taskstorm: %" PRIu64 " samples in %.2f s (%.0f/s), %" PRIu64 " exports, %" PRIu64
           " bytes written, largest window %.2f MiB, export max %.1f ms; %s\n",
           flushed, run_s, run_s > 0 ? (double)flushed / run_s : 0.0, rep.exports, rep.bytes,
           (double)st.window_bytes_peak / 1048576.0, st.export_ms_max,
           status ? "FAILED" : "all checks passed");
    printf("{\"threads\": %d, \"seconds\": %.3f, \"rate\": %.0f, \"unique_tasks\": %s, "
           "\"function_ids\": %s, \"interns\": %" PRIu64 ", \"functions\": %" PRIu64
           ", \"functions_evicted\": %" PRIu64 ", \"samples_dropped_stale\": %" PRIu64 ", "
           "\"samples_flushed\": %" PRIu64 ", \"samples_exported\": %" PRIu64
           ", \"flushes_ok\": %" PRIu64 ", \"flushes_refused\": %" PRIu64
           ", \"windows\": %" PRIu64 ", \"exports_to_sinks\": %" PRIu64 ", \"files\": %ld"
           ", \"bytes_written\": %" PRIu64 ", \"degraded\": {\"samples_dropped_nomem\": %" PRIu64
           ", \"samples_dropped_closed\": %" PRIu64 ", \"samples_lost_export\": %" PRIu64
           ", \"export_failures\": %" PRIu64 ", \"sink_failures\": %" PRIu64,
           opt.threads, run_s, opt.rate, opt.unique ? "true" : "false",
           opt.function_ids ? "true" : "false", interns, st.functions, st.functions_evicted,
           st.samples_dropped_stale, st.samples_flushed,
           st.samples_exported, flushed, refused, st.windows_exported, rep.exports, files,
           rep.bytes, st.samples_dropped_nomem, st.samples_dropped_closed,
           st.samples_lost_export, st.export_failures, st.sink_failures);
#define FIELD(name, what) printf(", \"" #name "\": %" PRIu64, st.name);
    PPK_REPAIRS(FIELD)
    PPK_DEGRADATIONS(FIELD)
#undef FIELD
    printf("}, \"memory_limit\": %" PRIu64
           ", \"window_bytes_max\": %" PRIu64 ", \"window_bytes_peak\": %" PRIu64
           ", \"export_ms_max\": %.3f, \"export_ms_total\": %.3f"
           ", \"rss_kb_start\": %ld, \"rss_kb_end\": %ld, \"rss_kb_peak\": %ld"
           ", \"pid\": %ld, \"out\": \"%s\", \"ok\": %s}\n",
           (uint64_t)cfg.profile.memory_limit, rep.window_bytes_max,
           st.window_bytes_peak, st.export_ms_max, st.export_ms_total, rss_start, rss_end,
           rss_peak, (long)getpid(), out_json, status ? "false" : "true");
    pthread_mutex_unlock(&rep.mu);
    return status;
}
