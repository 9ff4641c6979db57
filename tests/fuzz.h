/*
 * fuzz.h - what the fuzz targets (tests/test_fuzz_*.c) share: reading an input as a
 * stream of choices, strings and values made from it, an output checker built on the
 * independent reader (pprof_read.h), and the regression main().
 *
 * A target defines FUZZ_NAME ("fuzz_profile") and
 *     int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
 * then includes this header. Built with -DPPK_LIBFUZZER (cmake -DPPK_FUZZ=ON), libFuzzer
 * provides main() and a failed check abort()s, so libFuzzer saves the input. Built
 * without it (the ctest test), main() below runs every file of
 * $PPK_SOURCE_DIR/tests/corpus/FUZZ_NAME/ (else the corpus next to this file), then
 * PPK_FUZZ_ITERS (default 2000; 600 under ASan, 200 under TSan) deterministic pseudo-random inputs; a failed check is
 * printed with the input's name and the run goes on; the exit code says whether any
 * check failed. `test_fuzz_profile FILE...` runs only the given files (a reproducer).
 *
 * Strings handed to the library are copied into exactly sized heap blocks, filled with
 * 0xAA and freed as soon as the call returns (G1: transient input), so a read past a
 * length or a kept pointer shows up under AddressSanitizer.
 */
#ifndef PPK_TESTS_FUZZ_H
#define PPK_TESTS_FUZZ_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zstd.h>

#include "pprof_read.h"
#include "pprofkit.h"

#ifndef FUZZ_NAME
#error "define FUZZ_NAME before including fuzz.h"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- failures ---------------------------------------------------------------------- */
static int fz_failures_;
static const char *fz_input_name_ = "?";

#ifdef PPK_LIBFUZZER
#define FZ_ON_FAIL_() abort()
#else
#define FZ_ON_FAIL_() ((void)0)
#endif

/* A failed check: printed with the input's name; under libFuzzer, abort(). */
#define FZ_FAIL(...)                                                                        \
    do {                                                                                    \
        fprintf(stderr, "%s: %s:%d: ", fz_input_name_, __FILE__, __LINE__);                 \
        fprintf(stderr, __VA_ARGS__);                                                       \
        fprintf(stderr, "\n");                                                              \
        fz_failures_++;                                                                     \
        FZ_ON_FAIL_();                                                                      \
    } while (0)

#define FZ_CHECK(cond)                                                                      \
    do {                                                                                    \
        if (!(cond)) FZ_FAIL("check failed: %s", #cond);                                    \
    } while (0)

/* ---- reading the input ------------------------------------------------------------- */
typedef struct fz_in {
    const uint8_t *p, *end;
} fz_in;

static inline int fz_more(const fz_in *in) { return in->p < in->end; }

static inline uint8_t fz_u8(fz_in *in) { return in->p < in->end ? *in->p++ : 0; }

static inline uint64_t fz_u64(fz_in *in) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | fz_u8(in);
    return v;
}

/* ---- transient copies (G1) --------------------------------------------------------- */
#define FZ_MAX_TMP 512
static void *fz_tmp_[FZ_MAX_TMP];
static size_t fz_tmp_len_[FZ_MAX_TMP];
static size_t fz_ntmp_;

/* A heap copy of n bytes (n may be 0: a valid pointer to nothing), freed by fz_release. */
static inline void *fz_copy(const void *src, size_t n) {
    if (fz_ntmp_ == FZ_MAX_TMP) return NULL;
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    if (n) memcpy(p, src, n);
    fz_tmp_[fz_ntmp_] = p;
    fz_tmp_len_[fz_ntmp_++] = n;
    return p;
}

/* Overwrites and frees every copy: the library must have copied what it keeps. */
static inline void fz_release(void) {
    for (size_t i = 0; i < fz_ntmp_; i++) {
        memset(fz_tmp_[i], 0xAA, fz_tmp_len_[i]);
        free(fz_tmp_[i]);
    }
    fz_ntmp_ = 0;
}

/* Words that matter to the library: reserved and special keys, invalid UTF-8 (a lone
 * byte, a cut sequence, overlong, a surrogate, above U+10FFFF), multi-byte characters
 * at the 32-byte cut, the library's own placeholder strings. */
static const char *const fz_words_[] = {
    "main",
    "handler",
    "app.py",
    "local root span id",
    "end_timestamp_ns",
    "trace endpoint",
    "thread id",
    "task name",
    "\xff",
    "\xc3",
    "\xc0\x80",
    "\xed\xa0\x80",
    "\xf4\x90\x80\x80",
    "caf\xc3\xa9",
    "\xf0\x9f\x98\x80",
    "abcdefghijklmnopqrstuvwxyz012345",
    "abcdefghijklmnopqrstuvwxyz0123\xc3\xa9",
    "abcdefghijklmnopqrstuvwxyz01234\xf0\x9f\x98\x80",
    "[pprofkit: memory limit]",
    "<3 frames omitted>",
    "bytes",
    "GET /users",
};
#define FZ_NWORDS (sizeof fz_words_ / sizeof fz_words_[0])

/* A string made from the input. *bad is set when it is NULL with a non-zero length,
 * which only happens when allow_bad is set. */
static inline ppk_str fz_str(fz_in *in, int allow_bad, int *bad) {
    uint8_t b = fz_u8(in);
    switch (b % 16) {
    case 0:
        return (ppk_str){NULL, 0};
    case 1:
        if (allow_bad) {
            if (bad) *bad = 1;
            return (ppk_str){NULL, 1 + (size_t)(b >> 4)};
        }
        return (ppk_str){fz_copy("", 0), 0};
    case 2: case 3: case 4: case 5: case 6: case 7: case 8: {
        const char *w = fz_words_[fz_u8(in) % FZ_NWORDS];
        size_t n = strlen(w);
        return (ppk_str){fz_copy(w, n), n};
    }
    case 9: case 10: case 11: case 12: {
        size_t n = fz_u8(in) % 48;
        size_t avail = (size_t)(in->end - in->p);
        if (n > avail) n = avail;
        ppk_str s = {fz_copy(in->p, n), n};
        in->p += n;
        return s;
    }
    case 13: { /* a short name: a letter and a digit, so that names repeat */
        char t[2] = {(char)('a' + (b >> 4)), (char)('0' + fz_u8(in) % 4)};
        return (ppk_str){fz_copy(t, 2), 2};
    }
    default: { /* a run of one character, multi-byte or invalid, crossing the cut */
        static const char *const units[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80",
                                            "\xff", "x", "\xe2\x82"};
        const char *u = units[fz_u8(in) % 6];
        size_t ul = strlen(u), reps = fz_u8(in) % 40;
        char t[40 * 4];
        for (size_t i = 0; i < reps; i++) memcpy(t + i * ul, u, ul);
        return (ppk_str){fz_copy(t, reps * ul), reps * ul};
    }
    }
}

/* A value: mostly small, sometimes the extremes or any 64 bits. */
static inline int64_t fz_value(fz_in *in) {
    uint8_t b = fz_u8(in);
    switch (b % 16) {
    case 13:
        return (int64_t)fz_u64(in);
    case 14:
        return INT64_MAX;
    case 15:
        return INT64_MIN;
    case 12:
        return (int64_t)fz_u8(in) * 1000003;
    default:
        return (int8_t)fz_u8(in);
    }
}

static inline int fz_str_eq(ppk_str s, const char *c) {
    size_t n = strlen(c);
    return s.ptr && s.len == n && memcmp(s.ptr, c, n) == 0;
}

/* ---- expected totals ---------------------------------------------------------------- */
/* Sums of the values accepted, per sample type, exact (128 bits). The exported sums must
 * equal them when no partial sum can have saturated: when the sum of |value| fits. */
typedef struct fz_totals {
    __int128 sum[PPK_MAX_SAMPLE_TYPES];
    unsigned __int128 abs[PPK_MAX_SAMPLE_TYPES];
    uint64_t samples;
} fz_totals;

static inline void fz_totals_add(fz_totals *t, const int64_t *v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        t->sum[i] += v[i];
        t->abs[i] += v[i] < 0 ? (unsigned __int128)(-(__int128)v[i]) : (unsigned __int128)v[i];
    }
    t->samples++;
}

static inline int fz_totals_exact(const fz_totals *t, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (t->abs[i] > (unsigned __int128)INT64_MAX) return 0;
    return 1;
}

/* ---- checking an encoded profile --------------------------------------------------- */
typedef struct fz_limits {
    size_t n_types, max_string_len, max_frames, max_labels;
} fz_limits;

static inline int fz_utf8_valid(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
        else return 0;
        if (n - i < len) return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (s[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += len;
    }
    return 1;
}

/* Decompresses a zstd frame (streamed: the content size may be absent). */
static inline int fz_unzstd(const uint8_t *data, size_t len, uint8_t **out, size_t *out_len) {
    ZSTD_DCtx *d = ZSTD_createDCtx();
    if (!d) return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    ZSTD_inBuffer ib = {data, len, 0};
    size_t r = 1;
    while (buf) {
        if (n == cap) {
            if (cap > ((size_t)256 << 20)) break;
            uint8_t *nb = realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        ZSTD_outBuffer ob = {buf + n, cap - n, 0};
        r = ZSTD_decompressStream(d, &ob, &ib);
        n += ob.pos;
        if (ZSTD_isError(r)) break;
        if (r == 0 && ib.pos == ib.size) break;
        if (ib.pos == ib.size && ob.pos < ob.size) break; /* truncated */
    }
    ZSTD_freeDCtx(d);
    if (!buf || r != 0 || ib.pos != ib.size) {
        free(buf);
        return -1;
    }
    *out = buf;
    *out_len = n;
    return 0;
}

/*
 * Checks one encoded profile: the codec's framing, then pr_parse (string_table[0] is "",
 * every index in range, every referenced location and function exists), then: one value
 * per sample type in every sample; ids are index + 1; mapping ids exist; every string is
 * valid UTF-8; function and label strings at most max_string_len bytes; at most
 * max_frames locations per sample; no label key twice in one sample, none empty, at
 * most max_labels + 2 labels (end_timestamp_ns and trace endpoint are added); time and
 * duration as asked (start_ns 0: not checked); and, when `tot` is given and exact, the
 * sum of each value type over the samples.
 */
static inline void fz_check_profile(const ppk_bytes *b, ppk_codec codec, const fz_limits *lim,
                                    const fz_totals *tot, int64_t start_ns, int64_t end_ns) {
    const uint8_t *data = b->data;
    size_t len = b->len;
    uint8_t *raw = NULL;
    if (codec == PPK_CODEC_GZIP) {
        if (len < 2 || data[0] != 0x1f || data[1] != 0x8b) {
            FZ_FAIL("gzip output without the gzip magic (%zu bytes)", len);
            return;
        }
    } else if (codec == PPK_CODEC_ZSTD) {
        size_t rawlen;
        if (len < 4 || data[0] != 0x28 || data[1] != 0xb5 || data[2] != 0x2f ||
            data[3] != 0xfd || fz_unzstd(data, len, &raw, &rawlen) != 0) {
            FZ_FAIL("zstd output does not decompress (%zu bytes)", len);
            return;
        }
        data = raw;
        len = rawlen;
    }
    pr_profile pp;
    if (pr_parse(data, len, &pp) != 0) {
        FZ_FAIL("encoded profile is malformed (codec %d, %zu bytes)", (int)codec, len);
        free(raw);
        return;
    }
    free(raw);
    if (pp.nsample_type != lim->n_types)
        FZ_FAIL("%zu sample types, want %zu", pp.nsample_type, lim->n_types);
    for (size_t i = 0; i < pp.nstrings; i++)
        if (!fz_utf8_valid((const uint8_t *)pp.strings[i].ptr, pp.strings[i].len))
            FZ_FAIL("string %zu is not valid UTF-8", i);
    for (size_t i = 0; i < pp.nlocs; i++) {
        if (pp.locs[i].id != i + 1) FZ_FAIL("location %zu has id %llu", i, (unsigned long long)pp.locs[i].id);
        uint64_t m = pp.locs[i].mapping_id;
        if (m && (m > pp.nmaps || pp.maps[m - 1].id != m))
            FZ_FAIL("location %zu: mapping %llu does not exist", i, (unsigned long long)m);
    }
    for (size_t i = 0; i < pp.nfns; i++) {
        const pr_function *f = &pp.fns[i];
        if (f->id != i + 1) FZ_FAIL("function %zu has id %llu", i, (unsigned long long)f->id);
        if (pr_string(&pp, f->name).len > lim->max_string_len ||
            pr_string(&pp, f->system_name).len > lim->max_string_len ||
            pr_string(&pp, f->filename).len > lim->max_string_len)
            FZ_FAIL("function %zu: a string longer than max_string_len", i);
    }
    for (size_t i = 0; i < pp.nmaps; i++)
        if (pp.maps[i].id != i + 1) FZ_FAIL("mapping %zu has id %llu", i, (unsigned long long)pp.maps[i].id);
    __int128 sum[PPK_MAX_SAMPLE_TYPES] = {0};
    for (size_t i = 0; i < pp.nsamples; i++) {
        const pr_sample *s = &pp.samples[i];
        if (s->nloc > lim->max_frames)
            FZ_FAIL("sample %zu has %zu frames, max_frames %zu", i, s->nloc, lim->max_frames);
        if (s->nlab > lim->max_labels + 2)
            FZ_FAIL("sample %zu has %zu labels, max_labels %zu", i, s->nlab, lim->max_labels);
        for (size_t j = 0; j < s->nlab; j++) {
            if (s->lab[j].key == 0) FZ_FAIL("sample %zu: a label with an empty key", i);
            if (pr_string(&pp, s->lab[j].key).len > lim->max_string_len ||
                pr_string(&pp, s->lab[j].str).len > lim->max_string_len ||
                pr_string(&pp, s->lab[j].num_unit).len > lim->max_string_len)
                FZ_FAIL("sample %zu: a label string longer than max_string_len", i);
            for (size_t k = 0; k < j; k++)
                if (s->lab[k].key == s->lab[j].key)
                    FZ_FAIL("sample %zu: label key \"%.*s\" twice", i,
                            (int)pr_string(&pp, s->lab[j].key).len,
                            pr_string(&pp, s->lab[j].key).ptr);
        }
        for (size_t j = 0; j < s->nval && j < PPK_MAX_SAMPLE_TYPES; j++) sum[j] += s->val[j];
    }
    if (start_ns) {
        if (pp.time_nanos != start_ns)
            FZ_FAIL("time_nanos %lld, want %lld", (long long)pp.time_nanos, (long long)start_ns);
        if (end_ns >= start_ns && pp.duration_nanos != end_ns - start_ns)
            FZ_FAIL("duration_nanos %lld, want %lld", (long long)pp.duration_nanos,
                    (long long)(end_ns - start_ns));
    }
    if (tot && fz_totals_exact(tot, lim->n_types)) {
        for (size_t j = 0; j < lim->n_types; j++)
            if (sum[j] != tot->sum[j])
                FZ_FAIL("value type %zu: exported sum %lld, accepted sum %lld (%llu samples)", j,
                        (long long)sum[j], (long long)tot->sum[j],
                        (unsigned long long)tot->samples);
    }
    pr_free(&pp);
}

/* ---- the regression main ----------------------------------------------------------- */
#ifndef PPK_LIBFUZZER
static int fz_run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        return -1;
    }
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            buf = realloc(buf, cap);
            if (!buf) abort();
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0) break;
        len += n;
    }
    fclose(f);
    /* An exactly sized copy, as libFuzzer gives: a read past the end is caught. */
    uint8_t *exact = malloc(len ? len : 1);
    if (!exact) abort();
    if (len) memcpy(exact, buf, len);
    free(buf);
    fz_input_name_ = path;
    LLVMFuzzerTestOneInput(exact, len);
    free(exact);
    return 0;
}

static int fz_cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Runs every regular file of `dir`, in name order. Returns how many, or -1. */
static long fz_run_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        names = realloc(names, (n + 1) * sizeof *names);
        if (!names) abort();
        size_t l = strlen(dir) + strlen(e->d_name) + 2;
        names[n] = malloc(l);
        if (!names[n]) abort();
        snprintf(names[n], l, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, fz_cmp_names);
    long runs = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode) && fz_run_file(names[i]) == 0)
            runs++;
        free(names[i]);
    }
    free(names);
    return runs;
}

/* Random inputs per run: a few seconds in each stage of tools/check.sh. */
#if defined(__SANITIZE_THREAD__)
#define FZ_DEFAULT_ITERS 200
#elif defined(__SANITIZE_ADDRESS__)
#define FZ_DEFAULT_ITERS 600
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FZ_DEFAULT_ITERS 200
#elif __has_feature(address_sanitizer)
#define FZ_DEFAULT_ITERS 600
#endif
#endif
#ifndef FZ_DEFAULT_ITERS
#define FZ_DEFAULT_ITERS 2000
#endif

static uint64_t fz_rng_(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int main(int argc, char **argv) {
    if (argc > 1) { /* reproduce: the given files only */
        for (int i = 1; i < argc; i++) fz_run_file(argv[i]);
        printf("%s: %d inputs, %d failed checks\n", FUZZ_NAME, argc - 1, fz_failures_);
        return fz_failures_ ? 1 : 0;
    }
    char dir[4096];
    const char *src = getenv("PPK_SOURCE_DIR");
    if (src && *src) {
        snprintf(dir, sizeof dir, "%s/tests/corpus/%s", src, FUZZ_NAME);
    } else { /* next to this file */
        const char *file = __FILE__, *slash = strrchr(file, '/');
        int dl = slash ? (int)(slash - file) : 1;
        snprintf(dir, sizeof dir, "%.*s/corpus/%s", dl, slash ? file : ".", FUZZ_NAME);
    }
    long files = fz_run_dir(dir);
    if (files < 0) {
        fprintf(stderr, "%s: no corpus directory %s\n", FUZZ_NAME, dir);
        fz_failures_++;
    }
    long iters = FZ_DEFAULT_ITERS;
    const char *it = getenv("PPK_FUZZ_ITERS");
    if (it && *it) iters = strtol(it, NULL, 10);
    uint64_t seed = 0x70707266u; /* fixed: the same inputs every run */
    char name[64];
    for (long i = 0; i < iters; i++) {
        size_t len = (size_t)(fz_rng_(&seed) % 700);
        uint8_t *buf = malloc(len ? len : 1);
        if (!buf) abort();
        for (size_t k = 0; k < len; k++) buf[k] = (uint8_t)fz_rng_(&seed);
        snprintf(name, sizeof name, "random input %ld", i);
        fz_input_name_ = name;
        LLVMFuzzerTestOneInput(buf, len);
        free(buf);
    }
    printf("%s: %ld corpus files from %s, %ld random inputs, %d failed checks\n", FUZZ_NAME,
           files < 0 ? 0 : files, dir, iters, fz_failures_);
    return fz_failures_ ? 1 : 0;
}
#endif /* PPK_LIBFUZZER */

#endif
