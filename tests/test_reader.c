/*
 * test_reader.c - ppk_pprof_read: every field, every codec, every kind of malformed
 * input, bounded memory, allocation failures.
 *
 * Round trips: profiles built with ppk_profile_add and encoded by the library are read
 * back and compared with what was added (values, labels, stacks, mappings, times), and
 * with what tests/pprof_read.h, a decoder that shares no code with the library, reads
 * from the same bytes (both described in pr_describe's canonical text). Fields the
 * encoder never writes (drop_frames, keep_frames, default_sample_type, inlined lines,
 * mapping flags, is_folded, ids not in order, unpacked repeated fields, unknown fields)
 * are checked on protobufs written here by hand. tests/test_pprofkit_cmd.sh compares the
 * command built on the reader with go tool pprof on pprofkit's and Go's own profiles.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "check.h"
#include "test_alloc.h"
#include "reader_check.h"
#include "pprof_read.h"
#include "pprofkit.h"

/* ---- a protobuf writer for hand-made inputs ---------------------------------------- */
typedef struct pbw {
    uint8_t *b;
    size_t n, cap;
} pbw;

static void w_raw(pbw *w, const void *p, size_t n) {
    if (w->n + n > w->cap) {
        w->cap = (w->n + n) * 2 + 64;
        w->b = realloc(w->b, w->cap);
        if (!w->b) abort();
    }
    if (n) memcpy(w->b + w->n, p, n);
    w->n += n;
}
static void w_varint(pbw *w, uint64_t v) {
    uint8_t t[10];
    size_t k = 0;
    while (v >= 0x80) t[k++] = (uint8_t)(v | 0x80), v >>= 7;
    t[k++] = (uint8_t)v;
    w_raw(w, t, k);
}
static void w_tag(pbw *w, uint32_t f, int wt) { w_varint(w, (uint64_t)f << 3 | (uint64_t)wt); }
static void w_uint(pbw *w, uint32_t f, uint64_t v) { w_tag(w, f, 0), w_varint(w, v); }
static void w_bytes(pbw *w, uint32_t f, const void *p, size_t n) {
    w_tag(w, f, 2);
    w_varint(w, n);
    w_raw(w, p, n);
}
static void w_str(pbw *w, uint32_t f, const char *s) { w_bytes(w, f, s, strlen(s)); }
/* Appends message m as field f, and empties m. */
static void w_msg(pbw *w, uint32_t f, pbw *m) {
    w_bytes(w, f, m->b, m->n);
    m->n = 0;
}
static void w_free(pbw *w) {
    free(w->b);
    memset(w, 0, sizeof *w);
}

/* ---- reading helpers --------------------------------------------------------------- */
static char g_err[512];

static ppk_pprof *read_ok(const void *data, size_t len) {
    ppk_pprof *p = NULL;
    int rc = ppk_pprof_read(data, len, NULL, &p, g_err, sizeof g_err);
    if (rc) fprintf(stderr, "ppk_pprof_read: %d %s\n", rc, g_err);
    CHECK_EQ_INT(rc, 0);
    const char *wrong = p ? rc_check_invariants(p) : NULL;
    if (wrong) fprintf(stderr, "ppk_pprof_read: %s\n", wrong);
    CHECK(wrong == NULL);
    return p;
}

/* Reading must fail with `code` and a message containing `text`. */
#define CHECK_READ_FAILS(data, len, opt, code, text)                                       \
    do {                                                                                   \
        ppk_pprof *p_ = (ppk_pprof *)1;                                                    \
        int rc_ = ppk_pprof_read((data), (len), (opt), &p_, g_err, sizeof g_err);          \
        CHECK_EQ_INT(rc_, (code));                                                         \
        CHECK(p_ == NULL);                                                                 \
        if (!strstr(g_err, (text))) {                                                      \
            fprintf(stderr, "%s:%d: message \"%s\" lacks \"%s\"\n", __FILE__, __LINE__,     \
                    g_err, (text));                                                        \
            check_failures_++;                                                             \
        }                                                                                  \
        if (!rc_) ppk_pprof_free(p_);                                                      \
    } while (0)

static int streq(ppk_str s, const char *c) {
    return s.len == strlen(c) && (s.len == 0 || memcmp(s.ptr, c, s.len) == 0);
}

/* The library's reader and pprof_read.h describe the same bytes identically. */
static void check_same_as_pprof_read(const ppk_bytes *b) {
    ppk_pprof *p = read_ok(b->data, b->len);
    const uint8_t *raw = b->data;
    size_t raw_len = b->len;
    uint8_t *unz = NULL;
    if (p && p->codec == PPK_CODEC_ZSTD) { /* pprof_read.h reads raw and gzip only */
        size_t n = p->decoded_bytes; /* zstd's own decoder must give as many bytes */
        unz = malloc(n + 1);
        CHECK_EQ_U64(ZSTD_decompress(unz, n + 1, b->data, b->len), n);
        raw = unz;
        raw_len = n;
    }
    pr_profile pp;
    CHECK_EQ_INT(pr_parse(raw, raw_len, &pp), 0);
    if (p) {
        char *mine = describe(p), *theirs = pr_describe(&pp);
        if (strcmp(mine, theirs) != 0) {
            fprintf(stderr, "reader:\n%.2000s\npprof_read.h:\n%.2000s\n", mine, theirs);
            check_failures_++;
        }
        CHECK_EQ_U64(p->n_samples, pp.nsamples);
        CHECK_EQ_U64(p->n_locations, pp.nlocs);
        CHECK_EQ_U64(p->n_functions, pp.nfns);
        CHECK_EQ_U64(p->n_mappings, pp.nmaps);
        CHECK_EQ_U64(p->n_strings, pp.nstrings);
        CHECK_EQ_INT(p->time_nanos, pp.time_nanos);
        CHECK_EQ_INT(p->duration_nanos, pp.duration_nanos);
        CHECK_EQ_INT(p->period, pp.period);
        free(mine);
        free(theirs);
    }
    pr_free(&pp);
    free(unz);
    ppk_pprof_free(p);
}

/* ---- a profile with every feature the encoder writes ------------------------------ */
#define T0 INT64_C(1700000000000000000)

static ppk_profile *feature_profile(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("cpu-time"), PPK_STR("nanoseconds")};
    cfg.sample_types[1] = (ppk_value_type){PPK_STR("alloc-space"), PPK_STR("bytes")};
    cfg.n_sample_types = 2;
    cfg.period_type = (ppk_value_type){PPK_STR("cpu-time"), PPK_STR("nanoseconds")};
    cfg.period = 10000000;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    static const ppk_mapping libc = {0x7f0000000000, 0x7f0000100000, 0x1000,
                                     PPK_STR("/lib/libc.so.6"), PPK_STR("abc123")};
    ppk_frame frames[4] = {
        {PPK_STR("leaf"), PPK_STR("_Z4leafv"), PPK_STR("a.c"), 10, 12, 0x401000, NULL},
        {PPK_STR("middle"), {0}, PPK_STR("a.c"), 20, 25, 0, NULL},
        {{0}, {0}, {0}, 0, 0, 0x7f0000001234, &libc}, /* unsymbolized */
        {PPK_STR("main"), {0}, PPK_STR("main.c"), 1, 3, 0, NULL},
    };
    ppk_label labels[3] = {
        {PPK_STR("thread name"), 0, PPK_STR("worker-1"), 0, {0}},
        {PPK_STR("bytes"), 1, {0}, 4096, PPK_STR("bytes")},
        {PPK_STR("task id"), 1, {0}, -5, {0}},
    };
    int64_t v1[2] = {30000000, 4096}, v2[2] = {-7, 0}, v3[2] = {INT64_MAX, INT64_MIN};
    ppk_sample_data s1 = {frames, 4, labels, 3, v1, 2, 0};
    ppk_sample_data s2 = {frames + 1, 3, labels, 1, v2, 2, 0};
    ppk_sample_data s3 = {frames + 3, 1, NULL, 0, v3, 2, 0};
    ppk_sample_data s4 = {frames, 2, labels + 1, 1, v1, 1, T0 + 5};
    CHECK_EQ_INT(ppk_profile_add(p, &s1), 0);
    CHECK_EQ_INT(ppk_profile_add(p, &s2), 0);
    CHECK_EQ_INT(ppk_profile_add(p, &s3), 0);
    CHECK_EQ_INT(ppk_profile_add(p, &s4), 0);
    CHECK_EQ_INT(ppk_profile_add(p, &s1), 0); /* aggregated with the first */
    return p;
}

static const ppk_pprof_sample *find_sample(const ppk_pprof *p, const char *leaf,
                                           size_t n_locations, size_t n_labels) {
    for (size_t i = 0; i < p->n_samples; i++) {
        const ppk_pprof_sample *s = &p->samples[i];
        if (s->n_locations == n_locations && s->n_labels == n_labels &&
            s->locations[0]->n_lines && streq(s->locations[0]->lines[0].function->name, leaf))
            return s;
    }
    return NULL;
}

static const ppk_pprof_label *find_label(const ppk_pprof_sample *s, const char *key) {
    for (size_t i = 0; i < s->n_labels; i++)
        if (streq(s->labels[i].key, key)) return &s->labels[i];
    return NULL;
}

static void test_round_trip_every_codec(void) {
    ppk_profile *prof = feature_profile();
    const ppk_codec codecs[3] = {PPK_CODEC_NONE, PPK_CODEC_GZIP, PPK_CODEC_ZSTD};
    for (int c = 0; c < 3; c++) {
        ppk_encode_options o = {codecs[c], 0, T0, T0 + 60000000000};
        ppk_bytes b;
        CHECK_EQ_INT(ppk_profile_encode(prof, &o, &b), 0);
        ppk_pprof *p = read_ok(b.data, b.len);
        if (!p) continue;
        CHECK_EQ_INT(p->codec, codecs[c]);
        CHECK_EQ_U64(p->n_sample_types, 2);
        CHECK(streq(p->sample_types[0].type, "cpu-time"));
        CHECK(streq(p->sample_types[0].unit, "nanoseconds"));
        CHECK(streq(p->sample_types[1].type, "alloc-space"));
        CHECK(streq(p->sample_types[1].unit, "bytes"));
        CHECK(streq(p->period_type.type, "cpu-time"));
        CHECK(streq(p->period_type.unit, "nanoseconds"));
        CHECK_EQ_INT(p->period, 10000000);
        CHECK_EQ_INT(p->time_nanos, T0);
        CHECK_EQ_INT(p->duration_nanos, 60000000000);
        CHECK_EQ_U64(p->n_samples, 4);
        CHECK(p->n_strings > 0 && p->strings[0].len == 0);
        CHECK_EQ_U64(p->n_comments, 0);
        CHECK(streq(p->default_sample_type, "") && streq(p->drop_frames, ""));
        /* The aggregated sample: its stack leaf first, its labels, its summed values. */
        const ppk_pprof_sample *s = find_sample(p, "leaf", 4, 3);
        CHECK(s != NULL);
        if (s) {
            CHECK_EQ_INT(s->values[0], 60000000);
            CHECK_EQ_INT(s->values[1], 8192);
            const ppk_pprof_location *l = s->locations[0];
            CHECK_EQ_U64(l->address, 0x401000);
            CHECK_EQ_U64(l->n_lines, 1);
            CHECK_EQ_INT(l->lines[0].line, 12);
            const ppk_pprof_function *fn = l->lines[0].function;
            CHECK(streq(fn->system_name, "_Z4leafv") && streq(fn->filename, "a.c"));
            CHECK_EQ_INT(fn->start_line, 10);
            CHECK(l->mapping == NULL);
            CHECK(streq(s->locations[1]->lines[0].function->name, "middle"));
            const ppk_pprof_location *native = s->locations[2];
            CHECK_EQ_U64(native->n_lines, 0);
            CHECK_EQ_U64(native->address, 0x7f0000001234);
            CHECK(native->mapping != NULL);
            if (native->mapping) {
                CHECK(streq(native->mapping->filename, "/lib/libc.so.6"));
                CHECK(streq(native->mapping->build_id, "abc123"));
                CHECK_EQ_U64(native->mapping->memory_start, 0x7f0000000000);
                CHECK_EQ_U64(native->mapping->memory_limit, 0x7f0000100000);
                CHECK_EQ_U64(native->mapping->file_offset, 0x1000);
                CHECK_EQ_U64(native->mapping->id, 1);
            }
            CHECK(streq(s->locations[3]->lines[0].function->name, "main"));
            const ppk_pprof_label *l1 = find_label(s, "thread name");
            const ppk_pprof_label *l2 = find_label(s, "bytes");
            const ppk_pprof_label *l3 = find_label(s, "task id");
            CHECK(l1 && streq(l1->str, "worker-1") && l1->num == 0);
            CHECK(l2 && l2->num == 4096 && streq(l2->num_unit, "bytes") && !l2->str.len);
            CHECK(l3 && l3->num == -5 && !l3->num_unit.len);
        }
        s = find_sample(p, "middle", 3, 1);
        CHECK(s && s->values[0] == -7 && s->values[1] == 0);
        s = find_sample(p, "main", 1, 0);
        CHECK(s && s->values[0] == INT64_MAX && s->values[1] == INT64_MIN);
        s = find_sample(p, "leaf", 2, 2); /* timestamped: one value given, the other 0 */
        CHECK(s != NULL);
        if (s) {
            CHECK_EQ_INT(s->values[0], 30000000);
            CHECK_EQ_INT(s->values[1], 0);
            const ppk_pprof_label *ts = find_label(s, "end_timestamp_ns");
            CHECK(ts && ts->num == T0 + 5);
        }
        /* Every location and function is in the tables, with ids index + 1. */
        for (size_t i = 0; i < p->n_locations; i++) CHECK_EQ_U64(p->locations[i].id, i + 1);
        for (size_t i = 0; i < p->n_functions; i++) CHECK_EQ_U64(p->functions[i].id, i + 1);
        ppk_pprof_free(p);
        check_same_as_pprof_read(&b);
        ppk_bytes_free(&b);
    }
    ppk_profile_free(prof);
}

/* A larger profile, and a recorder's sharded export (the same string at several
 * indices): both decoders agree. */
static void test_agrees_with_independent_decoder(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.n_sample_types = 1;
    ppk_profile *prof = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &prof), 0);
    uint64_t x = 42;
    for (int i = 0; i < 3000; i++) {
        ppk_frame fr[12];
        char names[12][16];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (x >> 60) % 12;
        for (size_t k = 0; k < n; k++) {
            snprintf(names[k], sizeof names[k], "fn%u", (unsigned)((x >> (4 * k)) % 50));
            fr[k] = (ppk_frame){ppk_cstr(names[k]), {0}, PPK_STR("f.py"), 1,
                                (int64_t)k + 1, 0, NULL};
        }
        char task[16];
        snprintf(task, sizeof task, "t%u", (unsigned)(x % 97));
        ppk_label lab = {PPK_STR("task"), 0, ppk_cstr(task), 0, {0}};
        int64_t v = (int64_t)(x % 1000) - 100;
        ppk_sample_data s = {fr, n, &lab, 1, &v, 1, 0};
        CHECK_EQ_INT(ppk_profile_add(prof, &s), 0);
    }
    ppk_bytes b;
    ppk_encode_options o = {PPK_CODEC_GZIP, 0, T0, T0 + 1};
    CHECK_EQ_INT(ppk_profile_encode(prof, &o, &b), 0);
    check_same_as_pprof_read(&b);
    ppk_bytes_free(&b);
    ppk_profile_free(prof);

    ppk_recorder_config rc;
    ppk_recorder_config_init(&rc);
    rc.profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    rc.profile.n_sample_types = 1;
    rc.shards = 3;
    rc.codec = PPK_CODEC_ZSTD;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&rc, &r), 0);
    ppk_sample *sb[3];
    for (int i = 0; i < 3; i++) CHECK_EQ_INT(ppk_sample_create(r, &sb[i]), 0);
    for (int i = 0; i < 60; i++) {
        ppk_sample *s = sb[i % 3];
        CHECK_EQ_INT(ppk_sample_start(s), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("leaf"), PPK_STR("x.py"), i % 5, 0), 0);
        CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("main"), PPK_STR("x.py"), 1, 0), 0);
        CHECK_EQ_INT(ppk_sample_set_value(s, 0, i + 1), 0);
        CHECK_EQ_INT(ppk_sample_flush(s), 0);
    }
    ppk_export e;
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    ppk_pprof *p = read_ok(e.data.data, e.data.len);
    if (p) {
        int64_t sum = 0;
        for (size_t i = 0; i < p->n_samples; i++) sum += p->samples[i].values[0];
        CHECK_EQ_INT(sum, 60 * 61 / 2);
        ppk_pprof_free(p);
    }
    check_same_as_pprof_read(&e.data);
    ppk_export_free(&e);
    for (int i = 0; i < 3; i++) ppk_sample_free(sb[i]);
    ppk_recorder_free(r);
}

/* ---- fields the encoder does not write, on hand-made protobufs -------------------- */
/* Strings: "", "samples", "count", "f", "g", "a.go", "lib.so", "drop.*", "keep.*",
 * "a comment", "another", "k", "v", "ms". */
static void hand_strings(pbw *w) {
    static const char *const s[] = {"", "samples", "count", "f", "g", "a.go", "lib.so",
                                    "drop.*", "keep.*", "a comment", "another", "k", "v",
                                    "ms"};
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) w_str(w, 6, s[i]);
}

static void test_fields_by_hand(void) {
    pbw w = {0}, m = {0}, n = {0};
    w_uint(&m, 1, 1), w_uint(&m, 2, 2); /* ValueType samples/count */
    w_msg(&w, 1, &m);
    /* A sample before the tables it refers to: location ids unpacked, values in two
     * fields (one unpacked, negative: 10 bytes), a label with both str and num. */
    w_uint(&m, 1, 30), w_uint(&m, 1, 20);
    w_uint(&m, 2, (uint64_t)-3);
    w_uint(&n, 1, 11), w_uint(&n, 2, 12), w_uint(&n, 3, 7), w_uint(&n, 4, 13);
    w_msg(&m, 3, &n);
    w_uint(&m, 99, 5); /* unknown field of a Sample */
    w_msg(&w, 2, &m);
    /* Mapping id 9 with every flag. */
    w_uint(&m, 1, 9), w_uint(&m, 2, 0x1000), w_uint(&m, 3, 0x2000), w_uint(&m, 4, 0x10);
    w_uint(&m, 5, 6), w_uint(&m, 6, 5);
    for (uint32_t f = 7; f <= 10; f++) w_uint(&m, f, 1);
    w_msg(&w, 3, &m);
    /* Location 30: two lines (g inlined into f), folded, in mapping 9; location 20: a
     * line without a function. Ids out of order. */
    w_uint(&m, 1, 30), w_uint(&m, 2, 9), w_uint(&m, 3, 0xabc), w_uint(&m, 5, 1);
    w_uint(&n, 1, 5), w_uint(&n, 2, 42);
    w_msg(&m, 4, &n);
    w_uint(&n, 1, 4), w_uint(&n, 2, 7);
    w_msg(&m, 4, &n);
    w_msg(&w, 4, &m);
    w_uint(&m, 1, 20);
    w_uint(&n, 2, 3);
    w_msg(&m, 4, &n);
    w_msg(&w, 4, &m);
    /* Functions 5 (g) and 4 (f, given twice a name: the last wins). */
    w_uint(&m, 1, 5), w_uint(&m, 2, 4), w_uint(&m, 4, 5), w_uint(&m, 5, 40);
    w_msg(&w, 5, &m);
    w_uint(&m, 1, 4), w_uint(&m, 2, 4), w_uint(&m, 2, 3), w_uint(&m, 3, 3);
    w_msg(&w, 5, &m);
    hand_strings(&w);
    w_uint(&w, 7, 7), w_uint(&w, 8, 8);                     /* drop_frames, keep_frames */
    w_uint(&w, 9, 123), w_uint(&w, 10, 456), w_uint(&w, 12, 1000);
    w_uint(&m, 1, 1), w_uint(&m, 2, 13);
    w_msg(&w, 11, &m);                                      /* period_type samples/ms */
    w_uint(&w, 13, 9);                                      /* a comment, unpacked */
    w_varint(&n, 10), w_varint(&n, 9);
    w_msg(&w, 13, &n);                                      /* and two, packed */
    w_uint(&w, 14, 1);                                      /* default_sample_type */
    /* Unknown fields of every wire type. */
    w_uint(&w, 100, 1);
    w_tag(&w, 101, 1), w_raw(&w, "12345678", 8);
    w_tag(&w, 102, 5), w_raw(&w, "1234", 4);
    w_str(&w, 103, "skipped");

    ppk_pprof *p = read_ok(w.b, w.n);
    if (p) {
        CHECK_EQ_INT(p->codec, PPK_CODEC_NONE);
        CHECK_EQ_U64(p->decoded_bytes, w.n);
        CHECK(streq(p->drop_frames, "drop.*") && streq(p->keep_frames, "keep.*"));
        CHECK(streq(p->default_sample_type, "samples"));
        CHECK_EQ_INT(p->time_nanos, 123);
        CHECK_EQ_INT(p->duration_nanos, 456);
        CHECK_EQ_INT(p->period, 1000);
        CHECK(streq(p->period_type.type, "samples") && streq(p->period_type.unit, "ms"));
        CHECK_EQ_U64(p->n_comments, 3);
        if (p->n_comments == 3)
            CHECK(streq(p->comments[0], "a comment") && streq(p->comments[1], "another") &&
                  streq(p->comments[2], "a comment"));
        CHECK_EQ_U64(p->n_samples, 1);
        CHECK_EQ_U64(p->n_mappings, 1);
        const ppk_pprof_mapping *mp = &p->mappings[0];
        CHECK(mp->id == 9 && mp->memory_start == 0x1000 && mp->memory_limit == 0x2000 &&
              mp->file_offset == 0x10);
        CHECK(streq(mp->filename, "lib.so") && streq(mp->build_id, "a.go"));
        CHECK(mp->has_functions && mp->has_filenames && mp->has_line_numbers &&
              mp->has_inline_frames);
        const ppk_pprof_sample *s = &p->samples[0];
        CHECK_EQ_U64(s->n_locations, 2);
        CHECK_EQ_INT(s->values[0], -3);
        CHECK_EQ_U64(s->n_labels, 1);
        CHECK(streq(s->labels[0].key, "k") && streq(s->labels[0].str, "v") &&
              s->labels[0].num == 7 && streq(s->labels[0].num_unit, "ms"));
        const ppk_pprof_location *l = s->locations[0];
        CHECK(l->id == 30 && l->address == 0xabc && l->is_folded && l->mapping == mp);
        CHECK_EQ_U64(l->n_lines, 2);
        if (l->n_lines == 2) {
            CHECK(streq(l->lines[0].function->name, "g") && l->lines[0].line == 42);
            CHECK(streq(l->lines[0].function->filename, "a.go"));
            CHECK_EQ_INT(l->lines[0].function->start_line, 40);
            CHECK(streq(l->lines[1].function->name, "f") && l->lines[1].line == 7);
            CHECK(streq(l->lines[1].function->system_name, "f"));
            CHECK_EQ_U64(l->lines[1].function->id, 4);
        }
        l = s->locations[1];
        CHECK(l->id == 20 && l->mapping == NULL && !l->is_folded);
        CHECK(l->n_lines == 1 && l->lines[0].function == NULL && l->lines[0].line == 3);
        ppk_pprof_free(p);
    }
    w_free(&w), w_free(&m), w_free(&n);
}

/* Packed and unpacked repeated fields read the same. */
static void test_packed_and_unpacked(void) {
    pbw a = {0}, b = {0}, m = {0}, n = {0};
    for (int packed = 0; packed < 2; packed++) {
        pbw *w = packed ? &b : &a;
        w_uint(&m, 1, 1), w_uint(&m, 2, 2);
        w_msg(w, 1, &m);
        w_uint(&m, 1, 1), w_uint(&m, 2, 2);
        w_msg(w, 1, &m);
        if (packed) {
            w_varint(&n, 2), w_varint(&n, 1), w_varint(&n, 2);
            w_msg(&m, 1, &n);
            w_varint(&n, 5), w_varint(&n, (uint64_t)INT64_MIN);
            w_msg(&m, 2, &n);
        } else {
            w_uint(&m, 1, 2), w_uint(&m, 1, 1), w_uint(&m, 1, 2);
            w_uint(&m, 2, 5), w_uint(&m, 2, (uint64_t)INT64_MIN);
        }
        w_msg(w, 2, &m);
        for (uint64_t id = 1; id <= 2; id++) {
            w_uint(&m, 1, id);
            w_uint(&n, 1, id);
            w_msg(&m, 4, &n);
            w_msg(w, 4, &m);
            w_uint(&m, 1, id), w_uint(&m, 2, id + 2);
            w_msg(w, 5, &m);
        }
        hand_strings(w);
    }
    ppk_pprof *pa = read_ok(a.b, a.n), *pb = read_ok(b.b, b.n);
    if (pa && pb) {
        char *da = describe(pa), *db = describe(pb);
        CHECK(strcmp(da, db) == 0);
        CHECK(strcmp(da, "[0x0 g/@:0(0)] [0x0 f/@:0(0)] [0x0 g/@:0(0)] | | 5 "
                         "-9223372036854775808\n") == 0);
        free(da), free(db);
    }
    ppk_pprof_free(pa), ppk_pprof_free(pb);
    w_free(&a), w_free(&b), w_free(&m), w_free(&n);
}

/* ---- malformed input: the code, and a message naming the field and the offset ----- */
typedef struct bad {
    const char *what;
    const uint8_t *bytes;
    size_t len;
    const char *message;
} bad;

#define B(...) (const uint8_t[]){__VA_ARGS__}, sizeof((const uint8_t[]){__VA_ARGS__})

static void test_malformed_wire(void) {
    const bad cases[] = {
        {"truncated string", B(0x32, 0x05, 'a', 'b'),
         "Profile.string_table at byte 0: length 5 runs past the end of the Profile (2 bytes left)"},
        {"truncated varint", B(0x32, 0x00, 0x48, 0x80),
         "Profile.time_nanos at byte 3: a varint runs past the end of the Profile"},
        {"11-byte varint", B(0x32, 0x00, 0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                             0xff, 0xff, 0x01),
         "Profile.time_nanos at byte 3: a varint longer than 10 bytes"},
        {"varint over 64 bits", B(0x32, 0x00, 0x48, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                  0xff, 0xff, 0x02),
         "Profile.time_nanos at byte 3: a varint above 2^64 - 1"},
        {"field 0", B(0x32, 0x00, 0x00, 0x00), "Profile at byte 2: field number 0 is invalid"},
        {"group", B(0x32, 0x00, 0x0b), "Profile.sample_type at byte 2: wire type 3 is not supported"},
        {"wire type 7", B(0x32, 0x00, 0x7f, 0x01), "Profile field 15 at byte 2: wire type 7"},
        {"sample as varint", B(0x32, 0x00, 0x10, 0x01),
         "Profile.sample at byte 2: wire type 0, expected 2 (length-delimited)"},
        {"string as varint", B(0x30, 0x00),
         "Profile.string_table at byte 0: wire type 0, expected 2"},
        {"time as bytes", B(0x32, 0x00, 0x4a, 0x00),
         "Profile.time_nanos at byte 2: wire type 2, expected 0 (varint)"},
        {"fixed64 cut", B(0x32, 0x00, 0xa1, 0x06, 1, 2, 3),
         "Profile field 100 at byte 2: a 8-byte value runs past the end of the Profile"},
        {"label str as bytes", B(0x12, 0x04, 0x1a, 0x02, 0x12, 0x00, 0x32, 0x00),
         "Label.str at byte 4: wire type 2, expected 0 (varint)"},
        {"value as fixed32", B(0x12, 0x05, 0x15, 1, 2, 3, 4, 0x32, 0x00),
         "Sample.value at byte 2: wire type 5, expected 0 (varint) or 2 (packed)"},
        {"packed value cut", B(0x12, 0x03, 0x12, 0x01, 0x80, 0x32, 0x00),
         "Sample.value at byte 4: a varint runs past the end of the Sample"},
        {"nested length past its message", B(0x22, 0x02, 0x22, 0x05, 0x32, 0x00),
         "Location.line at byte 2: length 5 runs past the end of the Location (0 bytes left)"},
        {"no string table", B(0x48, 0x01),
         "Profile.string_table at byte 2: no string_table (string_table[0] must be \"\")"},
        {"first string not empty", B(0x32, 0x01, 'x'),
         "Profile.string_table at byte 0: string_table[0] must be \"\" (it has 1 bytes)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad *c = &cases[i];
        CHECK_READ_FAILS(c->bytes, c->len, NULL, PPK_EFORMAT, c->message);
    }
    CHECK_READ_FAILS("", 0, NULL, PPK_EFORMAT, "empty input");
}

/* Consistency errors: each on a valid profile with one thing wrong. */
static void test_malformed_references(void) {
    pbw w = {0}, m = {0}, n = {0};
    struct {
        const char *message;
    } expect[] = {
        {"Label.str at byte 14: string index 99 out of range (string_table has 14 strings)"},
        {"ValueType.unit at byte 4: string index -1 out of range (string_table has 14"},
        {"Sample.location_id at byte 10: location id 7 is not in Profile.location"},
        {"Line.function_id at byte 6: function id 3 is not in Profile.function"},
        {"Location.mapping_id at byte 4: mapping id 2 is not in Profile.mapping"},
        {"Profile.sample at byte 6: 2 values for 1 sample types"},
        {"Profile.sample at byte 6: 0 values for 1 sample types"},
        {"Function.id at byte 4: id 0 is reserved"},
        {"Location.id at byte 0: no id (0 is reserved)"},
        {"Function.id at byte 4: id 1 appears twice (also at byte 0)"},
        {"Mapping.id at byte 8: id 5 appears twice (also at byte 0)"},
        {"Profile.default_sample_type at byte 0: string index 14 out of range"},
        {"Profile.comment at byte 5: string index 20 out of range"},
    };
    for (int k = 0; k < (int)(sizeof expect / sizeof expect[0]); k++) {
        w.n = 0;
        switch (k) {
        case 0: /* Label.str past the table */
            w_uint(&m, 1, 1), w_uint(&m, 2, 2);
            w_msg(&w, 1, &m);
            w_uint(&m, 2, 1);
            w_uint(&n, 1, 11), w_uint(&n, 2, 99);
            w_msg(&m, 3, &n);
            w_msg(&w, 2, &m);
            break;
        case 1: /* a negative index */
            w_uint(&m, 1, 1), w_uint(&m, 2, (uint64_t)-1);
            w_msg(&w, 1, &m);
            break;
        case 2: /* a location that is not there */
            w_uint(&m, 1, 1), w_uint(&m, 2, 2);
            w_msg(&w, 1, &m);
            w_uint(&m, 2, 1), w_uint(&m, 1, 7);
            w_msg(&w, 2, &m);
            break;
        case 3: /* a function that is not there */
            w_uint(&m, 1, 1);
            w_uint(&n, 1, 3);
            w_msg(&m, 4, &n);
            w_msg(&w, 4, &m);
            break;
        case 4: /* a mapping that is not there */
            w_uint(&m, 1, 1), w_uint(&m, 2, 2);
            w_msg(&w, 4, &m);
            break;
        case 5: /* more values than sample types */
        case 6: /* fewer */
            w_uint(&m, 1, 1), w_uint(&m, 2, 2);
            w_msg(&w, 1, &m);
            if (k == 5) w_uint(&m, 2, 1), w_uint(&m, 2, 2);
            w_msg(&w, 2, &m);
            break;
        case 7: /* id 0 */
            w_uint(&m, 2, 3), w_uint(&m, 1, 0);
            w_msg(&w, 5, &m);
            break;
        case 8: /* no id */
            w_uint(&m, 3, 0x10);
            w_msg(&w, 4, &m);
            break;
        case 9: /* an id twice */
            w_uint(&m, 1, 1);
            w_msg(&w, 5, &m);
            w_uint(&m, 1, 1);
            w_msg(&w, 5, &m);
            break;
        case 10: /* twice, not in order */
            w_uint(&m, 1, 5);
            w_msg(&w, 3, &m);
            w_uint(&m, 1, 1);
            w_msg(&w, 3, &m);
            w_uint(&m, 1, 5);
            w_msg(&w, 3, &m);
            break;
        case 11:
            w_uint(&w, 14, 14);
            break;
        case 12: {
            w_uint(&w, 13, 2);
            w_varint(&n, 1), w_varint(&n, 20);
            w_msg(&w, 13, &n);
            break;
        }
        }
        hand_strings(&w);
        CHECK_READ_FAILS(w.b, w.n, NULL, PPK_EFORMAT, expect[k].message);
    }
    w_free(&w), w_free(&m), w_free(&n);
}

/* gzip by zlib itself; the caller frees .data with free(). */
static ppk_bytes gzip_of(const uint8_t *data, size_t len) {
    ppk_bytes out = {0};
    uLong cap = compressBound((uLong)len) + 64;
    out.data = malloc(cap);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    CHECK_EQ_INT(deflateInit2(&zs, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = (Bytef *)(uintptr_t)data;
    zs.avail_in = (uInt)len;
    zs.next_out = out.data;
    zs.avail_out = (uInt)cap;
    CHECK_EQ_INT(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out.len = cap - zs.avail_out;
    deflateEnd(&zs);
    return out;
}

static void test_compressed_input(void) {
    ppk_profile *prof = feature_profile();
    ppk_bytes raw;
    ppk_encode_options o = {PPK_CODEC_NONE, 0, T0, T0 + 1};
    CHECK_EQ_INT(ppk_profile_encode(prof, &o, &raw), 0);
    ppk_pprof *p0 = read_ok(raw.data, raw.len);
    char *want = p0 ? describe(p0) : NULL;
    ppk_pprof_free(p0);

    /* Two gzip members (split at a top-level field) read as one stream. */
    size_t cut = 2 + raw.data[1]; /* after the first sample_type */
    ppk_bytes g1 = gzip_of(raw.data, cut), g2 = gzip_of(raw.data + cut, raw.len - cut);
    uint8_t *two = malloc(g1.len + g2.len + 8);
    memcpy(two, g1.data, g1.len);
    memcpy(two + g1.len, g2.data, g2.len);
    ppk_pprof *p = read_ok(two, g1.len + g2.len);
    if (p && want) {
        char *got = describe(p);
        CHECK(strcmp(got, want) == 0);
        CHECK_EQ_U64(p->decoded_bytes, raw.len);
        free(got);
    }
    ppk_pprof_free(p);
    /* Bytes after the last member, a cut stream, a corrupt one. */
    memcpy(two + g1.len + g2.len, "garbage!", 8);
    CHECK_READ_FAILS(two, g1.len + g2.len + 8, NULL, PPK_EFORMAT, "gzip at byte ");
    CHECK_READ_FAILS(two, g1.len + g2.len - 3, NULL, PPK_EFORMAT,
                     "gzip: the input ends inside the stream");
    CHECK_READ_FAILS(g1.data, 10, NULL, PPK_EFORMAT, "gzip: the input ends inside the stream");
    two[g1.len + 12] ^= 0xff;
    ppk_pprof *q = NULL;
    CHECK(ppk_pprof_read(two, g1.len + g2.len, NULL, &q, g_err, sizeof g_err) ==
          PPK_EFORMAT);
    CHECK(strncmp(g_err, "gzip", 4) == 0);
    free(two);
    free(g2.data);
    free(g1.data);

    /* zstd: two frames, then a cut frame and trailing bytes. */
    size_t zcap = ZSTD_compressBound(raw.len) * 2 + 16;
    uint8_t *z = malloc(zcap + 8);
    size_t z1 = ZSTD_compress(z, zcap, raw.data, cut, 3);
    size_t z2 = ZSTD_compress(z + z1, zcap - z1, raw.data + cut, raw.len - cut, 3);
    CHECK(!ZSTD_isError(z1) && !ZSTD_isError(z2));
    p = read_ok(z, z1 + z2);
    if (p && want) {
        char *got = describe(p);
        CHECK(strcmp(got, want) == 0);
        free(got);
    }
    ppk_pprof_free(p);
    CHECK_READ_FAILS(z, z1 + z2 - 2, NULL, PPK_EFORMAT, "zstd: the input ends inside a frame");
    memcpy(z + z1 + z2, "garbage!", 8);
    CHECK_READ_FAILS(z, z1 + z2 + 8, NULL, PPK_EFORMAT, "zstd at byte ");
    free(z);
    free(want);
    ppk_bytes_free(&raw);
    ppk_profile_free(prof);
}

/* A small input that decompresses to much more than the limit stops at the limit. */
static void test_decompression_bomb(void) {
    size_t big = 64u << 20;
    uint8_t *zeros = calloc(1, big);
    ppk_bytes g = gzip_of(zeros, big);
    size_t zcap = ZSTD_compressBound(big);
    uint8_t *z = malloc(zcap);
    size_t zl = ZSTD_compress(z, zcap, zeros, big, 1);
    free(zeros);
    CHECK(g.len < 100000 && zl < 100000);
    ppk_read_options o = {1u << 20, 0, {0}};
    CHECK_READ_FAILS(g.data, g.len, &o, PPK_ETOOBIG,
                     "gzip: the profile decompresses to more than 1048576 bytes");
    CHECK_READ_FAILS(z, zl, &o, PPK_ETOOBIG,
                     "zstd: the profile decompresses to more than 1048576 bytes");
    /* Under the default limit it decompresses, and is then a malformed profile (zeros
     * are field number 0). */
    CHECK_READ_FAILS(z, zl, NULL, PPK_EFORMAT, "Profile at byte 0: field number 0");
    /* A raw input over the limit. */
    o.max_decoded_bytes = 16;
    CHECK_READ_FAILS(g.data, 17, &o, PPK_EFORMAT, "gzip");
    uint8_t raw[17] = {0x32, 0x00, 0x32, 13};
    CHECK_READ_FAILS(raw, 17, &o, PPK_ETOOBIG, "the profile has 17 bytes, over max_decoded_bytes (16)");
    free(g.data);
    free(z);
}

static void test_max_memory(void) {
    ppk_profile *prof = feature_profile();
    ppk_bytes b;
    ppk_encode_options eo = {PPK_CODEC_GZIP, 0, T0, T0 + 1};
    CHECK_EQ_INT(ppk_profile_encode(prof, &eo, &b), 0);
    ppk_read_options o = {0, 1024, {0}};
    CHECK_READ_FAILS(b.data, b.len, &o, PPK_ETOOBIG, "would pass max_memory (1024 bytes");
    o.max_memory = 2500; /* enough for the inflate state, not for everything */
    CHECK_READ_FAILS(b.data, b.len, &o, PPK_ETOOBIG, "max_memory");
    o.max_memory = 1 << 20;
    ppk_pprof *p = NULL;
    CHECK_EQ_INT(ppk_pprof_read(b.data, b.len, &o, &p, NULL, 0), 0);
    ppk_pprof_free(p);
    ppk_bytes_free(&b);
    ppk_profile_free(prof);
}

static void test_arguments(void) {
    ppk_pprof *p = (ppk_pprof *)1;
    CHECK_EQ_INT(ppk_pprof_read("x", 1, NULL, NULL, NULL, 0), PPK_EINVAL);
    CHECK_EQ_INT(ppk_pprof_read(NULL, 1, NULL, &p, NULL, 0), PPK_ENULL);
    CHECK(p == NULL);
    ppk_read_options o;
    memset(&o, 0, sizeof o);
    o.allocator.alloc = (void *(*)(void *, size_t))1;
    CHECK_EQ_INT(ppk_pprof_read("x", 1, &o, &p, NULL, 0), PPK_EINVAL);
    /* A message is cut to err_len - 1 bytes and NUL-terminated. */
    char small[8];
    CHECK_EQ_INT(ppk_pprof_read("\x32\x05", 2, NULL, &p, small, sizeof small), PPK_EFORMAT);
    CHECK(strcmp(small, "Profile") == 0);
    ppk_pprof_free(NULL);
}

/* ---- allocation failures ------------------------------------------------------------ */
/* Failing the Nth allocation, N = 1, 2, ... until the read succeeds: each failure is a
 * clean PPK_ENOMEM with nothing left allocated; then the result is the same. */
static void test_allocation_failures(void) {
    ppk_profile *prof = feature_profile();
    const ppk_codec codecs[3] = {PPK_CODEC_NONE, PPK_CODEC_GZIP, PPK_CODEC_ZSTD};
    for (int c = 0; c < 3; c++) {
        ppk_bytes b;
        ppk_encode_options eo = {codecs[c], 0, T0, T0 + 1};
        CHECK_EQ_INT(ppk_profile_encode(prof, &eo, &b), 0);
        ppk_pprof *p0 = read_ok(b.data, b.len);
        char *want = p0 ? describe(p0) : NULL;
        ppk_pprof_free(p0);
        long n;
        for (n = 1; n < 1000; n++) {
            test_alloc f = {.fail_at = n};
            ppk_read_options o = {0, 0, test_allocator(&f)};
            ppk_pprof *p = NULL;
            int rc = ppk_pprof_read(b.data, b.len, &o, &p, g_err, sizeof g_err);
            if (rc == 0) {
                char *got = describe(p);
                CHECK(want && strcmp(got, want) == 0);
                free(got);
                ppk_pprof_free(p);
                CHECK_EQ_INT(f.outstanding, 0);
                break;
            }
            CHECK_EQ_INT(rc, PPK_ENOMEM);
            CHECK(p == NULL && g_err[0] != 0);
            CHECK_EQ_INT(f.outstanding, 0);
        }
        CHECK(n > 3 && n < 1000); /* it did fail, then succeed */
        free(want);
        ppk_bytes_free(&b);
    }
    ppk_profile_free(prof);
}

int main(void) {
    RUN(test_round_trip_every_codec);
    RUN(test_agrees_with_independent_decoder);
    RUN(test_fields_by_hand);
    RUN(test_packed_and_unpacked);
    RUN(test_malformed_wire);
    RUN(test_malformed_references);
    RUN(test_compressed_input);
    RUN(test_decompression_bomb);
    RUN(test_max_memory);
    RUN(test_arguments);
    RUN(test_allocation_failures);
    return check_summary();
}
