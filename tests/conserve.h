/*
 * conserve.h - the conservation check (G3) shared by the tests: every flushed sample is
 * in exactly one export.
 *
 * Producer threads (cv_produce) build samples over several calls, optionally with
 * sched_yield() between them so that exports interleave with half-built samples. Sample
 * k of thread t names itself: label "task name" = "task-<t>-<k>", numeric label "thread
 * id" = t, values cv_values(t, k); the producer notes which flushes returned 0.
 *
 * cv_check() then reads a list of exports (cv_exports, in export order) with
 * pprof_read.h, which shares no code with the library, and finds: every accepted sample
 * in exactly one export with its own values; no refused sample; no sample it cannot
 * place (except those whose task name starts with `extra`, counted); per thread and
 * value type, the exported sums equal the accepted ones; and, when asked, each thread's
 * samples in export order (sample k never in a later export than sample k + 1).
 *
 * Past a window's memory limit a sample may lose its labels (the overflow sample, or the
 * placeholder string for a new task name): with `degraded` set, samples without a
 * readable task name are summed apart, and the sums are checked over all threads
 * instead: values are conserved whatever detail went (G4). The count of such samples
 * is reported, so that a test can check that its limit really degraded something.
 *
 * Header-only (static inline functions, so that a test may use only some of them).
 */
#ifndef PPK_TESTS_CONSERVE_H
#define PPK_TESTS_CONSERVE_H

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pprof_read.h"
#include "pprofkit.h"

#define CV_MAX_THREADS 8
#define CV_MAX_TYPES 3

/* The values of sample k on thread t: a count of 1, then small numbers (no saturation is
 * possible) that differ by thread and by sample. */
static inline void cv_values(int t, long k, int ntypes, int64_t *v) {
    v[0] = 1;
    if (ntypes > 1) v[1] = 100 * t + k % 13;
    if (ntypes > 2) v[2] = (k * 7 + t) % 1000;
}

typedef struct cv_producer {
    pthread_t tid;     /* cv_start's thread */
    ppk_recorder *r;
    int t;
    int ntypes;
    long max;          /* samples to attempt */
    atomic_int *stop;  /* may be NULL: when set, the thread stops early */
    int yield;         /* sched_yield() between the calls of a sample */
    long n;            /* samples attempted */
    long accepted;
    int64_t sums[CV_MAX_TYPES]; /* over accepted flushes */
    uint8_t *ok;       /* ok[k]: the flush of sample k returned 0 */
    long errors;       /* calls other than flush that failed */
    int first_error;
} cv_producer;

static inline void *cv_produce(void *arg) {
    cv_producer *p = arg;
    ppk_sample *s = NULL;
    if (ppk_sample_create(p->r, &s) != 0) {
        p->errors++;
        return NULL;
    }
    char leaf[32], task[32];
#define CV_STEP(call)                                                                      \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != 0 && !p->errors++) p->first_error = rc_;                                \
        if (p->yield) sched_yield();                                                       \
    } while (0)
    for (long k = 0; k < p->max && !(p->stop && atomic_load(p->stop)); k++) {
        int64_t v[CV_MAX_TYPES];
        cv_values(p->t, k, p->ntypes, v);
        CV_STEP(ppk_sample_start(s));
        int n = snprintf(leaf, sizeof leaf, "leaf_%d_%ld", p->t, k % 7);
        CV_STEP(ppk_sample_push_frame(s, (ppk_str){leaf, (size_t)n}, PPK_STR("work.py"),
                                      10 + k % 7, 0));
        CV_STEP(ppk_sample_push_frame(s, k % 2 ? PPK_STR("mid_odd") : PPK_STR("mid_even"),
                                      PPK_STR("work.py"), 5, 0));
        CV_STEP(ppk_sample_push_frame(s, PPK_STR("main"), PPK_STR("main.py"), 1, 0));
        CV_STEP(ppk_sample_push_label_num(s, PPK_STR("thread id"), p->t, PPK_STR("")));
        n = snprintf(task, sizeof task, "task-%d-%ld", p->t, k);
        CV_STEP(ppk_sample_push_label_str(s, PPK_STR("task name"), (ppk_str){task, (size_t)n}));
        CV_STEP(ppk_sample_set_values(s, v, (size_t)p->ntypes));
        if (ppk_sample_flush(s) == 0) {
            p->ok[k] = 1;
            p->accepted++;
            for (int i = 0; i < p->ntypes; i++) p->sums[i] += v[i];
        }
        p->n = k + 1;
    }
#undef CV_STEP
    ppk_sample_free(s);
    return NULL;
}

/* Sets up n producers of up to `max` samples each on r (no thread yet). */
static inline void cv_prepare(cv_producer *prod, int n, ppk_recorder *r, int ntypes,
                              long max, atomic_int *stop, int yield) {
    for (int t = 0; t < n; t++) {
        memset(&prod[t], 0, sizeof prod[t]);
        prod[t].r = r;
        prod[t].t = t;
        prod[t].ntypes = ntypes;
        prod[t].max = max;
        prod[t].stop = stop;
        prod[t].yield = yield;
        prod[t].ok = calloc((size_t)max, 1);
        CHECK(prod[t].ok != NULL);
    }
}

/* Once the producers' threads are joined: each must have made no failed call and had a
 * flush accepted. Returns the flushes accepted. */
static inline long cv_accepted(const cv_producer *prod, int n) {
    long accepted = 0;
    for (int t = 0; t < n; t++) {
        if (prod[t].errors)
            fprintf(stderr, "thread %d: %ld calls failed, the first with %s\n", t,
                    prod[t].errors, ppk_strerror(prod[t].first_error));
        CHECK_EQ_INT(prod[t].errors, 0);
        CHECK(prod[t].accepted > 0);
        accepted += prod[t].accepted;
    }
    return accepted;
}

/* cv_prepare, then a thread each. */
static inline void cv_start(cv_producer *prod, int n, ppk_recorder *r, int ntypes, long max,
                            atomic_int *stop, int yield) {
    cv_prepare(prod, n, r, ntypes, max, stop, yield);
    for (int t = 0; t < n; t++)
        CHECK_EQ_INT(pthread_create(&prod[t].tid, NULL, cv_produce, &prod[t]), 0);
}

static inline long cv_join(cv_producer *prod, int n) {
    for (int t = 0; t < n; t++) pthread_join(prod[t].tid, NULL);
    return cv_accepted(prod, n);
}

static inline void cv_free(cv_producer *prod, int n) {
    for (int t = 0; t < n; t++) {
        free(prod[t].ok);
        prod[t].ok = NULL;
    }
}

/* A growing list of encoded exports, in export order; cv_add is thread safe. */
typedef struct cv_exports {
    pthread_mutex_t mu;
    uint8_t **data;
    size_t *len;
    size_t n, cap;
} cv_exports;

static inline void cv_exports_init(cv_exports *b) {
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->mu, NULL);
}

static inline void cv_add(cv_exports *b, const uint8_t *data, size_t len) {
    pthread_mutex_lock(&b->mu);
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->data = realloc(b->data, b->cap * sizeof *b->data);
        b->len = realloc(b->len, b->cap * sizeof *b->len);
        if (!b->data || !b->len) abort();
    }
    b->data[b->n] = malloc(len ? len : 1);
    if (!b->data[b->n]) abort();
    if (len) memcpy(b->data[b->n], data, len);
    b->len[b->n] = len;
    b->n++;
    pthread_mutex_unlock(&b->mu);
}

static inline void cv_exports_free(cv_exports *b) {
    for (size_t i = 0; i < b->n; i++) free(b->data[i]);
    free(b->data);
    free(b->len);
    pthread_mutex_destroy(&b->mu);
    memset(b, 0, sizeof *b);
}

/* A sink that keeps a copy of every export it is given (in `opaque`, a cv_exports). */
static inline int cv_sink_write(void *opaque, const ppk_export *e) {
    cv_add(opaque, e->data.data, e->data.len);
    return 0;
}

typedef struct cv_opts {
    const char *extra; /* task names with this prefix are not the producers' (counted) */
    int ordered;       /* check each thread's samples are in export order */
    int degraded;      /* samples may have lost their task name (see the top) */
} cv_opts;

typedef struct cv_result {
    long extra;        /* samples named with opts.extra */
    long unattributed; /* samples without a readable task name (degraded only) */
} cv_result;

/* Parses a sample's task name "task-T-K" into *t, *k: 0, or -1 (no such label, or not
 * of that form). */
static inline int cv_name(const pr_profile *pp, const pr_sample *s, char name[64], int *t,
                          long *k) {
    pr_str task = pr_label_str(pp, s, "task name");
    name[0] = 0;
    if (!task.ptr || task.len >= 64) return -1;
    memcpy(name, task.ptr, task.len);
    name[task.len] = 0;
    return sscanf(name, "task-%d-%ld", t, k) == 2 ? 0 : -1;
}

static inline void cv_check(const cv_exports *b, const cv_producer *prod, int n_prod,
                            const cv_opts *o, cv_result *res) {
    memset(res, 0, sizeof *res);
    int ntypes = prod[0].ntypes;
    uint32_t *where[CV_MAX_THREADS]; /* export index + 1 of each (t, k); 0: not seen */
    int64_t sums[CV_MAX_THREADS][CV_MAX_TYPES], loose[CV_MAX_TYPES];
    memset(sums, 0, sizeof sums);
    memset(loose, 0, sizeof loose);
    for (int t = 0; t < n_prod; t++) where[t] = calloc((size_t)prod[t].max, sizeof(uint32_t));
    long dups = 0, foreign = 0, malformed = 0, order = 0;
    for (size_t i = 0; i < b->n; i++) {
        pr_profile pp;
        if (pr_parse(b->data[i], b->len[i], &pp) != 0) {
            if (!malformed++) fprintf(stderr, "export %zu: cannot parse it\n", i + 1);
            continue;
        }
        CHECK_EQ_U64(pp.nsample_type, (uint64_t)ntypes);
        for (size_t j = 0; j < pp.nsamples; j++) {
            const pr_sample *s = &pp.samples[j];
            char name[64];
            int t = -1;
            long k = -1;
            int named = cv_name(&pp, s, name, &t, &k) == 0;
            if (o->extra && !strncmp(name, o->extra, strlen(o->extra))) {
                res->extra++;
                continue;
            }
            if (!named && o->degraded && s->nval == (size_t)ntypes) {
                res->unattributed++;
                for (int m = 0; m < ntypes; m++) loose[m] += s->val[m];
                continue;
            }
            if (!named || t < 0 || t >= n_prod || k < 0 || k >= prod[t].max ||
                pr_label_num(&pp, s, "thread id", -1) != t || s->nval != (size_t)ntypes) {
                if (!foreign++)
                    fprintf(stderr, "export %zu: unexpected sample \"%s\"\n", i + 1, name);
                continue;
            }
            if (where[t][k]) {
                if (!dups++)
                    fprintf(stderr, "%s is in exports %u and %zu\n", name, where[t][k], i + 1);
                continue;
            }
            where[t][k] = (uint32_t)i + 1;
            int64_t v[CV_MAX_TYPES];
            cv_values(t, k, ntypes, v);
            for (int m = 0; m < ntypes; m++) {
                sums[t][m] += s->val[m];
                if (s->val[m] != v[m] && !foreign++)
                    fprintf(stderr, "%s: value %d is %lld, flushed %lld\n", name, m,
                            (long long)s->val[m], (long long)v[m]);
            }
        }
        pr_free(&pp);
    }
    CHECK_EQ_INT(malformed, 0);
    CHECK_EQ_INT(foreign, 0);
    CHECK_EQ_INT(dups, 0);
    long missing = 0, extra = 0;
    int64_t total[CV_MAX_TYPES] = {0}, flushed[CV_MAX_TYPES] = {0};
    for (int t = 0; t < n_prod; t++) {
        uint32_t last = 0;
        for (long k = 0; k < prod[t].max; k++) {
            if (prod[t].ok[k] && !where[t][k] && !o->degraded && !missing++)
                fprintf(stderr, "task-%d-%ld was flushed and is in no export\n", t, k);
            if (!prod[t].ok[k] && where[t][k] && !extra++)
                fprintf(stderr, "task-%d-%ld was refused and is exported\n", t, k);
            if (o->ordered && where[t][k]) {
                if (where[t][k] < last && !order++)
                    fprintf(stderr, "task-%d-%ld is in export %u, an earlier sample in %u\n", t,
                            k, where[t][k], last);
                last = where[t][k];
            }
        }
        for (int m = 0; m < ntypes; m++) {
            if (!o->degraded) CHECK_EQ_INT(sums[t][m], prod[t].sums[m]);
            total[m] += sums[t][m];
            flushed[m] += prod[t].sums[m];
        }
        free(where[t]);
    }
    for (int m = 0; m < ntypes; m++) CHECK_EQ_INT(total[m] + loose[m], flushed[m]);
    CHECK_EQ_INT(missing, 0);
    CHECK_EQ_INT(extra, 0);
    CHECK_EQ_INT(order, 0);
}

#endif
