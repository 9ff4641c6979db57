/*
 * test_profile.c - the public single-threaded API: validation, aggregation, repair,
 * reset, endpoints, rules, encoding options.
 *
 * Content is checked here by comparing encodings of windows that must be equal (the same
 * samples reached by different routes), and by decompressing with zlib/zstd's own
 * decoders; test_decode.sh checks the content itself with protoc and go tool pprof.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "check.h"
#include "pprof_read.h"
#include "pprofkit.h"

static ppk_profile_config config(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("cpu-time"), PPK_STR("nanoseconds")};
    cfg.sample_types[1] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.n_sample_types = 2;
    cfg.period_type = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.period = 10000000;
    return cfg;
}

static ppk_profile *make(void) {
    ppk_profile_config cfg = config();
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    return p;
}

static const ppk_frame FRAMES[3] = {
    {PPK_STR("leaf"), {0}, PPK_STR("a.py"), 1, 11, 0, NULL},
    {PPK_STR("middle"), {0}, PPK_STR("a.py"), 20, 25, 0, NULL},
    {PPK_STR("main"), {0}, PPK_STR("main.py"), 1, 3, 0, NULL},
};

static int add(ppk_profile *p, const ppk_label *labels, size_t n_labels, int64_t cpu,
               int64_t wall) {
    int64_t v[2] = {cpu, wall};
    ppk_sample_data s = {FRAMES, 3, labels, n_labels, v, 2, 0};
    return ppk_profile_add(p, &s);
}

/* The raw protobuf of a window, with fixed times so it is comparable. */
static ppk_bytes raw(ppk_profile *p) {
    ppk_bytes b;
    ppk_encode_options o = {PPK_CODEC_NONE, 0, 1000, 5000};
    CHECK_EQ_INT(ppk_profile_encode(p, &o, &b), 0);
    return b;
}

static int same_bytes(ppk_bytes *a, ppk_bytes *b) {
    int same = a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
    ppk_bytes_free(a);
    ppk_bytes_free(b);
    return same;
}

static void test_create_validates_config(void) {
    ppk_profile *p = (ppk_profile *)1;
    ppk_profile_config cfg = config();
    CHECK_EQ_INT(ppk_profile_create(&cfg, NULL), PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_create(NULL, &p), PPK_EINVAL);
    CHECK(p == NULL);
    cfg.n_sample_types = 0;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_EINVAL);
    cfg.n_sample_types = PPK_MAX_SAMPLE_TYPES + 1;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_EINVAL);
    cfg = config();
    cfg.sample_types[1].unit = (ppk_str){NULL, 3};
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_ENULL);
    cfg = config();
    cfg.max_frames = 1;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_EINVAL);
    cfg = config();
    cfg.period = -1;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_EINVAL);
    CHECK(p == NULL);
    cfg = config();
    cfg.n_sample_types = PPK_MAX_SAMPLE_TYPES;
    for (int i = 2; i < PPK_MAX_SAMPLE_TYPES; i++) cfg.sample_types[i] = cfg.sample_types[0];
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    ppk_profile_free(p);
    ppk_profile_free(NULL);
}

static void test_strerror_covers_every_code(void) {
    static const int codes[] = {
#define CODE_(name, value, msg) name,
        PPK_ERROR_LIST(CODE_)
#undef CODE_
    };
    size_t n = sizeof codes / sizeof codes[0];
    for (size_t i = 0; i < n; i++) {
        const char *m = ppk_strerror(codes[i]);
        CHECK(m && *m && strcmp(m, "unknown error") != 0);
        for (size_t k = 0; k < i; k++) CHECK(strcmp(m, ppk_strerror(codes[k])) != 0);
    }
    CHECK(strcmp(ppk_strerror(-9999), "unknown error") == 0);
    CHECK(strcmp(ppk_strerror(PPK_ENOMEM), "out of memory") == 0);
}

/* Every kind of bad input gets its code and leaves the window as it was. */
static void test_bad_input_is_refused_without_change(void) {
    ppk_profile *p = make();
    ppk_label ok[1] = {{PPK_STR("thread name"), 0, PPK_STR("main"), 0, {0}}};
    CHECK_EQ_INT(add(p, ok, 1, 1, 1), 0);
    ppk_profile_stats before, after;
    ppk_profile_stats_get(p, &before);
    ppk_bytes b0 = raw(p);

    int64_t v[3] = {1, 2, 3};
    ppk_sample_data s = {FRAMES, 3, ok, 1, v, 3, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_EVALUES);
    s.n_values = 2;
    s.values = NULL;
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_ENULL);
    s.values = v;
    s.frames = NULL;
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_ENULL);
    s.frames = FRAMES;
    ppk_frame badf[2] = {FRAMES[0], FRAMES[1]};
    badf[1].filename = (ppk_str){NULL, 5};
    s.frames = badf;
    s.n_frames = 2;
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_ENULL);
    ppk_mapping badm = {1, 2, 0, {NULL, 1}, {0}};
    badf[1] = FRAMES[1];
    badf[1].mapping = &badm;
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_ENULL);
    s.frames = FRAMES;
    s.n_frames = 3;
    s.timestamp_ns = -5;
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_EINVAL);
    s.timestamp_ns = 0;

    ppk_label dup[3] = {{PPK_STR("a"), 0, PPK_STR("x"), 0, {0}},
                        {PPK_STR("b"), 1, {0}, 5, {0}},
                        {PPK_STR("a"), 0, PPK_STR("y"), 0, {0}}};
    CHECK_EQ_INT(add(p, dup, 3, 1, 1), PPK_EDUPLABEL);
    ppk_label span_str[1] = {{PPK_STR("local root span id"), 0, PPK_STR("12"), 0, {0}}};
    CHECK_EQ_INT(add(p, span_str, 1, 1, 1), PPK_ESPANID);
    ppk_label span_zero[1] = {{PPK_STR("local root span id"), 1, {0}, 0, {0}}};
    CHECK_EQ_INT(add(p, span_zero, 1, 1, 1), PPK_ESPANID);
    ppk_label reserved[1] = {{PPK_STR("end_timestamp_ns"), 1, {0}, 7, {0}}};
    CHECK_EQ_INT(add(p, reserved, 1, 1, 1), PPK_ERESERVED);
    ppk_label empty_key[1] = {{{0}, 0, PPK_STR("v"), 0, {0}}};
    CHECK_EQ_INT(add(p, empty_key, 1, 1, 1), PPK_EEMPTYKEY);
    ppk_label null_val[1] = {{PPK_STR("k"), 0, {NULL, 2}, 0, {0}}};
    CHECK_EQ_INT(add(p, null_val, 1, 1, 1), PPK_ENULL);
    ppk_label null_unit[1] = {{PPK_STR("k"), 1, {0}, 3, {NULL, 2}}};
    CHECK_EQ_INT(add(p, null_unit, 1, 1, 1), PPK_ENULL);
    ppk_label many[33];
    char keys[33][8];
    for (int i = 0; i < 33; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        many[i] = (ppk_label){ppk_cstr(keys[i]), 1, {0}, i, {0}};
    }
    CHECK_EQ_INT(add(p, many, 33, 1, 1), PPK_ETOOMANY);
    CHECK_EQ_INT(add(p, many, 32, 1, 1), 0); /* the limit itself is fine */
    CHECK_EQ_INT(ppk_profile_add(NULL, &s), PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_add(p, NULL), PPK_EINVAL);

    /* Only the last, valid call changed anything: undo it by comparing with a window
     * that got the same two samples. */
    ppk_profile *q = make();
    CHECK_EQ_INT(add(q, ok, 1, 1, 1), 0);
    ppk_bytes b1 = raw(q);
    CHECK(same_bytes(&b0, &b1));
    CHECK_EQ_INT(add(q, many, 32, 1, 1), 0);
    ppk_bytes bp = raw(p), bq = raw(q);
    CHECK(same_bytes(&bp, &bq));
    ppk_profile_stats_get(p, &after);
    CHECK_EQ_U64(after.samples_added, before.samples_added + 1);
    ppk_profile_free(p);
    ppk_profile_free(q);
}

static void test_labels_in_any_order_aggregate(void) {
    ppk_label l1[3] = {{PPK_STR("thread id"), 1, {0}, 7, {0}},
                       {PPK_STR("thread name"), 0, PPK_STR("T-7"), 0, {0}},
                       {PPK_STR("bytes"), 1, {0}, 64, PPK_STR("bytes")}};
    ppk_label l2[3] = {l1[2], l1[0], l1[1]};
    ppk_profile *a = make(), *b = make();
    CHECK_EQ_INT(add(a, l1, 3, 1, 10), 0);
    CHECK_EQ_INT(add(a, l2, 3, 2, 20), 0);
    CHECK_EQ_INT(add(a, l1, 3, 3, 30), 0);
    CHECK_EQ_INT(add(b, l1, 3, 6, 60), 0);
    ppk_profile_stats st;
    ppk_profile_stats_get(a, &st);
    CHECK_EQ_U64(st.samples_added, 3);
    CHECK_EQ_U64(st.samples_aggregated, 1);
    CHECK_EQ_U64(st.label_sets, 1);
    ppk_bytes ea = raw(a), eb = raw(b);
    CHECK(same_bytes(&ea, &eb));
    /* A different value of one label is another sample. */
    ppk_label l3[3] = {l1[0], l1[1], {PPK_STR("bytes"), 1, {0}, 65, PPK_STR("bytes")}};
    CHECK_EQ_INT(add(a, l3, 3, 1, 1), 0);
    ppk_profile_stats_get(a, &st);
    CHECK_EQ_U64(st.samples_aggregated, 2);
    ppk_profile_free(a);
    ppk_profile_free(b);
}

/* A string label and a numeric one of the same key stay apart, even with all fields
 * zero (the window stores them at different lengths), and each reads back as itself. */
static void test_string_and_numeric_labels_stay_apart(void) {
    ppk_profile *p = make();
    ppk_label ls[4] = {{PPK_STR("k"), 0, PPK_STR(""), 0, {0}},
                       {PPK_STR("k"), 1, {0}, 0, {0}},
                       {PPK_STR("k"), 0, PPK_STR("x"), 0, {0}},
                       {PPK_STR("k"), 1, {0}, 5, PPK_STR("u")}};
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < 4; i++) CHECK_EQ_INT(add(p, &ls[i], 1, 1 << i, 1), 0);
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.labels, 4);
    CHECK_EQ_U64(st.samples_aggregated, 4);
    ppk_bytes b = raw(p);
    pr_profile pp;
    CHECK_EQ_INT(pr_parse(b.data, b.len, &pp), 0);
    ppk_bytes_free(&b);
    CHECK_EQ_U64(pp.nsamples, 4);
    int seen = 0;
    for (size_t i = 0; i < pp.nsamples && i < 4; i++) {
        const pr_sample *s = &pp.samples[i];
        CHECK_EQ_U64(s->nlab, 1);
        CHECK_EQ_INT(s->val[0], 3 << i);
        const pr_label *l = pr_label_get(&pp, s, "k");
        if (!l) continue;
        seen++;
        CHECK_EQ_INT(l->num, i == 3 ? 5 : 0);
        CHECK(pr_streq(pr_string(&pp, l->str), i == 2 ? "x" : ""));
        CHECK(pr_streq(pr_string(&pp, l->num_unit), i == 3 ? "u" : ""));
    }
    CHECK_EQ_INT(seen, 4);
    pr_free(&pp);
    ppk_profile_free(p);
}

static void test_values_saturate(void) {
    ppk_profile *a = make(), *b = make();
    CHECK_EQ_INT(add(a, NULL, 0, INT64_MAX - 1, INT64_MIN + 1), 0);
    CHECK_EQ_INT(add(a, NULL, 0, 5, -5), 0);
    /* The same sums reached another way, with as many saturations (the encoding says
     * how many sums saturated). */
    CHECK_EQ_INT(add(b, NULL, 0, INT64_MAX, INT64_MIN), 0);
    CHECK_EQ_INT(add(b, NULL, 0, 1, -1), 0);
    ppk_profile_stats st;
    ppk_profile_stats_get(a, &st);
    CHECK_EQ_U64(st.values_saturated, 2);
    ppk_bytes ea = raw(a), eb = raw(b);
    CHECK(same_bytes(&ea, &eb));
    ppk_profile_free(a);
    ppk_profile_free(b);
}

static void test_timestamped_samples_stay_apart(void) {
    ppk_profile *p = make();
    int64_t v[2] = {1, 2};
    ppk_sample_data s = {FRAMES, 3, NULL, 0, v, 2, 1700000000000000001};
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    s.timestamp_ns = 0;
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.samples_timestamped, 2);
    CHECK_EQ_U64(st.samples_aggregated, 1);
    CHECK_EQ_U64(st.stacks, 1);
    ppk_profile_free(p);
}

static void test_repairs_are_counted(void) {
    ppk_profile_config cfg = config();
    cfg.max_string_len = 24; /* room for "<3 frames omitted>" */
    cfg.max_frames = 4;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    ppk_frame f[6];
    for (int i = 0; i < 6; i++) f[i] = FRAMES[i % 3];
    f[0].name = PPK_STR("bad\xc3(utf8-long-long-long"); /* invalid; 26 bytes repaired: cut */
    f[1].name = PPK_STR("\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"
                        "\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac\xe2\x82\xac"); /* 27: cut to 24 */
    int64_t v[2] = {1, 1};
    ppk_sample_data s = {f, 6, NULL, 0, v, 2, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.strings_utf8_repaired, 1);
    CHECK_EQ_U64(st.strings_truncated, 2);
    CHECK_EQ_U64(st.stacks_truncated, 1);
    CHECK_EQ_U64(st.locations, 4); /* 3 kept frames and "<3 frames omitted>" */
    /* The repaired strings are known: the same input again adds nothing. */
    uint64_t strings = st.strings;
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.strings, strings);
    CHECK_EQ_U64(st.samples_aggregated, 1);
    ppk_profile_free(p);
}

/* One rule per value, wherever it is given (pprofkit.h's conventions): every string is
 * repaired and cut, a config's sample types too; values not given are 0, in
 * ppk_profile_add as in the builder; keys compare as stored; an encode's end must not
 * come before its start; a negative timestamp is refused. */
static void test_one_rule_per_value(void) {
    ppk_profile_config cfg = config();
    cfg.max_string_len = 16;
    cfg.sample_types[0].type = PPK_STR("cpu-time-of-the-whole-process"); /* 29 bytes */
    cfg.sample_types[1].unit = PPK_STR("nano\xffseconds");
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    if (!p) return;
    int64_t v[1] = {7};
    ppk_sample_data s = {FRAMES, 3, NULL, 0, v, 1, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0); /* wall-time 0 */
    s.n_values = 0;
    s.values = NULL;
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0); /* both 0: aggregated with the first */
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.strings_truncated, 1);
    CHECK_EQ_U64(st.strings_utf8_repaired, 1);
    ppk_bytes b = raw(p);
    pr_profile pp;
    CHECK_EQ_INT(pr_parse(b.data, b.len, &pp), 0);
    CHECK_EQ_U64(pp.nsample_type, 2);
    CHECK(pr_streq(pr_string(&pp, pp.sample_type[0][0]), "cpu-time-of-the-"));
    CHECK(pr_streq(pr_string(&pp, pp.sample_type[1][1]), "nano\xef\xbf\xbdseconds"));
    CHECK_EQ_U64(pp.nsamples, 1);
    CHECK_EQ_U64(pp.samples[0].nval, 2);
    CHECK(pp.samples[0].val[0] == 7);
    CHECK(pp.samples[0].val[1] == 0);
    pr_free(&pp);
    ppk_bytes_free(&b);

    /* Two keys the same in their first 16 bytes are one key: a duplicate, which the
     * message explains. */
    ppk_label twins[2] = {{PPK_STR("request-path-of-A"), 0, PPK_STR("x"), 0, {0}},
                          {PPK_STR("request-path-of-B"), 0, PPK_STR("y"), 0, {0}}};
    s = (ppk_sample_data){FRAMES, 3, twins, 2, v, 1, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_EDUPLABEL);
    CHECK(strstr(ppk_strerror(PPK_EDUPLABEL), "after UTF-8 repair and the cut") != NULL);
    s.n_labels = 1;
    s.timestamp_ns = -1;
    CHECK_EQ_INT(ppk_profile_add(p, &s), PPK_EINVAL);

    ppk_bytes out;
    ppk_encode_options same = {PPK_CODEC_NONE, 0, 5000, 5000}; /* duration 0 */
    CHECK_EQ_INT(ppk_profile_encode(p, &same, &out), 0);
    ppk_bytes_free(&out);
    ppk_encode_options early_end = {PPK_CODEC_NONE, 0, 0, 1}; /* before the window */
    CHECK_EQ_INT(ppk_profile_encode(p, &early_end, &out), PPK_EINVAL);
    ppk_profile_free(p);
}

/* G1: the caller's buffers may change right after each call. */
static void test_input_is_transient(void) {
    ppk_profile *a = make(), *b = make();
    for (int k = 0; k < 50; k++) {
        char *name = malloc(32), *file = malloc(32), *key = malloc(16), *val = malloc(16);
        snprintf(name, 32, "fn_%d", k % 7);
        snprintf(file, 32, "file_%d.py", k % 3);
        snprintf(key, 16, "task name");
        snprintf(val, 16, "task-%d", k);
        ppk_frame f = {ppk_cstr(name), {0}, ppk_cstr(file), 0, k, 0, NULL};
        ppk_label l = {ppk_cstr(key), 0, ppk_cstr(val), 0, {0}};
        int64_t *v = malloc(2 * sizeof *v);
        v[0] = k;
        v[1] = 2 * k;
        ppk_sample_data s = {&f, 1, &l, 1, v, 2, 0};
        CHECK_EQ_INT(ppk_profile_add(a, &s), 0);
        memset(name, 'X', 31);
        memset(file, 'Y', 31);
        memset(val, 'Z', 15);
        v[0] = v[1] = -1;
        free(name);
        free(file);
        free(key);
        free(val);
        free(v);
        char n2[32], f2[32], v2[16];
        snprintf(n2, sizeof n2, "fn_%d", k % 7);
        snprintf(f2, sizeof f2, "file_%d.py", k % 3);
        snprintf(v2, sizeof v2, "task-%d", k);
        ppk_frame g = {ppk_cstr(n2), {0}, ppk_cstr(f2), 0, k, 0, NULL};
        ppk_label m = {PPK_STR("task name"), 0, ppk_cstr(v2), 0, {0}};
        int64_t w[2] = {k, 2 * k};
        ppk_sample_data t = {&g, 1, &m, 1, w, 2, 0};
        CHECK_EQ_INT(ppk_profile_add(b, &t), 0);
    }
    ppk_bytes ea = raw(a), eb = raw(b);
    CHECK(same_bytes(&ea, &eb));
    ppk_profile_free(a);
    ppk_profile_free(b);
}

static void fill(ppk_profile *p, int n, int salt) {
    for (int k = 0; k < n; k++) {
        char task[32];
        snprintf(task, sizeof task, "Task-%d-%d", salt, k);
        ppk_label l[2] = {{PPK_STR("task name"), 0, ppk_cstr(task), 0, {0}},
                          {PPK_STR("local root span id"), 1, {0}, 1 + k % 4, {0}}};
        CHECK_EQ_INT(add(p, l, 2, k, k), 0);
    }
}

static void test_reset_gives_a_fresh_window(void) {
    ppk_profile_config cfg = config();
    cfg.chunk_size = 4096;
    cfg.keep_bytes = 3 * 4096;
    ppk_profile *p = NULL, *fresh = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    CHECK_EQ_INT(ppk_profile_create(&cfg, &fresh), 0);
    ppk_profile_stats st0, st;
    ppk_profile_stats_get(p, &st0);
    fill(p, 2000, 1);
    CHECK_EQ_INT(ppk_profile_set_endpoint(p, 1, PPK_STR("GET /a")), 0);
    ppk_profile_stats_get(p, &st);
    CHECK(st.strings > 2000);
    uint64_t full = st.memory_bytes;
    ppk_profile_reset(p, 0);
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.samples_added, 0);
    CHECK_EQ_U64(st.samples_aggregated, 0);
    CHECK_EQ_U64(st.endpoints, 0);
    CHECK_EQ_U64(st.strings, st0.strings);
    CHECK(st.memory_bytes < full);
    ppk_bytes ep = raw(p), ef = raw(fresh);
    CHECK(same_bytes(&ep, &ef));
    /* The next window holds exactly what a fresh profile would. */
    fill(p, 300, 2);
    fill(fresh, 300, 2);
    ep = raw(p);
    ef = raw(fresh);
    CHECK(same_bytes(&ep, &ef));
    /* Memory goes back: only keep_bytes of chunks survive a reset, and tables that grew
     * for a big window shrink back after the next, smaller one. */
    ppk_profile_reset(p, 0);
    ppk_profile_stats_get(p, &st);
    uint64_t small = st.memory_bytes;
    fill(p, 20000, 3);
    ppk_profile_reset(p, 0); /* a big window just ended: its tables are kept for reuse */
    ppk_profile_stats_get(p, &st);
    uint64_t big = st.memory_bytes;
    CHECK(big > small + cfg.keep_bytes);
    fill(p, 300, 4);
    ppk_profile_reset(p, 0);
    ppk_profile_stats_get(p, &st);
    CHECK(st.memory_bytes <= small + cfg.keep_bytes);
    CHECK(st.memory_bytes < big);
    ppk_profile_free(p);
    ppk_profile_free(fresh);
}

static void test_same_input_same_bytes(void) {
    ppk_profile *a = make(), *b = make();
    fill(a, 500, 9);
    fill(b, 500, 9);
    CHECK_EQ_INT(ppk_profile_set_endpoint(a, 2, PPK_STR("GET /x")), 0);
    CHECK_EQ_INT(ppk_profile_set_endpoint(b, 2, PPK_STR("GET /x")), 0);
    ppk_bytes e1 = raw(a), e2 = raw(a), e3 = raw(b);
    CHECK(e1.len == e3.len && memcmp(e1.data, e3.data, e1.len) == 0);
    CHECK(same_bytes(&e1, &e2));
    ppk_bytes_free(&e3);
    ppk_profile_free(a);
    ppk_profile_free(b);
}

static void count_cb(void *opaque, ppk_str endpoint, int64_t count) {
    char *out = opaque;
    size_t n = strlen(out);
    snprintf(out + n, 256 - n, "%.*s=%lld;", (int)endpoint.len, endpoint.ptr,
             (long long)count);
}

static void test_endpoints(void) {
    ppk_profile *p = make();
    CHECK_EQ_INT(ppk_profile_set_endpoint(p, 0, PPK_STR("x")), PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_set_endpoint(p, 1, (ppk_str){NULL, 1}), PPK_ENULL);
    CHECK_EQ_INT(ppk_profile_add_endpoint_count(p, PPK_STR("GET /b"), -1), PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_add_endpoint_count(p, PPK_STR("GET /b"), 2), 0);
    CHECK_EQ_INT(ppk_profile_add_endpoint_count(p, PPK_STR("GET /a"), 1), 0);
    CHECK_EQ_INT(ppk_profile_add_endpoint_count(p, PPK_STR("GET /b"), INT64_MAX), 0);
    char out[256] = "";
    ppk_profile_foreach_endpoint_count(p, count_cb, out);
    CHECK(strcmp(out, "GET /b=9223372036854775807;GET /a=1;") == 0);
    /* Setting an endpoint changes the encoding (a "trace endpoint" label) only for the
     * samples of that span. */
    ppk_profile *q = make();
    fill(p, 8, 0);
    fill(q, 8, 0);
    ppk_bytes ep = raw(p), eq = raw(q);
    CHECK(same_bytes(&ep, &eq));
    CHECK_EQ_INT(ppk_profile_set_endpoint(p, 99, PPK_STR("GET /none")), 0);
    CHECK_EQ_INT(ppk_profile_set_endpoint(q, 99, PPK_STR("GET /none")), 0);
    ep = raw(p);
    CHECK_EQ_INT(ppk_profile_set_endpoint(p, 3, PPK_STR("GET /three")), 0);
    ppk_bytes ep3 = raw(p);
    CHECK(ep3.len > ep.len);
    ppk_bytes_free(&ep);
    ppk_bytes_free(&ep3);
    ppk_profile_reset(p, 0);
    out[0] = 0;
    ppk_profile_foreach_endpoint_count(p, count_cb, out);
    CHECK_EQ_INT(strlen(out), 0);
    ppk_profile_free(p);
    ppk_profile_free(q);
}

static void test_upscaling_rules_validate(void) {
    ppk_profile *p = make();
    size_t idx[2] = {0, 2};
    CHECK_EQ_INT(ppk_profile_add_upscaling_proportional(p, idx, 2, PPK_STR(""), PPK_STR(""),
                                                        1, 2),
                 PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_add_upscaling_proportional(p, idx, 0, PPK_STR(""), PPK_STR(""),
                                                        1, 2),
                 PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_add_upscaling_proportional(p, idx, 1, PPK_STR(""), PPK_STR(""),
                                                        0, 2),
                 PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_add_upscaling_poisson(p, idx, 1, PPK_STR(""), PPK_STR(""), 0, 1,
                                                   0),
                 PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_add_upscaling_poisson(p, idx, 1, PPK_STR(""), PPK_STR(""), 0, 2,
                                                   100),
                 PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_add_upscaling_proportional(p, NULL, 1, PPK_STR(""), PPK_STR(""),
                                                        1, 2),
                 PPK_ENULL);
    /* A proportional x3 rule on every sample: the window of 1,1 encodes as a window of
     * 3,1 without rules. */
    CHECK_EQ_INT(ppk_profile_add_upscaling_proportional(p, idx, 1, PPK_STR(""), PPK_STR(""),
                                                        1, 3),
                 0);
    /* A second rule on the same value is shadowed by the first. */
    CHECK_EQ_INT(ppk_profile_add_upscaling_proportional(p, idx, 1, PPK_STR(""), PPK_STR(""),
                                                        1, 100),
                 0);
    ppk_profile *q = make();
    CHECK_EQ_INT(add(p, NULL, 0, 1, 1), 0);
    CHECK_EQ_INT(add(q, NULL, 0, 3, 1), 0);
    ppk_bytes ep = raw(p), eq = raw(q);
    CHECK(same_bytes(&ep, &eq));
    /* Rules survive reset. */
    ppk_profile_reset(p, 0);
    ppk_profile_reset(q, 0);
    CHECK_EQ_INT(add(p, NULL, 0, 5, 7), 0);
    CHECK_EQ_INT(add(q, NULL, 0, 15, 7), 0);
    ep = raw(p);
    eq = raw(q);
    CHECK(same_bytes(&ep, &eq));
    ppk_profile_free(p);
    ppk_profile_free(q);
}

/* A reset to a negative start means now, as 0 does: the encoded window starts now and
 * lasts a non-negative time (INT64_MIN used to overflow the duration). */
static void test_reset_negative_start(void) {
    ppk_profile *p = make();
    if (!p) return;
    CHECK_EQ_INT(add(p, NULL, 0, 1, 1), 0);
    int64_t before = ppk_now_ns();
    ppk_profile_reset(p, INT64_MIN);
    ppk_bytes b;
    ppk_encode_options o = {PPK_CODEC_NONE, 0, 0, 0};
    CHECK_EQ_INT(ppk_profile_encode(p, &o, &b), 0);
    pr_profile pp;
    if (b.data && pr_parse(b.data, b.len, &pp) == 0) {
        CHECK(pp.time_nanos >= before && pp.time_nanos <= ppk_now_ns());
        CHECK(pp.duration_nanos >= 0 && pp.duration_nanos < 60 * 1000000000LL);
        pr_free(&pp);
    }
    ppk_bytes_free(&b);
    ppk_profile_free(p);
}

/* A Poisson rule whose average is tiny against the sampling distance: the factor is
 * huge but finite, so values saturate and a zero stays zero (exp(-x) rounded to 1 made
 * it infinite, and 0 * inf encoded INT64_MIN). */
static void test_poisson_tiny_ratio(void) {
    ppk_profile_config cfg = config();
    cfg.sample_types[2] = (ppk_value_type){PPK_STR("other"), PPK_STR("count")};
    cfg.n_sample_types = 3;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    if (!p) return;
    size_t idx[] = {0, 1, 2};
    CHECK_EQ_INT(ppk_profile_add_upscaling_poisson(p, idx, 3, PPK_STR(""), PPK_STR(""), 1, 0,
                                                   UINT64_MAX),
                 0);
    int64_t v[3] = {1, 1000, 0}; /* count, sum, a value of zero */
    ppk_sample_data s = {FRAMES, 3, NULL, 0, v, 3, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    ppk_bytes b = raw(p);
    pr_profile pp;
    if (b.data && pr_parse(b.data, b.len, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 1);
        if (pp.nsamples == 1 && pp.samples[0].nval == 3) {
            /* factor 1 / (1 - e^(-1000 / 2^64)) = 2^64 / 1000, to 1e-9 */
            double want = 18446744073709551616.0 / 1000.0;
            CHECK(fabs((double)pp.samples[0].val[0] - want) < want * 1e-9);
            CHECK_EQ_INT(pp.samples[0].val[1], INT64_MAX);
            CHECK_EQ_INT(pp.samples[0].val[2], 0);
        }
        pr_free(&pp);
    }
    ppk_bytes_free(&b);
    ppk_profile_free(p);
}

/* Reserved keys are recognized as given and as stored: a longer key cut to one by
 * max_string_len is refused like the key itself, and so is the key when the limit would
 * cut it shorter. */
static void test_reserved_key_after_cut(void) {
    ppk_profile_config cfg = config();
    cfg.max_string_len = 16; /* strlen("end_timestamp_ns") */
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    cfg.max_string_len = 18; /* strlen("local root span id") */
    ppk_profile *q = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &q), 0);
    if (p && q) {
        ppk_label ts = {PPK_STR("end_timestamp_ns!"), 0, PPK_STR("x"), 0, {0}};
        CHECK_EQ_INT(add(p, &ts, 1, 1, 1), PPK_ERESERVED);
        ppk_label span = {PPK_STR("local root span id!"), 0, PPK_STR("x"), 0, {0}};
        CHECK_EQ_INT(add(q, &span, 1, 1, 1), PPK_ESPANID);
        span.is_num = 1;
        span.num = 7;
        CHECK_EQ_INT(add(q, &span, 1, 1, 1), 0); /* numeric: a span id, cut to its key */
        ppk_label other = {PPK_STR("end_timestamp_nx"), 0, PPK_STR("x"), 0, {0}};
        CHECK_EQ_INT(add(p, &other, 1, 1, 1), 0);
        ppk_profile_stats st;
        ppk_profile_stats_get(p, &st);
        CHECK_EQ_U64(st.samples_added, 1);
    }
    ppk_profile_free(p);
    ppk_profile_free(q);
    cfg.max_string_len = 12; /* both keys would be cut shorter */
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    if (p) {
        ppk_label ts = {PPK_STR("end_timestamp_ns"), 0, PPK_STR("x"), 0, {0}};
        CHECK_EQ_INT(add(p, &ts, 1, 1, 1), PPK_ERESERVED);
        ppk_label span = {PPK_STR("local root span id"), 0, PPK_STR("x"), 0, {0}};
        CHECK_EQ_INT(add(p, &span, 1, 1, 1), PPK_ESPANID);
        span.is_num = 1;
        CHECK_EQ_INT(add(p, &span, 1, 1, 1), PPK_ESPANID); /* numeric 0 */
        ppk_profile_free(p);
    }
}

static void test_encode_options_and_codecs(void) {
    ppk_profile *p = make();
    fill(p, 200, 4);
    ppk_bytes out = {(uint8_t *)1, 1};
    ppk_encode_options bad = {(ppk_codec)7, 0, 0, 0};
    CHECK_EQ_INT(ppk_profile_encode(p, &bad, &out), PPK_EINVAL);
    CHECK(out.data == NULL && out.len == 0);
    ppk_encode_options badlevel = {PPK_CODEC_GZIP, 10, 0, 0};
    CHECK_EQ_INT(ppk_profile_encode(p, &badlevel, &out), PPK_EINVAL);
    ppk_encode_options badtime = {PPK_CODEC_GZIP, 0, -1, 0};
    CHECK_EQ_INT(ppk_profile_encode(p, &badtime, &out), PPK_EINVAL);
    ppk_encode_options backwards = {PPK_CODEC_GZIP, 0, 5000, 4999};
    CHECK_EQ_INT(ppk_profile_encode(p, &backwards, &out), PPK_EINVAL);
    CHECK_EQ_INT(ppk_profile_encode(p, NULL, NULL), PPK_EINVAL);

    ppk_bytes plain = raw(p);
    /* gzip, each level: zlib's inflate gives back the raw bytes. */
    for (int level = 0; level <= 9; level += 3) {
        ppk_encode_options o = {PPK_CODEC_GZIP, level, 1000, 5000};
        ppk_bytes gz;
        CHECK_EQ_INT(ppk_profile_encode(p, &o, &gz), 0);
        CHECK(gz.len > 18 && gz.data[0] == 0x1f && gz.data[1] == 0x8b);
        uint8_t *back = malloc(plain.len + 1);
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        CHECK_EQ_INT(inflateInit2(&zs, 15 + 16), Z_OK);
        zs.next_in = gz.data;
        zs.avail_in = (uInt)gz.len;
        zs.next_out = back;
        zs.avail_out = (uInt)plain.len + 1;
        CHECK_EQ_INT(inflate(&zs, Z_FINISH), Z_STREAM_END);
        CHECK_EQ_U64(zs.total_out, plain.len);
        CHECK(memcmp(back, plain.data, plain.len) == 0);
        inflateEnd(&zs);
        free(back);
        ppk_bytes_free(&gz);
    }
    ppk_encode_options oz = {PPK_CODEC_ZSTD, 3, 1000, 5000};
    ppk_bytes zs;
    CHECK_EQ_INT(ppk_profile_encode(p, &oz, &zs), 0);
    CHECK(zs.len > 4 && zs.data[0] == 0x28 && zs.data[1] == 0xb5 && zs.data[2] == 0x2f &&
          zs.data[3] == 0xfd);
    uint8_t *back = malloc(plain.len + 1);
    size_t n = ZSTD_decompress(back, plain.len + 1, zs.data, zs.len);
    CHECK(!ZSTD_isError(n) && n == plain.len && memcmp(back, plain.data, n) == 0);
    free(back);
    ppk_bytes_free(&zs);
    ppk_bytes_free(&plain);
    ppk_bytes_free(&plain); /* a second free of a zeroed ppk_bytes is harmless */
    ppk_bytes_free(NULL);
    ppk_profile_free(p);
}

/* A window whose encoding is several times the encoder's 256 KiB buffer (30,000 samples
 * with their own task names): gzip and zstd at their default levels decompress to the
 * raw encoding, and each codec gives the same bytes twice. */
static void test_big_window_streams(void) {
    ppk_profile *p = make();
    fill(p, 30000, 7);
    ppk_bytes plain = raw(p);
    CHECK(plain.len > 4 * (256u << 10));
    const ppk_codec codecs[] = {PPK_CODEC_GZIP, PPK_CODEC_ZSTD};
    for (size_t c = 0; c < 2; c++) {
        ppk_encode_options o = {codecs[c], 0, 1000, 5000};
        ppk_bytes a, b;
        CHECK_EQ_INT(ppk_profile_encode(p, &o, &a), 0);
        CHECK_EQ_INT(ppk_profile_encode(p, &o, &b), 0);
        uint8_t *back = malloc(plain.len + 1);
        size_t n = 0;
        if (codecs[c] == PPK_CODEC_ZSTD) {
            n = ZSTD_decompress(back, plain.len + 1, a.data, a.len);
            CHECK(!ZSTD_isError(n));
        } else {
            uLongf dl = plain.len + 1;
            z_stream zs;
            memset(&zs, 0, sizeof zs);
            CHECK_EQ_INT(inflateInit2(&zs, 15 + 16), Z_OK);
            zs.next_in = a.data;
            zs.avail_in = (uInt)a.len;
            zs.next_out = back;
            zs.avail_out = (uInt)dl;
            CHECK_EQ_INT(inflate(&zs, Z_FINISH), Z_STREAM_END);
            n = zs.total_out;
            inflateEnd(&zs);
        }
        CHECK(n == plain.len && memcmp(back, plain.data, n) == 0);
        free(back);
        CHECK(same_bytes(&a, &b));
    }
    ppk_bytes_free(&plain);
    ppk_profile_free(p);
}

int main(void) {
    RUN(test_create_validates_config);
    RUN(test_strerror_covers_every_code);
    RUN(test_bad_input_is_refused_without_change);
    RUN(test_labels_in_any_order_aggregate);
    RUN(test_string_and_numeric_labels_stay_apart);
    RUN(test_values_saturate);
    RUN(test_timestamped_samples_stay_apart);
    RUN(test_repairs_are_counted);
    RUN(test_one_rule_per_value);
    RUN(test_input_is_transient);
    RUN(test_reset_gives_a_fresh_window);
    RUN(test_same_input_same_bytes);
    RUN(test_endpoints);
    RUN(test_upscaling_rules_validate);
    RUN(test_reset_negative_start);
    RUN(test_poisson_tiny_ratio);
    RUN(test_reserved_key_after_cut);
    RUN(test_encode_options_and_codecs);
    RUN(test_big_window_streams);
    return check_summary();
}
