/*
 * test_fuzz_reader.c - fuzz target: ppk_pprof_read on any bytes.
 *
 * The first byte chooses what is read: the rest of the input as it is (raw, or gzip or
 * zstd if it starts with their magic), or a valid profile made by the library (one of 8,
 * chosen by the next byte) mutated 0 to 7 times as the following bytes say (flip a bit,
 * set a byte, cut, insert a byte, at an offset): mutations reach the checks deep inside
 * a profile, which random bytes rarely pass. Either may then be gzip- or
 * zstd-compressed here; and the first byte's bits may set a small max_decoded_bytes (a
 * "bomb" bound) and an allocator that fails at the Nth allocation.
 *
 * Checked: the result is 0 or an expected code (PPK_EFORMAT, PPK_ETOOBIG, PPK_ENOMEM only
 * from the failing allocator), with a message, and *out NULL on error; nothing is left
 * allocated (the counting allocator, and LeakSanitizer); an accepted profile keeps the
 * promises of reader_check.h's rc_check_invariants and reads the same again; compressed
 * or not, the same protobuf reads the same; and when tests/pprof_read.h (a decoder that
 * shares no code with the library, more lenient in places) also accepts the protobuf,
 * both describe it identically. Every accepted profile is also encoded as OTLP
 * (ppk_otlp_encode): 0, or PPK_ENOMEM from the failing allocator, nothing left allocated.
 *
 * See fuzz.h for the two builds (libFuzzer, and the ctest regression run).
 */
#define FUZZ_NAME "fuzz_reader"
#include "fuzz.h"
#include "test_alloc.h"
#include "reader_check.h"

#include <zlib.h>

/* A valid profile made by the library: raw protobuf, malloc'ed. */
static uint8_t *make_profile(unsigned seed, size_t *len) {
    ppk_profile_config cfg;
    ppk_profile_config_init(&cfg);
    cfg.sample_types[0] = (ppk_value_type){PPK_STR("cpu-time"), PPK_STR("nanoseconds")};
    cfg.sample_types[1] = (ppk_value_type){PPK_STR("samples"), PPK_STR("count")};
    cfg.n_sample_types = 1 + seed % 2;
    cfg.period_type = cfg.sample_types[0];
    cfg.period = 1000;
    ppk_profile *p = NULL;
    if (ppk_profile_create(&cfg, &p) != 0) abort();
    static const ppk_mapping map = {0x1000, 0x9000, 0, PPK_STR("/bin/app"), PPK_STR("b1d")};
    uint64_t x = seed * 2654435761u + 1;
    for (unsigned i = 0; i < 3 + seed * 2; i++) {
        ppk_frame fr[5];
        char names[5][8];
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        size_t n = 1 + (x >> 61) % 5;
        for (size_t k = 0; k < n; k++) {
            snprintf(names[k], sizeof names[k], "f%u", (unsigned)((x >> (3 * k)) % 7));
            int native = ((x >> (20 + k)) & 7) == 0;
            fr[k] = (ppk_frame){native ? (ppk_str){0} : ppk_cstr(names[k]), {0},
                                native ? (ppk_str){0} : PPK_STR("m.c"), 2, (int64_t)k,
                                native ? 0x1000 + k : 0, (x >> (30 + k)) & 1 ? &map : NULL};
        }
        ppk_label lab[2] = {{PPK_STR("thread"), 0, PPK_STR("main"), 0, {0}},
                            {PPK_STR("bytes"), 1, {0}, (int64_t)(x % 5000), PPK_STR("bytes")}};
        int64_t v[2] = {(int64_t)(x % 100000) - 10, 1};
        ppk_sample_data s = {fr, n, lab, (x >> 40) % 3, v, cfg.n_sample_types,
                             (x >> 44) % 4 == 0 ? 1700000000000000000 : 0};
        if (ppk_profile_add(p, &s) != 0) abort();
    }
    ppk_bytes b;
    ppk_encode_options o = {PPK_CODEC_NONE, 0, 1700000000000000000, 1700000001000000000};
    if (ppk_profile_encode(p, &o, &b) != 0) abort();
    uint8_t *copy = malloc(b.len);
    if (!copy) abort();
    memcpy(copy, b.data, b.len);
    *len = b.len;
    ppk_bytes_free(&b);
    ppk_profile_free(p);
    return copy;
}

/* The protobuf (or any bytes) to read, malloc'ed: the rest of the input as it is, or a
 * valid profile mutated as the rest of the input says. */
static uint8_t *make_raw(fz_in *in, int mutate, size_t *len) {
    if (!mutate) {
        size_t n = (size_t)(in->end - in->p);
        uint8_t *out = malloc(n ? n : 1);
        if (!out) abort();
        if (n) memcpy(out, in->p, n);
        *len = n;
        return out;
    }
    size_t plen;
    uint8_t *prof = make_profile(fz_u8(in) % 8, &plen);
    unsigned mutations = fz_u8(in) % 8;
    uint8_t *out = malloc(plen + mutations);
    if (!out) abort();
    memcpy(out, prof, plen);
    free(prof);
    *len = plen;
    for (unsigned i = 0; i < mutations && *len; i++) {
        uint8_t op = fz_u8(in);
        size_t at = ((size_t)fz_u8(in) << 8 | fz_u8(in)) % *len;
        switch (op % 4) {
        case 0: out[at] ^= (uint8_t)(1u << (op >> 5)); break;
        case 1: out[at] = (uint8_t)(op >> 2); break;
        case 2: *len = at; break;
        default:
            memmove(out + at + 1, out + at, *len - at);
            out[at] = (uint8_t)(op >> 2);
            (*len)++;
        }
    }
    return out;
}

/* raw compressed with `codec` (malloc'ed). */
static uint8_t *compress_with(ppk_codec codec, const uint8_t *raw, size_t n, size_t *len) {
    if (codec == PPK_CODEC_GZIP) {
        uLong cap = compressBound((uLong)n) + 64;
        uint8_t *out = malloc(cap);
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        if (!out || deflateInit2(&zs, 6, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK)
            abort();
        zs.next_in = (Bytef *)(uintptr_t)raw;
        zs.avail_in = (uInt)n;
        zs.next_out = out;
        zs.avail_out = (uInt)cap;
        if (deflate(&zs, Z_FINISH) != Z_STREAM_END) abort();
        *len = cap - zs.avail_out;
        deflateEnd(&zs);
        return out;
    }
    size_t cap = ZSTD_compressBound(n);
    uint8_t *out = malloc(cap);
    if (!out) abort();
    *len = ZSTD_compress(out, cap, raw, n, 1);
    if (ZSTD_isError(*len)) abort();
    return out;
}

static int has_magic(const uint8_t *p, size_t n) {
    return (n >= 2 && p[0] == 0x1f && p[1] == 0x8b) ||
           (n >= 4 && memcmp(p, "\x28\xb5\x2f\xfd", 4) == 0);
}

/* Reads; checks the code, the message, the invariants; frees. Returns the description
 * (malloc'ed) or NULL when refused; *rc_out gets the code. */
static char *read_and_check(const uint8_t *data, size_t len, size_t max_decoded,
                            long fail_at, int *rc_out) {
    test_alloc c = {.fail_at = fail_at};
    ppk_read_options o = {max_decoded, 0, test_allocator(&c)};
    ppk_pprof *p = (ppk_pprof *)&c;
    char err[256];
    int rc = ppk_pprof_read(data, len, &o, &p, err, sizeof err);
    *rc_out = rc;
    char *text = NULL;
    if (rc == 0) {
        const char *wrong = rc_check_invariants(p);
        if (wrong) FZ_FAIL("accepted profile: %s", wrong);
        text = describe(p);
        /* Whatever the reader accepts, the OTLP encoder takes: 0, or PPK_ENOMEM from a
         * failing allocator, nothing left allocated. */
        test_alloc oc = {.fail_at = fail_at};
        ppk_allocator oa = test_allocator(&oc);
        ppk_otlp_resource res = {.service_name = PPK_STR("fuzz")};
        ppk_bytes req = {0};
        int orc = ppk_otlp_encode(p, &res, &oa, &req, err, sizeof err);
        if (orc && !(orc == PPK_ENOMEM && fail_at)) FZ_FAIL("ppk_otlp_encode: %d (%s)", orc, err);
        if (!orc && req.len < 20) FZ_FAIL("ppk_otlp_encode: %zu bytes", req.len);
        ppk_bytes_free(&req);
        if (oc.outstanding != 0) FZ_FAIL("ppk_otlp_encode left %lld bytes", oc.outstanding);
        ppk_pprof_free(p);
    } else {
        if (rc != PPK_EFORMAT && rc != PPK_ETOOBIG && !(rc == PPK_ENOMEM && fail_at))
            FZ_FAIL("unexpected code %d (%s)", rc, err);
        if (!err[0]) FZ_FAIL("code %d without a message", rc);
        if (p != NULL) FZ_FAIL("*out not NULL after an error");
    }
    if (c.outstanding != 0) FZ_FAIL("%lld bytes left allocated (code %d)", c.outstanding, rc);
    return text;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, data + size};
    uint8_t b = fz_u8(&in);
    int mutate = b & 1;
    ppk_codec codec = (b >> 1) % 3 == 1 ? PPK_CODEC_GZIP
                      : (b >> 1) % 3 == 2 ? PPK_CODEC_ZSTD : PPK_CODEC_NONE;
    size_t max_decoded = (b & 0x60) == 0x40 ? 64 + (size_t)(b >> 7) * 2048 : 0;
    long fail_at = (b & 0x60) == 0x60 ? 1 + (long)(b >> 7) * 3 + (long)(size % 5) : 0;
    size_t raw_len, len;
    uint8_t *raw = make_raw(&in, mutate, &raw_len);
    uint8_t *input = codec == PPK_CODEC_NONE ? raw : compress_with(codec, raw, raw_len, &len);
    if (codec == PPK_CODEC_NONE) len = raw_len;
    int rc, rc2;
    char *text = read_and_check(input, len, max_decoded, fail_at, &rc);
    if (text) {
        /* The same bytes read the same again, and under the default limits. */
        char *again = read_and_check(input, len, 0, 0, &rc2);
        if (!again || strcmp(text, again) != 0) FZ_FAIL("a second read differs (code %d)", rc2);
        free(again);
    }
    /* Compressed here: the protobuf itself reads the same. */
    if (codec != PPK_CODEC_NONE && !max_decoded && !fail_at && !has_magic(raw, raw_len)) {
        char *plain = read_and_check(raw, raw_len, 0, 0, &rc2);
        if ((plain == NULL) != (text == NULL) || (plain && strcmp(plain, text) != 0))
            FZ_FAIL("compressed (code %d) and raw (code %d) reads differ", rc, rc2);
        free(plain);
    }
    /* The independent decoder: when it accepts the protobuf too, the same content. */
    if (text && !has_magic(raw, raw_len)) {
        pr_profile pp;
        if (pr_parse(raw, raw_len, &pp) == 0) {
            char *theirs = pr_describe(&pp);
            if (strcmp(text, theirs) != 0)
                FZ_FAIL("the reader and pprof_read.h differ:\n%s---\n%s", text, theirs);
            free(theirs);
            pr_free(&pp);
        }
    }
    if (mutate && !max_decoded && !fail_at && raw_len && rc == PPK_ENOMEM)
        FZ_FAIL("PPK_ENOMEM without a failing allocator");
    free(text);
    if (input != raw) free(input);
    free(raw);
    return 0;
}
