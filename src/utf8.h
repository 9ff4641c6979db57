/*
 * utf8.h - UTF-8 validation, repair and cutting at a character boundary.
 *
 * pprof strings must be valid UTF-8 (Go's decoder and many backends reject or mangle
 * anything else), and pprofkit bounds their length. Valid means RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF. Pure functions; any thread.
 */
#ifndef PPK_UTF8_H
#define PPK_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length of the valid sequence at s[0..n) (1..4), or 0 if s does not start with one. */
size_t ppk__utf8_seq(const uint8_t *s, size_t n);
/* 1 if the n bytes are valid UTF-8. */
int ppk__utf8_valid(const uint8_t *s, size_t n);
/*
 * Writes to dst (room for max bytes) the string s with each byte that does not start a
 * valid sequence replaced by U+FFFD (EF BF BD), cut to at most max bytes at a character
 * boundary. Returns the length written; *repaired and *truncated are set to 0 or 1.
 */
size_t ppk__utf8_repair(const uint8_t *s, size_t n, uint8_t *dst, size_t max, int *repaired,
                        int *truncated);

/* Repairs counted while fitting strings. */
typedef struct ppk__fit_counts {
    uint64_t repaired;
    uint64_t truncated;
} ppk__fit_counts;

/*
 * s made fit for pprof, the one way every string entering the library is (at its edge:
 * a builder's record, the function dictionary, a profile's config, an endpoint, a rule):
 * s itself when it is valid UTF-8 of at most max bytes; else its repair cut to max bytes
 * (ppk__utf8_repair) written to dst (room for max bytes), the repairs added to *c.
 * Returns where the fitted bytes are (s or dst) and sets *len to their length.
 */
const uint8_t *ppk__utf8_fit(const uint8_t *s, size_t *len, size_t max, uint8_t *dst,
                             ppk__fit_counts *c);

#endif
