/*
 * bench_micro - nanoseconds per operation of the small steps of recording: interning a
 * string, adding a sample through ppk_profile_add and through the builder API.
 * (Encoding a window and compressing it are bench_encode's.)
 *
 * Every figure is the median over REPS repetitions (default 11) of one timed pass divided
 * by the operations in the pass, CLOCK_MONOTONIC; min and max of the repetitions are
 * printed beside it. Each repetition starts from a fresh table, profile or recorder.
 *
 *   intern known   ppk__strtab_intern (the window's internal string table, src/strtab.h,
 *                  called directly) of the 4,000 W1 function names and file names, 50
 *                  passes, into a table that already holds them: a hash, one probe, one
 *                  compare, no allocation;
 *   intern new     the same call with 100,000 distinct "Task-{k}" strings (formatted
 *                  before the clock starts) into an empty table: the table grows, the
 *                  bytes are copied into the arena, fresh memory is faulted in;
 *   add known      ppk_profile_add of the first 20,000 W1 steady samples into a profile
 *                  that already holds exactly them: every string, location, stack, label
 *                  set and sample is found (the sample's values are summed);
 *   add new        ppk_profile_add of the same 20,000 samples in their storm form into a
 *                  profile holding their steady form: same stacks and thread labels, a
 *                  new task name (for k >= 100), so a new string, label set and sample;
 *   builder known / new   the same two cases through a recorder and the builder
 *                  (ppk_sample_start, one push per frame, three labels, set_values,
 *                  flush: what bench_w1 does per sample).
 * Add figures subtract the time of the same loop that only produces the samples (the
 * workload's own snprintf), as bench_w1 and bench_encode do. W1 samples have 8..64
 * frames, 36 on average.
 * Nothing is asserted. Usage: bench_micro [REPS] (1..64).
 */
#include <pprofkit.h>

#include "alloc.h"
#include "arena.h"
#include "strtab.h"

#include "bench.h"
#include "w1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPS 64
#define KNOWN_PASSES 50
#define NEW_STRINGS 100000u
#define ADD_SAMPLES 20000u

static void fail(const char *what, int rc) {
    fprintf(stderr, "bench_micro: %s: %s (%d)\n", what, ppk_strerror(rc), rc);
    exit(1);
}

/* One row: per-op figures of REPS timings of `ops` operations each. */
static void row(const char *name, double *ns, int reps, double ops, const char *what) {
    double med = bench_median(ns, (size_t)reps);
    printf("  %-22s %10.1f %10.1f %10.1f  %s\n", name, med / ops, ns[0] / ops,
           ns[reps - 1] / ops, what);
}

/* A string table on its own arena, as a window has (same chunk size, same max_len). */
typedef struct table {
    ppk__mem mem;
    ppk__arena arena;
    ppk__strtab st;
} table;

static void table_init(table *t) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    ppk__mem_init(&t->mem, NULL);
    ppk__arena_init(&t->arena, &t->mem, cfg.chunk_size, 0);
    if (ppk__strtab_init(&t->st, &t->mem, &t->arena, cfg.max_string_len))
        fail("ppk__strtab_init", PPK_ENOMEM);
}

static void table_free(table *t) {
    ppk__strtab_destroy(&t->st);
    ppk__arena_destroy(&t->arena);
}

static void intern_all(table *t, const ppk_str *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (ppk__strtab_intern(&t->st, s[i].ptr, s[i].len) == PPK_DICT_NONE)
            fail("ppk__strtab_intern", PPK_ENOMEM);
}

static void bench_intern(const struct w1 *w, int reps) {
    /* The W1 function strings, names and files interleaved as frames meet them. */
    enum { N_KNOWN = 2 * W1_FUNCTIONS };
    static ppk_str known[N_KNOWN];
    for (uint32_t i = 0; i < W1_FUNCTIONS; i++) {
        known[2 * i] = w->fn_name[i];
        known[2 * i + 1] = w->fn_file[i];
    }
    /* New strings, formatted up front. */
    char *buf = malloc((size_t)NEW_STRINGS * 16);
    ppk_str *fresh = malloc(sizeof(ppk_str) * NEW_STRINGS);
    if (!buf || !fresh) fail("malloc", PPK_ENOMEM);
    for (uint32_t k = 0; k < NEW_STRINGS; k++) {
        int n = snprintf(buf + (size_t)k * 16, 16, "Task-%u", k);
        fresh[k] = (ppk_str){buf + (size_t)k * 16, (size_t)n};
    }

    double t_known[MAX_REPS], t_new[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        table t;
        table_init(&t);
        intern_all(&t, known, N_KNOWN); /* now they are known */
        double t0 = bench_now_ns();
        for (int p = 0; p < KNOWN_PASSES; p++) intern_all(&t, known, N_KNOWN);
        t_known[r] = bench_now_ns() - t0;
        table_free(&t);

        table_init(&t);
        t0 = bench_now_ns();
        intern_all(&t, fresh, NEW_STRINGS);
        t_new[r] = bench_now_ns() - t0;
        table_free(&t);
    }
    row("intern known", t_known, reps, (double)KNOWN_PASSES * N_KNOWN,
        "ppk__strtab_intern, W1 function/file strings, table holds them");
    row("intern new", t_new, reps, NEW_STRINGS,
        "ppk__strtab_intern, 100,000 new \"Task-{k}\" into an empty table");
    free(buf);
    free(fresh);
}

/* Adds the first ADD_SAMPLES samples of variant v: through the builder b when not NULL,
 * else with ppk_profile_add(p). @return the loop's ns. */
static double add_pass(ppk_profile *p, ppk_sample *b, struct w1 *w, enum w1_variant v) {
    struct w1_sample s;
    w1_rewind(w);
    double t0 = bench_now_ns();
    for (uint32_t i = 0; i < ADD_SAMPLES; i++) {
        const ppk_sample_data *d = w1_next(w, v, &s);
        int rc = b ? bench_record(b, d) : ppk_profile_add(p, d);
        if (rc) fail(b ? "builder" : "ppk_profile_add", rc);
    }
    return bench_now_ns() - t0;
}

/* known: steady over steady; new: storm over steady. Through the builder when `builder`. */
static void bench_add(struct w1 *w, int reps, int builder) {
    double t_known[MAX_REPS], t_new[MAX_REPS], gen[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        gen[r] = (bench_w1_gen_ns(w, W1_STEADY, ADD_SAMPLES) +
                  bench_w1_gen_ns(w, W1_STORM, ADD_SAMPLES)) / 2;
        for (int c = 0; c < 2; c++) {
            ppk_profile *p = NULL;
            ppk_recorder *rec = NULL;
            ppk_sample *b = NULL;
            int rc;
            if (builder) {
                ppk_recorder_config cfg;
                ppk_recorder_config_init(&cfg);
                w1_config(&cfg.profile);
                rc = ppk_recorder_create(&cfg, &rec);
                if (!rc) rc = ppk_sample_create(rec, &b);
            } else {
                ppk_profile_config cfg;
                w1_config(&cfg);
                rc = ppk_profile_create(&cfg, &p);
            }
            if (rc) fail("create", rc);
            add_pass(p, b, w, W1_STEADY);
            double t = add_pass(p, b, w, c == 0 ? W1_STEADY : W1_STORM);
            (c == 0 ? t_known : t_new)[r] = t;
            ppk_sample_free(b);
            ppk_recorder_free(rec);
            ppk_profile_free(p);
        }
    }
    double g = bench_median(gen, (size_t)reps);
    for (int r = 0; r < reps; r++) {
        t_known[r] -= g;
        t_new[r] -= g;
    }
    if (builder) {
        row("builder known", t_known, reps, ADD_SAMPLES,
            "ppk_sample_* + flush, 20,000 W1 steady samples already in the window");
        row("builder new", t_new, reps, ADD_SAMPLES,
            "ppk_sample_* + flush, same stacks, new task name: new string/label set/sample");
    } else {
        row("add known", t_known, reps, ADD_SAMPLES,
            "ppk_profile_add, 20,000 W1 steady samples already in the window");
        row("add new", t_new, reps, ADD_SAMPLES,
            "ppk_profile_add, same stacks, new task name: new string/label set/sample");
    }
    printf("  (producing a sample alone: %.0f ns, subtracted above)\n", g / ADD_SAMPLES);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 11;
    if (reps < 1 || reps > MAX_REPS) {
        fprintf(stderr, "usage: bench_micro [REPS 1..%d]\n", MAX_REPS);
        return 2;
    }
    struct w1 w;
    if (w1_init(&w)) fail("w1_init", PPK_ENOMEM);
    printf("bench_micro: ns per operation, median of %d repetitions (min, max beside)\n",
           reps);
    printf("  %-22s %10s %10s %10s  %s\n", "operation", "median ns", "min ns", "max ns",
           "what");
    bench_intern(&w, reps);
    bench_add(&w, reps, 0);
    bench_add(&w, reps, 1);
    w1_free(&w);
    return 0;
}
