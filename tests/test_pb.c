/*
 * test_pb.c - the protocol buffers writer (src/pb.h), byte for byte.
 *
 * Small expectations are hand-written byte arrays taken from the protobuf encoding
 * rules; large ones are built with the test's own varint writer (ref_varint below), so
 * no expectation comes from the code under test. Each case frees its buffer and checks
 * that the ppk__mem holds no byte. The streaming cases check that bytes streamed through
 * the bounded buffer, over many hand-overs, equal those built whole in one buffer, raw
 * and after zlib's and zstd's own decompressors.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>
#include <zstd.h>

#include "check.h"
#include "pb.h"

typedef struct env {
    ppk__mem mem;
    ppk__pb pb;
} env;

static void env_init(env *e) {
    ppk__mem_init(&e->mem, NULL);
    ppk__pb_init(&e->pb, &e->mem);
}

static void env_done(env *e) {
    ppk__pb_destroy(&e->pb);
    CHECK_EQ_U64(e->mem.bytes, 0);
}

/* The test's own base-128 varint writer: low 7 bits first, high bit = more follow. */
static size_t ref_varint(uint8_t *out, uint64_t v) {
    size_t n = 0;
    do {
        uint8_t b = (uint8_t)(v & 0x7F);
        v >>= 7;
        if (v) b |= 0x80;
        out[n++] = b;
    } while (v);
    return n;
}

/* Checks that the buffer holds exactly the n bytes at want. */
#define CHECK_BUF(e, want, n)                                                              \
    do {                                                                                   \
        CHECK_EQ_U64((e)->pb.len, (n));                                                    \
        if ((e)->pb.len == (size_t)(n)) CHECK_MEM((e)->pb.buf, (want), (n));                \
    } while (0)

/* ---- varints ------------------------------------------------------------------------- */

typedef struct vcase {
    uint64_t v;
    uint8_t bytes[10];
    size_t n;
} vcase;

static void test_varint_bytes(void) {
    static const vcase cases[] = {
        {0, {0x00}, 1},
        {1, {0x01}, 1},
        {127, {0x7F}, 1},
        {128, {0x80, 0x01}, 2},
        {300, {0xAC, 0x02}, 2},
        {16383, {0xFF, 0x7F}, 2},
        {16384, {0x80, 0x80, 0x01}, 3},
        {2097151, {0xFF, 0xFF, 0x7F}, 3},
        {2097152, {0x80, 0x80, 0x80, 0x01}, 4},
        {0xFFFFFFFFull, {0xFF, 0xFF, 0xFF, 0xFF, 0x0F}, 5},
        {0x100000000ull, {0x80, 0x80, 0x80, 0x80, 0x10}, 5},
        {0x7FFFFFFFFFFFFFFFull, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F}, 9},
        {0x8000000000000000ull,
         {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01},
         10},
        {UINT64_MAX, {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}, 10},
        /* int64 -2 as its two's complement */
        {(uint64_t)(int64_t)-2, {0xFE, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01}, 10},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const vcase *c = &cases[i];
        env e;
        env_init(&e);
        CHECK_EQ_INT(ppk__pb_reserve(&e.pb, PPK_PB_VARINT_MAX), 0);
        ppk__pb_varint(&e.pb, c->v);
        CHECK_BUF(&e, c->bytes, c->n);
        CHECK_EQ_U64(ppk__pb_varint_size(c->v), c->n);
        /* The test's reference writer agrees with the table. */
        uint8_t ref[10];
        CHECK_EQ_U64(ref_varint(ref, c->v), c->n);
        CHECK_MEM(ref, c->bytes, c->n);
        env_done(&e);
    }
}

/* An int64 -1 written with ppk__pb_uint: tag 08 then ten bytes. */
static void test_negative_int64(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 32), 0);
    int64_t v = -1;
    ppk__pb_uint(&e.pb, 1, (uint64_t)v);
    static const uint8_t want[] = {0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
                                   0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    CHECK_BUF(&e, want, sizeof want);
    CHECK_EQ_U64(ppk__pb_varint_size((uint64_t)v), 10);
    env_done(&e);
}

/* varint_size agrees with the bytes written at every 7-bit boundary. */
static void test_varint_size_boundaries(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 64 * 3 * PPK_PB_VARINT_MAX), 0);
    int bad = 0;
    for (int bit = 0; bit < 64; bit++) {
        uint64_t p = (uint64_t)1 << bit;
        uint64_t vals[3] = {p - 1, p, p + 1};
        for (int k = 0; k < 3; k++) {
            size_t before = e.pb.len;
            ppk__pb_varint(&e.pb, vals[k]);
            size_t wrote = e.pb.len - before;
            uint8_t ref[10];
            size_t rn = ref_varint(ref, vals[k]);
            if (wrote != rn || memcmp(e.pb.buf + before, ref, rn) != 0) bad++;
            if (ppk__pb_varint_size(vals[k]) != rn) bad++;
        }
    }
    CHECK_EQ_INT(bad, 0);
    env_done(&e);
}

/* ---- tags and fields ----------------------------------------------------------------- */

static void test_tags(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 64), 0);
    ppk__pb_tag(&e.pb, 1, PPK_PB_VARINT);
    ppk__pb_tag(&e.pb, 1, PPK_PB_LEN);
    ppk__pb_tag(&e.pb, 15, PPK_PB_VARINT);
    ppk__pb_tag(&e.pb, 15, PPK_PB_LEN);
    ppk__pb_tag(&e.pb, 16, PPK_PB_VARINT);
    ppk__pb_tag(&e.pb, 16, PPK_PB_LEN);
    ppk__pb_tag(&e.pb, (1u << 29) - 1, PPK_PB_VARINT); /* the largest field number */
    ppk__pb_tag(&e.pb, (1u << 29) - 1, PPK_PB_LEN);
    static const uint8_t want[] = {
        0x08, 0x0A, 0x78, 0x7A, 0x80, 0x01, 0x82, 0x01,
        0xF8, 0xFF, 0xFF, 0xFF, 0x0F, /* (2^29-1) << 3 = 0xFFFFFFF8 */
        0xFA, 0xFF, 0xFF, 0xFF, 0x0F,
    };
    CHECK_BUF(&e, want, sizeof want);
    env_done(&e);
}

static void test_uint_fields(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 64), 0);
    ppk__pb_uint(&e.pb, 1, 0);      /* written even when 0 */
    ppk__pb_uint_nz(&e.pb, 2, 0);   /* omitted */
    ppk__pb_uint_nz(&e.pb, 3, 150); /* written */
    ppk__pb_uint(&e.pb, 4, 1);
    ppk__pb_uint_nz(&e.pb, 5, 0);
    static const uint8_t want[] = {0x08, 0x00, 0x18, 0x96, 0x01, 0x20, 0x01};
    CHECK_BUF(&e, want, sizeof want);
    env_done(&e);
}

static void test_bytes_fields(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 512), 0);
    ppk__pb_bytes(&e.pb, 6, "", 0);
    ppk__pb_bytes(&e.pb, 6, NULL, 0);
    ppk__pb_bytes(&e.pb, 6, "hi", 2);
    static const uint8_t want_small[] = {0x32, 0x00, 0x32, 0x00, 0x32, 0x02, 'h', 'i'};
    CHECK_BUF(&e, want_small, sizeof want_small);

    /* 200 bytes: a two-byte length, C8 01. */
    uint8_t body[200];
    for (int i = 0; i < 200; i++) body[i] = (uint8_t)(i * 3 + 1);
    e.pb.len = 0;
    ppk__pb_bytes(&e.pb, 2, body, sizeof body);
    uint8_t want[203] = {0x12, 0xC8, 0x01};
    memcpy(want + 3, body, 200);
    CHECK_BUF(&e, want, sizeof want);
    env_done(&e);
}

/* ---- nested messages ----------------------------------------------------------------- */

/* Writes a nested message of field `field` whose body is `body_len` bytes of a pattern,
 * with ppk__pb_begin/end, and checks it byte for byte against tag, minimal length, body.
 * Something is written before it so that `start` is not at offset 0. */
static void check_nested(uint32_t field, size_t body_len) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 16 + PPK_PB_NEST_MAX + body_len), 0);
    ppk__pb_uint(&e.pb, 1, 7);
    size_t start = ppk__pb_begin(&e.pb, field);
    for (size_t i = 0; i < body_len; i++) e.pb.buf[e.pb.len++] = (uint8_t)(i * 31 + 5);
    ppk__pb_end(&e.pb, start);

    uint8_t *want = malloc(16 + 10 + body_len);
    CHECK(want != NULL);
    if (!want) {
        env_done(&e);
        return;
    }
    size_t n = 0;
    want[n++] = 0x08;
    want[n++] = 0x07;
    n += ref_varint(want + n, ((uint64_t)field << 3) | 2);
    n += ref_varint(want + n, body_len);
    for (size_t i = 0; i < body_len; i++) want[n++] = (uint8_t)(i * 31 + 5);
    if (e.pb.len != n) fprintf(stderr, "  field %u body %zu\n", (unsigned)field, body_len);
    CHECK_BUF(&e, want, n);
    free(want);
    env_done(&e);
}

static void test_nested_lengths(void) {
    static const size_t lens[] = {0, 1, 127, 128, 129, 300, 16383, 16384, 16385, 2097152};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        check_nested(2, lens[i]);
        check_nested(16, lens[i]); /* a two-byte tag */
    }
}

/* An inner message that crosses 128 bytes inside an outer one: both lengths are right and
 * what follows the inner message in the outer one is intact. */
static void test_nested_in_nested(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 1024), 0);
    size_t outer = ppk__pb_begin(&e.pb, 3);
    ppk__pb_uint(&e.pb, 1, 42);
    size_t inner = ppk__pb_begin(&e.pb, 2);
    uint8_t body[130];
    for (int i = 0; i < 130; i++) body[i] = (uint8_t)(0xA0 ^ i);
    ppk__pb_bytes(&e.pb, 1, body, 130); /* inner body: 1 + 2 + 130 = 133 bytes */
    ppk__pb_end(&e.pb, inner);
    ppk__pb_uint(&e.pb, 4, 300);
    ppk__pb_end(&e.pb, outer);

    /* outer body: 08 2A | 12 85 01 <133> | 20 AC 02 = 2 + 3 + 133 + 3 = 141 */
    uint8_t want[256];
    size_t n = 0;
    want[n++] = 0x1A;
    want[n++] = 0x8D; /* 141 */
    want[n++] = 0x01;
    want[n++] = 0x08;
    want[n++] = 0x2A;
    want[n++] = 0x12;
    want[n++] = 0x85; /* 133 */
    want[n++] = 0x01;
    want[n++] = 0x0A;
    want[n++] = 0x82; /* 130 */
    want[n++] = 0x01;
    memcpy(want + n, body, 130);
    n += 130;
    want[n++] = 0x20;
    want[n++] = 0xAC;
    want[n++] = 0x02;
    CHECK_EQ_U64(n, 3 + 141);
    CHECK_BUF(&e, want, n);
    env_done(&e);
}

/* Three levels, each crossing a length boundary, plus a short sibling after them. */
static void test_nested_three_levels(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 40000), 0);
    size_t a = ppk__pb_begin(&e.pb, 1);
    size_t b = ppk__pb_begin(&e.pb, 2);
    size_t c = ppk__pb_begin(&e.pb, 3);
    for (int i = 0; i < 16400; i++) e.pb.buf[e.pb.len++] = (uint8_t)i;
    ppk__pb_end(&e.pb, c);
    ppk__pb_end(&e.pb, b);
    size_t d = ppk__pb_begin(&e.pb, 4);
    ppk__pb_end(&e.pb, d);
    ppk__pb_end(&e.pb, a);

    uint8_t *want = malloc(40000);
    CHECK(want != NULL);
    if (!want) {
        env_done(&e);
        return;
    }
    size_t cb = 16400;
    size_t bb = 1 + 3 + cb;              /* tag 1A, 3-byte length */
    size_t ab = 1 + 3 + bb + 2;          /* tag 12, 3-byte length; then 22 00 */
    size_t n = 0;
    want[n++] = 0x0A;
    n += ref_varint(want + n, ab);
    want[n++] = 0x12;
    n += ref_varint(want + n, bb);
    want[n++] = 0x1A;
    n += ref_varint(want + n, cb);
    for (size_t i = 0; i < cb; i++) want[n++] = (uint8_t)i;
    want[n++] = 0x22;
    want[n++] = 0x00;
    CHECK_EQ_U64(ppk__pb_varint_size(ab), 3);
    CHECK_BUF(&e, want, n);
    free(want);
    env_done(&e);
}

/* Growth keeps what was written; the buffer is reused, not shrunk, when len goes back
 * to 0; a reserve within capacity allocates nothing. */
static void test_reserve_growth(void) {
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 10), 0);
    size_t cap = e.pb.cap;
    CHECK(cap >= 10);
    size_t mem = e.mem.bytes;
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, cap), 0); /* fits exactly: no growth */
    CHECK_EQ_U64(e.pb.cap, cap);
    CHECK_EQ_U64(e.mem.bytes, mem);

    /* Write varints through many growths; the stream must match a reference. */
    enum { N = 20000 };
    uint8_t *ref = malloc((size_t)N * 10);
    CHECK(ref != NULL);
    if (!ref) {
        env_done(&e);
        return;
    }
    size_t rn = 0;
    int grew = 0;
    for (uint64_t i = 0; i < N; i++) {
        uint64_t v = i * 0x9E3779B97F4A7C15ull;
        size_t c0 = e.pb.cap;
        CHECK_EQ_INT(ppk__pb_reserve(&e.pb, PPK_PB_VARINT_MAX), 0);
        if (e.pb.cap != c0) grew++;
        CHECK(e.pb.cap - e.pb.len >= PPK_PB_VARINT_MAX);
        ppk__pb_varint(&e.pb, v);
        rn += ref_varint(ref + rn, v);
    }
    CHECK(grew >= 3);
    CHECK_BUF(&e, ref, rn);
    CHECK_EQ_U64(e.mem.bytes, e.pb.cap);

    /* A huge reservation fails cleanly and keeps the bytes. */
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, SIZE_MAX - 1), PPK_ENOMEM);
    CHECK_BUF(&e, ref, rn);

    /* Reuse: len back to 0, the capacity stays. */
    size_t big = e.pb.cap;
    e.pb.len = 0;
    CHECK_EQ_INT(ppk__pb_reserve(&e.pb, 100), 0);
    CHECK_EQ_U64(e.pb.cap, big);
    free(ref);
    env_done(&e);
    /* Destroy twice, and destroy of a never-used writer, are harmless. */
    ppk__pb_destroy(&e.pb);
    env e2;
    env_init(&e2);
    env_done(&e2);
}

/* The same writes give the same bytes (determinism across buffers). */
static void test_deterministic(void) {
    env e1, e2;
    env_init(&e1);
    env_init(&e2);
    env *es[2] = {&e1, &e2};
    for (int k = 0; k < 2; k++) {
        ppk__pb *pb = &es[k]->pb;
        CHECK_EQ_INT(ppk__pb_reserve(pb, 4096), 0);
        for (uint32_t i = 0; i < 50; i++) {
            size_t s = ppk__pb_begin(pb, 2);
            ppk__pb_uint_nz(pb, 1, i);
            ppk__pb_bytes(pb, 2, "abcdefghij", i % 11);
            ppk__pb_end(pb, s);
        }
    }
    CHECK_EQ_U64(e1.pb.len, e2.pb.len);
    if (e1.pb.len == e2.pb.len) CHECK_MEM(e1.pb.buf, e2.pb.buf, e1.pb.len);
    /* Spot check the first message: 12 02 | 12 00 (i = 0: field 1 omitted). */
    static const uint8_t head[] = {0x12, 0x02, 0x12, 0x00, 0x12, 0x05, 0x08, 0x01, 0x12, 0x01, 'a'};
    CHECK_MEM(e1.pb.buf, head, sizeof head);
    env_done(&e1);
    env_done(&e2);
}

/* ---- streaming ----------------------------------------------------------------------- */

/* Writes `n` top-level messages of varied sizes (a nested message holding a varint, a
 * packed array and a string), each after ppk__pb_room, as pprof.c does; message `big`
 * (if < n) carries a body of `big_len` bytes. */
static int write_messages(ppk__pb *pb, uint32_t n, uint32_t big, size_t big_len) {
    static uint8_t blob[3000];
    for (size_t i = 0; i < sizeof blob; i++) blob[i] = (uint8_t)(i * 7 + (i >> 5));
    for (uint32_t i = 0; i < n; i++) {
        size_t slen = i == big ? big_len : (i * 37) % sizeof blob;
        size_t nv = i % 40;
        int rc = ppk__pb_room(pb, 2 * PPK_PB_NEST_MAX + (nv + 2) * PPK_PB_VARINT_MAX + slen);
        if (rc) return rc;
        size_t b = ppk__pb_begin(pb, 2);
        ppk__pb_uint(pb, 1, (uint64_t)i * 0x9E3779B97F4A7C15ull);
        size_t a = ppk__pb_begin(pb, 2);
        for (size_t k = 0; k < nv; k++) ppk__pb_varint(pb, (i + k) % 5000);
        ppk__pb_end(pb, a);
        if (i == big) {
            size_t s = ppk__pb_begin(pb, 3);
            for (size_t k = 0; k < big_len; k++) pb->buf[pb->len++] = (uint8_t)(k * 13);
            ppk__pb_end(pb, s);
        } else {
            ppk__pb_bytes(pb, 3, blob, slen);
        }
        ppk__pb_end(pb, b);
    }
    return 0;
}

/* The whole message in one buffer, the reference. */
static void whole(env *e, uint32_t n, uint32_t big, size_t big_len) {
    env_init(e);
    CHECK_EQ_INT(write_messages(&e->pb, n, big, big_len), 0);
}

static ppk_bytes streamed(env *e, ppk_codec codec, int level, uint32_t n, uint32_t big,
                          size_t big_len) {
    ppk_bytes out = {0};
    CHECK_EQ_INT(ppk__pb_stream_begin(&e->pb, codec, level), 0);
    CHECK_EQ_INT(write_messages(&e->pb, n, big, big_len), 0);
    CHECK(e->pb.cap < 2 * PPK_PB_BUF + 2 * big_len); /* never the whole message */
    CHECK_EQ_INT(ppk__pb_stream_end(&e->pb, &e->mem.a, &out), 0);
    return out;
}

static int inflated_equal(const ppk_bytes *gz, const uint8_t *want, size_t n) {
    uint8_t *back = malloc(n + 1);
    z_stream zs;
    memset(&zs, 0, sizeof zs);
    int ok = back && inflateInit2(&zs, 15 + 16) == Z_OK;
    if (ok) {
        zs.next_in = gz->data;
        zs.avail_in = (uInt)gz->len;
        zs.next_out = back;
        zs.avail_out = (uInt)n + 1;
        ok = inflate(&zs, Z_FINISH) == Z_STREAM_END && zs.total_out == n &&
             memcmp(back, want, n) == 0;
        inflateEnd(&zs);
    }
    free(back);
    return ok;
}

static int unzstd_equal(const ppk_bytes *z, const uint8_t *want, size_t n) {
    uint8_t *back = malloc(n + 1);
    size_t r = back ? ZSTD_decompress(back, n + 1, z->data, z->len) : 0;
    int ok = back && !ZSTD_isError(r) && r == n && memcmp(back, want, n) == 0;
    free(back);
    return ok;
}

/* ~6 MB in 20,000 messages: the buffer is handed over a few dozen times; the raw stream
 * equals the whole message, gzip and zstd (each level kind) decompress to it, and a
 * second stream through the reused contexts gives the same bytes. */
static void test_stream_many_handovers(void) {
    enum { N = 20000 };
    env ref;
    whole(&ref, N, N, 0);
    CHECK(ref.pb.len > 20 * (size_t)PPK_PB_BUF);
    env e;
    env_init(&e);
    ppk_bytes raw = streamed(&e, PPK_CODEC_NONE, 0, N, N, 0);
    CHECK_EQ_U64(raw.len, ref.pb.len);
    if (raw.len == ref.pb.len) CHECK_MEM(raw.data, ref.pb.buf, raw.len);
    CHECK_EQ_U64(e.pb.cap, PPK_PB_BUF);
    ppk_bytes_free(&raw);

    const struct {
        ppk_codec codec;
        int level;
    } cases[] = {{PPK_CODEC_GZIP, 0}, {PPK_CODEC_GZIP, 6}, {PPK_CODEC_ZSTD, 0},
                 {PPK_CODEC_ZSTD, 1}, {PPK_CODEC_ZSTD, 3}, {PPK_CODEC_GZIP, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ppk_bytes a = streamed(&e, cases[c].codec, cases[c].level, N, N, 0);
        ppk_bytes b = streamed(&e, cases[c].codec, cases[c].level, N, N, 0);
        CHECK(a.len < ref.pb.len / 2);
        if (cases[c].codec == PPK_CODEC_GZIP)
            CHECK(inflated_equal(&a, ref.pb.buf, ref.pb.len));
        else
            CHECK(unzstd_equal(&a, ref.pb.buf, ref.pb.len));
        CHECK(a.len == b.len && memcmp(a.data, b.data, a.len) == 0); /* deterministic */
        ppk_bytes_free(&a);
        ppk_bytes_free(&b);
    }
    env_done(&e);
    env_done(&ref);
}

/* One top-level message of 1 MiB, four times the buffer, in the middle of small ones:
 * the buffer grows for it, the bytes are right, and a shrink gives the growth back. */
static void test_stream_message_larger_than_buffer(void) {
    const size_t big_len = 4 * PPK_PB_BUF;
    env ref;
    whole(&ref, 500, 250, big_len);
    env e;
    env_init(&e);
    ppk_bytes raw = streamed(&e, PPK_CODEC_NONE, 0, 500, 250, big_len);
    CHECK_EQ_U64(raw.len, ref.pb.len);
    if (raw.len == ref.pb.len) CHECK_MEM(raw.data, ref.pb.buf, raw.len);
    CHECK(e.pb.cap > big_len);
    ppk_bytes_free(&raw);
    ppk_bytes z = streamed(&e, PPK_CODEC_ZSTD, 0, 500, 250, big_len);
    CHECK(unzstd_equal(&z, ref.pb.buf, ref.pb.len));
    ppk_bytes_free(&z);
    ppk__pb_shrink(&e.pb, e.pb.len);
    CHECK(e.pb.cap <= PPK_PB_BUF);
    /* An empty stream is a valid, empty output. */
    ppk_bytes empty = streamed(&e, PPK_CODEC_GZIP, 0, 0, 0, 0);
    CHECK(inflated_equal(&empty, (const uint8_t *)"", 0));
    ppk_bytes_free(&empty);
    env_done(&e);
    env_done(&ref);
}

/* A stream dropped halfway leaves nothing behind, and the next stream is unaffected. */
static void test_stream_abort(void) {
    env ref;
    whole(&ref, 3000, 3000, 0);
    env e;
    env_init(&e);
    CHECK_EQ_INT(ppk__pb_stream_begin(&e.pb, PPK_CODEC_ZSTD, 0), 0);
    CHECK_EQ_INT(write_messages(&e.pb, 2000, 2000, 0), 0);
    ppk__pb_stream_abort(&e.pb);
    CHECK_EQ_U64(e.pb.cs.n_chunks, 0);
    ppk_bytes z = streamed(&e, PPK_CODEC_ZSTD, 0, 3000, 3000, 0);
    CHECK(unzstd_equal(&z, ref.pb.buf, ref.pb.len));
    ppk_bytes_free(&z);
    env_done(&e);
    env_done(&ref);
}

int main(void) {
    RUN(test_varint_bytes);
    RUN(test_negative_int64);
    RUN(test_varint_size_boundaries);
    RUN(test_tags);
    RUN(test_uint_fields);
    RUN(test_bytes_fields);
    RUN(test_nested_lengths);
    RUN(test_nested_in_nested);
    RUN(test_nested_three_levels);
    RUN(test_reserve_growth);
    RUN(test_deterministic);
    RUN(test_stream_many_handovers);
    RUN(test_stream_message_larger_than_buffer);
    RUN(test_stream_abort);
    return check_summary();
}
