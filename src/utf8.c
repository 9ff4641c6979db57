/*
 * utf8.c - UTF-8 validation and repair: see utf8.h.
 */
#include "utf8.h"

#include <string.h>

size_t ppk__utf8_seq(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0; /* continuation byte or overlong 2-byte lead */
    if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && s[1] < 0xA0) return 0;  /* overlong */
        if (c == 0xED && s[1] >= 0xA0) return 0; /* surrogate */
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4 || (s[1] & 0xC0) != 0x80 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80)
            return 0;
        if (c == 0xF0 && s[1] < 0x90) return 0;  /* overlong */
        if (c == 0xF4 && s[1] >= 0x90) return 0; /* above U+10FFFF */
        return 4;
    }
    return 0;
}

int ppk__utf8_valid(const uint8_t *s, size_t n) {
    /* Most profile strings are ASCII: OR them together eight bytes at a time and look
     * at the high bits once. Only a string with a non-ASCII byte is decoded. */
    uint64_t acc = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        acc |= w;
    }
    uint8_t tail = 0;
    for (; i < n; i++) tail |= s[i];
    if (!((acc & 0x8080808080808080ull) | (tail & 0x80))) return 1;
    for (i = 0; i < n;) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = ppk__utf8_seq(s + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

size_t ppk__utf8_repair(const uint8_t *s, size_t n, uint8_t *dst, size_t max, int *repaired,
                        int *truncated) {
    static const uint8_t fffd[3] = {0xEF, 0xBF, 0xBD};
    size_t i = 0, o = 0;
    *repaired = 0;
    *truncated = 0;
    while (i < n) {
        size_t k = ppk__utf8_seq(s + i, n - i);
        const uint8_t *src = s + i;
        size_t out = k;
        if (!k) {
            src = fffd;
            out = 3;
            k = 1;
        }
        if (o + out > max) {
            *truncated = 1;
            break;
        }
        if (src == fffd) *repaired = 1;
        memcpy(dst + o, src, out);
        o += out;
        i += k;
    }
    return o;
}

const uint8_t *ppk__utf8_fit(const uint8_t *s, size_t *len, size_t max, uint8_t *dst,
                             ppk__fit_counts *c) {
    if (*len <= max && ppk__utf8_valid(s, *len)) return s;
    int repaired, truncated;
    *len = ppk__utf8_repair(s, *len, dst, max, &repaired, &truncated);
    c->repaired += (uint64_t)repaired;
    c->truncated += (uint64_t)truncated;
    return dst;
}
