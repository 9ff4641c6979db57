/*
 * bench_otlp.c - the size of OTLP profiles against pprof for the same windows (W1
 * steady and storm: 10 windows of 100,000 samples; W3: 5 windows of 60,000), and the
 * time to convert one.
 *
 * Each window is built on the simple path (ppk_profile_add), encoded as pprof (raw and
 * gzip), read back (ppk_pprof_read) and encoded as an OTLP request (ppk_otlp_encode),
 * which is then gzipped at the same level as the pprof (zlib level 1). The benchmark
 * checks its work: every OTLP request holds one Profile per sample type whose values sum
 * to the pprof's total of that type (decoded here from the request's bytes). Prints a
 * table and one JSON object per workload (medians over its windows): pprof_raw,
 * pprof_gzip, otlp_raw, otlp_gzip (bytes), the ratios, otlp_encode_ms (read back +
 * encode), otlp_dictionary_bytes, and the tables' sizes (strings, stacks, attributes).
 *
 * Usage: bench_otlp [--windows N]   (N windows per workload at most; default all)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "compress.h"
#include "pprofkit.h"
#include "w1.h"
#include "w3.h"

#define MAX_WINDOWS 10
#define MAX_TYPES 4

/* ---- reading the request back --------------------------------------------------------- */

typedef struct field {
    uint32_t num, wt;
    uint64_t v;       /* a varint's value */
    const uint8_t *p; /* a length-delimited field's bytes */
    size_t len;
} field;

static int varint(const uint8_t *b, size_t n, size_t *i, uint64_t *v) {
    *v = 0;
    for (int s = 0; s < 64 && *i < n; s += 7) {
        uint8_t c = b[(*i)++];
        *v |= (uint64_t)(c & 0x7f) << s;
        if (!(c & 0x80)) return 0;
    }
    return -1;
}

/* The next field of b[0..n) at *i: 1, 0 at the end, -1 malformed. */
static int next(const uint8_t *b, size_t n, size_t *i, field *f) {
    if (*i >= n) return 0;
    uint64_t tag;
    if (varint(b, n, i, &tag)) return -1;
    f->num = (uint32_t)(tag >> 3);
    f->wt = (uint32_t)(tag & 7);
    if (f->wt == 0) return varint(b, n, i, &f->v) ? -1 : 1;
    if (f->wt == 1) return n - *i >= 8 ? (*i += 8, 1) : -1;
    if (f->wt != 2 || varint(b, n, i, &f->v) || f->v > n - *i) return -1;
    f->p = b + *i;
    f->len = (size_t)f->v;
    *i += f->len;
    return 1;
}

typedef struct otlp_sizes {
    int profiles;
    int64_t totals[MAX_TYPES];
    size_t dict_bytes, strings, stacks, attributes;
} otlp_sizes;

/* ExportProfilesServiceRequest: resource_profiles 1 > scope_profiles 2 > profiles 2 >
 * samples 2 > values 4 (packed); dictionary 2 with string_table 5, attribute_table 6,
 * stack_table 7. */
static int read_request(const uint8_t *b, size_t n, otlp_sizes *o) {
    memset(o, 0, sizeof *o);
    size_t i = 0;
    field f, g, h, k, m;
    int r;
    while ((r = next(b, n, &i, &f)) == 1) {
        if (f.num == 2 && f.wt == 2) {
            o->dict_bytes = f.len;
            for (size_t j = 0; (r = next(f.p, f.len, &j, &g)) == 1;) {
                o->strings += g.num == 5;
                o->attributes += g.num == 6;
                o->stacks += g.num == 7;
            }
            if (r < 0) return -1;
            continue;
        }
        if (f.num != 1 || f.wt != 2) continue;
        for (size_t j = 0; (r = next(f.p, f.len, &j, &g)) == 1;) {
            if (g.num != 2 || g.wt != 2) continue;
            for (size_t l = 0; (r = next(g.p, g.len, &l, &h)) == 1;) {
                if (h.num != 2 || h.wt != 2) continue;
                if (o->profiles == MAX_TYPES) return -1;
                int t = o->profiles++;
                for (size_t q = 0; (r = next(h.p, h.len, &q, &k)) == 1;) {
                    if (k.num != 2 || k.wt != 2) continue;
                    for (size_t s = 0; (r = next(k.p, k.len, &s, &m)) == 1;) {
                        if (m.num != 4 || m.wt != 2) continue;
                        for (size_t v = 0; v < m.len;) {
                            uint64_t x;
                            if (varint(m.p, m.len, &v, &x)) return -1;
                            o->totals[t] += (int64_t)x;
                        }
                    }
                    if (r < 0) return -1;
                }
                if (r < 0) return -1;
            }
            if (r < 0) return -1;
        }
        if (r < 0) return -1;
    }
    return r;
}

/* ---- one workload ------------------------------------------------------------------- */

typedef struct result {
    const char *name;
    int windows;
    double pprof_raw[MAX_WINDOWS], pprof_gzip[MAX_WINDOWS], otlp_raw[MAX_WINDOWS],
        otlp_gzip[MAX_WINDOWS], encode_ms[MAX_WINDOWS], dict[MAX_WINDOWS], strings[MAX_WINDOWS],
        stacks[MAX_WINDOWS], attributes[MAX_WINDOWS];
} result;

static size_t gzip_size(const ppk_bytes *b) {
    ppk__mem m;
    ppk__mem_init(&m, NULL);
    ppk__cstream cs;
    ppk__cstream_init(&cs, &m);
    ppk_bytes z = {0};
    int rc = ppk__cstream_begin(&cs, PPK_CODEC_GZIP, 0);
    if (!rc) rc = ppk__cstream_write(&cs, b->data, b->len);
    if (!rc) rc = ppk__cstream_end(&cs, &m.a, &z);
    ppk__cstream_destroy(&cs);
    size_t n = rc ? 0 : z.len;
    ppk_bytes_free(&z);
    return n;
}

/* Encodes the window both ways, records the sizes, checks the totals. 0 or -1. */
static int measure(ppk_profile *p, result *res) {
    int w = res->windows;
    ppk_encode_options o = {PPK_CODEC_NONE, 0, 1, 2};
    ppk_bytes raw = {0}, gz = {0}, req = {0};
    if (ppk_profile_encode(p, &o, &raw)) return -1;
    o.codec = PPK_CODEC_GZIP;
    if (ppk_profile_encode(p, &o, &gz)) return -1;
    double t0 = bench_now_ms();
    ppk_pprof *pp = NULL;
    ppk_otlp_resource r = {0};
    r.service_name = PPK_STR("bench");
    if (ppk_pprof_read(raw.data, raw.len, NULL, &pp, NULL, 0) ||
        ppk_otlp_encode(pp, &r, NULL, &req, NULL, 0))
        return -1;
    res->encode_ms[w] = bench_now_ms() - t0;
    otlp_sizes os;
    int ok = read_request(req.data, req.len, &os) == 0 && os.profiles == (int)pp->n_sample_types;
    for (size_t t = 0; ok && t < pp->n_sample_types; t++) {
        int64_t want = 0;
        for (size_t s = 0; s < pp->n_samples; s++) want += pp->samples[s].values[t];
        if (want != os.totals[t]) {
            fprintf(stderr, "bench_otlp: %s window %d type %zu: OTLP total %lld, pprof %lld\n",
                    res->name, w, t, (long long)os.totals[t], (long long)want);
            ok = 0;
        }
    }
    res->pprof_raw[w] = (double)raw.len;
    res->pprof_gzip[w] = (double)gz.len;
    res->otlp_raw[w] = (double)req.len;
    res->otlp_gzip[w] = (double)gzip_size(&req);
    res->dict[w] = (double)os.dict_bytes;
    res->strings[w] = (double)os.strings;
    res->stacks[w] = (double)os.stacks;
    res->attributes[w] = (double)os.attributes;
    res->windows++;
    ppk_pprof_free(pp);
    ppk_bytes_free(&raw);
    ppk_bytes_free(&gz);
    ppk_bytes_free(&req);
    return ok ? 0 : -1;
}

static void report(result *r) {
    int n = r->windows;
    double pr = bench_median(r->pprof_raw, (size_t)n), pg = bench_median(r->pprof_gzip, (size_t)n);
    double orw = bench_median(r->otlp_raw, (size_t)n), og = bench_median(r->otlp_gzip, (size_t)n);
    printf("%-10s %7d %12.0f %12.0f %12.0f %12.0f %7.2f %7.2f %9.1f\n", r->name, n, pr, pg, orw,
           og, orw / pr, og / pg, bench_median(r->encode_ms, (size_t)n));
    printf("{\"workload\": \"%s\", \"windows\": %d, \"pprof_raw\": %.0f, \"pprof_gzip\": %.0f, "
           "\"otlp_raw\": %.0f, \"otlp_gzip\": %.0f, \"raw_ratio\": %.3f, \"gzip_ratio\": %.3f, "
           "\"otlp_encode_ms\": %.1f, \"otlp_dictionary_bytes\": %.0f, \"strings\": %.0f, "
           "\"stacks\": %.0f, \"attributes\": %.0f}\n",
           r->name, n, pr, pg, orw, og, orw / pr, og / pg, bench_median(r->encode_ms, (size_t)n),
           bench_median(r->dict, (size_t)n), bench_median(r->strings, (size_t)n),
           bench_median(r->stacks, (size_t)n), bench_median(r->attributes, (size_t)n));
}

static int run_w1(enum w1_variant v, const char *name, int max_windows) {
    struct w1 w;
    if (w1_init(&w)) return -1;
    ppk_profile_config cfg;
    w1_config(&cfg);
    ppk_profile *p = NULL;
    if (ppk_profile_create(&cfg, &p)) return -1;
    static struct w1_sample s;
    result res = {.name = name};
    int rc = 0;
    for (uint32_t k = 0; k < W1_SAMPLES && res.windows < max_windows && !rc; k++) {
        if (ppk_profile_add(p, w1_next(&w, v, &s))) rc = -1;
        if ((k + 1) % W1_WINDOW == 0 && !rc) {
            rc = measure(p, &res);
            ppk_profile_reset(p, 1);
        }
    }
    if (!rc) report(&res);
    ppk_profile_free(p);
    w1_free(&w);
    return rc;
}

static int run_w3(int max_windows) {
    static struct w3 w;
    if (w3_init(&w)) return -1;
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("cpu-time"), PPK_STR("nanoseconds")};
    cfg.sample_types[1] = (ppk_value_type){PPK_STR("wall-time"), PPK_STR("nanoseconds")};
    cfg.n_sample_types = 2;
    ppk_profile *p = NULL;
    if (ppk_profile_create(&cfg, &p)) return -1;
    result res = {.name = "w3"};
    static ppk_frame frames[W3_MAX_DEPTH];
    int rc = 0;
    for (uint32_t k = 0; k < W3_SAMPLES && res.windows < max_windows && !rc; k++) {
        struct w3_sample x;
        w3_next(&w, &x);
        uint32_t depth;
        const uint16_t *fn = w3_stack(&w, x.stack, &depth);
        for (uint32_t f = 0; f < depth; f++)
            frames[f] = (ppk_frame){.name = w.fn_name[fn[f]], .filename = w.fn_file[fn[f]],
                                    .line = w.fn_line[fn[f]]};
        ppk_label labels[3] = {
            {PPK_STR("thread id"), 1, {NULL, 0}, x.thread_id, {NULL, 0}},
            {PPK_STR("local root span id"), 1, {NULL, 0}, x.local_root_span_id, {NULL, 0}},
            {PPK_STR("span id"), 1, {NULL, 0}, x.span_id, {NULL, 0}}};
        int64_t values[2] = {W3_VALUE, W3_VALUE};
        ppk_sample_data d = {frames, depth, labels, 3, values, 2, x.timestamp_ns};
        if (ppk_profile_add(p, &d)) rc = -1;
        if ((k + 1) % W3_WINDOW == 0 && !rc) {
            rc = measure(p, &res);
            ppk_profile_reset(p, 1);
        }
    }
    if (!rc) report(&res);
    ppk_profile_free(p);
    w3_free(&w);
    return rc;
}

int main(int argc, char **argv) {
    int windows = MAX_WINDOWS;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--windows") && i + 1 < argc) {
            windows = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: bench_otlp [--windows N]\n");
            return 2;
        }
    }
    if (windows < 1 || windows > MAX_WINDOWS) windows = MAX_WINDOWS;
    printf("%-10s %7s %12s %12s %12s %12s %7s %7s %9s\n", "workload", "windows", "pprof",
           "pprof.gz", "otlp", "otlp.gz", "raw x", "gz x", "conv ms");
    if (run_w1(W1_STEADY, "w1-steady", windows) || run_w1(W1_STORM, "w1-storm", windows) ||
        run_w3(windows)) {
        fprintf(stderr, "bench_otlp: a check failed\n");
        return 1;
    }
    return 0;
}
