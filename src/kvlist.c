/*
 * kvlist.c - key=value lists (kvlist.h): OTEL_RESOURCE_ATTRIBUTES and
 * OTEL_EXPORTER_OTLP_HEADERS, checked, walked and percent-decoded.
 */
#include <stdio.h>
#include <string.h>

#include "kvlist.h"
#include "utf8.h"

static ppk_str trim(ppk_str s) {
    while (s.len && (s.ptr[0] == ' ' || s.ptr[0] == '\t')) s.ptr++, s.len--;
    while (s.len && (s.ptr[s.len - 1] == ' ' || s.ptr[s.len - 1] == '\t')) s.len--;
    return s;
}

int ppk__kv_next(ppk_str *rest, ppk_str *key, ppk_str *value) {
    for (;;) {
        if (!rest->len) return 0;
        const char *comma = memchr(rest->ptr, ',', rest->len);
        size_t n = comma ? (size_t)(comma - rest->ptr) : rest->len;
        ppk_str item = trim((ppk_str){rest->ptr, n});
        rest->ptr += n + (comma != NULL);
        rest->len -= n + (comma != NULL);
        if (!item.len) continue;
        const char *eq = memchr(item.ptr, '=', item.len);
        if (!eq) {
            *key = item;
            return -1;
        }
        *key = trim((ppk_str){item.ptr, (size_t)(eq - item.ptr)});
        *value = trim((ppk_str){eq + 1, (size_t)(item.ptr + item.len - eq - 1)});
        return key->len ? 1 : -1;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* The byte at v[*i] decoded (a %XX escape or itself), *i moved past it; -1 for a bad
 * escape. */
static int pct_byte(ppk_str v, size_t *i) {
    if (v.ptr[*i] != '%') return (unsigned char)v.ptr[(*i)++];
    if (*i + 2 >= v.len || hexval(v.ptr[*i + 1]) < 0 || hexval(v.ptr[*i + 2]) < 0)
        return -1;
    int b = hexval(v.ptr[*i + 1]) << 4 | hexval(v.ptr[*i + 2]);
    *i += 3;
    return b;
}

size_t ppk__pct_decode(ppk_str v, char *out) {
    size_t k = 0;
    for (size_t i = 0; i < v.len;) {
        int b = pct_byte(v, &i);
        if (b < 0) b = (unsigned char)v.ptr[i++]; /* unchecked input: kept as it is */
        out[k++] = (char)b;
    }
    return k;
}

/* 1 when v decodes to valid UTF-8 without control characters. */
static int value_ok(ppk_str v) {
    uint8_t buf[64];
    size_t have = 0, i = 0;
    for (;;) {
        while (have < sizeof buf && i < v.len) {
            int b = pct_byte(v, &i);
            if (b < 0x20 || b == 0x7f) return 0; /* a bad escape too */
            buf[have++] = (uint8_t)b;
        }
        size_t k = 0;
        while (k < have) {
            size_t n = ppk__utf8_seq(buf + k, have - k);
            if (n) {
                k += n;
            } else if (i < v.len && have - k < 4) {
                break; /* a character cut by the buffer's end: complete it first */
            } else {
                return 0;
            }
        }
        memmove(buf, buf + k, have - k);
        have -= k;
        if (i == v.len && !have) return 1;
    }
}

int ppk__kv_check(ppk_str list, const char *what, char *err, size_t err_len) {
    if (!list.ptr && list.len) return PPK_ENULL;
    ppk_str rest = list, key, val;
    int r, item = 0;
    while ((r = ppk__kv_next(&rest, &key, &val))) {
        item++;
        int bad = r < 0 || !value_ok(val);
        for (size_t i = 0; i < key.len && !bad; i++)
            bad = key.ptr[i] <= 0x20 || key.ptr[i] >= 0x7f;
        if (bad) {
            /* Named by its place and key only: a header's value may be a secret. */
            int shown = r > 0 ? (int)(key.len > 100 ? 100 : key.len) : 0;
            if (err && err_len)
                snprintf(err, err_len,
                         "%s: item %d%s%.*s%s is not key=value with a visible ASCII key and "
                         "a percent-encoded UTF-8 value",
                         what, item, r > 0 ? " (key \"" : "", shown, key.ptr, r > 0 ? "\")" : "");
            return PPK_EINVAL;
        }
    }
    return 0;
}
