/*
 * upload_util.c - what the upload sinks share besides the uploader (upload.h): the
 * growable byte buffer, and the configuration helpers (messages, environment variables,
 * checked string copies, the program's name, the upload config's defaults and rules).
 */
#include "upload.h"
#include "utf8.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory ------------------------------------------------------------------------ */

void ppk__ubuf_init(ppk__ubuf *b, ppk__mem *mem) {
    memset(b, 0, sizeof *b);
    b->mem = mem;
}

void ppk__ubuf_free(ppk__ubuf *b) {
    ppk__mem_free(b->mem, b->p, b->cap);
    b->p = NULL;
    b->len = b->cap = 0;
}

static int reserve(ppk__ubuf *b, size_t extra) {
    if (b->failed) return -1;
    if (extra > SIZE_MAX - b->len - 1) {
        b->failed = 1;
        return -1;
    }
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *p = ppk__mem_alloc(b->mem, cap);
    if (!p) {
        b->failed = 1;
        return -1;
    }
    if (b->len) memcpy(p, b->p, b->len);
    ppk__mem_free(b->mem, b->p, b->cap);
    b->p = p;
    b->cap = cap;
    return 0;
}

void ppk__ubuf_add(ppk__ubuf *b, const void *p, size_t n) {
    if (reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
}

void ppk__ubuf_adds(ppk__ubuf *b, const char *s) { ppk__ubuf_add(b, s, strlen(s)); }

void ppk__ubuf_addf(ppk__ubuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) {
        b->failed = 1; /* only short, fixed formats are used */
        return;
    }
    ppk__ubuf_add(b, tmp, (size_t)n);
}

void ppk__ubuf_add_json(ppk__ubuf *b, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            ppk__ubuf_add(b, e, 2);
        } else if (c < 0x20) {
            ppk__ubuf_addf(b, "\\u%04x", c);
        } else {
            ppk__ubuf_add(b, &s[i], 1);
        }
    }
}

void ppk__ubuf_nul(ppk__ubuf *b) {
    if (reserve(b, 0)) return;
    b->p[b->len] = 0;
}

/* ---- configuration helpers ----------------------------------------------------------- */

int ppk__upload_err(char *err, size_t err_len, const char *fmt, ...) {
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return PPK_EINVAL;
}

const char *ppk__upload_getenv(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int ppk__upload_null(ppk_str s, const char *what, char *err, size_t err_len) {
    if (s.ptr || !s.len) return 0;
    ppk__upload_err(err, err_len, "%s: NULL with a length", what);
    return PPK_ENULL;
}

int ppk__upload_nulls(const void *cfg, const ppk__upload_field *f, size_t n, char *err,
                      size_t err_len) {
    for (size_t i = 0; i < n; i++) {
        ppk_str s;
        memcpy(&s, (const char *)cfg + f[i].off, sizeof s);
        int rc = ppk__upload_null(s, f[i].name, err, err_len);
        if (rc) return rc;
    }
    return 0;
}

int ppk__upload_check_str(ppk_str s, const char *what, const char *forbid, char *err,
                          size_t err_len) {
    int rc = ppk__upload_null(s, what, err, err_len);
    if (rc) return rc;
    for (size_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        if (c < 0x20 || c == 0x7f)
            return ppk__upload_err(err, err_len, "%s: control character at byte %zu", what, i);
        /* The value is not shown: it may be a credential ("user:password" given as the
         * user). */
        if (forbid && strchr(forbid, c))
            return ppk__upload_err(err, err_len, "%s: character '%c' not allowed (byte %zu)",
                                   what, c, i);
    }
    /* They go into JSON (event.json), headers and URLs, which are UTF-8. */
    if (!ppk__utf8_valid((const uint8_t *)s.ptr, s.len))
        return ppk__upload_err(err, err_len, "%s: not valid UTF-8", what);
    return 0;
}

int ppk__upload_str(ppk__mem *m, ppk_str s, const char *what, const char *forbid, char **out,
                    char *err, size_t err_len) {
    *out = NULL;
    int rc = ppk__upload_check_str(s, what, forbid, err, err_len);
    if (rc) return rc;
    char *c = ppk__mem_alloc(m, s.len + 1);
    if (!c) return PPK_ENOMEM;
    if (s.len) memcpy(c, s.ptr, s.len);
    c[s.len] = 0;
    *out = c;
    return 0;
}

void ppk__upload_str_free(ppk__mem *m, char *s) {
    if (s) ppk__mem_free(m, s, strlen(s) + 1);
}

void ppk__upload_cut_to_text(char *s) {
    size_t n = strlen(s), i = 0;
    while (i < n && (unsigned char)s[i] >= 0x20 && s[i] != 0x7f) {
        size_t k = ppk__utf8_seq((const uint8_t *)s + i, n - i);
        if (!k) break;
        i += k;
    }
    s[i] = 0;
}

void ppk__upload_comm(char *out, size_t n) {
    snprintf(out, n, "pprofkit");
    FILE *f = fopen("/proc/self/comm", "re");
    if (!f) return;
    char buf[64];
    if (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n,")] = 0;
        ppk__upload_cut_to_text(buf);
        if (buf[0]) snprintf(out, n, "%s", buf);
    }
    fclose(f);
}

void ppk_upload_config_init(ppk_upload_config *cfg) {
    if (!cfg) return;
    memset(cfg, 0, sizeof *cfg);
    cfg->queue_len = 2;
    cfg->connect_timeout_ms = 3000;
    cfg->timeout_ms = 10000;
    cfg->retry_backoff_ms = 1000;
    cfg->shutdown_timeout_ms = 2000;
    cfg->fork_timeout_ms = 2000;
}

int ppk__upload_check_config(const ppk_upload_config *cfg, char *err, size_t err_len) {
    if (!cfg->queue_len || cfg->queue_len > 1024)
        return ppk__upload_err(err, err_len, "upload.queue_len: %zu is not in 1..1024",
                               cfg->queue_len);
    if (cfg->connect_timeout_ms <= 0 || cfg->timeout_ms <= 0 || cfg->retry_backoff_ms < 0 ||
        cfg->shutdown_timeout_ms < 0 || cfg->fork_timeout_ms < 0 ||
        cfg->timeout_ms > 86400000 || cfg->connect_timeout_ms > 86400000)
        return ppk__upload_err(err, err_len,
                               "upload: timeouts must be positive (backoff, shutdown and fork "
                               "timeouts may be 0) and at most a day");
    if ((cfg->allocator.alloc == NULL) != (cfg->allocator.free == NULL))
        return ppk__upload_err(err, err_len,
                               "upload.allocator: alloc and free must both be set (or both "
                               "NULL, for malloc)");
    return 0;
}
