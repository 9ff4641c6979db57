/*
 * pyroscope_fix.h - an encoded profile made acceptable to Grafana Pyroscope's validation
 * (see pyroscope_fix.c).
 */
#ifndef PPK_PYROSCOPE_FIX_H
#define PPK_PYROSCOPE_FIX_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "upload.h"

/*
 * Reads the n bytes of an uncompressed profile.proto at `raw`. When Grafana Pyroscope
 * would refuse it for its names (a sample type with '-', a string-valued label whose key
 * is not a label name or whose value is over 2048 bytes), appends the profile with those
 * strings replaced to `out` and sets
 * *changed to 1; otherwise leaves `out` as it is and sets *changed to 0. Scratch memory
 * comes from m and is freed before the return.
 * @return 0; PPK_EFORMAT (not a well-formed profile.proto); PPK_ENOMEM (out->failed, or
 *         the scratch).
 */
int ppk__pyroscope_fix(ppk__mem *m, const uint8_t *raw, size_t n, ppk__ubuf *out,
                       int *changed);

#endif
