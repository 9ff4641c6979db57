/*
 * test_recorder.c - the concurrent recorder's API: builder state machine, errors, transient
 * input (G1), sinks that block (G5), the file sink, statistics of degradations (G3, G7).
 *
 * Exports are read back with tests/pprof_read.h, a decoder that shares no code with the
 * library. Cases:
 *   - state machine: every builder call out of order is PPK_ESTATE; after
 *     ppk_recorder_free every call is PPK_ECLOSED and ppk_sample_free still works;
 *   - bad input: set_value out of range, set_values with too many values, duplicate label,
 *     too many labels, reserved keys, NULL strings; each failed call leaves the sample as
 *     it was (the export equals that of the same sample built without the failed calls)
 *     and the sample stays usable;
 *   - drop: a dropped sample leaves no trace (not even its strings);
 *   - transient input: every string, array and struct passed in is in a fresh malloc'd
 *     buffer, overwritten and freed right after the call (ASan sees any later read); the
 *     export holds the right strings, the same as a recorder given static copies;
 *   - a sink that blocks in write() does not block flushes, whether the export runs on a
 *     caller's thread or on the background exporter; the blocked export completes when
 *     released and the samples flushed meanwhile are in the next export;
 *   - ppk_sink_file: NAME.PID.SEQ.pb.gz (.pb, .pb.zst) files that decode, no temporary
 *     left, a failing write counted; destroy called once;
 *   - statistics: UTF-8 repairs, truncated strings and stacks, saturated values, flushes
 *     refused for memory, sink failures, each counted; a config string cut once is
 *     counted once, whatever the shards;
 *   - start/stop storm: eight threads starting and stopping the background exporter at
 *     random all return (a watchdog fails the test rather than hang it);
 *   - omitted frames: a stack's first max_frames frames pushed and the rest counted
 *     (ppk_sample_omit_frames) export as the whole stack pushed.
 */
#define _GNU_SOURCE /* syscall() */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "test_alloc.h"
#include "pprof_read.h"
#include "pprofkit.h"

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define SLOW 5 /* sanitizers: longer timeouts */
#else
#define SLOW 1
#endif

/* ---------------------------------------------------------------------------------- */
/* helpers                                                                            */

static void config(ppk_recorder_config *cfg, ppk_codec codec) {
    ppk_recorder_config_init(cfg);
    cfg->profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg->profile.sample_types[1] =
        (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg->profile.n_sample_types = 2;
    cfg->profile.period_type = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg->profile.period = 10000000;
    cfg->codec = codec;
}

static ppk_recorder *recorder(ppk_codec codec) {
    ppk_recorder_config cfg;
    config(&cfg, codec);
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    return r;
}

/* Exports to the caller and parses. @return 0 on success. */
static int export_parse(ppk_recorder *r, pr_profile *pp) {
    ppk_export e;
    memset(&e, 0, sizeof e);
    memset(pp, 0, sizeof *pp);
    int rc = ppk_recorder_export(r, &e);
    CHECK_EQ_INT(rc, 0);
    if (rc != 0) return rc;
    rc = pr_parse(e.data.data, e.data.len, pp);
    CHECK_EQ_INT(rc, 0);
    ppk_export_free(&e);
    return rc;
}

/* The canonical description of the next export (caller frees), or NULL. */
static char *export_describe(ppk_recorder *r) {
    pr_profile pp;
    if (export_parse(r, &pp) != 0) return NULL;
    char *d = pr_describe(&pp);
    pr_free(&pp);
    return d;
}

/* A simple sample: a 2-frame stack and a task name label. */
static int simple_sample(ppk_sample *s, const char *task, int64_t wall) {
    int rc = ppk_sample_start(s);
    if (!rc) rc = ppk_sample_push_frame(s, PPK_STR("leaf"), PPK_STR("a.py"), 3, 0);
    if (!rc) rc = ppk_sample_push_frame(s, PPK_STR("main"), PPK_STR("a.py"), 1, 0);
    if (!rc) rc = ppk_sample_push_label_str(s, PPK_STR("task name"), ppk_cstr(task));
    if (!rc) rc = ppk_sample_set_value(s, 0, 1);
    if (!rc) rc = ppk_sample_set_value(s, 1, wall);
    if (!rc) rc = ppk_sample_flush(s);
    return rc;
}

static int has_string(const pr_profile *pp, const char *s) {
    for (size_t i = 0; i < pp->nstrings; i++)
        if (pr_streq(pp->strings[i], s)) return 1;
    return 0;
}

static int64_t total(const pr_profile *pp, size_t idx) {
    int64_t sum = 0;
    for (size_t i = 0; i < pp->nsamples; i++)
        if (idx < pp->samples[i].nval) sum += pp->samples[i].val[idx];
    return sum;
}

static void deadline_in(struct timespec *ts, double seconds) {
    clock_gettime(CLOCK_REALTIME, ts);
    long long ns = (long long)ts->tv_nsec + (long long)(seconds * 1e9);
    ts->tv_sec += (time_t)(ns / 1000000000);
    ts->tv_nsec = (long)(ns % 1000000000);
}

/* ---------------------------------------------------------------------------------- */
/* state machine                                                                      */

static void test_state_machine(void) {
    ppk_recorder *r = recorder(PPK_CODEC_NONE);
    ppk_sample *s = NULL;
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    if (!s) goto out;
    int64_t v[2] = {1, 2};

    /* Nothing begun. */
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("f"), PPK_STR("f.py"), 1, 0), PPK_ESTATE);
    ppk_frame fr = {.name = PPK_STR("f")};
    CHECK_EQ_INT(ppk_sample_push_frame_ex(s, &fr), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("k"), PPK_STR("v")), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("k"), 1, PPK_STR("")), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_set_values(s, v, 2), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_set_timestamp(s, 5), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_flush(s), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_drop(s), PPK_ESTATE);

    /* Begun: start again is refused; flush ends it; then flush and drop are refused. */
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_start(s), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("f"), PPK_STR("f.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_set_values(s, v, 2), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_drop(s), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("f"), PPK_STR("f.py"), 1, 0), PPK_ESTATE);

    /* Drop ends a sample too. */
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_drop(s), 0);
    CHECK_EQ_INT(ppk_sample_drop(s), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_flush(s), PPK_ESTATE);

    /* The refused calls left nothing behind: one sample, with its values. */
    pr_profile pp;
    if (export_parse(r, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 1);
        CHECK_EQ_INT(total(&pp, 0), 1);
        CHECK_EQ_INT(total(&pp, 1), 2);
        pr_free(&pp);
    }

    /* The background exporter: starting twice does nothing; stopping twice too. */
    CHECK_EQ_INT(ppk_recorder_start(r), 0);
    CHECK_EQ_INT(ppk_recorder_start(r), 0);
    ppk_recorder_stop(r);
    ppk_recorder_stop(r);

    /* NULL arguments are errors, not crashes. */
    CHECK(ppk_recorder_create(NULL, NULL) != 0);
out:
    ppk_sample_free(s);
    ppk_recorder_free(r);
    ppk_sample_free(NULL);
    ppk_recorder_free(NULL);
    ppk_export_free(NULL);
}

static void test_closed(void) {
    ppk_recorder *r = recorder(PPK_CODEC_NONE);
    ppk_sample *busy = NULL, *idle = NULL;
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &busy), 0);
    CHECK_EQ_INT(ppk_sample_create(r, &idle), 0);
    if (!busy || !idle) {
        ppk_sample_free(busy);
        ppk_sample_free(idle);
        ppk_recorder_free(r);
        return;
    }
    CHECK_EQ_INT(ppk_sample_start(busy), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(busy, PPK_STR("f"), PPK_STR("f.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_push_label_str(busy, PPK_STR("k"), PPK_STR("v")), 0);
    CHECK_EQ_INT(simple_sample(idle, "t", 1), 0);

    ppk_recorder_free(r);

    int64_t v[2] = {1, 1};
    ppk_frame fr = {.name = PPK_STR("g")};
    CHECK_EQ_INT(ppk_sample_push_frame(busy, PPK_STR("g"), PPK_STR("g.py"), 1, 0), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_push_frame_ex(busy, &fr), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_push_label_str(busy, PPK_STR("k2"), PPK_STR("v")), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_push_label_num(busy, PPK_STR("k3"), 1, PPK_STR("")), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_set_value(busy, 0, 1), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_set_values(busy, v, 2), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_set_timestamp(busy, 1), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_flush(busy), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_drop(busy), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_start(idle), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_flush(idle), PPK_ECLOSED);
    CHECK_EQ_INT(ppk_sample_drop(idle), PPK_ECLOSED);
    ppk_sample_free(busy);
    ppk_sample_free(idle);
}

/* ppk_recorder_seal: flushes are refused from then on, and the caller who pulls
 * exports takes the last window, whatever flushed until the close. Two threads flush
 * back to back while the main thread exports a few times, closes, and exports once
 * more: the exports hold exactly the samples whose flush returned 0, and every refused
 * flush is counted. */
typedef struct closer {
    ppk_recorder *r;
    int64_t ok_value; /* sum of the values of flushes that returned 0 */
    uint64_t refused;
    int other_errors;
} closer;

static void *flush_until_closed(void *arg) {
    closer *c = arg;
    ppk_sample *s = NULL;
    int created = ppk_sample_create(c->r, &s);
    if (created) {
        /* A thread that starts after the seal is refused a builder (PPK_ECLOSED), as
         * documented: it flushed nothing. */
        c->other_errors += created != PPK_ECLOSED;
        return NULL;
    }
    for (int64_t v = 1;; v++) {
        int rc = simple_sample(s, "t", v);
        if (rc == 0) {
            c->ok_value += v;
        } else if (rc == PPK_ECLOSED) {
            if (++c->refused == 3) break;
        } else {
            c->other_errors++;
            break;
        }
    }
    ppk_sample_free(s);
    return NULL;
}

/* A recorder without sinks: the background exporter's and ppk_recorder_export(r, NULL)'s
 * windows go nowhere, and their samples are counted as dropped, not as exported;
 * ppk_recorder_export(r, &e) takes what the window holds. */
static void test_no_sink_counted(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.export_period_ms = 5;
    ppk_recorder *r = NULL;
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(ppk_recorder_start(r), 0);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(simple_sample(s, "t", 10), 0);
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL); /* two exporter periods */
    }
    ppk_recorder_stop(r);
    CHECK_EQ_INT(simple_sample(s, "t", 10), 0);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.windows_exported, 0);
    CHECK_EQ_U64(st.samples_exported, 0);
    CHECK_EQ_U64(st.samples_dropped_no_sink, 5);
    pr_profile pp;
    if (export_parse(r, &pp) == 0) {
        CHECK_EQ_INT(total(&pp, 1), 10);
        pr_free(&pp);
    }
    CHECK_EQ_INT(simple_sample(s, "t", 10), 0);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_exported, 1);
    CHECK_EQ_U64(st.samples_dropped_no_sink, 6);
    CHECK_EQ_U64(st.samples_flushed, 7);
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

static void test_seal_then_last_export(void) {
    ppk_recorder *r = recorder(PPK_CODEC_NONE);
    if (!r) return;
    closer c[2] = {{r, 0, 0, 0}, {r, 0, 0, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        CHECK_EQ_INT(pthread_create(&t[i], NULL, flush_until_closed, &c[i]), 0);
    int64_t exported = 0;
    pr_profile pp;
    for (int i = 0; i < 3; i++) {
        struct timespec ts = {0, 5000000};
        nanosleep(&ts, NULL);
        if (export_parse(r, &pp) == 0) {
            exported += total(&pp, 1);
            pr_free(&pp);
        }
    }
    ppk_recorder_seal(r);
    ppk_recorder_seal(r); /* idempotent */
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    ppk_sample *late = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &late), PPK_ECLOSED);
    CHECK(late == NULL);
    if (export_parse(r, &pp) == 0) { /* the last window */
        exported += total(&pp, 1);
        pr_free(&pp);
    }
    CHECK_EQ_INT(c[0].other_errors + c[1].other_errors, 0);
    CHECK(c[0].ok_value + c[1].ok_value > 0);
    CHECK_EQ_INT(exported, c[0].ok_value + c[1].ok_value);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_flushed, st.samples_exported);
    CHECK_EQ_U64(st.samples_dropped_closed, c[0].refused + c[1].refused);
    if (export_parse(r, &pp) == 0) { /* nothing more */
        CHECK_EQ_U64(pp.nsamples, 0);
        pr_free(&pp);
    }
    ppk_recorder_free(r);
    ppk_recorder_seal(NULL);
}

/* ---------------------------------------------------------------------------------- */
/* bad input                                                                          */

/* Pushes the good parts of the reference sample; with `noise`, failing calls between
 * them, each checked for its error code. */
static void build_with_noise(ppk_sample *s, int noise, const char *task) {
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    if (noise) {
        CHECK_EQ_INT(ppk_sample_push_frame(s, (ppk_str){NULL, 5}, PPK_STR("x.py"), 1, 0),
                     PPK_ENULL);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("x"), (ppk_str){NULL, 2}, 1, 0),
                     PPK_ENULL);
        ppk_mapping bad_map = {0x1000, 0x2000, 0, {NULL, 3}, PPK_STR("")};
        ppk_frame bad = {.name = PPK_STR("x"), .mapping = &bad_map};
        CHECK_EQ_INT(ppk_sample_push_frame_ex(s, &bad), PPK_ENULL);
        CHECK(ppk_sample_push_frame_ex(s, NULL) != 0);
    }
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("leaf"), PPK_STR("a.py"), 3, 0x10), 0);
    ppk_mapping map = {0x400000, 0x500000, 0x1000, PPK_STR("/usr/lib/libx.so"),
                       PPK_STR("abcdef")};
    ppk_frame mid = {PPK_STR("mid"), PPK_STR("_Z3midv"), PPK_STR("mid.c"), 10, 12, 0x400123,
                     &map};
    CHECK_EQ_INT(ppk_sample_push_frame_ex(s, &mid), 0);
    CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("task name"), ppk_cstr(task)), 0);
    if (noise) {
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("task name"), PPK_STR("other")),
                     PPK_EDUPLABEL);
        CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("task name"), 3, PPK_STR("")),
                     PPK_EDUPLABEL);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR(""), PPK_STR("v")), PPK_EEMPTYKEY);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, (ppk_str){NULL, 1}, PPK_STR("v")), PPK_ENULL);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("k"), (ppk_str){NULL, 1}), PPK_ENULL);
        CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("local root span id"), 0,
                                               PPK_STR("")),
                     PPK_ESPANID);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("local root span id"), PPK_STR("7")),
                     PPK_ESPANID);
        CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("end_timestamp_ns"), 5, PPK_STR("")),
                     PPK_ERESERVED);
    }
    CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("thread id"), 42, PPK_STR("")), 0);
    CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("size"), 4096, PPK_STR("bytes")), 0);
    CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("thread name"), PPK_STR("Main")), 0);
    /* max_labels is 4: a fifth is refused. */
    if (noise)
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("fifth"), PPK_STR("v")), PPK_ETOOMANY);
    int64_t v[3] = {1, 250, 99};
    CHECK_EQ_INT(ppk_sample_set_value(s, 1, 7), 0);
    if (noise) {
        CHECK_EQ_INT(ppk_sample_set_value(s, 2, 5), PPK_EINVAL);
        CHECK_EQ_INT(ppk_sample_set_value(s, (size_t)-1, 5), PPK_EINVAL);
        CHECK_EQ_INT(ppk_sample_set_values(s, v, 3), PPK_EVALUES);
        CHECK(ppk_sample_set_values(s, NULL, 2) != 0);
    }
    CHECK_EQ_INT(ppk_sample_set_values(s, v, 1), 0); /* only the first value */
    if (noise) {
        CHECK_EQ_INT(ppk_sample_push_frame(s, (ppk_str){NULL, 1}, PPK_STR(""), 0, 0),
                     PPK_ENULL);
    }
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("main"), PPK_STR("main.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
}

static ppk_recorder *recorder_4_labels(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.profile.max_labels = 4;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    return r;
}

static void test_failed_calls_leave_sample_unchanged(void) {
    ppk_recorder *a = recorder_4_labels(), *b = recorder_4_labels();
    ppk_sample *sa = NULL, *sb = NULL;
    if (!a || !b) goto out;
    CHECK_EQ_INT(ppk_sample_create(a, &sa), 0);
    CHECK_EQ_INT(ppk_sample_create(b, &sb), 0);
    if (!sa || !sb) goto out;
    build_with_noise(sa, 1, "task-1");
    build_with_noise(sa, 1, "task-2");
    build_with_noise(sb, 0, "task-1");
    build_with_noise(sb, 0, "task-2");
    char *da = export_describe(a), *db = export_describe(b);
    CHECK(da && db);
    if (da && db) {
        CHECK(strcmp(da, db) == 0);
        if (strcmp(da, db) != 0) fprintf(stderr, "with failed calls:\n%s\nwithout:\n%s\n", da, db);
        CHECK(strstr(da, "leaf/@a.py:3(0)") != NULL);
        CHECK(strstr(da, "mid/_Z3midv@mid.c:12(10) map=/usr/lib/libx.so,abcdef,400000") != NULL);
        CHECK(strstr(da, " size=4096bytes") != NULL);
        CHECK(strstr(da, " task name=\"task-2\"") != NULL);
        CHECK(strstr(da, "| 1 7\n") != NULL);
        CHECK(strstr(da, "other") == NULL && strstr(da, "fifth") == NULL);
    }
    free(da);
    free(db);
out:
    ppk_sample_free(sa);
    ppk_sample_free(sb);
    ppk_recorder_free(a);
    ppk_recorder_free(b);
}

/* PPK_EDUPLABEL leaves the sample usable: more pushes, then flush, work. */
static void test_duplicate_label_sample_usable(void) {
    ppk_recorder *r = recorder(PPK_CODEC_NONE);
    ppk_sample *s = NULL;
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    if (s) {
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("k"), PPK_STR("first")), 0);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("k"), PPK_STR("second")),
                     PPK_EDUPLABEL);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("k2"), PPK_STR("third")), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("f"), PPK_STR("f.py"), 1, 0), 0);
        CHECK_EQ_INT(ppk_sample_set_value(s, 0, 3), 0);
        CHECK_EQ_INT(ppk_sample_flush(s), 0);
        pr_profile pp;
        if (export_parse(r, &pp) == 0) {
            CHECK_EQ_U64(pp.nsamples, 1);
            if (pp.nsamples == 1) {
                CHECK(pr_streq(pr_label_str(&pp, &pp.samples[0], "k"), "first"));
                CHECK(pr_streq(pr_label_str(&pp, &pp.samples[0], "k2"), "third"));
                CHECK_EQ_U64(pp.samples[0].nlab, 2);
                CHECK_EQ_INT(pp.samples[0].val[0], 3);
            }
            CHECK(!has_string(&pp, "second"));
            pr_free(&pp);
        }
    }
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

static void test_drop_discards(void) {
    ppk_recorder *r = recorder(PPK_CODEC_NONE);
    ppk_sample *s = NULL;
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    if (s) {
        CHECK_EQ_INT(simple_sample(s, "kept-1", 10), 0);
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("dropped_fn"), PPK_STR("dropped.py"), 9,
                                           0),
                     0);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("task name"), PPK_STR("dropped-task")),
                     0);
        CHECK_EQ_INT(ppk_sample_set_value(s, 1, 1000000), 0);
        CHECK_EQ_INT(ppk_sample_drop(s), 0);
        CHECK_EQ_INT(simple_sample(s, "kept-2", 20), 0);
        pr_profile pp;
        if (export_parse(r, &pp) == 0) {
            CHECK_EQ_U64(pp.nsamples, 2);
            CHECK_EQ_INT(total(&pp, 1), 30);
            CHECK(!has_string(&pp, "dropped_fn"));
            CHECK(!has_string(&pp, "dropped.py"));
            CHECK(!has_string(&pp, "dropped-task"));
            CHECK(has_string(&pp, "kept-1") && has_string(&pp, "kept-2"));
            pr_free(&pp);
        }
        ppk_recorder_stats st;
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.samples_flushed, 2);
        CHECK_EQ_U64(st.samples_exported, 2);
    }
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

/* ---------------------------------------------------------------------------------- */
/* transient input (G1)                                                               */

/* A fresh heap copy of a string, to be scrubbed and freed after the call. */
static ppk_str dup_str(const char *s) {
    size_t n = strlen(s);
    char *p = malloc(n ? n : 1);
    memcpy(p, s, n);
    return (ppk_str){p, n};
}
static void scrub(ppk_str s) {
    if (s.ptr) {
        memset((char *)s.ptr, 0xAB, s.len);
        free((char *)s.ptr);
    }
}

/* One sample i: with `transient`, every argument is a fresh buffer, scrubbed and freed
 * right after its call; without, static-lifetime copies are passed. */
static void transient_sample(ppk_sample *s, int i, int transient) {
    char name[64], file[64], sys[64], task[64], key[32], unit[32], mapfile[64], build[32];
    snprintf(name, sizeof name, "fn_%d", i);
    snprintf(file, sizeof file, "/src/file_%d.py", i % 5);
    snprintf(sys, sizeof sys, "_Z%dfnv", i);
    snprintf(task, sizeof task, "Task-%d", i);
    snprintf(key, sizeof key, "key_%d", i % 3);
    snprintf(unit, sizeof unit, "unit_%d", i % 2);
    snprintf(mapfile, sizeof mapfile, "/lib/lib%d.so", i % 4);
    snprintf(build, sizeof build, "build%d", i % 4);

    CHECK_EQ_INT(ppk_sample_start(s), 0);
    if (transient) {
        ppk_str n = dup_str(name), f = dup_str(file);
        CHECK_EQ_INT(ppk_sample_push_frame(s, n, f, i, 0), 0);
        scrub(n);
        scrub(f);

        ppk_mapping *m = malloc(sizeof *m);
        ppk_frame *fr = malloc(sizeof *fr);
        *m = (ppk_mapping){0x10000u * (uint64_t)(i % 4 + 1), 0x10000u * (uint64_t)(i % 4 + 2),
                           0, dup_str(mapfile), dup_str(build)};
        *fr = (ppk_frame){dup_str("native"), dup_str(sys), dup_str("native.c"), 3, 4,
                          0x10000u * (uint64_t)(i % 4 + 1) + 0x10, m};
        CHECK_EQ_INT(ppk_sample_push_frame_ex(s, fr), 0);
        scrub(fr->name);
        scrub(fr->system_name);
        scrub(fr->filename);
        scrub(m->filename);
        scrub(m->build_id);
        memset(m, 0xCD, sizeof *m);
        memset(fr, 0xCD, sizeof *fr);
        free(m);
        free(fr);

        ppk_str k = dup_str("task name"), v = dup_str(task);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, k, v), 0);
        scrub(k);
        scrub(v);
        k = dup_str(key);
        ppk_str u = dup_str(unit);
        CHECK_EQ_INT(ppk_sample_push_label_num(s, k, i, u), 0);
        scrub(k);
        scrub(u);
        int64_t *vals = malloc(2 * sizeof *vals);
        vals[0] = 1;
        vals[1] = 1000 + i;
        CHECK_EQ_INT(ppk_sample_set_values(s, vals, 2), 0);
        memset(vals, 0xEE, 2 * sizeof *vals);
        free(vals);
    } else {
        CHECK_EQ_INT(ppk_sample_push_frame(s, ppk_cstr(name), ppk_cstr(file), i, 0), 0);
        ppk_mapping m = {0x10000u * (uint64_t)(i % 4 + 1), 0x10000u * (uint64_t)(i % 4 + 2), 0,
                         ppk_cstr(mapfile), ppk_cstr(build)};
        ppk_frame fr = {PPK_STR("native"), ppk_cstr(sys), PPK_STR("native.c"), 3, 4,
                        0x10000u * (uint64_t)(i % 4 + 1) + 0x10, &m};
        CHECK_EQ_INT(ppk_sample_push_frame_ex(s, &fr), 0);
        CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("task name"), ppk_cstr(task)), 0);
        CHECK_EQ_INT(ppk_sample_push_label_num(s, ppk_cstr(key), i, ppk_cstr(unit)), 0);
        int64_t vals[2] = {1, 1000 + i};
        CHECK_EQ_INT(ppk_sample_set_values(s, vals, 2), 0);
    }
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
}

/* A recorder whose config strings are transient too. */
static ppk_recorder *transient_recorder(void) {
    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    ppk_str t0 = dup_str("samples"), u0 = dup_str("count"), t1 = dup_str("wall-time"),
            u1 = dup_str("nanoseconds"), pt = dup_str("wall-time"), pu = dup_str("nanoseconds");
    cfg.profile.sample_types[0] = (ppk_value_type){t0, u0};
    cfg.profile.sample_types[1] = (ppk_value_type){t1, u1};
    cfg.profile.n_sample_types = 2;
    cfg.profile.period_type = (ppk_value_type){pt, pu};
    cfg.profile.period = 10000000;
    cfg.codec = PPK_CODEC_NONE;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    scrub(t0);
    scrub(u0);
    scrub(t1);
    scrub(u1);
    scrub(pt);
    scrub(pu);
    return r;
}

static void test_transient_input(void) {
    ppk_recorder *a = transient_recorder(), *b = recorder(PPK_CODEC_NONE);
    ppk_sample *sa = NULL, *sb = NULL;
    if (!a || !b) goto out;
    CHECK_EQ_INT(ppk_sample_create(a, &sa), 0);
    CHECK_EQ_INT(ppk_sample_create(b, &sb), 0);
    if (!sa || !sb) goto out;
    /* Two windows: the strings of the first export must not leak into the second. */
    for (int round = 0; round < 2; round++) {
        for (int i = round * 300; i < round * 300 + 300; i++) {
            transient_sample(sa, i, 1);
            transient_sample(sb, i, 0);
        }
        pr_profile pa, pb;
        if (export_parse(a, &pa) != 0) break;
        if (export_parse(b, &pb) != 0) {
            pr_free(&pa);
            break;
        }
        char *da = pr_describe(&pa), *db = pr_describe(&pb);
        CHECK(strcmp(da, db) == 0);
        if (strcmp(da, db) != 0)
            fprintf(stderr, "transient:\n%.2000s\nstatic copies:\n%.2000s\n", da, db);
        /* And the content itself, checked directly. */
        CHECK_EQ_U64(pa.nsamples, 300);
        CHECK_EQ_U64(pa.nsample_type, 2);
        if (pa.nsample_type == 2) {
            CHECK(pr_streq(pr_string(&pa, pa.sample_type[0][0]), "samples"));
            CHECK(pr_streq(pr_string(&pa, pa.sample_type[1][1]), "nanoseconds"));
            CHECK(pr_streq(pr_string(&pa, pa.period_type[0]), "wall-time"));
        }
        int bad = 0;
        for (size_t j = 0; j < pa.nsamples; j++) {
            const pr_sample *s = &pa.samples[j];
            pr_str task = pr_label_str(&pa, s, "task name");
            int i = -1;
            if (task.ptr && task.len > 5 && task.len < 20) {
                char tmp[24];
                memcpy(tmp, task.ptr, task.len);
                tmp[task.len] = 0;
                if (sscanf(tmp, "Task-%d", &i) != 1) i = -1;
            }
            char want[64];
            snprintf(want, sizeof want, "fn_%d", i);
            const pr_function *f0 = pr_frame_fn(&pa, s, 0), *f1 = pr_frame_fn(&pa, s, 1);
            if (i < round * 300 || i >= round * 300 + 300 || s->nloc != 2 || !f0 || !f1 ||
                !pr_streq(pr_string(&pa, f0->name), want) ||
                !pr_streq(pr_string(&pa, f1->name), "native") || s->val[1] != 1000 + i) {
                if (!bad++)
                    fprintf(stderr, "sample %zu of round %d is wrong (task %.*s)\n", j, round,
                            (int)task.len, task.ptr ? task.ptr : "");
            }
            if (round == 1) {
                snprintf(want, sizeof want, "Task-%d", i - 300);
                if (has_string(&pa, want) && !bad++)
                    fprintf(stderr, "round 2 holds %s of round 1\n", want);
            }
        }
        CHECK_EQ_INT(bad, 0);
        free(da);
        free(db);
        pr_free(&pa);
        pr_free(&pb);
    }
out:
    ppk_sample_free(sa);
    ppk_sample_free(sb);
    ppk_recorder_free(a);
    ppk_recorder_free(b);
}

/* ---------------------------------------------------------------------------------- */
/* a sink that blocks (G5)                                                            */

typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int calls;
    int released;
    uint64_t samples[64]; /* stats.samples_added of each export it received */
    uint64_t seq[64];
    int destroyed;
} gate;

static int gate_write(void *opaque, const ppk_export *e) {
    gate *g = opaque;
    pthread_mutex_lock(&g->mu);
    if (g->calls < 64) {
        g->samples[g->calls] = e->stats.samples_added;
        g->seq[g->calls] = e->seq;
    }
    g->calls++;
    pthread_cond_broadcast(&g->cv);
    while (!g->released) pthread_cond_wait(&g->cv, &g->mu); /* only the first blocks */
    pthread_mutex_unlock(&g->mu);
    return 0;
}

static void gate_destroy(void *opaque) {
    gate *g = opaque;
    pthread_mutex_lock(&g->mu);
    g->destroyed++;
    pthread_mutex_unlock(&g->mu);
}

typedef struct flusher {
    ppk_recorder *r;
    int n;
    int ok;          /* flushes that returned 0 */
    int stats_ok;    /* stats_get returned */
    int done;
    pthread_mutex_t *mu;
    pthread_cond_t *cv;
} flusher;

static void *flush_many(void *arg) {
    flusher *f = arg;
    ppk_sample *s = NULL;
    if (ppk_sample_create(f->r, &s) == 0) {
        char task[32];
        for (int i = 0; i < f->n; i++) {
            snprintf(task, sizeof task, "during-%d", i);
            if (simple_sample(s, task, 5) == 0) f->ok++;
        }
        ppk_recorder_stats st;
        ppk_recorder_stats_get(f->r, &st);
        f->stats_ok = 1;
        ppk_sample_free(s);
    }
    pthread_mutex_lock(f->mu);
    f->done = 1;
    pthread_cond_broadcast(f->cv);
    pthread_mutex_unlock(f->mu);
    return NULL;
}

typedef struct exporter_arg {
    ppk_recorder *r;
    int rc;
} exporter_arg;

static void *export_to_sinks(void *arg) {
    exporter_arg *x = arg;
    x->rc = ppk_recorder_export(x->r, NULL);
    return NULL;
}

/* `background`: the export runs on the background exporter instead of a caller. */
static void blocking_sink(int background) {
    gate g;
    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_GZIP);
    cfg.export_period_ms = 20;
    ppk_recorder *r = NULL;
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    ppk_sink sink = {gate_write, gate_destroy, &g};
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    for (int i = 0; i < 5; i++) {
        char task[16];
        snprintf(task, sizeof task, "before-%d", i);
        CHECK_EQ_INT(simple_sample(s, task, 1), 0);
    }

    /* An export enters the sink and blocks there. */
    pthread_t exp_tid;
    exporter_arg xa = {r, -1};
    if (background)
        CHECK_EQ_INT(ppk_recorder_start(r), 0);
    else
        CHECK_EQ_INT(pthread_create(&exp_tid, NULL, export_to_sinks, &xa), 0);
    struct timespec dl;
    deadline_in(&dl, 10.0 * SLOW);
    pthread_mutex_lock(&g.mu);
    while (g.calls == 0)
        if (pthread_cond_timedwait(&g.cv, &g.mu, &dl) != 0) break;
    int entered = g.calls;
    pthread_mutex_unlock(&g.mu);
    CHECK_EQ_INT(entered, 1);

    /* Flushes run on another thread while the sink is blocked; a hang fails the check
     * instead of the test run. */
    pthread_mutex_t fmu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fcv = PTHREAD_COND_INITIALIZER;
    flusher f = {r, 2000, 0, 0, 0, &fmu, &fcv};
    pthread_t fl_tid;
    CHECK_EQ_INT(pthread_create(&fl_tid, NULL, flush_many, &f), 0);
    deadline_in(&dl, 10.0 * SLOW);
    pthread_mutex_lock(&fmu);
    while (!f.done)
        if (pthread_cond_timedwait(&fcv, &fmu, &dl) != 0) break;
    int done = f.done;
    pthread_mutex_unlock(&fmu);
    CHECK(done);
    if (!done) fprintf(stderr, "flushes blocked while a sink was blocked (G5)\n");
    pthread_mutex_lock(&g.mu);
    int calls_while_blocked = g.calls;
    pthread_mutex_unlock(&g.mu);
    CHECK_EQ_INT(calls_while_blocked, 1); /* nothing else got into the sink meanwhile */

    /* Release: the blocked export completes. */
    pthread_mutex_lock(&g.mu);
    g.released = 1;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(fl_tid, NULL);
    CHECK_EQ_INT(f.ok, 2000);
    CHECK(f.stats_ok);
    if (background) {
        ppk_recorder_stop(r); /* exports what is left to the sinks */
    } else {
        pthread_join(exp_tid, NULL);
        CHECK_EQ_INT(xa.rc, 0);
        CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    }
    pthread_mutex_lock(&g.mu);
    int calls = g.calls;
    CHECK(calls >= 2);
    CHECK_EQ_U64(g.samples[0], 5); /* the first export: the samples before it */
    uint64_t later = 0;
    for (int i = 1; i < calls && i < 64; i++) {
        later += g.samples[i];
        CHECK_EQ_U64(g.seq[i], g.seq[i - 1] + 1);
    }
    CHECK_EQ_U64(later, 2000); /* the samples flushed meanwhile, in the later exports */
    pthread_mutex_unlock(&g.mu);

    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_flushed, 2005);
    CHECK_EQ_U64(st.samples_exported, 2005);
    CHECK_EQ_U64(st.windows_exported, (uint64_t)calls);
    CHECK_EQ_U64(st.sink_failures, 0);
    ppk_sample_free(s);
    ppk_recorder_free(r);
    CHECK_EQ_INT(g.destroyed, 1);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
}

static void test_blocking_sink_caller(void) { blocking_sink(0); }
static void test_blocking_sink_background(void) { blocking_sink(1); }

/* ---------------------------------------------------------------------------------- */
/* the file sink                                                                      */

static int count_dir(const char *dir, int *hidden) {
    DIR *d = opendir(dir);
    int n = 0;
    *hidden = 0;
    if (!d) return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        n++;
        if (de->d_name[0] == '.' || strstr(de->d_name, "tmp")) (*hidden)++;
    }
    closedir(d);
    return n;
}

static int failing_write(void *opaque, const ppk_export *e) {
    (void)e;
    (*(int *)opaque)++;
    return PPK_ESYS;
}

/* A recorder takes PPK_MAX_SINKS sinks, and writes each export to each; one more is
 * refused as a full table. */
static void test_sink_table_full(void) {
    ppk_recorder *r = recorder(PPK_CODEC_GZIP);
    if (!r) return;
    int fails = 0;
    ppk_sink bad = {failing_write, NULL, &fails};
    for (int i = 0; i < PPK_MAX_SINKS; i++) CHECK_EQ_INT(ppk_recorder_add_sink(r, &bad), 0);
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &bad), PPK_EFULL);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    CHECK_EQ_INT(fails, PPK_MAX_SINKS);
    ppk_recorder_free(r);
}

static void test_sink_file(void) {
    char dir[] = "/tmp/ppk-sink.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    ppk_recorder *r = recorder(PPK_CODEC_GZIP);
    ppk_sample *s = NULL;
    if (!r) return;
    ppk_sink sink;
    memset(&sink, 0, sizeof sink);
    ppk_str d = dup_str(dir), n = dup_str("prof");
    CHECK_EQ_INT(ppk_sink_file(d, n, &sink), 0);
    scrub(d);
    scrub(n);
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
    int fails = 0;
    ppk_sink bad = {failing_write, NULL, &fails};
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &bad), 0);
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    int per_export[3] = {3, 0, 7};
    for (int e = 0; e < 3; e++) {
        for (int i = 0; i < per_export[e]; i++) {
            char task[32];
            snprintf(task, sizeof task, "e%d-%d", e, i);
            CHECK_EQ_INT(simple_sample(s, task, 100), 0);
        }
        CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    }
    CHECK_EQ_INT(fails, 3);
    int hidden;
    CHECK_EQ_INT(count_dir(dir, &hidden), 3);
    CHECK_EQ_INT(hidden, 0);
    for (int e = 0; e < 3; e++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/prof.%ld.%d.pb.gz", dir, (long)getpid(), e + 1);
        uint8_t *data = NULL;
        size_t len = 0;
        CHECK_EQ_INT(pr_read_file(path, &data, &len), 0);
        if (!data) {
            fprintf(stderr, "missing %s\n", path);
            continue;
        }
        CHECK(len >= 2 && data[0] == 0x1f && data[1] == 0x8b);
        pr_profile pp;
        CHECK_EQ_INT(pr_parse(data, len, &pp), 0);
        free(data);
        CHECK_EQ_U64(pp.nsamples, (uint64_t)per_export[e]);
        CHECK_EQ_INT(total(&pp, 1), 100 * per_export[e]);
        CHECK(pp.time_nanos > 0);
        pr_free(&pp);
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.sink_failures, 3);
    CHECK_EQ_U64(st.windows_exported, 3);
    CHECK_EQ_U64(st.samples_exported, 10);
    ppk_sample_free(s);
    ppk_recorder_free(r);
    /* Freeing the recorder may export a last (empty) window; never a temporary file. */
    CHECK(count_dir(dir, &hidden) >= 3);
    CHECK_EQ_INT(hidden, 0);
    pr_rm_dir(dir);
}

/* Reads DIR/FILE and returns its samples' total value of type 1, or -1. */
static int64_t file_total(const char *dir, const char *file) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    uint8_t *data = NULL;
    size_t len = 0;
    if (pr_read_file(path, &data, &len) != 0 || !data) return -1;
    pr_profile pp;
    int64_t t = -1;
    if (pr_parse(data, len, &pp) == 0) {
        t = total(&pp, 1);
        pr_free(&pp);
    }
    free(data);
    return t;
}

/* Two recorders with the same out_dir and name, and a file an earlier process with this
 * pid left: no export replaces another file; each lands under a name of its own. */
static void test_sink_file_shared_name(void) {
    char dir[] = "/tmp/ppk-sinkshared.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    long pid = (long)getpid();
    char file[256];
    snprintf(file, sizeof file, "%s/p.%ld.1.pb.gz", dir, pid);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f) {
        fputs("an earlier process", f);
        fclose(f);
    }
    ppk_recorder *r[2] = {NULL, NULL};
    ppk_sample *s[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        ppk_recorder_config cfg;
        config(&cfg, PPK_CODEC_GZIP);
        cfg.out_dir = ppk_cstr(dir);
        cfg.name = PPK_STR("p");
        CHECK_EQ_INT(ppk_recorder_create(&cfg, &r[i]), 0);
        if (r[i]) CHECK_EQ_INT(ppk_sample_create(r[i], &s[i]), 0);
    }
    if (s[0] && s[1]) {
        /* Recorder i exports values 10 * (i + 1) + seq, two exports each. */
        for (int e = 1; e <= 2; e++)
            for (int i = 0; i < 2; i++) {
                CHECK_EQ_INT(simple_sample(s[i], "t", 10 * (i + 1) + e), 0);
                CHECK_EQ_INT(ppk_recorder_export(r[i], NULL), 0);
                ppk_recorder_stats st;
                ppk_recorder_stats_get(r[i], &st);
                CHECK_EQ_U64(st.sink_failures, 0);
            }
        int hidden;
        CHECK_EQ_INT(count_dir(dir, &hidden), 5);
        CHECK_EQ_INT(hidden, 0);
        f = fopen(file, "r");
        char got[64] = {0};
        if (f) {
            CHECK(fgets(got, sizeof got, f) != NULL);
            fclose(f);
        }
        CHECK(strcmp(got, "an earlier process") == 0);
        /* seq 1: the two recorders took -2 and -3, in the order they exported; seq 2:
         * the first took the plain name, the second -2. */
        static const struct {
            const char *suffix;
            int64_t value;
        } want[] = {{"1-2", 11}, {"1-3", 21}, {"2", 12}, {"2-2", 22}};
        for (size_t k = 0; k < 4; k++) {
            snprintf(file, sizeof file, "p.%ld.%s.pb.gz", pid, want[k].suffix);
            int64_t t = file_total(dir, file);
            if (t != want[k].value) fprintf(stderr, "%s: total %lld\n", file, (long long)t);
            CHECK_EQ_INT(t, want[k].value);
        }
    }
    for (int i = 0; i < 2; i++) {
        ppk_sample_free(s[i]);
        ppk_recorder_free(r[i]);
    }
    pr_rm_dir(dir);
}

/* fsync() as the library calls it (this definition takes the place of libc's in the
 * test binary): the path of each descriptor synced while g_sync_trace is set. */
static int g_sync_trace;
static char g_synced[4][4096];
static int g_n_synced;

int fsync(int fd) {
    if (g_sync_trace && g_n_synced < 4) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, g_synced[g_n_synced], sizeof g_synced[0] - 1);
        g_synced[g_n_synced++][n > 0 ? n : 0] = 0;
    }
    return (int)syscall(SYS_fsync, fd);
}

/* A file sink syncs the temporary file before renaming it (so a power loss cannot leave
 * a partial profile under the final name), then the directory; a directory that does
 * not exist, or is a file, is refused when the sink is made. */
static void test_sink_file_sync_and_dir(void) {
    char dir[] = "/tmp/ppk-sync.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    ppk_recorder *r = recorder(PPK_CODEC_GZIP);
    ppk_sample *s = NULL;
    ppk_sink sink;
    CHECK_EQ_INT(ppk_sink_file(ppk_cstr(dir), PPK_STR("synced"), &sink), 0);
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(simple_sample(s, "x", 1), 0);
    g_n_synced = 0;
    g_sync_trace = 1;
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    g_sync_trace = 0;
    CHECK_EQ_INT(g_n_synced, 2);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/.synced.", dir); /* the temporary name */
    CHECK(strncmp(g_synced[0], prefix, strlen(prefix)) == 0);
    CHECK(strcmp(g_synced[1], dir) == 0);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.sink_failures, 0);
    ppk_sample_free(s);
    ppk_recorder_free(r);
    pr_rm_dir(dir);

    /* Not there, or not a directory: refused now, not at every export. */
    errno = 0;
    CHECK_EQ_INT(ppk_sink_file(ppk_cstr(dir), PPK_STR("x"), &sink), PPK_ESYS);
    CHECK_EQ_INT(errno, ENOENT);
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_GZIP);
    cfg.out_dir = ppk_cstr(dir);
    r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), PPK_ESYS);
    CHECK(r == NULL);
    errno = 0;
    CHECK_EQ_INT(ppk_sink_file(PPK_STR("/proc/self/status"), PPK_STR("x"), &sink), PPK_ESYS);
    CHECK_EQ_INT(errno, ENOTDIR);
}

/* A relative directory is the one under the working directory when the sink is made:
 * after a chdir (a daemon's to "/"), exports still go there, through the sink and
 * through cfg.out_dir. */
static void test_sink_file_relative_dir(void) {
    char dir[] = "/tmp/ppk-sinkrel.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char *cwd = getcwd(NULL, 0);
    CHECK(cwd != NULL);
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/out", dir);
    CHECK_EQ_INT(mkdir(sub, 0755), 0);
    CHECK_EQ_INT(chdir(dir), 0);
    ppk_recorder *r = recorder(PPK_CODEC_GZIP);
    ppk_sink sink;
    CHECK_EQ_INT(ppk_sink_file(PPK_STR("out"), PPK_STR("rel"), &sink), 0);
    CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_GZIP);
    cfg.out_dir = PPK_STR("./out");
    cfg.name = PPK_STR("cfg");
    ppk_recorder *r2 = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r2), 0);
    CHECK_EQ_INT(chdir("/"), 0);
    ppk_sample *s = NULL, *s2 = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(ppk_sample_create(r2, &s2), 0);
    CHECK_EQ_INT(simple_sample(s, "x", 1), 0);
    CHECK_EQ_INT(simple_sample(s2, "y", 1), 0);
    CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
    CHECK_EQ_INT(ppk_recorder_export(r2, NULL), 0);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.sink_failures, 0);
    ppk_recorder_stats_get(r2, &st);
    CHECK_EQ_U64(st.sink_failures, 0);
    const char *names[] = {"rel", "cfg"};
    for (int i = 0; i < 2; i++) {
        char path[4300];
        snprintf(path, sizeof path, "%s/%s.%ld.1.pb.gz", sub, names[i], (long)getpid());
        struct stat stt;
        CHECK_EQ_INT(stat(path, &stt), 0);
    }
    ppk_sample_free(s);
    ppk_sample_free(s2);
    ppk_recorder_free(r);
    ppk_recorder_free(r2);
    CHECK_EQ_INT(chdir(cwd), 0);
    free(cwd);
    pr_rm_dir(sub);
    pr_rm_dir(dir);
}

/* The file sink of cfg.out_dir allocates through the recorder's allocator: its copies
 * of the directory and name (made at create) and each export's path (written at
 * export) are the allocator's, and all are given back. */
static void test_sink_file_uses_the_allocator(void) {
    char dir[] = "/tmp/ppk-sinkalloc.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    long made[2] = {0, 0}, exported[2] = {0, 0};
    for (int with_dir = 0; with_dir < 2; with_dir++) {
        test_alloc c = {0};
        ppk_recorder_config cfg;
        config(&cfg, PPK_CODEC_NONE);
        cfg.profile.allocator = test_allocator(&c);
        if (with_dir) cfg.out_dir = ppk_cstr(dir);
        ppk_recorder *r = NULL;
        CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
        if (!r) continue;
        made[with_dir] = c.count;
        ppk_sample *s = NULL;
        CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
        CHECK_EQ_INT(simple_sample(s, "x", 1), 0);
        long before = c.count;
        CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
        exported[with_dir] = c.count - before;
        ppk_sample_free(s);
        ppk_recorder_free(r);
        CHECK_EQ_INT(c.outstanding, 0);
    }
    CHECK(made[1] >= made[0] + 3);       /* the sink, its directory and its name */
    CHECK(exported[1] >= exported[0] + 1); /* the file's path */
    pr_rm_dir(dir);
}

/* cfg.out_dir adds a file sink; the codec picks the extension; a sink whose directory
 * vanished fails its writes, counted. */
static void test_sink_file_config_and_failure(void) {
    char dir[] = "/tmp/ppk-sinkcfg.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    static const struct {
        ppk_codec codec;
        const char *ext;
    } codecs[] = {{PPK_CODEC_NONE, "pb"}, {PPK_CODEC_ZSTD, "pb.zst"}, {PPK_CODEC_GZIP, "pb.gz"}};
    for (size_t c = 0; c < 3; c++) {
        ppk_recorder_config cfg;
        config(&cfg, codecs[c].codec);
        cfg.out_dir = ppk_cstr(dir);
        cfg.name = PPK_STR("cfg");
        ppk_recorder *r = NULL;
        ppk_sample *s = NULL;
        CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
        if (!r) continue;
        CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
        CHECK_EQ_INT(simple_sample(s, "x", 1), 0);
        CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
        ppk_recorder_stats st;
        ppk_recorder_stats_get(r, &st);
        char path[4096];
        snprintf(path, sizeof path, "%s/cfg.%ld.%llu.%s", dir, (long)getpid(),
                 (unsigned long long)st.windows_exported, codecs[c].ext);
        uint8_t *data = NULL;
        size_t len = 0;
        CHECK_EQ_INT(pr_read_file(path, &data, &len), 0);
        if (data && codecs[c].codec == PPK_CODEC_ZSTD)
            CHECK(len >= 4 && data[0] == 0x28 && data[1] == 0xb5 && data[2] == 0x2f &&
                  data[3] == 0xfd);
        if (data && codecs[c].codec != PPK_CODEC_ZSTD) {
            pr_profile pp;
            CHECK_EQ_INT(pr_parse(data, len, &pp), 0);
            CHECK_EQ_U64(pp.nsamples, 1);
            pr_free(&pp);
        }
        free(data);
        remove(path);
        ppk_sample_free(s);
        ppk_recorder_free(r);
        /* Whatever free wrote, remove it for the next codec. */
        pr_rm_dir(dir);
        CHECK_EQ_INT(mkdir(dir, 0700), 0);
    }

    /* The directory disappears: the sink's writes fail and are counted; the export
     * itself succeeds and the samples count as exported. */
    ppk_recorder *r = recorder(PPK_CODEC_GZIP);
    ppk_sample *s = NULL;
    if (r) {
        ppk_sink sink;
        CHECK_EQ_INT(ppk_sink_file(ppk_cstr(dir), PPK_STR("gone"), &sink), 0);
        CHECK_EQ_INT(ppk_recorder_add_sink(r, &sink), 0);
        CHECK_EQ_INT(rmdir(dir), 0);
        CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
        CHECK_EQ_INT(simple_sample(s, "y", 1), 0);
        CHECK_EQ_INT(ppk_recorder_export(r, NULL), 0);
        ppk_recorder_stats st;
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.sink_failures, 1);
        CHECK_EQ_U64(st.samples_lost_sink, 1); /* the window's one sample, not delivered */
        CHECK_EQ_U64(st.samples_exported, 1);
        ppk_sample_free(s);
        ppk_recorder_free(r);
    } else {
        rmdir(dir);
    }
    ppk_sink junk;
    CHECK(ppk_sink_file((ppk_str){NULL, 3}, PPK_STR("x"), &junk) != 0);
}

/* ---------------------------------------------------------------------------------- */
/* statistics of degradations                                                         */

typedef struct failing_alloc {
    atomic_int fail;
    atomic_long refused;
} failing_alloc;

static void *fa_alloc(void *opaque, size_t size) {
    failing_alloc *fa = opaque;
    if (atomic_load(&fa->fail)) {
        atomic_fetch_add(&fa->refused, 1);
        return NULL;
    }
    return malloc(size);
}

static void fa_free(void *opaque, void *ptr, size_t size) {
    (void)opaque;
    (void)size;
    free(ptr);
}

static void test_stats_degradations(void) {
    failing_alloc fa;
    atomic_init(&fa.fail, 0);
    atomic_init(&fa.refused, 0);
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.profile.max_string_len = 1u << 20;
    cfg.builder_max_bytes = 4u << 20; /* room for the 512 KiB string below */
    cfg.profile.max_frames = 4;
    cfg.profile.allocator = (ppk_allocator){fa_alloc, fa_free, &fa};
    ppk_recorder *r = NULL;
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    if (!s) {
        ppk_recorder_free(r);
        return;
    }

    /* One invalid UTF-8 string, repaired. */
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("bad\xff" "utf8"), PPK_STR("u.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);

    /* A stack of 6 frames with max_frames 4: 3 kept and one "<3 frames omitted>". */
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    for (int i = 0; i < 6; i++) {
        char fn[16];
        snprintf(fn, sizeof fn, "deep_%d", i);
        CHECK_EQ_INT(ppk_sample_push_frame(s, ppk_cstr(fn), PPK_STR("d.py"), i + 1, 0), 0);
    }
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);

    /* Two samples that aggregate and saturate. */
    for (int i = 0; i < 2; i++) {
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("sat"), PPK_STR("s.py"), 1, 0), 0);
        CHECK_EQ_INT(ppk_sample_set_value(s, 1, INT64_MAX), 0);
        CHECK_EQ_INT(ppk_sample_flush(s), 0);
    }

    /* The allocator refuses everything at flush time: a sample with a 512 KiB string
     * (more than a window chunk) cannot be inserted. */
    size_t big_len = 512u << 10;
    char *big = malloc(big_len);
    memset(big, 'z', big_len);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(s, (ppk_str){big, big_len}, PPK_STR("big.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1000), 0);
    atomic_store(&fa.fail, 1);
    CHECK_EQ_INT(ppk_sample_flush(s), PPK_ENOMEM);
    atomic_store(&fa.fail, 0);
    free(big);
    CHECK(atomic_load(&fa.refused) > 0);
    /* The refused sample was dropped: the builder starts the next one. */
    CHECK_EQ_INT(simple_sample(s, "after-nomem", 1), 0);

    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_flushed, 5);
    CHECK_EQ_U64(st.samples_dropped_nomem, 1);
    CHECK_EQ_U64(st.strings_utf8_repaired, 1);
    CHECK_EQ_U64(st.stacks_truncated, 1);
    CHECK_EQ_U64(st.values_saturated, 1);
    CHECK(st.strings > 0 && st.window_bytes > 0);

    pr_profile pp;
    if (export_parse(r, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 4);
        CHECK(has_string(&pp, "bad\xef\xbf\xbdutf8"));
        CHECK(has_string(&pp, "<3 frames omitted>"));
        CHECK(!has_string(&pp, "deep_3") && !has_string(&pp, "deep_5"));
        CHECK(has_string(&pp, "deep_2") && has_string(&pp, "deep_0"));
        CHECK(!has_string(&pp, "big.py"));
        CHECK_EQ_INT(total(&pp, 0), 3); /* utf8, deep, after-nomem; "sat" has value 0 */
        int sat = 0;
        for (size_t i = 0; i < pp.nsamples; i++) {
            const pr_function *f = pr_frame_fn(&pp, &pp.samples[i], 0);
            if (f && pr_streq(pr_string(&pp, f->name), "sat")) {
                sat++;
                CHECK_EQ_INT(pp.samples[i].val[1], INT64_MAX);
            }
        }
        CHECK_EQ_INT(sat, 1);
        pr_free(&pp);
    }
    /* After the export, the counters still hold (they are totals). */
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_exported, 5);
    CHECK_EQ_U64(st.samples_dropped_nomem, 1);
    CHECK_EQ_U64(st.strings_utf8_repaired, 1);
    CHECK_EQ_U64(st.stacks_truncated, 1);
    CHECK_EQ_U64(st.values_saturated, 1);
    CHECK_EQ_U64(st.windows_exported, 1);
    CHECK(st.export_ms_total >= st.export_ms_last && st.export_ms_max >= st.export_ms_last);

    /* A string longer than max_string_len is cut and counted. */
    ppk_sample_free(s);
    ppk_recorder_free(r);
    config(&cfg, PPK_CODEC_NONE);
    cfg.profile.max_string_len = 16;
    r = NULL;
    s = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(simple_sample(s, "a task name far longer than sixteen bytes", 1), 0);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.strings_truncated, 1);
    if (export_parse(r, &pp) == 0) {
        CHECK(has_string(&pp, "a task name far "));
        pr_free(&pp);
    }
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

/* ppk_export describes its window; seq counts up; a timestamped sample is kept alone. */
static void test_export_fields(void) {
    ppk_recorder *r = recorder(PPK_CODEC_NONE);
    ppk_sample *s = NULL;
    if (!r) return;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    int64_t t0 = ppk_now_ns();
    CHECK_EQ_INT(simple_sample(s, "a", 1), 0);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("ts"), PPK_STR("t.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_set_timestamp(s, 1234567), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
    ppk_export e1, e2;
    memset(&e1, 0, sizeof e1);
    memset(&e2, 0, sizeof e2);
    CHECK_EQ_INT(ppk_recorder_export(r, &e1), 0);
    CHECK_EQ_INT(ppk_recorder_export(r, &e2), 0);
    CHECK_EQ_U64(e1.seq, 1);
    CHECK_EQ_U64(e2.seq, 2);
    CHECK_EQ_INT(e1.codec, PPK_CODEC_NONE);
    CHECK(e1.start_ns <= t0 && e1.end_ns >= e1.start_ns && e2.start_ns >= e1.end_ns - 1);
    CHECK_EQ_U64(e1.stats.samples_added, 2);
    CHECK_EQ_U64(e1.stats.samples_timestamped, 1);
    CHECK_EQ_U64(e2.stats.samples_added, 0);
    pr_profile pp;
    CHECK_EQ_INT(pr_parse(e1.data.data, e1.data.len, &pp), 0);
    int found = 0;
    for (size_t i = 0; i < pp.nsamples; i++)
        if (pr_label_num(&pp, &pp.samples[i], "end_timestamp_ns", 0) == 1234567) found++;
    CHECK_EQ_INT(found, 1);
    CHECK_EQ_U64(pp.nsamples, 2);
    pr_free(&pp);
    CHECK_EQ_INT(pr_parse(e2.data.data, e2.data.len, &pp), 0);
    CHECK_EQ_U64(pp.nsamples, 0);
    pr_free(&pp);
    ppk_export_free(&e1);
    ppk_export_free(&e2);
    CHECK(e1.data.data == NULL);
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

/* How many labels of sample s have key `key`. */
static int count_labels(const pr_profile *pp, const pr_sample *s, const char *key) {
    int n = 0;
    for (size_t i = 0; i < s->nlab; i++) n += pr_streq(pr_string(pp, s->lab[i].key), key);
    return n;
}

/* Flushes one sample of span `span` with builder s. */
static void flush_span_sample(ppk_sample *s, uint64_t span) {
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("handler"), PPK_STR("h.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_push_label_num(s, PPK_STR("local root span id"), (int64_t)span,
                                           PPK_STR("")),
                 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
}

/* One sample of span `span`, exported alone: the "trace endpoint" it got in the
 * profile, copied into `out` ("" for none). */
static void span_endpoint(ppk_recorder *r, uint64_t span, char *out, size_t n) {
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    flush_span_sample(s, span);
    ppk_sample_free(s);
    out[0] = 0;
    pr_profile pp;
    if (export_parse(r, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 1);
        if (pp.nsamples == 1) {
            pr_str v = pr_label_str(&pp, &pp.samples[0], "trace endpoint");
            snprintf(out, n, "%.*s", (int)v.len, v.len ? v.ptr : "");
        }
        pr_free(&pp);
    }
}

/* Endpoint registrations are the recorder's: a span registered once labels its samples
 * in every window they fall in, while samples carry it; one that no sample carried
 * during endpoint_ttl_exports exports is evicted; the count is bounded. */
static void test_endpoints_across_windows(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.endpoint_ttl_exports = 2;
    cfg.max_endpoints = 3;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    char got[64];
    CHECK_EQ_INT(ppk_recorder_set_endpoint(r, 7, PPK_STR("GET /long")), 0);
    CHECK_EQ_INT(ppk_recorder_set_endpoint(r, 8, PPK_STR("GET /idle")), 0);
    CHECK_EQ_INT(ppk_recorder_set_endpoint(r, 0, PPK_STR("x")), PPK_EINVAL);
    CHECK_EQ_INT(ppk_recorder_set_endpoint(r, 9, (ppk_str){NULL, 1}), PPK_ENULL);
    /* Span 7 runs through four windows without registering again; 8 is never sampled. */
    for (int w = 0; w < 4; w++) {
        span_endpoint(r, 7, got, sizeof got);
        CHECK(strcmp(got, "GET /long") == 0);
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.endpoints, 1); /* 8: unused for 2 exports, evicted */
    span_endpoint(r, 8, got, sizeof got);
    CHECK(strcmp(got, "") == 0);
    /* Setting again replaces. */
    CHECK_EQ_INT(ppk_recorder_set_endpoint(r, 7, PPK_STR("GET /v2")), 0);
    span_endpoint(r, 7, got, sizeof got);
    CHECK(strcmp(got, "GET /v2") == 0);
    /* At most 3: the fourth registration is dropped, counted. */
    for (uint64_t span = 10; span < 13; span++)
        CHECK_EQ_INT(ppk_recorder_set_endpoint(r, span, PPK_STR("GET /n")), 0);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.endpoints, 3);
    CHECK_EQ_U64(st.endpoints_dropped, 1);
    span_endpoint(r, 12, got, sizeof got);
    CHECK(strcmp(got, "") == 0);
    span_endpoint(r, 11, got, sizeof got);
    CHECK(strcmp(got, "GET /n") == 0);
    ppk_recorder_free(r);
}

/* The "trace endpoint" of one sample of span 7 in a plain profile (ppk_profile_set_endpoint)
 * made with config pc, copied into `out` ("" for none); its repairs and cuts in *st. */
static void profile_endpoint(const ppk_profile_config *pc, ppk_str ep, char *out, size_t n,
                             ppk_profile_stats *st) {
    out[0] = 0;
    memset(st, 0, sizeof *st);
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(pc, &p), 0);
    if (!p) return;
    CHECK_EQ_INT(ppk_profile_set_endpoint(p, 7, ep), 0);
    ppk_frame fr = {.name = PPK_STR("handler"), .filename = PPK_STR("h.py"), .line = 1};
    ppk_label lb = {.key = PPK_STR("local root span id"), .num = 7, .is_num = 1};
    int64_t v = 1;
    ppk_sample_data sd = {&fr, 1, &lb, 1, &v, 1, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &sd), 0);
    ppk_profile_stats_get(p, st);
    ppk_encode_options o = {PPK_CODEC_NONE, 0, 0, 0};
    ppk_bytes b = {0};
    pr_profile pp;
    if (ppk_profile_encode(p, &o, &b) == 0 && pr_parse(b.data, b.len, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 1);
        if (pp.nsamples == 1) {
            pr_str l = pr_label_str(&pp, &pp.samples[0], "trace endpoint");
            snprintf(out, n, "%.*s", (int)l.len, l.len ? l.ptr : "");
        }
        pr_free(&pp);
    } else {
        CHECK(0);
    }
    ppk_bytes_free(&b);
    ppk_profile_free(p);
}

/* A registration is fitted for pprof as a plain profile fits it, repaired first, then cut
 * at a character boundary: the recorder's window gets the label ppk_profile_set_endpoint
 * gives, and the same repairs and cuts are counted. Invalid bytes past max_string_len
 * once lost the whole repaired tail ("GET " for "GET /" and 4,995 bytes of 0x80), or
 * the label itself (all 0x80). */
static void test_endpoint_fitted_as_profile(void) {
    static char prefixed[5000], invalid[5000], euro[5100], edge[4095], bad_short[] = "GET /\xFFx";
    memset(prefixed, 0x80, sizeof prefixed);
    memcpy(prefixed, "GET /", 5);
    memset(invalid, 0x80, sizeof invalid);
    for (size_t i = 0; i < sizeof euro; i += 3) memcpy(euro + i, "\xE2\x82\xAC", 3);
    memset(edge, 'a', sizeof edge);
    edge[sizeof edge - 1] = (char)0x80; /* its U+FFFD would pass max_string_len */
    const ppk_str eps[] = {
        {prefixed, sizeof prefixed}, {invalid, sizeof invalid}, {euro, sizeof euro},
        {edge, sizeof edge},         {bad_short, sizeof bad_short - 1},
    };
    static char got[8192], want[8192];
    for (size_t i = 0; i < sizeof eps / sizeof *eps; i++) {
        ppk_recorder_config cfg;
        config(&cfg, PPK_CODEC_NONE);
        ppk_recorder *r = NULL;
        CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
        if (!r) return;
        CHECK_EQ_INT(ppk_recorder_set_endpoint(r, 7, eps[i]), 0);
        span_endpoint(r, 7, got, sizeof got);
        ppk_profile_stats ps;
        profile_endpoint(&cfg.profile, eps[i], want, sizeof want, &ps);
        CHECK(want[0] != 0);
        CHECK_EQ_U64(strlen(got), strlen(want));
        if (strcmp(got, want) != 0) fprintf(stderr, "  endpoint %zu differs\n", i);
        CHECK(strcmp(got, want) == 0);
        ppk_recorder_stats st;
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.strings_utf8_repaired, ps.strings_utf8_repaired);
        CHECK_EQ_U64(st.strings_truncated, ps.strings_truncated);
        ppk_recorder_free(r);
    }
}

/* Registrations and samples of spans from two threads while a third exports back to
 * back (run under ThreadSanitizer too): every sample lands in an export, a sample's
 * endpoint is never another span's, the registrations stay bounded. With a TTL of one
 * export, a registration can be evicted before its sample is flushed (the worker paused
 * over two exports): that sample has no endpoint. With a TTL no run reaches, every
 * sample has its span's. */
static atomic_int eps_running;

static void *span_worker(void *arg) {
    ppk_recorder *r = arg;
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    for (uint64_t i = 1; atomic_load(&eps_running) && i <= 20000; i++) {
        uint64_t span = 1 + i % 500;
        char ep[32];
        snprintf(ep, sizeof ep, "GET /%llu", (unsigned long long)span);
        CHECK_EQ_INT(ppk_recorder_set_endpoint(r, span, ppk_cstr(ep)), 0);
        flush_span_sample(s, span);
    }
    ppk_sample_free(s);
    return NULL;
}

static void endpoints_concurrent(uint32_t ttl) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.endpoint_ttl_exports = ttl;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    atomic_store(&eps_running, 1);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) CHECK_EQ_INT(pthread_create(&t[i], NULL, span_worker, r), 0);
    uint64_t samples = 0, labelled = 0, wrong = 0, exports = 0;
    for (int done = 0; !done;) {
        done = pthread_tryjoin_np(t[0], NULL) == 0;
        if (done) pthread_join(t[1], NULL);
        pr_profile pp;
        if (export_parse(r, &pp) != 0) break;
        exports++;
        int ic = pr_type_index(&pp, "samples");
        for (size_t j = 0; j < pp.nsamples; j++) {
            const pr_sample *ps = &pp.samples[j];
            int64_t span = pr_label_num(&pp, ps, "local root span id", 0);
            pr_str v = pr_label_str(&pp, ps, "trace endpoint");
            char want[32];
            snprintf(want, sizeof want, "GET /%lld", (long long)span);
            uint64_t n = (uint64_t)ps->val[ic];
            samples += n;
            if (v.len) {
                labelled += n;
                wrong += pr_streq(v, want) ? 0 : n;
            }
        }
        pr_free(&pp);
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(samples, st.samples_flushed);
    CHECK_EQ_U64(wrong, 0);
    if (ttl > 1) CHECK_EQ_U64(labelled, samples);
    CHECK(st.endpoints <= 500);
    CHECK_EQ_U64(st.endpoints_dropped, 0);
    fprintf(stderr, "  endpoints, TTL %u: %llu samples in %llu exports, %llu labelled\n", ttl,
            (unsigned long long)samples, (unsigned long long)exports,
            (unsigned long long)labelled);
    ppk_recorder_free(r);
}

static void test_endpoints_concurrent(void) {
    endpoints_concurrent(1);
    endpoints_concurrent(UINT32_MAX);
}

/* An export the caller takes (ppk_recorder_export(r, &e)) carries the window's endpoint
 * counts, in the order the endpoints were first counted, copied: they outlive the window
 * (the next export, which resets it) until ppk_export_free. */
static void test_export_endpoint_counts(void) {
    ppk_recorder *r = recorder(PPK_CODEC_NONE);
    if (!r) return;
    CHECK_EQ_INT(ppk_recorder_add_endpoint_count(r, PPK_STR("GET /b"), 2), 0);
    CHECK_EQ_INT(ppk_recorder_add_endpoint_count(r, PPK_STR("GET /a"), 1), 0);
    CHECK_EQ_INT(ppk_recorder_add_endpoint_count(r, PPK_STR("GET /b"), 3), 0);
    ppk_export e, next;
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    CHECK_EQ_INT(ppk_recorder_add_endpoint_count(r, PPK_STR("POST /c"), 9), 0);
    CHECK_EQ_INT(ppk_recorder_export(r, &next), 0);
    CHECK_EQ_U64(e.n_endpoint_counts, 2);
    if (e.n_endpoint_counts == 2) {
        CHECK_STR(e.endpoint_counts[0].endpoint.ptr, e.endpoint_counts[0].endpoint.len, "GET /b");
        CHECK(e.endpoint_counts[0].count == 5);
        CHECK_STR(e.endpoint_counts[1].endpoint.ptr, e.endpoint_counts[1].endpoint.len, "GET /a");
        CHECK(e.endpoint_counts[1].count == 1);
    }
    CHECK_EQ_U64(next.n_endpoint_counts, 1);
    ppk_export_free(&e);
    CHECK(e.endpoint_counts == NULL && e.n_endpoint_counts == 0);
    ppk_export_free(&next);
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    CHECK_EQ_U64(e.n_endpoint_counts, 0);
    CHECK(e.endpoint_counts == NULL);
    ppk_export_free(&e);
    ppk_recorder_free(r);
}

/* Three shards, one builder on each: the samples of all three are in one export, with
 * their own frames and labels; an endpoint set on the recorder labels the samples of
 * every shard whose span id it names, except a sample that has its own "trace endpoint". */
static void test_shards(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_GZIP);
    cfg.shards = 3;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    CHECK_EQ_INT(ppk_recorder_set_endpoint(r, 7, PPK_STR("GET /ep")), 0);
    ppk_sample *b[3] = {NULL, NULL, NULL};
    static const char *fn[3] = {"zero", "one", "two"};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(ppk_sample_create(r, &b[i]), 0);
        if (!b[i]) continue;
        for (int k = 0; k <= i; k++) { /* shard i: i + 1 samples */
            CHECK_EQ_INT(ppk_sample_start(b[i]), 0);
            ppk_str name = {fn[i], strlen(fn[i])};
            CHECK_EQ_INT(ppk_sample_push_frame(b[i], name, PPK_STR("s.py"), 1 + i, 0), 0);
            CHECK_EQ_INT(ppk_sample_push_label_num(b[i], PPK_STR("local root span id"), 7,
                                                   PPK_STR("")),
                         0);
            if (i == 2)
                CHECK_EQ_INT(ppk_sample_push_label_str(b[i], PPK_STR("trace endpoint"),
                                                       PPK_STR("own")),
                             0);
            CHECK_EQ_INT(ppk_sample_set_value(b[i], 0, 10 + i), 0);
            CHECK_EQ_INT(ppk_sample_flush(b[i]), 0);
        }
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_flushed, 6);
    pr_profile pp;
    if (export_parse(r, &pp) == 0) {
        int ic = pr_type_index(&pp, "samples");
        CHECK_EQ_U64(pp.nsamples, 3);
        int seen = 0;
        for (size_t j = 0; j < pp.nsamples; j++) {
            const pr_sample *ps = &pp.samples[j];
            const pr_function *f = pr_frame_fn(&pp, ps, 0);
            int i = -1;
            for (int k = 0; k < 3; k++)
                if (f && pr_streq(pr_string(&pp, f->name), fn[k])) i = k;
            CHECK(i >= 0);
            if (i < 0) continue;
            seen |= 1 << i;
            CHECK_EQ_INT(ps->val[ic], (int64_t)(i + 1) * (10 + i));
            CHECK_EQ_INT(pr_label_num(&pp, ps, "local root span id", 0), 7);
            CHECK_EQ_INT(count_labels(&pp, ps, "trace endpoint"), 1);
            CHECK(pr_streq(pr_label_str(&pp, ps, "trace endpoint"), i == 2 ? "own" : "GET /ep"));
        }
        CHECK_EQ_INT(seen, 7);
        pr_free(&pp);
    }
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_exported, 6);
    CHECK_EQ_U64(st.windows_exported, 1);
    for (int i = 0; i < 3; i++) ppk_sample_free(b[i]);
    ppk_recorder_free(r);
    /* Out of range. */
    config(&cfg, PPK_CODEC_GZIP);
    cfg.shards = 65;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), PPK_EINVAL);
}

/* Starts and stops of the background exporter from eight threads at once, 20,000 each, in
 * random order: every call returns. (The exporter read the generation it was to run
 * under when it first got the lock; a stop, then a start, before that made it take the
 * new one's: it never ended, and the stop joining it waited for ever.) A watchdog fails
 * the test instead of hanging it. */
static ppk_recorder *storm_r;

static void *start_stop(void *arg) {
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < 20000; i++) {
        if (rand_r(&seed) & 1)
            CHECK_EQ_INT(ppk_recorder_start(storm_r), 0);
        else
            ppk_recorder_stop(storm_r);
    }
    return NULL;
}

static void hung(int sig) {
    (void)sig;
    static const char msg[] = "test_start_stop_storm: a start or stop never returned\n";
    ssize_t w = write(2, msg, sizeof msg - 1);
    (void)w;
    _exit(1);
}

static void test_start_stop_storm(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.export_period_ms = 1;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &storm_r), 0);
    if (!storm_r) return;
    signal(SIGALRM, hung);
    alarm(60);
    pthread_t t[8];
    for (uintptr_t i = 0; i < 8; i++)
        CHECK_EQ_INT(pthread_create(&t[i], NULL, start_stop, (void *)(i + 1)), 0);
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    alarm(0);
    signal(SIGALRM, SIG_DFL);
    ppk_recorder_free(storm_r);
}

/* A config string that needs a cut (a sample type of 15 bytes with max_string_len 11) is
 * counted once, whatever the shards: the recorder fits the same config in every window
 * it makes (two a shard), and each counted it, in the statistics and in the comments of
 * the first two exports. */
static void test_config_repairs_counted_once(void) {
    for (size_t shards = 1; shards <= 4; shards *= 2) {
        ppk_recorder_config cfg;
        config(&cfg, PPK_CODEC_NONE);
        cfg.profile.sample_types[0].type = PPK_STR("samples-counted");
        cfg.profile.max_string_len = 11; /* "nanoseconds" fits */
        cfg.shards = shards;
        ppk_recorder *r = NULL;
        CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
        if (!r) return;
        ppk_recorder_stats st;
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.strings_truncated, 1);
        for (int i = 0; i < 3; i++) {
            ppk_export e;
            CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
            CHECK_EQ_U64(e.stats.strings_truncated, i == 0 ? 1 : 0);
            ppk_export_free(&e);
        }
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.strings_truncated, 1);
        ppk_recorder_free(r);
    }
}

/* ppk_sample_omit_frames: a stack of D frames with max_frames 8, its first min(D, 8)
 * frames pushed and the rest counted, exports as the whole stack pushed (D = 1, 7, 8, 9,
 * 30: under, at and past the limit); frames pushed after it are counted too; out of
 * order it is PPK_ESTATE. */
static void test_omit_frames(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.profile.max_frames = 8;
    ppk_recorder *all = NULL, *counted = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &all), 0);
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &counted), 0);
    ppk_sample *a = NULL, *c = NULL;
    if (all) CHECK_EQ_INT(ppk_sample_create(all, &a), 0);
    if (counted) CHECK_EQ_INT(ppk_sample_create(counted, &c), 0);
    if (!a || !c) goto out;
    CHECK_EQ_INT(ppk_sample_omit_frames(c, 1), PPK_ESTATE);
    static const int depths[] = {1, 7, 8, 9, 30};
    for (size_t k = 0; k < sizeof depths / sizeof depths[0]; k++) {
        int d = depths[k], pushed = d < 8 ? d : 8;
        CHECK_EQ_INT(ppk_sample_start(a), 0);
        CHECK_EQ_INT(ppk_sample_start(c), 0);
        for (int i = 0; i < d; i++) {
            char fn[32];
            snprintf(fn, sizeof fn, "f%d_%d", d, i);
            CHECK_EQ_INT(ppk_sample_push_frame(a, ppk_cstr(fn), PPK_STR("d.py"), i + 1, 0), 0);
            if (i < pushed)
                CHECK_EQ_INT(ppk_sample_push_frame(c, ppk_cstr(fn), PPK_STR("d.py"), i + 1, 0), 0);
        }
        CHECK_EQ_INT(ppk_sample_omit_frames(c, (uint64_t)(d - pushed)), 0);
        CHECK_EQ_INT(ppk_sample_set_value(a, 0, d), 0);
        CHECK_EQ_INT(ppk_sample_set_value(c, 0, d), 0);
        CHECK_EQ_INT(ppk_sample_flush(a), 0);
        CHECK_EQ_INT(ppk_sample_flush(c), 0);
    }
    char *x = export_describe(all), *y = export_describe(counted);
    CHECK(x && y && strstr(x, "<23 frames omitted>") && strstr(x, "<2 frames omitted>"));
    if (x && y && strcmp(x, y) != 0) fprintf(stderr, "pushed:\n%s\ncounted:\n%s\n", x, y);
    CHECK(x && y && strcmp(x, y) == 0);
    free(x);
    free(y);
    /* 3 pushed, 4 counted, 2 more pushed (root side of the counted ones): 3 frames and
     * "<6 frames omitted>". */
    CHECK_EQ_INT(ppk_sample_start(c), 0);
    for (int i = 0; i < 5; i++) {
        CHECK_EQ_INT(ppk_sample_push_frame(c, PPK_STR("g"), PPK_STR("g.py"), i + 1, 0), 0);
        if (i == 2) CHECK_EQ_INT(ppk_sample_omit_frames(c, 4), 0);
    }
    CHECK_EQ_INT(ppk_sample_omit_frames(c, 0), 0);
    CHECK_EQ_INT(ppk_sample_set_value(c, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(c), 0);
    pr_profile pp;
    if (export_parse(counted, &pp) == 0) {
        CHECK(pp.nsamples == 1 && pp.samples[0].nloc == 4);
        CHECK(has_string(&pp, "<6 frames omitted>"));
        pr_free(&pp);
    }
    /* The omitted frame's name is cut at max_string_len like any string. */
    ppk_recorder_free(counted);
    cfg.profile.max_string_len = 16;
    counted = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &counted), 0);
    ppk_sample_free(c);
    c = NULL;
    if (counted) CHECK_EQ_INT(ppk_sample_create(counted, &c), 0);
    if (!c) goto out;
    CHECK_EQ_INT(ppk_sample_start(c), 0);
    CHECK_EQ_INT(ppk_sample_push_frame(c, PPK_STR("g"), PPK_STR("g.py"), 1, 0), 0);
    CHECK_EQ_INT(ppk_sample_omit_frames(c, UINT64_MAX), 0);
    CHECK_EQ_INT(ppk_sample_flush(c), 0);
    if (export_parse(counted, &pp) == 0) {
        CHECK(pp.nsamples == 1 && pp.samples[0].nloc == 2);
        CHECK(has_string(&pp, "<184467440737095"));
        for (size_t i = 0; i < pp.nfns; i++)
            CHECK(pr_string(&pp, pp.fns[i].name).len <= 16);
        pr_free(&pp);
    }
out:
    ppk_sample_free(a);
    ppk_sample_free(c);
    ppk_recorder_free(all);
    ppk_recorder_free(counted);
}

/* The labels of test_prepared_labels: a string, one cut at max_string_len 12, one
 * with bytes that are not UTF-8, a number with a unit. */
static const ppk_label prep_labels[] = {
    {.key = PPK_STR("thread name"), .str = PPK_STR("MainThread")},
    {.key = PPK_STR("task name"), .str = PPK_STR("request-123456789")},
    {.key = PPK_STR("odd"), .str = PPK_STR("x\xff\xfey")},
    {.key = PPK_STR("thread id"), .is_num = 1, .num = 42, .num_unit = PPK_STR("id")},
};
#define N_PREP (sizeof prep_labels / sizeof prep_labels[0])

/* Sample i of test_prepared_labels: a stack of its own (i % 3) and the labels whose bit
 * is set in 1 + i % 15, by their strings or prepared. */
static int prep_sample(ppk_sample *s, int i, ppk_prepared_label *const *prepared) {
    int rc = ppk_sample_start(s);
    if (!rc) rc = ppk_sample_push_frame(s, PPK_STR("leaf"), PPK_STR("a.py"), 3 + i % 3, 0);
    for (size_t k = 0; k < N_PREP && !rc; k++) {
        if (!((1 + i % 15) >> k & 1)) continue;
        const ppk_label *l = &prep_labels[k];
        rc = prepared ? ppk_sample_push_prepared_label(s, prepared[k])
             : l->is_num ? ppk_sample_push_label_num(s, l->key, l->num, l->num_unit)
                         : ppk_sample_push_label_str(s, l->key, l->str);
    }
    if (!rc) rc = ppk_sample_set_value(s, 1, 100 + i);
    return rc ? rc : ppk_sample_flush(s);
}

/* A pushing thread of test_prepared_labels: its own builder, the shared labels. */
typedef struct prep_pusher {
    ppk_recorder *r;
    ppk_prepared_label *const *prepared;
    int failed;
} prep_pusher;

static void *prep_push(void *arg) {
    prep_pusher *p = arg;
    ppk_sample *s = NULL;
    if (ppk_sample_create(p->r, &s)) {
        p->failed = 1;
        return NULL;
    }
    for (int i = 0; i < 300; i++)
        if (prep_sample(s, i, p->prepared)) p->failed = 1;
    ppk_sample_free(s);
    return NULL;
}

/* ppk_label_prepare: samples with prepared labels export as the same samples with the
 * labels pushed by their strings (cut and repaired alike, the repairs counted alike),
 * from two threads sharing the prepared labels; the checks of a label push are made at
 * prepare, a push's own at push (the state, a key pushed already, max_labels, a recorder
 * gone); in one window, a label pushed both ways makes one sample; a prepared label
 * outlives its builder and recorder. */
static void test_prepared_labels(void) {
    ppk_recorder_config cfg;
    config(&cfg, PPK_CODEC_NONE);
    cfg.profile.max_string_len = 12;
    cfg.profile.max_labels = N_PREP;
    ppk_recorder *by_str = NULL, *by_prep = NULL, *other = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &by_str), 0);
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &by_prep), 0);
    cfg.profile.max_string_len = 13;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &other), 0);
    ppk_sample *s = NULL, *o = NULL;
    if (by_str) CHECK_EQ_INT(ppk_sample_create(by_str, &s), 0);
    if (other) CHECK_EQ_INT(ppk_sample_create(other, &o), 0);
    ppk_prepared_label *pl[N_PREP] = {NULL};
    if (!s || !o || !by_prep) goto out;
    for (size_t k = 0; k < N_PREP; k++) CHECK_EQ_INT(ppk_label_prepare(s, &prep_labels[k], &pl[k]), 0);
    for (size_t k = 0; k < N_PREP; k++)
        if (!pl[k]) goto out;

    /* The same samples both ways: 600 by strings, 2 x 300 prepared from two threads. */
    for (int j = 0; j < 2; j++)
        for (int i = 0; i < 300; i++) CHECK_EQ_INT(prep_sample(s, i, NULL), 0);
    prep_pusher pp[2] = {{by_prep, pl, 0}, {by_prep, pl, 0}};
    pthread_t t[2];
    for (int j = 0; j < 2; j++) CHECK_EQ_INT(pthread_create(&t[j], NULL, prep_push, &pp[j]), 0);
    for (int j = 0; j < 2; j++) {
        pthread_join(t[j], NULL);
        CHECK(!pp[j].failed);
    }
    ppk_export ea, eb;
    CHECK_EQ_INT(ppk_recorder_export(by_str, &ea), 0);
    CHECK_EQ_INT(ppk_recorder_export(by_prep, &eb), 0);
    CHECK(ea.stats.strings_truncated > 0 && ea.stats.strings_utf8_repaired > 0);
    CHECK_EQ_U64(eb.stats.strings_truncated, ea.stats.strings_truncated);
    CHECK_EQ_U64(eb.stats.strings_utf8_repaired, ea.stats.strings_utf8_repaired);
    pr_profile a, b;
    CHECK_EQ_INT(pr_parse(ea.data.data, ea.data.len, &a), 0);
    CHECK_EQ_INT(pr_parse(eb.data.data, eb.data.len, &b), 0);
    char *x = pr_describe(&a), *y = pr_describe(&b);
    CHECK(x && y && strcmp(x, y) == 0);
    CHECK(has_string(&b, "request-1234") && !has_string(&b, "request-12345"));
    CHECK_EQ_U64(a.nsamples, 15); /* 15 label sets, each with one of the 3 stacks */
    free(x);
    free(y);
    pr_free(&a);
    pr_free(&b);
    ppk_export_free(&ea);
    ppk_export_free(&eb);

    /* A label push's checks, at prepare. */
    ppk_prepared_label *bad = pl[0];
    ppk_label l = {.key = PPK_STR(""), .str = PPK_STR("v")};
    CHECK_EQ_INT(ppk_label_prepare(s, &l, &bad), PPK_EEMPTYKEY);
    CHECK(bad == NULL);
    l.key = (ppk_str){NULL, 2};
    CHECK_EQ_INT(ppk_label_prepare(s, &l, &bad), PPK_ENULL);
    l = (ppk_label){.key = PPK_STR("end_timestamp_ns"), .is_num = 1, .num = 5};
    CHECK_EQ_INT(ppk_label_prepare(s, &l, &bad), PPK_ERESERVED);
    l = (ppk_label){.key = PPK_STR("local root span id"), .is_num = 1, .num = 0};
    CHECK_EQ_INT(ppk_label_prepare(s, &l, &bad), PPK_ESPANID);
    CHECK_EQ_INT(ppk_label_prepare(NULL, &l, &bad), PPK_EINVAL);
    CHECK_EQ_INT(ppk_label_prepare(s, NULL, &bad), PPK_EINVAL);
    CHECK_EQ_INT(ppk_label_prepare(s, &l, NULL), PPK_EINVAL);
    /* A push's own: the sample's state, a key pushed already (by its string too), another
     * max_string_len; the sample is usable after each. */
    CHECK_EQ_INT(ppk_sample_push_prepared_label(s, pl[0]), PPK_ESTATE);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("thread name"), PPK_STR("T")), 0);
    CHECK_EQ_INT(ppk_sample_push_prepared_label(s, pl[0]), PPK_EDUPLABEL);
    CHECK_EQ_INT(ppk_sample_push_prepared_label(s, pl[1]), 0);
    CHECK_EQ_INT(ppk_sample_push_prepared_label(s, pl[1]), PPK_EDUPLABEL);
    CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("task name"), PPK_STR("x")),
                 PPK_EDUPLABEL);
    CHECK_EQ_INT(ppk_sample_push_prepared_label(s, NULL), PPK_EINVAL);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
    CHECK_EQ_INT(ppk_sample_start(o), 0);
    CHECK_EQ_INT(ppk_sample_push_prepared_label(o, pl[0]), PPK_EINVAL);
    CHECK_EQ_INT(ppk_sample_drop(o), 0);
    pr_profile c;
    if (export_parse(by_str, &c) == 0) {
        CHECK_EQ_U64(c.nsamples, 1);
        if (c.nsamples == 1) {
            CHECK(pr_streq(pr_label_str(&c, &c.samples[0], "thread name"), "T"));
            CHECK(pr_streq(pr_label_str(&c, &c.samples[0], "task name"), "request-1234"));
        }
        pr_free(&c);
    }
    /* In one window, the labels by their strings and prepared (in another order) make
     * one sample: the same records and hashes. */
    for (int prepared = 0; prepared <= 1; prepared++) {
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("leaf"), PPK_STR("a.py"), 3, 0), 0);
        for (size_t k = 0; k < N_PREP; k++) {
            size_t j = prepared ? N_PREP - 1 - k : k;
            const ppk_label *pj = &prep_labels[j];
            CHECK_EQ_INT(prepared ? ppk_sample_push_prepared_label(s, pl[j])
                         : pj->is_num ? ppk_sample_push_label_num(s, pj->key, pj->num, pj->num_unit)
                                     : ppk_sample_push_label_str(s, pj->key, pj->str),
                         0);
        }
        CHECK_EQ_INT(ppk_sample_set_value(s, 1, 10 + prepared), 0);
        CHECK_EQ_INT(ppk_sample_flush(s), 0);
    }
    if (export_parse(by_str, &c) == 0) {
        CHECK_EQ_U64(c.nsamples, 1);
        CHECK_EQ_INT((int)total(&c, 1), 21);
        pr_free(&c);
    }
    /* Past max_labels (N_PREP), and once the recorder is gone. */
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    for (size_t k = 0; k < N_PREP; k++) CHECK_EQ_INT(ppk_sample_push_prepared_label(s, pl[k]), 0);
    ppk_label fifth = {.key = PPK_STR("fifth"), .str = PPK_STR("v")};
    ppk_prepared_label *pf = NULL;
    CHECK_EQ_INT(ppk_label_prepare(s, &fifth, &pf), 0);
    CHECK_EQ_INT(ppk_sample_push_prepared_label(s, pf), PPK_ETOOMANY);
    CHECK_EQ_INT(ppk_sample_drop(s), 0);
    ppk_recorder_free(by_str);
    by_str = NULL;
    CHECK_EQ_INT(ppk_sample_push_prepared_label(s, pf), PPK_ECLOSED);
    ppk_prepared_label_free(pf);
out:
    /* The prepared labels outlive everything they were made and pushed with. */
    ppk_sample_free(s);
    ppk_sample_free(o);
    ppk_recorder_free(by_str);
    ppk_recorder_free(by_prep);
    ppk_recorder_free(other);
    for (size_t k = 0; k < N_PREP; k++) ppk_prepared_label_free(pl[k]);
    ppk_prepared_label_free(NULL);
}

int main(void) {
    RUN(test_start_stop_storm);
    RUN(test_config_repairs_counted_once);
    RUN(test_state_machine);
    RUN(test_closed);
    RUN(test_seal_then_last_export);
    RUN(test_no_sink_counted);
    RUN(test_failed_calls_leave_sample_unchanged);
    RUN(test_duplicate_label_sample_usable);
    RUN(test_drop_discards);
    RUN(test_transient_input);
    RUN(test_blocking_sink_caller);
    RUN(test_blocking_sink_background);
    RUN(test_sink_table_full);
    RUN(test_sink_file_uses_the_allocator);
    RUN(test_sink_file);
    RUN(test_sink_file_config_and_failure);
    RUN(test_sink_file_sync_and_dir);
    RUN(test_sink_file_relative_dir);
    RUN(test_sink_file_shared_name);
    RUN(test_stats_degradations);
    RUN(test_export_fields);
    RUN(test_shards);
    RUN(test_export_endpoint_counts);
    RUN(test_endpoints_across_windows);
    RUN(test_endpoint_fitted_as_profile);
    RUN(test_endpoints_concurrent);
    RUN(test_omit_frames);
    RUN(test_prepared_labels);
    return check_summary();
}
