/*
 * test_utf8.c - UTF-8 validation and repair (src/utf8.h).
 *
 * Expected results are written out by hand from RFC 3629 (Table 3-7 of the Unicode
 * standard): well-formed sequences, then every class of ill-formed one. The repair is
 * checked byte for byte, and its output is checked to be valid over a deterministic
 * pseudo-random corpus. Nothing here allocates.
 */
#include <stdint.h>
#include <string.h>

#include "check.h"
#include "utf8.h"

#define S(lit) (const uint8_t *)(lit), (sizeof(lit) - 1)

static int valid(const char *s, size_t n) { return ppk__utf8_valid((const uint8_t *)s, n); }

/* ---- seq and valid on single sequences ---------------------------------------------- */

typedef struct seq_case {
    const char *bytes;
    size_t n;
    size_t want; /* ppk__utf8_seq at offset 0 */
} seq_case;

#define SC(lit, want) {lit, sizeof(lit) - 1, want}

static void test_seq_valid_sequences(void) {
    static const seq_case cases[] = {
        SC("A", 1),
        SC("\x00", 1),                 /* NUL is valid UTF-8 */
        SC("\x7F", 1),                 /* U+007F, last 1-byte */
        SC("\xC2\x80", 2),             /* U+0080, first 2-byte */
        SC("\xC3\xA9", 2),             /* U+00E9 */
        SC("\xDF\xBF", 2),             /* U+07FF, last 2-byte */
        SC("\xE0\xA0\x80", 3),         /* U+0800, first 3-byte */
        SC("\xE2\x82\xAC", 3),         /* U+20AC */
        SC("\xED\x9F\xBF", 3),         /* U+D7FF, just below the surrogates */
        SC("\xEE\x80\x80", 3),         /* U+E000, just above them */
        SC("\xEF\xBF\xBD", 3),         /* U+FFFD */
        SC("\xEF\xBF\xBF", 3),         /* U+FFFF, last 3-byte */
        SC("\xF0\x90\x80\x80", 4),     /* U+10000, first 4-byte */
        SC("\xF0\x9F\x98\x80", 4),     /* U+1F600 */
        SC("\xF3\xBF\xBF\xBF", 4),     /* U+FFFFF */
        SC("\xF4\x8F\xBF\xBF", 4),     /* U+10FFFF, the last code point */
        SC("\xC3\xA9zz", 2),           /* trailing bytes are not part of it */
        SC("\xF0\x9F\x98\x80\x80", 4), /* nor is a stray continuation after it */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const seq_case *c = &cases[i];
        size_t got = ppk__utf8_seq((const uint8_t *)c->bytes, c->n);
        if (got != c->want) fprintf(stderr, "  case %zu\n", i);
        CHECK_EQ_U64(got, c->want);
        if (c->n == c->want) CHECK_EQ_INT(valid(c->bytes, c->n), 1);
    }
    CHECK_EQ_INT(valid("", 0), 1);
    CHECK_EQ_INT(valid("h\xC3\xA9llo \xE2\x82\xAC \xF0\x9F\x98\x80!", 16), 1);
}

static void test_seq_invalid_sequences(void) {
    static const seq_case cases[] = {
        SC("\x80", 0),                 /* lone continuation */
        SC("\xBF", 0),
        SC("\xC0\x80", 0),             /* overlong NUL */
        SC("\xC1\xBF", 0),             /* overlong U+007F */
        SC("\xE0\x80\x80", 0),         /* overlong 3-byte */
        SC("\xE0\x9F\xBF", 0),         /* overlong U+07FF */
        SC("\xF0\x80\x80\x80", 0),     /* overlong 4-byte */
        SC("\xF0\x8F\xBF\xBF", 0),     /* overlong U+FFFF */
        SC("\xED\xA0\x80", 0),         /* U+D800, first surrogate */
        SC("\xED\xBF\xBF", 0),         /* U+DFFF, last surrogate */
        SC("\xF4\x90\x80\x80", 0),     /* U+110000 */
        SC("\xF4\xBF\xBF\xBF", 0),
        SC("\xF5\x80\x80\x80", 0),     /* F5..FF never appear */
        SC("\xF7\xBF\xBF\xBF", 0),
        SC("\xF8\x88\x80\x80\x80", 0),
        SC("\xFE", 0),
        SC("\xFF", 0),
        SC("\xC2", 0),                 /* truncated at the end */
        SC("\xE2\x82", 0),
        SC("\xE2", 0),
        SC("\xF0\x9F\x98", 0),
        SC("\xF0\x9F", 0),
        SC("\xF0", 0),
        SC("\xC2\x41", 0),             /* a non-continuation where one is needed */
        SC("\xC2\xC2\x80", 0),
        SC("\xE2\x41\xAC", 0),
        SC("\xE2\x82\x41", 0),
        SC("\xF0\x9F\x41\x80", 0),
        SC("\xF0\x9F\x98\x41", 0),
        SC("\xE2\x82\xC0", 0),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const seq_case *c = &cases[i];
        size_t got = ppk__utf8_seq((const uint8_t *)c->bytes, c->n);
        if (got != c->want) fprintf(stderr, "  case %zu\n", i);
        CHECK_EQ_U64(got, 0);
        CHECK_EQ_INT(valid(c->bytes, c->n), 0);
    }
    /* seq honours n: a complete sequence in memory but cut by n is not valid. */
    CHECK_EQ_U64(ppk__utf8_seq((const uint8_t *)"\xE2\x82\xAC", 2), 0);
    CHECK_EQ_U64(ppk__utf8_seq((const uint8_t *)"\xF0\x9F\x98\x80", 3), 0);
    CHECK_EQ_U64(ppk__utf8_seq((const uint8_t *)"\xC3\xA9", 1), 0);
    CHECK_EQ_INT(valid("ab\xE2\x82\xAC", 4), 0);
}

/* Every lead byte, alone: only ASCII is a sequence by itself. */
static void test_seq_every_single_byte(void) {
    int bad = 0;
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        size_t want = b < 0x80 ? 1 : 0;
        if (ppk__utf8_seq(&c, 1) != want) bad++;
        if (ppk__utf8_valid(&c, 1) != (int)want) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

/* Every 2-byte lead with every second byte: valid exactly for C2..DF + 80..BF. */
static void test_seq_every_two_bytes(void) {
    int bad = 0;
    for (int a = 0xC0; a < 0xE0; a++)
        for (int b = 0; b < 256; b++) {
            uint8_t s[2] = {(uint8_t)a, (uint8_t)b};
            size_t want = (a >= 0xC2 && b >= 0x80 && b <= 0xBF) ? 2 : 0;
            if (ppk__utf8_seq(s, 2) != want) bad++;
        }
    CHECK_EQ_INT(bad, 0);
}

/* The 8-byte ASCII fast path: a bad byte at each offset of a long ASCII run is found,
 * and a valid multi-byte char at each offset is accepted. */
static void test_fast_path_offsets(void) {
    for (size_t len = 19; len <= 40; len += 21) { /* 19 and 40: room for a 3-byte char */
        for (size_t off = 0; off <= 16; off++) {
            uint8_t buf[48];
            memset(buf, 'a', sizeof buf);
            CHECK_EQ_INT(ppk__utf8_valid(buf, len), 1);
            buf[off] = 0xFF;
            if (ppk__utf8_valid(buf, len) != 0)
                fprintf(stderr, "  0xFF at %zu of %zu accepted\n", off, len);
            CHECK_EQ_INT(ppk__utf8_valid(buf, len), 0);
            buf[off] = 0x80; /* a continuation byte in the middle of ASCII */
            CHECK_EQ_INT(ppk__utf8_valid(buf, len), 0);
            /* A valid 3-byte char there (it fits: off + 3 <= 19). */
            memcpy(buf + off, "\xE2\x82\xAC", 3);
            CHECK_EQ_INT(ppk__utf8_valid(buf, len), 1);
            /* ...but its last byte cut off by n: invalid. */
            CHECK_EQ_INT(ppk__utf8_valid(buf, off + 2), 0);
        }
    }
    /* A bad byte as the very last byte of a run of 8k + r bytes. */
    for (size_t len = 1; len <= 33; len++) {
        uint8_t buf[40];
        memset(buf, 'z', sizeof buf);
        buf[len - 1] = 0xC3;
        CHECK_EQ_INT(ppk__utf8_valid(buf, len), 0);
        CHECK_EQ_INT(ppk__utf8_valid(buf, len - 1), 1);
    }
}

/* ---- repair -------------------------------------------------------------------------- */

typedef struct rep_case {
    const char *in;
    size_t in_n;
    size_t max;
    const char *out;
    size_t out_n;
    int repaired, truncated;
} rep_case;

#define RC(in, max, out, r, t) {in, sizeof(in) - 1, max, out, sizeof(out) - 1, r, t}

static void test_repair_bytes(void) {
    static const rep_case cases[] = {
        RC("", 16, "", 0, 0),
        RC("abc", 16, "abc", 0, 0),
        RC("a\xff" "b", 16, "a\xEF\xBF\xBD" "b", 1, 0),
        RC("\xff", 16, "\xEF\xBF\xBD", 1, 0),
        RC("\x80\x80", 16, "\xEF\xBF\xBD\xEF\xBF\xBD", 1, 0),
        RC("\xC0\x80", 16, "\xEF\xBF\xBD\xEF\xBF\xBD", 1, 0),
        RC("\xED\xA0\x80", 16, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 1, 0),
        RC("\xF4\x90\x80\x80", 16, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD", 1, 0),
        /* A truncated sequence: its lead is bad, the continuation bytes too. */
        RC("x\xE2\x82", 16, "x\xEF\xBF\xBD\xEF\xBF\xBD", 1, 0),
        /* A bad lead followed by a valid char: the char survives. */
        RC("\xE2\xC3\xA9", 16, "\xEF\xBF\xBD\xC3\xA9", 1, 0),
        RC("\xC3\xA9\xE2\x82\xAC", 16, "\xC3\xA9\xE2\x82\xAC", 0, 0),
        /* Cuts. */
        RC("abcdef", 4, "abcd", 0, 1),
        RC("abcd", 4, "abcd", 0, 0),
        RC("ab\xE2\x82\xAC", 4, "ab", 0, 1),
        RC("a\xF0\x9F\x98\x80", 4, "a", 0, 1),
        RC("\xF0\x9F\x98\x80", 4, "\xF0\x9F\x98\x80", 0, 0),
        RC("\xff\xff", 4, "\xEF\xBF\xBD", 1, 1),
        RC("\xff" "abc", 4, "\xEF\xBF\xBD" "a", 1, 1),
        RC("abc", 0, "", 0, 1),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const rep_case *c = &cases[i];
        uint8_t out[64];
        memset(out, 0xEE, sizeof out);
        int r = -1, t = -1;
        size_t n = ppk__utf8_repair((const uint8_t *)c->in, c->in_n, out, c->max, &r, &t);
        int ok = n == c->out_n && memcmp(out, c->out, n) == 0 && r == c->repaired &&
                 t == c->truncated;
        if (!ok) fprintf(stderr, "  repair case %zu\n", i);
        CHECK_EQ_U64(n, c->out_n);
        if (n == c->out_n) CHECK_MEM(out, c->out, n);
        CHECK_EQ_INT(r, c->repaired);
        CHECK_EQ_INT(t, c->truncated);
        /* Nothing written past max. */
        int overrun = 0;
        for (size_t k = c->max; k < sizeof out; k++)
            if (out[k] != 0xEE) overrun = 1;
        CHECK_EQ_INT(overrun, 0);
    }
}

/* The cut bad byte: "abc\xff" with room for 5 keeps "abc" and reports the truncation.
 * (Whether *repaired is 1 when no U+FFFD made it out is not asserted.) */
static void test_repair_cut_replacement(void) {
    uint8_t out[8];
    int r, t;
    size_t n = ppk__utf8_repair(S("abc\xff"), out, 5, &r, &t);
    CHECK_EQ_U64(n, 3);
    CHECK_MEM(out, "abc", 3);
    CHECK_EQ_INT(t, 1);
}

/* Over a deterministic corpus of random byte strings (biased towards UTF-8-looking
 * bytes), repair output is always valid, within max, and equal to the input when the
 * input was valid and fit; when nothing was repaired or cut, it is the input. */
static void test_repair_output_always_valid(void) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    static const uint8_t pool[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
                                   0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4,
                                   0xF5, 0xFF, 0x61, 0x62, 0xE2, 0x82, 0xAC, 0xC3, 0xA9};
    int bad_valid = 0, bad_len = 0, bad_same = 0, bad_flags = 0;
    for (int iter = 0; iter < 5000; iter++) {
        uint8_t in[40], out[128];
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = (size_t)(x % 41);
        for (size_t i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            in[i] = (x & 1) ? pool[(x >> 8) % sizeof pool] : (uint8_t)(x >> 16);
        }
        size_t max = (iter % 3 == 0) ? 128 : 4 + (size_t)((x >> 32) % 60);
        int r, t;
        size_t o = ppk__utf8_repair(in, n, out, max, &r, &t);
        if (!ppk__utf8_valid(out, o)) bad_valid++;
        if (o > max) bad_len++;
        int in_valid = ppk__utf8_valid(in, n);
        if (in_valid && n <= max && (o != n || memcmp(in, out, n) != 0)) bad_same++;
        if (in_valid && r) bad_flags++;
        if (!in_valid && !t && !r) bad_flags++; /* a cut may drop every bad byte */
        if (!t && !r && (o != n || memcmp(in, out, n) != 0)) bad_same++;
        /* Without a cut, the output is exactly as long as input + 2 per bad byte. */
        if (!t) {
            size_t bad = 0;
            for (size_t i = 0; i < n;) {
                size_t k = ppk__utf8_seq(in + i, n - i);
                if (!k) {
                    bad++;
                    k = 1;
                }
                i += k;
            }
            if (o != n + 2 * bad) bad_len++;
        }
    }
    CHECK_EQ_INT(bad_valid, 0);
    CHECK_EQ_INT(bad_len, 0);
    CHECK_EQ_INT(bad_same, 0);
    CHECK_EQ_INT(bad_flags, 0);
}

/* Fitting: a valid string within the limit is given back as it is, nothing counted; an
 * invalid one is repaired into dst, a long one cut there, each counted once. */
static void test_fit(void) {
    uint8_t dst[8];
    ppk__fit_counts c = {0, 0};
    const uint8_t ok[] = "h\xC3\xA9llo";
    size_t n = sizeof ok - 1;
    CHECK(ppk__utf8_fit(ok, &n, sizeof dst, dst, &c) == ok);
    CHECK_EQ_U64(n, sizeof ok - 1);
    CHECK_EQ_U64(c.repaired + c.truncated, 0);
    const uint8_t bad[] = "a\xff" "b";
    n = 3;
    CHECK(ppk__utf8_fit(bad, &n, sizeof dst, dst, &c) == dst);
    CHECK_MEM(dst, "a\xEF\xBF\xBD" "b", 5);
    CHECK_EQ_U64(n, 5);
    CHECK_EQ_U64(c.repaired, 1);
    CHECK_EQ_U64(c.truncated, 0);
    /* Valid but one byte too long: cut at a character boundary (before the 2-byte é). */
    const uint8_t lng[] = "abcdefg\xC3\xA9";
    n = sizeof lng - 1;
    CHECK(ppk__utf8_fit(lng, &n, sizeof dst, dst, &c) == dst);
    CHECK_EQ_U64(n, 7);
    CHECK_MEM(dst, "abcdefg", 7);
    CHECK_EQ_U64(c.repaired, 1);
    CHECK_EQ_U64(c.truncated, 1);
}

int main(void) {
    RUN(test_seq_valid_sequences);
    RUN(test_seq_invalid_sequences);
    RUN(test_seq_every_single_byte);
    RUN(test_seq_every_two_bytes);
    RUN(test_fast_path_offsets);
    RUN(test_repair_bytes);
    RUN(test_repair_cut_replacement);
    RUN(test_repair_output_always_valid);
    RUN(test_fit);
    return check_summary();
}
