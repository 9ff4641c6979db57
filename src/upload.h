/*
 * upload.h - the machinery shared by the HTTP upload sinks: a bounded queue of copied
 * exports, one uploader thread per sink owning one curl handle, timeouts, one retry,
 * bounded shutdown, fork handling and statistics (see upload.c, and upload_curl.c for
 * the transfer).
 *
 * A sink file (sink_datadog.c, sink_pyroscope.c) supplies only what its backend needs,
 * through ppk__upload_ops: what to keep from an export besides its bytes (prepare, on
 * the exporting thread), how to turn a queued export into a URL, a body and a content
 * type (build, on the uploader thread), extra curl options, and what to redo in a forked
 * child. Both run with no lock held.
 */
#ifndef PPK_UPLOAD_H
#define PPK_UPLOAD_H

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "pprofkit.h"

/* A growable byte buffer; any append failure is sticky (`failed`) and checked once. */
typedef struct ppk__ubuf {
    ppk__mem *mem;
    char *p;
    size_t len, cap;
    int failed;
} ppk__ubuf;

void ppk__ubuf_init(ppk__ubuf *b, ppk__mem *mem);
void ppk__ubuf_free(ppk__ubuf *b);
void ppk__ubuf_add(ppk__ubuf *b, const void *p, size_t n);
void ppk__ubuf_adds(ppk__ubuf *b, const char *s);
void ppk__ubuf_addf(ppk__ubuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Appends `s` as the body of a JSON string (no quotes): escapes ", \ and controls. */
void ppk__ubuf_add_json(ppk__ubuf *b, const char *s, size_t n);
/* Appends a NUL (not counted in len), so p is a C string. */
void ppk__ubuf_nul(ppk__ubuf *b);

/* One queued export: a copy of what the sink needs from the ppk_export. */
typedef struct ppk__upload_job {
    uint8_t *data;
    size_t len;
    ppk_codec codec;
    int64_t start_ns, end_ns;
    uint64_t seq;
    char *extra; /* from ops.prepare, NUL-terminated; may be NULL */
    size_t extra_len;
} ppk__upload_job;

/* The most bytes of an answer's body kept for ops.answer. */
#define PPK__ANSWER_MAX (64u << 10)

typedef struct ppk__upload_ops {
    /* Exporting thread, inside write(): fill `extra` (e.g. endpoint counts). May be NULL.
     * 0, or a negative code (the export is then dropped and counted as invalid). */
    int (*prepare)(void *ctx, const ppk_export *e, ppk__ubuf *extra);
    /* Uploader thread: the request for a job. url gets a C string; ctype receives the
     * Content-Type value. 0, PPK_ENOMEM, or PPK_EINVAL (dropped as invalid). */
    int (*build)(void *ctx, const ppk__upload_job *job, ppk__ubuf *url, ppk__ubuf *body,
                 char *ctype, size_t ctype_len);
    /* Uploader thread, before each transfer: extra options. May be NULL. */
    void (*setopt)(void *ctx, CURL *h);
    /* In a forked child (atfork child handler). May be NULL. */
    void (*child)(void *ctx);
    /* Uploader thread: whether a failed HTTP status is retried. NULL: 408, 429, 5xx. */
    int (*retryable)(long status);
    /* Uploader thread, after a 2xx: reads the answer's body (its first
     * PPK__ANSWER_MAX bytes). Returns 1 when the server accepted part of the data only,
     * with *rejected the items it refused (partial_successes, rejected_profiles), else 0.
     * May be NULL: the body is then not kept. */
    int (*answer)(void *ctx, const char *body, size_t len, uint64_t *rejected);
    /* Frees ctx, at destroy. */
    void (*free)(void *ctx);
} ppk__upload_ops;

/* The upload config's own rules (queue, timeouts, allocator): 0, or PPK_EINVAL with err
 * naming the field. Sink constructors check it before they allocate anything. */
int ppk__upload_check_config(const ppk_upload_config *cfg, char *err, size_t err_len);

/*
 * Creates the shared part of an upload sink and fills `out` with its write and destroy.
 * `headers` ("Name: value" strings, copied) are sent with every request. On failure ctx
 * is freed with ops->free. curl_global_init runs here, once per process.
 * 0, PPK_EINVAL (a bad config value, explained in err), PPK_ENOMEM, PPK_ESYS.
 */
int ppk__upload_create(const ppk_upload_config *cfg, const ppk__upload_ops *ops, void *ctx,
                       const char *const *headers, size_t n_headers, ppk_sink *out,
                       char *err, size_t err_len);

/* Shuts down the upload sinks among sinks[0..n) (others are skipped) as
 * ppk_sink_upload_shutdown does, all at once: their drains wait together, so the whole
 * takes the longest shutdown_timeout_ms (and the cancelled transfers' ends), not the
 * sum. Their destroy then has nothing left to wait for. */
void ppk__upload_shutdown_sinks(const ppk_sink *sinks, size_t n);
/* Checks an http(s) URL with libcurl's parser: a host, a port in 1..65535 if one is given.
 * 0, or PPK_EINVAL with err saying why (PPK_ENOMEM). */
int ppk__upload_check_url(const char *url, const char *what, char *err, size_t err_len);

/* Datadog: the file read for the container id at sink creation ("/proc/self/cgroup";
 * the tests point it elsewhere), and the id found in such a file's text: the first line
 * "hierarchy:controllers:path" whose path ends with one (64 hex digits, a UUID, an ECS
 * task id; before an optional ".scope"), copied into out as a C string. Its length, 0
 * when none fits in out_len. */
extern const char *ppk__dd_cgroup_path;
size_t ppk__dd_container_id(const char *text, char *out, size_t out_len);

/* Runs curl_global_init once (pthread_once). 0 or PPK_ESYS. */
int ppk__upload_global_init(void);

/* Writes a formatted message into err (when err_len > 0) and returns PPK_EINVAL. */
int ppk__upload_err(char *err, size_t err_len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Environment values: NULL when unset or empty. */
const char *ppk__upload_getenv(const char *name);

/* A string field of a config: PPK_ENULL (the message names `what`) when it is NULL with
 * a non-zero length, else 0. */
int ppk__upload_null(ppk_str s, const char *what, char *err, size_t err_len);

/* The ppk_str fields of a config struct, by name and offset. Sinks check all of them
 * with ppk__upload_nulls first, so that the other checks may read any string. */
typedef struct ppk__upload_field {
    const char *name;
    size_t off;
} ppk__upload_field;
int ppk__upload_nulls(const void *cfg, const ppk__upload_field *f, size_t n, char *err,
                      size_t err_len);

/* Whether a string field of a config is UTF-8 with no NUL or control character (and no
 * byte of `forbid`): 0, PPK_ENULL, PPK_EINVAL (the message names `what`). */
int ppk__upload_check_str(ppk_str s, const char *what, const char *forbid, char *err,
                          size_t err_len);
/* The same check, then a copy NUL-terminated into *out (allocated from m, len + 1 bytes):
 * 0, PPK_ENULL, PPK_EINVAL, PPK_ENOMEM. */
int ppk__upload_str(ppk__mem *m, ppk_str s, const char *what, const char *forbid, char **out,
                    char *err, size_t err_len);
void ppk__upload_str_free(ppk__mem *m, char *s);

/* Cuts s at its first control character or invalid UTF-8 sequence: the process name
 * (cut by the kernel at 15 bytes, maybe inside a character) and the host name must not
 * make a default configuration invalid. */
void ppk__upload_cut_to_text(char *s);
/* The program's name (/proc/self/comm, cut at a comma; "pprofkit" when unknown). */
void ppk__upload_comm(char *out, size_t n);

#endif
