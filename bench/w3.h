/*
 * w3.h - the reference workload W3 ("deep stacks, many functions"), header only.
 *
 * W3 is specified in the shared benchmark notes (bench/W3.md there): splitmix64 seeded
 * with 1234 (w1_splitmix64); setup makes 16,000 functions (no draws) and 12,000 stacks
 * of depth 64..256, leaf first; then each sample k draws its stack, its "local root span
 * id" (1 + next() % 2000) and its "span id" (next(), as int64), in that order. Labels:
 * "thread id" (numeric, 1 + k % 16), "local root span id", "span id". Values: cpu-time
 * and wall-time of 10,000,000 ns each. Every 4th sample (k % 4 == 0) is timestamped
 * 1,750,000,000,000,000,000 + k * 1000. Endpoints: local root span ids 1..2000 map to
 * "POST /api/v{id % 3}/items/{id % 40}". An export every 60,000 samples.
 *
 * w3_init() builds the function strings and the stacks as function indices (uint16,
 * ~3.9 MB); w3_next() draws sample w->k's stack and labels into a struct w3_sample and
 * advances. A benchmark reads the frames from the stack (w3_stack) and the functions'
 * strings from the struct w3. Not thread safe: one struct w3 per thread.
 */
#ifndef PPK_BENCH_W3_H
#define PPK_BENCH_W3_H

#include <pprofkit.h>

#include "w1.h" /* w1_splitmix64, w1_config (the same sample types and period) */

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define W3_SEED 1234u
#define W3_FUNCTIONS 16000u
#define W3_STACKS 12000u
#define W3_MIN_DEPTH 64u
#define W3_DEPTH_SPAN 193u /* depth = 64 + next() % 193: 64..256 */
#define W3_MAX_DEPTH 256u
#define W3_THREADS 16u
#define W3_SPANS 2000u
#define W3_SAMPLES 300000u
#define W3_WINDOW 60000u
#define W3_VALUE 10000000
#define W3_TS_BASE 1750000000000000000ll

struct w3 {
    uint64_t rng, rng_start, k;
    char *strings; /* every function name and file name, back to back */
    ppk_str fn_name[W3_FUNCTIONS];
    ppk_str fn_file[W3_FUNCTIONS];
    int64_t fn_line[W3_FUNCTIONS];
    uint16_t *stack_fn; /* all stacks' functions, back to back, leaf first */
    uint32_t stack_off[W3_STACKS + 1];
};

struct w3_sample {
    uint64_t k;
    uint32_t stack;
    int64_t thread_id, local_root_span_id, span_id, timestamp_ns;
};

static inline void w3_free(struct w3 *w) {
    free(w->strings);
    free(w->stack_fn);
    w->strings = NULL;
    w->stack_fn = NULL;
}

/* Builds the functions and stacks. @return 0, or -1 if memory ran out (w is then freed). */
static inline int w3_init(struct w3 *w) {
    memset(w, 0, sizeof *w);
    w->rng = W3_SEED;
    size_t cap = (size_t)W3_FUNCTIONS * 112, used = 0;
    w->strings = (char *)malloc(cap);
    w->stack_fn = (uint16_t *)malloc(sizeof(uint16_t) * W3_STACKS * W3_MAX_DEPTH);
    if (!w->strings || !w->stack_fn) {
        w3_free(w);
        return -1;
    }
    for (uint32_t i = 0; i < W3_FUNCTIONS; i++) {
        int n = snprintf(w->strings + used, cap - used, "App::Mod%u::Klass%u#call_%u", i % 400,
                         i % 3000, i);
        w->fn_name[i].len = (size_t)n;
        used += (size_t)n;
        n = snprintf(w->strings + used, cap - used, "/app/lib/mod%u/klass%u.rb", i % 400,
                     i % 3000);
        w->fn_file[i].len = (size_t)n;
        used += (size_t)n;
        w->fn_line[i] = 1 + (int64_t)((i * 11u) % 3000u);
    }
    used = 0; /* pointers once the buffer is final */
    for (uint32_t i = 0; i < W3_FUNCTIONS; i++) {
        w->fn_name[i].ptr = w->strings + used;
        used += w->fn_name[i].len;
        w->fn_file[i].ptr = w->strings + used;
        used += w->fn_file[i].len;
    }
    uint32_t total = 0;
    for (uint32_t j = 0; j < W3_STACKS; j++) {
        uint32_t d = W3_MIN_DEPTH + (uint32_t)(w1_splitmix64(&w->rng) % W3_DEPTH_SPAN);
        w->stack_off[j] = total;
        for (uint32_t f = 0; f < d; f++)
            w->stack_fn[total + f] = (uint16_t)(w1_splitmix64(&w->rng) % W3_FUNCTIONS);
        total += d;
    }
    w->stack_off[W3_STACKS] = total;
    w->rng_start = w->rng;
    return 0;
}

static inline void w3_rewind(struct w3 *w) {
    w->rng = w->rng_start;
    w->k = 0;
}

/* Sample w->k into `out`; advances. */
static inline void w3_next(struct w3 *w, struct w3_sample *out) {
    uint64_t k = w->k++;
    out->k = k;
    out->stack = (uint32_t)(w1_splitmix64(&w->rng) % W3_STACKS);
    out->thread_id = 1 + (int64_t)(k % W3_THREADS);
    out->local_root_span_id = 1 + (int64_t)(w1_splitmix64(&w->rng) % W3_SPANS);
    out->span_id = (int64_t)w1_splitmix64(&w->rng);
    out->timestamp_ns = k % 4 == 0 ? W3_TS_BASE + (int64_t)k * 1000 : 0;
}

/* The functions of stack j, leaf first, and their number. */
static inline const uint16_t *w3_stack(const struct w3 *w, uint32_t j, uint32_t *depth) {
    *depth = w->stack_off[j + 1] - w->stack_off[j];
    return w->stack_fn + w->stack_off[j];
}

/* Endpoint name of local root span id `id` into buf; its length. */
static inline size_t w3_endpoint(uint64_t id, char *buf, size_t cap) {
    return (size_t)snprintf(buf, cap, "POST /api/v%u/items/%u", (unsigned)(id % 3),
                            (unsigned)(id % 40));
}

#endif
