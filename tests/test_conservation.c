/*
 * test_conservation.c - every flushed sample is in exactly one export (G3), under load.
 *
 * Four producer threads build samples over many calls, with sched_yield() between the
 * calls so that exports interleave with half-built samples. Every sample carries a new
 * "task name" ("task-<thread>-<k>"), a numeric "thread id" and per-thread values. A fifth
 * thread calls ppk_recorder_export(r, &e) every millisecond and writes each export to a
 * file; after the producers join, a final export takes the rest. Each producer counts
 * what flush accepted (returned 0).
 *
 * Then two readers that share no code with the library check the files:
 *   - tests/pprof_read.h, here, in C;
 *   - tests/check_conservation.py (stdlib Python, its own protobuf decoder, cross-checked
 *     with protoc on a few files), from manifest.json written here.
 * Both check: per thread and per value type, the sums over all exports equal the sums of
 * the accepted flushes; the task names over all exports are exactly those flushed, each
 * in exactly one export; a thread's samples appear in export order (sample k never in a
 * later export than sample k+1). And the recorder's statistics: samples_flushed ==
 * samples_exported == accepted flushes after the final export, windows_exported == the
 * number of exports, export seq 1, 2, 3, ...
 *
 * The run is done three times: raw protobuf (PPK_CODEC_NONE), gzip, and gzip with the
 * recorder in three shards (each export then holds three windows). Samples per thread:
 * PPK_CONSERVATION_SAMPLES, else 20000 (4000 under AddressSanitizer, 1500 under
 * ThreadSanitizer, which are several times slower). The files are removed when the test
 * passes and kept (the directory is printed) when it fails.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
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

/* The values of sample k on thread t (small: no saturation is possible). */
static void values_of(int t, long k, int64_t v[NTYPES]) {
    v[0] = 1;
    v[1] = t + 1;
    v[2] = (k * 7 + t) % 1000;
}

typedef struct producer {
    pthread_t tid;
    ppk_recorder *r;
    int t;
    int64_t sums[NTYPES]; /* over accepted flushes */
    long accepted;
    uint8_t *ok;          /* ok[k]: flush of sample k returned 0 */
    long errors;          /* calls other than flush that failed */
    int first_error;
} producer;

static void *produce(void *arg) {
    producer *p = arg;
    ppk_sample *s = NULL;
    if (ppk_sample_create(p->r, &s) != 0) {
        p->errors++;
        return NULL;
    }
    char leaf[32], task[32];
#define STEP(call)                                                                         \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != 0) {                                                                    \
            if (!p->errors++) p->first_error = rc_;                                        \
        }                                                                                  \
        sched_yield();                                                                     \
    } while (0)
    for (long k = 0; k < n_per_thread; k++) {
        int64_t v[NTYPES];
        values_of(p->t, k, v);
        STEP(ppk_sample_start(s));
        int n = snprintf(leaf, sizeof leaf, "leaf_%d_%ld", p->t, k % 7);
        STEP(ppk_sample_push_frame(s, (ppk_str){leaf, (size_t)n}, PPK_STR("work.py"),
                                   10 + k % 7, 0));
        STEP(ppk_sample_push_frame(s, k % 2 ? PPK_STR("mid_odd") : PPK_STR("mid_even"),
                                   PPK_STR("work.py"), 5, 0));
        STEP(ppk_sample_push_frame(s, PPK_STR("main"), PPK_STR("main.py"), 1, 0));
        STEP(ppk_sample_push_label_num(s, PPK_STR("thread id"), p->t, PPK_STR("")));
        n = snprintf(task, sizeof task, "task-%d-%ld", p->t, k);
        STEP(ppk_sample_push_label_str(s, PPK_STR("task name"), (ppk_str){task, (size_t)n}));
        STEP(ppk_sample_set_values(s, v, NTYPES));
        if (ppk_sample_flush(s) == 0) {
            p->ok[k] = 1;
            p->accepted++;
            for (int i = 0; i < NTYPES; i++) p->sums[i] += v[i];
        }
    }
#undef STEP
    ppk_sample_free(s);
    return NULL;
}

typedef struct exporter {
    pthread_t tid;
    ppk_recorder *r;
    const char *dir;
    const char *ext;
    atomic_int stop;
    uint64_t count;     /* exports written */
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

/* One export: checks its seq and writes it to DIR/exp.SEQ.EXT. */
static void export_one(exporter *x) {
    ppk_export e;
    memset(&e, 0, sizeof e);
    int rc = ppk_recorder_export(x->r, &e);
    if (rc != 0) {
        if (!x->failures++) x->first_rc = rc;
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
    x->count++;
    ppk_export_free(&e);
}

static void *export_loop(void *arg) {
    exporter *x = arg;
    while (!atomic_load(&x->stop)) {
        export_one(x);
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

/* Checks the files with the C reader. */
static void check_files_c(const exporter *x, const producer *prod) {
    uint32_t *where[THREADS]; /* export index + 1 of each (t, k), 0: not seen */
    int64_t sums[THREADS][NTYPES];
    memset(sums, 0, sizeof sums);
    for (int t = 0; t < THREADS; t++) where[t] = calloc((size_t)n_per_thread, sizeof(uint32_t));
    long dups = 0, foreign = 0, malformed = 0, order = 0;
    for (uint64_t i = 0; i < x->count; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", x->dir, x->names[i]);
        uint8_t *data = NULL;
        size_t len = 0;
        pr_profile pp;
        if (pr_read_file(path, &data, &len) != 0 || pr_parse(data, len, &pp) != 0) {
            if (!malformed++) fprintf(stderr, "cannot read or parse %s\n", path);
            free(data);
            continue;
        }
        free(data);
        CHECK_EQ_U64(pp.nsample_type, NTYPES);
        for (size_t j = 0; j < pp.nsamples; j++) {
            const pr_sample *s = &pp.samples[j];
            int64_t t = pr_label_num(&pp, s, "thread id", -1);
            pr_str task = pr_label_str(&pp, s, "task name");
            char name[64];
            int tt = -1;
            long k = -1;
            if (task.ptr && task.len < sizeof name) {
                memcpy(name, task.ptr, task.len);
                name[task.len] = 0;
                if (sscanf(name, "task-%d-%ld", &tt, &k) != 2) tt = -1;
            }
            if (t < 0 || t >= THREADS || tt != t || k < 0 || k >= n_per_thread ||
                s->nval != NTYPES) {
                if (!foreign++)
                    fprintf(stderr, "%s: unexpected sample (thread id %lld, task %.*s)\n",
                            x->names[i], (long long)t, (int)task.len, task.ptr ? task.ptr : "");
                continue;
            }
            if (where[t][k]) {
                if (!dups++)
                    fprintf(stderr, "%s: task-%d-%ld already in export %u\n", x->names[i],
                            tt, k, where[t][k]);
                continue;
            }
            where[t][k] = (uint32_t)i + 1;
            int64_t v[NTYPES];
            values_of((int)t, k, v);
            for (int m = 0; m < NTYPES; m++) {
                sums[t][m] += s->val[m];
                if (s->val[m] != v[m] && !foreign++)
                    fprintf(stderr, "task-%d-%ld: value %d is %lld, flushed %lld\n", tt, k, m,
                            (long long)s->val[m], (long long)v[m]);
            }
        }
        pr_free(&pp);
    }
    CHECK_EQ_INT(malformed, 0);
    CHECK_EQ_INT(foreign, 0);
    CHECK_EQ_INT(dups, 0);
    long missing = 0, extra = 0;
    for (int t = 0; t < THREADS; t++) {
        uint32_t last = 0;
        for (long k = 0; k < n_per_thread; k++) {
            if (prod[t].ok[k] && !where[t][k] && !missing++)
                fprintf(stderr, "task-%d-%ld was flushed and is in no export\n", t, k);
            if (!prod[t].ok[k] && where[t][k] && !extra++)
                fprintf(stderr, "task-%d-%ld was refused and is exported\n", t, k);
            if (where[t][k]) {
                if (where[t][k] < last && !order++)
                    fprintf(stderr, "task-%d-%ld is in export %u, an earlier sample in %u\n", t,
                            k, where[t][k], last);
                last = where[t][k];
            }
        }
        for (int m = 0; m < NTYPES; m++) CHECK_EQ_INT(sums[t][m], prod[t].sums[m]);
        free(where[t]);
    }
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(extra, 0);
    CHECK_EQ_INT(order, 0);
}

static void write_manifest(const exporter *x, const producer *prod, const char *codec) {
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

static void run(ppk_codec codec, const char *codec_name, const char *ext, size_t shards) {
    int before = check_failures_;
    char dir[] = "/tmp/ppk-conservation.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);

    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    cfg.profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.profile.sample_types[1] = (ppk_value_type){PPK_STR("weight"), PPK_STR("units")};
    cfg.profile.sample_types[2] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.profile.n_sample_types = NTYPES;
    cfg.codec = codec;
    cfg.shards = shards;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;

    producer prod[THREADS];
    exporter x;
    memset(prod, 0, sizeof prod);
    memset(&x, 0, sizeof x);
    x.r = r;
    x.dir = dir;
    x.ext = ext;
    CHECK_EQ_INT(pthread_create(&x.tid, NULL, export_loop, &x), 0);
    for (int t = 0; t < THREADS; t++) {
        prod[t].r = r;
        prod[t].t = t;
        prod[t].ok = calloc((size_t)n_per_thread, 1);
        CHECK_EQ_INT(pthread_create(&prod[t].tid, NULL, produce, &prod[t]), 0);
    }
    long accepted = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(prod[t].tid, NULL);
        accepted += prod[t].accepted;
        if (prod[t].errors)
            fprintf(stderr, "thread %d: %ld calls failed, the first with %s\n", t,
                    prod[t].errors, ppk_strerror(prod[t].first_error));
        CHECK_EQ_INT(prod[t].errors, 0);
    }
    atomic_store(&x.stop, 1);
    pthread_join(x.tid, NULL);
    export_one(&x); /* the final export: everything left */

    CHECK_EQ_INT(x.failures, 0);
    if (x.failures) fprintf(stderr, "first export failure: %s\n", ppk_strerror(x.first_rc));
    CHECK_EQ_U64(x.bad_seq, 0);
    /* Nothing should be refused here: no memory limit, no shutdown. */
    CHECK_EQ_INT(accepted, (long)THREADS * n_per_thread);

    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_flushed, (uint64_t)accepted);
    CHECK_EQ_U64(st.samples_exported, st.samples_flushed);
    CHECK_EQ_U64(st.windows_exported, x.count);
    CHECK_EQ_U64(st.samples_dropped_nomem + st.samples_dropped_closed + st.samples_lost_export +
                     st.export_failures,
                 0);
    printf("  %s: %ld samples on %d threads, %zu shard(s), in %llu exports (%s)\n",
           codec_name, accepted, THREADS, shards ? shards : 1, (unsigned long long)x.count,
           dir);

    check_files_c(&x, prod);
    write_manifest(&x, prod, codec_name);

    const char *src = getenv("PPK_SOURCE_DIR");
    if (src) {
        char cmd[8192];
        snprintf(cmd, sizeof cmd, "python3 '%s/tests/check_conservation.py' '%s'", src, dir);
        int rc = system(cmd);
        CHECK_EQ_INT(rc, 0);
    } else {
        printf("  (PPK_SOURCE_DIR unset: the Python reader is skipped)\n");
    }

    ppk_recorder_free(r);
    for (int t = 0; t < THREADS; t++) free(prod[t].ok);
    free(x.names);
    if (check_failures_ == before)
        pr_rm_dir(dir);
    else
        fprintf(stderr, "files kept in %s\n", dir);
}

static void test_conservation_raw(void) { run(PPK_CODEC_NONE, "none", "pb", 1); }
static void test_conservation_gzip(void) { run(PPK_CODEC_GZIP, "gzip", "pb.gz", 1); }
/* Three shards for four producers: two share one, each export encodes three windows. */
static void test_conservation_sharded(void) { run(PPK_CODEC_GZIP, "gzip", "pb.gz", 3); }

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
    return check_summary();
}
