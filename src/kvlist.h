/*
 * kvlist.h - the key=value lists of OTEL_RESOURCE_ATTRIBUTES and
 * OTEL_EXPORTER_OTLP_HEADERS, shared by the OTLP encoder (otlp.c) and sink (sink_otlp.c).
 *
 * A list is key=value items separated by commas; spaces and tabs around keys and values
 * are ignored, and so are empty items. Keys are visible ASCII without '=' and ','.
 * Values are percent-encoded (a comma is %2C); decoded, they must be valid UTF-8 without
 * control characters (a header value never carries a line break).
 */
#ifndef PPK_KVLIST_H
#define PPK_KVLIST_H

#include <stddef.h>

#include "pprofkit.h"

/* The next item of *rest (advanced past it): 1 with its key and its value (still
 * encoded), 0 at the end, -1 for a malformed item (no '=', an empty key). */
int ppk__kv_next(ppk_str *rest, ppk_str *key, ppk_str *value);
/* 0 when every item of `list` is well formed, else PPK_EINVAL with a message naming
 * `what`, the item's place and its key (never its value). */
int ppk__kv_check(ppk_str list, const char *what, char *err, size_t err_len);
/* Decodes a checked value into out (room for value.len bytes); returns its length. */
size_t ppk__pct_decode(ppk_str value, char *out);

#endif
