/*
 * ppk-gen-fixture - writes pprof profiles of precisely known content, for the
 * independent-decoder test (tests/test_decode.sh and tests/check_pprof.py).
 *
 * Usage: ppk-gen-fixture OUTDIR
 *
 * Writes, with fixed start/end times so the bytes are deterministic:
 *   OUTDIR/small.pb, small.pb.gz, small.pb.zst  the "small" profile below, raw / gzip / zstd
 *   OUTDIR/edge.pb                              edge cases of the encoding (gen_edge)
 *   OUTDIR/reset.pb                             the window after a reset (gen_reset)
 *   OUTDIR/w1.pb, w1.pb.gz                      the first 20,000 samples of W1 (steady)
 *
 * The small profile exercises every feature that shows in the output: two sample types
 * and a period, frames with names, system names, files, lines and a mapping with a build
 * id, an unsymbolized native frame, string and numeric labels (one with a unit), the same
 * labels pushed in three orders (one aggregated sample), timestamped samples (kept one by
 * one, with "end_timestamp_ns"), an endpoint for a "local root span id" (replaced once),
 * invalid UTF-8 (U+FFFD), an over-long string (cut at a character boundary), a stack
 * deeper than max_frames (leaf-most frames plus "<N frames omitted>"), and one
 * proportional and one Poisson upscaling rule. tests/check_pprof.py holds the same
 * description, written independently: change both together.
 */
#include <pprofkit.h>

#include "../bench/w1.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define START_NS INT64_C(1700000000000000000)
#define END_NS (START_NS + INT64_C(60000000000))
#define W1_FIXTURE_SAMPLES 20000u

static const char *g_outdir;

static void die(const char *what, int rc) {
    fprintf(stderr, "ppk-gen-fixture: %s: %s (%d)\n", what, ppk_strerror(rc), rc);
    exit(1);
}

#define TRY(call)                                                                          \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ != 0) die(#call, rc_);                                                     \
    } while (0)

static void write_file(const char *name, const ppk_bytes *b) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_outdir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(b->data, 1, b->len, f) != b->len || fclose(f) != 0) {
        fprintf(stderr, "ppk-gen-fixture: writing %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

static void encode_to(ppk_profile *p, ppk_codec codec, int level, const char *name) {
    ppk_encode_options opt = {codec, level, START_NS, END_NS};
    ppk_bytes out = {0};
    TRY(ppk_profile_encode(p, &opt, &out));
    write_file(name, &out);
    ppk_bytes_free(&out);
}

/* A sample from the parts below. */
static void add(ppk_profile *p, const ppk_frame *const *stack, size_t n_frames,
                const ppk_label *labels, size_t n_labels, int64_t v0, int64_t v1,
                int64_t ts) {
    ppk_frame frames[16];
    for (size_t i = 0; i < n_frames; i++) frames[i] = *stack[i];
    int64_t values[2] = {v0, v1};
    ppk_sample_data s = {frames, n_frames, labels, n_labels, values, 2, ts};
    TRY(ppk_profile_add(p, &s));
}

static void gen_small(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("alloc-samples"), PPK_STR("count")};
    cfg.sample_types[1] = (ppk_value_type){PPK_STR("alloc-space"), PPK_STR("bytes")};
    cfg.n_sample_types = 2;
    cfg.period_type = (ppk_value_type){PPK_STR("space"), PPK_STR("bytes")};
    cfg.period = 524288;
    cfg.max_frames = 4;
    cfg.max_string_len = 64;

    ppk_profile *p = NULL;
    TRY(ppk_profile_create(&cfg, &p));
    ppk_profile_reset(p, START_NS);

    /* Rules, in this order: ValueError samples x5 (10 real of 2 sampled), then Poisson on
     * every sample (sum = alloc-space, count = alloc-samples, one sample per 512 KiB). */
    size_t both[2] = {0, 1};
    TRY(ppk_profile_add_upscaling_proportional(p, both, 2, PPK_STR("exception type"),
                                               PPK_STR("ValueError"), 2, 10));
    TRY(ppk_profile_add_upscaling_poisson(p, both, 2, PPK_STR(""), PPK_STR(""), 1, 0,
                                          524288));

    static const ppk_mapping map = {0x400000, 0x500000, 0x1000, PPK_STR("/usr/bin/app"),
                                    PPK_STR("deadbeefcafe0123")};
    /* Built with transient copies of strings to also exercise G1 (nothing is kept). */
    const ppk_frame fa = {PPK_STR("alloc_buffer"), PPK_STR("_Z12alloc_bufferm"),
                          PPK_STR("/src/buffer.c"), 100, 123, 0x401234, &map};
    const ppk_frame fb = {PPK_STR("parse_request"), PPK_STR(""), PPK_STR("/src/server.c"),
                          40, 45, 0x402000, &map};
    const ppk_frame fc = {PPK_STR("main"), PPK_STR(""), PPK_STR("/src/main.c"), 0, 7, 0,
                          NULL};
    const ppk_frame fd = {PPK_STR("handler"), PPK_STR(""), PPK_STR("/srv/app.py"), 0, 20, 0,
                          NULL};
    const ppk_frame fn = {PPK_STR(""), PPK_STR(""), PPK_STR(""), 0, 0, 0x403abc, &map};

    const ppk_frame *s1[] = {&fa, &fb, &fc};
    const ppk_frame *s2[] = {&fd, &fc};
    const ppk_frame *s3[] = {&fn, &fb, &fc};
    const ppk_frame *deep[] = {&fd, &fa, &fb, &fc, &fd, &fa}; /* 6 > max_frames 4 */

    /* The same three labels in three orders: one sample [4, 4500]. */
    const ppk_label la = {PPK_STR("thread name"), 0, PPK_STR("main"), 0, PPK_STR("")};
    const ppk_label lb = {PPK_STR("thread id"), 1, PPK_STR(""), 7, PPK_STR("")};
    const ppk_label lc = {PPK_STR("request size"), 1, PPK_STR(""), 4096, PPK_STR("bytes")};
    const ppk_label o1[] = {la, lb, lc}, o2[] = {lc, la, lb}, o3[] = {lb, lc, la};
    add(p, s1, 3, o1, 3, 1, 1000, 0);
    add(p, s1, 3, o2, 3, 2, 3000, 0);
    add(p, s1, 3, o3, 3, 1, 500, 0);

    /* Same stack, no labels: its own sample [1, 100]. */
    add(p, s1, 3, NULL, 0, 1, 100, 0);

    /* ValueError: scaled x5 by the first rule only. */
    const ppk_label ve[] = {{PPK_STR("exception type"), 0, PPK_STR("ValueError"), 0,
                             PPK_STR("")}};
    add(p, s2, 2, ve, 1, 2, 64, 0);
    add(p, s2, 2, ve, 1, 1, 32, INT64_C(1700000000123456789));
    add(p, s2, 2, ve, 1, 1, 32, INT64_C(1700000000123456789)); /* kept apart too */

    /* Endpoints: 12345 registered twice (the second wins), 777 never used. */
    TRY(ppk_profile_set_endpoint(p, 12345, PPK_STR("GET /old")));
    TRY(ppk_profile_set_endpoint(p, 12345, PPK_STR("GET /users/:id")));
    TRY(ppk_profile_set_endpoint(p, 777, PPK_STR("POST /unused")));
    const ppk_label span[] = {{PPK_STR("local root span id"), 1, PPK_STR(""), 12345,
                               PPK_STR("")},
                              {PPK_STR("span id"), 1, PPK_STR(""), 999, PPK_STR("")}};
    add(p, s3, 3, span, 2, 1, 2048, 0);
    /* A sample that already has "trace endpoint" keeps its own. */
    const ppk_label span2[] = {{PPK_STR("trace endpoint"), 0, PPK_STR("custom"), 0,
                                PPK_STR("")},
                               {PPK_STR("local root span id"), 1, PPK_STR(""), 12345,
                                PPK_STR("")}};
    add(p, s3, 3, span2, 2, 1, 1024, 0);

    /* Invalid UTF-8: 0xff and 0xfe each become U+FFFD; also a truncated sequence. */
    const ppk_label bad[] = {{PPK_STR("task name"), 0, PPK_STR("bad\xff\xfeutf8\xc3"), 0,
                              PPK_STR("")}};
    add(p, s2, 2, bad, 1, 1, 10, 0);

    /* Over-long: "x" then 50 two-byte characters (101 bytes); max 64 cuts it to 63. */
    char longs[128];
    size_t n = 0;
    longs[n++] = 'x';
    for (int i = 0; i < 50; i++) {
        longs[n++] = (char)0xc3;
        longs[n++] = (char)0xa9;
    }
    char *heap = malloc(n);
    if (!heap) die("malloc", PPK_ENOMEM);
    memcpy(heap, longs, n);
    const ppk_label lng[] = {{PPK_STR("comment"), 0, {heap, n}, 0, PPK_STR("")}};
    add(p, s2, 2, lng, 1, 1, 20, 0);
    memset(heap, 'Z', n); /* G1: the profile must have copied it */
    free(heap);

    /* Too deep: keeps fd, fa, fb and adds "<3 frames omitted>". */
    add(p, deep, 6, NULL, 0, 1, 30, 0);

    /* A zero count: Poisson leaves it as it is. */
    const ppk_label ke[] = {{PPK_STR("exception type"), 0, PPK_STR("KeyError"), 0,
                             PPK_STR("")}};
    add(p, s1, 3, ke, 1, 0, 777, 0);

    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    printf("small: added %llu aggregated %llu timestamped %llu strings %llu "
           "utf8_repaired %llu truncated %llu stacks_truncated %llu\n",
           (unsigned long long)st.samples_added, (unsigned long long)st.samples_aggregated,
           (unsigned long long)st.samples_timestamped, (unsigned long long)st.strings,
           (unsigned long long)st.strings_utf8_repaired,
           (unsigned long long)st.strings_truncated,
           (unsigned long long)st.stacks_truncated);

    encode_to(p, PPK_CODEC_NONE, 0, "small.pb");
    encode_to(p, PPK_CODEC_GZIP, 0, "small.pb.gz");
    encode_to(p, PPK_CODEC_ZSTD, 0, "small.pb.zst");
    ppk_profile_free(p);
}

/* Adds a sample and returns the library's code (for the refusals below). */
static int add_raw(ppk_profile *p, const ppk_frame *frames, size_t n_frames,
                   const ppk_label *labels, size_t n_labels, const int64_t *values,
                   size_t n_values) {
    ppk_sample_data s = {frames, n_frames, labels, n_labels, values, n_values, 0};
    return ppk_profile_add(p, &s);
}

static void expect_refused(int rc, int want, const char *what) {
    if (rc != want) {
        fprintf(stderr, "ppk-gen-fixture: %s: got %d (%s), expected %d (%s)\n", what, rc,
                ppk_strerror(rc), want, ppk_strerror(want));
        exit(1);
    }
}

/*
 * edge.pb: one sample type, no period. Two lines of one function (one function, two
 * locations); one name in two files (two functions); a negative value; a sum that
 * saturates at INT64_MAX; a negative numeric label with a unit; an address and mapping
 * at the top of the address space. Refused samples (duplicate key, wrong value count,
 * reserved key, string span id) leave no trace: none of their strings is in the output.
 */
static void gen_edge(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.n_sample_types = 1;
    ppk_profile *p = NULL;
    TRY(ppk_profile_create(&cfg, &p));
    ppk_profile_reset(p, START_NS);

    const ppk_mapping hi = {UINT64_C(0xffffffffff000000), UINT64_C(0xffffffffffffffff), 0,
                            PPK_STR("[vdso]"), PPK_STR("")};
    const ppk_frame g10 = {PPK_STR("g"), PPK_STR(""), PPK_STR("g.py"), 1, 10, 0, NULL};
    const ppk_frame g11 = {PPK_STR("g"), PPK_STR(""), PPK_STR("g.py"), 1, 11, 0, NULL};
    const ppk_frame da = {PPK_STR("dup"), PPK_STR(""), PPK_STR("a.py"), 0, 1, 0, NULL};
    const ppk_frame db = {PPK_STR("dup"), PPK_STR(""), PPK_STR("b.py"), 0, 1, 0, NULL};
    const ppk_frame top = {PPK_STR("vdso_fn"), PPK_STR(""), PPK_STR(""), 0, 0,
                           UINT64_C(0xfffffffffffffff0), &hi};

    const ppk_frame s_g[] = {g10, g11};
    const ppk_frame s_dup[] = {da, db};
    const ppk_frame s_top[] = {top};
    int64_t v;
    v = 5;
    TRY(add_raw(p, s_g, 2, NULL, 0, &v, 1));
    v = -7;
    TRY(add_raw(p, s_dup, 2, NULL, 0, &v, 1));
    const ppk_label temp[] = {{PPK_STR("temperature"), 1, PPK_STR(""), -42,
                               PPK_STR("celsius")}};
    v = INT64_MAX - 1;
    TRY(add_raw(p, s_top, 1, temp, 1, &v, 1));
    v = 10;
    TRY(add_raw(p, s_top, 1, temp, 1, &v, 1)); /* saturates at INT64_MAX */

    /* Refusals: each with strings of its own that must not reach the output. */
    const ppk_frame r1[] = {{PPK_STR("refused_dup_fn"), PPK_STR(""), PPK_STR("r1.py"), 0, 1,
                             0, NULL}};
    const ppk_label dup[] = {{PPK_STR("refused-key"), 0, PPK_STR("refused-a"), 0, PPK_STR("")},
                             {PPK_STR("refused-key"), 0, PPK_STR("refused-b"), 0, PPK_STR("")}};
    v = 1;
    expect_refused(add_raw(p, r1, 1, dup, 2, &v, 1), PPK_EDUPLABEL, "duplicate label key");
    const ppk_frame r2[] = {{PPK_STR("refused_values_fn"), PPK_STR(""), PPK_STR("r2.py"), 0,
                             1, 0, NULL}};
    int64_t two[2] = {1, 2};
    expect_refused(add_raw(p, r2, 1, NULL, 0, two, 2), PPK_EVALUES, "two values for one type");
    const ppk_frame r3[] = {{PPK_STR("refused_reserved_fn"), PPK_STR(""), PPK_STR("r3.py"),
                             0, 1, 0, NULL}};
    const ppk_label res[] = {{PPK_STR("end_timestamp_ns"), 1, PPK_STR(""), 5, PPK_STR("")}};
    expect_refused(add_raw(p, r3, 1, res, 1, &v, 1), PPK_ERESERVED, "reserved label key");
    const ppk_frame r4[] = {{PPK_STR("refused_span_fn"), PPK_STR(""), PPK_STR("r4.py"), 0, 1,
                             0, NULL}};
    const ppk_label sp[] = {{PPK_STR("local root span id"), 0, PPK_STR("refused-span"), 0,
                             PPK_STR("")}};
    expect_refused(add_raw(p, r4, 1, sp, 1, &v, 1), PPK_ESPANID, "string span id");

    encode_to(p, PPK_CODEC_NONE, 0, "edge.pb");
    ppk_profile_free(p);
}

/*
 * reset.pb: a window filled, encoded and reset; what it held must be gone from the next
 * one (samples, strings, endpoints) while the upscaling rule (x3 for every sample) stays.
 */
static void gen_reset(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.n_sample_types = 1;
    cfg.period_type = (ppk_value_type){PPK_STR("cpu"), PPK_STR("nanoseconds")};
    cfg.period = 1000;
    ppk_profile *p = NULL;
    TRY(ppk_profile_create(&cfg, &p));
    size_t idx0 = 0;
    TRY(ppk_profile_add_upscaling_proportional(p, &idx0, 1, PPK_STR(""), PPK_STR(""), 1, 3));

    const ppk_frame old_fr[] = {{PPK_STR("old_fn"), PPK_STR(""), PPK_STR("old.py"), 0, 1, 0,
                                 NULL}};
    const ppk_label old_lb[] = {{PPK_STR("old-key"), 0, PPK_STR("old-value"), 0, PPK_STR("")},
                                {PPK_STR("local root span id"), 1, PPK_STR(""), 5,
                                 PPK_STR("")}};
    int64_t v = 100;
    TRY(ppk_profile_set_endpoint(p, 5, PPK_STR("GET /before-reset")));
    TRY(add_raw(p, old_fr, 1, old_lb, 2, &v, 1));
    ppk_bytes out = {0};
    TRY(ppk_profile_encode(p, NULL, &out));
    ppk_bytes_free(&out);
    ppk_profile_reset(p, START_NS);

    const ppk_frame new_fr[] = {{PPK_STR("new_fn"), PPK_STR(""), PPK_STR("new.py"), 0, 2, 0,
                                 NULL}};
    const ppk_label new_lb[] = {{PPK_STR("local root span id"), 1, PPK_STR(""), 5,
                                 PPK_STR("")}};
    v = 7;
    TRY(add_raw(p, new_fr, 1, new_lb, 1, &v, 1));
    encode_to(p, PPK_CODEC_NONE, 0, "reset.pb");
    ppk_profile_free(p);
}

static void gen_w1(void) {
    struct w1 w;
    if (w1_init(&w) != 0) die("w1_init", PPK_ENOMEM);
    ppk_profile_config cfg;
    w1_config(&cfg);
    ppk_profile *p = NULL;
    TRY(ppk_profile_create(&cfg, &p));
    ppk_profile_reset(p, START_NS);
    struct w1_sample s;
    for (uint32_t i = 0; i < W1_FIXTURE_SAMPLES; i++)
        TRY(ppk_profile_add(p, w1_next(&w, W1_STEADY, &s)));
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    printf("w1: added %llu aggregated %llu strings %llu locations %llu stacks %llu\n",
           (unsigned long long)st.samples_added, (unsigned long long)st.samples_aggregated,
           (unsigned long long)st.strings, (unsigned long long)st.locations,
           (unsigned long long)st.stacks);
    encode_to(p, PPK_CODEC_NONE, 0, "w1.pb");
    encode_to(p, PPK_CODEC_GZIP, 6, "w1.pb.gz");
    ppk_profile_free(p);
    w1_free(&w);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
        return 2;
    }
    g_outdir = argv[1];
    gen_small();
    gen_edge();
    gen_reset();
    gen_w1();
    return 0;
}
