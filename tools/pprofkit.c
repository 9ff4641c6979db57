/*
 * pprofkit - look at pprof profiles without Go: top, collapsed (folded) stacks, diff, and
 * a flame graph page (flame, in tools/pprofkit/flame.c).
 *
 * Reads each file with ppk_pprof_read (the public API only: raw, gzip or zstd, any
 * producer) and aggregates one sample type over all of them, as `go tool pprof -top`
 * does with its default granularity (functions):
 *   - a frame is one line of a location (inlined functions first, then the function they
 *     were inlined into), named by its function's name; a frame without a function name
 *     (an unsymbolized address, or a function with an empty name) is named after its
 *     mapping's file, "[libc.so.6]", or "<unknown>";
 *   - frames of the same name are one function, whatever their file, line or address;
 *   - flat: the sample's value for the leaf frame's function; cum: for every function on
 *     the stack, counted once per sample however many times it appears;
 *   - samples whose value is 0 are left out; the total is the sum of the absolute values,
 *     but of a diff profile's (go tool pprof -diff_base labels the base profile's samples
 *     pprof::base=true) the sum of the base samples' alone; percentages are of absolute
 *     values (a negative flat is a positive flat%), as go tool pprof prints them.
 * Rows are sorted by |flat| (descending), then by name, as go tool pprof sorts them, and
 * as python -m pprofkit top does (python/pprofkit/view.py: the same columns).
 * Names are written as one line of text each: their control characters (bytes 0x00 to
 * 0x1f and 0x7f) as \xNN, two lowercase hex digits, and in collapsed their ';' (the
 * frame separator) as \x3b; every other byte as it is.
 * The usage text (pprofkit --help) is the manual.
 */
#include <pprofkit.h>

#include "cmd.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char USAGE[] =
    "usage: pprofkit top [--sample-type T] [-n N] [--exact] FILE...\n"
    "       pprofkit collapsed [--sample-type T] FILE...\n"
    "       pprofkit diff [--sample-type T] [-n N] [--exact] BEFORE AFTER\n"
    "       pprofkit flame [--sample-type T] [--title TEXT] -o OUT.html FILE...\n"
    "       pprofkit otlp [-o OUT] FILE\n"
    "       pprofkit --help | --version\n";

static const char HELP[] =
    "NAME\n"
    "    pprofkit - look at pprof profiles without Go\n"
    "\n"
    "SYNOPSIS\n"
    "    pprofkit top [--sample-type T] [-n N] [--exact] FILE...\n"
    "    pprofkit collapsed [--sample-type T] FILE...\n"
    "    pprofkit diff [--sample-type T] [-n N] [--exact] BEFORE AFTER\n"
    "    pprofkit flame [--sample-type T] [--title TEXT] -o OUT.html FILE...\n"
    "    pprofkit otlp [-o OUT] FILE\n"
    "\n"
    "DESCRIPTION\n"
    "    Reads pprof profiles (profile.proto; raw, gzip or zstd; from pprofkit, Go's\n"
    "    runtime/pprof or any other producer; \"-\" is standard input) and shows one sample\n"
    "    type, summed over the files. Functions are merged by name as `go tool pprof -top`\n"
    "    merges them: a frame without a function name is named after its mapping's file\n"
    "    (\"[libc.so.6]\") or \"<unknown>\"; inlined functions are frames of their own.\n"
    "    A name's control characters (bytes 0x00-0x1f, 0x7f) are written as \\xNN (two\n"
    "    lowercase hex digits), and in collapsed its ';' as \\x3b.\n"
    "\n"
    "COMMANDS\n"
    "    top        The functions with the largest flat value (the samples whose leaf they\n"
    "               are) with their cumulative value (the samples they are on the stack of,\n"
    "               once per sample): columns flat, flat%, sum% (flat% of this row and the\n"
    "               rows above), cum, cum%, name; sorted by |flat|, then name. The total\n"
    "               is the sum of the absolute values; of a diff profile (go tool pprof\n"
    "               -proto -diff_base), of its base's; percentages are of |value|.\n"
    "    collapsed  Folded stacks, one line each: \"root;caller;leaf VALUE\", in the order\n"
    "               first seen, for flamegraph.pl, speedscope or inferno. Samples with an\n"
    "               empty stack or a zero value are left out.\n"
    "    diff       The functions whose flat value differs between BEFORE and AFTER, the\n"
    "               largest change first: columns before, after, change, name.\n"
    "    flame      One HTML page with an interactive flame graph of the files summed\n"
    "               (every sample type, a label filter, zoom and search; no network\n"
    "               needed): the page of `python -m pprofkit flame`, with the same data.\n"
    "               Frames are (function, file) pairs and inlined functions frames of\n"
    "               their own; a label key with more than 1000 values, more than one for\n"
    "               every two samples (span ids), is left out; negative values count 0.\n"
    "               The page replaces OUT.html whole (written beside it, then renamed).\n"
    "    otlp       FILE as one OpenTelemetry ExportProfilesServiceRequest (OTLP profiles,\n"
    "               opentelemetry-proto 1.9.0; experimental), uncompressed protobuf, to OUT\n"
    "               or standard output: what the OTLP upload sink posts for that export.\n"
    "               The resource comes from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES.\n"
    "\n"
    "OPTIONS\n"
    "    --sample-type T   The sample type to show, e.g. cpu-time, alloc_space (default:\n"
    "                      the profile's default_sample_type, else its last sample type);\n"
    "                      flame: the one shown first (the page offers every type).\n"
    "    -n N              Rows to show (default 20; 0: all).\n"
    "    --exact           Values as integers in the sample type's unit; without it,\n"
    "                      nanoseconds and bytes are scaled (1.50s, 2.00MB) as go tool\n"
    "                      pprof shows them.\n"
    "    -o, --output OUT.html   flame: the page to write (required); otlp: the file.\n"
    "    --title TEXT      flame: the page's title (default: the files' names).\n"
    "    --help, --version\n"
    "\n"
    "    The files of top, collapsed and flame must have the same sample types (in the same\n"
    "    order); diff's two files must both have T, in the same unit.\n"
    "\n"
    "EXIT STATUS\n"
    "    0 success; 1 a file could not be read or decoded (the message names the file, the\n"
    "    field and the byte offset), or has no such sample type, or flame's page could not\n"
    "    be written (then no OUT.html is left behind, nor a temporary file); 2 usage error.\n"
    "\n"
    "EXAMPLES\n"
    "    pprofkit top -n 10 --sample-type cpu-time out/profile.*.pb.gz\n"
    "    pprofkit collapsed cpu.pb.gz | flamegraph.pl > cpu.svg\n"
    "    pprofkit diff --sample-type alloc_space before.pb.gz after.pb.gz\n"
    "    pprofkit flame -o cpu.html out/profile.*.pb.gz\n"
    "    pprofkit otlp -o request.bin out/profile.1234.1.pb.gz\n";

const char *pk_cmd = "";

static void die_nomem(void) {
    fprintf(stderr, "pprofkit %s: out of memory\n", pk_cmd);
    exit(1);
}

void *pk_xrealloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) die_nomem();
    return q;
}

/* ---- a string -> entry map, entries in insertion order ------------------------------ */
typedef struct entry {
    char *name;
    size_t len;
    int64_t flat[2], cum[2]; /* per side (diff: 0 before, 1 after); collapsed: flat[0] */
    uint64_t seen;           /* the last sample that counted this function's cum */
} entry;

typedef struct table {
    entry *e;
    size_t n, cap;
    size_t *slot; /* entry index + 1; 0 empty */
    size_t nslot; /* a power of two */
} table;

static uint64_t hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

/* The index of name's entry, added (zeroed) if new. */
static size_t table_get(table *t, const char *s, size_t n) {
    if (2 * (t->n + 1) > t->nslot) {
        size_t ns = t->nslot ? t->nslot * 2 : 1024;
        size_t *sl = pk_xrealloc(NULL, ns * sizeof *sl);
        memset(sl, 0, ns * sizeof *sl);
        for (size_t i = 0; i < t->n; i++) {
            size_t k = hash(t->e[i].name, t->e[i].len) & (ns - 1);
            while (sl[k]) k = (k + 1) & (ns - 1);
            sl[k] = i + 1;
        }
        free(t->slot);
        t->slot = sl;
        t->nslot = ns;
    }
    size_t k = hash(s, n) & (t->nslot - 1);
    while (t->slot[k]) {
        entry *e = &t->e[t->slot[k] - 1];
        if (e->len == n && memcmp(e->name, s, n) == 0) return t->slot[k] - 1;
        k = (k + 1) & (t->nslot - 1);
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 256;
        t->e = pk_xrealloc(t->e, t->cap * sizeof *t->e);
    }
    entry *e = &t->e[t->n];
    memset(e, 0, sizeof *e);
    e->name = pk_xrealloc(NULL, n + 1);
    if (n) memcpy(e->name, s, n);
    e->name[n] = 0;
    e->len = n;
    t->slot[k] = ++t->n;
    return t->n - 1;
}

static void table_free(table *t) {
    for (size_t i = 0; i < t->n; i++) free(t->e[i].name);
    free(t->e);
    free(t->slot);
    memset(t, 0, sizeof *t);
}

/* ---- reading ------------------------------------------------------------------------ */
#define MAX_FILE ((size_t)1 << 30)

ppk_pprof *pk_load(const char *path) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "pprofkit %s: %s: %s\n", pk_cmd, path, strerror(errno));
        exit(1);
    }
    size_t n = 0, cap = 1 << 16, got;
    uint8_t *buf = pk_xrealloc(NULL, cap);
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            if (cap >= MAX_FILE) {
                fprintf(stderr, "pprofkit %s: %s: larger than %zu bytes\n", pk_cmd, path,
                        MAX_FILE);
                exit(1);
            }
            cap *= 2;
            buf = pk_xrealloc(buf, cap);
        }
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad) {
        fprintf(stderr, "pprofkit %s: %s: read error\n", pk_cmd, path);
        exit(1);
    }
    ppk_pprof *p;
    char err[512];
    int rc = ppk_pprof_read(buf, n, NULL, &p, err, sizeof err);
    free(buf);
    if (rc == PPK_ENOMEM) die_nomem();
    if (rc) {
        fprintf(stderr, "pprofkit %s: %s: %s\n", pk_cmd, path, err[0] ? err : ppk_strerror(rc));
        exit(1);
    }
    return p;
}

static int str_eq(ppk_str a, ppk_str b) {
    return a.len == b.len && (a.len == 0 || memcmp(a.ptr, b.ptr, a.len) == 0);
}

/* The sample type: its index in p, or exit(1) with a message. */
size_t pk_type_index(const ppk_pprof *p, const char *path, const char *want) {
    if (p->n_sample_types == 0) {
        fprintf(stderr, "pprofkit %s: %s: the profile has no sample types\n", pk_cmd, path);
        exit(1);
    }
    ppk_str w = want ? ppk_cstr(want)
                     : p->default_sample_type.len ? p->default_sample_type
                                                  : p->sample_types[p->n_sample_types - 1].type;
    for (size_t i = 0; i < p->n_sample_types; i++)
        if (str_eq(p->sample_types[i].type, w)) return i;
    fprintf(stderr, "pprofkit %s: %s: no sample type '%.*s' (there are:", pk_cmd, path,
            (int)w.len, w.ptr);
    for (size_t i = 0; i < p->n_sample_types; i++)
        fprintf(stderr, "%s %.*s", i ? "," : "", (int)p->sample_types[i].type.len,
                p->sample_types[i].type.ptr);
    fprintf(stderr, ")\n");
    exit(1);
}

int pk_same_types(const ppk_pprof *a, const ppk_pprof *b) {
    if (a->n_sample_types != b->n_sample_types) return 0;
    for (size_t i = 0; i < a->n_sample_types; i++)
        if (!str_eq(a->sample_types[i].type, b->sample_types[i].type) ||
            !str_eq(a->sample_types[i].unit, b->sample_types[i].unit))
            return 0;
    return 1;
}

/* ---- frames ------------------------------------------------------------------------- */
ppk_str pk_frame_name(const ppk_pprof_location *l, size_t line, char *buf, size_t size) {
    const ppk_pprof_function *fn = line < l->n_lines ? l->lines[line].function : NULL;
    if (fn && fn->name.len) return fn->name;
    ppk_str f = l->mapping ? l->mapping->filename : PPK_STR("");
    while (f.len && f.ptr[f.len - 1] == '/') f.len--;
    if (f.len) {
        size_t base = f.len;
        while (base > 0 && f.ptr[base - 1] != '/') base--;
        int k = snprintf(buf, size, "[%.*s]", (int)(f.len - base), f.ptr + base);
        return (ppk_str){buf, k < 0 ? 0 : (size_t)k < size ? (size_t)k : size - 1};
    }
    return PPK_STR("<unknown>");
}

/* Calls fn for each frame of s, the leaf first. */
typedef void (*frame_fn)(void *ctx, ppk_str name);

static void each_frame(const ppk_pprof_sample *s, frame_fn fn, void *ctx) {
    char buf[512];
    for (size_t i = 0; i < s->n_locations; i++) {
        const ppk_pprof_location *l = s->locations[i];
        size_t n = l->n_lines ? l->n_lines : 1;
        for (size_t k = 0; k < n; k++) fn(ctx, pk_frame_name(l, k, buf, sizeof buf));
    }
}

/* ---- names as text ------------------------------------------------------------------ */
static int escaped(unsigned char c, int semicolon) {
    return c < 0x20 || c == 0x7f || (semicolon && c == ';');
}

/* Writes s's n bytes to out (room for 4 * n), escaped: returns the length written. */
static size_t escape(char *out, const char *s, size_t n, int semicolon) {
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (escaped(c, semicolon)) {
            out[k++] = '\\';
            out[k++] = 'x';
            out[k++] = hex[c >> 4];
            out[k++] = hex[c & 15];
        } else {
            out[k++] = (char)c;
        }
    }
    return k;
}

/* Writes s's n bytes to standard output, escaped (no ';' escaped). */
static void put_text(const char *s, size_t n) {
    char buf[256];
    for (size_t i = 0; i < n; i += 64) {
        size_t m = n - i < 64 ? n - i : 64;
        fwrite(buf, 1, escape(buf, s + i, m, 0), stdout);
    }
}

/* ---- top and diff ------------------------------------------------------------------- */
typedef struct agg {
    table *t;
    int side;
    int64_t v;
    uint64_t stamp;
    int leaf_done;
} agg;

static void agg_frame(void *ctx, ppk_str name) {
    agg *a = ctx;
    size_t k = table_get(a->t, name.ptr, name.len); /* may move the entries */
    entry *e = &a->t->e[k];
    if (!a->leaf_done) {
        e->flat[a->side] = (int64_t)((uint64_t)e->flat[a->side] + (uint64_t)a->v);
        a->leaf_done = 1;
    }
    if (e->seen != a->stamp) {
        e->seen = a->stamp;
        e->cum[a->side] = (int64_t)((uint64_t)e->cum[a->side] + (uint64_t)a->v);
    }
}

/* Whether s is a base sample of a diff profile: go tool pprof -diff_base gives those, and
 * only those, the string label pprof::base=true. */
static int diff_base(const ppk_pprof_sample *s) {
    for (size_t i = 0; i < s->n_labels; i++)
        if (str_eq(s->labels[i].key, PPK_STR("pprof::base")) &&
            str_eq(s->labels[i].str, PPK_STR("true")))
            return 1;
    return 0;
}

/* Adds profile p's values of type `ti` to the table, and their absolute values to
 * sums[0], the base samples' (diff_base) to sums[1]. */
static void aggregate(table *t, const ppk_pprof *p, size_t ti, int side, uint64_t *stamp,
                      uint64_t sums[2]) {
    for (size_t i = 0; i < p->n_samples; i++) {
        const ppk_pprof_sample *s = &p->samples[i];
        int64_t v = s->values[ti];
        if (v == 0) continue;
        uint64_t a = v < 0 ? -(uint64_t)v : (uint64_t)v;
        sums[0] += a;
        if (diff_base(s)) sums[1] += a;
        agg g = {t, side, v, ++*stamp, 0};
        each_frame(s, agg_frame, &g);
    }
}

static const char *human(int64_t v, const char *unit, int exact, char *buf, size_t size) {
    static const struct {
        const char *unit;
        double div[3];
        const char *name[3];
        const char *base;
    } scales[] = {{"nanoseconds", {1e9, 1e6, 1e3}, {"s", "ms", "us"}, "ns"},
                  {"bytes", {1073741824.0, 1048576.0, 1024.0}, {"GB", "MB", "kB"}, "B"}};
    if (!exact)
        for (size_t i = 0; i < 2; i++) {
            if (strcmp(unit, scales[i].unit) != 0) continue;
            double a = v < 0 ? -(double)v : (double)v;
            for (int k = 0; k < 3; k++)
                if (a >= scales[i].div[k]) {
                    snprintf(buf, size, "%.2f%s", (double)v / scales[i].div[k],
                             scales[i].name[k]);
                    return buf;
                }
            snprintf(buf, size, "%lld%s", (long long)v, scales[i].base);
            return buf;
        }
    snprintf(buf, size, "%lld", (long long)v);
    return buf;
}

static int64_t abs64(int64_t v) { return v < 0 ? (int64_t)(0 - (uint64_t)v) : v; }

static int bytes_cmp(const entry *a, const entry *b) {
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(a->name, b->name, n);
    return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int by_flat(const void *x, const void *y) {
    const entry *a = x, *b = y;
    uint64_t fa = (uint64_t)abs64(a->flat[0]), fb = (uint64_t)abs64(b->flat[0]);
    if (fa != fb) return fa > fb ? -1 : 1;
    return bytes_cmp(a, b);
}

static int by_change(const void *x, const void *y) {
    const entry *a = x, *b = y;
    uint64_t ca = (uint64_t)abs64(a->flat[1] - a->flat[0]);
    uint64_t cb = (uint64_t)abs64(b->flat[1] - b->flat[0]);
    if (ca != cb) return ca > cb ? -1 : 1;
    return bytes_cmp(a, b);
}

/* |v| as a percentage of total. */
static double pct(double v, uint64_t total) {
    return total ? 100.0 * (v < 0 ? -v : v) / (double)total : 0.0;
}

static char *unit_of(const ppk_pprof *p, size_t ti) {
    ppk_str u = p->sample_types[ti].unit;
    char *s = pk_xrealloc(NULL, u.len + 1);
    if (u.len) memcpy(s, u.ptr, u.len);
    s[u.len] = 0;
    return s;
}

typedef struct opts {
    const char *sample_type;
    long n;
    int exact;
    const char **files;
    size_t n_files;
} opts;

static int cmd_top(const opts *o) {
    table t = {0};
    uint64_t sums[2] = {0, 0}, stamp = 0;
    ppk_pprof *first = NULL;
    char *unit = NULL;
    for (size_t i = 0; i < o->n_files; i++) {
        ppk_pprof *p = pk_load(o->files[i]);
        size_t ti = pk_type_index(p, o->files[i], o->sample_type);
        if (!first) {
            first = p;
            unit = unit_of(p, ti);
        } else if (!pk_same_types(first, p)) {
            fprintf(stderr, "pprofkit top: %s: its sample types differ from %s's\n",
                    o->files[i], o->files[0]);
            exit(1);
        }
        aggregate(&t, p, ti, 0, &stamp, sums);
        if (p != first) ppk_pprof_free(p);
    }
    ppk_pprof_free(first);
    uint64_t total = sums[1] ? sums[1] : sums[0]; /* a diff profile's: its base's */
    if (t.n) qsort(t.e, t.n, sizeof *t.e, by_flat); /* t.e is NULL without samples */
    size_t shown = o->n > 0 && (size_t)o->n < t.n ? (size_t)o->n : t.n;
    char a[64], b[64];
    if (total <= INT64_MAX) human((int64_t)total, unit, o->exact, a, sizeof a);
    else snprintf(a, sizeof a, "%llu", (unsigned long long)total);
    printf("Showing %zu of %zu functions; total %s (", shown, t.n, a);
    put_text(unit, strlen(unit));
    printf(")\n");
    printf("%10s %7s %7s %10s %7s  %s\n", "flat", "flat%", "sum%", "cum", "cum%", "name");
    double sum = 0; /* sum%'s: a double, as the flat values' sum may not fit an int64 */
    for (size_t i = 0; i < shown; i++) {
        const entry *e = &t.e[i];
        sum += (double)e->flat[0];
        printf("%10s %6.2f%% %6.2f%% %10s %6.2f%%  ",
               human(e->flat[0], unit, o->exact, a, sizeof a), pct((double)e->flat[0], total),
               pct(sum, total), human(e->cum[0], unit, o->exact, b, sizeof b),
               pct((double)e->cum[0], total));
        put_text(e->name, e->len);
        putchar('\n');
    }
    free(unit);
    table_free(&t);
    return 0;
}

static int cmd_diff(const opts *o) {
    table t = {0};
    uint64_t stamp = 0, sums[2] = {0, 0};
    char *unit[2];
    for (int side = 0; side < 2; side++) {
        ppk_pprof *p = pk_load(o->files[side]);
        size_t ti = pk_type_index(p, o->files[side], o->sample_type);
        unit[side] = unit_of(p, ti);
        aggregate(&t, p, ti, side, &stamp, sums);
        ppk_pprof_free(p);
    }
    if (strcmp(unit[0], unit[1]) != 0) {
        fprintf(stderr, "pprofkit diff: the profiles' units differ (%s, %s)\n", unit[0],
                unit[1]);
        exit(1);
    }
    size_t n = 0;
    for (size_t i = 0; i < t.n; i++)
        if (t.e[i].flat[0] != t.e[i].flat[1]) t.e[n++] = t.e[i];
        else free(t.e[i].name);
    t.n = n; /* the slots are stale from here on: no more lookups */
    if (t.n) qsort(t.e, t.n, sizeof *t.e, by_change);
    size_t shown = o->n > 0 && (size_t)o->n < t.n ? (size_t)o->n : t.n;
    printf("%zu functions changed; showing %zu\n", t.n, shown);
    printf("%10s %10s %10s  %s\n", "before", "after", "change", "name");
    for (size_t i = 0; i < shown; i++) {
        const entry *e = &t.e[i];
        char a[64], b[64], c[64];
        int64_t d = (int64_t)((uint64_t)e->flat[1] - (uint64_t)e->flat[0]);
        human(abs64(d), unit[0], o->exact, c + 1, sizeof c - 1);
        c[0] = d >= 0 ? '+' : '-';
        printf("%10s %10s %10s  ", human(e->flat[0], unit[0], o->exact, a, sizeof a),
               human(e->flat[1], unit[0], o->exact, b, sizeof b), c);
        put_text(e->name, e->len);
        putchar('\n');
    }
    free(unit[0]);
    free(unit[1]);
    table_free(&t);
    return 0;
}

/* ---- collapsed ---------------------------------------------------------------------- */
/* A sample's frame names, the leaf first, escaped (';' too): their bytes in `chars`,
 * frame i's at end[i-1]. */
typedef struct stackbuf {
    char *chars;
    size_t len, cap;
    size_t *end;
    size_t n, n_cap;
} stackbuf;

static void push_frame(void *ctx, ppk_str name) {
    stackbuf *sb = ctx;
    if (sb->len + 4 * name.len > sb->cap) {
        sb->cap = (sb->len + 4 * name.len) * 2;
        sb->chars = pk_xrealloc(sb->chars, sb->cap);
    }
    sb->len += escape(sb->chars + sb->len, name.ptr, name.len, 1);
    if (sb->n == sb->n_cap) {
        sb->n_cap = sb->n_cap ? sb->n_cap * 2 : 64;
        sb->end = pk_xrealloc(sb->end, sb->n_cap * sizeof *sb->end);
    }
    sb->end[sb->n++] = sb->len;
}

static int cmd_collapsed(const opts *o) {
    table t = {0};
    ppk_pprof *first = NULL;
    stackbuf sb = {0};
    char *key = NULL;
    size_t key_cap = 0;
    for (size_t i = 0; i < o->n_files; i++) {
        ppk_pprof *p = pk_load(o->files[i]);
        size_t ti = pk_type_index(p, o->files[i], o->sample_type);
        if (!first) {
            first = p;
        } else if (!pk_same_types(first, p)) {
            fprintf(stderr, "pprofkit collapsed: %s: its sample types differ from %s's\n",
                    o->files[i], o->files[0]);
            exit(1);
        }
        for (size_t k = 0; k < p->n_samples; k++) {
            const ppk_pprof_sample *s = &p->samples[k];
            int64_t v = s->values[ti];
            if (v == 0 || s->n_locations == 0) continue;
            sb.n = sb.len = 0;
            each_frame(s, push_frame, &sb);
            size_t need = sb.len + sb.n;
            if (need > key_cap) {
                key_cap = need * 2;
                key = pk_xrealloc(key, key_cap);
            }
            size_t at = 0;
            for (size_t f = sb.n; f-- > 0;) { /* the root first */
                size_t start = f ? sb.end[f - 1] : 0, n = sb.end[f] - start;
                if (n) memcpy(key + at, sb.chars + start, n);
                at += n;
                if (f) key[at++] = ';';
            }
            size_t row = table_get(&t, key, at); /* may move the entries */
            entry *e = &t.e[row];
            e->flat[0] = (int64_t)((uint64_t)e->flat[0] + (uint64_t)v);
        }
        if (p != first) ppk_pprof_free(p);
    }
    ppk_pprof_free(first);
    for (size_t i = 0; i < t.n; i++) printf("%s %lld\n", t.e[i].name, (long long)t.e[i].flat[0]);
    free(key);
    free(sb.chars);
    free(sb.end);
    table_free(&t);
    return 0;
}

/* ---- otlp --------------------------------------------------------------------------- */
static int cmd_otlp(const char *file, const char *output) {
    ppk_pprof *p = pk_load(file);
    ppk_otlp_config cfg;
    ppk_otlp_config_init(&cfg);
    char err[256];
    int rc = ppk_otlp_config_from_env(&cfg, err, sizeof err);
    ppk_bytes req = {0};
    if (!rc) rc = ppk_otlp_encode(p, &cfg.resource, NULL, &req, err, sizeof err);
    ppk_pprof_free(p);
    if (rc) {
        fprintf(stderr, "pprofkit otlp: %s\n", err[0] ? err : ppk_strerror(rc));
        return 1;
    }
    FILE *f = output && strcmp(output, "-") ? fopen(output, "wb") : stdout;
    int bad = !f || fwrite(req.data, 1, req.len, f) != req.len;
    if (f && f != stdout && fclose(f)) bad = 1;
    ppk_bytes_free(&req);
    if (bad) {
        fprintf(stderr, "pprofkit otlp: %s: %s\n", output, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- arguments ---------------------------------------------------------------------- */
static void usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "pprofkit%s%s: ", *pk_cmd ? " " : "", pk_cmd);
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", USAGE);
    exit(2);
}

int main(int argc, char **argv) {
    if (argc < 2) usage_error("%s", "a command is required");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(HELP, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("pprofkit %s\n", PPK_VERSION_STRING);
        return 0;
    }
    pk_cmd = argv[1];
    int top = !strcmp(pk_cmd, "top"), diff = !strcmp(pk_cmd, "diff");
    int collapsed = !strcmp(pk_cmd, "collapsed"), flame = !strcmp(pk_cmd, "flame");
    int otlp = !strcmp(pk_cmd, "otlp");
    if (!top && !diff && !collapsed && !flame && !otlp) {
        pk_cmd = "";
        usage_error("unknown command '%s'", argv[1]);
    }
    opts o = {NULL, 20, 0, NULL, 0};
    const char *output = NULL, *title = NULL;
    o.files = pk_xrealloc(NULL, (size_t)argc * sizeof *o.files);
    int only_files = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (only_files || a[0] != '-' || !strcmp(a, "-")) {
            o.files[o.n_files++] = a;
        } else if (!strcmp(a, "--")) {
            only_files = 1;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(HELP, stdout);
            free(o.files);
            return 0;
        } else if (!otlp && (!strcmp(a, "--sample-type") || !strncmp(a, "--sample-type=", 14))) {
            if (a[13] == '=') o.sample_type = a + 14;
            else if (i + 1 < argc) o.sample_type = argv[++i];
            else usage_error("%s needs a value", a);
        } else if ((flame || otlp) && (!strcmp(a, "-o") || !strcmp(a, "--output") ||
                             !strncmp(a, "--output=", 9))) {
            if (a[1] == '-' && a[8] == '=') output = a + 9;
            else if (i + 1 < argc) output = argv[++i];
            else usage_error("%s needs a value", a);
        } else if (flame && (!strcmp(a, "--title") || !strncmp(a, "--title=", 8))) {
            if (a[7] == '=') title = a + 8;
            else if (i + 1 < argc) title = argv[++i];
            else usage_error("%s needs a value", a);
        } else if ((top || diff) && (!strcmp(a, "-n") || !strncmp(a, "-n=", 3))) {
            const char *v = a[2] == '=' ? a + 3 : i + 1 < argc ? argv[++i] : NULL;
            char *end;
            errno = 0;
            o.n = v ? strtol(v, &end, 10) : -1;
            if (!v || !*v || *end || errno || o.n < 0) usage_error("-n wants a count, not '%s'", v ? v : "");
        } else if ((top || diff) && !strcmp(a, "--exact")) {
            o.exact = 1;
        } else {
            usage_error("unknown option '%s'", a);
        }
    }
    if (diff && o.n_files != 2) usage_error("%s", "diff takes two files, BEFORE and AFTER");
    if (o.n_files == 0) usage_error("%s", "no FILE given");
    if (flame && (!output || !*output)) usage_error("%s", "-o OUT.html is required");
    if (otlp && o.n_files != 1) usage_error("%s", "otlp takes one FILE");
    int rc = otlp        ? cmd_otlp(o.files[0], output)
             : top       ? cmd_top(&o)
             : diff      ? cmd_diff(&o)
             : collapsed ? cmd_collapsed(&o)
                         : pk_flame(o.files, o.n_files, o.sample_type, title, output);
    free(o.files);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "pprofkit %s: writing the output: %s\n", pk_cmd, strerror(errno));
        return 1;
    }
    return rc;
}
