/*
 * test_fdict.c - the function dictionary (ppk_recorder_intern_function,
 * ppk_sample_push_frame_id): frames by id give the profile that the same frames by
 * strings give, ids are refused once evicted (never a wrong name), the dictionary stays
 * within its bounds, and interning, pushing and exporting from several threads keep
 * every sample and every name right (run under ThreadSanitizer in the TSan build).
 *
 * Exports are read back with tests/pprof_read.h, a decoder that shares no code with the
 * library. Cases:
 *   - equivalence: samples pushed by id (mixed with frames by strings) export exactly as
 *     the same samples pushed with ppk_sample_push_frame_ex, in another recorder;
 *   - batch: ppk_sample_push_frames_id gives what one push per frame gives (whole
 *     stacks, pieces, past max_frames and the builder's max_bytes, both record sizes),
 *     a refused call changes nothing, and an id of another recorder makes the flush
 *     refuse the sample (a batch's ids are checked by the window);
 *   - identity: the same function gives the same id, another start line or string
 *     another id; strings that need a repair are stored repaired and match again;
 *   - tags (src/fdict.h directly): no two live dictionaries share a tag, however many
 *     were made and freed in between, so one's ids are refused by the other; with
 *     every tag taken the next dictionary is refused until one is freed;
 *   - errors: NULL arguments, NULL strings, id 0, ids of another recorder, made up ids;
 *   - eviction: a function unused for function_ttl_exports exports is evicted, its id
 *     refused at push, and, when evicted between a push and the flush, the flush is
 *     refused and counted (samples_dropped_stale); interning again gives a new id;
 *   - batch eviction: a function pushed only in batches lives while its samples are
 *     flushed (the windows mark it used when they meet it); evicted, its id is refused
 *     at the flush, also once its slot holds another function;
 *   - bounds: max_functions and max_function_bytes refuse new functions (PPK_EFULL,
 *     counted) and accept them again once entries are evicted; 1,000 exports of ever
 *     new names keep the dictionary's entries and bytes flat;
 *   - threads: four threads intern (known and new names), push by id (two one frame
 *     at a time, two in batches) and flush while another exports back to back with a
 *     TTL of one export; every sample flushed is in exactly one export, every refused
 *     flush is counted, and each sample's leaf function is the one its label names;
 *   - fork: a child keeps the dictionary: ids interned before fork() work there;
 *   - marks (src/fdict.h directly): a push whose epoch was read before an export (a
 *     batch begun then) does not take back a later push's mark of the same function,
 *     which then lives its whole TTL; the epoch skips the free slots' last use;
 *   - batch marks (through the API, two threads): one thread pushes a function in big
 *     batches (which check nothing until a flush) and drops them, the other, round
 *     after round, begins a sample, exports, pushes the function, exports again and
 *     flushes, with a TTL of one export: the function was pushed in the period the
 *     second export ended, so no flush may be refused. (A push may be: the function
 *     may have had no push in the period the first export ended. The thread then
 *     interns it again.)
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "fdict.h"
#include "pprof_read.h"
#include "pprofkit.h"

static void config(ppk_recorder_config *cfg) {
    ppk_recorder_config_init(cfg);
    cfg->profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg->profile.n_sample_types = 1;
    cfg->codec = PPK_CODEC_NONE;
}

static ppk_recorder *recorder_ttl(uint32_t ttl) {
    ppk_recorder_config cfg;
    config(&cfg);
    cfg.function_ttl_exports = ttl;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    return r;
}

static int export_parse(ppk_recorder *r, pr_profile *pp) {
    ppk_export e;
    memset(pp, 0, sizeof *pp);
    int rc = ppk_recorder_export(r, &e);
    CHECK_EQ_INT(rc, 0);
    if (rc) return rc;
    rc = pr_parse(e.data.data, e.data.len, pp);
    CHECK_EQ_INT(rc, 0);
    ppk_export_free(&e);
    return rc;
}

static char *export_describe(ppk_recorder *r) {
    pr_profile pp;
    if (export_parse(r, &pp)) return NULL;
    char *d = pr_describe(&pp);
    pr_free(&pp);
    return d;
}

/* Exports the window to nobody (ending an epoch of the dictionary). */
static int export_drop(ppk_recorder *r) {
    ppk_export e;
    int rc = ppk_recorder_export(r, &e);
    ppk_export_free(&e);
    return rc;
}

static int64_t total(const pr_profile *pp) {
    int64_t sum = 0;
    for (size_t i = 0; i < pp->nsamples; i++) sum += pp->samples[i].val[0];
    return sum;
}

static ppk_function fn(const char *name, const char *sys, const char *file, int64_t start) {
    ppk_function f = {ppk_cstr(name), ppk_cstr(sys), ppk_cstr(file), start};
    return f;
}

static ppk_function_id intern(ppk_recorder *r, ppk_function f) {
    ppk_function_id id = 0;
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &f, &id), 0);
    CHECK(id != 0);
    return id;
}

/* One sample of value `v` with the single frame `id` at `line`. */
static int one_frame(ppk_sample *s, ppk_function_id id, int64_t line, int64_t v) {
    int rc = ppk_sample_start(s);
    if (!rc) rc = ppk_sample_push_frame_id(s, id, line);
    if (!rc) rc = ppk_sample_set_value(s, 0, v);
    if (rc) {
        ppk_sample_drop(s);
        return rc;
    }
    return ppk_sample_flush(s);
}

/* The same with the frame pushed as a batch of one (ppk_sample_push_frames_id). */
static int one_batch(ppk_sample *s, ppk_function_id id, int64_t line, int64_t v) {
    ppk_id_frame fr[1] = {{id, line}};
    int rc = ppk_sample_start(s);
    if (!rc) rc = ppk_sample_push_frames_id(s, fr, 1);
    if (!rc) rc = ppk_sample_set_value(s, 0, v);
    if (rc) {
        ppk_sample_drop(s);
        return rc;
    }
    return ppk_sample_flush(s);
}

/* ---------------------------------------------------------------------------------- */

#define N_FNS 6
static const ppk_function *fns(void) {
    static ppk_function f[N_FNS];
    f[0] = fn("leaf", "", "a.py", 0);
    f[1] = fn("Klass.method", "_ZN5Klass6methodEv", "/src/klass.cc", 40);
    f[2] = fn("main", "", "a.py", 1);
    f[3] = fn("", "", "", 0); /* all empty */
    f[4] = fn("caf\xc3\xa9", "", "caf\xc3\xa9.py", 7);
    f[5] = fn("leaf", "", "a.py", 3); /* another start line: another function */
    return f;
}

/* Sample k of the equivalence test, pushed by strings or by ids. */
static int equiv_sample(ppk_sample *s, int k, const ppk_function_id *ids) {
    const ppk_function *f = fns();
    int rc = ppk_sample_start(s);
    for (int i = 0; !rc && i < 4; i++) {
        int j = (k + i * 5) % N_FNS;
        /* Lines outside 0..2^32-1 (the builder's long record for an id) now and then. */
        int64_t line = i == 3 && k % 5 == 1 ? -7 : i == 3 && k % 5 == 2 ? (int64_t)1 << 40
                                                                          : 10 * i + k % 3;
        uint64_t addr = i == 2 ? 0x1000u + (uint64_t)k : 0;
        if (ids && i != 1) {
            rc = addr ? ppk_sample_push_frame_id_addr(s, ids[j], line, addr)
                      : ppk_sample_push_frame_id(s, ids[j], line);
        } else {
            ppk_frame fr = {.name = f[j].name, .system_name = f[j].system_name,
                            .filename = f[j].filename, .start_line = f[j].start_line,
                            .line = line, .address = addr};
            rc = ppk_sample_push_frame_ex(s, &fr);
        }
    }
    if (!rc) rc = ppk_sample_push_label_num(s, PPK_STR("k"), k % 4, PPK_STR(""));
    if (!rc) rc = ppk_sample_set_value(s, 0, k + 1);
    return rc ? rc : ppk_sample_flush(s);
}

static void test_equivalence(void) {
    ppk_recorder *by_str = recorder_ttl(4), *by_id = recorder_ttl(4);
    ppk_sample *s1 = NULL, *s2 = NULL;
    CHECK_EQ_INT(ppk_sample_create(by_str, &s1), 0);
    CHECK_EQ_INT(ppk_sample_create(by_id, &s2), 0);
    ppk_function_id ids[N_FNS];
    for (int i = 0; i < N_FNS; i++) ids[i] = intern(by_id, fns()[i]);
    for (int round = 0; round < 2; round++) { /* the second: a window meeting ids anew */
        for (int k = 0; k < 60; k++) {
            CHECK_EQ_INT(equiv_sample(s1, k, NULL), 0);
            CHECK_EQ_INT(equiv_sample(s2, k, ids), 0);
        }
        char *a = export_describe(by_str), *b = export_describe(by_id);
        CHECK(a && b && strlen(a) > 0);
        if (a && b && strcmp(a, b) != 0)
            fprintf(stderr, "by strings:\n%s\nby ids:\n%s\n", a, b);
        CHECK(a && b && strcmp(a, b) == 0);
        free(a);
        free(b);
    }
    ppk_sample_free(s1);
    ppk_sample_free(s2);
    ppk_recorder_free(by_str);
    ppk_recorder_free(by_id);
}

/* Sample k of the batch test: frames (ids[(k + i) % n], line i - 2 or 2^33 + i) for i <
 * depth, by ppk_sample_push_frames_id in one call or in pieces of `piece`, or (piece 0)
 * one ppk_sample_push_frame_id each. */
static int batch_sample(ppk_sample *s, int k, const ppk_function_id *ids, size_t n,
                        size_t depth, size_t piece) {
    ppk_id_frame fr[300];
    for (size_t i = 0; i < depth; i++)
        fr[i] = (ppk_id_frame){ids[((size_t)k + i) % n],
                               k % 4 == 3 ? ((int64_t)1 << 33) + (int64_t)i : (int64_t)i - 2};
    int rc = ppk_sample_start(s);
    for (size_t i = 0; !rc && i < depth; i += piece ? piece : 1) {
        size_t m = piece ? (depth - i < piece ? depth - i : piece) : 1;
        rc = piece ? ppk_sample_push_frames_id(s, fr + i, m)
                   : ppk_sample_push_frame_id(s, fr[i].function, fr[i].line);
    }
    if (!rc) rc = ppk_sample_set_value(s, 0, k + 1);
    return rc ? rc : ppk_sample_flush(s);
}

static ppk_recorder *recorder_frames(size_t max_frames, size_t builder_max_bytes) {
    ppk_recorder_config cfg;
    config(&cfg);
    cfg.profile.max_frames = max_frames;
    if (builder_max_bytes) cfg.builder_max_bytes = cfg.builder_keep_bytes = builder_max_bytes;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    return r;
}

/* ppk_sample_push_frames_id gives the profile that one ppk_sample_push_frame_id per frame
 * gives: whole stacks, pieces, stacks past max_frames (cut the same way) and past the
 * builder's max_bytes, both record sizes; and a call refused (a stale id in the middle,
 * NULL, a sample not begun) leaves the sample as it was. */
static void test_batch(void) {
    /* max_frames, the builder's max_bytes (0: default), the deepest stack */
    static const size_t limits[][3] = {{64, 0, 41}, {12, 0, 41}, {512, 4096, 300}};
    for (size_t c = 0; c < sizeof limits / sizeof limits[0]; c++) {
        ppk_recorder *one = recorder_frames(limits[c][0], limits[c][1]);
        ppk_recorder *many = recorder_frames(limits[c][0], limits[c][1]);
        ppk_function_id a[N_FNS], b[N_FNS];
        for (int i = 0; i < N_FNS; i++) {
            a[i] = intern(one, fns()[i]);
            b[i] = intern(many, fns()[i]);
        }
        ppk_sample *s1 = NULL, *s2 = NULL;
        CHECK_EQ_INT(ppk_sample_create(one, &s1), 0);
        CHECK_EQ_INT(ppk_sample_create(many, &s2), 0);
        for (int k = 0; k < 40; k++) {
            size_t depth = (size_t)(k * 37) % limits[c][2], piece = k % 3 ? 300 : 5;
            CHECK_EQ_INT(batch_sample(s1, k, a, N_FNS, depth, 0), 0);
            CHECK_EQ_INT(batch_sample(s2, k, b, N_FNS, depth, piece), 0);
        }
        char *x = export_describe(one), *y = export_describe(many);
        CHECK(x && y && strlen(x) > 0);
        if (x && y && strcmp(x, y) != 0)
            fprintf(stderr, "case %zu, one by one:\n%s\nin batches:\n%s\n", c, x, y);
        CHECK(x && y && strcmp(x, y) == 0);
        if (c) CHECK(x && strstr(x, "frames omitted") != NULL);
        free(x);
        free(y);
        ppk_sample_free(s1);
        ppk_sample_free(s2);
        ppk_recorder_free(one);
        ppk_recorder_free(many);
    }

    ppk_recorder *r = recorder_ttl(4), *other = recorder_ttl(4);
    ppk_function_id f = intern(r, fn("f", "", "f.py", 0)), g = intern(r, fn("g", "", "g.py", 0));
    ppk_id_frame good[2] = {{f, 1}, {g, 2}}, bad[3] = {{g, 3}, {intern(other, fns()[0]), 4}, {f, 5}};
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(ppk_sample_push_frames_id(s, good, 2), PPK_ESTATE); /* not begun */
    CHECK_EQ_INT(ppk_sample_push_frames_id(NULL, good, 2), PPK_EINVAL);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frames_id(s, NULL, 2), PPK_ENULL);
    CHECK_EQ_INT(ppk_sample_push_frames_id(s, NULL, 0), 0);
    /* A batch's ids are checked at the flush: one of another recorder's makes it refuse
     * the sample (dropped and counted). */
    CHECK_EQ_INT(ppk_sample_push_frames_id(s, bad, 3), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 5), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frames_id(s, good, 2), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_dropped_stale, 1);
    pr_profile pp;
    if (!export_parse(r, &pp)) {
        /* The refused calls left nothing: one sample, f (line 1) then g (line 2). */
        CHECK(pp.nsamples == 1 && pp.samples[0].nloc == 2 && total(&pp) == 1);
        if (pp.nsamples == 1 && pp.samples[0].nloc == 2) {
            CHECK(pr_streq(pr_string(&pp, pr_frame_fn(&pp, &pp.samples[0], 0)->name), "f"));
            CHECK(pr_streq(pr_string(&pp, pr_frame_fn(&pp, &pp.samples[0], 1)->name), "g"));
        }
        pr_free(&pp);
    }
    ppk_sample_free(s);
    ppk_recorder_free(r);
    ppk_recorder_free(other);
}

static void test_identity(void) {
    ppk_recorder *r = recorder_ttl(4);
    ppk_function_id ids[N_FNS];
    for (int i = 0; i < N_FNS; i++) ids[i] = intern(r, fns()[i]);
    for (int i = 0; i < N_FNS; i++) {
        CHECK_EQ_U64(intern(r, fns()[i]), ids[i]);
        for (int j = 0; j < i; j++) CHECK(ids[i] != ids[j]);
    }
    /* An empty string may be given as NULL with length 0. */
    ppk_function nulls = {PPK_STR("leaf"), {NULL, 0}, PPK_STR("a.py"), 0};
    ppk_function_id nid = 0;
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &nulls, &nid), 0);
    CHECK_EQ_U64(nid, ids[0]);
    nulls = (ppk_function){{NULL, 0}, {NULL, 0}, {NULL, 0}, 0};
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &nulls, &nid), 0);
    CHECK_EQ_U64(nid, ids[3]);

    /* Transient strings: a copy that is then overwritten finds the same id. */
    char name[] = "Klass.method", sys[] = "_ZN5Klass6methodEv", file[] = "/src/klass.cc";
    CHECK_EQ_U64(intern(r, fn(name, sys, file, 40)), ids[1]);
    memset(name, 'x', sizeof name - 1);
    CHECK(intern(r, fn(name, sys, file, 40)) != ids[1]);

    /* Strings that need a repair (a lone continuation byte, a surrogate) or a cut are
     * stored fitted: interning them again finds the entry, and the profile shows what
     * the string API shows. */
    char longname[5000];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    ppk_function bad = fn("bad\x80name", "\xed\xa0\x80", longname, 0);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    uint64_t repaired = st.strings_utf8_repaired, truncated = st.strings_truncated;
    ppk_function_id b1 = intern(r, bad), b2 = intern(r, bad);
    CHECK_EQ_U64(b1, b2);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions, N_FNS + 2);
    /* Each intern repaired two strings and cut one, counted as the string API counts. */
    CHECK_EQ_U64(st.strings_utf8_repaired - repaired, 4);
    CHECK_EQ_U64(st.strings_truncated - truncated, 2);
    /* A function given in the form it is stored in (repaired) is that function. */
    ppk_function_id r1 = intern(r, fn("odd\x80", "", "f.py", 0));
    CHECK_EQ_U64(intern(r, fn("odd\xef\xbf\xbd", "", "f.py", 0)), r1);
    CHECK_EQ_U64(intern(r, fn("odd\x80", "", "f.py", 0)), r1);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions, N_FNS + 3);

    ppk_recorder *by_str = recorder_ttl(4);
    ppk_sample *s = NULL, *s2 = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(ppk_sample_create(by_str, &s2), 0);
    CHECK_EQ_INT(one_frame(s, b1, 5, 1), 0);
    ppk_frame fr = {.name = bad.name, .system_name = bad.system_name,
                    .filename = bad.filename, .line = 5};
    CHECK_EQ_INT(ppk_sample_start(s2), 0);
    CHECK_EQ_INT(ppk_sample_push_frame_ex(s2, &fr), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s2, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s2), 0);
    char *a = export_describe(r), *b = export_describe(by_str);
    CHECK(a && b && strcmp(a, b) == 0);
    CHECK(a && strstr(a, "bad\xef\xbf\xbdname") != NULL);
    free(a);
    free(b);
    ppk_sample_free(s);
    ppk_sample_free(s2);
    ppk_recorder_free(by_str);
    ppk_recorder_free(r);
}

static void test_errors(void) {
    ppk_recorder *r = recorder_ttl(4), *other = recorder_ttl(4);
    ppk_function f = fn("f", "", "f.py", 0);
    ppk_function_id id = 99;
    CHECK_EQ_INT(ppk_recorder_intern_function(NULL, &f, &id), PPK_EINVAL);
    CHECK_EQ_U64(id, 0);
    CHECK_EQ_INT(ppk_recorder_intern_function(r, NULL, &id), PPK_EINVAL);
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &f, NULL), PPK_EINVAL);
    ppk_function nul = {{NULL, 3}, PPK_STR(""), PPK_STR(""), 0};
    id = 99;
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &nul, &id), PPK_ENULL);
    CHECK_EQ_U64(id, 0);
    nul = (ppk_function){PPK_STR("f"), PPK_STR(""), {NULL, 1}, 0};
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &nul, &id), PPK_ENULL);

    ppk_function_id mine = intern(r, f), theirs = intern(other, f);
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, mine, 1), PPK_ESTATE); /* not begun */
    CHECK_EQ_INT(ppk_sample_push_frame_id(NULL, mine, 1), PPK_EINVAL);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, 0, 1), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, theirs, 1), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, mine + 1, 1), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, mine + ((uint64_t)1 << 24), 1), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, ~(uint64_t)0, 1), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, mine, 1), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
    pr_profile pp;
    if (!export_parse(r, &pp)) {
        /* The refused pushes left nothing: one sample of one frame. */
        CHECK_EQ_U64(pp.nsamples, 1);
        CHECK(pp.nsamples == 1 && pp.samples[0].nloc == 1 &&
              pr_streq(pr_string(&pp, pr_frame_fn(&pp, &pp.samples[0], 0)->name), "f"));
        pr_free(&pp);
    }
    ppk_recorder_config cfg;
    config(&cfg);
    ppk_recorder *bad = NULL;
    cfg.max_functions = 0;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &bad), PPK_EINVAL);
    cfg.max_functions = (size_t)1 << 24;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &bad), PPK_EINVAL);
    config(&cfg);
    cfg.function_ttl_exports = 0;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &bad), PPK_EINVAL);
    CHECK(strstr(ppk_strerror(PPK_ESTALE), "intern") != NULL);

    /* After the recorder is freed, the builder says so (and reads no dictionary). */
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    ppk_recorder_free(r);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, mine, 1), PPK_ECLOSED);
    ppk_sample_free(s);
    ppk_recorder_free(other);
}

static void test_eviction(void) {
    ppk_recorder *r = recorder_ttl(2);
    ppk_sample *s = NULL, *held = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(ppk_sample_create(r, &held), 0);
    ppk_function_id a = intern(r, fn("a", "", "a.py", 0));
    ppk_function_id b = intern(r, fn("b", "", "b.py", 0));
    /* Every window uses a. Window 1 uses b, and window 2 begins a sample with b that is
     * flushed only after b's eviction, at the export of window 4 (b unused during
     * windows 3 and 4). */
    CHECK_EQ_INT(one_frame(s, b, 1, 1), 0);
    for (int w = 1; w <= 3; w++) {
        CHECK_EQ_INT(one_frame(s, a, 1, 1), 0);
        if (w == 2) {
            /* A sample begun with b before b's eviction, flushed after it. */
            CHECK_EQ_INT(ppk_sample_start(held), 0);
            CHECK_EQ_INT(ppk_sample_push_frame_id(held, a, 2), 0);
            CHECK_EQ_INT(ppk_sample_push_frame_id(held, b, 2), 0);
            CHECK_EQ_INT(ppk_sample_set_value(held, 0, 100), 0);
        }
        ppk_recorder_stats st;
        ppk_recorder_stats_get(r, &st);
        CHECK_EQ_U64(st.functions_evicted, 0);
        CHECK_EQ_INT(export_drop(r), 0);
    }
    /* b was pushed (by `held`) during window 2, so it lives one more export. */
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions_evicted, 0);
    CHECK_EQ_INT(one_frame(s, a, 1, 1), 0);
    CHECK_EQ_INT(export_drop(r), 0);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions_evicted, 1);
    CHECK_EQ_U64(st.functions, 1);

    CHECK_EQ_INT(ppk_sample_flush(held), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, b, 1), PPK_ESTALE);
    CHECK_EQ_INT(ppk_sample_drop(s), 0);
    ppk_function_id b2 = intern(r, fn("b", "", "b.py", 0));
    CHECK(b2 != b);
    CHECK_EQ_INT(one_frame(s, b2, 7, 5), 0);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frame_id(s, b, 1), PPK_ESTALE); /* the old id stays dead */
    CHECK_EQ_INT(ppk_sample_drop(s), 0);
    pr_profile pp;
    if (!export_parse(r, &pp)) {
        CHECK_EQ_U64(pp.nsamples, 1);
        CHECK_EQ_INT(total(&pp), 5);
        const pr_function *f = pp.nsamples ? pr_frame_fn(&pp, &pp.samples[0], 0) : NULL;
        CHECK(f && pr_streq(pr_string(&pp, f->name), "b"));
        pr_free(&pp);
    }
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_dropped_stale, 1);
    CHECK_EQ_U64(st.samples_flushed, 6); /* 1 + 3 + 1 + 1; the refused one is not */
    CHECK_EQ_U64(st.samples_exported, 6);
    ppk_sample_free(s);
    ppk_sample_free(held);
    ppk_recorder_free(r);
}

/* Batches: a function pushed only by ppk_sample_push_frames_id lives as long as
 * samples with it are flushed (each window marks the functions it met when it is
 * exported), and once evicted its id is refused at the flush, also after its slot went
 * to another function: never that function's name. */
static void test_batch_eviction(void) {
    ppk_recorder *r = recorder_ttl(2);
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    ppk_function_id a = intern(r, fn("a", "", "a.py", 0));
    for (int w = 0; w < 6; w++) {
        CHECK_EQ_INT(one_batch(s, a, 3, 1), 0);
        CHECK_EQ_INT(export_drop(r), 0);
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions_evicted, 0);
    CHECK_EQ_U64(st.samples_dropped_stale, 0);
    CHECK_EQ_U64(intern(r, fn("a", "", "a.py", 0)), a);
    /* Unused for two exports after the one the intern above used it in: evicted; its
     * slot then taken by c. */
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(export_drop(r), 0);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions_evicted, 1);
    ppk_function_id c = intern(r, fn("c", "", "c.py", 0));
    CHECK((c & 0xffffff) == (a & 0xffffff) && c != a); /* the same slot, a new generation */
    ppk_id_frame fa[1] = {{a, 3}};
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    CHECK_EQ_INT(ppk_sample_push_frames_id(s, fa, 1), 0);
    CHECK_EQ_INT(ppk_sample_flush(s), PPK_ESTALE);
    CHECK_EQ_INT(one_batch(s, c, 4, 7), 0);
    pr_profile pp;
    if (!export_parse(r, &pp)) {
        CHECK_EQ_U64(pp.nsamples, 1);
        CHECK_EQ_INT(total(&pp), 7);
        const pr_function *f = pp.nsamples ? pr_frame_fn(&pp, &pp.samples[0], 0) : NULL;
        CHECK(f && pr_streq(pr_string(&pp, f->name), "c"));
        pr_free(&pp);
    }
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_dropped_stale, 1);
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

static void test_bounds(void) {
    ppk_recorder_config cfg;
    config(&cfg);
    cfg.max_functions = 4;
    cfg.function_ttl_exports = 1;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    char name[32];
    ppk_function_id ids[4];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "f%d", i);
        ids[i] = intern(r, fn(name, "", "x.py", 0));
    }
    ppk_function f = fn("f4", "", "x.py", 0);
    ppk_function_id id = 1;
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &f, &id), PPK_EFULL);
    CHECK_EQ_U64(id, 0);
    CHECK_EQ_U64(intern(r, fn("f2", "", "x.py", 0)), ids[2]); /* known: still found */
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions_refused, 1);
    CHECK_EQ_U64(st.functions, 4);
    CHECK_EQ_U64(st.function_bytes, 4 * (64 + 2 + 4));
    /* Two exports with no use: all four go, and room is made. */
    CHECK_EQ_INT(export_drop(r), 0);
    CHECK_EQ_INT(export_drop(r), 0);
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.functions, 0);
    CHECK_EQ_U64(st.function_bytes, 0);
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &f, &id), 0);
    ppk_recorder_free(r);

    /* The byte bound: a function whose strings do not fit is refused, smaller ones not. */
    config(&cfg);
    cfg.max_function_bytes = 1000;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    char big[1000];
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = 0;
    f = fn(big, "", "", 0);
    CHECK_EQ_INT(ppk_recorder_intern_function(r, &f, &id), PPK_EFULL);
    int n = 0;
    for (; n < 100; n++) {
        snprintf(name, sizeof name, "function_%03d", n);
        f = fn(name, "", "file.py", 0);
        if (ppk_recorder_intern_function(r, &f, &id)) break;
    }
    CHECK_EQ_INT(n, 1000 / (64 + 12 + 7));
    ppk_recorder_stats_get(r, &st);
    CHECK(st.function_bytes <= 1000);
    CHECK_EQ_U64(st.functions_refused, 2);
    ppk_recorder_free(r);
}

/* 1,000 exports, each window with 50 functions never seen before: the dictionary holds
 * at most the last two windows' (TTL 1: a window's functions go at the export after
 * the one that ends it). */
static void test_flat_over_exports(void) {
    ppk_recorder *r = recorder_ttl(1);
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    char name[64];
    uint64_t max_functions = 0, max_bytes = 0;
    for (int w = 0; w < 1000; w++) {
        for (int i = 0; i < 50; i++) {
            snprintf(name, sizeof name, "<lambda_%d_%d>", w, i);
            CHECK_EQ_INT(one_frame(s, intern(r, fn(name, "", "<string>", 0)), i, 1), 0);
        }
        ppk_recorder_stats st;
        ppk_recorder_stats_get(r, &st);
        if (st.functions > max_functions) max_functions = st.functions;
        if (st.function_bytes > max_bytes) max_bytes = st.function_bytes;
        CHECK_EQ_INT(export_drop(r), 0);
    }
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK(max_functions <= 100);
    CHECK(max_bytes <= 100 * (64 + 20 + 8));
    CHECK_EQ_U64(st.functions_evicted + st.functions, 50000);
    CHECK_EQ_U64(st.samples_exported, 50000);
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

/* ---------------------------------------------------------------------------------- */
/* threads                                                                            */

#define THREADS 4
#define PER_THREAD 3000
#define POOL 64

typedef struct worker {
    ppk_recorder *r;
    int index;
    uint64_t flushed_value, stale_flushes, stale_pushes;
    int errors;
} worker;

static atomic_int g_stop;

/* The function of name number k: "t<k>" for the shared pool, unique ones above it. */
static void *work(void *arg) {
    worker *w = arg;
    ppk_sample *s = NULL;
    if (ppk_sample_create(w->r, &s)) {
        w->errors++;
        return NULL;
    }
    ppk_function_id cache[POOL] = {0};
    char name[48];
    for (int i = 0; i < PER_THREAD; i++) {
        int k = (i * 7 + w->index * 13) % (POOL + 8);
        if (k >= POOL) k = POOL + w->index * 1000000 + i; /* new every time */
        snprintf(name, sizeof name, "t%d", k);
        ppk_function f = fn(name, "", "t.py", 0);
        ppk_function_id *id = k < POOL ? &cache[k] : NULL, fresh = 0;
        for (;;) {
            ppk_function_id use = id ? *id : fresh;
            if (!use) {
                if (ppk_recorder_intern_function(w->r, &f, &use)) {
                    w->errors++;
                    break;
                }
                if (id) *id = use;
            }
            /* Odd threads push in batches, whose ids only the flush checks. */
            ppk_id_frame batch[1] = {{use, 1}};
            int rc = ppk_sample_start(s);
            if (!rc)
                rc = w->index & 1 ? ppk_sample_push_frames_id(s, batch, 1)
                                  : ppk_sample_push_frame_id(s, use, 1);
            if (rc == PPK_ESTALE) {
                w->stale_pushes++;
                ppk_sample_drop(s);
                if (id) *id = 0;
                fresh = 0;
                continue;
            }
            if (!rc) rc = ppk_sample_push_label_str(s, PPK_STR("fn"), ppk_cstr(name));
            if (!rc) rc = ppk_sample_set_value(s, 0, i + 1);
            if (!rc) rc = ppk_sample_flush(s);
            if (rc == PPK_ESTALE) {
                w->stale_flushes++;
                if (id) *id = 0;
                fresh = 0;
                continue;
            }
            if (rc) w->errors++;
            else w->flushed_value += (uint64_t)(i + 1);
            break;
        }
    }
    ppk_sample_free(s);
    return NULL;
}

static void check_names(const pr_profile *pp, int *wrong) {
    for (size_t i = 0; i < pp->nsamples; i++) {
        const pr_sample *smp = &pp->samples[i];
        const pr_function *f = pr_frame_fn(pp, smp, 0);
        pr_str label = pr_label_str(pp, smp, "fn");
        pr_str name = f ? pr_string(pp, f->name) : (pr_str){"", 0};
        if (!f || label.len != name.len || memcmp(label.ptr, name.ptr, name.len) != 0)
            (*wrong)++;
    }
}

static void *exporter(void *arg) {
    ppk_recorder *r = arg;
    int64_t *sum = calloc(1, sizeof *sum);
    int wrong = 0;
    while (!atomic_load(&g_stop)) {
        pr_profile pp;
        if (export_parse(r, &pp)) break;
        *sum += total(&pp);
        check_names(&pp, &wrong);
        pr_free(&pp);
    }
    CHECK_EQ_INT(wrong, 0);
    return sum;
}

static void test_threads(void) {
    ppk_recorder_config cfg;
    config(&cfg);
    cfg.function_ttl_exports = 1;
    cfg.shards = 2;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    if (!r) return;
    atomic_store(&g_stop, 0);
    pthread_t ex, th[THREADS];
    worker w[THREADS];
    CHECK_EQ_INT(pthread_create(&ex, NULL, exporter, r), 0);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.r = r, .index = i};
        CHECK_EQ_INT(pthread_create(&th[i], NULL, work, &w[i]), 0);
    }
    uint64_t expected = 0, stale = 0, pushes = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_EQ_INT(w[i].errors, 0);
        expected += w[i].flushed_value;
        stale += w[i].stale_flushes;
        pushes += w[i].stale_pushes;
    }
    atomic_store(&g_stop, 1);
    void *res = NULL;
    pthread_join(ex, &res);
    int64_t got = res ? *(int64_t *)res : -1;
    free(res);
    pr_profile pp;
    if (!export_parse(r, &pp)) {
        int wrong = 0;
        check_names(&pp, &wrong);
        CHECK_EQ_INT(wrong, 0);
        got += total(&pp);
        pr_free(&pp);
    }
    CHECK_EQ_U64((uint64_t)got, expected);
    CHECK_EQ_INT(export_drop(r), 0); /* what the last window used goes */
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK_EQ_U64(st.samples_dropped_stale, stale);
    CHECK_EQ_U64(st.samples_flushed, st.samples_exported);
    CHECK(st.functions_evicted > 0);
    printf("threads: %" PRIu64 " exports, %" PRIu64 " evicted, %" PRIu64 " stale pushes, %"
           PRIu64 " stale flushes\n", st.windows_exported, st.functions_evicted, pushes, stale);
    ppk_recorder_free(r);
}

static void test_fork(void) {
    ppk_recorder *r = recorder_ttl(4);
    ppk_function_id id = intern(r, fn("before_fork", "", "p.py", 0));
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int ok = 1;
        ppk_sample *s = NULL;
        ok &= ppk_sample_create(r, &s) == 0;
        ok &= one_frame(s, id, 3, 9) == 0;
        ok &= one_frame(s, intern(r, fn("in_child", "", "c.py", 0)), 1, 1) == 0;
        ppk_function again = fn("before_fork", "", "p.py", 0);
        ppk_function_id same = 0;
        ok &= ppk_recorder_intern_function(r, &again, &same) == 0 && same == id;
        pr_profile pp;
        ok &= export_parse(r, &pp) == 0;
        if (ok) {
            ok &= pp.nsamples == 2 && total(&pp) == 10;
            for (size_t i = 0; i < pp.nsamples; i++) {
                const pr_function *f = pr_frame_fn(&pp, &pp.samples[i], 0);
                pr_str n = pr_string(&pp, f->name);
                ok &= pp.samples[i].val[0] == 9 ? pr_streq(n, "before_fork")
                                                : pr_streq(n, "in_child");
            }
            pr_free(&pp);
        }
        ppk_sample_free(s);
        _exit(ok && check_failures_ == 0 ? 0 : 1);
    }
    int status = 0;
    CHECK_EQ_INT(waitpid(pid, &status, 0), pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    CHECK_EQ_INT(one_frame(s, id, 3, 1), 0); /* the parent's id is as it was */
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

enum { MARK_BATCH = 2000, MARK_ROUNDS = 200 };

typedef struct marker {
    ppk_recorder *r;
    _Atomic ppk_function_id id;
    atomic_int stop, errors;
    atomic_long batches;
} marker;

static const ppk_function HOT = {PPK_STR("hot"), PPK_STR(""), PPK_STR("hot.py"), 0};

/* Interns the function (again) into m->id (check.h is not for threads: errors
 * counted). */
static void intern_hot(marker *m) {
    ppk_function_id id = 0;
    if (ppk_recorder_intern_function(m->r, &HOT, &id)) atomic_fetch_add(&m->errors, 1);
    atomic_store(&m->id, id);
}

static void *push_batches(void *arg) {
    marker *m = arg;
    ppk_sample *s = NULL;
    ppk_id_frame *fr = malloc(MARK_BATCH * sizeof *fr);
    if (!fr || ppk_sample_create(m->r, &s)) atomic_fetch_add(&m->errors, 1);
    while (fr && s && !atomic_load(&m->stop)) {
        ppk_function_id id = atomic_load(&m->id);
        for (size_t i = 0; i < MARK_BATCH; i++) fr[i] = (ppk_id_frame){id, (int64_t)i};
        if (ppk_sample_start(s)) atomic_fetch_add(&m->errors, 1);
        atomic_fetch_add(&m->batches, 1);
        if (ppk_sample_push_frames_id(s, fr, MARK_BATCH)) atomic_fetch_add(&m->errors, 1);
        if (ppk_sample_drop(s)) atomic_fetch_add(&m->errors, 1);
    }
    free(fr);
    ppk_sample_free(s);
    return NULL;
}

static void test_batch_marks(void) {
    ppk_recorder_config cfg;
    config(&cfg);
    cfg.function_ttl_exports = 1;
    cfg.profile.max_frames = MARK_BATCH;
    marker m;
    memset(&m, 0, sizeof m);
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &m.r), 0);
    intern_hot(&m);
    pthread_t t;
    CHECK_EQ_INT(pthread_create(&t, NULL, push_batches, &m), 0);
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(m.r, &s), 0);
    int flushed = 0, refused = 0;
    for (int i = 0; i < MARK_ROUNDS; i++) {
        /* Right after the other thread begins a batch: its epoch then likely predates
         * the first export. */
        long seen = atomic_load(&m.batches);
        while (atomic_load(&m.batches) == seen && !atomic_load(&m.errors)) sched_yield();
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        CHECK_EQ_INT(export_drop(m.r), 0);
        int rc = ppk_sample_push_frame_id(s, atomic_load(&m.id), 1);
        if (rc == PPK_ESTALE) {
            CHECK_EQ_INT(ppk_sample_drop(s), 0);
            intern_hot(&m);
            continue;
        }
        CHECK_EQ_INT(rc, 0);
        CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
        CHECK_EQ_INT(export_drop(m.r), 0);
        rc = ppk_sample_flush(s);
        flushed += rc == 0;
        refused += rc == PPK_ESTALE;
    }
    atomic_store(&m.stop, 1);
    pthread_join(t, NULL);
    printf("batch marks: %d rounds, %d flushed, %d flushes refused\n", MARK_ROUNDS, flushed,
           refused);
    CHECK_EQ_INT(atomic_load(&m.errors), 0);
    CHECK_EQ_INT(refused, 0);
    CHECK(flushed >= MARK_ROUNDS / 2);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(m.r, &st);
    CHECK_EQ_U64(st.samples_dropped_stale, 0);
    ppk_sample_free(s);
    ppk_recorder_free(m.r);
}

/* Whether the dictionary resolves `id`. */
static int resolves(ppk__fdict *d, ppk_function_id id) {
    ppk_frame f;
    ppk__fdict_lock(d);
    int rc = ppk__fdict_get_locked(d, id, &f);
    ppk__fdict_unlock(d);
    return rc == 0;
}

static void test_marks(void) {
    ppk__fdict d;
    CHECK_EQ_INT(ppk__fdict_init(&d, NULL, 64, 1 << 20, 4096, 1), 0);
    ppk_function f = fn("f", "", "f.py", 0);
    ppk_function_id id;
    CHECK_EQ_INT(ppk__fdict_intern(&d, &f, &id), 0); /* used in epoch 0 */
    ppk__fdict_view before = ppk__fdict_view_of(&d);
    ppk__fdict_end_epoch(&d); /* TTL 1: used in the epoch that ends, kept */
    CHECK(resolves(&d, id));
    CHECK_EQ_INT(ppk__fdict_check(&d, id), 0); /* used in epoch 1 */
    /* A check with the view of epoch 0, after the one in epoch 1: still live, and the
     * mark stays at 1. */
    CHECK_EQ_INT(ppk__fdict_check_in(&before, id), 0);
    ppk__fdict_end_epoch(&d);
    CHECK(resolves(&d, id));
    ppk__fdict_end_epoch(&d); /* unused during epoch 2 */
    CHECK(!resolves(&d, id));
    CHECK_EQ_INT(ppk__fdict_check(&d, id), PPK_ESTALE);
    CHECK_EQ_INT(ppk__fdict_check_in(&before, id), PPK_ESTALE);
    /* The epoch after 2^32 - 2 is 0: a free slot's word never reads as a last use. */
    atomic_store(&d.epoch, UINT32_MAX - 1);
    ppk__fdict_end_epoch(&d);
    CHECK_EQ_U64(atomic_load(&d.epoch), 0);
    ppk__fdict_destroy(&d);
}

/* Tags: no two live dictionaries share one, so an id of one is refused by every other
 * however many were made and freed in between (a tag taken from a counter alone came
 * back after 65,536 dictionaries, and the first ids of two dictionaries with the same
 * tag are the same: the other's function's name was exported); all taken, the next
 * dictionary is refused, and one freed makes room. */
static void test_tags(void) {
    ppk__fdict a, b, tmp;
    ppk_function fa = fn("function_of_a", "", "a.py", 0), fb = fn("function_of_b", "", "b.py", 0);
    ppk_function_id ida, idb;
    CHECK_EQ_INT(ppk__fdict_init(&a, NULL, 64, 1 << 20, 4096, 1), 0);
    CHECK_EQ_INT(ppk__fdict_intern(&a, &fa, &ida), 0);
    int same_tag = 0;
    for (int i = 0; i < 65535; i++) {
        if (ppk__fdict_init(&tmp, NULL, 64, 1 << 20, 4096, 1)) break;
        same_tag += tmp.tag == a.tag;
        ppk__fdict_destroy(&tmp);
    }
    CHECK_EQ_INT(same_tag, 0);
    CHECK_EQ_INT(ppk__fdict_init(&b, NULL, 64, 1 << 20, 4096, 1), 0);
    CHECK_EQ_INT(ppk__fdict_intern(&b, &fb, &idb), 0);
    CHECK(ida != idb);
    CHECK_EQ_INT(ppk__fdict_check(&b, ida), PPK_ESTALE);
    CHECK_EQ_INT(ppk__fdict_check(&a, idb), PPK_ESTALE);
    CHECK_EQ_INT(ppk__fdict_check(&a, ida), 0);

    size_t cap = 65536, n = 0;
    ppk__fdict *live = malloc(cap * sizeof *live);
    CHECK(live != NULL);
    while (live && n < cap && ppk__fdict_init(&live[n], NULL, 1, 1 << 10, 64, 1) == 0) n++;
    CHECK(n < cap); /* a, b and those of the process's other recorders hold tags */
    CHECK_EQ_INT(ppk__fdict_init(&tmp, NULL, 64, 1 << 20, 4096, 1), PPK_ENOMEM);
    if (n) {
        ppk__fdict_destroy(&live[--n]);
        CHECK_EQ_INT(ppk__fdict_init(&tmp, NULL, 64, 1 << 20, 4096, 1), 0);
        ppk__fdict_destroy(&tmp);
    }
    while (n) ppk__fdict_destroy(&live[--n]);
    free(live);
    ppk__fdict_destroy(&a);
    ppk__fdict_destroy(&b);
}

int main(void) {
    RUN(test_tags);
    RUN(test_equivalence);
    RUN(test_identity);
    RUN(test_batch);
    RUN(test_errors);
    RUN(test_eviction);
    RUN(test_batch_eviction);
    RUN(test_bounds);
    RUN(test_flat_over_exports);
    RUN(test_threads);
    RUN(test_fork);
    RUN(test_marks);
    RUN(test_batch_marks);
    return check_summary();
}
