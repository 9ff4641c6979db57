/*
 * test_stack_cache.c - a window's stack cache (src/stack_cache.h): a sample's stack
 * found by the hash of its frame records, then compared byte for byte.
 *
 * The hash is only a hint: two samples with different frames but the same stack_hash
 * (forced here, since a real 64-bit collision cannot be made on purpose) must still get
 * different stacks. The hash must not depend on what the builder's buffer held before
 * (the padding between records is zeroed), and label records pushed between frames
 * must not change which stack a sample gets. Samples with omitted frames are not cached
 * and still resolve to one stack. Frames by function id in 16-byte records are compared
 * against the window's dense copies of them (ppk__frame_val): a frame that differs in
 * its id or its line, a 32-byte record by id, or a label between the frames must still
 * give the right stack. The label set cache (the same table, keyed by labels_hash) is
 * held to the same rules: a forced collision (other labels, fewer or more labels with
 * the same first ones) or the same labels in another order must still give the right
 * set; a set is cached only once all its label records are and the window had it
 * before, never without labels, and at most SETC_PER_SET entries a set (one set's
 * labels pushed in every order).
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "fdict.h"
#include "profile.h"
#include "sbuf.h"

static ppk_str cstr(const char *s) { return (ppk_str){s, strlen(s)}; }

static ppk_profile *make_profile(size_t max_frames) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.n_sample_types = 1;
    cfg.max_frames = max_frames;
    ppk_profile *p = NULL;
    CHECK_EQ_INT(ppk_profile_create(&cfg, &p), 0);
    return p;
}

typedef struct fr {
    const char *name, *file;
    int64_t line;
} fr;

/* A window and a builder's buffer with the same max_frames; `r` the last sample built. */
typedef struct fx {
    ppk_profile *p;
    ppk__mem mem;
    ppk__sbuf sb;
    ppk__recs r;
} fx;

/* Pushes the string label (key, value) into sb. */
static void push_str_label(ppk__sbuf *sb, const char *key, const char *value) {
    ppk_label l;
    memset(&l, 0, sizeof l);
    l.key = cstr(key);
    l.str = cstr(value);
    CHECK_EQ_INT(ppk__sbuf_push_label(sb, &l), 0);
}

/* Gives x's sample one value of 1 and seals it into x->r. */
static void seal_one(fx *x) {
    x->sb.values[0] = 1;
    ppk__sbuf_seal(&x->sb, &x->r);
}

/* Builds a sample of n frames in x's builder (a label after frame `label_after`, or
 * none if it is n or more), one value of 1, sealed into x->r. */
static void build(fx *x, const fr *f, size_t n, size_t label_after) {
    ppk__sbuf *sb = &x->sb;
    ppk__sbuf_clear(sb, SIZE_MAX);
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ_INT(ppk__sbuf_push_simple_frame(sb, cstr(f[i].name),
                                                 cstr(f[i].file), 0, f[i].line),
                     0);
        if (i == label_after) push_str_label(sb, "thread name", "main");
    }
    seal_one(x);
}

static uint64_t stacks(ppk_profile *p) {
    ppk_profile_stats s;
    ppk_profile_stats_get(p, &s);
    return s.stacks;
}

static void fx_init(fx *f, size_t max_frames) {
    f->p = make_profile(max_frames);
    ppk__mem_init(&f->mem, NULL);
    CHECK_EQ_INT(ppk__sbuf_init(&f->sb, &f->mem, 4096, max_frames, 8, 1), 0);
}

static void fx_done(fx *f) {
    ppk__sbuf_destroy(&f->sb);
    ppk_profile_free(f->p);
}

/* Adds x's sample under stack_hash `hash`; the window must then hold `want` stacks. */
static void add_as(fx *x, uint64_t hash, uint64_t want) {
    x->r.stack_hash = hash;
    CHECK_EQ_INT(ppk__profile_add_recs(x->p, &x->r), 0);
    CHECK_EQ_U64(stacks(x->p), want);
}

static const fr A[] = {{"leaf", "a.py", 3}, {"mid", "a.py", 10}, {"main", "main.py", 1}};
static const fr B[] = {{"leaf", "a.py", 3}, {"other", "b.py", 7}, {"main", "main.py", 1}};

/* The same hash for different frames: compared, not merged. */
static void test_forced_collision_is_not_merged(void) {
    fx f;
    fx_init(&f, 64);
    ppk_profile *p = f.p;

    build(&f, A, 3, 3);
    uint64_t hash_a = f.r.stack_hash;
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 1);
    CHECK_EQ_U64(p->sc.n, 1); /* cached */
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 1);
    CHECK_EQ_U64(p->sc.n, 1);

    build(&f, B, 3, 3);
    CHECK(f.r.stack_hash != hash_a);
    add_as(&f, hash_a, 2);
    /* Fewer frames under the same hash: a third stack. */
    build(&f, A, 2, 2);
    add_as(&f, hash_a, 3);
    /* The hash stays A's: A still hits, and B with its own hash is its own stack. */
    build(&f, A, 3, 3);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    build(&f, B, 3, 3);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 3);

    ppk_profile_stats s;
    ppk_profile_stats_get(p, &s);
    CHECK_EQ_U64(s.samples_added, 6);
    CHECK_EQ_U64(s.samples_aggregated, 3); /* A x3, B x2, A[0..1] x1 */

    fx_done(&f);
}

/* Where labels are pushed between frames, and what the buffer held before, do not
 * change the stack; the cache is cleared with the window. */
static void test_hash_is_stable(void) {
    fx f;
    fx_init(&f, 64);
    ppk_profile *p = f.p;

    build(&f, A, 3, 3);
    uint64_t h1 = f.r.stack_hash;
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    /* Fill the buffer with other bytes, then build A again in it. */
    ppk__sbuf_clear(&f.sb, SIZE_MAX);
    memset(f.sb.buf, 0xA5, f.sb.cap);
    build(&f, A, 3, 3);
    CHECK_EQ_U64(f.r.stack_hash, h1);
    /* A label after the first frame: another hash, the same stack. */
    build(&f, A, 3, 0);
    CHECK(f.r.stack_hash != h1);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 1);

    ppk_profile_reset(p, 0);
    CHECK_EQ_U64(p->sc.n, 0);
    build(&f, B, 3, 3);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 1);

    fx_done(&f);
}

/* Frames past max_frames: not cached, one stack every time. */
static void test_omitted_frames_not_cached(void) {
    fx f;
    fx_init(&f, 2);
    ppk_profile *p = f.p;
    for (int i = 0; i < 3; i++) {
        build(&f, A, 3, 3);
        CHECK(f.r.omitted != 0);
        CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    }
    CHECK_EQ_U64(stacks(p), 1);
    CHECK_EQ_U64(p->sc.n, 0);
    fx_done(&f);
}

/* The cache's answer for sample r: its stack id, or PPK_DICT_NONE. */
static uint32_t find(ppk_profile *p, const ppk__recs *r) {
    const uint32_t *e = ppk__stack_cache_find(&p->sc, r->stack_hash);
    return e ? ppk__stack_cache_match(e, &p->frame_recs, p->frame_val, r) : PPK_DICT_NONE;
}

/* Builds a sample of n frames by id in x's builder (one push of them all, or a label
 * after frame `label_after` if it is less than n), one value of 1, sealed into x->r. */
static void build_ids(fx *x, const ppk_id_frame *f, size_t n, size_t label_after) {
    ppk__sbuf *sb = &x->sb;
    ppk__sbuf_clear(sb, SIZE_MAX);
    size_t first = label_after < n ? label_after + 1 : n;
    CHECK_EQ_INT(ppk__sbuf_push_ids(sb, f, first), 0);
    if (first < n) {
        push_str_label(sb, "thread name", "main");
        CHECK_EQ_INT(ppk__sbuf_push_ids(sb, f + first, n - first), 0);
    }
    seal_one(x);
}

/* Frames by id: a hit compares the dense copies; the same hash for other frames (one
 * id, or one line, changed) is not merged; a 32-byte record by id and a label between
 * frames take the record-by-record compare and still find their stack. */
static void test_id_frames(void) {
    fx f;
    fx_init(&f, 64);
    ppk_profile *p = f.p;
    ppk__fdict d;
    CHECK_EQ_INT(ppk__fdict_init(&d, NULL, 64, 1 << 20, 4096, 2), 0);
    p->fdict = &d;
    const char *names[] = {"leaf", "mid", "main", "other"};
    ppk_function_id id[4];
    for (int i = 0; i < 4; i++) {
        ppk_function fn = {cstr(names[i]), {NULL, 0}, cstr("a.py"), 0};
        CHECK_EQ_INT(ppk__fdict_intern(&d, &fn, &id[i]), 0);
    }
    ppk_id_frame a[3] = {{id[0], 3}, {id[1], 10}, {id[2], 1}};
    ppk_id_frame b[3] = {{id[0], 3}, {id[3], 10}, {id[2], 1}}; /* another function */
    ppk_id_frame c[3] = {{id[0], 3}, {id[1], 11}, {id[2], 1}}; /* another line */
    ppk_id_frame wide[3] = {{id[0], 3}, {id[1], -1}, {id[2], 1}}; /* a 32-byte record */

    build_ids(&f, a, 3, 3);
    CHECK(f.r.span_frames_only);
    CHECK_EQ_U64(f.r.span_len, 3 * sizeof(ppk__idrec));
    uint64_t hash_a = f.r.stack_hash;
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 1);
    CHECK_EQ_U64(p->sc.n, 1);
    CHECK_EQ_U64(find(p, &f.r), 0); /* a hit */
    build_ids(&f, b, 3, 3);
    add_as(&f, hash_a, 2);
    build_ids(&f, c, 3, 3);
    add_as(&f, hash_a, 3);
    CHECK_EQ_U64(find(p, &f.r), PPK_DICT_NONE);
    /* A label after the first frame: the records are not back to back. */
    build_ids(&f, a, 3, 0);
    CHECK(!f.r.span_frames_only);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(find(p, &f.r), 0);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 3);
    /* A 32-byte record: cached, then found again, and not A's stack. */
    build_ids(&f, wide, 3, 3);
    CHECK(f.r.span_len > 3 * sizeof(ppk__idrec));
    uint32_t cached = (uint32_t)p->sc.n;
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(p->sc.n, cached + 1);
    CHECK_EQ_U64(find(p, &f.r), 3);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(stacks(p), 4);

    ppk_profile_stats s;
    ppk_profile_stats_get(p, &s);
    CHECK_EQ_U64(s.samples_added, 8);
    CHECK_EQ_U64(s.samples_aggregated, 5); /* A's stack also with the label */
    /* (leaf 3) (mid 10) (main 1) (other 10) (mid 11) (mid -1); four functions. */
    CHECK_EQ_U64(s.locations, 6);
    CHECK_EQ_U64(s.functions, 4);
    p->fdict = NULL;
    fx_done(&f);
    ppk__fdict_destroy(&d);
}

/* Builds a sample of frames A with labels ("thread id" num, "thread name" name, "task
 * name" task), in that order or reversed. */
static void build_labels(fx *x, int64_t num, const char *name, const char *task, int reversed) {
    ppk__sbuf *sb = &x->sb;
    ppk__sbuf_clear(sb, SIZE_MAX);
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ_INT(ppk__sbuf_push_simple_frame(sb, cstr(A[i].name), cstr(A[i].file), 0,
                                                 A[i].line),
                     0);
    ppk_label l[3];
    memset(l, 0, sizeof l);
    l[0].key = PPK_STR("thread id");
    l[0].is_num = 1;
    l[0].num = num;
    l[1].key = PPK_STR("thread name");
    l[1].str = cstr(name);
    l[2].key = PPK_STR("task name");
    l[2].str = cstr(task);
    for (size_t i = 0; i < 3; i++)
        CHECK_EQ_INT(ppk__sbuf_push_label(sb, &l[reversed ? 2 - i : i]), 0);
    seal_one(x);
}

static uint64_t label_sets(ppk_profile *p) {
    ppk_profile_stats s;
    ppk_profile_stats_get(p, &s);
    return s.label_sets;
}

/* The set of sample r in the cache, or PPK_DICT_NONE. */
static uint32_t find_set(ppk_profile *p, const ppk__recs *r) {
    const uint32_t *e = ppk__stack_cache_find(&p->setc, r->labels_hash);
    return e ? ppk__set_cache_match(e, &p->label_recs, r) : PPK_DICT_NONE;
}

/* Label sets: cached once every label record is (their second sighting), then found
 * by one probe; another order of the same labels is the same set; a forced collision
 * (other labels under the same labels_hash: a value of the same length, a number) is
 * compared, not merged; the cache is cleared with the window. */
static void test_label_sets(void) {
    fx f;
    fx_init(&f, 64);
    ppk_profile *p = f.p;

    build_labels(&f, 1001, "Thread-1", "Task-1", 0);
    uint64_t hash_1 = f.r.labels_hash;
    CHECK(hash_1 != 0);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(p->setc.n, 0); /* its records are not cached yet */
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(p->setc.n, 1);
    uint32_t set_1 = find_set(p, &f.r);
    CHECK(set_1 != PPK_DICT_NONE);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(label_sets(p), 1);

    /* The same labels reversed: another hash, the same set. */
    build_labels(&f, 1001, "Thread-1", "Task-1", 1);
    CHECK(f.r.labels_hash != hash_1);
    CHECK_EQ_U64(find_set(p, &f.r), PPK_DICT_NONE);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(label_sets(p), 1);
    CHECK_EQ_U64(find_set(p, &f.r), set_1); /* cached under its own hash too */

    /* Under set 1's hash: a value of the same length, then another number. */
    build_labels(&f, 1001, "Thread-2", "Task-1", 0);
    f.r.labels_hash = hash_1;
    CHECK_EQ_U64(find_set(p, &f.r), PPK_DICT_NONE);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(label_sets(p), 2);
    build_labels(&f, 1002, "Thread-1", "Task-1", 0);
    f.r.labels_hash = hash_1;
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(label_sets(p), 3);
    /* Set 1 is still itself. */
    build_labels(&f, 1001, "Thread-1", "Task-1", 0);
    CHECK_EQ_U64(find_set(p, &f.r), set_1);

    ppk_profile_stats s;
    ppk_profile_stats_get(p, &s);
    CHECK_EQ_U64(s.samples_added, 6);
    CHECK_EQ_U64(s.samples_aggregated, 3); /* one stack, three sets */
    CHECK_EQ_U64(s.labels, 5);             /* 1001 1002 Thread-1 Thread-2 Task-1 */

    ppk_profile_reset(p, 0);
    CHECK_EQ_U64(p->setc.n, 0);
    CHECK_EQ_U64(find_set(p, &f.r), PPK_DICT_NONE);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(label_sets(p), 1);
    fx_done(&f);
}

/* Builds a sample of frames A with labels "a", "b", ... of value "v", the first n of
 * `order` (indices into those keys). */
static void build_keys(fx *x, const int *order, size_t n) {
    static const char *keys[4] = {"a", "b", "c", "d"};
    ppk__sbuf *sb = &x->sb;
    ppk__sbuf_clear(sb, SIZE_MAX);
    CHECK_EQ_INT(ppk__sbuf_push_simple_frame(sb, cstr(A[0].name), cstr(A[0].file), 0, 1), 0);
    for (size_t i = 0; i < n; i++) push_str_label(sb, keys[order[i]], "v");
    seal_one(x);
}

/* Sets whose labels begin like a cached set's, under its hash: {a} and {a, b, c} under
 * {a, b}'s. Samples without labels put nothing in the set cache. */
static void test_label_set_prefixes(void) {
    fx f;
    fx_init(&f, 64);
    ppk_profile *p = f.p;
    static const int abc[3] = {0, 1, 2};
    for (int i = 0; i < 3; i++) {
        build_keys(&f, abc, 0);
        CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    }
    CHECK_EQ_U64(p->setc.n, 0);
    build_keys(&f, abc, 2);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    CHECK_EQ_U64(p->setc.n, 1);
    uint64_t h2 = f.r.labels_hash;
    build_keys(&f, abc, 1);
    f.r.labels_hash = h2;
    CHECK_EQ_U64(find_set(p, &f.r), PPK_DICT_NONE);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    build_keys(&f, abc, 3);
    f.r.labels_hash = h2;
    CHECK_EQ_U64(find_set(p, &f.r), PPK_DICT_NONE);
    CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
    ppk_profile_stats s;
    ppk_profile_stats_get(p, &s);
    CHECK_EQ_U64(s.label_sets, 4); /* {} {a, b} {a} {a, b, c} */
    CHECK_EQ_U64(s.samples_aggregated, 4);
    CHECK_EQ_U64(s.samples_added, 7);
    fx_done(&f);
}

/* One set's four labels pushed in all 24 orders, three times over: one set, and at
 * most SETC_PER_SET cache entries for it. */
static void test_label_set_orders(void) {
    fx f;
    fx_init(&f, 64);
    ppk_profile *p = f.p;
    int order[4];
    for (int round = 0; round < 3; round++) {
        for (int k = 0; k < 24; k++) {
            /* The k-th permutation of 0..3 (factorial base). */
            int left[4] = {0, 1, 2, 3}, m = 4, q = k;
            for (int i = 0; i < 4; i++) {
                int fact = i == 0 ? 6 : i == 1 ? 2 : 1, j = i < 3 ? q / fact : 0;
                if (i < 3) q %= fact;
                order[i] = left[j];
                for (int t = j; t + 1 < m; t++) left[t] = left[t + 1];
                m--;
            }
            build_keys(&f, order, 4);
            CHECK_EQ_INT(ppk__profile_add_recs(p, &f.r), 0);
        }
    }
    CHECK_EQ_U64(label_sets(p), 1);
    CHECK(p->setc.n >= 1 && p->setc.n <= 2);
    ppk_profile_stats s;
    ppk_profile_stats_get(p, &s);
    CHECK_EQ_U64(s.samples_aggregated, 1);
    CHECK_EQ_U64(s.samples_added, 72);
    fx_done(&f);
}

int main(void) {
    RUN(test_forced_collision_is_not_merged);
    RUN(test_hash_is_stable);
    RUN(test_omitted_frames_not_cached);
    RUN(test_id_frames);
    RUN(test_label_sets);
    RUN(test_label_set_prefixes);
    RUN(test_label_set_orders);
    return check_summary();
}
