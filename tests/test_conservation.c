/*
 * test_conservation.c - every flushed sample is in exactly one export (G3), under load.
 *
 * Four producer threads (tests/conserve.h) build samples over many calls, with
 * sched_yield() between the calls so that exports interleave with half-built samples.
 * Every sample carries a new "task name" ("task-<thread>-<k>"), a numeric "thread id"
 * and per-thread values; each producer counts what flush accepted (returned 0). The
 * exports are taken in one of four ways:
 *   - by the caller: a fifth thread calls ppk_recorder_export(r, &e) every millisecond
 *     and writes each export to a file; after the producers join, a final export takes
 *     the rest. Raw protobuf, gzip, and gzip with the recorder in three shards (each
 *     export then holds three windows);
 *   - the same with a 64 KiB memory limit, exports every 20 ms: windows overflow, task
 *     names become the placeholder and samples the overflow sample; the values must
 *     still all be there;
 *   - through a sink: the fifth thread calls ppk_recorder_export(r, NULL), a sink keeps
 *     each export;
 *   - by the background exporter to that sink, every 2 ms, the last window exported by
 *     ppk_recorder_free.
 *
 * tests/conserve.h's reader, which shares no code with the library, checks what the
 * exports hold: per thread and per value type, the sums over all exports equal the sums
 * of the accepted flushes; the task names over all exports are exactly those flushed,
 * each in exactly one export; a thread's samples appear in export order (sample k never
 * in a later export than sample k+1). The files of the caller's runs are read a second
 * time by tests/check_conservation.py (stdlib Python, its own protobuf decoder,
 * cross-checked with protoc on a few files), from manifest.json written here. And the
 * recorder's statistics: samples_flushed == samples_exported == accepted flushes after
 * the final export, windows_exported == the number of exports, export seq 1, 2, 3, ...
 *
 * Samples per thread: PPK_CONSERVATION_SAMPLES, else 20000 (4000 under
 * AddressSanitizer, 1500 under ThreadSanitizer, which are several times slower). The
 * files are removed when the test passes and kept (the directory is printed) when it
 * fails.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "conserve.h"
#include "pprof_read.h"
#include "pprofkit.h"

#define THREADS 4
#define NTYPES 3

#if defined(__SANITIZE_THREAD__)
#define DEFAULT_SAMPLES 1500
#elif defined(__SANITIZE_ADDRESS__)
#define DEFAULT_SAMPLES 4000
#else
#define DEFAULT_SAMPLES 20000
#endif

static long n_per_thread;

/* How a run takes its exports (see the top). */
enum { BY_CALLER, BY_SINK, BY_BACKGROUND };

typedef struct exporter {
    pthread_t tid;
    ppk_recorder *r;
    int to_sink;        /* ppk_recorder_export(r, NULL): the sinks take them */
    long period_us;
    const char *dir;    /* caller's exports: written there too, for the Python reader */
    const char *ext;
    cv_exports *got;    /* caller's exports, kept */
    atomic_int stop;
    uint64_t count;     /* exports made */
    uint64_t bad_seq;   /* exports whose seq was not count + 1 */
    int failures;       /* export or write failures */
    int first_rc;
    char (*names)[64];  /* file names, in export order */
    size_t cap;
} exporter;

static int write_file(const char *path, const uint8_t *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(data, 1, len, f) == len;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

/* One export: to the sinks, or to the caller (its seq checked, kept and written to
 * DIR/exp.SEQ.EXT). */
static void export_one(exporter *x) {
    ppk_export e;
    memset(&e, 0, sizeof e);
    int rc = ppk_recorder_export(x->r, x->to_sink ? NULL : &e);
    if (rc != 0) {
        if (!x->failures++) x->first_rc = rc;
        return;
    }
    if (x->to_sink) {
        x->count++;
        return;
    }
    if (e.seq != x->count + 1) x->bad_seq++;
    if (x->count == x->cap) {
        x->cap = x->cap ? x->cap * 2 : 1024;
        x->names = realloc(x->names, x->cap * sizeof *x->names);
        if (!x->names) abort();
    }
    snprintf(x->names[x->count], sizeof x->names[0], "exp.%06llu.%s",
             (unsigned long long)e.seq, x->ext);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", x->dir, x->names[x->count]);
    if (write_file(path, e.data.data, e.data.len) != 0 && !x->failures++) x->first_rc = -999;
    cv_add(x->got, e.data.data, e.data.len);
    x->count++;
    ppk_export_free(&e);
}

static void *export_loop(void *arg) {
    exporter *x = arg;
    while (!atomic_load(&x->stop)) {
        export_one(x);
        struct timespec ts = {0, x->period_us * 1000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void write_manifest(const exporter *x, const cv_producer *prod, const char *codec) {
    char path[4096];
    snprintf(path, sizeof path, "%s/manifest.json", x->dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (!f) return;
    fprintf(f, "{\"codec\": \"%s\", \"threads\": %d, \"samples_per_thread\": %ld,\n", codec,
            THREADS, n_per_thread);
    fprintf(f, " \"sample_types\": [[\"samples\", \"count\"], [\"weight\", \"units\"], "
               "[\"wall-time\", \"nanoseconds\"]],\n");
    fprintf(f, " \"task_format\": \"task-{thread}-{k}\", \"thread_label\": \"thread id\",\n");
    fprintf(f, " \"files\": [");
    for (uint64_t i = 0; i < x->count; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", x->names[i]);
    fprintf(f, "],\n \"per_thread\": [");
    for (int t = 0; t < THREADS; t++) {
        fprintf(f, "%s\n  {\"thread\": %d, \"accepted\": %ld, \"sums\": [", t ? "," : "", t,
                prod[t].accepted);
        for (int m = 0; m < NTYPES; m++)
            fprintf(f, "%s%lld", m ? ", " : "", (long long)prod[t].sums[m]);
        fprintf(f, "], \"refused\": [");
        int first = 1;
        for (long k = 0; k < n_per_thread; k++)
            if (!prod[t].ok[k]) {
                fprintf(f, "%s%ld", first ? "" : ", ", k);
                first = 0;
            }
        fprintf(f, "]}");
    }
    fprintf(f, "\n]}\n");
    CHECK(fclose(f) == 0);
}

typedef struct mode {
    ppk_codec codec;
    const char *codec_name, *ext;
    size_t shards;
    int how;             /* BY_CALLER, BY_SINK, BY_BACKGROUND */
    size_t memory_limit; /* 0: the default */
} mode;

static void run(const mode *md) {
    int before = check_failures_;
    char dir[] = "/tmp/ppk-conservation.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);

    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    cfg.profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.profile.sample_types[1] = (ppk_value_type){PPK_STR("weight"), PPK_STR("units")};
    cfg.profile.sample_types[2] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.profile.n_sample_types = NTYPES;
    if (md->memory_limit) {
        cfg.profile.memory_limit = md->memory_limit;
        cfg.profile.chunk_size = md->memory_limit / 4;
        cfg.profile.keep_bytes = md->memory_limit;
    }
    cfg.codec = md->codec;
    cfg.shards = md->shards;
    cfg.export_period_ms = 2;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    cv_exports got;
    cv_exports_init(&got);
    if (md->how != BY_CALLER) {
        ppk_sink sink = {cv_sink_write, NULL, &got};
        CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
    }

    cv_producer prod[THREADS];
    exporter x;
    memset(&x, 0, sizeof x);
    x.r = r;
    x.to_sink = md->how == BY_SINK;
    x.period_us = md->memory_limit ? 20000 : 1000;
    x.dir = dir;
    x.ext = md->ext;
    x.got = &got;
    if (md->how == BY_BACKGROUND)
        CHECK_EQ_INT(ppk_recorder_start(r), 0);
    else
        CHECK_EQ_INT(pthread_create(&x.tid, NULL, export_loop, &x), 0);
    cv_start(prod, THREADS, r, NTYPES, n_per_thread, NULL, 1);
    long accepted = cv_join(prod, THREADS);
    /* Nothing should be refused here: no shutdown, and a full window degrades. */
    CHECK_EQ_INT(accepted, (long)THREADS * n_per_thread);
    ppk_recorder_stats st;
    if (md->how == BY_BACKGROUND) {
        /* The background exporter's last export is ppk_recorder_free's. */
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.samples_flushed, (uint64_t)accepted);
        ppk_recorder_free(r);
        r = NULL;
        CHECK(got.n >= 2);
    } else {
        atomic_store(&x.stop, 1);
        pthread_join(x.tid, NULL);
        export_one(&x); /* the final export: everything left */
        CHECK_EQ_INT(x.failures, 0);
        if (x.failures) fprintf(stderr, "first export failure: %s\n", ppk_strerror(x.first_rc));
        CHECK_EQ_U64(x.bad_seq, 0);
        CHECK_EQ_U64(got.n, x.count);
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.samples_flushed, (uint64_t)accepted);
        CHECK_EQ_U64(st.samples_exported, st.samples_flushed);
        CHECK_EQ_U64(st.windows_exported, x.count);
        CHECK_EQ_U64(st.samples_dropped_nomem + st.samples_dropped_closed +
                         st.samples_lost_export + st.export_failures + st.sink_failures,
                     0);
    }
    cv_opts o = {NULL, 1, md->memory_limit != 0};
    cv_result res;
    cv_check(&got, prod, THREADS, &o, &res);
    printf("  %s, %zu shard(s), %s%s: %ld samples on %d threads in %zu exports (%s)\n",
           md->codec_name, md->shards ? md->shards : 1,
           md->how == BY_CALLER ? "by the caller" : md->how == BY_SINK ? "to a sink"
                                                                      : "background exporter",
           md->memory_limit ? ", memory limit" : "", accepted, THREADS, got.n, dir);
    if (md->memory_limit) {
        /* The limit did degrade: samples lost their labels, and every value stayed. */
        printf("    %ld samples without their task name; overflowed %llu, strings dropped "
               "%llu\n",
               res.unattributed, (unsigned long long)st.samples_overflowed,
               (unsigned long long)st.strings_dropped);
        CHECK(res.unattributed > 0);
        CHECK(st.samples_overflowed + st.strings_dropped > 0);
    }

    /* check_conservation.py checks every task name: not those the limit replaced. */
    if (md->how == BY_CALLER && !md->memory_limit) {
        write_manifest(&x, prod, md->codec_name);
        const char *src = getenv("PPK_SOURCE_DIR");
        if (src) {
            char cmd[8192];
            snprintf(cmd, sizeof cmd, "python3 '%s/tests/check_conservation.py' '%s'", src, dir);
            int rc = system(cmd);
            CHECK_EQ_INT(rc, 0);
        } else {
            printf("  (PPK_SOURCE_DIR unset: the Python reader is skipped)\n");
        }
    }

    ppk_recorder_free(r);
    cv_free(prod, THREADS);
    cv_exports_free(&got);
    free(x.names);
    if (check_failures_ == before)
        pr_rm_dir(dir);
    else
        fprintf(stderr, "files kept in %s\n", dir);
}

static void test_conservation_raw(void) {
    run(&(mode){PPK_CODEC_NONE, "none", "pb", 1, BY_CALLER, 0});
}
static void test_conservation_gzip(void) {
    run(&(mode){PPK_CODEC_GZIP, "gzip", "pb.gz", 1, BY_CALLER, 0});
}
/* Three shards for four producers: two share one, each export encodes three windows. */
static void test_conservation_sharded(void) {
    run(&(mode){PPK_CODEC_GZIP, "gzip", "pb.gz", 3, BY_CALLER, 0});
}
static void test_conservation_memory_limit(void) {
    run(&(mode){PPK_CODEC_GZIP, "gzip", "pb.gz", 1, BY_CALLER, 64 * 1024});
}
static void test_conservation_sink(void) {
    run(&(mode){PPK_CODEC_GZIP, "gzip", "pb.gz", 1, BY_SINK, 0});
}
/* With the background exporter and two shards: ppk_recorder_free's export takes the
 * last window. */
static void test_conservation_background(void) {
    run(&(mode){PPK_CODEC_GZIP, "gzip", "pb.gz", 2, BY_BACKGROUND, 0});
}

static void on_alarm(int sig) {
    (void)sig;
    static const char msg[] = "test_conservation: timed out (a deadlock?)\n";
    ssize_t n = write(2, msg, sizeof msg - 1);
    (void)n;
    _exit(3);
}

int main(void) {
    signal(SIGALRM, on_alarm);
    alarm(240);
    const char *env = getenv("PPK_CONSERVATION_SAMPLES");
    n_per_thread = env ? atol(env) : DEFAULT_SAMPLES;
    if (n_per_thread <= 0) n_per_thread = DEFAULT_SAMPLES;
    RUN(test_conservation_raw);
    RUN(test_conservation_gzip);
    RUN(test_conservation_sharded);
    RUN(test_conservation_memory_limit);
    RUN(test_conservation_sink);
    RUN(test_conservation_background);
    return check_summary();
}
