/*
 * test_alloc_fail.c - every allocation failure is a clean PPK_ENOMEM.
 *
 * A scenario exercises the whole single-threaded API (create, samples with mappings,
 * labels, timestamps and deep stacks, endpoints, upscaling rules, encode with each
 * codec, reset) through an allocator that fails on the Nth allocation, for N = 1, 2, ...
 * until the scenario runs through. Two modes:
 *   - sticky: from the Nth on, every allocation fails. The failing call must return
 *     PPK_ENOMEM, and after freeing everything no byte may be outstanding.
 *   - once: only the Nth allocation fails. The failing call is retried and must then
 *     succeed; since a failed call leaves the profile unchanged, the final encoded bytes
 *     must equal those of a run without failures.
 */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test_alloc.h"
#include "pprofkit.h"

/* Runs `call`; in "once" mode a PPK_ENOMEM is retried once. Any other outcome ends the
 * scenario with that code. */
#define STEP(call)                                                                         \
    do {                                                                                   \
        int rc_ = (call);                                                                  \
        if (rc_ == PPK_ENOMEM && !f->sticky && f->failures) rc_ = (call);                  \
        if (rc_ != 0) {                                                                    \
            result = rc_;                                                                  \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)

/* The scenario. Returns 0 or the first error; *final gets the last encoding. */
static int scenario(test_alloc *f, ppk_bytes *final) {
    int result = 0;
    ppk_profile *p = NULL;
    ppk_bytes gz = {0}, zs = {0};
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("alloc-samples"), PPK_STR("count")};
    cfg.sample_types[1] = (ppk_value_type){PPK_STR("alloc-space"), PPK_STR("bytes")};
    cfg.n_sample_types = 2;
    cfg.period_type = (ppk_value_type){PPK_STR("space"), PPK_STR("bytes")};
    cfg.period = 524288;
    cfg.max_frames = 6;
    cfg.chunk_size = 4096; /* small chunks: many allocations to fail */
    cfg.keep_bytes = 8192;
    cfg.allocator = test_allocator(f);
    STEP(ppk_profile_create(&cfg, &p));

    size_t idx[] = {0, 1};
    STEP(ppk_profile_add_upscaling_poisson(p, idx, 2, PPK_STR(""), PPK_STR(""), 1, 0, 524288));
    STEP(ppk_profile_add_upscaling_proportional(p, idx, 1, PPK_STR("kind"), PPK_STR("big"), 1,
                                                3));
    ppk_mapping m = {0x400000, 0x500000, 0, PPK_STR("/usr/bin/app"), PPK_STR("abc123")};
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < 60; k++) {
            char names[10][32], task[32];
            ppk_frame fr[10];
            memset(fr, 0, sizeof fr);
            int depth = 3 + k % 8; /* some deeper than max_frames */
            for (int i = 0; i < depth; i++) {
                snprintf(names[i], sizeof names[i], "fn_%d_%d", (k + i) % 13, i);
                fr[i].name = ppk_cstr(names[i]);
                fr[i].filename = PPK_STR("/src/app.c");
                fr[i].line = 10 + i;
                fr[i].address = 0x401000u + (unsigned)(i * 16);
                fr[i].mapping = i % 2 ? &m : NULL;
            }
            snprintf(task, sizeof task, "task-%d", k);
            ppk_label lb[4] = {
                {PPK_STR("task name"), 0, ppk_cstr(task), 0, {0}},
                {PPK_STR("thread id"), 1, {0}, 1000 + k % 3, {0}},
                {PPK_STR("kind"), 0, k % 4 ? PPK_STR("small") : PPK_STR("big"), 0, {0}},
                {PPK_STR("local root span id"), 1, {0}, 1 + k % 5, {0}},
            };
            int64_t v[2] = {1, 1000 + k};
            ppk_sample_data s = {fr, (size_t)depth, lb, 4, v, 2,
                                 k % 7 == 0 ? 1700000000000000000 + k : 0};
            STEP(ppk_profile_add(p, &s));
            if (k % 10 == 0) {
                char ep[32];
                snprintf(ep, sizeof ep, "GET /r/%d", k);
                STEP(ppk_profile_set_endpoint(p, 1 + (uint64_t)(k % 5), ppk_cstr(ep)));
                STEP(ppk_profile_add_endpoint_count(p, ppk_cstr(ep), 2));
            }
        }
        ppk_encode_options o = {PPK_CODEC_GZIP, 0, 1000, 2000};
        STEP(ppk_profile_encode(p, &o, &gz));
        o.codec = PPK_CODEC_ZSTD;
        STEP(ppk_profile_encode(p, &o, &zs));
        ppk_bytes_free(&gz);
        ppk_bytes_free(&zs);
        if (round == 0) ppk_profile_reset(p, 1000);
    }
    ppk_encode_options raw = {PPK_CODEC_NONE, 0, 1000, 2000};
    STEP(ppk_profile_encode(p, &raw, final));
done:
    ppk_bytes_free(&gz);
    ppk_bytes_free(&zs);
    ppk_profile_free(p);
    return result;
}

/* A copy of `b` in malloc'ed memory, so it outlives the failing allocator's checks. */
static uint8_t *take(ppk_bytes *b, size_t *len) {
    *len = b->len;
    uint8_t *c = malloc(b->len ? b->len : 1);
    memcpy(c, b->data, b->len);
    ppk_bytes_free(b);
    return c;
}

static void test_sticky_failures_are_clean(void) {
    long n;
    for (n = 1;; n++) {
        test_alloc f = {.fail_at = n, .sticky = 1};
        ppk_bytes out = {0};
        int rc = scenario(&f, &out);
        ppk_bytes_free(&out);
        CHECK_EQ_INT(f.outstanding, 0);
        if (f.failures == 0) {
            CHECK_EQ_INT(rc, 0);
            break;
        }
        if (rc != PPK_ENOMEM) {
            fprintf(stderr, "fail_at %ld: rc %d (%s)\n", n, rc, ppk_strerror(rc));
            CHECK_EQ_INT(rc, PPK_ENOMEM);
            break;
        }
    }
    printf("     sticky: %ld allocation points failed cleanly\n", n - 1);
    CHECK(n > 50); /* the scenario really allocates */
}

static void test_single_failure_leaves_no_trace(void) {
    test_alloc ref = {0};
    ppk_bytes out = {0};
    CHECK_EQ_INT(scenario(&ref, &out), 0);
    size_t ref_len;
    uint8_t *ref_bytes = take(&out, &ref_len);
    CHECK_EQ_INT(ref.outstanding, 0);
    long n;
    for (n = 1; n <= ref.count; n++) {
        test_alloc f = {.fail_at = n};
        int rc = scenario(&f, &out);
        if (rc != 0) {
            fprintf(stderr, "fail_at %ld: rc %d (%s)\n", n, rc, ppk_strerror(rc));
            CHECK_EQ_INT(rc, 0);
            ppk_bytes_free(&out);
            break;
        }
        if (out.len != ref_len || memcmp(out.data, ref_bytes, ref_len) != 0) {
            fprintf(stderr, "fail_at %ld: output differs from the run without failure\n", n);
            CHECK(0);
            ppk_bytes_free(&out);
            break;
        }
        ppk_bytes_free(&out);
        CHECK_EQ_INT(f.outstanding, 0);
    }
    printf("     once: %ld allocation points, retried, same bytes\n", n - 1);
    free(ref_bytes);
}

int main(void) {
    RUN(test_sticky_failures_are_clean);
    RUN(test_single_failure_leaves_no_trace);
    return check_summary();
}
