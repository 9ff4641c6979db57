/*
 * w1.h - the reference workload W1 ("python-like sampling"), header only.
 *
 * W1 is specified in the shared benchmark notes (bench/W1.md there): all randomness comes
 * from splitmix64 seeded with 42; setup draws 2000 functions (no draws) and 5000 stacks
 * of depth 8..64, leaf first; then each sample draws one stack. Labels: "thread id"
 * (numeric, 1000 + k % 8), "thread name" ("Thread-{k % 8}"), "task name" ("Task-{k}" in
 * the storm variant, "Task-{k % 100}" in the steady one). Values: cpu-time and wall-time
 * of 10000000 ns each; period type ("wall-time", "nanoseconds"), period 10000000.
 *
 * Everything that W1 fixes up front is built once by w1_init(): the function strings,
 * one ppk_frame per function, every stack as function indices (uint16, 360 KB for the
 * 5000 stacks), the eight thread names and the 100 steady task names. Producing a
 * sample costs its draw, the storm task name written in decimal (a profiler has its
 * names in hand: snprintf alone took ~5% of a run by id) and, for the string API, a
 * copy of its stack's frames from the 2000 per-function frames into the caller's
 * w1_sample, so a benchmark measures the library, not the workload. (Kept compact on
 * purpose: one ppk_frame per stack position, 14 MB for W1, made every frame a cache
 * miss of the benchmark's own, about 450 ns per sample counted as the library's.)
 *
 * Samples are produced in order: w1_next() makes sample k = w->k and advances the
 * generator (w1_next_labels() the same without the frames, for callers that push the
 * stack by function id from stack_fn); w1_rewind() goes back to sample 0 with the same
 * draws. The ppk_sample_data
 * filled by w1_next() points into the caller's struct w1_sample (labels, values, task
 * name) and into the struct w1 (frames, thread names): valid until the next w1_next()
 * on the same w1_sample and until w1_free(). Not thread safe; use one struct w1 per
 * thread if several threads need the same stream.
 *
 * Needs only <pprofkit.h> for the ppk_* types; no library call is made.
 */
#ifndef PPK_BENCH_W1_H
#define PPK_BENCH_W1_H

#include <pprofkit.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W1_SEED 42u
#define W1_FUNCTIONS 2000u
#define W1_STACKS 5000u
#define W1_MIN_DEPTH 8u
#define W1_DEPTH_SPAN 57u /* depth = 8 + next() % 57: 8..64 */
#define W1_MAX_DEPTH 64u
#define W1_THREADS 8u
#define W1_STEADY_TASKS 100u
#define W1_SAMPLES 1000000u
#define W1_WINDOW 100000u
#define W1_VALUE 10000000 /* cpu-time and wall-time of every sample, ns */
#define W1_PERIOD 10000000

enum w1_variant { W1_STEADY = 0, W1_STORM = 1 };

struct w1 {
    uint64_t rng;        /* splitmix64 state */
    uint64_t rng_start;  /* state after setup: where sample 0 starts */
    uint64_t k;          /* index of the next sample */
    char *strings;       /* every function name and file name, back to back */
    ppk_str fn_name[W1_FUNCTIONS];
    ppk_str fn_file[W1_FUNCTIONS];
    int64_t fn_line[W1_FUNCTIONS];
    ppk_frame fn_frame[W1_FUNCTIONS]; /* function i as a frame (name, file, line) */
    uint16_t *stack_fn;  /* all stacks' functions, back to back, leaf first */
    uint32_t stack_off[W1_STACKS];  /* first frame of stack j in stack_fn[] */
    uint8_t stack_depth[W1_STACKS];
    char thread_name[W1_THREADS][16];
    size_t thread_name_len[W1_THREADS];
    char steady_task[W1_STEADY_TASKS][16]; /* "Task-{i}" */
    size_t steady_task_len[W1_STEADY_TASKS];
};

/* Caller-owned buffers for one sample (5 KB). */
struct w1_sample {
    ppk_sample_data data; /* what to hand to ppk_profile_add() */
    ppk_frame frames[W1_MAX_DEPTH]; /* the stack's frames, leaf first */
    ppk_label labels[3];
    int64_t values[2];
    char task_name[32];
    uint64_t k;        /* the sample's index */
    uint32_t stack;    /* the stack drawn, 0..4999 */
    uint32_t thread;   /* k % 8 */
};

static inline uint64_t w1_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The W1 sample types and period, for a ppk_profile_config. */
static inline void w1_config(ppk_profile_config *cfg) {
    ppk_profile_config_init(cfg);
    cfg->sample_types[0] = (ppk_value_type){PPK_STR("cpu-time"), PPK_STR("nanoseconds")};
    cfg->sample_types[1] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg->n_sample_types = 2;
    cfg->period_type = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg->period = W1_PERIOD;
}

static inline void w1_free(struct w1 *w) {
    if (!w) return;
    free(w->strings);
    free(w->stack_fn);
    w->strings = NULL;
    w->stack_fn = NULL;
}

/* Builds the functions and stacks. @return 0, or -1 if memory ran out (w is then freed). */
static inline int w1_init(struct w1 *w) {
    memset(w, 0, sizeof *w);
    w->rng = W1_SEED;

    /* Functions: no random draws. */
    size_t cap = (size_t)W1_FUNCTIONS * 96, used = 0;
    w->strings = (char *)malloc(cap);
    if (!w->strings) return -1;
    for (uint32_t i = 0; i < W1_FUNCTIONS; i++) {
        int n = snprintf(w->strings + used, cap - used, "pkg%u.mod%u.handler_%u", i % 50,
                         i % 200, i);
        w->fn_name[i].len = (size_t)n;
        used += (size_t)n;
        n = snprintf(w->strings + used, cap - used, "/srv/app/pkg%u/mod%u.py", i % 50,
                     i % 200);
        w->fn_file[i].len = (size_t)n;
        used += (size_t)n;
        w->fn_line[i] = 1 + (int64_t)((i * 7u) % 500u);
    }
    /* Pointers only once the buffer is final. */
    used = 0;
    for (uint32_t i = 0; i < W1_FUNCTIONS; i++) {
        w->fn_name[i].ptr = w->strings + used;
        used += w->fn_name[i].len;
        w->fn_file[i].ptr = w->strings + used;
        used += w->fn_file[i].len;
    }

    for (uint32_t i = 0; i < W1_FUNCTIONS; i++) {
        w->fn_frame[i].name = w->fn_name[i];
        w->fn_frame[i].filename = w->fn_file[i];
        w->fn_frame[i].line = w->fn_line[i];
    }

    /* Stacks: depth, then each frame's function, leaf first. */
    w->stack_fn = (uint16_t *)malloc(sizeof(uint16_t) * W1_STACKS * W1_MAX_DEPTH);
    if (!w->stack_fn) {
        w1_free(w);
        return -1;
    }
    uint32_t total = 0;
    for (uint32_t j = 0; j < W1_STACKS; j++) {
        uint32_t d = W1_MIN_DEPTH + (uint32_t)(w1_splitmix64(&w->rng) % W1_DEPTH_SPAN);
        w->stack_depth[j] = (uint8_t)d;
        w->stack_off[j] = total;
        for (uint32_t f = 0; f < d; f++)
            w->stack_fn[total + f] = (uint16_t)(w1_splitmix64(&w->rng) % W1_FUNCTIONS);
        total += d;
    }

    for (uint32_t t = 0; t < W1_THREADS; t++)
        w->thread_name_len[t] =
            (size_t)snprintf(w->thread_name[t], sizeof w->thread_name[t], "Thread-%u", t);
    for (uint32_t t = 0; t < W1_STEADY_TASKS; t++)
        w->steady_task_len[t] =
            (size_t)snprintf(w->steady_task[t], sizeof w->steady_task[t], "Task-%u", t);

    w->rng_start = w->rng;
    w->k = 0;
    return 0;
}

/* Back to sample 0: the same stream of samples again. */
static inline void w1_rewind(struct w1 *w) {
    w->rng = w->rng_start;
    w->k = 0;
}

/* Skips one sample (draws its stack) without building it. */
static inline void w1_skip(struct w1 *w) {
    (void)w1_splitmix64(&w->rng);
    w->k++;
}

/* "Task-{k}" into buf (room for 32 bytes); its length. */
static inline size_t w1_storm_task(char *buf, uint64_t k) {
    char digits[20];
    size_t n = 0;
    do {
        digits[n++] = (char)('0' + k % 10);
        k /= 10;
    } while (k);
    memcpy(buf, "Task-", 5);
    for (size_t i = 0; i < n; i++) buf[5 + i] = digits[n - 1 - i];
    return 5 + n;
}

/* Produces sample w->k of the given variant into `out` without its frames (out->stack
 * names them in stack_fn) and advances to the next. */
static inline const ppk_sample_data *w1_next_labels(struct w1 *w, enum w1_variant variant,
                                                    struct w1_sample *out) {
    uint64_t k = w->k++;
    uint32_t j = (uint32_t)(w1_splitmix64(&w->rng) % W1_STACKS);
    uint32_t t = (uint32_t)(k % W1_THREADS);
    ppk_str task = {out->task_name, 0};
    if (variant == W1_STORM) {
        task.len = w1_storm_task(out->task_name, k);
    } else {
        task.ptr = w->steady_task[k % W1_STEADY_TASKS];
        task.len = w->steady_task_len[k % W1_STEADY_TASKS];
    }

    out->k = k;
    out->stack = j;
    out->thread = t;
    out->labels[0] = (ppk_label){PPK_STR("thread id"), 1, {NULL, 0}, 1000 + (int64_t)t,
                                 {NULL, 0}};
    out->labels[1] = (ppk_label){PPK_STR("thread name"), 0,
                                 {w->thread_name[t], w->thread_name_len[t]}, 0, {NULL, 0}};
    out->labels[2] = (ppk_label){PPK_STR("task name"), 0, task, 0, {NULL, 0}};
    out->values[0] = W1_VALUE;
    out->values[1] = W1_VALUE;
    out->data.frames = out->frames;
    out->data.n_frames = w->stack_depth[j];
    out->data.labels = out->labels;
    out->data.n_labels = 3;
    out->data.values = out->values;
    out->data.n_values = 2;
    out->data.timestamp_ns = 0;
    return &out->data;
}

/* Produces sample w->k of the given variant into `out`, its frames copied into
 * out->frames, and advances to the next. */
static inline const ppk_sample_data *w1_next(struct w1 *w, enum w1_variant variant,
                                             struct w1_sample *out) {
    const ppk_sample_data *d = w1_next_labels(w, variant, out);
    const uint16_t *fn = w->stack_fn + w->stack_off[out->stack];
    for (uint32_t f = 0; f < d->n_frames; f++) out->frames[f] = w->fn_frame[fn[f]];
    return d;
}

#endif
