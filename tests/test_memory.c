/*
 * test_memory.c - the per-window memory budget (G4): the limit holds, detail degrades,
 * totals are kept, and memory is reused and given back.
 *
 * Windows are filled far past their memory_limit with unique strings and stacks; the
 * window's own accounting must never pass the limit by more than one chunk, and the
 * encoded profile, read back by tests/pprof_read.h (a decoder that shares no code with
 * the library), must hold every value added, with the placeholder where detail was
 * dropped. Run under ASan too, which checks every byte of it.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pprof_read.h"
#include "pprofkit.h"
#include "profile.h" /* the label-record cache, for test_label_seen_once_is_not_cached */

#define LIMIT (1024 * 1024)
#define CHUNK (64 * 1024)

static ppk_profile *make(size_t limit) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.sample_types[1] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.n_sample_types = 2;
    cfg.memory_limit = limit;
    cfg.chunk_size = CHUNK;
    cfg.keep_bytes = 4 * CHUNK;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    return p;
}

static int decode(ppk_profile *p, pr_profile *out) {
    ppk_bytes b;
    ppk_encode_options o = {PPK_CODEC_GZIP, 0, 1000, 2000};
    int rc = ppk_profile_encode(p, &o, &b);
    CHECK_EQ_INT(rc, 0);
    if (rc) return -1;
    rc = pr_parse(b.data, b.len, out);
    ppk_bytes_free(&b);
    CHECK_EQ_INT(rc, 0);
    return rc;
}

static int has_string(const pr_profile *pp, const char *s) {
    for (size_t i = 0; i < pp->nstrings; i++)
        if (pr_streq(pp->strings[i], s)) return 1;
    return 0;
}

static int has_string_prefix(const pr_profile *pp, const char *prefix) {
    size_t n = strlen(prefix);
    for (size_t i = 0; i < pp->nstrings; i++)
        if (pp->strings[i].len >= n && memcmp(pp->strings[i].ptr, prefix, n) == 0) return 1;
    return 0;
}

/* Ten times the limit in unique task names into one window. */
static void test_unique_strings_past_the_limit(void) {
    ppk_profile *p = make(LIMIT);
    static const ppk_frame frames[2] = {
        {PPK_STR("work"), {0}, PPK_STR("app.py"), 0, 10, 0, NULL},
        {PPK_STR("main"), {0}, PPK_STR("app.py"), 0, 1, 0, NULL},
    };
    char task[160];
    memset(task, 'x', sizeof task);
    size_t pushed = 0;
    int64_t total_count = 0, total_wall = 0;
    uint64_t peak_seen = 0;
    int k = 0;
    for (; pushed < 10u * LIMIT; k++) {
        int n = snprintf(task, 40, "task-%d-", k);
        task[n] = 'x'; /* the rest of the 150 bytes stays 'x' */
        ppk_label l[2] = {{PPK_STR("task name"), 0, {task, 150}, 0, {0}},
                          {PPK_STR("thread id"), 1, {0}, k % 4, {0}}};
        int64_t v[2] = {1, 1000 + k % 7};
        ppk_sample_data s = {frames, 2, l, 2, v, 2, 0};
        CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
        total_count += v[0];
        total_wall += v[1];
        pushed += 150;
        ppk_profile_stats st;
        ppk_profile_stats_get(p, &st);
        if (st.memory_bytes > peak_seen) peak_seen = st.memory_bytes;
    }
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    printf("     %d samples, %zu bytes of task names; window peak %llu of limit %d\n", k,
           pushed, (unsigned long long)st.memory_peak_bytes, LIMIT);
    CHECK(st.memory_peak_bytes <= LIMIT + CHUNK);
    CHECK(peak_seen <= LIMIT + CHUNK);
    CHECK_EQ_U64(st.memory_limit, LIMIT);
    CHECK(st.strings_dropped > 0);
    CHECK_EQ_U64(st.samples_added, (uint64_t)k);

    pr_profile pp;
    if (decode(p, &pp) == 0) {
        int ic = pr_type_index(&pp, "samples"), iw = pr_type_index(&pp, "wall-time");
        int64_t count = 0, wall = 0;
        /* Past the limit a sample keeps its stack with "[pprofkit: memory limit]" as
         * its task name, or, when even that label set cannot be made, its values go to
         * the overflow sample (that one frame, no labels): each sample counts 1. */
        int64_t placeholder_count = 0, overflow_count = 0;
        for (size_t i = 0; i < pp.nsamples; i++) {
            const pr_sample *ps = &pp.samples[i];
            count += ps->val[ic];
            wall += ps->val[iw];
            pr_str t = pr_label_str(&pp, ps, "task name");
            if (pr_streq(t, "[pprofkit: memory limit]")) placeholder_count += ps->val[ic];
            const pr_function *leaf = pr_frame_fn(&pp, ps, 0);
            if (ps->nloc == 1 && leaf &&
                pr_streq(pr_string(&pp, leaf->name), "[pprofkit: memory limit]")) {
                CHECK_EQ_INT(ps->nlab, 0);
                overflow_count += ps->val[ic];
            }
        }
        CHECK_EQ_INT(count, total_count); /* no value lost */
        CHECK_EQ_INT(wall, total_wall);
        CHECK(has_string(&pp, "[pprofkit: memory limit]"));
        CHECK_EQ_INT(overflow_count, (int64_t)st.samples_overflowed);
        CHECK(placeholder_count + overflow_count >= (int64_t)st.strings_dropped);
        CHECK(has_string_prefix(&pp, "pprofkit: ")); /* the comments say what degraded */
        CHECK(pp.nstrings < (size_t)k); /* most task names were dropped */
        pr_free(&pp);
    }
    /* After a reset the window is back under its limit and works normally. */
    ppk_profile_reset(p, 0);
    ppk_profile_stats_get(p, &st);
    CHECK(st.memory_bytes <= LIMIT);
    CHECK_EQ_U64(st.strings_dropped, 0);
    ppk_label l = {PPK_STR("task name"), 0, PPK_STR("after"), 0, {0}};
    int64_t v[2] = {1, 1};
    ppk_sample_data s = {frames, 2, &l, 1, v, 2, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    if (decode(p, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 1);
        CHECK(pr_streq(pr_label_str(&pp, &pp.samples[0], "task name"), "after"));
        CHECK(!has_string(&pp, "[pprofkit: memory limit]"));
        pr_free(&pp);
    }
    ppk_profile_free(p);
}

/* Unique stacks past the limit: they become the one "[pprofkit: memory limit]" frame,
 * and their values are all there. */
static void test_unique_stacks_past_the_limit(void) {
    ppk_profile *p = make(LIMIT);
    int64_t total = 0;
    int k;
    for (k = 0; k < 40000; k++) {
        char fn[64];
        snprintf(fn, sizeof fn, "generated_function_%d", k);
        ppk_frame f[3] = {{ppk_cstr(fn), {0}, PPK_STR("gen.py"), 0, k, 0, NULL},
                          {PPK_STR("dispatch"), {0}, PPK_STR("app.py"), 0, 5, 0, NULL},
                          {PPK_STR("main"), {0}, PPK_STR("app.py"), 0, 1, 0, NULL}};
        int64_t v[2] = {1, k};
        ppk_sample_data s = {f, 3, NULL, 0, v, 2, 1700000000000000000 + k};
        CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
        total += k;
    }
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK(st.memory_peak_bytes <= LIMIT + CHUNK);
    CHECK(st.stacks_dropped > 0);
    CHECK(st.timestamps_dropped > 0);
    pr_profile pp;
    if (decode(p, &pp) == 0) {
        int iw = pr_type_index(&pp, "wall-time");
        int64_t wall = 0, in_overflow = 0;
        for (size_t i = 0; i < pp.nsamples; i++) {
            wall += pp.samples[i].val[iw];
            /* The overflow stack has the one frame; other stacks may keep their shape
             * with the placeholder as a new function's name. */
            const pr_function *fn = pr_frame_fn(&pp, &pp.samples[i], 0);
            if (fn && pr_streq(pr_string(&pp, fn->name), "[pprofkit: memory limit]") &&
                pp.samples[i].nloc == 1)
                in_overflow += pp.samples[i].val[iw];
        }
        CHECK_EQ_INT(wall, total);
        CHECK(in_overflow > 0);
        pr_free(&pp);
    }
    ppk_profile_free(p);
}

/* No limit: nothing degrades however much goes in. */
/* Every (stack, label set) pair new while every stack and label set is known: past the
 * limit the samples go to the overflow sample, whose values are theirs. */
static void test_samples_overflow(void) {
    ppk_profile *p = make(256 * 1024);
    char fn[2][16];
    char val[8][2];
    int64_t total = 0;
    for (int round = 0; round < 2; round++) {
        for (int st_i = 0; st_i < 256; st_i++) {
            for (int t = 0; t < 256; t++) {
                if (round == 0 && t > 0 && st_i > 0) continue; /* first: each stack, set once */
                snprintf(fn[0], sizeof fn[0], "f%d", st_i % 16);
                snprintf(fn[1], sizeof fn[1], "g%d", st_i / 16);
                ppk_frame f[2] = {{{fn[0], strlen(fn[0])}, {0}, PPK_STR("a.py"), 0, 1, 0, NULL},
                                  {{fn[1], strlen(fn[1])}, {0}, PPK_STR("a.py"), 0, 2, 0, NULL}};
                ppk_label l[8];
                static const char *keys[8] = {"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"};
                for (int b = 0; b < 8; b++) {
                    val[b][0] = (char)('0' + ((t >> b) & 1));
                    l[b] = (ppk_label){{keys[b], 2}, 0, {val[b], 1}, 0, {0}};
                }
                int64_t v[2] = {1, 1};
                ppk_sample_data s = {f, 2, l, 8, v, 2, 0};
                CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
                total++;
            }
        }
    }
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK(st.samples_overflowed > 0);
    CHECK(st.memory_peak_bytes <= 256 * 1024 + CHUNK + 4096);
    pr_profile pp;
    if (decode(p, &pp) == 0) {
        int ic = pr_type_index(&pp, "samples");
        int64_t count = 0, overflow = 0;
        for (size_t i = 0; i < pp.nsamples; i++) {
            const pr_sample *ps = &pp.samples[i];
            count += ps->val[ic];
            const pr_function *leaf = pr_frame_fn(&pp, ps, 0);
            if (ps->nloc == 1 && leaf &&
                pr_streq(pr_string(&pp, leaf->name), "[pprofkit: memory limit]")) {
                CHECK_EQ_INT(ps->nlab, 0);
                overflow += ps->val[ic];
            }
        }
        CHECK_EQ_INT(count, total);
        CHECK_EQ_INT(overflow, (int64_t)st.samples_overflowed);
        pr_free(&pp);
    }
    ppk_profile_free(p);
}

static void test_no_limit(void) {
    ppk_profile *p = make(SIZE_MAX);
    for (int k = 0; k < 20000; k++) {
        char task[32];
        snprintf(task, sizeof task, "t%d", k);
        ppk_label l = {PPK_STR("task name"), 0, ppk_cstr(task), 0, {0}};
        ppk_frame f = {PPK_STR("f"), {0}, {0}, 0, 1, 0, NULL};
        int64_t v[2] = {1, 1};
        ppk_sample_data s = {&f, 1, &l, 1, v, 2, 0};
        CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    }
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.strings_dropped + st.samples_overflowed + st.labels_dropped, 0);
    CHECK_EQ_U64(st.samples_aggregated, 20000);
    ppk_profile_free(p);
}

static void test_limit_is_validated(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    CHECK_EQ_U64(cfg.memory_limit, 64u * 1024 * 1024);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.n_sample_types = 1;
    cfg.memory_limit = 1000;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_EINVAL);
    CHECK(p == NULL);
}

/* The recorder sums the windows' degradations. */
static void test_recorder_counts_degradations(void) {
    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    cfg.profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.profile.n_sample_types = 1;
    cfg.profile.memory_limit = 256 * 1024;
    cfg.profile.chunk_size = 16 * 1024;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    ppk_sample *s = NULL;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    uint64_t exported = 0;
    for (int w = 0; w < 3; w++) {
        for (int k = 0; k < 5000; k++) {
            char task[48];
            snprintf(task, sizeof task, "task-%d-%d-padding-padding", w, k);
            CHECK_EQ_INT(ppk_sample_start(s), 0);
            CHECK_EQ_INT(ppk_sample_push_frame(s, PPK_STR("f"), PPK_STR("f.py"), 1, 0), 0);
            CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("task name"), ppk_cstr(task)), 0);
            CHECK_EQ_INT(ppk_sample_set_value(s, 0, 1), 0);
            CHECK_EQ_INT(ppk_sample_flush(s), 0);
        }
        ppk_export e;
        CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
        CHECK(e.stats.strings_dropped > 0);
        CHECK(e.stats.memory_peak_bytes <= 256 * 1024 + 16 * 1024);
        pr_profile pp;
        if (pr_parse(e.data.data, e.data.len, &pp) == 0) {
            for (size_t i = 0; i < pp.nsamples; i++) exported += (uint64_t)pp.samples[i].val[0];
            pr_free(&pp);
        }
        ppk_export_free(&e);
    }
    CHECK_EQ_U64(exported, 15000);
    ppk_recorder_stats st;
    ppk_recorder_stats_get(r, &st);
    CHECK(st.strings_dropped > 0);
    CHECK_EQ_U64(st.samples_exported, 15000);
    CHECK(st.window_bytes_peak <= 256 * 1024 + 16 * 1024);
    ppk_sample_free(s);
    ppk_recorder_free(r);
}

/* An allocator that counts what is held (single-threaded tests). */
static size_t g_held, g_held_peak;

static void *counting_alloc(void *opaque, size_t size) {
    (void)opaque;
    void *p = malloc(size);
    if (p) g_held += size;
    if (g_held > g_held_peak) g_held_peak = g_held;
    return p;
}

static void counting_free(void *opaque, void *ptr, size_t size) {
    (void)opaque;
    free(ptr);
    g_held -= size;
}

/* A builder never holds more than builder_max_bytes of scratch (plus its index of 24
 * bytes per max_frames and max_labels and its own ~400 bytes, as documented; growing,
 * the old buffer too), and keeps builder_keep_bytes between samples: frames that do
 * not fit are counted in "<N frames omitted>", a label that does not fit is refused. */
static void test_builder_scratch_limit(void) {
    ppk_recorder_config cfg;
    ppk_recorder_config_init(&cfg);
    cfg.profile.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.profile.n_sample_types = 1;
    cfg.profile.max_frames = 4096;
    cfg.profile.allocator = (ppk_allocator){counting_alloc, counting_free, NULL};
    cfg.builder_keep_bytes = 4096;
    cfg.builder_max_bytes = 8192;
    const size_t fixed = 24 * (4096 + cfg.profile.max_labels) + 512;
    ppk_recorder *r = NULL;
    CHECK_EQ_INT(ppk_recorder_create(&cfg, &r), 0);
    ppk_sample *s = NULL;
    size_t before = g_held;
    g_held_peak = g_held;
    CHECK_EQ_INT(ppk_sample_create(r, &s), 0);
    char name[1000];
    memset(name, 'n', sizeof name);
    CHECK_EQ_INT(ppk_sample_start(s), 0);
    for (int i = 0; i < 20; i++) { /* 20 KB of names */
        name[0] = (char)('a' + i);
        CHECK_EQ_INT(ppk_sample_push_frame(s, (ppk_str){name, sizeof name}, PPK_STR("f.py"),
                                           i, 0),
                     0);
    }
    CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("big"), (ppk_str){name, sizeof name}),
                 PPK_ENOMEM);
    /* What still fits is taken. */
    CHECK_EQ_INT(ppk_sample_push_label_str(s, PPK_STR("small"), PPK_STR("ok")), 0);
    CHECK_EQ_INT(ppk_sample_set_value(s, 0, 7), 0);
    size_t held = g_held - before, peak = g_held_peak - before;
    if (held > 8192 + fixed || peak > 2 * 8192 + fixed)
        fprintf(stderr, "builder holds %zu, peak %zu\n", held, peak);
    CHECK(held > 8192 / 2 && held <= 8192 + fixed);
    CHECK(peak < 2 * 8192 + fixed);
    CHECK_EQ_INT(ppk_sample_flush(s), 0);
    ppk_export e;
    CHECK_EQ_INT(ppk_recorder_export(r, &e), 0);
    pr_profile pp;
    if (pr_parse(e.data.data, e.data.len, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 1);
        size_t n = pp.samples[0].nloc;
        CHECK(n >= 2 && n < 20);
        const pr_function *root = pr_frame_fn(&pp, &pp.samples[0], n - 1);
        char want[64];
        snprintf(want, sizeof want, "<%zu frames omitted>", 20 - (n - 1));
        CHECK(root && pr_streq(pr_string(&pp, root->name), want));
        CHECK_EQ_INT(pp.samples[0].val[0], 7);
        CHECK(pr_streq(pr_label_str(&pp, &pp.samples[0], "small"), "ok"));
        pr_free(&pp);
    }
    ppk_export_free(&e);
    held = g_held;
    ppk_sample_free(s);
    CHECK(held - g_held <= 4096 + fixed); /* what the builder kept after its sample */
    ppk_recorder_free(r);
    CHECK_EQ_U64(g_held, 0);
}

/* ppk_profile_add's sample buffer grows to the size of a large sample's records (512
 * frames of 4 KiB names: 4 MiB) and gives it back before the add returns, keeping its
 * index (24 bytes per max_frames and max_labels), its own few hundred bytes and at most
 * 64 KiB of records, as docs/memory.md says. */
static void test_add_gives_back_a_large_sample(void) {
    ppk_profile *p = make(64 * LIMIT);
    if (!p) return;
    enum { FRAMES = 512, NAME = 4096 };
    char *names = malloc((size_t)FRAMES * NAME);
    ppk_frame *fr = calloc(FRAMES, sizeof *fr);
    CHECK(names && fr);
    if (!names || !fr) goto out;
    for (size_t i = 0; i < FRAMES; i++) {
        char *n = names + i * NAME;
        memset(n, 'a' + (int)(i % 26), NAME);
        int k = snprintf(n, 16, "%zu", i);
        n[k] = '_';
        fr[i].name = (ppk_str){n, NAME};
    }
    const size_t kept = 24 * (512 + 32) + 512 + 64 * 1024; /* the default limits */
    int64_t v[2] = {1, 1};
    ppk_sample_data big = {fr, FRAMES, NULL, 0, v, 2, 0};
    ppk_profile_stats st;
    CHECK_EQ_INT(ppk_profile_add(p, &big), 0);
    ppk_profile_stats_get(p, &st);
    if (st.scratch_bytes > kept) fprintf(stderr, "  scratch after the add: %llu\n",
                                         (unsigned long long)st.scratch_bytes);
    CHECK(st.scratch_bytes <= kept);
    ppk_sample_data small = {fr, 2, NULL, 0, v, 2, 0};
    CHECK_EQ_INT(ppk_profile_add(p, &small), 0);
    ppk_profile_stats_get(p, &st);
    CHECK(st.scratch_bytes <= kept);
    CHECK_EQ_U64(st.stacks_dropped + st.strings_dropped + st.samples_overflowed, 0);
out:
    free(fr);
    free(names);
    ppk_profile_free(p);
}

/* Keys the window adds itself ("end_timestamp_ns", "trace endpoint") still work when
 * the budget is exhausted: the profile stays readable and keeps every value. */
static void keys_at_the_limit(size_t limit) {
    ppk_profile *p = make(limit);
    ppk_frame f = {PPK_STR("f"), {0}, PPK_STR("f.py"), 0, 1, 0, NULL};
    int64_t total = 0;
    for (int k = 0; k < 20000; k++) { /* exhaust the budget with unique strings */
        char task[48];
        snprintf(task, sizeof task, "unique-task-name-%d", k);
        ppk_label l = {PPK_STR("task name"), 0, ppk_cstr(task), 0, {0}};
        int64_t v[2] = {1, 1};
        ppk_sample_data s = {&f, 1, &l, 1, v, 2, 0};
        CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
        total += 1;
    }
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK(st.strings_dropped > 0);
    for (int k = 0; k < 10; k++) {
        ppk_label l = {PPK_STR("local root span id"), 1, {0}, 7, {0}};
        int64_t v[2] = {1, 1};
        ppk_sample_data s = {&f, 1, &l, 1, v, 2, 1700000000000000000 + k};
        CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
        total += 1;
    }
    CHECK_EQ_INT(ppk_profile_set_endpoint(p, 7, PPK_STR("GET /limit")), 0);
    pr_profile pp;
    if (decode(p, &pp) == 0) { /* pr_parse checks every string index */
        int64_t count = 0;
        for (size_t i = 0; i < pp.nsamples; i++) count += pp.samples[i].val[0];
        CHECK_EQ_INT(count, total);
        pr_free(&pp);
    }
    ppk_profile_free(p);
}

static void test_keys_at_the_limit(void) {
    /* Which runs out first, the arena or a table, depends on the limit: try several. */
    for (size_t limit = 256 * 1024; limit < 512 * 1024; limit += 8 * 1024)
        keys_at_the_limit(limit);
}

/* A budget too small for the configuration is refused at create, or works: never a
 * profile with broken ids. */
static void test_small_budgets(void) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.n_sample_types = 6;
    static const char *names[6] = {"a-long-sample-type-name-0", "a-long-sample-type-name-1",
                                   "a-long-sample-type-name-2", "a-long-sample-type-name-3",
                                   "a-long-sample-type-name-4", "a-long-sample-type-name-5"};
    for (int i = 0; i < 6; i++)
        cfg.sample_types[i] = (ppk_value_type){ppk_cstr(names[i]), ppk_cstr(names[5 - i])};
    cfg.period_type = (ppk_value_type){PPK_STR("period-type"), PPK_STR("period-unit")};
    cfg.max_string_len = 60320;
    cfg.memory_limit = 64 * 1024;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_EINVAL); /* 256 KiB chunks: too big */
    cfg.chunk_size = 1024 * 1024 * 1024;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), PPK_EINVAL);
    cfg.chunk_size = 16 * 1024;
    int rc = ppk_profile_create(&cfg, &p);
    CHECK(rc == 0 || rc == PPK_EINVAL);
    if (rc == 0) {
        pr_profile pp;
        if (decode(p, &pp) == 0) {
            CHECK_EQ_U64(pp.nsample_type, 6);
            pr_free(&pp);
        }
        ppk_profile_free(p);
    }
}

/* A label record is cached on its second sighting, not its first: a window of unique
 * task names keeps no cache entry (nor record copy) per name, while a repeated label is
 * found by its record, and the content is the same either way. */
static void test_label_seen_once_is_not_cached(void) {
    ppk_profile *p = make(64 * 1024 * 1024);
    ppk_frame f = {PPK_STR("main"), {0}, PPK_STR("main.py"), 1, 3, 0, NULL};
    int64_t v[2] = {1, 10};
    char task[32];
    ppk_label lb[2] = {{PPK_STR("thread name"), 0, PPK_STR("MainThread"), 0, {0}},
                       {PPK_STR("task name"), 0, {task, 0}, 0, {0}}};
    ppk_sample_data s = {&f, 1, lb, 2, v, 2, 0};
    /* First sighting of both labels: nothing cached. */
    lb[1].str.len = (size_t)snprintf(task, sizeof task, "Task-%d", 0);
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    CHECK_EQ_U64(p->label_recs.n, 0);
    CHECK_EQ_U64(p->labels.n, 2);
    /* 999 new task names: the thread name is cached once (its second sighting), no task
     * name is. */
    for (int k = 1; k < 1000; k++) {
        lb[1].str.len = (size_t)snprintf(task, sizeof task, "Task-%d", k);
        CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    }
    CHECK_EQ_U64(p->label_recs.n, 1);
    CHECK_EQ_U64(p->labels.n, 1001);
    /* Task-7 again: now cached, and found there the third time. */
    lb[1].str.len = (size_t)snprintf(task, sizeof task, "Task-%d", 7);
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    CHECK_EQ_U64(p->label_recs.n, 2);
    CHECK_EQ_INT(ppk_profile_add(p, &s), 0);
    CHECK_EQ_U64(p->label_recs.n, 2);
    CHECK_EQ_U64(p->labels.n, 1001);
    ppk_profile_stats st;
    ppk_profile_stats_get(p, &st);
    CHECK_EQ_U64(st.samples_aggregated, 1000);
    pr_profile pp;
    if (decode(p, &pp) == 0) {
        CHECK_EQ_U64(pp.nsamples, 1000);
        int64_t task7 = 0, total = 0;
        for (size_t i = 0; i < pp.nsamples; i++) {
            total += pp.samples[i].val[0];
            CHECK(pr_streq(pr_label_str(&pp, &pp.samples[i], "thread name"), "MainThread"));
            if (pr_streq(pr_label_str(&pp, &pp.samples[i], "task name"), "Task-7"))
                task7 += pp.samples[i].val[0];
        }
        CHECK_EQ_INT(total, 1002);
        CHECK_EQ_INT(task7, 3);
        pr_free(&pp);
    }
    ppk_profile_free(p);
}

int main(void) {
    RUN(test_unique_strings_past_the_limit);
    RUN(test_unique_stacks_past_the_limit);
    RUN(test_samples_overflow);
    RUN(test_no_limit);
    RUN(test_limit_is_validated);
    RUN(test_recorder_counts_degradations);
    RUN(test_builder_scratch_limit);
    RUN(test_add_gives_back_a_large_sample);
    RUN(test_keys_at_the_limit);
    RUN(test_small_budgets);
    RUN(test_label_seen_once_is_not_cached);
    return check_summary();
}
